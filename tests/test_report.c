/* Reports: JSON round trip (every field, NaN -> null -> NaN), malformed JSON,
 * CSV quoting, compare verdicts and regression counts, and the table's
 * reasons for unsupported / FAILED rows. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fp4/engine.h"
#include "fp4/io.h"
#include "fp4/report.h"

static char tmpdir[64];

/* A path inside the test's temporary directory. */
static void tmp_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", tmpdir, name);
}

/* Everything written to f so far, as a NUL-terminated malloc'ed string. */
static char *slurp_file(FILE *f)
{
    long n;
    char *b;
    fflush(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    b = calloc((size_t)n + 1, 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) b[0] = '\0';
    return b;
}

/* Whether the temporary directory holds a temporary of name (".name.XXXXXX"). */
static int has_temporary(const char *name)
{
    DIR *d = opendir(tmpdir);
    const struct dirent *e;
    size_t len = strlen(name);
    int found = 0;
    if (!d) return 1;
    while ((e = readdir(d)))
        if (e->d_name[0] == '.' && strncmp(e->d_name + 1, name, len) == 0 && e->d_name[len + 1] == '.')
            found = 1;
    closedir(d);
    return found;
}

static char *slurp_path(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *b;
    if (!f) return NULL;
    b = slurp_file(f);
    fclose(f);
    return b;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* An ok row whose times are `base` us with relative jitter `spread`. */
static fp4_row ok_row(const char *backend, const char *label, int64_t m, double base,
                      double spread)
{
    fp4_row x;
    memset(&x, 0, sizeof x);
    snprintf(x.backend, sizeof x.backend, "%s", backend);
    snprintf(x.label, sizeof x.label, "%s", label);
    x.shape.m = m;
    x.shape.n = 4096;
    x.shape.k = 7168;
    x.state = FP4_ROW_OK;
    x.verified = 1;
    x.err_max = 1e-3;
    x.err_norm = 2.5e-4;
    snprintf(x.l2, sizeof x.l2, "cold");
    snprintf(x.timing, sizeof x.timing, "graph");
    x.copies = 8;
    x.batch = 16;
    x.rotation_bytes = 3.5e8;
    x.nsamples = 21;
    x.samples = malloc((size_t)x.nsamples * sizeof *x.samples);
    for (int i = 0; i < x.nsamples && x.samples; i++)
        x.samples[i] = base * (1.0 + spread * (double)(i - 10) / 10.0);
    fp4_stats_compute(x.samples, x.nsamples, &x.t);
    fp4_stats_compute(NULL, 0, &x.t_launch);
    x.flops = 2.0 * (double)m * 4096 * 7168;
    x.bytes = 1.5e7;
    x.tflops = x.flops / base * 1e-6;
    x.gbps = x.bytes / base * 1e-3;
    x.floor_us = 0.5 * base;
    x.pct_roofline = 50;
    x.pct_peak = -1;
    x.prepare_ms = 12.5;
    return x;
}

static fp4_row bad_row(const char *backend, const char *label, int64_t m, fp4_row_state st,
                       const char *reason)
{
    fp4_row x;
    memset(&x, 0, sizeof x);
    snprintf(x.backend, sizeof x.backend, "%s", backend);
    snprintf(x.label, sizeof x.label, "%s", label);
    x.shape.m = m;
    x.shape.n = 4096;
    x.shape.k = 7168;
    x.state = st;
    snprintf(x.reason, sizeof x.reason, "%s", reason);
    snprintf(x.l2, sizeof x.l2, "cold");
    fp4_stats_compute(NULL, 0, &x.t);
    fp4_stats_compute(NULL, 0, &x.t_launch);
    x.err_max = x.err_norm = NAN;
    x.rotation_bytes = x.flops = x.bytes = x.tflops = x.gbps = NAN;
    x.floor_us = x.pct_roofline = x.pct_peak = x.prepare_ms = NAN;
    return x;
}

static void add(fp4_report *r, fp4_row x)
{
    fp4_err err;
    fp4_status st = fp4_report_add(r, &x, &err);
    CHECK_MSG(st == FP4_OK, "add: %s", fp4_err_text(&err));
}

static const char *long_reason =
    "verification failed: err_norm 0.31 > tol 0.01 at D[17, 4095], and this reason "
    "goes on well past sixty characters TAIL-MARKER";

/* A report with ok, unsupported and FAILED rows and every field set. */
static void make_report(fp4_report *r)
{
    fp4_row x;
    memset(r, 0, sizeof *r);
    snprintf(r->version, sizeof r->version, "0.1.0");
    snprintf(r->commit, sizeof r->commit, "abcdef123456-dirty");
    snprintf(r->started, sizeof r->started, "2025-01-02T03:04:05Z");
    snprintf(r->host, sizeof r->host, "node \"7\"");
    snprintf(r->command, sizeof r->command, "fp4bench run --shapes decode,prefill");
    r->dev.present = 1;
    snprintf(r->dev.name, sizeof r->dev.name, "NVIDIA H200");
    r->dev.cc_major = 9;
    r->dev.cc_minor = 0;
    r->dev.sms = 132;
    r->dev.l2_bytes = 52428800;
    r->dev.mem_bytes = 150754820096.0;
    r->dev.driver_version = 13000;
    r->dev.runtime_version = 12080;
    r->dev.sm_clock_max_mhz = 1980;
    r->dev.mem_clock_max_mhz = 3201;
    r->dev.nvml = 1;
    snprintf(r->dev.driver_string, sizeof r->dev.driver_string, "580.65.06");
    r->dev.cpu_threads = 16;
    r->dev.peak_bf16_tflops = 989.4;
    r->dev.peak_fp8_tflops = 1978.9;
    r->dev.peak_fp4_tflops = 0;
    r->dev.peak_bw_gbps = 4800;
    r->ceil.measured = 1;
    r->ceil.read_gbps = 4012.5;
    r->ceil.bf16_tflops = 834.5;
    r->ceil.bf16_sustained_tflops = 730.25;
    r->ceil.fp8_tflops = 0;
    r->ceil.fp8_sustained_tflops = 0;
    r->ceil.light_ratio = 1;
    r->ceil.cpu_gflops = 3.75;
    fp4_settings_default(&r->set);
    r->set.seed = 18446744073709551557ull; /* above 2^53: written as a string */
    r->set.data = FP4_DATA_OUTLIERS;
    r->set.keep_samples = 1;
    snprintf(r->set.baseline, sizeof r->set.baseline, "cublas-bf16");

    x = ok_row("cublas-bf16", "decode", 16, 20.0, 0.01);
    x.verified = -1;
    add(r, x);
    x = ok_row("fp4-sm90", "decode", 16, 10.0, 0.01);
    snprintf(x.variant, sizeof x.variant, "k3-wgmma");
    snprintf(x.verify_note, sizeof x.verify_note, "tol 0.01");
    x.has_ratio = 1;
    x.ratio = 2.0;
    x.ratio_lo = 1.9;
    x.ratio_hi = NAN; /* NaN must survive as null */
    x.tel.valid = 1;
    x.tel.sm_clock_mhz = 1755;
    x.tel.sm_clock_min_mhz = 1410;
    x.tel.mem_clock_mhz = 3201;
    x.tel.power_w = 512.5;
    x.tel.temp_c = 61;
    x.tel.throttle_reasons = (1ull << 60) | 4ull;
    x.tel.low_clock_samples = 3;
    x.timed_out = 1;
    {
        double l[5] = {12, 11, 13, 12.5, 11.5};
        fp4_stats_compute(l, 5, &x.t_launch);
    }
    x.samples[3] = NAN;
    add(r, x);
    add(r, bad_row("cutlass-sm100", "decode", 16, FP4_ROW_UNSUPPORTED,
                   "needs sm_100a, \"tcgen05\" instructions"));
    add(r, bad_row("fp4-sm90", "prefill", 8192, FP4_ROW_FAILED, long_reason));
    add(r, bad_row("ext-plugin", "prefill", 8192, FP4_ROW_FAILED, ""));
}

static int same_double(double a, double b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

static int same_stats(const fp4_stats *a, const fp4_stats *b)
{
    return a->count == b->count && same_double(a->median, b->median) &&
           same_double(a->p10, b->p10) && same_double(a->p90, b->p90) &&
           same_double(a->min, b->min) && same_double(a->max, b->max) &&
           same_double(a->mean, b->mean) && same_double(a->stdev, b->stdev) &&
           same_double(a->noise, b->noise);
}

#define SAME_D(f) CHECK_MSG(same_double(a->f, b->f), "row %d " #f ": %g vs %g", i, a->f, b->f)
#define SAME_I(f) CHECK_MSG(a->f == b->f, "row %d " #f, i)
#define SAME_S(f) CHECK_MSG(strcmp(a->f, b->f) == 0, "row %d " #f ": '%s' vs '%s'", i, a->f, b->f)

static void compare_rows(int i, const fp4_row *a, const fp4_row *b)
{
    SAME_S(label);
    SAME_I(shape.m);
    SAME_I(shape.n);
    SAME_I(shape.k);
    SAME_S(backend);
    SAME_S(variant);
    SAME_I(state);
    SAME_S(reason);
    SAME_I(verified);
    SAME_S(verify_note);
    SAME_D(err_max);
    SAME_D(err_norm);
    SAME_S(l2);
    SAME_S(timing);
    SAME_I(copies);
    SAME_I(batch);
    SAME_D(rotation_bytes);
    CHECK_MSG(same_stats(&a->t, &b->t), "row %d time stats", i);
    CHECK_MSG(same_stats(&a->t_launch, &b->t_launch), "row %d launch stats", i);
    SAME_I(timed_out);
    SAME_I(nsamples);
    for (int s = 0; s < a->nsamples && s < b->nsamples && a->samples && b->samples; s++)
        CHECK_MSG(same_double(a->samples[s], b->samples[s]), "row %d sample %d", i, s);
    SAME_D(prepare_ms);
    SAME_D(flops);
    SAME_D(bytes);
    SAME_D(tflops);
    SAME_D(gbps);
    SAME_D(floor_us);
    SAME_D(pct_roofline);
    SAME_D(pct_peak);
    SAME_I(has_ratio);
    if (a->has_ratio) {
        SAME_D(ratio);
        SAME_D(ratio_lo);
        SAME_D(ratio_hi);
    }
    SAME_I(tel.valid);
    if (a->tel.valid) {
        SAME_D(tel.sm_clock_mhz);
        SAME_D(tel.sm_clock_min_mhz);
        SAME_D(tel.mem_clock_mhz);
        SAME_D(tel.power_w);
        SAME_D(tel.temp_c);
        SAME_I(tel.throttle_reasons);
        SAME_I(tel.low_clock_samples);
    }
}

static void test_json_round_trip(void)
{
    fp4_report a, b;
    fp4_err err;
    char path[128], tmp[160];
    char *text;
    cJSON *doc;
    fp4_status st;

    make_report(&a);
    tmp_path(path, sizeof path, "report.json");
    st = fp4_report_write_json(path, &a, &err);
    CHECK_MSG(st == FP4_OK, "write: %s", fp4_err_text(&err));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0);
    CHECK(!has_temporary("report.json")); /* the temporary was renamed away */

    /* valid JSON for an independent parser; NaN written as null */
    text = slurp_path(path);
    CHECK(text != NULL);
    doc = text ? cJSON_Parse(text) : NULL;
    CHECK_MSG(doc != NULL, "cJSON cannot parse what we wrote");
    if (doc) {
        const cJSON *rows = cJSON_GetObjectItemCaseSensitive(doc, "rows");
        const cJSON *r1 = cJSON_GetArrayItem(rows, 1), *r3 = cJSON_GetArrayItem(rows, 3);
        const cJSON *ratio = cJSON_GetObjectItemCaseSensitive(r1, "ratio");
        CHECK(cJSON_GetArraySize(rows) == 5);
        CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(ratio, "hi")));
        CHECK(cJSON_IsNull(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r1, "samples_us"), 3)));
        CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r3, "err_norm")));
        CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r3, "ratio")));
        CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r3, "telemetry")));
        CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(doc, "schema_version")));
        CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(doc, "schema")),
                     "fp4bench/1") == 0);
        cJSON_Delete(doc);
    }
    CHECK(text && strstr(text, "nan") == NULL && strstr(text, "inf") == NULL);
    free(text);

    memset(&b, 0x5a, sizeof b);
    st = fp4_report_read_json(path, &b, &err);
    CHECK_MSG(st == FP4_OK, "read: %s", fp4_err_text(&err));
    if (st == FP4_OK) {
        CHECK(strcmp(a.version, b.version) == 0 && strcmp(a.commit, b.commit) == 0);
        CHECK(strcmp(a.started, b.started) == 0 && strcmp(a.host, b.host) == 0);
        CHECK(strcmp(a.command, b.command) == 0);
        CHECK(memcmp(&a.dev, &b.dev, sizeof a.dev) == 0 ||
              (a.dev.present == b.dev.present && strcmp(a.dev.name, b.dev.name) == 0 &&
               a.dev.cc_major == b.dev.cc_major && a.dev.cc_minor == b.dev.cc_minor &&
               a.dev.sms == b.dev.sms && a.dev.l2_bytes == b.dev.l2_bytes &&
               a.dev.mem_bytes == b.dev.mem_bytes &&
               a.dev.driver_version == b.dev.driver_version &&
               a.dev.runtime_version == b.dev.runtime_version &&
               a.dev.sm_clock_max_mhz == b.dev.sm_clock_max_mhz &&
               a.dev.mem_clock_max_mhz == b.dev.mem_clock_max_mhz && a.dev.nvml == b.dev.nvml &&
               strcmp(a.dev.driver_string, b.dev.driver_string) == 0 &&
               strcmp(a.dev.why_absent, b.dev.why_absent) == 0 &&
               a.dev.cpu_threads == b.dev.cpu_threads &&
               a.dev.peak_bf16_tflops == b.dev.peak_bf16_tflops &&
               a.dev.peak_fp8_tflops == b.dev.peak_fp8_tflops &&
               a.dev.peak_fp4_tflops == b.dev.peak_fp4_tflops &&
               a.dev.peak_bw_gbps == b.dev.peak_bw_gbps));
        CHECK(a.ceil.measured == b.ceil.measured && a.ceil.read_gbps == b.ceil.read_gbps &&
              a.ceil.bf16_tflops == b.ceil.bf16_tflops && a.ceil.fp8_tflops == b.ceil.fp8_tflops &&
              a.ceil.bf16_sustained_tflops == b.ceil.bf16_sustained_tflops &&
              a.ceil.fp8_sustained_tflops == b.ceil.fp8_sustained_tflops &&
              a.ceil.light_ratio == b.ceil.light_ratio &&
              a.ceil.cpu_gflops == b.ceil.cpu_gflops);
        CHECK_MSG(a.set.seed == b.set.seed, "seed %llu", (unsigned long long)b.set.seed);
        CHECK(a.set.data == b.set.data && a.set.hot == b.set.hot &&
              a.set.use_graphs == b.set.use_graphs && a.set.measure_launch == b.set.measure_launch &&
              a.set.warmup_ms == b.set.warmup_ms &&
              a.set.stop.min_samples == b.set.stop.min_samples &&
              a.set.stop.noise_target == b.set.stop.noise_target &&
              a.set.stop.min_time_s == b.set.stop.min_time_s &&
              a.set.stop.max_time_s == b.set.stop.max_time_s &&
              strcmp(a.set.baseline, b.set.baseline) == 0 &&
              a.set.keep_samples == b.set.keep_samples &&
              a.set.measure_ceilings == b.set.measure_ceilings &&
              a.set.verify_only == b.set.verify_only);
        CHECK(b.nrows == a.nrows);
        for (int i = 0; i < a.nrows && i < b.nrows; i++) compare_rows(i, &a.rows[i], &b.rows[i]);
    }
    fp4_report_free(&b);

    /* without keep_samples no samples are written; an empty baseline is null */
    a.set.keep_samples = 0;
    a.set.baseline[0] = '\0';
    CHECK(fp4_report_write_json(path, &a, &err) == FP4_OK);
    text = slurp_path(path);
    CHECK(text && strstr(text, "samples_us") == NULL && strstr(text, "\"baseline\":\tnull"));
    free(text);
    CHECK(fp4_report_read_json(path, &b, &err) == FP4_OK);
    CHECK(b.nrows == 5 && b.rows[1].samples == NULL && b.rows[1].nsamples == 0);
    CHECK(b.set.baseline[0] == '\0');
    fp4_report_free(&b);
    fp4_report_free(&a);
    CHECK(a.rows == NULL && a.nrows == 0);
    remove(path);
}

