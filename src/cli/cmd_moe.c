/* fp4bench moe: routed MoE expert layers (gate_up, down, the whole layer) on
 * the MoE backends, measured by the engine's rules (docs/MOE.md). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "fp4/device.h"
#include "fp4/engine.h"
#include "fp4/io.h"
#include "fp4/moe.h"
#include "fp4/moe_backend.h"
#include "fp4/moe_engine.h"
#include "fp4/report.h"

#define MAX_BACKENDS 16
#define MAX_PLUGINS 8
#define MAX_TOKENS 64          /* T values in one run */
#define MOE_MAX_T (1 << 24)     /* tokens of a case (the layer command's limit too) */
#define SWEEP_MAX_TOKENS 8192  /* --sweep: 1, 2, 4, ..., 8192 */
#define REASON_CELL 70         /* characters of a reason in the table (--verbose: all) */

static const char moe_usage[] =
    "usage: fp4bench moe (--model NAME | --dims H,I,E,K[,ACT]) [OPTIONS]\n"
    "\n"
    "Measure routed mixture-of-experts layers: T tokens, each routed to k of E experts,\n"
    "through one step of the layer on MoE backends. Every backend is verified against the\n"
    "exact reference (per expert, src/moe) on poisoned output before it is timed; verified\n"
    "backends are timed interleaved in shuffled rounds, cold L2, in CUDA graphs.\n"
    "\n"
    "layer:\n"
    "  --model NAME          a preset: glm5, deepseek-v3, kimi-k2, qwen3-235b, qwen3-30b,\n"
    "                        mixtral, llama4-maverick, gpt-oss-120b (docs/MOE.md)\n"
    "  --dims H,I,E,K[,ACT]  custom: hidden H, expert intermediate I (multiples of 16),\n"
    "                        E experts, top-K, activation silu (default) or swiglu-oai\n"
    "  --tp N                tensor parallelism: one rank's I = I / N (default 1)\n"
    "workload:\n"
    "  --tokens T[,T...]     tokens per call, at most 2^24 (default 1,16,512; with --trace: the trace's)\n"
    "  --sweep               T = 1, 2, 4, ..., 8192 (with --trace: up to the trace's T)\n"
    "  --routing MODE        balanced, random (default: gaussian router logits, top-k),\n"
    "                        skewed (Zipf popularity), trace (needs --trace)\n"
    "  --zipf S              skewed routing's exponent (default 1)\n"
    "  --trace FILE.npy      expert ids [T, k] (int32 or int64 .npy): routing trace\n"
    "  --shared N            N shared experts beside the E routed ones: every token takes\n"
    "                        them with weight 1 (E and top-k each grow by N; the presets'\n"
    "                        counts: docs/MOE.md; default 0)\n"
    "  --seed N              weights, activations and routing seed (default 1)\n"
    "  --step S[,S...]       gate_up, down, layer (repeatable; default gate_up,down)\n"
    "  --mode M[,M...]       w4a4 (NVFP4 activations, default) or w4a16 (bf16 activations;\n"
    "                        repeatable)\n"
    "  --data KIND           weight data: gaussian (default) or codes (random codes and\n"
    "                        scales: faster to make for the largest models)\n"
    "backends:\n"
    "  --backend a,b,...     MoE backends (below), a --plugin's, or 'all' (default: every GPU\n"
    "                        backend when a GPU is present, else moe-cpu-ref); a --plugin's\n"
    "                        backend runs in any case\n"
    "  --plugin FILE.so      load an external MoE backend (repeatable; docs/PLUGINS.md)\n"
    "  --baseline NAME       the ratio column is baseline time / backend time\n"
    "                        (default moe-cublas-bf16 when measured)\n"
    "measurement (as fp4bench run):\n"
    "  --max-time S          time limit per case in seconds (default 10; 3 without GPU)\n"
    "  --min-samples N, --noise F, --warmup-ms MS, --min-batch N, --hot, --no-graphs,\n"
    "  --no-ceilings, --time-reference, --baseline-tuning on|off\n"
    "  --verify-only         verify every backend, do not time\n"
    "output:\n"
    "  --json FILE           JSON (docs/JSON.md, rows with a \"moe\" object), rewritten after\n"
    "                        every row; '-': to stdout at the end\n"
    "  --csv FILE            CSV, one line per row; '-': to stdout\n"
    "  --samples             keep every sample in the JSON\n"
    "  --verbose             unsupported / FAILED reasons in full in the table\n"
    "  --quiet               no progress line\n"
    "\n"
    "exit status: 0 all rows ok or unsupported, 1 a backend FAILED, 2 usage error,\n"
    "             3 runtime error (a bad trace file, a plugin that cannot load, a CUDA\n"
    "             failure), 130 interrupted\n";

