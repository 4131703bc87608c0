/* fp4-sm90 "v10-decode": NVFP4 x NVFP4 -> bf16 GEMM for small M on Hopper.
 *
 * Why a tenth kernel. v4 (the decode choice) holds too few bytes in flight:
 * each warp loads one k-step ahead into registers, about 20 KB a SM at one
 * block of 8 warps, while an H200 SM needs about 35 KB in flight to draw its
 * share of 4.6 TB/s over a ~1 us loaded DRAM latency. Its load skeleton alone
 * (no arithmetic, no reduction) took 5.3 us at 16x2048x6144 and reached 68%
 * of the read bandwidth at 16x8192x8192 (session 3 ablation). Its split-K
 * reduction (red.global, fence, arrival counter, last block's read-back)
 * cost about 2.4 us of dependent L2 round trips. v7 streamed with bulk
 * copies but one 16-row tile a block, so every warp converted the tokens for
 * one tile only and it was issue-bound. v10 keeps v4's arithmetic and fixes
 * both costs:
 *
 * - v4's packed weights and per-k-step math (kperm_kstep_mma): a warp covers
 *   RT tiles of 16 rows (the token conversion is shared by them) and a
 *   contiguous K range; the 16 warps of a block (8 at 32 tokens) split the
 *   block's K range.
 * - Weights by the copy engine: the block's 147 KB ring is split evenly over
 *   its warps (9 KB a warp at 16 warps: 4 slots of one k-step at RT = 4, 8 at
 *   RT = 2); a slot is 2 RT bulk copies (each tile's codes and scales are
 *   contiguous along K in v4's layout) completing on the slot's mbarrier,
 *   with an L2 evict-first policy. Every warp starts its whole ring at once:
 *   147 KB a SM requested before any arithmetic, refilled as soon as a slot
 *   is read. No producer warp and no empty barriers: a warp refills only its
 *   own slots.
 * - Token fragments are loaded straight from A one slot ahead (registers).
 * - Split K inside a thread-block cluster (grid.y = S = the cluster size,
 *   <= 8, and only as many as fit at once: fp4_sm90_decode10_cluster_fit):
 *   after the block's reduction over warps (shared memory), one
 *   cluster barrier, then block r sums its slice of the tile over the S
 *   blocks through distributed shared memory and writes bf16 D; a second
 *   barrier keeps the partials alive until every peer has read them. No
 *   workspace, no atomics, one launch.
 * - Persistent over tiles (row block x token chunk) when there are more
 *   tiles than SMs: a warp's ring runs on across tiles, so the next tile's
 *   weights arrive during this tile's arithmetic and reduction.
 * Prediction (H200, graph replay, cold L2): 16x2048x6144: the 7.1 MB arrive
 * in ~1.6 us after ~1 us of latency, the last slot's arithmetic and the
 * cluster reduction add ~1 us: ~4 us (v4: 7.9). 16x8192x8192: issue-bound
 * (~8.7 us of arithmetic at 4 warp instructions a cycle a SM, about the
 * 8.2 us bytes floor): ~11-12 us (v4: 18.2).
 * Measured (docs/PERF.md, recorded call of commit 1313a0e, forced): slower
 * than v4, so not chosen: 16x2048x6144 9.27 us (v4 7.76), 16x768 6.33
 * (6.44), 64x768 10.44 (10.90), 16x8192x8192 24.97 (18.10), 16x28672x4096
 * 50.07 (31.49). Nsight Compute and an ablation (D10_DEV_ABLATE) at
 * 16x8192x8192: the bulk-copied stream alone reaches 2.5 TB/s (v4's register
 * loads: 3.1), and the arithmetic does not hide under it: 13.9 M warp
 * instructions (v4: 9.2 M), 6.7 M of them on the half-rate ALU pipe. What
 * works and is kept: the cluster (DSMEM) split-K reduction and its fit query.
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
#include "kernels/fp4_sm90_wgmma.cuh"

/* Warps a block: 16 up to 16 tokens a chunk, 8 at 32 tokens (registers).
 * 16 were meant to hide the dequantize -> MMA chains; at 16x8192x8192 the
 * first version (8 warps, 2-k-step slots) and this one measured the same
 * (25.0 and 25.2 us, bench/results/2026-12-02-h200-s5-dev/call1, call2). */
