/* fp4-sm90 "v8-prefill" (variant 8; "v6" in its development logs): NVFP4 x NVFP4 -> bf16 GEMM for large M on Hopper,
 * wgmma, with B's dequantization taken out of the main loop.
 *
 * STATUS: verified on an H200 (bench/prefill6-dev.sh, bench/results/2026-12-02-h200-s3-prefill6:
 * every instantiated configuration against the exact reference on all tail shapes and
 * bit-identical to v5, graph replay, memcheck clean; those logs call it "v6"
 * and its functions fp4_sm90_prefill6_*). Variant 8 of the backend's family
 * table (src/backends/fp4_sm90.cu).
 *
 * Why: v5-prefill (fp4_sm90_prefill5.cu) dequantizes B into its shared-memory
 * tile with the same warps that issue the wgmmas; its ablation (P5_DEV_ABLATE)
 * showed that skipping that work takes it from 441-479 to 643-716 TFLOP/s.
 *
 * Design. Two kernels, launched back to back on the caller's stream by one
 * launch function (no allocation, no synchronisation, graph-capturable):
 * 1. prepass (fp4_sm90_prefill8_dq_kernel): dequantizes the packed weights
 *    (v5's packing, fp4_sm90_prefill5_pack_b) into an fp16 workspace that is
 *    byte for byte the swizzled smem B tile v5 builds: for each 128-row block
 *    nt and k-step s (in that order), 16384 bytes [row rr][128 bytes], the
 *    16-byte chunk c (8 fp16 = value * scale * 2^-7, exact) of row rr at
 *    ((c ^ (rr & 7)) << 4). One thread writes one chunk; a warp writes 512
 *    contiguous bytes. Bytes: N*K/2 + N*K/16 read, 2*N*K written.
 * 2. main kernel (fp4_sm90_prefill8_kernel): v5's CTA tile (128 x BN x 64,
 *    two consumer warpgroups, wgmma m64nBNk16, A dequantized into registers),
 *    but B's tile is copied from the workspace straight into an ST-deep ring
 *    of shared-memory tiles (no B ALU work), next to A's raw codes and
 *    scales (16-byte cp.async): by bulk copies (cp.async.bulk issued by
 *    thread 0, completing on the slot's mbarrier; the default) or by 16-byte
 *    cp.asyncs of every thread (P6_BULK 0: 5-10% slower, measured). The
 *    wgmma of step s reads B from ring slot s % ST, so a slot is refilled
 *    only after both warpgroups retired that wgmma: step s (one barrier):
 *    wait for stage s (my cp.asyncs, and the slot's mbarrier or a
 *    fence.proxy.async for B), __syncthreads, issue the copies of stage
 *    s + ST - 2 into the slot of step
 *    s - 2 (retired by every thread's wgmma wait in step s - 1), dequantize A
 *    of step s into registers, issue the 4 wgmmas of step s, wait until only
 *    they are in flight (the previous step's A registers are then free). The
 *    tensor cores run step s - 1 while the threads wait, copy and dequantize
 *    A for step s. CTAs are ordered m-tile fastest, so the CTAs resident at
 *    one time share few B column tiles (B's fp16 tiles are 4x A's bytes).
 * Results are bit-identical to v5's: same fp16 operands, same wgmma sequence.
 * The workspace: fp4_sm90_prefill8_ws_size bytes, 16-byte aligned, fully
 * rewritten by every call (no zeroing needed); calls sharing it must be on one
 * stream.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/gpu_common.h"
#include "fp4/format.h"
#include "kernels/fp4_sm90.h"
#include "kernels/fp4_sm90_device.cuh"
#include "kernels/fp4_sm90_tokperm.h"
#include "kernels/fp4_sm90_wgmma.cuh"

#define P6_BM WG_BM
#define P6_BK WG_BK
#define P6_THREADS WG_THREADS
#define P6_NPAD 256         /* v5's packed rows are padded to a multiple of this */
#define P6_WS_BLOCK 16384   /* fp16 bytes of one 128-row block of one k-step */
#define P6_DQ_PER 4         /* chunks per prepass thread */
#define P6_TR_LD 132        /* floats a token row of v9's transposed tile (128 + 4: no bank conflicts) */
/* Defaults: ring depth per tile width and how B's tiles are copied
 * (bench/prefill6-dev.sh times the alternatives; depth 6 beat 4 by 10-13% at
 * 128 x 256 in bench/results/2026-12-02-h200-s3-prefill6/run1/time6.txt). */
#ifndef P6_STAGES_256
#define P6_STAGES_256 6
#endif
#ifndef P6_STAGES_128
#define P6_STAGES_128 6
#endif
#ifndef P6_STAGES_128X2
#define P6_STAGES_128X2 4
#endif
#ifndef P6_BULK /* bulk copies beat cp.async by 5-10% at every timed shape (run2/time6.txt) */
#define P6_BULK 1
#endif
/* 1 since bench/prefill6-dev.sh passed on an H200. Set it to 0 while changing
 * the kernels: fp4_sm90_prefill8_launch then reports FP4_ERR_UNSUPPORTED
 * (fp4_sm90_prefill8_launch_cfg, for the harness, runs regardless). */
#ifndef P6_VERIFIED
#define P6_VERIFIED 1
#endif
/* Development only: 1 skips the copies of B's tiles (the wgmmas read stale
 * shared memory), 2 skips A's dequantization, 3 both: wrong results, for
 * timing what each costs. */
#ifndef P6_DEV_ABLATE
#define P6_DEV_ABLATE 0
#endif

/* shared-memory map: [ST B tiles of BN x 128 bytes][ST x (A codes 4096, A scales 512)]
 * [ST mbarriers (bulk-copy mode)] */
template <int BN, int ST> struct p6_cfg {
    static constexpr int BTILE = BN * 128; /* multiple of 1024: the swizzle needs that alignment */
    /* B's tile is NBLK copies of BBYTES from the workspace (BN = 64: half a block) */
    static constexpr int NBLK = BN >= 128 ? BN / 128 : 1;
    static constexpr int BBYTES = BN >= 128 ? P6_WS_BLOCK : BN * 128;
    static constexpr int A_BASE = ST * BTILE;
    static constexpr int ASTAGE = P6_BM * WG_ROWB + 512;
    static constexpr int BAR_OFF = ST * BTILE + ST * ASTAGE;
    static constexpr int SMEM = BAR_OFF + (8 * ST + 63) / 64 * 64 + 1024; /* +1024: alignment */
};

/* ---- prepass: packed fp4 -> swizzled fp16 tiles ------------------------------------- */

/* bq / bsf: v5's packed B (blocks of 4096 code bytes [h][row][16] and 512 scale
 * bytes [row][4], block index nt * KS + s); ws: nchunks 16-byte chunks, chunk q
 * = block q >> 10, row (q >> 3) & 127, physical chunk q & 7. */
