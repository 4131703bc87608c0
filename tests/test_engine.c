/* The engine on the CPU with fake backends: every way a backend can fail
 * becomes an "unsupported (reason)" or "FAILED (reason)" row while the good
 * backends are still verified and timed; plugins load with a version check. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "fp4/backend.h"
#include "fp4/engine.h"
#include "fp4/reference.h"
#include "fp4/report.h"

/* How a fake backend misbehaves. */
enum fake_mode {
    FAKE_GOOD,        /* exact: the reference itself */
    FAKE_NO_OPEN,     /* open() refuses: "no such hardware" */
    FAKE_NO_SHAPE,    /* supports() refuses every shape */
    FAKE_PREP_ERROR,  /* prepare() fails with an I/O-like error */
    FAKE_WRONG,       /* one element off by 10% */
    FAKE_UNWRITTEN,   /* leaves the last element as it was (poisoned) */
    FAKE_ZEROS,       /* writes zeros everywhere (the FlashInfer #2577 symptom) */
    FAKE_RUN_ERROR,   /* run() fails on the second call */
    FAKE_MODES,
    /* not one of the modes above: exact, but a call that starts within 0.5 ms
     * of the previous one's end takes 2 ms and one that starts later 1 ms (a
     * power cap in miniature), for the rate test */
    FAKE_THERMAL = FAKE_MODES
};

typedef struct fake_plan {
    int mode;
    fp4_matrix a, b;
    float alpha;
    float *d;
    size_t n;
    int calls;
    double last_end; /* FAKE_THERMAL: when the previous call ended, s */
} fake_plan;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Busy for `s` seconds (a sleep would do, but a spin is as exact as the
 * clock on a loaded machine too). */
static void spin_s(double s)
{
    double t0 = mono_s();
    while (mono_s() - t0 < s) {
    }
}

/* One table per mode; the mode travels in the instance pointer. */
static fp4_status fake_open_mode(void **inst, int mode, fp4_err *err)
{
    *inst = (void *)(intptr_t)(mode + 1);
    if (mode == FAKE_NO_OPEN) return fp4_fail(err, FP4_ERR_UNSUPPORTED, "no such hardware here");
    return FP4_OK;
}

static void fake_close(void *inst)
{
}

static fp4_status fake_supports(void *inst, const fp4_shape *s, fp4_err *err)
{
    if ((int)(intptr_t)inst - 1 == FAKE_NO_SHAPE)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "needs N %% 4096 == 0");
    return FP4_OK;
}

static void fake_release(void *p_)
{
    fake_plan *p = p_;
    if (!p) return;
    fp4_matrix_free(&p->a);
    fp4_matrix_free(&p->b);
    free(p->d);
    free(p);
}

static fp4_status fake_prepare(void *inst, const fp4_gemm_problem *pr, int copies, void **out,
                               fp4_err *err)
{
    int mode = (int)(intptr_t)inst - 1;
    if (mode == FAKE_PREP_ERROR) return fp4_fail(err, FP4_ERR_IO, "weights file vanished");
    fake_plan *p = calloc(1, sizeof *p);
    p->mode = mode;
    p->n = (size_t)pr->shape.m * (size_t)pr->shape.n;
    p->d = malloc(p->n * sizeof(float));
    p->alpha = pr->alpha;
    fp4_matrix_copy(&p->a, pr->a, err);
    fp4_matrix_copy(&p->b, pr->b, err);
    *out = p;
    return FP4_OK;
}

static fp4_status fake_poison(void *p_, int copy, void *stream, fp4_err *err)
{
    fake_plan *p = p_;
    for (size_t i = 0; i < p->n; i++) p->d[i] = NAN;
    return FP4_OK;
}

/* The order in which the fakes ran (test_round_order), when order_log_on. */
static int order_log_on, order_log_n;
static int order_log[4096];

