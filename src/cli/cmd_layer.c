/* fp4bench layer: an MoE layer tensor or expert parallel, or the attention
 * projections tensor parallel, over several GPUs; NCCL inside each rank's
 * CUDA graph; verified against the exact sharded references, then timed
 * (multigpu/layer.h, docs/PARALLEL.md "fp4bench layer"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/mg_args.h"
#include "multigpu/layer.h"

#define LAYER_MAX_LIST 32

static const char layer_usage[] =
    "usage: fp4bench layer (--model NAME | --dims H,I,E,K[,ACT]) (--tp LIST | --ep LIST) [OPTIONS]\n"
    "       fp4bench layer --attention --tp LIST [OPTIONS]\n"
    "\n"
    "One layer split over several GPUs (one rank each, a thread per GPU), the whole per-rank\n"
    "pipeline and its NCCL collectives captured in each rank's CUDA graph. Every configuration\n"
    "is first verified against the exact sharded reference (poisoned outputs, random data),\n"
    "then timed: all ranks start each replay together, the slowest rank's median per call.\n"
    "  --tp: every rank holds every expert's I/N slice (gate_up column-parallel, down\n"
    "        row-parallel), runs the grouped NVFP4 kernel on it, then a bf16 all-reduce;\n"
    "        times: total, compute (no all-reduce), all-reduce alone.\n"
    "  --ep: experts and tokens split over the ranks; dispatch and combine are grouped\n"
    "        ncclSend/ncclRecv by the plan's counts; times: total, dispatch, compute,\n"
    "        combine; bus bandwidth by the nccl-tests all-to-all formula.\n"
    "  --attention: per rank the QKV and O projections (fp4-sm90 dense GEMMs), then the\n"
    "        bf16 all-reduce; one row per TP degree and token count.\n"
    "NVLink multicast (NVLS) is always off.\n"
    "\n"
    "  --model NAME            an MoE preset (glm5, deepseek-v3, qwen3-30b, ...: fp4bench list)\n"
    "  --dims H,I,E,K[,ACT]    custom MoE: hidden, whole expert intermediate, experts, top-k\n"
    "  --attention             the attention projections instead of an MoE layer\n"
    "  --attn-dims H,QH,KVH,D  hidden, query heads, kv heads, head dim (default 6144,48,8,128:\n"
    "                          at TP8 the (T, 768, 6144) query block of GLM-5)\n"
    "  --tp LIST, --ep LIST    degrees, e.g. 8,4 or 1 (exactly one of them; attention: --tp)\n"
    "  --tokens LIST           tokens per layer call (default 16,64,256)\n"
    "  --mode w4a4|w4a16       MoE activations NVFP4 or bf16 (default w4a4)\n"
    "  --routing MODE          balanced, random or skewed (default random)\n"
    "  --seed N                weights, activations, routing (default 1)\n"
    "  --gpus all|0,1,...      the GPUs; degree N uses the first N (default all)\n"
    "  --iters N               layer calls per graph replay (default 10)\n"
    "  --reps N                timed replays, median taken (default 10, <= 1000)\n"
    "  --warmup N              untimed replays first (default 3)\n"
    "  --json FILE             results as JSON (schema fp4bench-layer/1), rewritten after each\n"
    "                          row; '-': to stdout at the end (the table on stderr)\n"
    "\n"
    "A degree larger than the GPUs present gives 'unsupported (needs N GPUs, found M)' rows.\n"
    "exit status: 0 every row that ran verified, 1 a row FAILED its check, 2 usage error,\n"
    "             3 nothing could run here (every row unsupported: built without NCCL, no\n"
    "             GPU, too few GPUs, not Hopper; one line 'unsupported (why)') or a CUDA or\n"
    "             NCCL failure (its row FAILED with the error; the other rows still run)\n";

typedef struct layer_args {
    fp4_layer_spec spec;
    fp4_layer_settings set;
    fp4_nccl_config cfg;
    int degrees[LAYER_MAX_LIST], ndegrees;
    int64_t tokens[LAYER_MAX_LIST];
    int ntokens;
    const char *json;
} layer_args;

/* A comma list of integers in lo..hi. */
static int parse_list(const cli_args *a, const char *flag, const char *v, long long lo, long long hi, long long *out)
{
    char buf[512], *field[LAYER_MAX_LIST];
    const int nf = cli_split_list(a, flag, v, buf, sizeof buf, field, LAYER_MAX_LIST);
    int n = 0;
    for (int f = 0; f < nf; f++) {
        long long x = cli_int(a, flag, field[f]);
        if (x < lo || x > hi) cli_usage_error(a, "%s: %lld is not in %lld..%lld", flag, x, lo, hi);
        for (int i = 0; i < n; i++)
            if (out[i] == x) cli_usage_error(a, "%s: %lld listed twice", flag, x);
        out[n++] = x;
    }
    return n;
}

