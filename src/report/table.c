/* The human-readable report: header lines (build, machine, ceilings,
 * settings) and the aligned results table. Output only; nothing here fails
 * (write errors show up on the FILE, which the caller can check). */
#include "fp4/report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define CELL_LEN 128
#define REASON_MAX 60 /* characters of a reason shown in the table */

enum {
    C_LABEL, C_M, C_N, C_K, C_BACKEND, /* identity: present on every row */
    C_MEDIAN, C_LAUNCH, C_NOISE, C_RATIO, C_TFLOPS, C_GBPS, C_ROOF, C_VERIFIED, C_FLAGS,
    NCOL
};

static const char *const col_title[NCOL] = {
    "label", "M", "N", "K", "backend", "median us", "launch us", "noise", "vs", "TFLOP/s",
    "GB/s", "% roof", "verified", "flags"};
static const int col_left[NCOL] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 1};

typedef struct row_cells {
    char c[NCOL][CELL_LEN];
    char span[FP4_ERR_MSG_LEN + 32]; /* non-empty: replaces C_MEDIAN.. (not ok rows);
                                      * room for a whole reason (verbose) */
} row_cells;

typedef struct table_layout {
    int show[NCOL];
    int width[NCOL];
    char ratio_title[FP4_NAME_LEN + 8];
    int any_timeout, any_low_clock, any_ratio, any_verified, any_launch;
    int any_warm, any_power, any_thermal, any_interrupted;
} table_layout;

/* A time in us with about 4 significant digits; "-" when not finite. */
static void fmt_time(char *b, size_t n, double v)
{
    if (!isfinite(v)) snprintf(b, n, "-");
    else if (fabs(v) < 10.0) snprintf(b, n, "%.3f", v);
    else if (fabs(v) < 100.0) snprintf(b, n, "%.2f", v);
    else if (fabs(v) < 1000.0) snprintf(b, n, "%.1f", v);
    else snprintf(b, n, "%.0f", v);
}

/* A rate with about 3 significant digits; "-" when not finite or negative
 * (negative marks "unknown" in the row fields). */
static void fmt_rate(char *b, size_t n, double v)
{
    if (!isfinite(v) || v < 0.0) snprintf(b, n, "-");
    else if (v >= 100.0) snprintf(b, n, "%.0f", v);
    else if (v >= 10.0) snprintf(b, n, "%.1f", v);
    else if (v >= 1.0) snprintf(b, n, "%.2f", v);
    else if (v == 0.0) snprintf(b, n, "0");
    else snprintf(b, n, "%.3g", v);
}

/* A percentage value v (already x100): "12%" / "3.4%"; "-" when unknown. */
static void fmt_pct(char *b, size_t n, double v)
{
    if (!isfinite(v) || v < 0.0) snprintf(b, n, "-");
    else if (v >= 10.0) snprintf(b, n, "%.0f%%", v);
    else snprintf(b, n, "%.1f%%", v);
}

/* Copy s into b (size n) keeping at most max characters; a cut string ends
 * in "..." so that truncation is visible. An empty s becomes "(no reason
 * given)": a failed row never prints nothing. */
static void fmt_reason(char *b, size_t n, const char *s, size_t max)
{
    size_t len;
    if (!s || !s[0]) s = "(no reason given)";
    len = strlen(s);
    if (max + 1 > n) max = n - 1;
    if (len <= max) {
        memcpy(b, s, len + 1);
        return;
    }
    snprintf(b, n, "%.*s...", (int)(max - 3), s);
}

/* Two rows belong to one case when label and shape are equal. */
static int same_case(const fp4_row *a, const fp4_row *b)
{
    return strcmp(a->label, b->label) == 0 && a->shape.m == b->shape.m &&
           a->shape.n == b->shape.n && a->shape.k == b->shape.k;
}

/* Format every cell of one row. baseline may be "". verbose: the whole
 * reason of a row that is not ok, else REASON_MAX characters of it. */
