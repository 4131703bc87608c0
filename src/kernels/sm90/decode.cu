/* fp4-sm90 "decode": NVFP4 x NVFP4 -> bf16 GEMM for small M on Hopper
 * (kernel fp4_sm90_decode_kernel).
 *
 * - Swap AB: the weights are the 16-row side of mma.sync m16n8k16, the tokens
 *   the 8-wide side; fp16 products (exact, fp4_sm90.h), fp32 sums.
 * - k permutation chosen for contiguity: in a k-step of 64, lane (g, t) owns
 *   k-block 4*ks + t (16 consecutive k, ONE scale) of weight rows g and g+8
 *   and of token g. Its 16 values of a row are two 32-bit words w0 (k 0..7),
 *   w1 (k 8..15); fp4_nib_pairs4 yields the pairs (k r, k r+4). MMA j of the
 *   k-step takes pairs r = 2(j&1), 2(j&1)+1 of word j>>1, for both operands
 *   (a0/a2: row g, a1/a3: row g+8; b0/b1: token g). So a lane's token
 *   fragment is ONE 8-byte load of A's codes plus one scale byte, straight
 *   from the activation layout: no shared-memory staging.
 * - Packed weights (fp4_sm90_decode_pack_b): [tile of 16 rows][k-step][lane]
 *   16 bytes (row g's 8 bytes, then row g+8's), [tile][k-step][lane] 2 scale
 *   bytes (row g, row g+8). One 512-byte coalesced load per tile and k-step.
 * - A warp covers RT tiles (16*RT rows: the token conversion is shared by
 *   them) and a contiguous K range of a block's split; loads run a stage of
 *   KPS k-steps ahead in a register ring of two stages. KPS = 2 for chunks
 *   of 4 token tiles where the grid is one block per SM (the registers allow
 *   no second), else 1; at 2 each stage's loads are ordered after the
 *   previous stage's words (ring_after: without it ptxas waited on a deeper
 *   ring's loads right after issuing them) and the token loads predicated.
 *   8 warps a block split the block's K range; grid = row blocks x K splits x
 *   token chunks, sized for about two blocks per SM (one from 32 row blocks
 *   up).
 * - Small N x K at 1-16 tokens (every 16-row tile a block, 16 to the SM
 *   count of them, at most 12 k-steps a warp at 1-8 tokens and 6 at 9-16):
 *   no ring and no K split. Each warp of a tile's block issues the loads of
 *   all its k-steps at once, then runs their math (d4_stream_burst); the
 *   block's reduction writes D. One memory latency instead of the ring's
 *   chain of them, and no reduction through L2.
 * - Reduction: warps through shared memory (one barrier). For chunks of 4
 *   token tiles, K splits of up to 8 run as one thread-block cluster a tile
 *   (the splits along grid y): each
 *   block leaves its tile in shared memory, and after a cluster barrier each
 *   sums its share of the tile over the cluster's blocks (distributed shared
 *   memory, in split order) and writes bf16 D; a second cluster barrier keeps
 *   every tile alive until read. This replaces the chain of L2 round trips
 *   of the global reduction (fence, counter, read-back). Smaller chunks
 *   (clusters of 4 blocks of 64 rows measured slower), more splits, or a GPU
 *   that cannot hold the clusters at once, take the global way:
 *   red.global.add.v4.f32 into an fp32 workspace and a per-tile arrival
 *   counter; the last block writes bf16 D and re-zeroes its workspace tile
 *   and counter (graph-replayable, one launch). One split writes D directly.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_check.h"
#include "fp4/format.h"
#include "kernels/sm90/device.cuh"
#include "kernels/sm90/fp4_sm90.h"

#define D4_WARPS 8
#define D4_THREADS (32 * D4_WARPS)
#define D4_NPAD 64 /* packed rows are padded to a multiple of 64 (RT <= 4) */
#define D4_MAX_CLUSTER 8 /* the portable cluster size: splits reduced in a cluster */

/* ---- device helpers of the k-permuted layout ---------------------------------------- */

