/* The expert-parallel plan (fp4/parallel.h): expert and token ownership, the
 * dispatch and combine all-to-all (counts, offsets, orders), each rank's grouped
 * plan over its own experts, and the bytes on the wire. */
#include "fp4/parallel.h"

#include <stdlib.h>
#include <string.h>

int fp4_ep_expert_rank(const fp4_ep_plan *p, int expert)
{
    return fp4_par_owner(p->experts, p->ranks, expert);
}

int fp4_ep_token_rank(const fp4_ep_plan *p, int64_t token)
{
    return fp4_par_owner(p->tokens, p->ranks, token);
}

void fp4_ep_plan_free(fp4_ep_plan *p)
{
    if (!p) return;
    if (p->local)
        for (int r = 0; r < p->ranks; r++) fp4_moe_plan_free(&p->local[r]);
    free(p->local);
    free(p->expert_first);
    free(p->token_first);
    free(p->send_counts);
    free(p->send_tokens);
    free(p->send_offsets);
    free(p->recv_offsets);
    free(p->recv_first);
    free(p->send_pairs);
    free(p->recv_pairs);
    free(p->pair_send_row);
    free(p->pair_recv_row);
    memset(p, 0, sizeof *p);
}

/* Rank d's grouped plan: its received rows as the "tokens" of a top-1 routing
 * over its own experts, built by fp4_moe_plan_build, so that the grouped
 * references and kernels take it unchanged. Left all zero when d receives
 * nothing or owns no expert (a routing needs >= 1 token and expert). */
static fp4_status build_local_plan(fp4_ep_plan *p, const fp4_moe_routing *r, int d, fp4_err *err)
{
    const int64_t n = p->recv_offsets[d * (p->ranks + 1) + p->ranks];
    const int64_t e0 = p->expert_first[d], experts = p->expert_first[d + 1] - e0;
    const int32_t *rows = p->recv_pairs + p->recv_first[d];
    fp4_moe_routing local = {0};
    fp4_status st;
    if (n == 0 || experts == 0) return FP4_OK;
    local.tokens = n;
    local.experts = (int)experts;
    local.top_k = 1;
    local.expert_ids = malloc((size_t)n * sizeof *local.expert_ids);
    local.weights = malloc((size_t)n * sizeof *local.weights);
    if (!local.expert_ids || !local.weights) {
        fp4_moe_routing_free(&local);
        return fp4_fail(err, FP4_ERR_NOMEM, "expert-parallel plan: no memory for rank %d", d);
    }
    for (int64_t i = 0; i < n; i++) {
        local.expert_ids[i] = (int32_t)(r->expert_ids[rows[i]] - e0);
        local.weights[i] = 1.0f; /* unused: the owner applies the routing weights */
    }
    st = fp4_moe_plan_build(&local, &p->local[d], err);
    fp4_moe_routing_free(&local);
    return st;
}

