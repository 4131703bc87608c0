/* Backend "fp4-sm90": our NVFP4 GEMM for Hopper (src/kernels/sm90/), and the
 * kernel-independent part of its C API (kernels/sm90/fp4_sm90.h): the kernel
 * table, the selection rule, argument checks and the dispatch.
 *
 * prepare() packs B once on the host into the layout of the kernel chosen for
 * the shape (the rule below, or FP4_SM90_KERNEL), swizzles A's scales as a
 * quantizer would produce them, and uploads `copies` independent sets (A
 * codes, A swizzled scales, packed B, D, workspace). run() enqueues the
 * kernel's launches: asynchronous, no allocation, graph-capturable. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backends/backends.h" /* gives the table below C linkage */
}
#include "backends/blas_common.h"
#include "core/gpu.h"
#include "kernels/sm90/fp4_sm90.h"

/* ---- the kernel table -------------------------------------------------------------- */

typedef struct sm90_kernel {
    fp4_sm90_kernel_info info;
    size_t (*codes_size)(int64_t n, int64_t k);
    size_t (*scales_size)(int64_t n, int64_t k);
    void (*pack_b)(const fp4_matrix *b, uint8_t *codes, uint8_t *scales);
    size_t (*ws_size)(int64_t m, int64_t n, int64_t k);
    int (*fits)(int64_t m, int64_t n, int64_t k, int num_sms);
    fp4_status (*init)(fp4_err *err); /* NULL: nothing to set up */
    fp4_status (*launch)(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err);
} sm90_kernel;

static const sm90_kernel sm90_kernels[FP4_SM90_KERNELS] = {
    {{FP4_SM90_DECODE, "decode",
      "small M: mma.sync, weights streamed once in fragment order, split K via red.add"},
     fp4_sm90_decode_codes_size, fp4_sm90_decode_scales_size, fp4_sm90_decode_pack_b,
     fp4_sm90_decode_ws_size, fp4_sm90_decode_fits, NULL, fp4_sm90_decode_launch},
    {{FP4_SM90_MID, "mid",
      "mid M: wgmma, weights in registers, tokens by prepass, split K reduced by co-resident CTAs"},
     fp4_sm90_mid_codes_size, fp4_sm90_mid_scales_size, fp4_sm90_mid_pack_b, fp4_sm90_mid_ws_size,
     fp4_sm90_mid_fits, fp4_sm90_mid_init, fp4_sm90_mid_launch},
    {{FP4_SM90_PREFILL, "prefill",
      "large M: wgmma, A dequantized in registers, B by prepass into bulk-copied fp16 tiles"},
     fp4_sm90_prefill_codes_size, fp4_sm90_prefill_scales_size, fp4_sm90_prefill_pack_b,
     fp4_sm90_prefill_ws_size, fp4_sm90_prefill_fits, fp4_sm90_prefill_init,
     fp4_sm90_prefill_launch},
    {{FP4_SM90_PREFILL_WIDE, "prefill-wide",
      "large M, wide N: both operands by prepass, persistent warp-specialized wgmma"},
     fp4_sm90_prefill_codes_size, fp4_sm90_prefill_scales_size, fp4_sm90_prefill_pack_b,
     fp4_sm90_prefill_wide_ws_size, fp4_sm90_prefill_wide_fits, fp4_sm90_prefill_wide_init,
     fp4_sm90_prefill_wide_launch},
};

static const sm90_kernel *sm90_kernel_of(int id)
{
    return id >= 1 && id <= FP4_SM90_KERNELS ? &sm90_kernels[id - 1] : NULL;
}

extern "C" const fp4_sm90_kernel_info *fp4_sm90_kernel_by_id(int id)
{
    const sm90_kernel *k = sm90_kernel_of(id);
    return k ? &k->info : NULL;
}

extern "C" int fp4_sm90_kernel_parse(const char *s)
{
    if (!s || !s[0] || !strcmp(s, "auto")) return FP4_SM90_AUTO;
    for (int i = 0; i < FP4_SM90_KERNELS; i++)
        if (!strcmp(s, sm90_kernels[i].info.name)) return sm90_kernels[i].info.id;
    return -1;
}

