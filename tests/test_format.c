/* The NVFP4 format library: codecs (exhaustively), rounding ties, quantization
 * against hand-worked examples, the swizzled layout against an independent
 * inverse mapping, and the reference GEMM against a naive double loop. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fp4/format.h"
#include "fp4/reference.h"
#include "test_rng.h"

static void test_e2m1(void)
{
    static const float expect[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6,
                                     -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int c = 0; c < 16; c++) {
        float v = fp4_e2m1_decode((uint8_t)c);
        CHECK_MSG(v == expect[c] && signbit(v) == signbit(expect[c]), "code %d -> %g", c, v);
        CHECK_MSG(fp4_e2m1_encode(v) == c, "code %d re-encodes as %d", c,
                  fp4_e2m1_encode(v));
    }
    /* every tie of CONTEXT.md, and both signs */
    static const float tie_in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    static const float tie_out[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f};
    for (int i = 0; i < 7; i++) {
        CHECK_MSG(fp4_e2m1_decode(fp4_e2m1_encode(tie_in[i])) == tie_out[i], "tie %g",
                  tie_in[i]);
        CHECK_MSG(fp4_e2m1_decode(fp4_e2m1_encode(-tie_in[i])) == -tie_out[i], "tie -%g",
                  tie_in[i]);
        /* just off the tie goes to the nearer value */
        float above = nextafterf(tie_in[i], 100.0f), below = nextafterf(tie_in[i], 0.0f);
        CHECK(fp4_e2m1_decode(fp4_e2m1_encode(above)) > fp4_e2m1_decode(fp4_e2m1_encode(below)));
    }
    CHECK(fp4_e2m1_encode(6.5f) == 7);
    CHECK(fp4_e2m1_encode(1e30f) == 7);
    CHECK(fp4_e2m1_encode(-1e30f) == 15);
    CHECK(fp4_e2m1_encode(5.01f) == 7);
    CHECK(fp4_e2m1_encode(-0.1f) == 8); /* sign kept on a zero result */
    CHECK(fp4_e2m1_encode(NAN) == 7);
}

static void test_e4m3(void)
{
    /* All 256 bytes: NaN only at 0x7F/0xFF, else re-encode to the same byte,
     * and positive values strictly increasing with the byte. */
    float prev = -1.0f;
    for (int b = 0; b < 256; b++) {
        float v = fp4_e4m3_decode((uint8_t)b);
        if ((b & 0x7F) == 0x7F) {
            CHECK_MSG(isnan(v), "byte 0x%02x should be NaN", b);
            CHECK(fp4_e4m3_encode(v) == 0x7F);
            continue;
        }
        CHECK_MSG(fp4_e4m3_encode(v) == b, "byte 0x%02x (%g) re-encodes as 0x%02x", b, v,
                  fp4_e4m3_encode(v));
        if (b < 0x7F) {
            CHECK_MSG(v > prev || b == 0, "byte 0x%02x not increasing", b);
            prev = v;
        }
    }
    CHECK(fp4_e4m3_decode(0x7E) == 448.0f);
    CHECK(fp4_e4m3_decode(0x38) == 1.0f);
    CHECK(fp4_e4m3_decode(0x08) == 0x1p-6f);
    CHECK(fp4_e4m3_decode(0x01) == 0x1p-9f);
    CHECK(fp4_e4m3_decode(0x07) == 7 * 0x1p-9f);
    CHECK(fp4_e4m3_decode(0xB8) == -1.0f);
    /* Midpoints between neighbours round to the even byte; a hair off goes
     * to the nearer neighbour. */
    for (int b = 0; b < 0x7E; b++) {
        float lo = fp4_e4m3_decode((uint8_t)b), hi = fp4_e4m3_decode((uint8_t)(b + 1));
        float mid = (lo + hi) / 2; /* exact: both have few significant bits */
        int even = (b % 2 == 0) ? b : b + 1;
        CHECK_MSG(fp4_e4m3_encode(mid) == even, "midpoint %g of 0x%02x/0x%02x -> 0x%02x", mid,
                  b, b + 1, fp4_e4m3_encode(mid));
        CHECK(fp4_e4m3_encode(nextafterf(mid, 0.0f)) == b);
        CHECK(fp4_e4m3_encode(nextafterf(mid, 1000.0f)) == b + 1);
        CHECK(fp4_e4m3_encode(-mid) == (even | 0x80));
    }
    /* saturation to 448, never NaN */
    CHECK(fp4_e4m3_encode(449.0f) == 0x7E);
    CHECK(fp4_e4m3_encode(464.0f) == 0x7E);
    CHECK(fp4_e4m3_encode(1e30f) == 0x7E);
    CHECK(fp4_e4m3_encode(INFINITY) == 0x7E);
    CHECK(fp4_e4m3_encode(-INFINITY) == 0xFE);
    CHECK(fp4_e4m3_encode(0x1p-10f) == 0x00); /* half the smallest subnormal: tie to 0 */
    CHECK(fp4_e4m3_encode(0x1.8p-9f) == 0x02); /* 1.5 * 2^-9: tie to even 2 */
}

