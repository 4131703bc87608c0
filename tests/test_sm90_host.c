/* fp4-sm90's host-side rules, no GPU needed: the choice of kernel
 * (fp4_sm90_choose) on both sides of each measured crossover (docs/PERF.md,
 * "The selection rule"), FP4_SM90_KERNEL's names, the argument checks
 * (fp4_sm90_check makes no CUDA call) and the workspaces of every kernel, mid's
 * weight packing, tiles and splits; the k permutation of the token prepass's
 * word form (fp4_tokperm_word) against its byte-wise definition; the nibble
 * -> fp16 and bf16 dequantizations (nibbles.h) and prefill-wide's tile order
 * (raster.h), which need no CUDA. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_rng.h"
#include "fp4/format.h"
#include "kernels/sm90/nibbles.h"
#include "kernels/sm90/raster.h"

static float half_bits_value(uint32_t h)
{
    const int e = (int)(h >> 10) & 31, man = (int)(h & 1023);
    const float mag = e == 0 ? ldexpf((float)man, -24) : ldexpf(1.0f + (float)man / 1024.0f, e - 15);
    return (h & 0x8000u) ? -mag : mag;
}

/* fp4_nib_pairs4 == fp4_nib_pair for every word: both are built from shifts,
 * rotations, constant masks and ORs of disjoint fields, so each output bit
 * copies at most one input bit and f(x | y) = f(x) | f(y); equality on 0 and
 * the 32 one-bit words is equality everywhere (random words checked too).
 * And the pattern is the format's decode times 2^-14, every nibble value at
 * every position. */
static void test_nibbles(void)
{
    int bad = 0;
    for (int b = -1; b < 32; b++) {
        const uint32_t x = b < 0 ? 0u : 1u << b;
        uint32_t o[4];
        fp4_nib_pairs4(x, o);
        for (int r = 0; r < 4; r++) bad += o[r] != fp4_nib_pair(x, r);
    }
    CHECK_MSG(bad == 0, "%d one-bit words differ", bad);
    test_rng rng = test_rng_seed(12345);
    bad = 0;
    for (int i = 0; i < 1000000; i++) {
        const uint32_t seed = (uint32_t)test_rng_u64(&rng);
        uint32_t o[4];
        fp4_nib_pairs4(seed, o);
        for (int r = 0; r < 4; r++) bad += o[r] != fp4_nib_pair(seed, r);
    }
    CHECK_MSG(bad == 0, "%d random words differ", bad);
    bad = 0;
    for (int pos = 0; pos < 8; pos++)
        for (uint32_t v = 0; v < 16; v++) {
            const uint32_t x = (0x9B5E2C71u & ~(15u << (4 * pos))) | v << (4 * pos);
            uint32_t o[4];
            fp4_nib_pairs4(x, o);
            const uint32_t half = o[pos & 3] >> (pos >= 4 ? 16 : 0) & 0xFFFFu;
            bad += half_bits_value(half) != ldexpf(fp4_e2m1_decode((uint8_t)v), -14);
        }
    CHECK_MSG(bad == 0, "%d nibbles decode wrong", bad);
}