static __device__ __forceinline__ void mma_f16_16816(float *c, uint32_t a0, uint32_t a1,
                                                     uint32_t a2, uint32_t a3, uint32_t b0,
                                                     uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t ldg_stream2(const uint16_t *p)
{
    unsigned short v;
    asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

/* 8 bytes / 1 byte at p where `on`, else zeros: a predicated load (p is not
 * read when off), so the token loads need no branch and keep no registers
 * live across one (a branch made ptxas spill). */
static __device__ __forceinline__ uint2 ldg_or_zero8(const void *p, int on)
{
    uint2 v;
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.s32 q, %3, 0;\n\tmov.b32 %0, 0;\n\t"
                 "mov.b32 %1, 0;\n\t@q ld.global.nc.v2.u32 {%0, %1}, [%2];\n\t}"
                 : "=r"(v.x), "=r"(v.y)
                 : "l"(p), "r"(on));
    return v;
}

static __device__ __forceinline__ uint32_t ldg_or_zero1(const void *p, int on)
{
    uint32_t v;
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.s32 q, %2, 0;\n\tmov.b32 %0, 0;\n\t"
                 "@q ld.global.nc.u8 %0, [%1];\n\t}"
                 : "=r"(v)
                 : "l"(p), "r"(on));
    return v;
}

/* the streaming loads (ldg_stream16, ldg_stream2) where `on`, else zeros */
static __device__ __forceinline__ uint4 ldg_stream16_or_zero(const uint4 *p, int on)
{
    uint4 v;
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.s32 q, %5, 0;\n\tmov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\t"
                 "mov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t"
                 "@q ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n\t}"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "r"(on));
    return v;
}

static __device__ __forceinline__ uint32_t ldg_stream2_or_zero(const uint16_t *p, int on)
{
    unsigned short v;
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.s32 q, %2, 0;\n\tmov.b16 %0, 0;\n\t"
                 "@q ld.global.nc.L1::no_allocate.u16 %0, [%1];\n\t}"
                 : "=h"(v)
                 : "l"(p), "r"(on));
    return v;
}

/* byte b of x in bits 0..7 and 16..23, as sf2_to_h2 wants after its shift */
static __device__ __forceinline__ uint32_t sf_pair(uint32_t x, int b)
{
    return sf2_to_h2(__byte_perm(x, 0, b == 0 ? 0x4040 : 0x4141) << 7);
}

/* blocks in this block's cluster: 1 when launched without clusters */
static __device__ __forceinline__ unsigned cluster_blocks(void)
{
    unsigned n;
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    return n;
}

/* the cluster's barrier: this block's shared-memory writes before it are
 * visible to the cluster's reads after it */
static __device__ __forceinline__ void cluster_sync_all(void)
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;"
                 ::: "memory");
}

/* the float4 at p (this block's shared memory) in cluster block `rank` */
static __device__ __forceinline__ float4 ld_cluster4(const float *p, int rank)
{
    uint32_t a;
    float4 v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a)
                 : "r"((uint32_t)__cvta_generic_to_shared(p)), "r"(rank));
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(a)
                 : "memory");
    return v;
}

static __device__ __forceinline__ void red_add4(float *p, float4 v)
{
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y),
                 "f"(v.z), "f"(v.w)
                 : "memory");
}

/* The k-permuted layout: in a k-step
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


/* One k-step's operands of one lane: RT weight tiles, their scales, NT token
 * fragments and their scales. */
template <int RT, int NT>
struct d4_slot {
    uint4 w[RT];
    uint32_t ws[RT];
    uint2 q[NT];
    uint32_t qs[NT];
};

/* PRED: the token loads predicated (no branch: no spills at 2 k-steps a
 * stage); else branched, which measured faster at one k-step a stage */