/* read_json on the text must fail with status want and a message naming
 * `field`. */
/* The start of a document that is a report (schema, device, settings) but for
 * what follows. */
#define DOC_HEAD "{\"schema\":\"fp4bench/1\",\"schema_version\":1,\"device\":{},\"settings\":{},"

static void expect_bad(const char *name, const char *text, fp4_status want, const char *field)
{
    char path[128];
    fp4_report r;
    fp4_err err;
    fp4_status st;
    tmp_path(path, sizeof path, name);
    if (text) write_text(path, text);
    fp4_err_clear(&err);
    st = fp4_report_read_json(path, &r, &err);
    CHECK_MSG(st == want, "%s: status %d (%s), want %d", name, (int)st, fp4_err_text(&err),
              (int)want);
    CHECK_MSG(err.msg[0] && strstr(err.msg, field) != NULL && strchr(err.msg, '\n') == NULL,
              "%s: message '%s' should name '%s'", name, err.msg, field);
    CHECK(r.nrows == 0 && r.rows == NULL);
    fp4_report_free(&r);
    remove(path);
}

static void test_json_malformed(void)
{
    fp4_report a;
    fp4_err err;
    char path[128], *text, *cut;
    const char *row_ok = "{\"label\":\"x\",\"m\":1,\"n\":2,\"k\":16,\"backend\":\"b\","
                         "\"state\":\"ok\",\"l2\":\"cold\",\"time_us\":{\"count\":0}}";
    char buf[1024];

    make_report(&a);
    tmp_path(path, sizeof path, "good.json");
    CHECK(fp4_report_write_json(path, &a, &err) == FP4_OK);
    text = slurp_path(path);
    fp4_report_free(&a);
    remove(path);
    if (!text) return;
    cut = strdup(text);
    cut[strlen(cut) / 2] = '\0';
    expect_bad("truncated.json", cut, FP4_ERR_FORMAT, "not valid JSON");
    free(cut);
    expect_bad("empty.json", "", FP4_ERR_FORMAT, "not valid JSON");
    expect_bad("trailing.json", DOC_HEAD "\"rows\":[]} x", FP4_ERR_FORMAT,
               "not valid JSON");
    free(text);

    expect_bad("v2.json", "{\"schema\":\"fp4bench/1\",\"schema_version\":2,\"rows\":[]}", FP4_ERR_FORMAT,
               "schema_version");
    expect_bad("nov.json", "{\"schema\":\"fp4bench/1\",\"rows\":[]}", FP4_ERR_FORMAT, "schema_version");
    expect_bad("norows.json", DOC_HEAD "\"x\":0}", FP4_ERR_FORMAT, "rows");
    expect_bad("rowsobj.json", DOC_HEAD "\"rows\":{}}", FP4_ERR_FORMAT, "rows");
    expect_bad("array.json", "[1,2]", FP4_ERR_FORMAT, "top level");
    snprintf(buf, sizeof buf, DOC_HEAD "\"rows\":[%s,%s]}", row_ok,
             "{\"label\":\"x\",\"m\":\"many\",\"n\":2,\"k\":16,\"backend\":\"b\","
             "\"state\":\"ok\",\"l2\":\"cold\",\"time_us\":{\"count\":0}}");
    expect_bad("mtype.json", buf, FP4_ERR_FORMAT, "rows[1].m");
    snprintf(buf, sizeof buf, DOC_HEAD "\"rows\":[%s]}",
             "{\"label\":\"x\",\"m\":1,\"n\":2,\"k\":16,\"backend\":\"b\","
             "\"state\":\"ok\",\"l2\":\"cold\",\"time_us\":{\"count\":1,\"median\":\"fast\"}}");
    expect_bad("median.json", buf, FP4_ERR_FORMAT, "rows[0].time_us.median");
    snprintf(buf, sizeof buf, DOC_HEAD "\"rows\":[%s]}",
             "{\"label\":\"x\",\"m\":1,\"n\":2,\"k\":16,\"backend\":\"b\","
             "\"state\":\"meh\",\"l2\":\"cold\",\"time_us\":{\"count\":0}}");
    expect_bad("state.json", buf, FP4_ERR_FORMAT, "rows[0].state");
    snprintf(buf, sizeof buf, DOC_HEAD "\"rows\":[%s]}",
             "{\"label\":\"x\",\"m\":1,\"n\":2,\"k\":16,\"backend\":\"b\",\"state\":\"ok\"}");
    expect_bad("notime.json", buf, FP4_ERR_FORMAT, "rows[0].l2");
    snprintf(buf, sizeof buf, "{\"schema\":\"fp4bench/1\",\"schema_version\":1,\"device\":{},"
                              "\"settings\":{\"hot\":\"yes\"},\"rows\":[]}");
    expect_bad("hot.json", buf, FP4_ERR_FORMAT, "settings.hot");
    expect_bad("missing-file.json", NULL, FP4_ERR_IO, "missing-file.json");

    /* the minimal valid document reads, with defaults for the rest */
    {
        fp4_report r;
        snprintf(buf, sizeof buf, DOC_HEAD "\"rows\":[%s]}", row_ok);
        tmp_path(path, sizeof path, "minimal.json");
        write_text(path, buf);
        CHECK_MSG(fp4_report_read_json(path, &r, &err) == FP4_OK, "minimal: %s",
                  fp4_err_text(&err));
        CHECK(r.nrows == 1 && r.rows[0].shape.k == 16 && isnan(r.rows[0].err_norm) &&
              r.set.stop.min_samples == 10 && r.rows[0].has_ratio == 0);
        fp4_report_free(&r);
        remove(path);
    }
}