static void test_half_types(void)
{
    CHECK(fp4_bf16_from_float(1.0f) == 0x3F80);
    CHECK(fp4_bf16_to_float(0x3F80) == 1.0f);
    CHECK(fp4_bf16_from_float(1.0f + 0x1p-8f) == 0x3F80);         /* tie to even (down) */
    CHECK(fp4_bf16_from_float(1.0f + 3 * 0x1p-8f) == 0x3F82);     /* tie to even (up) */
    CHECK(fp4_bf16_from_float(1.0f + 0x1p-8f + 0x1p-20f) == 0x3F81);
    CHECK(isnan(fp4_bf16_to_float(fp4_bf16_from_float(NAN))));
    CHECK(fp4_bf16_from_float(-2.0f) == 0xC000);
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = fp4_bf16_to_float((uint16_t)h);
        if (!isnan(f)) CHECK_MSG(fp4_bf16_from_float(f) == h, "bf16 0x%04x", (unsigned)h);
    }
    CHECK(fp4_f16_from_float(1.0f) == 0x3C00);
    CHECK(fp4_f16_to_float(0x3C00) == 1.0f);
    CHECK(fp4_f16_to_float(0x0001) == 0x1p-24f);
    CHECK(fp4_f16_to_float(0x7BFF) == 65504.0f);
    CHECK(fp4_f16_from_float(1e6f) == 0x7C00);
    CHECK(fp4_f16_from_float(1.0f + 0x1p-11f) == 0x3C00); /* tie to even */
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = fp4_f16_to_float((uint16_t)h);
        if (!isnan(f)) CHECK_MSG(fp4_f16_from_float(f) == h, "f16 0x%04x", (unsigned)h);
    }
}

static uint8_t code_at(const fp4_matrix *m, int64_t r, int64_t c)
{
    uint8_t byte = m->codes[r * (m->cols / 2) + c / 2];
    return (c & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 15);
}

/* Worked by hand (see the comments): amax 6 gives gs = 448; block 0 has
 * max 6 -> sf = e4m3(448) = 0x7E, codes are e2m1(x); block 1 has max 0.6 ->
 * sf = e4m3(44.8) = 44 (0x63: 2^5 * 1.375), inv = 448/44 = 10.18..., so
 * 0.6 -> 6.11 -> 6, 0.3 -> 3.05 -> 3, 0.05 -> 0.509 -> 0.5, 0.02 -> 0.2 -> 0,
 * -0.14 -> -1.43 -> -1.5; block 2 is all zero -> sf 0, codes 0. */
