/* The NCCL collectives benchmark on this machine's GPUs (all of them, then
 * GPU 0 alone):
 *   - both collectives at small sizes (one that all-to-all rounds into
 *     equal chunks) verify, and their times, algbw and busbw agree with the
 *     formulas, the slowest rank's time being the row's;
 *   - a wrong value planted in what the first and the last rank received is
 *     caught, named by rank, and the row is not timed;
 *   - the set still works after a caught fault;
 *   - one rank: busbw is 0.
 * Plus the host-side parsing and rounding. Exits 77 (skipped) without a GPU
 * or without NCCL compiled in. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "fp4/multigpu.h"

static void test_host_side(void)
{
    size_t b = 0;
    fp4_coll_op op;
    CHECK(fp4_coll_parse_size("1M", &b) == 0 && b == ((size_t)1 << 20));
    CHECK(fp4_coll_parse_size("256MiB", &b) == 0 && b == ((size_t)256 << 20));
    CHECK(fp4_coll_parse_size("64G", &b) == 0 && b == ((size_t)64 << 30));
    CHECK(fp4_coll_parse_size("4096", &b) == 0 && b == 4096);
    CHECK(fp4_coll_parse_size("65G", &b) != 0);
    CHECK(fp4_coll_parse_size("0", &b) != 0);
    CHECK(fp4_coll_parse_size("-1", &b) != 0);
    CHECK(fp4_coll_parse_size("1Q", &b) != 0);
    CHECK(fp4_coll_op_parse("all_to_all", &op) == 0 && op == FP4_COLL_ALL_TO_ALL);
    CHECK(fp4_coll_op_parse("broadcast", &op) != 0);
    CHECK(fp4_coll_round_bytes(FP4_COLL_ALL_REDUCE, 1001, 8) == 1000);
    CHECK(fp4_coll_round_bytes(FP4_COLL_ALL_TO_ALL, 1001, 8) == 992);
    CHECK(fp4_coll_round_bytes(FP4_COLL_ALL_TO_ALL, 3, 8) == 32);
    CHECK(fp4_coll_bus_factor(FP4_COLL_ALL_REDUCE, 8) == 1.75);
    CHECK(fp4_coll_bus_factor(FP4_COLL_ALL_TO_ALL, 8) == 0.875);
    CHECK(fp4_coll_bus_factor(FP4_COLL_ALL_REDUCE, 1) == 0);
}

/* A verified, timed row: its numbers agree with each other. */
static void check_timed(const fp4_coll_row *row, int nranks, size_t asked)
{
    const char *name = fp4_coll_op_name(row->op);
    double slowest = 0;
    CHECK_MSG(row->verified, "%s %zu B: %s", name, asked, row->why);
    CHECK(row->nranks == nranks);
    CHECK(row->bytes == fp4_coll_round_bytes(row->op, asked, nranks));
    CHECK(row->op != FP4_COLL_ALL_TO_ALL || row->bytes % (4 * (size_t)nranks) == 0);
    CHECK_MSG(isfinite(row->time_us) && row->time_us > 0, "%s: time %g us", name, row->time_us);
    for (int k = 0; k < nranks; k++) {
        CHECK_MSG(isfinite(row->rank_us[k]) && row->rank_us[k] > 0, "%s: rank %d: %g us", name, k, row->rank_us[k]);
        if (row->rank_us[k] > slowest) slowest = row->rank_us[k];
    }
    CHECK(row->time_us == slowest);
    CHECK(row->slowest_rank >= 0 && row->slowest_rank < nranks && row->rank_us[row->slowest_rank] == slowest);
    CHECK(fabs(row->algbw_gbps - row->bytes / (row->time_us * 1e3)) <= 1e-9 * row->algbw_gbps);
    CHECK(fabs(row->busbw_gbps - row->algbw_gbps * fp4_coll_bus_factor(row->op, nranks)) <= 1e-9 * row->algbw_gbps);
    printf("  %-10s %8zu B on %d: %8.2f us, algbw %7.2f GB/s, busbw %7.2f GB/s\n", name, row->bytes, nranks,
           row->time_us, row->algbw_gbps, row->busbw_gbps);
}