static fp4_status fake_run(void *p_, int copy, void *stream, fp4_err *err)
{
    fake_plan *p = p_;
    if (order_log_on && order_log_n < (int)(sizeof order_log / sizeof order_log[0]))
        order_log[order_log_n++] = p->mode;
    float last = p->d[p->n - 1];
    /* run() number 1 verifies, 2 estimates the batch, 3 warms up and 4 on
     * are samples: the 6th sample fails */
    if (p->mode == FAKE_RUN_ERROR && ++p->calls > 8)
        return fp4_fail(err, FP4_ERR_CUDA, "illegal memory access (simulated)");
    if (p->mode == FAKE_THERMAL) {
        spin_s(mono_s() - p->last_end < 0.5e-3 ? 2e-3 : 1e-3);
    }
    fp4_status st = fp4_gemm_reference(&p->a, &p->b, p->alpha, p->d, 1, err);
    p->last_end = mono_s();
    if (p->mode == FAKE_WRONG) p->d[p->n / 2] *= 1.1f;
    if (p->mode == FAKE_UNWRITTEN) p->d[p->n - 1] = last;
    if (p->mode == FAKE_ZEROS) memset(p->d, 0, p->n * sizeof(float));
    return st;
}

static fp4_status fake_read(void *p_, int copy, float *d, fp4_err *err)
{
    fake_plan *p = p_;
    memcpy(d, p->d, p->n * sizeof(float));
    return FP4_OK;
}

#define FAKE_OPEN(m)                                                                         \
    static fp4_status fake_open_##m(void **inst, fp4_err *err)                               \
    {                                                                                        \
        return fake_open_mode(inst, m, err);                                                 \
    }
FAKE_OPEN(0)
FAKE_OPEN(1)
FAKE_OPEN(2)
FAKE_OPEN(3)
FAKE_OPEN(4)
FAKE_OPEN(5)
FAKE_OPEN(6)
FAKE_OPEN(7)
FAKE_OPEN(8)

static fp4_status (*const fake_opens[FAKE_MODES + 1])(void **, fp4_err *) = {
    fake_open_0, fake_open_1, fake_open_2, fake_open_3, fake_open_4,
    fake_open_5, fake_open_6, fake_open_7, fake_open_8};
static const char *const fake_names[FAKE_MODES + 1] = {
    "good", "no-open", "no-shape", "prep-error", "wrong", "unwritten", "zeros", "run-error",
    "thermal"};

static fp4_backend_ops make_ops(int mode)
{
    fp4_backend_ops o;
    memset(&o, 0, sizeof o);
    o.api_version = FP4_BACKEND_API_VERSION;
    o.name = fake_names[mode];
    o.summary = "fake";
    o.math = FP4_MATH_CPU;
    o.tol_max = 1e-2;
    o.tol_norm = 5e-3;
    o.open = fake_opens[mode];
    o.close = fake_close;
    o.supports = fake_supports;
    o.prepare = fake_prepare;
    o.poison = fake_poison;
    o.run = fake_run;
    o.read_output = fake_read;
    o.release = fake_release;
    return o;
}

static const fp4_row *find_row(const fp4_report *r, const char *backend)
{
    for (int i = 0; i < r->nrows; i++)
        if (strcmp(r->rows[i].backend, backend) == 0) return &r->rows[i];
    return NULL;
}

static int rows_seen;
static void count_rows(const fp4_report *r, const fp4_row *row, void *user)
{
    (void)r;
    (void)row;
    (*(int *)user)++;
}

