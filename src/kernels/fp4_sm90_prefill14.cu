/* fp4-sm90 "v14-prefill" (variant 14) and "v15-mid" (variant 15): v8's and
 * v11's operands, prepasses and host sides with a dequantizing producer
 * warpgroup, both wgmma operands in shared memory. "v16-prefill" (variant
 * 16, at the end): v14's consumers with A dequantized by a prepass as well.
 *
 * Why (docs/PERF.md, session 7): v8's and v11's consumer warps dequantize
 * their wgmma A operand into registers between wgmmas; Nsight Compute puts
 * v8's main kernel at 0.35 instructions issued a scheduler and cycle with
 * the tensor pipe 79% busy, and moving only the loads to a producer warp
 * (v12, v13) did not help: the dequantization itself, on the critical path
 * of the warps that issue the wgmmas, bounds them.
 *
 * Design. 384 threads: warps 0-7 are two consumer warpgroups (64 rows x BN
 * each) that only wait, issue wgmma m64nBNk16 with A and B by shared-memory
 * descriptor, and release; warps 8-11 the producer warpgroup, one thread a
 * row of the 128-row A tile. Per k-step s a producer thread
 *   1. issues the cp.asyncs of its row's 32 code bytes and 4 scale bytes of
 *      step s + RAW - 1 into its own slots of a RAW-deep staging ring (it alone
 *      reads them back: cp.async.wait_group orders them, no barrier);
 *   2. waits until the consumers released ring slot s % ST (empty mbarrier);
 *      thread 0 posts B's bytes on the full mbarrier and bulk-copies B's tile
 *      (v8's weight prepass tiles; v15: the token prepass's);
 *   3. dequantizes its row of step s (8 code words -> 32 fp16x2 words: 11
 *      bit operations a word for 4 pairs, fp4_nib_pairs4, and one multiply by
 *      the fp16 scale each) and stores it as 8 16-byte chunks of the swizzled
 *      fp16 A tile (chunk c of row r at (c ^ (r & 7)) << 4: conflict-free, the
 *      128-byte-swizzle layout of wgmma), in the k order v8's register
 *      fragment uses (so B's tiles are v8's unchanged);
 *   4. fence.proxy.async (its generic stores become visible to wgmma) and
 *      arrives on the slot's full mbarrier (129 arrivals: 128 rows + thread
 *      0's expect_tx).
 * A consumer k-step: wait full, 4 wgmmas, commit, wait until only they are in
 * flight, arrive on the empty mbarrier of the previous step's slot (256
 * arrivals: every consumer thread). Registers: launched at 168 a thread; the
 * producers drop to 96 (setmaxnreg; 72 x 128 freed) and the consumers take
 * 200 (32 x 256 of them: an increase waits until the registers are free).
 * Shared memory: ST x (B BN x 128 bytes + A 16 KB) + RAW x 4.5 KB: 4 stages at
 * BN = 256, 6 at 128, 8 at 64 (v15).
 * v15-mid (TR): the weights are the A operand (fp4_sm90_mid9_pack_b's
 * contiguous 4 KB (tile, k-step) code blocks and their 512-byte scale
 * tiles), the tokens' fp16 tiles B; v11's grid (weight tiles, token tiles,
 * K splits), cooperative + programmatic dependent launch and slices
 * epilogue (fp4_sm90_mid11_launch_with). Only thread 0 waits for the token
 * prepass (griddepcontrol.wait, before its first B copy): the other
 * producers stage and dequantize the first weights meanwhile.
 * Results: same fp16 operands and k order as v8 / v11, so the same products;
 * the GPU test checks against the exact reference.
 * Prediction (4096x2048x6144; v8 main kernel 150.9 us at 79% tensor busy,
 * cuBLAS bf16 ~129 us end to end): the consumers issue about 10 instructions
 * a k-step instead of 228, the producer about 150 (one warp a scheduler,
 * 1024 tensor cycles a step at BN = 256): tensor pipe ~90% busy, main
 * kernel ~133 us, with the 7 us weight prepass 0.9x cuBLAS; 256x2048x6144
 * (v15; v11 20.2 us) ~17 us.
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
#include "kernels/fp4_sm90_nibbles.h"
#include "kernels/fp4_sm90_raster.h"
#include "kernels/fp4_sm90_wgmma.cuh"

#define P14_CONSUMERS 256 /* two warpgroups */
#define P14_THREADS (P14_CONSUMERS + 128) /* + the producer warpgroup */
#define P14_REGS_CONSUMER 200
#define P14_REGS_PRODUCER 96
#define P14_RAW 4 /* staging ring of the raw codes (cp.async groups in flight: 3) */
#define P14_WS_BLOCK 16384 /* a prepass block: 128 rows x 128 bytes of one k-step */
#define P14_FULL_COUNT (128 + 1)
#define P14_EMPTY_COUNT P14_CONSUMERS

/* shared-memory map: [ST B tiles BN x 128][ST A tiles 128 x 128][RAW x (codes
 * 128 x 32, scales 128 x 4)][ST full][ST empty]; APRE (v16): no staging ring */
