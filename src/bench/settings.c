/* The engine's settings: defaults and the names of the data kinds
 * (fp4/engine.h). */
#include "fp4/engine.h"

#include <string.h>

const char *fp4_data_kind_name(fp4_data_kind k)
{
    switch (k) {
    case FP4_DATA_GAUSSIAN: return "gaussian";
    case FP4_DATA_CODES: return "codes";
    case FP4_DATA_OUTLIERS: return "outliers";
    case FP4_DATA_WIDE: return "wide";
    }
    return "unknown";
}

/* 0 and *out set for a known name (exact, lowercase); -1 otherwise, *out kept. */
int fp4_data_kind_parse(const char *s, fp4_data_kind *out)
{
    static const fp4_data_kind kinds[] = {FP4_DATA_GAUSSIAN, FP4_DATA_CODES, FP4_DATA_OUTLIERS,
                                         FP4_DATA_WIDE};
    if (!s) return -1;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (strcmp(s, fp4_data_kind_name(kinds[i])) == 0) {
            if (out) *out = kinds[i];
            return 0;
        }
    }
    return -1;
}

void fp4_settings_default(fp4_settings *s)
{
    if (!s) return;
    memset(s, 0, sizeof *s);
    s->seed = 1;
    s->data = FP4_DATA_GAUSSIAN;
    s->hot = 0;
    s->use_graphs = 1;
    s->measure_launch = 0;
    s->warmup_ms = 200.0;
    s->stop.min_samples = 10;
    s->stop.noise_target = 0.005;
    s->stop.min_time_s = 0.0;
    s->stop.max_time_s = 10.0;
    s->baseline[0] = '\0';
    s->keep_samples = 0;
    s->measure_ceilings = 1;
    s->verify_only = 0;
    s->time_reference = 0;
    s->order_seed = 0;
    s->baseline_tuning = 1;
    s->min_batch = 64;
    s->interrupt = NULL;
}
