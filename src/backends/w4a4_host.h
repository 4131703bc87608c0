/* Host side of the two W4A4 backends, `quantize` (the GPU quantizer alone) and
 * `w4a4-sm90` (quantizer + fp4-sm90 GEMM): the bf16 activations they start
 * from, and the bytes they move. C; tested on the CPU by tests/test_w4a4.c.
 *
 * The activations. Both backends are flagged FP4_BACKEND_FROM_BF16: they
 * start from the bf16 activations the engine's case was made from
 * (problem->a_bf16; odd copies negate them) and quantize them on the GPU with
 * the static scale of a checkpoint's input_scale, encode_scale = 1 /
 * A.global_scale. The engine hands them the A that the CPU quantizer makes of
 * the same input with the same scale, so the GPU quantizer's output must equal
 * it bit for bit: a difference is a failed check (FP4_ERR_VERIFY), never a
 * limit of the data. */
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

/* x [m, k]: copy `copy`'s bf16 activations (p->a_bf16, every sign bit
 * flipped for odd copies when p->a_odd is set); *encode_scale = 1 /
 * p->a->global_scale. FP4_ERR_UNSUPPORTED when the problem has no bf16
 * activations; FP4_ERR_INVALID_ARG when the global scale is not a positive
 * finite number with a finite inverse. */
fp4_status fp4_w4a4_copy_activations(const fp4_gemm_problem *p, int copy, uint16_t *x,
                                     float *encode_scale, fp4_err *err);

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
 * bit for bit with a->codes and fp4_swizzle_scales(a->scales) (the CPU
 * quantizer's output for the same input): FP4_OK when equal, else
 * FP4_ERR_VERIFY saying how many bytes differ. Synchronous. */
fp4_status fp4_w4a4_check_roundtrip(const char *who, const uint8_t *d_codes, const uint8_t *d_sf,
                                    const fp4_matrix *a, fp4_err *err);
#endif

#ifdef __cplusplus
}
#endif
#endif
