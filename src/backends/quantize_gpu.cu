/* Backend "quantize": the GPU NVFP4 quantizer alone (kernels/fp4_quantize.cu),
 * on bf16 activations A [M, K] with a static global scale (a checkpoint's
 * input_scale): the half of a W4A4 inference step that a GEMM row does not
 * show. A row of this backend times one quantizer launch; N plays no part in
 * the timing.
 *
 * prepare() takes the case's bf16 activations (problem->a_bf16, negated for
 * odd copies; backends/w4a4_host.h), uploads `copies` sets (bf16 A in, codes
 * and swizzled scales out), runs the quantizer once on copy 0 (and copy 1)
 * and requires its output to equal the CPU quantizer's, the problem's A, bit
 * for bit (else: FAILED, with the count of differing bytes).
 * run() is one quantizer launch. read_output() first compares the copy's
 * freshly quantized codes and swizzled scales with the problem's A byte for
 * byte (FP4_ERR_VERIFY on a difference: a D check alone cannot see a -0 code
 * for +0, or a wrong scale of an all-zero block), then makes the engine's
 * normal verification apply end to end: it feeds them (and B) to the exact
 * GPU reference GEMM (the kernel behind cuda-ref) and returns D; it also fails
 * if a padding byte of the swizzled scales is not zero. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backends/backends.h" /* gives the table below C linkage */
#include "backends/w4a4_host.h"
}
#include "backends/blas_common.h"
#include "core/gpu.h"
#include "kernels/fp4_quantize.h"
#include "kernels/ref_gemm.h"

/* ---- shared with w4a4-sm90: the bit-for-bit round-trip check ------------------ */

extern "C" fp4_status fp4_w4a4_check_roundtrip(const char *who, const uint8_t *d_codes,
                                               const uint8_t *d_sf, const fp4_matrix *a,
                                               fp4_err *err)
{
    const size_t nc = (size_t)a->rows * (size_t)(a->cols / 2);
    const size_t ns = fp4_swizzled_size(a->rows, a->cols);
    uint8_t *codes = (uint8_t *)malloc(nc), *sf = (uint8_t *)malloc(ns),
            *want_sf = (uint8_t *)malloc(ns);
    fp4_status st = FP4_OK;
    if (!codes || !sf || !want_sf) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "%s: no host memory for the round-trip check", who);
        goto out;
    }
    if ((st = fp4_swizzle_scales(a->scales, a->rows, a->cols, want_sf, err)) != FP4_OK) goto out;
    FP4_CUDA_GOTO(err, st, cudaMemcpy(codes, d_codes, nc, cudaMemcpyDeviceToHost), out);
    FP4_CUDA_GOTO(err, st, cudaMemcpy(sf, d_sf, ns, cudaMemcpyDeviceToHost), out);
    {
        const size_t bc = fp4_w4a4_count_diff(codes, a->codes, nc);
        const size_t bs = fp4_w4a4_count_diff(sf, want_sf, ns);
        if (bc || bs)
            st = fp4_fail(err, FP4_ERR_VERIFY,
                          "%s: the GPU quantizer disagrees with the CPU quantizer on the same "
                          "bf16 input (%zu of %zu code and %zu of %zu swizzled scale bytes differ)",
                          who, bc, nc, bs, ns);
    }
out:
    free(codes);
    free(sf);
    free(want_sf);
    return st;
}

/* ---- the backend ---------------------------------------------------------------- */

typedef struct qz_copy {
    uint16_t *x;    /* bf16 A [m, k] */
    uint8_t *codes; /* [m, k/2] */
    uint8_t *sf;    /* swizzled, fp4_swizzled_size(m, k) */
} qz_copy;

typedef struct qz_inst {
    fp4_warnings *warn; /* the caller's sink (set_warnings), NULL until set */
} qz_inst;

typedef struct qz_plan {
    fp4_warnings *warn; /* the instance's, for release() */
    fp4_shape shape;
    float alpha;        /* the problem's: input_scale * weight_scale_2, a constant */
    float encode_scale; /* 1 / A.global_scale */
    int copies;
    qz_copy *c;
    /* for read_output only (untimed): B as cuda-ref takes it, plain A scales,
     * D fp32, the count of non-zero padding bytes */
    uint8_t *b_codes, *b_sf, *a_plain_sf;
    float *d;
    unsigned *bad_pad;
    fp4_matrix want;     /* the problem's A (host): the bytes every even copy must produce */
    fp4_matrix want_odd; /* and every odd copy (the CPU quantizer's output for -x) */
} qz_plan;

