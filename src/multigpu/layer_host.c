/* fp4bench layer, CPU side (multigpu/layer.h, multigpu/layer_host.h): the
 * inputs, the plans' rules, the checked rows and their exact sharded
 * reference, and, in a build without NCCL, the answers "unsupported". */
#include "multigpu/layer_host.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/inputs.h"
#include "bench/moe_inputs.h"
#include "fp4/engine.h"
#include "fp4/moe_engine.h"
#include "fp4/reference.h"

/* Seeds of the generated activations (roles). */
#define ROLE_X 11
#define ROLE_ATTN_OUT 12
#define ROLE_QKV 13
#define ROLE_O 14
#define ROLE_SAMPLE 15
/* Attention: every row is checked up to this many multiply-adds of the reference. */
#define ATTN_FULL_REF_MACS 2e9
#define ATTN_SAMPLE_ROWS 64

/* End-to-end tolerances of the MoE layer: the MoE engine's (src/bench/moe_engine.c,
 * docs/MOE.md "Matching a GPU pipeline"), which leave about 2x over what a pipeline
 * with bf16 y, h and d measured. The bf16 partials and the bf16 sum of the
 * all-reduce add a few 2^-9 relative roundings, well inside them. */
#define LAYER_W4A4_TOL_MAX 0.1
#define LAYER_W4A4_TOL_NORM 0.06
#define LAYER_W4A16_TOL_MAX 2e-2
#define LAYER_W4A16_TOL_NORM 1e-2
/* Attention: one fp4-sm90 GEMM is held to its backend's 1e-2 / 5e-3 (fp32
 * accumulation, one bf16 rounding of D); after the O projection's all-reduce
 * (bf16 partials, a bf16 sum) twice that. */
#define ATTN_QKV_TOL_MAX 1e-2
#define ATTN_QKV_TOL_NORM 5e-3
#define ATTN_OUT_TOL_MAX 2e-2
#define ATTN_OUT_TOL_NORM 1e-2

const char *fp4_layer_kind_name(fp4_layer_kind k)
{
    switch (k) {
    case FP4_LAYER_TP: return "tp";
    case FP4_LAYER_EP: return "ep";
    case FP4_LAYER_ATTN: return "attention";
    }
    return "unknown";
}

const char *fp4_layer_state_name(fp4_layer_state s)
{
    switch (s) {
    case FP4_LAYER_ROW_OK: return "ok";
    case FP4_LAYER_ROW_FAILED: return "FAILED";
    case FP4_LAYER_ROW_UNSUPPORTED: return "unsupported";
    }
    return "unknown";
}

void fp4_layer_settings_default(fp4_layer_settings *s)
{
    memset(s, 0, sizeof *s);
    s->iters = 10;
    s->warmup = 3;
    s->reps = 10;
    s->seed = 1;
    s->fault_rank = -1;
}

void fp4_layer_row_init(fp4_layer_row *row, const fp4_layer_spec *spec, int ranks, int64_t tokens)
{
    memset(row, 0, sizeof *row);
    row->kind = spec->kind;
    row->mode = spec->mode;
    row->ranks = ranks;
    row->tokens = tokens;
    row->state = FP4_LAYER_ROW_OK;
    row->err_max = row->err_norm = row->tol_max = row->tol_norm = NAN;
    row->total_us = row->compute_us = row->allreduce_us = row->dispatch_us = row->combine_us = NAN;
    row->tflops = row->flops = NAN;
    row->allreduce_bytes = row->allreduce_busbw_gbps = NAN;
    row->dispatch_bytes = row->dispatch_wire_bytes = row->dispatch_busbw_gbps = NAN;
    row->combine_bytes = row->combine_wire_bytes = row->combine_busbw_gbps = NAN;
    row->recv_imbalance = NAN;
    row->slowest_rank = -1;
    for (int i = 0; i < FP4_NCCL_MAX_RANKS; i++) row->rank_total_us[i] = NAN;
}

