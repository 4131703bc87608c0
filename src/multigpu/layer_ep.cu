/* fp4bench layer, expert parallel MoE (docs/PARALLEL.md): rank q owns experts
 * [expert_first[q], expert_first[q+1]) and tokens [token_first[q],
 * token_first[q+1]) by the EP plan (fp4_ep_plan_build). Per layer call:
 *   dispatch: q quantizes its tokens' x (W4A4) and packs one row per (token,
 *             slot) pair in send order, then one grouped ncclSend/ncclRecv per
 *             peer with the plan's counts (bf16 rows, or NVFP4 codes and block
 *             scales as two messages);
 *   compute:  the grouped kernel over q's own experts on its receive buffer
 *             (the plan's local[q]: top-1, one "token" per received row):
 *             gate_up, activation (and h's quantization), down, bf16 rows;
 *   combine:  the reverse all-to-all carries each row back to its token's
 *             owner, who sums the k slots with the routing weights (fp32). */
#ifdef FP4_HAVE_NCCL

#include <stdlib.h>
#include <string.h>

#include "kernels/sm90/moe.h"
#include "multigpu/layer_gpu.h"

typedef struct ep_state {
    int64_t tokens_own, token_first; /* this rank's tokens */
    int64_t send_rows, recv_rows;    /* its pairs, and the pairs it receives */
    int experts_own;
    void *gu_packed, *dn_packed;
    float *gu_global, *dn_global;
    int32_t *offsets, *pair_index; /* local plan over the receive buffer */
    int32_t *send_map;             /* send row -> own token */
    int32_t *ret_row;              /* own pair -> row of the returned buffer */
    float *route_w;                /* own pairs' weights */
    uint16_t *x;                   /* own tokens' bf16 x */
    uint8_t *x_codes, *x_scales;   /* W4A4: own tokens quantized */
    uint8_t *send_a, *send_b;      /* dispatch rows (bf16, or NVFP4 codes and scales) */
    uint8_t *recv_a, *recv_b;
    uint16_t *y, *h, *d;           /* expert side: [R, 2I], [R, I], [R, H] */
    uint8_t *h_codes, *h_scales;
    uint16_t *ret;                 /* [send_rows, H] outputs back, in send order */
    float *out;                    /* [own tokens, H] */
    void *ws;
    size_t ws_bytes;
} ep_state;

static int w4a4_of(const layer_job *j)
{
    return j->lc->in->spec.mode == FP4_MOE_W4A4;
}

/* Bytes of one dispatch row in each of the two messages (b: 0 in bf16). */
static void dispatch_row_bytes(const layer_job *j, int64_t *a, int64_t *b)
{
    const int64_t H = j->lc->in->spec.dims.hidden;
    *a = w4a4_of(j) ? H / 2 : 2 * H;
    *b = w4a4_of(j) ? H / 16 : 0;
}

/* Pack and upload the own experts' matrices of one projection. */
static fp4_status upload_experts(const ep_state *s, const layer_case *lc, nccl_rank *r, const fp4_matrix *w,
                                 void **packed, float **global, fp4_err *err)
{
    const int E = s->experts_own;
    const size_t bytes = fp4_sm90_moe_packed_size(E, w[0].rows, w[0].cols);
    void *host = malloc(bytes ? bytes : 1);
    float *glob = (float *)malloc((size_t)E * sizeof *glob);
    fp4_status st = FP4_OK;
    (void)lc;
    if (!host || !glob) st = fp4_fail(err, FP4_ERR_NOMEM, "rank %d: no memory to pack %zu bytes", r->rank, bytes);
    if (st == FP4_OK) st = fp4_sm90_moe_pack(w, E, host, glob, err);
    if (st == FP4_OK) st = layer_upload(r, packed, host, bytes, err);
    if (st == FP4_OK) st = layer_upload(r, (void **)global, glob, (size_t)E * sizeof *glob, err);
    free(host);
    free(glob);
    return st;
}