__global__ void __launch_bounds__(256)
    fp4_sm90_prefill8_dq_kernel(const uint8_t *__restrict__ bq, const uint8_t *__restrict__ bsf,
                                uint4 *__restrict__ ws, int64_t nchunks)
{
    const int64_t base = (int64_t)blockIdx.x * (256 * P6_DQ_PER) + threadIdx.x;
    uint32_t w[P6_DQ_PER], sw[P6_DQ_PER];
    /* all loads first: several in flight per thread */
#pragma unroll
    for (int i = 0; i < P6_DQ_PER; i++) {
        const int64_t q = base + i * 256;
        w[i] = sw[i] = 0;
        if (q < nchunks) {
            const int64_t blk = q >> 10;
            const int rr = (int)(q >> 3) & 127, c = ((int)q & 7) ^ (rr & 7);
            w[i] = ldg_stream4((const uint32_t *)(bq + blk * 4096 + (c >> 2) * 2048 + rr * 16 +
                                                  (c & 3) * 4));
            sw[i] = __ldg((const uint32_t *)(bsf + blk * 512 + rr * 4)); /* shared by 8 lanes */
        }
    }
#pragma unroll
    for (int i = 0; i < P6_DQ_PER; i++) {
        const int64_t q = base + i * 256;
        if (q < nchunks) {
            uint32_t sc[4];
            wg_b_scales(sw[i], sc);
            ws[q] = wg_b_word(w[i], sc);
        }
    }
}

/* ---- main kernel -------------------------------------------------------------------- */

#ifdef FP4_SM90_HAVE_WGMMA
/* v9's A (the weights, fp4_sm90_mid9_pack_b): tile mt_blk's k-step L is 4096
 * contiguous bytes [128 rows][32], zero-padded; plus its 512-byte scale tile.
 * Contiguous blocks instead of 32-byte pieces of 128 rows 3 KB apart: the
 * weights are streamed from DRAM once, by every CTA at the same k-step. */
static __device__ __forceinline__ void p9_load_a(uint32_t a_dst, uint32_t asf_dst,
                                                 const uint8_t *__restrict__ aq,
                                                 const uint8_t *__restrict__ asf, int mt_blk,
                                                 int KS, int L, int tid)
{
    const size_t blk = (size_t)mt_blk * KS + L;
    wg_cp16(a_dst + (uint32_t)(tid * 16), aq + blk * 4096 + tid * 16, 16);
    if (tid < 32) wg_cp16(asf_dst + (uint32_t)(tid * 16), asf + blk * 512 + tid * 16, 16);
}

/* Issue the copies of stage ls into ring slot ls % ST: A's raw tile and scales
 * (cp.async, the caller commits), B's BN x 128-byte fp16 tile (BN / 128
 * workspace blocks of 16 KB): BULK: bulk copies issued by thread 0, counted on
 * the slot's mbarrier; else 16-byte cp.asyncs by every thread. */
template <int BN, int ST, bool BULK, bool TR>
static __device__ __forceinline__ void p6_load_stage(
    uint32_t sbase, int ls, int KS, const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
    const uint8_t *__restrict__ bw, int M, int arow, bool a16, int m0, int mt_blk, int nb0, int ks0,
    int tid)
{
    typedef p6_cfg<BN, ST> C;
    const int slot = ls % ST;
    const uint32_t a_dst = sbase + (uint32_t)(C::A_BASE + slot * C::ASTAGE);
    if (TR) /* v9's packed weights: the 4 KB of (tile, k-step) are contiguous, no tails */
        p9_load_a(a_dst, a_dst + P6_BM * WG_ROWB, aq, asf, mt_blk, KS, ks0 + ls, tid);
    else
        wg_load_a<WG_THREADS>(a_dst, a_dst + P6_BM * WG_ROWB, aq, asf, M, arow, a16, m0, mt_blk, KS, ks0 + ls, tid);
    if (BULK) {
        if (tid == 0 && !(P6_DEV_ABLATE & 1)) {
            const uint32_t bar = sbase + (uint32_t)(C::BAR_OFF + slot * 8);
            wg_mbar_expect(bar, (uint32_t)(BN * 128));
#pragma unroll
            for (int blk = 0; blk < C::NBLK; blk++)
                wg_bulk_g2s(sbase + (uint32_t)(slot * C::BTILE + blk * P6_WS_BLOCK),
                            bw + ((size_t)(nb0 + blk) * KS + ks0 + ls) * P6_WS_BLOCK, C::BBYTES, bar);
        }
    } else if (!(P6_DEV_ABLATE & 1)) {
        const uint32_t b_dst = sbase + (uint32_t)(slot * C::BTILE);
#pragma unroll
        for (int i = 0; i < BN / 32; i++) { /* BN * 8 chunks of 16 bytes, 256 threads */
            const int j = tid + i * P6_THREADS, blk = j >> 10;
            const uint8_t *src =
                bw + ((size_t)(nb0 + blk) * KS + ks0 + ls) * P6_WS_BLOCK + (size_t)(j & 1023) * 16;
            wg_cp16(b_dst + (uint32_t)(j * 16), src, 16);
        }
    }
}

/* One k-step s (see the top). acur: this step's A registers (free: the wgmma
 * that read them, step s - 2, retired in step s - 1). */
template <int BN, int ST, bool BULK, bool TR>
static __device__ __forceinline__ void p6_step(
    int s, int KS, int KSn, int ks0, float *acc, uint32_t *acur, const unsigned char *smem,
    uint32_t sbase, const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
    const uint8_t *__restrict__ bw, int M, int arow, bool a16, int m0, int mt_blk, int nb0, int tid)
{
    typedef p6_cfg<BN, ST> C;
    const int slot = s % ST;
    wg_cp_wait<ST - 3>(); /* committed: ST - 2 + s groups; stage s is group s */
    if (BULK) { /* B of stage s landed: use u = s / ST of the slot completes phase u & 1 */
        if (!(P6_DEV_ABLATE & 1))
            wg_mbar_wait(sbase + (uint32_t)(C::BAR_OFF + slot * 8), (uint32_t)((s / ST) & 1));
    } else {
        wg_fence_async_smem(); /* my cp.async copies of B -> visible to the tensor cores */
    }
    __syncthreads();
    {
        const int ls = s + ST - 2; /* into the slot of step s - 2 */
        if (ls < KSn)
            p6_load_stage<BN, ST, BULK, TR>(sbase, ls, KS, aq, asf, bw, M, arow, a16, m0, mt_blk, nb0,
                                        ks0, tid);
        wg_cp_commit(); /* possibly empty: keeps the group count uniform */
    }
    const unsigned char *a_st = smem + C::A_BASE + slot * C::ASTAGE;
    wg_a_frag<(P6_DEV_ABLATE & 2) != 0>(a_st, a_st + P6_BM * WG_ROWB, tid, acur);
    wg_fence();
    wg_mma_step<BN>(acc, acur, sbase + (uint32_t)(slot * C::BTILE), s == 0);
    wg_commit();
    wg_wait<1>(); /* step s - 1 retired: its A registers and (after the next barrier) its slot */
}
#endif /* FP4_SM90_HAVE_WGMMA */

#ifdef P6_DEV_STAMPS
#define P6_DEV_MAX_CTAS 8192
/* Development only (CMake FP4_DEV_STAMPS, bench/stamps-mid9.sh): for each CTA
 * of the last v9 main-kernel launch, its SM and the %globaltimer (ns) at its
 * start, after its main loop, after its partial tile left (D or red.global) and
 * at its end. Global mutable state, so never in a normal build. */
