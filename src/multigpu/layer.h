/* fp4bench layer: one MoE or attention layer split over several GPUs
 * (tensor or expert parallel), every rank's pipeline and its NCCL
 * collectives captured in that rank's CUDA graph, verified against the
 * exact sharded references of fp4/parallel.h before it is timed
 * (docs/PARALLEL.md, "fp4bench layer").
 *
 * The CPU side (inputs, references, the check, the report) is C and builds
 * everywhere; the GPU side (layer_tp.cu, layer_ep.cu, layer_attn.cu) needs
 * CUDA and NCCL, and without them fp4_layer_run answers FP4_ERR_UNSUPPORTED
 * with the reason. */
#ifndef FP4_MULTIGPU_LAYER_H
#define FP4_MULTIGPU_LAYER_H

#include <stdint.h>
#include <stdio.h>

#include "fp4/moe.h"
#include "fp4/multigpu.h"
#include "fp4/parallel.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fp4_layer_kind {
    FP4_LAYER_TP = 0,  /* MoE layer, tensor parallel, all-reduce of the outputs */
    FP4_LAYER_EP = 1,  /* MoE layer, expert parallel, all-to-all dispatch and combine */
    FP4_LAYER_ATTN = 2 /* attention projections (QKV, O), tensor parallel, all-reduce */
} fp4_layer_kind;

const char *fp4_layer_kind_name(fp4_layer_kind k); /* "tp", "ep", "attention" */

/* What is measured: the layer, without the GPU count or the tokens. */
typedef struct fp4_layer_spec {
    fp4_layer_kind kind;
    char model[40];            /* "glm5", or "custom" */
    fp4_moe_dims dims;         /* MoE: the whole layer (I not divided by tp) */
    fp4_moe_mode mode;         /* MoE: W4A4 (NVFP4 activations) or W4A16 */
    fp4_moe_route_opts route;  /* MoE: routing (not trace) */
    fp4_attn_dims attn;        /* attention */
} fp4_layer_spec;

typedef struct fp4_layer_settings {
    int iters;     /* layer calls per graph replay (default 10) */
    int warmup;    /* untimed replays first (default 3) */
    int reps;      /* timed replays, their median per call is a rank's time (default 10) */
    uint64_t seed; /* weights, activations and routing (default 1) */
    /* Testing the check: -1 (default) none; else that rank's partial output
     * (TP, attention: before the all-reduce; EP: the expert output of its
     * first token's first slot, on its way back) is changed before the
     * check, which must then fail. */
    int fault_rank;
} fp4_layer_settings;

void fp4_layer_settings_default(fp4_layer_settings *s);

/* Can spec run over `ranks` ranks at `tokens` tokens? FP4_OK, or
 * FP4_ERR_SHAPE / FP4_ERR_INVALID_ARG with why (the plans' rules: I/tp in
 * whole blocks of 16, heads divisible, ...). CPU only. */
fp4_status fp4_layer_check(const fp4_layer_spec *spec, int ranks, int64_t tokens, fp4_err *why);

/* Can `ranks` ranks run on the GPUs of cfg (threads launcher: the first
 * `ranks` of cfg's list, or of all GPUs)? FP4_OK, or FP4_ERR_UNSUPPORTED with
 * why: built without CUDA or NCCL, no GPU, "needs N GPUs, found M". On
 * success *sub is the configuration of those ranks. */
fp4_status fp4_layer_probe(const fp4_nccl_config *cfg, int ranks, fp4_nccl_config *sub, fp4_err *why);

/* The layer's weights and the routing seed, made once (host memory) for every
 * row of a command. */
typedef struct fp4_layer_inputs fp4_layer_inputs;
fp4_status fp4_layer_inputs_make(const fp4_layer_spec *spec, uint64_t seed, fp4_layer_inputs **out,
                                 fp4_err *err);
void fp4_layer_inputs_free(fp4_layer_inputs *in);
const fp4_layer_spec *fp4_layer_inputs_spec(const fp4_layer_inputs *in);

typedef enum fp4_layer_state {
    FP4_LAYER_ROW_OK = 0,
    FP4_LAYER_ROW_FAILED = 1,     /* the check failed, or a CUDA/NCCL error: why says */
    FP4_LAYER_ROW_UNSUPPORTED = 2 /* cannot run here or with these sizes: why says */
} fp4_layer_state;

