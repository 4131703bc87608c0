/* Tensor-parallel plans (fp4/parallel.h): contiguous splits, bytes on the wire,
 * the dense MLP and attention plans, and weight slicing. */
#include "fp4/parallel.h"

#include <stdlib.h>
#include <string.h>

void fp4_par_split(int64_t count, int ranks, int rank, int64_t *first, int64_t *len)
{
    const int64_t base = count / ranks, extra = count % ranks;
    /* the first `extra` ranks hold base + 1 items */
    *first = (int64_t)rank * base + (rank < extra ? rank : extra);
    *len = base + (rank < extra ? 1 : 0);
}

int fp4_par_owner(int64_t count, int ranks, int64_t item)
{
    const int64_t base = count / ranks, extra = count % ranks;
    const int64_t big = extra * (base + 1); /* items held by the larger ranks */
    if (item < big) return (int)(item / (base + 1));
    return (int)(extra + (item - big) / base); /* base >= 1 here: item < count */
}

const char *fp4_par_dtype_name(fp4_par_dtype t)
{
    switch (t) {
    case FP4_PAR_BF16: return "bf16";
    case FP4_PAR_FP32: return "fp32";
    case FP4_PAR_NVFP4: return "nvfp4";
    }
    return NULL;
}

double fp4_par_row_bytes(fp4_par_dtype t, int64_t cols)
{
    switch (t) {
    case FP4_PAR_BF16: return 2.0 * (double)cols;
    case FP4_PAR_FP32: return 4.0 * (double)cols;
    case FP4_PAR_NVFP4: return (double)(cols / 2) + (double)(cols / FP4_BLOCK);
    }
    return -1.0;
}

double fp4_par_ring_allreduce_bytes(double payload, int ranks)
{
    /* reduce-scatter then all-gather: each moves (ranks - 1) / ranks of it */
    return ranks <= 1 ? 0.0 : 2.0 * (double)(ranks - 1) / (double)ranks * payload;
}

static fp4_status check_ranks(const char *who, int ranks, fp4_err *err)
{
    if (ranks < 1 || ranks > FP4_PAR_MAX_RANKS)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: %d ranks, expected 1..%d", who, ranks,
                        FP4_PAR_MAX_RANKS);
    return FP4_OK;
}

/* A dimension that is a K of some GEMM: >= 16 and a multiple of the NVFP4 block. */
static fp4_status check_k(const char *who, const char *name, int64_t v, fp4_err *err)
{
    if (v < FP4_BLOCK || v % FP4_BLOCK != 0 || v > FP4_MOE_MAX_K)
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "%s: %s = %lld must be a multiple of %d (the NVFP4 block) in [%d, 2^20]",
                        who, name, (long long)v, FP4_BLOCK, FP4_BLOCK);
    return FP4_OK;
}

static fp4_status check_reduce_dtype(const char *who, fp4_par_dtype t, fp4_err *err)
{
    if (t != FP4_PAR_BF16 && t != FP4_PAR_FP32)
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "%s: partial sums are all-reduced in bf16 or fp32, not %s", who,
                        fp4_par_dtype_name(t) ? fp4_par_dtype_name(t) : "an unknown dtype");
    return FP4_OK;
}

