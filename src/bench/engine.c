/* The measurement engine (see include/fp4/engine.h and docs/MEASUREMENT.md).
 *
 * Per case: operands from the seed (A, its negation for odd copies, and the
 * bf16 activations A was quantized from); the exact reference once (cuda-ref
 * on a GPU, else the CPU reference), only when a non-reference backend needs
 * it; per backend: open (cached), supports, prepare with enough operand
 * copies that the device memory they take spans >= 3x L2 (cold, measured) or
 * 1 copy (hot), check that poison() poisons, verify copies 0 and 1 (-R), then
 * interleaved timing rounds behind a stream gate, then every copy verified
 * again from one replay of the timed graph. */
#include "fp4/engine.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "bench/device.h"
#include "bench/inputs.h"
#include "fp4/backend.h"
#include "fp4/reference.h"

#ifdef FP4_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "bench/engine_gpu.h"
#include "core/cuda_check.h"
#include "core/gpu.h"
#include "kernels/probe.h"
#endif

#define MAX_OPEN 64
#define MAX_COPIES 1024 /* tiny shapes rotate less than 3x L2: their rows say "warm" */
#define GATE_TIMEOUT_MS 2000.0   /* a stream gate the host never opens gives up */
/* Work enqueued behind a closed gate waits in the stream's launch queue; a
 * batch with more kernel nodes than the queue holds blocks cudaGraphLaunch
 * until the gate gives up (seen on the H200 with per-expert MoE graphs of
 * ~4600 nodes, while dense batches of 2048 nodes passed). Larger batches are
 * cut to fit, and a single batch that still does not fit runs ungated. */
#define GATE_MAX_NODES 2048
#define OWN_SPOT_CHECKS 256      /* elements checked against a lossy backend's own operands */
#define MAX_SAMPLE_US 20000.0    /* ...unless a replay would last longer than this */
#define SPOT_CHECKS 64          /* elements of a reference row checked naively */
/* The light phase after each sample of an interleaved rate measurement, as a
 * multiple of the sample's length (docs/MEASUREMENT.md, "Ceilings"). */
#define RATE_LIGHT_RATIO 1.0
#define CEILING_MAX_TIME_S 3.0  /* per pass: the ceilings are a yardstick, not a subject */

typedef struct open_backend {
    const fp4_backend_ops *ops;
    void *inst;
    fp4_status st;
    fp4_err err;
} open_backend;

struct fp4_engine {
    fp4_settings set;
    fp4_device_info dev;
    fp4_device_extra devx; /* which GPU: every call runs on devx.index */
    fp4_nvml *nvml;
    open_backend open[MAX_OPEN];
    int nopen;
    /* > 0 only while a rate is measured interleaved: after every sample a
     * light phase of light_ratio times the sample's length */
    double light_ratio;
    /* cleanup failures of the engine and of the backends it opened (their
     * set_warnings slot points here), until fp4_engine_destroy hands them on */
    fp4_warnings warn;
#ifdef FP4_HAVE_CUDA
    cudaStream_t stream;
    cudaEvent_t ev0, ev1;
    void *flush;  /* read before each plain-launch sample (2x L2) */
    size_t flush_bytes;
    unsigned *flush_sink;
    fp4_gpu_gate gate;
#endif
};

/* One backend's state while a case is measured. */
typedef struct slot {
    const fp4_backend_ops *ops;
    const fp4_gemm_problem *prob; /* the problem it computes */
    const float *ref;             /* and its exact result (NULL for references) */
    void *plan;
    fp4_row row;
    int active; /* verified, being timed */
    int gpu;
    int done;   /* stop rule satisfied */
    fp4_status fail; /* why the slot stopped (FP4_OK while it has not) */
    double t_est_us;
    double *samples;
    int ns, cap;
    double *launch;
    int nl;
    double *clock; /* SM clock per sample (NVML) */
    double power_sum, temp_max, mem_clock;
    int ntel, power_cap, thermal, hw_slowdown;
#ifdef FP4_HAVE_CUDA
    cudaGraphExec_t exec;
    size_t graph_nodes; /* of the captured batch */
    int nogate;         /* the gate could not hold this batch: timed with a replay ahead */
#endif
} slot;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seed of one operand: depends on the run seed, the shape and the role, not
 * on the order of cases, so one shape gets the same data in every run. */
static uint64_t operand_seed(uint64_t seed, const fp4_shape *s, int role)
{
    uint64_t h = seed * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)s->m * 0xBF58476D1CE4E5B9ull;
    h ^= (uint64_t)s->n * 0x94D049BB133111EBull + (uint64_t)s->k;
    return h * 31 + (uint64_t)role;
}

/* xorshift64* step of the round order's generator */
static uint64_t order_next(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545F4914F6CDD1Dull;
}

/* order[0..n) = a fresh uniform permutation of 0..n-1 (Fisher-Yates) */
static void order_shuffle(uint64_t *x, int *order, int n)
{
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        const int j = (int)(order_next(x) % (uint64_t)(i + 1));
        const int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* ---- engine life cycle ------------------------------------------------------ */

/* Make the engine's GPU the calling thread's current device again: CUDA's
 * current device is per thread, and every allocation, stream, graph and
 * query below must be on the device the engine was created on (fp4/engine.h),
 * whichever thread calls. */
static fp4_status engine_bind(const fp4_engine *e, fp4_err *err)
{
#ifdef FP4_HAVE_CUDA
    if (e->dev.present) FP4_CUDA_TRY(err, cudaSetDevice(e->devx.index));
#else
    (void)e;
    (void)err;
#endif
    return FP4_OK;
}

fp4_status fp4_engine_create(const fp4_settings *set, fp4_report *report, fp4_engine **out,
                             fp4_err *err)
{
    if (!out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_engine_create: NULL output");
    *out = NULL;
    if (!set || !report) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_engine_create: NULL settings or report");
    /* the stopping rule must end: a NaN time limit never does */
    const fp4_stop_rule *r = &set->stop;
    if (!(r->max_time_s > 0 && isfinite(r->max_time_s)) || !(r->noise_target > 0 && isfinite(r->noise_target)) ||
        !(r->min_time_s >= 0 && r->min_time_s < HUGE_VAL) || r->min_samples < 1 ||
        !(set->warmup_ms >= 0 && isfinite(set->warmup_ms)) || set->min_batch < 0)
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "settings: max time %g s and noise target %g must be finite and > 0, min time %g s "
                        "and warm-up %g ms finite and >= 0, min samples %d >= 1",
                        r->max_time_s, r->noise_target, r->min_time_s, set->warmup_ms, r->min_samples);
    fp4_engine *e = calloc(1, sizeof *e);
    char why[160];
    if (!e) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for the engine");
    e->set = *set;
    if (!e->set.order_seed) /* never 0: 0 asks for this derivation */
        e->set.order_seed = ((set->seed ^ 0xD1B54A32D192ED03ull) * 0x9E3779B97F4A7C15ull) | 1u;
    fp4_device_describe(&e->dev);
    if (e->dev.present) fp4_device_locate(&e->devx);
#ifdef FP4_HAVE_CUDA
    if (e->dev.present) {
        fp4_status st = FP4_OK;
        if (cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking) != cudaSuccess ||
            cudaEventCreate(&e->ev0) != cudaSuccess || cudaEventCreate(&e->ev1) != cudaSuccess)
            st = fp4_fail(err, FP4_ERR_CUDA, "cannot create a CUDA stream or events");
        e->flush_bytes = (size_t)(e->dev.l2_bytes * 2) / 16 * 16;
        if (st == FP4_OK && e->flush_bytes &&
            (cudaMalloc(&e->flush, e->flush_bytes) != cudaSuccess ||
             cudaMemset(e->flush, 0x5A, e->flush_bytes) != cudaSuccess))
            st = fp4_fail(err, FP4_ERR_CUDA, "cannot allocate the L2 flush buffer");
        if (st == FP4_OK)
            st = fp4_gpu_alloc((void **)&e->flush_sink, 4096 * sizeof(unsigned), "the flush sink", err);
        if (st == FP4_OK) st = fp4_gpu_gate_create(&e->gate, err);
        if (st != FP4_OK) {
            fp4_engine_destroy(e, NULL); /* the error says it all */
            return st;
        }
        e->nvml = fp4_nvml_open(why, sizeof why);
        e->dev.nvml = e->nvml != NULL;
        e->devx.power_limit_w = fp4_nvml_power_limit_w(e->nvml);
        snprintf(e->dev.driver_string, sizeof e->dev.driver_string,
                 "%.63s", e->nvml ? fp4_nvml_driver(e->nvml) : why);
    }
#else
    (void)why;
#endif
    report->dev = e->dev;
    report->devx = e->devx;
    report->set = e->set;
#ifdef FP4_HAVE_CUDA
    if (e->dev.present) { /* a failed check is reported as not measured */
        fp4_l2_check_result l2;
        fp4_l2_check *c = &report->ceil.l2;
        memset(c, 0, sizeof *c);
        if (fp4_gpu_l2_check(e->dev.l2_bytes, e->stream, &l2, &e->warn, NULL) == FP4_OK) {
            c->measured = 1;
            c->buffer_bytes = l2.buffer_bytes;
            c->rotation_bytes = l2.rotation_bytes;
            c->hot_gbps = l2.hot_gbps;
            c->rotated_gbps = l2.rotated_gbps;
            c->flushed_gbps = l2.flushed_gbps;
            c->cold = l2.rotated_gbps <= 1.15 * l2.flushed_gbps;
        }
        (void)cudaGetLastError();
    }
#endif
    *out = e;
    return FP4_OK;
}

