/* fp4bench: the measurement engine, its settings and its results.
 *
 * A run measures a list of cases (shape + label, fp4/shapes.h) on a list of
 * backends. Each (case, backend) gives one row: verified against the exact
 * reference first, then timed (cold L2 by default), or marked unsupported /
 * FAILED with the reason. Times are microseconds per GEMM call.
 *
 * For each case the engine builds reproducible operands, computes the exact
 * reference once, then for each backend: prepare (timed apart), verify on
 * poisoned output, and time all verified backends interleaved in rounds
 * (A B C A B C ...) on identical inputs, cold L2 by default. See
 * docs/MEASUREMENT.md for every rule. Writing the results out (table, JSON,
 * CSV, compare) is fp4/report.h. */
#ifndef FP4_ENGINE_H
#define FP4_ENGINE_H

#include <signal.h>
#include <stdint.h>

#include "fp4/backend.h"
#include "fp4/device.h"
#include "fp4/shapes.h"
#include "fp4/stats.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP4_NAME_LEN 48     /* a backend name in a row */
#define FP4_VARIANT_LEN 192 /* the kernel or library algorithm that ran, and how it was chosen */

/* ---- settings ---------------------------------------------------------------- */

typedef enum fp4_data_kind {
    FP4_DATA_GAUSSIAN = 0, /* normal data quantized the way engines do */
    FP4_DATA_CODES = 1,    /* uniform random codes and scales */
    FP4_DATA_OUTLIERS = 2, /* heavy-tailed channels */
    FP4_DATA_WIDE = 3      /* block magnitudes over five decades: E4M3 subnormal scales */
} fp4_data_kind;
const char *fp4_data_kind_name(fp4_data_kind k);
int fp4_data_kind_parse(const char *s, fp4_data_kind *out); /* 0 ok, -1 unknown */

typedef struct fp4_settings {
    uint64_t seed;
    fp4_data_kind data;
    int hot;                /* 1: L2-resident (no rotation); 0: cold L2 */
    int use_graphs;         /* 1: CUDA-graph batches (default) */
    int measure_launch;     /* 1: also time plain launches */
    double warmup_ms;       /* default 200 */
    fp4_stop_rule stop;
    char baseline[FP4_NAME_LEN]; /* backend the ratio column is against */
    int keep_samples;       /* put every sample in the JSON */
    int measure_ceilings;   /* measure bandwidth and bf16 rate (GPU) */
    int verify_only;        /* verify, do not time */
    /* Reference backends (FP4_BACKEND_REFERENCE) verify the others; they are
     * timed only when this is set or when nothing else runs. */
    int time_reference;
    /* The backends of a round run in an order shuffled every round (so that
     * no backend always follows the same neighbour), from a generator seeded
     * with this and the shape; 0 at create: derived from seed. */
    uint64_t order_seed;
    /* 1 (default): vendor baselines time their candidate algorithms in
     * prepare() and keep the fastest (fp4_gemm_problem.tuning); 0: the
     * library's first choice, as a plain call would get. */
    int baseline_tuning;
    /* Calls per graph replay, at least (default 64): a replay's fixed costs
     * are kept out of the time (a stream gate), this amortises the rest. */
    int min_batch;
    /* Optional: set non-zero (by a SIGINT handler) to stop; the engine then
     * finishes the statistics of what it measured, marks the rows
     * interrupted and returns FP4_ERR_INTERRUPTED. Not written to JSON. */
    volatile sig_atomic_t *interrupt;
} fp4_settings;

void fp4_settings_default(fp4_settings *s);

/* A reproducible random [rows, cols] NVFP4 operand of the given kind: the
 * bytes the engine makes from seed (src/bench/inputs.c; --data says what each
 * kind is). */
fp4_status fp4_make_operand(fp4_data_kind kind, int64_t rows, int64_t cols, uint64_t seed,
                            fp4_matrix *out, fp4_err *err);

/* ---- ceilings ------------------------------------------------------------------ */