static void make_cells(const fp4_row *w, const char *baseline, int verbose, row_cells *rc)
{
    char reason[FP4_ERR_MSG_LEN];
    memset(rc, 0, sizeof *rc);
    snprintf(rc->c[C_LABEL], CELL_LEN, "%s", w->label[0] ? w->label : "-");
    snprintf(rc->c[C_M], CELL_LEN, "%lld", (long long)w->shape.m);
    snprintf(rc->c[C_N], CELL_LEN, "%lld", (long long)w->shape.n);
    snprintf(rc->c[C_K], CELL_LEN, "%lld", (long long)w->shape.k);
    snprintf(rc->c[C_BACKEND], CELL_LEN, "%s", w->backend[0] ? w->backend : "?");

    if (w->state != FP4_ROW_OK) {
        fmt_reason(reason, sizeof reason, w->reason, verbose ? sizeof reason - 1 : REASON_MAX);
        snprintf(rc->span, sizeof rc->span, "%s: %s", fp4_row_state_name(w->state), reason);
        return;
    }

    fmt_time(rc->c[C_MEDIAN], CELL_LEN, w->t.count > 0 ? w->t.median : NAN);
    fmt_time(rc->c[C_LAUNCH], CELL_LEN, w->t_launch.count > 0 ? w->t_launch.median : NAN);
    if (w->t.count <= 0 || isnan(w->t.noise)) snprintf(rc->c[C_NOISE], CELL_LEN, "-");
    else if (isinf(w->t.noise)) snprintf(rc->c[C_NOISE], CELL_LEN, "inf");
    else snprintf(rc->c[C_NOISE], CELL_LEN, "%.*f%%", w->t.noise < 0.1 ? 2 : 1,
                  100.0 * w->t.noise);

    if (w->has_ratio) {
        char v[24], lo[24], hi[24];
        snprintf(v, sizeof v, "%.2f", w->ratio);
        snprintf(lo, sizeof lo, "%.2f", w->ratio_lo);
        snprintf(hi, sizeof hi, "%.2f", w->ratio_hi);
        snprintf(rc->c[C_RATIO], CELL_LEN, "%sx [%s, %s]", v, isfinite(w->ratio_lo) ? lo : "-",
                 isfinite(w->ratio_hi) ? hi : "-");
    } else if (baseline[0] && strcmp(baseline, w->backend) == 0) {
        snprintf(rc->c[C_RATIO], CELL_LEN, "baseline");
    } else {
        snprintf(rc->c[C_RATIO], CELL_LEN, "-");
    }

    fmt_rate(rc->c[C_TFLOPS], CELL_LEN, w->t.count > 0 && w->flops > 0 ? w->tflops : NAN); /* quantize: no FLOPs */
    fmt_rate(rc->c[C_GBPS], CELL_LEN, w->t.count > 0 ? w->gbps : NAN);
    fmt_pct(rc->c[C_ROOF], CELL_LEN, w->t.count > 0 ? w->pct_roofline : NAN);

    if (w->verified == -1) snprintf(rc->c[C_VERIFIED], CELL_LEN, "reference");
    else if (w->verified == 1 && isfinite(w->err_norm))
        snprintf(rc->c[C_VERIFIED], CELL_LEN, "ok %.1e", w->err_norm);
    else if (w->verified == 1) snprintf(rc->c[C_VERIFIED], CELL_LEN, "ok");
    else snprintf(rc->c[C_VERIFIED], CELL_LEN, "no");

    snprintf(rc->c[C_FLAGS], CELL_LEN, "%s%s%s%s%s%s", w->timed_out ? "T" : "",
             (w->tel.valid && w->tel.low_clock_samples > 0) ? "C" : "",
             strcmp(w->l2, "warm") == 0 ? "W" : "",
             (w->tel.valid && w->tel.power_cap_samples > 0) ? "P" : "",
             (w->tel.valid && (w->tel.thermal_samples > 0 || w->tel.hw_slowdown_samples > 0)) ? "H"
                                                                                               : "",
             w->interrupted ? "I" : "");
}

