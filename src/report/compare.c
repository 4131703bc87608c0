/* compare OLD NEW: match rows, judge each pair with a noise-aware verdict,
 * print a table and a summary, and count regressions.
 *
 * Rows match on (backend, label, m, n, k, l2, gpu), so the rows of a
 * multi-GPU run (fp4bench run --gpus) match GPU by GPU, and files from before
 * the gpu field (read as GPU 0) match those of a one-GPU run; a key repeated within a report
 * matches its occurrences in order. Matching goes through a hash table on
 * that key, so that it is linear in the rows (reports of 10^5 rows and more
 * are real: sweeps over many models).
 *
 * With r = new median / old median, t the threshold and noise the relative
 * 95%-CI half-width of each median:
 *   slower  r     > 1 + t  and (new.p10 > old.p90  or  r - 1     > 2 (old.noise + new.noise))
 *   faster  1 / r > 1 + t  and (new.p90 < old.p10  or  1 / r - 1 > 2 (old.noise + new.noise))
 *   same    otherwise (swapping OLD and NEW swaps slower and faster exactly)
 * Rows timed on the host (CPU backends, timing "host"): the CI of a median
 * measures the sampling error within one run, but a shared CPU (load,
 * frequency, a stolen core) moves the whole run: two identical runs of
 * --preset odd on a 2-core machine differed by up to 1.9x with CIs of 0.5% to
 * 10% and no overlap of their samples. So a host row needs both tests (the
 * combined noise and the samples apart) to be "cpu-slower" / "cpu-faster",
 * and neither is a regression: one pair of runs cannot tell the machine's
 * drift from the code's.
 * State changes: new FAILED where old was not, or old ok and new unsupported,
 * is "broken"; old not ok and new ok is "fixed"; FAILED -> unsupported is
 * "changed"; an unchanged non-ok state is "same". A pair of ok rows lacking a
 * positive finite median on either side is "untimed". Rows only in NEW are
 * "new", rows only in OLD "gone". Regressions = slower + broken. */
#include "fp4/report.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { K_BACKEND, K_LABEL, K_SHAPE, K_L2, K_GPU, K_OLD, K_NEW, K_RATIO, K_VERDICT, KCOL };

static const char *const k_title[KCOL] = {"backend", "label", "shape", "L2", "gpu", "old us",
                                          "new us", "new/old", "verdict"};
static const int k_left[KCOL] = {1, 1, 1, 1, 0, 0, 0, 0, 1};

#define KCELL 128
#define DETAIL_MAX 60

typedef struct cmp_pair {
    const fp4_row *o, *n; /* either may be NULL (new / gone) */
    const char *verdict;
    double ratio;         /* new / old median, NaN when not both timed */
    int regression;
} cmp_pair;

/* The matching key. */
static int same_key(const fp4_row *a, const fp4_row *b)
{
    return strcmp(a->backend, b->backend) == 0 && strcmp(a->label, b->label) == 0 &&
           a->shape.m == b->shape.m && a->shape.n == b->shape.n && a->shape.k == b->shape.k &&
           strcmp(a->l2, b->l2) == 0 && a->gpu == b->gpu;
}

/* FNV-1a over the key's fields (bounded: the arrays may be unterminated in a
 * hand-made report). */
static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t key_hash(const fp4_row *x)
{
    uint64_t h = 0xcbf29ce484222325ull;
    int64_t dims[4] = {x->shape.m, x->shape.n, x->shape.k, x->gpu};
    h = fnv_bytes(h, x->backend, strnlen(x->backend, sizeof x->backend));
    h = fnv_bytes(h, "\0", 1); /* ("ab", "c") and ("a", "bc") differ */
    h = fnv_bytes(h, x->label, strnlen(x->label, sizeof x->label));
    h = fnv_bytes(h, "\0", 1);
    h = fnv_bytes(h, x->l2, strnlen(x->l2, sizeof x->l2));
    h = fnv_bytes(h, dims, sizeof dims);
    return h;
}

