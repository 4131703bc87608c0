/* fp4-sm90 "v3-decode": NVFP4 x NVFP4 -> bf16 GEMM for small M on Hopper.
 *
 * Same data layout as v1-decode (swap AB, mma.sync m16n8k16 fp16 -> fp32, the
 * weights packed by fp4_sm90_decode_pack_b: one 16-byte load per lane feeds 4
 * MMAs of a 16-row tile and a k-step of 64; one scale word per lane per row
 * pair and k-step), but the time line of a block is rebuilt. Where v1 lost its
 * time (16x2048x6144: 11.7 us for a 3.3 us read floor), by reading v1:
 *   a. the weight loads were issued only after the token slice had been
 *      loaded, converted (a float path of ~15 instructions per element) and a
 *      __syncthreads: two dependent DRAM round trips plus ~2 us of ALU in
 *      series;
 *   b. split-K partials went through fp32 float4 atomics in an L2 workspace,
 *      a __threadfence, a counter, and a last block that re-read the workspace:
 *      another chain of L2 round trips at the tail, and S * M * N * 4 bytes of
 *      atomics (4.7 MB at M = 64);
 *   c. at M = 64, 161 registers and 92 KB of shared memory left 1 block
 *      (8 warps) per SM, one batch of loads at a time: few bytes in flight.
 * v3:
 *   1. Every warp issues its first D units of weight loads (D k-steps of its
 *      row pair: 2 x 16 B codes + 4 B scales a lane) BEFORE anything else; at
 *      16x2048x6144 that is all of its weights (3 k-steps), ~24 KB a block, in
 *      flight while the tokens are converted. The main loop is a rolling
 *      register pipeline (compute unit u, then load unit u + D into its slot).
 *   2. Token conversion with the weights' bit trick: prmt + 2 shifts + 2 ands
 *      + or + one f16x2 multiply per 2 values (value * 2^-14 as an fp16
 *      pattern, times scale * 2^7: exact, see fp4_sm90.h); both operands now
 *      carry 2^-7, alpha * 2^14 undoes it.
 *   3. Split K across the blocks of a thread-block CLUSTER (grid.y = S <= 8 =
 *      the cluster's y size): every block leaves its partial tile (per K-part
 *      warp) in its own shared memory, one cluster barrier, then block r of
 *      the cluster sums slice r of the tile over all S blocks through
 *      distributed shared memory (ld.shared::cluster) and writes bf16 D; a
 *      second cluster barrier keeps the smem alive until every peer has read
 *      it. No workspace, no atomics, no counters, graph-replayable.
 *   4. Block shapes (compile-time): RP row pairs x KP K-part warps, NT token
 *      tiles of 8 (a chunk of 8*NT tokens; grid.z walks the chunks):
 *        (RP, KP) = (2, 4): 64 rows, 8 warps (default);
 *                   (1, 8): 32 rows, 8 warps (narrow N, to fill the GPU);
 *                   (4, 4): 128 rows, 16 warps (env FP4_SM90_V3_RP=4).
 *      Every weight fragment, dequantized once, feeds all NT token tiles.
 *
 * Predictions (H200: 4.58 TB/s read; 3.3 us measured floor for 7.25 MB):
 *   (16, 2048, 6144): 7.1 MB -> 256 blocks, all loads in flight at start:
 *     ~4-5 us (floor 3.3 + token conversion / reduction tail ~1 us).
 *   (64, 2048, 6144): same bytes, 4x the MMAs (393 K m16n8k16, ~3 K per SM,
 *     ~2 us of tensor issue at mma.sync rates), overlapped: ~5-6 us.
 *   (16|64, 768, 6144): 2.65 MB, floor 2.0 us: ~3-4 us.
 *   (256, 2048, 6144): 4 token chunks, weights re-read from L2 and
 *     re-dequantized per chunk: ~4x the M = 64 compute: ~12-15 us.
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

#define D3_SMEM_MAX (200 * 1024)   /* per-block dynamic smem limit we allow */
#define D3_TOK_BUDGET (100 * 1024) /* token slice budget: 2 blocks / SM */
#define D3_MAX_SPLITS 8            /* portable cluster size */

/* ---- device helpers (the shared ones are in fp4_sm90_device.cuh) ---------------- */

/* ---- the kernel ---------------------------------------------------------------- */

