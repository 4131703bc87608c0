/* The MoE layer reference: activation, weighted combine, and the whole layer
 * from bf16 x to fp32 out (fp4/moe.h, docs/MOE.md "Rounding points"). */
#include "fp4/moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* gpt-oss's clamped SwiGLU, as its reference implementation writes it
 * (openai/gpt-oss, gpt_oss/torch/model.py, swiglu(): x_glu clamped to
 * max=limit, x_linear to [-limit, limit], out_glu = x_glu * sigmoid(alpha *
 * x_glu), result out_glu * (x_linear + 1); alpha 1.702, limit 7.0). vLLM's
 * swigluoai_and_mul kernel computes the same with float alpha and limit. That
 * implementation reads gate and up interleaved (x[..., ::2], x[..., 1::2]);
 * fp4bench keeps them as halves (fp4_moe_row_from_interleaved). */
float fp4_moe_activation(fp4_moe_act act, float gate, float up)
{
    double g = gate, u = up;
    switch (act) {
    case FP4_MOE_ACT_SILU: return (float)(g / (1.0 + exp(-g)) * u);
    case FP4_MOE_ACT_SWIGLU_OAI: {
        const double alpha = (double)FP4_MOE_SWIGLU_ALPHA, limit = (double)FP4_MOE_SWIGLU_LIMIT;
        g = g > limit ? limit : g;
        u = u > limit ? limit : (u < -limit ? -limit : u);
        return (float)(g / (1.0 + exp(-alpha * g)) * (u + 1.0));
    }
    }
    return NAN; /* an unknown activation: a result no check accepts */
}

fp4_status fp4_moe_combine(const float *d, int64_t n, const fp4_moe_routing *r, float *out,
                           fp4_err *err)
{
    if (!d || !out || !r) return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe combine: NULL argument");
    if (n < 1) return fp4_fail(err, FP4_ERR_SHAPE, "moe combine: %lld columns", (long long)n);
    fp4_status st = fp4_moe_routing_check(r, err);
    if (st != FP4_OK) return st;
    const int k = r->top_k;
    for (int64_t t = 0; t < r->tokens; t++)
        for (int64_t c = 0; c < n; c++) {
            double acc = 0.0;
            for (int j = 0; j < k; j++)
                acc += (double)r->weights[t * k + j] *
                       (double)d[(size_t)(t * k + j) * (size_t)n + (size_t)c];
            out[(size_t)t * (size_t)n + (size_t)c] = (float)acc;
        }
    return FP4_OK;
}

/* A float buffer of rows * cols, or the caller's. */
static fp4_status buffer(float *given, int64_t rows, int64_t cols, float **use, float **owned,
                         const char *what, fp4_err *err)
{
    size_t bytes;
    *owned = NULL;
    if (given) {
        *use = given;
        return FP4_OK;
    }
    if (fp4_size_mul3((size_t)rows, (size_t)cols, sizeof(float), &bytes))
        return fp4_fail(err, FP4_ERR_OVERFLOW, "MoE layer: %s of %lldx%lld floats overflows", what,
                        (long long)rows, (long long)cols);
    *owned = malloc(bytes);
    if (!*owned)
        return fp4_fail(err, FP4_ERR_NOMEM, "MoE layer: no memory for %s (%lldx%lld floats)", what,
                        (long long)rows, (long long)cols);
    *use = *owned;
    return FP4_OK;
}

/* The encode scale to quantize with: the static one, or 2688 / amax. */
static float encode_scale_of(float given, const float *x, size_t count)
{
    float amax = 0.0f;
    if (given > 0.0f) return given;
    for (size_t i = 0; i < count; i++) amax = fmaxf(amax, fabsf(x[i]));
    return fp4_global_encode_scale(amax);
}

/* Re-label an inner failure with the stage it happened in. */
static fp4_status stage_fail(fp4_err *err, const char *stage, const fp4_err *inner)
{
    return fp4_fail(err, inner->status, "MoE layer, %s: %s", stage, fp4_err_text(inner));
}