#define D10_WARPS(nt) ((nt) == 4 ? 8 : 16)
#define D10_SK 1            /* k-steps a ring slot */
#define D10_RING 147456     /* ring bytes a block, split evenly over its warps */
#define D10_MAX_SLOTS 8
#define D10_MAX_SPLITS FP4_SM90_MAX_CLUSTER /* portable cluster size (cluster_sum4's 8) */
#define D10_OFF_RING 1024 /* after the mbarriers [warp][D10_MAX_SLOTS] (<= 16 warps) */
#define D10_OFF_RED (D10_OFF_RING + D10_RING)
#define D10_UNIT 576 /* bytes of one tile and k-step: 512 of codes, 64 of scales */
/* Development only (bench/decode-ablate.sh): 1 skips the dequantization and
 * the MMAs (the words read from the ring are folded into the sums): wrong
 * results, for timing the streaming skeleton alone. */
#ifndef D10_DEV_ABLATE
#define D10_DEV_ABLATE 0
#endif

static size_t d10_smem(int rt, int nt)
{
    return D10_OFF_RED + (size_t)D10_WARPS(nt) * (size_t)(8 * nt) * (size_t)(16 * rt + 4) * sizeof(float);
}
static int64_t d10_np(int64_t n) { return (n + 63) / 64 * 64; } /* v4's row padding */
static int64_t d10_ks(int64_t k) { return (k + 63) / 64; }

/* What a warp streams: item j is stage s = j % nst (k-steps w0 + SK s ..) of
 * the block's i-th tile, i = j / nst (tile tl0 + i * tstep: row block
 * tl % rbs, token chunk tl / rbs). */
typedef struct d10_stream {
    int w0, w1, nst;  /* this warp's k-steps [w0, w1) of every tile, stages a tile */
    int tl0, tstep;   /* the block's first tile, the stride between its tiles */
    int rbs, KS;
} d10_stream;

/* Issue item j into slot j % R: lane 0 arms the slot's mbarrier with the
 * bytes to come, lanes 0..RT-1 copy the tiles' codes, RT..2RT-1 their scales. */
template <int RT>
static __device__ __forceinline__ void d10_issue(const d10_stream &st, int j, int R,
                                                 uint32_t ring, uint32_t bars, const uint8_t *bq,
                                                 const uint8_t *bs, int lane, uint64_t policy)
{
    constexpr int SLOT = RT * D10_SK * D10_UNIT;
    const int i = j / st.nst, s = j - i * st.nst;
    const int rb = (st.tl0 + i * st.tstep) % st.rbs;
    const int ks = st.w0 + s * D10_SK, nks = min(D10_SK, st.w1 - ks);
    const int slot = j % R;
    const uint32_t bar = bars + 8u * (uint32_t)slot, dst = ring + (uint32_t)(slot * SLOT);
    if (lane == 0) wg_mbar_expect(bar, (uint32_t)(nks * RT * D10_UNIT));
    __syncwarp();
    if (lane < 2 * RT) {
        /* the warp's reads of this slot (before the caller's __syncwarp) come
         * before the copy engine's writes */
        wg_fence_async_smem();
        const int ti = lane < RT ? lane : lane - RT;
        const size_t unit = (size_t)(rb * RT + ti) * (size_t)st.KS + (size_t)ks;
        if (lane < RT)
            wg_bulk_g2s_hint(dst + (uint32_t)(ti * D10_SK * 512), bq + unit * 512,
                             (uint32_t)(nks * 512), bar, policy);
        else
            wg_bulk_g2s_hint(dst + (uint32_t)(RT * D10_SK * 512 + ti * D10_SK * 64), bs + unit * 64,
                             (uint32_t)(nks * 64), bar, policy);
    }
}

/* The token words of item j's k-steps (zero outside M and K): lane (g, t)
 * holds k-block 4 ks + t of tokens m0 + 8 n + g. */
