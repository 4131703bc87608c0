/* Backend "w4a4-sm90": one W4A4 inference step on Hopper, what a serving
 * engine pays per linear layer: bf16 activations -> GPU quantizer (static
 * scale, kernels/fp4_quantize.cu) -> fp4-sm90 GEMM against pre-packed NVFP4
 * weights -> bf16 D. Compare its row with cublas-bf16 (the unquantized
 * layer) and fp4-sm90 (the GEMM alone, activations already quantized).
 *
 * prepare() builds bf16 A from the problem's A (backends/w4a4_host.h),
 * packs B once for the variant fp4_sm90_choose picks (as fp4-sm90 does),
 * uploads `copies` sets, and checks that the quantizer reproduces A bit for
 * bit (else: unsupported). run() = two launches on the stream, quantizer then
 * GEMM: asynchronous, no allocation, graph-capturable. read_output() returns D. */
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backends/backends.h" /* gives the table below C linkage */
#include "backends/w4a4_host.h"
}
#include "backends/blas_common.h"
#include "backends/gpu_common.h"
#include "kernels/fp4_quantize.h"
#include "kernels/fp4_sm90.h"

typedef struct w4_inst {
    int num_sms;
} w4_inst;

typedef struct w4_copy {
    uint16_t *x;               /* bf16 A [m, k] */
    uint8_t *a_codes, *a_sf;   /* the quantizer's output, the GEMM's input */
    uint8_t *b_codes, *b_sf;   /* packed for the plan's variant */
    uint16_t *d;               /* bf16 [m, n] */
    void *ws;                  /* decode workspace (zeroed), NULL if none */
} w4_copy;

typedef struct w4_plan {
    fp4_shape shape;
    float alpha, encode_scale;
    int variant, num_sms;
    size_t ws_bytes;
    int copies;
    w4_copy *c;
} w4_plan;

/* Exactly sm_90, like fp4-sm90 (its kernels are built for sm_90a). */
static fp4_status w4_open(void **inst, fp4_err *err)
{
    int maj = 0, min = 0, dev = 0;
    *inst = NULL;
    fp4_err sub;
    fp4_status st = fp4_gpu_require(9, 0, 9, &maj, &min, &sub);
    if (st != FP4_OK)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "needs sm_90 (Hopper: H100/H200): %s",
                        fp4_err_text(&sub));
    if (min != 0)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "needs sm_90 (Hopper), this GPU is sm_%d%d", maj,
                        min);
    w4_inst *w = (w4_inst *)calloc(1, sizeof *w);
    if (!w) return fp4_fail(err, FP4_ERR_NOMEM, "w4a4-sm90: no host memory");
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&w->num_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        free(w);
        return fp4_fail(err, FP4_ERR_CUDA, "w4a4-sm90: cannot read the multiprocessor count");
    }
    if ((st = fp4_sm90_init(err)) != FP4_OK) {
        free(w);
        return st;
    }
    *inst = w;
    return FP4_OK;
}

static void w4_close(void *inst)
{
    free(inst);
}

static fp4_status w4_supports(void *inst, const fp4_shape *s, fp4_err *err)
{
    if (s->m > INT32_MAX / 2 || s->n > INT32_MAX / 2 || s->k > INT32_MAX / 2)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "w4a4-sm90: %lldx%lldx%lld has a size over 2^30 (int indices)",
                        (long long)s->m, (long long)s->n, (long long)s->k);
    return FP4_OK;
}

static void w4_release(void *plan)
{
    w4_plan *p = (w4_plan *)plan;
    if (!p) return;
    if (p->c) {
        for (int i = 0; i < p->copies; i++) {
            fp4_gpu_free(p->c[i].x, "w4a4-sm90 x");
            fp4_gpu_free(p->c[i].a_codes, "w4a4-sm90 a_codes");
            fp4_gpu_free(p->c[i].a_sf, "w4a4-sm90 a_sf");
            fp4_gpu_free(p->c[i].b_codes, "w4a4-sm90 b_codes");
            fp4_gpu_free(p->c[i].b_sf, "w4a4-sm90 b_sf");
            fp4_gpu_free(p->c[i].d, "w4a4-sm90 d");
            fp4_gpu_free(p->c[i].ws, "w4a4-sm90 ws");
        }
        free(p->c);
    }
    free(p);
}