template <int RT, int NT, bool PRED>
static __device__ __forceinline__ void d4_load(d4_slot<RT, NT> &s, const uint4 *bq,
                                               const uint16_t *bs, const uint8_t *aq,
                                               const uint8_t *asf, int ks, int KS, int tile0,
                                               int lane, const int *mrow, int KB, int Kbp,
                                               size_t arow_bytes)
{
#pragma unroll
    for (int i = 0; i < RT; i++) {
        const size_t u = ((size_t)(tile0 + i) * KS + ks) * 32 + lane;
        s.w[i] = ldg_stream16(bq + u);
        s.ws[i] = ldg_stream2(bs + u);
    }
    const int kb = ks * 4 + (lane & 3);
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int on = mrow[n] >= 0 && kb < KB;
        if (PRED) {
            const int64_t r = on ? mrow[n] : 0;
            s.q[n] = ldg_or_zero8(aq + (size_t)r * arow_bytes + (size_t)kb * 8, on);
            s.qs[n] = ldg_or_zero1(asf + swz_off(r, kb, Kbp), on);
        } else {
            s.q[n] = make_uint2(0, 0);
            s.qs[n] = 0;
            if (on) {
                s.q[n] = __ldg((const uint2 *)(aq + (size_t)mrow[n] * arow_bytes + (size_t)kb * 8));
                s.qs[n] = __ldg(asf + swz_off(mrow[n], kb, Kbp));
            }
        }
    }
}

/* The XOR of every word a slot's loads delivered (for ring_after). */
template <int RT, int NT>
static __device__ __forceinline__ uint32_t d4_fold(const d4_slot<RT, NT> &s)
{
    uint32_t f = 0;
#pragma unroll
    for (int i = 0; i < RT; i++) f ^= s.w[i].x ^ s.w[i].y ^ s.w[i].z ^ s.w[i].w ^ s.ws[i];
#pragma unroll
    for (int n = 0; n < NT; n++) f ^= s.q[n].x ^ s.q[n].y ^ s.qs[n];
    return f;
}

template <int RT, int NT>
static __device__ __forceinline__ void d4_math(const d4_slot<RT, NT> &s, float (*acc)[NT][4])
{
    kperm_kstep_mma<RT, NT>(s.w, s.ws, s.q, s.qs, acc);
}

/* k-steps w0..w1 of one warp into acc, loads one k-step ahead in a register
 * ring of two slots (the loads follow the slot's use, so ptxas keeps them in
 * flight through the math) */
template <int RT, int NT>
static __device__ __forceinline__ void d4_stream_ring1(float (*acc)[NT][4], const uint4 *bq,
                                                       const uint16_t *bs, const uint8_t *aq,
                                                       const uint8_t *asf, int w0, int w1, int KS,
                                                       int tile0, int lane, const int *mrow, int KB,
                                                       int Kbp, size_t arow)
{
    d4_slot<RT, NT> slot[2];
    if (w0 < w1) d4_load<RT, NT, false>(slot[0], bq, bs, aq, asf, w0, KS, tile0, lane, mrow, KB, Kbp, arow);
    for (int s = w0; s < w1; s += 2) {
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int ks = s + u;
            if (ks < w1) {
                if (ks + 1 < w1)
                    d4_load<RT, NT, false>(slot[u ^ 1], bq, bs, aq, asf, ks + 1, KS, tile0, lane, mrow,
                                           KB, Kbp, arow);
                d4_math<RT, NT>(slot[u], acc);
            }
        }
    }
}

/* The same with two stages of 2 k-steps: stage h's math runs while the
 * other's loads are in flight. Each stage's loads are ordered after the
 * previous stage's words (ring_after, zero = 0): without it ptxas waited on
 * the deeper ring's loads right after issuing them. A stage's k-steps past
 * w1 re-read the last one (an L2 hit; their math is skipped), so every slot
 * is loaded. */
