/* The collectives benchmark (fp4_coll_run): one collective at one size,
 * verified on every rank, then timed in a CUDA graph per rank.
 *
 * All-reduce data: rank r's element i is a small integer v(r, i) in
 * [-amp, amp] with amp * nranks <= 256, held in bf16. Every partial sum, in
 * whatever order NCCL adds, is an integer of magnitude <= 256, exact in bf16
 * (8 significant bits), so the result must equal the integer sum exactly.
 * All-to-all data: word i of the chunk rank s sends to rank d is
 * (s << 24) | (d << 16) | (i + seed) mod 2^16: each received chunk names its
 * sender and its receiver. Output buffers start as all ones bytes (a bf16
 * NaN; a sender id of 255, which no rank has), so a chunk never written
 * fails the check. */
#ifdef FP4_HAVE_NCCL

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "multigpu/nccl_comm.h"

#define COLL_MAX_REPS 1000
#define COLL_THREADS 256
#define COLL_MAX_BLOCKS 4096

/* splitmix64's finalizer: a well-mixed 64-bit value of x. */
__host__ __device__ static inline uint64_t coll_mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The all-reduce input of rank at element i: an integer in [-amp, amp]. */
__host__ __device__ static inline int ar_value(uint64_t seed, int rank, size_t i, int amp)
{
    uint64_t h = coll_mix(seed ^ coll_mix(((uint64_t)rank << 48) ^ (uint64_t)i));
    return (int)(h % (uint64_t)(2 * amp + 1)) - amp;
}

/* The exact sum over ranks at element i. */
__host__ __device__ static inline int ar_sum(uint64_t seed, int nranks, size_t i, int amp)
{
    int sum = 0;
    for (int r = 0; r < nranks; r++) sum += ar_value(seed, r, i, amp);
    return sum;
}

/* bf16 bits of a float that bf16 holds exactly (small integers here). */
__host__ __device__ static inline uint16_t bf16_exact(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)(bits >> 16);
}

__host__ __device__ static inline float bf16_value(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The all-to-all word that sender s puts at index i of its chunk for d. */
__host__ __device__ static inline uint32_t a2a_word(uint64_t seed, int s, int d, size_t i)
{
    return ((uint32_t)s << 24) | ((uint32_t)d << 16) | (uint32_t)((i + seed) & 0xffffu);
}

// buf is (count,) bf16 bits: rank's all-reduce input.
__global__ static void ar_fill(uint16_t *buf, size_t count, int rank, uint64_t seed, int amp)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        buf[i] = bf16_exact((float)ar_value(seed, rank, i, amp));
}

/* Record one wrong element: count it, keep the lowest index. */
__device__ static inline void note_bad(unsigned long long *bad, unsigned long long *first, size_t i)
{
    atomicAdd(bad, 1ull);
    atomicMin(first, (unsigned long long)i);
}

// out is (count,) bf16 bits: the all-reduce result on any rank.
__global__ static void ar_check(const uint16_t *out, size_t count, int nranks, uint64_t seed, int amp,
                                unsigned long long *bad, unsigned long long *first)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        /* compared as values: NaN (the poison) never equals, -0 would equal +0 */
        if (bf16_value(out[i]) != (float)ar_sum(seed, nranks, i, amp)) note_bad(bad, first, i);
    }
}

// buf is (nranks, chunk) uint32: rank s's all-to-all send buffer, chunk d for rank d.
__global__ static void a2a_fill(uint32_t *buf, size_t chunk, int nranks, int s, uint64_t seed)
{
    size_t total = chunk * (size_t)nranks;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x)
        buf[k] = a2a_word(seed, s, (int)(k / chunk), k % chunk);
}

// out is (nranks, chunk) uint32: rank d's all-to-all receive buffer, chunk s from rank s.
__global__ static void a2a_check(const uint32_t *out, size_t chunk, int nranks, int d, uint64_t seed,
                                 unsigned long long *bad, unsigned long long *first)
{
    size_t total = chunk * (size_t)nranks;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x)
        if (out[k] != a2a_word(seed, (int)(k / chunk), d, k % chunk)) note_bad(bad, first, k);
}

static unsigned coll_blocks(size_t n)
{
    size_t b = (n + COLL_THREADS - 1) / COLL_THREADS;
    return (unsigned)(b < 1 ? 1 : b > COLL_MAX_BLOCKS ? COLL_MAX_BLOCKS : b);
}

