/* Seeded MoE weights and activations (bench/moe_inputs.h). */
#include "bench/moe_inputs.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/inputs.h"

#define NORMAL_LEVELS 4096 /* 12 bits of a draw pick one */
/* gpt-oss's gate_up weights times 4: its outputs then have a standard
 * deviation of about 4, so that some 4% of gate values pass the clamp limit of
 * 7 and 8% of up values its +-7; at 1 (the other models') none would, and a
 * kernel that left out a clamp would verify. */
#define OAI_GATE_UP_GAIN 4.0
#define MAX_THREADS 64

/* table[i] = the (i + 1/2) / 4096 quantile of N(0,1), by bisection on
 * Phi(x) = erfc(-x / sqrt 2) / 2 (monotone; 80 halvings of [-9, 9] reach
 * double precision). Symmetric: table[4095 - i] = -table[i]. */
static void normal_table(float *table)
{
    for (int i = 0; i < NORMAL_LEVELS / 2; i++) {
        const double q = (i + 0.5) / NORMAL_LEVELS;
        double lo = -9.0, hi = 0.0;
        for (int it = 0; it < 80; it++) {
            const double mid = 0.5 * (lo + hi);
            if (0.5 * erfc(-mid / sqrt(2.0)) < q) lo = mid;
            else hi = mid;
        }
        table[i] = (float)(0.5 * (lo + hi));
        table[NORMAL_LEVELS - 1 - i] = -table[i];
    }
}

/* n bf16 N(0,1) values from rng, five 12-bit draws per 64-bit word. */
static void normal_values(fp4_rng *rng, const float *table, uint16_t *x, size_t n)
{
    uint64_t word = 0;
    int left = 0;
    for (size_t i = 0; i < n; i++) {
        if (left == 0) {
            word = fp4_rng_next(rng);
            left = 5;
        }
        x[i] = fp4_bf16_from_float(table[word & (NORMAL_LEVELS - 1)]);
        word >>= 12;
        left--;
    }
}

static uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t h = seed * 0x9E3779B97F4A7C15ull;
    h ^= (a + 1) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 29)) * 0x94D049BB133111EBull;
    h ^= (b + 1) * 0xD6E8FEB86659FD93ull;
    h = (h ^ (h >> 31)) * 0x9E3779B97F4A7C15ull;
    return h ^ ((c + 1) * 0xC2B2AE3D27D4EB4Full);
}

static int online_threads(void)
{
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > MAX_THREADS ? MAX_THREADS : (int)n);
}

/* ---- weights ------------------------------------------------------------------------ */

typedef struct weight_job {
    const fp4_moe_dims *d;
    fp4_data_kind kind;
    uint64_t seed;
    fp4_moe_weights *w;
    const float *table;
    atomic_int next;  /* task 2e: gate_up of expert e; 2e + 1: its down */
    atomic_int failed;
    fp4_err first_err; /* written once, by the worker that sets failed */
} weight_job;

/* One matrix: rows x cols of the job's kind, global scale x gain / sqrt(cols). */
static fp4_status make_matrix(const weight_job *j, int64_t rows, int64_t cols, double gain,
                              uint64_t seed, fp4_matrix *m, uint16_t **scratch, fp4_err *err)
{
    fp4_status st;
    if (j->kind == FP4_DATA_GAUSSIAN) {
        fp4_rng rng;
        if (!*scratch && !(*scratch = malloc((size_t)rows * (size_t)cols * sizeof **scratch)))
            return fp4_fail(err, FP4_ERR_NOMEM, "no memory for a %lldx%lld weight",
                            (long long)rows, (long long)cols);
        fp4_rng_seed(&rng, seed);
        normal_values(&rng, j->table, *scratch, (size_t)rows * (size_t)cols);
        st = fp4_quantize_bf16(*scratch, rows, cols, 0.0f, m, err);
    } else {
        st = fp4_make_operand(j->kind, rows, cols, seed, m, err);
    }
    if (st == FP4_OK)
        m->global_scale = (float)((double)m->global_scale * gain / sqrt((double)cols));
    return st;
}

