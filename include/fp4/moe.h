/* fp4bench: routed mixture-of-experts (MoE) workloads on the CPU (docs/MOE.md).
 *
 * One MoE layer: T tokens of hidden size H, E experts, top-k routing. Expert e
 * holds two NVFP4 weights (TN layout, [N, K]):
 *   gate_up[e]  [2I, H]   rows 0..I-1 are the gate, rows I..2I-1 the up half
 *   down[e]     [H, I]
 * A (token t, slot j) pair routed to expert e = ids[t, j] computes
 *   y[p, :] = x[t, :] . gate_up[e]^T                   p = t*k + j, [2I]
 *   h[p, i] = act(y[p, i], y[p, I + i])                [I]
 *   d[p, :] = h[p, :] . down[e]^T                      [H]
 *   out[t, :] = sum_j w[t, j] * d[t*k + j, :]          [H]
 *
 * What is here: model presets, seeded routing (balanced, random, skewed, trace),
 * the "contiguous grouped" gather/scatter plan the GPU kernels use, the bytes and
 * flops model, and exact references: the grouped GEMM (W4A4 and W4A16), the
 * weighted combine and the whole layer. Buffers are row-major; structs that own
 * memory have a free function; every function that can fail returns fp4_status. */
#ifndef FP4_MOE_H
#define FP4_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "fp4/format.h"
#include "fp4/reference.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP4_MOE_MAX_EXPERTS 65536  /* per-token work in routing is O(E) */
#define FP4_MOE_MAX_K (1 << 20)    /* the exact accumulators' limit on K (= H or I) */
#define FP4_MOE_DEFAULT_ZIPF_S 1.0 /* skewed routing's exponent when none is given */

/* gpt-oss's clamped SwiGLU (see fp4_moe_act). */
#define FP4_MOE_SWIGLU_ALPHA 1.702f
#define FP4_MOE_SWIGLU_LIMIT 7.0f

/* ---- activation ------------------------------------------------------------ */

typedef enum fp4_moe_act {
    /* h = silu(g) * u = g / (1 + exp(-g)) * u  (Mixtral, DeepSeek, Qwen, GLM, Llama 4) */
    FP4_MOE_ACT_SILU = 0,
    /* gpt-oss: g' = min(g, limit), u' = clamp(u, -limit, limit),
     * h = g' * sigmoid(alpha * g') * (u' + 1), alpha 1.702, limit 7 */
    FP4_MOE_ACT_SWIGLU_OAI = 1
} fp4_moe_act;

/* "silu" / "swiglu-oai"; NULL for a value out of range. */
const char *fp4_moe_act_name(fp4_moe_act act);
fp4_status fp4_moe_act_parse(const char *name, fp4_moe_act *out, fp4_err *err);

/* One activation value: computed in double from the float inputs, rounded once
 * to float (libm exp: another libm or a GPU's expf may differ in the last bit). */
float fp4_moe_activation(fp4_moe_act act, float gate, float up);

/* gpt-oss checkpoints interleave gate_up's rows (gate 2i, up 2i+1); fp4bench keeps
 * halves. The row of our layout that interleaved row `row` moves to. */
static inline int64_t fp4_moe_row_from_interleaved(int64_t row, int64_t inter)
{
    return (row % 2 == 0) ? row / 2 : inter + row / 2;
}

/* ---- the layer's sizes and the model presets -------------------------------- */

typedef struct fp4_moe_dims {
    int64_t hidden; /* H: gate_up's K and down's N; a multiple of 16 */
    int64_t inter;  /* I: the expert intermediate (per tensor-parallel rank); a multiple of 16 */
    int experts;    /* E routed experts, 1..FP4_MOE_MAX_EXPERTS */
    int top_k;      /* experts per token, 1..E */
    fp4_moe_act act;
} fp4_moe_dims;

/* Valid sizes: H, I >= 16 and multiples of 16, at most FP4_MOE_MAX_K; E and k in
 * range; a known activation. */
fp4_status fp4_moe_dims_check(const fp4_moe_dims *d, fp4_err *err);

typedef struct fp4_moe_preset {
    const char *name;  /* short CLI name: "glm5" */
    const char *model; /* the model's own name: "GLM-5" (also accepted by find) */
    int64_t hidden;    /* H */
    int64_t inter;     /* I, the whole expert (tensor parallelism splits it) */
    int experts;       /* routed experts */
    int top_k;
    int shared_experts; /* always-active experts beside the routed ones (a dense GEMM) */
    fp4_moe_act act;
    int layers;     /* transformer layers */
    int moe_layers; /* of which have a routed MoE */
    const char *note;
} fp4_moe_preset;

