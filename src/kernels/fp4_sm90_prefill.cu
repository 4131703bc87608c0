/* fp4-sm90 "v2-prefill": NVFP4 x NVFP4 -> bf16 GEMM for large M on Hopper.
 *
 * Design (compute bound; mma.sync, so at best ~2/3 of the wgmma peak).
 * - Block tile 128 (m) x 128 (n) x 64 (k), 256 threads = 8 warps as 2 (m) x
 *   4 (n), warp tile 64 x 32 = 4 x 4 MMAs of m16n8k16 (fp16 in, fp32 acc).
 * - 4-stage cp.async pipeline; a stage holds the packed codes of A and B
 *   (128 rows x 32 bytes each) and their scales (512 bytes each, one swizzled
 *   128x4 tile: k-step s of a 128-row tile is exactly the 512-byte chunk
 *   (tile, s) of the swizzled layout, so A's scales are read as produced by a
 *   quantizer). 9 KB a stage, 36 KB in all (static shared memory).
 *   Loads per stage: A codes one 16-byte cp.async per thread (two 8-byte ones
 *   when K % 32 != 0: rows are then only 8-byte aligned), B codes one, scales
 *   32 threads each. A rows >= M and bytes beyond K are zero-filled (src-size
 *   0); B is pre-packed zero-padded to [roundup(N,128), roundup(K,64)].
 * - Fragments straight from shared memory: lane (g, t) reads the 8 bytes at
 *   offset 8t of a row = all 16 codes of k-block t; MMA j (0..3) of the stage
 *   takes nibbles (j, j+4) of each 4-byte word, i.e. slots 2t,2t+1 <- k
 *   16t+j, 16t+j+4 and slots 2t+8,2t+9 <- 16t+8+j, 16t+12+j, the same
 *   permutation for A and B (a sum over k does not care about order). Every
 *   value a lane touches in a stage belongs to k-block t: one scale per row.
 * - Dequantization as in the decode kernel (bits -> value * 2^-14, one f16x2
 *   multiply by scale * 2^7): both operands carry 2^-7, alpha * 2^14 undoes it.
 *   Per warp and stage: 96 fp16x2 conversions (~5 instructions each) for 64
 *   MMAs; that, not the tensor cores, is the limit of this variant.
 * - Epilogue: fp32 accumulators * alpha -> bf16, bf16x2 stores when N is even.
 *
 * Predicted times on the H200 (~800 TFLOP/s bf16 cuBLAS, 4.58 TB/s):
 *   (4096, 2048, 6144): 103 GFLOP -> 129 us at 800 TFLOP/s; this variant is
 *     ALU bound (dequant ~7.5 instructions per MMA): expect ~350-450 TFLOP/s,
 *     i.e. 230-300 us. Passing ~600 needs wgmma with a dequantize-once-to-
 *     shared-memory producer (v3).
 *   (16, 2048, 6144): 16 blocks for 132 SMs, 96 k-steps each: ~30 us; not
 *     meant for it, the decode kernel is chosen there.
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

#define PF_BM 128
#define PF_BN 128
#define PF_BK 64
#define PF_STAGES 4
#define PF_THREADS 256
#define PF_ROWB (PF_BK / 2)                 /* 32 code bytes per row per stage */
#define PF_A_BYTES (PF_BM * PF_ROWB)        /* 4096 */
#define PF_B_BYTES (PF_BN * PF_ROWB)        /* 4096 */
#define PF_STAGE_BYTES (PF_A_BYTES + PF_B_BYTES + 512 + 512)

/* ---- device helpers (the shared ones are in fp4_sm90_device.cuh) ------------------ */

/* byte of scale (r, kb) inside one 512-byte swizzled 128x4 tile */
static __device__ __forceinline__ int swz_in_tile(int r, int kb)
{
    return (r & 31) * 16 + (r >> 5) * 4 + kb;
}

/* ---- the kernel ------------------------------------------------------------------------ */

/* aq [M, K/2] codes, asf swizzled [roundup(M,128), Kbp]; bq [Np, Kp/2] packed,
 * bsf swizzled [Np, Kbp]; d [M, N] bf16. KS = Kp / 64 = Kbp / 4 k-steps. */