fp4_status fp4_layer_check(const fp4_layer_spec *spec, int ranks, int64_t tokens, fp4_err *why)
{
    fp4_status st;
    if (!spec) return fp4_fail(why, FP4_ERR_INVALID_ARG, "no layer");
    if (ranks < 1 || ranks > FP4_NCCL_MAX_RANKS)
        return fp4_fail(why, FP4_ERR_INVALID_ARG, "%d ranks: 1 to %d", ranks, FP4_NCCL_MAX_RANKS);
    if (tokens < 1 || tokens > (1 << 24))
        return fp4_fail(why, FP4_ERR_SHAPE, "%lld tokens: 1 to %d", (long long)tokens, 1 << 24);
    if (spec->kind == FP4_LAYER_ATTN) {
        fp4_tp_attn_plan p;
        return fp4_tp_attn_plan_build(&spec->attn, tokens, ranks, FP4_PAR_BF16, &p, why);
    }
    if ((st = fp4_moe_dims_check(&spec->dims, why)) != FP4_OK) return st;
    if (tokens * spec->dims.top_k > INT32_MAX)
        return fp4_fail(why, FP4_ERR_SHAPE, "%lld tokens x top-%d pairs: more than 2^31", (long long)tokens,
                        spec->dims.top_k);
    if (spec->kind == FP4_LAYER_TP) {
        fp4_tp_mlp_plan p;
        return fp4_tp_mlp_plan_build(tokens, spec->dims.hidden, spec->dims.inter, ranks, FP4_PAR_BF16, &p, why);
    }
    return FP4_OK; /* EP: any E over any ranks (a rank may own no expert) */
}

/* ---- inputs ------------------------------------------------------------------------------- */

fp4_status fp4_layer_inputs_make(const fp4_layer_spec *spec, uint64_t seed, fp4_layer_inputs **out,
                                 fp4_err *err)
{
    fp4_layer_inputs *in = calloc(1, sizeof *in);
    fp4_status st = FP4_OK;
    *out = NULL;
    if (!in) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for the layer's inputs");
    in->spec = *spec;
    in->seed = seed;
    if (spec->kind == FP4_LAYER_ATTN) {
        const fp4_attn_dims *a = &spec->attn;
        const int64_t qkv_rows = (int64_t)(a->q_heads + 2 * a->kv_heads) * a->head_dim;
        const int64_t q_cols = (int64_t)a->q_heads * a->head_dim;
        st = fp4_make_operand(FP4_DATA_GAUSSIAN, qkv_rows, a->hidden, seed * 31 + ROLE_QKV, &in->qkv, err);
        if (st == FP4_OK) st = fp4_make_operand(FP4_DATA_GAUSSIAN, a->hidden, q_cols, seed * 31 + ROLE_O, &in->o, err);
    } else {
        st = fp4_moe_make_weights(&spec->dims, FP4_DATA_GAUSSIAN, seed, &in->w, err);
    }
    if (st != FP4_OK) {
        fp4_layer_inputs_free(in);
        return st;
    }
    *out = in;
    return FP4_OK;
}

void fp4_layer_inputs_free(fp4_layer_inputs *in)
{
    if (!in) return;
    fp4_moe_weights_free(&in->w);
    fp4_matrix_free(&in->qkv);
    fp4_matrix_free(&in->o);
    free(in);
}

const fp4_layer_spec *fp4_layer_inputs_spec(const fp4_layer_inputs *in)
{
    return in ? &in->spec : NULL;
}

/* ---- the checked rows ---------------------------------------------------------------------- */

/* MoE: every token when the reference is cheap enough; else the first, the
 * last, the first token of every rank (EP: each rank's own rows, and the one
 * the planted fault changes), then one token of each expert in a seeded order
 * until about FP4_MOE_SAMPLE_PAIRS pairs (the MoE engine's rule). */
