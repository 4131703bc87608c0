/* Tensor- and expert-parallel plans and the exact sharded references (fp4/parallel.h):
 * 1. contiguous splits: every item owned once, sizes within one, owner lookup;
 * 2. tensor-parallel plans: the CONTEXT.md shapes at TP4 and TP8 (MLP and
 *    attention), every weight row / K column kept by exactly one rank, the
 *    slices' contents, and the errors;
 * 3. the expert-parallel plan: a hand-made routing checked by hand, then skewed
 *    (Zipf) routings, zero-token experts, more ranks than experts or tokens:
 *    counts recomputed here, every pair sent once, counts conserved, the local
 *    plans, the bytes; a corrupted plan is refused;
 * 4. the sharded references equal fp4_moe_layer_ref bit for bit (out, y, h, d,
 *    encode scales) for tp and ep in {1, 2, 4, 8}, both modes, both activations,
 *    dynamic and static scales, a dense MLP; and rounding each rank's partial to
 *    fp32 before the sum (what the exact design avoids) does differ. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fp4/format.h"
#include "fp4/moe.h"
#include "fp4/parallel.h"
#include "fp4/reference.h"
#include "test_rng.h"

/* ---- helpers ------------------------------------------------------------------------ */

/* A [rows, cols] NVFP4 matrix from gaussian data, no zeros. */
static int make_matrix(test_rng *g, int64_t rows, int64_t cols, fp4_matrix *m)
{
    float *x = malloc((size_t)rows * (size_t)cols * sizeof *x);
    fp4_err err;
    if (!x) return -1;
    for (int64_t i = 0; i < rows * cols; i++) {
        const double v = test_rng_gauss(g);
        x[i] = (float)(fabs(v) < 0.05 ? 0.05 + fabs(v) : v);
    }
    const fp4_status st = fp4_quantize_f32(x, rows, cols, 0.0f, m, &err);
    free(x);
    return st == FP4_OK ? 0 : -1;
}

static int make_weights(test_rng *g, const fp4_moe_dims *d, fp4_moe_weights *w)
{
    fp4_err err;
    if (fp4_moe_weights_init(w, d->experts, &err) != FP4_OK) return -1;
    for (int e = 0; e < d->experts; e++)
        if (make_matrix(g, 2 * d->inter, d->hidden, &w->gate_up[e]) ||
            make_matrix(g, d->hidden, d->inter, &w->down[e]))
            return -1;
    return 0;
}

static uint16_t *make_bf16(test_rng *g, int64_t count, double scale)
{
    uint16_t *x = malloc((size_t)count * sizeof *x);
    if (!x) return NULL;
    for (int64_t i = 0; i < count; i++) {
        const double v = test_rng_gauss(g) * scale;
        x[i] = fp4_bf16_from_float((float)(fabs(v) < 0.01 * scale ? 0.01 * scale + fabs(v) : v));
    }
    return x;
}

static int contains(const char *text, const char *part)
{
    return strstr(text, part) != NULL;
}

/* Bitwise equality of two float arrays (so -0 != +0 and NaN patterns count). */
static int64_t bit_mismatches(const float *a, const float *b, int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return bad;
}

static fp4_status trace_routing(const int32_t *ids, int64_t tokens, int experts, int k,
                                fp4_moe_routing *r, fp4_err *err)
{
    fp4_moe_route_opts o = {FP4_MOE_ROUTE_TRACE, 5, 0.0, ids, NULL, 0};
    return fp4_moe_route(&o, tokens, experts, k, r, err);
}

/* ---- 1. splits ------------------------------------------------------------------------ */

static void test_split(void)
{
    for (int64_t count = 0; count <= 40; count++)
        for (int ranks = 1; ranks <= 9; ranks++) {
            int64_t next = 0, lo = count, hi = 0;
            for (int q = 0; q < ranks; q++) {
                int64_t first, len;
                fp4_par_split(count, ranks, q, &first, &len);
                CHECK_MSG(first == next, "count %lld ranks %d rank %d starts at %lld",
                          (long long)count, ranks, q, (long long)first);
                for (int64_t i = first; i < first + len; i++)
                    CHECK_MSG(fp4_par_owner(count, ranks, i) == q, "owner of %lld", (long long)i);
                next = first + len;
                lo = len < lo ? len : lo;
                hi = len > hi ? len : hi;
                if (q > 0) { /* larger shares first */
                    int64_t pf, pl;
                    fp4_par_split(count, ranks, q - 1, &pf, &pl);
                    CHECK(pl >= len);
                }
            }
            CHECK(next == count);
            CHECK(hi - lo <= 1);
        }
    int64_t f, l;
    fp4_par_split(10, 4, 0, &f, &l); /* 3 3 2 2 */
    CHECK(f == 0 && l == 3);
    fp4_par_split(10, 4, 3, &f, &l);
    CHECK(f == 8 && l == 2);
}

/* ---- 2. tensor-parallel plans ------------------------------------------------------------- */