fp4_status fp4_ep_plan_build(const fp4_moe_routing *r, int ep, fp4_ep_plan *out, fp4_err *err)
{
    static const char who[] = "expert-parallel plan";
    fp4_status st;
    int64_t *next = NULL;           /* [ep * ep] the next free send row per (s, d) */
    int64_t *last_token = NULL;     /* [ep] the last token counted in send_tokens[s*ep + d] */
    if (!out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: NULL argument", who);
    memset(out, 0, sizeof *out);
    if ((st = fp4_moe_routing_check(r, err)) != FP4_OK) return st;
    if (ep < 1 || ep > FP4_PAR_MAX_RANKS)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: ep = %d ranks, expected 1..%d", who, ep,
                        FP4_PAR_MAX_RANKS);

    const int k = r->top_k;
    const int64_t pairs = r->tokens * k, ep1 = ep + 1, sq = (int64_t)ep * ep;
    out->ranks = ep;
    out->experts = r->experts;
    out->top_k = k;
    out->tokens = r->tokens;
    out->pairs = pairs;
    out->expert_first = calloc((size_t)ep1, sizeof(int64_t));
    out->token_first = calloc((size_t)ep1, sizeof(int64_t));
    out->send_counts = calloc((size_t)sq, sizeof(int64_t));
    out->send_tokens = calloc((size_t)sq, sizeof(int64_t));
    out->send_offsets = calloc((size_t)(ep * ep1), sizeof(int64_t));
    out->recv_offsets = calloc((size_t)(ep * ep1), sizeof(int64_t));
    out->recv_first = calloc((size_t)ep1, sizeof(int64_t));
    out->send_pairs = malloc((size_t)pairs * sizeof(int32_t));
    out->recv_pairs = malloc((size_t)pairs * sizeof(int32_t));
    out->pair_send_row = malloc((size_t)pairs * sizeof(int32_t));
    out->pair_recv_row = malloc((size_t)pairs * sizeof(int32_t));
    out->local = calloc((size_t)ep, sizeof *out->local);
    next = malloc((size_t)sq * sizeof *next);
    last_token = malloc((size_t)ep * sizeof *last_token);
    if (!out->expert_first || !out->token_first || !out->send_counts || !out->send_tokens ||
        !out->send_offsets || !out->recv_offsets || !out->recv_first || !out->send_pairs ||
        !out->recv_pairs || !out->pair_send_row || !out->pair_recv_row || !out->local || !next ||
        !last_token) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "%s: no memory for %lld pairs over %d ranks", who,
                      (long long)pairs, ep);
        goto out;
    }
    for (int q = 0; q < ep; q++) {
        int64_t first, len;
        fp4_par_split(r->experts, ep, q, &first, &len);
        out->expert_first[q + 1] = first + len;
        fp4_par_split(r->tokens, ep, q, &first, &len);
        out->token_first[q + 1] = first + len;
    }

    /* counts: pairs and distinct tokens per (source, destination) */
    for (int s = 0; s < ep; s++) {
        for (int d = 0; d < ep; d++) last_token[d] = -1;
        for (int64_t t = out->token_first[s]; t < out->token_first[s + 1]; t++)
            for (int j = 0; j < k; j++) {
                const int d = fp4_ep_expert_rank(out, r->expert_ids[t * k + j]);
                out->send_counts[s * ep + d]++;
                if (last_token[d] != t) { /* tokens ascend: a repeat is the same token */
                    last_token[d] = t;
                    out->send_tokens[s * ep + d]++;
                }
            }
    }
    /* offsets: send blocks by destination, receive blocks by source */
    for (int s = 0; s < ep; s++)
        for (int d = 0; d < ep; d++)
            out->send_offsets[s * ep1 + d + 1] =
                out->send_offsets[s * ep1 + d] + out->send_counts[s * ep + d];
    for (int d = 0; d < ep; d++) {
        for (int s = 0; s < ep; s++)
            out->recv_offsets[d * ep1 + s + 1] =
                out->recv_offsets[d * ep1 + s] + out->send_counts[s * ep + d];
        out->recv_first[d + 1] = out->recv_first[d] + out->recv_offsets[d * ep1 + ep];
    }

    /* orders: each source walks its pairs ascending, so every block is in pair order */
    for (int s = 0; s < ep; s++)
        for (int d = 0; d < ep; d++) next[s * ep + d] = out->send_offsets[s * ep1 + d];
    for (int s = 0; s < ep; s++) {
        const int64_t base = out->token_first[s] * k; /* s's section of send_pairs */
        for (int64_t p = base; p < out->token_first[s + 1] * k; p++) {
            const int d = fp4_ep_expert_rank(out, r->expert_ids[p]);
            const int64_t row = next[s * ep + d]++;
            /* its row in d's receive buffer: s's block there, at the same index */
            const int64_t rrow =
                out->recv_offsets[d * ep1 + s] + (row - out->send_offsets[s * ep1 + d]);
            out->send_pairs[base + row] = (int32_t)p;
            out->pair_send_row[p] = (int32_t)row;
            out->recv_pairs[out->recv_first[d] + rrow] = (int32_t)p;
            out->pair_recv_row[p] = (int32_t)rrow;
        }
    }

    for (int d = 0; d < ep; d++)
        if ((st = build_local_plan(out, r, d, err)) != FP4_OK) goto out;

    /* statistics */
    fp4_ep_plan_stats *ss = &out->stats;
    ss->mean_recv_pairs = (double)pairs / (double)ep;
    for (int d = 0; d < ep; d++) {
        const int64_t n = out->recv_offsets[d * ep1 + ep];
        if (n > ss->max_recv_pairs) ss->max_recv_pairs = n;
        ss->idle_ranks += n == 0;
        for (int s = 0; s < ep; s++)
            if (s != d) ss->remote_pairs += out->send_counts[s * ep + d];
    }
    ss->recv_imbalance = ss->mean_recv_pairs > 0 ? (double)ss->max_recv_pairs / ss->mean_recv_pairs
                                                 : 0.0;
    for (int d = 0; d < ep; d++) {
        const int64_t experts = out->expert_first[d + 1] - out->expert_first[d];
        if (out->local[d].expert_counts) {
            for (int e = 0; e < out->local[d].experts; e++)
                ss->idle_experts += out->local[d].expert_counts[e] == 0;
        } else {
            ss->idle_experts += (int)experts; /* received nothing: all its experts idle */
        }
    }