static fp4_status ep_setup(layer_job *j, nccl_rank *r, void *state, fp4_err *err)
{
    ep_state *s = (ep_state *)state;
    const layer_case *lc = j->lc;
    const fp4_ep_plan *p = &lc->ep;
    const fp4_moe_dims *d = &lc->in->spec.dims;
    const int q = r->rank, ep = p->ranks, k = d->top_k, w4a4 = w4a4_of(j);
    const int64_t H = d->hidden, I = d->inter;
    int64_t ra, rb;
    int32_t *map = NULL, *ret_row = NULL;
    fp4_status st = FP4_OK;
    dispatch_row_bytes(j, &ra, &rb);
    s->token_first = p->token_first[q];
    s->tokens_own = p->token_first[q + 1] - p->token_first[q];
    s->send_rows = s->tokens_own * k;
    s->recv_rows = p->recv_offsets[q * (ep + 1) + ep];
    s->experts_own = (int)(p->expert_first[q + 1] - p->expert_first[q]);
    map = (int32_t *)malloc((size_t)(s->send_rows > 0 ? s->send_rows : 1) * sizeof *map);
    ret_row = (int32_t *)malloc((size_t)(s->send_rows > 0 ? s->send_rows : 1) * sizeof *ret_row);
    if (!map || !ret_row) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "rank %d: no memory for its maps", q);
        goto out;
    }
    for (int64_t i = 0; i < s->send_rows; i++) {
        const int64_t base = s->token_first * k;
        map[i] = (int32_t)(p->send_pairs[base + i] / k - s->token_first);
        ret_row[i] = p->pair_send_row[base + i]; /* own pair base + i -> its returned row */
    }
    if (s->experts_own > 0) {
        const int64_t e0 = p->expert_first[q];
        if ((st = upload_experts(s, lc, r, lc->in->w.gate_up + e0, &s->gu_packed, &s->gu_global, err)) != FP4_OK ||
            (st = upload_experts(s, lc, r, lc->in->w.down + e0, &s->dn_packed, &s->dn_global, err)) != FP4_OK ||
            (st = layer_upload(r, (void **)&s->offsets, p->local[q].expert_offsets,
                               (size_t)(s->experts_own + 1) * 4, err)) != FP4_OK)
            goto out;
    }
    if ((st = layer_upload(r, (void **)&s->pair_index, p->local[q].pair_index, (size_t)s->recv_rows * 4, err)) ||
        (st = layer_upload(r, (void **)&s->send_map, map, (size_t)s->send_rows * 4, err)) ||
        (st = layer_upload(r, (void **)&s->ret_row, ret_row, (size_t)s->send_rows * 4, err)) ||
        (st = layer_upload(r, (void **)&s->route_w, lc->routing.weights + s->token_first * k,
                           (size_t)s->send_rows * 4, err)) ||
        (st = layer_upload(r, (void **)&s->x, lc->x + s->token_first * H, (size_t)(s->tokens_own * H) * 2, err)) ||
        (st = layer_alloc(r, (void **)&s->send_a, (size_t)(s->send_rows * ra), err)) ||
        (st = layer_alloc(r, (void **)&s->recv_a, (size_t)(s->recv_rows * ra), err)) ||
        (st = layer_alloc(r, (void **)&s->y, (size_t)(s->recv_rows * 2 * I) * 2, err)) ||
        (st = layer_alloc(r, (void **)&s->d, (size_t)(s->recv_rows * H) * 2, err)) ||
        (st = layer_alloc(r, (void **)&s->ret, (size_t)(s->send_rows * H) * 2, err)) ||
        (st = layer_alloc(r, (void **)&s->out, (size_t)(s->tokens_own * H) * 4, err)))
        goto out;
    if (w4a4) {
        if ((st = layer_alloc(r, (void **)&s->x_codes, (size_t)(s->tokens_own * H / 2), err)) ||
            (st = layer_alloc(r, (void **)&s->x_scales, (size_t)(s->tokens_own * H / 16), err)) ||
            (st = layer_alloc(r, (void **)&s->send_b, (size_t)(s->send_rows * rb), err)) ||
            (st = layer_alloc(r, (void **)&s->recv_b, (size_t)(s->recv_rows * rb), err)) ||
            (st = layer_alloc(r, (void **)&s->h_codes, (size_t)(s->recv_rows * I / 2), err)) ||
            (st = layer_alloc(r, (void **)&s->h_scales, (size_t)(s->recv_rows * I / 16), err)))
            goto out;
    } else if ((st = layer_alloc(r, (void **)&s->h, (size_t)(s->recv_rows * I) * 2, err)) != FP4_OK) {
        goto out;
    }
    if (s->recv_rows > 0) {
        s->ws_bytes = fp4_sm90_moe_workspace_size(s->experts_own, 1, s->recv_rows, 2 * I, H, 0, !w4a4);
        const size_t w2 = fp4_sm90_moe_workspace_size(s->experts_own, 1, s->recv_rows, H, I, 1, !w4a4);
        if (w2 > s->ws_bytes) s->ws_bytes = w2;
        if (s->ws_bytes) {
            if ((st = layer_alloc(r, &s->ws, s->ws_bytes, err)) != FP4_OK) goto out;
            NCCL_RANK_CUDA(err, st, r, cudaMemset(s->ws, 0, s->ws_bytes), out);
        }
    }