template <int BN, int ST, bool APRE = false> struct p14_cfg {
    static constexpr int BTILE = BN * 128; /* multiples of 1024: the swizzle's alignment */
    static constexpr int ATILE = WG_BM * 128;
    static constexpr int NBLK = BN >= 128 ? BN / 128 : 1;
    static constexpr int BBYTES = BN >= 128 ? P14_WS_BLOCK : BN * 128;
    static constexpr int A_BASE = ST * BTILE;
    static constexpr int RAW_BASE = A_BASE + ST * ATILE;
    static constexpr int RAW_STAGE = WG_BM * WG_ROWB + WG_BM * 4;
    static constexpr int FULL_OFF = RAW_BASE + (APRE ? 0 : P14_RAW * RAW_STAGE);
    static constexpr int EMPTY_OFF = FULL_OFF + 8 * ST;
    static constexpr int SMEM = EMPTY_OFF + 8 * ST + 1024; /* +1024: alignment */
};

#ifdef FP4_SM90_HAVE_WGMMA
static __device__ __forceinline__ void p14_cp4(uint32_t dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}

/* The cp.asyncs of row r's raw codes and scale word of k-step ls into staging
 * slot q. TR: the packed weights (block blk = tile x KS + k-step: row r at
 * r x 32, always in bounds: padded); else the tokens [M, K/2] (rows past M
 * and bytes past K zero-filled) and their swizzled scales. */
template <int BN, int ST, bool TR>
static __device__ __forceinline__ void p14_stage_raw(uint32_t sbase, const uint8_t *__restrict__ aq,
                                                     const uint8_t *__restrict__ asf, int M, int arow,
                                                     bool a16, int m0, size_t blk, int ls, int r)
{
    typedef p14_cfg<BN, ST> C;
    const uint32_t q = (uint32_t)(ls % P14_RAW);
    const uint32_t dst = sbase + (uint32_t)C::RAW_BASE + q * C::RAW_STAGE + (uint32_t)r * WG_ROWB;
    if (TR) {
        const uint8_t *src = aq + blk * 4096 + (size_t)r * WG_ROWB;
        wg_cp16(dst, src, 16);
        wg_cp16(dst + 16, src + 16, 16);
    } else {
        const int m = m0 + r, kbyte = ls * WG_ROWB;
        const uint8_t *row = aq + (size_t)m * arow + kbyte;
        if (a16) {
#pragma unroll
            for (int c = 0; c < WG_ROWB; c += 16) {
                const bool ok = m < M && kbyte + c < arow;
                wg_cp16(dst + (uint32_t)c, ok ? row + c : aq, ok ? 16 : 0);
            }
        } else { /* K / 2 a multiple of 8 only */
#pragma unroll
            for (int c = 0; c < WG_ROWB; c += 8) {
                const bool ok = m < M && kbyte + c < arow;
                wg_cp8(dst + (uint32_t)c, ok ? row + c : aq, ok ? 8 : 0);
            }
        }
    }
    /* the swizzled scale tile of (row tile, k-step): row r's 4 bytes at
     * (r & 31) x 16 + (r >> 5) x 4 */
    p14_cp4(sbase + (uint32_t)C::RAW_BASE + q * C::RAW_STAGE + WG_BM * WG_ROWB + (uint32_t)r * 4,
            asf + blk * 512 + (size_t)((r & 31) * 16 + (r >> 5) * 4));
}

/* Row r of a k-step: its 32 code bytes (c0, c1) and 4 scales (sw) -> its 128
 * bytes of the swizzled fp16 A tile at tile (shared memory, or v16's global
 * A tiles). Code word i = 2 t + h (k-block t, half h) gives, through pair j,
 * the word t of chunk 2 j + h: v8's register fragment (wg_a_frag) in memory
 * order. */