#define P6_DEV_STAMPS_N 6 /* SM, start, main loop done, partial tile sent, end, v11: barrier passed */
__device__ unsigned long long p6_dev_stamps[P6_DEV_MAX_CTAS * P6_DEV_STAMPS_N];
#ifdef FP4_SM90_HAVE_WGMMA
static __device__ __forceinline__ unsigned long long p6_gtime(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#endif
/* thread 0 of the CTA records the time into slot i of its stamps */
#define P6_STAMP(i)                                                                            \
    do {                                                                                       \
        const unsigned c_ = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);     \
        if (threadIdx.x == 0 && c_ < P6_DEV_MAX_CTAS)                                          \
            p6_dev_stamps[P6_DEV_STAMPS_N * c_ + (i)] = p6_gtime();                            \
    } while (0)
#else
#define P6_STAMP(i) ((void)0)
#endif

#ifdef FP4_SM90_HAVE_WGMMA
/* v11-mid's split-K epilogue (TR, S > 1; wg_slices_* in fp4_sm90_wgmma.cuh) */
template <int BN>
static __device__ __forceinline__ void p11_slices_reduce(const float *acc, float *__restrict__ wsf,
                                                         unsigned *__restrict__ cnt,
                                                         __nv_bfloat16 *__restrict__ d, int S,
                                                         int tok0, int m0, int N, int M,
                                                         float alpha, int tid)
{
    float4 *slab = wg_slices_store<BN>(acc, wsf, S, tid);
    P6_STAMP(3);
    wg_slices_meet(cnt, S, tid);
    P6_STAMP(5);
    wg_slices_sum<BN>(slab, cnt, d, S, tok0, m0, N, M, alpha, tid);
}
#endif

/* aq [M, K/2]; asf swizzled [roundup(M,128), 4 KS]; bw the prepass's fp16 tiles;
 * KS = ceil(K / 64). Grid: x = m tiles of 128, y = n tiles of BN, z = K splits
 * (TR only).
 * TR false (v8-prefill): d [M, N] bf16, written from the registers.
 * TR true (v9-mid, swap AB): A is the weight matrix (M = its rows), B the
 * tokens (N = their count); d is [N, M] (tokens x weights), so the CTA tile
 * goes through shared memory transposed and leaves as coalesced rows. With
 * gridDim.z = S > 1 the CTA runs k-steps [z KS / S, (z + 1) KS / S), adds its
 * fp32 tile into wsf [roundup(N, 256)][roundup(M, 128)] (red.global.add.v4)
 * and the last of the S CTAs of the tile (counter cnt[tile]) writes d and
 * re-zeroes its part of wsf and the counter (splitk_last_block). */
template <int BN, int MINB, int ST, bool BULK, bool TR, bool SLICES = false>
__global__ void __launch_bounds__(P6_THREADS, MINB)
    fp4_sm90_prefill8_kernel(const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                             const uint8_t *__restrict__ bw, __nv_bfloat16 *__restrict__ d, int M,
                             int N, int K, int KS, float alpha_eff, float *__restrict__ wsf,
                             unsigned *__restrict__ cnt)
{
#ifdef FP4_SM90_HAVE_WGMMA
    extern __shared__ unsigned char p6_smem_raw[];
    uint32_t sbase = 0;
    unsigned char *smem = wg_smem_aligned(p6_smem_raw, &sbase);
    const int tid = threadIdx.x;
#ifdef P6_DEV_STAMPS
    const unsigned p6_cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (TR && tid == 0 && p6_cta < P6_DEV_MAX_CTAS) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        p6_dev_stamps[P6_DEV_STAMPS_N * p6_cta] = sm;
        p6_dev_stamps[P6_DEV_STAMPS_N * p6_cta + 1] = p6_gtime();
    }
#endif
    const int m0 = blockIdx.x * P6_BM, mt_blk = blockIdx.x;
    /* first 128-row workspace block of this n tile; BN = 64: its half */
    const int nb0 = (blockIdx.y * BN) / 128;
    if (BN < 128) bw += (size_t)((blockIdx.y * BN) % 128) * 128;
    const int arow = K / 2;
    const bool a16 = (arow % 16) == 0;
    const int S = TR ? (int)gridDim.z : 1;
    const int ks0 = TR ? (int)(((int64_t)blockIdx.z * KS) / S) : 0;
    const int KSn = TR ? (int)(((int64_t)(blockIdx.z + 1) * KS) / S) - ks0 : KS;

    float acc[BN / 2]; /* the first wgmma runs with scale-d = 0: no initialisation */
    uint32_t ra[16], rb[16];

    if (BULK) { /* per phase: one arrival (thread 0's expect_tx) and the bytes */
        if (tid == 0) {
            for (int i = 0; i < ST; i++)
                wg_mbar_init(sbase + (uint32_t)(p6_cfg<BN, ST>::BAR_OFF + i * 8), 1);
            wg_mbar_init_fence();
        }
        __syncthreads();
    }
    /* v11 may start before the token prepass ends (programmatic dependent
     * launch): everything above overlapped its tail; the tokens are read
     * below. Without that launch attribute this returns at once. */
    if (SLICES) asm volatile("griddepcontrol.wait;" ::: "memory");

    /* prologue: stages 0 .. ST - 3 */
#pragma unroll 1
    for (int ls = 0; ls < ST - 2; ls++) {
        if (ls < KSn)
            p6_load_stage<BN, ST, BULK, TR>(sbase, ls, KS, aq, asf, bw, M, arow, a16, m0, mt_blk, nb0,
                                        ks0, tid);
        wg_cp_commit();
    }

    /* Unrolled by two so that the two A register sets stay compile-time arrays.
     * Both steps unconditional and the odd step after the loop: no control path
     * (even an infeasible one) rewrites a set while its wgmma is the one in
     * flight, else ptxas serializes every wgmma (C7513). */
    int s = 0;