out:
    free(next);
    free(last_token);
    if (st != FP4_OK) fp4_ep_plan_free(out);
    return st;
}

/* One invariant of fp4_ep_plan_check: fails with the message when cond is false. */
#define PLAN_REQUIRE(cond, ...)                                                            \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            st = fp4_fail(err, FP4_ERR_INTERNAL, "expert-parallel plan: " __VA_ARGS__);    \
            goto out;                                                                      \
        }                                                                                  \
    } while (0)

fp4_status fp4_ep_plan_check(const fp4_ep_plan *p, const fp4_moe_routing *r, fp4_err *err)
{
    fp4_status st;
    uint8_t *seen = NULL;
    if (!p || !r) return fp4_fail(err, FP4_ERR_INVALID_ARG, "expert-parallel plan: NULL argument");
    if ((st = fp4_moe_routing_check(r, err)) != FP4_OK) return st;
    if (!p->expert_first || !p->token_first || !p->send_counts || !p->send_offsets ||
        !p->recv_offsets || !p->recv_first || !p->send_pairs || !p->recv_pairs ||
        !p->pair_send_row || !p->pair_recv_row || !p->local)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "expert-parallel plan: empty plan");
    if (p->tokens != r->tokens || p->experts != r->experts || p->top_k != r->top_k ||
        p->pairs != r->tokens * r->top_k)
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "expert-parallel plan: built for %lld tokens, %d experts, top-%d; the "
                        "routing has %lld, %d, top-%d",
                        (long long)p->tokens, p->experts, p->top_k, (long long)r->tokens,
                        r->experts, r->top_k);
    const int ep = p->ranks, k = p->top_k;
    const int64_t ep1 = ep + 1;
    seen = calloc((size_t)p->pairs, 1);
    if (!seen) return fp4_fail(err, FP4_ERR_NOMEM, "expert-parallel plan: no memory");

    PLAN_REQUIRE(p->expert_first[0] == 0 && p->expert_first[ep] == p->experts &&
                     p->token_first[0] == 0 && p->token_first[ep] == p->tokens,
                 "the expert or token ranges do not cover [0, E) and [0, T)");
    for (int q = 0; q < ep; q++)
        PLAN_REQUIRE(p->expert_first[q] <= p->expert_first[q + 1] &&
                         p->token_first[q] <= p->token_first[q + 1],
                     "rank %d's ranges run backwards", q);
    for (int s = 0; s < ep; s++) {
        PLAN_REQUIRE(p->send_offsets[s * ep1] == 0 &&
                         p->send_offsets[s * ep1 + ep] ==
                             (p->token_first[s + 1] - p->token_first[s]) * k,
                     "rank %d sends %lld pairs, it owns %lld", s,
                     (long long)p->send_offsets[s * ep1 + ep],
                     (long long)((p->token_first[s + 1] - p->token_first[s]) * k));
        for (int d = 0; d < ep; d++) {
            const int64_t c = p->send_counts[s * ep + d];
            PLAN_REQUIRE(c >= 0 && p->send_offsets[s * ep1 + d + 1] - p->send_offsets[s * ep1 + d] == c &&
                             p->recv_offsets[d * ep1 + s + 1] - p->recv_offsets[d * ep1 + s] == c,
                         "the offsets of (%d -> %d) are not the prefix sums of the counts", s, d);
            const int32_t *sp = p->send_pairs + p->token_first[s] * k + p->send_offsets[s * ep1 + d];
            const int32_t *rp = p->recv_pairs + p->recv_first[d] + p->recv_offsets[d * ep1 + s];
            for (int64_t i = 0; i < c; i++) {
                const int32_t pair = sp[i];
                PLAN_REQUIRE(pair >= 0 && pair < p->pairs, "(%d -> %d) row %lld: pair %d out of range",
                             s, d, (long long)i, (int)pair);
                PLAN_REQUIRE(pair / k >= p->token_first[s] && pair / k < p->token_first[s + 1],
                             "rank %d sends pair %d of a token it does not own", s, (int)pair);
                PLAN_REQUIRE(fp4_ep_expert_rank(p, r->expert_ids[pair]) == d,
                             "pair %d (expert %d) sent to rank %d, not its expert's", (int)pair,
                             (int)r->expert_ids[pair], d);
                PLAN_REQUIRE(i == 0 || sp[i - 1] < pair, "(%d -> %d) is not in pair order", s, d);
                PLAN_REQUIRE(rp[i] == pair, "rank %d receives rows of (%d -> %d) out of order", d,
                             s, d);
                PLAN_REQUIRE(!seen[pair], "pair %d sent twice", (int)pair);
                seen[pair] = 1;
                PLAN_REQUIRE(p->pair_send_row[pair] == p->send_offsets[s * ep1 + d] + i &&
                                 p->pair_recv_row[pair] == p->recv_offsets[d * ep1 + s] + i,
                             "pair %d's rows are not the inverse of the orders", (int)pair);
            }
        }
    }
    for (int d = 0; d < ep; d++)
        PLAN_REQUIRE(p->recv_first[d + 1] - p->recv_first[d] == p->recv_offsets[d * ep1 + ep],
                     "rank %d's receive buffer size disagrees with its offsets", d);
    for (int64_t q = 0; q < p->pairs; q++) PLAN_REQUIRE(seen[q], "pair %lld never sent", (long long)q);
    for (int d = 0; d < ep; d++) {
        const fp4_moe_plan *lp = &p->local[d];
        const int64_t n = p->recv_offsets[d * ep1 + ep];
        const int64_t experts = p->expert_first[d + 1] - p->expert_first[d];
        if (n == 0 || experts == 0) {
            PLAN_REQUIRE(lp->pairs == 0 && !lp->expert_offsets, "rank %d's idle plan is not empty",
                         d);
            continue;
        }
        PLAN_REQUIRE(lp->pairs == n && lp->experts == experts && lp->top_k == 1 && lp->pair_index,
                     "rank %d's grouped plan has %lld rows over %d experts, expected %lld over %lld",
                     d, (long long)lp->pairs, lp->experts, (long long)n, (long long)experts);
        for (int e = 0; e < lp->experts; e++)
            for (int32_t g = lp->expert_offsets[e]; g < lp->expert_offsets[e + 1]; g++) {
                const int32_t row = lp->pair_index[g];
                PLAN_REQUIRE(row >= 0 && row < n &&
                                 r->expert_ids[p->recv_pairs[p->recv_first[d] + row]] ==
                                     p->expert_first[d] + e,
                             "rank %d's grouped row %d is not a pair of local expert %d", d,
                             (int)g, e);
            }
    }