static void parse_gpus(const cli_args *a, const char *v, fp4_nccl_config *cfg)
{
    long long ids[LAYER_MAX_LIST];
    cfg->ndevices = 0;
    if (strcmp(v, "all") == 0) return;
    cfg->ndevices = parse_list(a, "--gpus", v, 0, 4095, ids);
    for (int i = 0; i < cfg->ndevices; i++) cfg->devices[i] = (int)ids[i];
}

/* "H,I,E,K[,ACT]" or "H,QH,KVH,D": up to five comma fields. */
static int split_fields(const cli_args *a, const char *flag, const char *v, char *buf, size_t len, char **part)
{
    return cli_split_list(a, flag, v, buf, len, part, 5);
}

static void parse(int argc, char **argv, cli_args *a, layer_args *l)
{
    const char *v, *model = NULL, *dims = NULL, *attn_dims = NULL, *tp = NULL, *ep = NULL;
    long long list[LAYER_MAX_LIST];
    int attention = 0;
    fp4_err err;
    memset(l, 0, sizeof *l);
    fp4_layer_settings_default(&l->set);
    l->cfg.launcher = FP4_NCCL_THREADS;
    l->spec.mode = FP4_MOE_W4A4;
    l->spec.route.mode = FP4_MOE_ROUTE_RANDOM;
    l->spec.route.zipf_s = FP4_MOE_DEFAULT_ZIPF_S;
    while (a->i < argc) {
        if (cli_flag(a, "--help") || cli_flag(a, "-h")) {
            fputs(layer_usage, stdout);
            exit(0);
        } else if (cli_value(a, "--model", &v)) {
            model = v;
        } else if (cli_value(a, "--dims", &v)) {
            dims = v;
        } else if (cli_flag(a, "--attention")) {
            attention = 1;
        } else if (cli_value(a, "--attn-dims", &v)) {
            attn_dims = v;
        } else if (cli_value(a, "--tp", &v)) {
            tp = v;
        } else if (cli_value(a, "--ep", &v)) {
            ep = v;
        } else if (cli_value(a, "--tokens", &v)) {
            l->ntokens = parse_list(a, "--tokens", v, 1, 1 << 24, list);
            for (int i = 0; i < l->ntokens; i++) l->tokens[i] = list[i];
        } else if (cli_value(a, "--mode", &v)) {
            if (strcmp(v, "w4a4") == 0) l->spec.mode = FP4_MOE_W4A4;
            else if (strcmp(v, "w4a16") == 0) l->spec.mode = FP4_MOE_W4A16;
            else cli_usage_error(a, "--mode: 'w4a4' or 'w4a16', not '%s'", v);
        } else if (cli_value(a, "--routing", &v)) {
            if (fp4_moe_route_mode_parse(v, &l->spec.route.mode, &err) != FP4_OK ||
                l->spec.route.mode == FP4_MOE_ROUTE_TRACE)
                cli_usage_error(a, "--routing: 'balanced', 'random' or 'skewed', not '%s'", v);
        } else if (cli_value(a, "--seed", &v)) {
            long long s = cli_int(a, "--seed", v);
            if (s < 0) cli_usage_error(a, "--seed must be >= 0");
            l->set.seed = (uint64_t)s;
        } else if (cli_value(a, "--gpus", &v)) {
            parse_gpus(a, v, &l->cfg);
        } else if (mg_timing_flag(a, &l->set.iters, &l->set.reps, &l->set.warmup)) {
            continue;
        } else if (cli_value(a, "--json", &v)) {
            l->json = v;
        } else {
            cli_usage_error(a, "unknown option '%s'", argv[a->i]);
        }
    }
    l->spec.route.seed = l->set.seed;
    if (attention) {
        char buf[256], *part[5];
        if (model || dims) cli_usage_error(a, "--attention takes --attn-dims, not --model or --dims");
        if (ep) cli_usage_error(a, "--attention is tensor parallel: give --tp, not --ep");
        if (!tp) cli_usage_error(a, "--attention needs --tp LIST (e.g. --tp 8,4)");
        l->spec.kind = FP4_LAYER_ATTN;
        snprintf(l->spec.model, sizeof l->spec.model, "%s", attn_dims ? "custom" : "glm5");
        l->spec.attn.hidden = 6144;
        l->spec.attn.q_heads = 48;
        l->spec.attn.kv_heads = 8;
        l->spec.attn.head_dim = 128;
        if (attn_dims) {
            if (split_fields(a, "--attn-dims", attn_dims, buf, sizeof buf, part) != 4)
                cli_usage_error(a, "--attn-dims: want H,QH,KVH,D (e.g. 6144,48,8,128), got '%s'", attn_dims);
            l->spec.attn.hidden = cli_int(a, "--attn-dims", part[0]);
            l->spec.attn.q_heads = mg_int_in(a, "--attn-dims", part[1], 1, 1 << 16);
            l->spec.attn.kv_heads = mg_int_in(a, "--attn-dims", part[2], 1, 1 << 16);
            l->spec.attn.head_dim = cli_int(a, "--attn-dims", part[3]);
            if (l->spec.attn.hidden < 16 || l->spec.attn.hidden > (1 << 20) || l->spec.attn.head_dim < 1 ||
                l->spec.attn.head_dim > 4096)
                cli_usage_error(a, "--attn-dims: H in 16..2^20, D in 1..4096");
            /* what no tp degree can fix; a degree that does not split the heads is its row's */
            if (l->spec.attn.hidden % 16 != 0)
                cli_usage_error(a, "--attn-dims: H = %lld is not a multiple of 16 (NVFP4's block)",
                                (long long)l->spec.attn.hidden);
            if (l->spec.attn.q_heads % l->spec.attn.kv_heads != 0)
                cli_usage_error(a, "--attn-dims: %d query heads do not group evenly over %d kv heads",
                                l->spec.attn.q_heads, l->spec.attn.kv_heads);
        }
    } else {
        if (attn_dims) cli_usage_error(a, "--attn-dims goes with --attention");
        if ((model != NULL) == (dims != NULL))
            cli_usage_error(a, "give the layer: --model NAME or --dims H,I,E,K (or --attention)");
        if ((tp != NULL) == (ep != NULL)) cli_usage_error(a, "give exactly one of --tp LIST and --ep LIST");
        l->spec.kind = tp ? FP4_LAYER_TP : FP4_LAYER_EP;
        if (model) {
            const fp4_moe_preset *p;
            if (fp4_moe_preset_lookup(model, &p, &err) != FP4_OK) cli_usage_error(a, "--model: %s", fp4_err_text(&err));
            if (fp4_moe_preset_dims(p, 1, &l->spec.dims, &err) != FP4_OK)
                cli_usage_error(a, "--model: %s", fp4_err_text(&err));
            snprintf(l->spec.model, sizeof l->spec.model, "%s", p->name);
        } else {
            char buf[256], *part[5];
            const int n = split_fields(a, "--dims", dims, buf, sizeof buf, part);
            if (n < 4) cli_usage_error(a, "--dims: want H,I,E,K[,ACT] (e.g. 2048,768,128,8), got '%s'", dims);
            l->spec.dims.hidden = cli_int(a, "--dims", part[0]);
            l->spec.dims.inter = cli_int(a, "--dims", part[1]);
            l->spec.dims.experts = mg_int_in(a, "--dims", part[2], 1, FP4_MOE_MAX_EXPERTS);
            l->spec.dims.top_k = mg_int_in(a, "--dims", part[3], 1, FP4_MOE_MAX_EXPERTS);
            if (n == 5 && fp4_moe_act_parse(part[4], &l->spec.dims.act, &err) != FP4_OK)
                cli_usage_error(a, "--dims: %s", fp4_err_text(&err));
            if (fp4_moe_dims_check(&l->spec.dims, &err) != FP4_OK) cli_usage_error(a, "--dims: %s", fp4_err_text(&err));
            snprintf(l->spec.model, sizeof l->spec.model, "custom");
        }
    }
    l->ndegrees = parse_list(a, tp ? "--tp" : "--ep", tp ? tp : ep, 1, FP4_NCCL_MAX_RANKS, list);
    for (int i = 0; i < l->ndegrees; i++) l->degrees[i] = (int)list[i];
    if (l->ntokens == 0) {
        l->tokens[0] = 16;
        l->tokens[1] = 64;
        l->tokens[2] = 256;
        l->ntokens = 3;
    }
}

