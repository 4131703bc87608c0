/* MoE backend "moe-cublas-bf16": the grouped bf16 baseline a Hopper user has,
 * cublasGemmGroupedBatchedEx with one group per expert that got tokens.
 *
 * Weights: every expert's NVFP4 weight dequantized exactly to bf16 (e2m1 *
 * scale, without the global scale, which goes into the group's alpha), on the
 * device, once per set of weights (kept in the instance across plans while
 * problem->weights_id stays). Activations: W4A16 the problem's bf16; W4A4
 * the NVFP4 activations dequantized exactly to bf16 in prepare (so the check
 * against the exact W4A4 reference holds at bf16 output tolerance).
 *
 * A call (one graph): gather the input rows into the grouped order of the
 * plan (x's token rows for gate_up, h's pair rows for down), the grouped GEMM
 * with fp32 accumulation and bf16 D, and for down the weighted combine into
 * fp32 [T, H]. gate_up's grouped D is put back in pair order by read_output.
 * The layer: gather (W4A4: quantize x to NVFP4 and dequantize, fused into
 * the gather, the global scale in alpha), gate_up, the activation (W4A4: h
 * quantized and dequantized the same way), down, combine.
 *
 * The group sizes are the host plan's, fixed when the graph is captured: an
 * advantage a serving engine does not have (its counts live on the device),
 * stated in docs/MOE.md. Layout as cublas_bf16.cu: per group cuBLAS's A is the
 * expert's weight [N, K] (transa T, lda K), its B the expert's rows [M_e, K]
 * (transb N, ldb K), C = D^T [N, M_e] (ldc N), m = N, n = M_e, k = K. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

extern "C" {
#include "backends/moe_backends.h" /* gives the table below C linkage */
}
#include "backends/blas_common.h"
#include "backends/moe_gpu.h"
#include "core/gpu.h"

#define BF16_WS_BYTES ((size_t)32 << 20) /* cuBLAS's workspace, set explicitly (graph capture) */
#define MAX_CACHED_COPIES 64

/* Device bf16 weights of one matrix kind, all experts, per copy. */
typedef struct bf16_weights {
    int copies;
    uint16_t *w[MAX_CACHED_COPIES];
    size_t bytes; /* one copy */
} bf16_weights;

typedef struct bf16_inst {
    cublasHandle_t h;
    void *ws;
    fp4_warnings *warn;
    uint64_t weights_id;     /* of what gu and dn hold (0: nothing) */
    bf16_weights gu, dn;
} bf16_inst;

/* One grouped GEMM: host parameter arrays (shared by the copies) and, per
 * copy, the device arrays of pointers. */
typedef struct grouped_call {
    int groups;
    cublasOperation_t *ta, *tb;
    int *m, *n, *k, *lda, *ldb, *ldc, *size;
    float *alpha, *beta;
    void **ptrs; /* device, per copy 3 * groups: A[], B[], C[] */
} grouped_call;

typedef struct bf16_copy {
    uint16_t *x;  /* the input in bf16 [a_rows, a_cols] */
    uint16_t *xg; /* gathered [P, a_cols] */
    uint16_t *y;  /* gate_up's grouped D [P, 2I] (gate_up, layer) */
    uint16_t *h;  /* layer: the activation [P, I], grouped */
    uint16_t *d;  /* down's grouped D [P, H] (down, layer) */
    float *out;   /* [T, H] (down, layer) */
} bf16_copy;

typedef struct bf16_plan {
    bf16_inst *inst;
    const fp4_moe_problem *p;
    int copies;
    int64_t pairs;
    int32_t *map;         /* device: grouped row -> input row */
    int32_t *row_of_pair; /* device: pair -> grouped row (combine) */
    int32_t *row_of_pair_host;
    float *route_w;       /* device [P] */
    grouped_call gu, dn;  /* the gate_up and down calls (as the step needs) */
    float x_global, h_global; /* W4A4 layer: 1 / encode scale of x and h */
    bf16_copy *c;
    char variant[160];
} bf16_plan;

