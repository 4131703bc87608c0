/* fp4bench: entry point and subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
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
    "  list        every backend compiled in, whether it can run here, and if not, why;\n"
    "              the presets (list --preset NAME: that preset's shapes)\n"
    "  quantize    float/bf16 .npy -> NVFP4 safetensors (ModelOpt layout)\n"
    "  gemm        multiply two NVFP4 safetensors into a .npy\n"
    "  check       check another kernel's output against the exact reference\n"
    "  compare     compare two JSON results; exit 1 on regression\n"
    "  report      JSON results -> one self-contained HTML report with plots (--html)\n"
    "  moe         routed MoE expert layers (gate_up, down, the whole layer)\n"
    "  nccl        NCCL all-reduce and all-to-all across the GPUs, verified then timed\n"
    "  layer       an MoE (TP or EP) or attention (TP) layer over several GPUs, NCCL in the graphs\n"
    "\n"
    "  --help      this text (COMMAND --help for each command)\n"
    "  --version   version and git commit\n"
    "\n"
    "exit status: 0 ok, 1 a check failed (mismatch, FAILED row, regression),\n"
    "             2 usage error (bad option, bad --shape), 3 runtime error (bad file,\n"
    "             CUDA failure)\n";

static int dispatch(int argc, char **argv)
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
    if (strcmp(c, "report") == 0) return cmd_report(argc - 1, argv + 1);
    if (strcmp(c, "moe") == 0) return cmd_moe(argc - 1, argv + 1);
    if (strcmp(c, "nccl") == 0) return cmd_nccl(argc - 1, argv + 1);
    if (strcmp(c, "layer") == 0) return cmd_layer(argc - 1, argv + 1);
    if (c[0] == '-') return cmd_run(argc, argv, 1); /* flags of the default suite */
    fprintf(stderr, "fp4bench: unknown command '%s' (see fp4bench --help)\n", c);
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    const int rc = dispatch(argc, argv);
    /* what a command printed may sit in stdout's buffer: a full disk or a
     * closed pipe shows only here, and a verdict lost that way is no success */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "fp4bench: error: cannot write to stdout\n");
        return rc == 0 ? EXIT_RUNTIME : rc;
    }
    return rc;
}
