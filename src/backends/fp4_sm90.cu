/* Backend "fp4-sm90": our NVFP4 GEMM for Hopper (src/kernels/fp4_sm90*.cu),
 * and the family-independent part of its C API (kernels/fp4_sm90.h): the
 * variant table, the choice heuristic, argument checks and the dispatch.
 *
 * prepare() packs B once on the host into the layout of the variant chosen for
 * the shape (fp4_sm90_choose: forced by
 * FP4_SM90_KERNEL), swizzles A's scales as a quantizer would produce them,
 * and uploads `copies` independent sets (A codes, A swizzled scales, packed B,
 * D, decode workspace). run() is one kernel launch: asynchronous, no
 * allocation, graph-capturable. FP4_SM90_SPLITK=<n> overrides the decode
 * kernel's K splits (for tuning). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backends/backends.h" /* gives the table below C linkage */
}
#include "backends/blas_common.h"
#include "backends/gpu_common.h"
#include "kernels/fp4_sm90.h"

/* ---- variants, choice ------------------------------------------------------------ */

typedef struct sm90_family {
    fp4_sm90_variant v;
    const char *alias; /* second accepted name for FP4_SM90_KERNEL */
    size_t (*codes_size)(int64_t n, int64_t k);
    size_t (*scales_size)(int64_t n, int64_t k);
    void (*pack_b)(const fp4_matrix *b, uint8_t *codes, uint8_t *scales);
    size_t (*ws_size)(int64_t m, int64_t n, int64_t k);         /* NULL: no workspace */
    int (*fits)(int64_t m, int64_t n, int64_t k, int num_sms); /* NULL: any shape */
    fp4_status (*init)(fp4_err *err);
    fp4_status (*launch)(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err);
    int splits; /* takes a K-split count (args.splits) */
} sm90_family;

