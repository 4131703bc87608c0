/* The results of a run: row states and the report's row array
 * (fp4/engine.h). The report layer writes them out; the engine fills them. */
#include "fp4/engine.h"

#include <stdlib.h>

const char *fp4_row_state_name(fp4_row_state s)
{
    switch (s) {
    case FP4_ROW_OK: return "ok";
    case FP4_ROW_UNSUPPORTED: return "unsupported";
    case FP4_ROW_FAILED: return "FAILED";
    }
    return "unknown";
}

int fp4_row_unmeasured(const fp4_row *r)
{
    return r && r->state == FP4_ROW_FAILED && r->interrupted;
}

/* Append a copy of *row, growing the array geometrically. The report takes
 * over row->samples in every case: on success the new row owns it, on failure
 * it is freed here, so the caller never frees it after this call (and should
 * forget the pointer). */
fp4_status fp4_report_add(fp4_report *r, const fp4_row *row, fp4_err *err)
{
    fp4_row *grown;
    int cap;
    if (!r || !row) {
        if (row) free(row->samples);
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_report_add: NULL report or row");
    }
    if (r->nrows < 0 || r->cap < r->nrows || (r->cap > 0 && !r->rows)) {
        free(row->samples);
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_report_add: report not initialised");
    }
    if (r->nrows == r->cap) {
        if (r->cap > (int)((size_t)0x7fffffff / 2 / sizeof *grown)) {
            free(row->samples);
            return fp4_fail(err, FP4_ERR_OVERFLOW, "fp4_report_add: too many rows (%d)",
                            r->nrows);
        }
        cap = r->cap ? 2 * r->cap : 16;
        grown = realloc(r->rows, (size_t)cap * sizeof *grown);
        if (!grown) {
            free(row->samples);
            return fp4_fail(err, FP4_ERR_NOMEM, "fp4_report_add: out of memory for %d rows",
                            cap);
        }
        r->rows = grown;
        r->cap = cap;
    }
    r->rows[r->nrows] = *row;
    if (!row->samples) r->rows[r->nrows].nsamples = 0;
    r->nrows++;
    return FP4_OK;
}

/* Free every row's samples and the row array; the report's other fields are
 * kept and it can take new rows afterwards. NULL is a no-op. */
void fp4_report_free(fp4_report *r)
{
    if (!r) return;
    for (int i = 0; i < r->nrows && r->rows; i++) {
        free(r->rows[i].samples);
        r->rows[i].samples = NULL;
    }
    free(r->rows);
    r->rows = NULL;
    r->nrows = 0;
    r->cap = 0;
}