template <int NT>
static __device__ __forceinline__ void d10_tokens(const d10_stream &st, int j, int tok_tile,
                                                  const uint8_t *aq, const uint8_t *asf, int M,
                                                  int KB, int Kbp, int lane, uint2 (*q)[NT],
                                                  uint32_t (*qs)[NT])
{
    const int i = j / st.nst, s = j - i * st.nst;
    const int m0 = (st.tl0 + i * st.tstep) / st.rbs * tok_tile;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int kk = 0; kk < D10_SK; kk++) {
        const int ks = st.w0 + s * D10_SK + kk, kb = 4 * ks + t;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int m = m0 + 8 * n + g;
            const bool ok = m < M && ks < st.w1 && kb < KB;
            q[kk][n] = ok ? __ldg((const uint2 *)(aq + (size_t)m * (size_t)(KB * 8) + (size_t)kb * 8))
                          : make_uint2(0, 0);
            qs[kk][n] = ok ? (uint32_t)__ldg(asf + swz_off(m, kb, Kbp)) : 0u;
        }
    }
}

/* grid (min(tiles, SMs / S), S, 1), clusters (1, S, 1); block 32 D10_WARPS(NT).
 * bq / bs: v4's packed weights; aq [M, K/2], asf swizzled; kper k-steps a
 * split; rbs row blocks of 16 RT rows; tiles = rbs x token chunks. */