static void *weight_worker(void *arg)
{
    weight_job *j = arg;
    uint16_t *scratch[2] = {NULL, NULL}; /* one per matrix shape */
    for (;;) {
        const int t = atomic_fetch_add(&j->next, 1);
        if (t >= 2 * j->d->experts || atomic_load(&j->failed)) break;
        const int e = t / 2, down = t % 2;
        const int64_t rows = down ? j->d->hidden : 2 * j->d->inter;
        const int64_t cols = down ? j->d->inter : j->d->hidden;
        fp4_matrix *m = down ? &j->w->down[e] : &j->w->gate_up[e];
        const double gain = !down && j->d->act == FP4_MOE_ACT_SWIGLU_OAI ? OAI_GATE_UP_GAIN : 1.0;
        fp4_err err;
        fp4_err_clear(&err);
        if (make_matrix(j, rows, cols, gain, mix_seed(j->seed, (uint64_t)down, (uint64_t)e, 17), m,
                        &scratch[down], &err) != FP4_OK) {
            int expected = 0;
            if (atomic_compare_exchange_strong(&j->failed, &expected, 1)) j->first_err = err;
            break;
        }
    }
    free(scratch[0]);
    free(scratch[1]);
    return NULL;
}

fp4_status fp4_moe_make_weights(const fp4_moe_dims *d, fp4_data_kind kind, uint64_t seed,
                                fp4_moe_weights *w, fp4_err *err)
{
    fp4_status st;
    pthread_t tids[MAX_THREADS];
    int started = 0, threads = online_threads();
    weight_job job;
    float table[NORMAL_LEVELS];
    memset(w, 0, sizeof *w);
    if (!d) return fp4_fail(err, FP4_ERR_INVALID_ARG, "MoE weights: NULL dims");
    if ((st = fp4_moe_dims_check(d, err)) != FP4_OK) return st;
    if ((st = fp4_moe_weights_init(w, d->experts, err)) != FP4_OK) return st;
    normal_table(table);
    memset(&job, 0, sizeof job);
    job.d = d;
    job.kind = kind;
    job.seed = seed;
    job.w = w;
    job.table = table;
    atomic_init(&job.next, 0);
    atomic_init(&job.failed, 0);
    fp4_err_clear(&job.first_err);
    if (threads > 2 * d->experts) threads = 2 * d->experts;
    for (int i = 1; i < threads; i++) /* the calling thread is the first worker */
        if (pthread_create(&tids[started], NULL, weight_worker, &job) == 0) started++;
    weight_worker(&job);
    for (int i = 0; i < started; i++) pthread_join(tids[i], NULL);
    if (atomic_load(&job.failed)) {
        fp4_moe_weights_free(w);
        if (err) *err = job.first_err;
        return job.first_err.status != FP4_OK ? job.first_err.status : FP4_ERR_INTERNAL;
    }
    return FP4_OK;
}

/* ---- activations ---------------------------------------------------------------------- */

fp4_status fp4_moe_make_rows(int64_t rows, int64_t cols, uint64_t seed, int role, uint16_t **out,
                             fp4_err *err)
{
    float table[NORMAL_LEVELS];
    size_t n;
    *out = NULL;
    if (rows < 1 || cols < 1 || fp4_size_mul3((size_t)rows, (size_t)cols, sizeof **out, &n))
        return fp4_fail(err, FP4_ERR_SHAPE, "MoE activations: %lldx%lld", (long long)rows,
                        (long long)cols);
    uint16_t *x = malloc(n);
    if (!x)
        return fp4_fail(err, FP4_ERR_NOMEM, "no memory for %lldx%lld activations", (long long)rows,
                        (long long)cols);
    normal_table(table);
    for (int64_t r = 0; r < rows; r++) {
        fp4_rng rng;
        fp4_rng_seed(&rng, mix_seed(seed, 100 + (uint64_t)role, (uint64_t)r, (uint64_t)cols));
        normal_values(&rng, table, x + (size_t)r * (size_t)cols, (size_t)cols);
    }
    *out = x;
    return FP4_OK;
}
