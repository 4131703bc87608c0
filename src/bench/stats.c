/* Statistics of timing samples and the stopping rule (fp4/stats.h).
 *
 * Quantiles interpolate linearly between order statistics (Hyndman-Fan type 7,
 * numpy's and R's default): the q-quantile of the sorted x[0..n) sits at the
 * 0-based position h = q*(n-1), value x[floor(h)] + (h - floor(h)) *
 * (x[floor(h)+1] - x[floor(h)]). The median of an even n is therefore the mean
 * of the two middle samples.
 *
 * The confidence interval of the median is distribution-free (order
 * statistics, no normality assumed). With c = 0.98*sqrt(n) and the sample
 * sorted ascending, 0-based:
 *     lo = x[clamp(floor(n/2 - c))],  hi = x[clamp(ceil(n/2 + c))]
 * where clamp() limits the index to [0, n-1]. For n >= 6 the interval covers
 * the true median with probability 94.7% .. 99% (95% asymptotically; e.g.
 * n = 10: x[1]..x[9], 98.8%; n = 100: x[40]..x[60], 95.4%). For n <= 5 it is
 * the whole range [min, max], which covers only 1 - 2^(1-n) (93.75% at n = 5).
 *
 * noise = (hi - lo) / 2 / median, the relative half-width of that interval.
 * It is +inf for n == 1 (one sample says nothing about its spread) and when
 * the median is not positive, and NaN for n == 0, so a measurement with too
 * few samples never looks converged. */
#include "fp4/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* qsort comparator: ascending, NaNs last (so they never become the median of
 * a sample that has real values in it). */
static int cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    if (isnan(a)) return isnan(b) ? 0 : 1;
    if (isnan(b)) return -1;
    return (a > b) - (a < b);
}

/* A sorted copy of x[0..n), or NULL when n <= 0 or allocation fails. The
 * caller frees it. */
static double *sorted_copy(const double *x, int n)
{
    double *s;
    if (!x || n <= 0) return NULL;
    s = malloc((size_t)n * sizeof *s);
    if (!s) return NULL;
    memcpy(s, x, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return s;
}

/* Type-7 quantile of an already sorted s[0..n), n >= 1; q is clamped to [0,1]. */
static double quantile_sorted(const double *s, int n, double q)
{
    double h;
    int i;
    if (!(q > 0.0)) q = 0.0; /* also maps a NaN q to 0 */
    if (q > 1.0) q = 1.0;
    h = q * (double)(n - 1);
    i = (int)floor(h);
    if (i >= n - 1) return s[n - 1];
    return s[i] + (h - (double)i) * (s[i + 1] - s[i]);
}

/* The CI ranks of the file comment for n >= 1: 0-based indexes into the
 * sorted sample, clamped to [0, n-1]. */
static void median_ci_ranks(int n, int *lo, int *hi)
{
    double c = 0.98 * sqrt((double)n);
    double l = floor((double)n / 2.0 - c), h = ceil((double)n / 2.0 + c);
    *lo = l < 0.0 ? 0 : (l > (double)(n - 1) ? n - 1 : (int)l);
    *hi = h < 0.0 ? 0 : (h > (double)(n - 1) ? n - 1 : (int)h);
}

double fp4_quantile(const double *x, int n, double q)
{
    double *s = sorted_copy(x, n);
    double v;
    if (!s) return NAN;
    v = quantile_sorted(s, n, q);
    free(s);
    return v;
}

void fp4_median_ci(const double *x, int n, double *lo, double *hi)
{
    double *s = sorted_copy(x, n);
    int il, ih;
    if (!s) {
        if (lo) *lo = NAN;
        if (hi) *hi = NAN;
        return;
    }
    median_ci_ranks(n, &il, &ih);
    if (lo) *lo = s[il];
    if (hi) *hi = s[ih];
    free(s);
}

/* All statistics from one sort. On n <= 0 (or an allocation failure, which
 * reports count 0 too) every value is NaN: nothing was measured. */
void fp4_stats_compute(const double *x, int n, fp4_stats *out)
{
    double *s;
    double sum = 0.0, ss = 0.0, lo, hi;
    int il, ih;
    if (!out) return;
    out->count = 0;
    out->median = out->p10 = out->p90 = out->min = out->max = NAN;
    out->mean = out->stdev = out->noise = NAN;
    s = sorted_copy(x, n);
    if (!s) return;

    out->count = n;
    out->min = s[0];
    out->max = s[n - 1];
    out->median = quantile_sorted(s, n, 0.5);
    out->p10 = quantile_sorted(s, n, 0.1);
    out->p90 = quantile_sorted(s, n, 0.9);
    for (int i = 0; i < n; i++) sum += s[i];
    out->mean = sum / (double)n;
    for (int i = 0; i < n; i++) ss += (s[i] - out->mean) * (s[i] - out->mean);
    out->stdev = n > 1 ? sqrt(ss / (double)(n - 1)) : 0.0; /* sample stdev */

    median_ci_ranks(n, &il, &ih);
    lo = s[il];
    hi = s[ih];
    if (n < 2 || !(out->median > 0.0)) out->noise = INFINITY;
    else out->noise = (hi - lo) / 2.0 / out->median;
    free(s);
}

/* Stop when converged: count >= min_samples, noise < noise_target and
 * elapsed_s >= min_time_s. Otherwise stop with *timed_out = 1 once elapsed_s
 * >= max_time_s. Converged wins over timed out when both hold. elapsed_s is
 * the caller's clock for this measurement (both limits use it). A NaN noise
 * (no samples) never converges. */
int fp4_should_stop(const fp4_stop_rule *rule, const fp4_stats *s, double elapsed_s,
                    int *timed_out)
{
    if (timed_out) *timed_out = 0;
    if (!rule || !s) return 1; /* nothing sensible to wait for */
    if (s->count >= rule->min_samples && s->count > 0 && s->noise < rule->noise_target &&
        elapsed_s >= rule->min_time_s)
        return 1;
    if (elapsed_s >= rule->max_time_s) {
        if (timed_out) *timed_out = 1;
        return 1;
    }
    return 0;
}
