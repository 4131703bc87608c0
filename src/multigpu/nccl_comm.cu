/* The NCCL communicator set (fp4/multigpu.h): N ranks on N GPUs, one thread
 * per local GPU (or one process per GPU under MPI), all state in the handle.
 * Every step that could fail on one rank is followed by an agreement of all
 * ranks (nccl_agree_max), so that a rank that failed does not leave the
 * others blocked in ncclCommInitRank or in a collective. */
#ifdef FP4_HAVE_NCCL

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "multigpu/nccl_comm.h"
#include "multigpu/nccl_mpi.h"

/* NVLink multicast (NVLS) must stay off on shared machines: its multicast
 * objects (cuMulticastCreate) span GPUs that other jobs use, and a failed or
 * killed job can leave them behind. setenv with overwrite 0 would keep a
 * value inherited from the caller's environment, so "0" is forced, before
 * any NCCL call reads it. fp4bench itself never calls cuMulticastCreate. */
static fp4_status force_nvls_off(fp4_err *err)
{
    if (setenv("NCCL_NVLS_ENABLE", "0", 1) != 0)
        return fp4_fail(err, FP4_ERR_NOMEM, "setenv NCCL_NVLS_ENABLE=0: %s", strerror(errno));
    return FP4_OK;
}

const char *fp4_nccl_launcher_name(fp4_nccl_launcher l)
{
    return l == FP4_NCCL_MPI ? "mpi" : "threads";
}

int fp4_nccl_version(void)
{
    int version = 0;
    if (force_nvls_off(NULL) != FP4_OK) return 0;
    if (ncclGetVersion(&version) != ncclSuccess) return 0;
    return version;
}

/* cfg's shape: a known launcher, a device count in range, no device twice. */
static fp4_status check_config(const fp4_nccl_config *cfg, fp4_err *err)
{
    if (!cfg) return fp4_fail(err, FP4_ERR_INVALID_ARG, "no NCCL configuration");
    if (cfg->launcher != FP4_NCCL_THREADS && cfg->launcher != FP4_NCCL_MPI)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "unknown launcher %d", (int)cfg->launcher);
    if (cfg->ndevices < 0 || cfg->ndevices > FP4_NCCL_MAX_RANKS)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%d GPUs: 0 (all) to %d", cfg->ndevices,
                        FP4_NCCL_MAX_RANKS);
    for (int i = 0; i < cfg->ndevices; i++) {
        if (cfg->devices[i] < 0)
            return fp4_fail(err, FP4_ERR_INVALID_ARG, "GPU %d: not a device number", cfg->devices[i]);
        for (int j = 0; j < i; j++)
            if (cfg->devices[j] == cfg->devices[i])
                return fp4_fail(err, FP4_ERR_INVALID_ARG, "GPU %d listed twice", cfg->devices[i]);
    }
    return FP4_OK;
}

fp4_status fp4_nccl_probe(const fp4_nccl_config *cfg, fp4_err *why)
{
    int count = 0;
    fp4_status st = check_config(cfg, why);
    if (st != FP4_OK) return st;
#ifndef FP4_HAVE_MPI
    if (cfg->launcher == FP4_NCCL_MPI) return fp4_fail(why, FP4_ERR_UNSUPPORTED, "built without MPI");
#endif
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return fp4_fail(why, FP4_ERR_UNSUPPORTED, "no NVIDIA GPU/driver found: %s", cudaGetErrorString(e));
    if (count == 0) return fp4_fail(why, FP4_ERR_UNSUPPORTED, "no NVIDIA GPU");
    if (cfg->launcher == FP4_NCCL_THREADS) {
        if (cfg->ndevices == 0 && count > FP4_NCCL_MAX_RANKS)
            return fp4_fail(why, FP4_ERR_UNSUPPORTED, "%d GPUs: at most %d ranks", count, FP4_NCCL_MAX_RANKS);
        for (int i = 0; i < cfg->ndevices; i++)
            if (cfg->devices[i] >= count)
                return fp4_fail(why, FP4_ERR_UNSUPPORTED, "GPU %d is not here (this machine has %d: 0..%d)",
                                cfg->devices[i], count, count - 1);
    }
    return FP4_OK;
}

