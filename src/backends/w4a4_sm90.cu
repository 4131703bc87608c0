/* Backend "w4a4-sm90": one W4A4 inference step on Hopper, what a serving
 * engine pays per linear layer: bf16 activations -> GPU quantizer (static
 * scale, kernels/fp4_quantize.cu) -> fp4-sm90 GEMM against pre-packed NVFP4
 * weights -> bf16 D. Compare its row with cublas-bf16 (the unquantized
 * layer) and fp4-sm90 (the GEMM alone, activations already quantized).
 *
 * Built on the fp4-sm90 backend itself (same instance, same plan: variant,
 * packed B, workspace): prepare() adds the case's bf16 A per copy
 * (backends/w4a4_host.h) and checks that the GPU quantizer reproduces the CPU
 * quantizer's output, the problem's A, bit for bit (else: FAILED). run() = two launches on the stream, the quantizer writing
 * the plan's A, then fp4-sm90's run: asynchronous, no allocation,
 * graph-capturable. */
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backends/backends.h" /* gives the table below C linkage */
#include "backends/w4a4_host.h"
}
#include "backends/blas_common.h"
#include "core/gpu.h"
#include "kernels/fp4_quantize.h"

/* fp4-sm90's instance, and where this backend's own cleanup warnings go. */
typedef struct w4_inst {
    void *gemm;         /* fp4-sm90's instance */
    fp4_warnings *warn; /* the caller's sink (set_warnings), NULL until set */
} w4_inst;

typedef struct w4_plan {
    fp4_warnings *warn; /* the instance's, for release() */
    void *gemm;      /* the fp4-sm90 plan (A buffers overwritten by the quantizer) */
    fp4_shape shape;
    float encode_scale;
    int copies;
    uint16_t **x;    /* [copies] bf16 A [m, k] */
} w4_plan;

static const fp4_backend_ops *const sm90 = &fp4_backend_fp4_sm90;

static void w4_release(void *plan)
{
    w4_plan *p = (w4_plan *)plan;
    if (!p) return;
    if (p->x)
        for (int i = 0; i < p->copies; i++) fp4_gpu_release(p->x[i], "w4a4-sm90 bf16 A", p->warn);
    free(p->x);
    if (p->gemm) sm90->release(p->gemm);
    free(p);
}

/* GPU against CPU quantizer on one copy (its A: a, or -A for odd copies). */
static fp4_status w4_roundtrip(w4_plan *p, int copy, const fp4_matrix *a, fp4_err *err)
{
    uint8_t *codes, *sf;
    fp4_status st = fp4_sm90_plan_a(p->gemm, copy, &codes, &sf, err);
    if (st != FP4_OK) return st;
    const fp4_shape *s = &p->shape;
    FP4_CUDA_TRY(err, cudaMemset(codes, 0xFF, (size_t)s->m * (size_t)(s->k / 2)));
    FP4_CUDA_TRY(err, cudaMemset(sf, 0xFF, fp4_swizzled_size(s->m, s->k)));
    if ((st = fp4_gpu_quantize_bf16(p->x[copy], s->m, s->k, p->encode_scale, codes, sf, NULL, NULL,
                                    0, err)) != FP4_OK)
        return st;
    FP4_CUDA_TRY(err, cudaDeviceSynchronize());
    return fp4_w4a4_check_roundtrip("w4a4-sm90", codes, sf, a, err);
}

static fp4_status w4_prepare(void *inst, const fp4_gemm_problem *pr, int copies, void **plan,
                             fp4_err *err)
{
    *plan = NULL;
    fp4_status st = fp4_gemm_problem_check(pr, copies, err);
    if (st != FP4_OK) return st;
    const fp4_shape *s = &pr->shape;
    const size_t nx = (size_t)s->m * (size_t)s->k * 2;
    uint16_t *hx = (uint16_t *)malloc(nx);
    w4_plan *p = (w4_plan *)calloc(1, sizeof *p);
    if (!hx || !p || !(p->x = (uint16_t **)calloc((size_t)copies, sizeof *p->x))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "w4a4-sm90: no host memory for the operands");
        goto out;
    }
    p->warn = ((w4_inst *)inst)->warn;
    p->shape = *s;
    p->copies = copies;
    if ((st = sm90->prepare(((w4_inst *)inst)->gemm, pr, copies, &p->gemm, err)) != FP4_OK) {
        p->gemm = NULL;
        goto out;
    }
    for (int i = 0; i < copies; i++)
        if ((st = fp4_w4a4_copy_activations(pr, i, hx, &p->encode_scale, err)) != FP4_OK ||
            (st = fp4_gpu_upload((void **)&p->x[i], hx, nx, "bf16 A", err)) != FP4_OK)
            goto out;
    for (int i = 0; i < (copies < 2 ? copies : 2); i++)
        if ((st = w4_roundtrip(p, i, fp4_problem_a(pr, i), err)) != FP4_OK) goto out;
    *plan = p;
    p = NULL;
