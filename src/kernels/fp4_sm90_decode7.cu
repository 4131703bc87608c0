/* fp4-sm90 "v7-decode": NVFP4 x NVFP4 -> bf16 GEMM for small M on Hopper,
 * weights streamed by the copy engine (cp.async.bulk), no split K.
 *
 * Why a seventh kernel. Ablations of v4 on the H200 (bench/decode-ablate.sh,
 * Nsight Compute durations of one cold launch, session 3) at 16x2048x6144:
 * 9.8 us as built, 7.3 without the split-K reduction, 7.7 without the
 * dequantization and MMAs, 5.3 with neither. So v4 pays about 2.4 us for the
 * reduction chain (red.global, fence, arrival counter, last block's read-back:
 * three dependent L2 round trips after the main loop), about 2 us of
 * arithmetic the loads do not hide (every warp loads once, then computes),
 * and its load skeleton alone (about two k-steps in flight a warp) is far
 * above the bytes floor (12.3 us for 37.7 MB at 16x8192x8192: 68% of the
 * read bandwidth with no arithmetic at all). v6 (tokens shared through shared
 * memory, more K splits) paid more for the reduction than it saved.
 *
 * Design:
 * - One block per 16-row weight tile and token chunk, over the WHOLE K: no
 *   split K, so no workspace, no atomics; the 8 consumer warps of the block
 *   take k-steps w, w + 8, ... and are reduced through shared memory; the
 *   block writes bf16 D directly. 2048 rows are 128 blocks, 8192 are 512.
 * - A producer warp streams the tile's packed weights (v4's layout: a tile's
 *   codes and scales are contiguous, 512 + 64 bytes a k-step) with
 *   cp.async.bulk into a ring of NS stages of 8 k-steps (4.5 KB each) with
 *   full/empty mbarriers and an L2 evict-first policy; so up to NS * 4.5 KB a
 *   block are in flight with no registers held and no address arithmetic in
 *   the consumers, and consumers compute on stage s while s + 1.. arrive.
 * - Consumers: v4's arithmetic for one tile (16 dq_nib2 + 16 multiplies and 4
 *   NT MMAs a k-step), token fragments loaded straight from A (one 8-byte load
 *   and one scale byte per token tile and k-step), TP k-steps ahead.
 * Measured (commit d6fc6b0, tokens one k-step ahead; docs/PERF.md): slower than
 * v4 except at M = 1. Each consumer warp runs its 12-16 k-steps in sequence
 * and waited for its next token load, an L2 round trip, every k-step; the
 * prefetch is now 4 (NT = 1), 3 (NT = 2) k-steps deep (NT = 4: 1, registers).
 * Not measured since (device time).
 * Prediction (H200): per SM at 16x2048x6144 one tile: 54 KB of weights and
 * about 12 K warp instructions (weights + tokens), i.e. 1.6-2 us of issue
 * overlapped with the stream: about 4-5 us in a graph; 16x8192x8192 four
 * tiles a SM: about 10-11 us (75% of the read bandwidth); 64 tokens (NT = 4,
 * two chunks): the token conversion doubles the issue: about 7-9 us.
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

#define D7_CWARPS 8                      /* consumer warps */
#define D7_THREADS (32 * (D7_CWARPS + 1)) /* + one producer warp */
#define D7_SK D7_CWARPS                  /* k-steps a stage: one per consumer warp */
#define D7_NS 8                          /* stages in the ring */
#define D7_CODES (D7_SK * 512)           /* code bytes a stage */
#define D7_SCALES (D7_SK * 64)           /* scale bytes a stage */
#define D7_RS 20                         /* row stride of the reduction tile (16 + 4) */

/* shared memory: [full NS][empty NS] mbarriers, codes ring, scales ring,
 * reduction tile [warp][tok][D7_RS] floats */
#define D7_OFF_CODES 128
#define D7_OFF_SCALES (D7_OFF_CODES + D7_NS * D7_CODES)
#define D7_OFF_RED (D7_OFF_SCALES + D7_NS * D7_SCALES)
static size_t d7_smem(int nt) { return D7_OFF_RED + (size_t)D7_CWARPS * 8 * nt * D7_RS * 4; }

static int64_t d7_np(int64_t n) { return (n + 63) / 64 * 64; } /* v4's row padding */
static int64_t d7_ks(int64_t k) { return (k + 63) / 64; }