static fp4_status choose_moe_rows(layer_case *lc, fp4_err *err)
{
    const fp4_moe_dims *d = &lc->in->spec.dims;
    const int64_t T = lc->tokens;
    const int k = d->top_k, E = d->experts;
    const double macs = (double)T * k * 3.0 * (double)d->inter * (double)d->hidden;
    unsigned char *chosen = calloc((size_t)T, 1);
    int32_t *order = malloc((size_t)E * sizeof *order);
    int64_t have = 0;
    int sampled = macs > FP4_MOE_FULL_REF_MACS;
    fp4_status st = FP4_OK;
    if (!chosen || !order) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "no memory to choose the checked tokens");
        goto out;
    }
    if (!sampled) {
        memset(chosen, 1, (size_t)T);
    } else {
        const int64_t want = (FP4_MOE_SAMPLE_PAIRS + k - 1) / k;
        fp4_rng rng;
        chosen[0] = chosen[T - 1] = 1;
        for (int r = 0; r < lc->ranks; r++) {
            int64_t first, len;
            fp4_par_split(T, lc->ranks, r, &first, &len);
            if (len > 0) chosen[first] = 1;
        }
        for (int64_t t = 0; t < T; t++) have += chosen[t];
        fp4_rng_seed(&rng, lc->in->seed * 31 + ROLE_SAMPLE + (uint64_t)T);
        for (int e = 0; e < E; e++) order[e] = e;
        for (int e = E - 1; e > 0; e--) { /* Fisher-Yates */
            const int j = (int)(fp4_rng_next(&rng) % (uint64_t)(e + 1));
            const int32_t x = order[e];
            order[e] = order[j];
            order[j] = x;
        }
        for (int i = 0; i < E && have < want; i++) {
            const int32_t off = lc->plan.expert_offsets[order[i]], cnt = lc->plan.expert_counts[order[i]];
            if (cnt == 0) continue;
            const int64_t t = lc->plan.pair_index[off + (int32_t)(fp4_rng_next(&rng) % (uint64_t)cnt)] / k;
            if (!chosen[t]) {
                chosen[t] = 1;
                have++;
            }
        }
    }
    lc->nrows = 0;
    for (int64_t t = 0; t < T; t++) lc->nrows += chosen[t];
    if (!(lc->rows = malloc((size_t)lc->nrows * sizeof *lc->rows))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "no memory for the checked tokens");
        goto out;
    }
    lc->nrows = 0;
    for (int64_t t = 0; t < T; t++)
        if (chosen[t]) lc->rows[lc->nrows++] = t;
    if (sampled)
        snprintf(lc->desc, sizeof lc->desc, "sample: %lld of %lld tokens, %lld pairs", (long long)lc->nrows,
                 (long long)T, (long long)lc->nrows * k);
    else
        snprintf(lc->desc, sizeof lc->desc, "all %lld token%s", (long long)T, T == 1 ? "" : "s");
out:
    free(chosen);
    free(order);
    return st;
}

/* Attention: every row, or the first, the last and evenly spaced ones. */
static fp4_status choose_attn_rows(layer_case *lc, double macs_per_row, fp4_err *err)
{
    const int64_t T = lc->tokens;
    const int all = macs_per_row * (double)T <= ATTN_FULL_REF_MACS || T <= ATTN_SAMPLE_ROWS;
    lc->nrows = all ? T : ATTN_SAMPLE_ROWS;
    if (!(lc->rows = malloc((size_t)lc->nrows * sizeof *lc->rows)))
        return fp4_fail(err, FP4_ERR_NOMEM, "no memory for the checked rows");
    for (int64_t i = 0; i < lc->nrows; i++)
        lc->rows[i] = all ? i : i * (T - 1) / (lc->nrows - 1); /* 0 .. T-1, strictly rising */
    if (all) snprintf(lc->desc, sizeof lc->desc, "all %lld row%s", (long long)T, T == 1 ? "" : "s");
    else snprintf(lc->desc, sizeof lc->desc, "sample: %lld of %lld rows", (long long)lc->nrows, (long long)T);
    return FP4_OK;
}

/* ---- the exact references ---------------------------------------------------------------- */

/* The checked tokens' routing (their ids and weights in order). */
static fp4_status sub_routing(const layer_case *lc, fp4_moe_routing *sub, fp4_err *err)
{
    const int k = lc->routing.top_k;
    memset(sub, 0, sizeof *sub);
    sub->tokens = lc->nrows;
    sub->experts = lc->routing.experts;
    sub->top_k = k;
    sub->expert_ids = malloc((size_t)(lc->nrows * k) * sizeof *sub->expert_ids);
    sub->weights = malloc((size_t)(lc->nrows * k) * sizeof *sub->weights);
    if (!sub->expert_ids || !sub->weights) {
        fp4_moe_routing_free(sub);
        return fp4_fail(err, FP4_ERR_NOMEM, "no memory for the checked tokens' routing");
    }
    for (int64_t i = 0; i < lc->nrows; i++) {
        memcpy(sub->expert_ids + i * k, lc->routing.expert_ids + lc->rows[i] * k, (size_t)k * sizeof(int32_t));
        memcpy(sub->weights + i * k, lc->routing.weights + lc->rows[i] * k, (size_t)k * sizeof(float));
    }
    return FP4_OK;
}