void fp4_engine_destroy(fp4_engine *e, fp4_warnings *warnings)
{
    fp4_err berr;
    if (!e) return;
    /* the backends and buffers are freed on the device that holds them */
    if (engine_bind(e, &berr) != FP4_OK) fp4_warn(&e->warn, "%s", fp4_err_text(&berr));
    for (int i = 0; i < e->nopen; i++)
        if (e->open[i].st == FP4_OK) e->open[i].ops->close(e->open[i].inst);
    fp4_nvml_close(e->nvml);
#ifdef FP4_HAVE_CUDA
    fp4_gpu_release(e->flush, "the L2 flush buffer", &e->warn);
    fp4_gpu_release(e->flush_sink, "the flush sink", &e->warn);
    fp4_gpu_gate_destroy(&e->gate, &e->warn);
    if (e->ev0) FP4_CUDA_CLEANUP(&e->warn, cudaEventDestroy(e->ev0));
    if (e->ev1) FP4_CUDA_CLEANUP(&e->warn, cudaEventDestroy(e->ev1));
    if (e->stream) FP4_CUDA_CLEANUP(&e->warn, cudaStreamDestroy(e->stream));
#endif
    fp4_warnings_append(warnings, &e->warn);
    free(e);
}

const fp4_warnings *fp4_engine_warnings(const fp4_engine *e)
{
    return e ? &e->warn : NULL;
}

/* Open a backend once per engine; failures are remembered with their reason. */
static fp4_status instance_of(fp4_engine *e, const fp4_backend_ops *ops, void **inst,
                              fp4_err *err)
{
    for (int i = 0; i < e->nopen; i++)
        if (e->open[i].ops == ops) {
            *inst = e->open[i].inst;
            if (e->open[i].st != FP4_OK && err) *err = e->open[i].err;
            return e->open[i].st;
        }
    if (e->nopen == MAX_OPEN) return fp4_fail(err, FP4_ERR_INTERNAL, "too many backends");
    open_backend *ob = &e->open[e->nopen++];
    ob->ops = ops;
    fp4_err_clear(&ob->err);
    ob->st = fp4_backend_validate(ops, &ob->err);
    /* Without a GPU every GPU backend would fail its open with the same CUDA
     * error; report->dev.why_absent holds that error once, the rows a short
     * reason. */
    if (ob->st == FP4_OK && (ops->flags & FP4_BACKEND_GPU) && !e->dev.present)
        ob->st = fp4_fail(&ob->err, FP4_ERR_UNSUPPORTED, "no NVIDIA GPU");
    if (ob->st == FP4_OK) ob->st = ops->open(&ob->inst, &ob->err);
    if (ob->st == FP4_OK && ops->set_warnings) ops->set_warnings(ob->inst, &e->warn);
    if (ob->st != FP4_OK && !ob->err.msg[0])
        fp4_fail(&ob->err, ob->st, "%s", fp4_status_str(ob->st));
    *inst = ob->inst;
    if (ob->st != FP4_OK && err) *err = ob->err;
    return ob->st;
}

fp4_status fp4_engine_probe_backend(fp4_engine *e, const fp4_backend_ops *ops, fp4_err *err)
{
    void *inst;
    fp4_status st = engine_bind(e, err);
    if (st != FP4_OK) return st;
    return instance_of(e, ops, &inst, err);
}

/* ---- verification ------------------------------------------------------------- */

void fp4_compare_outputs(const float *d, const float *r, size_t n, double tol_max,
                         double tol_norm, fp4_verdict *v)
{
    double max_r = 0, max_diff = 0, sum_r2 = 0, sum_d2 = 0;
    long long bad_ref = 0;
    memset(v, 0, sizeof *v);
    for (size_t i = 0; i < n; i++) {
        double x = d[i], y = r[i];
        if (!isfinite(x)) v->nonfinite++; /* counted where the reference is not finite too */
        if (!isfinite(y)) {
            bad_ref++;
            continue;
        }
        if (!isfinite(x)) continue;
        if (x == 0) v->zeros_d++;
        if (y == 0) v->zeros_r++;
        double diff = fabs(x - y);
        if (fabs(y) > max_r) max_r = fabs(y);
        if (diff > max_diff) max_diff = diff;
        sum_r2 += y * y;
        sum_d2 += diff * diff;
    }
    v->err_max = max_r > 0 ? max_diff / max_r : (max_diff > 0 ? INFINITY : 0);
    v->err_norm = sum_r2 > 0 ? sqrt(sum_d2 / sum_r2) : (sum_d2 > 0 ? INFINITY : 0);
    v->all_zero = (size_t)v->zeros_d == n && (size_t)v->zeros_r != n;
    if (bad_ref)
        snprintf(v->why, sizeof v->why,
                 "the reference has %lld NaN/Inf of %zu (scales overflow fp32): no verdict possible",
                 bad_ref, n);
    else if (v->nonfinite)
        snprintf(v->why, sizeof v->why, "%lld of %zu outputs NaN/Inf (unwritten or overflow)",
                 v->nonfinite, n);
    else if (v->all_zero)
        snprintf(v->why, sizeof v->why, "output is all zeros");
    else if (!(v->err_max <= tol_max) || !(v->err_norm <= tol_norm)) /* NaN fails too */
        snprintf(v->why, sizeof v->why, "error max %.3g (tol %.3g), norm %.3g (tol %.3g)",
                 v->err_max, tol_max, v->err_norm, tol_norm);
    else {
        v->pass = 1;
        snprintf(v->why, sizeof v->why, "max %.2g norm %.2g", v->err_max, v->err_norm);
    }
}

/* A reference backend is checked against the naive double loop on a sample of
 * elements (it is the oracle for everyone else, so it gets an independent
 * check), plus the usual "every element written" check. */
static int spot_check_reference(const fp4_gemm_problem *p, const float *d, uint64_t seed,
                                char *why, size_t why_len)
{
    fp4_rng rng;
    size_t n = (size_t)p->shape.m * (size_t)p->shape.n;
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(d[i])) {
            snprintf(why, why_len, "output element %zu is NaN/Inf", i);
            return 0;
        }
    fp4_rng_seed(&rng, seed);
    for (int i = 0; i < SPOT_CHECKS; i++) {
        int64_t row = (int64_t)(fp4_rng_next(&rng) % (uint64_t)p->shape.m);
        int64_t col = (int64_t)(fp4_rng_next(&rng) % (uint64_t)p->shape.n);
        double want = fp4_gemm_naive_element(p->a, p->b, p->alpha, row, col);
        double got = d[row * p->shape.n + col];
        if (!(fabs(got - want) <= 1e-6 * fabs(want) + 1e-30)) bad++;
    }
    if (bad) snprintf(why, why_len, "%d of %d spot checks differ from the naive loop", bad, SPOT_CHECKS);
    else snprintf(why, why_len, "exact (%d spot checks)", SPOT_CHECKS);
    return bad == 0;
}

/* The reference output R [m, n] for problem p: cuda-ref when a GPU is
 * present (bit-identical to the CPU reference, tested), else the CPU one. */
static fp4_status compute_reference(fp4_engine *e, const fp4_gemm_problem *p, float *r,
                                    uint64_t seed, char *oracle, size_t oracle_len, fp4_err *err)
{
#ifdef FP4_HAVE_CUDA
    const fp4_backend_ops *ops = fp4_backend_find("cuda-ref");
    void *inst, *plan = NULL;
    if (e->dev.present && ops && instance_of(e, ops, &inst, NULL) == FP4_OK &&
        ops->prepare(inst, p, 1, &plan, NULL) == FP4_OK) {
        char why[96];
        /* the oracle is checked like any reference row: poisoned first, then
         * every element finite and 64 elements equal to the naive loop */
        fp4_status st = ops->poison(plan, 0, e->stream, NULL);
        if (st == FP4_OK) st = ops->run(plan, 0, e->stream, NULL);
        if (st == FP4_OK && cudaStreamSynchronize(e->stream) != cudaSuccess) st = FP4_ERR_CUDA;
        if (st == FP4_OK) st = ops->read_output(plan, 0, r, NULL);
        ops->release(plan);
        if (st == FP4_OK && !spot_check_reference(p, r, seed, why, sizeof why))
            return fp4_fail(err, FP4_ERR_VERIFY, "the GPU reference cuda-ref is wrong: %s", why);
        if (st == FP4_OK) {
            snprintf(oracle, oracle_len, "cuda-ref");
            return FP4_OK;
        }
    }
#endif
    snprintf(oracle, oracle_len, "cpu-ref");
    return fp4_gemm_reference(p->a, p->b, p->alpha, r, 0, err);
}

/* ---- timing ---------------------------------------------------------------------- */

static fp4_status push_sample(double **arr, int *n, int *cap, double v, fp4_err *err)
{
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 64;
        double *p = realloc(*arr, (size_t)nc * sizeof *p);
        if (!p) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for samples");
        *arr = p;
        *cap = nc;
    }
    (*arr)[(*n)++] = v;
    return FP4_OK;
}

/* Operand copies for cold L2: enough that one pass over them touches >= 3x
 * the L2 (FlashInfer's #4468: fewer calls than copies measured a warm L2, so
 * the batch always cycles through every copy, see plan_batch). */
