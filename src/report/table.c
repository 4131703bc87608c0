/* The human-readable report: header lines (build, machine, ceilings,
 * settings) and the aligned results table. Output only; nothing here fails
 * (write errors show up on the FILE, which the caller can check). */
#include "fp4/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "multigpu/pergpu.h"
#include "report/fmt.h"

#define CELL_LEN 128
#define REASON_MAX 60 /* characters of a reason shown in the table */

enum {
    C_LABEL, C_M, C_N, C_K, C_BACKEND, C_GPU, /* identity: present on every row */
    C_MEDIAN, C_LAUNCH, C_NOISE, C_RATIO, C_TFLOPS, C_GBPS, C_ROOF, C_VERIFIED, C_FLAGS,
    NCOL
};

static const char *const col_title[NCOL] = {
    "label", "M", "N", "K", "backend", "gpu", "median us", "launch us", "noise", "vs", "TFLOP/s",
    "GB/s", "% roof", "verified", "flags"};
static const int col_left[NCOL] = {1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1};

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
    int any_warm, any_power, any_thermal, any_interrupted, any_slow;
    /* a multi-GPU report: the gpu column, the S flag, rows of a case by
     * backend then GPU; marks NULL otherwise */
    const fp4_gpu_analysis *gpus;
} table_layout;

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
 * reason of a row that is not ok, else REASON_MAX characters of it. slow: the
 * row is slow beside the other GPUs (flag S). */
static void make_cells(const fp4_row *w, const char *baseline, int verbose, int slow,
                       row_cells *rc)
{
    char reason[FP4_ERR_MSG_LEN];
    memset(rc, 0, sizeof *rc);
    snprintf(rc->c[C_LABEL], CELL_LEN, "%s", w->label[0] ? w->label : "-");
    snprintf(rc->c[C_M], CELL_LEN, "%lld", (long long)w->shape.m);
    snprintf(rc->c[C_N], CELL_LEN, "%lld", (long long)w->shape.n);
    snprintf(rc->c[C_K], CELL_LEN, "%lld", (long long)w->shape.k);
    snprintf(rc->c[C_BACKEND], CELL_LEN, "%s", w->backend[0] ? w->backend : "?");
    snprintf(rc->c[C_GPU], CELL_LEN, "%d", w->gpu);

    if (w->state != FP4_ROW_OK) {
        fmt_reason(reason, sizeof reason, w->reason, verbose ? sizeof reason - 1 : REASON_MAX);
        snprintf(rc->span, sizeof rc->span, "%s: %s", fp4_row_state_name(w->state), reason);
        return;
    }

    fp4_fmt_us(rc->c[C_MEDIAN], CELL_LEN, w->t.count > 0 ? w->t.median : NAN);
    fp4_fmt_us(rc->c[C_LAUNCH], CELL_LEN, w->t_launch.count > 0 ? w->t_launch.median : NAN);
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

    fp4_fmt_rate(rc->c[C_TFLOPS], CELL_LEN, w->t.count > 0 && w->flops > 0 ? w->tflops : NAN); /* quantize: no FLOPs */
    fp4_fmt_rate(rc->c[C_GBPS], CELL_LEN, w->t.count > 0 ? w->gbps : NAN);
    fmt_pct(rc->c[C_ROOF], CELL_LEN, w->t.count > 0 ? w->pct_roofline : NAN);

    if (w->verified == -1) snprintf(rc->c[C_VERIFIED], CELL_LEN, "reference");
    else if (w->verified == 1 && isfinite(w->err_norm))
        snprintf(rc->c[C_VERIFIED], CELL_LEN, "ok %.1e", w->err_norm);
    else if (w->verified == 1) snprintf(rc->c[C_VERIFIED], CELL_LEN, "ok");
    else snprintf(rc->c[C_VERIFIED], CELL_LEN, "no");

    snprintf(rc->c[C_FLAGS], CELL_LEN, "%s%s%s%s%s%s%s", slow ? "S" : "", w->timed_out ? "T" : "",
             (w->tel.valid && w->tel.low_clock_samples > 0) ? "C" : "",
             strcmp(w->l2, "warm") == 0 ? "W" : "",
             (w->tel.valid && w->tel.power_cap_samples > 0) ? "P" : "",
             (w->tel.valid && (w->tel.thermal_samples > 0 || w->tel.hw_slowdown_samples > 0)) ? "H"
                                                                                               : "",
             w->interrupted ? "I" : "");
}

