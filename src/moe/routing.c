/* MoE routing: which experts each token goes to, and with what weights.
 *
 * Random numbers come from a private xoshiro256** generator (the bench layer's
 * is above this one). Every token draws from its own stream, keyed by (seed,
 * purpose, token), so token t's routing does not depend on how many tokens are
 * routed: a T sweep sees each prefix routed the same way. Integer draws are the
 * same on every machine; gaussians go through libm's log and cos, which may
 * differ in the last bit between libm versions (a tie in top-k could then
 * break differently): reproducible on one machine, almost always across. */
#include "fp4/moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct moe_rng {
    uint64_t s[4];
} moe_rng;

/* What a stream is for: keeps the streams of one seed independent. */
enum {
    STREAM_PERMUTATION = 1, /* the experts' order (balanced, skewed) */
    STREAM_LOGITS = 2,      /* random: router logits */
    STREAM_DRAWS = 3,       /* skewed: the Zipf draws */
    STREAM_WEIGHTS = 4      /* weight logits (all modes but random) */
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The stream for (seed, purpose, index). */
static void rng_init(moe_rng *r, uint64_t seed, uint64_t purpose, uint64_t index)
{
    uint64_t key = seed;
    uint64_t a = splitmix64(&key) ^ (purpose * 0xD1B54A32D192ED03ull);
    uint64_t b = splitmix64(&a) ^ index;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&b);
}

static uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(moe_rng *r)
{
    uint64_t *s = r->s;
    const uint64_t result = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* Uniform in [0, 1). */
static double rng_uniform(moe_rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1p-53;
}

/* Uniform integer in [0, n), n >= 1, without modulo bias (rejection). */
static uint64_t rng_below(moe_rng *r, uint64_t n)
{
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do v = rng_next(r);
    while (v >= limit);
    return v % n;
}

/* Standard normal, Box-Muller. */
static double rng_normal(moe_rng *r)
{
    const double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* A seeded permutation of 0..n-1 (Fisher-Yates). */
static void permutation(uint64_t seed, int32_t *perm, int n)
{
    moe_rng r;
    rng_init(&r, seed, STREAM_PERMUTATION, 0);
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        const int j = (int)rng_below(&r, (uint64_t)i + 1);
        const int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* w[0..k) = softmax(logits[0..k)), in double, each rounded once to float.
 * One slot: sigmoid(logit) instead (a softmax of one logit is 1, under which a
 * combine that ignores the weights would verify; top-1 routers such as
 * Llama 4's score their expert by a sigmoid). */
static void slot_weights(const double *logits, int k, float *w)
{
    if (k == 1) {
        w[0] = (float)(1.0 / (1.0 + exp(-logits[0])));
        return;
    }
    double mx = logits[0], sum = 0.0;
    for (int j = 1; j < k; j++) mx = logits[j] > mx ? logits[j] : mx;
    for (int j = 0; j < k; j++) sum += exp(logits[j] - mx);
    for (int j = 0; j < k; j++) w[j] = (float)(exp(logits[j] - mx) / sum);
}

/* Token t's weights from k gaussian logits of its weights stream. */
static void drawn_weights(uint64_t seed, int64_t t, int k, double *logits, float *w)
{
    moe_rng r;
    rng_init(&r, seed, STREAM_WEIGHTS, (uint64_t)t);
    for (int j = 0; j < k; j++) logits[j] = rng_normal(&r);
    slot_weights(logits, k, w);
}

const char *fp4_moe_route_mode_name(fp4_moe_route_mode m)
{
    switch (m) {
    case FP4_MOE_ROUTE_BALANCED: return "balanced";
    case FP4_MOE_ROUTE_RANDOM: return "random";
    case FP4_MOE_ROUTE_SKEWED: return "skewed";
    case FP4_MOE_ROUTE_TRACE: return "trace";
    }
    return NULL;
}

fp4_status fp4_moe_route_mode_parse(const char *name, fp4_moe_route_mode *out, fp4_err *err)
{
    static const fp4_moe_route_mode all[] = {FP4_MOE_ROUTE_BALANCED, FP4_MOE_ROUTE_RANDOM,
                                             FP4_MOE_ROUTE_SKEWED, FP4_MOE_ROUTE_TRACE};
    if (!name || !out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "routing mode: NULL argument");
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(fp4_moe_route_mode_name(all[i]), name) == 0) {
            *out = all[i];
            return FP4_OK;
        }
    return fp4_fail(err, FP4_ERR_INVALID_ARG,
                    "unknown routing '%s' (known: balanced, random, skewed, trace)", name);
}

void fp4_moe_route_describe(const fp4_moe_route_opts *o, char *buf, size_t len)
{
    if (!buf || len == 0) return;
    const char *name = o ? fp4_moe_route_mode_name(o->mode) : NULL;
    char shared[32] = "";
    if (name && o->shared > 0) snprintf(shared, sizeof shared, "shared=%d", o->shared);
    if (!name)
        snprintf(buf, len, "unknown");
    else if (o->mode == FP4_MOE_ROUTE_TRACE)
        snprintf(buf, len, shared[0] ? "trace(%s)" : "trace", shared);
    else if (o->mode == FP4_MOE_ROUTE_SKEWED)
        snprintf(buf, len, "skewed(s=%g,seed=%llu%s%s)", o->zipf_s, (unsigned long long)o->seed,
                 shared[0] ? "," : "", shared);
    else
        snprintf(buf, len, "%s(seed=%llu%s%s)", name, (unsigned long long)o->seed, shared[0] ? "," : "", shared);
}

/* Sizes every routing must have. */
static fp4_status check_sizes(const char *who, int64_t tokens, int experts, int top_k, fp4_err *err)
{
    if (tokens < 1)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: %lld tokens: need at least 1", who,
                        (long long)tokens);
    if (experts < 1 || experts > FP4_MOE_MAX_EXPERTS)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: %d experts: must be 1..%d", who, experts,
                        FP4_MOE_MAX_EXPERTS);
    if (top_k < 1 || top_k > experts)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: top-k %d: must be 1..%d (the experts)", who,
                        top_k, experts);
    if (tokens > INT32_MAX / top_k)
        return fp4_fail(err, FP4_ERR_OVERFLOW,
                        "%s: %lld tokens x top-k %d pairs do not fit the int32 pair index", who,
                        (long long)tokens, top_k);
    return FP4_OK;
}

