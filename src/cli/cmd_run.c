/* fp4bench run (and the default suite): measure cases on backends and report. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "fp4/backend.h"
#include "fp4/device.h"
#include "fp4/engine.h"
#include "fp4/report.h"
#include "fp4/shapes.h"
#include "multigpu/pergpu.h"

#define MAX_BACKENDS 32
#define MAX_PLUGINS 8
#define MAX_SPECS 16

static const char run_usage[] =
    "usage: fp4bench run [OPTIONS]\n"
    "\n"
    "Measure NVFP4 GEMMs D[M,N] = A[M,K] * B[N,K]^T on backends: each backend is verified\n"
    "against the exact reference on poisoned output before it is timed; verified backends\n"
    "are timed interleaved (A B C A B C ...), cold L2, in CUDA graphs.\n"
    "\n"
    "workload (default: --preset seed; several may be combined):\n"
    "  --shape MxNxK[,MxNxK...]   explicit shapes, e.g. 16x2048x6144,64x768x6144 (a bad one\n"
    "                             is a usage error: exit 2)\n"
    "  --preset NAME              seed | sweep-m | targets | models | odd\n"
    "                             (fp4bench list --preset NAME shows the shapes)\n"
    "  --spec FILE                one problem per line: M N K [label]; '#' comments (up to 16)\n"
    "backends:\n"
    "  --backend a,b,...          names from fp4bench list or of a --plugin's backend, or 'all'\n"
    "                             (default: every GPU backend when a GPU is present, else\n"
    "                             cpu-ref); a --plugin's backend runs in any case\n"
    "  --plugin FILE.so           load an external backend (repeatable; docs/PLUGINS.md)\n"
    "  --baseline NAME            the ratio column is baseline time / backend time\n"
    "                             (default cublas-bf16 when it is measured); a backend that\n"
    "                             is not a GEMM (quantize) has no ratio and is no baseline\n"
    "measurement:\n"
    "  --data KIND                operand data: gaussian (default), codes (random codes and\n"
    "                             scales), outliers (heavy-tailed channels), wide (block\n"
    "                             magnitudes over five decades: subnormal E4M3 scales)\n"
    "  --seed N                   operand seed (default 1)\n"
    "  --hot                      L2-resident operands (default: cold L2, >= 3x L2 rotated)\n"
    "  --no-graphs                time plain launches instead of CUDA-graph batches\n"
    "  --launch                   also report plain-launch time beside the graph time\n"
    "  --warmup-ms MS             warm-up time per case, 0..60000 (default 200)\n"
    "  --min-samples N            at least N samples (default 10)\n"
    "  --noise F                  stop when the median's relative CI half-width < F (default 0.005)\n"
    "  --max-time S               time limit per measurement in seconds (default 10; 3 without GPU)\n"
    "  --no-ceilings              do not measure bandwidth / tensor-rate ceilings\n"
    "  --baseline-tuning on|off   on (default): cuBLAS/cuBLASLt baselines time their top\n"
    "                             heuristic algorithms (up to 8) once and keep the fastest,\n"
    "                             named in the row's variant; off: the library's first choice\n"
    "  --min-batch N              calls per graph replay, at least (default 64)\n"
    "  --verify-only              verify every backend, do not time\n"
    "  --time-reference           also time the reference backends (cpu-ref, cuda-ref); by\n"
    "                             default they only verify, unless nothing else runs\n"
    "GPUs:\n"
    "  --gpus all|0,1,...         run the workload on every listed GPU at once, one thread and\n"
    "                             engine per GPU (default: device 0 alone). Rows carry their\n"
    "                             GPU; after the table, per case and backend the spread of\n"
    "                             the GPUs' medians, GPUs slower than their median by more\n"
    "                             than max(3%, noise) (flag S) or throttled, and a node\n"
    "                             summary (docs/PARALLEL.md). A bad list is a usage error;\n"
    "                             without a CUDA device: unsupported (exit 3)\n"
    "output:\n"
    "  --json FILE                versioned JSON (docs/JSON.md), rewritten after every row;\n"
    "                             '-': to stdout once, at the end\n"
    "  --csv FILE                 CSV, one line per row, flushed as it goes; '-': to stdout\n"
    "                             (at most one of --json, --csv may be '-'; with '-' the\n"
    "                             header lines and the table go to stderr)\n"
    "  --samples                  keep every sample in the JSON\n"
    "  --verbose                  unsupported / FAILED reasons in full in the table (the JSON\n"
    "                             and CSV always have them in full)\n"
    "  --quiet                    no progress line\n"
    "\n"
    "\n"
    "Ctrl-C stops the run: the rows measured so far are printed and written, the JSON\n"
    "with \"interrupted\": true (a second Ctrl-C ends the program at once).\n"
    "\n"
    "exit status: 0 all rows ok or unsupported, 1 a backend FAILED, 2 usage error (a bad\n"
    "             option or --shape), 3 runtime error (a bad file, a CUDA failure),\n"
    "             130 interrupted (Ctrl-C)\n";

typedef struct run_ctx {
    const char *cmd;       /* for messages */
    FILE *out;             /* header and table */
    cli_row_files files; /* --json FILE, --csv */
    int progress;
    int total, done;
    fp4_err err;
    int ready; /* --gpus: the header was printed, the cases began */
} run_ctx;

