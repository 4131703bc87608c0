/* The JSON report (schema in docs/JSON.md), written and read with cJSON.
 *
 * Writing: the whole report is built as a cJSON tree, printed and written
 * through fp4_io_out (src/io/file.h): a temporary file beside path, synced
 * and renamed over it, so a reader always sees a complete document; a
 * symlink is followed and a device or FIFO written straight into. Non-finite doubles are written as null
 * (JSON has no NaN/Inf) and read back as NAN. 64-bit unsigned values (seed,
 * throttle_reasons) are numbers when they are < 2^53 (exact in a double) and
 * decimal strings above; the reader takes both. Strings are written as valid
 * UTF-8: a byte that is not part of a well-formed sequence (a path or host
 * name in another encoding, a message cut mid-character) is written as '?'.
 *
 * Reading: required fields must be present with the right type; optional
 * fields may be absent (they take their zero / NaN / default value) but must
 * have the right type when present. Any violation is FP4_ERR_FORMAT with a
 * message naming the file and the field ("rows[2].time_us.median: expected a
 * number or null"). Numbers must be finite (1e999 is refused, not read as
 * infinity) and integers within +-(2^53 - 1), where a double is exact;
 * strings must be valid UTF-8; the text is at most FP4_JSON_MAX_BYTES. */
#include "fp4/report.h"
#include "fp4/io.h"
#include "io/file.h"
#include "multigpu/pergpu.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FP4_JSON_SCHEMA "fp4bench/1" /* the "schema" of every report */

/* The largest integer n such that every integer up to n is exact in a
 * double: 2^53 - 1. A larger JSON integer may have been rounded by the
 * parser (9007199254740993 reads as 2^53), so it is refused, not guessed. */
#define MAX_EXACT_INT 9007199254740991.0

/* ======================================================================== */
/* writing                                                                  */
/* ======================================================================== */

/* Writer context: ok drops to 0 at the first allocation failure; every helper
 * is then a no-op, and the caller checks ok once at the end. */
typedef struct jw {
    int ok;
} jw;

/* Attach item under key (NULL item or parent: failure). */
static void w_item(jw *w, cJSON *o, const char *key, cJSON *item)
{
    if (!w->ok || !o || !item || !cJSON_AddItemToObject(o, key, item)) {
        cJSON_Delete(item);
        w->ok = 0;
    }
}

/* A JSON item for a double: null when not finite, else a number in the
 * shortest of %.15g / %.16g / %.17g that reads back exactly. (cJSON's own
 * printer accepts a text within an epsilon of the value, which does not round
 * trip bit for bit, so the text is made here and inserted raw.) */
static cJSON *num_item(double v)
{
    char buf[40];
    if (!isfinite(v)) return cJSON_CreateNull();
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        for (char *p = buf; *p; p++)
            if (*p == ',') *p = '.'; /* a locale's decimal comma */
        if (strtod(buf, NULL) == v) break;
    }
    return cJSON_CreateRaw(buf);
}

/* A double; non-finite values become null. */
static void w_num(jw *w, cJSON *o, const char *key, double v)
{
    if (!w->ok) return;
    w_item(w, o, key, num_item(v));
}

/* An unsigned 64-bit integer: a number up to 2^53, a decimal string above. */
static void w_u64(jw *w, cJSON *o, const char *key, unsigned long long v)
{
    char buf[32];
    if (!w->ok) return;
    if (v <= 9007199254740991ull) { /* 2^53 - 1: see MAX_EXACT_INT */
        w_item(w, o, key, num_item((double)v));
        return;
    }
    snprintf(buf, sizeof buf, "%llu", v);
    w_item(w, o, key, cJSON_CreateString(buf));
}

/* A string from a fixed-size char array (bounded even if unterminated). */
static void w_strn(jw *w, cJSON *o, const char *key, const char *s, size_t cap)
{
    char *tmp;
    size_t len;
    if (!w->ok) return;
    len = strnlen(s, cap);
    tmp = malloc(len + 1);
    if (!tmp) {
        w->ok = 0;
        return;
    }
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    fp4_utf8_sanitize(tmp, len); /* JSON text is UTF-8 (RFC 8259): never write other bytes */
    w_item(w, o, key, cJSON_CreateString(tmp));
    free(tmp);
}
#define W_STR(w, o, key, arr) w_strn((w), (o), (key), (arr), sizeof(arr))

static void w_bool(jw *w, cJSON *o, const char *key, int v)
{
    if (!w->ok) return;
    w_item(w, o, key, cJSON_CreateBool(v != 0));
}

/* A new empty object under key; NULL (and ok = 0) on failure. */
static cJSON *w_obj(jw *w, cJSON *o, const char *key)
{
    cJSON *c;
    if (!w->ok) return NULL;
    c = cJSON_CreateObject();
    w_item(w, o, key, c);
    return w->ok ? c : NULL;
}

/* Statistics as an object; null when nullable and nothing was measured. */
static void w_stats(jw *w, cJSON *o, const char *key, const fp4_stats *s, int nullable)
{
    cJSON *t;
    if (!w->ok) return;
    if (nullable && s->count <= 0) {
        w_item(w, o, key, cJSON_CreateNull());
        return;
    }
    t = w_obj(w, o, key);
    w_num(w, t, "count", (double)s->count);
    w_num(w, t, "median", s->median);
    w_num(w, t, "p10", s->p10);
    w_num(w, t, "p90", s->p90);
    w_num(w, t, "min", s->min);
    w_num(w, t, "max", s->max);
    w_num(w, t, "mean", s->mean);
    w_num(w, t, "stdev", s->stdev);
    w_num(w, t, "noise", s->noise);
}

/* The object "device" under parent (the top level, or an entry of gpus). */
static void w_device(jw *w, cJSON *parent, const fp4_device_info *d, const fp4_device_extra *x)
{
    cJSON *o = w_obj(w, parent, "device");
    w_bool(w, o, "present", d->present);
    W_STR(w, o, "why_absent", d->why_absent);
    W_STR(w, o, "name", d->name);
    w_num(w, o, "cc_major", d->cc_major);
    w_num(w, o, "cc_minor", d->cc_minor);
    w_num(w, o, "sms", d->sms);
    w_num(w, o, "l2_bytes", d->l2_bytes);
    w_num(w, o, "mem_bytes", d->mem_bytes);
    w_num(w, o, "driver_version", d->driver_version);
    w_num(w, o, "runtime_version", d->runtime_version);
    w_num(w, o, "sm_clock_max_mhz", d->sm_clock_max_mhz);
    w_num(w, o, "mem_clock_max_mhz", d->mem_clock_max_mhz);
    w_bool(w, o, "nvml", d->nvml);
    W_STR(w, o, "driver_string", d->driver_string);
    w_num(w, o, "cpu_threads", d->cpu_threads);
    w_num(w, o, "peak_bf16_tflops", d->peak_bf16_tflops);
    w_num(w, o, "peak_fp8_tflops", d->peak_fp8_tflops);
    w_num(w, o, "peak_fp4_tflops", d->peak_fp4_tflops);
    w_num(w, o, "peak_bw_gbps", d->peak_bw_gbps);
    w_num(w, o, "index", x->index);
    W_STR(w, o, "pci_bus_id", x->pci_bus_id);
    w_num(w, o, "power_limit_w", x->power_limit_w);
}

