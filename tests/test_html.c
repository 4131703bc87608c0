/* The HTML report and its SVG primitives: a report built in memory with ok,
 * FAILED and unsupported rows, a ratio, steps and a label full of markup
 * gives the expected plots and series (one polyline per backend per latency
 * panel), escapes every string, fetches nothing, and is well nested; steps
 * are read from JSON and refused when malformed; a run with no rows is an
 * error; each plot is written alone as a standalone SVG. A file of
 * fp4bench run --gpus (rows of two GPUs, one slower) gets a series per
 * backend and GPU, a GPU column, and the per-GPU spread with the slow GPU
 * marked; a one-GPU file none of these. argv[1]: a folder for scratch
 * files. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "fp4/engine.h"
#include "fp4/report.h"
#include "report/svg.h"

#define LABEL_WITH_MARKUP "moe <up> & \"x\" 'y'"
#define LABEL_ESCAPED "moe &lt;up&gt; &amp; &quot;x&quot; &#39;y&#39;"

static char scratch[900] = ".";

/* Occurrences of needle in hay (non-overlapping). */
static int count(const char *hay, const char *needle)
{
    int c = 0;
    size_t len = strlen(needle);
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += len) c++;
    return c;
}

/* The whole file at path as a string (NULL when it cannot be read). */
static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *b = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        b = calloc((size_t)n + 1, 1);
        if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
            free(b);
            b = NULL;
        }
    }
    fclose(f);
    return b;
}

/* One row: ok when reason is NULL (timed at us, with ratio when > 0), else
 * state with that reason. */
static void add_row(fp4_report *r, const char *label, int64_t m, int64_t n, int64_t k,
                    const char *backend, fp4_row_state state, const char *reason, double us,
                    double ratio)
{
    fp4_row w;
    fp4_err err;
    memset(&w, 0, sizeof w);
    snprintf(w.label, sizeof w.label, "%s", label);
    w.shape.m = m;
    w.shape.n = n;
    w.shape.k = k;
    snprintf(w.backend, sizeof w.backend, "%s", backend);
    w.state = state;
    snprintf(w.l2, sizeof w.l2, "cold");
    w.ratio = w.ratio_lo = w.ratio_hi = NAN;
    w.t.median = w.t.noise = NAN;
    if (state == FP4_ROW_OK) {
        w.verified = 1;
        w.err_norm = 1e-3;
        w.t.count = 11;
        w.t.median = us;
        w.t.noise = 0.002;
        w.flops = 2.0 * (double)m * (double)n * (double)k;
        w.bytes = (double)n * (double)k * 0.5625 + 2.0 * (double)m * (double)(k + n);
        w.tflops = w.flops / us * 1e-6;
        w.gbps = w.bytes / us * 1e-3;
        w.pct_roofline = 50.0;
        if (ratio > 0) {
            w.has_ratio = 1;
            w.ratio = ratio;
            w.ratio_lo = ratio * 0.98;
            w.ratio_hi = ratio * 1.02;
        }
    } else {
        snprintf(w.reason, sizeof w.reason, "%s", reason);
    }
    CHECK(fp4_report_add(r, &w, &err) == FP4_OK);
}

/* A run like an H200 result: two (N, K) panels, cublas-bf16 the baseline,
 * fp4-sm90 with ratios, a FAILED and an unsupported row, and an MoE row
 * with steps. */
