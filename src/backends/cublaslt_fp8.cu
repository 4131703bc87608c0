/* Backend "cublaslt-fp8": the strongest simple Hopper alternative, a
 * tensorwise-scaled fp8 (E4M3) GEMM through cuBLASLt, bf16 D.
 *
 * Algorithm: with problem->tuning, the fastest of the heuristic's first
 * valid answers, timed in prepare() on the plan's copies; without, the
 * heuristic's first answer, untimed (blas_tune.h). variant() names it and
 * says how it was chosen ("lt algo <id> tile <rows>x<cols> stages
 * <k>x<count> splitk <n> (heuristic #1, untimed)").
 *
 * Verification, twice: loosely against the exact NVFP4 reference (tol_max,
 * tol_norm below: the fp8 rounding of the operands), and tightly against
 * own_reference, the exact product of the e4m3 operands of copy 0 with the
 * decode scales and alpha exactly as the GPU gets them (own_tol: bf16
 * rounding plus fp32 accumulation), so that a wrong scale or alpha cannot
 * hide inside the rounding error. Odd copies are built from problem->a_odd
 * (-A): same amax, so the same scale, and the sign-flipped e4m3 bytes.
 *
 * Operands. prepare() dequantizes A and B on the CPU (e2m1 * scale, without
 * the global scale) and re-quantizes each tensor to E4M3 with one fp32 scale
 * per tensor: q = e4m3_rne_satfinite(x * enc) with enc = 448 / amax(|x|), and
 * the decode scale dec = amax / 448 goes to cuBLASLt as {A,B}_SCALE_POINTER,
 * so D = alpha * dec_a * dec_b * sum q_a q_b (enc * dec = 1 to within one
 * float rounding, ~1e-7, far below the fp8 error).
 *
 * Why amax -> 448 exactly and not a power of two: the quantizer's global
 * scale puts the largest block scale at 448, so an NVFP4 tensor's amax is
 * almost always 6 * 448 and enc = 1/6: a value e2m1 * sf becomes
 * (e2m1 / 6) * sf, exact in E4M3 for the codes 1.5, 3 and 6 (a power of two
 * times sf), the largest values, which dominate the sums; only 0.5, 1, 2 and
 * 4 round. A power-of-two enc keeps 0.5..4 exact and rounds 1.5, 3, 6
 * instead, and measured on the test data (tests/gpu_backends.c, emulated on
 * the host) it is worse: ||D-R||/||R|| 0.031 against 0.019 at 16x2048x6144.
 *
 * Why it is lossy at all: e2m1 * e4m3 needs up to 6 significant bits
 * (1.5 * 1.875 = 2.8125 = 10.1101b), E4M3 has 4, so about half the values
 * round by up to 2^-4 relative. Host emulation of this exact scheme (operands
 * as here, exact sums, bf16 D) on the six test shapes gave max|D-R|/max|R|
 * 0.013..0.036 and ||D-R||/||R|| 0.014..0.033. tol_max 0.15 and tol_norm 0.08
 * leave a margin of 2.5x or more for cuBLASLt's own accumulation order: to be
 * tightened after measuring on the GPU.
 *
 * Layout: the same "TN" call as cublas-bf16 (see cublas_bf16.cu): cuBLAS's
 * A is our B buffer ([K, N] column-major, ld K, transa = T), its B is our A
 * buffer ([K, M], ld K, transb = N), D^T is [N, M] column-major with ld N, so
 * D is row-major [M, N]. Hopper fp8 needs exactly this: transa = T,
 * transb = N, compute 32F, scale type 32F, 16-byte aligned pointers and
 * leading dimensions that are multiples of 16 bytes (K % 16 == 0 always; D's
 * ld is N bf16, hence N % 8 == 0). Our A_SCALE_POINTER therefore carries B's
 * decode scale and B_SCALE_POINTER A's (the product is what matters). */
#include "fp4/backend.h"

#include <cublasLt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backends/backends.h" /* gives the table below C linkage */
}
#include "backends/blas_common.h"
#include "backends/blaslt_common.h"
#include "backends/blas_tune.h"
#include "core/gpu.h"

typedef struct fp8_copy {
    void *a;                 /* [m, k] e4m3 of this copy's A (fp4_problem_a) */
    void *b;                 /* [n, k] e4m3 */
    void *scales;            /* device float {dec_b, dec_a}: cuBLAS A (our B) first */
    void *d;                 /* [m, n] bf16 */
    cublasLtMatmulDesc_t op; /* per copy: it holds this copy's scale pointers */
} fp8_copy;

