/* MoE model presets, the layer's sizes, names of the enums, the bytes and flops
 * model, and the expert weights' container (fp4/moe.h). */
#include "fp4/moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* CONTEXT.md section 6, with layer counts and routers checked against each
 * model's config.json / model card (H = hidden_size, I = moe_intermediate_size):
 * GLM-5: 78 layers, first_k_dense_replace 3 (75 MoE); DeepSeek-V3: 61 layers,
 * first_k_dense_replace 3; Kimi-K2: 61 layers, 1 dense; Qwen3-235B-A22B: 94
 * layers, all MoE; Qwen3-30B-A3B: 48, all MoE; Mixtral-8x7B: 32, all MoE;
 * Llama-4-Maverick: 48 layers, MoE every second one (interleave_moe_layer_step
 * 2); gpt-oss-120b: 36 layers, all MoE (openai/gpt-oss ModelConfig). */
static const fp4_moe_preset moe_presets[] = {
    {"glm5", "GLM-5", 6144, 2048, 256, 8, 1, FP4_MOE_ACT_SILU, 78, 75,
     "DeepSeek-V3-style router: sigmoid scores with a correction bias, top-8 renormalised"},
    {"deepseek-v3", "DeepSeek-V3", 7168, 2048, 256, 8, 1, FP4_MOE_ACT_SILU, 61, 58,
     "sigmoid router, group-limited top-8 (4 of 8 groups), renormalised, scaled by 2.5"},
    {"kimi-k2", "Kimi-K2", 7168, 2048, 384, 8, 1, FP4_MOE_ACT_SILU, 61, 60,
     "DeepSeek-V3 architecture with 384 experts and one dense layer"},
    {"qwen3-235b", "Qwen3-235B-A22B", 4096, 1536, 128, 8, 0, FP4_MOE_ACT_SILU, 94, 94,
     "softmax router, top-8 renormalised (norm_topk_prob)"},
    {"qwen3-30b", "Qwen3-30B-A3B", 2048, 768, 128, 8, 0, FP4_MOE_ACT_SILU, 48, 48,
     "softmax router, top-8 renormalised (norm_topk_prob)"},
    {"mixtral", "Mixtral-8x7B", 4096, 14336, 8, 2, 0, FP4_MOE_ACT_SILU, 32, 32,
     "softmax over the top-2 logits"},
    {"llama4-maverick", "Llama-4-Maverick", 5120, 8192, 128, 1, 1, FP4_MOE_ACT_SILU, 48, 24,
     "top-1; the sigmoid router score scales the expert's input, not its output"},
    {"gpt-oss-120b", "gpt-oss-120b", 2880, 2880, 128, 4, 0, FP4_MOE_ACT_SWIGLU_OAI, 36, 36,
     "K=2880 is not a multiple of 128; clamped SwiGLU; checkpoints interleave gate/up rows "
     "and add biases (not modelled); softmax over the top-4 logits"},
};

int fp4_moe_preset_count(void)
{
    return (int)(sizeof moe_presets / sizeof moe_presets[0]);
}

const fp4_moe_preset *fp4_moe_preset_at(int i)
{
    return (i >= 0 && i < fp4_moe_preset_count()) ? &moe_presets[i] : NULL;
}

const fp4_moe_preset *fp4_moe_preset_find(const char *name)
{
    if (!name) return NULL;
    for (int i = 0; i < fp4_moe_preset_count(); i++)
        if (strcasecmp(moe_presets[i].name, name) == 0 ||
            strcasecmp(moe_presets[i].model, name) == 0)
            return &moe_presets[i];
    return NULL;
}