static const sm90_family sm90_families[] = {
    {{FP4_SM90_V1_DECODE, "v1-decode",
      "small M: swap AB, pre-shuffled weights streamed once, split K + last-block reduce"},
     "decode", fp4_sm90_decode_codes_size, fp4_sm90_decode_scales_size, fp4_sm90_decode_pack_b,
     fp4_sm90_decode_ws_size, NULL, fp4_sm90_decode_init, fp4_sm90_decode_launch, 1},
    {{FP4_SM90_V2_PREFILL, "v2-prefill",
      "large M: 128x128x64 mma.sync tiles, 4-stage cp.async, dequant smem->fragments"},
     "prefill", fp4_sm90_prefill_codes_size, fp4_sm90_prefill_scales_size, fp4_sm90_prefill_pack_b,
     NULL, NULL, fp4_sm90_prefill_init, fp4_sm90_prefill_launch, 0},
    {{FP4_SM90_V3_DECODE, "v3-decode",
      "small M: v1 layout, loads first, register pipeline, split K reduced in a cluster (DSMEM)"},
     "decode3", fp4_sm90_decode_codes_size, fp4_sm90_decode_scales_size, fp4_sm90_decode_pack_b,
     NULL, fp4_sm90_decode3_fits, fp4_sm90_decode3_init, fp4_sm90_decode3_launch, 1},
    {{FP4_SM90_V4_DECODE, "v4-decode", FP4_SM90_V4_SUMMARY},
     "decode4", fp4_sm90_decode4_codes_size, fp4_sm90_decode4_scales_size, fp4_sm90_decode4_pack_b,
     fp4_sm90_decode4_ws_size, fp4_sm90_decode4_fits, fp4_sm90_decode4_init, fp4_sm90_decode4_launch, 1},
    {{FP4_SM90_V5_PREFILL, "v5-prefill", FP4_SM90_V5_SUMMARY},
     "prefill5", fp4_sm90_prefill5_codes_size, fp4_sm90_prefill5_scales_size,
     fp4_sm90_prefill5_pack_b, NULL, fp4_sm90_prefill5_fits, fp4_sm90_prefill5_init,
     fp4_sm90_prefill5_launch, 0},
    {{FP4_SM90_V6_DECODE, "v6-decode", FP4_SM90_V6_SUMMARY},
     "decode6", fp4_sm90_decode4_codes_size, fp4_sm90_decode4_scales_size, fp4_sm90_decode4_pack_b,
     fp4_sm90_decode6_ws_size, fp4_sm90_decode6_fits, fp4_sm90_decode6_init, fp4_sm90_decode6_launch, 1},
    {{FP4_SM90_V7_DECODE, "v7-decode", FP4_SM90_V7_SUMMARY},
     "decode7", fp4_sm90_decode4_codes_size, fp4_sm90_decode4_scales_size, fp4_sm90_decode4_pack_b,
     NULL, fp4_sm90_decode7_fits, fp4_sm90_decode7_init, fp4_sm90_decode7_launch, 0},
    {{FP4_SM90_V8_PREFILL, "v8-prefill", FP4_SM90_V8_SUMMARY},
     "prefill8", fp4_sm90_prefill5_codes_size, fp4_sm90_prefill5_scales_size,
     fp4_sm90_prefill5_pack_b, fp4_sm90_prefill8_ws_size, fp4_sm90_prefill8_fits,
     fp4_sm90_prefill8_init, fp4_sm90_prefill8_launch, 0},
    {{FP4_SM90_V9_MID, "v9-mid", FP4_SM90_V9_SUMMARY},
     "mid9", fp4_sm90_mid9_codes_size, fp4_sm90_mid9_scales_size, fp4_sm90_mid9_pack_b,
     fp4_sm90_mid9_ws_size, fp4_sm90_mid9_fits, fp4_sm90_mid9_init, fp4_sm90_mid9_launch, 1},
    {{FP4_SM90_V10_DECODE, "v10-decode", FP4_SM90_V10_SUMMARY},
     "decode10", fp4_sm90_decode4_codes_size, fp4_sm90_decode4_scales_size, fp4_sm90_decode4_pack_b,
     NULL, fp4_sm90_decode10_fits, fp4_sm90_decode10_init, fp4_sm90_decode10_launch, 1},
    {{FP4_SM90_V11_MID, "v11-mid", FP4_SM90_V11_SUMMARY},
     "mid11", fp4_sm90_mid9_codes_size, fp4_sm90_mid9_scales_size, fp4_sm90_mid9_pack_b,
     fp4_sm90_mid11_ws_size, fp4_sm90_mid9_fits, fp4_sm90_mid11_init, fp4_sm90_mid11_launch, 1},
    {{FP4_SM90_V12_PREFILL, "v12-prefill", FP4_SM90_V12_SUMMARY},
     "prefill12", fp4_sm90_prefill5_codes_size, fp4_sm90_prefill5_scales_size,
     fp4_sm90_prefill5_pack_b, fp4_sm90_prefill8_ws_size, fp4_sm90_prefill8_fits,
     fp4_sm90_prefill12_init, fp4_sm90_prefill12_launch, 0},
    {{FP4_SM90_V13_MID, "v13-mid", FP4_SM90_V13_SUMMARY},
     "mid13", fp4_sm90_mid9_codes_size, fp4_sm90_mid9_scales_size, fp4_sm90_mid9_pack_b,
     fp4_sm90_mid11_ws_size, fp4_sm90_mid9_fits, fp4_sm90_mid13_init, fp4_sm90_mid13_launch, 1},
    {{FP4_SM90_V14_PREFILL, "v14-prefill", FP4_SM90_V14_SUMMARY},
     "prefill14", fp4_sm90_prefill5_codes_size, fp4_sm90_prefill5_scales_size,
     fp4_sm90_prefill5_pack_b, fp4_sm90_prefill8_ws_size, fp4_sm90_prefill8_fits,
     fp4_sm90_prefill14_init, fp4_sm90_prefill14_launch, 0},
    {{FP4_SM90_V15_MID, "v15-mid", FP4_SM90_V15_SUMMARY},
     "mid15", fp4_sm90_mid9_codes_size, fp4_sm90_mid9_scales_size, fp4_sm90_mid9_pack_b,
     fp4_sm90_mid11_ws_size, fp4_sm90_mid9_fits, fp4_sm90_mid15_init, fp4_sm90_mid15_launch, 1},
    {{FP4_SM90_V16_PREFILL, "v16-prefill", FP4_SM90_V16_SUMMARY},
     "prefill16", fp4_sm90_prefill5_codes_size, fp4_sm90_prefill5_scales_size,
     fp4_sm90_prefill5_pack_b, fp4_sm90_prefill16_ws_size, fp4_sm90_prefill16_fits,
     fp4_sm90_prefill16_init, fp4_sm90_prefill16_launch, 0},
};
#define SM90_NFAM ((int)(sizeof sm90_families / sizeof sm90_families[0]))