extern "C" int fp4_sm90_forced(void)
{
    return fp4_sm90_kernel_parse(getenv("FP4_SM90_KERNEL"));
}

extern "C" int fp4_sm90_kernel_fits(int id, int64_t m, int64_t n, int64_t k, int num_sms)
{
    const sm90_kernel *kn = sm90_kernel_of(id);
    return kn && kn->fits(m, n, k, num_sms);
}

/* ---- the selection rule ------------------------------------------------------------
 * Named predicates, asked in order; docs/PERF.md has the measured crossovers
 * behind each threshold. */

/* Prefill M: enough 128 x 256 output tiles to fill the GPU without split K,
 * and the mid kernel's token prepass (2 bytes a token element) costs as much
 * as prefill's weight prepass. */
static int sm90_should_use_prefill(int64_t m, int64_t n)
{
    return m >= 2048 && m * n > (int64_t)1024 * 768;
}

/* Within prefill M, from N = 4096: A's prepass (M K x 2.56 bytes) is then
 * amortized by enough columns for the faster warp-specialized loop to win;
 * at N = 2048 prefill is faster. */
static int sm90_should_use_prefill_wide(int64_t m, int64_t n)
{
    return sm90_should_use_prefill(m, n) && n >= 4096;
}

/* Mid M: from 97 tokens, or from 33 when N > 1024 (enough weight tiles for
 * split K to fill the GPU): the weights are dequantized once per 64-256
 * tokens on wgmma instead of once per 32 on mma.sync. */
static int sm90_should_use_mid(int64_t m, int64_t n)
{
    return m > 96 || (m > 32 && n > 1024);
}

extern "C" int fp4_sm90_choose(int64_t m, int64_t n, int64_t k, int num_sms)
{
    int order[FP4_SM90_KERNELS];
    if (sm90_should_use_prefill_wide(m, n)) {
        const int o[] = {FP4_SM90_PREFILL_WIDE, FP4_SM90_PREFILL, FP4_SM90_MID, FP4_SM90_DECODE};
        memcpy(order, o, sizeof o);
    } else if (sm90_should_use_prefill(m, n)) {
        const int o[] = {FP4_SM90_PREFILL, FP4_SM90_PREFILL_WIDE, FP4_SM90_MID, FP4_SM90_DECODE};
        memcpy(order, o, sizeof o);
    } else if (sm90_should_use_mid(m, n)) {
        const int o[] = {FP4_SM90_MID, FP4_SM90_DECODE, FP4_SM90_PREFILL, FP4_SM90_PREFILL_WIDE};
        memcpy(order, o, sizeof o);
    } else {
        const int o[] = {FP4_SM90_DECODE, FP4_SM90_MID, FP4_SM90_PREFILL, FP4_SM90_PREFILL_WIDE};
        memcpy(order, o, sizeof o);
    }
    /* the first that can run the shape: a slower kernel beats no result */
    for (int i = 0; i < FP4_SM90_KERNELS; i++)
        if (fp4_sm90_kernel_fits(order[i], m, n, k, num_sms)) return order[i];
    return FP4_SM90_AUTO;
}

extern "C" size_t fp4_sm90_packed_b_codes_size(int kernel, int64_t n, int64_t k)
{
    const sm90_kernel *kn = sm90_kernel_of(kernel);
    return kn ? kn->codes_size(n, k) : 0;
}

extern "C" size_t fp4_sm90_packed_b_scales_size(int kernel, int64_t n, int64_t k)
{
    const sm90_kernel *kn = sm90_kernel_of(kernel);
    return kn ? kn->scales_size(n, k) : 0;
}