static void test_tp_mlp(void)
{
    fp4_err err;
    fp4_tp_mlp_plan p;
    /* GLM-5's experts (H 6144, I 2048) at TP8 and TP4, 64 tokens */
    CHECK(fp4_tp_mlp_plan_build(64, 6144, 2048, 8, FP4_PAR_BF16, &p, &err) == FP4_OK);
    CHECK(p.inter_shard == 256);
    CHECK(p.gate_up.m == 64 && p.gate_up.n == 512 && p.gate_up.k == 6144);
    CHECK(p.down.m == 64 && p.down.n == 6144 && p.down.k == 256);
    CHECK(p.allreduce_payload_bytes == 64.0 * 6144 * 2);
    CHECK(p.allreduce_rank_bytes == 2.0 * 7 / 8 * 64 * 6144 * 2);
    CHECK(fp4_tp_mlp_plan_build(64, 6144, 2048, 4, FP4_PAR_FP32, &p, &err) == FP4_OK);
    CHECK(p.gate_up.n == 1024 && p.down.k == 512 && p.allreduce_payload_bytes == 64.0 * 6144 * 4);
    CHECK(fp4_tp_mlp_plan_build(64, 6144, 2048, 1, FP4_PAR_BF16, &p, &err) == FP4_OK);
    CHECK(p.gate_up.n == 4096 && p.down.k == 2048 && p.allreduce_payload_bytes == 0.0 &&
          p.allreduce_rank_bytes == 0.0);

    /* every gate row, up row and down K column kept by exactly one rank */
    for (int tp = 1; tp <= 8; tp *= 2) {
        const int64_t inter = 256;
        unsigned char gu[512] = {0}, dk[256] = {0};
        CHECK(fp4_tp_mlp_plan_build(3, 64, inter, tp, FP4_PAR_BF16, &p, &err) == FP4_OK);
        for (int q = 0; q < tp; q++) {
            fp4_tp_mlp_slices s;
            CHECK(fp4_tp_mlp_rank_slices(&p, q, &s, &err) == FP4_OK);
            CHECK(s.up_first - s.gate_first == inter); /* matching halves */
            for (int64_t i = 0; i < s.count; i++) {
                gu[s.gate_first + i]++;
                gu[s.up_first + i]++;
                dk[s.down_k_first + i]++;
            }
        }
        int once = 1;
        for (int i = 0; i < 512; i++) once &= gu[i] == 1;
        for (int i = 0; i < 256; i++) once &= dk[i] == 1;
        CHECK_MSG(once, "tp=%d: a row or column not kept exactly once", tp);
    }

    /* errors */
    CHECK(fp4_tp_mlp_plan_build(64, 6144, 2048, 0, FP4_PAR_BF16, &p, &err) == FP4_ERR_INVALID_ARG);
    CHECK(fp4_tp_mlp_plan_build(64, 6144, 2048, 3, FP4_PAR_BF16, &p, &err) == FP4_ERR_SHAPE);
    CHECK(contains(err.msg, "tp = 3") && contains(err.msg, "remainder"));
    CHECK(fp4_tp_mlp_plan_build(64, 2880, 2880, 8, FP4_PAR_BF16, &p, &err) == FP4_ERR_SHAPE);
    CHECK(contains(err.msg, "360") && contains(err.msg, "NVFP4"));
    CHECK(fp4_tp_mlp_plan_build(64, 2880, 2880, 4, FP4_PAR_BF16, &p, &err) == FP4_OK);
    CHECK(fp4_tp_mlp_plan_build(64, 100, 2048, 2, FP4_PAR_BF16, &p, &err) == FP4_ERR_SHAPE);
    CHECK(contains(err.msg, "hidden"));
    CHECK(fp4_tp_mlp_plan_build(0, 6144, 2048, 2, FP4_PAR_BF16, &p, &err) == FP4_ERR_SHAPE);
    CHECK(fp4_tp_mlp_plan_build(64, 6144, 2048, 2, FP4_PAR_NVFP4, &p, &err) ==
          FP4_ERR_INVALID_ARG);
    CHECK(fp4_tp_mlp_plan_build(64, 6144, 16, 2, FP4_PAR_BF16, &p, &err) == FP4_ERR_SHAPE);
    CHECK(fp4_tp_mlp_plan_build(64, 6144, 2048, 2, FP4_PAR_BF16, NULL, &err) ==
          FP4_ERR_INVALID_ARG);
    CHECK(fp4_tp_mlp_plan_build(64, 6144, 2048, 2, FP4_PAR_BF16, &p, &err) == FP4_OK);
    fp4_tp_mlp_slices s;
    CHECK(fp4_tp_mlp_rank_slices(&p, 2, &s, &err) == FP4_ERR_INVALID_ARG);
    CHECK(fp4_tp_mlp_rank_slices(&p, -1, &s, &err) == FP4_ERR_INVALID_ARG);
}

static void test_tp_shard(void)
{
    test_rng g = test_rng_seed(21);
    fp4_err err;
    fp4_tp_mlp_plan p;
    fp4_matrix gu = {0}, dn = {0}, gs = {0}, ds = {0}, bad = {0};
    const int64_t hid = 48, inter = 64;
    if (make_matrix(&g, 2 * inter, hid, &gu) || make_matrix(&g, hid, inter, &dn)) {
        CHECK_MSG(0, "shard setup");
        goto out;
    }
    for (int tp = 1; tp <= 4; tp *= 2) {
        fp4_tp_mlp_slices s;
        CHECK(fp4_tp_mlp_plan_build(5, hid, inter, tp, FP4_PAR_BF16, &p, &err) == FP4_OK);
        for (int q = 0; q < tp; q++) {
            CHECK(fp4_tp_mlp_rank_slices(&p, q, &s, &err) == FP4_OK);
            if (fp4_tp_mlp_shard(&p, q, &gu, &dn, &gs, &ds, &err) != FP4_OK) {
                CHECK_MSG(0, "shard tp=%d rank %d: %s", tp, q, err.msg);
                continue;
            }
            CHECK(gs.rows == 2 * s.count && gs.cols == hid && ds.rows == hid &&
                  ds.cols == s.count);
            CHECK(gs.global_scale == gu.global_scale && ds.global_scale == dn.global_scale);
            long wrong = 0;
            for (int64_t i = 0; i < s.count; i++)
                for (int64_t c = 0; c < hid; c++) {
                    wrong += fp4_matrix_get(&gs, i, c) != fp4_matrix_get(&gu, s.gate_first + i, c);
                    wrong += fp4_matrix_get(&gs, s.count + i, c) !=
                             fp4_matrix_get(&gu, s.up_first + i, c);
                }
            for (int64_t n = 0; n < hid; n++)
                for (int64_t i = 0; i < s.count; i++)
                    wrong += fp4_matrix_get(&ds, n, i) != fp4_matrix_get(&dn, n, s.down_k_first + i);
            CHECK_MSG(wrong == 0, "tp=%d rank %d: %ld elements differ", tp, q, wrong);
            fp4_matrix_free(&gs);
            fp4_matrix_free(&ds);
        }
    }
    /* slices off the block grid or out of range, a shard of the wrong shape */
    CHECK(fp4_par_matrix_cols(&dn, 8, 16, &bad, &err) == FP4_ERR_SHAPE && contains(err.msg, "block"));
    CHECK(fp4_par_matrix_cols(&dn, 48, 32, &bad, &err) == FP4_ERR_SHAPE);
    CHECK(fp4_par_matrix_rows(&dn, 40, 9, &bad, &err) == FP4_ERR_SHAPE);
    CHECK(fp4_par_matrix_rows(&dn, 0, 0, &bad, &err) == FP4_ERR_SHAPE);
    CHECK(fp4_tp_mlp_plan_build(5, hid, inter, 2, FP4_PAR_BF16, &p, &err) == FP4_OK);
    CHECK(fp4_tp_mlp_shard(&p, 0, &dn, &gu, &gs, &ds, &err) == FP4_ERR_SHAPE);
    CHECK(gs.codes == NULL && ds.codes == NULL);
out:
    fp4_matrix_free(&gu);
    fp4_matrix_free(&dn);
    fp4_matrix_free(&gs);
    fp4_matrix_free(&ds);
    fp4_matrix_free(&bad);
}

