/* Development harness for fp4-sm90 v5-prefill (src/kernels/fp4_sm90_prefill5.cu):
 * exactness against the CPU reference on tail shapes, v5 vs v2 on large ones,
 * and timings of v5 (both tile widths), v2 and cuBLAS bf16 with CUDA events.
 * Build: see bench/prefill5-dev.sh. Usage: prefill5_harness [check|small|time|all]
 * Built with -DP6_HARNESS (bench/prefill6-dev.sh, links fp4_sm90_prefill6.cu) it
 * also checks and times v6-prefill: modes check6, small6, time6, ablate6. */
#ifndef P5_NO_CUBLAS
#include <cublas_v2.h>
#else
typedef void *cublasHandle_t;
#endif
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp4/backend.h"
#include "fp4/format.h"
#include "kernels/fp4_sm90.h"


#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)
#define FK(x)                                                                              \
    do {                                                                                   \
        fp4_err er_;                                                                       \
        memset(&er_, 0, sizeof er_);                                                       \
        if ((x) != FP4_OK) {                                                               \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, er_.msg);    \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return g_rng;
}
static float gauss(void)
{
    double u = ((rnd() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double v = ((rnd() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

static int g_sms;
static int g_fail;

/* NVFP4 matrix: quantized gaussian (kind 0) or raw random codes + scales (kind 1) */
static void make_matrix(fp4_matrix *m, int64_t rows, int64_t cols, int kind)
{
    fp4_err err;
    if (kind == 0) {
        float *x = (float *)malloc((size_t)rows * cols * sizeof(float));
        for (int64_t i = 0; i < rows * cols; i++) x[i] = gauss() * (1.0f + (float)(rnd() % 4));
        if (fp4_quantize_f32(x, rows, cols, 0, m, &err) != FP4_OK) {
            fprintf(stderr, "quantize: %s\n", err.msg);
            exit(2);
        }
        free(x);
    } else {
        if (fp4_matrix_alloc(m, rows, cols, &err) != FP4_OK) exit(2);
        for (int64_t i = 0; i < rows * cols / 2; i++) m->codes[i] = (uint8_t)rnd();
        for (int64_t i = 0; i < rows * cols / 16; i++) {
            uint8_t b = (uint8_t)(0x20 + rnd() % 0x40); /* 2^-4 .. ~2^4, finite, positive */
            if (rnd() % 16 == 0) b = (uint8_t)(rnd() % 0x7F); /* any finite incl. 0, subnormals, 448 */
            m->scales[i] = b;
        }
        m->global_scale = 1.0f / 64.0f;
    }
}

typedef struct {
    int64_t m, n, k;
    uint8_t *a_codes, *a_sf, *b5_codes, *b5_sf, *b2_codes, *b2_sf;
    uint16_t *d;
    float alpha;
    void *ws; /* v6's fp16 B workspace (P6_HARNESS), NaN-poisoned at upload */
    size_t ws_bytes;
} dev_problem;

static void upload(dev_problem *p, const fp4_matrix *a, const fp4_matrix *b, int want_v2)
{
    const int64_t M = a->rows, N = b->rows, K = a->cols;
    p->m = M, p->n = N, p->k = K;
    p->alpha = a->global_scale * b->global_scale;
    fp4_err err;
    const size_t asz = fp4_swizzled_size(M, K);
    uint8_t *asw = (uint8_t *)malloc(asz);
    if (fp4_swizzle_scales(a->scales, M, K, asw, &err) != FP4_OK) exit(2);
    CK(cudaMalloc(&p->a_codes, (size_t)M * K / 2));
    CK(cudaMalloc(&p->a_sf, asz));
    CK(cudaMemcpy(p->a_codes, a->codes, (size_t)M * K / 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p->a_sf, asw, asz, cudaMemcpyHostToDevice));
    free(asw);
    const size_t c5 = fp4_sm90_prefill5_codes_size(N, K), s5 = fp4_sm90_prefill5_scales_size(N, K);
    uint8_t *hc = (uint8_t *)malloc(c5), *hs = (uint8_t *)malloc(s5);
    fp4_sm90_prefill5_pack_b(b, hc, hs);
    CK(cudaMalloc(&p->b5_codes, c5));
    CK(cudaMalloc(&p->b5_sf, s5));
    CK(cudaMemcpy(p->b5_codes, hc, c5, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p->b5_sf, hs, s5, cudaMemcpyHostToDevice));
    free(hc), free(hs);
    p->b2_codes = p->b2_sf = NULL;
    if (want_v2) {
        const size_t c2 = fp4_sm90_prefill_codes_size(N, K), s2 = fp4_sm90_prefill_scales_size(N, K);
        hc = (uint8_t *)malloc(c2), hs = (uint8_t *)malloc(s2);
        fp4_sm90_prefill_pack_b(b, hc, hs);
        CK(cudaMalloc(&p->b2_codes, c2));
        CK(cudaMalloc(&p->b2_sf, s2));
        CK(cudaMemcpy(p->b2_codes, hc, c2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(p->b2_sf, hs, s2, cudaMemcpyHostToDevice));
        free(hc), free(hs);
    }
    CK(cudaMalloc(&p->d, (size_t)M * N * 2));
    p->ws = NULL, p->ws_bytes = 0;
#ifdef P6_HARNESS
    p->ws_bytes = fp4_sm90_prefill8_ws_size(M, N, K);
    CK(cudaMalloc(&p->ws, p->ws_bytes));
    CK(cudaMemset(p->ws, 0xFF, p->ws_bytes)); /* every byte the main kernel reads must be written */
#endif
}

static void release(dev_problem *p)
{
    cudaFree(p->a_codes), cudaFree(p->a_sf), cudaFree(p->b5_codes), cudaFree(p->b5_sf);
    if (p->b2_codes) cudaFree(p->b2_codes), cudaFree(p->b2_sf);
    cudaFree(p->d);
    if (p->ws) cudaFree(p->ws);
}

/* variant: 5 (bn 0/128/256) or 2 */
static void launch(const dev_problem *p, int variant, int bn)
{
    fp4_sm90_gemm_args a;
    memset(&a, 0, sizeof a);
    a.variant = variant == 5 ? FP4_SM90_V5_PREFILL : FP4_SM90_V2_PREFILL;
    a.m = p->m, a.n = p->n, a.k = p->k;
    a.a_codes = p->a_codes, a.a_sf = p->a_sf;
    a.b_codes = variant == 5 ? p->b5_codes : p->b2_codes;
    a.b_sf = variant == 5 ? p->b5_sf : p->b2_sf;
    a.alpha = p->alpha, a.d = p->d, a.num_sms = g_sms;
    fp4_err err;
    memset(&err, 0, sizeof err);
    fp4_status st = variant == 5 ? fp4_sm90_prefill5_launch_bn(&a, bn, 0, &err)
                                 : fp4_sm90_prefill_launch(&a, 0, &err);
    if (st != FP4_OK) {
        fprintf(stderr, "launch v%d bn %d: %s\n", variant, bn, err.msg);
        exit(2);
    }
}

static void read_d(const dev_problem *p, float *out)
{
    const size_t n = (size_t)p->m * p->n;
    uint16_t *h = (uint16_t *)malloc(n * 2);
    CK(cudaMemcpy(h, p->d, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) out[i] = fp4_bf16_to_float(h[i]);
    free(h);
}

static int compare(const char *what, const float *d, const float *r, size_t n, int64_t ncols)
{
    double max_r = 0, max_diff = 0, sr2 = 0, sd2 = 0;
    size_t nonfinite = 0, first_bad = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        double x = d[i], y = r[i];
        if (!isfinite(x)) {
            if (nonfinite++ == 0) first_bad = i;
            continue;
        }
        double df = fabs(x - y);
        if (fabs(y) > max_r) max_r = fabs(y);
        if (df > max_diff) max_diff = df;
        sr2 += y * y, sd2 += df * df;
    }
    double em = max_r > 0 ? max_diff / max_r : max_diff;
    double en = sr2 > 0 ? sqrt(sd2 / sr2) : sqrt(sd2);
    int ok = nonfinite == 0 && em <= 1e-2 && en <= 5e-3;
    printf("%-44s %s max %.3g norm %.3g nonfinite %zu", what, ok ? "PASS" : "FAIL", em, en, nonfinite);
    if (nonfinite) printf(" (first at %zu)", first_bad);
    printf("\n");
    if (!ok) {
        int shown = 0;
        for (size_t i = 0; i < n && shown < 6; i++) {
            double x = d[i], y = r[i];
            if (!isfinite(x) || fabs(x - y) > 1e-2 * max_r) {
                printf("    bad at m %lld n %lld: got %g want %g\n", (long long)(i / ncols),
                       (long long)(i % ncols), x, y);
                shown++;
            }
        }
    }
    if (!ok) g_fail++;
    return ok;
}

static void check_shape(int64_t M, int64_t N, int64_t K, int kind, int with_v2)
{
    fp4_matrix a, b;
    make_matrix(&a, M, K, kind);
    make_matrix(&b, N, K, kind);
    float *ref = (float *)malloc((size_t)M * N * sizeof(float));
    float *out = (float *)malloc((size_t)M * N * sizeof(float));
    fp4_err err;
    if (fp4_gemm_reference(&a, &b, a.global_scale * b.global_scale, ref, 0, &err) != FP4_OK) {
        fprintf(stderr, "reference: %s\n", err.msg);
        exit(2);
    }
    dev_problem p;
    upload(&p, &a, &b, with_v2);
    const int bns[4] = {0, 128, 256, -128};
    for (int i = 0; i < 4; i++) {
        CK(cudaMemset(p.d, 0xFF, (size_t)M * N * 2)); /* NaN poison */
        launch(&p, 5, bns[i]);
        CK(cudaDeviceSynchronize());
        read_d(&p, out);
        char what[128];
        snprintf(what, sizeof what, "v5 bn=%d(%d) %lldx%lldx%lld %s", bns[i],
                 bns[i] ? bns[i] : fp4_sm90_prefill5_bn(M, N, K, g_sms), (long long)M,
                 (long long)N, (long long)K, kind ? "raw" : "gauss");
        compare(what, out, ref, (size_t)M * N, N);
    }
    if (with_v2) {
        CK(cudaMemset(p.d, 0xFF, (size_t)M * N * 2));
        launch(&p, 2, 0);
        CK(cudaDeviceSynchronize());
        read_d(&p, out);
        char what[128];
        snprintf(what, sizeof what, "v2 %lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
        compare(what, out, ref, (size_t)M * N, N);
    }
    release(&p);
    fp4_matrix_free(&a), fp4_matrix_free(&b);
    free(ref), free(out);
}

static double time_ms(cudaEvent_t e0, cudaEvent_t e1) {
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* median of reps single-launch timings */
static double bench(const dev_problem *p, int variant, int bn, int reps)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) launch(p, variant, bn);
    double t[64];
    if (reps > 64) reps = 64;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(e0));
        launch(p, variant, bn);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        t[i] = time_ms(e0, e1);
    }
    qsort(t, reps, sizeof(double), cmp_d);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return t[reps / 2];
}

#ifndef P5_NO_CUBLAS
static double bench_cublas(cublasHandle_t h, int64_t M, int64_t N, int64_t K, int reps)
{
    void *A, *B, *D;
    CK(cudaMalloc(&A, (size_t)M * K * 2));
    CK(cudaMalloc(&B, (size_t)N * K * 2));
    CK(cudaMalloc(&D, (size_t)M * N * 2));
    /* random bf16 in [-2, 2): fill on host once in chunks */
    {
        const size_t chunk = 1 << 24;
        uint16_t *hb = (uint16_t *)malloc(chunk * 2);
        for (size_t i = 0; i < chunk; i++) hb[i] = fp4_bf16_from_float(gauss());
        for (size_t off = 0; off < (size_t)M * K; off += chunk)
            CK(cudaMemcpy((uint16_t *)A + off, hb, 2 * ((size_t)M * K - off < chunk ? (size_t)M * K - off : chunk), cudaMemcpyHostToDevice));
        for (size_t off = 0; off < (size_t)N * K; off += chunk)
            CK(cudaMemcpy((uint16_t *)B + off, hb, 2 * ((size_t)N * K - off < chunk ? (size_t)N * K - off : chunk), cudaMemcpyHostToDevice));
        free(hb);
    }
    float alpha = 1, beta = 0;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double t[64];
    for (int i = 0; i < 3 + reps; i++) {
        CK(cudaEventRecord(e0));
        cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, B,
                                         CUDA_R_16BF, (int)K, A, CUDA_R_16BF, (int)K, &beta, D,
                                         CUDA_R_16BF, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        if (st != CUBLAS_STATUS_SUCCESS) {
            printf("cublas failed %d\n", (int)st);
            return 0;
        }
        if (i >= 3) t[i - 3] = time_ms(e0, e1);
    }
    qsort(t, reps, sizeof(double), cmp_d);
    cudaFree(A), cudaFree(B), cudaFree(D);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return t[reps / 2];
}
#else
static double bench_cublas(cublasHandle_t h, int64_t M, int64_t N, int64_t K, int reps)
{
    (void)h, (void)M, (void)N, (void)K, (void)reps;
    return 1e30;
}
#endif

static void time_shape(cublasHandle_t h, int64_t M, int64_t N, int64_t K, int reps)
{
    fp4_matrix a, b;
    make_matrix(&a, M, K, 1);
    make_matrix(&b, N, K, 1);
    dev_problem p;
    upload(&p, &a, &b, 1);
    const double fl = 2.0 * M * N * K;
    /* v5 against v2 (exact both: fp32 sums of exact products) */
    {
        const size_t n = (size_t)M * N;
        float *o5 = (float *)malloc(n * 4), *o2 = (float *)malloc(n * 4);
        CK(cudaMemset(p.d, 0xFF, n * 2));
        launch(&p, 5, 0);
        CK(cudaDeviceSynchronize());
        read_d(&p, o5);
        CK(cudaMemset(p.d, 0xFF, n * 2));
        launch(&p, 2, 0);
        CK(cudaDeviceSynchronize());
        read_d(&p, o2);
        char what[128];
        snprintf(what, sizeof what, "v5 vs v2 %lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
        compare(what, o5, o2, n, N);
        free(o5), free(o2);
    }
    const int auto_bn = fp4_sm90_prefill5_bn(M, N, K, g_sms);
    const double t5a = bench(&p, 5, 256, reps), t5b = bench(&p, 5, 128, reps);
    const double t5c = bench(&p, 5, -128, reps);
    const double t2 = bench(&p, 2, 0, reps);
    const double tc = bench_cublas(h, M, N, K, reps);
    printf("TIME %5lldx%5lldx%5lld  v5/256 %8.1f us %6.1f TF | v5/128 %8.1f us %6.1f TF | v5/128x2 %6.1f TF | auto=%d | "
           "v2 %8.1f us %6.1f TF | cublas-bf16 %8.1f us %6.1f TF | v5best/cublas %.0f%%\n",
           (long long)M, (long long)N, (long long)K, t5a * 1e3, fl / t5a * 1e-9, t5b * 1e3,
           fl / t5b * 1e-9, fl / t5c * 1e-9, auto_bn, t2 * 1e3, fl / t2 * 1e-9, tc * 1e3, fl / tc * 1e-9,
           100.0 * tc / (t5a < t5b ? t5a : t5b));
    fflush(stdout);
    release(&p);
    fp4_matrix_free(&a), fp4_matrix_free(&b);
}

#ifdef P6_HARNESS
/* ---- v6-prefill ------------------------------------------------------------------- */

/* The v6 configurations checked (every instantiated one and the default): tile
 * width (0 = automatic, -128 = 128 wide with two CTAs per SM), ring depth (0 =
 * default), B by bulk copies (1), cp.async (0) or the default (-1). */
static const int g_v6cfg[][3] = {{0, 0, -1},  {256, 4, 0}, {256, 5, 0}, {256, 6, 0},
                                 {128, 4, 0}, {128, 6, 0}, {-128, 4, 0}, {256, 4, 1},
                                 {256, 5, 1}, {256, 6, 1}, {128, 6, 1}, {-128, 4, 1}};
#define NV6CFG ((int)(sizeof g_v6cfg / sizeof g_v6cfg[0]))
static int g_checks, g_bitdiff_shapes;

static fp4_sm90_gemm_args v6_args(const dev_problem *p)
{
    fp4_sm90_gemm_args a;
    memset(&a, 0, sizeof a);
    a.variant = 6;
    a.m = p->m, a.n = p->n, a.k = p->k;
    a.a_codes = p->a_codes, a.a_sf = p->a_sf, a.b_codes = p->b5_codes, a.b_sf = p->b5_sf;
    a.alpha = p->alpha, a.d = p->d, a.num_sms = g_sms;
    a.workspace = p->ws, a.workspace_bytes = p->ws_bytes;
    return a;
}

/* parts: 1 prepass, 2 main kernel, 3 both */
static void launch6(const dev_problem *p, int bn, int stages, int bulk, int parts, cudaStream_t stream)
{
    fp4_sm90_gemm_args a = v6_args(p);
    fp4_err err;
    memset(&err, 0, sizeof err);
    if (fp4_sm90_prefill8_launch_cfg(&a, bn, stages, bulk, parts, stream, &err) != FP4_OK) {
        fprintf(stderr, "launch v6 bn %d stages %d bulk %d parts %d: %s\n", bn, stages, bulk, parts,
                err.msg);
        exit(2);
    }
}

/* bf16 outputs differing bit for bit (outputs as read back by read_d: floats
 * from bf16, so equality of the floats is equality of the bits, NaN aside) */
static size_t bit_diffs(const float *x, const float *y, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&x[i], &y[i], sizeof(float)) != 0) d++;
    return d;
}

/* v6 in every configuration against the exact reference (NaN-poisoned output)
 * and bit for bit against v5 with the same tile width. */
static void check6_shape(int64_t M, int64_t N, int64_t K, int kind)
{
    fp4_matrix a, b;
    make_matrix(&a, M, K, kind);
    make_matrix(&b, N, K, kind);
    const size_t n = (size_t)M * N;
    float *ref = (float *)malloc(n * sizeof(float));
    float *out = (float *)malloc(n * sizeof(float));
    float *o5[2] = {(float *)malloc(n * sizeof(float)), (float *)malloc(n * sizeof(float))};
    fp4_err err;
    if (fp4_gemm_reference(&a, &b, a.global_scale * b.global_scale, ref, 0, &err) != FP4_OK) {
        fprintf(stderr, "reference: %s\n", err.msg);
        exit(2);
    }
    dev_problem p;
    upload(&p, &a, &b, 0);
    for (int w = 0; w < 2; w++) { /* v5 at 256 and 128 */
        CK(cudaMemset(p.d, 0xFF, n * 2));
        launch(&p, 5, w == 0 ? 256 : 128);
        CK(cudaDeviceSynchronize());
        read_d(&p, o5[w]);
    }
    for (int i = 0; i < NV6CFG; i++) {
        const int bn = g_v6cfg[i][0], st = g_v6cfg[i][1], bu = g_v6cfg[i][2];
        CK(cudaMemset(p.d, 0xFF, n * 2)); /* NaN poison */
        launch6(&p, bn, st, bu, 3, 0);
        CK(cudaDeviceSynchronize());
        read_d(&p, out);
        const int ebn = bn ? bn : fp4_sm90_prefill8_bn(M, N, K, g_sms);
        const size_t bd = bit_diffs(out, o5[ebn == 256 ? 0 : 1], n);
        char what[160];
        snprintf(what, sizeof what, "v6 bn=%d(%d) st=%d bulk=%d %lldx%lldx%lld %s bitdiff-v5 %zu", bn, ebn,
                 st, bu, (long long)M, (long long)N, (long long)K, kind ? "raw" : "gauss", bd);
        g_checks++;
        if (bd) g_bitdiff_shapes++;
        compare(what, out, ref, n, N);
    }
    release(&p);
    fp4_matrix_free(&a), fp4_matrix_free(&b);
    free(ref), free(out), free(o5[0]), free(o5[1]);
}

/* The workspace checks of the launch: missing or short -> FP4_ERR_INVALID_ARG. */
static void check6_ws_args(void)
{
    fp4_matrix a, b;
    make_matrix(&a, 130, 48, 1);
    make_matrix(&b, 200, 48, 1);
    dev_problem p;
    upload(&p, &a, &b, 0);
    fp4_sm90_gemm_args g = v6_args(&p);
    fp4_err err;
    g.workspace_bytes = p.ws_bytes - 1;
    const fp4_status s1 = fp4_sm90_prefill8_launch_cfg(&g, 0, 0, -1, 3, 0, &err);
    g.workspace_bytes = p.ws_bytes, g.workspace = NULL;
    const fp4_status s2 = fp4_sm90_prefill8_launch_cfg(&g, 0, 0, -1, 3, 0, &err);
    g.workspace = (uint8_t *)p.ws + 8;
    const fp4_status s3 = fp4_sm90_prefill8_launch_cfg(&g, 0, 0, -1, 3, 0, &err);
    const int ok = s1 == FP4_ERR_INVALID_ARG && s2 == FP4_ERR_INVALID_ARG && s3 == FP4_ERR_INVALID_ARG;
    printf("v6 workspace argument checks (short, NULL, misaligned -> INVALID_ARG): %s (%d %d %d)\n",
           ok ? "PASS" : "FAIL", (int)s1, (int)s2, (int)s3);
    if (!ok) g_fail++;
    g_checks++;
    release(&p);
    fp4_matrix_free(&a), fp4_matrix_free(&b);
}

/* v6 captured in a CUDA graph on a stream (both kernels), replayed twice,
 * against v5 bit for bit. */
static void check6_graph(int64_t M, int64_t N, int64_t K)
{
    fp4_matrix a, b;
    make_matrix(&a, M, K, 1);
    make_matrix(&b, N, K, 1);
    dev_problem p;
    upload(&p, &a, &b, 0);
    const size_t n = (size_t)M * N;
    float *o5 = (float *)malloc(n * 4), *o6 = (float *)malloc(n * 4);
    const int ebn = fp4_sm90_prefill8_bn(M, N, K, g_sms);
    launch(&p, 5, ebn);
    CK(cudaDeviceSynchronize());
    read_d(&p, o5);
    cudaStream_t s;
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMemset(p.ws, 0xFF, p.ws_bytes));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    launch6(&p, 0, 0, -1, 3, s);
    CK(cudaStreamEndCapture(s, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    size_t bd = 0;
    for (int r = 0; r < 2; r++) {
        CK(cudaMemset(p.d, 0xFF, n * 2));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        read_d(&p, o6);
        bd += bit_diffs(o6, o5, n);
    }
    printf("v6 graph replay x2 %lldx%lldx%lld vs v5: %s bitdiff %zu\n", (long long)M, (long long)N,
           (long long)K, bd ? "FAIL" : "PASS", bd);
    if (bd) g_fail++;
    g_checks++;
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(gr));
    CK(cudaStreamDestroy(s));
    release(&p);
    fp4_matrix_free(&a), fp4_matrix_free(&b);
    free(o5), free(o6);
}

/* ---- v6 timing: every variant in rounds (interleaved), median per variant ---------- */

enum { T_V5_256, T_V5_128, T_V6 /* + NV6T full */ };
/* {tile width, ring depth, bulk}: the first run (cp.async only) timed depths
 * 4..6; this set compares cp.async and bulk copies of B */
static const int g_v6t[][3] = {{256, 6, 0}, {256, 5, 1}, {256, 6, 1}, {128, 6, 0}, {128, 6, 1}, {-128, 4, 1}};
#define NV6T ((int)(sizeof g_v6t / sizeof g_v6t[0]))
#define T_MAIN (T_V6 + NV6T)     /* + NV6T: main kernel only */
#define T_PRE (T_MAIN + NV6T)    /* prepass only */
#define T_CUBLAS (T_PRE + 1)
#define T_N (T_CUBLAS + 1)

typedef struct {
    void *A, *B, *D;
} cublas_bufs;

static void run_variant(cublasHandle_t h, const dev_problem *p, const cublas_bufs *cb, int v)
{
    if (v == T_V5_256) launch(p, 5, 256);
    else if (v == T_V5_128) launch(p, 5, 128);
    else if (v < T_MAIN) launch6(p, g_v6t[v - T_V6][0], g_v6t[v - T_V6][1], g_v6t[v - T_V6][2], 3, 0);
    else if (v < T_PRE) launch6(p, g_v6t[v - T_MAIN][0], g_v6t[v - T_MAIN][1], g_v6t[v - T_MAIN][2], 2, 0);
    else if (v == T_PRE) launch6(p, 0, 0, -1, 1, 0);
    else {
#ifndef P5_NO_CUBLAS
        float alpha = 1, beta = 0;
        cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)p->n, (int)p->m, (int)p->k,
                                         &alpha, cb->B, CUDA_R_16BF, (int)p->k, cb->A, CUDA_R_16BF,
                                         (int)p->k, &beta, cb->D, CUDA_R_16BF, (int)p->n,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) {
            fprintf(stderr, "cublas failed %d\n", (int)st);
            exit(2);
        }
#else
        (void)h, (void)cb;
#endif
    }
}

#ifndef P5_NO_CUBLAS
static void fill_bf16(void *dst, size_t count)
{
    const size_t chunk = 1 << 24;
    uint16_t *hb = (uint16_t *)malloc(chunk * 2);
    for (size_t i = 0; i < chunk; i++) hb[i] = fp4_bf16_from_float(gauss());
    for (size_t off = 0; off < count; off += chunk)
        CK(cudaMemcpy((uint16_t *)dst + off, hb, 2 * (count - off < chunk ? count - off : chunk),
                      cudaMemcpyHostToDevice));
    free(hb);
}
#endif

/* nv: variants to time (T_N for all; ablation builds skip v5, full v6 and cuBLAS) */
static void time6_shape(cublasHandle_t h, int64_t M, int64_t N, int64_t K, int rounds, int ablate)
{
    fp4_matrix a, b;
    make_matrix(&a, M, K, 1);
    make_matrix(&b, N, K, 1);
    dev_problem p;
    upload(&p, &a, &b, 0);
    const size_t n = (size_t)M * N;
    const double fl = 2.0 * M * N * K;
    if (!ablate) { /* v6 (every timed configuration) against v5 bit for bit */
        float *o5[2] = {(float *)malloc(n * 4), (float *)malloc(n * 4)};
        float *o6 = (float *)malloc(n * 4);
        for (int w = 0; w < 2; w++) {
            CK(cudaMemset(p.d, 0xFF, n * 2));
            launch(&p, 5, w == 0 ? 256 : 128);
            CK(cudaDeviceSynchronize());
            read_d(&p, o5[w]);
        }
        for (int i = 0; i < NV6T; i++) {
            CK(cudaMemset(p.d, 0xFF, n * 2));
            launch6(&p, g_v6t[i][0], g_v6t[i][1], g_v6t[i][2], 3, 0);
            CK(cudaDeviceSynchronize());
            read_d(&p, o6);
            size_t nf = 0;
            for (size_t q = 0; q < n; q++) nf += !isfinite(o6[q]);
            const size_t bd = bit_diffs(o6, o5[g_v6t[i][0] == 256 ? 0 : 1], n);
            printf("v6 %d/s%d%s vs v5 %lldx%lldx%lld: %s bitdiff %zu nonfinite %zu\n", g_v6t[i][0],
                   g_v6t[i][1], g_v6t[i][2] ? "/bulk" : "", (long long)M, (long long)N, (long long)K, bd || nf ? "FAIL" : "PASS",
                   bd, nf);
            if (bd || nf) g_fail++;
            g_checks++;
        }
        free(o5[0]), free(o5[1]), free(o6);
    }
    launch6(&p, 0, 0, -1, 1, 0); /* the workspace holds real tiles before any main-only call */
    CK(cudaDeviceSynchronize());
    cublas_bufs cb = {NULL, NULL, NULL};
#ifndef P5_NO_CUBLAS
    if (!ablate) {
        CK(cudaMalloc(&cb.A, (size_t)M * K * 2));
        CK(cudaMalloc(&cb.B, (size_t)N * K * 2));
        CK(cudaMalloc(&cb.D, n * 2));
        fill_bf16(cb.A, (size_t)M * K);
        fill_bf16(cb.B, (size_t)N * K);
    }
#endif
    int use[T_N];
    for (int v = 0; v < T_N; v++) use[v] = !ablate || (v >= T_MAIN && v < T_PRE);
#ifdef P5_NO_CUBLAS
    use[T_CUBLAS] = 0;
#endif
    /* calls per sample: about 2 ms of work per sample */
    const double est_us = fl / 400e12 * 1e6;
    int batch = (int)(2000.0 / est_us);
    if (batch < 2) batch = 2;
    if (batch > 20) batch = 20;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    static double t[T_N][64];
    if (rounds > 64) rounds = 64;
    for (int v = 0; v < T_N; v++) /* warm-up */
        if (use[v]) run_variant(h, &p, &cb, v);
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < T_N; v++) {
            if (!use[v]) continue;
            CK(cudaEventRecord(e0));
            for (int i = 0; i < batch; i++) run_variant(h, &p, &cb, v);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            t[v][r] = time_ms(e0, e1) * 1e3 / batch; /* us per call */
        }
    double med[T_N];
    for (int v = 0; v < T_N; v++) {
        med[v] = 0;
        if (!use[v]) continue;
        qsort(t[v], rounds, sizeof(double), cmp_d);
        med[v] = t[v][rounds / 2];
    }
    const char *tag = ablate == 0 ? "TIME6" : ablate == 1 ? "ABL6-1" : ablate == 2 ? "ABL6-2" : "ABL6-3";
    printf("%s %lldx%lldx%lld (median of %d rounds x %d calls, us and TFLOP/s; v6 = prepass + main)\n", tag,
           (long long)M, (long long)N, (long long)K, rounds, batch);
    if (!ablate) {
        printf("  v5/256        %9.1f us %6.1f TF\n", med[T_V5_256], fl / med[T_V5_256] * 1e-6);
        printf("  v5/128        %9.1f us %6.1f TF\n", med[T_V5_128], fl / med[T_V5_128] * 1e-6);
    }
    for (int i = 0; i < NV6T; i++) {
        char name[32];
        snprintf(name, sizeof name, "v6/%d/s%d%s", g_v6t[i][0], g_v6t[i][1], g_v6t[i][2] ? "/bulk" : "");
        if (!ablate)
            printf("  %-16s %9.1f us %6.1f TF | main only %9.1f us %6.1f TF\n", name, med[T_V6 + i],
                   fl / med[T_V6 + i] * 1e-6, med[T_MAIN + i], fl / med[T_MAIN + i] * 1e-6);
        else
            printf("  %-16s main only %9.1f us %6.1f TF\n", name, med[T_MAIN + i], fl / med[T_MAIN + i] * 1e-6);
    }
    if (!ablate) {
        const double bytes = (double)fp4_sm90_prefill5_codes_size(N, K) +
                             (double)fp4_sm90_prefill5_scales_size(N, K) + (double)p.ws_bytes;
        printf("  prepass       %9.1f us (%.1f MB moved, %.0f GB/s)\n", med[T_PRE], bytes * 1e-6,
               bytes / med[T_PRE] * 1e-3);
        int best5 = med[T_V5_256] < med[T_V5_128] ? T_V5_256 : T_V5_128, best6 = T_V6;
        for (int i = 0; i < NV6T; i++)
            if (med[T_V6 + i] < med[best6]) best6 = T_V6 + i;
        const int auto6 = fp4_sm90_prefill8_bn(M, N, K, g_sms), auto5 = fp4_sm90_prefill5_bn(M, N, K, g_sms);
        printf("  cublas-bf16   %9.1f us %6.1f TF\n", med[T_CUBLAS], fl / med[T_CUBLAS] * 1e-6);
        printf("SUMMARY6 %5lldx%5lldx%5lld v5best %6.1f TF | v6best %6.1f TF (%d/s%d/bulk%d) | v6 main %6.1f TF | "
               "prepass %6.1f us | cublas %6.1f TF | v6best/cublas %.0f%% | v5best/cublas %.0f%% | auto v5 %d v6 %d\n",
               (long long)M, (long long)N, (long long)K, fl / med[best5] * 1e-6, fl / med[best6] * 1e-6,
               g_v6t[best6 - T_V6][0], g_v6t[best6 - T_V6][1], g_v6t[best6 - T_V6][2],
               fl / med[best6 - T_V6 + T_MAIN] * 1e-6,
               med[T_PRE], fl / med[T_CUBLAS] * 1e-6, 100.0 * med[T_CUBLAS] / med[best6],
               100.0 * med[T_CUBLAS] / med[best5], auto5, auto6);
    }
    fflush(stdout);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    if (cb.A) cudaFree(cb.A), cudaFree(cb.B), cudaFree(cb.D);
    release(&p);
    fp4_matrix_free(&a), fp4_matrix_free(&b);
}
#endif /* P6_HARNESS */

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "all";
    int dev = 0;
    CK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    g_sms = prop.multiProcessorCount;
    printf("device %s sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, g_sms);
    FK(fp4_sm90_prefill5_init(&er_));
    FK(fp4_sm90_prefill_init(&er_));
#ifdef P6_HARNESS
    FK(fp4_sm90_prefill8_init(&er_));
    if (!strcmp(mode, "small6")) { /* for compute-sanitizer */
        check6_shape(129, 200, 160, 1);
        check6_shape(1, 8, 16, 1);
        check6_shape(130, 260, 48, 0);
        printf(g_fail ? "SMALL6 FAILED %d of %d\n" : "SMALL6 ALL PASS (%d checks)\n", g_fail ? g_fail : g_checks,
               g_checks);
        return g_fail ? 1 : 0;
    }
    if (!strcmp(mode, "check6")) {
        /* every tail combination: M = 1, 3, 129, 130; N = 1, 8, 200, 260; K = 16, 48, 2880 */
        const int64_t ms[] = {1, 3, 129, 130}, ns[] = {1, 8, 200, 260}, ks[] = {16, 48, 2880};
        int kind = 0;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 3; l++) check6_shape(ms[i], ns[j], ks[l], (kind++) & 1);
        /* larger ones: several m and n tiles, K not a multiple of 64, odd K / 2 */
        const int64_t more[][3] = {{1000, 2048, 6144}, {513, 384, 2880}, {300, 520, 48}, {256, 512, 1040},
                                   {77, 1, 80},        {257, 1000, 208}};
        for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
            for (int k2 = 0; k2 < 2; k2++) check6_shape(more[i][0], more[i][1], more[i][2], k2);
        check6_ws_args();
        check6_graph(1000, 2048, 6144);
        printf(g_fail ? "CHECK6 FAILED %d of %d checks (v6 configs differing from v5 bitwise: %d)\n"
                      : "CHECK6 ALL PASS (%d checks, %d failed; v6 configs differing from v5 bitwise: %d)\n",
               g_fail ? g_fail : g_checks, g_fail ? g_checks : 0, g_bitdiff_shapes);
        return g_fail ? 1 : 0;
    }
    if (!strcmp(mode, "time6") || !strcmp(mode, "ablate6")) {
        const int ablate = !strcmp(mode, "ablate6") ? (argc > 2 ? atoi(argv[2]) : 1) : 0;
        cublasHandle_t h = NULL;
#ifndef P5_NO_CUBLAS
        if (!ablate && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) exit(2);
#endif
        const int64_t shapes[][3] = {{1024, 2048, 6144}, {4096, 2048, 6144}, {8192, 2048, 6144},
                                     {8192, 8192, 8192}};
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            if (ablate && (i == 0 || i == 2)) continue; /* ablations: 4096x2048x6144 and 8192^3 */
            time6_shape(h, shapes[i][0], shapes[i][1], shapes[i][2], ablate ? 7 : 15, ablate);
        }
