/* fp4-sm90 MoE: one grouped NVFP4 GEMM over all experts (moe.h). This file
 * holds the streaming path, built for decode, where each expert sees a
 * handful of tokens and the weights' bytes decide the time. Experts with
 * MOE_WIDE_MIN_TOKENS tokens or more go to the wide path (moe_wide.cu), a
 * second launch on the same stream: the split is made on the device from
 * the expert offsets, so skewed routing sends its hot experts there.
 *
 * - Work units: (expert, chunk of up to 32 of its tokens, block of 256 weight
 *   rows, K split). Only experts with tokens have units. A persistent grid
 *   (blocks that fit at once) walks the units u = block, block + grid, ...; the
 *   unit list is never stored: warp 0 of each block finds its unit's expert by
 *   walking expert_offsets forward with warp prefix sums (its units come in
 *   increasing order), so the work follows the tokens with no prepass. Every
 *   unit streams the same bytes, so the static order balances; K is split only
 *   when there are too few units for the grid (small T*k), with a split count
 *   chosen on the device from the actual unit count.
 * - mma.sync m16n8k16 bf16 with A and B swapped: weights on the 16-row side,
 *   tokens the 8 wide (up to 4 token tiles). In a k-step of 64 lane (g, t) owns
 *   the 16 consecutive k of k-block 4 ks + t for weight rows g, g + 8 and token
 *   g; MMA j takes k 4j..4j+3 of it (the same k on both operands, so the
 *   product is the plain dot product).
 * - Weights packed once (fp4_sm90_moe_pack): per expert [16-row tile][k-step]
 *   [lane] 16 bytes (row g's 16 codes in two words, then row g + 8's), each
 *   word in the bf16 value layout of nibbles.h (5 LOP3 + 4 shifts for 8
 *   weights); scales [tile][k-step pair][lane] 4 bytes (row g and g + 8 of two
 *   k-steps). One coalesced 512-byte load per tile and k-step, in a register
 *   ring 3 k-steps ahead; past the unit's last k-step the ring re-reads that
 *   step (an L2 hit) instead of branching: the loop has no predicates.
 * - Dequantization: the decoded bf16 pattern is e2m1 x 2^-126; times the scale
 *   as bf16 (e4m3 x 2^118, two exact multiplies from the byte's bits) it is
 *   e2m1 x e4m3 x 2^-8, exact and normal; one HMUL2 per two weights on the FMA
 *   pipe. The 2^8 goes into the epilogue's alpha.
 * - Tokens: each block stages its chunk's activations into shared memory in
 *   B-fragment order, a stage in each of 4 buffers (64 KB of dynamic shared
 *   memory): 8 k-steps for up to 16 tokens, 4 above, so that a stage at
 *   decode sizes is as long as at 32 tokens (at 4, one token cost 10% more).
 *   W4A16: cp.async of the bf16 rows, gathered by pair_index; W4A4: codes
 *   copied by cp.async, then decoded once per block through a 256-entry
 *   byte table times the scale, exact in bf16; or, where a token row serves
 *   many blocks (moe_prepass_for), dequantized once by a prepass
 *   (fp4_sm90_moe_dequant_kernel) into bf16 rows that the W4A16 loop
 *   reads. All 8 warps (different weight
 *   rows) read them. No CTA barrier in the loop: each buffer has a full and an
 *   empty mbarrier, and stage s + 3 is copied once every warp is done with
 *   stage s - 1, so warps drift up to a stage apart (a barrier a stage cost
 *   about 15% of the warps' time at 16 tokens an expert). Stage k >= K is
 *   zero, so the k-steps past a unit's end compute nothing.
 * - Epilogue: the block's sums go through shared memory and out as 16-byte
 *   bf16 rows D[pair]; with split K they are added into an fp32 workspace
 *   (red.global.add) and the last block of the tile (arrival counter) writes D
 *   and re-zeroes its rows and counter (graph-replayable).
 * - The optional combine is a second small kernel over [T, n].
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_check.h"
#include "fp4/format.h"
#include "kernels/sm90/moe.h"
#include "kernels/sm90/moe_device.cuh"
#include "kernels/sm90/moe_wide.h"
#include "kernels/sm90/nibbles.h"
#include "kernels/sm90/wgmma.cuh"

#define MOE_WARPS 8
#define MOE_THREADS (32 * MOE_WARPS)
#define MOE_RT 2                              /* 16-row weight tiles per warp */
#define MOE_BLOCK_TILES (MOE_WARPS * MOE_RT)  /* 16 tiles */
#define MOE_ROWS (16 * MOE_BLOCK_TILES)       /* 256 weight rows per block */
#define MOE_TOK 32                            /* tokens per chunk */
/* k-steps a stage: 8 for up to 16 tokens (NT <= 2), 4 above (a stage holds 16
 * (k-step, token tile) fragments either way); 8 is also the K split's
 * granularity, so every split is whole stages of both depths */
#define MOE_KCN(NT) ((NT) <= 2 ? 8 : 4)
#define MOE_KC_MAX 8
#define MOE_SLOTS 16                          /* (k-step, token tile) fragments a stage */
#define MOE_NB 4                              /* activation stage buffers */
#define MOE_RING 4                            /* register ring slots (loads 3 k-steps ahead) */
#define MOE_RS (MOE_ROWS + 4)                 /* epilogue row stride (floats): no bank conflicts */
#define MOE_MAX_SPLITS 64
#define MOE_SPLIT_OVERHEAD_KS 4               /* a unit's start-up, in k-steps, for the split choice */
/* Split K needs an fp32 row per grouped row: only allowed while that stays small
 * (it is needed only at small T*k, where units are few). */
#define MOE_SPLIT_WS_CAP ((size_t)16 << 20)
/* tokens of an expert from which the wide path takes it (on the H200, GLM-5
 * gate_up with every expert alike: the streaming path is faster at 32 tokens,
 * the wide one at 64) */
#define MOE_WIDE_MIN_TOKENS 40

/* ---- parameters and shared memory ---------------------------------------------------- */

typedef struct moe_params {
    const uint16_t *a_bf16;
    const uint8_t *a_codes, *a_scales;
    float a_global;
    const int32_t *off, *pair_index;
    const uint8_t *b;
    const float *b_global;
    uint16_t *d;
    float *ws;          /* split K: fp32 [pairs][nw] */
    unsigned *counters; /* split K: [chunk][row block] */
    size_t expert_stride, codes_bytes;
    int E, top_k, N, K, KB, KS, KS2, tiles, RB, nw;
    int w4a16, a_per_pair, max_splits, vec_out;
    int scales4; /* W4A4: a k-step's 4 scale bytes are one aligned word (K/16 % 4 == 0) */
    int tok_hi;  /* the experts of fewer than tok_hi tokens are this path's */
    int force_splits; /* measurement override: this K split count where valid (0: chosen) */
} moe_params;

