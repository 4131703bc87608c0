/* Generic CUDA helpers for every layer that runs GPU work (kernels, backends,
 * the engine): device checks, buffers, and cleanup that reports failures as
 * warnings instead of printing them. The error macros are core/cuda_check.h.
 * CUDA-only: include from .cu files, or from C files built only with CUDA. */
#ifndef FP4_CORE_GPU_H
#define FP4_CORE_GPU_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cuda_check.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Cleanup calls (cudaFree, cudaEventDestroy, cudaStreamDestroy,
 * cudaGraphDestroy, ...) cannot fail their caller, but must not fail
 * silently either: a failure usually means an earlier kernel broke the
 * context. fp4_gpu_cleanup(e, ...) does nothing for cudaSuccess; otherwise it
 * adds "FILE:LINE: CALL failed: ERROR" to w (NULL: only counted by the
 * return value) and clears a non-sticky error so that the next unrelated
 * check does not report it again. Returns 1 if the call failed, else 0. */
int fp4_gpu_cleanup(cudaError_t e, const char *call, const char *file, int line,
                    fp4_warnings *w);
#define FP4_CUDA_CLEANUP(w, call) fp4_gpu_cleanup((call), #call, __FILE__, __LINE__, (w))

/* cudaFree(ptr) as a cleanup call (above); NULL is a no-op. `what` names the
 * buffer in the warning ("cublas-bf16 A"). Returns 1 if the free failed. */
int fp4_gpu_release(void *ptr, const char *what, fp4_warnings *w);

/* cudaMalloc that reports the size on failure (*ptr NULL then). */
fp4_status fp4_gpu_alloc(void **ptr, size_t bytes, const char *what, fp4_err *err);
/* Upload host bytes into a fresh device buffer; on failure nothing is left. */
fp4_status fp4_gpu_upload(void **dptr, const void *host, size_t bytes, const char *what,
                          fp4_err *err);
/* Fill n bf16 values with NaN (byte 0xFF) on stream. */
fp4_status fp4_gpu_poison_bf16(void *d, size_t n, cudaStream_t stream, fp4_err *err);
/* Copy n bf16 values from device to host floats (synchronous). */
fp4_status fp4_gpu_read_bf16(const void *d, size_t n, float *host, fp4_err *err);
/* Same for fp32 device data. */
fp4_status fp4_gpu_read_f32(const void *d, size_t n, float *host, fp4_err *err);

/* FP4_OK when a CUDA device of compute capability >= min_major.min_minor is
 * present (and, if max_major > 0, of major <= max_major); else
 * FP4_ERR_UNSUPPORTED with the reason ("no CUDA device: ...", "needs sm_90,
 * this GPU is sm_86"). Reports the device's capability in *major and *minor
 * (either may be NULL). */
fp4_status fp4_gpu_require(int min_major, int min_minor, int max_major, int *major,
                           int *minor, fp4_err *err);

/* FP4_OK when the current device is sm_90 (Hopper) exactly, with its
 * multiprocessor count in *num_sms; else FP4_ERR_UNSUPPORTED with the reason,
 * or FP4_ERR_CUDA naming `who` when the count cannot be read. For the
 * backends whose kernels are built for sm_90a only. */
fp4_status fp4_gpu_require_sm90(const char *who, int *num_sms, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
