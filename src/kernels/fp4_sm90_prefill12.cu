/* fp4-sm90 "v12-prefill" (variant 12): v8-prefill's operands, prepass and
 * tiles with a warp-specialized main loop.
 *
 * Why (Nsight Compute of v8's main kernel at 4096x2048x6144,
 * bench/results/2026-12-02-h200-s7-dev-call2/): tensor pipe active 79%, L2
 * throughput 42% (not bandwidth-bound), 8 warps a SM of which 0.46 eligible a
 * cycle, 0.35 instructions issued a scheduler and cycle. Every warp loads,
 * waits and dequantizes in lock step (one __syncthreads a k-step), so when
 * both warpgroups leave the barrier together their next wgmmas come only
 * after the slower one's A dequantization: the tensor pipe idles.
 *
 * Design. 384 threads: warps 0-7 are v8's two consumer warpgroups (64 rows x
 * BN each, A dequantized from the raw ring into registers, B from the fp16
 * ring, wgmma m64nBNk16), warp 8 the producer (warps 9-11 exit at once).
 * Registers: a scheduler's register file (16 K) holds three of the 12 warps;
 * launched at 168 a thread, the producer warpgroup gives back down to 40
 * and the consumers take 232 (setmaxnreg): 2 x 232 + 40 <= 512 a lane. (With
 * 288 threads the wgmmas' 128 accumulators and two A sets do not fit in 168:
 * ptxas serializes the wgmmas, C7512; 195 registers do not fit three warps
 * a scheduler: the launch fails.) Per ring slot two mbarriers:
 * full (33 arrivals: the producer lanes' cp.async.mbarrier.arrive.noinc once
 * their copies of A's codes and scales land, plus lane 0's arrive.expect_tx
 * for B's bulk copy bytes) and empty (256 arrivals: every consumer
 * thread once the wgmmas that read the slot retired). No CTA-wide barrier in
 * the loop: each warpgroup runs at its own pace, the producer up to ST - 1
 * k-steps ahead of the slower one. Consumer step s: wait full[s % ST],
 * dequantize A into the free register set, issue 4 wgmmas, commit, wait until
 * only they are in flight (step s - 1 retired), release slot (s - 1) % ST.
 * Same operands and wgmma order as v8, so the same results (by
 * construction; the GPU test checks against the reference, not against v8).
 * (v13, TR below: the full barrier takes lane 0's expect_tx only; A comes by
 * bulk copies too.)
 * Prediction: the tensor pipe busy ~90% instead of 79% (the
 * per-step barrier's idle gone): main kernel ~13% faster, 1.10x v8 end to end
 * at 4096x2048x6144 (the prepass unchanged).
 * Measured (docs/PERF.md, bench/results/2026-12-02-h200-s7-dev-call4/):
 * refuted. v12 is 16-19% slower than v8 (tensor pipe 65% busy; the consumers
 * stall at the full barriers: one warp's cp.asyncs of A do not keep ahead),
 * v13 runs at v11's speed (-6..+5%). Neither is in the rule; kept as the
 * evidence that the A dequantization, not the lock step, bounds v8 and v11.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "backends/gpu_common.h"
#include "fp4/format.h"
#include "kernels/fp4_sm90.h"
#include "kernels/fp4_sm90_device.cuh"
#include "kernels/fp4_sm90_wgmma.cuh"

#define P12_CONSUMERS 256 /* two warpgroups */
#define P12_THREADS (P12_CONSUMERS + 128) /* + the producer warpgroup (one warp works) */
#define P12_REGS_CONSUMER 232 /* setmaxnreg: 2 x 232 + 40 a warp slot fits 64 K registers */
#define P12_REGS_PRODUCER 40
#define P12_WS_BLOCK 16384 /* v8's workspace block: 128 rows x 128 bytes of one k-step */
#define P12_FULL_COUNT 33  /* 32 producer lanes' cp.async arrivals + lane 0's expect_tx */
#define P12_EMPTY_COUNT 256 /* every consumer thread (see p12_step) */

