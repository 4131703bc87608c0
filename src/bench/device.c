/* GPU description (CUDA runtime) and telemetry (NVML through dlopen, so that
 * fp4bench needs neither NVML's header nor its library to build or run). */
#include "bench/device.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef FP4_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* NVML's ABI, the few calls we use (nvml.h is not needed). */
typedef int (*nvml_void_fn)(void);
typedef int (*nvml_handle_by_pci_fn)(const char *, void **);
typedef int (*nvml_clock_fn)(void *, int, unsigned int *);
typedef int (*nvml_uint_fn)(void *, unsigned int *);
typedef int (*nvml_temp_fn)(void *, int, unsigned int *);
typedef int (*nvml_reasons_fn)(void *, unsigned long long *);
typedef int (*nvml_driver_fn)(char *, unsigned int);
typedef int (*nvml_limit_fn)(void *, unsigned int *);

struct fp4_nvml {
    void *lib;
    void *dev;
    nvml_void_fn shutdown;
    nvml_clock_fn clock;
    nvml_uint_fn power;
    nvml_temp_fn temp;
    nvml_reasons_fn reasons;
    char driver[64];
    double power_limit_w; /* enforced limit at open, 0 unknown */
};

#ifdef FP4_HAVE_CUDA
/* dlsym into a function pointer without the object-to-function cast warning. */
static void *sym(void *lib, const char *name)
{
    return dlsym(lib, name);
}

#define LOAD(dst, type, name)                                                           \
    do {                                                                                \
        void *p_ = sym(n->lib, name);                                                   \
        memcpy(&(dst), &p_, sizeof p_);                                                 \
    } while (0)
#endif

fp4_nvml *fp4_nvml_open(char *why, size_t why_len)
{
#ifndef FP4_HAVE_CUDA
    snprintf(why, why_len, "built without CUDA");
    return NULL;
#else
    fp4_nvml *n = calloc(1, sizeof *n);
    nvml_void_fn init = NULL;
    nvml_handle_by_pci_fn by_pci = NULL;
    nvml_driver_fn driver = NULL;
    nvml_limit_fn limit = NULL;
    unsigned int limit_mw = 0;
    char bus[32];
    int dev = 0;
    if (!n) {
        snprintf(why, why_len, "no memory");
        return NULL;
    }
    n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        snprintf(why, why_len, "NVML not found (libnvidia-ml.so.1)");
        goto fail;
    }
    LOAD(init, nvml_void_fn, "nvmlInit_v2");
    LOAD(n->shutdown, nvml_void_fn, "nvmlShutdown");
    LOAD(by_pci, nvml_handle_by_pci_fn, "nvmlDeviceGetHandleByPciBusId_v2");
    LOAD(n->clock, nvml_clock_fn, "nvmlDeviceGetClockInfo");
    LOAD(n->power, nvml_uint_fn, "nvmlDeviceGetPowerUsage");
    LOAD(n->temp, nvml_temp_fn, "nvmlDeviceGetTemperature");
    LOAD(n->reasons, nvml_reasons_fn, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!n->reasons) LOAD(n->reasons, nvml_reasons_fn, "nvmlDeviceGetCurrentClocksThrottleReasons");
    LOAD(driver, nvml_driver_fn, "nvmlSystemGetDriverVersion");
    LOAD(limit, nvml_limit_fn, "nvmlDeviceGetEnforcedPowerLimit");
    if (!init || !n->shutdown || !by_pci || !n->clock) {
        snprintf(why, why_len, "NVML lacks the functions we need");
        goto fail;
    }
    if (init() != 0) {
        snprintf(why, why_len, "nvmlInit failed");
        goto fail;
    }
    /* the handle of the calling thread's device, found by its PCI bus id:
     * NVML's and CUDA's device numbers need not agree (CUDA_VISIBLE_DEVICES,
     * CUDA_DEVICE_ORDER) */
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(bus, sizeof bus, dev) != cudaSuccess ||
        by_pci(bus, &n->dev) != 0) {
        snprintf(why, why_len, "NVML cannot find the CUDA device");
        n->shutdown();
        goto fail;
    }
    if (driver && driver(n->driver, sizeof n->driver) != 0) n->driver[0] = '\0';
    if (limit && limit(n->dev, &limit_mw) == 0) n->power_limit_w = limit_mw / 1000.0;
    return n;
fail:
    if (n->lib) dlclose(n->lib);
    free(n);
    return NULL;
#endif
}

void fp4_nvml_close(fp4_nvml *n)
{
    if (!n) return;
    n->shutdown();
    dlclose(n->lib);
    free(n);
}

const char *fp4_nvml_driver(const fp4_nvml *n)
{
    return n ? n->driver : "";
}

