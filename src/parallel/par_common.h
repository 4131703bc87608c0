/* Helpers shared by the sharded references (src/parallel/). */
#ifndef FP4_PAR_COMMON_H
#define FP4_PAR_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "fp4/moe.h"
#include "fp4/status.h"

/* The checks fp4_moe_layer_ref makes before it starts: arguments present, a
 * known mode, weights of dims' shapes, a routing with dims' E and k. */
fp4_status fp4_par_check_layer(const char *who, const fp4_moe_dims *dims, const fp4_moe_weights *w,
                               const uint16_t *x_bf16, const fp4_moe_routing *r,
                               const fp4_moe_layer_opts *o, const fp4_moe_layer_out *io,
                               fp4_err *err);

/* malloc of rows * cols * elem bytes (at least one byte), failing with a message
 * naming `what`. */
fp4_status fp4_par_alloc(void **out, int64_t rows, int64_t cols, size_t elem, const char *who,
                         const char *what, fp4_err *err);

/* The largest |x| of count bf16 values, failing (as fp4_moe_layer_ref does) on
 * Inf or NaN; first_row numbers the rows in the message. */
fp4_status fp4_par_bf16_amax(const uint16_t *x, int64_t rows, int64_t cols, int64_t first_row,
                             const char *who, float *amax, fp4_err *err);
/* The same for fp32 activations h (rows are pairs). */
fp4_status fp4_par_f32_amax(const float *h, int64_t rows, int64_t cols, const char *who,
                            float *amax, fp4_err *err);

/* The encode scale to quantize with: the static one (> 0), or the one of the
 * amax over every rank (max is exact, so any reduction order gives it). */
float fp4_par_encode_scale(float given, float global_amax);

/* Re-label an inner failure with the stage (and rank) it happened in. */
fp4_status fp4_par_stage_fail(fp4_err *err, const char *who, const char *stage, int rank,
                              const fp4_err *inner);

#endif
