/* fp4bench layer on the GPUs: the kernels around the GEMMs, the per-rank
 * driver every kind shares, and fp4_layer_run.
 *
 * The driver, on every rank's thread (the threads launcher): set up (weights
 * packed and uploaded, buffers), poison the outputs, run the pipeline once
 * (plain launches and collectives) with an optional planted fault in the
 * middle, check against the exact reference, and only when every rank passed
 * capture one CUDA graph per variant (the whole pipeline; its parts alone)
 * of `iters` layer calls each, replay each `warmup` times, then `reps` times
 * with every rank starting together; a rank's time is its median per call,
 * the row's the slowest rank's. Between the steps all ranks agree
 * (nccl_agree_max), so a rank that failed never leaves the others inside a
 * collective.
 *
 * The MoE backends' activation and gather kernels are private to
 * src/backends (tests/include_layers.sh); the ones here follow the same
 * specification (src/format/nvfp4.c) through the shared arithmetic of
 * kernels/fp4_quantize_math.h. */
#ifdef FP4_HAVE_NCCL

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/gpu.h"
#include "kernels/fp4_quantize_math.h"
#include "multigpu/layer_gpu.h"

#define LAYER_THREADS 256
#define LAYER_MAX_BLOCKS 8192

static unsigned blocks_for(int64_t n)
{
    int64_t b = (n + LAYER_THREADS - 1) / LAYER_THREADS;
    return (unsigned)(b < 1 ? 1 : b > LAYER_MAX_BLOCKS ? LAYER_MAX_BLOCKS : b);
}

/* ---- kernels ----------------------------------------------------------------------------------- */

static __device__ __forceinline__ float dev_bf16(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

/* fp4_moe_activation in fp32 (expf): the rounding a GPU pipeline has. */
static __device__ __forceinline__ float dev_act(int act, float g, float u)
{
    if (act == FP4_MOE_ACT_SWIGLU_OAI) {
        const float gc = fminf(g, FP4_MOE_SWIGLU_LIMIT);
        const float uc = fmaxf(-FP4_MOE_SWIGLU_LIMIT, fminf(u, FP4_MOE_SWIGLU_LIMIT));
        const float sig = 1.0f / (1.0f + expf(-FP4_MOE_SWIGLU_ALPHA * gc));
        return gc * sig * (uc + 1.0f);
    }
    return g / (1.0f + expf(-g)) * u;
}

// src is (rows, src_cols) bf16; one thread per block of 16 outputs of (rows, cols).
__global__ static void layer_act_kernel(const uint16_t *__restrict__ src, int64_t src_cols, int act, int64_t rows,
                                        int64_t cols, float gs, uint16_t *__restrict__ out_bf16,
                                        uint8_t *__restrict__ codes, uint8_t *__restrict__ scales)
{
    const int64_t blocks_per_row = cols / 16, total = rows * blocks_per_row;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / blocks_per_row, c0 = (i % blocks_per_row) * 16;
        const uint16_t *row = src + r * src_cols;
        float v[16], big = 0.0f;
        for (int j = 0; j < 16; j++) {
            v[j] = act < 0 ? dev_bf16(row[c0 + j]) : dev_act(act, dev_bf16(row[c0 + j]), dev_bf16(row[cols + c0 + j]));
            big = fmaxf(big, fabsf(v[j]));
        }
        if (!codes) {
            for (int j = 0; j < 16; j++) out_bf16[r * cols + c0 + j] = __bfloat16_as_ushort(__float2bfloat16_rn(v[j]));
            continue;
        }
        /* the block scale sf = e4m3(gs * max / 6); the codes e2m1(x / (sf / gs)) */
        const uint8_t sf_bits = (uint8_t)__nv_cvt_float_to_fp8(__fmul_rn(gs, __fdiv_rn(big, 6.0f)), __NV_SATFINITE,
                                                               __NV_E4M3);
        const float sf = __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)sf_bits, __NV_E4M3)));
        const float inv = sf == 0.0f ? 0.0f : __fdiv_rn(1.0f, __fdiv_rn(sf, gs));
        uint32_t lo = 0, hi = 0;
        for (int j = 0; j < 16; j++) {
            const float q = __fmul_rn(v[j], inv);
            const uint32_t code = sf == 0.0f ? 0u : ((fp4_qz_bits(q) >> 28) & 8u) | fp4_qz_e2m1_mag(fabsf(q));
            if (j < 8) lo |= code << (4 * j);
            else hi |= code << (4 * (j - 8));
        }
        uint2 packed;
        packed.x = lo;
        packed.y = hi;
        ((uint2 *)codes)[i] = packed; /* bytes [r*cols/2 + c0/2, +8): row-major codes */
        scales[i] = sf_bits;          /* plain row-major [rows, cols/16] */
    }
}