/* bq, bs: v1-decode packed weights ([Np/16 tiles][KS][32][16 B], [Np/32 pairs][KS][32][4 B]).
 * aq [M, K/2], asf swizzled. d [M, N] bf16. KS = ceil(K/64), kper k-steps per
 * split (grid.y = S = the cluster's y size), NPAIRS = Np/32 (pairs >= NPAIRS
 * are not in the packed buffer: skipped). */
template <int RP, int KP, int NT, int MINB>
__global__ void __launch_bounds__(32 * RP * KP, MINB)
fp4_sm90_decode_v3(const uint4 *__restrict__ bq, const uint32_t *__restrict__ bs,
                   const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                   __nv_bfloat16 *__restrict__ d, int M, int N, int K, int KS, int kper,
                   int npairs, float alpha_eff)
{
    constexpr int THREADS = 32 * RP * KP;
    constexpr int ROWS = 32 * RP;
    constexpr int TOK = 8 * NT;
    constexpr int RS = ROWS + 4; /* floats per token row of a partial tile */
    constexpr int D = NT >= 8 ? 2 : 4; /* k-steps of weight loads in flight per warp */
    extern __shared__ __align__(16) unsigned char smem[];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int rb = blockIdx.x, split = blockIdx.y, S = gridDim.y;
    const int m0 = blockIdx.z * TOK;
    const int ks0 = split * kper, ks1 = min(KS, ks0 + kper);
    const int nkb = (ks1 - ks0) * 4;
    const int stride = kper * 128 + 32; /* bytes per token row (conflict-free, see v1) */
    const int KB = K / 16, Kbp = (KB + 3) / 4 * 4;

    /* 1. this warp's row pair and K part; issue its first D weight k-steps. */
    const int rp = warp % RP, kp = warp / RP;
    const int P = rb * RP + rp;
    const bool live = P < npairs;
    const int nks = ks1 - ks0, nkw = (nks + KP - 1) / KP;
    const int w0 = min(ks1, ks0 + kp * nkw);
    const int w1 = live ? min(ks1, w0 + nkw) : w0;

    const uint4 *bq0 = bq + ((size_t)(2 * P) * KS) * 32 + lane;
    const uint4 *bq1 = bq + ((size_t)(2 * P + 1) * KS) * 32 + lane;
    const uint32_t *bsp = bs + ((size_t)P * KS) * 32 + lane;

    uint4 c0[D], c1[D];
    uint32_t sw[D];
#pragma unroll
    for (int u = 0; u < D; u++) {
        if (w0 + u < w1) {
            c0[u] = ldg_stream16(bq0 + (size_t)(w0 + u) * 32);
            c1[u] = ldg_stream16(bq1 + (size_t)(w0 + u) * 32);
            sw[u] = ldg_stream4(bsp + (size_t)(w0 + u) * 32);
        } else {
            c0[u] = c1[u] = make_uint4(0, 0, 0, 0);
            sw[u] = 0;
        }
    }

    /* 2. tokens -> shared fp16 (value * scale * 2^-7), permuted k order per
     * k-block: lane t's 8 bytes = {k 4t, 4t+2}, {k 4t+1, 4t+3}. */
    {
        /* TB items a thread: all their loads issued before any is used (a loop
         * of load-convert-store waits one L2 round trip per item). */
        constexpr int TB = NT >= 8 ? 4 : 8;
        const int items = TOK * nkb;
        for (int base = 0; base < items; base += TB * THREADS) {
            uint2 q[TB];
            uint32_t sbv[TB];
#pragma unroll
            for (int u = 0; u < TB; u++) {
                const int idx = base + u * THREADS + tid;
                q[u] = make_uint2(0, 0);
                sbv[u] = 0;
                if (idx < items) {
                    const int r = idx / nkb, b = idx - r * nkb;
                    const int m = m0 + r, kb = ks0 * 4 + b;
                    if (m < M && kb < KB) {
                        q[u] = __ldg((const uint2 *)(aq + (size_t)m * (size_t)(K / 2) +
                                                     (size_t)kb * 8));
                        sbv[u] = __ldg(asf + swz_off(m, kb, Kbp));
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < TB; u++) {
                const int idx = base + u * THREADS + tid;
                if (idx < items) {
                    const int r = idx / nkb, b = idx - r * nkb;
                    /* zero codes with a zero scale give +0: padding needs no branch */
                    const uint32_t sc = sf2_to_h2(((sbv[u] & 0x7Fu) * 0x10001u) << 7);
                    uint4 lo, hi;
                    uint32_t y;
                    y = __byte_perm(q[u].x, 0, 0x4140);
                    lo.x = hmul2_u32(dq_nib2(y, 0), sc);
                    lo.y = hmul2_u32(dq_nib2(y, 1), sc);
                    y = __byte_perm(q[u].x, 0, 0x4342);
                    lo.z = hmul2_u32(dq_nib2(y, 0), sc);
                    lo.w = hmul2_u32(dq_nib2(y, 1), sc);
                    y = __byte_perm(q[u].y, 0, 0x4140);
                    hi.x = hmul2_u32(dq_nib2(y, 0), sc);
                    hi.y = hmul2_u32(dq_nib2(y, 1), sc);
                    y = __byte_perm(q[u].y, 0, 0x4342);
                    hi.z = hmul2_u32(dq_nib2(y, 0), sc);
                    hi.w = hmul2_u32(dq_nib2(y, 1), sc);
                    uint4 *dst = (uint4 *)(smem + (size_t)r * stride + (size_t)b * 32);
                    dst[0] = lo;
                    dst[1] = hi;
                }
            }
        }
    }
    __syncthreads();

    /* 3. main loop: rolling D-deep register pipeline over this warp's k-steps. */
    float acc[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][n][e] = 0.0f;

    const unsigned char *arow = smem + (size_t)g * stride + (size_t)t * 8;
    for (int s = w0; s < w1; s += D) {
#pragma unroll
        for (int u = 0; u < D; u++) {
            if (s + u < w1) {
                const uint32_t sc0 = sf2_to_h2(sw[u] << 7);
                const uint32_t sc1 = sf2_to_h2(sw[u] >> 1);
                const int kbl = (s + u - ks0) * 4;
                const uint4 x0 = c0[u], x1 = c1[u];
                /* refill the slot before the math: D k-steps stay in flight */
                if (s + u + D < w1) {
                    c0[u] = ldg_stream16(bq0 + (size_t)(s + u + D) * 32);
                    c1[u] = ldg_stream16(bq1 + (size_t)(s + u + D) * 32);
                    sw[u] = ldg_stream4(bsp + (size_t)(s + u + D) * 32);
                }
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    uint32_t b[NT][2];
#pragma unroll
                    for (int n = 0; n < NT; n++) {
                        const uint2 v = *(const uint2 *)(arow + (size_t)(8 * n) * stride +
                                                         (size_t)(kbl + j) * 32);
                        b[n][0] = v.x;
                        b[n][1] = v.y;
                    }
#pragma unroll
                    for (int i = 0; i < 2; i++) {
                        const uint32_t sc = __shfl_sync(0xffffffffu, (j & 1) ? sc1 : sc0,
                                                        g * 4 + 2 * i + (j >> 1));
                        const uint32_t s_lo = __byte_perm(sc, 0, 0x1010);
                        const uint32_t s_hi = __byte_perm(sc, 0, 0x3232);
                        const uint32_t x = u4_at(i ? x1 : x0, j);
                        const uint32_t a0 = hmul2_u32(dq_nib2(x, 0), s_lo);
                        const uint32_t a1 = hmul2_u32(dq_nib2(x, 1), s_hi);
                        const uint32_t a2 = hmul2_u32(dq_nib2(x, 2), s_lo);
                        const uint32_t a3 = hmul2_u32(dq_nib2(x, 3), s_hi);
#pragma unroll
                        for (int n = 0; n < NT; n++)
                            mma_f16_16816(acc[i][n], a0, a1, a2, a3, b[n][0], b[n][1]);
                    }
                }
            }
        }
    }
    __syncthreads(); /* the token slice is dead: reuse smem for the partials */

    /* 4. partial tiles red[kp][tok][row], then reduce across the K parts and
     * the S blocks of the cluster through distributed shared memory. */
    float *red = (float *)smem;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int row = rp * 32 + i * 16 + g, tok = 8 * n + 2 * t;
            float *base = red + (size_t)kp * TOK * RS;
            base[tok * RS + row] = acc[i][n][0];
            base[(tok + 1) * RS + row] = acc[i][n][1];
            base[tok * RS + row + 8] = acc[i][n][2];
            base[(tok + 1) * RS + row + 8] = acc[i][n][3];
        }
    __syncthreads();
    /* the K parts, locally: slice 0 += slices 1..KP-1 (one thread an element) */
    constexpr int C4 = ROWS / 4;
    for (int e = tid; e < TOK * C4; e += THREADS) {
        const int tok = e / C4, c4 = (e - tok * C4) * 4;
        float4 *v0 = (float4 *)(red + (size_t)tok * RS + c4);
        float4 v = *v0;
#pragma unroll
        for (int p = 1; p < KP; p++) {
            const float4 w = *(const float4 *)(red + ((size_t)p * TOK + tok) * RS + c4);
            v.x += w.x;
            v.y += w.y;
            v.z += w.z;
            v.w += w.w;
        }
        *v0 = v;
    }
    cluster_sync_all(); /* also orders this block's own smem */

    /* the S splits: block r of the cluster owns elements r, r + S, ..; its S
     * remote loads are all issued before the first add (one DSMEM round trip) */
    const uint32_t rank = cluster_rank();
    const uint32_t red_addr = (uint32_t)__cvta_generic_to_shared(red);
    const int n0 = rb * ROWS;
    const bool vec_out = (N % 4) == 0;
    for (int e = (int)rank * THREADS + tid; e < TOK * C4; e += S * THREADS) {
        const int tok = e / C4, c4 = (e - tok * C4) * 4;
        const int m = m0 + tok, n = n0 + c4;
        if (m >= M || n >= N) continue;
        const float4 v = cluster_sum4(red_addr + (uint32_t)((tok * RS + c4) * 4), S);
        store_bf16x4(d, m, n, N, v, alpha_eff, vec_out);
    }
    (void)split;
    cluster_sync_all(); /* peers may still read this block's partials */
}