/* The coldness check, once per run (fp4_engine_create, GPU only): a read of
 * a buffer of buffer_bytes (a quarter of L2) hot (read again and again),
 * rotated (one of enough buffers to span rotation_bytes >= 3x L2, as rows
 * rotate their operand copies) and right after an explicit flush. cold:
 * rotated reads run at the flushed rate (within 15%), not at the hot one. */
typedef struct fp4_l2_check {
    int measured, cold;
    double buffer_bytes, rotation_bytes;
    double hot_gbps, rotated_gbps, flushed_gbps;
} fp4_l2_check;

typedef struct fp4_ceilings {
    int measured;
    double read_gbps;    /* streaming read bandwidth, GB/s (1e9) */
    /* Tensor rates at 8192^3, TFLOP/s, 0 if not measured. The first two are
     * measured interleaved with a light phase as long as each sample (as rows
     * run; the roofline uses them), the sustained ones back to back. */
    double bf16_tflops;  /* cuBLAS bf16 */
    double fp8_tflops;   /* cuBLASLt fp8 */
    double bf16_sustained_tflops;
    double fp8_sustained_tflops;
    double light_ratio;  /* light phase / sample length of the interleaved rates */
    double cpu_gflops;   /* for CPU rows: the reference's own measured rate */
    fp4_l2_check l2;
} fp4_ceilings;

/* ---- rows and the report they make up ---------------------------------------------- */

typedef enum fp4_row_state {
    FP4_ROW_OK = 0,
    FP4_ROW_UNSUPPORTED = 1,
    FP4_ROW_FAILED = 2
} fp4_row_state;
/* "ok", "unsupported", "FAILED": the spelling of the table, CSV and JSON. */
const char *fp4_row_state_name(fp4_row_state s);

typedef struct fp4_telemetry {
    int valid;
    double sm_clock_mhz;      /* median over the measurement */
    double sm_clock_min_mhz;
    double mem_clock_mhz;
    double power_w;
    double temp_c;
    unsigned long long throttle_reasons; /* OR of NVML's bitmask over samples */
    int low_clock_samples;   /* samples with SM clock < 90% of the warm-up clock */
    int samples;             /* telemetry readings (one per timed sample) */
    /* readings during which NVML reported the clock held back by: the power
     * cap (software power cap or hardware power brake), a thermal limit
     * (software or hardware), or a hardware slowdown */
    int power_cap_samples, thermal_samples, hw_slowdown_samples;
} fp4_telemetry;

/* What a row of `fp4bench moe` adds (fp4/moe_engine.h, docs/MOE.md): the
 * layer, the step, the routing and the traffic. present 0: a GEMM row. */
#define FP4_MOE_ROW_STEPS 16 /* per-step times a layer row keeps */
typedef struct fp4_moe_step_time {
    char name[FP4_NAME_LEN]; /* "route", "gate_up", "act_quant", "down", ... */
    double us;     /* median microseconds of the step alone, per call */
} fp4_moe_step_time;

typedef struct fp4_row_moe {
    int present;
    char model[24];   /* preset name, or "custom" */
    char act[16];     /* "silu", "swiglu-oai" */
    char step[16];    /* "gate_up", "down", "layer" */
    char mode[8];     /* "w4a4", "w4a16" */
    char routing[64]; /* fp4_moe_route_describe, e.g. "skewed(s=1.2,seed=7)" */
    int64_t hidden, inter; /* H, and I on one tensor-parallel rank */
    int experts, top_k, tp;
    int64_t tokens;        /* T */
    int active_experts;    /* experts with >= 1 pair */
    int tokens_min, tokens_max;        /* pairs per expert over all E (idle: 0) */
    double tokens_median, tokens_mean; /* the same; mean = T*k/E */
    /* NVFP4 bytes of the weights the step reads: only experts with >= 1 pair
     * (fp4_moe_weight_bytes), whatever format the backend reads them in */
    double weight_bytes;
    double tokens_per_s;  /* T / median */
    double pct_bandwidth; /* 100 * gbps / the measured read bandwidth (< 0: unknown) */
    /* output rows verified against the exact reference, of verify_rows_total
     * (fewer when the full reference would take too long: a sample) */
    int64_t verify_rows, verify_rows_total;
    int nsteps;
    fp4_moe_step_time steps[FP4_MOE_ROW_STEPS];
} fp4_row_moe;

