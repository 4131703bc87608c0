/* MoE backend "moe-loop-fp4": our dense Hopper NVFP4 GEMM (fp4-sm90,
 * kernels/sm90/fp4_sm90.h) called once per expert that got tokens, all in one
 * graph: what grouping buys is the difference to moe-fp4-sm90. W4A4 only
 * (the dense kernels multiply NVFP4 by NVFP4).
 *
 * Layout: the grouped rows with every expert's group starting at a multiple
 * of 128 (fp4_moe_plan_aligned_offsets), so that an expert's rows are a
 * whole [M_e, K] NVFP4 operand with its own 128x4 swizzled scales inside one
 * buffer. Each expert's GEMM runs the kernel the dense rule picks for
 * (M_e, N, K) (or FP4_SM90_KERNEL's), with the weight packed for that kernel;
 * packed weights are made on the host for the experts a plan needs and kept
 * in the instance while problem->weights_id stays.
 *
 * A call: gather the NVFP4 input rows (codes and scales, into the swizzled
 * layout), the GEMMs, for down the weighted combine into fp32 [T, H]. The
 * layer: x quantized to NVFP4 on the way into the grouped layout, gate_up,
 * the activation and h's quantization (static scales), down, combine. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backends/moe_backends.h" /* gives the table below C linkage */
}
#include "backends/moe_gpu.h"
#include "core/gpu.h"
#include "kernels/sm90/fp4_sm90.h"

#define ALIGN_ROWS 128
#define MAX_CACHED_COPIES 64

/* One packed weight on the device. */
typedef struct loop_pack {
    uint8_t *codes, *scales;
} loop_pack;

/* The packed weights of one kind: [copies][E][kernel - 1], made on demand. */
typedef struct loop_weights {
    int copies, experts;
    loop_pack *pk;
} loop_weights;

typedef struct loop_inst {
    int num_sms;
    fp4_warnings *warn;
    uint64_t weights_id;
    loop_weights gu, dn;
} loop_inst;

typedef struct loop_copy {
    uint8_t *in_codes, *in_scales; /* NVFP4 input, plain scales (gate_up, down) */
    uint16_t *x;                   /* layer: bf16 x [T, H] */
    uint8_t *a_codes, *a_sf;       /* the first GEMM's A, grouped and aligned */
    uint16_t *y;                   /* its D (gate_up's y or down's d) */
    uint8_t *h_codes, *h_sf;       /* layer: h quantized, aligned */
    uint16_t *d;                   /* layer: down's D */
    float *out;                    /* down, layer: [T, H] */
} loop_copy;

typedef struct loop_plan {
    loop_inst *inst;
    const fp4_moe_problem *p;
    int copies;
    int64_t rows;            /* aligned grouped rows */
    int64_t *start;          /* host [E + 1]: aligned group starts */
    int32_t *map;            /* device: aligned row -> input row (-1: padding) */
    int32_t *row_of_pair;    /* device: pair -> aligned row */
    int32_t *row_of_pair_host;
    float *route_w;          /* device [P] */
    int *kgu, *kdn;          /* [E] kernel per expert (0: idle) */
    size_t *wsgu, *wsdn;     /* [E] decode/mid: the expert's slice of ws_zeroed */
    float *agu, *adn;        /* [E] alpha per expert */
    /* Two workspaces: decode and mid keep arrival counters that must stay
     * zero between launches (each launch re-zeroes what it used), while
     * prefill overwrites its workspace with converted weights. The counters'
     * place depends on the GEMM's size (mid puts its token tiles first), so
     * each (kernel, M) of a kind gets its own slice of ws_zeroed: a call with
     * another M would read the previous call's tokens as its counters. */
    void *ws_zeroed, *ws_scratch;
    size_t ws_zeroed_bytes, ws_scratch_bytes;
    loop_copy *c;
    char variant[192];
} loop_plan;

