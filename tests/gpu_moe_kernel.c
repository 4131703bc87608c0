/* The fp4-sm90 grouped MoE kernel (kernels/sm90/moe.h) against the exact
 * grouped references of fp4/moe.h.
 *
 * 1. On the CPU: the bf16 value layout of the packed weights (nibbles.h) decodes
 *    every code at every position, both signs, to e2m1 x 2^-126 exactly.
 * 2. On the GPU, each case routed with fp4_moe_route and planned with
 *    fp4_moe_plan_build, weights from fp4_make_operand (gaussian and wide data,
 *    idle experts filled with huge values so that reading one shows), outputs
 *    poisoned with NaN first: D against fp4_moe_grouped_ref_w4a16 / _w4a4 (no
 *    NaN left, max|D-R| <= 1e-2 max|R|, ||D-R|| <= 5e-3 ||R||), the combine
 *    against fp4_moe_combine of the D the kernel wrote; each case run plainly,
 *    then again from a captured CUDA graph (the split-K workspace must come back
 *    zeroed). Cases: both modes, both activation-row rules, K = 2880, an odd
 *    number of k-steps, n not a multiple of the 256-row block, idle experts, one
 *    expert with every token (several 32-token chunks), skewed routing, split K
 *    (few tokens, long K), K / 16 odd (scales not word-aligned), E = 256 /
 *    top-8 at T = 1, 16 and 512, and sizes where the wide path runs (many
 *    tokens an expert, one expert with 3 chunks, skewed); every case first
 *    with the split between the paths that its routing gives (the skewed
 *    case must put experts on both sides), then forced onto the wide path
 *    and onto the streaming path (FP4_SM90_MOE_PATH); then every W4A4 case
 *    with the streaming path's dequantization prepass forced on and off
 *    (FP4_SM90_MOE_PREPASS).
 * 3. With FP4_MOE_TIME=1: GLM-5's expert GEMMs timed on the path each size
 *    picks, or on the one FP4_SM90_MOE_PATH names (gate_up 256 x [4096 x
 *    6144], down 256 x [6144 x 2048]) in CUDA graphs of 20 launches, cold
 *    weights (3.6 GB; at T = 1 the launches rotate over disjoint experts).
 *    FP4_MOE_TIME_CASES=a,b,... times only the cases whose names contain one
 *    of the comma-separated strings (every check still runs).
 * Exits 77 (skipped) without a GPU. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/inputs.h"
#include "check.h"
#include "fp4/format.h"
#include "fp4/moe.h"
#include "kernels/sm90/moe.h"
#include "kernels/sm90/nibbles.h"
#include "test_rng.h"

#define CUDA_OK(call) CHECK_MSG((call) == cudaSuccess, "%s", cudaGetErrorString(cudaGetLastError()))

/* the paths a call of this size runs, for the log */
static const char *path_name(int experts, int top_k, int64_t tokens)
{
    int from = 0;
    const int paths = fp4_sm90_moe_paths(experts, top_k, tokens, &from);
    return paths == FP4_SM90_MOE_WIDE     ? "wide path"
           : paths == FP4_SM90_MOE_STREAM ? "streaming path"
                                          : "both paths (split at 40 tokens or as set)";
}

/* ---- 1. the value layout ---------------------------------------------------------- */

