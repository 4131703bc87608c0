/* The MoE workload on the CPU (fp4/moe.h):
 * 1. presets: the CONTEXT.md table, lookup by either name, tensor-parallel dims;
 * 2. routing: balanced counts (exact, and within one when E does not divide
 *    T*k), random and skewed reproducible from the seed, distinct per token,
 *    prefix-stable over T; skewed's hottest expert above balanced; trace
 *    validation messages;
 * 3. the plan: offsets, pair order and its inverse on a hand-made routing, idle
 *    experts, one expert with every token, aligned offsets, statistics;
 * 4. bytes and flops;
 * 5. the grouped references against per-pair double loops written here (W4A4
 *    and W4A16, per-token and per-pair A, K = 48 and K = 2880), and the W4A16
 *    accumulator's exactness where a double sum fails: cancellation, ties,
 *    sticky bits, subnormals, overflow;
 * 6. the activations and the combine against formulas written here;
 * 7. the layer reference against a straightforward computation in this file,
 *    stage by stage and end to end, in both modes and with both activations. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fp4/format.h"
#include "fp4/moe.h"
#include "test_rng.h"

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- helpers ------------------------------------------------------------------------ */

/* A [rows, cols] NVFP4 matrix quantized from gaussian data (no zeros), with a
 * power-of-two global scale so that double-loop checks round like the
 * references (see test_layer). */
static int make_matrix(test_rng *g, int64_t rows, int64_t cols, int pow2_scale, fp4_matrix *m)
{
    float *x = malloc((size_t)rows * (size_t)cols * sizeof *x);
    fp4_err err;
    if (!x) return -1;
    for (int64_t i = 0; i < rows * cols; i++) {
        double v = test_rng_gauss(g);
        x[i] = (float)(fabs(v) < 0.05 ? 0.05 + fabs(v) : v); /* never zero */
    }
    fp4_status st = fp4_quantize_f32(x, rows, cols, 0.0f, m, &err);
    free(x);
    if (st != FP4_OK) return -1;
    if (pow2_scale) m->global_scale = ldexpf(1.0f, -6 - pow2_scale);
    return 0;
}

static int make_weights(test_rng *g, const fp4_moe_dims *d, fp4_moe_weights *w)
{
    fp4_err err;
    if (fp4_moe_weights_init(w, d->experts, &err) != FP4_OK) return -1;
    for (int e = 0; e < d->experts; e++)
        if (make_matrix(g, 2 * d->inter, d->hidden, 1 + e % 3, &w->gate_up[e]) ||
            make_matrix(g, d->hidden, d->inter, 2 + e % 2, &w->down[e]))
            return -1;
    return 0;
}

/* bf16 gaussian activations (no zeros). */
static uint16_t *make_bf16(test_rng *g, int64_t count, double scale)
{
    uint16_t *x = malloc((size_t)count * sizeof *x);
    if (!x) return NULL;
    for (int64_t i = 0; i < count; i++) {
        double v = test_rng_gauss(g) * scale;
        x[i] = fp4_bf16_from_float((float)(fabs(v) < 0.01 * scale ? 0.01 * scale + fabs(v) : v));
    }
    return x;
}

static int contains(const char *text, const char *part)
{
    return strstr(text, part) != NULL;
}

/* A routing from literal ids (weights drawn) through trace mode. */
static fp4_status trace_routing(const int32_t *ids, int64_t tokens, int experts, int k,
                                fp4_moe_routing *r, fp4_err *err)
{
    fp4_moe_route_opts o = {0};
    o.mode = FP4_MOE_ROUTE_TRACE;
    o.seed = 5;
    o.trace_ids = ids;
    return fp4_moe_route(&o, tokens, experts, k, r, err);
}

/* ---- 1. presets ------------------------------------------------------------------------ */

static void test_presets(void)
{
    /* CONTEXT.md section 6: name, H, I, E, k */
    static const struct {
        const char *name;
        int64_t h, i;
        int e, k;
    } table[] = {{"glm5", 6144, 2048, 256, 8},
                 {"deepseek-v3", 7168, 2048, 256, 8},
                 {"kimi-k2", 7168, 2048, 384, 8},
                 {"qwen3-235b", 4096, 1536, 128, 8},
                 {"qwen3-30b", 2048, 768, 128, 8},
                 {"mixtral", 4096, 14336, 8, 2},
                 {"llama4-maverick", 5120, 8192, 128, 1},
                 {"gpt-oss-120b", 2880, 2880, 128, 4}};
    fp4_err err;
    CHECK(fp4_moe_preset_count() == 8);
    CHECK(fp4_moe_preset_at(-1) == NULL && fp4_moe_preset_at(8) == NULL);
    for (size_t t = 0; t < sizeof table / sizeof table[0]; t++) {
        const fp4_moe_preset *p = fp4_moe_preset_find(table[t].name);
        fp4_moe_dims d;
        CHECK_MSG(p != NULL, "%s", table[t].name);
        if (!p) continue;
        CHECK(p->hidden == table[t].h && p->inter == table[t].i && p->experts == table[t].e &&
              p->top_k == table[t].k);
        CHECK(p->layers >= p->moe_layers && p->moe_layers > 0 && p->note && p->note[0]);
        CHECK(fp4_moe_preset_find(p->model) == p);
        CHECK_MSG(fp4_moe_preset_dims(p, 1, &d, &err) == FP4_OK, "%s: %s", p->name, err.msg);
        CHECK(d.hidden == p->hidden && d.inter == p->inter && d.act == p->act);
    }
    const fp4_moe_preset *oss = fp4_moe_preset_find("GPT-OSS-120B");
    CHECK(oss && oss->act == FP4_MOE_ACT_SWIGLU_OAI && oss->hidden % 128 != 0);
    CHECK(fp4_moe_preset_find("Mixtral-8x7B") == fp4_moe_preset_find("mixtral"));
    CHECK(fp4_moe_preset_find("glm5")->act == FP4_MOE_ACT_SILU);
    CHECK(fp4_moe_preset_find("llama4-maverick")->moe_layers == 24);

    const fp4_moe_preset *p = NULL;
    CHECK(fp4_moe_preset_lookup("glm-6", &p, &err) == FP4_ERR_NOT_FOUND && p == NULL);
    CHECK(contains(err.msg, "glm-6") && contains(err.msg, "gpt-oss-120b"));
    CHECK(fp4_moe_preset_find(NULL) == NULL);

    /* tensor parallelism: 2880 / 4 = 720 (45 blocks); / 8 = 360 is not a multiple of 16 */
    fp4_moe_dims d;
    CHECK(fp4_moe_preset_dims(oss, 4, &d, &err) == FP4_OK && d.inter == 720);
    CHECK(fp4_moe_preset_dims(oss, 8, &d, &err) == FP4_ERR_SHAPE && contains(err.msg, "gpt-oss"));
    CHECK(fp4_moe_preset_dims(oss, 0, &d, &err) == FP4_ERR_INVALID_ARG);
    CHECK(fp4_moe_preset_dims(fp4_moe_preset_find("glm5"), 8, &d, &err) == FP4_OK &&
          d.inter == 256);

    fp4_moe_dims bad = {48, 40, 4, 2, FP4_MOE_ACT_SILU};
    CHECK(fp4_moe_dims_check(&bad, &err) == FP4_ERR_SHAPE && contains(err.msg, "= 40"));
    bad.inter = 32;
    bad.top_k = 5;
    CHECK(fp4_moe_dims_check(&bad, &err) == FP4_ERR_INVALID_ARG && contains(err.msg, "top-k = 5"));
    bad.top_k = 2;
    bad.act = (fp4_moe_act)7;
    CHECK(fp4_moe_dims_check(&bad, &err) == FP4_ERR_INVALID_ARG);

    fp4_moe_act act;
    CHECK(fp4_moe_act_parse("swiglu-oai", &act, &err) == FP4_OK && act == FP4_MOE_ACT_SWIGLU_OAI);
    CHECK(fp4_moe_act_parse("gelu", &act, &err) == FP4_ERR_INVALID_ARG &&
          contains(err.msg, "gelu"));
    fp4_moe_route_mode mode;
    CHECK(fp4_moe_route_mode_parse("skewed", &mode, &err) == FP4_OK &&
          mode == FP4_MOE_ROUTE_SKEWED);
    CHECK(fp4_moe_route_mode_parse("zipf", &mode, &err) == FP4_ERR_INVALID_ARG);
    CHECK(strcmp(fp4_moe_mode_name(FP4_MOE_W4A16), "w4a16") == 0);

    /* gpt-oss's interleaved rows: 0 1 2 3 -> gate 0, up 0, gate 1, up 1 */
    CHECK(fp4_moe_row_from_interleaved(0, 4) == 0 && fp4_moe_row_from_interleaved(1, 4) == 4 &&
          fp4_moe_row_from_interleaved(6, 4) == 3 && fp4_moe_row_from_interleaved(7, 4) == 7);
}