template <int RT, int NT>
static __device__ __forceinline__ void d4_stream_ring2(float (*acc)[NT][4], const uint4 *bq,
                                                       const uint16_t *bs, const uint8_t *aq,
                                                       const uint8_t *asf, int w0, int w1, int KS,
                                                       int tile0, int lane, const int *mrow, int KB,
                                                       int Kbp, size_t arow, int zero)
{
    if (w0 >= w1) return;
    d4_slot<RT, NT> ring[2][2];
#pragma unroll
    for (int u = 0; u < 2; u++)
        d4_load<RT, NT, true>(ring[0][u], bq, bs, aq, asf, min(w0 + u, w1 - 1), KS, tile0, lane, mrow,
                              KB, Kbp, arow);
    for (int s = w0; s < w1; s += 4) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int base = s + 2 * h;
            if (base < w1) {
                const uint32_t fold = d4_fold<RT, NT>(ring[h][0]) ^ d4_fold<RT, NT>(ring[h][1]);
                const int next = base + 2 + ring_after(fold, zero);
                if (base + 2 < w1) {
#pragma unroll
                    for (int u = 0; u < 2; u++)
                        d4_load<RT, NT, true>(ring[h ^ 1][u], bq, bs, aq, asf, min(next + u, w1 - 1), KS,
                                              tile0, lane, mrow, KB, Kbp, arow);
                }
#pragma unroll
                for (int u = 0; u < 2; u++)
                    if (base + u < w1) d4_math<RT, NT>(ring[h][u], acc);
            }
        }
    }
}

/* Every k-step of the warp loaded at once (KW slots, those past w1 not
 * loaded), the weights first, then the math: for small N x K at 1-16
 * tokens, where a warp has at most KW k-steps and the ring's chain of
 * memory latencies, not the bytes, sets the time. The token pointers move
 * 32 code bytes and 512 swizzled scale bytes (one 128x4 block column) a
 * k-step. */
template <int RT, int NT, int KW>
static __device__ __forceinline__ void d4_stream_burst(float (*acc)[NT][4], const uint4 *bq,
                                                       const uint16_t *bs, const uint8_t *aq,
                                                       const uint8_t *asf, int w0, int w1, int KS,
                                                       int tile0, int lane, const int *mrow, int KB,
                                                       int Kbp, size_t arow)
{
    if (w0 >= w1) return;
    const int steps = w1 - w0, kb0 = 4 * w0 + (lane & 3);
    d4_slot<RT, NT> slot[KW];
#pragma unroll
    for (int i = 0; i < RT; i++) {
        const size_t u0 = ((size_t)(tile0 + i) * KS + w0) * 32 + lane;
#pragma unroll
        for (int u = 0; u < KW; u++) {
            slot[u].w[i] = ldg_stream16_or_zero(bq + u0 + (size_t)u * 32, u < steps);
            slot[u].ws[i] = ldg_stream2_or_zero(bs + u0 + (size_t)u * 32, u < steps);
        }
    }
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int64_t r = mrow[n] >= 0 ? mrow[n] : 0;
        const uint8_t *q = aq + (size_t)r * arow + (size_t)kb0 * 8;
        const uint8_t *qs = asf + swz_off(r, kb0, Kbp);
#pragma unroll
        for (int u = 0; u < KW; u++) {
            const int on = mrow[n] >= 0 && u < steps && kb0 + 4 * u < KB;
            slot[u].q[n] = ldg_or_zero8(q + (size_t)u * 32, on);
            slot[u].qs[n] = ldg_or_zero1(qs + (size_t)u * 512, on);
        }
    }
#pragma unroll
    for (int u = 0; u < KW; u++)
        if (u < steps) d4_math<RT, NT>(slot[u], acc);
}

/* grid (row blocks, K splits, token chunks); block D4_THREADS.
 * bq/bs: packed weights; aq [M, K/2], asf swizzled; ws fp32 [zc*8*NT][Np] and
 * counters [row blocks * zc] (S > 1 without clusters only); kper k-steps per
 * split; zero is 0 (ring_after). A launch with clusters of the S splits of a
 * tile reduces them there. KPS k-steps a ring stage: 2 takes the registers of
 * a second block per SM. KW > 0: no ring, the warp's at most KW k-steps
 * loaded at once (d4_stream_burst), one block per SM. */
