/* fp4-sm90: our NVFP4 x NVFP4 -> bf16 GEMM for Hopper (sm_90a), C API.
 *
 * Problem ("TN"): D[m, n] = alpha * sum_k A[m, k] * B[n, k]
 *   A  [M, K] NVFP4 activations: codes [M, K/2] bytes (even k in the low
 *      nibble) and UE4M3 scales in the SWIZZLED 128x4 layout (format.h), as a
 *      quantizer produces them at run time.
 *   B  [N, K] NVFP4 weights, re-packed once by a prepare step into the layout
 *      of the kernel family that will run (fp4_sm90_pack_b).
 *   D  [M, N] bf16 row-major; alpha fp32 (the product of the global scales).
 *
 * Arithmetic: every e2m1 * e4m3 product has <= 6 significant bits, so the
 * kernels dequantize (without the global scales) into fp16 registers, exactly,
 * and run fp16 tensor cores (mma.sync m16n8k16, same rate as bf16) with fp32
 * accumulation; alpha is applied in the epilogue. fp16 rather than bf16 because
 * it lets the 4-bit -> 16-bit conversion be a few bit operations and ONE
 * multiply: the e2m1 bits placed in an fp16 pattern are the value times 2^-14
 * (fp16 subnormals cover code 0.5), times (scale * 2^7) gives value * scale *
 * 2^-7, still exact (a multiple of 2^-24 below 65504); the 2^7 goes into alpha.
 * bf16 has no subnormal range deep enough for that trick.
 *
 * Kernel families (numbered variants, see fp4_sm90_variant_at):
 *   1 "v1-decode"   small M: swap AB (weights are the MMA's 16-row side, tokens
 *                   the 8-wide side), weights streamed once, pre-shuffled so one
 *                   16-byte load feeds a lane's MMA fragments; split K across
 *                   blocks, reduced with fp32 vector atomics in a workspace and
 *                   a "last block writes D" counter (no second launch).
 *   3 "v3-decode"   small M, v1's data layout (same packed B) with loads
 *                   issued first, a rolling register pipeline, cheap token
 *                   conversion and split K reduced inside a thread-block
 *                   cluster through distributed shared memory (no workspace).
 *   2 "v2-prefill"  large M: 128x128x64 tiles, 8 warps (64x32 each), 4-stage
 *                   cp.async pipeline of packed codes + scales, dequantized
 *                   from shared memory straight into MMA fragments.
 *   4 "v4-decode"   small M: weights packed so that a lane's 16 k of a k-step
 *                   are one scale block, so its token fragment is one 8-byte
 *                   load of A (no shared-memory staging); a warp covers 32 or
 *                   64 rows and a K range; split K through red.global.add.v4
 *                   and an arrival counter (src/kernels/fp4_sm90_decode4.cu).
 *   5 "v5-prefill"  large M: wgmma (sm_90a) (src/kernels/fp4_sm90_prefill5.cu).
 *   6 "v6-decode"   small M: v4's packed weights; the 8 warps of a block own
 *                   different rows of one K range, so the block's tokens are
 *                   dequantized once into shared memory and read as MMA
 *                   fragments by every warp (src/kernels/fp4_sm90_decode6.cu).
 *   7 "v7-decode"   small M: v4's packed weights; one block per 16-row tile
 *                   and token chunk over the whole K (no split K, no
 *                   workspace): a producer warp streams the tile with
 *                   cp.async.bulk into an mbarrier ring, 8 consumer warps
 *                   share its k-steps and reduce in shared memory
 *                   (src/kernels/fp4_sm90_decode7.cu).
 *   8 "v8-prefill"  large M: v5's tiles and A path; a prepass kernel
 *                   dequantizes B once per call into fp16 tiles laid out as
 *                   the swizzled shared-memory tiles (workspace), which the
 *                   main kernel bulk-copies into a 6-stage ring: no B
 *                   arithmetic in the wgmma loop (src/kernels/fp4_sm90_prefill8.cu).
 *   9 "v9-mid"      mid M (and decode): v8's main loop with the operands
 *                   swapped: the weights (packed in contiguous 128-row x
 *                   k-step blocks, standard swizzled scales) are the
 *                   wgmma A operand dequantized in registers, the tokens a
 *                   per-call prepass's fp16 tiles (64, 128 or 256 wide); K
 *                   split over the grid until the GPU is full, reduced with
 *                   red.global.add and a last-CTA epilogue (same file).
 *  10 "v10-decode"  small M: v4's packed weights and arithmetic; every warp
 *                   streams its K range with cp.async.bulk into its own
 *                   shared-memory ring (147 KB a SM in flight), split K
 *                   reduced inside a cluster through distributed shared
 *                   memory, persistent over tiles beyond one wave
 *                   (src/kernels/fp4_sm90_decode10.cu).
 *  11 "v11-mid"     mid M: v9's packing, prepass and main loop; the S CTAs of
 *                   a tile launched cooperatively store their partial tiles
 *                   into their own slices, meet at a per-tile barrier and
 *                   each reduce 1/S of the tile into D (no atomics,
 *                   deterministic; fp4_sm90_prefill8.cu).
 *  12 "v12-prefill" large M: v8's packing, prepass, tiles and A path; a
 *                   producer warp fills the ring (full mbarriers: cp.async
 *                   arrivals + bulk-copy bytes) and the two consumer
 *                   warpgroups release slots (empty mbarriers): no CTA-wide
 *                   barrier in the k loop (src/kernels/fp4_sm90_prefill12.cu).
 *  13 "v13-mid"     mid M: v11's packing, token prepass, split rule and
 *                   slices epilogue with v12's producer warp and mbarriers;
 *                   the producer bulk-copies the weights' first stages
 *                   before waiting for the token prepass (same file).
 *  14 "v14-prefill" large M: v8's packing, prepass and tiles; a producer
 *                   warpgroup dequantizes A into swizzled fp16 shared-memory
 *                   tiles and the consumers issue wgmmas with both operands
 *                   by descriptor (src/kernels/fp4_sm90_prefill14.cu).
 *  15 "v15-mid"     mid M: v11's packing, token prepass, split rule, launch
 *                   and slices epilogue with v14's main loop (the weights
 *                   dequantized by the producers; same file).
 *  16 "v16-prefill" large M: v8's packing and weight prepass; a second
 *                   prepass dequantizes A into fp16 tiles of v14's layout
 *                   (workspace), so v14's consumers read both operands from
 *                   bulk-copied tiles and one producer thread only copies;
 *                   persistent CTAs (same file).
 * The choice (fp4_sm90_choose) is explicit and can be forced by
 * the environment variable
 * FP4_SM90_KERNEL=<name>|<alias>|<number> (fp4_sm90_variant_parse).
 */