/* Dynamic shared memory (82 KB). */
typedef struct moe_stage {
    union {
        uint4 act[MOE_NB][MOE_SLOTS][2][32]; /* [buffer][k-step x NT + token tile][half][lane] 64 KB */
        float tile[MOE_TOK][MOE_RS];              /* epilogue: [token][row] */
    } u;
    uint4 raw[MOE_NB][8 * MOE_SLOTS][2]; /* W4A4: [token x KC + k-step] its 4 k-blocks of codes */
    uint32_t raw_s[MOE_NB][8 * MOE_SLOTS]; /* W4A4: their 4 scales */
    unsigned long long full[MOE_NB], empty[MOE_NB]; /* mbarriers of the buffers */
} moe_stage;

typedef struct moe_smem {
    uint32_t lut[256];  /* W4A4: a code byte -> bf16x2 of its two e2m1 values */
    long long aoff[MOE_TOK]; /* activation row of each token of the chunk x K (elements) */
    const char *arow[MOE_TOK]; /* W4A16: that row's address */
    int drow[MOE_TOK];       /* its pair (output row) */
    moe_walk walk;           /* warp 0's place in the unit list, kept across units */
    int unit[7];        /* expert, chunk, row block, split, global chunk, tokens, first row */
    int cfg[2];         /* K splits, k-steps per split */
    long long units;
    int last;
} moe_smem;

/* ---- device helpers ----------------------------------------------------------------- */

static __device__ __forceinline__ void mma_bf16_16816(float *c, uint32_t a0, uint32_t a1,
                                                      uint32_t a2, uint32_t a3, uint32_t b0,
                                                      uint32_t b1)
{
    /* volatile: keeps the MMAs in order with the volatile weight loads, so the
     * register ring stays as deep as written (not all loads hoisted) */
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* 16 bytes global -> shared, asynchronous; src_bytes 0 writes zeros */
static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes)
                 : "memory");
}

static __device__ __forceinline__ void cp_async8(void *smem, const void *gmem, int src_bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes)
                 : "memory");
}

static __device__ __forceinline__ void cp_async4(void *smem, const void *gmem, int src_bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes)
                 : "memory");
}

/* the stage buffers' mbarriers (wgmma.cuh's helpers take shared addresses) */
static __device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void red_add4(float *p, float4 v)
{
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y),
                 "f"(v.z), "f"(v.w)
                 : "memory");
}

/* bf16 bits of an E2M1 code's value (normal bf16: the activation table) */
static __device__ __forceinline__ uint32_t e2m1_bf16_bits(uint32_t c)
{
    const uint32_t mag = c & 7u;
    const uint32_t bits = mag == 0 ? 0u : mag == 1 ? 0x3F00u : 0x3F80u + ((mag - 2u) << 6);
    return bits | ((c & 8u) << 12);
}

/* ---- work units ----------------------------------------------------------------------- */

/* K splits for the grid: the count minimising waves x (k-steps per split + a
 * unit's start-up), among splits of whole stages; ties go to fewer splits.
 * Warp 0, every lane alike on return: lane l weighs splits l + 1 and l + 33
 * (MOE_MAX_SPLITS <= 64), then a warp minimum of (cost, splits), so the
 * choice costs one lane's arithmetic, not a loop of 64-bit divisions that
 * every block's other warps would wait for at the kernel's start. */
static __device__ void moe_choose_splits(const moe_params &p, int chunks, int grid, int lane,
                                         int *S_out, int *kper_out)
{
    static_assert(MOE_MAX_SPLITS <= 64, "two candidate split counts a lane");
    const long long u1 = (long long)chunks * p.RB;
    unsigned long long best = ~0ull;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int s = lane + 1 + 32 * h;
        if (s > p.max_splits && s > 1) continue;
        int kper = ((p.KS + s - 1) / s + MOE_KC_MAX - 1) / MOE_KC_MAX * MOE_KC_MAX;
        /* one split streams all K (not rounded to stages) */
        long long cost = (u1 + grid - 1) / grid * (long long)(p.KS + MOE_SPLIT_OVERHEAD_KS);
        if (s > 1) {
            if ((p.KS + kper - 1) / kper != s) continue; /* every split non-empty */
            cost = (u1 * s + grid - 1) / grid * (long long)(kper + MOE_SPLIT_OVERHEAD_KS);
        }
        if (s == p.force_splits) cost = 0;
        const unsigned long long key = ((unsigned long long)cost << 7) | (unsigned)s;
        best = key < best ? key : best;
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        const unsigned long long o = __shfl_xor_sync(0xffffffffu, best, d);
        best = o < best ? o : best;
    }
    const int s = (int)(best & 127u);
    *S_out = s;
    *kper_out = ((p.KS + s - 1) / s + MOE_KC_MAX - 1) / MOE_KC_MAX * MOE_KC_MAX;
}

/* ---- activation stages --------------------------------------------------------------- */

/* Start staging k-steps [kc, kc + KC) of the chunk's NT token tiles into
 * buffer buf, all by cp.async (no registers held over the loop; zeros for k >=
 * K). W4A16: 16-byte pieces (8 k) straight into the buffer, KC / 4 x NT a
 * thread: k (tid % 32) * 8 of each 4 k-steps of token 8 n + tid / 32,
 * coalesced along k, branch-free (tokens past the chunk's get zeros); the
 * buffer's full barrier counts the thread's arrival when its copies land.
 * W4A4: one k-step (4 k-blocks) of token tid / KC a thread (the first 8 NT x
 * KC threads), codes and, when they are one aligned word (scales4), scales
 * into raw[buf]; moe_fill_finish decodes them. One cp.async group a call in
 * both modes. */
template <int NT>
static __device__ __forceinline__ void moe_fill_issue(const moe_params &p, const moe_smem &sm,
                                                      moe_stage &st, int buf, int kc, int ntok,
                                                      int tid)
{
    constexpr int KC = MOE_KCN(NT);
    if (p.w4a16) {
        const int rem = tid & 31, g = tid >> 5;
        const int ksr = rem >> 3, tt = (rem >> 1) & 3, h = rem & 1;
#pragma unroll
        for (int q = 0; q < KC / 4; q++) {
            const int k0 = (kc + 4 * q) * 64 + rem * 8;
            const unsigned kofs = k0 < p.K ? 2u * (unsigned)k0 : 0u; /* bytes into the row */
            uint4 *dst = &st.u.act[buf][(4 * q + ksr) * NT][h][g * 4 + tt];
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const int m = 8 * n + g;
                cp_async16(dst + n * (2 * 32), sm.arow[m] + kofs, m < ntok && k0 < p.K ? 16 : 0);
            }
        }
        wg_cp_mbar_arrive(smem_addr(&st.full[buf]));
    } else {
        const int m = tid / KC, ksr = tid % KC, kb0 = (kc + ksr) * 4;
        if (tid < 8 * NT * KC && m < ntok) {
            const long long off = sm.aoff[m]; /* row x K: codes at off / 2, scales off / 16 */
            const uint8_t *codes = p.a_codes + off / 2;
            uint8_t *dst = (uint8_t *)&st.raw[buf][tid][0];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int kb = kb0 + j;
                cp_async8(dst + 8 * j, codes + (size_t)(kb < p.KB ? kb : 0) * 8, kb < p.KB ? 8 : 0);
            }
            if (p.scales4)
                cp_async4(&st.raw_s[buf][tid], p.a_scales + off / 16 + (kb0 < p.KB ? kb0 : 0),
                          kb0 < p.KB ? 4 : 0);
        }
    }
    wg_cp_commit();
}

