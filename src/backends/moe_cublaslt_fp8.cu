/* MoE backend "moe-cublaslt-fp8": one cuBLASLt fp8 (e4m3) GEMM per expert that
 * got tokens, all inside one graph (cuBLASLt has no grouped fp8 API here).
 *
 * Operands as cublaslt-fp8 makes them (see cublaslt_fp8.cu): every expert's
 * weight re-quantized to e4m3 with its own per-tensor scale (enc = 448 /
 * amax of the expert, on the device, once per set of weights, kept in the
 * instance while problem->weights_id stays); the activations (the NVFP4
 * input's values in W4A4, the bf16 input in W4A16) re-quantized to e4m3 with
 * one scale over the whole input, in prepare. Both decode scales and the
 * global scales go into each expert's alpha. Lossy: checked loosely against
 * the exact NVFP4 reference and tightly against own_reference, the exact
 * product of its own e4m3 operands.
 *
 * A call: gather the input rows into grouped order (e4m3 bytes), one
 * cublasLtMatmul per active expert (M = its pairs), for down the weighted
 * combine into fp32 [T, H]. Algorithms: per distinct M, the heuristic's first
 * answer, or with problem->tuning the fastest of its first valid answers
 * timed on this plan (blas_tune.h).
 *
 * The layer (W4A16: bf16 x, as an fp8 deployment gets it), with static
 * per-tensor scales: x gathered and quantized to e4m3 on the device (its
 * scale from its amax, in prepare), gate_up, the activation quantized to e4m3
 * (its scale from the largest activation of copies 0 and 1, measured once in
 * prepare: a calibration run), down, the combine. No W4A4 layer: that
 * pipeline quantizes h to NVFP4, which an fp8 layer does not do, and NVFP4's
 * steps turn fp8's few-% differences in h into a different layer.
 * own_reference checks down and the combine exactly from the e4m3 h the
 * device made; gate_up is the end-to-end check's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

extern "C" {
#include "backends/moe_backends.h" /* gives the table below C linkage */
}
#include "backends/blas_common.h"
#include "backends/blas_tune.h"
#include "backends/blaslt_common.h"
#include "backends/moe_gpu.h"
#include "core/gpu.h"

#define MAX_CACHED_COPIES 64
typedef struct fp8_weights {
    int copies;
    uint8_t *w[MAX_CACHED_COPIES]; /* all experts, e4m3 [rows, cols] each */
    float *dec;                    /* host [E]: amax_e / 448 */
} fp8_weights;

typedef struct fp8_inst {
    fp4_lt_inst *lt;
    uint64_t weights_id;
    fp8_weights gu, dn;
} fp8_inst;

typedef struct fp8_copy {
    uint8_t *x;    /* gate_up, down: the input in e4m3 [a_rows, K] */
    uint16_t *x16; /* layer: x in bf16 [T, H] */
    uint8_t *xg;   /* the first GEMM's A, gathered e4m3 [P, K] */
    uint16_t *d;   /* the first GEMM's grouped D [P, N]: gate_up's y, or down's d */
    uint8_t *h8;   /* layer: the activation in e4m3 [P, I], grouped */
    uint16_t *d2;  /* layer: down's grouped D [P, H] */
    float *out;    /* down, layer: [T, H] */
} fp8_copy;

/* The layouts and algorithm of one distinct M (an expert's pair count). */
typedef struct fp8_shape {
    int32_t m;
    fp4_lt_gemm g;
    int expert; /* one expert of this M: the tuning runs it */
} fp8_shape;

/* One GEMM of a plan (the step's, or one of the layer's two): its weights,
 * each expert's alpha and an algorithm per distinct M. */
typedef struct fp8_gemm {
    const fp8_weights *w;
    int64_t n, k;     /* [M_e, K] x [N, K]^T */
    float dec_a;      /* its input's decode scale, any global scale included */
    float *alpha;     /* [E] */
    int *shape_of;    /* [E] index into shapes, -1 idle */
    fp8_shape *shapes;
    int nshapes;
} fp8_gemm;

typedef struct fp8_plan fp8_plan;

/* What fp4_lt_choose_algo runs: GEMM `gemm`'s shape `shape` on a copy. */
typedef struct fp8_tune_ctx {
    fp8_plan *pl;
    int gemm, shape;
} fp8_tune_ctx;

struct fp8_plan {
    fp8_inst *inst;
    const fp4_moe_problem *p;
    int copies;
    int64_t pairs;
    int ngemm;                    /* 1; the layer 2 (gate_up, down) */
    fp8_gemm g[2];
    float enc_x, enc_h;           /* layer: the e4m3 scales of x and h */
    cublasLtMatmulDesc_t op;
    int32_t *map, *row_of_pair;   /* device */
    int32_t *row_of_pair_host;
    float *route_w;               /* device [P] */
    fp8_copy *c;
    uint8_t *a8;                  /* gate_up, down: host copy 0's e4m3 input (own_reference) */
    int32_t units[256];           /* e4m3 byte -> value in units of 2^-9 */
    char variant[2 * FP4_LT_VARIANT_LEN];
};