typedef struct moe_ctx {
    cli_row_files files; /* --json FILE, --csv */
    int progress, total, done;
} moe_ctx;

static void on_row(const fp4_report *report, const fp4_row *row, void *user)
{
    moe_ctx *ctx = user;
    ctx->done++;
    cli_row_files_write(&ctx->files, report, row);
    if (ctx->progress) {
        fprintf(stderr, "\r\033[K[%d/%d] %s T=%lld %s: %s", ctx->done, ctx->total, row->label,
                (long long)row->shape.m, row->backend, fp4_row_state_name(row->state));
        fflush(stderr);
    }
}

/* ---- argument parsing ------------------------------------------------------------------ */

/* A comma-separated list of positive integers into out (at most max). */
static int parse_int_list(const cli_args *a, const char *flag, const char *s, int64_t *out, int max)
{
    char buf[1024], *field[MAX_TOKENS];
    const int n = cli_split_list(a, flag, s, buf, sizeof buf, field, max < MAX_TOKENS ? max : MAX_TOKENS);
    for (int i = 0; i < n; i++) {
        const long long v = cli_int(a, flag, field[i]);
        if (v < 1) cli_usage_error(a, "%s: %lld is not a positive number", flag, v);
        out[i] = v;
    }
    return n;
}

/* --dims H,I,E,K[,ACT] */
static void parse_dims(const cli_args *a, const char *s, fp4_moe_dims *d)
{
    char buf[256], *part[5];
    fp4_err err;
    const int n = cli_split_list(a, "--dims", s, buf, sizeof buf, part, 5);
    if (n < 4) cli_usage_error(a, "--dims: want H,I,E,K[,ACT] (e.g. 2048,768,128,8), got '%s'", s);
    memset(d, 0, sizeof *d);
    d->hidden = cli_int(a, "--dims", part[0]);
    d->inter = cli_int(a, "--dims", part[1]);
    const long long e = cli_int(a, "--dims", part[2]), k = cli_int(a, "--dims", part[3]);
    if (e < 1 || e > FP4_MOE_MAX_EXPERTS || k < 1 || k > e)
        cli_usage_error(a, "--dims: E = %lld and K = %lld: want 1 <= K <= E <= %d", e, k,
                        FP4_MOE_MAX_EXPERTS);
    d->experts = (int)e;
    d->top_k = (int)k;
    d->act = FP4_MOE_ACT_SILU;
    if (n == 5 && fp4_moe_act_parse(part[4], &d->act, &err) != FP4_OK)
        cli_usage_error(a, "--dims: %s", fp4_err_text(&err));
    if (fp4_moe_dims_check(d, &err) != FP4_OK) cli_usage_error(a, "--dims: %s", fp4_err_text(&err));
}

/* Add comma-separated steps (or modes) to a bit set. */
static void parse_steps(const cli_args *a, const char *s, unsigned *set)
{
    char buf[256], *field[16];
    fp4_err err;
    const int n = cli_split_list(a, "--step", s, buf, sizeof buf, field, 16);
    for (int i = 0; i < n; i++) {
        fp4_moe_step st;
        if (fp4_moe_step_parse(field[i], &st, &err) != FP4_OK)
            cli_usage_error(a, "--step: %s", fp4_err_text(&err));
        *set |= 1u << st;
    }
}

static void parse_modes(const cli_args *a, const char *s, unsigned *set)
{
    char buf[256], *field[16];
    const int n = cli_split_list(a, "--mode", s, buf, sizeof buf, field, 16);
    for (int i = 0; i < n; i++) {
        if (strcmp(field[i], "w4a4") == 0) *set |= 1u << FP4_MOE_W4A4;
        else if (strcmp(field[i], "w4a16") == 0) *set |= 1u << FP4_MOE_W4A16;
        else cli_usage_error(a, "--mode: unknown mode '%s' (w4a4, w4a16)", field[i]);
    }
}