static float bf16_bits_value(uint32_t h)
{
    const uint32_t bits = h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The bf16 value layout of the MoE kernels' packed weights: the patterns are
 * the format's decode times 2^-126 for every nibble value at every position,
 * and fp4_nib_bf16_pairs undoes fp4_nib_bf16_pack (pair r = codes 2r, 2r + 1)
 * on random words, code by code. */
static void test_nibbles_bf16(void)
{
    int bad = 0;
    for (int pos = 0; pos < 8; pos++)
        for (uint32_t v = 0; v < 16; v++) {
            uint8_t c[8] = {3, 12, 7, 0, 9, 15, 1, 6};
            c[pos] = (uint8_t)v;
            uint32_t o[4];
            fp4_nib_bf16_pairs(fp4_nib_bf16_pack(c), o);
            const uint32_t half = o[pos >> 1] >> (16 * (pos & 1)) & 0xFFFFu;
            bad += bf16_bits_value(half) != ldexpf(fp4_e2m1_decode((uint8_t)v), -126);
        }
    CHECK_MSG(bad == 0, "%d nibbles decode wrong", bad);
    test_rng rng = test_rng_seed(777);
    bad = 0;
    for (int i = 0; i < 200000; i++) {
        const uint64_t r = test_rng_u64(&rng);
        uint8_t c[8];
        uint32_t o[4];
        for (int j = 0; j < 8; j++) c[j] = (uint8_t)(r >> (4 * j) & 15);
        fp4_nib_bf16_pairs(fp4_nib_bf16_pack(c), o);
        for (int j = 0; j < 8; j++) {
            const uint32_t half = o[j >> 1] >> (16 * (j & 1)) & 0xFFFFu;
            bad += bf16_bits_value(half) != ldexpf(fp4_e2m1_decode(c[j]), -126);
        }
    }
    CHECK_MSG(bad == 0, "%d codes of random words differ", bad);
}

/* fp4_raster_tile visits every tile exactly once, for groups that divide
 * the row tiles, leave a remainder, equal or exceed them, and the plain
 * order; within a group the row tile runs fastest; and fp4_raster_group's
 * choice for prefill-wide's grids (128-132 tiles in flight). */
static void test_raster(void)
{
    static const int grids[][2] = {{1, 1}, {8, 3}, {64, 32}, {33, 7}, {5, 40}, {32, 8}};
    static const int groups[] = {0, 1, 3, 5, 8, 15, 16, 64, 100};
    for (size_t gi = 0; gi < sizeof grids / sizeof grids[0]; gi++)
        for (size_t k = 0; k < sizeof groups / sizeof groups[0]; k++) {
            const int mt = grids[gi][0], nt = grids[gi][1], grp = groups[k], tiles = mt * nt;
            unsigned char *seen = calloc((size_t)tiles, 1);
            int bad = 0, order = 0;
            for (int t = 0; t < tiles; t++) {
                int m, n;
                fp4_raster_tile(t, mt, nt, grp, &m, &n);
                if (m < 0 || m >= mt || n < 0 || n >= nt || seen[m * nt + n]++) bad++;
                if (grp <= 0 || grp >= mt) order += m != t % mt || n != t / mt;
            }
            CHECK_MSG(bad == 0, "raster %dx%d group %d: %d tiles out of range or repeated", mt, nt, grp, bad);
            CHECK_MSG(order == 0, "raster %dx%d group %d: not the plain order", mt, nt, grp);
            free(seen);
        }
    int m, n; /* 64 x 32 tiles in groups of 15: tile 15 is row 0, column 1 */
    fp4_raster_tile(15, 64, 32, 15, &m, &n);
    CHECK(m == 0 && n == 1);
    fp4_raster_tile(15 * 32, 64, 32, 15, &m, &n); /* the second group's first */
    CHECK(m == 15 && n == 0);
    fp4_raster_tile(4 * 15 * 32 + 5, 64, 32, 15, &m, &n); /* the last group: 4 rows */
    CHECK(m == 61 && n == 1);
    /* G 128 + ceil(C / G) BN rows of operands: 8192^3's 128 CTAs at BN = 256
     * take 16 (4096); 132 take 15 (4224) at BN = 256 and 11 at 128 (1408 + 12
     * x 128 = 2944); the plain order when there are fewer rows */
    CHECK(fp4_raster_group(128, 64, 128, 256) == 16);
    CHECK(fp4_raster_group(132, 64, 128, 256) == 15);
    CHECK(fp4_raster_group(132, 64, 128, 128) == 11);
    CHECK(fp4_raster_group(132, 8, 128, 256) == 8);
    CHECK(fp4_raster_group(1, 64, 128, 256) == 1);
}

#ifdef FP4_HAVE_CUDA
#include "kernels/sm90/fp4_sm90.h"

/* device pointers are only compared and aligned, never dereferenced */
static _Alignas(16) uint8_t fake[64];

static void test_checks(void)
{
    fp4_err err;
    fp4_sm90_gemm_args a;
    memset(&a, 0, sizeof a);
    a.n = 2048;
    a.k = 6144;
    a.a_codes = a.a_sf = a.b_codes = a.b_sf = fake;
    a.d = (uint16_t *)fake;
    a.alpha = 1.0f;
    a.num_sms = 132;
    /* every kernel needs its workspace: decode for its split-K sums and
     * counters, mid for the token tiles and slices, the prefills for the
     * prepasses' tiles */
    for (int id = FP4_SM90_DECODE; id <= FP4_SM90_PREFILL_WIDE; id++) {
        a.kernel = id;
        a.m = id >= FP4_SM90_PREFILL ? 4096 : 16;
        const size_t need = fp4_sm90_workspace_size(a.kernel, a.m, a.n, a.k);
        CHECK(need > 0);
        a.workspace = NULL;
        a.workspace_bytes = 0;
        CHECK(fp4_sm90_check(&a, &err) == FP4_ERR_INVALID_ARG);
        CHECK(strstr(fp4_err_text(&err), "workspace") != NULL);
        a.workspace = fake;
        a.workspace_bytes = need - 1; /* one byte short */
        CHECK(fp4_sm90_check(&a, &err) == FP4_ERR_INVALID_ARG);
        a.workspace_bytes = need;
        CHECK(fp4_sm90_check(&a, &err) == FP4_OK);
        a.workspace = fake + 8; /* misaligned */
        CHECK(fp4_sm90_check(&a, &err) == FP4_ERR_UNSUPPORTED);
        a.workspace = fake;
        a.splits = -1; /* overrides are counts */
        CHECK(fp4_sm90_check(&a, &err) == FP4_ERR_INVALID_ARG);
        a.splits = 0;
    }
    /* prefill's fp16 B: 2 bytes an element of B padded to 256 rows and 64 k */
    CHECK(fp4_sm90_workspace_size(FP4_SM90_PREFILL, 4096, 2048, 6144) == (size_t)2048 * 6144 * 2);
    /* prefill-wide: prefill's, then A's fp16 tiles (rows padded to 128, k to 64) */
    CHECK(fp4_sm90_workspace_size(FP4_SM90_PREFILL_WIDE, 4096, 2048, 6144) ==
          (size_t)2048 * 6144 * 2 + (size_t)4096 * 6144 * 2);
    CHECK(fp4_sm90_workspace_size(FP4_SM90_PREFILL_WIDE, 129, 200, 2880) ==
          (size_t)256 * 2880 * 2 + (size_t)256 * 2880 * 2);
    /* mid: the tokens' fp16 tiles (rows padded to 256), then the slices for
     * the most splits any call can use (forced beyond the k-steps, up to 256
     * co-resident CTAs): 200 tokens are two 128-token tiles a 128-row block,
     * 32 tiles, 8 splits (256 / 32), 64 KB a slice; two counters a tile */
    CHECK(fp4_sm90_workspace_size(FP4_SM90_MID, 200, 2048, 6144) ==
          (size_t)256 * 6144 * 2 + (size_t)32 * 8 * 128 * 128 * 4 + 256);
    /* more tiles than 256 CTAs: one split, no slices */
    CHECK(fp4_sm90_workspace_size(FP4_SM90_MID, 1024, 28672, 4096) ==
          (size_t)1024 * 4096 * 2 + 256 * ((224 * 4 * 8 + 255) / 256));
    a.kernel = FP4_SM90_DECODE;
    a.m = 16;
    a.workspace_bytes = fp4_sm90_workspace_size(a.kernel, a.m, a.n, a.k);
    CHECK(fp4_sm90_check(&a, &err) == FP4_OK);
    a.k = 6136; /* not a multiple of 16 */
    CHECK(fp4_sm90_check(&a, &err) == FP4_ERR_SHAPE);
    a.k = 6144;
    a.m = 0;
    CHECK(fp4_sm90_check(&a, &err) == FP4_ERR_SHAPE);
    a.m = 16;
    a.kernel = 99;
    CHECK(fp4_sm90_check(&a, &err) == FP4_ERR_INVALID_ARG);
    a.kernel = FP4_SM90_AUTO; /* a call names the kernel it runs */
    CHECK(fp4_sm90_check(&a, &err) == FP4_ERR_INVALID_ARG);
}

/* mid's weight packing: [128-row tile][k-step][row][32 bytes], zero padded;
 * the scales in the standard swizzled layout */
static void test_mid_pack(void)
{
    const int64_t N = 130, K = 80, KS = 2, rowb = K / 2;
    fp4_matrix b;
    fp4_err err;
    CHECK(fp4_matrix_alloc(&b, N, K, &err) == FP4_OK);
    for (int64_t i = 0; i < N * rowb; i++) b.codes[i] = (uint8_t)(i * 37 + 11);
    for (int64_t i = 0; i < N * (K / 16); i++) b.scales[i] = (uint8_t)(i * 13 + 5);
    const size_t cs = fp4_sm90_packed_b_codes_size(FP4_SM90_MID, N, K);
    const size_t ss = fp4_sm90_packed_b_scales_size(FP4_SM90_MID, N, K);
    CHECK(cs == (size_t)256 * KS * 32);
    uint8_t *codes = malloc(cs), *scales = malloc(ss);
    CHECK(codes && scales);
    if (!codes || !scales) return;
    CHECK(fp4_sm90_pack_b(FP4_SM90_MID, &b, codes, scales, &err) == FP4_OK);
    int bad = 0;
    for (int64_t n = 0; n < 256; n++)
        for (int64_t s = 0; s < KS; s++)
            for (int64_t j = 0; j < 32; j++) {
                const uint8_t want = n < N && 32 * s + j < rowb ? b.codes[n * rowb + 32 * s + j] : 0;
                bad += codes[(((n / 128) * KS + s) * 128 + n % 128) * 32 + j] != want;
            }
    CHECK(bad == 0);
    bad = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t kb = 0; kb < K / 16; kb++)
            bad += scales[fp4_swizzle_offset(n, kb, fp4_swizzled_kblocks(K))] != b.scales[n * (K / 16) + kb];
    CHECK(bad == 0);
    CHECK(fp4_sm90_pack_b(99, &b, codes, scales, &err) == FP4_ERR_INVALID_ARG);
    free(codes);
    free(scales);
    fp4_matrix_free(&b);
}

