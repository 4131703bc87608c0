/* Shared cuBLASLt plumbing (see blaslt_common.h). */
#include "backends/blaslt_common.h"

#include <stdlib.h>
#include <string.h>

#include "backends/blas_common.h"

extern "C" void fp4_lt_close(fp4_lt_inst *inst)
{
    if (!inst) return;
    if (inst->lt) FP4_CUBLAS_CLEANUP(inst->warn, cublasLtDestroy(inst->lt));
    fp4_gpu_release(inst->ws, "cuBLASLt workspace", inst->warn);
    free(inst);
}

extern "C" void fp4_lt_set_warnings(void *inst, fp4_warnings *w)
{
    ((fp4_lt_inst *)inst)->warn = w;
}

extern "C" fp4_status fp4_lt_open(fp4_lt_inst **out, fp4_err *err)
{
    fp4_status st = FP4_OK;
    *out = NULL;
    fp4_lt_inst *f = (fp4_lt_inst *)calloc(1, sizeof *f);
    if (!f) return fp4_fail(err, FP4_ERR_NOMEM, "cuBLASLt: no host memory");
    FP4_CUBLAS_GOTO(err, st, cublasLtCreate(&f->lt), fail);
    st = fp4_gpu_alloc(&f->ws, FP4_LT_WORKSPACE_BYTES, "cuBLASLt workspace", err);
    if (st != FP4_OK) goto fail;
    *out = f;
    return FP4_OK;
fail:
    fp4_lt_close(f);
    return st;
}

extern "C" fp4_status fp4_lt_gemm_init(fp4_lt_gemm *g, const fp4_shape *s, cudaDataType_t operand,
                                       fp4_err *err)
{
    memset(g, 0, sizeof *g);
    g->shape = *s;
    /* column-major views (rows, cols, ld) as at the top of blaslt_common.h */
    FP4_CUBLAS_TRY(err, cublasLtMatrixLayoutCreate(&g->la, operand, (uint64_t)s->k,
                                                   (uint64_t)s->n, s->k));
    FP4_CUBLAS_TRY(err, cublasLtMatrixLayoutCreate(&g->lb, operand, (uint64_t)s->k,
                                                   (uint64_t)s->m, s->k));
    FP4_CUBLAS_TRY(err, cublasLtMatrixLayoutCreate(&g->ld, CUDA_R_16BF, (uint64_t)s->n,
                                                   (uint64_t)s->m, s->n));
    return FP4_OK;
}

extern "C" void fp4_lt_gemm_destroy(fp4_lt_gemm *g, fp4_warnings *w)
{
    if (!g) return;
    if (g->la) FP4_CUBLAS_CLEANUP(w, cublasLtMatrixLayoutDestroy(g->la));
    if (g->lb) FP4_CUBLAS_CLEANUP(w, cublasLtMatrixLayoutDestroy(g->lb));
    if (g->ld) FP4_CUBLAS_CLEANUP(w, cublasLtMatrixLayoutDestroy(g->ld));
    g->la = g->lb = g->ld = NULL;
}

extern "C" fp4_status fp4_lt_desc_create(cublasLtMatmulDesc_t *op, const void *scale_of_a,
                                         const void *scale_of_b, int32_t scale_mode, fp4_err *err)
{
    const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    /* cuBLAS's A is our B: its scale goes to A_SCALE_POINTER */
    const void *sa = scale_of_b, *sb = scale_of_a;
    *op = NULL;
    FP4_CUBLAS_TRY(err, cublasLtMatmulDescCreate(op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    FP4_CUBLAS_TRY(
        err, cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    FP4_CUBLAS_TRY(
        err, cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (scale_mode >= 0) {
        FP4_CUBLAS_TRY(err, cublasLtMatmulDescSetAttribute(
                                *op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &scale_mode,
                                sizeof scale_mode));
        FP4_CUBLAS_TRY(err, cublasLtMatmulDescSetAttribute(
                                *op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &scale_mode,
                                sizeof scale_mode));
    }
    if (sa)
        FP4_CUBLAS_TRY(err, cublasLtMatmulDescSetAttribute(
                                *op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
    if (sb)
        FP4_CUBLAS_TRY(err, cublasLtMatmulDescSetAttribute(
                                *op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
    return FP4_OK;
}

extern "C" fp4_status fp4_lt_heuristic(const fp4_lt_inst *inst, const fp4_lt_gemm *g,
                                       cublasLtMatmulDesc_t op, int want,
                                       cublasLtMatmulAlgo_t *algos, int *ranks, int *count,
                                       const char *name, fp4_err *err)
{
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t *res = NULL;
    int answered = 0;
    const uint64_t ws = FP4_LT_WORKSPACE_BYTES;
    const fp4_shape *s = &g->shape;
    fp4_status st = FP4_OK;
    cublasStatus_t hs;
    *count = 0;
    if (want < 1)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: asked the heuristic for %d algorithms",
                        name, want);
    res = (cublasLtMatmulHeuristicResult_t *)calloc((size_t)want, sizeof *res);
    if (!res) return fp4_fail(err, FP4_ERR_NOMEM, "%s: no host memory for heuristic results", name);
    FP4_CUBLAS_GOTO(err, st, cublasLtMatmulPreferenceCreate(&pref), out);
    FP4_CUBLAS_GOTO(err, st,
                    cublasLtMatmulPreferenceSetAttribute(
                        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                    out);
    hs = cublasLtMatmulAlgoGetHeuristic(inst->lt, op, g->la, g->lb, g->ld, g->ld, pref, want, res,
                                        &answered);
    if (hs != CUBLAS_STATUS_SUCCESS) {
        st = fp4_fail(err, FP4_ERR_UNSUPPORTED,
                      "%s: cuBLASLt heuristic for %lldx%lldx%lld: status %d %s", name,
                      (long long)s->m, (long long)s->n, (long long)s->k, (int)hs,
                      cublasGetStatusName(hs));
        goto out;
    }
    if (answered < 1) {
        st = fp4_fail(err, FP4_ERR_UNSUPPORTED,
                      "%s: cuBLASLt heuristic found no algorithm for %lldx%lldx%lld", name,
                      (long long)s->m, (long long)s->n, (long long)s->k);
        goto out;
    }
    for (int i = 0; i < answered && i < want; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
        algos[*count] = res[i].algo;
        ranks[*count] = i + 1;
        (*count)++;
    }
    if (*count == 0) /* quote the first answer's state, as the one that would have run */
        st = fp4_fail(err, FP4_ERR_UNSUPPORTED,
                      "%s: cuBLASLt heuristic result for %lldx%lldx%lld: state %d %s", name,
                      (long long)s->m, (long long)s->n, (long long)s->k, (int)res[0].state,
                      cublasGetStatusName(res[0].state));
out:
    if (pref) FP4_CUBLAS_CLEANUP(inst->warn, cublasLtMatmulPreferenceDestroy(pref));
    free(res);
    return st;
}

extern "C" fp4_status fp4_lt_run(const fp4_lt_inst *inst, const fp4_lt_gemm *g,
                                 cublasLtMatmulDesc_t op, const float *alpha, const void *a,
                                 const void *b, void *d, cudaStream_t stream, fp4_err *err)
{
    const float beta = 0.0f;
    FP4_CUBLAS_TRY(err, cublasLtMatmul(inst->lt, op, alpha, b, g->la, a, g->lb, &beta, d, g->ld,
                                       d, g->ld, &g->algo, inst->ws, FP4_LT_WORKSPACE_BYTES,
                                       stream));
    return FP4_OK;
}