__global__ void __launch_bounds__(PF_THREADS, 1)
    fp4_sm90_prefill_v2(const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                        const uint8_t *__restrict__ bq, const uint8_t *__restrict__ bsf,
                        __nv_bfloat16 *__restrict__ d, int M, int N, int K, int KS,
                        float alpha_eff)
{
    __shared__ __align__(128) unsigned char smem[PF_STAGES * PF_STAGE_BYTES];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp & 1, wn = warp >> 1;
    const int nt_blk = blockIdx.x, mt_blk = blockIdx.y;
    const int m0 = mt_blk * PF_BM, n0 = nt_blk * PF_BN;
    const int arow = K / 2, brow = KS * PF_ROWB;
    const bool a16 = (arow % 16) == 0;
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);

    /* Issue the cp.asyncs of k-step s into stage slot st. */
    auto load_stage = [&](int st, int s) {
        const uint32_t so = sbase + (uint32_t)(st * PF_STAGE_BYTES);
        const int kbyte = s * PF_ROWB;
        if (a16) {
            const int r = tid >> 1, c = (tid & 1) * 16;
            const int m = m0 + r;
            const bool ok = m < M && kbyte + c < arow;
            const uint8_t *src = ok ? aq + (size_t)m * arow + kbyte + c : aq;
            wg_cp16(so + (uint32_t)(r * PF_ROWB + c), src, ok ? 16 : 0);
        } else {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int idx = tid + i * PF_THREADS;
                const int r = idx >> 2, c = (idx & 3) * 8;
                const int m = m0 + r;
                const bool ok = m < M && kbyte + c < arow;
                const uint8_t *src = ok ? aq + (size_t)m * arow + kbyte + c : aq;
                wg_cp8(so + (uint32_t)(r * PF_ROWB + c), src, ok ? 8 : 0);
            }
        }
        {
            const int r = tid >> 1, c = (tid & 1) * 16;
            wg_cp16(so + (uint32_t)(PF_A_BYTES + r * PF_ROWB + c),
                    bq + (size_t)(n0 + r) * brow + kbyte + c, 16);
        }
        if (tid < 32)
            wg_cp16(so + (uint32_t)(PF_A_BYTES + PF_B_BYTES + tid * 16),
                    asf + ((size_t)mt_blk * KS + s) * 512 + tid * 16, 16);
        else if (tid < 64)
            wg_cp16(so + (uint32_t)(PF_A_BYTES + PF_B_BYTES + 512 + (tid - 32) * 16),
                    bsf + ((size_t)nt_blk * KS + s) * 512 + (tid - 32) * 16, 16);
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < PF_STAGES - 1; s++) {
        if (s < KS) load_stage(s, s);
        wg_cp_commit();
    }

    for (int s = 0; s < KS; s++) {
        wg_cp_wait<PF_STAGES - 2>();
        __syncthreads();
        {
            const int ls = s + PF_STAGES - 1;
            if (ls < KS) load_stage(ls % PF_STAGES, ls);
            wg_cp_commit();
        }
        const unsigned char *st = smem + (s % PF_STAGES) * PF_STAGE_BYTES;
        const unsigned char *sa = st, *sb = st + PF_A_BYTES;
        const unsigned char *ssa = st + PF_A_BYTES + PF_B_BYTES, *ssb = ssa + 512;

        uint2 aw[4][2];
        uint32_t as_lo[4], as_hi[4];
#pragma unroll
        for (int mt = 0; mt < 4; mt++) {
            const int r = wm * 64 + mt * 16 + g;
            aw[mt][0] = *(const uint2 *)(sa + r * PF_ROWB + 8 * t);
            aw[mt][1] = *(const uint2 *)(sa + (r + 8) * PF_ROWB + 8 * t);
            const uint32_t sc = sf2_to_h2(((uint32_t)ssa[swz_in_tile(r, t)] |
                                           (uint32_t)ssa[swz_in_tile(r + 8, t)] << 16)
                                          << 7);
            as_lo[mt] = __byte_perm(sc, 0, 0x1010);
            as_hi[mt] = __byte_perm(sc, 0, 0x3232);
        }
        uint2 bw[4];
        uint32_t bs2[4];
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
            const int r = wn * 32 + nt * 8 + g;
            bw[nt] = *(const uint2 *)(sb + r * PF_ROWB + 8 * t);
            const uint32_t b1 = ssb[swz_in_tile(r, t)];
            bs2[nt] = sf2_to_h2((b1 | b1 << 16) << 7);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t bf[4][2];
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                bf[nt][0] = hmul2_u32(dq_nib2(bw[nt].x, j), bs2[nt]);
                bf[nt][1] = hmul2_u32(dq_nib2(bw[nt].y, j), bs2[nt]);
            }
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                const uint32_t a0 = hmul2_u32(dq_nib2(aw[mt][0].x, j), as_lo[mt]);
                const uint32_t a1 = hmul2_u32(dq_nib2(aw[mt][1].x, j), as_hi[mt]);
                const uint32_t a2 = hmul2_u32(dq_nib2(aw[mt][0].y, j), as_lo[mt]);
                const uint32_t a3 = hmul2_u32(dq_nib2(aw[mt][1].y, j), as_hi[mt]);
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
                    mma_f16_16816(acc[mt][nt], a0, a1, a2, a3, bf[nt][0], bf[nt][1]);
            }
        }
    }
    wg_cp_wait<0>();

    /* epilogue */
    const bool pair_ok = (N % 2) == 0;
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int m = m0 + wm * 64 + mt * 16 + g + 8 * h;
            if (m >= M) continue;
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                const int n = n0 + wn * 32 + nt * 8 + 2 * t;
                const float v0 = acc[mt][nt][2 * h] * alpha_eff;
                const float v1 = acc[mt][nt][2 * h + 1] * alpha_eff;
                __nv_bfloat16 *dp = d + (size_t)m * N + n;
                if (pair_ok && n + 1 < N) {
                    *(__nv_bfloat162 *)dp = __floats2bfloat162_rn(v0, v1);
                } else {
                    if (n < N) dp[0] = __float2bfloat16_rn(v0);
                    if (n + 1 < N) dp[1] = __float2bfloat16_rn(v1);
                }
            }
        }
}