/* ids in range and distinct per token, weights (if any) finite; the message
 * names the first bad entry. */
static fp4_status check_entries(const char *who, const int32_t *ids, const float *weights,
                                int64_t tokens, int experts, int top_k, fp4_err *err)
{
    fp4_status st = FP4_OK;
    /* seen_by[e] = 1 + the last token that named e; slot_of[e] = its slot there */
    int64_t *seen_by = calloc((size_t)experts, sizeof *seen_by);
    int32_t *slot_of = calloc((size_t)experts, sizeof *slot_of);
    if (!seen_by || !slot_of) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "%s: no memory", who);
        goto out;
    }
    for (int64_t t = 0; t < tokens; t++)
        for (int j = 0; j < top_k; j++) {
            const int64_t p = t * top_k + j;
            const int32_t e = ids[p];
            if (e < 0 || e >= experts) {
                st = fp4_fail(err, FP4_ERR_INVALID_ARG,
                              "%s: token %lld, slot %d: expert %d is outside 0..%d", who,
                              (long long)t, j, (int)e, experts - 1);
                goto out;
            }
            if (seen_by[e] == t + 1) {
                st = fp4_fail(err, FP4_ERR_INVALID_ARG,
                              "%s: token %lld names expert %d twice (slots %d and %d)", who,
                              (long long)t, (int)e, (int)slot_of[e], j);
                goto out;
            }
            seen_by[e] = t + 1;
            slot_of[e] = j;
            if (weights && !isfinite(weights[p])) {
                st = fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: token %lld, slot %d: weight is %s",
                              who, (long long)t, j, isnan(weights[p]) ? "NaN" : "infinite");
                goto out;
            }
        }
out:
    free(seen_by);
    free(slot_of);
    return st;
}

fp4_status fp4_moe_routing_check(const fp4_moe_routing *r, fp4_err *err)
{
    if (!r) return fp4_fail(err, FP4_ERR_INVALID_ARG, "routing: NULL argument");
    fp4_status st = check_sizes("routing", r->tokens, r->experts, r->top_k, err);
    if (st != FP4_OK) return st;
    if (!r->expert_ids || !r->weights)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "routing: the ids or weights are missing");
    return check_entries("routing", r->expert_ids, r->weights, r->tokens, r->experts, r->top_k,
                         err);
}

