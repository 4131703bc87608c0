/* Backend "cublas-bf16": the baseline a Hopper user has without FP4 support.
 * prepare() dequantizes A and B on the CPU to bf16 WITHOUT the global scales
 * (e2m1 * e4m3 has at most 6 significant bits, so it is exact in bf16; odd
 * copies from problem->a_odd, -A), and run() is one bf16 x bf16 -> bf16 GEMM
 * with fp32 accumulation and alpha = the problem's alpha (the product of the
 * two global scales):
 *   - problem->tuning 0: cublasGemmEx with CUBLAS_GEMM_DEFAULT, cuBLAS's own
 *     untimed choice; variant() says "cublasGemmEx default (untimed)";
 *   - problem->tuning 1: the same product through cuBLASLt (same layouts,
 *     same workspace), with the fastest of the heuristic's first valid
 *     algorithms, timed in prepare() (blas_tune.h); variant() names it: "lt
 *     algo <id> tile <rows>x<cols> stages <k>x<count> splitk <n> (heuristic
 *     #<rank>, fastest of <n> timed, <ratio>x over #1)".
 * The operands are exact, so the check against the NVFP4 reference is the
 * whole verification (no own_reference).
 *
 * Layout. We want D[m, n] = sum_k A[m, k] * B[n, k], all row-major:
 * A [M, K] (ld K), B [N, K] (ld K), D [M, N] (ld N). cuBLAS is column-major,
 * and a row-major [R, C] buffer with ld C is the column-major [C, R] matrix
 * with the same ld, i.e. its transpose. So in cuBLAS's eyes
 *   D buffer = D^T, column-major [N, M], ldc = N
 *   A buffer = A^T, column-major [K, M], ld K
 *   B buffer = B^T, column-major [K, N], ld K
 * and D^T = B * A^T, i.e. C(N x M) = op(X)(N x K) * op(Y)(K x M) with
 *   X = the B buffer ([K, N] as stored) and op = T      -> B     [N, K], lda = K
 *   Y = the A buffer ([K, M] as stored) and op = N      -> A^T   [K, M], ldb = K
 *   cuBLAS m = N, n = M, k = K.
 * That is the "TN" call (transa = T, transb = N), the same one cuBLASLt fp8
 * insists on. */
#include "fp4/backend.h"

#include <limits.h>
#include <stdlib.h>

extern "C" {
#include "backends/backends.h" /* gives the table below C linkage */
}
#include "backends/blas_common.h"
#include "backends/blas_tune.h"
#include "core/gpu.h"

typedef struct bf16_inst {
    /* cuBLASLt handle (the tuned path), the 32 MiB workspace that both
     * handles use (set explicitly, so that cuBLAS never allocates one while a
     * CUDA graph is being captured; the size cuBLAS itself asks for on Hopper
     * for its largest kernels) and the warning sink (set_warnings). Only one
     * path runs per plan, and plans of one instance run one at a time. */
    fp4_lt_inst *lt;
    cublasHandle_t h;
} bf16_inst;

typedef struct bf16_copy {
    void *a; /* [m, k] bf16 of this copy's A (fp4_problem_a) */
    void *b; /* [n, k] bf16 */
    void *d; /* [m, n] bf16 */
} bf16_copy;

typedef struct bf16_plan {
    bf16_inst *inst; /* borrowed: the plan must be released before close() */
    fp4_shape shape;
    float alpha;
    int copies;
    bf16_copy *c; /* [copies] */
    /* problem->tuning: cuBLASLt with the fastest timed algorithm (g, op);
     * else cublasGemmEx with CUBLAS_GEMM_DEFAULT, and g and op stay unused */
    int tuned;
    fp4_lt_gemm g;
    cublasLtMatmulDesc_t op;
} bf16_plan;

static void bf16_close(void *inst)
{
    bf16_inst *b = (bf16_inst *)inst;
    if (!b) return;
    if (b->h) FP4_CUBLAS_CLEANUP(b->lt ? b->lt->warn : NULL, cublasDestroy(b->h));
    fp4_lt_close(b->lt); /* after cuBLAS: it frees the workspace cuBLAS was given */
    free(b);
}

static void bf16_set_warnings(void *inst, fp4_warnings *w)
{
    fp4_lt_set_warnings(((bf16_inst *)inst)->lt, w);
}

/* Needs bf16 tensor cores (sm_80+). Creates both handles and the workspace. */
static fp4_status bf16_open(void **inst, fp4_err *err)
{
    *inst = NULL;
    fp4_status st = fp4_gpu_require(8, 0, 0, NULL, NULL, err);
    if (st != FP4_OK) return st;
    bf16_inst *b = (bf16_inst *)calloc(1, sizeof *b);
    if (!b) return fp4_fail(err, FP4_ERR_NOMEM, "cublas-bf16: no host memory");
    if ((st = fp4_lt_open(&b->lt, err)) != FP4_OK) goto fail;
    FP4_CUBLAS_GOTO(err, st, cublasCreate(&b->h), fail);
    FP4_CUBLAS_GOTO(err, st, cublasSetWorkspace(b->h, b->lt->ws, FP4_LT_WORKSPACE_BYTES), fail);
    *inst = b;
    return FP4_OK;
fail:
    bf16_close(b);
    return st;
}