/* ---- one job: one op at one size on every rank ---------------------------------- */

/* What each rank found, in doubles so that MPI shares the slots as bytes. */
typedef struct coll_rank_out {
    double median_us; /* NAN: not timed */
    double bad;       /* wrong elements */
    double first;     /* index of the first wrong one */
    double got, want; /* its value and the right one (bf16 value, or the uint32 word) */
} coll_rank_out;

typedef struct coll_job {
    fp4_coll_op op;
    size_t bytes; /* per rank */
    size_t count; /* elements per rank */
    size_t chunk; /* all-to-all: elements per peer */
    int amp;      /* all-reduce: value range */
    const fp4_coll_settings *set;
    int verify_agreed; /* the ranks' agreement after the check */
    coll_rank_out out[FP4_NCCL_MAX_RANKS];
} coll_job;

/* Enqueue the collective once on r's stream (captured or not). */
static fp4_status issue(const coll_job *j, fp4_nccl_comms *c, nccl_rank *r, void *send, void *recv, fp4_err *err)
{
    fp4_status st = FP4_OK;
    if (j->op == FP4_COLL_ALL_REDUCE) {
        NCCL_RANK_NCCL(err, st, r, ncclAllReduce(send, recv, j->count, ncclBfloat16, ncclSum, r->comm, r->stream),
                       out);
        return FP4_OK;
    }
    /* all-to-all: one grouped send and receive per peer, itself included */
    NCCL_RANK_NCCL(err, st, r, ncclGroupStart(), out);
    for (int p = 0; p < c->nranks; p++) {
        size_t off = (size_t)p * j->chunk * sizeof(uint32_t);
        NCCL_RANK_NCCL(err, st, r, ncclSend((char *)send + off, j->chunk, ncclUint32, p, r->comm, r->stream),
                       close_group);
        NCCL_RANK_NCCL(err, st, r, ncclRecv((char *)recv + off, j->chunk, ncclUint32, p, r->comm, r->stream),
                       close_group);
    }
    NCCL_RANK_NCCL(err, st, r, ncclGroupEnd(), out);
    return FP4_OK;
close_group:
    (void)ncclGroupEnd(); /* the group must be closed; the first failure is the one reported */
out:
    return st;
}

/* The element size of op's data. */
static size_t elem_size(fp4_coll_op op)
{
    return op == FP4_COLL_ALL_REDUCE ? sizeof(uint16_t) : sizeof(uint32_t);
}

/* Fill r's send buffer, poison its receive buffer. */
static fp4_status fill(const coll_job *j, fp4_nccl_comms *c, nccl_rank *r, void *send, void *recv, fp4_err *err)
{
    fp4_status st = FP4_OK;
    if (j->op == FP4_COLL_ALL_REDUCE)
        ar_fill<<<coll_blocks(j->count), COLL_THREADS, 0, r->stream>>>((uint16_t *)send, j->count, r->rank,
                                                                       j->set->seed, j->amp);
    else
        a2a_fill<<<coll_blocks(j->count), COLL_THREADS, 0, r->stream>>>((uint32_t *)send, j->chunk, c->nranks,
                                                                        r->rank, j->set->seed);
    NCCL_RANK_CUDA(err, st, r, cudaGetLastError(), out);
    NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(recv, 0xff, j->bytes, r->stream), out);
out:
    return st;
}

/* Check r's receive buffer against the exact answer into o. counters is two
 * device words: wrong elements and the first one's index. */