/* The old rows by key: open addressing, one slot per distinct key holding
 * the queue (in file order) of its old rows not matched yet. */
typedef struct key_slot {
    int rep;        /* an old row with this key (-1: empty slot) */
    int head, tail; /* queue of unmatched old rows through next[]; -1 empty */
} key_slot;

typedef struct key_index {
    key_slot *slot;
    int *next;
    size_t mask;
    const fp4_row *rows;
} key_index;

static fp4_status index_build(key_index *ix, const fp4_row *rows, int n, fp4_err *err)
{
    size_t cap = 16;
    while (cap < 2 * (size_t)n) cap *= 2; /* load <= 1/2: short probes */
    ix->rows = rows;
    ix->mask = cap - 1;
    ix->slot = malloc(cap * sizeof *ix->slot);
    ix->next = malloc(((size_t)n + 1) * sizeof *ix->next);
    if (!ix->slot || !ix->next)
        return fp4_fail(err, FP4_ERR_NOMEM, "compare: out of memory for %d rows", n);
    for (size_t i = 0; i < cap; i++) ix->slot[i].rep = ix->slot[i].head = ix->slot[i].tail = -1;
    for (int j = 0; j < n; j++) {
        size_t i = (size_t)key_hash(&rows[j]) & ix->mask;
        while (ix->slot[i].rep >= 0 && !same_key(&rows[ix->slot[i].rep], &rows[j]))
            i = (i + 1) & ix->mask;
        key_slot *k = &ix->slot[i];
        ix->next[j] = -1;
        if (k->rep < 0) k->rep = j;
        if (k->tail >= 0) ix->next[k->tail] = j;
        else k->head = j;
        k->tail = j;
    }
    return FP4_OK;
}

/* The first unmatched old row with x's key, taken off its queue; -1 if none. */
static int index_take(key_index *ix, const fp4_row *x)
{
    size_t i = (size_t)key_hash(x) & ix->mask;
    while (ix->slot[i].rep >= 0) {
        key_slot *k = &ix->slot[i];
        if (same_key(&ix->rows[k->rep], x)) {
            int j = k->head;
            if (j >= 0) {
                k->head = ix->next[j];
                if (k->head < 0) k->tail = -1;
            }
            return j;
        }
        i = (i + 1) & ix->mask;
    }
    return -1;
}

static void index_free(key_index *ix)
{
    free(ix->slot);
    free(ix->next);
}

/* An ok row with a usable median. */
static int timed(const fp4_row *x)
{
    return x->state == FP4_ROW_OK && x->t.count > 0 && isfinite(x->t.median) &&
           x->t.median > 0.0;
}

/* The verdict of the file comment for one pair; fills ratio and regression. */
static void judge(cmp_pair *p, double thr, int gone_is_regression)
{
    const fp4_row *o = p->o, *n = p->n;
    double noise2;
    p->ratio = NAN;
    p->regression = 0;
    if (!o) { p->verdict = "new"; return; }
    if (!n) {
        p->verdict = "gone";
        p->regression = gone_is_regression != 0;
        return;
    }
    if (n->state == FP4_ROW_FAILED && o->state != FP4_ROW_FAILED) {
        p->verdict = "broken";
        p->regression = 1;
        return;
    }
    if (o->state == FP4_ROW_OK && n->state != FP4_ROW_OK) {
        p->verdict = "broken";
        p->regression = 1;
        return;
    }
    if (o->state != FP4_ROW_OK && n->state == FP4_ROW_OK) { p->verdict = "fixed"; return; }
    if (o->state != FP4_ROW_OK) {
        p->verdict = o->state == n->state ? "same" : "changed";
        return;
    }
    if (!timed(o) || !timed(n)) { p->verdict = "untimed"; return; }

    p->ratio = n->t.median / o->t.median;
    noise2 = 2.0 * (o->t.noise + n->t.noise); /* NaN/inf: this test never passes */
    if (strcmp(o->timing, "host") == 0 || strcmp(n->timing, "host") == 0) {
        /* both tests, and no regression: see the file comment */
        if (p->ratio > 1.0 + thr && p->ratio - 1.0 > noise2 && n->t.p10 > o->t.p90)
            p->verdict = "cpu-slower";
        else if (1.0 / p->ratio > 1.0 + thr && 1.0 / p->ratio - 1.0 > noise2 &&
                 n->t.p90 < o->t.p10)
            p->verdict = "cpu-faster";
        else
            p->verdict = "same";
        return;
    }
    if (p->ratio > 1.0 + thr && (n->t.p10 > o->t.p90 || p->ratio - 1.0 > noise2)) {
        p->verdict = "slower";
        p->regression = 1;
    } else if (1.0 / p->ratio > 1.0 + thr &&
               (n->t.p90 < o->t.p10 || 1.0 / p->ratio - 1.0 > noise2)) {
        p->verdict = "faster";
    } else {
        p->verdict = "same";
    }
}