/* cublasGemmEx takes int sizes. */
static fp4_status bf16_supports(void *inst, const fp4_shape *s, fp4_err *err)
{
    if (s->m > INT_MAX || s->n > INT_MAX || s->k > INT_MAX)
        return fp4_fail(
            err, FP4_ERR_UNSUPPORTED,
            "cublas-bf16: %lldx%lldx%lld has a size over INT_MAX (cublasGemmEx takes int)",
            (long long)s->m, (long long)s->n, (long long)s->k);
    return FP4_OK;
}

static void bf16_release(void *plan)
{
    bf16_plan *p = (bf16_plan *)plan;
    if (!p) return;
    fp4_warnings *w = p->inst ? p->inst->lt->warn : NULL;
    if (p->c) {
        for (int i = 0; i < p->copies; i++) {
            fp4_gpu_release(p->c[i].a, "cublas-bf16 A", w);
            fp4_gpu_release(p->c[i].b, "cublas-bf16 B", w);
            fp4_gpu_release(p->c[i].d, "cublas-bf16 D", w);
        }
        free(p->c);
    }
    if (p->op) FP4_CUBLAS_CLEANUP(w, cublasLtMatmulDescDestroy(p->op));
    fp4_lt_gemm_destroy(&p->g, w);
    free(p);
}

/* Host bf16 [rows, cols] = e2m1 * scale of x, without the global scale (exact).
 * *out is malloc'ed; the caller frees it. */
static fp4_status bf16_dequant(const fp4_matrix *x, uint16_t **out, fp4_err *err)
{
    *out = NULL;
    size_t n;
    if (fp4_size_mul3((size_t)x->rows, (size_t)x->cols, 2, &n))
        return fp4_fail(err, FP4_ERR_OVERFLOW, "cublas-bf16: bf16 copy overflows size_t");
    uint16_t *v = (uint16_t *)malloc(n);
    float *row = (float *)malloc((size_t)x->cols * sizeof(float));
    if (!v || !row) {
        free(v);
        free(row);
        return fp4_fail(err, FP4_ERR_NOMEM, "cublas-bf16: no host memory for a %zu-byte bf16 copy",
                        n);
    }
    for (int64_t r = 0; r < x->rows; r++) {
        fp4_host_decode_row(x, r, row);
        uint16_t *dst = v + (size_t)r * (size_t)x->cols;
        for (int64_t c = 0; c < x->cols; c++) dst[c] = fp4_bf16_from_float(row[c]);
    }
    free(row);
    *out = v;
    return FP4_OK;
}

static fp4_status bf16_run(void *plan, int copy, void *stream, fp4_err *err);

/* Dequantizes A (and -A for odd copies, when the problem has it) and B to
 * bf16 once on the host, uploads `copies` copies of each and allocates D bf16
 * per copy; with pr->tuning, builds the cuBLASLt layouts and descriptor and
 * times the candidate algorithms. On failure nothing is left allocated. */
static fp4_status bf16_prepare(void *inst, const fp4_gemm_problem *pr, int copies, void **plan,
                               fp4_err *err)
{
    *plan = NULL;
    fp4_status st = fp4_gemm_problem_check(pr, copies, err);
    if (st != FP4_OK) return st;
    st = bf16_supports(inst, &pr->shape, err);
    if (st != FP4_OK) return st;

    const fp4_shape *s = &pr->shape;
    uint16_t *ha[2] = {NULL, NULL}, *hb = NULL; /* A, and -A for odd copies */
    bf16_plan *p = NULL;
    const size_t a_bytes = (size_t)s->m * (size_t)s->k * 2; /* bf16_dequant checks it */
    const size_t b_bytes = (size_t)s->n * (size_t)s->k * 2;
    size_t d_bytes;
    if (fp4_size_mul3((size_t)s->m, (size_t)s->n, 2, &d_bytes)) {
        st = fp4_fail(err, FP4_ERR_OVERFLOW, "cublas-bf16: D overflows size_t");
        goto out;
    }
    if ((st = bf16_dequant(pr->a, &ha[0], err)) != FP4_OK) goto out;
    if ((st = bf16_dequant(pr->b, &hb, err)) != FP4_OK) goto out;
    if (pr->a_odd && copies > 1 && (st = bf16_dequant(pr->a_odd, &ha[1], err)) != FP4_OK)
        goto out;

    p = (bf16_plan *)calloc(1, sizeof *p);
    if (!p || !(p->c = (bf16_copy *)calloc((size_t)copies, sizeof *p->c))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "cublas-bf16: no host memory for the plan");
        goto out;
    }
    p->inst = (bf16_inst *)inst;
    p->shape = *s;
    p->alpha = pr->alpha;
    p->copies = copies;
    for (int i = 0; i < copies; i++) {
        bf16_copy *c = &p->c[i];
        const int odd = fp4_problem_a(pr, i) != pr->a; /* built from a_odd */
        if ((st = fp4_gpu_upload(&c->a, ha[odd], a_bytes, "A bf16", err)) != FP4_OK ||
            (st = fp4_gpu_upload(&c->b, hb, b_bytes, "B bf16", err)) != FP4_OK ||
            (st = fp4_gpu_alloc(&c->d, d_bytes, "D bf16", err)) != FP4_OK)
            goto out;
    }
    if (pr->tuning) {
        /* the same TN product through cuBLASLt: bf16 A, B and D, fp32
         * compute and scale, no scale pointers */
        p->tuned = 1;
        if ((st = fp4_lt_gemm_init(&p->g, s, CUDA_R_16BF, err)) != FP4_OK ||
            (st = fp4_lt_desc_create(&p->op, NULL, NULL, -1, err)) != FP4_OK ||
            (st = fp4_lt_choose_algo(p->inst->lt, &p->g, p->op, 1, p, copies, bf16_run,
                                     "cublas-bf16", err)) != FP4_OK)
            goto out;
    }
    *plan = p;
    p = NULL;
    st = FP4_OK;