template <int RT, int NT>
__global__ void __launch_bounds__(32 * D10_WARPS(NT), 1)
fp4_sm90_decode_v10(const uint8_t *__restrict__ bq, const uint8_t *__restrict__ bs,
                    const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                    __nv_bfloat16 *__restrict__ d, int M, int N, int K, int KS, int kper, int rbs,
                    int tiles, float alpha_eff)
{
    constexpr int ROWS = 16 * RT, TOK = 8 * NT, RS = ROWS + 4;
    constexpr int W = D10_WARPS(NT), THREADS = 32 * W, WRING = D10_RING / W;
    constexpr int SLOT = RT * D10_SK * D10_UNIT;
    constexpr int R = WRING / SLOT < D10_MAX_SLOTS ? WRING / SLOT : D10_MAX_SLOTS;
    static_assert(R >= 2 && W * D10_MAX_SLOTS * 8 <= D10_OFF_RING, "ring layout");
    constexpr int C4 = ROWS / 4, E4 = TOK * C4; /* float4 groups of the block tile */
    extern __shared__ __align__(128) uint8_t sm10[];
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(sm10);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int S = gridDim.y;
    const int KB = K / 16, Kbp = (KB + 3) / 4 * 4;

    d10_stream st;
    {
        const int ks0 = blockIdx.y * kper, ks1 = min(KS, ks0 + kper);
        const int per = (ks1 - ks0 + W - 1) / W;
        st.w0 = min(ks1, ks0 + warp * per);
        st.w1 = min(ks1, st.w0 + per);
        st.nst = (st.w1 - st.w0 + D10_SK - 1) / D10_SK;
        st.tl0 = blockIdx.x;
        st.tstep = gridDim.x;
        st.rbs = rbs;
        st.KS = KS;
    }
    const int ntl = st.tl0 < tiles ? (tiles - st.tl0 + st.tstep - 1) / st.tstep : 0;
    const int items = ntl * st.nst;
    const uint32_t bars = sbase + (uint32_t)(warp * D10_MAX_SLOTS * 8);
    const uint32_t ring = sbase + (uint32_t)(D10_OFF_RING + warp * WRING);
    const uint8_t *ringp = sm10 + D10_OFF_RING + warp * WRING;
    float *red = (float *)(sm10 + D10_OFF_RED);

    if (lane == 0) {
        for (int r = 0; r < R; r++) wg_mbar_init(bars + 8u * (uint32_t)r, 1);
        wg_mbar_init_fence();
    }
    __syncwarp();
    /* one token chunk reads the weights once: keep them out of L2's way;
     * several chunks re-read them: let L2 keep them */
    uint64_t policy;
    if (tiles == rbs)
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    else
        asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
    for (int j = 0; j < R && j < items; j++) d10_issue<RT>(st, j, R, ring, bars, bq, bs, lane, policy);

    uint2 nq[D10_SK][NT];
    uint32_t nqs[D10_SK][NT];
    if (items > 0) d10_tokens<NT>(st, 0, TOK, aq, asf, M, KB, Kbp, lane, nq, nqs);

    int j = 0;
    for (int i = 0; i < ntl; i++) {
        const int tl = st.tl0 + i * st.tstep, rb = tl % rbs, m0 = tl / rbs * TOK;
        float acc[RT][NT][4];
#pragma unroll
        for (int a = 0; a < RT; a++)
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[a][n][e] = 0.0f;

        for (int s = 0; s < st.nst; s++, j++) {
            uint2 q[D10_SK][NT];
            uint32_t qs[D10_SK][NT];
#pragma unroll
            for (int kk = 0; kk < D10_SK; kk++)
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    q[kk][n] = nq[kk][n];
                    qs[kk][n] = nqs[kk][n];
                }
            if (j + 1 < items) d10_tokens<NT>(st, j + 1, TOK, aq, asf, M, KB, Kbp, lane, nq, nqs);

            const int slot = j % R, nks = min(D10_SK, st.w1 - (st.w0 + s * D10_SK));
            wg_mbar_wait(bars + 8u * (uint32_t)slot, (uint32_t)((j / R) & 1));
            const uint8_t *sp = ringp + slot * SLOT;
#pragma unroll
            for (int kk = 0; kk < D10_SK; kk++) {
                if (kk >= nks) break;
                uint4 w[RT];
                uint32_t ws[RT];
#pragma unroll
                for (int a = 0; a < RT; a++) {
                    w[a] = *(const uint4 *)(sp + (a * D10_SK + kk) * 512 + lane * 16);
                    ws[a] = *(const uint16_t *)(sp + RT * D10_SK * 512 + (a * D10_SK + kk) * 64 + lane * 2);
                }
                if (D10_DEV_ABLATE & 1) {
#pragma unroll
                    for (int a = 0; a < RT; a++)
                        acc[a][0][0] += __uint_as_float(
                            (w[a].x ^ w[a].y ^ w[a].z ^ w[a].w ^ ws[a]) & 0x007FFFFFu);
#pragma unroll
                    for (int n = 0; n < NT; n++)
                        acc[0][n][1] += __uint_as_float((q[kk][n].x ^ q[kk][n].y ^ qs[kk][n]) & 0x007FFFFFu);
                } else {
                    kperm_kstep_mma<RT, NT>(w, ws, q[kk], qs[kk], acc);
                }
            }
            __syncwarp();
            if (j + R < items) d10_issue<RT>(st, j + R, R, ring, bars, bq, bs, lane, policy);
        }

        /* the block's sum over warps; S == 1 writes D, else the sum stays in
         * warp 0's tile for the cluster */
        kperm_acc_to_smem<RT, NT>(acc, red + (size_t)warp * TOK * RS, RS, lane);
        __syncthreads();
        const int n0 = rb * ROWS;
        for (int e = tid; e < E4; e += THREADS) {
            const int tok = e / C4, c4 = (e - tok * C4) * 4;
            const float4 v = sum_warp_tiles4(red, W, TOK * RS, tok * RS + c4);
            const int m = m0 + tok, n = n0 + c4;
            if (S == 1) {
                if (m < M && n < N) store_bf16x4(d, m, n, N, v, alpha_eff, (N & 3) == 0);
            } else {
                *(float4 *)(red + tok * RS + c4) = v;
            }
        }
        if (S == 1) {
            __syncthreads(); /* red is the next tile's */
            continue;
        }
        cluster_sync_all();
        /* block r of the cluster sums elements r, r + S, .. over the S blocks */
        const uint32_t rank = cluster_rank();
        const uint32_t red_addr = sbase + D10_OFF_RED;
        for (int e = tid * S + (int)rank; e < E4; e += THREADS * S) {
            const int tok = e / C4, c4 = (e - tok * C4) * 4;
            const int m = m0 + tok, n = n0 + c4;
            if (m >= M || n >= N) continue;
            const float4 v = cluster_sum4(red_addr + (uint32_t)((tok * RS + c4) * 4), S);
            store_bf16x4(d, m, n, N, v, alpha_eff, (N & 3) == 0);
        }
        cluster_sync_all(); /* peers may still read this block's partials */
    }
}

/* ---- host side ---------------------------------------------------------------------- */