fp4_status fp4_tp_mlp_plan_build(int64_t tokens, int64_t hidden, int64_t inter, int tp,
                                 fp4_par_dtype reduce_dtype, fp4_tp_mlp_plan *out, fp4_err *err)
{
    static const char who[] = "tensor-parallel MLP";
    fp4_status st;
    if (!out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: NULL argument", who);
    memset(out, 0, sizeof *out);
    if ((st = check_ranks(who, tp, err)) != FP4_OK) return st;
    if (tokens < 1)
        return fp4_fail(err, FP4_ERR_SHAPE, "%s: %lld tokens, expected >= 1", who,
                        (long long)tokens);
    if ((st = check_k(who, "hidden H", hidden, err)) != FP4_OK) return st;
    if ((st = check_k(who, "intermediate I", inter, err)) != FP4_OK) return st;
    if ((st = check_reduce_dtype(who, reduce_dtype, err)) != FP4_OK) return st;
    if (inter % tp != 0 || (inter / tp) % FP4_BLOCK != 0)
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "%s: I = %lld over tp = %d gives %lld%s per rank; each rank's K slice of "
                        "down must be a whole number of %d-element NVFP4 blocks",
                        who, (long long)inter, tp, (long long)(inter / tp),
                        inter % tp ? " and a remainder" : "", FP4_BLOCK);
    out->tp = tp;
    out->tokens = tokens;
    out->hidden = hidden;
    out->inter = inter;
    out->inter_shard = inter / tp;
    out->gate_up = (fp4_par_gemm){tokens, 2 * out->inter_shard, hidden};
    out->down = (fp4_par_gemm){tokens, hidden, out->inter_shard};
    out->reduce_dtype = reduce_dtype;
    /* one rank needs no all-reduce: its down output is the whole sum */
    out->allreduce_payload_bytes =
        tp > 1 ? (double)tokens * fp4_par_row_bytes(reduce_dtype, hidden) : 0.0;
    out->allreduce_rank_bytes = fp4_par_ring_allreduce_bytes(out->allreduce_payload_bytes, tp);
    return FP4_OK;
}

fp4_status fp4_tp_mlp_rank_slices(const fp4_tp_mlp_plan *p, int rank, fp4_tp_mlp_slices *out,
                                  fp4_err *err)
{
    if (!p || !out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "MLP slices: NULL argument");
    if (rank < 0 || rank >= p->tp)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MLP slices: rank %d of tp = %d", rank, p->tp);
    out->count = p->inter_shard;
    out->gate_first = (int64_t)rank * p->inter_shard;
    out->up_first = p->inter + out->gate_first;
    out->down_k_first = out->gate_first;
    return FP4_OK;
}

fp4_status fp4_par_matrix_rows(const fp4_matrix *m, int64_t first, int64_t count,
                               fp4_matrix *out, fp4_err *err)
{
    fp4_status st;
    if (!m || !out || !m->codes || !m->scales)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "matrix rows: NULL argument");
    if (first < 0 || count < 1 || first > m->rows - count)
        return fp4_fail(err, FP4_ERR_SHAPE, "matrix rows: [%lld, %lld) outside %lld rows",
                        (long long)first, (long long)(first + count), (long long)m->rows);
    if ((st = fp4_matrix_alloc(out, count, m->cols, err)) != FP4_OK) return st;
    const size_t cb = (size_t)(m->cols / 2), sb = (size_t)(m->cols / FP4_BLOCK);
    memcpy(out->codes, m->codes + (size_t)first * cb, (size_t)count * cb);
    memcpy(out->scales, m->scales + (size_t)first * sb, (size_t)count * sb);
    out->global_scale = m->global_scale;
    return FP4_OK;
}

fp4_status fp4_par_matrix_cols(const fp4_matrix *m, int64_t first, int64_t count,
                               fp4_matrix *out, fp4_err *err)
{
    fp4_status st;
    if (!m || !out || !m->codes || !m->scales)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "matrix columns: NULL argument");
    if (first < 0 || count < 1 || first > m->cols - count)
        return fp4_fail(err, FP4_ERR_SHAPE, "matrix columns: [%lld, %lld) outside K = %lld",
                        (long long)first, (long long)(first + count), (long long)m->cols);
    /* a slice must cut between NVFP4 blocks: a block's scale cannot be split */
    if (first % FP4_BLOCK != 0 || count % FP4_BLOCK != 0)
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "matrix columns: [%lld, %lld) does not start and end on %d-element "
                        "NVFP4 blocks",
                        (long long)first, (long long)(first + count), FP4_BLOCK);
    if ((st = fp4_matrix_alloc(out, m->rows, count, err)) != FP4_OK) return st;
    const size_t cb = (size_t)(m->cols / 2), sb = (size_t)(m->cols / FP4_BLOCK);
    const size_t ocb = (size_t)(count / 2), osb = (size_t)(count / FP4_BLOCK);
    for (int64_t r = 0; r < m->rows; r++) {
        memcpy(out->codes + (size_t)r * ocb, m->codes + (size_t)r * cb + (size_t)(first / 2), ocb);
        memcpy(out->scales + (size_t)r * osb,
               m->scales + (size_t)r * sb + (size_t)(first / FP4_BLOCK), osb);
    }
    out->global_scale = m->global_scale;
    return FP4_OK;
}