void fp4_moe_routing_free(fp4_moe_routing *r)
{
    if (!r) return;
    free(r->expert_ids);
    free(r->weights);
    memset(r, 0, sizeof *r);
}

/* balanced: pair p = t*k + j goes to perm[p mod E]. Pairs 0..T*k-1 cover the
 * residues round-robin, so counts differ by at most one (exact when E divides
 * T*k); a token's k consecutive residues are distinct because k <= E. The
 * permutation keeps the extra pairs off the lowest expert ids. */
static void route_balanced(uint64_t seed, fp4_moe_routing *r, const int32_t *perm, double *scratch)
{
    const int k = r->top_k;
    for (int64_t t = 0; t < r->tokens; t++) {
        for (int j = 0; j < k; j++) r->expert_ids[t * k + j] = perm[(t * k + j) % r->experts];
        drawn_weights(seed, t, k, scratch, r->weights + t * k);
    }
}

/* random: E gaussian logits per token, the k largest in descending order (ties:
 * the lower id first, as a stable sort would), weights = softmax over them. */
static void route_random(uint64_t seed, fp4_moe_routing *r, double *logits, double *chosen)
{
    const int k = r->top_k, n = r->experts;
    for (int64_t t = 0; t < r->tokens; t++) {
        moe_rng g;
        rng_init(&g, seed, STREAM_LOGITS, (uint64_t)t);
        for (int e = 0; e < n; e++) logits[e] = rng_normal(&g);
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < n; e++)
                if (logits[e] != -INFINITY && (best < 0 || logits[e] > logits[best])) best = e;
            r->expert_ids[t * k + j] = best;
            chosen[j] = logits[best];
            logits[best] = -INFINITY; /* taken */
        }
        slot_weights(chosen, k, r->weights + t * k);
    }
}

/* skewed: the expert of rank i (perm[i]) has popularity (i+1)^-s; each token
 * draws k experts one after another, each draw in proportion to the
 * popularity of those not yet drawn (sampling without replacement). */
static void route_skewed(uint64_t seed, double s, fp4_moe_routing *r, const int32_t *perm,
                         double *popularity, unsigned char *taken, double *scratch)
{
    const int k = r->top_k, n = r->experts;
    for (int i = 0; i < n; i++) popularity[i] = pow((double)(i + 1), -s);
    for (int64_t t = 0; t < r->tokens; t++) {
        moe_rng g;
        rng_init(&g, seed, STREAM_DRAWS, (uint64_t)t);
        memset(taken, 0, (size_t)n);
        for (int j = 0; j < k; j++) {
            double total = 0.0, acc = 0.0;
            for (int i = 0; i < n; i++)
                if (!taken[i]) total += popularity[i];
            const double u = rng_uniform(&g) * total;
            int pick = -1;
            for (int i = 0; i < n; i++) {
                if (taken[i]) continue;
                pick = i; /* the last one left stays picked if rounding runs past */
                acc += popularity[i];
                if (u < acc) break;
            }
            taken[pick] = 1;
            r->expert_ids[t * k + j] = perm[pick];
        }
        drawn_weights(seed, t, k, scratch, r->weights + t * k);
    }
}

static fp4_status route_trace(const fp4_moe_route_opts *o, fp4_moe_routing *r, double *scratch,
                              fp4_err *err)
{
    const int k = r->top_k;
    if (!o->trace_ids)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "trace routing: no expert ids given");
    fp4_status st = check_entries("trace routing", o->trace_ids, o->trace_weights, r->tokens,
                                  r->experts, k, err);
    if (st != FP4_OK) return st;
    memcpy(r->expert_ids, o->trace_ids, (size_t)(r->tokens * k) * sizeof *r->expert_ids);
    if (o->trace_weights)
        memcpy(r->weights, o->trace_weights, (size_t)(r->tokens * k) * sizeof *r->weights);
    else
        for (int64_t t = 0; t < r->tokens; t++)
            drawn_weights(o->seed, t, k, scratch, r->weights + t * k);
    return FP4_OK;
}

