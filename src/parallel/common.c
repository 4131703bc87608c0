/* Helpers shared by the sharded references (parallel/par_common.h). */
#include "parallel/par_common.h"

#include <math.h>
#include <stdlib.h>

#include "fp4/format.h"

fp4_status fp4_par_check_layer(const char *who, const fp4_moe_dims *dims, const fp4_moe_weights *w,
                               const uint16_t *x_bf16, const fp4_moe_routing *r,
                               const fp4_moe_layer_opts *o, const fp4_moe_layer_out *io,
                               fp4_err *err)
{
    fp4_status st;
    if (!dims || !w || !x_bf16 || !r || !o || !io || !io->out)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: NULL argument", who);
    if (!fp4_moe_mode_name(o->mode))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: unknown mode %d", who, (int)o->mode);
    if ((st = fp4_moe_weights_check(dims, w, err)) != FP4_OK) return st;
    if ((st = fp4_moe_routing_check(r, err)) != FP4_OK) return st;
    if (r->experts != dims->experts || r->top_k != dims->top_k)
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "%s: the routing has %d experts, top-k %d; the layer %d, top-k %d", who,
                        r->experts, r->top_k, dims->experts, dims->top_k);
    return FP4_OK;
}

fp4_status fp4_par_alloc(void **out, int64_t rows, int64_t cols, size_t elem, const char *who,
                         const char *what, fp4_err *err)
{
    size_t bytes;
    *out = NULL;
    if (rows < 0 || cols < 0 || fp4_size_mul3((size_t)rows, (size_t)cols, elem, &bytes))
        return fp4_fail(err, FP4_ERR_OVERFLOW, "%s: %s of %lldx%lld overflows", who, what,
                        (long long)rows, (long long)cols);
    *out = malloc(bytes ? bytes : 1);
    if (!*out)
        return fp4_fail(err, FP4_ERR_NOMEM, "%s: no memory for %s (%lldx%lld)", who, what,
                        (long long)rows, (long long)cols);
    return FP4_OK;
}

fp4_status fp4_par_bf16_amax(const uint16_t *x, int64_t rows, int64_t cols, int64_t first_row,
                             const char *who, float *amax, fp4_err *err)
{
    float m = 0.0f;
    for (int64_t i = 0; i < rows * cols; i++) {
        const float v = fp4_bf16_to_float(x[i]);
        if (!isfinite(v))
            return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: x (%lld, %lld) is %s", who,
                            (long long)(first_row + i / cols), (long long)(i % cols),
                            isnan(v) ? "NaN" : "infinite");
        m = fmaxf(m, fabsf(v));
    }
    *amax = m;
    return FP4_OK;
}

fp4_status fp4_par_f32_amax(const float *h, int64_t rows, int64_t cols, const char *who,
                            float *amax, fp4_err *err)
{
    float m = 0.0f;
    for (int64_t i = 0; i < rows * cols; i++) {
        if (!isfinite(h[i]))
            return fp4_fail(err, FP4_ERR_INVALID_ARG,
                            "%s: an activation is %s (gate_up overflowed fp32?)", who,
                            isnan(h[i]) ? "NaN" : "infinite");
        m = fmaxf(m, fabsf(h[i]));
    }
    *amax = m;
    return FP4_OK;
}

float fp4_par_encode_scale(float given, float global_amax)
{
    return given > 0.0f ? given : fp4_global_encode_scale(global_amax);
}

fp4_status fp4_par_stage_fail(fp4_err *err, const char *who, const char *stage, int rank,
                              const fp4_err *inner)
{
    return fp4_fail(err, inner->status, "%s, %s on rank %d: %s", who, stage, rank,
                    fp4_err_text(inner));
}