/* ---- running the local ranks -------------------------------------------------- */

/* Threads wait at the gate until every one of them exists: if creating one
 * fails, the others are told to leave instead of entering collectives that
 * the missing rank would never join. */
typedef struct start_gate {
    pthread_mutex_t lock;
    pthread_cond_t open;
    int state; /* 0 wait, 1 go, -1 leave */
} start_gate;

typedef struct rank_task {
    fp4_nccl_comms *c;
    nccl_rank *r;
    nccl_rank_fn fn;
    void *arg;
    start_gate *gate;
    nccl_rank_result res;
} rank_task;

static void *rank_thread(void *p)
{
    rank_task *t = (rank_task *)p;
    int state;
    pthread_mutex_lock(&t->gate->lock);
    while (t->gate->state == 0) pthread_cond_wait(&t->gate->open, &t->gate->lock);
    state = t->gate->state;
    pthread_mutex_unlock(&t->gate->lock);
    if (state > 0) t->fn(t->c, t->r, t->arg, &t->res);
    else t->res.st = fp4_fail(&t->res.err, FP4_ERR_INTERNAL, "rank %d: not started", t->r->rank);
    return NULL;
}

static void open_gate(start_gate *g, int state)
{
    pthread_mutex_lock(&g->lock);
    g->state = state;
    pthread_cond_broadcast(&g->open);
    pthread_mutex_unlock(&g->lock);
}

fp4_status nccl_run_ranks(fp4_nccl_comms *c, nccl_rank_fn fn, void *arg, fp4_err *err)
{
    rank_task *tasks = (rank_task *)calloc((size_t)c->nlocal, sizeof *tasks);
    pthread_t *threads = (pthread_t *)calloc((size_t)c->nlocal, sizeof *threads);
    start_gate gate;
    fp4_status st = FP4_OK;
    int started = 0, rc = 0;
    const nccl_rank_result *own = NULL, *followed = NULL;
    if (!tasks || !threads) {
        free(tasks);
        free(threads);
        return fp4_fail(err, FP4_ERR_NOMEM, "no memory for %d rank threads", c->nlocal);
    }
    for (int i = 0; i < c->nlocal; i++) {
        tasks[i].c = c;
        tasks[i].r = &c->local[i];
        tasks[i].fn = fn;
        tasks[i].arg = arg;
        tasks[i].gate = &gate;
        tasks[i].res.st = FP4_OK;
        fp4_err_clear(&tasks[i].res.err);
    }
    if (c->launcher == FP4_NCCL_MPI) { /* one rank here: this thread is its thread */
        fn(c, &c->local[0], arg, &tasks[0].res);
    } else {
        pthread_mutex_init(&gate.lock, NULL);
        pthread_cond_init(&gate.open, NULL);
        gate.state = 0;
        for (started = 0; started < c->nlocal; started++) {
            rc = pthread_create(&threads[started], NULL, rank_thread, &tasks[started]);
            if (rc != 0) break;
        }
        open_gate(&gate, started == c->nlocal ? 1 : -1);
        for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
        pthread_cond_destroy(&gate.open);
        pthread_mutex_destroy(&gate.lock);
        if (started < c->nlocal)
            st = fp4_fail(err, FP4_ERR_NOMEM, "cannot start the thread of rank %d: %s",
                          c->local[started].rank, strerror(rc));
    }
    if (st == FP4_OK) {
        for (int i = 0; i < c->nlocal; i++) {
            if (tasks[i].res.st == FP4_OK) continue;
            if (!tasks[i].res.followed && !own) own = &tasks[i].res;
            if (tasks[i].res.followed && !followed) followed = &tasks[i].res;
        }
        if (own || followed) {
            const nccl_rank_result *pick = own ? own : followed;
            if (err) *err = pick->err;
            st = pick->st;
        }
    }
    free(tasks);
    free(threads);
    return st;
}

