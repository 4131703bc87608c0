/* The cuBLASLt plumbing shared by cublaslt-fp8, cublaslt-nvfp4 and the tuned
 * path of cublas-bf16: the instance (handle + workspace), the "TN" layouts,
 * the matmul descriptor, the heuristic query and the matmul call. Choosing
 * among the heuristic's answers (tuning) is blas_tune.h. The backends keep
 * what differs: operand formats, scales, device checks and tolerances.
 * CUDA-only: include from .cu files.
 *
 * Layout (see cublas_bf16.cu): cuBLAS's A is our B ([K, N] column-major, ld
 * K, transa = T), its B is our A ([K, M], ld K, transb = N), and D^T is
 * [N, M] column-major with ld N, i.e. D row-major [M, N]. The functions below
 * take OUR A and B and do the swap themselves. */
#ifndef FP4_BLASLT_COMMON_H
#define FP4_BLASLT_COMMON_H

#include <cublasLt.h>
#include <stdint.h>

#include "core/gpu.h"
#include "fp4/backend.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Workspace handed to every cublasLtMatmul call (the heuristic is told this
 * limit). Owned by the instance: plans of one instance must not run
 * concurrently on different streams. */
#define FP4_LT_WORKSPACE_BYTES ((size_t)32 << 20)

typedef struct fp4_lt_inst {
    cublasLtHandle_t lt;
    void *ws;           /* FP4_LT_WORKSPACE_BYTES */
    fp4_warnings *warn; /* the caller's sink (set_warnings), NULL until set */
} fp4_lt_inst;

/* Creates the handle and the workspace; on failure nothing is left. The
 * caller has checked the device. */
fp4_status fp4_lt_open(fp4_lt_inst **out, fp4_err *err);
/* Destroys both; a failed destroy is a warning in inst->warn. */
void fp4_lt_close(fp4_lt_inst *inst);
/* The backends' set_warnings slot: every backend on this plumbing keeps its
 * sink in its fp4_lt_inst. */
void fp4_lt_set_warnings(void *inst, fp4_warnings *w);

/* Room for the description of the chosen algorithm and how it was chosen
 * ("lt algo <id> tile <rows>x<cols> ... (heuristic #<rank>, ...)"). */
#define FP4_LT_VARIANT_LEN 192

/* The part of a plan that depends on the shape but not on the copy. */
typedef struct fp4_lt_gemm {
    fp4_shape shape;
    cublasLtMatrixLayout_t la, lb, ld; /* cuBLAS A (our B), B (our A), C = D */
    cublasLtMatmulAlgo_t algo;         /* from fp4_lt_choose_algo (blas_tune.h) */
    char variant[FP4_LT_VARIANT_LEN];  /* what the backend's variant() reports */
} fp4_lt_gemm;

/* The three layouts for shape s with operands of type `operand` (counted in
 * elements) and a bf16 D. On failure the caller still calls
 * fp4_lt_gemm_destroy, which frees what was made (a failed destroy is a
 * warning in w). */
fp4_status fp4_lt_gemm_init(fp4_lt_gemm *g, const fp4_shape *s, cudaDataType_t operand,
                            fp4_err *err);
void fp4_lt_gemm_destroy(fp4_lt_gemm *g, fp4_warnings *w);

/* A TN matmul descriptor, 32F compute and scale type, with the device scale
 * pointers of our A and of our B (NULL: not set); scale_mode >= 0 also sets
 * both CUBLASLT_MATMUL_DESC_{A,B}_SCALE_MODE to it. *op is set as soon as it
 * exists, so on failure the caller destroys it like a finished one. */
fp4_status fp4_lt_desc_create(cublasLtMatmulDesc_t *op, const void *scale_of_a,
                              const void *scale_of_b, int32_t scale_mode, fp4_err *err);

/* Asks the heuristic once for up to `want` algorithms (every copy has the
 * same problem, only pointers differ, so one algorithm serves all), told the
 * instance's workspace size. Keeps those whose state is SUCCESS, in the
 * heuristic's order: algos[i] and ranks[i], its 1-based place in the answer;
 * *count of them (both arrays hold `want`). UNSUPPORTED, quoting cuBLASLt's
 * status and prefixed by `name`, when the heuristic fails, answers nothing or
 * answers nothing valid. */
fp4_status fp4_lt_heuristic(const fp4_lt_inst *inst, const fp4_lt_gemm *g,
                            cublasLtMatmulDesc_t op, int want, cublasLtMatmulAlgo_t *algos,
                            int *ranks, int *count, const char *name, fp4_err *err);

/* D = alpha * A B^T with our A and B, beta = 0 (C aliases D), g->algo and
 * the instance's workspace: no allocation, capturable. alpha is read from
 * host memory when the call is enqueued. */
fp4_status fp4_lt_run(const fp4_lt_inst *inst, const fp4_lt_gemm *g, cublasLtMatmulDesc_t op,
                      const float *alpha, const void *a, const void *b, void *d,
                      cudaStream_t stream, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