/* ---- 2. routing ------------------------------------------------------------------------- */

static void counts_of(const fp4_moe_routing *r, int32_t *counts)
{
    memset(counts, 0, (size_t)r->experts * sizeof *counts);
    for (int64_t p = 0; p < r->tokens * r->top_k; p++) counts[r->expert_ids[p]]++;
}

static int same_routing(const fp4_moe_routing *a, const fp4_moe_routing *b, int64_t tokens)
{
    const size_t n = (size_t)tokens * (size_t)a->top_k;
    return memcmp(a->expert_ids, b->expert_ids, n * sizeof *a->expert_ids) == 0 &&
           memcmp(a->weights, b->weights, n * sizeof *a->weights) == 0;
}

/* Distinct ids (routing_check) and weights: positive, summing to 1; top-1: a
 * sigmoid, strictly between 0 and 1 (a weight of 1 would hide a combine that
 * ignores the weights). */
static void check_routing_shape(const fp4_moe_routing *r, const char *what)
{
    fp4_err err;
    CHECK_MSG(fp4_moe_routing_check(r, &err) == FP4_OK, "%s: %s", what, err.msg);
    for (int64_t t = 0; t < r->tokens; t++) {
        double sum = 0.0;
        for (int j = 0; j < r->top_k; j++) sum += r->weights[t * r->top_k + j];
        const int bad = r->top_k == 1 ? !(sum > 0.0 && sum < 1.0)
                                      : fabs(sum - 1.0) > 1e-5 || !(r->weights[t * r->top_k] > 0.0f);
        if (bad) {
            CHECK_MSG(0, "%s: token %lld's weights sum to %g", what, (long long)t, sum);
            break;
        }
    }
}

/* Top-1 in every drawn mode: weights in (0, 1) that differ between tokens. */
static void test_top1_weights(void)
{
    const fp4_moe_route_mode modes[3] = {FP4_MOE_ROUTE_BALANCED, FP4_MOE_ROUTE_RANDOM,
                                         FP4_MOE_ROUTE_SKEWED};
    for (int m = 0; m < 3; m++) {
        fp4_moe_route_opts o = {modes[m], 5, 1.2, NULL, NULL, 0};
        fp4_moe_routing r;
        fp4_err err;
        const char *name = fp4_moe_route_mode_name(modes[m]);
        if (fp4_moe_route(&o, 200, 128, 1, &r, &err) != FP4_OK) {
            CHECK_MSG(0, "top-1 %s: %s", name, err.msg);
            continue;
        }
        check_routing_shape(&r, name);
        int distinct = 0;
        for (int64_t t = 1; t < r.tokens; t++) distinct += r.weights[t] != r.weights[0];
        CHECK_MSG(distinct > 150, "top-1 %s: %d of 199 weights differ from token 0's", name,
                  distinct);
        fp4_moe_routing_free(&r);
    }
}

static int desc_int32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x < y) - (x > y);
}

static void test_balanced(void)
{
    static const int cases[][3] = {{64, 8, 256}, {512, 8, 256}, {5, 3, 4},     {7, 4, 6},
                                   {3, 1, 1},    {1, 8, 8},     {100, 4, 128}, {33, 2, 8}};
    fp4_err err;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int tokens = cases[c][0], k = cases[c][1], n = cases[c][2];
        fp4_moe_route_opts o = {FP4_MOE_ROUTE_BALANCED, 11, 0.0, NULL, NULL, 0};
        fp4_moe_routing r;
        if (fp4_moe_route(&o, tokens, n, k, &r, &err) != FP4_OK) {
            CHECK_MSG(0, "balanced %d/%d/%d: %s", tokens, k, n, err.msg);
            continue;
        }
        int32_t *counts = malloc((size_t)n * sizeof *counts);
        counts_of(&r, counts);
        int32_t lo = counts[0], hi = counts[0];
        for (int e = 1; e < n; e++) {
            lo = counts[e] < lo ? counts[e] : lo;
            hi = counts[e] > hi ? counts[e] : hi;
        }
        const int pairs = tokens * k;
        if (pairs % n == 0)
            CHECK_MSG(lo == pairs / n && hi == pairs / n, "T=%d k=%d E=%d: %d..%d", tokens, k, n,
                      lo, hi);
        else
            CHECK_MSG(lo == pairs / n && hi == pairs / n + 1, "T=%d k=%d E=%d: %d..%d", tokens, k,
                      n, lo, hi);
        check_routing_shape(&r, "balanced");
        free(counts);
        fp4_moe_routing_free(&r);
    }
}

