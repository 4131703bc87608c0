/* The exact expert-parallel layer reference (fp4/parallel.h, docs/PARALLEL.md).
 *
 * Every step of the unsharded layer is per row (quantization is per 16-element
 * block of a row given the tensor's encode scale, a GEMM output row depends on
 * its input row and its expert's weight only, the activation per element, the
 * combine per token in slot order), and expert parallelism moves whole rows: so
 * the sharded layer computes the very same values, bit for bit, provided the
 * dynamic encode scales see the amax of the whole tensor (a max over ranks, an
 * exact all-reduce). The data really travels by the plan's offsets, so a wrong
 * plan gives a wrong result. */
#include "fp4/parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/par_common.h"

static const char who[] = "expert-parallel layer";

/* One rank's buffers. Rows: `sent` = its tokens * k (send and combine-return
 * buffers), `recv` = the pairs it received. */
typedef struct ep_rank {
    int64_t tokens, sent, recv;
    fp4_matrix xq;       /* W4A4: its tokens quantized [tokens, H] */
    fp4_matrix send_q;   /* W4A4: the send buffer [sent, H] */
    uint16_t *send_16;   /* W4A16: the send buffer [sent, H] */
    fp4_matrix recv_q;   /* W4A4: the receive buffer [recv, H] */
    uint16_t *recv_16;   /* W4A16 */
    float *y, *h, *d;    /* [recv, 2I], [recv, I], [recv, H] */
    fp4_matrix hq;       /* W4A4: h quantized */
    uint16_t *h16;       /* W4A16: h in bf16 */
    float *ret;          /* [sent, H]: the combine's returned rows */
    float *pair_d;       /* [sent, H]: the same in pair order */
} ep_rank;

static void rank_free(ep_rank *q)
{
    fp4_matrix_free(&q->xq);
    fp4_matrix_free(&q->send_q);
    fp4_matrix_free(&q->recv_q);
    fp4_matrix_free(&q->hq);
    free(q->send_16);
    free(q->recv_16);
    free(q->y);
    free(q->h);
    free(q->d);
    free(q->h16);
    free(q->ret);
    free(q->pair_d);
}

/* Copy rows [from, from + count) of src to rows [to, ...) of dst (both NVFP4 with K cols). */
static void copy_q_rows(const fp4_matrix *src, int64_t from, fp4_matrix *dst, int64_t to,
                        int64_t count)
{
    const size_t cb = (size_t)(src->cols / 2), sb = (size_t)(src->cols / FP4_BLOCK);
    memcpy(dst->codes + (size_t)to * cb, src->codes + (size_t)from * cb, (size_t)count * cb);
    memcpy(dst->scales + (size_t)to * sb, src->scales + (size_t)from * sb, (size_t)count * sb);
}