static __device__ __forceinline__ void p14_row_to_tile(uint4 c0, uint4 c1, uint32_t sw,
                                                       unsigned char *tile, int r)
{
    const uint32_t s02 = sf2_to_h2(sw << 7), s13 = sf2_to_h2(sw >> 1); /* k-blocks (0, 2), (1, 3) */
    const uint32_t sc[4] = {__byte_perm(s02, 0, 0x1010), __byte_perm(s13, 0, 0x1010),
                            __byte_perm(s02, 0, 0x3232), __byte_perm(s13, 0, 0x3232)};
    const uint32_t w[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    uint32_t p[8][4];
#pragma unroll
    for (int i = 0; i < 8; i++) fp4_nib_pairs4(w[i], p[i]);
    unsigned char *row = tile + r * 128;
#pragma unroll
    for (int c = 0; c < 8; c++) {
        const int j = c >> 1, h = c & 1;
        uint4 v;
        v.x = hmul2_u32(p[h][j], sc[0]);
        v.y = hmul2_u32(p[2 + h][j], sc[1]);
        v.z = hmul2_u32(p[4 + h][j], sc[2]);
        v.w = hmul2_u32(p[6 + h][j], sc[3]);
        *(uint4 *)(row + ((c ^ (r & 7)) << 4)) = v;
    }
}

/* Row r of k-step ls: staged raw codes -> the A tile of ring slot `slot` */
template <int BN, int ST>
static __device__ __forceinline__ void p14_dequant_row(const unsigned char *smem, int ls, int slot,
                                                       int r)
{
    typedef p14_cfg<BN, ST> C;
    const unsigned char *raw = smem + C::RAW_BASE + (ls % P14_RAW) * C::RAW_STAGE;
    p14_row_to_tile(*(const uint4 *)(raw + r * WG_ROWB), *(const uint4 *)(raw + r * WG_ROWB + 16),
                    *(const uint32_t *)(raw + WG_BM * WG_ROWB + r * 4),
                    (unsigned char *)smem + C::A_BASE + slot * C::ATILE, r);
}

/* A consumer's k-step on ring stage g (v14: the k-step; v16: counted over
 * tiles): wait until the slot is full, the warpgroup's 4 wgmmas (scale-d 0
 * when first), commit, wait until only they are in flight, then release the
 * previous stage's slot (release_prev). */
template <int BN, int ST, bool APRE>
static __device__ __forceinline__ void p14_consume(float *acc, uint32_t sbase, uint32_t a_off, int g,
                                                   bool first, bool release_prev)
{
    typedef p14_cfg<BN, ST, APRE> C;
    const int slot = g % ST;
    wg_mbar_wait(sbase + (uint32_t)(C::FULL_OFF + slot * 8), (uint32_t)((g / ST) & 1));
    wg_fence();
    wg_mma_ss_step<BN>(acc, sbase + (uint32_t)(C::A_BASE + slot * C::ATILE) + a_off,
                       sbase + (uint32_t)(slot * C::BTILE), first);
    wg_commit();
    wg_wait<1>(); /* stage g - 1 retired: its slot is free */
    if (release_prev) wg_mbar_arrive(sbase + (uint32_t)(C::EMPTY_OFF + ((g - 1) % ST) * 8));
}
#endif

/* TR false (v14-prefill): aq [M, K/2] (the tokens), asf swizzled
 * [roundup(M,128), 4 KS]; bw v8's weight prepass tiles; d [M, N] bf16; grid
 * x = m tiles of 128 (fastest), y = n tiles of BN.
 * TR true (v15-mid): aq / asf the weights packed by fp4_sm90_mid9_pack_b (M =
 * their rows), bw the token prepass's tiles (N tokens, BN a tile), d [N, M];
 * grid z = K splits, reduced by the wg_slices_* epilogue (wsf, cnt: v11's
 * workspace) when > 1. */
template <int BN, int ST, bool TR>
__global__ void __launch_bounds__(P14_THREADS, 1)
    fp4_sm90_prefill14_kernel(const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                              const uint8_t *__restrict__ bw, __nv_bfloat16 *__restrict__ d, int M,
                              int N, int K, int KS, float alpha_eff, float *__restrict__ wsf,
                              unsigned *__restrict__ cnt)
{
#ifdef FP4_SM90_HAVE_WGMMA
    typedef p14_cfg<BN, ST> C;
    extern __shared__ unsigned char p14_smem_raw[];
    uint32_t sbase = 0;
    unsigned char *smem = wg_smem_aligned(p14_smem_raw, &sbase);
    const int tid = threadIdx.x;
    const int m0 = blockIdx.x * WG_BM, mt_blk = blockIdx.x;
    const int S = TR ? (int)gridDim.z : 1;
    const int ks0 = TR ? (int)(((int64_t)blockIdx.z * KS) / S) : 0;
    const int KSn = TR ? (int)(((int64_t)(blockIdx.z + 1) * KS) / S) - ks0 : KS;

    if (tid == 0) {
        for (int i = 0; i < ST; i++) {
            wg_mbar_init(sbase + (uint32_t)(C::FULL_OFF + i * 8), P14_FULL_COUNT);
            wg_mbar_init(sbase + (uint32_t)(C::EMPTY_OFF + i * 8), P14_EMPTY_COUNT);
        }
        wg_mbar_init_fence();
    }
    __syncthreads(); /* the only CTA-wide barrier */

    if (tid >= P14_CONSUMERS) { /* producer warpgroup: thread r owns row r */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(P14_REGS_PRODUCER));
        const int r = tid - P14_CONSUMERS;
        /* B's tile: BN / 128 prepass blocks (BN = 64: half of one) */
        const uint8_t *bsrc = bw + (size_t)(blockIdx.y * BN / 128) * KS * P14_WS_BLOCK +
                              (BN < 128 ? (size_t)((blockIdx.y * BN) % 128) * 128 : 0);
        const int arow = K / 2;
        const bool a16 = (arow % 16) == 0;
        const size_t blk0 = (size_t)mt_blk * KS + ks0; /* (row tile, first k-step) */
#pragma unroll 1
        for (int l = 0; l < P14_RAW - 1; l++) {
            if (l < KSn) p14_stage_raw<BN, ST, TR>(sbase, aq, asf, M, arow, a16, m0, blk0 + l, l, r);
            wg_cp_commit();
        }
#pragma unroll 1
        for (int ls = 0; ls < KSn; ls++) {
            const int slot = ls % ST, use = ls / ST, nl = ls + P14_RAW - 1;
            const uint32_t full = sbase + (uint32_t)(C::FULL_OFF + slot * 8);
            if (nl < KSn) p14_stage_raw<BN, ST, TR>(sbase, aq, asf, M, arow, a16, m0, blk0 + nl, nl, r);
            wg_cp_commit();
            if (use > 0) /* the consumers released this slot's previous use */
                wg_mbar_wait(sbase + (uint32_t)(C::EMPTY_OFF + slot * 8), (uint32_t)((use - 1) & 1));
            if (r == 0) {
                if (TR && ls == 0) asm volatile("griddepcontrol.wait;" ::: "memory"); /* the tokens */
                wg_mbar_expect(full, (uint32_t)(C::NBLK * C::BBYTES));
#pragma unroll
                for (int b = 0; b < C::NBLK; b++) /* block b of k-step k: (b KS + k) */
                    wg_bulk_g2s(sbase + (uint32_t)(slot * C::BTILE + b * P14_WS_BLOCK),
                                bsrc + ((size_t)b * KS + ks0 + ls) * P14_WS_BLOCK, C::BBYTES, full);
            }
            wg_cp_wait<P14_RAW - 1>(); /* my copies of step ls landed */
            p14_dequant_row<BN, ST>(smem, ls, slot, r);
            wg_fence_async_smem(); /* my stores, visible to the wgmmas (async proxy) */
            wg_mbar_arrive(full);
        }
        wg_cp_wait<0>();
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(P14_REGS_CONSUMER));
    const uint32_t a_off = (uint32_t)((tid >> 7) * 64 * 128); /* my warpgroup's 64 rows */
    float acc[BN / 2]; /* the first wgmma runs with scale-d = 0: no initialisation */
#pragma unroll 1
    for (int s = 0; s < KSn; s++) p14_consume<BN, ST, false>(acc, sbase, a_off, s, s == 0, s > 0);
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

/* v16's A prepass: the tokens [M, K/2] and their swizzled scales -> fp16 A
 * tiles laid out as v14's shared-memory A tile, one 16 KB block per (128-row
 * tile, k-step) at (tile x KS + k-step), so the main kernel bulk-copies a
 * block into a slot as it does B's. Rows past M and k past K are zeros.
 * A block (128 threads) does P16_AG k-steps of one row tile, so that every
 * global access is coalesced (session 9, first version: a thread read its
 * row's 32 bytes straight from global and stored 16-byte pieces of 32 rows
 * at once: 77 us at 4096 x 6144, long-scoreboard and LSU-queue stalls):
 *   1. the rows' P16_AG x 32 code bytes (2 P16_AG threads a row, 16 or 8
 *      bytes a load) and the P16_AG scale tiles (contiguous, 512 bytes each)
 *      into shared memory, the codes' 16-byte chunks XOR-swizzled by row
 *      (P16_SWZ) so that step 2 reads them without bank conflicts;
 *   2. thread r dequantizes row r of each k-step (p14_row_to_tile) into the
 *      block's output tiles in shared memory;
 *   3. one thread bulk-stores them (cp.async.bulk shared -> global): the
 *      P16_AG tiles are consecutive blocks of the output.
 * P16_AG = 2 (41 KB of shared memory, 5 blocks a SM): session 9's call 2
 * measured P16_AG = 4 (84 KB, 2 blocks a SM) at 27.8 us for 4096 x 6144,
 * latency-bound (86% of cycles with no eligible warp). */
#define P16_AG 2 /* k-steps a prepass block */
#define P16_CPR (2 * P16_AG) /* 16-byte chunks of a staged row */
/* chunk c of staged row r: 8 consecutive rows' chunk c fall on 8 distinct
 * 16-byte bank groups (a row is 64 bytes at P16_AG = 2) */
#define P16_SWZ(r, c) ((((c) ^ ((r) >> 1)) & (P16_CPR - 1)) << 4)
#define P16_AG_SMEM (P16_AG * P14_WS_BLOCK + WG_BM * P16_AG * WG_ROWB + P16_AG * 512)

__global__ void __launch_bounds__(WG_BM)
    fp4_sm90_a_tiles_kernel(const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf, int M,
                            int K, int KS, uint8_t *__restrict__ tiles)
{
#ifdef FP4_SM90_HAVE_WGMMA
    extern __shared__ __align__(128) unsigned char p16_smem[];
    unsigned char *out = p16_smem;                         /* P16_AG x 16 KB */
    unsigned char *raw = out + P16_AG * P14_WS_BLOCK;      /* 128 rows x P16_AG x 32 bytes */
    unsigned char *sf = raw + WG_BM * P16_AG * WG_ROWB;    /* P16_AG x 512 */
    const int tid = threadIdx.x, mt = blockIdx.y, ks0 = blockIdx.x * P16_AG;
    const int nks = min(P16_AG, KS - ks0), arow = K / 2;
    const bool a16 = (arow % 16) == 0;
    /* 1. codes: chunk e = (row, 16-byte column c) of the block's 128 x 128 bytes */
#pragma unroll
    for (int i = 0; i < P16_CPR; i++) {
        const int e = i * WG_BM + tid, row = e / P16_CPR, c = e % P16_CPR;
        const int m = mt * WG_BM + row, kb = ks0 * WG_ROWB + c * 16;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (m < M) {
            const uint8_t *src = aq + (size_t)m * arow + kb;
            if (a16 && kb + 16 <= arow) {
                v = __ldg((const uint4 *)src);
            } else { /* K / 2 a multiple of 8: two aligned halves */
                if (kb + 8 <= arow) {
                    const uint2 h = __ldg((const uint2 *)src);
                    v.x = h.x, v.y = h.y;
                }
                if (kb + 16 <= arow) {
                    const uint2 h = __ldg((const uint2 *)(src + 8));
                    v.z = h.x, v.w = h.y;
                }
            }
        }
        *(uint4 *)(raw + row * (P16_AG * WG_ROWB) + P16_SWZ(row, c)) = v;
    }
    /* the scale tiles of k-steps ks0 .. ks0 + nks - 1: contiguous */
    const uint8_t *sf_src = asf + ((size_t)mt * KS + ks0) * 512;
    for (int e = tid; e < nks * 32; e += WG_BM)
        *(uint4 *)(sf + e * 16) = __ldg((const uint4 *)(sf_src + e * 16));
    __syncthreads();
    /* 2. row tid of each k-step: chunks 2 j and 2 j + 1 of its raw row */
    const int r = tid;
    for (int j = 0; j < nks; j++) {
        const uint4 c0 = *(const uint4 *)(raw + r * (P16_AG * WG_ROWB) + P16_SWZ(r, 2 * j));
        const uint4 c1 = *(const uint4 *)(raw + r * (P16_AG * WG_ROWB) + P16_SWZ(r, 2 * j + 1));
        const uint32_t sw = *(const uint32_t *)(sf + j * 512 + (r & 31) * 16 + (r >> 5) * 4);
        p14_row_to_tile(c0, c1, sw, out + j * P14_WS_BLOCK, r);
    }
    wg_fence_async_smem(); /* the generic stores, visible to the bulk copy */
    __syncthreads();
    /* 3. one bulk store of the nks consecutive tiles */
    if (tid == 0) {
        uint8_t *dst = tiles + ((size_t)mt * KS + ks0) * P14_WS_BLOCK;
        const uint32_t src = (uint32_t)__cvta_generic_to_shared(out);
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src),
                     "r"((uint32_t)(nks * P14_WS_BLOCK))
                     : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); /* done before the block exits */
    }
