/* fp4bench: the GEMM backend interface (a ggml-style vtable).
 *
 * Every backend computes the same NVFP4 problem, "TN":
 *   D[m, n] = alpha * sum_k A[m, k] * B[n, k]
 * with A the activations [M, K] and B the weights [N, K], both NVFP4, alpha =
 * A.global_scale * B.global_scale, D bf16 (or fp32 for reference backends).
 *
 * Life cycle, all on one host thread:
 *   open(&inst)                       once; creates handles; UNSUPPORTED + reason
 *                                     when it cannot run on this machine
 *   supports(inst, shape)             can it do this shape? reason if not
 *   prepare(inst, problem, copies)    convert operands to the backend's own
 *                                     format and upload `copies` independent
 *                                     operand+output sets (for cold-L2 rotation):
 *                                     even copies from problem->a, odd copies
 *                                     from problem->a_odd (-A), so that a
 *                                     backend ignoring the copy index fails
 *                                     verification; timed separately, never
 *                                     inside the GEMM time
 *   poison / run / read_output        per copy; run() must be asynchronous on the
 *                                     given stream and capturable in a CUDA graph
 *                                     (no allocation, no synchronisation)
 *   release(plan), close(inst)        cannot fail; a cleanup call that fails
 *                                     becomes a warning (set_warnings)
 *
 * External backends are shared objects exporting FP4_BACKEND_ENTRY_SYMBOL
 * returning a table whose api_version equals FP4_BACKEND_API_VERSION.
 */
#ifndef FP4_BACKEND_H
#define FP4_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "fp4/format.h"
#include "fp4/reference.h" /* the oracle, declared here for every backend's use */
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: the optional flops slot; 3: set_warnings; 4: odd copies from a_odd,
 * a_bf16 and tuning in the problem, the own_reference slot */
#define FP4_BACKEND_API_VERSION 4
#define FP4_BACKEND_ENTRY_SYMBOL "fp4_backend_entry"

typedef struct fp4_shape {
    int64_t m, n, k;
} fp4_shape;

/* Validate a GEMM shape: every size >= 1, K % 16 == 0, buffers fit. */
fp4_status fp4_shape_check(const fp4_shape *s, fp4_err *err);
/* 2*M*N*K */
double fp4_shape_flops(const fp4_shape *s);

typedef struct fp4_gemm_problem {
    fp4_shape shape;
    const fp4_matrix *a; /* [m, k] activations */
    const fp4_matrix *b; /* [n, k] weights */
    float alpha;         /* a->global_scale * b->global_scale */
    /* The A of odd copies: -A, every code's sign bit flipped (scales and
     * global scale as A's), so odd copies' exact result is -D. NULL: every
     * copy uses a (fp4_problem_a(p, copy) picks). */
    const fp4_matrix *a_odd;
    /* The bf16 activations [m, k] that a is the CPU quantizer's output of,
     * with the static encode scale 1 / a->global_scale (fp4_quantize_bf16);
     * odd copies use them with every sign bit flipped. NULL when A came
     * without them. Backends flagged FP4_BACKEND_FROM_BF16 start from here. */
    const uint16_t *a_bf16;
    /* 1: a vendor backend may time its candidate algorithms in prepare() and
     * keep the fastest; 0: the library's first choice, untimed. */
    int tuning;
} fp4_gemm_problem;

/* The most copies a plan takes (a sanity bound). */
#define FP4_MAX_COPIES 4096

/* Validate what every prepare() receives (the built-in backends call it
 * first; a plugin may): p and its matrices non-NULL with buffers, a valid
 * shape (fp4_shape_check), A [m, k] and B [n, k] matching the shape (and
 * a_odd, when given, A's shape with buffers), a finite alpha,
 * 1 <= copies <= FP4_MAX_COPIES, and every scale byte (a_odd's too) a valid
 * UE4M3 value: not NaN (0x7F / 0xFF) and not negative (sign bit set on a
 * non-zero magnitude; 0x80, -0, is zero). Our quantizer writes neither; the
 * CPU reference rejects both, the exact integer kernel cannot represent NaN,
 * and in a timed backend they would only show up later as a confusing
 * verification failure. */
fp4_status fp4_gemm_problem_check(const fp4_gemm_problem *p, int copies, fp4_err *err);

/* The NVFP4 A that copy `copy` computes with (a, or a_odd for odd copies). */
static inline const fp4_matrix *fp4_problem_a(const fp4_gemm_problem *p, int copy)
{
    return (copy & 1) && p->a_odd ? p->a_odd : p->a;
}
/* The sign of copy `copy`'s exact result relative to the reference: -1 for
 * odd copies when a_odd is given. */
static inline float fp4_problem_sign(const fp4_gemm_problem *p, int copy)
{
    return (copy & 1) && p->a_odd ? -1.0f : 1.0f;
}

