/* The engine's one kernel: the light phase between the samples of an
 * interleaved rate measurement (docs/MEASUREMENT.md, "Ceilings and
 * rooflines"). Built only with CUDA. */
#ifndef FP4_BENCH_LIGHT_PHASE_H
#define FP4_BENCH_LIGHT_PHASE_H

#include <cuda_runtime_api.h>

#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One thread on stream waits on the GPU timer for `us` microseconds
 * (near-idle power, but the GPU stays busy, so the driver sees no idle gap).
 * us <= 0 enqueues nothing. Reports the launch error only. */
fp4_status fp4_gpu_light_phase(double us, cudaStream_t stream, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