static void make_run(fp4_report_run *run, const char *name)
{
    fp4_report *r = &run->report;
    static const fp4_step moe_steps[] = {
        {"route", 3.0}, {"gate_up", 20.0}, {"act", 1.5}, {"down", 12.0}};
    memset(run, 0, sizeof *run);
    snprintf(run->name, sizeof run->name, "%s", name);
    fp4_settings_default(&r->set);
    snprintf(r->set.baseline, sizeof r->set.baseline, "cublas-bf16");
    snprintf(r->version, sizeof r->version, "0.1.0");
    snprintf(r->commit, sizeof r->commit, "abc123");
    snprintf(r->command, sizeof r->command, "fp4bench run --label '<script>'");
    r->dev.present = 1;
    snprintf(r->dev.name, sizeof r->dev.name, "NVIDIA H200");
    snprintf(r->dev.driver_string, sizeof r->dev.driver_string, "580.1");
    r->dev.driver_version = 13000;
    r->dev.runtime_version = 12080;
    r->dev.sm_clock_max_mhz = 1980;
    r->ceil.measured = 1;
    r->ceil.read_gbps = 4500.0;
    r->ceil.bf16_tflops = 840.0;
    r->ceil.fp8_tflops = 1460.0;
    for (int64_t m = 1; m <= 256; m *= 16) {
        add_row(r, LABEL_WITH_MARKUP, m, 2048, 6144, "cublas-bf16", FP4_ROW_OK, NULL,
                12.0 + (double)m / 10.0, 1.0);
        add_row(r, LABEL_WITH_MARKUP, m, 2048, 6144, "fp4-sm90", FP4_ROW_OK, NULL,
                7.0 + (double)m / 8.0, (12.0 + (double)m / 10.0) / (7.0 + (double)m / 8.0));
    }
    add_row(r, "attn", 16, 768, 6144, "cublas-bf16", FP4_ROW_OK, NULL, 8.0, 1.0);
    add_row(r, "attn", 16, 768, 6144, "fp4-sm90", FP4_ROW_OK, NULL, 6.0, 1.33);
    add_row(r, "attn", 256, 768, 6144, "cublas-bf16", FP4_ROW_OK, NULL, 11.0, 1.0);
    add_row(r, "attn", 256, 768, 6144, "fp4-sm90", FP4_ROW_FAILED,
            "wrong result: max error 0.5 at (3, 7) <D != R>", 0.0, 0.0);
    add_row(r, "attn", 256, 768, 6144, "cublaslt-nvfp4", FP4_ROW_UNSUPPORTED,
            "needs sm_100 & newer", 0.0, 0.0);
    add_row(r, "moe-layer", 64, 2048, 6144, "moe-w4a4", FP4_ROW_OK, NULL, 36.5, 0.0);
    run->steps = calloc((size_t)r->nrows, sizeof *run->steps);
    CHECK(run->steps != NULL);
    if (!run->steps) return;
    run->steps[r->nrows - 1].steps = malloc(sizeof moe_steps);
    CHECK(run->steps[r->nrows - 1].steps != NULL);
    if (!run->steps[r->nrows - 1].steps) return;
    memcpy(run->steps[r->nrows - 1].steps, moe_steps, sizeof moe_steps);
    run->steps[r->nrows - 1].count = 4;
}

/* A run of fp4bench run --gpus on GPUs 0 and 1 at once: per M, cublas-bf16
 * (the baseline) and fp4-sm90 on each GPU, GPU 1 slower by slow_factor;
 * GPU 1's fp4-sm90 FAILED at the last M. */
static void make_gpus_run(fp4_report_run *run, const char *name, double slow_factor)
{
    fp4_report *r = &run->report;
    memset(run, 0, sizeof *run);
    snprintf(run->name, sizeof run->name, "%s", name);
    fp4_settings_default(&r->set);
    snprintf(r->set.baseline, sizeof r->set.baseline, "cublas-bf16");
    r->dev.present = 1;
    snprintf(r->dev.name, sizeof r->dev.name, "NVIDIA H200");
    r->ngpus = 2;
    for (int g = 0; g < 2; g++) {
        r->gpus[g].dev = r->dev;
        r->gpus[g].x.index = g;
        snprintf(r->gpus[g].x.pci_bus_id, sizeof r->gpus[g].x.pci_bus_id, "0000:%02x:00.0",
                 0x19 + g);
    }
    for (int64_t m = 1; m <= 256; m *= 16)
        for (int g = 0; g < 2; g++) {
            double f = g == 1 ? slow_factor : 1.0, bl = 12.0 + (double)m / 10.0;
            double fp4 = 7.0 + (double)m / 8.0;
            add_row(r, "up", m, 2048, 6144, "cublas-bf16", FP4_ROW_OK, NULL, bl * f, 1.0);
            r->rows[r->nrows - 1].gpu = g;
            if (g == 1 && m == 256)
                add_row(r, "up", m, 2048, 6144, "fp4-sm90", FP4_ROW_FAILED, "wrong result", 0.0,
                        0.0);
            else add_row(r, "up", m, 2048, 6144, "fp4-sm90", FP4_ROW_OK, NULL, fp4 * f, bl / fp4);
            r->rows[r->nrows - 1].gpu = g;
        }
}

/* The HTML of runs written to a scratch file and read back. */
static char *html_of(const fp4_report_run *runs, int nruns, const char *file)
{
    char path[1024];
    fp4_err err;
    snprintf(path, sizeof path, "%s/%s", scratch, file);
    if (fp4_report_write_html_file(path, runs, nruns, &err) != FP4_OK) {
        fprintf(stderr, "write_html: %s\n", fp4_err_text(&err));
        return NULL;
    }
    return read_all(path);
}

