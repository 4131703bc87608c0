/* GPU NVFP4 quantizer (see fp4_quantize.h). One thread per block of 16
 * elements over the PADDED swizzled domain [roundup(rows,128), roundup(cols/16,4)]:
 * threads outside the matrix only write a zero scale byte, so the padding is
 * zeroed without a memset. Every float expression mirrors quantize_row() in
 * src/format/nvfp4.c, operation for operation:
 *   bm = max |x| over the block
 *   sf_byte = e4m3_rne_satfinite(gs * (bm / 6))        __fmul_rn, __fdiv_rn, cvt.rn.satfinite
 *   sf = decode(sf_byte); sf == 0 -> codes 0
 *   inv = 1 / (sf / gs)                                  __fdiv_rn twice
 *   q = e2m1_rne_satfinite(x * inv)                      __fmul_rn, comparisons
 * gs = encode_scale if > 0, else 2688 / amax (1 if amax == 0); global = 1 / gs. */
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backends/gpu_common.h"
#include "fp4/format.h"
#include "kernels/fp4_quantize.h"

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

/* E2M1 code of x, as fp4_e2m1_encode (x finite). */
static __device__ __forceinline__ uint32_t e2m1_encode(float x)
{
    const uint32_t sign = (__float_as_uint(x) >> 31) ? 8u : 0u;
    const float a = fabsf(x);
    uint32_t code;
    if (a <= 0.25f) code = 0;
    else if (a < 0.75f) code = 1;
    else if (a <= 1.25f) code = 2;
    else if (a < 1.75f) code = 3;
    else if (a <= 2.5f) code = 4;
    else if (a < 3.5f) code = 5;
    else if (a <= 5.0f) code = 6;
    else code = 7;
    return sign | code;
}

__global__ void fp4_quantize_bf16_kernel(const uint16_t *__restrict__ x, int rows, int cols,
                                         float encode_scale, const unsigned *__restrict__ amax,
                                         uint8_t *__restrict__ codes, uint8_t *__restrict__ sf,
                                         float *__restrict__ global_scale)
{
    const int KB = cols / 16, Kbp = (KB + 3) / 4 * 4;
    const long long total = (long long)((rows + 127) / 128 * 128) * Kbp;
    float gs = encode_scale;
    if (!(gs > 0.0f)) {
        const float am = __uint_as_float(*amax);
        gs = am > 0.0f ? __fdiv_rn(2688.0f, am) : 1.0f;
    }
    if (global_scale && blockIdx.x == 0 && threadIdx.x == 0) *global_scale = __fdiv_rn(1.0f, gs);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        /* i runs over the swizzled buffer in row-major (row, kb) order of the
         * padded domain; consecutive threads take consecutive k-blocks of a row. */
        const int r = (int)(i / Kbp), kb = (int)(i - (long long)r * Kbp);
        const size_t so = (size_t)(r >> 7) * (size_t)(Kbp >> 2) * 512 + (size_t)(kb >> 2) * 512 +
                          (size_t)(r & 31) * 16 + (size_t)((r >> 5) & 3) * 4 + (size_t)(kb & 3);
        if (r >= rows || kb >= KB) {
            sf[so] = 0;
            continue;
        }
        const uint4 *src = (const uint4 *)(x + (size_t)r * cols + (size_t)kb * 16);
        const uint4 v0 = src[0], v1 = src[1];
        const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
        float f[16];
        float bm = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            f[2 * j] = __uint_as_float(w[j] << 16);
            f[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
            bm = fmaxf(bm, fabsf(f[2 * j]));
            bm = fmaxf(bm, fabsf(f[2 * j + 1]));
        }
        const __nv_fp8_storage_t byte =
            __nv_cvt_float_to_fp8(__fmul_rn(gs, __fdiv_rn(bm, 6.0f)), __NV_SATFINITE, __NV_E4M3);
        sf[so] = (uint8_t)byte;
        /* decode: the 7 low bits placed in an fp16 pattern are the value * 2^-8 */
        const float sfv = __half2float(__ushort_as_half((unsigned short)((byte & 0x7F) << 7))) * 256.0f;
        uint2 out = make_uint2(0, 0);
        if (sfv != 0.0f) {
            const float inv = __fdiv_rn(1.0f, __fdiv_rn(sfv, gs));
            uint32_t q[2] = {0, 0};
#pragma unroll
            for (int j = 0; j < 16; j++)
                q[j >> 3] |= e2m1_encode(__fmul_rn(f[j], inv)) << (4 * (j & 7));
            out = make_uint2(q[0], q[1]);
        }
        *(uint2 *)(codes + (size_t)r * (size_t)(cols / 2) + (size_t)kb * 8) = out;
    }
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
    if (((uintptr_t)x & 15) || ((uintptr_t)codes & 7))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "gpu quantize: x must be 16-byte and codes 8-byte aligned");
    if (rows > INT32_MAX - 128 || cols > INT32_MAX)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "gpu quantize: %lldx%lld is too large",
                        (long long)rows, (long long)cols);
    const int threads = 256;
    if (!(encode_scale > 0.0f)) {
        const size_t n16 = (size_t)rows * (size_t)cols / 8; /* 16-byte chunks */
        size_t blocks = (n16 + threads - 1) / threads;
        if (blocks > 1184) blocks = 1184;
        FP4_CUDA_TRY(err, cudaMemsetAsync(amax_ws, 0, sizeof(unsigned), stream));
        fp4_amax_bf16_kernel<<<(unsigned)blocks, threads, 0, stream>>>((const uint4 *)x, n16,
                                                                        amax_ws);
        FP4_CUDA_LAUNCH_TRY(err);
    }
    const long long total = (long long)fp4_swizzled_rows(rows) * fp4_swizzled_kblocks(cols);
    long long blocks = (total + threads - 1) / threads;
    if (blocks > 65535LL * 16) blocks = 65535LL * 16;
    fp4_quantize_bf16_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
        x, (int)rows, (int)cols, encode_scale, amax_ws, codes, sf, global_scale);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}