/* ---- host side ---------------------------------------------------------------------- */

typedef void (*d3_kernel_fn)(const uint4 *, const uint32_t *, const uint8_t *, const uint8_t *,
                             __nv_bfloat16 *, int, int, int, int, int, int, float);

typedef struct d3_cfg {
    int rp, kp, nt;  /* block shape */
    int S, kper, zc; /* splits (cluster y), k-steps per split, token chunks */
    int rbs;         /* row blocks */
    size_t smem;
} d3_cfg;

static int64_t d3_np(int64_t n) { return (n + 63) / 64 * 64; } /* v1 packing pads to 64 */
static int64_t d3_ks(int64_t k) { return (k + 63) / 64; }

static size_t d3_smem(int rp, int kp, int nt, int kper)
{
    const size_t tok = (size_t)(8 * nt) * (size_t)(kper * 128 + 32);
    const size_t red = (size_t)kp * (size_t)(8 * nt) * (size_t)(32 * rp + 4) * sizeof(float);
    return tok > red ? tok : red;
}

/* The shape of the launch. Returns 0 when v3 cannot run the shape (the token
 * slice of the deepest split would not fit in shared memory). Env
 * FP4_SM90_V3_RP=1|2|4 forces the row pairs per block (tuning). */
static int d3_plan(int64_t m, int64_t n, int64_t k, int num_sms, int splits, d3_cfg *c)
{
    const int64_t KS = d3_ks(k), Np = d3_np(n);
    const int sms = num_sms > 0 ? num_sms : 132;
    memset(c, 0, sizeof *c);
    c->nt = m <= 8 ? 1 : m <= 16 ? 2 : m <= 32 ? 4 : 8;
    c->zc = (int)((m + 8 * c->nt - 1) / (8 * c->nt));
    /* 64 rows by default; 32 when 64-row blocks x 8 splits x chunks leave SMs idle */
    c->rp = 2;
    if ((Np / 64) * c->zc * D3_MAX_SPLITS < sms) c->rp = 1;
    const char *env = getenv("FP4_SM90_V3_RP");
    if (env && (atoi(env) == 1 || atoi(env) == 2 || atoi(env) == 4)) c->rp = atoi(env);
    c->kp = c->rp == 1 ? 8 : 4;
    c->rbs = (int)((Np / 32 + c->rp - 1) / c->rp);
    const int warps = c->rp * c->kp;
    /* splits: about 16 warps per SM, and the token slice within budget */
    const int64_t target = (int64_t)sms * 16 / warps;
    int64_t S = splits > 0 ? splits : (target + (int64_t)c->rbs * c->zc - 1) / ((int64_t)c->rbs * c->zc);
    if (splits <= 0) {
        int64_t kmax = 1;
        while (d3_smem(c->rp, c->kp, c->nt, (int)kmax + 1) <= D3_TOK_BUDGET && kmax < KS) kmax++;
        const int64_t smin = (KS + kmax - 1) / kmax;
        if (S < smin) S = smin;
    }
    if (S > D3_MAX_SPLITS) S = D3_MAX_SPLITS;
    if (S > KS) S = KS;
    if (S < 1) S = 1;
    c->kper = (int)((KS + S - 1) / S);
    c->S = (int)((KS + c->kper - 1) / c->kper); /* every split non-empty */
    c->smem = d3_smem(c->rp, c->kp, c->nt, c->kper);
    if (c->smem > D3_SMEM_MAX) return 0;
    if (c->rbs > 0x7fffffff || c->zc > 65535) return 0;
    return 1;
}

