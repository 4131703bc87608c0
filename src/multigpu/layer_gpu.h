/* Inside fp4bench layer's GPU side (layer_common.cu, layer_tp.cu,
 * layer_ep.cu, layer_attn.cu): the small kernels around the GEMMs, and the
 * per-rank driver every kind shares (set up, verify with a poisoned output,
 * then time each part's CUDA graph). CUDA and NCCL only. */
#ifndef FP4_MULTIGPU_LAYER_GPU_H
#define FP4_MULTIGPU_LAYER_GPU_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "multigpu/layer.h"
#include "multigpu/layer_host.h"
#include "multigpu/nccl_comm.h"

/* Parts of a rank's pipeline, enqueued by a kind's enqueue(). */
enum {
    LAYER_PART_COMPUTE = 1,  /* quantization, GEMMs, activation, packing and weighted sums */
    LAYER_PART_REDUCE = 2,   /* TP, attention: the all-reduce */
    LAYER_PART_DISPATCH = 4, /* EP: x quantized and packed, the all-to-all to the experts' ranks */
    LAYER_PART_COMBINE = 8   /* EP: the all-to-all back and the weighted sum */
};

#define LAYER_MAX_VARIANTS 4
#define LAYER_MAX_REPS 1000

typedef struct layer_job layer_job;

/* What one rank found in the check. */
typedef struct layer_verdict {
    int bad; /* 1: outside the tolerances */
    double err_max, err_norm;
    char why[FP4_ERR_MSG_LEN];
} layer_verdict;

/* One kind: its per-rank state and the steps of the driver. Every function
 * runs on the rank's thread with its device current. */
typedef struct layer_kind_ops {
    size_t state_size;
    /* the graphs timed: variant 0 is the whole pipeline (total); each entry a
     * mask of LAYER_PART_* */
    int nvariants;
    unsigned variants[LAYER_MAX_VARIANTS];
    /* the check runs first_parts, then fault(), then rest_parts */
    unsigned first_parts, rest_parts;
    fp4_status (*setup)(layer_job *j, nccl_rank *r, void *state, fp4_err *err);
    void (*teardown)(layer_job *j, nccl_rank *r, void *state);
    fp4_status (*enqueue)(layer_job *j, nccl_rank *r, void *state, unsigned parts, fp4_err *err);
    fp4_status (*poison)(layer_job *j, nccl_rank *r, void *state, fp4_err *err);
    fp4_status (*fault)(layer_job *j, nccl_rank *r, void *state, fp4_err *err);
    /* read back what this rank holds; fill j->verdict[r->rank] */
    fp4_status (*check)(layer_job *j, nccl_rank *r, void *state, fp4_err *err);
    /* optional (NULL): after every rank's check, on rank 0, the verdict of
     * all ranks' outputs together into j->verdict[0] */
    void (*judge)(layer_job *j);
} layer_kind_ops;

struct layer_job {
    fp4_nccl_comms *c;
    const layer_case *lc;
    const fp4_layer_settings *set;
    const layer_kind_ops *ops;
    int verify_agreed;                        /* NCCL_AGREE_* after the check */
    layer_verdict verdict[FP4_NCCL_MAX_RANKS]; /* each rank's own slot */
    double median_us[FP4_NCCL_MAX_RANKS][LAYER_MAX_VARIANTS];
    float *got; /* EP: [nrows, H] the checked tokens' outputs, each written by its owner */
};

extern const layer_kind_ops layer_tp_ops;
extern const layer_kind_ops layer_ep_ops;
extern const layer_kind_ops layer_attn_ops;

/* ---- kernels (asynchronous on s, capturable) ---------------------------------------------------- */

/* out row r from src row r (bf16 [rows, src_cols]): act < 0 the row itself
 * (src_cols == cols), else fp4_moe_act of gate = src[:, 0:cols] and up =
 * src[:, cols:2cols] (src_cols == 2 cols) in fp32; then to bf16 (codes NULL)
 * or NVFP4 with the static encode scale (codes [rows, cols/2], plain
 * row-major scales [rows, cols/16]) by the specification's rounding. */
fp4_status layer_act_quant(const uint16_t *src, int64_t src_cols, int act, int64_t rows, int64_t cols,
                           float encode_scale, uint16_t *out_bf16, uint8_t *codes, uint8_t *scales,
                           cudaStream_t s, fp4_err *err);
/* dst[i] = bf16(src[i]), nearest even. */
fp4_status layer_to_bf16(const float *src, int64_t n, uint16_t *dst, cudaStream_t s, fp4_err *err);
/* dst row i (row_bytes) = src row map[i]. */
fp4_status layer_gather_rows(const uint8_t *src, int64_t row_bytes, const int32_t *map, int64_t rows,
                             uint8_t *dst, cudaStream_t s, fp4_err *err);
/* out[t, c] = sum_j w[t*k + j] * rows[row_of[t*k + j], c] (bf16 rows [*, n]),
 * fp32, slots in order; t < tokens. */
fp4_status layer_weighted_sum(const uint16_t *rows, int64_t n, const int32_t *row_of, const float *w,
                              int64_t tokens, int k, float *out, cudaStream_t s, fp4_err *err);

/* ---- small host-side pieces ---------------------------------------------------------------------- */

/* bf16 bits -> float. */
float layer_bf16_value(uint16_t h);
/* Copy n bytes to a fresh device buffer (at least 16 bytes allocated, so
 * that an empty buffer is still a valid pointer). */
fp4_status layer_upload(nccl_rank *r, void **dst, const void *src, size_t n, fp4_err *err);
fp4_status layer_alloc(nccl_rank *r, void **dst, size_t n, fp4_err *err);
/* Make the middle element of a device bf16 row clearly wrong: -(64 x the
 * row's largest magnitude + 1). */
fp4_status layer_corrupt_bf16(nccl_rank *r, uint16_t *row, int64_t cols, fp4_err *err);
/* The rows `lc->rows` of a device bf16 matrix [*, cols] into host floats [nrows, cols]. */
fp4_status layer_read_rows_bf16(nccl_rank *r, const uint16_t *dev, int64_t cols, const layer_case *lc,
                                float *out, fp4_err *err);

#endif