static void on_row(const fp4_report *report, const fp4_row *row, void *user)
{
    run_ctx *ctx = user;
    ctx->done++;
    cli_row_files_write(&ctx->files, report, row);
    if (ctx->progress) {
        char gpu[24] = "";
        if (report->ngpus > 0) snprintf(gpu, sizeof gpu, " GPU %d", row->gpu);
        fprintf(stderr, "\r\033[K[%d/%d]%s %s %lldx%lldx%lld %s: %s", ctx->done, ctx->total, gpu,
                row->label, (long long)row->shape.m, (long long)row->shape.n,
                (long long)row->shape.k, row->backend, fp4_row_state_name(row->state));
        fflush(stderr);
    }
}

/* --gpus: every GPU's engine is up, report->gpus filled (the run's lock is
 * held): the header, the first JSON, and from here Ctrl-C stops the run.
 * Non-zero (the JSON cannot be written) ends the run before any case. */
static int on_gpus_ready(fp4_report *report, void *user)
{
    run_ctx *ctx = user;
    if (ctx->progress) fputs("\r\033[K", stderr);
    fp4_report_print_header(ctx->out, report);
    fflush(ctx->out);
    if (ctx->files.json_path && fp4_report_write_json(ctx->files.json_path, report, &ctx->err) != FP4_OK)
        return 1;
    cli_catch_sigint();
    ctx->ready = 1;
    return 0;
}

/* --gpus LIST: checked here, before anything runs: a bad list is a usage
 * error (exit 2), no CUDA device "unsupported" (exit 3). */
static void resolve_gpus(const cli_args *a, const char *arg, fp4_gpu_list *gpus)
{
    fp4_err err;
    char why[FP4_ERR_MSG_LEN];
    int count;
    if (fp4_gpu_list_parse(arg, gpus, &err) != FP4_OK) cli_usage_error(a, "--gpus: %s", err.msg);
    count = fp4_device_count(why, sizeof why);
    if (count <= 0) {
        fprintf(stderr, "%s: unsupported (no CUDA device: %s)\n", a->cmd, why);
        exit(EXIT_RUNTIME);
    }
    if (fp4_gpu_list_resolve(gpus, count, &err) != FP4_OK) cli_usage_error(a, "--gpus: %s", err.msg);
}

/* Append ops unless a backend of that name is already listed (rows are told
 * apart by backend name, so two of one name would be ambiguous). */
