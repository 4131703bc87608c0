/* Every compiled-in GPU backend against the exact CPU reference, on shapes
 * from tiny to MoE-sized, with ragged edges (M = 17, N = 1, K = 48):
 *   cuda-ref        bit-identical (memcmp) to fp4_gemm_reference
 *   cublas-bf16     within its tolerances
 *   cublaslt-fp8    within its tolerances (lossy operands)
 *   cublaslt-nvfp4  Blackwell: within its tolerances; elsewhere (the H200 is
 *                   sm_90): FP4_ERR_UNSUPPORTED from open() or prepare(),
 *                   with a message
 * For each backend and shape: poison() must fill the output with NaN; after
 * run() no NaN may remain; and run() captured in a CUDA graph (copy 1) must
 * give the same verdict as a plain launch (copy 0). A shape refused by
 * supports() must come with a reason. Without a GPU (cuda-ref's open() says
 * UNSUPPORTED) the test prints why and exits 77, which CTest shows as skipped. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fp4/backend.h"
#include "fp4/format.h"
#include "test_rng.h"

static const fp4_shape shapes[] = {
    {1, 8, 16}, {3, 200, 48}, {17, 1, 2880}, {129, 256, 6144}, {16, 2048, 6144}, {256, 768, 6144},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static const char *const backend_names[] = {"cuda-ref", "cublas-bf16", "cublaslt-fp8",
                                            "cublaslt-nvfp4"};
#define NBACKENDS (sizeof backend_names / sizeof backend_names[0])

/* ---- random data ----------------------------------------------------------- */

/* Quantized random [rows, cols]: gaussian values, each row scaled by 2^u with
 * u uniform in [-3, 3] (so block scales spread over several binades), an
 * all-zero block now and then (scale 0) and an occasional 8x outlier. */
static fp4_status random_matrix(test_rng *rng, int64_t rows, int64_t cols, fp4_matrix *out,
                                fp4_err *err)
{
    float *x = malloc((size_t)rows * (size_t)cols * sizeof *x);
    if (!x) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for test data");
    for (int64_t r = 0; r < rows; r++) {
        const float row_scale = (float)exp2(6.0 * test_rng_uniform(rng) - 3.0);
        for (int64_t c = 0; c < cols; c++) {
            float v = (float)test_rng_gauss(rng) * row_scale;
            if (test_rng_uniform(rng) < 0.002) v *= 8.0f;
            x[r * cols + c] = v;
        }
        if (cols > 16 && test_rng_uniform(rng) < 0.2) {
            int64_t b = (int64_t)(test_rng_uniform(rng) * (double)(cols / 16));
            memset(x + r * cols + b * 16, 0, 16 * sizeof *x);
        }
    }
    fp4_status st = fp4_quantize_f32(x, rows, cols, 0.0f, out, err);
    free(x);
    return st;
}

/* ---- comparison ---------------------------------------------------------------- */

typedef struct errors {
    double max_rel;  /* max |D - R| / max |R| */
    double norm_rel; /* ||D - R||_2 / ||R||_2 */
    size_t nans;     /* NaN or Inf in D */
    size_t differ;   /* elements whose bits differ from R */
    size_t first;    /* first differing index */
} errors;

static errors measure(const float *d, const float *r, size_t n)
{
    errors e = {0, 0, 0, 0, 0};
    double max_err = 0, max_ref = 0, se = 0, sr = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(d[i])) e.nans++;
        if (memcmp(&d[i], &r[i], sizeof(float)) != 0 && e.differ++ == 0) e.first = i;
        const double diff = fabs((double)d[i] - (double)r[i]);
        if (diff > max_err || isnan(diff)) max_err = diff;
        if (fabs((double)r[i]) > max_ref) max_ref = fabs((double)r[i]);
        se += diff * diff;
        sr += (double)r[i] * (double)r[i];
    }
    e.max_rel = max_ref > 0 ? max_err / max_ref : max_err;
    e.norm_rel = sr > 0 ? sqrt(se / sr) : sqrt(se);
    return e;
}

static size_t count_nan(const float *d, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += isnan(d[i]) ? 1 : 0;
    return c;
}

/* ---- one backend on one problem ------------------------------------------------------ */