typedef void (*d10_kernel_fn)(const uint8_t *, const uint8_t *, const uint8_t *, const uint8_t *,
                              __nv_bfloat16 *, int, int, int, int, int, int, int, float);

typedef struct d10_cfg {
    int rt, nt;       /* tiles of 16 rows a warp, token tiles of 8 a chunk */
    int rbs, zc;      /* row blocks, token chunks: rbs * zc tiles */
    int S, kper;      /* K splits (the cluster size), k-steps a split */
    int grid_x;       /* blocks a split: persistent when fewer than the tiles */
    size_t smem;
} d10_cfg;

static int d10_nt(int64_t m) { return m <= 8 ? 1 : m <= 16 ? 2 : 4; }

/* Clusters of s blocks resident at once: fit[s] when known, else SMs / s. */
static int64_t d10_fit(const int *fit, int sms, int s)
{
    return fit && fit[s] > 0 ? fit[s] : sms / s;
}

/* K splits and blocks for rt. Split K while there are fewer tiles than SMs,
 * into the most splits whose clusters all fit at once (on the H200, 32
 * clusters of 4 did not: 14.9 us against 8.8 with 2 splits at 16x2048x6144);
 * persistent blocks over the tiles otherwise. Returns the busy fraction of
 * the SMs over the waves. */
static double d10_fill(d10_cfg *c, int64_t m, int64_t n, int64_t k, int sms, int splits,
                       const int *fit, int rt)
{
    const int64_t KS = d10_ks(k);
    c->rt = rt;
    c->nt = d10_nt(m);
    c->zc = (int)((m + 8 * c->nt - 1) / (8 * c->nt));
    c->rbs = (int)(d10_np(n) / (16 * rt));
    const int64_t tiles = (int64_t)c->rbs * c->zc;
    int64_t S = 1;
    if (splits > 0) {
        S = splits;
    } else {
        for (int s = 2; s <= D10_MAX_SPLITS && tiles * s <= sms; s++)
            if (tiles <= d10_fit(fit, sms, s)) S = s;
    }
    if (S > D10_MAX_SPLITS) S = D10_MAX_SPLITS;
    if (S > KS) S = KS;
    if (S < 1) S = 1;
    c->kper = (int)((KS + S - 1) / S);
    c->S = (int)((KS + c->kper - 1) / c->kper); /* every split non-empty */
    int64_t gx = d10_fit(fit, sms, c->S);
    if (gx < 1) gx = 1;
    if (gx > tiles) gx = tiles;
    c->grid_x = (int)gx;
    c->smem = d10_smem(rt, c->nt);
    const int64_t waves = (tiles + gx - 1) / gx;
    return (double)(tiles * c->S) / (double)(waves * sms);
}

/* RT = 4 (the token conversion shared by 64 rows) unless RT = 2 fills the
 * SMs better by more than the ~20% of extra arithmetic a k-step it costs;
 * FP4_SM90_V10_RT=2|4 forces it (development). */
static void d10_plan(int64_t m, int64_t n, int64_t k, int num_sms, int splits, const int *fit,
                     d10_cfg *c)
{
    const int sms = num_sms > 0 ? num_sms : 132;
    const char *env = getenv("FP4_SM90_V10_RT");
    const int forced = env ? atoi(env) : 0;
    memset(c, 0, sizeof *c);
    if (forced == 2 || forced == 4) {
        d10_fill(c, m, n, k, sms, splits, fit, forced);
        return;
    }
    d10_cfg c2;
    const double f4 = d10_fill(c, m, n, k, sms, splits, fit, 4);
    const double f2 = d10_fill(&c2, m, n, k, sms, splits, fit, 2);
    if (f2 > 1.2 * f4) *c = c2;
}

static d10_kernel_fn d10_kernel(int rt, int nt)
{
    if (rt == 4)
        return nt == 1 ? fp4_sm90_decode_v10<4, 1>
               : nt == 2 ? fp4_sm90_decode_v10<4, 2>
                         : fp4_sm90_decode_v10<4, 4>;
    return nt == 1 ? fp4_sm90_decode_v10<2, 1>
           : nt == 2 ? fp4_sm90_decode_v10<2, 2>
                     : fp4_sm90_decode_v10<2, 4>;
}