static void weights_free(loop_weights *w, fp4_warnings *warn)
{
    if (w->pk)
        for (size_t i = 0; i < (size_t)w->copies * (size_t)w->experts * FP4_SM90_KERNELS; i++) {
            fp4_gpu_release(w->pk[i].codes, "moe-loop-fp4 packed weights", warn);
            fp4_gpu_release(w->pk[i].scales, "moe-loop-fp4 packed scales", warn);
        }
    free(w->pk);
    memset(w, 0, sizeof *w);
}

static void loop_close(void *inst_)
{
    loop_inst *inst = (loop_inst *)inst_;
    if (!inst) return;
    weights_free(&inst->gu, inst->warn);
    weights_free(&inst->dn, inst->warn);
    free(inst);
}

static fp4_status loop_open(void **out, fp4_err *err)
{
    int num_sms = 0;
    *out = NULL;
    fp4_status st = fp4_gpu_require_sm90("moe-loop-fp4", &num_sms, err);
    if (st != FP4_OK) return st;
    loop_inst *inst = (loop_inst *)calloc(1, sizeof *inst);
    if (!inst) return fp4_fail(err, FP4_ERR_NOMEM, "moe-loop-fp4: no host memory");
    inst->num_sms = num_sms;
    if ((st = fp4_sm90_init(err)) != FP4_OK) {
        free(inst);
        return st;
    }
    *out = inst;
    return FP4_OK;
}

static void loop_set_warnings(void *inst, fp4_warnings *w)
{
    ((loop_inst *)inst)->warn = w;
}

/* The kernel for an expert's (m, n, k): FP4_SM90_KERNEL's, or the rule's. */
static fp4_status pick_kernel(const loop_inst *inst, int64_t m, int64_t n, int64_t k, int *kernel, fp4_err *err)
{
    const int forced = fp4_sm90_forced();
    if (forced < 0)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "FP4_SM90_KERNEL=%s names no kernel", getenv("FP4_SM90_KERNEL"));
    *kernel = forced != FP4_SM90_AUTO ? forced : fp4_sm90_choose(m, n, k, inst->num_sms);
    if (*kernel == FP4_SM90_AUTO || !fp4_sm90_kernel_fits(*kernel, m, n, k, inst->num_sms))
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "moe-loop-fp4: no fp4-sm90 kernel runs %lldx%lldx%lld",
                        (long long)m, (long long)n, (long long)k);
    return FP4_OK;
}

static fp4_status loop_supports(void *inst, const fp4_moe_problem *p, fp4_err *err)
{
    if (p->mode != FP4_MOE_W4A4)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "moe-loop-fp4: W4A4 only (the dense fp4-sm90 kernels "
                        "multiply NVFP4 by NVFP4)");
    return FP4_OK;
}