/* The object "ceilings" under parent (the top level, or an entry of gpus). */
static void w_ceilings(jw *w, cJSON *parent, const fp4_ceilings *c)
{
    cJSON *o = w_obj(w, parent, "ceilings");
    w_bool(w, o, "measured", c->measured);
    w_num(w, o, "read_gbps", c->read_gbps);
    w_num(w, o, "bf16_tflops", c->bf16_tflops);
    w_num(w, o, "fp8_tflops", c->fp8_tflops);
    w_num(w, o, "bf16_sustained_tflops", c->bf16_sustained_tflops);
    w_num(w, o, "fp8_sustained_tflops", c->fp8_sustained_tflops);
    w_num(w, o, "light_ratio", c->light_ratio);
    w_num(w, o, "cpu_gflops", c->cpu_gflops);
    if (c->l2.measured) {
        cJSON *l = w_obj(w, o, "l2_check");
        w_bool(w, l, "cold", c->l2.cold);
        w_num(w, l, "buffer_bytes", c->l2.buffer_bytes);
        w_num(w, l, "rotation_bytes", c->l2.rotation_bytes);
        w_num(w, l, "hot_gbps", c->l2.hot_gbps);
        w_num(w, l, "rotated_gbps", c->l2.rotated_gbps);
        w_num(w, l, "flushed_gbps", c->l2.flushed_gbps);
    } else {
        w_item(w, o, "l2_check", cJSON_CreateNull());
    }
}

static void w_settings(jw *w, cJSON *root, const fp4_settings *s)
{
    cJSON *o = w_obj(w, root, "settings");
    w_u64(w, o, "seed", (unsigned long long)s->seed);
    w_item(w, o, "data", cJSON_CreateString(fp4_data_kind_name(s->data)));
    w_bool(w, o, "hot", s->hot);
    w_bool(w, o, "use_graphs", s->use_graphs);
    w_bool(w, o, "measure_launch", s->measure_launch);
    w_num(w, o, "warmup_ms", s->warmup_ms);
    w_num(w, o, "min_samples", s->stop.min_samples);
    w_num(w, o, "noise_target", s->stop.noise_target);
    w_num(w, o, "min_time_s", s->stop.min_time_s);
    w_num(w, o, "max_time_s", s->stop.max_time_s);
    if (s->baseline[0]) W_STR(w, o, "baseline", s->baseline);
    else w_item(w, o, "baseline", cJSON_CreateNull());
    w_bool(w, o, "keep_samples", s->keep_samples);
    w_bool(w, o, "measure_ceilings", s->measure_ceilings);
    w_bool(w, o, "verify_only", s->verify_only);
    w_bool(w, o, "time_reference", s->time_reference);
    w_u64(w, o, "order_seed", (unsigned long long)s->order_seed);
    w_bool(w, o, "baseline_tuning", s->baseline_tuning);
    w_num(w, o, "min_batch", s->min_batch);
}

/* The MoE fields of a row of fp4bench moe: the object "moe" and, for a
 * layer, the top-level "steps" array the HTML report reads (docs/JSON.md). */
static void w_moe(jw *w, cJSON *o, const fp4_row_moe *x)
{
    cJSON *m = w_obj(w, o, "moe"), *t;
    W_STR(w, m, "model", x->model);
    w_num(w, m, "tp", x->tp);
    w_num(w, m, "hidden", (double)x->hidden);
    w_num(w, m, "inter", (double)x->inter);
    w_num(w, m, "experts", x->experts);
    w_num(w, m, "top_k", x->top_k);
    W_STR(w, m, "act", x->act);
    W_STR(w, m, "step", x->step);
    W_STR(w, m, "mode", x->mode);
    W_STR(w, m, "routing", x->routing);
    w_num(w, m, "tokens", (double)x->tokens);
    w_num(w, m, "active_experts", x->active_experts);
    t = w_obj(w, m, "tokens_per_expert");
    w_num(w, t, "min", x->tokens_min);
    w_num(w, t, "median", x->tokens_median);
    w_num(w, t, "max", x->tokens_max);
    w_num(w, t, "mean", x->tokens_mean);
    w_num(w, m, "weight_bytes", x->weight_bytes);
    w_num(w, m, "tokens_per_s", x->tokens_per_s > 0 ? x->tokens_per_s : NAN);
    w_num(w, m, "pct_bandwidth", x->pct_bandwidth >= 0 ? x->pct_bandwidth : NAN);
    w_num(w, m, "verify_rows", (double)x->verify_rows);
    w_num(w, m, "verify_rows_total", (double)x->verify_rows_total);
    if (x->nsteps <= 0) return;
    cJSON *a = cJSON_CreateArray();
    w_item(w, o, "steps", a);
    for (int i = 0; w->ok && i < x->nsteps && i < FP4_MOE_ROW_STEPS; i++) {
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(a, e)) {
            cJSON_Delete(e);
            w->ok = 0;
            return;
        }
        W_STR(w, e, "name", x->steps[i].name);
        w_num(w, e, "us", x->steps[i].us);
    }
}

/* One row object appended to the rows array. Samples go in only when
 * keep_samples is set. */
static void w_row(jw *w, cJSON *rows, const fp4_row *x, int keep_samples)
{
    cJSON *o, *t;
    if (!w->ok) return;
    o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(rows, o)) {
        cJSON_Delete(o);
        w->ok = 0;
        return;
    }
    W_STR(w, o, "label", x->label);
    w_num(w, o, "gpu", x->gpu);
    w_num(w, o, "m", (double)x->shape.m);
    w_num(w, o, "n", (double)x->shape.n);
    w_num(w, o, "k", (double)x->shape.k);
    W_STR(w, o, "backend", x->backend);
    W_STR(w, o, "variant", x->variant);
    w_item(w, o, "state", cJSON_CreateString(fp4_row_state_name(x->state)));
    W_STR(w, o, "reason", x->reason);
    w_num(w, o, "verified", x->verified);
    W_STR(w, o, "verify_note", x->verify_note);
    w_num(w, o, "err_max", x->err_max);
    w_num(w, o, "err_norm", x->err_norm);
    W_STR(w, o, "l2", x->l2);
    W_STR(w, o, "timing", x->timing);
    w_num(w, o, "copies", x->copies);
    w_num(w, o, "batch", x->batch);
    w_num(w, o, "rotation_bytes", x->rotation_bytes);
    w_num(w, o, "verified_copies", x->verified_copies);
    if (x->own_err >= 0) w_num(w, o, "own_err", x->own_err);
    else w_item(w, o, "own_err", cJSON_CreateNull());
    w_bool(w, o, "interrupted", x->interrupted);
    w_stats(w, o, "time_us", &x->t, 0);
    w_stats(w, o, "launch_us", &x->t_launch, 1);
    w_bool(w, o, "timed_out", x->timed_out);
    w_num(w, o, "prepare_ms", x->prepare_ms);
    w_num(w, o, "flops", x->flops);
    w_num(w, o, "bytes", x->bytes);
    w_num(w, o, "tflops", x->tflops);
    w_num(w, o, "gbps", x->gbps);
    w_num(w, o, "floor_us", x->floor_us);
    w_num(w, o, "pct_roofline", x->pct_roofline);
    w_num(w, o, "pct_peak", x->pct_peak);
    if (x->has_ratio) {
        t = w_obj(w, o, "ratio");
        w_num(w, t, "value", x->ratio);
        w_num(w, t, "lo", x->ratio_lo);
        w_num(w, t, "hi", x->ratio_hi);
    } else {
        w_item(w, o, "ratio", cJSON_CreateNull());
    }
    if (x->tel.valid) {
        t = w_obj(w, o, "telemetry");
        w_num(w, t, "sm_clock_mhz", x->tel.sm_clock_mhz);
        w_num(w, t, "sm_clock_min_mhz", x->tel.sm_clock_min_mhz);
        w_num(w, t, "mem_clock_mhz", x->tel.mem_clock_mhz);
        w_num(w, t, "power_w", x->tel.power_w);
        w_num(w, t, "temp_c", x->tel.temp_c);
        w_u64(w, t, "throttle_reasons", x->tel.throttle_reasons);
        w_num(w, t, "low_clock_samples", x->tel.low_clock_samples);
        w_num(w, t, "samples", x->tel.samples);
        w_num(w, t, "power_cap_samples", x->tel.power_cap_samples);
        w_num(w, t, "thermal_samples", x->tel.thermal_samples);
        w_num(w, t, "hw_slowdown_samples", x->tel.hw_slowdown_samples);
    } else {
        w_item(w, o, "telemetry", cJSON_CreateNull());
    }
    if (x->moe.present) w_moe(w, o, &x->moe);
    if (keep_samples) {
        cJSON *a = cJSON_CreateArray();
        w_item(w, o, "samples_us", a);
        for (int i = 0; w->ok && x->samples && i < x->nsamples; i++) {
            double v = x->samples[i];
            cJSON *e = num_item(v);
            if (!e || !cJSON_AddItemToArray(a, e)) {
                cJSON_Delete(e);
                w->ok = 0;
            }
        }
    }
}

