/* fp4bench: several GPUs talking through NCCL, and the collectives benchmark
 * of `fp4bench nccl` (docs/PARALLEL.md).
 *
 * A communicator set (fp4_nccl_comms) is N NCCL ranks, one per GPU: with the
 * threads launcher one process drives every local GPU, one thread per GPU;
 * with the MPI launcher each process (mpirun -np N) is one rank on the GPU of
 * its local rank. Every NCCL and CUDA failure becomes an fp4_err naming the
 * call and the rank. NVLink multicast (NVLS) is always off: the set forces
 * NCCL_NVLS_ENABLE=0 before the first NCCL call.
 *
 * The benchmark (fp4_coll_run) verifies a collective at one size on every
 * rank, element by element, and only then times it: captured in a CUDA graph
 * per rank, replayed between events, each rank's median over repetitions;
 * the slowest rank's median is the collective's time.
 *
 * Without NCCL (or CUDA) compiled in, fp4_nccl_probe and
 * fp4_nccl_comms_create answer FP4_ERR_UNSUPPORTED with the reason. */
#ifndef FP4_MULTIGPU_H
#define FP4_MULTIGPU_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* At most this many ranks (all-to-all ids carry the rank in 7 bits). */
#define FP4_NCCL_MAX_RANKS 128

typedef enum fp4_nccl_launcher {
    FP4_NCCL_THREADS = 0, /* one process, one thread per local GPU */
    FP4_NCCL_MPI = 1      /* one process per GPU under mpirun; needs FP4_HAVE_MPI */
} fp4_nccl_launcher;

/* "threads" / "mpi". */
const char *fp4_nccl_launcher_name(fp4_nccl_launcher l);

typedef struct fp4_nccl_config {
    fp4_nccl_launcher launcher;
    /* threads: the CUDA devices, one rank each, rank i on devices[i];
     * ndevices 0 = every visible GPU. MPI: ignored (the local rank's GPU). */
    int ndevices;
    int devices[FP4_NCCL_MAX_RANKS];
} fp4_nccl_config;

/* One rank's GPU. */
typedef struct fp4_nccl_gpu {
    int rank;
    int device;          /* CUDA device ordinal in its process */
    char name[256];      /* "NVIDIA H200" (CUDA's cudaDeviceProp.name) */
    char pci_bus_id[32]; /* "0000:19:00.0" */
    int cc_major, cc_minor;
    char host[64];       /* the host of its process */
} fp4_nccl_gpu;

/* What a set runs on, for the report. */
typedef struct fp4_nccl_info {
    int nccl_version;    /* ncclGetVersion's code: 22809 = 2.28.9 */
    int driver_version;  /* CUDA's encoding: 13000 = 13.0 */
    int runtime_version;
    fp4_nccl_launcher launcher;
    int nranks;
    fp4_nccl_gpu gpus[FP4_NCCL_MAX_RANKS]; /* every rank's, in rank order */
} fp4_nccl_info;

typedef struct fp4_nccl_comms fp4_nccl_comms;

/* NCCL's version code (22809 = 2.28.9), 0 when built without NCCL. */
int fp4_nccl_version(void);

/* Can cfg run here? FP4_OK, or FP4_ERR_UNSUPPORTED with why: built without
 * CUDA, NCCL or MPI, no GPU, a listed GPU that is not there. Touches no NCCL
 * state. A malformed cfg (ndevices out of range, a device listed twice) is
 * FP4_ERR_INVALID_ARG. */
fp4_status fp4_nccl_probe(const fp4_nccl_config *cfg, fp4_err *why);

/* Create the set: every rank's stream and communicator. On failure nothing
 * is left behind (*out NULL). Under MPI this calls MPI_Init unless MPI is
 * already initialized (and the set then calls MPI_Finalize when destroyed). */
fp4_status fp4_nccl_comms_create(const fp4_nccl_config *cfg, fp4_nccl_comms **out, fp4_err *err);
/* Destroy the set (NULL: nothing); failed cleanup calls become warnings. */
void fp4_nccl_comms_destroy(fp4_nccl_comms *c, fp4_warnings *warn);
/* Ranks in the set (the world, under MPI). */
int fp4_nccl_comms_size(const fp4_nccl_comms *c);
/* 1 when rank 0 lives in this process: the process that prints and writes. */
int fp4_nccl_comms_is_root(const fp4_nccl_comms *c);
/* Versions and every rank's GPU (gathered from all processes under MPI). */
const fp4_nccl_info *fp4_nccl_comms_info(const fp4_nccl_comms *c);

/* ---- the collectives benchmark ------------------------------------------------- */

typedef enum fp4_coll_op {
    FP4_COLL_ALL_REDUCE = 0, /* bf16, sum, out of place */
    FP4_COLL_ALL_TO_ALL = 1, /* uint32 words, equal chunks, grouped ncclSend/ncclRecv */
    FP4_COLL_OP_COUNT
} fp4_coll_op;

