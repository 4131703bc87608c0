/* The GPU MoE backends' shared pieces (see moe_gpu.h). The kernels are
 * simple and memory-bound: one thread per 16-element block (one NVFP4 scale)
 * or per 8 bytes of a row, consecutive threads on consecutive blocks of a row,
 * so loads and stores coalesce. */
#include "backends/moe_gpu.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/gpu.h"
#include "kernels/fp4_quantize_math.h"

#define THREADS 256
#define MAX_BLOCKS 65535u * 16u /* grid-stride loops beyond this */

static unsigned grid_for(int64_t work)
{
    const int64_t b = (work + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : (b > (int64_t)MAX_BLOCKS ? (int64_t)MAX_BLOCKS : b));
}

/* ---- the routing on the device ---------------------------------------------------------------- */

extern "C" void fp4_moe_dev_route_free(fp4_moe_dev_route *r, fp4_warnings *w)
{
    if (!r) return;
    fp4_gpu_release(r->ids, "MoE expert ids", w);
    fp4_gpu_release(r->weights, "MoE routing weights", w);
    fp4_gpu_release(r->offsets, "MoE expert offsets", w);
    fp4_gpu_release(r->pair_index, "MoE pair index", w);
    fp4_gpu_release(r->counts, "MoE expert counts", w);
    fp4_gpu_release(r->rank, "MoE pair ranks", w);
    memset(r, 0, sizeof *r);
}

extern "C" fp4_status fp4_moe_dev_route_upload(const fp4_moe_problem *p, fp4_moe_dev_route *r,
                                               fp4_err *err)
{
    const size_t P = (size_t)p->plan->pairs, E = (size_t)p->dims.experts;
    fp4_status st;
    memset(r, 0, sizeof *r);
    if ((st = fp4_gpu_upload((void **)&r->ids, p->routing->expert_ids, P * sizeof(int32_t), "MoE expert ids",
                             err)) != FP4_OK ||
        (st = fp4_gpu_upload((void **)&r->weights, p->routing->weights, P * sizeof(float),
                             "MoE routing weights", err)) != FP4_OK ||
        (st = fp4_gpu_upload((void **)&r->offsets, p->plan->expert_offsets, (E + 1) * sizeof(int32_t),
                             "MoE expert offsets", err)) != FP4_OK ||
        (st = fp4_gpu_upload((void **)&r->pair_index, p->plan->pair_index, P * sizeof(int32_t),
                             "MoE pair index", err)) != FP4_OK ||
        (st = fp4_gpu_alloc((void **)&r->counts, E * sizeof(int32_t), "MoE expert counts", err)) != FP4_OK ||
        (st = fp4_gpu_alloc((void **)&r->rank, P * sizeof(int32_t), "MoE pair ranks", err)) != FP4_OK) {
        fp4_moe_dev_route_free(r, NULL);
        return st;
    }
    return FP4_OK;
}

/* rank[p] = the pair's place among its expert's pairs (atomic order). */
__global__ void moe_route_count(const int32_t *__restrict__ ids, int64_t pairs, int32_t *counts,
                                int32_t *rank)
{
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < pairs;
         p += (int64_t)gridDim.x * blockDim.x)
        rank[p] = atomicAdd(&counts[ids[p]], 1);
}

/* offsets = exclusive prefix sum of counts, one block: each thread sums a
 * contiguous chunk, the chunk sums are scanned in shared memory. */
__global__ void moe_route_scan(const int32_t *__restrict__ counts, int experts, int32_t *offsets)
{
    __shared__ int32_t part[THREADS];
    const int t = threadIdx.x, chunk = (experts + THREADS - 1) / THREADS;
    const int lo = t * chunk, hi = min(experts, lo + chunk);
    int32_t sum = 0;
    for (int e = lo; e < hi; e++) sum += counts[e];
    part[t] = sum;
    __syncthreads();
    for (int step = 1; step < THREADS; step *= 2) { /* inclusive Hillis-Steele scan */
        const int32_t v = t >= step ? part[t - step] : 0;
        __syncthreads();
        part[t] += v;
        __syncthreads();
    }
    int32_t run = part[t] - sum; /* exclusive start of this chunk */
    for (int e = lo; e < hi; e++) {
        offsets[e] = run;
        run += counts[e];
    }
    if (t == THREADS - 1) offsets[experts] = part[t];
}