#pragma unroll 1
    for (; s + 1 < KSn; s += 2) {
        p6_step<BN, ST, BULK, TR>(s, KS, KSn, ks0, acc, ra, smem, sbase, aq, asf, bw, M, arow, a16, m0,
                              mt_blk, nb0, tid);
        p6_step<BN, ST, BULK, TR>(s + 1, KS, KSn, ks0, acc, rb, smem, sbase, aq, asf, bw, M, arow, a16,
                              m0, mt_blk, nb0, tid);
    }
    if (s < KSn)
        p6_step<BN, ST, BULK, TR>(s, KS, KSn, ks0, acc, ra, smem, sbase, aq, asf, bw, M, arow, a16, m0,
                              mt_blk, nb0, tid);
    wg_wait<0>();
    wg_reg_fence<BN / 2>(acc);
    wg_cp_wait<0>();
    if (TR) P6_STAMP(2);
    if (SLICES && gridDim.z > 1) {
        p11_slices_reduce<BN>(acc, wsf, cnt, d, (int)gridDim.z, blockIdx.y * BN, m0, N, M, alpha_eff,
                              tid);
        P6_STAMP(4);
        return;
    }
    if (!TR) {
        wg_store_d<BN>(acc, d, M, N, m0, blockIdx.y * BN, alpha_eff, tid);
        return;
    }
    /* TR: every wgmma of the CTA retired after the barrier: the ring is free
     * for the transposed tile T[token][row] (P6_TR_LD floats a token) */
    static_assert(!TR || BN * P6_TR_LD * 4 <= p6_cfg<BN, ST>::BAR_OFF, "T tile exceeds the ring");
    __shared__ int p6_last;
    __syncthreads();
    float *T = (float *)smem;
    {
        const int lane = tid & 31, g = lane >> 2, t = lane & 3, r0 = (tid >> 5) * 16 + g;
#pragma unroll
        for (int i = 0; i < BN / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                T[(8 * i + 2 * t + (e & 1)) * P6_TR_LD + r0 + 8 * (e >> 1)] = acc[4 * i + e];
    }
    __syncthreads();
    const int tok0 = blockIdx.y * BN, Mp = (M + 127) / 128 * 128;
    for (int e = tid; e < BN * (P6_BM / 4); e += P6_THREADS) {
        const int tok = e / (P6_BM / 4), c4 = (e % (P6_BM / 4)) * 4;
        const int n = tok0 + tok, m = m0 + c4; /* d row (token), d column (weight row) */
        if (n >= N) continue;
        const float4 v = *(const float4 *)(T + tok * P6_TR_LD + c4);
        if (S == 1) {
            if (m < M) store_bf16x4(d, n, m, M, v, alpha_eff, (M & 3) == 0);
        } else {
            red_add4(wsf + (size_t)n * Mp + m, v);
        }
    }
    P6_STAMP(3);
    if (S > 1)
        splitk_last_block(wsf, cnt + (size_t)blockIdx.y * gridDim.x + blockIdx.x, d, S, tok0, m0, BN,
                          P6_BM, N, M, Mp, alpha_eff, &p6_last);
    P6_STAMP(4);
#else
    (void)aq, (void)asf, (void)bw, (void)d, (void)M, (void)N, (void)K, (void)KS, (void)alpha_eff;
    (void)wsf, (void)cnt;
    __trap(); /* wgmma: sm_90a only; the launch refuses other targets first */
#endif
}

/* ---- host side ---------------------------------------------------------------------- */

static int64_t p6_np(int64_t n) { return (n + P6_NPAD - 1) / P6_NPAD * P6_NPAD; }
static int64_t p6_ks(int64_t k) { return (k + P6_BK - 1) / P6_BK; }


/* fp16 tiles of every packed 128-row block (rows padded to 256) and k-step */
size_t fp4_sm90_prefill8_ws_size(int64_t m, int64_t n, int64_t k)
{
    (void)m;
    return (size_t)(p6_np(n) / 128) * (size_t)p6_ks(k) * P6_WS_BLOCK;
}

int fp4_sm90_prefill8_fits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    (void)num_sms;
    if (m < 1 || n < 1 || k < 16 || k % 16 != 0) return 0;
    if ((n + 127) / 128 > 65535) return 0; /* grid y (n tiles) */
    if (k / 2 > INT32_MAX / 2 || n > INT32_MAX - P6_NPAD || m > INT32_MAX - P6_BM) return 0;
    /* the workspace size must fit size_t (k <= 2^31, n <= 2^31: below 2^56) */
    return 1;
}

/* BN = 256 unless 128-wide tiles fill the GPU clearly better (v5's rule:
 * cost ~ waves * tile time, a 128-wide tile taking ~0.55 of a 256-wide one). */
int fp4_sm90_prefill8_bn(int64_t m, int64_t n, int64_t k, int num_sms)
{
    (void)k;
    if (num_sms < 1) num_sms = 1;
    const int64_t mt = (m + P6_BM - 1) / P6_BM;
    const int64_t t256 = mt * ((n + 255) / 256), t128 = mt * ((n + 127) / 128);
    const double c256 = (double)((t256 + num_sms - 1) / num_sms) * 1.0;
    const double c128 = (double)((t128 + num_sms - 1) / num_sms) * 0.55;
    return c128 < c256 ? 128 : 256;
}

/* The instantiations: (BN, CTAs per SM, ring depth, B by bulk copies). */
#define P6_FOR_EACH_CFG(X)                                                                     \
    X(256, 1, 4, false) X(256, 1, 5, false) X(256, 1, 6, false) X(128, 1, 4, false)            \
    X(128, 1, 6, false) X(128, 2, 4, false) X(256, 1, 4, true) X(256, 1, 5, true)              \
    X(256, 1, 6, true) X(128, 1, 6, true) X(128, 2, 4, true)
/* v9-mid's (transposed output, split K): token tiles of 256, 128 or 64, bulk
 * copies; the narrow tiles' stages are small (12.5 and 20.5 KB), so their rings
 * are deeper: 10 and 8 stages in flight instead of 4 (no measurable gain at
 * 128x2048x6144, docs/PERF.md; kept as recorded) */
#define P9_FOR_EACH_CFG(X) X(256, 1, 6, true) X(128, 1, 10, true) X(64, 1, 12, true)

fp4_status fp4_sm90_prefill8_init(fp4_err *err)
{
#define P6_SET_SMEM(BN_, MINB_, ST_, BULK_)                                                    \
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_prefill8_kernel<BN_, MINB_, ST_, BULK_, false>, \
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,          \
                                           p6_cfg<BN_, ST_>::SMEM));
    P6_FOR_EACH_CFG(P6_SET_SMEM)
#undef P6_SET_SMEM
    return FP4_OK;
}

/* FP4_OK when the current device is sm_90 and this build holds machine code for
 * it (the 90a target): elsewhere the kernels are traps. */
fp4_status fp4_sm90_wgmma_runs_here(const void *kernel, const char *name, fp4_err *err)
{
    int dev = 0, maj = 0, min = 0;
    FP4_CUDA_TRY(err, cudaGetDevice(&dev));
    FP4_CUDA_TRY(err, cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, dev));
    FP4_CUDA_TRY(err, cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, dev));
    if (maj != 9 || min != 0)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90 %s: needs sm_90 (wgmma), this GPU is sm_%d%d", name, maj, min);
    cudaFuncAttributes fa;
    const cudaError_t e = cudaFuncGetAttributes(&fa, kernel);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it for the launch checks */
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90 %s: not compiled for this GPU (needs the 90a target): %s",
                        name, cudaGetErrorString(e));
    }
    return FP4_OK;
}

fp4_status fp4_sm90_prefill8_launch_cfg(const fp4_sm90_gemm_args *a, int bn, int stages, int bulk,
                                        int parts, cudaStream_t stream, fp4_err *err)
{
    if (!fp4_sm90_prefill8_fits(a->m, a->n, a->k, a->num_sms))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90 v8-prefill: shape %lldx%lldx%lld not supported",
                        (long long)a->m, (long long)a->n, (long long)a->k);
    const size_t ws_need = fp4_sm90_prefill8_ws_size(a->m, a->n, a->k);
    if (!a->workspace || a->workspace_bytes < ws_need || ((uintptr_t)a->workspace & 15))
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "fp4-sm90 v8-prefill: needs a 16-byte aligned workspace of %zu bytes "
                        "(got %zu at %p)",
                        ws_need, a->workspace ? a->workspace_bytes : (size_t)0, a->workspace);
    if (parts == 0) parts = 3;
    if (bn == 0) bn = fp4_sm90_prefill8_bn(a->m, a->n, a->k, a->num_sms);
    const bool two_per_sm = bn == -128; /* 128-wide tiles, two CTAs per SM */
    if (two_per_sm) bn = 128;
    if (stages == 0) stages = two_per_sm ? P6_STAGES_128X2 : bn == 256 ? P6_STAGES_256 : P6_STAGES_128;
    if (bulk < 0) bulk = P6_BULK;
    const void *kernel = NULL;