#ifndef FP4_SM90_H
#define FP4_SM90_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "fp4/format.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- variants ---------------------------------------------------------------- */

enum {
    FP4_SM90_AUTO = 0,    /* let fp4_sm90_choose decide */
    FP4_SM90_V1_DECODE = 1,
    FP4_SM90_V2_PREFILL = 2,
    FP4_SM90_V3_DECODE = 3,
    FP4_SM90_V4_DECODE = 4,
    FP4_SM90_V5_PREFILL = 5,
    FP4_SM90_V6_DECODE = 6,
    FP4_SM90_V7_DECODE = 7,
    FP4_SM90_V8_PREFILL = 8,
    FP4_SM90_V9_MID = 9,
    FP4_SM90_V10_DECODE = 10,
    FP4_SM90_V11_MID = 11,
    FP4_SM90_V12_PREFILL = 12,
    FP4_SM90_V13_MID = 13,
    FP4_SM90_V14_PREFILL = 14,
    FP4_SM90_V15_MID = 15,
    FP4_SM90_V16_PREFILL = 16
};

/* One-line summaries of the newer variants (kept next to their kernels). */
#define FP4_SM90_V4_SUMMARY "small M: k-permuted weights, token fragments loaded per warp, split K via red.add"
#define FP4_SM90_V5_SUMMARY "large M: wgmma, A dequantized in registers, B dequantized to swizzled smem"
#define FP4_SM90_V8_SUMMARY "large M: v5 with B dequantized by a prepass into swizzled fp16 tiles, bulk-copied into a 6-stage ring"
#define FP4_SM90_V7_SUMMARY "small M: one block per 16-row tile over all K, weights streamed by cp.async.bulk, no split K"
#define FP4_SM90_V9_SUMMARY "mid M: v8's loop with weights as wgmma A (registers) and tokens as B (prepass tiles), split K"
#define FP4_SM90_V10_SUMMARY "small M: v4's math, weights bulk-copied into a per-warp smem ring, split K reduced in a cluster (DSMEM)"
#define FP4_SM90_V11_SUMMARY "mid M: v9 with split K reduced by plain stores, a per-tile barrier (cooperative launch) and a 1/S share a CTA"
#define FP4_SM90_V12_SUMMARY "large M: v8's operands and prepass, a producer warp and full/empty mbarriers instead of the per-step barrier"
#define FP4_SM90_V13_SUMMARY "mid M: v11 (tokens by prepass, split K by slices) with v12's producer warp; weights' first copies before the prepass ends"
#define FP4_SM90_V14_SUMMARY "large M: v8's operands and prepass; a producer warpgroup dequantizes A into smem, wgmma with both operands in smem"
#define FP4_SM90_V16_SUMMARY "large M: v14's consumers with A dequantized by a prepass too: both operands bulk-copied from fp16 tiles, persistent"
#define FP4_SM90_V15_SUMMARY "mid M: v11's operands, prepass, splits and epilogue with v14's loop (weights dequantized into smem by producers)"
#define FP4_SM90_V6_SUMMARY "small M: v4's weights, tokens dequantized once per block into smem, 8 warps share a K range"