static void weights_free(fp8_weights *w, fp4_warnings *warn)
{
    for (int i = 0; i < w->copies; i++) fp4_gpu_release(w->w[i], "moe-cublaslt-fp8 weights", warn);
    free(w->dec);
    memset(w, 0, sizeof *w);
}

static void fp8_close(void *inst_)
{
    fp8_inst *inst = (fp8_inst *)inst_;
    if (!inst) return;
    fp4_warnings *w = inst->lt ? inst->lt->warn : NULL;
    weights_free(&inst->gu, w);
    weights_free(&inst->dn, w);
    fp4_lt_close(inst->lt);
    free(inst);
}

static fp4_status fp8_open(void **out, fp4_err *err)
{
    fp4_status st = fp4_gpu_require(8, 9, 0, NULL, NULL, err);
    *out = NULL;
    if (st != FP4_OK) return st;
    fp8_inst *inst = (fp8_inst *)calloc(1, sizeof *inst);
    if (!inst) return fp4_fail(err, FP4_ERR_NOMEM, "moe-cublaslt-fp8: no host memory");
    if ((st = fp4_lt_open(&inst->lt, err)) != FP4_OK) {
        free(inst);
        return st;
    }
    *out = inst;
    return FP4_OK;
}

static void fp8_set_warnings(void *inst, fp4_warnings *w)
{
    fp4_lt_set_warnings(((fp8_inst *)inst)->lt, w);
}

static fp4_status fp8_supports(void *inst, const fp4_moe_problem *p, fp4_err *err)
{
    (void)inst;
    if (p->step == FP4_MOE_STEP_LAYER && p->mode == FP4_MOE_W4A4)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "moe-cublaslt-fp8: the layer in W4A16 only (an fp8 layer quantizes "
                        "bf16 activations to e4m3, not to NVFP4: --mode w4a16)");
    /* D's leading dimension must be 16 bytes: N of every GEMM the step runs */
    const int64_t n_gu = 2 * p->dims.inter, n_dn = p->dims.hidden;
    for (int i = 0; i < 2; i++) {
        const int64_t n = i ? n_dn : n_gu;
        if ((i ? p->step == FP4_MOE_STEP_GATE_UP : p->step == FP4_MOE_STEP_DOWN) || n % 8 == 0) continue;
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "moe-cublaslt-fp8: N = %lld is not a multiple of 8 (D's "
                        "leading dimension must be 16 bytes)", (long long)n);
    }
    return FP4_OK;
}

static fp4_status weights_ensure(fp8_inst *inst, fp8_weights *fw, const fp4_matrix *w, int experts, int copies,
                                 fp4_err *err)
{
    const size_t bytes = (size_t)experts * (size_t)w[0].rows * (size_t)w[0].cols;
    fp4_status st;
    if (copies > MAX_CACHED_COPIES)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-cublaslt-fp8: %d copies, at most %d", copies,
                        MAX_CACHED_COPIES);
    if (fw->copies == 0) {
        if (!(fw->dec = (float *)malloc((size_t)experts * sizeof *fw->dec)))
            return fp4_fail(err, FP4_ERR_NOMEM, "moe-cublaslt-fp8: no host memory");
        if ((st = fp4_gpu_alloc((void **)&fw->w[0], bytes, "moe-cublaslt-fp8 weights", err)) != FP4_OK) {
            weights_free(fw, inst->lt->warn);
            return st;
        }
        fw->copies = 1;
        if ((st = fp4_moe_gpu_weights_e4m3(w, experts, fw->w[0], fw->dec, err)) != FP4_OK) {
            weights_free(fw, inst->lt->warn);
            return st;
        }
    }
    while (fw->copies < copies) {
        uint8_t *dst = NULL;
        if ((st = fp4_gpu_alloc((void **)&dst, bytes, "moe-cublaslt-fp8 weights", err)) != FP4_OK) return st;
        fw->w[fw->copies++] = dst;
        FP4_CUDA_TRY(err, cudaMemcpy(dst, fw->w[0], bytes, cudaMemcpyDeviceToDevice));
    }
    /* the copies run on the legacy stream, the timed calls on a non-blocking one */
    FP4_CUDA_TRY(err, cudaDeviceSynchronize());
    return FP4_OK;
}

/* The input [rows, cols] as floats: the NVFP4's e2m1 * scale (W4A4, no
 * global scale) or the bf16 values; then e4m3 with enc = 448 / amax over the
 * whole input, *dec = amax / 448 (cublaslt-fp8's re-quantization). */