extern "C" fp4_status fp4_sm90_pack_b(int kernel, const fp4_matrix *b, uint8_t *codes,
                                      uint8_t *scales, fp4_err *err)
{
    if (!b || !b->codes || !b->scales || !codes || !scales)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 pack: NULL argument");
    fp4_status st = fp4_check_dims(b->rows, b->cols, err);
    if (st != FP4_OK) return st;
    const sm90_kernel *kn = sm90_kernel_of(kernel);
    if (!kn) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 pack: unknown kernel %d", kernel);
    kn->pack_b(b, codes, scales);
    return FP4_OK;
}

extern "C" size_t fp4_sm90_workspace_size(int kernel, int64_t m, int64_t n, int64_t k)
{
    const sm90_kernel *kn = sm90_kernel_of(kernel);
    return kn ? kn->ws_size(m, n, k) : 0;
}

extern "C" fp4_status fp4_sm90_init(fp4_err *err)
{
    for (int i = 0; i < FP4_SM90_KERNELS; i++) {
        fp4_status st = sm90_kernels[i].init ? sm90_kernels[i].init(err) : FP4_OK;
        if (st != FP4_OK) return st;
    }
    return FP4_OK;
}

/* FP4_OK when the current device is sm_90 and this build holds machine code
 * for it (the 90a target): elsewhere the wgmma kernels are traps. */
extern "C" fp4_status fp4_sm90_wgmma_runs_here(const void *kernel, const char *name, fp4_err *err)
{
    int dev = 0, maj = 0, min = 0;
    FP4_CUDA_TRY(err, cudaGetDevice(&dev));
    FP4_CUDA_TRY(err, cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, dev));
    FP4_CUDA_TRY(err, cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, dev));
    if (maj != 9 || min != 0)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90 %s: needs sm_90 (wgmma), this GPU is sm_%d%d", name, maj, min);
    cudaFuncAttributes fa;
    const cudaError_t e = cudaFuncGetAttributes(&fa, kernel);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it for the launch checks */
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90 %s: not compiled for this GPU (needs the 90a target): %s",
                        name, cudaGetErrorString(e));
    }
    return FP4_OK;
}

extern "C" fp4_status fp4_sm90_check(const fp4_sm90_gemm_args *a, fp4_err *err)
{
    if (!a) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90: NULL arguments");
    const sm90_kernel *kn = sm90_kernel_of(a->kernel);
    if (!kn) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90: unknown kernel %d", a->kernel);
    if (a->m < 1 || a->n < 1 || a->k < 16 || a->k % 16)
        return fp4_fail(err, FP4_ERR_SHAPE, "fp4-sm90: shape %lldx%lldx%lld (want >= 1, K %% 16 == 0)",
                        (long long)a->m, (long long)a->n, (long long)a->k);
    if (a->m > INT_MAX / 2 || a->n > INT_MAX / 2 || a->k > INT_MAX / 2)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90: %lldx%lldx%lld: sizes over 2^30 are not supported (int indices)",
                        (long long)a->m, (long long)a->n, (long long)a->k);
    if (!a->a_codes || !a->a_sf || !a->b_codes || !a->b_sf || !a->d)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90: NULL device pointer");
    if (((uintptr_t)a->a_codes & 15) || ((uintptr_t)a->a_sf & 15) || ((uintptr_t)a->b_codes & 15) ||
        ((uintptr_t)a->b_sf & 15) || ((uintptr_t)a->d & 7) || ((uintptr_t)a->workspace & 15))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90: misaligned operand (A codes, scales and B must be 16-byte, "
                        "D 8-byte, the workspace 16-byte aligned)");
    if (a->splits < 0 || a->tile_n < 0 || a->ctas < 0)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90: negative override (splits %d, tile_n %d, "
                        "ctas %d)", a->splits, a->tile_n, a->ctas);
    const size_t ws = fp4_sm90_workspace_size(a->kernel, a->m, a->n, a->k);
    if (ws && (!a->workspace || a->workspace_bytes < ws))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 %s: needs a %zu-byte workspace",
                        kn->info.name, ws);
    return FP4_OK;
}

