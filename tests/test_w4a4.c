/* CPU side of the W4A4 backends and the GPU quantizer's arithmetic:
 * 1. fp4_qz_div6 (the quantizer's division-free bm / 6) equals bm / 6 for all
 *    finite bf16 magnitudes, where the plain bm * fl(1/6) does not;
 * 2. fp4_qz_e2m1_mag (branch-free E2M1 rounding) equals fp4_e2m1_encode on a
 *    sweep of [0, 8], every float within 64 ulps of each grid point and
 *    rounding boundary, and saturating values up to +Inf; fp4_qz_e2m1_biased
 *    (the kernel's hot path) equals 2^23 + fp4_e2m1_encode on every float
 *    from +0 to +Inf (2^31 + 1 of them, four threads);
 * 3. the bf16 activations the backends start from quantize back to the
 *    problem's A bit for bit (CPU quantizer, static scale) for gaussian and
 *    outliers data although they are not exact in bf16, and do not for
 *    random codes (what prepare() reports as unsupported);
 * 4. bytes and flops the two backends declare, and argument checks. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/w4a4_host.h"
#include "bench/inputs.h"
#include "check.h"
#include "fp4/backend.h"
#include "fp4/format.h"
#include "kernels/fp4_quantize_math.h"

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void test_div6(void)
{
    long bad = 0, naive_bad = 0;
    const float sixth = 1.0f / 6.0f;
    for (uint32_t h = 0; h < 0x7F80u; h++) { /* +0 .. the largest finite bf16 */
        volatile float bm = from_bits(h << 16);
        const float want = bm / 6.0f;
        bad += to_bits(fp4_qz_div6(bm)) != to_bits(want);
        naive_bad += to_bits(bm * sixth) != to_bits(want);
    }
    CHECK_MSG(bad == 0, "fp4_qz_div6 differs from bm / 6 for %ld bf16 values", bad);
    /* the check can fail: without the correction thousands differ */
    CHECK_MSG(naive_bad > 1000, "bm * fl(1/6) differs only %ld times", naive_bad);
}

static long e2m1_check(uint32_t u)
{
    const float a = from_bits(u);
    const uint32_t got = fp4_qz_e2m1_mag(a), want = fp4_e2m1_encode(a);
    if (got != want) {
        if (check_failures < 20)
            fprintf(stderr, "e2m1 of %a: %u, want %u\n", (double)a, (unsigned)got, (unsigned)want);
        return 1;
    }
    return 0;
}

static void test_e2m1(void)
{
    static const float points[] = {0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f,
                                   2.5f,  3.0f, 3.5f,  4.0f, 5.0f,  6.0f, 7.0f,  8.0f};
    long bad = 0, n = 0;
    for (uint32_t u = 0; u <= 0x41000000u; u += 61, n++) bad += e2m1_check(u);
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++)
        for (int d = -64; d <= 64; d++, n++) bad += e2m1_check(to_bits(points[i]) + (uint32_t)d);
    static const uint32_t special[] = {0u, 1u, 0x007FFFFFu, 0x00800000u, 0x41000001u,
                                       0x4B000000u, 0x7F7FFFFFu, 0x7F800000u};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++, n++) bad += e2m1_check(special[i]);
    CHECK_MSG(bad == 0, "fp4_qz_e2m1_mag differs from fp4_e2m1_encode on %ld of %ld floats", bad, n);
    CHECK(n > 1000000);
}

/* fp4_qz_e2m1_biased over the bit patterns [lo, hi): mismatches in *bad. */
struct biased_range {
    uint32_t lo, hi;
    long bad;
};

static void *biased_sweep(void *arg)
{
    struct biased_range *r = arg;
    for (uint32_t u = r->lo; u < r->hi; u++) {
        const float a = from_bits(u);
        r->bad += to_bits(fp4_qz_e2m1_biased(a)) - 0x4B000000u != fp4_e2m1_encode(a);
    }
    return NULL;
}