static fp4_status input_e4m3(const fp4_moe_problem *p, int copy, uint8_t **out, float *dec, fp4_err *err)
{
    const size_t n = (size_t)p->a_rows * (size_t)p->a_cols;
    float *v = (float *)malloc(n * sizeof *v);
    uint8_t *q = (uint8_t *)malloc(n);
    *out = NULL;
    if (!v || !q) {
        free(v);
        free(q);
        return fp4_fail(err, FP4_ERR_NOMEM, "moe-cublaslt-fp8: no host memory for the input");
    }
    if (p->mode == FP4_MOE_W4A4) {
        const fp4_matrix *a = fp4_moe_problem_a(p, copy);
        for (size_t i = 0; i < n; i++)
            v[i] = fp4_matrix_get(a, (int64_t)(i / (size_t)p->a_cols), (int64_t)(i % (size_t)p->a_cols));
    } else {
        const uint16_t *x = fp4_moe_problem_a_bf16(p, copy);
        for (size_t i = 0; i < n; i++) v[i] = fp4_bf16_to_float(x[i]);
    }
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(v[i]));
    const float enc = amax > 0.0f ? FP4_E4M3_MAX / amax : 1.0f;
    for (size_t i = 0; i < n; i++) q[i] = fp4_e4m3_encode(v[i] * enc);
    *dec = amax > 0.0f ? amax / FP4_E4M3_MAX : 1.0f;
    free(v);
    *out = q;
    return FP4_OK;
}

static void gemm_free(fp8_gemm *g, fp4_warnings *w)
{
    for (int i = 0; i < g->nshapes; i++) fp4_lt_gemm_destroy(&g->shapes[i].g, w);
    free(g->shapes);
    free(g->alpha);
    free(g->shape_of);
}

static void fp8_release(void *plan_)
{
    fp8_plan *pl = (fp8_plan *)plan_;
    if (!pl) return;
    fp4_warnings *w = pl->inst ? pl->inst->lt->warn : NULL;
    if (pl->c)
        for (int i = 0; i < pl->copies; i++) {
            fp4_gpu_release(pl->c[i].x, "moe-cublaslt-fp8 x", w);
            fp4_gpu_release(pl->c[i].x16, "moe-cublaslt-fp8 bf16 x", w);
            fp4_gpu_release(pl->c[i].xg, "moe-cublaslt-fp8 gathered x", w);
            fp4_gpu_release(pl->c[i].d, "moe-cublaslt-fp8 d", w);
            fp4_gpu_release(pl->c[i].h8, "moe-cublaslt-fp8 h", w);
            fp4_gpu_release(pl->c[i].d2, "moe-cublaslt-fp8 down d", w);
            fp4_gpu_release(pl->c[i].out, "moe-cublaslt-fp8 out", w);
        }
    free(pl->c);
    for (int i = 0; i < 2; i++) gemm_free(&pl->g[i], w);
    if (pl->op) FP4_CUBLAS_CLEANUP(w, cublasLtMatmulDescDestroy(pl->op));
    fp4_gpu_release(pl->map, "moe-cublaslt-fp8 row map", w);
    fp4_gpu_release(pl->row_of_pair, "moe-cublaslt-fp8 pair rows", w);
    fp4_gpu_release(pl->route_w, "moe-cublaslt-fp8 routing weights", w);
    free(pl->row_of_pair_host);
    free(pl->a8);
    free(pl);
}

/* Expert e's GEMM of the plan's GEMM gi on copy `copy` with its shape's
 * algorithm: the first GEMM reads xg and writes d, the layer's down reads h8
 * and writes d2. */
static fp4_status expert_gemm(const fp8_plan *pl, int gi, int e, int copy, cudaStream_t s, fp4_err *err)
{
    const fp8_gemm *g = &pl->g[gi];
    const size_t off = (size_t)pl->p->plan->expert_offsets[e];
    const fp8_copy *c = &pl->c[copy];
    const uint8_t *a = gi == 0 ? c->xg : c->h8;
    uint16_t *d = gi == 0 ? c->d : c->d2;
    return fp4_lt_run(pl->inst->lt, &g->shapes[g->shape_of[e]].g, pl->op, &g->alpha[e], a + off * (size_t)g->k,
                      g->w->w[copy] + (size_t)e * (size_t)g->n * (size_t)g->k, d + off * (size_t)g->n, s, err);
}

/* Every active expert's GEMM gi on copy `copy`. */
static fp4_status gemm_run(const fp8_plan *pl, int gi, int copy, cudaStream_t s, fp4_err *err)
{
    fp4_status st = FP4_OK;
    for (int e = 0; st == FP4_OK && e < pl->p->dims.experts; e++)
        if (pl->g[gi].shape_of[e] >= 0) st = expert_gemm(pl, gi, e, copy, s, err);
    return st;
}

static fp4_status tune_run(void *ctx_, int copy, void *stream, fp4_err *err)
{
    const fp8_tune_ctx *ctx = (const fp8_tune_ctx *)ctx_;
    const fp8_gemm *g = &ctx->pl->g[ctx->gemm];
    return expert_gemm(ctx->pl, ctx->gemm, g->shapes[ctx->shape].expert, copy, (cudaStream_t)stream, err);
}

