/* The contiguous grouped plan: pairs sorted by expert (a counting sort, stable
 * in pair order, so within an expert tokens ascend), plus per-expert counts,
 * offsets and statistics (fp4/moe.h). */
#include "fp4/moe.h"

#include <stdlib.h>
#include <string.h>

static int cmp_int32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* min / median / max over all experts, active experts, mean. */
static fp4_status plan_stats(fp4_moe_plan *p, fp4_err *err)
{
    const int n = p->experts;
    int32_t *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) return fp4_fail(err, FP4_ERR_NOMEM, "moe plan: no memory");
    memcpy(sorted, p->expert_counts, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_int32);
    p->stats.min_tokens = sorted[0];
    p->stats.max_tokens = sorted[n - 1];
    p->stats.median_tokens =
        (n % 2) ? (double)sorted[n / 2] : ((double)sorted[n / 2 - 1] + (double)sorted[n / 2]) / 2.0;
    p->stats.mean_tokens = (double)p->pairs / (double)n;
    p->stats.active_experts = 0;
    for (int e = 0; e < n; e++) p->stats.active_experts += p->expert_counts[e] > 0;
    free(sorted);
    return FP4_OK;
}

fp4_status fp4_moe_plan_build(const fp4_moe_routing *r, fp4_moe_plan *out, fp4_err *err)
{
    fp4_status st;
    int32_t *next = NULL; /* the next free grouped row of each expert */
    if (!out) return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe plan: NULL argument");
    memset(out, 0, sizeof *out);
    if ((st = fp4_moe_routing_check(r, err)) != FP4_OK) return st;

    const int n = r->experts;
    const int64_t pairs = r->tokens * r->top_k; /* <= INT32_MAX: checked with the routing */
    out->tokens = r->tokens;
    out->experts = n;
    out->top_k = r->top_k;
    out->pairs = pairs;
    out->expert_offsets = calloc((size_t)n + 1, sizeof *out->expert_offsets);
    out->expert_counts = calloc((size_t)n, sizeof *out->expert_counts);
    out->pair_index = malloc((size_t)pairs * sizeof *out->pair_index);
    out->pair_row = malloc((size_t)pairs * sizeof *out->pair_row);
    next = malloc((size_t)n * sizeof *next);
    if (!out->expert_offsets || !out->expert_counts || !out->pair_index || !out->pair_row ||
        !next) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "moe plan: no memory for %lld pairs", (long long)pairs);
        goto out;
    }
    for (int64_t p = 0; p < pairs; p++) out->expert_counts[r->expert_ids[p]]++;
    for (int e = 0; e < n; e++)
        out->expert_offsets[e + 1] = out->expert_offsets[e] + out->expert_counts[e];
    memcpy(next, out->expert_offsets, (size_t)n * sizeof *next);
    for (int64_t p = 0; p < pairs; p++) {
        const int32_t row = next[r->expert_ids[p]]++;
        out->pair_index[row] = (int32_t)p;
        out->pair_row[p] = row;
    }
    st = plan_stats(out, err);
out:
    free(next);
    if (st != FP4_OK) fp4_moe_plan_free(out);
    return st;
}

void fp4_moe_plan_free(fp4_moe_plan *p)
{
    if (!p) return;
    free(p->expert_offsets);
    free(p->expert_counts);
    free(p->pair_index);
    free(p->pair_row);
    memset(p, 0, sizeof *p);
}

fp4_status fp4_moe_plan_aligned_offsets(const fp4_moe_plan *p, int32_t align, int64_t *out,
                                        fp4_err *err)
{
    if (!p || !out || !p->expert_counts)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe aligned offsets: NULL argument");
    if (align < 1)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "moe aligned offsets: alignment %d must be >= 1",
                        (int)align);
    out[0] = 0;
    for (int e = 0; e < p->experts; e++) {
        const int64_t c = p->expert_counts[e];
        out[e + 1] = out[e] + (c + align - 1) / align * align;
    }
    return FP4_OK;
}