/* ---- host side ----------------------------------------------------------------------- */

static int64_t pf_np(int64_t n) { return (n + PF_BN - 1) / PF_BN * PF_BN; }
static int64_t pf_kp(int64_t k) { return (k + PF_BK - 1) / PF_BK * PF_BK; }

extern "C" size_t fp4_sm90_prefill_codes_size(int64_t n, int64_t k);
extern "C" size_t fp4_sm90_prefill_codes_size(int64_t n, int64_t k)
{
    return (size_t)pf_np(n) * (size_t)(pf_kp(k) / 2);
}
extern "C" size_t fp4_sm90_prefill_scales_size(int64_t n, int64_t k);
extern "C" size_t fp4_sm90_prefill_scales_size(int64_t n, int64_t k)
{
    return fp4_swizzled_size(n, k); /* = pf_np(n) * pf_kp(k) / 16 */
}

/* codes: [roundup(n,128), roundup(k,64)/2] zero-padded; scales: swizzled. */
extern "C" void fp4_sm90_prefill_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales)
{
    const int64_t N = b->rows, K = b->cols, Np = pf_np(N), rowp = pf_kp(K) / 2;
    memset(codes, 0, (size_t)Np * (size_t)rowp);
    for (int64_t r = 0; r < N; r++)
        memcpy(codes + (size_t)r * (size_t)rowp, b->codes + (size_t)r * (size_t)(K / 2),
               (size_t)(K / 2));
    (void)fp4_swizzle_scales(b->scales, N, K, scales, NULL);
}

extern "C" fp4_status fp4_sm90_prefill_init(fp4_err *err)
{
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_prefill_v2,
                                           cudaFuncAttributePreferredSharedMemoryCarveout,
                                           cudaSharedmemCarveoutMaxShared));
    return FP4_OK;
}

extern "C" fp4_status fp4_sm90_prefill_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                              fp4_err *err)
{
    const int64_t ntiles = pf_np(a->n) / PF_BN, mtiles = (a->m + PF_BM - 1) / PF_BM;
    const int KS = (int)(pf_kp(a->k) / PF_BK);
    if (mtiles > 65535)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 prefill: M=%lld needs over 65535 row tiles",
                        (long long)a->m);
    dim3 grid((unsigned)ntiles, (unsigned)mtiles);
    /* both operands carry 2^-7 from the dequantization */
    const float alpha_eff = a->alpha * 16384.0f;
    fp4_sm90_prefill_v2<<<grid, PF_THREADS, 0, stream>>>(a->a_codes, a->a_sf, a->b_codes, a->b_sf,
                                                         (__nv_bfloat16 *)a->d, (int)a->m,
                                                         (int)a->n, (int)a->k, KS, alpha_eff);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}
