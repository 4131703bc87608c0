/* The machine, the engine's side: NVML telemetry (loaded at run time) and the
 * datasheet peaks. fp4_device_describe is public (fp4/device.h). */
#ifndef FP4_BENCH_DEVICE_H
#define FP4_BENCH_DEVICE_H

#include <stddef.h>

#include "fp4/device.h"

/* NVML, loaded with dlopen when present; every field owned by this struct. */
typedef struct fp4_nvml fp4_nvml;

/* Open NVML for the current CUDA device; NULL (and a reason) when NVML or the
 * device is absent: telemetry is optional. */
fp4_nvml *fp4_nvml_open(char *why, size_t why_len);
void fp4_nvml_close(fp4_nvml *n);
const char *fp4_nvml_driver(const fp4_nvml *n);
/* The device's enforced power limit in W, read at open (0 unknown). */
double fp4_nvml_power_limit_w(const fp4_nvml *n);

/* One reading. Returns 0 on success. */
typedef struct fp4_nvml_sample {
    double sm_mhz, mem_mhz, power_w, temp_c;
    unsigned long long reasons;
} fp4_nvml_sample;
int fp4_nvml_read(fp4_nvml *n, fp4_nvml_sample *s);

/* Datasheet dense peaks for a GPU name (0 when unknown). */
void fp4_datasheet_peaks(const char *name, fp4_device_info *info);

#endif
