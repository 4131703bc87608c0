/* fp4bench: the machine a run measures on (the calling thread's CUDA device,
 * device 0 unless the thread chose another, and the host). */
#ifndef FP4_DEVICE_H
#define FP4_DEVICE_H

#include <stddef.h>

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

/* Which of the node's GPUs a device is, and its power limit: what a
 * multi-GPU run (fp4bench run --gpus) tells GPUs apart by. Apart from
 * fp4_device_info, whose layout the Python package mirrors. */
typedef struct fp4_device_extra {
    int index;            /* CUDA device number (0 when absent) */
    char pci_bus_id[32];  /* "0000:19:00.0" as CUDA gives it ("" when absent) */
    double power_limit_w; /* NVML's enforced power limit, W; 0 unknown (the engine's) */
} fp4_device_extra;

/* Fill info for the calling thread's current CUDA device (device 0 unless
 * the thread called cudaSetDevice) and the host: present = 0 with the reason
 * in why_absent when there is no usable GPU (or the build has no CUDA).
 * Never fails; the nvml and driver_string fields are left for the engine,
 * which loads NVML. */
void fp4_device_describe(fp4_device_info *info);

/* The calling thread's current CUDA device: its number and PCI bus id
 * (power_limit_w 0: the engine reads it through NVML). All zero without a
 * GPU. Never fails. */
void fp4_device_locate(fp4_device_extra *x);

/* The number of CUDA devices; 0 with the reason in why (why_len bytes) when
 * there is none, the driver is missing, or the build has no CUDA. */
int fp4_device_count(char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
