/* The register-A wgmma main loop shared by prefill.cu (kernel 8, TR false)
 * and mid.cu (kernel 11, TR true), as one template: include it in those two
 * files only.
 *
 * CTA tile 128 x BN x 64, 256 threads = two consumer warpgroups of 64 rows,
 * wgmma m64nBNk16 with A dequantized into registers (wg_a_frag) and B read
 * from shared memory. B's tiles are a prepass's swizzled fp16 tiles (16 KB
 * per 128 rows and k-step), bulk-copied by thread 0 into an ST-deep ring and
 * counted on the slot's mbarrier; A's raw codes and scales arrive by 16-byte
 * cp.async next to them. Step s (one barrier): wait for stage s (my
 * cp.asyncs, the slot's mbarrier), __syncthreads, issue the copies of stage
 * s + ST - 2 into the slot of step s - 2 (retired by every thread's wgmma
 * wait in step s - 1), dequantize A of step s into registers, issue the 4
 * wgmmas of step s, wait until only they are in flight (the previous step's A
 * registers are then free). The tensor cores run step s - 1 while the
 * threads wait, copy and dequantize A for step s.
 *   TR false (prefill): A = the tokens [M, K/2] with swizzled scales, B = the
 *     weights' prepass tiles; D [M, N] written from the registers.
 *   TR true (mid, swap AB): A = the weights in contiguous (128-row tile,
 *     k-step) blocks of 4 KB (fp4_sm90_mid_pack_b), B = the tokens' prepass
 *     tiles; D is [N, M] (tokens x weights). grid.z = S K splits: with S > 1
 *     the tile's S co-resident CTAs reduce through the slices epilogue
 *     (wgmma.cuh); with S = 1 the tile leaves through a transposed
 *     shared-memory tile as coalesced rows. */
#ifndef FP4_SM90_MAINLOOP_CUH
#define FP4_SM90_MAINLOOP_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/sm90/device.cuh"
#include "kernels/sm90/wgmma.cuh"

#define ML_BM WG_BM
#define ML_WS_BLOCK 16384 /* fp16 bytes of one 128-row block of one k-step */
#define ML_TR_LD 132      /* floats a token row of the transposed tile (128 + 4: no bank conflicts) */

/* shared-memory map: [ST B tiles of BN x 128 bytes][ST x (A codes 4096, A scales 512)]
 * [ST mbarriers] */
template <int BN, int ST> struct ml_cfg {
    static constexpr int BTILE = BN * 128; /* multiple of 1024: the swizzle needs that alignment */
    /* B's tile is NBLK copies of BBYTES from the workspace (BN = 64: half a block) */
    static constexpr int NBLK = BN >= 128 ? BN / 128 : 1;
    static constexpr int BBYTES = BN >= 128 ? ML_WS_BLOCK : BN * 128;
    static constexpr int A_BASE = ST * BTILE;
    static constexpr int ASTAGE = ML_BM * WG_ROWB + 512;
    static constexpr int BAR_OFF = ST * BTILE + ST * ASTAGE;
    static constexpr int SMEM = BAR_OFF + (8 * ST + 63) / 64 * 64 + 1024; /* +1024: alignment */
};

#ifdef FP4_SM90_HAVE_WGMMA
/* mid's A (the weights, fp4_sm90_mid_pack_b): tile mt_blk's k-step L is 4096
 * contiguous bytes [128 rows][32], zero-padded; plus its 512-byte scale tile.
 * Contiguous blocks instead of 32-byte pieces of 128 rows 3 KB apart: the
 * weights are streamed from DRAM once, by every CTA at the same k-step. */
static __device__ __forceinline__ void ml_load_weights(uint32_t a_dst, uint32_t asf_dst,
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
 * workspace blocks of 16 KB) by bulk copies issued by thread 0, counted on the
 * slot's mbarrier. */