#ifndef P5_NO_CUBLAS
        if (h) cublasDestroy(h);
#endif
        if (!ablate) printf(g_fail ? "TIME6 BITCHECK FAILED %d\n" : "TIME6 BITCHECK ALL PASS (%d)\n",
                            g_fail ? g_fail : g_checks);
        return g_fail ? 1 : 0;
    }
    if (!strcmp(mode, "one6")) { /* for ncu: v6 (prepass + main, default config) and v5 once each */
        fp4_matrix a, b;
        make_matrix(&a, 4096, 6144, 1);
        make_matrix(&b, 2048, 6144, 1);
        dev_problem p;
        upload(&p, &a, &b, 0);
        launch6(&p, 0, 0, 0, 3, 0); /* cp.async */
        launch6(&p, 256, 6, 1, 2, 0); /* bulk copies, main kernel */
        launch(&p, 5, 256);
        CK(cudaDeviceSynchronize());
        release(&p);
        fp4_matrix_free(&a), fp4_matrix_free(&b);
        return 0;
    }
#endif

    if (!strcmp(mode, "small")) { /* for compute-sanitizer */
        check_shape(129, 200, 160, 1, 0);
        check_shape(1, 8, 16, 1, 0);
        check_shape(130, 260, 48, 0, 0);
        printf(g_fail ? "SMALL FAILED %d\n" : "SMALL ALL PASS\n", g_fail);
        return g_fail ? 1 : 0;
    }
    if (!strcmp(mode, "check") || !strcmp(mode, "all")) {
        const int64_t shapes[][3] = {{129, 200, 2880}, {256, 256, 64}, {1, 8, 16},   {1000, 2048, 6144},
                                     {128, 256, 128},  {300, 520, 48}, {77, 1, 80},  {513, 384, 2880},
                                     {64, 136, 4096},  {200, 72, 16},  {256, 512, 1040}};
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int kind = 0; kind < 2; kind++)
                check_shape(shapes[i][0], shapes[i][1], shapes[i][2], kind, kind == 0 && i < 4);
        /* the shapes of tests/gpu_fp4_sm90.c */
        const int64_t tshapes[][3] = {{1, 2048, 6144}, {3, 200, 2880},  {16, 2048, 6144}, {17, 768, 48},
                                      {64, 768, 6144}, {129, 8, 2880},  {256, 200, 16},   {16, 1, 16},
                                      {64, 2048, 48},  {1, 8, 6144},    {256, 768, 2880}, {3, 1, 48}};
        for (size_t i = 0; i < sizeof tshapes / sizeof tshapes[0]; i++)
            check_shape(tshapes[i][0], tshapes[i][1], tshapes[i][2], (int)(i & 1), 0);
        printf(g_fail ? "CHECK FAILED %d\n" : "CHECK ALL PASS\n", g_fail);
    }
    if (!strcmp(mode, "time") || !strcmp(mode, "all")) {
        cublasHandle_t h = NULL;
#ifndef P5_NO_CUBLAS
        if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) exit(2);
