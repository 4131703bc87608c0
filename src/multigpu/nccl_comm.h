/* Inside the NCCL communicator set: its ranks, the runner that gives each
 * local rank a thread, and the agreement all ranks reach between steps so
 * that one rank's failure never leaves the others waiting in a collective.
 * CUDA and NCCL only: included by the .cu files of src/multigpu. */
#ifndef FP4_MULTIGPU_NCCL_COMM_H
#define FP4_MULTIGPU_NCCL_COMM_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>

#include "fp4/multigpu.h"

/* One rank this process drives. */
typedef struct nccl_rank {
    int rank;    /* world rank */
    int device;  /* its CUDA device */
    ncclComm_t comm;
    cudaStream_t stream;
} nccl_rank;

struct fp4_nccl_comms {
    fp4_nccl_launcher launcher;
    int nranks; /* the world */
    int nlocal; /* ranks in this process: nranks (threads) or 1 (MPI) */
    nccl_rank local[FP4_NCCL_MAX_RANKS];
    int mpi_initialized_here;
    /* threads: the local ranks meet at the barrier; agreement is the
     * maximum of the values they bring (nccl_agree_max) */
    pthread_barrier_t barrier;
    int barrier_made;
    pthread_mutex_t lock;
    int lock_made;
    int agreement;
    fp4_nccl_info info;
};

/* What a rank's step ended with. followed: it stopped only because another
 * rank failed (its own err says so); the runner reports a rank's own
 * failure first. */
typedef struct nccl_rank_result {
    fp4_status st;
    fp4_err err;
    int followed;
} nccl_rank_result;

typedef void (*nccl_rank_fn)(fp4_nccl_comms *c, nccl_rank *r, void *arg, nccl_rank_result *res);

/* fn once per local rank, concurrently (a thread each; under MPI the
 * calling thread), all started or none. Returns the first rank's own
 * failure ("rank R (GPU D): ..."), else the first followed one, else FP4_OK. */
fp4_status nccl_run_ranks(fp4_nccl_comms *c, nccl_rank_fn fn, void *arg, fp4_err *err);

/* Every rank calls this with its value; every rank gets the maximum. Values:
 * NCCL_AGREE_OK, NCCL_AGREE_MISMATCH (a check failed), NCCL_AGREE_ERROR.
 * A failure of the agreement itself (MPI) reads as NCCL_AGREE_ERROR. */
enum { NCCL_AGREE_OK = 0, NCCL_AGREE_MISMATCH = 1, NCCL_AGREE_ERROR = 2 };
int nccl_agree_max(fp4_nccl_comms *c, int value);

/* Every rank waits for the others (host side). */
fp4_status nccl_barrier(fp4_nccl_comms *c, fp4_err *err);

/* slots holds nranks slots of len bytes; under MPI each process's own
 * slots go to every process (threads: all slots are already shared). */
fp4_status nccl_share_slots(fp4_nccl_comms *c, void *slots, size_t len, fp4_err *err);

/* A CUDA or NCCL call of rank r: on failure, a message naming the call and
 * the rank into err, st set, jump to label. */
#define NCCL_RANK_CUDA(err, st, r, call, label)                                                   \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            (st) = fp4_fail((err), FP4_ERR_CUDA, "%s:%d: rank %d (GPU %d): %s: %s", __FILE__,     \
                            __LINE__, (r)->rank, (r)->device, #call, cudaGetErrorString(e_));     \
            goto label;                                                                           \
        }                                                                                         \
    } while (0)

#define NCCL_RANK_NCCL(err, st, r, call, label)                                                   \
    do {                                                                                          \
        ncclResult_t n_ = (call);                                                                 \
        if (n_ != ncclSuccess) {                                                                  \
            const char *detail_ = (r)->comm ? ncclGetLastError((r)->comm) : NULL;                 \
            (st) = fp4_fail((err), FP4_ERR_CUDA, "%s:%d: rank %d (GPU %d): %s: %s%s%s", __FILE__, \
                            __LINE__, (r)->rank, (r)->device, #call, ncclGetErrorString(n_),      \
                            detail_ && detail_[0] ? ": " : "", detail_ ? detail_ : "");           \
            goto label;                                                                           \
        }                                                                                         \
    } while (0)

#endif
