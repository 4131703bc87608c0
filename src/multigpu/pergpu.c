/* The GPU list of fp4bench run --gpus and the comparison of the GPUs' rows
 * (see multigpu/pergpu.h for the rules). Pure functions of their inputs:
 * tests/test_gpus.c checks them on made-up rows. */
#include "multigpu/pergpu.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FP4_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- --gpus ------------------------------------------------------------------- */

fp4_status fp4_gpu_list_parse(const char *spec, fp4_gpu_list *out, fp4_err *err)
{
    const char *p = spec;
    memset(out, 0, sizeof *out);
    if (!spec) return fp4_fail(err, FP4_ERR_INVALID_ARG, "no GPU list");
    if (strcmp(spec, "all") == 0) {
        out->all = 1;
        return FP4_OK;
    }
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        long d = 0;
        if (len == 0)
            return fp4_fail(err, FP4_ERR_INVALID_ARG,
                            "'%.64s': want 'all' or GPU numbers, e.g. 0,1,2,3", spec);
        /* plain decimal digits only: no sign, no blanks, no exponent; at
         * most 4 digits (no node has more devices) so it cannot overflow */
        for (size_t i = 0; i < len; i++)
            if (p[i] < '0' || p[i] > '9' || i >= 4)
                return fp4_fail(err, FP4_ERR_INVALID_ARG, "'%.*s' is not a GPU number",
                                (int)(len < 32 ? len : 32), p);
        for (size_t i = 0; i < len; i++) d = d * 10 + (p[i] - '0');
        for (int i = 0; i < out->n; i++)
            if (out->index[i] == (int)d)
                return fp4_fail(err, FP4_ERR_INVALID_ARG, "GPU %ld listed twice", d);
        if (out->n == FP4_MAX_GPUS)
            return fp4_fail(err, FP4_ERR_INVALID_ARG, "at most %d GPUs", FP4_MAX_GPUS);
        out->index[out->n++] = (int)d;
        if (!end) break;
        p = end + 1;
    }
    return FP4_OK;
}

fp4_status fp4_gpu_list_resolve(fp4_gpu_list *list, int ndevices, fp4_err *err)
{
    if (ndevices <= 0) return fp4_fail(err, FP4_ERR_UNSUPPORTED, "no CUDA device");
    if (list->all) {
        if (ndevices > FP4_MAX_GPUS)
            return fp4_fail(err, FP4_ERR_INVALID_ARG,
                            "all: %d CUDA devices, at most %d GPUs a run: list them", ndevices,
                            FP4_MAX_GPUS);
        list->n = ndevices;
        for (int i = 0; i < ndevices; i++) list->index[i] = i;
        return FP4_OK;
    }
    if (list->n > ndevices)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%d GPUs listed, %d CUDA device%s here",
                        list->n, ndevices, ndevices == 1 ? "" : "s");
    for (int i = 0; i < list->n; i++)
        if (list->index[i] >= ndevices)
            return fp4_fail(err, FP4_ERR_INVALID_ARG,
                            "GPU %d does not exist (%d CUDA device%s: 0..%d)", list->index[i],
                            ndevices, ndevices == 1 ? "" : "s", ndevices - 1);
    return FP4_OK;
}

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

/* ---- one workload on every listed GPU at once ------------------------------------ */

#ifdef FP4_HAVE_CUDA
/* The run's shared state, owned by fp4_pergpu_run: one lock for the report,
 * the stop decision and the gates. */
typedef struct pergpu_run {
    const fp4_pergpu_job *job;
    fp4_report *report;
    pthread_mutex_t lock;
    pthread_cond_t opened;
    /* a gate: every party waits until all have arrived; verdict is the stop
     * flag as it was when the last arrived, the same for every party (a
     * party reading stop on its own after the gate could see a value
     * another set meanwhile, leave the loop alone and leave the rest
     * waiting at the next gate) */
    int arrived;
    unsigned generation;
    int verdict;
    int stop;        /* a GPU failed, or the run is interrupted */
    int interrupted;
} pergpu_run;

/* One GPU's thread. */
typedef struct pergpu_worker {
    pergpu_run *run;
    int device;
    pthread_t thread;
    int started;
    fp4_engine *engine;
    fp4_report report;   /* its own rows (the engine appends here) and ceilings */
    fp4_status st;       /* FP4_OK, or why it stopped the run */
    fp4_err err;
    fp4_warnings warn;
} pergpu_worker;