/* Tags open as many times as they close, and the document is one page. */
static void check_well_formed(const char *h)
{
    static const char *const tags[] = {"svg", "table", "section", "tr", "g", "text", "title", "p"};
    CHECK(strncmp(h, "<!DOCTYPE html>\n", 16) == 0);
    CHECK(count(h, "<html") == 1 && count(h, "</html>\n") == 1);
    CHECK(strcmp(h + strlen(h) - 8, "</html>\n") == 0);
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) {
        char open_sp[32], open_gt[32], close[32];
        snprintf(open_sp, sizeof open_sp, "<%s ", tags[i]);
        snprintf(open_gt, sizeof open_gt, "<%s>", tags[i]);
        snprintf(close, sizeof close, "</%s>", tags[i]);
        CHECK_MSG(count(h, open_sp) + count(h, open_gt) == count(h, close), "<%s> %d+%d vs %d",
                  tags[i], count(h, open_sp), count(h, open_gt), count(h, close));
    }
    /* nothing fetched: no URL, no script, no external reference */
    CHECK(strstr(h, "http") == NULL);
    CHECK(strstr(h, "<script") == NULL);
    CHECK(strstr(h, "href=") == NULL && strstr(h, "src=") == NULL);
    CHECK(strstr(h, "xmlns") == NULL);
}

static void test_one_run(void)
{
    fp4_report_run run;
    char *h;
    make_run(&run, "dir/h200.json");
    h = html_of(&run, 1, "one.html");
    CHECK(h != NULL);
    if (!h) {
        fp4_report_run_free(&run);
        return;
    }
    check_well_formed(h);
    /* latency: one panel per (N, K), one polyline per backend per panel */
    CHECK(count(h, "data-plot=\"latency\"") == 2);
    CHECK(count(h, "data-n=\"2048\" data-k=\"6144\"") == 1);
    CHECK(count(h, "data-n=\"768\" data-k=\"6144\"") == 1);
    CHECK(count(h, "<polyline ") == 5);
    CHECK(count(h, "data-series=\"cublas-bf16\" points=") == 2);
    CHECK(count(h, "data-series=\"fp4-sm90\" points=") == 2);
    CHECK(count(h, "data-series=\"moe-w4a4\" points=") == 1);
    /* the FAILED row is in no plot: fp4-sm90's second panel has one point */
    CHECK(count(h, "data-series=\"fp4-sm90\" points=\"") == 2);
    /* speedup: fp4-sm90's four ratios with whiskers, not the baseline's own */
    CHECK(count(h, "data-plot=\"speedup\"") == 1);
    CHECK(count(h, "Speedup vs cublas-bf16") >= 1);
    /* roofline with the measured ceilings */
    CHECK(count(h, "data-plot=\"roofline\"") == 1);
    CHECK(strstr(h, "read 4500 GB/s") != NULL);
    CHECK(strstr(h, "bf16 840 TFLOP/s") != NULL);
    CHECK(strstr(h, "fp8 1460 TFLOP/s") != NULL);
    /* steps: one bar of four segments, each step a colour */
    CHECK(count(h, "data-plot=\"steps\"") == 1);
    CHECK(count(h, "data-step=\"gate_up\"") == 1);
    CHECK(count(h, "data-step=") == 4);
    /* tables: FAILED and unsupported rows with their reasons, escaped */
    CHECK(count(h, "data-state=\"FAILED\"") == 1);
    CHECK(count(h, "data-state=\"unsupported\"") == 1);
    CHECK(count(h, "data-state=\"ok\"") == 10);
    CHECK(strstr(h, "wrong result: max error 0.5 at (3, 7) &lt;D != R&gt;") != NULL);
    CHECK(strstr(h, "needs sm_100 &amp; newer") != NULL);
    CHECK(strstr(h, "1.33x [1.30, 1.36]") != NULL);
    /* every label escaped, in tables, plot labels and tooltips */
    CHECK(count(h, LABEL_ESCAPED) >= 4);
    CHECK(strstr(h, "<up>") == NULL);
    CHECK(strstr(h, "<script>") == NULL && strstr(h, "&lt;script&gt;") != NULL);
    /* the header: GPU, driver, CUDA, clocks, commit */
    CHECK(strstr(h, "NVIDIA H200") != NULL);
    CHECK(strstr(h, "580.1, CUDA driver API 13.0") != NULL);
    CHECK(strstr(h, "<td>12.8</td>") != NULL);
    CHECK(strstr(h, "SM max 1980 MHz") != NULL);
    CHECK(strstr(h, "(commit abc123)") != NULL);
    /* one run: series are plain backend names; the base name titles it */
    CHECK(strstr(h, "h200.json") != NULL && strstr(h, "dir/h200.json") == NULL);
    /* one GPU: no GPU in series names, no GPU column, no per-GPU spread */
    CHECK(strstr(h, " GPU 0") == NULL && strstr(h, "<th>backend</th><th>GPU</th>") == NULL);
    CHECK(strstr(h, "data-gpu=") == NULL && strstr(h, "id=\"gpus\"") == NULL);
    free(h);
    fp4_report_run_free(&run);
}