static fp4_status w4_prepare(void *inst_, const fp4_gemm_problem *pr, int copies, void **plan,
                             fp4_err *err)
{
    w4_inst *inst = (w4_inst *)inst_;
    *plan = NULL;
    fp4_status st = fp4_gpu_check_problem(pr, copies, err);
    if (st != FP4_OK) return st;
    if ((st = w4_supports(inst, &pr->shape, err)) != FP4_OK) return st;
    const fp4_shape *s = &pr->shape;
    const int variant = fp4_sm90_choose(s->m, s->n, s->k, inst->num_sms);
    if (!fp4_sm90_variant_fits(variant, s->m, s->n, s->k, inst->num_sms))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "w4a4-sm90: fp4-sm90 %s cannot run %lldx%lldx%lld; force another variant",
                        fp4_sm90_variant_by_id(variant)->name, (long long)s->m, (long long)s->n,
                        (long long)s->k);
    const size_t nx = (size_t)s->m * (size_t)s->k * 2, a_codes = (size_t)s->m * (size_t)(s->k / 2);
    const size_t a_sf = fp4_swizzled_size(s->m, s->k);
    const size_t b_codes = fp4_sm90_packed_b_codes_size(variant, s->n, s->k);
    const size_t b_sf = fp4_sm90_packed_b_scales_size(variant, s->n, s->k);
    const size_t ws = fp4_sm90_workspace_size(variant, s->m, s->n, s->k);
    size_t d_bytes;
    if (fp4_size_mul3((size_t)s->m, (size_t)s->n, 2, &d_bytes))
        return fp4_fail(err, FP4_ERR_OVERFLOW, "w4a4-sm90: D overflows size_t");
    uint16_t *hx = (uint16_t *)malloc(nx);
    uint8_t *h_bq = (uint8_t *)malloc(b_codes), *h_bs = (uint8_t *)malloc(b_sf);
    w4_plan *p = (w4_plan *)calloc(1, sizeof *p);
    if (!hx || !h_bq || !h_bs || !p || !(p->c = (w4_copy *)calloc((size_t)copies, sizeof *p->c))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "w4a4-sm90: no host memory for the operands");
        goto out;
    }
    p->shape = *s;
    p->alpha = pr->alpha;
    p->variant = variant;
    p->num_sms = inst->num_sms;
    p->ws_bytes = ws;
    p->copies = copies;
    if ((st = fp4_w4a4_activations(pr->a, hx, &p->encode_scale, err)) != FP4_OK) goto out;
    if ((st = fp4_sm90_pack_b(variant, pr->b, h_bq, h_bs, err)) != FP4_OK) goto out;
    for (int i = 0; i < copies; i++) {
        w4_copy *c = &p->c[i];
        if ((st = fp4_gpu_upload((void **)&c->x, hx, nx, "bf16 A", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->a_codes, a_codes, "A codes", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->a_sf, a_sf, "A swizzled scales", err)) != FP4_OK ||
            (st = fp4_gpu_upload((void **)&c->b_codes, h_bq, b_codes, "packed B codes", err)) != FP4_OK ||
            (st = fp4_gpu_upload((void **)&c->b_sf, h_bs, b_sf, "packed B scales", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->d, d_bytes, "D bf16", err)) != FP4_OK)
            goto out;
        if (ws) {
            if ((st = fp4_gpu_alloc(&c->ws, ws, "fp4-sm90 workspace", err)) != FP4_OK) goto out;
            FP4_CUDA_GOTO(err, st, cudaMemset(c->ws, 0, ws), out);
        }
    }
    /* the round trip, on copy 0 (every copy holds the same bf16 A) */
    FP4_CUDA_GOTO(err, st, cudaMemset(p->c[0].a_codes, 0xFF, a_codes), out);
    FP4_CUDA_GOTO(err, st, cudaMemset(p->c[0].a_sf, 0xFF, a_sf), out);
    if ((st = fp4_gpu_quantize_bf16(p->c[0].x, s->m, s->k, p->encode_scale, p->c[0].a_codes,
                                    p->c[0].a_sf, NULL, NULL, 0, err)) != FP4_OK)
        goto out;
    FP4_CUDA_GOTO(err, st, cudaDeviceSynchronize(), out);
    if ((st = fp4_w4a4_check_roundtrip("w4a4-sm90", p->c[0].a_codes, p->c[0].a_sf, pr->a, err)) !=
        FP4_OK)
        goto out;
    *plan = p;
    p = NULL;