extern "C" int fp4_sm90_decode3_fits(int64_t m, int64_t n, int64_t k, int num_sms);
extern "C" int fp4_sm90_decode3_fits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    d3_cfg c;
    return d3_plan(m, n, k, num_sms, 0, &c);
}

template <int RP, int KP>
static d3_kernel_fn d3_kernel_nt(int nt)
{
    constexpr int B = RP * KP >= 16 ? 1 : 2;
    switch (nt) {
    case 1: return fp4_sm90_decode_v3<RP, KP, 1, B>;
    case 2: return fp4_sm90_decode_v3<RP, KP, 2, B>;
    case 4: return fp4_sm90_decode_v3<RP, KP, 4, B>;
    default: return fp4_sm90_decode_v3<RP, KP, 8, B>;
    }
}

static d3_kernel_fn d3_kernel(int rp, int nt)
{
    return rp == 1 ? d3_kernel_nt<1, 8>(nt) : rp == 4 ? d3_kernel_nt<4, 4>(nt) : d3_kernel_nt<2, 4>(nt);
}

extern "C" fp4_status fp4_sm90_decode3_init(fp4_err *err);
extern "C" fp4_status fp4_sm90_decode3_init(fp4_err *err)
{
    const int rps[3] = {1, 2, 4}, nts[4] = {1, 2, 4, 8};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)d3_kernel(rps[i], nts[j]),
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   D3_SMEM_MAX));
    return FP4_OK;
}

