/* Device helpers shared by the fp4-sm90 kernels (the decode families and
 * prefill): the nibble -> fp16x2 dequantization, the scale conversion, the
 * fp16 MMA, streaming loads, the swizzled scale offset, the red.global
 * add, the split-K "last block" epilogue (v4, v6), one k-step of the
 * k-permuted layout (v4, v10) and the cluster primitives (v3, v10). Include
 * from .cu files only. */
#ifndef FP4_SM90_DEVICE_CUH
#define FP4_SM90_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/fp4_sm90_nibbles.h"


/* fp16x2 pattern of the two nibbles at bits 4r..4r+3 (low half) and
 * 16+4r..16+4r+3 (high half) of x: the e2m1 value times 2^-14 (15
 * operations for the four r of a word; fp4_nib_pairs4 makes all four in 11:
 * fp4_sm90_nibbles.h). r is a compile-time constant after unrolling. */
static __device__ __forceinline__ uint32_t dq_nib2(uint32_t x, int r) { return fp4_nib_pair(x, r); }

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

static __device__ __forceinline__ void mma_f16_16816(float *c, uint32_t a0, uint32_t a1,
                                                     uint32_t a2, uint32_t a3, uint32_t b0,
                                                     uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* 16-byte streaming load: read once, keep it out of L1. */
static __device__ __forceinline__ uint4 ldg_stream16(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* An L2 policy that evicts first, for weights read once a call: they should not
 * push out of L2 what the next kernels reuse (activations, the KV cache). */
static __device__ __forceinline__ uint64_t l2_evict_first_policy(void)
{
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

/* ldg_stream16 with an L2 cache policy (l2_evict_first_policy) */
static __device__ __forceinline__ uint4 ldg_stream16_hint(const uint4 *p, uint64_t pol)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol));
    return v;
}

static __device__ __forceinline__ uint32_t ldg_stream4(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

static __device__ __forceinline__ uint32_t u4_at(const uint4 &v, int j)
{
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
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

static __device__ __forceinline__ uint32_t ldg_stream2(const uint16_t *p)
{
    unsigned short v;
    asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

/* byte b of x in bits 0..7 and 16..23, as sf2_to_h2 wants after its shift */
static __device__ __forceinline__ uint32_t sf_pair(uint32_t x, int b)
{
    return sf2_to_h2(__byte_perm(x, 0, b == 0 ? 0x4040 : 0x4141) << 7);
}

static __device__ __forceinline__ void red_add4(float *p, float4 v)
{
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y),
                 "f"(v.z), "f"(v.w)
                 : "memory");
}

/* a counter other CTAs release into (after their __threadfence): acquire, so
 * that their earlier stores are visible to this CTA once it reads the value */
static __device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* The k-permuted decode layout (v4, v6, v7; fp4_sm90_decode4.cu): in a k-step
 * of 64, lane (g, t) holds k-block 4 ks + t of weight rows g and g + 8 (16
 * code bytes w: row g in w.x, w.y, row g + 8 in w.z, w.w) and of token g (one
 * 8-byte code word q). kperm_a_frag: the A registers of MMA j (0..3) of the
 * k-step, sg / sg8 the scale pairs of rows g and g + 8 (sf_pair). */
static __device__ __forceinline__ void kperm_a_frag(const uint32_t (&pg)[2][4],
                                                    const uint32_t (&p8)[2][4], uint32_t sg,
                                                    uint32_t sg8, int j, uint32_t a[4])
{
    const int r0 = 2 * (j & 1), h = j >> 1;
    a[0] = hmul2_u32(pg[h][r0], sg);
    a[1] = hmul2_u32(p8[h][r0], sg8);
    a[2] = hmul2_u32(pg[h][r0 + 1], sg);
    a[3] = hmul2_u32(p8[h][r0 + 1], sg8);
}

/* the nibble pairs of a lane's 16 weight code bytes (fp4_nib_pairs4): pg[0]
 * from w.x, pg[1] w.y (row g), p8 from w.z, w.w (row g + 8) */
static __device__ __forceinline__ void kperm_pairs(const uint4 &w, uint32_t (&pg)[2][4],
                                                   uint32_t (&p8)[2][4])
{
    fp4_nib_pairs4(w.x, pg[0]);
    fp4_nib_pairs4(w.y, pg[1]);
    fp4_nib_pairs4(w.z, p8[0]);
    fp4_nib_pairs4(w.w, p8[1]);
}

/* A token's 8 B-fragment words of one k-step (same layout): b[r] = nibbles
 * (r, r + 4) of q.x, b[4 + r] those of q.y, times the scale pair sc; MMA j
 * takes b[4 (j >> 1) + 2 (j & 1)] and the next. */
static __device__ __forceinline__ void kperm_b_frag(const uint2 &q, uint32_t sc, uint32_t b[8])
{
    uint32_t px[4], py[4];
    fp4_nib_pairs4(q.x, px);
    fp4_nib_pairs4(q.y, py);
#pragma unroll
    for (int r = 0; r < 4; r++) {
        b[r] = hmul2_u32(px[r], sc);
        b[4 + r] = hmul2_u32(py[r], sc);
    }
}

/* One k-step of the k-permuted layout for RT weight tiles and NT token
 * tiles of a lane: w / ws its weight words and scale pairs (RT), q / qs its
 * token words and scale bytes (NT); acc[i][n] the m16n8 sums of tile i x
 * token tile n. The token fragments are converted once for all RT tiles. */
template <int RT, int NT>
static __device__ __forceinline__ void kperm_kstep_mma(const uint4 *w, const uint32_t *ws,
                                                       const uint2 *q, const uint32_t *qs,
                                                       float (*acc)[NT][4])
{
    uint32_t bt[NT][8];
#pragma unroll
    for (int n = 0; n < NT; n++) kperm_b_frag(q[n], sf_pair(qs[n], 0), bt[n]);
#pragma unroll
    for (int i = 0; i < RT; i++) {
        const uint32_t sg = sf_pair(ws[i], 0), sg8 = sf_pair(ws[i], 1);
        uint32_t pg[2][4], p8[2][4];
        kperm_pairs(w[i], pg, p8);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t a[4];
            kperm_a_frag(pg, p8, sg, sg8, j, a);
            const int b0 = 4 * (j >> 1) + 2 * (j & 1);
#pragma unroll
            for (int n = 0; n < NT; n++)
                mma_f16_16816(acc[i][n], a[0], a[1], a[2], a[3], bt[n][b0], bt[n][b0 + 1]);
        }
    }
}