/* The time cell of one side: the median, or the state of a row not timed. */
static void time_cell(char *b, const fp4_row *x)
{
    if (!x) snprintf(b, KCELL, "-");
    else if (x->state != FP4_ROW_OK) snprintf(b, KCELL, "%s", fp4_row_state_name(x->state));
    else if (!timed(x)) snprintf(b, KCELL, "-");
    else if (x->t.median < 10.0) snprintf(b, KCELL, "%.3f", x->t.median);
    else if (x->t.median < 100.0) snprintf(b, KCELL, "%.2f", x->t.median);
    else if (x->t.median < 1000.0) snprintf(b, KCELL, "%.1f", x->t.median);
    else snprintf(b, KCELL, "%.0f", x->t.median);
}

/* All cells of one pair; detail gets the reason of a broken pair ("" else). */
static void pair_cells(const cmp_pair *p, char c[KCOL][KCELL], char *detail, size_t dcap)
{
    const fp4_row *x = p->n ? p->n : p->o;
    detail[0] = '\0';
    snprintf(c[K_BACKEND], KCELL, "%s", x->backend);
    snprintf(c[K_LABEL], KCELL, "%s", x->label[0] ? x->label : "-");
    snprintf(c[K_SHAPE], KCELL, "%lldx%lldx%lld", (long long)x->shape.m,
             (long long)x->shape.n, (long long)x->shape.k);
    snprintf(c[K_L2], KCELL, "%s", x->l2[0] ? x->l2 : "-");
    snprintf(c[K_GPU], KCELL, "%d", x->gpu);
    time_cell(c[K_OLD], p->o);
    time_cell(c[K_NEW], p->n);
    if (isfinite(p->ratio)) snprintf(c[K_RATIO], KCELL, "%.3f", p->ratio);
    else snprintf(c[K_RATIO], KCELL, "-");
    snprintf(c[K_VERDICT], KCELL, "%s", p->verdict);
    if (p->regression && p->n && p->n->state != FP4_ROW_OK) {
        const char *why = p->n->reason[0] ? p->n->reason : "(no reason given)";
        size_t len = strlen(why);
        if (len > DETAIL_MAX || len >= dcap) snprintf(detail, dcap, "%.*s...", DETAIL_MAX - 3, why);
        else memcpy(detail, why, len + 1);
    }
}

/* The timing mode a report's rows use (as fp4_report_print_header says). */
static const char *timing_mode(const fp4_report *r)
{
    if (!r->dev.present) return "host";
    if (!r->set.use_graphs) return "launch";
    return r->set.measure_launch ? "graph+launch" : "graph";
}