static void test_two_runs(void)
{
    fp4_report_run runs[2];
    char *h;
    make_run(&runs[0], "old/a.json");
    make_run(&runs[1], "new/b.json");
    runs[1].report.ceil.read_gbps = 4600.0; /* a second bandwidth line */
    h = html_of(runs, 2, "two.html");
    CHECK(h != NULL);
    if (h) {
        check_well_formed(h);
        CHECK(count(h, "<polyline ") == 10);
        CHECK(count(h, "data-series=\"cublas-bf16 (a.json)\" points=") == 2);
        CHECK(count(h, "data-series=\"cublas-bf16 (b.json)\" points=") == 2);
        /* the second file's lines are dashed */
        CHECK(count(h, "stroke-dasharray=\"6 3\" data-series=\"fp4-sm90 (b.json)\"") == 2);
        CHECK(strstr(h, "read 4500 GB/s (a.json)") != NULL);
        CHECK(strstr(h, "read 4600 GB/s (b.json)") != NULL);
        CHECK(strstr(h, "bf16 840 TFLOP/s (a.json)") != NULL);
        CHECK(strstr(h, "bf16 840 TFLOP/s (b.json)") == NULL); /* the same ceiling once */
        CHECK(count(h, "<table class=\"results\"") == 2);
        /* the one setting that differs, flagged in both columns */
        CHECK(count(h, "class=\"differs\"") == 2);
        CHECK(strstr(h, "<td class=\"differs\">read 4600 GB/s, bf16") != NULL);
        free(h);
    }
    /* files with the same base name are told apart by the names as given */
    snprintf(runs[1].name, sizeof runs[1].name, "new/a.json");
    snprintf(runs[0].name, sizeof runs[0].name, "old/a.json");
    h = html_of(runs, 2, "same.html");
    CHECK(h != NULL);
    if (h) {
        CHECK(strstr(h, "data-series=\"fp4-sm90 (old/a.json)\"") != NULL);
        CHECK(strstr(h, "data-series=\"fp4-sm90 (new/a.json)\"") != NULL);
        free(h);
    }
    fp4_report_run_free(&runs[0]);
    fp4_report_run_free(&runs[1]);
}