/* "gpus" of a multi-GPU run: per GPU its device and ceilings objects (as at
 * the top level) and "node", how its rows compare with the other GPUs'
 * (multigpu/pergpu.h; derived from the rows, not read back). */
static void w_gpus(jw *w, cJSON *root, const fp4_report *r)
{
    fp4_gpu_analysis an;
    cJSON *arr;
    if (!w->ok || r->ngpus <= 0) return;
    arr = cJSON_CreateArray();
    w_item(w, root, "gpus", arr);
    if (fp4_gpu_analyze(r, &an, NULL) != FP4_OK) w->ok = 0;
    for (int i = 0; w->ok && i < r->ngpus && i < FP4_MAX_GPUS; i++) {
        const fp4_gpu_summary *s = fp4_gpu_analysis_find(&an, r->gpus[i].x.index);
        cJSON *o = cJSON_CreateObject(), *node;
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            w->ok = 0;
            break;
        }
        w_device(w, o, &r->gpus[i].dev, &r->gpus[i].x);
        w_ceilings(w, o, &r->gpus[i].ceil);
        node = w_obj(w, o, "node");
        if (!s) continue;
        w_num(w, node, "rows", s->rows);
        w_num(w, node, "timed", s->timed);
        w_num(w, node, "compared", s->compared);
        w_num(w, node, "ratio_geomean", s->ratio_geomean);
        w_num(w, node, "slow_rows", s->slow_rows);
        w_num(w, node, "throttled_rows", s->throttled_rows);
        w_num(w, node, "power_cap_samples", s->power_cap_samples);
        w_num(w, node, "thermal_samples", s->thermal_samples);
        w_num(w, node, "hw_slowdown_samples", s->hw_slowdown_samples);
        w_num(w, node, "low_clock_samples", s->low_clock_samples);
        w_num(w, node, "sm_clock_mhz", s->sm_clock_mhz);
        w_num(w, node, "sm_clock_min_mhz", s->sm_clock_min_mhz);
        w_num(w, node, "power_w", s->power_w);
    }
    fp4_gpu_analysis_free(&an);
}

/* The whole document as a tree; NULL when out of memory. */
static cJSON *build_tree(const fp4_report *r)
{
    jw w = {1};
    cJSON *root = cJSON_CreateObject(), *o, *rows;
    if (!root) return NULL;
    w_item(&w, root, "schema", cJSON_CreateString(FP4_JSON_SCHEMA));
    w_num(&w, root, "schema_version", FP4_JSON_SCHEMA_VERSION);
    o = w_obj(&w, root, "fp4bench");
    W_STR(&w, o, "version", r->version);
    W_STR(&w, o, "commit", r->commit);
    W_STR(&w, root, "started", r->started);
    W_STR(&w, root, "host", r->host);
    W_STR(&w, root, "command", r->command);
    w_bool(&w, root, "interrupted", r->interrupted);
    w_device(&w, root, &r->dev, &r->devx);
    w_ceilings(&w, root, &r->ceil);
    w_settings(&w, root, &r->set);
    w_gpus(&w, root, r);
    rows = cJSON_CreateArray();
    w_item(&w, root, "rows", rows);
    for (int i = 0; w.ok && i < r->nrows; i++) w_row(&w, rows, &r->rows[i], r->set.keep_samples);
    if (!w.ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

fp4_status fp4_report_write_json(const char *path, const fp4_report *r, fp4_err *err)
{
    cJSON *root = NULL;
    char *text = NULL;
    fp4_io_out out;
    fp4_status st = FP4_OK;
    if (!path || !path[0] || !r)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_report_write_json: NULL path or report");
    if (r->nrows > 0 && !r->rows)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_report_write_json: rows missing");

    root = build_tree(r);
    text = root ? cJSON_Print(root) : NULL;
    if (!text) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "out of memory writing %s", path);
        goto out;
    }
    st = fp4_io_out_open(&out, path, err);
    if (st != FP4_OK) goto out;
    if (fputs(text, out.f) == EOF || fputc('\n', out.f) == EOF)
        st = fp4_fail(err, FP4_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    st = fp4_io_out_finish(&out, st, err);
out:
    if (text) cJSON_free(text);
    cJSON_Delete(root);
    return st;
}

/* ======================================================================== */
/* reading                                                                  */
/* ======================================================================== */

/* Reader context: the file name for messages and the error to fill. */
typedef struct jr {
    const char *file;
    fp4_err *err;
} jr;

/* FP4_ERR_FORMAT naming file and field: "<file>: <where>.<key>: <what>". */
static fp4_status r_bad(jr *c, const char *where, const char *key, const char *what)
{
    return fp4_fail(c->err, FP4_ERR_FORMAT, "%s: %s%s%s: %s", c->file, where ? where : "",
                    (where && where[0] && key) ? "." : "", key ? key : "", what);
}

static int cmp_key(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* cJSON keeps every member of a name and lookups take the first, so a key
 * given twice (a second "rows") would be read silently: an error, anywhere in
 * the tree. Sorted names per object: O(k log k). */
static fp4_status r_unique_keys(jr *c, const cJSON *node, const char *where)
{
    const char *stack_names[64], **names = stack_names;
    int n = 0;
    fp4_status st = FP4_OK;
    if (!cJSON_IsObject(node) && !cJSON_IsArray(node)) return FP4_OK;
    if (cJSON_IsObject(node)) {
        for (const cJSON *it = node->child; it; it = it->next) n++;
        if (n > (int)(sizeof stack_names / sizeof stack_names[0])) {
            names = malloc((size_t)n * sizeof *names);
            if (!names) return fp4_fail(c->err, FP4_ERR_NOMEM, "%s: no memory to read it", c->file);
        }
        n = 0;
        for (const cJSON *it = node->child; it; it = it->next) names[n++] = it->string ? it->string : "";
        qsort(names, (size_t)n, sizeof *names, cmp_key);
        for (int i = 1; i < n && st == FP4_OK; i++)
            if (strcmp(names[i - 1], names[i]) == 0) st = r_bad(c, where, names[i], "given twice");
        if (names != stack_names) free(names);
    }
    for (const cJSON *it = node->child; it && st == FP4_OK; it = it->next)
        st = r_unique_keys(c, it, cJSON_IsObject(node) && it->string ? it->string : where);
    return st;
}

/* The member key of o, or NULL. A missing required member is an error (*st). */
static const cJSON *r_get(jr *c, const cJSON *o, const char *where, const char *key,
                          int required, fp4_status *st)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    *st = FP4_OK;
    if (!it && required) *st = r_bad(c, where, key, "missing");
    return it;
}

/* A double: number, or null for NaN; absent optional gives NaN. */
static fp4_status r_num(jr *c, const cJSON *o, const char *where, const char *key,
                        int required, double *out)
{
    fp4_status st;
    const cJSON *it = r_get(c, o, where, key, required, &st);
    *out = NAN;
    if (st != FP4_OK || !it || cJSON_IsNull(it)) return st;
    if (!cJSON_IsNumber(it)) return r_bad(c, where, key, "expected a number or null");
    if (!isfinite(it->valuedouble)) return r_bad(c, where, key, "number out of range (not finite)");
    *out = it->valuedouble;
    return FP4_OK;
}

/* An integral number in [lo, hi]; absent optional leaves *out unchanged. */
static fp4_status r_integer(jr *c, const cJSON *o, const char *where, const char *key,
                            int required, double lo, double hi, double *out)
{
    fp4_status st;
    const cJSON *it = r_get(c, o, where, key, required, &st);
    double v;
    if (st != FP4_OK || !it) return st;
    if (!cJSON_IsNumber(it)) return r_bad(c, where, key, "expected an integer");
    v = it->valuedouble;
    if (!isfinite(v) || v != floor(v)) return r_bad(c, where, key, "expected an integer");
    if (fabs(v) > MAX_EXACT_INT)
        return r_bad(c, where, key, "integer beyond 2^53 - 1 (not exact as a JSON number)");
    if (v < lo || v > hi) return r_bad(c, where, key, "integer out of range");
    *out = v;
    return FP4_OK;
}

static fp4_status r_int(jr *c, const cJSON *o, const char *where, const char *key,
                        int required, int *out)
{
    double v = *out;
    fp4_status st = r_integer(c, o, where, key, required, INT_MIN, INT_MAX, &v);
    *out = (int)v;
    return st;
}

static fp4_status r_i64(jr *c, const cJSON *o, const char *where, const char *key,
                        int required, int64_t *out)
{
    double v = (double)*out;
    fp4_status st = r_integer(c, o, where, key, required, -MAX_EXACT_INT, MAX_EXACT_INT, &v);
    *out = (int64_t)v;
    return st;
}

/* An unsigned 64-bit value: a number (integral, 0..2^53) or a decimal string. */
static fp4_status r_u64(jr *c, const cJSON *o, const char *where, const char *key,
                        int required, unsigned long long *out)
{
    fp4_status st;
    const cJSON *it = r_get(c, o, where, key, required, &st);
    if (st != FP4_OK || !it) return st;
    if (cJSON_IsString(it)) {
        const char *s = it->valuestring;
        char *end;
        unsigned long long v;
        if (!s[0] || s[0] < '0' || s[0] > '9')
            return r_bad(c, where, key, "expected an unsigned integer");
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno || *end) return r_bad(c, where, key, "expected an unsigned integer");
        *out = v;
        return FP4_OK;
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) ||
        it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0)
        return r_bad(c, where, key, "expected an unsigned integer");
    if (it->valuedouble > MAX_EXACT_INT)
        return r_bad(c, where, key,
                     "integer beyond 2^53 - 1 (not exact as a JSON number; write it as a decimal string)");
    *out = (unsigned long long)it->valuedouble;
    return FP4_OK;
}