static void test_fake_backends(void)
{
    fp4_backend_ops ops[FAKE_MODES];
    const fp4_backend_ops *list[FAKE_MODES + 1];
    fp4_settings set;
    fp4_report rep;
    fp4_engine *e;
    fp4_err err;
    fp4_case c = {{5, 40, 64}, "fake"};
    for (int i = 0; i < FAKE_MODES; i++) {
        ops[i] = make_ops(i);
        list[i] = &ops[i];
    }
    list[FAKE_MODES] = fp4_backend_find("cpu-ref");
    fp4_settings_default(&set);
    set.warmup_ms = 0;
    /* more samples than run-error's 6 good ones, so that it always fails
     * mid-timing, whatever the noise of the others */
    set.stop.min_samples = 8;
    set.stop.max_time_s = 0.5;
    snprintf(set.baseline, sizeof set.baseline, "cpu-ref");
    set.time_reference = 1; /* the ratios are against the reference here */
    memset(&rep, 0, sizeof rep);
    { /* a stopping rule that cannot end is refused (a NaN limit once timed forever) */
        fp4_settings bad = set;
        bad.stop.max_time_s = NAN;
        CHECK(fp4_engine_create(&bad, &rep, &e, &err) == FP4_ERR_INVALID_ARG && e == NULL);
        bad = set;
        bad.stop.noise_target = 0;
        CHECK(fp4_engine_create(&bad, &rep, &e, &err) == FP4_ERR_INVALID_ARG);
        CHECK(fp4_engine_create(NULL, &rep, &e, &err) == FP4_ERR_INVALID_ARG);
    }
    CHECK(fp4_engine_create(&set, &rep, &e, &err) == FP4_OK);
    CHECK(fp4_engine_run_case(e, &c, 0, list, FAKE_MODES + 1, &rep, count_rows, &rows_seen,
                              &err) == FP4_OK);
    CHECK(rep.nrows == FAKE_MODES + 1);
    CHECK(rows_seen == FAKE_MODES + 1);

    const fp4_row *r = find_row(&rep, "good");
    CHECK(r && r->state == FP4_ROW_OK && r->verified == 1 && r->t.count >= 8);
    CHECK(r && r->has_ratio && r->ratio > 0);
    r = find_row(&rep, "cpu-ref");
    CHECK(r && r->state == FP4_ROW_OK && r->verified == -1 && r->t.count >= 8);
    CHECK(r && strstr(r->verify_note, "spot checks") != NULL);
    r = find_row(&rep, "no-open");
    CHECK(r && r->state == FP4_ROW_UNSUPPORTED && strstr(r->reason, "no such hardware"));
    CHECK(r && r->t.count == 0);
    r = find_row(&rep, "no-shape");
    CHECK(r && r->state == FP4_ROW_UNSUPPORTED && strstr(r->reason, "4096"));
    r = find_row(&rep, "prep-error");
    CHECK(r && r->state == FP4_ROW_FAILED && strstr(r->reason, "prepare: weights file vanished"));
    r = find_row(&rep, "wrong");
    CHECK(r && r->state == FP4_ROW_FAILED && strstr(r->reason, "verification") &&
          strstr(r->reason, "error max"));
    CHECK(r && r->t.count == 0); /* never timed */
    r = find_row(&rep, "unwritten");
    CHECK(r && r->state == FP4_ROW_FAILED && strstr(r->reason, "NaN"));
    r = find_row(&rep, "zeros");
    CHECK(r && r->state == FP4_ROW_FAILED && strstr(r->reason, "all zeros"));
    r = find_row(&rep, "run-error");
    CHECK_MSG(r && r->state == FP4_ROW_FAILED && strstr(r->reason, "timing: illegal memory access"),
              "run-error row: state %d, %d samples, reason \"%s\"", r ? (int)r->state : -1,
              r ? r->t.count : -1, r ? r->reason : "");
    CHECK(r && r->t.count == 0 && r->nsamples == 0 && !r->has_ratio); /* no time for a FAILED row */
    /* the table shows every reason */
    FILE *f = tmpfile();
    char buf[8192];
    fp4_report_print_table(f, &rep);
    rewind(f);
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    buf[len] = '\0';
    fclose(f);
    CHECK(strstr(buf, "no such hardware") && strstr(buf, "weights file vanished") &&
          strstr(buf, "all zeros"));
    fp4_report_free(&rep);
    /* nothing failed to clean up, so nothing to warn about */
    fp4_warnings warn;
    fp4_warnings_clear(&warn);
    fp4_engine_destroy(e, &warn);
    CHECK_MSG(warn.count == 0 && warn.text[0] == '\0', "%d warnings: %s", warn.count, warn.text);
}

/* The two rates of fp4_engine_measure_rate (the ceilings' rule): the
 * interleaved pass puts a light phase as long as the sample after each
 * sample, so the thermal fake runs cool (1 ms a call); the sustained pass
 * runs it back to back, hot (2 ms). Rows stay back to back afterwards. */
