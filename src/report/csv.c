/* The CSV report: one header line, then one line per row, flushed after each
 * so that a partial run leaves a usable file. Quoting follows RFC 4180: a
 * field containing a comma, a double quote, CR or LF is enclosed in double
 * quotes with inner quotes doubled. Lines end in LF. Unknown or non-finite
 * numbers are empty fields; throttle_reasons is hexadecimal ("0x4"). The
 * CSV of fp4bench run --gpus adds one last column, gpu, the CUDA device of
 * the row; the others keep their columns as they were. */
#include "fp4/report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const csv_fields[] = {
    "label", "m", "n", "k", "backend", "variant", "state", "reason", "verified",
    "err_max", "err_norm", "l2", "timing", "copies", "batch", "median_us", "p10_us",
    "p90_us", "min_us", "noise", "launch_median_us", "tflops", "gbps", "floor_us",
    "pct_roofline", "pct_peak", "ratio", "ratio_lo", "ratio_hi", "sm_clock_mhz",
    "power_w", "temp_c", "throttle_reasons", "low_clock_samples", "prepare_ms"};

/* After those, in the CSV of fp4bench moe (fp4_csv_write_header_moe), whose
 * rows carry them (docs/JSON.md). */
static const char *const csv_moe_fields[] = {
    "moe_model", "moe_step", "moe_mode", "moe_routing", "tokens", "active_experts",
    "tokens_per_expert_min", "tokens_per_expert_median", "tokens_per_expert_max",
    "weight_bytes", "tokens_per_s", "pct_bandwidth", "steps"};

/* The last column of the CSV of fp4bench run --gpus. */
static const char csv_gpu_field[] = "gpu";

/* Writer state for one line: the FILE and whether a field was written yet. */
typedef struct csv_line {
    FILE *f;
    int nfields;
} csv_line;

/* One text field of at most cap bytes (bounded even if unterminated),
 * quoted when needed. */
static void put_text(csv_line *L, const char *s, size_t cap)
{
    size_t len = strnlen(s, cap);
    int quote = 0;
    if (L->nfields++ > 0) fputc(',', L->f);
    for (size_t i = 0; i < len; i++)
        if (s[i] == ',' || s[i] == '"' || s[i] == '\n' || s[i] == '\r') quote = 1;
    if (!quote) {
        fwrite(s, 1, len, L->f);
        return;
    }
    fputc('"', L->f);
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '"') fputc('"', L->f);
        fputc(s[i], L->f);
    }
    fputc('"', L->f);
}
#define PUT_TEXT(L, arr) put_text((L), (arr), sizeof(arr))

/* A double with 9 significant digits; empty when not finite. */
static void put_num(csv_line *L, double v)
{
    if (L->nfields++ > 0) fputc(',', L->f);
    if (isfinite(v)) fprintf(L->f, "%.9g", v);
}

static void put_int(csv_line *L, long long v)
{
    if (L->nfields++ > 0) fputc(',', L->f);
    fprintf(L->f, "%lld", v);
}

static void put_empty(csv_line *L)
{
    if (L->nfields++ > 0) fputc(',', L->f);
}

/* End the line, flush, and turn any stream error into FP4_ERR_IO. */
static fp4_status end_line(csv_line *L, fp4_err *err)
{
    fputc('\n', L->f);
    if (fflush(L->f) != 0 || ferror(L->f))
        return fp4_fail(err, FP4_ERR_IO, "cannot write the CSV report: %s", strerror(errno));
    return FP4_OK;
}

fp4_status fp4_csv_write_header(FILE *f, fp4_err *err)
{
    csv_line L = {f, 0};
    if (!f) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_csv_write_header: NULL file");
    for (size_t i = 0; i < sizeof csv_fields / sizeof csv_fields[0]; i++)
        put_text(&L, csv_fields[i], strlen(csv_fields[i]) + 1);
    return end_line(&L, err);
}

fp4_status fp4_csv_write_header_gpus(FILE *f, fp4_err *err)
{
    csv_line L = {f, 0};
    if (!f) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_csv_write_header_gpus: NULL file");
    for (size_t i = 0; i < sizeof csv_fields / sizeof csv_fields[0]; i++)
        put_text(&L, csv_fields[i], strlen(csv_fields[i]) + 1);
    put_text(&L, csv_gpu_field, sizeof csv_gpu_field);
    return end_line(&L, err);
}

fp4_status fp4_csv_write_header_moe(FILE *f, fp4_err *err)
{
    csv_line L = {f, 0};
    if (!f) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_csv_write_header_moe: NULL file");
    for (size_t i = 0; i < sizeof csv_fields / sizeof csv_fields[0]; i++)
        put_text(&L, csv_fields[i], strlen(csv_fields[i]) + 1);
    for (size_t i = 0; i < sizeof csv_moe_fields / sizeof csv_moe_fields[0]; i++)
        put_text(&L, csv_moe_fields[i], strlen(csv_moe_fields[i]) + 1);
    return end_line(&L, err);
}

