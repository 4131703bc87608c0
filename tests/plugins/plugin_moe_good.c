/* An external MoE backend, built as a shared object and loaded with
 * `fp4bench moe --plugin`: the CPU example of the MoE plugin ABI
 * (include/fp4/moe_backend.h, docs/PLUGINS.md "MoE backends") and the good
 * case of its tests. gate_up and down, W4A4 and W4A16: each expert's weight
 * decoded once with the library (fp4_matrix_get), every (token, slot) pair
 * multiplied against its expert in double, the down outputs combined with the
 * routing weights. It reads the routing and the inputs the problem gives, odd
 * copies from their own (negated) input.
 *
 * Build, from the repository root (libfp4's symbols come from the host):
 *   cc -std=c11 -O2 -shared -fPIC -Iinclude tests/plugins/plugin_moe_good.c -o plugin_moe_good.so
 * Run:
 *   fp4bench moe --plugin ./plugin_moe_good.so --dims 256,128,16,4 --tokens 8,64
 *
 * MOE_GOOD_VARIANT (tests/CMakeLists.txt) makes the variants the tests load:
 * 1 named as the built-in reference and 3 flagged as an exact reference (the
 * loader refuses both), 2 computing odd copies from the even copies' input
 * (the engine must report it FAILED). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp4/moe_backend.h"

#ifndef MOE_GOOD_VARIANT
#define MOE_GOOD_VARIANT 0
#endif
#if MOE_GOOD_VARIANT == 1
#define MOE_GOOD_NAME "moe-cpu-ref"
#elif MOE_GOOD_VARIANT == 2
#define MOE_GOOD_NAME "moe-plugin-copyless"
#elif MOE_GOOD_VARIANT == 3
#define MOE_GOOD_NAME "moe-plugin-reference"
#else
#define MOE_GOOD_NAME "moe-plugin-good"
#endif

/* Multiply-adds a call, and decoded weight values, above which this slow
 * example says "unsupported" rather than keep a benchmark waiting. */
#define GOOD_MAX_MACS 1e9
#define GOOD_MAX_WEIGHTS (64ll << 20)

typedef struct good_plan {
    const fp4_moe_problem *p; /* valid until release */
    int copies;
    int64_t n, k;             /* the step's GEMM: each pair's row [k] times W_e^T [n, k] */
    float *w;                 /* every expert's weight decoded, [E][n][k] */
    double *in;               /* one pair's input row [k] */
    double *pair;             /* one pair's outputs [n] */
    float *out;               /* [copies][output rows x cols] */
    size_t count;             /* outputs of a copy */
} good_plan;

static fp4_status good_open(void **inst, fp4_err *err)
{
    *inst = NULL; /* no state */
    return FP4_OK;
}

static void good_close(void *inst)
{
}

static fp4_status good_supports(void *inst, const fp4_moe_problem *p, fp4_err *err)
{
    if (p->step == FP4_MOE_STEP_LAYER)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, MOE_GOOD_NAME ": gate_up and down only");
    const double n = p->step == FP4_MOE_STEP_GATE_UP ? 2.0 * p->dims.inter : (double)p->dims.hidden;
    const double k = p->step == FP4_MOE_STEP_GATE_UP ? (double)p->dims.hidden : (double)p->dims.inter;
    if ((double)p->tokens * p->dims.top_k * n * k > GOOD_MAX_MACS ||
        (double)p->dims.experts * n * k > (double)GOOD_MAX_WEIGHTS)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, MOE_GOOD_NAME ": too large for a CPU example (at most "
                        "%.0e multiply-adds a call and %lld weights)", GOOD_MAX_MACS,
                        (long long)GOOD_MAX_WEIGHTS);
    return FP4_OK;
}

static void good_release(void *plan_)
{
    good_plan *plan = plan_;
    if (!plan) return;
    free(plan->w);
    free(plan->in);
    free(plan->pair);
    free(plan->out);
    free(plan);
}

static fp4_status good_prepare(void *inst, const fp4_moe_problem *p, int copies, void **out,
                               fp4_err *err)
{
    fp4_status st;
    *out = NULL;
    if ((st = fp4_moe_problem_check(p, copies, err)) != FP4_OK) return st;
    if ((st = good_supports(inst, p, err)) != FP4_OK) return st;
    good_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return fp4_fail(err, FP4_ERR_NOMEM, MOE_GOOD_NAME ": no memory");
    plan->p = p;
    plan->copies = copies;
    plan->n = fp4_moe_output_cols(p);
    plan->k = p->a_cols;
    plan->count = (size_t)fp4_moe_output_rows(p) * (size_t)plan->n;
    const fp4_matrix *w = p->step == FP4_MOE_STEP_GATE_UP ? p->weights->gate_up : p->weights->down;
    const size_t per_expert = (size_t)plan->n * (size_t)plan->k;
    plan->w = malloc((size_t)p->dims.experts * per_expert * sizeof *plan->w);
    plan->in = malloc((size_t)plan->k * sizeof *plan->in);
    plan->pair = malloc((size_t)plan->n * sizeof *plan->pair);
    plan->out = malloc((size_t)copies * plan->count * sizeof *plan->out);
    if (!plan->w || !plan->in || !plan->pair || !plan->out) {
        good_release(plan);
        return fp4_fail(err, FP4_ERR_NOMEM, MOE_GOOD_NAME ": no memory for the decoded weights");
    }
    for (int e = 0; e < p->dims.experts; e++)
        for (int64_t r = 0; r < plan->n; r++)
            for (int64_t c = 0; c < plan->k; c++)
                plan->w[e * per_expert + (size_t)(r * plan->k + c)] = fp4_matrix_get(&w[e], r, c);
    *out = plan;
    return FP4_OK;
}