fp4_status fp4_moe_preset_lookup(const char *name, const fp4_moe_preset **out, fp4_err *err)
{
    char names[512] = "";
    if (!out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe preset lookup: NULL argument");
    *out = fp4_moe_preset_find(name);
    if (*out) return FP4_OK;
    for (int i = 0; i < fp4_moe_preset_count(); i++) {
        strncat(names, moe_presets[i].name, sizeof names - strlen(names) - 1);
        if (i + 1 < fp4_moe_preset_count()) strncat(names, ", ", sizeof names - strlen(names) - 1);
    }
    return fp4_fail(err, FP4_ERR_NOT_FOUND, "unknown MoE model '%s' (known: %s)",
                    name ? name : "(null)", names);
}

fp4_status fp4_moe_dims_check(const fp4_moe_dims *d, fp4_err *err)
{
    if (!d) return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe dims: NULL argument");
    const int64_t sizes[2] = {d->hidden, d->inter};
    const char *what[2] = {"hidden size H", "expert intermediate I"};
    for (int i = 0; i < 2; i++) {
        if (sizes[i] < 16 || sizes[i] % FP4_BLOCK != 0)
            return fp4_fail(err, FP4_ERR_SHAPE, "MoE %s = %lld: must be a positive multiple of 16",
                            what[i], (long long)sizes[i]);
        if (sizes[i] > FP4_MOE_MAX_K)
            return fp4_fail(err, FP4_ERR_SHAPE,
                            "MoE %s = %lld: above 2^20, the exact references' limit", what[i],
                            (long long)sizes[i]);
    }
    if (d->experts < 1 || d->experts > FP4_MOE_MAX_EXPERTS)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE experts = %d: must be 1..%d", d->experts,
                        FP4_MOE_MAX_EXPERTS);
    if (d->top_k < 1 || d->top_k > d->experts)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE top-k = %d: must be 1..%d (the experts)",
                        d->top_k, d->experts);
    if (!fp4_moe_act_name(d->act))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE activation %d is unknown", (int)d->act);
    return FP4_OK;
}

fp4_status fp4_moe_preset_dims(const fp4_moe_preset *p, int tp, fp4_moe_dims *out, fp4_err *err)
{
    if (!p || !out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe preset dims: NULL argument");
    if (tp < 1)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "tensor parallelism %d: must be >= 1", tp);
    if (p->inter % tp != 0 || (p->inter / tp) % FP4_BLOCK != 0)
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "%s: I=%lld split over %d ranks is not a whole multiple of 16 per rank",
                        p->name, (long long)p->inter, tp);
    out->hidden = p->hidden;
    out->inter = p->inter / tp;
    out->experts = p->experts;
    out->top_k = p->top_k;
    out->act = p->act;
    return fp4_moe_dims_check(out, err);
}

/* ---- names -------------------------------------------------------------------- */

const char *fp4_moe_act_name(fp4_moe_act act)
{
    switch (act) {
    case FP4_MOE_ACT_SILU: return "silu";
    case FP4_MOE_ACT_SWIGLU_OAI: return "swiglu-oai";
    }
    return NULL;
}

fp4_status fp4_moe_act_parse(const char *name, fp4_moe_act *out, fp4_err *err)
{
    static const fp4_moe_act all[] = {FP4_MOE_ACT_SILU, FP4_MOE_ACT_SWIGLU_OAI};
    if (!name || !out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe activation: NULL argument");
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(fp4_moe_act_name(all[i]), name) == 0) {
            *out = all[i];
            return FP4_OK;
        }
    return fp4_fail(err, FP4_ERR_INVALID_ARG, "unknown activation '%s' (known: silu, swiglu-oai)",
                    name);
}

const char *fp4_moe_mode_name(fp4_moe_mode m)
{
    switch (m) {
    case FP4_MOE_W4A4: return "w4a4";
    case FP4_MOE_W4A16: return "w4a16";
    }
    return NULL;
}

/* ---- bytes and flops ------------------------------------------------------------ */

double fp4_moe_matrix_bytes(int64_t n, int64_t k, fp4_moe_wformat f)
{
    const double nk = (double)n * (double)k;
    switch (f) {
    case FP4_MOE_WEIGHTS_NVFP4: return nk / 2.0 + (double)fp4_swizzled_size(n, k) + 4.0;
    case FP4_MOE_WEIGHTS_FP8: return nk + 4.0;
    case FP4_MOE_WEIGHTS_BF16: return 2.0 * nk;
    }
    return 0.0;
}