/* A flag: true/false (or a number, nonzero true); absent optional keeps *out. */
static fp4_status r_flag(jr *c, const cJSON *o, const char *where, const char *key,
                         int required, int *out)
{
    fp4_status st;
    const cJSON *it = r_get(c, o, where, key, required, &st);
    if (st != FP4_OK || !it) return st;
    if (cJSON_IsBool(it)) *out = cJSON_IsTrue(it) ? 1 : 0;
    else if (cJSON_IsNumber(it) && isfinite(it->valuedouble)) *out = it->valuedouble != 0.0;
    else return r_bad(c, where, key, "expected true or false");
    return FP4_OK;
}

/* A string into buf[cap]; null (when allowed) and absent optional give "". */
static fp4_status r_str(jr *c, const cJSON *o, const char *where, const char *key,
                        int required, int nullable, char *buf, size_t cap)
{
    fp4_status st;
    const cJSON *it = r_get(c, o, where, key, required, &st);
    size_t len;
    buf[0] = '\0';
    if (st != FP4_OK || !it) return st;
    if (nullable && cJSON_IsNull(it)) return FP4_OK;
    if (!cJSON_IsString(it)) return r_bad(c, where, key, "expected a string");
    len = strlen(it->valuestring);
    if (!fp4_utf8_valid(it->valuestring, len)) return r_bad(c, where, key, "string is not valid UTF-8");
    if (len >= cap) {
        char what[64];
        snprintf(what, sizeof what, "string longer than %zu bytes", cap - 1);
        return r_bad(c, where, key, what);
    }
    memcpy(buf, it->valuestring, len + 1);
    return FP4_OK;
}
#define R_STR(c, o, where, key, req, arr) r_str((c), (o), (where), (key), (req), 0, (arr), sizeof(arr))

/* An object member (NULL *out when absent, or null and nullable). */
static fp4_status r_obj(jr *c, const cJSON *o, const char *where, const char *key,
                        int required, int nullable, const cJSON **out)
{
    fp4_status st;
    const cJSON *it = r_get(c, o, where, key, required, &st);
    *out = NULL;
    if (st != FP4_OK || !it) return st;
    if (nullable && cJSON_IsNull(it)) return FP4_OK;
    if (!cJSON_IsObject(it)) return r_bad(c, where, key, nullable ? "expected an object or null"
                                                                  : "expected an object");
    *out = it;
    return FP4_OK;
}

/* Run a reader step; on failure jump to the function's out label. */
#define TRY(expr)                                                                \
    do {                                                                         \
        st = (expr);                                                             \
        if (st != FP4_OK) goto out;                                              \
    } while (0)

/* Statistics object o (at path where): count required, the rest optional. */
static fp4_status r_stats(jr *c, const cJSON *o, const char *where, fp4_stats *s)
{
    fp4_status st;
    s->count = 0;
    TRY(r_int(c, o, where, "count", 1, &s->count));
    if (s->count < 0) return r_bad(c, where, "count", "negative");
    TRY(r_num(c, o, where, "median", 0, &s->median));
    TRY(r_num(c, o, where, "p10", 0, &s->p10));
    TRY(r_num(c, o, where, "p90", 0, &s->p90));
    TRY(r_num(c, o, where, "min", 0, &s->min));
    TRY(r_num(c, o, where, "max", 0, &s->max));
    TRY(r_num(c, o, where, "mean", 0, &s->mean));
    TRY(r_num(c, o, where, "stdev", 0, &s->stdev));
    TRY(r_num(c, o, where, "noise", 0, &s->noise));
    /* a relative CI half-width: >= 0; above 1 is possible (one far outlier among few samples) */
    if (s->noise < 0) return r_bad(c, where, "noise", "negative (a relative width is >= 0)");
    /* order statistics of times: none negative, min <= p10 <= median <= p90 <= max among
     * those given (null, or 0 from a writer that filled only some) */
    if (s->count > 0) {
        const char *names[] = {"min", "p10", "median", "p90", "max"};
        const double v[] = {s->min, s->p10, s->median, s->p90, s->max};
        double prev = 0.0;
        const char *prev_name = NULL;
        for (int i = 0; i < 5; i++) {
            if (i == 2 && v[i] <= 0) /* the median of samples */
                return r_bad(c, where, names[i], "expected a positive time (the row has samples) or null");
            if (v[i] < 0) return r_bad(c, where, names[i], "negative (a time is >= 0)");
            if (isnan(v[i]) || v[i] == 0) continue;
            if (prev_name && v[i] < prev * (1 - 1e-12)) {
                char what[64];
                snprintf(what, sizeof what, "below %s: not statistics of one sample set", prev_name);
                return r_bad(c, where, names[i], what);
            }
            prev = v[i];
            prev_name = names[i];
        }
    }
out:
    return st;
}

/* A stats object with every value NaN and count 0 (nothing measured). */
static void empty_stats(fp4_stats *s)
{
    s->count = 0;
    s->median = s->p10 = s->p90 = s->min = s->max = s->mean = s->stdev = s->noise = NAN;
}