static void add_unique(const fp4_moe_backend_ops **list, int *n, const fp4_moe_backend_ops *ops)
{
    for (int j = 0; j < *n; j++)
        if (list[j] == ops) return;
    if (*n < MAX_BACKENDS) list[(*n)++] = ops;
}

/* Add the comma-separated backend names to list: compiled-in MoE backends,
 * or those of the loaded plugins. */
static void add_backends(const cli_args *a, const char *names, const fp4_moe_backend_ops *const *plugins,
                         int nplugins, const fp4_moe_backend_ops **list, int *n)
{
    char buf[512], *field[MAX_BACKENDS + 1];
    const int nf = cli_split_list(a, "--backend", names, buf, sizeof buf, field, MAX_BACKENDS + 1);
    const int nbuilt = fp4_moe_backend_count();
    for (int f = 0; f < nf; f++) {
        const char *t = field[f];
        if (strcmp(t, "all") == 0) {
            for (int i = 0; i < nbuilt; i++) add_unique(list, n, fp4_moe_backend_at(i));
            for (int i = 0; i < nplugins; i++) add_unique(list, n, plugins[i]);
            continue;
        }
        const fp4_moe_backend_ops *ops = fp4_moe_backend_find(t);
        for (int i = 0; !ops && i < nplugins; i++)
            if (strcmp(plugins[i]->name, t) == 0) ops = plugins[i];
        if (!ops) {
            char known[512] = "";
            for (int i = 0; i < nbuilt + nplugins; i++) {
                strncat(known, i < nbuilt ? fp4_moe_backend_at(i)->name : plugins[i - nbuilt]->name,
                        sizeof known - strlen(known) - 1);
                strncat(known, i + 1 < nbuilt + nplugins ? ", " : "", sizeof known - strlen(known) - 1);
            }
            cli_usage_error(a, "--backend: unknown MoE backend '%s' (known: %s; a plugin's backend needs "
                            "its --plugin FILE.so)", t, known);
        }
        add_unique(list, n, ops);
    }
}

/* ---- the routing trace ------------------------------------------------------------------ */

/* Expert ids [T, k] from a .npy of int32 or int64 (fp4_npy_read_ids): *ids
 * int32 [T * k] malloc'ed. The ids themselves are checked by the routing
 * (fp4_moe_routing_check), which names the first bad entry. */
static fp4_status read_trace(const char *path, int32_t **ids, int64_t *tokens, int64_t *k,
                             fp4_err *err)
{
    fp4_status st = fp4_npy_read_ids(path, ids, tokens, k, err);
    if (st != FP4_OK) return st;
    if (*k > FP4_MOE_MAX_EXPERTS || *tokens > MOE_MAX_T) {
        free(*ids);
        *ids = NULL;
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: %lld tokens x %lld experts: at most %d tokens and %d experts a token",
                        path, (long long)*tokens, (long long)*k, MOE_MAX_T, FP4_MOE_MAX_EXPERTS);
    }
    return FP4_OK;
}

/* ---- output ------------------------------------------------------------------------------- */

static void fmt_num(char *b, size_t n, double v)
{
    if (!isfinite(v) || v < 0) snprintf(b, n, "-");
    else if (v >= 1e6) snprintf(b, n, "%.3gM", v / 1e6);
    else if (v >= 1e3) snprintf(b, n, "%.3gk", v / 1e3);
    else if (v >= 100) snprintf(b, n, "%.0f", v);
    else if (v >= 10) snprintf(b, n, "%.1f", v);
    else snprintf(b, n, "%.3g", v);
}

