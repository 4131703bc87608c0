/* fp4bench layer on this machine's GPUs, at one rank and at all of them, on
 * small dims:
 *   - the tensor-parallel MoE layer (W4A4 and W4A16), the expert-parallel one
 *     (W4A4, skewed routing, W4A16) and the attention projections verify
 *     against the exact sharded references and are timed: the total, the
 *     parts, the slowest rank's time;
 *   - a wrong value planted in one rank's partial (TP, attention) or in an
 *     expert output on its way back (EP) is caught: the row FAILED, named,
 *     not timed;
 *   - the set still works after a caught fault;
 *   - shapes a plan refuses are unsupported rows, not failures.
 * Exits 77 (skipped) without a GPU, without NCCL compiled in, or on a GPU
 * that is not Hopper (the fp4-sm90 kernels). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "multigpu/layer.h"

static fp4_layer_spec moe_spec(fp4_layer_kind kind, fp4_moe_mode mode, fp4_moe_route_mode route)
{
    fp4_layer_spec s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    snprintf(s.model, sizeof s.model, "test");
    s.dims.hidden = 512;
    s.dims.inter = 256; /* I / 8 = 32: whole blocks of 16 at up to 8 ranks, 16 at 16 */
    s.dims.experts = 8;
    s.dims.top_k = 2;
    s.dims.act = FP4_MOE_ACT_SILU;
    s.mode = mode;
    s.route.mode = route;
    s.route.seed = 5;
    s.route.zipf_s = 1.2;
    return s;
}

static fp4_layer_spec attn_spec(void)
{
    fp4_layer_spec s;
    memset(&s, 0, sizeof s);
    s.kind = FP4_LAYER_ATTN;
    snprintf(s.model, sizeof s.model, "test");
    s.attn.hidden = 1024;
    s.attn.q_heads = 16;
    s.attn.kv_heads = 8;
    s.attn.head_dim = 64;
    return s;
}

/* A verified, timed row: its numbers agree with each other. */
static void check_ok(const fp4_layer_row *row, const char *what)
{
    double slowest = 0;
    CHECK_MSG(row->state == FP4_LAYER_ROW_OK, "%s at %d ranks, %lld tokens: %s (%s)", what, row->ranks,
              (long long)row->tokens, fp4_layer_state_name(row->state), row->why);
    if (row->state != FP4_LAYER_ROW_OK) return;
    CHECK_MSG(row->err_max <= row->tol_max && row->err_norm <= row->tol_norm, "%s: err %g/%g", what, row->err_max,
              row->err_norm);
    CHECK_MSG(isfinite(row->total_us) && row->total_us > 0, "%s: total %g us", what, row->total_us);
    CHECK_MSG(isfinite(row->compute_us) && row->compute_us > 0, "%s: compute %g us", what, row->compute_us);
    if (row->kind == FP4_LAYER_EP) {
        CHECK(isfinite(row->dispatch_us) && row->dispatch_us > 0);
        CHECK(isfinite(row->combine_us) && row->combine_us > 0);
        CHECK(row->dispatch_bytes > 0 && row->combine_bytes > 0);
        CHECK(row->ranks > 1 || row->dispatch_wire_bytes == 0);
    } else {
        CHECK(isfinite(row->allreduce_us) && row->allreduce_us > 0);
        CHECK(row->ranks > 1 || row->allreduce_busbw_gbps == 0);
    }
    for (int k = 0; k < row->ranks; k++) {
        CHECK_MSG(isfinite(row->rank_total_us[k]) && row->rank_total_us[k] > 0, "%s: rank %d", what, k);
        if (row->rank_total_us[k] > slowest) slowest = row->rank_total_us[k];
    }
    CHECK(row->total_us == slowest);
    CHECK(row->slowest_rank >= 0 && row->slowest_rank < row->ranks);
    printf("  %-22s %d rank%s %4lld tokens: total %8.2f us, compute %8.2f, comm %8.2f / %8.2f; err %.3g/%.3g (%s)\n",
           what, row->ranks, row->ranks == 1 ? " " : "s", (long long)row->tokens, row->total_us, row->compute_us,
           row->kind == FP4_LAYER_EP ? row->dispatch_us : row->allreduce_us,
           row->kind == FP4_LAYER_EP ? row->combine_us : NAN, row->err_max, row->err_norm, row->check);
}

/* One spec at one degree: verified runs, a caught fault on the first and the
 * last rank, and a verified run again afterwards. */
