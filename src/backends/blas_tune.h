/* Choosing a plan's cuBLASLt algorithm, for cublaslt-fp8, cublaslt-nvfp4 and
 * the tuned path of cublas-bf16: the heuristic's first answer untimed, or
 * (problem->tuning) the fastest of its first valid answers, timed in
 * prepare() on the plan's own copies; and the description of the choice that
 * the backends' variant() reports. CUDA-only: include from .cu files. */
#ifndef FP4_BLAS_TUNE_H
#define FP4_BLAS_TUNE_H

#include <stddef.h>

#include "backends/blaslt_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Answers asked of the heuristic when tuning, and how many of the valid ones
 * (best first) are timed. */
#define FP4_LT_TUNE_ASK 16
#define FP4_LT_TUNE_TIMED 8

/* One GEMM of copy `copy` on stream with the plan's current g->algo: the
 * backend's own run() slot. */
typedef fp4_status (*fp4_lt_run_fn)(void *plan, int copy, void *stream, fp4_err *err);

/* Sets g->algo and writes g->variant. `op` is the descriptor the heuristic is
 * asked with (copy 0's: copies differ only in pointers).
 *   tuning 0: the heuristic's first answer, untimed (UNSUPPORTED when it is
 *     not valid), as fp4bench always did;
 *   tuning 1: times the valid ones of FP4_LT_TUNE_ASK answers, best first,
 *     until FP4_LT_TUNE_TIMED have been timed (a failure makes room for the
 *     next), by calling run(plan, copy, stream) with g->algo set to each,
 *     cycling through the `copies` copies (so that with several copies the
 *     operands are not all in L2), and keeps the one with the fastest
 *     median. A candidate that fails is skipped; when all fail, the first
 *     failure is returned.
 * `run` must read g->algo, i.e. g is the plan's own. Timing runs on a stream
 * of its own and leaves the device idle; it overwrites the copies' outputs
 * (the engine poisons them before it verifies). `name` prefixes messages. */
fp4_status fp4_lt_choose_algo(const fp4_lt_inst *inst, fp4_lt_gemm *g, cublasLtMatmulDesc_t op,
                              int tuning, void *plan, int copies, fp4_lt_run_fn run,
                              const char *name, fp4_err *err);

/* "algo <id> tile <rows>x<cols> stages <k>x<count> splitk <n>", plus the reduction scheme,
 * CTA swizzle, custom option and cluster shape where they are not the
 * defaults, read with cublasLtMatmulAlgoConfigGetAttribute. The tile is in
 * cuBLAS's terms: its rows run along our N, its columns along our M (see
 * blaslt_common.h for the swap). A tile, stage or
 * cluster enumerator without a name here prints as "#<its value>" (see
 * cublasLt.h); an attribute that cannot be read prints as "?". */
void fp4_lt_describe_algo(const cublasLtMatmulAlgo_t *algo, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