out:
    free(map);
    free(ret_row);
    return st;
}

static void ep_teardown(layer_job *j, nccl_rank *r, void *state)
{
    ep_state *s = (ep_state *)state;
    void *bufs[] = {s->gu_packed, s->dn_packed, s->gu_global, s->dn_global, s->offsets, s->pair_index,
                    s->send_map, s->ret_row, s->route_w, s->x, s->x_codes, s->x_scales, s->send_a, s->send_b,
                    s->recv_a, s->recv_b, s->y, s->h, s->d, s->h_codes, s->h_scales, s->ret, s->out, s->ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) (void)cudaFree(bufs[i]);
    memset(s, 0, sizeof *s);
}

/* One all-to-all of rows by the plan: to peer p goes `send`'s block of
 * sends[p] rows at send_at[p], from p comes recvs[p] rows into `recv` at
 * recv_at[p]; row_bytes each. Empty blocks are skipped on both sides (both
 * know the counts from the plan). Inside an open group. */
static fp4_status exchange(nccl_rank *r, int ep, const uint8_t *send, uint8_t *recv, int64_t row_bytes,
                           const int64_t *sends, const int64_t *send_at, const int64_t *recvs,
                           const int64_t *recv_at, fp4_err *err)
{
    fp4_status st = FP4_OK;
    for (int p = 0; p < ep; p++) {
        if (sends[p] > 0)
            NCCL_RANK_NCCL(err, st, r,
                           ncclSend(send + send_at[p] * row_bytes, (size_t)(sends[p] * row_bytes), ncclUint8, p,
                                    r->comm, r->stream),
                           out);
        if (recvs[p] > 0)
            NCCL_RANK_NCCL(err, st, r,
                           ncclRecv(recv + recv_at[p] * row_bytes, (size_t)(recvs[p] * row_bytes), ncclUint8, p,
                                    r->comm, r->stream),
                           out);
    }
out:
    return st;
}

/* The counts and offsets of rank q's side of the dispatch (combine: swapped). */
typedef struct ep_blocks {
    int64_t to[FP4_NCCL_MAX_RANKS], to_at[FP4_NCCL_MAX_RANKS];     /* q's pairs for each peer, in its send buffer */
    int64_t from[FP4_NCCL_MAX_RANKS], from_at[FP4_NCCL_MAX_RANKS]; /* each peer's pairs for q, in its receive buffer */
} ep_blocks;

static void blocks_of(const fp4_ep_plan *p, int q, ep_blocks *b)
{
    const int ep = p->ranks;
    for (int x = 0; x < ep; x++) {
        b->to[x] = p->send_counts[q * ep + x];
        b->to_at[x] = p->send_offsets[q * (ep + 1) + x];
        b->from[x] = p->send_counts[x * ep + q];
        b->from_at[x] = p->recv_offsets[q * (ep + 1) + x];
    }
}