__global__ void moe_route_place(const int32_t *__restrict__ ids, const int32_t *__restrict__ rank,
                                const int32_t *__restrict__ offsets, int64_t pairs,
                                int32_t *pair_index)
{
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < pairs;
         p += (int64_t)gridDim.x * blockDim.x)
        pair_index[offsets[ids[p]] + rank[p]] = (int32_t)p;
}

/* Decode-sized routings in one block, one launch: the counts in shared
 * memory (no memset), a scan of one expert a thread, the placement. The three
 * kernels above cost a launch and a dependent round trip each, which at a
 * few tokens is most of the step. */
#define ROUTE1_THREADS 1024
#define ROUTE1_PAIRS_A_THREAD 8
#define ROUTE1_MAX_PAIRS (ROUTE1_THREADS * ROUTE1_PAIRS_A_THREAD)

__global__ void __launch_bounds__(ROUTE1_THREADS)
    moe_route_one_block(const int32_t *__restrict__ ids, int pairs, int experts, int32_t *offsets,
                        int32_t *pair_index)
{
    __shared__ int32_t start[ROUTE1_THREADS]; /* counts, then each expert's first row */
    __shared__ int32_t warp_total[ROUTE1_THREADS / 32];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    if (t < experts) start[t] = 0;
    __syncthreads();
    int id[ROUTE1_PAIRS_A_THREAD], rank[ROUTE1_PAIRS_A_THREAD];
#pragma unroll
    for (int i = 0; i < ROUTE1_PAIRS_A_THREAD; i++) {
        const int p = t + i * ROUTE1_THREADS;
        id[i] = p < pairs ? __ldg(ids + p) : 0;
        rank[i] = p < pairs ? atomicAdd(&start[id[i]], 1) : 0;
    }
    __syncthreads();
    const int count = t < experts ? start[t] : 0;
    int incl = count; /* inclusive scan in the warp, then over the warps' totals */
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += v;
    }
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int w = warp_total[lane];
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, w, d);
            if (lane >= d) w += v;
        }
        warp_total[lane] = w;
    }
    __syncthreads();
    const int first = incl - count + (warp ? warp_total[warp - 1] : 0);
    if (t < experts) {
        start[t] = first;
        offsets[t] = first;
        if (t == experts - 1) offsets[experts] = first + count;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < ROUTE1_PAIRS_A_THREAD; i++) {
        const int p = t + i * ROUTE1_THREADS;
        if (p < pairs) pair_index[start[id[i]] + rank[i]] = p;
    }
}

extern "C" fp4_status fp4_moe_gpu_route(fp4_moe_dev_route *r, int64_t pairs, int experts,
                                        cudaStream_t s, fp4_err *err)
{
    /* FP4_MOE_ROUTE=kernels forces the three kernels (measurements) */
    const char *force = getenv("FP4_MOE_ROUTE");
    if (pairs <= ROUTE1_MAX_PAIRS && experts <= ROUTE1_THREADS && !(force && strcmp(force, "kernels") == 0)) {
        moe_route_one_block<<<1, ROUTE1_THREADS, 0, s>>>(r->ids, (int)pairs, experts, r->offsets,
                                                         r->pair_index);
        FP4_CUDA_LAUNCH_TRY(err);
        return FP4_OK;
    }
    FP4_CUDA_TRY(err, cudaMemsetAsync(r->counts, 0, (size_t)experts * sizeof(int32_t), s));
    moe_route_count<<<grid_for(pairs), THREADS, 0, s>>>(r->ids, pairs, r->counts, r->rank);
    FP4_CUDA_LAUNCH_TRY(err);
    moe_route_scan<<<1, THREADS, 0, s>>>(r->counts, experts, r->offsets);
    FP4_CUDA_LAUNCH_TRY(err);
    moe_route_place<<<grid_for(pairs), THREADS, 0, s>>>(r->ids, r->rank, r->offsets, pairs,
                                                        r->pair_index);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

/* ---- row maps ----------------------------------------------------------------------------------- */

extern "C" fp4_status fp4_moe_row_map(const fp4_moe_plan *p, int div, int32_t align, int32_t **map,
                                      int64_t *rows, int32_t **row_of_pair, int64_t **group_start,
                                      fp4_err *err)
{
    const int E = p->experts;
    int64_t *start = (int64_t *)malloc((size_t)(E + 1) * sizeof *start);
    int32_t *m = NULL, *rp = NULL;
    fp4_status st = FP4_OK;
    *map = NULL;
    if (row_of_pair) *row_of_pair = NULL;
    if (group_start) *group_start = NULL;
    if (!start) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for a row map");
    if (align > 1) {
        if ((st = fp4_moe_plan_aligned_offsets(p, align, start, err)) != FP4_OK) goto fail;
    } else {
        for (int e = 0; e <= E; e++) start[e] = p->expert_offsets[e];
    }
    if (start[E] > INT32_MAX) {
        st = fp4_fail(err, FP4_ERR_OVERFLOW, "grouped layout of %lld rows: over 2^31", (long long)start[E]);
        goto fail;
    }
    *rows = start[E];
    m = (int32_t *)malloc((size_t)(start[E] > 0 ? start[E] : 1) * sizeof *m);
    rp = (int32_t *)malloc((size_t)p->pairs * sizeof *rp);
    if (!m || !rp) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "no memory for a row map of %lld rows", (long long)start[E]);
        goto fail;
    }
    for (int64_t r = 0; r < start[E]; r++) m[r] = -1;
    for (int e = 0; e < E; e++)
        for (int32_t i = 0; i < p->expert_offsets[e + 1] - p->expert_offsets[e]; i++) {
            const int32_t pair = p->pair_index[p->expert_offsets[e] + i];
            m[start[e] + i] = pair / div;
            rp[pair] = (int32_t)(start[e] + i);
        }
    *map = m;
    if (row_of_pair) *row_of_pair = rp;
    else free(rp);
    if (group_start) *group_start = start;
    else free(start);
    return FP4_OK;
