/* Backend "cpu-ref": the exact CPU reference GEMM (reference/gemm_ref.c) behind
 * the backend interface, so that the program runs (and is checked) on a
 * machine without a GPU. Output fp32, one buffer per copy; odd copies compute
 * with the problem's a_odd (-A), as the interface asks of every backend (the
 * engine gives CPU rows one copy; the Python bench may give more). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"

typedef struct cpu_plan {
    fp4_matrix a, a_odd, b; /* own copies: the engine may free its inputs */
    int has_odd;            /* a_odd given: odd copies compute with it */
    float alpha;
    float *d;               /* [copies][count] */
    size_t count;           /* m * n */
    int copies;
} cpu_plan;

static fp4_status cpu_open(void **inst, fp4_err *err)
{
    *inst = NULL;
    return FP4_OK;
}

static void cpu_close(void *inst)
{
}

static void cpu_release(void *plan_)
{
    cpu_plan *plan = plan_;
    if (!plan) return;
    fp4_matrix_free(&plan->a);
    fp4_matrix_free(&plan->a_odd);
    fp4_matrix_free(&plan->b);
    free(plan->d);
    free(plan);
}

static fp4_status cpu_prepare(void *inst, const fp4_gemm_problem *p, int copies, void **out,
                              fp4_err *err)
{
    fp4_status st;
    cpu_plan *plan;
    size_t bytes;
    *out = NULL;
    if ((st = fp4_gemm_problem_check(p, copies, err)) != FP4_OK) return st;
    plan = calloc(1, sizeof *plan);
    if (!plan) return fp4_fail(err, FP4_ERR_NOMEM, "cpu-ref: no memory");
    plan->alpha = p->alpha;
    plan->count = (size_t)p->shape.m * (size_t)p->shape.n;
    plan->copies = copies;
    if (fp4_size_mul3(plan->count, (size_t)copies, sizeof(float), &bytes) != 0) {
        st = fp4_fail(err, FP4_ERR_OVERFLOW, "cpu-ref: %d copies of the output overflow", copies);
        goto fail;
    }
    plan->d = malloc(bytes);
    if (!plan->d) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "cpu-ref: no memory for the output");
        goto fail;
    }
    if ((st = fp4_matrix_copy(&plan->a, p->a, err)) != FP4_OK) goto fail;
    if ((st = fp4_matrix_copy(&plan->b, p->b, err)) != FP4_OK) goto fail;
    if (p->a_odd) {
        if ((st = fp4_matrix_copy(&plan->a_odd, p->a_odd, err)) != FP4_OK) goto fail;
        plan->has_odd = 1;
    }
    *out = plan;
    return FP4_OK;
fail:
    cpu_release(plan);
    return st;
}

/* Copy `copy`'s output buffer, NULL (and err set) for a copy out of range. */
static float *cpu_out(cpu_plan *plan, int copy, fp4_err *err)
{
    if (copy < 0 || copy >= plan->copies) {
        fp4_fail(err, FP4_ERR_INVALID_ARG, "cpu-ref: copy %d of %d", copy, plan->copies);
        return NULL;
    }
    return plan->d + (size_t)copy * plan->count;
}

static fp4_status cpu_poison(void *plan_, int copy, void *stream, fp4_err *err)
{
    cpu_plan *plan = plan_;
    float *d = cpu_out(plan, copy, err);
    if (!d) return FP4_ERR_INVALID_ARG;
    for (size_t i = 0; i < plan->count; i++) d[i] = NAN;
    return FP4_OK;
}

static fp4_status cpu_run(void *plan_, int copy, void *stream, fp4_err *err)
{
    cpu_plan *plan = plan_;
    float *d = cpu_out(plan, copy, err);
    const fp4_matrix *a = (copy & 1) && plan->has_odd ? &plan->a_odd : &plan->a;
    if (!d) return FP4_ERR_INVALID_ARG;
    return fp4_gemm_reference(a, &plan->b, plan->alpha, d, 0, err);
}

static fp4_status cpu_read(void *plan_, int copy, float *d, fp4_err *err)
{
    cpu_plan *plan = plan_;
    const float *src = cpu_out(plan, copy, err);
    if (!src) return FP4_ERR_INVALID_ARG;
    memcpy(d, src, plan->count * sizeof(float));
    return FP4_OK;
}

/* Bytes the reference touches at least: the NVFP4 operands with plain scales,
 * and D in fp32. */
static double cpu_bytes(const fp4_shape *s)
{
    return (double)(s->m + s->n) * (double)s->k * (0.5 + 1.0 / 16) + 4.0 * (double)s->m * (double)s->n;
}

const fp4_backend_ops fp4_backend_cpu_ref = {
    .api_version = FP4_BACKEND_API_VERSION,
    .name = "cpu-ref",
    .summary = "exact CPU reference (integer accumulation, pthreads)",
    .flags = FP4_BACKEND_REFERENCE,
    .math = FP4_MATH_CPU,
    .tol_max = 0.0,
    .tol_norm = 0.0,
    .open = cpu_open,
    .close = cpu_close,
    .supports = NULL,
    .prepare = cpu_prepare,
    .poison = cpu_poison,
    .run = cpu_run,
    .read_output = cpu_read,
    .release = cpu_release,
    .bytes_moved = cpu_bytes,
};
