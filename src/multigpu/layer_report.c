/* The results of fp4bench layer: rows, the JSON (schema "fp4bench-layer/1",
 * docs/PARALLEL.md "fp4bench layer") and the table. JSON conventions as in
 * docs/JSON.md: microseconds, 10^9 B/s, null for a number that is not finite. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "multigpu/layer.h"
#include "multigpu/mg_report_common.h"

#define LAYER_JSON_SCHEMA "fp4bench-layer/1"

fp4_status fp4_layer_report_add(fp4_layer_report *r, const fp4_layer_row *row, fp4_err *err)
{
    fp4_status st = mg_rows_reserve((void **)&r->rows, &r->cap, r->nrows, sizeof *r->rows, err);
    if (st != FP4_OK) return st;
    r->rows[r->nrows++] = *row;
    return FP4_OK;
}

void fp4_layer_report_free(fp4_layer_report *r)
{
    if (!r) return;
    free(r->rows);
    r->rows = NULL;
    r->nrows = r->cap = 0;
}

/* short names: the trees below are long */
#define put mg_json_put
#define num mg_json_num
#define TEXT MG_JSON_TEXT

static cJSON *row_json(int *ok, const void *rows, int i)
{
    const fp4_layer_row *w = &((const fp4_layer_row *)rows)[i];
    cJSON *o = cJSON_CreateObject();
    const int moe = w->kind != FP4_LAYER_ATTN;
    if (!o) {
        *ok = 0;
        return NULL;
    }
    put(ok, o, "kind", cJSON_CreateString(fp4_layer_kind_name(w->kind)));
    put(ok, o, "mode", moe ? cJSON_CreateString(fp4_moe_mode_name(w->mode)) : cJSON_CreateNull());
    put(ok, o, "ranks", num(w->ranks));
    put(ok, o, "tokens", num((double)w->tokens));
    put(ok, o, "devices", TEXT(w->devices));
    put(ok, o, "shapes", TEXT(w->shapes));
    put(ok, o, "state", cJSON_CreateString(fp4_layer_state_name(w->state)));
    put(ok, o, "why", TEXT(w->why));
    put(ok, o, "check", TEXT(w->check));
    put(ok, o, "err_max", num(w->err_max));
    put(ok, o, "err_norm", num(w->err_norm));
    put(ok, o, "tol_max", num(w->tol_max));
    put(ok, o, "tol_norm", num(w->tol_norm));
    put(ok, o, "iters", num(w->iters));
    put(ok, o, "reps", num(w->reps));
    put(ok, o, "total_us", num(w->total_us));
    put(ok, o, "compute_us", num(w->compute_us));
    put(ok, o, "allreduce_us", num(w->allreduce_us));
    put(ok, o, "dispatch_us", num(w->dispatch_us));
    put(ok, o, "combine_us", num(w->combine_us));
    put(ok, o, "slowest_rank", w->slowest_rank >= 0 ? num(w->slowest_rank) : cJSON_CreateNull());
    put(ok, o, "flops", num(w->flops));
    put(ok, o, "tflops", num(w->tflops));
    put(ok, o, "allreduce_bytes", num(w->allreduce_bytes));
    put(ok, o, "allreduce_busbw_gbps", num(w->allreduce_busbw_gbps));
    put(ok, o, "dispatch_bytes", num(w->dispatch_bytes));
    put(ok, o, "dispatch_wire_bytes", num(w->dispatch_wire_bytes));
    put(ok, o, "dispatch_busbw_gbps", num(w->dispatch_busbw_gbps));
    put(ok, o, "combine_bytes", num(w->combine_bytes));
    put(ok, o, "combine_wire_bytes", num(w->combine_wire_bytes));
    put(ok, o, "combine_busbw_gbps", num(w->combine_busbw_gbps));
    put(ok, o, "recv_imbalance", num(w->recv_imbalance));
    mg_json_nums(ok, o, "rank_total_us", w->rank_total_us,
                 w->ranks < FP4_NCCL_MAX_RANKS ? w->ranks : FP4_NCCL_MAX_RANKS);
    return o;
}

