/* fp4-sm90 "v1-decode": NVFP4 x NVFP4 -> bf16 GEMM for small M on Hopper.
 *
 * Design (memory bound: stream the weights once, at full bandwidth).
 * - Swap AB: the MMA (mma.sync m16n8k16, fp16 in, fp32 accumulate) computes
 *   D^T tiles: its 16-row side is 16 weight rows n, its 8-wide side 8 tokens m.
 * - Block = 8 warps = 2 row pairs (32 weight rows each, 2 m16 tiles) x 4 K parts;
 *   a block covers 64 weight rows, all tokens of a 8*NT-token chunk (NT in
 *   {1,2,4,8}, compile-time because it sizes the accumulators), and a K range
 *   of `kper` k-steps of 64 (grid.y splits K). Each warp covers its row pair
 *   and a quarter of the block's K range.
 * - Weights, pre-shuffled by fp4_sm90_decode_pack_b: for each 16-row tile and
 *   each k-step of 64, lane l owns 16 bytes = 4 words, one per k-block of 16;
 *   word j holds the 8 nibbles of the lane's 4 fragment registers a0..a3 for
 *   k-block j (register r: low half from bits 4r..4r+3, high half from bits
 *   16+4r..), so ONE 16-byte ld.global.nc.L1::no_allocate feeds 4 MMAs. The
 *   k order inside a block is permuted (slot 2t <- k 4t, 2t+1 <- 4t+2,
 *   2t+8 <- 4t+1, 2t+9 <- 4t+3), identically for the tokens: sum over k is
 *   order-free.
 *   Scales: per row pair and k-step, lane (g, t) owns one word: tile t>>1,
 *   k-blocks 2(t&1) and 2(t&1)+1, rows g and g+8 (bytes sf(g,kb0) sf(g,kb1)
 *   sf(g+8,kb0) sf(g+8,kb1)); no byte is loaded twice, lanes exchange them
 *   with __shfl_sync.
 * - Per warp, U = 4 k-steps of loads (8 x 16 B codes + 4 x 4 B scales a lane)
 *   are issued before any is used: 32 KB in flight per block.
 * - Dequantization, per fp16x2 register: 2 shifts + 2 logic ops place the 3
 *   magnitude bits in the low exponent / top mantissa bits and the sign in bit
 *   15 (value * 2^-14, subnormal for 0.5), then one mul.rn.f16x2 by
 *   (scale * 2^7); the 2^-7 is undone in alpha. Exact (see fp4_sm90.h).
 * - Tokens (A, tiny): the block dequantizes its A slice [8*NT, K range] once
 *   into shared memory (fp16, permuted k order, rows padded so that the
 *   8-byte fragment loads are conflict-free).
 * - Reduction: the 4 K-part warps through shared memory; then across the
 *   grid.y splits with float4 atomicAdd (sm_90) into an fp32 workspace; the
 *   last block to finish a tile (per-tile counter) writes bf16 D with alpha,
 *   zeroes the workspace tile and resets the counter, so the kernel needs no
 *   second launch and stays replayable in a CUDA graph. splits == 1 writes D
 *   directly.
 *
 * Predicted times on the H200 (4.58 TB/s, ~800 TFLOP/s bf16):
 *   (16, 2048, 6144): 7.2 MB of operands -> 1.6 us at full bandwidth; the
 *     measured pure-read floor for 7.25 MB is 3.3 us, so ~3.5-4.5 us expected
 *     (plus ~0.5 us of atomics for 9 splits x 2048 x 16 floats in L2).
 *   (4096, 2048, 6144): 103 GFLOP -> 129 us at 800 TFLOP/s; this kernel is
 *     not meant for it (it re-streams the weights per 64 tokens and tops out
 *     near mma.sync's rate): the prefill kernel is chosen there.
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

#define DEC_THREADS 256
#define DEC_ROWS 64   /* weight rows per block */
#define DEC_KPARTS 4  /* warps along K per block */
#define DEC_U 4       /* k-steps loaded per batch */
#define DEC_SMEM_MAX (200 * 1024)
#define DEC_RED_STRIDE 68 /* floats per token row of the reduction buffer (64 + 4) */

/* ---- device helpers: the shared ones are in fp4_sm90_device.cuh ---------------- */

