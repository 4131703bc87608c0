/* Backend "cuda-ref": the exact reference on the GPU (kernels/ref_gemm.cu).
 * Bit-identical to fp4_gemm_reference, fp32 output. An oracle for checking
 * other GPU backends on shapes where the CPU reference is slow, not a
 * contender: its kernel is deliberately simple. */
#include "fp4/backend.h"

#include <stdlib.h>

extern "C" {
#include "backends/backends.h" /* gives the table below C linkage */
}
#include "backends/blas_common.h"
#include "core/gpu.h"
#include "kernels/ref_gemm.h"

typedef struct ref_inst {
    int major, minor;   /* compute capability of the device at open() */
    fp4_warnings *warn; /* the caller's sink (set_warnings), NULL until set */
} ref_inst;

/* One independent operand + output set: the codes and plain row-major scales
 * exactly as fp4_matrix holds them, and D fp32 [m, n]. */
typedef struct ref_copy {
    void *a, *sa, *b, *sb;
    float *d;
} ref_copy;

typedef struct ref_plan {
    fp4_warnings *warn; /* the instance's, for release() */
    fp4_shape shape;
    float alpha;
    int copies;
    ref_copy *c; /* [copies] */
} ref_plan;

/* Any CUDA GPU of compute capability 7.0 or newer (dp4a needs 6.1). */
static fp4_status ref_open(void **inst, fp4_err *err)
{
    *inst = NULL;
    int major = 0, minor = 0;
    fp4_status st = fp4_gpu_require(7, 0, 0, &major, &minor, err);
    if (st != FP4_OK) return st;
    ref_inst *r = (ref_inst *)calloc(1, sizeof *r);
    if (!r) return fp4_fail(err, FP4_ERR_NOMEM, "cuda-ref: no host memory");
    r->major = major;
    r->minor = minor;
    *inst = r;
    return FP4_OK;
}

static void ref_close(void *inst)
{
    free(inst);
}

static void ref_set_warnings(void *inst, fp4_warnings *w)
{
    ((ref_inst *)inst)->warn = w;
}

/* Every valid shape with K <= 2^20 (exactness) and M within the grid limit. */
static fp4_status ref_supports(void *inst, const fp4_shape *s, fp4_err *err)
{
    return fp4_ref_gemm_supports(s->m, s->n, s->k, err);
}

/* Frees every buffer of a (possibly partly built) plan. */
static void ref_release(void *plan)
{
    ref_plan *p = (ref_plan *)plan;
    if (!p) return;
    if (p->c) {
        for (int i = 0; i < p->copies; i++) {
            fp4_gpu_release(p->c[i].a, "cuda-ref A codes", p->warn);
            fp4_gpu_release(p->c[i].sa, "cuda-ref A scales", p->warn);
            fp4_gpu_release(p->c[i].b, "cuda-ref B codes", p->warn);
            fp4_gpu_release(p->c[i].sb, "cuda-ref B scales", p->warn);
            fp4_gpu_release(p->c[i].d, "cuda-ref D", p->warn);
        }
        free(p->c);
    }
    free(p);
}

/* Uploads `copies` copies of the codes and plain scales of A and B, and
 * allocates D fp32 for each. On failure nothing is left allocated. */