/* The MoE layer on the checked tokens by the sharded reference of the kind
 * (each output row depends on its own token alone, so these are the rows of
 * the whole problem). W4A4's h scale: dynamic over these tokens, then given
 * to the GPUs as a static one (as the MoE engine does). */
static fp4_status moe_reference(layer_case *lc, fp4_err *err)
{
    const fp4_layer_spec *sp = &lc->in->spec;
    const int64_t H = sp->dims.hidden, S = lc->nrows;
    fp4_moe_routing sub;
    fp4_ep_plan sub_plan;
    uint16_t *sub_x = NULL;
    fp4_moe_layer_opts lo;
    fp4_moe_layer_out io;
    fp4_status st;
    memset(&sub_plan, 0, sizeof sub_plan);
    if ((st = sub_routing(lc, &sub, err)) != FP4_OK) return st;
    sub_x = malloc((size_t)S * (size_t)H * sizeof *sub_x);
    lc->ref = malloc((size_t)S * (size_t)H * sizeof *lc->ref);
    if (!sub_x || !lc->ref) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "no memory for the reference of %lld tokens", (long long)S);
        goto out;
    }
    for (int64_t i = 0; i < S; i++)
        memcpy(sub_x + i * H, lc->x + lc->rows[i] * H, (size_t)H * sizeof *sub_x);
    memset(&lo, 0, sizeof lo);
    memset(&io, 0, sizeof io);
    lo.mode = sp->mode;
    lo.x_encode_scale = lc->x_scale;
    lo.h_encode_scale = 0.0f;
    io.out = lc->ref;
    if (sp->kind == FP4_LAYER_TP) {
        st = fp4_tp_layer_ref(&sp->dims, &lc->in->w, lc->ranks, sub_x, &sub, &lo, &io, err);
    } else {
        if ((st = fp4_ep_plan_build(&sub, lc->ranks, &sub_plan, err)) != FP4_OK) goto out;
        st = fp4_ep_layer_ref(&sub_plan, &sp->dims, &lc->in->w, sub_x, &sub, &lo, &io, err);
    }
    if (st == FP4_OK) lc->h_scale = sp->mode == FP4_MOE_W4A4 ? io.h_encode_scale_used : 0.0f;
out:
    fp4_moe_routing_free(&sub);
    fp4_ep_plan_free(&sub_plan);
    free(sub_x);
    return st;
}

/* Rows `rows` of an NVFP4 matrix into a new one. */
static fp4_status pick_rows(const fp4_matrix *m, const int64_t *rows, int64_t n, fp4_matrix *out, fp4_err *err)
{
    const size_t cb = (size_t)m->cols / 2, sb = (size_t)m->cols / FP4_BLOCK;
    fp4_status st = fp4_matrix_alloc(out, n, m->cols, err);
    if (st != FP4_OK) return st;
    for (int64_t i = 0; i < n; i++) {
        memcpy(out->codes + (size_t)i * cb, m->codes + (size_t)rows[i] * cb, cb);
        memcpy(out->scales + (size_t)i * sb, m->scales + (size_t)rows[i] * sb, sb);
    }
    out->global_scale = m->global_scale;
    return FP4_OK;
}

fp4_status layer_qkv_slice(const layer_case *lc, int rank, fp4_matrix *out, fp4_err *err)
{
    const fp4_matrix *w = &lc->in->qkv;
    const int64_t hd = lc->attn.dims.head_dim;
    const int64_t nq = lc->attn.q_heads_rank * hd, nkv = lc->attn.kv_heads_rank * hd;
    const size_t cb = (size_t)w->cols / 2, sb = (size_t)w->cols / FP4_BLOCK;
    fp4_tp_attn_slices s;
    fp4_status st = fp4_tp_attn_rank_slices(&lc->attn, rank, &s, err);
    if (st != FP4_OK) return st;
    if ((st = fp4_matrix_alloc(out, nq + 2 * nkv, w->cols, err)) != FP4_OK) return st;
    const int64_t from[3] = {s.q_row, s.k_row, s.v_row}, count[3] = {nq, nkv, nkv};
    int64_t at = 0;
    for (int b = 0; b < 3; b++) {
        memcpy(out->codes + (size_t)at * cb, w->codes + (size_t)from[b] * cb, (size_t)count[b] * cb);
        memcpy(out->scales + (size_t)at * sb, w->scales + (size_t)from[b] * sb, (size_t)count[b] * sb);
        at += count[b];
    }
    out->global_scale = w->global_scale;
    return FP4_OK;
}