fail:
    free(start);
    free(m);
    free(rp);
    return st;
}

/* ---- gathers ---------------------------------------------------------------------------------- */

__global__ void moe_gather_rows(const uint2 *__restrict__ src, int64_t words, const int32_t *__restrict__ map,
                                int64_t rows, uint2 *__restrict__ dst)
{
    const int64_t total = rows * words;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / words, w = i - r * words;
        const int32_t from = map[r];
        dst[i] = from < 0 ? make_uint2(0, 0) : src[(int64_t)from * words + w];
    }
}

extern "C" fp4_status fp4_moe_gpu_gather_rows(const void *src, size_t row_bytes, const int32_t *map,
                                              int64_t rows, void *dst, cudaStream_t s, fp4_err *err)
{
    if (row_bytes % 8 || ((uintptr_t)src & 7) || ((uintptr_t)dst & 7))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE gather: rows of %zu bytes, 8-byte units wanted",
                        row_bytes);
    if (rows < 1) return FP4_OK;
    const int64_t words = (int64_t)(row_bytes / 8);
    moe_gather_rows<<<grid_for(rows * words), THREADS, 0, s>>>((const uint2 *)src, words, map, rows,
                                                                (uint2 *)dst);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

/* Byte offset of scale (r, kb) in the 128x4 swizzled layout (format.h). */
static __device__ __forceinline__ int64_t swizzle_at(int64_t r, int64_t kb, int64_t kbp)
{
    return (r / 128) * (kbp / 4) * 512 + (kb / 4) * 512 + (r % 32) * 16 + ((r / 32) % 4) * 4 + (kb % 4);
}

/* One thread per 16-element block: its 8 code bytes and its scale. */
__global__ void moe_gather_nvfp4(const uint2 *__restrict__ codes, const uint8_t *__restrict__ scales,
                                 int64_t kb, int64_t kbp, const int32_t *__restrict__ map, int64_t rows,
                                 uint2 *__restrict__ codes_out, uint8_t *__restrict__ scales_out,
                                 int swizzled)
{
    const int64_t total = rows * kb;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / kb, b = i - r * kb;
        const int32_t from = map[r];
        codes_out[i] = from < 0 ? make_uint2(0, 0) : codes[(int64_t)from * kb + b];
        const uint8_t sf = from < 0 ? 0 : scales[(int64_t)from * kb + b];
        scales_out[swizzled ? swizzle_at(r, b, kbp) : i] = sf;
    }
}

