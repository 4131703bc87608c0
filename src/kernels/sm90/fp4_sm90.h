/* fp4-sm90: our NVFP4 x NVFP4 -> bf16 GEMM for Hopper (sm_90a), C API.
 *
 * Problem ("TN"): D[m, n] = alpha * sum_k A[m, k] * B[n, k]
 *   A  [M, K] NVFP4 activations: codes [M, K/2] bytes (even k in the low
 *      nibble) and UE4M3 scales in the SWIZZLED 128x4 layout (format.h), as a
 *      quantizer produces them at run time.
 *   B  [N, K] NVFP4 weights, re-packed once by a prepare step into the layout
 *      of the kernel that will run (fp4_sm90_pack_b).
 *   D  [M, N] bf16 row-major; alpha fp32 (the product of the global scales).
 *
 * Arithmetic: every e2m1 * e4m3 product has <= 6 significant bits, so the
 * kernels dequantize (without the global scales) into fp16, exactly, and run
 * fp16 tensor cores (same rate as bf16) with fp32 accumulation; alpha is
 * applied in the epilogue. fp16 rather than bf16 because it makes the 4-bit ->
 * 16-bit conversion a few bit operations and ONE multiply: the e2m1 bits placed
 * in an fp16 pattern are the value times 2^-14 (fp16 subnormals cover code
 * 0.5), times (scale * 2^7) gives value * scale * 2^-7, still exact (a
 * multiple of 2^-24 below 65504); the 2^7 of each operand goes into alpha.
 * bf16 has no subnormal range deep enough for that trick.
 *
 * Four kernels, one file each in this folder, chosen by the rule in
 * src/backends/fp4_sm90.cu (docs/PERF.md has the measured crossovers):
 *   decode        small M: mma.sync with the weights on the 16-row side, split K
 *                 reduced through red.global.add (decode.cu);
 *   mid           mid M: wgmma with the weights as the register operand and the
 *                 tokens dequantized by a prepass, split K reduced by the
 *                 tile's co-resident CTAs (mid.cu);
 *   prefill       large M: wgmma with A dequantized into registers and B by a
 *                 prepass into bulk-copied fp16 tiles (prefill.cu);
 *   prefill-wide  large M and wide N: both operands dequantized by prepasses,
 *                 a persistent warp-specialized wgmma loop (prefill_wide.cu).
 * The environment variable FP4_SM90_KERNEL=decode|mid|prefill|prefill-wide
 * forces one of them (fp4_sm90_forced); "auto" or unset lets the rule choose. */
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

/* ---- kernels and the rule ------------------------------------------------------ */

enum {
    FP4_SM90_AUTO = 0, /* let the rule decide */
    FP4_SM90_DECODE = 1,
    FP4_SM90_MID = 2,
    FP4_SM90_PREFILL = 3,
    FP4_SM90_PREFILL_WIDE = 4
};
#define FP4_SM90_KERNELS 4

typedef struct fp4_sm90_kernel_info {
    int id;              /* FP4_SM90_DECODE .. FP4_SM90_PREFILL_WIDE */
    const char *name;    /* "decode", "mid", "prefill", "prefill-wide" */
    const char *summary; /* one line */
} fp4_sm90_kernel_info;

/* The kernel with this id, NULL if none. */
const fp4_sm90_kernel_info *fp4_sm90_kernel_by_id(int id);
/* A kernel's name or "auto" -> its id (FP4_SM90_AUTO for "auto", "" or NULL);
 * -1 if not recognised. */
int fp4_sm90_kernel_parse(const char *s);
/* The kernel FP4_SM90_KERNEL forces (read at each call: no process-wide
 * state), FP4_SM90_AUTO when unset or "auto", -1 when it names no kernel. */
int fp4_sm90_forced(void);

/* 1 when the kernel can run (m, n, k) on a GPU with num_sms multiprocessors
 * (grid limits, 32-bit indices); 0 otherwise. */
int fp4_sm90_kernel_fits(int id, int64_t m, int64_t n, int64_t k, int num_sms);

/* The rule's kernel for (m, n, k), ignoring FP4_SM90_KERNEL: the first of
 * its order that fits; FP4_SM90_AUTO when none can run the shape. */
int fp4_sm90_choose(int64_t m, int64_t n, int64_t k, int num_sms);

/* ---- operands ------------------------------------------------------------------ */

/* Bytes of the packed B (codes and scales) for a kernel and shape (0 for an
 * unknown kernel). */
size_t fp4_sm90_packed_b_codes_size(int kernel, int64_t n, int64_t k);
size_t fp4_sm90_packed_b_scales_size(int kernel, int64_t n, int64_t k);
/* Pack the weights b [n, k] (plain row-major scales) on the host into the
 * kernel's layout; codes and scales must hold the sizes above. Padding is zero. */
fp4_status fp4_sm90_pack_b(int kernel, const fp4_matrix *b, uint8_t *codes, uint8_t *scales,
                           fp4_err *err);

/* Device workspace bytes a call needs (0 if none). It must be zeroed once
 * (cudaMemset) before the first call; every call leaves it reusable, so calls
 * can be replayed in a CUDA graph. Calls sharing one workspace must be
 * serialised (same stream) and have the same kernel and sizes: decode and mid
 * keep arrival counters at an offset that depends on (m, n, k), where a call
 * of another size leaves its own data (not zeros). */