/* Decide the shown columns and their widths from every row (pass 1). */
static void layout_table(const fp4_report *r, int verbose, table_layout *L)
{
    row_cells rc;
    memset(L, 0, sizeof *L);
    snprintf(L->ratio_title, sizeof L->ratio_title, "vs %s",
             r->set.baseline[0] ? r->set.baseline : "baseline");
    for (int c = 0; c < NCOL; c++) {
        L->show[c] = 1;
        L->width[c] = (int)strlen(c == C_RATIO ? L->ratio_title : col_title[c]);
    }
    for (int i = 0; i < r->nrows; i++) {
        const fp4_row *w = &r->rows[i];
        make_cells(w, r->set.baseline, verbose, &rc);
        for (int c = 0; c < NCOL; c++) {
            int len = (int)strlen(rc.c[c]);
            if (len > L->width[c]) L->width[c] = len;
        }
        if (w->state == FP4_ROW_OK) {
            L->any_timeout |= w->timed_out != 0;
            L->any_low_clock |= w->tel.valid && w->tel.low_clock_samples > 0;
            L->any_ratio |= w->has_ratio != 0;
            L->any_verified |= w->verified == 1;
            L->any_launch |= w->t_launch.count > 0;
            L->any_warm |= strcmp(w->l2, "warm") == 0;
            L->any_power |= w->tel.valid && w->tel.power_cap_samples > 0;
            L->any_thermal |= w->tel.valid &&
                              (w->tel.thermal_samples > 0 || w->tel.hw_slowdown_samples > 0);
            L->any_interrupted |= w->interrupted != 0;
        }
    }
    L->show[C_RATIO] = r->set.baseline[0] != '\0' || L->any_ratio;
    L->show[C_FLAGS] = L->any_timeout || L->any_low_clock || L->any_warm || L->any_power ||
                       L->any_thermal || L->any_interrupted;
    /* plain-launch time (launch gaps included) only when it was measured */
    L->show[C_LAUNCH] = L->any_launch;
}

/* Append s padded to width (left or right aligned) at line[*len], bounded by
 * cap. */