/* The GPUs a report ran on, "0,1,2" ("0": one device, the usual run). */
static void gpu_set_text(const fp4_report *r, char *b, size_t cap)
{
    size_t len = 0;
    b[0] = '\0';
    if (r->ngpus <= 0) {
        snprintf(b, cap, "%d", r->devx.index);
        return;
    }
    for (int i = 0; i < r->ngpus && i < FP4_MAX_GPUS && len < cap; i++) {
        int w = snprintf(b + len, cap - len, "%s%d", i ? "," : "", r->gpus[i].x.index);
        if (w < 0) break;
        len += (size_t)w;
    }
}

/* One warning line per differing setting (f NULL: count only). */
#define WARN_IF(cond, ...)                                                              \
    do {                                                                                \
        if (cond) {                                                                     \
            n++;                                                                        \
            if (f) {                                                                    \
                fputs("warning: ", f);                                                  \
                fprintf(f, __VA_ARGS__);                                                \
                fputc('\n', f);                                                         \
            }                                                                           \
        }                                                                               \
    } while (0)

/* != on doubles: the values come from the same flags, any change counts; a
 * value a report does not give (NaN when read back) differs from none */
static int num_differs(double p, double q) { return !isnan(p) && !isnan(q) && p != q; }

int fp4_report_compare_settings(FILE *f, const fp4_report *a, const fp4_report *b)
{
    const fp4_settings *x, *y;
    const char *ga, *gb;
    int n = 0;
    if (!a || !b) return 0;
    x = &a->set;
    y = &b->set;
    ga = a->dev.present ? a->dev.name : "none";
    gb = b->dev.present ? b->dev.name : "none";
    WARN_IF(a->dev.present != b->dev.present || strcmp(ga, gb) != 0 ||
                (a->dev.present && (a->dev.cc_major != b->dev.cc_major ||
                                    a->dev.cc_minor != b->dev.cc_minor)),
            "the reports come from different GPUs (old: %s, new: %s)", ga, gb);
    {
        char sa[FP4_MAX_GPUS * 6 + 8], sb[FP4_MAX_GPUS * 6 + 8];
        gpu_set_text(a, sa, sizeof sa);
        gpu_set_text(b, sb, sizeof sb);
        WARN_IF(strcmp(sa, sb) != 0, "the reports ran on different GPU sets (old: %s, new: %s)",
                sa, sb);
    }
    WARN_IF(a->dev.present && b->dev.present && a->dev.driver_version != b->dev.driver_version,
            "the reports use different CUDA drivers (old: %d, new: %d)", a->dev.driver_version,
            b->dev.driver_version);
    WARN_IF(a->dev.present && b->dev.present && a->dev.runtime_version != b->dev.runtime_version,
            "the reports use different CUDA runtimes (old: %d, new: %d)", a->dev.runtime_version,
            b->dev.runtime_version);
    WARN_IF(a->dev.cpu_threads > 0 && b->dev.cpu_threads > 0 && a->dev.cpu_threads != b->dev.cpu_threads,
            "the reports come from hosts with different CPU thread counts (old: %d, new: %d)",
            a->dev.cpu_threads, b->dev.cpu_threads);
    WARN_IF(x->data != y->data, "the reports use different data (old: %s, new: %s)",
            fp4_data_kind_name(x->data), fp4_data_kind_name(y->data));
    WARN_IF(x->seed != y->seed, "the reports use different seeds (old: %llu, new: %llu)",
            (unsigned long long)x->seed, (unsigned long long)y->seed);
    WARN_IF(x->hot != y->hot, "the reports use different L2 modes (old: %s, new: %s)",
            x->hot ? "hot" : "cold", y->hot ? "hot" : "cold");
    WARN_IF(strcmp(timing_mode(a), timing_mode(b)) != 0,
            "the reports use different timing modes (old: %s, new: %s)", timing_mode(a),
            timing_mode(b));
    WARN_IF(num_differs(x->stop.noise_target, y->stop.noise_target),
            "the reports use different noise targets (old: %.3g%%, new: %.3g%%)",
            100.0 * x->stop.noise_target, 100.0 * y->stop.noise_target);
    WARN_IF(num_differs(x->stop.max_time_s, y->stop.max_time_s),
            "the reports use different max times (old: %.3g s, new: %.3g s)", x->stop.max_time_s,
            y->stop.max_time_s);
    WARN_IF(num_differs(x->stop.min_time_s, y->stop.min_time_s),
            "the reports use different min times (old: %.3g s, new: %.3g s)", x->stop.min_time_s,
            y->stop.min_time_s);
    WARN_IF(x->stop.min_samples != y->stop.min_samples,
            "the reports use different min samples (old: %d, new: %d)", x->stop.min_samples,
            y->stop.min_samples);
    WARN_IF(num_differs(x->warmup_ms, y->warmup_ms),
            "the reports use different warm-ups (old: %.3g ms, new: %.3g ms)", x->warmup_ms,
            y->warmup_ms);
    WARN_IF(x->verify_only != y->verify_only,
            "one report only verified (old: %s, new: %s)", x->verify_only ? "verify only" : "timed",
            y->verify_only ? "verify only" : "timed");
    WARN_IF(x->time_reference != y->time_reference,
            "the reports time the reference backends differently (old: %s, new: %s)",
            x->time_reference ? "timed" : "verify only", y->time_reference ? "timed" : "verify only");
    return n;
}
#undef WARN_IF

