/* Development harness (CMake -DFP4_DEV_STAMPS=ON builds it as fp4stamps; used
 * by bench/stamps-mid9.sh): why are the SMs idle for half of v9-mid's main
 * kernel? Runs fp4-sm90 on one shape (the variant FP4_SM90_KERNEL forces; only
 * v9-mid's main kernel records stamps), flushes L2, runs once more, then prints
 * each CTA's SM, start and main-loop end (%globaltimer, us after the earliest
 * start) and a summary: start skew, main-loop durations, span, and the busy
 * fraction of the SMs used. Usage: fp4stamps M N K [runs before the stamped one] */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/backends.h"
#include "fp4/backend.h"
#include "fp4/format.h"

int fp4_sm90_dev_stamps_clear(void);
int fp4_sm90_dev_stamps(unsigned long long *out, int max_ctas);

#define MAX_CTAS 8192
#define NST 6 /* SM, start, main loop done, partial tile sent, end, v11: barrier passed */

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static float uniform_pm1(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int fail(const char *what, const fp4_err *err)
{
    fprintf(stderr, "fp4stamps: %s: %s\n", what, fp4_err_text(err));
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: fp4stamps M N K [warm runs]\n");
        return 2;
    }
    const int64_t m = atoll(argv[1]), n = atoll(argv[2]), k = atoll(argv[3]);
    const int warm = argc > 4 ? atoi(argv[4]) : 3;
    if (m < 1 || n < 1 || k < 16 || k % 16) {
        fprintf(stderr, "fp4stamps: bad shape %lldx%lldx%lld\n", (long long)m, (long long)n, (long long)k);
        return 2;
    }
    fp4_err err;
    fp4_matrix a, b;
    float *xa = malloc((size_t)(m * k) * 4), *xb = malloc((size_t)(n * k) * 4);
    if (!xa || !xb) return 1;
    uint64_t seed = 1;
    for (int64_t i = 0; i < m * k; i++) xa[i] = uniform_pm1(&seed);
    for (int64_t i = 0; i < n * k; i++) xb[i] = uniform_pm1(&seed);
    if (fp4_quantize_f32(xa, m, k, 0.0f, &a, &err) != FP4_OK) return fail("quantize A", &err);
    if (fp4_quantize_f32(xb, n, k, 0.0f, &b, &err) != FP4_OK) return fail("quantize B", &err);
    free(xa);
    free(xb);

    const fp4_backend_ops *ops = &fp4_backend_fp4_sm90;
    void *inst = NULL, *plan = NULL;
    fp4_gemm_problem pr;
    pr.shape.m = m;
    pr.shape.n = n;
    pr.shape.k = k;
    pr.a = &a;
    pr.b = &b;
    pr.alpha = a.global_scale * b.global_scale;
    if (ops->open(&inst, &err) != FP4_OK) return fail("open", &err);
    if (ops->prepare(inst, &pr, 1, &plan, &err) != FP4_OK) return fail("prepare", &err);
    printf("fp4stamps: %lldx%lldx%lld, variant %s\n", (long long)m, (long long)n, (long long)k,
           ops->variant(plan));
    void *flush = NULL;
    const size_t flush_bytes = (size_t)256 << 20; /* > L2 (60 MiB) */
    if (cudaMalloc(&flush, flush_bytes) != cudaSuccess) return 1;
    for (int r = 0; r < warm; r++)
        if (ops->run(plan, 0, NULL, &err) != FP4_OK) return fail("run", &err);
    if (cudaMemset(flush, 1, flush_bytes) != cudaSuccess) return 1;
    if (fp4_sm90_dev_stamps_clear() != 0 || cudaDeviceSynchronize() != cudaSuccess) return 1;
    if (ops->run(plan, 0, NULL, &err) != FP4_OK) return fail("run", &err);
    if (cudaDeviceSynchronize() != cudaSuccess) return 1;

    static unsigned long long st[MAX_CTAS * NST];
    const int got = fp4_sm90_dev_stamps(st, MAX_CTAS);
    if (got < 0) return 1;
    unsigned long long t0 = ~0ull, t_last = 0, t_end = 0;
    int ctas = 0;
    for (int c = 0; c < got; c++)
        if (st[NST * c + 1]) {
            ctas++;
            if (st[NST * c + 1] < t0) t0 = st[NST * c + 1];
            if (st[NST * c + 2] > t_last) t_last = st[NST * c + 2];
            if (st[NST * c + 4] > t_end) t_end = st[NST * c + 4];
        }
    if (!ctas) {
        printf("fp4stamps: no stamps (not v9-mid, or not a FP4_DEV_STAMPS build)\n");
        return 1;
    }
    static double dur[MAX_CTAS], start[MAX_CTAS], sent[MAX_CTAS], fin[MAX_CTAS], pass[MAX_CTAS];
    int npass = 0;
    static double sm_busy[1024];
    int nsm = 0, i = 0;
    double busy = 0.0;
    printf("cta sm start_us loop_end_us sent_us end_us (us after the earliest start)\n");
    for (int c = 0; c < got; c++) {
        if (!st[NST * c + 1]) continue;
        const double s = (double)(st[NST * c + 1] - t0) / 1e3, e = (double)(st[NST * c + 2] - t0) / 1e3;
        const double snt = (double)(st[NST * c + 3] - t0) / 1e3, f = (double)(st[NST * c + 4] - t0) / 1e3;
        printf("%d %llu %.2f %.2f %.2f %.2f\n", c, st[NST * c], s, e, snt, f);
        if (st[NST * c + 5]) pass[npass++] = (double)(st[NST * c + 5] - t0) / 1e3;
        sent[i] = snt;
        fin[i] = f;
        start[i] = s;
        dur[i++] = e - s;
        busy += e - s;
        if (st[NST * c] < 1024) {
            if (sm_busy[st[NST * c]] == 0.0) nsm++;
            sm_busy[st[NST * c]] += e - s;
        }
    }
    qsort(dur, (size_t)ctas, sizeof dur[0], cmp_double);
    qsort(start, (size_t)ctas, sizeof start[0], cmp_double);
    qsort(sent, (size_t)ctas, sizeof sent[0], cmp_double);
    qsort(fin, (size_t)ctas, sizeof fin[0], cmp_double);
    const double span = (double)(t_last - t0) / 1e3;
    printf("summary: %d CTAs on %d SMs; start skew %.2f us (median start %.2f); main loop "
           "min %.2f median %.2f max %.2f us; span %.2f us; SMs used busy %.0f%% of the span\n",
           ctas, nsm, start[ctas - 1], start[ctas / 2], dur[0], dur[ctas / 2], dur[ctas - 1], span,
           100.0 * busy / ((double)nsm * span));
    printf("summary: partial tiles sent by %.2f us (median %.2f); CTAs end by %.2f us (median %.2f): "
           "main loops %.0f%% of the kernel's %.2f us\n",
           sent[ctas - 1], sent[ctas / 2], fin[ctas - 1], fin[ctas / 2],
           100.0 * span / ((double)(t_end - t0) / 1e3), (double)(t_end - t0) / 1e3);
    if (npass) { /* v11: when each CTA passed its tile's barrier */
        qsort(pass, (size_t)npass, sizeof pass[0], cmp_double);
        printf("summary: tile barriers passed from %.2f us (median %.2f, last %.2f)\n", pass[0],
               pass[npass / 2], pass[npass - 1]);
    }
    cudaFree(flush);
    ops->release(plan);
    ops->close(inst);
    fp4_matrix_free(&a);
    fp4_matrix_free(&b);
    return 0;
}