static void test_measure_rate(void)
{
    fp4_backend_ops thermal = make_ops(FAKE_THERMAL), no_open = make_ops(FAKE_NO_OPEN);
    const fp4_backend_ops *list[1] = {&thermal};
    fp4_settings set;
    fp4_report rep;
    fp4_engine *e;
    fp4_err err;
    fp4_rate r;
    fp4_shape shape = {4, 16, 32};
    fp4_case c = {{4, 16, 32}, "thermal"};
    fp4_settings_default(&set);
    set.warmup_ms = 20;
    set.stop.min_samples = 8;
    set.stop.noise_target = 0.02;
    set.stop.max_time_s = 0.5;
    memset(&rep, 0, sizeof rep);
    CHECK(fp4_engine_create(&set, &rep, &e, &err) == FP4_OK);
    CHECK_MSG(fp4_engine_measure_rate(e, &thermal, &shape, &r, &err) == FP4_OK, "%s", err.msg);
    CHECK(r.light_ratio == 1.0 && r.batch == 1 && r.copies == 1);
    CHECK(r.interleaved.count >= 8 && r.sustained.count >= 8);
    CHECK_MSG(r.interleaved.median > 0.9e3 && r.interleaved.median < 1.5e3,
              "interleaved median %g us, want about 1000", r.interleaved.median);
    CHECK_MSG(r.sustained.median > 1.8e3, "sustained median %g us, want about 2000",
              r.sustained.median);
    CHECK(r.interleaved_tflops > 1.3 * r.sustained_tflops);
    CHECK(fabs(r.interleaved_tflops - 2.0 * 4 * 16 * 32 / (r.interleaved.median * 1e-6) / 1e12) <
          1e-6 * r.interleaved_tflops);
    /* a backend that cannot run says why */
    CHECK(fp4_engine_measure_rate(e, &no_open, &shape, &r, &err) == FP4_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "no such hardware") != NULL && r.interleaved.count == 0);
    /* the light phase is the rate's alone: a row afterwards is back to back */
    CHECK(fp4_engine_run_case(e, &c, 0, list, 1, &rep, NULL, NULL, &err) == FP4_OK);
    CHECK(rep.nrows == 1 && rep.rows[0].state == FP4_ROW_OK);
    CHECK_MSG(rep.nrows == 1 && rep.rows[0].t.median > 1.8e3, "row median %g us, want about 2000",
              rep.nrows ? rep.rows[0].t.median : 0.0);
    fp4_report_free(&rep);
    fp4_engine_destroy(e, NULL);
}

/* Bad shapes never reach a backend. */
static void test_bad_case(void)
{
    fp4_settings set;
    fp4_report rep;
    fp4_engine *e;
    fp4_err err;
    const fp4_backend_ops *list[1] = {fp4_backend_find("cpu-ref")};
    fp4_case c = {{16, 64, 40}, "bad"};
    fp4_settings_default(&set);
    memset(&rep, 0, sizeof rep);
    CHECK(fp4_engine_create(&set, &rep, &e, &err) == FP4_OK);
    CHECK(fp4_engine_run_case(e, &c, 0, list, 1, &rep, NULL, NULL, &err) == FP4_ERR_SHAPE);
    CHECK(strstr(err.msg, "multiple of 16") != NULL);
    CHECK(rep.nrows == 0);
    fp4_report_free(&rep);
    fp4_engine_destroy(e, NULL);
}

/* ---- warnings ------------------------------------------------------------------ */

/* The sink itself: NULL-safe, one line per warning, bounded, counted. */
static void test_warning_sink(void)
{
    fp4_warnings w, all;
    fp4_warnings_clear(&w);
    fp4_warnings_clear(&all);
    fp4_warn(NULL, "ignored %d", 1);
    fp4_warn(&w, "first %d", 1);
    fp4_warn(&w, "second\nhas no second line");
    CHECK(w.count == 2 && strcmp(w.text, "first 1\nsecond\n") == 0);
    CHECK(fp4_warnings_dropped(&w) == 0);
    for (int i = 0; i < 100; i++) fp4_warn(&all, "a warning long enough to fill the text %03d", i);
    CHECK(all.count == 100);
    CHECK(strlen(all.text) < sizeof all.text && all.text[strlen(all.text) - 1] == '\n');
    CHECK(strstr(all.text, "text 000\n") != NULL && strstr(all.text, "text 099") == NULL);
    int kept = 0;
    for (const char *p = all.text; *p; p++) kept += *p == '\n';
    CHECK(kept > 10 && fp4_warnings_dropped(&all) == 100 - kept);
    fp4_warnings_append(&w, &all);
    CHECK(w.count == 102 && strncmp(w.text, "first 1\nsecond\n", 15) == 0);
    int lines = 0; /* w's two, then as many of all's as still fit */
    for (const char *p = w.text; *p; p++) lines += *p == '\n';
    CHECK((lines == kept + 1 || lines == kept + 2) && fp4_warnings_dropped(&w) == 102 - lines);
    fp4_warnings_clear(&w);
    CHECK(w.count == 0 && w.text[0] == '\0' && fp4_warnings_dropped(&w) == 0);
}

