/* The results of fp4bench nccl: the report's rows, its JSON (schema
 * "fp4bench-nccl/1", docs/PARALLEL.md), its CSV and its table lines.
 * The JSON follows docs/JSON.md's conventions (times in microseconds,
 * rates in 10^9 B/s, null for a number that is not finite, UTF-8 strings)
 * but is its own schema: fp4bench compare and report do not read it. */
#include "fp4/multigpu.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "multigpu/mg_report_common.h"

#define COLL_JSON_SCHEMA "fp4bench-nccl/1"

fp4_status fp4_coll_report_add(fp4_coll_report *r, const fp4_coll_row *row, fp4_err *err)
{
    fp4_status st = mg_rows_reserve((void **)&r->rows, &r->cap, r->nrows, sizeof *r->rows, err);
    if (st != FP4_OK) return st;
    r->rows[r->nrows++] = *row;
    return FP4_OK;
}

void fp4_coll_report_free(fp4_coll_report *r)
{
    if (!r) return;
    free(r->rows);
    r->rows = NULL;
    r->nrows = r->cap = 0;
}

/* ---- JSON ---------------------------------------------------------------------- */

/* short names: the trees below are long */
#define add mg_json_put
#define number mg_json_num
#define STRING MG_JSON_TEXT

static cJSON *gpu_tree(int *ok, const fp4_nccl_gpu *g)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        *ok = 0;
        return NULL;
    }
    add(ok, o, "rank", number(g->rank));
    add(ok, o, "device", number(g->device));
    add(ok, o, "name", STRING(g->name));
    add(ok, o, "pci_bus_id", STRING(g->pci_bus_id));
    add(ok, o, "cc_major", number(g->cc_major));
    add(ok, o, "cc_minor", number(g->cc_minor));
    add(ok, o, "host", STRING(g->host));
    return o;
}

static cJSON *row_tree(int *ok, const void *rows, int i)
{
    const fp4_coll_row *row = &((const fp4_coll_row *)rows)[i];
    cJSON *o = cJSON_CreateObject();
    int timed = isfinite(row->time_us);
    if (!o) {
        *ok = 0;
        return NULL;
    }
    add(ok, o, "op", cJSON_CreateString(fp4_coll_op_name(row->op)));
    add(ok, o, "dtype", cJSON_CreateString(row->op == FP4_COLL_ALL_REDUCE ? "bf16" : "uint32"));
    add(ok, o, "bytes", number((double)row->bytes));
    add(ok, o, "count", number((double)row->count));
    add(ok, o, "ranks", number(row->nranks));
    add(ok, o, "state", cJSON_CreateString(row->verified ? "ok" : "FAILED"));
    add(ok, o, "why", STRING(row->why));
    add(ok, o, "iters", number(row->iters));
    add(ok, o, "reps", number(row->reps));
    add(ok, o, "time_us", number(row->time_us));
    add(ok, o, "slowest_rank", timed ? number(row->slowest_rank) : cJSON_CreateNull());
    add(ok, o, "algbw_gbps", number(row->algbw_gbps));
    add(ok, o, "busbw_gbps", number(row->busbw_gbps));
    add(ok, o, "bus_factor", number(fp4_coll_bus_factor(row->op, row->nranks)));
    mg_json_nums(ok, o, "rank_time_us", row->rank_us,
                 row->nranks < FP4_NCCL_MAX_RANKS ? row->nranks : FP4_NCCL_MAX_RANKS);
    return o;
}

