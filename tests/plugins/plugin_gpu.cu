/* A GPU backend as a plugin: the CUDA example of the plugin ABI
 * (include/fp4/backend.h, docs/PLUGINS.md). The kernel is deliberately
 * plain: CUDA cores, 16x16 output tiles, the NVFP4 operands decoded into
 * shared memory 64 K-elements at a time, fp32 accumulation, bf16 D. It is
 * correct for every valid shape (K % 16 == 0, any M and N) and follows the
 * rules a measured backend must: one independent operand and output set per
 * copy (odd copies from -A), poison / run on the given stream, and run()
 * capturable in a CUDA graph (a launch only: no allocation, no sync).
 *
 * Build, from the repository root, one line (libfp4's symbols come from the
 * host; -cudart shared: the host's CUDA runtime, not a second one):
 *   nvcc -O3 -arch=sm_90 -cudart shared -shared -Xcompiler -fPIC -Iinclude tests/plugins/plugin_gpu.cu -o plugin_gpu.so
 * Run:
 *   fp4bench run --plugin ./plugin_gpu.so --backend plugin-gpu,cublas-bf16 --shape 16x2048x6144
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "fp4/backend.h"

#define TILE 16 /* a block computes TILE x TILE outputs, one a thread */
#define KC 64   /* K elements staged in shared memory per step: 4 scale blocks */
#define MAX_GRID_Y 65535

/* The instance: the device's compute capability, and where to warn. */
typedef struct gpu_inst {
    int major, minor;
    fp4_warnings *warn; /* the caller's (set_warnings), NULL until set */
} gpu_inst;

/* One operand and output set on the device: codes and plain row-major
 * scales as fp4_matrix holds them, D bf16 [m, n]. */
typedef struct gpu_copy {
    uint8_t *a, *sa, *b, *sb;
    __nv_bfloat16 *d;
} gpu_copy;

typedef struct gpu_plan {
    fp4_shape shape;
    float alpha;
    int copies;
    gpu_copy *c;           /* [copies] */
    __nv_bfloat16 *host_d; /* read_output's staging buffer [m, n] */
    fp4_warnings *warn;    /* the instance's, for release() */
} gpu_plan;

/* ---- the kernel ------------------------------------------------------------------ */

/* e2m1 code (4 bits) -> value: magnitudes 0 0.5 1 1.5 2 3 4 6, bit 3 the sign. */
static __device__ __forceinline__ float e2m1_value(unsigned code)
{
    const unsigned e = (code >> 1) & 3u, m = code & 1u;
    const float mag = e == 0 ? 0.5f * (float)m : (1.0f + 0.5f * (float)m) * (float)(1u << (e - 1u));
    return (code & 8u) ? -mag : mag;
}

/* E4M3 byte -> value (NaN bytes are refused by prepare): subnormals m * 2^-9,
 * normals (1 + m/8) * 2^(e-7), built straight into the fp32 bit pattern. */
static __device__ __forceinline__ float e4m3_value(unsigned byte)
{
    const unsigned e = (byte >> 3) & 15u, m = byte & 7u;
    const float mag = e == 0 ? (float)m * 0x1p-9f : __uint_as_float(((e + 120u) << 23) | (m << 20));
    return (byte & 0x80u) ? -mag : mag;
}

/* Four consecutive elements [row, k .. k+3] of an NVFP4 matrix [rows, kdim]
 * into out, or zeros outside it (k is a multiple of 4 and kdim of 16, so the
 * four are all inside or all outside). */
static __device__ __forceinline__ void stage4(const uint8_t *__restrict__ codes,
                                              const uint8_t *__restrict__ scales, int64_t rows,
                                              int64_t kdim, int64_t row, int64_t k, float *out)
{
    if (row >= rows || k >= kdim) {
        out[0] = out[1] = out[2] = out[3] = 0.0f;
        return;
    }
    const uint8_t *p = codes + row * (kdim / 2) + k / 2;
    const float s = e4m3_value(scales[row * (kdim / 16) + k / 16]);
    const unsigned b0 = p[0], b1 = p[1];
    out[0] = e2m1_value(b0 & 15u) * s; /* the even k in the low nibble */
    out[1] = e2m1_value(b0 >> 4) * s;
    out[2] = e2m1_value(b1 & 15u) * s;
    out[3] = e2m1_value(b1 >> 4) * s;
}

/* a [m, k/2], sa [m, k/16], b [n, k/2], sb [n, k/16] -> d [m, n] bf16 =
 * alpha * A B^T. Grid (ceil(n/16), min(ceil(m/16), 65535)), block 16x16;
 * M tiles beyond the grid are taken in strides of gridDim.y. */