#define P6_PICK(BN_, MINB_, ST_, BULK_)                                                        \
    if (bn == BN_ && (MINB_ == 2) == two_per_sm && stages == ST_ && (bulk != 0) == BULK_)      \
        kernel = (const void *)fp4_sm90_prefill8_kernel<BN_, MINB_, ST_, BULK_, false>;
    P6_FOR_EACH_CFG(P6_PICK)
#undef P6_PICK
    if (!kernel)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90 v8-prefill: no kernel for tile width %d%s, %d stages, %s", bn,
                        two_per_sm ? " x2" : "", stages, bulk ? "bulk copies" : "cp.async");
    fp4_status st = fp4_sm90_wgmma_runs_here(kernel, "v8-prefill", err);
    if (st != FP4_OK) return st;

    if (parts & 1) {
        const int64_t nchunks = (int64_t)(fp4_sm90_prefill8_ws_size(a->m, a->n, a->k) / 16);
        const int64_t per_block = 256 * P6_DQ_PER;
        const unsigned blocks = (unsigned)((nchunks + per_block - 1) / per_block);
        fp4_sm90_prefill8_dq_kernel<<<blocks, 256, 0, stream>>>(a->b_codes, a->b_sf,
                                                                (uint4 *)a->workspace, nchunks);
        FP4_CUDA_LAUNCH_TRY(err);
    }
    if (parts & 2) {
        int smem = 0;
#define P6_SMEM_OF(BN_, MINB_, ST_, BULK_)                                                     \
    if (kernel == (const void *)fp4_sm90_prefill8_kernel<BN_, MINB_, ST_, BULK_, false>)         \
        smem = p6_cfg<BN_, ST_>::SMEM;
        P6_FOR_EACH_CFG(P6_SMEM_OF)
#undef P6_SMEM_OF
        return fp4_sm90_wg_launch_tiles(kernel, smem, P6_THREADS, bn, a, a->a_codes, a->a_sf,
                                        stream, err);
    }
    return FP4_OK;
}

fp4_status fp4_sm90_wg_launch_tiles(const void *kernel, int smem, int threads, int bn,
                                    const fp4_sm90_gemm_args *a, const uint8_t *aq,
                                    const uint8_t *asf, cudaStream_t stream, fp4_err *err)
{
    const int KS = (int)p6_ks(a->k);
    const unsigned mtiles = (unsigned)((a->m + P6_BM - 1) / P6_BM);
    const unsigned ntiles = (unsigned)((a->n + bn - 1) / bn);
    const float alpha_eff = a->alpha * 16384.0f; /* both operands carry 2^-7 */
    const int M = (int)a->m, N = (int)a->n, K = (int)a->k;
    float *no_wsf = NULL;
    unsigned *no_cnt = NULL;
    void *args[] = {(void *)&aq,        (void *)&asf,    (void *)&a->workspace, (void *)&a->d,
                    (void *)&M,         (void *)&N,      (void *)&K,            (void *)&KS,
                    (void *)&alpha_eff, (void *)&no_wsf, (void *)&no_cnt};
    FP4_CUDA_TRY(err, cudaLaunchKernel(kernel, dim3(mtiles, ntiles), dim3((unsigned)threads), args,
                                       (size_t)smem, stream));
    return FP4_OK;
}

fp4_status fp4_sm90_prefill8_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
#if P6_VERIFIED
    return fp4_sm90_prefill8_launch_cfg(a, 0, 0, -1, 3, stream, err);
#else
    (void)a, (void)stream;
    return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                    "fp4-sm90 v8-prefill: not yet verified on a GPU; bench/prefill6-dev.sh checks "
                    "it, then set P6_VERIFIED to 1");
#endif
}

/* ==== v9-mid: v8's main loop with the operands swapped ==================================
 *
 * Why: v8 tiles the tokens by 128 and has no split K, so below M ~ 2048 it
 * runs on a fraction of the SMs (16 CTAs at 256x2048x6144), and v4 (mma.sync)
 * re-dequantizes the weights once per 32-token chunk (45 us at 256x2048x6144,
 * 0.30x cuBLAS bf16). v9 makes the weights wgmma's A operand (packed at
 * prepare time so that a CTA's k-step is one contiguous 4 KB block, with the
 * standard swizzled scales; dequantized into registers by v8's A path: once
 * per weight element and token tile) and the tokens its B operand:
 * a prepass (fp4_sm90_mid9_tok_kernel) turns the raw run-time tokens into the
 * fp16 swizzled tiles v8's weight prepass makes, with the same k permutation,
 * and the main kernel bulk-copies them. Tiles: 128 weight rows x 64, 128 or
 * 256 tokens; K is split over grid.z until the CTAs fill the GPU once, the
 * partial tiles summed by red.global.add.v4 into an fp32 workspace whose last
 * CTA writes D (no second launch). D = [tokens, weights] is written through a
 * transposed shared-memory tile (coalesced rows).
 * First measurement (commit 95d8100, raw row-major weights, 6-stage rings):
 * 34.4 us at 256x2048x6144, 16.1 at 64x2048, 19.9 at 16x2048; Nsight Compute
 * (bench/results/2026-12-02-h200-s4-dev/call3) showed the SMs active for only
 * 40-59% of the main kernel's cycles at 1 CTA a SM with equal work per CTA:
 * uneven CTA times, each latency-bound on its loads. So the weights moved to
 * contiguous (tile, k-step) blocks and the 64- and 128-token rings were
 * deepened (12 and 10 stages): no measurable change in the recorded call
 * (commit 455a938: 34.2 us at 256x2048x6144, 21.2 at 128x2048), kept as
 * recorded; what leaves the SMs idle is still open (docs/PERF.md).
 * Prediction (H200): 256x2048x6144: 16 tiles x 8 splits, 6.4 GFLOP at v8's
 * ~600 TFLOP/s + ~2 us prepass/reduction: ~13 us; 64x2048: 16 x 8 CTAs of
 * 128 x 64, ~5-7 us; 16x2048: same tile, a quarter of it used: ~6 us.
 */

/* Token prepass: raw NVFP4 tokens (codes [M, K/2], swizzled scales) -> the
 * swizzled fp16 tiles of v8's weight prepass, k permutation included
 * (fp4_sm90_tokperm.h). Rows rows_out..: not written (never read); rows
 * M..rows_out - 1: zero. One thread a 16-byte chunk. vec 0: the code bytes
 * and the scale bytes one by one (about 260 instructions a chunk, math-pipe
 * throttled: 4.38 us at 256x2048x6144, Nsight Compute, -s6-dev-call5); vec 1
 * (P9_TOK_VEC): the four k-blocks of the row's step as four 8-byte loads
 * (rows are 8-byte aligned: K % 16 == 0) and the four scale bytes as one
 * 4-byte load (kb & 3 is the swizzle's innermost index), then
 * fp4_tokperm_word (checked on the CPU against the byte-wise definition).
 * vec 1 is the default since session 7's first call (GPU test and sanitizers
 * pass; 256x2048x6144 20.80 -> 20.21 us, 1024x768x6144 32.81 -> 30.51:
 * bench/results/2026-12-02-h200-s7-dev-call1/, vec/ against the top level). */