fp4_status fp4_ep_layer_ref(const fp4_ep_plan *p, const fp4_moe_dims *dims,
                            const fp4_moe_weights *w, const uint16_t *x_bf16,
                            const fp4_moe_routing *r, const fp4_moe_layer_opts *o,
                            fp4_moe_layer_out *io, fp4_err *err)
{
    fp4_status st;
    fp4_err inner;
    ep_rank *rk = NULL;
    fp4_err_clear(&inner);
    if (!p) return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: NULL plan", who);
    if ((st = fp4_par_check_layer(who, dims, w, x_bf16, r, o, io, err)) != FP4_OK) return st;
    if ((st = fp4_ep_plan_check(p, r, err)) != FP4_OK) return st;
    const int ep = p->ranks, k = p->top_k, w4a4 = o->mode == FP4_MOE_W4A4;
    const int64_t ep1 = ep + 1, hid = dims->hidden, inter = dims->inter;
    io->x_encode_scale_used = 0.0f;
    io->h_encode_scale_used = 0.0f;
    rk = calloc((size_t)ep, sizeof *rk);
    if (!rk) return fp4_fail(err, FP4_ERR_NOMEM, "%s: no memory for %d ranks", who, ep);
    for (int q = 0; q < ep; q++) {
        rk[q].tokens = p->token_first[q + 1] - p->token_first[q];
        rk[q].sent = rk[q].tokens * k;
        rk[q].recv = p->recv_offsets[q * ep1 + ep];
    }

    /* 1. each owner prepares its tokens (W4A4: quantized with the global scale) */
    float amax = 0.0f;
    if (w4a4) {
        for (int s = 0; s < ep; s++) {
            float a;
            const int64_t t0 = p->token_first[s];
            if ((st = fp4_par_bf16_amax(x_bf16 + (size_t)t0 * (size_t)hid, rk[s].tokens, hid, t0,
                                        who, &a, err)) != FP4_OK)
                goto out;
            amax = fmaxf(amax, a); /* all-reduce of max */
        }
        io->x_encode_scale_used = fp4_par_encode_scale(o->x_encode_scale, amax);
    }
    for (int s = 0; s < ep; s++) {
        ep_rank *q = &rk[s];
        const int64_t t0 = p->token_first[s];
        const int32_t *order = p->send_pairs + t0 * k; /* s's send buffer, row by row */
        if (q->sent == 0) continue;
        if (w4a4) {
            if ((st = fp4_quantize_bf16(x_bf16 + (size_t)t0 * (size_t)hid, q->tokens, hid,
                                        io->x_encode_scale_used, &q->xq, &inner)) != FP4_OK ||
                (st = fp4_matrix_alloc(&q->send_q, q->sent, hid, &inner)) != FP4_OK) {
                st = fp4_par_stage_fail(err, who, "x quantization", s, &inner);
                goto out;
            }
            q->send_q.global_scale = q->xq.global_scale;
            for (int64_t i = 0; i < q->sent; i++) copy_q_rows(&q->xq, order[i] / k - t0, &q->send_q, i, 1);
        } else {
            if ((st = fp4_par_alloc((void **)&q->send_16, q->sent, hid, sizeof(uint16_t), who,
                                    "a send buffer", err)) != FP4_OK)
                goto out;
            for (int64_t i = 0; i < q->sent; i++)
                memcpy(q->send_16 + (size_t)i * (size_t)hid,
                       x_bf16 + (size_t)(order[i] / k) * (size_t)hid, (size_t)hid * sizeof(uint16_t));
        }
    }

    /* 2. dispatch: block (s -> d) from s's send rows to d's receive rows */
    for (int d = 0; d < ep; d++) {
        ep_rank *q = &rk[d];
        if (q->recv == 0) continue;
        if (w4a4) {
            if ((st = fp4_matrix_alloc(&q->recv_q, q->recv, hid, err)) != FP4_OK) goto out;
            q->recv_q.global_scale = 1.0f / io->x_encode_scale_used; /* sent once per message */
        } else if ((st = fp4_par_alloc((void **)&q->recv_16, q->recv, hid, sizeof(uint16_t), who,
                                       "a receive buffer", err)) != FP4_OK) {
            goto out;
        }
        for (int s = 0; s < ep; s++) {
            const int64_t c = p->send_counts[s * ep + d];
            const int64_t from = p->send_offsets[s * ep1 + d], to = p->recv_offsets[d * ep1 + s];
            if (c == 0) continue;
            if (w4a4) {
                copy_q_rows(&rk[s].send_q, from, &q->recv_q, to, c);
                q->recv_q.global_scale = rk[s].send_q.global_scale;
            } else {
                memcpy(q->recv_16 + (size_t)to * (size_t)hid,
                       rk[s].send_16 + (size_t)from * (size_t)hid,
                       (size_t)c * (size_t)hid * sizeof(uint16_t));
            }
        }
    }

    /* 3. each rank runs its experts on what it received: gate_up, activation */
    float h_amax = 0.0f;
    for (int d = 0; d < ep; d++) {
        ep_rank *q = &rk[d];
        const fp4_moe_plan *lp = &p->local[d];
        const int64_t e0 = p->expert_first[d];
        if (q->recv == 0) continue;
        if ((st = fp4_par_alloc((void **)&q->y, q->recv, 2 * inter, sizeof(float), who,
                                "gate_up's output", err)) != FP4_OK ||
            (st = fp4_par_alloc((void **)&q->h, q->recv, inter, sizeof(float), who,
                                "the activation", err)) != FP4_OK ||
            (st = fp4_par_alloc((void **)&q->d, q->recv, hid, sizeof(float), who,
                                "down's output", err)) != FP4_OK)
            goto out;
        if (w4a4)
            st = fp4_moe_grouped_ref_w4a4(&q->recv_q, FP4_MOE_A_PER_TOKEN, w->gate_up + e0, lp,
                                          q->y, o->threads, &inner);
        else
            st = fp4_moe_grouped_ref_w4a16(q->recv_16, q->recv, hid, FP4_MOE_A_PER_TOKEN,
                                           w->gate_up + e0, lp, q->y, o->threads, &inner);
        if (st != FP4_OK) {
            st = fp4_par_stage_fail(err, who, "gate_up", d, &inner);
            goto out;
        }
        for (int64_t i = 0; i < q->recv; i++)
            for (int64_t c = 0; c < inter; c++)
                q->h[i * inter + c] = fp4_moe_activation(dims->act, q->y[i * 2 * inter + c],
                                                         q->y[i * 2 * inter + inter + c]);
        if (w4a4) {
            float a;
            if ((st = fp4_par_f32_amax(q->h, q->recv, inter, who, &a, err)) != FP4_OK) goto out;
            h_amax = fmaxf(h_amax, a);
        }
    }
    if (w4a4) io->h_encode_scale_used = fp4_par_encode_scale(o->h_encode_scale, h_amax);

    /* 4. down on each rank */
    for (int d = 0; d < ep; d++) {
        ep_rank *q = &rk[d];
        const fp4_moe_plan *lp = &p->local[d];
        const int64_t e0 = p->expert_first[d];
        if (q->recv == 0) continue;
        if (w4a4) {
            if ((st = fp4_quantize_f32(q->h, q->recv, inter, io->h_encode_scale_used, &q->hq,
                                       &inner)) == FP4_OK)
                st = fp4_moe_grouped_ref_w4a4(&q->hq, FP4_MOE_A_PER_PAIR, w->down + e0, lp, q->d,
                                              o->threads, &inner);
        } else {
            if ((st = fp4_par_alloc((void **)&q->h16, q->recv, inter, sizeof(uint16_t), who,
                                    "h in bf16", err)) != FP4_OK)
                goto out;
            for (int64_t i = 0; i < q->recv * inter; i++) q->h16[i] = fp4_bf16_from_float(q->h[i]);
            st = fp4_moe_grouped_ref_w4a16(q->h16, q->recv, inter, FP4_MOE_A_PER_PAIR,
                                           w->down + e0, lp, q->d, o->threads, &inner);
        }
        if (st != FP4_OK) {
            st = fp4_par_stage_fail(err, who, "down", d, &inner);
            goto out;
        }
    }

    /* 5. combine: block (d -> s) back from d's receive rows to s's send rows, then
     *    each owner puts rows in pair order and sums its tokens' slots */
    for (int s = 0; s < ep; s++) {
        ep_rank *q = &rk[s];
        const int64_t t0 = p->token_first[s];
        if (q->sent == 0) continue;
        if ((st = fp4_par_alloc((void **)&q->ret, q->sent, hid, sizeof(float), who,
                                "a combine buffer", err)) != FP4_OK ||
            (st = fp4_par_alloc((void **)&q->pair_d, q->sent, hid, sizeof(float), who,
                                "a combine buffer", err)) != FP4_OK)
            goto out;
        for (int d = 0; d < ep; d++) {
            const int64_t c = p->send_counts[s * ep + d];
            if (c == 0) continue;
            memcpy(q->ret + (size_t)p->send_offsets[s * ep1 + d] * (size_t)hid,
                   rk[d].d + (size_t)p->recv_offsets[d * ep1 + s] * (size_t)hid,
                   (size_t)c * (size_t)hid * sizeof(float));
        }
        for (int64_t i = 0; i < q->sent; i++) {
            const int64_t pair = t0 * k + i;
            memcpy(q->pair_d + (size_t)i * (size_t)hid,
                   q->ret + (size_t)p->pair_send_row[pair] * (size_t)hid,
                   (size_t)hid * sizeof(float));
        }
        fp4_moe_routing mine = {q->tokens, r->experts, k, r->expert_ids + t0 * k,
                                r->weights + t0 * k};
        if ((st = fp4_moe_combine(q->pair_d, hid, &mine, io->out + (size_t)t0 * (size_t)hid,
                                  &inner)) != FP4_OK) {
            st = fp4_par_stage_fail(err, who, "combine", s, &inner);
            goto out;
        }
        if (io->d)
            memcpy(io->d + (size_t)t0 * (size_t)k * (size_t)hid, q->pair_d,
                   (size_t)q->sent * (size_t)hid * sizeof(float));
    }

    /* the optional intermediates in pair order: pair p sits on its expert's rank */
    for (int64_t pair = 0; pair < p->pairs && (io->y || io->h); pair++) {
        const ep_rank *q = &rk[fp4_ep_expert_rank(p, r->expert_ids[pair])];
        const int64_t row = p->pair_recv_row[pair];
        if (io->y)
            memcpy(io->y + (size_t)pair * (size_t)(2 * inter), q->y + (size_t)row * (size_t)(2 * inter),
                   (size_t)(2 * inter) * sizeof(float));
        if (io->h)
            memcpy(io->h + (size_t)pair * (size_t)inter, q->h + (size_t)row * (size_t)inter,
                   (size_t)inter * sizeof(float));
    }
out:
    for (int q = 0; q < ep; q++) rank_free(&rk[q]);
    free(rk);
    return st;
}