#else
    (void)aq, (void)asf, (void)M, (void)K, (void)KS, (void)tiles;
    __trap(); /* built for sm_90a only; the launch refuses other targets first */
#endif
}

/* v16's main kernel: v14's consumers and shared-memory map without the
 * staging ring; A's and B's tiles both come from the prepasses, so the
 * producer warpgroup is one thread that bulk-copies A's 16 KB and B's BN x
 * 128 bytes into each slot (full mbarrier: one arrival with the bytes).
 * Persistent: CTA c does tiles c, c + gridDim.x, ... (tile t's m and n tile
 * by fp4_raster_tile: in groups of `group` m tiles, so that the tiles in
 * flight share their operands in L2; group 0 is v8's grid order, the m tiles
 * fastest), the ring's stage counter running on across tiles, so the
 * producer fills the next tile's first slots while the consumers store the
 * last tile's D.
 * at: the A prepass's tiles; bw: v8's weight prepass tiles (BN 128 or 256). */
template <int BN, int ST>
__global__ void __launch_bounds__(P14_THREADS, 1)
    fp4_sm90_prefill16_kernel(const uint8_t *__restrict__ at, const uint8_t *__restrict__ bw,
                              __nv_bfloat16 *__restrict__ d, int M, int N, int KS, int mtiles,
                              int tiles, int group, float alpha_eff)
{
#ifdef FP4_SM90_HAVE_WGMMA
    typedef p14_cfg<BN, ST, true> C;
    extern __shared__ unsigned char p14_smem_raw[];
    uint32_t sbase = 0;
    unsigned char *smem = wg_smem_aligned(p14_smem_raw, &sbase);
    (void)smem;
    const int tid = threadIdx.x;
    if (tid == 0) {
        for (int i = 0; i < ST; i++) {
            wg_mbar_init(sbase + (uint32_t)(C::FULL_OFF + i * 8), 1);
            wg_mbar_init(sbase + (uint32_t)(C::EMPTY_OFF + i * 8), P14_EMPTY_COUNT);
        }
        wg_mbar_init_fence();
    }
    __syncthreads(); /* the only CTA-wide barrier */

    if (tid >= P14_CONSUMERS) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(P14_REGS_PRODUCER));
        if (tid != P14_CONSUMERS) return;
        int g = 0; /* stages issued, over all tiles */