/* A document of one row: top's members at the top level, then a row with
 * fields first (cJSON takes the first of two equal keys, so a field there
 * replaces the standard one after it) and time_us holding time_us. */
static void one_row_doc(char *buf, size_t cap, const char *top, const char *fields, const char *time_us)
{
    /* a row's usual members, less those `fields` gives (a key twice is refused) */
    static const char *const usual[][2] = {{"label", "\"x\""}, {"m", "16"},          {"n", "64"},
                                           {"k", "64"},         {"backend", "\"b\""}, {"state", "\"ok\""},
                                           {"l2", "\"cold\""},  {"timing", "\"host\""}};
    size_t len = (size_t)snprintf(buf, cap, "{%s\"schema_version\":1,\"rows\":[{%s", top, fields);
    for (size_t i = 0; i < sizeof usual / sizeof usual[0] && len < cap; i++) {
        char key[32];
        snprintf(key, sizeof key, "\"%s\":", usual[i][0]);
        if (!strstr(fields, key)) len += (size_t)snprintf(buf + len, cap - len, "%s%s,", key, usual[i][1]);
    }
    if (len < cap) snprintf(buf + len, cap - len, "\"time_us\":{%s}}]}", time_us);
}

/* What fp4bench never writes is refused, naming the field; what it does
 * write (untimed rows, a noise above 1, "" modes, escapes) still reads. */
