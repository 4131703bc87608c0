/* The GPU NVFP4 quantizer: bf16 [rows, cols] -> NVFP4 codes [rows, cols/2],
 * UE4M3 scales in the SWIZZLED 128x4 layout (padding zeroed) and the global
 * decode scale, bit-identical to the CPU quantizer fp4_quantize_bf16 followed
 * by fp4_swizzle_scales (src/format/nvfp4.c is the specification; the same
 * float operations in the same order, with __fdiv_rn / __fmul_rn).
 *
 * Unlike the CPU quantizer it does not check for Inf / NaN (a NaN makes amax
 * NaN, and the output is then meaningless), nor a dynamic scale's amax (below
 * 3.2e-35 the global scale 1 / gs is subnormal or zero, where the CPU
 * quantizer refuses): it runs at inference speed, with no host sync. */
#ifndef FP4_QUANTIZE_H
#define FP4_QUANTIZE_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x:            device bf16 bit patterns [rows, cols], 16-byte aligned
 * encode_scale: > 0: use it as gs (one pass); <= 0: gs = 2688 / amax|x| (an
 *               amax pass first, the scalar stays on the device: no host sync)
 * codes:        device [rows, cols/2], 8-byte aligned
 * sf:           device fp4_swizzled_size(rows, cols) bytes (format.h), all
 *               written, padding with zeros
 * global_scale: device float, receives 1 / gs (may be NULL)
 * amax_ws:      device 4-byte scratch, needed when encode_scale <= 0 (the
 *               largest |x| as float bits is left there)
 * Asynchronous on stream, no allocation: capturable in a CUDA graph.
 * Checks: rows >= 1, cols >= 16, cols % 16 == 0, alignment, non-NULL, and a
 * given encode_scale whose inverse is a normal float (as the CPU quantizer). */
fp4_status fp4_gpu_quantize_bf16(const uint16_t *x, int64_t rows, int64_t cols,
                                 float encode_scale, uint8_t *codes, uint8_t *sf,
                                 float *global_scale, unsigned *amax_ws, cudaStream_t stream,
                                 fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