static void test_random_and_skewed(void)
{
    fp4_err err;
    const fp4_moe_route_mode modes[2] = {FP4_MOE_ROUTE_RANDOM, FP4_MOE_ROUTE_SKEWED};
    for (int m = 0; m < 2; m++) {
        fp4_moe_route_opts o = {modes[m], 42, 1.2, NULL, NULL, 0};
        fp4_moe_routing a, b, c, prefix;
        const char *name = fp4_moe_route_mode_name(modes[m]);
        if (fp4_moe_route(&o, 300, 64, 6, &a, &err) != FP4_OK ||
            fp4_moe_route(&o, 300, 64, 6, &b, &err) != FP4_OK ||
            fp4_moe_route(&o, 37, 64, 6, &prefix, &err) != FP4_OK) {
            CHECK_MSG(0, "%s: %s", name, err.msg);
            return;
        }
        o.seed = 43;
        if (fp4_moe_route(&o, 300, 64, 6, &c, &err) != FP4_OK) {
            CHECK_MSG(0, "%s: %s", name, err.msg);
            return;
        }
        CHECK_MSG(same_routing(&a, &b, 300), "%s: the same seed routes differently", name);
        CHECK_MSG(!same_routing(&a, &c, 300), "%s: seeds 42 and 43 route alike", name);
        CHECK_MSG(same_routing(&a, &prefix, 37), "%s: 37 tokens are not a prefix of 300", name);
        check_routing_shape(&a, name);
        if (modes[m] == FP4_MOE_ROUTE_RANDOM) /* softmax of logits in descending order */
            for (int64_t t = 0; t < a.tokens; t++)
                for (int j = 1; j < a.top_k; j++)
                    if (a.weights[t * 6 + j] > a.weights[t * 6 + j - 1]) {
                        CHECK_MSG(0, "random: token %lld's weights are not descending",
                                  (long long)t);
                        t = a.tokens;
                        break;
                    }
        fp4_moe_routing_free(&a);
        fp4_moe_routing_free(&b);
        fp4_moe_routing_free(&c);
        fp4_moe_routing_free(&prefix);
    }

    /* skewed: the hottest expert far above balanced's ceil(T*k/E) = 32 */
    fp4_moe_route_opts o = {FP4_MOE_ROUTE_SKEWED, 3, 1.2, NULL, NULL, 0};
    fp4_moe_routing r;
    int32_t counts[64];
    if (fp4_moe_route(&o, 512, 64, 4, &r, &err) == FP4_OK) {
        counts_of(&r, counts);
        int32_t hi = 0;
        for (int e = 0; e < 64; e++) hi = counts[e] > hi ? counts[e] : hi;
        CHECK_MSG(hi > 2 * 32, "skewed s=1.2: hottest expert has %d pairs", (int)hi);
        fp4_moe_routing_free(&r);
    } else {
        CHECK_MSG(0, "skewed: %s", err.msg);
    }
    /* top-1 has no draws without replacement: the counts, hottest first, are
     * Zipf's T * (i+1)^-s / H(s) within 5 binomial sigma (s = 1 or 1.4 instead
     * of 1.2 would miss the hottest by 21 or 23 sigma) */
    o.zipf_s = 1.2;
    if (fp4_moe_route(&o, 20000, 64, 1, &r, &err) == FP4_OK) {
        counts_of(&r, counts);
        qsort(counts, 64, sizeof counts[0], desc_int32);
        double harmonic = 0.0;
        for (int i = 0; i < 64; i++) harmonic += pow(i + 1.0, -1.2);
        for (int i = 0; i < 8; i++) {
            const double p = pow(i + 1.0, -1.2) / harmonic, want = 20000.0 * p;
            const double sigma = sqrt(20000.0 * p * (1.0 - p));
            CHECK_MSG(fabs(counts[i] - want) <= 5.0 * sigma,
                      "skewed s=1.2 top-1: rank %d has %d pairs, Zipf says %.0f +- %.0f", i,
                      (int)counts[i], want, sigma);
        }
        fp4_moe_routing_free(&r);
    } else {
        CHECK_MSG(0, "skewed top-1: %s", err.msg);
    }
    /* s = 0 is uniform and still distinct; k = E takes every expert */
    o.zipf_s = 0.0;
    CHECK(fp4_moe_route(&o, 20, 8, 8, &r, &err) == FP4_OK);
    check_routing_shape(&r, "skewed s=0 k=E");
    fp4_moe_routing_free(&r);

    char label[64];
    o.zipf_s = 1.5;
    fp4_moe_route_describe(&o, label, sizeof label);
    CHECK(strcmp(label, "skewed(s=1.5,seed=3)") == 0);

    /* bad options */
    o.zipf_s = -1.0;
    CHECK(fp4_moe_route(&o, 4, 8, 2, &r, &err) == FP4_ERR_INVALID_ARG && contains(err.msg, "Zipf"));
    CHECK(r.expert_ids == NULL);
    o.zipf_s = NAN;
    CHECK(fp4_moe_route(&o, 4, 8, 2, &r, &err) == FP4_ERR_INVALID_ARG);
    o.mode = FP4_MOE_ROUTE_RANDOM;
    CHECK(fp4_moe_route(&o, 4, 8, 9, &r, &err) == FP4_ERR_INVALID_ARG &&
          contains(err.msg, "top-k 9"));
    CHECK(fp4_moe_route(&o, 0, 8, 2, &r, &err) == FP4_ERR_INVALID_ARG);
    CHECK(fp4_moe_route(&o, INT32_MAX, 8, 2, &r, &err) == FP4_ERR_OVERFLOW);
    o.mode = (fp4_moe_route_mode)9;
    CHECK(fp4_moe_route(&o, 4, 8, 2, &r, &err) == FP4_ERR_INVALID_ARG);
}

static void test_trace(void)
{
    fp4_err err;
    fp4_moe_routing r;
    const int32_t good[6] = {0, 3, 3, 1, 2, 0};
    CHECK(trace_routing(good, 3, 4, 2, &r, &err) == FP4_OK);
    CHECK(r.expert_ids && memcmp(r.expert_ids, good, sizeof good) == 0);
    check_routing_shape(&r, "trace");
    fp4_moe_routing_free(&r);

    const int32_t out_of_range[6] = {0, 3, 9, 1, 2, 0};
    CHECK(trace_routing(out_of_range, 3, 4, 2, &r, &err) == FP4_ERR_INVALID_ARG);
    CHECK_MSG(contains(err.msg, "token 1, slot 0: expert 9 is outside 0..3"), "%s", err.msg);
    const int32_t negative[6] = {0, 3, 2, 1, 2, -1};
    CHECK(trace_routing(negative, 3, 4, 2, &r, &err) == FP4_ERR_INVALID_ARG);
    CHECK_MSG(contains(err.msg, "token 2, slot 1: expert -1"), "%s", err.msg);
    const int32_t twice[6] = {0, 3, 1, 1, 2, 0};
    CHECK(trace_routing(twice, 3, 4, 2, &r, &err) == FP4_ERR_INVALID_ARG);
    CHECK_MSG(contains(err.msg, "token 1 names expert 1 twice (slots 0 and 1)"), "%s", err.msg);
    CHECK(r.expert_ids == NULL && r.weights == NULL);
    CHECK(trace_routing(NULL, 3, 4, 2, &r, &err) == FP4_ERR_INVALID_ARG);

    /* given weights are taken as they are, and must be finite */
    float w[6] = {0.5f, 0.5f, 2.0f, -1.0f, 0.25f, 0.75f};
    fp4_moe_route_opts o = {FP4_MOE_ROUTE_TRACE, 0, 0.0, good, w, 0};
    CHECK(fp4_moe_route(&o, 3, 4, 2, &r, &err) == FP4_OK && r.weights[3] == -1.0f);
    fp4_moe_routing_free(&r);
    w[4] = NAN;
    CHECK(fp4_moe_route(&o, 3, 4, 2, &r, &err) == FP4_ERR_INVALID_ARG);
    CHECK_MSG(contains(err.msg, "token 2, slot 0: weight is NaN"), "%s", err.msg);
}

/* ---- 3. the plan ------------------------------------------------------------------------- */

