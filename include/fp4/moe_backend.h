/* fp4bench: the routed-MoE backend interface (docs/MOE.md, "Backends"), a
 * vtable like fp4_backend_ops (fp4/backend.h) for one step of an MoE layer.
 *
 * A problem is one step of one layer on T tokens routed to the experts
 * (fp4/moe.h): the routing and its contiguous grouped plan, the NVFP4 weights
 * of all E experts, and the step's input activations. The step decides what
 * the output is (host floats, row-major, what read_output returns):
 *   gate_up  x [T, H] -> y [T*k, 2I], row p = t*k + j (pair order), every
 *            pair's gate_up GEMM against its expert, no activation;
 *   down     h [T*k, I] (pair order) -> out [T, H]: every pair's down GEMM,
 *            combined over the token's k slots with the routing weights
 *            (out[t] = sum_j w[t, j] * d[t*k + j]);
 *   layer    x [T, H] -> out [T, H]: gate_up, the activation (h = act(gate,
 *            up)), down and the weighted combine, in W4A4 with x and h
 *            quantized to NVFP4 on the way (static encode scales given).
 * Modes: W4A4, NVFP4 activations (for gate_up and down the problem gives
 * them already quantized, `a`); W4A16, bf16 activations (`a_bf16`).
 *
 * Life cycle, all on one host thread, as fp4_backend_ops:
 *   open(&inst)                       once; UNSUPPORTED + reason when it cannot
 *                                     run on this machine
 *   supports(inst, problem)           can it run this step, mode and size?
 *   prepare(inst, problem, copies)    convert and upload; `copies` independent
 *                                     input/output sets (cold-L2 rotation; each
 *                                     copy its own weights too when copies > 1):
 *                                     even copies from the problem's input, odd
 *                                     copies from its negation (a_bf16_odd,
 *                                     a_odd), so that a backend ignoring the copy
 *                                     index fails verification
 *   poison / run / read_output        per copy; run() asynchronous on the given
 *                                     stream, capturable in a CUDA graph (no
 *                                     allocation, no synchronisation)
 *   release(plan), close(inst)        cannot fail; failures are warnings
 * The problem and everything it points to stay valid until release(plan).
 * A backend may keep device copies of the weights in its instance between
 * plans while problem->weights_id stays the same (a sweep over T re-uses
 * them), but only of the steps the current problem needs (a down plan frees
 * the cached gate_up weights: the backends of a case share the device's
 * memory); close() frees them. So all live plans of an instance belong to
 * one case: the engine releases a case's plans before it prepares the next
 * case's. */
#ifndef FP4_MOE_BACKEND_H
#define FP4_MOE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "fp4/backend.h" /* fp4_math, the FP4_BACKEND_* flags */
#include "fp4/format.h"
#include "fp4/moe.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP4_MOE_BACKEND_API_VERSION 1
/* External MoE backends are shared objects exporting this symbol: a function
 * fp4_moe_backend_entry_fn returning a table whose api_version equals
 * FP4_MOE_BACKEND_API_VERSION (docs/PLUGINS.md, "MoE backends"). */
#define FP4_MOE_BACKEND_ENTRY_SYMBOL "fp4_moe_backend_entry"

/* ---- steps ------------------------------------------------------------------ */

typedef enum fp4_moe_step {
    FP4_MOE_STEP_GATE_UP = 0, /* x [T, H] -> y [T*k, 2I] per pair */
    FP4_MOE_STEP_DOWN = 1,    /* h [T*k, I] -> [T, H], combined with the routing weights */
    FP4_MOE_STEP_LAYER = 2    /* x [T, H] -> [T, H]: the whole layer */
} fp4_moe_step;
#define FP4_MOE_STEP_COUNT 3

/* "gate_up", "down", "layer"; NULL out of range. */
const char *fp4_moe_step_name(fp4_moe_step s);
/* FP4_ERR_INVALID_ARG naming the known steps for anything else. */
fp4_status fp4_moe_step_parse(const char *name, fp4_moe_step *out, fp4_err *err);

/* ---- the problem ----------------------------------------------------------------- */

typedef struct fp4_moe_problem {
    fp4_moe_dims dims;
    fp4_moe_step step;
    fp4_moe_mode mode;
    int64_t tokens;                 /* T */
    const fp4_moe_routing *routing; /* [T, k] ids and weights */
    const fp4_moe_plan *plan;       /* its contiguous grouped plan */
    const fp4_moe_weights *weights; /* all E experts, gate_up [2I, H] and down [H, I] */
    /* Equal ids, equal weights: a backend may keep what it made of them (device
     * copies, packed layouts) from one plan to the next. Never 0. */
    uint64_t weights_id;
    /* The step's input: x [T, H] (gate_up, layer) or h [T*k, I] in pair order
     * (down); a_rows x a_cols. */
    int64_t a_rows, a_cols;
    const uint16_t *a_bf16;     /* bf16 [a_rows, a_cols], even copies */
    const uint16_t *a_bf16_odd; /* the same with every sign bit flipped, odd copies */
    /* W4A4: the NVFP4 of a_bf16 (a_odd: of a_bf16_odd) that the exact
     * reference uses, quantized with the static encode scale a_encode_scale
     * (fp4_quantize_bf16; global_scale = 1 / a_encode_scale). NULL in W4A16. A
     * layer backend quantizes x itself, with a_encode_scale, from a_bf16. */
    const fp4_matrix *a, *a_odd;
    float a_encode_scale;
    /* layer, W4A4: the static encode scale of h (the activation's output,
     * one scale for all T*k rows); 0 otherwise */
    float h_encode_scale;
    /* 1: a vendor backend may time candidate algorithms in prepare() */
    int tuning;
} fp4_moe_problem;