typedef struct fp8_plan {
    fp4_lt_inst *inst; /* borrowed: release the plan before close() */
    float alpha;
    int copies;
    fp8_copy *c;   /* [copies] */
    fp4_lt_gemm g; /* layouts, algorithm and its description, shared by the copies */
    /* own_reference: copy 0's operands and scales exactly as the GPU has them */
    uint8_t *a8;   /* [m, k] e4m3 of A (copy 0 is even: problem->a) */
    uint8_t *b8;   /* [n, k] e4m3 of B */
    float dec_a, dec_b;
    /* every e4m3 byte's value in units of 2^-9, the smallest subnormal, so
     * that the reference's sums are exact integers; NaN bytes (0x7F, 0xFF)
     * never occur, the encoder saturates */
    int32_t units[256];
} fp8_plan;

static void fp8_close(void *inst)
{
    fp4_lt_close((fp4_lt_inst *)inst);
}

/* Needs fp8 tensor cores: sm_89 (Ada) or newer. */
static fp4_status fp8_open(void **inst, fp4_err *err)
{
    *inst = NULL;
    fp4_status st = fp4_gpu_require(8, 9, 0, NULL, NULL, err);
    if (st != FP4_OK) return st;
    return fp4_lt_open((fp4_lt_inst **)inst, err);
}

/* D's leading dimension (N bf16) must be a multiple of 16 bytes. */
static fp4_status fp8_supports(void *inst, const fp4_shape *s, fp4_err *err)
{
    if (s->n % 8 != 0)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "cublaslt-fp8: N = %lld is not a multiple of 8 (cuBLASLt fp8 needs D's "
                        "leading dimension, N bf16, to be a multiple of 16 bytes)",
                        (long long)s->n);
    return FP4_OK;
}

static void fp8_release(void *plan)
{
    fp8_plan *p = (fp8_plan *)plan;
    if (!p) return;
    fp4_warnings *w = p->inst ? p->inst->warn : NULL;
    if (p->c) {
        for (int i = 0; i < p->copies; i++) {
            fp4_gpu_release(p->c[i].a, "cublaslt-fp8 A", w);
            fp4_gpu_release(p->c[i].b, "cublaslt-fp8 B", w);
            fp4_gpu_release(p->c[i].scales, "cublaslt-fp8 scales", w);
            fp4_gpu_release(p->c[i].d, "cublaslt-fp8 D", w);
            if (p->c[i].op) FP4_CUBLAS_CLEANUP(w, cublasLtMatmulDescDestroy(p->c[i].op));
        }
        free(p->c);
    }
    fp4_lt_gemm_destroy(&p->g, w);
    free(p->a8);
    free(p->b8);
    free(p);
}

/* Encode scale 448 / amax (1 for an all-zero tensor); see the top of the file. */
static float fp8_encode_scale(float amax)
{
    if (!(amax > 0.0f)) return 1.0f;
    return FP4_E4M3_MAX / amax;
}

/* Host e4m3 [rows, cols] of x's values (without its global scale) times the
 * encode scale 448 / amax; *dec = amax / 448. amax is of |x|, so -x gets the
 * same scales and exactly the sign-flipped bytes (the encoder rounds
 * symmetrically). *out is malloc'ed; the caller frees it. */
static fp4_status fp8_requantize(const fp4_matrix *x, uint8_t **out, float *dec, fp4_err *err)
{
    *out = NULL;
    size_t n;
    if (fp4_size_mul((size_t)x->rows, (size_t)x->cols, &n))
        return fp4_fail(err, FP4_ERR_OVERFLOW, "cublaslt-fp8: fp8 copy overflows size_t");
    uint8_t *q = (uint8_t *)malloc(n);
    float *row = (float *)malloc((size_t)x->cols * sizeof(float));
    if (!q || !row) {
        free(q);
        free(row);
        return fp4_fail(err, FP4_ERR_NOMEM, "cublaslt-fp8: no host memory for a %zu-byte fp8 copy",
                        n);
    }
    float amax = 0.0f;
    for (int64_t r = 0; r < x->rows; r++) {
        fp4_host_decode_row(x, r, row);
        for (int64_t c = 0; c < x->cols; c++) amax = fmaxf(amax, fabsf(row[c]));
    }
    const float enc = fp8_encode_scale(amax);
    for (int64_t r = 0; r < x->rows; r++) {
        fp4_host_decode_row(x, r, row);
        uint8_t *dst = q + (size_t)r * (size_t)x->cols;
        for (int64_t c = 0; c < x->cols; c++) dst[c] = fp4_e4m3_encode(row[c] * enc);
    }
    free(row);
    *dec = amax > 0.0f ? amax / FP4_E4M3_MAX : 1.0f;
    *out = q;
    return FP4_OK;
}

static fp4_status fp8_run(void *plan, int copy, void *stream, fp4_err *err);