static void test_plan(void)
{
    fp4_err err;
    fp4_moe_routing r;
    fp4_moe_plan p;
    /* tokens: {2, 0}, {0, 3}, {2, 1}, {0, 2}; experts 4 and 5 idle */
    const int32_t ids[8] = {2, 0, 0, 3, 2, 1, 0, 2};
    if (trace_routing(ids, 4, 6, 2, &r, &err) != FP4_OK ||
        fp4_moe_plan_build(&r, &p, &err) != FP4_OK) {
        CHECK_MSG(0, "plan: %s", err.msg);
        return;
    }
    static const int32_t offsets[7] = {0, 3, 4, 7, 8, 8, 8}, counts[6] = {3, 1, 3, 1, 0, 0};
    static const int32_t order[8] = {1, 2, 6, 5, 0, 4, 7, 3};
    CHECK(p.pairs == 8 && p.tokens == 4 && p.experts == 6 && p.top_k == 2);
    CHECK(memcmp(p.expert_offsets, offsets, sizeof offsets) == 0);
    CHECK(memcmp(p.expert_counts, counts, sizeof counts) == 0);
    CHECK(memcmp(p.pair_index, order, sizeof order) == 0);
    for (int row = 0; row < 8; row++) CHECK(p.pair_row[p.pair_index[row]] == row);
    CHECK(p.stats.active_experts == 4 && p.stats.min_tokens == 0 && p.stats.max_tokens == 3);
    CHECK(p.stats.median_tokens == 1.0 && fabs(p.stats.mean_tokens - 8.0 / 6.0) < 1e-12);

    int64_t aligned[7];
    static const int64_t want[7] = {0, 4, 8, 12, 16, 16, 16};
    CHECK(fp4_moe_plan_aligned_offsets(&p, 4, aligned, &err) == FP4_OK);
    CHECK(memcmp(aligned, want, sizeof want) == 0);
    CHECK(fp4_moe_plan_aligned_offsets(&p, 0, aligned, &err) == FP4_ERR_INVALID_ARG);

    /* bytes: only the 4 active experts' weights */
    const fp4_moe_dims d = {64, 32, 6, 2, FP4_MOE_ACT_SILU};
    CHECK(fp4_moe_weight_bytes(&p, &d, FP4_MOE_WEIGHTS_BF16) ==
          4.0 * 2.0 * (64.0 * 64 + 64.0 * 32));
    CHECK(fp4_moe_flops(&p, &d) == 2.0 * 8 * 64 * 64 + 2.0 * 8 * 64 * 32);
    fp4_moe_plan_free(&p);
    fp4_moe_routing_free(&r);

    /* one expert takes every token */
    int32_t all5[50];
    for (int i = 0; i < 50; i++) all5[i] = 5;
    if (trace_routing(all5, 50, 8, 1, &r, &err) == FP4_OK &&
        fp4_moe_plan_build(&r, &p, &err) == FP4_OK) {
        CHECK(p.stats.active_experts == 1 && p.stats.max_tokens == 50 &&
              p.stats.median_tokens == 0.0);
        CHECK(p.expert_offsets[5] == 0 && p.expert_offsets[6] == 50 && p.expert_offsets[8] == 50);
        for (int row = 0; row < 50; row++) CHECK(p.pair_index[row] == row);
        fp4_moe_plan_free(&p);
    } else {
        CHECK_MSG(0, "one expert: %s", err.msg);
    }
    fp4_moe_routing_free(&r);

    /* E = 1, and a balanced routing with T*k not a multiple of E (15 over 4) */
    fp4_moe_route_opts o = {FP4_MOE_ROUTE_BALANCED, 1, 0.0, NULL, NULL, 0};
    CHECK(fp4_moe_route(&o, 9, 1, 1, &r, &err) == FP4_OK &&
          fp4_moe_plan_build(&r, &p, &err) == FP4_OK);
    CHECK(p.expert_offsets[1] == 9 && p.stats.min_tokens == 9);
    fp4_moe_plan_free(&p);
    fp4_moe_routing_free(&r);
    CHECK(fp4_moe_route(&o, 5, 4, 3, &r, &err) == FP4_OK &&
          fp4_moe_plan_build(&r, &p, &err) == FP4_OK);
    CHECK(p.stats.min_tokens == 3 && p.stats.max_tokens == 4 && p.expert_offsets[4] == 15);
    for (int e = 0; e < 4; e++) /* stable: ascending pairs within an expert */
        for (int32_t row = p.expert_offsets[e] + 1; row < p.expert_offsets[e + 1]; row++)
            CHECK(p.pair_index[row] > p.pair_index[row - 1]);
    fp4_moe_plan_free(&p);
    fp4_moe_routing_free(&r);

    /* a routing built by hand is checked too */
    int32_t bad_ids[2] = {1, 1};
    float bad_w[2] = {0.5f, 0.5f};
    fp4_moe_routing hand = {1, 4, 2, bad_ids, bad_w};
    CHECK(fp4_moe_plan_build(&hand, &p, &err) == FP4_ERR_INVALID_ARG && contains(err.msg, "twice"));
    CHECK(p.pair_index == NULL);
}

/* ---- 4. bytes ----------------------------------------------------------------------------- */

static void test_bytes(void)
{
    /* [4096, 6144]: codes 12 MiB + scales 4096 x 384 + the global scale */
    CHECK(fp4_moe_matrix_bytes(4096, 6144, FP4_MOE_WEIGHTS_NVFP4) ==
          4096.0 * 3072 + 4096.0 * 384 + 4);
    /* gpt-oss down [2880, 2880]: rows padded to 2944 for the swizzled scales, 180 kblocks */
    CHECK(fp4_moe_matrix_bytes(2880, 2880, FP4_MOE_WEIGHTS_NVFP4) ==
          2880.0 * 1440 + 2944.0 * 180 + 4);
    CHECK(fp4_moe_matrix_bytes(2880, 2880, FP4_MOE_WEIGHTS_FP8) == 2880.0 * 2880 + 4);
    CHECK(fp4_moe_matrix_bytes(2880, 2880, FP4_MOE_WEIGHTS_BF16) == 2.0 * 2880 * 2880);
    fp4_moe_dims d;
    fp4_err err;
    CHECK(fp4_moe_preset_dims(fp4_moe_preset_find("glm5"), 1, &d, &err) == FP4_OK);
    const double nvfp4 = fp4_moe_expert_bytes(&d, FP4_MOE_WEIGHTS_NVFP4);
    const double bf16 = fp4_moe_expert_bytes(&d, FP4_MOE_WEIGHTS_BF16);
    CHECK(nvfp4 == fp4_moe_matrix_bytes(4096, 6144, FP4_MOE_WEIGHTS_NVFP4) +
                       fp4_moe_matrix_bytes(6144, 2048, FP4_MOE_WEIGHTS_NVFP4));
    CHECK(bf16 / nvfp4 > 3.5 && bf16 / nvfp4 < 3.6); /* 16 bits vs 4.5 */
}

/* ---- 5. grouped references ------------------------------------------------------------------ */

/* d[p, n] by the obvious double loop over dequantized values, per pair. */
static float naive_w4a4(const fp4_matrix *a, int64_t arow, const fp4_matrix *b, int64_t n)
{
    double acc = 0.0;
    for (int64_t c = 0; c < a->cols; c++)
        acc += (double)fp4_matrix_get(a, arow, c) * (double)fp4_matrix_get(b, n, c);
    return (float)(acc * (double)(a->global_scale * b->global_scale));
}

/* An exact sum of doubles, written independently of the library's
 * accumulator: two sign-magnitude big integers (positive and negative terms),
 * 32-bit limbs, bit 0 worth 2^-1100, added to one bit at a time. */
#define SUM_LIMBS 72
#define SUM_BIT0 1100

typedef struct exact_sum {
    uint32_t pos[SUM_LIMBS], neg[SUM_LIMBS];
} exact_sum;

static void sum_add_bit(uint32_t *a, int bit)
{
    uint64_t carry = (uint64_t)1 << (bit & 31);
    for (int l = bit >> 5; carry && l < SUM_LIMBS; l++) {
        const uint64_t v = (uint64_t)a[l] + carry;
        a[l] = (uint32_t)v;
        carry = v >> 32;
    }
}

static void sum_add(exact_sum *s, double t)
{
    int e;
    if (t == 0.0) return;
    const uint64_t m = (uint64_t)ldexp(frexp(fabs(t), &e), 53); /* |t| = m * 2^(e - 53) */
    for (int i = 0; i < 53; i++)
        if ((m >> i) & 1u) sum_add_bit(t > 0 ? s->pos : s->neg, e - 53 + SUM_BIT0 + i);
}

static int sum_bit(const uint32_t *a, int bit)
{
    return bit >= 0 && (int)((a[bit >> 5] >> (bit & 31)) & 1u);
}

/* The sum rounded to the nearest float, ties to even (normal results and
 * infinity only: the tests' data stay far from fp32 subnormals). */
static float sum_to_float(const exact_sum *s)
{
    uint32_t mag[SUM_LIMBS];
    int top = SUM_LIMBS - 1, negative = 0;
    while (top >= 0 && s->pos[top] == s->neg[top]) top--;
    if (top < 0) return 0.0f;
    const uint32_t *big = s->pos, *small = s->neg;
    if (s->neg[top] > s->pos[top]) {
        big = s->neg;
        small = s->pos;
        negative = 1;
    }
    int64_t borrow = 0;
    for (int l = 0; l < SUM_LIMBS; l++) {
        int64_t v = (int64_t)big[l] - (int64_t)small[l] - borrow;
        borrow = v < 0;
        mag[l] = (uint32_t)(v + (borrow ? ((int64_t)1 << 32) : 0));
    }
    int msb = SUM_LIMBS * 32 - 1;
    while (!sum_bit(mag, msb)) msb--;
    const int lsb = msb - 23;
    uint32_t mant = 0;
    for (int i = msb; i >= lsb; i--) mant = (mant << 1) | (uint32_t)sum_bit(mag, i);
    int sticky = 0;
    for (int i = lsb - 2; i >= 0 && !sticky; i--) sticky = sum_bit(mag, i);
    if (sum_bit(mag, lsb - 1) && (sticky || (mant & 1u))) mant++;
    const double v = ldexp((double)mant, lsb - SUM_BIT0);
    const float f = v > (double)FLT_MAX ? INFINITY : (float)v;
    return negative ? -f : f;
}

