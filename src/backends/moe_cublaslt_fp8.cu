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
 * timed on this plan (blas_tune.h). gate_up and down only: the layer is
 * measured on moe-cublas-bf16 and moe-fp4-sm90. */
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
    uint8_t *x;  /* the input in e4m3 [a_rows, K] */
    uint8_t *xg; /* gathered [P, K] */
    uint16_t *d; /* grouped D [P, N] */
    float *out;  /* down: [T, H] */
} fp8_copy;

/* The layouts and algorithm of one distinct M (an expert's pair count). */
typedef struct fp8_shape {
    int32_t m;
    fp4_lt_gemm g;
    int expert; /* one expert of this M: the tuning runs it */
} fp8_shape;

typedef struct fp8_plan fp8_plan;

/* What fp4_lt_choose_algo runs: shape s's expert on a copy. */
typedef struct fp8_tune_ctx {
    fp8_plan *pl;
    int shape;
} fp8_tune_ctx;

struct fp8_plan {
    fp8_inst *inst;
    const fp4_moe_problem *p;
    int copies;
    int64_t pairs, n, k;          /* the step's GEMM: [M_e, K] x [N, K]^T */
    const fp8_weights *w;         /* gate_up's or down's */
    float dec_a;                  /* the activations' decode scale */
    float *alpha;                 /* [E] */
    int *shape_of;                /* [E] index into shapes, -1 idle */
    fp8_shape *shapes;
    int nshapes;
    cublasLtMatmulDesc_t op;
    int32_t *map, *row_of_pair;   /* device */
    int32_t *row_of_pair_host;
    float *route_w;               /* device [P] */
    fp8_copy *c;
    uint8_t *a8;                  /* host copy 0's e4m3 input (own_reference) */
    int32_t units[256];           /* e4m3 byte -> value in units of 2^-9 */
    char variant[FP4_LT_VARIANT_LEN];
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
    if (p->step == FP4_MOE_STEP_LAYER)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "moe-cublaslt-fp8: gate_up and down only (the layer runs on moe-cublas-bf16 and "
                        "moe-fp4-sm90)");
    const int64_t n = p->step == FP4_MOE_STEP_GATE_UP ? 2 * p->dims.inter : p->dims.hidden;
    if (n % 8)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "moe-cublaslt-fp8: N = %lld is not a multiple of 8 (D's "
                        "leading dimension must be 16 bytes)", (long long)n);
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

static void fp8_release(void *plan_)
{
    fp8_plan *pl = (fp8_plan *)plan_;
    if (!pl) return;
    fp4_warnings *w = pl->inst ? pl->inst->lt->warn : NULL;
    if (pl->c)
        for (int i = 0; i < pl->copies; i++) {
            fp4_gpu_release(pl->c[i].x, "moe-cublaslt-fp8 x", w);
            fp4_gpu_release(pl->c[i].xg, "moe-cublaslt-fp8 gathered x", w);
            fp4_gpu_release(pl->c[i].d, "moe-cublaslt-fp8 d", w);
            fp4_gpu_release(pl->c[i].out, "moe-cublaslt-fp8 out", w);
        }
    free(pl->c);
    for (int i = 0; i < pl->nshapes; i++) fp4_lt_gemm_destroy(&pl->shapes[i].g, w);
    free(pl->shapes);
    if (pl->op) FP4_CUBLAS_CLEANUP(w, cublasLtMatmulDescDestroy(pl->op));
    fp4_gpu_release(pl->map, "moe-cublaslt-fp8 row map", w);
    fp4_gpu_release(pl->row_of_pair, "moe-cublaslt-fp8 pair rows", w);
    fp4_gpu_release(pl->route_w, "moe-cublaslt-fp8 routing weights", w);
    free(pl->row_of_pair_host);
    free(pl->alpha);
    free(pl->shape_of);
    free(pl->a8);
    free(pl);
}