/* fp16 bits of e2m1(code) * sf, exact (<= 2688, >= 2^-10: normal fp16). */
static __device__ __forceinline__ uint16_t a_value(uint32_t code, float sf)
{
    /* e2m1 magnitude as float bits: e = 0 -> 0 or 0.5; else (1 + m/2) 2^(e-1) */
    const uint32_t e = (code >> 1) & 3, mm = code & 1;
    const uint32_t bits = e ? ((e + 126u) << 23 | mm << 22) : (mm ? 0x3F000000u : 0u);
    float v = __uint_as_float(bits) * sf;
    __half h = __float2half_rn((code & 8) ? -v : v);
    return __half_as_ushort(h);
}

/* ---- the kernel ---------------------------------------------------------------- */

/* bq: packed weight codes, bs: packed weight scales (see the top of the file).
 * aq [M, K/2], asf swizzled. d [M, N] bf16. ws: fp32 [M, Np] (zero on entry
 * and on exit), counters [gridDim.z * gridDim.x] (zero on entry and exit).
 * KS = ceil(K/64) k-steps in all, kper k-steps per block (grid.y = splits). */
template <int NT>
__global__ void __launch_bounds__(DEC_THREADS)
    fp4_sm90_decode_v1(const uint4 *__restrict__ bq, const uint32_t *__restrict__ bs,
                       const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                       __nv_bfloat16 *__restrict__ d, float *__restrict__ ws,
                       unsigned *__restrict__ counters, int M, int N, int K, int KS, int kper,
                       float alpha_eff)
{
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ int s_last;
    const int TOK = 8 * NT;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int rb = blockIdx.x, split = blockIdx.y, S = gridDim.y;
    const int m0 = blockIdx.z * 64;
    const int Np = gridDim.x * DEC_ROWS;
    const int ks0 = split * kper, ks1 = min(KS, ks0 + kper);
    const int nkb = (ks1 - ks0) * 4; /* k-blocks of 16 in this block's range */
    const int stride = ((nkb * 32 + 127) / 128) * 128 + 32; /* bytes per token row */
    const int KB = K / 16, Kbp = (KB + 3) / 4 * 4;

    /* 1. tokens -> shared fp16, permuted k order (t: k 4t, 4t+2, 4t+1, 4t+3). */
    for (int idx = tid; idx < TOK * nkb; idx += DEC_THREADS) {
        const int r = idx / nkb, b = idx - r * nkb;
        const int m = m0 + r, kb = ks0 * 4 + b;
        uint4 lo = make_uint4(0, 0, 0, 0), hi = make_uint4(0, 0, 0, 0);
        if (m < M && kb < KB) {
            const uint2 q2 = *(const uint2 *)(aq + (size_t)m * (size_t)(K / 2) + (size_t)kb * 8);
            const uint8_t sb = asf[swz_off(m, kb, Kbp)];
            const float sf = __half2float(__ushort_as_half((uint16_t)((sb & 0x7F) << 7))) * 256.0f;
            uint16_t h[16];
#pragma unroll
            for (int tt = 0; tt < 4; tt++) {
                const uint32_t w = tt < 2 ? q2.x : q2.y;
                const int sh = (tt & 1) * 16; /* nibbles 4tt..4tt+3 */
                h[4 * tt + 0] = a_value(w >> (sh + 0), sf);  /* k 4tt   */
                h[4 * tt + 1] = a_value(w >> (sh + 8), sf);  /* k 4tt+2 */
                h[4 * tt + 2] = a_value(w >> (sh + 4), sf);  /* k 4tt+1 */
                h[4 * tt + 3] = a_value(w >> (sh + 12), sf); /* k 4tt+3 */
            }
            lo = make_uint4(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16,
                            h[4] | (uint32_t)h[5] << 16, h[6] | (uint32_t)h[7] << 16);
            hi = make_uint4(h[8] | (uint32_t)h[9] << 16, h[10] | (uint32_t)h[11] << 16,
                            h[12] | (uint32_t)h[13] << 16, h[14] | (uint32_t)h[15] << 16);
        }
        uint4 *dst = (uint4 *)(smem + (size_t)r * stride + (size_t)b * 32);
        dst[0] = lo;
        dst[1] = hi;
    }
    __syncthreads();

    /* 2. weights: this warp's row pair and K part. */
    const int rp = warp & 1, kp = warp >> 1;
    const int P = rb * 2 + rp; /* global row pair */
    const int nks = ks1 - ks0, nkw = (nks + DEC_KPARTS - 1) / DEC_KPARTS;
    const int w0 = min(ks1, ks0 + kp * nkw), w1 = min(ks1, w0 + nkw);
    float acc[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][n][e] = 0.0f;

    const uint4 *bq0 = bq + ((size_t)(2 * P) * KS) * 32 + lane;
    const uint4 *bq1 = bq + ((size_t)(2 * P + 1) * KS) * 32 + lane;
    const uint32_t *bsp = bs + ((size_t)P * KS) * 32 + lane;
    const unsigned char *arow = smem + (size_t)g * stride + (size_t)t * 8;

    for (int s = w0; s < w1; s += DEC_U) {
        uint4 c[DEC_U][2];
        uint32_t sw[DEC_U];
#pragma unroll
        for (int u = 0; u < DEC_U; u++) {
            if (s + u < w1) {
                c[u][0] = ldg_stream16(bq0 + (size_t)(s + u) * 32);
                c[u][1] = ldg_stream16(bq1 + (size_t)(s + u) * 32);
                sw[u] = ldg_stream4(bsp + (size_t)(s + u) * 32);
            } else {
                c[u][0] = c[u][1] = make_uint4(0, 0, 0, 0);
                sw[u] = 0;
            }
        }
#pragma unroll
        for (int u = 0; u < DEC_U; u++) {
            if (s + u >= w1) break;
            /* this lane's scale word -> {sf(g,kb0), sf(g+8,kb0)}, {.., kb1} * 2^7 */
            const uint32_t sc0 = sf2_to_h2(sw[u] << 7);
            const uint32_t sc1 = sf2_to_h2(sw[u] >> 1);
            const int kbl = (s + u - ks0) * 4; /* local k-block of j = 0 */
#pragma unroll
            for (int j = 0; j < 4; j++) {
                uint32_t b[NT][2];
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const uint2 v =
                        *(const uint2 *)(arow + (size_t)(8 * n) * stride + (size_t)(kbl + j) * 32);
                    b[n][0] = v.x;
                    b[n][1] = v.y;
                }
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const uint32_t sc =
                        __shfl_sync(0xffffffffu, (j & 1) ? sc1 : sc0, g * 4 + 2 * i + (j >> 1));
                    const uint32_t s_lo = __byte_perm(sc, 0, 0x1010); /* row g   */
                    const uint32_t s_hi = __byte_perm(sc, 0, 0x3232); /* row g+8 */
                    const uint32_t x = u4_at(c[u][i], j);
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
    __syncthreads(); /* the token slice is dead: reuse smem for the reduction */

    /* 3. reduce the 4 K parts: red[kp][token][64 rows] */
    float *red = (float *)smem;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int row = rp * 32 + i * 16 + g, tok = 8 * n + 2 * t;
            float *base = red + (size_t)kp * TOK * DEC_RED_STRIDE;
            base[(tok)*DEC_RED_STRIDE + row] = acc[i][n][0];
            base[(tok + 1) * DEC_RED_STRIDE + row] = acc[i][n][1];
            base[(tok)*DEC_RED_STRIDE + row + 8] = acc[i][n][2];
            base[(tok + 1) * DEC_RED_STRIDE + row + 8] = acc[i][n][3];
        }
    __syncthreads();

    const int n0 = rb * DEC_ROWS;
    const bool vec_out = (N % 4) == 0;
    for (int e = tid; e < TOK * 16; e += DEC_THREADS) {
        const int tok = e >> 4, c4 = (e & 15) * 4;
        float4 v = *(const float4 *)(red + (size_t)tok * DEC_RED_STRIDE + c4);
#pragma unroll
        for (int p = 1; p < DEC_KPARTS; p++) {
            const float4 w =
                *(const float4 *)(red + ((size_t)p * TOK + tok) * DEC_RED_STRIDE + c4);
            v.x += w.x;
            v.y += w.y;
            v.z += w.z;
            v.w += w.w;
        }
        const int m = m0 + tok, n = n0 + c4;
        if (m >= M || n >= N) continue;
        if (S == 1) {
            store_bf16x4(d, m, n, N, v, alpha_eff, vec_out);
        } else {
            atomicAdd((float4 *)(ws + (size_t)m * Np + n), v);
        }
    }
    if (S == 1) return;

    /* 4. the last of the S blocks of this tile writes D and cleans up. */
    __threadfence();
    __syncthreads();
    unsigned *cnt = counters + (size_t)blockIdx.z * gridDim.x + rb;
    if (tid == 0) s_last = (atomicAdd(cnt, 1u) == (unsigned)(S - 1));
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    for (int e = tid; e < TOK * 16; e += DEC_THREADS) {
        const int tok = e >> 4, c4 = (e & 15) * 4;
        const int m = m0 + tok, n = n0 + c4;
        if (m >= M || n >= N) continue;
        float4 *wp = (float4 *)(ws + (size_t)m * Np + n);
        const float4 v = __ldcg(wp);
        __stcg(wp, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
        store_bf16x4(d, m, n, N, v, alpha_eff, vec_out);
    }
    if (tid == 0) *(volatile unsigned *)cnt = 0u;
}

/* ---- host side ---------------------------------------------------------------------- */

static int64_t dec_np(int64_t n) { return (n + DEC_ROWS - 1) / DEC_ROWS * DEC_ROWS; }
static int64_t dec_ks(int64_t k) { return (k + 63) / 64; }
static int dec_nt(int64_t m)
{
    return m <= 8 ? 1 : m <= 16 ? 2 : m <= 32 ? 4 : 8;
}

/* Shared memory for NT token tiles and kper k-steps: the token slice, or the
 * reduction buffer, whichever is larger. */
static size_t dec_smem(int nt, int kper)
{
    size_t stride = (size_t)((kper * 4 * 32 + 127) / 128 * 128 + 32);
    size_t a = (size_t)(8 * nt) * stride;
    size_t r = (size_t)DEC_KPARTS * (size_t)(8 * nt) * DEC_RED_STRIDE * sizeof(float);
    return a > r ? a : r;
}

extern "C" void fp4_sm90_decode_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales)
{
    const int64_t N = b->rows, K = b->cols, KB = K / 16, Np = dec_np(N), KS = dec_ks(K);
    const size_t rowb = (size_t)(K / 2);
    /* nibble of (row, k), 0 outside the matrix */
#define NIB(r_, k_)                                                                        \
    (((r_) < N && (k_) < K)                                                                \
         ? (uint32_t)((b->codes[(size_t)(r_)*rowb + (size_t)(k_) / 2] >> (((k_)&1) * 4)) & 15) \
         : 0u)
#define SFB(r_, kb_) (((r_) < N && (kb_) < KB) ? b->scales[(size_t)(r_)*KB + (size_t)(kb_)] : 0)
    for (int64_t T = 0; T < Np / 16; T++)
        for (int64_t s = 0; s < KS; s++)
            for (int l = 0; l < 32; l++) {
                const int g = l >> 2, t = l & 3;
                const int64_t rg = T * 16 + g, rg8 = rg + 8;
                uint8_t *out = codes + (((size_t)T * KS + s) * 32 + l) * 16;
                for (int j = 0; j < 4; j++) {
                    const int64_t k = (s * 4 + j) * 16 + 4 * t;
                    /* register r: low half bits 4r, high half bits 16+4r */
                    uint32_t x = NIB(rg, k) << 0 | NIB(rg, k + 2) << 16 |     /* a0 */
                                 NIB(rg8, k) << 4 | NIB(rg8, k + 2) << 20 |   /* a1 */
                                 NIB(rg, k + 1) << 8 | NIB(rg, k + 3) << 24 | /* a2 */
                                 NIB(rg8, k + 1) << 12 | NIB(rg8, k + 3) << 28; /* a3 */
                    memcpy(out + 4 * j, &x, 4);
                }
            }
    for (int64_t P = 0; P < Np / 32; P++)
        for (int64_t s = 0; s < KS; s++)
            for (int l = 0; l < 32; l++) {
                const int g = l >> 2, t = l & 3;
                const int64_t r = P * 32 + (t >> 1) * 16 + g;
                const int64_t kb0 = s * 4 + 2 * (t & 1);
                uint8_t *out = scales + (((size_t)P * KS + s) * 32 + l) * 4;
                out[0] = SFB(r, kb0);
                out[1] = SFB(r, kb0 + 1);
                out[2] = SFB(r + 8, kb0);
                out[3] = SFB(r + 8, kb0 + 1);
            }
#undef NIB
#undef SFB
}

extern "C" size_t fp4_sm90_decode_codes_size(int64_t n, int64_t k);
extern "C" size_t fp4_sm90_decode_codes_size(int64_t n, int64_t k)
{
    return (size_t)dec_np(n) * (size_t)dec_ks(k) * 32;
}
extern "C" size_t fp4_sm90_decode_scales_size(int64_t n, int64_t k);
extern "C" size_t fp4_sm90_decode_scales_size(int64_t n, int64_t k)
{
    return (size_t)dec_np(n) * (size_t)dec_ks(k) * 4;
}

/* Workspace: counters first (one per 64-row block and 64-token chunk), then
 * the fp32 [m, Np] accumulator, 256-byte aligned. */
static size_t dec_counters_bytes(int64_t m, int64_t n)
{
    size_t c = (size_t)(dec_np(n) / DEC_ROWS) * (size_t)((m + 63) / 64) * sizeof(unsigned);
    return (c + 255) / 256 * 256;
}
extern "C" size_t fp4_sm90_decode_ws_size(int64_t m, int64_t n, int64_t k);
extern "C" size_t fp4_sm90_decode_ws_size(int64_t m, int64_t n, int64_t k)
{
    (void)k; /* the partial sums do not depend on K */
    return dec_counters_bytes(m, n) + (size_t)m * (size_t)dec_np(n) * sizeof(float);
}

/* Largest k-steps per block whose token slice fits the shared memory budget. */
static int dec_kper_max(int nt)
{
    int kp = 1;
    while (dec_smem(nt, kp + 1) <= DEC_SMEM_MAX / 2) kp++;
    return kp;
}

/* Splits of K across blocks. Aim: about 2 blocks of 8 warps per SM (16 warps,
 * each with 4 k-steps = 4 KB of loads in flight), while keeping each block's
 * token slice in shared memory (kper <= dec_kper_max) and every split
 * non-empty. More splits mean more fp32 atomics (splits * m * n floats, in
 * L2): for m = 64 the lead should check FP4_SM90_SPLITK against the default. */
extern "C" int fp4_sm90_decode_splits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    const int64_t KS = dec_ks(k), rbs = dec_np(n) / DEC_ROWS, zc = (m + 63) / 64;
    const int nt = dec_nt(m);
    int64_t target = 2 * (int64_t)(num_sms > 0 ? num_sms : 132);
    int64_t s = (target + rbs * zc - 1) / (rbs * zc);
    int64_t smin = (KS + dec_kper_max(nt) - 1) / dec_kper_max(nt);
    if (s < smin) s = smin;
    if (s > KS) s = KS;
    if (s < 1) s = 1;
    const int64_t kper = (KS + s - 1) / s;
    return (int)((KS + kper - 1) / kper);
}

