/* fp4bench: how a layer is split over several GPUs, on the CPU (docs/PARALLEL.md).
 *
 * Tensor parallelism (tp ranks) splits one layer's weights:
 *   MLP:       gate_up [2I, H] column-parallel (rank r keeps gate rows AND the
 *              matching up rows, so act(gate, up) stays local), down [H, I]
 *              row-parallel (rank r keeps K columns [r*I/tp, (r+1)*I/tp));
 *              the ranks' partial outputs [T, H] are summed by an all-reduce.
 *   attention: QKV column-parallel by heads, O-projection row-parallel, one
 *              all-reduce of [T, H] after it.
 * Expert parallelism (ep ranks) gives each rank a contiguous range of experts
 * and a contiguous range of tokens; an all-to-all moves each (token, slot) pair
 * from the rank that owns the token to the rank that owns its expert
 * (dispatch), and the expert outputs back (combine).
 *
 * What is here: the plans (per-rank GEMM shapes, weight slices, all-to-all
 * counts, offsets and orders, bytes on the wire), weight slicing, and exact
 * sharded references that compute a layer as the ranks would and equal the
 * unsharded fp4_moe_layer_ref bit for bit. Structs that own memory have a free
 * function; every function that can fail returns fp4_status. No CUDA, no NCCL. */
#ifndef FP4_PARALLEL_H
#define FP4_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "fp4/format.h"
#include "fp4/moe.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP4_PAR_MAX_RANKS 1024 /* plans hold O(ranks^2) counts */

/* ---- contiguous splits --------------------------------------------------------------
 * count items over `ranks` ranks: rank r gets [first, first + len), the first
 * count % ranks ranks one item more than the others (so sizes differ by at
 * most one, and the larger shares come first). Used for experts and tokens. */
void fp4_par_split(int64_t count, int ranks, int rank, int64_t *first, int64_t *len);
/* The rank whose range holds item (0 <= item < count). */
int fp4_par_owner(int64_t count, int ranks, int64_t item);

/* What one element of a tensor on the wire is. */
typedef enum fp4_par_dtype {
    FP4_PAR_BF16 = 0,  /* 2 bytes */
    FP4_PAR_FP32 = 1,  /* 4 bytes */
    FP4_PAR_NVFP4 = 2  /* 1/2 byte + one E4M3 scale per 16 (the fp32 global scale is not counted) */
} fp4_par_dtype;

const char *fp4_par_dtype_name(fp4_par_dtype t); /* "bf16", "fp32", "nvfp4"; NULL out of range */
/* Bytes of one row of `cols` elements (cols a multiple of 16 for NVFP4); -1 for
 * an unknown dtype. */
double fp4_par_row_bytes(fp4_par_dtype t, int64_t cols);

/* Bytes each rank sends (and receives) in a ring all-reduce of `payload` bytes
 * over `ranks` ranks: 2 (ranks - 1) / ranks * payload; 0 for one rank. */
double fp4_par_ring_allreduce_bytes(double payload, int ranks);

/* ---- tensor parallelism ------------------------------------------------------------- */

/* One GEMM on one rank, D [m, n] = A [m, k] . B[n, k]^T. */
typedef struct fp4_par_gemm {
    int64_t m, n, k;
} fp4_par_gemm;

/* A dense MLP (or every expert of an MoE layer) over tp ranks. Rule: the split
 * is even, I % tp == 0, and each rank's K slice I / tp is a multiple of 16 so
 * that no NVFP4 block straddles two ranks (gpt-oss's I = 2880 at tp = 8 gives
 * 360: refused). */
typedef struct fp4_tp_mlp_plan {
    int tp;
    int64_t tokens, hidden, inter; /* T, H and the whole I */
    int64_t inter_shard;           /* I / tp */
    fp4_par_gemm gate_up;          /* per rank: T x 2I/tp x H (column-parallel) */
    fp4_par_gemm down;             /* per rank: T x H x I/tp (row-parallel, a partial sum) */
    fp4_par_dtype reduce_dtype;    /* the partial outputs' dtype on the wire */
    double allreduce_payload_bytes; /* one rank's partial output: T * H elements (0 at tp = 1) */
    double allreduce_rank_bytes;    /* what each rank sends in a ring all-reduce of it */
} fp4_tp_mlp_plan;