size_t fp4_sm90_workspace_size(int kernel, int64_t m, int64_t n, int64_t k);

/* ---- launch -------------------------------------------------------------------- */

typedef struct fp4_sm90_gemm_args {
    int kernel;             /* FP4_SM90_DECODE .. FP4_SM90_PREFILL_WIDE (not AUTO) */
    int64_t m, n, k;
    const uint8_t *a_codes; /* device [m, k/2]; 16-byte aligned */
    const uint8_t *a_sf;    /* device swizzled [roundup(m,128), roundup(k/16,4)]; 16-byte aligned */
    const uint8_t *b_codes; /* device, fp4_sm90_pack_b layout for this kernel */
    const uint8_t *b_sf;    /* device, fp4_sm90_pack_b layout for this kernel */
    float alpha;
    uint16_t *d;            /* device bf16 [m, n]; 8-byte aligned */
    void *workspace;        /* device, fp4_sm90_workspace_size bytes, zeroed once */
    size_t workspace_bytes;
    int num_sms;            /* multiprocessor count of the device */
    /* Configuration overrides, 0 = the kernel's own choice (the backend never
     * sets them; tests use them to reach every configuration):
     *   splits  decode, mid: K splits across CTAs (clamped to the k-steps, and
     *           for mid to the CTAs that can co-reside);
     *   tile_n  mid: token tile 64, 128 or 256; prefill, prefill-wide: 128 or 256;
     *   ctas    prefill-wide: the persistent grid (clamped to the tiles);
     *   group   prefill-wide: row tiles a group of the tile order, -1 the
     *           plain order (raster.h), 0 the automatic group. */
    int splits, tile_n, ctas, group;
} fp4_sm90_gemm_args;

/* One-time setup on the current device (raises the kernels' dynamic shared
 * memory limits). Call before the first launch, outside graph capture. */
fp4_status fp4_sm90_init(fp4_err *err);

/* Check the arguments (sizes, alignment, kernel, workspace): FP4_ERR_SHAPE,
 * FP4_ERR_INVALID_ARG or FP4_ERR_UNSUPPORTED with the reason when this call
 * cannot run. No CUDA calls. */
fp4_status fp4_sm90_check(const fp4_sm90_gemm_args *a, fp4_err *err);

/* Enqueue the GEMM on stream: asynchronous, no allocation, no
 * synchronisation, capturable in a CUDA graph. Runs fp4_sm90_check first. */
fp4_status fp4_sm90_gemm(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err);

/* FP4_OK when the current device is sm_90 and this build holds the kernel's
 * machine code (the 90a target); else FP4_ERR_UNSUPPORTED naming the kernel. */
fp4_status fp4_sm90_wgmma_runs_here(const void *kernel, const char *name, fp4_err *err);

/* ---- per-kernel entry points (one file each; the table in
 * src/backends/fp4_sm90.cu dispatches to them) ---------------------------------- */

/* decode.cu */
size_t fp4_sm90_decode_codes_size(int64_t n, int64_t k);
size_t fp4_sm90_decode_scales_size(int64_t n, int64_t k);
void fp4_sm90_decode_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales);
size_t fp4_sm90_decode_ws_size(int64_t m, int64_t n, int64_t k);
int fp4_sm90_decode_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_decode_init(fp4_err *err);
fp4_status fp4_sm90_decode_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err);

/* mid.cu */
size_t fp4_sm90_mid_codes_size(int64_t n, int64_t k);
size_t fp4_sm90_mid_scales_size(int64_t n, int64_t k);
void fp4_sm90_mid_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales);
size_t fp4_sm90_mid_ws_size(int64_t m, int64_t n, int64_t k);
int fp4_sm90_mid_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_mid_init(fp4_err *err);
fp4_status fp4_sm90_mid_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err);
/* its token tile width (64, 128, 256) and K splits for a shape; tile_n and
 * splits > 0 force them (as in fp4_sm90_gemm_args) */
void fp4_sm90_mid_cfg(int64_t m, int64_t n, int64_t k, int num_sms, int tile_n, int splits,
                      int *bn, int *s);

/* prefill.cu; prefill-wide shares its packing and its weight prepass */
size_t fp4_sm90_prefill_codes_size(int64_t n, int64_t k);
size_t fp4_sm90_prefill_scales_size(int64_t n, int64_t k);
void fp4_sm90_prefill_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales);
size_t fp4_sm90_prefill_ws_size(int64_t m, int64_t n, int64_t k);
int fp4_sm90_prefill_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_prefill_init(fp4_err *err);
fp4_status fp4_sm90_prefill_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err);
/* the tile width (128 or 256) the rule picks for a shape */
int fp4_sm90_prefill_bn(int64_t m, int64_t n, int64_t k, int num_sms);
/* the weight prepass alone: the packed B -> fp16 tiles at the start of the
 * workspace (fp4_sm90_prefill_ws_size bytes of it) */
fp4_status fp4_sm90_prefill_b_tiles(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err);

/* prefill_wide.cu (packed B: fp4_sm90_prefill_*) */
size_t fp4_sm90_prefill_wide_ws_size(int64_t m, int64_t n, int64_t k);
int fp4_sm90_prefill_wide_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_prefill_wide_init(fp4_err *err);
fp4_status fp4_sm90_prefill_wide_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                        fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