fp4_status layer_act_quant(const uint16_t *src, int64_t src_cols, int act, int64_t rows, int64_t cols,
                           float encode_scale, uint16_t *out_bf16, uint8_t *codes, uint8_t *scales,
                           cudaStream_t s, fp4_err *err)
{
    if (!src || cols < 16 || cols % 16 || src_cols != (act < 0 ? cols : 2 * cols) ||
        (codes ? (!scales || ((uintptr_t)codes & 7) || !(encode_scale > 0.0f)) : !out_bf16))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "layer activation: bad arguments");
    if (rows < 1) return FP4_OK;
    layer_act_kernel<<<blocks_for(rows * (cols / 16)), LAYER_THREADS, 0, s>>>(src, src_cols, act, rows, cols,
                                                                            encode_scale, out_bf16, codes, scales);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

__global__ static void layer_bf16_kernel(const float *__restrict__ src, int64_t n, uint16_t *__restrict__ dst)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
}

fp4_status layer_to_bf16(const float *src, int64_t n, uint16_t *dst, cudaStream_t s, fp4_err *err)
{
    if (n < 1) return FP4_OK;
    layer_bf16_kernel<<<blocks_for(n), LAYER_THREADS, 0, s>>>(src, n, dst);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

// dst is (rows, row_bytes): row i is src row map[i]; one thread per byte.
__global__ static void layer_gather_kernel(const uint8_t *__restrict__ src, int64_t row_bytes,
                                           const int32_t *__restrict__ map, int64_t rows, uint8_t *__restrict__ dst)
{
    const int64_t total = rows * row_bytes;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / row_bytes;
        dst[i] = src[(int64_t)map[r] * row_bytes + (i - r * row_bytes)];
    }
}

fp4_status layer_gather_rows(const uint8_t *src, int64_t row_bytes, const int32_t *map, int64_t rows,
                             uint8_t *dst, cudaStream_t s, fp4_err *err)
{
    if (rows < 1) return FP4_OK;
    layer_gather_kernel<<<blocks_for(rows * row_bytes), LAYER_THREADS, 0, s>>>(src, row_bytes, map, rows, dst);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

// out is (tokens, n) fp32; rows is (*, n) bf16, the slots' outputs.
__global__ static void layer_wsum_kernel(const uint16_t *__restrict__ rows, int64_t n, const int32_t *__restrict__ row_of,
                                         const float *__restrict__ w, int64_t tokens, int k, float *__restrict__ out)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < tokens * n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / n, c = i - t * n;
        float sum = 0.0f;
        for (int j = 0; j < k; j++) sum = fmaf(w[t * k + j], dev_bf16(rows[(int64_t)row_of[t * k + j] * n + c]), sum);
        out[i] = sum;
    }
}

