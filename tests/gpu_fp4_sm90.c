/* The fp4-sm90 backend and the GPU quantizer against the CPU specification.
 *
 * 1. GPU quantizer (kernels/fp4_quantize.h) bit-identical (memcmp) to
 *    fp4_quantize_bf16 + fp4_swizzle_scales: codes, swizzled scales with
 *    zeroed padding, global scale; given and computed encode scales; rows not
 *    a multiple of 128, K/16 not a multiple of 4; a matrix of exact E2M1 ties.
 * 2. GEMM through the backend interface, each kernel variant forced (v3-decode
 *    also with forced splits and each block shape), against
 *    fp4_gemm_reference on gaussian data quantized by fp4_quantize_f32: output
 *    poisoned first, no NaN left, max|D-R|/max|R| <= 1e-2, ||D-R||/||R|| <= 5e-3,
 *    every copy, and a second run of a copy (the decode workspace must come
 *    back zeroed), also replayed from a CUDA graph.
 * 3. Misaligned operands rejected with FP4_ERR_UNSUPPORTED.
 * Exits 77 (skipped) without an sm_90 GPU. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fp4/backend.h"
#include "fp4/format.h"
#include "kernels/fp4_quantize.h"
#include "kernels/fp4_sm90.h"

extern const fp4_backend_ops fp4_backend_fp4_sm90;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double uniform01(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}

static float gaussian(void)
{
    return (float)(sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01()));
}

/* ---- 1. the quantizer ------------------------------------------------------------ */