static fp4_status qz_open(void **inst, fp4_err *err)
{
    *inst = NULL;
    /* as cuda-ref, whose GEMM read_output runs (dp4a); below sm_89 the
     * quantizer's e4m3 conversion is cuda_fp8.h's exact software path */
    fp4_status st = fp4_gpu_require(7, 0, 0, NULL, NULL, err);
    if (st != FP4_OK) return st;
    *inst = calloc(1, sizeof(qz_inst));
    if (!*inst) return fp4_fail(err, FP4_ERR_NOMEM, "quantize: no host memory");
    return FP4_OK;
}

static void qz_close(void *inst)
{
    free(inst);
}

static void qz_set_warnings(void *inst, fp4_warnings *w)
{
    ((qz_inst *)inst)->warn = w;
}

/* The reference GEMM behind read_output bounds the shapes. */
static fp4_status qz_supports(void *inst, const fp4_shape *s, fp4_err *err)
{
    if (s->m > INT32_MAX - 128 || s->k > INT32_MAX / 2)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "quantize: %lldx%lld is too large",
                        (long long)s->m, (long long)s->k);
    return fp4_ref_gemm_supports(s->m, s->n, s->k, err);
}

static void qz_release(void *plan)
{
    qz_plan *p = (qz_plan *)plan;
    if (!p) return;
    if (p->c) {
        for (int i = 0; i < p->copies; i++) {
            fp4_gpu_release(p->c[i].x, "quantize x", p->warn);
            fp4_gpu_release(p->c[i].codes, "quantize codes", p->warn);
            fp4_gpu_release(p->c[i].sf, "quantize sf", p->warn);
        }
        free(p->c);
    }
    fp4_gpu_release(p->b_codes, "quantize b_codes", p->warn);
    fp4_gpu_release(p->b_sf, "quantize b_sf", p->warn);
    fp4_gpu_release(p->a_plain_sf, "quantize a_plain_sf", p->warn);
    fp4_gpu_release(p->d, "quantize d", p->warn);
    fp4_gpu_release(p->bad_pad, "quantize bad_pad", p->warn);
    fp4_matrix_free(&p->want);
    fp4_matrix_free(&p->want_odd);
    free(p);
}