int nccl_agree_max(fp4_nccl_comms *c, int value)
{
    int result;
    if (c->launcher == FP4_NCCL_MPI) {
        fp4_err err;
        if (nccl_mpi_max_int(&value, &err) != FP4_OK) return NCCL_AGREE_ERROR;
        return value;
    }
    /* Three meetings: everyone is in (the last reset is done), everyone has
     * written, everyone has read. Rank 0's thread then resets for the next
     * round, before it can reach that round's first meeting. */
    pthread_barrier_wait(&c->barrier);
    pthread_mutex_lock(&c->lock);
    if (value > c->agreement) c->agreement = value;
    pthread_mutex_unlock(&c->lock);
    pthread_barrier_wait(&c->barrier);
    pthread_mutex_lock(&c->lock);
    result = c->agreement;
    pthread_mutex_unlock(&c->lock);
    if (pthread_barrier_wait(&c->barrier) == PTHREAD_BARRIER_SERIAL_THREAD) {
        pthread_mutex_lock(&c->lock);
        c->agreement = NCCL_AGREE_OK;
        pthread_mutex_unlock(&c->lock);
    }
    return result;
}

fp4_status nccl_barrier(fp4_nccl_comms *c, fp4_err *err)
{
    if (c->launcher == FP4_NCCL_MPI) return nccl_mpi_barrier(err);
    pthread_barrier_wait(&c->barrier);
    return FP4_OK;
}

fp4_status nccl_share_slots(fp4_nccl_comms *c, void *slots, size_t len, fp4_err *err)
{
    if (c->launcher != FP4_NCCL_MPI) return FP4_OK;
    return nccl_mpi_allgather_inplace(slots, len, err);
}

/* ---- creating and destroying the set -------------------------------------------- */

/* Mark res as stopped because another rank failed. */
static void follow(nccl_rank_result *res, const nccl_rank *r)
{
    res->followed = 1;
    res->st = fp4_fail(&res->err, FP4_ERR_CUDA, "rank %d (GPU %d): stopped: another rank failed", r->rank,
                       r->device);
}

/* Rank r's GPU into the set's info (its own slot: no other rank writes it). */
static fp4_status describe_gpu(fp4_nccl_comms *c, const nccl_rank *r, fp4_err *err)
{
    fp4_nccl_gpu *g = &c->info.gpus[r->rank];
    struct cudaDeviceProp prop;
    fp4_status st = FP4_OK;
    memset(g, 0, sizeof *g);
    g->rank = r->rank;
    g->device = r->device;
    NCCL_RANK_CUDA(err, st, r, cudaGetDeviceProperties(&prop, r->device), out);
    snprintf(g->name, sizeof g->name, "%s", prop.name);
    g->cc_major = prop.major;
    g->cc_minor = prop.minor;
    NCCL_RANK_CUDA(err, st, r, cudaDeviceGetPCIBusId(g->pci_bus_id, (int)sizeof g->pci_bus_id, r->device), out);
    if (gethostname(g->host, sizeof g->host) != 0) g->host[0] = '\0';
    g->host[sizeof g->host - 1] = '\0';
out:
    return st;
}

/* Rank r's device, stream and GPU description. */
static fp4_status open_rank_device(fp4_nccl_comms *c, nccl_rank *r, fp4_err *err)
{
    fp4_status st = FP4_OK;
    NCCL_RANK_CUDA(err, st, r, cudaSetDevice(r->device), out);
    NCCL_RANK_CUDA(err, st, r, cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking), out);
    st = describe_gpu(c, r, err);
out:
    return st;
}

typedef struct init_args {
    ncclUniqueId id;
} init_args;

/* threads launcher: each rank's thread opens its GPU, then (when every rank
 * could) joins the communicator. */
static void init_rank(fp4_nccl_comms *c, nccl_rank *r, void *arg, nccl_rank_result *res)
{
    init_args *a = (init_args *)arg;
    res->st = open_rank_device(c, r, &res->err);
    if (nccl_agree_max(c, res->st == FP4_OK ? NCCL_AGREE_OK : NCCL_AGREE_ERROR) != NCCL_AGREE_OK) {
        if (res->st == FP4_OK) follow(res, r);
        return;
    }
    NCCL_RANK_NCCL(&res->err, res->st, r, ncclCommInitRank(&r->comm, c->nranks, a->id, r->rank), out);
out:
    return;
}