/* W4A4: finish a stage whose copies are complete (the caller waited for its
 * group): decode this thread's k-step (byte table x scale, exact) into the
 * buffer, then arrive on its full barrier (every thread, with work or not). */
template <int NT>
static __device__ __forceinline__ void moe_fill_finish(const moe_params &p, const moe_smem &sm,
                                                       moe_stage &st, int buf, int kc, int ntok,
                                                       int tid)
{
    constexpr int KC = MOE_KCN(NT);
    const int m = tid / KC, ksr = tid % KC, kb0 = (kc + ksr) * 4;
    if (tid < 8 * NT * KC && m < ntok) {
        uint32_t sraw;
        if (p.scales4) {
            sraw = st.raw_s[buf][tid];
        } else { /* scales not 4-byte aligned: byte loads */
            const uint8_t *sp = p.a_scales + sm.aoff[m] / 16;
            sraw = 0;
            for (int j = 0; j < 4; j++)
                if (kb0 + j < p.KB) sraw |= (uint32_t)__ldg(sp + kb0 + j) << (8 * j);
        }
        const uint4 c0 = st.raw[buf][tid][0], c1 = st.raw[buf][tid][1];
        const uint32_t c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
#pragma unroll
        for (int j = 0; j < 4; j++) { /* k-block kb0 + j: lane t = j of row g = m % 8 */
            const uint32_t sb =
                bf2_mul(((((sraw >> (8 * j)) & 0x7Fu) * 0x10001u) << 4), BF16X2_2P120);
            uint32_t v[8];
#pragma unroll
            for (int b = 0; b < 8; b++)
                v[b] = bf2_mul(sm.lut[(c[2 * j + (b >> 2)] >> (8 * (b & 3))) & 0xFFu], sb);
            const int lane = (m & 7) * 4 + j;
            st.u.act[buf][ksr * NT + (m >> 3)][0][lane] = make_uint4(v[0], v[1], v[2], v[3]);
            st.u.act[buf][ksr * NT + (m >> 3)][1][lane] = make_uint4(v[4], v[5], v[6], v[7]);
        }
    }
    wg_mbar_arrive(smem_addr(&st.full[buf]));
}

/* ---- the streaming loop ----------------------------------------------------------------- */

/* Ring slot u <- k-step ks of the warp's tiles (codes; scales on even slots).
 * Past the unit's last k-step it re-reads that step (an L2 hit: the stage is
 * zero there, so the values do not matter), so the loop has no branches.
 * cb / sb: the tiles' streams at the lane. */
static __device__ __forceinline__ void moe_load(uint4 (&wq)[MOE_RING][MOE_RT],
                                                uint32_t (&wsr)[2][MOE_RT], int u,
                                                const uint4 *const (&cb)[MOE_RT],
                                                const uint32_t *const (&sb)[MOE_RT], int ks,
                                                int ksB)
{
    const int kl = min(ks, ksB - 1);
#pragma unroll
    for (int i = 0; i < MOE_RT; i++) {
        wq[u][i] = ldg_stream16(cb[i] + (size_t)kl * 32);
        if ((u & 1) == 0) wsr[u >> 1][i] = ldg_stream4(sb[i] + (size_t)(kl >> 1) * 32);
    }
}

/* One k-step (ring slot u) of the warp for NT token tiles: decode, scale, MMA
 * against the staged token fragments of the k-step, act[token tile][half][lane]. */
template <int NT>
static __device__ __forceinline__ void moe_kstep(const uint4 (&wq)[MOE_RING][MOE_RT],
                                                 const uint32_t (&wsr)[2][MOE_RT],
                                                 uint32_t (&sodd)[MOE_RT], int u,
                                                 const uint4 (*act)[2][32], int lane,
                                                 float (&acc)[MOE_RT][NT][4])
{
    uint32_t sc[MOE_RT];
#pragma unroll
    for (int i = 0; i < MOE_RT; i++) {
        if ((u & 1) == 0) {
            uint32_t ev, od;
            scale_pair(wsr[u >> 1][i], &ev, &od);
            sc[i] = ev;
            sodd[i] = od;
        } else {
            sc[i] = sodd[i];
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        uint4 bq[NT];
#pragma unroll
        for (int n = 0; n < NT; n++) bq[n] = act[n][h][lane];
#pragma unroll
        for (int i = 0; i < MOE_RT; i++) {
            uint32_t pg[4], p8[4];
            fp4_nib_bf16_pairs(h ? wq[u][i].y : wq[u][i].x, pg);
            fp4_nib_bf16_pairs(h ? wq[u][i].w : wq[u][i].z, p8);
#pragma unroll
            for (int r = 0; r < 4; r++) {
                pg[r] = bf2_mul_lo(pg[r], sc[i]);
                p8[r] = bf2_mul_hi(p8[r], sc[i]);
            }
#pragma unroll
            for (int jj = 0; jj < 2; jj++)
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const uint32_t b0 = jj ? bq[n].z : bq[n].x, b1 = jj ? bq[n].w : bq[n].y;
                    mma_bf16_16816(acc[i][n], pg[2 * jj], p8[2 * jj], pg[2 * jj + 1],
                                   p8[2 * jj + 1], b0, b1);
                }
        }
    }
}

/* Warp 0: the chunk's token rows (grouped rows r0 .. r0 + ntok - 1): each
 * one's pair (its output row) and activation row. Tokens past the chunk's:
 * row 0, copied as zeros and never stored. */
static __device__ __forceinline__ void moe_token_rows(const moe_params &p, moe_smem &sm, int r0,
                                                      int ntok, int lane)
{
    const int pair = lane < ntok ? p.pair_index[r0 + lane] : 0;
    sm.drow[lane] = pair;
    sm.aoff[lane] = (long long)(p.a_per_pair ? pair : pair / p.top_k) * p.K;
    sm.arow[lane] = (const char *)(p.a_bf16 + sm.aoff[lane]);
}

/* The block's sums of one unit (NT token tiles, k-steps [ksA, ksB) of the warp's
 * tiles) into st.u.tile[token][row]: the weight ring, the staged tokens, the
 * loop. Ends with the tile written and the block synchronised. */
