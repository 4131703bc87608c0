/* fp4bench: workloads. A case is one GEMM shape with a label; lists come from
 * --shape strings, named presets or spec files. */
#ifndef FP4_SHAPES_H
#define FP4_SHAPES_H

#include "fp4/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP4_LABEL_LEN 64 /* a case's label, with its NUL */

typedef struct fp4_case {
    fp4_shape shape;
    char label[FP4_LABEL_LEN];
} fp4_case;

typedef struct fp4_case_list {
    fp4_case *items;
    int count, cap;
} fp4_case_list;

/* Append one case after fp4_shape_check; label may be NULL (then "custom"). */
fp4_status fp4_cases_add(fp4_case_list *l, int64_t m, int64_t n, int64_t k, const char *label,
                         fp4_err *err);
void fp4_cases_free(fp4_case_list *l);

/* "MxNxK[,MxNxK...]", e.g. "16x2048x6144,64x768x6144". */
fp4_status fp4_cases_parse_shapes(fp4_case_list *l, const char *arg, fp4_err *err);
/* A named preset (fp4_preset_count / fp4_preset_name / fp4_preset_summary). */
fp4_status fp4_cases_from_preset(fp4_case_list *l, const char *name, fp4_err *err);
/* A spec file: one problem per line "M N K [label]", '#' starts a comment. */
fp4_status fp4_cases_from_spec(fp4_case_list *l, const char *path, fp4_err *err);

int fp4_preset_count(void);
const char *fp4_preset_name(int i);
const char *fp4_preset_summary(int i);

/* MoE: tokens one expert sees on average = ceil(batch * topk / experts). */
int64_t fp4_moe_tokens_per_expert(int64_t batch, int topk, int experts);

#ifdef __cplusplus
}
#endif
#endif