static fp4_status check(coll_job *j, fp4_nccl_comms *c, nccl_rank *r, const void *recv,
                        unsigned long long *counters, coll_rank_out *o, fp4_err *err)
{
    fp4_status st = FP4_OK;
    unsigned long long host[2];
    NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(counters, 0, sizeof(unsigned long long), r->stream), out);
    NCCL_RANK_CUDA(err, st, r, cudaMemsetAsync(counters + 1, 0xff, sizeof(unsigned long long), r->stream), out);
    if (j->op == FP4_COLL_ALL_REDUCE)
        ar_check<<<coll_blocks(j->count), COLL_THREADS, 0, r->stream>>>(
            (const uint16_t *)recv, j->count, c->nranks, j->set->seed, j->amp, counters, counters + 1);
    else
        a2a_check<<<coll_blocks(j->count), COLL_THREADS, 0, r->stream>>>(
            (const uint32_t *)recv, j->chunk, c->nranks, r->rank, j->set->seed, counters, counters + 1);
    NCCL_RANK_CUDA(err, st, r, cudaGetLastError(), out);
    NCCL_RANK_CUDA(err, st, r, cudaMemcpyAsync(host, counters, sizeof host, cudaMemcpyDeviceToHost, r->stream), out);
    NCCL_RANK_CUDA(err, st, r, cudaStreamSynchronize(r->stream), out);
    o->bad = (double)host[0];
    if (host[0] == 0) return FP4_OK;
    o->first = (double)host[1];
    if (j->op == FP4_COLL_ALL_REDUCE) {
        uint16_t v = 0;
        NCCL_RANK_CUDA(err, st, r, cudaMemcpy(&v, (const uint16_t *)recv + host[1], sizeof v, cudaMemcpyDeviceToHost),
                       out);
        o->got = bf16_value(v);
        o->want = ar_sum(j->set->seed, c->nranks, (size_t)host[1], j->amp);
    } else {
        uint32_t v = 0;
        NCCL_RANK_CUDA(err, st, r, cudaMemcpy(&v, (const uint32_t *)recv + host[1], sizeof v, cudaMemcpyDeviceToHost),
                       out);
        o->got = v;
        o->want = a2a_word(j->set->seed, (int)(host[1] / j->chunk), r->rank, (size_t)(host[1] % j->chunk));
    }
out:
    return st;
}

/* The planted fault of the check's own test: the middle element received
 * changes (bit 6 of its high byte: a bf16 exponent bit, an all-to-all sender
 * id bit), so its value is wrong whatever it was. */