template <int RT, int NT, int KPS, int KW>
__global__ void __launch_bounds__(D4_THREADS, KPS == 1 && KW == 0 ? 2 : 1)
fp4_sm90_decode_kernel(const uint4 *__restrict__ bq, const uint16_t *__restrict__ bs,
                   const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                   __nv_bfloat16 *__restrict__ d, float *__restrict__ ws,
                   unsigned *__restrict__ counters, int M, int N, int K, int KS, int kper, int Np,
                   float alpha_eff, int zero)
{
    constexpr int ROWS = 16 * RT, TOK = 8 * NT, RS = ROWS + 4;
    extern __shared__ __align__(16) float red[]; /* [warp][TOK][RS] */
    __shared__ int s_last;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2;
    const int rb = blockIdx.x, split = blockIdx.y, S = gridDim.y, chunk = blockIdx.z;
    const int m0 = chunk * TOK;
    const int KB = K / 16, Kbp = (KB + 3) / 4 * 4;
    const size_t arow = (size_t)(K / 2);

    /* this warp's K range inside the block's split */
    const int ks0 = split * kper, ks1 = min(KS, ks0 + kper);
    const int per = (ks1 - ks0 + D4_WARPS - 1) / D4_WARPS;
    const int w0 = min(ks1, ks0 + warp * per), w1 = min(ks1, w0 + per);
    const int tile0 = rb * RT;

    int mrow[NT];
#pragma unroll
    for (int n = 0; n < NT; n++) mrow[n] = m0 + 8 * n + g < M ? m0 + 8 * n + g : -1;

    float acc[RT][NT][4];
#pragma unroll
    for (int i = 0; i < RT; i++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][n][e] = 0.0f;

    if (KW > 0)
        d4_stream_burst<RT, NT, (KW > 0 ? KW : 1)>(acc, bq, bs, aq, asf, w0, w1, KS, tile0, lane,
                                                    mrow, KB, Kbp, arow);
    else if (KPS == 1)
        d4_stream_ring1<RT, NT>(acc, bq, bs, aq, asf, w0, w1, KS, tile0, lane, mrow, KB, Kbp, arow);
    else
        d4_stream_ring2<RT, NT>(acc, bq, bs, aq, asf, w0, w1, KS, tile0, lane, mrow, KB, Kbp, arow,
                                zero);

    /* warps -> shared memory: red[warp][tok][row] */
    kperm_acc_to_smem<RT, NT>(acc, red + (size_t)warp * TOK * RS, RS, lane);
    __syncthreads();

    constexpr int C4 = ROWS / 4, E4 = TOK * C4; /* float4 groups of the block tile */
    const int n0 = rb * ROWS;
    /* clusters (1, S, 1), rank = split; d4_plan asks for them only with 4 token tiles */
    const bool cl = NT == 4 && S > 1 && cluster_blocks() > 1;
    for (int e = tid; e < E4; e += D4_THREADS) {
        const int tok = e / C4, c4 = (e - tok * C4) * 4;
        const float4 v = sum_warp_tiles4(red, D4_WARPS, TOK * RS, tok * RS + c4);
        const int m = m0 + tok, n = n0 + c4;
        if (S == 1) {
            if (m < M && n < N) store_bf16x4(d, m, n, N, v, alpha_eff, (N & 3) == 0);
        } else if (cl) { /* the block's tile, in warp 0's place (only this thread reads it) */
            *(float4 *)(red + tok * RS + c4) = v;
        } else {
            red_add4(ws + (size_t)m * Np + n, v);
        }
    }
    if (S == 1) return;
    if (cl) { /* cluster rank = split: this block sums its share over the S tiles */
        cluster_sync_all();
        const int lo = (int)((long long)split * E4 / S), hi = (int)((long long)(split + 1) * E4 / S);
        for (int e = lo + tid; e < hi; e += D4_THREADS) {
            const int tok = e / C4, c4 = (e - tok * C4) * 4;
            float4 v = ld_cluster4(red + tok * RS + c4, 0);
            for (int q = 1; q < S; q++) {
                const float4 x = ld_cluster4(red + tok * RS + c4, q);
                v.x += x.x;
                v.y += x.y;
                v.z += x.z;
                v.w += x.w;
            }
            const int m = m0 + tok, n = n0 + c4;
            if (m < M && n < N) store_bf16x4(d, m, n, N, v, alpha_eff, (N & 3) == 0);
        }
        cluster_sync_all(); /* no block leaves while another reads its tile */
        return;
    }

    splitk_last_block(ws, counters + (size_t)chunk * gridDim.x + rb, d, S, m0, n0, TOK, ROWS, M, N,
                      Np, alpha_eff, &s_last);
}