static float *output_of(good_plan *plan, int copy, fp4_err *err)
{
    if (copy < 0 || copy >= plan->copies) {
        fp4_fail(err, FP4_ERR_INVALID_ARG, MOE_GOOD_NAME ": copy %d of %d", copy, plan->copies);
        return NULL;
    }
    return plan->out + (size_t)copy * plan->count;
}

static fp4_status good_poison(void *plan_, int copy, void *stream, fp4_err *err)
{
    good_plan *plan = plan_;
    float *o = output_of(plan, copy, err);
    if (!o) return FP4_ERR_INVALID_ARG;
    for (size_t i = 0; i < plan->count; i++) o[i] = NAN;
    return FP4_OK;
}

/* Element c of input row `row` of copy `copy`, without the global scale. */
static double input_at(const fp4_moe_problem *p, int copy, int64_t row, int64_t c)
{
    if (p->mode == FP4_MOE_W4A4) return fp4_matrix_get(fp4_moe_problem_a(p, copy), row, c);
    return fp4_bf16_to_float(fp4_moe_problem_a_bf16(p, copy)[row * p->a_cols + c]);
}

/* gate_up: y[pair] = gs * x[token] . W_e^T; down: out[t] = sum_j w[t, j] *
 * (gs * h[pair] . W_e^T), pairs t*k + j. */
static fp4_status good_run(void *plan_, int copy, void *stream, fp4_err *err)
{
    good_plan *plan = plan_;
    const fp4_moe_problem *p = plan->p;
    float *o = output_of(plan, copy, err);
    if (!o) return FP4_ERR_INVALID_ARG;
    const int in_copy = MOE_GOOD_VARIANT == 2 ? copy & ~1 : copy;
    const int gate_up = p->step == FP4_MOE_STEP_GATE_UP, k = p->dims.top_k;
    const fp4_matrix *w = gate_up ? p->weights->gate_up : p->weights->down;
    const double a_global = p->mode == FP4_MOE_W4A4 ? fp4_moe_problem_a(p, in_copy)->global_scale : 1.0;
    if (!gate_up) memset(o, 0, plan->count * sizeof *o);
    for (int64_t pair = 0; pair < p->tokens * k; pair++) {
        const int e = p->routing->expert_ids[pair];
        const int64_t row = gate_up ? pair / k : pair;
        const float *we = plan->w + (size_t)e * (size_t)plan->n * (size_t)plan->k;
        const double gs = a_global * w[e].global_scale;
        for (int64_t i = 0; i < plan->k; i++) plan->in[i] = input_at(p, in_copy, row, i);
        for (int64_t c = 0; c < plan->n; c++) {
            double acc = 0.0;
            for (int64_t i = 0; i < plan->k; i++) acc += plan->in[i] * (double)we[c * plan->k + i];
            plan->pair[c] = gs * acc;
        }
        if (gate_up) {
            for (int64_t c = 0; c < plan->n; c++) o[pair * plan->n + c] = (float)plan->pair[c];
        } else {
            const double rw = p->routing->weights[pair];
            float *ot = o + (pair / k) * plan->n;
            for (int64_t c = 0; c < plan->n; c++) ot[c] = (float)((double)ot[c] + rw * plan->pair[c]);
        }
    }
    return FP4_OK;
}

static fp4_status good_read(void *plan_, int copy, float *out, fp4_err *err)
{
    good_plan *plan = plan_;
    const float *o = output_of(plan, copy, err);
    if (!o) return FP4_ERR_INVALID_ARG;
    memcpy(out, o, plan->count * sizeof *out);
    return FP4_OK;
}

static const char *good_variant(void *plan)
{
    return "double-accumulation";
}

static const fp4_moe_backend_ops good_ops = {
    .api_version = FP4_MOE_BACKEND_API_VERSION,
    .name = MOE_GOOD_NAME,
    .summary = "example MoE plugin: weights decoded by libfp4, each pair in double on the CPU",
    .flags = MOE_GOOD_VARIANT == 3 ? FP4_BACKEND_REFERENCE : 0, /* a CPU contender with exact operands */
    .math = FP4_MATH_CPU,
    .wformat = FP4_MOE_WEIGHTS_NVFP4,
    .tol_max = 1e-5, /* float roundings of double sums (down adds k of them) */
    .tol_norm = 1e-5,
    .open = good_open,
    .close = good_close,
    .supports = good_supports,
    .prepare = good_prepare,
    .poison = good_poison,
    .run = good_run,
    .read_output = good_read,
    .release = good_release,
    .variant = good_variant,
};

/* The one symbol the loader looks for. */
const fp4_moe_backend_ops *fp4_moe_backend_entry(void);
const fp4_moe_backend_ops *fp4_moe_backend_entry(void)
{
    return &good_ops;
}
