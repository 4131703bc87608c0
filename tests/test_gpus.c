/* fp4bench run --gpus on the CPU: the GPU list (parse and resolve), the
 * comparison of made-up per-GPU rows (spread, the slow rule's 3% and noise
 * terms, throttling, the geometric means, groups of a case listed twice), and
 * the outputs that carry it (table with the gpu column, flag S and the node
 * summary; JSON written and read back, an old file without gpu; the CSV's gpu
 * column; compare matching rows GPU by GPU). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fp4/engine.h"
#include "fp4/report.h"
#include "multigpu/pergpu.h"

/* ---- the list ------------------------------------------------------------------ */

static void test_parse(void)
{
    fp4_gpu_list l;
    fp4_err err;
    CHECK(fp4_gpu_list_parse("all", &l, &err) == FP4_OK && l.all && l.n == 0);
    CHECK(fp4_gpu_list_parse("3,0,1", &l, &err) == FP4_OK && !l.all && l.n == 3 && l.index[0] == 3 &&
          l.index[1] == 0 && l.index[2] == 1);
    CHECK(fp4_gpu_list_parse("7", &l, &err) == FP4_OK && l.n == 1 && l.index[0] == 7);
    static const char *const bad[] = {"", ",", "0,", ",0", "0,,1", "x", "-1", "+1", "1e3", " 1",
                                      "1 ", "0x1", "1.0", "12345", "ALL", "all,0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fp4_err_clear(&err);
        CHECK_MSG(fp4_gpu_list_parse(bad[i], &l, &err) == FP4_ERR_INVALID_ARG && err.msg[0],
                  "'%s' accepted", bad[i]);
    }
    CHECK(fp4_gpu_list_parse("0,1,0", &l, &err) == FP4_ERR_INVALID_ARG &&
          strstr(err.msg, "GPU 0 listed twice"));
    CHECK(fp4_gpu_list_parse("x", &l, &err) == FP4_ERR_INVALID_ARG &&
          strstr(err.msg, "'x' is not a GPU number"));
    CHECK(fp4_gpu_list_parse("0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15", &l, &err) == FP4_OK &&
          l.n == FP4_MAX_GPUS);
    CHECK(fp4_gpu_list_parse("0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", &l, &err) ==
              FP4_ERR_INVALID_ARG && strstr(err.msg, "at most 16"));
}

static void test_resolve(void)
{
    fp4_gpu_list l;
    fp4_err err;
    fp4_gpu_list_parse("all", &l, &err);
    CHECK(fp4_gpu_list_resolve(&l, 0, &err) == FP4_ERR_UNSUPPORTED && strstr(err.msg, "no CUDA device"));
    CHECK(fp4_gpu_list_resolve(&l, 4, &err) == FP4_OK && l.n == 4 && l.index[3] == 3);
    fp4_gpu_list_parse("all", &l, &err);
    CHECK(fp4_gpu_list_resolve(&l, 20, &err) == FP4_ERR_INVALID_ARG);
    fp4_gpu_list_parse("0,1,2", &l, &err);
    CHECK(fp4_gpu_list_resolve(&l, 2, &err) == FP4_ERR_INVALID_ARG &&
          strstr(err.msg, "3 GPUs listed, 2 CUDA devices"));
    fp4_gpu_list_parse("1,5", &l, &err);
    CHECK(fp4_gpu_list_resolve(&l, 4, &err) == FP4_ERR_INVALID_ARG &&
          strstr(err.msg, "GPU 5 does not exist"));
    fp4_gpu_list_parse("1,3", &l, &err);
    CHECK(fp4_gpu_list_resolve(&l, 4, &err) == FP4_OK && l.n == 2);
    fp4_gpu_list_parse("0", &l, &err);
    CHECK(fp4_gpu_list_resolve(&l, 0, &err) == FP4_ERR_UNSUPPORTED);
}

/* ---- made-up rows ----------------------------------------------------------------- */

static fp4_row make_row(const char *label, int64_t m, const char *backend, int gpu, double median,
                        double noise)
{
    fp4_row x;
    memset(&x, 0, sizeof x);
    snprintf(x.label, sizeof x.label, "%s", label);
    x.shape.m = m;
    x.shape.n = 2048;
    x.shape.k = 6144;
    snprintf(x.backend, sizeof x.backend, "%s", backend);
    snprintf(x.l2, sizeof x.l2, "cold");
    snprintf(x.timing, sizeof x.timing, "graph");
    x.gpu = gpu;
    x.state = FP4_ROW_OK;
    x.verified = 1;
    x.t.count = 40;
    x.t.median = x.t.p10 = x.t.p90 = x.t.min = x.t.max = x.t.mean = median;
    x.t.noise = noise;
    x.pct_peak = x.pct_roofline = -1;
    x.own_err = -1;
    x.tel.valid = 1;
    x.tel.samples = 40;
    x.tel.sm_clock_mhz = 1980;
    x.tel.sm_clock_min_mhz = 1950;
    x.tel.power_w = 500;
    return x;
}