/* ---- host side ---------------------------------------------------------------------- */

typedef void (*d4_kernel_fn)(const uint4 *, const uint16_t *, const uint8_t *, const uint8_t *,
                             __nv_bfloat16 *, float *, unsigned *, int, int, int, int, int, int,
                             float, int);

typedef struct d4_cfg {
    int rt, nt;             /* tiles per warp, token tiles per chunk */
    int kps;                /* k-steps a register-ring stage */
    int kw;                 /* > 0: no ring, up to kw k-steps a warp loaded at once */
    int cl;                 /* S > 1 splits may be reduced in a cluster (S <= D4_MAX_CLUSTER) */
    int rbs, S, kper, zc;   /* row blocks, K splits, k-steps per split, token chunks */
    size_t smem;
} d4_cfg;

static int64_t d4_np(int64_t n) { return (n + D4_NPAD - 1) / D4_NPAD * D4_NPAD; }
static int64_t d4_ks(int64_t k) { return (k + 63) / 64; }

/* Token tiles per chunk and tiles per warp: the accumulators (RT * NT * 4
 * floats) stay at 32 registers or fewer. */
static void d4_shape(int64_t m, int *rt, int *nt)
{
    *nt = m <= 8 ? 1 : m <= 16 ? 2 : 4;
    *rt = *nt <= 2 ? 4 : 2;
}

static void d4_plan(int64_t m, int64_t n, int64_t k, int num_sms, int splits, d4_cfg *c)
{
    const int64_t KS = d4_ks(k), Np = d4_np(n);
    const int sms = num_sms > 0 ? num_sms : 132;
    memset(c, 0, sizeof *c);
    d4_shape(m, &c->rt, &c->nt);
    c->zc = (int)((m + 8 * c->nt - 1) / (8 * c->nt));
    c->rbs = (int)(Np / (16 * c->rt));
    /* k-steps per warp from the total, for about two blocks of 8 warps per
     * SM, or one when there are 32 row blocks or more (measured on the H200:
     * one block wins from 32 row blocks, two below; docs/PERF.md) */
    const int64_t units = (int64_t)c->rbs * c->zc * KS;
    const int64_t warps = (int64_t)sms * (c->rbs >= 32 ? 1 : 2) * D4_WARPS;
    int64_t kpw = (units + warps - 1) / warps;
    if (kpw < 1) kpw = 1;
    int64_t kper = kpw * D4_WARPS;
    if (splits > 0) kper = (KS + splits - 1) / splits;
    if (kper > KS) kper = KS;
    c->kper = (int)kper;
    c->S = (int)((KS + kper - 1) / kper); /* every split non-empty */
    /* two k-steps a stage need the registers of a second block: only where
     * the grid is one block per SM anyway */
    /* both only for chunks of 4 token tiles (17 to 32 tokens): measured on an
     * H100 they win 8-16% there and lose 3-19% at 1 and 16 tokens */
    c->kps = c->nt == 4 && c->rbs >= 32 && (int64_t)c->rbs * c->S * c->zc <= sms ? 2 : 1;
    c->cl = c->nt == 4 && c->S > 1 && c->S <= D4_MAX_CLUSTER;
    /* 1-16 tokens where a block a 16-row tile fits the SMs at once (16 tiles
     * or more) and a warp has at most 12 k-steps (1-8 tokens) or 6 (9-16): no
     * ring and no K split (a forced split count keeps the ring). Measured on
     * an H100 there: 3-52% faster; at 16 tokens with 12 k-steps a warp 5-6%
     * slower, with 16 up to 1.7x (docs/PERF.md). */
    const int64_t tiles = Np / 16, per = (KS + D4_WARPS - 1) / D4_WARPS;
    if (splits == 0 && c->nt <= 2 && tiles >= 16 && tiles <= sms && per <= (c->nt == 1 ? 12 : 6)) {
        c->rt = 1;
        c->rbs = (int)tiles;
        c->kper = (int)KS;
        c->S = 1;
        c->kps = 1;
        c->cl = 0;
        c->kw = per <= 4 ? 4 : per <= 8 ? 8 : 12; /* nt = 2: 4 or 8 */
    }
    c->smem = (size_t)D4_WARPS * (size_t)(8 * c->nt) * (size_t)(16 * c->rt + 4) * sizeof(float);
}

