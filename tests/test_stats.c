/* Statistics and the stopping rule: quantiles and medians on hand-checked
 * samples, the order-statistic CI ranks, and the stopping rule's edges; and
 * the settings' defaults and names (the engine's side of the stopping rule). */
#include <math.h>
#include <string.h>

#include "check.h"
#include "fp4/engine.h"
#include "fp4/stats.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * (1.0 + fabs(b)); }

static void test_median_quantiles(void)
{
    double odd[] = {5, 1, 3};
    double even[] = {4, 1, 3, 2};
    double ten[] = {7, 3, 10, 1, 9, 2, 8, 4, 6, 5}; /* 1..10 shuffled */
    double ten_copy[10];
    double var[] = {2, 4, 4, 4, 5, 5, 7, 9};
    fp4_stats s;

    fp4_stats_compute(odd, 3, &s);
    CHECK(s.count == 3 && s.median == 3 && s.min == 1 && s.max == 5);
    fp4_stats_compute(even, 4, &s);
    CHECK_MSG(near(s.median, 2.5), "even median %g", s.median);

    memcpy(ten_copy, ten, sizeof ten);
    CHECK(near(fp4_quantile(ten, 10, 0.0), 1.0));
    CHECK(near(fp4_quantile(ten, 10, 1.0), 10.0));
    CHECK(near(fp4_quantile(ten, 10, 0.5), 5.5));
    CHECK_MSG(near(fp4_quantile(ten, 10, 0.1), 1.9), "p10 %g", fp4_quantile(ten, 10, 0.1));
    CHECK_MSG(near(fp4_quantile(ten, 10, 0.9), 9.1), "p90 %g", fp4_quantile(ten, 10, 0.9));
    CHECK(near(fp4_quantile(ten, 10, 0.25), 3.25));
    CHECK(near(fp4_quantile(odd, 1, 0.7), 5.0)); /* one sample: itself */
    CHECK(memcmp(ten, ten_copy, sizeof ten) == 0); /* input untouched */
    fp4_stats_compute(ten, 10, &s);
    CHECK(memcmp(ten, ten_copy, sizeof ten) == 0);
    CHECK(near(s.p10, 1.9) && near(s.p90, 9.1) && near(s.median, 5.5) && near(s.mean, 5.5));

    fp4_stats_compute(var, 8, &s);
    CHECK(near(s.mean, 5.0));
    CHECK_MSG(near(s.stdev, sqrt(32.0 / 7.0)), "sample stdev %g", s.stdev);

    fp4_stats_compute(NULL, 0, &s);
    CHECK(s.count == 0 && isnan(s.median) && isnan(s.noise));
    CHECK(isnan(fp4_quantile(ten, 0, 0.5)));
}

static void test_ci(void)
{
    double ten[] = {7, 3, 10, 1, 9, 2, 8, 4, 6, 5};
    double hundred[100], one[] = {4.0}, five[] = {3, 1, 5, 2, 4};
    double lo, hi;
    fp4_stats s;

    /* n = 10: c = 0.98 sqrt(10) = 3.099: ranks floor(1.90) = 1, ceil(8.10) = 9 */
    fp4_median_ci(ten, 10, &lo, &hi);
    CHECK_MSG(lo == 2 && hi == 10, "n=10 CI [%g, %g]", lo, hi);
    fp4_stats_compute(ten, 10, &s);
    CHECK_MSG(near(s.noise, (10.0 - 2.0) / 2.0 / 5.5), "n=10 noise %g", s.noise);

    /* n = 100: c = 9.8: ranks floor(40.2) = 40, ceil(59.8) = 60 (0-based) */
    for (int i = 0; i < 100; i++) hundred[i] = (double)((i * 37) % 100 + 1); /* 1..100 */
    fp4_median_ci(hundred, 100, &lo, &hi);
    CHECK_MSG(lo == 41 && hi == 61, "n=100 CI [%g, %g]", lo, hi);
    fp4_stats_compute(hundred, 100, &s);
    CHECK(near(s.median, 50.5) && near(s.noise, 10.0 / 50.5));

    /* small n: clamped to the whole range; one sample has infinite noise */
    fp4_median_ci(five, 5, &lo, &hi);
    CHECK(lo == 1 && hi == 5);
    fp4_stats_compute(one, 1, &s);
    CHECK(s.count == 1 && s.median == 4 && s.stdev == 0 && isinf(s.noise));
    fp4_median_ci(one, 1, &lo, &hi);
    CHECK(lo == 4 && hi == 4);
    fp4_median_ci(NULL, 0, &lo, &hi);
    CHECK(isnan(lo) && isnan(hi));
}