#pragma unroll 1
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            int mt, nt;
            fp4_raster_tile(t, mtiles, tiles / mtiles, group, &mt, &nt);
            const uint8_t *asrc = at + (size_t)mt * KS * P14_WS_BLOCK;
            const uint8_t *bsrc = bw + (size_t)(nt * BN / 128) * KS * P14_WS_BLOCK;
#pragma unroll 1
            for (int ls = 0; ls < KS; ls++, g++) {
                const int slot = g % ST, use = g / ST;
                const uint32_t full = sbase + (uint32_t)(C::FULL_OFF + slot * 8);
                if (use > 0) /* the consumers released this slot's previous use */
                    wg_mbar_wait(sbase + (uint32_t)(C::EMPTY_OFF + slot * 8), (uint32_t)((use - 1) & 1));
                wg_mbar_expect(full, (uint32_t)(P14_WS_BLOCK + C::NBLK * C::BBYTES));
                wg_bulk_g2s(sbase + (uint32_t)(C::A_BASE + slot * C::ATILE),
                            asrc + (size_t)ls * P14_WS_BLOCK, P14_WS_BLOCK, full);
#pragma unroll
                for (int b = 0; b < C::NBLK; b++) /* block b of k-step ls: (b KS + ls) */
                    wg_bulk_g2s(sbase + (uint32_t)(slot * C::BTILE + b * P14_WS_BLOCK),
                                bsrc + ((size_t)b * KS + ls) * P14_WS_BLOCK, C::BBYTES, full);
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(P14_REGS_CONSUMER));
    const uint32_t a_off = (uint32_t)((tid >> 7) * 64 * 128); /* my warpgroup's 64 rows */
    float acc[BN / 2]; /* each tile's first wgmma runs with scale-d = 0 */
    int g = 0;
