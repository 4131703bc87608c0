/* The NVFP4 format on the CPU, exactly: scalar codecs, quantize, dequantize,
 * the swizzled scale layout. This file is the specification the GPU quantizer
 * must match bit for bit, so every float expression is written in the order
 * the convention states and compiled without contraction (ISO C11 mode). */
#include "fp4/format.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- E2M1 ---------------------------------------------------------------- */

static const float e2m1_magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

float fp4_e2m1_decode(uint8_t code)
{
    float v = e2m1_magnitude[code & 7];
    return (code & 8) ? -v : v;
}

/* Round-to-nearest-even on the 8 magnitudes: a tie goes to the even code
 * (0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4); above 5 rounds
 * to 6 and larger values saturate there. The sign bit is kept even when the
 * magnitude rounds to zero (-0.1 -> code 8), as cvt.rn.satfinite.e2m1 does. */
uint8_t fp4_e2m1_encode(float x)
{
    uint8_t sign = signbit(x) ? 8 : 0;
    float a = fabsf(x);
    uint8_t code;
    if (isnan(x)) return 7;
    if (a <= 0.25f) code = 0;
    else if (a < 0.75f) code = 1;
    else if (a <= 1.25f) code = 2;
    else if (a < 1.75f) code = 3;
    else if (a <= 2.5f) code = 4;
    else if (a < 3.5f) code = 5;
    else if (a <= 5.0f) code = 6;
    else code = 7;
    return (uint8_t)(sign | code);
}

/* ---- E4M3 (OCP "fn": no infinity, 0x7F/0xFF NaN, max 448) -------------- */

float fp4_e4m3_decode(uint8_t byte)
{
    int sign = byte >> 7;
    int exp = (byte >> 3) & 15;
    int man = byte & 7;
    float v;
    if (exp == 15 && man == 7) return NAN;
    if (exp == 0) v = ldexpf((float)man, -9); /* subnormal: man * 2^-9 */
    else v = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return sign ? -v : v;
}

uint8_t fp4_e4m3_encode(float x)
{
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    int e2;
    if (isnan(x)) return 0x7F;
    if (a > FP4_E4M3_MAX) return (uint8_t)(sign | 0x7E); /* satfinite */
    if (a < 0x1p-6f) {
        /* Subnormal range: multiples of 2^-9; 8 * 2^-9 is the smallest normal,
         * whose byte is 0x08, so the integer is the byte itself. */
        return (uint8_t)(sign | (uint8_t)nearbyintf(a * 0x1p9f));
    }
    (void)frexpf(a, &e2);          /* a = f * 2^e2, f in [0.5, 1) */
    int e = e2 - 1;                /* a = s * 2^e, s in [1, 2) */
    float s = ldexpf(a, -e);
    int man = (int)nearbyintf((s - 1.0f) * 8.0f); /* exact product, RNE */
    if (man == 8) {
        man = 0;
        e += 1;
    }
    int biased = e + 7;
    if (biased > 15 || (biased == 15 && man == 7)) return (uint8_t)(sign | 0x7E);
    return (uint8_t)(sign | (uint8_t)(biased << 3) | (uint8_t)man);
}

/* ---- bf16 / fp16 ------------------------------------------------------- */

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t fp4_bf16_from_float(float x)
{
    uint32_t u = float_bits(x);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN, sign kept */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float fp4_bf16_to_float(uint16_t h)
{
    return bits_float((uint32_t)h << 16);
}

float fp4_f16_to_float(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
    float v;
    if (exp == 31) v = man ? NAN : INFINITY;
    else if (exp == 0) v = ldexpf((float)man, -24);
    else v = ldexpf((float)(man | 1024), exp - 25);
    return sign ? -v : v;
}

uint16_t fp4_f16_from_float(float x)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    float a = fabsf(x);
    int e2;
    if (isnan(x)) return (uint16_t)(sign | 0x7E00);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7C00); /* rounds past max: inf */
    if (a < 0x1p-14f) /* subnormal: multiples of 2^-24; 1024 * 2^-24 is min normal */
        return (uint16_t)(sign | (uint16_t)nearbyintf(a * 0x1p24f));
    (void)frexpf(a, &e2);
    int e = e2 - 1;
    int man = (int)nearbyintf((ldexpf(a, -e) - 1.0f) * 1024.0f);
    if (man == 1024) {
        man = 0;
        e += 1;
    }
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)man);
}

