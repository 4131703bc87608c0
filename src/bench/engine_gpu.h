/* The engine's own kernels (built only with CUDA): the light phase between
 * the samples of an interleaved rate measurement, the stream gate that keeps
 * a replay's submission out of its time, the L2 flush of plain-launch
 * samples, and the coldness check (docs/MEASUREMENT.md). */
#ifndef FP4_BENCH_ENGINE_GPU_H
#define FP4_BENCH_ENGINE_GPU_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One thread on stream waits on the GPU timer for `us` microseconds
 * (near-idle power, but the GPU stays busy, so the driver sees no idle gap).
 * us <= 0 enqueues nothing. Reports the launch error only. */
fp4_status fp4_gpu_light_phase(double us, cudaStream_t stream, fp4_err *err);

/* The stream gate: a one-thread kernel that holds the stream until the host
 * opens the gate, so that the start event, the graph replay and the stop
 * event are all enqueued before the GPU reaches the start event. The time
 * between the events is then the GPU's alone: the host's submission and the
 * replay's launch latency stay out of it. The flag lives in mapped pinned
 * host memory owned by the gate. */
typedef struct fp4_gpu_gate {
    volatile int *open;     /* host view of the flag */
    int *open_dev;          /* device view */
    int *timed_out;         /* mapped: set by the kernel when it gave up */
    int *timed_out_dev;
} fp4_gpu_gate;

fp4_status fp4_gpu_gate_create(fp4_gpu_gate *g, fp4_err *err);
void fp4_gpu_gate_destroy(fp4_gpu_gate *g, fp4_warnings *warn);
/* Close the gate and enqueue the waiting kernel (it gives up after
 * timeout_ms, which fp4_gpu_gate_timed_out then reports). */
fp4_status fp4_gpu_gate_hold(fp4_gpu_gate *g, cudaStream_t stream, double timeout_ms,
                             fp4_err *err);
void fp4_gpu_gate_release(fp4_gpu_gate *g);
/* After the stream has passed the gate: did the kernel give up waiting? */
int fp4_gpu_gate_timed_out(const fp4_gpu_gate *g);

/* Evict L2 by reading `bytes` of buf (>= 2x L2) with ordinary loads: the L2
 * ends up holding clean lines, so no write-back of earlier dirty lines falls
 * into the sample that follows (a memset flush would leave dirty lines). */
fp4_status fp4_gpu_l2_flush(const void *buf, size_t bytes, unsigned *sink, cudaStream_t stream,
                            fp4_err *err);

/* The coldness check: buffers of l2_bytes/4 read eight at a time, hot (one
 * buffer eight times), rotated (the next eight of twenty, 5x L2) and right
 * after a flush (eight buffers after the twelve others); GB/s medians. */
typedef struct fp4_l2_check_result {
    double buffer_bytes, rotation_bytes;
    double hot_gbps, rotated_gbps, flushed_gbps;
} fp4_l2_check_result;
fp4_status fp4_gpu_l2_check(double l2_bytes, cudaStream_t stream, fp4_l2_check_result *out,
                            fp4_warnings *warn, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