template <int NT>
static __device__ __forceinline__ void moe_unit_sums(const moe_params &p, moe_smem &sm,
                                                     moe_stage &st, int ksA, int ksB, int r0,
                                                     int ntok,
                                                     const uint4 *const (&cb)[MOE_RT],
                                                     const uint32_t *const (&sb)[MOE_RT],
                                                     int tid, unsigned &g0)
{
    constexpr int KC = MOE_KCN(NT);
    static_assert(KC * NT <= MOE_SLOTS && KC % 4 == 0 && KC <= MOE_KC_MAX, "stage geometry");
    const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    float acc[MOE_RT][NT][4];
#pragma unroll
    for (int i = 0; i < MOE_RT; i++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][n][q] = 0.0f;

    /* the weight ring first (its loads take longest), then the token rows,
     * then the first stages.
     * Stage i of the unit is global stage g0 + i: buffer (g0 + i) % MOE_NB,
     * its barriers' phase (g0 + i) / MOE_NB. The buffers' earlier users (the
     * previous unit's stages) are done: the unit starts after a barrier. */
    uint4 wq[MOE_RING][MOE_RT];
    uint32_t wsr[2][MOE_RT], sodd[MOE_RT];
#pragma unroll
    for (int s = 0; s < MOE_RING - 1; s++) moe_load(wq, wsr, s, cb, sb, ksA + s, ksB);
    /* the chunk's token rows, read while the weights are on their way */
    if (warp == 0) moe_token_rows(p, sm, r0, ntok, lane);
    __syncthreads();
    const int NS = (ksB - ksA + KC - 1) / KC;
#pragma unroll
    for (int j = 0; j < MOE_NB - 1; j++) {
        if (j < NS)
            moe_fill_issue<NT>(p, sm, st, (g0 + j) % MOE_NB, ksA + j * KC, ntok, tid);
        else
            wg_cp_commit(); /* one group a stage, for the waits' counts */
    }
    if (!p.w4a16) {
        wg_cp_wait<MOE_NB - 2>();
        moe_fill_finish<NT>(p, sm, st, g0 % MOE_NB, ksA, ntok, tid);
    }

    /* No CTA barrier in the loop: a warp may run up to a stage ahead of the
     * slowest (full barriers: the stage's tokens landed; empty: every warp
     * is done with the buffer that the next copies overwrite). */
    for (int i = 0; i < NS; i++) {
        const unsigned gi = g0 + (unsigned)i;
        const int buf = (int)(gi % MOE_NB), kc = ksA + i * KC;
        if (!p.w4a16 && i + 1 < NS) { /* W4A4: decode stage i + 1 (one newer group) */
            wg_cp_wait<MOE_NB - 3>();
            moe_fill_finish<NT>(p, sm, st, (int)((gi + 1) % MOE_NB), kc + KC, ntok, tid);
        }
        wg_mbar_wait(smem_addr(&st.full[buf]), (gi / MOE_NB) & 1u);
#pragma unroll
        for (int s = 0; s < KC; s++) {
            moe_load(wq, wsr, (s + MOE_RING - 1) % MOE_RING, cb, sb, kc + s + MOE_RING - 1, ksB);
            moe_kstep<NT>(wq, wsr, sodd, s % MOE_RING, &st.u.act[buf][s * NT], lane, acc);
        }
        wg_mbar_arrive(smem_addr(&st.empty[buf]));
        if (i + MOE_NB - 1 < NS) { /* into the buffer of stage i - 1 */
            if (i >= 1)
                wg_mbar_wait(smem_addr(&st.empty[(gi - 1) % MOE_NB]), ((gi - 1) / MOE_NB) & 1u);
            moe_fill_issue<NT>(p, sm, st, (int)((gi + MOE_NB - 1) % MOE_NB),
                               kc + (MOE_NB - 1) * KC, ntok, tid);
        } else {
            wg_cp_commit();
        }
    }
    g0 += (unsigned)NS;
    __syncthreads(); /* every warp is done with the buffers: the tile overlays them */

    /* sums -> shared tile [token][row] (the stages are free after the barrier) */
#pragma unroll
    for (int i = 0; i < MOE_RT; i++)
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int row = warp * (16 * MOE_RT) + 16 * i + g, tok = 8 * n + 2 * t;
            st.u.tile[tok][row] = acc[i][n][0];
            st.u.tile[tok + 1][row] = acc[i][n][1];
            st.u.tile[tok][row + 8] = acc[i][n][2];
            st.u.tile[tok + 1][row + 8] = acc[i][n][3];
        }
    __syncthreads();
}

/* ---- the epilogue ------------------------------------------------------------------------ */

/* Split K: add the block's tile into the workspace rows of its grouped rows; the
 * last block of the tile writes D and re-zeroes the rows and the counter. */