double fp4_nvml_power_limit_w(const fp4_nvml *n)
{
    return n ? n->power_limit_w : 0;
}

int fp4_nvml_read(fp4_nvml *n, fp4_nvml_sample *s)
{
    unsigned int v = 0;
    memset(s, 0, sizeof *s);
    if (!n) return -1;
    if (n->clock(n->dev, 1 /* NVML_CLOCK_SM */, &v) != 0) return -1;
    s->sm_mhz = v;
    if (n->clock(n->dev, 2 /* NVML_CLOCK_MEM */, &v) == 0) s->mem_mhz = v;
    if (n->power && n->power(n->dev, &v) == 0) s->power_w = v / 1000.0;
    if (n->temp && n->temp(n->dev, 0 /* NVML_TEMPERATURE_GPU */, &v) == 0) s->temp_c = v;
    if (n->reasons) (void)n->reasons(n->dev, &s->reasons);
    return 0;
}

/* Vendor datasheet dense peaks (TFLOP/s, GB/s). Leads, not measurements:
 * every row's roofline uses the ceilings measured in the same run. */
typedef struct gpu_peaks {
    const char *match; /* substring of the CUDA device name */
    double bf16, fp8, fp4, bw;
} gpu_peaks;

static const gpu_peaks peak_table[] = {
    {"H200", 989, 1979, 0, 4800},
    {"H100 PCIe", 756, 1513, 0, 2000},
    {"H100", 989, 1979, 0, 3350},
    {"B200", 2250, 4500, 9000, 8000},
    {"B300", 2250, 4500, 13500, 8000},
    {"RTX PRO 6000", 0, 0, 2000, 1792},
    {"RTX 5090", 0, 0, 1676, 1792},
};

void fp4_datasheet_peaks(const char *name, fp4_device_info *info)
{
    for (size_t i = 0; i < sizeof peak_table / sizeof peak_table[0]; i++)
        if (strstr(name, peak_table[i].match)) {
            info->peak_bf16_tflops = peak_table[i].bf16;
            info->peak_fp8_tflops = peak_table[i].fp8;
            info->peak_fp4_tflops = peak_table[i].fp4;
            info->peak_bw_gbps = peak_table[i].bw;
            return;
        }
}

void fp4_device_describe(fp4_device_info *info)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    memset(info, 0, sizeof *info);
    info->cpu_threads = cpus > 0 ? (int)cpus : 1;
#ifndef FP4_HAVE_CUDA
    snprintf(info->why_absent, sizeof info->why_absent, "fp4bench was built without CUDA");
#else
    int count = 0, dev = 0, v = 0;
    struct cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        /* the one place the CUDA error is kept: the header prints it once, the
         * GPU backends' rows then say only "no NVIDIA GPU" */
        snprintf(info->why_absent, sizeof info->why_absent, "no NVIDIA GPU/driver found: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        (void)cudaGetLastError();
        return;
    }
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        snprintf(info->why_absent, sizeof info->why_absent, "cannot read the device properties");
        return;
    }
    info->present = 1;
    snprintf(info->name, sizeof info->name, "%.127s", prop.name);
    info->cc_major = prop.major;
    info->cc_minor = prop.minor;
    info->sms = prop.multiProcessorCount;
    info->l2_bytes = (double)prop.l2CacheSize;
    info->mem_bytes = (double)prop.totalGlobalMem;
    if (cudaDriverGetVersion(&v) == cudaSuccess) info->driver_version = v;
    if (cudaRuntimeGetVersion(&v) == cudaSuccess) info->runtime_version = v;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, dev) == cudaSuccess)
        info->sm_clock_max_mhz = v / 1000.0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, dev) == cudaSuccess)
        info->mem_clock_max_mhz = v / 1000.0;
    fp4_datasheet_peaks(info->name, info);
#endif
}

void fp4_device_locate(fp4_device_extra *x)
{
    memset(x, 0, sizeof *x);
#ifdef FP4_HAVE_CUDA
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    x->index = dev;
    if (cudaDeviceGetPCIBusId(x->pci_bus_id, (int)sizeof x->pci_bus_id, dev) != cudaSuccess) {
        x->pci_bus_id[0] = '\0'; /* a description without it is still one */
        (void)cudaGetLastError();
    }
#endif
}

int fp4_device_count(char *why, size_t why_len)
{
#ifndef FP4_HAVE_CUDA
    snprintf(why, why_len, "fp4bench was built without CUDA");
    return 0;
#else
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        snprintf(why, why_len, "%s", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        (void)cudaGetLastError();
        return 0;
    }
    if (why_len) why[0] = '\0';
    return count;
#endif
}