static void test_gpus(void)
{
    fp4_report_run runs[2];
    char *h;
    make_gpus_run(&runs[0], "node/gpus.json", 1.10);
    h = html_of(runs, 1, "gpus.html");
    CHECK(h != NULL);
    if (h) {
        check_well_formed(h);
        /* a series per (backend, GPU): one panel, four lines; GPU 1 dashed */
        CHECK(count(h, "<polyline ") == 4);
        CHECK(count(h, "data-series=\"cublas-bf16 GPU 0\" points=") == 1);
        CHECK(count(h, "data-series=\"cublas-bf16 GPU 1\" points=") == 1);
        CHECK(count(h, "stroke=\"#D55E00\" stroke-width=\"1.8\" data-series=\"fp4-sm90 GPU 0\" "
                       "points=") == 1);
        CHECK(count(h, "stroke-dasharray=\"6 3\" data-series=\"fp4-sm90 GPU 1\" points=") == 1);
        CHECK(strstr(h, ">fp4-sm90 GPU 1</text>") != NULL); /* the legend */
        CHECK(strstr(h, "data-series=\"fp4-sm90\"") == NULL);
        /* speedup: each GPU's ratios against the baseline on that GPU */
        CHECK(count(h, "vs cublas-bf16 on GPU 0</title>") == 3);
        CHECK(count(h, "vs cublas-bf16 on GPU 1</title>") == 2);
        /* the table: a GPU column, every row with its GPU, GPU 1's timed rows slow */
        CHECK(count(h, "<th>backend</th><th>GPU</th><th>kernel</th>") == 1);
        CHECK(count(h, "<tr data-state=\"ok\" data-gpu=\"0\">") == 6);
        CHECK(count(h, "<tr data-state=\"ok\" data-gpu=\"1\" data-slow=\"1\">") == 5);
        CHECK(count(h, "data-state=\"FAILED\" data-gpu=\"1\">") == 1);
        CHECK(count(h, "<td class=\"num slow\" title=\"slow: +4.8% over the GPUs' median "
                       "(threshold +3.0%)\">1 S</td>") == 5);
        /* the per-GPU spread: GPU 1 4.8% over the median of two, marked S */
        CHECK(count(h, "<section id=\"gpus\">") == 1 && count(h, "<table class=\"spread\"") == 1);
        CHECK(strstr(h, "<th title=\"NVIDIA H200, 0000:1a:00.0\">GPU 1</th>") != NULL);
        /* a case's cells, in the spread table and in the table's row of each GPU */
        CHECK(count(h, "<tr><td>up</td><td class=\"num\">16</td><td class=\"num\">2048</td>"
                       "<td class=\"num\">6144</td><td>fp4-sm90</td>") == 1);
        CHECK(count(h, "data-gpu=\"0\"><td>up</td><td class=\"num\">16</td><td class=\"num\">2048</td>"
                       "<td class=\"num\">6144</td><td>fp4-sm90</td>") == 1);
        /* five cases, and GPU 0's geometric mean; where GPU 1 FAILED, nothing to compare */
        CHECK(count(h, "<td class=\"num\" data-gpu=\"0\">-4.8%</td>") == 6);
        CHECK(count(h, "<td class=\"num\" data-gpu=\"0\">-</td>") == 1);
        CHECK(count(h, "<td class=\"num slow\" data-gpu=\"1\" data-slow=\"1\" "
                       "title=\"slow: over the threshold +3.0%\">+4.8% S</td>") == 5);
        CHECK(count(h, "<td class=\"num\" data-gpu=\"1\">FAILED</td>") == 1);
        CHECK(count(h, "<td class=\"num slow\" data-gpu=\"1\" data-slow=\"5\">") == 1);
        CHECK(count(h, "<td class=\"num slow\" data-gpu=\"0\"") == 0);
        CHECK(strstr(h, "td.slow{") != NULL);
        free(h);
    }
    fp4_report_run_free(&runs[0]);

    /* 1% slower is within the slow rule's 3%: split, but nothing marked */
    make_gpus_run(&runs[0], "close.json", 1.01);
    h = html_of(runs, 1, "close.html");
    CHECK(h != NULL);
    if (h) {
        CHECK(count(h, "data-series=\"fp4-sm90 GPU 1\" points=") == 1);
        CHECK(count(h, "<table class=\"spread\"") == 1);
        CHECK(strstr(h, "data-slow=") == NULL && strstr(h, " S</td>") == NULL);
        free(h);
    }
    fp4_report_run_free(&runs[0]);

    /* a one-GPU file on GPU 3 beside a two-GPU file: the first keeps its
     * plain series and style, the second's GPUs take the next styles */
    make_run(&runs[0], "h200.json");
    for (int i = 0; i < runs[0].report.nrows; i++) runs[0].report.rows[i].gpu = 3;
    make_gpus_run(&runs[1], "gpus.json", 1.10);
    h = html_of(runs, 2, "mixed.html");
    CHECK(h != NULL);
    if (h) {
        check_well_formed(h);
        CHECK(count(h, "stroke-width=\"1.8\" data-series=\"fp4-sm90 (h200.json)\" points=") == 2);
        CHECK(count(h, "stroke-dasharray=\"6 3\" data-series=\"fp4-sm90 GPU 0 (gpus.json)\"") == 1);
        CHECK(count(h, "stroke-dasharray=\"2 2\" data-series=\"fp4-sm90 GPU 1 (gpus.json)\"") == 1);
        CHECK(count(h, "<th>backend</th><th>GPU</th>") == 1); /* the two-GPU file's table only */
        CHECK(count(h, "<table class=\"spread\"") == 1);
        free(h);
    }
    fp4_report_run_free(&runs[0]);
    fp4_report_run_free(&runs[1]);
}

