/* The order in which a persistent GEMM walks its output tiles, shared by the
 * kernel (v16-prefill) and its CPU test (C and CUDA).
 *
 * A persistent grid of C CTAs works on about C consecutive tiles at once. In
 * the plain order (row tile fastest over all rows) those tiles span every row
 * tile and C / mtiles column tiles, so each wave streams the whole of A: at
 * 8192^3 in fp16 that is 134 MB a wave against a 60 MB L2. Walking the tiles
 * in groups of G row tiles (within a group the row fastest, then the column)
 * keeps the tiles in flight a block of G rows by C / G columns, whose
 * operands are G row tiles of A and C / G column tiles of B. */
#ifndef FP4_SM90_RASTER_H
#define FP4_SM90_RASTER_H

#ifdef __CUDACC__
#define FP4_RASTER_FN static __host__ __device__ __forceinline__
#else
#define FP4_RASTER_FN static inline
#endif

/* tile t (0 <= t < mtiles ntiles) -> its row tile *mt and column tile *nt,
 * in groups of `group` row tiles (the last group holds the rest); group <= 0
 * or >= mtiles is the plain order. A bijection on the tiles. */
FP4_RASTER_FN void fp4_raster_tile(int t, int mtiles, int ntiles, int group, int *mt, int *nt)
{
    if (group <= 0 || group >= mtiles) {
        *mt = t % mtiles;
        *nt = t / mtiles;
        return;
    }
    const int per_group = group * ntiles; /* <= the tile count: no overflow */
    const int g = t / per_group, first = g * group;
    const int rows = mtiles - first < group ? mtiles - first : group;
    const int r = t - g * per_group;
    *mt = first + r % rows;
    *nt = r / rows;
}

/* The group that makes `inflight` tiles at once read the fewest operand
 * bytes: G row tiles of bm rows and ceil(inflight / G) column tiles of bn
 * columns, each row of either operand K elements long (K cancels). Ties go
 * to the smaller G; the result is at most mtiles (= the plain order). */
FP4_RASTER_FN int fp4_raster_group(int inflight, int mtiles, int bm, int bn)
{
    int best = 1;
    long long best_rows = -1;
    for (int g = 1; g <= mtiles && g <= inflight; g++) {
        const long long rows = (long long)g * bm + (long long)((inflight + g - 1) / g) * bn;
        if (best_rows < 0 || rows < best_rows) best = g, best_rows = rows;
    }
    return best;
}

#endif
