/* libFuzzer target: fp4_report_parse_json (the reader of fp4bench compare) on
 * arbitrary bytes. A report it accepts must have terminated, valid UTF-8
 * labels and consistent sample arrays; everything is freed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fp4/io.h"
#include "fp4/report.h"

/* libFuzzer's entry point (declared here: no header declares it). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fp4_report r;
    fp4_err err;
    if (fp4_report_parse_json((const char *)data, size, "fuzz.json", &r, &err) == FP4_OK) {
        for (int i = 0; i < r.nrows; i++) {
            const fp4_row *x = &r.rows[i];
            size_t len = strnlen(x->label, sizeof x->label);
            if (len == sizeof x->label || !fp4_utf8_valid(x->label, len)) abort();
            if (x->nsamples < 0 || (x->nsamples > 0 && !x->samples)) abort();
        }
    }
    fp4_report_free(&r);
    return 0;
}
