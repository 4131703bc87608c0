/* The CPU side of fp4bench layer shared by its C and CUDA files: the inputs
 * of one configuration (activations, routing, plans, static encode scales),
 * the rows that are checked and their exact reference, and the comparison.
 * C11 (also included by the .cu files of src/multigpu). */
#ifndef FP4_MULTIGPU_LAYER_HOST_H
#define FP4_MULTIGPU_LAYER_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "fp4/format.h"
#include "fp4/moe.h"
#include "fp4/parallel.h"
#include "multigpu/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct fp4_layer_inputs {
    fp4_layer_spec spec;
    uint64_t seed;
    fp4_moe_weights w;   /* MoE: every expert, whole */
    fp4_matrix qkv, o;   /* attention: the whole fused QKV [(q+2kv)*hd, H] and O [H, q*hd] */
};

/* One configuration (degree, tokens) ready for the GPUs, and its check. */
typedef struct layer_case {
    const fp4_layer_inputs *in;
    int ranks;
    int64_t tokens;
    uint16_t *x;          /* bf16 [T, H]: the layer's input, the same on every TP rank */
    float x_scale;        /* static encode scale of x (2688 / amax over all of x) */
    float h_scale;        /* MoE W4A4: static encode scale of h (the reference's dynamic one) */
    fp4_moe_routing routing; /* MoE */
    fp4_moe_plan plan;       /* MoE: the grouped plan of the whole routing (TP) */
    fp4_ep_plan ep;          /* EP */
    fp4_tp_mlp_plan tp;      /* TP */
    fp4_tp_attn_plan attn;   /* attention */
    fp4_matrix xq;           /* attention: x quantized with x_scale (the GPU's quantizer is bit-identical) */
    fp4_matrix attn_out;     /* attention: [T, q_heads*hd], the O projection's input (attention
                              * itself is not modelled: this stands for its output) */
    /* the check: output rows (tokens) compared, and their exact reference */
    int64_t *rows;
    int64_t nrows;
    float *ref;        /* [nrows, H]: the layer's output */
    float **ref_qkv;   /* attention: [ranks] of [nrows, qkv.n] each rank's QKV output */
    char desc[112];    /* "all 16 tokens" / "sample: 22 of 4096 tokens ..." */
    double tol_max, tol_norm;         /* of the final output */
    double qkv_tol_max, qkv_tol_norm; /* attention: of the QKV GEMM */
} layer_case;

/* Everything above for in at (ranks, tokens); the spec must pass
 * fp4_layer_check. On failure lc holds nothing. */
fp4_status layer_case_make(const fp4_layer_inputs *in, int ranks, int64_t tokens, layer_case *lc,
                           fp4_err *err);
void layer_case_free(layer_case *lc);

/* Compare got [n] with ref [n] (fp4_compare_outputs's measures: max|D-R| /
 * max|R| and ||D-R|| / ||R||, NaN/Inf and all-zero outputs fail). 1 when
 * within the tolerances; else 0 and why. */
int layer_compare(const float *got, const float *ref, size_t n, double tol_max, double tol_norm,
                  double *err_max, double *err_norm, char *why, size_t len);

/* Rank r's fused QKV rows (its q, k and v rows of the whole weight, in that
 * order) as a new matrix keeping the global scale. */
fp4_status layer_qkv_slice(const layer_case *lc, int rank, fp4_matrix *out, fp4_err *err);

/* The first `count` of cfg's devices ("0,1,2") into buf. */
void layer_devices_text(const fp4_nccl_config *cfg, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