static __device__ void moe_splitk_epilogue(const moe_params &p, moe_smem &sm, const moe_stage &st,
                                           int S, int r0,
                                           int ntok, int n0, unsigned *counter, float alpha,
                                           int tid)
{
    for (int idx = tid; idx < ntok * (MOE_ROWS / 4); idx += MOE_THREADS) {
        const int m = idx / (MOE_ROWS / 4), c = (idx % (MOE_ROWS / 4)) * 4;
        if (n0 + c >= p.N) continue;
        red_add4(p.ws + (size_t)(r0 + m) * p.nw + n0 + c, *(const float4 *)&st.u.tile[m][c]);
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) sm.last = atomicAdd(counter, 1u) == (unsigned)(S - 1);
    __syncthreads();
    if (!sm.last) return;
    __threadfence();
    for (int idx = tid; idx < ntok * (MOE_ROWS / 8); idx += MOE_THREADS) {
        const int m = idx / (MOE_ROWS / 8), c = (idx % (MOE_ROWS / 8)) * 8;
        const int n = n0 + c;
        if (n >= p.N) continue;
        float4 *wp = (float4 *)(p.ws + (size_t)(r0 + m) * p.nw + n);
        float v[8];
        const float4 v0 = __ldcg(wp);
        __stcg(wp, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
        float4 v1 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (n + 4 < p.nw) {
            v1 = __ldcg(wp + 1);
            __stcg(wp + 1, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
        }
        v[0] = v0.x, v[1] = v0.y, v[2] = v0.z, v[3] = v0.w;
        v[4] = v1.x, v[5] = v1.y, v[6] = v1.z, v[7] = v1.w;
        moe_store8(p.d, (size_t)sm.drow[m], p.N, n, v, alpha, p.vec_out);
    }
    if (tid == 0) *counter = 0u;
}

/* ---- the kernel ----------------------------------------------------------------------------- */

__global__ void __launch_bounds__(MOE_THREADS, 2) fp4_sm90_moe_kernel(const moe_params p)
{
    __shared__ __align__(16) moe_smem sm;
    extern __shared__ uint4 moe_dyn[];
    moe_stage &st = *(moe_stage *)moe_dyn;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    if (!p.w4a16)
        sm.lut[tid] = e2m1_bf16_bits(tid & 15u) | (e2m1_bf16_bits((unsigned)tid >> 4) << 16);
    if (tid == 0) {
        for (int b = 0; b < MOE_NB; b++) {
            wg_mbar_init(smem_addr(&st.full[b]), MOE_THREADS);
            wg_mbar_init(smem_addr(&st.empty[b]), MOE_THREADS);
        }
        wg_mbar_init_fence();
        sm.walk.e = 0;
        sm.walk.ubase = 0;
        sm.walk.cbase = 0;
    }
    if (warp == 0) {
        const int chunks = moe_total_chunks(p.off, p.E, MOE_TOK, 0, p.tok_hi, lane);
        int S, kper;
        moe_choose_splits(p, chunks, (int)gridDim.x, lane, &S, &kper);
        if (lane == 0) {
            sm.cfg[0] = S;
            sm.cfg[1] = kper;
            sm.units = (long long)chunks * p.RB * S;
        }
    }
    __syncthreads();
    const int S = sm.cfg[0], kper = sm.cfg[1];
    const long long units = sm.units;
    unsigned gstage = 0; /* stages so far: the buffers' barrier phases */

    for (long long u = blockIdx.x; u < units; u += gridDim.x) {
        /* warp 0 finds the unit; its token rows are read once the weight
         * loads are issued (moe_unit_sums) */
        if (warp == 0) {
            int un[5];
            moe_walk walk = sm.walk;
            moe_find_unit(p.off, p.E, p.RB, S, MOE_TOK, 0, p.tok_hi, u, &walk, lane, un);
            const int r0 = p.off[un[0]] + un[1] * MOE_TOK;
            const int ntok = min(MOE_TOK, p.off[un[0] + 1] - r0);
            __syncwarp(); /* every lane has read sm.walk before lane 0 writes it */
            if (lane == 0) {
                sm.walk = walk;
                for (int q = 0; q < 5; q++) sm.unit[q] = un[q];
                sm.unit[5] = ntok;
                sm.unit[6] = r0;
            }
        }
        __syncthreads();
        const int e = sm.unit[0], rb = sm.unit[2], split = sm.unit[3], cg = sm.unit[4];
        const int ntok = sm.unit[5], nt = (ntok + 7) >> 3, r0 = sm.unit[6];
        const int ksA = split * kper, ksB = min(p.KS, ksA + kper);
        /* the warp's tiles' streams; a tile past the last one re-reads the last
         * (its rows are never stored), so the loop needs no predicates */
        const uint8_t *wb = p.b + (size_t)e * p.expert_stride;
        const uint4 *cb[MOE_RT];
        const uint32_t *sb[MOE_RT];
#pragma unroll
        for (int i = 0; i < MOE_RT; i++) {
            const int tile = min(rb * MOE_BLOCK_TILES + warp * MOE_RT + i, p.tiles - 1);
            cb[i] = (const uint4 *)wb + (size_t)tile * p.KS * 32 + lane;
            sb[i] = (const uint32_t *)(wb + p.codes_bytes) + (size_t)tile * p.KS2 * 32 + lane;
        }

        switch (nt) {
        case 1: moe_unit_sums<1>(p, sm, st, ksA, ksB, r0, ntok, cb, sb, tid, gstage); break;
        case 2: moe_unit_sums<2>(p, sm, st, ksA, ksB, r0, ntok, cb, sb, tid, gstage); break;
        case 3: moe_unit_sums<3>(p, sm, st, ksA, ksB, r0, ntok, cb, sb, tid, gstage); break;
        default: moe_unit_sums<4>(p, sm, st, ksA, ksB, r0, ntok, cb, sb, tid, gstage); break;
        }

        /* the 2^8 of the weights' dequantization */
        const float alpha = p.a_global * p.b_global[e] * 256.0f;
        const int n0 = rb * MOE_ROWS;
        if (S == 1) {
            for (int idx = tid; idx < ntok * (MOE_ROWS / 8); idx += MOE_THREADS) {
                const int m = idx / (MOE_ROWS / 8), c = (idx % (MOE_ROWS / 8)) * 8;
                if (n0 + c < p.N)
                    moe_store8(p.d, (size_t)sm.drow[m], p.N, n0 + c, &st.u.tile[m][c], alpha,
                               p.vec_out);
            }
        } else {
            moe_splitk_epilogue(p, sm, st, S, r0, ntok, n0, p.counters + (size_t)cg * p.RB + rb,
                                alpha, tid);
        }
        __syncthreads();
    }
}

/* W4A4 activations dequantized once into bf16 rows [rows][K] (the streaming
 * kernel then runs its W4A16 loop on them): one thread a 16-value block, so
 * block idx is codes idx * 8, scale idx and output idx * 16 of the row-major
 * operands. Exact (moe_block16_bf16). Nothing when no expert is the
 * streaming kernel's (fewer than tok_hi tokens, at least one). */
__global__ void __launch_bounds__(256) fp4_sm90_moe_dequant_kernel(
    const uint8_t *__restrict__ codes, const uint8_t *__restrict__ scales, long long blocks16,
    const int32_t *__restrict__ off, int E, int tok_hi, uint4 *__restrict__ out)
{
    if (tok_hi < INT_MAX) {
        int found = 0;
        for (int e = threadIdx.x; e < E && !found; e += 256) {
            const int cnt = off[e + 1] - off[e];
            found = cnt > 0 && cnt < tok_hi;
        }
        if (!__syncthreads_or(found)) return;
    }
    const long long idx = (long long)blockIdx.x * 256 + threadIdx.x;
    if (idx >= blocks16) return;
    uint32_t w[8];
    moe_block16_bf16(__ldg((const uint2 *)codes + idx), moe_e4m3_float(__ldg(scales + idx)), w);
    out[2 * idx] = make_uint4(w[0], w[1], w[2], w[3]);
    out[2 * idx + 1] = make_uint4(w[4], w[5], w[6], w[7]);
}

/* out[t, n] = sum_j w[t*k + j] * d[t*k + j, n], j in order; 8 columns a thread. */
__global__ void __launch_bounds__(256) fp4_sm90_moe_combine_kernel(const uint16_t *__restrict__ d,
                                                                   const float *__restrict__ w,
                                                                   float *__restrict__ out,
                                                                   long long T, int k, int N,
                                                                   int vec)
{
    const int groups = (N + 7) / 8;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * groups) return;
    const long long tok = idx / groups;
    const int n = (int)(idx % groups) * 8;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < k; j++) {
        const long long pair = tok * k + j;
        const float wj = __ldg(w + pair);
        const uint16_t *dp = d + (size_t)pair * N + n;
        if (vec) {
            const uint4 raw = __ldg((const uint4 *)dp);
            const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int q = 0; q < 4; q++) {
                acc[2 * q] = fmaf(wj, __uint_as_float(r[q] << 16), acc[2 * q]);
                acc[2 * q + 1] = fmaf(wj, __uint_as_float(r[q] & 0xFFFF0000u), acc[2 * q + 1]);
            }
        } else {
            for (int q = 0; q < 8 && n + q < N; q++)
                acc[q] = fmaf(wj, __uint_as_float((uint32_t)__ldg(dp + q) << 16), acc[q]);
        }
    }
    float *op = out + (size_t)tok * N + n;
    if (vec) {
        *(float4 *)op = make_float4(acc[0], acc[1], acc[2], acc[3]);
        *(float4 *)(op + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
    } else {
        for (int q = 0; q < 8 && n + q < N; q++) op[q] = acc[q];
    }
}

