/* fp4-sm90 "v6-decode": NVFP4 x NVFP4 -> bf16 GEMM for small M on Hopper.
 *
 * Why a sixth kernel. Nsight Compute on v4 (bench/profile-decode.sh, session
 * 3, bench/results/2026-12-02-h200-s3-dev/) says it is latency- and
 * issue-bound, not memory-bound: DRAM throughput 16% at 16x2048x6144 and 9%
 * at 64x2048x6144, 62% of cycles with no eligible warp, 128 registers (two
 * blocks of 8 warps a SM; the 64-token instance spills), and 680 warp
 * instructions per warp and k-step at 16 tokens, 1142 at 64 where the
 * prediction was about 490 and 360: every warp converts its own token
 * fragments (its K range is its own, so nothing is shared) and computes 64-bit
 * addresses per load; a K split of 1 was as fast as v4's choice at 64 tokens.
 * v6 keeps v4's weight layout and arithmetic and changes the work split:
 *
 * - The 8 warps of a block share ONE K range and own different rows (16 each,
 *   128 a block), so the tokens of that range are dequantized ONCE per block
 *   into shared memory, already in mma.sync B-fragment order, and every warp
 *   reads its fragments with two 16-byte shared loads per token tile and
 *   k-step (v4: 8 bit-trick conversions and 8 multiplies per token tile and
 *   k-step, in every warp). The weight fragment of a k-step then feeds NT
 *   token tiles (up to 8: 64 tokens in one pass, v4 re-streamed the weights
 *   per 32 tokens).
 * - Weight loads run DEPTH k-steps ahead in a register ring, issued before
 *   the token staging so the staging's own loads overlap them; pointers are
 *   advanced, not recomputed.
 * - Split K across blocks as v4: red.global.add.v4.f32 of the block's fp32
 *   tile into a workspace and an arrival counter; the last block writes bf16
 *   D and re-zeroes (splitk_last_block). One split writes D directly.
 * - Token staging capacity: 64 KB of shared memory, i.e. 64 / NT k-steps; a
 *   block whose K range is longer stages it in chunks (one barrier pair each).
 *
 * Instruction budget per warp and k-step (NT token tiles): weights 16
 * dq_nib2 + 16 multiplies + 2 scales ~ 70, tokens 2 NT shared loads, 4 NT
 * MMAs, 2 loads: ~110 at 16 tokens (v4: 680 per 4 tiles = 170 a tile), ~120
 * + 32 MMAs at 64 (v4: 571 a tile). Staging: 64 k x TOK tokens per block and
 * k-step, ~2 instructions an element, shared by 8 warps.
 * Prediction (H200): 16x2048x6144 ~4.5 us (the 3.3 us pure-read floor in a
 * graph plus the reduction), 64x2048x6144 ~6-7 us (mma.sync rate: 805 M
 * multiply-adds in about 3 us), 16x8192x8192 ~11 us.
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

#define D6_WARPS 8
#define D6_THREADS (32 * D6_WARPS)
#define D6_ROWS (16 * D6_WARPS)   /* rows of a block: one 16-row tile per warp */
#define D6_DEPTH 4                /* weight k-steps in flight per warp */
#define D6_STAGE_BYTES (64 * 1024) /* token staging: NT * 1 KB per k-step */

static int64_t d6_np(int64_t n) { return (n + 63) / 64 * 64; } /* v4's row padding */
static int64_t d6_ks(int64_t k) { return (k + 63) / 64; }

/* Token staging, one k-step and token tile n: [half h][lane] uint4, the 8
 * fp16x2 words b[0..7] of lane (g, t) = token 8n + g, k-block 4 ks + t:
 * b[r] = nibbles (r, r + 4) of code word 0, b[4 + r] those of word 1, times
 * the token's scale (v4's k order). Half 0 holds b[0..3], half 1 b[4..7], so
 * a warp's 16-byte loads of one half are contiguous (no bank conflict). */
