/* Device helpers of the two grouped MoE kernels (moe.cu, moe_wide.cu): the
 * bf16 scale arithmetic of the packed weights, the exact dequantization of
 * NVFP4 activations to bf16 (both paths' prepasses), the walk over the work
 * units and the 8-value bf16 store. Include from .cu files only. */
#ifndef FP4_SM90_MOE_DEVICE_CUH
#define FP4_SM90_MOE_DEVICE_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>

#include "kernels/sm90/device.cuh"

/* bf16 constants: 2^127, 2^111 (scale pattern e4m3 x 2^-120 -> e4m3 x 2^118), 2^120 */
#define BF16X2_2P127 0x7F007F00u
#define BF16X2_2P111 0x77007700u
#define BF16X2_2P120 0x7B807B80u

/* Walk state of warp 0: the first expert not yet passed, and the first unit and
 * chunk index of that expert. */
typedef struct moe_walk {
    int e;
    long long ubase;
    int cbase;
} moe_walk;

static __device__ __forceinline__ uint32_t bf2_mul(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

/* a * (s.lo, s.lo) and a * (s.hi, s.hi): written with b16 moves so that ptxas
 * folds the broadcast into HMUL2's operand selector (.H0_H0 / .H1_H1) */
static __device__ __forceinline__ uint32_t bf2_mul_lo(uint32_t a, uint32_t s)
{
    uint32_t d;
    asm("{\n\t.reg .b16 l, h;\n\t.reg .b32 b;\n\tmov.b32 {l, h}, %2;\n\tmov.b32 b, {l, l};\n\t"
        "mul.rn.bf16x2 %0, %1, b;\n\t}"
        : "=r"(d) : "r"(a), "r"(s));
    return d;
}

static __device__ __forceinline__ uint32_t bf2_mul_hi(uint32_t a, uint32_t s)
{
    uint32_t d;
    asm("{\n\t.reg .b16 l, h;\n\t.reg .b32 b;\n\tmov.b32 {l, h}, %2;\n\tmov.b32 b, {h, h};\n\t"
        "mul.rn.bf16x2 %0, %1, b;\n\t}"
        : "=r"(d) : "r"(a), "r"(s));
    return d;
}

/* Two scale bytes (k-step pair word w: byte 0 row g / even, 1 row g / odd, 2 row
 * g+8 / even, 3 row g+8 / odd) -> bf16x2 (row g, row g+8) of scale x 2^118 for
 * the even and the odd k-step. (b & 0x7F) << 4 as a bf16 is e4m3 x 2^-120,
 * subnormal scales included; two exact multiplies lift it into range. */
static __device__ __forceinline__ void scale_pair(uint32_t w, uint32_t *even, uint32_t *odd)
{
    *even = bf2_mul(bf2_mul((w << 4) & 0x07F007F0u, BF16X2_2P127), BF16X2_2P111);
    *odd = bf2_mul(bf2_mul((w >> 4) & 0x07F007F0u, BF16X2_2P127), BF16X2_2P111);
}

static __device__ __forceinline__ float moe_e2m1_float(uint32_t c)
{
    const uint32_t m = c & 7u;
    const float v = m < 4u ? 0.5f * (float)m : (m == 4u ? 2.0f : m == 5u ? 3.0f : m == 6u ? 4.0f : 6.0f);
    return (c & 8u) ? -v : v;
}

static __device__ __forceinline__ float moe_e4m3_float(uint32_t b)
{
    const uint32_t e = (b >> 3) & 15u, m = b & 7u;
    float v;
    if (e == 15u && m == 7u) v = __int_as_float(0x7FC00000);
    else if (e == 0u) v = ldexpf((float)m, -9);
    else v = ldexpf((float)(8u + m), (int)e - 10);
    return (b & 0x80u) ? -v : v;
}

/* One 16-value NVFP4 block (codes c: byte q holds k 2q in its low nibble, 2q + 1
 * in its high one; s its decoded scale) -> 8 bf16 pairs in k order. Exact:
 * E2M1 x E4M3 has at most 6 significant bits and fits a bf16. */
static __device__ __forceinline__ void moe_block16_bf16(uint2 c, float s, uint32_t *w)
{
#pragma unroll
    for (int q = 0; q < 8; q++) {
        const uint32_t byte = ((q < 4 ? c.x : c.y) >> (8 * (q & 3))) & 0xFFu;
        const __nv_bfloat162 v =
            __floats2bfloat162_rn(moe_e2m1_float(byte) * s, moe_e2m1_float(byte >> 4) * s);
        memcpy(&w[q], &v, 4);
    }
}

/* The chunks of `tok` tokens of an expert of cnt tokens on a path that takes
 * the experts of [lo, hi) tokens (the two paths split the experts by their
 * token counts); none outside. */
static __device__ __forceinline__ int moe_expert_chunks(int cnt, int tok, int lo, int hi)
{
    return cnt >= lo && cnt < hi ? (cnt + tok - 1) / tok : 0;
}

/* Warp 0: unit u (>= every unit found before) -> expert, chunk, row block,
 * split, global chunk index; all lanes get the same values. Units are
 * ordered by expert, then row block and split, then chunk (chunks of one
 * weight block are neighbours, so their weight reads meet in L2). off: the
 * E + 1 expert offsets; an expert of cnt tokens in [lo, hi) has ceil(cnt /
 * tok) chunks, each with RB x S units; the others have none. */
static __device__ void moe_find_unit(const int32_t *off, int E, int RB, int S, int tok, int lo,
                                     int hi, long long u, moe_walk *w, int lane, int out[5])
{
    const long long per = (long long)RB * S; /* units per chunk */
    for (;;) {
        const int e = w->e + lane;
        const int cnt = e < E ? off[e + 1] - off[e] : 0;
        const int ch = moe_expert_chunks(cnt, tok, lo, hi);
        int incl = ch;
        for (int d = 1; d < 32; d <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= d) incl += v;
        }
        const int tot = __shfl_sync(0xffffffffu, incl, 31);
        if (u < w->ubase + (long long)tot * per) {
            const unsigned hit = __ballot_sync(0xffffffffu, u < w->ubase + (long long)incl * per);
            const int l = __ffs(hit) - 1;
            const int before = __shfl_sync(0xffffffffu, incl - ch, l);
            const int chunks = __shfl_sync(0xffffffffu, ch, l);
            w->e += l;
            w->ubase += (long long)before * per;
            w->cbase += before;
            const long long local = u - w->ubase;
            const int chunk = (int)(local % chunks);
            const long long rest = local / chunks;
            out[0] = w->e;
            out[1] = chunk;
            out[2] = (int)(rest / S);
            out[3] = (int)(rest % S);
            out[4] = w->cbase + chunk;
            return;
        }
        w->ubase += (long long)tot * per;
        w->cbase += tot;
        w->e += 32;
    }
}