static void weights_free(bf16_weights *w, fp4_warnings *warn)
{
    for (int i = 0; i < w->copies; i++) fp4_gpu_release(w->w[i], "moe-cublas-bf16 weights", warn);
    memset(w, 0, sizeof *w);
}

static void bf16_close(void *inst_)
{
    bf16_inst *inst = (bf16_inst *)inst_;
    if (!inst) return;
    weights_free(&inst->gu, inst->warn);
    weights_free(&inst->dn, inst->warn);
    if (inst->h) FP4_CUBLAS_CLEANUP(inst->warn, cublasDestroy(inst->h));
    fp4_gpu_release(inst->ws, "moe-cublas-bf16 workspace", inst->warn);
    free(inst);
}

static fp4_status bf16_open(void **out, fp4_err *err)
{
    fp4_status st = fp4_gpu_require(8, 0, 0, NULL, NULL, err);
    *out = NULL;
    if (st != FP4_OK) return st;
    bf16_inst *inst = (bf16_inst *)calloc(1, sizeof *inst);
    if (!inst) return fp4_fail(err, FP4_ERR_NOMEM, "moe-cublas-bf16: no host memory");
    if ((st = fp4_gpu_alloc(&inst->ws, BF16_WS_BYTES, "moe-cublas-bf16 workspace", err)) != FP4_OK) goto fail;
    FP4_CUBLAS_GOTO(err, st, cublasCreate(&inst->h), fail);
    *out = inst;
    return FP4_OK;
fail:
    bf16_close(inst);
    return st;
}

static void bf16_set_warnings(void *inst, fp4_warnings *w)
{
    ((bf16_inst *)inst)->warn = w;
}

static fp4_status bf16_supports(void *inst, const fp4_moe_problem *p, fp4_err *err)
{
    if (p->tokens * p->dims.top_k > INT_MAX / 2 || 2 * p->dims.inter > INT_MAX / 2)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "moe-cublas-bf16: sizes over the int range of cuBLAS");
    return FP4_OK;
}

/* The bf16 weights of one kind with at least `copies` copies, made from
 * w[0..E) (converted once, further copies copied on the device). */
static fp4_status weights_ensure(bf16_inst *inst, bf16_weights *bw, const fp4_matrix *w, int experts,
                                 int copies, fp4_err *err)
{
    const size_t bytes = (size_t)experts * (size_t)w[0].rows * (size_t)w[0].cols * 2;
    fp4_status st;
    if (copies > MAX_CACHED_COPIES)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-cublas-bf16: %d copies, at most %d", copies,
                        MAX_CACHED_COPIES);
    if (bw->copies == 0) {
        if ((st = fp4_gpu_alloc((void **)&bw->w[0], bytes, "moe-cublas-bf16 weights", err)) != FP4_OK) return st;
        bw->copies = 1;
        bw->bytes = bytes;
        if ((st = fp4_moe_gpu_weights_bf16(w, experts, bw->w[0], err)) != FP4_OK) {
            weights_free(bw, inst->warn);
            return st;
        }
    }
    while (bw->copies < copies) {
        uint16_t *dst = NULL;
        if ((st = fp4_gpu_alloc((void **)&dst, bytes, "moe-cublas-bf16 weights", err)) != FP4_OK) return st;
        bw->w[bw->copies++] = dst;
        FP4_CUDA_TRY(err, cudaMemcpy(dst, bw->w[0], bytes, cudaMemcpyDeviceToDevice));
    }
    /* the copies run on the legacy stream, the timed calls on a non-blocking one */
    FP4_CUDA_TRY(err, cudaDeviceSynchronize());
    return FP4_OK;
}

static void call_free(grouped_call *g, fp4_warnings *w)
{
    free(g->ta);
    free(g->tb);
    free(g->m);
    free(g->n);
    free(g->k);
    free(g->lda);
    free(g->ldb);
    free(g->ldc);
    free(g->size);
    free(g->alpha);
    free(g->beta);
    fp4_gpu_release(g->ptrs, "moe-cublas-bf16 pointer arrays", w);
    memset(g, 0, sizeof *g);
}