static void add(fp4_report *r, fp4_row x)
{
    fp4_err err;
    CHECK(fp4_report_add(r, &x, &err) == FP4_OK);
}

/* Four GPUs (CUDA numbers 0, 1, 2, 5: the list need not be 0..n-1), the
 * report of a run of two cases on two backends (a, b), then case "A" again. */
static void make_node(fp4_report *r)
{
    static const int dev[4] = {0, 1, 2, 5};
    memset(r, 0, sizeof *r);
    fp4_settings_default(&r->set);
    r->ngpus = 4;
    for (int i = 0; i < 4; i++) {
        fp4_device_info *d = &r->gpus[i].dev;
        fp4_device_extra *x = &r->gpus[i].x;
        d->present = 1;
        x->index = dev[i];
        snprintf(d->name, sizeof d->name, "NVIDIA H200");
        snprintf(x->pci_bus_id, sizeof x->pci_bus_id, "0000:%02x:00.0", 0x19 + i);
        d->sm_clock_max_mhz = 1980;
        x->power_limit_w = 700;
    }
    r->dev = r->gpus[0].dev;
    r->devx = r->gpus[0].x;
    /* case A, backend a: GPU 5 is 6% over the median (100): slow (3% rule)
     * GPU medians 99, 100, 100, 106 -> median 100 */
    add(r, make_row("A", 16, "a", 0, 99.0, 0.004));
    add(r, make_row("A", 16, "a", 1, 100.0, 0.004));
    add(r, make_row("A", 16, "a", 2, 100.0, 0.004));
    add(r, make_row("A", 16, "a", 5, 106.0, 0.004));
    /* case A, backend b: GPU 5 is 2% over: within 3%, not slow */
    add(r, make_row("A", 16, "b", 5, 51.0, 0.004));
    add(r, make_row("A", 16, "b", 0, 50.0, 0.004));
    add(r, make_row("A", 16, "b", 1, 50.0, 0.004));
    add(r, make_row("A", 16, "b", 2, 50.0, 0.004));
    /* case B, backend a: three timed GPUs (GPU 5 FAILED), median 106 and
     * median noise 5%; GPU 2 is 1.9% over with 10% noise (threshold 15%):
     * not slow; GPU 1 throttled (power cap) */
    fp4_row x = make_row("B", 64, "a", 0, 106.0, 0.05);
    add(r, x);
    x = make_row("B", 64, "a", 1, 100.0, 0.004);
    x.tel.power_cap_samples = 12;
    add(r, x);
    add(r, make_row("B", 64, "a", 2, 108.0, 0.10));
    x = make_row("B", 64, "a", 5, NAN, NAN);
    x.state = FP4_ROW_FAILED;
    x.t.count = 0;
    snprintf(x.reason, sizeof x.reason, "verification: error max 0.5");
    add(r, x);
    /* case A listed again: its own group; GPU 2 is 10% over but one sample
     * (noise unknown): not called slow */
    add(r, make_row("A", 16, "a", 0, 100.0, 0.004));
    add(r, make_row("A", 16, "a", 1, 100.0, 0.004));
    x = make_row("A", 16, "a", 2, 110.0, INFINITY);
    x.t.count = 1;
    add(r, x);
    add(r, make_row("A", 16, "a", 5, 100.0, 0.004));
}

static int close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fabs(b);
}