/* Expert e's GEMM on copy `copy` with its shape's algorithm. */
static fp4_status expert_gemm(const fp8_plan *pl, int e, int copy, cudaStream_t s, fp4_err *err)
{
    const fp4_moe_plan *plan = pl->p->plan;
    const int32_t off = plan->expert_offsets[e];
    const fp8_copy *c = &pl->c[copy];
    return fp4_lt_run(pl->inst->lt, &pl->shapes[pl->shape_of[e]].g, pl->op, &pl->alpha[e],
                      c->xg + (size_t)off * (size_t)pl->k, pl->w->w[copy] + (size_t)e * (size_t)pl->n * (size_t)pl->k,
                      c->d + (size_t)off * (size_t)pl->n, s, err);
}

static fp4_status tune_run(void *ctx_, int copy, void *stream, fp4_err *err)
{
    const fp8_tune_ctx *ctx = (const fp8_tune_ctx *)ctx_;
    return expert_gemm(ctx->pl, ctx->pl->shapes[ctx->shape].expert, copy, (cudaStream_t)stream, err);
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
    const int E = p->dims.experts, gate_up = p->step == FP4_MOE_STEP_GATE_UP;
    const int64_t P = p->plan->pairs;
    if (inst->weights_id != p->weights_id) {
        weights_free(&inst->gu, inst->lt->warn);
        weights_free(&inst->dn, inst->lt->warn);
        inst->weights_id = p->weights_id;
    }
    /* only the weights of the steps this plan needs stay: the other step's
     * would hold device memory that the other backends' plans of the case
     * need (moe_backend.h: the live plans of an instance are of one case) */
    weights_free(gate_up ? &inst->dn : &inst->gu, inst->lt->warn);
    fp8_weights *fw = gate_up ? &inst->gu : &inst->dn;
    const fp4_matrix *w = gate_up ? p->weights->gate_up : p->weights->down;
    if ((st = weights_ensure(inst, fw, w, E, copies, err)) != FP4_OK) return st;

    fp8_plan *pl = (fp8_plan *)calloc(1, sizeof *pl);
    if (!pl) return fp4_fail(err, FP4_ERR_NOMEM, "moe-cublaslt-fp8: no host memory");
    pl->inst = inst;
    pl->p = p;
    pl->copies = copies;
    pl->pairs = P;
    pl->n = w[0].rows;
    pl->k = w[0].cols;
    pl->w = fw;
    pl->c = (fp8_copy *)calloc((size_t)copies, sizeof *pl->c);
    pl->alpha = (float *)malloc((size_t)E * sizeof *pl->alpha);
    pl->shape_of = (int *)malloc((size_t)E * sizeof *pl->shape_of);
    pl->shapes = (fp8_shape *)calloc((size_t)E, sizeof *pl->shapes);
    if (!pl->c || !pl->alpha || !pl->shape_of || !pl->shapes) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "moe-cublaslt-fp8: no host memory for the plan");
        goto fail;
    }
    for (int odd = 0; odd < 2 && odd < copies; odd++) {
        float dec = 1.0f;
        if ((st = input_e4m3(p, odd, &host_x[odd], &dec, err)) != FP4_OK) goto fail;
        if (odd == 0) pl->dec_a = dec;
        else if (dec != pl->dec_a) { /* amax is symmetric: the negated input has the same scale */
            st = fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-cublaslt-fp8: odd copies' input is not the negation");
            goto fail;
        }
    }
    if ((st = fp4_moe_row_map(p->plan, gate_up ? p->dims.top_k : 1, 1, &map, &rows, &pl->row_of_pair_host, NULL,
                              err)) != FP4_OK ||
        (st = fp4_gpu_upload((void **)&pl->map, map, (size_t)P * sizeof *map, "moe-cublaslt-fp8 row map", err)) !=
            FP4_OK ||
        (st = fp4_gpu_upload((void **)&pl->row_of_pair, pl->row_of_pair_host, (size_t)P * sizeof(int32_t),
                             "moe-cublaslt-fp8 pair rows", err)) != FP4_OK ||
        (st = fp4_gpu_upload((void **)&pl->route_w, p->routing->weights, (size_t)P * sizeof(float),
                             "moe-cublaslt-fp8 routing weights", err)) != FP4_OK)
        goto fail;
    for (int i = 0; i < copies; i++) {
        fp8_copy *c = &pl->c[i];
        if ((st = fp4_gpu_upload((void **)&c->x, host_x[i & 1], (size_t)p->a_rows * (size_t)p->a_cols,
                                 "moe-cublaslt-fp8 x", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->xg, (size_t)P * (size_t)pl->k, "moe-cublaslt-fp8 gathered x", err)) !=
                FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->d, (size_t)P * (size_t)pl->n * 2, "moe-cublaslt-fp8 d", err)) != FP4_OK)
            goto fail;
        if (!gate_up && (st = fp4_gpu_alloc((void **)&c->out, (size_t)p->tokens * (size_t)pl->n * 4,
                                            "moe-cublaslt-fp8 out", err)) != FP4_OK)
            goto fail;
    }
    /* alphas: the activations' global scale (W4A4) and both decode scales */
    for (int e = 0; e < E; e++) {
        const float a_glob = p->mode == FP4_MOE_W4A4 ? p->a->global_scale : 1.0f;
        pl->alpha[e] = a_glob * w[e].global_scale * pl->dec_a * fw->dec[e];
    }
    if ((st = fp4_lt_desc_create(&pl->op, NULL, NULL, -1, err)) != FP4_OK) goto fail;
    /* one layout set and algorithm per distinct M; the copies gathered first
     * so that tuning runs on real data */
    for (int i = 0; i < copies; i++)
        if ((st = fp4_moe_gpu_gather_rows(pl->c[i].x, (size_t)pl->k, pl->map, P, pl->c[i].xg, 0, err)) != FP4_OK)
            goto fail;
    FP4_CUDA_GOTO(err, st, cudaDeviceSynchronize(), fail);
    {
        for (int e = 0; e < E; e++) {
            const int32_t m = p->plan->expert_counts[e];
            pl->shape_of[e] = -1;
            if (m == 0) continue;
            for (int s = 0; s < pl->nshapes; s++)
                if (pl->shapes[s].m == m) pl->shape_of[e] = s;
            if (pl->shape_of[e] >= 0) continue;
            fp8_shape *sh = &pl->shapes[pl->nshapes];
            const fp4_shape shape = {m, pl->n, pl->k};
            sh->m = m;
            sh->expert = e;
            pl->shape_of[e] = pl->nshapes++;
            fp8_tune_ctx ctx = {pl, pl->shape_of[e]};
            if ((st = fp4_lt_gemm_init(&sh->g, &shape, CUDA_R_8F_E4M3, err)) != FP4_OK ||
                (st = fp4_lt_choose_algo(inst->lt, &sh->g, pl->op, p->tuning, &ctx, copies, tune_run,
                                         "moe-cublaslt-fp8", err)) != FP4_OK)
                goto fail;
        }
        snprintf(pl->variant, sizeof pl->variant, "%d cublasLtMatmul calls, %d distinct M, %s; first: %.100s",
                 p->plan->stats.active_experts, pl->nshapes,
                 p->tuning ? "each M's fastest of the heuristic's (timed)" : "heuristic #1 (untimed)",
                 pl->nshapes ? pl->shapes[0].g.variant : "-");
    }
    /* own_reference: copy 0's operands as the GPU has them */
    pl->a8 = host_x[0];
    host_x[0] = NULL;
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
    if (pl->p->step == FP4_MOE_STEP_GATE_UP)
        return fp4_gpu_poison_bf16(pl->c[copy].d, (size_t)pl->pairs * (size_t)pl->n, (cudaStream_t)stream, err);
    return fp4_moe_gpu_poison_f32(pl->c[copy].out, (size_t)pl->p->tokens * (size_t)pl->n, (cudaStream_t)stream, err);
}

