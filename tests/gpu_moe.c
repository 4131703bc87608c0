/* The GPU MoE backends against the exact per-expert reference, through the MoE
 * engine, on the layers that break grouped kernels: idle experts next to an
 * expert with every token, top-1 routing onto one expert, T*k a prime number
 * of pairs, K = 2880 (gpt-oss: not a multiple of 128), and a larger skewed
 * layer, one where experts see 75 pairs each (the wide grouped path), and
 * one of 8448 pairs (the layer's routing step in three kernels, not one),
 * one with a shared expert (every token's, beside random routing);
 * every step (gate_up, down, the layer) in W4A4 and W4A16. A backend
 * may say unsupported (loop-fp4 in W4A16), never FAILED; moe-cublas-bf16
 * must run everything, moe-cublaslt-fp8 everything but the W4A4 layer, which
 * it refuses with its reason. Then timed cases (each step in W4A4, the layer
 * in W4A16 too): graphs, cold-L2 copies, every copy verified again after
 * timing, the layer's steps, with a
 * backend first whose prepare() fails on an out-of-memory cudaMalloc and
 * leaves that as CUDA's last error: the others still run. First, the
 * activation kernel's e4m3 and amax outputs (the fp8 layer's) on their own.
 * Exits 77 (skipped) without a GPU. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/moe_gpu.h"
#include "check.h"
#include "fp4/device.h"
#include "fp4/engine.h"
#include "fp4/moe.h"
#include "fp4/moe_backend.h"
#include "fp4/moe_engine.h"
#include "fp4/report.h"

typedef struct layer_case {
    const char *what;
    fp4_moe_dims dims; /* shared experts included */
    int64_t tokens;
    fp4_moe_route_mode route;
    const int32_t *trace;
    int shared;
} layer_case;

/* A backend whose prepare() fails as a cudaMalloc too large for any GPU
 * (4 PiB) does, the error left as CUDA's last one. */
static int oom_token;

static fp4_status oom_open(void **inst, fp4_err *err)
{
    (void)err;
    *inst = &oom_token;
    return FP4_OK;
}

static void oom_close(void *inst) { (void)inst; }

static fp4_status oom_prepare(void *inst, const fp4_moe_problem *p, int copies, void **plan,
                              fp4_err *err)
{
    void *huge = NULL;
    (void)inst;
    (void)p;
    (void)copies;
    *plan = NULL;
    const cudaError_t e = cudaMalloc(&huge, (size_t)1 << 52);
    if (e == cudaSuccess) (void)cudaFree(huge);
    return fp4_fail(err, FP4_ERR_CUDA, "fake: cudaMalloc(4 PiB): %s", cudaGetErrorString(e));
}

static fp4_status oom_never(void *plan, int copy, void *stream, fp4_err *err)
{
    (void)plan;
    (void)copy;
    (void)stream;
    return fp4_fail(err, FP4_ERR_INVALID_ARG, "fake-oom has no plan");
}

static fp4_status oom_read(void *plan, int copy, float *out, fp4_err *err)
{
    (void)plan;
    (void)copy;
    (void)out;
    return fp4_fail(err, FP4_ERR_INVALID_ARG, "fake-oom has no plan");
}

static void oom_release(void *plan) { (void)plan; }

static const fp4_moe_backend_ops fake_oom = {
    .api_version = FP4_MOE_BACKEND_API_VERSION,
    .name = "fake-oom",
    .summary = "test fake: prepare fails out of memory",
    .flags = FP4_BACKEND_GPU,
    .math = FP4_MATH_CUDA_CORES,
    .wformat = FP4_MOE_WEIGHTS_NVFP4,
    .tol_max = 1e-6,
    .tol_norm = 1e-6,
    .open = oom_open,
    .close = oom_close,
    .prepare = oom_prepare,
    .poison = oom_never,
    .run = oom_never,
    .read_output = oom_read,
    .release = oom_release,
};

/* fp4_moe_gpu_act's E4M3 output against fp4_e4m3_encode of value x scale:
 * a plain conversion of gathered rows (a -1 row of zeros), exact, and the
 * activation's (silu of gate and up), within one code of the host's (a
 * float expf against the host's); its AMAX output (the silu's largest,
 * planted in a late block of four) against the host's. Random bf16 rows. */