/* x: host bf16 [rows, cols]. */
static void check_quantizer(const uint16_t *x, int64_t rows, int64_t cols, float gs,
                            const char *what)
{
    fp4_err err;
    fp4_matrix ref;
    const size_t ncodes = (size_t)rows * (size_t)(cols / 2);
    const size_t nsf = fp4_swizzled_size(rows, cols);
    uint8_t *ref_sf = malloc(nsf), *got_codes = malloc(ncodes), *got_sf = malloc(nsf);
    void *dx = NULL, *dcodes = NULL, *dsf = NULL, *dgs = NULL, *damax = NULL;
    float got_gs = 0.0f;
    CHECK(ref_sf && got_codes && got_sf);
    CHECK(fp4_quantize_bf16(x, rows, cols, gs, &ref, &err) == FP4_OK);
    CHECK(fp4_swizzle_scales(ref.scales, rows, cols, ref_sf, &err) == FP4_OK);

    CHECK(cudaMalloc(&dx, (size_t)rows * (size_t)cols * 2) == cudaSuccess);
    CHECK(cudaMalloc(&dcodes, ncodes) == cudaSuccess);
    CHECK(cudaMalloc(&dsf, nsf) == cudaSuccess);
    CHECK(cudaMalloc(&dgs, 4) == cudaSuccess);
    CHECK(cudaMalloc(&damax, 4) == cudaSuccess);
    CHECK(cudaMemcpy(dx, x, (size_t)rows * (size_t)cols * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    /* garbage first, so that a byte the kernel forgets shows up */
    CHECK(cudaMemset(dcodes, 0xA5, ncodes) == cudaSuccess);
    CHECK(cudaMemset(dsf, 0xA5, nsf) == cudaSuccess);
    fp4_status st = fp4_gpu_quantize_bf16(dx, rows, cols, gs, dcodes, dsf, dgs, damax, 0, &err);
    CHECK_MSG(st == FP4_OK, "%s: %s", what, fp4_err_text(&err));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(cudaMemcpy(got_codes, dcodes, ncodes, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(cudaMemcpy(got_sf, dsf, nsf, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(cudaMemcpy(&got_gs, dgs, 4, cudaMemcpyDeviceToHost) == cudaSuccess);

    size_t bad_codes = 0, bad_sf = 0;
    for (size_t i = 0; i < ncodes; i++) bad_codes += got_codes[i] != ref.codes[i];
    for (size_t i = 0; i < nsf; i++) bad_sf += got_sf[i] != ref_sf[i];
    CHECK_MSG(memcmp(got_codes, ref.codes, ncodes) == 0, "%s %lldx%lld gs=%g: %zu code bytes differ",
              what, (long long)rows, (long long)cols, (double)gs, bad_codes);
    CHECK_MSG(memcmp(got_sf, ref_sf, nsf) == 0, "%s %lldx%lld gs=%g: %zu scale bytes differ", what,
              (long long)rows, (long long)cols, (double)gs, bad_sf);
    CHECK_MSG(memcmp(&got_gs, &ref.global_scale, 4) == 0, "%s: global scale %.9g vs %.9g", what,
              (double)got_gs, (double)ref.global_scale);

    cudaFree(dx);
    cudaFree(dcodes);
    cudaFree(dsf);
    cudaFree(dgs);
    cudaFree(damax);
    fp4_matrix_free(&ref);
    free(ref_sf);
    free(got_codes);
    free(got_sf);
}

static void test_quantizer(void)
{
    static const int64_t shapes[][2] = {{1, 16}, {3, 48}, {130, 80}, {129, 2880}, {256, 6144}, {17, 16}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t rows = shapes[i][0], cols = shapes[i][1];
        uint16_t *x = malloc((size_t)rows * (size_t)cols * 2);
        CHECK(x != NULL);
        if (!x) return;
        for (int64_t j = 0; j < rows * cols; j++) {
            /* gaussian with a few large and tiny blocks, so scales span E4M3 */
            float scale = (j / 16) % 7 == 0 ? 1e-3f : (j / 16) % 11 == 0 ? 50.0f : 1.0f;
            x[j] = fp4_bf16_from_float(gaussian() * scale);
        }
        check_quantizer(x, rows, cols, 0.0f, "gaussian, computed gs");
        check_quantizer(x, rows, cols, 2688.0f / 3.7f, "gaussian, given gs");
        free(x);
    }
    /* all zero: gs = 1, everything 0 */
    {
        uint16_t *x = calloc(64 * 48, 2);
        CHECK(x != NULL);
        if (x) check_quantizer(x, 64, 48, 0.0f, "zeros");
        free(x);
    }
    /* exact ties: gs = 1 and every block holds 6.0, so sf = 1 and inv = 1: the
     * e2m1 rounding sees the midpoints themselves, both signs, and -0. */
    {
        static const float v[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.5f,
                                  0.1f,  -0.25f, -0.75f, -1.25f, -2.5f, -5.0f, -0.0f, 7.0f};
        const int64_t rows = 5, cols = 64;
        uint16_t x[5 * 64];
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                float f = (c % 16 == 0) ? 6.0f : v[(c + r) % 16];
                x[r * cols + c] = fp4_bf16_from_float(f);
            }
        check_quantizer(x, rows, cols, 1.0f, "ties");
    }
}

/* ---- 2. the GEMM -------------------------------------------------------------------- */

static void compare(const float *d, const float *r, size_t n, const char *what)
{
    double maxr = 0, maxe = 0, se = 0, sr = 0;
    size_t nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(d[i])) {
            nan++;
            continue;
        }
        const double e = fabs((double)d[i] - (double)r[i]);
        maxe = e > maxe ? e : maxe;
        maxr = fabs(r[i]) > maxr ? fabs(r[i]) : maxr;
        se += e * e;
        sr += (double)r[i] * r[i];
    }
    const double rel_max = maxr > 0 ? maxe / maxr : maxe;
    const double rel_norm = sr > 0 ? sqrt(se / sr) : sqrt(se);
    CHECK_MSG(nan == 0, "%s: %zu NaN outputs (of %zu)", what, nan, n);
    CHECK_MSG(rel_max <= 1e-2, "%s: max error %.3g of max |R|", what, rel_max);
    CHECK_MSG(rel_norm <= 5e-3, "%s: normwise error %.3g", what, rel_norm);
}

/* Random problems and their exact references, kept for the shapes that
 * come back (every variant runs the same shapes: the CPU reference of the
 * larger ones costs seconds); owned by main's tester, freed at its end. */
#define PROBLEM_CACHE 32 /* more than a variant's cyclic list: round robin would thrash */
typedef struct cached_problem {
    int64_t m, n, k; /* m == 0: empty */
    fp4_matrix a, b;
    float *ref;
} cached_problem;

typedef struct gemm_tester {
    const fp4_backend_ops *ops;
    void *inst;
    cached_problem cache[PROBLEM_CACHE];
    int next; /* round-robin eviction */
} gemm_tester;

static void problem_free(cached_problem *p)
{
    if (p->m == 0) return;
    fp4_matrix_free(&p->a);
    fp4_matrix_free(&p->b);
    free(p->ref);
    p->m = 0;
}

/* the cached problem of this shape, or a new one; NULL on failure (checked) */
static const cached_problem *problem_get(gemm_tester *t, int64_t m, int64_t n, int64_t k)
{
    for (int i = 0; i < PROBLEM_CACHE; i++)
        if (t->cache[i].m == m && t->cache[i].n == n && t->cache[i].k == k) return &t->cache[i];
    cached_problem *p = &t->cache[t->next];
    t->next = (t->next + 1) % PROBLEM_CACHE;
    problem_free(p);
    fp4_err err;
    float *xa = malloc((size_t)m * (size_t)k * 4), *xb = malloc((size_t)n * (size_t)k * 4);
    p->ref = malloc((size_t)m * (size_t)n * 4);
    int ok = xa && xb && p->ref;
    CHECK(ok);
    if (ok) {
        for (int64_t i = 0; i < m * k; i++) xa[i] = gaussian();
        for (int64_t i = 0; i < n * k; i++) xb[i] = gaussian();
        ok = fp4_quantize_f32(xa, m, k, 0.0f, &p->a, &err) == FP4_OK;
        CHECK(ok);
        if (ok) {
            ok = fp4_quantize_f32(xb, n, k, 0.0f, &p->b, &err) == FP4_OK;
            CHECK(ok);
            if (!ok) fp4_matrix_free(&p->a);
        }
        if (ok) {
            ok = fp4_gemm_reference(&p->a, &p->b, p->a.global_scale * p->b.global_scale, p->ref, 0,
                                    &err) == FP4_OK;
            CHECK(ok);
            if (!ok) {
                fp4_matrix_free(&p->a);
                fp4_matrix_free(&p->b);
            }
        }
    }
    free(xa);
    free(xb);
    if (!ok) {
        free(p->ref);
        return NULL;
    }
    p->m = m, p->n = n, p->k = k;
    return p;
}

static void test_gemm(gemm_tester *t, int variant, int64_t m, int64_t n, int64_t k)
{
    const fp4_backend_ops *ops = t->ops;
    void *inst = t->inst;
    fp4_err err;
    char what[160];
    const fp4_sm90_variant *v = fp4_sm90_variant_by_id(variant);
    /* development filter: GPU_FP4_SM90_ONLY=<number> tests one variant (main says so) */
    const char *only = getenv("GPU_FP4_SM90_ONLY");
    if (only && atoi(only) != variant) return;
    snprintf(what, sizeof what, "%s (%lld, %lld, %lld)", v ? v->name : "?", (long long)m,
             (long long)n, (long long)k);
    const cached_problem *cp = problem_get(t, m, n, k);
    float *got = malloc((size_t)m * (size_t)n * 4);
    CHECK(cp && got);
    if (!cp || !got) {
        free(got);
        return;
    }
    const float *ref = cp->ref;
    fp4_gemm_problem pr;
    pr.shape.m = m;
    pr.shape.n = n;
    pr.shape.k = k;
    pr.a = &cp->a;
    pr.b = &cp->b;
    pr.alpha = cp->a.global_scale * cp->b.global_scale;

    setenv("FP4_SM90_KERNEL", v->name, 1); /* read by prepare */
    void *plan = NULL;
    const int copies = 2;
    fp4_status st = ops->prepare(inst, &pr, copies, &plan, &err);
    CHECK_MSG(st == FP4_OK, "%s: prepare: %s", what, fp4_err_text(&err));
    if (st == FP4_OK) {
        CHECK_MSG(strcmp(ops->variant(plan), v->name) == 0, "%s: plan runs %s", what,
                  ops->variant(plan));
        for (int c = 0; c < copies; c++) {
            for (int rep = 0; rep < 2; rep++) { /* the 2nd run needs a clean workspace */
                char w2[200];
                snprintf(w2, sizeof w2, "%s copy %d run %d", what, c, rep);
                CHECK(ops->poison(plan, c, NULL, &err) == FP4_OK);
                st = ops->run(plan, c, NULL, &err);
                CHECK_MSG(st == FP4_OK, "%s: run: %s", w2, fp4_err_text(&err));
                CHECK_MSG(ops->read_output(plan, c, got, &err) == FP4_OK, "%s: read: %s", w2,
                          fp4_err_text(&err));
                compare(got, ref, (size_t)m * (size_t)n, w2);
            }
        }
        /* graph capture and two replays of copy 0 */
        cudaStream_t s;
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        CHECK(cudaStreamCreate(&s) == cudaSuccess);
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
        st = ops->run(plan, 0, s, &err);
        CHECK_MSG(st == FP4_OK, "%s: run in capture: %s", what, fp4_err_text(&err));
        CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess);
        CHECK(graph && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
        for (int rep = 0; rep < 2 && exec; rep++) {
            char w2[200];
            snprintf(w2, sizeof w2, "%s graph replay %d", what, rep);
            CHECK(ops->poison(plan, 0, s, &err) == FP4_OK);
            CHECK(cudaGraphLaunch(exec, s) == cudaSuccess);
            CHECK(cudaStreamSynchronize(s) == cudaSuccess);
            CHECK(ops->read_output(plan, 0, got, &err) == FP4_OK);
            compare(got, ref, (size_t)m * (size_t)n, w2);
        }
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
        cudaStreamDestroy(s);
        ops->release(plan);
    }
    unsetenv("FP4_SM90_KERNEL");
    free(got);
}

/* ---- 3. argument checks ------------------------------------------------------------ */

static void test_rejects(void)
{
    fp4_err err;
    void *buf = NULL;
    CHECK(cudaMalloc(&buf, 1 << 20) == cudaSuccess);
    fp4_sm90_gemm_args a;
    memset(&a, 0, sizeof a);
    a.variant = FP4_SM90_V2_PREFILL;
    a.m = 16;
    a.n = 64;
    a.k = 64;
    a.a_codes = (const uint8_t *)buf + 8; /* misaligned */
    a.a_sf = (const uint8_t *)buf;
    a.b_codes = (const uint8_t *)buf;
    a.b_sf = (const uint8_t *)buf;
    a.d = (uint16_t *)buf;
    a.alpha = 1.0f;
    CHECK(fp4_sm90_check(&a, &err) == FP4_ERR_UNSUPPORTED);
    a.a_codes = (const uint8_t *)buf;
    CHECK(fp4_sm90_check(&a, &err) == FP4_OK);
    a.k = 40;
    CHECK(fp4_sm90_check(&a, &err) == FP4_ERR_SHAPE);
    a.k = 64;
    a.variant = FP4_SM90_V1_DECODE; /* no workspace */
    CHECK(fp4_sm90_check(&a, &err) == FP4_ERR_INVALID_ARG);
    cudaFree(buf);
}

/* variant forced with each of the split counts 1, 3 and 45 (FP4_SM90_SPLITK:
 * one split writes D directly, several go through the workspace, 45 is more
 * than most shapes' k-steps) on the ns shapes */
static void test_splits(gemm_tester *t, int variant,
                        const int64_t (*shapes)[3], size_t ns)
{
    static const char *splits[] = {"1", "3", "45"};
    for (int i = 0; i < 3; i++) {
        setenv("FP4_SM90_SPLITK", splits[i], 1);
        for (size_t j = 0; j < ns; j++) test_gemm(t, variant, shapes[j][0], shapes[j][1], shapes[j][2]);
    }
    unsetenv("FP4_SM90_SPLITK");
}

/* every shape of the list with variant forced */
static void test_shapes(gemm_tester *t, int variant,
                        const int64_t (*shapes)[3], size_t ns)
{
    for (size_t j = 0; j < ns; j++) test_gemm(t, variant, shapes[j][0], shapes[j][1], shapes[j][2]);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* a killed run still shows how far it got */
    int count = 0, major = 0, minor = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("gpu_fp4_sm90: skipped: no CUDA device\n");
        return 77;
    }
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    if (major != 9 || minor != 0) {
        printf("gpu_fp4_sm90: skipped: needs an sm_90 GPU, this one is sm_%d%d\n", major, minor);
        return 77;
    }
    const fp4_backend_ops *ops = &fp4_backend_fp4_sm90;
    fp4_err err;
    void *inst = NULL;
    fp4_status st = ops->open(&inst, &err);
    CHECK_MSG(st == FP4_OK, "open: %s", fp4_err_text(&err));
    if (st != FP4_OK) return check_finish("gpu_fp4_sm90");
    gemm_tester tester;
    memset(&tester, 0, sizeof tester);
    tester.ops = ops;
    tester.inst = inst;

    if (getenv("GPU_FP4_SM90_ONLY"))
        printf("gpu_fp4_sm90: only variant %s is tested (GPU_FP4_SM90_ONLY)\n", getenv("GPU_FP4_SM90_ONLY"));
    test_quantizer();
    test_rejects();
    int fit[FP4_SM90_MAX_CLUSTER + 1], sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
    CHECK(fp4_sm90_decode10_cluster_fit(fit, sms, &err) == FP4_OK);
    printf("gpu_fp4_sm90: v10 clusters of s resident at once, s = 1..%d:", FP4_SM90_MAX_CLUSTER);
    for (int s = 1; s <= FP4_SM90_MAX_CLUSTER; s++) printf(" %d", fit[s]);
    printf("\n");
    CHECK(fit[1] > 0 && fit[2] > 0);

    /* Every M in {1,3,16,17,64,129,256}, N in {1,8,200,768,2048}, K in
     * {16,48,2880,6144} appears at least once per variant. */
    static const int64_t shapes[][3] = {
        {1, 2048, 6144}, {3, 200, 2880}, {16, 2048, 6144}, {17, 768, 48}, {64, 768, 6144},
        {129, 8, 2880},  {256, 200, 16},  {16, 1, 16},      {64, 2048, 48}, {1, 8, 6144},
        {256, 768, 2880}, {3, 1, 48},
    };
    const int variants[] = {FP4_SM90_V1_DECODE, FP4_SM90_V2_PREFILL, FP4_SM90_V3_DECODE,
                            FP4_SM90_V4_DECODE, FP4_SM90_V5_PREFILL, FP4_SM90_V6_DECODE,
                            FP4_SM90_V7_DECODE, FP4_SM90_V8_PREFILL, FP4_SM90_V9_MID,
                            FP4_SM90_V10_DECODE, FP4_SM90_V11_MID, FP4_SM90_V12_PREFILL,
                            FP4_SM90_V13_MID, FP4_SM90_V14_PREFILL, FP4_SM90_V15_MID,
                            FP4_SM90_V16_PREFILL};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            test_gemm(&tester, variants[v], shapes[i][0], shapes[i][1], shapes[i][2]);
    /* decode with forced split counts, and a multi-chunk M (3 token chunks) */
    setenv("FP4_SM90_SPLITK", "1", 1);
    test_gemm(&tester, FP4_SM90_V1_DECODE, 16, 768, 2880);
    setenv("FP4_SM90_SPLITK", "45", 1);
    test_gemm(&tester, FP4_SM90_V1_DECODE, 16, 768, 2880);
    unsetenv("FP4_SM90_SPLITK");
    test_gemm(&tester, FP4_SM90_V1_DECODE, 150, 2048, 6144);
    /* v3-decode: forced splits (1, 3, the cluster maximum 8, and more than 8,
     * which is clamped), each block shape (FP4_SM90_V3_RP), the target shapes,
     * several token chunks, N not a multiple of the row block */
    static const char *v3_splits[] = {"1", "3", "8", "45"};
    for (int i = 0; i < 4; i++) {
        setenv("FP4_SM90_SPLITK", v3_splits[i], 1);
        test_gemm(&tester, FP4_SM90_V3_DECODE, 16, 768, 2880);
    }
    unsetenv("FP4_SM90_SPLITK");
    static const char *v3_rps[] = {"1", "2", "4"};
    for (int i = 0; i < 3; i++) {
        setenv("FP4_SM90_V3_RP", v3_rps[i], 1);
        test_gemm(&tester, FP4_SM90_V3_DECODE, 17, 200, 2880);
        test_gemm(&tester, FP4_SM90_V3_DECODE, 64, 2048, 6144);
        test_gemm(&tester, FP4_SM90_V3_DECODE, 129, 8, 48);
    }
    unsetenv("FP4_SM90_V3_RP");
    static const int64_t v3_shapes[][3] = {
        {64, 2048, 6144}, {256, 2048, 6144}, {16, 768, 6144}, {150, 2048, 6144}, {16, 8192, 8192},
    };
    test_shapes(&tester, FP4_SM90_V3_DECODE, v3_shapes, sizeof v3_shapes / sizeof v3_shapes[0]);

    /* v4-decode: forced splits (1 writes D directly, 3 and 45 go through the
     * workspace and the arrival counters), every (tiles, token tiles) shape,
     * several token chunks, the target shapes */
    static const int64_t v4_split_shapes[][3] = {{16, 768, 2880}, {5, 200, 6144}};
    test_splits(&tester, FP4_SM90_V4_DECODE, v4_split_shapes, 2);
    static const int64_t v4_shapes[][3] = {
        {8, 2048, 6144},  {32, 200, 2880},  {150, 2048, 6144}, {64, 2048, 6144},
        {16, 8192, 8192}, {16, 28672, 4096}, {2, 5, 16},
    };
    test_shapes(&tester, FP4_SM90_V4_DECODE, v4_shapes, sizeof v4_shapes / sizeof v4_shapes[0]);

    /* v6-decode: forced splits (1, 3, 45: several staging chunks a block at
     * 1 and 3, clamped to K's k-steps at 45), every token-tile count (M up to
     * 8, 16, 32, 64 tokens a chunk), several chunks, a last row block past the
     * 64-row padding (N = 200, 2000), the target shapes */
    static const int64_t v6_split_shapes[][3] = {{16, 768, 2880}, {64, 200, 6144}, {5, 2000, 2880}};
    test_splits(&tester, FP4_SM90_V6_DECODE, v6_split_shapes, 3);
    test_shapes(&tester, FP4_SM90_V6_DECODE, v4_shapes, sizeof v4_shapes / sizeof v4_shapes[0]);
    test_gemm(&tester, FP4_SM90_V6_DECODE, 31, 2000, 48);
    test_gemm(&tester, FP4_SM90_V6_DECODE, 256, 768, 6144);
    /* v7-decode: K of 1..8 k-steps and with a partial last stage (K = 2880:
     * 45 k-steps; 48: one k-step of three k-blocks), more stages than the
     * ring holds (6144: 12 stages, 8192: 16), every token-tile count and
     * several token chunks (150, 256), the target shapes */
    test_shapes(&tester, FP4_SM90_V7_DECODE, v4_shapes, sizeof v4_shapes / sizeof v4_shapes[0]);
    test_gemm(&tester, FP4_SM90_V7_DECODE, 31, 2000, 48);
    test_gemm(&tester, FP4_SM90_V7_DECODE, 256, 768, 6144);
    test_gemm(&tester, FP4_SM90_V7_DECODE, 9, 200, 512);
    test_gemm(&tester, FP4_SM90_V7_DECODE, 1, 64, 28672);
    /* v9-mid: every token tile width (M <= 64, <= 128, more: 256) with one and
     * several token tiles, forced splits (1 writes D from the tile, 3 and 45
     * (clamped to the k-steps) go through the fp32 sums and the counters),
     * K with a partial last k-step (48, 2880), weight rows past the 128-row
     * tile (200, 2000), N not a multiple of 4 (D stored element by element),
     * the target shapes (8 and 2 splits) */
    static const int64_t v9_split_shapes[][3] = {{16, 768, 2880}, {100, 200, 6144}, {300, 2000, 48}};
    test_splits(&tester, FP4_SM90_V9_MID, v9_split_shapes, 3);
    static const int64_t v9_shapes[][3] = {
        {65, 2048, 6144}, {128, 770, 2880}, {129, 768, 6144}, {256, 2048, 6144}, {600, 2048, 2880},
        {1024, 2048, 6144}, {16, 8192, 8192}, {7, 203, 16}, {64, 28672, 4096},
    };
    test_shapes(&tester, FP4_SM90_V9_MID, v9_shapes, sizeof v9_shapes / sizeof v9_shapes[0]);
    /* v11-mid: v9's shapes and forced splits (1: D from the tile, no
     * cooperative launch; 3 and 45, clamped to the k-steps and to the CTAs
     * that co-reside, go through the slices, the barrier and the counters'
     * re-zeroing); test_gemm runs every shape several times (graph replay
     * included), so a counter left non-zero fails the next call */
    test_splits(&tester, FP4_SM90_V11_MID, v9_split_shapes, 3);
    test_shapes(&tester, FP4_SM90_V11_MID, v9_shapes, sizeof v9_shapes / sizeof v9_shapes[0]);
    /* v13-mid: the same as v11 (its host side), and every token tile width
     * forced on a 6144- and a 640-deep shape (10 k-steps: fewer than the
     * 128- and 64-token rings hold, more than the 256-token ring) */
    test_splits(&tester, FP4_SM90_V13_MID, v9_split_shapes, 3);
    test_shapes(&tester, FP4_SM90_V13_MID, v9_shapes, sizeof v9_shapes / sizeof v9_shapes[0]);
    static const char *v13_bns[] = {"64", "128", "256"};
    for (int i = 0; i < 3; i++) {
        setenv("FP4_SM90_V11_BN", v13_bns[i], 1);
        test_gemm(&tester, FP4_SM90_V13_MID, 200, 2000, 6144);
        test_gemm(&tester, FP4_SM90_V13_MID, 77, 300, 640);
    }
    unsetenv("FP4_SM90_V11_BN");
    /* v12-prefill: each tile width and ring depth (FP4_SM90_V12_BN, _ST) on
     * K = 48 (one k-step of three k-blocks, rows of 24 bytes: 8-byte
     * cp.asyncs), more k-steps than the ring holds (640, 2880, 6144),
     * several m and n tiles with partial last ones (300, 1000, 2000), N odd;
     * bit-identical to v8 is not asserted here (the reference is) */
    static const int64_t v12_shapes[][3] = {
        {300, 2000, 48}, {1000, 770, 2880}, {2048, 2048, 6144}, {129, 1001, 6144}, {4096, 256, 640},
    };
    static const char *v12_cfgs[][2] = {{"256", "6"}, {"256", "5"}, {"128", "6"}, {"128", "8"}};
    for (int i = 0; i < 4; i++) {
        setenv("FP4_SM90_V12_BN", v12_cfgs[i][0], 1);
        setenv("FP4_SM90_V12_ST", v12_cfgs[i][1], 1);
        test_shapes(&tester, FP4_SM90_V12_PREFILL, v12_shapes, sizeof v12_shapes / sizeof v12_shapes[0]);
    }
    unsetenv("FP4_SM90_V12_BN");
    unsetenv("FP4_SM90_V12_ST");
    /* v14-prefill: v12's shapes at each tile width (K = 48: 8-byte staging
     * copies; 640..6144: more k-steps than the 4- and 6-deep rings and the
     * staging ring hold; partial m and n tiles; N odd) */
    static const char *v14_bns[] = {"256", "128"};
    for (int i = 0; i < 2; i++) {
        setenv("FP4_SM90_V14_BN", v14_bns[i], 1);
        test_shapes(&tester, FP4_SM90_V14_PREFILL, v12_shapes, sizeof v12_shapes / sizeof v12_shapes[0]);
    }
    unsetenv("FP4_SM90_V14_BN");
    /* v16-prefill: the same shapes at each tile width (its A prepass: rows
     * past M and bytes past K zero-filled, K = 48's 24-byte rows; more
     * k-steps than the 4- and 7-deep rings) */
    for (int i = 0; i < 2; i++) {
        setenv("FP4_SM90_V16_BN", v14_bns[i], 1);
        test_shapes(&tester, FP4_SM90_V16_PREFILL, v12_shapes, sizeof v12_shapes / sizeof v12_shapes[0]);
    }
    unsetenv("FP4_SM90_V16_BN");
    /* v16's persistent grid forced small, at each tile width (4- and 7-deep
     * rings): a CTA walks many tiles with the ring's stage count running on
     * (K = 48: one k-step a tile, so a slot's phases turn over within and
     * across tiles), and 5 CTAs for 24-64 tiles */
    static const char *v16_ctas[] = {"1", "5"};
    for (int i = 0; i < 4; i++) {
        setenv("FP4_SM90_V16_CTAS", v16_ctas[i & 1], 1);
        setenv("FP4_SM90_V16_BN", v14_bns[i >> 1], 1);
        test_shapes(&tester, FP4_SM90_V16_PREFILL, v12_shapes, 2);
        test_gemm(&tester, FP4_SM90_V16_PREFILL, 4096, 256, 640);
    }
    unsetenv("FP4_SM90_V16_CTAS");
    unsetenv("FP4_SM90_V16_BN");
    /* v16's tile order forced: groups of 3 row tiles (1000 and 2048 rows: a
     * last group of 2 and of 1; 4096: 10 groups and 2 rows) with the
     * automatic and a 5-CTA grid, and the plain order (group 0) */
    static const char *v16_groups[] = {"3", "3", "0"};
    for (int i = 0; i < 3; i++) {
        setenv("FP4_SM90_V16_GROUP", v16_groups[i], 1);
        if (i == 1) setenv("FP4_SM90_V16_CTAS", "5", 1);
        setenv("FP4_SM90_V16_BN", v14_bns[i & 1], 1);
        test_shapes(&tester, FP4_SM90_V16_PREFILL, v12_shapes, sizeof v12_shapes / sizeof v12_shapes[0]);
        unsetenv("FP4_SM90_V16_CTAS");
    }
    unsetenv("FP4_SM90_V16_GROUP");
    unsetenv("FP4_SM90_V16_BN");
    /* v15-mid: as v13 (v11's host side; splits 1 / 3 / 45, v9's shapes,
     * every token tile width on a 6144- and a 640-deep shape) */
    test_splits(&tester, FP4_SM90_V15_MID, v9_split_shapes, 3);
    test_shapes(&tester, FP4_SM90_V15_MID, v9_shapes, sizeof v9_shapes / sizeof v9_shapes[0]);
    for (int i = 0; i < 3; i++) {
        setenv("FP4_SM90_V11_BN", v13_bns[i], 1);
        test_gemm(&tester, FP4_SM90_V15_MID, 200, 2000, 6144);
        test_gemm(&tester, FP4_SM90_V15_MID, 77, 300, 640);
    }
    unsetenv("FP4_SM90_V11_BN");
    /* v10-decode, with each row tile count a warp (FP4_SM90_V10_RT 2, 4):
     * forced splits (1: no cluster, D from the block; 3: clusters of 3; 45:
     * clamped to the cluster maximum 8 or to K's k-steps), every token-tile
     * count, several token chunks, persistent blocks over more tiles than SMs
     * (150 x 2048: 160 tiles at RT 4; 16 x 28672: 448 / 896; with 3 splits
     * 44 blocks a split run 4 tiles each), warps with no k-step (K = 48),
     * a partial last slot (2880: 45 k-steps), rows past the padding (200,
     * 2000), N % 4 != 0, the target shapes */
    static const char *v10_rts[] = {"2", "4"};
    static const int64_t v10_split_shapes[][3] = {
        {16, 768, 2880}, {5, 200, 6144}, {150, 2048, 6144}, {64, 2000, 48}};
    static const int64_t v10_shapes[][3] = {
        {8, 2048, 6144},  {32, 203, 2880},  {150, 2048, 6144}, {64, 2048, 6144},
        {16, 8192, 8192}, {16, 28672, 4096}, {2, 5, 16},       {64, 768, 6144},
    };
    for (int i = 0; i < 2; i++) {
        setenv("FP4_SM90_V10_RT", v10_rts[i], 1);
        test_splits(&tester, FP4_SM90_V10_DECODE, v10_split_shapes, 4);
        test_shapes(&tester, FP4_SM90_V10_DECODE, v10_shapes, sizeof v10_shapes / sizeof v10_shapes[0]);
    }
    unsetenv("FP4_SM90_V10_RT");

    for (int i = 0; i < PROBLEM_CACHE; i++) problem_free(&tester.cache[i]);
    ops->close(inst);
    return check_finish("gpu_fp4_sm90");
}
