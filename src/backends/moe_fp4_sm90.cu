/* MoE backend "moe-fp4-sm90": our one-launch grouped NVFP4 GEMM for Hopper
 * (src/kernels/sm90/moe.h): every expert's rows in one kernel that gathers
 * its activation rows itself (token rows for gate_up, pair rows for down)
 * through the plan's pair_index, writes D by pair, and for down combines the
 * slots with the routing weights into fp32 [T, H] in the same call.
 *
 * Weights: packed for the kernel on the host (fp4_sm90_moe_pack) once per set
 * of weights and kept in the instance while problem->weights_id stays.
 * W4A4: the NVFP4 input with plain row-major scales, its global scale as
 * a_global; W4A16: the bf16 input.
 *
 * The layer, in one graph: the routing step (the plan rebuilt on the device
 * from the expert ids, as a serving engine does after its router's top-k),
 * x quantized to NVFP4 (W4A4, static scale), gate_up, the activation (and h's
 * quantization in W4A4, static scale), down and the combine. Each step
 * can run alone for the per-step times. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backends/moe_backends.h" /* gives the table below C linkage */
}
#include "backends/moe_gpu.h"
#include "core/gpu.h"
#include "kernels/sm90/moe.h"

#define MAX_CACHED_COPIES 64

typedef struct sm90_weights {
    int copies;
    void *packed[MAX_CACHED_COPIES];
    float *global[MAX_CACHED_COPIES]; /* device [E] */
    size_t bytes;
} sm90_weights;

typedef struct sm90_inst {
    int num_sms;
    fp4_warnings *warn;
    uint64_t weights_id;
    sm90_weights gu, dn;
} sm90_inst;

typedef struct sm90_copy {
    uint16_t *x;                /* bf16 input (W4A16; the layer's x) */
    uint8_t *a_codes, *a_scales; /* NVFP4 input or the layer's quantized x, plain scales */
    uint16_t *y;                /* gate_up's D [P, 2I] by pair (gate_up, layer); down's d (down) */
    uint16_t *h;                /* layer W4A16: h [P, I] bf16 */
    uint8_t *h_codes, *h_scales; /* layer W4A4: h quantized */
    uint16_t *d;                /* layer: down's D [P, H] */
    float *out;                 /* down, layer: [T, H] */
    void *ws;
    fp4_moe_dev_route route;    /* the layer rebuilds its plan here */
} sm90_copy;

typedef struct sm90_plan {
    sm90_inst *inst;
    const fp4_moe_problem *p;
    int copies;
    fp4_moe_dev_route route; /* the host plan on the device (gate_up, down) */
    size_t ws_bytes;
    float a_global, h_global;
    sm90_copy *c;
    char variant[192];
} sm90_plan;

static void weights_free(sm90_weights *w, fp4_warnings *warn)
{
    for (int i = 0; i < w->copies; i++) {
        fp4_gpu_release(w->packed[i], "moe-fp4-sm90 packed weights", warn);
        fp4_gpu_release(w->global[i], "moe-fp4-sm90 global scales", warn);
    }
    memset(w, 0, sizeof *w);
}

static void sm90_close(void *inst_)
{
    sm90_inst *inst = (sm90_inst *)inst_;
    if (!inst) return;
    weights_free(&inst->gu, inst->warn);
    weights_free(&inst->dn, inst->warn);
    free(inst);
}

static fp4_status sm90_open(void **out, fp4_err *err)
{
    int num_sms = 0;
    *out = NULL;
    fp4_status st = fp4_gpu_require_sm90("moe-fp4-sm90", &num_sms, err);
    if (st != FP4_OK) return st;
    sm90_inst *inst = (sm90_inst *)calloc(1, sizeof *inst);
    if (!inst) return fp4_fail(err, FP4_ERR_NOMEM, "moe-fp4-sm90: no host memory");
    inst->num_sms = num_sms;
    *out = inst;
    return FP4_OK;
}

static void sm90_set_warnings(void *inst, fp4_warnings *w)
{
    ((sm90_inst *)inst)->warn = w;
}

/* One kind's packed weights on copies [0, copies): packed on the host once,
 * further copies copied on the device. */