static cJSON *report_json(const fp4_layer_report *r)
{
    int ok = 1;
    cJSON *root = cJSON_CreateObject(), *o;
    const fp4_layer_spec *sp = &r->spec;
    char label[96];
    if (!root) return NULL;
    MG_JSON_HEAD(&ok, root, LAYER_JSON_SCHEMA, r);
    o = cJSON_CreateObject();
    put(&ok, root, "layer", o);
    put(&ok, o, "kind", cJSON_CreateString(fp4_layer_kind_name(sp->kind)));
    put(&ok, o, "model", TEXT(sp->model));
    if (sp->kind == FP4_LAYER_ATTN) {
        put(&ok, o, "hidden", num((double)sp->attn.hidden));
        put(&ok, o, "q_heads", num(sp->attn.q_heads));
        put(&ok, o, "kv_heads", num(sp->attn.kv_heads));
        put(&ok, o, "head_dim", num((double)sp->attn.head_dim));
    } else {
        put(&ok, o, "hidden", num((double)sp->dims.hidden));
        put(&ok, o, "inter", num((double)sp->dims.inter));
        put(&ok, o, "experts", num(sp->dims.experts));
        put(&ok, o, "top_k", num(sp->dims.top_k));
        put(&ok, o, "act", cJSON_CreateString(fp4_moe_act_name(sp->dims.act) ? fp4_moe_act_name(sp->dims.act) : "?"));
        put(&ok, o, "mode", cJSON_CreateString(fp4_moe_mode_name(sp->mode) ? fp4_moe_mode_name(sp->mode) : "?"));
        fp4_moe_route_describe(&sp->route, label, sizeof label);
        put(&ok, o, "routing", cJSON_CreateString(label));
    }
    if (r->have_info) {
        const fp4_nccl_info *in = &r->info;
        mg_nccl_version_text(in->nccl_version, label, sizeof label);
        o = cJSON_CreateObject();
        put(&ok, root, "nccl", o);
        put(&ok, o, "version", cJSON_CreateString(label));
        put(&ok, o, "nvls", cJSON_CreateFalse()); /* the set forces NCCL_NVLS_ENABLE=0 */
        put(&ok, o, "driver_version", num(in->driver_version));
        put(&ok, o, "runtime_version", num(in->runtime_version));
        put(&ok, o, "gpu", TEXT(in->gpus[0].name));
    } else {
        put(&ok, root, "nccl", cJSON_CreateNull());
    }
    mg_json_settings(&ok, root, r->settings.iters, r->settings.warmup, r->settings.reps, r->settings.seed);
    mg_json_rows(&ok, root, r->nrows, row_json, r->rows);
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

fp4_status fp4_layer_write_json(const char *path, const fp4_layer_report *r, fp4_err *err)
{
    if (!path || !path[0] || !r) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_layer_write_json: no path or report");
    return mg_write_json(path, report_json(r), err);
}

/* ---- the table ------------------------------------------------------------------------------------------ */

void fp4_layer_print_header(FILE *out, fp4_layer_kind kind)
{
    if (kind == FP4_LAYER_EP)
        fprintf(out, "%-9s %5s %7s %-10s %10s %10s %10s %10s %9s %9s %7s  %s\n", "layer", "ranks", "tokens", "state",
                "total_us", "dispatch", "compute", "combine", "disp_GB/s", "comb_GB/s", "TFLOP/s", "check");
    else
        fprintf(out, "%-9s %5s %7s %-10s %10s %10s %10s %9s %7s  %s\n", "layer", "ranks", "tokens", "state",
                "total_us", "compute", "allreduce", "busbw", "TFLOP/s", "check");
}

void fp4_layer_print_row(FILE *out, const fp4_layer_row *w)
{
    const char *name = w->kind == FP4_LAYER_ATTN ? "attention" : w->kind == FP4_LAYER_TP ? "tp" : "ep";
    char label[16];
    snprintf(label, sizeof label, "%s%s%s", name, w->kind == FP4_LAYER_ATTN ? "" : "/",
             w->kind == FP4_LAYER_ATTN ? "" : fp4_moe_mode_name(w->mode) ? fp4_moe_mode_name(w->mode) : "?");
    if (w->state != FP4_LAYER_ROW_OK) {
        fprintf(out, "%-9s %5d %7lld %s (%s)\n", label, w->ranks, (long long)w->tokens, fp4_layer_state_name(w->state),
                w->why);
        return;
    }
    if (w->kind == FP4_LAYER_EP)
        fprintf(out, "%-9s %5d %7lld %-10s %10.2f %10.2f %10.2f %10.2f %9.2f %9.2f %7.2f  err %.2g/%.2g, %s\n", label,
                w->ranks, (long long)w->tokens, "ok", w->total_us, w->dispatch_us, w->compute_us, w->combine_us,
                w->dispatch_busbw_gbps, w->combine_busbw_gbps, w->tflops, w->err_max, w->err_norm, w->check);
    else
        fprintf(out, "%-9s %5d %7lld %-10s %10.2f %10.2f %10.2f %9.2f %7.2f  err %.2g/%.2g, %s\n", label, w->ranks,
                (long long)w->tokens, "ok", w->total_us, w->compute_us, w->allreduce_us, w->allreduce_busbw_gbps,
                w->tflops, w->err_max, w->err_norm, w->check);
}
