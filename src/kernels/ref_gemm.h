/* The exact GPU reference GEMM: bit-identical to fp4_gemm_reference (the CPU
 * reference, docs/FORMAT.md). CUDA-only: include from .cu files.
 *
 * With a2 = 2 * e2m1(code) (an integer in -12..12) and s512 = e4m3(scale) * 512
 * (an integer: e4m3 subnormals are multiples of 2^-9; |s512| <= 229376):
 *   acc[m, n] = sum_kb ( sum_{k in kb} a2[m, k] * b2[n, k] ) * (s512a[m, kb] * s512b[n, kb])
 * accumulated in int64, exact for K <= 2^20 (|block sum| <= 16*144, |scale
 * product| <= 229376^2, 2^16 blocks: < 2^63). Then
 *   D[m, n] = (float)(((double)acc * 2^-20) * (double)alpha)
 * with round-to-nearest at each of the three conversions/products, as on the
 * host. Integer sums are associative, so the order of accumulation (tiles,
 * threads) cannot change a bit of the result.
 *
 * Not handled: an E4M3 NaN scale byte (0x7F / 0xFF) decodes as if it were the
 * finite 480, and a byte with the sign bit set as a negative scale. Scales
 * are UE4M3: our quantizer writes neither, the CPU reference rejects both, and
 * fp4_gemm_problem_check (fp4/backend.h) rejects them before anything
 * is uploaded. */
#ifndef FP4_KERNELS_REF_GEMM_H
#define FP4_KERNELS_REF_GEMM_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FP4_OK when fp4_ref_gemm can run [m, n, k] (m, n >= 1; k >= 16, k % 16 == 0,
 * k <= 2^20 for exactness; m <= 65535*16 for the grid); else
 * FP4_ERR_UNSUPPORTED with the reason. */
fp4_status fp4_ref_gemm_supports(int64_t m, int64_t n, int64_t k, fp4_err *err);

/* Enqueue D = alpha * A * B^T on stream, exactly. All pointers are device
 * pointers:
 *   a_codes [m, k/2] bytes, a_scales [m, k/16] UE4M3 bytes, plain row-major,
 *   b_codes [n, k/2] bytes, b_scales [n, k/16],
 *   d       [m, n] fp32 row-major.
 * Asynchronous and capturable in a CUDA graph (one kernel launch, no
 * allocation); reports the launch error only. */
fp4_status fp4_ref_gemm(const uint8_t *a_codes, const uint8_t *a_scales, const uint8_t *b_codes,
                        const uint8_t *b_scales, int64_t m, int64_t n, int64_t k, float alpha,
                        float *d, cudaStream_t stream, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