/* shared-memory map: [ST B tiles of BN x 128 bytes][ST x (A codes 4096, A
 * scales 512)][ST full mbarriers][ST empty mbarriers] */
template <int BN, int ST> struct p12_cfg {
    static constexpr int BTILE = BN * 128; /* multiple of 1024: the swizzle needs that alignment */
    static constexpr int NBLK = BN >= 128 ? BN / 128 : 1; /* workspace blocks of B's tile */
    static constexpr int BBYTES = BN >= 128 ? P12_WS_BLOCK : BN * 128; /* bytes of each */
    static constexpr int A_BASE = ST * BTILE;
    static constexpr int ASTAGE = WG_BM * WG_ROWB + 512;
    static constexpr int FULL_OFF = A_BASE + ST * ASTAGE;
    static constexpr int EMPTY_OFF = FULL_OFF + 8 * ST;
    static constexpr int SMEM = EMPTY_OFF + 8 * ST + 1024; /* +1024: alignment */
};

#ifdef FP4_SM90_HAVE_WGMMA
/* arrive on bar once all of this thread's earlier cp.asyncs have landed (the
 * arrival is counted in the barrier's initial count: .noinc) */
static __device__ __forceinline__ void p12_cp_arrive(uint32_t bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

static __device__ __forceinline__ void p12_setmaxnreg_inc(void)
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(P12_REGS_CONSUMER));
}
static __device__ __forceinline__ void p12_setmaxnreg_dec(void)
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(P12_REGS_PRODUCER));
}

/* B's tile of k-step ks (BN rows of 128 bytes: BN / 128 workspace blocks,
 * BN = 64: half of one) into ring slot `slot`, counted on its full barrier */
template <int BN, int ST>
static __device__ __forceinline__ void p12_copy_b(uint32_t sbase, const uint8_t *bsrc, int KS, int ks,
                                                  int slot)
{
    typedef p12_cfg<BN, ST> C;
    const uint32_t full = sbase + (uint32_t)(C::FULL_OFF + slot * 8);
#pragma unroll
    for (int blk = 0; blk < C::NBLK; blk++) /* block nb of k-step ks: (nb * KS + ks) */
        wg_bulk_g2s(sbase + (uint32_t)(slot * C::BTILE + blk * P12_WS_BLOCK),
                    bsrc + ((size_t)blk * KS + ks) * P12_WS_BLOCK, C::BBYTES, full);
}

/* One consumer k-step (see the top); acur: the register set free since step
 * s - 2 retired. */
template <int BN, int ST>
static __device__ __forceinline__ void p12_step(int s, float *acc, uint32_t *acur,
                                                const unsigned char *smem, uint32_t sbase, int tid)
{
    typedef p12_cfg<BN, ST> C;
    const int slot = s % ST;
    wg_mbar_wait(sbase + (uint32_t)(C::FULL_OFF + slot * 8), (uint32_t)((s / ST) & 1));
    const unsigned char *a_st = smem + C::A_BASE + slot * C::ASTAGE;
    wg_a_frag<false>(a_st, a_st + WG_BM * WG_ROWB, tid, acur);
    wg_fence();
    wg_mma_step<BN>(acc, acur, sbase + (uint32_t)(slot * C::BTILE), s == 0);
    wg_commit();
    wg_wait<1>(); /* step s - 1 retired: its slot is free */
    /* every thread releases its own reads of the slot (its release arrive
     * orders them): session 7's first version had lane 0 of a warp release
     * after __syncwarp, and racecheck reported hazards on reused slots */
    if (s > 0) wg_mbar_arrive(sbase + (uint32_t)(C::EMPTY_OFF + ((s - 1) % ST) * 8));
}
#endif

