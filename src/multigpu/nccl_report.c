/* The results of fp4bench nccl: the report's rows, its JSON (schema
 * "fp4bench-nccl/1", docs/PARALLEL.md), its CSV and its table lines.
 * The JSON follows docs/JSON.md's conventions (times in microseconds,
 * rates in 10^9 B/s, null for a number that is not finite, UTF-8 strings)
 * but is its own schema: fp4bench compare and report do not read it. */
#include "fp4/multigpu.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fp4/io.h"

#define COLL_JSON_SCHEMA "fp4bench-nccl/1"

fp4_status fp4_coll_report_add(fp4_coll_report *r, const fp4_coll_row *row, fp4_err *err)
{
    if (r->nrows == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        fp4_coll_row *rows = realloc(r->rows, (size_t)cap * sizeof *rows);
        if (!rows) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for %d result rows", cap);
        r->rows = rows;
        r->cap = cap;
    }
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

/* Tree building: ok drops to 0 at the first allocation failure, after which
 * every add is skipped; the writer checks ok once. */
typedef struct tree {
    int ok;
} tree;

static void add(tree *t, cJSON *parent, const char *key, cJSON *item)
{
    if (t->ok && parent && item && cJSON_AddItemToObject(parent, key, item)) return;
    cJSON_Delete(item);
    t->ok = 0;
}

/* A number as JSON: null when not finite (JSON has none), else 17
 * significant digits, which read back as the same double. */
static cJSON *number(double v)
{
    char text[40];
    if (!isfinite(v)) return cJSON_CreateNull();
    snprintf(text, sizeof text, "%.17g", v);
    for (char *p = text; *p; p++)
        if (*p == ',') *p = '.'; /* a locale's decimal comma */
    return cJSON_CreateRaw(text);
}

/* A string of at most cap bytes, with any byte that is not UTF-8 made '?'. */
static cJSON *string(const char *s, size_t cap)
{
    size_t len = strnlen(s, cap);
    char *copy = malloc(len + 1);
    cJSON *item;
    if (!copy) return NULL;
    memcpy(copy, s, len);
    copy[len] = '\0';
    fp4_utf8_sanitize(copy, len);
    item = cJSON_CreateString(copy);
    free(copy);
    return item;
}
#define STRING(arr) string((arr), sizeof(arr))

static cJSON *object(tree *t, cJSON *parent, const char *key)
{
    cJSON *o = cJSON_CreateObject();
    add(t, parent, key, o);
    return t->ok ? o : NULL;
}

static cJSON *gpu_tree(tree *t, const fp4_nccl_gpu *g)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        t->ok = 0;
        return NULL;
    }
    add(t, o, "rank", number(g->rank));
    add(t, o, "device", number(g->device));
    add(t, o, "name", STRING(g->name));
    add(t, o, "pci_bus_id", STRING(g->pci_bus_id));
    add(t, o, "cc_major", number(g->cc_major));
    add(t, o, "cc_minor", number(g->cc_minor));
    add(t, o, "host", STRING(g->host));
    return o;
}

static cJSON *row_tree(tree *t, const fp4_coll_row *row)
{
    cJSON *o = cJSON_CreateObject(), *ranks = cJSON_CreateArray();
    int timed = isfinite(row->time_us);
    if (!o || !ranks) {
        cJSON_Delete(o);
        cJSON_Delete(ranks);
        t->ok = 0;
        return NULL;
    }
    add(t, o, "op", cJSON_CreateString(fp4_coll_op_name(row->op)));
    add(t, o, "dtype", cJSON_CreateString(row->op == FP4_COLL_ALL_REDUCE ? "bf16" : "uint32"));
    add(t, o, "bytes", number((double)row->bytes));
    add(t, o, "count", number((double)row->count));
    add(t, o, "ranks", number(row->nranks));
    add(t, o, "state", cJSON_CreateString(row->verified ? "ok" : "FAILED"));
    add(t, o, "why", STRING(row->why));
    add(t, o, "iters", number(row->iters));
    add(t, o, "reps", number(row->reps));
    add(t, o, "time_us", number(row->time_us));
    add(t, o, "slowest_rank", timed ? number(row->slowest_rank) : cJSON_CreateNull());
    add(t, o, "algbw_gbps", number(row->algbw_gbps));
    add(t, o, "busbw_gbps", number(row->busbw_gbps));
    add(t, o, "bus_factor", number(fp4_coll_bus_factor(row->op, row->nranks)));
    for (int k = 0; k < row->nranks && k < FP4_NCCL_MAX_RANKS && t->ok; k++)
        if (!cJSON_AddItemToArray(ranks, number(row->rank_us[k]))) t->ok = 0;
    add(t, o, "rank_time_us", ranks);
    return o;
}