/* fp4_tokperm_word against the byte-wise definition: position 8c + 2r + h of
 * a step is k = 16r + 8(c & 1) + (c >> 1) + 4h, read as the nibble k & 1 of
 * byte k >> 1 of the row's 32 code bytes */
static void test_tokperm(void)
{
    test_rng rng = test_rng_seed(12345);
    for (int trial = 0; trial < 200; trial++) {
        uint8_t bytes[32];
        for (int i = 0; i < 32; i++) bytes[i] = (uint8_t)(test_rng_u64(&rng) >> 56);
        uint64_t blk[4];
        for (int r = 0; r < 4; r++) {
            blk[r] = 0;
            for (int j = 0; j < 8; j++) blk[r] |= (uint64_t)bytes[8 * r + j] << (8 * j);
        }
        for (int c = 0; c < 8; c++) {
            uint32_t want = 0;
            for (int r = 0; r < 4; r++)
                for (int h = 0; h < 2; h++) {
                    const int k = 16 * r + 8 * (c & 1) + (c >> 1) + 4 * h;
                    const uint32_t nib = (uint32_t)(bytes[k >> 1] >> (4 * (k & 1))) & 0xFu;
                    want |= nib << (4 * (r + 4 * h));
                }
            CHECK_MSG(fp4_tokperm_word(blk, c) == want, "tokperm trial %d chunk %d: %08x, want %08x",
                      trial, c, fp4_tokperm_word(blk, c), want);
        }
    }
}