/* Runs copy `copy` of the plan, plainly or captured in a CUDA graph. */
static fp4_status run_copy(const fp4_backend_ops *ops, void *plan, int copy, cudaStream_t stream,
                           int in_graph, fp4_err *err)
{
    if (!in_graph) return ops->run(plan, copy, stream, err);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t ce = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    if (ce != cudaSuccess)
        return fp4_fail(err, FP4_ERR_CUDA, "begin capture: %s", cudaGetErrorString(ce));
    fp4_status st = ops->run(plan, copy, stream, err);
    ce = cudaStreamEndCapture(stream, &graph); /* always end, even after a failed run */
    if (st != FP4_OK) goto out;
    if (ce != cudaSuccess) {
        st = fp4_fail(err, FP4_ERR_CUDA, "run() was not capturable: %s", cudaGetErrorString(ce));
        goto out;
    }
    ce = cudaGraphInstantiate(&exec, graph, 0);
    if (ce == cudaSuccess) ce = cudaGraphLaunch(exec, stream);
    if (ce != cudaSuccess)
        st = fp4_fail(err, FP4_ERR_CUDA, "graph instantiate/launch: %s", cudaGetErrorString(ce));
out:
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    return st;
}

/* Poison, read back (all NaN?), poison again, run, read back, compare. */
static void check_copy(const fp4_backend_ops *ops, void *plan, int copy, cudaStream_t stream,
                       int in_graph, const fp4_shape *s, const float *ref, float *d)
{
    const size_t n = (size_t)s->m * (size_t)s->n;
    const char *how = in_graph ? "graph" : "plain";
    fp4_err err;
    fp4_err_clear(&err);
    fp4_status st = ops->poison(plan, copy, stream, &err);
    CHECK_MSG(st == FP4_OK, "%s poison: %s", ops->name, fp4_err_text(&err));
    st = ops->read_output(plan, copy, d, &err);
    CHECK_MSG(st == FP4_OK, "%s read_output: %s", ops->name, fp4_err_text(&err));
    if (st == FP4_OK)
        CHECK_MSG(count_nan(d, n) == n, "%s %lldx%lldx%lld: poison left %zu of %zu outputs non-NaN",
                  ops->name, (long long)s->m, (long long)s->n, (long long)s->k, n - count_nan(d, n),
                  n);

    st = ops->poison(plan, copy, stream, &err);
    CHECK_MSG(st == FP4_OK, "%s poison: %s", ops->name, fp4_err_text(&err));
    st = run_copy(ops, plan, copy, stream, in_graph, &err);
    CHECK_MSG(st == FP4_OK, "%s %lldx%lldx%lld %s run: %s", ops->name, (long long)s->m,
              (long long)s->n, (long long)s->k, how, fp4_err_text(&err));
    if (st != FP4_OK) return;
    st = ops->read_output(plan, copy, d, &err);
    CHECK_MSG(st == FP4_OK, "%s read_output: %s", ops->name, fp4_err_text(&err));
    if (st != FP4_OK) return;

    errors e = measure(d, ref, n);
    printf("  %-15s %5lldx%-5lldx%-5lld %s: max %.3e norm %.3e (tol %.1e / %.1e), %zu of %zu "
           "differ in bits\n",
           ops->name, (long long)s->m, (long long)s->n, (long long)s->k, how, e.max_rel, e.norm_rel,
           ops->tol_max, ops->tol_norm, e.differ, n);
    CHECK_MSG(e.nans == 0, "%s %lldx%lldx%lld %s: %zu NaN/Inf outputs", ops->name, (long long)s->m,
              (long long)s->n, (long long)s->k, how, e.nans);
    if (ops->flags & FP4_BACKEND_REFERENCE) {
        CHECK_MSG(e.differ == 0,
                  "%s %lldx%lldx%lld %s: %zu outputs not bit-identical, first at (%zu, %zu): "
                  "%.9g vs %.9g",
                  ops->name, (long long)s->m, (long long)s->n, (long long)s->k, how, e.differ,
                  e.first / (size_t)s->n, e.first % (size_t)s->n,
                  e.differ ? (double)d[e.first] : 0.0, e.differ ? (double)ref[e.first] : 0.0);
    } else {
        CHECK_MSG(e.max_rel <= ops->tol_max, "%s %lldx%lldx%lld %s: max error %.3e > %.3e",
                  ops->name, (long long)s->m, (long long)s->n, (long long)s->k, how, e.max_rel,
                  ops->tol_max);
        CHECK_MSG(e.norm_rel <= ops->tol_norm, "%s %lldx%lldx%lld %s: norm error %.3e > %.3e",
                  ops->name, (long long)s->m, (long long)s->n, (long long)s->k, how, e.norm_rel,
                  ops->tol_norm);
    }
}

/* Whether a backend may answer UNSUPPORTED from prepare() for a shape its
 * supports() accepted: only the vendor FP4 path off Blackwell, whose
 * heuristic is the authority there. */