/* The MoE table: one line per row, a layer's steps on the line below. */
static void print_table(FILE *f, const fp4_report *r, int verbose)
{
    fprintf(f, "\n%-44s %5s %-17s %10s %9s %7s %5s %5s %13s %18s %s\n", "case", "T", "backend",
            "median us", "tok/s", "GB/s", "%BW", "exp", "tok/exp", "vs baseline", "verified");
    for (int i = 0; i < r->nrows; i++) {
        const fp4_row *w = &r->rows[i];
        const fp4_row_moe *m = &w->moe;
        char med[24], tps[24], gbps[24], bw[24], te[48], ratio[48], ver[48];
        if (w->state != FP4_ROW_OK) {
            const size_t max = verbose ? sizeof w->reason : REASON_CELL;
            fprintf(f, "%-44s %5lld %-17s %s: %.*s%s\n", w->label, (long long)w->shape.m, w->backend,
                    fp4_row_state_name(w->state), (int)max, w->reason,
                    strlen(w->reason) > max ? "..." : "");
            continue;
        }
        const int timed = w->t.count > 0;
        if (timed) snprintf(med, sizeof med, "%.2f", w->t.median);
        else snprintf(med, sizeof med, "-");
        fmt_num(tps, sizeof tps, timed ? m->tokens_per_s : NAN);
        fmt_num(gbps, sizeof gbps, timed ? w->gbps : NAN);
        if (timed && m->pct_bandwidth >= 0) snprintf(bw, sizeof bw, "%.0f%%", m->pct_bandwidth);
        else snprintf(bw, sizeof bw, "-");
        snprintf(te, sizeof te, "%d/%g/%d", m->tokens_min, m->tokens_median, m->tokens_max);
        if (w->has_ratio)
            snprintf(ratio, sizeof ratio, "%.2fx [%.2f,%.2f]", w->ratio, w->ratio_lo, w->ratio_hi);
        else
            snprintf(ratio, sizeof ratio, "-");
        if (w->verified == -1) snprintf(ver, sizeof ver, "reference");
        else if (w->verified == 1) snprintf(ver, sizeof ver, "ok %.1e%s", w->err_max,
                                            m->verify_rows < m->verify_rows_total ? " (sample)" : "");
        else snprintf(ver, sizeof ver, "no");
        fprintf(f, "%-44s %5lld %-17s %10s %9s %7s %5s %5d %13s %18s %s%s%s\n", w->label,
                (long long)w->shape.m, w->backend, med, tps, gbps, bw, m->active_experts, te, ratio, ver,
                w->timed_out ? " T" : "", strcmp(w->l2, "warm") == 0 ? " W" : "");
        if (m->nsteps > 0) {
            fprintf(f, "%-44s       steps:", "");
            for (int s = 0; s < m->nsteps; s++)
                fprintf(f, " %s %.2f%s", m->steps[s].name, m->steps[s].us, s + 1 < m->nsteps ? "," : "");
            fprintf(f, " us\n");
        }
    }
    fprintf(f, "\nexp: experts with tokens; tok/exp: pairs per expert min/median/max; %%BW: GB/s of the\n"
               "bytes the call reads over the measured read bandwidth; flags: T timed out, W warm L2\n");
}