/* GEMM gi's host arrays, its alphas (dec_a, the weights' global scales and
 * decode scales), and the layouts and algorithm of each distinct M, tuned on
 * the copies' current inputs (which must be in place). */
static fp4_status gemm_setup(fp8_plan *pl, int gi, const fp4_matrix *w, fp4_err *err)
{
    const fp4_moe_problem *p = pl->p;
    const int E = p->dims.experts;
    fp8_gemm *g = &pl->g[gi];
    g->alpha = (float *)malloc((size_t)E * sizeof *g->alpha);
    g->shape_of = (int *)malloc((size_t)E * sizeof *g->shape_of);
    g->shapes = (fp8_shape *)calloc((size_t)E, sizeof *g->shapes);
    if (!g->alpha || !g->shape_of || !g->shapes)
        return fp4_fail(err, FP4_ERR_NOMEM, "moe-cublaslt-fp8: no host memory for the plan");
    for (int e = 0; e < E; e++) g->alpha[e] = g->dec_a * w[e].global_scale * g->w->dec[e];
    for (int e = 0; e < E; e++) {
        const int32_t m = p->plan->expert_counts[e];
        g->shape_of[e] = -1;
        if (m == 0) continue;
        for (int s = 0; s < g->nshapes; s++)
            if (g->shapes[s].m == m) g->shape_of[e] = s;
        if (g->shape_of[e] >= 0) continue;
        fp8_shape *sh = &g->shapes[g->nshapes];
        const fp4_shape shape = {m, g->n, g->k};
        sh->m = m;
        sh->expert = e;
        g->shape_of[e] = g->nshapes++;
        fp8_tune_ctx ctx = {pl, gi, g->shape_of[e]};
        fp4_status st;
        if ((st = fp4_lt_gemm_init(&sh->g, &shape, CUDA_R_8F_E4M3, err)) != FP4_OK ||
            (st = fp4_lt_choose_algo(pl->inst->lt, &sh->g, pl->op, p->tuning, &ctx, pl->copies, tune_run,
                                     "moe-cublaslt-fp8", err)) != FP4_OK)
            return st;
    }
    return FP4_OK;
}

/* The layer's steps, in order. */
enum { L_GATHER_QUANT, L_GATE_UP, L_ACT_QUANT, L_DOWN, L_COMBINE, L_STEPS };

/* The layer's activation arguments of copy `copy`: y -> h8, or with
 * calibrate the amax of the activation into *amax. */
static fp4_moe_act_args act_args(const fp8_plan *pl, int copy, unsigned *amax)
{
    const fp4_moe_problem *p = pl->p;
    fp4_moe_act_args a;
    memset(&a, 0, sizeof a);
    a.src = pl->c[copy].d;
    a.src_cols = 2 * p->dims.inter;
    a.act = (int)p->dims.act;
    a.rows = pl->pairs;
    a.cols = p->dims.inter;
    if (amax) {
        a.out = FP4_MOE_QOUT_AMAX;
        a.amax = amax;
        return a;
    }
    a.out = FP4_MOE_QOUT_E4M3;
    a.e4m3_enc = pl->enc_h;
    a.out_e4m3 = pl->c[copy].h8;
    return a;
}

static fp4_status layer_step(const fp8_plan *pl, int step, int copy, cudaStream_t s, fp4_err *err)
{
    const fp4_moe_problem *p = pl->p;
    const fp8_copy *c = &pl->c[copy];
    switch (step) {
    case L_GATHER_QUANT: { /* x -> e4m3, gathered into grouped order */
        fp4_moe_act_args a;
        memset(&a, 0, sizeof a);
        a.src = c->x16;
        a.src_cols = p->dims.hidden;
        a.map = pl->map;
        a.act = -1;
        a.rows = pl->pairs;
        a.cols = p->dims.hidden;
        a.out = FP4_MOE_QOUT_E4M3;
        a.e4m3_enc = pl->enc_x;
        a.out_e4m3 = c->xg;
        return fp4_moe_gpu_act(&a, s, err);
    }
    case L_GATE_UP: return gemm_run(pl, 0, copy, s, err);
    case L_ACT_QUANT: {
        const fp4_moe_act_args a = act_args(pl, copy, NULL);
        return fp4_moe_gpu_act(&a, s, err);
    }
    case L_DOWN: return gemm_run(pl, 1, copy, s, err);
    case L_COMBINE:
        return fp4_moe_gpu_combine(c->d2, p->dims.hidden, pl->row_of_pair, pl->route_w, p->tokens, p->dims.top_k,
                                   c->out, s, err);
    }
    return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-cublaslt-fp8: no layer step %d", step);
}

/* The largest |activation| of copies 0 and 1 (their gate_up outputs in
 * place), for h's static e4m3 scale. */