static void test_tp_attention(void)
{
    fp4_err err;
    fp4_tp_attn_plan p;
    /* H 6144, 48 query heads of 128, 8 kv heads: at TP8 the query block per rank
     * is GLM-5's attention shape (M, 768, 6144) */
    const fp4_attn_dims gqa = {6144, 48, 8, 128};
    CHECK(fp4_tp_attn_plan_build(&gqa, 64, 8, FP4_PAR_BF16, &p, &err) == FP4_OK);
    CHECK(p.q_heads_rank == 6 && p.kv_heads_rank == 1 && p.kv_replicas == 1);
    CHECK(p.q_heads_rank * gqa.head_dim == 768);
    CHECK(p.qkv.m == 64 && p.qkv.n == (6 + 2) * 128 && p.qkv.k == 6144);
    CHECK(p.o.m == 64 && p.o.n == 6144 && p.o.k == 768);
    CHECK(p.allreduce_payload_bytes == 64.0 * 6144 * 2);
    CHECK(fp4_tp_attn_plan_build(&gqa, 16, 4, FP4_PAR_BF16, &p, &err) == FP4_OK);
    CHECK(p.q_heads_rank == 12 && p.kv_heads_rank == 2 && p.qkv.n == 16 * 128 && p.o.k == 1536);

    /* kv replicated: 4 kv heads at TP8, two ranks per kv head; every q row once,
     * every kv head on kv_replicas ranks, each rank's queries in its kv group */
    const fp4_attn_dims rep = {1024, 16, 4, 64};
    for (int tp = 1; tp <= 8; tp *= 2) {
        int qrow[16 * 64] = {0}, kvh[4] = {0};
        CHECK(fp4_tp_attn_plan_build(&rep, 8, tp, FP4_PAR_FP32, &p, &err) == FP4_OK);
        CHECK(p.kv_replicas == (tp > 4 ? tp / 4 : 1));
        for (int q = 0; q < tp; q++) {
            fp4_tp_attn_slices s;
            CHECK(fp4_tp_attn_rank_slices(&p, q, &s, &err) == FP4_OK);
            for (int64_t i = 0; i < p.q_heads_rank * rep.head_dim; i++) qrow[s.q_row + i]++;
            for (int h = 0; h < p.kv_heads_rank; h++) kvh[s.kv_first + h]++;
            CHECK(s.o_k_first == s.q_row);
            CHECK(s.k_row == 16 * 64 + s.kv_first * 64 && s.v_row == 20 * 64 + s.kv_first * 64);
            /* query head h belongs to kv group h / (16 / 4) */
            CHECK(s.q_first / 4 >= s.kv_first &&
                  (s.q_first + p.q_heads_rank - 1) / 4 < s.kv_first + p.kv_heads_rank);
        }
        int ok = 1;
        for (int i = 0; i < 16 * 64; i++) ok &= qrow[i] == 1;
        for (int h = 0; h < 4; h++) ok &= kvh[h] == p.kv_replicas;
        CHECK_MSG(ok, "attention tp=%d: rows not covered as planned", tp);
    }

    /* errors */
    const fp4_attn_dims odd_q = {6144, 48, 8, 128};
    CHECK(fp4_tp_attn_plan_build(&odd_q, 16, 5, FP4_PAR_BF16, &p, &err) == FP4_ERR_SHAPE);
    CHECK(contains(err.msg, "48 query heads"));
    const fp4_attn_dims kv3 = {1536, 24, 3, 64};
    CHECK(fp4_tp_attn_plan_build(&kv3, 16, 8, FP4_PAR_BF16, &p, &err) == FP4_ERR_SHAPE);
    CHECK(contains(err.msg, "kv heads"));
    const fp4_attn_dims small_hd = {256, 8, 8, 12}; /* O's K slice 12 at TP8 */
    CHECK(fp4_tp_attn_plan_build(&small_hd, 16, 8, FP4_PAR_BF16, &p, &err) == FP4_ERR_SHAPE);
    CHECK(contains(err.msg, "O-projection"));
    /* a head dim whose products would wrap int64 (32 heads of 2^62 + 4 once gave O's K 16) */
    const fp4_attn_dims huge_hd = {4096, 32, 8, ((int64_t)1 << 62) + 4};
    CHECK(fp4_tp_attn_plan_build(&huge_hd, 16, 8, FP4_PAR_BF16, &p, &err) == FP4_ERR_SHAPE);
    CHECK(contains(err.msg, "head dim"));
    const fp4_attn_dims groups = {256, 8, 3, 64};
    CHECK(fp4_tp_attn_plan_build(&groups, 16, 1, FP4_PAR_BF16, &p, &err) == FP4_ERR_SHAPE);
    const fp4_attn_dims zero = {256, 0, 1, 64};
    CHECK(fp4_tp_attn_plan_build(&zero, 16, 1, FP4_PAR_BF16, &p, &err) == FP4_ERR_SHAPE);
    CHECK(fp4_tp_attn_plan_build(&gqa, 16, 2000, FP4_PAR_BF16, &p, &err) == FP4_ERR_INVALID_ARG);
    CHECK(fp4_tp_attn_plan_build(NULL, 16, 2, FP4_PAR_BF16, &p, &err) == FP4_ERR_INVALID_ARG);
}

/* ---- 3. the expert-parallel plan ------------------------------------------------------------ */

