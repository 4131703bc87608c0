/* The MoE engine on the CPU: fake MoE backends that misbehave in each way a
 * kernel can (a wrong value, an unwritten row, a poison that does not poison,
 * a failing run) end FAILED while the good ones are verified and timed; the
 * rows carry the MoE fields; the reference is sampled for large layers and
 * still catches an unwritten row outside the sample; MoE rows survive the
 * JSON and CSV writers and readers. argv[1]: a scratch directory. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fp4/engine.h"
#include "fp4/moe.h"
#include "fp4/moe_backend.h"
#include "fp4/moe_engine.h"
#include "fp4/report.h"
#include "bench/moe_inputs.h"

enum fake_mode {
    F_GOOD,          /* the exact references */
    F_WRONG,         /* token 0's first output off by half the largest */
    F_UNWRITTEN_MID, /* the middle output row left as poisoned */
    F_NO_POISON,     /* poison() writes zeros */
    F_RUN_ERROR,     /* run() fails */
    F_ONE_COPY,      /* every copy computed from copy 0's input */
    F_MODES
};

typedef struct fake_plan {
    int mode;
    const fp4_moe_problem *p;
    float *out, *d; /* out: [copies][count] */
    size_t count;
    int copies;
} fake_plan;

static fp4_status fake_open_mode(void **inst, int mode)
{
    *inst = (void *)(intptr_t)(mode + 1);
    return FP4_OK;
}

static void fake_close(void *inst)
{
}

static void fake_release(void *p_)
{
    fake_plan *p = p_;
    if (!p) return;
    free(p->out);
    free(p->d);
    free(p);
}

static fp4_status fake_prepare(void *inst, const fp4_moe_problem *pr, int copies, void **out, fp4_err *err)
{
    fp4_status st = fp4_moe_problem_check(pr, copies, err);
    if (st != FP4_OK) return st;
    fake_plan *p = calloc(1, sizeof *p);
    if (!p) return fp4_fail(err, FP4_ERR_NOMEM, "fake: no memory");
    p->mode = (int)(intptr_t)inst - 1;
    p->p = pr;
    p->count = (size_t)fp4_moe_output_rows(pr) * (size_t)fp4_moe_output_cols(pr);
    p->copies = copies;
    p->out = malloc((size_t)copies * p->count * sizeof *p->out);
    p->d = malloc((size_t)pr->plan->pairs * (size_t)pr->dims.hidden * sizeof *p->d);
    if (!p->out || !p->d) {
        fake_release(p);
        return fp4_fail(err, FP4_ERR_NOMEM, "fake: no memory");
    }
    *out = p;
    return FP4_OK;
}

static fp4_status fake_poison(void *p_, int copy, void *stream, fp4_err *err)
{
    fake_plan *p = p_;
    float *o = p->out + (size_t)copy * p->count;
    for (size_t i = 0; i < p->count; i++) o[i] = p->mode == F_NO_POISON ? 0.0f : NAN;
    return FP4_OK;
}

