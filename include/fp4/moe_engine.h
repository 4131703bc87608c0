/* fp4bench: the MoE engine, routed expert layers measured by the GEMM engine's
 * rules (docs/MOE.md "fp4bench moe", docs/MEASUREMENT.md).
 *
 * A case is one step (gate_up, down or the whole layer) of one layer (a model
 * preset's or custom dims on one tensor-parallel rank) on T tokens routed one
 * way, in one mode (W4A4 or W4A16). Per case the engine makes the weights
 * (seeded, shared by every case of the same dims and seed), the activations
 * (token t's row depends on the seed and t alone, as its routing does), the
 * routing and its grouped plan, and the exact reference (src/moe), then per
 * backend: open (once), supports, prepare with enough copies for a cold L2,
 * check that poison() poisons, verify copies 1 (the negated input) and 0,
 * time every verified backend interleaved in shuffled rounds in CUDA graphs
 * (fp4_engine_time_plans), and verify every copy again from the timed graph.
 * Each (case, backend) gives one fp4_row with its MoE fields (row.moe). */
#ifndef FP4_MOE_ENGINE_H
#define FP4_MOE_ENGINE_H

#include <stdint.h>

#include "fp4/engine.h"
#include "fp4/moe.h"
#include "fp4/moe_backend.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fp4_moe_case {
    char model[24];     /* preset name, or "custom": the label's first word */
    int tp;             /* tensor parallelism the dims are one rank of (labels only) */
    fp4_moe_dims dims;  /* one rank's sizes */
    int64_t tokens;     /* T >= 1 */
    /* routing; trace ids (and weights) are the caller's, [trace_tokens, k],
     * valid while the case runs: the first T rows are used (T <= trace_tokens) */
    fp4_moe_route_opts route;
    int64_t trace_tokens;
    fp4_moe_step step;
    fp4_moe_mode mode;
} fp4_moe_case;

/* The label of a case's rows: "<model>[/tp<N>] <step> <mode> <routing>",
 * e.g. "glm5/tp8 gate_up w4a4 balanced(seed=1)"; always NUL-terminated. */
void fp4_moe_case_label(const fp4_moe_case *c, char *buf, size_t len);

typedef struct fp4_moe_engine fp4_moe_engine;

/* An MoE engine on top of e (borrowed: destroy this one first), with the
 * run's settings and device as fp4_engine_create put them into report. */
fp4_status fp4_moe_engine_create(fp4_engine *e, const fp4_report *report, fp4_moe_engine **out,
                                 fp4_err *err);
/* Closes the MoE backends it opened (their warnings, and the engine's own,
 * appended to warnings, which may be NULL) and frees the weights it kept. */
void fp4_moe_engine_destroy(fp4_moe_engine *m, fp4_warnings *warnings);

/* Whether an MoE backend can run here (opens it once, as a case would). */
fp4_status fp4_moe_engine_probe_backend(fp4_moe_engine *m, const fp4_moe_backend_ops *ops,
                                        fp4_err *err);

/* Measure one case on the backends, appending one row per backend to report
 * (unsupported and FAILED rows included) and calling cb after each. Returns
 * an error only for failures of the engine itself (bad case, out of memory,
 * no reference, Ctrl-C: FP4_ERR_INTERRUPTED with the rows kept); a backend's
 * failure is a FAILED row. The baseline of the ratios is the settings'. */
fp4_status fp4_moe_engine_run_case(fp4_moe_engine *m, const fp4_moe_case *c,
                                   const fp4_moe_backend_ops *const *backends, int nbackends,
                                   fp4_report *report, fp4_row_callback cb, void *user,
                                   fp4_err *err);

/* The most output rows whose exact reference is computed in full: above
 * FP4_MOE_FULL_REF_MACS multiply-adds the reference runs on a sample of
 * tokens (every slot of each), spread over the experts, of about
 * FP4_MOE_SAMPLE_PAIRS pairs; the row's verify_note says which. */
#define FP4_MOE_FULL_REF_MACS 2e9
#define FP4_MOE_SAMPLE_PAIRS 64

#ifdef __cplusplus
}
#endif
#endif
