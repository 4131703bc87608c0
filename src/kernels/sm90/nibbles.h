/* E2M1 nibbles -> fp16 bit patterns, the innermost step of every fp4-sm90
 * kernel's dequantization, and the k permutation of the token prepass, written
 * once for host and device so that a CPU test (tests/test_sm90_host.c) checks
 * the fast forms against the plain ones and against the format's decode.
 *
 * A nibble s e1 e0 m becomes the fp16 pattern s 0 0 0 e1 e0 m 0...0 (sign at
 * bit 15, e1 e0 m at bits 11..9): the e2m1 value times 2^-14, exact (e = 0,
 * m = 1 is the fp16 subnormal 2^-15 = 0.5 x 2^-14). The kernels multiply it
 * by an fp16 scale (scale x 2^7) so the products carry 2^-7.
 *
 * fp4_nib_pair(x, r): the fp16x2 pattern of nibbles r (low half) and r + 4
 * (high half) of the 32-bit code word x (nibble i at bits 4i..4i+3), r in
 * 0..3: two shifts and two masks (the sign and the magnitude move by
 * different distances).
 *
 * fp4_nib_pairs4(x, o): all four pairs of x, o[r] == fp4_nib_pair(x, r),
 * in 11 operations instead of 15: rotating x left by 3 puts every nibble's
 * sign 6 bits above its magnitude's lowest bit, as in fp16 (3 + 3, bit 15 vs
 * 9); merging the rotated word with x under a mask keeps the magnitudes of
 * the low nibbles of each byte (even: 0x07070707) or the high ones (odd:
 * 0x70707070) with their moved signs, which then land on the free bits of
 * the next nibble. Each pair is then one shift (a rotate for pair 3, whose
 * high sign wrapped to bit 2) and one mask. */
#ifndef FP4_SM90_NIBBLES_H
#define FP4_SM90_NIBBLES_H

#include <stdint.h>

#ifdef __CUDACC__
#define FP4_NIB_FN static __host__ __device__ __forceinline__
#else
#define FP4_NIB_FN static inline
#endif

#define FP4_NIB_FP16_MASK 0x8E008E00u /* sign and e1 e0 m of both halves */

FP4_NIB_FN uint32_t fp4_nib_pair(uint32_t x, int r)
{
    const uint32_t mag = (r <= 2 ? (x << (9 - 4 * r)) : (x >> (4 * r - 9))) & 0x0E000E00u;
    const uint32_t sgn = (x << (12 - 4 * r)) & 0x80008000u;
    return mag | sgn;
}

FP4_NIB_FN uint32_t fp4_nib_rotl(uint32_t x, int n)
{
#ifdef __CUDA_ARCH__
    return __funnelshift_l(x, x, n);
#else
    return (x << n) | (x >> (32 - n));
#endif
}

FP4_NIB_FN uint32_t fp4_nib_rotr(uint32_t x, int n)
{
#ifdef __CUDA_ARCH__
    return __funnelshift_r(x, x, n);
#else
    return (x >> n) | (x << (32 - n));
#endif
}

FP4_NIB_FN void fp4_nib_pairs4(uint32_t x, uint32_t o[4])
{
    const uint32_t rot = fp4_nib_rotl(x, 3);                     /* sign of nibble i at 4i + 6 */
    const uint32_t even = (x & 0x07070707u) | (rot & ~0x07070707u); /* one LOP3 */
    const uint32_t odd = (x & 0x70707070u) | (rot & ~0x70707070u);  /* one LOP3 */
    o[0] = (even << 9) & FP4_NIB_FP16_MASK;            /* nibbles 0, 4: bits 0..2 -> 9..11 */
    o[1] = (odd << 5) & FP4_NIB_FP16_MASK;             /* nibbles 1, 5: bits 4..6 -> 9..11 */
    o[2] = (even << 1) & FP4_NIB_FP16_MASK;            /* nibbles 2, 6: bits 8..10 -> 9..11 */
    o[3] = fp4_nib_rotr(odd, 3) & FP4_NIB_FP16_MASK;   /* nibbles 3, 7: 12..14 -> 9..11,
                                                          nibble 7's sign from bit 2 to 31 */
}


/* The k permutation of the swizzled fp16 tiles (the prepasses of prefill.cu
 * and mid.cu) as one word operation. Chunk c (0..7) of a row's k-step of 64
 * holds positions 8c..8c+7, and position 8c + 2r + h is k = 16r + 8(c & 1) +
 * (c >> 1) + 4h of the step, in k-block r. blk[r] is k-block r of the row as
 * one little-endian 64-bit word (16 nibbles, k-block offset o at bits
 * 4o..4o+3). The result holds the nibble of position (r, h) at bits
 * 4(r + 4h)..4(r + 4h) + 3 (the code word wg_b_word converts). */