/* The object "device" under parent, whose path is at ("" at the top). */
static fp4_status r_device(jr *c, const cJSON *parent, const char *at, fp4_device_info *d,
                           fp4_device_extra *x)
{
    const cJSON *o;
    char w[48];
    fp4_status st;
    snprintf(w, sizeof w, "%s%sdevice", at, at[0] ? "." : "");
    TRY(r_obj(c, parent, at, "device", 0, 0, &o));
    if (!o) return FP4_OK;
    TRY(r_flag(c, o, w, "present", 0, &d->present));
    TRY(R_STR(c, o, w, "why_absent", 0, d->why_absent));
    TRY(R_STR(c, o, w, "name", 0, d->name));
    TRY(r_int(c, o, w, "cc_major", 0, &d->cc_major));
    TRY(r_int(c, o, w, "cc_minor", 0, &d->cc_minor));
    TRY(r_int(c, o, w, "sms", 0, &d->sms));
    TRY(r_num(c, o, w, "l2_bytes", 0, &d->l2_bytes));
    TRY(r_num(c, o, w, "mem_bytes", 0, &d->mem_bytes));
    TRY(r_int(c, o, w, "driver_version", 0, &d->driver_version));
    TRY(r_int(c, o, w, "runtime_version", 0, &d->runtime_version));
    TRY(r_num(c, o, w, "sm_clock_max_mhz", 0, &d->sm_clock_max_mhz));
    TRY(r_num(c, o, w, "mem_clock_max_mhz", 0, &d->mem_clock_max_mhz));
    TRY(r_flag(c, o, w, "nvml", 0, &d->nvml));
    TRY(R_STR(c, o, w, "driver_string", 0, d->driver_string));
    TRY(r_int(c, o, w, "cpu_threads", 0, &d->cpu_threads));
    TRY(r_num(c, o, w, "peak_bf16_tflops", 0, &d->peak_bf16_tflops));
    TRY(r_num(c, o, w, "peak_fp8_tflops", 0, &d->peak_fp8_tflops));
    TRY(r_num(c, o, w, "peak_fp4_tflops", 0, &d->peak_fp4_tflops));
    TRY(r_num(c, o, w, "peak_bw_gbps", 0, &d->peak_bw_gbps));
    /* absent in files from before multi-GPU runs: device 0, unknown limit */
    TRY(r_int(c, o, w, "index", 0, &x->index));
    if (x->index < 0) return r_bad(c, w, "index", "negative");
    TRY(R_STR(c, o, w, "pci_bus_id", 0, x->pci_bus_id));
    TRY(r_num(c, o, w, "power_limit_w", 0, &x->power_limit_w));
    if (isnan(x->power_limit_w)) x->power_limit_w = 0;
out:
    return st;
}

/* The object "ceilings" under parent, whose path is at ("" at the top). */
static fp4_status r_ceilings(jr *c, const cJSON *parent, const char *at, fp4_ceilings *ce)
{
    const cJSON *o;
    char w[48], wl[64];
    fp4_status st;
    snprintf(w, sizeof w, "%s%sceilings", at, at[0] ? "." : "");
    snprintf(wl, sizeof wl, "%s.l2_check", w);
    TRY(r_obj(c, parent, at, "ceilings", 0, 0, &o));
    if (!o) return FP4_OK;
    TRY(r_flag(c, o, w, "measured", 0, &ce->measured));
    TRY(r_num(c, o, w, "read_gbps", 0, &ce->read_gbps));
    TRY(r_num(c, o, w, "bf16_tflops", 0, &ce->bf16_tflops));
    TRY(r_num(c, o, w, "fp8_tflops", 0, &ce->fp8_tflops));
    /* absent (NaN) in files from before: their rates were measured back to back */
    TRY(r_num(c, o, w, "bf16_sustained_tflops", 0, &ce->bf16_sustained_tflops));
    TRY(r_num(c, o, w, "fp8_sustained_tflops", 0, &ce->fp8_sustained_tflops));
    TRY(r_num(c, o, w, "light_ratio", 0, &ce->light_ratio));
    TRY(r_num(c, o, w, "cpu_gflops", 0, &ce->cpu_gflops));
    {
        const cJSON *l;
        TRY(r_obj(c, o, w, "l2_check", 0, 1, &l));
        if (l) {
            ce->l2.measured = 1;
            TRY(r_flag(c, l, wl, "cold", 0, &ce->l2.cold));
            TRY(r_num(c, l, wl, "buffer_bytes", 0, &ce->l2.buffer_bytes));
            TRY(r_num(c, l, wl, "rotation_bytes", 0, &ce->l2.rotation_bytes));
            TRY(r_num(c, l, wl, "hot_gbps", 0, &ce->l2.hot_gbps));
            TRY(r_num(c, l, wl, "rotated_gbps", 0, &ce->l2.rotated_gbps));
            TRY(r_num(c, l, wl, "flushed_gbps", 0, &ce->l2.flushed_gbps));
        }
    }
out:
    return st;
}

/* "gpus" (optional): at most FP4_MAX_GPUS entries, each with the device and
 * ceilings objects of the top level; "node" is derived and not read. */
static fp4_status r_gpus(jr *c, const cJSON *root, fp4_report *r)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "gpus"), *e;
    fp4_status st = FP4_OK;
    int i = 0;
    if (!arr || cJSON_IsNull(arr)) return FP4_OK;
    if (!cJSON_IsArray(arr)) return r_bad(c, "", "gpus", "expected an array or null");
    if (cJSON_GetArraySize(arr) > FP4_MAX_GPUS) {
        char what[48];
        snprintf(what, sizeof what, "more than %d GPUs", FP4_MAX_GPUS);
        return r_bad(c, "", "gpus", what);
    }
    cJSON_ArrayForEach(e, arr) {
        char at[24];
        snprintf(at, sizeof at, "gpus[%d]", i);
        if (!cJSON_IsObject(e)) return r_bad(c, "", at, "expected an object");
        TRY(r_device(c, e, at, &r->gpus[i].dev, &r->gpus[i].x));
        TRY(r_ceilings(c, e, at, &r->gpus[i].ceil));
        r->ngpus = ++i;
    }
out:
    return st;
}

/* Settings start from fp4_settings_default; present members override. */
static fp4_status r_settings(jr *c, const cJSON *root, fp4_settings *s)
{
    const cJSON *o;
    const char *w = "settings";
    char data[32];
    unsigned long long seed;
    fp4_status st;
    fp4_settings_default(s);
    TRY(r_obj(c, root, "", "settings", 0, 0, &o));
    if (!o) return FP4_OK;
    seed = s->seed;
    TRY(r_u64(c, o, w, "seed", 0, &seed));
    s->seed = (uint64_t)seed;
    TRY(R_STR(c, o, w, "data", 0, data));
    if (data[0] && fp4_data_kind_parse(data, &s->data) != 0)
        return r_bad(c, w, "data", "unknown data kind");
    TRY(r_flag(c, o, w, "hot", 0, &s->hot));
    TRY(r_flag(c, o, w, "use_graphs", 0, &s->use_graphs));
    TRY(r_flag(c, o, w, "measure_launch", 0, &s->measure_launch));
    TRY(r_num(c, o, w, "warmup_ms", 0, &s->warmup_ms));
    TRY(r_int(c, o, w, "min_samples", 0, &s->stop.min_samples));
    TRY(r_num(c, o, w, "noise_target", 0, &s->stop.noise_target));
    TRY(r_num(c, o, w, "min_time_s", 0, &s->stop.min_time_s));
    TRY(r_num(c, o, w, "max_time_s", 0, &s->stop.max_time_s));
    TRY(r_str(c, o, w, "baseline", 0, 1, s->baseline, sizeof s->baseline));
    TRY(r_flag(c, o, w, "keep_samples", 0, &s->keep_samples));
    TRY(r_flag(c, o, w, "measure_ceilings", 0, &s->measure_ceilings));
    TRY(r_flag(c, o, w, "verify_only", 0, &s->verify_only));
    TRY(r_flag(c, o, w, "time_reference", 0, &s->time_reference));
    seed = 0;
    TRY(r_u64(c, o, w, "order_seed", 0, &seed));
    s->order_seed = (uint64_t)seed;
    TRY(r_flag(c, o, w, "baseline_tuning", 0, &s->baseline_tuning));
    TRY(r_int(c, o, w, "min_batch", 0, &s->min_batch));
out:
    return st;
}