#ifndef P9_TOK_VEC
#define P9_TOK_VEC 1
#endif
__global__ void __launch_bounds__(256)
    fp4_sm90_mid9_tok_kernel(const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                             uint4 *__restrict__ ws, int M, int rows_out, int K, int KS,
                             int64_t nchunks, int vec)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* v11's main kernel may be scheduled now (it waits for this grid's end
     * before reading the tiles): hides the launch gap between the two */
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    const int64_t q = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (q >= nchunks) return;
    const int64_t blk = q >> 10;
    const int nt = (int)(blk / KS), s = (int)(blk % KS);
    const int rr = (int)(q >> 3) & 127, c = ((int)q & 7) ^ (rr & 7);
    const int m = nt * 128 + rr;
    if (m >= rows_out) return;
    if (m >= M) {
        ws[q] = make_uint4(0u, 0u, 0u, 0u);
        return;
    }
    uint32_t w = 0, sw = 0;
    if (vec) {
        const int KB = K / 16, nkb = KB - 4 * s < 4 ? KB - 4 * s : 4; /* k-blocks inside K */
        const uint64_t *row = (const uint64_t *)(aq + (size_t)m * (K / 2) + (size_t)s * 32);
        uint64_t w8[4];
#pragma unroll
        for (int r = 0; r < 4; r++) w8[r] = r < nkb ? __ldg(row + r) : 0ull;
        w = fp4_tokperm_word(w8, c);
        sw = __ldg((const uint32_t *)(asf + swz_off(m, 4 * s, 4 * KS)));
        if (nkb < 4) sw &= (1u << (8 * nkb)) - 1u; /* the swizzle's padding bytes */
    } else {
        const int arow = K / 2, KB = K / 16;
        const uint8_t *row = aq + (size_t)m * arow + (size_t)s * 32;
        const int left = arow - s * 32; /* code bytes of this step inside the row */
#pragma unroll
        for (int r = 0; r < 4; r++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int k = 16 * r + 8 * (c & 1) + (c >> 1) + 4 * h; /* within the step */
                const uint32_t byte = (k >> 1) < left ? (uint32_t)__ldg(row + (k >> 1)) : 0u;
                w |= ((byte >> (4 * (k & 1))) & 0xFu) << (4 * (r + 4 * h));
            }
            const int kb = 4 * s + r;
            if (kb < KB) sw |= (uint32_t)__ldg(asf + swz_off(m, kb, 4 * KS)) << (8 * r);
        }
    }
    uint32_t sc[4];
    wg_b_scales(sw, sc);
    ws[q] = wg_b_word(w, sc);
}

static int64_t p9_rup(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
#define P9_MAX_SPLITS 16
#define P9_ALIGN(x) (((x) + 255) / 256 * 256)

/* The weights as v8's A, the codes re-ordered so that a CTA's step is one
 * contiguous block: [128-row tile][k-step][row][32 bytes], rows and K padded
 * with zeros; the scales in the standard swizzled layout, whose 512-byte
 * atoms already are one (tile, k-step). */
size_t fp4_sm90_mid9_codes_size(int64_t n, int64_t k)
{
    return (size_t)p9_rup(n, P6_BM) * (size_t)p6_ks(k) * 32;
}
size_t fp4_sm90_mid9_scales_size(int64_t n, int64_t k) { return fp4_swizzled_size(n, k); }

void fp4_sm90_mid9_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales)
{
    const int64_t N = b->rows, K = b->cols, KB = K / 16, kbp = fp4_swizzled_kblocks(K);
    const int64_t KS = p6_ks(K), rowb = K / 2;
    memset(codes, 0, fp4_sm90_mid9_codes_size(N, K));
    for (int64_t n = 0; n < N; n++)
        for (int64_t s = 0; s < KS; s++) {
            const int64_t len = rowb - 32 * s < 32 ? rowb - 32 * s : 32;
            memcpy(codes + (((size_t)(n / P6_BM) * (size_t)KS + (size_t)s) * P6_BM + (size_t)(n % P6_BM)) * 32,
                   b->codes + (size_t)n * (size_t)rowb + (size_t)s * 32, (size_t)len);
        }
    memset(scales, 0, fp4_sm90_mid9_scales_size(N, K));
    for (int64_t n = 0; n < N; n++)
        for (int64_t kb = 0; kb < KB; kb++)
            scales[fp4_swizzle_offset(n, kb, kbp)] = b->scales[(size_t)n * (size_t)KB + (size_t)kb];
}

/* workspace: the tokens' fp16 tiles (rows padded to 256), the fp32 split-K
 * sums [roundup(m, 256)][roundup(n, 128)], one arrival counter a tile */
static size_t p9_tok_bytes(int64_t m, int64_t k)
{
    return (size_t)(p9_rup(m, 256) / 128) * (size_t)p6_ks(k) * P6_WS_BLOCK;
}
static size_t p9_sum_bytes(int64_t m, int64_t n) { return (size_t)p9_rup(m, 256) * (size_t)p9_rup(n, 128) * 4; }

size_t fp4_sm90_mid9_ws_size(int64_t m, int64_t n, int64_t k)
{
    const size_t cnt = (size_t)(p9_rup(n, 128) / 128) * (size_t)(p9_rup(m, 64) / 64) * 4;
    return P9_ALIGN(p9_tok_bytes(m, k)) + P9_ALIGN(p9_sum_bytes(m, n)) + P9_ALIGN(cnt);
}

int fp4_sm90_mid9_fits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    (void)num_sms;
    if (m < 1 || n < 1 || k < 16 || k % 16 != 0) return 0;
    if ((m + 63) / 64 > 65535) return 0; /* grid y (token tiles) */
    if (k / 2 > INT32_MAX / 2 || n > INT32_MAX - P6_BM || m > INT32_MAX - 256) return 0;
    return 1;
}

/* K splits for bn-token tiles: until the CTAs fill the GPU once (at most
 * 16, at least 4 k-steps a split); forced > 0: that many (at most the
 * k-steps). At least 1. */
static int64_t p9_split_rule(int64_t m, int64_t n, int64_t k, int num_sms, int forced, int bn)
{
    const int64_t tiles = ((n + P6_BM - 1) / P6_BM) * ((m + bn - 1) / bn), ks = p6_ks(k);
    int64_t s;
    if (forced > 0) {
        s = forced < ks ? forced : ks;
    } else {
        s = num_sms > 0 ? num_sms / tiles : 1;
        if (s > ks / 4) s = ks / 4;
        if (s > P9_MAX_SPLITS) s = P9_MAX_SPLITS;
    }
    return s < 1 ? 1 : s;
}

/* token tile width and K splits: tiles of 64 / 128 / 256 tokens (the fewest
 * that hold M up to 256), then splits until the CTAs fill the GPU once (at
 * most 16, at least 4 k-steps a split); forced > 0: that many (at most KS) */
void fp4_sm90_mid9_cfg(int64_t m, int64_t n, int64_t k, int num_sms, int forced, int *bn,
                       int *splits)
{
    *bn = m <= 64 ? 64 : m <= 128 ? 128 : 256;
    *splits = (int)p9_split_rule(m, n, k, num_sms, forced, *bn);
}

