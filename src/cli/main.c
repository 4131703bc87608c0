/* fp4bench: entry point and subcommand dispatch. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "fp4_version.h"

static const char usage[] =
    "fp4bench " FP4_VERSION " (" FP4_GIT_COMMIT "): which NVFP4 GEMM kernel is fastest, how close to\n"
    "the hardware limit, and is it correct.\n"
    "\n"
    "usage: fp4bench [COMMAND] [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  (none)      run the default suite: the seed shapes on every backend available here\n"
    "  run         measure shapes on backends (see fp4bench run --help)\n"
    "  list        every backend compiled in, whether it can run here, and if not, why\n"
    "  quantize    float/bf16 .npy -> NVFP4 safetensors (ModelOpt layout)\n"
    "  gemm        multiply two NVFP4 safetensors into a .npy\n"
    "  check       check another kernel's output against the exact reference\n"
    "  compare     compare two JSON results; exit 1 on regression\n"
    "\n"
    "  --help      this text (COMMAND --help for each command)\n"
    "  --version   version and git commit\n"
    "\n"
    "exit status: 0 ok, 1 a check failed (mismatch, FAILED row, regression),\n"
    "             2 usage error, 3 runtime error (bad file, bad shape, CUDA failure)\n";

int cli_value(cli_args *a, const char *name, const char **val)
{
    const char *arg = a->argv[a->i];
    size_t len = strlen(name);
    if (strncmp(arg, name, len) != 0) return 0;
    if (arg[len] == '=') {
        *val = arg + len + 1;
        a->i++;
        return 1;
    }
    if (arg[len] != '\0') return 0;
    if (a->i + 1 >= a->argc) cli_usage_error(a, "%s needs a value", name);
    *val = a->argv[a->i + 1];
    a->i += 2;
    return 1;
}

int cli_flag(cli_args *a, const char *name)
{
    if (strcmp(a->argv[a->i], name) != 0) return 0;
    a->i++;
    return 1;
}

void cli_usage_error(const cli_args *a, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", a->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see %s --help)\n", a->cmd);
    exit(EXIT_USAGE);
}

void cli_die(const char *cmd, const fp4_err *err)
{
    fprintf(stderr, "%s: error: %s\n", cmd, fp4_err_text(err));
    exit(EXIT_RUNTIME);
}

double cli_double(const cli_args *a, const char *flag, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v))
        cli_usage_error(a, "%s: '%s' is not a number", flag, s);
    return v;
}

long long cli_int(const cli_args *a, const char *flag, const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno == ERANGE)
        cli_usage_error(a, "%s: '%s' is not an integer", flag, s);
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 2) return cmd_run(argc, argv, 1);
    const char *c = argv[1];
    if (strcmp(c, "--help") == 0 || strcmp(c, "-h") == 0 || strcmp(c, "help") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(c, "--version") == 0 || strcmp(c, "version") == 0) {
        printf("fp4bench %s (commit %s)\n", FP4_VERSION, FP4_GIT_COMMIT);
        return 0;
    }
    if (strcmp(c, "run") == 0) return cmd_run(argc - 1, argv + 1, 0);
    if (strcmp(c, "list") == 0) return cmd_list(argc - 1, argv + 1);
    if (strcmp(c, "quantize") == 0) return cmd_quantize(argc - 1, argv + 1);
    if (strcmp(c, "gemm") == 0) return cmd_gemm(argc - 1, argv + 1);
    if (strcmp(c, "check") == 0) return cmd_check(argc - 1, argv + 1);
    if (strcmp(c, "compare") == 0) return cmd_compare(argc - 1, argv + 1);
    if (c[0] == '-') return cmd_run(argc, argv, 1); /* flags of the default suite */
    fprintf(stderr, "fp4bench: unknown command '%s' (see fp4bench --help)\n", c);
    return EXIT_USAGE;
}
