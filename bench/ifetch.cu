/* fp4_ifetch: what it costs an SM to fetch code it has not run recently.
 *
 * At T = 1 a streaming MoE launch runs each block's loop only a few times, so
 * the first pass over its code could be paid in instruction fetch from L2 or
 * DRAM (docs/PERF.md, "moe", the T = 1 bullet). This program measures that
 * cost on straight-line code, where every instruction is fetched once: kernels
 * of 1024, 4096 and 10240 FFMAs (16, 64 and 160 KB of code; 16 independent
 * chains, so issue, not latency, sets the warm rate), one warp a block, one
 * block an SM, each block's duration counted in its own clocks (clock64).
 *
 * Each size has two kernels, A and B, of the same length and different code.
 * A is timed in three states:
 *   again    right after A itself (its code as close to the SM as it stays);
 *   other    after B (B's code has passed through the SM's instruction caches);
 *   flushed  after a kernel that reads 256 MB (L2 holds none of A's code,
 *            unless a cache outside L2 kept it), then B.
 * Output: per size and state, the median and the slowest block's cycles over
 * the blocks, the median over ROUNDS rounds, and cycles an instruction. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                                       \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "fp4_ifetch: %s: %s\n", #x, cudaGetErrorString(e_));      \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

#define ROUNDS 5
#define FLUSH_BYTES ((size_t)256 << 20)

/* 16 FFMAs, one on each chain; A and B differ in the sign of the multiplier. */
#define STEP16(m)                                                                      \
    a0 = fmaf(a0, m, c); a1 = fmaf(a1, m, c); a2 = fmaf(a2, m, c); a3 = fmaf(a3, m, c);     \
    a4 = fmaf(a4, m, c); a5 = fmaf(a5, m, c); a6 = fmaf(a6, m, c); a7 = fmaf(a7, m, c);     \
    a8 = fmaf(a8, m, c); a9 = fmaf(a9, m, c); a10 = fmaf(a10, m, c); a11 = fmaf(a11, m, c); \
    a12 = fmaf(a12, m, c); a13 = fmaf(a13, m, c); a14 = fmaf(a14, m, c); a15 = fmaf(a15, m, c);
#define X2(x) x x
#define X4(x) X2(x) X2(x)
#define X8(x) X4(x) X4(x)
#define X16(x) X8(x) X8(x)
#define X64(x) X16(x) X16(x) X16(x) X16(x)
#define X256(x) X64(x) X64(x) X64(x) X64(x)
#define X640(x) X256(x) X256(x) X64(x) X64(x)

/* The chains start from the first clock reading, so the compiler cannot move
 * that reading below the body; the sum is an input of an asm before the last
 * reading, so it cannot move above the body either. */
#define BODY_KERNEL(name, REPEAT, m)                                                   \
    __global__ void name(float mul, float c, float *out, long long *cycles)          \
    {                                                                                  \
        const long long t0 = clock64();                                                \
        float a0 = (float)threadIdx.x + (float)(t0 & 1);                               \
        float a1 = a0 + 1.f, a2 = a0 + 2.f, a3 = a0 + 3.f, a4 = a0 + 4.f;              \
        float a5 = a0 + 5.f, a6 = a0 + 6.f, a7 = a0 + 7.f, a8 = a0 + 8.f;              \
        float a9 = a0 + 9.f, a10 = a0 + 10.f, a11 = a0 + 11.f, a12 = a0 + 12.f;        \
        float a13 = a0 + 13.f, a14 = a0 + 14.f, a15 = a0 + 15.f;                       \
        REPEAT(STEP16(m))                                                              \
        const float s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11 + \
                        a12 + a13 + a14 + a15;                                         \
        asm volatile("" ::"f"(s));                                                     \
        const long long t1 = clock64();                                                \
        if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;                            \
        out[blockIdx.x * blockDim.x + threadIdx.x] = s;                                \
    }

BODY_KERNEL(body16_a, X64, mul)
BODY_KERNEL(body16_b, X64, -mul)
BODY_KERNEL(body64_a, X256, mul)
BODY_KERNEL(body64_b, X256, -mul)
BODY_KERNEL(body160_a, X640, mul)
BODY_KERNEL(body160_b, X640, -mul)

typedef void (*body_fn)(float, float, float *, long long *);

