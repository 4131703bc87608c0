/* compare: rows matched through the hash table (repeated keys in order, every
 * key field counts, 200k rows in well under a second), the verdicts of rows
 * timed on the host (never a regression), one warning line per differing
 * setting, and the table's full reasons with verbose. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "fp4/engine.h"
#include "fp4/report.h"

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* An ok row with the given statistics; no samples (compare reads only t). */
static fp4_row timed_row(const char *backend, const char *label, int64_t m, const char *l2,
                         const char *timing, double median, double p10, double p90, double noise)
{
    fp4_row x;
    memset(&x, 0, sizeof x);
    snprintf(x.backend, sizeof x.backend, "%s", backend);
    snprintf(x.label, sizeof x.label, "%s", label);
    x.shape.m = m;
    x.shape.n = 256;
    x.shape.k = 64;
    x.state = FP4_ROW_OK;
    x.verified = 1;
    snprintf(x.l2, sizeof x.l2, "%s", l2);
    snprintf(x.timing, sizeof x.timing, "%s", timing);
    x.t.count = 50;
    x.t.median = median;
    x.t.p10 = p10;
    x.t.p90 = p90;
    x.t.min = p10;
    x.t.max = p90;
    x.t.mean = median;
    x.t.noise = noise;
    x.ratio = x.ratio_lo = x.ratio_hi = NAN;
    return x;
}

static int add_failures;

/* Append x; failures are counted (one CHECK for 200k rows would be 200k). */
static void add(fp4_report *r, fp4_row x)
{
    fp4_err err;
    if (fp4_report_add(r, &x, &err) != FP4_OK) {
        if (add_failures++ == 0) fprintf(stderr, "add: %s\n", fp4_err_text(&err));
    }
}

static void new_report(fp4_report *r)
{
    memset(r, 0, sizeof *r);
    fp4_settings_default(&r->set);
}

/* Everything written to f, NUL-terminated (caller frees); f is closed. */
static char *slurp_close(FILE *f)
{
    long n;
    char *b;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = '\0';
    fclose(f);
    return b;
}

/* The verdict (last cell) of the compare line whose first two cells are
 * backend and label and whose shape starts with M "x"; "" if none. */
