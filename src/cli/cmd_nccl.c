/* fp4bench nccl: NCCL collectives across the GPUs, verified then timed
 * (fp4/multigpu.h, docs/PARALLEL.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/mg_args.h"
#include "fp4/multigpu.h"

#define NCCL_MAX_SIZES 64

static const char nccl_usage[] =
    "usage: fp4bench nccl [OPTIONS]\n"
    "\n"
    "NCCL collectives across the GPUs, one rank per GPU. Each op at each size is first\n"
    "verified element by element on every rank, then timed: captured in a CUDA graph per\n"
    "rank, replayed between events, each rank's median over the replays; the slowest\n"
    "rank's median is the time. algbw = bytes per rank / time; busbw by the nccl-tests\n"
    "formulas: all_reduce algbw * 2(n-1)/n, all_to_all algbw * (n-1)/n, so 0 on one GPU\n"
    "(all_reduce is then a copy). NVLink multicast (NVLS) is always off.\n"
    "\n"
    "  --gpus all|0,1,...      the GPUs, one rank each, in this order (default all)\n"
    "  --op LIST               all_reduce,all_to_all (default both): all_reduce is a bf16\n"
    "                          sum, all_to_all equal chunks of grouped ncclSend/ncclRecv\n"
    "  --sizes LIST            bytes per rank, K/M/G = KiB/MiB/GiB, at most 64G (default\n"
    "                          1M,4M,16M,64M,256M,1G); rounded down to whole elements\n"
    "                          (all_to_all: to n equal chunks of 4-byte words)\n"
    "  --iters N               collective calls per graph replay (default 20)\n"
    "  --reps N                timed replays, their median is taken (default 10, <= 1000)\n"
    "  --warmup N              untimed replays first (default 3)\n"
    "  --launcher threads|mpi  threads (default): this process, a thread per GPU;\n"
    "                          mpi: one process per GPU under mpirun -np N, each on its\n"
    "                          node-local rank's GPU; rank 0 prints and writes\n"
    "  --json FILE             the results as JSON (docs/PARALLEL.md), rewritten after\n"
    "                          each row; '-': to stdout at the end (the table on stderr)\n"
    "  --csv FILE              one line per row, rewritten after each row; '-': to stdout\n"
    "                          at the end (at most one of --json, --csv may be '-')\n"
    "\n"
    "exit status: 0 every row verified, 1 a row FAILED its check, 2 usage error,\n"
    "             3 unsupported here (one line 'unsupported (why)': built without NCCL\n"
    "             or MPI, no GPU, a GPU that is not there; the --json file says why\n"
    "             too) or a runtime error (a CUDA or NCCL failure, a file)\n";

typedef struct nccl_args {
    fp4_nccl_config cfg;
    fp4_coll_settings set;
    fp4_coll_op ops[FP4_COLL_OP_COUNT];
    int nops;
    size_t sizes[NCCL_MAX_SIZES];
    int nsizes;
    const char *json, *csv;
} nccl_args;

/* --gpus: "all" or distinct device numbers. */
static void parse_gpus(const cli_args *a, const char *v, fp4_nccl_config *cfg)
{
    char buf[1024];
    cfg->ndevices = 0;
    if (strcmp(v, "all") == 0) return;
    if (snprintf(buf, sizeof buf, "%s", v) >= (int)sizeof buf) cli_usage_error(a, "--gpus: too long");
    if (!buf[0] || buf[strlen(buf) - 1] == ',' || buf[0] == ',' || strstr(buf, ",,"))
        cli_usage_error(a, "--gpus: '%s': want 'all' or GPU numbers, e.g. 0,1,2,3", v);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        long d;
        if (t[0] < '0' || t[0] > '9') cli_usage_error(a, "--gpus: '%s' is not a GPU number", t);
        d = strtol(t, &end, 10);
        if (*end || d >= 4096) cli_usage_error(a, "--gpus: '%s' is not a GPU number", t);
        for (int i = 0; i < cfg->ndevices; i++)
            if (cfg->devices[i] == (int)d) cli_usage_error(a, "--gpus: GPU %ld listed twice", d);
        if (cfg->ndevices == FP4_NCCL_MAX_RANKS) cli_usage_error(a, "--gpus: at most %d GPUs", FP4_NCCL_MAX_RANKS);
        cfg->devices[cfg->ndevices++] = (int)d;
    }
}

static void parse_ops(const cli_args *a, const char *v, nccl_args *n)
{
    char buf[256], *field[8];
    const int nf = cli_split_list(a, "--op", v, buf, sizeof buf, field, 8);
    n->nops = 0;
    for (int f = 0; f < nf; f++) {
        const char *t = field[f];
        fp4_coll_op op;
        if (fp4_coll_op_parse(t, &op) != 0)
            cli_usage_error(a, "--op: unknown op '%s' (all_reduce, all_to_all)", t);
        for (int i = 0; i < n->nops; i++)
            if (n->ops[i] == op) cli_usage_error(a, "--op: '%s' listed twice", t);
        n->ops[n->nops++] = op;
    }
}