/* Reads the whole buffer, so L2 is left holding only its lines. */
__global__ void flush_l2(const float4 *buf, size_t n, float *sink)
{
    float acc = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = buf[i];
        acc += v.x + v.w;
    }
    if (acc == 12345.f) sink[0] = acc; /* never true: keeps the loads */
}

typedef struct probe {
    int sms;
    float *out, *sink;
    long long *cycles_dev, *cycles;
    float4 *flush_buf;
} probe;

static int cmp_ll(const void *a, const void *b)
{
    const long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void launch(const probe *p, body_fn k)
{
    k<<<p->sms, 32>>>(1.0001f, 0.5f, p->out, p->cycles_dev);
    CHECK(cudaGetLastError());
}

/* Runs k and returns the median block's cycles; *slowest gets the last block's. */
static double timed(const probe *p, body_fn k, double *slowest)
{
    launch(p, k);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(p->cycles, p->cycles_dev, (size_t)p->sms * sizeof(long long), cudaMemcpyDeviceToHost));
    qsort(p->cycles, (size_t)p->sms, sizeof(long long), cmp_ll);
    *slowest = (double)p->cycles[p->sms - 1];
    return (double)p->cycles[p->sms / 2];
}

static void flush(const probe *p)
{
    flush_l2<<<p->sms * 4, 256>>>(p->flush_buf, FLUSH_BYTES / sizeof(float4), p->sink);
    CHECK(cudaGetLastError());
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return v[n / 2];
}

int main(void)
{
    probe p;
    int dev;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&p.sms, cudaDevAttrMultiProcessorCount, dev));
    struct cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, dev));
    if (prop.major != 9 || prop.minor != 0) {
        fprintf(stderr, "fp4_ifetch: unsupported on this GPU (%s, sm_%d%d): built for sm_90a\n", prop.name,
                prop.major, prop.minor);
        return 2;
    }
    CHECK(cudaMalloc((void **)&p.flush_buf, FLUSH_BYTES));
    CHECK(cudaMemset(p.flush_buf, 0, FLUSH_BYTES));
    CHECK(cudaMalloc((void **)&p.out, (size_t)p.sms * 32 * sizeof(float)));
    CHECK(cudaMalloc((void **)&p.sink, sizeof(float)));
    CHECK(cudaMalloc((void **)&p.cycles_dev, (size_t)p.sms * sizeof(long long)));
    p.cycles = (long long *)malloc((size_t)p.sms * sizeof(long long));
    if (!p.cycles) {
        fprintf(stderr, "fp4_ifetch: out of host memory\n");
        return 1;
    }

    const struct {
        const char *name;
        body_fn a, b;
        int ffmas;
    } sizes[] = {{"16 KB", body16_a, body16_b, 1024}, {"64 KB", body64_a, body64_b, 4096},
                 {"160 KB", body160_a, body160_b, 10240}};
    const char *states[] = {"again", "other", "flushed"};

    printf("%s, %d SMs; straight-line FFMA kernels, one warp a block, one block an SM; SM clocks, median of %d rounds\n",
           prop.name, p.sms, ROUNDS);
    printf("%-7s %-8s %12s %12s %14s\n", "code", "state", "median blk", "slowest blk", "cycles/instr");
    for (int s = 0; s < 3; s++) {
        double med[3][ROUNDS], slow[3][ROUNDS];
        launch(&p, sizes[s].a); /* loads both modules before anything is timed */
        launch(&p, sizes[s].b);
        CHECK(cudaDeviceSynchronize());
        for (int r = 0; r < ROUNDS; r++) {
            launch(&p, sizes[s].a);
            med[0][r] = timed(&p, sizes[s].a, &slow[0][r]);
            launch(&p, sizes[s].b);
            med[1][r] = timed(&p, sizes[s].a, &slow[1][r]);
            flush(&p);
            launch(&p, sizes[s].b);
            med[2][r] = timed(&p, sizes[s].a, &slow[2][r]);
        }
        for (int st = 0; st < 3; st++) {
            const double m = median(med[st], ROUNDS), sl = median(slow[st], ROUNDS);
            printf("%-7s %-8s %12.0f %12.0f %14.2f\n", sizes[s].name, states[st], m, sl, m / sizes[s].ffmas);
        }
    }
    CHECK(cudaFree(p.flush_buf));
    CHECK(cudaFree(p.out));
    CHECK(cudaFree(p.sink));
    CHECK(cudaFree(p.cycles_dev));
    free(p.cycles);
    return 0;
}