static fp4_status weights_ensure(sm90_inst *inst, sm90_weights *sw, const fp4_matrix *w, int experts, int copies,
                                 fp4_err *err)
{
    fp4_status st = FP4_OK;
    if (copies > MAX_CACHED_COPIES)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-fp4-sm90: %d copies, at most %d", copies, MAX_CACHED_COPIES);
    if (sw->copies == 0) {
        const size_t bytes = fp4_sm90_moe_packed_size(experts, w[0].rows, w[0].cols);
        void *host = malloc(bytes > 0 ? bytes : 1);
        float *glob = (float *)malloc((size_t)experts * sizeof *glob);
        if (!host || !glob) st = fp4_fail(err, FP4_ERR_NOMEM, "moe-fp4-sm90: no host memory to pack %zu bytes", bytes);
        if (st == FP4_OK) st = fp4_sm90_moe_pack(w, experts, host, glob, err);
        if (st == FP4_OK) st = fp4_gpu_upload(&sw->packed[0], host, bytes, "moe-fp4-sm90 packed weights", err);
        if (st == FP4_OK &&
            (st = fp4_gpu_upload((void **)&sw->global[0], glob, (size_t)experts * sizeof *glob,
                                 "moe-fp4-sm90 global scales", err)) != FP4_OK) {
            fp4_gpu_release(sw->packed[0], "moe-fp4-sm90 packed weights", inst->warn);
            sw->packed[0] = NULL;
        }
        free(host);
        free(glob);
        if (st != FP4_OK) return st;
        sw->copies = 1;
        sw->bytes = bytes;
    }
    while (sw->copies < copies) {
        const int c = sw->copies;
        if ((st = fp4_gpu_alloc(&sw->packed[c], sw->bytes, "moe-fp4-sm90 packed weights", err)) != FP4_OK) return st;
        if ((st = fp4_gpu_alloc((void **)&sw->global[c], (size_t)experts * sizeof(float), "moe-fp4-sm90 global scales",
                                err)) != FP4_OK) {
            fp4_gpu_release(sw->packed[c], "moe-fp4-sm90 packed weights", inst->warn);
            sw->packed[c] = NULL;
            return st;
        }
        sw->copies++;
        FP4_CUDA_TRY(err, cudaMemcpy(sw->packed[c], sw->packed[0], sw->bytes, cudaMemcpyDeviceToDevice));
        FP4_CUDA_TRY(err, cudaMemcpy(sw->global[c], sw->global[0], (size_t)experts * sizeof(float),
                                     cudaMemcpyDeviceToDevice));
    }
    /* the copies run on the legacy stream, the timed calls on a non-blocking one */
    FP4_CUDA_TRY(err, cudaDeviceSynchronize());
    return FP4_OK;
}

static void sm90_release(void *plan_)
{
    sm90_plan *pl = (sm90_plan *)plan_;
    if (!pl) return;
    fp4_warnings *w = pl->inst ? pl->inst->warn : NULL;
    if (pl->c)
        for (int i = 0; i < pl->copies; i++) {
            sm90_copy *c = &pl->c[i];
            fp4_gpu_release(c->x, "moe-fp4-sm90 x", w);
            fp4_gpu_release(c->a_codes, "moe-fp4-sm90 A codes", w);
            fp4_gpu_release(c->a_scales, "moe-fp4-sm90 A scales", w);
            fp4_gpu_release(c->y, "moe-fp4-sm90 y", w);
            fp4_gpu_release(c->h, "moe-fp4-sm90 h", w);
            fp4_gpu_release(c->h_codes, "moe-fp4-sm90 h codes", w);
            fp4_gpu_release(c->h_scales, "moe-fp4-sm90 h scales", w);
            fp4_gpu_release(c->d, "moe-fp4-sm90 d", w);
            fp4_gpu_release(c->out, "moe-fp4-sm90 out", w);
            fp4_gpu_release(c->ws, "moe-fp4-sm90 workspace", w);
            fp4_moe_dev_route_free(&c->route, w);
        }
    free(pl->c);
    fp4_moe_dev_route_free(&pl->route, w);
    free(pl);
}