static fp4_status fake_run(void *p_, int copy, void *stream, fp4_err *err)
{
    fake_plan *p = p_;
    const fp4_moe_problem *pr = p->p;
    fp4_status st = FP4_OK;
    if (p->mode == F_RUN_ERROR) return fp4_fail(err, FP4_ERR_CUDA, "fake: the kernel crashed");
    /* the copy's own output (unwritten rows must stay as poison left them) */
    float *tmp = malloc(p->count * sizeof *tmp);
    if (!tmp) return fp4_fail(err, FP4_ERR_NOMEM, "fake: no memory");
    float *o = p->out + (size_t)copy * p->count;
    if (p->mode == F_ONE_COPY) copy = 0;
    switch (pr->step) {
    case FP4_MOE_STEP_GATE_UP:
        st = pr->mode == FP4_MOE_W4A4
                 ? fp4_moe_grouped_ref_w4a4(fp4_moe_problem_a(pr, copy), FP4_MOE_A_PER_TOKEN, pr->weights->gate_up,
                                            pr->plan, tmp, 0, err)
                 : fp4_moe_grouped_ref_w4a16(fp4_moe_problem_a_bf16(pr, copy), pr->a_rows, pr->a_cols,
                                             FP4_MOE_A_PER_TOKEN, pr->weights->gate_up, pr->plan, tmp, 0, err);
        break;
    case FP4_MOE_STEP_DOWN:
        st = pr->mode == FP4_MOE_W4A4
                 ? fp4_moe_grouped_ref_w4a4(fp4_moe_problem_a(pr, copy), FP4_MOE_A_PER_PAIR, pr->weights->down,
                                            pr->plan, p->d, 0, err)
                 : fp4_moe_grouped_ref_w4a16(fp4_moe_problem_a_bf16(pr, copy), pr->a_rows, pr->a_cols,
                                             FP4_MOE_A_PER_PAIR, pr->weights->down, pr->plan, p->d, 0, err);
        if (st == FP4_OK) st = fp4_moe_combine(p->d, pr->dims.hidden, pr->routing, tmp, err);
        break;
    case FP4_MOE_STEP_LAYER: {
        fp4_moe_layer_opts lo = {pr->mode, pr->a_encode_scale, pr->h_encode_scale, 0};
        fp4_moe_layer_out io;
        memset(&io, 0, sizeof io);
        io.out = tmp;
        st = fp4_moe_layer_ref(&pr->dims, pr->weights, fp4_moe_problem_a_bf16(pr, copy), pr->routing, &lo, &io, err);
        break;
    }
    }
    if (st == FP4_OK) {
        const size_t cols = (size_t)fp4_moe_output_cols(pr), mid = (size_t)fp4_moe_output_rows(pr) / 2;
        for (size_t i = 0; i < p->count; i++)
            if (!(p->mode == F_UNWRITTEN_MID && i / cols == mid)) o[i] = tmp[i];
        if (p->mode == F_WRONG) { /* half the largest output: beyond every tolerance, the layer's too */
            float amax = 0.0f;
            for (size_t i = 0; i < p->count; i++) amax = fmaxf(amax, fabsf(tmp[i]));
            o[0] += amax > 0.0f ? 0.5f * amax : 1.0f;
        }
    }
    free(tmp);
    return st;
}

static fp4_status fake_read(void *p_, int copy, float *out, fp4_err *err)
{
    fake_plan *p = p_;
    memcpy(out, p->out + (size_t)copy * p->count, p->count * sizeof *out);
    return FP4_OK;
}

#define FAKE(m, nm)                                                                                  \
    static fp4_status fake_open_##m(void **inst, fp4_err *err)                                       \
    {                                                                                                \
        return fake_open_mode(inst, m);                                                              \
    }                                                                                                \
    static const fp4_moe_backend_ops fake_##m = {                                                    \
        .api_version = FP4_MOE_BACKEND_API_VERSION, .name = nm, .summary = "fake", .flags = 0,       \
        .math = FP4_MATH_CPU, .wformat = FP4_MOE_WEIGHTS_NVFP4, .tol_max = 1e-6, .tol_norm = 1e-6,   \
        .open = fake_open_##m, .close = fake_close, .prepare = fake_prepare, .poison = fake_poison,  \
        .run = fake_run, .read_output = fake_read, .release = fake_release};
FAKE(F_GOOD, "fake-good")
FAKE(F_WRONG, "fake-wrong")
FAKE(F_UNWRITTEN_MID, "fake-unwritten")
FAKE(F_NO_POISON, "fake-no-poison")
FAKE(F_RUN_ERROR, "fake-run-error")
FAKE(F_ONE_COPY, "fake-one-copy")

static const fp4_row *row_of(const fp4_report *r, int from, const char *backend)
{
    for (int i = from; i < r->nrows; i++)
        if (strcmp(r->rows[i].backend, backend) == 0) return &r->rows[i];
    return NULL;
}

typedef struct run {
    fp4_settings set;
    fp4_report report;
    fp4_engine *e;
    fp4_moe_engine *m;
} run;

static int run_open(run *x, int verify_only, const char *baseline)
{
    fp4_err err;
    memset(x, 0, sizeof *x);
    fp4_settings_default(&x->set);
    x->set.verify_only = verify_only;
    x->set.warmup_ms = 0;
    x->set.stop.max_time_s = 0.3;
    x->set.stop.min_samples = 3;
    if (baseline) snprintf(x->set.baseline, sizeof x->set.baseline, "%s", baseline);
    if (fp4_engine_create(&x->set, &x->report, &x->e, &err) != FP4_OK ||
        fp4_moe_engine_create(x->e, &x->report, &x->m, &err) != FP4_OK) {
        fprintf(stderr, "engine: %s\n", fp4_err_text(&err));
        return -1;
    }
    return 0;
}

