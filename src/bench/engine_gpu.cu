/* The engine's own kernels (see engine_gpu.h). */
#include "bench/engine_gpu.h"

#include <stdlib.h>
#include <string.h>

#include "core/gpu.h"

/* ---- light phase ------------------------------------------------------------------ */

/* %globaltimer counts nanoseconds whatever the SM clock does; the sleep keeps
 * the one busy thread from drawing power while it waits. */
__global__ static void light_phase_kernel(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

extern "C" fp4_status fp4_gpu_light_phase(double us, cudaStream_t stream, fp4_err *err)
{
    if (!(us > 0)) return FP4_OK;
    light_phase_kernel<<<1, 1, 0, stream>>>((unsigned long long)(us * 1e3));
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

/* ---- the stream gate --------------------------------------------------------------- */

/* Spins (with short sleeps) until the host writes a non-zero flag, or gives
 * up after timeout_ns so that a host that never opens it cannot hang the GPU. */
__global__ static void gate_kernel(const volatile int *open, int *timed_out,
                                   unsigned long long timeout_ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (;;) {
        if (*open) return;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > timeout_ns) {
            *(volatile int *)timed_out = 1;
            return;
        }
        __nanosleep(200);
    }
}

extern "C" fp4_status fp4_gpu_gate_create(fp4_gpu_gate *g, fp4_err *err)
{
    void *open = NULL, *timed_out = NULL;
    memset(g, 0, sizeof *g);
    FP4_CUDA_TRY(err, cudaHostAlloc(&open, sizeof(int), cudaHostAllocMapped));
    g->open = (volatile int *)open;
    if (cudaHostAlloc(&timed_out, sizeof(int), cudaHostAllocMapped) != cudaSuccess) {
        fp4_gpu_gate_destroy(g, NULL);
        return fp4_fail(err, FP4_ERR_CUDA, "cannot allocate the stream gate's flags");
    }
    g->timed_out = (int *)timed_out;
    if (cudaHostGetDevicePointer((void **)&g->open_dev, open, 0) != cudaSuccess ||
        cudaHostGetDevicePointer((void **)&g->timed_out_dev, timed_out, 0) != cudaSuccess) {
        fp4_gpu_gate_destroy(g, NULL);
        return fp4_fail(err, FP4_ERR_CUDA, "cannot map the stream gate's flags");
    }
    *g->open = 1;
    *g->timed_out = 0;
    return FP4_OK;
}

extern "C" void fp4_gpu_gate_destroy(fp4_gpu_gate *g, fp4_warnings *warn)
{
    if (g->open) FP4_CUDA_CLEANUP(warn, cudaFreeHost((void *)g->open));
    if (g->timed_out) FP4_CUDA_CLEANUP(warn, cudaFreeHost(g->timed_out));
    memset(g, 0, sizeof *g);
}

extern "C" fp4_status fp4_gpu_gate_hold(fp4_gpu_gate *g, cudaStream_t stream, double timeout_ms,
                                        fp4_err *err)
{
    *g->open = 0;
    *g->timed_out = 0;
    __sync_synchronize(); /* both stores visible before the kernel can run */
    gate_kernel<<<1, 1, 0, stream>>>(g->open_dev, g->timed_out_dev,
                                     (unsigned long long)(timeout_ms * 1e6));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        *g->open = 1;
        return fp4_fail(err, FP4_ERR_CUDA, "stream gate launch failed: %s", cudaGetErrorString(e));
    }
    return FP4_OK;
}

extern "C" void fp4_gpu_gate_release(fp4_gpu_gate *g)
{
    __sync_synchronize(); /* everything enqueued before the flag flips */
    *g->open = 1;
}

extern "C" int fp4_gpu_gate_timed_out(const fp4_gpu_gate *g)
{
    return *(const volatile int *)g->timed_out != 0;
}

/* ---- reads that fill L2 ----------------------------------------------------------------- */

