/* Backend "cublaslt-nvfp4": the vendor's native NVFP4 GEMM (cuBLASLt >= 12.8,
 * Blackwell only). A and B stay NVFP4: CUDA_R_4F_E2M1 codes as they are (two
 * a byte, even k in the low nibble, which is also the order cuBLASLt's packed
 * e2m1 pairs use), block scales as CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 in
 * the 128x4 swizzled layout (fp4_swizzle_scales), global scales folded into
 * alpha, fp32 accumulation, bf16 D.
 *
 * Layout: the "TN" call of cublas-bf16 (see cublas_bf16.cu): cuBLAS's A is
 * our B ([K, N] column-major, ld K, transa = T), its B is our A ([K, M], ld K,
 * transb = N), D^T is [N, M] column-major (ld N) = D row-major [M, N]. Each
 * operand's scale tensor follows its operand, so A_SCALE_POINTER gets B's
 * swizzled scales (N rows) and B_SCALE_POINTER gets A's (M rows).
 *
 * On anything but sm_100/sm_120 open() says UNSUPPORTED; on the H200 the
 * heuristic would answer status 15 (NOT_SUPPORTED) anyway, and prepare()
 * reports any such answer as UNSUPPORTED with cuBLASLt's status. */
#include "fp4/backend.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backends/backends.h" /* gives the table below C linkage */
}
#include "backends/blas_common.h"
#include "backends/gpu_common.h"

/* Workspace handed to every cublasLtMatmul call; owned by the instance, so
 * plans of one instance must not run concurrently on different streams. */
#define NVFP4_WORKSPACE_BYTES ((size_t)32 << 20)

typedef struct nvfp4_inst {
    cublasLtHandle_t lt;
    void *ws;
} nvfp4_inst;

typedef struct nvfp4_copy {
    void *a, *b;             /* codes [m, k/2], [n, k/2] */
    void *sa, *sb;           /* swizzled scales, fp4_swizzled_size bytes each */
    void *d;                 /* [m, n] bf16 */
    cublasLtMatmulDesc_t op; /* per copy: it holds this copy's scale pointers */
} nvfp4_copy;

typedef struct nvfp4_plan {
    nvfp4_inst *inst; /* borrowed: release the plan before close() */
    fp4_shape shape;
    float alpha;
    int copies;
    nvfp4_copy *c;                     /* [copies] */
    cublasLtMatrixLayout_t la, lb, ld; /* cuBLAS A (our B), B (our A), C = D */
    cublasLtMatmulAlgo_t algo;         /* from the heuristic, once, in prepare */
} nvfp4_plan;

static void nvfp4_close(void *inst)
{
    nvfp4_inst *f = (nvfp4_inst *)inst;
    if (!f) return;
    if (f->lt) cublasLtDestroy(f->lt);
    cudaFree(f->ws);
    free(f);
}

/* Needs a Blackwell GPU with FP4 tensor cores: compute capability 10.x or 12.x. */
static fp4_status nvfp4_open(void **inst, fp4_err *err)
{
    *inst = NULL;
    int major = 0, minor = 0;
    fp4_status st = fp4_gpu_require(7, 0, 0, &major, &minor, err);
    if (st != FP4_OK) return st;
    if (major != 10 && major != 12)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "cublaslt-nvfp4: needs Blackwell (sm_100/sm_120), this GPU is sm_%d%d",
                        major, minor);
    nvfp4_inst *f = (nvfp4_inst *)calloc(1, sizeof *f);
    if (!f) return fp4_fail(err, FP4_ERR_NOMEM, "cublaslt-nvfp4: no host memory");
    FP4_CUBLAS_GOTO(err, st, cublasLtCreate(&f->lt), fail);
    st = fp4_gpu_alloc(&f->ws, NVFP4_WORKSPACE_BYTES, "cuBLASLt workspace", err);
    if (st != FP4_OK) goto fail;
    *inst = f;
    return FP4_OK;
fail:
    nvfp4_close(f);
    return st;
}

/* Conservative, as the FP4 GEMM libraries built on the same kernels demand
 * (CONTEXT.md section 3): K % 32 == 0 and N % 32 == 0. */
static fp4_status nvfp4_supports(void *inst, const fp4_shape *s, fp4_err *err)
{
    if (s->k % 32 != 0)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "cublaslt-nvfp4: K = %lld is not a multiple of 32", (long long)s->k);
    if (s->n % 32 != 0)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "cublaslt-nvfp4: N = %lld is not a multiple of 32", (long long)s->n);
    return FP4_OK;
}

static void nvfp4_release(void *plan)
{
    nvfp4_plan *p = (nvfp4_plan *)plan;
    if (!p) return;
    if (p->c) {
        for (int i = 0; i < p->copies; i++) {
            cudaFree(p->c[i].a);
            cudaFree(p->c[i].b);
            cudaFree(p->c[i].sa);
            cudaFree(p->c[i].sb);
            cudaFree(p->c[i].d);
            if (p->c[i].op) cublasLtMatmulDescDestroy(p->c[i].op);
        }
        free(p->c);
    }
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    free(p);
}