/* tokens >= 1; hidden >= 16, a multiple of 16; inter as the rule says; 1 <= tp
 * <= FP4_PAR_MAX_RANKS; reduce_dtype bf16 or fp32. */
fp4_status fp4_tp_mlp_plan_build(int64_t tokens, int64_t hidden, int64_t inter, int tp,
                                 fp4_par_dtype reduce_dtype, fp4_tp_mlp_plan *out, fp4_err *err);

/* What rank r keeps of the whole weights: gate rows [gate_first, gate_first +
 * I/tp), up rows [up_first, up_first + I/tp) of gate_up, and down's K columns
 * [down_k_first, down_k_first + I/tp). */
typedef struct fp4_tp_mlp_slices {
    int64_t gate_first, up_first, down_k_first, count;
} fp4_tp_mlp_slices;

fp4_status fp4_tp_mlp_rank_slices(const fp4_tp_mlp_plan *p, int rank, fp4_tp_mlp_slices *out,
                                  fp4_err *err);

/* Rank r's weights as new matrices (they keep the whole tensor's global scale):
 * gate_up_shard [2I/tp, H] (its gate rows, then its up rows: the layout of a
 * whole gate_up with I/tp for I) and down_shard [H, I/tp]. */
fp4_status fp4_tp_mlp_shard(const fp4_tp_mlp_plan *p, int rank, const fp4_matrix *gate_up,
                            const fp4_matrix *down, fp4_matrix *gate_up_shard,
                            fp4_matrix *down_shard, fp4_err *err);

/* Attention projections: q_heads query heads and kv_heads key/value heads of
 * head_dim each. QKV is one fused weight [(q_heads + 2 kv_heads) * head_dim, H]
 * (all q rows, then all k rows, then all v rows); O is [H, q_heads * head_dim]. */
typedef struct fp4_attn_dims {
    int64_t hidden;
    int q_heads, kv_heads;
    int64_t head_dim;
} fp4_attn_dims;

/* Rule: tp divides q_heads; kv heads are split when tp divides kv_heads and
 * replicated otherwise (then kv_heads must divide tp: every kv_replicas =
 * tp / kv_heads consecutive ranks share one kv head, as vLLM does); q_heads is a
 * multiple of kv_heads; H and each rank's O K slice (q_heads / tp * head_dim) are
 * multiples of 16. */
typedef struct fp4_tp_attn_plan {
    int tp;
    int64_t tokens;
    fp4_attn_dims dims;
    int q_heads_rank;  /* q_heads / tp */
    int kv_heads_rank; /* kv heads each rank holds (>= 1) */
    int kv_replicas;   /* ranks holding the same kv head (1 when kv heads are split) */
    fp4_par_gemm qkv;  /* per rank: T x (q_heads_rank + 2 kv_heads_rank) * head_dim x H */
    fp4_par_gemm o;    /* per rank: T x H x q_heads_rank * head_dim (a partial sum) */
    fp4_par_dtype reduce_dtype;
    double allreduce_payload_bytes; /* T * H elements (0 at tp = 1) */
    double allreduce_rank_bytes;
} fp4_tp_attn_plan;

fp4_status fp4_tp_attn_plan_build(const fp4_attn_dims *d, int64_t tokens, int tp,
                                  fp4_par_dtype reduce_dtype, fp4_tp_attn_plan *out, fp4_err *err);

/* Rank r's heads: query heads [q_first, q_first + q_heads_rank), kv heads
 * [kv_first, kv_first + kv_heads_rank); and the rows of the fused QKV weight it
 * keeps: q rows from q_row, k rows from k_row, v rows from v_row (each block
 * head_dim times the head count long); O's K columns from o_k_first. */
typedef struct fp4_tp_attn_slices {
    int q_first, kv_first;
    int64_t q_row, k_row, v_row, o_k_first;
} fp4_tp_attn_slices;