/* Everything about plan p of routing r, recomputed here from the routing. */
static void check_ep_plan(const fp4_ep_plan *p, const fp4_moe_routing *r, const char *what)
{
    fp4_err err;
    const int ep = p->ranks, k = r->top_k;
    const int64_t pairs = r->tokens * k;
    int64_t *count = calloc((size_t)ep * (size_t)ep, sizeof *count);
    int64_t *recv = calloc((size_t)ep, sizeof *recv);
    int32_t *hits = calloc((size_t)pairs, sizeof *hits);
    int32_t *expert_pairs = calloc((size_t)r->experts, sizeof *expert_pairs);
    if (!count || !recv || !hits || !expert_pairs) {
        CHECK_MSG(0, "%s: no memory", what);
        goto out;
    }
    CHECK_MSG(fp4_ep_plan_check(p, r, &err) == FP4_OK, "%s: %s", what, err.msg);
    for (int64_t q = 0; q < pairs; q++) {
        const int s = fp4_par_owner(r->tokens, ep, q / k);
        const int d = fp4_par_owner(r->experts, ep, r->expert_ids[q]);
        count[s * ep + d]++;
        recv[d]++;
        expert_pairs[r->expert_ids[q]]++;
    }
    int64_t total = 0, max_recv = 0, remote = 0;
    for (int s = 0; s < ep; s++)
        for (int d = 0; d < ep; d++) {
            CHECK_MSG(p->send_counts[s * ep + d] == count[s * ep + d], "%s: count %d -> %d", what,
                      s, d);
            CHECK(p->send_tokens[s * ep + d] <= p->send_counts[s * ep + d]);
            CHECK((p->send_tokens[s * ep + d] > 0) == (p->send_counts[s * ep + d] > 0));
            total += p->send_counts[s * ep + d];
            if (s != d) remote += count[s * ep + d];
        }
    CHECK_MSG(total == pairs, "%s: %lld pairs sent, %lld routed", what, (long long)total,
              (long long)pairs);
    for (int d = 0; d < ep; d++) max_recv = recv[d] > max_recv ? recv[d] : max_recv;
    CHECK(p->stats.max_recv_pairs == max_recv && p->stats.remote_pairs == remote);
    /* every pair in exactly one receive row and one send row */
    for (int64_t i = 0; i < pairs; i++) hits[p->recv_pairs[i]]++;
    for (int64_t i = 0; i < pairs; i++) hits[p->send_pairs[i]] += 2;
    int once = 1;
    for (int64_t q = 0; q < pairs; q++) once &= hits[q] == 3;
    CHECK_MSG(once, "%s: a pair not sent and received exactly once", what);
    /* local plans: per-expert counts add up to the routing's */
    int idle = 0;
    for (int d = 0; d < ep; d++) {
        const fp4_moe_plan *lp = &p->local[d];
        for (int64_t e = p->expert_first[d]; e < p->expert_first[d + 1]; e++) {
            const int32_t c = lp->expert_counts ? lp->expert_counts[e - p->expert_first[d]] : 0;
            CHECK_MSG(c == expert_pairs[e], "%s: expert %lld has %d pairs locally, %d routed", what,
                      (long long)e, (int)c, (int)expert_pairs[e]);
            idle += expert_pairs[e] == 0;
        }
    }
    CHECK(p->stats.idle_experts == idle);
out:
    free(count);
    free(recv);
    free(hits);
    free(expert_pairs);
}