double fp4_moe_expert_bytes(const fp4_moe_dims *d, fp4_moe_wformat f)
{
    return fp4_moe_matrix_bytes(2 * d->inter, d->hidden, f) +
           fp4_moe_matrix_bytes(d->hidden, d->inter, f);
}

double fp4_moe_weight_bytes(const fp4_moe_plan *p, const fp4_moe_dims *d, fp4_moe_wformat f)
{
    return (double)p->stats.active_experts * fp4_moe_expert_bytes(d, f);
}

double fp4_moe_flops(const fp4_moe_plan *p, const fp4_moe_dims *d)
{
    const double pairs = (double)p->pairs, h = (double)d->hidden, i = (double)d->inter;
    return 2.0 * pairs * (2.0 * i) * h + 2.0 * pairs * h * i;
}

/* ---- weights ---------------------------------------------------------------------- */

fp4_status fp4_moe_weights_init(fp4_moe_weights *w, int experts, fp4_err *err)
{
    if (!w) return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe weights: NULL argument");
    memset(w, 0, sizeof *w);
    if (experts < 1 || experts > FP4_MOE_MAX_EXPERTS)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE experts = %d: must be 1..%d", experts,
                        FP4_MOE_MAX_EXPERTS);
    w->gate_up = calloc((size_t)experts, sizeof *w->gate_up);
    w->down = calloc((size_t)experts, sizeof *w->down);
    if (!w->gate_up || !w->down) {
        free(w->gate_up);
        free(w->down);
        memset(w, 0, sizeof *w);
        return fp4_fail(err, FP4_ERR_NOMEM, "no memory for %d experts' weights", experts);
    }
    w->experts = experts;
    return FP4_OK;
}

void fp4_moe_weights_free(fp4_moe_weights *w)
{
    if (!w) return;
    for (int e = 0; e < w->experts; e++) {
        if (w->gate_up) fp4_matrix_free(&w->gate_up[e]);
        if (w->down) fp4_matrix_free(&w->down[e]);
    }
    free(w->gate_up);
    free(w->down);
    memset(w, 0, sizeof *w);
}

/* One expert matrix: present, [rows, cols], with a usable global scale. */
static fp4_status check_expert_matrix(const fp4_matrix *m, const char *what, int e, int64_t rows,
                                      int64_t cols, fp4_err *err)
{
    if (!m->codes || !m->scales)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "expert %d's %s weight is missing", e, what);
    if (m->rows != rows || m->cols != cols)
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "expert %d's %s weight is %lldx%lld, expected %lldx%lld", e, what,
                        (long long)m->rows, (long long)m->cols, (long long)rows, (long long)cols);
    if (!(m->global_scale > 0.0f) || !isfinite(m->global_scale))
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "expert %d's %s weight has global scale %g: not positive and finite", e,
                        what, (double)m->global_scale);
    return FP4_OK;
}

fp4_status fp4_moe_weights_check(const fp4_moe_dims *d, const fp4_moe_weights *w, fp4_err *err)
{
    fp4_status st = fp4_moe_dims_check(d, err);
    if (st != FP4_OK) return st;
    if (!w || !w->gate_up || !w->down)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe weights: NULL argument");
    if (w->experts != d->experts)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "the weights hold %d experts, the layer has %d",
                        w->experts, d->experts);
    for (int e = 0; e < d->experts; e++) {
        st = check_expert_matrix(&w->gate_up[e], "gate_up", e, 2 * d->inter, d->hidden, err);
        if (st == FP4_OK)
            st = check_expert_matrix(&w->down[e], "down", e, d->hidden, d->inter, err);
        if (st != FP4_OK) return st;
    }
    return FP4_OK;
}
