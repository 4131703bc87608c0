/* What the GPU MoE backends share (src/backends/moe_*.cu): the routing and
 * plan on the device, the row maps of grouped layouts, and the small kernels
 * around the GEMMs: gathers, the activation with its quantization, the
 * weighted combine, the routing step of a layer, and the one-time conversion
 * of the NVFP4 weights into the vendor baselines' formats. Every kernel is
 * asynchronous on its stream and capturable in a CUDA graph (no allocation,
 * no synchronisation) unless it says otherwise. CUDA-only: include from .cu
 * files. */
#ifndef FP4_MOE_GPU_H
#define FP4_MOE_GPU_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "fp4/format.h"
#include "fp4/moe.h"
#include "fp4/moe_backend.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the routing and its plan on the device ------------------------------------------ */

typedef struct fp4_moe_dev_route {
    int32_t *ids;        /* [P] expert of pair p = t*k + j */
    float *weights;      /* [P] its routing weight */
    int32_t *offsets;    /* [E + 1] grouped rows of expert e: [offsets[e], offsets[e+1]) */
    int32_t *pair_index; /* [P] grouped row -> pair */
    int32_t *counts;     /* [E] scratch of the routing step */
    int32_t *rank;       /* [P] scratch of the routing step */
} fp4_moe_dev_route;

/* Upload the problem's routing (ids, weights) and plan (offsets, pair_index)
 * and allocate the routing step's scratch. On failure nothing is left. */
fp4_status fp4_moe_dev_route_upload(const fp4_moe_problem *p, fp4_moe_dev_route *r, fp4_err *err);
void fp4_moe_dev_route_free(fp4_moe_dev_route *r, fp4_warnings *w);

/* The routing step of a layer: offsets and pair_index rebuilt on the device
 * from ids (a count per expert, a prefix sum, a placement), as a serving
 * engine does after its router's top-k: one block up to 8192 pairs and 1024
 * experts, else three kernels. Within an expert the order of the
 * pairs may differ from the host plan's (atomics): a grouped kernel's output
 * is indexed by pair, so that does not change it. */
fp4_status fp4_moe_gpu_route(fp4_moe_dev_route *r, int64_t pairs, int experts, cudaStream_t s,
                             fp4_err *err);

/* ---- grouped layouts -------------------------------------------------------------------- */

/* The rows of a grouped layout on the host: map[r] = the source row of grouped
 * row r (pair_index[r] / div: div = k reads token rows, 1 pair rows); with
 * align > 1 every expert's group starts at a multiple of align
 * (fp4_moe_plan_aligned_offsets) and the padding rows map to -1. *rows: the
 * layout's rows; row_of_pair[p] (may be NULL): the layout row of pair p;
 * group_start[e] (may be NULL; E + 1 entries): where expert e's group starts.
 * Arrays malloc'ed. */
fp4_status fp4_moe_row_map(const fp4_moe_plan *p, int div, int32_t align, int32_t **map,
                           int64_t *rows, int32_t **row_of_pair, int64_t **group_start, fp4_err *err);

/* ---- kernels ------------------------------------------------------------------------------- */

/* dst row r = src row map[r] (row_bytes a multiple of 8; map[r] < 0: zeros). */
fp4_status fp4_moe_gpu_gather_rows(const void *src, size_t row_bytes, const int32_t *map,
                                   int64_t rows, void *dst, cudaStream_t s, fp4_err *err);

/* NVFP4 rows: codes [*, cols/2] and plain scales [*, cols/16] gathered by
 * map into codes_out [rows, cols/2] and scales_out, plain or (swizzled != 0)
 * in the 128x4 layout of a [rows, cols] matrix (padding untouched: zero it
 * once). map[r] < 0: a zero row. */
fp4_status fp4_moe_gpu_gather_nvfp4(const uint8_t *codes, const uint8_t *scales, int64_t cols,
                                    const int32_t *map, int64_t rows, uint8_t *codes_out,
                                    uint8_t *scales_out, int swizzled, cudaStream_t s, fp4_err *err);