static __global__ void __launch_bounds__(TILE *TILE)
    gemm_kernel(const uint8_t *__restrict__ a, const uint8_t *__restrict__ sa,
                const uint8_t *__restrict__ b, const uint8_t *__restrict__ sb, int64_t m, int64_t n,
                int64_t k, float alpha, __nv_bfloat16 *__restrict__ d)
{
    /* +1: column reads b_tile[tx][kk] of a warp fall in different banks */
    __shared__ float a_tile[TILE][KC + 1];
    __shared__ float b_tile[TILE][KC + 1];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TILE + tx;
    const int stage_row = tid / (KC / 4), stage_k = (tid % (KC / 4)) * 4; /* 256 threads x 4 = 16 x 64 */
    const int64_t col0 = (int64_t)blockIdx.x * TILE;
    const int64_t mtiles = (m + TILE - 1) / TILE;

    for (int64_t mt = blockIdx.y; mt < mtiles; mt += gridDim.y) {
        const int64_t row0 = mt * TILE;
        float acc = 0.0f;
        for (int64_t k0 = 0; k0 < k; k0 += KC) {
            float va[4], vb[4];
            stage4(a, sa, m, k, row0 + stage_row, k0 + stage_k, va);
            stage4(b, sb, n, k, col0 + stage_row, k0 + stage_k, vb);
            for (int i = 0; i < 4; i++) {
                a_tile[stage_row][stage_k + i] = va[i];
                b_tile[stage_row][stage_k + i] = vb[i];
            }
            __syncthreads();
#pragma unroll 16
            for (int kk = 0; kk < KC; kk++) acc = fmaf(a_tile[ty][kk], b_tile[tx][kk], acc);
            __syncthreads();
        }
        const int64_t row = row0 + ty, col = col0 + tx;
        if (row < m && col < n) d[row * n + col] = __float2bfloat16_rn(acc * alpha);
    }
}

/* ---- the backend ------------------------------------------------------------------ */

/* err from a failed CUDA call: FP4_ERR_CUDA, naming what failed. */
static fp4_status cuda_fail(fp4_err *err, cudaError_t e, const char *what)
{
    return fp4_fail(err, FP4_ERR_CUDA, "plugin-gpu: %s: %s", what, cudaGetErrorString(e));
}

/* Any CUDA GPU this file was compiled for: the kernel's image must load. */
static fp4_status gpu_open(void **inst, fp4_err *err)
{
    int count = 0, dev = 0;
    cudaError_t e;
    cudaFuncAttributes attr;
    *inst = NULL;
    if ((e = cudaGetDeviceCount(&count)) != cudaSuccess || count == 0) {
        (void)cudaGetLastError(); /* not sticky: leave no error behind */
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "plugin-gpu: no CUDA GPU (%s)",
                        e != cudaSuccess ? cudaGetErrorString(e) : "no device");
    }
    gpu_inst *g = (gpu_inst *)calloc(1, sizeof *g);
    if (!g) return fp4_fail(err, FP4_ERR_NOMEM, "plugin-gpu: no host memory");
    if ((e = cudaGetDevice(&dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&g->major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&g->minor, cudaDevAttrComputeCapabilityMinor, dev)) != cudaSuccess) {
        free(g);
        return cuda_fail(err, e, "device attributes");
    }
    if ((e = cudaFuncGetAttributes(&attr, gemm_kernel)) != cudaSuccess) {
        (void)cudaGetLastError();
        fp4_fail(err, FP4_ERR_UNSUPPORTED, "plugin-gpu: not built for sm_%d%d (%s); rebuild with -arch=sm_%d%d",
                 g->major, g->minor, cudaGetErrorString(e), g->major, g->minor);
        free(g);
        return FP4_ERR_UNSUPPORTED;
    }
    *inst = g;
    return FP4_OK;
}

static void gpu_close(void *inst)
{
    free(inst);
}

static void gpu_set_warnings(void *inst, fp4_warnings *w)
{
    ((gpu_inst *)inst)->warn = w;
}

/* Every valid shape whose N fits the grid's x dimension. */
static fp4_status gpu_supports(void *inst, const fp4_shape *s, fp4_err *err)
{
    fp4_status st = fp4_shape_check(s, err);
    if (st != FP4_OK) return st;
    if ((s->n + TILE - 1) / TILE > INT_MAX)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "plugin-gpu: N = %lld needs more than 2^31 - 1 blocks",
                        (long long)s->n);
    return FP4_OK;
}

/* Free a device buffer; a failure is a warning (release cannot fail). */
static void device_free(void *ptr, const char *what, fp4_warnings *w)
{
    cudaError_t e;
    if (ptr && (e = cudaFree(ptr)) != cudaSuccess)
        fp4_warn(w, "plugin-gpu: cudaFree of %s: %s", what, cudaGetErrorString(e));
}