/* A backend whose release() and close() each fail a cleanup: the engine gives
 * it its sink, and the warnings reach the caller through fp4_engine_destroy. */
typedef struct warn_inst {
    fp4_warnings *w;
} warn_inst;

typedef struct warn_plan {
    void *inner; /* a FAKE_GOOD plan */
    fp4_warnings *w;
} warn_plan;

static fp4_status warn_open(void **inst, fp4_err *err)
{
    *inst = calloc(1, sizeof(warn_inst));
    return *inst ? FP4_OK : fp4_fail(err, FP4_ERR_NOMEM, "no memory");
}

static void warn_set(void *inst, fp4_warnings *w)
{
    ((warn_inst *)inst)->w = w;
}

static void warn_close(void *inst)
{
    fp4_warn(((warn_inst *)inst)->w, "close: handle not destroyed (simulated)");
    free(inst);
}

static fp4_status warn_prepare(void *inst, const fp4_gemm_problem *pr, int copies, void **out,
                               fp4_err *err)
{
    warn_plan *p = calloc(1, sizeof *p);
    if (!p) return fp4_fail(err, FP4_ERR_NOMEM, "no memory");
    p->w = ((warn_inst *)inst)->w;
    fp4_status st = fake_prepare((void *)(intptr_t)(FAKE_GOOD + 1), pr, copies, &p->inner, err);
    if (st != FP4_OK) free(p);
    else *out = p;
    return st;
}

static void warn_release(void *plan)
{
    warn_plan *p = plan;
    fake_release(p->inner);
    fp4_warn(p->w, "release: buffer not freed (simulated)");
    free(p);
}

static fp4_status warn_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    return fake_poison(((warn_plan *)plan)->inner, copy, stream, err);
}

static fp4_status warn_run(void *plan, int copy, void *stream, fp4_err *err)
{
    return fake_run(((warn_plan *)plan)->inner, copy, stream, err);
}

static fp4_status warn_read(void *plan, int copy, float *d, fp4_err *err)
{
    return fake_read(((warn_plan *)plan)->inner, copy, d, err);
}

static void test_backend_warnings(void)
{
    fp4_backend_ops o = make_ops(FAKE_GOOD);
    const fp4_backend_ops *list[1] = {&o};
    fp4_settings set;
    fp4_report rep;
    fp4_engine *e;
    fp4_err err;
    fp4_warnings warn;
    fp4_case c = {{4, 16, 32}, "warn"};
    o.name = "warns";
    o.open = warn_open;
    o.close = warn_close;
    o.prepare = warn_prepare;
    o.poison = warn_poison;
    o.run = warn_run;
    o.read_output = warn_read;
    o.release = warn_release;
    o.set_warnings = warn_set;
    fp4_settings_default(&set);
    set.warmup_ms = 0;
    set.stop.max_time_s = 0.2;
    memset(&rep, 0, sizeof rep);
    CHECK(fp4_engine_create(&set, &rep, &e, &err) == FP4_OK);
    CHECK(fp4_engine_warnings(e)->count == 0);
    CHECK(fp4_engine_run_case(e, &c, 0, list, 1, &rep, NULL, NULL, &err) == FP4_OK);
    CHECK(rep.nrows == 1 && rep.rows[0].state == FP4_ROW_OK); /* a warning fails nothing */
    const fp4_warnings *w = fp4_engine_warnings(e);
    CHECK(w->count == 1 && strstr(w->text, "release: buffer not freed") != NULL);
    fp4_warnings_clear(&warn);
    fp4_warn(&warn, "the caller's own");
    fp4_engine_destroy(e, &warn);
    CHECK_MSG(warn.count == 3, "%d warnings: %s", warn.count, warn.text);
    CHECK(strncmp(warn.text, "the caller's own\n", 17) == 0);
    CHECK(strstr(warn.text, "release: buffer not freed") != NULL);
    CHECK(strstr(warn.text, "close: handle not destroyed") != NULL);
    fp4_report_free(&rep);
}