static int copies_for(const fp4_engine *e, double bytes_per_call)
{
    if (e->set.hot || !e->dev.present || bytes_per_call <= 0) return 1;
    /* in double: a tiny bytes_per_call must not overflow int */
    double want = ceil(3.0 * e->dev.l2_bytes / bytes_per_call);
    /* copies are also bounded by memory: keep the rotation under 1/4 of it */
    double mem_cap = floor(e->dev.mem_bytes / 4 / (bytes_per_call > 1 ? bytes_per_call : 1));
    if (want > mem_cap) want = mem_cap;
    if (want > MAX_COPIES) want = MAX_COPIES;
    return want < 1 ? 1 : (int)want;
}

#ifdef FP4_HAVE_CUDA
/* Time `count` plain launches cycling through the copies (us per call). */
static fp4_status time_launches(fp4_engine *e, slot *s, int count, int flush, double *us,
                                fp4_err *err)
{
    float ms = 0;
    if (flush && e->flush) {
        fp4_status fst = fp4_gpu_l2_flush(e->flush, e->flush_bytes, e->flush_sink, e->stream, err);
        if (fst != FP4_OK) return fst;
    }
    FP4_CUDA_TRY(err, cudaEventRecord(e->ev0, e->stream));
    for (int i = 0; i < count; i++) {
        fp4_status st = s->ops->run(s->plan, i % s->row.copies, e->stream, err);
        if (st != FP4_OK) return st;
    }
    FP4_CUDA_TRY(err, cudaEventRecord(e->ev1, e->stream));
    FP4_CUDA_TRY(err, cudaEventSynchronize(e->ev1));
    FP4_CUDA_TRY(err, cudaEventElapsedTime(&ms, e->ev0, e->ev1));
    *us = (double)ms * 1e3 / count;
    return FP4_OK;
}

/* Capture one batch: calls i = 0..batch-1 on copy i % copies. batch is a
 * multiple of copies, so every copy is used equally often and the sample's
 * working set is the whole rotation (checked, not assumed). */