/* The optional MoE fields of row o (at path w): the object "moe" and, with
 * it, the "steps" array (at most FP4_MOE_ROW_STEPS entries). */
static fp4_status r_moe(jr *c, const cJSON *o, const char *w, fp4_row_moe *x)
{
    char sub[96];
    const cJSON *m, *t, *a, *e;
    fp4_status st;
    double v;
    TRY(r_obj(c, o, w, "moe", 0, 1, &m));
    if (!m) return FP4_OK;
    snprintf(sub, sizeof sub, "%s.moe", w);
    x->present = 1;
    TRY(R_STR(c, m, sub, "model", 0, x->model));
    TRY(r_int(c, m, sub, "tp", 0, &x->tp));
    TRY(r_i64(c, m, sub, "hidden", 0, &x->hidden));
    TRY(r_i64(c, m, sub, "inter", 0, &x->inter));
    TRY(r_int(c, m, sub, "experts", 0, &x->experts));
    TRY(r_int(c, m, sub, "top_k", 0, &x->top_k));
    TRY(R_STR(c, m, sub, "act", 0, x->act));
    TRY(R_STR(c, m, sub, "step", 0, x->step));
    TRY(R_STR(c, m, sub, "mode", 0, x->mode));
    TRY(R_STR(c, m, sub, "routing", 0, x->routing));
    TRY(r_i64(c, m, sub, "tokens", 0, &x->tokens));
    TRY(r_int(c, m, sub, "active_experts", 0, &x->active_experts));
    TRY(r_obj(c, m, sub, "tokens_per_expert", 0, 1, &t));
    if (t) {
        char tsub[sizeof sub + 24];
        snprintf(tsub, sizeof tsub, "%s.tokens_per_expert", sub);
        TRY(r_int(c, t, tsub, "min", 0, &x->tokens_min));
        TRY(r_num(c, t, tsub, "median", 0, &x->tokens_median));
        TRY(r_int(c, t, tsub, "max", 0, &x->tokens_max));
        TRY(r_num(c, t, tsub, "mean", 0, &x->tokens_mean));
    }
    TRY(r_num(c, m, sub, "weight_bytes", 0, &x->weight_bytes));
    TRY(r_num(c, m, sub, "tokens_per_s", 0, &x->tokens_per_s));
    TRY(r_num(c, m, sub, "pct_bandwidth", 0, &v));
    x->pct_bandwidth = isnan(v) ? -1 : v;
    TRY(r_i64(c, m, sub, "verify_rows", 0, &x->verify_rows));
    TRY(r_i64(c, m, sub, "verify_rows_total", 0, &x->verify_rows_total));
    a = cJSON_GetObjectItemCaseSensitive(o, "steps");
    if (!a || cJSON_IsNull(a)) return FP4_OK;
    if (!cJSON_IsArray(a)) return r_bad(c, w, "steps", "expected an array or null");
    if (cJSON_GetArraySize(a) > FP4_MOE_ROW_STEPS) return r_bad(c, w, "steps", "more than 16 steps");
    cJSON_ArrayForEach(e, a) {
        fp4_moe_step_time *s = &x->steps[x->nsteps];
        snprintf(sub, sizeof sub, "%s.steps[%d]", w, x->nsteps);
        if (!cJSON_IsObject(e)) return r_bad(c, sub, NULL, "expected an object");
        TRY(R_STR(c, e, sub, "name", 1, s->name));
        TRY(r_num(c, e, sub, "us", 1, &s->us));
        x->nsteps++;
    }
out:
    return st;
}

/* The values of a row's l2 and timing (src/bench/engine.c, moe_engine.c and
 * python/fp4bench): "" where nothing was recorded (a row never timed). */
static const char *const L2_MODES[] = {"", "cold", "hot", "warm", "n/a", NULL};
static const char *const TIMING_MODES[] = {"", "graph", "graph-nogate", "launch", "host", NULL};

static int one_of(const char *s, const char *const *set)
{
    for (; *set; set++)
        if (strcmp(s, *set) == 0) return 1;
    return 0;
}

/* A row's shape as fp4_shape_check requires of every case a run can have
 * (MoE rows too: their K is the hidden or intermediate size, a multiple of
 * 16). */
static fp4_status r_shape(jr *c, const char *w, const fp4_shape *sh)
{
    if (sh->m < 1) return r_bad(c, w, "m", "expected a positive integer");
    if (sh->n < 1) return r_bad(c, w, "n", "expected a positive integer");
    if (sh->k < 1) return r_bad(c, w, "k", "expected a positive integer");
    if (sh->k % FP4_BLOCK != 0) return r_bad(c, w, "k", "not a multiple of 16 (the NVFP4 block)");
    /* fp4_shape_check's limits (the reader stands alone: the fuzzer links it without the backends) */
    if (sh->k > (1 << 20)) return r_bad(c, w, "k", "above 2^20 (no run measures such a K)");
    if ((uint64_t)sh->m > (UINT64_C(1) << 61) / (uint64_t)sh->n)
        return r_bad(c, w, "m, n", "the output's size overflows");
    return FP4_OK;
}

/* Row o (the index-th) into x; x->samples is allocated when samples_us is
 * present (the caller frees it on failure). */