static const sm90_family *sm90_family_of(int id)
{
    for (int i = 0; i < SM90_NFAM; i++)
        if (sm90_families[i].v.id == id) return &sm90_families[i];
    return NULL;
}

extern "C" int fp4_sm90_variant_count(void)
{
    return SM90_NFAM;
}

extern "C" const fp4_sm90_variant *fp4_sm90_variant_at(int i)
{
    return i >= 0 && i < SM90_NFAM ? &sm90_families[i].v : NULL;
}

extern "C" const fp4_sm90_variant *fp4_sm90_variant_by_id(int id)
{
    const sm90_family *f = sm90_family_of(id);
    return f ? &f->v : NULL;
}

extern "C" int fp4_sm90_variant_parse(const char *s)
{
    if (!s) return -1;
    if (!strcmp(s, "auto") || !strcmp(s, "0") || !s[0]) return FP4_SM90_AUTO;
    for (int i = 0; i < SM90_NFAM; i++) {
        const sm90_family *f = &sm90_families[i];
        char num[8];
        snprintf(num, sizeof num, "%d", f->v.id);
        if (!strcmp(s, f->v.name) || !strcmp(s, f->alias) || !strcmp(s, num)) return f->v.id;
    }
    return -1;
}

extern "C" int fp4_sm90_variant_fits(int id, int64_t m, int64_t n, int64_t k, int num_sms)
{
    const sm90_family *f = sm90_family_of(id);
    return f && (!f->fits || f->fits(m, n, k, num_sms));
}

extern "C" int fp4_sm90_forced(void)
{
    const int v = fp4_sm90_variant_parse(getenv("FP4_SM90_KERNEL"));
    return v > 0 ? v : FP4_SM90_AUTO;
}

/* The rule, in order:
 * 1. a forced variant wins (FP4_SM90_KERNEL);
 * 2. prefill (v8, else v5, else v2) when m >= 2048 and m * n > 1024 * 768:
 *    enough 128 x 256 output tiles without split K, and v11's token prepass
 *    (2 bytes a token element) costs as much as v8's weight prepass;
 * 3. v11-mid when m > 96, or m > 32 and n > 1024: the weights dequantized
 *    once per 64-256 tokens on wgmma, K split until the GPU is full, the
 *    partial tiles reduced by the tile's CTAs together;
 * 4. otherwise decode (v4, else v3, else v1): the weight stream plus the
 *    dequantization; split K fills the GPU at any N.
 * Measured on the H200 in one call (bench/results/2026-12-02-h200-s6-dev-call4:
 * v11 forced on the M sweep, v4 and v8 forced around the switches, us):
 * 32x2048x6144 v4 11.92 / v11 12.05, 64x2048 16.05 / 12.20, 128x2048 23.49
 * / 14.67, 64x768 10.90 / 11.17, 128x768 14.76 / 12.54; 1024x2048 v8 55.90 /
 * v11 52.32, 2048x2048 85.86 / 91.07, 1024x768 48.69 / 32.69, 2048x768 49.91
 * / 59.09. v9-mid (v11's main loop with atomics and a last-CTA read-back) is
 * no longer chosen: v11 is 1.3-1.7x faster wherever v9 was. */