/* Expert e's weight packed for `kernel` on copies [0, copies). */
static fp4_status pack_ensure(loop_inst *inst, loop_weights *lw, const fp4_matrix *w, int experts, int e,
                              int kernel, int copies, fp4_err *err)
{
    fp4_status st;
    if (copies > MAX_CACHED_COPIES)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-loop-fp4: %d copies, at most %d", copies, MAX_CACHED_COPIES);
    if (lw->copies < copies) { /* grow the table; packs already made keep their places */
        loop_pack *pk = (loop_pack *)calloc((size_t)copies * (size_t)experts * FP4_SM90_KERNELS, sizeof *pk);
        if (!pk) return fp4_fail(err, FP4_ERR_NOMEM, "moe-loop-fp4: no host memory");
        if (lw->pk) memcpy(pk, lw->pk, (size_t)lw->copies * (size_t)experts * FP4_SM90_KERNELS * sizeof *pk);
        free(lw->pk);
        lw->pk = pk;
        lw->copies = copies;
        lw->experts = experts;
    }
    const int64_t n = w[e].rows, k = w[e].cols;
    const size_t cb = fp4_sm90_packed_b_codes_size(kernel, n, k), sb = fp4_sm90_packed_b_scales_size(kernel, n, k);
    loop_pack *first = &lw->pk[(size_t)e * FP4_SM90_KERNELS + (size_t)(kernel - 1)];
    if (!first->codes) {
        uint8_t *hc = (uint8_t *)malloc(cb), *hs = (uint8_t *)malloc(sb);
        st = !hc || !hs ? fp4_fail(err, FP4_ERR_NOMEM, "moe-loop-fp4: no host memory to pack") : FP4_OK;
        if (st == FP4_OK) st = fp4_sm90_pack_b(kernel, &w[e], hc, hs, err);
        if (st == FP4_OK) st = fp4_gpu_upload((void **)&first->codes, hc, cb, "moe-loop-fp4 packed weights", err);
        if (st == FP4_OK) st = fp4_gpu_upload((void **)&first->scales, hs, sb, "moe-loop-fp4 packed scales", err);
        free(hc);
        free(hs);
        if (st != FP4_OK) return st;
    }
    for (int c = 1; c < copies; c++) {
        loop_pack *pk = &lw->pk[((size_t)c * experts + (size_t)e) * FP4_SM90_KERNELS + (size_t)(kernel - 1)];
        if (pk->codes) continue;
        if ((st = fp4_gpu_alloc((void **)&pk->codes, cb, "moe-loop-fp4 packed weights", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&pk->scales, sb, "moe-loop-fp4 packed scales", err)) != FP4_OK)
            return st;
        FP4_CUDA_TRY(err, cudaMemcpy(pk->codes, first->codes, cb, cudaMemcpyDeviceToDevice));
        FP4_CUDA_TRY(err, cudaMemcpy(pk->scales, first->scales, sb, cudaMemcpyDeviceToDevice));
    }
    /* the copies run on the legacy stream, the timed calls on a non-blocking one */
    FP4_CUDA_TRY(err, cudaDeviceSynchronize());
    return FP4_OK;
}

static void loop_release(void *plan_)
{
    loop_plan *pl = (loop_plan *)plan_;
    if (!pl) return;
    fp4_warnings *w = pl->inst ? pl->inst->warn : NULL;
    if (pl->c)
        for (int i = 0; i < pl->copies; i++) {
            loop_copy *c = &pl->c[i];
            fp4_gpu_release(c->in_codes, "moe-loop-fp4 input codes", w);
            fp4_gpu_release(c->in_scales, "moe-loop-fp4 input scales", w);
            fp4_gpu_release(c->x, "moe-loop-fp4 x", w);
            fp4_gpu_release(c->a_codes, "moe-loop-fp4 A codes", w);
            fp4_gpu_release(c->a_sf, "moe-loop-fp4 A scales", w);
            fp4_gpu_release(c->y, "moe-loop-fp4 y", w);
            fp4_gpu_release(c->h_codes, "moe-loop-fp4 h codes", w);
            fp4_gpu_release(c->h_sf, "moe-loop-fp4 h scales", w);
            fp4_gpu_release(c->d, "moe-loop-fp4 d", w);
            fp4_gpu_release(c->out, "moe-loop-fp4 out", w);
        }
    free(pl->c);
    fp4_gpu_release(pl->map, "moe-loop-fp4 row map", w);
    fp4_gpu_release(pl->row_of_pair, "moe-loop-fp4 pair rows", w);
    fp4_gpu_release(pl->route_w, "moe-loop-fp4 routing weights", w);
    fp4_gpu_release(pl->ws_zeroed, "moe-loop-fp4 workspace", w);
    fp4_gpu_release(pl->ws_scratch, "moe-loop-fp4 prefill workspace", w);
    free(pl->row_of_pair_host);
    free(pl->start);
    free(pl->kgu);
    free(pl->kdn);
    free(pl->wsgu);
    free(pl->wsdn);
    free(pl->agu);
    free(pl->adn);
    free(pl);
}