out:
    bf16_release(p);
    free(ha[0]);
    free(ha[1]);
    free(hb);
    return st;
}

static fp4_status bf16_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    bf16_plan *p = (bf16_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    return fp4_gpu_poison_bf16(p->c[copy].d, (size_t)p->shape.m * (size_t)p->shape.n,
                               (cudaStream_t)stream, err);
}

/* D^T = B * A^T in cuBLAS's column-major terms (see the top of the file).
 * Tuned: one cublasLtMatmul with the plan's algorithm and the instance's
 * workspace. Otherwise cublasGemmEx; cublasSetStream resets the handle to
 * cuBLAS's default workspace pool, so the workspace is set again after it,
 * every call: both are host-side settings, no allocation, fine inside a graph
 * capture. alpha is read from host memory when the call is enqueued (or
 * captured). */
static fp4_status bf16_run(void *plan, int copy, void *stream, fp4_err *err)
{
    bf16_plan *p = (bf16_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    const bf16_copy *c = &p->c[copy];
    if (p->tuned)
        return fp4_lt_run(p->inst->lt, &p->g, p->op, &p->alpha, c->a, c->b, c->d,
                          (cudaStream_t)stream, err);
    const int m = (int)p->shape.m, n = (int)p->shape.n, k = (int)p->shape.k;
    const float beta = 0.0f;
    cublasHandle_t h = p->inst->h;
    FP4_CUBLAS_TRY(err, cublasSetStream(h, (cudaStream_t)stream));
    FP4_CUBLAS_TRY(err, cublasSetWorkspace(h, p->inst->lt->ws, FP4_LT_WORKSPACE_BYTES));
    FP4_CUBLAS_TRY(err, cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &p->alpha, c->b,
                                     CUDA_R_16BF, k, c->a, CUDA_R_16BF, k, &beta, c->d, CUDA_R_16BF,
                                     n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return FP4_OK;
}

static fp4_status bf16_read_output(void *plan, int copy, float *d, fp4_err *err)
{
    bf16_plan *p = (bf16_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    return fp4_gpu_read_bf16(p->c[copy].d, (size_t)p->shape.m * (size_t)p->shape.n, d, err);
}

/* What runs: the tuned cuBLASLt algorithm and how it was chosen
 * (blas_tune.h), or cuBLAS's own choice inside cublasGemmEx, which it does
 * not name. Valid until release. */
static const char *bf16_variant(void *plan)
{
    const bf16_plan *p = (const bf16_plan *)plan;
    return p->tuned ? p->g.variant : "cublasGemmEx default (untimed)";
}

/* bf16 A, B and D, each touched once. */
static double bf16_bytes_moved(const fp4_shape *s)
{
    const double m = (double)s->m, n = (double)s->n, k = (double)s->k;
    return 2.0 * (m * k + n * k + m * n);
}

/* Positional: C++17 has no designated initializers. One comment per field. */
extern "C" const fp4_backend_ops fp4_backend_cublas_bf16 = {
    FP4_BACKEND_API_VERSION,                                    /* api_version */
    "cublas-bf16",                                              /* name */
    "cuBLAS bf16 GEMM on operands dequantized exactly to bf16", /* summary */
    FP4_BACKEND_GPU,                                            /* flags: exact operands */
    FP4_MATH_BF16_TC,                                           /* math */
    1e-2,             /* tol_max: fp32 accumulation, then one bf16 rounding of D (2^-9 relative) */
    5e-3,             /* tol_norm */
    bf16_open,        /* open */
    bf16_close,       /* close */
    bf16_supports,    /* supports */
    bf16_prepare,     /* prepare */
    bf16_poison,      /* poison */
    bf16_run,         /* run */
    bf16_read_output, /* read_output */
    bf16_release,     /* release */
    bf16_bytes_moved, /* bytes_moved */
    bf16_variant,      /* variant: the cuBLASLt algorithm, or cublasGemmEx's default */
    NULL,              /* flops: 2MNK */
    bf16_set_warnings, /* set_warnings */
    NULL,              /* own_reference: none needed, bf16 holds the NVFP4 operands exactly */
    0.0,               /* own_tol */
};