fp4_status fp4_tp_attn_rank_slices(const fp4_tp_attn_plan *p, int rank, fp4_tp_attn_slices *out,
                                   fp4_err *err);

/* ---- expert parallelism ---------------------------------------------------------------
 * Experts: rank r owns [expert_first[r], expert_first[r+1]) (fp4_par_split: the
 * first E % ep ranks one more; with E < ep the last ranks own none). Tokens:
 * rank s owns [token_first[s], token_first[s+1]) the same way.
 *
 * Dispatch. Source s sends every pair p = t*k + j of its tokens to the rank that
 * owns expert ids[p], a pair to itself included (a local copy, no wire). Its send
 * buffer is ordered by destination, and within one destination by ascending pair
 * (token, then slot); it is a section of the flat send_pairs array:
 *   send_pairs[token_first[s]*k + send_offsets[s*(ep+1) + d] + i], i < send_counts[s*ep + d]
 * is the i-th pair s sends to d. Destination d's receive buffer holds the blocks
 * of sources 0..ep-1 in turn, each in its send order:
 *   recv_pairs[recv_first[d] + recv_offsets[d*(ep+1) + s] + i] is that same pair.
 * Each rank's received rows feed a grouped plan over its own experts: local[d] is
 * fp4_moe_plan_build's plan of a routing whose "tokens" are d's received rows,
 * top-1, with local expert ids (ids[p] - expert_first[d]); an empty plan (all
 * zero) where d receives nothing or owns no expert.
 *
 * Combine: the reverse all-to-all, with the same blocks transposed: d returns
 * receive rows [recv_offsets[d*(ep+1)+s], +count) to s, which lands them at
 * send rows [send_offsets[s*(ep+1)+d], +count); then the output of pair p is at
 * row pair_send_row[p] of its owner's send buffer, and the owner sums each
 * token's k slots in slot order (fp4_moe_combine). */
typedef struct fp4_ep_plan_stats {
    int64_t max_recv_pairs;   /* the busiest rank's received pairs (local ones included) */
    double mean_recv_pairs;   /* T*k / ep */
    double recv_imbalance;    /* max / mean (1: perfectly balanced) */
    int64_t remote_pairs;     /* pairs whose expert is not on the token's rank */
    int idle_ranks;           /* ranks that receive no pair */
    int idle_experts;         /* experts with no pair */
} fp4_ep_plan_stats;

typedef struct fp4_ep_plan {
    int ranks;  /* ep */
    int experts, top_k;
    int64_t tokens, pairs;
    int64_t *expert_first;  /* [ep + 1] */
    int64_t *token_first;   /* [ep + 1] */
    int64_t *send_counts;   /* [ep * ep]: [s*ep + d] pairs s sends to d */
    int64_t *send_tokens;   /* [ep * ep]: distinct tokens among them (what a sender that
                             * sends a token once per rank would move) */
    int64_t *send_offsets;  /* [ep * (ep + 1)]: [s*(ep+1) + d] row of d's block in s's send
                             * buffer; [s*(ep+1) + ep] = s's total (its tokens * k) */
    int64_t *recv_offsets;  /* [ep * (ep + 1)]: [d*(ep+1) + s] row of s's block in d's
                             * receive buffer; [d*(ep+1) + ep] = d's total */
    int64_t *recv_first;    /* [ep + 1]: d's receive buffer in recv_pairs */
    int32_t *send_pairs;    /* [pairs] (see above) */
    int32_t *recv_pairs;    /* [pairs] */
    int32_t *pair_send_row; /* [pairs]: pair -> row in its owner's send buffer */
    int32_t *pair_recv_row; /* [pairs]: pair -> row in its expert rank's receive buffer */
    fp4_moe_plan *local;    /* [ep]: grouped plan over each rank's own experts */
    fp4_ep_plan_stats stats;
} fp4_ep_plan;

/* Build the plan of routing r (fp4_moe_routing_check'd) over ep ranks,
 * 1 <= ep <= FP4_PAR_MAX_RANKS. */