static fp4_status fp8_run(void *plan_, int copy, void *stream, fp4_err *err)
{
    fp8_plan *pl = (fp8_plan *)plan_;
    const cudaStream_t s = (cudaStream_t)stream;
    fp4_status st = check_copy(pl, copy, err);
    const fp8_copy *c = &pl->c[copy];
    if (st == FP4_OK) st = fp4_moe_gpu_gather_rows(c->x, (size_t)pl->k, pl->map, pl->pairs, c->xg, s, err);
    for (int e = 0; st == FP4_OK && e < pl->p->dims.experts; e++)
        if (pl->shape_of[e] >= 0) st = expert_gemm(pl, e, copy, s, err);
    if (st == FP4_OK && pl->p->step == FP4_MOE_STEP_DOWN)
        st = fp4_moe_gpu_combine(c->d, pl->n, pl->row_of_pair, pl->route_w, pl->p->tokens, pl->p->dims.top_k, c->out,
                                 s, err);
    return st;
}

static fp4_status fp8_read(void *plan_, int copy, float *out, fp4_err *err)
{
    fp8_plan *pl = (fp8_plan *)plan_;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    if (pl->p->step == FP4_MOE_STEP_GATE_UP)
        return fp4_moe_read_grouped_bf16(pl->c[copy].d, pl->pairs, pl->n, pl->row_of_pair_host, pl->pairs, out, err);
    return fp4_gpu_read_f32(pl->c[copy].out, (size_t)pl->p->tokens * (size_t)pl->n, out, err);
}