extern "C" int fp4_sm90_choose(int64_t m, int64_t n, int64_t k, int num_sms)
{
    const int f = fp4_sm90_forced();
    if (f != FP4_SM90_AUTO) return f;
    /* prefill: v8 (v5 plus a B prepass: 1.3-1.5x v5 at every prefill shape of
     * bench/results/2026-12-02-h200-s3-prefill6), else v5, else v2 */
    int prefill = fp4_sm90_variant_fits(FP4_SM90_V8_PREFILL, m, n, k, num_sms)
                            ? FP4_SM90_V8_PREFILL
                        : fp4_sm90_variant_fits(FP4_SM90_V5_PREFILL, m, n, k, num_sms)
                            ? FP4_SM90_V5_PREFILL
                            : FP4_SM90_V2_PREFILL;
    /* from N = 4096, v16 (A dequantized by a prepass too, persistent): its
     * prepass costs M K bytes that the N columns amortize; session 9
     * (-s9-dev-call3, same rounds): v16 against v8 1724 / 1781 us at 8192^3,
     * 860 / 909 at 4096x8192x8192, 823 / 895 at 2048x28672x4096, 234 / 238 at
     * 4096^3; at N = 2048 v8 is 3-7% faster (181.9 / 173.2 at 4096x2048x6144) */
    if (prefill == FP4_SM90_V8_PREFILL && n >= 4096 &&
        fp4_sm90_variant_fits(FP4_SM90_V16_PREFILL, m, n, k, num_sms))
        prefill = FP4_SM90_V16_PREFILL;
    if (m >= 2048 && m * n > (int64_t)1024 * 768) return prefill;
    if ((m > 96 || (m > 32 && n > 1024)) && fp4_sm90_variant_fits(FP4_SM90_V11_MID, m, n, k, num_sms))
        return FP4_SM90_V11_MID;
    /* v4-decode, faster than v1 and v3 at every decode shape measured
     * (commit cb3064c, docs/PERF.md: 16x2048x6144 8.5 us against 11.2 / 13.4,
     * 64x2048x6144 17.0 against 37.8 / 28.3, 256x2048x6144 46 against 115 /
     * 74.5) */
    if (fp4_sm90_variant_fits(FP4_SM90_V4_DECODE, m, n, k, num_sms))
        return FP4_SM90_V4_DECODE;
    const int v3_wins = m > 32 || n * k >= ((int64_t)32 << 20);
    if (m < 512 && v3_wins && fp4_sm90_decode3_fits(m, n, k, num_sms)) return FP4_SM90_V3_DECODE;
    if (m <= 256) return FP4_SM90_V1_DECODE;
    return prefill;
}

extern "C" size_t fp4_sm90_packed_b_codes_size(int variant, int64_t n, int64_t k)
{
    const sm90_family *f = sm90_family_of(variant);
    return f ? f->codes_size(n, k) : 0;
}

extern "C" size_t fp4_sm90_packed_b_scales_size(int variant, int64_t n, int64_t k)
{
    const sm90_family *f = sm90_family_of(variant);
    return f ? f->scales_size(n, k) : 0;
}

extern "C" fp4_status fp4_sm90_pack_b(int variant, const fp4_matrix *b, uint8_t *codes,
                                      uint8_t *scales, fp4_err *err)
{
    if (!b || !b->codes || !b->scales || !codes || !scales)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 pack: NULL argument");
    fp4_status st = fp4_check_dims(b->rows, b->cols, err);
    if (st != FP4_OK) return st;
    const sm90_family *f = sm90_family_of(variant);
    if (!f) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 pack: unknown variant %d", variant);
    f->pack_b(b, codes, scales);
    return FP4_OK;
}

extern "C" size_t fp4_sm90_workspace_size(int variant, int64_t m, int64_t n, int64_t k)
{
    const sm90_family *f = sm90_family_of(variant);
    return f && f->ws_size ? f->ws_size(m, n, k) : 0;
}