/* The routing of the mode alone (no shared experts). */
static fp4_status route_mode(const fp4_moe_route_opts *o, int64_t tokens, int experts, int top_k,
                             fp4_moe_routing *out, fp4_err *err)
{
    fp4_status st;
    int32_t *perm = NULL;
    double *logits = NULL, *chosen = NULL;
    unsigned char *taken = NULL;
    memset(out, 0, sizeof *out);
    if (!fp4_moe_route_mode_name(o->mode))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "routing mode %d is unknown", (int)o->mode);
    if ((st = check_sizes("routing", tokens, experts, top_k, err)) != FP4_OK) return st;
    if (o->mode == FP4_MOE_ROUTE_SKEWED && !(isfinite(o->zipf_s) && o->zipf_s >= 0.0))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "skewed routing: Zipf exponent %g must be >= 0",
                        o->zipf_s);

    const size_t pairs = (size_t)tokens * (size_t)top_k;
    out->expert_ids = malloc(pairs * sizeof *out->expert_ids);
    out->weights = malloc(pairs * sizeof *out->weights);
    perm = malloc((size_t)experts * sizeof *perm);
    logits = malloc((size_t)experts * sizeof *logits);
    chosen = malloc((size_t)top_k * sizeof *chosen);
    taken = malloc((size_t)experts);
    if (!out->expert_ids || !out->weights || !perm || !logits || !chosen || !taken) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "routing: no memory for %lld tokens x top-k %d",
                      (long long)tokens, top_k);
        goto out;
    }
    out->tokens = tokens;
    out->experts = experts;
    out->top_k = top_k;
    switch (o->mode) {
    case FP4_MOE_ROUTE_BALANCED:
        permutation(o->seed, perm, experts);
        route_balanced(o->seed, out, perm, chosen);
        break;
    case FP4_MOE_ROUTE_RANDOM: route_random(o->seed, out, logits, chosen); break;
    case FP4_MOE_ROUTE_SKEWED:
        permutation(o->seed, perm, experts);
        route_skewed(o->seed, o->zipf_s, out, perm, logits, taken, chosen);
        break;
    case FP4_MOE_ROUTE_TRACE: st = route_trace(o, out, chosen, err); break;
    }
out:
    free(perm);
    free(logits);
    free(chosen);
    free(taken);
    if (st != FP4_OK) fp4_moe_routing_free(out);
    return st;
}

fp4_status fp4_moe_route(const fp4_moe_route_opts *o, int64_t tokens, int experts, int top_k,
                         fp4_moe_routing *out, fp4_err *err)
{
    if (!o || !out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "routing: NULL argument");
    memset(out, 0, sizeof *out);
    const int S = o->shared;
    if (S == 0) return route_mode(o, tokens, experts, top_k, out, err);
    fp4_status st = check_sizes("routing", tokens, experts, top_k, err);
    if (st != FP4_OK) return st;
    if (S < 0 || S >= top_k)
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "routing: %d shared experts: must be 0..%d (fewer than the top-k, %d, which counts them)",
                        S, top_k - 1, top_k);
    /* the routed slots among the first experts - S, then the shared ones */
    fp4_moe_routing routed;
    if ((st = route_mode(o, tokens, experts - S, top_k - S, &routed, err)) != FP4_OK) return st;
    const size_t pairs = (size_t)tokens * (size_t)top_k;
    out->expert_ids = malloc(pairs * sizeof *out->expert_ids);
    out->weights = malloc(pairs * sizeof *out->weights);
    if (!out->expert_ids || !out->weights) {
        fp4_moe_routing_free(&routed);
        fp4_moe_routing_free(out);
        return fp4_fail(err, FP4_ERR_NOMEM, "routing: no memory for %lld tokens x top-k %d", (long long)tokens,
                        top_k);
    }
    out->tokens = tokens;
    out->experts = experts;
    out->top_k = top_k;
    const int kr = top_k - S;
    for (int64_t t = 0; t < tokens; t++) {
        memcpy(out->expert_ids + t * top_k, routed.expert_ids + t * kr, (size_t)kr * sizeof *out->expert_ids);
        memcpy(out->weights + t * top_k, routed.weights + t * kr, (size_t)kr * sizeof *out->weights);
        for (int i = 0; i < S; i++) {
            out->expert_ids[t * top_k + kr + i] = experts - S + i;
            out->weights[t * top_k + kr + i] = 1.0f;
        }
    }
    fp4_moe_routing_free(&routed);
    return FP4_OK;
}
