/* fp4bench layer, tensor parallel MoE (docs/PARALLEL.md): rank r holds every
 * expert's gate_up rows of its I/tp slice (gate and up rows paired, so the
 * activation stays local) and the matching K slice of down (fp4_tp_mlp_shard),
 * and runs the whole layer on its slice with the grouped kernel and the same
 * routing as every other rank:
 *   x -> NVFP4 (W4A4) -> gate_up [P, 2I/tp] -> act (-> NVFP4) [P, I/tp]
 *     -> down + combine: partial [T, H] fp32 -> bf16 -> all-reduce (bf16 sum)
 * The grouped plan is uploaded once (the routing is the same on every rank
 * and is not part of what is timed). */
#ifdef FP4_HAVE_NCCL

#include <stdlib.h>
#include <string.h>

#include "kernels/sm90/moe.h"
#include "multigpu/layer_gpu.h"

typedef struct tp_state {
    int64_t inter_rank; /* I / tp */
    void *gu_packed, *dn_packed;
    float *gu_global, *dn_global; /* [E] */
    int32_t *offsets, *pair_index;
    float *route_w;
    uint16_t *x;                   /* bf16 [T, H] */
    uint8_t *x_codes, *x_scales;   /* W4A4 */
    uint16_t *y;                   /* [P, 2I/tp] */
    uint16_t *h;                   /* W4A16 [P, I/tp] */
    uint8_t *h_codes, *h_scales;   /* W4A4 */
    uint16_t *d;                   /* [P, H] */
    float *partial;                /* [T, H] this rank's partial sum */
    uint16_t *partial_bf16;        /* what the all-reduce sends */
    uint16_t *out;                 /* [T, H] the all-reduced output */
    void *ws;
    size_t ws_bytes;
} tp_state;

/* Pack this rank's slice of every expert of one projection and upload it. */
static fp4_status upload_slices(const layer_case *lc, nccl_rank *r, int down, void **packed, float **global,
                                fp4_err *err)
{
    const fp4_moe_weights *w = &lc->in->w;
    const int E = w->experts;
    fp4_matrix *gu = (fp4_matrix *)calloc((size_t)E, sizeof *gu), *dn = (fp4_matrix *)calloc((size_t)E, sizeof *dn);
    float *glob = (float *)malloc((size_t)E * sizeof *glob);
    void *host = NULL;
    size_t bytes = 0;
    fp4_status st = FP4_OK;
    if (!gu || !dn || !glob) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "rank %d: no memory for its weight slices", r->rank);
        goto out;
    }
    for (int e = 0; e < E && st == FP4_OK; e++)
        st = fp4_tp_mlp_shard(&lc->tp, r->rank, &w->gate_up[e], &w->down[e], &gu[e], &dn[e], err);
    if (st != FP4_OK) goto out;
    {
        const fp4_matrix *m = down ? dn : gu;
        bytes = fp4_sm90_moe_packed_size(E, m[0].rows, m[0].cols);
        if (!(host = malloc(bytes ? bytes : 1))) {
            st = fp4_fail(err, FP4_ERR_NOMEM, "rank %d: no memory to pack %zu bytes", r->rank, bytes);
            goto out;
        }
        if ((st = fp4_sm90_moe_pack(m, E, host, glob, err)) != FP4_OK) goto out;
    }
    if ((st = layer_upload(r, packed, host, bytes, err)) != FP4_OK) goto out;
    st = layer_upload(r, (void **)global, glob, (size_t)E * sizeof *glob, err);
out:
    for (int e = 0; gu && dn && e < E; e++) {
        fp4_matrix_free(&gu[e]);
        fp4_matrix_free(&dn[e]);
    }
    free(gu);
    free(dn);
    free(glob);
    free(host);
    return st;
}

