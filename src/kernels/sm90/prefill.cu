/* fp4-sm90 "prefill": NVFP4 x NVFP4 -> bf16 GEMM for large M on Hopper, wgmma,
 * with B's dequantization out of the main loop (kernels
 * fp4_sm90_prefill8_dq_kernel and fp4_sm90_wg_ring_kernel<BN, ST, false>).
 *
 * Two kernels, launched back to back on the caller's stream (no allocation,
 * no synchronisation, graph-capturable):
 * 1. the weight prepass (fp4_sm90_prefill8_dq_kernel) dequantizes the packed
 *    weights into an fp16 workspace that is byte for byte the swizzled
 *    shared-memory B tile wgmma reads: for each 128-row block nt and k-step s
 *    (in that order), 16384 bytes [row rr][128 bytes], the 16-byte chunk c (8
 *    fp16 = value * scale * 2^-7, exact) of row rr at ((c ^ (rr & 7)) << 4).
 *    One thread writes one chunk; a warp writes 512 contiguous bytes. Bytes:
 *    N*K/2 + N*K/16 read, 2*N*K written.
 * 2. the main kernel (mainloop.cuh, TR false): 128 x BN x 64 CTA tiles, two
 *    consumer warpgroups, wgmma m64nBNk16 with A dequantized into registers
 *    and B's tiles bulk-copied from the workspace into a 6-deep ring. CTAs
 *    are ordered m-tile fastest, so the CTAs resident at one time share few B
 *    column tiles (B's fp16 tiles are 4x A's bytes).
 * Packed B (fp4_sm90_prefill_pack_b): rows padded to a multiple of 256, k to a
 * multiple of 64; block (n-tile of 128 rows, k-step s) = 4096 code bytes
 * [half h][row][16 bytes] (half h = code words 4h..4h+3 of the row) and 512
 * scale bytes [row][4]. The 64 k of a step are permuted as wgmma.cuh says, so
 * each 32-bit code word dequantizes to 8 consecutive fp16 of the tile.
 * The workspace: fp4_sm90_prefill_ws_size bytes, 16-byte aligned, fully
 * rewritten by every call (no zeroing needed); calls sharing it must be on one
 * stream. prefill-wide (prefill_wide.cu) uses the same packing and prepass. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_check.h"
#include "fp4/format.h"
#include "kernels/sm90/device.cuh"
#include "kernels/sm90/fp4_sm90.h"
#include "kernels/sm90/mainloop.cuh"
#include "kernels/sm90/wgmma.cuh"

#define PF_NPAD 256   /* packed rows are padded to a multiple of this */
#define PF_DQ_PER 4   /* chunks per prepass thread */
#define PF_STAGES 6   /* ring depth at both tile widths (6 beat 4 by 10-13% at 128 x 256) */

/* ---- weight prepass: packed fp4 -> swizzled fp16 tiles ------------------------------- */

/* bq / bsf: the packed B (blocks of 4096 code bytes [h][row][16] and 512 scale
 * bytes [row][4], block index nt * KS + s); ws: nchunks 16-byte chunks, chunk q
 * = block q >> 10, row (q >> 3) & 127, physical chunk q & 7. */
__global__ void __launch_bounds__(256)
    fp4_sm90_prefill8_dq_kernel(const uint8_t *__restrict__ bq, const uint8_t *__restrict__ bsf,
                                uint4 *__restrict__ ws, int64_t nchunks)
{
    const int64_t base = (int64_t)blockIdx.x * (256 * PF_DQ_PER) + threadIdx.x;
    uint32_t w[PF_DQ_PER], sw[PF_DQ_PER];
    /* all loads first: several in flight per thread */
#pragma unroll
    for (int i = 0; i < PF_DQ_PER; i++) {
        const int64_t q = base + i * 256;
        w[i] = sw[i] = 0;
        if (q < nchunks) {
            const int64_t blk = q >> 10;
            const int rr = (int)(q >> 3) & 127, c = ((int)q & 7) ^ (rr & 7);
            w[i] = ldg_stream4((const uint32_t *)(bq + blk * 4096 + (c >> 2) * 2048 + rr * 16 +
                                                  (c & 3) * 4));
            sw[i] = __ldg((const uint32_t *)(bsf + blk * 512 + rr * 4)); /* shared by 8 lanes */
        }
    }
#pragma unroll
    for (int i = 0; i < PF_DQ_PER; i++) {
        const int64_t q = base + i * 256;
        if (q < nchunks) {
            uint32_t sc[4];
            wg_b_scales(sw[i], sc);
            ws[q] = wg_b_word(w[i], sc);
        }
    }
}