static fp4_status capture_batch(fp4_engine *e, slot *s, fp4_err *err)
{
    cudaGraph_t graph = NULL;
    fp4_status st = FP4_OK;
    int used[MAX_COPIES] = {0}, distinct = 0;
    if (s->row.batch % s->row.copies != 0)
        return fp4_fail(err, FP4_ERR_INTERNAL, "batch %d is not a multiple of %d copies",
                        s->row.batch, s->row.copies);
    FP4_CUDA_TRY(err, cudaStreamBeginCapture(e->stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < s->row.batch && st == FP4_OK; i++) {
        int c = i % s->row.copies;
        if (!used[c]++) distinct++;
        st = s->ops->run(s->plan, c, e->stream, err);
    }
    cudaError_t ce = cudaStreamEndCapture(e->stream, &graph);
    if (st != FP4_OK) goto out;
    if (ce != cudaSuccess) {
        st = fp4_fail(err, FP4_ERR_CUDA, "graph capture of %s failed: %s", s->ops->name,
                      cudaGetErrorString(ce));
        goto out;
    }
    if (distinct != s->row.copies) {
        st = fp4_fail(err, FP4_ERR_INTERNAL, "batch used %d of %d copies", distinct, s->row.copies);
        goto out;
    }
    ce = cudaGraphGetNodes(graph, NULL, &s->graph_nodes);
    if (ce != cudaSuccess) {
        st = fp4_fail(err, FP4_ERR_CUDA, "counting the graph's nodes: %s", cudaGetErrorString(ce));
        goto out;
    }
    ce = cudaGraphInstantiate(&s->exec, graph, 0);
    if (ce != cudaSuccess)
        st = fp4_fail(err, FP4_ERR_CUDA, "graph instantiation failed: %s", cudaGetErrorString(ce));
out:
    if (graph) FP4_CUDA_CLEANUP(&e->warn, cudaGraphDestroy(graph));
    /* a failed capture leaves a sticky-free error behind; clear it so the next
     * backend's calls do not report it (only then: a success must not hide a
     * backend's asynchronous error from the checks that follow) */
    if (st != FP4_OK) (void)cudaGetLastError();
    return st;
}

/* One replay behind the stream gate: the start event, the replay and the stop
 * event are all enqueued before the GPU reaches the start event, so the time
 * between them holds neither the host's submission nor the replay's launch
 * latency, only the batch itself (a fixed per-replay cost divided by
 * batches of different sizes would bias ratios). */
static fp4_status time_graph(fp4_engine *e, slot *s, double *us, fp4_err *err)
{
    float ms = 0;
    if (s->nogate || s->graph_nodes > GATE_MAX_NODES) {
        /* Too large for the gate: one replay runs ahead, and the timed one is
         * enqueued while it runs (a replay this large lasts far longer than
         * its launch), so the GPU does not wait on the host between them. */
        cudaError_t ce = cudaGraphLaunch(s->exec, e->stream);
        if (ce == cudaSuccess) ce = cudaEventRecord(e->ev0, e->stream);
        if (ce == cudaSuccess) ce = cudaGraphLaunch(s->exec, e->stream);
        if (ce == cudaSuccess) ce = cudaEventRecord(e->ev1, e->stream);
        if (ce != cudaSuccess)
            return fp4_fail(err, FP4_ERR_CUDA, "graph replay of %s: %s", s->ops->name, cudaGetErrorString(ce));
        FP4_CUDA_TRY(err, cudaEventSynchronize(e->ev1));
        FP4_CUDA_TRY(err, cudaEventElapsedTime(&ms, e->ev0, e->ev1));
        *us = (double)ms * 1e3 / s->row.batch;
        return FP4_OK;
    }
    fp4_status st = fp4_gpu_gate_hold(&e->gate, e->stream, GATE_TIMEOUT_MS, err);
    if (st != FP4_OK) return st;
    cudaError_t ce = cudaEventRecord(e->ev0, e->stream);
    if (ce == cudaSuccess) ce = cudaGraphLaunch(s->exec, e->stream);
    if (ce == cudaSuccess) ce = cudaEventRecord(e->ev1, e->stream);
    fp4_gpu_gate_release(&e->gate); /* in every case: the stream must not stay held */
    if (ce != cudaSuccess)
        return fp4_fail(err, FP4_ERR_CUDA, "graph replay of %s: %s", s->ops->name,
                        cudaGetErrorString(ce));
    FP4_CUDA_TRY(err, cudaEventSynchronize(e->ev1));
    if (fp4_gpu_gate_timed_out(&e->gate)) {
        /* The launch queue filled before the node count said it would (graphs
         * of library calls hold more than their kernel nodes): this slot is
         * timed with a replay ahead from now on. */
        s->nogate = 1;
        snprintf(s->row.timing, sizeof s->row.timing, "graph-nogate");
        return time_graph(e, s, us, err);
    }
    FP4_CUDA_TRY(err, cudaEventElapsedTime(&ms, e->ev0, e->ev1));
    *us = (double)ms * 1e3 / s->row.batch;
    return FP4_OK;
}
#endif

/* Decide the batch (calls per sample) from a first estimate of one call. */
static fp4_status plan_batch(fp4_engine *e, slot *s, fp4_err *err)
{
    if (!s->gpu) {
        double t0 = now_s();
        fp4_status st = s->ops->run(s->plan, 0, NULL, err);
        s->t_est_us = (now_s() - t0) * 1e6;
        s->row.batch = 1;
        snprintf(s->row.timing, sizeof s->row.timing, "host");
        return st;
    }
#ifdef FP4_HAVE_CUDA
    double us = 0;
    fp4_status st = time_launches(e, s, s->row.copies, 0, &us, err); /* first touch */
    if (st == FP4_OK) st = time_launches(e, s, s->row.copies, 0, &us, err);
    if (st != FP4_OK) return st;
    s->t_est_us = us;
    /* The batch depends on the copies alone, not on a timed estimate: on the
     * H200 an estimate that flipped reps between 1 and 2 moved a 11.5 us
     * cuBLAS row by 3.8% between two runs. The stream gate keeps the
     * replay's start-up out of the time; min_batch calls amortise what is
     * left (the first call's ramp). */
    const int min_batch = e->set.min_batch > 0 ? e->set.min_batch : 1;
    int reps = (min_batch + s->row.copies - 1) / s->row.copies;
    /* ...except for slow calls, where a replay's start-up cost is noise
     * anyway: keep a sample under MAX_SAMPLE_US so the time limit still
     * allows enough samples */
    while (reps > 1 && us * s->row.copies * reps > MAX_SAMPLE_US) reps--;
    if (reps < 1) reps = 1;
    s->row.batch = reps * s->row.copies;
    if (e->set.use_graphs) {
        st = capture_batch(e, s, err);
        if (st == FP4_OK && s->graph_nodes > GATE_MAX_NODES && reps > 1) {
            /* fewer calls a batch, so that the gate can hold it */
            const size_t per_rep = (s->graph_nodes + (size_t)reps - 1) / (size_t)reps;
            int fit = (int)(GATE_MAX_NODES / (per_rep ? per_rep : 1));
            if (fit < 1) fit = 1;
            if (fit < reps) {
                FP4_CUDA_CLEANUP(&e->warn, cudaGraphExecDestroy(s->exec));
                s->exec = NULL;
                reps = fit;
                s->row.batch = reps * s->row.copies;
                st = capture_batch(e, s, err);
            }
        }
        snprintf(s->row.timing, sizeof s->row.timing,
                 s->graph_nodes > GATE_MAX_NODES ? "graph-nogate" : "graph");
    } else {
        snprintf(s->row.timing, sizeof s->row.timing, "launch");
    }
    return st;
#else
    return fp4_fail(err, FP4_ERR_INTERNAL, "GPU backend in a CPU-only build");
#endif
}

/* One timed sample of slot s (per-call microseconds). */
static fp4_status take_sample(fp4_engine *e, slot *s, double *us, fp4_err *err)
{
    if (!s->gpu) {
        double t0 = now_s();
        fp4_status st = s->ops->run(s->plan, 0, NULL, err);
        *us = (now_s() - t0) * 1e6;
        return st;
    }
#ifdef FP4_HAVE_CUDA
    if (e->set.use_graphs) return time_graph(e, s, us, err);
    return time_launches(e, s, s->row.batch, !e->set.hot, us, err);
#else
    return fp4_fail(err, FP4_ERR_INTERNAL, "GPU backend in a CPU-only build");
#endif
}

static void sleep_us(double us)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(us * 1e-6);
    ts.tv_nsec = (long)((us - (double)ts.tv_sec * 1e6) * 1e3);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* After a sample of `us` per call (interleaved rate measurements only): a
 * light phase light_ratio times as long as the sample, so the next sample
 * starts with the clock recovered, as a row's sample does after the lighter
 * kernels of its round. On the GPU one thread waits on the timer; a CPU slot
 * sleeps. */
static fp4_status light_phase(fp4_engine *e, const slot *s, double us, fp4_err *err)
{
    double light_us = e->light_ratio * us * s->row.batch;
    if (!(light_us > 0)) return FP4_OK;
    if (!s->gpu) {
        sleep_us(light_us);
        return FP4_OK;
    }
#ifdef FP4_HAVE_CUDA
    fp4_status st = fp4_gpu_light_phase(light_us, e->stream, err);
    if (st != FP4_OK) return st;
    FP4_CUDA_TRY(err, cudaStreamSynchronize(e->stream));
    return FP4_OK;
#else
    return fp4_fail(err, FP4_ERR_INTERNAL, "GPU backend in a CPU-only build");
#endif
}

static void telemetry_sample(fp4_engine *e, slot *s)
{
    fp4_nvml_sample t;
    if (!s->gpu || fp4_nvml_read(e->nvml, &t) != 0) return;
    double *p = realloc(s->clock, (size_t)(s->ntel + 1) * sizeof *p);
    if (!p) return;
    s->clock = p;
    s->clock[s->ntel++] = t.sm_mhz;
    s->power_sum += t.power_w;
    if (t.temp_c > s->temp_max) s->temp_max = t.temp_c;
    s->mem_clock = t.mem_mhz;
    s->row.tel.throttle_reasons |= t.reasons;
    /* NVML's clocks-event reasons: 0x4 software power cap, 0x80 hardware
     * power brake; 0x20 software, 0x40 hardware thermal; 0x8 hardware
     * slowdown */
    s->power_cap += (t.reasons & 0x84ull) != 0;
    s->thermal += (t.reasons & 0x60ull) != 0;
    s->hw_slowdown += (t.reasons & 0x8ull) != 0;
}

/* ---- one case ------------------------------------------------------------------------ */

static void fill_metrics(const fp4_engine *e, const fp4_report *rep, slot *s)
{
    fp4_row *row = &s->row;
    const fp4_ceilings *c = &rep->ceil;
    double med = row->t.median;
    row->flops = s->ops->flops ? s->ops->flops(&row->shape) : fp4_shape_flops(&row->shape);
    row->bytes = s->ops->bytes_moved ? s->ops->bytes_moved(&row->shape)
                                     : fp4_gemm_min_bytes(row->shape.m, row->shape.n, row->shape.k);
    row->pct_peak = -1;
    row->pct_roofline = -1;
    if (!(med > 0)) return;
    row->tflops = row->flops / (med * 1e-6) / 1e12;
    row->gbps = row->bytes / (med * 1e-6) / 1e9;
    double bw = c->measured && c->read_gbps > 0 ? c->read_gbps : e->dev.peak_bw_gbps;
    double rate = 0, peak = 0;
    switch (s->ops->math) {
    case FP4_MATH_BF16_TC: rate = c->bf16_tflops; peak = e->dev.peak_bf16_tflops; break;
    case FP4_MATH_FP8_TC: rate = c->fp8_tflops; peak = e->dev.peak_fp8_tflops; break;
    case FP4_MATH_FP4_TC: rate = e->dev.peak_fp4_tflops; peak = rate; break;
    default: break;
    }
    if (s->gpu && bw > 0) {
        double floor_bw = row->bytes / (bw * 1e9) * 1e6;
        double floor_fl = rate > 0 ? row->flops / (rate * 1e12) * 1e6 : 0;
        row->floor_us = floor_bw > floor_fl ? floor_bw : floor_fl;
        row->pct_roofline = 100.0 * row->floor_us / med;
    }
    if (peak > 0) row->pct_peak = 100.0 * row->tflops / peak;
}

static void fill_telemetry(slot *s, double warm_clock)
{
    fp4_telemetry *t = &s->row.tel;
    if (s->ntel == 0) return;
    t->valid = 1;
    fp4_stats cs;
    fp4_stats_compute(s->clock, s->ntel, &cs);
    t->sm_clock_mhz = cs.median;
    t->sm_clock_min_mhz = cs.min;
    t->mem_clock_mhz = s->mem_clock;
    t->power_w = s->power_sum / s->ntel;
    t->temp_c = s->temp_max;
    t->samples = s->ntel;
    t->power_cap_samples = s->power_cap;
    t->thermal_samples = s->thermal;
    t->hw_slowdown_samples = s->hw_slowdown;
    for (int i = 0; i < s->ntel; i++)
        if (warm_clock > 0 && s->clock[i] < 0.9 * warm_clock) t->low_clock_samples++;
}

static void slot_fail(slot *s, fp4_status st, const fp4_err *err, const char *stage)
{
    s->row.state = st == FP4_ERR_UNSUPPORTED ? FP4_ROW_UNSUPPORTED : FP4_ROW_FAILED;
    s->fail = st;
    if (st == FP4_ERR_INTERRUPTED) s->row.interrupted = 1; /* unmeasured: no row (fp4_row_unmeasured) */
    if (s->row.state == FP4_ROW_UNSUPPORTED)
        snprintf(s->row.reason, sizeof s->row.reason, "%s", fp4_err_text(err));
    else
        snprintf(s->row.reason, sizeof s->row.reason, "%s: %s", stage, fp4_err_text(err));
    s->active = 0;
    /* a FAILED row reports no time: statistics of a backend that broke
     * mid-measurement would be read as a result */
    memset(&s->row.t, 0, sizeof s->row.t);
    memset(&s->row.t_launch, 0, sizeof s->row.t_launch);
    s->ns = 0;
    s->nl = 0;
#ifdef FP4_HAVE_CUDA
    /* a failure's CUDA error (an out-of-memory cudaMalloc, a bad launch) may
     * still be the thread's last error; the next backend's launch checks
     * would report it as theirs. Sticky errors stay: they are the context's. */
    if (s->gpu) (void)cudaGetLastError();
#endif
}

static void *engine_stream(fp4_engine *e)
{
#ifdef FP4_HAVE_CUDA
    return e->stream;
#else
    (void)e;
    return NULL;
#endif
}

static fp4_status sync_slot(fp4_engine *e, const slot *s, fp4_err *err)
{
#ifdef FP4_HAVE_CUDA
    /* the stream is non-blocking: a backend that reads back with a plain
     * cudaMemcpy would not wait for it */
    if (s->gpu) FP4_CUDA_TRY(err, cudaStreamSynchronize(e->stream));
#else
    (void)e;
    (void)s;
    (void)err;
#endif
    return FP4_OK;
}

/* A lossy backend against the exact product of its own rounded operands, on
 * a sample of elements: its rounding may hide in the loose NVFP4 tolerance,
 * a wrong scale or alpha may not. d holds copy `copy`'s output. */
static fp4_status check_own_reference(const slot *s, int copy, const float *d, uint64_t seed,
                                      double *own_err, fp4_err *err)
{
    const fp4_shape *sh = &s->prob->shape;
    const double sign = fp4_problem_sign(s->prob, copy);
    double want[OWN_SPOT_CHECKS], got[OWN_SPOT_CHECKS], max_want = 0, max_diff = 0;
    fp4_rng rng;
    fp4_rng_seed(&rng, seed);
    for (int i = 0; i < OWN_SPOT_CHECKS; i++) {
        const int64_t row = (int64_t)(fp4_rng_next(&rng) % (uint64_t)sh->m);
        const int64_t col = (int64_t)(fp4_rng_next(&rng) % (uint64_t)sh->n);
        want[i] = sign * s->ops->own_reference(s->plan, row, col);
        got[i] = d[row * sh->n + col];
        if (fabs(want[i]) > max_want) max_want = fabs(want[i]);
    }
    for (int i = 0; i < OWN_SPOT_CHECKS; i++) {
        const double diff = fabs(got[i] - want[i]);
        if (!(diff <= max_diff)) max_diff = isnan(diff) ? INFINITY : diff;
    }
    *own_err = max_want > 0 ? max_diff / max_want : (max_diff > 0 ? INFINITY : 0);
    if (!(*own_err <= s->ops->own_tol))
        return fp4_fail(err, FP4_ERR_VERIFY,
                        "copy %d: error %.3g against the exact product of its own rounded "
                        "operands (tol %.3g, %d elements)",
                        copy, *own_err, s->ops->own_tol, OWN_SPOT_CHECKS);
    return FP4_OK;
}

/* Check copy `copy`'s output (already computed, synchronised) against the
 * reference: s->ref for contenders (odd copies against -R), the naive loop on
 * a sample for reference backends. Fills the row's verdict. */
static fp4_status check_copy(fp4_engine *e, slot *s, int copy, float *d, uint64_t seed,
                             fp4_err *err)
{
    const fp4_gemm_problem *p = s->prob;
    const size_t n = (size_t)p->shape.m * (size_t)p->shape.n;
    fp4_status st;
    (void)e;
    for (size_t i = 0; i < n; i++) d[i] = NAN; /* a backend that reads nothing back fails */
    if ((st = s->ops->read_output(s->plan, copy, d, err)) != FP4_OK) return st;
    if (s->ops->flags & FP4_BACKEND_REFERENCE) {
        char why[96];
        fp4_gemm_problem q = *p;
        q.a = fp4_problem_a(p, copy); /* the naive loop of this copy's A */
        int ok = spot_check_reference(&q, d, seed, why, sizeof why);
        s->row.verified = ok ? -1 : 0;
        snprintf(s->row.verify_note, sizeof s->row.verify_note, "%s", why);
        return ok ? FP4_OK : fp4_fail(err, FP4_ERR_VERIFY, "copy %d: %s", copy, why);
    }
    if (fp4_problem_sign(p, copy) < 0) /* odd copies computed -D */
        for (size_t i = 0; i < n; i++) d[i] = -d[i];
    fp4_verdict v;
    fp4_compare_outputs(d, s->ref, n, s->ops->tol_max, s->ops->tol_norm, &v);
    s->row.err_max = v.err_max;
    s->row.err_norm = v.err_norm;
    s->row.verified = v.pass;
    snprintf(s->row.verify_note, sizeof s->row.verify_note, "%s", v.why);
    if (!v.pass) return fp4_fail(err, FP4_ERR_VERIFY, "copy %d: %s", copy, v.why);
    if ((s->ops->flags & FP4_BACKEND_LOSSY) && s->ops->own_reference) {
        if (fp4_problem_sign(p, copy) < 0) /* back to what the backend wrote */
            for (size_t i = 0; i < n; i++) d[i] = -d[i];
        if ((st = check_own_reference(s, copy, d, seed, &s->row.own_err, err)) != FP4_OK) return st;
        size_t len = strlen(s->row.verify_note);
        snprintf(s->row.verify_note + len, sizeof s->row.verify_note - len, "; own operands %.2g",
                 s->row.own_err);
    }
    return FP4_OK;
}

/* poison() must leave every output element non-finite, or a backend that
 * skips a write could pass on what an earlier run left behind. */
static fp4_status check_poison(fp4_engine *e, slot *s, float *d, fp4_err *err)
{
    const size_t n = (size_t)s->prob->shape.m * (size_t)s->prob->shape.n;
    size_t finite = 0;
    fp4_status st;
    if ((st = s->ops->poison(s->plan, 0, engine_stream(e), err)) != FP4_OK) return st;
    if ((st = sync_slot(e, s, err)) != FP4_OK) return st;
    for (size_t i = 0; i < n; i++) d[i] = 0.0f;
    st = s->ops->read_output(s->plan, 0, d, err);
    /* a backend that checks its own output (the quantizer compares its codes
     * with the CPU quantizer's) refuses a poisoned one: poisoned all the same */
    if (st == FP4_ERR_VERIFY) return FP4_OK;
    if (st != FP4_OK) return st;
    for (size_t i = 0; i < n; i++) finite += isfinite(d[i]) != 0;
    if (finite)
        return fp4_fail(err, FP4_ERR_VERIFY,
                        "poison() left %zu of %zu output elements finite (read back before any run)",
                        finite, n);
    return FP4_OK;
}

/* Verify one copy of slot s: poison, run, check. */
static fp4_status verify_copy(fp4_engine *e, slot *s, int copy, float *d, uint64_t seed,
                              fp4_err *err)
{
    fp4_status st;
    void *stream = engine_stream(e);
    if ((st = s->ops->poison(s->plan, copy, stream, err)) != FP4_OK) return st;
    if ((st = s->ops->run(s->plan, copy, stream, err)) != FP4_OK) return st;
    if ((st = sync_slot(e, s, err)) != FP4_OK) return st;
    return check_copy(e, s, copy, d, seed, err);
}

static void slot_free(fp4_engine *e, slot *s)
{
#ifdef FP4_HAVE_CUDA
    if (s->exec) FP4_CUDA_CLEANUP(&e->warn, cudaGraphExecDestroy(s->exec));
#else
    (void)e;
#endif
    if (s->plan) s->ops->release(s->plan);
    free(s->samples);
    free(s->launch);
    free(s->clock);
    memset(s, 0, sizeof *s);
}

/* Forget a finished measurement (its samples went to its row) so that the
 * same plans can be timed again; the batch and the captured graph stay. */
static void slot_reset_timing(slot *s)
{
    free(s->launch);
    free(s->clock);
    free(s->samples);
    s->samples = s->launch = s->clock = NULL;
    s->ns = s->cap = s->nl = s->ntel = 0;
    s->power_cap = s->thermal = s->hw_slowdown = 0;
    s->done = 0;
    s->power_sum = s->temp_max = s->mem_clock = 0;
    memset(&s->row.t, 0, sizeof s->row.t);
    memset(&s->row.t_launch, 0, sizeof s->row.t_launch);
    memset(&s->row.tel, 0, sizeof s->row.tel);
    s->row.timed_out = 0;
    s->row.samples = NULL;
    s->row.nsamples = 0;
    s->row.has_ratio = 0;
    s->row.ratio = s->row.ratio_lo = s->row.ratio_hi = 0;
    s->row.tflops = s->row.gbps = s->row.floor_us = 0;
    s->row.pct_roofline = s->row.pct_peak = -1;
}

static int interrupted(const fp4_engine *e)
{
    return e->set.interrupt && *e->set.interrupt;
}

/* Interleaved timing of every active slot: warm-up by time, then rounds
 * until every slot meets the stop rule or the measurement's time limit. */
static fp4_status time_slots(fp4_engine *e, slot *slots, int ns, const fp4_shape *shape,
                             double *warm_clock, fp4_err *err)
{
    fp4_err serr;
    double t0 = now_s();
    int any;
    /* every round in a fresh order: a backend's time must not depend on which
     * one ran before it (a slow neighbour leaves the clocks and caches in
     * another state); seeded per shape, so a run is reproducible */
    uint64_t ox = operand_seed(e->set.order_seed, shape, 7) | 1u;
    int *order = malloc((size_t)ns * sizeof *order);
    if (!order) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for the round order");
    /* warm-up: whole rounds until warmup_ms has passed, at least one */
    do {
        any = 0;
        order_shuffle(&ox, order, ns);
        for (int j = 0; j < ns; j++) {
            const int i = order[j];
            double us = 0;
            if (!slots[i].active) continue;
            any = 1;
            fp4_status st = take_sample(e, &slots[i], &us, &serr);
            if (st == FP4_OK) st = light_phase(e, &slots[i], us, &serr);
            if (st != FP4_OK) slot_fail(&slots[i], st, &serr, "warm-up");
        }
    } while (any && (now_s() - t0) * 1e3 < e->set.warmup_ms && !interrupted(e));
    fp4_nvml_sample tel;
    *warm_clock = fp4_nvml_read(e->nvml, &tel) == 0 ? tel.sm_mhz : 0;

    t0 = now_s();
    for (;;) {
        int running = 0;
        if (interrupted(e)) { /* keep what was measured, say it was cut short */
            for (int i = 0; i < ns; i++)
                if (slots[i].active) slots[i].row.interrupted = 1;
            break;
        }
        order_shuffle(&ox, order, ns);
        for (int j = 0; j < ns; j++) {
            slot *s = &slots[order[j]];
            double us = 0;
            if (!s->active) continue;
            fp4_status st = take_sample(e, s, &us, &serr);
            if (st != FP4_OK) {
                slot_fail(s, st, &serr, "timing");
                continue;
            }
            if ((st = push_sample(&s->samples, &s->ns, &s->cap, us, err)) != FP4_OK) {
                free(order);
                return st;
            }
            telemetry_sample(e, s); /* before the light phase: the clock of the sample */
            if ((st = light_phase(e, s, us, &serr)) != FP4_OK) {
                slot_fail(s, st, &serr, "light phase");
                continue;
            }
            /* the stats sort every sample: recompute them only on a geometric
             * schedule so that very fast kernels do not spend their time here */
            if (s->ns > 32 && s->ns % (s->ns / 16) != 0 &&
                now_s() - t0 < e->set.stop.max_time_s) {
                running |= !s->done;
                continue;
            }
            fp4_stats_compute(s->samples, s->ns, &s->row.t);
            int timed_out = 0;
            s->done = fp4_should_stop(&e->set.stop, &s->row.t, now_s() - t0, &timed_out);
            s->row.timed_out = timed_out;
            if (!s->done) running = 1;
        }
        if (!running) break;
        /* the slowest slot decides; a slot that met its rule keeps sampling
         * so that per-round ratios stay paired */
        if (now_s() - t0 >= e->set.stop.max_time_s) {
            for (int i = 0; i < ns; i++)
                if (slots[i].active && !slots[i].done) slots[i].row.timed_out = 1;
            break;
        }
    }
    for (int i = 0; i < ns; i++) { /* final statistics over every sample */
        if (!slots[i].active) continue;
        if (slots[i].ns == 0) {
            fp4_err_clear(&serr);
            fp4_fail(&serr, FP4_ERR_INTERRUPTED, "interrupted before it was timed");
            slot_fail(&slots[i], FP4_ERR_INTERRUPTED, &serr, "timing");
            continue;
        }
        fp4_stats_compute(slots[i].samples, slots[i].ns, &slots[i].row.t);
    }
#ifdef FP4_HAVE_CUDA
    /* plain launches, for the launch-inclusive figure */
    if (e->set.measure_launch && e->set.use_graphs && !interrupted(e)) {
        for (int r = 0; r < e->set.stop.min_samples; r++)
            for (int i = 0; i < ns; i++) {
                slot *s = &slots[i];
                double us = 0;
                int cap = s->nl;
                if (!s->active || !s->gpu) continue;
                fp4_status lst = time_launches(e, s, s->row.batch, !e->set.hot, &us, &serr);
                if (lst != FP4_OK) {
                    slot_fail(s, lst, &serr, "launch timing");
                    continue;
                }
                if (push_sample(&s->launch, &s->nl, &cap, us, err) != FP4_OK) {
                    free(order);
                    return FP4_ERR_NOMEM;
                }
            }
        for (int i = 0; i < ns; i++)
            if (slots[i].nl) fp4_stats_compute(slots[i].launch, slots[i].nl, &slots[i].row.t_launch);
    }
#endif
    free(order);
    return FP4_OK;
}

/* Per-round paired ratio baseline/this, median and 95% CI. */
static void fill_ratio(slot *s, const slot *base)
{
    int n = s->ns < base->ns ? s->ns : base->ns;
    if (n < 1 || !s->active || !base->active) return;
    double *r = malloc((size_t)n * sizeof *r);
    if (!r) return;
    for (int i = 0; i < n; i++) r[i] = base->samples[i] / s->samples[i];
    s->row.has_ratio = 1;
    s->row.ratio = fp4_quantile(r, n, 0.5);
    fp4_median_ci(r, n, &s->row.ratio_lo, &s->row.ratio_hi);
    free(r);
}

/* How run_case measures: rows verify and time once with no light phase; a
 * rate measurement skips verification and times the same plans once per
 * light ratio (one set of rows each). */
typedef struct case_opts {
    int verify;
    const double *light; /* [npasses] light ratios; NULL: one pass, none */
    int npasses;
    fp4_status *fail;    /* optional [nb]: each backend's failure, FP4_OK if none */
} case_opts;

/* Device memory in use (GPU builds with a GPU; 0 otherwise). */
static double device_used_bytes(const fp4_engine *e)
{
#ifdef FP4_HAVE_CUDA
    size_t free_b = 0, total_b = 0;
    if (e->dev.present && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        return (double)total_b - (double)free_b;
#else
    (void)e;
#endif
    return 0;
}

/* prepare() with enough copies that the memory they take spans >= 3x L2.
 * The copies start from the least any GEMM must move per call (NVFP4
 * operands, bf16 D) and grow from what prepare() is measured to allocate per
 * copy (at most three prepares; from the second, the memory one more copy
 * adds, so that buffers shared by every copy do not count as rotated):
 * neither a backend's own account of its bytes nor a guess decides how cold
 * its rows are. */
static fp4_status prepare_slot(fp4_engine *e, slot *s, void *inst, fp4_err *err)
{
    const fp4_shape *sh = &s->prob->shape;
    const double l2x3 = 3.0 * e->dev.l2_bytes, least = fp4_gemm_min_bytes(sh->m, sh->n, sh->k);
    int copies = s->gpu ? copies_for(e, least) : 1, prev_copies = 0;
    double prev_alloc = 0;
    for (int attempt = 0;; attempt++) {
        const double used0 = device_used_bytes(e);
        double t0 = now_s();
        fp4_status st;
        s->plan = NULL;
        st = s->ops->prepare(inst, s->prob, copies, &s->plan, err);
        if (st != FP4_OK) s->plan = NULL; /* a failed prepare owns nothing */
#ifdef FP4_HAVE_CUDA
        if (st == FP4_OK && s->gpu && cudaDeviceSynchronize() != cudaSuccess)
            st = fp4_fail(err, FP4_ERR_CUDA, "prepare left a CUDA error: %s",
                          cudaGetErrorString(cudaGetLastError()));
#endif
        s->row.prepare_ms = (now_s() - t0) * 1e3;
        s->row.copies = copies;
        if (st != FP4_OK) return st;
        if (!s->gpu || e->set.hot) {
            s->row.rotation_bytes = 0;
            return FP4_OK;
        }
        const double alloc = device_used_bytes(e) - used0;
        /* nothing measurable (a backend allocating ahead, in open()): the
         * least a GEMM moves stands in */
        s->row.rotation_bytes = alloc > 0 ? alloc : copies * least;
        if (s->row.rotation_bytes >= l2x3 || !(alloc > 0) || attempt == 2) return FP4_OK;
        double per_copy = alloc / copies;
        if (prev_copies && copies > prev_copies && alloc > prev_alloc)
            per_copy = (alloc - prev_alloc) / (copies - prev_copies);
        const int more = copies_for(e, per_copy);
        if (more <= copies) return FP4_OK; /* at the copy or memory limit: "warm" */
        s->ops->release(s->plan);
        s->plan = NULL;
        prev_copies = copies;
        prev_alloc = alloc;
        copies = more;
    }
}

/* How one copy's output is checked after timing (check_copy for GEMM rows,
 * the MoE engine's own check for its rows). */
typedef fp4_status (*copy_check_fn)(void *user, int copy, fp4_err *err);

/* After timing: poison every copy, replay what was timed once (the captured
 * graph, or one batch of plain launches), and check every copy it ran, so the
 * result of each copy the timing rotated through is checked, not one
 * computed apart from it. A batch runs every copy (a multiple of them), but
 * a host backend's is one call on copy 0 (its copies beyond the first only
 * serve the checks before timing). */
static fp4_status verify_after_timing(fp4_engine *e, slot *s, copy_check_fn check, void *user,
                                      fp4_err *err)
{
    fp4_status st = FP4_OK;
    void *stream = engine_stream(e);
    const int ran = s->row.batch < s->row.copies ? s->row.batch : s->row.copies;
    for (int c = 0; c < s->row.copies && st == FP4_OK; c++) st = s->ops->poison(s->plan, c, stream, err);
    if (st != FP4_OK) return st;
#ifdef FP4_HAVE_CUDA
    if (s->gpu && s->exec) {
        FP4_CUDA_TRY(err, cudaGraphLaunch(s->exec, e->stream));
    } else
#endif
    {
        for (int i = 0; i < s->row.batch && st == FP4_OK; i++)
            st = s->ops->run(s->plan, i % s->row.copies, stream, err);
        if (st != FP4_OK) return st;
    }
    if ((st = sync_slot(e, s, err)) != FP4_OK) return st;
    /* keep the verdict of copy 0 for the row (the note): check it last */
    for (int c = ran - 1; c >= 0; c--)
        if ((st = check(user, c, err)) != FP4_OK) return st;
    s->row.verified_copies = ran;
    return FP4_OK;
}

/* check_copy as a copy_check_fn */
typedef struct gemm_check {
    fp4_engine *e;
    slot *s;
    float *d;
    uint64_t seed;
} gemm_check;

static fp4_status gemm_check_copy(void *user, int copy, fp4_err *err)
{
    gemm_check *g = user;
    return check_copy(g->e, g->s, copy, g->d, g->seed, err);
}

/* The problem of a backend that starts from bf16 activations (FP4 backend
 * flag FROM_BF16): A as the CPU quantizer makes it from x with the static
 * scale 1/A.global_scale (the global scale kept), and -x's for odd copies.
 * *same is set when that is p's A and -A byte for byte (usual for data
 * quantized by the engine itself), so p's reference serves. */
typedef struct bf16_problem {
    fp4_matrix a, a_odd;
    uint16_t *x_neg;
    fp4_gemm_problem p;
    int same;
} bf16_problem;

static fp4_status make_bf16_problem(const fp4_gemm_problem *p, bf16_problem *q, fp4_err *err)
{
    const size_t n = (size_t)p->shape.m * (size_t)p->shape.k;
    const size_t nc = n / 2, ns = n / FP4_BLOCK;
    const float encode = 1.0f / p->a->global_scale;
    fp4_status st;
    memset(q, 0, sizeof *q);
    q->x_neg = malloc(n * sizeof *q->x_neg);
    if (!q->x_neg) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for the negated activations");
    for (size_t i = 0; i < n; i++) q->x_neg[i] = (uint16_t)(p->a_bf16[i] ^ 0x8000u);
    if ((st = fp4_quantize_bf16(p->a_bf16, p->shape.m, p->shape.k, encode, &q->a, err)) != FP4_OK ||
        (st = fp4_quantize_bf16(q->x_neg, p->shape.m, p->shape.k, encode, &q->a_odd, err)) != FP4_OK)
        return st;
    q->a.global_scale = q->a_odd.global_scale = p->a->global_scale;
    q->p = *p;
    q->p.a = &q->a;
    q->p.a_odd = &q->a_odd;
    q->same = memcmp(q->a.codes, p->a->codes, nc) == 0 && memcmp(q->a.scales, p->a->scales, ns) == 0 &&
              memcmp(q->a_odd.codes, p->a_odd->codes, nc) == 0 &&
              memcmp(q->a_odd.scales, p->a_odd->scales, ns) == 0;
    return FP4_OK;
}

static void bf16_problem_free(bf16_problem *q)
{
    fp4_matrix_free(&q->a);
    fp4_matrix_free(&q->a_odd);
    free(q->x_neg);
}

/* The host memory a case holds at once: the bf16 activations, A, -A and B in
 * NVFP4 (codes and scales), and three fp32 M x N outputs (a backend's, the
 * exact reference's, the bf16 problem's). A case that cannot fit the machine
 * is refused before anything is allocated, with the numbers, rather than
 * left to swap or to be killed. */
static fp4_status host_memory_check(const fp4_shape *s, fp4_err *err)
{
    const double mk = (double)s->m * (double)s->k, nk = (double)s->n * (double)s->k;
    const double mn = (double)s->m * (double)s->n;
    const double need = 2.0 * mk + 2.0 * 0.5625 * mk + 0.5625 * nk + 3.0 * 4.0 * mn;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return FP4_OK; /* unknown here: malloc will say */
    const double have = (double)pages * (double)page;
    if (need > have)
        return fp4_fail(err, FP4_ERR_NOMEM,
                        "%lldx%lldx%lld needs about %.1f GB of host memory for its operands and "
                        "outputs, this machine has %.1f GB",
                        (long long)s->m, (long long)s->n, (long long)s->k, need / 1e9, have / 1e9);
    return FP4_OK;
}

static fp4_status run_case(fp4_engine *e, const fp4_case *c, const fp4_backend_ops *const *backends,
                           int nb, fp4_report *report, fp4_row_callback cb, void *user,
                           const case_opts *opt, fp4_err *err)
{
    const int verify = opt->verify;
    fp4_status st;
    fp4_matrix a = {0}, a_odd = {0}, b = {0};
    uint16_t *x = NULL;
    bf16_problem q;
    int have_q = 0;
    slot *slots = calloc((size_t)nb, sizeof *slots);
    float *r = NULL, *r_q = NULL, *d = NULL;
    size_t n = (size_t)c->shape.m * (size_t)c->shape.n;
    char oracle[16] = "";
    double warm_clock = 0;
    memset(&q, 0, sizeof q);
    if (!slots) return fp4_fail(err, FP4_ERR_NOMEM, "no memory");
    if (interrupted(e)) {
        st = fp4_fail(err, FP4_ERR_INTERRUPTED, "interrupted");
        goto out;
    }
    if ((st = fp4_shape_check(&c->shape, err)) != FP4_OK) goto out;
    if ((st = host_memory_check(&c->shape, err)) != FP4_OK) goto out;
    if ((st = fp4_make_activations(e->set.data, c->shape.m, c->shape.k,
                                   operand_seed(e->set.seed, &c->shape, 0), &x, &a, err)) != FP4_OK)
        goto out;
    if ((st = fp4_negate_operand(&a, &a_odd, err)) != FP4_OK) goto out;
    if ((st = fp4_make_operand(e->set.data, c->shape.n, c->shape.k,
                               operand_seed(e->set.seed, &c->shape, 1), &b, err)) != FP4_OK)
        goto out;
    d = malloc(n * sizeof *d);
    if (!d) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "no memory for a %zu-element output", n);
        goto out;
    }
    const fp4_gemm_problem p = {.shape = c->shape, .a = &a, .b = &b,
                                .alpha = a.global_scale * b.global_scale, .a_odd = &a_odd,
                                .a_bf16 = x, .tuning = e->set.baseline_tuning};
    const uint64_t spot_seed = operand_seed(e->set.seed, &c->shape, 2);

    /* open, check, prepare, verify */
    for (int i = 0; i < nb; i++) {
        slot *s = &slots[i];
        fp4_err berr;
        void *inst = NULL;
        fp4_err_clear(&berr);
        s->ops = backends[i];
        s->gpu = (s->ops->flags & FP4_BACKEND_GPU) != 0;
        s->prob = &p;
        snprintf(s->row.label, sizeof s->row.label, "%s", c->label);
        s->row.shape = c->shape;
        snprintf(s->row.backend, sizeof s->row.backend, "%s", s->ops->name);
        s->row.gpu = e->devx.index;
        snprintf(s->row.l2, sizeof s->row.l2, "%s", !s->gpu ? "n/a" : e->set.hot ? "hot" : "cold");
        s->row.pct_peak = s->row.pct_roofline = -1;
        s->row.own_err = -1;
        if ((st = instance_of(e, s->ops, &inst, &berr)) != FP4_OK) {
            slot_fail(s, st, &berr, "open");
            continue;
        }
        if (s->ops->supports && (st = s->ops->supports(inst, &c->shape, &berr)) != FP4_OK) {
            slot_fail(s, st, &berr, "supports");
            continue;
        }
        if (s->ops->flags & FP4_BACKEND_FROM_BF16) {
            if (!have_q) {
                if ((st = make_bf16_problem(&p, &q, err)) != FP4_OK) goto out;
                have_q = 1;
            }
            s->prob = q.same ? &p : &q.p;
        }
        if ((st = prepare_slot(e, s, inst, &berr)) != FP4_OK) {
            if (s->plan) s->ops->release(s->plan); /* prepare may have succeeded, its sync not */
            s->plan = NULL;
            slot_fail(s, st, &berr, "prepare");
            continue;
        }
        /* too small to rotate through 3x L2 within the copy and memory limits */
        if (s->gpu && !e->set.hot && s->row.rotation_bytes < 3.0 * e->dev.l2_bytes)
            snprintf(s->row.l2, sizeof s->row.l2, "warm");
        if (s->ops->variant)
            snprintf(s->row.variant, sizeof s->row.variant, "%s", s->ops->variant(s->plan));
        s->active = 1;
        if (!verify) continue;
        if (!(s->ops->flags & FP4_BACKEND_REFERENCE)) {
            float **ref = s->prob == &p ? &r : &r_q;
            if (!*ref) {
                *ref = malloc(n * sizeof **ref);
                if (!*ref) {
                    st = fp4_fail(err, FP4_ERR_NOMEM, "no memory for the reference");
                    goto out;
                }
                if ((st = compute_reference(e, s->prob, *ref, operand_seed(e->set.seed, &c->shape, 3),
                                            oracle, sizeof oracle, err)) != FP4_OK)
                    goto out;
            }
            s->ref = *ref;
        }
        /* copy 1 computes -R: a backend that ignores the copy index fails
         * here already; copy 0 last, its verdict is the row's note */
        st = check_poison(e, s, d, &berr);
        if (st == FP4_OK && s->row.copies > 1) st = verify_copy(e, s, 1, d, spot_seed, &berr);
        if (st == FP4_OK) st = verify_copy(e, s, 0, d, spot_seed, &berr);
        if (st != FP4_OK) {
            slot_fail(s, st, &berr, "verification");
            continue;
        }
        if (oracle[0] && !(s->ops->flags & FP4_BACKEND_REFERENCE)) {
            size_t len = strlen(s->row.verify_note);
            snprintf(s->row.verify_note + len, sizeof s->row.verify_note - len, " vs %s", oracle);
        }
    }

    /* the references verify; they are timed only when asked to, when one is
     * the ratios' baseline, or when they are all there is (a machine with no
     * GPU times cpu-ref) */
    if (!e->set.time_reference) {
        int contenders = 0;
        for (int i = 0; i < nb; i++)
            contenders += slots[i].active && !(slots[i].ops->flags & FP4_BACKEND_REFERENCE);
        for (int i = 0; i < nb; i++)
            if (contenders && slots[i].active && (slots[i].ops->flags & FP4_BACKEND_REFERENCE) &&
                strcmp(slots[i].ops->name, e->set.baseline) != 0) { /* a baseline is timed */
                slots[i].active = 0; /* verified, kept out of the rounds */
            }
    }

    for (int pass = 0; pass < (opt->light ? opt->npasses : 1); pass++) {
        e->light_ratio = opt->light ? opt->light[pass] : 0;
        /* time the verified ones together */
        if (!e->set.verify_only) {
            for (int i = 0; i < nb; i++) {
                fp4_err berr;
                if (pass > 0) slot_reset_timing(&slots[i]);
                if (!slots[i].active || pass > 0) continue;
                if ((st = plan_batch(e, &slots[i], &berr)) != FP4_OK)
                    slot_fail(&slots[i], st, &berr, "timing setup");
            }
            if ((st = time_slots(e, slots, nb, &c->shape, &warm_clock, err)) != FP4_OK) goto out;
            /* what was timed, verified: every copy, from one replay */
            for (int i = 0; verify && !interrupted(e) && i < nb; i++) {
                slot *s = &slots[i];
                fp4_err berr;
                if (!s->active || (s->ops->flags & FP4_BACKEND_REFERENCE) || pass > 0) continue;
                gemm_check gc = {e, s, d, spot_seed};
                fp4_err_clear(&berr);
                if ((st = verify_after_timing(e, s, gemm_check_copy, &gc, &berr)) != FP4_OK)
                    slot_fail(s, st, &berr, "verification after timing");
                else if (oracle[0]) {
                    size_t len = strlen(s->row.verify_note);
                    snprintf(s->row.verify_note + len, sizeof s->row.verify_note - len, " vs %s",
                             oracle);
                }
            }
        }

        const slot *base = NULL;
        for (int i = 0; i < nb; i++)
            if (e->set.baseline[0] && strcmp(slots[i].ops->name, e->set.baseline) == 0)
                base = &slots[i];
        /* a ratio only compares GEMM with GEMM (FP4_BACKEND_NOT_GEMM) */
        if (base && (base->ops->flags & FP4_BACKEND_NOT_GEMM)) base = NULL;
        for (int i = 0; i < nb; i++) {
            slot *s = &slots[i];
            if (s->active && !e->set.verify_only) {
                fill_metrics(e, report, s);
                fill_telemetry(s, warm_clock);
                if (base && base != s && !(s->ops->flags & FP4_BACKEND_NOT_GEMM))
                    fill_ratio(s, base);
                if (base == s) {
                    s->row.has_ratio = 1;
                    s->row.ratio = s->row.ratio_lo = s->row.ratio_hi = 1.0;
                }
            }
        }
        for (int i = 0; i < nb; i++) {
            slot *s = &slots[i];
            if (fp4_row_unmeasured(&s->row)) continue;
            { /* the row owns every sample; the JSON holds them with --samples */
                s->row.samples = s->samples;
                s->row.nsamples = s->ns;
                s->samples = NULL;
            }
            if ((st = fp4_report_add(report, &s->row, err)) != FP4_OK) goto out;
            if (cb) cb(report, &report->rows[report->nrows - 1], user);
        }
    }
    st = interrupted(e) ? fp4_fail(err, FP4_ERR_INTERRUPTED, "interrupted") : FP4_OK;
out:
    e->light_ratio = 0;
    for (int i = 0; i < nb; i++) {
        if (opt->fail) opt->fail[i] = slots[i].ops ? slots[i].fail : st;
        slot_free(e, &slots[i]);
    }
    free(slots);
    free(r);
    free(r_q);
    free(d);
    free(x);
    if (have_q) bf16_problem_free(&q);
    fp4_matrix_free(&a);
    fp4_matrix_free(&a_odd);
    fp4_matrix_free(&b);
    return st;
}

