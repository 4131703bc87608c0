/* fp4bench: status codes and error messages.
 *
 * Every library function that can fail returns an fp4_status and, when given a
 * non-NULL fp4_err, fills it with a one-line message saying what went wrong.
 * The library never calls exit(); only the command-line tool does. */
#ifndef FP4_STATUS_H
#define FP4_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Append-only: values are part of the plugin ABI and of the JSON output. */
typedef enum fp4_status {
    FP4_OK = 0,
    FP4_ERR_INVALID_ARG = 1, /* a NULL pointer or an out-of-range argument */
    FP4_ERR_SHAPE = 2,       /* bad matrix size: zero, negative, K % 16 != 0 */
    FP4_ERR_OVERFLOW = 3,    /* a size whose buffers overflow size_t */
    FP4_ERR_NOMEM = 4,       /* host allocation failed */
    FP4_ERR_IO = 5,          /* a file could not be opened, read or written */
    FP4_ERR_FORMAT = 6,      /* a file is malformed or truncated */
    FP4_ERR_DTYPE = 7,       /* a tensor has the wrong dtype or shape */
    FP4_ERR_UNSUPPORTED = 8, /* this backend cannot run here or this problem */
    FP4_ERR_CUDA = 9,        /* a CUDA runtime call failed */
    FP4_ERR_CUBLAS = 10,     /* a cuBLAS / cuBLASLt call failed */
    FP4_ERR_VERIFY = 11,     /* a result did not match the reference */
    FP4_ERR_NOT_FOUND = 12,  /* unknown backend, preset or tensor name */
    FP4_ERR_INTERNAL = 13,   /* a bug: an invariant did not hold */
    FP4_ERR_TIMEOUT = 14,    /* a measurement ran past its time limit */
    FP4_ERR_INTERRUPTED = 15, /* the user asked to stop (Ctrl-C): what was done is kept */
    FP4_STATUS_COUNT
} fp4_status;

#define FP4_ERR_MSG_LEN 384

typedef struct fp4_err {
    fp4_status status;
    char msg[FP4_ERR_MSG_LEN];
} fp4_err;

/* Short fixed name of a status ("ok", "bad shape", ...). Never NULL. */
const char *fp4_status_str(fp4_status s);

/* Record status s and a printf-style message in err (if non-NULL); returns s
 * so that callers can write `return fp4_fail(err, FP4_ERR_SHAPE, "...")`. */
fp4_status fp4_fail(fp4_err *err, fp4_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Reset err to FP4_OK with an empty message. */
void fp4_err_clear(fp4_err *err);

/* The message of err, or the status name when the message is empty. */
const char *fp4_err_text(const fp4_err *err);

/* Warnings: something went wrong that does not fail the operation, above all
 * a cleanup call (cudaFree, cudaEventDestroy, cublasDestroy, ...) that
 * failed, which usually means an earlier kernel broke the CUDA context. The
 * library prints nothing: code that meets a warning adds it to an
 * fp4_warnings that its caller owns (the engine keeps one for itself and for
 * the backends it drives), and the program decides what to show. */
#define FP4_WARN_TEXT_LEN 1024

typedef struct fp4_warnings {
    int count;                    /* warnings added, including any dropped from text */
    char text[FP4_WARN_TEXT_LEN]; /* the first ones, one per line, each ending in '\n' */
} fp4_warnings;

/* Add one warning (printf-style, one line, no trailing newline) to w. A NULL
 * w ignores it; a line that no longer fits in text is counted but dropped. */
void fp4_warn(fp4_warnings *w, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Add every warning of src to dst (counts add up; lines as space allows). */
void fp4_warnings_append(fp4_warnings *dst, const fp4_warnings *src);

/* How many warnings of w are not in its text (count minus the lines kept). */
int fp4_warnings_dropped(const fp4_warnings *w);

/* Reset w to no warnings. */
void fp4_warnings_clear(fp4_warnings *w);

/* Overflow-checked size arithmetic: 0 on success, -1 when the result does not
 * fit in size_t (or an operand is negative). */
int fp4_size_mul(size_t a, size_t b, size_t *out);
int fp4_size_mul3(size_t a, size_t b, size_t c, size_t *out);

#ifdef __cplusplus
}
#endif
#endif