static void run_spec(fp4_nccl_comms *c, const fp4_layer_spec *spec, const char *what, int fault)
{
    fp4_layer_inputs *in = NULL;
    fp4_layer_settings s;
    fp4_layer_row row;
    fp4_err err;
    const int n = fp4_nccl_comms_size(c);
    const int64_t tokens[] = {3, 64};
    fp4_layer_settings_default(&s);
    s.iters = 3;
    s.reps = 3;
    s.warmup = 1;
    s.seed = 9;
    CHECK_MSG(fp4_layer_inputs_make(spec, s.seed, &in, &err) == FP4_OK, "%s: %s", what, fp4_err_text(&err));
    if (!in) return;
    for (size_t t = 0; t < sizeof tokens / sizeof tokens[0]; t++) {
        CHECK_MSG(fp4_layer_run(c, in, tokens[t], &s, &row, &err) == FP4_OK, "%s: %s", what, fp4_err_text(&err));
        check_ok(&row, what);
    }
    for (int f = 0; fault && f < 2; f++) {
        s.fault_rank = f == 0 ? 0 : n - 1;
        CHECK_MSG(fp4_layer_run(c, in, 64, &s, &row, &err) == FP4_OK, "%s fault: %s", what, fp4_err_text(&err));
        CHECK_MSG(row.state == FP4_LAYER_ROW_FAILED, "%s: a wrong value on rank %d was not caught", what, s.fault_rank);
        CHECK(strstr(row.why, "rank") != NULL && !isfinite(row.total_us));
        printf("  %-22s fault on rank %d caught: %s\n", what, s.fault_rank, row.why);
    }
    s.fault_rank = -1;
    CHECK_MSG(fp4_layer_run(c, in, 16, &s, &row, &err) == FP4_OK, "%s after: %s", what, fp4_err_text(&err));
    check_ok(&row, what);
    fp4_layer_inputs_free(in);
}

static void run_degree(const fp4_nccl_config *all, int n)
{
    fp4_nccl_config sub;
    fp4_nccl_comms *c = NULL;
    fp4_layer_spec spec;
    fp4_layer_row row;
    fp4_layer_inputs *in = NULL;
    fp4_layer_settings s;
    fp4_warnings warn;
    fp4_err err;
    printf("%d rank%s:\n", n, n == 1 ? "" : "s");
    CHECK_MSG(fp4_layer_probe(all, n, &sub, &err) == FP4_OK, "%s", fp4_err_text(&err));
    CHECK_MSG(fp4_nccl_comms_create(&sub, &c, &err) == FP4_OK, "%s", fp4_err_text(&err));
    if (!c) return;
    spec = moe_spec(FP4_LAYER_TP, FP4_MOE_W4A4, FP4_MOE_ROUTE_RANDOM);
    run_spec(c, &spec, "tp w4a4", 1);
    spec = moe_spec(FP4_LAYER_TP, FP4_MOE_W4A16, FP4_MOE_ROUTE_BALANCED);
    run_spec(c, &spec, "tp w4a16", 0);
    spec = moe_spec(FP4_LAYER_EP, FP4_MOE_W4A4, FP4_MOE_ROUTE_SKEWED);
    run_spec(c, &spec, "ep w4a4 skewed", 1);
    spec = moe_spec(FP4_LAYER_EP, FP4_MOE_W4A16, FP4_MOE_ROUTE_RANDOM);
    run_spec(c, &spec, "ep w4a16", 0);
    spec = attn_spec();
    run_spec(c, &spec, "attention", 1);

    /* a shape the TP plan refuses (I / n not whole blocks of 16): unsupported, not FAILED */
    if (n > 1) {
        spec = moe_spec(FP4_LAYER_TP, FP4_MOE_W4A4, FP4_MOE_ROUTE_RANDOM);
        spec.dims.inter = 16 * n + 16;
        fp4_layer_settings_default(&s);
        s.iters = s.reps = 2;
        if (fp4_layer_inputs_make(&spec, 1, &in, &err) == FP4_OK) {
            CHECK(fp4_layer_run(c, in, 8, &s, &row, &err) == FP4_OK);
            CHECK_MSG(row.state == FP4_LAYER_ROW_UNSUPPORTED && row.why[0], "I = %lld over %d ranks: %s",
                      (long long)spec.dims.inter, n, fp4_layer_state_name(row.state));
            fp4_layer_inputs_free(in);
            in = NULL;
        }
    }
    fp4_warnings_clear(&warn);
    fp4_nccl_comms_destroy(c, &warn);
}

int main(void)
{
    fp4_nccl_config all;
    fp4_nccl_config sub;
    fp4_err why;
    int count = 0, major = 0;
    memset(&all, 0, sizeof all);
    all.launcher = FP4_NCCL_THREADS;
    if (fp4_layer_probe(&all, 1, &sub, &why) != FP4_OK) {
        printf("skipped: %s\n", fp4_err_text(&why));
        return 77;
    }
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1 ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess || major != 9) {
        printf("skipped: needs Hopper GPUs (sm_90)\n");
        return 77;
    }
    if (count > FP4_NCCL_MAX_RANKS) count = FP4_NCCL_MAX_RANKS;
    /* more ranks than GPUs: unsupported with both numbers */
    CHECK(fp4_layer_probe(&all, count + 1, &sub, &why) == FP4_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(fp4_err_text(&why), "needs") && strstr(fp4_err_text(&why), "GPUs, found"), "%s",
              fp4_err_text(&why));
    run_degree(&all, 1);
    if (count > 1) run_degree(&all, count);
    printf("%ld checks, %d failed\n", check_count, check_failures);
    return check_failures || !check_count ? 1 : 0;
}
