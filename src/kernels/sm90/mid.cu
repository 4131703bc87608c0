/* fp4-sm90 "mid": NVFP4 x NVFP4 -> bf16 GEMM for mid M (about 32..2048 tokens)
 * on Hopper (kernels fp4_sm90_mid11_tok_kernel and
 * fp4_sm90_wg_ring_kernel<BN, ST, true>).
 *
 * The prefill loop tiles the tokens by 128 and has no split K, so below M ~
 * 2048 it runs on a fraction of the SMs, and decode (mma.sync) dequantizes
 * the weights again for every 32-token chunk. mid swaps the operands: the
 * weights are wgmma's register operand (packed so that a CTA's k-step is one
 * contiguous 4 KB block, with the standard swizzled scales; dequantized once
 * per weight element and token tile) and the tokens its shared-memory
 * operand:
 * 1. a token prepass (fp4_sm90_mid11_tok_kernel) turns the run-time tokens
 *    into the swizzled fp16 tiles of prefill's weight prepass, with the same
 *    k permutation (fp4_tokperm_word);
 * 2. the main kernel (mainloop.cuh, TR true) on grid (weight tiles of 128,
 *    token tiles of 64 / 128 / 256, K splits), K split until the CTAs fill
 *    the GPU once. The S CTAs of a tile are launched cooperatively
 *    (co-resident), store their fp32 partial tiles from the accumulators into
 *    their own slices (no atomics), meet at a per-tile arrival barrier and
 *    each reduce 1/S of the tile into D, in split order (deterministic). The
 *    main kernel is a programmatic dependent launch: its launch and set-up
 *    overlap the token prepass (griddepcontrol).
 * Workspace: the token tiles, the slabs [tile][S][BN / 8][256] float4 for the
 * largest S the co-residency bound allows (S x tiles <= MID_MAX_CTAS), two
 * counters a tile (zeroed once; every launch leaves them zero). */
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
#include "kernels/sm90/nibbles.h"
#include "kernels/sm90/wgmma.cuh"

#define MID_MAX_SPLITS 16
#define MID_MAX_CTAS 256 /* co-resident CTAs the workspace is sized for (>= SMs of any sm_90) */
#define MID_ALIGN(x) (((x) + 255) / 256 * 256)
/* the instantiations: (token tile, ring depth); the narrow tiles' stages are
 * small (12.5 and 20.5 KB), so their rings are deeper */
#define MID_FOR_EACH_CFG(X) X(256, 6) X(128, 10) X(64, 12)

/* ---- token prepass ------------------------------------------------------------------ */

/* Raw NVFP4 tokens (codes [M, K/2], swizzled scales) -> the swizzled fp16
 * tiles of prefill's weight prepass, k permutation included. Rows rows_out..:
 * not written (never read); rows M..rows_out - 1: zero. One thread a 16-byte
 * chunk: the four k-blocks of the row's step as four 8-byte loads (rows are
 * 8-byte aligned: K % 16 == 0) and the four scale bytes as one 4-byte load
 * (kb & 3 is the swizzle's innermost index), then fp4_tokperm_word. */
__global__ void __launch_bounds__(256)
    fp4_sm90_mid11_tok_kernel(const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf,
                             uint4 *__restrict__ ws, int M, int rows_out, int K, int KS,
                             int64_t nchunks)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* the main kernel may be scheduled now (it waits for this grid's end
     * before reading the tiles): hides the launch gap between the two */
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    const int64_t q = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (q >= nchunks) return;
    const int64_t blk = q >> 10;
    const int nt = (int)(blk / KS), s = (int)(blk % KS);
    const int rr = (int)(q >> 3) & 127, c = ((int)q & 7) ^ (rr & 7);
    const int m = nt * 128 + rr;
    if (m >= rows_out) return;
    if (m >= M) {
        ws[q] = make_uint4(0u, 0u, 0u, 0u);
        return;
    }
    const int KB = K / 16, nkb = KB - 4 * s < 4 ? KB - 4 * s : 4; /* k-blocks inside K */
    const uint64_t *row = (const uint64_t *)(aq + (size_t)m * (K / 2) + (size_t)s * 32);
    uint64_t w8[4];
#pragma unroll
    for (int r = 0; r < 4; r++) w8[r] = r < nkb ? __ldg(row + r) : 0ull;
    const uint32_t w = fp4_tokperm_word(w8, c);
    uint32_t sw = __ldg((const uint32_t *)(asf + swz_off(m, 4 * s, 4 * KS)));
    if (nkb < 4) sw &= (1u << (8 * nkb)) - 1u; /* the swizzle's padding bytes */
    uint32_t sc[4];
    wg_b_scales(sw, sc);
    ws[q] = wg_b_word(w, sc);
}

/* ---- host side ---------------------------------------------------------------------- */

