/* fp4-sm90 MoE, the wide path (moe_wide.h): the grouped GEMM on wgmma, for
 * batches where each expert sees tens to hundreds of tokens. The streaming
 * kernel of moe.cu decodes the weights again for every 32 tokens on
 * mma.sync; here each weight is decoded once for up to 128 tokens and the
 * products run on wgmma.
 *
 * - Prepass (fp4_sm90_moe_wide_prep_kernel): the activation rows (bf16, or
 *   NVFP4 dequantized exactly to bf16) are rewritten into the workspace, K
 *   padded to whole ring turns with zeros, and the 64 k of every step
 *   permuted into the order in which the packed weights' register fragments
 *   hold them (below). Rows are not gathered: T rows for gate_up. It exits
 *   at once when no expert reaches tok_lo tokens.
 * - Work units: (expert, chunk of at most 128 of its tokens, block of 128
 *   weight rows), walked by a persistent grid of one CTA a SM as in moe.cu,
 *   over the experts of at least tok_lo tokens only (the streaming kernel
 *   takes the others; experts without tokens have no units). An expert's tokens are cut into
 *   chunks of equal size, and a chunk of at most 64 tokens runs the n64
 *   wgmma, so padding costs at most about half a chunk.
 * - Two warpgroups of 64 weight rows. Each warp streams its 16-row tile of
 *   the packed weights (moe.cu's format: 512 bytes a k-step) by cp.async
 *   into its own shared-memory ring, 7 k-steps ahead, in the token stages'
 *   cp.async groups (a register ring is not kept ahead: ptxas gathers the
 *   loads of a whole ring turn at its end, behind one scoreboard, so every
 *   turn waited a full memory latency), decodes it with the bf16 value layout and
 *   the scale multiply (moe.cu) straight into the wgmma A fragment (the
 *   m64nNk16 fragment of a warp is mma.sync's m16n8k16 A fragment), and
 *   issues wgmma m64nNk16 bf16 with the tokens as B from shared memory.
 * - Tokens: gathered by pair_index from the prepass rows into a 6-deep ring
 *   of 128-byte-swizzled shared-memory tiles by cp.async, 4 stages ahead.
 *   Step s: wait for stage s, fence to the async proxy, one barrier, copy
 *   stage s + 4 into the slot of step s - 2 and the weights of step s + 7
 *   (one cp.async group), decode the weights of step s,
 *   issue its 4 wgmmas, wait until only they run. The tensor cores work on
 *   step s while the threads decode step s + 1.
 * - The k order: lane t of the weights' fragment holds k-block t of the step
 *   (16 consecutive k), and wgmma slice j takes k 4j..4j+3 of every block, so
 *   logical k 16j + 2t + e is physical 16t + 4j + e and 16j + 8 + 2t + e is
 *   16t + 4j + 2 + e: in 32-bit words (bf16 pairs), logical word 4m + t is
 *   physical word 8t + m. The prepass writes that order.
 * - Epilogue: the sums go through shared memory transposed and leave as
 *   16-byte bf16 rows D[pair]; no split K (the path runs only where units
 *   are plentiful). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "core/cuda_check.h"
#include "kernels/sm90/fp4_sm90.h"
#include "kernels/sm90/moe_device.cuh"
#include "kernels/sm90/moe_wide.h"
#include "kernels/sm90/nibbles.h"
#include "kernels/sm90/wgmma.cuh"

#define MW_THREADS 256            /* two warpgroups */
#define MW_TILES 8                /* 16-row weight tiles a unit: one a warp */
#define MW_ROWS (16 * MW_TILES)   /* 128 weight rows a unit */
#define MW_TOK 128                /* tokens a chunk at most */
#define MW_ST 6                   /* token stages in shared memory */
#define MW_STAGE (MW_TOK * 128)   /* a stage: 128 token rows of 64 bf16 (16 KB) */
#define MW_RING 8                 /* weight ring (shared memory): copies 7 k-steps ahead */
#define MW_TR_LD (MW_ROWS + 4)    /* floats a token row of the epilogue tile: no bank conflicts */
#define MW_WCODES (MW_ST * MW_STAGE)                   /* the weight ring's codes: [warp][slot][lane] 16 B */
#define MW_WSCALES (MW_WCODES + MW_TILES * MW_RING * 512) /* its scales: [warp][slot pair][lane] 4 B */
#define MW_SMEM (MW_WSCALES + MW_TILES * (MW_RING / 2) * 128 + 1024) /* +1024: the swizzle's alignment */
static_assert(MW_TOK * MW_TR_LD * 4 <= MW_ST * MW_STAGE, "the epilogue tile exceeds the ring");