/* TR false (v12-prefill): aq [M, K/2] (the tokens), asf swizzled
 * [roundup(M,128), 4 KS]; bw v8's weight prepass tiles; d [M, N] bf16. Grid:
 * x = m tiles of 128 (fastest: the CTAs resident at once share few B tiles),
 * y = n tiles of BN.
 * TR true (v13-mid): v11's operands: aq / asf the weights packed by
 * fp4_sm90_mid9_pack_b (M = their rows; k-step L of tile t: 4096 contiguous
 * code bytes and 512 scale bytes), bw the token prepass's tiles (N tokens,
 * BN = 64, 128 or 256 a tile), d [N, M]; grid z = K splits, reduced by the
 * wg_slices_* epilogue (wsf, cnt: v11's workspace) when > 1. The producer
 * bulk-copies the weights of the first stages, then waits for the token
 * prepass (griddepcontrol.wait: a programmatic dependent launch), then its
 * tiles. */
template <int BN, int ST, bool TR>
__global__ void __launch_bounds__(P12_THREADS, 1)
    fp4_sm90_prefill12_kernel(const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                              const uint8_t *__restrict__ bw, __nv_bfloat16 *__restrict__ d, int M,
                              int N, int K, int KS, float alpha_eff, float *__restrict__ wsf,
                              unsigned *__restrict__ cnt)
{
#ifdef FP4_SM90_HAVE_WGMMA
    typedef p12_cfg<BN, ST> C;
    extern __shared__ unsigned char p12_smem_raw[];
    uint32_t sbase = 0;
    unsigned char *smem = wg_smem_aligned(p12_smem_raw, &sbase);
    const int tid = threadIdx.x;
    const int m0 = blockIdx.x * WG_BM, mt_blk = blockIdx.x;
    const int S = TR ? (int)gridDim.z : 1;
    const int ks0 = TR ? (int)(((int64_t)blockIdx.z * KS) / S) : 0;
    const int KSn = TR ? (int)(((int64_t)(blockIdx.z + 1) * KS) / S) - ks0 : KS;

    if (tid == 0) {
        for (int i = 0; i < ST; i++) {
            wg_mbar_init(sbase + (uint32_t)(C::FULL_OFF + i * 8), TR ? 1 : P12_FULL_COUNT);
            wg_mbar_init(sbase + (uint32_t)(C::EMPTY_OFF + i * 8), P12_EMPTY_COUNT);
        }
        wg_mbar_init_fence();
    }
    __syncthreads(); /* the only CTA-wide barrier */

    if (tid >= P12_CONSUMERS) { /* producer warpgroup: its first warp (TR: lane) works */
        p12_setmaxnreg_dec();
        const int lane = tid & 31;
        if (tid >= P12_CONSUMERS + (TR ? 1 : 32)) return;
        /* B's tile: BN / 128 workspace blocks (BN = 64: half of one) */
        const uint8_t *bsrc = bw + (size_t)(blockIdx.y * BN / 128) * KS * P12_WS_BLOCK +
                              (BN < 128 ? (size_t)((blockIdx.y * BN) % 128) * 128 : 0);
        if (TR) {
            constexpr uint32_t ABYTES = WG_BM * WG_ROWB + 512;
            const int pre = KSn < ST ? KSn : ST; /* first uses: no empty wait */
            for (int ls = 0; ls < KSn; ls++) {
                const int slot = ls % ST, use = ls / ST;
                const uint32_t full = sbase + (uint32_t)(C::FULL_OFF + slot * 8);
                const uint32_t a_dst = sbase + (uint32_t)(C::A_BASE + slot * C::ASTAGE);
                const size_t blk = (size_t)mt_blk * KS + ks0 + ls;
                if (use > 0)
                    wg_mbar_wait(sbase + (uint32_t)(C::EMPTY_OFF + slot * 8), (uint32_t)((use - 1) & 1));
                wg_mbar_expect(full, ABYTES + (uint32_t)(C::NBLK * C::BBYTES));
                wg_bulk_g2s(a_dst, aq + blk * 4096, 4096, full);
                wg_bulk_g2s(a_dst + 4096, asf + blk * 512, 512, full);
                if (ls == pre - 1) {
                    /* the weights of the first stages are in flight: now the tokens */
                    asm volatile("griddepcontrol.wait;" ::: "memory");
                    for (int l2 = 0; l2 < pre; l2++)
                        p12_copy_b<BN, ST>(sbase, bsrc, KS, ks0 + l2, l2 % ST);
                } else if (ls >= pre) {
                    p12_copy_b<BN, ST>(sbase, bsrc, KS, ks0 + ls, slot);
                }
            }
            return;
        }
        const int arow = K / 2;
        const bool a16 = (arow % 16) == 0;
#pragma unroll 1
        for (int ls = 0; ls < KS; ls++) {
            const int slot = ls % ST, use = ls / ST;
            const uint32_t full = sbase + (uint32_t)(C::FULL_OFF + slot * 8);
            if (use > 0) /* the consumers released this slot's previous use */
                wg_mbar_wait(sbase + (uint32_t)(C::EMPTY_OFF + slot * 8), (uint32_t)((use - 1) & 1));
            if (lane == 0) {
                wg_mbar_expect(full, (uint32_t)(BN * 128));
                p12_copy_b<BN, ST>(sbase, bsrc, KS, ls, slot);
            }
            const uint32_t a_dst = sbase + (uint32_t)(C::A_BASE + slot * C::ASTAGE);
            wg_load_a<32>(a_dst, a_dst + WG_BM * WG_ROWB, aq, asf, M, arow, a16, m0, mt_blk, KS, ls,
                          lane);
            p12_cp_arrive(full);
        }
        wg_cp_wait<0>(); /* leave no copy of mine in flight */
        return;
    }

    p12_setmaxnreg_inc();
    float acc[BN / 2]; /* the first wgmma runs with scale-d = 0: no initialisation */
    uint32_t ra[16], rb[16];
    /* unrolled by two: the two A register sets stay compile-time arrays, and no
     * control path rewrites the set whose wgmma is in flight (ptxas C7513) */
    int s = 0;
#pragma unroll 1
    for (; s + 1 < KSn; s += 2) {
        p12_step<BN, ST>(s, acc, ra, smem, sbase, tid);
        p12_step<BN, ST>(s + 1, acc, rb, smem, sbase, tid);
    }
    if (s < KSn) p12_step<BN, ST>(s, acc, ra, smem, sbase, tid);
    wg_wait<0>();
    wg_reg_fence<BN / 2>(acc);
    if (!TR) {
        wg_store_d<BN>(acc, d, M, N, m0, blockIdx.y * BN, alpha_eff, tid);
        return;
    }
    const int tok0 = blockIdx.y * BN;
    if (S > 1) {
        const float4 *slab = wg_slices_store<BN>(acc, wsf, S, tid);
        wg_slices_meet(cnt, S, tid);
        wg_slices_sum<BN>(slab, cnt, d, S, tok0, m0, N, M, alpha_eff, tid);
        return;
    }
    wg_store_d_tr<BN>(acc, d, M, N, m0, tok0, alpha_eff, tid);
#else
    (void)aq, (void)asf, (void)bw, (void)d, (void)M, (void)N, (void)K, (void)KS, (void)alpha_eff;
    (void)wsf, (void)cnt;
    __trap(); /* wgmma: sm_90a only; the launch refuses other targets first */
#endif
}