static void test_errors(void)
{
    fp4_report_run run;
    fp4_err err;
    char path[1024];
    memset(&run, 0, sizeof run);
    snprintf(run.name, sizeof run.name, "empty.json");
    snprintf(path, sizeof path, "%s/empty.html", scratch);
    CHECK(fp4_report_write_html_file(path, &run, 1, &err) == FP4_ERR_FORMAT);
    CHECK(strstr(err.msg, "empty.json: no rows") != NULL);
    CHECK(fp4_report_write_html_file(path, &run, 0, &err) == FP4_ERR_INVALID_ARG);
    make_run(&run, "x.json");
    snprintf(path, sizeof path, "%s/no/such/dir/r.html", scratch);
    CHECK(fp4_report_write_html_file(path, &run, 1, &err) == FP4_ERR_IO);
    CHECK(strstr(err.msg, "cannot create") != NULL);
    snprintf(path, sizeof path, "%s/no/such/dir", scratch);
    CHECK(fp4_report_write_svgs(path, &run, 1, NULL, &err) == FP4_ERR_IO);
    fp4_report_run_free(&run);
}

#define ROW(extra)                                                                         \
    "{\"label\": \"moe\", \"m\": 64, \"n\": 2048, \"k\": 6144, \"backend\": \"moe-w4a4\", " \
    "\"state\": \"ok\", \"l2\": \"cold\", \"time_us\": {\"count\": 3, \"median\": 30}" extra "}"
#define DOC(rows)                                                                         \
    "{\"schema\": \"fp4bench/1\", \"schema_version\": 1, \"device\": {}, \"settings\": {}, " \
    "\"rows\": [" rows "]}"

/* fp4_report_run_parse(text) gives FP4_ERR_FORMAT with want in its message. */
static void check_steps_refused(const char *text, const char *want)
{
    fp4_report_run run;
    fp4_err err;
    fp4_status st = fp4_report_run_parse(text, strlen(text), "s.json", &run, &err);
    CHECK_MSG(st == FP4_ERR_FORMAT && strstr(err.msg, want) != NULL, "want '%s', got %d '%s'",
              want, (int)st, err.msg);
    CHECK(run.steps == NULL && run.report.nrows == 0);
    fp4_report_run_free(&run);
}

static void test_steps_json(void)
{
    static const char good[] = DOC(ROW("") ", " ROW(", \"steps\": null") ", "
        ROW(", \"steps\": [{\"name\": \"route\", \"us\": 2.5}, {\"name\": \"gate_up\", \"us\": 20, \"extra\": 1}]"));
    fp4_report_run run;
    fp4_err err;
    CHECK(fp4_report_run_parse(good, strlen(good), "s.json", &run, &err) == FP4_OK);
    CHECK(run.report.nrows == 3);
    CHECK(run.steps != NULL);
    if (run.steps) {
        CHECK(run.steps[0].count == 0 && run.steps[1].count == 0);
        CHECK(run.steps[2].count == 2);
        CHECK(strcmp(run.steps[2].steps[0].name, "route") == 0 && run.steps[2].steps[0].us == 2.5);
        CHECK(strcmp(run.steps[2].steps[1].name, "gate_up") == 0 && run.steps[2].steps[1].us == 20.0);
    }
    CHECK(strcmp(run.name, "s.json") == 0);
    fp4_report_run_free(&run);

    static const char none[] = DOC(ROW(", \"steps\": []"));
    CHECK(fp4_report_run_parse(none, strlen(none), "n.json", &run, &err) == FP4_OK);
    CHECK(run.steps == NULL && run.report.nrows == 1);
    fp4_report_run_free(&run);

    check_steps_refused(DOC(ROW(", \"steps\": 3")), "s.json: rows[0].steps: expected an array or null");
    check_steps_refused(DOC(ROW("") ", " ROW(", \"steps\": [{\"name\": \"a\", \"us\": 1}, {\"name\": \"b\"}]")),
                        "s.json: rows[1].steps[1].us: missing");
    check_steps_refused(DOC(ROW(", \"steps\": [{\"name\": \"a\", \"us\": -1}]")),
                        "rows[0].steps[0].us: expected a finite number >= 0");
    check_steps_refused(DOC(ROW(", \"steps\": [{\"name\": \"a\", \"us\": \"1\"}]")),
                        "rows[0].steps[0].us: expected a number");
    check_steps_refused(DOC(ROW(", \"steps\": [{\"name\": 5, \"us\": 1}]")),
                        "rows[0].steps[0].name: expected a string");
    check_steps_refused(DOC(ROW(", \"steps\": [7]")), "rows[0].steps[0]: expected an object");
    check_steps_refused(DOC(ROW(", \"steps\": [{\"name\": \"0123456789012345678901234567890123456789012345678\", \"us\": 1}]")),
                        "rows[0].steps[0].name: string longer than 47 bytes");
    /* the report reader's own errors come first */
    check_steps_refused("{\"schema_version\": 1, \"rows\": [", "not valid JSON");
}