typedef struct mw_params {
    const uint16_t *a; /* the prepass rows [rows][ksp * 64] bf16 */
    const int32_t *off, *pair_index;
    const uint8_t *b;
    const float *b_global;
    uint16_t *d;
    size_t expert_stride, codes_bytes;
    float a_global;
    int E, top_k, N, KS, KSP, KS2, tiles, RB, a_per_pair, vec_out;
    int tok_lo; /* the experts of at least tok_lo tokens are this path's */
} mw_params;

/* k-steps padded to whole ring turns: the loop has no tail */
static int64_t mw_ksp(int64_t k) { return ((k + 63) / 64 + MW_RING - 1) / MW_RING * MW_RING; }

/* ---- prepass ----------------------------------------------------------------------- */

/* One thread a (row, k-step): the step's 32 bf16 pairs (k >= K zero) in the
 * permuted order, 128 bytes. Nothing when no expert has tok_lo tokens (the
 * streaming path then has them all). */
__global__ void __launch_bounds__(256)
    fp4_sm90_moe_wide_prep_kernel(const uint16_t *__restrict__ a_bf16,
                                  const uint8_t *__restrict__ a_codes,
                                  const uint8_t *__restrict__ a_scales, int w4a16, int K, int KSP,
                                  long long rows, const int32_t *__restrict__ off, int E,
                                  int tok_lo, uint4 *__restrict__ out)
{
    if (tok_lo > 1) {
        int found = 0;
        for (int e = threadIdx.x; e < E && !found; e += 256) found = off[e + 1] - off[e] >= tok_lo;
        if (!__syncthreads_or(found)) return;
    }
    const long long idx = (long long)blockIdx.x * 256 + threadIdx.x;
    if (idx >= rows * KSP) return;
    const long long row = idx / KSP;
    const int k0 = (int)(idx % KSP) * 64;
    uint32_t w[32]; /* physical word p: k 2p, 2p + 1 of the step */
    if (w4a16) {
        const uint4 *src = (const uint4 *)(a_bf16 + (size_t)row * K + k0);
#pragma unroll
        for (int c = 0; c < 8; c++) {
            const uint4 v = k0 + 8 * c < K ? __ldg(src + c) : make_uint4(0u, 0u, 0u, 0u);
            w[4 * c] = v.x, w[4 * c + 1] = v.y, w[4 * c + 2] = v.z, w[4 * c + 3] = v.w;
        }
    } else {
        const uint8_t *codes = a_codes + (size_t)row * (K / 2) + k0 / 2;
        const uint8_t *sc = a_scales + (size_t)row * (K / 16) + k0 / 16;
#pragma unroll
        for (int kb = 0; kb < 4; kb++) {
            uint2 c = make_uint2(0u, 0u);
            float s = 0.0f;
            if (k0 + 16 * kb < K) {
                c = __ldg((const uint2 *)(codes + 8 * kb));
                s = moe_e4m3_float(__ldg(sc + kb));
            }
            moe_block16_bf16(c, s, &w[8 * kb]);
        }
    }
    uint4 *dst = out + (size_t)idx * 8;
#pragma unroll
    for (int m = 0; m < 8; m++) dst[m] = make_uint4(w[m], w[8 + m], w[16 + m], w[24 + m]);
}

#ifdef FP4_SM90_HAVE_WGMMA
/* ---- the main loop ------------------------------------------------------------------- */

