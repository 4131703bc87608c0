/* fp4bench moe: the MoE workload (placeholder until written). */
#include <stdio.h>

#include "cli/args.h"
#include "cli/cli.h"

int cmd_moe(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "fp4bench moe: not built yet\n");
    return EXIT_RUNTIME;
}