static int64_t mid_rup(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
static int64_t mid_ks(int64_t k) { return (k + WG_BK - 1) / WG_BK; }

/* The weights as the main loop's A, the codes re-ordered so that a CTA's step is one
 * contiguous block: [128-row tile][k-step][row][32 bytes], rows and K padded
 * with zeros; the scales in the standard swizzled layout, whose 512-byte
 * atoms already are one (tile, k-step). */
size_t fp4_sm90_mid_codes_size(int64_t n, int64_t k)
{
    return (size_t)mid_rup(n, WG_BM) * (size_t)mid_ks(k) * 32;
}
size_t fp4_sm90_mid_scales_size(int64_t n, int64_t k) { return fp4_swizzled_size(n, k); }

void fp4_sm90_mid_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales)
{
    const int64_t N = b->rows, K = b->cols, KB = K / 16, kbp = fp4_swizzled_kblocks(K);
    const int64_t KS = mid_ks(K), rowb = K / 2;
    memset(codes, 0, fp4_sm90_mid_codes_size(N, K));
    for (int64_t n = 0; n < N; n++)
        for (int64_t s = 0; s < KS; s++) {
            const int64_t len = rowb - 32 * s < 32 ? rowb - 32 * s : 32;
            memcpy(codes + (((size_t)(n / WG_BM) * (size_t)KS + (size_t)s) * WG_BM + (size_t)(n % WG_BM)) * 32,
                   b->codes + (size_t)n * (size_t)rowb + (size_t)s * 32, (size_t)len);
        }
    memset(scales, 0, fp4_sm90_mid_scales_size(N, K));
    for (int64_t n = 0; n < N; n++)
        for (int64_t kb = 0; kb < KB; kb++)
            scales[fp4_swizzle_offset(n, kb, kbp)] = b->scales[(size_t)n * (size_t)KB + (size_t)kb];
}

/* the tokens' fp16 tiles (rows padded to 256) */
static size_t mid_tok_bytes(int64_t m, int64_t k)
{
    return (size_t)(mid_rup(m, 256) / 128) * (size_t)mid_ks(k) * ML_WS_BLOCK;
}

int fp4_sm90_mid_fits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    (void)num_sms;
    if (m < 1 || n < 1 || k < 16 || k % 16 != 0) return 0;
    if ((m + 63) / 64 > 65535) return 0; /* grid y (token tiles) */
    if (k / 2 > INT32_MAX / 2 || n > INT32_MAX - WG_BM || m > INT32_MAX - 256) return 0;
    return 1;
}

/* Token tiles of 64 (M <= 64), 128 (M <= 256: at 256 tokens two 128-token
 * tiles with half the splits beat one 256-token tile) or 256; tile_n > 0
 * forces it. Splits: until the CTAs fill the GPU once (at most 16, at least 4
 * k-steps a split; splits > 0 forces a count, at most the k-steps), then
 * clamped so that the CTAs co-reside (tiles x S <= SMs). */
void fp4_sm90_mid_cfg(int64_t m, int64_t n, int64_t k, int num_sms, int tile_n, int splits,
                      int *bn, int *s_out)
{
    *bn = tile_n == 64 || tile_n == 128 || tile_n == 256 ? tile_n
          : m <= 64                                      ? 64
          : m <= 256                                     ? 128
                                                         : 256;
    const int64_t tiles = ((n + WG_BM - 1) / WG_BM) * ((m + *bn - 1) / *bn), ks = mid_ks(k);
    int64_t s;
    if (splits > 0) {
        s = splits < ks ? splits : ks;
    } else {
        s = num_sms > 0 ? num_sms / tiles : 1;
        if (s > ks / 4) s = ks / 4;
        if (s > MID_MAX_SPLITS) s = MID_MAX_SPLITS;
    }
    int64_t cap = (num_sms < MID_MAX_CTAS ? num_sms : MID_MAX_CTAS) / tiles; /* co-resident */
    if (cap < 1) cap = 1;
    if (s > cap) s = cap;
    *s_out = s < 1 ? 1 : (int)s;
}

/* the slabs for the largest split count any call of this shape and token
 * tile can use (forced beyond the k-steps, SMs <= MID_MAX_CTAS) */
static size_t mid_slab_bytes(int64_t m, int64_t n, int64_t k, int bn, int64_t *tiles)
{
    int bn_used = 0, smax = 1;
    fp4_sm90_mid_cfg(m, n, k, MID_MAX_CTAS, bn, INT32_MAX, &bn_used, &smax);
    *tiles = ((n + WG_BM - 1) / WG_BM) * ((m + bn_used - 1) / bn_used);
    return smax > 1 ? (size_t)*tiles * (size_t)smax * (size_t)bn_used * WG_BM * 4 : 0;
}