static void test_quantize_worked(void)
{
    float x[48] = {0};
    fp4_matrix q;
    fp4_err err;
    x[0] = 6.0f;  x[1] = 3.0f;  x[2] = -1.5f;  x[3] = 0.75f;
    x[4] = 0.25f; x[5] = -5.0f; x[6] = 2.4f;   x[7] = 0.1f;
    x[16] = 0.6f; x[17] = 0.3f; x[18] = 0.05f; x[19] = 0.02f; x[20] = -0.14f;
    CHECK(fp4_quantize_f32(x, 1, 48, 0.0f, &q, &err) == FP4_OK);
    CHECK(q.global_scale == 1.0f / 448.0f);
    CHECK(q.scales[0] == 0x7E);
    CHECK(q.scales[1] == 0x63);
    CHECK(fp4_e4m3_decode(0x63) == 44.0f);
    CHECK(q.scales[2] == 0x00);
    static const uint8_t want0[8] = {7, 5, 11, 2, 0, 14, 4, 0};
    for (int i = 0; i < 8; i++) CHECK_MSG(code_at(&q, 0, i) == want0[i], "block0 elem %d", i);
    static const uint8_t want1[5] = {7, 5, 1, 0, 11};
    for (int i = 0; i < 5; i++) CHECK_MSG(code_at(&q, 0, 16 + i) == want1[i], "block1 elem %d", i);
    for (int i = 32; i < 48; i++) CHECK(code_at(&q, 0, i) == 0);
    fp4_matrix_free(&q);

    /* A given encode scale is used as is: gs = 100, block max 6 ->
     * sf = e4m3(100) = 96 (0x6C), inv = 1/(96/100) = 1.0416..: 6 -> 6.25 -> 6. */
    CHECK(fp4_quantize_f32(x, 1, 16, 100.0f, &q, &err) == FP4_OK);
    CHECK(q.scales[0] == fp4_e4m3_encode(100.0f));
    CHECK(fp4_e4m3_decode(q.scales[0]) == 96.0f);
    CHECK(q.global_scale == 1.0f / 100.0f);
    CHECK(code_at(&q, 0, 0) == 7);
    fp4_matrix_free(&q);

    /* all zero tensor: gs 1, zero scales and codes */
    float z[32] = {0};
    CHECK(fp4_quantize_f32(z, 2, 16, 0.0f, &q, &err) == FP4_OK);
    CHECK(q.global_scale == 1.0f);
    CHECK(q.scales[0] == 0 && q.scales[1] == 0 && q.codes[0] == 0);
    fp4_matrix_free(&q);

    /* bad input */
    CHECK(fp4_quantize_f32(x, 1, 40, 0.0f, &q, &err) == FP4_ERR_SHAPE);
    CHECK(strstr(err.msg, "multiple of 16") != NULL);
    CHECK(fp4_quantize_f32(x, 0, 16, 0.0f, &q, &err) == FP4_ERR_SHAPE);
    CHECK(fp4_quantize_f32(x, -3, 16, 0.0f, &q, &err) == FP4_ERR_SHAPE);
    CHECK(fp4_quantize_f32(x, INT64_MAX / 2, 16, 0.0f, &q, &err) == FP4_ERR_OVERFLOW);
    x[5] = NAN;
    CHECK(fp4_quantize_f32(x, 1, 16, 0.0f, &q, &err) == FP4_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "NaN") != NULL);
    /* values so small that 2688 / amax overflows (or its inverse is no normal
     * float): refused, never a file with a zero or NaN global scale */
    float tiny[16];
    for (int i = 0; i < 16; i++) tiny[i] = 1e-37f;
    CHECK(fp4_quantize_f32(tiny, 1, 16, 0.0f, &q, &err) == FP4_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "too small") != NULL && q.codes == NULL);
    for (int i = 0; i < 16; i++) tiny[i] = 1e-34f; /* 2688 / amax still normal both ways */
    CHECK(fp4_quantize_f32(tiny, 1, 16, 0.0f, &q, &err) == FP4_OK);
    CHECK(q.global_scale >= FLT_MIN && fp4_matrix_get(&q, 0, 3) == 6.0f * fp4_e4m3_decode(q.scales[0]));
    fp4_matrix_free(&q);
    CHECK(fp4_quantize_f32(x, 1, 16, INFINITY, &q, &err) == FP4_ERR_INVALID_ARG);
}

/* Gaussian data: the bf16 path equals the f32 path on bf16-representable
 * data, and dequantization is within half a code step of the input. */