/* MPI launcher: this process's one rank; the id comes from world rank 0. */
static fp4_status init_mpi_rank(fp4_nccl_comms *c, int local_rank, fp4_err *err)
{
    nccl_rank *r = &c->local[0];
    ncclUniqueId id;
    fp4_status st = FP4_OK;
    int count = 0, agreed;
    memset(&id, 0, sizeof id);
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) st = fp4_fail(err, FP4_ERR_UNSUPPORTED, "rank %d: no NVIDIA GPU/driver found: %s",
                                        r->rank, cudaGetErrorString(e));
    else if (local_rank >= count)
        st = fp4_fail(err, FP4_ERR_UNSUPPORTED, "rank %d: local rank %d has no GPU (this node has %d)", r->rank,
                      local_rank, count);
    if (st == FP4_OK) {
        r->device = local_rank;
        st = open_rank_device(c, r, err);
    }
    if (st == FP4_OK && r->rank == 0) NCCL_RANK_NCCL(err, st, r, ncclGetUniqueId(&id), agree);
agree:
    agreed = nccl_agree_max(c, st == FP4_OK ? NCCL_AGREE_OK : NCCL_AGREE_ERROR);
    if (st != FP4_OK) return st;
    if (agreed != NCCL_AGREE_OK)
        return fp4_fail(err, FP4_ERR_CUDA, "rank %d: stopped: another rank failed (its message is on its "
                        "stderr)", r->rank);
    st = nccl_mpi_bcast(&id, sizeof id, 0, err);
    if (st != FP4_OK) return st;
    NCCL_RANK_NCCL(err, st, r, ncclCommInitRank(&r->comm, c->nranks, id, r->rank), out);
    st = nccl_share_slots(c, c->info.gpus, sizeof c->info.gpus[0], err);
out:
    return st;
}

/* Rank r's communicator and stream, failures as warnings into w. Leaves
 * both NULL, so that a second call does nothing. */
static void close_one(nccl_rank *r, fp4_warnings *w)
{
    cudaError_t e;
    if (!r->comm && !r->stream) return;
    e = cudaSetDevice(r->device);
    if (e != cudaSuccess) fp4_warn(w, "rank %d: cudaSetDevice: %s", r->rank, cudaGetErrorString(e));
    if (r->comm) {
        ncclResult_t n = ncclCommDestroy(r->comm);
        if (n != ncclSuccess) fp4_warn(w, "rank %d: ncclCommDestroy: %s", r->rank, ncclGetErrorString(n));
        r->comm = NULL;
    }
    if (r->stream) {
        e = cudaStreamDestroy(r->stream);
        if (e != cudaSuccess) fp4_warn(w, "rank %d: cudaStreamDestroy: %s", r->rank, cudaGetErrorString(e));
        r->stream = NULL;
    }
}

/* nccl_rank_fn of the destruction: arg is one fp4_warnings per local rank
 * (a thread must not write another's). */
static void close_rank(fp4_nccl_comms *c, nccl_rank *r, void *arg, nccl_rank_result *res)
{
    (void)res;
    close_one(r, &((fp4_warnings *)arg)[r - c->local]);
}

void fp4_nccl_comms_destroy(fp4_nccl_comms *c, fp4_warnings *warn)
{
    fp4_warnings *per_rank;
    fp4_err err;
    if (!c) return;
    per_rank = (fp4_warnings *)calloc((size_t)(c->nlocal > 0 ? c->nlocal : 1), sizeof *per_rank);
    /* Each rank from its own thread, all at once: ncclCommDestroy may wait
     * for its peers. Whatever that leaves open (no memory, no thread) is
     * closed here one by one. */
    if (per_rank && c->nlocal > 1 && nccl_run_ranks(c, close_rank, per_rank, &err) != FP4_OK)
        fp4_warn(warn, "%s", fp4_err_text(&err));
    for (int i = 0; i < c->nlocal; i++) {
        if (per_rank) fp4_warnings_append(warn, &per_rank[i]);
        close_one(&c->local[i], warn);
    }
    free(per_rank);
    if (c->launcher == FP4_NCCL_MPI && nccl_mpi_finish(c->mpi_initialized_here, &err) != FP4_OK)
        fp4_warn(warn, "%s", fp4_err_text(&err));
    if (c->barrier_made) pthread_barrier_destroy(&c->barrier);
    if (c->lock_made) pthread_mutex_destroy(&c->lock);
    free(c);
}