static void test_ep_hand(void)
{
    fp4_err err;
    fp4_moe_routing r = {0};
    fp4_ep_plan p = {0};
    fp4_ep_traffic tr;
    /* 5 tokens, top-2, 5 experts over 2 ranks: rank 0 experts 0-2, tokens 0-2;
     * rank 1 experts 3-4, tokens 3-4 */
    const int32_t ids[] = {0, 3, 4, 1, 2, 0, 3, 4, 1, 0};
    if (trace_routing(ids, 5, 5, 2, &r, &err) != FP4_OK ||
        fp4_ep_plan_build(&r, 2, &p, &err) != FP4_OK) {
        CHECK_MSG(0, "hand plan: %s", err.msg);
        goto out;
    }
    CHECK(p.expert_first[1] == 3 && p.token_first[1] == 3);
    /* pairs: t0 (0,3) t1 (4,1) t2 (2,0) | t3 (3,4) t4 (1,0) */
    CHECK(p.send_counts[0] == 4 && p.send_counts[1] == 2 && p.send_counts[2] == 2 &&
          p.send_counts[3] == 2);
    CHECK(p.send_tokens[0] == 3 && p.send_tokens[1] == 2 && p.send_tokens[2] == 1 &&
          p.send_tokens[3] == 1);
    /* rank 0 sends pairs 0 3 4 5 to itself, then 1 2 to rank 1 */
    const int32_t send0[] = {0, 3, 4, 5, 1, 2};
    const int32_t send1[] = {8, 9, 6, 7};
    CHECK(memcmp(p.send_pairs, send0, sizeof send0) == 0);
    CHECK(memcmp(p.send_pairs + 6, send1, sizeof send1) == 0);
    /* rank 0 receives 0 3 4 5 (from itself) then 8 9 (from rank 1); rank 1: 1 2 6 7 */
    const int32_t recv[] = {0, 3, 4, 5, 8, 9, 1, 2, 6, 7};
    CHECK(memcmp(p.recv_pairs, recv, sizeof recv) == 0);
    CHECK(p.recv_offsets[0 * 3 + 1] == 4 && p.recv_offsets[0 * 3 + 2] == 6 &&
          p.recv_offsets[1 * 3 + 1] == 2 && p.recv_first[1] == 6);
    CHECK(p.pair_send_row[9] == 1 && p.pair_recv_row[9] == 5 && p.pair_send_row[2] == 5);
    /* rank 0's grouped plan over its rows (pairs 0 3 4 5 8 9, experts 0 1 2 0 1 0):
     * expert 0 rows 0, 3, 5; expert 1 rows 1, 4; expert 2 row 2 */
    CHECK(p.local[0].experts == 3 && p.local[0].pairs == 6);
    CHECK(p.local[0].expert_counts[0] == 3 && p.local[0].expert_counts[1] == 2 &&
          p.local[0].expert_counts[2] == 1);
    const int32_t grouped0[] = {0, 3, 5, 1, 4, 2};
    CHECK(memcmp(p.local[0].pair_index, grouped0, sizeof grouped0) == 0);
    CHECK(p.stats.remote_pairs == 4 && p.stats.max_recv_pairs == 6 && p.stats.idle_ranks == 0);
    check_ep_plan(&p, &r, "hand plan");

    /* bytes: H = 64; bf16 128 bytes a pair, NVFP4 32 + 4 */
    CHECK(fp4_ep_traffic_of(&p, 64, FP4_PAR_BF16, &tr, &err) == FP4_OK);
    CHECK(tr.pair_bytes == 128.0 && tr.total_bytes == 1280.0 && tr.wire_bytes == 4 * 128.0);
    CHECK(tr.max_send_bytes == 256.0 && tr.max_recv_bytes == 256.0);
    CHECK(tr.dedup_wire_bytes == 3 * 128.0); /* rank 0 sends t1 once for pairs 2 and 3 */
    CHECK(fp4_ep_traffic_of(&p, 64, FP4_PAR_NVFP4, &tr, &err) == FP4_OK);
    CHECK(tr.pair_bytes == 36.0 && tr.wire_bytes == 4 * 36.0);
    CHECK(fp4_ep_traffic_of(&p, 40, FP4_PAR_NVFP4, &tr, &err) == FP4_ERR_SHAPE);
    CHECK(fp4_ep_traffic_of(&p, 64, (fp4_par_dtype)7, &tr, &err) == FP4_ERR_INVALID_ARG);

    /* a corrupted plan is refused, naming the fault */
    int32_t keep = p.send_pairs[0];
    p.send_pairs[0] = p.send_pairs[1];
    CHECK(fp4_ep_plan_check(&p, &r, &err) == FP4_ERR_INTERNAL);
    p.send_pairs[0] = keep;
    p.recv_offsets[1]++;
    CHECK(fp4_ep_plan_check(&p, &r, &err) == FP4_ERR_INTERNAL && contains(err.msg, "prefix"));
    p.recv_offsets[1]--;
    p.local[1].pair_index[0] ^= 1;
    CHECK(fp4_ep_plan_check(&p, &r, &err) == FP4_ERR_INTERNAL && contains(err.msg, "grouped"));
    p.local[1].pair_index[0] ^= 1;
    CHECK(fp4_ep_plan_check(&p, &r, &err) == FP4_OK);

    /* errors */
    fp4_ep_plan q = {0};
    CHECK(fp4_ep_plan_build(&r, 0, &q, &err) == FP4_ERR_INVALID_ARG);
    CHECK(fp4_ep_plan_build(&r, FP4_PAR_MAX_RANKS + 1, &q, &err) == FP4_ERR_INVALID_ARG);
    CHECK(fp4_ep_plan_build(NULL, 2, &q, &err) == FP4_ERR_INVALID_ARG);
    CHECK(fp4_ep_plan_build(&r, 2, NULL, &err) == FP4_ERR_INVALID_ARG);
    r.expert_ids[1] = 0; /* token 0 routed twice to expert 0 */
    CHECK(fp4_ep_plan_build(&r, 2, &q, &err) == FP4_ERR_INVALID_ARG);
    CHECK(q.send_counts == NULL);
out:
    fp4_ep_plan_free(&p);
    fp4_moe_routing_free(&r);
}

static void test_ep_skewed(void)
{
    fp4_err err;
    char what[96];
    /* Zipf routing over 64 experts: the ranks holding the low expert ids (the
     * popular ones) receive most pairs */
    for (int si = 0; si < 2; si++) {
        const double s = si ? 2.0 : 1.2;
        fp4_moe_route_opts o = {FP4_MOE_ROUTE_SKEWED, 77, s, NULL, NULL, 0};
        fp4_moe_routing r = {0};
        if (fp4_moe_route(&o, 203, 64, 4, &r, &err) != FP4_OK) {
            CHECK_MSG(0, "skewed routing: %s", err.msg);
            continue;
        }
        const int eps[] = {1, 2, 3, 4, 8, 64, 100};
        for (size_t i = 0; i < sizeof eps / sizeof eps[0]; i++) {
            fp4_ep_plan p = {0};
            fp4_ep_traffic tr;
            snprintf(what, sizeof what, "zipf s=%.1f ep=%d", s, eps[i]);
            if (fp4_ep_plan_build(&r, eps[i], &p, &err) != FP4_OK) {
                CHECK_MSG(0, "%s: %s", what, err.msg);
                continue;
            }
            check_ep_plan(&p, &r, what);
            if (eps[i] == 8) {
                CHECK_MSG(p.stats.recv_imbalance > 2.0, "%s: imbalance %.2f", what,
                          p.stats.recv_imbalance);
            }
            if (eps[i] == 1) CHECK(p.stats.remote_pairs == 0 && p.stats.recv_imbalance == 1.0);
            if (eps[i] == 100) CHECK(p.stats.idle_ranks >= 36); /* 36 ranks own no expert */
            CHECK(fp4_ep_traffic_of(&p, 128, FP4_PAR_BF16, &tr, &err) == FP4_OK);
            CHECK(tr.wire_bytes == (double)p.stats.remote_pairs * 256.0);
            CHECK(tr.dedup_wire_bytes <= tr.wire_bytes && tr.max_recv_bytes <= tr.wire_bytes);
            fp4_ep_plan_free(&p);
        }
        fp4_moe_routing_free(&r);
    }

    /* one rank receiving most pairs: 4 of every 5 tokens go to experts 0-3, all
     * on rank 0 of 8 (32 experts) */
    {
        int32_t hot[50 * 4];
        fp4_moe_routing r = {0};
        fp4_ep_plan p = {0};
        for (int t = 0; t < 50; t++)
            for (int j = 0; j < 4; j++) hot[t * 4 + j] = t % 5 ? j : 4 + (t + 7 * j) % 28;
        if (trace_routing(hot, 50, 32, 4, &r, &err) == FP4_OK &&
            fp4_ep_plan_build(&r, 8, &p, &err) == FP4_OK) {
            check_ep_plan(&p, &r, "hot rank");
            CHECK(p.recv_offsets[8] == 160 && p.stats.max_recv_pairs == 160);
            CHECK(p.stats.recv_imbalance == 160.0 / 25.0);
            for (int s = 0; s < 8; s++) CHECK(p.send_counts[s * 8 + 0] >= 16);
        } else {
            CHECK_MSG(0, "hot rank: %s", err.msg);
        }
        fp4_ep_plan_free(&p);
        fp4_moe_routing_free(&r);
    }

    /* zero-token experts and a rank that receives nothing: 16 experts over 4
     * ranks, tokens routed only to experts 0..3 (rank 0) and 9 (rank 2) */
    int32_t ids[11 * 2];
    for (int t = 0; t < 11; t++) {
        ids[2 * t] = t % 4;
        ids[2 * t + 1] = 9;
    }
    fp4_moe_routing r = {0};
    fp4_ep_plan p = {0};
    if (trace_routing(ids, 11, 16, 2, &r, &err) == FP4_OK &&
        fp4_ep_plan_build(&r, 4, &p, &err) == FP4_OK) {
        check_ep_plan(&p, &r, "zero-token experts");
        CHECK(p.stats.idle_ranks == 2 && p.stats.idle_experts == 11);
        CHECK(p.local[1].pairs == 0 && p.local[1].expert_offsets == NULL);
        CHECK(p.recv_offsets[2 * 5 + 4] == 11 && p.recv_offsets[0 * 5 + 4] == 11);
    } else {
        CHECK_MSG(0, "zero-token experts: %s", err.msg);
    }
    fp4_ep_plan_free(&p);
    fp4_moe_routing_free(&r);

    /* fewer tokens than ranks: ranks 3.. own no token and send nothing */
    const int32_t few[] = {0, 7, 5, 6, 1, 2};
    if (trace_routing(few, 3, 8, 2, &r, &err) == FP4_OK &&
        fp4_ep_plan_build(&r, 8, &p, &err) == FP4_OK) {
        check_ep_plan(&p, &r, "three tokens on eight ranks");
        for (int s = 3; s < 8; s++) CHECK(p.send_offsets[s * 9 + 8] == 0);
        CHECK(fp4_ep_token_rank(&p, 2) == 2 && fp4_ep_expert_rank(&p, 7) == 7);
    } else {
        CHECK_MSG(0, "three tokens: %s", err.msg);
    }
    fp4_ep_plan_free(&p);
    fp4_moe_routing_free(&r);
}

