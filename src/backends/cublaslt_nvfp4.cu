/* Backend "cublaslt-nvfp4": the vendor's native NVFP4 GEMM (cuBLASLt >= 12.8,
 * Blackwell only). A and B stay NVFP4: CUDA_R_4F_E2M1 codes as they are (two
 * a byte, even k in the low nibble, which is also the order cuBLASLt's packed
 * e2m1 pairs use), block scales as CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 in
 * the 128x4 swizzled layout (fp4_swizzle_scales), global scales folded into
 * alpha, fp32 accumulation, bf16 D. Odd copies take problem->a_odd (-A).
 *
 * Algorithm: with problem->tuning, the fastest of the heuristic's first
 * valid answers, timed in prepare() on the plan's copies; without, the
 * heuristic's first answer, untimed (blas_tune.h). variant() names it and
 * says how it was chosen. The operands are the exact NVFP4 ones, so there is
 * no own_reference: the check against the NVFP4 reference is tight already.
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
#include "backends/blaslt_common.h"
#include "backends/blas_tune.h"
#include "core/gpu.h"

typedef struct nvfp4_copy {
    void *a, *b;             /* codes [m, k/2], [n, k/2] */
    void *sa, *sb;           /* swizzled scales, fp4_swizzled_size bytes each */
    void *d;                 /* [m, n] bf16 */
    cublasLtMatmulDesc_t op; /* per copy: it holds this copy's scale pointers */
} nvfp4_copy;

typedef struct nvfp4_plan {
    fp4_lt_inst *inst; /* borrowed: release the plan before close() */
    float alpha;
    int copies;
    nvfp4_copy *c; /* [copies] */
    fp4_lt_gemm g; /* layouts, algorithm and its description, shared by the copies */
} nvfp4_plan;