static void test_json_not_a_report(void)
{
    static const char head[] = "\"schema\":\"fp4bench/1\",\"device\":{},\"settings\":{},";
    static const char timed[] = "\"count\":10,\"median\":35.5,\"noise\":0.004";
    static const struct {
        const char *name, *top, *fields, *time_us, *want;
    } bad[] = {
        {"mneg.json", head, "\"m\":-16,", timed, "rows[0].m: expected a positive integer"},
        {"mzero.json", head, "\"m\":0,", timed, "rows[0].m: expected a positive integer"},
        {"nzero.json", head, "\"n\":0,", timed, "rows[0].n: expected a positive integer"},
        {"kzero.json", head, "\"k\":0,", timed, "rows[0].k: expected a positive integer"},
        {"k60.json", head, "\"k\":60,", timed, "rows[0].k: not a multiple of 16"},
        {"median0.json", head, "", "\"count\":10,\"median\":0", "rows[0].time_us.median: expected a positive time"},
        {"medianneg.json", head, "", "\"count\":3,\"median\":-2", "rows[0].time_us.median: expected a positive"},
        {"noiseneg.json", head, "", "\"count\":3,\"median\":2,\"noise\":-0.1", "rows[0].time_us.noise: negative"},
        /* values no run writes: a shape beyond what a run takes, statistics out of order,
         * a negative ratio or sample */
        {"k2e40.json", head, "\"k\":1099511627776,", timed, "rows[0].k: above 2^20"},
        {"mn.json", head, "\"m\":4294967296,\"n\":4294967296,", timed, "rows[0].m, n: the output's size overflows"},
        {"p10.json", head, "", "\"count\":10,\"median\":5,\"p10\":6", "rows[0].time_us.median: below p10"},
        {"minneg.json", head, "", "\"count\":10,\"median\":5,\"min\":-1", "rows[0].time_us.min: negative"},
        {"rationeg.json", head, "\"ratio\":{\"value\":-1,\"lo\":5,\"hi\":1},", timed,
         "rows[0].ratio.value: expected a positive ratio"},
        {"ratiolohi.json", head, "\"ratio\":{\"value\":2,\"lo\":5,\"hi\":1},", timed, "rows[0].ratio.hi: below lo"},
        {"sampleneg.json", head, "\"samples_us\":[1,-2],", timed, "rows[0].samples_us[1]: expected a positive time"},
        {"l2.json", head, "\"l2\":\"banana\",", timed, "rows[0].l2: expected \"cold\""},
        {"timing.json", head, "\"timing\":\"banana\",", timed, "rows[0].timing: expected \"graph\""},
        {"nul.json", head, "\"label\":\"ab\\u0000cd\",", timed, "holds \\u0000 (a NUL character)"},
        {"other.json", "\"schema\":\"other/1\",\"device\":{},\"settings\":{},", "", timed,
         "schema: \"other/1\", expected \"fp4bench/1\": not an fp4bench report"},
        {"layer.json", "\"schema\":\"fp4bench-layer/1\",\"device\":{},\"settings\":{},", "", timed,
         "not an fp4bench report"},
        {"schemanum.json", "\"schema\":1,\"device\":{},\"settings\":{},", "", timed, "schema: expected a string"},
        {"noschema.json", "\"device\":{},\"settings\":{},", "", timed, "schema: missing: not an fp4bench report"},
        {"nodevice.json", "\"schema\":\"fp4bench/1\",\"settings\":{},", "", timed,
         "device: missing: not an fp4bench report"},
        {"nosettings.json", "\"schema\":\"fp4bench/1\",\"device\":{},", "", timed,
         "settings: missing: not an fp4bench report"},
    };
    static const struct {
        const char *name, *fields, *time_us;
    } good[] = {
        {"timed.json", "", timed},
        {"untimed.json", "\"state\":\"unsupported\",\"timing\":\"\",", "\"count\":0,\"median\":0,\"noise\":0"},
        {"untimednull.json", "", "\"count\":0,\"median\":null"},
        {"nanmedian.json", "", "\"count\":4,\"median\":null"},
        {"bignoise.json", "", "\"count\":3,\"median\":2,\"noise\":2.5"},
        {"onesample.json", "", "\"count\":1,\"median\":2,\"noise\":null"},
        {"warm.json", "\"l2\":\"warm\",\"timing\":\"graph-nogate\",", timed},
        {"hot.json", "\"l2\":\"hot\",\"timing\":\"launch\",", timed},
        {"cpu.json", "\"l2\":\"n/a\",\"timing\":\"host\",", timed},
        {"escapes.json", "\"label\":\"a\\\\u0000b \\\"q\\\" \\u00e9\",", timed},
    };
    char buf[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        one_row_doc(buf, sizeof buf, bad[i].top, bad[i].fields, bad[i].time_us);
        expect_bad(bad[i].name, buf, FP4_ERR_FORMAT, bad[i].want);
    }
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        fp4_report r;
        fp4_err err;
        fp4_status st;
        one_row_doc(buf, sizeof buf, head, good[i].fields, good[i].time_us);
        st = fp4_report_parse_json(buf, strlen(buf), good[i].name, &r, &err);
        CHECK_MSG(st == FP4_OK && r.nrows == 1, "%s: %s", good[i].name, fp4_err_text(&err));
        if (st == FP4_OK && strcmp(good[i].name, "escapes.json") == 0)
            CHECK_MSG(strcmp(r.rows[0].label, "a\\u0000b \"q\" \xc3\xa9") == 0, "label '%s'", r.rows[0].label);
        fp4_report_free(&r);
    }
}