extern "C" fp4_status fp4_moe_gpu_gather_nvfp4(const uint8_t *codes, const uint8_t *scales, int64_t cols,
                                               const int32_t *map, int64_t rows, uint8_t *codes_out,
                                               uint8_t *scales_out, int swizzled, cudaStream_t s,
                                               fp4_err *err)
{
    if (cols % 16 || ((uintptr_t)codes & 7) || ((uintptr_t)codes_out & 7))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE gather: NVFP4 rows of %lld columns, misaligned",
                        (long long)cols);
    if (rows < 1) return FP4_OK;
    const int64_t kb = cols / 16;
    moe_gather_nvfp4<<<grid_for(rows * kb), THREADS, 0, s>>>((const uint2 *)codes, scales, kb,
                                                             fp4_swizzled_kblocks(cols), map, rows,
                                                             (uint2 *)codes_out, scales_out, swizzled);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

/* ---- activation and quantization ------------------------------------------------------------------- */

static __device__ __forceinline__ float bf16_at(const uint16_t *p, int64_t i)
{
    return __uint_as_float((uint32_t)p[i] << 16);
}

static __device__ __forceinline__ uint16_t to_bf16(float f)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

static __device__ __forceinline__ float act_of(int act, float g, float u)
{
    if (act == FP4_MOE_ACT_SWIGLU_OAI) {
        const float gl = fminf(g, FP4_MOE_SWIGLU_LIMIT);
        const float ul = fminf(fmaxf(u, -FP4_MOE_SWIGLU_LIMIT), FP4_MOE_SWIGLU_LIMIT);
        return gl / (1.0f + expf(-FP4_MOE_SWIGLU_ALPHA * gl)) * (ul + 1.0f);
    }
    return g / (1.0f + expf(-g)) * u;
}

static __device__ __forceinline__ uint8_t e4m3_rn(float x)
{
    return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

static __device__ __forceinline__ float e4m3_value(uint8_t b)
{
    return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3)));
}

/* E2M1 code of x (sign bit 3, the specification's fp4_e2m1_encode). */
static __device__ __forceinline__ uint32_t e2m1_code(float x)
{
    return (fp4_qz_bits(x) >> 28 & 8u) | fp4_qz_e2m1_mag(fabsf(x));
}

static __device__ __forceinline__ float e2m1_value(uint32_t code)
{
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float v = mag[code & 7];
    return (code & 8) ? -v : v;
}

/* One thread per output block of 16. */
__global__ void moe_act_kernel(fp4_moe_act_args a, int64_t kbp)
{
    const int64_t kb = a.cols / 16, total = a.rows * kb;
    float amax_seen = 0.0f; /* AMAX */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / kb, b = i - r * kb;
        const int32_t from = a.map ? a.map[r] : (int32_t)r;
        float x[16];
        if (from < 0) {
#pragma unroll
            for (int j = 0; j < 16; j++) x[j] = 0.0f;
        } else {
            const uint16_t *row = a.src + (int64_t)from * a.src_cols;
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const int64_t c = b * 16 + j;
                x[j] = a.act < 0 ? bf16_at(row, c) : act_of(a.act, bf16_at(row, c), bf16_at(row, a.cols + c));
            }
        }
        if (a.out == FP4_MOE_QOUT_BF16) {
            uint16_t *o = a.out_bf16 + r * a.cols + b * 16;
#pragma unroll
            for (int j = 0; j < 16; j++) o[j] = to_bf16(x[j]);
            continue;
        }
        if (a.out == FP4_MOE_QOUT_E4M3) { /* one 16-byte store: cols % 16 == 0 keeps it aligned */
            uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
            for (int j = 0; j < 16; j++) w[j / 4] |= (uint32_t)e4m3_rn(__fmul_rn(x[j], a.e4m3_enc)) << (8 * (j % 4));
            *(uint4 *)(a.out_e4m3 + r * a.cols + b * 16) = make_uint4(w[0], w[1], w[2], w[3]);
            continue;
        }
        float bm = 0.0f;