static void parse_sizes(const cli_args *a, const char *v, nccl_args *n)
{
    char buf[1024], *field[NCCL_MAX_SIZES];
    const int nf = cli_split_list(a, "--sizes", v, buf, sizeof buf, field, NCCL_MAX_SIZES);
    n->nsizes = 0;
    for (int f = 0; f < nf; f++) {
        const char *t = field[f];
        if (fp4_coll_parse_size(t, &n->sizes[n->nsizes]) != 0)
            cli_usage_error(a, "--sizes: '%s' is not a size (bytes, or with K/M/G: 1M, 256M, 1G; 1 byte to 64G)", t);
        n->nsizes++;
    }
}

static void parse(int argc, char **argv, cli_args *a, nccl_args *n)
{
    const char *v, *launcher = NULL, *gpus = NULL;
    static const size_t default_sizes[] = {(size_t)1 << 20, (size_t)4 << 20, (size_t)16 << 20,
                                           (size_t)64 << 20, (size_t)256 << 20, (size_t)1 << 30};
    memset(n, 0, sizeof *n);
    fp4_coll_settings_default(&n->set);
    n->cfg.launcher = FP4_NCCL_THREADS;
    while (a->i < argc) {
        if (cli_flag(a, "--help") || cli_flag(a, "-h")) {
            fputs(nccl_usage, stdout);
            exit(0);
        } else if (cli_value(a, "--gpus", &v)) {
            gpus = v;
            parse_gpus(a, v, &n->cfg);
        } else if (cli_value(a, "--op", &v)) {
            parse_ops(a, v, n);
        } else if (cli_value(a, "--sizes", &v)) {
            parse_sizes(a, v, n);
        } else if (mg_timing_flag(a, &n->set.iters, &n->set.reps, &n->set.warmup)) {
            continue;
        } else if (cli_value(a, "--launcher", &v)) {
            launcher = v;
            if (strcmp(v, "threads") == 0) n->cfg.launcher = FP4_NCCL_THREADS;
            else if (strcmp(v, "mpi") == 0) n->cfg.launcher = FP4_NCCL_MPI;
            else cli_usage_error(a, "--launcher: 'threads' or 'mpi', not '%s'", v);
        } else if (cli_value(a, "--json", &v)) {
            n->json = v;
        } else if (cli_value(a, "--csv", &v)) {
            n->csv = v;
        } else {
            cli_usage_error(a, "unknown option '%s'", argv[a->i]);
        }
    }
    if (launcher && n->cfg.launcher == FP4_NCCL_MPI && gpus && strcmp(gpus, "all") != 0)
        cli_usage_error(a, "--gpus goes with --launcher threads: under mpi each process takes its "
                           "node-local rank's GPU");
    if (n->json && n->csv && strcmp(n->json, "-") == 0 && strcmp(n->csv, "-") == 0)
        cli_usage_error(a, "--json - and --csv - would both write to stdout; pick one");
    cli_distinct_files(a, "--csv", n->csv, "--json", n->json);
    if (n->nops == 0) {
        n->ops[n->nops++] = FP4_COLL_ALL_REDUCE;
        n->ops[n->nops++] = FP4_COLL_ALL_TO_ALL;
    }
    if (n->nsizes == 0) {
        n->nsizes = (int)(sizeof default_sizes / sizeof default_sizes[0]);
        memcpy(n->sizes, default_sizes, sizeof default_sizes);
    }
}

/* The --json and --csv files, and with to_stdout also a '-' of them (only
 * at the end: stdout then holds one whole document). Failures are warnings
 * here, counted in *write_failed. */
static void write_outputs(const char *cmd, const nccl_args *n, const fp4_coll_report *r, int to_stdout,
                          int *write_failed)
{
    const char *paths[2] = {n->json, n->csv};
    for (int i = 0; i < 2; i++) {
        fp4_err err;
        fp4_status st;
        if (!paths[i] || (!to_stdout && strcmp(paths[i], "-") == 0)) continue;
        st = i == 0 ? fp4_coll_write_json(paths[i], r, &err) : fp4_coll_write_csv(paths[i], r, &err);
        if (st != FP4_OK) {
            fprintf(stderr, "%s: warning: %s\n", cmd, fp4_err_text(&err));
            (*write_failed)++;
        }
    }
}