/* A warp's sums acc[RT][NT] -> its tile mine[token][row] (row stride rs) in
 * shared memory, for the block's reduction over warps. */
template <int RT, int NT>
static __device__ __forceinline__ void kperm_acc_to_smem(const float (*acc)[NT][4], float *mine,
                                                         int rs, int lane)
{
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < RT; i++)
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int row = 16 * i + g, tok = 8 * n + 2 * t;
            mine[tok * rs + row] = acc[i][n][0];
            mine[(tok + 1) * rs + row] = acc[i][n][1];
            mine[tok * rs + row + 8] = acc[i][n][2];
            mine[(tok + 1) * rs + row + 8] = acc[i][n][3];
        }
}

/* Sum of the float4 at offset off of nw consecutive warp tiles of `stride` floats. */
static __device__ __forceinline__ float4 sum_warp_tiles4(const float *red, int nw, int stride,
                                                         int off)
{
    float4 v = *(const float4 *)(red + off);
    for (int w = 1; w < nw; w++) {
        const float4 x = *(const float4 *)(red + (size_t)w * stride + off);
        v.x += x.x;
        v.y += x.y;
        v.z += x.z;
        v.w += x.w;
    }
    return v;
}

/* ---- thread-block clusters (sm_90) ---------------------------------------------- */

static __device__ __forceinline__ void cluster_sync_all(void)
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

static __device__ __forceinline__ uint32_t cluster_rank(void)
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

/* the float4 at this block's shared address local_addr in the block of rank `rank` */
static __device__ __forceinline__ float4 ld_dsmem4(uint32_t local_addr, uint32_t rank)
{
    uint32_t ra;
    float4 v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(local_addr), "r"(rank));
    asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(ra));
    return v;
}

/* The sum over the S (<= 8) blocks of this block's cluster of the float4 at
 * shared address off in each (distributed shared memory): all S remote loads
 * are issued before the first add (one DSMEM round trip). */
static __device__ __forceinline__ float4 cluster_sum4(uint32_t off, int S)
{
    float4 p[8];
#pragma unroll
    for (int r = 0; r < 8; r++)
        p[r] = r < S ? ld_dsmem4(off, (uint32_t)r) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 v = p[0];
#pragma unroll
    for (int r = 1; r < 8; r++) {
        v.x += p[r].x;
        v.y += p[r].y;
        v.z += p[r].z;
        v.w += p[r].w;
    }
    return v;
}

/* Split K across blocks, after every block added its fp32 partial tile
 * [TOK tokens][ROWS rows] into ws [m][Np] with red_add4: the last block of the
 * tile to arrive (arrival counter *cnt) writes bf16 D and re-zeroes its
 * workspace tile and the counter, so the launch is graph-replayable with no
 * memset. Every thread of the block calls it; s_last is a __shared__ int. */
static __device__ __forceinline__ void splitk_last_block(float *ws, unsigned *cnt,
                                                         __nv_bfloat16 *d, int S, int m0, int n0,
                                                         int TOK, int ROWS, int M, int N, int Np,
                                                         float alpha, int *s_last)
{
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) *s_last = atomicAdd(cnt, 1u) == (unsigned)(S - 1);
    __syncthreads();
    if (!*s_last) return;
    __threadfence();
    const int C4 = ROWS / 4, E4 = TOK * C4;
    for (int e = threadIdx.x; e < E4; e += blockDim.x) {
        const int tok = e / C4, c4 = (e - tok * C4) * 4;
        const int m = m0 + tok, n = n0 + c4;
        float4 *wp = (float4 *)(ws + (size_t)m * Np + n);
        const float4 v = __ldcg(wp);
        __stcg(wp, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
        if (m < M && n < N) store_bf16x4(d, m, n, N, v, alpha, (N & 3) == 0);
    }
    if (threadIdx.x == 0) *cnt = 0u;
}

#endif
