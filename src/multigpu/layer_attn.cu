/* fp4bench layer --attention: the attention projections tensor parallel
 * (docs/PARALLEL.md, fp4_tp_attn_plan): rank r quantizes x (the GPU
 * quantizer, swizzled scales), multiplies it by its rows of the fused QKV
 * weight, and its K slice of the attention output by its K slice of O (both
 * dense NVFP4 GEMMs of fp4-sm90, the kernel its rule picks for the shape);
 * the O partials [T, H] are summed by a bf16 all-reduce. Attention itself
 * (softmax(QK^T)V) is not modelled: the O projection's input is a fixed
 * NVFP4 matrix standing for its output. */
#ifdef FP4_HAVE_NCCL

#include <stdlib.h>
#include <string.h>

#include "kernels/fp4_quantize.h"
#include "kernels/sm90/fp4_sm90.h"
#include "multigpu/layer_gpu.h"

typedef struct attn_gemm {
    int kernel;
    int64_t n, k;
    uint8_t *b_codes, *b_sf;
    float alpha;
    /* Its own workspace: decode and mid keep arrival counters at offsets that
     * depend on the GEMM's size, so two GEMMs sharing one would read each
     * other's data as counters. */
    void *ws;
    size_t ws_bytes;
} attn_gemm;

typedef struct attn_state {
    int num_sms;
    attn_gemm qkv, o;
    uint16_t *x;              /* bf16 [T, H] */
    uint8_t *x_codes, *x_sf;  /* quantized on the device, swizzled scales */
    uint8_t *a_codes, *a_sf;  /* the O projection's input slice, swizzled scales */
    uint16_t *qkv_out;        /* [T, qkv.n] */
    uint16_t *partial;        /* [T, H] */
    uint16_t *out;            /* [T, H] all-reduced */
} attn_state;

/* The kernel for (m, n, k): FP4_SM90_KERNEL's when it fits, else the rule's. */
static int pick_kernel(int64_t m, int64_t n, int64_t k, int num_sms)
{
    const int forced = fp4_sm90_forced();
    if (forced > 0 && fp4_sm90_kernel_fits(forced, m, n, k, num_sms)) return forced;
    return fp4_sm90_choose(m, n, k, num_sms);
}

/* Pack b for the GEMM's kernel and upload it. */
static fp4_status upload_b(nccl_rank *r, attn_gemm *g, const fp4_matrix *b, int64_t m, int num_sms, fp4_err *err)
{
    size_t cb, sb;
    uint8_t *codes = NULL, *scales = NULL;
    fp4_status st;
    g->n = b->rows;
    g->k = b->cols;
    g->kernel = pick_kernel(m, g->n, g->k, num_sms);
    if (g->kernel == FP4_SM90_AUTO)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "rank %d: no fp4-sm90 kernel runs %lldx%lldx%lld", r->rank,
                        (long long)m, (long long)g->n, (long long)g->k);
    cb = fp4_sm90_packed_b_codes_size(g->kernel, g->n, g->k);
    sb = fp4_sm90_packed_b_scales_size(g->kernel, g->n, g->k);
    codes = (uint8_t *)malloc(cb ? cb : 1);
    scales = (uint8_t *)malloc(sb ? sb : 1);
    if (!codes || !scales) st = fp4_fail(err, FP4_ERR_NOMEM, "rank %d: no memory to pack a weight", r->rank);
    else st = fp4_sm90_pack_b(g->kernel, b, codes, scales, err);
    if (st == FP4_OK) st = layer_upload(r, (void **)&g->b_codes, codes, cb, err);
    if (st == FP4_OK) st = layer_upload(r, (void **)&g->b_sf, scales, sb, err);
    free(codes);
    free(scales);
    return st;
}