/* Whether row i is slow beside the other GPUs (a multi-GPU table only). */
static int row_slow(const table_layout *L, int i)
{
    return L->gpus && i < L->gpus->nrows && L->gpus->marks[i].slow;
}

/* Decide the shown columns and their widths from every row (pass 1). gpus:
 * the comparison of a multi-GPU report, or NULL. */
static void layout_table(const fp4_report *r, int verbose, const fp4_gpu_analysis *gpus,
                         table_layout *L)
{
    row_cells rc;
    memset(L, 0, sizeof *L);
    L->gpus = gpus;
    snprintf(L->ratio_title, sizeof L->ratio_title, "vs %s",
             r->set.baseline[0] ? r->set.baseline : "baseline");
    for (int c = 0; c < NCOL; c++) {
        L->show[c] = 1;
        L->width[c] = (int)strlen(c == C_RATIO ? L->ratio_title : col_title[c]);
    }
    for (int i = 0; i < r->nrows; i++) {
        const fp4_row *w = &r->rows[i];
        make_cells(w, r->set.baseline, verbose, row_slow(L, i), &rc);
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
            L->any_slow |= row_slow(L, i);
        }
    }
    L->show[C_GPU] = gpus != NULL;
    L->show[C_RATIO] = r->set.baseline[0] != '\0' || L->any_ratio;
    L->show[C_FLAGS] = L->any_timeout || L->any_low_clock || L->any_warm || L->any_power ||
                       L->any_thermal || L->any_interrupted || L->any_slow;
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

/* ", bf16 834 TFLOP/s (sustained 730)": the interleaved rate the roofline
 * uses, then the back-to-back one when known (files from before it have
 * none). always: print even when not measured (0). */
static void print_rate_ceiling(FILE *f, const char *what, double rate, double sustained,
                               int always)
{
    char b1[32], b2[32];
    if (!always && !(rate > 0)) return;
    fp4_fmt_rate(b1, sizeof b1, rate);
    fprintf(f, ", %s %s TFLOP/s", what, b1);
    if (sustained > 0) {
        fp4_fmt_rate(b2, sizeof b2, sustained);
        fprintf(f, " (sustained %s)", b2);
    }
}

/* The ceilings of one device: "measured read ... GB/s, bf16 ..." and the
 * datasheet peaks (no line end). */
static void print_ceilings(FILE *f, const fp4_ceilings *ce, const fp4_device_info *d)
{
    char b1[32], b2[32], b3[32];
    if (ce->measured) {
        fp4_fmt_rate(b1, sizeof b1, ce->read_gbps);
        fprintf(f, "measured read %s GB/s", b1);
        print_rate_ceiling(f, "bf16", ce->bf16_tflops, ce->bf16_sustained_tflops, 1);
        print_rate_ceiling(f, "fp8", ce->fp8_tflops, ce->fp8_sustained_tflops, 0);
    } else {
        fputs("not measured", f);
    }
    if (ce->cpu_gflops > 0) {
        fp4_fmt_rate(b1, sizeof b1, ce->cpu_gflops);
        fprintf(f, ", CPU reference %s GFLOP/s", b1);
    }
    if (d->present && (d->peak_bf16_tflops > 0 || d->peak_bw_gbps > 0)) {
        fp4_fmt_rate(b1, sizeof b1, d->peak_bf16_tflops);
        fp4_fmt_rate(b2, sizeof b2, d->peak_fp8_tflops);
        fp4_fmt_rate(b3, sizeof b3, d->peak_bw_gbps);
        fprintf(f, "; datasheet bf16 %s, fp8 %s TFLOP/s, %s GB/s", b1, b2, b3);
    }
}