static int kernel_keeps_zeroed_ws(int kernel)
{
    return kernel == FP4_SM90_DECODE || kernel == FP4_SM90_MID;
}

/* Kernels, packs and workspace of one kind of GEMM (n x k weights). */
static fp4_status plan_gemms(loop_plan *pl, loop_weights *lw, const fp4_matrix *w, float act_global, int *kern,
                             size_t *ws_off, float *alpha, int counts[FP4_SM90_KERNELS], fp4_err *err)
{
    const fp4_moe_plan *plan = pl->p->plan;
    fp4_status st;
    for (int e = 0; e < plan->experts; e++) {
        const int32_t m = plan->expert_counts[e];
        kern[e] = 0;
        alpha[e] = act_global * w[e].global_scale;
        if (m == 0) continue;
        if ((st = pick_kernel(pl->inst, m, w[e].rows, w[e].cols, &kern[e], err)) != FP4_OK) return st;
        if ((st = pack_ensure(pl->inst, lw, w, plan->experts, e, kern[e], pl->copies, err)) != FP4_OK) return st;
        const size_t ws = fp4_sm90_workspace_size(kern[e], m, w[e].rows, w[e].cols);
        if (kernel_keeps_zeroed_ws(kern[e])) {
            int same = -1; /* an earlier expert with this kernel and M: its slice */
            for (int f = 0; f < e && same < 0; f++)
                if (kern[f] == kern[e] && plan->expert_counts[f] == m) same = f;
            if (same >= 0) {
                ws_off[e] = ws_off[same];
            } else {
                ws_off[e] = pl->ws_zeroed_bytes;
                pl->ws_zeroed_bytes += (ws + 255) / 256 * 256;
            }
        } else if (ws > pl->ws_scratch_bytes) {
            pl->ws_scratch_bytes = ws;
        }
        counts[kern[e] - 1]++;
    }
    return FP4_OK;
}

