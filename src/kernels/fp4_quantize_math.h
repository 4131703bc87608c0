/* The pieces of arithmetic the GPU quantizer does differently from the
 * specification (src/format/nvfp4.c), written once for host and device so
 * that a CPU test (tests/test_w4a4.c) can check them exhaustively against
 * the specification's own operations:
 *   fp4_qz_div6(bm)   == bm / 6 for every bf16 magnitude bm (all 2^15 checked)
 *   fp4_qz_e2m1_mag(a) == fp4_e2m1_encode(a) for every float a >= 0
 *   fp4_qz_e2m1_biased(a) == 2^23 + fp4_e2m1_encode(a) for every float a >= 0
 *                       (+Inf included; all 2^31 + 1 checked)
 * C or CUDA; no state. */
#ifndef FP4_QUANTIZE_MATH_H
#define FP4_QUANTIZE_MATH_H

#include <stdint.h>

#ifdef __CUDACC__
#define FP4_QZ_FN static __host__ __device__ __forceinline__
#else
#include <math.h>
#include <string.h>
#define FP4_QZ_FN static inline
#endif

FP4_QZ_FN uint32_t fp4_qz_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

FP4_QZ_FN float fp4_qz_float(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* Correctly rounded a * b, a + b and fma, never contracted or reassociated. */
FP4_QZ_FN float fp4_qz_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

FP4_QZ_FN float fp4_qz_add(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

FP4_QZ_FN float fp4_qz_fma(float a, float b, float c)
{
#ifdef __CUDA_ARCH__
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}

/* max(0, min(1, fl(a * b + c))), one rounding; NaN gives 0 (PTX .sat). */
FP4_QZ_FN float fp4_qz_fma_sat(float a, float b, float c)
{
#ifdef __CUDA_ARCH__
    float r;
    asm("fma.rn.sat.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
#else
    const float r = fmaf(a, b, c);
    return r > 0.0f ? (r < 1.0f ? r : 1.0f) : 0.0f;
#endif
}

/* bm / 6 without a division: q = bm * fl(1/6), then one Newton step on the
 * exact residual bm - 6q (an FMA). Correctly rounded for every bf16 bm (the
 * only inputs the quantizer gives it); NOT for arbitrary floats. */
FP4_QZ_FN float fp4_qz_div6(float bm)
{
    const float sixth = fp4_qz_float(0x3E2AAAABu); /* fl(1/6) */
    const float q = fp4_qz_mul(bm, sixth);
    return fp4_qz_fma(fp4_qz_fma(-q, 6.0f, bm), sixth, q);
}

/* E2M1 magnitude code (0..7) of a >= 0, round to nearest, ties to even code,
 * saturating (as fp4_e2m1_encode). Branch-free: in the binade [2^e, 2^(e+1))
 * (e clamped to >= 0: below 1 the grid spacing stays 0.5) the E2M1 grid has
 * spacing 2^(e-1); adding C = 1.5 * 2^(e+22), whose ulp is that spacing, makes
 * the float adder round a to it (ties to even: the even multiples are the even
 * codes); the multiple count n is then the difference of the bit patterns,
 * and the code is n + 2e. a is first clamped to 6: above 5 everything rounds
 * to 6 anyway, and Inf stays out of the exponent arithmetic. */
FP4_QZ_FN uint32_t fp4_qz_e2m1_mag(float a)
{
    uint32_t ab = fp4_qz_bits(a);
    ab = ab < 0x40C00000u ? ab : 0x40C00000u;        /* min(a, 6) */
    uint32_t eb = ab & 0x7F800000u;                  /* 2^e */
    eb = eb > 0x3F800000u ? eb : 0x3F800000u;        /* e >= 0 */
    const uint32_t cb = eb + 0x0B400000u;            /* C = 1.5 * 2^(e+22) */
    const uint32_t n = fp4_qz_bits(fp4_qz_add(fp4_qz_float(ab), fp4_qz_float(cb))) - cb;
    return n + (eb >> 22) - 254u; /* (eb >> 22) = 2 * (e + 127) */
}

/* The quantizer's hot path: E2M1 magnitude code of a >= 0 (+Inf included)
 * with floating-point operations only (no integer or compare instructions,
 * which share the GPU's half-rate ALU pipe), returned as the float 2^23 + code
 * (bit pattern 0x4B000000 + code). The code is RN(g(a)), g piecewise linear:
 * 2a on [0, 2], a + 2 on [2, 4], a/2 + 4 on [4, 6], 7 above. Three saturated
 * FMAs give its pieces w = min(a,2)/2, v = (clamp(a,2,4) - 2)/2 and
 * u = (clamp(a,4,6) - 4)/2, all exact (a/2 is exact; the subtractions are
 * exact by Sterbenz; tiny a only round inside a piece that rounds to 0), and
 * at most one of them lies strictly inside (0, 1). Adding u, 2v, 4w in turn
 * to 2^23 (ulp 1) rounds only that one piece, to the nearest integer with
 * ties to even (what is added before it is an even integer, what comes after
 * it an exact integer): RN(4w) on [0, 2] is the E2M1 rounding there (spacing
 * 0.5: ties 0.25, 0.75, 1.25, 1.75 go to even codes), 4 + RN(2v) on [2, 4] (ties 2.5 -> 4,
 * 3.5 -> 6), 6 + RN(u) on [4, 6] (5 -> 6), and 7 above 6. */
FP4_QZ_FN float fp4_qz_e2m1_biased(float a)
{
    const float w = fp4_qz_fma_sat(a, 0.5f, 0.0f);
    const float v = fp4_qz_fma_sat(a, 0.5f, -1.0f);
    const float u = fp4_qz_fma_sat(a, 0.5f, -2.0f);
    const float r = fp4_qz_add(u, 8388608.0f); /* 2^23 + RN(u) */
    return fp4_qz_fma(w, 4.0f, fp4_qz_fma(v, 2.0f, r));
}

#endif