static void check_act_e4m3_amax(void)
{
    enum { ROWS = 5, COLS = 48, SRC_ROWS = 300 }; /* AMAX: 900 blocks of 16, 4 CUDA blocks */
    static const int32_t map[ROWS] = {2, 0, -1, 1, 2};
    static uint16_t src[SRC_ROWS * 2 * COLS];
    static uint8_t got[SRC_ROWS * COLS];
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < SRC_ROWS * 2 * COLS; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        src[i] = fp4_bf16_from_float(((float)(seed >> 40) / (float)(1u << 24) - 0.5f) * 9.0f);
    }
    src[290 * 2 * COLS + 17] = fp4_bf16_from_float(11.0f);            /* gate of row 290 */
    src[290 * 2 * COLS + COLS + 17] = fp4_bf16_from_float(-10.0f);    /* its up: silu 11 x -10 */
    uint16_t *d_src = NULL;
    int32_t *d_map = NULL;
    uint8_t *d_out = NULL;
    unsigned *d_amax = NULL, amax_bits = 0;
    fp4_err err;
    CHECK(cudaMalloc((void **)&d_src, sizeof src) == cudaSuccess && cudaMalloc((void **)&d_map, sizeof map) == cudaSuccess &&
          cudaMalloc((void **)&d_out, sizeof got) == cudaSuccess && cudaMalloc((void **)&d_amax, sizeof amax_bits) == cudaSuccess);
    CHECK(cudaMemcpy(d_src, src, sizeof src, cudaMemcpyHostToDevice) == cudaSuccess &&
          cudaMemcpy(d_map, map, sizeof map, cudaMemcpyHostToDevice) == cudaSuccess &&
          cudaMemset(d_amax, 0, sizeof amax_bits) == cudaSuccess);
    for (int act = -1; act <= FP4_MOE_ACT_SILU; act++) {
        const float enc = act < 0 ? 120.0f : 4.0f; /* plain: the largest (4.5 x 120) saturate at 448 */
        fp4_moe_act_args a;
        memset(&a, 0, sizeof a);
        a.src = d_src;
        a.src_cols = act < 0 ? COLS : 2 * COLS; /* a plain conversion reads src as [2 SRC_ROWS, COLS] */
        a.map = act < 0 ? d_map : NULL;
        a.act = act;
        a.rows = act < 0 ? ROWS : SRC_ROWS;
        a.cols = COLS;
        a.out = FP4_MOE_QOUT_E4M3;
        a.e4m3_enc = enc;
        a.out_e4m3 = d_out;
        CHECK(cudaMemset(d_out, 0x7F, sizeof got) == cudaSuccess);
        CHECK_MSG(fp4_moe_gpu_act(&a, 0, &err) == FP4_OK, "e4m3: %s", fp4_err_text(&err));
        CHECK(cudaMemcpy(got, d_out, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess);
        int bad = 0;
        for (int r = 0; r < a.rows; r++)
            for (int c = 0; c < COLS; c++) {
                float x;
                if (act < 0)
                    x = map[r] < 0 ? 0.0f : fp4_bf16_to_float(src[map[r] * COLS + c]);
                else
                    x = fp4_moe_activation(FP4_MOE_ACT_SILU, fp4_bf16_to_float(src[r * 2 * COLS + c]),
                                           fp4_bf16_to_float(src[r * 2 * COLS + COLS + c]));
                const int want = fp4_e4m3_encode(x * enc), have = got[r * COLS + c];
                bad += act < 0 ? have != want : abs(have - want) > 1 || ((have ^ want) & 0x80);
            }
        CHECK_MSG(bad == 0, "e4m3 output (act %d): %d of %d bytes off fp4_e4m3_encode", act, bad, (int)a.rows * COLS);
    }
    fp4_moe_act_args a;
    memset(&a, 0, sizeof a);
    a.src = d_src;
    a.src_cols = 2 * COLS;
    a.act = FP4_MOE_ACT_SILU;
    a.rows = SRC_ROWS;
    a.cols = COLS;
    a.out = FP4_MOE_QOUT_AMAX;
    a.amax = d_amax;
    CHECK_MSG(fp4_moe_gpu_act(&a, 0, &err) == FP4_OK, "amax: %s", fp4_err_text(&err));
    a.amax = NULL;
    CHECK_MSG(fp4_moe_gpu_act(&a, 0, &err) == FP4_ERR_INVALID_ARG, "amax without its output accepted");
    CHECK(cudaMemcpy(&amax_bits, d_amax, sizeof amax_bits, cudaMemcpyDeviceToHost) == cudaSuccess);
    float want = 0.0f, amax;
    for (int r = 0; r < SRC_ROWS; r++)
        for (int c = 0; c < COLS; c++)
            want = fmaxf(want, fabsf(fp4_moe_activation(FP4_MOE_ACT_SILU, fp4_bf16_to_float(src[r * 2 * COLS + c]),
                                                        fp4_bf16_to_float(src[r * 2 * COLS + COLS + c]))));
    memcpy(&amax, &amax_bits, sizeof amax);
    CHECK_MSG(want > 100.0f && fabsf(amax - want) <= 1e-5f * want, "amax %.9g, the host's %.9g (planted: 110)", amax,
              want);
    CHECK(cudaFree(d_src) == cudaSuccess && cudaFree(d_map) == cudaSuccess && cudaFree(d_out) == cudaSuccess &&
          cudaFree(d_amax) == cudaSuccess);
}