/* The coldness check of one device (no line end). */
static void print_l2_check(FILE *f, const fp4_l2_check *l2)
{
    fprintf(f, "a %.0f MiB read hot %.0f GB/s, rotated over %.0f MiB %.0f GB/s, after "
               "a flush %.0f GB/s: rotation %s",
            l2->buffer_bytes / 1048576.0, l2->hot_gbps, l2->rotation_bytes / 1048576.0,
            l2->rotated_gbps, l2->flushed_gbps,
            l2->cold ? "cold (at the flushed rate)" : "NOT cold (faster than after a flush)");
}

/* One GPU of a multi-GPU run: what it is, its clocks and power limit. */
static void print_gpu_line(FILE *f, const fp4_gpu_run *g)
{
    const fp4_device_info *d = &g->dev;
    fprintf(f, "GPU %d: %s (%s), sm_%d%d, %d SMs, L2 %.0f MiB, memory %.1f GiB", g->x.index,
            d->name[0] ? d->name : "?", g->x.pci_bus_id[0] ? g->x.pci_bus_id : "bus id ?",
            d->cc_major, d->cc_minor, d->sms, d->l2_bytes / 1048576.0, d->mem_bytes / 1073741824.0);
    if (d->sm_clock_max_mhz > 0) fprintf(f, ", SM clock max %.0f MHz", d->sm_clock_max_mhz);
    if (d->mem_clock_max_mhz > 0) fprintf(f, ", memory clock max %.0f MHz", d->mem_clock_max_mhz);
    if (g->x.power_limit_w > 0) fprintf(f, ", power limit %.0f W", g->x.power_limit_w);
    fputc('\n', f);
}

/* The header lines; every line starts with a word and a colon so that
 * scripts can pick them out. */
