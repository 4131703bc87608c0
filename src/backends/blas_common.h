/* Helpers shared by the GPU backends in this folder (cuda-ref and the cuBLAS /
 * cuBLASLt ones): cuBLAS error checks that turn a cublasStatus_t into
 * FP4_ERR_CUBLAS with file, line, the failing call and cuBLAS's status name,
 * and the host-side decoding of NVFP4 rows into plain floats (without the
 * global scale). CUDA-only: include from .cu files. */
#ifndef FP4_BLAS_COMMON_H
#define FP4_BLAS_COMMON_H

#include <cublas_v2.h>
#include <math.h>
#include <stdint.h>

#include "core/gpu.h"
#include "fp4/backend.h"
#include "fp4/format.h"
#include "fp4/status.h"

/* Evaluate a cuBLAS / cuBLASLt call; on failure return FP4_ERR_CUBLAS. */
#define FP4_CUBLAS_TRY(err, call)                                                                  \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return fp4_fail((err), FP4_ERR_CUBLAS, "%s:%d: %s: %s (%d)", __FILE__, __LINE__,       \
                            #call, cublasGetStatusName(s_), (int)s_);                              \
    } while (0)

/* Same, recording the status in st and jumping to label (single-exit cleanup). */
#define FP4_CUBLAS_GOTO(err, st, call, label)                                                      \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            (st) = fp4_fail((err), FP4_ERR_CUBLAS, "%s:%d: %s: %s (%d)", __FILE__, __LINE__,       \
                            #call, cublasGetStatusName(s_), (int)s_);                              \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* The cuBLAS / cuBLASLt side of FP4_CUDA_CLEANUP (core/gpu.h): destroy calls
 * cannot fail their caller; a failure adds "FILE:LINE: CALL failed: STATUS
 * (n)" to w (NULL: only counted). Returns 1 if the call failed, else 0. */
static inline int fp4_blas_cleanup(cublasStatus_t s, const char *call, const char *file, int line,
                                   fp4_warnings *w)
{
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    fp4_warn(w, "%s:%d: %s failed: %s (%d)", file, line, call, cublasGetStatusName(s), (int)s);
    return 1;
}
#define FP4_CUBLAS_CLEANUP(w, call) fp4_blas_cleanup((call), #call, __FILE__, __LINE__, (w))

/* Largest number of operand copies a plan accepts (a sanity bound, not a
 * memory check: the allocations report their own failures). */

/* FP4_OK when copy is in [0, copies); else FP4_ERR_INVALID_ARG. */
static inline fp4_status fp4_gpu_check_copy(int copy, int copies, fp4_err *err)
{
    if (copy < 0 || copy >= copies)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "copy %d out of range [0, %d)", copy, copies);
    return FP4_OK;
}

/* row[0 .. cols) = e2m1(code) * e4m3(scale) of row r of x, WITHOUT the global
 * scale. Exact in float (at most 6 significant bits), and in bf16 too. */
static inline void fp4_host_decode_row(const fp4_matrix *x, int64_t r, float *row)
{
    static const float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    const int64_t kb = x->cols / FP4_BLOCK;
    const uint8_t *codes = x->codes + (size_t)r * (size_t)(x->cols / 2);
    const uint8_t *scales = x->scales + (size_t)r * (size_t)kb;
    for (int64_t b = 0; b < kb; b++) {
        const float sf = fp4_e4m3_decode(scales[b]);
        for (int j = 0; j < FP4_BLOCK / 2; j++) {
            const uint8_t byte = codes[b * (FP4_BLOCK / 2) + j];
            row[b * FP4_BLOCK + 2 * j] = e2m1[byte & 15] * sf;     /* even k: low nibble */
            row[b * FP4_BLOCK + 2 * j + 1] = e2m1[byte >> 4] * sf; /* odd k: high nibble */
        }
    }
}

#endif
