/* Host side of the W4A4 backends (see w4a4_host.h). */
#include "backends/w4a4_host.h"

#include <math.h>

fp4_status fp4_w4a4_copy_activations(const fp4_gemm_problem *p, int copy, uint16_t *x,
                                     float *encode_scale, fp4_err *err)
{
    if (!p || !p->a || !x || !encode_scale)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "w4a4 activations: NULL argument");
    if (!p->a_bf16)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "needs the bf16 activations A was quantized from (A came without them)");
    const float g = p->a->global_scale, gs = 1.0f / g;
    if (!(g > 0.0f) || !isfinite(g) || !isfinite(gs))
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "w4a4 activations: A's global scale %g has no finite positive inverse",
                        (double)g);
    const size_t n = (size_t)p->shape.m * (size_t)p->shape.k;
    const uint16_t flip = fp4_problem_sign(p, copy) < 0 ? 0x8000u : 0u;
    for (size_t i = 0; i < n; i++) x[i] = (uint16_t)(p->a_bf16[i] ^ flip);
    *encode_scale = gs;
    return FP4_OK;
}

size_t fp4_w4a4_count_diff(const uint8_t *p, const uint8_t *q, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += p[i] != q[i];
    return d;
}

double fp4_w4a4_quantize_bytes(const fp4_shape *s)
{
    const double m = (double)s->m, k = (double)s->k;
    return 2.0 * m * k + m * k / 2.0 + (double)fp4_swizzled_size(s->m, s->k);
}

double fp4_w4a4_step_bytes(const fp4_shape *s)
{
    const double m = (double)s->m, n = (double)s->n, k = (double)s->k;
    const double a_nvfp4 = m * k / 2.0 + (double)fp4_swizzled_size(s->m, s->k);
    const double b_nvfp4 = n * k / 2.0 + (double)fp4_swizzled_size(s->n, s->k);
    return 2.0 * m * k + 2.0 * a_nvfp4 + b_nvfp4 + 2.0 * m * n;
}
