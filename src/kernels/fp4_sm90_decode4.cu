/* fp4-sm90 "v4-decode": NVFP4 x NVFP4 -> bf16 GEMM for small M on Hopper.
 *
 * Why a fourth kernel. Nsight Compute on the H200 (bench/profile-decode.sh,
 * 16x2048x6144) showed v1 and v3 issue-bound, not memory-bound: v3 executes
 * about 24 K warp instructions per SM at 16 tokens (53 K at 64) with 3.5 warps
 * per scheduler and 9 cycles between a warp's instructions; its clusters of 8
 * fit only 30 at a time (32 needed: a second wave); DRAM throughput 10%.
 * Most of the extra instructions are the per-block token staging (index
 * arithmetic, a float or bit path per element, a barrier) and the reduction
 * through shared memory and DSMEM. v4 removes the staging and the clusters:
 *
 * - Swap AB as in v1/v3 (weights on the 16-row side of mma.sync m16n8k16,
 *   tokens on the 8-wide side), fp16 products (exact, fp4_sm90.h), fp32 sums.
 * - k permutation chosen for contiguity: in a k-step of 64, lane (g, t) owns
 *   k-block 4*ks + t (16 consecutive k, ONE scale) of weight rows g and g+8
 *   and of token g. Its 16 values of a row are two 32-bit words w0 (k 0..7),
 *   w1 (k 8..15); dq_nib2(w, r) yields the pair (k r, k r+4). MMA j of the
 *   k-step takes pairs r = 2(j&1), 2(j&1)+1 of word j>>1, for both operands
 *   (a0/a2: row g, a1/a3: row g+8; b0/b1: token g). So a lane's token
 *   fragment is ONE 8-byte load of A's codes plus one scale byte, straight
 *   from the activation layout: no shared-memory staging.
 * - Packed weights (fp4_sm90_decode4_pack_b): [tile of 16 rows][k-step][lane]
 *   16 bytes (row g's 8 bytes, then row g+8's), [tile][k-step][lane] 2 scale
 *   bytes (row g, row g+8). One 512-byte coalesced load per tile and k-step.
 * - A warp covers RT tiles (16*RT rows: the token conversion is shared by
 *   them) and a contiguous K range of a block's split; loads run D k-steps
 *   ahead in a register ring. 8 warps a block split the block's K range;
 *   grid = row blocks x K splits x token chunks, sized for about two blocks
 *   per SM (one from 32 row blocks up, measured).
 * - Reduction: warps through shared memory (one barrier); K splits with
 *   red.global.add.v4.f32 into an fp32 workspace and a per-tile arrival
 *   counter: the last block writes bf16 D and re-zeroes its workspace tile
 *   and counter (graph-replayable, one launch). One split writes D directly.
 *
 * Instruction budget per warp and k-step (RT = 4, 16 tokens): weights 4 x 16
 * (dq_nib2 + hmul2) ~ 350, tokens 2 x 8 (dq + hmul2) ~ 90, 32 MMAs, ~12 loads:
 * ~490 for 2 KB of codes, about 11.5 K instructions per SM at 16x2048x6144
 * (v3: 24 K).
 * Prediction (H200): 16x2048x6144: ~4.5 us (3.3 us read floor + the issue
 * time not hidden); 16x768x6144 ~3 us; 16x8192x8192 ~12 us;
 * 16x28672x4096 ~19 us; at 64 tokens the token conversion is repeated per
 * warp and grows 4x: ~8-10 us at 64x2048x6144.
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

#define D4_WARPS 8
#define D4_THREADS (32 * D4_WARPS)
#define D4_NPAD 64 /* packed rows are padded to a multiple of 64 (RT <= 4) */
/* Development only (bench/decode-ablate.sh): 1 skips the dequantization and
 * the MMAs (the loaded words are folded into the sums), 2 skips the reduction
 * (warps, K splits, D), 3 both: wrong results, for timing where the time goes. */
#ifndef D4_DEV_ABLATE
#define D4_DEV_ABLATE 0
#endif
#define D4_DEPTH 1 /* k-steps of loads in flight per warp besides the one in use (RT=4:
                     * 2 x 64 B a lane, ~70 KB a SM at 16 warps) */

/* One k-step's operands of one lane: RT weight tiles, their scales, NT token
 * fragments and their scales. */
template <int RT, int NT>
struct d4_slot {
    uint4 w[RT];
    uint32_t ws[RT];
    uint2 q[NT];
    uint32_t qs[NT];
};