/* W4A16 exactly: every x * w * gs is exact in double (8 + 6 + 24 bits). */
static float exact_w4a16(const uint16_t *x, const fp4_matrix *b, int64_t n)
{
    exact_sum s;
    memset(&s, 0, sizeof s);
    for (int64_t c = 0; c < b->cols; c++)
        sum_add(&s, (double)fp4_bf16_to_float(x[c]) * (double)fp4_matrix_get(b, n, c) *
                        (double)b->global_scale);
    return sum_to_float(&s);
}

/* Both references on random data with idle experts, against the loops above. */
static void grouped_case(int64_t tokens, int experts, int k, int64_t n, int64_t kdim, uint64_t seed)
{
    test_rng g = test_rng_seed(seed);
    fp4_err err;
    fp4_moe_routing r = {0};
    fp4_moe_plan plan = {0};
    fp4_matrix a_tok = {0}, a_pair = {0};
    fp4_matrix *b = calloc((size_t)experts, sizeof *b);
    const int64_t pairs = tokens * k;
    float *d = malloc((size_t)pairs * (size_t)n * sizeof *d);
    uint16_t *x_tok = make_bf16(&g, tokens * kdim, 1.0), *x_pair = make_bf16(&g, pairs * kdim, 3.0);
    /* skewed routing over all experts but the last, which stays idle */
    const int used = experts > k ? experts - 1 : experts;
    fp4_moe_route_opts o = {FP4_MOE_ROUTE_SKEWED, seed, 1.0, NULL, NULL, 0};
    fp4_moe_routing skewed = {0};
    int ok =
        b && d && x_tok && x_pair && fp4_moe_route(&o, tokens, used, k, &skewed, &err) == FP4_OK;
    ok = ok && trace_routing(skewed.expert_ids, tokens, experts, k, &r, &err) == FP4_OK;
    fp4_moe_routing_free(&skewed);
    ok = ok && fp4_moe_plan_build(&r, &plan, &err) == FP4_OK;
    for (int e = 0; ok && e < experts; e++) ok = make_matrix(&g, n, kdim, 1 + e % 4, &b[e]) == 0;
    ok = ok && make_matrix(&g, tokens, kdim, 0, &a_tok) == 0 &&
         make_matrix(&g, pairs, kdim, 0, &a_pair) == 0;
    if (!ok) {
        CHECK_MSG(0, "grouped case setup: %s", err.msg);
        goto out;
    }
    for (int mode = 0; mode < 4; mode++) {
        const fp4_moe_a_rows rows = (mode & 1) ? FP4_MOE_A_PER_PAIR : FP4_MOE_A_PER_TOKEN;
        const int w4a16 = mode >= 2;
        fp4_status st;
        for (int64_t i = 0; i < pairs * n; i++) d[i] = NAN;
        if (w4a16)
            st = fp4_moe_grouped_ref_w4a16(rows ? x_pair : x_tok, rows ? pairs : tokens, kdim, rows,
                                           b, &plan, d, 2, &err);
        else
            st = fp4_moe_grouped_ref_w4a4(rows ? &a_pair : &a_tok, rows, b, &plan, d, 2, &err);
        CHECK_MSG(st == FP4_OK, "%s", err.msg);
        long bad = 0, nonzero = 0;
        for (int64_t p = 0; p < pairs; p++) {
            const int e = r.expert_ids[p];
            const int64_t arow = rows ? p : p / k;
            for (int64_t c = 0; c < n; c++) {
                const float want =
                    w4a16 ? exact_w4a16((rows ? x_pair : x_tok) + arow * kdim, &b[e], c)
                          : naive_w4a4(rows ? &a_pair : &a_tok, arow, &b[e], c);
                const float got = d[p * n + c];
                bad += float_bits(got) != float_bits(want);
                nonzero += got != 0.0f;
            }
        }
        CHECK_MSG(bad == 0, "grouped %s %s T=%lld E=%d k=%d N=%lld K=%lld: %ld of %lld differ",
                  w4a16 ? "w4a16" : "w4a4", rows ? "per pair" : "per token", (long long)tokens,
                  experts, k, (long long)n, (long long)kdim, bad, (long long)(pairs * n));
        CHECK(nonzero > pairs * n / 2);
    }
    CHECK(used == experts || plan.expert_counts[experts - 1] == 0);
out:
    fp4_moe_plan_free(&plan);
    fp4_moe_routing_free(&r);
    for (int e = 0; b && e < experts; e++) fp4_matrix_free(&b[e]);
    free(b);
    fp4_matrix_free(&a_tok);
    fp4_matrix_free(&a_pair);
    free(d);
    free(x_tok);
    free(x_pair);
}

/* One W4A16 output: x (16 bf16) against a [1, 16] weight whose elements are
 * e2m1 code `code` times e4m3 scale byte `scale`, global scale gs. */
static float w4a16_one(const float *x16, uint8_t code, uint8_t scale, float gs, fp4_status *st)
{
    fp4_err err;
    fp4_matrix b;
    fp4_moe_routing r;
    fp4_moe_plan plan;
    uint16_t x[16];
    float d = NAN;
    const int32_t id = 0;
    *st = FP4_ERR_INTERNAL;
    for (int i = 0; i < 16; i++) x[i] = fp4_bf16_from_float(x16[i]);
    if (fp4_matrix_alloc(&b, 1, 16, &err) != FP4_OK) return NAN;
    memset(b.codes, code | (code << 4), 8);
    b.scales[0] = scale;
    b.global_scale = gs;
    if (trace_routing(&id, 1, 1, 1, &r, &err) == FP4_OK) {
        if (fp4_moe_plan_build(&r, &plan, &err) == FP4_OK) {
            *st = fp4_moe_grouped_ref_w4a16(x, 1, 16, FP4_MOE_A_PER_TOKEN, &b, &plan, &d, 1, &err);
            fp4_moe_plan_free(&plan);
        }
        fp4_moe_routing_free(&r);
    }
    fp4_matrix_free(&b);
    return d;
}