typedef void (*dec_kernel_fn)(const uint4 *, const uint32_t *, const uint8_t *, const uint8_t *,
                              __nv_bfloat16 *, float *, unsigned *, int, int, int, int, int, float);

static dec_kernel_fn dec_kernel(int nt)
{
    switch (nt) {
    case 1: return fp4_sm90_decode_v1<1>;
    case 2: return fp4_sm90_decode_v1<2>;
    case 4: return fp4_sm90_decode_v1<4>;
    default: return fp4_sm90_decode_v1<8>;
    }
}

extern "C" fp4_status fp4_sm90_decode_init(fp4_err *err)
{
    const int nts[4] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++)
        FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)dec_kernel(nts[i]),
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               DEC_SMEM_MAX));
    return FP4_OK;
}

extern "C" fp4_status fp4_sm90_decode_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                             fp4_err *err)
{
    const int64_t KS = dec_ks(a->k), rbs = dec_np(a->n) / DEC_ROWS, zc = (a->m + 63) / 64;
    const int nt = dec_nt(a->m);
    int S = a->splits > 0 ? a->splits : fp4_sm90_decode_splits(a->m, a->n, a->k, a->num_sms);
    if (S > KS) S = (int)KS;
    int kper = (int)((KS + S - 1) / S);
    if (kper > dec_kper_max(nt))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90 decode: %d splits leave %d k-steps per block, over the "
                        "shared-memory limit of %d (use more splits)",
                        S, kper, dec_kper_max(nt));
    S = (int)((KS + kper - 1) / kper); /* every split non-empty */
    if (rbs > 65535 * 64 || zc > 65535)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 decode: grid too large");
    if (S > 1 && (!a->workspace || a->workspace_bytes < fp4_sm90_decode_ws_size(a->m, a->n, a->k)))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 decode: workspace missing or too small");
    unsigned *counters = (unsigned *)a->workspace;
    float *ws = a->workspace ? (float *)((char *)a->workspace + dec_counters_bytes(a->m, a->n)) : NULL;
    dim3 grid((unsigned)rbs, (unsigned)S, (unsigned)zc);
    const size_t smem = dec_smem(nt, kper);
    /* the 2^-7 carried by the dequantized weights goes back here */
    const float alpha_eff = a->alpha * 128.0f;
    dec_kernel(nt)<<<grid, DEC_THREADS, smem, stream>>>(
        (const uint4 *)a->b_codes, (const uint32_t *)a->b_sf, a->a_codes, a->a_sf,
        (__nv_bfloat16 *)a->d, ws, counters, (int)a->m, (int)a->n, (int)a->k, (int)KS, kper,
        alpha_eff);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}
