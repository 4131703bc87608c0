/* Status names and the error-message helpers. */
#include "fp4/status.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

const char *fp4_status_str(fp4_status s)
{
    switch (s) {
    case FP4_OK: return "ok";
    case FP4_ERR_INVALID_ARG: return "invalid argument";
    case FP4_ERR_SHAPE: return "bad shape";
    case FP4_ERR_OVERFLOW: return "size overflow";
    case FP4_ERR_NOMEM: return "out of memory";
    case FP4_ERR_IO: return "i/o error";
    case FP4_ERR_FORMAT: return "malformed file";
    case FP4_ERR_DTYPE: return "wrong dtype or shape";
    case FP4_ERR_UNSUPPORTED: return "unsupported";
    case FP4_ERR_CUDA: return "CUDA error";
    case FP4_ERR_CUBLAS: return "cuBLAS error";
    case FP4_ERR_VERIFY: return "verification failed";
    case FP4_ERR_NOT_FOUND: return "not found";
    case FP4_ERR_INTERNAL: return "internal error";
    case FP4_ERR_TIMEOUT: return "timeout";
    case FP4_STATUS_COUNT: break;
    }
    return "unknown status";
}

fp4_status fp4_fail(fp4_err *err, fp4_status s, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->status = s;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}

void fp4_err_clear(fp4_err *err)
{
    if (err) {
        err->status = FP4_OK;
        err->msg[0] = '\0';
    }
}

const char *fp4_err_text(const fp4_err *err)
{
    if (!err) return "no error information";
    return err->msg[0] ? err->msg : fp4_status_str(err->status);
}

int fp4_size_mul(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return -1;
    *out = a * b;
    return 0;
}

int fp4_size_mul3(size_t a, size_t b, size_t c, size_t *out)
{
    size_t ab;
    if (fp4_size_mul(a, b, &ab)) return -1;
    return fp4_size_mul(ab, c, out);
}
