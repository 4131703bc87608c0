/* fp4bench: the measurement engine's data model, statistics and reports.
 *
 * A run measures a list of cases (shape + label) on a list of backends. Each
 * (case, backend) gives one row: verified against the exact reference first,
 * then timed (cold L2 by default), or marked unsupported / FAILED with the
 * reason. Times are microseconds per GEMM call. */
#ifndef FP4_BENCH_H
#define FP4_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "fp4/backend.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP4_JSON_SCHEMA_VERSION 1
#define FP4_LABEL_LEN 64
#define FP4_NAME_LEN 48

/* ---- statistics ------------------------------------------------------------ */

typedef struct fp4_stats {
    int count;
    double median, p10, p90, min, max, mean, stdev;
    /* Relative half-width of the distribution-free 95% confidence interval of
     * the median (order statistics): the "noise" the stopping rule uses. */
    double noise;
} fp4_stats;

/* Compute stats of x[0..n) (x is not modified). n == 0 gives count 0. */
void fp4_stats_compute(const double *x, int n, fp4_stats *out);
/* Quantile q in [0,1] of x (linear interpolation between order statistics). */
double fp4_quantile(const double *x, int n, double q);
/* Distribution-free 95% CI of the median of x: ranks n/2 -+ 0.98 sqrt(n). */
void fp4_median_ci(const double *x, int n, double *lo, double *hi);

/* The stopping rule: stop when count >= min_samples and noise < target and at
 * least min_time_s of measured time; or when elapsed_s >= max_time_s
 * (timed_out = 1). Returns 1 to stop. */
typedef struct fp4_stop_rule {
    int min_samples;    /* default 10 */
    double noise_target; /* default 0.005 */
    double min_time_s;   /* default 0 */
    double max_time_s;   /* per measurement, default 10 */
} fp4_stop_rule;
int fp4_should_stop(const fp4_stop_rule *rule, const fp4_stats *s, double elapsed_s,
                    int *timed_out);

/* ---- settings ---------------------------------------------------------------- */

typedef enum fp4_data_kind {
    FP4_DATA_GAUSSIAN = 0, /* normal data quantized the way engines do */
    FP4_DATA_CODES = 1,    /* uniform random codes and scales */
    FP4_DATA_OUTLIERS = 2  /* heavy-tailed channels */
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
} fp4_settings;

void fp4_settings_default(fp4_settings *s);

/* ---- the machine ----------------------------------------------------------------- */

typedef struct fp4_device_info {
    int present;           /* a CUDA GPU was found */
    char why_absent[FP4_ERR_MSG_LEN];
    char name[128];
    int cc_major, cc_minor;
    int sms;
    double l2_bytes;
    double mem_bytes;
    int driver_version, runtime_version; /* CUDA's encoding: 13000 = 13.0 */
    double sm_clock_max_mhz, mem_clock_max_mhz;
    int nvml;               /* NVML was loaded */
    char driver_string[64]; /* NVML's driver version, if loaded */
    int cpu_threads;        /* host CPUs online */
    /* datasheet dense peaks for this GPU (0 unknown) */
    double peak_bf16_tflops, peak_fp8_tflops, peak_fp4_tflops, peak_bw_gbps;
} fp4_device_info;

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
} fp4_ceilings;

/* ---- rows ------------------------------------------------------------------------ */

typedef enum fp4_row_state {
    FP4_ROW_OK = 0,
    FP4_ROW_UNSUPPORTED = 1,
    FP4_ROW_FAILED = 2
} fp4_row_state;
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
} fp4_telemetry;

typedef struct fp4_row {
    char label[FP4_LABEL_LEN];
    fp4_shape shape;
    char backend[FP4_NAME_LEN];
    char variant[FP4_NAME_LEN]; /* which kernel actually ran, if the backend says */
    fp4_row_state state;
    char reason[FP4_ERR_MSG_LEN]; /* for unsupported / FAILED */

    /* verification against the exact reference */
    int verified;      /* 1 passed, 0 failed or not run, -1 this is the reference */
    char verify_note[192];
    double err_max, err_norm; /* max|D-R|/max|R|, ||D-R||/||R|| */

    /* measurement */
    char l2[8];        /* "cold" or "hot" */
    char timing[8];    /* "graph", "launch" or "host" */
    int copies;        /* operand sets rotated through */
    int batch;         /* calls per sample */
    double rotation_bytes; /* bytes one rotation touches */
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
} fp4_row;

typedef struct fp4_report {
    char version[32];
    char commit[48];
    char started[40];  /* ISO 8601 UTC */
    char host[64];
    char command[512]; /* the command line */
    fp4_device_info dev;
    fp4_ceilings ceil;
    fp4_settings set;
    fp4_row *rows;
    int nrows;
    int cap;
} fp4_report;

/* Append a row (copied; the row's samples pointer is taken over). */
fp4_status fp4_report_add(fp4_report *r, const fp4_row *row, fp4_err *err);
void fp4_report_free(fp4_report *r);

/* ---- reports ------------------------------------------------------------------------ */

/* The human table: one line per row in the seed's layout (label, shape,
 * backend, median us, ratio, TFLOP/s, GB/s, % roofline, verified) with
 * unsupported / FAILED cells carrying the reason. */
void fp4_report_print_table(FILE *f, const fp4_report *r);
/* The header lines: device, ceilings, settings. */
void fp4_report_print_header(FILE *f, const fp4_report *r);

/* Write the whole report as JSON (schema in docs/JSON.md) to path, atomically
 * (temporary file then rename), so the file is always a complete document;
 * the engine calls it after every row. */
fp4_status fp4_report_write_json(const char *path, const fp4_report *r, fp4_err *err);
fp4_status fp4_report_read_json(const char *path, fp4_report *r, fp4_err *err);

/* CSV: header once, then one line per row, flushed. */
fp4_status fp4_csv_write_header(FILE *f, fp4_err *err);
fp4_status fp4_csv_write_row(FILE *f, const fp4_row *row, fp4_err *err);

/* compare OLD NEW: per (backend, shape, label, l2) ratio new/old of medians
 * with a verdict: "faster", "slower", "same" (within noise or threshold),
 * "new", "gone", "failed". Returns the number of regressions (slower by more
 * than threshold and outside the combined noise), -1 on error. */
typedef struct fp4_compare_opts {
    double threshold; /* default 0.05 */
} fp4_compare_opts;
int fp4_report_compare(FILE *f, const fp4_report *old_r, const fp4_report *new_r,
                       const fp4_compare_opts *opts, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