fp4_status layer_weighted_sum(const uint16_t *rows, int64_t n, const int32_t *row_of, const float *w,
                              int64_t tokens, int k, float *out, cudaStream_t s, fp4_err *err)
{
    if (tokens < 1) return FP4_OK;
    layer_wsum_kernel<<<blocks_for(tokens * n), LAYER_THREADS, 0, s>>>(rows, n, row_of, w, tokens, k, out);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

/* ---- host-side pieces ----------------------------------------------------------------------------- */

float layer_bf16_value(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

fp4_status layer_alloc(nccl_rank *r, void **dst, size_t n, fp4_err *err)
{
    fp4_status st = FP4_OK;
    *dst = NULL;
    NCCL_RANK_CUDA(err, st, r, cudaMalloc(dst, n < 16 ? 16 : n), out);
out:
    return st;
}

fp4_status layer_upload(nccl_rank *r, void **dst, const void *src, size_t n, fp4_err *err)
{
    fp4_status st = layer_alloc(r, dst, n, err);
    /* on the rank's stream, waited for: a plain cudaMemcpy from pageable memory
     * may return before its DMA lands, unordered with the non-blocking stream
     * the layer's kernels run on */
    if (st == FP4_OK && n)
        NCCL_RANK_CUDA(err, st, r, cudaMemcpyAsync(*dst, src, n, cudaMemcpyHostToDevice, r->stream), out);
    if (st == FP4_OK && n) NCCL_RANK_CUDA(err, st, r, cudaStreamSynchronize(r->stream), out);
out:
    return st;
}

fp4_status layer_corrupt_bf16(nccl_rank *r, uint16_t *row, int64_t cols, fp4_err *err)
{
    fp4_status st = FP4_OK;
    uint16_t *host = (uint16_t *)malloc((size_t)cols * sizeof *host), v;
    float big = 0, f;
    uint32_t bits;
    if (!host) return fp4_fail(err, FP4_ERR_NOMEM, "rank %d: no memory for the planted fault", r->rank);
    NCCL_RANK_CUDA(err, st, r, cudaMemcpy(host, row, (size_t)cols * sizeof *host, cudaMemcpyDeviceToHost), out);
    /* far beyond the row's largest value: an element near zero, changed by
     * a little, would hide under a tolerance relative to the largest */
    for (int64_t c = 0; c < cols; c++)
        if (fabsf(layer_bf16_value(host[c])) > big) big = fabsf(layer_bf16_value(host[c]));
    f = -(64.0f * big + 1.0f);
    memcpy(&bits, &f, sizeof bits);
    v = (uint16_t)(bits >> 16);
    /* ordered with the rank's stream (layer_upload says why) */
    NCCL_RANK_CUDA(err, st, r, cudaMemcpyAsync(row + cols / 2, &v, sizeof v, cudaMemcpyHostToDevice, r->stream), out);
    NCCL_RANK_CUDA(err, st, r, cudaStreamSynchronize(r->stream), out);
out:
    free(host);
    return st;
}

fp4_status layer_read_rows_bf16(nccl_rank *r, const uint16_t *dev, int64_t cols, const layer_case *lc, float *out,
                                fp4_err *err)
{
    fp4_status st = FP4_OK;
    uint16_t *row = (uint16_t *)malloc((size_t)cols * sizeof *row);
    if (!row) return fp4_fail(err, FP4_ERR_NOMEM, "rank %d: no memory to read the output", r->rank);
    for (int64_t i = 0; i < lc->nrows; i++) {
        NCCL_RANK_CUDA(err, st, r,
                       cudaMemcpy(row, dev + lc->rows[i] * cols, (size_t)cols * sizeof *row, cudaMemcpyDeviceToHost),
                       out);
        for (int64_t c = 0; c < cols; c++) out[i * cols + c] = layer_bf16_value(row[c]);
    }
out:
    free(row);
    return st;
}

/* ---- the per-rank driver --------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Capture every variant's graph, then time them in turn (every rank in the
 * same order: the graphs hold collectives). */
static fp4_status time_rank(layer_job *j, nccl_rank *r, void *state, int *followed, fp4_err *err)
{
    const layer_kind_ops *ops = j->ops;
    const fp4_layer_settings *s = j->set;
    cudaGraph_t graph[LAYER_MAX_VARIANTS] = {NULL};
    cudaGraphExec_t exec[LAYER_MAX_VARIANTS] = {NULL};
    cudaEvent_t start = NULL, stop = NULL;
    double *times = (double *)malloc((size_t)s->reps * sizeof *times);
    fp4_status st = FP4_OK;
    *followed = 0;
    if (!times) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "rank %d: no memory for the times", r->rank);
        goto built;
    }
    NCCL_RANK_CUDA(err, st, r, cudaEventCreate(&start), built);
    NCCL_RANK_CUDA(err, st, r, cudaEventCreate(&stop), built);
    for (int v = 0; v < ops->nvariants && st == FP4_OK; v++) {
        /* thread-local: the other ranks' threads capture at the same time */
        NCCL_RANK_CUDA(err, st, r, cudaStreamBeginCapture(r->stream, cudaStreamCaptureModeThreadLocal), built);
        for (int i = 0; i < s->iters && st == FP4_OK; i++) st = ops->enqueue(j, r, state, ops->variants[v], err);
        { /* the capture is ended whatever happened in it */
            cudaError_t e = cudaStreamEndCapture(r->stream, &graph[v]);
            if (st != FP4_OK) goto built;
            NCCL_RANK_CUDA(err, st, r, e, built);
        }
        NCCL_RANK_CUDA(err, st, r, cudaGraphInstantiate(&exec[v], graph[v], 0), built);
    }
built:
    if (nccl_agree_max(j->c, st == FP4_OK ? NCCL_AGREE_OK : NCCL_AGREE_ERROR) != NCCL_AGREE_OK) {
        if (st == FP4_OK) {
            *followed = 1;
            st = fp4_fail(err, FP4_ERR_CUDA, "rank %d (GPU %d): stopped: another rank failed", r->rank, r->device);
        }
        goto out;
    }
    for (int v = 0; v < ops->nvariants; v++) {
        for (int w = 0; w < s->warmup; w++) NCCL_RANK_CUDA(err, st, r, cudaGraphLaunch(exec[v], r->stream), out);
        NCCL_RANK_CUDA(err, st, r, cudaStreamSynchronize(r->stream), out);
        for (int k = 0; k < s->reps; k++) {
            float ms = 0;
            if ((st = nccl_barrier(j->c, err)) != FP4_OK) goto out; /* every rank starts together */
            NCCL_RANK_CUDA(err, st, r, cudaEventRecord(start, r->stream), out);
            NCCL_RANK_CUDA(err, st, r, cudaGraphLaunch(exec[v], r->stream), out);
            NCCL_RANK_CUDA(err, st, r, cudaEventRecord(stop, r->stream), out);
            NCCL_RANK_CUDA(err, st, r, cudaEventSynchronize(stop), out);
            NCCL_RANK_CUDA(err, st, r, cudaEventElapsedTime(&ms, start, stop), out);
            times[k] = 1000.0 * ms / s->iters;
        }
        qsort(times, (size_t)s->reps, sizeof times[0], cmp_double);
        j->median_us[r->rank][v] =
            s->reps % 2 ? times[s->reps / 2] : 0.5 * (times[s->reps / 2 - 1] + times[s->reps / 2]);
    }
out:
    for (int v = 0; v < LAYER_MAX_VARIANTS; v++) {
        if (exec[v] && cudaGraphExecDestroy(exec[v]) != cudaSuccess && st == FP4_OK)
            st = fp4_fail(err, FP4_ERR_CUDA, "rank %d: cudaGraphExecDestroy failed", r->rank);
        if (graph[v] && cudaGraphDestroy(graph[v]) != cudaSuccess && st == FP4_OK)
            st = fp4_fail(err, FP4_ERR_CUDA, "rank %d: cudaGraphDestroy failed", r->rank);
    }
    if (start) (void)cudaEventDestroy(start);
    if (stop) (void)cudaEventDestroy(stop);
    free(times);
    return st;
}