out:
    free(seen);
    return st;
}

fp4_status fp4_ep_traffic_of(const fp4_ep_plan *p, int64_t hidden, fp4_par_dtype dtype,
                             fp4_ep_traffic *out, fp4_err *err)
{
    if (!p || !out || !p->send_counts)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "all-to-all bytes: NULL argument");
    memset(out, 0, sizeof *out);
    if (hidden < 1 || (dtype == FP4_PAR_NVFP4 && hidden % FP4_BLOCK != 0))
        return fp4_fail(err, FP4_ERR_SHAPE, "all-to-all bytes: rows of %lld %s elements",
                        (long long)hidden, fp4_par_dtype_name(dtype) ? fp4_par_dtype_name(dtype)
                                                                     : "unknown");
    if (!fp4_par_dtype_name(dtype))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "all-to-all bytes: unknown dtype %d", (int)dtype);
    const int ep = p->ranks;
    const double row = fp4_par_row_bytes(dtype, hidden);
    out->pair_bytes = row;
    out->total_bytes = (double)p->pairs * row;
    for (int s = 0; s < ep; s++) {
        double sent = 0.0, recv = 0.0;
        for (int d = 0; d < ep; d++) {
            if (d == s) continue; /* a rank's pairs to itself never touch the wire */
            sent += (double)p->send_counts[s * ep + d] * row;
            recv += (double)p->send_counts[d * ep + s] * row;
            out->dedup_wire_bytes += (double)p->send_tokens[s * ep + d] * row;
        }
        out->wire_bytes += sent;
        if (sent > out->max_send_bytes) out->max_send_bytes = sent;
        if (recv > out->max_recv_bytes) out->max_recv_bytes = recv;
    }
    return FP4_OK;
}