/* A row of the minimal document with one field's text replaced: m, median. */
static void row_doc(char *buf, size_t cap, const char *m, const char *median, const char *label)
{
    snprintf(buf, cap,
             DOC_HEAD "\"rows\":[{\"label\":\"%s\",\"m\":%s,\"n\":2,\"k\":16,"
             "\"backend\":\"b\",\"state\":\"ok\",\"l2\":\"cold\",\"time_us\":{\"count\":1,"
             "\"median\":%s}}]}",
             label, m, median);
}

/* The limits and refusals of the reader, and what the writer does instead
 * of writing what JSON cannot hold. */
static void test_json_limits(void)
{
    char buf[1024], path[128];
    fp4_report a, r;
    fp4_err err;
    fp4_status st;

    /* non-finite numbers: never written (null instead), refused when read */
    row_doc(buf, sizeof buf, "1", "1e999", "x");
    expect_bad("inf.json", buf, FP4_ERR_FORMAT, "rows[0].time_us.median: number out of range");
    row_doc(buf, sizeof buf, "1", "-1e400", "x");
    expect_bad("neginf.json", buf, FP4_ERR_FORMAT, "not finite");
    row_doc(buf, sizeof buf, "1e999", "1", "x");
    expect_bad("mhuge.json", buf, FP4_ERR_FORMAT, "rows[0].m");
    snprintf(buf, sizeof buf, "{\"schema\":\"fp4bench/1\",\"schema_version\":1,\"device\":{},\"rows\":[],"
                              "\"settings\":{\"hot\":1e999}}");
    expect_bad("flaginf.json", buf, FP4_ERR_FORMAT, "settings.hot");

    /* integers: exact up to 2^53 - 1; a larger one may have been rounded */
    row_doc(buf, sizeof buf, "9007199254740993", "1", "x");
    expect_bad("m2p53p1.json", buf, FP4_ERR_FORMAT, "rows[0].m: integer beyond 2^53 - 1");
    row_doc(buf, sizeof buf, "9007199254740992", "1", "x");
    expect_bad("m2p53.json", buf, FP4_ERR_FORMAT, "rows[0].m");
    row_doc(buf, sizeof buf, "-9007199254740992", "1", "x");
    expect_bad("mneg2p53.json", buf, FP4_ERR_FORMAT, "rows[0].m");
    snprintf(buf, sizeof buf, "{\"schema\":\"fp4bench/1\",\"schema_version\":1,\"device\":{},\"rows\":[],"
                              "\"settings\":{\"seed\":9007199254740993}}");
    expect_bad("seedbig.json", buf, FP4_ERR_FORMAT, "settings.seed");
    snprintf(buf, sizeof buf, DOC_HEAD "\"rows\":[{\"label\":\"x\",\"m\":1,\"n\":2,\"k\":16,"
             "\"backend\":\"b\",\"state\":\"ok\",\"l2\":\"cold\",\"time_us\":{\"count\":1e300}}]}");
    expect_bad("countbig.json", buf, FP4_ERR_FORMAT, "rows[0].time_us.count");
    row_doc(buf, sizeof buf, "9007199254740991", "1", "x");
    st = fp4_report_parse_json(buf, strlen(buf), "max.json", &r, &err);
    CHECK_MSG(st == FP4_OK && r.nrows == 1 && r.rows[0].shape.m == 9007199254740991ll, "2^53 - 1: %s",
              fp4_err_text(&err));
    fp4_report_free(&r);

    /* strings must be UTF-8 */
    row_doc(buf, sizeof buf, "1", "1", "bad\xff");
    expect_bad("badutf8.json", buf, FP4_ERR_FORMAT, "rows[0].label: string is not valid UTF-8");
    row_doc(buf, sizeof buf, "1", "1", "\xed\xa0\x80"); /* an encoded surrogate */
    expect_bad("surrogate.json", buf, FP4_ERR_FORMAT, "rows[0].label");
    row_doc(buf, sizeof buf, "1", "1", "caf\xc3\xa9");
    st = fp4_report_parse_json(buf, strlen(buf), "utf8.json", &r, &err);
    CHECK_MSG(st == FP4_OK && strcmp(r.rows[0].label, "caf\xc3\xa9") == 0, "utf8: %s", fp4_err_text(&err));
    fp4_report_free(&r);

    /* from memory: the text need not end in a NUL; an embedded NUL is refused */
    {
        size_t n;
        char *exact;
        row_doc(buf, sizeof buf, "1", "1", "x");
        n = strlen(buf);
        exact = malloc(n);
        CHECK(exact != NULL);
        if (exact) {
            memcpy(exact, buf, n);
            CHECK(fp4_report_parse_json(exact, n, "exact.json", &r, &err) == FP4_OK && r.nrows == 1);
            fp4_report_free(&r);
            CHECK(fp4_report_parse_json(exact, n - 1, "cut.json", &r, &err) == FP4_ERR_FORMAT);
            fp4_report_free(&r);
            free(exact);
        }
        buf[n - 1] = '\0';
        buf[n] = '}';
        CHECK(fp4_report_parse_json(buf, n + 1, "nul.json", &r, &err) == FP4_ERR_FORMAT &&
              strstr(err.msg, "NUL byte") != NULL);
        fp4_report_free(&r);
    }

    /* the size cap is checked before reading: a sparse file 1 byte over */
    tmp_path(path, sizeof path, "huge.json");
    {
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        if (f) {
            CHECK(ftruncate(fileno(f), (off_t)FP4_JSON_MAX_BYTES + 1) == 0);
            fclose(f);
        }
    }
    expect_bad("huge.json", NULL, FP4_ERR_FORMAT, "more than the 268435456 bytes (256 MiB)");

    /* the writer: NaN and infinities become null; bytes that are not UTF-8
     * (a host name in another encoding, a label cut mid-character) become '?',
     * so the file always reads back */
    make_report(&a);
    a.rows[0].t.median = INFINITY;
    a.rows[0].err_max = -INFINITY;
    a.rows[0].err_norm = NAN;
    snprintf(a.host, sizeof a.host, "h\xff\xfe");
    snprintf(a.rows[0].reason, sizeof a.rows[0].reason, "cut \xe2\x82");
    a.set.seed = 9007199254740992ull; /* 2^53: a string, not a number */
    tmp_path(path, sizeof path, "sanitized.json");
    CHECK(fp4_report_write_json(path, &a, &err) == FP4_OK);
    {
        char *text = slurp_path(path);
        CHECK(text && fp4_utf8_valid(text, strlen(text)));
        CHECK(text && strstr(text, "\"h??\"") && strstr(text, "\"cut ??\""));
        CHECK(text && strstr(text, "\"9007199254740992\""));
        CHECK(text && !strstr(text, "inf") && !strstr(text, "nan"));
        free(text);
    }
    st = fp4_report_read_json(path, &r, &err);
    CHECK_MSG(st == FP4_OK, "sanitized: %s", fp4_err_text(&err));
    if (st == FP4_OK) {
        CHECK(strcmp(r.host, "h??") == 0 && isnan(r.rows[0].t.median) && isnan(r.rows[0].err_max));
        CHECK(r.set.seed == 9007199254740992ull);
    }
    fp4_report_free(&r);
    fp4_report_free(&a);
    remove(path);
}