static void test_compare_outputs(void)
{
    float r[4] = {1, -2, 3, 4}, d[4] = {1, -2, 3, 4};
    fp4_verdict v;
    fp4_compare_outputs(d, r, 4, 1e-2, 5e-3, &v);
    CHECK(v.pass && v.err_max == 0 && v.err_norm == 0);
    d[3] = 4.1f;
    fp4_compare_outputs(d, r, 4, 1e-2, 5e-3, &v);
    CHECK(!v.pass && fabs(v.err_max - 0.025) < 1e-6);
    d[3] = NAN;
    fp4_compare_outputs(d, r, 4, 1, 1, &v);
    CHECK(!v.pass && v.nonfinite == 1);
    memset(d, 0, sizeof d);
    fp4_compare_outputs(d, r, 4, 100, 100, &v);
    CHECK(!v.pass && v.all_zero);
    /* an overflowing reference gives no verdict, never a pass */
    float rinf[4] = {1, INFINITY, 3, 4}, d2[4] = {1, 2, 3, 4};
    fp4_compare_outputs(d2, rinf, 4, 100, 100, &v);
    CHECK(!v.pass && strstr(v.why, "reference") != NULL);
    float rnan[4] = {NAN, NAN, NAN, NAN};
    fp4_compare_outputs(d2, rnan, 4, 100, 100, &v);
    CHECK(!v.pass);
}

/* Plugins: a good one loads and runs; wrong version and missing symbol are
 * refused with a message. The plugin objects are built by tests/CMakeLists. */
static void test_plugins(const char *dir)
{
    char path[1024];
    const fp4_backend_ops *ops;
    void *h;
    fp4_err err;
    snprintf(path, sizeof path, "%s/libfp4_plugin_good.so", dir);
    CHECK_MSG(fp4_backend_load(path, &ops, &h, &err) == FP4_OK, "%s", err.msg);
    if (h) {
        CHECK(strcmp(ops->name, "plugin-good") == 0);
        void *inst;
        CHECK(ops->open(&inst, &err) == FP4_OK);
        ops->close(inst);
        fp4_backend_unload(h);
    }
    snprintf(path, sizeof path, "%s/libfp4_plugin_oldabi.so", dir);
    CHECK(fp4_backend_load(path, &ops, &h, &err) == FP4_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "API version 0") != NULL);
    snprintf(path, sizeof path, "%s/libfp4_plugin_nosym.so", dir);
    CHECK(fp4_backend_load(path, &ops, &h, &err) == FP4_ERR_FORMAT);
    CHECK(strstr(err.msg, "fp4_backend_entry") != NULL);
    CHECK(fp4_backend_load("/nonexistent/x.so", &ops, &h, &err) == FP4_ERR_IO);
}

/* A backend that is not a GEMM (FP4_BACKEND_NOT_GEMM, the quantizer) gets no
 * ratio against the baseline, in the row and so in the table, CSV and JSON;
 * nor does anything get a ratio against it as the baseline. Without a GPU a
 * GPU backend's row says only "no NVIDIA GPU" (the CUDA error is in the
 * device's why_absent, printed once). */