typedef struct fp4_sm90_variant {
    int id;              /* FP4_SM90_V* */
    const char *name;    /* "v1-decode" */
    const char *summary; /* one line */
} fp4_sm90_variant;

int fp4_sm90_variant_count(void);
/* i in [0, count): the i-th variant; NULL if out of range. */
const fp4_sm90_variant *fp4_sm90_variant_at(int i);
/* The variant with this id, NULL if none. */
const fp4_sm90_variant *fp4_sm90_variant_by_id(int id);
/* Parse a variant's name ("v1-decode"), its alias ("decode", "prefill",
 * "decode3", "decode4", "prefill5"), its number or "auto" into
 * an id (FP4_SM90_AUTO for "auto"); -1 if not recognised. */
int fp4_sm90_variant_parse(const char *s);

/* The forced variant: FP4_SM90_KERNEL from the environment (read at each
 * prepare), else FP4_SM90_AUTO. There is no process-wide setter: no global
 * mutable state. */
int fp4_sm90_forced(void);

/* 1 when the variant can run (m, n, k) (shared-memory slices fit). */
int fp4_sm90_variant_fits(int id, int64_t m, int64_t n, int64_t k, int num_sms);

/* The variant to run for (m, n, k) on a GPU with num_sms multiprocessors,
 * honouring the forced variant. The rule (see the definition for the
 * measurements behind it):
 *   m >= 512: v5-prefill (v2-prefill where v5 cannot run);
 *   m <  512: v4-decode (where v4 cannot run: v3-decode, v1-decode up to
 *             m = 256, else the prefill rule). */
int fp4_sm90_choose(int64_t m, int64_t n, int64_t k, int num_sms);

/* ---- operands ------------------------------------------------------------------ */

/* Bytes of the packed B (codes and scales) for a variant and shape. */
size_t fp4_sm90_packed_b_codes_size(int variant, int64_t n, int64_t k);
size_t fp4_sm90_packed_b_scales_size(int variant, int64_t n, int64_t k);
/* Pack the weights b [n, k] (plain scales) on the host into the variant's
 * layout; codes and scales must hold the sizes above. Padding is zero. */
fp4_status fp4_sm90_pack_b(int variant, const fp4_matrix *b, uint8_t *codes, uint8_t *scales,
                           fp4_err *err);

/* Device workspace bytes a call needs (0 if none). It must be zeroed once
 * (cudaMemset) before the first call; every call leaves it zeroed again, so
 * calls can be replayed in a CUDA graph. Calls sharing one workspace must be
 * serialised (same stream). */
size_t fp4_sm90_workspace_size(int variant, int64_t m, int64_t n, int64_t k);

/* ---- launch -------------------------------------------------------------------- */

#define FP4_SM90_MAX_CLUSTER 8 /* portable thread-block cluster size (v10's K splits) */