/* ---- matrices ------------------------------------------------------------ */

fp4_status fp4_check_dims(int64_t rows, int64_t cols, fp4_err *err)
{
    size_t bytes;
    if (rows < 1 || cols < 1)
        return fp4_fail(err, FP4_ERR_SHAPE, "matrix size %lldx%lld: sizes must be >= 1",
                        (long long)rows, (long long)cols);
    if (cols % FP4_BLOCK != 0)
        return fp4_fail(err, FP4_ERR_SHAPE, "K=%lld is not a multiple of 16 (the NVFP4 block)",
                        (long long)cols);
    /* Every buffer we derive (floats, padded scales) must fit: check the float
     * matrix, the largest of them, with room for padding. */
    if ((uint64_t)rows > (uint64_t)INT64_MAX / 4 || (uint64_t)cols > (uint64_t)INT64_MAX / 4 ||
        fp4_size_mul3((size_t)rows + 128, (size_t)cols, sizeof(float), &bytes))
        return fp4_fail(err, FP4_ERR_OVERFLOW, "matrix size %lldx%lld overflows memory sizes",
                        (long long)rows, (long long)cols);
    return FP4_OK;
}

fp4_status fp4_matrix_alloc(fp4_matrix *m, int64_t rows, int64_t cols, fp4_err *err)
{
    fp4_status st = fp4_check_dims(rows, cols, err);
    memset(m, 0, sizeof *m);
    if (st != FP4_OK) return st;
    size_t ncodes = (size_t)rows * (size_t)(cols / 2);
    size_t nscales = (size_t)rows * (size_t)(cols / FP4_BLOCK);
    m->codes = calloc(ncodes, 1);
    m->scales = calloc(nscales, 1);
    if (!m->codes || !m->scales) {
        fp4_matrix_free(m);
        return fp4_fail(err, FP4_ERR_NOMEM, "no memory for a %lldx%lld NVFP4 matrix",
                        (long long)rows, (long long)cols);
    }
    m->rows = rows;
    m->cols = cols;
    m->global_scale = 1.0f;
    return FP4_OK;
}

void fp4_matrix_free(fp4_matrix *m)
{
    if (!m) return;
    free(m->codes);
    free(m->scales);
    memset(m, 0, sizeof *m);
}

fp4_status fp4_matrix_copy(fp4_matrix *dst, const fp4_matrix *src, fp4_err *err)
{
    fp4_status st = fp4_matrix_alloc(dst, src->rows, src->cols, err);
    if (st != FP4_OK) return st;
    memcpy(dst->codes, src->codes, (size_t)src->rows * (size_t)(src->cols / 2));
    memcpy(dst->scales, src->scales, (size_t)src->rows * (size_t)(src->cols / FP4_BLOCK));
    dst->global_scale = src->global_scale;
    return FP4_OK;
}

float fp4_matrix_get(const fp4_matrix *m, int64_t r, int64_t c)
{
    uint8_t byte = m->codes[(size_t)r * (size_t)(m->cols / 2) + (size_t)(c / 2)];
    uint8_t code = (c & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 15);
    uint8_t sf = m->scales[(size_t)r * (size_t)(m->cols / FP4_BLOCK) + (size_t)(c / FP4_BLOCK)];
    return fp4_e2m1_decode(code) * fp4_e4m3_decode(sf);
}

/* ---- quantization -------------------------------------------------------- */

float fp4_global_encode_scale(float amax)
{
    if (!(amax > 0.0f)) return 1.0f;
    return (FP4_E4M3_MAX * FP4_E2M1_MAX) / amax; /* 2688 / amax */
}

/* Quantize one row of cols floats with encode scale gs (the convention in
 * format.h, operations in exactly that order). */