static void test_not_gemm_and_no_gpu(void)
{
    fp4_backend_ops good = make_ops(FAKE_GOOD), quant = make_ops(FAKE_GOOD);
    fp4_backend_ops gpu = make_ops(FAKE_GOOD);
    const fp4_backend_ops *list[4] = {fp4_backend_find("cpu-ref"), &good, &quant, &gpu};
    fp4_settings set;
    fp4_report rep;
    fp4_engine *e;
    fp4_err err;
    fp4_case c = {{4, 32, 64}, "notgemm"};
    quant.name = "fake-quantize";
    quant.flags = FP4_BACKEND_NOT_GEMM;
    gpu.name = "fake-gpu";
    gpu.flags = FP4_BACKEND_GPU;
    fp4_settings_default(&set);
    set.warmup_ms = 0;
    set.stop.max_time_s = 0.2;
    snprintf(set.baseline, sizeof set.baseline, "cpu-ref");
    memset(&rep, 0, sizeof rep);
    CHECK(fp4_engine_create(&set, &rep, &e, &err) == FP4_OK);
    CHECK(fp4_engine_run_case(e, &c, 0, list, 4, &rep, NULL, NULL, &err) == FP4_OK);
    const fp4_row *g = find_row(&rep, "good"), *q = find_row(&rep, "fake-quantize");
    CHECK(g && g->state == FP4_ROW_OK && g->has_ratio);
    CHECK_MSG(q && q->state == FP4_ROW_OK && !q->has_ratio && q->t.count > 0,
              "quantize row: has_ratio %d", q ? q->has_ratio : -1);
    const fp4_row *u = find_row(&rep, "fake-gpu");
    if (!rep.dev.present) {
        CHECK_MSG(u && u->state == FP4_ROW_UNSUPPORTED && strcmp(u->reason, "no NVIDIA GPU") == 0,
                  "GPU row without a GPU: \"%s\"", u ? u->reason : "");
        CHECK(rep.dev.why_absent[0] != '\0');
    }
    /* the writers: "-" in the table's ratio cell, empty CSV fields */
    FILE *f = tmpfile();
    char buf[8192], *line;
    size_t len;
    fp4_report_print_table(f, &rep);
    rewind(f);
    len = fread(buf, 1, sizeof buf - 1, f);
    buf[len] = '\0';
    fclose(f);
    line = strstr(buf, "fake-quantize");
    if (line && strchr(line, '\n')) *strchr(line, '\n') = '\0'; /* that row's line alone */
    CHECK_MSG(line && strstr(line, "  -  ") != NULL && strstr(line, "x [") == NULL, "quantize row: %s",
              line ? line : "(none)");
    f = tmpfile();
    CHECK(q && fp4_csv_write_row(f, q, &err) == FP4_OK);
    rewind(f);
    len = fread(buf, 1, sizeof buf - 1, f);
    buf[len] = '\0';
    fclose(f);
    CHECK_MSG(strstr(buf, ",,,,,,,,,,") != NULL, "CSV: %s", buf); /* ratio .. telemetry empty */
    fp4_report_free(&rep);
    fp4_engine_destroy(e, NULL);

    /* the quantizer as the baseline: nobody gets a ratio */
    snprintf(set.baseline, sizeof set.baseline, "fake-quantize");
    memset(&rep, 0, sizeof rep);
    CHECK(fp4_engine_create(&set, &rep, &e, &err) == FP4_OK);
    CHECK(fp4_engine_run_case(e, &c, 0, list, 3, &rep, NULL, NULL, &err) == FP4_OK);
    for (int i = 0; i < rep.nrows; i++)
        CHECK_MSG(!rep.rows[i].has_ratio, "%s has a ratio against a non-GEMM",
                  rep.rows[i].backend);
    fp4_report_free(&rep);
    fp4_engine_destroy(e, NULL);
}

/* The references verify and are not timed beside a contender, unless asked
 * (time_reference) or alone; the report says the round order's seed. */
static void test_reference_timing(void)
{
    fp4_backend_ops good = make_ops(FAKE_GOOD);
    const fp4_backend_ops *both[2] = {fp4_backend_find("cpu-ref"), &good};
    fp4_case c = {{5, 40, 64}, "ref"};
    for (int mode = 0; mode < 3; mode++) { /* default, time_reference, the reference alone */
        fp4_settings set;
        fp4_report rep;
        fp4_engine *e;
        fp4_err err;
        fp4_settings_default(&set);
        set.warmup_ms = 0;
        set.stop.max_time_s = 0.2;
        set.time_reference = mode == 1;
        memset(&rep, 0, sizeof rep);
        CHECK(fp4_engine_create(&set, &rep, &e, &err) == FP4_OK);
        CHECK(rep.set.order_seed != 0); /* derived from the seed and recorded */
        CHECK(fp4_engine_run_case(e, &c, 0, both, mode == 2 ? 1 : 2, &rep, NULL, NULL, &err) ==
              FP4_OK);
        const fp4_row *ref = find_row(&rep, "cpu-ref"), *g = find_row(&rep, "good");
        CHECK(ref && ref->state == FP4_ROW_OK && ref->verified == -1);
        CHECK_MSG(ref && (mode == 0 ? ref->t.count == 0 : ref->t.count >= 10),
                  "mode %d: the reference has %d samples", mode, ref ? ref->t.count : -1);
        if (mode < 2) CHECK(g && g->state == FP4_ROW_OK && g->t.count >= 10);
        fp4_report_free(&rep);
        fp4_engine_destroy(e, NULL);
    }
}

