/* Error checks that turn CUDA runtime failures into fp4_status with file, line
 * and the failing call. CUDA-only: include from .cu files. Every layer that
 * launches work (kernels, backends, the engine) uses these. */
#ifndef FP4_CORE_CUDA_CHECK_H
#define FP4_CORE_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "fp4/status.h"

/* Evaluate a CUDA runtime call; on failure record it in err, set st and jump. */
#define FP4_CUDA_GOTO(err, st, call, label)                                         \
    do {                                                                            \
        cudaError_t e_ = (call);                                                    \
        if (e_ != cudaSuccess) {                                                    \
            (st) = fp4_fail((err), FP4_ERR_CUDA, "%s:%d: %s: %s", __FILE__, __LINE__, \
                            #call, cudaGetErrorString(e_));                         \
            goto label;                                                             \
        }                                                                           \
    } while (0)

/* Same, returning the status directly. */
#define FP4_CUDA_TRY(err, call)                                                     \
    do {                                                                            \
        cudaError_t e_ = (call);                                                    \
        if (e_ != cudaSuccess)                                                      \
            return fp4_fail((err), FP4_ERR_CUDA, "%s:%d: %s: %s", __FILE__, __LINE__, \
                            #call, cudaGetErrorString(e_));                         \
    } while (0)

/* After a kernel launch: the launch error, if any. */
#define FP4_CUDA_LAUNCH_TRY(err) FP4_CUDA_TRY(err, cudaGetLastError())

#endif