/* Warp 0: the chunks of all experts of [lo, hi) tokens (moe_expert_chunks). */
static __device__ int moe_total_chunks(const int32_t *off, int E, int tok, int lo, int hi,
                                       int lane)
{
    int sum = 0;
    for (int e0 = 0; e0 < E; e0 += 32) {
        const int e = e0 + lane;
        if (e < E) sum += moe_expert_chunks(off[e + 1] - off[e], tok, lo, hi);
    }
    for (int d = 16; d > 0; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    return sum;
}

/* D[m, n..n+7] (8 sums v, row of pair drow) as bf16 */
static __device__ __forceinline__ void moe_store8(uint16_t *d, size_t drow, int N, int n,
                                                  const float *v, float alpha, int vec)
{
    uint16_t *dp = d + drow * (size_t)N + n;
    if (vec && n + 8 <= N) {
        uint32_t w[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * q] * alpha, v[2 * q + 1] * alpha);
            memcpy(&w[q], &h, 4);
        }
        *(uint4 *)dp = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
        /* a whole uint16_t store: ptxas 13.0 turns a 2-byte memcpy of a bf16
         * into byte stores whose low byte is a float-to-integer conversion
         * (F2I.U8.F16) of the value, not its bits */
        for (int q = 0; q < 8 && n + q < N; q++)
            dp[q] = __bfloat16_as_ushort(__float2bfloat16_rn(v[q] * alpha));
    }
}

#endif