/* Arrive at the gate for arrivals parties (1, or the main thread standing in
 * for threads that never started) and wait until parties have arrived;
 * returns the verdict (see above). */
static int gate_arrive(pergpu_run *run, int parties, int arrivals)
{
    int verdict;
    pthread_mutex_lock(&run->lock);
    const unsigned gen = run->generation;
    run->arrived += arrivals;
    if (run->arrived >= parties) {
        run->arrived = 0;
        run->verdict = run->stop;
        run->generation++;
        pthread_cond_broadcast(&run->opened);
    } else {
        while (gen == run->generation) pthread_cond_wait(&run->opened, &run->lock);
    }
    verdict = run->verdict;
    pthread_mutex_unlock(&run->lock);
    return verdict;
}

static int gate_wait(pergpu_run *run, int parties)
{
    return gate_arrive(run, parties, 1);
}

/* Record why this worker stops the run (the first reason of each worker). */
static void worker_fail(pergpu_worker *w, fp4_status st)
{
    pthread_mutex_lock(&w->run->lock);
    if (st == FP4_ERR_INTERRUPTED) w->run->interrupted = 1;
    w->run->stop = 1;
    if (w->st == FP4_OK) w->st = st;
    pthread_mutex_unlock(&w->run->lock);
}

/* The engine's row callback on a worker: a copy of the row (its own copy of
 * the samples) into the run's report, then the job's callback, under the
 * lock. */
static void worker_row(const fp4_report *own, const fp4_row *row, void *user)
{
    pergpu_worker *w = user;
    pergpu_run *run = w->run;
    fp4_row copy = *row;
    fp4_err err;
    (void)own;
    copy.samples = NULL;
    if (row->samples && row->nsamples > 0) {
        copy.samples = malloc((size_t)row->nsamples * sizeof *copy.samples);
        if (copy.samples) memcpy(copy.samples, row->samples, (size_t)row->nsamples * sizeof *copy.samples);
        else copy.nsamples = 0; /* the statistics stay; the samples are lost */
    }
    pthread_mutex_lock(&run->lock);
    if (fp4_report_add(run->report, &copy, &err) == FP4_OK) {
        if (run->job->on_row) run->job->on_row(run->report, &run->report->rows[run->report->nrows - 1],
                                              run->job->user);
    } else {
        fp4_warn(&w->warn, "GPU %d: a row is missing from the report: %s", w->device, fp4_err_text(&err));
    }
    pthread_mutex_unlock(&run->lock);
}

static void *worker_main(void *arg)
{
    pergpu_worker *w = arg;
    pergpu_run *run = w->run;
    const fp4_pergpu_job *job = run->job;
    const int n = job->gpus->n;
    fp4_status st = FP4_OK;
    cudaError_t ce = cudaSetDevice(w->device);
    if (ce != cudaSuccess)
        st = fp4_fail(&w->err, FP4_ERR_CUDA, "cudaSetDevice(%d): %s", w->device, cudaGetErrorString(ce));
    if (st == FP4_OK) st = fp4_engine_create(job->set, &w->report, &w->engine, &w->err);
    if (st == FP4_OK && job->measure_ceilings) {
        fp4_err cerr;
        if (fp4_engine_measure_ceilings(w->engine, &w->report, &cerr) != FP4_OK)
            fp4_warn(&w->warn, "GPU %d: ceilings not measured: %s", w->device, fp4_err_text(&cerr));
    }
    if (st != FP4_OK) worker_fail(w, st);
    (void)gate_wait(run, n + 1); /* ready: the main thread fills the report's GPUs */
    int stop = gate_wait(run, n + 1); /* go, unless a GPU or on_ready said stop */
    for (int i = 0; !stop && i < job->ncases; i++) {
        if (i > 0) stop = gate_wait(run, n); /* every GPU starts case i together */
        if (stop) break;
        st = fp4_engine_run_case(w->engine, &job->cases[i], i, job->backends, job->nbackends,
                                 &w->report, worker_row, w, &w->err);
        /* keep coming to the gates: the others stop there, all at once */
        if (st != FP4_OK) worker_fail(w, st);
    }
    if (w->engine) {
        fp4_engine_destroy(w->engine, &w->warn);
        w->engine = NULL;
    }
    fp4_report_free(&w->report);
    return NULL;
}
#endif

