/* fp4bench list: GEMM and MoE backends (can they run here, and if not why)
 * and presets. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "fp4/engine.h"
#include "fp4/moe_backend.h"
#include "fp4/moe_engine.h"
#include "fp4/shapes.h"

static const char list_usage[] =
    "usage: fp4bench list [--preset NAME] [--plugin FILE.so]\n"
    "\n"
    "Every backend compiled in (GEMM backends, then the MoE backends of fp4bench moe),\n"
    "whether it can run on this machine and if not why, and the workload presets.\n"
    "\n"
    "  --preset NAME    only that preset's shapes, one 'M N K label' line each (the format\n"
    "                   of --spec files); an unknown NAME is a usage error (exit 2)\n"
    "  --plugin FILE.so also the external backend of that plugin, GEMM or MoE (repeatable),\n"
    "                   checked as run --plugin and moe --plugin check it: a plugin that\n"
    "                   cannot load is exit 3\n";

#define LIST_MAX_PLUGINS 8

/* One backend's lines: can it run here (st from its probe), and if not, why. */
static void list_line(const char *name, const char *summary, fp4_status st, const fp4_err *why,
                      const char *plugin_path)
{
    printf("%-16s %-10s %s", name, st == FP4_OK ? "yes" : "no", summary);
    if (plugin_path) printf(" (plugin %s)", plugin_path);
    putchar('\n');
    if (st != FP4_OK) printf("%-16s %-10s unsupported: %s\n", "", "", fp4_err_text(why));
}

static void list_backend(fp4_engine *engine, const fp4_backend_ops *ops, const char *plugin_path)
{
    fp4_err why;
    fp4_err_clear(&why);
    list_line(ops->name, ops->summary, fp4_engine_probe_backend(engine, ops, &why), &why, plugin_path);
}

static void list_moe_backend(fp4_moe_engine *moe, const fp4_moe_backend_ops *ops, const char *plugin_path)
{
    fp4_err why;
    fp4_err_clear(&why);
    list_line(ops->name, ops->summary, fp4_moe_engine_probe_backend(moe, ops, &why), &why, plugin_path);
}

/* Load a plugin of either kind into *gemm or *moe (the other NULL); exits
 * with the loader's message when it is neither. */
static void load_plugin(const cli_args *a, const char *path, const fp4_backend_ops **gemm,
                        const fp4_moe_backend_ops **moe, void **handle)
{
    fp4_err err, moe_err;
    *gemm = NULL;
    *moe = NULL;
    if (fp4_backend_load(path, gemm, handle, &err) == FP4_OK) return;
    if (err.status != FP4_ERR_FORMAT) cli_die(a->cmd, &err); /* it did not load at all */
    /* no GEMM entry: an MoE plugin, or the GEMM loader's message */
    if (fp4_moe_backend_load(path, moe, handle, &moe_err) == FP4_OK) return;
    if (moe_err.status == FP4_ERR_FORMAT)
        fp4_fail(&moe_err, FP4_ERR_FORMAT, "plugin %s has no symbol %s (nor %s)", path,
                 FP4_BACKEND_ENTRY_SYMBOL, FP4_MOE_BACKEND_ENTRY_SYMBOL);
    cli_die(a->cmd, &moe_err);
}

/* The shapes of one preset in the spec-file format, so that the output can be
 * edited and fed back with run --spec. */
static int list_preset(const cli_args *a, const char *name)
{
    fp4_case_list cases = {0};
    fp4_err err;
    if (fp4_cases_from_preset(&cases, name, &err) != FP4_OK) {
        if (err.status == FP4_ERR_NOT_FOUND) cli_usage_error(a, "--preset: %s", err.msg);
        cli_die(a->cmd, &err);
    }
    for (int i = 0; i < cases.count; i++)
        printf("%lld %lld %lld %s\n", (long long)cases.items[i].shape.m,
               (long long)cases.items[i].shape.n, (long long)cases.items[i].shape.k,
               cases.items[i].label);
    fp4_cases_free(&cases);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "%s: error: cannot write to stdout\n", a->cmd);
        return EXIT_RUNTIME;
    }
    return 0;
}