static const char *fp8_variant(void *plan)
{
    return ((const fp8_plan *)plan)->variant;
}

/* Pair p's GEMM output element col from the e4m3 operands of copy 0, exactly
 * (integer sum in units of 2^-18), times its alpha; NaN when the weight row
 * cannot be read back. */
static double pair_element(const fp8_plan *pl, int64_t pair, int64_t col)
{
    const fp4_moe_problem *p = pl->p;
    const int e = p->routing->expert_ids[pair];
    const int64_t arow = p->step == FP4_MOE_STEP_GATE_UP ? pair / p->dims.top_k : pair;
    uint8_t *wrow = (uint8_t *)malloc((size_t)pl->k);
    if (!wrow) return NAN;
    const cudaError_t ce = cudaMemcpy(wrow, pl->w->w[0] + ((size_t)e * (size_t)pl->n + (size_t)col) * (size_t)pl->k,
                                      (size_t)pl->k, cudaMemcpyDeviceToHost);
    if (ce != cudaSuccess) {
        free(wrow);
        return NAN;
    }
    const uint8_t *a = pl->a8 + (size_t)arow * (size_t)pl->k;
    int64_t sum = 0;
    for (int64_t i = 0; i < pl->k; i++) sum += (int64_t)pl->units[a[i]] * pl->units[wrow[i]];
    free(wrow);
    return (double)sum * 0x1p-18 * (double)pl->alpha[e];
}

static double fp8_own_reference(void *plan_, int64_t row, int64_t col)
{
    const fp8_plan *pl = (const fp8_plan *)plan_;
    const fp4_moe_problem *p = pl->p;
    if (col < 0 || col >= pl->n) return NAN;
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
    "cuBLASLt fp8 e4m3 GEMM per active expert in one graph, operands re-quantized (lossy)", /* summary */
    FP4_BACKEND_GPU | FP4_BACKEND_LOSSY, /* flags */
    FP4_MATH_FP8_TC,                     /* math */
    FP4_MOE_WEIGHTS_FP8,                 /* wformat */
    0.15,                 /* tol_max: operands rounded to 4 significant bits (cublaslt-fp8) */
    0.08,                 /* tol_norm */
    fp8_open,             /* open */
    fp8_close,            /* close */
    fp8_supports,         /* supports: gate_up and down */
    fp8_prepare,          /* prepare */
    fp8_poison,           /* poison */
    fp8_run,              /* run */
    fp8_read,             /* read_output */
    fp8_release,          /* release */
    fp8_variant,          /* variant */
    fp8_set_warnings,     /* set_warnings */
    NULL,                 /* step_count */
    NULL,                 /* step_name */
    NULL,                 /* run_step */
    fp8_own_reference,    /* own_reference: the exact product of the e4m3 operands */
    1e-2,                 /* own_tol: fp32 accumulation and a bf16 D, as cublaslt-fp8 */
};