static fp4_status qz_prepare(void *inst, const fp4_gemm_problem *pr, int copies, void **plan,
                             fp4_err *err)
{
    *plan = NULL;
    fp4_status st = fp4_gemm_problem_check(pr, copies, err);
    if (st != FP4_OK) return st;
    if ((st = qz_supports(inst, &pr->shape, err)) != FP4_OK) return st;
    const fp4_shape *s = &pr->shape;
    const size_t nx = (size_t)s->m * (size_t)s->k * 2, nc = (size_t)s->m * (size_t)(s->k / 2);
    const size_t ns = fp4_swizzled_size(s->m, s->k);
    size_t nd;
    if (fp4_size_mul3((size_t)s->m, (size_t)s->n, sizeof(float), &nd))
        return fp4_fail(err, FP4_ERR_OVERFLOW, "quantize: D overflows size_t");
    uint16_t *hx = (uint16_t *)malloc(nx);
    qz_plan *p = (qz_plan *)calloc(1, sizeof *p);
    if (!pr->a_bf16) {
        free(hx);
        free(p);
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "quantize: needs the bf16 activations A was quantized from");
    }
    if (!hx || !p || !(p->c = (qz_copy *)calloc((size_t)copies, sizeof *p->c))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "quantize: no host memory for the plan");
        goto out;
    }
    p->warn = ((qz_inst *)inst)->warn;
    p->shape = *s;
    p->alpha = pr->alpha;
    p->copies = copies;
    if ((st = fp4_matrix_copy(&p->want, pr->a, err)) != FP4_OK) goto out;
    if ((st = fp4_matrix_copy(&p->want_odd, fp4_problem_a(pr, 1), err)) != FP4_OK) goto out;
    for (int i = 0; i < copies; i++) {
        qz_copy *c = &p->c[i];
        if ((st = fp4_w4a4_copy_activations(pr, i, hx, &p->encode_scale, err)) != FP4_OK) goto out;
        if ((st = fp4_gpu_upload((void **)&c->x, hx, nx, "bf16 A", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->codes, nc, "A codes", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->sf, ns, "A swizzled scales", err)) != FP4_OK)
            goto out;
    }
    if ((st = fp4_gpu_upload((void **)&p->b_codes, pr->b->codes, (size_t)s->n * (size_t)(s->k / 2),
                             "B codes", err)) != FP4_OK ||
        (st = fp4_gpu_upload((void **)&p->b_sf, pr->b->scales, (size_t)s->n * (size_t)(s->k / 16),
                             "B scales", err)) != FP4_OK ||
        (st = fp4_gpu_alloc((void **)&p->a_plain_sf, (size_t)s->m * (size_t)(s->k / 16),
                            "A plain scales", err)) != FP4_OK ||
        (st = fp4_gpu_alloc((void **)&p->d, nd, "D (fp32)", err)) != FP4_OK ||
        (st = fp4_gpu_alloc((void **)&p->bad_pad, sizeof(unsigned), "padding counter", err)) != FP4_OK)
        goto out;
    /* GPU against CPU quantizer on copy 0 and on copy 1 (the negated input) */
    for (int i = 0; i < (copies < 2 ? copies : 2); i++) {
        FP4_CUDA_GOTO(err, st, cudaMemset(p->c[i].codes, 0xFF, nc), out);
        FP4_CUDA_GOTO(err, st, cudaMemset(p->c[i].sf, 0xFF, ns), out);
        if ((st = fp4_gpu_quantize_bf16(p->c[i].x, s->m, s->k, p->encode_scale, p->c[i].codes,
                                        p->c[i].sf, NULL, NULL, 0, err)) != FP4_OK)
            goto out;
        FP4_CUDA_GOTO(err, st, cudaDeviceSynchronize(), out);
        if ((st = fp4_w4a4_check_roundtrip("quantize", p->c[i].codes, p->c[i].sf,
                                           (i & 1) ? &p->want_odd : &p->want, err)) != FP4_OK)
            goto out;
    }
    *plan = p;
    p = NULL;
out:
    qz_release(p);
    free(hx);
    return st;
}

/* 0xFF everywhere the quantizer writes (codes -6, scale bytes NaN: any byte
 * left unwritten changes D or trips the padding check) and NaN in D. */
static fp4_status qz_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    qz_plan *p = (qz_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    const fp4_shape *s = &p->shape;
    cudaStream_t strm = (cudaStream_t)stream;
    FP4_CUDA_TRY(err, cudaMemsetAsync(p->c[copy].codes, 0xFF, (size_t)s->m * (size_t)(s->k / 2), strm));
    FP4_CUDA_TRY(err, cudaMemsetAsync(p->c[copy].sf, 0xFF, fp4_swizzled_size(s->m, s->k), strm));
    FP4_CUDA_TRY(err, cudaMemsetAsync(p->d, 0xFF, (size_t)s->m * (size_t)s->n * sizeof(float), strm));
    return FP4_OK;
}

/* One quantizer launch (static scale: no amax pass, no global scale written:
 * the step's alpha is a constant). Asynchronous, no allocation. */
static fp4_status qz_run(void *plan, int copy, void *stream, fp4_err *err)
{
    qz_plan *p = (qz_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    const qz_copy *c = &p->c[copy];
    return fp4_gpu_quantize_bf16(c->x, p->shape.m, p->shape.k, p->encode_scale, c->codes, c->sf,
                                 NULL, NULL, (cudaStream_t)stream, err);
}

/* swizzled [Mp, Kbp] -> plain [m, kb]; counts non-zero padding bytes. */
static __global__ void qz_unswizzle_kernel(const uint8_t *__restrict__ sf, int64_t rows, int kb,
                                           int kbp, uint8_t *__restrict__ plain,
                                           unsigned *__restrict__ bad_pad)
{
    const int64_t total = (rows + 127) / 128 * 128 * kbp;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / kbp;
        const int c = (int)(i - r * kbp);
        const uint8_t v = sf[(r >> 7) * (int64_t)(kbp / 4) * 512 + (c >> 2) * 512 + (r & 31) * 16 +
                             ((r >> 5) & 3) * 4 + (c & 3)];
        if (r < rows && c < kb)
            plain[r * kb + c] = v;
        else if (v)
            atomicAdd(bad_pad, 1u);
    }
}