/* The matmul descriptor of one copy: TN, 32F compute and scale type, VEC16
 * UE4M3 block scales for both operands, this copy's scale pointers. */
static fp4_status nvfp4_make_desc(nvfp4_copy *c, fp4_err *err)
{
    const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
    const void *sa = c->sb, *sb = c->sa; /* cuBLAS's A is our B */
    FP4_CUBLAS_TRY(err, cublasLtMatmulDescCreate(&c->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    FP4_CUBLAS_TRY(
        err, cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    FP4_CUBLAS_TRY(
        err, cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    FP4_CUBLAS_TRY(err, cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                       &mode, sizeof mode));
    FP4_CUBLAS_TRY(err, cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                                       &mode, sizeof mode));
    FP4_CUBLAS_TRY(err, cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                       &sa, sizeof sa));
    FP4_CUBLAS_TRY(err, cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                       &sb, sizeof sb));
    return FP4_OK;
}

/* Asks the heuristic once (copy 0's descriptor; copies differ only in
 * pointers). Any non-success status or no result: UNSUPPORTED quoting
 * cuBLASLt's status number and name. */
static fp4_status nvfp4_pick_algo(nvfp4_plan *p, fp4_err *err)
{
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int count = 0;
    const uint64_t ws = NVFP4_WORKSPACE_BYTES;
    fp4_status st = FP4_OK;
    cublasStatus_t hs;
    memset(&res, 0, sizeof res);
    FP4_CUBLAS_GOTO(err, st, cublasLtMatmulPreferenceCreate(&pref), out);
    FP4_CUBLAS_GOTO(err, st,
                    cublasLtMatmulPreferenceSetAttribute(
                        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                    out);
    hs = cublasLtMatmulAlgoGetHeuristic(p->inst->lt, p->c[0].op, p->la, p->lb, p->ld, p->ld, pref,
                                        1, &res, &count);
    if (hs != CUBLAS_STATUS_SUCCESS) {
        st = fp4_fail(err, FP4_ERR_UNSUPPORTED,
                      "cublaslt-nvfp4: cuBLASLt heuristic for %lldx%lldx%lld: status %d %s",
                      (long long)p->shape.m, (long long)p->shape.n, (long long)p->shape.k, (int)hs,
                      cublasGetStatusName(hs));
        goto out;
    }
    if (count < 1) {
        st = fp4_fail(err, FP4_ERR_UNSUPPORTED,
                      "cublaslt-nvfp4: cuBLASLt heuristic found no algorithm for %lldx%lldx%lld",
                      (long long)p->shape.m, (long long)p->shape.n, (long long)p->shape.k);
        goto out;
    }
    if (res.state != CUBLAS_STATUS_SUCCESS) {
        st = fp4_fail(err, FP4_ERR_UNSUPPORTED,
                      "cublaslt-nvfp4: cuBLASLt heuristic result for %lldx%lldx%lld: state %d %s",
                      (long long)p->shape.m, (long long)p->shape.n, (long long)p->shape.k,
                      (int)res.state, cublasGetStatusName(res.state));
        goto out;
    }
    p->algo = res.algo;
out:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    return st;
}

/* Swizzles the plain scales of x on the host into a malloc'ed buffer of
 * fp4_swizzled_size bytes (*out; the caller frees it). */
static fp4_status nvfp4_swizzle(const fp4_matrix *x, uint8_t **out, size_t *bytes, fp4_err *err)
{
    *out = NULL;
    *bytes = fp4_swizzled_size(x->rows, x->cols);
    uint8_t *buf = (uint8_t *)malloc(*bytes ? *bytes : 1);
    if (!buf)
        return fp4_fail(err, FP4_ERR_NOMEM,
                        "cublaslt-nvfp4: no host memory for %zu swizzled scale bytes", *bytes);
    fp4_status st = fp4_swizzle_scales(x->scales, x->rows, x->cols, buf, err);
    if (st != FP4_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    return FP4_OK;
}

/* Uploads `copies` copies of the codes and swizzled scales, allocates D, builds
 * the descriptors and asks the heuristic. On failure nothing is left
 * allocated. */
static fp4_status nvfp4_prepare(void *inst, const fp4_gemm_problem *pr, int copies, void **plan,
                                fp4_err *err)
{
    *plan = NULL;
    fp4_status st = fp4_gpu_check_problem(pr, copies, err);
    if (st != FP4_OK) return st;
    st = nvfp4_supports(inst, &pr->shape, err);
    if (st != FP4_OK) return st;

    const fp4_shape *s = &pr->shape;
    uint8_t *hsa = NULL, *hsb = NULL;
    size_t sa_bytes = 0, sb_bytes = 0, d_bytes;
    nvfp4_plan *p = NULL;
    const size_t a_bytes = (size_t)s->m * (size_t)(s->k / 2);
    const size_t b_bytes = (size_t)s->n * (size_t)(s->k / 2);
    if (fp4_size_mul3((size_t)s->m, (size_t)s->n, 2, &d_bytes)) {
        st = fp4_fail(err, FP4_ERR_OVERFLOW, "cublaslt-nvfp4: D overflows size_t");
        goto out;
    }
    if ((st = nvfp4_swizzle(pr->a, &hsa, &sa_bytes, err)) != FP4_OK) goto out;
    if ((st = nvfp4_swizzle(pr->b, &hsb, &sb_bytes, err)) != FP4_OK) goto out;

    p = (nvfp4_plan *)calloc(1, sizeof *p);
    if (!p || !(p->c = (nvfp4_copy *)calloc((size_t)copies, sizeof *p->c))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "cublaslt-nvfp4: no host memory for the plan");
        goto out;
    }
    p->inst = (nvfp4_inst *)inst;
    p->shape = *s;
    p->alpha = pr->alpha;
    p->copies = copies;
    /* Column-major views (rows, cols, ld in elements) as described at the top. */
    FP4_CUBLAS_GOTO(
        err, st,
        cublasLtMatrixLayoutCreate(&p->la, CUDA_R_4F_E2M1, (uint64_t)s->k, (uint64_t)s->n, s->k),
        out);
    FP4_CUBLAS_GOTO(
        err, st,
        cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_4F_E2M1, (uint64_t)s->k, (uint64_t)s->m, s->k),
        out);
    FP4_CUBLAS_GOTO(
        err, st,
        cublasLtMatrixLayoutCreate(&p->ld, CUDA_R_16BF, (uint64_t)s->n, (uint64_t)s->m, s->n), out);
    for (int i = 0; i < copies; i++) {
        nvfp4_copy *c = &p->c[i];
        if ((st = fp4_gpu_upload(&c->a, pr->a->codes, a_bytes, "A codes", err)) != FP4_OK ||
            (st = fp4_gpu_upload(&c->b, pr->b->codes, b_bytes, "B codes", err)) != FP4_OK ||
            (st = fp4_gpu_upload(&c->sa, hsa, sa_bytes, "A swizzled scales", err)) != FP4_OK ||
            (st = fp4_gpu_upload(&c->sb, hsb, sb_bytes, "B swizzled scales", err)) != FP4_OK ||
            (st = fp4_gpu_alloc(&c->d, d_bytes, "D bf16", err)) != FP4_OK ||
            (st = nvfp4_make_desc(c, err)) != FP4_OK)
            goto out;
    }
    if ((st = nvfp4_pick_algo(p, err)) != FP4_OK) goto out;
    *plan = p;
    p = NULL;
    st = FP4_OK;
out:
    nvfp4_release(p);
    free(hsa);
    free(hsb);
    return st;
}