#endif
        const int64_t shapes[][3] = {{1024, 2048, 6144}, {4096, 2048, 6144}, {8192, 2048, 6144},
                                     {4096, 4096, 4096}, {8192, 8192, 8192}};
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            time_shape(h, shapes[i][0], shapes[i][1], shapes[i][2], 20);
#ifndef P5_NO_CUBLAS
        cublasDestroy(h);
#endif
    }
    if (!strcmp(mode, "one")) { /* one v5 launch per tile width at 4096x2048x6144, for ncu */
        fp4_matrix a, b;
        make_matrix(&a, 4096, 6144, 1);
        make_matrix(&b, 2048, 6144, 1);
        dev_problem p;
        upload(&p, &a, &b, 0);
        launch(&p, 5, 256);
        launch(&p, 5, 128);
        CK(cudaDeviceSynchronize());
        release(&p);
        fp4_matrix_free(&a), fp4_matrix_free(&b);
    }
    if (!strcmp(mode, "ablate")) { /* v5 timings only (for the P5_DEV_ABLATE builds) */
        const int64_t shapes[][3] = {{4096, 2048, 6144}, {8192, 8192, 8192}};
        for (int i = 0; i < 2; i++) {
            fp4_matrix a, b;
            make_matrix(&a, shapes[i][0], shapes[i][2], 1);
            make_matrix(&b, shapes[i][1], shapes[i][2], 1);
            dev_problem p;
            upload(&p, &a, &b, 0);
            const double fl = 2.0 * shapes[i][0] * shapes[i][1] * shapes[i][2];
            const double t256 = bench(&p, 5, 256, 20), t128 = bench(&p, 5, 128, 20);
            const double t1282 = bench(&p, 5, -128, 20);
            printf("ABLATE %lldx%lldx%lld v5/256 %.1f us %.1f TF | v5/128 %.1f us %.1f TF | v5/128x2 %.1f TF\n",
                   (long long)shapes[i][0], (long long)shapes[i][1], (long long)shapes[i][2],
                   t256 * 1e3, fl / t256 * 1e-9, t128 * 1e3, fl / t128 * 1e-9, fl / t1282 * 1e-9);
            release(&p);
            fp4_matrix_free(&a), fp4_matrix_free(&b);
        }
    }
    return g_fail ? 1 : 0;
}
