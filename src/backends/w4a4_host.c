/* Host side of the W4A4 backends (see w4a4_host.h). */
#include "backends/w4a4_host.h"

#include <math.h>

fp4_status fp4_w4a4_activations(const fp4_matrix *a, uint16_t *x, float *encode_scale,
                                fp4_err *err)
{
    if (!a || !a->codes || !a->scales || !x || !encode_scale)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "w4a4 activations: NULL argument");
    const float g = a->global_scale, gs = 1.0f / g;
    if (!(g > 0.0f) || !isfinite(g) || !isfinite(gs))
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "w4a4 activations: A's global scale %g has no finite positive inverse",
                        (double)g);
    const int64_t kb = a->cols / FP4_BLOCK;
    for (int64_t r = 0; r < a->rows; r++) {
        const uint8_t *codes = a->codes + (size_t)r * (size_t)(a->cols / 2);
        const uint8_t *scales = a->scales + (size_t)r * (size_t)kb;
        uint16_t *row = x + (size_t)r * (size_t)a->cols;
        for (int64_t c = 0; c < a->cols; c++) {
            const uint8_t byte = codes[c / 2];
            const uint8_t code = (c & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 15);
            /* e2m1 * e4m3 is exact in float; the product with g rounds once */
            const float v = fp4_e2m1_decode(code) * fp4_e4m3_decode(scales[c / FP4_BLOCK]) * g;
            row[c] = fp4_bf16_from_float(v);
        }
    }
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