template <int NT>
static __device__ __forceinline__ void d6_stage(uint4 *stage, const uint8_t *aq,
                                                const uint8_t *asf, int m0, int M, int KB,
                                                int Kbp, size_t arow, int ks_first, int nks)
{
    const int items = nks * NT * 32;
    for (int e = threadIdx.x; e < items; e += D6_THREADS) {
        const int lane = e & 31, n = (e >> 5) % NT, c = (e >> 5) / NT;
        const int m = m0 + 8 * n + (lane >> 2), kb = 4 * (ks_first + c) + (lane & 3);
        uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
        if (m < M && kb < KB) {
            const uint2 q = __ldg((const uint2 *)(aq + (size_t)m * arow + (size_t)kb * 8));
            uint32_t b[8];
            kperm_b_frag(q, sf_pair(__ldg(asf + swz_off(m, kb, Kbp)), 0), b);
            lo = make_uint4(b[0], b[1], b[2], b[3]);
            hi = make_uint4(b[4], b[5], b[6], b[7]);
        }
        uint4 *dst = stage + (size_t)(c * NT + n) * 64;
        dst[lane] = lo;
        dst[32 + lane] = hi;
    }
}

/* grid (row blocks of 128, K splits, token chunks of 8 NT); block D6_THREADS;
 * dynamic shared memory D6_STAGE_BYTES (staging, then the fp32 tile). */