FP4_NIB_FN uint32_t fp4_tokperm_word(const uint64_t blk[4], int c)
{
    const int o0 = 8 * (c & 1) + (c >> 1); /* k-block offset of h = 0; h = 1 is o0 + 4 */
    uint32_t w = 0;
    for (int r = 0; r < 4; r++) {
        const uint64_t x = blk[r] >> (4 * o0);
        w |= ((uint32_t)x & 0xFu) << (4 * r);              /* h = 0 */
        w |= ((uint32_t)(x >> 16) & 0xFu) << (4 * (r + 4)); /* h = 1: offset o0 + 4 */
    }
    return w;
}

/* ---- the bf16 value layout (moe.cu's packed weights) ---------------------------
 * Eight E2M1 codes re-encoded by the packer so that one 32-bit word decodes into
 * four bf16x2 patterns with 5 LOP3s and 4 shifts: each pattern holds the sign at
 * bit 15 and e1 e0 m at bits 8..6 (of each half), which as a bf16 is the e2m1
 * value times 2^-126 (e = 0, m = 1 is the bf16 subnormal 2^-127). Pair r holds
 * codes 2r (low half) and 2r + 1 (high half). Three pairs are one shift and one
 * mask each (shifts 0, 4 and a rotate by 10: translates of the pattern that do
 * not overlap); no fourth translate fits the 8 bits left (checked exhaustively),
 * so the last pair takes its e1 bits from a second shift: 2 masks. 5 LOP3 for 8
 * weights, the shifts on the FMA pipe where the compiler uses IMAD. */
#define FP4_NIB_BF16_MASK 0x81C081C0u   /* sign and e1 e0 m of both halves */
#define FP4_NIB_BF16_P3_SHL6 0x80C080C0u /* pair 3: sign, e0, m from x << 6 */
#define FP4_NIB_BF16_P3_SHR2 0x01000100u /* pair 3: e1 from x >> 2 */

FP4_NIB_FN void fp4_nib_bf16_pairs(uint32_t x, uint32_t o[4])
{
#ifdef __CUDA_ARCH__
    /* the rotate as a widening multiply (both halves OR-ed inside the mask's
     * LOP3) and the right shift as a high multiply: integer multiplies run on
     * the FMA pipe, so the ALU pipe sees only the 5 LOP3s */
    uint32_t lo, hi, sh;
    asm("{\n\t.reg .b64 w;\n\tmul.wide.u32 w, %2, 1024;\n\tmov.b64 {%0, %1}, w;\n\t}"
        : "=r"(lo), "=r"(hi) : "r"(x));
    asm("mul.hi.u32 %0, %1, 0x40000000;" : "=r"(sh) : "r"(x));
    o[2] = (lo | hi) & FP4_NIB_BF16_MASK;
    o[3] = ((x << 6) & FP4_NIB_BF16_P3_SHL6) | (sh & FP4_NIB_BF16_P3_SHR2);
#else
    o[2] = fp4_nib_rotl(x, 10) & FP4_NIB_BF16_MASK;
    o[3] = ((x << 6) & FP4_NIB_BF16_P3_SHL6) | ((x >> 2) & FP4_NIB_BF16_P3_SHR2);
#endif
    o[0] = x & FP4_NIB_BF16_MASK;
    o[1] = (x << 4) & FP4_NIB_BF16_MASK;
}

/* Where bit `out_bit` (0..31) of decoded pair r comes from in the packed word:
 * the inverse of the shifts above. */
FP4_NIB_FN int fp4_nib_bf16_src_bit(int r, int out_bit)
{
    switch (r) {
    case 0: return out_bit;
    case 1: return out_bit - 4;
    case 2: return (out_bit + 22) & 31; /* rotate left by 10 */
    default: return (out_bit & 15) == 8 ? out_bit + 2 : out_bit - 6;
    }
}

/* The packed word of eight codes (c[i] in the low 4 bits: sign, e1, e0, m). */
FP4_NIB_FN uint32_t fp4_nib_bf16_pack(const uint8_t c[8])
{
    uint32_t x = 0;
    for (int i = 0; i < 8; i++) {
        const int r = i >> 1, base = 16 * (i & 1);
        const int field_bit[4] = {6, 7, 8, 15}; /* m, e0, e1, sign */
        for (int f = 0; f < 4; f++)
            x |= (uint32_t)((c[i] >> f) & 1u) << fp4_nib_bf16_src_bit(r, base + field_bit[f]);
    }
    return x;
}

#endif