#pragma unroll 1
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
#pragma unroll 1
        for (int s = 0; s < KS; s++, g++) p14_consume<BN, ST, true>(acc, sbase, a_off, g, s == 0, s > 0);
        wg_wait<0>();
        wg_mbar_arrive(sbase + (uint32_t)(C::EMPTY_OFF + ((g - 1) % ST) * 8)); /* the tile's last */
        wg_reg_fence<BN / 2>(acc);
        int mt, nt; /* the producer's order */
        fp4_raster_tile(t, mtiles, tiles / mtiles, group, &mt, &nt);
        wg_store_d<BN>(acc, d, M, N, mt * WG_BM, nt * BN, alpha_eff, tid);
    }
#else
    (void)at, (void)bw, (void)d, (void)M, (void)N, (void)KS, (void)mtiles, (void)tiles, (void)group;
    (void)alpha_eff;
    __trap(); /* wgmma: sm_90a only; the launch refuses other targets first */
#endif
}

/* ---- host side ---------------------------------------------------------------------- */

/* v14's (BN, ring depth) and v15's (token tile, ring depth): what fits 227 KB */
#define P14_FOR_EACH_CFG(X) X(256, 4) X(128, 6)
#define P15_FOR_EACH_CFG(X) X(256, 4) X(128, 6) X(64, 8)

fp4_status fp4_sm90_prefill14_init(fp4_err *err)
{
#define P14_SET_SMEM(BN_, ST_)                                                                 \
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_prefill14_kernel<BN_, ST_, false>, \
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,         \
                                           p14_cfg<BN_, ST_>::SMEM));
    P14_FOR_EACH_CFG(P14_SET_SMEM)
#undef P14_SET_SMEM
    return FP4_OK;
}

fp4_status fp4_sm90_prefill14_launch_cfg(const fp4_sm90_gemm_args *a, int bn, cudaStream_t stream,
                                         fp4_err *err)
{
    if (bn == 0) bn = fp4_sm90_prefill8_bn(a->m, a->n, a->k, a->num_sms);
    const void *kernel = NULL;
    int smem = 0;
#define P14_PICK(BN_, ST_)                                                                     \
    if (bn == BN_) kernel = (const void *)fp4_sm90_prefill14_kernel<BN_, ST_, false>, smem = p14_cfg<BN_, ST_>::SMEM;
    P14_FOR_EACH_CFG(P14_PICK)
#undef P14_PICK
    if (!kernel)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 v14-prefill: no kernel for tile width %d", bn);
    fp4_status st = fp4_sm90_wgmma_runs_here(kernel, "v14-prefill", err);
    if (st != FP4_OK) return st;
    /* v8's checks (shape, workspace) and its weight prepass (parts = 1) */
    if ((st = fp4_sm90_prefill8_launch_cfg(a, bn, 0, -1, 1, stream, err)) != FP4_OK) return st;
    return fp4_sm90_wg_launch_tiles(kernel, smem, P14_THREADS, bn, a, a->a_codes, a->a_sf, stream, err);
}

