/* MoE backend "moe-cpu-ref": the exact references of src/moe behind the MoE
 * backend interface, so that `fp4bench moe` runs (and is checked) on a machine
 * without a GPU: the grouped W4A4 / W4A16 references per step, the weighted
 * combine for down, fp4_moe_layer_ref with the problem's static encode scales
 * for the layer. Output fp32 per copy; odd copies compute from the negated
 * input. Only small problems: every call is the exact CPU computation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/moe_backends.h"

/* The most multiply-accumulates a call may take: on 2 cores the exact
 * references run at about 1 GMAC/s, and the engine times at least 10 calls. */
#define CPU_REF_MAX_MACS 2e9

typedef struct moe_cpu_plan {
    const fp4_moe_problem *p; /* the caller keeps it valid until release */
    float *out;               /* [copies][count] */
    float *d;                 /* down: [T*k, H] per pair, before the combine */
    size_t count;
    int copies;
} moe_cpu_plan;

static fp4_status cpu_open(void **inst, fp4_err *err)
{
    *inst = NULL;
    return FP4_OK;
}

static void cpu_close(void *inst)
{
}

/* Multiply-accumulates of one call of the step. */
static double step_macs(const fp4_moe_problem *p)
{
    const double pairs = (double)p->tokens * p->dims.top_k, h = (double)p->dims.hidden,
                 i = (double)p->dims.inter;
    switch (p->step) {
    case FP4_MOE_STEP_GATE_UP: return pairs * 2 * i * h;
    case FP4_MOE_STEP_DOWN: return pairs * h * i;
    case FP4_MOE_STEP_LAYER: return pairs * 3 * i * h;
    }
    return 0;
}

static fp4_status cpu_supports(void *inst, const fp4_moe_problem *p, fp4_err *err)
{
    const double macs = step_macs(p);
    if (macs > CPU_REF_MAX_MACS)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "moe-cpu-ref: %.3g multiply-adds a call, more than the %.3g the exact CPU "
                        "reference is timed for (use small --dims or fewer --tokens)",
                        macs, CPU_REF_MAX_MACS);
    return FP4_OK;
}

static void cpu_release(void *plan_)
{
    moe_cpu_plan *plan = plan_;
    if (!plan) return;
    free(plan->out);
    free(plan->d);
    free(plan);
}

static fp4_status cpu_prepare(void *inst, const fp4_moe_problem *p, int copies, void **out,
                              fp4_err *err)
{
    fp4_status st;
    size_t bytes;
    *out = NULL;
    if ((st = fp4_moe_problem_check(p, copies, err)) != FP4_OK) return st;
    if ((st = cpu_supports(inst, p, err)) != FP4_OK) return st;
    moe_cpu_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return fp4_fail(err, FP4_ERR_NOMEM, "moe-cpu-ref: no memory");
    plan->p = p;
    plan->copies = copies;
    plan->count = (size_t)fp4_moe_output_rows(p) * (size_t)fp4_moe_output_cols(p);
    if (fp4_size_mul3(plan->count, (size_t)copies, sizeof(float), &bytes) ||
        !(plan->out = malloc(bytes))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "moe-cpu-ref: no memory for %d outputs", copies);
        goto fail;
    }
    if (p->step == FP4_MOE_STEP_DOWN &&
        !(plan->d = malloc((size_t)p->plan->pairs * (size_t)p->dims.hidden * sizeof(float)))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "moe-cpu-ref: no memory for the per-pair outputs");
        goto fail;
    }
    *out = plan;
    return FP4_OK;
fail:
    cpu_release(plan);
    return st;
}

static float *cpu_out(moe_cpu_plan *plan, int copy, fp4_err *err)
{
    if (copy < 0 || copy >= plan->copies) {
        fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-cpu-ref: copy %d of %d", copy, plan->copies);
        return NULL;
    }
    return plan->out + (size_t)copy * plan->count;
}