static fp4_status calibrate_h(fp8_plan *pl, float *amax_out, fp4_err *err)
{
    unsigned *amax = NULL, host = 0;
    fp4_status st = fp4_gpu_alloc((void **)&amax, sizeof *amax, "moe-cublaslt-fp8 amax", err);
    if (st != FP4_OK) return st;
    FP4_CUDA_GOTO(err, st, cudaMemset(amax, 0, sizeof *amax), out);
    for (int i = 0; st == FP4_OK && i < 2 && i < pl->copies; i++) {
        const fp4_moe_act_args a = act_args(pl, i, amax);
        st = fp4_moe_gpu_act(&a, 0, err);
    }
    if (st == FP4_OK) FP4_CUDA_GOTO(err, st, cudaMemcpy(&host, amax, sizeof host, cudaMemcpyDeviceToHost), out);
    memcpy(amax_out, &host, sizeof *amax_out);
out:
    fp4_gpu_release(amax, "moe-cublaslt-fp8 amax", pl->inst->lt->warn);
    return st;
}

/* The layer's copies and GEMMs: x's e4m3 scale, the gathered inputs, gate_up
 * tuned and run, h's scale calibrated, h, down tuned. */
static fp4_status layer_prepare(fp8_plan *pl, fp4_err *err)
{
    const fp4_moe_problem *p = pl->p;
    const int64_t H = p->dims.hidden, I = p->dims.inter, P = pl->pairs;
    fp4_status st = FP4_OK;
    float amax = 0.0f; /* x's; the negated copies share it */
    for (size_t i = 0; i < (size_t)p->a_rows * (size_t)p->a_cols; i++)
        amax = fmaxf(amax, fabsf(fp4_bf16_to_float(p->a_bf16[i])));
    pl->enc_x = amax > 0.0f ? FP4_E4M3_MAX / amax : 1.0f;
    pl->g[0].dec_a = amax > 0.0f ? amax / FP4_E4M3_MAX : 1.0f;
    for (int i = 0; i < pl->copies; i++) {
        fp8_copy *c = &pl->c[i];
        if ((st = fp4_gpu_upload((void **)&c->x16, fp4_moe_problem_a_bf16(p, i), (size_t)p->tokens * (size_t)H * 2,
                                 "moe-cublaslt-fp8 bf16 x", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->xg, (size_t)P * (size_t)H, "moe-cublaslt-fp8 gathered x", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->d, (size_t)P * (size_t)(2 * I) * 2, "moe-cublaslt-fp8 d", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->h8, (size_t)P * (size_t)I, "moe-cublaslt-fp8 h", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->d2, (size_t)P * (size_t)H * 2, "moe-cublaslt-fp8 down d", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->out, (size_t)p->tokens * (size_t)H * 4, "moe-cublaslt-fp8 out", err)) !=
                FP4_OK ||
            (st = layer_step(pl, L_GATHER_QUANT, i, 0, err)) != FP4_OK)
            return st;
    }
    FP4_CUDA_TRY(err, cudaDeviceSynchronize());
    if ((st = gemm_setup(pl, 0, p->weights->gate_up, err)) != FP4_OK) return st;
    for (int i = 0; i < pl->copies; i++)
        if ((st = layer_step(pl, L_GATE_UP, i, 0, err)) != FP4_OK) return st;
    if ((st = calibrate_h(pl, &amax, err)) != FP4_OK) return st;
    if (!isfinite(amax))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-cublaslt-fp8: the activation's largest magnitude is %g: "
                        "no e4m3 scale fits it", (double)amax);
    pl->enc_h = amax > 0.0f ? FP4_E4M3_MAX / amax : 1.0f;
    pl->g[1].dec_a = amax > 0.0f ? amax / FP4_E4M3_MAX : 1.0f;
    for (int i = 0; i < pl->copies; i++)
        if ((st = layer_step(pl, L_ACT_QUANT, i, 0, err)) != FP4_OK) return st;
    FP4_CUDA_TRY(err, cudaDeviceSynchronize());
    return gemm_setup(pl, 1, p->weights->down, err);
}

/* gate_up or down: the input re-quantized on the host, uploaded, gathered;
 * the GEMM tuned on it. */
