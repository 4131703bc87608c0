/* GPU NVFP4 quantizer (see fp4_quantize.h), bit-identical to quantize_row()
 * in src/format/nvfp4.c: per block of 16, in this order,
 *   bm      = max |x|                                   (exact)
 *   sf_byte = e4m3_rne_satfinite(gs * (bm / 6))         bm / 6 as below, __fmul_rn, cvt.rn.satfinite
 *   sf      = decode(sf_byte); sf == 0 -> codes 0 (no sign either)
 *   inv     = 1 / (sf / gs)                             __fdiv_rn twice, once per CTA per byte
 *   q       = e2m1_rne_satfinite(x * inv)               __fmul_rn, then fp4_qz_e2m1_biased
 * gs = encode_scale if > 0, else 2688 / amax (1 if amax == 0); global = 1 / gs.
 *
 * Layout of the work (why it is fast):
 * - A unit = one column of the swizzled scale layout: 128 rows x 4 k-blocks
 *   (64 elements = 128 bytes of bf16 per row, a full cache line). 256
 *   threads, each two 16-element blocks (rows 16 apart) of a unit.
 * - A warp takes rows {r, r+1} x {+0, +32, +64, +96} x 4 k-blocks: its 32
 *   scale bytes are exactly one 32-byte sector of the swizzled buffer
 *   (offset (r%32)*16 + ((r/32)%4)*4 + kb%4), and each row's 4 x 8 code bytes
 *   are one 32-byte sector: every store is a whole sector, every load a whole line.
 * - Persistent CTAs (as many as fit at once) walk the units with a grid
 *   stride, loading the next unit (64 bytes a thread) before quantizing the
 *   current one: about 128 bytes in flight per thread all the time. The inv
 *   table (127 scale bytes, the specification's two divisions each) is built
 *   once per CTA, the only barrier.
 * - Few instructions per element, most on the FMA pipe (the ALU pipe, which
 *   takes integer, logic, compare and min/max instructions, issues at half
 *   rate; the old kernel was bound by it): per element an unpack, the FMUL
 *   x * inv, three saturated FMAs + an FADD + two FFMAs for the E2M1 code
 *   (fp4_qz_e2m1_biased: 2^23 + code as a float, no compares), and one
 *   multiply-add packing the code into its nibble (the 0x4B000000 bias of
 *   the eight terms is a constant, removed once). Per block: the max of
 *   |x| on bf16 pairs (max.xorsign.abs.bf16x2: 8 of them and a permute for
 *   16 elements), bm / 6 without a division (fp4_qz_div6, exact for every bf16
 *   magnitude, tests/test_w4a4.c checks all of them), and the signs with byte
 *   permutes (sign_nibbles). Blocks whose table entry is +Inf (sf == 0, or an
 *   infinite inv, where x * inv is NaN for x = 0) take a rare exact path.
 *
 * Prediction, static scale, 8192 x 8192 (64M elements): bytes moved = 134.2 MB
 * bf16 read + 33.6 MB codes + 4.2 MB scales written = 172 MB, 35.8 us at the
 * H200's 4.8 TB/s. About 14 instructions per element in the SASS (the old
 * kernel: 18, ALU bound), 3 of them on the ALU pipe, are ~28 us of issue at
 * 1.98 GHz on 132 SMs: memory bound. Measured on the H200 (graph, cold L2):
 * 46.2 us, 3725 GB/s = 78% of 4.8 TB/s; ncu: 15.1 instructions per element,
 * DRAM 73%, stalls mostly on the loads (latency: 4 CTAs a SM at 64 registers
 * limit the bytes in flight). The dynamic path
 * adds the amax pass (134 MB read, ~31 us). */
#include <float.h>
#include <math.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/gpu.h"
#include "fp4/format.h"
#include "kernels/fp4_quantize.h"
#include "kernels/fp4_quantize_math.h"