#pragma unroll
        for (int j = 0; j < 16; j++) bm = fmaxf(bm, fabsf(x[j]));
        if (a.out == FP4_MOE_QOUT_AMAX) {
            amax_seen = fmaxf(amax_seen, bm);
            continue;
        }
        const float gs = a.encode_scale;
        const uint8_t sf_byte = e4m3_rn(__fmul_rn(gs, __fdiv_rn(bm, 6.0f)));
        const float sf = e4m3_value(sf_byte);
        uint32_t code[16];
        if (sf == 0.0f) {
#pragma unroll
            for (int j = 0; j < 16; j++) code[j] = 0;
        } else {
            const float inv = __fdiv_rn(1.0f, __fdiv_rn(sf, gs));
#pragma unroll
            for (int j = 0; j < 16; j++) code[j] = e2m1_code(__fmul_rn(x[j], inv));
        }
        if (a.out == FP4_MOE_QOUT_DEQUANT_BF16) {
            uint16_t *o = a.out_bf16 + r * a.cols + b * 16;
#pragma unroll
            for (int j = 0; j < 16; j++) o[j] = to_bf16(e2m1_value(code[j]) * sf); /* exact */
            continue;
        }
        uint2 packed;
        packed.x = packed.y = 0;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            packed.x |= code[j] << (4 * j);
            packed.y |= code[8 + j] << (4 * j);
        }
        ((uint2 *)a.codes)[i] = packed; /* row r's block b: byte (r * cols + 16 b) / 2 */
        a.scales[a.out == FP4_MOE_QOUT_NVFP4_SWIZZLED ? swizzle_at(r, b, kbp) : i] = sf_byte;
    }
    if (a.out == FP4_MOE_QOUT_AMAX) { /* every lane is past the loop: one atomic a warp */
        const unsigned warp_max = __reduce_max_sync(0xFFFFFFFFu, __float_as_uint(amax_seen));
        if ((threadIdx.x & 31) == 0) atomicMax(a.amax, warp_max);
    }
}

extern "C" fp4_status fp4_moe_gpu_act(const fp4_moe_act_args *a, cudaStream_t s, fp4_err *err)
{
    if (!a || !a->src || a->cols % 16 || a->cols < 16 || a->src_cols != (a->act < 0 ? a->cols : 2 * a->cols))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE activation: bad arguments");
    const fp4_moe_qout q = a->out;
    const int bf16_out = q == FP4_MOE_QOUT_BF16 || q == FP4_MOE_QOUT_DEQUANT_BF16;
    const int e4m3_out = q == FP4_MOE_QOUT_E4M3;
    const int nvfp4 = q == FP4_MOE_QOUT_NVFP4 || q == FP4_MOE_QOUT_NVFP4_SWIZZLED || q == FP4_MOE_QOUT_DEQUANT_BF16;
    if (q < FP4_MOE_QOUT_BF16 || q > FP4_MOE_QOUT_AMAX)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE activation: output kind %d", (int)q);
    if (bf16_out ? !a->out_bf16
                 : e4m3_out ? !a->out_e4m3 || ((uintptr_t)a->out_e4m3 & 15)
                            : q == FP4_MOE_QOUT_AMAX ? !a->amax : (!a->codes || !a->scales || ((uintptr_t)a->codes & 7)))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE activation: no (or misaligned) output");
    if (nvfp4 && !(a->encode_scale > 0.0f))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE activation: encode scale %g", (double)a->encode_scale);
    if (e4m3_out && !(a->e4m3_enc > 0.0f))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE activation: e4m3 scale %g", (double)a->e4m3_enc);
    if (a->rows < 1) return FP4_OK;
    moe_act_kernel<<<grid_for(a->rows * (a->cols / 16)), THREADS, 0, s>>>(*a, fp4_swizzled_kblocks(a->cols));
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

/* ---- the weighted combine -------------------------------------------------------------------------- */

__global__ void moe_combine_kernel(const uint16_t *__restrict__ d, int64_t n,
                                   const int32_t *__restrict__ row_of_pair, const float *__restrict__ w,
                                   int64_t tokens, int k, float *__restrict__ out)
{
    const int64_t total = tokens * n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / n, c = i - t * n;
        float acc = 0.0f;
        for (int j = 0; j < k; j++) {
            const int64_t p = t * k + j;
            acc = fmaf(w[p], bf16_at(d, (int64_t)row_of_pair[p] * n + c), acc);
        }
        out[i] = acc;
    }
}