/* "all_reduce" / "all_to_all". */
const char *fp4_coll_op_name(fp4_coll_op op);
/* Name -> op; 0 on success, -1 for an unknown name. */
int fp4_coll_op_parse(const char *name, fp4_coll_op *op);

/* A byte count with an optional binary suffix: "4096", "64K", "1M", "2G"
 * (K/M/G = 2^10/2^20/2^30, also written KiB/MiB/GiB); 1 byte .. 64 GiB.
 * 0 on success, -1 on anything else. */
int fp4_coll_parse_size(const char *text, size_t *bytes);

/* The per-rank buffer op really moves for a requested size on nranks ranks:
 * all-reduce a whole number of bf16 elements, all-to-all nranks equal chunks
 * of whole uint32 words; rounded down, at least one element (chunk). */
size_t fp4_coll_round_bytes(fp4_coll_op op, size_t bytes, int nranks);

/* The nccl-tests bus-bandwidth factor: busbw = algbw * factor. All-reduce
 * 2(n-1)/n, all-to-all (n-1)/n: 0 on one rank, where nothing crosses a link. */
double fp4_coll_bus_factor(fp4_coll_op op, int nranks);

typedef struct fp4_coll_settings {
    int iters;     /* collective calls per graph replay (default 20) */
    int warmup;    /* untimed replays first (default 3) */
    int reps;      /* timed replays; a rank's time is their median (default 10) */
    uint64_t seed; /* the data of the check (default 1) */
    /* Testing the check: -1 (default) none; else one element that this rank
     * received is changed after the collective and before the check, which
     * must then fail. */
    int fault_rank;
} fp4_coll_settings;

void fp4_coll_settings_default(fp4_coll_settings *s);

/* One collective at one size. */
typedef struct fp4_coll_row {
    fp4_coll_op op;
    int nranks;
    size_t bytes;     /* per rank: the all-reduce vector, the all-to-all send buffer */
    size_t count;     /* elements per rank: bf16 (all-reduce), uint32 (all-to-all) */
    int verified;     /* 1: every element of every rank was right */
    char why[FP4_ERR_MSG_LEN]; /* not verified: the first wrong element, rank and values */
    int iters, reps;
    double time_us;    /* slowest rank's median time per call; NAN when not timed */
    int slowest_rank;  /* -1 when not timed */
    double algbw_gbps; /* bytes / time_us, 10^9 B/s */
    double busbw_gbps; /* algbw * fp4_coll_bus_factor */
    double rank_us[FP4_NCCL_MAX_RANKS]; /* each rank's median per call (NAN: not timed) */
} fp4_coll_row;

/* Verify op at `bytes` per rank (rounded by fp4_coll_round_bytes) on every
 * rank of c, then, if every rank's check passed, time it. Returns FP4_OK
 * with row->verified 0 and row->why set when the check failed (a FAILED
 * row, not timed); any other status is a CUDA or NCCL failure, after which
 * the set should only be destroyed. Under MPI every process calls this with
 * the same arguments; every process gets the whole row. */
fp4_status fp4_coll_run(fp4_nccl_comms *c, fp4_coll_op op, size_t bytes, const fp4_coll_settings *set,
                        fp4_coll_row *row, fp4_err *err);

/* ---- results: JSON, CSV and the table (docs/PARALLEL.md) ------------------------ */

typedef struct fp4_coll_report {
    char version[32];
    char commit[48];
    char started[40];  /* ISO 8601 UTC */
    char host[64];
    char command[4096];
    char unsupported[FP4_ERR_MSG_LEN]; /* non-empty: nothing ran here, and why */
    int have_info;                     /* info is filled (a set was created) */
    fp4_nccl_info info;
    fp4_coll_settings settings;
    fp4_coll_row *rows;
    int nrows, cap;
} fp4_coll_report;

/* Append a copy of row. */
fp4_status fp4_coll_report_add(fp4_coll_report *r, const fp4_coll_row *row, fp4_err *err);
void fp4_coll_report_free(fp4_coll_report *r);
/* The report as JSON (schema "fp4bench-nccl/1") to path, atomically (path.tmp
 * then rename); "-": to stdout. */
fp4_status fp4_coll_write_json(const char *path, const fp4_coll_report *r, fp4_err *err);
/* One CSV line per row after a header, to path (atomically) or "-": stdout. */
fp4_status fp4_coll_write_csv(const char *path, const fp4_coll_report *r, fp4_err *err);
/* The table's header line, and one row's line. */
void fp4_coll_print_header(FILE *out);
void fp4_coll_print_row(FILE *out, const fp4_coll_row *row);

#ifdef __cplusplus
}
#endif
#endif