fp4_status fp4_tp_mlp_shard(const fp4_tp_mlp_plan *p, int rank, const fp4_matrix *gate_up,
                            const fp4_matrix *down, fp4_matrix *gate_up_shard,
                            fp4_matrix *down_shard, fp4_err *err)
{
    fp4_status st;
    fp4_tp_mlp_slices s;
    fp4_matrix gate = {0}, up = {0};
    if (!gate_up || !down || !gate_up_shard || !down_shard)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MLP shard: NULL argument");
    memset(gate_up_shard, 0, sizeof *gate_up_shard);
    memset(down_shard, 0, sizeof *down_shard);
    if ((st = fp4_tp_mlp_rank_slices(p, rank, &s, err)) != FP4_OK) return st;
    if (gate_up->rows != 2 * p->inter || gate_up->cols != p->hidden || down->rows != p->hidden ||
        down->cols != p->inter)
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "MLP shard: gate_up is %lldx%lld and down %lldx%lld; the plan wants "
                        "%lldx%lld and %lldx%lld",
                        (long long)gate_up->rows, (long long)gate_up->cols, (long long)down->rows,
                        (long long)down->cols, (long long)(2 * p->inter), (long long)p->hidden,
                        (long long)p->hidden, (long long)p->inter);
    if ((st = fp4_par_matrix_rows(gate_up, s.gate_first, s.count, &gate, err)) != FP4_OK ||
        (st = fp4_par_matrix_rows(gate_up, s.up_first, s.count, &up, err)) != FP4_OK ||
        (st = fp4_matrix_alloc(gate_up_shard, 2 * s.count, p->hidden, err)) != FP4_OK ||
        (st = fp4_par_matrix_cols(down, s.down_k_first, s.count, down_shard, err)) != FP4_OK)
        goto out;
    /* gate rows then up rows: act() pairs row i with row count + i, as in the whole weight */
    const size_t cb = (size_t)s.count * (size_t)(p->hidden / 2);
    const size_t sb = (size_t)s.count * (size_t)(p->hidden / FP4_BLOCK);
    memcpy(gate_up_shard->codes, gate.codes, cb);
    memcpy(gate_up_shard->codes + cb, up.codes, cb);
    memcpy(gate_up_shard->scales, gate.scales, sb);
    memcpy(gate_up_shard->scales + sb, up.scales, sb);
    gate_up_shard->global_scale = gate_up->global_scale;
out:
    fp4_matrix_free(&gate);
    fp4_matrix_free(&up);
    if (st != FP4_OK) {
        fp4_matrix_free(gate_up_shard);
        fp4_matrix_free(down_shard);
    }
    return st;
}

/* ---- attention ------------------------------------------------------------------------ */