extern "C" fp4_status fp4_moe_gpu_combine(const uint16_t *d, int64_t n, const int32_t *row_of_pair,
                                          const float *w, int64_t tokens, int k, float *out,
                                          cudaStream_t s, fp4_err *err)
{
    if (!d || !row_of_pair || !w || !out || n < 1 || k < 1)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE combine: bad arguments");
    if (tokens < 1) return FP4_OK;
    moe_combine_kernel<<<grid_for(tokens * n), THREADS, 0, s>>>(d, n, row_of_pair, w, tokens, k, out);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

extern "C" fp4_status fp4_moe_gpu_poison_f32(float *d, size_t n, cudaStream_t s, fp4_err *err)
{
    /* 0xFFFFFFFF is a float NaN */
    FP4_CUDA_TRY(err, cudaMemsetAsync(d, 0xFF, n * sizeof(float), s));
    return FP4_OK;
}

/* ---- the weights in the baselines' formats --------------------------------------------------------- */

/* max |e2m1 * scale| over one expert, as float bits into *amax (>= 0: bit
 * order is value order). */
__global__ void moe_amax_kernel(const uint8_t *__restrict__ codes, const uint8_t *__restrict__ scales,
                                int64_t bytes, int64_t bytes_per_row, int64_t kb, unsigned *amax)
{
    float m = 0.0f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < bytes;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / bytes_per_row, c = (i - r * bytes_per_row) * 2;
        const float sf = e4m3_value(scales[r * kb + c / 16]);
        const uint8_t v = codes[i];
        m = fmaxf(m, fmaxf(fabsf(e2m1_value(v & 15u)), fabsf(e2m1_value(v >> 4))) * sf);
    }
    atomicMax(amax, __float_as_uint(m));
}

/* Every code byte -> two values e2m1 * scale: bf16 (enc NULL) or e4m3 of
 * value * enc (enc = 448 / *amax). */
__global__ void moe_convert_kernel(const uint8_t *__restrict__ codes, const uint8_t *__restrict__ scales,
                                   int64_t bytes, int64_t bytes_per_row, int64_t kb,
                                   const unsigned *amax, uint16_t *out_bf16, uint8_t *out_e4m3)
{
    float enc = 1.0f;
    if (out_e4m3) {
        const float am = __uint_as_float(*amax);
        enc = am > 0.0f ? __fdiv_rn(448.0f, am) : 1.0f;
    }
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < bytes;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / bytes_per_row, c = (i - r * bytes_per_row) * 2;
        const float sf = e4m3_value(scales[r * kb + c / 16]);
        const uint8_t v = codes[i];
        const float lo = e2m1_value(v & 15u) * sf, hi = e2m1_value(v >> 4) * sf; /* exact */
        if (out_bf16) {
            out_bf16[2 * i] = to_bf16(lo);
            out_bf16[2 * i + 1] = to_bf16(hi);
        } else {
            out_e4m3[2 * i] = e4m3_rn(__fmul_rn(lo, enc));
            out_e4m3[2 * i + 1] = e4m3_rn(__fmul_rn(hi, enc));
        }
    }
}

/* Both conversions: each expert's codes and plain scales through one staging
 * buffer, converted on the device into dst. */