/* The lane's ring slot u <- k-step ks of the warp's tile (codes; scales on
 * even slots), by cp.async into the current group; past the last k-step the
 * last is re-read (the tokens are zero there). wdst, sdst: the lane's slot 0. */
static __device__ __forceinline__ void mw_load(uint32_t wdst, uint32_t sdst, int u, const uint4 *cb,
                                               const uint32_t *sb, int ks, int KS)
{
    const int kl = min(ks, KS - 1);
    wg_cp16(wdst + (uint32_t)(u * 512), cb + (size_t)kl * 32, 16);
    if ((u & 1) == 0) wg_cp4(sdst + (uint32_t)((u >> 1) * 128), sb + (size_t)(kl >> 1) * 32);
}

/* Ring slot u (landed) -> the 16 A registers of the step's 4 wgmma slices.
 * wq, wsr: the lane's slot 0 of codes and scales. */
static __device__ __forceinline__ void mw_decode(const uint4 *wq, const uint32_t *wsr,
                                                 uint32_t &sodd, int u, uint32_t *afr)
{
    const uint4 q = wq[u * 32];
    uint32_t sc;
    if ((u & 1) == 0) {
        uint32_t ev;
        scale_pair(wsr[(u >> 1) * 32], &ev, &sodd);
        sc = ev;
    } else {
        sc = sodd;
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        uint32_t pg[4], p8[4];
        fp4_nib_bf16_pairs(h ? q.y : q.x, pg);
        fp4_nib_bf16_pairs(h ? q.w : q.z, p8);
#pragma unroll
        for (int r = 0; r < 4; r++) {
            pg[r] = bf2_mul_lo(pg[r], sc);
            p8[r] = bf2_mul_hi(p8[r], sc);
        }
#pragma unroll
        for (int jj = 0; jj < 2; jj++) {
            uint32_t *f = afr + 4 * (2 * h + jj);
            f[0] = pg[2 * jj];
            f[1] = p8[2 * jj];
            f[2] = pg[2 * jj + 1];
            f[3] = p8[2 * jj + 1];
        }
    }
}

/* This thread's token copies: the same rows in every stage of a unit, so the
 * sources, slot offsets and sizes are worked out once a unit (a per-stage
 * read of the row table put a shared-memory round trip before every copy). */
template <int BN> struct mw_rows {
    const char *src[BN / 32]; /* stage 0 */
    uint32_t dst[BN / 32];    /* in a slot, 128-byte swizzled */
    int bytes[BN / 32];       /* 0 past the chunk's tokens: zeros */
};

template <int BN>
static __device__ __forceinline__ void mw_rows_init(mw_rows<BN> &cr, const char *const *arow,
                                                    int ntok, int tid)
{
#pragma unroll
    for (int i = 0; i < BN / 32; i++) {
        const int idx = tid + i * MW_THREADS, r = idx >> 3, c = idx & 7;
        cr.src[i] = arow[r] + c * 16;
        cr.dst[i] = (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
        cr.bytes[i] = r < ntok ? 16 : 0;
    }
}

/* Stage ls of the chunk's tokens (BN rows; rows past ntok zero) into the slot at dst. */
template <int BN>
static __device__ __forceinline__ void mw_stage(uint32_t dst, const mw_rows<BN> &cr, int ls)
{
#pragma unroll
    for (int i = 0; i < BN / 32; i++) wg_cp16(dst + cr.dst[i], cr.src[i] + (size_t)ls * 128, cr.bytes[i]);
}

template <int BN>
static __device__ __forceinline__ void mw_mma4(float *acc, const uint32_t *afr, uint32_t btile,
                                               bool first)
{
    const uint64_t desc = wg_desc_sw128(btile);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int sd = (first && j == 0) ? 0 : 1;
        if (BN == 128)
            wg_mma_bf16_n128(acc, afr[4 * j], afr[4 * j + 1], afr[4 * j + 2], afr[4 * j + 3],
                             desc + (uint64_t)(2 * j), sd);
        else
            wg_mma_bf16_n64(acc, afr[4 * j], afr[4 * j + 1], afr[4 * j + 2], afr[4 * j + 3],
                            desc + (uint64_t)(2 * j), sd);
    }
}