/* ---- host side ---------------------------------------------------------------------- */

static int64_t pf_np(int64_t n) { return (n + PF_NPAD - 1) / PF_NPAD * PF_NPAD; }
static int64_t pf_ks(int64_t k) { return (k + WG_BK - 1) / WG_BK; }

/* physical k (0..63) inside a k-step of logical position P (0..63), see the top */
static int pf_perm(int P)
{
    const int j = P >> 4, q = P & 15;
    const int hi = q >> 3, t = (q & 7) >> 1, e = q & 1;
    return 16 * t + 8 * hi + j + 4 * e;
}


size_t fp4_sm90_prefill_codes_size(int64_t n, int64_t k)
{
    return (size_t)pf_np(n) * (size_t)pf_ks(k) * WG_ROWB;
}

size_t fp4_sm90_prefill_scales_size(int64_t n, int64_t k)
{
    return (size_t)pf_np(n) * (size_t)pf_ks(k) * 4;
}

/* codes: block (nt, s) of 128 rows at (nt * KS + s) * 4096: [h][row][16 bytes]; the
 * 32-bit word c (0..7) of a row holds logical positions 8c..8c+7 of the step,
 * nibble r = position 8c + 2r, nibble r + 4 = position 8c + 2r + 1.
 * scales: block (nt, s) at (nt * KS + s) * 512: [row][t] = scale of k-block 4s + t. */
void fp4_sm90_prefill_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales)
{
    const int64_t N = b->rows, K = b->cols, KS = pf_ks(K), KB = K / 16;
    int phys[64];
    for (int P = 0; P < 64; P++) phys[P] = pf_perm(P);
    memset(codes, 0, fp4_sm90_prefill_codes_size(N, K));
    memset(scales, 0, fp4_sm90_prefill_scales_size(N, K));
    for (int64_t n = 0; n < N; n++) {
        const int64_t nt = n / WG_BM, rr = n % WG_BM;
        const uint8_t *row = b->codes + (size_t)n * (size_t)(K / 2);
        for (int64_t s = 0; s < KS; s++) {
            uint8_t *blk = codes + ((size_t)nt * (size_t)KS + (size_t)s) * 4096;
            for (int c = 0; c < 8; c++) {
                uint32_t w = 0;
                for (int i = 0; i < 8; i++) {
                    const int P = 8 * c + 2 * (i & 3) + (i >> 2);
                    const int64_t k = 64 * s + phys[P];
                    uint32_t code = 0;
                    if (k < K) code = (row[k >> 1] >> (4 * (k & 1))) & 0xFu;
                    w |= code << (4 * i);
                }
                uint8_t *dst = blk + (c >> 2) * 2048 + rr * 16 + (c & 3) * 4;
                dst[0] = (uint8_t)w, dst[1] = (uint8_t)(w >> 8), dst[2] = (uint8_t)(w >> 16),
                dst[3] = (uint8_t)(w >> 24);
            }
            uint8_t *sb = scales + ((size_t)nt * (size_t)KS + (size_t)s) * 512 + rr * 4;
            for (int t = 0; t < 4; t++) {
                const int64_t kb = 4 * s + t;
                sb[t] = kb < KB ? b->scales[(size_t)n * (size_t)KB + (size_t)kb] : 0;
            }
        }
    }
}

/* fp16 tiles of every packed 128-row block (rows padded to 256) and k-step */
size_t fp4_sm90_prefill_ws_size(int64_t m, int64_t n, int64_t k)
{
    (void)m;
    return (size_t)(pf_np(n) / 128) * (size_t)pf_ks(k) * ML_WS_BLOCK;
}

int fp4_sm90_prefill_fits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    (void)num_sms;
    if (m < 1 || n < 1 || k < 16 || k % 16 != 0) return 0;
    if ((n + 127) / 128 > 65535) return 0; /* grid y (n tiles) */
    if (k / 2 > INT32_MAX / 2 || n > INT32_MAX - PF_NPAD || m > INT32_MAX - WG_BM) return 0;
    return 1;
}

/* BN = 256 unless 128-wide tiles fill the GPU clearly better: cost ~ waves *
 * tile time, a 128-wide tile taking ~0.55 of a 256-wide one (A's
 * dequantization is shared by fewer columns). */