int cmd_list(int argc, char **argv)
{
    cli_args a = {.argc = argc, .argv = argv, .i = 1, .cmd = "fp4bench list",
                  .repeatable = "--plugin"};
    fp4_settings set;
    fp4_report report;
    fp4_engine *engine;
    fp4_err err;
    const char *preset = NULL, *v;
    const fp4_backend_ops *plugins[LIST_MAX_PLUGINS];
    const fp4_moe_backend_ops *moe_plugins[LIST_MAX_PLUGINS];
    const char *plugin_paths[LIST_MAX_PLUGINS];
    void *plugin_handles[LIST_MAX_PLUGINS];
    fp4_moe_engine *moe;
    int nplugins = 0, rc;
    while (a.i < argc) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(list_usage, stdout);
            return 0;
        } else if (cli_value(&a, "--preset", &preset)) {
            continue;
        } else if (cli_value(&a, "--plugin", &v)) {
            if (nplugins == LIST_MAX_PLUGINS)
                cli_usage_error(&a, "--plugin: at most %d plugins", LIST_MAX_PLUGINS);
            load_plugin(&a, v, &plugins[nplugins], &moe_plugins[nplugins], &plugin_handles[nplugins]);
            const char *name = plugins[nplugins] ? plugins[nplugins]->name : moe_plugins[nplugins]->name;
            for (int i = 0; i < nplugins; i++)
                if (strcmp(plugins[i] ? plugins[i]->name : moe_plugins[i]->name, name) == 0)
                    cli_usage_error(&a, "--plugin: a backend named '%s' is already loaded", name);
            plugin_paths[nplugins++] = v;
            continue;
        }
        cli_usage_error(&a, "unknown option '%s'", argv[a.i]);
    }
    if (preset) {
        rc = list_preset(&a, preset);
        for (int i = 0; i < nplugins; i++) fp4_backend_unload(plugin_handles[i]);
        return rc;
    }
    fp4_settings_default(&set);
    memset(&report, 0, sizeof report);
    if (fp4_engine_create(&set, &report, &engine, &err) != FP4_OK) cli_die(a.cmd, &err);
    if (fp4_moe_engine_create(engine, &report, &moe, &err) != FP4_OK) cli_die(a.cmd, &err);
    if (report.dev.present)
        printf("GPU: %s (sm_%d%d, %d SMs)\n\n", report.dev.name, report.dev.cc_major,
               report.dev.cc_minor, report.dev.sms);
    else
        printf("GPU: none (%s)\n\n", report.dev.why_absent);
    printf("%-16s %-10s %s\n", "backend", "here", "what / why not");
    for (int i = 0; i < fp4_backend_count(); i++) list_backend(engine, fp4_backend_at(i), NULL);
    for (int i = 0; i < nplugins; i++)
        if (plugins[i]) list_backend(engine, plugins[i], plugin_paths[i]);
    printf("\n%-16s %-10s %s\n", "MoE backend", "here", "what / why not (fp4bench moe)");
    for (int i = 0; i < fp4_moe_backend_count(); i++) list_moe_backend(moe, fp4_moe_backend_at(i), NULL);
    for (int i = 0; i < nplugins; i++)
        if (moe_plugins[i]) list_moe_backend(moe, moe_plugins[i], plugin_paths[i]);
    printf("\n%-10s %s\n", "preset", "shapes");
    for (int i = 0; i < fp4_preset_count(); i++)
        printf("%-10s %s\n", fp4_preset_name(i), fp4_preset_summary(i));
    fp4_warnings warn;
    fp4_warnings_clear(&warn);
    fp4_moe_engine_destroy(moe, &warn);
    fp4_engine_destroy(engine, &warn); /* closes the plugins' instances: unload after */
    cli_print_warnings(&warn);
    for (int i = 0; i < nplugins; i++) fp4_backend_unload(plugin_handles[i]);
    return 0;
}
