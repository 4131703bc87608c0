/* Planted faults, as plugins: each wraps a built-in backend and breaks it in
 * one way that the engine must catch (the row FAILED, fp4bench exits 1).
 * Built three times with -DFP4_FAULT=N (tests/CMakeLists.txt):
 *   1 fault-ignores-copy  fp4-sm90 that always computes copy 0
 *   2 fault-quantizer     the GPU quantizer fed an input one code off from the
 *                         CPU quantizer's (its output disagrees by one code)
 *   3 fault-fp8-alpha     cublaslt-fp8 with a 5% wrong alpha in the GEMM, while
 *                         its exact own-operand reference keeps the right one
 * The built-ins come from the program through fp4_backend_find (fp4bench
 * exports the library's symbols to plugins). */
#include <stdlib.h>
#include <string.h>

#include "fp4/backend.h"

#ifndef FP4_FAULT
#define FP4_FAULT 1
#endif

#if FP4_FAULT == 1
#define INNER "fp4-sm90"
#define NAME "fault-ignores-copy"
#elif FP4_FAULT == 2
#define INNER "quantize"
#define NAME "fault-quantizer"
#else
#define INNER "cublaslt-fp8"
#define NAME "fault-fp8-alpha"
#define ALPHA_ERROR 1.05
#endif

typedef struct fault_inst {
    const fp4_backend_ops *inner;
    void *inst;
} fault_inst;

typedef struct fault_plan {
    const fp4_backend_ops *inner;
    void *plan;
} fault_plan;

static fp4_status fault_open(void **inst, fp4_err *err)
{
    fault_inst *f = calloc(1, sizeof *f);
    if (!f) return fp4_fail(err, FP4_ERR_NOMEM, NAME ": no memory");
    f->inner = fp4_backend_find(INNER);
    fp4_status st = f->inner ? f->inner->open(&f->inst, err)
                             : fp4_fail(err, FP4_ERR_UNSUPPORTED, NAME ": no " INNER " here");
    if (st != FP4_OK) {
        free(f);
        return st;
    }
    *inst = f;
    return FP4_OK;
}

static void fault_close(void *inst)
{
    fault_inst *f = inst;
    f->inner->close(f->inst);
    free(f);
}

static fp4_status fault_supports(void *inst, const fp4_shape *s, fp4_err *err)
{
    fault_inst *f = inst;
    return f->inner->supports ? f->inner->supports(f->inst, s, err) : FP4_OK;
}

static fp4_status fault_prepare(void *inst, const fp4_gemm_problem *p, int copies, void **plan,
                                fp4_err *err)
{
    fault_inst *f = inst;
    fault_plan *fp = calloc(1, sizeof *fp);
    fp4_gemm_problem q = *p;
    uint16_t *x = NULL;
    if (!fp) return fp4_fail(err, FP4_ERR_NOMEM, NAME ": no memory");
    fp->inner = f->inner;
#if FP4_FAULT == 2
    /* element 0 of the bf16 input moved to the value one code below (or
     * above, for a zero) of what the CPU quantizer made of it */
    if (p->a_bf16) {
        const size_t n = (size_t)p->shape.m * (size_t)p->shape.k;
        x = malloc(n * sizeof *x);
        if (!x) {
            free(fp);
            return fp4_fail(err, FP4_ERR_NOMEM, NAME ": no memory");
        }
        memcpy(x, p->a_bf16, n * sizeof *x);
        const uint8_t code = p->a->codes[0] & 15, mag = code & 7;
        const uint8_t moved = (uint8_t)((code & 8) | (mag ? mag - 1 : 1));
        const float v = fp4_e2m1_decode(moved) * fp4_e4m3_decode(p->a->scales[0]) * p->a->global_scale;
        x[0] = fp4_bf16_from_float(v);
        q.a_bf16 = x;
    }
#elif FP4_FAULT == 3
    q.alpha = (float)(p->alpha * ALPHA_ERROR);
#endif
    fp4_status st = f->inner->prepare(f->inst, &q, copies, &fp->plan, err);
    free(x);
    if (st != FP4_OK) {
        free(fp);
        return st;
    }
    *plan = fp;
    return FP4_OK;
}

static fp4_status fault_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    fault_plan *fp = plan;
    return fp->inner->poison(fp->plan, copy, stream, err);
}

static fp4_status fault_run(void *plan, int copy, void *stream, fp4_err *err)
{
    fault_plan *fp = plan;
#if FP4_FAULT == 1
    copy = 0; /* the fault: every call computes copy 0's operands */
#endif
    return fp->inner->run(fp->plan, copy, stream, err);
}

static fp4_status fault_read(void *plan, int copy, float *d, fp4_err *err)
{
    fault_plan *fp = plan;
    return fp->inner->read_output(fp->plan, copy, d, err);
}

static void fault_release(void *plan)
{
    fault_plan *fp = plan;
    fp->inner->release(fp->plan);
    free(fp);
}

#if FP4_FAULT == 3
/* the exact product of the rounded operands with the right alpha */
static double fault_own_reference(void *plan, int64_t row, int64_t col)
{
    fault_plan *fp = plan;
    return fp->inner->own_reference(fp->plan, row, col) / ALPHA_ERROR;
}
#endif

/* the wrapped backend's flags, math and tolerances, restated */
#if FP4_FAULT == 1
#define FLAGS FP4_BACKEND_GPU
#define MATH FP4_MATH_BF16_TC
#define TOL_MAX 1e-2
#define TOL_NORM 5e-3
#define OWN_REF NULL
#define OWN_TOL 0.0
#elif FP4_FAULT == 2
#define FLAGS (FP4_BACKEND_GPU | FP4_BACKEND_NOT_GEMM | FP4_BACKEND_FROM_BF16)
#define MATH FP4_MATH_CUDA_CORES
#define TOL_MAX 0.0
#define TOL_NORM 0.0
#define OWN_REF NULL
#define OWN_TOL 0.0
#else
#define FLAGS (FP4_BACKEND_GPU | FP4_BACKEND_LOSSY)
#define MATH FP4_MATH_FP8_TC
#define TOL_MAX 0.15
#define TOL_NORM 0.08
#define OWN_REF fault_own_reference
#define OWN_TOL 1e-2
#endif

static const fp4_backend_ops fault_ops = {
    .api_version = FP4_BACKEND_API_VERSION,
    .name = NAME,
    .summary = "planted fault (tests/plugins/plugin_fault.c): must FAIL",
    .flags = FLAGS,
    .math = MATH,
    .tol_max = TOL_MAX,
    .tol_norm = TOL_NORM,
    .open = fault_open,
    .close = fault_close,
    .supports = fault_supports,
    .prepare = fault_prepare,
    .poison = fault_poison,
    .run = fault_run,
    .read_output = fault_read,
    .release = fault_release,
    .own_reference = OWN_REF,
    .own_tol = OWN_TOL,
};

const fp4_backend_ops *fp4_backend_entry(void);
const fp4_backend_ops *fp4_backend_entry(void)
{
    return &fault_ops;
}
