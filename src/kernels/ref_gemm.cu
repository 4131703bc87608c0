/* The exact GPU reference GEMM (see ref_gemm.h for the arithmetic).
 *
 * One block of 16x16 threads computes a 16x16 tile of D, one output per
 * thread. The K loop goes in steps of 64 (four scale blocks): the block
 * decodes its 16 A rows and 16 B rows for those 64 k into shared memory as
 * int8 a2 values (four to a 32-bit word, so that __dp4a does four exact
 * integer multiply-adds at once) and the 4 scales of each row as integers
 * (e4m3 * 512); then each thread adds, per scale block, the int32 block dot
 * product times the int64 scale product to its int64 accumulator.
 * Simple rather than fast: 8192x2048x6144 takes milliseconds, not seconds. */
#include "kernels/ref_gemm.h"

#include "core/gpu.h"

#define REF_TILE       16            /* D tile edge; the block is REF_TILE^2 threads */
#define REF_KC         64            /* k values staged per step */
#define REF_KB         (REF_KC / 16) /* scale blocks per step */
#define REF_WORDS      (REF_KC / 4)  /* 32-bit words of four int8 per row per step */
#define REF_MAX_K      (1 << 20)     /* int64 accumulation is exact up to here */
#define REF_MAX_MTILES 65535         /* gridDim.y limit */

/* 2 * e2m1(code) for the low 4 bits of code: magnitudes 0 1 2 3 4 6 8 12 are
 * the nibbles of 0xC8643210 (a 16-entry table: 8 magnitudes and a sign bit). */
static __device__ __forceinline__ int ref_e2m1_x2(unsigned code)
{
    const int mag = (int)((0xC8643210u >> ((code & 7u) * 4u)) & 15u);
    return (code & 8u) ? -mag : mag;
}

/* e4m3(byte) * 512 as an exact integer: subnormal (exponent field 0) m * 2^-9
 * -> m; normal (8 + m) * 2^(e - 10) -> (8 + m) << (e - 1). 448 -> 229376.
 * The NaN bytes 0x7F / 0xFF are not recognised (see ref_gemm.h). */
static __device__ __forceinline__ int ref_e4m3_x512(unsigned byte)
{
    const unsigned e = (byte >> 3) & 15u, m = byte & 7u;
    const int mag = e == 0 ? (int)m : (int)((8u + m) << (e - 1u));
    return (byte & 0x80u) ? -mag : mag;
}

/* Four consecutive k (two packed bytes, even k in the low nibbles) decoded to
 * four int8 a2 values in one word, k + 0 in the lowest byte (the byte order
 * does not matter for dp4a as long as A and B agree). */
static __device__ __forceinline__ int ref_decode_word(const uint8_t *p)
{
    const unsigned b0 = p[0], b1 = p[1];
    const unsigned v0 = (unsigned)ref_e2m1_x2(b0) & 0xFFu,
                   v1 = (unsigned)ref_e2m1_x2(b0 >> 4) & 0xFFu;
    const unsigned v2 = (unsigned)ref_e2m1_x2(b1) & 0xFFu,
                   v3 = (unsigned)ref_e2m1_x2(b1 >> 4) & 0xFFu;
    return (int)(v0 | (v1 << 8) | (v2 << 16) | (v3 << 24));
}

/* a [m, k/2], sa [m, k/16], b [n, k/2], sb [n, k/16], d [m, n] fp32.
 * Grid (ceil(n/16), ceil(m/16)), block REF_TILE*REF_TILE threads. */