static fp4_status sm90_prepare(void *inst_, const fp4_moe_problem *p, int copies, void **out, fp4_err *err)
{
    sm90_inst *inst = (sm90_inst *)inst_;
    fp4_status st;
    *out = NULL;
    if ((st = fp4_moe_problem_check(p, copies, err)) != FP4_OK) return st;
    const int E = p->dims.experts, k = p->dims.top_k;
    const int64_t H = p->dims.hidden, I = p->dims.inter, P = p->plan->pairs, T = p->tokens;
    const int layer = p->step == FP4_MOE_STEP_LAYER, w4a4 = p->mode == FP4_MOE_W4A4;
    const int need_gu = p->step != FP4_MOE_STEP_DOWN, need_dn = p->step != FP4_MOE_STEP_GATE_UP;
    if (inst->weights_id != p->weights_id) {
        weights_free(&inst->gu, inst->warn);
        weights_free(&inst->dn, inst->warn);
        inst->weights_id = p->weights_id;
    }
    /* only the weights of the steps this plan needs stay: the other step's
     * would hold device memory that the other backends' plans of the case
     * need (moe_backend.h: the live plans of an instance are of one case) */
    if (!need_gu) weights_free(&inst->gu, inst->warn);
    if (!need_dn) weights_free(&inst->dn, inst->warn);
    if (need_gu && (st = weights_ensure(inst, &inst->gu, p->weights->gate_up, E, copies, err)) != FP4_OK) return st;
    if (need_dn && (st = weights_ensure(inst, &inst->dn, p->weights->down, E, copies, err)) != FP4_OK) return st;

    sm90_plan *pl = (sm90_plan *)calloc(1, sizeof *pl);
    if (!pl || !(pl->c = (sm90_copy *)calloc((size_t)copies, sizeof *pl->c))) {
        free(pl);
        return fp4_fail(err, FP4_ERR_NOMEM, "moe-fp4-sm90: no host memory for the plan");
    }
    pl->inst = inst;
    pl->p = p;
    pl->copies = copies;
    if ((st = fp4_moe_dev_route_upload(p, &pl->route, err)) != FP4_OK) goto fail;
    {
        size_t ws = 0;
        if (need_gu) ws = fp4_sm90_moe_workspace_size(E, k, T, 2 * I, H, 0, !w4a4);
        if (need_dn) {
            const size_t w2 = fp4_sm90_moe_workspace_size(E, k, T, H, I, 1, !w4a4);
            if (w2 > ws) ws = w2;
        }
        pl->ws_bytes = ws;
    }
    pl->a_global = w4a4 ? (layer ? 1.0f / p->a_encode_scale : p->a->global_scale) : 1.0f;
    pl->h_global = w4a4 && layer ? 1.0f / p->h_encode_scale : 1.0f;
    for (int i = 0; i < copies; i++) {
        sm90_copy *c = &pl->c[i];
        const int64_t K1 = p->a_cols, R1 = p->a_rows;
        if (!w4a4 || layer) {
            if ((st = fp4_gpu_upload((void **)&c->x, fp4_moe_problem_a_bf16(p, i), (size_t)R1 * (size_t)K1 * 2,
                                     "moe-fp4-sm90 x", err)) != FP4_OK)
                goto fail;
        }
        if (w4a4 && !layer) {
            const fp4_matrix *a = fp4_moe_problem_a(p, i);
            if ((st = fp4_gpu_upload((void **)&c->a_codes, a->codes, (size_t)R1 * (size_t)(K1 / 2),
                                     "moe-fp4-sm90 A codes", err)) != FP4_OK ||
                (st = fp4_gpu_upload((void **)&c->a_scales, a->scales, (size_t)R1 * (size_t)(K1 / 16),
                                     "moe-fp4-sm90 A scales", err)) != FP4_OK)
                goto fail;
        }
        if (w4a4 && layer &&
            ((st = fp4_gpu_alloc((void **)&c->a_codes, (size_t)T * (size_t)(H / 2), "moe-fp4-sm90 A codes", err)) !=
                 FP4_OK ||
             (st = fp4_gpu_alloc((void **)&c->a_scales, (size_t)T * (size_t)(H / 16), "moe-fp4-sm90 A scales", err)) !=
                 FP4_OK))
            goto fail;
        const int64_t ycols = p->step == FP4_MOE_STEP_DOWN ? H : 2 * I;
        if ((st = fp4_gpu_alloc((void **)&c->y, (size_t)P * (size_t)ycols * 2, "moe-fp4-sm90 y", err)) != FP4_OK)
            goto fail;
        if (layer) {
            if ((st = fp4_gpu_alloc((void **)&c->d, (size_t)P * (size_t)H * 2, "moe-fp4-sm90 d", err)) != FP4_OK ||
                (st = fp4_moe_dev_route_upload(p, &c->route, err)) != FP4_OK)
                goto fail;
            if (w4a4 &&
                ((st = fp4_gpu_alloc((void **)&c->h_codes, (size_t)P * (size_t)(I / 2), "moe-fp4-sm90 h codes", err)) !=
                     FP4_OK ||
                 (st = fp4_gpu_alloc((void **)&c->h_scales, (size_t)P * (size_t)(I / 16), "moe-fp4-sm90 h scales",
                                     err)) != FP4_OK))
                goto fail;
            if (!w4a4 && (st = fp4_gpu_alloc((void **)&c->h, (size_t)P * (size_t)I * 2, "moe-fp4-sm90 h", err)) != FP4_OK)
                goto fail;
        }
        if (need_dn && (st = fp4_gpu_alloc((void **)&c->out, (size_t)T * (size_t)H * 4, "moe-fp4-sm90 out", err)) !=
                           FP4_OK)
            goto fail;
        if (pl->ws_bytes) {
            if ((st = fp4_gpu_alloc(&c->ws, pl->ws_bytes, "moe-fp4-sm90 workspace", err)) != FP4_OK) goto fail;
            FP4_CUDA_GOTO(err, st, cudaMemset(c->ws, 0, pl->ws_bytes), fail);
        }
    }
    {
        int wide_from = 0;
        const int paths = fp4_sm90_moe_paths(E, k, T, &wide_from);
        char both[64];
        snprintf(both, sizeof both, "experts of < %d tokens streaming, the rest wide", wide_from);
        /* the steps this plan runs whose W4A4 activations the prepass dequantizes */
        const int pre_gu = need_gu && fp4_sm90_moe_dequant_prepass(E, k, T, 0, !w4a4);
        const int pre_dn = need_dn && fp4_sm90_moe_dequant_prepass(E, k, T, 1, !w4a4);
        snprintf(pl->variant, sizeof pl->variant, "grouped, %s%s%s",
                 paths == FP4_SM90_MOE_WIDE     ? "one launch a GEMM, wide path (wgmma)"
                 : paths == FP4_SM90_MOE_STREAM ? "one launch a GEMM, streaming path"
                                                : both,
                 pre_gu && pre_dn ? "; activations dequantized to bf16 once (prepass)"
                 : pre_gu         ? "; gate_up's activations dequantized to bf16 once (prepass)"
                 : pre_dn         ? "; down's activations dequantized to bf16 once (prepass)"
                                  : "",
                 layer ? "; plan rebuilt on the device" : "");
    }
    *out = pl;
    return FP4_OK;
fail:
    sm90_release(pl);
    return st;
}