static const char *verdict_of(const char *text, const char *backend, const char *label, int64_t m,
                              char *out, size_t cap)
{
    char want[160];
    const char *p = text;
    out[0] = '\0';
    snprintf(want, sizeof want, "%lldx", (long long)m);
    while (p && *p) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char line[512], b[64], l[64], shape[64], last[64] = "";
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        if (sscanf(line, "%63s %63s %63s", b, l, shape) == 3 && strcmp(b, backend) == 0 &&
            strcmp(l, label) == 0 && strncmp(shape, want, strlen(want)) == 0) {
            char *tok, *save = NULL;
            for (tok = strtok_r(line, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
                snprintf(last, sizeof last, "%s", tok);
            snprintf(out, cap, "%s", last);
            return out;
        }
        p = end ? end + 1 : NULL;
    }
    return out;
}

/* Matching: repeated keys pair up in order; a row differing in any one key
 * field (backend, label, M, L2) does not match; unmatched rows are new/gone. */
static void test_matching(void)
{
    fp4_report o, n;
    fp4_err err;
    fp4_compare_opts opts = {0.05, 0};
    char v[64];
    new_report(&o);
    new_report(&n);
    /* the same key twice: old 100 then 200; new 100 then 200 -> both same */
    add(&o, timed_row("a", "dup", 1, "cold", "graph", 100, 99, 101, 0.001));
    add(&o, timed_row("a", "dup", 1, "cold", "graph", 200, 199, 201, 0.001));
    add(&n, timed_row("a", "dup", 1, "cold", "graph", 100, 99, 101, 0.001));
    add(&n, timed_row("a", "dup", 1, "cold", "graph", 200, 199, 201, 0.001));
    /* one field differs each: no match */
    add(&o, timed_row("b", "x", 2, "cold", "graph", 100, 99, 101, 0.001));
    add(&n, timed_row("b", "x", 2, "hot", "graph", 100, 99, 101, 0.001));
    add(&o, timed_row("c", "x", 3, "cold", "graph", 100, 99, 101, 0.001));
    add(&n, timed_row("c", "y", 3, "cold", "graph", 100, 99, 101, 0.001));
    add(&o, timed_row("d", "x", 4, "cold", "graph", 100, 99, 101, 0.001));
    add(&n, timed_row("d", "x", 5, "cold", "graph", 100, 99, 101, 0.001));
    /* a field boundary must not make ("ab", "c") equal ("a", "bc") */
    add(&o, timed_row("ab", "c", 6, "cold", "graph", 100, 99, 101, 0.001));
    add(&n, timed_row("a", "bc", 6, "cold", "graph", 100, 99, 101, 0.001));

    FILE *f = tmpfile();
    int reg = fp4_report_compare_rows(f, &o, &n, &opts, &err);
    char *text = slurp_close(f);
    CHECK_MSG(reg == 0, "regressions %d", reg);
    CHECK(text != NULL);
    if (text) {
        /* matched in order: a repeated key of 100 then 200 gives two "same" */
        CHECK(strstr(text, "2 matched") != NULL);
        CHECK_MSG(strstr(text, "4 new, 4 gone") != NULL, "%s", text);
        CHECK(strcmp(verdict_of(text, "a", "dup", 1, v, sizeof v), "same") == 0);
        CHECK(strstr(text, "0 faster, 0 slower, 2 same") != NULL);
        CHECK(strstr(text, "warning") == NULL); /* the rows part prints no warnings */
    }
    free(text);
    /* the CLI's rule: each of the 4 gone rows is a regression */
    opts.gone_is_regression = 1;
    reg = fp4_report_compare_rows(NULL, &o, &n, &opts, &err);
    CHECK_MSG(reg == 4, "regressions %d with gone rows counted, want 4", reg);
    /* no row in common: not runs of the same cases, an error */
    fp4_report_free(&o);
    new_report(&o);
    add(&o, timed_row("z", "x", 9, "cold", "graph", 100, 99, 101, 0.001));
    reg = fp4_report_compare_rows(NULL, &o, &n, &opts, &err);
    CHECK_MSG(reg == -1 && strstr(err.msg, "not runs of the same cases"), "%d %s", reg, err.msg);
    fp4_report_free(&o);
    fp4_report_free(&n);
}

/* 200k rows each side, in reverse order (the worst case of a linear scan),
 * with one real regression: matched and judged in well under a second. */
static void test_many_rows(void)
{
    enum { NROWS = 200000 };
    fp4_report o, n;
    fp4_err err;
    fp4_compare_opts opts = {0.05, 0};
    char label[32];
    new_report(&o);
    new_report(&n);
    for (int i = 0; i < NROWS; i++) {
        snprintf(label, sizeof label, "L%d", i % 1000);
        add(&o, timed_row(i % 2 ? "fp4-sm90" : "cublas-bf16", label, 1 + i / 1000, "cold",
                          "graph", 100, 99, 101, 0.001));
    }
    for (int i = NROWS - 1; i >= 0; i--) {
        double t = i == 12345 ? 150 : 100;
        snprintf(label, sizeof label, "L%d", i % 1000);
        add(&n, timed_row(i % 2 ? "fp4-sm90" : "cublas-bf16", label, 1 + i / 1000, "cold",
                          "graph", t, t - 1, t + 1, 0.001));
    }
    CHECK(o.nrows == NROWS && n.nrows == NROWS);
    double t0 = mono_s();
    int reg = fp4_report_compare_rows(NULL, &o, &n, &opts, &err);
    double dt = mono_s() - t0;
    CHECK_MSG(reg == 1, "regressions %d, want 1", reg);
    CHECK_MSG(dt < 1.0, "compare of %d rows took %.2f s", NROWS, dt);
    /* printing them too stays linear */
    FILE *f = tmpfile();
    t0 = mono_s();
    reg = fp4_report_compare_rows(f, &o, &n, &opts, &err);
    dt = mono_s() - t0;
    char *text = slurp_close(f);
    CHECK(reg == 1);
    CHECK_MSG(dt < 3.0, "compare with its table of %d rows took %.2f s", NROWS, dt);
    CHECK(text && strstr(text, "200000 matched") && strstr(text, "1 slower"));
    free(text);
    fp4_report_free(&o);
    fp4_report_free(&n);
}

/* Rows timed on the host: a move within the combined noise, or with the
 * samples overlapping, is "same"; samples apart is cpu-slower / cpu-faster,
 * and none of them is a regression. The same numbers on the GPU are. */
static void test_host_verdicts(void)
{
    fp4_report o, n;
    fp4_err err;
    fp4_compare_opts opts = {0.05, 0};
    char v[64];
    new_report(&o);
    new_report(&n);
    /* 15% slower, tight CIs, samples overlapping (the drift of a loaded CPU) */
    add(&o, timed_row("cpu-ref", "overlap", 1, "n/a", "host", 29119, 19932, 31250, 0.022));
    add(&n, timed_row("cpu-ref", "overlap", 1, "n/a", "host", 33514, 29169, 37512, 0.025));
    /* 10% slower within the combined noise: same */
    add(&o, timed_row("cpu-ref", "noisy", 2, "n/a", "host", 100, 90, 101, 0.05));
    add(&n, timed_row("cpu-ref", "noisy", 2, "n/a", "host", 110, 102, 120, 0.05));
    /* 1.7x with the samples apart: cpu-slower, still not a regression */
    add(&o, timed_row("cpu-ref", "apart", 3, "n/a", "host", 100, 95, 105, 0.005));
    add(&n, timed_row("cpu-ref", "apart", 3, "n/a", "host", 170, 160, 180, 0.005));
    add(&o, timed_row("cpu-ref", "quick", 4, "n/a", "host", 170, 160, 180, 0.005));
    add(&n, timed_row("cpu-ref", "quick", 4, "n/a", "host", 100, 95, 105, 0.005));
    /* the overlap case on the GPU: the CI says slower, and that counts */
    add(&o, timed_row("gpu", "overlap", 1, "cold", "graph", 29119, 19932, 31250, 0.022));
    add(&n, timed_row("gpu", "overlap", 1, "cold", "graph", 33514, 29169, 37512, 0.025));

    FILE *f = tmpfile();
    int reg = fp4_report_compare_rows(f, &o, &n, &opts, &err);
    char *text = slurp_close(f);
    CHECK_MSG(reg == 1, "regressions %d, want 1 (the GPU row)", reg);
    CHECK(text != NULL);
    if (text) {
        CHECK_MSG(strcmp(verdict_of(text, "cpu-ref", "overlap", 1, v, sizeof v), "same") == 0,
                  "overlap: %s", v);
        CHECK_MSG(strcmp(verdict_of(text, "cpu-ref", "noisy", 2, v, sizeof v), "same") == 0,
                  "noisy: %s", v);
        CHECK_MSG(strcmp(verdict_of(text, "cpu-ref", "apart", 3, v, sizeof v), "cpu-slower") == 0,
                  "apart: %s", v);
        CHECK_MSG(strcmp(verdict_of(text, "cpu-ref", "quick", 4, v, sizeof v), "cpu-faster") == 0,
                  "quick: %s", v);
        CHECK_MSG(strcmp(verdict_of(text, "gpu", "overlap", 1, v, sizeof v), "slower") == 0,
                  "gpu: %s", v);
        CHECK(strstr(text, "1 cpu-faster, 1 cpu-slower") != NULL);
        CHECK(strstr(text, "1 regression") != NULL);
    }
    free(text);
    /* swapped: the CPU rows still never count */
    reg = fp4_report_compare_rows(NULL, &n, &o, &opts, &err);
    CHECK_MSG(reg == 0, "swapped regressions %d, want 0", reg);
    fp4_report_free(&o);
    fp4_report_free(&n);
}

static int count_lines(const char *text, const char *needle)
{
    int c = 0;
    for (const char *p = text; p && (p = strstr(p, needle)) != NULL; p++) c++;
    return c;
}

/* One warning line per differing setting, none for equal settings; the
 * full compare prints them before its table. */
static void test_settings_warnings(void)
{
    fp4_report o, n;
    fp4_err err;
    fp4_compare_opts opts = {0.05, 0};
    new_report(&o);
    new_report(&n);
    o.dev.present = n.dev.present = 1;
    snprintf(o.dev.name, sizeof o.dev.name, "NVIDIA H200");
    snprintf(n.dev.name, sizeof n.dev.name, "NVIDIA H200");
    o.dev.cpu_threads = n.dev.cpu_threads = 16;
    CHECK(fp4_report_compare_settings(NULL, &o, &n) == 0);

    snprintf(n.dev.name, sizeof n.dev.name, "NVIDIA H100 80GB HBM3");
    n.set.data = FP4_DATA_CODES;
    n.set.hot = 1;
    n.set.use_graphs = 0;
    n.set.stop.noise_target = 0.01;
    n.set.stop.max_time_s = 3;
    FILE *f = tmpfile();
    int k = fp4_report_compare_settings(f, &o, &n);
    char *text = slurp_close(f);
    CHECK_MSG(k == 6, "%d settings differ, want 6", k);
    CHECK(text != NULL);
    if (text) {
        CHECK_MSG(count_lines(text, "\n") == 6 && count_lines(text, "warning: ") == 6, "%s", text);
        CHECK(strstr(text, "different GPUs (old: NVIDIA H200, new: NVIDIA H100 80GB HBM3)"));
        CHECK(strstr(text, "different data (old: gaussian, new: codes)"));
        CHECK(strstr(text, "different L2 modes (old: cold, new: hot)"));
        CHECK(strstr(text, "different timing modes (old: graph, new: launch)"));
        CHECK(strstr(text, "different noise targets (old: 0.5%, new: 1%)"));
        CHECK(strstr(text, "different max times (old: 10 s, new: 3 s)"));
    }
    free(text);

    /* the whole compare: warnings first, then the table */
    add(&o, timed_row("a", "x", 1, "cold", "graph", 100, 99, 101, 0.001));
    add(&n, timed_row("a", "x", 1, "cold", "graph", 100, 99, 101, 0.001));
    f = tmpfile();
    CHECK(fp4_report_compare(f, &o, &n, &opts, &err) == 0);
    text = slurp_close(f);
    CHECK(text && strncmp(text, "warning: ", 9) == 0 && strstr(text, "backend") > strstr(text, "max times"));
    free(text);
    fp4_report_free(&o);
    fp4_report_free(&n);
}

/* The table cuts a long reason; verbose prints it whole. */
static void test_verbose_table(void)
{
    fp4_report r;
    fp4_row x;
    const char *reason =
        "needs sm_100a: tcgen05 instructions are Blackwell-only, and this reason runs on well "
        "past sixty characters to the END-MARKER";
    new_report(&r);
    add(&r, timed_row("cpu-ref", "t", 1, "n/a", "host", 100, 99, 101, 0.001));
    x = timed_row("cublaslt-nvfp4", "t", 1, "cold", "graph", NAN, NAN, NAN, NAN);
    x.state = FP4_ROW_UNSUPPORTED;
    x.t.count = 0;
    snprintf(x.reason, sizeof x.reason, "%s", reason);
    add(&r, x);

    FILE *f = tmpfile();
    fp4_report_print_table(f, &r);
    char *text = slurp_close(f);
    CHECK(text && strstr(text, "unsupported: needs sm_100a") && !strstr(text, "END-MARKER") &&
          strstr(text, "..."));
    free(text);
    f = tmpfile();
    fp4_report_print_table_verbose(f, &r, 0);
    text = slurp_close(f);
    CHECK(text && !strstr(text, "END-MARKER"));
    free(text);
    f = tmpfile();
    fp4_report_print_table_verbose(f, &r, 1);
    text = slurp_close(f);
    CHECK(text && strstr(text, reason) != NULL);
    free(text);
    fp4_report_free(&r);
}

int main(void)
{
    test_matching();
    test_many_rows();
    test_host_verdicts();
    test_settings_warnings();
    test_verbose_table();
    CHECK_MSG(add_failures == 0, "%d rows could not be added", add_failures);
    return check_finish("test_compare");
}
