/* What the measuring commands (run, moe) share: the report's stamp, Ctrl-C,
 * the JSON and CSV written as rows arrive, and the JSON on stdout. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "fp4_version.h"

/* Set by the SIGINT handler, read by the engine between samples. A signal
 * handler can only reach static storage: this is the one such variable. */
static volatile sig_atomic_t interrupt_requested;

static void on_sigint(int sig)
{
    (void)sig;
    interrupt_requested = 1;
}

volatile sig_atomic_t *cli_interrupt_flag(void)
{
    interrupt_requested = 0;
    return &interrupt_requested;
}

/* Ctrl-C once: stop and keep what was measured; twice: the default action
 * (SA_RESETHAND), for a run stuck where the engine does not look. */
void cli_catch_sigint(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGINT, &sa, NULL);
}

void cli_stamp_report(fp4_report *r, const char *command, int argc, char **argv)
{
    time_t t = time(NULL);
    struct tm tm;
    snprintf(r->version, sizeof r->version, "%s", FP4_VERSION);
    snprintf(r->commit, sizeof r->commit, "%s", FP4_GIT_COMMIT);
    gmtime_r(&t, &tm);
    strftime(r->started, sizeof r->started, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (gethostname(r->host, sizeof r->host) != 0) r->host[0] = '\0';
    r->host[sizeof r->host - 1] = '\0';
    snprintf(r->command, sizeof r->command, "%s", command);
    for (int i = 1; i < argc; i++) {
        size_t len = strlen(r->command);
        if (len + 1 + strlen(argv[i]) + 4 >= sizeof r->command) { /* say it was cut */
            snprintf(r->command + len, sizeof r->command - len, " ...");
            break;
        }
        snprintf(r->command + len, sizeof r->command - len, " %s", argv[i]);
    }
}

/* The JSON writer writes files atomically (a temporary file, then rename), so
 * the document goes to a private temporary directory first and is copied to
 * stdout from there. */
fp4_status cli_json_to_stdout(const fp4_report *report, fp4_err *err)
{
    char dir[4096], path[4096 + 16], buf[65536];
    const char *tmp = getenv("TMPDIR");
    fp4_status st;
    FILE *f;
    size_t n;
    char *d;
    if (!tmp || !tmp[0]) tmp = "/tmp";
    if (snprintf(dir, sizeof dir, "%s/fp4bench-XXXXXX", tmp) >= (int)sizeof dir)
        return fp4_fail(err, FP4_ERR_IO, "TMPDIR is too long");
    d = mkdtemp(dir);
    if (!d) return fp4_fail(err, FP4_ERR_IO, "cannot create a temporary directory in %s: %s", tmp,
                            strerror(errno));
    snprintf(path, sizeof path, "%s/report.json", d);
    st = fp4_report_write_json(path, report, err);
    if (st == FP4_OK) {
        f = fopen(path, "rb");
        if (!f) st = fp4_fail(err, FP4_ERR_IO, "cannot read back %s", path);
        while (st == FP4_OK && (n = fread(buf, 1, sizeof buf, f)) > 0)
            if (fwrite(buf, 1, n, stdout) != n)
                st = fp4_fail(err, FP4_ERR_IO, "cannot write the JSON to stdout");
        if (f && ferror(f) && st == FP4_OK) st = fp4_fail(err, FP4_ERR_IO, "cannot read back %s", path);
        if (f) fclose(f);
    }
    if (remove(path) != 0 && st == FP4_OK && errno != ENOENT)
        st = fp4_fail(err, FP4_ERR_IO, "cannot remove %s", path);
    if (rmdir(d) != 0 && st == FP4_OK)
        st = fp4_fail(err, FP4_ERR_IO, "cannot remove %s", d);
    return st;
}

/* The longest warm-up asked for: a minute (a run would otherwise wait out any
 * value, --max-time does not bound it). */
#define MAX_WARMUP_MS 60000.0

int cli_measure_option(cli_args *a, fp4_settings *set, int *max_time_given)
{
    const char *v;
    if (cli_value(a, "--seed", &v)) {
        const long long seed = cli_int(a, "--seed", v);
        if (seed < 0) cli_usage_error(a, "--seed must be >= 0");
        set->seed = (uint64_t)seed;
    } else if (cli_value(a, "--max-time", &v)) {
        set->stop.max_time_s = cli_double(a, "--max-time", v);
        if (set->stop.max_time_s <= 0) cli_usage_error(a, "--max-time must be > 0");
        *max_time_given = 1;
    } else if (cli_value(a, "--min-samples", &v)) {
        const long long n = cli_int(a, "--min-samples", v); /* checked before it is narrowed */
        if (n < 1 || n > 100000) cli_usage_error(a, "--min-samples must be in 1..100000");
        set->stop.min_samples = (int)n;
    } else if (cli_value(a, "--noise", &v)) {
        set->stop.noise_target = cli_double(a, "--noise", v);
        if (set->stop.noise_target <= 0) cli_usage_error(a, "--noise must be > 0");
    } else if (cli_value(a, "--warmup-ms", &v)) {
        set->warmup_ms = cli_double(a, "--warmup-ms", v);
        if (!(set->warmup_ms >= 0 && set->warmup_ms <= MAX_WARMUP_MS))
            cli_usage_error(a, "--warmup-ms must be in 0..%.0f", MAX_WARMUP_MS);
    } else if (cli_value(a, "--min-batch", &v)) {
        const long long n = cli_int(a, "--min-batch", v);
        if (n < 1 || n > 65536) cli_usage_error(a, "--min-batch must be in 1..65536");
        set->min_batch = (int)n;
    } else if (cli_value(a, "--baseline-tuning", &v)) {
        if (strcmp(v, "on") == 0) set->baseline_tuning = 1;
        else if (strcmp(v, "off") == 0) set->baseline_tuning = 0;
        else cli_usage_error(a, "--baseline-tuning: 'on' or 'off', not '%s'", v);
    } else if (cli_flag(a, "--hot")) {
        set->hot = 1;
    } else if (cli_flag(a, "--no-graphs")) {
        set->use_graphs = 0;
    } else if (cli_flag(a, "--time-reference")) {
        set->time_reference = 1;
    } else if (cli_flag(a, "--verify-only")) {
        set->verify_only = 1;
    } else if (cli_flag(a, "--samples")) {
        set->keep_samples = 1;
    } else {
        return 0;
    }
    return 1;
}

void cli_row_files_write(cli_row_files *f, const fp4_report *report, const fp4_row *row)
{
    fp4_err err;
    if (f->json_path && !f->write_failed && fp4_report_write_json(f->json_path, report, &err) != FP4_OK) {
        fprintf(stderr, "fp4bench: warning: %s\n", fp4_err_text(&err));
        f->write_failed = 1;
    }
    if (f->csv && (report->ngpus > 0 ? fp4_csv_write_row_gpus(f->csv, row, &err)
                                     : fp4_csv_write_row(f->csv, row, &err)) != FP4_OK) {
        fprintf(stderr, "fp4bench: warning: %s\n", fp4_err_text(&err));
        f->write_failed = 1;
    }
}