extern "C" fp4_status fp4_sm90_gemm(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    fp4_status st = fp4_sm90_check(a, err);
    if (st != FP4_OK) return st;
    return sm90_kernel_of(a->kernel)->launch(a, stream, err);
}

/* ---- the backend ----------------------------------------------------------------- */

typedef struct sm90_inst {
    int num_sms;
    fp4_warnings *warn; /* the caller's sink (set_warnings), NULL until set */
} sm90_inst;

typedef struct sm90_copy {
    uint8_t *a_codes, *a_sf; /* [m, k/2], swizzled */
    uint8_t *b_codes, *b_sf; /* packed for the plan's kernel */
    uint16_t *d;             /* [m, n] bf16 */
    void *ws;                /* the kernel's workspace (zeroed once), NULL if none */
} sm90_copy;

typedef struct sm90_plan {
    fp4_warnings *warn; /* the instance's sink at prepare */
    fp4_shape shape;
    float alpha;
    int kernel;
    int num_sms;
    size_t ws_bytes;
    int copies;
    sm90_copy *c; /* [copies] */
} sm90_plan;

static fp4_status sm90_open(void **inst, fp4_err *err)
{
    int num_sms = 0;
    *inst = NULL;
    fp4_status st = fp4_gpu_require_sm90("fp4-sm90", &num_sms, err);
    if (st != FP4_OK) return st;
    sm90_inst *s = (sm90_inst *)calloc(1, sizeof *s);
    if (!s) return fp4_fail(err, FP4_ERR_NOMEM, "fp4-sm90: no host memory");
    s->num_sms = num_sms;
    if ((st = fp4_sm90_init(err)) != FP4_OK) {
        free(s);
        return st;
    }
    *inst = s;
    return FP4_OK;
}

static void sm90_close(void *inst)
{
    free(inst);
}

static void sm90_set_warnings(void *inst, fp4_warnings *w)
{
    ((sm90_inst *)inst)->warn = w;
}

/* The kernel for this shape: FP4_SM90_KERNEL's if set, else the rule's;
 * FP4_ERR_UNSUPPORTED (or FP4_ERR_INVALID_ARG for a bad FP4_SM90_KERNEL) with
 * the reason when none can run it. */
static fp4_status sm90_pick(const sm90_inst *inst, const fp4_shape *s, int *kernel, fp4_err *err)
{
    if (s->m > INT_MAX / 2 || s->n > INT_MAX / 2 || s->k > INT_MAX / 2)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90: %lldx%lldx%lld has a size over 2^30 (int indices)",
                        (long long)s->m, (long long)s->n, (long long)s->k);
    const int forced = fp4_sm90_forced();
    if (forced < 0)
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "FP4_SM90_KERNEL=%s names no kernel (decode, mid, prefill, prefill-wide, auto)",
                        getenv("FP4_SM90_KERNEL"));
    if (forced != FP4_SM90_AUTO) {
        if (!fp4_sm90_kernel_fits(forced, s->m, s->n, s->k, inst->num_sms))
            return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                            "fp4-sm90 %s (forced by FP4_SM90_KERNEL): cannot run %lldx%lldx%lld "
                            "(grid or index limits)",
                            fp4_sm90_kernel_by_id(forced)->name, (long long)s->m, (long long)s->n,
                            (long long)s->k);
        *kernel = forced;
        return FP4_OK;
    }
    *kernel = fp4_sm90_choose(s->m, s->n, s->k, inst->num_sms);
    if (*kernel == FP4_SM90_AUTO)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90: no kernel can run %lldx%lldx%lld (grid or index limits)",
                        (long long)s->m, (long long)s->n, (long long)s->k);
    return FP4_OK;
}

static fp4_status sm90_supports(void *inst, const fp4_shape *s, fp4_err *err)
{
    int kernel = 0;
    return sm90_pick((const sm90_inst *)inst, s, &kernel, err);
}

