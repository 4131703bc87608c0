/* The GPU quantizer and the two backends built on it, on odd shapes.
 *
 * 1. fp4_gpu_quantize_bf16 bit-identical (memcmp) to fp4_quantize_bf16 +
 *    fp4_swizzle_scales: codes, every swizzled scale byte (padding must come
 *    back zero over 0xA5 garbage), global scale; static and dynamic scale;
 *    rows 1, 3, 129, 257 x cols 16, 48, 2880, blocks spanning E4M3 from
 *    subnormal to saturated, bf16 subnormal and huge blocks, zero blocks, -0
 *    and exact E2M1 ties; a given scale whose inverse is subnormal refused
 *    by both; and more
 *    rows than one grid row of CTAs covers (the tile loop).
 * 2. Backends `quantize` (any GPU) and `w4a4-sm90` (sm_90; elsewhere open()
 *    must say "needs sm_90"), called directly on M = 1, 3, 17, 129 x N = 1, 8,
 *    200 x K = 16, 48, 2880 with gaussian operands: outputs poisoned, run
 *    plainly (copy 0) and from a CUDA graph (copy 1) on a non-blocking
 *    stream, D against fp4_gemm_reference: `quantize` bit for bit (its D is
 *    the exact GEMM of the freshly quantized A), `w4a4-sm90` within its
 *    tolerances. `quantize` read back after poison() without run() must not
 *    match. Random-codes data (not quantizer output) must be refused in
 *    prepare() with FP4_ERR_UNSUPPORTED and a byte count.
 * Exits 77 (skipped) without a CUDA GPU. */
#include <cuda_runtime_api.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/inputs.h"
#include "check.h"
#include "fp4/backend.h"
#include "fp4/format.h"
#include "kernels/fp4_quantize.h"
#include "test_rng.h"

/* ---- 1. the quantizer ------------------------------------------------------------ */

static float amax_bf16(const uint16_t *x, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(fp4_bf16_to_float(x[i])));
    return m;
}

/* x: host bf16 [rows, cols]; gs <= 0: dynamic. Returns 1 when identical, -1
 * when both quantizers refuse the scale (checked here), 0 otherwise. */