/* Keep the row, print it, rewrite the --json file (not '-': that comes at the end). */
static void emit(const cli_args *a, const layer_args *l, fp4_layer_report *r, const fp4_layer_row *row, FILE *out,
                 int *write_failed)
{
    fp4_err err;
    if (fp4_layer_report_add(r, row, &err) != FP4_OK) cli_die(a->cmd, &err);
    fp4_layer_print_row(out, row);
    fflush(out);
    if (l->json && strcmp(l->json, "-") != 0 && fp4_layer_write_json(l->json, r, &err) != FP4_OK) {
        fprintf(stderr, "%s: warning: %s\n", a->cmd, fp4_err_text(&err));
        (*write_failed)++;
    }
}

/* Rows of one degree that cannot run: one per token count, all with why. */
static void unsupported_rows(const cli_args *a, const layer_args *l, fp4_layer_report *r, int degree, const char *why,
                             FILE *out, int *write_failed)
{
    for (int t = 0; t < l->ntokens; t++) {
        fp4_layer_row row;
        fp4_layer_row_init(&row, &l->spec, degree, l->tokens[t]);
        row.state = FP4_LAYER_ROW_UNSUPPORTED;
        snprintf(row.why, sizeof row.why, "%s", why);
        emit(a, l, r, &row, out, write_failed);
    }
}