static void quantize_row(const float *x, int64_t cols, float gs, uint8_t *codes,
                         uint8_t *scales)
{
    for (int64_t kb = 0; kb < cols / FP4_BLOCK; kb++) {
        const float *blk = x + kb * FP4_BLOCK;
        float bm = 0.0f;
        for (int i = 0; i < FP4_BLOCK; i++) bm = fmaxf(bm, fabsf(blk[i]));
        uint8_t sf_byte = fp4_e4m3_encode(gs * (bm / FP4_E2M1_MAX));
        float sf = fp4_e4m3_decode(sf_byte);
        scales[kb] = sf_byte;
        uint8_t *out = codes + kb * (FP4_BLOCK / 2);
        if (sf == 0.0f) {
            memset(out, 0, FP4_BLOCK / 2);
            continue;
        }
        float inv = 1.0f / (sf / gs);
        for (int i = 0; i < FP4_BLOCK; i += 2) {
            uint8_t lo = fp4_e2m1_encode(blk[i] * inv);
            uint8_t hi = fp4_e2m1_encode(blk[i + 1] * inv);
            out[i / 2] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* Shared body of the two quantizers: row_at(i) yields row i as floats. */
static fp4_status quantize_rows(const float *(*row_at)(const void *, int64_t, int64_t, float *),
                                const void *src, int64_t rows, int64_t cols, float encode_scale,
                                fp4_matrix *out, fp4_err *err)
{
    fp4_status st;
    float *tmp = NULL;
    float amax = 0.0f;
    if (!src || !out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "quantize: NULL argument");
    memset(out, 0, sizeof *out);
    st = fp4_check_dims(rows, cols, err);
    if (st != FP4_OK) return st;
    tmp = malloc((size_t)cols * sizeof(float));
    if (!tmp) return fp4_fail(err, FP4_ERR_NOMEM, "quantize: no memory");
    for (int64_t r = 0; r < rows; r++) {
        const float *row = row_at(src, r, cols, tmp);
        for (int64_t c = 0; c < cols; c++) {
            if (!isfinite(row[c])) {
                st = fp4_fail(err, FP4_ERR_INVALID_ARG,
                              "quantize: element (%lld, %lld) is %s", (long long)r,
                              (long long)c, isnan(row[c]) ? "NaN" : "infinite");
                goto out;
            }
            amax = fmaxf(amax, fabsf(row[c]));
        }
    }
    float gs = encode_scale > 0.0f ? encode_scale : fp4_global_encode_scale(amax);
    /* the stored global scale is 1 / gs: it must be a normal float (for
     * amax below 2688 x FLT_MIN, about 3.2e-35, 2688 / amax is not) */
    if (!isfinite(gs) || !(1.0f / gs >= FLT_MIN)) {
        if (encode_scale > 0.0f)
            st = fp4_fail(err, FP4_ERR_INVALID_ARG,
                          "quantize: encode scale %g leaves no normal fp32 global scale (1 / %g)",
                          (double)encode_scale, (double)encode_scale);
        else
            st = fp4_fail(err, FP4_ERR_INVALID_ARG,
                          "quantize: the largest |x| is %g, too small for an fp32 global scale "
                          "(2688 / amax must be finite, its inverse a normal float: |x| >= 3.2e-35)",
                          (double)amax);
        goto out;
    }
    st = fp4_matrix_alloc(out, rows, cols, err);
    if (st != FP4_OK) goto out;
    for (int64_t r = 0; r < rows; r++)
        quantize_row(row_at(src, r, cols, tmp), cols, gs, out->codes + r * (cols / 2),
                     out->scales + r * (cols / FP4_BLOCK));
    out->global_scale = 1.0f / gs;
out:
    free(tmp);
    return st;
}

static const float *f32_row(const void *src, int64_t r, int64_t cols, float *tmp)
{
    (void)tmp;
    return (const float *)src + r * cols;
}

static const float *bf16_row(const void *src, int64_t r, int64_t cols, float *tmp)
{
    const uint16_t *row = (const uint16_t *)src + r * cols;
    for (int64_t c = 0; c < cols; c++) tmp[c] = fp4_bf16_to_float(row[c]);
    return tmp;
}

fp4_status fp4_quantize_f32(const float *x, int64_t rows, int64_t cols, float encode_scale,
                            fp4_matrix *out, fp4_err *err)
{
    return quantize_rows(f32_row, x, rows, cols, encode_scale, out, err);
}

fp4_status fp4_quantize_bf16(const uint16_t *x, int64_t rows, int64_t cols, float encode_scale,
                             fp4_matrix *out, fp4_err *err)
{
    return quantize_rows(bf16_row, x, rows, cols, encode_scale, out, err);
}

fp4_status fp4_dequantize_f32(const fp4_matrix *m, float *out, fp4_err *err)
{
    if (!m || !out || !m->codes || !m->scales)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "dequantize: NULL argument");
    for (int64_t r = 0; r < m->rows; r++)
        for (int64_t c = 0; c < m->cols; c++)
            out[r * m->cols + c] = fp4_matrix_get(m, r, c) * m->global_scale;
    return FP4_OK;
}

fp4_status fp4_dequantize_bf16(const fp4_matrix *m, uint16_t *out, fp4_err *err)
{
    if (!m || !out || !m->codes || !m->scales)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "dequantize: NULL argument");
    for (int64_t r = 0; r < m->rows; r++)
        for (int64_t c = 0; c < m->cols; c++)
            out[r * m->cols + c] = fp4_bf16_from_float(fp4_matrix_get(m, r, c) * m->global_scale);
    return FP4_OK;
}

/* ---- swizzled scales ------------------------------------------------------- */

int64_t fp4_swizzled_rows(int64_t rows)
{
    return (rows + 127) / 128 * 128;
}

int64_t fp4_swizzled_kblocks(int64_t cols)
{
    return (cols / FP4_BLOCK + 3) / 4 * 4;
}

size_t fp4_swizzled_size(int64_t rows, int64_t cols)
{
    return (size_t)fp4_swizzled_rows(rows) * (size_t)fp4_swizzled_kblocks(cols);
}

/* 128 rows x 4 scale columns form one 512-byte tile; inside it, row r sits at
 * (r%32)*16 + ((r/32)%4)*4 and the 4 columns are consecutive bytes. */
size_t fp4_swizzle_offset(int64_t r, int64_t kb, int64_t kbp)
{
    return (size_t)(r / 128) * (size_t)(kbp / 4) * 512 + (size_t)(kb / 4) * 512 +
           (size_t)(r % 32) * 16 + (size_t)((r / 32) % 4) * 4 + (size_t)(kb % 4);
}

fp4_status fp4_swizzle_scales(const uint8_t *plain, int64_t rows, int64_t cols,
                              uint8_t *swizzled, fp4_err *err)
{
    fp4_status st = fp4_check_dims(rows, cols, err);
    if (st != FP4_OK) return st;
    int64_t kb_count = cols / FP4_BLOCK, kbp = fp4_swizzled_kblocks(cols);
    memset(swizzled, 0, fp4_swizzled_size(rows, cols));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t kb = 0; kb < kb_count; kb++)
            swizzled[fp4_swizzle_offset(r, kb, kbp)] = plain[r * kb_count + kb];
    return FP4_OK;
}

fp4_status fp4_unswizzle_scales(const uint8_t *swizzled, int64_t rows, int64_t cols,
                                uint8_t *plain, fp4_err *err)
{
    fp4_status st = fp4_check_dims(rows, cols, err);
    if (st != FP4_OK) return st;
    int64_t kb_count = cols / FP4_BLOCK, kbp = fp4_swizzled_kblocks(cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t kb = 0; kb < kb_count; kb++)
            plain[r * kb_count + kb] = swizzled[fp4_swizzle_offset(r, kb, kbp)];
    return FP4_OK;
}

double fp4_gemm_min_bytes(int64_t m, int64_t n, int64_t k)
{
    return (double)m * (double)k / 2 + (double)n * (double)k / 2 +
           (double)fp4_swizzled_size(m, k) + (double)fp4_swizzled_size(n, k) + 8.0 +
           2.0 * (double)m * (double)n;
}