static int may_refuse_in_prepare(const fp4_backend_ops *ops, int cc_major)
{
    return strcmp(ops->name, "cublaslt-nvfp4") == 0 && cc_major != 10 && cc_major != 12;
}

/* One backend, one shape. Returns 1 when the backend refused it (with a
 * checked reason), 0 when it was verified (or failed a check). */
static int check_shape(const fp4_backend_ops *ops, void *inst, const fp4_gemm_problem *p,
                       const float *ref, float *d, cudaStream_t stream, int cc_major)
{
    const fp4_shape *s = &p->shape;
    fp4_err err;
    fp4_err_clear(&err);
    if (ops->supports) {
        fp4_status st = ops->supports(inst, s, &err);
        if (st != FP4_OK) {
            CHECK_MSG(st == FP4_ERR_UNSUPPORTED && err.msg[0] != '\0',
                      "%s supports(%lldx%lldx%lld): status %d without a reason", ops->name,
                      (long long)s->m, (long long)s->n, (long long)s->k, (int)st);
            printf("  %-15s %5lldx%-5lldx%-5lld unsupported: %s\n", ops->name, (long long)s->m,
                   (long long)s->n, (long long)s->k, fp4_err_text(&err));
            return 1;
        }
    }
    if (ops->bytes_moved) CHECK_MSG(ops->bytes_moved(s) > 0, "%s bytes_moved <= 0", ops->name);

    void *plan = NULL;
    fp4_status st = ops->prepare(inst, p, 2, &plan, &err);
    if (st == FP4_ERR_UNSUPPORTED && may_refuse_in_prepare(ops, cc_major)) {
        CHECK_MSG(err.msg[0] != '\0', "%s prepare: UNSUPPORTED without a reason", ops->name);
        CHECK(plan == NULL);
        printf("  %-15s %5lldx%-5lldx%-5lld unsupported at prepare: %s\n", ops->name,
               (long long)s->m, (long long)s->n, (long long)s->k, fp4_err_text(&err));
        return 1;
    }
    CHECK_MSG(st == FP4_OK, "%s prepare(%lldx%lldx%lld): %s: %s", ops->name, (long long)s->m,
              (long long)s->n, (long long)s->k, fp4_status_str(st), fp4_err_text(&err));
    if (st != FP4_OK) return 0;
    check_copy(ops, plan, 0, stream, 0, s, ref, d);
    check_copy(ops, plan, 1, stream, 1, s, ref, d);
    /* out-of-range copies are refused, not crashed on */
    CHECK(ops->run(plan, 2, stream, &err) == FP4_ERR_INVALID_ARG);
    CHECK(ops->run(plan, -1, stream, &err) == FP4_ERR_INVALID_ARG);
    ops->release(plan);
    return 0;
}