fp4_status fp4_engine_run_case(fp4_engine *e, const fp4_case *c, int case_index,
                               const fp4_backend_ops *const *backends, int nbackends,
                               fp4_report *report, fp4_row_callback cb, void *user, fp4_err *err)
{
    const case_opts opt = {1, NULL, 0, NULL};
    fp4_status st = engine_bind(e, err);
    (void)case_index;
    if (st != FP4_OK) return st;
    return run_case(e, c, backends, nbackends, report, cb, user, &opt, err);
}

/* ---- timing prepared plans (fp4_engine_time_plans, for the MoE engine) ---------------- */

void *fp4_engine_stream(fp4_engine *e)
{
    return e ? engine_stream(e) : NULL;
}

fp4_status fp4_engine_time_plans(fp4_engine *e, fp4_timed_plan *plans, int n,
                                 const fp4_shape *order_key, int baseline, fp4_err *err)
{
    fp4_status st = FP4_OK;
    double warm_clock = 0;
    slot *slots;
    if (!e || (n > 0 && !plans) || !order_key)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_engine_time_plans: NULL argument");
    if (n <= 0 || e->set.verify_only) return FP4_OK;
    if ((st = engine_bind(e, err)) != FP4_OK) return st;
    slots = calloc((size_t)n, sizeof *slots);
    if (!slots) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for %d timing slots", n);
    e->light_ratio = 0;
    for (int i = 0; i < n; i++) {
        slot *s = &slots[i];
        fp4_err serr;
        s->ops = plans[i].ops;
        s->plan = plans[i].plan;
        s->gpu = (s->ops->flags & FP4_BACKEND_GPU) != 0;
        s->row = *plans[i].row;
        s->row.samples = NULL;
        s->row.gpu = e->devx.index;
        s->active = s->row.state == FP4_ROW_OK && s->row.copies >= 1;
        if (!s->active) continue;
        fp4_err_clear(&serr);
        if ((st = plan_batch(e, s, &serr)) != FP4_OK) slot_fail(s, st, &serr, "timing setup");
    }
    if ((st = time_slots(e, slots, n, order_key, &warm_clock, err)) != FP4_OK) goto out;
    for (int i = 0; i < n && !interrupted(e); i++) {
        slot *s = &slots[i];
        fp4_err serr;
        if (!s->active || !plans[i].check) continue;
        fp4_err_clear(&serr);
        if ((st = verify_after_timing(e, s, plans[i].check, plans[i].check_user, &serr)) != FP4_OK)
            slot_fail(s, st, &serr, "verification after timing");
    }
    st = FP4_OK;
    for (int i = 0; i < n; i++) {
        slot *s = &slots[i];
        if (!s->active) continue;
        fill_telemetry(s, warm_clock);
        if (baseline >= 0 && baseline < n && i != baseline) fill_ratio(s, &slots[baseline]);
        if (i == baseline) {
            s->row.has_ratio = 1;
            s->row.ratio = s->row.ratio_lo = s->row.ratio_hi = 1.0;
        }
    }
out:
    for (int i = 0; i < n; i++) {
        slot *s = &slots[i];
        if (s->ops) {
            /* the row owns every sample; the plan stays the caller's */
            s->row.samples = s->samples;
            s->row.nsamples = s->ns;
            s->samples = NULL;
            *plans[i].row = s->row;
        }
        s->plan = NULL;
        slot_free(e, s);
    }
    free(slots);
    return st;
}