template <int NT>
__global__ void __launch_bounds__(D6_THREADS, 1)
fp4_sm90_decode_v6(const uint4 *__restrict__ bq, const uint16_t *__restrict__ bs,
                   const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                   __nv_bfloat16 *__restrict__ d, float *__restrict__ ws,
                   unsigned *__restrict__ counters, int M, int N, int K, int KS, int kper, int Np,
                   float alpha_eff)
{
    constexpr int TOK = 8 * NT, CHUNK = D6_STAGE_BYTES / (NT * 1024), RS = D6_ROWS + 4;
    extern __shared__ __align__(16) uint4 smem6[];
    __shared__ int s_last;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int rb = blockIdx.x, S = gridDim.y, chunk = blockIdx.z;
    const int m0 = chunk * TOK, n0 = rb * D6_ROWS;
    const int KB = K / 16, Kbp = (KB + 3) / 4 * 4;
    const int ks0 = blockIdx.y * kper, ks1 = min(KS, ks0 + kper);
    const int tile = rb * D6_WARPS + warp;
    const bool has_rows = 16 * tile < Np; /* the last block may reach past the padding */

    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    /* weight ring: k-step ks lives in slot ks % DEPTH */
    const uint4 *wp = bq + ((size_t)tile * KS + ks0) * 32 + lane;
    const uint16_t *sp = bs + ((size_t)tile * KS + ks0) * 32 + lane;
    uint4 wring[D6_DEPTH];
    uint32_t sring[D6_DEPTH];
#pragma unroll
    for (int u = 0; u < D6_DEPTH; u++)
        if (has_rows && ks0 + u < ks1) {
            wring[u] = ldg_stream16(wp + (size_t)u * 32);
            sring[u] = ldg_stream2(sp + (size_t)u * 32);
        }

    for (int c0 = ks0; c0 < ks1; c0 += CHUNK) {
        const int nks = min(CHUNK, ks1 - c0);
        if (c0 != ks0) __syncthreads(); /* every warp is done with the previous chunk */
        d6_stage<NT>(smem6, aq, asf, m0, M, KB, Kbp, (size_t)(K / 2), c0, nks);
        __syncthreads();
        if (!has_rows) continue;
        /* DEPTH divides the unrolled step so ring slots are compile-time */
        for (int cc = 0; cc < nks; cc += D6_DEPTH) {
#pragma unroll
            for (int u = 0; u < D6_DEPTH; u++) {
                const int c = cc + u, ks = c0 + c;
                if (c < nks) {
                    const uint4 w = wring[u];
                    const uint32_t wsc = sring[u];
                    if (ks + D6_DEPTH < ks1) {
                        const size_t off = (size_t)(ks - ks0 + D6_DEPTH) * 32;
                        wring[u] = ldg_stream16(wp + off);
                        sring[u] = ldg_stream2(sp + off);
                    }
                    const uint32_t sg = sf_pair(wsc, 0), sg8 = sf_pair(wsc, 1);
                    uint32_t a[4][4], pg[2][4], p8[2][4];
                    kperm_pairs(w, pg, p8);
#pragma unroll
                    for (int j = 0; j < 4; j++) kperm_a_frag(pg, p8, sg, sg8, j, a[j]);
                    const uint4 *st = smem6 + (size_t)c * NT * 64 + lane;
#pragma unroll
                    for (int n = 0; n < NT; n++) {
                        const uint4 lo = st[n * 64], hi = st[n * 64 + 32];
                        /* MMA j: pairs r0, r0 + 1 of word j >> 1 (lo: word 0, hi: word 1) */
                        mma_f16_16816(acc[n], a[0][0], a[0][1], a[0][2], a[0][3], lo.x, lo.y);
                        mma_f16_16816(acc[n], a[1][0], a[1][1], a[1][2], a[1][3], lo.z, lo.w);
                        mma_f16_16816(acc[n], a[2][0], a[2][1], a[2][2], a[2][3], hi.x, hi.y);
                        mma_f16_16816(acc[n], a[3][0], a[3][1], a[3][2], a[3][3], hi.z, hi.w);
                    }
                }
            }
        }
    }

    /* fp32 tile [tok][row] in the staging memory, then 4-row groups */
    __syncthreads();
    float *red = (float *)smem6;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int row = 16 * warp + g, tok = 8 * n + 2 * t;
        red[tok * RS + row] = acc[n][0];
        red[(tok + 1) * RS + row] = acc[n][1];
        red[tok * RS + row + 8] = acc[n][2];
        red[(tok + 1) * RS + row + 8] = acc[n][3];
    }
    __syncthreads();
    constexpr int C4 = D6_ROWS / 4, E4 = TOK * C4;
    for (int e = threadIdx.x; e < E4; e += D6_THREADS) {
        const int tok = e / C4, c4 = (e - tok * C4) * 4;
        const float4 v = *(const float4 *)(red + (size_t)tok * RS + c4);
        const int m = m0 + tok, n = n0 + c4;
        if (S == 1) {
            if (m < M && n < N) store_bf16x4(d, m, n, N, v, alpha_eff, (N & 3) == 0);
        } else if (n < Np) {
            red_add4(ws + (size_t)m * Np + n, v);
        }
    }
    if (S == 1) return;
    splitk_last_block(ws, counters + (size_t)chunk * gridDim.x + rb, d, S, m0, n0, TOK,
                      min(D6_ROWS, Np - n0), M, N, Np, alpha_eff, &s_last);
}

/* ---- host side ---------------------------------------------------------------------- */

typedef void (*d6_kernel_fn)(const uint4 *, const uint16_t *, const uint8_t *, const uint8_t *,
                             __nv_bfloat16 *, float *, unsigned *, int, int, int, int, int, int,
                             float);

typedef struct d6_cfg {
    int nt;               /* token tiles of 8 per chunk */
    int rbs, S, kper, zc; /* row blocks, K splits, k-steps per split, token chunks */
} d6_cfg;

static int d6_nt(int64_t m) { return m <= 8 ? 1 : m <= 16 ? 2 : m <= 32 ? 4 : 8; }