static void test_analysis(void)
{
    fp4_report r;
    fp4_gpu_analysis a;
    fp4_err err;
    make_node(&r);
    CHECK(fp4_gpu_analyze(&r, &a, &err) == FP4_OK);
    CHECK(a.ngpus == 4 && a.gpu[3].gpu == 5);
    CHECK(a.nrows == r.nrows);
    CHECK_MSG(a.ngroups == 4, "%d groups", a.ngroups);
    if (a.ngroups == 4 && a.nrows == 16) {
        const fp4_gpu_group *g = &a.groups[0];
        /* in the order of their first rows: A/a, A/b, B/a, A/a again */
        CHECK(a.groups[0].first_row == 0 && a.groups[1].first_row == 4 &&
              a.groups[2].first_row == 8 && a.groups[3].first_row == 12);
        CHECK(g->rows == 4 && g->timed == 4);
        CHECK(close_to(g->min_us, 99) && close_to(g->median_us, 100) && close_to(g->max_us, 106));
        CHECK(close_to(g->spread, 0.07));
        CHECK(g->slow == 1 && a.marks[3].slow && !a.marks[0].slow && !a.marks[1].slow);
        CHECK(close_to(a.marks[3].excess, 0.06) && close_to(a.marks[3].threshold, 0.03));
        /* 2% over: not slow */
        CHECK(a.groups[1].slow == 0 && !a.marks[4].slow && close_to(a.marks[4].excess, 0.02));
        /* B/a: 3 timed (the FAILED row is not), median 106; GPU 2 8/106 over,
         * its noise 10% + the median noise 5%: not slow; GPU 1 throttled */
        g = &a.groups[2];
        CHECK(g->rows == 4 && g->timed == 3 && close_to(g->median_us, 106));
        CHECK(close_to(g->noise, 0.05));
        CHECK(!a.marks[10].slow && close_to(a.marks[10].threshold, 0.15));
        CHECK(a.marks[9].throttled && g->throttled == 1 && !a.marks[8].throttled);
        CHECK(isnan(a.marks[11].excess) && !a.marks[11].slow);
        /* the group of the repeated case: unknown noise is never slow */
        g = &a.groups[3];
        CHECK(g->timed == 4 && close_to(g->median_us, 100) && g->slow == 0);
        CHECK(isinf(a.marks[14].threshold) && close_to(a.marks[14].excess, 0.10));
        CHECK(a.marks[12].group == 3 && a.marks[0].group == 0);

        /* per GPU: the geometric mean of median / group median */
        const fp4_gpu_summary *s5 = fp4_gpu_analysis_find(&a, 5), *s1 = fp4_gpu_analysis_find(&a, 1);
        CHECK(s5 && s5->rows == 4 && s5->timed == 3 && s5->compared == 3 && s5->slow_rows == 1);
        if (s5) CHECK(close_to(s5->ratio_geomean, cbrt(1.06 * 1.02 * 1.0)));
        CHECK(s1 && s1->throttled_rows == 1 && s1->power_cap_samples == 12 && s1->compared == 4);
        if (s1) CHECK(close_to(s1->ratio_geomean, pow(1.0 * 1.0 * (100.0 / 106.0) * 1.0, 0.25)));
        CHECK(s1 && close_to(s1->sm_clock_mhz, 1980) && close_to(s1->power_w, 500));
        CHECK(fp4_gpu_analysis_find(&a, 3) == NULL);
    }
    fp4_gpu_analysis_free(&a);

    /* a noise just over 3%: the threshold grows with it (3.5% + 0.4%) */
    r.rows[3].t.noise = 0.035;
    CHECK(fp4_gpu_analyze(&r, &a, &err) == FP4_OK);
    CHECK(a.nrows == 16 && close_to(a.marks[3].threshold, 0.035 + 0.004) && a.marks[3].slow);
    fp4_gpu_analysis_free(&a);
    /* and at 6% noise the 6% excess is no longer slow */
    r.rows[3].t.noise = 0.06;
    CHECK(fp4_gpu_analyze(&r, &a, &err) == FP4_OK);
    CHECK(a.nrows == 16 && !a.marks[3].slow && a.groups[0].slow == 0);
    fp4_gpu_analysis_free(&a);
    r.rows[3].t.noise = 0.004;

    /* without the report's GPU list: the rows' GPUs, ascending */
    r.ngpus = 0;
    CHECK(fp4_gpu_analyze(&r, &a, &err) == FP4_OK);
    CHECK(a.ngpus == 4 && a.gpu[0].gpu == 0 && a.gpu[1].gpu == 1 && a.gpu[2].gpu == 2 &&
          a.gpu[3].gpu == 5);
    fp4_gpu_analysis_free(&a);

    /* one GPU: nothing to compare, nothing slow */
    fp4_report one;
    memset(&one, 0, sizeof one);
    add(&one, make_row("A", 16, "a", 0, 100.0, 0.004));
    add(&one, make_row("A", 16, "b", 0, 300.0, 0.004));
    CHECK(fp4_gpu_analyze(&one, &a, &err) == FP4_OK);
    CHECK(a.ngpus == 1 && a.ngroups == 2 && !a.marks[0].slow && !a.marks[1].slow &&
          isnan(a.groups[0].spread) && a.gpu[0].compared == 0 && isnan(a.gpu[0].ratio_geomean));
    fp4_gpu_analysis_free(&a);
    fp4_report_free(&one);

    /* an empty report */
    memset(&one, 0, sizeof one);
    CHECK(fp4_gpu_analyze(&one, &a, &err) == FP4_OK && a.ngroups == 0 && a.ngpus == 0);
    fp4_gpu_analysis_free(&a);
    fp4_report_free(&r);
}