static fp4_status step_prepare(fp8_plan *pl, const fp4_matrix *w, uint8_t *host_x[2], fp4_err *err)
{
    const fp4_moe_problem *p = pl->p;
    fp4_status st;
    float dec_a = 1.0f;
    for (int odd = 0; odd < 2 && odd < pl->copies; odd++) {
        float dec = 1.0f;
        if ((st = input_e4m3(p, odd, &host_x[odd], &dec, err)) != FP4_OK) return st;
        if (odd == 0) dec_a = dec;
        else if (dec != dec_a) /* amax is symmetric: the negated input has the same scale */
            return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-cublaslt-fp8: odd copies' input is not the negation");
    }
    /* the activations' global scale (W4A4) */
    pl->g[0].dec_a = dec_a * (p->mode == FP4_MOE_W4A4 ? p->a->global_scale : 1.0f);
    for (int i = 0; i < pl->copies; i++) {
        fp8_copy *c = &pl->c[i];
        if ((st = fp4_gpu_upload((void **)&c->x, host_x[i & 1], (size_t)p->a_rows * (size_t)p->a_cols,
                                 "moe-cublaslt-fp8 x", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->xg, (size_t)pl->pairs * (size_t)pl->g[0].k, "moe-cublaslt-fp8 gathered x",
                                err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->d, (size_t)pl->pairs * (size_t)pl->g[0].n * 2, "moe-cublaslt-fp8 d",
                                err)) != FP4_OK)
            return st;
        if (p->step == FP4_MOE_STEP_DOWN &&
            (st = fp4_gpu_alloc((void **)&c->out, (size_t)p->tokens * (size_t)pl->g[0].n * 4, "moe-cublaslt-fp8 out",
                                err)) != FP4_OK)
            return st;
        /* gathered first, so that tuning runs on real data */
        if ((st = fp4_moe_gpu_gather_rows(c->x, (size_t)pl->g[0].k, pl->map, pl->pairs, c->xg, 0, err)) != FP4_OK)
            return st;
    }
    FP4_CUDA_TRY(err, cudaDeviceSynchronize());
    if ((st = gemm_setup(pl, 0, w, err)) != FP4_OK) return st;
    /* own_reference: copy 0's operands as the GPU has them */
    pl->a8 = host_x[0];
    host_x[0] = NULL;
    return FP4_OK;
}

static fp4_status fp8_prepare(void *inst_, const fp4_moe_problem *p, int copies, void **out, fp4_err *err)
{
    fp8_inst *inst = (fp8_inst *)inst_;
    fp4_status st;
    uint8_t *host_x[2] = {NULL, NULL};
    int32_t *map = NULL;
    int64_t rows = 0;
    *out = NULL;
    if ((st = fp4_moe_problem_check(p, copies, err)) != FP4_OK) return st;
    if ((st = fp8_supports(inst, p, err)) != FP4_OK) return st;
    const int E = p->dims.experts, layer = p->step == FP4_MOE_STEP_LAYER;
    const int need_gu = p->step != FP4_MOE_STEP_DOWN, need_dn = p->step != FP4_MOE_STEP_GATE_UP;
    const int64_t P = p->plan->pairs;
    if (inst->weights_id != p->weights_id) {
        weights_free(&inst->gu, inst->lt->warn);
        weights_free(&inst->dn, inst->lt->warn);
        inst->weights_id = p->weights_id;
    }
    /* only the weights of the steps this plan needs stay: the other step's
     * would hold device memory that the other backends' plans of the case
     * need (moe_backend.h: the live plans of an instance are of one case) */
    if (!need_gu) weights_free(&inst->gu, inst->lt->warn);
    if (!need_dn) weights_free(&inst->dn, inst->lt->warn);
    if (need_gu && (st = weights_ensure(inst, &inst->gu, p->weights->gate_up, E, copies, err)) != FP4_OK) return st;
    if (need_dn && (st = weights_ensure(inst, &inst->dn, p->weights->down, E, copies, err)) != FP4_OK) return st;

    fp8_plan *pl = (fp8_plan *)calloc(1, sizeof *pl);
    if (!pl) return fp4_fail(err, FP4_ERR_NOMEM, "moe-cublaslt-fp8: no host memory");
    pl->inst = inst;
    pl->p = p;
    pl->copies = copies;
    pl->pairs = P;
    pl->ngemm = layer ? 2 : 1;
    for (int gi = 0; gi < pl->ngemm; gi++) {
        const int down = gi == 1 || p->step == FP4_MOE_STEP_DOWN;
        const fp4_matrix *w = down ? p->weights->down : p->weights->gate_up;
        pl->g[gi].w = down ? &inst->dn : &inst->gu;
        pl->g[gi].n = w[0].rows;
        pl->g[gi].k = w[0].cols;
    }
    if (!(pl->c = (fp8_copy *)calloc((size_t)copies, sizeof *pl->c))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "moe-cublaslt-fp8: no host memory for the plan");
        goto fail;
    }
    /* grouped row -> input row: tokens (gate_up, layer) or pairs (down) */
    if ((st = fp4_moe_row_map(p->plan, p->step == FP4_MOE_STEP_DOWN ? 1 : p->dims.top_k, 1, &map, &rows,
                              &pl->row_of_pair_host, NULL, err)) != FP4_OK ||
        (st = fp4_gpu_upload((void **)&pl->map, map, (size_t)P * sizeof *map, "moe-cublaslt-fp8 row map", err)) !=
            FP4_OK ||
        (st = fp4_gpu_upload((void **)&pl->row_of_pair, pl->row_of_pair_host, (size_t)P * sizeof(int32_t),
                             "moe-cublaslt-fp8 pair rows", err)) != FP4_OK ||
        (st = fp4_gpu_upload((void **)&pl->route_w, p->routing->weights, (size_t)P * sizeof(float),
                             "moe-cublaslt-fp8 routing weights", err)) != FP4_OK ||
        (st = fp4_lt_desc_create(&pl->op, NULL, NULL, -1, err)) != FP4_OK)
        goto fail;
    st = layer ? layer_prepare(pl, err)
               : step_prepare(pl, p->step == FP4_MOE_STEP_DOWN ? p->weights->down : p->weights->gate_up, host_x, err);
    if (st != FP4_OK) goto fail;
    {
        const char *how = p->tuning ? "each M's fastest of the heuristic's (timed)" : "heuristic #1 (untimed)";
        if (layer)
            snprintf(pl->variant, sizeof pl->variant,
                     "2 x %d cublasLtMatmul calls, %d + %d distinct M, %s; x and h e4m3, static per-tensor "
                     "scales; gate_up first: %.100s",
                     p->plan->stats.active_experts, pl->g[0].nshapes, pl->g[1].nshapes, how,
                     pl->g[0].nshapes ? pl->g[0].shapes[0].g.variant : "-");
        else
            snprintf(pl->variant, sizeof pl->variant, "%d cublasLtMatmul calls, %d distinct M, %s; first: %.100s",
                     p->plan->stats.active_experts, pl->g[0].nshapes, how,
                     pl->g[0].nshapes ? pl->g[0].shapes[0].g.variant : "-");
    }
    for (int v = 0; v < 256; v++) {
        const float x = fp4_e4m3_decode((uint8_t)v);
        pl->units[v] = isnan(x) ? 0 : (int32_t)(x * 0x1p9f);
    }
    free(map);
    free(host_x[1]);
    *out = pl;
    return FP4_OK;