/* One rank's whole row: set up, verify, time. */
static void layer_rank(fp4_nccl_comms *c, nccl_rank *r, void *arg, nccl_rank_result *res)
{
    layer_job *j = (layer_job *)arg;
    const layer_kind_ops *ops = j->ops;
    layer_verdict *v = &j->verdict[r->rank];
    void *state = calloc(1, ops->state_size);
    fp4_err *err = &res->err;
    fp4_err sub;
    fp4_status st = FP4_OK;
    int agreed, major = 0, minor = 0, set_up = 0;
    v->bad = 0;
    v->err_max = v->err_norm = NAN;
    for (int k = 0; k < LAYER_MAX_VARIANTS; k++) j->median_us[r->rank][k] = NAN;
    if (!state) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "rank %d: no memory for its state", r->rank);
        goto ready;
    }
    NCCL_RANK_CUDA(err, st, r, cudaSetDevice(r->device), ready);
    /* the fp4-sm90 kernels are Hopper's (sm_90a) */
    fp4_err_clear(&sub);
    if (fp4_gpu_require(9, 0, 9, &major, &minor, &sub) != FP4_OK || minor != 0) {
        st = fp4_fail(err, FP4_ERR_UNSUPPORTED, "rank %d (GPU %d): needs sm_90 (Hopper)%s%s", r->rank, r->device,
                      sub.msg[0] ? ": " : "", sub.msg[0] ? fp4_err_text(&sub) : "");
        goto ready;
    }
    set_up = 1;
    st = ops->setup(j, r, state, err);
