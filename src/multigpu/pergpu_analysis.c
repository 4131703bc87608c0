/* The comparison of the GPUs' rows of fp4bench run --gpus (the rules are in
 * multigpu/pergpu.h): pure functions of the report, with no CUDA, so that the
 * report writers and their fuzz targets link it alone. tests/test_gpus.c
 * checks them on made-up rows. */
#include "multigpu/pergpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the comparison ------------------------------------------------------------ */

int fp4_row_throttled(const fp4_row *w)
{
    return w->tel.valid && (w->tel.power_cap_samples > 0 || w->tel.thermal_samples > 0 ||
                            w->tel.hw_slowdown_samples > 0 || w->tel.low_clock_samples > 0);
}

/* An ok row with a usable median. */
static int row_timed(const fp4_row *w)
{
    return w->state == FP4_ROW_OK && w->t.count > 0 && isfinite(w->t.median) && w->t.median > 0;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorted in place): the middle value, or the mean of
 * the two middle ones; NaN for n = 0. */
static double median_of(double *v, int n)
{
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Rows of one group: same label, shape, backend and L2 mode (the GPU aside). */
static int key_cmp(const fp4_row *a, const fp4_row *b)
{
    int c = strncmp(a->label, b->label, sizeof a->label);
    if (c) return c;
    if (a->shape.m != b->shape.m) return a->shape.m < b->shape.m ? -1 : 1;
    if (a->shape.n != b->shape.n) return a->shape.n < b->shape.n ? -1 : 1;
    if (a->shape.k != b->shape.k) return a->shape.k < b->shape.k ? -1 : 1;
    if ((c = strncmp(a->backend, b->backend, sizeof a->backend))) return c;
    return strncmp(a->l2, b->l2, sizeof a->l2);
}

/* qsort's comparison has no context argument: the rows travel with the
 * indices. */
typedef struct row_ref {
    const fp4_row *row;
    int index;
} row_ref;

/* key, then GPU, then report order: a GPU's k-th row of a key is the k-th
 * of its run */
static int ref_cmp(const void *pa, const void *pb)
{
    const row_ref *a = pa, *b = pb;
    int c = key_cmp(a->row, b->row);
    if (c) return c;
    if (a->row->gpu != b->row->gpu) return a->row->gpu < b->row->gpu ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

void fp4_gpu_analysis_free(fp4_gpu_analysis *a)
{
    if (!a) return;
    free(a->groups);
    free(a->marks);
    a->groups = NULL;
    a->marks = NULL;
    a->ngroups = a->nrows = 0;
}

const fp4_gpu_summary *fp4_gpu_analysis_find(const fp4_gpu_analysis *a, int gpu)
{
    for (int i = 0; a && i < a->ngpus; i++)
        if (a->gpu[i].gpu == gpu) return &a->gpu[i];
    return NULL;
}

/* The GPUs: the report's list, else the rows' distinct numbers ascending. */
static void list_gpus(const fp4_report *r, fp4_gpu_analysis *a)
{
    if (r->ngpus > 0) {
        for (int i = 0; i < r->ngpus && i < FP4_MAX_GPUS; i++) a->gpu[a->ngpus++].gpu = r->gpus[i].x.index;
        return;
    }
    for (int i = 0; i < r->nrows; i++) {
        const int g = r->rows[i].gpu;
        int at = 0;
        if (fp4_gpu_analysis_find(a, g) || a->ngpus == FP4_MAX_GPUS) continue;
        while (at < a->ngpus && a->gpu[at].gpu < g) at++;
        memmove(&a->gpu[at + 1], &a->gpu[at], (size_t)(a->ngpus - at) * sizeof a->gpu[0]);
        a->gpu[at].gpu = g;
        a->ngpus++;
    }
}

/* Assign every row its group: runs of one key, split by occurrence (the
 * k-th row of each GPU in the run goes to the run's k-th group); then number
 * the groups in the order of their first rows. */
static fp4_status make_groups(const fp4_report *r, fp4_gpu_analysis *a, fp4_err *err)
{
    const int n = r->nrows;
    const size_t cap = (size_t)(n > 0 ? n : 1);
    row_ref *refs = malloc(cap * sizeof *refs);
    int *renumber = malloc(cap * sizeof *renumber);
    fp4_gpu_group *found = malloc(cap * sizeof *found);
    int nfound = 0;
    fp4_status st = FP4_OK;
    a->groups = malloc(cap * sizeof *a->groups);
    if (!refs || !renumber || !found || !a->groups) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "no memory to compare %d rows", n);
        goto out;
    }
    for (int i = 0; i < n; i++) refs[i] = (row_ref){&r->rows[i], i};
    qsort(refs, (size_t)n, sizeof *refs, ref_cmp);
    for (int lo = 0, hi; lo < n; lo = hi) {
        int occ = 0, most = 0;
        for (hi = lo + 1; hi < n && key_cmp(refs[lo].row, refs[hi].row) == 0; hi++) {}
        for (int j = lo; j < hi; j++) {
            occ = (j > lo && refs[j].row->gpu == refs[j - 1].row->gpu) ? occ + 1 : 0;
            fp4_gpu_group *g = &found[nfound + occ];
            if (occ == most) { /* the first row of a new group */
                memset(g, 0, sizeof *g);
                g->first_row = refs[j].index;
                most++;
            }
            if (refs[j].index < g->first_row) g->first_row = refs[j].index;
            g->rows++;
            a->marks[refs[j].index].group = nfound + occ;
        }
        nfound += most;
    }
    /* each row is the first of at most one group: walking the rows in order
     * lists the groups in the order of their first rows */
    for (int i = 0; i < n; i++) renumber[i] = -1;
    for (int k = 0; k < nfound; k++) renumber[found[k].first_row] = k;
    for (int i = 0; i < n; i++) {
        if (renumber[i] < 0) continue;
        a->groups[a->ngroups] = found[renumber[i]];
        renumber[i] = a->ngroups++; /* from here: the new number, at the first row */
    }
    for (int i = 0; i < n; i++)
        a->marks[i].group = renumber[found[a->marks[i].group].first_row];
out:
    free(refs);
    free(renumber);
    free(found);
    return st;
}

