/* fp4bench: the machine a run measures on (CUDA device 0 and the host). */
#ifndef FP4_DEVICE_H
#define FP4_DEVICE_H

#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fp4_device_info {
    int present;           /* a CUDA GPU was found */
    char why_absent[FP4_ERR_MSG_LEN];
    char name[128];
    int cc_major, cc_minor;
    int sms;
    double l2_bytes;
    double mem_bytes;
    int driver_version, runtime_version; /* CUDA's encoding: 13000 = 13.0 */
    double sm_clock_max_mhz, mem_clock_max_mhz;
    int nvml;               /* NVML was loaded */
    char driver_string[64]; /* NVML's driver version, if loaded */
    int cpu_threads;        /* host CPUs online */
    /* datasheet dense peaks for this GPU (0 unknown) */
    double peak_bf16_tflops, peak_fp8_tflops, peak_fp4_tflops, peak_bw_gbps;
} fp4_device_info;

/* Fill info for CUDA device 0 and the host: present = 0 with the reason in
 * why_absent when there is no usable GPU (or the build has no CUDA). Never
 * fails; the nvml and driver_string fields are left for the engine, which
 * loads NVML. */
void fp4_device_describe(fp4_device_info *info);

#ifdef __cplusplus
}
#endif
#endif