static void run_close(run *x)
{
    fp4_moe_engine_destroy(x->m, NULL);
    fp4_engine_destroy(x->e, NULL);
    fp4_report_free(&x->report);
}

static fp4_moe_case small_case(fp4_moe_step step, fp4_moe_mode mode, int64_t tokens)
{
    fp4_moe_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.model, sizeof c.model, "custom");
    c.tp = 1;
    c.dims.hidden = 96; /* H != 2I: gate_up's width (2I) and down's (H) differ */
    c.dims.inter = 32;
    c.dims.experts = 8;
    c.dims.top_k = 2;
    c.dims.act = FP4_MOE_ACT_SILU;
    c.tokens = tokens;
    c.route.mode = FP4_MOE_ROUTE_RANDOM;
    c.route.seed = 3;
    c.step = step;
    c.mode = mode;
    return c;
}

/* Every step and mode on a small layer: the good fake and the reference
 * verify, every planted fault is FAILED with its reason. */
static void test_faults(void)
{
    const fp4_moe_backend_ops *b[] = {fp4_moe_backend_find("moe-cpu-ref"), &fake_F_GOOD, &fake_F_WRONG,
                                      &fake_F_UNWRITTEN_MID, &fake_F_NO_POISON, &fake_F_RUN_ERROR,
                                      &fake_F_ONE_COPY};
    const int nb = (int)(sizeof b / sizeof b[0]);
    run x;
    fp4_err err;
    CHECK(b[0] != NULL);
    if (!b[0] || run_open(&x, 1, NULL) != 0) return;
    for (int s = 0; s < FP4_MOE_STEP_COUNT; s++)
        for (int md = 0; md < 2; md++) {
            const fp4_moe_case c = small_case((fp4_moe_step)s, (fp4_moe_mode)md, 13);
            const int from = x.report.nrows;
            CHECK(fp4_moe_engine_run_case(x.m, &c, b, nb, &x.report, NULL, NULL, &err) == FP4_OK);
            CHECK(x.report.nrows == from + nb);
            const fp4_row *ref = row_of(&x.report, from, "moe-cpu-ref"), *good = row_of(&x.report, from, "fake-good");
            CHECK(ref && ref->state == FP4_ROW_OK && ref->verified == -1);
            CHECK_MSG(good && good->state == FP4_ROW_OK && good->verified == 1 && good->err_max == 0,
                      "step %d mode %d: %s", s, md, good ? good->reason : "no row");
            if (good) {
                CHECK(good->moe.present && good->moe.tokens == 13 && good->moe.experts == 8 && good->moe.top_k == 2);
                CHECK(strcmp(good->moe.step, fp4_moe_step_name((fp4_moe_step)s)) == 0);
                CHECK(strcmp(good->moe.mode, md ? "w4a16" : "w4a4") == 0);
                CHECK(good->moe.verify_rows == good->moe.verify_rows_total);
                CHECK(good->moe.verify_rows_total == (s == 0 ? 26 : 13));
                CHECK(good->moe.weight_bytes > 0 && good->moe.active_experts >= 1);
                CHECK(good->shape.m == 13 && good->shape.n == (s == 0 ? 64 : 96) && good->shape.k == (s == 1 ? 32 : 96));
                CHECK(strstr(good->verify_note, "all 13 tokens") != NULL);
            }
            const fp4_row *w = row_of(&x.report, from, "fake-wrong");
            CHECK_MSG(w && w->state == FP4_ROW_FAILED && strstr(w->reason, "error max"), "step %d mode %d: %s %s", s, md, w ? w->reason : "", w ? w->verify_note : "");
            const fp4_row *u = row_of(&x.report, from, "fake-unwritten");
            CHECK_MSG(u && u->state == FP4_ROW_FAILED && strstr(u->reason, "NaN"), "%s", u ? u->reason : "");
            const fp4_row *np = row_of(&x.report, from, "fake-no-poison");
            CHECK_MSG(np && np->state == FP4_ROW_FAILED && strstr(np->reason, "poison()"), "%s", np ? np->reason : "");
            const fp4_row *re = row_of(&x.report, from, "fake-run-error");
            CHECK_MSG(re && re->state == FP4_ROW_FAILED && strstr(re->reason, "crashed"), "%s", re ? re->reason : "");
            const fp4_row *oc = row_of(&x.report, from, "fake-one-copy");
            CHECK_MSG(oc && oc->state == FP4_ROW_FAILED && strstr(oc->reason, "copy 1"), "step %d mode %d: %s", s,
                      md, oc ? oc->reason : "");
        }
    run_close(&x);
}