static int check_quantizer(const uint16_t *x, int64_t rows, int64_t cols, float gs, const char *what)
{
    fp4_err err;
    fp4_matrix ref;
    const size_t nx = (size_t)rows * (size_t)cols * 2, nc = (size_t)rows * (size_t)(cols / 2);
    const size_t ns = fp4_swizzled_size(rows, cols);
    uint8_t *ref_sf = malloc(ns), *got_c = malloc(nc), *got_sf = malloc(ns);
    void *dx = NULL, *dc = NULL, *dsf = NULL, *dgs = NULL, *damax = NULL;
    float got_gs = 0.0f;
    int ok = 0;
    memset(&ref, 0, sizeof ref);
    CHECK(ref_sf && got_c && got_sf);
    if (!ref_sf || !got_c || !got_sf) goto out;
    if (cudaMalloc(&dx, nx) != cudaSuccess || cudaMalloc(&dc, nc) != cudaSuccess ||
        cudaMalloc(&dsf, ns) != cudaSuccess || cudaMalloc(&dgs, 4) != cudaSuccess ||
        cudaMalloc(&damax, 4) != cudaSuccess) {
        CHECK_MSG(0, "%s: cudaMalloc", what);
        goto out;
    }
    CHECK(cudaMemcpy(dx, x, nx, cudaMemcpyHostToDevice) == cudaSuccess);
    if (fp4_quantize_bf16(x, rows, cols, gs, &ref, &err) != FP4_OK) {
        /* refused by the reference: only where 1 / gs is no normal float. A
         * given gs must be refused on the GPU too; a dynamic one (found on the
         * device) is documented as unchecked there. */
        if (gs > 0.0f) {
            CHECK_MSG(1.0f / gs < FLT_MIN, "%s: the reference refused gs=%g: %s", what,
                      (double)gs, fp4_err_text(&err));
            CHECK_MSG(fp4_gpu_quantize_bf16(dx, rows, cols, gs, dc, dsf, NULL, NULL, 0, &err) ==
                          FP4_ERR_INVALID_ARG,
                      "%s: the GPU quantizer took gs=%g", what, (double)gs);
        } else {
            /* the reference's own rule (nvfp4.c): 2688 / amax finite, its
             * inverse a normal float */
            const float dyn = 2688.0f / amax_bf16(x, (size_t)rows * (size_t)cols);
            CHECK_MSG(!isfinite(dyn) || !(1.0f / dyn >= FLT_MIN),
                      "%s %lldx%lld: the reference refused: %s", what, (long long)rows,
                      (long long)cols, fp4_err_text(&err));
        }
        ok = -1;
        goto out;
    }
    CHECK(fp4_swizzle_scales(ref.scales, rows, cols, ref_sf, &err) == FP4_OK);
    CHECK(cudaMemset(dc, 0xA5, nc) == cudaSuccess); /* a forgotten byte shows up */
    CHECK(cudaMemset(dsf, 0xA5, ns) == cudaSuccess);
    fp4_status st = fp4_gpu_quantize_bf16(dx, rows, cols, gs, dc, dsf, dgs, damax, 0, &err);
    CHECK_MSG(st == FP4_OK, "%s: %s", what, fp4_err_text(&err));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(cudaMemcpy(got_c, dc, nc, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(cudaMemcpy(got_sf, dsf, ns, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(cudaMemcpy(&got_gs, dgs, 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    size_t bc = 0, bs = 0;
    for (size_t i = 0; i < nc; i++) bc += got_c[i] != ref.codes[i];
    for (size_t i = 0; i < ns; i++) bs += got_sf[i] != ref_sf[i];
    CHECK_MSG(bc == 0, "%s %lldx%lld gs=%g: %zu of %zu code bytes differ", what, (long long)rows,
              (long long)cols, (double)gs, bc, nc);
    CHECK_MSG(bs == 0, "%s %lldx%lld gs=%g: %zu of %zu scale bytes differ", what, (long long)rows,
              (long long)cols, (double)gs, bs, ns);
    CHECK_MSG(memcmp(&got_gs, &ref.global_scale, 4) == 0, "%s: global scale %.9g vs %.9g", what,
              (double)got_gs, (double)ref.global_scale);
    ok = bc == 0 && bs == 0;
out:
    cudaFree(dx);
    cudaFree(dc);
    cudaFree(dsf);
    cudaFree(dgs);
    cudaFree(damax);
    fp4_matrix_free(&ref);
    free(ref_sf);
    free(got_c);
    free(got_sf);
    return ok;
}

/* bf16 [rows, cols]: gaussian blocks scaled from 2^-30 (E4M3 subnormal and
 * zero scales) to 2^12 (saturated under a given scale), some all-zero blocks,
 * some -0 elements. */
static void fill(test_rng *rng, uint16_t *x, int64_t rows, int64_t cols)
{
    for (int64_t b = 0; b < rows * cols / 16; b++) {
        const double u = test_rng_uniform(rng);
        const float scale = u < 0.05 ? 0.0f
                          : u < 0.15 ? ldexpf(1.0f, -30 + (int)(test_rng_uniform(rng) * 24))
                          : u < 0.2  ? 4096.0f
                          : u < 0.22 ? 0x1p-128f /* bf16 subnormals */
                          : u < 0.24 ? 0x1p+120f /* scales far past 448 */
                                     : 1.0f;
        for (int j = 0; j < 16; j++) {
            float v = (float)test_rng_gauss(rng) * scale;
            if (test_rng_uniform(rng) < 0.01) v = -0.0f;
            x[b * 16 + j] = fp4_bf16_from_float(v);
        }
    }
}

static void test_quantizer(void)
{
    static const int64_t rows[] = {1, 3, 129, 257}, cols[] = {16, 48, 2880};
    test_rng rng = test_rng_seed(0x2545F4914F6CDD1Dull);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            uint16_t *x = malloc((size_t)rows[i] * (size_t)cols[j] * 2);
            CHECK(x != NULL);
            if (!x) return;
            fill(&rng, x, rows[i], cols[j]);
            check_quantizer(x, rows[i], cols[j], 0.0f, "dynamic");
            check_quantizer(x, rows[i], cols[j], 2688.0f / 3.7f, "static");
            check_quantizer(x, rows[i], cols[j], 1.0f, "static gs=1");
            /* 1 / (sf / gs) = +Inf for the subnormal blocks: x * inv is NaN for x = 0 */
            check_quantizer(x, rows[i], cols[j], 0x1p126f, "static gs=2^126");
            /* 1 / gs = 2^-127 is subnormal: refused by both */
            CHECK(check_quantizer(x, rows[i], cols[j], 0x1p127f, "static gs=2^127") == -1);
            free(x);
        }
    /* every E2M1 boundary exactly (gs = 1, block max 6: sf = 1, inv = 1) */
    {
        static const float v[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.5f,
                                  0.1f,  -0.25f, -0.75f, -1.25f, -2.5f, -5.0f, -0.0f, -6.0f};
        uint16_t x[3 * 48];
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < 48; c++)
                x[r * 48 + c] = fp4_bf16_from_float(c % 16 == 0 ? 6.0f : v[(c + r) % 16]);
        check_quantizer(x, 3, 48, 1.0f, "ties");
    }
    /* more 128-row tiles than one grid column holds (65535): the tile loop */
    {
        const int64_t r = 65535LL * 128 + 129, c = 16;
        uint16_t *x = malloc((size_t)r * (size_t)c * 2);
        CHECK(x != NULL);
        if (x) {
            for (int64_t i = 0; i < r * c; i++)
                x[i] = fp4_bf16_from_float((float)((i * 7919) % 1001 - 500) * 0.01f);
            check_quantizer(x, r, c, 0.0f, "tall");
            free(x);
        }
    }
}

/* ---- 2. the backends ----------------------------------------------------------------- */

static size_t count_diff_f32(const float *d, const float *r, size_t n, double *max_rel,
                             double *norm_rel, size_t *nans)
{
    size_t diff = 0;
    double me = 0, mr = 0, se = 0, sr = 0;
    *nans = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(d[i])) (*nans)++;
        diff += !(d[i] == r[i]); /* NaN differs; -0 and +0 do not (odd copies negate) */
        const double e = fabs((double)d[i] - (double)r[i]);
        me = e > me || isnan(e) ? e : me;
        mr = fabs((double)r[i]) > mr ? fabs((double)r[i]) : mr;
        se += e * e;
        sr += (double)r[i] * (double)r[i];
    }
    *max_rel = mr > 0 ? me / mr : me;
    *norm_rel = sr > 0 ? sqrt(se / sr) : sqrt(se);
    return diff;
}

static fp4_status run_graph(const fp4_backend_ops *ops, void *plan, int copy, cudaStream_t s,
                            fp4_err *err)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t ex = NULL;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        return fp4_fail(err, FP4_ERR_CUDA, "begin capture");
    fp4_status st = ops->run(plan, copy, s, err);
    cudaError_t ce = cudaStreamEndCapture(s, &g);
    if (st == FP4_OK && ce != cudaSuccess) st = fp4_fail(err, FP4_ERR_CUDA, "run() not capturable");
    if (st == FP4_OK && (cudaGraphInstantiate(&ex, g, 0) != cudaSuccess ||
                         cudaGraphLaunch(ex, s) != cudaSuccess))
        st = fp4_fail(err, FP4_ERR_CUDA, "graph instantiate/launch");
    if (ex) cudaGraphExecDestroy(ex);
    if (g) cudaGraphDestroy(g);
    return st;
}

static void test_backend(const fp4_backend_ops *ops, void *inst, int64_t m, int64_t n, int64_t k,
                         cudaStream_t s)
{
    fp4_err err;
    fp4_matrix a, a_odd, b;
    uint16_t *x = NULL, *x_neg = NULL;
    char what[128];
    snprintf(what, sizeof what, "%s %lldx%lldx%lld", ops->name, (long long)m, (long long)n,
             (long long)k);
    /* as the engine does: bf16 activations x, A the CPU quantizer's output of
     * x with the static scale 1 / global_scale (the dynamic scale it was made
     * with rounds differently in rare elements), and for odd copies its
     * output of -x */
    fp4_matrix a_dyn;
    CHECK(fp4_make_activations(FP4_DATA_GAUSSIAN, m, k, 11 + (uint64_t)(m * 131 + k), &x, &a_dyn,
                               &err) == FP4_OK);
    CHECK(fp4_quantize_bf16(x, m, k, 1.0f / a_dyn.global_scale, &a, &err) == FP4_OK);
    a.global_scale = a_dyn.global_scale;
    fp4_matrix_free(&a_dyn);
    CHECK(fp4_make_operand(FP4_DATA_GAUSSIAN, n, k, 13 + (uint64_t)(n * 137 + k), &b, &err) == FP4_OK);
    x_neg = malloc((size_t)m * (size_t)k * 2);
    CHECK(x && x_neg);
    for (size_t i = 0; x && x_neg && i < (size_t)m * (size_t)k; i++) x_neg[i] = (uint16_t)(x[i] ^ 0x8000u);
    CHECK(fp4_quantize_bf16(x_neg, m, k, 1.0f / a.global_scale, &a_odd, &err) == FP4_OK);
    a_odd.global_scale = a.global_scale;
    const size_t nd = (size_t)m * (size_t)n;
    float *ref = malloc(nd * 4), *d = malloc(nd * 4);
    fp4_gemm_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.shape.m = m;
    pr.shape.n = n;
    pr.shape.k = k;
    pr.a = &a;
    pr.b = &b;
    pr.alpha = a.global_scale * b.global_scale;
    pr.a_odd = &a_odd;
    pr.a_bf16 = x;
    void *plan = NULL;
    CHECK(ref && d);
    if (!ref || !d) goto out;
    CHECK(fp4_gemm_reference(&a, &b, pr.alpha, ref, 0, &err) == FP4_OK);
    fp4_status st = ops->prepare(inst, &pr, 2, &plan, &err);
    CHECK_MSG(st == FP4_OK, "%s: prepare: %s", what, fp4_err_text(&err));
    if (st != FP4_OK) goto out;
    if (ops->variant) printf("  %s: variant %s\n", what, ops->variant(plan));
    const int exact = ops->tol_max == 0.0;
    for (int c = 0; c < 2; c++) {
        if (exact && c == 0) {
            /* poisoned and not run: the exact GEMM of 0xFF bytes must not pass */
            CHECK(ops->poison(plan, c, s, &err) == FP4_OK);
            CHECK(cudaStreamSynchronize(s) == cudaSuccess);
            double mx, nr;
            size_t nans;
            if (ops->read_output(plan, c, d, &err) == FP4_OK)
                CHECK_MSG(count_diff_f32(d, ref, nd, &mx, &nr, &nans) > 0,
                          "%s: poisoned output passes without run()", what);
        }
        CHECK(ops->poison(plan, c, s, &err) == FP4_OK);
        st = c == 0 ? ops->run(plan, c, s, &err) : run_graph(ops, plan, c, s, &err);
        CHECK_MSG(st == FP4_OK, "%s copy %d: run: %s", what, c, fp4_err_text(&err));
        CHECK(cudaStreamSynchronize(s) == cudaSuccess);
        if (st != FP4_OK) continue;
        st = ops->read_output(plan, c, d, &err);
        CHECK_MSG(st == FP4_OK, "%s copy %d: read_output: %s", what, c, fp4_err_text(&err));
        if (st != FP4_OK) continue;
        double mx, nr;
        size_t nans;
        if (c & 1) /* odd copies compute -D */
            for (size_t i = 0; i < nd; i++) d[i] = -d[i];
        const size_t diff = count_diff_f32(d, ref, nd, &mx, &nr, &nans);
        CHECK_MSG(nans == 0, "%s copy %d: %zu NaN/Inf outputs", what, c, nans);
        if (exact)
            CHECK_MSG(diff == 0, "%s copy %d: %zu of %zu outputs differ from the reference", what,
                      c, diff, nd);
        CHECK_MSG(mx <= ops->tol_max && nr <= ops->tol_norm,
                  "%s copy %d: error max %.3g norm %.3g (tol %.1g / %.1g)", what, c, mx, nr,
                  ops->tol_max, ops->tol_norm);
    }
    ops->release(plan);
out:
    free(ref);
    free(d);
    free(x);
    free(x_neg);
    fp4_matrix_free(&a);
    fp4_matrix_free(&a_odd);
    fp4_matrix_free(&b);
}

/* A GPU quantizer that disagrees with the CPU quantizer fails (FAILED, not
 * unsupported): planted as a problem whose A is the CPU quantizer's output
 * with one code off by one, which the GPU quantizer cannot reproduce; and a
 * problem without bf16 activations is unsupported. */
static void test_disagreement_fails(const fp4_backend_ops *ops, void *inst)
{
    fp4_err err;
    fp4_matrix a, b;
    uint16_t *x = NULL;
    fp4_matrix a_dyn;
    CHECK(fp4_make_activations(FP4_DATA_GAUSSIAN, 17, 48, 5, &x, &a_dyn, &err) == FP4_OK);
    CHECK(fp4_quantize_bf16(x, 17, 48, 1.0f / a_dyn.global_scale, &a, &err) == FP4_OK);
    a.global_scale = a_dyn.global_scale;
    fp4_matrix_free(&a_dyn);
    CHECK(fp4_make_operand(FP4_DATA_GAUSSIAN, 8, 48, 6, &b, &err) == FP4_OK);
    fp4_gemm_problem pr = {.shape = {17, 8, 48}, .a = &a, .b = &b, .alpha = a.global_scale * b.global_scale};
    void *plan = NULL;
    fp4_status st = ops->prepare(inst, &pr, 1, &plan, &err);
    CHECK_MSG(st == FP4_ERR_UNSUPPORTED, "%s without bf16 A: status %d, '%s'", ops->name, (int)st,
              fp4_err_text(&err));
    if (st == FP4_OK) ops->release(plan);
    pr.a_bf16 = x;
    a.codes[3] = (uint8_t)((a.codes[3] & 0xF0) | (((a.codes[3] & 7) + 1) & 7) | (a.codes[3] & 8));
    plan = NULL;
    st = ops->prepare(inst, &pr, 1, &plan, &err);
    CHECK_MSG(st == FP4_ERR_VERIFY && strstr(fp4_err_text(&err), "disagrees"),
              "%s with an off-by-one code: status %d, '%s'", ops->name, (int)st, fp4_err_text(&err));
    if (st == FP4_OK) ops->release(plan);
    free(x);
    fp4_matrix_free(&a);
    fp4_matrix_free(&b);
}

int main(void)
{
    int count = 0, major = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("gpu_quantize: skipped: no CUDA device\n");
        return 77;
    }
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    test_quantizer();

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    static const int64_t ms[] = {1, 3, 17, 129}, ns[] = {1, 8, 200}, ks[] = {16, 48, 2880};
    const char *names[] = {"quantize", "w4a4-sm90"};
    for (int bi = 0; bi < 2; bi++) {
        const fp4_backend_ops *ops = fp4_backend_find(names[bi]);
        fp4_err err;
        void *inst = NULL;
        CHECK_MSG(ops != NULL, "backend %s not registered", names[bi]);
        if (!ops) continue;
        fp4_status st = ops->open(&inst, &err);
        if (bi == 1 && major != 9) { /* sm_90 only */
            CHECK_MSG(st == FP4_ERR_UNSUPPORTED && strstr(fp4_err_text(&err), "needs sm_90"),
                      "w4a4-sm90 off Hopper: '%s'", fp4_err_text(&err));
            if (st == FP4_OK) ops->close(inst);
            continue;
        }
        CHECK_MSG(st == FP4_OK, "%s: open: %s", names[bi], fp4_err_text(&err));
        if (st != FP4_OK) continue;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 3; j++)
                for (int l = 0; l < 3; l++) test_backend(ops, inst, ms[i], ns[j], ks[l], s);
        test_backend(ops, inst, 1024, 2048, 6144, s); /* prefill-sized */
        test_disagreement_fails(ops, inst);
        ops->close(inst);
    }
    cudaStreamDestroy(s);
    return check_finish("gpu_quantize");
}