static void test_read_file(void)
{
    char path[1024];
    FILE *f;
    fp4_report_run run;
    fp4_err err;
    static const char doc[] = DOC(ROW(", \"steps\": [{\"name\": \"down\", \"us\": 9}]"));
    snprintf(path, sizeof path, "%s/steps.json", scratch);
    f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(doc, 1, sizeof doc - 1, f) == sizeof doc - 1);
    CHECK(fclose(f) == 0);
    CHECK(fp4_report_run_read(path, &run, &err) == FP4_OK);
    CHECK(run.steps && run.steps[0].count == 1 && run.steps[0].steps[0].us == 9.0);
    CHECK(strcmp(run.name, path) == 0);
    fp4_report_run_free(&run);
    snprintf(path, sizeof path, "%s/none.json", scratch);
    CHECK(fp4_report_run_read(path, &run, &err) == FP4_ERR_IO);
    CHECK(strstr(err.msg, "cannot open") != NULL);
    fp4_report_run_free(&run);
}

static void test_svg_files(void)
{
    fp4_report_run run;
    fp4_err err;
    char dir[1024], path[1200];
    static const char *const names[] = {"latency-n2048-k6144", "latency-n768-k6144", "speedup",
                                        "roofline", "steps"};
    int n = -1;
    snprintf(dir, sizeof dir, "%s/svgs", scratch);
    CHECK(mkdir(dir, 0777) == 0 || errno == EEXIST);
    make_run(&run, "h200.json");
    CHECK(fp4_report_write_svgs(dir, &run, 1, &n, &err) == FP4_OK);
    CHECK(n == 5);
    for (int i = 0; i < 5; i++) {
        char *s;
        snprintf(path, sizeof path, "%s/%s.svg", dir, names[i]);
        s = read_all(path);
        CHECK_MSG(s != NULL, "%s missing", path);
        if (!s) continue;
        CHECK(strncmp(s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"", 77) == 0);
        CHECK(count(s, "<svg") == 1 && count(s, "</svg>") == 1);
        CHECK(strstr(s, "<html") == NULL);
        free(s);
    }
    fp4_report_run_free(&run);
}

/* The primitives: escaping, number labels, log ticks. */
static void test_primitives(void)
{
    char *buf = NULL, b[32];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fp4_svg_scale s;
    fp4_svg_ticks t;
    int majors = 0, has1 = 0;
    CHECK(f != NULL);
    if (f) {
        fp4_svg_escape(f, "a<b>&\"c'\x01\xff\xc3\xa9\xe2\x82");
        CHECK(fclose(f) == 0);
        CHECK(buf && strcmp(buf, "a&lt;b&gt;&amp;&quot;c&#39;??\xc3\xa9??") == 0);
        free(buf);
    }
    fp4_svg_fmt_number(b, sizeof b, 10000.0);
    CHECK(strcmp(b, "10k") == 0);
    fp4_svg_fmt_number(b, sizeof b, 2000.0);
    CHECK(strcmp(b, "2000") == 0);
    fp4_svg_fmt_number(b, sizeof b, 0.05);
    CHECK(strcmp(b, "0.05") == 0);
    fp4_svg_fmt_number(b, sizeof b, 1e6);
    CHECK(strcmp(b, "1M") == 0);
    fp4_svg_fmt_number(b, sizeof b, 1.0);
    CHECK(strcmp(b, "1") == 0);

    /* 1..1000 us: labelled decades 1, 10, 100, 1000 and minor ticks */
    fp4_svg_scale_fit(&s, 1, 0, 1.0, 1000.0, 0.0, 300.0);
    CHECK(s.lo < 1.0 && s.hi > 1000.0);
    fp4_svg_ticks_make(&s, &t);
    for (int i = 0; i < t.n; i++) {
        majors += t.major[i];
        if (t.major[i]) CHECK(fabs(log10(t.v[i]) - round(log10(t.v[i]))) < 1e-12);
    }
    CHECK(majors == 4);
    CHECK(t.n > majors);
    CHECK(fp4_svg_map(&s, s.lo) == 0.0 && fabs(fp4_svg_map(&s, s.hi) - 300.0) < 1e-9);
    /* a ratio axis inside one decade still gets labels: 0.5, 1, 2 */
    fp4_svg_scale_fit(&s, 1, 0, 0.6, 1.8, 0.0, 300.0);
    fp4_svg_ticks_make(&s, &t);
    majors = 0;
    for (int i = 0; i < t.n; i++) {
        majors += t.major[i];
        if (t.major[i] && t.v[i] == 1.0) has1 = 1;
    }
    CHECK(majors >= 2 && has1);
    /* linear: from 0 in 1-2-5 steps */
    fp4_svg_scale_fit(&s, 0, 1, 0.0, 37.0, 0.0, 300.0);
    fp4_svg_ticks_make(&s, &t);
    CHECK(t.n >= 4 && t.v[0] == 0.0 && t.v[1] == 5.0);
}

