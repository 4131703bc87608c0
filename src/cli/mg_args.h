/* What fp4bench nccl and fp4bench layer parse and stamp alike: the timing
 * options and the report's stamp. */
#ifndef FP4_CLI_MG_ARGS_H
#define FP4_CLI_MG_ARGS_H

#include <stddef.h>

#include "cli/args.h"

/* An integer flag value within lo..hi; a usage error (exits 2) otherwise. */
int mg_int_in(const cli_args *a, const char *flag, const char *v, int lo, int hi);

/* If argv[i] is --iters (1..100000), --reps (1..1000) or --warmup
 * (0..100000), store its value, advance and return 1. */
int mg_timing_flag(cli_args *a, int *iters, int *reps, int *warmup);

/* Version, commit, start time, host and command line, as run and moe stamp
 * theirs, into the fields of the same names (each with its size); fails
 * only for want of memory. */
fp4_status mg_stamp(const char *cmd, int argc, char **argv, char *version, size_t nversion, char *commit,
                    size_t ncommit, char *started, size_t nstarted, char *host, size_t nhost, char *command,
                    size_t ncommand, fp4_err *err);
/* r: an fp4_coll_report or an fp4_layer_report. */
#define MG_STAMP(r, cmd, argc, argv, err)                                                                         \
    mg_stamp((cmd), (argc), (argv), (r)->version, sizeof (r)->version, (r)->commit, sizeof (r)->commit,          \
             (r)->started, sizeof (r)->started, (r)->host, sizeof (r)->host, (r)->command, sizeof (r)->command,  \
             (err))

#endif