static void test_stop_rule(void)
{
    fp4_settings set;
    fp4_stop_rule rule;
    fp4_stats s;
    int to = -1;

    fp4_settings_default(&set);
    rule = set.stop;
    CHECK(rule.min_samples == 10 && rule.noise_target == 0.005 && rule.min_time_s == 0 &&
          rule.max_time_s == 10);

    memset(&s, 0, sizeof s);
    s.noise = 0.0; /* perfectly quiet, but too few samples: never stop early */
    for (int n = 1; n < 10; n++) {
        s.count = n;
        CHECK_MSG(fp4_should_stop(&rule, &s, 1.0, &to) == 0 && to == 0, "stopped at %d", n);
    }
    s.count = 10;
    CHECK(fp4_should_stop(&rule, &s, 1.0, &to) == 1 && to == 0);
    s.noise = 0.005; /* not below the target */
    CHECK(fp4_should_stop(&rule, &s, 1.0, &to) == 0);
    s.noise = 0.004;
    CHECK(fp4_should_stop(&rule, &s, 1.0, &to) == 1 && to == 0);

    /* noisy: runs until the time limit, then times out */
    s.count = 1000;
    s.noise = 0.05;
    CHECK(fp4_should_stop(&rule, &s, 9.99, &to) == 0 && to == 0);
    CHECK(fp4_should_stop(&rule, &s, 10.0, &to) == 1 && to == 1);
    /* too few samples at the limit: also a timeout */
    s.count = 3;
    s.noise = 0.0;
    CHECK(fp4_should_stop(&rule, &s, 11.0, &to) == 1 && to == 1);
    /* nothing measured (NaN noise) never converges */
    fp4_stats_compute(NULL, 0, &s);
    rule.min_samples = 0;
    CHECK(fp4_should_stop(&rule, &s, 1.0, &to) == 0);
    rule.min_samples = 10;

    /* min_time: converged but not yet long enough */
    rule.min_time_s = 0.5;
    s.count = 50;
    s.noise = 0.001;
    CHECK(fp4_should_stop(&rule, &s, 0.1, &to) == 0);
    CHECK(fp4_should_stop(&rule, &s, 0.6, &to) == 1 && to == 0);
    rule.min_time_s = 0;

    /* a simulated measurement with 0.1% jitter converges after >= 10 samples */
    {
        double x[200];
        int n = 0, stop = 0;
        while (!stop && n < 200) {
            x[n] = 100.0 + 0.1 * (double)((n * 7919) % 11 - 5) / 5.0;
            n++;
            fp4_stats_compute(x, n, &s);
            stop = fp4_should_stop(&rule, &s, 0.001 * n, &to);
        }
        CHECK_MSG(stop && to == 0 && n >= 10 && n < 200, "simulated run: n %d, timed out %d",
                  n, to);
    }
}

static void test_names_and_defaults(void)
{
    fp4_settings s;
    fp4_data_kind k = FP4_DATA_CODES;
    CHECK(strcmp(fp4_data_kind_name(FP4_DATA_GAUSSIAN), "gaussian") == 0);
    CHECK(strcmp(fp4_data_kind_name(FP4_DATA_CODES), "codes") == 0);
    CHECK(strcmp(fp4_data_kind_name(FP4_DATA_OUTLIERS), "outliers") == 0);
    CHECK(fp4_data_kind_parse("outliers", &k) == 0 && k == FP4_DATA_OUTLIERS);
    CHECK(fp4_data_kind_parse("gaussian", &k) == 0 && k == FP4_DATA_GAUSSIAN);
    CHECK(fp4_data_kind_parse("Gauss", &k) == -1 && k == FP4_DATA_GAUSSIAN);
    CHECK(fp4_data_kind_parse(NULL, &k) == -1);
    CHECK(strcmp(fp4_row_state_name(FP4_ROW_OK), "ok") == 0);
    CHECK(strcmp(fp4_row_state_name(FP4_ROW_UNSUPPORTED), "unsupported") == 0);
    CHECK(strcmp(fp4_row_state_name(FP4_ROW_FAILED), "FAILED") == 0);

    fp4_settings_default(&s);
    CHECK(s.seed == 1 && s.data == FP4_DATA_GAUSSIAN && s.hot == 0 && s.use_graphs == 1 &&
          s.measure_launch == 0 && s.warmup_ms == 200 && s.baseline[0] == '\0' &&
          s.keep_samples == 0 && s.measure_ceilings == 1 && s.verify_only == 0);
}

int main(void)
{
    test_median_quantiles();
    test_ci();
    test_stop_rule();
    test_names_and_defaults();
    return check_finish("test_stats");
}