static void test_e2m1_biased(void)
{
    enum { PARTS = 4 };
    const uint32_t end = 0x7F800001u; /* +0 .. +Inf inclusive */
    struct biased_range r[PARTS];
    pthread_t th[PARTS];
    int started[PARTS];
    long bad = 0;
    for (int i = 0; i < PARTS; i++) {
        r[i].lo = (uint32_t)((uint64_t)end * (uint64_t)i / PARTS);
        r[i].hi = (uint32_t)((uint64_t)end * (uint64_t)(i + 1) / PARTS);
        r[i].bad = 0;
        started[i] = pthread_create(&th[i], NULL, biased_sweep, &r[i]) == 0;
        if (!started[i]) biased_sweep(&r[i]);
    }
    for (int i = 0; i < PARTS; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        bad += r[i].bad;
    }
    CHECK_MSG(bad == 0, "fp4_qz_e2m1_biased differs from 2^23 + fp4_e2m1_encode on %ld floats",
              bad);
    /* the exact ties, spelled out (a failure here is easier to read) */
    static const float tie[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
    static const uint32_t want[] = {0, 2, 2, 4, 4, 6, 6, 7};
    for (size_t i = 0; i < sizeof tie / sizeof tie[0]; i++)
        CHECK_MSG(to_bits(fp4_qz_e2m1_biased(tie[i])) - 0x4B000000u == want[i], "tie %g",
                  (double)tie[i]);
}

/* Quantize the bf16 activations of operand `kind` back with the CPU
 * quantizer: returns the number of differing code + scale bytes; *inexact
 * counts the elements whose dequantized value was rounded to bf16. */
static size_t roundtrip(fp4_data_kind kind, int64_t rows, int64_t cols, size_t *inexact)
{
    fp4_err err;
    fp4_matrix a, q;
    size_t diff = (size_t)-1;
    *inexact = 0;
    CHECK(fp4_make_operand(kind, rows, cols, 7 + (uint64_t)rows, &a, &err) == FP4_OK);
    uint16_t *x = malloc((size_t)rows * (size_t)cols * 2);
    float gs = 0.0f;
    CHECK(x != NULL);
    if (!x) goto out;
    CHECK(fp4_dequantize_bf16(&a, x, &err) == FP4_OK);
    gs = 1.0f / a.global_scale;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            const double v = (double)fp4_matrix_get(&a, r, c) * (double)a.global_scale;
            *inexact += (double)fp4_bf16_to_float(x[r * cols + c]) != v;
        }
    CHECK(fp4_quantize_bf16(x, rows, cols, gs, &q, &err) == FP4_OK);
    diff = fp4_w4a4_count_diff(q.codes, a.codes, (size_t)rows * (size_t)(cols / 2)) +
           fp4_w4a4_count_diff(q.scales, a.scales, (size_t)rows * (size_t)(cols / 16));
    fp4_matrix_free(&q);
out:
    free(x);
    fp4_matrix_free(&a);
    return diff;
}