/* ---- 4. the sharded references ------------------------------------------------------------- */

typedef struct layer_bufs {
    float *out, *y, *h, *d;
} layer_bufs;

static int bufs_alloc(layer_bufs *b, int64_t tokens, int64_t pairs, const fp4_moe_dims *d)
{
    b->out = malloc((size_t)tokens * (size_t)d->hidden * sizeof(float));
    b->y = malloc((size_t)pairs * (size_t)(2 * d->inter) * sizeof(float));
    b->h = malloc((size_t)pairs * (size_t)d->inter * sizeof(float));
    b->d = malloc((size_t)pairs * (size_t)d->hidden * sizeof(float));
    return b->out && b->y && b->h && b->d ? 0 : -1;
}

static void bufs_free(layer_bufs *b)
{
    free(b->out);
    free(b->y);
    free(b->h);
    free(b->d);
}

static fp4_moe_layer_out io_of(layer_bufs *b)
{
    fp4_moe_layer_out io = {0};
    io.out = b->out;
    io.y = b->y;
    io.h = b->h;
    io.d = b->d;
    return io;
}

/* out, y, h, d and the scales of a sharded run against the unsharded one. */
static void compare_layers(const fp4_moe_layer_out *ref, const fp4_moe_layer_out *got,
                           int64_t tokens, int64_t pairs, const fp4_moe_dims *d, const char *what)
{
    const int64_t bad_out = bit_mismatches(ref->out, got->out, tokens * d->hidden);
    const int64_t bad_y = bit_mismatches(ref->y, got->y, pairs * 2 * d->inter);
    const int64_t bad_h = bit_mismatches(ref->h, got->h, pairs * d->inter);
    const int64_t bad_d = bit_mismatches(ref->d, got->d, pairs * d->hidden);
    CHECK_MSG(bad_out == 0 && bad_y == 0 && bad_h == 0 && bad_d == 0,
              "%s: %lld out, %lld y, %lld h, %lld d values differ from the unsharded reference",
              what, (long long)bad_out, (long long)bad_y, (long long)bad_h, (long long)bad_d);
    CHECK_MSG(ref->x_encode_scale_used == got->x_encode_scale_used &&
                  ref->h_encode_scale_used == got->h_encode_scale_used,
              "%s: encode scales %g %g vs %g %g", what, (double)ref->x_encode_scale_used,
              (double)ref->h_encode_scale_used, (double)got->x_encode_scale_used,
              (double)got->h_encode_scale_used);
    /* the data is never zero, so neither is a good output */
    int64_t zeros = 0;
    for (int64_t i = 0; i < tokens * d->hidden; i++) zeros += ref->out[i] == 0.0f;
    CHECK_MSG(zeros < tokens * d->hidden / 8, "%s: %lld zero outputs", what, (long long)zeros);
}

typedef struct ref_case {
    fp4_moe_mode mode;
    fp4_moe_act act;
    int64_t tokens;
    int experts, top_k;
    fp4_moe_route_mode route;
    float h_static; /* > 0: a static h encode scale */
    uint64_t seed;
} ref_case;