/* A routing trace: two idle experts, one expert on every token (k = 2). */
static void test_trace(void)
{
    enum { T = 6, K = 2 };
    const int32_t ids[T * K] = {3, 0, 3, 1, 3, 5, 3, 0, 3, 1, 3, 7};
    const fp4_moe_backend_ops *b[] = {&fake_F_GOOD};
    run x;
    fp4_err err;
    if (run_open(&x, 1, NULL) != 0) return;
    fp4_moe_case c = small_case(FP4_MOE_STEP_DOWN, FP4_MOE_W4A4, T);
    c.route.mode = FP4_MOE_ROUTE_TRACE;
    c.route.trace_ids = ids;
    c.trace_tokens = T;
    CHECK(fp4_moe_engine_run_case(x.m, &c, b, 1, &x.report, NULL, NULL, &err) == FP4_OK);
    const fp4_row *r = row_of(&x.report, 0, "fake-good");
    CHECK(r && r->state == FP4_ROW_OK);
    if (r) {
        CHECK(r->moe.active_experts == 5);
        CHECK(r->moe.tokens_min == 0 && r->moe.tokens_max == T);
        CHECK(strcmp(r->moe.routing, "trace") == 0);
    }
    /* more tokens than the trace has: an engine error, not a row */
    c.tokens = T + 1;
    CHECK(fp4_moe_engine_run_case(x.m, &c, b, 1, &x.report, NULL, NULL, &err) == FP4_ERR_INVALID_ARG);
    run_close(&x);
}

/* Above FP4_MOE_FULL_REF_MACS the reference is a sample of tokens: fewer rows
 * checked, the good fake still verifies, an unwritten row outside the sample
 * still fails (every element must be finite). */
static void test_sampled(void)
{
    const fp4_moe_backend_ops *b[] = {&fake_F_GOOD, &fake_F_UNWRITTEN_MID};
    run x;
    fp4_err err;
    if (run_open(&x, 1, NULL) != 0) return;
    fp4_moe_case c = small_case(FP4_MOE_STEP_GATE_UP, FP4_MOE_W4A4, 2048);
    c.dims.hidden = 1024;
    c.dims.inter = 384; /* 2I = 768 */
    c.dims.experts = 16;
    c.dims.top_k = 2;
    CHECK(2.0 * 2048 * 2 * 768 * 1024 > FP4_MOE_FULL_REF_MACS); /* pairs x 2I x H */
    CHECK(fp4_moe_engine_run_case(x.m, &c, b, 2, &x.report, NULL, NULL, &err) == FP4_OK);
    const fp4_row *g = row_of(&x.report, 0, "fake-good"), *u = row_of(&x.report, 0, "fake-unwritten");
    CHECK_MSG(g && g->state == FP4_ROW_OK && g->verified == 1, "%s", g ? g->reason : "");
    if (g) {
        CHECK(g->moe.verify_rows < g->moe.verify_rows_total);
        CHECK(g->moe.verify_rows >= FP4_MOE_SAMPLE_PAIRS / 2 && g->moe.verify_rows <= FP4_MOE_SAMPLE_PAIRS + 4);
        CHECK_MSG(strstr(g->verify_note, "sample:") != NULL, "%s", g->verify_note);
    }
    CHECK_MSG(u && u->state == FP4_ROW_FAILED && strstr(u->reason, "NaN"), "%s", u ? u->reason : "");
    run_close(&x);
}

