/* fp4bench: workloads. A case is one GEMM shape with a label; lists come from
 * --shape strings, named presets or spec files. */
#ifndef FP4_SHAPES_H
#define FP4_SHAPES_H

#include "fp4/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP4_LABEL_LEN 64 /* a case's label, with its NUL */
#define FP4_MAX_CASES 100000    /* cases in one list: far more than a run can time */
#define FP4_SPEC_LINE_MAX 4096  /* bytes in a spec-file line, without its '\n' */

typedef struct fp4_case {
    fp4_shape shape;
    char label[FP4_LABEL_LEN];
} fp4_case;

typedef struct fp4_case_list {
    fp4_case *items;
    int count, cap;
} fp4_case_list;

/* Append one case after fp4_shape_check; label may be NULL (then "custom").
 * A label must be valid UTF-8 without control characters and shorter than
 * FP4_LABEL_LEN bytes; a list holds at most FP4_MAX_CASES cases
 * (FP4_ERR_INVALID_ARG otherwise). */
fp4_status fp4_cases_add(fp4_case_list *l, int64_t m, int64_t n, int64_t k, const char *label,
                         fp4_err *err);
void fp4_cases_free(fp4_case_list *l);

/* "MxNxK[,MxNxK...]", e.g. "16x2048x6144,64x768x6144". */
fp4_status fp4_cases_parse_shapes(fp4_case_list *l, const char *arg, fp4_err *err);
/* A named preset (fp4_preset_count / fp4_preset_name / fp4_preset_summary). */
fp4_status fp4_cases_from_preset(fp4_case_list *l, const char *name, fp4_err *err);
/* A spec file: one problem per line "M N K [label]", '#' starts a comment.
 * Lines longer than FP4_SPEC_LINE_MAX bytes are refused as they are read
 * (never held in memory), as are NUL bytes. */
fp4_status fp4_cases_from_spec(fp4_case_list *l, const char *path, fp4_err *err);
/* The same from the len bytes of spec text at text; name is used in messages. */
fp4_status fp4_cases_parse_spec(fp4_case_list *l, const char *text, size_t len, const char *name,
                                fp4_err *err);

int fp4_preset_count(void);
const char *fp4_preset_name(int i);
const char *fp4_preset_summary(int i);

/* MoE: tokens one expert sees on average = ceil(batch * topk / experts), at least 1
 * (also for experts < 1). */
int64_t fp4_moe_tokens_per_expert(int64_t batch, int topk, int experts);

#ifdef __cplusplus
}
#endif
#endif