/* ---- host side ---------------------------------------------------------------------- */

/* v12's (BN, ring depth); 6 x (32 + 4.5) KB at BN = 256 is v8's ring */
#define P12_FOR_EACH_CFG(X) X(256, 6) X(256, 5) X(128, 6) X(128, 8)
/* v13's token tiles and ring depths: v9's and v11's */
#define P13_FOR_EACH_CFG(X) X(256, 6) X(128, 10) X(64, 12)

fp4_status fp4_sm90_prefill12_init(fp4_err *err)
{
#define P12_SET_SMEM(BN_, ST_)                                                                 \
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_prefill12_kernel<BN_, ST_, false>, \
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,         \
                                           p12_cfg<BN_, ST_>::SMEM));
    P12_FOR_EACH_CFG(P12_SET_SMEM)
#undef P12_SET_SMEM
    return FP4_OK;
}

fp4_status fp4_sm90_prefill12_launch_cfg(const fp4_sm90_gemm_args *a, int bn, int stages,
                                         cudaStream_t stream, fp4_err *err)
{
    if (bn == 0) bn = fp4_sm90_prefill8_bn(a->m, a->n, a->k, a->num_sms);
    if (stages == 0) stages = bn == 256 ? 6 : 8;
    const void *kernel = NULL;
    int smem = 0;
#define P12_PICK(BN_, ST_)                                                                     \
    if (bn == BN_ && stages == ST_)                                                            \
        kernel = (const void *)fp4_sm90_prefill12_kernel<BN_, ST_, false>, smem = p12_cfg<BN_, ST_>::SMEM;
    P12_FOR_EACH_CFG(P12_PICK)
#undef P12_PICK
    if (!kernel)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90 v12-prefill: no kernel for tile width %d, %d stages", bn, stages);
    fp4_status st = fp4_sm90_wgmma_runs_here(kernel, "v12-prefill", err);
    if (st != FP4_OK) return st;
    /* v8's checks (shape, workspace) and its weight prepass (parts = 1) */
    if ((st = fp4_sm90_prefill8_launch_cfg(a, bn, 0, -1, 1, stream, err)) != FP4_OK) return st;
    return fp4_sm90_wg_launch_tiles(kernel, smem, P12_THREADS, bn, a, a->a_codes, a->a_sf, stream, err);
}