/* Timed on the CPU: the good fake against the reference as the baseline. */
static void test_timed(void)
{
    const fp4_moe_backend_ops *b[] = {fp4_moe_backend_find("moe-cpu-ref"), &fake_F_GOOD};
    run x;
    fp4_err err;
    if (run_open(&x, 0, "moe-cpu-ref") != 0) return;
    const fp4_moe_case c = small_case(FP4_MOE_STEP_LAYER, FP4_MOE_W4A16, 9);
    CHECK(fp4_moe_engine_run_case(x.m, &c, b, 2, &x.report, NULL, NULL, &err) == FP4_OK);
    const fp4_row *g = row_of(&x.report, 0, "fake-good"), *r = row_of(&x.report, 0, "moe-cpu-ref");
    CHECK_MSG(g && g->state == FP4_ROW_OK && g->t.count >= 3 && g->t.median > 0, "%s", g ? g->reason : "no row");
    CHECK(r && r->t.count >= 3 && r->has_ratio && r->ratio == 1.0);
    if (g) {
        CHECK(g->has_ratio && g->ratio > 0);
        CHECK(g->moe.tokens_per_s > 0 && strcmp(g->timing, "host") == 0);
        CHECK(g->flops == 2.0 * 9 * 2 * 3 * 96 * 32); /* 2 x pairs x (2I x H + H x I) */
        /* two copies verified; after timing, the timed call (copy 0) checked again */
        CHECK(g->copies == 2 && g->verified_copies == 1);
    }
    run_close(&x);
}

/* MoE rows through JSON (both readers) and CSV. */
static void test_report(const char *dir)
{
    fp4_report r, back;
    fp4_report_run runr;
    fp4_row row;
    fp4_err err;
    char path[4096], csv[4096], line[8192];
    memset(&r, 0, sizeof r);
    memset(&back, 0, sizeof back);
    memset(&runr, 0, sizeof runr);
    memset(&row, 0, sizeof row);
    fp4_settings_default(&r.set);
    snprintf(row.label, sizeof row.label, "glm5 layer w4a4 random(seed=1)");
    snprintf(row.backend, sizeof row.backend, "moe-fp4-sm90");
    snprintf(row.l2, sizeof row.l2, "cold");
    row.shape.m = 16;
    row.shape.n = row.shape.k = 6144;
    row.t.count = 10;
    row.t.median = 123.5;
    row.own_err = -1;
    row.moe.present = 1;
    snprintf(row.moe.model, sizeof row.moe.model, "glm5");
    snprintf(row.moe.step, sizeof row.moe.step, "layer");
    snprintf(row.moe.mode, sizeof row.moe.mode, "w4a4");
    snprintf(row.moe.routing, sizeof row.moe.routing, "random(seed=1)");
    snprintf(row.moe.act, sizeof row.moe.act, "silu");
    row.moe.hidden = 6144;
    row.moe.inter = 2048;
    row.moe.experts = 256;
    row.moe.top_k = 8;
    row.moe.tp = 1;
    row.moe.tokens = 16;
    row.moe.active_experts = 100;
    row.moe.tokens_min = 0;
    row.moe.tokens_median = 0.5;
    row.moe.tokens_max = 3;
    row.moe.tokens_mean = 0.5;
    row.moe.weight_bytes = 2.1e9;
    row.moe.tokens_per_s = 129554.6;
    row.moe.pct_bandwidth = 61.5;
    row.moe.verify_rows = 8;
    row.moe.verify_rows_total = 16;
    row.moe.nsteps = 3;
    snprintf(row.moe.steps[0].name, sizeof row.moe.steps[0].name, "route");
    row.moe.steps[0].us = 2.5;
    snprintf(row.moe.steps[1].name, sizeof row.moe.steps[1].name, "gate_up");
    row.moe.steps[1].us = 60.25;
    snprintf(row.moe.steps[2].name, sizeof row.moe.steps[2].name, "down_combine");
    row.moe.steps[2].us = 40;
    CHECK(fp4_report_add(&r, &row, &err) == FP4_OK);
    snprintf(path, sizeof path, "%s/moe.json", dir);
    CHECK(fp4_report_write_json(path, &r, &err) == FP4_OK);
    CHECK_MSG(fp4_report_read_json(path, &back, &err) == FP4_OK, "%s", fp4_err_text(&err));
    if (back.nrows == 1) {
        const fp4_row_moe *m = &back.rows[0].moe;
        CHECK(m->present && strcmp(m->model, "glm5") == 0 && strcmp(m->step, "layer") == 0);
        CHECK(m->hidden == 6144 && m->inter == 2048 && m->experts == 256 && m->top_k == 8 && m->tokens == 16);
        CHECK(m->active_experts == 100 && m->tokens_min == 0 && m->tokens_max == 3 && m->tokens_median == 0.5);
        CHECK(m->weight_bytes == 2.1e9 && m->tokens_per_s == 129554.6 && m->pct_bandwidth == 61.5);
        CHECK(m->verify_rows == 8 && m->verify_rows_total == 16);
        CHECK(m->nsteps == 3 && strcmp(m->steps[2].name, "down_combine") == 0 && m->steps[1].us == 60.25);
    } else {
        CHECK(back.nrows == 1);
    }
    /* the HTML report's reader sees the steps */
    CHECK_MSG(fp4_report_run_read(path, &runr, &err) == FP4_OK, "%s", fp4_err_text(&err));
    CHECK(runr.steps && runr.steps[0].count == 3 && runr.steps[0].steps[0].us == 2.5);
    fp4_report_run_free(&runr);
    fp4_report_free(&back);
    /* the row's MoE object in the file */
    {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(line, 1, sizeof line - 1, f) : 0;
        line[n] = '\0';
        if (f) fclose(f);
        CHECK(strstr(line, "\"moe\"") != NULL && strstr(line, "\"tokens_per_expert\"") != NULL);
    }
    /* CSV: the MoE columns after the GEMM ones */
    snprintf(csv, sizeof csv, "%s/moe.csv", dir);
    FILE *f = fopen(csv, "w");
    CHECK(f != NULL);
    if (f) {
        CHECK(fp4_csv_write_header_moe(f, &err) == FP4_OK);
        CHECK(fp4_csv_write_row(f, &r.rows[0], &err) == FP4_OK);
        fclose(f);
        f = fopen(csv, "r");
        CHECK(f && fgets(line, sizeof line, f));
        CHECK(strstr(line, ",prepare_ms,moe_model,moe_step,moe_mode,moe_routing,tokens,active_experts,") != NULL);
        CHECK(strstr(line, ",weight_bytes,tokens_per_s,pct_bandwidth,steps\n") != NULL);
        CHECK(f && fgets(line, sizeof line, f));
        CHECK_MSG(strstr(line, ",glm5,layer,w4a4,random(seed=1),16,100,0,0.5,3,2.1e+09,") != NULL, "%s", line);
        CHECK_MSG(strstr(line, "route=2.5;gate_up=60.25;down_combine=40\n") != NULL, "%s", line);
        if (f) fclose(f);
    }
    fp4_report_free(&r);
}