static int add_unique(const fp4_backend_ops **list, int *n, const fp4_backend_ops *ops)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(list[i]->name, ops->name) == 0) return list[i] == ops ? 0 : -1;
    if (*n == MAX_BACKENDS) return -1;
    list[(*n)++] = ops;
    return 0;
}

/* Add the comma-separated backend names to list: compiled-in backends, or
 * those of the loaded plugins. */
static void add_backends(const cli_args *a, const char *names, const fp4_backend_ops *const *plugins,
                         int nplugins, const fp4_backend_ops **list, int *n)
{
    char buf[512], *field[MAX_BACKENDS + 1];
    const int nf = cli_split_list(a, "--backend", names, buf, sizeof buf, field, MAX_BACKENDS + 1);
    for (int f = 0; f < nf; f++) {
        const char *t = field[f];
        if (strcmp(t, "all") == 0) {
            for (int i = 0; i < fp4_backend_count(); i++) add_unique(list, n, fp4_backend_at(i));
            for (int i = 0; i < nplugins; i++) add_unique(list, n, plugins[i]);
            continue;
        }
        const fp4_backend_ops *ops = fp4_backend_find(t);
        for (int i = 0; !ops && i < nplugins; i++)
            if (strcmp(plugins[i]->name, t) == 0) ops = plugins[i];
        if (!ops) {
            char known[512] = "";
            for (int i = 0; i < fp4_backend_count() + nplugins; i++) {
                const char *name = i < fp4_backend_count() ? fp4_backend_at(i)->name
                                                           : plugins[i - fp4_backend_count()]->name;
                strncat(known, name, sizeof known - strlen(known) - 1);
                strncat(known, i + 1 < fp4_backend_count() + nplugins ? ", " : "",
                        sizeof known - strlen(known) - 1);
            }
            cli_usage_error(a, "--backend: unknown backend '%s' (known: %s; a plugin's backend "
                            "needs its --plugin FILE.so)", t, known);
        }
        add_unique(list, n, ops);
    }
}