static fp4_status tp_setup(layer_job *j, nccl_rank *r, void *state, fp4_err *err)
{
    tp_state *s = (tp_state *)state;
    const layer_case *lc = j->lc;
    const fp4_moe_dims *d = &lc->in->spec.dims;
    const int w4a4 = lc->in->spec.mode == FP4_MOE_W4A4;
    const int64_t T = lc->tokens, H = d->hidden, P = lc->plan.pairs, Ir = lc->tp.inter_shard;
    fp4_status st;
    s->inter_rank = Ir;
    if ((st = upload_slices(lc, r, 0, &s->gu_packed, &s->gu_global, err)) != FP4_OK) return st;
    if ((st = upload_slices(lc, r, 1, &s->dn_packed, &s->dn_global, err)) != FP4_OK) return st;
    if ((st = layer_upload(r, (void **)&s->offsets, lc->plan.expert_offsets, (size_t)(d->experts + 1) * 4, err)) ||
        (st = layer_upload(r, (void **)&s->pair_index, lc->plan.pair_index, (size_t)P * 4, err)) ||
        (st = layer_upload(r, (void **)&s->route_w, lc->routing.weights, (size_t)P * 4, err)) ||
        (st = layer_upload(r, (void **)&s->x, lc->x, (size_t)T * H * 2, err)) ||
        (st = layer_alloc(r, (void **)&s->y, (size_t)P * 2 * Ir * 2, err)) ||
        (st = layer_alloc(r, (void **)&s->d, (size_t)P * H * 2, err)) ||
        (st = layer_alloc(r, (void **)&s->partial, (size_t)T * H * 4, err)) ||
        (st = layer_alloc(r, (void **)&s->partial_bf16, (size_t)T * H * 2, err)) ||
        (st = layer_alloc(r, (void **)&s->out, (size_t)T * H * 2, err)))
        return st;
    if (w4a4) {
        if ((st = layer_alloc(r, (void **)&s->x_codes, (size_t)T * H / 2, err)) ||
            (st = layer_alloc(r, (void **)&s->x_scales, (size_t)T * H / 16, err)) ||
            (st = layer_alloc(r, (void **)&s->h_codes, (size_t)P * Ir / 2, err)) ||
            (st = layer_alloc(r, (void **)&s->h_scales, (size_t)P * Ir / 16, err)))
            return st;
    } else if ((st = layer_alloc(r, (void **)&s->h, (size_t)P * Ir * 2, err)) != FP4_OK) {
        return st;
    }
    s->ws_bytes = fp4_sm90_moe_workspace_size(d->experts, d->top_k, T, 2 * Ir, H, 0, !w4a4);
    {
        const size_t w2 = fp4_sm90_moe_workspace_size(d->experts, d->top_k, T, H, Ir, 1, !w4a4);
        if (w2 > s->ws_bytes) s->ws_bytes = w2;
    }
    if (s->ws_bytes) {
        if ((st = layer_alloc(r, &s->ws, s->ws_bytes, err)) != FP4_OK) return st;
        NCCL_RANK_CUDA(err, st, r, cudaMemset(s->ws, 0, s->ws_bytes), out); /* zeroed once; calls leave it so */
    }
out:
    return st;
}

static void tp_teardown(layer_job *j, nccl_rank *r, void *state)
{
    tp_state *s = (tp_state *)state;
    void *bufs[] = {s->gu_packed, s->dn_packed, s->gu_global, s->dn_global, s->offsets, s->pair_index,
                    s->route_w, s->x, s->x_codes, s->x_scales, s->y, s->h, s->h_codes, s->h_scales,
                    s->d, s->partial, s->partial_bf16, s->out, s->ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) (void)cudaFree(bufs[i]);
    memset(s, 0, sizeof *s);
}

/* One grouped GEMM of the layer (down: with the combine into the partial). */
static fp4_status tp_grouped(const layer_job *j, const tp_state *s, nccl_rank *r, int down, fp4_err *err)
{
    const layer_case *lc = j->lc;
    const fp4_moe_dims *d = &lc->in->spec.dims;
    const int w4a4 = lc->in->spec.mode == FP4_MOE_W4A4;
    fp4_sm90_moe_args a;
    memset(&a, 0, sizeof a);
    a.experts = d->experts;
    a.top_k = d->top_k;
    a.tokens = lc->tokens;
    a.n = down ? d->hidden : 2 * s->inter_rank;
    a.k = down ? s->inter_rank : d->hidden;
    a.w4a16 = !w4a4;
    a.a_per_pair = down;
    a.a_bf16 = down ? s->h : s->x;
    a.a_codes = down ? s->h_codes : s->x_codes;
    a.a_scales = down ? s->h_scales : s->x_scales;
    a.a_global = w4a4 ? 1.0f / (down ? lc->h_scale : lc->x_scale) : 1.0f;
    a.expert_offsets = s->offsets;
    a.pair_index = s->pair_index;
    a.b_packed = down ? s->dn_packed : s->gu_packed;
    a.b_global = down ? s->dn_global : s->gu_global;
    a.d = down ? s->d : s->y;
    if (down) {
        a.route_weights = s->route_w;
        a.d_combined = s->partial;
    }
    a.workspace = s->ws;
    a.workspace_bytes = s->ws_bytes;
    return fp4_sm90_moe_gemm(&a, r->stream, err);
}