static fp4_status nvfp4_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    nvfp4_plan *p = (nvfp4_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    return fp4_gpu_poison_bf16(p->c[copy].d, (size_t)p->shape.m * (size_t)p->shape.n,
                               (cudaStream_t)stream, err);
}

/* One cublasLtMatmul with the prepared algorithm and the instance's
 * workspace: no allocation, capturable. beta = 0, C aliases D. */
static fp4_status nvfp4_run(void *plan, int copy, void *stream, fp4_err *err)
{
    nvfp4_plan *p = (nvfp4_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    const nvfp4_copy *c = &p->c[copy];
    const float beta = 0.0f;
    FP4_CUBLAS_TRY(err, cublasLtMatmul(p->inst->lt, c->op, &p->alpha, c->b, p->la, c->a, p->lb,
                                       &beta, c->d, p->ld, c->d, p->ld, &p->algo, p->inst->ws,
                                       NVFP4_WORKSPACE_BYTES, (cudaStream_t)stream));
    return FP4_OK;
}

static fp4_status nvfp4_read_output(void *plan, int copy, float *d, fp4_err *err)
{
    nvfp4_plan *p = (nvfp4_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    return fp4_gpu_read_bf16(p->c[copy].d, (size_t)p->shape.m * (size_t)p->shape.n, d, err);
}

/* Exactly the NVFP4 minimum: codes, padded swizzled scales, bf16 D. */
static double nvfp4_bytes_moved(const fp4_shape *s)
{
    return fp4_gemm_min_bytes(s->m, s->n, s->k);
}

/* Positional: C++17 has no designated initializers. One comment per field. */
extern "C" const fp4_backend_ops fp4_backend_cublaslt_nvfp4 = {
    FP4_BACKEND_API_VERSION,                               /* api_version */
    "cublaslt-nvfp4",                                      /* name */
    "cuBLASLt native NVFP4 GEMM (Blackwell only), bf16 D", /* summary */
    FP4_BACKEND_GPU,                                       /* flags: exact operands */
    FP4_MATH_FP4_TC,                                       /* math */
    1e-2,              /* tol_max: exact products, fp32 accumulation, one bf16 rounding of D */
    5e-3,              /* tol_norm */
    nvfp4_open,        /* open */
    nvfp4_close,       /* close */
    nvfp4_supports,    /* supports */
    nvfp4_prepare,     /* prepare */
    nvfp4_poison,      /* poison */
    nvfp4_run,         /* run */
    nvfp4_read_output, /* read_output */
    nvfp4_release,     /* release */
    nvfp4_bytes_moved, /* bytes_moved */
    NULL,              /* variant: the kernel is cuBLAS's choice, not ours to name */
};