static __device__ __forceinline__ uint32_t d7_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* token words of stage s (this warp's k-step 8 s + warp) for its NT token
 * tiles: ap / sp point at stage 0's code word and scale byte (NULL: no token) */
template <int NT>
static __device__ __forceinline__ void d7_tokens(uint2 *q, uint32_t *qs, const uint8_t *const *ap,
                                                 const uint8_t *const *sp, int s, bool in_k)
{
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const bool ok = ap[n] && in_k;
        q[n] = ok ? __ldg((const uint2 *)(ap[n] + (size_t)s * 256)) : make_uint2(0, 0);
        qs[n] = ok ? __ldg(sp[n] + (size_t)s * 4096) : 0u;
    }
}

/* grid (tiles of 16 rows, token chunks of 8 NT); block D7_THREADS. */
template <int NT>
__global__ void __launch_bounds__(D7_THREADS, NT == 4 ? 2 : 3)
fp4_sm90_decode_v7(const uint8_t *__restrict__ bq, const uint8_t *__restrict__ bs,
                   const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                   __nv_bfloat16 *__restrict__ d, int M, int N, int K, int KS, float alpha_eff)
{
    constexpr int TOK = 8 * NT;
    extern __shared__ __align__(128) uint8_t smem7[];
    const uint32_t sbase = d7_smem_addr(smem7);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int tile = blockIdx.x, m0 = blockIdx.y * TOK;
    const int nstages = (KS + D7_SK - 1) / D7_SK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < D7_NS; s++) {
            wg_mbar_init(sbase + 8 * s, 1);                  /* full: the producer's expect_tx */
            wg_mbar_init(sbase + 8 * (D7_NS + s), D7_CWARPS); /* empty: one arrive a consumer warp */
        }
        wg_mbar_init_fence();
    }
    __syncthreads();

    if (warp == D7_CWARPS) {
        /* producer: stage s = k-steps [8 s, 8 s + 8) of this tile into slot s % NS */
        if (lane == 0) {
            /* one token chunk reads the weights once: keep them out of L2's way;
             * several chunks re-read them: let L2 keep them */
            uint64_t policy;
            if (gridDim.y == 1)
                asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
            else
                asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
            const uint8_t *codes = bq + (size_t)tile * KS * 512;
            const uint8_t *scales = bs + (size_t)tile * KS * 64;
            for (int s = 0; s < nstages; s++) {
                const int slot = s % D7_NS;
                if (s >= D7_NS) wg_mbar_wait(sbase + 8 * (D7_NS + slot), ((s / D7_NS) - 1) & 1);
                const int nks = min(D7_SK, KS - s * D7_SK);
                const uint32_t full = sbase + 8 * slot;
                wg_mbar_expect(full, (unsigned)nks * (512 + 64));
                wg_bulk_g2s_hint(sbase + D7_OFF_CODES + slot * D7_CODES,
                                 codes + (size_t)s * D7_CODES, (unsigned)nks * 512, full, policy);
                wg_bulk_g2s_hint(sbase + D7_OFF_SCALES + slot * D7_SCALES,
                                 scales + (size_t)s * D7_SCALES, (unsigned)nks * 64, full, policy);
            }
        }
    } else {
        /* consumer warp: k-steps warp, warp + 8, ... */
        const int g = lane >> 2, t = lane & 3;
        const int KB = K / 16, Kbp = (KB + 3) / 4 * 4;
        const uint8_t *ap[NT];
        const uint8_t *sp[NT];
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int m = m0 + 8 * n + g;
            ap[n] = m < M ? aq + (size_t)m * (K / 2) + (size_t)(4 * warp + t) * 8 : NULL;
            sp[n] = m < M ? asf + swz_off(m, 4 * warp + t, Kbp) : NULL;
        }
        float acc[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

        /* token fragments, loaded TP k-steps of this warp ahead in a register
         * ring (slot u of a group of TP stages): one k-step of arithmetic is far
         * shorter than an L2 round trip, and the first measurement (commit
         * d6fc6b0) loaded them only one k-step ahead. Stage s of this warp is
         * k-step 8 s + warp: 256 code bytes and 8 swizzled 512-byte scale atoms
         * after stage s - 1. */
        constexpr int TP = NT == 4 ? 1 : NT == 2 ? 3 : 4; /* registers: no spills */
        uint2 q[TP][NT];
        uint32_t qs[TP][NT];
#pragma unroll
        for (int u = 0; u < TP; u++)
            d7_tokens<NT>(q[u], qs[u], ap, sp, u, 4 * (u * D7_SK + warp) + t < KB);
        for (int s0 = 0; s0 < nstages; s0 += TP) {
#pragma unroll
        for (int u = 0; u < TP; u++) {
            const int s = s0 + u, ks = s * D7_SK + warp;
            if (ks >= KS) continue; /* the last, partial stage */
            uint32_t bt[NT][8];
#pragma unroll
            for (int n = 0; n < NT; n++) kperm_b_frag(q[u][n], sf_pair(qs[u][n], 0), bt[n]);
            d7_tokens<NT>(q[u], qs[u], ap, sp, s + TP, 4 * (ks + TP * D7_SK) + t < KB);
            const int slot = s % D7_NS;
            wg_mbar_wait(sbase + 8 * slot, (s / D7_NS) & 1);
            const uint4 w = *(const uint4 *)(smem7 + D7_OFF_CODES + slot * D7_CODES + warp * 512 + lane * 16);
            const uint32_t wsc = *(const uint16_t *)(smem7 + D7_OFF_SCALES + slot * D7_SCALES + warp * 64 + lane * 2);
            __syncwarp();
            if (lane == 0) wg_mbar_arrive(sbase + 8 * (D7_NS + slot)); /* slot free for stage s + NS */
            const uint32_t sg = sf_pair(wsc, 0), sg8 = sf_pair(wsc, 1);
            uint32_t pg[2][4], p8[2][4];
            kperm_pairs(w, pg, p8);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                uint32_t a[4];
                kperm_a_frag(pg, p8, sg, sg8, j, a);
                const int b0 = 4 * (j >> 1) + 2 * (j & 1);
#pragma unroll
                for (int n = 0; n < NT; n++)
                    mma_f16_16816(acc[n], a[0], a[1], a[2], a[3], bt[n][b0], bt[n][b0 + 1]);
            }
        }
        }
        /* partial sums -> red[warp][tok][row] */
        float *red = (float *)(smem7 + D7_OFF_RED) + (size_t)warp * TOK * D7_RS;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int tok = 8 * n + 2 * t;
            red[tok * D7_RS + g] = acc[n][0];
            red[(tok + 1) * D7_RS + g] = acc[n][1];
            red[tok * D7_RS + g + 8] = acc[n][2];
            red[(tok + 1) * D7_RS + g + 8] = acc[n][3];
        }
    }
    __syncthreads();
    /* sum the 8 warps' tiles, 4 rows a thread, bf16 D */
    const float *red = (const float *)(smem7 + D7_OFF_RED);
    for (int e = threadIdx.x; e < TOK * 4; e += D7_THREADS) {
        const int tok = e >> 2, c4 = (e & 3) * 4;
        float4 v = *(const float4 *)(red + tok * D7_RS + c4);
#pragma unroll
        for (int w = 1; w < D7_CWARPS; w++) {
            const float4 x = *(const float4 *)(red + ((size_t)w * TOK + tok) * D7_RS + c4);
            v.x += x.x;
            v.y += x.y;
            v.z += x.z;
            v.w += x.w;
        }
        const int m = m0 + tok, n = 16 * tile + c4;
        if (m < M && n < N) store_bf16x4(d, m, n, N, v, alpha_eff, (N & 3) == 0);
    }
}

