/* fp4-sm90 "prefill-wide": NVFP4 x NVFP4 -> bf16 GEMM for large M and wide N
 * on Hopper (kernels fp4_sm90_a_tiles_kernel and fp4_sm90_prefill16_kernel;
 * the weight prepass is prefill.cu's).
 *
 * Both operands are dequantized by prepasses into fp16 tiles laid out as the
 * 128-byte-swizzled shared-memory tiles wgmma reads, so the main kernel is a
 * plain fp16 GEMM on a warp-specialized wgmma pipeline:
 * 1. the weight prepass (fp4_sm90_prefill_b_tiles): the packed weights ->
 *    16 KB blocks of 128 rows x one k-step, at the start of the workspace;
 * 2. the A prepass (fp4_sm90_a_tiles_kernel): the run-time tokens [M, K/2]
 *    and their swizzled scales -> the same kind of blocks after it. A block
 *    of 128 threads does PW_AG k-steps of one row tile, so that every global
 *    access is coalesced: the rows' code bytes and scale tiles into shared
 *    memory (the codes' 16-byte chunks XOR-swizzled by row, so that the next
 *    step reads them without bank conflicts), thread r dequantizes row r of
 *    each k-step (pw_row_to_tile), and one thread bulk-stores the tiles;
 * 3. the main kernel (fp4_sm90_prefill16_kernel), 384 threads: warps 0-7 are
 *    two consumer warpgroups (64 rows x BN each) that only wait on a slot's
 *    full mbarrier, issue the 4 wgmma m64nBNk16 with A and B by shared-memory
 *    descriptor, and release the previous slot (empty mbarrier); one thread
 *    of warps 8-11 bulk-copies A's 16 KB and B's BN x 128 bytes into each
 *    slot. Registers: the producers drop to 96 (setmaxnreg), the consumers
 *    take 200. Persistent: CTA c does tiles c, c + gridDim.x, ... in the tile
 *    order of raster.h (groups of row tiles, so that the tiles in flight
 *    share their operands in L2), the ring's stage counter running on across
 *    tiles, so the producer fills the next tile's first slots while the
 *    consumers store the last tile's D.
 * Cost of the A prepass: A's tiles are M x K x 2 bytes of workspace (4x A's
 * codes), written and read once more per call, which wide N amortizes. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/cuda_check.h"
#include "fp4/format.h"
#include "kernels/sm90/device.cuh"
#include "kernels/sm90/fp4_sm90.h"
#include "kernels/sm90/nibbles.h"
#include "kernels/sm90/raster.h"
#include "kernels/sm90/wgmma.cuh"

#define PW_CONSUMERS 256 /* two warpgroups */
#define PW_THREADS (PW_CONSUMERS + 128) /* + the producer warpgroup */
#define PW_REGS_CONSUMER 200
#define PW_REGS_PRODUCER 96
#define PW_WS_BLOCK 16384 /* a prepass block: 128 rows x 128 bytes of one k-step */
#define PW_EMPTY_COUNT PW_CONSUMERS

/* shared-memory map: [ST B tiles BN x 128][ST A tiles 128 x 128][ST full][ST empty] */
template <int BN, int ST> struct pw_cfg {
    static constexpr int BTILE = BN * 128; /* multiples of 1024: the swizzle's alignment */
    static constexpr int ATILE = WG_BM * 128;
    static constexpr int NBLK = BN / 128; /* weight prepass blocks a B tile */
    static constexpr int BBYTES = PW_WS_BLOCK;
    static constexpr int A_BASE = ST * BTILE;
    static constexpr int FULL_OFF = A_BASE + ST * ATILE;
    static constexpr int EMPTY_OFF = FULL_OFF + 8 * ST;
    static constexpr int SMEM = EMPTY_OFF + 8 * ST + 1024; /* +1024: alignment */
};
/* the instantiations (BN, ring depth): what fits 227 KB */
#define PW_FOR_EACH_CFG(X) X(256, 4) X(128, 7)

#ifdef FP4_SM90_HAVE_WGMMA
/* Row r of a k-step: its 32 code bytes (c0, c1) and 4 scales (sw) -> its 128
 * bytes of the swizzled fp16 A tile at tile. Code word i = 2 t + h (k-block
 * t, half h) gives, through pair j, the word t of chunk 2 j + h: the register
 * fragment of wg_a_frag in memory order, so the weight prepass's tiles pair
 * with these unchanged. */