static void gpu_release(void *plan)
{
    gpu_plan *p = (gpu_plan *)plan;
    if (!p) return;
    for (int i = 0; p->c && i < p->copies; i++) {
        device_free(p->c[i].a, "A codes", p->warn);
        device_free(p->c[i].sa, "A scales", p->warn);
        device_free(p->c[i].b, "B codes", p->warn);
        device_free(p->c[i].sb, "B scales", p->warn);
        device_free(p->c[i].d, "D", p->warn);
    }
    free(p->c);
    free(p->host_d);
    free(p);
}

/* A device copy of n bytes at src into *dst. */
static fp4_status upload(uint8_t **dst, const uint8_t *src, size_t n, const char *what, fp4_err *err)
{
    cudaError_t e = cudaMalloc((void **)dst, n);
    if (e != cudaSuccess) {
        *dst = NULL;
        return cuda_fail(err, e, what);
    }
    if ((e = cudaMemcpy(*dst, src, n, cudaMemcpyHostToDevice)) != cudaSuccess) return cuda_fail(err, e, what);
    return FP4_OK;
}

/* The kernel decodes a NaN scale byte as a number: refuse those here. */
static fp4_status check_scales(const fp4_matrix *x, const char *which, fp4_err *err)
{
    const size_t count = (size_t)x->rows * (size_t)(x->cols / 16);
    for (size_t i = 0; i < count; i++)
        if ((x->scales[i] & 0x7Fu) == 0x7Fu)
            return fp4_fail(err, FP4_ERR_INVALID_ARG, "plugin-gpu: %s scale %zu is NaN (0x%02X)", which, i,
                            x->scales[i]);
    return FP4_OK;
}

/* Uploads `copies` copies of A (odd ones from -A) and B, and allocates each
 * copy's D. On failure nothing is left allocated. */
static fp4_status gpu_prepare(void *inst, const fp4_gemm_problem *pr, int copies, void **plan, fp4_err *err)
{
    fp4_status st;
    *plan = NULL;
    if (!pr || !pr->a || !pr->b || copies < 1)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "plugin-gpu: no problem or copies = %d", copies);
    if ((st = gpu_supports(inst, &pr->shape, err)) != FP4_OK) return st;
    const fp4_shape *s = &pr->shape;
    if (pr->a->rows != s->m || pr->a->cols != s->k || pr->b->rows != s->n || pr->b->cols != s->k)
        return fp4_fail(err, FP4_ERR_SHAPE, "plugin-gpu: operands do not match the shape");
    if ((st = check_scales(fp4_problem_a(pr, 0), "A", err)) != FP4_OK ||
        (st = check_scales(fp4_problem_a(pr, 1), "A (odd copies)", err)) != FP4_OK ||
        (st = check_scales(pr->b, "B", err)) != FP4_OK)
        return st;

    /* fp4_shape_check: m * n * 4 bytes fit, so these do too */
    const size_t a_bytes = (size_t)s->m * (size_t)(s->k / 2), sa_bytes = (size_t)s->m * (size_t)(s->k / 16);
    const size_t b_bytes = (size_t)s->n * (size_t)(s->k / 2), sb_bytes = (size_t)s->n * (size_t)(s->k / 16);
    const size_t d_bytes = (size_t)s->m * (size_t)s->n * sizeof(__nv_bfloat16);
    gpu_plan *p = (gpu_plan *)calloc(1, sizeof *p);
    if (!p) return fp4_fail(err, FP4_ERR_NOMEM, "plugin-gpu: no host memory for the plan");
    p->warn = ((gpu_inst *)inst)->warn;
    p->shape = *s;
    p->alpha = pr->alpha;
    p->c = (gpu_copy *)calloc((size_t)copies, sizeof *p->c);
    p->host_d = (__nv_bfloat16 *)malloc(d_bytes);
    if (!p->c || !p->host_d) {
        gpu_release(p);
        return fp4_fail(err, FP4_ERR_NOMEM, "plugin-gpu: no host memory for %d copies", copies);
    }
    p->copies = copies;
    for (int i = 0; i < copies; i++) {
        gpu_copy *c = &p->c[i];
        const fp4_matrix *a = fp4_problem_a(pr, i); /* odd copies: -A */
        cudaError_t e;
        if ((st = upload(&c->a, a->codes, a_bytes, "A codes", err)) != FP4_OK ||
            (st = upload(&c->sa, a->scales, sa_bytes, "A scales", err)) != FP4_OK ||
            (st = upload(&c->b, pr->b->codes, b_bytes, "B codes", err)) != FP4_OK ||
            (st = upload(&c->sb, pr->b->scales, sb_bytes, "B scales", err)) != FP4_OK) {
            gpu_release(p);
            return st;
        }
        if ((e = cudaMalloc((void **)&c->d, d_bytes)) != cudaSuccess) {
            c->d = NULL;
            gpu_release(p);
            return cuda_fail(err, e, "D");
        }
    }
    *plan = p;
    return FP4_OK;
}

