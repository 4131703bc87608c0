/* The fp4-sm90 kernels and the GPU quantizer against the CPU specification.
 *
 * 1. GPU quantizer (kernels/fp4_quantize.h) bit-identical (memcmp) to
 *    fp4_quantize_bf16 + fp4_swizzle_scales: codes, swizzled scales with
 *    zeroed padding, global scale; given and computed encode scales; rows not
 *    a multiple of 128, K/16 not a multiple of 4; a matrix of exact E2M1 ties.
 * 2. GEMM through the backend interface, each of the four kernels forced
 *    (FP4_SM90_KERNEL) and the rule's own choice, against fp4_gemm_reference
 *    on gaussian data quantized by fp4_quantize_f32: output poisoned first, no
 *    NaN left, max|D-R|/max|R| <= 1e-2, ||D-R||/||R|| <= 5e-3, every copy, and
 *    a second run of a copy (workspaces must come back reusable), also
 *    replayed from a CUDA graph.
 * 3. Every configuration the rule can pick, through the kernel API with its
 *    overrides (fp4_sm90_gemm_args: K splits, tile widths, prefill-wide's
 *    persistent grid and tile order), run twice each.
 * 4. Misaligned operands rejected with FP4_ERR_UNSUPPORTED.
 * Exits 77 (skipped) without an sm_90 GPU. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_rng.h"
#include "fp4/backend.h"
#include "fp4/format.h"
#include "kernels/fp4_quantize.h"
#include "kernels/sm90/fp4_sm90.h"

extern const fp4_backend_ops fp4_backend_fp4_sm90;


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

static void test_quantizer(test_rng *rng)
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
            x[j] = fp4_bf16_from_float((float)test_rng_gauss(rng) * scale);
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
    int num_sms;
    test_rng rng;
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
        for (int64_t i = 0; i < m * k; i++) xa[i] = (float)test_rng_gauss(&t->rng);
        for (int64_t i = 0; i < n * k; i++) xb[i] = (float)test_rng_gauss(&t->rng);
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

/* the backend with FP4_SM90_KERNEL = kernel (FP4_SM90_AUTO: the rule's choice) */
static void test_gemm(gemm_tester *t, int kernel, int64_t m, int64_t n, int64_t k)
{
    const fp4_backend_ops *ops = t->ops;
    void *inst = t->inst;
    fp4_err err;
    char what[160];
    const fp4_sm90_kernel_info *v = fp4_sm90_kernel_by_id(kernel);
    const int want = v ? kernel : fp4_sm90_choose(m, n, k, t->num_sms);
    const char *want_name = fp4_sm90_kernel_by_id(want) ? fp4_sm90_kernel_by_id(want)->name : "?";
    snprintf(what, sizeof what, "%s%s (%lld, %lld, %lld)", v ? "" : "auto: ", want_name,
             (long long)m, (long long)n, (long long)k);
    const cached_problem *cp = problem_get(t, m, n, k);
    float *got = malloc((size_t)m * (size_t)n * 4);
    CHECK(cp && got);
    if (!cp || !got) {
        free(got);
        return;
    }
    const float *ref = cp->ref;
    fp4_gemm_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.shape.m = m;
    pr.shape.n = n;
    pr.shape.k = k;
    pr.a = &cp->a;
    pr.b = &cp->b;
    pr.alpha = cp->a.global_scale * cp->b.global_scale;

    setenv("FP4_SM90_KERNEL", v ? v->name : "auto", 1); /* read by prepare */
    void *plan = NULL;
    const int copies = 2;
    fp4_status st = ops->prepare(inst, &pr, copies, &plan, &err);
    CHECK_MSG(st == FP4_OK, "%s: prepare: %s", what, fp4_err_text(&err));
    if (st == FP4_OK) {
        CHECK_MSG(strcmp(ops->variant(plan), want_name) == 0, "%s: plan runs %s", what,
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

/* ---- 3. every configuration, through the kernel API ----------------------------- */

/* n bf16 values at d -> host floats; 1 on success */
static int read_bf16(const void *d, size_t n, float *out)
{
    uint16_t *h = malloc(n * 2);
    int ok = h && cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess;
    for (size_t i = 0; ok && i < n; i++) out[i] = fp4_bf16_to_float(h[i]);
    free(h);
    return ok;
}

/* kernel with the overrides (splits, tile_n, ctas, group) on (m, n, k): pack B
 * and swizzle A's scales on the host, upload, run twice on a poisoned D */
static void test_direct(gemm_tester *t, int kernel, int64_t m, int64_t n, int64_t k, int splits,
                        int tile_n, int ctas, int group)
{
    fp4_err err;
    char what[200];
    snprintf(what, sizeof what, "%s (%lld, %lld, %lld) splits %d tile_n %d ctas %d group %d",
             fp4_sm90_kernel_by_id(kernel)->name, (long long)m, (long long)n, (long long)k, splits,
             tile_n, ctas, group);
    const cached_problem *cp = problem_get(t, m, n, k);
    const size_t a_codes = (size_t)m * (size_t)(k / 2), a_sf = fp4_swizzled_size(m, k);
    const size_t b_codes = fp4_sm90_packed_b_codes_size(kernel, n, k);
    const size_t b_sf = fp4_sm90_packed_b_scales_size(kernel, n, k);
    /* the overrides may need more than the automatic configuration's
     * workspace; the launch checks what it needs against what it is given */
    const size_t ws = fp4_sm90_workspace_size(kernel, m, n, k) + ((size_t)64 << 20);
    uint8_t *h_asf = malloc(a_sf), *h_bq = malloc(b_codes), *h_bs = malloc(b_sf);
    float *got = malloc((size_t)m * (size_t)n * 4);
    void *d_aq = NULL, *d_asf = NULL, *d_bq = NULL, *d_bs = NULL, *d_d = NULL, *d_ws = NULL;
    CHECK(cp && h_asf && h_bq && h_bs && got);
    if (!cp || !h_asf || !h_bq || !h_bs || !got) goto out;
    CHECK(fp4_swizzle_scales(cp->a.scales, m, k, h_asf, &err) == FP4_OK);
    CHECK(fp4_sm90_pack_b(kernel, &cp->b, h_bq, h_bs, &err) == FP4_OK);
    CHECK(cudaMalloc(&d_aq, a_codes) == cudaSuccess && cudaMalloc(&d_asf, a_sf) == cudaSuccess &&
          cudaMalloc(&d_bq, b_codes) == cudaSuccess && cudaMalloc(&d_bs, b_sf) == cudaSuccess &&
          cudaMalloc(&d_d, (size_t)m * (size_t)n * 2) == cudaSuccess &&
          cudaMalloc(&d_ws, ws) == cudaSuccess);
    if (!d_aq || !d_asf || !d_bq || !d_bs || !d_d || !d_ws) goto out;
    CHECK(cudaMemcpy(d_aq, cp->a.codes, a_codes, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemcpy(d_asf, h_asf, a_sf, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemcpy(d_bq, h_bq, b_codes, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemcpy(d_bs, h_bs, b_sf, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemset(d_ws, 0, ws) == cudaSuccess);
    fp4_sm90_gemm_args a;
    memset(&a, 0, sizeof a);
    a.kernel = kernel;
    a.m = m, a.n = n, a.k = k;
    a.a_codes = d_aq, a.a_sf = d_asf, a.b_codes = d_bq, a.b_sf = d_bs;
    a.alpha = cp->a.global_scale * cp->b.global_scale;
    a.d = d_d;
    a.workspace = d_ws, a.workspace_bytes = ws;
    a.num_sms = t->num_sms;
    a.splits = splits, a.tile_n = tile_n, a.ctas = ctas, a.group = group;
    for (int rep = 0; rep < 2; rep++) { /* the 2nd run needs a reusable workspace */
        char w2[240];
        snprintf(w2, sizeof w2, "%s run %d", what, rep);
        CHECK(cudaMemset(d_d, 0xFF, (size_t)m * (size_t)n * 2) == cudaSuccess); /* NaN */
        const fp4_status st = fp4_sm90_gemm(&a, 0, &err);
        CHECK_MSG(st == FP4_OK, "%s: %s", w2, fp4_err_text(&err));
        CHECK_MSG(cudaDeviceSynchronize() == cudaSuccess, "%s: %s", w2,
                  cudaGetErrorString(cudaGetLastError()));
        CHECK(read_bf16(d_d, (size_t)m * (size_t)n, got));
        compare(got, cp->ref, (size_t)m * (size_t)n, w2);
    }
out:
    cudaFree(d_aq);
    cudaFree(d_asf);
    cudaFree(d_bq);
    cudaFree(d_bs);
    cudaFree(d_d);
    cudaFree(d_ws);
    free(h_asf);
    free(h_bq);
    free(h_bs);
    free(got);
}

/* ---- 4. argument checks ------------------------------------------------------------ */

static void test_rejects(void)
{
    fp4_err err;
    void *buf = NULL;
    CHECK(cudaMalloc(&buf, 1 << 20) == cudaSuccess);
    fp4_sm90_gemm_args a;
    memset(&a, 0, sizeof a);
    a.kernel = FP4_SM90_DECODE;
    a.m = 16;
    a.n = 64;
    a.k = 64;
    a.a_codes = (const uint8_t *)buf + 8; /* misaligned */
    a.a_sf = (const uint8_t *)buf;
    a.b_codes = (const uint8_t *)buf;
    a.b_sf = (const uint8_t *)buf;
    a.d = (uint16_t *)buf;
    a.workspace = buf;
    a.workspace_bytes = 1 << 20;
    a.alpha = 1.0f;
    CHECK(fp4_sm90_gemm(&a, 0, &err) == FP4_ERR_UNSUPPORTED);
    a.a_codes = (const uint8_t *)buf;
    CHECK(fp4_sm90_check(&a, &err) == FP4_OK);
    a.k = 40;
    CHECK(fp4_sm90_gemm(&a, 0, &err) == FP4_ERR_SHAPE);
    a.k = 64;
    a.kernel = FP4_SM90_PREFILL;
    a.tile_n = 96; /* no such tile width: refused before any launch */
    a.workspace_bytes = fp4_sm90_workspace_size(a.kernel, a.m, a.n, a.k);
    CHECK(fp4_sm90_gemm(&a, 0, &err) == FP4_ERR_INVALID_ARG);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaFree(buf);
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
    unsetenv("FP4_SM90_KERNEL");
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
    tester.rng = test_rng_seed(0x9E3779B97F4A7C15ull);
    CHECK(cudaDeviceGetAttribute(&tester.num_sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);

    test_rng qrng = test_rng_seed(0x2545F4914F6CDD1Dull);
    test_quantizer(&qrng);
    test_rejects();

    /* 2. each kernel forced on shapes of its regime and on tails: M, N and K
     * not multiples of any tile (1, 3, 17, 129, 203, 1001), K of one partial
     * k-step (16, 48) and with a partial last one (2080, 1040, 5200, 8144),
     * N % 4 != 0; at 1-16 tokens and 193 <= N <= 2112 the burst loop with 4,
     * 8 and 12 slots at 1-8 tokens and 4 and 8 at 9-16, and the ring just
     * past its limits (13 and 7-8 k-steps a warp, 12 tiles) */
    static const int64_t decode_shapes[][3] = {
        {1, 2048, 6144}, {3, 200, 2880},  {16, 2048, 6144}, {17, 768, 48},    {64, 768, 6144},
        {129, 8, 2880},  {16, 1, 16},     {2, 5, 16},       {32, 200, 2880},  {150, 2048, 6144},
        {16, 8192, 8192}, {16, 28672, 4096}, {32, 2048, 6144}, {24, 1024, 2880}, {16, 1024, 8192},
        {8, 2112, 7168}, {12, 200, 2080}, {5, 130, 1040}, {16, 640, 5200}, {10, 2112, 8144},
        {8, 2112, 6096}, {5, 260, 4000}, {16, 640, 4000}, {10, 208, 1968}, {3, 1000, 6160},
        {12, 520, 3520}, {1, 1000, 1040},
    };
    static const int64_t mid_shapes[][3] = {
        {65, 2048, 6144},  {128, 770, 2880},   {129, 768, 6144}, {256, 2048, 6144}, {600, 2048, 2880},
        {1024, 2048, 6144}, {16, 8192, 8192}, {7, 203, 16},     {64, 28672, 4096}, {3, 200, 2880},
    };
    static const int64_t prefill_shapes[][3] = {
        {300, 2000, 48}, {1000, 770, 2880}, {2048, 2048, 6144}, {129, 1001, 6144}, {4096, 256, 640},
        {17, 768, 48},   {1, 8, 6144},      {2048, 4100, 2880},
    };
#define NSHAPES(a) (sizeof a / sizeof a[0])
    for (size_t i = 0; i < NSHAPES(decode_shapes); i++)
        test_gemm(&tester, FP4_SM90_DECODE, decode_shapes[i][0], decode_shapes[i][1], decode_shapes[i][2]);
    for (size_t i = 0; i < NSHAPES(mid_shapes); i++)
        test_gemm(&tester, FP4_SM90_MID, mid_shapes[i][0], mid_shapes[i][1], mid_shapes[i][2]);
    for (size_t i = 0; i < NSHAPES(prefill_shapes); i++) {
        test_gemm(&tester, FP4_SM90_PREFILL, prefill_shapes[i][0], prefill_shapes[i][1], prefill_shapes[i][2]);
        test_gemm(&tester, FP4_SM90_PREFILL_WIDE, prefill_shapes[i][0], prefill_shapes[i][1],
                  prefill_shapes[i][2]);
    }
    /* the rule's own choice, one shape a regime */
    static const int64_t auto_shapes[][3] = {
        {16, 2048, 6144}, {256, 2048, 6144}, {2048, 2048, 6144}, {2048, 4100, 2880}};
    for (size_t i = 0; i < NSHAPES(auto_shapes); i++)
        test_gemm(&tester, FP4_SM90_AUTO, auto_shapes[i][0], auto_shapes[i][1], auto_shapes[i][2]);

    /* 3. decode: split counts 1 (D straight from the block), 3 (at 24 tokens
     * a cluster a tile, summed through distributed shared memory; at 16 and 5
     * the global way) and 45 (more than a cluster holds: the workspace and the
     * arrival counters; 45 more than most shapes' k-steps) */
    static const int split_counts[] = {1, 3, 45};
    static const int64_t decode_split_shapes[][3] = {
        {16, 768, 2880}, {5, 200, 6144}, {40, 2048, 48}, {24, 768, 2880}};
    for (int s = 0; s < 3; s++)
        for (size_t i = 0; i < NSHAPES(decode_split_shapes); i++)
            test_direct(&tester, FP4_SM90_DECODE, decode_split_shapes[i][0], decode_split_shapes[i][1],
                        decode_split_shapes[i][2], split_counts[s], 0, 0, 0);
    /* mid: split counts 1 (D from the transposed tile, no cooperative launch),
     * 3 and 45 (clamped to the k-steps and the co-resident CTAs: the slices,
     * the tile barrier and the counters' re-zeroing), and every token tile
     * width on a 6144- and a 640-deep shape (10 k-steps: fewer than the 128-
     * and 64-token rings hold, more than the 256-token ring) */
    static const int64_t mid_split_shapes[][3] = {{16, 768, 2880}, {100, 200, 6144}, {300, 2000, 48}};
    for (int s = 0; s < 3; s++)
        for (size_t i = 0; i < NSHAPES(mid_split_shapes); i++)
            test_direct(&tester, FP4_SM90_MID, mid_split_shapes[i][0], mid_split_shapes[i][1],
                        mid_split_shapes[i][2], split_counts[s], 0, 0, 0);
    static const int token_tiles[] = {64, 128, 256};
    for (int b = 0; b < 3; b++) {
        test_direct(&tester, FP4_SM90_MID, 200, 2000, 6144, 0, token_tiles[b], 0, 0);
        test_direct(&tester, FP4_SM90_MID, 77, 300, 640, 0, token_tiles[b], 0, 0);
    }
    /* prefill and prefill-wide at each tile width: K = 48 (one k-step of
     * three k-blocks, rows of 24 bytes), more k-steps than the rings hold,
     * partial m and n tiles, N odd */
    static const int64_t tile_shapes[][3] = {
        {300, 2000, 48}, {1000, 770, 2880}, {129, 1001, 6144}, {4096, 256, 640}};
    static const int widths[] = {128, 256};
    for (int w = 0; w < 2; w++)
        for (size_t i = 0; i < NSHAPES(tile_shapes); i++) {
            test_direct(&tester, FP4_SM90_PREFILL, tile_shapes[i][0], tile_shapes[i][1],
                        tile_shapes[i][2], 0, widths[w], 0, 0);
            test_direct(&tester, FP4_SM90_PREFILL_WIDE, tile_shapes[i][0], tile_shapes[i][1],
                        tile_shapes[i][2], 0, widths[w], 0, 0);
        }
    /* prefill-wide's persistent grid forced small at each tile width: a CTA
     * walks many tiles with the ring's stage count running on (K = 48: one
     * k-step a tile, so a slot's phases turn over within and across tiles);
     * its tile order in groups of 3 row tiles (1000 rows: a last group of 2;
     * 4096: 10 groups and 2 rows) and the plain order */
    static const int grids[] = {1, 5};
    for (int w = 0; w < 2; w++)
        for (int g = 0; g < 2; g++) {
            test_direct(&tester, FP4_SM90_PREFILL_WIDE, 300, 2000, 48, 0, widths[w], grids[g], 0);
            test_direct(&tester, FP4_SM90_PREFILL_WIDE, 1000, 770, 2880, 0, widths[w], grids[g], 0);
            test_direct(&tester, FP4_SM90_PREFILL_WIDE, 4096, 256, 640, 0, widths[w], grids[g], 0);
        }
    static const int orders[][2] = {{3, 0}, {3, 5}, {-1, 0}}; /* (group, ctas) */
    for (int o = 0; o < 3; o++)
        for (size_t i = 0; i < NSHAPES(tile_shapes); i++)
            test_direct(&tester, FP4_SM90_PREFILL_WIDE, tile_shapes[i][0], tile_shapes[i][1],
                        tile_shapes[i][2], 0, widths[o & 1], orders[o][1], orders[o][0]);

    for (int i = 0; i < PROBLEM_CACHE; i++) problem_free(&tester.cache[i]);
    ops->close(inst);
    return check_finish("gpu_fp4_sm90");
}
