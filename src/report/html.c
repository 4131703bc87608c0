/* The HTML report: one self-contained page (inline SVG, a style element, no
 * script, nothing fetched) made of one or more result files (runs), and the
 * same plots alone as SVG files. docs/REPORT.md says what each plot shows.
 *
 * The runs are first turned into a model: series (one per backend, or per
 * backend and run when there are several runs, and per GPU too in a file of
 * fp4bench run --gpus whose rows span several GPUs; the colour is the
 * backend's, the marker and line dash the run's and GPU's), latency panels
 * (rows grouped by N, K), speedup categories (shapes), the per-step bars, and
 * the GPUs' comparison of split runs (multigpu/pergpu.h). The plots then draw
 * from the model with the primitives of report/svg.h. Every string from a
 * run goes out through fp4_svg_escape. */
#include "fp4/report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fp4/io.h"
#include "io/file.h"
#include "multigpu/pergpu.h"
#include "report/fmt.h"
#include "report/svg.h"

/* Beyond these a plot would be too large to read; the rest is in the tables
 * and the plot says how many were left out. */
#define MAX_PANELS 64      /* latency panels (N, K pairs) */
#define MAX_CATEGORIES 200 /* shapes in the speedup plot */
#define MAX_BARS 200       /* rows in the per-step plot */
#define CATEGORY_CHARS 40  /* characters of a category label on an axis */

/* backend, " <MoE workload>", " GPU <n>", " (<run>)" */
#define SERIES_NAME_LEN (FP4_NAME_LEN + FP4_LABEL_LEN + 280)
#define TIP_LEN 768 /* a tooltip: a label, a shape, a series and numbers */

/* ======================================================================== */
/* reading runs                                                             */
/* ======================================================================== */

void fp4_report_run_free(fp4_report_run *run)
{
    if (!run) return;
    if (run->steps)
        for (int i = 0; i < run->report.nrows; i++) free(run->steps[i].steps);
    free(run->steps);
    run->steps = NULL;
    fp4_report_free(&run->report);
}

/* FP4_ERR_FORMAT "<name>: rows[i].steps[j].<key>: <what>". */
static fp4_status steps_bad(fp4_err *err, const char *name, int row, int step, const char *key,
                            const char *what)
{
    if (step < 0)
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: rows[%d].steps: %s", name, row, what);
    return fp4_fail(err, FP4_ERR_FORMAT, "%s: rows[%d].steps[%d]%s%s: %s", name, row, step,
                    key ? "." : "", key ? key : "", what);
}

/* The steps array of one row (the index-th) into out. */
static fp4_status read_row_steps(const cJSON *row, int index, const char *name,
                                 fp4_row_steps *out, fp4_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(row, "steps"), *e;
    int n, j = 0;
    out->steps = NULL;
    out->count = 0;
    if (!a || cJSON_IsNull(a)) return FP4_OK;
    if (!cJSON_IsArray(a))
        return steps_bad(err, name, index, -1, NULL, "expected an array or null");
    n = cJSON_GetArraySize(a);
    if (n == 0) return FP4_OK;
    out->steps = calloc((size_t)n, sizeof *out->steps);
    if (!out->steps)
        return fp4_fail(err, FP4_ERR_NOMEM, "%s: out of memory for %d steps", name, n);
    cJSON_ArrayForEach(e, a) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *us = cJSON_GetObjectItemCaseSensitive(e, "us");
        size_t len;
        if (!cJSON_IsObject(e)) return steps_bad(err, name, index, j, NULL, "expected an object");
        if (!nm) return steps_bad(err, name, index, j, "name", "missing");
        if (!cJSON_IsString(nm)) return steps_bad(err, name, index, j, "name", "expected a string");
        len = strlen(nm->valuestring);
        if (!fp4_utf8_valid(nm->valuestring, len))
            return steps_bad(err, name, index, j, "name", "string is not valid UTF-8");
        if (len >= sizeof out->steps[j].name) {
            char what[64];
            snprintf(what, sizeof what, "string longer than %zu bytes",
                     sizeof out->steps[j].name - 1);
            return steps_bad(err, name, index, j, "name", what);
        }
        if (!us) return steps_bad(err, name, index, j, "us", "missing");
        if (!cJSON_IsNumber(us)) return steps_bad(err, name, index, j, "us", "expected a number");
        if (!isfinite(us->valuedouble) || us->valuedouble < 0.0)
            return steps_bad(err, name, index, j, "us", "expected a finite number >= 0");
        memcpy(out->steps[j].name, nm->valuestring, len + 1);
        out->steps[j].us = us->valuedouble;
        j++;
    }
    out->count = j;
    return FP4_OK;
}

/* The rows' steps of text (already read as a report into run->report, so
 * the text is valid JSON with a rows array of that many objects). */
static fp4_status read_steps(const char *text, size_t len, const char *name, fp4_report_run *run,
                             fp4_err *err)
{
    cJSON *root = cJSON_ParseWithLength(text, len);
    const cJSON *rows, *row;
    fp4_status st = FP4_OK;
    int i = 0;
    if (!root) return fp4_fail(err, FP4_ERR_NOMEM, "%s: out of memory reading the steps", name);
    rows = cJSON_GetObjectItemCaseSensitive(root, "rows");
    cJSON_ArrayForEach(row, rows) {
        fp4_row_steps s;
        if (i >= run->report.nrows) break; /* cannot happen: the report has every row */
        st = read_row_steps(row, i, name, &s, err);
        if (st != FP4_OK) {
            free(s.steps);
            break;
        }
        if (s.count > 0 && !run->steps) {
            run->steps = calloc((size_t)run->report.nrows, sizeof *run->steps);
            if (!run->steps) {
                free(s.steps);
                st = fp4_fail(err, FP4_ERR_NOMEM, "%s: out of memory for the steps", name);
                break;
            }
        }
        if (s.count > 0) run->steps[i] = s;
        else free(s.steps);
        i++;
    }
    cJSON_Delete(root);
    return st;
}

fp4_status fp4_report_run_parse(const char *text, size_t len, const char *name,
                                fp4_report_run *run, fp4_err *err)
{
    fp4_status st;
    if (!run || (!text && len))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_report_run_parse: NULL argument");
    memset(run, 0, sizeof *run);
    if (!name) name = "(memory)";
    snprintf(run->name, sizeof run->name, "%s", name);
    st = fp4_report_parse_json(text ? text : "", len, name, &run->report, err);
    if (st == FP4_OK) st = read_steps(text ? text : "", len, name, run, err);
    if (st != FP4_OK) {
        fp4_report_run_free(run);
        memset(run, 0, sizeof *run);
    }
    return st;
}

/* The whole file into a buffer (at most FP4_JSON_MAX_BYTES, the report
 * reader's limit, which also refuses it with a clear message). */
