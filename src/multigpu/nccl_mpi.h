/* The few MPI calls the NCCL communicator set needs, behind a C interface so
 * that only src/multigpu/nccl_mpi.c (a C file) includes mpi.h: MPI's
 * compile options are the C compiler's, not nvcc's. Every call works on
 * MPI_COMM_WORLD. Built without MPI (FP4_HAVE_MPI unset), each answers
 * FP4_ERR_UNSUPPORTED "built without MPI". */
#ifndef FP4_MULTIGPU_NCCL_MPI_H
#define FP4_MULTIGPU_NCCL_MPI_H

#include <stddef.h>

#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Initialize MPI unless it already is (*initialized_here says whether this
 * call did: then nccl_mpi_finish finalizes it). Fills the world rank and
 * size and the rank within the node (the GPU to use). */
fp4_status nccl_mpi_start(int *initialized_here, int *rank, int *size, int *local_rank, fp4_err *err);
/* MPI_Finalize when initialized_here. */
fp4_status nccl_mpi_finish(int initialized_here, fp4_err *err);
/* len bytes of buf from world rank root to every process. */
fp4_status nccl_mpi_bcast(void *buf, size_t len, int root, fp4_err *err);
/* all holds size slots of len bytes; each process's own slot (its world
 * rank) goes to every process's copy. */
fp4_status nccl_mpi_allgather_inplace(void *all, size_t len, fp4_err *err);
/* *value becomes the maximum of every process's *value. */
fp4_status nccl_mpi_max_int(int *value, fp4_err *err);
fp4_status nccl_mpi_barrier(fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