static void test_labels_and_checks(void)
{
    char label[FP4_LABEL_LEN];
    fp4_moe_case c = small_case(FP4_MOE_STEP_GATE_UP, FP4_MOE_W4A16, 4);
    fp4_err err;
    snprintf(c.model, sizeof c.model, "glm5");
    c.tp = 8;
    c.route.mode = FP4_MOE_ROUTE_SKEWED;
    c.route.zipf_s = 1.2;
    c.route.seed = 7;
    fp4_moe_case_label(&c, label, sizeof label);
    CHECK_MSG(strcmp(label, "glm5/tp8 gate_up w4a16 skewed(s=1.2,seed=7)") == 0, "%s", label);
    CHECK(fp4_moe_step_parse("down", &c.step, &err) == FP4_OK && c.step == FP4_MOE_STEP_DOWN);
    CHECK(fp4_moe_step_parse("up", &c.step, &err) == FP4_ERR_INVALID_ARG && strstr(err.msg, "gate_up"));
    CHECK(fp4_moe_backend_find("moe-cpu-ref") && !fp4_moe_backend_find("cpu-ref"));
    for (int i = 0; i < fp4_moe_backend_count(); i++)
        CHECK_MSG(fp4_moe_backend_validate(fp4_moe_backend_at(i), &err) == FP4_OK, "%s", err.msg);
    fp4_moe_backend_ops bad = fake_F_GOOD;
    bad.api_version = 99;
    CHECK(fp4_moe_backend_validate(&bad, &err) == FP4_ERR_UNSUPPORTED);
    bad = fake_F_GOOD;
    bad.name = "Bad Name";
    CHECK(fp4_moe_backend_validate(&bad, &err) == FP4_ERR_INVALID_ARG);
    bad.name = "all"; /* what --backend all means */
    CHECK(fp4_moe_backend_validate(&bad, &err) == FP4_ERR_INVALID_ARG && strstr(err.msg, "'all'"));
    bad = fake_F_GOOD;
    bad.math = (fp4_math)99;
    CHECK(fp4_moe_backend_validate(&bad, &err) == FP4_ERR_INVALID_ARG && strstr(err.msg, "math"));
    bad = fake_F_GOOD;
    bad.wformat = (fp4_moe_wformat)7; /* the row's bytes would count nothing */
    CHECK(fp4_moe_backend_validate(&bad, &err) == FP4_ERR_INVALID_ARG && strstr(err.msg, "weight format"));
    const fp4_moe_backend_ops *no_table = fp4_moe_backend_at(0);
    void *handle = &handle;
    CHECK(fp4_moe_backend_load("/nonexistent/plugin.so", &no_table, &handle, &err) == FP4_ERR_IO &&
          !no_table && !handle && strstr(err.msg, "cannot load plugin /nonexistent/plugin.so"));
    fp4_moe_problem p;
    memset(&p, 0, sizeof p);
    CHECK(fp4_moe_problem_check(&p, 1, &err) == FP4_ERR_INVALID_ARG);
}

