/* The fp4bench command-line tool: its subcommands, dispatched by main.c.
 * Each parses its own arguments (cli/args.h) and returns the exit status. */
#ifndef FP4_CLI_H
#define FP4_CLI_H

#include <signal.h>

#include "cli/args.h"
#include "fp4/engine.h"
#include "fp4/report.h"

int cmd_run(int argc, char **argv, int default_suite);
int cmd_list(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_gemm(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_moe(int argc, char **argv);
int cmd_nccl(int argc, char **argv);
int cmd_layer(int argc, char **argv);

/* ---- shared by the measuring commands (cli/measure.c) ---- */
/* The flag the engine reads (fp4_settings.interrupt), cleared. */
volatile sig_atomic_t *cli_interrupt_flag(void);
/* From here, Ctrl-C sets that flag; a second Ctrl-C ends the program. */
void cli_catch_sigint(void);
/* Version, commit, start time, host and the command line ("fp4bench run"
 * and argv[1..]) into the report. */
void cli_stamp_report(fp4_report *r, const char *command, int argc, char **argv);
/* The measurement options run and moe share (--seed, --max-time,
 * --min-samples, --noise, --warmup-ms, --min-batch, --baseline-tuning, --hot,
 * --no-graphs, --time-reference, --verify-only, --samples): if argv[i] is
 * one, check its value into set, advance and return 1 (*max_time_given set by
 * --max-time); a bad value is a usage error. */
int cli_measure_option(cli_args *a, fp4_settings *set, int *max_time_given);
/* --json -: the whole report to stdout. */
fp4_status cli_json_to_stdout(const fp4_report *report, fp4_err *err);
/* --json FILE and --csv as the rows arrive: the JSON rewritten whole, a CSV
 * line appended (the GPU-column form when the report has GPUs). A failure is
 * a warning, so the run goes on; write_failed then makes its exit status
 * say so (the JSON is not retried after its first failure). */
typedef struct cli_row_files {
    const char *json_path; /* NULL: none, or the report goes to stdout at the end */
    FILE *csv;             /* NULL: none */
    int write_failed;
} cli_row_files;
void cli_row_files_write(cli_row_files *f, const fp4_report *report, const fp4_row *row);

#endif