fp4_status fp4_pergpu_run(const fp4_pergpu_job *job, fp4_report *report, fp4_warnings *warnings,
                          fp4_err *err)
{
#ifndef FP4_HAVE_CUDA
    (void)job;
    (void)report;
    (void)warnings;
    return fp4_fail(err, FP4_ERR_UNSUPPORTED, "no CUDA device (fp4bench was built without CUDA)");
#else
    const int n = job && job->gpus ? job->gpus->n : 0;
    pergpu_run run;
    pergpu_worker *workers;
    fp4_status st = FP4_OK;
    int started = 0;
    if (!job || !report || n < 1 || n > FP4_MAX_GPUS || !job->set || (job->ncases > 0 && !job->cases))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_pergpu_run: no GPUs, or a NULL argument");
    workers = calloc((size_t)n, sizeof *workers);
    if (!workers) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for %d GPU threads", n);
    memset(&run, 0, sizeof run);
    run.job = job;
    run.report = report;
    if (pthread_mutex_init(&run.lock, NULL) != 0) {
        free(workers);
        return fp4_fail(err, FP4_ERR_INTERNAL, "cannot create the run's lock");
    }
    if (pthread_cond_init(&run.opened, NULL) != 0) {
        pthread_mutex_destroy(&run.lock);
        free(workers);
        return fp4_fail(err, FP4_ERR_INTERNAL, "cannot create the run's condition variable");
    }
    for (int i = 0; i < n; i++) {
        pergpu_worker *w = &workers[i];
        w->run = &run;
        w->device = job->gpus->index[i];
        fp4_err_clear(&w->err);
        fp4_warnings_clear(&w->warn);
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            st = fp4_fail(err, FP4_ERR_INTERNAL, "cannot start the thread of GPU %d", w->device);
            break;
        }
        w->started = 1;
        started++;
    }
    if (started < n) {
        /* the threads that run wait at the gates for n + 1 parties: stand
         * in for the missing ones so that they get through and see stop */
        pthread_mutex_lock(&run.lock);
        run.stop = 1;
        pthread_mutex_unlock(&run.lock);
        for (int gate = 0; gate < 2; gate++) (void)gate_arrive(&run, n + 1, n + 1 - started);
    } else {
        (void)gate_wait(&run, n + 1); /* every engine up */
        pthread_mutex_lock(&run.lock);
        report->ngpus = n;
        for (int i = 0; i < n; i++) {
            report->gpus[i].dev = workers[i].report.dev;
            report->gpus[i].x = workers[i].report.devx;
            report->gpus[i].ceil = workers[i].report.ceil;
        }
        report->dev = workers[0].report.dev;
        report->devx = workers[0].report.devx;
        report->ceil = workers[0].report.ceil;
        report->set = workers[0].report.set;
        if (!run.stop && job->on_ready && job->on_ready(report, job->user) != 0) run.stop = 1;
        pthread_mutex_unlock(&run.lock);
        (void)gate_wait(&run, n + 1); /* go */
    }
    for (int i = 0; i < n; i++)
        if (workers[i].started) pthread_join(workers[i].thread, NULL);
    /* the first GPU in the list that failed names the error; else Ctrl-C */
    for (int i = 0; st == FP4_OK && i < n; i++) {
        const pergpu_worker *w = &workers[i];
        if (w->st == FP4_OK || w->st == FP4_ERR_INTERRUPTED) continue;
        st = fp4_fail(err, w->st, "GPU %d%s%s%s: %s", w->device,
                      report->gpus[i].x.pci_bus_id[0] ? " (" : "", report->gpus[i].x.pci_bus_id,
                      report->gpus[i].x.pci_bus_id[0] ? ")" : "", fp4_err_text(&w->err));
    }
    if (st == FP4_OK && run.interrupted) st = fp4_fail(err, FP4_ERR_INTERRUPTED, "interrupted");
    for (int i = 0; i < n; i++) fp4_warnings_append(warnings, &workers[i].warn);
    pthread_cond_destroy(&run.opened);
    pthread_mutex_destroy(&run.lock);
    free(workers);
    return st;
#endif
}
