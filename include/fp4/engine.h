/* fp4bench: the measurement engine.
 *
 * For each case: build reproducible operands, compute the exact reference
 * once, then for each backend: prepare (timed apart), verify on poisoned
 * output, and time all verified backends interleaved in rounds
 * (A B C A B C ...) on identical inputs, cold L2 by default. See
 * docs/MEASUREMENT.md for every rule. */
#ifndef FP4_ENGINE_H
#define FP4_ENGINE_H

#include "fp4/bench.h"
#include "fp4/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fp4_engine fp4_engine;

/* Called after each row is measured (for streaming JSON/CSV and the table). */
typedef void (*fp4_row_callback)(const fp4_report *report, const fp4_row *row, void *user);

/* Create an engine: looks for a GPU (absent is fine), loads NVML if present,
 * fills report->dev and report->set. */
fp4_status fp4_engine_create(const fp4_settings *set, fp4_report *report, fp4_engine **out,
                             fp4_err *err);
void fp4_engine_destroy(fp4_engine *e);

/* Measure the ceilings into report->ceil: read bandwidth, and the bf16 and
 * fp8 tensor rates both ways (fp4_engine_measure_rate); the interleaved rates
 * are the rooflines' compute ceilings. Without a GPU: nothing (measured 0). */
fp4_status fp4_engine_measure_ceilings(fp4_engine *e, fp4_report *report, fp4_err *err);

/* The rate of one backend on one shape, measured on one prepared plan in two
 * passes with the rows' rules (cold L2, graph batches, warm-up, stopping
 * rule; not verified), on the run's kind of data:
 *   interleaved: after every sample a light phase light_ratio times as long
 *     (on the GPU one thread waiting on the timer, on the CPU a sleep), so
 *     each sample starts with the clock recovered, as a row's sample does
 *     between the other backends of its round: the rate a row can reach;
 *   sustained: samples back to back, as long as the stopping rule needs: the
 *     rate under continuous load (on the H200, at the power cap).
 * The ceilings use it for cuBLAS bf16 and cuBLASLt fp8 at 8192^3. Works for
 * CPU backends too (host timing). A backend that cannot run gives its error. */
typedef struct fp4_rate {
    double light_ratio;       /* light phase / sample length of the interleaved pass */
    int copies, batch;        /* operand copies, calls per sample */
    fp4_stats interleaved;    /* per-call time, us */
    fp4_stats sustained;
    double interleaved_tflops, sustained_tflops; /* flops / median */
    int interleaved_timed_out, sustained_timed_out;
} fp4_rate;
fp4_status fp4_engine_measure_rate(fp4_engine *e, const fp4_backend_ops *ops,
                                   const fp4_shape *shape, fp4_rate *out, fp4_err *err);

/* Measure one case on the given backends, appending one row per backend to
 * report (unsupported and FAILED rows included) and calling cb for each.
 * Returns an error only for failures of the engine itself (out of memory,
 * no reference); backend failures become FAILED rows. */
fp4_status fp4_engine_run_case(fp4_engine *e, const fp4_case *c, int case_index,
                               const fp4_backend_ops *const *backends, int nbackends,
                               fp4_report *report, fp4_row_callback cb, void *user,
                               fp4_err *err);

/* Whether a backend can run here: opens and closes it, reason in err. */
fp4_status fp4_engine_probe_backend(fp4_engine *e, const fp4_backend_ops *ops, fp4_err *err);

/* The comparison of a result with the reference (used by the engine and by
 * `fp4bench check`): max|D-R|/max|R|, ||D-R||/||R||, counts of NaN/Inf and
 * of elements still poisoned. Returns 1 if within (tol_max, tol_norm). */
typedef struct fp4_verdict {
    double err_max, err_norm;
    long long nonfinite;  /* NaN or Inf in D (poison left or computed) */
    long long zeros_d, zeros_r;
    int all_zero;         /* D is all zero while R is not */
    int pass;
    char why[160];
} fp4_verdict;
void fp4_compare_outputs(const float *d, const float *r, size_t n, double tol_max,
                         double tol_norm, fp4_verdict *v);

#ifdef __cplusplus
}
#endif
#endif