/* Split one CSV line (RFC 4180) into fields; returns the count. Field i is
 * copied into out[i] when i < maxf. */
static int csv_split(const char *line, char out[][128], int maxf)
{
    int nf = 0, len = 0, inq = 0;
    const char *p = line;
    for (;; p++) {
        char ch = *p;
        if (inq) {
            if (ch == '"' && p[1] == '"') { if (nf < maxf && len < 127) out[nf][len++] = '"'; p++; }
            else if (ch == '"') inq = 0;
            else if (ch == '\0') break;
            else if (nf < maxf && len < 127) out[nf][len++] = ch;
            continue;
        }
        if (ch == '"') { inq = 1; continue; }
        if (ch == ',' || ch == '\n' || ch == '\0') {
            if (nf < maxf) out[nf][len] = '\0';
            nf++;
            len = 0;
            if (ch != ',') break;
            continue;
        }
        if (nf < maxf && len < 127) out[nf][len++] = ch;
    }
    return nf;
}

static void test_csv(void)
{
    fp4_report r;
    fp4_err err;
    FILE *f = tmpfile();
    char *text, *line;
    static char fields[40][128];
    int lines = 0;
    if (!f) {
        CHECK_MSG(0, "tmpfile failed");
        return;
    }
    make_report(&r);
    CHECK(fp4_csv_write_header(f, &err) == FP4_OK);
    for (int i = 0; i < r.nrows; i++) CHECK(fp4_csv_write_row(f, &r.rows[i], &err) == FP4_OK);
    text = slurp_file(f);
    fclose(f);
    CHECK(text && strstr(text, "\"needs sm_100a, \"\"tcgen05\"\" instructions\"") != NULL);
    for (line = text; line && *line; lines++) {
        char *nl = strchr(line, '\n');
        int nf = csv_split(line, fields, 40);
        CHECK_MSG(nf == 35, "line %d has %d fields", lines, nf);
        if (lines == 0) CHECK(strcmp(fields[0], "label") == 0 && strcmp(fields[34], "prepare_ms") == 0);
        if (lines == 2) { /* the ok row with telemetry */
            CHECK(strcmp(fields[4], "fp4-sm90") == 0 && strcmp(fields[6], "ok") == 0);
            CHECK(strtod(fields[15], NULL) == r.rows[1].t.median);
            CHECK(strcmp(fields[26], "2") == 0 && strcmp(fields[28], "") == 0);
            CHECK(strcmp(fields[32], "0x1000000000000004") == 0);
        }
        if (lines == 3) {
            CHECK(strcmp(fields[6], "unsupported") == 0);
            CHECK(strcmp(fields[7], "needs sm_100a, \"tcgen05\" instructions") == 0);
            CHECK(strcmp(fields[15], "") == 0); /* no time */
        }
        line = nl ? nl + 1 : NULL;
    }
    CHECK(lines == 1 + r.nrows);
    free(text);
    fp4_report_free(&r);
}