static void bf16_release(void *plan_)
{
    bf16_plan *pl = (bf16_plan *)plan_;
    if (!pl) return;
    fp4_warnings *w = pl->inst ? pl->inst->warn : NULL;
    if (pl->c)
        for (int i = 0; i < pl->copies; i++) {
            bf16_copy *c = &pl->c[i];
            fp4_gpu_release(c->x, "moe-cublas-bf16 x", w);
            fp4_gpu_release(c->xg, "moe-cublas-bf16 gathered x", w);
            fp4_gpu_release(c->y, "moe-cublas-bf16 y", w);
            fp4_gpu_release(c->h, "moe-cublas-bf16 h", w);
            fp4_gpu_release(c->d, "moe-cublas-bf16 d", w);
            fp4_gpu_release(c->out, "moe-cublas-bf16 out", w);
        }
    free(pl->c);
    fp4_gpu_release(pl->map, "moe-cublas-bf16 row map", w);
    fp4_gpu_release(pl->row_of_pair, "moe-cublas-bf16 pair rows", w);
    fp4_gpu_release(pl->route_w, "moe-cublas-bf16 routing weights", w);
    free(pl->row_of_pair_host);
    call_free(&pl->gu, w);
    call_free(&pl->dn, w);
    free(pl);
}

/* The grouped call of weights W (all experts, [n, k] each, per copy wcopy)
 * times the grouped rows x ([P, k]) into y ([P, n]): one group per expert
 * with pairs, alpha = act_global * W[e].global_scale. */
static fp4_status call_build(bf16_plan *pl, grouped_call *g, const fp4_matrix *w, const bf16_weights *bw,
                             int64_t n, int64_t k, float act_global, int which, fp4_err *err)
{
    const fp4_moe_plan *plan = pl->p->plan;
    const int E = plan->experts;
    int G = 0;
    fp4_status st = FP4_OK;
    void **host = NULL;
    for (int e = 0; e < E; e++) G += plan->expert_counts[e] > 0;
    g->groups = G;
    g->ta = (cublasOperation_t *)malloc((size_t)G * sizeof *g->ta);
    g->tb = (cublasOperation_t *)malloc((size_t)G * sizeof *g->tb);
    g->m = (int *)malloc((size_t)G * sizeof(int));
    g->n = (int *)malloc((size_t)G * sizeof(int));
    g->k = (int *)malloc((size_t)G * sizeof(int));
    g->lda = (int *)malloc((size_t)G * sizeof(int));
    g->ldb = (int *)malloc((size_t)G * sizeof(int));
    g->ldc = (int *)malloc((size_t)G * sizeof(int));
    g->size = (int *)malloc((size_t)G * sizeof(int));
    g->alpha = (float *)malloc((size_t)G * sizeof(float));
    g->beta = (float *)malloc((size_t)G * sizeof(float));
    host = (void **)malloc((size_t)3 * G * pl->copies * sizeof *host);
    if (!g->ta || !g->tb || !g->m || !g->n || !g->k || !g->lda || !g->ldb || !g->ldc || !g->size || !g->alpha ||
        !g->beta || !host) {
        free(host);
        return fp4_fail(err, FP4_ERR_NOMEM, "moe-cublas-bf16: no host memory for %d groups", G);
    }
    for (int e = 0, i = 0; e < E; e++) {
        const int32_t cnt = plan->expert_counts[e], off = plan->expert_offsets[e];
        if (cnt == 0) continue;
        g->ta[i] = CUBLAS_OP_T;
        g->tb[i] = CUBLAS_OP_N;
        g->m[i] = (int)n;
        g->n[i] = cnt;
        g->k[i] = (int)k;
        g->lda[i] = (int)k;
        g->ldb[i] = (int)k;
        g->ldc[i] = (int)n;
        g->size[i] = 1;
        g->alpha[i] = act_global * w[e].global_scale;
        g->beta[i] = 0.0f;
        for (int c = 0; c < pl->copies; c++) {
            const bf16_copy *cp = &pl->c[c];
            /* down reads the layer's h, or the down step's gathered input */
            const uint16_t *x = which == 1 && pl->p->step == FP4_MOE_STEP_LAYER ? cp->h : cp->xg;
            uint16_t *y = which == 0 ? cp->y : cp->d;
            void **a = host + (size_t)3 * G * c;
            a[i] = bw->w[c] + (size_t)e * (size_t)n * (size_t)k;
            a[G + i] = (void *)(x + (size_t)off * (size_t)k);
            a[2 * G + i] = y + (size_t)off * (size_t)n;
        }
        i++;
    }
    if (G > 0) st = fp4_gpu_upload((void **)&g->ptrs, host, (size_t)3 * G * pl->copies * sizeof *host,
                                   "moe-cublas-bf16 pointer arrays", err);
    free(host);
    return st;
}