static fp4_status attn_setup(layer_job *j, nccl_rank *r, void *state, fp4_err *err)
{
    attn_state *s = (attn_state *)state;
    const layer_case *lc = j->lc;
    const int64_t T = lc->tokens, H = lc->attn.dims.hidden;
    fp4_tp_attn_slices sl;
    fp4_matrix qkv = {0}, o = {0}, a = {0};
    uint8_t *a_sf = NULL;
    fp4_status st;
    NCCL_RANK_CUDA(err, st, r, cudaDeviceGetAttribute(&s->num_sms, cudaDevAttrMultiProcessorCount, r->device), out);
    if ((st = fp4_sm90_init(err)) != FP4_OK) goto out;
    if ((st = fp4_tp_attn_rank_slices(&lc->attn, r->rank, &sl, err)) != FP4_OK) goto out;
    if ((st = layer_qkv_slice(lc, r->rank, &qkv, err)) != FP4_OK) goto out;
    if ((st = fp4_par_matrix_cols(&lc->in->o, sl.o_k_first, lc->attn.o.k, &o, err)) != FP4_OK) goto out;
    if ((st = fp4_par_matrix_cols(&lc->attn_out, sl.o_k_first, lc->attn.o.k, &a, err)) != FP4_OK) goto out;
    if ((st = upload_b(r, &s->qkv, &qkv, T, s->num_sms, err)) != FP4_OK) goto out;
    if ((st = upload_b(r, &s->o, &o, T, s->num_sms, err)) != FP4_OK) goto out;
    s->qkv.alpha = lc->xq.global_scale * qkv.global_scale;
    s->o.alpha = a.global_scale * o.global_scale;
    if (!(a_sf = (uint8_t *)malloc(fp4_swizzled_size(T, a.cols)))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "rank %d: no memory for swizzled scales", r->rank);
        goto out;
    }
    if ((st = fp4_swizzle_scales(a.scales, T, a.cols, a_sf, err)) != FP4_OK) goto out;
    if ((st = layer_upload(r, (void **)&s->a_codes, a.codes, (size_t)(T * a.cols / 2), err)) ||
        (st = layer_upload(r, (void **)&s->a_sf, a_sf, fp4_swizzled_size(T, a.cols), err)) ||
        (st = layer_upload(r, (void **)&s->x, lc->x, (size_t)(T * H) * 2, err)) ||
        (st = layer_alloc(r, (void **)&s->x_codes, (size_t)(T * H / 2), err)) ||
        (st = layer_alloc(r, (void **)&s->x_sf, fp4_swizzled_size(T, H), err)) ||
        (st = layer_alloc(r, (void **)&s->qkv_out, (size_t)(T * s->qkv.n) * 2, err)) ||
        (st = layer_alloc(r, (void **)&s->partial, (size_t)(T * H) * 2, err)) ||
        (st = layer_alloc(r, (void **)&s->out, (size_t)(T * H) * 2, err)))
        goto out;
    for (int i = 0; i < 2; i++) {
        attn_gemm *g = i == 0 ? &s->qkv : &s->o;
        g->ws_bytes = fp4_sm90_workspace_size(g->kernel, T, g->n, g->k);
        if (!g->ws_bytes) continue;
        if ((st = layer_alloc(r, &g->ws, g->ws_bytes, err)) != FP4_OK) goto out;
        NCCL_RANK_CUDA(err, st, r, cudaMemset(g->ws, 0, g->ws_bytes), out);
    }
out:
    fp4_matrix_free(&qkv);
    fp4_matrix_free(&o);
    fp4_matrix_free(&a);
    free(a_sf);
    return st;
}

static void attn_teardown(layer_job *j, nccl_rank *r, void *state)
{
    attn_state *s = (attn_state *)state;
    void *bufs[] = {s->qkv.b_codes, s->qkv.b_sf, s->o.b_codes, s->o.b_sf, s->x, s->x_codes, s->x_sf,
                    s->a_codes, s->a_sf, s->qkv_out, s->partial, s->out, s->qkv.ws, s->o.ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) (void)cudaFree(bufs[i]);
    memset(s, 0, sizeof *s);
}

static fp4_status gemm(const attn_state *s, const attn_gemm *g, int64_t m, const uint8_t *a_codes,
                       const uint8_t *a_sf, uint16_t *d, nccl_rank *r, fp4_err *err)
{
    fp4_sm90_gemm_args a;
    memset(&a, 0, sizeof a);
    a.kernel = g->kernel;
    a.m = m;
    a.n = g->n;
    a.k = g->k;
    a.a_codes = a_codes;
    a.a_sf = a_sf;
    a.b_codes = g->b_codes;
    a.b_sf = g->b_sf;
    a.alpha = g->alpha;
    a.d = d;
    a.workspace = g->ws;
    a.workspace_bytes = g->ws_bytes;
    a.num_sms = s->num_sms;
    return fp4_sm90_gemm(&a, r->stream, err);
}

