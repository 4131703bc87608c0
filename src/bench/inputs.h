/* Reproducible random NVFP4 operands for the benchmark (--data). */
#ifndef FP4_BENCH_INPUTS_H
#define FP4_BENCH_INPUTS_H

#include <stdint.h>

#include "fp4/engine.h"
#include "fp4/format.h"

/* A small, fast, seedable generator (xoshiro256**), owned by its user. */
typedef struct fp4_rng {
    uint64_t s[4];
} fp4_rng;

void fp4_rng_seed(fp4_rng *r, uint64_t seed);
uint64_t fp4_rng_next(fp4_rng *r);
double fp4_rng_uniform(fp4_rng *r);  /* [0, 1) */
float fp4_rng_normal(fp4_rng *r);    /* standard normal */

/* A [rows, cols] NVFP4 operand of the given kind from seed:
 *  gaussian: bf16 N(0,1) data quantized with fp4_quantize_bf16;
 *  codes:    uniform random codes, uniform scale bytes in [0x01, 0x7E], global
 *            scale 1/2688 (what a torch.randint script feeds a kernel);
 *  outliers: like gaussian, but 1 in 32 columns (channels) scaled by 30 and
 *            Student-t (3 d.o.f.) tails elsewhere, as activations with outlier
 *            channels look;
 *  wide:     like gaussian, but each block of 16 scaled by 2^-e, e uniform in
 *            0..16: tiny blocks (E4M3 subnormal scales) next to big ones.
 * Never all zeros. */
fp4_status fp4_make_operand(fp4_data_kind kind, int64_t rows, int64_t cols, uint64_t seed,
                            fp4_matrix *out, fp4_err *err);

/* The same operand and, in *x (malloc'd, the caller frees; x may be NULL),
 * the bf16 activations [rows, cols] it is the CPU quantizer's output of (the
 * generated values; for codes, the bf16 of the codes' values, which do not
 * quantize back to the same codes). */
fp4_status fp4_make_activations(fp4_data_kind kind, int64_t rows, int64_t cols, uint64_t seed,
                                uint16_t **x, fp4_matrix *out, fp4_err *err);

/* out = -a exactly: every code's sign bit flipped, scales and global scale
 * kept (the engine's odd copies). */
fp4_status fp4_negate_operand(const fp4_matrix *a, fp4_matrix *out, fp4_err *err);

#endif