static void sharded_case(const ref_case *c)
{
    test_rng g = test_rng_seed(c->seed);
    fp4_err err;
    const fp4_moe_dims dims = {64, 128, c->experts, c->top_k, c->act};
    const int64_t pairs = c->tokens * c->top_k;
    fp4_moe_weights w = {0};
    fp4_moe_routing r = {0};
    layer_bufs ref = {0}, got = {0};
    fp4_moe_layer_opts o = {c->mode, 0.0f, c->h_static, 2};
    fp4_moe_route_opts ro = {c->route, c->seed, 1.5, NULL, NULL, 0};
    uint16_t *x = make_bf16(&g, c->tokens * dims.hidden, 3.0);
    char what[160];
    snprintf(what, sizeof what, "%s %s T=%lld E=%d k=%d %s%s", fp4_moe_mode_name(c->mode),
             fp4_moe_act_name(c->act), (long long)c->tokens, c->experts, c->top_k,
             fp4_moe_route_mode_name(c->route), c->h_static > 0 ? " static" : "");
    fp4_status st = c->experts == 1 ? fp4_par_dense_routing(c->tokens, &r, &err)
                                    : fp4_moe_route(&ro, c->tokens, c->experts, c->top_k, &r, &err);
    if (!x || st != FP4_OK || make_weights(&g, &dims, &w) ||
        bufs_alloc(&ref, c->tokens, pairs, &dims) || bufs_alloc(&got, c->tokens, pairs, &dims)) {
        CHECK_MSG(0, "%s: setup", what);
        goto out;
    }
    fp4_moe_layer_out rio = io_of(&ref);
    if (fp4_moe_layer_ref(&dims, &w, x, &r, &o, &rio, &err) != FP4_OK) {
        CHECK_MSG(0, "%s: unsharded: %s", what, err.msg);
        goto out;
    }
    for (int tp = 1; tp <= 8; tp *= 2) {
        char label[200];
        snprintf(label, sizeof label, "%s tp=%d", what, tp);
        memset(got.out, 0xff, (size_t)c->tokens * (size_t)dims.hidden * sizeof(float));
        fp4_moe_layer_out gio = io_of(&got);
        if (fp4_tp_layer_ref(&dims, &w, tp, x, &r, &o, &gio, &err) != FP4_OK) {
            CHECK_MSG(0, "%s: %s", label, err.msg);
            continue;
        }
        compare_layers(&rio, &gio, c->tokens, pairs, &dims, label);
    }
    for (int ep = 1; ep <= 8; ep *= 2) {
        char label[200];
        fp4_ep_plan p = {0};
        snprintf(label, sizeof label, "%s ep=%d", what, ep);
        memset(got.out, 0xff, (size_t)c->tokens * (size_t)dims.hidden * sizeof(float));
        fp4_moe_layer_out gio = io_of(&got);
        if (fp4_ep_plan_build(&r, ep, &p, &err) != FP4_OK ||
            fp4_ep_layer_ref(&p, &dims, &w, x, &r, &o, &gio, &err) != FP4_OK) {
            CHECK_MSG(0, "%s: %s", label, err.msg);
        } else {
            compare_layers(&rio, &gio, c->tokens, pairs, &dims, label);
        }
        fp4_ep_plan_free(&p);
    }
out:
    free(x);
    fp4_moe_weights_free(&w);
    fp4_moe_routing_free(&r);
    bufs_free(&ref);
    bufs_free(&got);
}

static void test_sharded_refs(void)
{
    const ref_case cases[] = {
        {FP4_MOE_W4A4, FP4_MOE_ACT_SILU, 29, 8, 2, FP4_MOE_ROUTE_RANDOM, 0.0f, 101},
        {FP4_MOE_W4A4, FP4_MOE_ACT_SWIGLU_OAI, 37, 6, 3, FP4_MOE_ROUTE_SKEWED, 0.0f, 102},
        {FP4_MOE_W4A4, FP4_MOE_ACT_SILU, 23, 5, 2, FP4_MOE_ROUTE_SKEWED, 300.0f, 103},
        {FP4_MOE_W4A16, FP4_MOE_ACT_SILU, 29, 8, 2, FP4_MOE_ROUTE_RANDOM, 0.0f, 104},
        {FP4_MOE_W4A16, FP4_MOE_ACT_SWIGLU_OAI, 19, 7, 2, FP4_MOE_ROUTE_SKEWED, 0.0f, 105},
        {FP4_MOE_W4A4, FP4_MOE_ACT_SILU, 3, 8, 2, FP4_MOE_ROUTE_RANDOM, 0.0f, 106}, /* T < ep */
        {FP4_MOE_W4A4, FP4_MOE_ACT_SILU, 21, 1, 1, FP4_MOE_ROUTE_TRACE, 0.0f, 107}, /* dense */
        {FP4_MOE_W4A16, FP4_MOE_ACT_SILU, 21, 1, 1, FP4_MOE_ROUTE_TRACE, 0.0f, 108}, /* dense */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) sharded_case(&cases[i]);
}

/* Why the partial sums are exact: rounding each rank's down partial to fp32 and
 * adding the floats (a plain all-reduce) does not give the unsharded result. */
static void test_rounded_partials_differ(void)
{
    test_rng g = test_rng_seed(909);
    fp4_err err;
    const fp4_moe_dims dims = {64, 128, 1, 1, FP4_MOE_ACT_SILU};
    const int64_t tokens = 29, tp = 8;
    fp4_moe_weights w = {0};
    fp4_moe_routing r = {0};
    layer_bufs ref = {0};
    fp4_tp_mlp_plan p;
    fp4_matrix hq = {0}, hs = {0}, gs = {0}, ds = {0};
    fp4_moe_layer_opts o = {FP4_MOE_W4A4, 0.0f, 0.0f, 2};
    uint16_t *x = make_bf16(&g, tokens * dims.hidden, 3.0);
    float *sum = calloc((size_t)tokens * (size_t)dims.hidden, sizeof *sum);
    float *part = malloc((size_t)tokens * (size_t)dims.hidden * sizeof *part);
    if (!x || !sum || !part || make_weights(&g, &dims, &w) ||
        fp4_par_dense_routing(tokens, &r, &err) != FP4_OK ||
        bufs_alloc(&ref, tokens, tokens, &dims) ||
        fp4_tp_mlp_plan_build(tokens, dims.hidden, dims.inter, (int)tp, FP4_PAR_FP32, &p, &err) !=
            FP4_OK) {
        CHECK_MSG(0, "rounded partials: setup");
        goto out;
    }
    fp4_moe_layer_out io = io_of(&ref);
    if (fp4_moe_layer_ref(&dims, &w, x, &r, &o, &io, &err) != FP4_OK ||
        fp4_quantize_f32(ref.h, tokens, dims.inter, io.h_encode_scale_used, &hq, &err) != FP4_OK) {
        CHECK_MSG(0, "rounded partials: %s", err.msg);
        goto out;
    }
    for (int q = 0; q < tp; q++) {
        fp4_tp_mlp_slices s;
        if (fp4_tp_mlp_rank_slices(&p, q, &s, &err) != FP4_OK ||
            fp4_tp_mlp_shard(&p, q, &w.gate_up[0], &w.down[0], &gs, &ds, &err) != FP4_OK ||
            fp4_par_matrix_cols(&hq, s.down_k_first, s.count, &hs, &err) != FP4_OK ||
            fp4_gemm_reference(&hs, &ds, hq.global_scale * ds.global_scale, part, 1, &err) !=
                FP4_OK) {
            CHECK_MSG(0, "rounded partials rank %d: %s", q, err.msg);
            goto out;
        }
        for (int64_t i = 0; i < tokens * dims.hidden; i++) sum[i] += part[i];
        fp4_matrix_free(&hs);
        fp4_matrix_free(&gs);
        fp4_matrix_free(&ds);
    }
    const int64_t differ = bit_mismatches(sum, ref.d, tokens * dims.hidden);
    double worst = 0.0;
    for (int64_t i = 0; i < tokens * dims.hidden; i++)
        worst = fmax(worst, fabs((double)sum[i] - (double)ref.d[i]) /
                                fmax(fabs((double)ref.d[i]), 1e-30));
    CHECK_MSG(differ > 0, "fp32 partial sums matched exactly: the test data is too easy");
    CHECK_MSG(worst < 1e-3, "fp32 partial sums off by %g: the slices are wrong", worst);
out:
    free(x);
    free(sum);
    free(part);
    fp4_moe_weights_free(&w);
    fp4_moe_routing_free(&r);
    bufs_free(&ref);
    fp4_matrix_free(&hq);
    fp4_matrix_free(&hs);
    fp4_matrix_free(&gs);
    fp4_matrix_free(&ds);
}