static int gpu_backends(const fp4_moe_backend_ops **b)
{
    int n = 0;
    for (int i = 0; i < fp4_moe_backend_count(); i++)
        if (fp4_moe_backend_at(i)->flags & FP4_BACKEND_GPU) b[n++] = fp4_moe_backend_at(i);
    return n;
}

static void run_layer_case(fp4_moe_engine *m, fp4_report *rep, const layer_case *lc,
                           const fp4_moe_backend_ops *const *b, int nb)
{
    for (int s = 0; s < FP4_MOE_STEP_COUNT; s++)
        for (int md = 0; md < 2; md++) {
            fp4_moe_case c;
            fp4_err err;
            memset(&c, 0, sizeof c);
            snprintf(c.model, sizeof c.model, "custom");
            c.tp = 1;
            c.dims = lc->dims;
            c.tokens = lc->tokens;
            c.route.mode = lc->route;
            c.route.seed = 11;
            c.route.zipf_s = 1.3;
            c.route.trace_ids = lc->trace;
            c.route.shared = lc->shared;
            c.trace_tokens = lc->trace ? lc->tokens : 0;
            c.step = (fp4_moe_step)s;
            c.mode = (fp4_moe_mode)md;
            const int from = rep->nrows;
            const fp4_status st = fp4_moe_engine_run_case(m, &c, b, nb, rep, NULL, NULL, &err);
            CHECK_MSG(st == FP4_OK, "%s: %s", lc->what, fp4_err_text(&err));
            for (int i = from; i < rep->nrows; i++) {
                const fp4_row *r = &rep->rows[i];
                printf("%-26s %-8s %-6s %-17s %-11s %s\n", lc->what, r->moe.step, r->moe.mode, r->backend,
                       fp4_row_state_name(r->state), r->state == FP4_ROW_OK ? r->verify_note : r->reason);
                CHECK_MSG(r->state != FP4_ROW_FAILED, "%s %s %s %s: %s", lc->what, r->moe.step, r->moe.mode,
                          r->backend, r->reason);
                if (strcmp(r->backend, "moe-cublas-bf16") == 0)
                    CHECK_MSG(r->state == FP4_ROW_OK && r->verified == 1, "%s %s %s: cublas-bf16 %s", lc->what,
                              r->moe.step, r->moe.mode, r->reason);
                if (strcmp(r->backend, "moe-cublaslt-fp8") == 0) {
                    if (c.step == FP4_MOE_STEP_LAYER && c.mode == FP4_MOE_W4A4)
                        CHECK_MSG(r->state == FP4_ROW_UNSUPPORTED && strstr(r->reason, "W4A16 only"),
                                  "%s: fp8 W4A4 layer %s: %s", lc->what, fp4_row_state_name(r->state), r->reason);
                    else
                        CHECK_MSG(r->state == FP4_ROW_OK && r->verified == 1, "%s %s %s: cublaslt-fp8 %s", lc->what,
                                  r->moe.step, r->moe.mode, r->reason);
                }
                if (strcmp(r->backend, "moe-fp4-sm90") == 0 && r->state == FP4_ROW_UNSUPPORTED)
                    CHECK_MSG(strstr(r->reason, "sm_90") != NULL, "%s: moe-fp4-sm90 unsupported on sm_90: %s",
                              lc->what, r->reason);
            }
        }
}