static d4_kernel_fn d4_kernel(int rt, int nt, int kps, int kw)
{
    if (kw > 0) { /* d4_plan: rt = 1, nt <= 2 */
        const d4_kernel_fn one[3] = {fp4_sm90_decode_kernel<1, 1, 1, 4>, fp4_sm90_decode_kernel<1, 1, 1, 8>,
                                     fp4_sm90_decode_kernel<1, 1, 1, 12>};
        const d4_kernel_fn two[2] = {fp4_sm90_decode_kernel<1, 2, 1, 4>, fp4_sm90_decode_kernel<1, 2, 1, 8>};
        return nt == 1 ? one[kw / 4 - 1] : two[kw / 4 - 1];
    }
    if (kps == 2) return fp4_sm90_decode_kernel<2, 4, 2, 0>; /* d4_plan: only with nt = 4 */
    if (rt == 4) return nt == 1 ? fp4_sm90_decode_kernel<4, 1, 1, 0> : fp4_sm90_decode_kernel<4, 2, 1, 0>;
    return fp4_sm90_decode_kernel<2, 4, 1, 0>;
}

static size_t d4_counters_bytes(int64_t m, int64_t n)
{
    d4_cfg c;
    d4_plan(m, n, 64, 132, 1, &c);
    return ((size_t)c.rbs * (size_t)c.zc * sizeof(unsigned) + 15) / 16 * 16;
}

extern "C" {

size_t fp4_sm90_decode_codes_size(int64_t n, int64_t k)
{
    return (size_t)d4_np(n) * (size_t)d4_ks(k) * 32; /* 16 rows x 64 k = 512 bytes a unit */
}

size_t fp4_sm90_decode_scales_size(int64_t n, int64_t k)
{
    return (size_t)(d4_np(n) / 16) * (size_t)d4_ks(k) * 32 * 2;
}

/* fp32 partial sums [zc * 8 * NT][Np] after the arrival counters. */
size_t fp4_sm90_decode_ws_size(int64_t m, int64_t n, int64_t k)
{
    (void)k; /* the partial sums do not depend on K */
    int rt, nt;
    d4_shape(m, &rt, &nt);
    const size_t rows = (size_t)((m + 8 * nt - 1) / (8 * nt)) * (size_t)(8 * nt);
    return d4_counters_bytes(m, n) + rows * (size_t)d4_np(n) * sizeof(float);
}

/* codes: unit (tile, ks) = 32 lanes x 16 bytes; lane (g, t): bytes
 * [32 ks + 8 t, +8) of row 16 tile + g, then the same of row + 8.
 * scales: unit (tile, ks) = 32 lanes x 2 bytes: sf(row g, 4 ks + t),
 * sf(row g + 8, 4 ks + t). Rows >= N and k >= K are zero. */
void fp4_sm90_decode_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales)
{
    const int64_t N = b->rows, K = b->cols, KS = d4_ks(K), KB = K / 16;
    const int64_t tiles = d4_np(N) / 16, rowb = K / 2;
    memset(codes, 0, fp4_sm90_decode_codes_size(N, K));
    memset(scales, 0, fp4_sm90_decode_scales_size(N, K));
    for (int64_t tile = 0; tile < tiles; tile++)
        for (int64_t ks = 0; ks < KS; ks++)
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane >> 2, t = lane & 3;
                const int64_t kb = 4 * ks + t;
                const size_t u = ((size_t)tile * (size_t)KS + (size_t)ks) * 32 + (size_t)lane;
                if (kb >= KB) continue;
                for (int h = 0; h < 2; h++) {
                    const int64_t row = 16 * tile + g + 8 * h;
                    if (row >= N) continue;
                    memcpy(codes + u * 16 + (size_t)h * 8, b->codes + row * rowb + kb * 8, 8);
                    scales[u * 2 + (size_t)h] = b->scales[row * KB + kb];
                }
            }
}