/* Re-quantizes A (and -A for odd copies, when the problem has it) and B to
 * e4m3 on the host (see the top of the file), uploads `copies` copies with
 * their decode scales, builds the descriptors and chooses the algorithm
 * (timing the candidates when pr->tuning). Keeps copy 0's host operands for
 * own_reference. On failure nothing is left allocated. */
static fp4_status fp8_prepare(void *inst, const fp4_gemm_problem *pr, int copies, void **plan,
                              fp4_err *err)
{
    *plan = NULL;
    fp4_status st = fp4_gemm_problem_check(pr, copies, err);
    if (st != FP4_OK) return st;
    st = fp8_supports(inst, &pr->shape, err);
    if (st != FP4_OK) return st;

    const fp4_shape *s = &pr->shape;
    uint8_t *ha[2] = {NULL, NULL}, *hb = NULL; /* A, and -A for odd copies */
    /* per kind of A: {B's, A's} decode scales 16 bytes apart (cuBLAS's A is our B) */
    float dec[2][8] = {{1.0f, 0, 0, 0, 1.0f, 0, 0, 0}, {1.0f, 0, 0, 0, 1.0f, 0, 0, 0}};
    fp8_plan *p = NULL;
    const size_t a_bytes = (size_t)s->m * (size_t)s->k; /* fp8_requantize checks it */
    const size_t b_bytes = (size_t)s->n * (size_t)s->k;
    size_t d_bytes;
    if (fp4_size_mul3((size_t)s->m, (size_t)s->n, 2, &d_bytes)) {
        st = fp4_fail(err, FP4_ERR_OVERFLOW, "cublaslt-fp8: D overflows size_t");
        goto out;
    }
    if ((st = fp8_requantize(pr->a, &ha[0], &dec[0][4], err)) != FP4_OK) goto out;
    if ((st = fp8_requantize(pr->b, &hb, &dec[0][0], err)) != FP4_OK) goto out;
    dec[1][0] = dec[0][0];
    if (pr->a_odd && copies > 1) {
        if ((st = fp8_requantize(pr->a_odd, &ha[1], &dec[1][4], err)) != FP4_OK) goto out;
        /* amax is symmetric: a different scale means a_odd is not -A */
        if (dec[1][4] != dec[0][4]) {
            st = fp4_fail(err, FP4_ERR_INVALID_ARG,
                          "cublaslt-fp8: the odd copies' A has fp8 scale %g, A has %g: a_odd is "
                          "not -A",
                          (double)dec[1][4], (double)dec[0][4]);
            goto out;
        }
    }

    p = (fp8_plan *)calloc(1, sizeof *p);
    if (!p || !(p->c = (fp8_copy *)calloc((size_t)copies, sizeof *p->c))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "cublaslt-fp8: no host memory for the plan");
        goto out;
    }
    p->inst = (fp4_lt_inst *)inst;
    p->alpha = pr->alpha;
    p->copies = copies;
    if ((st = fp4_lt_gemm_init(&p->g, s, CUDA_R_8F_E4M3, err)) != FP4_OK) goto out;
    for (int i = 0; i < copies; i++) {
        fp8_copy *c = &p->c[i];
        const int odd = fp4_problem_a(pr, i) != pr->a; /* built from a_odd */
        if ((st = fp4_gpu_upload(&c->a, ha[odd], a_bytes, "A e4m3", err)) != FP4_OK ||
            (st = fp4_gpu_upload(&c->b, hb, b_bytes, "B e4m3", err)) != FP4_OK ||
            (st = fp4_gpu_upload(&c->scales, dec[odd], sizeof dec[odd], "fp8 scales", err)) !=
                FP4_OK ||
            (st = fp4_gpu_alloc(&c->d, d_bytes, "D bf16", err)) != FP4_OK)
            goto out;
        /* TN, 32F compute, no FAST_ACCUM (the accurate mode, which periodically
         * promotes the partial sums to full fp32). Each decode scale on its own
         * 16-byte boundary: cublasLtMatmul answered NOT_SUPPORTED on the H200
         * when B's scale sat 4 bytes after A's. */
        if ((st = fp4_lt_desc_create(&c->op, (const float *)c->scales + 4, c->scales, -1, err)) !=
            FP4_OK)
            goto out;
    }
    if ((st = fp4_lt_choose_algo(p->inst, &p->g, p->c[0].op, pr->tuning, p, copies, fp8_run,
                                 "cublaslt-fp8", err)) != FP4_OK)
        goto out;

    /* own_reference's copy of what copy 0 computes with */
    p->a8 = ha[0];
    p->b8 = hb;
    ha[0] = hb = NULL;
    p->dec_a = dec[0][4];
    p->dec_b = dec[0][0];
    for (int v = 0; v < 256; v++) {
        const float x = fp4_e4m3_decode((uint8_t)v);
        p->units[v] = isnan(x) ? 0 : (int32_t)(x * 0x1p9f); /* exact: x is a multiple of 2^-9 */
    }
    *plan = p;
    p = NULL;
    st = FP4_OK;