#define QZ_THREADS 256 /* per CTA: 8 warps */
#define QZ_ROWS 128    /* rows per unit: one 128x4 swizzle atom column */
#define QZ_MIN_CTAS 4  /* resident CTAs per SM asked of ptxas: <= 64 registers */

/* max |x| over the tensor as float bits (|x| >= 0: bit order = value order). */
__global__ void fp4_amax_bf16_kernel(const uint4 *__restrict__ x, size_t n16, unsigned *amax)
{
    unsigned m = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = x[i];
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const unsigned lo = (w[j] & 0x7FFFu) << 16, hi = (w[j] >> 16 & 0x7FFFu) << 16;
            m = max(m, max(lo, hi));
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0 && m) atomicMax(amax, m);
}

/* prmt.b32 in its default mode: a selector nibble with bit 3 set fills the
 * byte with the sign bit of the selected byte (__byte_perm ignores that bit). */
static __device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel)
{
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

/* Bit 3 of nibble j set where bf16 element j of w[0..3] (8 elements, element
 * 2i in the low half of w[i]) is negative: the E2M1 sign bits of one code word. */
static __device__ __forceinline__ uint32_t sign_nibbles(uint32_t w0, uint32_t w1, uint32_t w2,
                                                        uint32_t w3)
{
    /* bytes of 0x00/0xFF: e01 = signs of elements [0, 2, 1, 3], e23 = [4, 6, 5, 7] */
    const uint32_t e01 = prmt(w0, w1, 0xFBD9u), e23 = prmt(w2, w3, 0xFBD9u);
    const uint32_t even = prmt(e01, e23, 0x5410u), odd = prmt(e01, e23, 0x7632u);
    return (even & 0x08080808u) | (odd & 0x80808080u);
}

/* max(|a|, |b|) on each bf16 half; the sign bits are left meaningless. */
static __device__ __forceinline__ uint32_t bmax2(uint32_t a, uint32_t b)
{
    uint32_t r;
    asm("max.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

/* The specification's per-element steps, for the rare blocks whose inv is
 * +Inf in the table: sf == 0 (byte 0's entry, codes 0 without signs) or a
 * true inv = 1 / (sf / gs) = +Inf, where x * inv is NaN (code 7, no sign)
 * for x = +-0 and +-Inf (7 with the sign) otherwise. */
static __device__ __noinline__ uint2 quantize_special(uint4 a, uint4 b, uint32_t byte, float inv)
{
    if (byte == 0) return make_uint2(0, 0);
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    uint32_t q[2] = {0, 0};
    for (int j = 0; j < 16; j++) {
        const uint32_t h = (w[j >> 1] >> (16 * (j & 1))) & 0xFFFFu;
        const float y = __fmul_rn(__uint_as_float(h << 16), inv);
        const uint32_t c = y != y ? 7u : fp4_qz_e2m1_mag(fabsf(y)) | (h >> 15) << 3;
        q[j >> 3] |= c << (4 * (j & 7));
    }
    return make_uint2(q[0], q[1]);
}

/* Quantize one block of 16 bf16 (a, b: element 2i in the low half of word i);
 * returns the 8 code bytes, sets *byte_out to the scale byte. */
static __device__ __forceinline__ uint2 quantize_block(uint4 a, uint4 b, float gs,
                                                       const float *inv_tab, uint32_t *byte_out)
{
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    /* block max on bf16 pairs (exact: a max of magnitudes), then of the halves */
    uint32_t m = bmax2(bmax2(bmax2(w[0], w[1]), bmax2(w[2], w[3])),
                       bmax2(bmax2(w[4], w[5]), bmax2(w[6], w[7])));
    m = bmax2(m, __byte_perm(m, 0, 0x1032));
    const float bm = fabsf(__uint_as_float(m << 16));
    const float bm6 = fp4_qz_div6(bm); /* == bm / 6: bm is a bf16 value */
    const uint32_t byte =
        (uint32_t)__nv_cvt_float_to_fp8(__fmul_rn(gs, bm6), __NV_SATFINITE, __NV_E4M3);
    *byte_out = byte;
    const float inv = inv_tab[byte];
    if (inv == __int_as_float(0x7F800000)) return quantize_special(a, b, byte, inv);
    uint32_t q[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        /* signs first (y = x * inv has the sign of x, kept when |y| rounds to
         * 0); + 0x05000000 cancels the eight 0x4B000000 biases mod 2^32 */
        q[h] = sign_nibbles(w[4 * h], w[4 * h + 1], w[4 * h + 2], w[4 * h + 3]) + 0x05000000u;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t word = w[4 * h + i];
            const float lo = fabsf(__uint_as_float(word << 16));
            const float hi = fabsf(__uint_as_float(word & 0xFFFF0000u));
            q[h] += fp4_qz_bits(fp4_qz_e2m1_biased(__fmul_rn(lo, inv))) << (8 * i);
            q[h] += fp4_qz_bits(fp4_qz_e2m1_biased(__fmul_rn(hi, inv))) << (8 * i + 4);
        }
    }
    return make_uint2(q[0], q[1]);
}

/* Where one thread's two blocks of a unit (tile, col) are: rows r0 = 128 tile
 * + rt and r0 + 16, k-block kb = 4 col + kq; px, pc, ps point at row r0's
 * bf16, its codes and the scale byte. Advanced by the grid stride with
 * precomputed 64-bit steps (no multiplication or division per unit). */
struct qz_pos {
    int r0, kb, col;
    const uint4 *px;
    uint8_t *pc, *ps;
};

struct qz_steps {
    int rows, cols_step, ncol, row_step;
    size_t x16, code_row; /* uint4 in 16 rows, code bytes per row */
    ptrdiff_t dx, dc, ds;       /* per grid stride */
    ptrdiff_t wx, wc;           /* extra when the column wraps (one more tile) */
};

static __device__ __forceinline__ void qz_advance(qz_pos &p, const qz_steps &s)
{
    p.col += s.cols_step;
    p.kb += 4 * s.cols_step;
    p.r0 += s.row_step;
    p.px += s.dx;
    p.pc += s.dc;
    p.ps += s.ds;
    if (p.col >= s.ncol) {
        p.col -= s.ncol;
        p.kb -= 4 * s.ncol;
        p.r0 += QZ_ROWS;
        p.px += s.wx;
        p.pc += s.wc;
    }
}

/* Rows or k-blocks past the matrix are not loaded. */
static __device__ __forceinline__ void load_unit(uint4 v[2][2], const qz_pos &p, const qz_steps &s,
                                                 int KB)
{
    if (p.kb >= KB) return;
    if (p.r0 < s.rows) {
        v[0][0] = p.px[0];
        v[0][1] = p.px[1];
    }
    if (p.r0 + 16 < s.rows) {
        v[1][0] = p.px[s.x16];
        v[1][1] = p.px[s.x16 + 1];
    }
}

static __device__ __forceinline__ void store_unit(const uint4 v[2][2], const qz_pos &p,
                                                  const qz_steps &s, int KB, float gs,
                                                  const float *inv_tab)
{
#pragma unroll
    for (int j = 0; j < 2; j++) {
        /* row + 16: (row % 32) * 16 moves 256 in the atom */
        if (p.r0 + 16 * j >= s.rows || p.kb >= KB) {
            p.ps[256 * j] = 0; /* padding of the swizzled layout */
            continue;
        }
        uint32_t byte;
        const uint2 out = quantize_block(v[j][0], v[j][1], gs, inv_tab, &byte);
        p.ps[256 * j] = (uint8_t)byte;
        *(uint2 *)(p.pc + (size_t)j * 16 * s.code_row) = out;
    }
}

/* 1-D grid of at most `units` persistent CTAs, QZ_THREADS threads; unit u is
 * (tile u / ncol, column u % ncol), ncol = Kbp / 4; CTA b takes units b,
 * b + gridDim.x, ..., two buffers deep, and writes zero scale bytes in the
 * padding. */
__global__ void __launch_bounds__(QZ_THREADS, QZ_MIN_CTAS)
    fp4_quantize_bf16_kernel(const uint4 *__restrict__ x, int rows, int cols, float encode_scale,
                             const unsigned *__restrict__ amax, uint8_t *__restrict__ codes,
                             uint8_t *__restrict__ sf, float *__restrict__ global_scale,
                             long long units, int ncol)
{
    __shared__ float inv_tab[128];
    const int KB = cols / 16;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int kq = lane & 3;                /* k-block within the unit */
    const int rr = 2 * warp + (lane >> 4);  /* row % 32 for the first block */
    const int g = (lane >> 2) & 3;          /* (row / 32) % 4 */
    const int rt = 32 * g + rr;             /* row within the tile; +16 for the second */
    const int sf_in = rr * 16 + g * 4 + kq; /* byte within the 512-byte atom */
    const long long stride = gridDim.x;

    qz_steps s;
    s.rows = rows;
    s.ncol = ncol;
    s.cols_step = (int)(stride % ncol);
    s.row_step = (int)(stride / ncol) * QZ_ROWS;
    const size_t row_words = (size_t)cols / 8; /* uint4 per row */
    s.x16 = 16 * row_words;
    s.code_row = (size_t)cols / 2;
    s.dx = (ptrdiff_t)s.row_step * (ptrdiff_t)row_words + (ptrdiff_t)s.cols_step * 8;
    s.dc = (ptrdiff_t)s.row_step * (ptrdiff_t)s.code_row + (ptrdiff_t)s.cols_step * 32;
    s.ds = (ptrdiff_t)stride * 512;
    s.wx = (ptrdiff_t)QZ_ROWS * (ptrdiff_t)row_words - (ptrdiff_t)ncol * 8;
    s.wc = (ptrdiff_t)QZ_ROWS * (ptrdiff_t)s.code_row - (ptrdiff_t)ncol * 32;

    long long u = blockIdx.x;
    qz_pos p;
    {
        const int tile = (int)(u / ncol);
        p.col = (int)(u % ncol);
        p.kb = p.col * 4 + kq;
        p.r0 = tile * QZ_ROWS + rt;
        p.px = x + (size_t)p.r0 * row_words + (size_t)p.kb * 2;
        p.pc = codes + (size_t)p.r0 * s.code_row + (size_t)p.kb * 8;
        p.ps = sf + (size_t)u * 512 + sf_in;
    }
    uint4 va[2][2], vb[2][2];
    /* loads first: they are in flight while the table is built */
    load_unit(va, p, s, KB);

    float gs = encode_scale;
    if (!(gs > 0.0f)) {
        const float am = __uint_as_float(*amax);
        gs = am > 0.0f ? __fdiv_rn(2688.0f, am) : 1.0f;
    }
    if (t < 128) {
        /* e4m3 byte t: its 7 bits placed in an fp16 pattern are the value * 2^-8;
         * byte 0 (sf == 0) gets +Inf, the mark of the rare path */
        const float sv = __half2float(__ushort_as_half((unsigned short)(t << 7))) * 256.0f;
        inv_tab[t] = t ? __fdiv_rn(1.0f, __fdiv_rn(sv, gs)) : __int_as_float(0x7F800000);
    }
    if (global_scale && blockIdx.x == 0 && t == 0) *global_scale = __fdiv_rn(1.0f, gs);
    __syncthreads();

    /* two buffers: the next unit's loads are issued before this one is quantized */
    for (;;) {
        qz_pos n = p;
        qz_advance(n, s);
        u += stride;
        if (u < units) load_unit(vb, n, s, KB);
        store_unit(va, p, s, KB, gs, inv_tab);
        if (u >= units) break;
        p = n;

        qz_advance(n, s);
        u += stride;
        if (u < units) load_unit(va, n, s, KB);
        store_unit(vb, p, s, KB, gs, inv_tab);
        if (u >= units) break;
        p = n;
    }
}

/* CTAs of fp4_quantize_bf16_kernel that fit on the current device at once,
 * cached per device (the occupancy query is not free, and the result never
 * changes). */
static fp4_status quantize_ctas(int *ctas, fp4_err *err)
{
    static int cached[64];
    int dev = 0, sms = 0, per_sm = 0;
    FP4_CUDA_TRY(err, cudaGetDevice(&dev));
    if (dev >= 0 && dev < 64 && cached[dev] > 0) {
        *ctas = cached[dev];
        return FP4_OK;
    }
    FP4_CUDA_TRY(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    FP4_CUDA_TRY(err, cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                          &per_sm, fp4_quantize_bf16_kernel, QZ_THREADS, 0));
    *ctas = (sms > 0 ? sms : 1) * (per_sm > 0 ? per_sm : 1);
    if (dev >= 0 && dev < 64) cached[dev] = *ctas;
    return FP4_OK;
}

extern "C" fp4_status fp4_gpu_quantize_bf16(const uint16_t *x, int64_t rows, int64_t cols,
                                            float encode_scale, uint8_t *codes, uint8_t *sf,
                                            float *global_scale, unsigned *amax_ws,
                                            cudaStream_t stream, fp4_err *err)
{
    fp4_status st = fp4_check_dims(rows, cols, err);
    if (st != FP4_OK) return st;
    if (!x || !codes || !sf || (!(encode_scale > 0.0f) && !amax_ws))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "gpu quantize: NULL buffer");
    /* the same rule as the CPU quantizer: the stored global scale 1 / gs must
     * be a normal float (a dynamic gs is found on the device and not checked) */
    if (encode_scale > 0.0f && !(isfinite(encode_scale) && 1.0f / encode_scale >= FLT_MIN))
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "gpu quantize: encode scale %g leaves no normal fp32 global scale (1 / %g)",
                        (double)encode_scale, (double)encode_scale);
    if (((uintptr_t)x & 15) || ((uintptr_t)codes & 7))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "gpu quantize: x must be 16-byte and codes 8-byte aligned");
    if (rows > INT32_MAX - QZ_ROWS || cols > INT32_MAX / 2)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "gpu quantize: %lldx%lld is too large",
                        (long long)rows, (long long)cols);
    int ctas = 0;
    if ((st = quantize_ctas(&ctas, err)) != FP4_OK) return st;
    if (!(encode_scale > 0.0f)) {
        const int threads = 256;
        const size_t n16 = (size_t)rows * (size_t)cols / 8; /* 16-byte chunks */
        size_t blocks = (n16 + threads - 1) / threads;
        if (blocks > 1184) blocks = 1184;
        FP4_CUDA_TRY(err, cudaMemsetAsync(amax_ws, 0, sizeof(unsigned), stream));
        fp4_amax_bf16_kernel<<<(unsigned)blocks, threads, 0, stream>>>((const uint4 *)x, n16,
                                                                        amax_ws);
        FP4_CUDA_LAUNCH_TRY(err);
    }
    const int ncol = (int)(fp4_swizzled_kblocks(cols) / 4);
    const long long units = (long long)(fp4_swizzled_rows(rows) / QZ_ROWS) * ncol;
    const unsigned grid = (unsigned)(units < ctas ? units : ctas);
    fp4_quantize_bf16_kernel<<<grid, QZ_THREADS, 0, stream>>>(
        (const uint4 *)x, (int)rows, (int)cols, encode_scale, amax_ws, codes, sf, global_scale,
        units, ncol);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}
