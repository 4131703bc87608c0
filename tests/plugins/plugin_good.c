/* An external backend, built as a shared object and loaded with --plugin: the
 * CPU example of the plugin ABI (include/fp4/backend.h, docs/PLUGINS.md) and
 * the good case of the loader's tests. It decodes each copy's operands with
 * the library (fp4_matrix_get), multiplies in double and reports errors with
 * fp4_fail: loading it also checks that the host exports libfp4 to plugins.
 *
 * Build, from the repository root (libfp4's symbols come from the host):
 *   cc -std=c11 -O2 -shared -fPIC -Iinclude tests/plugins/plugin_good.c -o plugin_good.so
 * Run:
 *   fp4bench run --plugin ./plugin_good.so --backend plugin-good --shape 16x256x512
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp4/backend.h"

/* Multiply-adds above which this slow example says "unsupported" rather
 * than keep a benchmark waiting for minutes. */
#define GOOD_MAX_MACS (1ull << 33)

/* The operands decoded to floats (e2m1 * scale is exact in a float),
 * without the global scales, which alpha carries. */
typedef struct good_plan {
    fp4_shape shape;
    double alpha;
    int copies;
    float *a_even, *a_odd; /* A of even copies, and of odd ones (-A); a_odd may be a_even */
    float *b;
    float *d;              /* [copies][m * n] */
} good_plan;

/* Every valid shape up to GOOD_MAX_MACS multiply-adds. */
static fp4_status good_supports(void *inst, const fp4_shape *s, fp4_err *err)
{
    fp4_status st = fp4_shape_check(s, err);
    if (st != FP4_OK) return st;
    if ((double)s->m * (double)s->n * (double)s->k > (double)GOOD_MAX_MACS)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "plugin-good: more than 2^33 multiply-adds, too slow for "
                        "a CPU example");
    return FP4_OK;
}

/* x decoded to a malloc'ed [rows, cols] array of floats; NULL when out of
 * memory. */
static float *decode(const fp4_matrix *x)
{
    float *v = malloc((size_t)x->rows * (size_t)x->cols * sizeof *v);
    if (!v) return NULL;
    for (int64_t r = 0; r < x->rows; r++)
        for (int64_t c = 0; c < x->cols; c++) v[r * x->cols + c] = fp4_matrix_get(x, r, c);
    return v;
}

static fp4_status good_open(void **inst, fp4_err *err)
{
    *inst = NULL; /* no state: nothing to open */
    return FP4_OK;
}

static void good_close(void *inst)
{
}

static void good_release(void *plan)
{
    good_plan *p = plan;
    if (!p) return;
    if (p->a_odd != p->a_even) free(p->a_odd);
    free(p->a_even);
    free(p->b);
    free(p->d);
    free(p);
}

/* Decodes A (and -A for odd copies, when there are any) and B once; every
 * copy gets its own output. On failure nothing is left allocated. */
static fp4_status good_prepare(void *inst, const fp4_gemm_problem *pr, int copies, void **out,
                               fp4_err *err)
{
    good_plan *p;
    size_t d_count;
    fp4_status st;
    *out = NULL;
    if (!pr || !pr->a || !pr->b || copies < 1)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "plugin-good: no problem or copies = %d", copies);
    if ((st = good_supports(inst, &pr->shape, err)) != FP4_OK) return st;
    if (pr->a->rows != pr->shape.m || pr->a->cols != pr->shape.k || pr->b->rows != pr->shape.n ||
        pr->b->cols != pr->shape.k)
        return fp4_fail(err, FP4_ERR_SHAPE, "plugin-good: operands do not match the shape");
    if (fp4_size_mul3((size_t)pr->shape.m * (size_t)pr->shape.n, (size_t)copies, sizeof(float), &d_count))
        return fp4_fail(err, FP4_ERR_OVERFLOW, "plugin-good: %d outputs overflow", copies);
    p = calloc(1, sizeof *p);
    if (!p) return fp4_fail(err, FP4_ERR_NOMEM, "plugin-good: no memory for the plan");
    p->shape = pr->shape;
    p->alpha = pr->alpha;
    p->copies = copies;
    p->a_even = decode(fp4_problem_a(pr, 0));
    /* odd copies compute with their own A: a backend that ignored the copy
     * index would give +D where the engine expects -D */
    p->a_odd = copies > 1 && fp4_problem_a(pr, 1) != fp4_problem_a(pr, 0) ? decode(fp4_problem_a(pr, 1))
                                                                           : p->a_even;
    p->b = decode(pr->b);
    p->d = malloc(d_count);
    if (!p->a_even || !p->a_odd || !p->b || !p->d) {
        good_release(p);
        return fp4_fail(err, FP4_ERR_NOMEM, "plugin-good: no memory for the decoded operands");
    }
    *out = p;
    return FP4_OK;
}

/* Copy `copy`'s output, or NULL (with err) when there is no such copy. */
static float *output_of(good_plan *p, int copy, fp4_err *err)
{
    if (copy < 0 || copy >= p->copies) {
        fp4_fail(err, FP4_ERR_INVALID_ARG, "plugin-good: copy %d of %d", copy, p->copies);
        return NULL;
    }
    return p->d + (size_t)copy * (size_t)p->shape.m * (size_t)p->shape.n;
}

static fp4_status good_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    good_plan *p = plan;
    float *d = output_of(p, copy, err);
    if (!d) return FP4_ERR_INVALID_ARG;
    for (int64_t i = 0; i < p->shape.m * p->shape.n; i++) d[i] = NAN;
    return FP4_OK;
}

/* D = alpha * A_copy B^T, accumulated in double (its rounding errors lie
 * far below the tolerance), rounded once to float. */
static fp4_status good_run(void *plan, int copy, void *stream, fp4_err *err)
{
    good_plan *p = plan;
    float *d = output_of(p, copy, err);
    const float *a = (copy & 1) ? p->a_odd : p->a_even;
    const int64_t m = p->shape.m, n = p->shape.n, k = p->shape.k;
    if (!d) return FP4_ERR_INVALID_ARG;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t kk = 0; kk < k; kk++) acc += (double)a[i * k + kk] * (double)p->b[j * k + kk];
            d[i * n + j] = (float)(acc * p->alpha);
        }
    return FP4_OK;
}

static fp4_status good_read_output(void *plan, int copy, float *out, fp4_err *err)
{
    good_plan *p = plan;
    const float *d = output_of(p, copy, err);
    if (!d) return FP4_ERR_INVALID_ARG;
    memcpy(out, d, (size_t)p->shape.m * (size_t)p->shape.n * sizeof *out);
    return FP4_OK;
}

static const char *good_variant(void *plan)
{
    return "double-accumulation";
}

static const fp4_backend_ops good_ops = {
    .api_version = FP4_BACKEND_API_VERSION,
    .name = "plugin-good",
    .summary = "example plugin: NVFP4 decoded by libfp4, double-precision CPU GEMM",
    .flags = 0, /* a CPU contender with exact operands */
    .math = FP4_MATH_CPU,
    .tol_max = 1e-5, /* one float rounding of an exact-enough double sum */
    .tol_norm = 1e-5,
    .open = good_open,
    .close = good_close,
    .supports = good_supports,
    .prepare = good_prepare,
    .poison = good_poison,
    .run = good_run,
    .read_output = good_read_output,
    .release = good_release,
    .variant = good_variant,
};

/* The one symbol the loader looks for. */
const fp4_backend_ops *fp4_backend_entry(void);
const fp4_backend_ops *fp4_backend_entry(void)
{
    return &good_ops;
}