static fp4_status plant_fault(const coll_job *j, nccl_rank *r, void *recv, fp4_err *err)
{
    fp4_status st = FP4_OK;
    size_t at = (j->count / 2) * elem_size(j->op) + elem_size(j->op) - 1; /* little-endian high byte */
    unsigned char b = 0;
    NCCL_RANK_CUDA(err, st, r, cudaMemcpy(&b, (char *)recv + at, 1, cudaMemcpyDeviceToHost), out);
    b ^= 0x40;
    /* on the rank's stream, waited for: a plain cudaMemcpy from pageable memory
     * may return before its DMA lands, unordered with the (non-blocking) stream
     * on which the check then reads recv */
    NCCL_RANK_CUDA(err, st, r, cudaMemcpyAsync((char *)recv + at, &b, 1, cudaMemcpyHostToDevice, r->stream), out);
    NCCL_RANK_CUDA(err, st, r, cudaStreamSynchronize(r->stream), out);
out:
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Capture iters collectives in a graph, replay it warmup times, then reps
 * times between events, every rank starting each replay together; the
 * median per call into *median_us. Entered by every rank together (after an
 * agreement); leaves through another agreement once the graph exists, so a
 * rank that could not build it does not leave the others in a collective. */
static fp4_status time_rank(const coll_job *j, fp4_nccl_comms *c, nccl_rank *r, void *send, void *recv,
                            double *median_us, int *followed, fp4_err *err)
{
    const fp4_coll_settings *s = j->set;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaEvent_t start = NULL, stop = NULL;
    double times[COLL_MAX_REPS];
    fp4_status st = FP4_OK;
    *followed = 0;
    NCCL_RANK_CUDA(err, st, r, cudaEventCreate(&start), built);
    NCCL_RANK_CUDA(err, st, r, cudaEventCreate(&stop), built);
    /* Thread-local capture: the other ranks' threads capture at the same time
     * and must not see this capture (NCCL records its kernels into the graph) */
    NCCL_RANK_CUDA(err, st, r, cudaStreamBeginCapture(r->stream, cudaStreamCaptureModeThreadLocal), built);
    for (int i = 0; i < s->iters && st == FP4_OK; i++) st = issue(j, c, r, send, recv, err);
    { /* the capture is ended whatever happened in it */
        cudaError_t e = cudaStreamEndCapture(r->stream, &graph);
        if (st != FP4_OK) goto built;
        NCCL_RANK_CUDA(err, st, r, e, built);
    }
    NCCL_RANK_CUDA(err, st, r, cudaGraphInstantiate(&exec, graph, 0), built);
built:
    if (nccl_agree_max(c, st == FP4_OK ? NCCL_AGREE_OK : NCCL_AGREE_ERROR) != NCCL_AGREE_OK) {
        if (st == FP4_OK) {
            *followed = 1;
            st = fp4_fail(err, FP4_ERR_CUDA, "rank %d (GPU %d): stopped: another rank failed", r->rank,
                          r->device);
        }
        goto out;
    }
    for (int w = 0; w < s->warmup; w++) NCCL_RANK_CUDA(err, st, r, cudaGraphLaunch(exec, r->stream), out);
    NCCL_RANK_CUDA(err, st, r, cudaStreamSynchronize(r->stream), out);
    for (int k = 0; k < s->reps; k++) {
        float ms = 0;
        st = nccl_barrier(c, err); /* the ranks start together: no rank's time holds another's lateness */
        if (st != FP4_OK) goto out;
        NCCL_RANK_CUDA(err, st, r, cudaEventRecord(start, r->stream), out);
        NCCL_RANK_CUDA(err, st, r, cudaGraphLaunch(exec, r->stream), out);
        NCCL_RANK_CUDA(err, st, r, cudaEventRecord(stop, r->stream), out);
        NCCL_RANK_CUDA(err, st, r, cudaEventSynchronize(stop), out);
        NCCL_RANK_CUDA(err, st, r, cudaEventElapsedTime(&ms, start, stop), out);
        times[k] = 1000.0 * ms / s->iters;
    }
    qsort(times, (size_t)s->reps, sizeof times[0], cmp_double);
    *median_us = s->reps % 2 ? times[s->reps / 2] : 0.5 * (times[s->reps / 2 - 1] + times[s->reps / 2]);
out:
    if (exec && cudaGraphExecDestroy(exec) != cudaSuccess && st == FP4_OK)
        st = fp4_fail(err, FP4_ERR_CUDA, "rank %d: cudaGraphExecDestroy failed", r->rank);
    if (graph && cudaGraphDestroy(graph) != cudaSuccess && st == FP4_OK)
        st = fp4_fail(err, FP4_ERR_CUDA, "rank %d: cudaGraphDestroy failed", r->rank);
    if (start) (void)cudaEventDestroy(start);
    if (stop) (void)cudaEventDestroy(stop);
    return st;
}

/* One rank's whole job: buffers, the checked collective, the timing. */
static void coll_rank(fp4_nccl_comms *c, nccl_rank *r, void *arg, nccl_rank_result *res)
{
    coll_job *j = (coll_job *)arg;
    coll_rank_out *o = &j->out[r->rank];
    void *send = NULL, *recv = NULL;
    unsigned long long *counters = NULL;
    fp4_err *err = &res->err;
    fp4_status st = FP4_OK;
    int agreed;
    o->median_us = NAN;
    o->bad = 0;
    NCCL_RANK_CUDA(err, st, r, cudaSetDevice(r->device), ready);
    NCCL_RANK_CUDA(err, st, r, cudaMalloc(&send, j->bytes), ready);
    NCCL_RANK_CUDA(err, st, r, cudaMalloc(&recv, j->bytes), ready);
    NCCL_RANK_CUDA(err, st, r, cudaMalloc((void **)&counters, 2 * sizeof *counters), ready);
    st = fill(j, c, r, send, recv, err);
    if (st == FP4_OK) NCCL_RANK_CUDA(err, st, r, cudaStreamSynchronize(r->stream), ready);
ready: /* every rank has its buffers, or none goes on */
    agreed = nccl_agree_max(c, st == FP4_OK ? NCCL_AGREE_OK : NCCL_AGREE_ERROR);
    if (agreed != NCCL_AGREE_OK) goto stop;

    st = issue(j, c, r, send, recv, err);
    if (st == FP4_OK) NCCL_RANK_CUDA(err, st, r, cudaStreamSynchronize(r->stream), checked);
    if (st == FP4_OK && j->set->fault_rank == r->rank) st = plant_fault(j, r, recv, err);
    if (st == FP4_OK) st = check(j, c, r, recv, counters, o, err);
checked: /* a wrong element anywhere: the row FAILED, nothing is timed */
    agreed = nccl_agree_max(c, st != FP4_OK ? NCCL_AGREE_ERROR : o->bad > 0 ? NCCL_AGREE_MISMATCH : NCCL_AGREE_OK);
    if (r->rank == 0 || c->launcher == FP4_NCCL_MPI) j->verify_agreed = agreed;
    if (agreed != NCCL_AGREE_OK) goto stop;

    st = time_rank(j, c, r, send, recv, &o->median_us, &res->followed, err);
    goto out;
stop:
    if (st == FP4_OK && agreed == NCCL_AGREE_ERROR) {
        res->followed = 1;
        st = fp4_fail(err, FP4_ERR_CUDA, "rank %d (GPU %d): stopped: another rank failed", r->rank, r->device);
    }
out:
    if (counters) (void)cudaFree(counters);
    if (recv) (void)cudaFree(recv);
    if (send) (void)cudaFree(send);
    res->st = st;
}

fp4_status fp4_coll_run(fp4_nccl_comms *c, fp4_coll_op op, size_t bytes, const fp4_coll_settings *set,
                        fp4_coll_row *row, fp4_err *err)
{
    coll_job *j;
    fp4_status st;
    int n;
    if (!c || !set || !row || (op != FP4_COLL_ALL_REDUCE && op != FP4_COLL_ALL_TO_ALL))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_coll_run: bad arguments");
    if (set->iters < 1 || set->reps < 1 || set->reps > COLL_MAX_REPS || set->warmup < 0)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "iters %d (>= 1), reps %d (1..%d), warmup %d (>= 0)", set->iters,
                        set->reps, COLL_MAX_REPS, set->warmup);
    n = c->nranks;
    j = (coll_job *)calloc(1, sizeof *j);
    if (!j) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for a collective job");
    j->op = op;
    j->set = set;
    j->bytes = fp4_coll_round_bytes(op, bytes, n);
    j->count = j->bytes / elem_size(op);
    j->chunk = j->count / (size_t)n;
    j->amp = 256 / n > 64 ? 64 : 256 / n; /* amp * n <= 256: every partial sum exact in bf16 */
    if (j->amp < 1) j->amp = 1;

    memset(row, 0, sizeof *row);
    row->op = op;
    row->nranks = n;
    row->bytes = j->bytes;
    row->count = j->count;
    row->iters = set->iters;
    row->reps = set->reps;
    row->time_us = row->algbw_gbps = row->busbw_gbps = NAN;
    row->slowest_rank = -1;
    for (int i = 0; i < FP4_NCCL_MAX_RANKS; i++) row->rank_us[i] = NAN;

    st = nccl_run_ranks(c, coll_rank, j, err);
    if (st == FP4_OK) st = nccl_share_slots(c, j->out, sizeof j->out[0], err);
    if (st != FP4_OK) goto out;
    row->verified = j->verify_agreed == NCCL_AGREE_OK;
    if (!row->verified) {
        for (int k = 0; k < n; k++) {
            const coll_rank_out *o = &j->out[k];
            if (o->bad == 0) continue;
            if (op == FP4_COLL_ALL_REDUCE)
                snprintf(row->why, sizeof row->why,
                         "rank %d: %.0f of %zu elements wrong, the first at %.0f: %g, the sum is %g", k, o->bad,
                         j->count, o->first, o->got, o->want);
            else
                snprintf(row->why, sizeof row->why,
                         "rank %d: %.0f of %zu words wrong, the first at %.0f (chunk of rank %.0f): 0x%08llx, "
                         "want 0x%08llx (sender << 24 | receiver << 16 | index)",
                         k, o->bad, j->count, o->first, floor(o->first / (double)j->chunk),
                         (unsigned long long)o->got, (unsigned long long)o->want);
            break;
        }
        goto out;
    }
    for (int k = 0; k < n; k++) {
        row->rank_us[k] = j->out[k].median_us;
        if (row->slowest_rank < 0 || j->out[k].median_us > row->time_us) {
            row->time_us = j->out[k].median_us;
            row->slowest_rank = k;
        }
    }
    row->algbw_gbps = (double)row->bytes / (row->time_us * 1e-6) / 1e9;
    row->busbw_gbps = row->algbw_gbps * fp4_coll_bus_factor(op, n);
out:
    free(j);
    return st;
}

#endif /* FP4_HAVE_NCCL */