int main(int argc, char **argv)
{
    fp4_device_info dev;
    fp4_settings set;
    fp4_report rep;
    fp4_engine *e = NULL;
    fp4_moe_engine *m = NULL;
    fp4_err err;
    const fp4_moe_backend_ops *b[16];
    fp4_device_describe(&dev);
    if (!dev.present) {
        printf("gpu_moe: no GPU (%s): skipped\n", dev.why_absent);
        return 77;
    }
    check_act_e4m3_amax();
    const int nb = gpu_backends(b);
    memset(&rep, 0, sizeof rep);
    fp4_settings_default(&set);
    set.verify_only = 1;
    if (fp4_engine_create(&set, &rep, &e, &err) != FP4_OK || fp4_moe_engine_create(e, &rep, &m, &err) != FP4_OK) {
        fprintf(stderr, "gpu_moe: %s\n", fp4_err_text(&err));
        return 1;
    }
    /* top-2 of 8: expert 3 on every token, 2, 4 and 6 idle */
    static const int32_t hot[12] = {3, 0, 3, 1, 3, 5, 3, 0, 3, 1, 3, 7};
    /* top-1: every token on expert 5 */
    static int32_t one[37];
    for (int i = 0; i < 37; i++) one[i] = 5;
    /* H != 2I in most cases, so that gate_up's width (2I) and down's (H) differ */
    const layer_case cases[] = {
        {"idle and hot experts", {256, 96, 8, 2, FP4_MOE_ACT_SILU}, 6, FP4_MOE_ROUTE_TRACE, hot, 0},
        {"top-1 onto one expert", {384, 128, 8, 1, FP4_MOE_ACT_SILU}, 37, FP4_MOE_ROUTE_TRACE, one, 0},
        {"T*k = 111 pairs", {512, 256, 16, 3, FP4_MOE_ACT_SILU}, 37, FP4_MOE_ROUTE_RANDOM, NULL, 0},
        {"K = 2880 (gpt-oss)", {2880, 2880, 4, 2, FP4_MOE_ACT_SWIGLU_OAI}, 5, FP4_MOE_ROUTE_RANDOM, NULL, 0},
        {"skewed, 64 experts", {1024, 512, 64, 8, FP4_MOE_ACT_SILU}, 300, FP4_MOE_ROUTE_SKEWED, NULL, 0},
        {"75 pairs an expert (wide)", {768, 512, 8, 2, FP4_MOE_ACT_SILU}, 300, FP4_MOE_ROUTE_RANDOM, NULL, 0},
        /* above the one-block routing step's 8192 pairs: its three-kernel form */
        {"8448 pairs", {256, 128, 64, 8, FP4_MOE_ACT_SILU}, 1056, FP4_MOE_ROUTE_RANDOM, NULL, 0},
        /* 16 routed experts, top-3, and a shared one with all 70 tokens (the wide path) */
        {"a shared expert", {512, 256, 17, 4, FP4_MOE_ACT_SILU}, 70, FP4_MOE_ROUTE_RANDOM, NULL, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_layer_case(m, &rep, &cases[i], b, nb);
    fp4_moe_engine_destroy(m, NULL);
    fp4_engine_destroy(e, NULL);
    fp4_report_free(&rep);

    /* timed: graphs over cold-L2 copies, every copy verified after timing */
    memset(&rep, 0, sizeof rep);
    fp4_settings_default(&set);
    set.stop.max_time_s = 1.0;
    snprintf(set.baseline, sizeof set.baseline, "moe-cublas-bf16");
    if (fp4_engine_create(&set, &rep, &e, &err) != FP4_OK || fp4_moe_engine_create(e, &rep, &m, &err) != FP4_OK) {
        fprintf(stderr, "gpu_moe: %s\n", fp4_err_text(&err));
        return 1;
    }
    const fp4_moe_backend_ops *timed[17];
    timed[0] = &fake_oom; /* prepared first: the real backends come after its failure */
    for (int i = 0; i < nb; i++) timed[i + 1] = b[i];
    int fp8_layer_rows = 0;
    /* every step in W4A4, then the layer in W4A16 (moe-cublaslt-fp8's layer) */
    for (int s = 0; s <= FP4_MOE_STEP_COUNT; s++) {
        fp4_moe_case c;
        memset(&c, 0, sizeof c);
        snprintf(c.model, sizeof c.model, "custom");
        c.tp = 1;
        c.dims = cases[4].dims;
        c.tokens = 64;
        c.route.mode = FP4_MOE_ROUTE_RANDOM;
        c.route.seed = 2;
        c.step = s < FP4_MOE_STEP_COUNT ? (fp4_moe_step)s : FP4_MOE_STEP_LAYER;
        c.mode = s < FP4_MOE_STEP_COUNT ? FP4_MOE_W4A4 : FP4_MOE_W4A16;
        const int from = rep.nrows;
        CHECK_MSG(fp4_moe_engine_run_case(m, &c, timed, nb + 1, &rep, NULL, NULL, &err) == FP4_OK, "%s",
                  fp4_err_text(&err));
        for (int i = from; i < rep.nrows; i++) {
            const fp4_row *r = &rep.rows[i];
            if (strcmp(r->backend, "fake-oom") == 0) {
                CHECK_MSG(r->state == FP4_ROW_FAILED && strstr(r->reason, "4 PiB"), "fake-oom: %s: %s",
                          fp4_row_state_name(r->state), r->reason);
                continue;
            }
            printf("timed %-8s %-6s %-17s %-11s %8.2f us x%d copies %s (%s)\n", r->moe.step, r->moe.mode, r->backend,
                   fp4_row_state_name(r->state), r->t.median, r->copies, r->l2,
                   r->state == FP4_ROW_OK ? r->variant : r->reason);
            CHECK_MSG(r->state != FP4_ROW_FAILED, "timed %s %s: %s", r->moe.step, r->backend, r->reason);
            if (strcmp(r->backend, "moe-cublaslt-fp8") == 0 && c.mode == FP4_MOE_W4A16) {
                CHECK_MSG(r->state == FP4_ROW_OK, "timed fp8 layer: %s", r->reason);
                fp8_layer_rows++;
            }
            if (r->state != FP4_ROW_OK) continue;
            CHECK(r->t.count > 0 && r->t.median > 0 && strncmp(r->timing, "graph", 5) == 0);
            CHECK_MSG(r->verified_copies == r->copies, "%s: %d of %d copies verified after timing", r->backend,
                      r->verified_copies, r->copies);
            CHECK_MSG(strcmp(r->l2, "cold") == 0, "%s: L2 %s with %d copies", r->backend, r->l2, r->copies);
            CHECK(r->has_ratio && r->moe.tokens_per_s > 0);
            if (c.step == FP4_MOE_STEP_LAYER) {
                CHECK_MSG(r->moe.nsteps >= 4, "%s: %d layer steps timed", r->backend, r->moe.nsteps);
                for (int j = 0; j < r->moe.nsteps; j++) printf("    %s %.2f us\n", r->moe.steps[j].name, r->moe.steps[j].us);
            }
        }
    }
    CHECK_MSG(fp8_layer_rows == 1, "%d timed moe-cublaslt-fp8 W4A16 layer rows", fp8_layer_rows);
    fp4_warnings w;
    fp4_warnings_clear(&w);
    fp4_moe_engine_destroy(m, &w);
    fp4_engine_destroy(e, &w);
    CHECK_MSG(w.count == 0, "cleanup warnings: %s", w.text);
    fp4_report_free(&rep);
    (void)argc;
    (void)argv;
    return check_finish("gpu_moe");
}