/* Attention: each rank's QKV rows and the all-reduced O output on the checked
 * rows, by fp4_gemm_reference (exact dot products, one rounding). */
static fp4_status attn_reference(layer_case *lc, fp4_err *err)
{
    const int64_t S = lc->nrows, H = lc->attn.dims.hidden;
    fp4_matrix sub_x = {0}, sub_a = {0}, slice = {0};
    fp4_status st;
    if ((st = pick_rows(&lc->xq, lc->rows, S, &sub_x, err)) != FP4_OK) goto out;
    if ((st = pick_rows(&lc->attn_out, lc->rows, S, &sub_a, err)) != FP4_OK) goto out;
    lc->ref = malloc((size_t)S * (size_t)H * sizeof *lc->ref);
    lc->ref_qkv = calloc((size_t)lc->ranks, sizeof *lc->ref_qkv);
    if (!lc->ref || !lc->ref_qkv) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "no memory for the attention reference");
        goto out;
    }
    st = fp4_gemm_reference(&sub_a, &lc->in->o, sub_a.global_scale * lc->in->o.global_scale, lc->ref, 0, err);
    for (int r = 0; r < lc->ranks && st == FP4_OK; r++) {
        if ((st = layer_qkv_slice(lc, r, &slice, err)) != FP4_OK) break;
        lc->ref_qkv[r] = malloc((size_t)S * (size_t)slice.rows * sizeof(float));
        if (!lc->ref_qkv[r]) st = fp4_fail(err, FP4_ERR_NOMEM, "no memory for the QKV reference");
        else st = fp4_gemm_reference(&sub_x, &slice, sub_x.global_scale * slice.global_scale, lc->ref_qkv[r], 0, err);
        fp4_matrix_free(&slice);
    }
out:
    fp4_matrix_free(&sub_x);
    fp4_matrix_free(&sub_a);
    fp4_matrix_free(&slice);
    return st;
}

