/* The k permutation of the swizzled fp16 tiles (v8's weight prepass, v9 /
 * v11's token prepass; fp4_sm90_prefill5.cu p5_perm) as one word operation,
 * shared by a kernel and its CPU test (C and CUDA).
 *
 * Chunk c (0..7) of a row's k-step of 64 holds positions 8c..8c+7, and
 * position 8c + 2r + h is k = 16r + 8(c & 1) + (c >> 1) + 4h of the step, in
 * k-block r. blk[r] is k-block r of the row as one little-endian 64-bit word
 * (16 nibbles, k-block offset o at bits 4o..4o+3). The result holds the
 * nibble of position (r, h) at bits 4(r + 4h)..4(r + 4h) + 3 (the code word
 * wg_b_word converts). */
#ifndef FP4_SM90_TOKPERM_H
#define FP4_SM90_TOKPERM_H

#include <stdint.h>

#ifdef __CUDACC__
#define FP4_TOKPERM_FN static __host__ __device__ __forceinline__
#else
#define FP4_TOKPERM_FN static inline
#endif

FP4_TOKPERM_FN uint32_t fp4_tokperm_word(const uint64_t blk[4], int c)
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

#endif
