/* The kernels' and fp4-sm90's former helper header, kept while they move to
 * core/cuda_check.h and core/gpu.h: it includes both and keeps the old
 * spellings of the two cleanup helpers. Those record no warning (the failure
 * is only in their return value); new code uses FP4_CUDA_CLEANUP and
 * fp4_gpu_release with a warnings sink. CUDA-only: include from .cu files. */
#ifndef FP4_GPU_COMMON_H
#define FP4_GPU_COMMON_H

#include "core/cuda_check.h"
#include "core/gpu.h"
#include "fp4/backend.h"
#include "fp4/status.h"

/* FP4_CUDA_CLEANUP without a sink: returns 1 if the call failed. */
#define FP4_CUDA_RELEASE(call) FP4_CUDA_CLEANUP(NULL, call)

/* fp4_gpu_release without a sink: returns 1 if the free failed. */
static inline int fp4_gpu_free(void *ptr, const char *what)
{
    return fp4_gpu_release(ptr, what, NULL);
}

#endif
