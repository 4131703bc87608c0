/* MPI for the NCCL communicator set (nccl_mpi.h): one process per GPU, the
 * NCCL unique id broadcast from rank 0, the per-rank results gathered. */
#include "multigpu/nccl_mpi.h"

#ifdef FP4_HAVE_MPI
#include <limits.h>
#include <mpi.h>

/* MPI's error text for code, into a fixed buffer the caller owns. */
static const char *mpi_text(int code, char *buf, int cap)
{
    int len = 0;
    if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS || len <= 0 || len >= cap) return "unknown MPI error";
    buf[len] = '\0';
    return buf;
}

#define MPI_TRY(err, call)                                                                      \
    do {                                                                                        \
        int rc_ = (call);                                                                       \
        if (rc_ != MPI_SUCCESS) {                                                               \
            char text_[MPI_MAX_ERROR_STRING];                                                   \
            return fp4_fail((err), FP4_ERR_INTERNAL, "%s:%d: %s: %s", __FILE__, __LINE__, #call, \
                            mpi_text(rc_, text_, (int)sizeof text_));                           \
        }                                                                                       \
    } while (0)

fp4_status nccl_mpi_start(int *initialized_here, int *rank, int *size, int *local_rank, fp4_err *err)
{
    int initialized = 0;
    MPI_Comm node;
    *initialized_here = 0;
    MPI_TRY(err, MPI_Initialized(&initialized));
    if (!initialized) {
        MPI_TRY(err, MPI_Init(NULL, NULL));
        *initialized_here = 1;
    }
    MPI_TRY(err, MPI_Comm_rank(MPI_COMM_WORLD, rank));
    MPI_TRY(err, MPI_Comm_size(MPI_COMM_WORLD, size));
    /* the processes that share this node's memory: the rank among them picks the GPU */
    MPI_TRY(err, MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &node));
    MPI_TRY(err, MPI_Comm_rank(node, local_rank));
    MPI_TRY(err, MPI_Comm_free(&node));
    return FP4_OK;
}

fp4_status nccl_mpi_finish(int initialized_here, fp4_err *err)
{
    if (initialized_here) MPI_TRY(err, MPI_Finalize());
    return FP4_OK;
}

fp4_status nccl_mpi_bcast(void *buf, size_t len, int root, fp4_err *err)
{
    if (len > INT_MAX) return fp4_fail(err, FP4_ERR_OVERFLOW, "MPI_Bcast of %zu bytes", len);
    MPI_TRY(err, MPI_Bcast(buf, (int)len, MPI_BYTE, root, MPI_COMM_WORLD));
    return FP4_OK;
}

fp4_status nccl_mpi_allgather_inplace(void *all, size_t len, fp4_err *err)
{
    if (len > INT_MAX) return fp4_fail(err, FP4_ERR_OVERFLOW, "MPI_Allgather of %zu bytes", len);
    MPI_TRY(err, MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, (int)len, MPI_BYTE, MPI_COMM_WORLD));
    return FP4_OK;
}

fp4_status nccl_mpi_max_int(int *value, fp4_err *err)
{
    MPI_TRY(err, MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return FP4_OK;
}

fp4_status nccl_mpi_barrier(fp4_err *err)
{
    MPI_TRY(err, MPI_Barrier(MPI_COMM_WORLD));
    return FP4_OK;
}

#else /* built without MPI */

static fp4_status no_mpi(fp4_err *err)
{
    return fp4_fail(err, FP4_ERR_UNSUPPORTED, "built without MPI");
}

fp4_status nccl_mpi_start(int *initialized_here, int *rank, int *size, int *local_rank, fp4_err *err)
{
    *initialized_here = 0;
    *rank = 0;
    *size = 1;
    *local_rank = 0;
    return no_mpi(err);
}

fp4_status nccl_mpi_finish(int initialized_here, fp4_err *err)
{
    return initialized_here ? no_mpi(err) : FP4_OK;
}

fp4_status nccl_mpi_bcast(void *buf, size_t len, int root, fp4_err *err)
{
    return no_mpi(err);
}

fp4_status nccl_mpi_allgather_inplace(void *all, size_t len, fp4_err *err)
{
    return no_mpi(err);
}

fp4_status nccl_mpi_max_int(int *value, fp4_err *err)
{
    return no_mpi(err);
}

fp4_status nccl_mpi_barrier(fp4_err *err)
{
    return no_mpi(err);
}
#endif
