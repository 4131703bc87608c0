/* The pieces the nccl and layer reports share (mg_report_common.h). */
#include "multigpu/mg_report_common.h"
#include "io/file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp4/io.h"

fp4_status mg_rows_reserve(void **rows, int *cap, int nrows, size_t size, fp4_err *err)
{
    if (nrows == *cap) {
        const int grown = *cap ? 2 * *cap : 16;
        void *more = realloc(*rows, (size_t)grown * size);
        if (!more) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for %d result rows", grown);
        *rows = more;
        *cap = grown;
    }
    return FP4_OK;
}

void mg_json_put(int *ok, cJSON *obj, const char *key, cJSON *item)
{
    if (*ok && obj && item && cJSON_AddItemToObject(obj, key, item)) return;
    cJSON_Delete(item);
    *ok = 0;
}

cJSON *mg_json_object(int *ok, cJSON *obj, const char *key)
{
    cJSON *o = cJSON_CreateObject();
    mg_json_put(ok, obj, key, o);
    return *ok ? o : NULL;
}

cJSON *mg_json_num(double v)
{
    char text[40];
    if (!isfinite(v)) return cJSON_CreateNull();
    snprintf(text, sizeof text, "%.17g", v);
    for (char *p = text; *p; p++)
        if (*p == ',') *p = '.'; /* a locale's decimal comma */
    return cJSON_CreateRaw(text);
}

cJSON *mg_json_text(const char *s, size_t cap)
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

void mg_json_nums(int *ok, cJSON *obj, const char *key, const double *v, int n)
{
    cJSON *arr = cJSON_CreateArray();
    if (!arr) *ok = 0;
    for (int k = 0; arr && k < n && *ok; k++)
        if (!cJSON_AddItemToArray(arr, mg_json_num(v[k]))) *ok = 0;
    mg_json_put(ok, obj, key, arr);
}

void mg_json_rows(int *ok, cJSON *root, int n, cJSON *(*row)(int *ok, const void *rows, int i), const void *rows)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < n && *ok; i++) {
        cJSON *o = row(ok, rows, i);
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            *ok = 0;
        }
    }
    mg_json_put(ok, root, "rows", arr);
}

void mg_json_head(int *ok, cJSON *root, const char *schema, cJSON *version, cJSON *commit, cJSON *started,
                  cJSON *host, cJSON *command, cJSON *unsupported)
{
    cJSON *o;
    mg_json_put(ok, root, "schema", cJSON_CreateString(schema));
    mg_json_put(ok, root, "schema_version", mg_json_num(1));
    o = mg_json_object(ok, root, "fp4bench");
    mg_json_put(ok, o, "version", version);
    mg_json_put(ok, o, "commit", commit);
    mg_json_put(ok, root, "started", started);
    mg_json_put(ok, root, "host", host);
    mg_json_put(ok, root, "command", command);
    mg_json_put(ok, root, "unsupported", unsupported);
}

void mg_json_settings(int *ok, cJSON *root, int iters, int warmup, int reps, uint64_t seed)
{
    cJSON *o = mg_json_object(ok, root, "settings");
    mg_json_put(ok, o, "iters", mg_json_num(iters));
    mg_json_put(ok, o, "warmup", mg_json_num(warmup));
    mg_json_put(ok, o, "reps", mg_json_num(reps));
    mg_json_put(ok, o, "seed", mg_json_num((double)seed));
}

void mg_nccl_version_text(int code, char *out, size_t cap)
{
    snprintf(out, cap, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
}

fp4_status mg_write_text(const char *path, const char *text, fp4_err *err)
{
    size_t len = strlen(text);
    if (strcmp(path, "-") == 0) {
        if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0)
            return fp4_fail(err, FP4_ERR_IO, "cannot write to stdout");
        return FP4_OK;
    }
    return fp4_io_write_text(path, text, len, err);
}

fp4_status mg_write_json(const char *path, cJSON *root, fp4_err *err)
{
    char *text = root ? cJSON_Print(root) : NULL, *with_newline;
    fp4_status st;
    cJSON_Delete(root);
    if (!text) return fp4_fail(err, FP4_ERR_NOMEM, "no memory writing %s", path);
    with_newline = malloc(strlen(text) + 2);
    if (!with_newline) {
        cJSON_free(text);
        return fp4_fail(err, FP4_ERR_NOMEM, "no memory writing %s", path);
    }
    snprintf(with_newline, strlen(text) + 2, "%s\n", text);
    cJSON_free(text);
    st = mg_write_text(path, with_newline, err);
    free(with_newline);
    return st;
}
