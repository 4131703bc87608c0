/* Choosing a plan's cuBLASLt algorithm (see blas_tune.h).
 *
 * How a candidate is timed: TUNE_WARMUP_CALLS plain calls first (a candidate
 * that cuBLASLt refuses fails there, and its kernel is loaded before any
 * capture), then one CUDA graph of `calls` GEMMs cycling through the copies,
 * captured the way the engine captures run(); one untimed launch of it, then
 * TUNE_SAMPLES launches back to back with an event between each two, so that
 * a sample does not include the host's launch latency. A candidate's time is the
 * median sample over `calls`. This is the engine's own method in small
 * (graphs, copies in rotation), so the ranking holds in its measurement. */
#include "backends/blas_tune.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/blas_common.h"

/* Room for fp4_lt_describe_algo's text, which needs under 100 bytes; the
 * variant (FP4_LT_VARIANT_LEN) adds at most about 80 to it. */
#define FP4_LT_DESC_LEN 112

#define TUNE_WARMUP_CALLS 2
#define TUNE_SAMPLES 5
/* GEMMs per timed graph: every copy once, at least TUNE_CALLS_MIN (to
 * amortise the graph launch when there are few copies), at most
 * TUNE_CALLS_MAX (tiny shapes have thousands of copies). */
#define TUNE_CALLS_MIN 8
#define TUNE_CALLS_MAX 256

