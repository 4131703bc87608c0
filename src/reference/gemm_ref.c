/* The exact CPU reference GEMM, the oracle every backend is checked against.
 *
 * d[m, n] = alpha * sum_k A[m, k] * B[n, k], A [M, K], B [N, K] NVFP4.
 * Exactness: 2*e2m1 is an integer in [-12, 12] and e4m3*512 an integer in
 * [0, 229376] (subnormals are multiples of 2^-9), so every product
 * A*B = (2qa)(2qb)(512sa)(512sb) * 2^-20 is an integer times 2^-20. Per block
 * of 16, sum (2qa)(2qb) fits int32 (|.| <= 2304); times (512sa)(512sb)
 * (<= 2^35.6) it fits int64 (<= 2^47), and the sum over K/16 blocks fits
 * int64 for K <= 2^20. So the dot product is exact; the only roundings are
 * acc -> double (exact while |acc| < 2^53), the product with alpha in double,
 * and the final conversion to fp32.
 * Work is split into (row tile, column tile) tasks taken by pthreads. */
#include "fp4/reference.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REF_MAX_K (1 << 20)
#define TILE_M 8
#define TILE_N 64

/* The matrix decoded to integers: values [rows, K] int8 (2*e2m1), scales
 * [rows, K/16] int32 (512*e4m3). */
typedef struct int_matrix {
    int8_t *v;
    int32_t *s;
} int_matrix;

typedef struct ref_job {
    const int_matrix *a, *b;
    int64_t m, n, k;
    double alpha;
    float *d;
    int64_t tiles_n, tiles_total;
    atomic_llong next;
} ref_job;

static fp4_status decode_ints(const fp4_matrix *x, int_matrix *out, fp4_err *err)
{
    int64_t kb_count = x->cols / FP4_BLOCK;
    int8_t val[16];
    for (int c = 0; c < 16; c++) val[c] = (int8_t)(2.0f * fp4_e2m1_decode((uint8_t)c));
    out->v = malloc((size_t)x->rows * (size_t)x->cols);
    out->s = malloc((size_t)x->rows * (size_t)kb_count * sizeof(int32_t));
    if (!out->v || !out->s) return fp4_fail(err, FP4_ERR_NOMEM, "reference GEMM: no memory");
    for (int64_t r = 0; r < x->rows; r++) {
        const uint8_t *codes = x->codes + r * (x->cols / 2);
        int8_t *v = out->v + r * x->cols;
        for (int64_t c = 0; c < x->cols / 2; c++) {
            v[2 * c] = val[codes[c] & 15];
            v[2 * c + 1] = val[codes[c] >> 4];
        }
        for (int64_t kb = 0; kb < kb_count; kb++) {
            uint8_t byte = x->scales[r * kb_count + kb];
            float s = fp4_e4m3_decode(byte);
            if (isnan(s) || s < 0.0f)
                return fp4_fail(err, FP4_ERR_INVALID_ARG,
                                "scale (%lld, %lld) is 0x%02x: NaN or negative, not a UE4M3 scale",
                                (long long)r, (long long)kb, byte);
            out->s[r * kb_count + kb] = (int32_t)(s * 512.0f);
        }
    }
    return FP4_OK;
}

/* Exact dot product of row a and row b over K (see the file comment). */
static int64_t dot_exact(const int8_t *av, const int32_t *as, const int8_t *bv,
                         const int32_t *bs, int64_t kb_count)
{
    int64_t acc = 0;
    for (int64_t kb = 0; kb < kb_count; kb++) {
        const int8_t *x = av + kb * FP4_BLOCK, *y = bv + kb * FP4_BLOCK;
        int32_t s = 0;
        for (int i = 0; i < FP4_BLOCK; i++) s += (int32_t)x[i] * (int32_t)y[i];
        acc += (int64_t)s * ((int64_t)as[kb] * (int64_t)bs[kb]);
    }
    return acc;
}