/* k-step s with ring slot u (compile time) and A register set afr (free: the
 * wgmmas that read it, step s - 2, retired in step s - 1). */
template <int BN>
static __device__ __forceinline__ void mw_step(int s, int u, float *acc, uint32_t *afr,
                                               const uint4 *wq, const uint32_t *wsr,
                                               uint32_t wdst, uint32_t sdst, uint32_t &sodd,
                                               const uint4 *cb, const uint32_t *sb, int KS,
                                               int KSP, uint32_t sbase, const mw_rows<BN> &cr)
{
    /* committed: MW_ST - 2 + s groups; token stage s is group s, the weights
     * of step s are in group 0 (s < MW_RING - 1) or s - 3 */
    wg_cp_wait<MW_ST - 3>();
    wg_fence_async_smem();
    __syncthreads();
    {
        const int ls = s + MW_ST - 2; /* into the slot of step s - 2 */
        if (ls < KSP) mw_stage<BN>(sbase + (uint32_t)((ls % MW_ST) * MW_STAGE), cr, ls);
        /* the lane's own slot of step s - 1, read back by this lane only */
        mw_load(wdst, sdst, (u + MW_RING - 1) % MW_RING, cb, sb, s + MW_RING - 1, KS);
        wg_cp_commit();
    }
    mw_decode(wq, wsr, sodd, u, afr);
    wg_fence();
    mw_mma4<BN>(acc, afr, sbase + (uint32_t)((s % MW_ST) * MW_STAGE), s == 0);
    wg_commit();
    wg_wait<1>();
}

/* One unit: the sums of the warp's tile for BN token slots, then D. Starts and
 * ends with every thread past a barrier (the shared memory free). */