template <int RT, int NT>
static __device__ __forceinline__ void d4_load(d4_slot<RT, NT> &s, const uint4 *bq,
                                               const uint16_t *bs, const uint8_t *aq,
                                               const uint8_t *asf, int ks, int KS, int tile0,
                                               int lane, const int *mrow, int KB, int Kbp,
                                               size_t arow_bytes, uint64_t wpol)
{
#pragma unroll
    for (int i = 0; i < RT; i++) {
        const size_t u = ((size_t)(tile0 + i) * KS + ks) * 32 + lane;
        s.w[i] = ldg_stream16_hint(bq + u, wpol); /* the weights: L2 evict-first */
        s.ws[i] = ldg_stream2(bs + u);
    }
    const int kb = ks * 4 + (lane & 3);
#pragma unroll
    for (int n = 0; n < NT; n++) {
        s.q[n] = make_uint2(0, 0);
        s.qs[n] = 0;
        if (mrow[n] >= 0 && kb < KB) {
            s.q[n] = __ldg((const uint2 *)(aq + (size_t)mrow[n] * arow_bytes + (size_t)kb * 8));
            s.qs[n] = __ldg(asf + swz_off(mrow[n], kb, Kbp));
        }
    }
}

template <int RT, int NT>
static __device__ __forceinline__ void d4_math(const d4_slot<RT, NT> &s, float (*acc)[NT][4])
{
    if (D4_DEV_ABLATE & 1) {
#pragma unroll
        for (int i = 0; i < RT; i++)
            acc[i][0][0] += __uint_as_float((s.w[i].x ^ s.w[i].y ^ s.w[i].z ^ s.w[i].w ^ s.ws[i]) &
                                            0x007FFFFFu);
#pragma unroll
        for (int n = 0; n < NT; n++)
            acc[0][n][1] += __uint_as_float((s.q[n].x ^ s.q[n].y ^ s.qs[n]) & 0x007FFFFFu);
        return;
    }
    kperm_kstep_mma<RT, NT>(s.w, s.ws, s.q, s.qs, acc);
}

/* grid (row blocks, K splits, token chunks); block D4_THREADS.
 * bq/bs: packed weights; aq [M, K/2], asf swizzled; ws fp32 [zc*8*NT][Np] and
 * counters [row blocks * zc] (S > 1 only); kper k-steps per split. */
template <int RT, int NT>
__global__ void __launch_bounds__(D4_THREADS, 2)
fp4_sm90_decode_v4(const uint4 *__restrict__ bq, const uint16_t *__restrict__ bs,
                   const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                   __nv_bfloat16 *__restrict__ d, float *__restrict__ ws,
                   unsigned *__restrict__ counters, int M, int N, int K, int KS, int kper, int Np,
                   float alpha_eff)
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

    /* register ring: D4_DEPTH + 1 slots, loads issued D4_DEPTH steps ahead */
    d4_slot<RT, NT> slot[D4_DEPTH + 1];
    const uint64_t wpol = l2_evict_first_policy();
#pragma unroll
    for (int u = 0; u < D4_DEPTH; u++)
        if (w0 + u < w1)
            d4_load<RT, NT>(slot[u], bq, bs, aq, asf, w0 + u, KS, tile0, lane, mrow, KB, Kbp, arow,
                            wpol);
    for (int s = w0; s < w1; s += D4_DEPTH + 1) {
#pragma unroll
        for (int u = 0; u <= D4_DEPTH; u++) {
            const int ks = s + u;
            if (ks < w1) {
                const int nx = ks + D4_DEPTH;
                if (nx < w1)
                    d4_load<RT, NT>(slot[(u + D4_DEPTH) % (D4_DEPTH + 1)], bq, bs, aq, asf, nx, KS,
                                    tile0, lane, mrow, KB, Kbp, arow, wpol);
                d4_math<RT, NT>(slot[u], acc);
            }
        }
    }

    if (D4_DEV_ABLATE & 2) { /* keep the sums alive, write nothing */
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < RT; i++)
#pragma unroll
            for (int n = 0; n < NT; n++) sum += acc[i][n][0] + acc[i][n][1] + acc[i][n][2] + acc[i][n][3];
        if (sum == -1234.5f) d[0] = __float2bfloat16_rn(sum);
        return;
    }
    /* warps -> shared memory: red[warp][tok][row] */
    kperm_acc_to_smem<RT, NT>(acc, red + (size_t)warp * TOK * RS, RS, lane);
    __syncthreads();

    constexpr int C4 = ROWS / 4, E4 = TOK * C4; /* float4 groups of the block tile */
    const int n0 = rb * ROWS;
    for (int e = tid; e < E4; e += D4_THREADS) {
        const int tok = e / C4, c4 = (e - tok * C4) * 4;
        const float4 v = sum_warp_tiles4(red, D4_WARPS, TOK * RS, tok * RS + c4);
        const int m = m0 + tok, n = n0 + c4;
        if (S == 1) {
            if (m < M && n < N) store_bf16x4(d, m, n, N, v, alpha_eff, (N & 3) == 0);
        } else {
            red_add4(ws + (size_t)m * Np + n, v);
        }
    }
    if (S == 1) return;

    splitk_last_block(ws, counters + (size_t)chunk * gridDim.x + rb, d, S, m0, n0, TOK, ROWS, M, N,
                      Np, alpha_eff, &s_last);
}

/* ---- host side ---------------------------------------------------------------------- */

