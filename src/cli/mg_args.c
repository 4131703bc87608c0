/* The options and stamp fp4bench nccl and fp4bench layer share (cli/mg_args.h). */
#include "cli/mg_args.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"

int mg_int_in(const cli_args *a, const char *flag, const char *v, int lo, int hi)
{
    long long x = cli_int(a, flag, v);
    if (x < lo || x > hi) cli_usage_error(a, "%s must be in %d..%d", flag, lo, hi);
    return (int)x;
}

int mg_timing_flag(cli_args *a, int *iters, int *reps, int *warmup)
{
    const char *v;
    if (cli_value(a, "--iters", &v)) {
        *iters = mg_int_in(a, "--iters", v, 1, 100000);
    } else if (cli_value(a, "--reps", &v)) {
        *reps = mg_int_in(a, "--reps", v, 1, 1000);
    } else if (cli_value(a, "--warmup", &v)) {
        *warmup = mg_int_in(a, "--warmup", v, 0, 100000);
    } else {
        return 0;
    }
    return 1;
}

fp4_status mg_stamp(const char *cmd, int argc, char **argv, char *version, size_t nversion, char *commit,
                    size_t ncommit, char *started, size_t nstarted, char *host, size_t nhost, char *command,
                    size_t ncommand, fp4_err *err)
{
    fp4_report *scratch = calloc(1, sizeof *scratch);
    if (!scratch) return fp4_fail(err, FP4_ERR_NOMEM, "no memory");
    cli_stamp_report(scratch, cmd, argc, argv);
    snprintf(version, nversion, "%s", scratch->version);
    snprintf(commit, ncommit, "%s", scratch->commit);
    snprintf(started, nstarted, "%s", scratch->started);
    snprintf(host, nhost, "%s", scratch->host);
    snprintf(command, ncommand, "%s", scratch->command);
    free(scratch);
    return FP4_OK;
}