/* Untimed: the exact reference GEMM on this copy's quantized A and B. */
static fp4_status qz_read_output(void *plan, int copy, float *d, fp4_err *err)
{
    qz_plan *p = (qz_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    const fp4_shape *s = &p->shape;
    const int kb = (int)(s->k / 16), kbp = (int)fp4_swizzled_kblocks(s->k);
    unsigned bad = 0;
    FP4_CUDA_TRY(err, cudaDeviceSynchronize());
    if ((st = fp4_w4a4_check_roundtrip("quantize", p->c[copy].codes, p->c[copy].sf,
                                       (copy & 1) ? &p->want_odd : &p->want, err)) != FP4_OK)
        return st;
    FP4_CUDA_TRY(err, cudaMemset(p->bad_pad, 0, sizeof(unsigned)));
    const int64_t total = fp4_swizzled_rows(s->m) * kbp;
    const int64_t blocks = (total + 255) / 256 < 4096 ? (total + 255) / 256 : 4096;
    qz_unswizzle_kernel<<<(unsigned)blocks, 256>>>(p->c[copy].sf, s->m, kb, kbp, p->a_plain_sf,
                                                   p->bad_pad);
    FP4_CUDA_LAUNCH_TRY(err);
    if ((st = fp4_ref_gemm(p->c[copy].codes, p->a_plain_sf, p->b_codes, p->b_sf, s->m, s->n, s->k,
                           p->alpha, p->d, 0, err)) != FP4_OK)
        return st;
    FP4_CUDA_TRY(err, cudaMemcpy(&bad, p->bad_pad, sizeof bad, cudaMemcpyDeviceToHost));
    if (bad)
        return fp4_fail(err, FP4_ERR_VERIFY,
                        "quantize: %u padding bytes of the swizzled scales are not zero", bad);
    return fp4_gpu_read_f32(p->d, (size_t)s->m * (size_t)s->n, d, err);
}

static double qz_bytes_moved(const fp4_shape *s)
{
    return fp4_w4a4_quantize_bytes(s);
}

/* A quantizer does no GEMM: no FLOP ceiling, the row is bound by bytes. */
static double qz_flops(const fp4_shape *s)
{
    (void)s;
    return 0.0;
}

/* Positional: C++17 has no designated initializers. One comment per field. */
extern "C" const fp4_backend_ops fp4_backend_quantize = {
    FP4_BACKEND_API_VERSION,                                          /* api_version */
    "quantize",                                                       /* name */
    "GPU NVFP4 quantizer alone: bf16 A -> codes + swizzled scales, static scale", /* summary */
    /* flags: starts from bf16 A; checked through the exact GEMM; no ratio */
    FP4_BACKEND_GPU | FP4_BACKEND_NOT_GEMM | FP4_BACKEND_FROM_BF16,
    FP4_MATH_CUDA_CORES, /* math */
    0.0,                 /* tol_max: exact (the reference GEMM on exact codes) */
    0.0,                 /* tol_norm: exact */
    qz_open,             /* open: any CUDA GPU (sm_70+) */
    qz_close,            /* close */
    qz_supports,         /* supports */
    qz_prepare,          /* prepare: bf16 A, upload, GPU vs CPU quantizer */
    qz_poison,           /* poison: quantizer outputs and D */
    qz_run,              /* run: one quantizer launch */
    qz_read_output,      /* read_output: reference GEMM on the quantized A (untimed) */
    qz_release,          /* release */
    qz_bytes_moved,      /* bytes_moved: 2MK + MK/2 + swizzled scales */
    NULL,                /* variant: one kernel */
    qz_flops,            /* flops: 0 */
    qz_set_warnings,     /* set_warnings */
};