typedef void (*d4_kernel_fn)(const uint4 *, const uint16_t *, const uint8_t *, const uint8_t *,
                             __nv_bfloat16 *, float *, unsigned *, int, int, int, int, int, int,
                             float);

typedef struct d4_cfg {
    int rt, nt;             /* tiles per warp, token tiles per chunk */
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
     * SM, or one when there are 32 row blocks or more: their split sweep on
     * the H200 (bench/results/2026-12-02-h200-s4-dev/call1/splitk-v4-decode.txt)
     * has 16x2048x6144 at 7.68 us with 4 splits against 8.45 with the 6 of
     * two blocks, 64x2048x6144 16.2 with 1 against 17.0 with 2, 16x8192x8192
     * 18.3 with 1 against 19.8 with 2; at N = 768 (12 and 24 row blocks) two
     * blocks stay best (16x768: 6.21 us, 64x768: 10.85) */
    const int64_t units = (int64_t)c->rbs * c->zc * KS;
    const int64_t warps = (int64_t)sms * (c->rbs >= 32 ? 1 : 2) * D4_WARPS;
    int64_t kpw = (units + warps - 1) / warps;
    if (kpw < 1) kpw = 1;
    int64_t kper = kpw * D4_WARPS;
    if (splits > 0) kper = (KS + splits - 1) / splits;
    if (kper > KS) kper = KS;
    c->kper = (int)kper;
    c->S = (int)((KS + kper - 1) / kper); /* every split non-empty */
    c->smem = (size_t)D4_WARPS * (size_t)(8 * c->nt) * (size_t)(16 * c->rt + 4) * sizeof(float);
}

static d4_kernel_fn d4_kernel(int rt, int nt)
{
    if (rt == 4) return nt == 1 ? fp4_sm90_decode_v4<4, 1> : fp4_sm90_decode_v4<4, 2>;
    return fp4_sm90_decode_v4<2, 4>;
}

static size_t d4_counters_bytes(int64_t m, int64_t n)
{
    d4_cfg c;
    d4_plan(m, n, 64, 132, 1, &c);
    return ((size_t)c.rbs * (size_t)c.zc * sizeof(unsigned) + 15) / 16 * 16;
}

extern "C" {

size_t fp4_sm90_decode4_codes_size(int64_t n, int64_t k)
{
    return (size_t)d4_np(n) * (size_t)d4_ks(k) * 32; /* 16 rows x 64 k = 512 bytes a unit */
}

size_t fp4_sm90_decode4_scales_size(int64_t n, int64_t k)
{
    return (size_t)(d4_np(n) / 16) * (size_t)d4_ks(k) * 32 * 2;
}

/* fp32 partial sums [zc * 8 * NT][Np] after the arrival counters. */
size_t fp4_sm90_decode4_ws_size(int64_t m, int64_t n, int64_t k)
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
void fp4_sm90_decode4_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales)
{
    const int64_t N = b->rows, K = b->cols, KS = d4_ks(K), KB = K / 16;
    const int64_t tiles = d4_np(N) / 16, rowb = K / 2;
    memset(codes, 0, fp4_sm90_decode4_codes_size(N, K));
    memset(scales, 0, fp4_sm90_decode4_scales_size(N, K));
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

int fp4_sm90_decode4_fits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    d4_cfg c;
    d4_plan(m, n, k, num_sms, 0, &c);
    return c.zc <= 65535 && c.S <= 65535 && c.rbs <= 0x7fffffff;
}

fp4_status fp4_sm90_decode4_init(fp4_err *err)
{
    (void)err; /* shared memory stays under the 48 KB default (d4_plan) */
    return FP4_OK;
}

fp4_status fp4_sm90_decode4_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    d4_cfg c;
    d4_plan(a->m, a->n, a->k, a->num_sms, a->splits, &c);
    if (c.zc > 65535 || c.S > 65535)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 v4-decode: grid too large");
    if (c.S > 1 && (!a->workspace || a->workspace_bytes < fp4_sm90_decode4_ws_size(a->m, a->n, a->k)))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 v4-decode: workspace missing or too small");
    unsigned *counters = (unsigned *)a->workspace;
    float *ws = a->workspace ? (float *)((char *)a->workspace + d4_counters_bytes(a->m, a->n)) : NULL;
    dim3 grid((unsigned)c.rbs, (unsigned)c.S, (unsigned)c.zc);
    /* both operands carry 2^-7 from the dequantization */
    const float alpha_eff = a->alpha * 16384.0f;
    d4_kernel(c.rt, c.nt)<<<grid, D4_THREADS, c.smem, stream>>>(
        (const uint4 *)a->b_codes, (const uint16_t *)a->b_sf, a->a_codes, a->a_sf,
        (__nv_bfloat16 *)a->d, ws, counters, (int)a->m, (int)a->n, (int)a->k, (int)d4_ks(a->k),
        c.kper, (int)d4_np(a->n), alpha_eff);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

} /* extern "C" */
