/* fp4bench report: the HTML report (placeholder until written). */
#include <stdio.h>

#include "cli/args.h"
#include "cli/cli.h"

int cmd_report(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "fp4bench report: not built yet\n");
    return EXIT_RUNTIME;
}