/* FP4_SM90_V14_BN = 128|256 forces the tile width (development and tests) */
fp4_status fp4_sm90_prefill14_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    const char *bn_env = getenv("FP4_SM90_V14_BN");
    return fp4_sm90_prefill14_launch_cfg(a, bn_env ? atoi(bn_env) : 0, stream, err);
}

fp4_status fp4_sm90_mid15_init(fp4_err *err)
{
#define P15_SET_SMEM(BN_, ST_)                                                                 \
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_prefill14_kernel<BN_, ST_, true>, \
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,         \
                                           p14_cfg<BN_, ST_>::SMEM));
    P15_FOR_EACH_CFG(P15_SET_SMEM)
#undef P15_SET_SMEM
    return FP4_OK;
}

static fp4_status p15_pick(int bn, const void **kernel, int *smem, int *threads, fp4_err *err)
{
    *kernel = NULL;
    *threads = P14_THREADS;
#define P15_PICK(BN_, ST_)                                                                     \
    if (bn == BN_) *kernel = (const void *)fp4_sm90_prefill14_kernel<BN_, ST_, true>, *smem = p14_cfg<BN_, ST_>::SMEM;
    P15_FOR_EACH_CFG(P15_PICK)
#undef P15_PICK
    if (!*kernel)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 v15-mid: no kernel for %d-token tiles", bn);
    return fp4_sm90_wgmma_runs_here(*kernel, "v15-mid", err);
}

fp4_status fp4_sm90_mid15_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    return fp4_sm90_mid11_launch_with(a, "v15-mid", p15_pick, stream, err);
}

/* ---- v16-prefill: v14's consumers, A and B both from prepass tiles ------------------
 *
 * Why: v14's consumers only wait and issue wgmmas, but its producer warpgroup
 * does not keep the ring ahead (session 8: long-scoreboard stalls 5.09 an
 * instruction, the consumers wait at the full barriers). v16 moves A's
 * dequantization out of the main kernel as v8 moved B's: a prepass
 * (fp4_sm90_a_tiles_kernel) writes A's fp16 tiles, byte for byte v14's
 * shared-memory A tiles, and one producer thread bulk-copies A's 16 KB and
 * B's BN x 128 bytes into each slot (one full-barrier arrival with the bytes).
 * The main kernel is then a plain fp16 GEMM on our wgmma pipeline, which also
 * measures that pipeline's ceiling; it is persistent (fp4_sm90_prefill16_kernel)
 * so that a tile's pipeline fill hides under the previous tile's epilogue.
 * Cost: A's tiles are M x K x 2 bytes of workspace (4x A's codes), written
 * and read once more per call: M K (2 + 0.56) bytes of traffic.
 * Prediction (4096x2048x6144): the main loop at v8's harness figure without
 * A's dequantization (780 TFLOP/s: 132 us), A's prepass ~15 us (64 MB at
 * ~4.4 TB/s), B's 9-11 us: ~157 us against v8's 171.5 (0.85x cuBLAS bf16);
 * 8192^3: main ~1570 us at the power cap, prepasses 2 x 48 us: ~0.94x.
 * Results: the same fp16 operands and wgmma order as v14, so the same
 * products as v8 / v14; the GPU test checks against the exact reference. */

/* v16's (BN, ring depth): no staging ring, so 7 stages fit at BN = 128 */
#define P16_FOR_EACH_CFG(X) X(256, 4) X(128, 7)

/* v8's weight tiles, then the A tiles (rows padded to 128) */
size_t fp4_sm90_prefill16_ws_size(int64_t m, int64_t n, int64_t k)
{
    const size_t ks = (size_t)((k + WG_BK - 1) / WG_BK);
    return fp4_sm90_prefill8_ws_size(m, n, k) + (size_t)((m + WG_BM - 1) / WG_BM) * ks * P14_WS_BLOCK;
}

/* v8's shapes, and the A prepass's grid y (m tiles) within 65535 */
int fp4_sm90_prefill16_fits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    return fp4_sm90_prefill8_fits(m, n, k, num_sms) && (m + WG_BM - 1) / WG_BM <= 65535;
}

fp4_status fp4_sm90_prefill16_init(fp4_err *err)
{
#define P16_SET_SMEM(BN_, ST_)                                                                 \
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_prefill16_kernel<BN_, ST_>, \
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,         \
                                           p14_cfg<BN_, ST_, true>::SMEM));
    P16_FOR_EACH_CFG(P16_SET_SMEM)
#undef P16_SET_SMEM
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_a_tiles_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, P16_AG_SMEM));
    return FP4_OK;
}