static fp4_status r_row(jr *c, const cJSON *o, int index, fp4_row *x)
{
    char w[48], sub[64], state[16];
    const cJSON *t, *a;
    fp4_status st;
    int n;
    snprintf(w, sizeof w, "rows[%d]", index);
    memset(x, 0, sizeof *x);
    if (!cJSON_IsObject(o)) return r_bad(c, w, NULL, "expected an object");
    TRY(R_STR(c, o, w, "label", 1, x->label));
    TRY(r_int(c, o, w, "gpu", 0, &x->gpu)); /* absent in older files: GPU 0 */
    if (x->gpu < 0) return r_bad(c, w, "gpu", "negative");
    TRY(r_i64(c, o, w, "m", 1, &x->shape.m));
    TRY(r_i64(c, o, w, "n", 1, &x->shape.n));
    TRY(r_i64(c, o, w, "k", 1, &x->shape.k));
    TRY(r_shape(c, w, &x->shape));
    TRY(R_STR(c, o, w, "backend", 1, x->backend));
    TRY(R_STR(c, o, w, "variant", 0, x->variant));
    TRY(R_STR(c, o, w, "state", 1, state));
    if (strcmp(state, fp4_row_state_name(FP4_ROW_OK)) == 0) x->state = FP4_ROW_OK;
    else if (strcmp(state, fp4_row_state_name(FP4_ROW_UNSUPPORTED)) == 0)
        x->state = FP4_ROW_UNSUPPORTED;
    else if (strcmp(state, fp4_row_state_name(FP4_ROW_FAILED)) == 0) x->state = FP4_ROW_FAILED;
    else return r_bad(c, w, "state", "expected \"ok\", \"unsupported\" or \"FAILED\"");
    TRY(R_STR(c, o, w, "reason", 0, x->reason));
    TRY(r_int(c, o, w, "verified", 0, &x->verified));
    if (x->verified < -1 || x->verified > 1) return r_bad(c, w, "verified", "expected -1, 0 or 1");
    TRY(R_STR(c, o, w, "verify_note", 0, x->verify_note));
    TRY(r_num(c, o, w, "err_max", 0, &x->err_max));
    TRY(r_num(c, o, w, "err_norm", 0, &x->err_norm));
    TRY(R_STR(c, o, w, "l2", 1, x->l2));
    if (!one_of(x->l2, L2_MODES))
        return r_bad(c, w, "l2", "expected \"cold\", \"hot\", \"warm\" or \"n/a\"");
    TRY(R_STR(c, o, w, "timing", 0, x->timing));
    if (!one_of(x->timing, TIMING_MODES))
        return r_bad(c, w, "timing", "expected \"graph\", \"graph-nogate\", \"launch\" or \"host\"");
    TRY(r_int(c, o, w, "copies", 0, &x->copies));
    TRY(r_int(c, o, w, "batch", 0, &x->batch));
    TRY(r_num(c, o, w, "rotation_bytes", 0, &x->rotation_bytes));
    TRY(r_int(c, o, w, "verified_copies", 0, &x->verified_copies));
    x->own_err = -1;
    TRY(r_num(c, o, w, "own_err", 0, &x->own_err)); /* null: n/a */
    if (isnan(x->own_err)) x->own_err = -1;
    TRY(r_flag(c, o, w, "interrupted", 0, &x->interrupted));

    TRY(r_obj(c, o, w, "time_us", 1, 0, &t));
    snprintf(sub, sizeof sub, "%s.time_us", w);
    /* untimed rows (unsupported, FAILED before timing, --verify-only) have count 0 and a
     * median of 0 or null; a timed row's median is positive or null (r_stats) */
    TRY(r_stats(c, t, sub, &x->t));
    empty_stats(&x->t_launch);
    TRY(r_obj(c, o, w, "launch_us", 0, 1, &t));
    snprintf(sub, sizeof sub, "%s.launch_us", w);
    if (t) TRY(r_stats(c, t, sub, &x->t_launch));

    TRY(r_flag(c, o, w, "timed_out", 0, &x->timed_out));
    TRY(r_num(c, o, w, "prepare_ms", 0, &x->prepare_ms));
    TRY(r_num(c, o, w, "flops", 0, &x->flops));
    TRY(r_num(c, o, w, "bytes", 0, &x->bytes));
    TRY(r_num(c, o, w, "tflops", 0, &x->tflops));
    TRY(r_num(c, o, w, "gbps", 0, &x->gbps));
    TRY(r_num(c, o, w, "floor_us", 0, &x->floor_us));
    TRY(r_num(c, o, w, "pct_roofline", 0, &x->pct_roofline));
    TRY(r_num(c, o, w, "pct_peak", 0, &x->pct_peak));

    x->ratio = x->ratio_lo = x->ratio_hi = NAN;
    TRY(r_obj(c, o, w, "ratio", 0, 1, &t));
    snprintf(sub, sizeof sub, "%s.ratio", w);
    if (t) {
        x->has_ratio = 1;
        TRY(r_num(c, t, sub, "value", 1, &x->ratio));
        TRY(r_num(c, t, sub, "lo", 0, &x->ratio_lo));
        TRY(r_num(c, t, sub, "hi", 0, &x->ratio_hi));
        /* a ratio of two times and its interval: positive, lo <= hi (where given) */
        if (x->ratio <= 0) return r_bad(c, sub, "value", "expected a positive ratio or null");
        if (x->ratio_lo <= 0) return r_bad(c, sub, "lo", "expected a positive ratio or null");
        if (x->ratio_lo > x->ratio_hi) return r_bad(c, sub, "hi", "below lo");
    }

    TRY(r_obj(c, o, w, "telemetry", 0, 1, &t));
    snprintf(sub, sizeof sub, "%s.telemetry", w);
    if (t) {
        x->tel.valid = 1;
        TRY(r_num(c, t, sub, "sm_clock_mhz", 0, &x->tel.sm_clock_mhz));
        TRY(r_num(c, t, sub, "sm_clock_min_mhz", 0, &x->tel.sm_clock_min_mhz));
        TRY(r_num(c, t, sub, "mem_clock_mhz", 0, &x->tel.mem_clock_mhz));
        TRY(r_num(c, t, sub, "power_w", 0, &x->tel.power_w));
        TRY(r_num(c, t, sub, "temp_c", 0, &x->tel.temp_c));
        TRY(r_u64(c, t, sub, "throttle_reasons", 0, &x->tel.throttle_reasons));
        TRY(r_int(c, t, sub, "low_clock_samples", 0, &x->tel.low_clock_samples));
        TRY(r_int(c, t, sub, "samples", 0, &x->tel.samples));
        TRY(r_int(c, t, sub, "power_cap_samples", 0, &x->tel.power_cap_samples));
        TRY(r_int(c, t, sub, "thermal_samples", 0, &x->tel.thermal_samples));
        TRY(r_int(c, t, sub, "hw_slowdown_samples", 0, &x->tel.hw_slowdown_samples));
    }

    TRY(r_moe(c, o, w, &x->moe));

    a = cJSON_GetObjectItemCaseSensitive(o, "samples_us");
    if (a && !cJSON_IsNull(a)) {
        const cJSON *e;
        if (!cJSON_IsArray(a)) return r_bad(c, w, "samples_us", "expected an array");
        n = cJSON_GetArraySize(a);
        if (n > 0) {
            x->samples = malloc((size_t)n * sizeof *x->samples);
            if (!x->samples)
                return fp4_fail(c->err, FP4_ERR_NOMEM, "%s: out of memory for %d samples",
                                c->file, n);
        }
        n = 0;
        cJSON_ArrayForEach(e, a) {
            if (cJSON_IsNull(e)) x->samples[n] = NAN;
            else if (cJSON_IsNumber(e) && isfinite(e->valuedouble) && e->valuedouble > 0) x->samples[n] = e->valuedouble;
            else {
                snprintf(sub, sizeof sub, "samples_us[%d]", n);
                return r_bad(c, w, sub, "expected a positive time or null");
            }
            n++;
        }
        x->nsamples = n;
    }
out:
    return st;
}

/* The whole file into a NUL-terminated buffer (*len excludes the NUL). A
 * regular file larger than FP4_JSON_MAX_BYTES is refused before anything is
 * read; anything else (a pipe) is refused once that many bytes have come. */
