/* Streaming-read probe: each thread sums 16-byte vectors in a grid-stride
 * loop with 4 independent loads in flight; one word per block is written so
 * that the compiler cannot drop the loads. Grid: 4 blocks of 512 threads per
 * SM (one block per SM reads 30-45% slower on Hopper, CONTEXT.md section 5). */
#include "core/gpu.h"
#include "kernels/probe.h"

#include <stdlib.h>

__global__ void probe_read_kernel(const uint4 *__restrict__ src, size_t n, unsigned *out)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned acc = 0;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldcs(src + i), b = __ldcs(src + i + stride);
        uint4 c = __ldcs(src + i + 2 * stride), d = __ldcs(src + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
        acc ^= c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        uint4 a = __ldcs(src + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    __shared__ unsigned block_acc;
    if (threadIdx.x == 0) block_acc = 0;
    __syncthreads();
    atomicXor(&block_acc, acc);
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = block_acc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

extern "C" fp4_status fp4_probe_read_bandwidth(size_t bytes, int reps, double *gbps,
                                               double *median_gbps, fp4_warnings *warn,
                                               fp4_err *err)
{
    fp4_status st = FP4_OK;
    void *buf = NULL;
    unsigned *out = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double *rates = NULL;
    int dev = 0, sms = 0;
    size_t n = bytes / 16;
    if (reps < 1 || n == 0) return fp4_fail(err, FP4_ERR_INVALID_ARG, "probe: bad size or reps");
    rates = (double *)calloc((size_t)reps, sizeof *rates);
    if (!rates) return fp4_fail(err, FP4_ERR_NOMEM, "probe: no memory");
    FP4_CUDA_GOTO(err, st, cudaGetDevice(&dev), out);
    FP4_CUDA_GOTO(err, st, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), out);
    if ((st = fp4_gpu_alloc(&buf, n * 16, "the bandwidth probe", err)) != FP4_OK) goto out;
    if ((st = fp4_gpu_alloc((void **)&out, (size_t)sms * 4 * sizeof(unsigned), "probe output", err)) != FP4_OK)
        goto out;
    FP4_CUDA_GOTO(err, st, cudaMemset(buf, 0x5A, n * 16), out); /* not zeros */
    FP4_CUDA_GOTO(err, st, cudaEventCreate(&e0), out);
    FP4_CUDA_GOTO(err, st, cudaEventCreate(&e1), out);
    for (int r = -1; r < reps; r++) {
        float ms = 0;
        FP4_CUDA_GOTO(err, st, cudaEventRecord(e0, 0), out);
        probe_read_kernel<<<sms * 4, 512>>>((const uint4 *)buf, n, out);
        FP4_CUDA_GOTO(err, st, cudaGetLastError(), out);
        FP4_CUDA_GOTO(err, st, cudaEventRecord(e1, 0), out);
        FP4_CUDA_GOTO(err, st, cudaEventSynchronize(e1), out);
        FP4_CUDA_GOTO(err, st, cudaEventElapsedTime(&ms, e0, e1), out);
        if (r >= 0) rates[r] = (double)n * 16 / (ms * 1e-3) / 1e9;
    }
    qsort(rates, (size_t)reps, sizeof *rates, cmp_double);
    *gbps = rates[reps - 1];
    *median_gbps = rates[reps / 2];
out:
    if (e0) FP4_CUDA_CLEANUP(warn, cudaEventDestroy(e0));
    if (e1) FP4_CUDA_CLEANUP(warn, cudaEventDestroy(e1));
    fp4_gpu_release(buf, "bandwidth probe buffer", warn);
    fp4_gpu_release(out, "bandwidth probe sink", warn);
    free(rates);
    return st;
}
