/* Helpers shared by the CUDA backends: error checks that turn CUDA and cuBLAS
 * failures into fp4_status with file, line and the failing call. CUDA-only:
 * include from .cu files. */
#ifndef FP4_GPU_COMMON_H
#define FP4_GPU_COMMON_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cuda_check.h"
#include "fp4/backend.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Cleanup calls (cudaFree, cudaEventDestroy, cudaStreamDestroy,
 * cudaGraphDestroy, ...) cannot fail their caller, but must not fail
 * silently either: a failure usually means an earlier kernel broke the
 * context. fp4_gpu_released(e, ...) does nothing for cudaSuccess; otherwise it
 * prints one line on stderr, "fp4bench: warning: FILE:LINE: CALL failed:
 * ERROR", and clears a non-sticky error so that the next unrelated check does
 * not report it again. Returns 1 if the call failed, else 0. */
int fp4_gpu_released(cudaError_t e, const char *call, const char *file, int line);
#define FP4_CUDA_RELEASE(call) fp4_gpu_released((call), #call, __FILE__, __LINE__)

/* cudaFree(ptr) checked as above; NULL is a no-op. `what` names the buffer in
 * the warning ("cublas-bf16 A copy"). Returns 1 if the free failed. */
int fp4_gpu_free(void *ptr, const char *what);

/* A light phase on stream: one thread waits on the GPU timer for `us`
 * microseconds (near-idle power, but the GPU stays busy, so the driver sees
 * no idle gap). Used between the samples of an interleaved rate measurement. */
fp4_status fp4_gpu_light_phase(double us, cudaStream_t stream, fp4_err *err);

/* FP4_OK when a CUDA device of compute capability >= min_major.min_minor is
 * present (and, if max_major > 0, of major <= max_major); else
 * FP4_ERR_UNSUPPORTED with the reason ("no CUDA device: ...", "needs sm_90,
 * this GPU is sm_86"). Reports the device's capability in *major and *minor. */
fp4_status fp4_gpu_require(int min_major, int min_minor, int max_major, int *major,
                           int *minor, fp4_err *err);

/* cudaMalloc that reports the size on failure. */
fp4_status fp4_gpu_alloc(void **ptr, size_t bytes, const char *what, fp4_err *err);
/* Upload host bytes into a fresh device buffer. */
fp4_status fp4_gpu_upload(void **dptr, const void *host, size_t bytes, const char *what,
                          fp4_err *err);
/* Fill n bf16 values with NaN (0x7FC0) on stream. */
fp4_status fp4_gpu_poison_bf16(void *d, size_t n, cudaStream_t stream, fp4_err *err);
/* Copy n bf16 values from device to host floats (synchronous). */
fp4_status fp4_gpu_read_bf16(const void *d, size_t n, float *host, fp4_err *err);
/* Same for fp32 device data. */
fp4_status fp4_gpu_read_f32(const void *d, size_t n, float *host, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