/* ---- rates and ceilings --------------------------------------------------------------- */

fp4_status fp4_engine_measure_rate(fp4_engine *e, const fp4_backend_ops *ops,
                                   const fp4_shape *shape, fp4_rate *out, fp4_err *err)
{
    const double light[2] = {RATE_LIGHT_RATIO, 0.0}; /* interleaved, then sustained */
    fp4_status fail = FP4_OK;
    case_opts o = {0, light, 2, NULL};
    fp4_case c;
    fp4_report tmp;
    fp4_settings saved = e->set;
    fp4_status st;
    memset(out, 0, sizeof *out);
    memset(&tmp, 0, sizeof tmp);
    memset(&c, 0, sizeof c);
    if (!ops || !shape) return fp4_fail(err, FP4_ERR_INVALID_ARG, "measure_rate: NULL argument");
    if ((st = engine_bind(e, err)) != FP4_OK) return st;
    c.shape = *shape;
    snprintf(c.label, sizeof c.label, "rate");
    o.fail = &fail;
    /* cold L2 and the rows' batch rule, on the run's kind of data: tensor-core
     * power, hence the clock, depends on the operand bits (codes data ran
     * cuBLAS bf16 at 722 TFLOP/s on the H200, gaussian NVFP4 values at 837);
     * not verified: the vendor GEMMs are the yardstick here, not the subject */
    e->set.hot = 0;
    e->set.baseline[0] = '\0';
    e->set.measure_launch = 0;
    e->set.verify_only = 0;
    st = run_case(e, &c, &ops, 1, &tmp, NULL, NULL, &o, err);
    e->set = saved;
    if (st == FP4_OK && tmp.nrows != 2)
        st = fp4_fail(err, FP4_ERR_INTERNAL, "measure_rate: %d rows, want 2", tmp.nrows);
    for (int i = 0; st == FP4_OK && i < 2; i++)
        if (tmp.rows[i].state != FP4_ROW_OK)
            st = fp4_fail(err, fail != FP4_OK ? fail : FP4_ERR_INTERNAL, "%s", tmp.rows[i].reason);
    if (st == FP4_OK) {
        out->light_ratio = light[0];
        out->interleaved = tmp.rows[0].t;
        out->interleaved_tflops = tmp.rows[0].tflops;
        out->interleaved_timed_out = tmp.rows[0].timed_out;
        out->sustained = tmp.rows[1].t;
        out->sustained_tflops = tmp.rows[1].tflops;
        out->sustained_timed_out = tmp.rows[1].timed_out;
        out->batch = tmp.rows[0].batch;
        out->copies = tmp.rows[0].copies;
    }
    fp4_report_free(&tmp);
    return st;
}