static void test_quantize_random(void)
{
    enum { R = 37, C = 2880 };
    float *x = malloc(sizeof(float) * R * C), *dq = malloc(sizeof(float) * R * C);
    uint16_t *xb = malloc(sizeof(uint16_t) * R * C);
    fp4_matrix q1, q2;
    fp4_err err;
    test_rng rng = test_rng_seed(1);
    for (int i = 0; i < R * C; i++) {
        xb[i] = fp4_bf16_from_float((float)test_rng_gauss(&rng) * 3.0f);
        x[i] = fp4_bf16_to_float(xb[i]);
    }
    CHECK(fp4_quantize_f32(x, R, C, 0.0f, &q1, &err) == FP4_OK);
    CHECK(fp4_quantize_bf16(xb, R, C, 0.0f, &q2, &err) == FP4_OK);
    CHECK(memcmp(q1.codes, q2.codes, R * C / 2) == 0);
    CHECK(memcmp(q1.scales, q2.scales, R * C / 16) == 0);
    CHECK(q1.global_scale == q2.global_scale);
    CHECK(fp4_dequantize_f32(&q1, dq, &err) == FP4_OK);
    int bad = 0;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            /* largest gap between E2M1 values is 2 (4..6): half is 1 step of
             * scale; plus the scale's own rounding (<= 1/16 relative). */
            float step = fp4_e4m3_decode(q1.scales[r * (C / 16) + c / 16]) * q1.global_scale;
            float e = fabsf(dq[r * C + c] - x[r * C + c]);
            if (e > step * 1.0f + fabsf(x[r * C + c]) * 0.07f) bad++;
        }
    CHECK_MSG(bad == 0, "%d elements off by more than a step", bad);
    fp4_matrix_free(&q1);
    fp4_matrix_free(&q2);
    free(x);
    free(dq);
    free(xb);
}

/* The inverse of the swizzle formula, derived from the byte offset, as a
 * check independent of fp4_swizzle_offset. */
static void test_swizzle(void)
{
    static const int64_t rows_list[] = {1, 31, 128, 129, 300};
    static const int64_t cols_list[] = {16, 48, 64, 2880};
    fp4_err err;
    test_rng rng = test_rng_seed(2);
    for (int ri = 0; ri < 5; ri++)
        for (int ci = 0; ci < 4; ci++) {
            int64_t rows = rows_list[ri], cols = cols_list[ci], kb_count = cols / 16;
            int64_t mp = fp4_swizzled_rows(rows), kbp = fp4_swizzled_kblocks(cols);
            size_t size = fp4_swizzled_size(rows, cols);
            CHECK(mp % 128 == 0 && mp >= rows && mp - rows < 128);
            CHECK(kbp % 4 == 0 && kbp >= kb_count && kbp - kb_count < 4);
            CHECK(size == (size_t)(mp * kbp));
            uint8_t *plain = malloc((size_t)(rows * kb_count)), *back = malloc((size_t)(rows * kb_count));
            uint8_t *sw = malloc(size);
            for (int64_t i = 0; i < rows * kb_count; i++) plain[i] = (uint8_t)(1 + test_rng_u64(&rng) % 254);
            memset(sw, 0xAA, size);
            CHECK(fp4_swizzle_scales(plain, rows, cols, sw, &err) == FP4_OK);
            int wrong = 0;
            for (size_t o = 0; o < size; o++) {
                size_t tile = o / 512, within = o % 512;
                int64_t r32 = (int64_t)(within / 16), sub = (int64_t)(within % 16) / 4,
                        kc = (int64_t)(within % 4);
                int64_t tm = (int64_t)tile / (kbp / 4), tk = (int64_t)tile % (kbp / 4);
                int64_t r = tm * 128 + sub * 32 + r32, kb = tk * 4 + kc;
                uint8_t want = (r < rows && kb < kb_count) ? plain[r * kb_count + kb] : 0;
                if (sw[o] != want) wrong++;
            }
            CHECK_MSG(wrong == 0, "rows %lld cols %lld: %d bytes wrong", (long long)rows,
                      (long long)cols, wrong);
            CHECK(fp4_unswizzle_scales(sw, rows, cols, back, &err) == FP4_OK);
            CHECK(memcmp(plain, back, (size_t)(rows * kb_count)) == 0);
            free(plain);
            free(back);
            free(sw);
        }
    /* the formula itself on two hand-computed points */
    CHECK(fp4_swizzle_offset(0, 0, 4) == 0);
    CHECK(fp4_swizzle_offset(129, 5, 8) == 1 * 2 * 512 + 1 * 512 + 1 * 16 + 0 + 1);
}