/* What does the arithmetic: picks the compute ceiling for the roofline. */
typedef enum fp4_math {
    FP4_MATH_CPU = 0,
    FP4_MATH_CUDA_CORES = 1, /* integer / fp32 CUDA cores */
    FP4_MATH_BF16_TC = 2,    /* bf16 tensor cores */
    FP4_MATH_FP8_TC = 3,     /* fp8 tensor cores */
    FP4_MATH_FP4_TC = 4      /* native fp4 tensor cores (Blackwell) */
} fp4_math;

enum {
    FP4_BACKEND_GPU = 1u << 0,       /* runs on a CUDA stream */
    FP4_BACKEND_REFERENCE = 1u << 1, /* exact: an oracle, not a contender */
    FP4_BACKEND_LOSSY = 1u << 2,     /* rounds operands (e.g. to fp8) */
    /* Times something other than a GEMM (the quantizer alone): its rows get no
     * ratio against the baseline GEMM, which would compare unlike work. */
    FP4_BACKEND_NOT_GEMM = 1u << 3,
    /* Starts from the bf16 activations (problem->a_bf16) and quantizes them
     * itself: the engine hands it the A its CPU quantizer makes of them, and
     * says unsupported when a case has no bf16 activations. */
    FP4_BACKEND_FROM_BF16 = 1u << 4
};

typedef struct fp4_backend_ops {
    int api_version;     /* FP4_BACKEND_API_VERSION */
    const char *name;    /* short, lowercase, unique: "cublas-bf16" */
    const char *summary; /* one line for `fp4bench list` */
    unsigned flags;      /* FP4_BACKEND_* */
    fp4_math math;
    /* Verification tolerances against the exact reference: max |D-R| over
     * max |R|, and ||D-R||_2 / ||R||_2. */
    double tol_max;
    double tol_norm;

    fp4_status (*open)(void **inst, fp4_err *err);
    void (*close)(void *inst);
    /* Optional (NULL: every valid shape). */
    fp4_status (*supports)(void *inst, const fp4_shape *s, fp4_err *err);
    fp4_status (*prepare)(void *inst, const fp4_gemm_problem *p, int copies,
                          void **plan, fp4_err *err);
    /* Write a recognisable non-result (NaN) into the output of one copy. */
    fp4_status (*poison)(void *plan, int copy, void *stream, fp4_err *err);
    fp4_status (*run)(void *plan, int copy, void *stream, fp4_err *err);
    /* Copy the output of one copy to host floats [m, n]; synchronises. */
    fp4_status (*read_output)(void *plan, int copy, float *d, fp4_err *err);
    void (*release)(void *plan);
    /* Optional: bytes one call moves through memory in the backend's own
     * operand formats (NULL: fp4_gemm_min_bytes). */
    double (*bytes_moved)(const fp4_shape *s);
    /* Optional: the kernel or algorithm the plan will run (e.g. "decode", or
     * a cuBLASLt algorithm's id, tile and stages), for the report. The string
     * stays valid until release(plan). */
    const char *(*variant)(void *plan);
    /* Optional: the floating-point operations one call does (NULL: 2*M*N*K).
     * A backend that times something other than the GEMM (the quantizer row)
     * says what it does here; 0 means no FLOP ceiling applies. */
    double (*flops)(const fp4_shape *s);
    /* Optional (NULL: the backend records none): where the instance records
     * warnings, above all cleanup calls in release() and close() that failed
     * (they cannot fail their caller, and the library prints nothing). Called
     * once, right after a successful open(); w belongs to the caller and
     * stays valid until close(inst) returns. */
    void (*set_warnings)(void *inst, fp4_warnings *w);
    /* Optional, for FP4_BACKEND_LOSSY backends: the exact value (double
     * accumulation) of element [row, col] of copy 0's product computed from
     * the operands as the backend rounded them (e.g. to e4m3), with its
     * alpha. The engine checks a sample of elements against it at the
     * backend's own_tol, on top of the loose check against the NVFP4
     * reference: a wrong scale or alpha cannot hide in the rounding. */
    double (*own_reference)(void *plan, int64_t row, int64_t col);
    /* Relative tolerance of that check: |D - own| <= own_tol * max|own|
     * over the sampled elements (bf16 output rounding plus accumulation). */
    double own_tol;
} fp4_backend_ops;

typedef const fp4_backend_ops *(*fp4_backend_entry_fn)(void);

/* ---- registry ------------------------------------------------------------- */

/* Number of backends compiled in, and the i-th one (NULL if out of range). */
int fp4_backend_count(void);
const fp4_backend_ops *fp4_backend_at(int i);
/* Compiled-in backend by name, NULL if none. */
const fp4_backend_ops *fp4_backend_find(const char *name);
/* Load an external backend from a shared object (checks the API version). The
 * returned table stays valid while the library stays loaded; *handle is the
 * dlopen handle for fp4_backend_unload. */
fp4_status fp4_backend_load(const char *path, const fp4_backend_ops **ops,
                            void **handle, fp4_err *err);
void fp4_backend_unload(void *handle);

/* Check a table before use (version, name, mandatory slots). */
fp4_status fp4_backend_validate(const fp4_backend_ops *ops, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