extern "C" fp4_status fp4_sm90_init(fp4_err *err)
{
    for (int i = 0; i < SM90_NFAM; i++) {
        fp4_status st = sm90_families[i].init(err);
        if (st != FP4_OK) return st;
    }
    return FP4_OK;
}

extern "C" fp4_status fp4_sm90_check(const fp4_sm90_gemm_args *a, fp4_err *err)
{
    if (!a) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90: NULL arguments");
    const sm90_family *f = sm90_family_of(a->variant);
    if (!f)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90: unknown variant %d", a->variant);
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
    if (f->splits && a->splits < 0)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90: splits = %d", a->splits);
    if (f->ws_size &&
        (!a->workspace || a->workspace_bytes < fp4_sm90_workspace_size(a->variant, a->m, a->n, a->k)))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90: this variant needs a %zu-byte workspace",
                        fp4_sm90_workspace_size(a->variant, a->m, a->n, a->k));
    return FP4_OK;
}

extern "C" fp4_status fp4_sm90_gemm(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    fp4_status st = fp4_sm90_check(a, err);
    if (st != FP4_OK) return st;
    return sm90_family_of(a->variant)->launch(a, stream, err);
}

/* ---- the backend ----------------------------------------------------------------- */

typedef struct sm90_inst {
    int num_sms;
    int cluster_fit[FP4_SM90_MAX_CLUSTER + 1]; /* v10-decode's, measured at open */
} sm90_inst;

typedef struct sm90_copy {
    uint8_t *a_codes, *a_sf; /* [m, k/2], swizzled */
    uint8_t *b_codes, *b_sf; /* packed for the plan's variant */
    uint16_t *d;             /* [m, n] bf16 */
    void *ws;                /* v1-decode workspace (zeroed), NULL otherwise */
} sm90_copy;

typedef struct sm90_plan {
    fp4_shape shape;
    float alpha;
    int variant;
    int splits; /* 0: automatic */
    int num_sms;
    int cluster_fit[FP4_SM90_MAX_CLUSTER + 1];
    size_t ws_bytes;
    int copies;
    sm90_copy *c; /* [copies] */
} sm90_plan;

static fp4_status sm90_open(void **inst, fp4_err *err)
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
    sm90_inst *s = (sm90_inst *)calloc(1, sizeof *s);
    if (!s) return fp4_fail(err, FP4_ERR_NOMEM, "fp4-sm90: no host memory");
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&s->num_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        free(s);
        return fp4_fail(err, FP4_ERR_CUDA, "fp4-sm90: cannot read the multiprocessor count");
    }
    if ((st = fp4_sm90_init(err)) != FP4_OK ||
        (st = fp4_sm90_decode10_cluster_fit(s->cluster_fit, s->num_sms, err)) != FP4_OK) {
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

static fp4_status sm90_supports(void *inst, const fp4_shape *s, fp4_err *err)
{
    if (s->m > INT_MAX / 2 || s->n > INT_MAX / 2 || s->k > INT_MAX / 2)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90: %lldx%lldx%lld has a size over 2^30 (int indices)",
                        (long long)s->m, (long long)s->n, (long long)s->k);
    return FP4_OK;
}

static void sm90_release(void *plan)
{
    sm90_plan *p = (sm90_plan *)plan;
    if (!p) return;
    if (p->c) {
        for (int i = 0; i < p->copies; i++) {
            fp4_gpu_free(p->c[i].a_codes, "fp4-sm90 A codes");
            fp4_gpu_free(p->c[i].a_sf, "fp4-sm90 A scales");
            fp4_gpu_free(p->c[i].b_codes, "fp4-sm90 packed B codes");
            fp4_gpu_free(p->c[i].b_sf, "fp4-sm90 packed B scales");
            fp4_gpu_free(p->c[i].d, "fp4-sm90 D");
            fp4_gpu_free(p->c[i].ws, "fp4-sm90 workspace");
        }
        free(p->c);
    }
    free(p);
}