/* Whether the compare output has a line for backend whose remaining cells
 * contain verdict. */
static int has_line(const char *text, const char *backend, const char *verdict)
{
    const char *p = text;
    while (p && *p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[512];
        if (len >= sizeof line) len = sizeof line - 1;
        memcpy(line, p, len);
        line[len] = '\0';
        if (strncmp(line, backend, strlen(backend)) == 0 && line[strlen(backend)] == ' ' &&
            strstr(line + strlen(backend), verdict))
            return 1;
        p = nl ? nl + 1 : NULL;
    }
    return 0;
}

static void test_compare(void)
{
    fp4_report o, n;
    fp4_err err;
    fp4_compare_opts opts = {0.05, 0};
    FILE *f;
    char *text;
    int reg;

    memset(&o, 0, sizeof o);
    memset(&n, 0, sizeof n);
    fp4_settings_default(&o.set);
    fp4_settings_default(&n.set);
    o.dev.present = n.dev.present = 1;
    snprintf(o.dev.name, sizeof o.dev.name, "NVIDIA H200");
    snprintf(n.dev.name, sizeof n.dev.name, "NVIDIA H200");

    add(&o, ok_row("same", "c", 16, 100.0, 0.001));
    add(&n, ok_row("same", "c", 16, 100.5, 0.001));
    add(&o, ok_row("fast", "c", 16, 100.0, 0.001));
    add(&n, ok_row("fast", "c", 16, 80.0, 0.001));
    add(&o, ok_row("slow4", "c", 16, 100.0, 0.001)); /* 4%: under the threshold */
    add(&n, ok_row("slow4", "c", 16, 104.0, 0.001));
    add(&o, ok_row("slow10", "c", 16, 100.0, 0.001)); /* 10%, tiny noise: regression */
    add(&n, ok_row("slow10", "c", 16, 110.0, 0.001));
    add(&o, ok_row("noisy10", "c", 16, 100.0, 0.5)); /* 10%, huge noise: not one */
    add(&n, ok_row("noisy10", "c", 16, 110.0, 0.5));
    add(&o, ok_row("broke", "c", 16, 100.0, 0.001));
    add(&n, bad_row("broke", "c", 16, FP4_ROW_FAILED, "wrong answer at D[0,0]"));
    add(&o, ok_row("unsup", "c", 16, 100.0, 0.001));
    add(&n, bad_row("unsup", "c", 16, FP4_ROW_UNSUPPORTED, "plugin missing"));
    add(&o, bad_row("fixd", "c", 16, FP4_ROW_FAILED, "old bug"));
    add(&n, ok_row("fixd", "c", 16, 100.0, 0.001));
    add(&n, ok_row("fresh", "c", 16, 100.0, 0.001));
    add(&o, ok_row("old", "c", 16, 100.0, 0.001));
    add(&o, ok_row("same", "c", 32, 100.0, 0.001)); /* other shape: gone */

    CHECK(o.rows[4].t.noise > 0.1 && n.rows[4].t.p10 < o.rows[4].t.p90);
    CHECK(o.rows[3].t.noise < 0.01);

    f = tmpfile();
    reg = fp4_report_compare(f, &o, &n, &opts, &err);
    CHECK_MSG(reg == 3, "regressions %d, want 3 (slow10, broke, unsup)", reg);
    text = f ? slurp_file(f) : NULL;
    if (f) fclose(f);
    CHECK(text != NULL);
    if (text) {
        CHECK_MSG(has_line(text, "same", "same"), "%s", text);
        CHECK(has_line(text, "fast", "faster"));
        CHECK(has_line(text, "slow4", "same"));
        CHECK(has_line(text, "slow10", "slower"));
        CHECK(has_line(text, "noisy10", "same"));
        CHECK(has_line(text, "broke", "broken") && strstr(text, "wrong answer at D[0,0]"));
        CHECK(has_line(text, "unsup", "broken"));
        CHECK(has_line(text, "fixd", "fixed"));
        CHECK(has_line(text, "fresh", "new"));
        CHECK(has_line(text, "old", "gone"));
        CHECK(strstr(text, "3 regressions") != NULL);
        CHECK(strstr(text, "warning") == NULL);
    }
    free(text);

    /* swapped: slower <-> faster, and a 10% speed-up of tiny noise is faster */
    reg = fp4_report_compare(NULL, &n, &o, &opts, &err);
    CHECK_MSG(reg == 2, "swapped regressions %d, want 2 (fast, fixd)", reg);

    /* warnings: different GPU and L2 mode */
    snprintf(n.dev.name, sizeof n.dev.name, "NVIDIA H100 80GB HBM3");
    n.set.hot = 1;
    f = tmpfile();
    reg = fp4_report_compare(f, &o, &n, NULL, &err);
    CHECK(reg == 3);
    text = f ? slurp_file(f) : NULL;
    if (f) fclose(f);
    CHECK(text && strstr(text, "different GPUs") && strstr(text, "different L2 modes"));
    free(text);

    opts.threshold = -1;
    CHECK(fp4_report_compare(NULL, &o, &n, &opts, &err) == -1 && err.status == FP4_ERR_INVALID_ARG);
    CHECK(fp4_report_compare(NULL, NULL, &n, NULL, &err) == -1);
    fp4_report_free(&o);
    fp4_report_free(&n);
}