/* the rule on both sides of each crossover (docs/PERF.md lists the
 * measurements behind them) */
static void test_rule(void)
{
    const int sms = 132;
    /* decode up to M = 32, and up to M = 96 at N <= 1024 */
    CHECK(fp4_sm90_choose(1, 2048, 6144, sms) == FP4_SM90_DECODE);
    CHECK(fp4_sm90_choose(16, 28672, 4096, sms) == FP4_SM90_DECODE);
    CHECK(fp4_sm90_choose(32, 2048, 6144, sms) == FP4_SM90_DECODE);
    CHECK(fp4_sm90_choose(64, 768, 6144, sms) == FP4_SM90_DECODE);
    CHECK(fp4_sm90_choose(96, 768, 6144, sms) == FP4_SM90_DECODE);
    /* mid above, up to the prefill switch */
    CHECK(fp4_sm90_choose(33, 2048, 6144, sms) == FP4_SM90_MID);
    CHECK(fp4_sm90_choose(64, 2048, 6144, sms) == FP4_SM90_MID);
    CHECK(fp4_sm90_choose(96, 8192, 8192, sms) == FP4_SM90_MID);
    CHECK(fp4_sm90_choose(97, 768, 6144, sms) == FP4_SM90_MID);
    CHECK(fp4_sm90_choose(512, 2048, 6144, sms) == FP4_SM90_MID);
    CHECK(fp4_sm90_choose(1024, 2048, 6144, sms) == FP4_SM90_MID);
    CHECK(fp4_sm90_choose(2047, 768, 6144, sms) == FP4_SM90_MID);
    CHECK(fp4_sm90_choose(1024, 8192, 8192, sms) == FP4_SM90_MID);
    CHECK(fp4_sm90_choose(3000, 200, 6144, sms) == FP4_SM90_MID); /* M x N small */
    /* prefill from M = 2048 once M x N > 1024 x 768, below N = 4096 */
    CHECK(fp4_sm90_choose(2048, 768, 6144, sms) == FP4_SM90_PREFILL);
    CHECK(fp4_sm90_choose(2048, 2048, 6144, sms) == FP4_SM90_PREFILL);
    CHECK(fp4_sm90_choose(8192, 2048, 6144, sms) == FP4_SM90_PREFILL);
    CHECK(fp4_sm90_choose(8192, 4095, 6144, sms) == FP4_SM90_PREFILL);
    /* prefill-wide from N = 4096 */
    CHECK(fp4_sm90_choose(8192, 8192, 8192, sms) == FP4_SM90_PREFILL_WIDE);
    CHECK(fp4_sm90_choose(4096, 4096, 4096, sms) == FP4_SM90_PREFILL_WIDE);
    CHECK(fp4_sm90_choose(2048, 28672, 4096, sms) == FP4_SM90_PREFILL_WIDE);
    /* past 65535 row tiles of 128 (the A prepass's grid) prefill runs instead */
    CHECK(fp4_sm90_choose((int64_t)65536 * 128, 4096, 64, sms) == FP4_SM90_PREFILL);
    /* a shape no kernel can run: none (the backend reports it unsupported) */
    CHECK(fp4_sm90_choose(16, (int64_t)1 << 40, 64, sms) == FP4_SM90_AUTO);
    for (int id = FP4_SM90_DECODE; id <= FP4_SM90_PREFILL_WIDE; id++)
        CHECK(!fp4_sm90_kernel_fits(id, 16, 2048, 40, sms)); /* K % 16 != 0 */

    /* mid's tiles and splits: one wave of co-resident CTAs, at least 4
     * k-steps a split, at most 16 */
    int bn = 0, splits = 0;
    fp4_sm90_mid_cfg(256, 2048, 6144, sms, 0, 0, &bn, &splits);
    CHECK(bn == 128 && splits == 4); /* 128-token tiles up to 256 tokens: 32 tiles x 4 */
    fp4_sm90_mid_cfg(256, 2048, 6144, sms, 0, 45, &bn, &splits);
    CHECK(splits == 4); /* forced, clamped to the co-resident CTAs: 132 / 32 */
    fp4_sm90_mid_cfg(64, 2048, 6144, sms, 0, 0, &bn, &splits);
    CHECK(bn == 64 && splits == 8);
    fp4_sm90_mid_cfg(512, 2048, 6144, sms, 0, 0, &bn, &splits);
    CHECK(bn == 256 && splits == 4);
    fp4_sm90_mid_cfg(1024, 28672, 4096, sms, 0, 3, &bn, &splits);
    CHECK(splits == 1); /* 896 tiles: more than the SMs */
    fp4_sm90_mid_cfg(100, 200, 6144, sms, 0, 0, &bn, &splits);
    CHECK(bn == 128 && splits == 16); /* 2 tiles; at most 16 */
    fp4_sm90_mid_cfg(600, 2048, 48, sms, 0, 0, &bn, &splits);
    CHECK(bn == 256 && splits == 1); /* one k-step */
    fp4_sm90_mid_cfg(16, 2048, 2880, sms, 256, 0, &bn, &splits);
    CHECK(bn == 256); /* the tile forced */

    /* FP4_SM90_KERNEL: the four names and auto; anything else is an error */
    static const char *names[] = {"decode", "mid", "prefill", "prefill-wide"};
    for (int i = 0; i < 4; i++) {
        CHECK(fp4_sm90_kernel_parse(names[i]) == i + 1);
        CHECK(strcmp(fp4_sm90_kernel_by_id(i + 1)->name, names[i]) == 0);
        setenv("FP4_SM90_KERNEL", names[i], 1);
        CHECK(fp4_sm90_forced() == i + 1);
    }
    CHECK(fp4_sm90_kernel_parse("auto") == FP4_SM90_AUTO);
    CHECK(fp4_sm90_kernel_parse("v4-decode") == -1);
    CHECK(fp4_sm90_kernel_parse("4") == -1);
    CHECK(fp4_sm90_kernel_by_id(0) == NULL && fp4_sm90_kernel_by_id(5) == NULL);
    setenv("FP4_SM90_KERNEL", "no-such-kernel", 1);
    CHECK(fp4_sm90_forced() == -1);
    unsetenv("FP4_SM90_KERNEL");
    CHECK(fp4_sm90_forced() == FP4_SM90_AUTO);
}

int main(void)
{
    test_nibbles();
    test_nibbles_bf16();
    test_raster();
    test_checks();
    test_tokperm();
    test_mid_pack();
    test_rule();
    return check_finish("test_sm90_host");
}
#else
int main(void)
{
    test_nibbles(); /* the kernels' rules need the CUDA build */
    test_nibbles_bf16();
    test_raster();
    return check_finish("test_sm90_host");
}
#endif