static void test_w4a16_exact(void)
{
    const uint8_t one = fp4_e4m3_encode(1.0f), code_one = 2, code_half = 1, code_six = 7;
    fp4_status st;
    float x[16];
#define SET_X(...)                                                                                     \
    do {                                                                                           \
        const float v[] = {__VA_ARGS__};                                                           \
        memset(x, 0, sizeof x);                                                                    \
        memcpy(x, v, sizeof v);                                                                    \
    } while (0)
    /* cancellation: a double sum of 2^100 + 1 - 2^100 gives 0 */
    SET_X(0x1p100f, 1.0f, -0x1p100f);
    CHECK(w4a16_one(x, code_one, one, 1.0f, &st) == 1.0f && st == FP4_OK);
    /* 1 + 2^-24 is a tie: to even, 1 */
    SET_X(1.0f, 0x1p-24f);
    CHECK(w4a16_one(x, code_one, one, 1.0f, &st) == 1.0f);
    /* ... a sticky bit far below breaks the tie upward */
    SET_X(1.0f, 0x1p-24f, 0x1p-90f);
    CHECK(w4a16_one(x, code_one, one, 1.0f, &st) == 1.0f + 0x1p-23f);
    /* 1 + 2^-23 + 2^-24: a tie next to an odd significand goes up to 1 + 2^-22 */
    SET_X(1.0f, 0x1p-23f, 0x1p-24f);
    CHECK(w4a16_one(x, code_one, one, 1.0f, &st) == 1.0f + 0x1p-22f);
    /* negative: -(1 + 2^-24 + tiny) -> -(1 + 2^-23) */
    SET_X(-1.0f, -0x1p-24f, -0x1p-100f);
    CHECK(w4a16_one(x, code_one, one, 1.0f, &st) == -1.0f - 0x1p-23f);
    /* the global scale is applied before the one rounding: (1 + 2^-24) * 3 =
     * 3 + 3*2^-24, above the tie 3 + 2^-23 between 3 and 3 + 2^-22 */
    SET_X(1.0f, 0x1p-24f);
    CHECK(w4a16_one(x, code_one, one, 3.0f, &st) == 3.0f + 0x1p-22f);
    /* subnormal results: 2^-130 * 0.5 * 2^-9 (smallest e4m3) = 2^-140 exactly */
    SET_X(0x1p-130f);
    CHECK(w4a16_one(x, code_half, 0x01, 1.0f, &st) == 0x1p-140f);
    /* 1.5 * 2^-130 * 0.5 * 2^-9 * 2^-10 = 0.75 * 2^-149: nearer 2^-149 than 0 */
    SET_X(0x1.8p-130f);
    CHECK(w4a16_one(x, code_half, 0x01, 0x1p-10f, &st) == 0x1p-149f);
    /* 2^-150 is the tie between 0 and 2^-149: to even, 0 */
    SET_X(0x1p-130f);
    CHECK(w4a16_one(x, code_half, 0x01, 0x1p-10f, &st) == 0.0f);
    /* 3 * 2^-150 = 1.5 * 2^-149: tie between 1 and 2 (x 2^-149): to even, 2 */
    SET_X(0x1.8p-129f);
    CHECK(w4a16_one(x, code_half, 0x01, 0x1p-10f, &st) == 0x1p-148f);
    /* overflow to infinity, of either sign */
    SET_X(0x1.fep127f, 0x1.fep127f);
    CHECK(w4a16_one(x, code_six, fp4_e4m3_encode(448.0f), 1.0f, &st) == INFINITY);
    SET_X(-0x1.fep127f);
    CHECK(w4a16_one(x, code_six, fp4_e4m3_encode(448.0f), 1.0f, &st) == -INFINITY);
    /* the largest bf16 times 1 stays finite */
    SET_X(0x1.fep127f);
    CHECK(w4a16_one(x, code_one, one, 1.0f, &st) == 0x1.fep127f);
    /* an exact zero */
    SET_X(1.0f, -1.0f);
    CHECK(w4a16_one(x, code_one, one, 1.0f, &st) == 0.0f && st == FP4_OK);
    /* refused: a NaN activation, a NaN scale */
    SET_X(1.0f, NAN);
    w4a16_one(x, code_one, one, 1.0f, &st);
    CHECK(st == FP4_ERR_INVALID_ARG);
    SET_X(1.0f);
    w4a16_one(x, code_one, 0x7F, 1.0f, &st);
    CHECK(st == FP4_ERR_INVALID_ARG);
    w4a16_one(x, code_one, one, 0.0f, &st);
    CHECK(st == FP4_ERR_INVALID_ARG);
#undef SET_X
}

static void test_grouped_errors(void)
{
    fp4_err err;
    fp4_moe_routing r;
    fp4_moe_plan plan;
    test_rng g = test_rng_seed(9);
    fp4_matrix a = {0}, b[3] = {{0}};
    float d[4 * 2 * 16];
    const int32_t ids[8] = {0, 1, 1, 0, 0, 1, 1, 0}; /* expert 2 idle */
    if (trace_routing(ids, 4, 3, 2, &r, &err) != FP4_OK ||
        fp4_moe_plan_build(&r, &plan, &err) != FP4_OK || make_matrix(&g, 4, 32, 0, &a) ||
        make_matrix(&g, 16, 32, 0, &b[0]) || make_matrix(&g, 16, 32, 0, &b[1]) ||
        make_matrix(&g, 16, 32, 0, &b[2])) {
        CHECK_MSG(0, "setup: %s", err.msg);
        return;
    }
    CHECK(fp4_moe_grouped_ref_w4a4(&a, FP4_MOE_A_PER_TOKEN, b, &plan, d, 1, &err) == FP4_OK);
    CHECK(fp4_moe_grouped_ref_w4a4(&a, FP4_MOE_A_PER_PAIR, b, &plan, d, 1, &err) == FP4_ERR_SHAPE);
    CHECK_MSG(contains(err.msg, "A has 4 rows, expected 8"), "%s", err.msg);
    /* an idle expert's bad scale does not matter; a working one's does */
    uint16_t x[4 * 32];
    for (int i = 0; i < 4 * 32; i++) x[i] = fp4_bf16_from_float(0.5f + (float)i);
    b[2].scales[3] = 0xFF;
    CHECK(fp4_moe_grouped_ref_w4a16(x, 4, 32, FP4_MOE_A_PER_TOKEN, b, &plan, d, 1, &err) == FP4_OK);
    b[1].scales[5] = 0x7F;
    CHECK(fp4_moe_grouped_ref_w4a16(x, 4, 32, FP4_MOE_A_PER_TOKEN, b, &plan, d, 1, &err) ==
          FP4_ERR_INVALID_ARG);
    CHECK_MSG(contains(err.msg, "expert 1's scale (2, 1) is 0x7f"), "%s", err.msg);
    /* a weight of another shape */
    b[1].rows = 8;
    CHECK(fp4_moe_grouped_ref_w4a4(&a, FP4_MOE_A_PER_TOKEN, b, &plan, d, 1, &err) == FP4_ERR_SHAPE);
    CHECK_MSG(contains(err.msg, "expert 1's weight is 8x32"), "%s", err.msg);
    b[1].rows = 16;
    CHECK(fp4_moe_grouped_ref_w4a4(NULL, FP4_MOE_A_PER_TOKEN, b, &plan, d, 1, &err) ==
          FP4_ERR_INVALID_ARG);
    fp4_moe_plan_free(&plan);
    fp4_moe_routing_free(&r);
    fp4_matrix_free(&a);
    for (int e = 0; e < 3; e++) fp4_matrix_free(&b[e]);
}

/* ---- 6. activation and combine ------------------------------------------------------------- */