static void test_table(void)
{
    fp4_report r;
    FILE *f = tmpfile();
    char *text;
    char head[61];
    if (!f) {
        CHECK_MSG(0, "tmpfile failed");
        return;
    }
    make_report(&r);
    add(&r, ok_row("late-backend", "decode", 16, 30.0, 0.01)); /* belongs to the first group */
    r.rows[r.nrows - 1].pct_roofline = 116.4; /* above the roofline: shown, never clamped */
    fp4_report_print_header(f, &r);
    r.ceil.bf16_sustained_tflops = NAN; /* a file from before: no sustained rate */
    r.ceil.fp8_tflops = 1436;
    fp4_report_print_header(f, &r);
    fp4_report_print_table(f, &r);
    r.dev.present = 0;
    snprintf(r.dev.why_absent, sizeof r.dev.why_absent, "no CUDA driver");
    fp4_report_print_header(f, &r);
    text = slurp_file(f);
    fclose(f);
    CHECK(text != NULL);
    if (text) {
        snprintf(head, sizeof head, "%.50s", long_reason);
        CHECK(strstr(text, "needs sm_100a, \"tcgen05\" instructions") != NULL);
        CHECK(strstr(text, "unsupported: ") != NULL);
        CHECK(strstr(text, head) != NULL);               /* the long reason, cut */
        CHECK(strstr(text, "TAIL-MARKER") == NULL);
        CHECK(strstr(text, "FAILED: (no reason given)") != NULL); /* never nothing */
        CHECK(strstr(text, "GPU: NVIDIA H200, sm_90, 132 SMs") != NULL);
        CHECK(strstr(text, "GPU: none (no CUDA driver)") != NULL);
        CHECK(strstr(text, "vs cublas-bf16") != NULL && strstr(text, "2.00x [1.90, -]"));
        CHECK(strstr(text, "reference") != NULL && strstr(text, "flag T") && strstr(text, "flag C"));
        CHECK(strstr(text, "seed 18446744073709551557") != NULL);
        CHECK(strstr(text, "ceilings: measured read 4012 GB/s, bf16 834 TFLOP/s (sustained 730), CPU") !=
              NULL);
        CHECK(strstr(text, "bf16 834 TFLOP/s, fp8 1436 TFLOP/s, CPU") != NULL);
        CHECK(strstr(text, " 116% ") != NULL && strstr(text, "100%") == NULL);
        /* grouped: the prefill rows come after every decode row */
        CHECK(strstr(text, "late-backend") != NULL &&
              strstr(text, "late-backend") < strstr(text, "FAILED: verification"));
    }
    free(text);
    fp4_report_free(&r);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fp4_test_report_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_json_round_trip();
    test_json_malformed();
    test_json_limits();
    test_json_not_a_report();
    test_csv();
    test_compare();
    test_table();
    rmdir(tmpdir);
    return check_finish("test_report");
}