fp4_status fp4_sm90_prefill16_launch_cfg(const fp4_sm90_gemm_args *a, int bn, int ctas, int group,
                                         int parts, cudaStream_t stream, fp4_err *err)
{
    if (!fp4_sm90_prefill16_fits(a->m, a->n, a->k, a->num_sms))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90 v16-prefill: shape %lldx%lldx%lld not supported",
                        (long long)a->m, (long long)a->n, (long long)a->k);
    if (bn == 0) bn = fp4_sm90_prefill8_bn(a->m, a->n, a->k, a->num_sms);
    if (parts == 0) parts = 3;
    const void *kernel = NULL;
    int smem = 0;
#define P16_PICK(BN_, ST_)                                                                     \
    if (bn == BN_) kernel = (const void *)fp4_sm90_prefill16_kernel<BN_, ST_>, smem = p14_cfg<BN_, ST_, true>::SMEM;
    P16_FOR_EACH_CFG(P16_PICK)
#undef P16_PICK
    if (!kernel)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 v16-prefill: no kernel for tile width %d", bn);
    fp4_status st = fp4_sm90_wgmma_runs_here(kernel, "v16-prefill", err);
    if (st != FP4_OK) return st;
    const size_t ws_need = fp4_sm90_prefill16_ws_size(a->m, a->n, a->k);
    if (!a->workspace || a->workspace_bytes < ws_need || ((uintptr_t)a->workspace & 15))
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "fp4-sm90 v16-prefill: needs a 16-byte aligned workspace of %zu bytes "
                        "(got %zu at %p)",
                        ws_need, a->workspace ? a->workspace_bytes : (size_t)0, a->workspace);
    uint8_t *a_tiles = (uint8_t *)a->workspace + fp4_sm90_prefill8_ws_size(a->m, a->n, a->k);
    if (parts & 1) {
        /* v8's checks (shape, workspace) and its weight prepass, then A's */
        if ((st = fp4_sm90_prefill8_launch_cfg(a, bn, 0, -1, 1, stream, err)) != FP4_OK) return st;
        const int KS = (int)((a->k + WG_BK - 1) / WG_BK);
        const dim3 grid((unsigned)((KS + P16_AG - 1) / P16_AG), (unsigned)((a->m + WG_BM - 1) / WG_BM));
        fp4_sm90_a_tiles_kernel<<<grid, WG_BM, P16_AG_SMEM, stream>>>(a->a_codes, a->a_sf, (int)a->m,
                                                                      (int)a->k, KS, a_tiles);
        FP4_CUDA_LAUNCH_TRY(err);
    }
    if (parts & 2) {
        /* persistent: as many CTAs as the waves need to give each the same
         * number of tiles (at most one a SM); ctas = tiles: one tile a CTA */
        const int KS = (int)((a->k + WG_BK - 1) / WG_BK);
        const int mtiles = (int)((a->m + WG_BM - 1) / WG_BM);
        const int64_t tiles64 = (int64_t)mtiles * ((a->n + bn - 1) / bn);
        if (tiles64 > INT32_MAX)
            return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 v16-prefill: %lld tiles",
                            (long long)tiles64);
        int sms = a->num_sms, dev = 0;
        if (sms <= 0) { /* not given: the device's */
            FP4_CUDA_TRY(err, cudaGetDevice(&dev));
            FP4_CUDA_TRY(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        }
        const int tiles = (int)tiles64;
        const int waves = (tiles + sms - 1) / sms;
        if (ctas <= 0) ctas = (tiles + waves - 1) / waves;
        if (ctas > tiles) ctas = tiles;
        /* the tiles in flight (ctas of them) read the fewest operand bytes */
        if (group < 0) group = fp4_raster_group(ctas, mtiles, WG_BM, bn);
        const float alpha_eff = a->alpha * 16384.0f; /* both operands carry 2^-7 */
        const int M = (int)a->m, N = (int)a->n;
        const uint8_t *at = a_tiles;
        void *args[] = {(void *)&at, (void *)&a->workspace, (void *)&a->d, (void *)&M, (void *)&N,
                        (void *)&KS, (void *)&mtiles, (void *)&tiles, (void *)&group,
                        (void *)&alpha_eff};
        FP4_CUDA_TRY(err, cudaLaunchKernel(kernel, dim3((unsigned)ctas), dim3(P14_THREADS), args,
                                           (size_t)smem, stream));
    }
    return FP4_OK;
}

/* FP4_SM90_V16_BN = 128|256 forces the tile width, FP4_SM90_V16_CTAS the
 * persistent grid, FP4_SM90_V16_GROUP the tile order's group of row tiles
 * (0: the plain order; development and tests) */
fp4_status fp4_sm90_prefill16_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    const char *bn_env = getenv("FP4_SM90_V16_BN"), *ctas_env = getenv("FP4_SM90_V16_CTAS");
    const char *group_env = getenv("FP4_SM90_V16_GROUP");
    return fp4_sm90_prefill16_launch_cfg(a, bn_env ? atoi(bn_env) : 0, ctas_env ? atoi(ctas_env) : 0,
                                         group_env ? atoi(group_env) : -1, 3, stream, err);
}
