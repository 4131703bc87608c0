/* The list of compiled-in backends, shape checks, and external plugins. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/backends.h"
#include "fp4/backend.h"
#include "fp4/moe_backend.h"

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

/* fp4/backend.h */
fp4_status fp4_gemm_problem_check(const fp4_gemm_problem *p, int copies, fp4_err *err)
{
    if (!p || !p->a || !p->b)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "prepare: NULL problem or matrix");
    if (!p->a->codes || !p->a->scales || !p->b->codes || !p->b->scales)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "prepare: a matrix has no codes or scales");
    fp4_status st = fp4_shape_check(&p->shape, err);
    if (st != FP4_OK) return st;
    const fp4_shape *s = &p->shape;
    if (p->a->rows != s->m || p->a->cols != s->k)
        return fp4_fail(
            err, FP4_ERR_SHAPE, "prepare: A is [%lld, %lld], the shape wants [%lld, %lld]",
            (long long)p->a->rows, (long long)p->a->cols, (long long)s->m, (long long)s->k);
    if (p->b->rows != s->n || p->b->cols != s->k)
        return fp4_fail(
            err, FP4_ERR_SHAPE, "prepare: B is [%lld, %lld], the shape wants [%lld, %lld]",
            (long long)p->b->rows, (long long)p->b->cols, (long long)s->n, (long long)s->k);
    if (p->a_odd && (!p->a_odd->codes || !p->a_odd->scales))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "prepare: a_odd has no codes or scales");
    if (p->a_odd && (p->a_odd->rows != s->m || p->a_odd->cols != s->k))
        return fp4_fail(err, FP4_ERR_SHAPE,
                        "prepare: a_odd is [%lld, %lld], the shape wants [%lld, %lld]",
                        (long long)p->a_odd->rows, (long long)p->a_odd->cols, (long long)s->m,
                        (long long)s->k);
    if (!isfinite(p->alpha))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "prepare: alpha is not finite (%g)",
                        (double)p->alpha);
    if (copies < 1 || copies > FP4_MAX_COPIES)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "prepare: copies = %d, want 1..%d", copies,
                        FP4_MAX_COPIES);
    const fp4_matrix *mats[3] = {p->a, p->b, p->a_odd};
    static const char *const mat_names[3] = {"A", "B", "a_odd"};
    for (int i = 0; i < 3 && mats[i]; i++) {
        size_t nsc = (size_t)mats[i]->rows * (size_t)(mats[i]->cols / FP4_BLOCK);
        for (size_t j = 0; j < nsc; j++)
            if ((mats[i]->scales[j] & 0x7F) == 0x7F || mats[i]->scales[j] > 0x80)
                return fp4_fail(err, FP4_ERR_INVALID_ARG,
                                "prepare: %s scale (%zu, %zu) is 0x%02X: NaN or negative, not a "
                                "UE4M3 scale",
                                mat_names[i], j / (size_t)(mats[i]->cols / FP4_BLOCK),
                                j % (size_t)(mats[i]->cols / FP4_BLOCK), mats[i]->scales[j]);
    }
    return FP4_OK;
}


double fp4_shape_flops(const fp4_shape *s)
{
    return 2.0 * (double)s->m * (double)s->n * (double)s->k;
}

/* Longest backend name: a report row holds FP4_NAME_LEN - 1 bytes of it
 * (fp4/engine.h, a layer above this one). */
#define BACKEND_NAME_MAX 47

/* Why name cannot name a backend, or NULL when it can. Names go into tables,
 * CSV, JSON and comma-separated --backend lists, so they are kept to
 * a-z 0-9 '-' '_' '.'; "all" is --backend's word for every backend. */
static const char *backend_name_problem(const char *name)
{
    size_t len;
    if (!name || !name[0]) return "is empty";
    len = strnlen(name, BACKEND_NAME_MAX + 1);
    if (len > BACKEND_NAME_MAX) return "is longer than 47 bytes";
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
            return "has a character other than a-z, 0-9, '-', '_' and '.'";
    }
    if (strcmp(name, "all") == 0) return "is 'all', which --backend reserves for every backend";
    return NULL;
}

