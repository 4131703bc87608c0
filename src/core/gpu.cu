/* Generic CUDA helpers (see core/gpu.h). */
#include "core/gpu.h"

#include <stdlib.h>
#include <string.h>

extern "C" int fp4_gpu_cleanup(cudaError_t e, const char *call, const char *file, int line,
                               fp4_warnings *w)
{
    if (e == cudaSuccess) return 0;
    fp4_warn(w, "%s:%d: %s failed: %s", file, line, call, cudaGetErrorString(e));
    (void)cudaGetLastError(); /* non-sticky errors only; a sticky one stays */
    return 1;
}

extern "C" int fp4_gpu_release(void *ptr, const char *what, fp4_warnings *w)
{
    if (!ptr) return 0;
    cudaError_t e = cudaFree(ptr);
    if (e == cudaSuccess) return 0;
    fp4_warn(w, "cudaFree(%s) failed: %s", what ? what : "?", cudaGetErrorString(e));
    (void)cudaGetLastError();
    return 1;
}

extern "C" fp4_status fp4_gpu_alloc(void **ptr, size_t bytes, const char *what, fp4_err *err)
{
    *ptr = NULL;
    cudaError_t e = cudaMalloc(ptr, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *ptr = NULL;
        /* the failure is returned here; left as the thread's last error, it
         * would fail the next launch check, of another backend too */
        (void)cudaGetLastError();
        return fp4_fail(err, FP4_ERR_CUDA, "cudaMalloc(%zu bytes) for %s: %s", bytes, what,
                        cudaGetErrorString(e));
    }
    return FP4_OK;
}

extern "C" fp4_status fp4_gpu_upload(void **dptr, const void *host, size_t bytes,
                                     const char *what, fp4_err *err)
{
    fp4_status st = fp4_gpu_alloc(dptr, bytes, what, err);
    if (st != FP4_OK) return st;
    cudaError_t e = cudaMemcpy(*dptr, host, bytes, cudaMemcpyHostToDevice);
    /* from pageable memory cudaMemcpy may return before its DMA lands, and
     * the kernels that read the buffer run on non-blocking streams, which do
     * not wait for the legacy stream: wait for it here */
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        /* the upload's error is the one to report; a failed free after it
         * would only repeat a broken context */
        (void)fp4_gpu_release(*dptr, what, NULL);
        *dptr = NULL;
        return fp4_fail(err, FP4_ERR_CUDA, "upload of %s (%zu bytes): %s", what, bytes,
                        cudaGetErrorString(e));
    }
    return FP4_OK;
}

extern "C" fp4_status fp4_gpu_poison_bf16(void *d, size_t n, cudaStream_t stream, fp4_err *err)
{
    /* memset writes bytes: 0xFFFF is a bf16 NaN (exponent all ones, mantissa
     * non-zero). 0x7F7F would not do: it is the finite 3.4e38. */
    FP4_CUDA_TRY(err, cudaMemsetAsync(d, 0xFF, n * 2, stream));
    return FP4_OK;
}

extern "C" fp4_status fp4_gpu_read_bf16(const void *d, size_t n, float *host, fp4_err *err)
{
    uint16_t *tmp = (uint16_t *)malloc(n > 0 ? n * 2 : 1);
    if (!tmp) return fp4_fail(err, FP4_ERR_NOMEM, "no host memory for %zu outputs", n);
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(tmp, d, n * 2, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        free(tmp);
        return fp4_fail(err, FP4_ERR_CUDA, "reading the output: %s", cudaGetErrorString(e));
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)tmp[i] << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        host[i] = f;
    }
    free(tmp);
    return FP4_OK;
}

extern "C" fp4_status fp4_gpu_read_f32(const void *d, size_t n, float *host, fp4_err *err)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(host, d, n * sizeof(float), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return fp4_fail(err, FP4_ERR_CUDA, "reading the output: %s", cudaGetErrorString(e));
    return FP4_OK;
}

extern "C" fp4_status fp4_gpu_require(int min_major, int min_minor, int max_major, int *major,
                                      int *minor, fp4_err *err)
{
    int count = 0, dev = 0, maj = 0, min = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky-free error so later calls are not confused */
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "no CUDA device: %s", cudaGetErrorString(e));
    }
    if (count == 0) return fp4_fail(err, FP4_ERR_UNSUPPORTED, "no CUDA device");
    FP4_CUDA_TRY(err, cudaGetDevice(&dev));
    FP4_CUDA_TRY(err, cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, dev));
    FP4_CUDA_TRY(err, cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, dev));
    if (major) *major = maj;
    if (minor) *minor = min;
    if (maj < min_major || (maj == min_major && min < min_minor))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "needs sm_%d%d or newer, this GPU is sm_%d%d",
                        min_major, min_minor, maj, min);
    if (max_major > 0 && maj > max_major)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "built for sm_%dx only, this GPU is sm_%d%d",
                        max_major, maj, min);
    return FP4_OK;
}

extern "C" fp4_status fp4_gpu_require_sm90(const char *who, int *num_sms, fp4_err *err)
{
    int maj = 0, min = 0, dev = 0;
    fp4_err sub;
    if (fp4_gpu_require(9, 0, 9, &maj, &min, &sub) != FP4_OK)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "needs sm_90 (Hopper: H100/H200): %s",
                        fp4_err_text(&sub));
    if (min != 0)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "needs sm_90 (Hopper), this GPU is sm_%d%d", maj,
                        min);
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(num_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return fp4_fail(err, FP4_ERR_CUDA, "%s: cannot read the multiprocessor count", who);
    }
    return FP4_OK;
}