/* FP4_SM90_V12_BN = 128|256 and FP4_SM90_V12_ST force the tile width and
 * ring depth (development: bench/prefill12-dev.sh) */
fp4_status fp4_sm90_prefill12_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    const char *bn_env = getenv("FP4_SM90_V12_BN"), *st_env = getenv("FP4_SM90_V12_ST");
    return fp4_sm90_prefill12_launch_cfg(a, bn_env ? atoi(bn_env) : 0, st_env ? atoi(st_env) : 0,
                                         stream, err);
}

/* ==== v13-mid: v11 with v12's main loop ==================================================
 *
 * Why: v11's main kernel at 256x2048x6144 is latency-bound like v8's (Nsight
 * Compute, -s6-dev-call5: 8 warps a SM, 66% of the cycles without an
 * eligible warp, stalls on the stage wait and the per-step barrier), and
 * its loads start only after the token prepass (griddepcontrol.wait first).
 * v13 = v11's host side (fp4_sm90_mid11_launch_with: rule, workspace,
 * prepass, cooperative + dependent launch) with the TR instantiations of
 * the kernel above: the producer issues the weights' bulk copies of the
 * first ST stages before waiting for the prepass. Prediction
 * (256x2048x6144, v11 20.2 us): main loop -15% as v12's, and about 1 us of
 * the prepass hidden: ~17 us. */

fp4_status fp4_sm90_mid13_init(fp4_err *err)
{
#define P13_SET_SMEM(BN_, ST_)                                                                 \
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_prefill12_kernel<BN_, ST_, true>, \
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,         \
                                           p12_cfg<BN_, ST_>::SMEM));
    P13_FOR_EACH_CFG(P13_SET_SMEM)
#undef P13_SET_SMEM
    return FP4_OK;
}

static fp4_status p13_pick(int bn, const void **kernel, int *smem, int *threads, fp4_err *err)
{
    *kernel = NULL;
    *threads = P12_THREADS;
#define P13_PICK(BN_, ST_)                                                                     \
    if (bn == BN_) *kernel = (const void *)fp4_sm90_prefill12_kernel<BN_, ST_, true>, *smem = p12_cfg<BN_, ST_>::SMEM;
    P13_FOR_EACH_CFG(P13_PICK)
#undef P13_PICK
    if (!*kernel)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 v13-mid: no kernel for %d-token tiles", bn);
    return fp4_sm90_wgmma_runs_here(*kernel, "v13-mid", err);
}

fp4_status fp4_sm90_mid13_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    return fp4_sm90_mid11_launch_with(a, "v13-mid", p13_pick, stream, err);
}
