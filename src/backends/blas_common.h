/* Helpers shared by the GPU backends in this folder (cuda-ref and the cuBLAS /
 * cuBLASLt ones): cuBLAS error checks that turn a cublasStatus_t into
 * FP4_ERR_CUBLAS with file, line, the failing call and cuBLAS's status name;
 * the problem validation every prepare() runs (a_odd included); and the
 * host-side decoding of NVFP4 rows into plain floats (without the global
 * scale). CUDA-only: include from .cu files. */
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
#define FP4_MAX_COPIES 4096

/* Validate what every prepare() receives: p and its matrices non-NULL with
 * buffers, a valid shape (fp4_shape_check), A [m, k] and B [n, k] matching the
 * shape (and a_odd, when given, A's shape with buffers), a finite alpha,
 * 1 <= copies <= FP4_MAX_COPIES, and every scale byte (a_odd's too) a valid
 * UE4M3 value: not NaN (0x7F / 0xFF) and not negative (sign bit set on a
 * non-zero magnitude; 0x80, -0, is zero). Our quantizer writes neither; the
 * CPU reference rejects both, the exact integer kernel cannot represent NaN,
 * and in a timed backend they would only show up later as a confusing
 * verification failure. */
static inline fp4_status fp4_gpu_check_problem(const fp4_gemm_problem *p, int copies, fp4_err *err)
{
    if (!p || !p->a || !p->b)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "prepare: NULL problem or matrix");
    if (!p->a->codes || !p->a->scales || !p->b->codes || !p->b->scales)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "prepare: a matrix has no codes or scales");
    fp4_status st = fp4_shape_check(&p->shape, err);
    if (st != FP4_OK) return st;
    const fp4_shape *s = &p->shape;
    if (p->a->rows != s->m || p->a->cols != s->k)
        return fp4_fail(
            err, FP4_ERR_SHAPE, "prepare: A is [%lld, %lld], the shape wants [%lld, %lld]",
            (long long)p->a->rows, (long long)p->a->cols, (long long)s->m, (long long)s->k);
    if (p->b->rows != s->n || p->b->cols != s->k)
        return fp4_fail(
            err, FP4_ERR_SHAPE, "prepare: B is [%lld, %lld], the shape wants [%lld, %lld]",
            (long long)p->b->rows, (long long)p->b->cols, (long long)s->n, (long long)s->k);
    if (p->a_odd && (!p->a_odd->codes || !p->a_odd->scales))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "prepare: a_odd has no codes or scales");
    if (p->a_odd && (p->a_odd->rows != s->m || p->a_odd->cols != s->k))
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "prepare: a_odd is [%lld, %lld], the shape wants [%lld, %lld]",
                        (long long)p->a_odd->rows, (long long)p->a_odd->cols, (long long)s->m,
                        (long long)s->k);
    if (!isfinite(p->alpha))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "prepare: alpha is not finite (%g)",
                        (double)p->alpha);
    if (copies < 1 || copies > FP4_MAX_COPIES)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "prepare: copies = %d, want 1..%d", copies,
                        FP4_MAX_COPIES);
    const fp4_matrix *mats[3] = {p->a, p->b, p->a_odd};
    static const char *const mat_names[3] = {"A", "B", "a_odd"};
    for (int i = 0; i < 3 && mats[i]; i++) {
        size_t nsc = (size_t)mats[i]->rows * (size_t)(mats[i]->cols / FP4_BLOCK);
        for (size_t j = 0; j < nsc; j++)
            if ((mats[i]->scales[j] & 0x7F) == 0x7F || mats[i]->scales[j] > 0x80)
                return fp4_fail(err, FP4_ERR_INVALID_ARG,
                                "prepare: %s scale (%zu, %zu) is 0x%02X: NaN or negative, not a "
                                "UE4M3 scale",
                                mat_names[i], j / (size_t)(mats[i]->cols / FP4_BLOCK),
                                j % (size_t)(mats[i]->cols / FP4_BLOCK), mats[i]->scales[j]);
    }
    return FP4_OK;
}

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
