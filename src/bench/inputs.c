/* Reproducible operands: the same seed gives the same bytes on every machine
 * (integer generator, and only correctly rounded float operations). */
#include "bench/inputs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void fp4_rng_seed(fp4_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t fp4_rng_next(fp4_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double fp4_rng_uniform(fp4_rng *r)
{
    return (double)(fp4_rng_next(r) >> 11) * 0x1p-53;
}

/* Box-Muller; log/cos results may differ in the last bit between libm
 * versions, but the bf16 rounding that follows hides that in all but rare
 * cases. The test suite only relies on determinism within one machine. */
float fp4_rng_normal(fp4_rng *r)
{
    double u1 = 1.0 - fp4_rng_uniform(r), u2 = fp4_rng_uniform(r);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static fp4_status make_codes(int64_t rows, int64_t cols, fp4_rng *rng, fp4_matrix *out,
                             fp4_err *err)
{
    fp4_status st = fp4_matrix_alloc(out, rows, cols, err);
    if (st != FP4_OK) return st;
    size_t ncodes = (size_t)rows * (size_t)(cols / 2), nscales = (size_t)rows * (size_t)(cols / 16);
    for (size_t i = 0; i < ncodes; i += 8) {
        uint64_t v = fp4_rng_next(rng);
        for (size_t j = 0; j < 8 && i + j < ncodes; j++) out->codes[i + j] = (uint8_t)(v >> (8 * j));
    }
    for (size_t i = 0; i < nscales; i++)
        out->scales[i] = (uint8_t)(1 + fp4_rng_next(rng) % 0x7E); /* 0x01..0x7E: no NaN */
    out->global_scale = 1.0f / 2688.0f;
    return FP4_OK;
}

/* The bf16 values of an operand of `kind` (not codes): normal data, with
 * heavy-tailed outlier channels, or with every block of 16 scaled by its own
 * power of two over five decades (wide). */
static void make_values(fp4_data_kind kind, int64_t rows, int64_t cols, fp4_rng *rng, uint16_t *x)
{
    for (int64_t r = 0; r < rows; r++) {
        float block_scale = 1.0f;
        for (int64_t c = 0; c < cols; c++) {
            float v = fp4_rng_normal(rng);
            if (kind == FP4_DATA_OUTLIERS) {
                /* Student-t with 3 d.o.f.: normal / sqrt(chi2_3 / 3) */
                float a = fp4_rng_normal(rng), b = fp4_rng_normal(rng), d = fp4_rng_normal(rng);
                float chi = (a * a + b * b + d * d) / 3.0f;
                v = v / sqrtf(chi > 1e-6f ? chi : 1e-6f);
                if (c % 32 == 7) v *= 30.0f;
            } else if (kind == FP4_DATA_WIDE) {
                /* 2^-16 .. 2^0: the smallest blocks get E4M3 subnormal scales
                 * (below 2^-6 of 448) next to blocks at full range */
                if (c % FP4_BLOCK == 0) block_scale = ldexpf(1.0f, -(int)(fp4_rng_next(rng) % 17));
                v *= block_scale;
            }
            x[(size_t)r * (size_t)cols + (size_t)c] = fp4_bf16_from_float(v);
        }
    }
}

fp4_status fp4_make_activations(fp4_data_kind kind, int64_t rows, int64_t cols, uint64_t seed,
                                uint16_t **x_out, fp4_matrix *out, fp4_err *err)
{
    fp4_rng rng;
    if (!out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "make operand: NULL output");
    fp4_status st = fp4_check_dims(rows, cols, err);
    memset(out, 0, sizeof *out);
    if (x_out) *x_out = NULL;
    if (st != FP4_OK) return st;
    if (kind < FP4_DATA_GAUSSIAN || kind > FP4_DATA_WIDE) /* not silently gaussian */
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "make operand: unknown data kind %d", (int)kind);
    size_t n = (size_t)rows * (size_t)cols;
    uint16_t *x = malloc(n * sizeof *x);
    if (!x) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for a %lldx%lld operand",
                            (long long)rows, (long long)cols);
    fp4_rng_seed(&rng, seed);
    if (kind == FP4_DATA_CODES) {
        /* random codes are the operand; their bf16 values are the input a
         * quantizing backend starts from (quantized again, they differ) */
        st = make_codes(rows, cols, &rng, out, err);
        if (st == FP4_OK) st = fp4_dequantize_bf16(out, x, err);
    } else {
        make_values(kind, rows, cols, &rng, x);
        st = fp4_quantize_bf16(x, rows, cols, 0.0f, out, err);
    }
    if (st != FP4_OK || !x_out) {
        if (st != FP4_OK) fp4_matrix_free(out);
        free(x);
        return st;
    }
    *x_out = x;
    return FP4_OK;
}

fp4_status fp4_make_operand(fp4_data_kind kind, int64_t rows, int64_t cols, uint64_t seed,
                            fp4_matrix *out, fp4_err *err)
{
    return fp4_make_activations(kind, rows, cols, seed, NULL, out, err);
}

fp4_status fp4_negate_operand(const fp4_matrix *a, fp4_matrix *out, fp4_err *err)
{
    fp4_status st = fp4_matrix_copy(out, a, err);
    if (st != FP4_OK) return st;
    const size_t n = (size_t)a->rows * (size_t)(a->cols / 2);
    for (size_t i = 0; i < n; i++) out->codes[i] ^= 0x88; /* both nibbles' sign bits */
    return FP4_OK;
}
