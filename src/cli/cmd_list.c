/* fp4bench list: backends (can they run here, and if not why) and presets. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "fp4/engine.h"
#include "fp4/shapes.h"

static const char list_usage[] =
    "usage: fp4bench list\n"
    "\n"
    "Every backend compiled in, whether it can run on this machine and if not why,\n"
    "and the workload presets.\n";

int cmd_list(int argc, char **argv)
{
    cli_args a = {argc, argv, 1, "fp4bench list"};
    fp4_settings set;
    fp4_report report;
    fp4_engine *engine;
    fp4_err err;
    while (a.i < argc) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(list_usage, stdout);
            return 0;
        }
        cli_usage_error(&a, "unknown option '%s'", argv[a.i]);
    }
    fp4_settings_default(&set);
    memset(&report, 0, sizeof report);
    if (fp4_engine_create(&set, &report, &engine, &err) != FP4_OK) cli_die(a.cmd, &err);
    if (report.dev.present)
        printf("GPU: %s (sm_%d%d, %d SMs)\n\n", report.dev.name, report.dev.cc_major,
               report.dev.cc_minor, report.dev.sms);
    else
        printf("GPU: none (%s)\n\n", report.dev.why_absent);
    printf("%-16s %-10s %s\n", "backend", "here", "what / why not");
    for (int i = 0; i < fp4_backend_count(); i++) {
        const fp4_backend_ops *ops = fp4_backend_at(i);
        fp4_err why;
        fp4_err_clear(&why);
        fp4_status st = fp4_engine_probe_backend(engine, ops, &why);
        printf("%-16s %-10s %s\n", ops->name, st == FP4_OK ? "yes" : "no", ops->summary);
        if (st != FP4_OK) printf("%-16s %-10s unsupported: %s\n", "", "", fp4_err_text(&why));
    }
    printf("\n%-10s %s\n", "preset", "shapes");
    for (int i = 0; i < fp4_preset_count(); i++)
        printf("%-10s %s\n", fp4_preset_name(i), fp4_preset_summary(i));
    fp4_warnings warn;
    fp4_warnings_clear(&warn);
    fp4_engine_destroy(engine, &warn);
    cli_print_warnings(&warn);
    return 0;
}
