/* An external backend, built as a shared object and loaded with --plugin: the
 * example of the plugin ABI (include/fp4/backend.h) and the good case of the
 * loader's tests. It needs nothing from libfp4: it decodes NVFP4 itself and
 * multiplies in double on the CPU, so it verifies against the reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp4/backend.h"

typedef struct plug_plan {
    int64_t m, n, k;
    float alpha;
    double *a, *b; /* dequantized (without global scales) */
    float *d;
} plug_plan;

static double e2m1(unsigned c)
{
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return (c & 8) ? -mag[c & 7] : mag[c & 7];
}

static double ue4m3(unsigned b)
{
    unsigned e = (b >> 3) & 15, m = b & 7;
    return e ? ldexp(1.0 + m / 8.0, (int)e - 7) : ldexp((double)m, -9);
}

static double *decode(const fp4_matrix *x)
{
    double *v = malloc((size_t)x->rows * (size_t)x->cols * sizeof *v);
    if (!v) return NULL;
    for (int64_t r = 0; r < x->rows; r++)
        for (int64_t c = 0; c < x->cols; c++) {
            unsigned byte = x->codes[r * (x->cols / 2) + c / 2];
            unsigned code = (c & 1) ? byte >> 4 : byte & 15;
            v[r * x->cols + c] = e2m1(code) * ue4m3(x->scales[r * (x->cols / 16) + c / 16]);
        }
    return v;
}

static fp4_status plug_open(void **inst, fp4_err *err)
{
    *inst = NULL;
    return FP4_OK;
}

static void plug_close(void *inst)
{
}

static void plug_release(void *p_)
{
    plug_plan *p = p_;
    if (!p) return;
    free(p->a);
    free(p->b);
    free(p->d);
    free(p);
}

static fp4_status plug_prepare(void *inst, const fp4_gemm_problem *pr, int copies, void **out,
                               fp4_err *err)
{
    plug_plan *p = calloc(1, sizeof *p);
    *out = NULL;
    if (!p) return FP4_ERR_NOMEM;
    p->m = pr->shape.m;
    p->n = pr->shape.n;
    p->k = pr->shape.k;
    p->alpha = pr->alpha;
    p->a = decode(pr->a);
    p->b = decode(pr->b);
    p->d = malloc((size_t)p->m * (size_t)p->n * sizeof(float));
    if (!p->a || !p->b || !p->d) {
        plug_release(p);
        return FP4_ERR_NOMEM;
    }
    *out = p;
    return FP4_OK;
}

static fp4_status plug_poison(void *p_, int copy, void *stream, fp4_err *err)
{
    plug_plan *p = p_;
    for (int64_t i = 0; i < p->m * p->n; i++) p->d[i] = NAN;
    return FP4_OK;
}

static fp4_status plug_run(void *p_, int copy, void *stream, fp4_err *err)
{
    plug_plan *p = p_;
    for (int64_t i = 0; i < p->m; i++)
        for (int64_t j = 0; j < p->n; j++) {
            double acc = 0;
            for (int64_t k = 0; k < p->k; k++) acc += p->a[i * p->k + k] * p->b[j * p->k + k];
            p->d[i * p->n + j] = (float)(acc * p->alpha);
        }
    return FP4_OK;
}

static fp4_status plug_read(void *p_, int copy, float *d, fp4_err *err)
{
    plug_plan *p = p_;
    memcpy(d, p->d, (size_t)p->m * (size_t)p->n * sizeof(float));
    return FP4_OK;
}

static const fp4_backend_ops plugin_ops = {
    .api_version = FP4_BACKEND_API_VERSION,
    .name = "plugin-good",
    .summary = "example plugin: double-precision CPU GEMM",
    .flags = 0,
    .math = FP4_MATH_CPU,
    .tol_max = 1e-5,
    .tol_norm = 1e-5,
    .open = plug_open,
    .close = plug_close,
    .prepare = plug_prepare,
    .poison = plug_poison,
    .run = plug_run,
    .read_output = plug_read,
    .release = plug_release,
};

const fp4_backend_ops *fp4_backend_entry(void);
const fp4_backend_ops *fp4_backend_entry(void)
{
    return &plugin_ops;
}