typedef struct fp4_sm90_gemm_args {
    int variant;            /* one of FP4_SM90_V1_DECODE .. FP4_SM90_V16_PREFILL (not AUTO) */
    int64_t m, n, k;
    const uint8_t *a_codes; /* device [m, k/2]; 16-byte aligned */
    const uint8_t *a_sf;    /* device swizzled [roundup(m,128), roundup(k/16,4)]; 16-byte aligned */
    const uint8_t *b_codes; /* device, fp4_sm90_pack_b layout for this variant */
    const uint8_t *b_sf;    /* device, fp4_sm90_pack_b layout for this variant */
    float alpha;
    uint16_t *d;            /* device bf16 [m, n]; 8-byte aligned */
    void *workspace;        /* device, fp4_sm90_workspace_size bytes, zeroed once */
    size_t workspace_bytes;
    int num_sms;            /* multiprocessor count of the device */
    int splits;             /* decode: K splits across blocks, 0 = automatic */
    const int *cluster_fit; /* v10: [s] = clusters of s blocks resident at once, s = 1..
                             * FP4_SM90_MAX_CLUSTER (fp4_sm90_decode10_cluster_fit);
                             * NULL: assume num_sms / s */
} fp4_sm90_gemm_args;

/* One-time setup on the current device (raises the kernels' dynamic shared
 * memory limits). Call before the first launch, outside graph capture. */
fp4_status fp4_sm90_init(fp4_err *err);

/* Check the arguments (sizes, alignment, variant): FP4_ERR_UNSUPPORTED with
 * the reason when this call cannot run. No CUDA calls. */
fp4_status fp4_sm90_check(const fp4_sm90_gemm_args *a, fp4_err *err);

/* Enqueue the GEMM on stream: asynchronous, no allocation, no
 * synchronisation, capturable in a CUDA graph. Runs fp4_sm90_check first. */
fp4_status fp4_sm90_gemm(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err);

/* The split count the decode kernel uses for this shape when splits == 0. */
int fp4_sm90_decode_splits(int64_t m, int64_t n, int64_t k, int num_sms);

/* Per-family entry points, one kernel file each (the family table in
 * src/backends/fp4_sm90.cu dispatches to them): sizes of the packed B and of
 * the workspace, the host packer, fits (can the family run this shape), the
 * one-time init and the launch. Declared once here so every definition is
 * checked against its use. */
size_t fp4_sm90_decode_codes_size(int64_t n, int64_t k);
size_t fp4_sm90_decode_scales_size(int64_t n, int64_t k);
size_t fp4_sm90_decode_ws_size(int64_t m, int64_t n, int64_t k);
void fp4_sm90_decode_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales);
fp4_status fp4_sm90_decode_init(fp4_err *err);
fp4_status fp4_sm90_decode_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                  fp4_err *err);

size_t fp4_sm90_prefill_codes_size(int64_t n, int64_t k);
size_t fp4_sm90_prefill_scales_size(int64_t n, int64_t k);
void fp4_sm90_prefill_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales);
fp4_status fp4_sm90_prefill_init(fp4_err *err);
fp4_status fp4_sm90_prefill_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                   fp4_err *err);

/* v3 uses v1's packing; fits: its token slice fits shared memory */
int fp4_sm90_decode3_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_decode3_init(fp4_err *err);
fp4_status fp4_sm90_decode3_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                   fp4_err *err);

/* v4's packing is also v6's, v7's and v10's */
size_t fp4_sm90_decode4_codes_size(int64_t n, int64_t k);
size_t fp4_sm90_decode4_scales_size(int64_t n, int64_t k);
void fp4_sm90_decode4_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales);
size_t fp4_sm90_decode4_ws_size(int64_t m, int64_t n, int64_t k);
int fp4_sm90_decode4_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_decode4_init(fp4_err *err);
fp4_status fp4_sm90_decode4_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                   fp4_err *err);

/* v5's packing is also v8's */
size_t fp4_sm90_prefill5_codes_size(int64_t n, int64_t k);
size_t fp4_sm90_prefill5_scales_size(int64_t n, int64_t k);
void fp4_sm90_prefill5_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales);
int fp4_sm90_prefill5_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_prefill5_init(fp4_err *err);
fp4_status fp4_sm90_prefill5_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                    fp4_err *err);
/* For tests and the development harness: the tile width launch picks for a
 * shape, and a launch with it forced (bn 0 = automatic, 128, 256, or -128 =
 * 128 with two CTAs per SM). */