typedef enum fp4_moe_qout {
    FP4_MOE_QOUT_BF16 = 0,           /* the values as bf16 (nearest even) */
    FP4_MOE_QOUT_NVFP4 = 1,          /* codes + plain row-major scales */
    FP4_MOE_QOUT_NVFP4_SWIZZLED = 2, /* codes + 128x4 swizzled scales */
    FP4_MOE_QOUT_DEQUANT_BF16 = 3,   /* the NVFP4 values e2m1 * scale (no global scale) as bf16: exact */
    FP4_MOE_QOUT_E4M3 = 4,           /* e4m3_satfinite(value * e4m3_enc) (fp8 per-tensor scale) */
    FP4_MOE_QOUT_AMAX = 5            /* nothing written: max |value| over all rows into *amax (calibration) */
} fp4_moe_qout;

/* The activation and the quantization of a layer, or a plain conversion:
 * out row r from src row map[r] (map NULL: row r; map[r] < 0: zeros), with
 *   act < 0:  the row itself (src_cols == cols)
 *   act >= 0: fp4_moe_act of gate = src[:, 0:cols] and up = src[:, cols:2 cols]
 *             (src_cols == 2 cols), in fp32 with expf
 * then written as `out` says. NVFP4 quantization is the specification's
 * (src/format/nvfp4.c quantize_row) with the static encode_scale, bit for
 * bit: bm = max|x| per 16, sf = e4m3(gs * (bm / 6)), q = e2m1(x / (sf / gs)).
 * AMAX: *amax (float bits, zeroed by the caller; >= 0, so bit order is value
 * order) becomes the max of itself and every |value|, e.g. to calibrate a
 * static e4m3 scale; its reduction is atomic, not for timed calls. */
typedef struct fp4_moe_act_args {
    const uint16_t *src; /* bf16 [*, src_cols] */
    int64_t src_cols;
    const int32_t *map;
    int act;
    int64_t rows, cols; /* cols a multiple of 16 */
    fp4_moe_qout out;
    float encode_scale;
    uint16_t *out_bf16;      /* BF16, DEQUANT_BF16: [rows, cols] */
    uint8_t *codes, *scales; /* NVFP4: [rows, cols/2] and plain [rows, cols/16] or swizzled */
    float e4m3_enc;          /* E4M3: the per-tensor scale (> 0) */
    uint8_t *out_e4m3;       /* E4M3: [rows, cols], 16-byte aligned */
    unsigned *amax;          /* AMAX */
} fp4_moe_act_args;
fp4_status fp4_moe_gpu_act(const fp4_moe_act_args *a, cudaStream_t s, fp4_err *err);

/* out[t, c] (fp32) = sum_j w[t*k + j] * d[row_of_pair[t*k + j], c], slots in
 * order, fp32 multiply-adds; d bf16 [*, n]. */
fp4_status fp4_moe_gpu_combine(const uint16_t *d, int64_t n, const int32_t *row_of_pair,
                               const float *w, int64_t tokens, int k, float *out, cudaStream_t s,
                               fp4_err *err);

/* n fp32 NaN (byte 0xFF) on s. */
fp4_status fp4_moe_gpu_poison_f32(float *d, size_t n, cudaStream_t s, fp4_err *err);

/* ---- the weights in the baselines' formats (prepare time: synchronous) --------------------- */

/* dst[e] = bf16 of e2m1 * scale of w[e] (no global scale: exact), experts one
 * after the other, each [rows, cols]. Converted on the device, one expert
 * at a time through a staging buffer. */
fp4_status fp4_moe_gpu_weights_bf16(const fp4_matrix *w, int experts, uint16_t *dst, fp4_err *err);
/* dst[e] = e4m3_satfinite(e2m1 * scale * enc_e), enc_e = 448 / amax_e over
 * expert e (as cublaslt-fp8 re-quantizes a tensor), and dec[e] (host) =
 * amax_e / 448. */
fp4_status fp4_moe_gpu_weights_e4m3(const fp4_matrix *w, int experts, uint8_t *dst, float *dec,
                                    fp4_err *err);

/* ---- host helpers ---------------------------------------------------------------------------- */

/* Host bf16 [rows, cols] of an NVFP4 matrix's e2m1 * scale (no global
 * scale): exact. *out malloc'ed. */
fp4_status fp4_moe_host_dequant_bf16(const fp4_matrix *m, uint16_t **out, fp4_err *err);

/* Read the grouped output dev (bf16 [layout rows, n]) of copy into host
 * floats in pair order [P, n]: pair p from layout row row_of_pair[p]. */
fp4_status fp4_moe_read_grouped_bf16(const void *dev, int64_t layout_rows, int64_t n,
                                     const int32_t *row_of_pair, int64_t pairs, float *out,
                                     fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