static fp4_status attn_enqueue(layer_job *j, nccl_rank *r, void *state, unsigned parts, fp4_err *err)
{
    attn_state *s = (attn_state *)state;
    const layer_case *lc = j->lc;
    const int64_t T = lc->tokens, H = lc->attn.dims.hidden;
    fp4_status st = FP4_OK;
    if (parts & LAYER_PART_COMPUTE) {
        if ((st = fp4_gpu_quantize_bf16(s->x, T, H, lc->x_scale, s->x_codes, s->x_sf, NULL, NULL, r->stream, err)) ||
            (st = gemm(s, &s->qkv, T, s->x_codes, s->x_sf, s->qkv_out, r, err)) ||
            (st = gemm(s, &s->o, T, s->a_codes, s->a_sf, s->partial, r, err)))
            return st;
    }
    if (parts & LAYER_PART_REDUCE)
        NCCL_RANK_NCCL(err, st, r,
                       ncclAllReduce(s->partial, s->out, (size_t)(T * H), ncclBfloat16, ncclSum, r->comm, r->stream),
                       out);
out:
    return st;
}

static fp4_status attn_poison(layer_job *j, nccl_rank *r, void *state, fp4_err *err)
{
    attn_state *s = (attn_state *)state;
    const int64_t T = j->lc->tokens, H = j->lc->attn.dims.hidden;
    fp4_status st = FP4_OK;
    NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(s->qkv_out, 0xff, (size_t)(T * s->qkv.n) * 2, r->stream), out);
    NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(s->partial, 0xff, (size_t)(T * H) * 2, r->stream), out);
    NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(s->out, 0xff, (size_t)(T * H) * 2, r->stream), out);
out:
    return st;
}

/* The planted fault: row 0 (always checked), middle column, of the O partial. */
static fp4_status attn_fault(layer_job *j, nccl_rank *r, void *state, fp4_err *err)
{
    attn_state *s = (attn_state *)state;
    if (r->rank != j->set->fault_rank) return FP4_OK;
    return layer_corrupt_bf16(r, s->partial, j->lc->attn.dims.hidden, err);
}

/* This rank's QKV rows and its copy of the all-reduced output. */
static fp4_status attn_check(layer_job *j, nccl_rank *r, void *state, fp4_err *err)
{
    attn_state *s = (attn_state *)state;
    const layer_case *lc = j->lc;
    const int64_t H = lc->attn.dims.hidden, wide = s->qkv.n > H ? s->qkv.n : H;
    layer_verdict *v = &j->verdict[r->rank];
    float *got = (float *)malloc((size_t)lc->nrows * (size_t)wide * sizeof *got);
    double qmax = 0, qnorm = 0;
    char why[160]; /* fp4_compare_outputs's message fits; with the prefixes below it fits v->why */
    fp4_status st;
    if (!got) return fp4_fail(err, FP4_ERR_NOMEM, "rank %d: no memory for the check", r->rank);
    st = layer_read_rows_bf16(r, s->qkv_out, s->qkv.n, lc, got, err);
    if (st == FP4_OK &&
        !layer_compare(got, lc->ref_qkv[r->rank], (size_t)(lc->nrows * s->qkv.n), lc->qkv_tol_max, lc->qkv_tol_norm,
                       &qmax, &qnorm, why, sizeof why)) {
        v->bad = 1;
        v->err_max = qmax;
        v->err_norm = qnorm;
        snprintf(v->why, sizeof v->why, "QKV GEMM: %s", why);
        goto out;
    }
    if (st == FP4_OK) st = layer_read_rows_bf16(r, s->out, H, lc, got, err);
    if (st == FP4_OK) {
        v->bad = !layer_compare(got, lc->ref, (size_t)(lc->nrows * H), lc->tol_max, lc->tol_norm, &v->err_max,
                                &v->err_norm, why, sizeof why);
        if (v->bad) snprintf(v->why, sizeof v->why, "O projection after the all-reduce: %s", why);
    }
out:
    free(got);
    return st;
}

const layer_kind_ops layer_attn_ops = {
    sizeof(attn_state),
    3,
    {LAYER_PART_COMPUTE | LAYER_PART_REDUCE, LAYER_PART_COMPUTE, LAYER_PART_REDUCE, 0},
    LAYER_PART_COMPUTE,
    LAYER_PART_REDUCE,
    attn_setup,
    attn_teardown,
    attn_enqueue,
    attn_poison,
    attn_fault,
    attn_check,
    NULL, /* judge: each rank's output is whole */
};

#endif /* FP4_HAVE_NCCL */