int fp4_sm90_prefill5_bn(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_prefill5_launch_bn(const fp4_sm90_gemm_args *a, int bn, cudaStream_t stream,
                                       fp4_err *err);

size_t fp4_sm90_decode6_ws_size(int64_t m, int64_t n, int64_t k);
int fp4_sm90_decode6_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_decode6_init(fp4_err *err);
fp4_status fp4_sm90_decode6_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                   fp4_err *err);

int fp4_sm90_decode7_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_decode7_init(fp4_err *err);
fp4_status fp4_sm90_decode7_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                   fp4_err *err);

size_t fp4_sm90_prefill8_ws_size(int64_t m, int64_t n, int64_t k);
int fp4_sm90_prefill8_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_prefill8_init(fp4_err *err);
fp4_status fp4_sm90_prefill8_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                    fp4_err *err);
/* For tests and the development harness: the tile width launch picks (128 or
 * 256), and a launch with the configuration forced: bn 0 = automatic, 128,
 * 256, or -128 (128 wide, two CTAs per SM); stages 0 = the default, else 4..6
 * (P6_FOR_EACH_CFG lists the instantiated ones); bulk -1 = the default, 0 = B
 * by 16-byte cp.async, 1 = B by bulk copies; parts 1 = the prepass only, 2 =
 * the main kernel only (it reads the workspace the last prepass wrote), 3 = both. */
int fp4_sm90_prefill8_bn(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_prefill8_launch_cfg(const fp4_sm90_gemm_args *a, int bn, int stages, int bulk,
                                        int parts, cudaStream_t stream, fp4_err *err);

/* v12-prefill (fp4_sm90_prefill12.cu): v8's packing, workspace, fits and
 * prepass; launch_cfg forces the tile width (0 = v8's rule, 128, 256) and the
 * ring depth (0 = the default, else an instantiated one: P12_FOR_EACH_CFG) */
fp4_status fp4_sm90_prefill12_init(fp4_err *err);
fp4_status fp4_sm90_prefill12_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                     fp4_err *err);
fp4_status fp4_sm90_prefill12_launch_cfg(const fp4_sm90_gemm_args *a, int bn, int stages,
                                         cudaStream_t stream, fp4_err *err);

/* v10-decode: v4's packing, no workspace */
int fp4_sm90_decode10_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_decode10_init(fp4_err *err);
fp4_status fp4_sm90_decode10_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                    fp4_err *err);
/* fit[s] (s = 1..FP4_SM90_MAX_CLUSTER; fit[0] = 0): how many clusters of s of
 * its blocks the current device runs at once (cudaOccupancyMaxActiveClusters) */
fp4_status fp4_sm90_decode10_cluster_fit(int fit[FP4_SM90_MAX_CLUSTER + 1], int num_sms,
                                         fp4_err *err);
/* its row tiles a warp (2 or 4) and K splits (cluster size) for a shape;
 * splits > 0 forces that count (clamped to 8 and the k-steps); cluster_fit
 * as in fp4_sm90_gemm_args (NULL: num_sms / s) */
void fp4_sm90_decode10_cfg(int64_t m, int64_t n, int64_t k, int num_sms, int splits,
                           const int *cluster_fit, int *rt, int *s);

/* v9-mid (in fp4_sm90_prefill8.cu): the weights' codes in (128-row tile, k-step)
 * blocks of 4 KB, their scales in the standard swizzled layout */
size_t fp4_sm90_mid9_codes_size(int64_t n, int64_t k);
size_t fp4_sm90_mid9_scales_size(int64_t n, int64_t k);
void fp4_sm90_mid9_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales);
size_t fp4_sm90_mid9_ws_size(int64_t m, int64_t n, int64_t k);
int fp4_sm90_mid9_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_mid9_init(fp4_err *err);
fp4_status fp4_sm90_mid9_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err);
/* its token tile width (64, 128, 256) and K splits for a shape (forced > 0: that
 * split count, clamped to the k-steps) */
