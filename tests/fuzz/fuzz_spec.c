/* libFuzzer target: spec text (fp4_cases_parse_spec) and --shape strings
 * (fp4_cases_parse_shapes, on the bytes up to the first NUL). Every case
 * added must have a valid UTF-8 label; everything is freed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fp4/io.h"
#include "fp4/shapes.h"

/* Abort when a case of l breaks the list's rules. */
static void check_cases(const fp4_case_list *l)
{
    for (int i = 0; i < l->count; i++) {
        const char *label = l->items[i].label;
        size_t len = strnlen(label, FP4_LABEL_LEN);
        if (len == FP4_LABEL_LEN || !fp4_utf8_valid(label, len)) abort();
    }
}

/* libFuzzer's entry point (declared here: no header declares it). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fp4_case_list l;
    fp4_err err;
    char *s;
    memset(&l, 0, sizeof l);
    (void)fp4_cases_parse_spec(&l, (const char *)data, size, "fuzz.spec", &err);
    check_cases(&l);
    fp4_cases_free(&l);

    s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    (void)fp4_cases_parse_shapes(&l, s, &err);
    check_cases(&l);
    fp4_cases_free(&l);
    free(s);
    return 0;
}