int fp4_moe_preset_count(void);
const fp4_moe_preset *fp4_moe_preset_at(int i); /* NULL out of range */
/* By name or model name, case-insensitive; NULL when unknown. */
const fp4_moe_preset *fp4_moe_preset_find(const char *name);
/* The same, failing with FP4_ERR_NOT_FOUND and the list of known names. */
fp4_status fp4_moe_preset_lookup(const char *name, const fp4_moe_preset **out, fp4_err *err);
/* The preset's dims on one rank of tensor parallelism tp (>= 1): I / tp, which
 * must divide evenly into a multiple of 16. */
fp4_status fp4_moe_preset_dims(const fp4_moe_preset *p, int tp, fp4_moe_dims *out, fp4_err *err);

/* ---- routing ---------------------------------------------------------------- */

typedef enum fp4_moe_route_mode {
    FP4_MOE_ROUTE_BALANCED = 0, /* every expert floor or ceil of T*k/E pairs */
    FP4_MOE_ROUTE_RANDOM = 1,   /* gaussian router logits, top-k */
    FP4_MOE_ROUTE_SKEWED = 2,   /* Zipf popularity 1/rank^s, k distinct draws per token */
    FP4_MOE_ROUTE_TRACE = 3     /* ids given by the caller (e.g. from a .npy) */
} fp4_moe_route_mode;

const char *fp4_moe_route_mode_name(fp4_moe_route_mode m); /* NULL out of range */
fp4_status fp4_moe_route_mode_parse(const char *name, fp4_moe_route_mode *out, fp4_err *err);

typedef struct fp4_moe_route_opts {
    fp4_moe_route_mode mode;
    uint64_t seed;
    double zipf_s;              /* skewed: exponent, finite and >= 0 (0: uniform) */
    const int32_t *trace_ids;   /* trace: [tokens, top_k] expert ids */
    const float *trace_weights; /* trace: [tokens, top_k] finite weights, or NULL (drawn) */
    /* Shared experts (0: none): the last `shared` of the experts, which every
     * token takes in its last `shared` slots with weight 1, beside the top_k -
     * shared experts the mode routes it to among the others (a trace then
     * gives those alone: [tokens, top_k - shared]). A shared expert of
     * intermediate size n x I is n of them. */
    int shared;
} fp4_moe_route_opts;

/* Expert ids and weights per (token, slot). ids of one token are distinct.
 * Weights (of the routed slots; a shared expert's is 1): a softmax over k logits per token (so they sum to 1 up to rounding),
 * or for top-1 the sigmoid of its one logit (never exactly 1): random mode's
 * selected router logits (= top-k of the full softmax, renormalised); in the
 * other modes k gaussian logits drawn from the seed, so that the weights
 * differ between slots and a combine that mixes slots up or ignores the
 * weights fails verification. Trace mode takes the caller's weights when given. */
typedef struct fp4_moe_routing {
    int64_t tokens;
    int experts, top_k;
    int32_t *expert_ids; /* [tokens, top_k] */
    float *weights;      /* [tokens, top_k] */
} fp4_moe_routing;

/* Route `tokens` tokens (1 <= T, T*k <= INT32_MAX). Same options and sizes give
 * the same routing; token t's ids and weights depend only on (seed, t, E, k, s),
 * so a T sweep routes each prefix identically. Allocates out's arrays. */
fp4_status fp4_moe_route(const fp4_moe_route_opts *o, int64_t tokens, int experts, int top_k,
                         fp4_moe_routing *out, fp4_err *err);
/* Check a routing built elsewhere: sizes, ids in range and distinct per token,
 * finite weights; the message names the first bad entry. */
fp4_status fp4_moe_routing_check(const fp4_moe_routing *r, fp4_err *err);
void fp4_moe_routing_free(fp4_moe_routing *r);
/* "skewed(s=1.2,seed=7)": a label for reports; always NUL-terminated. */
void fp4_moe_route_describe(const fp4_moe_route_opts *o, char *buf, size_t len);

/* ---- the contiguous grouped plan ------------------------------------------------
 * Pairs p = t*k + j sorted by expert (stable: within an expert ascending token).
 * Grouped row r (0 <= r < T*k) holds pair pair_index[r]; expert e owns rows
 * [expert_offsets[e], expert_offsets[e+1]). A grouped GEMM gathers A row
 * pair_index[r] / k (gate_up) or pair_index[r] (down) into row r. */