/* ---- the outputs -------------------------------------------------------------------- */

/* The whole of what f holds, NUL-terminated (caller frees). */
static char *slurp_file(FILE *f)
{
    long n;
    char *s;
    fflush(f);
    n = ftell(f);
    rewind(f);
    s = calloc((size_t)n + 1, 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = '\0';
    return s;
}

/* The line of text holding needle, copied into line (empty when none). */
static void line_with(const char *text, const char *needle, char *line, size_t cap)
{
    const char *p = strstr(text, needle), *b, *e;
    line[0] = '\0';
    if (!p) return;
    for (b = p; b > text && b[-1] != '\n'; b--) {}
    e = strchr(p, '\n');
    if (!e) e = p + strlen(p);
    snprintf(line, cap, "%.*s", (int)(e - b), b);
}

static void test_table(void)
{
    fp4_report r;
    FILE *f = tmpfile();
    char *text, line[512];
    make_node(&r);
    CHECK(f != NULL);
    if (!f) return;
    fp4_report_print_header(f, &r);
    fp4_report_print_table(f, &r);
    text = slurp_file(f);
    CHECK(text != NULL);
    if (text) {
        CHECK(strstr(text, "GPUs: 4, run at once"));
        CHECK(strstr(text, "GPU 5: NVIDIA H200 (0000:1c:00.0)"));
        CHECK(strstr(text, "power limit 700 W"));
        CHECK(strstr(text, "ceilings: GPU 2: not measured"));
        CHECK(strstr(text, "  gpu  "));
        /* the slow row, flagged S: case A, backend a, GPU 5, 106 us */
        line_with(text, "106.0", line, sizeof line);
        CHECK_MSG(strstr(line, " a ") && strstr(line, " 5 ") && strstr(line, "  S"), "%s", line);
        line_with(text, "51.00", line, sizeof line);
        CHECK_MSG(line[0] && !strstr(line, "  S"), "%s", line);
        CHECK(strstr(text, "flag S: slower than the GPUs' median"));
        CHECK(strstr(text, "spread across GPUs"));
        CHECK(strstr(text, "A 16x2048x6144 a: 99.00 / 100.0 / 106.0 us, spread 7.0%, 4 of 4 GPUs timed"));
        CHECK(strstr(text, "slow: GPU 5 (0000:1c:00.0) 6.0% over the GPUs' median"));
        CHECK(strstr(text, "throttled: GPU 1 (0000:1a:00.0): power cap 12 of 40 samples"));
        CHECK(strstr(text, "node summary: 4 GPUs"));
        CHECK(strstr(text, "slow GPUs: GPU 5 (0000:1c:00.0) in 1 of 3 compared"));
        CHECK(strstr(text, "throttled GPUs: GPU 1 (0000:1a:00.0) in 1 rows"));
        /* a backend's GPUs stand together: b's rows follow a's four */
        const char *a0 = strstr(text, "\nA "), *b5 = strstr(text, "51.00");
        const char *a5 = strstr(text, "106.0");
        CHECK(a0 && b5 && a5 && a5 < b5);
    }
    free(text);
    fclose(f);

    /* a one-GPU report prints as it always did: no gpu column, no summary */
    fp4_report one;
    memset(&one, 0, sizeof one);
    add(&one, make_row("A", 16, "a", 0, 100.0, 0.004));
    f = tmpfile();
    if (f) {
        fp4_report_print_table(f, &one);
        text = slurp_file(f);
        CHECK(text && !strstr(text, " gpu") && !strstr(text, "spread across") && !strstr(text, "node summary"));
        free(text);
        fclose(f);
    }
    fp4_report_free(&one);
    fp4_report_free(&r);
}

static void test_json_csv(const char *dir)
{
    fp4_report r, back;
    fp4_err err;
    char path[1024];
    make_node(&r);
    snprintf(path, sizeof path, "%s/test_gpus.json", dir);
    CHECK(fp4_report_write_json(path, &r, &err) == FP4_OK);
    CHECK(fp4_report_read_json(path, &back, &err) == FP4_OK);
    CHECK(back.nrows == r.nrows && back.ngpus == 4);
    if (back.nrows == r.nrows) {
        for (int i = 0; i < r.nrows; i++) CHECK(back.rows[i].gpu == r.rows[i].gpu);
        CHECK(back.gpus[3].x.index == 5 && strcmp(back.gpus[3].x.pci_bus_id, "0000:1c:00.0") == 0);
        CHECK(back.gpus[3].x.power_limit_w == 700 && back.devx.index == 0);
    }
    fp4_report_free(&back);
    remove(path);

    /* a file from before: no gpu, no gpus, no device.index: all GPU 0 */
    static const char old[] =
        "{\"schema\": \"fp4bench/1\", \"schema_version\": 1, \"settings\": {},"
        " \"device\": {\"present\": true, \"name\": \"NVIDIA H200\"},"
        " \"rows\": [{\"label\": \"x\", \"m\": 1, \"n\": 2, \"k\": 32, \"backend\": \"cpu-ref\","
        " \"state\": \"ok\", \"l2\": \"n/a\", \"time_us\": {\"count\": 0}}]}";
    CHECK(fp4_report_parse_json(old, sizeof old - 1, "old.json", &back, &err) == FP4_OK);
    CHECK(back.nrows == 1 && back.rows[0].gpu == 0 && back.ngpus == 0 && back.devx.index == 0 &&
          back.devx.power_limit_w == 0);
    fp4_report_free(&back);
    static const char negative[] =
        "{\"schema\": \"fp4bench/1\", \"schema_version\": 1, \"device\": {}, \"settings\": {},"
        " \"rows\": [{\"label\": \"x\", \"m\": 1, \"n\": 2, \"k\": 32,"
        " \"backend\": \"a\", \"gpu\": -1, \"state\": \"ok\", \"l2\": \"n/a\", \"time_us\": {\"count\": 0}}]}";
    CHECK(fp4_report_parse_json(negative, sizeof negative - 1, "neg.json", &back, &err) == FP4_ERR_FORMAT &&
          strstr(err.msg, "rows[0].gpu"));
    static const char not_array[] = "{\"schema\": \"fp4bench/1\", \"schema_version\": 1, \"device\": {}, \"gpus\": 3,"
                                    " \"settings\": {}, \"rows\": []}";
    CHECK(fp4_report_parse_json(not_array, sizeof not_array - 1, "g.json", &back, &err) == FP4_ERR_FORMAT &&
          strstr(err.msg, "gpus"));

    /* CSV of a --gpus run: gpu is the last column; the usual CSV has none */
    FILE *f = tmpfile();
    if (f) {
        char *text;
        CHECK(fp4_csv_write_header_gpus(f, &err) == FP4_OK);
        CHECK(fp4_csv_write_row_gpus(f, &r.rows[3], &err) == FP4_OK);
        CHECK(fp4_csv_write_header(f, &err) == FP4_OK); /* the usual one: as before */
        CHECK(fp4_csv_write_row(f, &r.rows[3], &err) == FP4_OK);
        text = slurp_file(f);
        CHECK(text && strstr(text, ",prepare_ms,gpu\n") && strstr(text, ",5\n"));
        CHECK(text && strstr(text, ",prepare_ms\n"));
        free(text);
        fclose(f);
    }
    fp4_report_free(&r);
}

/* compare matches rows GPU by GPU: the new run lists its GPUs in another
 * order; matched by occurrence alone, GPU 0's 10 us would meet GPU 1's 20. */
static void test_compare(void)
{
    fp4_report o, n;
    fp4_err err;
    FILE *sink = tmpfile();
    memset(&o, 0, sizeof o);
    memset(&n, 0, sizeof n);
    add(&o, make_row("A", 16, "a", 0, 10.0, 0.004));
    add(&o, make_row("A", 16, "a", 1, 20.0, 0.004));
    add(&n, make_row("A", 16, "a", 1, 20.0, 0.004));
    add(&n, make_row("A", 16, "a", 0, 10.0, 0.004));
    CHECK(fp4_report_compare_rows(sink, &o, &n, NULL, &err) == 0);
    n.rows[0].t.median = n.rows[0].t.p10 = n.rows[0].t.p90 = 25.0; /* GPU 1 slower */
    CHECK(fp4_report_compare_rows(sink, &o, &n, NULL, &err) == 1);
    if (sink) {
        char *text = slurp_file(sink);
        CHECK(text && strstr(text, "gpu"));
        free(text);
        fclose(sink);
    }
    fp4_report_free(&o);
    fp4_report_free(&n);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    test_parse();
    test_resolve();
    test_analysis();
    test_table();
    test_json_csv(dir);
    test_compare();
    return check_finish("test_gpus");
}
