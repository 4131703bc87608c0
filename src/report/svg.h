/* SVG drawing primitives for the HTML report (src/report/html.c): text
 * escaping, linear and log10 scales with their ticks, axes, polylines,
 * markers, legends. Everything writes to a FILE and nothing here fails: write
 * errors show up on the FILE, which the caller checks once at the end.
 *
 * Styling is done with presentation attributes on each element (no CSS
 * classes), so that a plot reads the same inline in the HTML and alone in a
 * .svg file. Numbers are written without the C library's locale (a decimal
 * comma would break the SVG). */
#ifndef FP4_REPORT_SVG_H
#define FP4_REPORT_SVG_H

#include <stddef.h>
#include <stdio.h>

/* Text for HTML and SVG (which is XML) alike: & < > " ' become entities;
 * C0 control bytes other than tab, LF and CR, and bytes that are not part of
 * a well-formed UTF-8 sequence, become '?' (XML cannot carry them at all, not
 * even as character references). Safe in element text and in quoted
 * attribute values. NULL writes nothing. */
void fp4_svg_escape(FILE *f, const char *s);

/* v with the C locale's '.', in the shortest of a few fixed forms that fits:
 * a tick or value label ("0.05", "2", "300", "1.5k", "10k", "2M", "1e-05"). */
void fp4_svg_fmt_number(char *buf, size_t n, double v);

/* A scale from data values to pixel coordinates: lo maps to p0, hi to p1. */
typedef struct fp4_svg_scale {
    int log;       /* 1: log10 (lo > 0) */
    double lo, hi; /* the domain, lo < hi */
    double p0, p1; /* pixels of lo and hi (p1 < p0 for a y axis) */
} fp4_svg_scale;

/* The scale over data in [dmin, dmax], padded so that no point sits on the
 * frame: 15% of the range (linear; from 0 when zero_based) or a factor of
 * 1.25 (log). A single value gets a range around it; non-positive or
 * non-finite bounds on a log scale fall back to [1, 10]. */
void fp4_svg_scale_fit(fp4_svg_scale *s, int log, int zero_based, double dmin, double dmax,
                       double p0, double p1);
/* The pixel of v (v is clamped into the domain first). */
double fp4_svg_map(const fp4_svg_scale *s, double v);

#define FP4_SVG_MAX_TICKS 64
/* Ticks of a scale. Log scales: every decade in the domain, labelled; when
 * fewer than two decades fall inside, also 2x and 5x (then every integer
 * multiple) labelled, so a narrow axis still reads; unlabelled minor ticks
 * at 2..9 x each decade when the domain spans at most 4 decades. Linear:
 * 1-2-5 steps, about 6 of them. */
typedef struct fp4_svg_ticks {
    int n;
    double v[FP4_SVG_MAX_TICKS];
    int major[FP4_SVG_MAX_TICKS]; /* 1: labelled with a grid line */
} fp4_svg_ticks;
void fp4_svg_ticks_make(const fp4_svg_scale *s, fp4_svg_ticks *t);

/* The plot area inside an svg element, in pixels. */
typedef struct fp4_svg_frame {
    double left, top, right, bottom;
} fp4_svg_frame;

/* Open an svg element width x height with a title (its first child, which
 * browsers show as a tooltip and screen readers read). standalone: a
 * document of its own (XML declaration and the SVG namespace); otherwise an
 * element inline in HTML, which needs neither. plot_name goes into
 * data-plot; extra_attrs (may be NULL) is written as is inside the tag
 * (the caller escapes it). */
void fp4_svg_begin(FILE *f, int width, int height, int standalone, const char *plot_name,
                   const char *title, const char *extra_attrs);
void fp4_svg_end(FILE *f);

/* The chart title, centred above the frame. */
void fp4_svg_heading(FILE *f, const fp4_svg_frame *fr, const char *text);

/* Frame, grid, ticks, tick labels and axis titles of an x-y chart; x or y may
 * be NULL (a categorical axis the caller draws). */
void fp4_svg_axes(FILE *f, const fp4_svg_frame *fr, const fp4_svg_scale *x,
                  const fp4_svg_scale *y, const char *x_title, const char *y_title);

/* A straight line; dash: 0 solid, else a dash pattern (fp4_svg_dash). */
void fp4_svg_line(FILE *f, double x0, double y0, double x1, double y1, const char *colour,
                  double width, int dash);
/* Text at (x, y); anchor "start", "middle" or "end"; rotate in degrees
 * around (x, y) (0: none); bold != 0 for a heavier weight. */
void fp4_svg_text(FILE *f, double x, double y, const char *anchor, double size, int bold,
                  double rotate, const char *colour, const char *text);
/* A filled rectangle with an optional tooltip and data-step attribute
 * (either may be NULL). */
void fp4_svg_rect(FILE *f, double x, double y, double w, double h, const char *colour,
                  const char *data_step, const char *tooltip);
/* The line through n points (pixels) of one series, data-series="series". */
void fp4_svg_polyline(FILE *f, const double *x, const double *y, int n, const char *colour,
                      int dash, const char *series);
/* A point marker: shape 0 circle, 1 square, 2 triangle, 3 diamond, 4 cross
 * (others wrap around), with an optional tooltip and data-series. */
void fp4_svg_marker(FILE *f, double x, double y, int shape, const char *colour,
                    const char *series, const char *tooltip);

/* One legend entry at (x, y): a short line (dash, when line != 0) with the
 * marker, then the text. */
void fp4_svg_legend_entry(FILE *f, double x, double y, const char *colour, int line, int dash,
                          int shape, const char *text);

/* The fixed palette (colour-blind safe order), colour i modulo its size. */
const char *fp4_svg_colour(int i);
#define FP4_SVG_MARKERS 5
#define FP4_SVG_DASHES 4

/* A rough text width in pixels for the sans-serif font at size (for
 * margins and legends; no font metrics here). */
double fp4_svg_text_width(const char *s, double size);

#endif