static fp4_status cpu_poison(void *plan_, int copy, void *stream, fp4_err *err)
{
    moe_cpu_plan *plan = plan_;
    float *o = cpu_out(plan, copy, err);
    if (!o) return FP4_ERR_INVALID_ARG;
    for (size_t i = 0; i < plan->count; i++) o[i] = NAN;
    return FP4_OK;
}

static fp4_status cpu_run(void *plan_, int copy, void *stream, fp4_err *err)
{
    moe_cpu_plan *plan = plan_;
    const fp4_moe_problem *p = plan->p;
    const fp4_moe_weights *w = p->weights;
    float *o = cpu_out(plan, copy, err);
    fp4_status st;
    if (!o) return FP4_ERR_INVALID_ARG;
    switch (p->step) {
    case FP4_MOE_STEP_GATE_UP:
        if (p->mode == FP4_MOE_W4A4)
            return fp4_moe_grouped_ref_w4a4(fp4_moe_problem_a(p, copy), FP4_MOE_A_PER_TOKEN,
                                            w->gate_up, p->plan, o, 0, err);
        return fp4_moe_grouped_ref_w4a16(fp4_moe_problem_a_bf16(p, copy), p->a_rows, p->a_cols,
                                         FP4_MOE_A_PER_TOKEN, w->gate_up, p->plan, o, 0, err);
    case FP4_MOE_STEP_DOWN:
        if (p->mode == FP4_MOE_W4A4)
            st = fp4_moe_grouped_ref_w4a4(fp4_moe_problem_a(p, copy), FP4_MOE_A_PER_PAIR, w->down,
                                          p->plan, plan->d, 0, err);
        else
            st = fp4_moe_grouped_ref_w4a16(fp4_moe_problem_a_bf16(p, copy), p->a_rows, p->a_cols,
                                           FP4_MOE_A_PER_PAIR, w->down, p->plan, plan->d, 0, err);
        if (st != FP4_OK) return st;
        return fp4_moe_combine(plan->d, p->dims.hidden, p->routing, o, err);
    case FP4_MOE_STEP_LAYER: {
        fp4_moe_layer_opts lo;
        fp4_moe_layer_out io;
        memset(&lo, 0, sizeof lo);
        memset(&io, 0, sizeof io);
        lo.mode = p->mode;
        lo.x_encode_scale = p->a_encode_scale;
        lo.h_encode_scale = p->h_encode_scale;
        io.out = o;
        return fp4_moe_layer_ref(&p->dims, w, fp4_moe_problem_a_bf16(p, copy), p->routing, &lo, &io,
                                 err);
    }
    }
    return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-cpu-ref: unknown step %d", (int)p->step);
}

static fp4_status cpu_read(void *plan_, int copy, float *out, fp4_err *err)
{
    moe_cpu_plan *plan = plan_;
    const float *o = cpu_out(plan, copy, err);
    if (!o) return FP4_ERR_INVALID_ARG;
    memcpy(out, o, plan->count * sizeof *out);
    return FP4_OK;
}

static const char *cpu_variant(void *plan_)
{
    const moe_cpu_plan *plan = plan_;
    if (plan->p->step == FP4_MOE_STEP_LAYER) return "fp4_moe_layer_ref";
    return plan->p->mode == FP4_MOE_W4A4 ? "fp4_moe_grouped_ref_w4a4" : "fp4_moe_grouped_ref_w4a16";
}

const fp4_moe_backend_ops fp4_moe_backend_cpu_ref = {
    .api_version = FP4_MOE_BACKEND_API_VERSION,
    .name = "moe-cpu-ref",
    .summary = "the exact CPU references of every step (small sizes only)",
    .flags = FP4_BACKEND_REFERENCE,
    .math = FP4_MATH_CPU,
    .wformat = FP4_MOE_WEIGHTS_NVFP4,
    .tol_max = 0.0, /* the reference: equal to the engine's, bit for bit */
    .tol_norm = 0.0,
    .open = cpu_open,
    .close = cpu_close,
    .supports = cpu_supports,
    .prepare = cpu_prepare,
    .poison = cpu_poison,
    .run = cpu_run,
    .read_output = cpu_read,
    .release = cpu_release,
    .variant = cpu_variant,
};