/* The input of copy `copy`: the problem's for even copies, its negation for
 * odd ones. */
static inline const uint16_t *fp4_moe_problem_a_bf16(const fp4_moe_problem *p, int copy)
{
    return (copy & 1) ? p->a_bf16_odd : p->a_bf16;
}
static inline const fp4_matrix *fp4_moe_problem_a(const fp4_moe_problem *p, int copy)
{
    return (copy & 1) ? p->a_odd : p->a;
}
/* Rows and columns of the step's output (what read_output fills). */
int64_t fp4_moe_output_rows(const fp4_moe_problem *p);
int64_t fp4_moe_output_cols(const fp4_moe_problem *p);

/* Everything a prepare() relies on, checked once: sizes consistent with the
 * dims, routing and plan; weights present ([2I, H] and [H, I]); the inputs
 * the mode needs present with [a_rows, a_cols] = x's or h's shape; copies in
 * 1..4096. */
fp4_status fp4_moe_problem_check(const fp4_moe_problem *p, int copies, fp4_err *err);

/* ---- the vtable -------------------------------------------------------------------- */

typedef struct fp4_moe_backend_ops {
    int api_version;     /* FP4_MOE_BACKEND_API_VERSION */
    const char *name;    /* short, lowercase, unique: "moe-cublas-bf16" */
    const char *summary; /* one line for `fp4bench moe --help` */
    unsigned flags;      /* FP4_BACKEND_GPU, FP4_BACKEND_REFERENCE, FP4_BACKEND_LOSSY */
    fp4_math math;
    /* The weight format the backend reads: the bytes one call moves and the
     * copies a cold-L2 rotation needs are counted in it. */
    fp4_moe_wformat wformat;
    /* gate_up and down outputs against the exact reference: max|D-R|/max|R|
     * and ||D-R||/||R||. A layer is held to the end-to-end tolerance of its
     * mode (docs/MOE.md), or, for an FP4_BACKEND_LOSSY backend, to these
     * where they are larger. */
    double tol_max, tol_norm;

    fp4_status (*open)(void **inst, fp4_err *err);
    void (*close)(void *inst);
    /* Optional (NULL: every valid problem): FP4_ERR_UNSUPPORTED with the reason. */
    fp4_status (*supports)(void *inst, const fp4_moe_problem *p, fp4_err *err);
    fp4_status (*prepare)(void *inst, const fp4_moe_problem *p, int copies, void **plan,
                          fp4_err *err);
    /* Write NaN into every element of one copy's output. */
    fp4_status (*poison)(void *plan, int copy, void *stream, fp4_err *err);
    fp4_status (*run)(void *plan, int copy, void *stream, fp4_err *err);
    /* One copy's output as host floats [fp4_moe_output_rows, fp4_moe_output_cols];
     * synchronises. */
    fp4_status (*read_output)(void *plan, int copy, float *out, fp4_err *err);
    void (*release)(void *plan);
    /* Optional: what runs, for the report; valid until release(plan). */
    const char *(*variant)(void *plan);
    /* Optional: where cleanup failures go (see fp4_backend_ops.set_warnings). */
    void (*set_warnings)(void *inst, fp4_warnings *w);
    /* Optional, layer plans: the steps the layer is made of, each of which can
     * run alone on a copy (reading what the step before it left in that
     * copy's buffers), so that the engine can time each in the same rounds as
     * the whole layer. step_count 0 or NULL: no breakdown. Names are short
     * ("route", "gate_up", "act_quant", "down", ...), valid until release. */
    int (*step_count)(void *plan);
    const char *(*step_name)(void *plan, int step);
    fp4_status (*run_step)(void *plan, int step, int copy, void *stream, fp4_err *err);
    /* Optional, FP4_BACKEND_LOSSY backends: the exact value (double) of output
     * element [row, col] of copy 0 computed from the operands as the backend
     * rounded them (e.g. to e4m3); the engine checks sampled elements against
     * it at own_tol (relative to the largest), as for GEMM backends. A layer's
     * may start from an intermediate result the device made (the fp8 layer's:
     * its e4m3 h, so that down and the combine are checked exactly). */
    double (*own_reference)(void *plan, int64_t row, int64_t col);
    double own_tol;
} fp4_moe_backend_ops;

/* ---- registry --------------------------------------------------------------------- */

int fp4_moe_backend_count(void);
const fp4_moe_backend_ops *fp4_moe_backend_at(int i); /* NULL out of range */
const fp4_moe_backend_ops *fp4_moe_backend_find(const char *name);
/* Check a table before use (version, name, mandatory slots, tolerances). */
fp4_status fp4_moe_backend_validate(const fp4_moe_backend_ops *ops, fp4_err *err);

typedef const fp4_moe_backend_ops *(*fp4_moe_backend_entry_fn)(void);
/* Load an external MoE backend from a shared object: its table validated,
 * named unlike every built-in MoE backend, and not FP4_BACKEND_REFERENCE.
 * The table stays valid while the object stays loaded; *handle is for
 * fp4_moe_backend_unload. */
fp4_status fp4_moe_backend_load(const char *path, const fp4_moe_backend_ops **ops, void **handle,
                                fp4_err *err);
void fp4_moe_backend_unload(void *handle);

#ifdef __cplusplus
}
#endif
#endif
