/* Number formats the text table and the HTML report share, in the C locale's
 * form whatever the process's locale (a decimal comma would break the HTML's
 * numbers and make the table differ between machines). */
#ifndef FP4_REPORT_FMT_H
#define FP4_REPORT_FMT_H

#include <stddef.h>

/* A time in us with about 4 significant digits; "-" when not finite. */
void fp4_fmt_us(char *b, size_t n, double v);
/* A rate with about 3 significant digits; "-" when not finite or negative
 * (negative marks "unknown" in the row fields). */
void fp4_fmt_rate(char *b, size_t n, double v);
/* CUDA's version encoding as major.minor (13000 = 13.0); "?" when unknown. */
void fp4_fmt_cuda_version(char *b, size_t n, int v);
/* Every ',' of b becomes '.' (a printf under a decimal-comma locale). */
void fp4_fmt_point(char *b);

#endif