static __device__ __forceinline__ void pw_row_to_tile(uint4 c0, uint4 c1, uint32_t sw,
                                                       unsigned char *tile, int r)
{
    const uint32_t s02 = sf2_to_h2(sw << 7), s13 = sf2_to_h2(sw >> 1); /* k-blocks (0, 2), (1, 3) */
    const uint32_t sc[4] = {__byte_perm(s02, 0, 0x1010), __byte_perm(s13, 0, 0x1010),
                            __byte_perm(s02, 0, 0x3232), __byte_perm(s13, 0, 0x3232)};
    const uint32_t w[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    uint32_t p[8][4];
#pragma unroll
    for (int i = 0; i < 8; i++) fp4_nib_pairs4(w[i], p[i]);
    unsigned char *row = tile + r * 128;
#pragma unroll
    for (int c = 0; c < 8; c++) {
        const int j = c >> 1, h = c & 1;
        uint4 v;
        v.x = hmul2_u32(p[h][j], sc[0]);
        v.y = hmul2_u32(p[2 + h][j], sc[1]);
        v.z = hmul2_u32(p[4 + h][j], sc[2]);
        v.w = hmul2_u32(p[6 + h][j], sc[3]);
        *(uint4 *)(row + ((c ^ (r & 7)) << 4)) = v;
    }
}

/* A consumer's k-step on ring stage g (counted over all tiles): wait until the slot is full, the warpgroup's 4 wgmmas (scale-d 0
 * when first), commit, wait until only they are in flight, then release the
 * previous stage's slot (release_prev). */
template <int BN, int ST>
static __device__ __forceinline__ void pw_consume(float *acc, uint32_t sbase, uint32_t a_off, int g,
                                                   bool first, bool release_prev)
{
    typedef pw_cfg<BN, ST> C;
    const int slot = g % ST;
    wg_mbar_wait(sbase + (uint32_t)(C::FULL_OFF + slot * 8), (uint32_t)((g / ST) & 1));
    wg_fence();
    wg_mma_ss_step<BN>(acc, sbase + (uint32_t)(C::A_BASE + slot * C::ATILE) + a_off,
                       sbase + (uint32_t)(slot * C::BTILE), first);
    wg_commit();
    wg_wait<1>(); /* stage g - 1 retired: its slot is free */
    if (release_prev) wg_mbar_arrive(sbase + (uint32_t)(C::EMPTY_OFF + ((g - 1) % ST) * 8));
}
#endif

/* ---- A prepass ---------------------------------------------------------------------- */

#define PW_AG 2 /* k-steps a prepass block */
#define PW_CPR (2 * PW_AG) /* 16-byte chunks of a staged row */
/* chunk c of staged row r: 8 consecutive rows' chunk c fall on 8 distinct
 * 16-byte bank groups (a row is 64 bytes at PW_AG = 2) */
#define PW_SWZ(r, c) ((((c) ^ ((r) >> 1)) & (PW_CPR - 1)) << 4)
#define PW_AG_SMEM (PW_AG * PW_WS_BLOCK + WG_BM * PW_AG * WG_ROWB + PW_AG * 512)

__global__ void __launch_bounds__(WG_BM)
    fp4_sm90_a_tiles_kernel(const uint8_t *__restrict__ aq, const uint8_t *__restrict__ asf, int M,
                            int K, int KS, uint8_t *__restrict__ tiles)
{
#ifdef FP4_SM90_HAVE_WGMMA
    extern __shared__ __align__(128) unsigned char pw_smem[];
    unsigned char *out = pw_smem;                         /* PW_AG x 16 KB */
    unsigned char *raw = out + PW_AG * PW_WS_BLOCK;      /* 128 rows x PW_AG x 32 bytes */
    unsigned char *sf = raw + WG_BM * PW_AG * WG_ROWB;    /* PW_AG x 512 */
    const int tid = threadIdx.x, mt = blockIdx.y, ks0 = blockIdx.x * PW_AG;
    const int nks = min(PW_AG, KS - ks0), arow = K / 2;
    const bool a16 = (arow % 16) == 0;
    /* 1. codes: chunk e = (row, 16-byte column c) of the block's 128 x 128 bytes */
#pragma unroll
    for (int i = 0; i < PW_CPR; i++) {
        const int e = i * WG_BM + tid, row = e / PW_CPR, c = e % PW_CPR;
        const int m = mt * WG_BM + row, kb = ks0 * WG_ROWB + c * 16;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (m < M) {
            const uint8_t *src = aq + (size_t)m * arow + kb;
            if (a16 && kb + 16 <= arow) {
                v = __ldg((const uint4 *)src);
            } else { /* K / 2 a multiple of 8: two aligned halves */
                if (kb + 8 <= arow) {
                    const uint2 h = __ldg((const uint2 *)src);
                    v.x = h.x, v.y = h.y;
                }
                if (kb + 16 <= arow) {
                    const uint2 h = __ldg((const uint2 *)(src + 8));
                    v.z = h.x, v.w = h.y;
                }
            }
        }
        *(uint4 *)(raw + row * (PW_AG * WG_ROWB) + PW_SWZ(row, c)) = v;
    }
    /* the scale tiles of k-steps ks0 .. ks0 + nks - 1: contiguous */
    const uint8_t *sf_src = asf + ((size_t)mt * KS + ks0) * 512;
    for (int e = tid; e < nks * 32; e += WG_BM)
        *(uint4 *)(sf + e * 16) = __ldg((const uint4 *)(sf_src + e * 16));
    __syncthreads();
    /* 2. row tid of each k-step: chunks 2 j and 2 j + 1 of its raw row */
    const int r = tid;
    for (int j = 0; j < nks; j++) {
        const uint4 c0 = *(const uint4 *)(raw + r * (PW_AG * WG_ROWB) + PW_SWZ(r, 2 * j));
        const uint4 c1 = *(const uint4 *)(raw + r * (PW_AG * WG_ROWB) + PW_SWZ(r, 2 * j + 1));
        const uint32_t sw = *(const uint32_t *)(sf + j * 512 + (r & 31) * 16 + (r >> 5) * 4);
        pw_row_to_tile(c0, c1, sw, out + j * PW_WS_BLOCK, r);
    }
    wg_fence_async_smem(); /* the generic stores, visible to the bulk copy */
    __syncthreads();
    /* 3. one bulk store of the nks consecutive tiles */
    if (tid == 0) {
        uint8_t *dst = tiles + ((size_t)mt * KS + ks0) * PW_WS_BLOCK;
        const uint32_t src = (uint32_t)__cvta_generic_to_shared(out);
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src),
                     "r"((uint32_t)(nks * PW_WS_BLOCK))
                     : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); /* done before the block exits */
    }