static fp4_status bf16_prepare(void *inst_, const fp4_moe_problem *p, int copies, void **out, fp4_err *err)
{
    bf16_inst *inst = (bf16_inst *)inst_;
    fp4_status st;
    int32_t *map = NULL;
    int64_t rows = 0;
    uint16_t *host_x[2] = {NULL, NULL};
    *out = NULL;
    if ((st = fp4_moe_problem_check(p, copies, err)) != FP4_OK) return st;
    if ((st = bf16_supports(inst, p, err)) != FP4_OK) return st;
    const int E = p->dims.experts, k = p->dims.top_k;
    const int64_t H = p->dims.hidden, I = p->dims.inter, P = p->plan->pairs, T = p->tokens;
    const int layer = p->step == FP4_MOE_STEP_LAYER, w4a4 = p->mode == FP4_MOE_W4A4;
    const int need_gu = p->step != FP4_MOE_STEP_DOWN, need_dn = p->step != FP4_MOE_STEP_GATE_UP;

    /* the weights, kept across plans */
    if (inst->weights_id != p->weights_id) {
        weights_free(&inst->gu, inst->warn);
        weights_free(&inst->dn, inst->warn);
        inst->weights_id = p->weights_id;
    }
    /* only the weights of the steps this plan needs stay: the other step's
     * would hold device memory that the other backends' plans of the case
     * need (moe_backend.h: the live plans of an instance are of one case) */
    if (!need_gu) weights_free(&inst->gu, inst->warn);
    if (!need_dn) weights_free(&inst->dn, inst->warn);
    if (need_gu && (st = weights_ensure(inst, &inst->gu, p->weights->gate_up, E, copies, err)) != FP4_OK) return st;
    if (need_dn && (st = weights_ensure(inst, &inst->dn, p->weights->down, E, copies, err)) != FP4_OK) return st;

    bf16_plan *pl = (bf16_plan *)calloc(1, sizeof *pl);
    if (!pl || !(pl->c = (bf16_copy *)calloc((size_t)copies, sizeof *pl->c))) {
        free(pl);
        return fp4_fail(err, FP4_ERR_NOMEM, "moe-cublas-bf16: no host memory for the plan");
    }
    pl->inst = inst;
    pl->p = p;
    pl->copies = copies;
    pl->pairs = P;
    /* grouped row -> input row: tokens (gate_up, layer) or pairs (down) */
    if ((st = fp4_moe_row_map(p->plan, p->step == FP4_MOE_STEP_DOWN ? 1 : k, 1, &map, &rows,
                              &pl->row_of_pair_host, NULL, err)) != FP4_OK ||
        (st = fp4_gpu_upload((void **)&pl->map, map, (size_t)P * sizeof *map, "moe-cublas-bf16 row map", err)) !=
            FP4_OK ||
        (st = fp4_gpu_upload((void **)&pl->row_of_pair, pl->row_of_pair_host, (size_t)P * sizeof(int32_t),
                             "moe-cublas-bf16 pair rows", err)) != FP4_OK ||
        (st = fp4_gpu_upload((void **)&pl->route_w, p->routing->weights, (size_t)P * sizeof(float),
                             "moe-cublas-bf16 routing weights", err)) != FP4_OK)
        goto fail;
    /* the input in bf16: the problem's, or (W4A4 steps) its NVFP4 dequantized exactly */
    for (int odd = 0; odd < 2 && odd < copies; odd++)
        if (w4a4 && !layer && (st = fp4_moe_host_dequant_bf16(fp4_moe_problem_a(p, odd), &host_x[odd], err)) != FP4_OK)
            goto fail;
    {
        const size_t xb = (size_t)p->a_rows * (size_t)p->a_cols * 2;
        for (int i = 0; i < copies; i++) {
            bf16_copy *c = &pl->c[i];
            const void *src = w4a4 && !layer ? (const void *)host_x[i & 1] : (const void *)fp4_moe_problem_a_bf16(p, i);
            if ((st = fp4_gpu_upload((void **)&c->x, src, xb, "moe-cublas-bf16 x", err)) != FP4_OK ||
                (st = fp4_gpu_alloc((void **)&c->xg, (size_t)P * (size_t)p->a_cols * 2, "moe-cublas-bf16 gathered x",
                                    err)) != FP4_OK)
                goto fail;
            if (need_gu && (st = fp4_gpu_alloc((void **)&c->y, (size_t)P * (size_t)(2 * I) * 2, "moe-cublas-bf16 y",
                                               err)) != FP4_OK)
                goto fail;
            if (layer && (st = fp4_gpu_alloc((void **)&c->h, (size_t)P * (size_t)I * 2, "moe-cublas-bf16 h", err)) !=
                             FP4_OK)
                goto fail;
            if (need_dn &&
                ((st = fp4_gpu_alloc((void **)&c->d, (size_t)P * (size_t)H * 2, "moe-cublas-bf16 d", err)) != FP4_OK ||
                 (st = fp4_gpu_alloc((void **)&c->out, (size_t)T * (size_t)H * 4, "moe-cublas-bf16 out", err)) != FP4_OK))
                goto fail;
        }
    }
    /* the grouped calls; alpha carries the activations' global scale */
    {
        float a_glob = 1.0f;
        if (w4a4 && !layer) a_glob = p->a->global_scale;
        if (w4a4 && layer) {
            pl->x_global = 1.0f / p->a_encode_scale; /* as the CPU quantizer's global scale */
            pl->h_global = 1.0f / p->h_encode_scale;
            a_glob = pl->x_global;
        }
        if (need_gu && (st = call_build(pl, &pl->gu, p->weights->gate_up, &inst->gu, 2 * I, H, a_glob, 0, err)) != FP4_OK)
            goto fail;
        if (need_dn && (st = call_build(pl, &pl->dn, p->weights->down, &inst->dn, H, I,
                                        layer ? (w4a4 ? pl->h_global : 1.0f) : a_glob, 1, err)) != FP4_OK)
            goto fail;
    }
    snprintf(pl->variant, sizeof pl->variant, "cublasGemmGroupedBatchedEx, %d groups (one per active expert)",
             need_gu ? pl->gu.groups : pl->dn.groups);
    free(map);
    free(host_x[0]);
    free(host_x[1]);
    *out = pl;
    return FP4_OK;
fail:
    free(map);
    free(host_x[0]);
    free(host_x[1]);
    bf16_release(pl);
    return st;
}