fp4_status layer_case_make(const fp4_layer_inputs *in, int ranks, int64_t tokens, layer_case *lc, fp4_err *err)
{
    const fp4_layer_spec *sp = &in->spec;
    const int64_t H = sp->kind == FP4_LAYER_ATTN ? sp->attn.hidden : sp->dims.hidden;
    float amax = 0.0f;
    fp4_status st;
    memset(lc, 0, sizeof *lc);
    lc->in = in;
    lc->ranks = ranks;
    lc->tokens = tokens;
    if ((st = fp4_layer_check(sp, ranks, tokens, err)) != FP4_OK) goto fail;
    /* x: row t from (seed, t) alone, so a longer run's first rows are a shorter one's */
    if ((st = fp4_moe_make_rows(tokens, H, in->seed, ROLE_X, &lc->x, err)) != FP4_OK) goto fail;
    for (size_t i = 0; i < (size_t)tokens * (size_t)H; i++) amax = fmaxf(amax, fabsf(fp4_bf16_to_float(lc->x[i])));
    lc->x_scale = fp4_global_encode_scale(amax);

    if (sp->kind == FP4_LAYER_ATTN) {
        const fp4_attn_dims *a = &sp->attn;
        if ((st = fp4_tp_attn_plan_build(a, tokens, ranks, FP4_PAR_BF16, &lc->attn, err)) != FP4_OK) goto fail;
        if ((st = fp4_quantize_bf16(lc->x, tokens, H, lc->x_scale, &lc->xq, err)) != FP4_OK) goto fail;
        if ((st = fp4_make_operand(FP4_DATA_GAUSSIAN, tokens, (int64_t)a->q_heads * a->head_dim,
                                   in->seed * 31 + ROLE_ATTN_OUT, &lc->attn_out, err)) != FP4_OK)
            goto fail;
        const double macs = (double)H * (double)((a->q_heads + 2 * a->kv_heads) * a->head_dim) +
                            (double)H * (double)(a->q_heads * a->head_dim);
        if ((st = choose_attn_rows(lc, macs, err)) != FP4_OK) goto fail;
        if ((st = attn_reference(lc, err)) != FP4_OK) goto fail;
        lc->tol_max = ATTN_OUT_TOL_MAX;
        lc->tol_norm = ATTN_OUT_TOL_NORM;
        lc->qkv_tol_max = ATTN_QKV_TOL_MAX;
        lc->qkv_tol_norm = ATTN_QKV_TOL_NORM;
        return FP4_OK;
    }
    fp4_moe_route_opts ro = sp->route;
    if ((st = fp4_moe_route(&ro, tokens, sp->dims.experts, sp->dims.top_k, &lc->routing, err)) != FP4_OK) goto fail;
    if ((st = fp4_moe_plan_build(&lc->routing, &lc->plan, err)) != FP4_OK) goto fail;
    if (sp->kind == FP4_LAYER_TP &&
        (st = fp4_tp_mlp_plan_build(tokens, H, sp->dims.inter, ranks, FP4_PAR_BF16, &lc->tp, err)) != FP4_OK)
        goto fail;
    if (sp->kind == FP4_LAYER_EP && (st = fp4_ep_plan_build(&lc->routing, ranks, &lc->ep, err)) != FP4_OK) goto fail;
    if ((st = choose_moe_rows(lc, err)) != FP4_OK) goto fail;
    if ((st = moe_reference(lc, err)) != FP4_OK) goto fail;
    lc->tol_max = sp->mode == FP4_MOE_W4A4 ? LAYER_W4A4_TOL_MAX : LAYER_W4A16_TOL_MAX;
    lc->tol_norm = sp->mode == FP4_MOE_W4A4 ? LAYER_W4A4_TOL_NORM : LAYER_W4A16_TOL_NORM;
    return FP4_OK;
fail:
    layer_case_free(lc);
    return st;
}

void layer_case_free(layer_case *lc)
{
    if (!lc) return;
    free(lc->x);
    fp4_moe_routing_free(&lc->routing);
    fp4_moe_plan_free(&lc->plan);
    fp4_ep_plan_free(&lc->ep);
    fp4_matrix_free(&lc->xq);
    fp4_matrix_free(&lc->attn_out);
    free(lc->rows);
    free(lc->ref);
    if (lc->ref_qkv)
        for (int r = 0; r < lc->ranks; r++) free(lc->ref_qkv[r]);
    free(lc->ref_qkv);
    memset(lc, 0, sizeof *lc);
}

int layer_compare(const float *got, const float *ref, size_t n, double tol_max, double tol_norm, double *err_max,
                  double *err_norm, char *why, size_t len)
{
    fp4_verdict v;
    fp4_compare_outputs(got, ref, n, tol_max, tol_norm, &v);
    *err_max = v.err_max;
    *err_norm = v.err_norm;
    if (why && len) snprintf(why, len, "%s", v.why);
    return v.pass;
}

void layer_devices_text(const fp4_nccl_config *cfg, char *buf, size_t len)
{
    size_t at = 0;
    if (!len) return;
    buf[0] = '\0';
    for (int i = 0; i < cfg->ndevices && at < len; i++) {
        int n = snprintf(buf + at, len - at, "%s%d", i ? "," : "", cfg->devices[i]);
        if (n < 0) break;
        at += (size_t)n;
    }
}

#ifndef FP4_HAVE_NCCL
/* Built without NCCL (or CUDA): nothing runs; the reason is the communicator set's. */
fp4_status fp4_layer_probe(const fp4_nccl_config *cfg, int ranks, fp4_nccl_config *sub, fp4_err *why)
{
    (void)ranks;
    (void)sub;
    return fp4_nccl_probe(cfg, why);
}

fp4_status fp4_layer_run(fp4_nccl_comms *c, const fp4_layer_inputs *in, int64_t tokens,
                         const fp4_layer_settings *s, fp4_layer_row *row, fp4_err *err)
{
    fp4_nccl_config cfg;
    memset(&cfg, 0, sizeof cfg);
    return fp4_nccl_probe(&cfg, err);
}
#endif