#else
    (void)aq, (void)asf, (void)M, (void)K, (void)KS, (void)tiles;
    __trap(); /* built for sm_90a only; the launch refuses other targets first */
#endif
}

/* ---- main kernel -------------------------------------------------------------------- */

/* The main kernel: the producer warpgroup is one thread that bulk-copies A's
 * 16 KB and B's BN x 128 bytes into each slot (full mbarrier: one arrival
 * with the bytes). Persistent: CTA c does tiles c, c + gridDim.x, ... (tile
 * t's m and n tile by fp4_raster_tile: in groups of `group` m tiles; group 0
 * is the plain order, the m tiles fastest), the ring's stage counter running
 * on across tiles.
 * at: the A prepass's tiles; bw: the weight prepass's tiles (BN 128 or 256). */
template <int BN, int ST>
__global__ void __launch_bounds__(PW_THREADS, 1)
    fp4_sm90_prefill16_kernel(const uint8_t *__restrict__ at, const uint8_t *__restrict__ bw,
                              __nv_bfloat16 *__restrict__ d, int M, int N, int KS, int mtiles,
                              int tiles, int group, float alpha_eff)
{
#ifdef FP4_SM90_HAVE_WGMMA
    typedef pw_cfg<BN, ST> C;
    extern __shared__ unsigned char pw_smem_raw[];
    uint32_t sbase = 0;
    unsigned char *smem = wg_smem_aligned(pw_smem_raw, &sbase);
    (void)smem;
    const int tid = threadIdx.x;
    if (tid == 0) {
        for (int i = 0; i < ST; i++) {
            wg_mbar_init(sbase + (uint32_t)(C::FULL_OFF + i * 8), 1);
            wg_mbar_init(sbase + (uint32_t)(C::EMPTY_OFF + i * 8), PW_EMPTY_COUNT);
        }
        wg_mbar_init_fence();
    }
    __syncthreads(); /* the only CTA-wide barrier */

    if (tid >= PW_CONSUMERS) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PW_REGS_PRODUCER));
        if (tid != PW_CONSUMERS) return;
        int g = 0; /* stages issued, over all tiles */