/* ---- host side ---------------------------------------------------------------------- */

typedef void (*d7_kernel_fn)(const uint8_t *, const uint8_t *, const uint8_t *, const uint8_t *,
                             __nv_bfloat16 *, int, int, int, int, float);

static int d7_nt(int64_t m) { return m <= 8 ? 1 : m <= 16 ? 2 : 4; }

static d7_kernel_fn d7_kernel(int nt)
{
    return nt == 1 ? fp4_sm90_decode_v7<1> : nt == 2 ? fp4_sm90_decode_v7<2> : fp4_sm90_decode_v7<4>;
}

extern "C" {

int fp4_sm90_decode7_fits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    (void)k;
    (void)num_sms;
    const int nt = d7_nt(m);
    return (m + 8 * nt - 1) / (8 * nt) <= 65535 && d7_np(n) / 16 <= 0x7fffffff;
}

fp4_status fp4_sm90_decode7_init(fp4_err *err)
{
    static const int nts[] = {1, 2, 4};
    for (int i = 0; i < 3; i++)
        FP4_CUDA_TRY(err, cudaFuncSetAttribute(d7_kernel(nts[i]),
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)d7_smem(nts[i])));
    return FP4_OK;
}

fp4_status fp4_sm90_decode7_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    const int nt = d7_nt(a->m);
    const int64_t zc = (a->m + 8 * nt - 1) / (8 * nt);
    if (zc > 65535)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 v7-decode: grid too large");
    dim3 grid((unsigned)(d7_np(a->n) / 16), (unsigned)zc);
    /* both operands carry 2^-7 from the dequantization */
    const float alpha_eff = a->alpha * 16384.0f;
    d7_kernel(nt)<<<grid, D7_THREADS, d7_smem(nt), stream>>>(
        a->b_codes, a->b_sf, a->a_codes, a->a_sf, (__nv_bfloat16 *)a->d, (int)a->m, (int)a->n,
        (int)a->k, (int)d7_ks(a->k), alpha_eff);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

} /* extern "C" */
