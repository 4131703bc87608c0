/* Number formats the text table and the HTML report share (fmt.h). */
#include "report/fmt.h"

#include <math.h>
#include <stdio.h>

void fp4_fmt_point(char *b)
{
    for (; *b; b++)
        if (*b == ',') *b = '.';
}

void fp4_fmt_us(char *b, size_t n, double v)
{
    if (!isfinite(v)) snprintf(b, n, "-");
    else if (fabs(v) < 10.0) snprintf(b, n, "%.3f", v);
    else if (fabs(v) < 100.0) snprintf(b, n, "%.2f", v);
    else if (fabs(v) < 1000.0) snprintf(b, n, "%.1f", v);
    else snprintf(b, n, "%.0f", v);
    fp4_fmt_point(b);
}

void fp4_fmt_rate(char *b, size_t n, double v)
{
    if (!isfinite(v) || v < 0.0) snprintf(b, n, "-");
    else if (v >= 100.0) snprintf(b, n, "%.0f", v);
    else if (v >= 10.0) snprintf(b, n, "%.1f", v);
    else if (v >= 1.0) snprintf(b, n, "%.2f", v);
    else if (v == 0.0) snprintf(b, n, "0");
    else snprintf(b, n, "%.3g", v);
    fp4_fmt_point(b);
}

void fp4_fmt_cuda_version(char *b, size_t n, int v)
{
    if (v <= 0) snprintf(b, n, "?");
    else snprintf(b, n, "%d.%d", v / 1000, (v % 1000) / 10);
}