/* token tiles, slabs and counters for token tile bn (0: the automatic one) */
static size_t mid_ws_bytes(int64_t m, int64_t n, int64_t k, int bn)
{
    int64_t tiles = 0;
    const size_t slabs = mid_slab_bytes(m, n, k, bn, &tiles);
    return MID_ALIGN(mid_tok_bytes(m, k)) + MID_ALIGN(slabs) + MID_ALIGN((size_t)tiles * 8);
}

size_t fp4_sm90_mid_ws_size(int64_t m, int64_t n, int64_t k)
{
    return mid_ws_bytes(m, n, k, 0);
}

fp4_status fp4_sm90_mid_init(fp4_err *err)
{
#define MID_SET_SMEM(BN_, ST_)                                                                 \
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_wg_ring_kernel<BN_, ST_, true>, \
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,         \
                                           ml_cfg<BN_, ST_>::SMEM));
    MID_FOR_EACH_CFG(MID_SET_SMEM)
#undef MID_SET_SMEM
    return FP4_OK;
}

fp4_status fp4_sm90_mid_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    if (!fp4_sm90_mid_fits(a->m, a->n, a->k, a->num_sms))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 mid: shape %lldx%lldx%lld not supported",
                        (long long)a->m, (long long)a->n, (long long)a->k);
    const size_t ws_need = mid_ws_bytes(a->m, a->n, a->k, a->tile_n);
    if (!a->workspace || a->workspace_bytes < ws_need || ((uintptr_t)a->workspace & 15))
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "fp4-sm90 mid: needs a 16-byte aligned, once-zeroed workspace of %zu "
                        "bytes (got %zu at %p)",
                        ws_need, a->workspace ? a->workspace_bytes : (size_t)0, a->workspace);
    if (a->tile_n && a->tile_n != 64 && a->tile_n != 128 && a->tile_n != 256)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 mid: token tile %d (64, 128 or 256)",
                        a->tile_n);
    int bn = 0, splits = 1;
    fp4_sm90_mid_cfg(a->m, a->n, a->k, a->num_sms, a->tile_n, a->splits, &bn, &splits);
    const void *kernel = NULL;
    int smem = 0;
#define MID_PICK(BN_, ST_)                                                                     \
    if (bn == BN_) kernel = (const void *)fp4_sm90_wg_ring_kernel<BN_, ST_, true>, smem = ml_cfg<BN_, ST_>::SMEM;
    MID_FOR_EACH_CFG(MID_PICK)
#undef MID_PICK
    fp4_status st = fp4_sm90_wgmma_runs_here(kernel, "mid", err);
    if (st != FP4_OK) return st;

    int64_t tiles = 0;
    const size_t slabs = mid_slab_bytes(a->m, a->n, a->k, bn, &tiles);
    uint8_t *ws = (uint8_t *)a->workspace;
    float *wsf = (float *)(ws + MID_ALIGN(mid_tok_bytes(a->m, a->k)));
    unsigned *cnt = (unsigned *)((uint8_t *)wsf + MID_ALIGN(slabs));
    const int KS = (int)mid_ks(a->k);

    /* the token prepass: the rows the bn-token tiles read */
    const int64_t rows_out = mid_rup(a->m, bn);
    const int64_t nchunks = (mid_rup(rows_out, 128) / 128) * KS * 1024;
    fp4_sm90_mid11_tok_kernel<<<(unsigned)((nchunks + 255) / 256), 256, 0, stream>>>(
        a->a_codes, a->a_sf, (uint4 *)ws, (int)a->m, (int)rows_out, (int)a->k, KS, nchunks);
    FP4_CUDA_LAUNCH_TRY(err);

    const float alpha_eff = a->alpha * 16384.0f; /* both operands carry 2^-7 */
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((a->n + WG_BM - 1) / WG_BM), (unsigned)((a->m + bn - 1) / bn),
                       (unsigned)splits);
    cfg.blockDim = dim3(WG_THREADS);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    unsigned nattr = 0;
    if (splits > 1) { /* the tile barrier needs the S CTAs co-resident */
        attr[nattr].id = cudaLaunchAttributeCooperative;
        attr[nattr++].val.cooperative = 1;
    }
    /* overlap the prepass's tail (griddepcontrol) */
    attr[nattr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[nattr++].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = nattr;
    const uint8_t *wq = a->b_codes, *wsc = a->b_sf, *tok = ws;
    const int Mw = (int)a->n, Nt = (int)a->m, K = (int)a->k;
    void *args[] = {(void *)&wq,        (void *)&wsc, (void *)&tok, (void *)&a->d,
                    (void *)&Mw,        (void *)&Nt,  (void *)&K,   (void *)&KS,
                    (void *)&alpha_eff, (void *)&wsf, (void *)&cnt};
    FP4_CUDA_TRY(err, cudaLaunchKernelExC(&cfg, kernel, args));
    return FP4_OK;
}
