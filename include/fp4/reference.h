/* fp4bench: the exact CPU reference GEMM, the oracle every backend is checked
 * against (docs/FORMAT.md). */
#ifndef FP4_REFERENCE_H
#define FP4_REFERENCE_H

#include <stdint.h>

#include "fp4/format.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* d[m, n] (fp32) = alpha * A * B^T, exactly accumulated (see docs/FORMAT.md:
 * integer sums, exact for K <= 2^20; the one rounding is of the final value to
 * double and then to fp32). threads <= 0: one per online core. */
fp4_status fp4_gemm_reference(const fp4_matrix *a, const fp4_matrix *b, float alpha,
                              float *d, int threads, fp4_err *err);
/* One element by the obvious double loop over dequantized values: slow and
 * independent of fp4_gemm_reference, for spot checks. */
double fp4_gemm_naive_element(const fp4_matrix *a, const fp4_matrix *b, float alpha,
                              int64_t row, int64_t col);

#ifdef __cplusplus
}
#endif
#endif