void fp4_report_print_header(FILE *f, const fp4_report *r)
{
    const fp4_device_info *d;
    const fp4_settings *s;
    char drv[32], rt[32];
    if (!f || !r) return;
    d = &r->dev;
    s = &r->set;

    fprintf(f, "fp4bench: %s (commit %s)", r->version[0] ? r->version : "?",
            r->commit[0] ? r->commit : "unknown");
    if (r->started[0]) fprintf(f, ", started %s", r->started);
    fputc('\n', f);
    fprintf(f, "host: %s, %d CPU threads\n", r->host[0] ? r->host : "?", d->cpu_threads);
    if (r->command[0]) fprintf(f, "command: %s\n", r->command);

    if (!d->present) {
        fprintf(f, "GPU: none (%s)\n", d->why_absent[0] ? d->why_absent : "no reason given");
    } else if (r->ngpus > 0) { /* one line per GPU, the driver once */
        fp4_fmt_cuda_version(drv, sizeof drv, d->driver_version);
        fp4_fmt_cuda_version(rt, sizeof rt, d->runtime_version);
        fprintf(f, "GPUs: %d, run at once, driver %s", r->ngpus, drv);
        if (d->nvml && d->driver_string[0]) fprintf(f, " (%s)", d->driver_string);
        fprintf(f, ", runtime %s\n", rt);
        for (int i = 0; i < r->ngpus && i < FP4_MAX_GPUS; i++) print_gpu_line(f, &r->gpus[i]);
    } else {
        fp4_fmt_cuda_version(drv, sizeof drv, d->driver_version);
        fp4_fmt_cuda_version(rt, sizeof rt, d->runtime_version);
        fprintf(f, "GPU: %s, sm_%d%d, %d SMs, L2 %.0f MiB, memory %.1f GiB, driver %s",
                d->name[0] ? d->name : "?", d->cc_major, d->cc_minor, d->sms,
                d->l2_bytes / 1048576.0, d->mem_bytes / 1073741824.0, drv);
        if (d->nvml && d->driver_string[0]) fprintf(f, " (%s)", d->driver_string);
        fprintf(f, ", runtime %s", rt);
        if (d->sm_clock_max_mhz > 0) fprintf(f, ", SM clock max %.0f MHz", d->sm_clock_max_mhz);
        fputc('\n', f);
    }

    if (r->ngpus > 0) {
        for (int i = 0; i < r->ngpus && i < FP4_MAX_GPUS; i++) {
            fprintf(f, "ceilings: GPU %d: ", r->gpus[i].x.index);
            print_ceilings(f, &r->gpus[i].ceil, &r->gpus[i].dev);
            fputc('\n', f);
        }
        for (int i = 0; i < r->ngpus && i < FP4_MAX_GPUS; i++)
            if (r->gpus[i].ceil.l2.measured) {
                fprintf(f, "L2 check: GPU %d: ", r->gpus[i].x.index);
                print_l2_check(f, &r->gpus[i].ceil.l2);
                fputc('\n', f);
            }
    } else {
        fputs("ceilings: ", f);
        print_ceilings(f, &r->ceil, d);
        fputc('\n', f);
        if (r->ceil.l2.measured) {
            fputs("L2 check: ", f);
            print_l2_check(f, &r->ceil.l2);
            fputc('\n', f);
        }
    }

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

/* A report whose rows come from more than one GPU, or from a --gpus run. */
static int multi_gpu(const fp4_report *r)
{
    if (r->ngpus > 0) return 1;
    for (int i = 1; i < r->nrows; i++)
        if (r->rows[i].gpu != r->rows[0].gpu) return 1;
    return 0;
}

/* CUDA device gpu of a multi-GPU report, or NULL. */
static const fp4_gpu_run *gpu_info(const fp4_report *r, int gpu)
{
    for (int i = 0; i < r->ngpus && i < FP4_MAX_GPUS; i++)
        if (r->gpus[i].x.index == gpu) return &r->gpus[i];
    return NULL;
}

/* "GPU 3 (0000:9a:00.0)", or "GPU 3" when the bus id is unknown. */
static void fmt_gpu(char *b, size_t n, const fp4_report *r, int gpu)
{
    const fp4_gpu_run *g = gpu_info(r, gpu);
    if (g && g->x.pci_bus_id[0]) snprintf(b, n, "GPU %d (%s)", gpu, g->x.pci_bus_id);
    else snprintf(b, n, "GPU %d", gpu);
}

/* What held a throttled row back: "power cap 12 of 40 samples, ...". */
static void fmt_throttle(char *b, size_t n, const fp4_telemetry *t)
{
    size_t len = 0;
    const struct { const char *what; int count; } part[4] = {
        {"power cap", t->power_cap_samples},
        {"thermal limit", t->thermal_samples},
        {"hardware slowdown", t->hw_slowdown_samples},
        {"SM clock under 90% of warm-up", t->low_clock_samples}};
    b[0] = '\0';
    for (int i = 0; i < 4 && len < n; i++) {
        int w;
        if (part[i].count <= 0) continue;
        w = snprintf(b + len, n - len, "%s%s %d of %d samples", len ? ", " : "", part[i].what,
                     part[i].count, t->samples);
        if (w < 0) break;
        len += (size_t)w;
    }
}

/* Per case and backend, the spread of the GPUs' medians, then the GPUs
 * that were slow or throttled in it; then the node summary. */
static void print_spread(FILE *f, const fp4_report *r, const fp4_gpu_analysis *a)
{
    char t1[32], t2[32], t3[32], who[64], why[256];
    int nslow = 0, nthrottled = 0;
    fprintf(f, "\nspread across GPUs: per case and backend, the GPUs' medians min / median / max "
               "us and (max - min) / median\n");
    for (int gi = 0; gi < a->ngroups; gi++) {
        const fp4_gpu_group *g = &a->groups[gi];
        const fp4_row *w0 = &r->rows[g->first_row];
        fprintf(f, "  %s %lldx%lldx%lld %s: ", w0->label[0] ? w0->label : "-",
                (long long)w0->shape.m, (long long)w0->shape.n, (long long)w0->shape.k,
                w0->backend);
        if (g->timed == 0) {
            fprintf(f, "not timed on any of %d GPU%s\n", g->rows, g->rows == 1 ? "" : "s");
        } else {
            fp4_fmt_us(t1, sizeof t1, g->min_us);
            fp4_fmt_us(t2, sizeof t2, g->median_us);
            fp4_fmt_us(t3, sizeof t3, g->max_us);
            fprintf(f, "%s / %s / %s us", t1, t2, t3);
            if (isfinite(g->spread)) fprintf(f, ", spread %.1f%%", 100.0 * g->spread);
            fprintf(f, ", %d of %d GPUs timed\n", g->timed, g->rows);
        }
        for (int i = 0; i < a->nrows; i++) {
            const fp4_gpu_mark *m = &a->marks[i];
            if (m->group != gi || !(m->slow || m->throttled)) continue;
            fmt_gpu(who, sizeof who, r, r->rows[i].gpu);
            if (m->slow)
                fprintf(f, "    slow: %s %.1f%% over the GPUs' median (more than %.1f%%: 3%% or "
                           "its noise and the median noise)\n",
                        who, 100.0 * m->excess, 100.0 * m->threshold);
            if (m->throttled) {
                fmt_throttle(why, sizeof why, &r->rows[i].tel);
                fprintf(f, "    throttled: %s: %s\n", who, why);
            }
        }
    }

    fprintf(f, "\nnode summary: %d GPU%s; time / the GPUs' median is the geometric mean over the "
               "cases and backends timed on two GPUs or more\n",
            a->ngpus, a->ngpus == 1 ? "" : "s");
    for (int k = 0; k < a->ngpus; k++) {
        const fp4_gpu_summary *s = &a->gpu[k];
        const fp4_gpu_run *g = gpu_info(r, s->gpu);
        const fp4_device_info *d = g ? &g->dev : NULL;
        fmt_gpu(who, sizeof who, r, s->gpu);
        fprintf(f, "  %s", who);
        if (d && d->name[0]) fprintf(f, " %s", d->name);
        if (isfinite(s->ratio_geomean))
            fprintf(f, ": time / median %.3f over %d", s->ratio_geomean, s->compared);
        else
            fprintf(f, ": not compared");
        fprintf(f, ", %d of %d rows timed", s->timed, s->rows);
        if (s->slow_rows) fprintf(f, ", %d slow", s->slow_rows);
        if (s->throttled_rows) fprintf(f, ", %d throttled", s->throttled_rows);
        if (d && d->sm_clock_max_mhz > 0) fprintf(f, "; SM clock max %.0f MHz", d->sm_clock_max_mhz);
        if (isfinite(s->sm_clock_mhz))
            fprintf(f, ", measured %.0f (min %.0f)", s->sm_clock_mhz, s->sm_clock_min_mhz);
        if (g && g->x.power_limit_w > 0) fprintf(f, ", power limit %.0f W", g->x.power_limit_w);
        if (isfinite(s->power_w)) fprintf(f, ", mean power %.0f W", s->power_w);
        fputc('\n', f);
    }
    fputs("slow GPUs:", f);
    for (int k = 0; k < a->ngpus; k++) {
        if (!a->gpu[k].slow_rows) continue;
        fmt_gpu(who, sizeof who, r, a->gpu[k].gpu);
        fprintf(f, "%s %s in %d of %d compared", nslow++ ? ";" : "", who, a->gpu[k].slow_rows,
                a->gpu[k].compared);
    }
    fprintf(f, "%s\n", nslow ? "" : " none");
    fputs("throttled GPUs:", f);
    for (int k = 0; k < a->ngpus; k++) {
        const fp4_gpu_summary *s = &a->gpu[k];
        if (!s->throttled_rows) continue;
        fmt_gpu(who, sizeof who, r, s->gpu);
        fprintf(f, "%s %s in %d rows (power cap %d, thermal %d, hardware slowdown %d, low clock %d "
                   "samples)",
                nthrottled++ ? ";" : "", who, s->throttled_rows, s->power_cap_samples,
                s->thermal_samples, s->hw_slowdown_samples, s->low_clock_samples);
    }
    fprintf(f, "%s\n", nthrottled ? "" : " none");
}

/* The table: one line per row, rows grouped by case (label + shape) in the
 * order each case first appears, groups separated by a blank line, then the
 * legend lines for whatever markers appeared. */
void fp4_report_print_table(FILE *f, const fp4_report *r)
{
    fp4_report_print_table_verbose(f, r, 0);
}

/* Within a case of a multi-GPU report: by backend (in the order each first
 * appears in the case), then by GPU, so that a backend's GPUs stand
 * together. idx[0..n) are row indexes in report order, rank[] scratch of n;
 * a stable insertion sort (a case has a few rows per GPU). */
static void order_case_rows(const fp4_report *r, int *idx, int *rank, int n)
{
    for (int i = 0; i < n; i++) {
        rank[i] = i;
        for (int j = 0; j < i; j++)
            if (strcmp(r->rows[idx[j]].backend, r->rows[idx[i]].backend) == 0) {
                rank[i] = rank[j];
                break;
            }
    }
    for (int i = 1; i < n; i++) {
        const int x = idx[i], rx = rank[i];
        int j = i - 1;
        for (; j >= 0 && (rank[j] > rx || (rank[j] == rx && r->rows[idx[j]].gpu > r->rows[x].gpu)); j--) {
            idx[j + 1] = idx[j];
            rank[j + 1] = rank[j];
        }
        idx[j + 1] = x;
        rank[j + 1] = rx;
    }
}

void fp4_report_print_table_verbose(FILE *f, const fp4_report *r, int verbose)
{
    table_layout L;
    row_cells rc;
    fp4_gpu_analysis an;
    int groups = 0, have_an = 0, *idx = NULL, *rank = NULL;
    if (!f || !r) return;
    if (r->nrows <= 0 || !r->rows) {
        fputs("(no results)\n", f);
        return;
    }
    /* a multi-GPU report: compared GPU by GPU; without memory for that, the
     * plain table */
    if (multi_gpu(r)) {
        have_an = fp4_gpu_analyze(r, &an, NULL) == FP4_OK;
        idx = malloc((size_t)r->nrows * sizeof *idx);
        rank = malloc((size_t)r->nrows * sizeof *rank);
        if (!have_an || !idx || !rank) {
            if (have_an) fp4_gpu_analysis_free(&an);
            have_an = 0;
        }
    }
    layout_table(r, verbose, have_an ? &an : NULL, &L);
    print_line(f, &L, NULL);

    for (int i = 0; i < r->nrows; i++) {
        int seen = 0, n = 0;
        for (int k = 0; k < i && !seen; k++) seen = same_case(&r->rows[k], &r->rows[i]);
        if (seen) continue; /* printed with its group */
        if (groups++ > 0) fputc('\n', f);
        for (int j = i; j < r->nrows; j++) {
            if (!same_case(&r->rows[i], &r->rows[j])) continue;
            if (have_an) {
                idx[n++] = j;
                continue;
            }
            make_cells(&r->rows[j], r->set.baseline, verbose, 0, &rc);
            print_line(f, &L, &rc);
        }
        if (!have_an) continue;
        order_case_rows(r, idx, rank, n);
        for (int k = 0; k < n; k++) {
            make_cells(&r->rows[idx[k]], r->set.baseline, verbose, row_slow(&L, idx[k]), &rc);
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
    if (L.show[C_GPU])
        fputs("gpu: the CUDA device the row ran on (all GPUs ran at once)\n", f);
    if (L.any_slow)
        fputs("flag S: slower than the GPUs' median of its case and backend by more than 3% and "
              "its noise\n", f);
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
    if (have_an) {
        print_spread(f, r, &an);
        fp4_gpu_analysis_free(&an);
    }
    free(idx);
    free(rank);
}
