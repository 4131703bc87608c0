/* Device helpers shared by the fp4-sm90 kernels: the fp16x2 multiply, the
 * UE4M3 scale -> fp16 conversion, streaming loads, the swizzled scale
 * offset, the bf16 store of four sums, an acquiring load and the ordering
 * term of the register rings. Include from .cu files only. */
#ifndef FP4_SM90_DEVICE_CUH
#define FP4_SM90_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/sm90/nibbles.h"

static __device__ __forceinline__ uint32_t hmul2_u32(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

/* Two UE4M3 bytes at bits 0..7 and 16..23 of x (after the caller's shift)
 * -> fp16x2 of scale * 2^7 (exact: <= 448 * 128 = 57344). The shifted byte is
 * scale * 2^-8 as an fp16 pattern; times 2^15. */
static __device__ __forceinline__ uint32_t sf2_to_h2(uint32_t x_shifted_by_7)
{
    return hmul2_u32(x_shifted_by_7 & 0x3F803F80u, 0x78007800u);
}

/* streaming loads: read once, kept out of L1 */
static __device__ __forceinline__ uint4 ldg_stream16(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

static __device__ __forceinline__ uint32_t ldg_stream4(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

/* 0, from a fold of the words a register-ring slot delivered and a kernel
 * argument that is always 0. Added to the next loads' index, it makes them
 * wait for that slot, and pins where they issue: ptxas otherwise moves the
 * ring's loads and counts them on one scoreboard with the slot's (in SASS, a
 * ring written 3 k-steps ahead was waited on 1 to 2 k-steps after its loads). */
static __device__ __forceinline__ int ring_after(uint32_t fold, int zero)
{
    return (int)(fold & (uint32_t)zero);
}

/* Swizzled scale offset (format.h fp4_swizzle_offset). */
static __device__ __forceinline__ size_t swz_off(int64_t r, int64_t kb, int64_t kbp)
{
    return (size_t)(r >> 7) * (size_t)(kbp >> 2) * 512 + (size_t)(kb >> 2) * 512 +
           (size_t)(r & 31) * 16 + (size_t)((r >> 5) & 3) * 4 + (size_t)(kb & 3);
}

/* D[m, n..n+3] = bf16(v * alpha): one 8-byte store when vec (N % 4 == 0 and
 * n % 4 == 0), else element by element up to column N. */
static __device__ __forceinline__ void store_bf16x4(__nv_bfloat16 *d, int m, int n, int N,
                                                    float4 v, float alpha, bool vec)
{
    __nv_bfloat16 *dp = d + (size_t)m * N + n;
    if (vec) {
        __nv_bfloat162 p0 = __floats2bfloat162_rn(v.x * alpha, v.y * alpha);
        __nv_bfloat162 p1 = __floats2bfloat162_rn(v.z * alpha, v.w * alpha);
        uint2 pk;
        memcpy(&pk.x, &p0, 4);
        memcpy(&pk.y, &p1, 4);
        *(uint2 *)dp = pk;
    } else {
        const float vv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int q = 0; q < 4; q++)
            if (n + q < N) dp[q] = __float2bfloat16_rn(vv[q] * alpha);
    }
}

/* a counter other CTAs release into (after their __threadfence): acquire, so
 * that their earlier stores are visible to this CTA once it reads the value */
static __device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

#endif