fail:
    free(map);
    free(host_x[0]);
    free(host_x[1]);
    fp8_release(pl);
    return st;
}

static fp4_status check_copy(const fp8_plan *pl, int copy, fp4_err *err)
{
    if (copy < 0 || copy >= pl->copies)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-cublaslt-fp8: copy %d of %d", copy, pl->copies);
    return FP4_OK;
}

static fp4_status fp8_poison(void *plan_, int copy, void *stream, fp4_err *err)
{
    fp8_plan *pl = (fp8_plan *)plan_;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    const int64_t n = pl->g[pl->ngemm - 1].n;
    if (pl->p->step == FP4_MOE_STEP_GATE_UP)
        return fp4_gpu_poison_bf16(pl->c[copy].d, (size_t)pl->pairs * (size_t)n, (cudaStream_t)stream, err);
    return fp4_moe_gpu_poison_f32(pl->c[copy].out, (size_t)pl->p->tokens * (size_t)n, (cudaStream_t)stream, err);
}

static fp4_status fp8_run(void *plan_, int copy, void *stream, fp4_err *err)
{
    fp8_plan *pl = (fp8_plan *)plan_;
    const cudaStream_t s = (cudaStream_t)stream;
    fp4_status st = check_copy(pl, copy, err);
    const fp8_copy *c = &pl->c[copy];
    if (pl->p->step == FP4_MOE_STEP_LAYER) {
        for (int i = 0; st == FP4_OK && i < L_STEPS; i++) st = layer_step(pl, i, copy, s, err);
        return st;
    }
    const fp8_gemm *g = &pl->g[0];
    if (st == FP4_OK) st = fp4_moe_gpu_gather_rows(c->x, (size_t)g->k, pl->map, pl->pairs, c->xg, s, err);
    if (st == FP4_OK) st = gemm_run(pl, 0, copy, s, err);
    if (st == FP4_OK && pl->p->step == FP4_MOE_STEP_DOWN)
        st = fp4_moe_gpu_combine(c->d, g->n, pl->row_of_pair, pl->route_w, pl->p->tokens, pl->p->dims.top_k, c->out,
                                 s, err);
    return st;
}

static fp4_status fp8_read(void *plan_, int copy, float *out, fp4_err *err)
{
    fp8_plan *pl = (fp8_plan *)plan_;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    const int64_t n = pl->g[pl->ngemm - 1].n;
    if (pl->p->step == FP4_MOE_STEP_GATE_UP)
        return fp4_moe_read_grouped_bf16(pl->c[copy].d, pl->pairs, n, pl->row_of_pair_host, pl->pairs, out, err);
    return fp4_gpu_read_f32(pl->c[copy].out, (size_t)pl->p->tokens * (size_t)n, out, err);
}

static const char *fp8_variant(void *plan)
{
    return ((const fp8_plan *)plan)->variant;
}

static int fp8_step_count(void *plan)
{
    return ((const fp8_plan *)plan)->p->step == FP4_MOE_STEP_LAYER ? L_STEPS : 0;
}