template <int BN, int ST, bool TR>
static __device__ __forceinline__ void ml_load_stage(
    uint32_t sbase, int ls, int KS, const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
    const uint8_t *__restrict__ bw, int M, int arow, bool a16, int m0, int mt_blk, int nb0, int ks0,
    int tid)
{
    typedef ml_cfg<BN, ST> C;
    const int slot = ls % ST;
    const uint32_t a_dst = sbase + (uint32_t)(C::A_BASE + slot * C::ASTAGE);
    if (TR) /* mid's packed weights: the 4 KB of (tile, k-step) are contiguous, no tails */
        ml_load_weights(a_dst, a_dst + ML_BM * WG_ROWB, aq, asf, mt_blk, KS, ks0 + ls, tid);
    else
        wg_load_a(a_dst, a_dst + ML_BM * WG_ROWB, aq, asf, M, arow, a16, m0, mt_blk, KS, ks0 + ls, tid);
    if (tid == 0) {
        const uint32_t bar = sbase + (uint32_t)(C::BAR_OFF + slot * 8);
        wg_mbar_expect(bar, (uint32_t)(BN * 128));
#pragma unroll
        for (int blk = 0; blk < C::NBLK; blk++)
            wg_bulk_g2s(sbase + (uint32_t)(slot * C::BTILE + blk * ML_WS_BLOCK),
                        bw + ((size_t)(nb0 + blk) * KS + ks0 + ls) * ML_WS_BLOCK, C::BBYTES, bar);
    }
}

/* One k-step s (see the top). acur: this step's A registers (free: the wgmma
 * that read them, step s - 2, retired in step s - 1). */
template <int BN, int ST, bool TR>
static __device__ __forceinline__ void ml_step(
    int s, int KS, int KSn, int ks0, float *acc, uint32_t *acur, const unsigned char *smem,
    uint32_t sbase, const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
    const uint8_t *__restrict__ bw, int M, int arow, bool a16, int m0, int mt_blk, int nb0, int tid)
{
    typedef ml_cfg<BN, ST> C;
    const int slot = s % ST;
    wg_cp_wait<ST - 3>(); /* committed: ST - 2 + s groups; stage s is group s */
    /* B of stage s landed: use u = s / ST of the slot completes phase u & 1 */
    wg_mbar_wait(sbase + (uint32_t)(C::BAR_OFF + slot * 8), (uint32_t)((s / ST) & 1));
    __syncthreads();
    {
        const int ls = s + ST - 2; /* into the slot of step s - 2 */
        if (ls < KSn)
            ml_load_stage<BN, ST, TR>(sbase, ls, KS, aq, asf, bw, M, arow, a16, m0, mt_blk, nb0,
                                        ks0, tid);
        wg_cp_commit(); /* possibly empty: keeps the group count uniform */
    }
    const unsigned char *a_st = smem + C::A_BASE + slot * C::ASTAGE;
    wg_a_frag(a_st, a_st + ML_BM * WG_ROWB, tid, acur);
    wg_fence();
    wg_mma_step<BN>(acc, acur, sbase + (uint32_t)(slot * C::BTILE), s == 0);
    wg_commit();
    wg_wait<1>(); /* step s - 1 retired: its A registers and (after the next barrier) its slot */
}
#endif /* FP4_SM90_HAVE_WGMMA */

#ifdef FP4_SM90_HAVE_WGMMA
/* mid's split-K epilogue (TR, S > 1; wg_slices_* in wgmma.cuh) */
template <int BN>
static __device__ __forceinline__ void ml_slices_reduce(const float *acc, float *__restrict__ wsf,
                                                         unsigned *__restrict__ cnt,
                                                         __nv_bfloat16 *__restrict__ d, int S,
                                                         int tok0, int m0, int N, int M,
                                                         float alpha, int tid)
{
    float4 *slab = wg_slices_store<BN>(acc, wsf, S, tid);
    wg_slices_meet(cnt, S, tid);
    wg_slices_sum<BN>(slab, cnt, d, S, tok0, m0, N, M, alpha, tid);
}
#endif

/* aq [M, K/2]; asf swizzled [roundup(M,128), 4 KS]; bw the prepass's fp16 tiles;
 * KS = ceil(K / 64). Grid: x = m tiles of 128, y = n tiles of BN, z = K splits
 * (TR only).
 * TR false (prefill): d [M, N] bf16, written from the registers.
 * TR true (mid, swap AB): A is the weight matrix (M = its rows), B the tokens
 * (N = their count); d is [N, M] (tokens x weights). With gridDim.z = S > 1
 * the CTA runs k-steps [z KS / S, (z + 1) KS / S) and the tile's S CTAs
 * (co-resident: cooperative launch) reduce through wsf and cnt (the slices
 * epilogue); with S = 1 the tile goes through shared memory transposed and
 * leaves as coalesced rows. */