static fp4_status check_copy(const sm90_plan *pl, int copy, fp4_err *err)
{
    if (copy < 0 || copy >= pl->copies)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-fp4-sm90: copy %d of %d", copy, pl->copies);
    return FP4_OK;
}

static fp4_status sm90_poison(void *plan_, int copy, void *stream, fp4_err *err)
{
    sm90_plan *pl = (sm90_plan *)plan_;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    const sm90_copy *c = &pl->c[copy];
    if (pl->p->step == FP4_MOE_STEP_GATE_UP)
        return fp4_gpu_poison_bf16(c->y, (size_t)pl->p->plan->pairs * (size_t)(2 * pl->p->dims.inter),
                                   (cudaStream_t)stream, err);
    return fp4_moe_gpu_poison_f32(c->out, (size_t)pl->p->tokens * (size_t)pl->p->dims.hidden, (cudaStream_t)stream,
                                  err);
}

/* One grouped call: A (NVFP4 codes and plain scales with a_global, or
 * bf16) [rows, k] gathered by the plan r; D [P, n] by pair; route_w and out
 * non-NULL: the combine too. */
static fp4_status grouped(const sm90_plan *pl, const sm90_copy *c, const fp4_moe_dev_route *r, int down,
                          const uint16_t *a_bf16, const uint8_t *a_codes, const uint8_t *a_scales, float a_global,
                          uint16_t *d, float *out, int copy, cudaStream_t s, fp4_err *err)
{
    const fp4_moe_problem *p = pl->p;
    const sm90_weights *w = down ? &pl->inst->dn : &pl->inst->gu;
    fp4_sm90_moe_args a;
    memset(&a, 0, sizeof a);
    a.experts = p->dims.experts;
    a.top_k = p->dims.top_k;
    a.tokens = p->tokens;
    a.n = down ? p->dims.hidden : 2 * p->dims.inter;
    a.k = down ? p->dims.inter : p->dims.hidden;
    a.w4a16 = p->mode == FP4_MOE_W4A16;
    a.a_per_pair = down;
    a.a_bf16 = a_bf16;
    a.a_codes = a_codes;
    a.a_scales = a_scales;
    a.a_global = a_global;
    a.expert_offsets = r->offsets;
    a.pair_index = r->pair_index;
    a.b_packed = w->packed[copy];
    a.b_global = w->global[copy];
    a.d = d;
    if (out) {
        a.route_weights = r->weights;
        a.d_combined = out; /* written whole by the call's combine */
    }
    a.workspace = c->ws;
    a.workspace_bytes = pl->ws_bytes;
    return fp4_sm90_moe_gemm(&a, s, err);
}

