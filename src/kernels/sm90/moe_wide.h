/* The wide path of fp4_sm90_moe_gemm (moe_wide.cu): the grouped MoE GEMM on
 * wgmma for batches where experts see many tokens (prefill, large decode
 * batches). Internal to the fp4-sm90 MoE: moe.cu chooses the path, sizes the
 * workspace and fills this launch description. */
#ifndef FP4_SM90_MOE_WIDE_H
#define FP4_SM90_MOE_WIDE_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "fp4/status.h"
#include "kernels/sm90/moe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The packed weights' geometry (fp4_sm90_moe_pack) of one expert. */
typedef struct moe_wide_geom {
    size_t expert_stride, codes_bytes; /* bytes of an expert, of its codes (the scales follow) */
    int tiles, ks, ks2;                /* 16-row tiles, 64-k steps, pairs of steps */
} moe_wide_geom;

/* Workspace bytes of the wide path: the activations of `rows` rows, dequantized
 * to bf16 in the order the kernel reads them. */
size_t fp4_sm90_moe_wide_ws_size(int64_t rows, int64_t k);

/* 1 when this GPU runs the wide kernel (sm_90 and a build with sm_90a code). */
int fp4_sm90_moe_wide_runs_here(void);

/* Enqueue the prepass and the wide kernel for the experts of the call a
 * (checked by the caller) that have at least tok_lo tokens (the streaming
 * path takes the others; 0: all). workspace holds fp4_sm90_moe_wide_ws_size
 * bytes for the activation rows (T, or T * top-k with a_per_pair). Writes
 * those experts' rows of a->d; the combine is the caller's.
 * FP4_ERR_UNSUPPORTED where the build has no sm_90a code for this GPU. */
fp4_status fp4_sm90_moe_wide_launch(const fp4_sm90_moe_args *a, const moe_wide_geom *g, int tok_lo,
                                    void *workspace, size_t workspace_bytes, cudaStream_t stream,
                                    fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