int cmd_moe(int argc, char **argv)
{
    cli_args a = {.argc = argc, .argv = argv, .i = 1, .cmd = "fp4bench moe",
                  .repeatable = "--step --mode --plugin"};
    fp4_settings set;
    fp4_err err;
    fp4_report report;
    fp4_engine *engine = NULL;
    fp4_moe_engine *moe = NULL;
    const fp4_moe_backend_ops *backends[MAX_BACKENDS], *plugin_ops[MAX_PLUGINS];
    void *plugin_handles[MAX_PLUGINS];
    int nplugins = 0;
    int nbackends = 0, ntokens = 0, tp = 1, quiet = 0, verbose = 0, max_time_given = 0;
    int no_ceilings = 0, sweep = 0, have_dims = 0, zipf_given = 0, routing_given = 0, shared = 0;
    int64_t tokens[MAX_TOKENS];
    unsigned steps = 0, modes = 0;
    const char *v, *model = NULL, *json_arg = NULL, *csv_path = NULL, *backend_arg = NULL,
               *trace_path = NULL;
    fp4_moe_dims dims;
    fp4_moe_route_opts route;
    int32_t *trace_ids = NULL;
    int64_t trace_tokens = 0, trace_k = 0;
    FILE *out = stdout;
    moe_ctx ctx;
    int rc = 0;

    memset(&ctx, 0, sizeof ctx);
    memset(&report, 0, sizeof report);
    memset(&dims, 0, sizeof dims);
    memset(&route, 0, sizeof route);
    route.mode = FP4_MOE_ROUTE_RANDOM;
    route.zipf_s = FP4_MOE_DEFAULT_ZIPF_S;
    fp4_settings_default(&set);
    while (a.i < argc) {
        if (cli_measure_option(&a, &set, &max_time_given)) {
            continue;
        } else if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(moe_usage, stdout);
            printf("\nMoE backends:\n");
            for (int i = 0; i < fp4_moe_backend_count(); i++)
                printf("  %-18s %s\n", fp4_moe_backend_at(i)->name, fp4_moe_backend_at(i)->summary);
            return 0;
        } else if (cli_value(&a, "--model", &v)) {
            if (model || have_dims) cli_usage_error(&a, "give one of --model and --dims, once");
            model = v;
        } else if (cli_value(&a, "--dims", &v)) {
            if (model || have_dims) cli_usage_error(&a, "give one of --model and --dims, once");
            parse_dims(&a, v, &dims);
            have_dims = 1;
        } else if (cli_value(&a, "--tp", &v)) {
            const long long t = cli_int(&a, "--tp", v);
            if (t < 1 || t > 1024) cli_usage_error(&a, "--tp must be in 1..1024");
            tp = (int)t;
        } else if (cli_value(&a, "--tokens", &v)) {
            if (sweep || ntokens) cli_usage_error(&a, "give one of --tokens and --sweep, once");
            ntokens = parse_int_list(&a, "--tokens", v, tokens, MAX_TOKENS);
            for (int i = 0; i < ntokens; i++)
                if (tokens[i] > MOE_MAX_T)
                    cli_usage_error(&a, "--tokens: %lld is more than %d", (long long)tokens[i], MOE_MAX_T);
        } else if (cli_flag(&a, "--sweep")) {
            if (sweep || ntokens) cli_usage_error(&a, "give one of --tokens and --sweep, once");
            sweep = 1;
            for (int64_t t = 1; t <= SWEEP_MAX_TOKENS; t *= 2) tokens[ntokens++] = t;
        } else if (cli_value(&a, "--routing", &v)) {
            if (fp4_moe_route_mode_parse(v, &route.mode, &err) != FP4_OK)
                cli_usage_error(&a, "--routing: %s", fp4_err_text(&err));
            routing_given = 1;
        } else if (cli_value(&a, "--shared", &v)) {
            const long long n = cli_int(&a, "--shared", v);
            if (n < 0 || n > 64) cli_usage_error(&a, "--shared %lld: want 0..64 shared experts", n);
            shared = (int)n;
        } else if (cli_value(&a, "--zipf", &v)) {
            route.zipf_s = cli_double(&a, "--zipf", v);
            if (!(route.zipf_s >= 0)) cli_usage_error(&a, "--zipf must be >= 0");
            zipf_given = 1;
        } else if (cli_value(&a, "--trace", &v)) {
            trace_path = v;
        } else if (cli_value(&a, "--step", &v)) {
            parse_steps(&a, v, &steps);
        } else if (cli_value(&a, "--mode", &v)) {
            parse_modes(&a, v, &modes);
        } else if (cli_value(&a, "--data", &v)) {
            if (fp4_data_kind_parse(v, &set.data) != 0 ||
                (set.data != FP4_DATA_GAUSSIAN && set.data != FP4_DATA_CODES))
                cli_usage_error(&a, "--data: '%s' (gaussian, codes)", v);
        } else if (cli_value(&a, "--backend", &v)) {
            backend_arg = v; /* resolved once every --plugin is loaded */
        } else if (cli_value(&a, "--plugin", &v)) {
            const fp4_moe_backend_ops *ops;
            if (nplugins == MAX_PLUGINS) cli_usage_error(&a, "--plugin: at most %d plugins", MAX_PLUGINS);
            if (fp4_moe_backend_load(v, &ops, &plugin_handles[nplugins], &err) != FP4_OK) cli_die(a.cmd, &err);
            for (int i = 0; i < nplugins; i++)
                if (strcmp(plugin_ops[i]->name, ops->name) == 0)
                    cli_usage_error(&a, "--plugin: a backend named '%s' is already loaded", ops->name);
            plugin_ops[nplugins++] = ops;
        } else if (cli_value(&a, "--baseline", &v)) {
            snprintf(set.baseline, sizeof set.baseline, "%s", v);
        } else if (cli_value(&a, "--json", &v)) {
            json_arg = v;
        } else if (cli_value(&a, "--csv", &v)) {
            csv_path = v;
        } else if (cli_flag(&a, "--no-ceilings")) {
            no_ceilings = 1;
        } else if (cli_flag(&a, "--quiet")) {
            quiet = 1;
        } else if (cli_flag(&a, "--verbose")) {
            verbose = 1;
        } else {
            cli_usage_error(&a, "unknown option '%s'", argv[a.i]);
        }
    }

    /* the layer */
    if (!model && !have_dims)
        cli_usage_error(&a, "give the layer: --model NAME (%s...) or --dims H,I,E,K", "glm5, qwen3-30b, ");
    char model_name[24];
    int preset_shared = 0; /* the model's shared experts, for a hint when --shared leaves them out */
    if (model) {
        const fp4_moe_preset *p;
        if (fp4_moe_preset_lookup(model, &p, &err) != FP4_OK) cli_usage_error(&a, "--model: %s", fp4_err_text(&err));
        if (fp4_moe_preset_dims(p, tp, &dims, &err) != FP4_OK) cli_usage_error(&a, "--tp %d: %s", tp, fp4_err_text(&err));
        snprintf(model_name, sizeof model_name, "%s", p->name);
        preset_shared = p->shared_experts;
    } else {
        if (tp > 1) {
            if (dims.inter % tp != 0 || (dims.inter / tp) % 16 != 0)
                cli_usage_error(&a, "--tp %d: I = %lld does not split into multiples of 16", tp,
                                (long long)dims.inter);
            dims.inter /= tp;
        }
        snprintf(model_name, sizeof model_name, "custom");
    }

    /* shared experts: the last ones, in every token's last slots */
    if (shared > 0) {
        if (dims.experts > FP4_MOE_MAX_EXPERTS - shared)
            cli_usage_error(&a, "--shared %d: %d experts in all, at most %d", shared, dims.experts + shared,
                            FP4_MOE_MAX_EXPERTS);
        dims.experts += shared;
        dims.top_k += shared;
    }
    route.shared = shared;

    /* the routing */
    cli_distinct_files(&a, "--json", json_arg, "--trace", trace_path);
    cli_distinct_files(&a, "--csv", csv_path, "--trace", trace_path);
    if (trace_path) {
        if (routing_given && route.mode != FP4_MOE_ROUTE_TRACE)
            cli_usage_error(&a, "--trace goes with --routing trace, not --routing %s",
                            fp4_moe_route_mode_name(route.mode));
        route.mode = FP4_MOE_ROUTE_TRACE;
    } else if (route.mode == FP4_MOE_ROUTE_TRACE) {
        cli_usage_error(&a, "--routing trace needs --trace FILE.npy");
    }
    if (zipf_given && route.mode != FP4_MOE_ROUTE_SKEWED)
        cli_usage_error(&a, "--zipf applies to --routing skewed");
    route.seed = set.seed;
    if (trace_path) {
        if (read_trace(trace_path, &trace_ids, &trace_tokens, &trace_k, &err) != FP4_OK) cli_die(a.cmd, &err);
        if (trace_k != dims.top_k - shared)
            cli_usage_error(&a, "--trace: %s has %lld experts per token, the layer's top-k is %d", trace_path,
                            (long long)trace_k, dims.top_k - shared);
        fp4_moe_routing check;
        route.trace_ids = trace_ids;
        if (fp4_moe_route(&route, trace_tokens, dims.experts, dims.top_k, &check, &err) != FP4_OK) {
            fprintf(stderr, "%s: error: %s: %s\n", a.cmd, trace_path, fp4_err_text(&err));
            free(trace_ids);
            return EXIT_RUNTIME;
        }
        fp4_moe_routing_free(&check);
        if (ntokens == 0) tokens[ntokens++] = trace_tokens;
        if (sweep) { /* prefixes of the trace: 1, 2, 4, ... below its T (or 8192), then that */
            const int64_t last = trace_tokens < SWEEP_MAX_TOKENS ? trace_tokens : SWEEP_MAX_TOKENS;
            ntokens = 0;
            for (int64_t t = 1; t < last; t *= 2) tokens[ntokens++] = t;
            tokens[ntokens++] = last;
        }
        for (int i = 0; i < ntokens; i++)
            if (tokens[i] > trace_tokens)
                cli_usage_error(&a, "--tokens %lld: the trace %s has %lld tokens", (long long)tokens[i],
                                trace_path, (long long)trace_tokens);
    }
    if (ntokens == 0) {
        const int64_t def[] = {1, 16, 512};
        for (int i = 0; i < 3; i++) tokens[ntokens++] = def[i];
    }
    for (int i = 0; i < ntokens; i++)
        if (tokens[i] > INT32_MAX / dims.top_k)
            cli_usage_error(&a, "--tokens %lld: T*k must stay below 2^31", (long long)tokens[i]);
    if (!steps) steps = 1u << FP4_MOE_STEP_GATE_UP | 1u << FP4_MOE_STEP_DOWN;
    if (!modes) modes = 1u << FP4_MOE_W4A4;

    if (json_arg && csv_path && strcmp(json_arg, "-") == 0 && strcmp(csv_path, "-") == 0)
        cli_usage_error(&a, "--json - and --csv - would both write to stdout; pick one");
    cli_distinct_files(&a, "--csv", csv_path, "--json", json_arg);
    if (json_arg && strcmp(json_arg, "-") != 0) ctx.files.json_path = json_arg;
    if ((json_arg && strcmp(json_arg, "-") == 0) || (csv_path && strcmp(csv_path, "-") == 0)) out = stderr;

    /* backends and the baseline */
    fp4_device_info probe;
    fp4_device_describe(&probe);
    if (!probe.present && !max_time_given) set.stop.max_time_s = 3;
    set.measure_ceilings = !no_ceilings && probe.present && !set.verify_only;
    if (backend_arg) {
        add_backends(&a, backend_arg, plugin_ops, nplugins, backends, &nbackends);
    } else {
        for (int i = 0; i < fp4_moe_backend_count() && nbackends < MAX_BACKENDS; i++) {
            const fp4_moe_backend_ops *ops = fp4_moe_backend_at(i);
            const int gpu = (ops->flags & FP4_BACKEND_GPU) != 0;
            if (probe.present ? gpu : !gpu) backends[nbackends++] = ops;
        }
    }
    /* a loaded plugin always runs, named in --backend or not */
    for (int i = 0; i < nplugins; i++) add_unique(backends, &nbackends, plugin_ops[i]);
    if (!set.baseline[0]) {
        for (int i = 0; i < nbackends; i++)
            if (strcmp(backends[i]->name, "moe-cublas-bf16") == 0)
                snprintf(set.baseline, sizeof set.baseline, "moe-cublas-bf16");
    } else {
        int found = 0;
        for (int i = 0; i < nbackends; i++) found |= strcmp(backends[i]->name, set.baseline) == 0;
        if (!found) cli_usage_error(&a, "--baseline '%s' is not among the measured backends", set.baseline);
    }

    set.interrupt = cli_interrupt_flag();
    if (fp4_engine_create(&set, &report, &engine, &err) != FP4_OK) cli_die(a.cmd, &err);
    if (fp4_moe_engine_create(engine, &report, &moe, &err) != FP4_OK) cli_die(a.cmd, &err);
    cli_stamp_report(&report, "fp4bench moe", argc, argv);
    if (csv_path) {
        ctx.files.csv = strcmp(csv_path, "-") == 0 ? stdout : fopen(csv_path, "w");
        if (!ctx.files.csv) {
            fp4_fail(&err, FP4_ERR_IO, "cannot write %s", csv_path);
            cli_die(a.cmd, &err);
        }
        if (fp4_csv_write_header_moe(ctx.files.csv, &err) != FP4_OK) cli_die(a.cmd, &err);
    }
    int nsteps = 0, nmodes = 0;
    for (int s = 0; s < FP4_MOE_STEP_COUNT; s++) nsteps += (steps >> s) & 1;
    for (int s = 0; s < 2; s++) nmodes += (modes >> s) & 1;
    ctx.progress = !quiet && isatty(2);
    ctx.total = nsteps * nmodes * ntokens * nbackends;

    if (set.measure_ceilings) {
        if (ctx.progress) fprintf(stderr, "measuring ceilings (read bandwidth, bf16/fp8 rates)...");
        if (fp4_engine_measure_ceilings(engine, &report, &err) != FP4_OK)
            fprintf(stderr, "fp4bench: warning: ceilings not measured: %s\n", fp4_err_text(&err));
        if (ctx.progress) fputs("\r\033[K", stderr);
    }
    fp4_report_print_header(out, &report);
    char with_shared[80] = "";
    if (shared > 0)
        snprintf(with_shared, sizeof with_shared, " (%d of them shared, in every token's top-k)", shared);
    else if (preset_shared > 0) /* the model has one the rows leave out */
        snprintf(with_shared, sizeof with_shared, " (routed only: --shared %d adds the model's shared expert%s)",
                 preset_shared, preset_shared > 1 ? "s" : "");
    fprintf(out, "MoE: %s H %lld, I %lld (per rank, tp %d), E %d, top-%d%s, %s; NVFP4 weights %.3g GB "
                 "(%.3g MB an expert)\n",
            model_name, (long long)dims.hidden, (long long)dims.inter, tp, dims.experts, dims.top_k, with_shared,
            fp4_moe_act_name(dims.act), dims.experts * fp4_moe_expert_bytes(&dims, FP4_MOE_WEIGHTS_NVFP4) / 1e9,
            fp4_moe_expert_bytes(&dims, FP4_MOE_WEIGHTS_NVFP4) / 1e6);
    fflush(out);
    if (ctx.files.json_path && fp4_report_write_json(ctx.files.json_path, &report, &err) != FP4_OK)
        cli_die(a.cmd, &err);

    cli_catch_sigint();
    for (int s = 0; s < FP4_MOE_STEP_COUNT && rc == 0; s++) {
        if (!((steps >> s) & 1)) continue;
        for (int md = 0; md < 2 && rc == 0; md++) {
            if (!((modes >> md) & 1)) continue;
            for (int t = 0; t < ntokens && rc == 0; t++) {
                fp4_moe_case c;
                memset(&c, 0, sizeof c);
                snprintf(c.model, sizeof c.model, "%s", model_name);
                c.tp = tp;
                c.dims = dims;
                c.tokens = tokens[t];
                c.route = route;
                c.trace_tokens = trace_tokens;
                c.step = (fp4_moe_step)s;
                c.mode = (fp4_moe_mode)md;
                const fp4_status cst =
                    fp4_moe_engine_run_case(moe, &c, backends, nbackends, &report, on_row, &ctx, &err);
                if (cst == FP4_ERR_INTERRUPTED) {
                    report.interrupted = 1;
                    if (ctx.progress) fputs("\r\033[K", stderr);
                    fprintf(stderr, "%s: interrupted: %d rows kept\n", a.cmd, report.nrows);
                    if (ctx.files.json_path && fp4_report_write_json(ctx.files.json_path, &report, &err) != FP4_OK)
                        fprintf(stderr, "%s: error: %s\n", a.cmd, fp4_err_text(&err));
                    rc = EXIT_INTERRUPTED;
                } else if (cst != FP4_OK) {
                    char label[FP4_LABEL_LEN];
                    fp4_moe_case_label(&c, label, sizeof label);
                    if (ctx.progress) fputc('\n', stderr);
                    fprintf(stderr, "%s: error: case %s T=%lld: %s\n", a.cmd, label, (long long)c.tokens,
                            fp4_err_text(&err));
                    rc = EXIT_RUNTIME;
                }
            }
        }
    }
    if (ctx.progress) fputs("\r\033[K", stderr);
    print_table(out, &report, verbose);
    if (json_arg && strcmp(json_arg, "-") == 0 && cli_json_to_stdout(&report, &err) != FP4_OK) {
        fprintf(stderr, "%s: error: %s\n", a.cmd, fp4_err_text(&err));
        if (rc == 0) rc = EXIT_RUNTIME;
    }
    signal(SIGINT, SIG_DFL);
    for (int i = 0; i < report.nrows; i++)
        if (report.rows[i].state == FP4_ROW_FAILED && rc == 0) rc = EXIT_CHECK;
    if (ctx.files.write_failed && rc == 0) rc = EXIT_RUNTIME;
    if (ctx.files.csv && ctx.files.csv != stdout && fclose(ctx.files.csv) != 0) {
        fprintf(stderr, "%s: error: cannot write %s\n", a.cmd, csv_path);
        if (rc == 0) rc = EXIT_RUNTIME;
    }
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "%s: error: cannot write to stdout\n", a.cmd);
        rc = EXIT_RUNTIME;
    }
    fp4_warnings warn;
    fp4_warnings_clear(&warn);
    fp4_moe_engine_destroy(moe, &warn); /* closes the plugins' instances: before unloading them */
    fp4_engine_destroy(engine, &warn);
    cli_print_warnings(&warn);
    fp4_report_free(&report);
    for (int i = 0; i < nplugins; i++) fp4_moe_backend_unload(plugin_handles[i]);
    free(trace_ids);
    return rc;
}
