/* The fp4bench command-line tool: its subcommands, dispatched by main.c.
 * Each parses its own arguments (cli/args.h) and returns the exit status. */
#ifndef FP4_CLI_H
#define FP4_CLI_H

int cmd_run(int argc, char **argv, int default_suite);
int cmd_list(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_gemm(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_moe(int argc, char **argv);

#endif
