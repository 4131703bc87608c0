/* fp4bench: the results of a run (fp4_report, fp4/engine.h) written for
 * people and programs: the table, JSON, CSV, and the comparison of two runs.
 * Every function writes only to the FILE or path it is given. */
#ifndef FP4_REPORT_H
#define FP4_REPORT_H

#include <stdio.h>

#include "fp4/engine.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP4_JSON_SCHEMA_VERSION 1

/* The human table: one line per row in the seed's layout (label, shape,
 * backend, median us, ratio, TFLOP/s, GB/s, % roofline, verified) with
 * unsupported / FAILED cells carrying the reason. */
void fp4_report_print_table(FILE *f, const fp4_report *r);
/* The same table; verbose != 0 prints unsupported / FAILED reasons in full
 * (the plain table cuts them to one short cell). */
void fp4_report_print_table_verbose(FILE *f, const fp4_report *r, int verbose);
/* The header lines: device, ceilings, settings. */
void fp4_report_print_header(FILE *f, const fp4_report *r);

/* Write the whole report as JSON (schema in docs/JSON.md) to path, atomically
 * (temporary file then rename), so the file is always a complete document
 * (fp4bench run rewrites it after every row). A symlink is followed (the
 * link kept); a device or FIFO is written straight into. */
fp4_status fp4_report_write_json(const char *path, const fp4_report *r, fp4_err *err);
/* Read such a file back (docs/JSON.md, "Reading rules"). A file larger than
 * FP4_JSON_MAX_BYTES is refused before it is read; numbers must be finite,
 * integers within +-(2^53 - 1), strings valid UTF-8 (FP4_ERR_FORMAT). */
#define FP4_JSON_MAX_BYTES (256ull << 20) /* 256 MiB */
fp4_status fp4_report_read_json(const char *path, fp4_report *r, fp4_err *err);
/* The same from the len bytes of JSON text at text (need not end in a NUL);
 * name is used in messages. */
fp4_status fp4_report_parse_json(const char *text, size_t len, const char *name, fp4_report *r,
                                 fp4_err *err);

/* CSV: header once, then one line per row, flushed. */
fp4_status fp4_csv_write_header(FILE *f, fp4_err *err);
fp4_status fp4_csv_write_row(FILE *f, const fp4_row *row, fp4_err *err);
/* The CSV of fp4bench run --gpus: the columns above, then gpu (the CUDA
 * device the row ran on). */
fp4_status fp4_csv_write_header_gpus(FILE *f, fp4_err *err);
fp4_status fp4_csv_write_row_gpus(FILE *f, const fp4_row *row, fp4_err *err);
/* The header of fp4bench moe's CSV: the columns above, then the MoE ones
 * (docs/JSON.md), which fp4_csv_write_row writes for rows with moe.present. */
fp4_status fp4_csv_write_header_moe(FILE *f, fp4_err *err);

/* compare OLD NEW: per (backend, shape, label, l2) ratio new/old of medians
 * with a verdict: "faster", "slower", "same" (within noise or threshold),
 * "new", "gone", "failed"; rows timed on the host (CPU backends) get
 * "cpu-faster" / "cpu-slower" instead, which are not regressions (see
 * src/report/compare.c). Returns the number of regressions (slower by more
 * than threshold and outside the combined noise), -1 on error. Before the
 * table, one warning line per setting the two runs differ in. */
typedef struct fp4_compare_opts {
    double threshold;       /* default 0.05 */
    int gone_is_regression; /* 1: a row of OLD that NEW lacks counts as a regression */
} fp4_compare_opts;
int fp4_report_compare(FILE *f, const fp4_report *old_r, const fp4_report *new_r,
                       const fp4_compare_opts *opts, fp4_err *err);
/* fp4_report_compare in two parts, for a caller that wants the warnings
 * elsewhere (fp4bench: stderr) than the table: the settings warnings alone,
 * one "warning: ..." line on f (NULL: none) per setting that differs (GPU,
 * driver, data, L2 mode, timing mode, noise target, time limits, ...),
 * returning how many differ; and the table without them. */
int fp4_report_compare_settings(FILE *f, const fp4_report *old_r, const fp4_report *new_r);
/* Two reports with rows of which none match (backend, label, shape, L2 mode)
 * are not runs of the same cases, and a report without rows compares with
 * nothing: -1 with err saying so. */
int fp4_report_compare_rows(FILE *f, const fp4_report *old_r, const fp4_report *new_r,
                            const fp4_compare_opts *opts, fp4_err *err);

/* ---- the HTML report (src/report/html.c; docs/REPORT.md) ------------------------ */

/* One step of a row's per-step breakdown (an MoE layer: routing, gate_up,
 * down, ...), from the optional `steps` array of a JSON row:
 * [{"name": "gate_up", "us": 12.5}, ...]. */
typedef struct fp4_step {
    char name[FP4_NAME_LEN];
    double us; /* microseconds per call */
} fp4_step;

typedef struct fp4_row_steps {
    fp4_step *steps; /* count entries, owned */
    int count;
} fp4_row_steps;

/* A result file as the HTML report takes it: the report and each row's steps. */
typedef struct fp4_report_run {
    char name[256];       /* the file as the user named it (series names, messages) */
    fp4_report report;
    fp4_row_steps *steps; /* report.nrows entries; NULL when no row has steps */
} fp4_report_run;

/* Read a JSON result (fp4_report_read_json's rules) with its rows' `steps`:
 * an absent or null `steps` is none; otherwise an array of objects, each with
 * a string `name` (valid UTF-8, shorter than FP4_NAME_LEN bytes) and a finite
 * number `us` >= 0 (FP4_ERR_FORMAT naming the field otherwise). run is
 * overwritten; on failure it holds nothing and fp4_report_run_free stays
 * safe. */
fp4_status fp4_report_run_read(const char *path, fp4_report_run *run, fp4_err *err);
/* The same from the len bytes of JSON text at text; name names the run. */
fp4_status fp4_report_run_parse(const char *text, size_t len, const char *name,
                                fp4_report_run *run, fp4_err *err);
void fp4_report_run_free(fp4_report_run *run);

/* One self-contained HTML document (inline SVG; no script, no style sheet,
 * font or image fetched) on f: each run's machine and settings, latency vs M
 * per (N, K), speedup vs the baseline with its CI, a roofline, the per-step
 * breakdown of rows that have steps, and the tables with unsupported and
 * FAILED rows and their reasons. Every string from the runs is escaped.
 * Every run needs a row (FP4_ERR_FORMAT naming it otherwise); a write error
 * on f is FP4_ERR_IO. */
fp4_status fp4_report_write_html(FILE *f, const fp4_report_run *runs, int nruns, fp4_err *err);
/* The same into path, atomically (a temporary beside it, then renamed; a
 * device or FIFO is written straight into, a symlink followed). */
fp4_status fp4_report_write_html_file(const char *path, const fp4_report_run *runs, int nruns,
                                      fp4_err *err);
/* Each plot alone as an SVG document dir/NAME.svg (dir must exist): NAME is
 * latency-n<N>-k<K> per panel, speedup, roofline and steps, for those that
 * have data. *count (may be NULL) gets the number of files written. */
fp4_status fp4_report_write_svgs(const char *dir, const fp4_report_run *runs, int nruns,
                                 int *count, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