ready: /* every rank has its buffers, or none goes on */
    agreed = nccl_agree_max(c, st == FP4_OK ? NCCL_AGREE_OK : NCCL_AGREE_ERROR);
    if (agreed != NCCL_AGREE_OK) goto stop;

    st = ops->poison(j, r, state, err);
    if (st == FP4_OK) st = ops->enqueue(j, r, state, ops->first_parts, err);
    if (st == FP4_OK) NCCL_RANK_CUDA(err, st, r, cudaStreamSynchronize(r->stream), checked);
    if (st == FP4_OK && j->set->fault_rank >= 0) st = ops->fault(j, r, state, err);
    if (st == FP4_OK) st = ops->enqueue(j, r, state, ops->rest_parts, err);
    if (st == FP4_OK) NCCL_RANK_CUDA(err, st, r, cudaStreamSynchronize(r->stream), checked);
    if (st == FP4_OK) st = ops->check(j, r, state, err);
checked:
    /* every rank has read back what it holds; a kind that judges all ranks'
     * outputs together (EP) does it on rank 0 once every rank is done */
    agreed = nccl_agree_max(c, st == FP4_OK ? NCCL_AGREE_OK : NCCL_AGREE_ERROR);
    if (agreed != NCCL_AGREE_OK) goto stop;
    if (ops->judge && r->rank == 0) ops->judge(j);
    /* a wrong value on any rank: the row FAILED, nothing is timed */
    agreed = nccl_agree_max(c, v->bad ? NCCL_AGREE_MISMATCH : NCCL_AGREE_OK);
    if (r->rank == 0) j->verify_agreed = agreed;
    if (agreed != NCCL_AGREE_OK) goto stop;
    st = time_rank(j, r, state, &res->followed, err);
    goto out;
stop:
    if (st == FP4_OK && agreed == NCCL_AGREE_ERROR) {
        res->followed = 1;
        st = fp4_fail(err, FP4_ERR_CUDA, "rank %d (GPU %d): stopped: another rank failed", r->rank, r->device);
    }
out:
    if (set_up) {
        (void)cudaStreamSynchronize(r->stream); /* nothing of this row may still run on its buffers */
        ops->teardown(j, r, state);
    }
    free(state);
    res->st = st;
}

fp4_status fp4_layer_probe(const fp4_nccl_config *cfg, int ranks, fp4_nccl_config *sub, fp4_err *why)
{
    int count = 0, avail;
    fp4_status st;
    if (!cfg || !sub) return fp4_fail(why, FP4_ERR_INVALID_ARG, "fp4_layer_probe: NULL argument");
    if (cfg->launcher != FP4_NCCL_THREADS)
        return fp4_fail(why, FP4_ERR_UNSUPPORTED, "fp4bench layer runs its ranks as threads of one process");
    if ((st = fp4_nccl_probe(cfg, why)) != FP4_OK) return st;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1)
        return fp4_fail(why, FP4_ERR_UNSUPPORTED, "no NVIDIA GPU");
    avail = cfg->ndevices ? cfg->ndevices : count;
    if (ranks < 1 || ranks > FP4_NCCL_MAX_RANKS)
        return fp4_fail(why, FP4_ERR_INVALID_ARG, "%d ranks: 1 to %d", ranks, FP4_NCCL_MAX_RANKS);
    if (ranks > avail)
        return fp4_fail(why, FP4_ERR_UNSUPPORTED, "needs %d GPUs, found %d", ranks, avail);
    memset(sub, 0, sizeof *sub);
    sub->launcher = FP4_NCCL_THREADS;
    sub->ndevices = ranks;
    for (int i = 0; i < ranks; i++) sub->devices[i] = cfg->ndevices ? cfg->devices[i] : i;
    return FP4_OK;
}