/* The statistics of group gi, whose rows are member[0..count), and the
 * marks of its rows; med and noise are scratch of count entries. */
static void judge_group(const fp4_report *r, fp4_gpu_analysis *a, int gi, const int *member,
                        int count, double *med, double *noise)
{
    fp4_gpu_group *g = &a->groups[gi];
    int nt = 0, nn = 0;
    g->min_us = g->median_us = g->max_us = g->spread = g->noise = NAN;
    for (int j = 0; j < count; j++) {
        const fp4_row *w = &r->rows[member[j]];
        if (!row_timed(w)) continue;
        if (nt == 0 || w->t.median < g->min_us) g->min_us = w->t.median;
        if (nt == 0 || w->t.median > g->max_us) g->max_us = w->t.median;
        med[nt++] = w->t.median;
        if (isfinite(w->t.noise)) noise[nn++] = w->t.noise;
    }
    g->timed = nt;
    if (nt == 0) return;
    g->median_us = median_of(med, nt);
    g->noise = median_of(noise, nn);
    if (nt >= 2) g->spread = (g->max_us - g->min_us) / g->median_us;
    for (int j = 0; j < count; j++) {
        const fp4_row *w = &r->rows[member[j]];
        fp4_gpu_mark *m = &a->marks[member[j]];
        m->throttled = fp4_row_throttled(w);
        g->throttled += m->throttled;
        if (nt < 2 || !row_timed(w)) continue; /* nothing to compare with */
        m->excess = w->t.median / g->median_us - 1.0;
        if (isfinite(w->t.noise)) { /* unknown noise: the threshold stays infinite */
            const double own = w->t.noise + g->noise;
            m->threshold = own > FP4_SLOW_MIN ? own : FP4_SLOW_MIN;
        }
        m->slow = m->excess > m->threshold;
        g->slow += m->slow;
    }
}