/* The MoE columns of a row of fp4bench moe (csv_moe_fields); steps as
 * "name=us;name=us". Nothing for a GEMM row. */
static void put_moe(csv_line *L, const fp4_row *x, int timed)
{
    const fp4_row_moe *m = &x->moe;
    char steps[FP4_MOE_ROW_STEPS * (FP4_NAME_LEN + 24)];
    size_t len = 0;
    if (!m->present) return;
    PUT_TEXT(L, m->model);
    PUT_TEXT(L, m->step);
    PUT_TEXT(L, m->mode);
    PUT_TEXT(L, m->routing);
    put_int(L, (long long)m->tokens);
    put_int(L, m->active_experts);
    put_int(L, m->tokens_min);
    put_num(L, m->tokens_median);
    put_int(L, m->tokens_max);
    put_num(L, m->weight_bytes);
    put_num(L, timed ? m->tokens_per_s : NAN);
    put_num(L, timed && m->pct_bandwidth >= 0 ? m->pct_bandwidth : NAN);
    steps[0] = '\0';
    for (int i = 0; i < m->nsteps && i < FP4_MOE_ROW_STEPS && len < sizeof steps; i++) {
        int w = snprintf(steps + len, sizeof steps - len, "%s%.*s=%.9g", i ? ";" : "",
                         (int)strnlen(m->steps[i].name, sizeof m->steps[i].name), m->steps[i].name,
                         m->steps[i].us);
        if (w < 0) break;
        len += (size_t)w;
    }
    put_text(L, steps, sizeof steps);
}

/* One row in the order of csv_fields, then the gpu column when with_gpu.
 * Timing fields are empty for rows that were not timed, ratio fields without
 * a ratio, telemetry fields without telemetry. */
static fp4_status write_row(FILE *f, const fp4_row *x, int with_gpu, fp4_err *err)
{
    csv_line L = {f, 0};
    const char *state;
    int timed;
    if (!f || !x) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_csv_write_row: NULL argument");
    timed = x->state == FP4_ROW_OK && x->t.count > 0;
    state = fp4_row_state_name(x->state);

    PUT_TEXT(&L, x->label);
    put_int(&L, (long long)x->shape.m);
    put_int(&L, (long long)x->shape.n);
    put_int(&L, (long long)x->shape.k);
    PUT_TEXT(&L, x->backend);
    PUT_TEXT(&L, x->variant);
    put_text(&L, state, strlen(state) + 1);
    PUT_TEXT(&L, x->reason);
    put_int(&L, x->verified);
    put_num(&L, x->err_max);
    put_num(&L, x->err_norm);
    PUT_TEXT(&L, x->l2);
    PUT_TEXT(&L, x->timing);
    put_int(&L, x->copies);
    put_int(&L, x->batch);
    put_num(&L, timed ? x->t.median : NAN);
    put_num(&L, timed ? x->t.p10 : NAN);
    put_num(&L, timed ? x->t.p90 : NAN);
    put_num(&L, timed ? x->t.min : NAN);
    put_num(&L, timed ? x->t.noise : NAN);
    put_num(&L, x->t_launch.count > 0 ? x->t_launch.median : NAN);
    put_num(&L, timed ? x->tflops : NAN);
    put_num(&L, timed ? x->gbps : NAN);
    put_num(&L, x->floor_us);
    put_num(&L, timed ? x->pct_roofline : NAN);
    put_num(&L, timed && x->pct_peak >= 0 ? x->pct_peak : NAN);
    put_num(&L, x->has_ratio ? x->ratio : NAN);
    put_num(&L, x->has_ratio ? x->ratio_lo : NAN);
    put_num(&L, x->has_ratio ? x->ratio_hi : NAN);
    if (x->tel.valid) {
        put_num(&L, x->tel.sm_clock_mhz);
        put_num(&L, x->tel.power_w);
        put_num(&L, x->tel.temp_c);
        if (L.nfields++ > 0) fputc(',', f);
        fprintf(f, "0x%llx", x->tel.throttle_reasons);
        put_int(&L, x->tel.low_clock_samples);
    } else {
        for (int i = 0; i < 5; i++) put_empty(&L);
    }
    put_num(&L, x->prepare_ms);
    put_moe(&L, x, timed);
    if (with_gpu) put_int(&L, x->gpu);
    return end_line(&L, err);
}

fp4_status fp4_csv_write_row(FILE *f, const fp4_row *x, fp4_err *err)
{
    return write_row(f, x, 0, err);
}

fp4_status fp4_csv_write_row_gpus(FILE *f, const fp4_row *x, fp4_err *err)
{
    return write_row(f, x, 1, err);
}