static void test_activations(void)
{
    { /* a data kind the engine has none of is an error, not gaussian data */
        fp4_matrix m;
        fp4_err err;
        CHECK(fp4_make_operand((fp4_data_kind)7, 4, 16, 1, &m, &err) == FP4_ERR_INVALID_ARG);
        CHECK(fp4_make_operand(FP4_DATA_WIDE, 4, 16, 1, &m, &err) == FP4_OK);
        fp4_matrix_free(&m);
    }
    static const int64_t shapes[][2] = {{1, 16}, {3, 48}, {17, 2880}, {129, 6144}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t inexact = 0, d;
        const int64_t m = shapes[i][0], k = shapes[i][1];
        d = roundtrip(FP4_DATA_GAUSSIAN, m, k, &inexact);
        CHECK_MSG(d == 0, "gaussian %lldx%lld: %zu bytes differ after bf16 and back", (long long)m,
                  (long long)k, d);
        if (m * k >= 2880) /* the round trip is not trivially exact */
            CHECK_MSG(inexact > 0, "gaussian %lldx%lld: every value exact in bf16?", (long long)m,
                      (long long)k);
        d = roundtrip(FP4_DATA_OUTLIERS, m, k, &inexact);
        CHECK_MSG(d == 0, "outliers %lldx%lld: %zu bytes differ", (long long)m, (long long)k, d);
        if (m * k >= 48) { /* random codes are not quantizer output */
            d = roundtrip(FP4_DATA_CODES, m, k, &inexact);
            CHECK_MSG(d > 0 && d != (size_t)-1, "codes %lldx%lld: round trip should fail",
                      (long long)m, (long long)k);
        }
    }
    /* global scales without a finite positive inverse are refused */
    fp4_err err;
    fp4_matrix a, a_odd;
    uint16_t x[16], src[16];
    float gs;
    CHECK(fp4_matrix_alloc(&a, 1, 16, &err) == FP4_OK);
    CHECK(fp4_matrix_alloc(&a_odd, 1, 16, &err) == FP4_OK);
    fp4_gemm_problem p = {.shape = {1, 8, 16}, .a = &a, .b = &a, .alpha = 1.0f};
    CHECK(fp4_w4a4_copy_activations(&p, 0, x, &gs, &err) == FP4_ERR_UNSUPPORTED); /* no bf16 A */
    p.a_bf16 = src;
    const float bad_g[] = {0.0f, -1.0f, INFINITY, NAN, 1e-45f};
    for (size_t i = 0; i < sizeof bad_g / sizeof bad_g[0]; i++) {
        a.global_scale = bad_g[i];
        CHECK_MSG(fp4_w4a4_copy_activations(&p, 0, x, &gs, &err) == FP4_ERR_INVALID_ARG, "g = %g",
                  (double)bad_g[i]);
    }
    a.global_scale = 0.5f;
    a.codes[0] = 0x97; /* -0.5 in the high nibble, 6 in the low */
    a.scales[0] = 0x38; /* 1.0 */
    CHECK(fp4_dequantize_bf16(&a, src, &err) == FP4_OK);
    CHECK(src[0] == fp4_bf16_from_float(3.0f) && src[1] == fp4_bf16_from_float(-0.25f));
    CHECK(src[2] == 0);
    /* even copies get the input as it is, odd copies (with a_odd) its negation */
    CHECK(fp4_w4a4_copy_activations(&p, 1, x, &gs, &err) == FP4_OK && gs == 2.0f);
    CHECK(x[0] == src[0] && x[1] == src[1]); /* no a_odd: every copy the same */
    p.a_odd = &a_odd;
    CHECK(fp4_w4a4_copy_activations(&p, 0, x, &gs, &err) == FP4_OK && x[0] == src[0]);
    CHECK(fp4_w4a4_copy_activations(&p, 3, x, &gs, &err) == FP4_OK);
    CHECK(x[0] == fp4_bf16_from_float(-3.0f) && x[1] == fp4_bf16_from_float(0.25f));
    fp4_matrix_free(&a);
    fp4_matrix_free(&a_odd);
}

static void test_bytes(void)
{
    const fp4_shape s = {1, 8, 16};
    /* bf16 A 32, codes 8, one 128x4 scale atom 512 */
    CHECK(fp4_w4a4_quantize_bytes(&s) == 32.0 + 8.0 + 512.0);
    /* + codes and scales read back by the GEMM, B 64 + 512, D 16 */
    CHECK(fp4_w4a4_step_bytes(&s) == 32.0 + 2.0 * (8.0 + 512.0) + 64.0 + 512.0 + 16.0);
    const fp4_shape big = {8192, 2048, 8192};
    const double mk = 8192.0 * 8192.0;
    CHECK(fp4_w4a4_quantize_bytes(&big) == 2.5 * mk + mk / 16.0);
#ifdef FP4_HAVE_CUDA
    const fp4_backend_ops *q = fp4_backend_find("quantize"), *w = fp4_backend_find("w4a4-sm90");
    CHECK(q && w);
    if (q && w) {
        fp4_err err;
        CHECK(fp4_backend_validate(q, &err) == FP4_OK && fp4_backend_validate(w, &err) == FP4_OK);
        CHECK(q->flops && q->flops(&big) == 0.0);
        CHECK(q->bytes_moved && q->bytes_moved(&big) == fp4_w4a4_quantize_bytes(&big));
        CHECK(q->math == FP4_MATH_CUDA_CORES && q->tol_max == 0.0 && q->tol_norm == 0.0);
        CHECK(!(q->flags & FP4_BACKEND_REFERENCE) && (q->flags & FP4_BACKEND_GPU));
        CHECK(w->flops == NULL && w->variant != NULL);
        CHECK(w->bytes_moved && w->bytes_moved(&big) == fp4_w4a4_step_bytes(&big));
        CHECK(w->math == FP4_MATH_BF16_TC);
        CHECK(q->set_warnings && w->set_warnings); /* their cleanup failures reach the caller */
    }
#endif
}

int main(void)
{
    test_div6();
    test_e2m1();
    test_e2m1_biased();
    test_activations();
    test_bytes();
    return check_finish("test_w4a4");
}