#ifdef FP4_HAVE_CUDA
/* One tensor-rate ceiling at 8192^3, both ways; 0 when the backend cannot
 * run here (e.g. fp8 before sm_89): "not measured", as the JSON says. */
static void ceiling_rate(fp4_engine *e, const char *name, double *interleaved, double *sustained)
{
    const fp4_backend_ops *ops = fp4_backend_find(name);
    const fp4_shape big = {8192, 8192, 8192};
    fp4_rate r;
    *interleaved = *sustained = 0;
    if (ops && fp4_engine_measure_rate(e, ops, &big, &r, NULL) == FP4_OK) {
        *interleaved = r.interleaved_tflops;
        *sustained = r.sustained_tflops;
    }
}
#endif

fp4_status fp4_engine_measure_ceilings(fp4_engine *e, fp4_report *report, fp4_err *err)
{
    fp4_ceilings *c = &report->ceil;
    const fp4_l2_check l2 = c->l2; /* measured at create */
    memset(c, 0, sizeof *c);
    c->l2 = l2;
    if (!e->dev.present) return FP4_OK;
#ifdef FP4_HAVE_CUDA
    fp4_status bst = engine_bind(e, err);
    if (bst != FP4_OK) return bst;
    double best = 0, median = 0, max_time = e->set.stop.max_time_s;
    size_t bytes = (size_t)4 << 30; /* >= 4 GiB, far beyond any L2 */
    if (e->dev.mem_bytes < 3.0 * (double)bytes) bytes = (size_t)(e->dev.mem_bytes / 3);
    fp4_status st = fp4_probe_read_bandwidth(bytes, 10, &best, &median, &e->warn, err);
    if (st != FP4_OK) return st;
    c->read_gbps = median;
    e->set.stop.max_time_s = CEILING_MAX_TIME_S;
    ceiling_rate(e, "cublas-bf16", &c->bf16_tflops, &c->bf16_sustained_tflops);
    ceiling_rate(e, "cublaslt-fp8", &c->fp8_tflops, &c->fp8_sustained_tflops);
    e->set.stop.max_time_s = max_time;
    c->light_ratio = RATE_LIGHT_RATIO;
    c->measured = 1;
#endif
    return FP4_OK;
}