/* copy's buffers, or NULL (with err) when there is no such copy. */
static gpu_copy *copy_of(gpu_plan *p, int copy, fp4_err *err)
{
    if (copy < 0 || copy >= p->copies) {
        fp4_fail(err, FP4_ERR_INVALID_ARG, "plugin-gpu: copy %d of %d", copy, p->copies);
        return NULL;
    }
    return &p->c[copy];
}

/* D of one copy := NaN (bf16 0xFFFF), asynchronously on stream. */
static fp4_status gpu_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    gpu_plan *p = (gpu_plan *)plan;
    gpu_copy *c = copy_of(p, copy, err);
    if (!c) return FP4_ERR_INVALID_ARG;
    cudaError_t e = cudaMemsetAsync(c->d, 0xFF, (size_t)p->shape.m * (size_t)p->shape.n * sizeof *c->d,
                                    (cudaStream_t)stream);
    return e == cudaSuccess ? FP4_OK : cuda_fail(err, e, "poison");
}

/* One launch on stream: nothing allocated, nothing waited for. */
static fp4_status gpu_run(void *plan, int copy, void *stream, fp4_err *err)
{
    gpu_plan *p = (gpu_plan *)plan;
    gpu_copy *c = copy_of(p, copy, err);
    if (!c) return FP4_ERR_INVALID_ARG;
    const int64_t mtiles = (p->shape.m + TILE - 1) / TILE;
    const dim3 grid((unsigned)((p->shape.n + TILE - 1) / TILE),
                    (unsigned)(mtiles < MAX_GRID_Y ? mtiles : MAX_GRID_Y));
    gemm_kernel<<<grid, dim3(TILE, TILE), 0, (cudaStream_t)stream>>>(c->a, c->sa, c->b, c->sb, p->shape.m,
                                                                     p->shape.n, p->shape.k, p->alpha, c->d);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? FP4_OK : cuda_fail(err, e, "launch");
}

/* Waits for the device, then D [m, n] bf16 -> floats. */
static fp4_status gpu_read_output(void *plan, int copy, float *d, fp4_err *err)
{
    gpu_plan *p = (gpu_plan *)plan;
    gpu_copy *c = copy_of(p, copy, err);
    if (!c) return FP4_ERR_INVALID_ARG;
    const size_t count = (size_t)p->shape.m * (size_t)p->shape.n;
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(p->host_d, c->d, count * sizeof *c->d, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return cuda_fail(err, e, "read D");
    for (size_t i = 0; i < count; i++) d[i] = __bfloat162float(p->host_d[i]);
    return FP4_OK;
}

/* What the kernel reads and writes: codes, plain scales, bf16 D. */
static double gpu_bytes_moved(const fp4_shape *s)
{
    const double m = (double)s->m, n = (double)s->n, k = (double)s->k;
    return (m + n) * k / 2.0 + (m + n) * k / 16.0 + 2.0 * m * n;
}

static const char *gpu_variant(void *plan)
{
    return "tile16x16";
}

/* Positional: C++17 has no designated initializers. One comment per field. */
static const fp4_backend_ops gpu_ops = {
    FP4_BACKEND_API_VERSION,                                        /* api_version */
    "plugin-gpu",                                                   /* name */
    "example plugin: NVFP4 dequantized on CUDA cores, fp32 sums, bf16 D", /* summary */
    FP4_BACKEND_GPU,                                                /* flags: exact operands */
    FP4_MATH_CUDA_CORES,                                            /* math */
    1e-2,             /* tol_max: fp32 accumulation, one bf16 rounding of D (2^-9 relative) */
    5e-3,             /* tol_norm */
    gpu_open,         /* open */
    gpu_close,        /* close */
    gpu_supports,     /* supports */
    gpu_prepare,      /* prepare */
    gpu_poison,       /* poison */
    gpu_run,          /* run */
    gpu_read_output,  /* read_output */
    gpu_release,      /* release */
    gpu_bytes_moved,  /* bytes_moved */
    gpu_variant,      /* variant */
    NULL,             /* flops: 2MNK */
    gpu_set_warnings, /* set_warnings */
    NULL,             /* own_reference: exact operands, none needed */
    0.0,              /* own_tol */
};

/* The one symbol the loader looks for. */
extern "C" const fp4_backend_ops *fp4_backend_entry(void);
extern "C" const fp4_backend_ops *fp4_backend_entry(void)
{
    return &gpu_ops;
}