static fp4_status check_copy(const bf16_plan *pl, int copy, fp4_err *err)
{
    if (copy < 0 || copy >= pl->copies)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-cublas-bf16: copy %d of %d", copy, pl->copies);
    return FP4_OK;
}

static fp4_status bf16_poison(void *plan_, int copy, void *stream, fp4_err *err)
{
    bf16_plan *pl = (bf16_plan *)plan_;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    const bf16_copy *c = &pl->c[copy];
    if (pl->p->step == FP4_MOE_STEP_GATE_UP)
        return fp4_gpu_poison_bf16(c->y, (size_t)pl->pairs * (size_t)(2 * pl->p->dims.inter), (cudaStream_t)stream,
                                   err);
    return fp4_moe_gpu_poison_f32(c->out, (size_t)pl->p->tokens * (size_t)pl->p->dims.hidden, (cudaStream_t)stream,
                                  err);
}

static fp4_status grouped_gemm(const bf16_plan *pl, const grouped_call *g, int copy, cudaStream_t s, fp4_err *err)
{
    cublasHandle_t h = pl->inst->h;
    if (g->groups == 0) return FP4_OK;
    void **ptr = g->ptrs + (size_t)3 * g->groups * copy;
    FP4_CUBLAS_TRY(err, cublasSetStream(h, s));
    FP4_CUBLAS_TRY(err, cublasSetWorkspace(h, pl->inst->ws, BF16_WS_BYTES)); /* SetStream resets it */
    FP4_CUBLAS_TRY(err, cublasGemmGroupedBatchedEx(h, g->ta, g->tb, g->m, g->n, g->k, g->alpha,
                                                   (const void *const *)ptr, CUDA_R_16BF, g->lda,
                                                   (const void *const *)(ptr + g->groups), CUDA_R_16BF, g->ldb,
                                                   g->beta, ptr + 2 * g->groups, CUDA_R_16BF, g->ldc, g->groups,
                                                   g->size, CUBLAS_COMPUTE_32F));
    return FP4_OK;
}