static void sm90_release(void *plan)
{
    sm90_plan *p = (sm90_plan *)plan;
    if (!p) return;
    if (p->c) {
        for (int i = 0; i < p->copies; i++) {
            fp4_gpu_release(p->c[i].a_codes, "fp4-sm90 A codes", p->warn);
            fp4_gpu_release(p->c[i].a_sf, "fp4-sm90 A scales", p->warn);
            fp4_gpu_release(p->c[i].b_codes, "fp4-sm90 packed B codes", p->warn);
            fp4_gpu_release(p->c[i].b_sf, "fp4-sm90 packed B scales", p->warn);
            fp4_gpu_release(p->c[i].d, "fp4-sm90 D", p->warn);
            fp4_gpu_release(p->c[i].ws, "fp4-sm90 workspace", p->warn);
        }
        free(p->c);
    }
    free(p);
}

/* Packs B for the chosen kernel and swizzles A's scales on the host once,
 * then uploads `copies` sets. On failure nothing stays allocated. */
static fp4_status sm90_prepare(void *inst_, const fp4_gemm_problem *pr, int copies, void **plan,
                               fp4_err *err)
{
    sm90_inst *inst = (sm90_inst *)inst_;
    *plan = NULL;
    fp4_status st = fp4_gemm_problem_check(pr, copies, err);
    if (st != FP4_OK) return st;
    const fp4_shape *s = &pr->shape;
    int kernel = 0;
    if ((st = sm90_pick(inst, s, &kernel, err)) != FP4_OK) return st;
    const size_t a_codes = (size_t)s->m * (size_t)(s->k / 2);
    const size_t a_sf = fp4_swizzled_size(s->m, s->k);
    const size_t b_codes = fp4_sm90_packed_b_codes_size(kernel, s->n, s->k);
    const size_t b_sf = fp4_sm90_packed_b_scales_size(kernel, s->n, s->k);
    const size_t ws = fp4_sm90_workspace_size(kernel, s->m, s->n, s->k);
    size_t d_bytes;
    uint8_t *h_asf = NULL, *h_asf_odd = NULL, *h_bq = NULL, *h_bs = NULL;
    sm90_plan *p = NULL;

    if (fp4_size_mul3((size_t)s->m, (size_t)s->n, 2, &d_bytes)) {
        st = fp4_fail(err, FP4_ERR_OVERFLOW, "fp4-sm90: D overflows size_t");
        goto out;
    }
    h_asf = (uint8_t *)malloc(a_sf);
    h_asf_odd = (uint8_t *)malloc(a_sf);
    h_bq = (uint8_t *)malloc(b_codes);
    h_bs = (uint8_t *)malloc(b_sf);
    p = (sm90_plan *)calloc(1, sizeof *p);
    if (!h_asf || !h_asf_odd || !h_bq || !h_bs || !p ||
        !(p->c = (sm90_copy *)calloc((size_t)copies, sizeof *p->c))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "fp4-sm90: no host memory to pack the operands");
        goto out;
    }
    /* odd copies compute with their own A (-A): codes and scales from it */
    if ((st = fp4_swizzle_scales(pr->a->scales, s->m, s->k, h_asf, err)) != FP4_OK) goto out;
    if ((st = fp4_swizzle_scales(fp4_problem_a(pr, 1)->scales, s->m, s->k, h_asf_odd, err)) != FP4_OK)
        goto out;
    if ((st = fp4_sm90_pack_b(kernel, pr->b, h_bq, h_bs, err)) != FP4_OK) goto out;

    p->warn = inst->warn;
    p->shape = *s;
    p->alpha = pr->alpha;
    p->kernel = kernel;
    p->num_sms = inst->num_sms;
    p->ws_bytes = ws;
    p->copies = copies;
    for (int i = 0; i < copies; i++) {
        sm90_copy *c = &p->c[i];
        const fp4_matrix *a = fp4_problem_a(pr, i);
        if ((st = fp4_gpu_upload((void **)&c->a_codes, a->codes, a_codes, "A codes", err)) != FP4_OK ||
            (st = fp4_gpu_upload((void **)&c->a_sf, (i & 1) ? h_asf_odd : h_asf, a_sf, "A swizzled scales",
                                 err)) != FP4_OK ||
            (st = fp4_gpu_upload((void **)&c->b_codes, h_bq, b_codes, "packed B codes", err)) != FP4_OK ||
            (st = fp4_gpu_upload((void **)&c->b_sf, h_bs, b_sf, "packed B scales", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->d, d_bytes, "D bf16", err)) != FP4_OK)
            goto out;
        if (ws) {
            if ((st = fp4_gpu_alloc(&c->ws, ws, "fp4-sm90 workspace", err)) != FP4_OK) goto out;
            FP4_CUDA_GOTO(err, st, cudaMemset(c->ws, 0, ws), out);
        }
    }
    FP4_CUDA_GOTO(err, st, cudaDeviceSynchronize(), out);
    *plan = p;
    p = NULL;
    st = FP4_OK;