static void random_matrix(test_rng *rng, fp4_matrix *m, int64_t rows, int64_t cols)
{
    float *x = malloc(sizeof(float) * (size_t)(rows * cols));
    fp4_err err;
    for (int64_t i = 0; i < rows * cols; i++) x[i] = (float)test_rng_gauss(rng);
    CHECK(fp4_quantize_f32(x, rows, cols, 0.0f, m, &err) == FP4_OK);
    free(x);
}

static void test_reference_gemm(void)
{
    static const int64_t shapes[][3] = {{1, 1, 16},   {1, 200, 48},  {3, 17, 16},
                                        {17, 129, 2880}, {5, 8, 6144}, {66, 130, 64}};
    fp4_err err;
    test_rng rng = test_rng_seed(3);
    for (int s = 0; s < 6; s++) {
        int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        fp4_matrix a, b;
        random_matrix(&rng, &a, m, k);
        random_matrix(&rng, &b, n, k);
        float alpha = a.global_scale * b.global_scale;
        float *d1 = malloc(sizeof(float) * (size_t)(m * n)), *d2 = malloc(sizeof(float) * (size_t)(m * n));
        for (int64_t i = 0; i < m * n; i++) d1[i] = d2[i] = NAN;
        CHECK(fp4_gemm_reference(&a, &b, alpha, d1, 1, &err) == FP4_OK);
        CHECK(fp4_gemm_reference(&a, &b, alpha, d2, 3, &err) == FP4_OK);
        CHECK(memcmp(d1, d2, sizeof(float) * (size_t)(m * n)) == 0);
        int bad = 0, nonzero = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double naive = fp4_gemm_naive_element(&a, &b, alpha, i, j);
                double got = d1[i * n + j];
                if (!(fabs(got - naive) <= 1e-6 * fabs(naive) + 1e-30)) bad++;
                if (got != 0.0) nonzero++;
            }
        CHECK_MSG(bad == 0, "shape %lldx%lldx%lld: %d elements differ from the naive loop",
                  (long long)m, (long long)n, (long long)k, bad);
        CHECK(nonzero > 0);
        free(d1);
        free(d2);
        fp4_matrix_free(&a);
        fp4_matrix_free(&b);
    }
    /* The extreme case: every product at the largest magnitude; the exact
     * integer sum must not overflow or round. */
    fp4_matrix a, b;
    CHECK(fp4_matrix_alloc(&a, 1, 4096, &err) == FP4_OK);
    CHECK(fp4_matrix_alloc(&b, 1, 4096, &err) == FP4_OK);
    memset(a.codes, 0x77, 2048);
    memset(b.codes, 0x77, 2048);
    memset(a.scales, 0x7E, 256);
    memset(b.scales, 0x7E, 256);
    float d;
    CHECK(fp4_gemm_reference(&a, &b, 1.0f, &d, 1, &err) == FP4_OK);
    CHECK(d == (float)(4096.0 * 2688.0 * 2688.0));
    /* and a K mismatch is an error, not a wrong number */
    fp4_matrix c;
    CHECK(fp4_matrix_alloc(&c, 1, 32, &err) == FP4_OK);
    CHECK(fp4_gemm_reference(&a, &c, 1.0f, &d, 1, &err) == FP4_ERR_SHAPE);
    fp4_matrix_free(&a);
    fp4_matrix_free(&b);
    fp4_matrix_free(&c);
}

int main(void)
{
    test_e2m1();
    test_e4m3();
    test_half_types();
    test_quantize_worked();
    test_quantize_random();
    test_swizzle();
    test_reference_gemm();
    return check_finish("test_format");
}