/* One grouped GEMM over the own experts on the receive buffer. */
static fp4_status ep_grouped(const layer_job *j, const ep_state *s, nccl_rank *r, int down, fp4_err *err)
{
    const layer_case *lc = j->lc;
    const fp4_moe_dims *d = &lc->in->spec.dims;
    const int w4a4 = w4a4_of(j);
    fp4_sm90_moe_args a;
    memset(&a, 0, sizeof a);
    a.experts = s->experts_own;
    a.top_k = 1;
    a.tokens = s->recv_rows;
    a.n = down ? d->hidden : 2 * d->inter;
    a.k = down ? d->inter : d->hidden;
    a.w4a16 = !w4a4;
    a.a_per_pair = down;
    a.a_bf16 = down ? s->h : (const uint16_t *)s->recv_a;
    a.a_codes = down ? s->h_codes : s->recv_a;
    a.a_scales = down ? s->h_scales : s->recv_b;
    a.a_global = w4a4 ? 1.0f / (down ? lc->h_scale : lc->x_scale) : 1.0f;
    a.expert_offsets = s->offsets;
    a.pair_index = s->pair_index;
    a.b_packed = down ? s->dn_packed : s->gu_packed;
    a.b_global = down ? s->dn_global : s->gu_global;
    a.d = down ? s->d : s->y;
    a.workspace = s->ws;
    a.workspace_bytes = s->ws_bytes;
    return fp4_sm90_moe_gemm(&a, r->stream, err);
}

static fp4_status ep_enqueue(layer_job *j, nccl_rank *r, void *state, unsigned parts, fp4_err *err)
{
    ep_state *s = (ep_state *)state;
    const layer_case *lc = j->lc;
    const fp4_moe_dims *d = &lc->in->spec.dims;
    const int w4a4 = w4a4_of(j), ep = lc->ep.ranks;
    const int64_t H = d->hidden, I = d->inter;
    int64_t ra, rb;
    ep_blocks *b = (ep_blocks *)malloc(sizeof *b);
    fp4_status st = FP4_OK;
    if (!b) return fp4_fail(err, FP4_ERR_NOMEM, "rank %d: no memory for the all-to-all counts", r->rank);
    blocks_of(&lc->ep, r->rank, b);
    dispatch_row_bytes(j, &ra, &rb);
    if (parts & LAYER_PART_DISPATCH) {
        if (w4a4) {
            if ((st = layer_act_quant(s->x, H, -1, s->tokens_own, H, lc->x_scale, NULL, s->x_codes, s->x_scales,
                                      r->stream, err)) ||
                (st = layer_gather_rows(s->x_codes, ra, s->send_map, s->send_rows, s->send_a, r->stream, err)) ||
                (st = layer_gather_rows(s->x_scales, rb, s->send_map, s->send_rows, s->send_b, r->stream, err)))
                goto out;
        } else if ((st = layer_gather_rows((const uint8_t *)s->x, ra, s->send_map, s->send_rows, s->send_a, r->stream,
                                           err)) != FP4_OK) {
            goto out;
        }
        NCCL_RANK_NCCL(err, st, r, ncclGroupStart(), out);
        st = exchange(r, ep, s->send_a, s->recv_a, ra, b->to, b->to_at, b->from, b->from_at, err);
        if (st == FP4_OK && w4a4)
            st = exchange(r, ep, s->send_b, s->recv_b, rb, b->to, b->to_at, b->from, b->from_at, err);
        if (st != FP4_OK) {
            (void)ncclGroupEnd(); /* the group must be closed; the first failure is the one reported */
            goto out;
        }
        NCCL_RANK_NCCL(err, st, r, ncclGroupEnd(), out);
    }
    if ((parts & LAYER_PART_COMPUTE) && s->recv_rows > 0) {
        if ((st = ep_grouped(j, s, r, 0, err)) != FP4_OK) goto out;
        if ((st = layer_act_quant(s->y, 2 * I, (int)d->act, s->recv_rows, I, lc->h_scale, s->h,
                                  w4a4 ? s->h_codes : NULL, s->h_scales, r->stream, err)) != FP4_OK)
            goto out;
        if ((st = ep_grouped(j, s, r, 1, err)) != FP4_OK) goto out;
    }
    if (parts & LAYER_PART_COMBINE) {
        NCCL_RANK_NCCL(err, st, r, ncclGroupStart(), out);
        /* the dispatch transposed: the expert outputs go back where their rows came from */
        st = exchange(r, ep, (const uint8_t *)s->d, (uint8_t *)s->ret, 2 * H, b->from, b->from_at, b->to, b->to_at,
                      err);
        if (st != FP4_OK) {
            (void)ncclGroupEnd();
            goto out;
        }
        NCCL_RANK_NCCL(err, st, r, ncclGroupEnd(), out);
        st = layer_weighted_sum(s->ret, H, s->ret_row, s->route_w, s->tokens_own, d->top_k, s->out, r->stream, err);
    }
out:
    free(b);
    return st;
}