/* Ordinary (L2-allocating) 16-byte loads in a grid-stride loop; one word per
 * block is written so that the loads cannot be dropped. */
__global__ static void l2_read_kernel(const uint4 *__restrict__ src, size_t n, unsigned *out)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned acc = 0;
    for (; i + stride < n; i += 2 * stride) {
        const uint4 a = src[i], b = src[i + stride];
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
    }
    for (; i < n; i += stride) {
        const uint4 a = src[i];
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9E3779B9u) out[blockIdx.x] = acc; /* practically never: no write traffic */
}

static int read_grid(void)
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1)
        sms = 132;
    return sms * 4;
}

static fp4_status l2_read(const void *buf, size_t bytes, unsigned *sink, int grid,
                          cudaStream_t stream, fp4_err *err)
{
    l2_read_kernel<<<grid, 512, 0, stream>>>((const uint4 *)buf, bytes / 16, sink);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}

extern "C" fp4_status fp4_gpu_l2_flush(const void *buf, size_t bytes, unsigned *sink,
                                       cudaStream_t stream, fp4_err *err)
{
    return l2_read(buf, bytes, sink, read_grid(), stream, err);
}

/* ---- the coldness check ------------------------------------------------------------------ */

#define L2_CHECK_BUFFERS 20 /* quarters of L2: the rotation spans 5x L2 */
#define L2_CHECK_READS 8    /* buffer reads in one timed kernel (2x L2: its fixed costs weigh little) */
#define L2_CHECK_REPS 9     /* timed kernels per mode; the median is kept */

typedef struct l2_read_list {
    const uint4 *buf[L2_CHECK_READS];
    int count;
} l2_read_list;

/* Reads the listed buffers one after the other (all blocks on buffer i, then
 * on i+1, ...): one kernel holds many reads, so the launch and the events
 * weigh little beside them. */
__global__ static void l2_read_list_kernel(l2_read_list list, size_t n, unsigned *out)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned acc = 0;
    for (int b = 0; b < list.count; b++) {
        const uint4 *src = list.buf[b];
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
            const uint4 a = src[i];
            acc ^= a.x ^ a.y ^ a.z ^ a.w;
        }
    }
    if (acc == 0x9E3779B9u) out[blockIdx.x] = acc;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One timed kernel over the list (GB/s); the stream idle before and after. */
static fp4_status timed_reads(const l2_read_list *list, size_t bytes, unsigned *sink, int grid,
                              cudaStream_t stream, cudaEvent_t ev0, cudaEvent_t ev1, double *gbps,
                              fp4_err *err)
{
    float ms = 0;
    FP4_CUDA_TRY(err, cudaEventRecord(ev0, stream));
    l2_read_list_kernel<<<grid, 512, 0, stream>>>(*list, bytes / 16, sink);
    FP4_CUDA_LAUNCH_TRY(err);
    FP4_CUDA_TRY(err, cudaEventRecord(ev1, stream));
    FP4_CUDA_TRY(err, cudaEventSynchronize(ev1));
    FP4_CUDA_TRY(err, cudaEventElapsedTime(&ms, ev0, ev1));
    *gbps = ms > 0 ? (double)bytes * list->count / (ms * 1e-3) / 1e9 : 0;
    return FP4_OK;
}