/* Print the table of pairs with computed column widths, then the summary. */
static void print_pairs(FILE *f, const cmp_pair *p, int np, double thr, int regressions,
                        int show_gpu)
{
    char c[KCOL][KCELL], detail[DETAIL_MAX + 8];
    int width[KCOL];
    int nv[11] = {0};
    static const char *const names[11] = {"faster", "slower", "same", "broken", "fixed",
                                          "new", "gone", "untimed", "changed", "cpu-faster",
                                          "cpu-slower"};
    int matched = 0;

    for (int k = 0; k < KCOL; k++) width[k] = (int)strlen(k_title[k]);
    for (int i = 0; i < np; i++) {
        pair_cells(&p[i], c, detail, sizeof detail);
        for (int k = 0; k < KCOL; k++) {
            int len = (int)strlen(c[k]);
            if (len > width[k]) width[k] = len;
        }
    }
    for (int k = 0; k < KCOL; k++) {
        if (k == K_GPU && !show_gpu) continue;
        if (k) fputs("  ", f);
        fprintf(f, k_left[k] ? "%-*s" : "%*s", k == KCOL - 1 ? 0 : width[k], k_title[k]);
    }
    fputc('\n', f);
    for (int i = 0; i < np; i++) {
        pair_cells(&p[i], c, detail, sizeof detail);
        for (int k = 0; k < KCOL; k++) {
            if (k == K_GPU && !show_gpu) continue;
            if (k) fputs("  ", f);
            fprintf(f, k_left[k] ? "%-*s" : "%*s", k == KCOL - 1 ? 0 : width[k], c[k]);
        }
        if (detail[0]) fprintf(f, " (%s)", detail);
        fputc('\n', f);
        for (int v = 0; v < 11; v++)
            if (strcmp(p[i].verdict, names[v]) == 0) nv[v]++;
        if (p[i].o && p[i].n) matched++;
    }

    fprintf(f, "compare: threshold %.3g%%, %d matched: %d faster, %d slower, %d same, %d broken, "
               "%d fixed, %d new, %d gone",
            100.0 * thr, matched, nv[0], nv[1], nv[2], nv[3], nv[4], nv[5], nv[6]);
    if (nv[7]) fprintf(f, ", %d untimed", nv[7]);
    if (nv[8]) fprintf(f, ", %d changed", nv[8]);
    if (nv[9] || nv[10])
        fprintf(f, ", %d cpu-faster, %d cpu-slower (CPU times move between runs beyond their "
                   "noise: not counted)", nv[9], nv[10]);
    fprintf(f, "; %d regression%s\n", regressions, regressions == 1 ? "" : "s");
}