typedef struct fp4_moe_plan_stats {
    int active_experts;   /* experts with >= 1 pair */
    int32_t min_tokens;   /* over all E experts, idle ones counting 0 */
    double median_tokens; /* over all E experts (mean of the two middle ones for even E) */
    int32_t max_tokens;
    double mean_tokens; /* T*k / E */
} fp4_moe_plan_stats;

typedef struct fp4_moe_plan {
    int64_t tokens;
    int experts, top_k;
    int64_t pairs;           /* T * k */
    int32_t *expert_offsets; /* [E + 1], prefix sums of expert_counts */
    int32_t *expert_counts;  /* [E] pairs per expert */
    int32_t *pair_index;     /* [pairs]: grouped row -> pair t*k + j */
    int32_t *pair_row;       /* [pairs]: pair -> grouped row (the inverse, for the scatter) */
    fp4_moe_plan_stats stats;
} fp4_moe_plan;

/* Build the plan of a routing (checked with fp4_moe_routing_check). */
fp4_status fp4_moe_plan_build(const fp4_moe_routing *r, fp4_moe_plan *out, fp4_err *err);
void fp4_moe_plan_free(fp4_moe_plan *p);
/* Offsets with every expert's group starting at a multiple of align (>= 1), for
 * kernels that want tile-aligned groups or one 128-row swizzled scale block per
 * expert: out[E + 1], out[E] = the padded total. */
fp4_status fp4_moe_plan_aligned_offsets(const fp4_moe_plan *p, int32_t align, int64_t *out,
                                        fp4_err *err);

/* ---- bytes and flops ------------------------------------------------------------ */

typedef enum fp4_moe_wformat {
    FP4_MOE_WEIGHTS_NVFP4 = 0, /* codes N*K/2 + swizzled scales with padding + fp32 global */
    FP4_MOE_WEIGHTS_FP8 = 1,   /* N*K + one fp32 per-tensor scale */
    FP4_MOE_WEIGHTS_BF16 = 2   /* 2*N*K */
} fp4_moe_wformat;

/* Bytes of one [n, k] weight in format f. */
double fp4_moe_matrix_bytes(int64_t n, int64_t k, fp4_moe_wformat f);
/* One expert: gate_up [2I, H] + down [H, I]. */
double fp4_moe_expert_bytes(const fp4_moe_dims *d, fp4_moe_wformat f);
/* The weights a layer must read: only experts with >= 1 pair, active * expert. */
double fp4_moe_weight_bytes(const fp4_moe_plan *p, const fp4_moe_dims *d, fp4_moe_wformat f);
/* 2*pairs*(2I*H) + 2*pairs*(H*I): both grouped GEMMs. */
double fp4_moe_flops(const fp4_moe_plan *p, const fp4_moe_dims *d);

/* ---- weights --------------------------------------------------------------------- */

/* The layer's expert weights: arrays of E matrices. fp4_moe_weights_init
 * allocates the arrays with empty matrices (no buffers) for the caller to fill
 * (fp4_quantize_*, a reader, ...); fp4_moe_weights_free frees every matrix and
 * the arrays. Each matrix keeps its own global scale: expert e's GEMM alpha is
 * A.global_scale * W[e].global_scale. */
typedef struct fp4_moe_weights {
    int experts;
    fp4_matrix *gate_up; /* [E]: [2I, H] */
    fp4_matrix *down;    /* [E]: [H, I] */
} fp4_moe_weights;

fp4_status fp4_moe_weights_init(fp4_moe_weights *w, int experts, fp4_err *err);
void fp4_moe_weights_free(fp4_moe_weights *w);
/* Every matrix present with the shape d says. */
fp4_status fp4_moe_weights_check(const fp4_moe_dims *d, const fp4_moe_weights *w, fp4_err *err);

/* ---- exact references ------------------------------------------------------------
 * Outputs are in pair order: row p = t*k + j, [T*k, N] fp32 (not grouped order:
 * grouped row r of a kernel's output is row pair_index[r] here). threads <= 0:
 * one per online core. */

/* Which activation row a pair reads. */
typedef enum fp4_moe_a_rows {
    FP4_MOE_A_PER_TOKEN = 0, /* A is [T, K]; pair p reads row p / k (gate_up) */
    FP4_MOE_A_PER_PAIR = 1   /* A is [T*k, K]; pair p reads row p (down) */
} fp4_moe_a_rows;

/* W4A4: d[p, n] = alpha_e * A[row(p)] . B[e][n], e = the pair's expert, b the
 * plan->experts weights (all [N, K], present even when idle), alpha_e =
 * a->global_scale * b[e].global_scale (a float product, as fp4_gemm_problem's
 * alpha). Each expert's rows are gathered
 * and multiplied by fp4_gemm_reference, so the result is bit-identical to it
 * (exact dot product; roundings: to double, times alpha, to fp32). */