static void d6_plan(int64_t m, int64_t n, int64_t k, int num_sms, int splits, d6_cfg *c)
{
    const int64_t KS = d6_ks(k);
    const int sms = num_sms > 0 ? num_sms : 132;
    memset(c, 0, sizeof *c);
    c->nt = d6_nt(m);
    c->zc = (int)((m + 8 * c->nt - 1) / (8 * c->nt));
    c->rbs = (int)((d6_np(n) + D6_ROWS - 1) / D6_ROWS);
    /* about two blocks a SM at up to 16 tokens, one above (the K splits'
     * partial tiles grow with the tokens: S * M * N * 4 bytes of reductions) */
    const int64_t want = (int64_t)sms * (c->nt <= 2 ? 2 : 1);
    int64_t s = splits > 0 ? splits : (want + (int64_t)c->rbs * c->zc - 1) / ((int64_t)c->rbs * c->zc);
    if (s < 1) s = 1;
    if (s > KS) s = KS;
    const int64_t kper = (KS + s - 1) / s;
    c->kper = (int)kper;
    c->S = (int)((KS + kper - 1) / kper); /* every split non-empty */
}

static d6_kernel_fn d6_kernel(int nt)
{
    switch (nt) {
    case 1: return fp4_sm90_decode_v6<1>;
    case 2: return fp4_sm90_decode_v6<2>;
    case 4: return fp4_sm90_decode_v6<4>;
    default: return fp4_sm90_decode_v6<8>;
    }
}

static size_t d6_counters_bytes(int64_t m, int64_t n)
{
    d6_cfg c;
    d6_plan(m, n, 64, 132, 1, &c);
    return ((size_t)c.rbs * (size_t)c.zc * sizeof(unsigned) + 15) / 16 * 16;
}

extern "C" {

/* fp32 partial sums [zc * 8 * NT][Np] after the arrival counters. */
size_t fp4_sm90_decode6_ws_size(int64_t m, int64_t n, int64_t k)
{
    (void)k; /* the partial sums do not depend on K */
    const int nt = d6_nt(m);
    const size_t rows = (size_t)((m + 8 * nt - 1) / (8 * nt)) * (size_t)(8 * nt);
    return d6_counters_bytes(m, n) + rows * (size_t)d6_np(n) * sizeof(float);
}

int fp4_sm90_decode6_fits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    d6_cfg c;
    d6_plan(m, n, k, num_sms, 0, &c);
    return c.zc <= 65535 && c.S <= 65535;
}

fp4_status fp4_sm90_decode6_init(fp4_err *err)
{
    const d6_kernel_fn fns[] = {d6_kernel(1), d6_kernel(2), d6_kernel(4), d6_kernel(8)};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        FP4_CUDA_TRY(err, cudaFuncSetAttribute(fns[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               D6_STAGE_BYTES));
    return FP4_OK;
}

fp4_status fp4_sm90_decode6_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    d6_cfg c;
    d6_plan(a->m, a->n, a->k, a->num_sms, a->splits, &c);
    if (c.zc > 65535 || c.S > 65535)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 v6-decode: grid too large");
    if (c.S > 1 && (!a->workspace || a->workspace_bytes < fp4_sm90_decode6_ws_size(a->m, a->n, a->k)))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 v6-decode: workspace missing or too small");
    unsigned *counters = (unsigned *)a->workspace;
    float *ws = a->workspace ? (float *)((char *)a->workspace + d6_counters_bytes(a->m, a->n)) : NULL;
    dim3 grid((unsigned)c.rbs, (unsigned)c.S, (unsigned)c.zc);
    /* both operands carry 2^-7 from the dequantization */
    const float alpha_eff = a->alpha * 16384.0f;
    d6_kernel(c.nt)<<<grid, D6_THREADS, D6_STAGE_BYTES, stream>>>(
        (const uint4 *)a->b_codes, (const uint16_t *)a->b_sf, a->a_codes, a->a_sf,
        (__nv_bfloat16 *)a->d, ws, counters, (int)a->m, (int)a->n, (int)a->k, (int)d6_ks(a->k),
        c.kper, (int)d6_np(a->n), alpha_eff);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

} /* extern "C" */