enum { L_ROUTE, L_QUANT_X, L_GATE_UP, L_ACT, L_DOWN, L_STEPS };

static fp4_status run_step(sm90_plan *pl, int step, int copy, cudaStream_t s, fp4_err *err)
{
    const fp4_moe_problem *p = pl->p;
    sm90_copy *c = &pl->c[copy];
    const int w4a4 = p->mode == FP4_MOE_W4A4;
    const int64_t H = p->dims.hidden, I = p->dims.inter, P = p->plan->pairs;
    fp4_moe_act_args a;
    memset(&a, 0, sizeof a);
    switch (step) {
    case L_ROUTE: return fp4_moe_gpu_route(&c->route, P, p->dims.experts, s, err);
    case L_QUANT_X:
        if (!w4a4) return FP4_OK; /* W4A16: x goes in as it is */
        a.src = c->x;
        a.src_cols = H;
        a.act = -1;
        a.rows = p->tokens;
        a.cols = H;
        a.out = FP4_MOE_QOUT_NVFP4;
        a.encode_scale = p->a_encode_scale;
        a.codes = c->a_codes;
        a.scales = c->a_scales;
        return fp4_moe_gpu_act(&a, s, err);
    case L_GATE_UP:
        return grouped(pl, c, &c->route, 0, c->x, c->a_codes, c->a_scales, pl->a_global, c->y, NULL, copy, s, err);
    case L_ACT:
        a.src = c->y;
        a.src_cols = 2 * I;
        a.act = (int)p->dims.act;
        a.rows = P;
        a.cols = I;
        a.out = w4a4 ? FP4_MOE_QOUT_NVFP4 : FP4_MOE_QOUT_BF16;
        a.encode_scale = p->h_encode_scale;
        a.out_bf16 = c->h;
        a.codes = c->h_codes;
        a.scales = c->h_scales;
        return fp4_moe_gpu_act(&a, s, err);
    case L_DOWN:
        return grouped(pl, c, &c->route, 1, c->h, c->h_codes, c->h_scales, pl->h_global, c->d, c->out, copy, s, err);
    }
    return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-fp4-sm90: step %d", step);
}