static fp4_status tp_enqueue(layer_job *j, nccl_rank *r, void *state, unsigned parts, fp4_err *err)
{
    tp_state *s = (tp_state *)state;
    const layer_case *lc = j->lc;
    const fp4_moe_dims *d = &lc->in->spec.dims;
    const int w4a4 = lc->in->spec.mode == FP4_MOE_W4A4;
    const int64_t T = lc->tokens, H = d->hidden, P = lc->plan.pairs, Ir = s->inter_rank;
    fp4_status st = FP4_OK;
    if (parts & LAYER_PART_COMPUTE) {
        if (w4a4 && (st = layer_act_quant(s->x, H, -1, T, H, lc->x_scale, NULL, s->x_codes, s->x_scales, r->stream,
                                          err)) != FP4_OK)
            return st;
        if ((st = tp_grouped(j, s, r, 0, err)) != FP4_OK) return st;
        if ((st = layer_act_quant(s->y, 2 * Ir, (int)d->act, P, Ir, lc->h_scale, s->h, w4a4 ? s->h_codes : NULL,
                                  s->h_scales, r->stream, err)) != FP4_OK)
            return st;
        if ((st = tp_grouped(j, s, r, 1, err)) != FP4_OK) return st;
        if ((st = layer_to_bf16(s->partial, T * H, s->partial_bf16, r->stream, err)) != FP4_OK) return st;
    }
    if (parts & LAYER_PART_REDUCE)
        NCCL_RANK_NCCL(err, st, r,
                       ncclAllReduce(s->partial_bf16, s->out, (size_t)(T * H), ncclBfloat16, ncclSum, r->comm,
                                     r->stream),
                       out);
out:
    return st;
}

static fp4_status tp_poison(layer_job *j, nccl_rank *r, void *state, fp4_err *err)
{
    tp_state *s = (tp_state *)state;
    const size_t n = (size_t)j->lc->tokens * (size_t)j->lc->in->spec.dims.hidden;
    fp4_status st = FP4_OK;
    /* all-ones bytes: NaN in bf16 and fp32, so anything not written fails the check */
    NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(s->partial, 0xff, n * 4, r->stream), out);
    NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(s->partial_bf16, 0xff, n * 2, r->stream), out);
    NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(s->out, 0xff, n * 2, r->stream), out);
out:
    return st;
}

/* The planted fault: token 0 (always checked), the middle column, of this
 * rank's partial, before the all-reduce carries it to every rank. */
static fp4_status tp_fault(layer_job *j, nccl_rank *r, void *state, fp4_err *err)
{
    tp_state *s = (tp_state *)state;
    if (r->rank != j->set->fault_rank) return FP4_OK;
    return layer_corrupt_bf16(r, s->partial_bf16, j->lc->in->spec.dims.hidden, err);
}

/* Every rank's own copy of the all-reduced output against the reference. */
static fp4_status tp_check(layer_job *j, nccl_rank *r, void *state, fp4_err *err)
{
    tp_state *s = (tp_state *)state;
    const layer_case *lc = j->lc;
    const int64_t H = lc->in->spec.dims.hidden;
    layer_verdict *v = &j->verdict[r->rank];
    float *got = (float *)malloc((size_t)lc->nrows * (size_t)H * sizeof *got);
    fp4_status st;
    if (!got) return fp4_fail(err, FP4_ERR_NOMEM, "rank %d: no memory for the check", r->rank);
    st = layer_read_rows_bf16(r, s->out, H, lc, got, err);
    if (st == FP4_OK)
        v->bad = !layer_compare(got, lc->ref, (size_t)lc->nrows * (size_t)H, lc->tol_max, lc->tol_norm, &v->err_max,
                                &v->err_norm, v->why, sizeof v->why);
    free(got);
    return st;
}

const layer_kind_ops layer_tp_ops = {
    sizeof(tp_state),
    3,
    {LAYER_PART_COMPUTE | LAYER_PART_REDUCE, LAYER_PART_COMPUTE, LAYER_PART_REDUCE, 0},
    LAYER_PART_COMPUTE,
    LAYER_PART_REDUCE,
    tp_setup,
    tp_teardown,
    tp_enqueue,
    tp_poison,
    tp_fault,
    tp_check,
    NULL, /* judge: each rank's output is whole */
};

#endif /* FP4_HAVE_NCCL */