fp4_status fp4_sm90_mid9_init(fp4_err *err)
{
#define P9_SET_SMEM(BN_, MINB_, ST_, BULK_)                                                    \
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_prefill8_kernel<BN_, MINB_, ST_, BULK_, true>, \
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,          \
                                           p6_cfg<BN_, ST_>::SMEM));
    P9_FOR_EACH_CFG(P9_SET_SMEM)
#undef P9_SET_SMEM
    return FP4_OK;
}

/* The token prepass of v9 / v11: the rows the bn-token tiles read, as fp16
 * tiles in 128-row blocks at the start of the workspace. */
static fp4_status p9_launch_tok(const fp4_sm90_gemm_args *a, int bn, int KS, uint8_t *ws,
                                cudaStream_t stream, fp4_err *err)
{
    const int64_t rows_out = p9_rup(a->m, bn);
    const int64_t nchunks = (p9_rup(rows_out, 128) / 128) * KS * 1024;
    fp4_sm90_mid9_tok_kernel<<<(unsigned)((nchunks + 255) / 256), 256, 0, stream>>>(
        a->a_codes, a->a_sf, (uint4 *)ws, (int)a->m, (int)rows_out, (int)a->k, KS, nchunks,
        P9_TOK_VEC);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

/* v9's (slices false) or v11's main kernel for bn-token tiles, its shared
 * memory, and whether it runs here */
static fp4_status p9_pick(int bn, bool slices, const char *name, const void **kernel, int *smem,
                          fp4_err *err)
{
    *kernel = NULL;
#define P9_PICK(BN_, MINB_, ST_, BULK_)                                                        \
    if (!*kernel && bn == BN_) {                                                               \
        *kernel = slices ? (const void *)fp4_sm90_prefill8_kernel<BN_, MINB_, ST_, BULK_, true, true> \
                         : (const void *)fp4_sm90_prefill8_kernel<BN_, MINB_, ST_, BULK_, true, false>; \
        *smem = p6_cfg<BN_, ST_>::SMEM;                                                        \
    }
    P9_FOR_EACH_CFG(P9_PICK)
#undef P9_PICK
    if (!*kernel)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 %s: no kernel for %d-token tiles", name, bn);
    return fp4_sm90_wgmma_runs_here(*kernel, name, err);
}

/* v9's and v11's argument checks: the shape fits, the workspace is there,
 * large enough and aligned */
static fp4_status p9_check_args(const fp4_sm90_gemm_args *a, const char *name, size_t ws_need,
                                fp4_err *err)
{
    if (!fp4_sm90_mid9_fits(a->m, a->n, a->k, a->num_sms))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 %s: shape %lldx%lldx%lld not supported",
                        name, (long long)a->m, (long long)a->n, (long long)a->k);
    if (!a->workspace || a->workspace_bytes < ws_need || ((uintptr_t)a->workspace & 15))
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "fp4-sm90 %s: needs a 16-byte aligned, once-zeroed workspace of %zu "
                        "bytes (got %zu at %p)",
                        name, ws_need, a->workspace ? a->workspace_bytes : (size_t)0, a->workspace);
    return FP4_OK;
}

fp4_status fp4_sm90_mid9_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    fp4_status st = p9_check_args(a, "v9-mid", fp4_sm90_mid9_ws_size(a->m, a->n, a->k), err);
    if (st != FP4_OK) return st;
    int bn = 0, splits = 1;
    fp4_sm90_mid9_cfg(a->m, a->n, a->k, a->num_sms, a->splits, &bn, &splits);
    const void *kernel = NULL;
    int smem = 0;
    if ((st = p9_pick(bn, false, "v9-mid", &kernel, &smem, err)) != FP4_OK) return st;

    uint8_t *ws = (uint8_t *)a->workspace;
    float *wsf = (float *)(ws + P9_ALIGN(p9_tok_bytes(a->m, a->k)));
    unsigned *cnt = (unsigned *)((uint8_t *)wsf + P9_ALIGN(p9_sum_bytes(a->m, a->n)));
    const int KS = (int)p6_ks(a->k);
    if ((st = p9_launch_tok(a, bn, KS, ws, stream, err)) != FP4_OK) return st;
    /* both operands carry 2^-7 from the dequantization */
    const float alpha_eff = a->alpha * 16384.0f;
    const dim3 grid((unsigned)((a->n + P6_BM - 1) / P6_BM), (unsigned)((a->m + bn - 1) / bn),
                    (unsigned)splits);
    const uint8_t *wq = a->b_codes, *wsc = a->b_sf, *tok = ws;
    const int Mw = (int)a->n, Nt = (int)a->m, K = (int)a->k;
    void *args[] = {(void *)&wq,  (void *)&wsc, (void *)&tok,       (void *)&a->d,
                    (void *)&Mw,  (void *)&Nt,  (void *)&K,         (void *)&KS,
                    (void *)&alpha_eff, (void *)&wsf, (void *)&cnt};
    FP4_CUDA_TRY(err, cudaLaunchKernel(kernel, grid, dim3(P6_THREADS), args, (size_t)smem, stream));
    return FP4_OK;
}

/* ==== v11-mid: v9 with a split-K epilogue of plain stores =============================
 *
 * Why: v9's per-CTA timestamps (bench/results/2026-12-02-h200-s6-dev-call1,
 * 256x2048x6144, 8 splits): main loops end at 9.6 us, the red.global.add of
 * the partial tiles at 14.4 us (median), and the last CTA of each tile ends
 * at up to 28.3 us: its read-back loop (load, zero, store D per float4)
 * waits one L2 round trip per iteration, 32 in a row. v11 keeps v9's
 * packing, prepass, tiles and main loop; the S CTAs of a tile are launched
 * cooperatively (co-resident), store their partial tiles from the
 * accumulators into their own slices (no atomics), meet at a per-tile
 * arrival barrier and each reduce 1/S of the tile and write those entries
 * of D (p11_slices_reduce). Summation in split order: deterministic, unlike
 * v9's atomics. The main kernel is a programmatic dependent launch: its
 * launch and set-up overlap the token prepass (griddepcontrol).
 * Prediction (256x2048x6144): prepass and launch gap ~5 us (unchanged) +
 * main loop 9.6 + slices 128 KB a CTA out and in ~1.5 + barrier: ~17 us
 * (v9 33.7). Measured (docs/PERF.md): 20.65 us in the recorded call of
 * commit 816c48f (128-token tiles, 4 splits), v9 34.00 in the same rounds.
 * Workspace: v9's token tiles, the slabs [tile][S][BN / 8][256] float4 for the
 * largest S the co-residency bound allows (S x tiles <= P11_MAX_CTAS), two
 * counters a tile (zeroed once; every launch leaves them zero). */
#define P11_MAX_CTAS 256 /* co-resident CTAs the workspace is sized for (>= SMs of any sm_90) */