static fp4_status ep_poison(layer_job *j, nccl_rank *r, void *state, fp4_err *err)
{
    ep_state *s = (ep_state *)state;
    const int64_t H = j->lc->in->spec.dims.hidden;
    int64_t ra, rb;
    fp4_status st = FP4_OK;
    dispatch_row_bytes(j, &ra, &rb);
    /* all-ones bytes: NaN in bf16 and fp32 (and E4M3), so a row never delivered fails */
    NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(s->recv_a, 0xff, (size_t)(s->recv_rows * ra), r->stream), out);
    if (s->recv_b) NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(s->recv_b, 0xff, (size_t)(s->recv_rows * rb), r->stream), out);
    NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(s->d, 0xff, (size_t)(s->recv_rows * H) * 2, r->stream), out);
    NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(s->ret, 0xff, (size_t)(s->send_rows * H) * 2, r->stream), out);
    NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(s->out, 0xff, (size_t)(s->tokens_own * H) * 4, r->stream), out);
out:
    return st;
}

/* The planted fault: the expert output of the fault rank's first token's
 * first slot, changed on the rank that computed it, before the combine
 * carries it back (that token is always among the checked ones). */
static fp4_status ep_fault(layer_job *j, nccl_rank *r, void *state, fp4_err *err)
{
    ep_state *s = (ep_state *)state;
    const fp4_ep_plan *p = &j->lc->ep;
    const int f = j->set->fault_rank;
    const int64_t H = j->lc->in->spec.dims.hidden;
    if (f >= p->ranks || p->token_first[f + 1] == p->token_first[f]) return FP4_OK;
    const int64_t pair = p->token_first[f] * p->top_k;
    if (fp4_ep_expert_rank(p, j->lc->routing.expert_ids[pair]) != r->rank) return FP4_OK;
    return layer_corrupt_bf16(r, s->d + (int64_t)p->pair_recv_row[pair] * H, H, err);
}

/* This rank's checked tokens into the shared j->got (each token has one owner). */
static fp4_status ep_check(layer_job *j, nccl_rank *r, void *state, fp4_err *err)
{
    ep_state *s = (ep_state *)state;
    const layer_case *lc = j->lc;
    const int64_t H = lc->in->spec.dims.hidden;
    fp4_status st = FP4_OK;
    j->verdict[r->rank].bad = 0;
    for (int64_t i = 0; i < lc->nrows; i++) {
        const int64_t t = lc->rows[i] - s->token_first;
        if (t < 0 || t >= s->tokens_own) continue;
        NCCL_RANK_CUDA(err, st, r,
                       cudaMemcpy(j->got + i * H, s->out + t * H, (size_t)H * sizeof(float), cudaMemcpyDeviceToHost),
                       out);
    }
out:
    return st;
}

/* Every rank's tokens together against the reference, on rank 0. */
static void ep_judge(layer_job *j)
{
    const layer_case *lc = j->lc;
    layer_verdict *v = &j->verdict[0];
    const size_t n = (size_t)lc->nrows * (size_t)lc->in->spec.dims.hidden;
    v->bad = !layer_compare(j->got, lc->ref, n, lc->tol_max, lc->tol_norm, &v->err_max, &v->err_norm, v->why,
                            sizeof v->why);
}

const layer_kind_ops layer_ep_ops = {
    sizeof(ep_state),
    4,
    {LAYER_PART_DISPATCH | LAYER_PART_COMPUTE | LAYER_PART_COMBINE, LAYER_PART_COMPUTE, LAYER_PART_DISPATCH,
     LAYER_PART_COMBINE},
    LAYER_PART_DISPATCH | LAYER_PART_COMPUTE,
    LAYER_PART_COMBINE,
    ep_setup,
    ep_teardown,
    ep_enqueue,
    ep_poison,
    ep_fault,
    ep_check,
    ep_judge,
};

#endif /* FP4_HAVE_NCCL */
