/* fp4bench: statistics of timing samples and the stopping rule.
 *
 * Times are whatever unit the caller samples in (the engine uses microseconds
 * per GEMM call); nothing here knows about GEMMs. Definitions (quantiles, the
 * confidence interval of the median, noise) are in src/bench/stats.c. */
#ifndef FP4_STATS_H
#define FP4_STATS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fp4_stats {
    int count;
    double median, p10, p90, min, max, mean, stdev;
    /* Relative half-width of the distribution-free 95% confidence interval of
     * the median (order statistics): the "noise" the stopping rule uses. */
    double noise;
} fp4_stats;

/* Compute stats of x[0..n) (x is not modified). n == 0 gives count 0. */
void fp4_stats_compute(const double *x, int n, fp4_stats *out);
/* Quantile q in [0,1] of x (linear interpolation between order statistics). */
double fp4_quantile(const double *x, int n, double q);
/* Distribution-free 95% CI of the median of x: ranks n/2 -+ 0.98 sqrt(n). */
void fp4_median_ci(const double *x, int n, double *lo, double *hi);

/* The stopping rule: stop when count >= min_samples and noise < target and at
 * least min_time_s of measured time; or when elapsed_s >= max_time_s
 * (timed_out = 1). Returns 1 to stop. */
typedef struct fp4_stop_rule {
    int min_samples;    /* default 10 */
    double noise_target; /* default 0.005 */
    double min_time_s;   /* default 0 */
    double max_time_s;   /* per measurement, default 10 */
} fp4_stop_rule;
int fp4_should_stop(const fp4_stop_rule *rule, const fp4_stats *s, double elapsed_s,
                    int *timed_out);

#ifdef __cplusplus
}
#endif
#endif