typedef struct fp4_row {
    char label[FP4_LABEL_LEN];
    fp4_shape shape;
    char backend[FP4_NAME_LEN];
    char variant[FP4_VARIANT_LEN]; /* the kernel or algorithm that ran, and how it was chosen */
    fp4_row_state state;
    char reason[FP4_ERR_MSG_LEN]; /* for unsupported / FAILED */

    /* verification against the exact reference */
    int verified;      /* 1 passed, 0 failed or not run, -1 this is the reference */
    char verify_note[192];
    double err_max, err_norm; /* max|D-R|/max|R|, ||D-R||/||R|| */

    /* measurement */
    char l2[8];        /* "cold" or "hot" */
    char timing[16];   /* "graph", "graph-nogate" (see docs/JSON.md), "launch" or "host" */
    int copies;        /* operand sets rotated through */
    int batch;         /* calls per sample */
    /* device memory prepare() allocated for all copies (measured), the
     * rotation a batch cycles through; "warm" in l2 when < 3x L2 */
    double rotation_bytes;
    int verified_copies; /* copies verified after timing, from the timed graph */
    double own_err;      /* LOSSY backends: error vs their own rounded operands (<0: n/a) */
    int interrupted;     /* stopped by the user (Ctrl-C): timing cut short, or (FAILED) unmeasured */
    fp4_stats t;       /* per-call time, us */
    fp4_stats t_launch; /* plain launches, us (count 0: not measured) */
    int timed_out;
    double *samples;   /* every per-call sample, us (owned by the row) */
    int nsamples;
    double prepare_ms;

    double flops, bytes;
    double tflops, gbps;
    double floor_us;     /* roofline floor max(bytes/BW, flops/rate) */
    double pct_roofline; /* 100 * floor / median */
    double pct_peak;     /* 100 * achieved / datasheet peak of its math (<0: unknown) */

    int has_ratio;       /* ratio vs the baseline backend */
    double ratio, ratio_lo, ratio_hi; /* baseline time / this time, median and 95% CI */

    fp4_telemetry tel;

    fp4_row_moe moe; /* rows of fp4bench moe; moe.present 0 otherwise */

    int gpu; /* CUDA device number the row was measured on (0 on CPU rows) */
} fp4_row;

/* 1 for a row that an interruption (Ctrl-C) stopped before it was measured
 * (FAILED, interrupted): the engines leave it out of the report, where it
 * would read as a broken backend. */
int fp4_row_unmeasured(const fp4_row *r);

/* One GPU of a multi-GPU run (fp4bench run --gpus): its description, which
 * device it is, and the ceilings measured on it. */
#define FP4_MAX_GPUS 16
typedef struct fp4_gpu_run {
    fp4_device_info dev;
    fp4_device_extra x; /* x.index: its CUDA device number */
    fp4_ceilings ceil;
} fp4_gpu_run;

/* The results of a run: where and how it measured, and its rows. */
typedef struct fp4_report {
    char version[32];
    char commit[48];
    char started[40];  /* ISO 8601 UTC */
    char host[64];
    char command[4096]; /* the command line, in full (longer ones end in "...") */
    int interrupted;   /* the run was stopped by the user: rows up to there */
    fp4_device_info dev;
    fp4_ceilings ceil;
    fp4_settings set;
    fp4_row *rows;
    int nrows;
    int cap;
    /* A multi-GPU run: every GPU's description and ceilings, in the order
     * listed (dev, devx and ceil then hold the first one's). 0: a run on
     * one device, described by dev, devx and ceil alone. */
    int ngpus;
    fp4_gpu_run gpus[FP4_MAX_GPUS];
    fp4_device_extra devx; /* which device dev is: number, PCI bus id, power limit */
} fp4_report;