int cmd_run(int argc, char **argv, int default_suite)
{
    cli_args a = {.argc = argc, .argv = argv, .i = 1, .cmd = "fp4bench run",
                  .repeatable = "--shape --preset --spec --plugin"};
    fp4_settings set;
    fp4_case_list cases = {0};
    const fp4_backend_ops *backends[MAX_BACKENDS];
    void *plugin_handles[MAX_PLUGINS];
    const fp4_backend_ops *plugin_ops[MAX_PLUGINS];
    const char *spec_paths[MAX_SPECS];
    int nspecs = 0;
    int nbackends = 0, nplugins = 0, max_time_given = 0, no_ceilings = 0, quiet = 0;
    const char *v, *csv_path = NULL, *backend_arg = NULL, *json_arg = NULL, *gpus_arg = NULL;
    fp4_gpu_list gpus;
    int verbose = 0;
    FILE *out = stdout; /* header and table: stderr when the data goes to stdout */
    fp4_err err;
    fp4_report report;
    fp4_engine *engine = NULL;
    run_ctx ctx;
    int rc = 0;

    if (default_suite) a.cmd = "fp4bench";
    memset(&ctx, 0, sizeof ctx);
    memset(&report, 0, sizeof report);
    fp4_settings_default(&set);
    while (a.i < argc) {
        if (cli_measure_option(&a, &set, &max_time_given)) {
            continue;
        } else if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(run_usage, stdout);
            return 0;
        } else if (cli_value(&a, "--shape", &v)) {
            if (fp4_cases_parse_shapes(&cases, v, &err) != FP4_OK) cli_usage_error(&a, "--shape: %s", err.msg);
        } else if (cli_value(&a, "--preset", &v)) {
            if (fp4_cases_from_preset(&cases, v, &err) != FP4_OK) cli_usage_error(&a, "--preset: %s", err.msg);
        } else if (cli_value(&a, "--spec", &v)) {
            if (nspecs == MAX_SPECS) cli_usage_error(&a, "--spec: at most %d files", MAX_SPECS);
            spec_paths[nspecs++] = v;
            if (fp4_cases_from_spec(&cases, v, &err) != FP4_OK) cli_die(a.cmd, &err);
        } else if (cli_value(&a, "--backend", &v)) {
            backend_arg = v; /* resolved once every --plugin is loaded */
        } else if (cli_value(&a, "--plugin", &v)) {
            const fp4_backend_ops *ops;
            if (nplugins == MAX_PLUGINS) cli_usage_error(&a, "--plugin: at most %d plugins", MAX_PLUGINS);
            if (fp4_backend_load(v, &ops, &plugin_handles[nplugins], &err) != FP4_OK) cli_die(a.cmd, &err);
            if (fp4_backend_find(ops->name))
                cli_usage_error(&a, "--plugin: its backend '%s' has the name of a built-in one", ops->name);
            for (int i = 0; i < nplugins; i++)
                if (strcmp(plugin_ops[i]->name, ops->name) == 0)
                    cli_usage_error(&a, "--plugin: a backend named '%s' is already loaded", ops->name);
            plugin_ops[nplugins++] = ops;
        } else if (cli_value(&a, "--baseline", &v)) {
            snprintf(set.baseline, sizeof set.baseline, "%s", v);
        } else if (cli_value(&a, "--json", &v)) {
            json_arg = v;
        } else if (cli_value(&a, "--csv", &v)) {
            csv_path = v;
        } else if (cli_value(&a, "--data", &v)) {
            if (fp4_data_kind_parse(v, &set.data) != 0)
                cli_usage_error(&a, "--data: unknown kind '%s' (gaussian, codes, outliers, wide)", v);
        } else if (cli_flag(&a, "--launch")) {
            set.measure_launch = 1;
        } else if (cli_flag(&a, "--no-ceilings")) {
            no_ceilings = 1;
        } else if (cli_value(&a, "--gpus", &v)) {
            gpus_arg = v;
        } else if (cli_flag(&a, "--quiet")) {
            quiet = 1;
        } else if (cli_flag(&a, "--verbose")) {
            verbose = 1;
        } else {
            cli_usage_error(&a, "unknown option '%s'", argv[a.i]);
        }
    }
    if (json_arg && csv_path && strcmp(json_arg, "-") == 0 && strcmp(csv_path, "-") == 0)
        cli_usage_error(&a, "--json - and --csv - would both write to stdout; pick one");
    cli_distinct_files(&a, "--csv", csv_path, "--json", json_arg);
    for (int i = 0; i < nspecs; i++) {
        cli_distinct_files(&a, "--json", json_arg, "--spec", spec_paths[i]);
        cli_distinct_files(&a, "--csv", csv_path, "--spec", spec_paths[i]);
    }
    if (json_arg && strcmp(json_arg, "-") != 0) ctx.files.json_path = json_arg;
    if ((json_arg && strcmp(json_arg, "-") == 0) || (csv_path && strcmp(csv_path, "-") == 0))
        out = stderr;
    if (cases.count == 0 && fp4_cases_from_preset(&cases, "seed", &err) != FP4_OK) cli_die(a.cmd, &err);

    /* the engine looks for the GPU; defaults depend on what it finds */
    fp4_device_info probe;
    fp4_device_describe(&probe);
    if (!probe.present && !max_time_given) set.stop.max_time_s = 3;
    set.measure_ceilings = !no_ceilings && probe.present && !set.verify_only;
    if (backend_arg) {
        add_backends(&a, backend_arg, plugin_ops, nplugins, backends, &nbackends);
    } else { /* the defaults */
        for (int i = 0; i < fp4_backend_count() && nbackends < MAX_BACKENDS; i++) {
            const fp4_backend_ops *ops = fp4_backend_at(i);
            int gpu = (ops->flags & FP4_BACKEND_GPU) != 0;
            if (probe.present ? gpu : !gpu) backends[nbackends++] = ops;
        }
    }
    /* a loaded plugin always runs, named in --backend or not */
    for (int i = 0; i < nplugins; i++) add_unique(backends, &nbackends, plugin_ops[i]);
    if (!set.baseline[0]) {
        for (int i = 0; i < nbackends; i++)
            if (strcmp(backends[i]->name, "cublas-bf16") == 0)
                snprintf(set.baseline, sizeof set.baseline, "cublas-bf16");
    } else {
        int found = 0;
        for (int i = 0; i < nbackends; i++) found |= strcmp(backends[i]->name, set.baseline) == 0;
        if (!found) cli_usage_error(&a, "--baseline '%s' is not among the measured backends", set.baseline);
        for (int i = 0; i < nbackends; i++)
            if (strcmp(backends[i]->name, set.baseline) == 0 &&
                (backends[i]->flags & FP4_BACKEND_NOT_GEMM))
                cli_usage_error(&a, "--baseline '%s' is not a GEMM: no ratio against it means anything",
                                set.baseline);
    }
    /* after the names: a bad one is a usage error on any machine */
    memset(&gpus, 0, sizeof gpus);
    if (gpus_arg) resolve_gpus(&a, gpus_arg, &gpus);
    set.interrupt = cli_interrupt_flag();
    /* --gpus: every GPU makes its own engine, in its own thread (below) */
    if (!gpus_arg && fp4_engine_create(&set, &report, &engine, &err) != FP4_OK) cli_die(a.cmd, &err);

    /* argv[0] is "run" for the subcommand, the program path for the default suite */
    cli_stamp_report(&report, default_suite ? "fp4bench" : "fp4bench run", argc, argv);

    if (csv_path) {
        FILE *csv = strcmp(csv_path, "-") == 0 ? stdout : fopen(csv_path, "w");
        if (!csv) {
            fp4_fail(&err, FP4_ERR_IO, "cannot write %s", csv_path);
            cli_die(a.cmd, &err);
        }
        if ((gpus_arg ? fp4_csv_write_header_gpus(csv, &err) : fp4_csv_write_header(csv, &err)) != FP4_OK)
            cli_die(a.cmd, &err);
        ctx.files.csv = csv;
    }
    ctx.progress = !quiet && isatty(2);
    ctx.total = cases.count * nbackends * (gpus_arg ? gpus.n : 1);
    ctx.cmd = a.cmd;
    ctx.out = out;

    fp4_warnings warn;
    fp4_warnings_clear(&warn);
    if (gpus_arg) {
        const fp4_pergpu_job job = {&set, set.measure_ceilings, cases.items, cases.count,
                                    backends, nbackends, &gpus, on_gpus_ready, on_row, &ctx};
        if (ctx.progress)
            fprintf(stderr, "starting %d GPUs%s...", gpus.n,
                    set.measure_ceilings ? ", measuring their ceilings" : "");
        fp4_err_clear(&ctx.err);
        fp4_status gst = fp4_pergpu_run(&job, &report, &warn, &err);
        if (ctx.progress) fputs("\r\033[K", stderr);
        if (gst == FP4_ERR_INTERRUPTED) {
            report.interrupted = 1;
            fprintf(stderr, "%s: interrupted: %d rows kept\n", a.cmd, report.nrows);
            if (ctx.files.json_path && fp4_report_write_json(ctx.files.json_path, &report, &err) != FP4_OK)
                fprintf(stderr, "%s: error: %s\n", a.cmd, fp4_err_text(&err));
            rc = EXIT_INTERRUPTED;
        } else if (gst != FP4_OK || ctx.err.msg[0]) {
            fprintf(stderr, "%s: error: %s\n", a.cmd,
                    ctx.err.msg[0] ? fp4_err_text(&ctx.err) : fp4_err_text(&err));
            rc = EXIT_RUNTIME;
        }
        if (!ctx.ready) { /* no GPU got to its first case: no table either */
            cli_print_warnings(&warn);
            fp4_report_free(&report);
            fp4_cases_free(&cases);
            for (int i = 0; i < nplugins; i++) fp4_backend_unload(plugin_handles[i]);
            return rc ? rc : EXIT_RUNTIME;
        }
        goto report;
    }

    if (set.measure_ceilings) {
        if (ctx.progress) fprintf(stderr, "measuring ceilings (read bandwidth, bf16/fp8 rates)...");
        if (fp4_engine_measure_ceilings(engine, &report, &err) != FP4_OK)
            fprintf(stderr, "fp4bench: warning: ceilings not measured: %s\n", fp4_err_text(&err));
    }
    fp4_report_print_header(out, &report);
    fflush(out);
    if (ctx.files.json_path && fp4_report_write_json(ctx.files.json_path, &report, &err) != FP4_OK)
        cli_die(a.cmd, &err);

    cli_catch_sigint();
    for (int i = 0; i < cases.count; i++) {
        fp4_status cst = fp4_engine_run_case(engine, &cases.items[i], i, backends, nbackends,
                                             &report, on_row, &ctx, &err);
        if (cst == FP4_ERR_INTERRUPTED) {
            report.interrupted = 1;
            if (ctx.progress) fputs("\r\033[K", stderr);
            fprintf(stderr, "%s: interrupted: %d rows kept\n", a.cmd, report.nrows);
            if (ctx.files.json_path && fp4_report_write_json(ctx.files.json_path, &report, &err) != FP4_OK)
                fprintf(stderr, "%s: error: %s\n", a.cmd, fp4_err_text(&err));
            rc = EXIT_INTERRUPTED;
            break;
        }
        if (cst != FP4_OK) {
            if (ctx.progress) fputc('\n', stderr);
            fprintf(stderr, "%s: error: case %s %lldx%lldx%lld: %s\n", a.cmd, cases.items[i].label,
                    (long long)cases.items[i].shape.m, (long long)cases.items[i].shape.n,
                    (long long)cases.items[i].shape.k, fp4_err_text(&err));
            rc = EXIT_RUNTIME;
            break;
        }
    }
    if (ctx.progress) fputs("\r\033[K", stderr);