fp4_status fp4_backend_validate(const fp4_backend_ops *ops, fp4_err *err)
{
    const char *why;
    const unsigned known_flags = FP4_BACKEND_GPU | FP4_BACKEND_REFERENCE | FP4_BACKEND_LOSSY |
                                 FP4_BACKEND_NOT_GEMM | FP4_BACKEND_FROM_BF16;
    if (!ops) return fp4_fail(err, FP4_ERR_INVALID_ARG, "backend table is NULL");
    if (ops->api_version != FP4_BACKEND_API_VERSION)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "backend API version %d, this fp4bench speaks version %d",
                        ops->api_version, FP4_BACKEND_API_VERSION);
    /* the name itself is not echoed: it may not print */
    if ((why = backend_name_problem(ops->name)) != NULL)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "backend name %s", why);
    if (!ops->summary)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "backend '%s' has no summary (\"\" will do)", ops->name);
    if (!ops->open || !ops->close || !ops->prepare || !ops->poison || !ops->run ||
        !ops->read_output || !ops->release)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "backend '%s' lacks a mandatory function",
                        ops->name);
    if (ops->flags & ~known_flags)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "backend '%s' has flags 0x%x, of which 0x%x are unknown",
                        ops->name, ops->flags, ops->flags & ~known_flags);
    if ((int)ops->math < (int)FP4_MATH_CPU || (int)ops->math > (int)FP4_MATH_FP4_TC)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "backend '%s' has an unknown math kind %d", ops->name,
                        (int)ops->math);
    /* NaN would fail every comparison silently, a negative tolerance every result */
    if (!isfinite(ops->tol_max) || ops->tol_max < 0.0 || !isfinite(ops->tol_norm) || ops->tol_norm < 0.0)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "backend '%s' has tolerances %g, %g: want finite and >= 0",
                        ops->name, ops->tol_max, ops->tol_norm);
    if (ops->own_reference && !(isfinite(ops->own_tol) && ops->own_tol > 0.0))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "backend '%s' has own_reference with own_tol %g: want "
                        "finite and > 0", ops->name, ops->own_tol);
    return FP4_OK;
}

fp4_status fp4_plugin_open(const char *path, const char *symbol, void **handle, void **entry,
                           fp4_err *err)
{
    *handle = NULL;
    *entry = NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        /* the usual trouble with a plugin that calls libfp4 (fp4_fail, ...) */
        if (why && strstr(why, "undefined symbol: fp4_"))
            return fp4_fail(err, FP4_ERR_IO, "cannot load plugin %s: %s (this program does not export "
                            "libfp4 to plugins: link the plugin with -lfp4)", path, why);
        return fp4_fail(err, FP4_ERR_IO, "cannot load plugin %s: %s", path, why ? why : "unknown error");
    }
    void *sym = dlsym(h, symbol);
    if (!sym) {
        /* a plugin of the other kind says what it is */
        const char *other = strcmp(symbol, FP4_BACKEND_ENTRY_SYMBOL) == 0 ? FP4_MOE_BACKEND_ENTRY_SYMBOL
                                                                        : FP4_BACKEND_ENTRY_SYMBOL;
        const char *hint = !dlsym(h, other) ? ""
                           : strcmp(other, FP4_BACKEND_ENTRY_SYMBOL) == 0
                               ? " (it is a GEMM backend: load it with fp4bench run, list or gemm)"
                               : " (it is an MoE backend: load it with fp4bench moe)";
        dlclose(h);
        return fp4_fail(err, FP4_ERR_FORMAT, "plugin %s has no symbol %s%s", path, symbol, hint);
    }
    *handle = h;
    *entry = sym;
    return FP4_OK;
}

fp4_status fp4_plugin_finish(const char *path, void *h, fp4_status st, void **handle, fp4_err *err)
{
    if (st == FP4_OK) {
        *handle = h;
        return FP4_OK;
    }
    char msg[FP4_ERR_MSG_LEN];
    snprintf(msg, sizeof msg, "%s", fp4_err_text(err));
    dlclose(h);
    *handle = NULL;
    return fp4_fail(err, st, "plugin %s: %s", path, msg);
}

fp4_status fp4_backend_load(const char *path, const fp4_backend_ops **ops, void **handle,
                            fp4_err *err)
{
    if (!path || !ops || !handle)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_backend_load: NULL argument");
    *ops = NULL;
    void *h, *entry;
    fp4_status st = fp4_plugin_open(path, FP4_BACKEND_ENTRY_SYMBOL, &h, &entry, err);
    if (st != FP4_OK) {
        *handle = NULL;
        return st;
    }
    /* dlsym gives a void*; convert through a union to avoid the
     * object-to-function-pointer cast warning. */
    union {
        void *obj;
        fp4_backend_entry_fn fn;
    } sym;
    sym.obj = entry;
    const fp4_backend_ops *table = sym.fn();
    st = fp4_backend_validate(table, err);
    /* rows are told apart by backend name */
    if (st == FP4_OK && fp4_backend_find(table->name))
        st = fp4_fail(err, FP4_ERR_INVALID_ARG, "its backend is named '%s', as a built-in backend is",
                      table->name);
    if ((st = fp4_plugin_finish(path, h, st, handle, err)) == FP4_OK) *ops = table;
    return st;
}

void fp4_backend_unload(void *handle)
{
    if (handle) dlclose(handle);
}