template <int BN>
static __device__ __forceinline__ void mw_unit(const mw_params &p, unsigned char *smem,
                                               uint32_t sbase, const char *const *arow,
                                               const int *drow, int ntok, int n0, const uint4 *cb,
                                               const uint32_t *sb, float alpha, int tid)
{
    float acc[BN / 2]; /* the first wgmma runs with scale-d = 0 */
    uint32_t fa[16], fb[16];
    uint32_t sodd = 0;
    const int KS = p.KS, KSP = p.KSP;
    const int lane = tid & 31, warp = tid >> 5;
    const uint4 *wq = (const uint4 *)(smem + MW_WCODES) + warp * MW_RING * 32 + lane;
    const uint32_t *wsr = (const uint32_t *)(smem + MW_WSCALES) + warp * (MW_RING / 2) * 32 + lane;
    const uint32_t wdst = sbase + (uint32_t)(MW_WCODES + (warp * MW_RING * 32 + lane) * 16);
    const uint32_t sdst = sbase + (uint32_t)(MW_WSCALES + (warp * (MW_RING / 2) * 32 + lane) * 4);
    mw_rows<BN> cr;
    mw_rows_init<BN>(cr, arow, ntok, tid);

#pragma unroll
    for (int s = 0; s < MW_RING - 1; s++) mw_load(wdst, sdst, s, cb, sb, s, KS); /* group 0 */
#pragma unroll 1
    for (int ls = 0; ls < MW_ST - 2; ls++) {
        if (ls < KSP) mw_stage<BN>(sbase + (uint32_t)(ls * MW_STAGE), cr, ls);
        wg_cp_commit();
    }
    /* unrolled by the ring so that its slots and the two A register sets are
     * compile-time arrays; KSP is a whole number of turns, so no step is
     * conditional (a set rewritten on any path while its wgmma runs would make
     * ptxas serialize every wgmma) */
#pragma unroll 1
    for (int s0 = 0; s0 < KSP; s0 += MW_RING) {
#pragma unroll
        for (int u = 0; u < MW_RING; u++)
            mw_step<BN>(s0 + u, u, acc, (u & 1) ? fb : fa, wq, wsr, wdst, sdst, sodd, cb, sb, KS,
                        KSP, sbase, cr);
    }
    wg_wait<0>();
    wg_reg_fence<BN / 2>(acc);
    wg_cp_wait<0>();
    __syncthreads(); /* every wgmma retired: the ring is free for the transposed tile */

    float *T = (float *)smem; /* [token][row] */
    {
        const int g = lane >> 2, t = lane & 3, r0 = warp * 16 + g;
#pragma unroll
        for (int i = 0; i < BN / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                T[(8 * i + 2 * t + (e & 1)) * MW_TR_LD + r0 + 8 * (e >> 1)] = acc[4 * i + e];
    }
    __syncthreads();
    for (int idx = tid; idx < ntok * (MW_ROWS / 8); idx += MW_THREADS) {
        const int m = idx / (MW_ROWS / 8), c = (idx % (MW_ROWS / 8)) * 8;
        if (n0 + c < p.N)
            moe_store8(p.d, (size_t)drow[m], p.N, n0 + c, T + m * MW_TR_LD + c, alpha, p.vec_out);
    }
    __syncthreads();
}
#endif /* FP4_SM90_HAVE_WGMMA */

__global__ void __launch_bounds__(MW_THREADS, 1) fp4_sm90_moe_wide_kernel(const mw_params p)
{
#ifdef FP4_SM90_HAVE_WGMMA
    extern __shared__ unsigned char mw_smem_raw[];
    __shared__ const char *arow[MW_TOK]; /* a chunk token's prepass row */
    __shared__ int drow[MW_TOK];         /* its pair (output row) */
    __shared__ int unit[3];              /* expert, row block, tokens */
    __shared__ moe_walk walk;
    __shared__ long long units_all;
    uint32_t sbase = 0;
    unsigned char *smem = wg_smem_aligned(mw_smem_raw, &sbase);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const size_t arow_bytes = (size_t)p.KSP * 128;

    if (warp == 0) {
        const int chunks = moe_total_chunks(p.off, p.E, MW_TOK, p.tok_lo, INT_MAX, lane);
        if (lane == 0) {
            units_all = (long long)chunks * p.RB;
            walk.e = 0;
            walk.ubase = 0;
            walk.cbase = 0;
        }
    }
    __syncthreads();
    const long long units = units_all;

    for (long long u = blockIdx.x; u < units; u += gridDim.x) {
        if (warp == 0) {
            int un[5];
            moe_walk w = walk;
            moe_find_unit(p.off, p.E, p.RB, 1, MW_TOK, p.tok_lo, INT_MAX, u, &w, lane, un);
            const int e = un[0], base = p.off[e], cnt = p.off[e + 1] - base;
            const int nch = (cnt + MW_TOK - 1) / MW_TOK; /* chunks of equal size */
            const int c0 = (int)((long long)un[1] * cnt / nch);
            const int c1 = (int)((long long)(un[1] + 1) * cnt / nch);
            const int ntok = c1 - c0;
            for (int i = lane; i < MW_TOK; i += 32) {
                /* slots past the chunk's tokens: row 0 (copied as zeros, never stored) */
                const int pair = i < ntok ? p.pair_index[base + c0 + i] : 0;
                drow[i] = pair;
                arow[i] = (const char *)p.a + (size_t)(p.a_per_pair ? pair : pair / p.top_k) * arow_bytes;
            }
            __syncwarp(); /* every lane has read walk before lane 0 writes it */
            if (lane == 0) {
                walk = w;
                unit[0] = e;
                unit[1] = un[2];
                unit[2] = ntok;
            }
        }
        __syncthreads();
        const int e = unit[0], rb = unit[1], ntok = unit[2];
        const uint8_t *wb = p.b + (size_t)e * p.expert_stride;
        /* a tile past the last re-reads the last (its rows are never stored) */
        const int tile = min(rb * MW_TILES + warp, p.tiles - 1);
        const uint4 *cb = (const uint4 *)wb + (size_t)tile * p.KS * 32 + lane;
        const uint32_t *sb = (const uint32_t *)(wb + p.codes_bytes) + (size_t)tile * p.KS2 * 32 + lane;
        const float alpha = p.a_global * p.b_global[e] * 256.0f; /* the weights' 2^8 (moe.cu) */
        if (ntok <= 64)
            mw_unit<64>(p, smem, sbase, arow, drow, ntok, rb * MW_ROWS, cb, sb, alpha, tid);
        else
            mw_unit<128>(p, smem, sbase, arow, drow, ntok, rb * MW_ROWS, cb, sb, alpha, tid);
    }
#else
    (void)p;
    __trap(); /* wgmma: sm_90a only; the launch refuses other targets first */
#endif
}

/* ---- host side ------------------------------------------------------------------------- */

extern "C" {

size_t fp4_sm90_moe_wide_ws_size(int64_t rows, int64_t k)
{
    if (rows < 1 || k < 16) return 0;
    return (size_t)rows * (size_t)mw_ksp(k) * 128;
}

int fp4_sm90_moe_wide_runs_here(void)
{
    return fp4_sm90_wgmma_runs_here((const void *)fp4_sm90_moe_wide_kernel, "moe wide", NULL) ==
           FP4_OK;
}

fp4_status fp4_sm90_moe_wide_launch(const fp4_sm90_moe_args *a, const moe_wide_geom *g, int tok_lo,
                                    void *workspace, size_t workspace_bytes, cudaStream_t stream,
                                    fp4_err *err)
{
    fp4_status st = fp4_sm90_wgmma_runs_here((const void *)fp4_sm90_moe_wide_kernel, "moe wide", err);
    if (st != FP4_OK) return st;
    const int64_t rows = a->a_per_pair ? a->tokens * a->top_k : a->tokens;
    const size_t need = fp4_sm90_moe_wide_ws_size(rows, a->k);
    if (!workspace || workspace_bytes < need)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 moe: needs a %zu-byte workspace", need);

    mw_params p;
    memset(&p, 0, sizeof p);
    p.a = (const uint16_t *)workspace;
    p.off = a->expert_offsets;
    p.pair_index = a->pair_index;
    p.b = (const uint8_t *)a->b_packed;
    p.b_global = a->b_global;
    p.d = a->d;
    p.expert_stride = g->expert_stride;
    p.codes_bytes = g->codes_bytes;
    p.a_global = a->w4a16 ? 1.0f : a->a_global;
    p.E = a->experts;
    p.top_k = a->top_k;
    p.N = (int)a->n;
    p.KS = g->ks;
    p.KSP = (int)mw_ksp(a->k);
    p.KS2 = g->ks2;
    p.tiles = g->tiles;
    p.RB = (int)((a->n + MW_ROWS - 1) / MW_ROWS);
    p.a_per_pair = a->a_per_pair != 0;
    p.vec_out = a->n % 8 == 0 && ((uintptr_t)a->d & 15) == 0;
    p.tok_lo = tok_lo;

    const long long threads = (long long)rows * p.KSP;
    const long long blocks = (threads + 255) / 256;
    if (blocks > INT_MAX)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 moe: prepass grid too large");
    fp4_sm90_moe_wide_prep_kernel<<<(unsigned)blocks, 256, 0, stream>>>(
        (const uint16_t *)a->a_bf16, a->a_codes, a->a_scales, a->w4a16 != 0, (int)a->k, p.KSP,
        (long long)rows, a->expert_offsets, a->experts, tok_lo, (uint4 *)workspace);
    FP4_CUDA_LAUNCH_TRY(err);

    int dev = 0, sms = 0, per_sm = 0;
    FP4_CUDA_TRY(err, cudaGetDevice(&dev));
    FP4_CUDA_TRY(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    FP4_CUDA_TRY(err, cudaFuncSetAttribute(fp4_sm90_moe_wide_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, MW_SMEM));
    FP4_CUDA_TRY(err, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fp4_sm90_moe_wide_kernel,
                                                                    MW_THREADS, MW_SMEM));
    if (per_sm < 1) per_sm = 1;
    fp4_sm90_moe_wide_kernel<<<sms * per_sm, MW_THREADS, MW_SMEM, stream>>>(p);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

} /* extern "C" */