static __global__ void __launch_bounds__(REF_TILE *REF_TILE)
    ref_gemm_kernel(const uint8_t *__restrict__ a, const uint8_t *__restrict__ sa,
                    const uint8_t *__restrict__ b, const uint8_t *__restrict__ sb, int64_t m,
                    int64_t n, int64_t k, double alpha, float *__restrict__ d)
{
    /* a_sh[w][r]: a2[row0 + r][k0 + 4w .. 4w + 3]; [w][r] so that the 16
     * threads of a row of the tile read 16 consecutive words of b_sh (no bank
     * conflict) and a broadcast word of a_sh. */
    __shared__ int a_sh[REF_WORDS][REF_TILE];
    __shared__ int b_sh[REF_WORDS][REF_TILE];
    /* One padding column so that sb_sh[tx][j] for 16 tx hits 16 banks. */
    __shared__ int sa_sh[REF_TILE][REF_KB + 1];
    __shared__ int sb_sh[REF_TILE][REF_KB + 1];

    const int tid = (int)threadIdx.x;
    const int tx = tid % REF_TILE; /* column of D within the tile (n) */
    const int ty = tid / REF_TILE; /* row of D within the tile (m) */
    const int64_t row0 = (int64_t)blockIdx.y * REF_TILE;
    const int64_t col0 = (int64_t)blockIdx.x * REF_TILE;
    const int64_t row_bytes = k / 2, row_scales = k / 16;

    /* This thread's part of the staging: word w of tile row r, for A and B. */
    const int sr = tid / REF_WORDS, sw = tid % REF_WORDS;
    const bool a_ok = row0 + sr < m, b_ok = col0 + sr < n;
    const uint8_t *a_row = a + (a_ok ? (row0 + sr) * row_bytes : 0);
    const uint8_t *b_row = b + (b_ok ? (col0 + sr) * row_bytes : 0);

    long long acc = 0;
    for (int64_t k0 = 0; k0 < k; k0 += REF_KC) {
        const int64_t left = (k - k0) / 16;
        const int nb = left < REF_KB ? (int)left : REF_KB; /* scale blocks in this step */
        const bool w_ok = sw < nb * 4;
        a_sh[sw][sr] = (a_ok && w_ok) ? ref_decode_word(a_row + k0 / 2 + 2 * sw) : 0;
        b_sh[sw][sr] = (b_ok && w_ok) ? ref_decode_word(b_row + k0 / 2 + 2 * sw) : 0;
        if (tid < REF_TILE * REF_KB) {
            const int r = tid / REF_KB, j = tid % REF_KB;
            const bool ok = row0 + r < m && j < nb;
            sa_sh[r][j] = ok ? ref_e4m3_x512(sa[(row0 + r) * row_scales + k0 / 16 + j]) : 0;
        } else if (tid < 2 * REF_TILE * REF_KB) {
            const int t = tid - REF_TILE * REF_KB;
            const int r = t / REF_KB, j = t % REF_KB;
            const bool ok = col0 + r < n && j < nb;
            sb_sh[r][j] = ok ? ref_e4m3_x512(sb[(col0 + r) * row_scales + k0 / 16 + j]) : 0;
        }
        __syncthreads();
        for (int j = 0; j < nb; j++) {
            int s = 0; /* |s| <= 16 * 144: int32 is plenty */
            for (int q = 0; q < 4; q++) s = __dp4a(a_sh[4 * j + q][ty], b_sh[4 * j + q][tx], s);
            acc += (long long)s * ((long long)sa_sh[ty][j] * (long long)sb_sh[tx][j]);
        }
        __syncthreads();
    }

    const int64_t row = row0 + ty, col = col0 + tx;
    if (row < m && col < n) {
        /* Three roundings to nearest, in the same order as the host: int64 ->
         * double, times 2^-20 (exact), times alpha in double, double -> float.
         * No sums here, so no FMA contraction can change the result. */
        const double v = (double)acc * (1.0 / 1048576.0);
        d[row * n + col] = (float)(v * alpha);
    }
}

extern "C" fp4_status fp4_ref_gemm_supports(int64_t m, int64_t n, int64_t k, fp4_err *err)
{
    if (m < 1 || n < 1 || k < 16 || k % 16 != 0)
        return fp4_fail(
            err, FP4_ERR_UNSUPPORTED,
            "cuda-ref: needs m, n >= 1 and k a positive multiple of 16, got %lldx%lldx%lld",
            (long long)m, (long long)n, (long long)k);
    if (k > REF_MAX_K)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                        "cuda-ref: k = %lld > 2^20, the int64 accumulation would not be exact",
                        (long long)k);
    if ((m + REF_TILE - 1) / REF_TILE > REF_MAX_MTILES)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "cuda-ref: m = %lld > %d rows (grid limit)",
                        (long long)m, REF_MAX_MTILES * REF_TILE);
    if ((n + REF_TILE - 1) / REF_TILE > 0x7FFFFFFF)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "cuda-ref: n = %lld too large for the grid",
                        (long long)n);
    return FP4_OK;
}

extern "C" fp4_status fp4_ref_gemm(const uint8_t *a_codes, const uint8_t *a_scales,
                                   const uint8_t *b_codes, const uint8_t *b_scales, int64_t m,
                                   int64_t n, int64_t k, float alpha, float *d, cudaStream_t stream,
                                   fp4_err *err)
{
    fp4_status st = fp4_ref_gemm_supports(m, n, k, err);
    if (st != FP4_OK) return st;
    const dim3 grid((unsigned)((n + REF_TILE - 1) / REF_TILE),
                    (unsigned)((m + REF_TILE - 1) / REF_TILE));
    ref_gemm_kernel<<<grid, REF_TILE * REF_TILE, 0, stream>>>(a_codes, a_scales, b_codes, b_scales,
                                                              m, n, k, (double)alpha, d);
    FP4_CUDA_LAUNCH_TRY(err);
    return FP4_OK;
}