static fp4_status convert_weights(const fp4_matrix *w, int experts, uint16_t *dst16, uint8_t *dst8,
                                  float *dec, fp4_err *err)
{
    const int64_t rows = w[0].rows, cols = w[0].cols;
    const size_t cbytes = (size_t)rows * (size_t)(cols / 2), sbytes = (size_t)rows * (size_t)(cols / 16);
    uint8_t *codes = NULL, *scales = NULL;
    unsigned *amax = NULL;
    fp4_status st;
    if ((st = fp4_gpu_alloc((void **)&codes, cbytes, "MoE weight staging", err)) != FP4_OK ||
        (st = fp4_gpu_alloc((void **)&scales, sbytes, "MoE weight staging", err)) != FP4_OK ||
        (st = fp4_gpu_alloc((void **)&amax, (size_t)experts * sizeof(unsigned), "MoE weight amax", err)) !=
            FP4_OK)
        goto out;
    FP4_CUDA_GOTO(err, st, cudaMemset(amax, 0, (size_t)experts * sizeof(unsigned)), out);
    for (int e = 0; e < experts; e++) {
        const size_t elems = (size_t)rows * (size_t)cols;
        if (w[e].rows != rows || w[e].cols != cols) {
            st = fp4_fail(err, FP4_ERR_SHAPE, "MoE weights: expert %d is not [%lld, %lld]", e, (long long)rows,
                          (long long)cols);
            goto out;
        }
        FP4_CUDA_GOTO(err, st, cudaMemcpy(codes, w[e].codes, cbytes, cudaMemcpyHostToDevice), out);
        FP4_CUDA_GOTO(err, st, cudaMemcpy(scales, w[e].scales, sbytes, cudaMemcpyHostToDevice), out);
        const unsigned grid = grid_for((int64_t)cbytes) < 4096 ? grid_for((int64_t)cbytes) : 4096;
        if (dst8) {
            moe_amax_kernel<<<grid, THREADS>>>(codes, scales, (int64_t)cbytes, cols / 2, cols / 16, amax + e);
            FP4_CUDA_GOTO(err, st, cudaGetLastError(), out);
        }
        moe_convert_kernel<<<grid, THREADS>>>(codes, scales, (int64_t)cbytes, cols / 2, cols / 16, amax + e,
                                              dst16 ? dst16 + (size_t)e * elems : NULL,
                                              dst8 ? dst8 + (size_t)e * elems : NULL);
        FP4_CUDA_GOTO(err, st, cudaGetLastError(), out);
        /* the staging buffer is reused by the next expert */
        FP4_CUDA_GOTO(err, st, cudaDeviceSynchronize(), out);
    }
    if (dst8) {
        unsigned *host = (unsigned *)malloc((size_t)experts * sizeof *host);
        if (!host) {
            st = fp4_fail(err, FP4_ERR_NOMEM, "no host memory for %d amax", experts);
            goto out;
        }
        const cudaError_t ce = cudaMemcpy(host, amax, (size_t)experts * sizeof *host, cudaMemcpyDeviceToHost);
        for (int e = 0; ce == cudaSuccess && e < experts; e++) {
            float am;
            memcpy(&am, &host[e], sizeof am);
            dec[e] = am > 0.0f ? am / FP4_E4M3_MAX : 1.0f; /* as cublaslt-fp8's decode scale */
        }
        free(host);
        if (ce != cudaSuccess) st = fp4_fail(err, FP4_ERR_CUDA, "reading the weights' amax: %s", cudaGetErrorString(ce));
    }
out:
    fp4_gpu_release(codes, "MoE weight staging", NULL);
    fp4_gpu_release(scales, "MoE weight staging", NULL);
    fp4_gpu_release(amax, "MoE weight amax", NULL);
    return st;
}

extern "C" fp4_status fp4_moe_gpu_weights_bf16(const fp4_matrix *w, int experts, uint16_t *dst, fp4_err *err)
{
    return convert_weights(w, experts, dst, NULL, NULL, err);
}

extern "C" fp4_status fp4_moe_gpu_weights_e4m3(const fp4_matrix *w, int experts, uint8_t *dst, float *dec,
                                               fp4_err *err)
{
    return convert_weights(w, experts, NULL, dst, dec, err);
}

/* ---- host helpers ------------------------------------------------------------------------------------ */

extern "C" fp4_status fp4_moe_host_dequant_bf16(const fp4_matrix *m, uint16_t **out, fp4_err *err)
{
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const size_t n = (size_t)m->rows * (size_t)m->cols;
    uint16_t *v = (uint16_t *)malloc(n * sizeof *v);
    *out = NULL;
    if (!v) return fp4_fail(err, FP4_ERR_NOMEM, "no host memory for %zu bf16 values", n);
    for (size_t i = 0; i < n; i++) {
        const size_t r = i / (size_t)m->cols, c = i % (size_t)m->cols;
        const uint8_t byte = m->codes[i / 2], code = (uint8_t)((i & 1) ? byte >> 4 : byte & 15);
        const float sf = fp4_e4m3_decode(m->scales[r * (size_t)(m->cols / 16) + c / 16]);
        const float val = (code & 8) ? -mag[code & 7] : mag[code & 7];
        v[i] = fp4_bf16_from_float(val * sf); /* exact: at most 6 significant bits */
    }
    *out = v;
    return FP4_OK;
}

extern "C" fp4_status fp4_moe_read_grouped_bf16(const void *dev, int64_t layout_rows, int64_t n,
                                                const int32_t *row_of_pair, int64_t pairs, float *out,
                                                fp4_err *err)
{
    const size_t count = (size_t)layout_rows * (size_t)n;
    float *tmp = (float *)malloc((count > 0 ? count : 1) * sizeof *tmp);
    if (!tmp) return fp4_fail(err, FP4_ERR_NOMEM, "no host memory for %zu outputs", count);
    fp4_status st = fp4_gpu_read_bf16(dev, count, tmp, err);
    for (int64_t p = 0; st == FP4_OK && p < pairs; p++)
        memcpy(out + (size_t)p * (size_t)n, tmp + (size_t)row_of_pair[p] * (size_t)n, (size_t)n * sizeof *out);
    free(tmp);
    return st;
}