#pragma unroll 1
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            int mt, nt;
            fp4_raster_tile(t, mtiles, tiles / mtiles, group, &mt, &nt);
            const uint8_t *asrc = at + (size_t)mt * KS * PW_WS_BLOCK;
            const uint8_t *bsrc = bw + (size_t)(nt * BN / 128) * KS * PW_WS_BLOCK;
#pragma unroll 1
            for (int ls = 0; ls < KS; ls++, g++) {
                const int slot = g % ST, use = g / ST;
                const uint32_t full = sbase + (uint32_t)(C::FULL_OFF + slot * 8);
                if (use > 0) /* the consumers released this slot's previous use */
                    wg_mbar_wait(sbase + (uint32_t)(C::EMPTY_OFF + slot * 8), (uint32_t)((use - 1) & 1));
                wg_mbar_expect(full, (uint32_t)(PW_WS_BLOCK + C::NBLK * C::BBYTES));
                wg_bulk_g2s(sbase + (uint32_t)(C::A_BASE + slot * C::ATILE),
                            asrc + (size_t)ls * PW_WS_BLOCK, PW_WS_BLOCK, full);
#pragma unroll
                for (int b = 0; b < C::NBLK; b++) /* block b of k-step ls: (b KS + ls) */
                    wg_bulk_g2s(sbase + (uint32_t)(slot * C::BTILE + b * PW_WS_BLOCK),
                                bsrc + ((size_t)b * KS + ls) * PW_WS_BLOCK, C::BBYTES, full);
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(PW_REGS_CONSUMER));
    const uint32_t a_off = (uint32_t)((tid >> 7) * 64 * 128); /* my warpgroup's 64 rows */
    float acc[BN / 2]; /* each tile's first wgmma runs with scale-d = 0 */
    int g = 0;
#pragma unroll 1
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
#pragma unroll 1
        for (int s = 0; s < KS; s++, g++) pw_consume<BN, ST>(acc, sbase, a_off, g, s == 0, s > 0);
        wg_wait<0>();
        wg_mbar_arrive(sbase + (uint32_t)(C::EMPTY_OFF + ((g - 1) % ST) * 8)); /* the tile's last */
        wg_reg_fence<BN / 2>(acc);
        int mt, nt; /* the producer's order */
        fp4_raster_tile(t, mtiles, tiles / mtiles, group, &mt, &nt);
        wg_store_d<BN>(acc, d, M, N, mt * WG_BM, nt * BN, alpha_eff, tid);
    }
#else
    (void)at, (void)bw, (void)d, (void)M, (void)N, (void)KS, (void)mtiles, (void)tiles, (void)group;
    (void)alpha_eff;
    __trap(); /* wgmma: sm_90a only; the launch refuses other targets first */
#endif
}

/* ---- host side ---------------------------------------------------------------------- */

/* the weight prepass's tiles, then the A tiles (rows padded to 128) */
size_t fp4_sm90_prefill_wide_ws_size(int64_t m, int64_t n, int64_t k)
{
    const size_t ks = (size_t)((k + WG_BK - 1) / WG_BK);
    return fp4_sm90_prefill_ws_size(m, n, k) + (size_t)((m + WG_BM - 1) / WG_BM) * ks * PW_WS_BLOCK;
}

/* prefill's shapes, and the A prepass's grid y (m tiles) within 65535 */
int fp4_sm90_prefill_wide_fits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    return fp4_sm90_prefill_fits(m, n, k, num_sms) && (m + WG_BM - 1) / WG_BM <= 65535;
}

fp4_status fp4_sm90_prefill_wide_init(fp4_err *err)
{
#define PW_SET_SMEM(BN_, ST_)                                                                 \
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_prefill16_kernel<BN_, ST_>, \
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,         \
                                           pw_cfg<BN_, ST_>::SMEM));
    PW_FOR_EACH_CFG(PW_SET_SMEM)