/* The layer's steps, in order; the plain steps are one of them or three. */
enum { L_GATHER, L_GATE_UP, L_ACT, L_DOWN, L_COMBINE, L_STEPS };

static fp4_status run_step(bf16_plan *pl, int step, int copy, cudaStream_t s, fp4_err *err)
{
    const fp4_moe_problem *p = pl->p;
    const bf16_copy *c = &pl->c[copy];
    const int64_t H = p->dims.hidden, I = p->dims.inter;
    const int w4a4 = p->mode == FP4_MOE_W4A4;
    switch (step) {
    case L_GATHER:
        if (p->step == FP4_MOE_STEP_LAYER && w4a4) { /* x quantized to NVFP4 and back, gathered */
            fp4_moe_act_args a;
            memset(&a, 0, sizeof a);
            a.src = c->x;
            a.src_cols = H;
            a.map = pl->map;
            a.act = -1;
            a.rows = pl->pairs;
            a.cols = H;
            a.out = FP4_MOE_QOUT_DEQUANT_BF16;
            a.encode_scale = p->a_encode_scale;
            a.out_bf16 = c->xg;
            return fp4_moe_gpu_act(&a, s, err);
        }
        return fp4_moe_gpu_gather_rows(c->x, (size_t)p->a_cols * 2, pl->map, pl->pairs, c->xg, s, err);
    case L_GATE_UP: return grouped_gemm(pl, &pl->gu, copy, s, err);
    case L_ACT: {
        fp4_moe_act_args a;
        memset(&a, 0, sizeof a);
        a.src = c->y;
        a.src_cols = 2 * I;
        a.act = (int)p->dims.act;
        a.rows = pl->pairs;
        a.cols = I;
        a.out = w4a4 ? FP4_MOE_QOUT_DEQUANT_BF16 : FP4_MOE_QOUT_BF16;
        a.encode_scale = p->h_encode_scale;
        a.out_bf16 = c->h;
        return fp4_moe_gpu_act(&a, s, err);
    }
    case L_DOWN: return grouped_gemm(pl, &pl->dn, copy, s, err);
    case L_COMBINE:
        return fp4_moe_gpu_combine(c->d, H, pl->row_of_pair, pl->route_w, p->tokens, p->dims.top_k, c->out, s, err);
    }
    return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-cublas-bf16: step %d", step);
}