/* Append printf-style text to buf (size bytes, NUL-terminated); truncates. */
static void tune_append(char *buf, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void tune_append(char *buf, size_t size, const char *fmt, ...)
{
    const size_t used = strlen(buf);
    if (used + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

/* ---- describing an algorithm --------------------------------------------- */

/* Named tiles, rows x columns. Each entry is spelled through the header's own
 * enumerator, so a pair that cuBLASLt does not define does not compile. The
 * list is the classic tiles and the large Hopper/Blackwell ones; the rest
 * (hundreds of narrow tiles) print as their number. */
#define FP4_LT_NAMED_TILES(X)                                                                      \
    X(8, 8) X(8, 16) X(16, 8) X(8, 32) X(16, 16) X(32, 8) X(8, 64) X(16, 32) X(32, 16) X(64, 8)    \
    X(32, 32) X(32, 64) X(64, 32) X(32, 128) X(64, 64) X(128, 32) X(64, 128) X(128, 64)            \
    X(64, 256) X(128, 128) X(256, 64) X(64, 512) X(128, 256) X(256, 128) X(512, 64) X(64, 96)      \
    X(96, 64) X(96, 128) X(128, 160) X(160, 128) X(192, 128) X(128, 192) X(128, 96) X(32, 256)     \
    X(256, 32) X(64, 16) X(128, 8) X(128, 16) X(256, 8) X(256, 16) X(192, 64) X(192, 192)          \
    X(192, 256) X(256, 192) X(256, 256) X(256, 512) X(512, 128) X(512, 512)

static int tune_tile_dims(uint32_t id, int *rows, int *cols)
{
    switch (id) {
#define FP4_LT_TILE_CASE(r_, c_)                                                                   \
    case CUBLASLT_MATMUL_TILE_##r_##x##c_:                                                         \
        *rows = r_;                                                                                \
        *cols = c_;                                                                                \
        return 1;
        FP4_LT_NAMED_TILES(FP4_LT_TILE_CASE)
#undef FP4_LT_TILE_CASE
    default:
        return 0;
    }
}

/* Stages: K elements per stage x stage count (0 count: cuBLASLt's AUTO). */
#define FP4_LT_NAMED_STAGES(X)                                                                     \
    X(16, 1) X(16, 2) X(16, 3) X(16, 4) X(16, 5) X(16, 6) X(32, 1) X(32, 2) X(32, 3) X(32, 4)      \
    X(32, 5) X(32, 6) X(64, 1) X(64, 2) X(64, 3) X(64, 4) X(64, 5) X(64, 6) X(128, 1) X(128, 2)    \
    X(128, 3) X(128, 4) X(128, 5) X(128, 6) X(32, 10) X(8, 4) X(16, 10) X(8, 5) X(8, 3)
#define FP4_LT_AUTO_STAGES(X) X(8) X(16) X(32) X(64) X(128) X(256) X(768)

static int tune_stage_dims(uint32_t id, int *k, int *count)
{
    switch (id) {
#define FP4_LT_STAGE_CASE(k_, n_)                                                                  \
    case CUBLASLT_MATMUL_STAGES_##k_##x##n_:                                                       \
        *k = k_;                                                                                   \
        *count = n_;                                                                               \
        return 1;
#define FP4_LT_AUTO_STAGE_CASE(k_)                                                                 \
    case CUBLASLT_MATMUL_STAGES_##k_##xAUTO:                                                       \
        *k = k_;                                                                                   \
        *count = 0;                                                                                \
        return 1;
        FP4_LT_NAMED_STAGES(FP4_LT_STAGE_CASE)
        FP4_LT_AUTO_STAGES(FP4_LT_AUTO_STAGE_CASE)
#undef FP4_LT_STAGE_CASE
#undef FP4_LT_AUTO_STAGE_CASE
    default:
        return 0;
    }
}

/* Thread-block cluster shapes x by y (z is 1 in all of these). */
#define FP4_LT_NAMED_CLUSTERS(X)                                                                   \
    X(1, 1) X(2, 1) X(4, 1) X(1, 2) X(2, 2) X(4, 2) X(1, 4) X(2, 4) X(4, 4) X(8, 1) X(1, 8)        \
    X(8, 2) X(2, 8) X(16, 1) X(1, 16)

static int tune_cluster_dims(uint32_t id, int *x, int *y)
{
    switch (id) {
#define FP4_LT_CLUSTER_CASE(x_, y_)                                                                \
    case CUBLASLT_CLUSTER_SHAPE_##x_##x##y_##x1:                                                   \
        *x = x_;                                                                                   \
        *y = y_;                                                                                   \
        return 1;
        FP4_LT_NAMED_CLUSTERS(FP4_LT_CLUSTER_CASE)
#undef FP4_LT_CLUSTER_CASE
    default:
        return 0;
    }
}

/* One configuration attribute of `bytes` bytes (4 or 2), widened to uint32;
 * 0 when it cannot be read (*ok cleared then). */
static uint32_t tune_config(const cublasLtMatmulAlgo_t *algo,
                            cublasLtMatmulAlgoConfigAttributes_t a, size_t bytes, int *ok)
{
    uint32_t v32 = 0;
    uint16_t v16 = 0;
    size_t written = 0;
    void *dst = bytes == sizeof v16 ? (void *)&v16 : (void *)&v32;
    if (cublasLtMatmulAlgoConfigGetAttribute(algo, a, dst, bytes, &written) !=
            CUBLAS_STATUS_SUCCESS ||
        written != bytes) {
        *ok = 0;
        return 0;
    }
    *ok = 1;
    return bytes == sizeof v16 ? v16 : v32;
}

extern "C" void fp4_lt_describe_algo(const cublasLtMatmulAlgo_t *algo, char *buf, size_t size)
{
    int ok, r, c;
    if (!size) return;
    buf[0] = '\0';
    /* ID and SPLITK_NUM are int32, the rest uint32 except the two uint16 ids;
     * int32 read through uint32 storage keeps its bits */
    const uint32_t id = tune_config(algo, CUBLASLT_ALGO_CONFIG_ID, 4, &ok);
    if (ok) tune_append(buf, size, "algo %d", (int)(int32_t)id);
    else tune_append(buf, size, "algo ?");

    const uint32_t tile = tune_config(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, 4, &ok);
    if (!ok) tune_append(buf, size, " tile ?");
    else if (tune_tile_dims(tile, &r, &c)) tune_append(buf, size, " tile %dx%d", r, c);
    else if (tile != CUBLASLT_MATMUL_TILE_UNDEFINED) tune_append(buf, size, " tile #%u", tile);

    const uint32_t stages = tune_config(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, 4, &ok);
    if (!ok) tune_append(buf, size, " stages ?");
    else if (tune_stage_dims(stages, &r, &c) && c) tune_append(buf, size, " stages %dx%d", r, c);
    else if (tune_stage_dims(stages, &r, &c)) tune_append(buf, size, " stages %dxauto", r);
    else if (stages != CUBLASLT_MATMUL_STAGES_UNDEFINED)
        tune_append(buf, size, " stages #%u", stages);

    const uint32_t splitk = tune_config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 4, &ok);
    if (ok) tune_append(buf, size, " splitk %d", (int)(int32_t)splitk);
    else tune_append(buf, size, " splitk ?");
    if (ok && (int32_t)splitk > 1) {
        const uint32_t red = tune_config(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, 4, &ok);
        if (ok) tune_append(buf, size, " reduction %u", red);
    }

    const uint32_t swizzle = tune_config(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 4, &ok);
    if (ok && swizzle) tune_append(buf, size, " swizzle %u", swizzle);
    const uint32_t custom = tune_config(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 4, &ok);
    if (ok && custom) tune_append(buf, size, " custom %u", custom);
    const uint32_t cluster = tune_config(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, 2, &ok);
    if (ok && tune_cluster_dims(cluster, &r, &c)) tune_append(buf, size, " cluster %dx%dx1", r, c);
    else if (ok && cluster != CUBLASLT_CLUSTER_SHAPE_AUTO)
        tune_append(buf, size, " cluster #%u", cluster);
}

/* ---- timing the candidates ------------------------------------------------ */

typedef struct tune_ctx {
    void *plan;
    int copies;
    fp4_lt_run_fn run;
    int calls; /* GEMMs per timed graph */
    cudaStream_t stream;
    cudaEvent_t ev[TUNE_SAMPLES + 1];
    fp4_warnings *warn;
} tune_ctx;

/* Ends a capture that a failed call left open, so that the stream can be used
 * for the next candidate. The capture is usually invalidated by then, which is
 * expected and cleared; anything else is a warning. */
static void tune_abandon_capture(const tune_ctx *t)
{
    cudaGraph_t partial = NULL;
    const cudaError_t e = cudaStreamEndCapture(t->stream, &partial);
    if (e == cudaErrorStreamCaptureInvalidated) (void)cudaGetLastError(); /* clears it */
    else FP4_CUDA_CLEANUP(t->warn, e);
    if (partial) FP4_CUDA_CLEANUP(t->warn, cudaGraphDestroy(partial));
}

static int tune_cmp_float(const void *x, const void *y)
{
    const float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* The median time of one GEMM with the plan's current algorithm, in
 * microseconds (see the top of the file). On failure nothing is left
 * captured or allocated. */
static fp4_status tune_time(const tune_ctx *t, double *us, fp4_err *err)
{
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    float ms[TUNE_SAMPLES];
    fp4_status st = FP4_OK;
    int capturing = 0;
    for (int i = 0; i < TUNE_WARMUP_CALLS; i++)
        if ((st = t->run(t->plan, i % t->copies, t->stream, err)) != FP4_OK) goto out;
    FP4_CUDA_GOTO(err, st, cudaStreamSynchronize(t->stream), out);

    FP4_CUDA_GOTO(err, st, cudaStreamBeginCapture(t->stream, cudaStreamCaptureModeThreadLocal),
                  out);
    capturing = 1;
    for (int i = 0; i < t->calls; i++)
        if ((st = t->run(t->plan, i % t->copies, t->stream, err)) != FP4_OK) goto out;
    capturing = 0;
    FP4_CUDA_GOTO(err, st, cudaStreamEndCapture(t->stream, &graph), out);
    FP4_CUDA_GOTO(err, st, cudaGraphInstantiate(&exec, graph, 0), out);

    FP4_CUDA_GOTO(err, st, cudaGraphLaunch(exec, t->stream), out); /* untimed */
    FP4_CUDA_GOTO(err, st, cudaEventRecord(t->ev[0], t->stream), out);
    for (int s = 0; s < TUNE_SAMPLES; s++) {
        FP4_CUDA_GOTO(err, st, cudaGraphLaunch(exec, t->stream), out);
        FP4_CUDA_GOTO(err, st, cudaEventRecord(t->ev[s + 1], t->stream), out);
    }
    FP4_CUDA_GOTO(err, st, cudaEventSynchronize(t->ev[TUNE_SAMPLES]), out);
    for (int s = 0; s < TUNE_SAMPLES; s++)
        FP4_CUDA_GOTO(err, st, cudaEventElapsedTime(&ms[s], t->ev[s], t->ev[s + 1]), out);
    qsort(ms, TUNE_SAMPLES, sizeof ms[0], tune_cmp_float);
    *us = 1e3 * (double)ms[TUNE_SAMPLES / 2] / (double)t->calls;
out:
    if (capturing) tune_abandon_capture(t);
    if (exec) FP4_CUDA_CLEANUP(t->warn, cudaGraphExecDestroy(exec));
    if (graph) FP4_CUDA_CLEANUP(t->warn, cudaGraphDestroy(graph));
    return st;
}

/* Times the candidates (see blas_tune.h); g->algo ends as the fastest. */
static fp4_status tune_pick(const fp4_lt_inst *inst, fp4_lt_gemm *g,
                            const cublasLtMatmulAlgo_t *algos, const int *ranks, int count,
                            void *plan, int copies, fp4_lt_run_fn run, const char *name,
                            fp4_err *err)
{
    tune_ctx t;
    memset(&t, 0, sizeof t);
    t.plan = plan;
    t.copies = copies;
    t.run = run;
    t.calls = copies < TUNE_CALLS_MIN ? TUNE_CALLS_MIN
                                      : (copies > TUNE_CALLS_MAX ? TUNE_CALLS_MAX : copies);
    t.warn = inst->warn;
    fp4_status st = FP4_OK;
    fp4_err first_failure;
    fp4_err_clear(&first_failure);
    int timed = 0, failed = 0, best = -1;
    double best_us = 0.0, first_us = 0.0; /* first_us: heuristic #1's, when timed */
    char desc[FP4_LT_DESC_LEN];

    FP4_CUDA_GOTO(err, st, cudaStreamCreateWithFlags(&t.stream, cudaStreamNonBlocking), out);
    for (int e = 0; e <= TUNE_SAMPLES; e++)
        FP4_CUDA_GOTO(err, st, cudaEventCreate(&t.ev[e]), out);

    /* the first FP4_LT_TUNE_TIMED that run; a failure makes room for the next */
    for (int i = 0; i < count && timed < FP4_LT_TUNE_TIMED; i++) {
        double us = 0.0;
        fp4_err cand_err;
        g->algo = algos[i];
        if (tune_time(&t, &us, &cand_err) != FP4_OK) {
            if (!failed) first_failure = cand_err;
            failed++;
            /* a failed launch may leave a non-sticky error behind: not the
             * next candidate's */
            (void)cudaGetLastError();
            continue;
        }
        timed++;
        if (ranks[i] == 1) first_us = us;
        if (best < 0 || us < best_us) {
            best = i;
            best_us = us;
        }
    }
    if (best < 0) {
        st = fp4_fail(err, first_failure.status,
                      "%s: every one of %d cuBLASLt candidates failed; the first: %s", name,
                      failed, fp4_err_text(&first_failure));
        goto out;
    }
    g->algo = algos[best];

    fp4_lt_describe_algo(&g->algo, desc, sizeof desc);
    snprintf(g->variant, sizeof g->variant, "lt %s (heuristic #%d, fastest of %d timed", desc,
             ranks[best], timed);
    if (ranks[best] != 1 && first_us > 0.0)
        tune_append(g->variant, sizeof g->variant, ", %.2fx over #1", first_us / best_us);
    else if (ranks[best] != 1) /* not in the list at all: its state was not SUCCESS */
        tune_append(g->variant, sizeof g->variant, ", #1 %s",
                    ranks[0] == 1 ? "failed" : "invalid");
    if (failed)
        tune_append(g->variant, sizeof g->variant, ", %d of %d failed", failed, timed + failed);
    tune_append(g->variant, sizeof g->variant, ")");
out:
    if (t.stream) {
        /* the stream may still run a failed candidate's work: settle it
         * before its events and the stream go */
        FP4_CUDA_CLEANUP(inst->warn, cudaStreamSynchronize(t.stream));
        FP4_CUDA_CLEANUP(inst->warn, cudaStreamDestroy(t.stream));
    }
    for (int e = 0; e <= TUNE_SAMPLES; e++)
        if (t.ev[e]) FP4_CUDA_CLEANUP(inst->warn, cudaEventDestroy(t.ev[e]));
    return st;
}

extern "C" fp4_status fp4_lt_choose_algo(const fp4_lt_inst *inst, fp4_lt_gemm *g,
                                         cublasLtMatmulDesc_t op, int tuning, void *plan,
                                         int copies, fp4_lt_run_fn run, const char *name,
                                         fp4_err *err)
{
    cublasLtMatmulAlgo_t algos[FP4_LT_TUNE_ASK];
    int ranks[FP4_LT_TUNE_ASK];
    int count = 0;
    g->variant[0] = '\0';
    if (copies < 1 || !run)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: tuning needs copies and a run function",
                        name);
    fp4_status st = fp4_lt_heuristic(inst, g, op, tuning ? FP4_LT_TUNE_ASK : 1, algos, ranks,
                                     &count, name, err);
    if (st != FP4_OK) return st;
    if (!tuning) {
        char desc[FP4_LT_DESC_LEN];
        g->algo = algos[0];
        fp4_lt_describe_algo(&g->algo, desc, sizeof desc);
        snprintf(g->variant, sizeof g->variant, "lt %s (heuristic #1, untimed)", desc);
        return FP4_OK;
    }
    return tune_pick(inst, g, algos, ranks, count, plan, copies, run, name, err);
}