/* Packs B for the chosen variant and swizzles A's scales on the host once,
 * then uploads `copies` sets. On failure nothing stays allocated. */
static fp4_status sm90_prepare(void *inst_, const fp4_gemm_problem *pr, int copies, void **plan,
                               fp4_err *err)
{
    sm90_inst *inst = (sm90_inst *)inst_;
    *plan = NULL;
    fp4_status st = fp4_gpu_check_problem(pr, copies, err);
    if (st != FP4_OK) return st;
    if ((st = sm90_supports(inst, &pr->shape, err)) != FP4_OK) return st;

    const fp4_shape *s = &pr->shape;
    const int variant = fp4_sm90_choose(s->m, s->n, s->k, inst->num_sms);
    if (!fp4_sm90_variant_fits(variant, s->m, s->n, s->k, inst->num_sms))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90 %s: cannot run %lldx%lldx%lld (shared-memory slice or grid "
                        "too large); force another variant",
                        fp4_sm90_variant_by_id(variant)->name, (long long)s->m, (long long)s->n,
                        (long long)s->k);
    const size_t a_codes = (size_t)s->m * (size_t)(s->k / 2);
    const size_t a_sf = fp4_swizzled_size(s->m, s->k);
    const size_t b_codes = fp4_sm90_packed_b_codes_size(variant, s->n, s->k);
    const size_t b_sf = fp4_sm90_packed_b_scales_size(variant, s->n, s->k);
    const size_t ws = fp4_sm90_workspace_size(variant, s->m, s->n, s->k);
    size_t d_bytes;
    uint8_t *h_asf = NULL, *h_bq = NULL, *h_bs = NULL;
    sm90_plan *p = NULL;
    const char *env = getenv("FP4_SM90_SPLITK");

    if (fp4_size_mul3((size_t)s->m, (size_t)s->n, 2, &d_bytes)) {
        st = fp4_fail(err, FP4_ERR_OVERFLOW, "fp4-sm90: D overflows size_t");
        goto out;
    }
    h_asf = (uint8_t *)malloc(a_sf);
    h_bq = (uint8_t *)malloc(b_codes);
    h_bs = (uint8_t *)malloc(b_sf);
    p = (sm90_plan *)calloc(1, sizeof *p);
    if (!h_asf || !h_bq || !h_bs || !p ||
        !(p->c = (sm90_copy *)calloc((size_t)copies, sizeof *p->c))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "fp4-sm90: no host memory to pack the operands");
        goto out;
    }
    if ((st = fp4_swizzle_scales(pr->a->scales, s->m, s->k, h_asf, err)) != FP4_OK) goto out;
    if ((st = fp4_sm90_pack_b(variant, pr->b, h_bq, h_bs, err)) != FP4_OK) goto out;

    p->shape = *s;
    p->alpha = pr->alpha;
    p->variant = variant;
    p->splits = env ? atoi(env) : 0;
    if (p->splits < 0) p->splits = 0;
    p->num_sms = inst->num_sms;
    memcpy(p->cluster_fit, inst->cluster_fit, sizeof p->cluster_fit);
    p->ws_bytes = ws;
    p->copies = copies;
    for (int i = 0; i < copies; i++) {
        sm90_copy *c = &p->c[i];
        if ((st = fp4_gpu_upload((void **)&c->a_codes, pr->a->codes, a_codes, "A codes", err)) != FP4_OK ||
            (st = fp4_gpu_upload((void **)&c->a_sf, h_asf, a_sf, "A swizzled scales", err)) != FP4_OK ||
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
    a.cluster_fit = p->cluster_fit;
    a.splits = p->splits;
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
    const fp4_sm90_variant *v = p ? fp4_sm90_variant_by_id(p->variant) : NULL;
    return v ? v->name : "unknown";
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
    sm90_run,         /* run: one kernel launch */
    sm90_read_output, /* read_output */
    sm90_release,     /* release */
    NULL,             /* bytes_moved: fp4_gemm_min_bytes */
    sm90_variant_name, /* variant: "v1-decode" / "v2-prefill" */
};