static fp4_status sm90_run(void *plan_, int copy, void *stream, fp4_err *err)
{
    sm90_plan *pl = (sm90_plan *)plan_;
    const cudaStream_t s = (cudaStream_t)stream;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    sm90_copy *c = &pl->c[copy];
    switch (pl->p->step) {
    case FP4_MOE_STEP_GATE_UP:
        return grouped(pl, c, &pl->route, 0, c->x, c->a_codes, c->a_scales, pl->a_global, c->y, NULL, copy, s, err);
    case FP4_MOE_STEP_DOWN:
        return grouped(pl, c, &pl->route, 1, c->x, c->a_codes, c->a_scales, pl->a_global, c->y, c->out, copy, s, err);
    case FP4_MOE_STEP_LAYER:
        for (int i = 0; st == FP4_OK && i < L_STEPS; i++) st = run_step(pl, i, copy, s, err);
        return st;
    }
    return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-fp4-sm90: unknown step");
}

static fp4_status sm90_read(void *plan_, int copy, float *out, fp4_err *err)
{
    sm90_plan *pl = (sm90_plan *)plan_;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    if (pl->p->step == FP4_MOE_STEP_GATE_UP)
        return fp4_gpu_read_bf16(pl->c[copy].y, (size_t)pl->p->plan->pairs * (size_t)(2 * pl->p->dims.inter), out, err);
    return fp4_gpu_read_f32(pl->c[copy].out, (size_t)pl->p->tokens * (size_t)pl->p->dims.hidden, out, err);
}

static const char *sm90_variant(void *plan)
{
    return ((const sm90_plan *)plan)->variant;
}

/* The layer's i-th step: W4A16 has no quantization of x. -1 past the end. */
static int layer_step(const sm90_plan *pl, int i)
{
    const int w4a4 = pl->p->mode == FP4_MOE_W4A4;
    if (i < 0 || i >= (w4a4 ? L_STEPS : L_STEPS - 1)) return -1;
    return !w4a4 && i >= L_QUANT_X ? i + 1 : i;
}

static int sm90_step_count(void *plan)
{
    const sm90_plan *pl = (const sm90_plan *)plan;
    if (pl->p->step != FP4_MOE_STEP_LAYER) return 0;
    return pl->p->mode == FP4_MOE_W4A4 ? L_STEPS : L_STEPS - 1;
}

static const char *sm90_step_name(void *plan, int i)
{
    const sm90_plan *pl = (const sm90_plan *)plan;
    switch (layer_step(pl, i)) {
    case L_ROUTE: return "route";
    case L_QUANT_X: return "quant_x";
    case L_GATE_UP: return "gate_up";
    case L_ACT: return pl->p->mode == FP4_MOE_W4A4 ? "act_quant" : "act";
    case L_DOWN: return "down_combine";
    }
    return "?";
}

static fp4_status sm90_run_step(void *plan_, int i, int copy, void *stream, fp4_err *err)
{
    sm90_plan *pl = (sm90_plan *)plan_;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    const int step = pl->p->step == FP4_MOE_STEP_LAYER ? layer_step(pl, i) : -1;
    if (step < 0) return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-fp4-sm90: no step %d", i);
    return run_step(pl, step, copy, (cudaStream_t)stream, err);
}

extern "C" const fp4_moe_backend_ops fp4_moe_backend_fp4_sm90 = {
    FP4_MOE_BACKEND_API_VERSION,                                                      /* api_version */
    "moe-fp4-sm90",                                                                   /* name */
    "our grouped NVFP4 GEMM for Hopper: every expert in one launch, the combine in the same call (sm_90)", /* summary */
    FP4_BACKEND_GPU,       /* flags: exact operands */
    FP4_MATH_BF16_TC,      /* math: 16-bit tensor cores */
    FP4_MOE_WEIGHTS_NVFP4, /* wformat */
    1e-2,                  /* tol_max: fp32 accumulation, one bf16 rounding of D */
    5e-3,                  /* tol_norm */
    sm90_open,         /* open: exactly sm_90 */
    sm90_close,        /* close */
    NULL,              /* supports: the kernel's own checks answer at prepare */
    sm90_prepare,      /* prepare */
    sm90_poison,       /* poison */
    sm90_run,          /* run */
    sm90_read,         /* read_output */
    sm90_release,      /* release */
    sm90_variant,      /* variant */
    sm90_set_warnings, /* set_warnings */
    sm90_step_count,   /* step_count: route, quant_x, gate_up, act, down */
    sm90_step_name,    /* step_name */
    sm90_run_step,     /* run_step */
    NULL, /* own_reference */
    0.0,  /* own_tol */
};