static fp4_status slurp(const char *path, char **buf, size_t *len, fp4_err *err)
{
    FILE *f = fopen(path, "rb");
    char *b = NULL, *nb;
    size_t n = 0, cap = 0, got;
    fp4_status st = FP4_OK;
    *buf = NULL;
    *len = 0;
    if (!f) return fp4_fail(err, FP4_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    for (;;) {
        if (cap - n < 4096) {
            size_t ncap = cap ? 2 * cap : 65536;
            if (cap > FP4_JSON_MAX_BYTES) {
                st = fp4_fail(err, FP4_ERR_FORMAT,
                              "%s: more than the %llu bytes (%d MiB) a report may have", path,
                              (unsigned long long)FP4_JSON_MAX_BYTES,
                              (int)(FP4_JSON_MAX_BYTES >> 20));
                goto out;
            }
            nb = realloc(b, ncap);
            if (!nb) {
                st = fp4_fail(err, FP4_ERR_NOMEM, "out of memory reading %s", path);
                goto out;
            }
            b = nb;
            cap = ncap;
        }
        got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        st = fp4_fail(err, FP4_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        goto out;
    }
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

fp4_status fp4_report_run_read(const char *path, fp4_report_run *run, fp4_err *err)
{
    char *text = NULL;
    size_t len = 0;
    fp4_status st;
    if (!path || !run)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_report_run_read: NULL argument");
    memset(run, 0, sizeof *run);
    st = slurp(path, &text, &len, err);
    if (st == FP4_OK) st = fp4_report_run_parse(text, len, path, run, err);
    free(text);
    return st;
}

/* ======================================================================== */
/* number formats (C locale, as the table's)                                */
/* ======================================================================== */

/* "1.75x [1.74, 1.76]" */
static void fmt_ratio(char *b, size_t n, double v, double lo, double hi)
{
    char sv[24], slo[24], shi[24];
    snprintf(sv, sizeof sv, "%.2f", v);
    snprintf(slo, sizeof slo, "%.2f", lo);
    snprintf(shi, sizeof shi, "%.2f", hi);
    fp4_fmt_point(sv);
    fp4_fmt_point(slo);
    fp4_fmt_point(shi);
    snprintf(b, n, "%sx [%s, %s]", sv, isfinite(lo) ? slo : "-", isfinite(hi) ? shi : "-");
}

/* Append printf output to b (capacity n) at its end. */
static void append(char *b, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void append(char *b, size_t n, const char *fmt, ...)
{
    size_t len = strnlen(b, n);
    va_list ap;
    if (len + 1 >= n) return;
    va_start(ap, fmt);
    vsnprintf(b + len, n - len, fmt, ap);
    va_end(ap);
}

/* ======================================================================== */
/* the model                                                                */
/* ======================================================================== */

typedef struct series {
    char name[SERIES_NAME_LEN]; /* "cublas-bf16", "cublas-bf16 (old.json)", "fp4-sm90 GPU 1" */
    const char *backend;        /* in its first row */
    const char *workload;       /* an MoE row's label (model, step, mode, routing); NULL: GEMM */
    int run;
    int gpu;                    /* CUDA device; -1 when its run is not split by GPU */
    int colour;                 /* by backend (and MoE workload) */
    int style;                  /* marker and dash: the run's lane (run_gpus.first_lane) */
} series;

/* The GPUs of one run. A run whose rows span several GPUs (fp4bench run
 * --gpus) is split by GPU: its series, its table's GPU column, the per-GPU
 * spread. A run of one GPU is drawn as before, whatever its gpu numbers. */
typedef struct run_gpus {
    int *gpu;                  /* distinct gpu numbers of its rows, ascending */
    int count;
    int first_lane;            /* the style of its first GPU; later runs go on from here */
    fp4_gpu_analysis analysis; /* its GPUs compared (fp4_gpu_analyze), when count > 1 */
} run_gpus;

/* An ok, timed row of a latency panel. */
typedef struct lat_point {
    int64_t n, k, m;
    int series, run, row;
    long order; /* position over all runs' rows: first appearance */
} lat_point;

typedef struct panel {
    int start, count; /* a slice of the sorted latency points */
    long first;       /* order of its first row */
    int64_t n, k;
} panel;

/* A row with a ratio against its run's baseline (the baseline's own rows
 * are left out: they are 1 by definition). */
typedef struct ratio_point {
    const char *label;
    int64_t m, n, k;
    int series, run, row, category;
    long order;
} ratio_point;

typedef struct category {
    int index; /* of its first point in the sorted ratio points */
    long first;
} category;

typedef struct report_model {
    const fp4_report_run *runs;
    int nruns;
    char (*run_label)[256]; /* the name plots and tables show for each run */
    run_gpus *gpus;         /* per run */
    int any_split;          /* some run is split by GPU */
    series *ser;
    int nser, cap_ser;
    int *row_series; /* [run_offset[r] + row] */
    long *run_offset;
    long total_rows;
    lat_point *lat;
    int nlat;
    panel *panels;
    int npanels, panels_dropped;
    ratio_point *rat;
    int nrat, ncat, categories_dropped;
    int *cat_first; /* per category (in display order): its first ratio point */
    int any_roof_point, any_steps, nbars, bars_dropped;
    char step_names[32][FP4_NAME_LEN]; /* distinct step names, for colours */
    int nstep_names;
} report_model;

static void model_free(report_model *model)
{
    for (int r = 0; model->gpus && r < model->nruns; r++) {
        free(model->gpus[r].gpu);
        fp4_gpu_analysis_free(&model->gpus[r].analysis);
    }
    free(model->gpus);
    free(model->run_label);
    free(model->ser);
    free(model->row_series);
    free(model->run_offset);
    free(model->lat);
    free(model->panels);
    free(model->rat);
    free(model->cat_first);
    memset(model, 0, sizeof *model);
}

/* The base name of a path. */
static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static const fp4_row *row_of(const report_model *model, int run, int row)
{
    return &model->runs[run].report.rows[row];
}

/* Is run r split by GPU? */
static int run_split(const report_model *model, int r)
{
    return model->gpus[r].count > 1;
}

/* The position of CUDA device gpu among run r's GPUs (0 when absent). */
static int gpu_position(const report_model *model, int r, int gpu)
{
    for (int i = 0; i < model->gpus[r].count; i++)
        if (model->gpus[r].gpu[i] == gpu) return i;
    return 0;
}

/* The series of (backend, run, gpu), gpu -1 when the run is not split by
 * GPU; added when new. -1 when out of memory. */
/* A GEMM row's series is its backend's; an MoE row's is its backend's on its
 * workload, so that one line never joins two modes or routings of a shape. */
static int series_of(report_model *model, const char *backend, const char *workload, int run, int gpu)
{
    int colour = -1, ncolours = 0;
    for (int i = 0; i < model->nser; i++) {
        int same_backend = strcmp(model->ser[i].backend, backend) == 0;
        int same_workload = (!workload && !model->ser[i].workload) ||
                            (workload && model->ser[i].workload && strcmp(model->ser[i].workload, workload) == 0);
        if (same_backend && same_workload && (model->nruns == 1 || model->ser[i].run == run) &&
            model->ser[i].gpu == gpu)
            return i;
        if (same_backend && same_workload) colour = model->ser[i].colour;
        if (model->ser[i].colour + 1 > ncolours) ncolours = model->ser[i].colour + 1;
    }
    if (model->nser == model->cap_ser) {
        int cap = model->cap_ser ? 2 * model->cap_ser : 16;
        series *ns = realloc(model->ser, (size_t)cap * sizeof *ns);
        if (!ns) return -1;
        model->ser = ns;
        model->cap_ser = cap;
    }
    series *s = &model->ser[model->nser];
    s->backend = backend;
    s->workload = workload;
    s->run = run;
    s->gpu = gpu;
    s->colour = colour >= 0 ? colour : ncolours;
    s->style = model->gpus[run].first_lane + (gpu >= 0 ? gpu_position(model, run, gpu) : 0);
    snprintf(s->name, sizeof s->name, "%s", backend);
    if (workload) append(s->name, sizeof s->name, " %s", workload);
    if (gpu >= 0) append(s->name, sizeof s->name, " GPU %d", gpu);
    if (model->nruns > 1) append(s->name, sizeof s->name, " (%s)", model->run_label[run]);
    return model->nser++;
}

/* A file of fp4bench moe rows: its table reads as MoE (tokens, experts,
 * tokens an expert, tokens/s, % of the read bandwidth), its plots say T. */
static int run_is_moe(const fp4_report *rep)
{
    for (int i = 0; i < rep->nrows; i++)
        if (rep->rows[i].moe.present) return 1;
    return 0;
}

/* Timed and ok: the rows the plots draw. */
static int timed_ok(const fp4_row *w)
{
    return w->state == FP4_ROW_OK && w->t.count > 0 && isfinite(w->t.median) && w->t.median > 0.0;
}

static int cmp_i64(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b;
}

static int cmp_lat(const void *pa, const void *pb)
{
    const lat_point *a = pa, *b = pb;
    int c;
    if ((c = cmp_i64(a->n, b->n)) != 0) return c;
    if ((c = cmp_i64(a->k, b->k)) != 0) return c;
    if ((c = (a->series > b->series) - (a->series < b->series)) != 0) return c;
    if ((c = cmp_i64(a->m, b->m)) != 0) return c;
    return (a->order > b->order) - (a->order < b->order);
}

static int cmp_panel(const void *pa, const void *pb)
{
    const panel *a = pa, *b = pb;
    return (a->first > b->first) - (a->first < b->first);
}

static int cmp_rat(const void *pa, const void *pb)
{
    const ratio_point *a = pa, *b = pb;
    int c;
    if ((c = strcmp(a->label, b->label)) != 0) return c;
    if ((c = cmp_i64(a->m, b->m)) != 0) return c;
    if ((c = cmp_i64(a->n, b->n)) != 0) return c;
    if ((c = cmp_i64(a->k, b->k)) != 0) return c;
    return (a->order > b->order) - (a->order < b->order);
}

static int cmp_category(const void *pa, const void *pb)
{
    const category *a = pa, *b = pb;
    return (a->first > b->first) - (a->first < b->first);
}

static int same_shape(const ratio_point *a, const ratio_point *b)
{
    return strcmp(a->label, b->label) == 0 && a->m == b->m && a->n == b->n && a->k == b->k;
}

/* The run names: base names, or the names as given when two runs share a
 * base name. */
static void label_runs(report_model *model)
{
    int clash = 0;
    for (int i = 0; i < model->nruns; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(base_name(model->runs[i].name), base_name(model->runs[j].name)) == 0)
                clash = 1;
    for (int i = 0; i < model->nruns; i++) {
        const char *nm = model->runs[i].name[0] ? model->runs[i].name : "(unnamed)";
        snprintf(model->run_label[i], sizeof model->run_label[i], "%s", clash ? nm : base_name(nm));
    }
}

/* Does sorted point i start a panel (a new N, K)? */
static int new_panel(const lat_point *lat, int i)
{
    return i == 0 || lat[i].n != lat[i - 1].n || lat[i].k != lat[i - 1].k;
}

/* Latency panels: ok rows grouped by (N, K) in order of first appearance,
 * each sorted by series, then M. */
static fp4_status build_panels(report_model *model, fp4_err *err)
{
    int np = 0;
    model->lat = malloc((size_t)(model->total_rows ? model->total_rows : 1) * sizeof *model->lat);
    if (!model->lat) return fp4_fail(err, FP4_ERR_NOMEM, "out of memory for the latency plots");
    for (int r = 0; r < model->nruns; r++)
        for (int i = 0; i < model->runs[r].report.nrows; i++) {
            const fp4_row *w = row_of(model, r, i);
            lat_point *p;
            if (!timed_ok(w)) continue;
            p = &model->lat[model->nlat++];
            p->n = w->shape.n;
            p->k = w->shape.k;
            p->m = w->shape.m;
            p->run = r;
            p->row = i;
            p->order = model->run_offset[r] + i;
            p->series = model->row_series[p->order];
        }
    qsort(model->lat, (size_t)model->nlat, sizeof *model->lat, cmp_lat);
    for (int i = 0; i < model->nlat; i++)
        if (new_panel(model->lat, i)) np++;
    model->panels = calloc((size_t)(np ? np : 1), sizeof *model->panels);
    if (!model->panels) return fp4_fail(err, FP4_ERR_NOMEM, "out of memory for the latency plots");
    for (int i = 0; i < model->nlat; i++) {
        panel *p;
        if (new_panel(model->lat, i)) {
            p = &model->panels[model->npanels++];
            p->start = i;
            p->n = model->lat[i].n;
            p->k = model->lat[i].k;
            p->first = model->lat[i].order;
        }
        p = &model->panels[model->npanels - 1];
        p->count++;
        if (model->lat[i].order < p->first) p->first = model->lat[i].order;
    }
    qsort(model->panels, (size_t)model->npanels, sizeof *model->panels, cmp_panel);
    if (model->npanels > MAX_PANELS) {
        model->panels_dropped = model->npanels - MAX_PANELS;
        model->npanels = MAX_PANELS;
    }
    return FP4_OK;
}

/* Speedup categories: the ratio rows grouped by shape (label, M, N, K) in
 * order of first appearance. */
static fp4_status build_ratios(report_model *model, fp4_err *err)
{
    category *cats = NULL;
    int ncat = 0;
    model->rat = malloc((size_t)(model->total_rows ? model->total_rows : 1) * sizeof *model->rat);
    if (!model->rat) return fp4_fail(err, FP4_ERR_NOMEM, "out of memory for the speedup plot");
    for (int r = 0; r < model->nruns; r++) {
        const fp4_report *rep = &model->runs[r].report;
        for (int i = 0; i < rep->nrows; i++) {
            const fp4_row *w = &rep->rows[i];
            ratio_point *p;
            if (w->state != FP4_ROW_OK || !w->has_ratio || !isfinite(w->ratio) || !(w->ratio > 0.0))
                continue;
            if (rep->set.baseline[0] && strcmp(rep->set.baseline, w->backend) == 0) continue;
            p = &model->rat[model->nrat++];
            p->label = w->label;
            p->m = w->shape.m;
            p->n = w->shape.n;
            p->k = w->shape.k;
            p->run = r;
            p->row = i;
            p->order = model->run_offset[r] + i;
            p->series = model->row_series[p->order];
        }
    }
    qsort(model->rat, (size_t)model->nrat, sizeof *model->rat, cmp_rat);
    cats = malloc((size_t)(model->nrat ? model->nrat : 1) * sizeof *cats);
    if (!cats) return fp4_fail(err, FP4_ERR_NOMEM, "out of memory for the speedup plot");
    for (int i = 0; i < model->nrat; i++) {
        if (i == 0 || !same_shape(&model->rat[i], &model->rat[i - 1])) {
            cats[ncat].index = i;
            cats[ncat].first = model->rat[i].order;
            ncat++;
        }
        model->rat[i].category = ncat - 1; /* the group for now; the display rank below */
    }
    qsort(cats, (size_t)ncat, sizeof *cats, cmp_category);
    model->cat_first = malloc((size_t)(ncat ? ncat : 1) * sizeof *model->cat_first);
    if (!model->cat_first) {
        free(cats);
        return fp4_fail(err, FP4_ERR_NOMEM, "out of memory for the speedup plot");
    }
    for (int c = 0; c < ncat; c++) {
        int i = cats[c].index, g = model->rat[i].category;
        model->cat_first[c] = i;
        for (; i < model->nrat && model->rat[i].category == g; i++) model->rat[i].category = -1 - c;
    }
    for (int i = 0; i < model->nrat; i++) model->rat[i].category = -1 - model->rat[i].category;
    free(cats);
    model->ncat = ncat;
    if (model->ncat > MAX_CATEGORIES) {
        model->categories_dropped = model->ncat - MAX_CATEGORIES;
        model->ncat = MAX_CATEGORIES;
    }
    return FP4_OK;
}

/* The colour index of a step name (distinct names in order of appearance;
 * past the table's size they share the last colours). */
static int step_colour(report_model *model, const char *name)
{
    int cap = (int)(sizeof model->step_names / sizeof model->step_names[0]);
    for (int i = 0; i < model->nstep_names; i++)
        if (strcmp(model->step_names[i], name) == 0) return i;
    if (model->nstep_names == cap) return cap - 1;
    snprintf(model->step_names[model->nstep_names], sizeof model->step_names[0], "%s", name);
    return model->nstep_names++;
}

static int lookup_step_colour(const report_model *model, const char *name)
{
    for (int i = 0; i < model->nstep_names; i++)
        if (strcmp(model->step_names[i], name) == 0) return i;
    return model->nstep_names > 0 ? model->nstep_names - 1 : 0;
}

/* Does a row get a bar in the per-step plot? (A row that failed has no
 * times to break down.) */
static int has_steps(const report_model *model, int run, int row)
{
    return model->runs[run].steps && model->runs[run].steps[row].count > 0 &&
           row_of(model, run, row)->state == FP4_ROW_OK;
}

/* Does a row give a roofline point (its flops, bytes and rate known)? */
static int roof_point(const fp4_row *w)
{
    return timed_ok(w) && w->flops > 0.0 && w->bytes > 0.0 && isfinite(w->tflops) &&
           w->tflops > 0.0;
}

static int cmp_int(const void *pa, const void *pb)
{
    const int a = *(const int *)pa, b = *(const int *)pb;
    return (a > b) - (a < b);
}

/* Each run's GPUs (the distinct gpu numbers of its rows), the lanes of
 * marker and dash they take (a run of one GPU takes one, so that such runs
 * keep the run's style), and the comparison of the GPUs of split runs. */
static fp4_status find_gpus(report_model *model, fp4_err *err)
{
    int lane = 0;
    model->gpus = calloc((size_t)model->nruns, sizeof *model->gpus);
    if (!model->gpus) return fp4_fail(err, FP4_ERR_NOMEM, "out of memory building the report");
    for (int r = 0; r < model->nruns; r++) {
        const fp4_report *rep = &model->runs[r].report;
        run_gpus *g = &model->gpus[r];
        int *all = malloc((size_t)rep->nrows * sizeof *all);
        if (!all) return fp4_fail(err, FP4_ERR_NOMEM, "out of memory building the report");
        for (int i = 0; i < rep->nrows; i++) all[i] = rep->rows[i].gpu;
        qsort(all, (size_t)rep->nrows, sizeof *all, cmp_int);
        for (int i = 0; i < rep->nrows; i++)
            if (i == 0 || all[i] != all[i - 1]) all[g->count++] = all[i];
        g->gpu = all;
        g->first_lane = lane;
        lane += g->count;
        if (g->count > 1) {
            fp4_status st = fp4_gpu_analyze(rep, &g->analysis, err);
            if (st != FP4_OK) return st;
            model->any_split = 1;
        }
    }
    return FP4_OK;
}

static fp4_status model_build(report_model *model, const fp4_report_run *runs, int nruns,
                              fp4_err *err)
{
    fp4_status st;
    memset(model, 0, sizeof *model);
    if (!runs || nruns < 1)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "the HTML report needs at least one result file");
    model->runs = runs;
    model->nruns = nruns;
    for (int r = 0; r < nruns; r++)
        if (runs[r].report.nrows <= 0 || !runs[r].report.rows)
            return fp4_fail(err, FP4_ERR_FORMAT, "%s: no rows to report",
                            runs[r].name[0] ? runs[r].name : "(unnamed)");
    model->run_label = calloc((size_t)nruns, sizeof *model->run_label);
    model->run_offset = calloc((size_t)nruns, sizeof *model->run_offset);
    if (!model->run_label || !model->run_offset) goto nomem;
    label_runs(model);
    st = find_gpus(model, err);
    if (st != FP4_OK) {
        model_free(model);
        return st;
    }
    for (int r = 0; r < nruns; r++) {
        model->run_offset[r] = model->total_rows;
        model->total_rows += runs[r].report.nrows;
    }
    model->row_series = malloc((size_t)model->total_rows * sizeof *model->row_series);
    if (!model->row_series) goto nomem;
    for (int r = 0; r < nruns; r++)
        for (int i = 0; i < runs[r].report.nrows; i++) {
            const fp4_row *w = row_of(model, r, i);
            int s = series_of(model, w->backend, w->moe.step[0] ? w->label : NULL, r,
                              run_split(model, r) ? w->gpu : -1);
            if (s < 0) goto nomem;
            model->row_series[model->run_offset[r] + i] = s;
            if (roof_point(w)) model->any_roof_point = 1;
            if (has_steps(model, r, i)) {
                if (model->nbars < MAX_BARS) model->nbars++;
                else model->bars_dropped++;
                model->any_steps = 1;
                for (int j = 0; j < runs[r].steps[i].count; j++)
                    step_colour(model, runs[r].steps[i].steps[j].name);
            }
        }
    st = build_panels(model, err);
    if (st == FP4_OK) st = build_ratios(model, err);
    if (st != FP4_OK) model_free(model);
    return st;
nomem:
    model_free(model);
    return fp4_fail(err, FP4_ERR_NOMEM, "out of memory building the report");
}

/* ======================================================================== */
/* plots                                                                    */
/* ======================================================================== */

enum plot_kind { PLOT_LATENCY, PLOT_SPEEDUP, PLOT_ROOFLINE, PLOT_STEPS };

typedef struct plot_ref {
    enum plot_kind kind;
    int index; /* the panel of a latency plot */
} plot_ref;

/* Does the model hold anything for a plot of this kind? */
static int plot_has_data(const report_model *model, enum plot_kind kind)
{
    switch (kind) {
    case PLOT_LATENCY: return model->npanels > 0;
    case PLOT_SPEEDUP: return model->nrat > 0;
    case PLOT_ROOFLINE: return model->any_roof_point;
    case PLOT_STEPS: return model->any_steps;
    }
    return 0;
}

/* The file name (without .svg) of a plot. */
static void plot_name(const report_model *model, const plot_ref *p, char *b, size_t n)
{
    switch (p->kind) {
    case PLOT_LATENCY:
        snprintf(b, n, "latency-n%lld-k%lld", (long long)model->panels[p->index].n,
                 (long long)model->panels[p->index].k);
        break;
    case PLOT_SPEEDUP: snprintf(b, n, "speedup"); break;
    case PLOT_ROOFLINE: snprintf(b, n, "roofline"); break;
    case PLOT_STEPS: snprintf(b, n, "steps"); break;
    }
}

/* Legend sizes: the width of the widest entry. */
static double legend_width(const char *const *texts, int n)
{
    double w = 0.0;
    for (int i = 0; i < n; i++) {
        double t = fp4_svg_text_width(texts[i], 12.0);
        if (t > w) w = t;
    }
    w += 44.0;
    return w > 360.0 ? 360.0 : w;
}

/* A series' legend entry at (x, y). */
static void series_legend(FILE *f, const report_model *model, int s, double x, double y, int line)
{
    const series *se = &model->ser[s];
    fp4_svg_legend_entry(f, x, y, fp4_svg_colour(se->colour), line, se->style, se->style,
                         se->name);
}

/* "moe-up 16x2048x6144", cut to CATEGORY_CHARS characters (at a character
 * boundary, ending in "...") for an axis. */
static void category_label(char *b, size_t cap, const char *label, int64_t m, int64_t n,
                           int64_t k)
{
    char full[FP4_LABEL_LEN + 80];
    size_t chars = 0, i;
    snprintf(full, sizeof full, "%s%s%lldx%lldx%lld", label, label[0] ? " " : "", (long long)m,
             (long long)n, (long long)k);
    for (i = 0; full[i]; i++) {
        if (((unsigned char)full[i] & 0xC0) != 0x80) {
            if (chars == CATEGORY_CHARS) break;
            chars++;
        }
    }
    if (full[i]) snprintf(b, cap, "%.*s...", (int)i, full);
    else snprintf(b, cap, "%s", full);
}

/* ---- latency vs M --------------------------------------------------------------- */

static fp4_status plot_latency(FILE *f, const report_model *model, int pi, int standalone,
                               fp4_err *err)
{
    const panel *p = &model->panels[pi];
    const lat_point *pts = model->lat + p->start;
    const char *names[64];
    int legend_series[64], nleg = 0;
    double mmin = INFINITY, mmax = -INFINITY, tmin = INFINITY, tmax = -INFINITY;
    double *px = NULL, *py = NULL, lw;
    char title[256], attrs[96], labels[160] = "", tip[TIP_LEN], v1[32];
    fp4_svg_frame fr;
    fp4_svg_scale xs, ys;
    int width, height, nlabels = 0;

    px = malloc((size_t)p->count * sizeof *px);
    py = malloc((size_t)p->count * sizeof *py);
    if (!px || !py) {
        free(px);
        free(py);
        return fp4_fail(err, FP4_ERR_NOMEM, "out of memory drawing a latency plot");
    }
    for (int i = 0; i < p->count; i++) {
        const fp4_row *w = row_of(model, pts[i].run, pts[i].row);
        double rows_m = (double)pts[i].m, t = w->t.median;
        if (rows_m < mmin) mmin = rows_m;
        if (rows_m > mmax) mmax = rows_m;
        if (t < tmin) tmin = t;
        if (t > tmax) tmax = t;
        if ((i == 0 || pts[i].series != pts[i - 1].series) && nleg < 64) {
            legend_series[nleg] = pts[i].series;
            names[nleg++] = model->ser[pts[i].series].name;
        }
        /* the labels of the panel's rows, the first three */
        int seen = nlabels > 3; /* "..." written: no need to look */
        for (int j = 0; j < i && !seen; j++)
            seen = strcmp(row_of(model, pts[j].run, pts[j].row)->label, w->label) == 0;
        if (!seen && w->label[0]) {
            if (nlabels < 3) append(labels, sizeof labels, "%s%s", nlabels ? ", " : "", w->label);
            else if (nlabels == 3) append(labels, sizeof labels, ", ...");
            nlabels++;
        }
    }
    lw = legend_width(names, nleg);
    fr.left = 72.0;
    fr.top = 40.0;
    fr.right = fr.left + 420.0;
    fr.bottom = fr.top + 270.0;
    width = (int)(fr.right + 16.0 + lw);
    height = (int)(fr.bottom + 52.0);
    if (height < (int)(fr.top + 18.0 * nleg + 20.0)) height = (int)(fr.top + 18.0 * nleg + 20.0);

    /* a panel of MoE rows alone: their M is T, the tokens routed */
    int all_moe = 1;
    for (int i = 0; i < p->count && all_moe; i++)
        all_moe = row_of(model, model->lat[p->start + i].run, model->lat[p->start + i].row)->moe.present;
    snprintf(title, sizeof title, "Latency vs %s, N=%lld K=%lld", all_moe ? "T" : "M", (long long)p->n,
             (long long)p->k);
    snprintf(attrs, sizeof attrs, "data-n=\"%lld\" data-k=\"%lld\"", (long long)p->n,
             (long long)p->k);
    fp4_svg_begin(f, width, height, standalone, "latency", title, attrs);
    fp4_svg_scale_fit(&xs, 1, 0, mmin, mmax, fr.left, fr.right);
    fp4_svg_scale_fit(&ys, 1, 0, tmin, tmax, fr.bottom, fr.top);
    fp4_svg_axes(f, &fr, &xs, &ys, all_moe ? "T, tokens (log)" : "M (log)", "median us per call (log)");
    if (labels[0]) append(title, sizeof title, " (%s)", labels);
    fp4_svg_heading(f, &fr, title);

    for (int i = 0; i < p->count;) {
        int s = pts[i].series, j = i, n = 0;
        const series *se = &model->ser[s];
        for (; j < p->count && pts[j].series == s; j++, n++) {
            px[n] = fp4_svg_map(&xs, (double)pts[j].m);
            py[n] = fp4_svg_map(&ys, row_of(model, pts[j].run, pts[j].row)->t.median);
        }
        fp4_svg_polyline(f, px, py, n, fp4_svg_colour(se->colour), se->style, se->name);
        for (int q = 0; q < n; q++) {
            const fp4_row *w = row_of(model, pts[i + q].run, pts[i + q].row);
            fp4_fmt_us(v1, sizeof v1, w->t.median);
            snprintf(tip, sizeof tip, "%s: %s %lldx%lldx%lld%s%s: %s us", se->name, w->label,
                     (long long)w->shape.m, (long long)w->shape.n, (long long)w->shape.k,
                     w->variant[0] ? ", kernel " : "", w->variant, v1);
            fp4_svg_marker(f, px[q], py[q], se->style, fp4_svg_colour(se->colour), se->name, tip);
        }
        i = j;
    }
    for (int i = 0; i < nleg; i++)
        series_legend(f, model, legend_series[i], fr.right + 16.0, fr.top + 12.0 + 18.0 * i, 1);
    fp4_svg_end(f);
    free(px);
    free(py);
    return FP4_OK;
}

/* ---- speedup vs the baseline ------------------------------------------------------- */

/* The baselines of the runs: "cublas-bf16", or "a / b" when they differ. */
static void baselines_text(const report_model *model, char *b, size_t n)
{
    b[0] = '\0';
    for (int r = 0; r < model->nruns; r++) {
        const char *bl = model->runs[r].report.set.baseline;
        int seen = 0;
        if (!bl[0]) continue;
        for (int q = 0; q < r && !seen; q++)
            seen = strcmp(model->runs[q].report.set.baseline, bl) == 0;
        if (!seen) append(b, n, "%s%s", b[0] ? " / " : "", bl);
    }
    if (!b[0]) snprintf(b, n, "the baseline");
}

static fp4_status plot_speedup(FILE *f, const report_model *model, int standalone, fp4_err *err)
{
    int *slot = NULL, nslots = 0;
    const char **names = NULL;
    int *legend_series = NULL;
    double lo = 1.0, hi = 1.0, band, lw, left = 80.0;
    char title[160], bl[128], label[FP4_LABEL_LEN + 96], tip[TIP_LEN], v1[96];
    fp4_svg_frame fr;
    fp4_svg_scale xs;
    int width, height;

    /* each series present gets a slot within a shape's band */
    slot = malloc((size_t)model->nser * sizeof *slot);
    names = malloc((size_t)model->nser * sizeof *names);
    legend_series = malloc((size_t)model->nser * sizeof *legend_series);
    if (!slot || !names || !legend_series) {
        free(slot);
        free(names);
        free(legend_series);
        return fp4_fail(err, FP4_ERR_NOMEM, "out of memory drawing the speedup plot");
    }
    for (int s = 0; s < model->nser; s++) slot[s] = -1;
    for (int i = 0; i < model->nrat; i++) {
        const ratio_point *p = &model->rat[i];
        const fp4_row *w;
        if (p->category >= model->ncat) continue;
        w = row_of(model, p->run, p->row);
        if (slot[p->series] < 0) slot[p->series] = 0; /* present; numbered below */
        if (w->ratio < lo) lo = w->ratio;
        if (w->ratio > hi) hi = w->ratio;
        if (isfinite(w->ratio_lo) && w->ratio_lo > 0.0 && w->ratio_lo < lo) lo = w->ratio_lo;
        if (isfinite(w->ratio_hi) && w->ratio_hi > hi) hi = w->ratio_hi;
    }
    for (int s = 0; s < model->nser; s++)
        if (slot[s] == 0) {
            slot[s] = nslots;
            legend_series[nslots] = s;
            names[nslots++] = model->ser[s].name;
        }
    for (int c = 0; c < model->ncat; c++) {
        const ratio_point *p = &model->rat[model->cat_first[c]];
        double w;
        category_label(label, sizeof label, p->label, p->m, p->n, p->k);
        w = fp4_svg_text_width(label, 11.0) + 16.0;
        if (w > left) left = w;
    }
    lw = legend_width(names, nslots);
    band = 10.0 + 9.0 * nslots;
    if (band < 20.0) band = 20.0;
    fr.left = left;
    fr.top = 40.0;
    fr.right = fr.left + 480.0;
    fr.bottom = fr.top + band * model->ncat;
    width = (int)(fr.right + 16.0 + lw);
    height = (int)(fr.bottom + 56.0 + (model->categories_dropped ? 16.0 : 0.0));
    if (height < (int)(fr.top + 18.0 * nslots + 20.0))
        height = (int)(fr.top + 18.0 * nslots + 20.0);

    baselines_text(model, bl, sizeof bl);
    snprintf(title, sizeof title, "Speedup vs %s, with its 95%% CI", bl);
    fp4_svg_begin(f, width, height, standalone, "speedup", title, NULL);
    fp4_svg_scale_fit(&xs, 1, 0, lo, hi, fr.left, fr.right);
    fp4_svg_axes(f, &fr, &xs, NULL, "baseline time / backend time (log; right of 1: faster)", NULL);
    fp4_svg_heading(f, &fr, title);
    /* shape names and band separators */
    for (int c = 0; c < model->ncat; c++) {
        const ratio_point *p = &model->rat[model->cat_first[c]];
        double y = fr.top + band * (c + 0.5);
        category_label(label, sizeof label, p->label, p->m, p->n, p->k);
        if (c % 2 == 1)
            fp4_svg_rect(f, fr.left + 0.5, fr.top + band * c, fr.right - fr.left - 1.0, band,
                         "#f6f6f6", NULL, NULL);
        fp4_svg_text(f, fr.left - 8.0, y + 4.0, "end", 11.0, 0, 0.0, "#333333", label);
    }
    {
        double x1 = fp4_svg_map(&xs, 1.0);
        fp4_svg_line(f, x1, fr.top, x1, fr.bottom, "#444444", 1.2, 0);
    }
    for (int i = 0; i < model->nrat; i++) {
        const ratio_point *p = &model->rat[i];
        const fp4_row *w;
        const series *se;
        double y, x;
        if (p->category >= model->ncat) continue;
        w = row_of(model, p->run, p->row);
        se = &model->ser[p->series];
        y = fr.top + band * p->category + 5.0 + 9.0 * slot[p->series] + 4.5;
        x = fp4_svg_map(&xs, w->ratio);
        if (isfinite(w->ratio_lo) && isfinite(w->ratio_hi) && w->ratio_lo > 0.0) {
            double xl = fp4_svg_map(&xs, w->ratio_lo), xh = fp4_svg_map(&xs, w->ratio_hi);
            const char *col = fp4_svg_colour(se->colour);
            fp4_svg_line(f, xl, y, xh, y, col, 1.4, 0);
            fp4_svg_line(f, xl, y - 3.0, xl, y + 3.0, col, 1.4, 0);
            fp4_svg_line(f, xh, y - 3.0, xh, y + 3.0, col, 1.4, 0);
        }
        fmt_ratio(v1, sizeof v1, w->ratio, w->ratio_lo, w->ratio_hi);
        snprintf(tip, sizeof tip, "%s: %s %lldx%lldx%lld: %s vs %s", se->name, w->label,
                 (long long)w->shape.m, (long long)w->shape.n, (long long)w->shape.k, v1,
                 model->runs[p->run].report.set.baseline);
        /* each GPU's engine pairs its rounds with its own baseline rows */
        if (se->gpu >= 0) append(tip, sizeof tip, " on GPU %d", se->gpu);
        fp4_svg_marker(f, x, y, se->style, fp4_svg_colour(se->colour), se->name, tip);
    }
    for (int i = 0; i < nslots; i++)
        series_legend(f, model, legend_series[i], fr.right + 16.0, fr.top + 12.0 + 18.0 * i, 0);
    if (model->categories_dropped) {
        snprintf(label, sizeof label, "(the first %d shapes; %d more in the tables)", model->ncat,
                 model->categories_dropped);
        fp4_svg_text(f, fr.left, fr.bottom + 52.0, "start", 11.0, 0, 0.0, "#333333", label);
    }
    fp4_svg_end(f);
    free(slot);
    free(names);
    free(legend_series);
    return FP4_OK;
}

/* ---- roofline ------------------------------------------------------------------------ */

/* A ceiling of the roofline: a bandwidth (GB/s, a diagonal) or a rate
 * (TFLOP/s, a horizontal line), with the run it was measured in. */
typedef struct ceiling {
    int is_bandwidth;
    double value;
    char name[96];
    int run;
} ceiling;

#define MAX_CEILINGS 64

/* The ceilings of every run, those equal to an earlier run's left out. */
static int collect_ceilings(const report_model *model, ceiling *c, int cap)
{
    int n = 0;
    for (int r = 0; r < model->nruns; r++) {
        const fp4_ceilings *ce = &model->runs[r].report.ceil;
        struct {
            int bw;
            double v;
            const char *what;
        } cand[4] = {{1, ce->measured ? ce->read_gbps : 0.0, "read"},
                     {0, ce->measured ? ce->bf16_tflops : 0.0, "bf16"},
                     {0, ce->measured ? ce->fp8_tflops : 0.0, "fp8"},
                     {0, ce->cpu_gflops / 1000.0, "CPU reference"}};
        for (int i = 0; i < 4 && n < cap; i++) {
            int dup = 0;
            char v[32];
            if (!isfinite(cand[i].v) || !(cand[i].v > 0.0)) continue;
            for (int j = 0; j < n && !dup; j++)
                dup = c[j].is_bandwidth == cand[i].bw && c[j].value == cand[i].v &&
                      strstr(c[j].name, cand[i].what) == c[j].name;
            if (dup) continue;
            c[n].is_bandwidth = cand[i].bw;
            c[n].value = cand[i].v;
            c[n].run = r;
            fp4_fmt_rate(v, sizeof v, cand[i].v);
            snprintf(c[n].name, sizeof c[n].name, "%s %s %s", cand[i].what, v,
                     cand[i].bw ? "GB/s" : "TFLOP/s");
            n++;
        }
    }
    return n;
}

static fp4_status plot_roofline(FILE *f, const report_model *model, int standalone, fp4_err *err)
{
    static const char roofline_title[] = "Roofline: achieved TFLOP/s vs arithmetic intensity";
    ceiling ce[MAX_CEILINGS];
    int nce = collect_ceilings(model, ce, MAX_CEILINGS), nleg = 0;
    int *present = calloc((size_t)model->nser, sizeof *present);
    const char **names = malloc((size_t)model->nser * sizeof *names);
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY, lw;
    double top_rate = 0.0;
    char tip[TIP_LEN], v1[32], v2[32], v3[32], label[160];
    fp4_svg_frame fr;
    fp4_svg_scale xs, ys;
    int width, height;

    if (!present || !names) {
        free(present);
        free(names);
        return fp4_fail(err, FP4_ERR_NOMEM, "out of memory drawing the roofline");
    }
    for (int r = 0; r < model->nruns; r++)
        for (int i = 0; i < model->runs[r].report.nrows; i++) {
            const fp4_row *w = row_of(model, r, i);
            double ai;
            if (!roof_point(w)) continue;
            ai = w->flops / w->bytes;
            if (ai < xmin) xmin = ai;
            if (ai > xmax) xmax = ai;
            if (w->tflops < ymin) ymin = w->tflops;
            if (w->tflops > ymax) ymax = w->tflops;
            present[model->row_series[model->run_offset[r] + i]] = 1;
        }
    for (int i = 0; i < nce; i++)
        if (!ce[i].is_bandwidth) {
            if (ce[i].value < ymin) ymin = ce[i].value;
            if (ce[i].value > ymax) ymax = ce[i].value;
            if (ce[i].value > top_rate) top_rate = ce[i].value;
        }
    /* the ridge points, where a bandwidth meets a rate */
    for (int i = 0; i < nce; i++)
        for (int j = 0; j < nce; j++)
            if (ce[i].is_bandwidth && !ce[j].is_bandwidth) {
                double ridge = ce[j].value * 1000.0 / ce[i].value;
                if (ridge < xmin) xmin = ridge;
                if (ridge > xmax) xmax = ridge;
            }
    for (int s = 0; s < model->nser; s++)
        if (present[s]) names[nleg++] = model->ser[s].name;
    lw = legend_width(names, nleg);
    fr.left = 72.0;
    fr.top = 40.0;
    fr.right = fr.left + 520.0;
    fr.bottom = fr.top + 360.0;
    width = (int)(fr.right + 16.0 + lw);
    height = (int)(fr.bottom + 52.0);
    if (height < (int)(fr.top + 18.0 * nleg + 20.0)) height = (int)(fr.top + 18.0 * nleg + 20.0);

    fp4_svg_begin(f, width, height, standalone, "roofline", roofline_title, NULL);
    fp4_svg_scale_fit(&xs, 1, 0, xmin, xmax, fr.left, fr.right);
    fp4_svg_scale_fit(&ys, 1, 0, ymin, ymax, fr.bottom, fr.top);
    /* room above the highest ceiling for its label */
    ys.hi *= 1.6;
    fp4_svg_axes(f, &fr, &xs, &ys, "arithmetic intensity, FLOP per byte moved (log)",
                 "TFLOP/s (log)");
    fp4_svg_heading(f, &fr, roofline_title);

    fputs("<g data-role=\"ceilings\">\n", f);
    for (int i = 0; i < nce; i++) {
        char name[160];
        snprintf(name, sizeof name, "%s%s%s%s", ce[i].name, model->nruns > 1 ? " (" : "",
                 model->nruns > 1 ? model->run_label[ce[i].run] : "", model->nruns > 1 ? ")" : "");
        if (ce[i].is_bandwidth) {
            /* TFLOP/s = FLOP/byte * GB/s / 1000, up to the highest rate */
            double bw = ce[i].value / 1000.0, x0 = xs.lo, x1 = xs.hi;
            double px0, py0, px1, py1;
            if (bw * x0 < ys.lo) x0 = ys.lo / bw;
            if (top_rate > 0.0 && top_rate / bw < x1) x1 = top_rate / bw;
            if (bw * x1 > ys.hi) x1 = ys.hi / bw;
            if (!(x0 < x1)) continue;
            px0 = fp4_svg_map(&xs, x0);
            py0 = fp4_svg_map(&ys, bw * x0);
            px1 = fp4_svg_map(&xs, x1);
            py1 = fp4_svg_map(&ys, bw * x1);
            fp4_svg_line(f, px0, py0, px1, py1, "#555555", 1.6, ce[i].run);
            fp4_svg_text(f, px0 + 0.2 * (px1 - px0), py0 + 0.2 * (py1 - py0) - 6.0, "start", 11.0,
                         0, atan2(py1 - py0, px1 - px0) * 180.0 / 3.14159265358979, "#333333",
                         name);
        } else {
            double x0 = xs.lo, py;
            for (int j = 0; j < nce; j++) /* start at the ridge of the same run's bandwidth */
                if (ce[j].is_bandwidth && ce[j].run == ce[i].run) {
                    double ridge = ce[i].value * 1000.0 / ce[j].value;
                    if (ridge > x0) x0 = ridge;
                }
            py = fp4_svg_map(&ys, ce[i].value);
            fp4_svg_line(f, fp4_svg_map(&xs, x0), py, fr.right, py, "#555555", 1.6, ce[i].run);
            fp4_svg_text(f, fr.right - 4.0, py - 5.0, "end", 11.0, 0, 0.0, "#333333", name);
        }
    }
    fputs("</g>\n", f);

    for (int r = 0; r < model->nruns; r++)
        for (int i = 0; i < model->runs[r].report.nrows; i++) {
            const fp4_row *w = row_of(model, r, i);
            const series *se;
            if (!roof_point(w)) continue;
            se = &model->ser[model->row_series[model->run_offset[r] + i]];
            fp4_fmt_rate(v1, sizeof v1, w->tflops);
            fp4_fmt_rate(v2, sizeof v2, w->flops / w->bytes);
            fp4_fmt_rate(v3, sizeof v3, w->pct_roofline);
            snprintf(tip, sizeof tip,
                     "%s: %s %lldx%lldx%lld: %s TFLOP/s at %s FLOP/byte, %s%% of its roofline",
                     se->name, w->label, (long long)w->shape.m, (long long)w->shape.n,
                     (long long)w->shape.k, v1, v2, v3);
            fp4_svg_marker(f, fp4_svg_map(&xs, w->flops / w->bytes), fp4_svg_map(&ys, w->tflops),
                           se->style, fp4_svg_colour(se->colour), se->name, tip);
        }
    nleg = 0;
    for (int s = 0; s < model->nser; s++)
        if (present[s])
            series_legend(f, model, s, fr.right + 16.0, fr.top + 12.0 + 18.0 * nleg++, 0);
    if (nce == 0) {
        snprintf(label, sizeof label, "no ceilings measured");
        fp4_svg_text(f, fr.left + 8.0, fr.top + 16.0, "start", 11.0, 0, 0.0, "#333333", label);
    }
    fp4_svg_end(f);
    free(present);
    free(names);
    return FP4_OK;
}

/* ---- per-step breakdown ------------------------------------------------------------------ */

static fp4_status plot_steps(FILE *f, const report_model *model, int standalone, fp4_err *err)
{
    static const char steps_title[] = "Time per step of each row that has steps";
    const char *names[32];
    double total_max = 0.0, left = 80.0, lw, bar = 14.0, band = 22.0;
    char label[FP4_LABEL_LEN + SERIES_NAME_LEN + 96], tip[TIP_LEN], v1[32], v2[32];
    fp4_svg_frame fr;
    fp4_svg_scale xs;
    int width, height, b;

    for (int r = 0, nb = 0; r < model->nruns && nb < model->nbars; r++)
        for (int i = 0; i < model->runs[r].report.nrows && nb < model->nbars; i++) {
            const fp4_row *w = row_of(model, r, i);
            double total = 0.0, tw;
            if (!has_steps(model, r, i)) continue;
            nb++;
            for (int j = 0; j < model->runs[r].steps[i].count; j++)
                total += model->runs[r].steps[i].steps[j].us;
            if (total > total_max) total_max = total;
            category_label(label, sizeof label, w->label, w->shape.m, w->shape.n, w->shape.k);
            append(label, sizeof label, " %s",
                   model->ser[model->row_series[model->run_offset[r] + i]].name);
            tw = fp4_svg_text_width(label, 11.0) + 16.0;
            if (tw > left) left = tw;
        }
    if (left > 520.0) left = 520.0;
    for (int i = 0; i < model->nstep_names; i++) names[i] = model->step_names[i];
    lw = legend_width(names, model->nstep_names);
    fr.left = left;
    fr.top = 40.0;
    fr.right = fr.left + 480.0;
    fr.bottom = fr.top + band * model->nbars;
    width = (int)(fr.right + 56.0 + lw);
    height = (int)(fr.bottom + 56.0 + (model->bars_dropped ? 16.0 : 0.0));
    if (height < (int)(fr.top + 18.0 * model->nstep_names + 20.0))
        height = (int)(fr.top + 18.0 * model->nstep_names + 20.0);

    fp4_svg_begin(f, width, height, standalone, "steps", steps_title, NULL);
    fp4_svg_scale_fit(&xs, 0, 1, 0.0, total_max, fr.left, fr.right);
    fp4_svg_axes(f, &fr, &xs, NULL, "us per call, stacked by step", NULL);
    fp4_svg_heading(f, &fr, steps_title);
    b = 0;
    for (int r = 0; r < model->nruns && b < model->nbars; r++)
        for (int i = 0; i < model->runs[r].report.nrows && b < model->nbars; i++) {
            const fp4_row *w = row_of(model, r, i);
            const fp4_row_steps *st;
            const series *se;
            double y, x, total = 0.0;
            if (!has_steps(model, r, i)) continue;
            st = &model->runs[r].steps[i];
            se = &model->ser[model->row_series[model->run_offset[r] + i]];
            y = fr.top + band * b + (band - bar) / 2.0;
            category_label(label, sizeof label, w->label, w->shape.m, w->shape.n, w->shape.k);
            append(label, sizeof label, " %s", se->name);
            fp4_svg_text(f, fr.left - 8.0, y + bar - 3.0, "end", 11.0, 0, 0.0, "#333333", label);
            for (int j = 0; j < st->count; j++) total += st->steps[j].us;
            fprintf(f, "<g data-series=\"");
            fp4_svg_escape(f, se->name);
            fputs("\">\n", f);
            {
                double before = 0.0; /* segment j spans the running sum before and after it */
                for (int j = 0; j < st->count; j++) {
                    double x1 = fp4_svg_map(&xs, before + st->steps[j].us);
                    x = fp4_svg_map(&xs, before);
                    before += st->steps[j].us;
                    fp4_fmt_us(v1, sizeof v1, st->steps[j].us);
                    fp4_fmt_rate(v2, sizeof v2, total > 0.0 ? 100.0 * st->steps[j].us / total : NAN);
                    snprintf(tip, sizeof tip, "%s: %s %lldx%lldx%lld: %s %s us (%s%%)", se->name,
                             w->label, (long long)w->shape.m, (long long)w->shape.n,
                             (long long)w->shape.k, st->steps[j].name, v1, v2);
                    fp4_svg_rect(f, x, y, x1 - x, bar,
                                 fp4_svg_colour(lookup_step_colour(model, st->steps[j].name)),
                                 st->steps[j].name, tip);
                }
            }
            fputs("</g>\n", f);
            fp4_fmt_us(v1, sizeof v1, total);
            fp4_svg_text(f, fp4_svg_map(&xs, total) + 4.0, y + bar - 3.0, "start", 11.0, 0, 0.0,
                         "#333333", v1);
            b++;
        }
    for (int i = 0; i < model->nstep_names; i++)
        fp4_svg_legend_entry(f, fr.right + 56.0, fr.top + 12.0 + 18.0 * i,
                             fp4_svg_colour(i), 0, 0, 1, model->step_names[i]);
    if (model->bars_dropped) {
        snprintf(label, sizeof label, "(the first %d rows with steps; %d more not drawn)",
                 model->nbars, model->bars_dropped);
        fp4_svg_text(f, fr.left, fr.bottom + 52.0, "start", 11.0, 0, 0.0, "#333333", label);
    }
    fp4_svg_end(f);
    return FP4_OK;
}

static fp4_status draw_plot(FILE *f, const report_model *model, const plot_ref *p, int standalone,
                            fp4_err *err)
{
    switch (p->kind) {
    case PLOT_LATENCY: return plot_latency(f, model, p->index, standalone, err);
    case PLOT_SPEEDUP: return plot_speedup(f, model, standalone, err);
    case PLOT_ROOFLINE: return plot_roofline(f, model, standalone, err);
    case PLOT_STEPS: return plot_steps(f, model, standalone, err);
    }
    return fp4_fail(err, FP4_ERR_INTERNAL, "unknown plot kind %d", (int)p->kind);
}

/* ======================================================================== */
/* the page                                                                 */
/* ======================================================================== */

static const char page_style[] =
    "body{font-family:'DejaVu Sans',Arial,sans-serif;font-size:14px;color:#222;margin:24px;"
    "max-width:1500px}\n"
    "h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}\n"
    "h3{font-size:15px}p.how{max-width:980px;color:#333}\n"
    ".plots{display:flex;flex-wrap:wrap;gap:16px}\n"
    "svg{max-width:100%;height:auto;border:1px solid #e4e4e4}\n"
    "table{border-collapse:collapse;font-size:13px;margin:8px 0}\n"
    "th,td{border:1px solid #d0d0d0;padding:3px 7px;vertical-align:top}\n"
    "th{background:#f2f2f2;text-align:left}\n"
    "td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\n"
    "table.runs td{max-width:520px;word-break:break-word}\n"
    "td.differs{background:#fff4d6}\n"
    "tr.failed td{background:#fde4e1}tr.failed td.state{color:#a40000;font-weight:bold}\n"
    "tr.unsupported td{background:#f1f1f1;color:#555}\n"
    "td.reason{white-space:pre-wrap}\n";

/* Only on pages with a run split by GPU, so that other pages stay as they were. */
static const char split_style[] =
    "td.slow{background:#fde4e1;color:#a40000;font-weight:bold}\n"
    "table.spread tr.summary>*{border-top:2px solid #999}\n";

static void put_text(FILE *f, const char *s)
{
    fp4_svg_escape(f, s);
}

/* ---- runs: one column per file ------------------------------------------------------ */

#define CELL_LEN 1200
typedef void (*run_field_fn)(const fp4_report *r, char *b, size_t n);

static void field_version(const fp4_report *r, char *b, size_t n)
{
    snprintf(b, n, "%s (commit %s)", r->version[0] ? r->version : "?",
             r->commit[0] ? r->commit : "unknown");
}
static void field_started(const fp4_report *r, char *b, size_t n)
{
    snprintf(b, n, "%s", r->started);
}
static void field_host(const fp4_report *r, char *b, size_t n)
{
    snprintf(b, n, "%s", r->host);
}
static void field_command(const fp4_report *r, char *b, size_t n)
{
    snprintf(b, n, "%s", r->command);
}

static void field_gpu(const fp4_report *r, char *b, size_t n)
{
    const fp4_device_info *d = &r->dev;
    b[0] = '\0';
    if (!d->present) {
        snprintf(b, n, "none (%s)", d->why_absent[0] ? d->why_absent : "no reason given");
        return;
    }
    /* sizes a report does not give (NaN) are left out */
    append(b, n, "%s, sm_%d%d, %d SMs", d->name[0] ? d->name : "?", d->cc_major, d->cc_minor, d->sms);
    if (isfinite(d->l2_bytes)) append(b, n, ", L2 %.0f MiB", d->l2_bytes / 1048576.0);
    if (isfinite(d->mem_bytes)) append(b, n, ", memory %.1f GiB", d->mem_bytes / 1073741824.0);
}

static void field_driver(const fp4_report *r, char *b, size_t n)
{
    char v[16];
    b[0] = '\0';
    if (!r->dev.present) return;
    fp4_fmt_cuda_version(v, sizeof v, r->dev.driver_version);
    if (r->dev.driver_string[0]) append(b, n, "%s, ", r->dev.driver_string);
    append(b, n, "CUDA driver API %s", v);
}

static void field_cuda(const fp4_report *r, char *b, size_t n)
{
    b[0] = '\0';
    if (r->dev.present) fp4_fmt_cuda_version(b, n, r->dev.runtime_version);
}

static void field_clocks(const fp4_report *r, char *b, size_t n)
{
    b[0] = '\0';
    if (!r->dev.present) return;
    if (r->dev.sm_clock_max_mhz > 0) append(b, n, "SM max %.0f MHz", r->dev.sm_clock_max_mhz);
    if (r->dev.mem_clock_max_mhz > 0)
        append(b, n, "%smemory max %.0f MHz", b[0] ? ", " : "", r->dev.mem_clock_max_mhz);
}

/* What the rows' telemetry saw: SM clock range, power, temperature. */
static void field_seen(const fp4_report *r, char *b, size_t n)
{
    double smin = INFINITY, smax = -INFINITY, pmax = -INFINITY, tmax = -INFINITY;
    int rows = 0, low = 0;
    b[0] = '\0';
    for (int i = 0; i < r->nrows; i++) {
        const fp4_telemetry *t = &r->rows[i].tel;
        if (!t->valid) continue;
        rows++;
        if (isfinite(t->sm_clock_min_mhz) && t->sm_clock_min_mhz < smin) smin = t->sm_clock_min_mhz;
        if (isfinite(t->sm_clock_mhz) && t->sm_clock_mhz > smax) smax = t->sm_clock_mhz;
        if (isfinite(t->power_w) && t->power_w > pmax) pmax = t->power_w;
        if (isfinite(t->temp_c) && t->temp_c > tmax) tmax = t->temp_c;
        if (t->low_clock_samples > 0) low++;
    }
    if (!rows) {
        snprintf(b, n, "no telemetry");
        return;
    }
    if (isfinite(smin) && isfinite(smax)) append(b, n, "SM %.0f-%.0f MHz", smin, smax);
    if (isfinite(pmax)) append(b, n, "%spower up to %.0f W", b[0] ? ", " : "", pmax);
    if (isfinite(tmax)) append(b, n, "%sup to %.0f C", b[0] ? ", " : "", tmax);
    append(b, n, "%s%d of %d rows with low-clock samples", b[0] ? "; " : "", low, rows);
}

static void field_ceilings(const fp4_report *r, char *b, size_t n)
{
    const fp4_ceilings *c = &r->ceil;
    char v1[32], v2[32];
    b[0] = '\0';
    if (c->measured) {
        fp4_fmt_rate(v1, sizeof v1, c->read_gbps);
        append(b, n, "read %s GB/s", v1);
        if (c->bf16_tflops > 0) {
            fp4_fmt_rate(v1, sizeof v1, c->bf16_tflops);
            append(b, n, ", bf16 %s TFLOP/s", v1);
            if (c->bf16_sustained_tflops > 0) {
                fp4_fmt_rate(v2, sizeof v2, c->bf16_sustained_tflops);
                append(b, n, " (sustained %s)", v2);
            }
        }
        if (c->fp8_tflops > 0) {
            fp4_fmt_rate(v1, sizeof v1, c->fp8_tflops);
            append(b, n, ", fp8 %s TFLOP/s", v1);
            if (c->fp8_sustained_tflops > 0) {
                fp4_fmt_rate(v2, sizeof v2, c->fp8_sustained_tflops);
                append(b, n, " (sustained %s)", v2);
            }
        }
        if (c->light_ratio > 0) append(b, n, ", light phase %gx each sample", c->light_ratio);
    } else {
        append(b, n, "not measured");
    }
    if (c->cpu_gflops > 0) {
        fp4_fmt_rate(v1, sizeof v1, c->cpu_gflops);
        append(b, n, ", CPU reference %s GFLOP/s", v1);
    }
}

static void field_datasheet(const fp4_report *r, char *b, size_t n)
{
    const fp4_device_info *d = &r->dev;
    char v1[32], v2[32], v3[32], v4[32];
    b[0] = '\0';
    if (!d->present) return;
    fp4_fmt_rate(v1, sizeof v1, d->peak_bf16_tflops);
    fp4_fmt_rate(v2, sizeof v2, d->peak_fp8_tflops);
    fp4_fmt_rate(v3, sizeof v3, d->peak_fp4_tflops);
    fp4_fmt_rate(v4, sizeof v4, d->peak_bw_gbps);
    snprintf(b, n, "bf16 %s, fp8 %s, fp4 %s TFLOP/s; %s GB/s", v1, v2, v3, v4);
}

static void field_data(const fp4_report *r, char *b, size_t n)
{
    snprintf(b, n, "%s, seed %llu", fp4_data_kind_name(r->set.data),
             (unsigned long long)r->set.seed);
}

static void field_l2(const fp4_report *r, char *b, size_t n)
{
    if (!r->dev.present) snprintf(b, n, "n/a (CPU rows)");
    else snprintf(b, n, "%s",
                  r->set.hot ? "hot (L2-resident)" : "cold (operands rotated over >= 3x L2)");
}

static void field_timing(const fp4_report *r, char *b, size_t n)
{
    if (!r->dev.present) snprintf(b, n, "host clock (no GPU)");
    else snprintf(b, n, "%s%s", r->set.use_graphs ? "CUDA graph batches" : "plain launches",
                  r->set.measure_launch && r->set.use_graphs ? ", plain launches too" : "");
}

static void field_stop(const fp4_report *r, char *b, size_t n)
{
    const fp4_stop_rule *s = &r->set.stop;
    b[0] = '\0';
    /* limits a report does not give (NaN) are left out */
    if (isfinite(r->set.warmup_ms)) append(b, n, "warm-up %g ms; ", r->set.warmup_ms);
    append(b, n, "until");
    if (isfinite(s->noise_target)) append(b, n, " noise < %g%%,", 100.0 * s->noise_target);
    append(b, n, " at least %d samples", s->min_samples);
    if (isfinite(s->min_time_s)) append(b, n, " and %g s", s->min_time_s);
    if (isfinite(s->max_time_s)) append(b, n, ", at most %g s", s->max_time_s);
}

static void field_baseline(const fp4_report *r, char *b, size_t n)
{
    snprintf(b, n, "%s", r->set.baseline[0] ? r->set.baseline : "none");
}

static void field_other(const fp4_report *r, char *b, size_t n)
{
    const fp4_settings *s = &r->set;
    b[0] = '\0';
    append(b, n, "ceilings %s", s->measure_ceilings ? "requested" : "not requested");
    if (s->verify_only) append(b, n, ", verify only");
    if (s->time_reference) append(b, n, ", references timed");
    if (s->keep_samples) append(b, n, ", samples kept");
    append(b, n, ", round order seed %llu", (unsigned long long)s->order_seed);
}

static void field_rows(const fp4_report *r, char *b, size_t n)
{
    int c[3] = {0, 0, 0};
    for (int i = 0; i < r->nrows; i++)
        if ((int)r->rows[i].state >= 0 && (int)r->rows[i].state < 3) c[r->rows[i].state]++;
    snprintf(b, n, "%d: %d ok, %d unsupported, %d FAILED", r->nrows, c[FP4_ROW_OK],
             c[FP4_ROW_UNSUPPORTED], c[FP4_ROW_FAILED]);
}

/* The header's lines. flag_difference: where runs differ in it, their
 * cells are highlighted (a difference in the machine or the settings makes
 * rows hard to compare; start times, commands and what was seen always
 * differ). */
static const struct {
    const char *name;
    run_field_fn fn;
    int flag_difference;
} run_fields[] = {
    {"fp4bench", field_version, 1},     {"started", field_started, 0},
    {"host", field_host, 1},            {"command", field_command, 0},
    {"GPU", field_gpu, 1},              {"driver", field_driver, 1},
    {"CUDA runtime", field_cuda, 1},    {"clocks", field_clocks, 1},
    {"seen in the rows", field_seen, 0}, {"ceilings", field_ceilings, 1},
    {"datasheet", field_datasheet, 1},  {"data", field_data, 1},
    {"L2", field_l2, 1},                {"timing", field_timing, 1},
    {"stopping rule", field_stop, 1},   {"baseline", field_baseline, 1},
    {"other settings", field_other, 1}, {"rows", field_rows, 0},
};
#define NRUN_FIELDS ((int)(sizeof run_fields / sizeof run_fields[0]))

static fp4_status write_runs(FILE *f, const report_model *model, fp4_err *err)
{
    char *cells = malloc((size_t)model->nruns * CELL_LEN);
    if (!cells) return fp4_fail(err, FP4_ERR_NOMEM, "out of memory writing the report");
    fputs("<section id=\"runs\">\n<h2>Runs</h2>\n<table class=\"runs\">\n<tr><th></th>", f);
    for (int r = 0; r < model->nruns; r++) {
        fputs("<th>", f);
        put_text(f, model->run_label[r]);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    for (int i = 0; i < NRUN_FIELDS; i++) {
        int differs = 0;
        for (int r = 0; r < model->nruns; r++) {
            char *c = cells + (size_t)r * CELL_LEN;
            c[0] = '\0';
            run_fields[i].fn(&model->runs[r].report, c, CELL_LEN);
            if (r > 0 && strcmp(c, cells) != 0) differs = 1;
        }
        fputs("<tr><th>", f);
        put_text(f, run_fields[i].name);
        fputs("</th>", f);
        for (int r = 0; r < model->nruns; r++) {
            const char *c = cells + (size_t)r * CELL_LEN;
            int flag = differs && run_fields[i].flag_difference;
            fputs(flag ? "<td class=\"differs\">" : "<td>", f);
            put_text(f, c[0] ? c : "-");
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
    if (model->nruns > 1)
        fputs("<p class=\"how\">Highlighted: the machine or a setting in which the runs "
              "differ.</p>\n", f);
    fputs("</section>\n", f);
    free(cells);
    return FP4_OK;
}

/* ---- result tables ---------------------------------------------------------------- */

static void put_number_cell(FILE *f, const char *s)
{
    fputs("<td class=\"num\">", f);
    put_text(f, s);
    fputs("</td>", f);
}

/* A row's case: its label, then M, N and K (a GEMM), or T, the experts with
 * tokens of E and the tokens an expert min/median/max (an MoE row), then its
 * backend. */
static void put_case_cells(FILE *f, const fp4_row *w, int moe)
{
    char b[64];
    fputs("<td>", f);
    put_text(f, w->label);
    fputs("</td>", f);
    if (moe) {
        const fp4_row_moe *x = &w->moe;
        snprintf(b, sizeof b, "%lld", (long long)(x->present ? x->tokens : w->shape.m));
        put_number_cell(f, b);
        if (x->present) snprintf(b, sizeof b, "%d of %d", x->active_experts, x->experts);
        else snprintf(b, sizeof b, "-");
        put_number_cell(f, b);
        if (x->present) snprintf(b, sizeof b, "%d / %g / %d", x->tokens_min, x->tokens_median, x->tokens_max);
        else snprintf(b, sizeof b, "-");
        fp4_fmt_point(b);
        put_number_cell(f, b);
    } else {
        snprintf(b, sizeof b, "%lld", (long long)w->shape.m);
        put_number_cell(f, b);
        snprintf(b, sizeof b, "%lld", (long long)w->shape.n);
        put_number_cell(f, b);
        snprintf(b, sizeof b, "%lld", (long long)w->shape.k);
        put_number_cell(f, b);
    }
    fputs("<td>", f);
    put_text(f, w->backend);
    fputs("</td>", f);
}

/* The excess of a row over its GPUs' median, "+10.0%" (C locale). */
static void fmt_excess(char *b, size_t n, double excess)
{
    if (!isfinite(excess)) snprintf(b, n, "-");
    else snprintf(b, n, "%+.1f%%", 100.0 * excess);
    fp4_fmt_point(b);
}

/* The GPU cell of row i of a split run: its number, and "S" with the
 * numbers when the GPU comparison calls it slow. */
static void put_gpu_cell(FILE *f, const report_model *model, int run, int i)
{
    const fp4_gpu_mark *m = &model->gpus[run].analysis.marks[i];
    char b[32], t[32];
    if (!m->slow) {
        fprintf(f, "<td class=\"num\">%d</td>", row_of(model, run, i)->gpu);
        return;
    }
    fmt_excess(b, sizeof b, m->excess);
    fmt_excess(t, sizeof t, m->threshold);
    fprintf(f, "<td class=\"num slow\" title=\"slow: %s over the GPUs' median (threshold %s)\">"
               "%d S</td>", b, t, row_of(model, run, i)->gpu);
}

static void write_table(FILE *f, const report_model *model, int run)
{
    const fp4_report *rep = &model->runs[run].report;
    const char *bl = rep->set.baseline;
    const int split = run_split(model, run), moe = run_is_moe(rep);
    char b[FP4_ERR_MSG_LEN + 64];
    fputs("<h3>", f);
    put_text(f, model->run_label[run]);
    fputs("</h3>\n<table class=\"results\" data-run=\"", f);
    put_text(f, model->run_label[run]);
    fputs(moe ? "\">\n<tr><th>label</th><th>T</th><th>experts with tokens</th>"
                "<th>tokens an expert (min / median / max)</th><th>backend</th>"
              : "\">\n<tr><th>label</th><th>M</th><th>N</th><th>K</th><th>backend</th>",
          f);
    if (split) fputs("<th>GPU</th>", f);
    fputs(moe ? "<th>kernel</th><th>state</th><th>median us</th><th>noise</th><th>tokens/s</th>"
                "<th>GB/s</th><th>% read BW</th><th>vs "
              : "<th>kernel</th><th>state</th><th>median us</th><th>noise</th><th>TFLOP/s</th>"
                "<th>GB/s</th><th>% roofline</th><th>vs ",
          f);
    put_text(f, bl[0] ? bl : "baseline");
    fputs(" [95% CI]</th><th>verified</th></tr>\n", f);
    for (int i = 0; i < rep->nrows; i++) {
        const fp4_row *w = &rep->rows[i];
        const char *state = fp4_row_state_name(w->state);
        fputs("<tr", f);
        if (w->state == FP4_ROW_FAILED) fputs(" class=\"failed\" data-state=\"FAILED\"", f);
        else if (w->state == FP4_ROW_UNSUPPORTED)
            fputs(" class=\"unsupported\" data-state=\"unsupported\"", f);
        else fputs(" data-state=\"ok\"", f);
        if (split) {
            fprintf(f, " data-gpu=\"%d\"", w->gpu);
            if (model->gpus[run].analysis.marks[i].slow) fputs(" data-slow=\"1\"", f);
        }
        fputs(">", f);
        put_case_cells(f, w, moe);
        if (split) put_gpu_cell(f, model, run, i);
        fputs("<td>", f);
        put_text(f, w->variant);
        fputs("</td><td class=\"state\">", f);
        put_text(f, state);
        fputs("</td>", f);
        if (w->state != FP4_ROW_OK) {
            fputs("<td colspan=\"7\" class=\"reason\">", f);
            put_text(f, w->reason[0] ? w->reason : "(no reason given)");
            fputs("</td></tr>\n", f);
            continue;
        }
        fp4_fmt_us(b, sizeof b, w->t.count > 0 ? w->t.median : NAN);
        put_number_cell(f, b);
        if (w->t.count <= 0 || !isfinite(w->t.noise)) snprintf(b, sizeof b, "-");
        else snprintf(b, sizeof b, "%.*f%%", w->t.noise < 0.1 ? 2 : 1, 100.0 * w->t.noise);
        fp4_fmt_point(b);
        put_number_cell(f, b);
        if (moe) /* an MoE row's rate is its tokens/s, its ceiling the read bandwidth */
            fp4_fmt_rate(b, sizeof b, w->t.count > 0 && w->moe.present ? w->moe.tokens_per_s : NAN);
        else
            fp4_fmt_rate(b, sizeof b, w->t.count > 0 && w->flops > 0 ? w->tflops : NAN);
        put_number_cell(f, b);
        fp4_fmt_rate(b, sizeof b, w->t.count > 0 ? w->gbps : NAN);
        put_number_cell(f, b);
        if (moe)
            fp4_fmt_rate(b, sizeof b,
                         w->t.count > 0 && w->moe.present && w->moe.pct_bandwidth >= 0 ? w->moe.pct_bandwidth : NAN);
        else
            fp4_fmt_rate(b, sizeof b, w->t.count > 0 ? w->pct_roofline : NAN);
        if (strcmp(b, "-") != 0) append(b, sizeof b, "%%");
        put_number_cell(f, b);
        if (w->has_ratio) fmt_ratio(b, sizeof b, w->ratio, w->ratio_lo, w->ratio_hi);
        else if (bl[0] && strcmp(bl, w->backend) == 0) snprintf(b, sizeof b, "baseline");
        else snprintf(b, sizeof b, "-");
        put_number_cell(f, b);
        if (w->verified == -1) snprintf(b, sizeof b, "reference");
        else if (w->verified == 1 && isfinite(w->err_norm))
            snprintf(b, sizeof b, "ok %.1e", w->err_norm);
        else if (w->verified == 1) snprintf(b, sizeof b, "ok");
        else snprintf(b, sizeof b, "no");
        fp4_fmt_point(b);
        fputs("<td>", f);
        put_text(f, b);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* ---- per-GPU spread ------------------------------------------------------------------ */

/* A GPU's column heading, its device as a tooltip where the file lists it. */
static void put_gpu_heading(FILE *f, const fp4_report *rep, int gpu)
{
    const fp4_gpu_run *found = NULL;
    for (int i = 0; i < rep->ngpus && i < FP4_MAX_GPUS && !found; i++)
        if (rep->gpus[i].x.index == gpu) found = &rep->gpus[i];
    fputs("<th", f);
    if (found && found->dev.name[0]) {
        fputs(" title=\"", f);
        put_text(f, found->dev.name);
        if (found->x.pci_bus_id[0]) {
            fputs(", ", f);
            put_text(f, found->x.pci_bus_id);
        }
        fputs("\"", f);
    }
    fprintf(f, ">GPU %d</th>", gpu);
}

/* One GPU's cell of a case: its excess over the GPUs' median, S when slow;
 * the state when not timed; "-" when the GPU has no row or nothing to compare. */
static void put_spread_cell(FILE *f, const report_model *model, int run, int gpu, int row)
{
    const fp4_gpu_mark *m;
    char b[32], t[32];
    if (row < 0 || !timed_ok(row_of(model, run, row))) {
        fprintf(f, "<td class=\"num\" data-gpu=\"%d\">", gpu);
        put_text(f, row < 0 || row_of(model, run, row)->state == FP4_ROW_OK
                        ? "-"
                        : fp4_row_state_name(row_of(model, run, row)->state));
        fputs("</td>", f);
        return;
    }
    m = &model->gpus[run].analysis.marks[row];
    fmt_excess(b, sizeof b, m->excess);
    if (!m->slow) {
        fprintf(f, "<td class=\"num\" data-gpu=\"%d\">%s</td>", gpu, b);
        return;
    }
    fmt_excess(t, sizeof t, m->threshold);
    fprintf(f, "<td class=\"num slow\" data-gpu=\"%d\" data-slow=\"1\" title=\"slow: over "
               "the threshold %s\">%s S</td>", gpu, t, b);
}

/* The spread table of split run `run`: a line per case and backend (the
 * analysis' groups), a column per GPU, then each GPU's geometric mean. */
static fp4_status write_spread_table(FILE *f, const report_model *model, int run, fp4_err *err)
{
    const run_gpus *g = &model->gpus[run];
    const fp4_gpu_analysis *a = &g->analysis;
    const fp4_report *rep = &model->runs[run].report;
    char b[64];
    /* cell[group * count + GPU position]: the row there, -1 for none */
    int *cell = malloc((size_t)(a->ngroups ? a->ngroups : 1) * (size_t)g->count * sizeof *cell);
    if (!cell) return fp4_fail(err, FP4_ERR_NOMEM, "out of memory writing the report");
    for (long i = 0; i < (long)a->ngroups * g->count; i++) cell[i] = -1;
    for (int i = 0; i < rep->nrows && i < a->nrows; i++)
        cell[(long)a->marks[i].group * g->count + gpu_position(model, run, rep->rows[i].gpu)] = i;

    fputs("<h3>", f);
    put_text(f, model->run_label[run]);
    fputs("</h3>\n<table class=\"spread\" data-run=\"", f);
    put_text(f, model->run_label[run]);
    fputs("\">\n<tr><th>label</th><th>M</th><th>N</th><th>K</th><th>backend</th>"
          "<th>GPUs' median us</th><th>spread</th>", f);
    for (int k = 0; k < g->count; k++) put_gpu_heading(f, rep, g->gpu[k]);
    fputs("</tr>\n", f);
    for (int gi = 0; gi < a->ngroups; gi++) {
        const fp4_gpu_group *gr = &a->groups[gi];
        const fp4_row *w = &rep->rows[gr->first_row];
        fputs("<tr>", f);
        put_case_cells(f, w, 0); /* run --gpus: GEMM rows */
        fp4_fmt_us(b, sizeof b, gr->median_us);
        put_number_cell(f, b);
        if (isfinite(gr->spread)) snprintf(b, sizeof b, "%.1f%%", 100.0 * gr->spread);
        else snprintf(b, sizeof b, "-");
        fp4_fmt_point(b);
        put_number_cell(f, b);
        for (int k = 0; k < g->count; k++)
            put_spread_cell(f, model, run, g->gpu[k], cell[(long)gi * g->count + k]);
        fputs("</tr>\n", f);
    }
    fputs("<tr class=\"summary\"><th colspan=\"7\">each GPU over the cases: geometric mean "
          "(slow rows)</th>", f);
    for (int k = 0; k < g->count; k++) {
        const fp4_gpu_summary *s = fp4_gpu_analysis_find(a, g->gpu[k]);
        fmt_excess(b, sizeof b, s ? s->ratio_geomean - 1.0 : NAN);
        if (s && s->slow_rows > 0) {
            append(b, sizeof b, " (%d S)", s->slow_rows);
            fprintf(f, "<td class=\"num slow\" data-gpu=\"%d\" data-slow=\"%d\">", g->gpu[k],
                    s->slow_rows);
        } else {
            fprintf(f, "<td class=\"num\" data-gpu=\"%d\">", g->gpu[k]);
        }
        put_text(f, b);
        fputs("</td>", f);
    }
    fputs("</tr>\n</table>\n", f);
    free(cell);
    return FP4_OK;
}

/* The section of the per-GPU spread: one table per run split by GPU. */
static fp4_status write_spread(FILE *f, const report_model *model, fp4_err *err)
{
    fp4_status st = FP4_OK;
    fprintf(f, "<section id=\"gpus\">\n<h2>Per-GPU spread</h2>\n<p class=\"how\">For each case "
               "and backend of a file measured on several GPUs at once (fp4bench run --gpus): "
               "each GPU's median time relative to the median of the GPUs' medians (+10.0%%: "
               "10%% slower than it), and the spread (max - min) / median. S marks a GPU that "
               "the slow rule of fp4bench run --gpus calls slow (the flag S of its table): over "
               "the GPUs' median by more than max(%g%%, its noise + the GPUs' median noise), "
               "more than the measurement can tell apart. The last line: each GPU's geometric "
               "mean over the cases it shares with another GPU, and its slow rows.</p>\n",
            100.0 * FP4_SLOW_MIN);
    for (int r = 0; r < model->nruns && st == FP4_OK; r++)
        if (run_split(model, r)) st = write_spread_table(f, model, r, err);
    fputs("</section>\n", f);
    return st;
}

/* ---- sections ------------------------------------------------------------------------ */

static fp4_status write_section(FILE *f, const report_model *model, const char *id,
                                const char *heading, const char *how, const plot_ref *plots,
                                int nplots, const char *empty, fp4_err *err)
{
    fp4_status st = FP4_OK;
    fprintf(f, "<section id=\"%s\">\n<h2>", id);
    put_text(f, heading);
    fputs("</h2>\n<p class=\"how\">", f);
    put_text(f, how);
    fputs("</p>\n", f);
    if (nplots == 0) {
        fputs("<p class=\"empty\">", f);
        put_text(f, empty);
        fputs("</p>\n", f);
    } else {
        fputs("<div class=\"plots\">\n", f);
        for (int i = 0; i < nplots && st == FP4_OK; i++)
            st = draw_plot(f, model, &plots[i], 0, err);
        fputs("</div>\n", f);
    }
    fputs("</section>\n", f);
    return st;
}

/* What tells the series apart, for the plots' explanations. */
static const char *series_how(const report_model *model)
{
    if (model->any_split && model->nruns > 1)
        return " and file, and per GPU in a file measured on several (colour: backend; marker "
               "and dash: file and GPU)";
    if (model->any_split) return " and GPU (colour: backend; marker and dash: GPU)";
    if (model->nruns > 1) return " and file (colour: backend; marker and dash: file)";
    return "";
}

static fp4_status write_page(FILE *f, const report_model *model, fp4_err *err)
{
    fp4_status st;
    plot_ref *lat = NULL, one;
    char how[768], bl[128];
    lat = malloc((size_t)(model->npanels ? model->npanels : 1) * sizeof *lat);
    if (!lat) return fp4_fail(err, FP4_ERR_NOMEM, "out of memory writing the report");
    for (int i = 0; i < model->npanels; i++) {
        lat[i].kind = PLOT_LATENCY;
        lat[i].index = i;
    }

    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"generator\" content=\"fp4bench report\">\n<title>fp4bench report: ", f);
    for (int r = 0; r < model->nruns; r++) {
        if (r) fputs(", ", f);
        put_text(f, model->run_label[r]);
    }
    fputs("</title>\n<style>\n", f);
    fputs(page_style, f);
    if (model->any_split) fputs(split_style, f);
    fputs("</style>\n</head>\n<body>\n<h1>fp4bench report: ", f);
    for (int r = 0; r < model->nruns; r++) {
        if (r) fputs(", ", f);
        put_text(f, model->run_label[r]);
    }
    fputs("</h1>\n", f);
    st = write_runs(f, model, err);
    if (st != FP4_OK) goto out;

    int all_moe = model->nruns > 0; /* files of fp4bench moe alone: M is T, the tokens */
    for (int r = 0; r < model->nruns; r++) all_moe &= run_is_moe(&model->runs[r].report);
    snprintf(how, sizeof how,
             "Median time per %s against %s, one panel per (N, K), both axes log; one "
             "line per backend%s. Hover a point for its row.%s",
             all_moe ? "MoE call" : "GEMM call", all_moe ? "T, the tokens routed" : "M", series_how(model),
             model->panels_dropped ? " Only the first panels are drawn; the tables have every row."
                                   : "");
    st = write_section(f, model, "latency", all_moe ? "Latency vs T" : "Latency vs M", how, lat, model->npanels,
                       "No timed ok rows: nothing to plot.", err);
    if (st != FP4_OK) goto out;

    baselines_text(model, bl, sizeof bl);
    snprintf(how, sizeof how,
             "For each shape, %s's median time divided by the backend's (right of 1: the backend "
             "is faster), on a log axis, with the whisker spanning the 95%% confidence interval "
             "of the paired rounds. The baseline's own rows are 1 by definition and not drawn.%s",
             bl,
             model->any_split ? " With several GPUs, each GPU's rows are paired with the "
                                "baseline's rows on the same GPU."
                              : "");
    one.kind = PLOT_SPEEDUP;
    one.index = 0;
    st = write_section(f, model, "speedup", "Speedup vs the baseline", how, &one,
                       plot_has_data(model, PLOT_SPEEDUP),
                       "No row has a ratio: the runs had no baseline "
                       "(fp4bench run --baseline NAME).",
                       err);
    if (st != FP4_OK) goto out;

    one.kind = PLOT_ROOFLINE;
    st = write_section(f, model, "roofline", "Roofline",
                       "Each timed row at its arithmetic intensity (FLOP per byte it moves in its "
                       "own operand formats) and achieved TFLOP/s, both log. The diagonal is the "
                       "measured read bandwidth, the horizontal lines the measured bf16 and fp8 "
                       "tensor rates: a point under the diagonal left of a ridge is bound by "
                       "memory, right of it by compute; its distance below the roof is what is "
                       "left to gain.",
                       &one, plot_has_data(model, PLOT_ROOFLINE),
                       "No timed row with known FLOPs and bytes.", err);
    if (st != FP4_OK) goto out;

    if (plot_has_data(model, PLOT_STEPS)) {
        one.kind = PLOT_STEPS;
        st = write_section(f, model, "steps", "Per-step breakdown",
                           "Rows that carry steps (an MoE layer's routing, expert GEMMs, ...): "
                           "one bar per row, its steps stacked in order, the total at its end.",
                           &one, 1, "", err);
        if (st != FP4_OK) goto out;
    }

    if (model->any_split) {
        st = write_spread(f, model, err);
        if (st != FP4_OK) goto out;
    }

    fputs("<section id=\"tables\">\n<h2>Results</h2>\n<p class=\"how\">Every row of every file. "
          "unsupported and FAILED rows carry their reason. noise: half-width of the 95% CI of the "
          "median, relative to it; % roofline: the roofline floor over the median; the ratio: the "
          "baseline's median over this one (above 1: faster) with its 95% CI; verified: "
          "||D-R||/||R|| against the exact reference.", f);
    int any_moe = 0;
    for (int r = 0; r < model->nruns; r++) any_moe |= run_is_moe(&model->runs[r].report);
    if (any_moe)
        fputs(" A file of MoE rows: T tokens, the experts with tokens of E, the tokens an expert "
              "(min / median / max), tokens/s, and % read BW: the bytes a call reads over the read "
              "bandwidth measured in that run.", f);
    if (model->any_split)
        fputs(" GPU: the device the row ran on, S when the slow rule calls it slow (see the "
              "per-GPU spread).", f);
    fputs("</p>\n", f);
    for (int r = 0; r < model->nruns; r++) write_table(f, model, r);
    fputs("</section>\n</body>\n</html>\n", f);
out:
    free(lat);
    return st;
}

fp4_status fp4_report_write_html(FILE *f, const fp4_report_run *runs, int nruns, fp4_err *err)
{
    report_model model;
    fp4_status st;
    if (!f) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_report_write_html: NULL file");
    st = model_build(&model, runs, nruns, err);
    if (st != FP4_OK) return st;
    st = write_page(f, &model, err);
    model_free(&model);
    if (st == FP4_OK && (fflush(f) != 0 || ferror(f)))
        st = fp4_fail(err, FP4_ERR_IO, "cannot write the HTML report: %s", strerror(errno));
    return st;
}

/* ---- files ---------------------------------------------------------------------------- */

/* Write with fn into path through fp4_io_out (src/io/file.h): complete or
 * not at all for a regular file. */
typedef fp4_status (*write_fn)(FILE *f, const report_model *model, const plot_ref *p, fp4_err *err);

static fp4_status write_atomically(const char *path, write_fn fn, const report_model *model,
                                   const plot_ref *p, fp4_err *err)
{
    fp4_io_out out;
    fp4_status st = fp4_io_out_open(&out, path, err);
    if (st != FP4_OK) return st;
    return fp4_io_out_finish(&out, fn(out.f, model, p, err), err);
}

static fp4_status page_fn(FILE *f, const report_model *model, const plot_ref *p, fp4_err *err)
{
    (void)p;
    return write_page(f, model, err);
}

static fp4_status plot_fn(FILE *f, const report_model *model, const plot_ref *p, fp4_err *err)
{
    return draw_plot(f, model, p, 1, err);
}

fp4_status fp4_report_write_html_file(const char *path, const fp4_report_run *runs, int nruns,
                                      fp4_err *err)
{
    report_model model;
    fp4_status st;
    if (!path || !path[0])
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_report_write_html_file: no path");
    st = model_build(&model, runs, nruns, err);
    if (st != FP4_OK) return st;
    st = write_atomically(path, page_fn, &model, NULL, err);
    model_free(&model);
    return st;
}

fp4_status fp4_report_write_svgs(const char *dir, const fp4_report_run *runs, int nruns,
                                 int *count, fp4_err *err)
{
    report_model model;
    fp4_status st;
    struct stat sb;
    int written = 0;
    if (count) *count = 0;
    if (!dir || !dir[0])
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_report_write_svgs: no folder");
    if (stat(dir, &sb) != 0)
        return fp4_fail(err, FP4_ERR_IO, "cannot use folder %s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return fp4_fail(err, FP4_ERR_IO, "%s is not a folder", dir);
    st = model_build(&model, runs, nruns, err);
    if (st != FP4_OK) return st;
    for (int i = 0; st == FP4_OK && i < model.npanels + 3; i++) {
        plot_ref p;
        char name[96], *path;
        size_t len;
        if (i < model.npanels) {
            p.kind = PLOT_LATENCY;
            p.index = i;
        } else {
            p.index = 0;
            static const enum plot_kind after_panels[3] = {PLOT_SPEEDUP, PLOT_ROOFLINE,
                                                           PLOT_STEPS};
            p.kind = after_panels[i - model.npanels];
            if (!plot_has_data(&model, p.kind)) continue;
        }
        plot_name(&model, &p, name, sizeof name);
        len = strlen(dir) + strlen(name) + 6;
        path = malloc(len);
        if (!path) {
            st = fp4_fail(err, FP4_ERR_NOMEM, "out of memory writing %s", dir);
            break;
        }
        snprintf(path, len, "%s/%s.svg", dir, name);
        st = write_atomically(path, plot_fn, &model, &p, err);
        free(path);
        if (st == FP4_OK) written++;
    }
    model_free(&model);
    if (count) *count = written;
    return st;
}
