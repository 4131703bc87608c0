/* fp4bench: the NVFP4 format, exactly (see docs/FORMAT.md).
 *
 * Element: E2M1 (bit 3 sign, bits 0-2 magnitude code: 0 0.5 1 1.5 2 3 4 6).
 * Packing: two elements a byte, the even K index in the low nibble.
 * Block:   16 consecutive elements along K share one UE4M3 scale.
 * Tensor:  one fp32 global decode scale; value = e2m1 * scale * global_scale.
 */
#ifndef FP4_FORMAT_H
#define FP4_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP4_BLOCK 16          /* elements sharing one scale */
#define FP4_E2M1_MAX 6.0f
#define FP4_E4M3_MAX 448.0f

/* ---- scalar codecs ------------------------------------------------------ */

/* Value of a 4-bit E2M1 code (only the low 4 bits of code are used). */
float fp4_e2m1_decode(uint8_t code);
/* Nearest E2M1 code, ties to even, saturating to +-6; NaN encodes as +6
 * (E2M1 has no NaN; engines saturate). -0.0 encodes as code 8. */
uint8_t fp4_e2m1_encode(float x);

/* Value of an E4M3 (OCP FP8, "fn") byte: 0x7F and 0xFF are NaN, no infinity. */
float fp4_e4m3_decode(uint8_t byte);
/* Nearest E4M3 byte, ties to even, saturating to +-448 (satfinite, as the
 * cvt.rn.satfinite instruction does); NaN encodes as 0x7F. */
uint8_t fp4_e4m3_encode(float x);

/* bf16 and IEEE fp16 <-> float, round-to-nearest-even, NaN kept NaN. */
uint16_t fp4_bf16_from_float(float x);
float fp4_bf16_to_float(uint16_t h);
uint16_t fp4_f16_from_float(float x);
float fp4_f16_to_float(uint16_t h);

/* ---- the NVFP4 matrix ------------------------------------------------------ */

/* An NVFP4 matrix [rows, cols] (cols = K, a multiple of 16), scales plain
 * row-major [rows, cols/16] as checkpoints store them. Owns its buffers when
 * created by fp4_matrix_alloc / fp4_quantize_*; free with fp4_matrix_free. */
typedef struct fp4_matrix {
    int64_t rows;
    int64_t cols;
    uint8_t *codes;     /* [rows, cols/2] bytes */
    uint8_t *scales;    /* [rows, cols/16] UE4M3 bytes */
    float global_scale; /* decode scale (ModelOpt weight_scale_2 = amax/2688) */
} fp4_matrix;

/* Check that a [rows, cols] NVFP4 matrix is valid: rows >= 1, cols >= 16,
 * cols % 16 == 0, and its buffers' sizes fit in size_t. */
fp4_status fp4_check_dims(int64_t rows, int64_t cols, fp4_err *err);

/* Allocate codes and scales for [rows, cols], zero-filled, global_scale 1. */
fp4_status fp4_matrix_alloc(fp4_matrix *m, int64_t rows, int64_t cols, fp4_err *err);
void fp4_matrix_free(fp4_matrix *m);
/* Deep copy. */
fp4_status fp4_matrix_copy(fp4_matrix *dst, const fp4_matrix *src, fp4_err *err);

/* Element (r, c) as a float, exactly: e2m1 * scale (without the global scale). */
float fp4_matrix_get(const fp4_matrix *m, int64_t r, int64_t c);

/* ---- quantization (the inference-engine convention) ------------------------
 * gs = 448*6 / amax(|x|) over the tensor (or given); per block of 16:
 *   sf = e4m3_satfinite(gs * (blockmax / 6))
 *   q  = e2m1_rne_satfinite(x * (1 / (float(sf) / gs)))   (0 where sf == 0)
 * global_scale = 1 / gs. An all-zero tensor gets gs = 1: all codes and scales 0.
 * A tensor holding Inf or NaN is rejected (FP4_ERR_INVALID_ARG). */

/* Encode scale gs for a tensor whose largest |x| is amax (1 when amax == 0). */
float fp4_global_encode_scale(float amax);

/* x is [rows, cols] row-major. encode_scale <= 0 means "compute from amax". */
fp4_status fp4_quantize_f32(const float *x, int64_t rows, int64_t cols,
                            float encode_scale, fp4_matrix *out, fp4_err *err);
/* Same for bf16 input (uint16_t bit patterns). */
fp4_status fp4_quantize_bf16(const uint16_t *x, int64_t rows, int64_t cols,
                             float encode_scale, fp4_matrix *out, fp4_err *err);

/* out [rows, cols] floats: e2m1 * scale * global_scale. */
fp4_status fp4_dequantize_f32(const fp4_matrix *m, float *out, fp4_err *err);
/* out [rows, cols] bf16 bit patterns of the same values (the fp32 product
 * rounded once more, to bf16): activations as a model's previous layer
 * would hand them over. */
fp4_status fp4_dequantize_bf16(const fp4_matrix *m, uint16_t *out, fp4_err *err);

/* ---- the 128x4 swizzled scale layout (CUTLASS / cuBLASLt) ------------------
 * Rows padded to roundup(rows, 128), scale columns to roundup(cols/16, 4);
 * padding bytes are zero. */
int64_t fp4_swizzled_rows(int64_t rows);        /* roundup(rows, 128) */
int64_t fp4_swizzled_kblocks(int64_t cols);     /* roundup(cols/16, 4) */
size_t fp4_swizzled_size(int64_t rows, int64_t cols);
/* Byte offset of scale (r, kb) in the swizzled buffer, kbp = padded kblocks. */
size_t fp4_swizzle_offset(int64_t r, int64_t kb, int64_t kbp);
/* plain [rows, cols/16] -> swizzled (fp4_swizzled_size bytes, padding zeroed). */
fp4_status fp4_swizzle_scales(const uint8_t *plain, int64_t rows, int64_t cols,
                              uint8_t *swizzled, fp4_err *err);
/* swizzled -> plain [rows, cols/16]. */
fp4_status fp4_unswizzle_scales(const uint8_t *swizzled, int64_t rows, int64_t cols,
                                uint8_t *plain, fp4_err *err);

/* Bytes an NVFP4 GEMM must move at least: A and B codes, both swizzled scale
 * buffers with padding, two fp32 global scales, and D in bf16. */
double fp4_gemm_min_bytes(int64_t m, int64_t n, int64_t k);

#ifdef __cplusplus
}
#endif
#endif
