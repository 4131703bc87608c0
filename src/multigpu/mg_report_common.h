/* What the reports of fp4bench nccl and fp4bench layer write alike: the
 * growing row array, the JSON tree's pieces (docs/JSON.md's conventions:
 * null for a number that is not finite, 17 significant digits, UTF-8
 * strings), the document's head and settings, and the file writer. */
#ifndef FP4_MULTIGPU_MG_REPORT_COMMON_H
#define FP4_MULTIGPU_MG_REPORT_COMMON_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "fp4/status.h"

/* Room for one more row of `size` bytes in *rows (nrows used of *cap). */
fp4_status mg_rows_reserve(void **rows, int *cap, int nrows, size_t size, fp4_err *err);

/* Tree building: *ok drops to 0 at the first failed allocation, after which
 * every put is skipped (item freed); the writer checks *ok once. */
void mg_json_put(int *ok, cJSON *obj, const char *key, cJSON *item);
/* A new object under key; NULL once *ok is 0. */
cJSON *mg_json_object(int *ok, cJSON *obj, const char *key);
/* A finite number with 17 significant digits (reads back the same), else null. */
cJSON *mg_json_num(double v);
/* A string of at most cap bytes, any byte that is not UTF-8 made '?'. */
cJSON *mg_json_text(const char *s, size_t cap);
#define MG_JSON_TEXT(field) mg_json_text((field), sizeof(field))
/* An array of n numbers under key. */
void mg_json_nums(int *ok, cJSON *obj, const char *key, const double *v, int n);
/* "rows": row(ok, rows, i) for i < n, each an object or NULL (failed). */
void mg_json_rows(int *ok, cJSON *root, int n, cJSON *(*row)(int *ok, const void *rows, int i), const void *rows);

/* The head both schemas open with: schema, schema_version 1, fp4bench
 * {version, commit}, started, host, command, unsupported (r: either report). */
void mg_json_head(int *ok, cJSON *root, const char *schema, cJSON *version, cJSON *commit, cJSON *started,
                  cJSON *host, cJSON *command, cJSON *unsupported);
#define MG_JSON_HEAD(ok, root, schema, r)                                                                         \
    mg_json_head((ok), (root), (schema), MG_JSON_TEXT((r)->version), MG_JSON_TEXT((r)->commit),                 \
                 MG_JSON_TEXT((r)->started), MG_JSON_TEXT((r)->host), MG_JSON_TEXT((r)->command),                \
                 MG_JSON_TEXT((r)->unsupported))
/* "settings": {iters, warmup, reps, seed}. */
void mg_json_settings(int *ok, cJSON *root, int iters, int warmup, int reps, uint64_t seed);

/* ncclGetVersion's code (major * 10000 + minor * 100 + patch since 2.9) as "2.28.9". */
void mg_nccl_version_text(int code, char *out, size_t cap);

/* text to stdout ("-"), or to path through fp4_io_write_text (src/io/file.h):
 * a temporary synced and renamed over path, so that a reader never sees half
 * a file; a symlink is followed, a device or FIFO written straight into. */
fp4_status mg_write_text(const char *path, const char *text, fp4_err *err);
/* The document root (NULL: it could not be built) printed, with a final
 * newline, by mg_write_text; root is freed. */
fp4_status mg_write_json(const char *path, cJSON *root, fp4_err *err);

#endif