/* Every check of one set: clean runs, planted faults, a clean run again. */
static void test_set(const fp4_nccl_config *cfg)
{
    static const size_t sizes[] = {4096, 1000003, (size_t)1 << 20};
    fp4_nccl_comms *c = NULL;
    fp4_coll_settings set;
    fp4_coll_row row;
    fp4_warnings warn;
    fp4_err err;
    int n;
    if (fp4_nccl_comms_create(cfg, &c, &err) != FP4_OK) {
        CHECK_MSG(0, "fp4_nccl_comms_create: %s", fp4_err_text(&err));
        return;
    }
    n = fp4_nccl_comms_size(c);
    CHECK(fp4_nccl_comms_is_root(c));
    CHECK(fp4_nccl_comms_info(c)->nranks == n && fp4_nccl_comms_info(c)->nccl_version > 0);
    printf("%d rank%s, NCCL %d\n", n, n == 1 ? "" : "s", fp4_nccl_comms_info(c)->nccl_version);
    fp4_coll_settings_default(&set);
    set.iters = 3;
    set.reps = 3;
    set.warmup = 1;
    for (int o = 0; o < FP4_COLL_OP_COUNT; o++) {
        fp4_coll_op op = (fp4_coll_op)o;
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            fp4_status st = fp4_coll_run(c, op, sizes[s], &set, &row, &err);
            CHECK_MSG(st == FP4_OK, "%s: %s", fp4_coll_op_name(op), fp4_err_text(&err));
            if (st == FP4_OK) check_timed(&row, n, sizes[s]);
        }
        /* a planted wrong value, on the first rank and on the last */
        for (int f = 0; f < 2; f++) {
            char who[32];
            set.fault_rank = f ? n - 1 : 0;
            fp4_status st = fp4_coll_run(c, op, 65536, &set, &row, &err);
            set.fault_rank = -1;
            CHECK_MSG(st == FP4_OK, "%s with a fault: %s", fp4_coll_op_name(op), fp4_err_text(&err));
            if (st != FP4_OK) continue;
            snprintf(who, sizeof who, "rank %d: 1 of ", f ? n - 1 : 0);
            CHECK_MSG(!row.verified, "%s: the planted value on rank %d was not caught", fp4_coll_op_name(op),
                      f ? n - 1 : 0);
            CHECK_MSG(strstr(row.why, who) != NULL, "%s: '%s' should start with '%s'", fp4_coll_op_name(op), row.why,
                      who);
            CHECK(isnan(row.time_us) && row.slowest_rank == -1);
            printf("  caught: %s\n", row.why);
        }
        /* the set still works */
        fp4_status st = fp4_coll_run(c, op, 65536, &set, &row, &err);
        CHECK_MSG(st == FP4_OK && row.verified, "%s after a fault: %s", fp4_coll_op_name(op),
                  st == FP4_OK ? row.why : fp4_err_text(&err));
        if (n == 1 && st == FP4_OK) CHECK(row.busbw_gbps == 0);
    }
    fp4_warnings_clear(&warn);
    fp4_nccl_comms_destroy(c, &warn);
    CHECK_MSG(warn.count == 0, "cleanup warnings: %s", warn.text);
}

int main(void)
{
    int count = 0;
    fp4_nccl_config cfg;
    fp4_err why;
    test_host_side();
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("gpu_nccl: skipped: no CUDA device\n");
        return 77;
    }
    memset(&cfg, 0, sizeof cfg);
    cfg.launcher = FP4_NCCL_THREADS;
    if (fp4_nccl_probe(&cfg, &why) != FP4_OK) {
        printf("gpu_nccl: skipped: %s\n", fp4_err_text(&why));
        return 77;
    }
    test_set(&cfg); /* every GPU */
    if (count > 1) { /* GPU 0 alone */
        cfg.ndevices = 1;
        cfg.devices[0] = 0;
        test_set(&cfg);
    }
    cfg.ndevices = 1;
    cfg.devices[0] = count; /* not there */
    CHECK(fp4_nccl_probe(&cfg, &why) == FP4_ERR_UNSUPPORTED && strstr(why.msg, "is not here"));
    return check_finish("gpu_nccl");
}