int main(void)
{
    fp4_err err;
    fp4_err_clear(&err);
    const fp4_backend_ops *ops[NBACKENDS];
    void *inst[NBACKENDS];
    int refused[NBACKENDS];
    for (size_t i = 0; i < NBACKENDS; i++) {
        ops[i] = fp4_backend_find(backend_names[i]);
        inst[i] = NULL;
        refused[i] = 0;
        CHECK_MSG(ops[i] != NULL, "backend %s is not compiled in", backend_names[i]);
        if (ops[i]) {
            CHECK_MSG(fp4_backend_validate(ops[i], &err) == FP4_OK, "%s: %s", backend_names[i],
                      fp4_err_text(&err));
            CHECK(ops[i]->flags & FP4_BACKEND_GPU);
        }
    }
    if (!ops[0]) return check_finish("gpu_backends");

    /* No GPU: cuda-ref cannot open; nothing else can either. */
    fp4_status st = ops[0]->open(&inst[0], &err);
    if (st == FP4_ERR_UNSUPPORTED) {
        printf("gpu_backends: skipped: %s\n", fp4_err_text(&err));
        return 77;
    }
    CHECK_MSG(st == FP4_OK, "cuda-ref open: %s", fp4_err_text(&err));
    if (st != FP4_OK) return check_finish("gpu_backends");
    CHECK(ops[0]->tol_max == 0.0 && ops[0]->tol_norm == 0.0);
    CHECK(ops[0]->flags & FP4_BACKEND_REFERENCE);

    int dev = 0, cc_major = 0, cc_minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev);
    printf("gpu_backends: device %d is sm_%d%d\n", dev, cc_major, cc_minor);
    cudaStream_t stream = NULL;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);

    for (size_t i = 1; i < NBACKENDS; i++) {
        if (!ops[i]) continue;
        fp4_err_clear(&err);
        st = ops[i]->open(&inst[i], &err);
        if (st == FP4_ERR_UNSUPPORTED) {
            CHECK_MSG(err.msg[0] != '\0', "%s open: UNSUPPORTED without a reason", ops[i]->name);
            CHECK(inst[i] == NULL);
            printf("  %-15s unsupported on this GPU: %s\n", ops[i]->name, fp4_err_text(&err));
            refused[i] = 1;
            continue;
        }
        CHECK_MSG(st == FP4_OK, "%s open: %s", ops[i]->name, fp4_err_text(&err));
        if (st != FP4_OK) refused[i] = 1;
    }
    /* The vendor FP4 path must run on Blackwell and must refuse elsewhere. */
    const int nvfp4 = 3;
    const int blackwell = cc_major == 10 || cc_major == 12;
    if (ops[nvfp4] && blackwell)
        CHECK_MSG(!refused[nvfp4], "cublaslt-nvfp4 refused a Blackwell GPU (sm_%d%d)", cc_major,
                  cc_minor);

    int nvfp4_refusals = 0, nvfp4_tried = 0;
    for (size_t si = 0; si < NSHAPES; si++) {
        const fp4_shape *s = &shapes[si];
        fp4_matrix a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        test_rng rng = test_rng_seed(0x9E3779B97F4A7C15ull ^ (uint64_t)(si + 1) * 0x100000001B3ull);
        float *ref = malloc((size_t)s->m * (size_t)s->n * sizeof *ref);
        float *d = malloc((size_t)s->m * (size_t)s->n * sizeof *d);
        CHECK(ref && d);
        st = random_matrix(&rng, s->m, s->k, &a, &err);
        if (st == FP4_OK) st = random_matrix(&rng, s->n, s->k, &b, &err);
        const float alpha = a.global_scale * b.global_scale;
        if (st == FP4_OK) st = fp4_gemm_reference(&a, &b, alpha, ref, 0, &err);
        CHECK_MSG(st == FP4_OK, "test data for %lldx%lldx%lld: %s", (long long)s->m,
                  (long long)s->n, (long long)s->k, fp4_err_text(&err));
        if (st == FP4_OK && ref && d) {
            fp4_gemm_problem p;
            memset(&p, 0, sizeof p);
            p.shape = *s;
            p.a = &a;
            p.b = &b;
            p.alpha = alpha;
            for (size_t i = 0; i < NBACKENDS; i++) {
                if (!ops[i] || refused[i]) continue;
                int r = check_shape(ops[i], inst[i], &p, ref, d, stream, cc_major);
                if ((int)i == nvfp4) {
                    nvfp4_tried++;
                    nvfp4_refusals += r;
                }
            }
        }
        fp4_matrix_free(&a);
        fp4_matrix_free(&b);
        free(ref);
        free(d);
    }
    /* Off Blackwell, the FP4 path refused at open() or at every prepare(). */
    if (ops[nvfp4] && !blackwell)
        CHECK_MSG(refused[nvfp4] || nvfp4_refusals == nvfp4_tried,
                  "cublaslt-nvfp4 ran on sm_%d%d, which has no FP4 tensor cores", cc_major,
                  cc_minor);

    /* Bad arguments are errors, not crashes. */
    {
        fp4_matrix a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        test_rng rng = test_rng_seed(12345);
        if (random_matrix(&rng, 4, 32, &a, &err) == FP4_OK &&
            random_matrix(&rng, 8, 32, &b, &err) == FP4_OK) {
            fp4_gemm_problem p;
            memset(&p, 0, sizeof p);
            void *plan = NULL;
            p.shape.m = 4;
            p.shape.n = 8;
            p.shape.k = 64; /* does not match the matrices */
            p.a = &a;
            p.b = &b;
            p.alpha = 1.0f;
            CHECK(ops[0]->prepare(inst[0], &p, 1, &plan, &err) != FP4_OK && plan == NULL);
            p.shape.k = 32;
            CHECK(ops[0]->prepare(inst[0], &p, 0, &plan, &err) == FP4_ERR_INVALID_ARG);
            b.scales[3] = 0x7F; /* an E4M3 NaN: not a scale */
            CHECK(ops[0]->prepare(inst[0], &p, 1, &plan, &err) == FP4_ERR_INVALID_ARG);
            CHECK(plan == NULL);
        }
        fp4_matrix_free(&a);
        fp4_matrix_free(&b);
    }

    for (size_t i = 0; i < NBACKENDS; i++)
        if (ops[i] && inst[i]) ops[i]->close(inst[i]);
    if (stream) cudaStreamDestroy(stream);
    return check_finish("gpu_backends");
}
