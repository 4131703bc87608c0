/* compare OLD NEW: match rows, judge each pair with a noise-aware verdict,
 * print a table and a summary, and count regressions.
 *
 * Rows match on (backend, label, m, n, k, l2); a key repeated within a report
 * matches its occurrences in order. With r = new median / old median, t the
 * threshold and noise the relative 95%-CI half-width of each median:
 *   slower  r     > 1 + t  and (new.p10 > old.p90  or  r - 1     > 2 (old.noise + new.noise))
 *   faster  1 / r > 1 + t  and (new.p90 < old.p10  or  1 / r - 1 > 2 (old.noise + new.noise))
 *   same    otherwise (swapping OLD and NEW swaps slower and faster exactly)
 * State changes: new FAILED where old was not, or old ok and new unsupported,
 * is "broken"; old not ok and new ok is "fixed"; FAILED -> unsupported is
 * "changed"; an unchanged non-ok state is "same". A pair of ok rows lacking a
 * positive finite median on either side is "untimed". Rows only in NEW are
 * "new", rows only in OLD "gone". Regressions = slower + broken. */
#include "fp4/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { K_BACKEND, K_LABEL, K_SHAPE, K_L2, K_OLD, K_NEW, K_RATIO, K_VERDICT, KCOL };

static const char *const k_title[KCOL] = {"backend", "label", "shape", "L2", "old us",
                                          "new us", "new/old", "verdict"};
static const int k_left[KCOL] = {1, 1, 1, 1, 0, 0, 0, 1};

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
           strcmp(a->l2, b->l2) == 0;
}

/* An ok row with a usable median. */
static int timed(const fp4_row *x)
{
    return x->state == FP4_ROW_OK && x->t.count > 0 && isfinite(x->t.median) &&
           x->t.median > 0.0;
}

/* The verdict of the file comment for one pair; fills ratio and regression. */
static void judge(cmp_pair *p, double thr)
{
    const fp4_row *o = p->o, *n = p->n;
    double noise2;
    p->ratio = NAN;
    p->regression = 0;
    if (!o) { p->verdict = "new"; return; }
    if (!n) { p->verdict = "gone"; return; }
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

/* One-line warnings when the two runs are not like for like. */
static void warn_mismatch(FILE *f, const fp4_report *a, const fp4_report *b)
{
    const char *ga = a->dev.present ? a->dev.name : "none";
    const char *gb = b->dev.present ? b->dev.name : "none";
    if (a->dev.present != b->dev.present || strcmp(ga, gb) != 0 ||
        (a->dev.present && (a->dev.cc_major != b->dev.cc_major ||
                            a->dev.cc_minor != b->dev.cc_minor)))
        fprintf(f, "warning: the reports come from different GPUs (old: %s, new: %s)\n", ga, gb);
    if (a->set.hot != b->set.hot)
        fprintf(f, "warning: the reports use different L2 modes (old: %s, new: %s)\n",
                a->set.hot ? "hot" : "cold", b->set.hot ? "hot" : "cold");
    if (a->set.data != b->set.data)
        fprintf(f, "warning: the reports use different data (old: %s, new: %s)\n",
                fp4_data_kind_name(a->set.data), fp4_data_kind_name(b->set.data));
}

/* Print the table of pairs with computed column widths, then the summary. */
static void print_pairs(FILE *f, const cmp_pair *p, int np, double thr, int regressions)
{
    char c[KCOL][KCELL], detail[DETAIL_MAX + 8];
    int width[KCOL];
    int nv[9] = {0};
    static const char *const names[9] = {"faster", "slower", "same", "broken", "fixed",
                                         "new", "gone", "untimed", "changed"};
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
        if (k) fputs("  ", f);
        fprintf(f, k_left[k] ? "%-*s" : "%*s", k == KCOL - 1 ? 0 : width[k], k_title[k]);
    }
    fputc('\n', f);
    for (int i = 0; i < np; i++) {
        pair_cells(&p[i], c, detail, sizeof detail);
        for (int k = 0; k < KCOL; k++) {
            if (k) fputs("  ", f);
            fprintf(f, k_left[k] ? "%-*s" : "%*s", k == KCOL - 1 ? 0 : width[k], c[k]);
        }
        if (detail[0]) fprintf(f, " (%s)", detail);
        fputc('\n', f);
        for (int v = 0; v < 9; v++)
            if (strcmp(p[i].verdict, names[v]) == 0) nv[v]++;
        if (p[i].o && p[i].n) matched++;
    }

    fprintf(f, "compare: threshold %.3g%%, %d matched: %d faster, %d slower, %d same, %d broken, "
               "%d fixed, %d new, %d gone",
            100.0 * thr, matched, nv[0], nv[1], nv[2], nv[3], nv[4], nv[5], nv[6]);
    if (nv[7]) fprintf(f, ", %d untimed", nv[7]);
    if (nv[8]) fprintf(f, ", %d changed", nv[8]);
    fprintf(f, "; %d regression%s\n", regressions, regressions == 1 ? "" : "s");
}

/* Compare; print to f (NULL: print nothing). Returns the number of
 * regressions, or -1 with err filled on bad arguments or no memory. */
int fp4_report_compare(FILE *f, const fp4_report *old_r, const fp4_report *new_r,
                       const fp4_compare_opts *opts, fp4_err *err)
{
    double thr = opts ? opts->threshold : 0.05;
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

    for (int i = 0; i < new_r->nrows; i++) {
        cmp_pair *p = &pairs[np++];
        p->n = &new_r->rows[i];
        for (int j = 0; j < old_r->nrows; j++) {
            if (!used[j] && same_key(&old_r->rows[j], p->n)) {
                used[j] = 1;
                p->o = &old_r->rows[j];
                break;
            }
        }
    }
    for (int j = 0; j < old_r->nrows; j++)
        if (!used[j]) pairs[np++].o = &old_r->rows[j];
    for (int i = 0; i < np; i++) {
        judge(&pairs[i], thr);
        regressions += pairs[i].regression;
    }

    if (f) {
        warn_mismatch(f, old_r, new_r);
        print_pairs(f, pairs, np, thr, regressions);
    }
out:
    free(pairs);
    free(used);
    return regressions;
}