static cJSON *report_tree(const fp4_coll_report *r)
{
    tree t = {1};
    cJSON *root = cJSON_CreateObject(), *o, *rows, *gpus;
    char version[32];
    if (!root) return NULL;
    add(&t, root, "schema", cJSON_CreateString(COLL_JSON_SCHEMA));
    add(&t, root, "schema_version", number(1));
    o = object(&t, root, "fp4bench");
    add(&t, o, "version", STRING(r->version));
    add(&t, o, "commit", STRING(r->commit));
    add(&t, root, "started", STRING(r->started));
    add(&t, root, "host", STRING(r->host));
    add(&t, root, "command", STRING(r->command));
    add(&t, root, "unsupported", STRING(r->unsupported));
    if (r->have_info) {
        const fp4_nccl_info *in = &r->info;
        o = object(&t, root, "nccl");
        /* ncclGetVersion's code: major * 10000 + minor * 100 + patch since 2.9 */
        snprintf(version, sizeof version, "%d.%d.%d", in->nccl_version / 10000, in->nccl_version / 100 % 100,
                 in->nccl_version % 100);
        add(&t, o, "version", cJSON_CreateString(version));
        add(&t, o, "version_code", number(in->nccl_version));
        add(&t, o, "launcher", cJSON_CreateString(fp4_nccl_launcher_name(in->launcher)));
        add(&t, o, "nvls", cJSON_CreateFalse()); /* forced off: NCCL_NVLS_ENABLE=0 */
        o = object(&t, root, "device");
        add(&t, o, "driver_version", number(in->driver_version));
        add(&t, o, "runtime_version", number(in->runtime_version));
        add(&t, o, "ranks", number(in->nranks));
        gpus = cJSON_CreateArray();
        for (int k = 0; gpus && k < in->nranks && t.ok; k++) {
            cJSON *g = gpu_tree(&t, &in->gpus[k]);
            if (!g || !cJSON_AddItemToArray(gpus, g)) {
                cJSON_Delete(g);
                t.ok = 0;
            }
        }
        add(&t, o, "gpus", gpus);
    } else {
        add(&t, root, "nccl", cJSON_CreateNull());
        add(&t, root, "device", cJSON_CreateNull());
    }
    o = object(&t, root, "settings");
    add(&t, o, "iters", number(r->settings.iters));
    add(&t, o, "warmup", number(r->settings.warmup));
    add(&t, o, "reps", number(r->settings.reps));
    add(&t, o, "seed", number((double)r->settings.seed));
    rows = cJSON_CreateArray();
    for (int i = 0; rows && i < r->nrows && t.ok; i++) {
        cJSON *row = row_tree(&t, &r->rows[i]);
        if (!row || !cJSON_AddItemToArray(rows, row)) {
            cJSON_Delete(row);
            t.ok = 0;
        }
    }
    add(&t, root, "rows", rows);
    if (!t.ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* text (and a final newline) to stdout, or to path through path.tmp, synced
 * and renamed over path, so that a reader never sees half a file. */
static fp4_status put_text(const char *path, const char *text, fp4_err *err)
{
    size_t len = strlen(text), plen;
    char *tmp;
    FILE *f;
    fp4_status st = FP4_OK;
    if (strcmp(path, "-") == 0) {
        if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0)
            return fp4_fail(err, FP4_ERR_IO, "cannot write to stdout");
        return FP4_OK;
    }
    plen = strlen(path);
    tmp = malloc(plen + 5);
    if (!tmp) return fp4_fail(err, FP4_ERR_NOMEM, "no memory writing %s", path);
    snprintf(tmp, plen + 5, "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (!f) {
        st = fp4_fail(err, FP4_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (fwrite(text, 1, len, f) != len || fflush(f) != 0)
        st = fp4_fail(err, FP4_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    else if (fsync(fileno(f)) != 0 && errno != EINVAL) /* EINVAL: a pipe or device, nothing to sync */
        st = fp4_fail(err, FP4_ERR_IO, "cannot sync %s: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && st == FP4_OK) st = fp4_fail(err, FP4_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    if (st == FP4_OK && rename(tmp, path) != 0)
        st = fp4_fail(err, FP4_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (st != FP4_OK) remove(tmp);
out:
    free(tmp);
    return st;
}

fp4_status fp4_coll_write_json(const char *path, const fp4_coll_report *r, fp4_err *err)
{
    cJSON *root;
    char *text, *with_newline;
    fp4_status st;
    if (!path || !path[0] || !r) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_coll_write_json: no path or report");
    root = report_tree(r);
    text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return fp4_fail(err, FP4_ERR_NOMEM, "no memory writing %s", path);
    with_newline = malloc(strlen(text) + 2);
    if (!with_newline) {
        cJSON_free(text);
        return fp4_fail(err, FP4_ERR_NOMEM, "no memory writing %s", path);
    }
    snprintf(with_newline, strlen(text) + 2, "%s\n", text);
    cJSON_free(text);
    st = put_text(path, with_newline, err);
    free(with_newline);
    return st;
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
    st = put_text(path, text, err);
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