static float bf16_bits_to_float(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_value_layout(void)
{
    long bad = 0;
    uint8_t ones[8];
    memset(ones, 15, sizeof ones);
    CHECK(fp4_nib_bf16_pack(ones) == 0xFFFFFFFFu); /* every bit used once */
    for (int pos = 0; pos < 8; pos++)
        for (int code = 0; code < 16; code++)
            for (int bg = 0; bg < 16; bg++) {
                uint8_t c[8];
                for (int i = 0; i < 8; i++) c[i] = (uint8_t)((bg * 7 + i * 3) & 15);
                c[pos] = (uint8_t)code;
                uint32_t o[4];
                fp4_nib_bf16_pairs(fp4_nib_bf16_pack(c), o);
                for (int i = 0; i < 8; i++) {
                    const uint16_t h = (uint16_t)(o[i >> 1] >> (16 * (i & 1)));
                    const float v = ldexpf(bf16_bits_to_float(h), 126);
                    const float want = fp4_e2m1_decode(c[i]);
                    if (v != want || (signbit(v) != 0) != ((c[i] & 8) != 0)) bad++;
                }
            }
    CHECK_MSG(bad == 0, "%ld decoded values differ", bad);
}

/* ---- 2. correctness on the GPU -------------------------------------------------------- */

typedef struct moe_case {
    const char *name;
    int experts, top_k;
    int64_t tokens, n, k;
    fp4_moe_route_mode route;
    int w4a16, a_per_pair, combine;
    int all_to_one; /* trace routing: every token to expert 3 (top_k 1) */
    int split;      /* experts on both sides of the paths' split: each kernel has work */
} moe_case;

typedef struct host_problem {
    fp4_moe_routing routing;
    fp4_moe_plan plan;
    fp4_matrix *w;          /* [E] */
    uint16_t *a_bf16;       /* W4A16 [rows, k] */
    fp4_matrix a;           /* W4A4 [rows, k] */
    int64_t rows;           /* activation rows */
} host_problem;

static void host_problem_free(host_problem *h, int experts)
{
    if (h->w)
        for (int e = 0; e < experts; e++) fp4_matrix_free(&h->w[e]);
    free(h->w);
    free(h->a_bf16);
    fp4_matrix_free(&h->a);
    fp4_moe_plan_free(&h->plan);
    fp4_moe_routing_free(&h->routing);
    memset(h, 0, sizeof *h);
}

/* Route, plan, and make weights (active experts: gaussian or wide data; idle
 * ones: the largest codes and scales) and activations. */
static int host_problem_make(const moe_case *c, uint64_t seed, host_problem *h)
{
    fp4_err err;
    memset(h, 0, sizeof *h);
    fp4_moe_route_opts ro = {c->route, seed, 1.2, NULL, NULL, 0};
    int32_t *trace = NULL;
    if (c->all_to_one) {
        trace = malloc((size_t)c->tokens * (size_t)c->top_k * sizeof *trace);
        if (!trace) return -1;
        for (int64_t i = 0; i < c->tokens * c->top_k; i++) trace[i] = (int32_t)(3 + i % c->top_k);
        ro.mode = FP4_MOE_ROUTE_TRACE;
        ro.trace_ids = trace;
    }
    fp4_status st = fp4_moe_route(&ro, c->tokens, c->experts, c->top_k, &h->routing, &err);
    free(trace);
    CHECK_MSG(st == FP4_OK, "%s: route: %s", c->name, fp4_err_text(&err));
    if (st != FP4_OK) return -1;
    st = fp4_moe_plan_build(&h->routing, &h->plan, &err);
    CHECK_MSG(st == FP4_OK, "%s: plan: %s", c->name, fp4_err_text(&err));
    if (st != FP4_OK) return -1;

    h->w = calloc((size_t)c->experts, sizeof *h->w);
    if (!h->w) return -1;
    for (int e = 0; e < c->experts; e++) {
        if (h->plan.expert_counts[e] > 0) {
            const fp4_data_kind kind = e % 3 == 1 ? FP4_DATA_WIDE : FP4_DATA_GAUSSIAN;
            st = fp4_make_operand(kind, c->n, c->k, seed * 1000 + (uint64_t)e, &h->w[e], &err);
            /* distinct global scales, so that a wrong expert's alpha shows */
            h->w[e].global_scale *= 1.0f + (float)(e % 5) * 0.25f;
        } else {
            st = fp4_matrix_alloc(&h->w[e], c->n, c->k, &err);
            if (st == FP4_OK) {
                memset(h->w[e].codes, 0x77, (size_t)c->n * (size_t)(c->k / 2));
                memset(h->w[e].scales, 0x7E, (size_t)c->n * (size_t)(c->k / 16));
            }
        }
        CHECK_MSG(st == FP4_OK, "%s: weights: %s", c->name, fp4_err_text(&err));
        if (st != FP4_OK) return -1;
    }

    h->rows = c->a_per_pair ? c->tokens * c->top_k : c->tokens;
    if (c->w4a16) {
        test_rng rng = test_rng_seed(seed + 17);
        h->a_bf16 = malloc((size_t)h->rows * (size_t)c->k * sizeof *h->a_bf16);
        if (!h->a_bf16) return -1;
        for (int64_t i = 0; i < h->rows * c->k; i++) {
            /* gaussian, with some blocks far smaller or larger */
            const int64_t blk = i / 16;
            const float scale = blk % 7 == 3 ? 1e-6f : blk % 11 == 5 ? 300.0f : 1.0f;
            h->a_bf16[i] = fp4_bf16_from_float((float)test_rng_gauss(&rng) * scale);
        }
    } else {
        st = fp4_make_operand(seed % 2 ? FP4_DATA_WIDE : FP4_DATA_GAUSSIAN, h->rows, c->k,
                              seed + 23, &h->a, &err);
        CHECK_MSG(st == FP4_OK, "%s: activations: %s", c->name, fp4_err_text(&err));
        if (st != FP4_OK) return -1;
    }
    return 0;
}

/* max|D-R| / max|R| and ||D-R|| / ||R|| over n_el values; NaNs counted. */
static void compare(const char *what, const char *name, const float *d, const float *r,
                    size_t n_el, double tol_max, double tol_norm)
{
    double maxr = 0, maxd = 0, sr = 0, sd = 0;
    size_t nan = 0, worst = 0;
    for (size_t i = 0; i < n_el; i++) {
        if (isnan(d[i])) {
            nan++;
            continue;
        }
        const double diff = fabs((double)d[i] - (double)r[i]);
        if (diff > maxd) {
            maxd = diff;
            worst = i;
        }
        maxr = fmax(maxr, fabs((double)r[i]));
        sr += (double)r[i] * (double)r[i];
        sd += diff * diff;
    }
    CHECK_MSG(nan == 0, "%s %s: %zu of %zu values not written (NaN)", name, what, nan, n_el);
    CHECK_MSG(maxd <= tol_max * maxr, "%s %s: max|D-R| %.3g vs max|R| %.3g (at %zu: %g vs %g)",
              name, what, maxd, maxr, worst, (double)d[worst], (double)r[worst]);
    CHECK_MSG(sqrt(sd) <= tol_norm * sqrt(sr) + 1e-30, "%s %s: ||D-R|| %.3g vs ||R|| %.3g", name,
              what, sqrt(sd), sqrt(sr));
}

typedef struct dev_problem {
    void *packed;
    float *globals;
    int32_t *off, *pair_index;
    uint16_t *a_bf16, *d;
    uint8_t *a_codes, *a_scales;
    float *route_w, *d_combined;
    void *ws;
    size_t ws_bytes;
} dev_problem;

static void dev_problem_free(dev_problem *g)
{
    cudaFree(g->packed);
    cudaFree(g->globals);
    cudaFree(g->off);
    cudaFree(g->pair_index);
    cudaFree(g->a_bf16);
    cudaFree(g->d);
    cudaFree(g->a_codes);
    cudaFree(g->a_scales);
    cudaFree(g->route_w);
    cudaFree(g->d_combined);
    cudaFree(g->ws);
    memset(g, 0, sizeof *g);
}

static void check_case(const moe_case *c, uint64_t seed)
{
    fp4_err err;
    host_problem h;
    dev_problem g;
    memset(&g, 0, sizeof g);
    const int64_t pairs = c->tokens * c->top_k;
    const size_t nd = (size_t)pairs * (size_t)c->n, nc = (size_t)c->tokens * (size_t)c->n;
    float *ref = NULL, *got = NULL, *comb_ref = NULL, *comb_got = NULL;
    uint16_t *d16 = NULL;
    void *packed = NULL;
    float *globals = NULL;
    if (host_problem_make(c, seed, &h) != 0) goto out;

    ref = malloc(nd * sizeof *ref);
    got = malloc(nd * sizeof *got);
    d16 = malloc(nd * sizeof *d16);
    comb_ref = malloc(nc * sizeof *comb_ref);
    comb_got = malloc(nc * sizeof *comb_got);
    const size_t psize = fp4_sm90_moe_packed_size(c->experts, c->n, c->k);
    packed = malloc(psize);
    globals = malloc((size_t)c->experts * sizeof *globals);
    CHECK(ref && got && d16 && comb_ref && comb_got && packed && globals && psize > 0);
    if (!ref || !got || !d16 || !comb_ref || !comb_got || !packed || !globals) goto out;

    fp4_status st;
    const fp4_moe_a_rows arows = c->a_per_pair ? FP4_MOE_A_PER_PAIR : FP4_MOE_A_PER_TOKEN;
    if (c->w4a16)
        st = fp4_moe_grouped_ref_w4a16(h.a_bf16, h.rows, c->k, arows, h.w, &h.plan, ref, 0, &err);
    else
        st = fp4_moe_grouped_ref_w4a4(&h.a, arows, h.w, &h.plan, ref, 0, &err);
    CHECK_MSG(st == FP4_OK, "%s: reference: %s", c->name, fp4_err_text(&err));
    if (st != FP4_OK) goto out;
    st = fp4_sm90_moe_pack(h.w, c->experts, packed, globals, &err);
    CHECK_MSG(st == FP4_OK, "%s: pack: %s", c->name, fp4_err_text(&err));
    if (st != FP4_OK) goto out;

    CUDA_OK(cudaMalloc(&g.packed, psize));
    CUDA_OK(cudaMalloc((void **)&g.globals, (size_t)c->experts * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&g.off, (size_t)(c->experts + 1) * sizeof(int32_t)));
    CUDA_OK(cudaMalloc((void **)&g.pair_index, (size_t)pairs * sizeof(int32_t)));
    CUDA_OK(cudaMalloc((void **)&g.d, nd * sizeof(uint16_t)));
    CUDA_OK(cudaMemcpy(g.packed, packed, psize, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(g.globals, globals, (size_t)c->experts * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(g.off, h.plan.expert_offsets, (size_t)(c->experts + 1) * sizeof(int32_t),
                       cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(g.pair_index, h.plan.pair_index, (size_t)pairs * sizeof(int32_t),
                       cudaMemcpyHostToDevice));
    if (c->w4a16) {
        const size_t bytes = (size_t)h.rows * (size_t)c->k * 2;
        CUDA_OK(cudaMalloc((void **)&g.a_bf16, bytes));
        CUDA_OK(cudaMemcpy(g.a_bf16, h.a_bf16, bytes, cudaMemcpyHostToDevice));
    } else {
        const size_t cb = (size_t)h.rows * (size_t)(c->k / 2), sb = (size_t)h.rows * (size_t)(c->k / 16);
        CUDA_OK(cudaMalloc((void **)&g.a_codes, cb));
        CUDA_OK(cudaMalloc((void **)&g.a_scales, sb));
        CUDA_OK(cudaMemcpy(g.a_codes, h.a.codes, cb, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(g.a_scales, h.a.scales, sb, cudaMemcpyHostToDevice));
    }
    if (c->combine) {
        CUDA_OK(cudaMalloc((void **)&g.route_w, (size_t)pairs * sizeof(float)));
        CUDA_OK(cudaMalloc((void **)&g.d_combined, nc * sizeof(float)));
        CUDA_OK(cudaMemcpy(g.route_w, h.routing.weights, (size_t)pairs * sizeof(float),
                           cudaMemcpyHostToDevice));
    }
    g.ws_bytes = fp4_sm90_moe_workspace_size(c->experts, c->top_k, c->tokens, c->n, c->k,
                                              c->a_per_pair, c->w4a16);
    if (g.ws_bytes) {
        CUDA_OK(cudaMalloc(&g.ws, g.ws_bytes));
        CUDA_OK(cudaMemset(g.ws, 0, g.ws_bytes));
    }

    fp4_sm90_moe_args a;
    memset(&a, 0, sizeof a);
    a.experts = c->experts;
    a.top_k = c->top_k;
    a.tokens = c->tokens;
    a.n = c->n;
    a.k = c->k;
    a.w4a16 = c->w4a16;
    a.a_per_pair = c->a_per_pair;
    a.a_bf16 = g.a_bf16;
    a.a_codes = g.a_codes;
    a.a_scales = g.a_scales;
    a.a_global = c->w4a16 ? 1.0f : h.a.global_scale;
    a.expert_offsets = g.off;
    a.pair_index = g.pair_index;
    a.b_packed = g.packed;
    a.b_global = g.globals;
    a.d = g.d;
    a.route_weights = g.route_w;
    a.d_combined = g.d_combined;
    a.workspace = g.ws;
    a.workspace_bytes = g.ws_bytes;

    /* the split-K area must stay zeroed; what follows it (the prepass rows, the
     * wide path's copy) every call rewrites: poisoned before each pass, so the
     * graph pass cannot pass on the plain pass's rows */
    const size_t split_ws =
        fp4_sm90_moe_split_workspace_size(c->experts, c->top_k, c->tokens, c->n, c->k);
    cudaStream_t stream = NULL;
    CUDA_OK(cudaStreamCreate(&stream));
    for (int pass = 0; pass < 2; pass++) {
        const char *what = pass == 0 ? "plain" : "graph";
        CUDA_OK(cudaMemset(g.d, 0xFF, nd * sizeof(uint16_t))); /* bf16 NaN */
        if (g.ws && g.ws_bytes > split_ws)
            CUDA_OK(cudaMemset((char *)g.ws + split_ws, 0xFF, g.ws_bytes - split_ws));
        if (c->combine) CUDA_OK(cudaMemset(g.d_combined, 0xFF, nc * sizeof(float)));
        CUDA_OK(cudaDeviceSynchronize());
        if (pass == 0) {
            st = fp4_sm90_moe_gemm(&a, stream, &err);
            CHECK_MSG(st == FP4_OK, "%s: gemm: %s", c->name, fp4_err_text(&err));
        } else {
            cudaGraph_t graph = NULL;
            cudaGraphExec_t exec = NULL;
            CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            st = fp4_sm90_moe_gemm(&a, stream, &err);
            CUDA_OK(cudaStreamEndCapture(stream, &graph));
            CHECK_MSG(st == FP4_OK, "%s: gemm in capture: %s", c->name, fp4_err_text(&err));
            if (graph) {
                CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
                if (exec) CUDA_OK(cudaGraphLaunch(exec, stream));
            }
            CUDA_OK(cudaStreamSynchronize(stream));
            if (exec) cudaGraphExecDestroy(exec);
            if (graph) cudaGraphDestroy(graph);
        }
        if (st != FP4_OK) break;
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(d16, g.d, nd * sizeof(uint16_t), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < nd; i++) got[i] = fp4_bf16_to_float(d16[i]);
        compare(what, c->name, got, ref, nd, 1e-2, 5e-3);
        if (c->combine) {
            CUDA_OK(cudaMemcpy(comb_got, g.d_combined, nc * sizeof(float), cudaMemcpyDeviceToHost));
            st = fp4_moe_combine(got, c->n, &h.routing, comb_ref, &err);
            CHECK_MSG(st == FP4_OK, "%s: combine reference: %s", c->name, fp4_err_text(&err));
            compare("combine", c->name, comb_got, comb_ref, nc, 1e-5, 1e-5);
        }
    }
    /* the streaming path's split-K workspace came back zeroed */
    CHECK(split_ws <= g.ws_bytes);
    if (split_ws && split_ws <= g.ws_bytes) {
        uint8_t *w = malloc(split_ws);
        CHECK(w != NULL);
        if (w) {
            CUDA_OK(cudaMemcpy(w, g.ws, split_ws, cudaMemcpyDeviceToHost));
            size_t nz = 0;
            for (size_t i = 0; i < split_ws; i++) nz += w[i] != 0;
            CHECK_MSG(nz == 0, "%s: %zu workspace bytes left non-zero", c->name, nz);
            free(w);
        }
    }
    cudaStreamDestroy(stream);
    if (c->split) { /* the case is built so that both kernels run with work */
        int from = 0, below = 0, above = 0;
        const int paths = fp4_sm90_moe_paths(c->experts, c->top_k, c->tokens, &from);
        for (int e = 0; e < c->experts; e++) {
            const int cnt = h.plan.expert_counts[e];
            below += cnt > 0 && cnt < from;
            above += cnt >= from;
        }
        if (paths == (FP4_SM90_MOE_STREAM | FP4_SM90_MOE_WIDE))
            CHECK_MSG(below > 0 && above > 0, "%s: %d experts below the split, %d above", c->name,
                      below, above);
    }
    printf("%-44s E %3d k %d T %4lld n %4lld K %4lld %s: active %d, max %d tokens/expert, %s\n",
           c->name, c->experts, c->top_k, (long long)c->tokens, (long long)c->n, (long long)c->k,
           c->w4a16 ? "w4a16" : "w4a4 ", h.plan.stats.active_experts, h.plan.stats.max_tokens,
           path_name(c->experts, c->top_k, c->tokens));
out:
    dev_problem_free(&g);
    host_problem_free(&h, c->experts);
    free(ref);
    free(got);
    free(d16);
    free(comb_ref);
    free(comb_got);
    free(packed);
    free(globals);
}

static void test_cases(void)
{
    static const moe_case cases[] = {
        {"gate_up K=2880 n=272", 8, 2, 37, 272, 2880, FP4_MOE_ROUTE_RANDOM, 1, 0, 0, 0, 0},
        {"gate_up K=2880 n=272", 8, 2, 37, 272, 2880, FP4_MOE_ROUTE_RANDOM, 0, 0, 0, 0, 0},
        {"down odd k-steps + combine", 12, 3, 29, 320, 192, FP4_MOE_ROUTE_RANDOM, 1, 1, 1, 0, 0},
        {"down odd k-steps + combine", 12, 3, 29, 320, 192, FP4_MOE_ROUTE_RANDOM, 0, 1, 1, 0, 0},
        {"idle experts", 16, 2, 5, 264, 512, FP4_MOE_ROUTE_RANDOM, 1, 0, 1, 0, 0},
        {"idle experts", 16, 2, 5, 264, 512, FP4_MOE_ROUTE_RANDOM, 0, 1, 1, 0, 0},
        {"one expert, every token", 8, 1, 100, 256, 512, FP4_MOE_ROUTE_TRACE, 1, 0, 1, 1, 0},
        {"one expert, every token", 8, 1, 100, 256, 512, FP4_MOE_ROUTE_TRACE, 0, 1, 0, 1, 0},
        {"K/16 odd (K=1040)", 8, 2, 21, 136, 1040, FP4_MOE_ROUTE_RANDOM, 1, 0, 1, 0, 0},
        {"K/16 odd (K=1040)", 8, 2, 21, 136, 1040, FP4_MOE_ROUTE_RANDOM, 0, 1, 1, 0, 0},
        {"skewed", 64, 4, 300, 520, 1024, FP4_MOE_ROUTE_SKEWED, 1, 0, 1, 0, 1},
        {"skewed", 64, 4, 300, 520, 1024, FP4_MOE_ROUTE_SKEWED, 0, 0, 1, 0, 1},
        {"split K: few tokens, long K", 8, 2, 3, 520, 2880, FP4_MOE_ROUTE_RANDOM, 1, 0, 1, 0, 0},
        {"split K: few tokens, long K", 8, 2, 3, 520, 2880, FP4_MOE_ROUTE_RANDOM, 0, 1, 1, 0, 0},
        /* N % 8 != 0: every output through the scalar bf16 stores */
        {"n not a multiple of 8 (n=268)", 8, 2, 37, 268, 512, FP4_MOE_ROUTE_RANDOM, 1, 0, 1, 0, 0},
        {"n not a multiple of 8 (n=268)", 8, 2, 37, 268, 512, FP4_MOE_ROUTE_RANDOM, 0, 1, 1, 0, 0},
        {"E256 top8 T=1", 256, 8, 1, 384, 2880, FP4_MOE_ROUTE_RANDOM, 1, 0, 1, 0, 0},
        {"E256 top8 T=1", 256, 8, 1, 384, 2880, FP4_MOE_ROUTE_RANDOM, 0, 1, 1, 0, 0},
        {"E256 top8 T=16", 256, 8, 16, 384, 512, FP4_MOE_ROUTE_RANDOM, 1, 1, 1, 0, 0},
        {"E256 top8 T=16", 256, 8, 16, 384, 512, FP4_MOE_ROUTE_RANDOM, 0, 0, 1, 0, 0},
        {"E256 top8 T=512", 256, 8, 512, 384, 256, FP4_MOE_ROUTE_BALANCED, 1, 0, 1, 0, 0},
        {"E256 top8 T=512", 256, 8, 512, 384, 256, FP4_MOE_ROUTE_RANDOM, 0, 1, 1, 0, 0},
        /* 40 or more tokens an expert: the wide path by default */
        {"wide: 75 pairs an expert", 8, 2, 300, 264, 2880, FP4_MOE_ROUTE_RANDOM, 1, 0, 1, 0, 0},
        {"wide: 75 pairs an expert", 8, 2, 300, 264, 2880, FP4_MOE_ROUTE_RANDOM, 0, 1, 1, 0, 0},
        {"wide: n not a multiple of 8 (n=268)", 8, 2, 300, 268, 512, FP4_MOE_ROUTE_RANDOM, 1, 0, 1, 0, 0},
        {"wide: n not a multiple of 8 (n=268)", 8, 2, 300, 268, 512, FP4_MOE_ROUTE_RANDOM, 0, 1, 1, 0, 0},
        {"wide: one expert, 340 tokens", 8, 1, 340, 136, 1040, FP4_MOE_ROUTE_TRACE, 0, 0, 1, 1, 0},
        {"wide: skewed", 16, 4, 400, 520, 1024, FP4_MOE_ROUTE_SKEWED, 1, 1, 1, 0, 0},
    };
    /* each case with the split its size picks (experts of 40 tokens or more
     * on the wide path), then every case forced onto each path */
    const char *env_path = getenv("FP4_SM90_MOE_PATH");
    char saved[16] = "";
    if (env_path) snprintf(saved, sizeof saved, "%s", env_path);
    unsetenv("FP4_SM90_MOE_PATH");
    const int both = FP4_SM90_MOE_STREAM | FP4_SM90_MOE_WIDE;
    int from = 0;
    CHECK(fp4_sm90_moe_paths(256, 8, 39, NULL) == FP4_SM90_MOE_STREAM);
    CHECK(fp4_sm90_moe_paths(256, 8, 40, &from) == both && from == 40);
    CHECK(fp4_sm90_moe_paths(8, 2, 300, NULL) == both);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], 101 + i);
    static const char *const forced[2] = {"wide", "stream"};
    for (int f = 0; f < 2; f++) {
        setenv("FP4_SM90_MOE_PATH", forced[f], 1);
        CHECK(fp4_sm90_moe_paths(8, 2, 300, NULL) ==
              (f == 0 ? FP4_SM90_MOE_WIDE : FP4_SM90_MOE_STREAM));
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            moe_case c = cases[i];
            char name[96];
            snprintf(name, sizeof name, "%s [%s forced]", cases[i].name, forced[f]);
            c.name = name;
            check_case(&c, 101 + i);
        }
    }
    unsetenv("FP4_SM90_MOE_PATH");

    /* W4A4 on the streaming path both ways: the activations dequantized by the
     * prepass, and by each block as it stages them (the size picks one); each
     * case with the split its size picks */
    const char *env_pre = getenv("FP4_SM90_MOE_PREPASS");
    char saved_pre[16] = "";
    if (env_pre) snprintf(saved_pre, sizeof saved_pre, "%s", env_pre);
    unsetenv("FP4_SM90_MOE_PREPASS");
    CHECK(fp4_sm90_moe_dequant_prepass(256, 8, 255, 0, 0) == 0);
    CHECK(fp4_sm90_moe_dequant_prepass(256, 8, 256, 0, 0) == 1);
    CHECK(fp4_sm90_moe_dequant_prepass(256, 8, 1279, 0, 0) == 1);
    CHECK(fp4_sm90_moe_dequant_prepass(256, 8, 1280, 0, 0) == 0);
    CHECK(fp4_sm90_moe_dequant_prepass(256, 8, 512, 1, 0) == 0);
    CHECK(fp4_sm90_moe_dequant_prepass(256, 8, 512, 0, 1) == 0);
    CHECK(fp4_sm90_moe_dequant_prepass(32, 1, 512, 0, 0) == 0); /* top-1: no row is shared */
    static const char *const pre[2] = {"on", "off"};
    for (int f = 0; f < 2; f++) {
        setenv("FP4_SM90_MOE_PREPASS", pre[f], 1);
        CHECK(fp4_sm90_moe_dequant_prepass(256, 8, 1, 1, 0) == (f == 0));
        CHECK(fp4_sm90_moe_dequant_prepass(256, 8, 1, 0, 1) == 0);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            if (cases[i].w4a16) continue;
            moe_case c = cases[i];
            char name[96];
            snprintf(name, sizeof name, "%s [prepass %s]", cases[i].name, pre[f]);
            c.name = name;
            check_case(&c, 101 + i);
        }
    }
    if (env_pre) setenv("FP4_SM90_MOE_PREPASS", saved_pre, 1);
    else unsetenv("FP4_SM90_MOE_PREPASS");
    if (env_path) setenv("FP4_SM90_MOE_PATH", saved, 1); /* the timing below honours it */
}

/* Bad arguments are refused, never launched. */
static void test_refusals(void)
{
    fp4_err err;
    fp4_sm90_moe_args a;
    memset(&a, 0, sizeof a);
    a.experts = 4;
    a.top_k = 2;
    a.tokens = 3;
    a.n = 64;
    a.k = 40; /* not a multiple of 16 */
    CHECK(fp4_sm90_moe_gemm(&a, NULL, &err) == FP4_ERR_SHAPE);
    a.k = 64;
    CHECK(fp4_sm90_moe_gemm(&a, NULL, &err) == FP4_ERR_INVALID_ARG); /* NULL pointers */
    CHECK(fp4_sm90_moe_packed_size(4, 64, 40) == 0);
}

/* ---- 3. timing ---------------------------------------------------------------------- */

typedef struct timing_case {
    const char *name;
    int64_t tokens, n, k;
    int w4a16, a_per_pair, combine;
    fp4_moe_route_mode route;
} timing_case;

#define TIME_E 256
#define TIME_TOPK 8
#define TIME_LAUNCHES 20

/* Packed weights of TIME_E experts: 8 distinct random ones, repeated. */
static void *make_timing_weights(int64_t n, int64_t k, float **globals_dev)
{
    fp4_err err;
    const int distinct = 8;
    const size_t per = fp4_sm90_moe_packed_size(1, n, k);
    fp4_matrix w[8];
    memset(w, 0, sizeof w);
    void *host = malloc(per * (size_t)distinct), *dev = NULL;
    float globals[TIME_E];
    CHECK(host != NULL);
    if (!host) return NULL;
    for (int e = 0; e < distinct; e++)
        CHECK(fp4_make_operand(FP4_DATA_CODES, n, k, 7000 + (uint64_t)e, &w[e], &err) == FP4_OK);
    CHECK(fp4_sm90_moe_pack(w, distinct, host, globals, &err) == FP4_OK);
    for (int e = 0; e < distinct; e++) fp4_matrix_free(&w[e]);
    for (int e = distinct; e < TIME_E; e++) globals[e] = globals[e % distinct];
    CUDA_OK(cudaMalloc(&dev, per * TIME_E));
    CUDA_OK(cudaMemcpy(dev, host, per * (size_t)distinct, cudaMemcpyHostToDevice));
    for (int e = distinct; e < TIME_E; e++)
        CUDA_OK(cudaMemcpy((char *)dev + per * (size_t)e, (char *)dev + per * (size_t)(e % distinct),
                           per, cudaMemcpyDeviceToDevice));
    CUDA_OK(cudaMalloc((void **)globals_dev, sizeof globals));
    CUDA_OK(cudaMemcpy(*globals_dev, globals, sizeof globals, cudaMemcpyHostToDevice));
    free(host);
    return dev;
}

static void time_case(const timing_case *tc, void *packed, const float *globals)
{
    fp4_err err;
    const int64_t pairs = tc->tokens * TIME_TOPK;
    /* routings: one per launch at small T (disjoint experts: cold weights) */
    const int nroute = tc->tokens * TIME_TOPK <= 32 ? TIME_LAUNCHES : 1;
    fp4_moe_routing r[TIME_LAUNCHES];
    fp4_moe_plan plan[TIME_LAUNCHES];
    int32_t *off[TIME_LAUNCHES], *pidx[TIME_LAUNCHES];
    memset(r, 0, sizeof r);
    memset(plan, 0, sizeof plan);
    memset(off, 0, sizeof off);
    memset(pidx, 0, sizeof pidx);
    double bytes = 0;
    for (int i = 0; i < nroute; i++) {
        int32_t ids[32 * TIME_TOPK];
        fp4_moe_route_opts ro = {tc->route, 11 + (uint64_t)i, 1.0, NULL, NULL, 0};
        if (nroute > 1) {
            for (int64_t p = 0; p < pairs; p++)
                ids[p] = (int32_t)((i * pairs + p) * 7 % TIME_E); /* 7 is prime to 256: distinct */
            ro.mode = FP4_MOE_ROUTE_TRACE;
            ro.trace_ids = ids;
        }
        CHECK(fp4_moe_route(&ro, tc->tokens, TIME_E, TIME_TOPK, &r[i], &err) == FP4_OK);
        CHECK(fp4_moe_plan_build(&r[i], &plan[i], &err) == FP4_OK);
        bytes += plan[i].stats.active_experts * fp4_moe_matrix_bytes(tc->n, tc->k, FP4_MOE_WEIGHTS_NVFP4);
        CUDA_OK(cudaMalloc((void **)&off[i], (TIME_E + 1) * sizeof(int32_t)));
        CUDA_OK(cudaMalloc((void **)&pidx[i], (size_t)pairs * sizeof(int32_t)));
        CUDA_OK(cudaMemcpy(off[i], plan[i].expert_offsets, (TIME_E + 1) * sizeof(int32_t),
                           cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(pidx[i], plan[i].pair_index, (size_t)pairs * sizeof(int32_t),
                           cudaMemcpyHostToDevice));
    }
    bytes /= nroute;

    const int64_t rows = tc->a_per_pair ? pairs : tc->tokens;
    uint16_t *a16 = NULL, *d = NULL;
    uint8_t *acodes = NULL, *ascales = NULL;
    float *rw = NULL, *dc = NULL;
    void *ws = NULL;
    fp4_matrix am;
    memset(&am, 0, sizeof am);
    CHECK(fp4_make_operand(FP4_DATA_GAUSSIAN, rows, tc->k, 99, &am, &err) == FP4_OK);
    if (tc->w4a16) {
        uint16_t *x = malloc((size_t)rows * (size_t)tc->k * 2);
        CHECK(x != NULL);
        if (x && am.codes) CHECK(fp4_dequantize_bf16(&am, x, &err) == FP4_OK);
        CUDA_OK(cudaMalloc((void **)&a16, (size_t)rows * (size_t)tc->k * 2));
        if (x) CUDA_OK(cudaMemcpy(a16, x, (size_t)rows * (size_t)tc->k * 2, cudaMemcpyHostToDevice));
        free(x);
    } else {
        CUDA_OK(cudaMalloc((void **)&acodes, (size_t)rows * (size_t)tc->k / 2));
        CUDA_OK(cudaMalloc((void **)&ascales, (size_t)rows * (size_t)tc->k / 16));
        if (am.codes) {
            CUDA_OK(cudaMemcpy(acodes, am.codes, (size_t)rows * (size_t)tc->k / 2, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(ascales, am.scales, (size_t)rows * (size_t)tc->k / 16, cudaMemcpyHostToDevice));
        }
    }
    CUDA_OK(cudaMalloc((void **)&d, (size_t)pairs * (size_t)tc->n * 2));
    if (tc->combine) {
        CUDA_OK(cudaMalloc((void **)&rw, (size_t)pairs * sizeof(float)));
        CUDA_OK(cudaMemcpy(rw, r[0].weights, (size_t)pairs * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMalloc((void **)&dc, (size_t)tc->tokens * (size_t)tc->n * sizeof(float)));
    }
    const size_t wsb = fp4_sm90_moe_workspace_size(TIME_E, TIME_TOPK, tc->tokens, tc->n, tc->k,
                                                   tc->a_per_pair, tc->w4a16);
    if (wsb) {
        CUDA_OK(cudaMalloc(&ws, wsb));
        CUDA_OK(cudaMemset(ws, 0, wsb));
    }

    fp4_sm90_moe_args a;
    memset(&a, 0, sizeof a);
    a.experts = TIME_E;
    a.top_k = TIME_TOPK;
    a.tokens = tc->tokens;
    a.n = tc->n;
    a.k = tc->k;
    a.w4a16 = tc->w4a16;
    a.a_per_pair = tc->a_per_pair;
    a.a_bf16 = a16;
    a.a_codes = acodes;
    a.a_scales = ascales;
    a.a_global = tc->w4a16 ? 1.0f : am.global_scale;
    a.b_packed = packed;
    a.b_global = globals;
    a.d = d;
    a.route_weights = rw;
    a.d_combined = dc;
    a.workspace = ws;
    a.workspace_bytes = wsb;

    cudaStream_t s = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    CUDA_OK(cudaStreamCreate(&s));
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    int ok = 1;
    for (int i = 0; i < 2 && ok; i++) { /* warm-up, outside the graph */
        a.expert_offsets = off[i % nroute];
        a.pair_index = pidx[i % nroute];
        ok = fp4_sm90_moe_gemm(&a, s, &err) == FP4_OK;
    }
    CHECK_MSG(ok, "%s: %s", tc->name, fp4_err_text(&err));
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < TIME_LAUNCHES && ok; i++) {
        a.expert_offsets = off[i % nroute];
        a.pair_index = pidx[i % nroute];
        ok = fp4_sm90_moe_gemm(&a, s, &err) == FP4_OK;
    }
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    double best = 1e30, sum = 0;
    const int reps = 5;
    if (ok && graph) {
        CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
        CUDA_OK(cudaGraphLaunch(exec, s));
        for (int rep = 0; rep < reps; rep++) {
            float ms = 0;
            CUDA_OK(cudaEventRecord(e0, s));
            CUDA_OK(cudaGraphLaunch(exec, s));
            CUDA_OK(cudaEventRecord(e1, s));
            CUDA_OK(cudaEventSynchronize(e1));
            CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
            const double us = ms * 1000.0 / TIME_LAUNCHES;
            best = us < best ? us : best;
            sum += us;
        }
        CUDA_OK(cudaGetLastError());
        printf("TIME %-40s %9.2f us (mean %9.2f)  %7.1f MB  %7.0f GB/s  %5.1f%% of 4.5 TB/s  %s\n",
               tc->name, best, sum / reps, bytes / 1e6, bytes / (best * 1e3),
               100.0 * bytes / (best * 1e3) / 4500.0, path_name(TIME_E, TIME_TOPK, tc->tokens));
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(s);
    for (int i = 0; i < nroute; i++) {
        cudaFree(off[i]);
        cudaFree(pidx[i]);
        fp4_moe_plan_free(&plan[i]);
        fp4_moe_routing_free(&r[i]);
    }
    fp4_matrix_free(&am);
    cudaFree(a16);
    cudaFree(acodes);
    cudaFree(ascales);
    cudaFree(d);
    cudaFree(rw);
    cudaFree(dc);
    cudaFree(ws);
}

/* Whether FP4_MOE_TIME_CASES (comma-separated substrings) selects this case;
 * every case when it is unset or empty. */
static int time_selected(const char *name)
{
    const char *sel = getenv("FP4_MOE_TIME_CASES");
    if (!sel || !sel[0]) return 1;
    while (*sel) {
        const char *end = strchr(sel, ',');
        const size_t len = end ? (size_t)(end - sel) : strlen(sel);
        if (len > 0) {
            for (const char *p = name; *p; p++)
                if (strncmp(p, sel, len) == 0) return 1;
        }
        if (!end) break;
        sel = end + 1;
    }
    return 0;
}

/* Times the selected cases of one weight shape (the weights are made only
 * when a case needs them). */
static void time_cases(const timing_case *cases, size_t count)
{
    size_t selected = 0;
    for (size_t i = 0; i < count; i++) selected += (size_t)time_selected(cases[i].name);
    if (selected == 0) return;
    float *globals = NULL;
    void *w = make_timing_weights(cases[0].n, cases[0].k, &globals);
    if (w) {
        for (size_t i = 0; i < count; i++)
            if (time_selected(cases[i].name)) time_case(&cases[i], w, globals);
    }
    cudaFree(w);
    cudaFree(globals);
}

static void time_glm5(void)
{
    /* the last three have many tokens an expert (the wide path) */
    static const timing_case gate_up[] = {
        {"gate_up T=512 balanced w4a16", 512, 4096, 6144, 1, 0, 0, FP4_MOE_ROUTE_BALANCED},
        {"gate_up T=512 balanced w4a4", 512, 4096, 6144, 0, 0, 0, FP4_MOE_ROUTE_BALANCED},
        {"gate_up T=512 random w4a16", 512, 4096, 6144, 1, 0, 0, FP4_MOE_ROUTE_RANDOM},
        {"gate_up T=64 random w4a16", 64, 4096, 6144, 1, 0, 0, FP4_MOE_ROUTE_RANDOM},
        {"gate_up T=1 w4a16", 1, 4096, 6144, 1, 0, 0, FP4_MOE_ROUTE_RANDOM},
        {"gate_up T=1 w4a4", 1, 4096, 6144, 0, 0, 0, FP4_MOE_ROUTE_RANDOM},
        {"gate_up T=2048 random w4a4", 2048, 4096, 6144, 0, 0, 0, FP4_MOE_ROUTE_RANDOM},
        {"gate_up T=2048 random w4a16", 2048, 4096, 6144, 1, 0, 0, FP4_MOE_ROUTE_RANDOM},
        {"gate_up T=8192 random w4a4", 8192, 4096, 6144, 0, 0, 0, FP4_MOE_ROUTE_RANDOM},
    };
    static const timing_case down[] = {
        {"down T=512 balanced w4a16", 512, 6144, 2048, 1, 1, 0, FP4_MOE_ROUTE_BALANCED},
        {"down T=512 balanced w4a4", 512, 6144, 2048, 0, 1, 0, FP4_MOE_ROUTE_BALANCED},
        {"down T=512 balanced w4a16 + combine", 512, 6144, 2048, 1, 1, 1, FP4_MOE_ROUTE_BALANCED},
        {"down T=1 w4a16", 1, 6144, 2048, 1, 1, 0, FP4_MOE_ROUTE_RANDOM},
    };
    time_cases(gate_up, sizeof gate_up / sizeof gate_up[0]);
    time_cases(down, sizeof down / sizeof down[0]);
}

int main(void)
{
    test_value_layout();
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("gpu_moe_kernel: no GPU, skipped (the value layout was checked)\n");
        return check_failures ? 1 : 77;
    }
    test_refusals();
    test_cases();
    const char *t = getenv("FP4_MOE_TIME");
    if (t && t[0] && strcmp(t, "0") != 0) time_glm5();
    return check_finish("gpu_moe_kernel");
}
