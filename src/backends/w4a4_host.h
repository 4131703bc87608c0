/* Host side of the two W4A4 backends, `quantize` (the GPU quantizer alone) and
 * `w4a4-sm90` (quantizer + fp4-sm90 GEMM): the bf16 activations they start
 * from, and the bytes they move. C; tested on the CPU by tests/test_w4a4.c.
 *
 * The activations. Both backends time the inference step that starts from
 * bf16 activations, while the engine hands every backend the same NVFP4
 * problem. So A is dequantized to bf16,
 *   x = bf16(e2m1(code) * e4m3(scale) * A.global_scale)
 * and quantized back with the static scale of a checkpoint's input_scale,
 * encode_scale = 1 / A.global_scale. x is NOT exact in bf16 in general (the
 * product has up to 6 + 24 significant bits); the round trip is exact anyway
 * whenever every non-zero block of A holds a code of magnitude 6, which is
 * what the quantizer produces unless a block's scale is an E4M3 subnormal:
 * the bf16 and fp32 roundings move each value by less than 2^-8 relative,
 * while the nearest E4M3 and E2M1 rounding boundaries are at least 2^-5 and
 * 1/6 away. Data that is not quantizer output (random codes: --data codes)
 * does not round-trip; the backends check the GPU quantizer's output bit for
 * bit against A in prepare() and refuse (unsupported) when it differs. */
#ifndef FP4_W4A4_HOST_H
#define FP4_W4A4_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "fp4/backend.h"
#include "fp4/format.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x [a->rows, a->cols] bf16 bit patterns as above; *encode_scale = 1 /
 * a->global_scale. FP4_ERR_INVALID_ARG when the global scale is not a
 * positive finite number with a finite inverse. */
fp4_status fp4_w4a4_activations(const fp4_matrix *a, uint16_t *x, float *encode_scale,
                                fp4_err *err);

/* Number of positions where the n bytes of p and q differ. */
size_t fp4_w4a4_count_diff(const uint8_t *p, const uint8_t *q, size_t n);

/* Bytes one quantizer call moves: bf16 A read (2MK), codes (MK/2) and the
 * swizzled scales with their padding written. */
double fp4_w4a4_quantize_bytes(const fp4_shape *s);

/* Bytes one W4A4 step (quantizer + GEMM) moves: bf16 A read; the
 * intermediate A codes and swizzled scales written by the quantizer AND read
 * by the GEMM (counted twice: two kernels, they go through L2 at least);
 * NVFP4 B (codes + swizzled scales with padding) read; bf16 D written. */
double fp4_w4a4_step_bytes(const fp4_shape *s);

#ifdef FP4_HAVE_CUDA
/* (CUDA builds, backends/quantize_gpu.cu.) Download the quantizer's output
 * for A, codes [m, k/2] and swizzled scales, from the device and compare them
 * bit for bit with a->codes and fp4_swizzle_scales(a->scales): FP4_OK when
 * equal, else FP4_ERR_UNSUPPORTED saying how many bytes differ. Synchronous. */
fp4_status fp4_w4a4_check_roundtrip(const char *who, const uint8_t *d_codes, const uint8_t *d_sf,
                                    const fp4_matrix *a, fp4_err *err);
#endif

#ifdef __cplusplus
}
#endif
#endif
