/* The list of compiled-in backends, shape checks, and external plugins. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "backends/backends.h"
#include "fp4/backend.h"

/* Order matters: the reference first, then the vendor baselines, then ours. */
static const fp4_backend_ops *const builtin_backends[] = {
    &fp4_backend_cpu_ref,
#ifdef FP4_HAVE_CUDA
    &fp4_backend_cuda_ref,
    &fp4_backend_cublas_bf16,
    &fp4_backend_cublaslt_fp8,
    &fp4_backend_cublaslt_nvfp4,
    &fp4_backend_fp4_sm90,
    &fp4_backend_quantize,  /* the W4A4 step: the quantizer alone, then with the GEMM */
    &fp4_backend_w4a4_sm90,
#endif
};

int fp4_backend_count(void)
{
    return (int)(sizeof builtin_backends / sizeof builtin_backends[0]);
}

const fp4_backend_ops *fp4_backend_at(int i)
{
    if (i < 0 || i >= fp4_backend_count()) return NULL;
    return builtin_backends[i];
}

const fp4_backend_ops *fp4_backend_find(const char *name)
{
    for (int i = 0; name && i < fp4_backend_count(); i++)
        if (strcmp(builtin_backends[i]->name, name) == 0) return builtin_backends[i];
    return NULL;
}

fp4_status fp4_shape_check(const fp4_shape *s, fp4_err *err)
{
    fp4_status st;
    if (!s) return fp4_fail(err, FP4_ERR_INVALID_ARG, "NULL shape");
    if (s->m < 1 || s->n < 1 || s->k < 1)
        return fp4_fail(err, FP4_ERR_SHAPE, "shape %lldx%lldx%lld: M, N and K must be >= 1",
                        (long long)s->m, (long long)s->n, (long long)s->k);
    if (s->k % FP4_BLOCK != 0)
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "shape %lldx%lldx%lld: K=%lld is not a multiple of 16 (the NVFP4 block)",
                        (long long)s->m, (long long)s->n, (long long)s->k, (long long)s->k);
    if (s->k > (1 << 20))
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "shape %lldx%lldx%lld: K above 2^20, where the exact reference's integer "
                        "sums could overflow",
                        (long long)s->m, (long long)s->n, (long long)s->k);
    if ((st = fp4_check_dims(s->m, s->k, err)) != FP4_OK) return st;
    if ((st = fp4_check_dims(s->n, s->k, err)) != FP4_OK) return st;
    size_t out;
    if (fp4_size_mul3((size_t)s->m, (size_t)s->n, sizeof(float), &out))
        return fp4_fail(err, FP4_ERR_OVERFLOW, "shape %lldx%lldx%lld: output size overflows",
                        (long long)s->m, (long long)s->n, (long long)s->k);
    return FP4_OK;
}

double fp4_shape_flops(const fp4_shape *s)
{
    return 2.0 * (double)s->m * (double)s->n * (double)s->k;
}

fp4_status fp4_backend_validate(const fp4_backend_ops *ops, fp4_err *err)
{
    if (!ops) return fp4_fail(err, FP4_ERR_INVALID_ARG, "backend table is NULL");
    if (ops->api_version != FP4_BACKEND_API_VERSION)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "backend API version %d, this fp4bench speaks version %d",
                        ops->api_version, FP4_BACKEND_API_VERSION);
    if (!ops->name || !ops->name[0])
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "backend has no name");
    if (!ops->open || !ops->close || !ops->prepare || !ops->poison || !ops->run ||
        !ops->read_output || !ops->release)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "backend '%s' lacks a mandatory function",
                        ops->name);
    return FP4_OK;
}

fp4_status fp4_backend_load(const char *path, const fp4_backend_ops **ops, void **handle,
                            fp4_err *err)
{
    fp4_status st;
    void *h;
    fp4_backend_entry_fn entry;
    *ops = NULL;
    *handle = NULL;
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return fp4_fail(err, FP4_ERR_IO, "cannot load plugin %s: %s", path, dlerror());
    /* dlsym returns void*; convert through a union to avoid the
     * object-to-function-pointer cast warning. */
    union {
        void *obj;
        fp4_backend_entry_fn fn;
    } sym;
    sym.obj = dlsym(h, FP4_BACKEND_ENTRY_SYMBOL);
    entry = sym.fn;
    if (!entry) {
        dlclose(h);
        return fp4_fail(err, FP4_ERR_FORMAT, "plugin %s has no symbol %s", path,
                        FP4_BACKEND_ENTRY_SYMBOL);
    }
    if ((st = fp4_backend_validate(entry(), err)) != FP4_OK) {
        char msg[FP4_ERR_MSG_LEN];
        snprintf(msg, sizeof msg, "%s", fp4_err_text(err));
        dlclose(h);
        return fp4_fail(err, st, "plugin %s: %s", path, msg);
    }
    *ops = entry();
    *handle = h;
    return FP4_OK;
}

void fp4_backend_unload(void *handle)
{
    if (handle) dlclose(handle);
}