/* ---- host side ------------------------------------------------------------------------------- */

static int64_t moe_tiles(int64_t n) { return (n + 15) / 16; }
static int64_t moe_ks(int64_t k) { return (k + 63) / 64; }
static int64_t moe_ks2(int64_t k) { return (moe_ks(k) + 1) / 2; }
static size_t moe_codes_bytes(int64_t n, int64_t k)
{
    return (size_t)moe_tiles(n) * (size_t)moe_ks(k) * 512;
}
static size_t moe_scales_bytes(int64_t n, int64_t k)
{
    return (size_t)moe_tiles(n) * (size_t)moe_ks2(k) * 128;
}
static size_t moe_expert_stride(int64_t n, int64_t k)
{
    return moe_codes_bytes(n, k) + moe_scales_bytes(n, k);
}

/* Sizes the kernel's int indices can hold. */
static int moe_dims_ok(int experts, int top_k, int64_t tokens, int64_t n, int64_t k)
{
    return experts >= 1 && top_k >= 1 && top_k <= experts && tokens >= 1 && n >= 1 && k >= 16 &&
           k % 16 == 0 && n <= INT_MAX / 2 && k <= INT_MAX / 2 &&
           tokens <= (int64_t)INT_MAX / top_k;
}

static int64_t moe_nw(int64_t n) { return (n + 3) / 4 * 4; }

/* The kernels a call runs (FP4_SM90_MOE_STREAM | FP4_SM90_MOE_WIDE) and the
 * token count from which an expert is the wide path's (*wide_from; INT_MAX
 * when the wide kernel does not run). An expert sees a token at most once
 * (a token's top-k experts differ), so below wide_from tokens only the
 * streaming kernel runs; were an expert to see more, it would still be
 * computed, by the streaming kernel, which then takes every expert.
 * FP4_SM90_MOE_PATH=wide or =stream forces one path for all experts, and
 * FP4_SM90_MOE_WIDE_TOKENS=n moves the split (tests and measurements). */
static int moe_paths_for(int64_t tokens, int *wide_from)
{
    const char *force = getenv("FP4_SM90_MOE_PATH");
    if (force && strcmp(force, "wide") == 0) {
        *wide_from = 0;
        return FP4_SM90_MOE_WIDE;
    }
    *wide_from = INT_MAX;
    if (force && strcmp(force, "stream") == 0) return FP4_SM90_MOE_STREAM;
    int from = MOE_WIDE_MIN_TOKENS;
    const char *env_from = getenv("FP4_SM90_MOE_WIDE_TOKENS");
    if (env_from && atoi(env_from) > 0) from = atoi(env_from);
    if (tokens < from) return FP4_SM90_MOE_STREAM;
    *wide_from = from;
    return FP4_SM90_MOE_STREAM | FP4_SM90_MOE_WIDE;
}

static int moe_split_allowed(int top_k, int64_t tokens, int64_t n)
{
    return (size_t)(tokens * top_k) * (size_t)moe_nw(n) * sizeof(float) <= MOE_SPLIT_WS_CAP;
}

static size_t moe_counters_bytes(int experts, int top_k, int64_t tokens, int64_t n)
{
    const int64_t pairs = tokens * top_k;
    const int64_t chunks = (pairs < experts ? pairs : experts) + pairs / MOE_TOK + 1;
    const int64_t rb = (n + MOE_ROWS - 1) / MOE_ROWS;
    return ((size_t)chunks * (size_t)rb * sizeof(unsigned) + 15) / 16 * 16;
}

/* The workspace: the streaming path's split-K counters and sums first (kept
 * zeroed), then, 256-byte aligned, the wide path's activation copy. */
static size_t moe_split_ws_bytes(int paths, int experts, int top_k, int64_t tokens, int64_t n)
{
    if (!(paths & FP4_SM90_MOE_STREAM) || !moe_split_allowed(top_k, tokens, n)) return 0;
    return moe_counters_bytes(experts, top_k, tokens, n) +
           (size_t)(tokens * top_k) * (size_t)moe_nw(n) * sizeof(float);
}

static size_t moe_align256(size_t b) { return (b + 255) / 256 * 256; }

/* W4A4 on the streaming path: the activations dequantized once by a prepass
 * (fp4_sm90_moe_dequant_kernel), or in every block that stages them (each
 * token row again for each row block of each of its top-k experts: 128 times
 * at GLM-5 gate_up). The prepass pays where rows are shared by the top-k
 * (a_per_pair == 0, top_k > 1) and experts average 8 to 39 pairs, so that most run on
 * the streaming path (on an H100, GLM-5 gate_up: 4% faster at 16 pairs an
 * expert, even at 1 and 4; at T = 1 its launch costs 2.7 us of 47; down, one
 * row a pair, even at 16). FP4_SM90_MOE_PREPASS=on or =off forces it (tests
 * and measurements). */
#define MOE_PREPASS_MIN_PAIRS_PER_EXPERT 8
static int moe_prepass_for(int paths, int w4a16, int experts, int top_k, int64_t tokens,
                           int a_per_pair)
{
    if (w4a16 || !(paths & FP4_SM90_MOE_STREAM)) return 0;
    const char *force = getenv("FP4_SM90_MOE_PREPASS");
    if (force && strcmp(force, "on") == 0) return 1;
    if (force && strcmp(force, "off") == 0) return 0;
    const int64_t pairs = tokens * top_k;
    return !a_per_pair && top_k > 1 &&
           pairs >= (int64_t)MOE_PREPASS_MIN_PAIRS_PER_EXPERT * experts &&
           pairs < (int64_t)MOE_WIDE_MIN_TOKENS * experts;
}

static size_t moe_prepass_bytes(int prepass, int top_k, int64_t tokens, int64_t k, int a_per_pair)
{
    return prepass ? (size_t)(a_per_pair ? tokens * top_k : tokens) * (size_t)k * 2 : 0;
}

/* The optional combine of D into d_combined (moe.h). */
static fp4_status moe_combine(const fp4_sm90_moe_args *a, cudaStream_t stream, fp4_err *err)
{
    if (a->route_weights) {
        const int vec = a->n % 8 == 0 && ((uintptr_t)a->d & 15) == 0 &&
                        ((uintptr_t)a->d_combined & 15) == 0;
        const long long threads = (long long)a->tokens * ((a->n + 7) / 8);
        const long long blocks = (threads + 255) / 256;
        if (blocks > INT_MAX)
            return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 moe: combine grid too large");
        fp4_sm90_moe_combine_kernel<<<(unsigned)blocks, 256, 0, stream>>>(
            a->d, a->route_weights, a->d_combined, (long long)a->tokens, a->top_k, (int)a->n, vec);
        FP4_CUDA_LAUNCH_TRY(err);
    }
    return FP4_OK;
}