static fp4_status loop_prepare(void *inst_, const fp4_moe_problem *p, int copies, void **out, fp4_err *err)
{
    loop_inst *inst = (loop_inst *)inst_;
    fp4_status st;
    int32_t *map = NULL;
    *out = NULL;
    if ((st = fp4_moe_problem_check(p, copies, err)) != FP4_OK) return st;
    if ((st = loop_supports(inst, p, err)) != FP4_OK) return st;
    const int E = p->dims.experts, k = p->dims.top_k;
    const int64_t H = p->dims.hidden, I = p->dims.inter, P = p->plan->pairs, T = p->tokens;
    const int layer = p->step == FP4_MOE_STEP_LAYER;
    const int need_gu = p->step != FP4_MOE_STEP_DOWN, need_dn = p->step != FP4_MOE_STEP_GATE_UP;
    const int64_t K1 = p->step == FP4_MOE_STEP_DOWN ? I : H;          /* the first GEMM's K */
    const int64_t N1 = p->step == FP4_MOE_STEP_DOWN ? H : 2 * I;      /* and its N */
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
    loop_plan *pl = (loop_plan *)calloc(1, sizeof *pl);
    if (!pl) return fp4_fail(err, FP4_ERR_NOMEM, "moe-loop-fp4: no host memory");
    pl->inst = inst;
    pl->p = p;
    pl->copies = copies;
    pl->c = (loop_copy *)calloc((size_t)copies, sizeof *pl->c);
    pl->kgu = (int *)calloc((size_t)E, sizeof(int));
    pl->kdn = (int *)calloc((size_t)E, sizeof(int));
    pl->wsgu = (size_t *)calloc((size_t)E, sizeof(size_t));
    pl->wsdn = (size_t *)calloc((size_t)E, sizeof(size_t));
    pl->agu = (float *)calloc((size_t)E, sizeof(float));
    pl->adn = (float *)calloc((size_t)E, sizeof(float));
    if (!pl->c || !pl->kgu || !pl->kdn || !pl->wsgu || !pl->wsdn || !pl->agu || !pl->adn) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "moe-loop-fp4: no host memory for the plan");
        goto fail;
    }
    if ((st = fp4_moe_row_map(p->plan, p->step == FP4_MOE_STEP_DOWN ? 1 : k, ALIGN_ROWS, &map, &pl->rows,
                              &pl->row_of_pair_host, &pl->start, err)) != FP4_OK ||
        (st = fp4_gpu_upload((void **)&pl->map, map, (size_t)pl->rows * sizeof *map, "moe-loop-fp4 row map", err)) !=
            FP4_OK ||
        (st = fp4_gpu_upload((void **)&pl->row_of_pair, pl->row_of_pair_host, (size_t)P * sizeof(int32_t),
                             "moe-loop-fp4 pair rows", err)) != FP4_OK ||
        (st = fp4_gpu_upload((void **)&pl->route_w, p->routing->weights, (size_t)P * sizeof(float),
                             "moe-loop-fp4 routing weights", err)) != FP4_OK)
        goto fail;
    {
        int cgu[FP4_SM90_KERNELS] = {0}, cdn[FP4_SM90_KERNELS] = {0};
        const float a1 = layer ? 1.0f / p->a_encode_scale : p->a->global_scale;
        const float a2 = layer ? 1.0f / p->h_encode_scale : p->a->global_scale;
        if (need_gu && (st = plan_gemms(pl, &inst->gu, p->weights->gate_up, a1, pl->kgu, pl->wsgu, pl->agu, cgu, err)) != FP4_OK)
            goto fail;
        if (need_dn && (st = plan_gemms(pl, &inst->dn, p->weights->down, a2, pl->kdn, pl->wsdn, pl->adn, cdn, err)) != FP4_OK)
            goto fail;
        size_t len = (size_t)snprintf(pl->variant, sizeof pl->variant, "fp4-sm90 per active expert:");
        for (int kind = 0; kind < 2; kind++) {
            const int *cnt = kind ? cdn : cgu;
            for (int i = 0; i < FP4_SM90_KERNELS && len < sizeof pl->variant; i++)
                if (cnt[i])
                    len += (size_t)snprintf(pl->variant + len, sizeof pl->variant - len, " %s %s x%d",
                                            kind ? "down" : "gate_up", fp4_sm90_kernel_by_id(i + 1)->name, cnt[i]);
        }
    }
    if (pl->ws_zeroed_bytes) {
        if ((st = fp4_gpu_alloc(&pl->ws_zeroed, pl->ws_zeroed_bytes, "moe-loop-fp4 workspace", err)) != FP4_OK)
            goto fail;
        FP4_CUDA_GOTO(err, st, cudaMemset(pl->ws_zeroed, 0, pl->ws_zeroed_bytes), fail);
    }
    if (pl->ws_scratch_bytes &&
        (st = fp4_gpu_alloc(&pl->ws_scratch, pl->ws_scratch_bytes, "moe-loop-fp4 prefill workspace", err)) != FP4_OK)
        goto fail;
    for (int i = 0; i < copies; i++) {
        loop_copy *c = &pl->c[i];
        const size_t a_sf = fp4_swizzled_size(pl->rows, K1);
        if (layer) {
            if ((st = fp4_gpu_upload((void **)&c->x, fp4_moe_problem_a_bf16(p, i), (size_t)T * (size_t)H * 2,
                                     "moe-loop-fp4 x", err)) != FP4_OK)
                goto fail;
        } else {
            const fp4_matrix *a = fp4_moe_problem_a(p, i);
            if ((st = fp4_gpu_upload((void **)&c->in_codes, a->codes, (size_t)a->rows * (size_t)(a->cols / 2),
                                     "moe-loop-fp4 input codes", err)) != FP4_OK ||
                (st = fp4_gpu_upload((void **)&c->in_scales, a->scales, (size_t)a->rows * (size_t)(a->cols / 16),
                                     "moe-loop-fp4 input scales", err)) != FP4_OK)
                goto fail;
        }
        if ((st = fp4_gpu_alloc((void **)&c->a_codes, (size_t)pl->rows * (size_t)(K1 / 2), "moe-loop-fp4 A codes",
                                err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->a_sf, a_sf, "moe-loop-fp4 A scales", err)) != FP4_OK ||
            (st = fp4_gpu_alloc((void **)&c->y, (size_t)pl->rows * (size_t)N1 * 2, "moe-loop-fp4 y", err)) != FP4_OK)
            goto fail;
        /* swizzle padding stays zero; rows of no expert stay zero */
        FP4_CUDA_GOTO(err, st, cudaMemset(c->a_sf, 0, a_sf), fail);
        FP4_CUDA_GOTO(err, st, cudaMemset(c->y, 0, (size_t)pl->rows * (size_t)N1 * 2), fail);
        if (layer) {
            const size_t h_sf = fp4_swizzled_size(pl->rows, I);
            if ((st = fp4_gpu_alloc((void **)&c->h_codes, (size_t)pl->rows * (size_t)(I / 2), "moe-loop-fp4 h codes",
                                    err)) != FP4_OK ||
                (st = fp4_gpu_alloc((void **)&c->h_sf, h_sf, "moe-loop-fp4 h scales", err)) != FP4_OK ||
                (st = fp4_gpu_alloc((void **)&c->d, (size_t)pl->rows * (size_t)H * 2, "moe-loop-fp4 d", err)) != FP4_OK)
                goto fail;
            FP4_CUDA_GOTO(err, st, cudaMemset(c->h_sf, 0, h_sf), fail);
        }
        if (need_dn && (st = fp4_gpu_alloc((void **)&c->out, (size_t)T * (size_t)H * 4, "moe-loop-fp4 out", err)) !=
                           FP4_OK)
            goto fail;
    }
    free(map);
    *out = pl;
    return FP4_OK;