/* a launch configuration of v10 (clusters of s when s > 1) */
static void d10_launch_cfg(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, const d10_cfg *c,
                           cudaStream_t stream)
{
    *cfg = cudaLaunchConfig_t{};
    *attr = cudaLaunchAttribute{};
    cfg->gridDim = dim3((unsigned)c->grid_x, (unsigned)c->S, 1);
    cfg->blockDim = dim3((unsigned)(32 * D10_WARPS(c->nt)), 1, 1);
    cfg->dynamicSmemBytes = c->smem;
    cfg->stream = stream;
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = 1;
    attr->val.clusterDim.y = (unsigned)c->S;
    attr->val.clusterDim.z = 1;
    cfg->attrs = attr;
    cfg->numAttrs = c->S > 1 ? 1 : 0; /* one split: no cluster */
}

extern "C" {

int fp4_sm90_decode10_fits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    (void)num_sms;
    const int nt = d10_nt(m);
    const int64_t tiles = (d10_np(n) / 32) * ((m + 8 * nt - 1) / (8 * nt));
    return tiles <= 0x7fffffff && d10_np(n) * d10_ks(k) <= 0x7fffffff;
}

fp4_status fp4_sm90_decode10_init(fp4_err *err)
{
    static const int rts[] = {2, 4}, nts[] = {1, 2, 4};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            FP4_CUDA_TRY(err, cudaFuncSetAttribute(d10_kernel(rts[i], nts[j]),
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)d10_smem(rts[i], nts[j])));
    return FP4_OK;
}

/* Every configuration takes one block a SM (its shared memory), so one query
 * of the largest (RT 4, 16 tokens) stands for all. */
fp4_status fp4_sm90_decode10_cluster_fit(int fit[FP4_SM90_MAX_CLUSTER + 1], int num_sms,
                                         fp4_err *err)
{
    d10_cfg c;
    memset(&c, 0, sizeof c);
    c.rt = 4;
    c.nt = 2;
    c.smem = d10_smem(4, 2);
    fit[0] = 0;
    for (int s = 1; s <= FP4_SM90_MAX_CLUSTER; s++) {
        cudaLaunchConfig_t cfg;
        cudaLaunchAttribute attr;
        c.S = s;
        c.grid_x = num_sms / s > 0 ? num_sms / s : 1;
        d10_launch_cfg(&cfg, &attr, &c, 0);
        cfg.numAttrs = 1;
        FP4_CUDA_TRY(err, cudaOccupancyMaxActiveClusters(&fit[s], (const void *)d10_kernel(4, 2), &cfg));
    }
    return FP4_OK;
}

void fp4_sm90_decode10_cfg(int64_t m, int64_t n, int64_t k, int num_sms, int splits,
                           const int *cluster_fit, int *rt, int *s)
{
    d10_cfg c;
    d10_plan(m, n, k, num_sms, splits, cluster_fit, &c);
    *rt = c.rt;
    *s = c.S;
}

fp4_status fp4_sm90_decode10_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    if (!fp4_sm90_decode10_fits(a->m, a->n, a->k, a->num_sms))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 v10-decode: shape too large");
    d10_cfg c;
    d10_plan(a->m, a->n, a->k, a->num_sms, a->splits, a->cluster_fit, &c);
    const uint8_t *bq = a->b_codes, *bs = a->b_sf, *aq = a->a_codes, *asf = a->a_sf;
    __nv_bfloat16 *d = (__nv_bfloat16 *)a->d;
    int M = (int)a->m, N = (int)a->n, K = (int)a->k, KS = (int)d10_ks(a->k);
    int kper = c.kper, rbs = c.rbs, tiles = c.rbs * c.zc;
    /* both operands carry 2^-7 from the dequantization */
    float alpha_eff = a->alpha * 16384.0f;
    void *args[] = {&bq, &bs, &aq, &asf, &d, &M, &N, &K, &KS, &kper, &rbs, &tiles, &alpha_eff};
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr;
    d10_launch_cfg(&cfg, &attr, &c, stream);
    FP4_CUDA_TRY(err, cudaLaunchKernelExC(&cfg, (const void *)d10_kernel(c.rt, c.nt), args));
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

} /* extern "C" */