static void test_activation_and_combine(void)
{
    static const float gates[] = {-30.0f, -2.5f, -0.1f, 0.0f, 0.3f, 1.0f, 6.9f, 7.0f, 12.0f, 90.0f};
    static const float ups[] = {-9.0f, -1.0f, 0.0f, 0.5f, 7.5f};
    for (size_t i = 0; i < sizeof gates / sizeof gates[0]; i++)
        for (size_t j = 0; j < sizeof ups / sizeof ups[0]; j++) {
            const double g = gates[i], u = ups[j];
            const double silu = g * (1.0 / (1.0 + exp(-g))) * u;
            const double gc = fmin(g, 7.0), uc = fmax(-7.0, fmin(u, 7.0));
            const double oai = gc * (1.0 / (1.0 + exp(-(double)1.702f * gc))) * (uc + 1.0);
            const float s = fp4_moe_activation(FP4_MOE_ACT_SILU, gates[i], ups[j]);
            const float o = fp4_moe_activation(FP4_MOE_ACT_SWIGLU_OAI, gates[i], ups[j]);
            CHECK_MSG(fabs(s - silu) <= 1e-6 * fabs(silu) + 1e-30, "silu(%g)*%g = %g, want %g", g,
                      u, (double)s, silu);
            CHECK_MSG(fabs(o - oai) <= 1e-6 * fabs(oai) + 1e-30, "swiglu-oai(%g, %g) = %g, want %g",
                      g, u, (double)o, oai);
        }
    /* the clamps: gate above 7 counts as 7, up beyond +-7 as +-7 */
    CHECK(fp4_moe_activation(FP4_MOE_ACT_SWIGLU_OAI, 50.0f, 100.0f) ==
          fp4_moe_activation(FP4_MOE_ACT_SWIGLU_OAI, 7.0f, 7.0f));
    CHECK(fp4_moe_activation(FP4_MOE_ACT_SWIGLU_OAI, 1.0f, -100.0f) ==
          fp4_moe_activation(FP4_MOE_ACT_SWIGLU_OAI, 1.0f, -7.0f));
    CHECK(fp4_moe_activation(FP4_MOE_ACT_SWIGLU_OAI, -100.0f, 1.0f) !=
          fp4_moe_activation(FP4_MOE_ACT_SWIGLU_OAI, -7.0f, 1.0f)); /* no lower clamp on gate */
    CHECK(isnan(fp4_moe_activation((fp4_moe_act)5, 1.0f, 1.0f)));

    /* combine: 2 tokens, k = 2, n = 3 */
    int32_t ids[4] = {1, 0, 2, 1};
    float w[4] = {0.25f, 0.75f, 2.0f, -1.0f};
    const float d[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    float out[6];
    fp4_moe_routing r = {2, 3, 2, ids, w};
    fp4_err err;
    CHECK(fp4_moe_combine(d, 3, &r, out, &err) == FP4_OK);
    CHECK(out[0] == 0.25f * 1 + 0.75f * 4 && out[2] == 0.25f * 3 + 0.75f * 6);
    CHECK(out[3] == 2.0f * 7 - 10 && out[5] == 2.0f * 9 - 12);
    CHECK(fp4_moe_combine(d, 0, &r, out, &err) == FP4_ERR_SHAPE);
    ids[1] = 1;
    CHECK(fp4_moe_combine(d, 3, &r, out, &err) == FP4_ERR_INVALID_ARG);
}

/* ---- 7. the layer ------------------------------------------------------------------------- */

/* The layer computed here stage by stage from the definitions in fp4/moe.h;
 * each stage is compared with the reference's, and fed the reference's
 * previous stage so that one difference does not cascade. */
static void layer_case(fp4_moe_mode mode, fp4_moe_act act, int64_t tokens, fp4_moe_route_mode route,
                       float h_static, uint64_t seed)
{
    test_rng g = test_rng_seed(seed);
    fp4_err err;
    const fp4_moe_dims dims = {48, 32, 5, 2, act};
    const int64_t hid = dims.hidden, inter = dims.inter, pairs = tokens * dims.top_k;
    const int k = dims.top_k;
    fp4_moe_weights w = {0};
    fp4_moe_routing r = {0};
    fp4_moe_layer_opts o = {mode, 0.0f, h_static, 2};
    fp4_moe_layer_out io = {0};
    fp4_matrix xq = {0}, hq = {0};
    uint16_t *x = make_bf16(&g, tokens * hid, 2.0);
    float *y = malloc((size_t)pairs * (size_t)(2 * inter) * sizeof *y);
    float *h = malloc((size_t)pairs * (size_t)inter * sizeof *h);
    float *d = malloc((size_t)pairs * (size_t)hid * sizeof *d);
    float *out = malloc((size_t)tokens * (size_t)hid * sizeof *out);
    uint16_t *h16 = malloc((size_t)pairs * (size_t)inter * sizeof *h16);
    fp4_moe_route_opts ro = {route, seed, 1.0, NULL, NULL, 0};
    char what[96];
    snprintf(what, sizeof what, "layer %s %s T=%lld %s", fp4_moe_mode_name(mode),
             fp4_moe_act_name(act), (long long)tokens, fp4_moe_route_mode_name(route));
    if (!x || !y || !h || !d || !out || !h16 || make_weights(&g, &dims, &w) ||
        fp4_moe_route(&ro, tokens, dims.experts, k, &r, &err) != FP4_OK) {
        CHECK_MSG(0, "%s: setup", what);
        goto out;
    }
    io.out = out;
    io.y = y;
    io.h = h;
    io.d = d;
    if (fp4_moe_layer_ref(&dims, &w, x, &r, &o, &io, &err) != FP4_OK) {
        CHECK_MSG(0, "%s: %s", what, err.msg);
        goto out;
    }

    /* gate_up */
    float xamax = 0.0f;
    for (int64_t i = 0; i < tokens * hid; i++) xamax = fmaxf(xamax, fabsf(fp4_bf16_to_float(x[i])));
    if (mode == FP4_MOE_W4A4) {
        CHECK(io.x_encode_scale_used == 2688.0f / xamax);
        CHECK(fp4_quantize_bf16(x, tokens, hid, 0.0f, &xq, &err) == FP4_OK);
    } else {
        CHECK(io.x_encode_scale_used == 0.0f && io.h_encode_scale_used == 0.0f);
    }
    long bad = 0;
    for (int64_t p = 0; p < pairs; p++) {
        const fp4_matrix *wg = &w.gate_up[r.expert_ids[p]];
        for (int64_t c = 0; c < 2 * inter; c++) {
            const float want = mode == FP4_MOE_W4A4 ? naive_w4a4(&xq, p / k, wg, c)
                                                    : exact_w4a16(x + (p / k) * hid, wg, c);
            bad += float_bits(want) != float_bits(y[p * 2 * inter + c]);
        }
    }
    CHECK_MSG(bad == 0, "%s: gate_up differs in %ld places", what, bad);

    /* activation: gate first, up second; a libm-independent tolerance of 2 ulps */
    bad = 0;
    for (int64_t p = 0; p < pairs; p++)
        for (int64_t i = 0; i < inter; i++) {
            double gt = y[p * 2 * inter + i], up = y[p * 2 * inter + inter + i], want;
            if (act == FP4_MOE_ACT_SILU) {
                want = gt / (1.0 + exp(-gt)) * up;
            } else {
                gt = fmin(gt, 7.0);
                up = fmax(fmin(up, 7.0), -7.0);
                want = gt / (1.0 + exp(-(double)1.702f * gt)) * (up + 1.0); /* float alpha */
            }
            bad += fabs(h[p * inter + i] - want) > 2.5e-7 * fabs(want) + 1e-30;
        }
    CHECK_MSG(bad == 0, "%s: the activation differs in %ld places", what, bad);

    /* down, from the reference's h */
    if (mode == FP4_MOE_W4A4) {
        float hamax = 0.0f;
        for (int64_t i = 0; i < pairs * inter; i++) hamax = fmaxf(hamax, fabsf(h[i]));
        const float gs = h_static > 0.0f ? h_static : 2688.0f / hamax;
        CHECK(io.h_encode_scale_used == gs);
        CHECK(fp4_quantize_f32(h, pairs, inter, gs, &hq, &err) == FP4_OK);
    } else {
        for (int64_t i = 0; i < pairs * inter; i++) h16[i] = fp4_bf16_from_float(h[i]);
    }
    bad = 0;
    long nonzero = 0;
    for (int64_t p = 0; p < pairs; p++) {
        const fp4_matrix *wd = &w.down[r.expert_ids[p]];
        for (int64_t c = 0; c < hid; c++) {
            const float want = mode == FP4_MOE_W4A4 ? naive_w4a4(&hq, p, wd, c)
                                                    : exact_w4a16(h16 + p * inter, wd, c);
            bad += float_bits(want) != float_bits(d[p * hid + c]);
            nonzero += want != 0.0f;
        }
    }
    CHECK_MSG(bad == 0, "%s: down differs in %ld places", what, bad);
    CHECK(nonzero > pairs * hid / 2);

    /* combine */
    bad = 0;
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t c = 0; c < hid; c++) {
            double acc = 0.0;
            for (int j = 0; j < k; j++)
                acc += (double)r.weights[t * k + j] * (double)d[(t * k + j) * hid + c];
            bad += float_bits((float)acc) != float_bits(out[t * hid + c]);
        }
    CHECK_MSG(bad == 0, "%s: the combine differs in %ld places", what, bad);

    /* the intermediates are optional: the output is the same without them */
    float *out2 = malloc((size_t)tokens * (size_t)hid * sizeof *out2);
    fp4_moe_layer_out io2 = {0};
    io2.out = out2;
    CHECK(out2 && fp4_moe_layer_ref(&dims, &w, x, &r, &o, &io2, &err) == FP4_OK &&
          memcmp(out, out2, (size_t)tokens * (size_t)hid * sizeof *out) == 0);
    free(out2);
out:
    fp4_moe_weights_free(&w);
    fp4_moe_routing_free(&r);
    fp4_matrix_free(&xq);
    fp4_matrix_free(&hq);
    free(x);
    free(y);
    free(h);
    free(d);
    free(out);
    free(h16);
}