fail:
    free(map);
    loop_release(pl);
    return st;
}

static fp4_status check_copy(const loop_plan *pl, int copy, fp4_err *err)
{
    if (copy < 0 || copy >= pl->copies)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-loop-fp4: copy %d of %d", copy, pl->copies);
    return FP4_OK;
}

static fp4_status loop_poison(void *plan_, int copy, void *stream, fp4_err *err)
{
    loop_plan *pl = (loop_plan *)plan_;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    const loop_copy *c = &pl->c[copy];
    if (pl->p->step == FP4_MOE_STEP_GATE_UP) /* every row a GEMM writes; padding rows are never read */
        return fp4_gpu_poison_bf16(c->y, (size_t)pl->rows * (size_t)(2 * pl->p->dims.inter), (cudaStream_t)stream, err);
    return fp4_moe_gpu_poison_f32(c->out, (size_t)pl->p->tokens * (size_t)pl->p->dims.hidden, (cudaStream_t)stream,
                                  err);
}

/* Every active expert's dense GEMM: A rows at its aligned group start. */
static fp4_status expert_gemms(const loop_plan *pl, const fp4_matrix *w, const loop_weights *lw, const int *kern,
                               const size_t *ws_off, const float *alpha, const uint8_t *a_codes, const uint8_t *a_sf, uint16_t *d,
                               int copy, cudaStream_t s, fp4_err *err)
{
    const fp4_moe_plan *plan = pl->p->plan;
    for (int e = 0; e < plan->experts; e++) {
        if (!kern[e]) continue;
        const int64_t n = w[e].rows, k = w[e].cols, start = pl->start[e];
        const loop_pack *pk = &lw->pk[((size_t)copy * lw->experts + (size_t)e) * FP4_SM90_KERNELS + (size_t)(kern[e] - 1)];
        fp4_sm90_gemm_args a;
        memset(&a, 0, sizeof a);
        a.kernel = kern[e];
        a.m = plan->expert_counts[e];
        a.n = n;
        a.k = k;
        a.a_codes = a_codes + (size_t)start * (size_t)(k / 2);
        a.a_sf = a_sf + (size_t)start * (size_t)fp4_swizzled_kblocks(k); /* start is a multiple of 128 */
        a.b_codes = pk->codes;
        a.b_sf = pk->scales;
        a.alpha = alpha[e];
        a.d = d + (size_t)start * (size_t)n;
        if (kernel_keeps_zeroed_ws(kern[e])) {
            a.workspace = (char *)pl->ws_zeroed + ws_off[e];
            a.workspace_bytes = fp4_sm90_workspace_size(kern[e], a.m, n, k);
        } else {
            a.workspace = pl->ws_scratch;
            a.workspace_bytes = pl->ws_scratch_bytes;
        }
        a.num_sms = pl->inst->num_sms;
        fp4_status st = fp4_sm90_gemm(&a, s, err);
        if (st != FP4_OK) return st;
    }
    return FP4_OK;
}