report:
    fp4_report_print_table_verbose(out, &report, verbose);
    if (json_arg && strcmp(json_arg, "-") == 0 && cli_json_to_stdout(&report, &err) != FP4_OK) {
        fprintf(stderr, "%s: error: %s\n", a.cmd, fp4_err_text(&err));
        if (rc == 0) rc = EXIT_RUNTIME;
    }
    signal(SIGINT, SIG_DFL); /* the work is kept; from here Ctrl-C ends the program */
    for (int i = 0; i < report.nrows; i++)
        if (report.rows[i].state == FP4_ROW_FAILED && rc == 0) rc = EXIT_CHECK;
    if (ctx.files.write_failed && rc == 0) rc = EXIT_RUNTIME;

    if (ctx.files.csv && ctx.files.csv != stdout && fclose(ctx.files.csv) != 0) {
        fprintf(stderr, "%s: error: cannot write %s\n", a.cmd, csv_path);
        if (rc == 0) rc = EXIT_RUNTIME;
    }
    if (fflush(stdout) != 0 && rc == 0) { /* a full disk or a closed pipe under --csv - */
        fprintf(stderr, "%s: error: cannot write to stdout\n", a.cmd);
        rc = EXIT_RUNTIME;
    }
    fp4_engine_destroy(engine, &warn); /* NULL under --gpus: each thread destroyed its own */
    cli_print_warnings(&warn);
    fp4_report_free(&report);
    fp4_cases_free(&cases);
    for (int i = 0; i < nplugins; i++) fp4_backend_unload(plugin_handles[i]);
    return rc;
}
