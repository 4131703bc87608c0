/* fp4_tensor_rate: the 16-bit tensor-core rate on Hopper of each MMA form the
 * fp4-sm90 kernels can use, at the token widths of MoE decode.
 *
 * The streaming MoE kernel multiplies bf16 weights (decoded in registers) by
 * 8 to 32 tokens: mma.sync m16n8k16, or wgmma m64nNk16 with A from registers
 * (RS) or both operands in shared memory (SS). The rates differ by form and
 * by N, and at 16 tokens an expert they bound the kernel (docs/PERF.md), so
 * this program measures them: every warp issues independent MMAs back to
 * back (no loads, no dependent chains longer than the pipe), and the rate is
 * counted in the SM's own clocks (clock64), so it does not depend on the
 * clock the GPU runs at.
 *
 * Output: one line per form and width: multiply-adds per clock per SM, and
 * TFLOP/s at the clock the run saw. Exit 2 on a GPU other than sm_90. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                                             \
    do {                                                                                     \
        cudaError_t e_ = (x);                                                                \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "fp4_tensor_rate: %s: %s\n", #x, cudaGetErrorString(e_));       \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

#define ITERS 4096
#define THREADS 256 /* 8 warps: two warpgroups */
#define SMEM_BYTES 16384

/* Per block: [0] its clock64 cycles from start to end, [1] its SM. */
typedef struct block_time {
    long long cycles;
    int sm;
    int pad;
} block_time;

static __device__ __forceinline__ int sm_id(void)
{
    int r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}

/* Finite bf16 operand bits that differ by thread (the compiler cannot fold them). */
static __device__ __forceinline__ uint32_t operand_bits(int i)
{
    return 0x3F803F80u ^ (((uint32_t)threadIdx.x * 0x9E37u + (uint32_t)i * 0x45u) & 0x007F007Fu);
}

static __device__ __forceinline__ void record(block_time *t, long long t0, float sink, float *out)
{
    __syncthreads();
    const long long t1 = clock64();
    if (threadIdx.x == 0) {
        t[blockIdx.x].cycles = t1 - t0;
        t[blockIdx.x].sm = sm_id();
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = sink;
}

/* mma.sync m16n8k16: 8 independent accumulators a warp, each MMA 2048 multiply-adds. */
__global__ void __launch_bounds__(THREADS) mma_sync_rate(block_time *t, float *out)
{
    const uint32_t a0 = operand_bits(0), a1 = operand_bits(1), a2 = operand_bits(2),
                   a3 = operand_bits(3), b0 = operand_bits(4), b1 = operand_bits(5);
    float acc[8][4];
    for (int j = 0; j < 8; j++)
        for (int q = 0; q < 4; q++) acc[j][q] = 0.0f;
    __syncthreads();
    const long long t0 = clock64();
    for (int it = 0; it < ITERS; it++) {
#pragma unroll
        for (int j = 0; j < 8; j++)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                         "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    float s = 0.0f;
    for (int j = 0; j < 8; j++)
        for (int q = 0; q < 4; q++) s += acc[j][q];
    record(t, t0, s, out);
}

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HAVE_WGMMA 1
#endif

#ifdef HAVE_WGMMA
/* K-major, 128-byte swizzle descriptor (the operands' contents do not matter
 * for the rate, only that the addresses are valid) */
static __device__ __forceinline__ uint64_t desc_sw128(uint32_t saddr)
{
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
#endif

/* The accumulator lists of the wgmma widths (N / 2 floats a thread). */
#define ACC4 "{%0,%1,%2,%3}"
#define ACC8 "{%0,%1,%2,%3,%4,%5,%6,%7}"
#define ACC12 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}"
#define ACC16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define OUT4(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define OUT8(d) OUT4(d), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define OUT12(d) OUT8(d), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
#define OUT16(d) OUT12(d), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])

/* One kernel per (form, N): each warpgroup alternates two accumulator sets,
 * 4 wgmmas (the k16 slices of a 64-k step) a set, keeping one group in flight
 * while it issues the next (wait_group 1), as a pipelined kernel does. */
#ifdef HAVE_WGMMA
#define WG_BODY(ISSUE)                                                                       \
    __shared__ __align__(1024) unsigned char smem[SMEM_BYTES];                               \
    for (int i = threadIdx.x; i < SMEM_BYTES / 4; i += blockDim.x)                           \
        ((uint32_t *)smem)[i] = operand_bits(i);                                             \
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");                             \
    __syncthreads();                                                                         \
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);                         \
    const uint64_t da = desc_sw128(sbase), db = desc_sw128(sbase + 8192);                    \
    const uint32_t a0 = operand_bits(0), a1 = operand_bits(1), a2 = operand_bits(2),         \
                   a3 = operand_bits(3);                                                     \
    float x[16], y[16];                                                                      \
    for (int i = 0; i < 16; i++) x[i] = y[i] = 0.0f;                                         \
    __syncthreads();                                                                         \
    const long long t0 = clock64();                                                          \
    for (int it = 0; it < ITERS; it++) {                                                     \
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");                              \
        for (int j = 0; j < 4; j++) ISSUE(x, j);                                             \
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");                       \
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");                       \
        for (int j = 0; j < 4; j++) ISSUE(y, j);                                             \
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");                       \
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");                       \
    }                                                                                        \
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");                           \
    float s = 0.0f;                                                                          \
    for (int i = 0; i < 16; i++) s += x[i] + y[i];                                           \
    (void)da;                                                                                \
    (void)a0, (void)a1, (void)a2, (void)a3;                                                  \
    record(t, t0, s, out);