/* Per GPU: its rows, the geometric mean of its ratios to the groups'
 * medians, its marks and its telemetry. */
static void summarize_gpu(const fp4_report *r, fp4_gpu_analysis *a, fp4_gpu_summary *s,
                          double *clocks)
{
    double log_sum = 0, power_sum = 0;
    int nclock = 0, npower = 0;
    s->ratio_geomean = s->sm_clock_mhz = s->sm_clock_min_mhz = s->power_w = NAN;
    for (int i = 0; i < r->nrows; i++) {
        const fp4_row *w = &r->rows[i];
        const fp4_gpu_mark *m = &a->marks[i];
        if (w->gpu != s->gpu) continue;
        s->rows++;
        s->timed += row_timed(w);
        s->slow_rows += m->slow;
        s->throttled_rows += m->throttled;
        if (isfinite(m->excess)) {
            log_sum += log(w->t.median / a->groups[m->group].median_us);
            s->compared++;
        }
        if (!w->tel.valid) continue;
        s->power_cap_samples += w->tel.power_cap_samples;
        s->thermal_samples += w->tel.thermal_samples;
        s->hw_slowdown_samples += w->tel.hw_slowdown_samples;
        s->low_clock_samples += w->tel.low_clock_samples;
        if (isfinite(w->tel.sm_clock_mhz) && w->tel.sm_clock_mhz > 0) clocks[nclock++] = w->tel.sm_clock_mhz;
        if (isfinite(w->tel.sm_clock_min_mhz) && w->tel.sm_clock_min_mhz > 0 &&
            !(w->tel.sm_clock_min_mhz >= s->sm_clock_min_mhz))
            s->sm_clock_min_mhz = w->tel.sm_clock_min_mhz;
        if (isfinite(w->tel.power_w) && w->tel.power_w > 0) {
            power_sum += w->tel.power_w;
            npower++;
        }
    }
    if (s->compared > 0) s->ratio_geomean = exp(log_sum / s->compared);
    s->sm_clock_mhz = median_of(clocks, nclock);
    if (npower > 0) s->power_w = power_sum / npower;
}

fp4_status fp4_gpu_analyze(const fp4_report *r, fp4_gpu_analysis *a, fp4_err *err)
{
    const int n = r->nrows > 0 && r->rows ? r->nrows : 0;
    const size_t cap = (size_t)(n > 0 ? n : 1);
    double *med = NULL, *noise = NULL;
    int *member = NULL, *start = NULL;
    fp4_status st = FP4_OK;
    memset(a, 0, sizeof *a);
    list_gpus(r, a);
    a->marks = calloc(cap, sizeof *a->marks);
    med = malloc(cap * sizeof *med);
    noise = malloc(cap * sizeof *noise);
    member = malloc(cap * sizeof *member);
    start = calloc(cap + 1, sizeof *start);
    if (!a->marks || !med || !noise || !member || !start) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "no memory to compare %d rows", n);
        goto out;
    }
    a->nrows = n;
    for (int i = 0; i < n; i++) {
        a->marks[i].excess = NAN;
        a->marks[i].threshold = INFINITY;
    }
    if ((st = make_groups(r, a, err)) != FP4_OK) goto out;
    /* each group's rows in report order, by a counting sort: start[g] is
     * where group g's rows begin in member */
    for (int i = 0; i < n; i++) start[a->marks[i].group + 1]++;
    for (int gi = 0; gi < a->ngroups; gi++) start[gi + 1] += start[gi];
    for (int i = 0; i < n; i++) member[start[a->marks[i].group]++] = i;
    for (int gi = a->ngroups; gi > 0; gi--) start[gi] = start[gi - 1]; /* the fill moved them */
    start[0] = 0;
    for (int gi = 0; gi < a->ngroups; gi++)
        judge_group(r, a, gi, member + start[gi], start[gi + 1] - start[gi], med, noise);
    for (int k = 0; k < a->ngpus; k++) summarize_gpu(r, a, &a->gpu[k], med);
out:
    free(med);
    free(noise);
    free(member);
    free(start);
    return st;
}