static fp4_status slurp(const char *path, char **buf, size_t *len, fp4_err *err)
{
    FILE *f = fopen(path, "rb");
    char *b = NULL, *nb;
    size_t n = 0, cap = 0, got;
    struct stat sb;
    fp4_status st = FP4_OK;
    *buf = NULL;
    *len = 0;
    if (!f) return fp4_fail(err, FP4_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    if (fstat(fileno(f), &sb) != 0) {
        st = fp4_fail(err, FP4_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
        goto out;
    }
    if (S_ISREG(sb.st_mode) && (unsigned long long)sb.st_size > FP4_JSON_MAX_BYTES) {
        st = fp4_fail(err, FP4_ERR_FORMAT, "%s: %lld bytes, more than the %llu bytes (%d MiB) a report may have",
                      path, (long long)sb.st_size, (unsigned long long)FP4_JSON_MAX_BYTES,
                      (int)(FP4_JSON_MAX_BYTES >> 20));
        goto out;
    }
    for (;;) {
        if (cap - n < 4096) {
            size_t ncap = cap ? 2 * cap : 65536;
            if (ncap > FP4_JSON_MAX_BYTES + 1) ncap = FP4_JSON_MAX_BYTES + 1;
            nb = ncap > cap ? realloc(b, ncap + 1) : NULL;
            if (!nb && ncap > cap) {
                st = fp4_fail(err, FP4_ERR_NOMEM, "out of memory reading %s", path);
                goto out;
            }
            if (nb) {
                b = nb;
                cap = ncap;
            }
        }
        got = fread(b + n, 1, cap - n, f);
        n += got;
        if (n > FP4_JSON_MAX_BYTES) {
            st = fp4_fail(err, FP4_ERR_FORMAT, "%s: more than the %llu bytes (%d MiB) a report may have",
                          path, (unsigned long long)FP4_JSON_MAX_BYTES, (int)(FP4_JSON_MAX_BYTES >> 20));
            goto out;
        }
        if (got == 0) break;
    }
    if (ferror(f)) {
        st = fp4_fail(err, FP4_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        goto out;
    }
    b[n] = '\0';
out:
    fclose(f);
    if (st != FP4_OK) {
        free(b);
        return st;
    }
    *buf = b;
    *len = n;
    return FP4_OK;
}

/* Only white space may follow the document (cJSON is not asked to check:
 * it would need the text NUL-terminated, and a buffer may not be). */
static fp4_status check_trailing(jr *c, const char *end, const char *buf, size_t len)
{
    for (const char *p = end; p && p < buf + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return fp4_fail(c->err, FP4_ERR_FORMAT, "%s: not valid JSON (text after the document at byte %zu of %zu)",
                            c->file, (size_t)(p - buf), len);
    return FP4_OK;
}

/* "schema" names the document: without "fp4bench/1" it is some other JSON
 * (the layer and nccl reports have schemas of their own). */
static fp4_status r_schema(jr *c, const cJSON *root)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "schema");
    char what[96];
    if (!it) return r_bad(c, "", "schema", "missing: not an fp4bench report");
    if (!cJSON_IsString(it)) return r_bad(c, "", "schema", "expected a string: not an fp4bench report");
    if (strcmp(it->valuestring, FP4_JSON_SCHEMA) == 0) return FP4_OK;
    snprintf(what, sizeof what, "\"%.40s\"%s, expected \"%s\": not an fp4bench report",
             fp4_utf8_valid(it->valuestring, strlen(it->valuestring)) ? it->valuestring : "?",
             strlen(it->valuestring) > 40 ? "..." : "", FP4_JSON_SCHEMA);
    return r_bad(c, "", "schema", what);
}

/* key, which every writer of reports puts at the top level: without it the
 * defaults the reader would fill in (no GPU, default settings) would be
 * taken for facts. */
static fp4_status r_written_always(jr *c, const cJSON *root, const char *key)
{
    if (cJSON_GetObjectItemCaseSensitive(root, key)) return FP4_OK;
    return r_bad(c, "", key, "missing: not an fp4bench report");
}

/* A \u0000 escape in any string of the (well-formed) text buf[0..len): cJSON
 * would end the string there and the rest of a label would silently vanish. */
static fp4_status check_no_nul_escape(jr *c, const char *buf, size_t len)
{
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        if (buf[i] == '"') {
            in_string = !in_string;
        } else if (in_string && buf[i] == '\\' && i + 1 < len) {
            if (buf[i + 1] == 'u' && i + 5 < len && memcmp(buf + i + 2, "0000", 4) == 0)
                return fp4_fail(c->err, FP4_ERR_FORMAT,
                                "%s: a string holds \\u0000 (a NUL character) at byte %zu: no report field may",
                                c->file, i);
            i++; /* the escaped character: \" does not end the string */
        }
    }
    return FP4_OK;
}

/* Parse the report text buf[0..len) (see fp4_report_parse_json). */
static fp4_status parse_report(const char *buf, size_t len, const char *path, fp4_report *r,
                               fp4_err *err)
{
    jr c;
    cJSON *root = NULL;
    const cJSON *rows, *e, *o;
    const char *end = NULL;
    int version = 0, index = 0;
    fp4_status st;
    fp4_row row;

    memset(r, 0, sizeof *r);
    memset(&row, 0, sizeof row);
    c.file = path;
    c.err = err;
    if (len > FP4_JSON_MAX_BYTES)
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: %zu bytes, more than the %llu bytes (%d MiB) a report may have",
                        path, len, (unsigned long long)FP4_JSON_MAX_BYTES, (int)(FP4_JSON_MAX_BYTES >> 20));
    if (memchr(buf, '\0', len)) /* cJSON would stop there and call the rest garbage */
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: a NUL byte (not a JSON text)", path);

    root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!root) {
        size_t at = (end && end >= buf && end <= buf + len) ? (size_t)(end - buf) : len;
        st = fp4_fail(err, FP4_ERR_FORMAT, "%s: not valid JSON (%s at byte %zu of %zu)", path,
                      at >= len ? "ends early" : "syntax error", at, len);
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        st = r_bad(&c, "", "(top level)", "expected an object");
        goto out;
    }
    TRY(r_unique_keys(&c, root, ""));
    TRY(r_schema(&c, root));
    TRY(r_int(&c, root, "", "schema_version", 1, &version));
    if (version != FP4_JSON_SCHEMA_VERSION) {
        char what[96];
        snprintf(what, sizeof what, "unsupported version %d (this build reads %d)", version,
                 FP4_JSON_SCHEMA_VERSION);
        st = r_bad(&c, "", "schema_version", what);
        goto out;
    }
    TRY(r_obj(&c, root, "", "fp4bench", 0, 0, &o));
    if (o) {
        TRY(R_STR(&c, o, "fp4bench", "version", 0, r->version));
        TRY(R_STR(&c, o, "fp4bench", "commit", 0, r->commit));
    }
    TRY(R_STR(&c, root, "", "started", 0, r->started));
    TRY(R_STR(&c, root, "", "host", 0, r->host));
    TRY(R_STR(&c, root, "", "command", 0, r->command));
    TRY(r_flag(&c, root, "", "interrupted", 0, &r->interrupted));
    TRY(r_written_always(&c, root, "device"));
    TRY(r_written_always(&c, root, "settings"));
    TRY(r_device(&c, root, "", &r->dev, &r->devx));
    TRY(r_ceilings(&c, root, "", &r->ceil));
    TRY(r_gpus(&c, root, r));
    TRY(r_settings(&c, root, &r->set));

    rows = cJSON_GetObjectItemCaseSensitive(root, "rows");
    if (!rows) {
        st = r_bad(&c, "", "rows", "missing");
        goto out;
    }
    if (!cJSON_IsArray(rows)) {
        st = r_bad(&c, "", "rows", "expected an array");
        goto out;
    }
    cJSON_ArrayForEach(e, rows) {
        st = r_row(&c, e, index++, &row);
        if (st != FP4_OK) {
            free(row.samples);
            goto out;
        }
        TRY(fp4_report_add(r, &row, err)); /* takes row.samples in every case */
        row.samples = NULL;
    }
    if (st == FP4_OK) st = check_trailing(&c, end, buf, len);
    if (st == FP4_OK) st = check_no_nul_escape(&c, buf, len);
out:
    if (st != FP4_OK) fp4_report_free(r);
    cJSON_Delete(root);
    return st;
}

fp4_status fp4_report_parse_json(const char *text, size_t len, const char *name, fp4_report *r,
                                 fp4_err *err)
{
    if (!r || (!text && len))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_report_parse_json: NULL argument");
    return parse_report(text ? text : "", len, name ? name : "(memory)", r, err);
}

/* Read a report written by fp4_report_write_json (schema_version 1). r is
 * overwritten (not freed first: pass a zeroed or freed report). On failure r
 * holds no rows and fp4_report_free(r) stays safe. */
fp4_status fp4_report_read_json(const char *path, fp4_report *r, fp4_err *err)
{
    char *buf = NULL;
    size_t len = 0;
    fp4_status st;
    if (!path || !r) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_report_read_json: NULL argument");
    memset(r, 0, sizeof *r);
    st = slurp(path, &buf, &len, err);
    if (st == FP4_OK) st = parse_report(buf, len, path, r, err);
    free(buf);
    return st;
}