#else
#define WG_BODY(ISSUE) record(t, clock64(), 0.0f, out);
#endif

/* The operand numbering differs by width, so each form is spelled out. */
#define RS_ISSUE(N, NACC, ACC, OUT)                                                          \
    static __device__ __forceinline__ void rs_##N(float *d, uint32_t a0, uint32_t a1,        \
                                                  uint32_t a2, uint32_t a3, uint64_t b)      \
    {                                                                                        \
        asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " ACC         \
                     ", {%" #NACC ",%" RS_PLUS1_##NACC ",%" RS_PLUS2_##NACC                  \
                     ",%" RS_PLUS3_##NACC "}, %" RS_PLUS4_##NACC ", 1, 1, 1, 0;"              \
                     : OUT(d)                                                                \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));                          \
    }
#define RS_PLUS1_4 "5"
#define RS_PLUS2_4 "6"
#define RS_PLUS3_4 "7"
#define RS_PLUS4_4 "8"
#define RS_PLUS1_8 "9"
#define RS_PLUS2_8 "10"
#define RS_PLUS3_8 "11"
#define RS_PLUS4_8 "12"
#define RS_PLUS1_12 "13"
#define RS_PLUS2_12 "14"
#define RS_PLUS3_12 "15"
#define RS_PLUS4_12 "16"
#define RS_PLUS1_16 "17"
#define RS_PLUS2_16 "18"
#define RS_PLUS3_16 "19"
#define RS_PLUS4_16 "20"

#define SS_ISSUE(N, NACC, ACC, OUT)                                                          \
    static __device__ __forceinline__ void ss_##N(float *d, uint64_t a, uint64_t b)          \
    {                                                                                        \
        asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 " ACC         \
                     ", %" #NACC ", %" RS_PLUS1_##NACC ", 1, 1, 1, 0, 0;"                      \
                     : OUT(d)                                                                \
                     : "l"(a), "l"(b));                                                      \
    }

#ifdef HAVE_WGMMA
RS_ISSUE(8, 4, ACC4, OUT4)
RS_ISSUE(16, 8, ACC8, OUT8)
RS_ISSUE(24, 12, ACC12, OUT12)
RS_ISSUE(32, 16, ACC16, OUT16)
SS_ISSUE(8, 4, ACC4, OUT4)
SS_ISSUE(16, 8, ACC8, OUT8)
SS_ISSUE(24, 12, ACC12, OUT12)
SS_ISSUE(32, 16, ACC16, OUT16)
#endif

#define RS_KERNEL(N)                                                                         \
    __global__ void __launch_bounds__(THREADS) rs_rate_##N(block_time *t, float *out)        \
    {                                                                                        \
        WG_BODY(RS_CALL_##N)                                                                 \
    }
#define SS_KERNEL(N)                                                                         \
    __global__ void __launch_bounds__(THREADS) ss_rate_##N(block_time *t, float *out)        \
    {                                                                                        \
        WG_BODY(SS_CALL_##N)                                                                 \
    }
#define RS_CALL_8(d, j) rs_8(d, a0, a1, a2, a3, db + 2 * (j))
#define RS_CALL_16(d, j) rs_16(d, a0, a1, a2, a3, db + 2 * (j))
#define RS_CALL_24(d, j) rs_24(d, a0, a1, a2, a3, db + 2 * (j))
#define RS_CALL_32(d, j) rs_32(d, a0, a1, a2, a3, db + 2 * (j))
#define SS_CALL_8(d, j) ss_8(d, da + 2 * (j), db + 2 * (j))
#define SS_CALL_16(d, j) ss_16(d, da + 2 * (j), db + 2 * (j))
#define SS_CALL_24(d, j) ss_24(d, da + 2 * (j), db + 2 * (j))
#define SS_CALL_32(d, j) ss_32(d, da + 2 * (j), db + 2 * (j))
RS_KERNEL(8)
RS_KERNEL(16)
RS_KERNEL(24)
RS_KERNEL(32)
SS_KERNEL(8)
SS_KERNEL(16)
SS_KERNEL(24)
SS_KERNEL(32)

typedef void (*rate_kernel)(block_time *, float *);

/* Run k on `per_sm` blocks an SM (all resident at once); multiply-adds per
 * clock per SM from the slowest block's cycles, TFLOP/s from the events. */
static void run(const char *name, rate_kernel k, double fma_per_block, int sms, int per_sm,
                block_time *t_dev, float *out_dev)
{
    const int grid = sms * per_sm;
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    k<<<grid, THREADS>>>(t_dev, out_dev); /* warm-up: clocks up, code loaded */
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaEventRecord(e0));
    k<<<grid, THREADS>>>(t_dev, out_dev);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    block_time *t = (block_time *)malloc(sizeof(block_time) * (size_t)grid);
    if (!t) {
        fprintf(stderr, "fp4_tensor_rate: out of memory\n");
        exit(1);
    }
    CHECK(cudaMemcpy(t, t_dev, sizeof(block_time) * (size_t)grid, cudaMemcpyDeviceToHost));
    long long worst = 1;
    for (int b = 0; b < grid; b++)
        if (t[b].cycles > worst) worst = t[b].cycles;
    free(t);
    const double fma_per_clk = fma_per_block * per_sm / (double)worst;
    const double tflops = 2.0 * fma_per_block * grid / (ms * 1e-3) / 1e12;
    printf("%-26s %d blocks/SM  %7.0f FMA/clk/SM  %6.1f TFLOP/s  (%.0f MHz)\n", name, per_sm,
           fma_per_clk, tflops, worst / (ms * 1e3));
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
}

int main(void)
{
    int dev = 0, sms = 0, major = 0, minor = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, dev));
    if (major != 9 || minor != 0) {
        fprintf(stderr, "fp4_tensor_rate: unsupported on this GPU (%s, sm_%d%d): wgmma needs sm_90\n",
                prop.name, major, minor);
        return 2;
    }
    printf("%s, %d SMs; bf16 operands, fp32 accumulators; multiply-adds per SM clock\n",
           prop.name, sms);
    block_time *t_dev;
    float *out_dev;
    CHECK(cudaMalloc((void **)&t_dev, sizeof(block_time) * (size_t)sms * 2));
    CHECK(cudaMalloc((void **)&out_dev, sizeof(float) * (size_t)sms * 2 * THREADS));
    const double warps = THREADS / 32, groups = THREADS / 128;
    for (int per_sm = 1; per_sm <= 2; per_sm++)
        run("mma.sync m16n8k16", mma_sync_rate, warps * ITERS * 8 * 2048.0, sms, per_sm, t_dev,
            out_dev);
    const struct {
        const char *name;
        rate_kernel k;
        int n;
    } wg[] = {
        {"wgmma RS m64n8k16", rs_rate_8, 8},   {"wgmma RS m64n16k16", rs_rate_16, 16},
        {"wgmma RS m64n24k16", rs_rate_24, 24}, {"wgmma RS m64n32k16", rs_rate_32, 32},
        {"wgmma SS m64n8k16", ss_rate_8, 8},   {"wgmma SS m64n16k16", ss_rate_16, 16},
        {"wgmma SS m64n24k16", ss_rate_24, 24}, {"wgmma SS m64n32k16", ss_rate_32, 32},
    };
    for (size_t i = 0; i < sizeof wg / sizeof wg[0]; i++)
        run(wg[i].name, wg[i].k, groups * ITERS * 8 * 64.0 * wg[i].n * 16, sms, 1, t_dev,
            out_dev);
    CHECK(cudaFree(t_dev));
    CHECK(cudaFree(out_dev));
    return 0;
}