extern "C" {

size_t fp4_sm90_moe_packed_size(int experts, int64_t n, int64_t k)
{
    if (experts < 1 || n < 1 || k < 16 || k % 16) return 0;
    return (size_t)experts * moe_expert_stride(n, k);
}

/* Per expert: codes [tile][ks][lane] 16 bytes: row 16 tile + g's k-block 4 ks + t
 * as two bf16-layout words (k 0..7, 8..15), then row + 8's; scales [tile][ks /
 * 2][lane] 4 bytes: (row g, even ks), (row g, odd), (row g + 8, even), (row g +
 * 8, odd). Rows >= n and k >= K are zero. */
fp4_status fp4_sm90_moe_pack(const fp4_matrix *w, int experts, void *host_out, float *globals_out,
                             fp4_err *err)
{
    if (!w || !host_out || !globals_out || experts < 1)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 moe pack: NULL argument or no experts");
    const int64_t N = w[0].rows, K = w[0].cols;
    for (int e = 0; e < experts; e++) {
        if (!w[e].codes || !w[e].scales)
            return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 moe pack: expert %d has no data", e);
        if (w[e].rows != N || w[e].cols != K)
            return fp4_fail(err, FP4_ERR_SHAPE,
                            "fp4-sm90 moe pack: expert %d is %lldx%lld, expert 0 %lldx%lld", e,
                            (long long)w[e].rows, (long long)w[e].cols, (long long)N, (long long)K);
    }
    fp4_status st = fp4_check_dims(N, K, err);
    if (st != FP4_OK) return st;
    if (N > INT_MAX / 2 || K > INT_MAX / 2)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 moe pack: %lldx%lld is too large",
                        (long long)N, (long long)K);

    /* code byte q (codes 2q, 2q+1 of a word) -> its bits in the packed word */
    uint32_t tab[4][256];
    for (int q = 0; q < 4; q++)
        for (int b = 0; b < 256; b++) {
            uint8_t c[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            c[2 * q] = (uint8_t)(b & 15);
            c[2 * q + 1] = (uint8_t)(b >> 4);
            tab[q][b] = fp4_nib_bf16_pack(c);
        }
    const int64_t KS = moe_ks(K), KS2 = moe_ks2(K), KB = K / 16, tiles = moe_tiles(N);
    const size_t stride = moe_expert_stride(N, K), cbytes = moe_codes_bytes(N, K);
    uint8_t *out = (uint8_t *)host_out;
    for (int e = 0; e < experts; e++) {
        uint32_t *codes = (uint32_t *)(out + (size_t)e * stride);
        uint8_t *scales = out + (size_t)e * stride + cbytes;
        memset(codes, 0, stride);
        globals_out[e] = w[e].global_scale;
        for (int64_t tile = 0; tile < tiles; tile++)
            for (int64_t ks = 0; ks < KS; ks++)
                for (int lane = 0; lane < 32; lane++) {
                    const int g = lane >> 2, tt = lane & 3;
                    const int64_t kb = 4 * ks + tt;
                    if (kb >= KB) continue;
                    uint32_t *dst = codes + (((size_t)tile * (size_t)KS + (size_t)ks) * 32 + (size_t)lane) * 4;
                    uint8_t *sdst = scales + (((size_t)tile * (size_t)KS2 + (size_t)(ks / 2)) * 32 +
                                              (size_t)lane) * 4;
                    for (int h = 0; h < 2; h++) {
                        const int64_t row = 16 * tile + g + 8 * h;
                        if (row >= N) continue;
                        const uint8_t *src = w[e].codes + row * (K / 2) + kb * 8;
                        for (int word = 0; word < 2; word++)
                            dst[2 * h + word] = tab[0][src[4 * word]] | tab[1][src[4 * word + 1]] |
                                                tab[2][src[4 * word + 2]] | tab[3][src[4 * word + 3]];
                        sdst[2 * h + (ks & 1)] = w[e].scales[row * KB + kb];
                    }
                }
    }
    return FP4_OK;
}

size_t fp4_sm90_moe_workspace_size(int experts, int top_k, int64_t tokens, int64_t n, int64_t k,
                                   int a_per_pair, int w4a16)
{
    if (!moe_dims_ok(experts, top_k, tokens, n, k)) return 0;
    int wide_from = 0;
    const int paths = moe_paths_for(tokens, &wide_from);
    size_t end = moe_split_ws_bytes(paths, experts, top_k, tokens, n);
    const int prepass = moe_prepass_for(paths, w4a16, experts, top_k, tokens, a_per_pair);
    if (prepass) end = moe_align256(end) + moe_prepass_bytes(prepass, top_k, tokens, k, a_per_pair);
    if (!(paths & FP4_SM90_MOE_WIDE)) return end;
    return moe_align256(end) + fp4_sm90_moe_wide_ws_size(a_per_pair ? tokens * top_k : tokens, k);
}

size_t fp4_sm90_moe_split_workspace_size(int experts, int top_k, int64_t tokens, int64_t n,
                                         int64_t k)
{
    if (!moe_dims_ok(experts, top_k, tokens, n, k)) return 0;
    int wide_from = 0;
    return moe_split_ws_bytes(moe_paths_for(tokens, &wide_from), experts, top_k, tokens, n);
}

/* moe_paths_for, less the wide kernel where this GPU cannot run it (unless
 * forced: the call then fails as unsupported); the streaming kernel then
 * takes every expert. */
static int moe_paths_here(int64_t tokens, int *wide_from)
{
    const int paths = moe_paths_for(tokens, wide_from);
    if (paths == (FP4_SM90_MOE_STREAM | FP4_SM90_MOE_WIDE) && !fp4_sm90_moe_wide_runs_here()) {
        *wide_from = INT_MAX;
        return FP4_SM90_MOE_STREAM;
    }
    return paths;
}

int fp4_sm90_moe_paths(int experts, int top_k, int64_t tokens, int *wide_from)
{
    int from = INT_MAX;
    const int paths = experts >= 1 && top_k >= 1 && tokens >= 1 ? moe_paths_here(tokens, &from) : 0;
    if (wide_from) *wide_from = from;
    return paths;
}

int fp4_sm90_moe_dequant_prepass(int experts, int top_k, int64_t tokens, int a_per_pair,
                                 int w4a16)
{
    if (experts < 1 || top_k < 1 || tokens < 1) return 0;
    int wide_from = 0;
    return moe_prepass_for(moe_paths_here(tokens, &wide_from), w4a16, experts, top_k, tokens,
                           a_per_pair);
}

fp4_status fp4_sm90_moe_gemm(const fp4_sm90_moe_args *a, cudaStream_t stream, fp4_err *err)
{
    if (!a) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 moe: NULL arguments");
    if (!moe_dims_ok(a->experts, a->top_k, a->tokens, a->n, a->k))
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "fp4-sm90 moe: E %d, top-k %d, T %lld, n %lld, k %lld (want top-k <= E, "
                        "k %% 16 == 0, sizes below 2^30, T*top-k below 2^31)",
                        a->experts, a->top_k, (long long)a->tokens, (long long)a->n,
                        (long long)a->k);
    if (!a->expert_offsets || !a->pair_index || !a->b_packed || !a->b_global || !a->d ||
        (a->w4a16 && !a->a_bf16) || (!a->w4a16 && (!a->a_codes || !a->a_scales)))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 moe: NULL device pointer");
    if (((uintptr_t)a->b_packed & 15) || (a->w4a16 && ((uintptr_t)a->a_bf16 & 15)) ||
        (!a->w4a16 && ((uintptr_t)a->a_codes & 7)) || ((uintptr_t)a->d & 1) ||
        ((uintptr_t)a->workspace & 15))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90 moe: misaligned operand (packed weights, bf16 activations and "
                        "the workspace 16-byte, codes 8-byte aligned)");
    const int combine = a->route_weights != NULL || a->d_combined != NULL;
    if (combine && (!a->route_weights || !a->d_combined))
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "fp4-sm90 moe: route_weights and d_combined come together");
    const size_t ws = fp4_sm90_moe_workspace_size(a->experts, a->top_k, a->tokens, a->n, a->k,
                                                  a->a_per_pair, a->w4a16);
    if (ws && (!a->workspace || a->workspace_bytes < ws))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 moe: needs a %zu-byte workspace", ws);
    int wide_from = INT_MAX;
    const int paths = moe_paths_here(a->tokens, &wide_from);
    const size_t split_ws = fp4_sm90_moe_split_workspace_size(a->experts, a->top_k, a->tokens,
                                                              a->n, a->k);
    /* the workspace: split K's counters and sums, the prepass rows, the wide copy */
    const int prepass =
        moe_prepass_for(paths, a->w4a16, a->experts, a->top_k, a->tokens, a->a_per_pair);
    const size_t pre_off = moe_align256(split_ws);
    const size_t pre_bytes = moe_prepass_bytes(prepass, a->top_k, a->tokens, a->k, a->a_per_pair);
    const size_t wide_off = prepass ? moe_align256(pre_off + pre_bytes) : moe_align256(split_ws);

    moe_params p;
    memset(&p, 0, sizeof p);
    p.a_bf16 = a->a_bf16;
    p.a_codes = a->a_codes;
    p.a_scales = a->a_scales;
    p.a_global = a->w4a16 ? 1.0f : a->a_global;
    p.off = a->expert_offsets;
    p.pair_index = a->pair_index;
    p.b = (const uint8_t *)a->b_packed;
    p.b_global = a->b_global;
    p.d = a->d;
    p.expert_stride = moe_expert_stride(a->n, a->k);
    p.codes_bytes = moe_codes_bytes(a->n, a->k);
    p.E = a->experts;
    p.top_k = a->top_k;
    p.N = (int)a->n;
    p.K = (int)a->k;
    p.KB = (int)(a->k / 16);
    p.KS = (int)moe_ks(a->k);
    p.KS2 = (int)moe_ks2(a->k);
    p.tiles = (int)moe_tiles(a->n);
    p.RB = (int)((a->n + MOE_ROWS - 1) / MOE_ROWS);
    p.nw = (int)moe_nw(a->n);
    p.w4a16 = a->w4a16 != 0;
    p.a_per_pair = a->a_per_pair != 0;
    p.vec_out = a->n % 8 == 0 && ((uintptr_t)a->d & 15) == 0;
    p.scales4 = (a->k / 16) % 4 == 0 && ((uintptr_t)a->a_scales & 3) == 0;
    p.max_splits = 1;
    p.tok_hi = wide_from;
    if (split_ws) {
        p.counters = (unsigned *)a->workspace;
        p.ws = (float *)((char *)a->workspace +
                         moe_counters_bytes(a->experts, a->top_k, a->tokens, a->n));
        const int stages = (p.KS + MOE_KC_MAX - 1) / MOE_KC_MAX;
        p.max_splits = stages < MOE_MAX_SPLITS ? stages : MOE_MAX_SPLITS;
        /* measurement override: FP4_SM90_MOE_SPLITS=n takes n K splits where n
         * splits the K steps into whole stages */
        const char *env_splits = getenv("FP4_SM90_MOE_SPLITS");
        if (env_splits && atoi(env_splits) > 0) p.force_splits = atoi(env_splits);
    }

    if (paths & FP4_SM90_MOE_WIDE) {
        const moe_wide_geom g = {p.expert_stride, p.codes_bytes, p.tiles, p.KS, p.KS2};
        const fp4_status st =
            fp4_sm90_moe_wide_launch(a, &g, wide_from, (char *)a->workspace + wide_off,
                                     a->workspace_bytes - wide_off, stream, err);
        if (st != FP4_OK) return st;
        if (!(paths & FP4_SM90_MOE_STREAM)) return moe_combine(a, stream, err);
    }

    if (prepass) { /* the streaming kernel then reads bf16 rows: its W4A16 loop */
        const long long blocks16 = (long long)(pre_bytes / 32);
        const long long blocks = (blocks16 + 255) / 256;
        if (blocks > INT_MAX)
            return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 moe: dequantization grid too large");
        uint16_t *rows = (uint16_t *)((char *)a->workspace + pre_off);
        fp4_sm90_moe_dequant_kernel<<<(unsigned)blocks, 256, 0, stream>>>(
            a->a_codes, a->a_scales, blocks16, a->expert_offsets, a->experts, wide_from,
            (uint4 *)rows);
        FP4_CUDA_LAUNCH_TRY(err);
        p.a_bf16 = rows;
        p.w4a16 = 1; /* p.a_global keeps A's global scale */
    }

    int dev = 0, sms = 0, per_sm = 0;
    FP4_CUDA_TRY(err, cudaGetDevice(&dev));
    FP4_CUDA_TRY(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    /* above the 48 KB default: set on every call (not a stream operation, so
     * allowed while a graph is being captured) */
    FP4_CUDA_TRY(err, cudaFuncSetAttribute(fp4_sm90_moe_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)sizeof(moe_stage)));
    FP4_CUDA_TRY(err, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fp4_sm90_moe_kernel,
                                                                    MOE_THREADS, sizeof(moe_stage)));
    /* measurement override (tests): blocks per SM */
    const char *env_grid = getenv("FP4_SM90_MOE_BLOCKS_PER_SM");
    if (env_grid && atoi(env_grid) > 0 && atoi(env_grid) < per_sm) per_sm = atoi(env_grid);
    if (per_sm < 1) per_sm = 1;
    fp4_sm90_moe_kernel<<<sms * per_sm, MOE_THREADS, sizeof(moe_stage), stream>>>(p);
    FP4_CUDA_LAUNCH_TRY(err);
    return moe_combine(a, stream, err);
}

} /* extern "C" */