int cmd_layer(int argc, char **argv)
{
    cli_args a = {.argc = argc, .argv = argv, .i = 1, .cmd = "fp4bench layer"};
    layer_args l;
    fp4_layer_report report;
    fp4_layer_inputs *inputs = NULL;
    fp4_warnings warn;
    fp4_err err;
    FILE *out = stdout;
    int rc = 0, ran = 0, runtime_failed = 0, write_failed = 0;
    char first_why[FP4_ERR_MSG_LEN] = "";

    parse(argc, argv, &a, &l);
    memset(&report, 0, sizeof report);
    report.spec = l.spec;
    report.settings = l.set;
    (void)MG_STAMP(&report, a.cmd, argc, argv, &err); /* without memory for it, the stamp stays empty */
    fp4_warnings_clear(&warn);
    if (l.json && strcmp(l.json, "-") == 0) out = stderr;
    fp4_layer_print_header(out, l.spec.kind);

    for (int g = 0; g < l.ndegrees; g++) {
        const int n = l.degrees[g];
        fp4_nccl_config sub;
        fp4_nccl_comms *comms = NULL;
        /* the sharding rules first (no GPU needed): a degree that fits no
         * token count gets its rows with that reason, not the probe's */
        int fits = 0;
        for (int t = 0; t < l.ntokens && !fits; t++) fits = fp4_layer_check(&l.spec, n, l.tokens[t], &err) == FP4_OK;
        memset(&sub, 0, sizeof sub);
        if (fits && fp4_layer_probe(&l.cfg, n, &sub, &err) != FP4_OK) {
            if (!first_why[0]) snprintf(first_why, sizeof first_why, "%s", fp4_err_text(&err));
            unsupported_rows(&a, &l, &report, n, fp4_err_text(&err), out, &write_failed);
            continue;
        }
        for (int t = 0; t < l.ntokens; t++) {
            fp4_layer_row row;
            fp4_layer_row_init(&row, &l.spec, n, l.tokens[t]);
            if (fp4_layer_check(&l.spec, n, l.tokens[t], &err) != FP4_OK) { /* the plans' rules: no GPU needed */
                row.state = FP4_LAYER_ROW_UNSUPPORTED;
                snprintf(row.why, sizeof row.why, "%s", fp4_err_text(&err));
                if (!first_why[0]) snprintf(first_why, sizeof first_why, "%s", row.why);
                emit(&a, &l, &report, &row, out, &write_failed);
                continue;
            }
            if (!inputs && fp4_layer_inputs_make(&l.spec, l.set.seed, &inputs, &err) != FP4_OK) cli_die(a.cmd, &err);
            if (!comms) {
                if (fp4_nccl_comms_create(&sub, &comms, &err) != FP4_OK) {
                    row.state = err.status == FP4_ERR_UNSUPPORTED ? FP4_LAYER_ROW_UNSUPPORTED : FP4_LAYER_ROW_FAILED;
                    snprintf(row.why, sizeof row.why, "%s", fp4_err_text(&err));
                    if (row.state == FP4_LAYER_ROW_FAILED) runtime_failed = 1;
                    else if (!first_why[0]) snprintf(first_why, sizeof first_why, "%s", row.why);
                    emit(&a, &l, &report, &row, out, &write_failed);
                    continue;
                }
                if (!report.have_info || fp4_nccl_comms_info(comms)->nranks > report.info.nranks) {
                    report.info = *fp4_nccl_comms_info(comms);
                    report.have_info = 1;
                }
            }
            if (fp4_layer_run(comms, inputs, l.tokens[t], &l.set, &row, &err) != FP4_OK) {
                /* a CUDA or NCCL failure: this row FAILED; a fresh set for the next one */
                row.state = FP4_LAYER_ROW_FAILED;
                snprintf(row.why, sizeof row.why, "error: %s", fp4_err_text(&err));
                runtime_failed = 1;
                fp4_nccl_comms_destroy(comms, &warn);
                comms = NULL;
            } else if (row.state == FP4_LAYER_ROW_FAILED) { /* the check failed */
                rc = EXIT_CHECK;
                ran = 1;
            } else if (row.state == FP4_LAYER_ROW_OK) {
                ran = 1;
            } else if (!first_why[0]) {
                snprintf(first_why, sizeof first_why, "%s", row.why);
            }
            emit(&a, &l, &report, &row, out, &write_failed);
        }
        fp4_nccl_comms_destroy(comms, &warn);
    }
    if (!ran && !runtime_failed) {
        snprintf(report.unsupported, sizeof report.unsupported, "%s", first_why);
        fprintf(stderr, "%s: unsupported (%s)\n", a.cmd, first_why);
        rc = EXIT_RUNTIME;
    }
    if (runtime_failed) rc = EXIT_RUNTIME;
    if (l.json && fp4_layer_write_json(l.json, &report, &err) != FP4_OK) {
        fprintf(stderr, "%s: warning: %s\n", a.cmd, fp4_err_text(&err));
        write_failed++;
    }
    if (write_failed && rc == 0) rc = EXIT_RUNTIME;
    cli_print_warnings(&warn);
    fp4_layer_inputs_free(inputs);
    fp4_layer_report_free(&report);
    if (fflush(stdout) != 0 && rc == 0) rc = EXIT_RUNTIME;
    return rc;
}