static fp4_status ref_prepare(void *inst, const fp4_gemm_problem *pr, int copies, void **plan,
                              fp4_err *err)
{
    *plan = NULL;
    fp4_status st = fp4_gemm_problem_check(pr, copies, err);
    if (st != FP4_OK) return st;
    st = ref_supports(inst, &pr->shape, err);
    if (st != FP4_OK) return st;

    const fp4_shape *s = &pr->shape;
    const size_t a_bytes = (size_t)s->m * (size_t)(s->k / 2);
    const size_t b_bytes = (size_t)s->n * (size_t)(s->k / 2);
    const size_t sa_bytes = (size_t)s->m * (size_t)(s->k / 16);
    const size_t sb_bytes = (size_t)s->n * (size_t)(s->k / 16);
    size_t d_bytes;
    if (fp4_size_mul3((size_t)s->m, (size_t)s->n, sizeof(float), &d_bytes))
        return fp4_fail(err, FP4_ERR_OVERFLOW, "cuda-ref: D [%lld, %lld] fp32 overflows size_t",
                        (long long)s->m, (long long)s->n);

    ref_plan *p = (ref_plan *)calloc(1, sizeof *p);
    if (!p) return fp4_fail(err, FP4_ERR_NOMEM, "cuda-ref: no host memory for the plan");
    p->warn = ((ref_inst *)inst)->warn;
    p->shape = *s;
    p->alpha = pr->alpha;
    p->c = (ref_copy *)calloc((size_t)copies, sizeof *p->c);
    if (!p->c) {
        free(p);
        return fp4_fail(err, FP4_ERR_NOMEM, "cuda-ref: no host memory for %d copies", copies);
    }
    p->copies = copies;
    for (int i = 0; i < copies; i++) {
        ref_copy *c = &p->c[i];
        const fp4_matrix *a = fp4_problem_a(pr, i); /* odd copies: -A */
        if ((st = fp4_gpu_upload(&c->a, a->codes, a_bytes, "A codes", err)) != FP4_OK ||
            (st = fp4_gpu_upload(&c->sa, a->scales, sa_bytes, "A scales", err)) != FP4_OK ||
            (st = fp4_gpu_upload(&c->b, pr->b->codes, b_bytes, "B codes", err)) != FP4_OK ||
            (st = fp4_gpu_upload(&c->sb, pr->b->scales, sb_bytes, "B scales", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->d, d_bytes, "D (fp32)", err)) != FP4_OK) {
            ref_release(p);
            return st;
        }
    }
    *plan = p;
    return FP4_OK;
}

/* Fills D of one copy with NaN: the byte 0xFF makes 0xFFFFFFFF, a float NaN. */
static fp4_status ref_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    ref_plan *p = (ref_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    const size_t n = (size_t)p->shape.m * (size_t)p->shape.n * sizeof(float);
    FP4_CUDA_TRY(err, cudaMemsetAsync(p->c[copy].d, 0xFF, n, (cudaStream_t)stream));
    return FP4_OK;
}

/* One kernel launch on stream: no allocation, no synchronisation. */
static fp4_status ref_run(void *plan, int copy, void *stream, fp4_err *err)
{
    ref_plan *p = (ref_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    const ref_copy *c = &p->c[copy];
    return fp4_ref_gemm((const uint8_t *)c->a, (const uint8_t *)c->sa, (const uint8_t *)c->b,
                        (const uint8_t *)c->sb, p->shape.m, p->shape.n, p->shape.k, p->alpha, c->d,
                        (cudaStream_t)stream, err);
}

/* Synchronises the device and copies D [m, n] fp32 to d. */
static fp4_status ref_read_output(void *plan, int copy, float *d, fp4_err *err)
{
    ref_plan *p = (ref_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    return fp4_gpu_read_f32(p->c[copy].d, (size_t)p->shape.m * (size_t)p->shape.n, d, err);
}

/* What the kernel reads and writes: codes, plain scales, fp32 D (no global
 * scales: alpha is a kernel argument). */
static double ref_bytes_moved(const fp4_shape *s)
{
    const double m = (double)s->m, n = (double)s->n, k = (double)s->k;
    return (m + n) * k / 2.0 + (m + n) * k / 16.0 + 4.0 * m * n;
}

/* Positional: C++17 has no designated initializers. One comment per field. */
extern "C" const fp4_backend_ops fp4_backend_cuda_ref = {
    FP4_BACKEND_API_VERSION,                                    /* api_version */
    "cuda-ref",                                                 /* name */
    "exact NVFP4 reference on CUDA cores (int64 sums), fp32 D", /* summary */
    FP4_BACKEND_GPU | FP4_BACKEND_REFERENCE,                    /* flags */
    FP4_MATH_CUDA_CORES,                                        /* math */
    0.0,                                                        /* tol_max: exact */
    0.0,                                                        /* tol_norm: exact */
    ref_open,                                                   /* open */
    ref_close,                                                  /* close */
    ref_supports,                                               /* supports */
    ref_prepare,                                                /* prepare */
    ref_poison,                                                 /* poison */
    ref_run,                                                    /* run */
    ref_read_output,                                            /* read_output */
    ref_release,                                                /* release */
    ref_bytes_moved,                                            /* bytes_moved */
    NULL,             /* variant: one kernel, nothing to name */
    NULL,             /* flops: 2MNK */
    ref_set_warnings, /* set_warnings */
};
