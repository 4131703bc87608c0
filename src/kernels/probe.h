/* The bandwidth ceiling: a streaming read of a large buffer. */
#ifndef FP4_KERNELS_PROBE_H
#define FP4_KERNELS_PROBE_H

#include <stddef.h>

#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read `bytes` (>= 4 GiB recommended; rounded down to 16-byte units) with
 * 16-byte loads, `reps` times after one warm-up pass; *gbps = best rate
 * (1e9 bytes/s) and *median_gbps the median. The buffer is filled with
 * non-zero data first. Cleanup failures go to warn (may be NULL). */
fp4_status fp4_probe_read_bandwidth(size_t bytes, int reps, double *gbps, double *median_gbps,
                                    fp4_warnings *warn, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