int fp4_sm90_prefill_bn(int64_t m, int64_t n, int64_t k, int num_sms)
{
    (void)k;
    if (num_sms < 1) num_sms = 1;
    const int64_t mt = (m + WG_BM - 1) / WG_BM;
    const int64_t t256 = mt * ((n + 255) / 256), t128 = mt * ((n + 127) / 128);
    const double c256 = (double)((t256 + num_sms - 1) / num_sms) * 1.0;
    const double c128 = (double)((t128 + num_sms - 1) / num_sms) * 0.55;
    return c128 < c256 ? 128 : 256;
}

fp4_status fp4_sm90_prefill_init(fp4_err *err)
{
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_wg_ring_kernel<256, PF_STAGES, false>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           ml_cfg<256, PF_STAGES>::SMEM));
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_wg_ring_kernel<128, PF_STAGES, false>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           ml_cfg<128, PF_STAGES>::SMEM));
    return FP4_OK;
}

/* the shape fits and the workspace is there, large enough and aligned */
static fp4_status pf_check(const fp4_sm90_gemm_args *a, const char *name, size_t ws_need,
                           fp4_err *err)
{
    if (!fp4_sm90_prefill_fits(a->m, a->n, a->k, a->num_sms))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 %s: shape %lldx%lldx%lld not supported",
                        name, (long long)a->m, (long long)a->n, (long long)a->k);
    if (!a->workspace || a->workspace_bytes < ws_need || ((uintptr_t)a->workspace & 15))
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "fp4-sm90 %s: needs a 16-byte aligned workspace of %zu bytes (got %zu at %p)",
                        name, ws_need, a->workspace ? a->workspace_bytes : (size_t)0, a->workspace);
    return FP4_OK;
}

fp4_status fp4_sm90_prefill_b_tiles(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    const size_t bytes = fp4_sm90_prefill_ws_size(a->m, a->n, a->k);
    fp4_status st = pf_check(a, "weight prepass", bytes, err);
    if (st != FP4_OK) return st;
    const int64_t nchunks = (int64_t)(bytes / 16);
    const int64_t per_block = 256 * PF_DQ_PER;
    const unsigned blocks = (unsigned)((nchunks + per_block - 1) / per_block);
    fp4_sm90_prefill8_dq_kernel<<<blocks, 256, 0, stream>>>(a->b_codes, a->b_sf,
                                                            (uint4 *)a->workspace, nchunks);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

fp4_status fp4_sm90_prefill_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    fp4_status st = pf_check(a, "prefill", fp4_sm90_prefill_ws_size(a->m, a->n, a->k), err);
    if (st != FP4_OK) return st;
    const int bn = a->tile_n ? a->tile_n : fp4_sm90_prefill_bn(a->m, a->n, a->k, a->num_sms);
    const void *kernel = bn == 256   ? (const void *)fp4_sm90_wg_ring_kernel<256, PF_STAGES, false>
                         : bn == 128 ? (const void *)fp4_sm90_wg_ring_kernel<128, PF_STAGES, false>
                                     : NULL;
    if (!kernel)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 prefill: tile width %d (128 or 256)", bn);
    const int smem = bn == 256 ? ml_cfg<256, PF_STAGES>::SMEM : ml_cfg<128, PF_STAGES>::SMEM;
    if ((st = fp4_sm90_wgmma_runs_here(kernel, "prefill", err)) != FP4_OK) return st;
    if ((st = fp4_sm90_prefill_b_tiles(a, stream, err)) != FP4_OK) return st;

    const int KS = (int)pf_ks(a->k);
    const unsigned mtiles = (unsigned)((a->m + WG_BM - 1) / WG_BM);
    const unsigned ntiles = (unsigned)((a->n + bn - 1) / bn);
    const float alpha_eff = a->alpha * 16384.0f; /* both operands carry 2^-7 */
    const int M = (int)a->m, N = (int)a->n, K = (int)a->k;
    float *no_wsf = NULL;
    unsigned *no_cnt = NULL;
    void *args[] = {(void *)&a->a_codes, (void *)&a->a_sf, (void *)&a->workspace, (void *)&a->d,
                    (void *)&M,          (void *)&N,       (void *)&K,            (void *)&KS,
                    (void *)&alpha_eff,  (void *)&no_wsf,  (void *)&no_cnt};
    FP4_CUDA_TRY(err, cudaLaunchKernel(kernel, dim3(mtiles, ntiles), dim3(WG_THREADS), args,
                                       (size_t)smem, stream));
    return FP4_OK;
}