static void test_layer_errors(void)
{
    test_rng g = test_rng_seed(77);
    fp4_err err;
    const fp4_moe_dims dims = {32, 16, 3, 2, FP4_MOE_ACT_SILU};
    fp4_moe_weights w = {0};
    fp4_moe_routing r = {0};
    fp4_moe_route_opts ro = {FP4_MOE_ROUTE_RANDOM, 1, 0.0, NULL, NULL, 0};
    fp4_moe_layer_opts o = {FP4_MOE_W4A4, 0.0f, 0.0f, 1};
    float out[4 * 32];
    fp4_moe_layer_out io = {out, NULL, NULL, NULL, 0.0f, 0.0f};
    uint16_t *x = make_bf16(&g, 4 * 32, 1.0);
    if (!x || make_weights(&g, &dims, &w) || fp4_moe_route(&ro, 4, 4, 2, &r, &err) != FP4_OK) {
        CHECK_MSG(0, "layer errors: setup");
        goto out;
    }
    /* routing over 4 experts, layer of 3 */
    CHECK(fp4_moe_layer_ref(&dims, &w, x, &r, &o, &io, &err) == FP4_ERR_INVALID_ARG);
    CHECK_MSG(contains(err.msg, "4 experts"), "%s", err.msg);
    fp4_moe_routing_free(&r);
    CHECK(fp4_moe_route(&ro, 4, 3, 2, &r, &err) == FP4_OK);
    CHECK(fp4_moe_layer_ref(&dims, &w, x, &r, &o, &io, &err) == FP4_OK);
    /* a NaN in x, in either mode */
    x[37] = 0x7FC0;
    CHECK(fp4_moe_layer_ref(&dims, &w, x, &r, &o, &io, &err) == FP4_ERR_INVALID_ARG);
    CHECK_MSG(contains(err.msg, "(1, 5) is NaN"), "%s", err.msg);
    o.mode = FP4_MOE_W4A16;
    CHECK(fp4_moe_layer_ref(&dims, &w, x, &r, &o, &io, &err) == FP4_ERR_INVALID_ARG);
    CHECK_MSG(contains(err.msg, "gate_up") && contains(err.msg, "NaN"), "%s", err.msg);
    x[37] = 0x3F80;
    /* a weight of the wrong shape; no output buffer; an unknown mode */
    w.down[2].cols = 32;
    CHECK(fp4_moe_layer_ref(&dims, &w, x, &r, &o, &io, &err) == FP4_ERR_SHAPE);
    CHECK_MSG(contains(err.msg, "expert 2's down weight is 32x32"), "%s", err.msg);
    w.down[2].cols = 16;
    io.out = NULL;
    CHECK(fp4_moe_layer_ref(&dims, &w, x, &r, &o, &io, &err) == FP4_ERR_INVALID_ARG);
    io.out = out;
    o.mode = (fp4_moe_mode)3;
    CHECK(fp4_moe_layer_ref(&dims, &w, x, &r, &o, &io, &err) == FP4_ERR_INVALID_ARG);
out:
    fp4_moe_weights_free(&w);
    fp4_moe_routing_free(&r);
    free(x);
}

/* Shared experts: every mode's routed slots are those of the same routing
 * without them (over the other experts), and each token's last slots hold
 * the shared experts (the last ids) with weight 1; a trace gives the routed
 * slots alone; as many shared experts as the top-k is refused; the label
 * names them. */
static void test_shared(void)
{
    static const fp4_moe_route_mode modes[] = {FP4_MOE_ROUTE_BALANCED, FP4_MOE_ROUTE_RANDOM,
                                               FP4_MOE_ROUTE_SKEWED, FP4_MOE_ROUTE_TRACE};
    static const int32_t trace[6 * 3] = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 3, 5, 2, 4, 6, 7, 1, 0};
    const int64_t T = 6;
    const int E = 8, k = 3, S = 2;
    fp4_err err;
    for (int m = 0; m < 4; m++) {
        fp4_moe_route_opts o = {modes[m], 9, 1.1, modes[m] == FP4_MOE_ROUTE_TRACE ? trace : NULL, NULL, 0};
        fp4_moe_routing plain, with;
        CHECK_MSG(fp4_moe_route(&o, T, E, k, &plain, &err) == FP4_OK, "mode %d: %s", m, err.msg);
        o.shared = S;
        CHECK_MSG(fp4_moe_route(&o, T, E + S, k + S, &with, &err) == FP4_OK, "mode %d shared: %s", m, err.msg);
        if (plain.expert_ids && with.expert_ids) {
            int bad = 0;
            for (int64_t t = 0; t < T; t++) {
                for (int j = 0; j < k; j++)
                    bad += with.expert_ids[t * (k + S) + j] != plain.expert_ids[t * k + j] ||
                           with.weights[t * (k + S) + j] != plain.weights[t * k + j];
                for (int i = 0; i < S; i++)
                    bad += with.expert_ids[t * (k + S) + k + i] != E + i || with.weights[t * (k + S) + k + i] != 1.0f;
            }
            CHECK_MSG(bad == 0, "mode %d: %d slots differ from the routing without shared experts", m, bad);
            fp4_moe_plan plan;
            if (fp4_moe_plan_build(&with, &plan, &err) == FP4_OK) {
                CHECK(plan.expert_counts[E] == T && plan.expert_counts[E + 1] == T);
                fp4_moe_plan_free(&plan);
            } else {
                CHECK_MSG(0, "plan: %s", err.msg);
            }
        }
        char label[64];
        fp4_moe_route_describe(&o, label, sizeof label);
        CHECK_MSG(strstr(label, "shared=2") != NULL, "label '%s'", label);
        fp4_moe_routing_free(&plain);
        fp4_moe_routing_free(&with);
        o.shared = k + S; /* every slot shared: nothing routed */
        CHECK(fp4_moe_route(&o, T, E + S, k + S, &with, &err) == FP4_ERR_INVALID_ARG &&
              strstr(err.msg, "shared") != NULL);
        o.shared = -1;
        CHECK(fp4_moe_route(&o, T, E + S, k + S, &with, &err) == FP4_ERR_INVALID_ARG);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv; /* no files: nothing goes to the scratch directory */
    test_shared();
    test_presets();
    test_balanced();
    test_random_and_skewed();
    test_top1_weights();
    test_trace();
    test_plan();
    test_bytes();
    grouped_case(6, 5, 2, 24, 48, 1);
    grouped_case(9, 8, 3, 17, 160, 2);
    grouped_case(3, 3, 2, 8, 2880, 3); /* gpt-oss's K, not a multiple of 128 */
    grouped_case(4, 1, 1, 16, 64, 4);  /* one expert */
    test_w4a16_exact();
    test_grouped_errors();
    test_activation_and_combine();
    for (int mode = 0; mode < 2; mode++)
        for (int act = 0; act < 2; act++) {
            layer_case((fp4_moe_mode)mode, (fp4_moe_act)act, 7, FP4_MOE_ROUTE_RANDOM, 0.0f,
                       10 + act);
            layer_case((fp4_moe_mode)mode, (fp4_moe_act)act, 1, FP4_MOE_ROUTE_SKEWED, 0.0f,
                       20 + act);
        }
    layer_case(FP4_MOE_W4A4, FP4_MOE_ACT_SWIGLU_OAI, 9, FP4_MOE_ROUTE_BALANCED, 300.0f, 30);
    test_layer_errors();
    return check_finish("test_moe");
}