/* Token tiles of 64 (M <= 64), 128 (M <= 256: at 256 tokens two 128-token
 * tiles with half the splits beat one 256-token tile, 20.9 against 22.0 us at
 * 256x2048x6144 and 15.4 against 17.9 at 256x768x6144, -s6-dev-call3) or 256;
 * FP4_SM90_V11_BN=64|128|256 forces it (development). Splits: v9's rule (fill
 * the SMs once, >= 4 k-steps a split, <= 16; forced > 0: that many, at most
 * the k-steps), then clamped so that the CTAs co-reside (tiles x S <= SMs). */
static int p11_splits(int64_t m, int64_t n, int64_t k, int num_sms, int forced, int *bn)
{
    const char *env = getenv("FP4_SM90_V11_BN");
    const int bn_forced = env ? atoi(env) : 0;
    *bn = bn_forced == 64 || bn_forced == 128 || bn_forced == 256 ? bn_forced
          : m <= 64                                               ? 64
          : m <= 256                                              ? 128
                                                                  : 256;
    const int64_t tiles = ((n + P6_BM - 1) / P6_BM) * ((m + *bn - 1) / *bn);
    int64_t s = p9_split_rule(m, n, k, num_sms, forced, *bn);
    int64_t cap = (num_sms < P11_MAX_CTAS ? num_sms : P11_MAX_CTAS) / tiles; /* co-resident */
    if (cap < 1) cap = 1;
    if (s > cap) s = cap;
    return s < 1 ? 1 : (int)s;
}

static size_t p11_slab_bytes(int64_t m, int64_t n, int64_t k, int *bn, int64_t *tiles)
{
    /* the largest count any call can use: forced beyond the k-steps, SMs <= P11_MAX_CTAS */
    const int smax = p11_splits(m, n, k, P11_MAX_CTAS, INT32_MAX, bn);
    *tiles = ((n + P6_BM - 1) / P6_BM) * ((m + *bn - 1) / *bn);
    return smax > 1 ? (size_t)*tiles * (size_t)smax * (size_t)*bn * P6_BM * 4 : 0;
}

size_t fp4_sm90_mid11_ws_size(int64_t m, int64_t n, int64_t k)
{
    int bn = 0;
    int64_t tiles = 0;
    const size_t slabs = p11_slab_bytes(m, n, k, &bn, &tiles);
    return P9_ALIGN(p9_tok_bytes(m, k)) + P9_ALIGN(slabs) + P9_ALIGN((size_t)tiles * 8);
}

void fp4_sm90_mid11_cfg(int64_t m, int64_t n, int64_t k, int num_sms, int forced, int *bn,
                        int *splits)
{
    *splits = p11_splits(m, n, k, num_sms, forced, bn);
}

fp4_status fp4_sm90_mid11_init(fp4_err *err)
{
#define P11_SET_SMEM(BN_, MINB_, ST_, BULK_)                                                   \
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_prefill8_kernel<BN_, MINB_, ST_, BULK_, true, true>, \
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,          \
                                           p6_cfg<BN_, ST_>::SMEM));
    P9_FOR_EACH_CFG(P11_SET_SMEM)
#undef P11_SET_SMEM
    return FP4_OK;
}

/* v11's main kernel for bn-token tiles (fp4_sm90_mid11_pick_fn) */
static fp4_status p11_pick(int bn, const void **kernel, int *smem, int *threads, fp4_err *err)
{
    *threads = P6_THREADS;
    return p9_pick(bn, true, "v11-mid", kernel, smem, err);
}

fp4_status fp4_sm90_mid11_launch_with(const fp4_sm90_gemm_args *a, const char *name,
                                      fp4_sm90_mid11_pick_fn pick, cudaStream_t stream, fp4_err *err)
{
    fp4_status st = p9_check_args(a, name, fp4_sm90_mid11_ws_size(a->m, a->n, a->k), err);
    if (st != FP4_OK) return st;
    int bn = 0, slab_bn = 0;
    const int splits = p11_splits(a->m, a->n, a->k, a->num_sms, a->splits, &bn);
    int64_t tiles = 0;
    const size_t slabs = p11_slab_bytes(a->m, a->n, a->k, &slab_bn, &tiles);
    const void *kernel = NULL;
    int smem = 0, threads = 0;
    if ((st = pick(bn, &kernel, &smem, &threads, err)) != FP4_OK) return st;

    uint8_t *ws = (uint8_t *)a->workspace;
    float *wsf = (float *)(ws + P9_ALIGN(p9_tok_bytes(a->m, a->k)));
    unsigned *cnt = (unsigned *)((uint8_t *)wsf + P9_ALIGN(slabs));
    const int KS = (int)p6_ks(a->k);
    if ((st = p9_launch_tok(a, bn, KS, ws, stream, err)) != FP4_OK) return st;
    const float alpha_eff = a->alpha * 16384.0f; /* both operands carry 2^-7 */
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((a->n + P6_BM - 1) / P6_BM), (unsigned)((a->m + bn - 1) / bn),
                       (unsigned)splits);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    unsigned nattr = 0;
    if (splits > 1) { /* the tile barrier needs the S CTAs co-resident */
        attr[nattr].id = cudaLaunchAttributeCooperative;
        attr[nattr++].val.cooperative = 1;
    }
    const char *pdl_env = getenv("FP4_SM90_V11_PDL"); /* development: 0 turns it off */
    if (!pdl_env || atoi(pdl_env) != 0) { /* overlap the prepass's tail (griddepcontrol) */
        attr[nattr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[nattr++].val.programmaticStreamSerializationAllowed = 1;
    }
    cfg.attrs = attr;
    cfg.numAttrs = nattr;
    const uint8_t *wq = a->b_codes, *wsc = a->b_sf, *tok = ws;
    const int Mw = (int)a->n, Nt = (int)a->m, K = (int)a->k;
    void *args[] = {(void *)&wq,  (void *)&wsc, (void *)&tok,       (void *)&a->d,
                    (void *)&Mw,  (void *)&Nt,  (void *)&K,         (void *)&KS,
                    (void *)&alpha_eff, (void *)&wsf, (void *)&cnt};
    FP4_CUDA_TRY(err, cudaLaunchKernelExC(&cfg, kernel, args));
    return FP4_OK;
}

fp4_status fp4_sm90_mid11_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    return fp4_sm90_mid11_launch_with(a, "v11-mid", p11_pick, stream, err);
}

#ifdef P6_DEV_STAMPS
/* Development only: clear the stamps; copy out up to max_ctas CTAs' 5 stamps
 * (SM, then ns: start, main loop done, partial tile sent, end). Return 0 / the
 * CTAs copied, -1 on a CUDA error. */
extern "C" int fp4_sm90_dev_stamps_clear(void)
{
    void *p = NULL;
    if (cudaGetSymbolAddress(&p, p6_dev_stamps) != cudaSuccess) return -1;
    return cudaMemset(p, 0, sizeof(unsigned long long) * P6_DEV_MAX_CTAS * P6_DEV_STAMPS_N) ==
                   cudaSuccess
               ? 0
               : -1;
}

extern "C" int fp4_sm90_dev_stamps(unsigned long long *out, int max_ctas)
{
    const int n = max_ctas < P6_DEV_MAX_CTAS ? max_ctas : P6_DEV_MAX_CTAS;
    if (cudaMemcpyFromSymbol(out, p6_dev_stamps, sizeof(unsigned long long) * P6_DEV_STAMPS_N * (size_t)n) !=
        cudaSuccess)
        return -1;
    return n;
}
#endif