static void *ref_worker(void *arg)
{
    ref_job *job = arg;
    int64_t kb_count = job->k / FP4_BLOCK;
    for (;;) {
        int64_t t = atomic_fetch_add(&job->next, 1);
        if (t >= job->tiles_total) break;
        int64_t m0 = (t / job->tiles_n) * TILE_M, n0 = (t % job->tiles_n) * TILE_N;
        int64_t m1 = m0 + TILE_M < job->m ? m0 + TILE_M : job->m;
        int64_t n1 = n0 + TILE_N < job->n ? n0 + TILE_N : job->n;
        for (int64_t n = n0; n < n1; n++) {
            const int8_t *bv = job->b->v + n * job->k;
            const int32_t *bs = job->b->s + n * kb_count;
            for (int64_t m = m0; m < m1; m++) {
                int64_t acc = dot_exact(job->a->v + m * job->k, job->a->s + m * kb_count, bv,
                                        bs, kb_count);
                job->d[m * job->n + n] = (float)(((double)acc * 0x1p-20) * job->alpha);
            }
        }
    }
    return NULL;
}

fp4_status fp4_gemm_reference(const fp4_matrix *a, const fp4_matrix *b, float alpha, float *d,
                              int threads, fp4_err *err)
{
    fp4_status st = FP4_OK;
    int_matrix ai = {0}, bi = {0};
    pthread_t *tids = NULL;
    ref_job job;
    if (!a || !b || !d || !a->codes || !b->codes)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "reference GEMM: NULL argument");
    if ((st = fp4_check_dims(a->rows, a->cols, err)) != FP4_OK) return st;
    if ((st = fp4_check_dims(b->rows, b->cols, err)) != FP4_OK) return st;
    if (a->cols != b->cols)
        return fp4_fail(err, FP4_ERR_SHAPE, "reference GEMM: A has K=%lld, B has K=%lld",
                        (long long)a->cols, (long long)b->cols);
    if (a->cols > REF_MAX_K)
        return fp4_fail(err, FP4_ERR_SHAPE, "reference GEMM: K=%lld above 2^20, the exact limit",
                        (long long)a->cols);
    if ((st = decode_ints(a, &ai, err)) != FP4_OK) goto out;
    if ((st = decode_ints(b, &bi, err)) != FP4_OK) goto out;

    memset(&job, 0, sizeof job);
    job.a = &ai;
    job.b = &bi;
    job.m = a->rows;
    job.n = b->rows;
    job.k = a->cols;
    job.alpha = (double)alpha;
    job.d = d;
    job.tiles_n = (job.n + TILE_N - 1) / TILE_N;
    job.tiles_total = job.tiles_n * ((job.m + TILE_M - 1) / TILE_M);
    atomic_init(&job.next, 0);

    if (threads <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        threads = online > 0 ? (int)online : 1;
    }
    if (threads > 256) threads = 256;
    if ((int64_t)threads > job.tiles_total) threads = (int)job.tiles_total;
    tids = calloc((size_t)threads, sizeof *tids);
    if (!tids) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "reference GEMM: no memory");
        goto out;
    }
    int started = 0;
    for (; started < threads - 1; started++)
        if (pthread_create(&tids[started], NULL, ref_worker, &job) != 0) break;
    ref_worker(&job); /* this thread works too; it also finishes if creation failed */
    for (int i = 0; i < started; i++) pthread_join(tids[i], NULL);
out:
    free(tids);
    free(ai.v);
    free(ai.s);
    free(bi.v);
    free(bi.s);
    return st;
}

double fp4_gemm_naive_element(const fp4_matrix *a, const fp4_matrix *b, float alpha,
                              int64_t row, int64_t col)
{
    double acc = 0.0;
    for (int64_t k = 0; k < a->cols; k++)
        acc += (double)fp4_matrix_get(a, row, k) * (double)fp4_matrix_get(b, col, k);
    return acc * (double)alpha;
}
