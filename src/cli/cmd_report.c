/* fp4bench report RESULT.json [MORE.json ...] --html OUT.html [--svg DIR]:
 * one self-contained HTML page with plots and tables, and/or each plot as
 * an SVG file (the page and plots are src/report/html.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "fp4/report.h"

static const char report_usage[] =
    "usage: fp4bench report RESULT.json [MORE.json ...] [--html OUT.html] [--svg DIR]\n"
    "\n"
    "Turn fp4bench run --json results into one self-contained HTML page (inline SVG, no\n"
    "script, nothing fetched): each file's GPU, driver, CUDA, clocks, commit, command and\n"
    "settings; latency vs M per (N, K); speedup vs the baseline with its 95% CI; a roofline\n"
    "against the measured ceilings; the per-step breakdown of rows that carry steps; and\n"
    "the tables, unsupported and FAILED rows with their reasons. With several files each\n"
    "backend gets one series per file (colour: backend; marker and dash: file). A file of\n"
    "fp4bench run --gpus whose rows span several GPUs gets one series per backend and GPU,\n"
    "a GPU column, and the per-GPU spread with the GPUs the slow rule flags marked S.\n"
    "\n"
    "  --html FILE   write the page to FILE (written whole, then renamed into place)\n"
    "  --svg DIR     write each plot alone as DIR/NAME.svg: latency-n<N>-k<K>, speedup,\n"
    "                roofline, steps (those that have data); DIR is created if missing\n"
    "\n"
    "At least one of --html and --svg. docs/REPORT.md says how to read each plot.\n"
    "\n"
    "exit status: 0 written, 2 usage error, 3 runtime error (a file that cannot be read,\n"
    "             is not an fp4bench report or has no rows; an output that cannot be written)\n";

/* Create dir unless it exists (as a folder). 0, or -1 with errno set. */
static int ensure_dir(const char *dir)
{
    struct stat sb;
    if (mkdir(dir, 0777) == 0) return 0;
    if (errno != EEXIST) return -1;
    if (stat(dir, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static void free_runs(fp4_report_run *runs, int n)
{
    for (int i = 0; i < n; i++) fp4_report_run_free(&runs[i]);
    free(runs);
}

int cmd_report(int argc, char **argv)
{
    cli_args a = {.argc = argc, .argv = argv, .i = 1, .cmd = "fp4bench report"};
    const char *html = NULL, *svg_dir = NULL, *v;
    const char **files = NULL;
    fp4_report_run *runs = NULL;
    int nfiles = 0, nrows = 0, nplots = 0;
    fp4_err err;

    files = calloc((size_t)(argc > 0 ? argc : 1), sizeof *files);
    if (!files) {
        fprintf(stderr, "%s: error: out of memory\n", a.cmd);
        return EXIT_RUNTIME;
    }
    while (a.i < argc) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(report_usage, stdout);
            free(files);
            return 0;
        } else if (cli_value(&a, "--html", &v)) {
            html = v;
        } else if (cli_value(&a, "--svg", &v)) {
            svg_dir = v;
        } else if (argv[a.i][0] == '-' && argv[a.i][1] != '\0') {
            cli_usage_error(&a, "unknown option '%s'", argv[a.i]);
        } else {
            files[nfiles++] = argv[a.i++];
        }
    }
    if (nfiles <= 0) cli_usage_error(&a, "expects at least one JSON result file");
    if (!html && !svg_dir)
        cli_usage_error(&a, "nothing to write: give --html FILE and/or --svg DIR");
    for (int i = 0; i < nfiles; i++) cli_distinct_files(&a, "--html", html, "the input file", files[i]);

    runs = calloc((size_t)nfiles, sizeof *runs);
    if (!runs) {
        free(files);
        fprintf(stderr, "%s: error: out of memory\n", a.cmd);
        return EXIT_RUNTIME;
    }
    for (int i = 0; i < nfiles; i++) {
        if (fp4_report_run_read(files[i], &runs[i], &err) != FP4_OK) goto fail;
        if (runs[i].report.nrows == 0) {
            fp4_fail(&err, FP4_ERR_FORMAT, "%s: no rows to report", files[i]);
            goto fail;
        }
        nrows += runs[i].report.nrows;
    }
    if (html) {
        if (fp4_report_write_html_file(html, runs, nfiles, &err) != FP4_OK) goto fail;
        printf("wrote %s: %d rows from %d file%s\n", html, nrows, nfiles, nfiles == 1 ? "" : "s");
    }
    if (svg_dir) {
        if (ensure_dir(svg_dir) != 0) {
            fp4_fail(&err, FP4_ERR_IO, "cannot create folder %s: %s", svg_dir, strerror(errno));
            goto fail;
        }
        if (fp4_report_write_svgs(svg_dir, runs, nfiles, &nplots, &err) != FP4_OK) goto fail;
        printf("wrote %d plot%s to %s\n", nplots, nplots == 1 ? "" : "s", svg_dir);
    }
    free_runs(runs, nfiles);
    free(files);
    return 0;
fail:
    free_runs(runs, nfiles);
    free(files);
    cli_die(a.cmd, &err);
}