static cJSON *report_tree(const fp4_coll_report *r)
{
    int ok = 1;
    cJSON *root = cJSON_CreateObject(), *o, *gpus;
    char version[32];
    if (!root) return NULL;
    MG_JSON_HEAD(&ok, root, COLL_JSON_SCHEMA, r);
    if (r->have_info) {
        const fp4_nccl_info *in = &r->info;
        o = mg_json_object(&ok, root, "nccl");
        mg_nccl_version_text(in->nccl_version, version, sizeof version);
        add(&ok, o, "version", cJSON_CreateString(version));
        add(&ok, o, "version_code", number(in->nccl_version));
        add(&ok, o, "launcher", cJSON_CreateString(fp4_nccl_launcher_name(in->launcher)));
        add(&ok, o, "nvls", cJSON_CreateFalse()); /* forced off: NCCL_NVLS_ENABLE=0 */
        o = mg_json_object(&ok, root, "device");
        add(&ok, o, "driver_version", number(in->driver_version));
        add(&ok, o, "runtime_version", number(in->runtime_version));
        add(&ok, o, "ranks", number(in->nranks));
        gpus = cJSON_CreateArray();
        /* gpus[] holds at most FP4_NCCL_MAX_RANKS, whatever nranks says */
        for (int k = 0; gpus && k < in->nranks && k < FP4_NCCL_MAX_RANKS && ok; k++) {
            cJSON *g = gpu_tree(&ok, &in->gpus[k]);
            if (!g || !cJSON_AddItemToArray(gpus, g)) {
                cJSON_Delete(g);
                ok = 0;
            }
        }
        add(&ok, o, "gpus", gpus);
    } else {
        add(&ok, root, "nccl", cJSON_CreateNull());
        add(&ok, root, "device", cJSON_CreateNull());
    }
    mg_json_settings(&ok, root, r->settings.iters, r->settings.warmup, r->settings.reps, r->settings.seed);
    mg_json_rows(&ok, root, r->nrows, row_tree, r->rows);
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

fp4_status fp4_coll_write_json(const char *path, const fp4_coll_report *r, fp4_err *err)
{
    if (!path || !path[0] || !r) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_coll_write_json: no path or report");
    return mg_write_json(path, report_tree(r), err);
}

/* ---- CSV ----------------------------------------------------------------------- */

static const char csv_header[] = "op,dtype,bytes,count,ranks,state,why,iters,reps,time_us,slowest_rank,"
                                 "algbw_gbps,busbw_gbps,bus_factor,rank_time_us\n";

/* A CSV number: empty when not finite. */
static void csv_number(FILE *f, double v)
{
    if (isfinite(v)) fprintf(f, "%.17g", v);
}

/* A CSV text field, quoted (its quotes doubled) when it holds , " or a line end. */
static void csv_text(FILE *f, const char *s, size_t cap)
{
    size_t len = strnlen(s, cap);
    if (strcspn(s, ",\"\r\n") >= len) {
        fwrite(s, 1, len, f);
        return;
    }
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '"') fputc('"', f);
        fputc(s[i], f);
    }
    fputc('"', f);
}

fp4_status fp4_coll_write_csv(const char *path, const fp4_coll_report *r, fp4_err *err)
{
    char *text = NULL;
    size_t size = 0;
    fp4_status st;
    FILE *f;
    if (!path || !path[0] || !r) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_coll_write_csv: no path or report");
    f = open_memstream(&text, &size);
    if (!f) return fp4_fail(err, FP4_ERR_NOMEM, "no memory writing %s", path);
    fputs(csv_header, f);
    for (int i = 0; i < r->nrows; i++) {
        const fp4_coll_row *row = &r->rows[i];
        fprintf(f, "%s,%s,%zu,%zu,%d,%s,", fp4_coll_op_name(row->op),
                row->op == FP4_COLL_ALL_REDUCE ? "bf16" : "uint32", row->bytes, row->count, row->nranks,
                row->verified ? "ok" : "FAILED");
        csv_text(f, row->why, sizeof row->why);
        fprintf(f, ",%d,%d,", row->iters, row->reps);
        csv_number(f, row->time_us);
        fputc(',', f);
        if (row->slowest_rank >= 0) fprintf(f, "%d", row->slowest_rank);
        fputc(',', f);
        csv_number(f, row->algbw_gbps);
        fputc(',', f);
        csv_number(f, row->busbw_gbps);
        fputc(',', f);
        csv_number(f, fp4_coll_bus_factor(row->op, row->nranks));
        fputc(',', f);
        /* every rank's time in one field, ';' between ranks */
        for (int k = 0; k < row->nranks && k < FP4_NCCL_MAX_RANKS; k++) {
            if (k) fputc(';', f);
            csv_number(f, row->rank_us[k]);
        }
        fputc('\n', f);
    }
    if (fclose(f) != 0 || !text) {
        free(text);
        return fp4_fail(err, FP4_ERR_NOMEM, "no memory writing %s", path);
    }
    st = mg_write_text(path, text, err);
    free(text);
    return st;
}

/* ---- the table ----------------------------------------------------------------- */

/* bytes as the largest binary unit that divides it ("64 MiB", "1000 B"). */
static void size_text(size_t bytes, char *out, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    snprintf(out, cap, "%zu %s", bytes, units[u]);
}

void fp4_coll_print_header(FILE *out)
{
    fprintf(out, "%-11s %10s %5s %-6s %11s %11s %11s %8s\n", "op", "bytes", "ranks", "check", "time_us",
            "algbw GB/s", "busbw GB/s", "slowest");
}

void fp4_coll_print_row(FILE *out, const fp4_coll_row *row)
{
    char size[32];
    size_text(row->bytes, size, sizeof size);
    if (!row->verified) {
        fprintf(out, "%-11s %10s %5d FAILED (%s)\n", fp4_coll_op_name(row->op), size, row->nranks, row->why);
        return;
    }
    fprintf(out, "%-11s %10s %5d %-6s %11.2f %11.2f %11.2f %8d\n", fp4_coll_op_name(row->op), size, row->nranks,
            "ok", row->time_us, row->algbw_gbps, row->busbw_gbps, row->slowest_rank);
}
