/* fp4-sm90 MoE: one grouped NVFP4 GEMM over all experts of a projection on
 * Hopper (moe.cu), for decode-sized batches where the expert weights' bytes
 * decide the time.
 *
 * Grouped rows r = 0..T*k-1 are the (token, slot) pairs sorted by expert
 * (fp4_moe_plan: expert e owns rows [expert_offsets[e], expert_offsets[e+1]),
 * row r holds pair pair_index[r] = t*k + j). For each row, with e its expert:
 *   D[pair_index[r], :] = a_global * b_global[e] * A[arow(r), :] . B_e^T   (bf16)
 * arow(r) = pair_index[r] / top_k (gate_up: A is [T, K]) or pair_index[r] (down:
 * A is [T*k, K]). A is bf16 (W4A16) or NVFP4 with row-major scales (W4A4). Both
 * modes multiply exactly dequantized values (E2M1 x E4M3 fits a bf16) on the bf16
 * tensor cores with fp32 sums. Optionally D is then combined per token:
 *   d_combined[t, :] = sum_j route_weights[t*k + j] * D[t*k + j, :]   (fp32, j in order)
 *
 * The call is asynchronous on its stream, allocates nothing, never synchronises
 * with the host and can be captured in a CUDA graph; experts without tokens cost
 * nothing. */
#ifndef FP4_SM90_MOE_H
#define FP4_SM90_MOE_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "fp4/format.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Weights of all E experts of one projection (each [n, k] NVFP4), packed once on the host. */
size_t fp4_sm90_moe_packed_size(int experts, int64_t n, int64_t k);
/* w: [experts] matrices [n, k]; host_out: fp4_sm90_moe_packed_size bytes; globals_out: [experts] each expert's global (decode) scale. */
fp4_status fp4_sm90_moe_pack(const fp4_matrix *w, int experts, void *host_out, float *globals_out, fp4_err *err);

typedef struct fp4_sm90_moe_args {
    int experts, top_k;
    int64_t tokens;                /* T */
    int64_t n, k;                  /* every expert's weight is [n, k]; k % 16 == 0 (k = 2880 must work) */
    int w4a16;                     /* 1: bf16 activations; 0: NVFP4 activations (W4A4) */
    int a_per_pair;                /* activation row of grouped row r: 0 -> token pair_index[r] / top_k (gate_up); 1 -> pair_index[r] (down: one row per (token, slot)) */
    const uint16_t *a_bf16;        /* w4a16: device [rows, k] bf16 */
    const uint8_t *a_codes;        /* w4a4: device [rows, k/2] */
    const uint8_t *a_scales;       /* w4a4: device [rows, k/16] row-major E4M3 */
    float a_global;                /* w4a4: A's global (decode) scale; w4a16: 1 */
    const int32_t *expert_offsets; /* device [E+1] (fp4_moe_plan) */
    const int32_t *pair_index;     /* device [T*k] grouped row -> pair t*k+j (fp4_moe_plan) */
    const void *b_packed;          /* device, fp4_sm90_moe_pack's layout */
    const float *b_global;         /* device [E] */
    uint16_t *d;                   /* device bf16 [T*k, n]: row = pair t*k+j; D = a_global*b_global[e] * A_row . B_e^T */
    const float *route_weights;    /* NULL, or device [T*k]: then also combine ... */
    float *d_combined;             /* ... into device fp32 [T, n]: sum_j route_weights[t*k+j] * d[t*k+j, :] (bf16 values as written) */
    void *workspace; size_t workspace_bytes;
} fp4_sm90_moe_args;

/* Device workspace bytes a call needs (0: none, workspace may be NULL), for
 * the call's a_per_pair and w4a16. It must be zeroed once (cudaMemset) before
 * the first call. Its first fp4_sm90_moe_split_workspace_size bytes are the
 * streaming path's split-K counters and sums (K is split across blocks when
 * there are too few output tiles to fill the GPU, at small T*k); every call
 * leaves them zeroed, so calls replay in a CUDA graph. After them, rewritten
 * by every call: the streaming path's bf16 rows of W4A4 activations where
 * fp4_sm90_moe_dequant_prepass says so, then, where the wide path runs, its
 * own bf16 copy of the activations (rows x K x 2 bytes each). Calls sharing
 * a workspace must be serialised (one stream). */
size_t fp4_sm90_moe_workspace_size(int experts, int top_k, int64_t tokens, int64_t n, int64_t k,
                                   int a_per_pair, int w4a16);
size_t fp4_sm90_moe_split_workspace_size(int experts, int top_k, int64_t tokens, int64_t n,
                                         int64_t k);

/* The two paths, chosen per expert on the device from its token count:
 * - streaming (experts with fewer than 40 tokens): mma.sync, the weights
 *   decoded for every 32 tokens, split K when units are few;
 * - wide (40 tokens or more): wgmma, each weight decoded once for up to 128
 *   tokens, after a prepass that copies the activations to bf16.
 * Each path is one launch over its experts. fp4_sm90_moe_paths says which
 * launches a call of this size makes on this GPU: below T = 40 only the
 * streaming one (an expert sees a token at most once), from there both (each
 * finds its own experts); *wide_from (may be NULL) gets the split.
 * FP4_SM90_MOE_PATH=stream or =wide forces one path for every expert;
 * FP4_SM90_MOE_WIDE_TOKENS=n moves the split. */
#define FP4_SM90_MOE_STREAM 1
#define FP4_SM90_MOE_WIDE 2
int fp4_sm90_moe_paths(int experts, int top_k, int64_t tokens, int *wide_from);

/* 1 where a W4A4 call of this size dequantizes the activations once, by a
 * prepass into bf16 rows of the workspace, for the streaming path (which
 * then runs its W4A16 loop on them): where the rows are shared by the top-k
 * (a_per_pair == 0, top-k > 1) and experts average 8 to 39 pairs (8 E <= T * top-k <
 * 40 E). Elsewhere each block decodes the codes it stages, with no extra
 * launch. 0 for W4A16. FP4_SM90_MOE_PREPASS=on or =off forces it. */
int fp4_sm90_moe_dequant_prepass(int experts, int top_k, int64_t tokens, int a_per_pair,
                                 int w4a16);

/* Asynchronous on stream, no allocation, no host sync, graph-capturable. Experts with 0 tokens cost nothing. */
fp4_status fp4_sm90_moe_gemm(const fp4_sm90_moe_args *a, cudaStream_t stream, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