template <int BN, int ST, bool TR>
__global__ void __launch_bounds__(WG_THREADS, 1)
    fp4_sm90_wg_ring_kernel(const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                            const uint8_t *__restrict__ bw, __nv_bfloat16 *__restrict__ d, int M,
                            int N, int K, int KS, float alpha_eff, float *__restrict__ wsf,
                            unsigned *__restrict__ cnt)
{
#ifdef FP4_SM90_HAVE_WGMMA
    extern __shared__ unsigned char ml_smem_raw[];
    uint32_t sbase = 0;
    unsigned char *smem = wg_smem_aligned(ml_smem_raw, &sbase);
    const int tid = threadIdx.x;
    const int m0 = blockIdx.x * ML_BM, mt_blk = blockIdx.x;
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

    if (tid == 0) { /* per phase: one arrival (thread 0's expect_tx) and the bytes */
        for (int i = 0; i < ST; i++)
            wg_mbar_init(sbase + (uint32_t)(ml_cfg<BN, ST>::BAR_OFF + i * 8), 1);
        wg_mbar_init_fence();
    }
    __syncthreads();
    /* mid may start before its token prepass ends (programmatic dependent
     * launch): everything above overlapped the prepass's tail; the tokens are
     * read below. Without that launch attribute this returns at once. */
    if (TR) asm volatile("griddepcontrol.wait;" ::: "memory");

    /* prologue: stages 0 .. ST - 3 */
#pragma unroll 1
    for (int ls = 0; ls < ST - 2; ls++) {
        if (ls < KSn)
            ml_load_stage<BN, ST, TR>(sbase, ls, KS, aq, asf, bw, M, arow, a16, m0, mt_blk, nb0,
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
        ml_step<BN, ST, TR>(s, KS, KSn, ks0, acc, ra, smem, sbase, aq, asf, bw, M, arow, a16, m0,
                              mt_blk, nb0, tid);
        ml_step<BN, ST, TR>(s + 1, KS, KSn, ks0, acc, rb, smem, sbase, aq, asf, bw, M, arow, a16,
                              m0, mt_blk, nb0, tid);
    }
    if (s < KSn)
        ml_step<BN, ST, TR>(s, KS, KSn, ks0, acc, ra, smem, sbase, aq, asf, bw, M, arow, a16, m0,
                              mt_blk, nb0, tid);
    wg_wait<0>();
    wg_reg_fence<BN / 2>(acc);
    wg_cp_wait<0>();
    if (TR && S > 1) {
        ml_slices_reduce<BN>(acc, wsf, cnt, d, (int)gridDim.z, blockIdx.y * BN, m0, N, M, alpha_eff,
                              tid);
        return;
    }
    if (!TR) {
        wg_store_d<BN>(acc, d, M, N, m0, blockIdx.y * BN, alpha_eff, tid);
        return;
    }
    /* TR, one split: every wgmma of the CTA retired after the barrier: the ring is free
     * for the transposed tile T[token][row] (ML_TR_LD floats a token) */
    static_assert(!TR || BN * ML_TR_LD * 4 <= ml_cfg<BN, ST>::BAR_OFF, "T tile exceeds the ring");
    __syncthreads();
    float *T = (float *)smem;
    {
        const int lane = tid & 31, g = lane >> 2, t = lane & 3, r0 = (tid >> 5) * 16 + g;
#pragma unroll
        for (int i = 0; i < BN / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                T[(8 * i + 2 * t + (e & 1)) * ML_TR_LD + r0 + 8 * (e >> 1)] = acc[4 * i + e];
    }
    __syncthreads();
    const int tok0 = blockIdx.y * BN;
    for (int e = tid; e < BN * (ML_BM / 4); e += WG_THREADS) {
        const int tok = e / (ML_BM / 4), c4 = (e % (ML_BM / 4)) * 4;
        const int n = tok0 + tok, m = m0 + c4; /* d row (token), d column (weight row) */
        if (n >= N) continue;
        const float4 v = *(const float4 *)(T + tok * ML_TR_LD + c4);
        if (m < M) store_bf16x4(d, n, m, M, v, alpha_eff, (M & 3) == 0);
    }
#else
    (void)aq, (void)asf, (void)bw, (void)d, (void)M, (void)N, (void)K, (void)KS, (void)alpha_eff;
    (void)wsf, (void)cnt;
    __trap(); /* wgmma: sm_90a only; the launch refuses other targets first */
#endif
}

#endif