static void put_cell(char *line, size_t cap, size_t *len, const char *s, int width, int left)
{
    int n;
    if (*len + 1 >= cap) return;
    n = snprintf(line + *len, cap - *len, left ? "%-*s" : "%*s", width, s);
    if (n > 0) *len = *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

/* Print one line of cells (or the titles when rc is NULL); a row with a span
 * prints it after the backend column instead of the numbers. Trailing blanks
 * are trimmed. */
static void print_line(FILE *f, const table_layout *L, const row_cells *rc)
{
    char line[NCOL * (CELL_LEN + 2) + sizeof rc->span + 8];
    size_t len = 0;
    int first = 1;
    line[0] = '\0';
    for (int c = 0; c < NCOL; c++) {
        if (!L->show[c]) continue;
        if (!first) put_cell(line, sizeof line, &len, "", 2, 1);
        first = 0;
        if (rc && rc->span[0] && c == C_MEDIAN) {
            put_cell(line, sizeof line, &len, rc->span, 0, 1);
            break;
        }
        put_cell(line, sizeof line, &len,
                 rc ? rc->c[c] : (c == C_RATIO ? L->ratio_title : col_title[c]), L->width[c],
                 col_left[c]);
    }
    while (len > 0 && line[len - 1] == ' ') len--;
    line[len] = '\0';
    fprintf(f, "%s\n", line);
}

/* The version string v.major.minor of CUDA's integer encoding (13000 = 13.0). */
static void fmt_cuda_version(char *b, size_t n, int v)
{
    if (v <= 0) snprintf(b, n, "?");
    else snprintf(b, n, "%d.%d", v / 1000, (v % 1000) / 10);
}

/* ", bf16 834 TFLOP/s (sustained 730)": the interleaved rate the roofline
 * uses, then the back-to-back one when known (files from before it have
 * none). always: print even when not measured (0). */
static void print_rate_ceiling(FILE *f, const char *what, double rate, double sustained,
                               int always)
{
    char b1[32], b2[32];
    if (!always && !(rate > 0)) return;
    fmt_rate(b1, sizeof b1, rate);
    fprintf(f, ", %s %s TFLOP/s", what, b1);
    if (sustained > 0) {
        fmt_rate(b2, sizeof b2, sustained);
        fprintf(f, " (sustained %s)", b2);
    }
}

/* The header lines; every line starts with a word and a colon so that
 * scripts can pick them out. */
void fp4_report_print_header(FILE *f, const fp4_report *r)
{
    const fp4_device_info *d;
    const fp4_ceilings *ce;
    const fp4_settings *s;
    char drv[32], rt[32], b1[32], b2[32], b3[32];
    if (!f || !r) return;
    d = &r->dev;
    ce = &r->ceil;
    s = &r->set;

    fprintf(f, "fp4bench: %s (commit %s)", r->version[0] ? r->version : "?",
            r->commit[0] ? r->commit : "unknown");
    if (r->started[0]) fprintf(f, ", started %s", r->started);
    fputc('\n', f);
    fprintf(f, "host: %s, %d CPU threads\n", r->host[0] ? r->host : "?", d->cpu_threads);
    if (r->command[0]) fprintf(f, "command: %s\n", r->command);

    if (!d->present) {
        fprintf(f, "GPU: none (%s)\n", d->why_absent[0] ? d->why_absent : "no reason given");
    } else {
        fmt_cuda_version(drv, sizeof drv, d->driver_version);
        fmt_cuda_version(rt, sizeof rt, d->runtime_version);
        fprintf(f, "GPU: %s, sm_%d%d, %d SMs, L2 %.0f MiB, memory %.1f GiB, driver %s",
                d->name[0] ? d->name : "?", d->cc_major, d->cc_minor, d->sms,
                d->l2_bytes / 1048576.0, d->mem_bytes / 1073741824.0, drv);
        if (d->nvml && d->driver_string[0]) fprintf(f, " (%s)", d->driver_string);
        fprintf(f, ", runtime %s", rt);
        if (d->sm_clock_max_mhz > 0) fprintf(f, ", SM clock max %.0f MHz", d->sm_clock_max_mhz);
        fputc('\n', f);
    }

    fputs("ceilings: ", f);
    if (ce->measured) {
        fmt_rate(b1, sizeof b1, ce->read_gbps);
        fprintf(f, "measured read %s GB/s", b1);
        print_rate_ceiling(f, "bf16", ce->bf16_tflops, ce->bf16_sustained_tflops, 1);
        print_rate_ceiling(f, "fp8", ce->fp8_tflops, ce->fp8_sustained_tflops, 0);
    } else {
        fputs("not measured", f);
    }
    if (ce->cpu_gflops > 0) {
        fmt_rate(b1, sizeof b1, ce->cpu_gflops);
        fprintf(f, ", CPU reference %s GFLOP/s", b1);
    }
    if (d->present && (d->peak_bf16_tflops > 0 || d->peak_bw_gbps > 0)) {
        fmt_rate(b1, sizeof b1, d->peak_bf16_tflops);
        fmt_rate(b2, sizeof b2, d->peak_fp8_tflops);
        fmt_rate(b3, sizeof b3, d->peak_bw_gbps);
        fprintf(f, "; datasheet bf16 %s, fp8 %s TFLOP/s, %s GB/s", b1, b2, b3);
    }
    fputc('\n', f);
    if (ce->l2.measured)
        fprintf(f, "L2 check: a %.0f MiB read hot %.0f GB/s, rotated over %.0f MiB %.0f GB/s, after "
                   "a flush %.0f GB/s: rotation %s\n",
                ce->l2.buffer_bytes / 1048576.0, ce->l2.hot_gbps, ce->l2.rotation_bytes / 1048576.0,
                ce->l2.rotated_gbps, ce->l2.flushed_gbps,
                ce->l2.cold ? "cold (at the flushed rate)" : "NOT cold (faster than after a flush)");

    fprintf(f, "settings: data %s, L2 %s, timing %s%s, warmup %.0f ms, noise target %.2g%%, "
               "min %d samples, min time %.3g s, max time %.3g s, seed %llu",
            fp4_data_kind_name(s->data), s->hot ? "hot" : "cold",
            !d->present ? "host" : (s->use_graphs ? "graph" : "launch"),
            (d->present && s->measure_launch && s->use_graphs) ? " (+launch)" : "", s->warmup_ms,
            100.0 * s->stop.noise_target, s->stop.min_samples, s->stop.min_time_s,
            s->stop.max_time_s, (unsigned long long)s->seed);
    if (s->baseline[0]) fprintf(f, ", baseline %s", s->baseline);
    if (d->present)
        fprintf(f, ", baseline tuning %s, min batch %d", s->baseline_tuning ? "on" : "off",
                s->min_batch);
    if (s->verify_only) fputs(", verify only", f);
    if (!s->verify_only)
        fprintf(f, ", round order shuffled (seed %llu)%s", (unsigned long long)s->order_seed,
                s->time_reference ? ", references timed" : "");
    fputc('\n', f);
}

/* The table: one line per row, rows grouped by case (label + shape) in the
 * order each case first appears, groups separated by a blank line, then the
 * legend lines for whatever markers appeared. */
void fp4_report_print_table(FILE *f, const fp4_report *r)
{
    fp4_report_print_table_verbose(f, r, 0);
}

void fp4_report_print_table_verbose(FILE *f, const fp4_report *r, int verbose)
{
    table_layout L;
    row_cells rc;
    int groups = 0;
    if (!f || !r) return;
    if (r->nrows <= 0 || !r->rows) {
        fputs("(no results)\n", f);
        return;
    }
    layout_table(r, verbose, &L);
    print_line(f, &L, NULL);

    for (int i = 0; i < r->nrows; i++) {
        int seen = 0;
        for (int k = 0; k < i && !seen; k++) seen = same_case(&r->rows[k], &r->rows[i]);
        if (seen) continue; /* printed with its group */
        if (groups++ > 0) fputc('\n', f);
        for (int j = i; j < r->nrows; j++) {
            if (!same_case(&r->rows[i], &r->rows[j])) continue;
            make_cells(&r->rows[j], r->set.baseline, verbose, &rc);
            print_line(f, &L, &rc);
        }
    }

    fputc('\n', f);
    if (L.show[C_RATIO])
        fprintf(f, "%s: %s's median time / this time (>1: faster), with its 95%% CI\n",
                L.ratio_title, r->set.baseline[0] ? r->set.baseline : "the baseline");
    fputs("noise: half-width of the 95% CI of the median, relative to it\n", f);
    if (L.any_launch)
        fputs("launch us: the same calls as plain launches, launch gaps included (median us "
              "is in CUDA graphs)\n", f);
    if (L.any_verified)
        fputs("verified: ok <||D-R||/||R||> against the exact reference\n", f);
    if (L.any_timeout)
        fputs("flag T: timed out before reaching the noise target (time limit)\n", f);
    if (L.any_low_clock)
        fputs("flag C: some samples ran with the SM clock under 90% of the warm-up clock\n", f);
    if (L.any_warm)
        fputs("flag W: warm L2: the operand copies span less than 3x L2 (copy or memory limit)\n", f);
    if (L.any_power)
        fputs("flag P: NVML reported the power cap holding the clock back during samples\n", f);
    if (L.any_thermal)
        fputs("flag H: NVML reported a thermal limit or hardware slowdown during samples\n", f);
    if (L.any_interrupted)
        fputs("flag I: timing interrupted (Ctrl-C): statistics of the samples taken\n", f);
    if (r->interrupted) fputs("interrupted: the run was stopped; later cases were not measured\n", f);
}