/* fp4bench moe --mode w4a4,w4a16: one backend's rows of one shape in two
 * modes are two lines, not one that zigzags between the workloads */
static void test_moe_workloads(void)
{
    fp4_report_run run;
    fp4_report *r = &run.report;
    static const char *const labels[] = {"glm5 gate_up w4a4 random", "glm5 gate_up w4a16 random"};
    memset(&run, 0, sizeof run);
    snprintf(run.name, sizeof run.name, "moe.json");
    fp4_settings_default(&r->set);
    for (int l = 0; l < 2; l++)
        for (int64_t m = 1; m <= 16; m *= 4) {
            add_row(r, labels[l], m, 12288, 6144, "moe-fp4-sm90", FP4_ROW_OK, NULL, 40.0 + 10.0 * l + (double)m,
                    0.0);
            fp4_row_moe *x = &r->rows[r->nrows - 1].moe;
            snprintf(x->step, sizeof x->step, "gate_up");
            x->present = 1;
            x->tokens = m;
            x->experts = 256;
            x->active_experts = 7;
            x->tokens_min = 0;
            x->tokens_median = 2.5;
            x->tokens_max = 9;
            x->tokens_per_s = 1234.0;
            x->pct_bandwidth = 61.5;
        }
    char *h = html_of(&run, 1, "moe.html");
    CHECK(h != NULL);
    if (h) {
        check_well_formed(h);
        CHECK(count(h, "data-series=\"moe-fp4-sm90 glm5 gate_up w4a4 random\" points=") == 1);
        CHECK(count(h, "data-series=\"moe-fp4-sm90 glm5 gate_up w4a16 random\" points=") == 1);
        CHECK(count(h, "data-series=\"moe-fp4-sm90\"") == 0);
        /* the table reads as MoE: no M, N, K or TFLOP/s; T, experts, tokens an expert, tokens/s, % read BW */
        CHECK(count(h, "<th>label</th><th>T</th><th>experts with tokens</th>") == 1);
        CHECK(count(h, "<th>tokens/s</th><th>GB/s</th><th>% read BW</th>") == 1);
        CHECK(strstr(h, "<th>M</th>") == NULL && strstr(h, "<th>TFLOP/s</th>") == NULL);
        CHECK(count(h, "<td class=\"num\">7 of 256</td>") == 6);
        CHECK(count(h, "<td class=\"num\">0 / 2.5 / 9</td>") == 6);
        CHECK(count(h, "<td class=\"num\">1234</td>") == 6);  /* tokens/s */
        CHECK(count(h, "<td class=\"num\">61.5%</td>") == 6); /* % read BW */
        CHECK(count(h, "Latency vs T, N=12288 K=6144") >= 1 && strstr(h, "Latency vs M") == NULL);
        CHECK(count(h, "<h2>Latency vs T</h2>") == 1);
    }
    free(h);
    fp4_report_run_free(&run);
}

int main(int argc, char **argv)
{
    /* a folder of its own inside the test folder: no name clashes with other tests */
    snprintf(scratch, sizeof scratch, "%s/test_html.d", argc > 1 ? argv[1] : ".");
    if (mkdir(scratch, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "test_html: cannot create %s: %s\n", scratch, strerror(errno));
        return 1;
    }
    test_primitives();
    test_one_run();
    test_two_runs();
    test_gpus();
    test_errors();
    test_steps_json();
    test_read_file();
    test_svg_files();
    test_moe_workloads();
    return check_finish("test_html");
}