static void nvfp4_close(void *inst)
{
    fp4_lt_close((fp4_lt_inst *)inst);
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
    return fp4_lt_open((fp4_lt_inst **)inst, err);
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
    fp4_warnings *w = p->inst ? p->inst->warn : NULL;
    if (p->c) {
        for (int i = 0; i < p->copies; i++) {
            fp4_gpu_release(p->c[i].a, "cublaslt-nvfp4 A codes", w);
            fp4_gpu_release(p->c[i].b, "cublaslt-nvfp4 B codes", w);
            fp4_gpu_release(p->c[i].sa, "cublaslt-nvfp4 A scales", w);
            fp4_gpu_release(p->c[i].sb, "cublaslt-nvfp4 B scales", w);
            fp4_gpu_release(p->c[i].d, "cublaslt-nvfp4 D", w);
            if (p->c[i].op) FP4_CUBLAS_CLEANUP(w, cublasLtMatmulDescDestroy(p->c[i].op));
        }
        free(p->c);
    }
    fp4_lt_gemm_destroy(&p->g, w);
    free(p);
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

static fp4_status nvfp4_run(void *plan, int copy, void *stream, fp4_err *err);

/* Uploads `copies` copies of the codes and swizzled scales (odd copies: those
 * of problem->a_odd, -A, when given), allocates D, builds the descriptors and
 * chooses the algorithm (timing the candidates when pr->tuning). On failure
 * nothing is left allocated. */
static fp4_status nvfp4_prepare(void *inst, const fp4_gemm_problem *pr, int copies, void **plan,
                                fp4_err *err)
{
    *plan = NULL;
    fp4_status st = fp4_gemm_problem_check(pr, copies, err);
    if (st != FP4_OK) return st;
    st = nvfp4_supports(inst, &pr->shape, err);
    if (st != FP4_OK) return st;

    const fp4_shape *s = &pr->shape;
    uint8_t *hsa[2] = {NULL, NULL}, *hsb = NULL; /* A's, and -A's for odd copies */
    size_t sa_bytes = 0, sb_bytes = 0, d_bytes;
    nvfp4_plan *p = NULL;
    const size_t a_bytes = (size_t)s->m * (size_t)(s->k / 2);
    const size_t b_bytes = (size_t)s->n * (size_t)(s->k / 2);
    if (fp4_size_mul3((size_t)s->m, (size_t)s->n, 2, &d_bytes)) {
        st = fp4_fail(err, FP4_ERR_OVERFLOW, "cublaslt-nvfp4: D overflows size_t");
        goto out;
    }
    if ((st = nvfp4_swizzle(pr->a, &hsa[0], &sa_bytes, err)) != FP4_OK) goto out;
    if ((st = nvfp4_swizzle(pr->b, &hsb, &sb_bytes, err)) != FP4_OK) goto out;
    /* -A has A's scales (only code signs differ), but each copy takes what
     * its own matrix says */
    if (pr->a_odd && copies > 1 &&
        (st = nvfp4_swizzle(pr->a_odd, &hsa[1], &sa_bytes, err)) != FP4_OK)
        goto out;

    p = (nvfp4_plan *)calloc(1, sizeof *p);
    if (!p || !(p->c = (nvfp4_copy *)calloc((size_t)copies, sizeof *p->c))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "cublaslt-nvfp4: no host memory for the plan");
        goto out;
    }
    p->inst = (fp4_lt_inst *)inst;
    p->alpha = pr->alpha;
    p->copies = copies;
    /* codes as they are: CUDA_R_4F_E2M1 layouts count elements, not bytes */
    if ((st = fp4_lt_gemm_init(&p->g, s, CUDA_R_4F_E2M1, err)) != FP4_OK) goto out;
    for (int i = 0; i < copies; i++) {
        nvfp4_copy *c = &p->c[i];
        const fp4_matrix *a = fp4_problem_a(pr, i);
        const int odd = a != pr->a;
        if ((st = fp4_gpu_upload(&c->a, a->codes, a_bytes, "A codes", err)) != FP4_OK ||
            (st = fp4_gpu_upload(&c->b, pr->b->codes, b_bytes, "B codes", err)) != FP4_OK ||
            (st = fp4_gpu_upload(&c->sa, hsa[odd], sa_bytes, "A swizzled scales", err)) !=
                FP4_OK ||
            (st = fp4_gpu_upload(&c->sb, hsb, sb_bytes, "B swizzled scales", err)) != FP4_OK ||
            (st = fp4_gpu_alloc(&c->d, d_bytes, "D bf16", err)) != FP4_OK)
            goto out;
        /* TN, 32F compute and scale type, VEC16 UE4M3 block scales for both */
        if ((st = fp4_lt_desc_create(&c->op, c->sa, c->sb,
                                     CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3, err)) != FP4_OK)
            goto out;
    }
    if ((st = fp4_lt_choose_algo(p->inst, &p->g, p->c[0].op, pr->tuning, p, copies, nvfp4_run,
                                 "cublaslt-nvfp4", err)) != FP4_OK)
        goto out;
    *plan = p;
    p = NULL;
    st = FP4_OK;
out:
    nvfp4_release(p);
    free(hsa[0]);
    free(hsa[1]);
    free(hsb);
    return st;
}

static fp4_status nvfp4_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    nvfp4_plan *p = (nvfp4_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    return fp4_gpu_poison_bf16(p->c[copy].d, (size_t)p->g.shape.m * (size_t)p->g.shape.n,
                               (cudaStream_t)stream, err);
}

/* One cublasLtMatmul with the plan's algorithm and the instance's
 * workspace: no allocation, capturable. beta = 0, C aliases D. */
static fp4_status nvfp4_run(void *plan, int copy, void *stream, fp4_err *err)
{
    nvfp4_plan *p = (nvfp4_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    const nvfp4_copy *c = &p->c[copy];
    return fp4_lt_run(p->inst, &p->g, c->op, &p->alpha, c->a, c->b, c->d, (cudaStream_t)stream,
                      err);
}

static fp4_status nvfp4_read_output(void *plan, int copy, float *d, fp4_err *err)
{
    nvfp4_plan *p = (nvfp4_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    return fp4_gpu_read_bf16(p->c[copy].d, (size_t)p->g.shape.m * (size_t)p->g.shape.n, d, err);
}

/* The chosen algorithm and how (blas_tune.h); valid until release. */
static const char *nvfp4_variant(void *plan)
{
    return ((const nvfp4_plan *)plan)->g.variant;
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
    nvfp4_variant,       /* variant: the cuBLASLt algorithm and how it was chosen */
    NULL,                /* flops: 2MNK */
    fp4_lt_set_warnings, /* set_warnings */
    NULL,                /* own_reference: none needed, the operands are the exact NVFP4 */
    0.0,                 /* own_tol */
};
