/* Development harness for fp4-sm90 v5-prefill (src/kernels/fp4_sm90_prefill5.cu):
 * exactness against the CPU reference on tail shapes, v5 vs v2 on large ones,
 * and timings of v5 (both tile widths), v2 and cuBLAS bf16 with CUDA events.
 * Build: see bench/prefill5-dev.sh. Usage: prefill5_harness [check|small|time|all] */
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

extern "C" {
size_t fp4_sm90_prefill_codes_size(int64_t n, int64_t k);
size_t fp4_sm90_prefill_scales_size(int64_t n, int64_t k);
size_t fp4_sm90_prefill5_codes_size(int64_t n, int64_t k);
size_t fp4_sm90_prefill5_scales_size(int64_t n, int64_t k);
void fp4_sm90_prefill5_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales);
int fp4_sm90_prefill5_fits(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_prefill5_init(fp4_err *err);
fp4_status fp4_sm90_prefill5_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err);
int fp4_sm90_prefill5_bn(int64_t m, int64_t n, int64_t k, int num_sms);
fp4_status fp4_sm90_prefill5_launch_bn(const fp4_sm90_gemm_args *a, int bn, cudaStream_t stream,
                                       fp4_err *err);
}

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
}

static void release(dev_problem *p)
{
    cudaFree(p->a_codes), cudaFree(p->a_sf), cudaFree(p->b5_codes), cudaFree(p->b5_sf);
    if (p->b2_codes) cudaFree(p->b2_codes), cudaFree(p->b2_sf);
    cudaFree(p->d);
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
