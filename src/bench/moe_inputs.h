/* Seeded MoE weights and activations for the MoE engine, made fast and in
 * parallel: a GLM-5 layer holds 9.7 G weights (5.4 GB of NVFP4). */
#ifndef FP4_BENCH_MOE_INPUTS_H
#define FP4_BENCH_MOE_INPUTS_H

#include <stdint.h>

#include "fp4/engine.h"
#include "fp4/moe.h"

/* Every expert's gate_up [2I, H] and down [H, I] of kind (gaussian: N(0,1)
 * values from a 4096-level inverse-CDF table, quantized as engines do; codes,
 * outliers, wide: fp4_make_operand's), each from its own seed (seed, matrix,
 * expert), on one thread per online core. The global scales are then divided
 * by sqrt(K) (the codes and block scales stay as made), so that a layer's
 * outputs are of the order of its inputs, as in a trained model; gpt-oss's
 * gate_up ones (swiglu-oai) are also multiplied by 4, so that its clamps are
 * reached (some 4% of gate and 8% of up values). w is initialised here; on
 * failure it holds nothing. */
fp4_status fp4_moe_make_weights(const fp4_moe_dims *d, fp4_data_kind kind, uint64_t seed,
                                fp4_moe_weights *w, fp4_err *err);

/* Activations bf16 [rows, cols]: N(0,1) values from the same table, row r from
 * (seed, role, r, cols) alone, so the first rows of a longer matrix are the
 * rows of a shorter one. *out is malloc'ed. */
fp4_status fp4_moe_make_rows(int64_t rows, int64_t cols, uint64_t seed, int role, uint16_t **out,
                             fp4_err *err);

#endif