extern "C" fp4_status fp4_gpu_l2_check(double l2_bytes, cudaStream_t stream,
                                       fp4_l2_check_result *out, fp4_warnings *warn, fp4_err *err)
{
    memset(out, 0, sizeof *out);
    if (!(l2_bytes > 0)) return fp4_fail(err, FP4_ERR_UNSUPPORTED, "the L2 size is unknown");
    const size_t buf_bytes = ((size_t)(l2_bytes / 4) + 15) / 16 * 16;
    const int grid = read_grid();
    char *pool = NULL;
    unsigned *sink = NULL;
    cudaEvent_t ev0 = NULL, ev1 = NULL;
    double hot[L2_CHECK_REPS], rotated[L2_CHECK_REPS], flushed[L2_CHECK_REPS];
    l2_read_list list;
    int next = 0; /* the rotation's next buffer */
    fp4_status st = fp4_gpu_alloc((void **)&pool, buf_bytes * L2_CHECK_BUFFERS,
                                  "the coldness check's buffers", err);
    if (st == FP4_OK) st = fp4_gpu_alloc((void **)&sink, (size_t)grid * sizeof(unsigned), "sink", err);
    if (st != FP4_OK) goto out;
    FP4_CUDA_GOTO(err, st, cudaMemsetAsync(pool, 0x5A, buf_bytes * L2_CHECK_BUFFERS, stream), out);
    FP4_CUDA_GOTO(err, st, cudaEventCreate(&ev0), out);
    FP4_CUDA_GOTO(err, st, cudaEventCreate(&ev1), out);
    /* hot: buffer 0 again and again (read once before, untimed) */
    if ((st = l2_read(pool, buf_bytes, sink, grid, stream, err)) != FP4_OK) goto out;
    list.count = L2_CHECK_READS;
    for (int i = 0; i < L2_CHECK_READS; i++) list.buf[i] = (const uint4 *)pool;
    for (int r = 0; r < L2_CHECK_REPS && st == FP4_OK; r++)
        st = timed_reads(&list, buf_bytes, sink, grid, stream, ev0, ev1, &hot[r], err);
    /* rotated: each read the next of the buffers, as rows cycle their copies;
     * from buffer 1, so that buffer 0 (hot just now) comes 19 reads later */
    next = 1;
    for (int r = 0; r < L2_CHECK_REPS && st == FP4_OK; r++) {
        for (int i = 0; i < L2_CHECK_READS; i++) {
            list.buf[i] = (const uint4 *)(pool + (size_t)next * buf_bytes);
            next = (next + 1) % L2_CHECK_BUFFERS;
        }
        st = timed_reads(&list, buf_bytes, sink, grid, stream, ev0, ev1, &rotated[r], err);
    }
    /* flushed: read buffers 8..19 (3x L2), then 0..7 once each; the same
     * count of reads in every mode, so each kernel's fixed costs weigh alike */
    for (int i = 0; i < L2_CHECK_READS; i++) list.buf[i] = (const uint4 *)(pool + (size_t)i * buf_bytes);
    for (int r = 0; r < L2_CHECK_REPS && st == FP4_OK; r++) {
        if ((st = l2_read(pool + L2_CHECK_READS * buf_bytes,
                          buf_bytes * (L2_CHECK_BUFFERS - L2_CHECK_READS), sink, grid, stream,
                          err)) != FP4_OK)
            break;
        st = timed_reads(&list, buf_bytes, sink, grid, stream, ev0, ev1, &flushed[r], err);
    }
    if (st != FP4_OK) goto out;
    qsort(hot, L2_CHECK_REPS, sizeof hot[0], cmp_double);
    qsort(rotated, L2_CHECK_REPS, sizeof rotated[0], cmp_double);
    qsort(flushed, L2_CHECK_REPS, sizeof flushed[0], cmp_double);
    out->buffer_bytes = (double)buf_bytes;
    out->rotation_bytes = (double)buf_bytes * L2_CHECK_BUFFERS;
    out->hot_gbps = hot[L2_CHECK_REPS / 2];
    out->rotated_gbps = rotated[L2_CHECK_REPS / 2];
    out->flushed_gbps = flushed[L2_CHECK_REPS / 2];
out:
    if (ev0) FP4_CUDA_CLEANUP(warn, cudaEventDestroy(ev0));
    if (ev1) FP4_CUDA_CLEANUP(warn, cudaEventDestroy(ev1));
    fp4_gpu_release(sink, "the coldness check's sink", warn);
    fp4_gpu_release(pool, "the coldness check's buffers", warn);
    return st;
}