/* Nothing can run here: say why in one line, and in the --json file. */
static int unsupported(const cli_args *a, const nccl_args *n, fp4_coll_report *r, const fp4_err *why)
{
    fp4_err err;
    snprintf(r->unsupported, sizeof r->unsupported, "%s", fp4_err_text(why));
    if (n->json && fp4_coll_write_json(n->json, r, &err) != FP4_OK)
        fprintf(stderr, "%s: warning: %s\n", a->cmd, fp4_err_text(&err));
    fprintf(stderr, "%s: unsupported (%s)\n", a->cmd, fp4_err_text(why));
    return EXIT_RUNTIME;
}

/* The machine, once, before the table. */
static void print_header(FILE *out, const fp4_nccl_info *in)
{
    fprintf(out, "NCCL %d.%d.%d, %d rank%s (%s), NVLS off, CUDA driver %d.%d, runtime %d.%d\n",
            in->nccl_version / 10000, in->nccl_version / 100 % 100, in->nccl_version % 100, in->nranks,
            in->nranks == 1 ? "" : "s", fp4_nccl_launcher_name(in->launcher), in->driver_version / 1000,
            in->driver_version % 1000 / 10, in->runtime_version / 1000, in->runtime_version % 1000 / 10);
    for (int k = 0; k < in->nranks; k++)
        fprintf(out, "  rank %d: %s GPU %d, %s (sm_%d%d, %s)\n", k, in->gpus[k].host, in->gpus[k].device,
                in->gpus[k].name, in->gpus[k].cc_major, in->gpus[k].cc_minor, in->gpus[k].pci_bus_id);
    if (in->nranks == 1)
        fprintf(out, "one rank: all_reduce is a copy and all_to_all a send to itself; nothing crosses a link, so\n"
                     "busbw is 0 by the nccl-tests formulas (algbw * 2(n-1)/n, algbw * (n-1)/n)\n");
    fputc('\n', out);
}

int cmd_nccl(int argc, char **argv)
{
    cli_args a = {.argc = argc, .argv = argv, .i = 1, .cmd = "fp4bench nccl"};
    nccl_args n;
    fp4_coll_report report;
    fp4_nccl_comms *comms = NULL;
    fp4_err err;
    FILE *out = stdout;
    int rc = 0, root, write_failed = 0;

    parse(argc, argv, &a, &n);
    memset(&report, 0, sizeof report);
    report.settings = n.set;
    if (MG_STAMP(&report, a.cmd, argc, argv, &err) != FP4_OK) cli_die(a.cmd, &err);
    if ((n.json && strcmp(n.json, "-") == 0) || (n.csv && strcmp(n.csv, "-") == 0)) out = stderr;

    if (fp4_nccl_probe(&n.cfg, &err) != FP4_OK) {
        if (err.status == FP4_ERR_UNSUPPORTED) return unsupported(&a, &n, &report, &err);
        cli_die(a.cmd, &err);
    }
    if (fp4_nccl_comms_create(&n.cfg, &comms, &err) != FP4_OK) {
        if (err.status == FP4_ERR_UNSUPPORTED) return unsupported(&a, &n, &report, &err);
        cli_die(a.cmd, &err);
    }
    root = fp4_nccl_comms_is_root(comms);
    report.info = *fp4_nccl_comms_info(comms);
    report.have_info = 1;
    if (root) {
        print_header(out, &report.info);
        fp4_coll_print_header(out);
        fflush(out);
    }
    for (int o = 0; o < n.nops && rc != EXIT_RUNTIME; o++) {
        for (int s = 0; s < n.nsizes; s++) {
            fp4_coll_row row;
            if (fp4_coll_run(comms, n.ops[o], n.sizes[s], &n.set, &row, &err) != FP4_OK) {
                fprintf(stderr, "%s: error: %s %zu bytes: %s\n", a.cmd, fp4_coll_op_name(n.ops[o]), n.sizes[s],
                        fp4_err_text(&err));
                rc = EXIT_RUNTIME;
                break;
            }
            if (!row.verified && rc == 0) rc = EXIT_CHECK;
            if (fp4_coll_report_add(&report, &row, &err) != FP4_OK) cli_die(a.cmd, &err);
            if (root) {
                fp4_coll_print_row(out, &row);
                fflush(out);
                write_outputs(a.cmd, &n, &report, 0, &write_failed);
            }
        }
    }
    if (root) write_outputs(a.cmd, &n, &report, 1, &write_failed);
    if (write_failed && rc == 0) rc = EXIT_RUNTIME;
    fp4_warnings warn;
    fp4_warnings_clear(&warn);
    fp4_nccl_comms_destroy(comms, &warn);
    cli_print_warnings(&warn);
    fp4_coll_report_free(&report);
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "%s: error: cannot write to stdout\n", a.cmd);
        rc = EXIT_RUNTIME;
    }
    return rc;
}