/* Append a row (copied; the row's samples pointer is taken over). */
fp4_status fp4_report_add(fp4_report *r, const fp4_row *row, fp4_err *err);
void fp4_report_free(fp4_report *r);

/* ---- the engine ------------------------------------------------------------------ */

typedef struct fp4_engine fp4_engine;

/* Called after each row is measured (for streaming JSON/CSV and the table). */
typedef void (*fp4_row_callback)(const fp4_report *report, const fp4_row *row, void *user);

/* Create an engine: looks for a GPU (absent is fine), loads NVML if present,
 * fills report->dev and report->set. The engine is bound to the calling
 * thread's current CUDA device (cudaSetDevice before this call picks it):
 * its stream, buffers, NVML handle (found by the device's PCI bus id), L2
 * size, clocks and ceilings are that device's, its rows carry its number in
 * gpu, and every engine call below first makes it the calling thread's
 * device again. One engine per GPU may run in its own thread at the same
 * time as the others (fp4bench run --gpus); one engine is not to be used by
 * two threads at once. */
fp4_status fp4_engine_create(const fp4_settings *set, fp4_report *report, fp4_engine **out,
                             fp4_err *err);

/* Close the backends the engine opened and free it. Cleanup failures do not
 * fail a measurement: the engine collects them as warnings, its own (a CUDA
 * event, stream or graph that could not be destroyed) and those of the
 * backends it opened (given its sink through their set_warnings slot), and
 * appends them all here to *warnings, those of this shutdown included.
 * warnings may be NULL (they are dropped); e may be NULL. */
void fp4_engine_destroy(fp4_engine *e, fp4_warnings *warnings);

/* The warnings collected so far (see fp4_engine_destroy); valid while e is. */
const fp4_warnings *fp4_engine_warnings(const fp4_engine *e);

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

/* Whether a backend can run here, the reason in err if not. Opens it once
 * per engine (fp4_engine_destroy closes it), as a case would. */
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

/* ---- timing prepared plans (the MoE engine, fp4/moe_engine.h) ------------------------- */

/* The engine's stream (a cudaStream_t; NULL without a GPU): where plans are
 * run, poisoned and read by a caller that verifies them itself. */
void *fp4_engine_stream(fp4_engine *e);

/* One prepared plan behind a GEMM-style table, timed by the rows' rules. */
typedef struct fp4_timed_plan {
    /* name (messages), flags (FP4_BACKEND_GPU: on the engine's stream), run
     * and poison; nothing else is called, the plan is not released */
    const fp4_backend_ops *ops;
    void *plan;
    /* in: copies (>= 1) and state (only FP4_ROW_OK rows are timed); out:
     * timing, batch, t, t_launch, samples (owned by the row), timed_out,
     * interrupted, tel, verified_copies, the ratio against the baseline, and
     * state / reason when it failed */
    fp4_row *row;
    /* Optional: after timing, every copy is poisoned, the timed graph (or one
     * batch of plain launches) replayed once and check(check_user, copy)
     * called for every copy, copy 0 last; a failure makes the row FAILED. */
    fp4_status (*check)(void *check_user, int copy, fp4_err *err);
    void *check_user;
} fp4_timed_plan;

/* Time n plans interleaved in shuffled rounds exactly as fp4_engine_run_case
 * times its verified backends (batches over every copy in CUDA graphs behind
 * the stream gate, warm-up, the stopping rule, telemetry, Ctrl-C), the round
 * order seeded with order_key; then the checks after timing; then each row's
 * paired ratio against plans[baseline] (baseline < 0: none). Nothing is
 * timed under verify_only. Returns an error only for failures of the engine
 * itself; a plan that fails becomes a FAILED row. */
fp4_status fp4_engine_time_plans(fp4_engine *e, fp4_timed_plan *plans, int n,
                                 const fp4_shape *order_key, int baseline, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