const char *fp4_layer_state_name(fp4_layer_state s); /* "ok", "FAILED", "unsupported" */

/* One configuration: a kind, a degree, a token count. Times are the slowest
 * rank's median per layer call (us), NAN when not timed or not part of the
 * kind. */
typedef struct fp4_layer_row {
    fp4_layer_kind kind;
    fp4_moe_mode mode; /* MoE only */
    int ranks;
    int64_t tokens;
    char devices[128];  /* "0,1,2,3" */
    char shapes[192];   /* each rank's GEMMs (M x N x K) */
    fp4_layer_state state;
    char why[FP4_ERR_MSG_LEN]; /* not ok: why */
    char check[192];           /* what was compared ("all 16 tokens", "sample: ...") */
    double err_max, err_norm;  /* against the exact reference (NAN: not checked) */
    double tol_max, tol_norm;
    int iters, reps;
    double total_us;    /* the whole pipeline, collectives included */
    double compute_us;  /* the same graph without the collectives */
    double allreduce_us; /* TP, attention: the all-reduce alone */
    double dispatch_us, combine_us; /* EP: each all-to-all with its packing / weighted sum */
    int slowest_rank;   /* of total_us; -1 when not timed */
    double rank_total_us[FP4_NCCL_MAX_RANKS];
    double flops;       /* the whole layer's (every rank's sum) */
    double tflops;      /* flops / total_us */
    /* TP, attention: the all-reduce's bf16 payload per rank and its bus bandwidth */
    double allreduce_bytes, allreduce_busbw_gbps;
    /* EP: bytes of each direction (every pair, local copies included) and of
     * the pairs that cross ranks; bus bandwidth as nccl-tests' all-to-all:
     * (bytes / ranks) / time * (ranks - 1) / ranks */
    double dispatch_bytes, dispatch_wire_bytes, dispatch_busbw_gbps;
    double combine_bytes, combine_wire_bytes, combine_busbw_gbps;
    double recv_imbalance; /* EP: busiest rank's received pairs / mean */
} fp4_layer_row;

/* A row in its initial state: the key fields set, numbers NAN, state ok. */
void fp4_layer_row_init(fp4_layer_row *row, const fp4_layer_spec *spec, int ranks, int64_t tokens);

/* Verify then time one configuration on the set c (its size is the degree).
 * FP4_OK with row->state ok (verified and timed), FAILED (the check failed:
 * why names the rank, the error and the tolerance; not timed) or unsupported
 * (the sizes break a plan's rule, or a GPU is not sm_90). Any other status is
 * a CUDA or NCCL failure, after which c should only be destroyed. */
fp4_status fp4_layer_run(fp4_nccl_comms *c, const fp4_layer_inputs *in, int64_t tokens,
                         const fp4_layer_settings *s, fp4_layer_row *row, fp4_err *err);

/* ---- results (docs/PARALLEL.md: JSON schema "fp4bench-layer/1") ---------------------- */

typedef struct fp4_layer_report {
    char version[32];
    char commit[48];
    char started[40];
    char host[64];
    char command[4096];
    char unsupported[FP4_ERR_MSG_LEN]; /* non-empty: nothing ran, and why */
    fp4_layer_spec spec;
    fp4_layer_settings settings;
    int have_info; /* info is filled (a communicator set was created) */
    fp4_nccl_info info; /* of the largest set created */
    fp4_layer_row *rows;
    int nrows, cap;
} fp4_layer_report;

fp4_status fp4_layer_report_add(fp4_layer_report *r, const fp4_layer_row *row, fp4_err *err);
void fp4_layer_report_free(fp4_layer_report *r);
/* JSON to path atomically, or "-": stdout. */
fp4_status fp4_layer_write_json(const char *path, const fp4_layer_report *r, fp4_err *err);
/* The table: a header line for a kind, then one line per row. */
void fp4_layer_print_header(FILE *out, fp4_layer_kind kind);
void fp4_layer_print_row(FILE *out, const fp4_layer_row *row);

#ifdef __cplusplus
}
#endif
#endif