/* The row's times from every rank's medians: per variant the slowest rank's. */
static void fill_times(const layer_job *j, int n, fp4_layer_row *row, double *slowest)
{
    for (int v = 0; v < j->ops->nvariants; v++) {
        slowest[v] = NAN;
        for (int k = 0; k < n; k++)
            if (!(j->median_us[k][v] <= slowest[v])) slowest[v] = j->median_us[k][v];
    }
    for (int k = 0; k < n; k++) {
        row->rank_total_us[k] = j->median_us[k][0];
        if (row->slowest_rank < 0 || j->median_us[k][0] > row->total_us) {
            row->total_us = j->median_us[k][0];
            row->slowest_rank = k;
        }
    }
}

fp4_status fp4_layer_run(fp4_nccl_comms *c, const fp4_layer_inputs *in, int64_t tokens,
                         const fp4_layer_settings *s, fp4_layer_row *row, fp4_err *err)
{
    layer_job *j = NULL;
    layer_case lc;
    fp4_err why;
    fp4_status st;
    double slowest[LAYER_MAX_VARIANTS];
    int n;
    if (!c || !in || !s || !row) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_layer_run: NULL argument");
    if (s->iters < 1 || s->reps < 1 || s->reps > LAYER_MAX_REPS || s->warmup < 0)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "iters %d (>= 1), reps %d (1..%d), warmup %d (>= 0)", s->iters,
                        s->reps, LAYER_MAX_REPS, s->warmup);
    if (c->launcher != FP4_NCCL_THREADS)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4bench layer runs its ranks as threads of one process");
    n = c->nranks;
    fp4_layer_row_init(row, &in->spec, n, tokens);
    row->iters = s->iters;
    row->reps = s->reps;
    for (int k = 0; k < n; k++) {
        const size_t at = strlen(row->devices);
        snprintf(row->devices + at, sizeof row->devices - at, "%s%d", k ? "," : "", c->local[k].device);
    }
    if (fp4_layer_check(&in->spec, n, tokens, &why) != FP4_OK) {
        row->state = FP4_LAYER_ROW_UNSUPPORTED;
        snprintf(row->why, sizeof row->why, "%s", fp4_err_text(&why));
        return FP4_OK;
    }
    if ((st = layer_case_make(in, n, tokens, &lc, err)) != FP4_OK) return st;
    j = (layer_job *)calloc(1, sizeof *j);
    if (!j) {
        layer_case_free(&lc);
        return fp4_fail(err, FP4_ERR_NOMEM, "no memory for a layer job");
    }
    j->c = c;
    j->lc = &lc;
    j->set = s;
    j->ops = in->spec.kind == FP4_LAYER_TP ? &layer_tp_ops : in->spec.kind == FP4_LAYER_EP ? &layer_ep_ops
                                                                                              : &layer_attn_ops;
    if (in->spec.kind == FP4_LAYER_EP) {
        j->got = (float *)malloc((size_t)lc.nrows * (size_t)in->spec.dims.hidden * sizeof *j->got);
        if (!j->got) {
            st = fp4_fail(err, FP4_ERR_NOMEM, "no memory for the checked outputs");
            goto out;
        }
    }
    row->tol_max = lc.tol_max;
    row->tol_norm = lc.tol_norm;
    snprintf(row->check, sizeof row->check, "%s", lc.desc);
    if (in->spec.kind == FP4_LAYER_ATTN) {
        snprintf(row->shapes, sizeof row->shapes, "qkv %lldx%lldx%lld, o %lldx%lldx%lld", (long long)tokens,
                 (long long)lc.attn.qkv.n, (long long)lc.attn.qkv.k, (long long)tokens, (long long)lc.attn.o.n,
                 (long long)lc.attn.o.k);
        row->flops = 2.0 * n * ((double)lc.attn.qkv.m * lc.attn.qkv.n * lc.attn.qkv.k +
                                (double)lc.attn.o.m * lc.attn.o.n * lc.attn.o.k);
        row->allreduce_bytes = n > 1 ? lc.attn.allreduce_payload_bytes : (double)tokens * lc.attn.dims.hidden * 2;
    } else {
        const fp4_moe_dims *d = &in->spec.dims;
        row->flops = fp4_moe_flops(&lc.plan, d);
        if (in->spec.kind == FP4_LAYER_TP) {
            snprintf(row->shapes, sizeof row->shapes, "gate_up %lldx%lldx%lld, down %lldx%lldx%lld (x%d experts, top-%d)",
                     (long long)lc.plan.pairs, (long long)lc.tp.gate_up.n, (long long)lc.tp.gate_up.k,
                     (long long)lc.plan.pairs, (long long)lc.tp.down.n, (long long)lc.tp.down.k, d->experts, d->top_k);
            row->allreduce_bytes = (double)tokens * d->hidden * 2;
        } else {
            fp4_ep_traffic tx, cb;
            const fp4_par_dtype xt = in->spec.mode == FP4_MOE_W4A4 ? FP4_PAR_NVFP4 : FP4_PAR_BF16;
            if ((st = fp4_ep_traffic_of(&lc.ep, d->hidden, xt, &tx, err)) != FP4_OK ||
                (st = fp4_ep_traffic_of(&lc.ep, d->hidden, FP4_PAR_BF16, &cb, err)) != FP4_OK)
                goto out;
            row->dispatch_bytes = tx.total_bytes;
            row->dispatch_wire_bytes = tx.wire_bytes;
            row->combine_bytes = cb.total_bytes;
            row->combine_wire_bytes = cb.wire_bytes;
            row->recv_imbalance = lc.ep.stats.recv_imbalance;
            snprintf(row->shapes, sizeof row->shapes,
                     "busiest rank: %lld rows; gate_up Rx%lldx%lld, down Rx%lldx%lld over %d experts a rank",
                     (long long)lc.ep.stats.max_recv_pairs, (long long)(2 * d->inter), (long long)d->hidden,
                     (long long)d->hidden, (long long)d->inter, (d->experts + n - 1) / n);
        }
    }

    st = nccl_run_ranks(c, layer_rank, j, err);
    if (st == FP4_ERR_UNSUPPORTED) { /* a GPU that is not Hopper: nothing ran */
        row->state = FP4_LAYER_ROW_UNSUPPORTED;
        snprintf(row->why, sizeof row->why, "%s", fp4_err_text(err));
        st = FP4_OK;
        goto out;
    }
    if (st != FP4_OK) goto out;
    if (j->verify_agreed != NCCL_AGREE_OK) {
        row->state = FP4_LAYER_ROW_FAILED;
        for (int k = 0; k < n; k++)
            if (j->verdict[k].bad) {
                if (in->spec.kind == FP4_LAYER_EP) /* judged once over every rank's tokens */
                    snprintf(row->why, sizeof row->why, "every rank's tokens: %s (%s)", j->verdict[k].why, lc.desc);
                else
                    snprintf(row->why, sizeof row->why, "rank %d: %s (%s)", k, j->verdict[k].why, lc.desc);
                row->err_max = j->verdict[k].err_max;
                row->err_norm = j->verdict[k].err_norm;
                break;
            }
        goto out;
    }
    /* verified: the largest error over the ranks */
    row->err_max = row->err_norm = 0;
    for (int k = 0; k < n; k++) {
        if (j->verdict[k].err_max > row->err_max) row->err_max = j->verdict[k].err_max;
        if (j->verdict[k].err_norm > row->err_norm) row->err_norm = j->verdict[k].err_norm;
    }
    if (in->spec.kind == FP4_LAYER_EP) { /* one global check, by rank 0 */
        row->err_max = j->verdict[0].err_max;
        row->err_norm = j->verdict[0].err_norm;
    }
    fill_times(j, n, row, slowest);
    row->compute_us = slowest[1];
    if (in->spec.kind == FP4_LAYER_EP) {
        const double per_rank_d = row->dispatch_bytes / n, per_rank_c = row->combine_bytes / n;
        const double factor = (double)(n - 1) / n; /* nccl-tests' all-to-all */
        row->dispatch_us = slowest[2];
        row->combine_us = slowest[3];
        row->dispatch_busbw_gbps = per_rank_d / (row->dispatch_us * 1e-6) / 1e9 * factor;
        row->combine_busbw_gbps = per_rank_c / (row->combine_us * 1e-6) / 1e9 * factor;
    } else {
        row->allreduce_us = slowest[2];
        row->allreduce_busbw_gbps = row->allreduce_bytes / (row->allreduce_us * 1e-6) / 1e9 * 2.0 * (n - 1) / n;
    }
    row->tflops = row->flops / (row->total_us * 1e-6) / 1e12;
out:
    if (j) free(j->got);
    free(j);
    layer_case_free(&lc);
    return st;
}

#endif /* FP4_HAVE_NCCL */