static void test_ref_errors(void)
{
    test_rng g = test_rng_seed(5);
    fp4_err err;
    const fp4_moe_dims dims = {64, 48, 4, 2, FP4_MOE_ACT_SILU};
    fp4_moe_weights w = {0};
    fp4_moe_routing r = {0}, other = {0};
    fp4_ep_plan p = {0};
    layer_bufs b = {0};
    fp4_moe_layer_opts o = {FP4_MOE_W4A4, 0.0f, 0.0f, 1};
    fp4_moe_route_opts ro = {FP4_MOE_ROUTE_RANDOM, 3, 1.0, NULL, NULL, 0};
    uint16_t *x = make_bf16(&g, 10 * 64, 1.0);
    if (!x || make_weights(&g, &dims, &w) || fp4_moe_route(&ro, 10, 4, 2, &r, &err) != FP4_OK ||
        fp4_moe_route(&ro, 9, 4, 2, &other, &err) != FP4_OK || bufs_alloc(&b, 10, 20, &dims) ||
        fp4_ep_plan_build(&other, 2, &p, &err) != FP4_OK) {
        CHECK_MSG(0, "ref errors: setup");
        goto out;
    }
    fp4_moe_layer_out io = io_of(&b);
    /* I = 48 over tp 2 gives 24: not whole NVFP4 blocks */
    CHECK(fp4_tp_layer_ref(&dims, &w, 2, x, &r, &o, &io, &err) == FP4_ERR_SHAPE);
    CHECK(contains(err.msg, "24"));
    CHECK(fp4_tp_layer_ref(&dims, &w, 4, x, &r, &o, &io, &err) == FP4_ERR_SHAPE);
    CHECK(fp4_tp_layer_ref(&dims, &w, 0, x, &r, &o, &io, &err) == FP4_ERR_INVALID_ARG);
    /* tp = 3 splits I = 48 into whole blocks of 16: allowed, and exact too */
    float one[10 * 64];
    CHECK(fp4_tp_layer_ref(&dims, &w, 1, x, &r, &o, &io, &err) == FP4_OK);
    memcpy(one, b.out, sizeof one);
    CHECK(fp4_tp_layer_ref(&dims, &w, 3, x, &r, &o, &io, &err) == FP4_OK);
    CHECK(bit_mismatches(one, b.out, 10 * 64) == 0);
    /* a plan of another routing */
    CHECK(fp4_ep_layer_ref(&p, &dims, &w, x, &r, &o, &io, &err) == FP4_ERR_INVALID_ARG);
    CHECK(contains(err.msg, "built for 9 tokens"));
    CHECK(fp4_ep_layer_ref(NULL, &dims, &w, x, &r, &o, &io, &err) == FP4_ERR_INVALID_ARG);
    fp4_ep_plan_free(&p);
    CHECK(fp4_ep_plan_build(&r, 2, &p, &err) == FP4_OK);
    CHECK(fp4_ep_layer_ref(&p, &dims, &w, x, &r, &o, &io, &err) == FP4_OK);
    /* a NaN activation and an unknown mode */
    x[13] = 0x7FC0;
    CHECK(fp4_ep_layer_ref(&p, &dims, &w, x, &r, &o, &io, &err) == FP4_ERR_INVALID_ARG);
    CHECK(contains(err.msg, "NaN"));
    CHECK(fp4_tp_layer_ref(&dims, &w, 1, x, &r, &o, &io, &err) == FP4_ERR_INVALID_ARG);
    x[13] = 0x3F80;
    o.mode = (fp4_moe_mode)9;
    CHECK(fp4_ep_layer_ref(&p, &dims, &w, x, &r, &o, &io, &err) == FP4_ERR_INVALID_ARG);
    CHECK(fp4_tp_layer_ref(&dims, &w, 1, x, &r, &o, &io, &err) == FP4_ERR_INVALID_ARG);
    o.mode = FP4_MOE_W4A4;
    io.out = NULL;
    CHECK(fp4_ep_layer_ref(&p, &dims, &w, x, &r, &o, &io, &err) == FP4_ERR_INVALID_ARG);
    fp4_moe_routing dense = {0};
    CHECK(fp4_par_dense_routing(0, &dense, &err) == FP4_ERR_SHAPE);
out:
    free(x);
    fp4_moe_weights_free(&w);
    fp4_moe_routing_free(&r);
    fp4_moe_routing_free(&other);
    fp4_ep_plan_free(&p);
    bufs_free(&b);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    test_split();
    test_tp_mlp();
    test_tp_shard();
    test_tp_attention();
    test_ep_hand();
    test_ep_skewed();
    test_sharded_refs();
    test_rounded_partials_differ();
    test_ref_errors();
    return check_finish("test_parallel");
}