fp4_status fp4_moe_grouped_ref_w4a4(const fp4_matrix *a, fp4_moe_a_rows a_rows, const fp4_matrix *b,
                                    const fp4_moe_plan *plan, float *d, int threads, fp4_err *err);

/* W4A16: a_bf16 [rows, K] bf16 activations times the dequantized NVFP4 B:
 *   d[p, n] = fp32( gs_e * sum_k bf16(A[row(p), k]) * e2m1(B) * e4m3(scale) )
 * computed exactly: every term is an integer times a power of two, accumulated
 * in a fixed-point accumulator wide enough for the whole bf16 range, then
 * multiplied by the global scale gs_e and rounded ONCE to fp32 (nearest even,
 * subnormals and overflow to inf included). No double sum, so no input order or
 * dynamic range changes the result. Inf/NaN activations are refused. */
fp4_status fp4_moe_grouped_ref_w4a16(const uint16_t *a_bf16, int64_t a_rows_count, int64_t k,
                                     fp4_moe_a_rows a_rows, const fp4_matrix *b,
                                     const fp4_moe_plan *plan, float *d, int threads, fp4_err *err);

/* out[t, n] = fp32( sum_j (double)w[t, j] * (double)d[t*k + j, n] ), j = 0..k-1 in
 * order: each product is exact in double, the sum of k terms rounds in double
 * (about 2^-53 relative), then one rounding to fp32. d [T*k, n], out [T, n]. */
fp4_status fp4_moe_combine(const float *d, int64_t n, const fp4_moe_routing *r, float *out,
                           fp4_err *err);

/* ---- the whole layer --------------------------------------------------------------- */

typedef enum fp4_moe_mode {
    FP4_MOE_W4A4 = 0, /* x and h quantized to NVFP4, NVFP4 x NVFP4 GEMMs */
    FP4_MOE_W4A16 = 1 /* bf16 x and h, bf16 x NVFP4 GEMMs */
} fp4_moe_mode;

const char *fp4_moe_mode_name(fp4_moe_mode m); /* "w4a4" / "w4a16"; NULL out of range */

typedef struct fp4_moe_layer_opts {
    fp4_moe_mode mode;
    /* W4A4 encode scales (a checkpoint's 1 / input_scale): x is quantized with
     * x_encode_scale, h with h_encode_scale, one scale for the whole tensor (h:
     * all T*k rows, every expert). <= 0: dynamic, 2688 / amax over the tensor,
     * which a GPU pipeline can only match after a reduction over all of h; a
     * benchmark should run the reference once dynamic and pass the scales it
     * used (fp4_moe_layer_out) as static ones. Ignored in W4A16. */
    float x_encode_scale;
    float h_encode_scale;
    int threads; /* <= 0: one per online core */
} fp4_moe_layer_opts;

/* What the layer reference writes. out is required; the others are optional
 * (NULL: not kept), all in pair order. */
typedef struct fp4_moe_layer_out {
    float *out; /* [T, H] the layer's output */
    float *y;   /* [T*k, 2I] gate_up's output */
    float *h;   /* [T*k, I] the activation's output, before W4A4 quantization or bf16 rounding */
    float *d;   /* [T*k, H] down's output, before the routing weights */
    /* Set by the call (W4A4): the encode scales used (static or dynamic); 0 in W4A16. */
    float x_encode_scale_used;
    float h_encode_scale_used;
} fp4_moe_layer_out;

/* The layer, deterministically, with these rounding points (docs/MOE.md):
 *   W4A4:  xq = quantize_bf16(x, x scale); y = grouped W4A4 (exact, fp32);
 *          h = act(y) (double, one rounding to fp32); hq = quantize_f32(h, h scale);
 *          d = grouped W4A4 (exact, fp32); out = combine(d) (double, fp32).
 *   W4A16: y = grouped W4A16 of x (exact, one rounding); h = act(y); h16 = bf16(h)
 *          (nearest even); d = grouped W4A16 of h16; out = combine(d).
 * x is bf16 [T, H] with T = r->tokens; r's E and k must be d's. */
fp4_status fp4_moe_layer_ref(const fp4_moe_dims *dims, const fp4_moe_weights *w,
                             const uint16_t *x_bf16, const fp4_moe_routing *r,
                             const fp4_moe_layer_opts *o, fp4_moe_layer_out *io, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