void fp4_sm90_mid9_cfg(int64_t m, int64_t n, int64_t k, int num_sms, int forced, int *bn,
                       int *splits);

/* v11-mid (fp4_sm90_prefill8.cu): v9's packing and fits; its own workspace
 * (token tiles, fp32 slices, counters: once zeroed) and split rule (v9's,
 * clamped so that the CTAs co-reside: tiles x splits <= num_sms) */
size_t fp4_sm90_mid11_ws_size(int64_t m, int64_t n, int64_t k);
fp4_status fp4_sm90_mid11_init(fp4_err *err);
fp4_status fp4_sm90_mid11_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err);
void fp4_sm90_mid11_cfg(int64_t m, int64_t n, int64_t k, int num_sms, int forced, int *bn,
                        int *splits);
/* v11's launch (checks, token prepass, cooperative and programmatic dependent
 * launch of the main kernel on grid (weight tiles, token tiles, splits)) with
 * the main kernel, its shared memory and block size picked by `pick` for the
 * token tile width bn (64, 128, 256): v11's own, or v13's */
typedef fp4_status (*fp4_sm90_mid11_pick_fn)(int bn, const void **kernel, int *smem, int *threads,
                                            fp4_err *err);
fp4_status fp4_sm90_mid11_launch_with(const fp4_sm90_gemm_args *a, const char *name,
                                      fp4_sm90_mid11_pick_fn pick, cudaStream_t stream, fp4_err *err);
/* FP4_OK when the current device is sm_90 and this build holds the kernel's
 * machine code (the 90a target); else FP4_ERR_UNSUPPORTED naming the variant */
fp4_status fp4_sm90_wgmma_runs_here(const void *kernel, const char *name, fp4_err *err);
/* The launch of a main kernel with v8's parameters (aq, asf, the workspace's
 * weight tiles, d, M, N, K, k-steps, alpha x 2^14, no split-K workspace) on
 * the grid (m tiles of 128, n tiles of bn): v8, v12, v14 */
fp4_status fp4_sm90_wg_launch_tiles(const void *kernel, int smem, int threads, int bn,
                                    const fp4_sm90_gemm_args *a, const uint8_t *aq,
                                    const uint8_t *asf, cudaStream_t stream, fp4_err *err);
/* v13-mid (fp4_sm90_prefill12.cu): v11's packing, workspace, rule and launch
 * with v12's warp-specialized main loop */
fp4_status fp4_sm90_mid13_init(fp4_err *err);
fp4_status fp4_sm90_mid13_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err);
/* v14-prefill (fp4_sm90_prefill14.cu): v8's packing, workspace, fits and
 * prepass; launch_cfg forces the tile width (0 = v8's rule, 128, 256) */
fp4_status fp4_sm90_prefill14_init(fp4_err *err);
fp4_status fp4_sm90_prefill14_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                     fp4_err *err);
fp4_status fp4_sm90_prefill14_launch_cfg(const fp4_sm90_gemm_args *a, int bn, cudaStream_t stream,
                                         fp4_err *err);
/* v15-mid (same file): v11's packing, workspace, rule and launch with v14's
 * main loop */
fp4_status fp4_sm90_mid15_init(fp4_err *err);
fp4_status fp4_sm90_mid15_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err);
/* v16-prefill (same file): v8's packing and weight prepass; v8's fits with
 * at most 65535 row tiles (the A prepass's grid y); its own
 * workspace (v8's, then the A tiles); launch_cfg forces the tile width (0 =
 * v8's rule, 128, 256), the persistent grid (ctas 0 = automatic; the tile
 * count = one tile a CTA), the tile order's group of row tiles (-1 =
 * automatic, fp4_raster_group; 0 = the plain order; fp4_sm90_raster.h) and
 * the parts (1 = both prepasses, 2 = the main kernel on the tiles the last
 * prepasses wrote, 3 = all) */
size_t fp4_sm90_prefill16_ws_size(int64_t m, int64_t n, int64_t k);
int fp4_sm90_prefill16_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_prefill16_init(fp4_err *err);
fp4_status fp4_sm90_prefill16_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                     fp4_err *err);
fp4_status fp4_sm90_prefill16_launch_cfg(const fp4_sm90_gemm_args *a, int bn, int ctas, int group,
                                         int parts, cudaStream_t stream, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
