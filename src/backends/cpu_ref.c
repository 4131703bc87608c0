/* Backend "cpu-ref": the exact CPU reference GEMM (reference/gemm_ref.c) behind
 * the backend interface, so that the program runs (and is checked) on a
 * machine without a GPU. Output fp32; copies are ignored (there is no L2 to
 * keep cold that matters at these speeds). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"

typedef struct cpu_plan {
    fp4_matrix a, b; /* own copies: the engine may free its inputs */
    float alpha;
    float *d;
    size_t count;
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
    fp4_matrix_free(&plan->b);
    free(plan->d);
    free(plan);
}

static fp4_status cpu_prepare(void *inst, const fp4_gemm_problem *p, int copies, void **out,
                              fp4_err *err)
{
    fp4_status st;
    cpu_plan *plan;
    *out = NULL;
    if ((st = fp4_shape_check(&p->shape, err)) != FP4_OK) return st;
    plan = calloc(1, sizeof *plan);
    if (!plan) return fp4_fail(err, FP4_ERR_NOMEM, "cpu-ref: no memory");
    plan->alpha = p->alpha;
    plan->count = (size_t)p->shape.m * (size_t)p->shape.n;
    plan->d = malloc(plan->count * sizeof(float));
    if (!plan->d) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "cpu-ref: no memory for the output");
        goto fail;
    }
    if ((st = fp4_matrix_copy(&plan->a, p->a, err)) != FP4_OK) goto fail;
    if ((st = fp4_matrix_copy(&plan->b, p->b, err)) != FP4_OK) goto fail;
    *out = plan;
    return FP4_OK;
fail:
    cpu_release(plan);
    return st;
}

static fp4_status cpu_poison(void *plan_, int copy, void *stream, fp4_err *err)
{
    cpu_plan *plan = plan_;
    for (size_t i = 0; i < plan->count; i++) plan->d[i] = NAN;
    return FP4_OK;
}

static fp4_status cpu_run(void *plan_, int copy, void *stream, fp4_err *err)
{
    cpu_plan *plan = plan_;
    return fp4_gemm_reference(&plan->a, &plan->b, plan->alpha, plan->d, 0, err);
}

static fp4_status cpu_read(void *plan_, int copy, float *d, fp4_err *err)
{
    cpu_plan *plan = plan_;
    memcpy(d, plan->d, plan->count * sizeof(float));
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
