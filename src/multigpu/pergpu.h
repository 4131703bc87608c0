/* One workload on several GPUs of a node at once (fp4bench run --gpus): the
 * GPU list, and how the GPUs' rows compare (docs/PARALLEL.md,
 * "fp4bench run --gpus").
 *
 * The rows of a multi-GPU report (fp4/engine.h, fp4_report.ngpus > 0) fall
 * into groups: the rows of one (case, backend) on every GPU, matched on
 * label, shape, backend and L2 mode (a case listed twice gives two groups).
 * Per group, over the GPUs whose row was timed: the min, median and max of
 * their medians and the spread (max - min) / median. A GPU is slow in a group
 * when its median exceeds the group's median by more than
 *   max(FP4_SLOW_MIN, its row's noise + the median of the group's noises)
 * (noise: the relative half-width of a median's 95% CI, fp4/stats.h; the
 * sum bounds the CI of the difference): slower than the other GPUs by more
 * than the measurement can tell. A row whose noise is unknown (one sample)
 * is never called slow. A row is throttled when NVML saw the power cap, a
 * thermal limit or a hardware slowdown during its samples, or the SM clock
 * under 90% of its warm-up value. Per GPU over the run: the geometric mean of
 * its median / the group's median over every group it was timed in beside
 * another GPU, and its slow and throttled rows. */
#ifndef FP4_MULTIGPU_PERGPU_H
#define FP4_MULTIGPU_PERGPU_H

#include "fp4/engine.h"
#include "fp4/shapes.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The smallest excess over the group's median called slow (3%). */
#define FP4_SLOW_MIN 0.03

/* ---- --gpus all|0,1,... ------------------------------------------------------ */

typedef struct fp4_gpu_list {
    int all;                  /* "all": every device (filled in by resolve) */
    int n;                    /* GPUs listed */
    int index[FP4_MAX_GPUS];  /* CUDA device numbers, in the order given */
} fp4_gpu_list;

/* Parse "all" or distinct device numbers "0,1,3" (no device is looked at).
 * FP4_ERR_INVALID_ARG with a one-line reason: an empty item or list, a
 * token that is not a plain decimal number, a number listed twice, more than
 * FP4_MAX_GPUS numbers. */
fp4_status fp4_gpu_list_parse(const char *spec, fp4_gpu_list *out, fp4_err *err);

/* Check the list against the ndevices CUDA devices there are (and fill in
 * "all"): more GPUs listed than exist, or a number that is not a device, is
 * FP4_ERR_INVALID_ARG; ndevices 0 is FP4_ERR_UNSUPPORTED ("no CUDA device");
 * "all" on more than FP4_MAX_GPUS devices is FP4_ERR_INVALID_ARG. */
fp4_status fp4_gpu_list_resolve(fp4_gpu_list *list, int ndevices, fp4_err *err);

/* ---- one workload on every listed GPU at once ----------------------------------- */

/* What fp4_pergpu_run measures and whom it tells. */
typedef struct fp4_pergpu_job {
    const fp4_settings *set;    /* every GPU's engine gets these */
    int measure_ceilings;       /* each GPU measures its own ceilings first */
    const fp4_case *cases;
    int ncases;
    const fp4_backend_ops *const *backends;
    int nbackends;
    const fp4_gpu_list *gpus;   /* resolved (fp4_gpu_list_resolve) */
    /* Optional; called with the run's lock held, so never two at once.
     * on_ready: every GPU's engine is up and its ceilings measured,
     * report->gpus is filled; non-zero ends the run before any case.
     * on_row: a row of any GPU was just appended to report. */
    int (*on_ready)(fp4_report *report, void *user);
    fp4_row_callback on_row;
    void *user;
} fp4_pergpu_job;

/* One thread per listed GPU: it makes the GPU its current device, creates
 * its own engine there (stream, NVML handle, L2 size, clocks: that GPU's),
 * measures its ceilings, then runs every case on every backend as
 * fp4_engine_run_case does. The GPUs start each case together (a barrier)
 * and measure it at the same time, as GPUs of a serving node run under load;
 * within a case each GPU keeps its own rounds and stopping rule. Every row of
 * every GPU (its gpu field set) is appended to report, with report->ngpus,
 * gpus[], and dev, ceil, set of the first GPU. A GPU that fails (its engine,
 * a case) stops every GPU at the next case; the error names it: "GPU 1
 * (0000:1a:00.0): ...". Ctrl-C (set->interrupt) stops them all:
 * FP4_ERR_INTERRUPTED, the rows kept. Cleanup warnings of every engine are
 * appended to warnings (may be NULL). Without a CUDA device:
 * FP4_ERR_UNSUPPORTED. */
fp4_status fp4_pergpu_run(const fp4_pergpu_job *job, fp4_report *report, fp4_warnings *warnings,
                          fp4_err *err);

/* ---- the rows of several GPUs compared ---------------------------------------- */

/* One (case, backend) on every GPU. */
typedef struct fp4_gpu_group {
    int first_row;         /* its first row in the report: label, shape, backend */
    int rows;              /* rows in it (one per GPU) */
    int timed;             /* of them timed (ok, a finite positive median) */
    double min_us, median_us, max_us; /* of the timed rows' medians (NaN: none) */
    double spread;         /* (max - min) / median (NaN: fewer than two timed) */
    double noise;          /* median of the timed rows' finite noises (NaN: none) */
    int slow, throttled;   /* rows marked so */
} fp4_gpu_group;

/* One GPU over the whole run. */
typedef struct fp4_gpu_summary {
    int gpu;               /* CUDA device number */
    int rows, timed;
    int compared;          /* groups in ratio_geomean */
    double ratio_geomean;  /* geometric mean of median / group median (NaN: none) */
    int slow_rows, throttled_rows;
    /* telemetry over its rows: sample counts summed, clocks median / min */
    int power_cap_samples, thermal_samples, hw_slowdown_samples, low_clock_samples;
    double sm_clock_mhz, sm_clock_min_mhz, power_w; /* NaN: no telemetry */
} fp4_gpu_summary;

/* What the comparison says of one row. */
typedef struct fp4_gpu_mark {
    int group;         /* index into groups (every row has one) */
    double excess;     /* median / group median - 1 (NaN: not compared) */
    double threshold;  /* the excess above which it is slow (inf: cannot tell) */
    int slow, throttled;
} fp4_gpu_mark;

typedef struct fp4_gpu_analysis {
    int ngpus;
    fp4_gpu_summary gpu[FP4_MAX_GPUS]; /* report->gpus' order, else ascending */
    fp4_gpu_group *groups;             /* in the order of their first rows */
    int ngroups;
    fp4_gpu_mark *marks;               /* one per report row */
    int nrows;
} fp4_gpu_analysis;

/* Whether a row ran throttled (see the file comment). */
int fp4_row_throttled(const fp4_row *w);

/* Compare the GPUs of report r into *a (overwritten; free it with
 * fp4_gpu_analysis_free, also after a failure). The GPUs are r->gpus when
 * r->ngpus > 0, else the distinct gpu numbers of the rows; rows of GPUs past
 * FP4_MAX_GPUS are left out of the summaries. FP4_ERR_NOMEM only. */
fp4_status fp4_gpu_analyze(const fp4_report *r, fp4_gpu_analysis *a, fp4_err *err);
void fp4_gpu_analysis_free(fp4_gpu_analysis *a);

/* The summary of CUDA device gpu in a, or NULL. */
const fp4_gpu_summary *fp4_gpu_analysis_find(const fp4_gpu_analysis *a, int gpu);

#ifdef __cplusplus
}
#endif
#endif
