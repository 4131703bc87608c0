/* The backends compiled into libfp4 (the registry in registry.c lists them). */
#ifndef FP4_BACKENDS_H
#define FP4_BACKENDS_H

#include "fp4/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dlopen a plugin and find its entry symbol: *handle for dlclose, *entry the
 * symbol's address. Says why when it cannot (the file, libfp4 not exported
 * to plugins, no such symbol, a plugin of the other kind). */
fp4_status fp4_plugin_open(const char *path, const char *symbol, void **handle, void **entry,
                           fp4_err *err);
/* The end of a loader, with st its checks' verdict on the table: on success
 * *handle = h; else h closed, *handle NULL and err naming the plugin. */
fp4_status fp4_plugin_finish(const char *path, void *h, fp4_status st, void **handle, fp4_err *err);

extern const fp4_backend_ops fp4_backend_cpu_ref;
#ifdef FP4_HAVE_CUDA
extern const fp4_backend_ops fp4_backend_cuda_ref;
extern const fp4_backend_ops fp4_backend_cublas_bf16;
extern const fp4_backend_ops fp4_backend_cublaslt_fp8;
extern const fp4_backend_ops fp4_backend_cublaslt_nvfp4;
extern const fp4_backend_ops fp4_backend_fp4_sm90;
extern const fp4_backend_ops fp4_backend_quantize;
extern const fp4_backend_ops fp4_backend_w4a4_sm90;
/* The A operand (codes, swizzled scales) of one copy of an fp4-sm90 plan:
 * w4a4-sm90 quantizes into it before the GEMM. */
fp4_status fp4_sm90_plan_a(void *plan, int copy, uint8_t **codes, uint8_t **sf, fp4_err *err);
#endif

#ifdef __cplusplus
}
#endif
#endif