out:
    sm90_release(p);
    free(h_asf);
    free(h_asf_odd);
    free(h_bq);
    free(h_bs);
    return st;
}

static fp4_status sm90_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    sm90_plan *p = (sm90_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    return fp4_gpu_poison_bf16(p->c[copy].d, (size_t)p->shape.m * (size_t)p->shape.n,
                               (cudaStream_t)stream, err);
}

static fp4_status sm90_run(void *plan, int copy, void *stream, fp4_err *err)
{
    sm90_plan *p = (sm90_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    const sm90_copy *c = &p->c[copy];
    fp4_sm90_gemm_args a;
    memset(&a, 0, sizeof a);
    a.kernel = p->kernel;
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

static fp4_status sm90_read_output(void *plan, int copy, float *d, fp4_err *err)
{
    sm90_plan *p = (sm90_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    return fp4_gpu_read_bf16(p->c[copy].d, (size_t)p->shape.m * (size_t)p->shape.n, d, err);
}

extern "C" fp4_status fp4_sm90_plan_a(void *plan, int copy, uint8_t **codes, uint8_t **sf,
                                     fp4_err *err)
{
    sm90_plan *p = (sm90_plan *)plan;
    fp4_status st = fp4_gpu_check_copy(copy, p->copies, err);
    if (st != FP4_OK) return st;
    *codes = p->c[copy].a_codes;
    *sf = p->c[copy].a_sf;
    return FP4_OK;
}

static const char *sm90_variant_name(void *plan)
{
    const sm90_plan *p = (const sm90_plan *)plan;
    const fp4_sm90_kernel_info *k = p ? fp4_sm90_kernel_by_id(p->kernel) : NULL;
    return k ? k->name : "unknown";
}

/* Positional: C++17 has no designated initializers. One comment per field. */
extern "C" const fp4_backend_ops fp4_backend_fp4_sm90 = {
    FP4_BACKEND_API_VERSION,                                          /* api_version */
    "fp4-sm90",                                                       /* name */
    "our NVFP4 GEMM for Hopper: exact dequant to fp16, mma.sync (decode), wgmma (mid, prefill)", /* summary */
    FP4_BACKEND_GPU,                                                  /* flags: exact operands */
    FP4_MATH_BF16_TC, /* math: 16-bit tensor cores (fp16 rate = bf16 rate) */
    1e-2,             /* tol_max: fp32 accumulation, one bf16 rounding of D */
    5e-3,             /* tol_norm */
    sm90_open,        /* open: exactly sm_90 */
    sm90_close,       /* close */
    sm90_supports,    /* supports */
    sm90_prepare,     /* prepare: pack B, swizzle A scales, upload copies */
    sm90_poison,      /* poison */
    sm90_run,         /* run: the kernel's launches (prepasses included) */
    sm90_read_output, /* read_output */
    sm90_release,     /* release */
    NULL,             /* bytes_moved: fp4_gemm_min_bytes */
    sm90_variant_name, /* variant: the kernel that runs ("decode", "mid", ...) */
    NULL,              /* flops: 2 m n k */
    sm90_set_warnings, /* set_warnings */
};