enum { L_GATHER, L_GATE_UP, L_ACT, L_DOWN, L_COMBINE, L_STEPS };

static fp4_status run_step(loop_plan *pl, int step, int copy, cudaStream_t s, fp4_err *err)
{
    const fp4_moe_problem *p = pl->p;
    const loop_copy *c = &pl->c[copy];
    const int64_t H = p->dims.hidden, I = p->dims.inter;
    const int layer = p->step == FP4_MOE_STEP_LAYER;
    switch (step) {
    case L_GATHER:
        if (layer) { /* x quantized to NVFP4 into the grouped rows */
            fp4_moe_act_args a;
            memset(&a, 0, sizeof a);
            a.src = c->x;
            a.src_cols = H;
            a.map = pl->map;
            a.act = -1;
            a.rows = pl->rows;
            a.cols = H;
            a.out = FP4_MOE_QOUT_NVFP4_SWIZZLED;
            a.encode_scale = p->a_encode_scale;
            a.codes = c->a_codes;
            a.scales = c->a_sf;
            return fp4_moe_gpu_act(&a, s, err);
        }
        return fp4_moe_gpu_gather_nvfp4(c->in_codes, c->in_scales, p->a_cols, pl->map, pl->rows, c->a_codes, c->a_sf,
                                        1, s, err);
    case L_GATE_UP:
        return expert_gemms(pl, p->weights->gate_up, &pl->inst->gu, pl->kgu, pl->wsgu, pl->agu, c->a_codes, c->a_sf, c->y, copy,
                            s, err);
    case L_ACT: {
        fp4_moe_act_args a;
        memset(&a, 0, sizeof a);
        a.src = c->y;
        a.src_cols = 2 * I;
        a.act = (int)p->dims.act;
        a.rows = pl->rows;
        a.cols = I;
        a.out = FP4_MOE_QOUT_NVFP4_SWIZZLED;
        a.encode_scale = p->h_encode_scale;
        a.codes = c->h_codes;
        a.scales = c->h_sf;
        return fp4_moe_gpu_act(&a, s, err);
    }
    case L_DOWN:
        if (layer)
            return expert_gemms(pl, p->weights->down, &pl->inst->dn, pl->kdn, pl->wsdn, pl->adn, c->h_codes, c->h_sf, c->d, copy,
                                s, err);
        return expert_gemms(pl, p->weights->down, &pl->inst->dn, pl->kdn, pl->wsdn, pl->adn, c->a_codes, c->a_sf, c->y, copy, s,
                            err);
    case L_COMBINE:
        return fp4_moe_gpu_combine(layer ? c->d : c->y, H, pl->row_of_pair, pl->route_w, p->tokens, p->dims.top_k,
                                   c->out, s, err);
    }
    return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-loop-fp4: step %d", step);
}

