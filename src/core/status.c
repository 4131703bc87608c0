/* Status names, the error-message helpers and warnings. */
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
    case FP4_ERR_INTERRUPTED: return "interrupted";
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

/* Append line (without its newline) to w's text if it fits whole. */
static void keep_line(fp4_warnings *w, const char *line, size_t len)
{
    size_t used = strnlen(w->text, sizeof w->text);
    if (used + len + 2 > sizeof w->text) return; /* the line, '\n' and the NUL */
    memcpy(w->text + used, line, len);
    w->text[used + len] = '\n';
    w->text[used + len + 1] = '\0';
}

void fp4_warn(fp4_warnings *w, const char *fmt, ...)
{
    char line[FP4_ERR_MSG_LEN];
    va_list ap;
    size_t len;
    if (!w) return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    len = strcspn(line, "\n"); /* one line per warning */
    w->count++;
    keep_line(w, line, len);
}

void fp4_warnings_append(fp4_warnings *dst, const fp4_warnings *src)
{
    const char *p;
    if (!dst || !src || dst == src) return;
    p = src->text;
    while (*p && (size_t)(p - src->text) < sizeof src->text) {
        size_t len = strcspn(p, "\n");
        keep_line(dst, p, len);
        p += len;
        if (*p == '\n') p++;
    }
    dst->count += src->count;
}

int fp4_warnings_dropped(const fp4_warnings *w)
{
    int lines = 0;
    if (!w) return 0;
    for (size_t i = 0; i < sizeof w->text && w->text[i]; i++) lines += w->text[i] == '\n';
    return w->count > lines ? w->count - lines : 0;
}

void fp4_warnings_clear(fp4_warnings *w)
{
    if (w) {
        w->count = 0;
        w->text[0] = '\0';
    }
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