fp4_status fp4_nccl_comms_create(const fp4_nccl_config *cfg, fp4_nccl_comms **out, fp4_err *err)
{
    fp4_nccl_comms *c;
    fp4_status st;
    int count = 0;
    *out = NULL;
    st = fp4_nccl_probe(cfg, err);
    if (st != FP4_OK) return st;
    st = force_nvls_off(err);
    if (st != FP4_OK) return st;
    c = (fp4_nccl_comms *)calloc(1, sizeof *c);
    if (!c) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for the communicator set");
    c->launcher = cfg->launcher;
    c->info.launcher = cfg->launcher;
    if (ncclGetVersion(&c->info.nccl_version) != ncclSuccess) c->info.nccl_version = 0;
    if (cudaDriverGetVersion(&c->info.driver_version) != cudaSuccess) c->info.driver_version = 0;
    if (cudaRuntimeGetVersion(&c->info.runtime_version) != cudaSuccess) c->info.runtime_version = 0;

    if (cfg->launcher == FP4_NCCL_MPI) {
        int rank = 0, size = 1, local_rank = 0;
        st = nccl_mpi_start(&c->mpi_initialized_here, &rank, &size, &local_rank, err);
        if (st != FP4_OK) goto fail;
        if (size > FP4_NCCL_MAX_RANKS) {
            st = fp4_fail(err, FP4_ERR_UNSUPPORTED, "%d MPI processes: at most %d ranks", size,
                          FP4_NCCL_MAX_RANKS);
            goto fail;
        }
        c->nranks = size;
        c->nlocal = 1;
        c->local[0].rank = rank;
        st = init_mpi_rank(c, local_rank, err);
        if (st != FP4_OK) goto fail;
    } else {
        init_args args;
        cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess) {
            st = fp4_fail(err, FP4_ERR_CUDA, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
            goto fail;
        }
        c->nranks = cfg->ndevices ? cfg->ndevices : count;
        c->nlocal = c->nranks;
        for (int i = 0; i < c->nranks; i++) {
            c->local[i].rank = i;
            c->local[i].device = cfg->ndevices ? cfg->devices[i] : i;
        }
        if (pthread_mutex_init(&c->lock, NULL) != 0) {
            st = fp4_fail(err, FP4_ERR_NOMEM, "pthread_mutex_init failed");
            goto fail;
        }
        c->lock_made = 1;
        if (pthread_barrier_init(&c->barrier, NULL, (unsigned)c->nlocal) != 0) {
            st = fp4_fail(err, FP4_ERR_NOMEM, "pthread_barrier_init failed");
            goto fail;
        }
        c->barrier_made = 1;
        ncclResult_t n = ncclGetUniqueId(&args.id);
        if (n != ncclSuccess) {
            st = fp4_fail(err, FP4_ERR_CUDA, "ncclGetUniqueId: %s", ncclGetErrorString(n));
            goto fail;
        }
        st = nccl_run_ranks(c, init_rank, &args, err);
        if (st != FP4_OK) goto fail;
    }
    c->info.nranks = c->nranks;
    *out = c;
    return FP4_OK;
fail:
    fp4_nccl_comms_destroy(c, NULL);
    return st;
}

int fp4_nccl_comms_size(const fp4_nccl_comms *c)
{
    return c ? c->nranks : 0;
}

int fp4_nccl_comms_is_root(const fp4_nccl_comms *c)
{
    return c && c->nlocal > 0 && c->local[0].rank == 0;
}

const fp4_nccl_info *fp4_nccl_comms_info(const fp4_nccl_comms *c)
{
    return c ? &c->info : NULL;
}

#endif /* FP4_HAVE_NCCL */
