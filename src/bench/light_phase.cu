/* The light phase of an interleaved rate measurement (see light_phase.h). */
#include "bench/light_phase.h"

#include "core/cuda_check.h"

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