/* Every round runs its backends in a fresh order: two fakes timed together
 * both lead some rounds, and the same seed gives the same order. */
static void test_round_order(void)
{
    fp4_backend_ops a = make_ops(FAKE_GOOD), b = make_ops(FAKE_THERMAL);
    b.name = "second";
    const fp4_backend_ops *list[2] = {&a, &b};
    fp4_case c = {{4, 16, 32}, "order"};
    int first[2][2] = {{0, 0}, {0, 0}}, logs[2][64], nlog[2] = {0, 0};
    for (int run = 0; run < 2; run++) {
        fp4_settings set;
        fp4_report rep;
        fp4_engine *e;
        fp4_err err;
        fp4_settings_default(&set);
        set.warmup_ms = 0;
        set.stop.min_samples = 30;
        set.stop.max_time_s = 0.5;
        memset(&rep, 0, sizeof rep);
        CHECK(fp4_engine_create(&set, &rep, &e, &err) == FP4_OK);
        order_log_n = 0;
        order_log_on = 1;
        CHECK(fp4_engine_run_case(e, &c, 0, list, 2, &rep, NULL, NULL, &err) == FP4_OK);
        order_log_on = 0;
        /* the log holds each fake's verification and estimate runs, then one
         * pair a round: the warm-up round and a round a sample; which fake
         * led each of the first 30 rounds */
        const fp4_row *ra = find_row(&rep, "good");
        const int rounds = ra ? ra->t.count + 1 : 0, start = order_log_n - 2 * rounds;
        CHECK(ra && rounds >= 31 && start >= 4);
        for (int r = 0; start >= 0 && r < 30 && r < rounds; r++) {
            const int lead = order_log[start + 2 * r] == FAKE_GOOD ? 0 : 1;
            CHECK(order_log[start + 2 * r + 1] != order_log[start + 2 * r]); /* one of each */
            first[run][lead]++;
            logs[run][nlog[run]++] = lead;
        }
        fp4_report_free(&rep);
        fp4_engine_destroy(e, NULL);
    }
    CHECK_MSG(first[0][0] > 0 && first[0][1] > 0, "one backend led every round: %d / %d",
              first[0][0], first[0][1]);
    CHECK(nlog[0] == nlog[1] && memcmp(logs[0], logs[1], (size_t)nlog[0] * sizeof(int)) == 0);
}

/* A problem whose operands do not match its shape is refused by prepare(),
 * not computed past the operands' buffers. */
static void test_problem_check(void)
{
    const fp4_backend_ops *cpu = fp4_backend_find("cpu-ref");
    float x[4 * 32];
    fp4_matrix a4;
    fp4_err err;
    void *inst = NULL, *plan = NULL;
    for (int i = 0; i < 4 * 32; i++) x[i] = (float)((i * 7) % 13) - 6.0f;
    CHECK(cpu != NULL && fp4_quantize_f32(x, 4, 32, 0.0f, &a4, &err) == FP4_OK);
    if (!cpu || cpu->open(&inst, &err) != FP4_OK) return;
    fp4_gemm_problem p;
    memset(&p, 0, sizeof p);
    p.shape = (fp4_shape){8, 8, 32};
    p.a = p.b = &a4;
    p.alpha = 1.0f;
    CHECK(cpu->prepare(inst, &p, 1, &plan, &err) == FP4_ERR_SHAPE && plan == NULL);
    CHECK(strstr(err.msg, "A is [4, 32], the shape wants [8, 32]") != NULL);
    p.shape = (fp4_shape){4, 4, 32};
    CHECK(cpu->prepare(inst, &p, 0, &plan, &err) == FP4_ERR_INVALID_ARG); /* copies */
    CHECK(cpu->prepare(inst, &p, 1, &plan, &err) == FP4_OK && plan != NULL);
    if (plan) cpu->release(plan);
    cpu->close(inst);
    fp4_matrix_free(&a4);
}

int main(int argc, char **argv)
{
    test_problem_check();
    test_not_gemm_and_no_gpu();
    test_compare_outputs();
    test_bad_case();
    test_fake_backends();
    test_reference_timing();
    test_round_order();
    test_measure_rate();
    test_warning_sink();
    test_backend_warnings();
    test_plugins(argc > 1 ? argv[1] : ".");
    return check_finish("test_engine");
}