fp4_status fp4_ep_plan_build(const fp4_moe_routing *r, int ep, fp4_ep_plan *out, fp4_err *err);
void fp4_ep_plan_free(fp4_ep_plan *p);
/* Every invariant of a plan, for plans built or changed elsewhere: each pair sent
 * exactly once to the owner of its expert, offsets the prefix sums of the
 * counts, orders as documented, inverses consistent. */
fp4_status fp4_ep_plan_check(const fp4_ep_plan *p, const fp4_moe_routing *r, fp4_err *err);
/* The rank that owns expert e / token t. */
int fp4_ep_expert_rank(const fp4_ep_plan *p, int expert);
int fp4_ep_token_rank(const fp4_ep_plan *p, int64_t token);

/* Bytes of one all-to-all direction, rows of `hidden` elements of dtype. */
typedef struct fp4_ep_traffic {
    double pair_bytes;      /* one pair's row */
    double total_bytes;     /* every pair, local copies included */
    double wire_bytes;      /* pairs that cross ranks only (s != d) */
    double max_send_bytes;  /* the busiest sender's wire bytes */
    double max_recv_bytes;  /* the busiest receiver's wire bytes */
    double dedup_wire_bytes; /* wire bytes when a token goes once to each rank it needs */
} fp4_ep_traffic;

/* Dispatch carries x (bf16 or NVFP4); combine carries the expert outputs back
 * (bf16 or fp32); the combine direction's matrix is the dispatch's transposed,
 * so only the dtype differs. NVFP4 needs hidden % 16 == 0. */
fp4_status fp4_ep_traffic_of(const fp4_ep_plan *p, int64_t hidden, fp4_par_dtype dtype,
                             fp4_ep_traffic *out, fp4_err *err);

/* ---- exact sharded references ------------------------------------------------------------
 * Both compute fp4_moe_layer_ref's layer (same dims, weights, x, routing, options)
 * the way the ranks would, and write io->out (required) and, when given, io->y,
 * io->h, io->d in pair order and the encode scales used. The results equal
 * fp4_moe_layer_ref's bit for bit; docs/PARALLEL.md "Exact sharded reference"
 * says why. Dynamic W4A4 encode scales take the amax over all ranks (an
 * all-reduce of max, which is exact). */

/* Tensor parallel over tp ranks: each rank computes its gate_up slice of every
 * expert, the activation, h's quantization (W4A4) and its partial down output;
 * the partials are summed exactly (as integers: see the doc), then rounded once,
 * as the unsharded GEMM does. dims->inter is the whole I. A dense MLP is the
 * one-expert, top-1 case (fp4_par_dense_routing). */
fp4_status fp4_tp_layer_ref(const fp4_moe_dims *dims, const fp4_moe_weights *w, int tp,
                            const uint16_t *x_bf16, const fp4_moe_routing *r,
                            const fp4_moe_layer_opts *o, fp4_moe_layer_out *io, fp4_err *err);

/* Expert parallel by plan p (built from r): each owner quantizes (W4A4) its tokens,
 * dispatch moves rows by the plan's offsets into each rank's receive buffer, each
 * rank runs its own experts on what it received (grouped by p->local), combine
 * moves the outputs back and each owner sums its tokens' slots. */
fp4_status fp4_ep_layer_ref(const fp4_ep_plan *p, const fp4_moe_dims *dims,
                            const fp4_moe_weights *w, const uint16_t *x_bf16,
                            const fp4_moe_routing *r, const fp4_moe_layer_opts *o,
                            fp4_moe_layer_out *io, fp4_err *err);

/* The routing of a dense MLP: one expert, top-1, weight 1 for every token, so
 * that fp4_moe_layer_ref computes out = down(act(gate_up(x))). */
fp4_status fp4_par_dense_routing(int64_t tokens, fp4_moe_routing *out, fp4_err *err);

/* Copies of part of a matrix, keeping its global scale: rows [first, first +
 * count), or K columns [first, first + count) (both multiples of 16). */
fp4_status fp4_par_matrix_rows(const fp4_matrix *m, int64_t first, int64_t count,
                               fp4_matrix *out, fp4_err *err);
fp4_status fp4_par_matrix_cols(const fp4_matrix *m, int64_t first, int64_t count,
                               fp4_matrix *out, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