out:
    w4_release(p);
    free(hx);
    return st;
}

/* NaN in D and 0xFF in the intermediate A (codes -6, NaN scale bytes), so
 * that a step that skipped the quantizer could not pass on stale codes. */
static fp4_status w4_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    w4_plan *p = (w4_plan *)plan;
    uint8_t *codes, *sf;
    fp4_status st = fp4_sm90_plan_a(p->gemm, copy, &codes, &sf, err);
    if (st != FP4_OK) return st;
    const fp4_shape *s = &p->shape;
    cudaStream_t strm = (cudaStream_t)stream;
    FP4_CUDA_TRY(err, cudaMemsetAsync(codes, 0xFF, (size_t)s->m * (size_t)(s->k / 2), strm));
    FP4_CUDA_TRY(err, cudaMemsetAsync(sf, 0xFF, fp4_swizzled_size(s->m, s->k), strm));
    return sm90->poison(p->gemm, copy, stream, err);
}

/* Quantizer then GEMM, both on the stream. */
static fp4_status w4_run(void *plan, int copy, void *stream, fp4_err *err)
{
    w4_plan *p = (w4_plan *)plan;
    uint8_t *codes, *sf;
    fp4_status st = fp4_sm90_plan_a(p->gemm, copy, &codes, &sf, err);
    if (st != FP4_OK) return st;
    if ((st = fp4_gpu_quantize_bf16(p->x[copy], p->shape.m, p->shape.k, p->encode_scale, codes, sf,
                                    NULL, NULL, (cudaStream_t)stream, err)) != FP4_OK)
        return st;
    return sm90->run(p->gemm, copy, stream, err);
}

static fp4_status w4_read_output(void *plan, int copy, float *d, fp4_err *err)
{
    return sm90->read_output(((w4_plan *)plan)->gemm, copy, d, err);
}

static const char *w4_variant_name(void *plan)
{
    return plan ? sm90->variant(((w4_plan *)plan)->gemm) : "unknown";
}

/* See fp4_w4a4_step_bytes: bf16 A, the intermediate NVFP4 A written and read,
 * NVFP4 B with padded scales, bf16 D. */
static double w4_bytes_moved(const fp4_shape *s)
{
    return fp4_w4a4_step_bytes(s);
}

static fp4_status w4_open(void **inst, fp4_err *err)
{
    *inst = NULL;
    w4_inst *w = (w4_inst *)calloc(1, sizeof *w);
    if (!w) return fp4_fail(err, FP4_ERR_NOMEM, "w4a4-sm90: no host memory");
    fp4_status st = sm90->open(&w->gemm, err); /* exactly sm_90, like fp4-sm90 */
    if (st != FP4_OK) {
        free(w);
        return st;
    }
    *inst = w;
    return FP4_OK;
}

static void w4_close(void *inst)
{
    w4_inst *w = (w4_inst *)inst;
    if (!w) return;
    sm90->close(w->gemm);
    free(w);
}

/* The sink serves this backend's own buffers and fp4-sm90's, if it takes one. */
static void w4_set_warnings(void *inst, fp4_warnings *warn)
{
    w4_inst *w = (w4_inst *)inst;
    w->warn = warn;
    if (sm90->set_warnings) sm90->set_warnings(w->gemm, warn);
}

static fp4_status w4_supports(void *inst, const fp4_shape *s, fp4_err *err)
{
    return sm90->supports(((w4_inst *)inst)->gemm, s, err);
}

/* Positional: C++17 has no designated initializers. One comment per field. */
extern "C" const fp4_backend_ops fp4_backend_w4a4_sm90 = {
    FP4_BACKEND_API_VERSION,                                                 /* api_version */
    "w4a4-sm90",                                                             /* name */
    "W4A4 step on Hopper: GPU quantizer (bf16 A, static scale) + fp4-sm90 GEMM", /* summary */
    FP4_BACKEND_GPU | FP4_BACKEND_FROM_BF16, /* flags: from bf16 A; exact once quantized */
    FP4_MATH_BF16_TC, /* math: fp4-sm90 multiplies on 16-bit tensor cores */
    1e-2,             /* tol_max: as fp4-sm90 (fp32 accumulation, bf16 D) */
    5e-3,             /* tol_norm */
    w4_open,          /* open: fp4-sm90's */
    w4_close,         /* close */
    w4_supports,      /* supports */
    w4_prepare,       /* prepare: fp4-sm90's plan + bf16 A, GPU vs CPU quantizer */
    w4_poison,        /* poison: intermediate A and D */
    w4_run,           /* run: quantizer + GEMM */
    w4_read_output,   /* read_output */
    w4_release,       /* release */
    w4_bytes_moved,   /* bytes_moved: fp4_w4a4_step_bytes */
    w4_variant_name,  /* variant: the GEMM's */
    NULL,             /* flops: 2MNK */
    w4_set_warnings,  /* set_warnings */
};