extern "C" fp4_status fp4_sm90_decode3_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                              fp4_err *err);
extern "C" fp4_status fp4_sm90_decode3_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                              fp4_err *err)
{
    d3_cfg c;
    const int splits = a->splits > D3_MAX_SPLITS ? D3_MAX_SPLITS : a->splits;
    if (!d3_plan(a->m, a->n, a->k, a->num_sms, splits, &c))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90 v3-decode: %lldx%lldx%lld: the token slice of a split does not "
                        "fit in shared memory (K too deep for 8 splits); use v1-decode",
                        (long long)a->m, (long long)a->n, (long long)a->k);
    const uint4 *bq = (const uint4 *)a->b_codes;
    const uint32_t *bs = (const uint32_t *)a->b_sf;
    const uint8_t *aq = a->a_codes, *asf = a->a_sf;
    __nv_bfloat16 *d = (__nv_bfloat16 *)a->d;
    int M = (int)a->m, N = (int)a->n, K = (int)a->k, KS = (int)d3_ks(a->k), kper = c.kper;
    int npairs = (int)(d3_np(a->n) / 32);
    /* both operands carry 2^-7 (see the top of the file) */
    float alpha_eff = a->alpha * 16384.0f;
    void *args[] = {&bq, &bs, &aq, &asf, &d, &M, &N, &K, &KS, &kper, &npairs, &alpha_eff};

    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)c.rbs, (unsigned)c.S, (unsigned)c.zc);
    cfg.blockDim = dim3((unsigned)(32 * c.rp * c.kp), 1, 1);
    cfg.dynamicSmemBytes = c.smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = (unsigned)c.S;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    FP4_CUDA_TRY(err, cudaLaunchKernelExC(&cfg, (const void *)d3_kernel(c.rp, c.nt), args));
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}