out:
    fp8_release(p);
    free(ha[0]);
    free(ha[1]);
    free(hb);
    return st;
}

static fp4_status fp8_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    fp8_plan *p = (fp8_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    return fp4_gpu_poison_bf16(p->c[copy].d, (size_t)p->g.shape.m * (size_t)p->g.shape.n,
                               (cudaStream_t)stream, err);
}

/* One cublasLtMatmul with the plan's algorithm and the instance's
 * workspace: no allocation, capturable. beta = 0, C aliases D. */
static fp4_status fp8_run(void *plan, int copy, void *stream, fp4_err *err)
{
    fp8_plan *p = (fp8_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    const fp8_copy *c = &p->c[copy];
    return fp4_lt_run(p->inst, &p->g, c->op, &p->alpha, c->a, c->b, c->d, (cudaStream_t)stream,
                      err);
}

static fp4_status fp8_read_output(void *plan, int copy, float *d, fp4_err *err)
{
    fp8_plan *p = (fp8_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    return fp4_gpu_read_bf16(p->c[copy].d, (size_t)p->g.shape.m * (size_t)p->g.shape.n, d, err);
}

/* The chosen algorithm and how (blas_tune.h); valid until release. */
static const char *fp8_variant(void *plan)
{
    return ((const fp8_plan *)plan)->g.variant;
}

/* D[row, col] of copy 0 from the e4m3 operands and scales the GPU has:
 * alpha * dec_a * dec_b * sum_k a8[row, k] b8[col, k]. The sum is exact: in
 * units of 2^-9 each product is an integer below 2^36, and K <= 2^20 keeps
 * the total below 2^56 (int64). The one rounding left, of the sum and the
 * three float factors to double, is ~1e-16 relative. NaN outside the shape. */
static double fp8_own_reference(void *plan, int64_t row, int64_t col)
{
    const fp8_plan *p = (const fp8_plan *)plan;
    const fp4_shape *s = &p->g.shape;
    if (row < 0 || row >= s->m || col < 0 || col >= s->n) return NAN;
    const uint8_t *a = p->a8 + (size_t)row * (size_t)s->k;
    const uint8_t *b = p->b8 + (size_t)col * (size_t)s->k;
    int64_t sum = 0;
    for (int64_t k = 0; k < s->k; k++) sum += (int64_t)p->units[a[k]] * p->units[b[k]];
    return (double)sum * 0x1p-18 * (double)p->alpha * (double)p->dec_a * (double)p->dec_b;
}

/* e4m3 A and B (one byte an element), bf16 D. */
static double fp8_bytes_moved(const fp4_shape *s)
{
    const double m = (double)s->m, n = (double)s->n, k = (double)s->k;
    return m * k + n * k + 2.0 * m * n;
}

/* Positional: C++17 has no designated initializers. One comment per field. */
extern "C" const fp4_backend_ops fp4_backend_cublaslt_fp8 = {
    FP4_BACKEND_API_VERSION,                                            /* api_version */
    "cublaslt-fp8",                                                     /* name */
    "cuBLASLt fp8 e4m3 GEMM, operands re-quantized per tensor (lossy)", /* summary */
    FP4_BACKEND_GPU | FP4_BACKEND_LOSSY,                                /* flags */
    FP4_MATH_FP8_TC,                                                    /* math */
    0.15,                /* tol_max: operands rounded to 4 significant bits; see the top */
    0.08,                /* tol_norm */
    fp8_open,            /* open */
    fp8_close,           /* close */
    fp8_supports,        /* supports */
    fp8_prepare,         /* prepare */
    fp8_poison,          /* poison */
    fp8_run,             /* run */
    fp8_read_output,     /* read_output */
    fp8_release,         /* release */
    fp8_bytes_moved,     /* bytes_moved */
    fp8_variant,         /* variant: the cuBLASLt algorithm and how it was chosen */
    NULL,                /* flops: 2MNK */
    fp4_lt_set_warnings, /* set_warnings */
    fp8_own_reference,   /* own_reference: the exact product of the e4m3 operands */
    /* own_tol: the products of e4m3 values are exact in fp32; what separates
     * D from own_reference is the fp32 accumulation (with cuBLASLt's periodic
     * promotion, ~2^-13 of the partial sums or better) and one bf16 rounding
     * of D (2^-9 relative, at most 0.2% of max|own|): 1e-2 is ~5x that, and
     * a scale or alpha off by 5% fails it */
    1e-2,
};