fp4_status fp4_tp_attn_plan_build(const fp4_attn_dims *d, int64_t tokens, int tp,
                                  fp4_par_dtype reduce_dtype, fp4_tp_attn_plan *out, fp4_err *err)
{
    static const char who[] = "tensor-parallel attention";
    fp4_status st;
    if (!d || !out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: NULL argument", who);
    memset(out, 0, sizeof *out);
    if ((st = check_ranks(who, tp, err)) != FP4_OK) return st;
    if (tokens < 1)
        return fp4_fail(err, FP4_ERR_SHAPE, "%s: %lld tokens, expected >= 1", who,
                        (long long)tokens);
    if ((st = check_k(who, "hidden H", d->hidden, err)) != FP4_OK) return st;
    if ((st = check_reduce_dtype(who, reduce_dtype, err)) != FP4_OK) return st;
    if (d->q_heads < 1 || d->kv_heads < 1 || d->head_dim < 1)
        return fp4_fail(err, FP4_ERR_SHAPE, "%s: %d query heads, %d kv heads of %lld: all >= 1",
                        who, d->q_heads, d->kv_heads, (long long)d->head_dim);
    /* before any product: every GEMM width below stays far from int64's end */
    if (d->head_dim > (1 << 20))
        return fp4_fail(err, FP4_ERR_SHAPE, "%s: head dim %lld above 2^20", who,
                        (long long)d->head_dim);
    if (d->q_heads % d->kv_heads != 0)
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "%s: %d query heads do not group evenly over %d kv heads", who,
                        d->q_heads, d->kv_heads);
    if (d->q_heads % tp != 0)
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "%s: %d query heads do not split over tp = %d (column-parallel QKV "
                        "splits whole heads)",
                        who, d->q_heads, tp);
    if (d->kv_heads % tp != 0 && tp % d->kv_heads != 0)
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "%s: %d kv heads neither split over tp = %d nor replicate evenly on it",
                        who, d->kv_heads, tp);
    const int64_t q_rank = d->q_heads / tp;
    const int64_t o_k = q_rank * d->head_dim;
    if ((st = check_k(who, "the O-projection's K slice per rank (query heads / tp * head_dim)",
                      o_k, err)) != FP4_OK)
        return st;
    out->tp = tp;
    out->tokens = tokens;
    out->dims = *d;
    out->q_heads_rank = (int)q_rank;
    if (d->kv_heads % tp == 0) {
        out->kv_heads_rank = d->kv_heads / tp;
        out->kv_replicas = 1;
    } else {
        out->kv_heads_rank = 1;
        out->kv_replicas = tp / d->kv_heads;
    }
    out->qkv = (fp4_par_gemm){tokens, (q_rank + 2 * out->kv_heads_rank) * d->head_dim, d->hidden};
    out->o = (fp4_par_gemm){tokens, d->hidden, o_k};
    out->reduce_dtype = reduce_dtype;
    out->allreduce_payload_bytes =
        tp > 1 ? (double)tokens * fp4_par_row_bytes(reduce_dtype, d->hidden) : 0.0;
    out->allreduce_rank_bytes = fp4_par_ring_allreduce_bytes(out->allreduce_payload_bytes, tp);
    return FP4_OK;
}

fp4_status fp4_tp_attn_rank_slices(const fp4_tp_attn_plan *p, int rank, fp4_tp_attn_slices *out,
                                   fp4_err *err)
{
    if (!p || !out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "attention slices: NULL argument");
    if (rank < 0 || rank >= p->tp)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "attention slices: rank %d of tp = %d", rank,
                        p->tp);
    const int64_t hd = p->dims.head_dim;
    out->q_first = rank * p->q_heads_rank;
    /* replicated kv: ranks r*kv_replicas .. (r+1)*kv_replicas - 1 share kv head r, which
     * is also the kv group of their query heads */
    out->kv_first = rank / p->kv_replicas * p->kv_heads_rank;
    out->q_row = (int64_t)out->q_first * hd;
    out->k_row = (int64_t)p->dims.q_heads * hd + (int64_t)out->kv_first * hd;
    out->v_row = (int64_t)(p->dims.q_heads + p->dims.kv_heads) * hd + (int64_t)out->kv_first * hd;
    out->o_k_first = out->q_row;
    return FP4_OK;
}

fp4_status fp4_par_dense_routing(int64_t tokens, fp4_moe_routing *out, fp4_err *err)
{
    if (!out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "dense routing: NULL argument");
    memset(out, 0, sizeof *out);
    if (tokens < 1 || tokens > INT32_MAX)
        return fp4_fail(err, FP4_ERR_SHAPE, "dense routing: %lld tokens, expected 1..2^31-1",
                        (long long)tokens);
    out->tokens = tokens;
    out->experts = 1;
    out->top_k = 1;
    out->expert_ids = calloc((size_t)tokens, sizeof *out->expert_ids); /* all expert 0 */
    out->weights = malloc((size_t)tokens * sizeof *out->weights);
    if (!out->expert_ids || !out->weights) {
        fp4_moe_routing_free(out);
        return fp4_fail(err, FP4_ERR_NOMEM, "dense routing: no memory for %lld tokens",
                        (long long)tokens);
    }
    /* weight 1: the combine's product and its one-term sum are exact, out = d */
    for (int64_t t = 0; t < tokens; t++) out->weights[t] = 1.0f;
    return FP4_OK;
}
