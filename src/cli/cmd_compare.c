/* fp4bench compare OLD.json NEW.json: per-row ratios, exit 1 on regression. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "fp4/report.h"

static const char compare_usage[] =
    "usage: fp4bench compare OLD.json NEW.json [--threshold F] [--allow-gone]\n"
    "\n"
    "Match rows by (backend, label, shape, L2 mode) and print new/old median ratios with a\n"
    "noise-aware verdict. Exit 1 when any row slowed down by more than the threshold\n"
    "(default 0.05 = 5%) beyond its measured noise, went from ok to FAILED/unsupported,\n"
    "or is gone: in OLD but not in NEW (--allow-gone: NEW may measure a subset).\n"
    "Two files with no row in common, or a file without rows, are an error (exit 3).\n"
    "\n"
    "Rows timed on the CPU (host timing) are judged against their noise and the spread of\n"
    "their samples, and are never regressions: a CPU's speed drifts between runs by more\n"
    "than one run can measure. They show 'cpu-slower' / 'cpu-faster' when they moved.\n"
    "\n"
    "Each setting in which the two runs differ (GPU, driver, data, L2 mode, timing mode,\n"
    "noise target, time limits, seed, ...) gives one warning line on stderr.\n"
    "\n"
    "exit status: 0 no regression, 1 a regression, 2 usage error, 3 runtime error (a file\n"
    "             that cannot be read or is not an fp4bench report)\n";

/* The library's settings warnings on stderr, each line with the command's
 * prefix (it writes plain "warning: ..." lines to a FILE). */
static void print_settings_warnings(const char *cmd, const fp4_report *o, const fp4_report *n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) { /* no memory for the prefix: the plain lines still go out */
        fp4_report_compare_settings(stderr, o, n);
        return;
    }
    fp4_report_compare_settings(mem, o, n);
    if (fclose(mem) != 0 || !buf) {
        free(buf);
        fp4_report_compare_settings(stderr, o, n);
        return;
    }
    for (char *p = buf; *p;) {
        size_t l = strcspn(p, "\n");
        fprintf(stderr, "%s: %.*s\n", cmd, (int)l, p);
        p += l;
        if (*p == '\n') p++;
    }
    free(buf);
}

int cmd_compare(int argc, char **argv)
{
    cli_args a = {.argc = argc, .argv = argv, .i = 1, .cmd = "fp4bench compare"};
    const char *files[2] = {NULL, NULL}, *v;
    int nfiles = 0;
    fp4_compare_opts opts = {0.05, 1};
    fp4_report old_r, new_r;
    fp4_err err;
    while (a.i < argc) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(compare_usage, stdout);
            return 0;
        } else if (cli_value(&a, "--threshold", &v)) {
            opts.threshold = cli_double(&a, "--threshold", v);
            if (opts.threshold < 0) cli_usage_error(&a, "--threshold must be >= 0");
        } else if (cli_flag(&a, "--allow-gone")) {
            opts.gone_is_regression = 0;
        } else if (argv[a.i][0] == '-') {
            cli_usage_error(&a, "unknown option '%s'", argv[a.i]);
        } else {
            if (nfiles == 2) cli_usage_error(&a, "expects exactly two JSON files");
            files[nfiles++] = argv[a.i++];
        }
    }
    if (nfiles != 2) cli_usage_error(&a, "expects two JSON files: OLD.json NEW.json");
    memset(&old_r, 0, sizeof old_r);
    memset(&new_r, 0, sizeof new_r);
    if (fp4_report_read_json(files[0], &old_r, &err) != FP4_OK) cli_die(a.cmd, &err);
    if (fp4_report_read_json(files[1], &new_r, &err) != FP4_OK) {
        fp4_report_free(&old_r);
        cli_die(a.cmd, &err);
    }
    /* warnings on stderr: the table on stdout stays a table for scripts */
    print_settings_warnings(a.cmd, &old_r, &new_r);
    int regressions = fp4_report_compare_rows(stdout, &old_r, &new_r, &opts, &err);
    fp4_report_free(&old_r);
    fp4_report_free(&new_r);
    if (regressions < 0) cli_die(a.cmd, &err);
    return regressions > 0 ? EXIT_CHECK : 0;
}
