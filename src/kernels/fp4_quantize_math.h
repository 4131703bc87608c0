/* The two pieces of arithmetic the GPU quantizer does differently from the
 * specification (src/format/nvfp4.c), written once for host and device so
 * that a CPU test (tests/test_w4a4.c) can check them exhaustively against
 * the specification's own operations:
 *   fp4_qz_div6(bm)   == bm / 6 for every bf16 magnitude bm (all 2^15 checked)
 *   fp4_qz_e2m1_mag(a) == fp4_e2m1_encode(a) for every float a >= 0
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

#endif
