/* The GPU list of fp4bench run --gpus (a pure function of its input:
 * tests/test_gpus.c checks it) and the run on every listed GPU at once. The
 * comparison of the GPUs' rows is in pergpu_analysis.c. */
#include "multigpu/pergpu.h"

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