int fp4_sm90_decode_fits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    if (m < 1 || n < 1 || k < 16 || k % 16 != 0) return 0;
    if (k / 2 > INT32_MAX / 2 || n > INT32_MAX - D4_NPAD || m > INT32_MAX) return 0; /* int indices */
    d4_cfg c;
    d4_plan(m, n, k, num_sms, 0, &c);
    return c.zc <= 65535 && c.S <= 65535 && c.rbs <= 0x7fffffff;
}

fp4_status fp4_sm90_decode_init(fp4_err *err)
{
    (void)err; /* shared memory stays under the 48 KB default (d4_plan) */
    return FP4_OK;
}

fp4_status fp4_sm90_decode_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    d4_cfg c;
    d4_plan(a->m, a->n, a->k, a->num_sms, a->splits, &c);
    if (c.zc > 65535 || c.S > 65535)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 decode: grid too large");
    if (c.S > 1 && (!a->workspace || a->workspace_bytes < fp4_sm90_decode_ws_size(a->m, a->n, a->k)))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 decode: workspace missing or too small");
    unsigned *counters = (unsigned *)a->workspace;
    float *ws = a->workspace ? (float *)((char *)a->workspace + d4_counters_bytes(a->m, a->n)) : NULL;
    const d4_kernel_fn fn = d4_kernel(c.rt, c.nt, c.kps, c.kw);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)c.rbs, (unsigned)c.S, (unsigned)c.zc);
    cfg.blockDim = dim3(D4_THREADS);
    cfg.dynamicSmemBytes = c.smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 1;
    attr.val.clusterDim.y = (unsigned)c.S;
    attr.val.clusterDim.z = 1;
    if (c.cl) {
        /* the clusters must all fit at once, or the reduction takes the global
         * way (also where the query fails: its error is cleared) */
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        int fit = 0;
        if (cudaOccupancyMaxActiveClusters(&fit, (const void *)fn, &cfg) != cudaSuccess) {
            (void)cudaGetLastError();
            fit = 0;
        }
        if ((int64_t)fit < (int64_t)c.rbs * c.zc) {
            cfg.attrs = NULL;
            cfg.numAttrs = 0;
        }
    }
    const uint4 *bq = (const uint4 *)a->b_codes;
    const uint16_t *bs = (const uint16_t *)a->b_sf;
    __nv_bfloat16 *d = (__nv_bfloat16 *)a->d;
    const int M = (int)a->m, N = (int)a->n, K = (int)a->k, KS = (int)d4_ks(a->k);
    const int Np = (int)d4_np(a->n), zero = 0;
    /* both operands carry 2^-7 from the dequantization */
    const float alpha_eff = a->alpha * 16384.0f;
    void *args[] = {(void *)&bq, (void *)&bs,     (void *)&a->a_codes, (void *)&a->a_sf,
                    (void *)&d,  (void *)&ws,     (void *)&counters,   (void *)&M,
                    (void *)&N,  (void *)&K,      (void *)&KS,         (void *)&c.kper,
                    (void *)&Np, (void *)&alpha_eff, (void *)&zero};
    const cudaError_t le = cudaLaunchKernelExC(&cfg, (const void *)fn, args);
    if (le != cudaSuccess) {
        (void)cudaGetLastError(); /* a launch error is not left for the next check */
        return fp4_fail(err, FP4_ERR_CUDA, "fp4-sm90 decode: launch: %s", cudaGetErrorString(le));
    }
    return FP4_OK;
}

} /* extern "C" */