out:
    w4_release(p);
    free(hx);
    free(h_bq);
    free(h_bs);
    return st;
}

/* NaN in D and 0xFF in the intermediate A (codes -6, NaN scale bytes), so
 * that a step that skipped the quantizer could not pass on stale codes. */
static fp4_status w4_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    w4_plan *p = (w4_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    const fp4_shape *s = &p->shape;
    cudaStream_t strm = (cudaStream_t)stream;
    FP4_CUDA_TRY(err, cudaMemsetAsync(p->c[copy].a_codes, 0xFF, (size_t)s->m * (size_t)(s->k / 2), strm));
    FP4_CUDA_TRY(err, cudaMemsetAsync(p->c[copy].a_sf, 0xFF, fp4_swizzled_size(s->m, s->k), strm));
    return fp4_gpu_poison_bf16(p->c[copy].d, (size_t)s->m * (size_t)s->n, strm, err);
}

/* Quantizer then GEMM, both on the stream. */
static fp4_status w4_run(void *plan, int copy, void *stream, fp4_err *err)
{
    w4_plan *p = (w4_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    const w4_copy *c = &p->c[copy];
    if ((st = fp4_gpu_quantize_bf16(c->x, p->shape.m, p->shape.k, p->encode_scale, c->a_codes,
                                    c->a_sf, NULL, NULL, (cudaStream_t)stream, err)) != FP4_OK)
        return st;
    fp4_sm90_gemm_args a;
    memset(&a, 0, sizeof a);
    a.variant = p->variant;
    a.m = p->shape.m;
    a.n = p->shape.n;
    a.k = p->shape.k;
    a.a_codes = c->a_codes;
    a.a_sf = c->a_sf;
    a.b_codes = c->b_codes;
    a.b_sf = c->b_sf;
    a.alpha = p->alpha;
    a.d = c->d;
    a.workspace = c->ws;
    a.workspace_bytes = p->ws_bytes;
    a.num_sms = p->num_sms;
    return fp4_sm90_gemm(&a, (cudaStream_t)stream, err);
}

static fp4_status w4_read_output(void *plan, int copy, float *d, fp4_err *err)
{
    w4_plan *p = (w4_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    return fp4_gpu_read_bf16(p->c[copy].d, (size_t)p->shape.m * (size_t)p->shape.n, d, err);
}

static const char *w4_variant_name(void *plan)
{
    const w4_plan *p = (const w4_plan *)plan;
    const fp4_sm90_variant *v = p ? fp4_sm90_variant_by_id(p->variant) : NULL;
    return v ? v->name : "unknown";
}

/* See fp4_w4a4_step_bytes: bf16 A, the intermediate NVFP4 A written and read,
 * NVFP4 B with padded scales, bf16 D. */
static double w4_bytes_moved(const fp4_shape *s)
{
    return fp4_w4a4_step_bytes(s);
}

/* Positional: C++17 has no designated initializers. One comment per field. */
extern "C" const fp4_backend_ops fp4_backend_w4a4_sm90 = {
    FP4_BACKEND_API_VERSION,                                                 /* api_version */
    "w4a4-sm90",                                                             /* name */
    "W4A4 step on Hopper: GPU quantizer (bf16 A, static scale) + fp4-sm90 GEMM", /* summary */
    FP4_BACKEND_GPU,  /* flags: exact operands once quantized */
    FP4_MATH_BF16_TC, /* math: fp4-sm90 multiplies on 16-bit tensor cores */
    1e-2,             /* tol_max: as fp4-sm90 (fp32 accumulation, bf16 D) */
    5e-3,             /* tol_norm */
    w4_open,          /* open: exactly sm_90 */
    w4_close,         /* close */
    w4_supports,      /* supports */
    w4_prepare,       /* prepare: bf16 A, pack B, upload, round-trip check */
    w4_poison,        /* poison: intermediate A and D */
    w4_run,           /* run: quantizer + GEMM */
    w4_read_output,   /* read_output */
    w4_release,       /* release */
    w4_bytes_moved,   /* bytes_moved: fp4_w4a4_step_bytes */
    w4_variant_name,  /* variant: the GEMM's */
    NULL,             /* flops: 2MNK */
};