/* The engine's gpt-oss inputs reach both clamps of its SwiGLU (gate > 7,
 * |up| > 7) often enough that a kernel without one fails verification. */
static void test_oai_clamps_reached(void)
{
    const fp4_moe_dims d = {256, 128, 4, 2, FP4_MOE_ACT_SWIGLU_OAI};
    const fp4_moe_route_opts ro = {FP4_MOE_ROUTE_RANDOM, 3, 0.0, NULL, NULL, 0};
    const int64_t T = 64, pairs = T * d.top_k, I = d.inter;
    fp4_moe_weights w;
    fp4_moe_routing r;
    uint16_t *x = NULL;
    fp4_err err;
    float *out = malloc((size_t)T * (size_t)d.hidden * sizeof *out);
    float *y = malloc((size_t)pairs * (size_t)(2 * I) * sizeof *y);
    if (!out || !y || fp4_moe_make_weights(&d, FP4_DATA_GAUSSIAN, 9, &w, &err) != FP4_OK) {
        CHECK_MSG(0, "gpt-oss inputs: %s", out && y ? err.msg : "no memory");
        free(out);
        free(y);
        return;
    }
    if (fp4_moe_make_rows(T, d.hidden, 9, 1, &x, &err) == FP4_OK &&
        fp4_moe_route(&ro, T, d.experts, d.top_k, &r, &err) == FP4_OK) {
        const fp4_moe_layer_opts o = {FP4_MOE_W4A16, 0.0f, 0.0f, 1};
        fp4_moe_layer_out io = {out, y, NULL, NULL, 0.0f, 0.0f};
        if (fp4_moe_layer_ref(&d, &w, x, &r, &o, &io, &err) == FP4_OK) {
            int64_t gate_over = 0, up_over = 0;
            for (int64_t p = 0; p < pairs; p++)
                for (int64_t i = 0; i < I; i++) {
                    gate_over += y[p * 2 * I + i] > 7.0f;
                    up_over += fabsf(y[p * 2 * I + I + i]) > 7.0f;
                }
            /* 1% of 16384 values each: the gain puts about 4% and 8% there */
            CHECK_MSG(gate_over * 100 >= pairs * I, "gpt-oss: %lld of %lld gate values over 7",
                      (long long)gate_over, (long long)(pairs * I));
            CHECK_MSG(up_over * 100 >= pairs * I, "gpt-oss: %lld of %lld up values past +-7",
                      (long long)up_over, (long long)(pairs * I));
        } else {
            CHECK_MSG(0, "gpt-oss layer reference: %s", err.msg);
        }
        fp4_moe_routing_free(&r);
    } else {
        CHECK_MSG(0, "gpt-oss inputs: %s", err.msg);
    }
    free(x);
    free(out);
    free(y);
    fp4_moe_weights_free(&w);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    test_labels_and_checks();
    test_faults();
    test_trace();
    test_timed();
    test_report(dir);
    test_sampled();
    test_oai_clamps_reached();
    return check_finish("test_moe_engine");
}