fp4_status fp4_moe_layer_ref(const fp4_moe_dims *dims, const fp4_moe_weights *w,
                             const uint16_t *x_bf16, const fp4_moe_routing *r,
                             const fp4_moe_layer_opts *o, fp4_moe_layer_out *io, fp4_err *err)
{
    fp4_status st;
    fp4_err inner;
    fp4_moe_plan plan = {0};
    fp4_matrix xq = {0}, hq = {0};
    float *y = NULL, *h = NULL, *d = NULL, *y_own = NULL, *h_own = NULL, *d_own = NULL,
          *x_f32 = NULL;
    uint16_t *h16 = NULL;
    fp4_err_clear(&inner);
    if (!dims || !w || !x_bf16 || !r || !o || !io || !io->out)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE layer: NULL argument");
    if (!fp4_moe_mode_name(o->mode))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE layer: unknown mode %d", (int)o->mode);
    if ((st = fp4_moe_weights_check(dims, w, err)) != FP4_OK) return st;
    if ((st = fp4_moe_plan_build(r, &plan, err)) != FP4_OK) return st;
    if (r->experts != dims->experts || r->top_k != dims->top_k) {
        st = fp4_fail(err, FP4_ERR_INVALID_ARG,
                      "MoE layer: the routing has %d experts, top-k %d; the layer %d, top-k %d",
                      r->experts, r->top_k, dims->experts, dims->top_k);
        goto out;
    }
    const int64_t tokens = r->tokens, pairs = plan.pairs, hid = dims->hidden, inter = dims->inter;
    io->x_encode_scale_used = 0.0f;
    io->h_encode_scale_used = 0.0f;
    if ((st = buffer(io->y, pairs, 2 * inter, &y, &y_own, "gate_up's output", err)) != FP4_OK ||
        (st = buffer(io->h, pairs, inter, &h, &h_own, "the activation", err)) != FP4_OK ||
        (st = buffer(io->d, pairs, hid, &d, &d_own, "down's output", err)) != FP4_OK)
        goto out;

    /* gate_up: y = x . W_gu[e]^T per pair */
    if (o->mode == FP4_MOE_W4A4) {
        float *x_use;
        if ((st = buffer(NULL, tokens, hid, &x_use, &x_f32, "x as floats", err)) != FP4_OK)
            goto out;
        for (size_t i = 0; i < (size_t)tokens * (size_t)hid; i++)
            x_f32[i] = fp4_bf16_to_float(x_bf16[i]);
        for (size_t i = 0; i < (size_t)tokens * (size_t)hid; i++)
            if (!isfinite(x_f32[i])) {
                st = fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE layer: x (%lld, %lld) is %s",
                              (long long)(i / (size_t)hid), (long long)(i % (size_t)hid),
                              isnan(x_f32[i]) ? "NaN" : "infinite");
                goto out;
            }
        const float gs_x = encode_scale_of(o->x_encode_scale, x_f32, (size_t)tokens * (size_t)hid);
        if ((st = fp4_quantize_bf16(x_bf16, tokens, hid, gs_x, &xq, &inner)) != FP4_OK ||
            (st = fp4_moe_grouped_ref_w4a4(&xq, FP4_MOE_A_PER_TOKEN, w->gate_up, &plan, y,
                                           o->threads, &inner)) != FP4_OK) {
            st = stage_fail(err, "gate_up", &inner);
            goto out;
        }
        io->x_encode_scale_used = gs_x;
    } else if ((st = fp4_moe_grouped_ref_w4a16(x_bf16, tokens, hid, FP4_MOE_A_PER_TOKEN, w->gate_up,
                                               &plan, y, o->threads, &inner)) != FP4_OK) {
        st = stage_fail(err, "gate_up", &inner);
        goto out;
    }

    /* activation: gate is y's first half, up its second */
    for (int64_t p = 0; p < pairs; p++) {
        const float *yp = y + (size_t)p * (size_t)(2 * inter);
        float *hp = h + (size_t)p * (size_t)inter;
        for (int64_t i = 0; i < inter; i++)
            hp[i] = fp4_moe_activation(dims->act, yp[i], yp[inter + i]);
    }

    /* down: d = h . W_d[e]^T per pair, h as the mode's activations */
    if (o->mode == FP4_MOE_W4A4) {
        for (size_t i = 0; i < (size_t)pairs * (size_t)inter; i++)
            if (!isfinite(h[i])) {
                st = fp4_fail(err, FP4_ERR_INVALID_ARG,
                              "MoE layer: the activation of pair %lld, column %lld is %s (gate_up "
                              "overflowed fp32?)",
                              (long long)(i / (size_t)inter), (long long)(i % (size_t)inter),
                              isnan(h[i]) ? "NaN" : "infinite");
                goto out;
            }
        const float gs_h = encode_scale_of(o->h_encode_scale, h, (size_t)pairs * (size_t)inter);
        if ((st = fp4_quantize_f32(h, pairs, inter, gs_h, &hq, &inner)) != FP4_OK ||
            (st = fp4_moe_grouped_ref_w4a4(&hq, FP4_MOE_A_PER_PAIR, w->down, &plan, d, o->threads,
                                           &inner)) != FP4_OK) {
            st = stage_fail(err, "down", &inner);
            goto out;
        }
        io->h_encode_scale_used = gs_h;
    } else {
        h16 = malloc((size_t)pairs * (size_t)inter * sizeof *h16);
        if (!h16) {
            st = fp4_fail(err, FP4_ERR_NOMEM, "MoE layer: no memory for h in bf16");
            goto out;
        }
        for (size_t i = 0; i < (size_t)pairs * (size_t)inter; i++)
            h16[i] = fp4_bf16_from_float(h[i]);
        if ((st = fp4_moe_grouped_ref_w4a16(h16, pairs, inter, FP4_MOE_A_PER_PAIR, w->down, &plan,
                                            d, o->threads, &inner)) != FP4_OK) {
            st = stage_fail(err, "down", &inner);
            goto out;
        }
    }

    /* combine: out[t] = sum_j w[t, j] * d[t*k + j] */
    st = fp4_moe_combine(d, hid, r, io->out, err);
out:
    fp4_moe_plan_free(&plan);
    fp4_matrix_free(&xq);
    fp4_matrix_free(&hq);
    free(y_own);
    free(h_own);
    free(d_own);
    free(x_f32);
    free(h16);
    return st;
}