static const char *fp8_step_name(void *plan, int step)
{
    (void)plan;
    static const char *const names[L_STEPS] = {"gather_quant_x", "gate_up", "act_quant", "down", "combine"};
    return step >= 0 && step < L_STEPS ? names[step] : "?";
}

static fp4_status fp8_run_step(void *plan_, int step, int copy, void *stream, fp4_err *err)
{
    fp8_plan *pl = (fp8_plan *)plan_;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    if (pl->p->step != FP4_MOE_STEP_LAYER || step < 0 || step >= L_STEPS)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-cublaslt-fp8: no step %d", step);
    return layer_step(pl, step, copy, (cudaStream_t)stream, err);
}

/* Pair p's output element col of the plan's last GEMM from the e4m3 operands
 * of copy 0, exactly (integer sum in units of 2^-18), times its alpha. The
 * input row: the host's e4m3 input (gate_up, down), or the layer's h as the
 * device made it. NaN when a row cannot be read back. */
static double pair_element(const fp8_plan *pl, int64_t pair, int64_t col)
{
    const fp4_moe_problem *p = pl->p;
    const fp8_gemm *g = &pl->g[pl->ngemm - 1];
    const int e = p->routing->expert_ids[pair];
    uint8_t *rows = (uint8_t *)malloc(2 * (size_t)g->k); /* the weight row, then the layer's h row */
    if (!rows) return NAN;
    const uint8_t *w = rows, *a = rows + g->k;
    cudaError_t ce = cudaMemcpy(rows, g->w->w[0] + ((size_t)e * (size_t)g->n + (size_t)col) * (size_t)g->k,
                                (size_t)g->k, cudaMemcpyDeviceToHost);
    if (p->step != FP4_MOE_STEP_LAYER)
        a = pl->a8 + (size_t)(p->step == FP4_MOE_STEP_GATE_UP ? pair / p->dims.top_k : pair) * (size_t)g->k;
    else if (ce == cudaSuccess)
        ce = cudaMemcpy(rows + g->k, pl->c[0].h8 + (size_t)pl->row_of_pair_host[pair] * (size_t)g->k, (size_t)g->k,
                        cudaMemcpyDeviceToHost);
    int64_t sum = 0;
    for (int64_t i = 0; ce == cudaSuccess && i < g->k; i++) sum += (int64_t)pl->units[a[i]] * pl->units[w[i]];
    free(rows);
    return ce == cudaSuccess ? (double)sum * 0x1p-18 * (double)g->alpha[e] : NAN;
}

static double fp8_own_reference(void *plan_, int64_t row, int64_t col)
{
    const fp8_plan *pl = (const fp8_plan *)plan_;
    const fp4_moe_problem *p = pl->p;
    if (col < 0 || col >= pl->g[pl->ngemm - 1].n) return NAN;
    if (p->step == FP4_MOE_STEP_GATE_UP) return row >= 0 && row < pl->pairs ? pair_element(pl, row, col) : NAN;
    if (row < 0 || row >= p->tokens) return NAN;
    double acc = 0.0; /* the combine of the token's slots */
    for (int j = 0; j < p->dims.top_k; j++) {
        const int64_t pair = row * p->dims.top_k + j;
        acc += (double)p->routing->weights[pair] * pair_element(pl, pair, col);
    }
    return acc;
}

extern "C" const fp4_moe_backend_ops fp4_moe_backend_cublaslt_fp8 = {
    FP4_MOE_BACKEND_API_VERSION,                                                 /* api_version */
    "moe-cublaslt-fp8",                                                          /* name */
    "cuBLASLt fp8 e4m3 GEMM per active expert in one graph, operands re-quantized (lossy; the layer: W4A16)", /* summary */
    FP4_BACKEND_GPU | FP4_BACKEND_LOSSY, /* flags */
    FP4_MATH_FP8_TC,                     /* math */
    FP4_MOE_WEIGHTS_FP8,                 /* wformat */
    0.15,                 /* tol_max: operands rounded to 4 significant bits (cublaslt-fp8) */
    0.08,                 /* tol_norm */
    fp8_open,             /* open */
    fp8_close,            /* close */
    fp8_supports,         /* supports */
    fp8_prepare,          /* prepare */
    fp8_poison,           /* poison */
    fp8_run,              /* run */
    fp8_read,             /* read_output */
    fp8_release,          /* release */
    fp8_variant,          /* variant */
    fp8_set_warnings,     /* set_warnings */
    fp8_step_count,       /* step_count: the layer's five */
    fp8_step_name,        /* step_name */
    fp8_run_step,         /* run_step */
    fp8_own_reference,    /* own_reference: the exact product of the e4m3 operands (layer: of down) */
    1e-2,                 /* own_tol: fp32 accumulation and a bf16 D, as cublaslt-fp8 */
};