/* Compare; print the table to f (NULL: print nothing). Returns the number
 * of regressions, or -1 with err filled on bad arguments or no memory. */
int fp4_report_compare_rows(FILE *f, const fp4_report *old_r, const fp4_report *new_r,
                            const fp4_compare_opts *opts, fp4_err *err)
{
    double thr = opts ? opts->threshold : 0.05;
    key_index ix = {NULL, NULL, 0, NULL};
    cmp_pair *pairs = NULL;
    char *used = NULL;
    int np = 0, regressions = 0;

    if (!old_r || !new_r || (old_r->nrows > 0 && !old_r->rows) ||
        (new_r->nrows > 0 && !new_r->rows) || old_r->nrows < 0 || new_r->nrows < 0) {
        fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_report_compare: NULL or malformed report");
        return -1;
    }
    if (!(thr >= 0.0) || !isfinite(thr)) {
        fp4_fail(err, FP4_ERR_INVALID_ARG, "compare threshold must be >= 0 (got %g)", thr);
        return -1;
    }
    pairs = calloc((size_t)old_r->nrows + (size_t)new_r->nrows + 1, sizeof *pairs);
    used = calloc((size_t)old_r->nrows + 1, 1);
    if (!pairs || !used) {
        fp4_fail(err, FP4_ERR_NOMEM, "compare: out of memory");
        regressions = -1;
        goto out;
    }
    if (index_build(&ix, old_r->rows, old_r->nrows, err) != FP4_OK) {
        regressions = -1;
        goto out;
    }

    for (int i = 0; i < new_r->nrows; i++) {
        cmp_pair *p = &pairs[np++];
        int j;
        p->n = &new_r->rows[i];
        j = index_take(&ix, p->n);
        if (j >= 0) {
            used[j] = 1;
            p->o = &old_r->rows[j];
        }
    }
    int matched = 0;
    for (int j = 0; j < old_r->nrows; j++) {
        if (!used[j]) pairs[np++].o = &old_r->rows[j];
        matched += used[j];
    }
    if (old_r->nrows == 0 || new_r->nrows == 0) { /* a run stopped before its first row passes nothing */
        fp4_fail(err, FP4_ERR_INVALID_ARG, "%s has no rows: nothing to compare",
                 new_r->nrows == 0 ? "NEW" : "OLD");
        regressions = -1;
        goto out;
    }
    if (matched == 0) {
        fp4_fail(err, FP4_ERR_INVALID_ARG,
                 "no row of NEW (%d) matches a row of OLD (%d) by backend, label, shape and L2 "
                 "mode: they are not runs of the same cases",
                 new_r->nrows, old_r->nrows);
        regressions = -1;
        goto out;
    }
    for (int i = 0; i < np; i++) {
        judge(&pairs[i], thr, opts && opts->gone_is_regression);
        regressions += pairs[i].regression;
    }

    if (f) { /* the GPU column only where a report has rows of a GPU other than 0 */
        int show_gpu = old_r->ngpus > 0 || new_r->ngpus > 0;
        for (int i = 0; i < np && !show_gpu; i++)
            show_gpu = (pairs[i].o && pairs[i].o->gpu != 0) || (pairs[i].n && pairs[i].n->gpu != 0);
        print_pairs(f, pairs, np, thr, regressions, show_gpu);
    }
out:
    index_free(&ix);
    free(pairs);
    free(used);
    return regressions;
}

/* The warnings, then the table, both on f. Arguments are checked first so
 * that a bad call prints nothing. */
int fp4_report_compare(FILE *f, const fp4_report *old_r, const fp4_report *new_r,
                       const fp4_compare_opts *opts, fp4_err *err)
{
    if (f && old_r && new_r && (!opts || (opts->threshold >= 0.0 && isfinite(opts->threshold))))
        fp4_report_compare_settings(f, old_r, new_r);
    return fp4_report_compare_rows(f, old_r, new_r, opts, err);
}