static fp4_status loop_run(void *plan_, int copy, void *stream, fp4_err *err)
{
    loop_plan *pl = (loop_plan *)plan_;
    const cudaStream_t s = (cudaStream_t)stream;
    fp4_status st = check_copy(pl, copy, err);
    static const int gate_up[] = {L_GATHER, L_GATE_UP}, down[] = {L_GATHER, L_DOWN, L_COMBINE},
                     layer[] = {L_GATHER, L_GATE_UP, L_ACT, L_DOWN, L_COMBINE};
    const fp4_moe_step step = pl->p->step;
    const int *steps = step == FP4_MOE_STEP_GATE_UP ? gate_up : step == FP4_MOE_STEP_DOWN ? down : layer;
    const int n = step == FP4_MOE_STEP_GATE_UP ? 2 : step == FP4_MOE_STEP_DOWN ? 3 : 5;
    for (int i = 0; st == FP4_OK && i < n; i++) st = run_step(pl, steps[i], copy, s, err);
    return st;
}

static fp4_status loop_read(void *plan_, int copy, float *out, fp4_err *err)
{
    loop_plan *pl = (loop_plan *)plan_;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    if (pl->p->step == FP4_MOE_STEP_GATE_UP)
        return fp4_moe_read_grouped_bf16(pl->c[copy].y, pl->rows, 2 * pl->p->dims.inter, pl->row_of_pair_host,
                                         pl->p->plan->pairs, out, err);
    return fp4_gpu_read_f32(pl->c[copy].out, (size_t)pl->p->tokens * (size_t)pl->p->dims.hidden, out, err);
}

static const char *loop_variant(void *plan)
{
    return ((const loop_plan *)plan)->variant;
}

static int loop_step_count(void *plan)
{
    return ((const loop_plan *)plan)->p->step == FP4_MOE_STEP_LAYER ? L_STEPS : 0;
}

static const char *loop_step_name(void *plan, int step)
{
    static const char *const names[L_STEPS] = {"gather_quant_x", "gate_up", "act_quant", "down", "combine"};
    return step >= 0 && step < L_STEPS ? names[step] : "?";
}

static fp4_status loop_run_step(void *plan_, int step, int copy, void *stream, fp4_err *err)
{
    loop_plan *pl = (loop_plan *)plan_;
    fp4_status st = check_copy(pl, copy, err);
    if (st != FP4_OK) return st;
    if (pl->p->step != FP4_MOE_STEP_LAYER || step < 0 || step >= L_STEPS)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe-loop-fp4: no step %d", step);
    return run_step(pl, step, copy, (cudaStream_t)stream, err);
}

extern "C" const fp4_moe_backend_ops fp4_moe_backend_loop_fp4 = {
    FP4_MOE_BACKEND_API_VERSION,                                                      /* api_version */
    "moe-loop-fp4",                                                                   /* name */
    "our dense fp4-sm90 GEMM once per active expert in one graph (W4A4, sm_90)",      /* summary */
    FP4_BACKEND_GPU,         /* flags: exact operands */
    FP4_MATH_BF16_TC,        /* math: 16-bit tensor cores, as fp4-sm90 */
    FP4_MOE_WEIGHTS_NVFP4,   /* wformat */
    1e-2,                    /* tol_max: fp32 accumulation, one bf16 rounding of D */
    5e-3,                    /* tol_norm */
    loop_open,               /* open: exactly sm_90 */
    loop_close,              /* close */
    loop_supports,           /* supports: W4A4 */
    loop_prepare,            /* prepare */
    loop_poison,             /* poison */
    loop_run,                /* run */
    loop_read,               /* read_output */
    loop_release,            /* release */
    loop_variant,            /* variant: the kernels per step */
    loop_set_warnings,       /* set_warnings */
    loop_step_count,         /* step_count */
    loop_step_name,          /* step_name */
    loop_run_step,           /* run_step */
    NULL,                    /* own_reference */
    0.0,                     /* own_tol */
};