static fp4_status bf16_run(void *plan_, int copy, void *stream, fp4_err *err)
{
    bf16_plan *pl = (bf16_plan *)plan_;
    const cudaStream_t s = (cudaStream_t)stream;
    fp4_status st = check_copy(pl, copy, err);
    static const int gate_up[] = {L_GATHER, L_GATE_UP}, down[] = {L_GATHER, L_DOWN, L_COMBINE},
                     layer[] = {L_GATHER, L_GATE_UP, L_ACT, L_DOWN, L_COMBINE};
    const int *steps = pl->p->step == FP4_MOE_STEP_GATE_UP ? gate_up : pl->p->step == FP4_MOE_STEP_DOWN ? down : layer;
    const int n = pl->p->step == FP4_MOE_STEP_GATE_UP ? 2 : pl->p->step == FP4_MOE_STEP_DOWN ? 3 : 5;
    for (int i = 0; st == FP4_OK && i < n; i++) st = run_step(pl, steps[i], copy, s, err);
    return st;
}

static fp4_status bf16_read(void *plan_, int copy, float *out, fp4_err *err)
{
    bf16_plan *pl = (bf16_plan *)plan_;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    const bf16_copy *c = &pl->c[copy];
    if (pl->p->step == FP4_MOE_STEP_GATE_UP)
        return fp4_moe_read_grouped_bf16(c->y, pl->pairs, 2 * pl->p->dims.inter, pl->row_of_pair_host, pl->pairs,
                                         out, err);
    return fp4_gpu_read_f32(c->out, (size_t)pl->p->tokens * (size_t)pl->p->dims.hidden, out, err);
}

static const char *bf16_variant(void *plan)
{
    return ((const bf16_plan *)plan)->variant;
}

static int bf16_step_count(void *plan)
{
    return ((const bf16_plan *)plan)->p->step == FP4_MOE_STEP_LAYER ? L_STEPS : 0;
}

static const char *bf16_step_name(void *plan, int step)
{
    const int w4a4 = ((const bf16_plan *)plan)->p->mode == FP4_MOE_W4A4;
    switch (step) {
    case L_GATHER: return w4a4 ? "gather_quant_x" : "gather";
    case L_GATE_UP: return "gate_up";
    case L_ACT: return w4a4 ? "act_quant" : "act";
    case L_DOWN: return "down";
    case L_COMBINE: return "combine";
    }
    return "?";
}

static fp4_status bf16_run_step(void *plan_, int step, int copy, void *stream, fp4_err *err)
{
    bf16_plan *pl = (bf16_plan *)plan_;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    if (pl->p->step != FP4_MOE_STEP_LAYER || step < 0 || step >= L_STEPS)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-cublas-bf16: no step %d", step);
    return run_step(pl, step, copy, (cudaStream_t)stream, err);
}

extern "C" const fp4_moe_backend_ops fp4_moe_backend_cublas_bf16 = {
    FP4_MOE_BACKEND_API_VERSION,                                                  /* api_version */
    "moe-cublas-bf16",                                                            /* name */
    "cublasGemmGroupedBatchedEx bf16, weights dequantized exactly, one group per active expert", /* summary */
    FP4_BACKEND_GPU,       /* flags: exact operands */
    FP4_MATH_BF16_TC,      /* math */
    FP4_MOE_WEIGHTS_BF16,  /* wformat */
    1e-2,                  /* tol_max: fp32 accumulation, one bf16 rounding of D */
    5e-3,                  /* tol_norm */
    bf16_open,             /* open */
    bf16_close,            /* close */
    bf16_supports,         /* supports */
    bf16_prepare,          /* prepare */
    bf16_poison,           /* poison */
    bf16_run,              /* run */
    bf16_read,             /* read_output */
    bf16_release,          /* release */
    bf16_variant,          /* variant */
    bf16_set_warnings,     /* set_warnings */
    bf16_step_count,       /* step_count: the layer's five */
    bf16_step_name,        /* step_name */
    bf16_run_step,         /* run_step */
    NULL,                  /* own_reference: exact operands */
    0.0,                   /* own_tol */
};