#undef PW_SET_SMEM
    FP4_CUDA_TRY(err, cudaFuncSetAttribute((const void *)fp4_sm90_a_tiles_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, PW_AG_SMEM));
    return FP4_OK;
}

fp4_status fp4_sm90_prefill_wide_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream,
                                        fp4_err *err)
{
    if (!fp4_sm90_prefill_wide_fits(a->m, a->n, a->k, a->num_sms))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "fp4-sm90 prefill-wide: shape %lldx%lldx%lld not supported",
                        (long long)a->m, (long long)a->n, (long long)a->k);
    const int bn = a->tile_n ? a->tile_n : fp4_sm90_prefill_bn(a->m, a->n, a->k, a->num_sms);
    const void *kernel = NULL;
    int smem = 0;
#define PW_PICK(BN_, ST_)                                                                      \
    if (bn == BN_) kernel = (const void *)fp4_sm90_prefill16_kernel<BN_, ST_>, smem = pw_cfg<BN_, ST_>::SMEM;
    PW_FOR_EACH_CFG(PW_PICK)
#undef PW_PICK
    if (!kernel)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4-sm90 prefill-wide: tile width %d (128 or 256)",
                        bn);
    fp4_status st = fp4_sm90_wgmma_runs_here(kernel, "prefill-wide", err);
    if (st != FP4_OK) return st;
    const size_t ws_need = fp4_sm90_prefill_wide_ws_size(a->m, a->n, a->k);
    if (!a->workspace || a->workspace_bytes < ws_need || ((uintptr_t)a->workspace & 15))
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "fp4-sm90 prefill-wide: needs a 16-byte aligned workspace of %zu bytes "
                        "(got %zu at %p)",
                        ws_need, a->workspace ? a->workspace_bytes : (size_t)0, a->workspace);
    const int KS = (int)((a->k + WG_BK - 1) / WG_BK);
    const int mtiles = (int)((a->m + WG_BM - 1) / WG_BM);
    const int64_t tiles64 = (int64_t)mtiles * ((a->n + bn - 1) / bn);
    if (tiles64 > INT32_MAX)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 prefill-wide: %lld tiles",
                        (long long)tiles64);
    int sms = a->num_sms, dev = 0;
    if (sms <= 0) { /* not given: the device's */
        FP4_CUDA_TRY(err, cudaGetDevice(&dev));
        FP4_CUDA_TRY(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    }

    /* the two prepasses: the weights' tiles, then A's after them */
    uint8_t *a_tiles = (uint8_t *)a->workspace + fp4_sm90_prefill_ws_size(a->m, a->n, a->k);
    if ((st = fp4_sm90_prefill_b_tiles(a, stream, err)) != FP4_OK) return st;
    const dim3 agrid((unsigned)((KS + PW_AG - 1) / PW_AG), (unsigned)mtiles);
    fp4_sm90_a_tiles_kernel<<<agrid, WG_BM, PW_AG_SMEM, stream>>>(a->a_codes, a->a_sf, (int)a->m,
                                                                  (int)a->k, KS, a_tiles);
    FP4_CUDA_LAUNCH_TRY(err);

    /* persistent: as many CTAs as the waves need to give each the same number
     * of tiles (at most one a SM); a->ctas forces a count */
    const int tiles = (int)tiles64;
    const int waves = (tiles + sms - 1) / sms;
    int ctas = a->ctas > 0 ? a->ctas : (tiles + waves - 1) / waves;
    if (ctas > tiles) ctas = tiles;
    /* the tiles in flight (ctas of them) read the fewest operand bytes */
    const int group = a->group < 0 ? 0 : a->group > 0 ? a->group
                                                      : fp4_raster_group(ctas, mtiles, WG_BM, bn);
    const float alpha_eff = a->alpha * 16384.0f; /* both operands carry 2^-7 */
    const int M = (int)a->m, N = (int)a->n;
    const uint8_t *at = a_tiles;
    void *args[] = {(void *)&at,     (void *)&a->workspace, (void *)&a->d,   (void *)&M,
                    (void *)&N,      (void *)&KS,           (void *)&mtiles, (void *)&tiles,
                    (void *)&group,  (void *)&alpha_eff};
    FP4_CUDA_TRY(err, cudaLaunchKernel(kernel, dim3((unsigned)ctas), dim3(PW_THREADS), args,
                                       (size_t)smem, stream));
    return FP4_OK;
}
