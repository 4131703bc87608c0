/* SVG drawing primitives (see report/svg.h). */
#include "report/svg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fp4/io.h"

/* Colour-blind-safe hues first (Okabe and Ito's set without its yellow,
 * which does not show on white), then darker extras. */
static const char *const palette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00",
                                      "#56B4E9", "#000000", "#882255", "#44AA99", "#999933"};
#define PALETTE_SIZE ((int)(sizeof palette / sizeof palette[0]))

static const char *const dashes[FP4_SVG_DASHES] = {NULL, "6 3", "2 2", "8 3 2 3"};

const char *fp4_svg_colour(int i)
{
    if (i < 0) i = -i;
    return palette[i % PALETTE_SIZE];
}

/* The dash pattern of index d, or NULL for a solid line. */
static const char *dash_pattern(int d)
{
    if (d < 0) d = -d;
    return dashes[d % FP4_SVG_DASHES];
}

/* ---- text --------------------------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at s (1..4), or 0 when the bytes
 * there are not one. */
static size_t utf8_sequence_len(const unsigned char *s)
{
    size_t len;
    if (s[0] < 0x80) return 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) len = 2;
    else if (s[0] >= 0xE0 && s[0] <= 0xEF) len = 3;
    else if (s[0] >= 0xF0 && s[0] <= 0xF4) len = 4;
    else return 0;
    for (size_t i = 1; i < len; i++)
        if (s[i] == '\0') return 0; /* cut short by the end of the string */
    /* overlong forms, surrogates and code points past U+10FFFF */
    return fp4_utf8_valid((const char *)s, len) ? len : 0;
}

void fp4_svg_escape(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    if (!s) return;
    while (*p) {
        size_t len;
        switch (*p) {
        case '&': fputs("&amp;", f); p++; continue;
        case '<': fputs("&lt;", f); p++; continue;
        case '>': fputs("&gt;", f); p++; continue;
        case '"': fputs("&quot;", f); p++; continue;
        case '\'': fputs("&#39;", f); p++; continue;
        default: break;
        }
        if (*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r') {
            fputc('?', f);
            p++;
            continue;
        }
        len = utf8_sequence_len(p);
        if (len == 0) {
            fputc('?', f);
            p++;
            continue;
        }
        fwrite(p, 1, len, f);
        p += len;
    }
}

double fp4_svg_text_width(const char *s, double size)
{
    size_t chars = 0;
    if (!s) return 0.0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p & 0xC0) != 0x80) chars++; /* count code points, not bytes */
    return 0.6 * size * (double)chars;
}

/* Replace a locale's decimal comma by '.' in place. */
static void c_locale_point(char *b)
{
    for (; *b; b++)
        if (*b == ',') *b = '.';
}

void fp4_svg_fmt_number(char *buf, size_t n, double v)
{
    static const char suffix[] = {'k', 'M', 'G', 'T'};
    double a = fabs(v);
    if (!n) return;
    if (!isfinite(v)) {
        snprintf(buf, n, "-");
        return;
    }
    if (v == 0.0) {
        snprintf(buf, n, "0");
    } else if (a >= 1e4 && a < 1e15) {
        int i = 0;
        v /= 1e3;
        while (fabs(v) >= 1e3 && i < 3) {
            v /= 1e3;
            i++;
        }
        snprintf(buf, n, "%.3g%c", v, suffix[i]);
    } else if (a >= 1e3 && a < 1e4) {
        snprintf(buf, n, "%.0f", v);
    } else if (a >= 1e-3 && a < 1e15) {
        snprintf(buf, n, "%.3g", v);
    } else {
        snprintf(buf, n, "%.2g", v);
    }
    c_locale_point(buf);
}

/* A pixel coordinate with one decimal, written without printf's locale. */
static void put_coord(FILE *f, double v)
{
    long long tenths;
    if (!isfinite(v)) v = 0.0;
    if (v > 1e9) v = 1e9;
    if (v < -1e9) v = -1e9;
    tenths = llround(v * 10.0);
    if (tenths < 0) {
        fputc('-', f);
        tenths = -tenths;
    }
    fprintf(f, "%lld", tenths / 10);
    if (tenths % 10) fprintf(f, ".%lld", tenths % 10);
}

/* ` name="v"` with v a coordinate. */
static void put_attr(FILE *f, const char *name, double v)
{
    fprintf(f, " %s=\"", name);
    put_coord(f, v);
    fputc('"', f);
}

/* A <title> child: the tooltip of its parent element. */
static void put_tooltip(FILE *f, const char *tooltip)
{
    fputs("<title>", f);
    fp4_svg_escape(f, tooltip);
    fputs("</title>", f);
}

/* ---- scales and ticks ------------------------------------------------------------ */

void fp4_svg_scale_fit(fp4_svg_scale *s, int log, int zero_based, double dmin, double dmax,
                       double p0, double p1)
{
    s->log = log;
    s->p0 = p0;
    s->p1 = p1;
    if (!isfinite(dmin) || !isfinite(dmax) || dmin > dmax) {
        dmin = log ? 1.0 : 0.0;
        dmax = log ? 10.0 : 1.0;
    }
    if (log) {
        if (!(dmin > 0.0)) dmin = dmax > 0.0 ? dmax / 10.0 : 1.0;
        if (!(dmax > 0.0)) dmax = 10.0;
        /* normal doubles with room for the padding: the decades stay countable
         * (a subnormal time once made the tick loop run 2^31 decades) */
        if (dmin < 1e-300) dmin = 1e-300;
        if (dmax > 1e300) dmax = 1e300;
        if (dmin > dmax) dmin = dmax;
        if (dmin == dmax) {
            s->lo = dmin / 2.0;
            s->hi = dmax * 2.0;
        } else {
            s->lo = dmin / 1.25;
            s->hi = dmax * 1.25;
        }
        return;
    }
    if (zero_based && dmin >= 0.0) {
        s->lo = 0.0;
        s->hi = dmax > 0.0 ? dmax * 1.08 : 1.0;
        return;
    }
    if (dmin == dmax) {
        double pad = dmin != 0.0 ? fabs(dmin) * 0.5 : 1.0;
        s->lo = dmin - pad;
        s->hi = dmax + pad;
        return;
    }
    s->lo = dmin - 0.08 * (dmax - dmin);
    s->hi = dmax + 0.08 * (dmax - dmin);
}

double fp4_svg_map(const fp4_svg_scale *s, double v)
{
    double t;
    if (!isfinite(v)) v = s->lo;
    if (v < s->lo) v = s->lo;
    if (v > s->hi) v = s->hi;
    if (s->log) t = (log10(v) - log10(s->lo)) / (log10(s->hi) - log10(s->lo));
    else t = (v - s->lo) / (s->hi - s->lo);
    if (!isfinite(t)) t = 0.0;
    return s->p0 + t * (s->p1 - s->p0);
}

/* Is v inside the domain (within rounding)? */
static int in_domain(const fp4_svg_scale *s, double v)
{
    double eps = 1e-9 * (fabs(s->lo) + fabs(s->hi));
    return v >= s->lo - eps && v <= s->hi + eps;
}

/* Add tick v (labelled or not), or upgrade an existing one to labelled. */
static void add_tick(fp4_svg_ticks *t, double v, int major)
{
    for (int i = 0; i < t->n; i++)
        if (fabs(t->v[i] - v) <= 1e-9 * fabs(v)) {
            if (major) t->major[i] = 1;
            return;
        }
    if (t->n >= FP4_SVG_MAX_TICKS) return;
    t->v[t->n] = v;
    t->major[t->n] = major;
    t->n++;
}

static int count_major(const fp4_svg_ticks *t)
{
    int c = 0;
    for (int i = 0; i < t->n; i++) c += t->major[i];
    return c;
}

/* 1-2-5 steps, about six over the domain, all labelled. */
static void linear_ticks(const fp4_svg_scale *s, fp4_svg_ticks *t)
{
    double raw = (s->hi - s->lo) / 6.0, mag, norm, step, first;
    if (!(raw > 0.0) || !isfinite(raw)) return;
    mag = pow(10.0, floor(log10(raw)));
    norm = raw / mag;
    step = (norm < 1.5 ? 1.0 : norm < 3.5 ? 2.0 : norm < 7.5 ? 5.0 : 10.0) * mag;
    first = ceil(s->lo / step) * step;
    for (int i = 0; i < FP4_SVG_MAX_TICKS; i++) {
        double v = first + i * step;
        if (fabs(v) < 1e-12 * step) v = 0.0; /* no "-0" label */
        if (!in_domain(s, v)) break;
        add_tick(t, v, 1);
    }
}

void fp4_svg_ticks_make(const fp4_svg_scale *s, fp4_svg_ticks *t)
{
    int e0, e1, every;
    t->n = 0;
    if (!s->log) {
        linear_ticks(s, t);
        return;
    }
    if (!(s->lo > 0.0) || !(s->hi < HUGE_VAL)) return; /* not a scale fp4_svg_scale_fit makes */
    e0 = (int)floor(log10(s->lo));
    e1 = (int)ceil(log10(s->hi));
    /* at most about ten labelled decades on a very wide axis */
    every = (e1 - e0) / 10 + 1;
    for (int e = e0; e <= e1; e++) {
        double d = pow(10.0, e);
        if (in_domain(s, d) && (e % every) == 0) add_tick(t, d, 1);
    }
    if (count_major(t) < 2) {
        static const double mult[] = {2.0, 5.0};
        for (int e = e0 - 1; e <= e1; e++)
            for (int i = 0; i < 2; i++) {
                double v = mult[i] * pow(10.0, e);
                if (in_domain(s, v)) add_tick(t, v, 1);
            }
    }
    if (count_major(t) < 2) {
        for (int e = e0 - 1; e <= e1; e++)
            for (int m = 1; m <= 9; m++) {
                double v = m * pow(10.0, e);
                if (in_domain(s, v)) add_tick(t, v, 1);
            }
    }
    if (count_major(t) < 2) { /* narrower than one step between integers */
        linear_ticks(s, t);
        return;
    }
    if (log10(s->hi / s->lo) <= 4.0) {
        for (int e = e0 - 1; e <= e1; e++)
            for (int m = 2; m <= 9; m++) {
                double v = m * pow(10.0, e);
                if (in_domain(s, v)) add_tick(t, v, 0);
            }
    }
}

/* ---- elements ------------------------------------------------------------------ */

void fp4_svg_begin(FILE *f, int width, int height, int standalone, const char *plot_name,
                   const char *title, const char *extra_attrs)
{
    if (standalone) fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
    fputs("<svg", f);
    /* a namespace name, never fetched; inline in HTML the parser implies it */
    if (standalone) fputs(" xmlns=\"http://www.w3.org/2000/svg\"", f);
    fprintf(f, " width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\"", width, height, width, height);
    fputs(" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\" role=\"img\"", f);
    fputs(" data-plot=\"", f);
    fp4_svg_escape(f, plot_name);
    fputc('"', f);
    if (extra_attrs && extra_attrs[0]) fprintf(f, " %s", extra_attrs);
    fputs(">\n", f);
    put_tooltip(f, title);
    fprintf(f, "\n<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", width, height);
}

void fp4_svg_end(FILE *f)
{
    fputs("</svg>\n", f);
}

void fp4_svg_line(FILE *f, double x0, double y0, double x1, double y1, const char *colour,
                  double width, int dash)
{
    const char *d = dash_pattern(dash);
    fputs("<line", f);
    put_attr(f, "x1", x0);
    put_attr(f, "y1", y0);
    put_attr(f, "x2", x1);
    put_attr(f, "y2", y1);
    fprintf(f, " stroke=\"%s\"", colour);
    put_attr(f, "stroke-width", width);
    if (d) fprintf(f, " stroke-dasharray=\"%s\"", d);
    fputs("/>\n", f);
}

void fp4_svg_text(FILE *f, double x, double y, const char *anchor, double size, int bold,
                  double rotate, const char *colour, const char *text)
{
    fputs("<text", f);
    put_attr(f, "x", x);
    put_attr(f, "y", y);
    fprintf(f, " text-anchor=\"%s\"", anchor);
    put_attr(f, "font-size", size);
    if (bold) fputs(" font-weight=\"bold\"", f);
    if (colour) fprintf(f, " fill=\"%s\"", colour);
    if (rotate != 0.0) {
        fputs(" transform=\"rotate(", f);
        put_coord(f, rotate);
        fputc(' ', f);
        put_coord(f, x);
        fputc(' ', f);
        put_coord(f, y);
        fputs(")\"", f);
    }
    fputc('>', f);
    fp4_svg_escape(f, text);
    fputs("</text>\n", f);
}

void fp4_svg_heading(FILE *f, const fp4_svg_frame *fr, const char *text)
{
    fp4_svg_text(f, (fr->left + fr->right) / 2.0, fr->top - 12.0, "middle", 14.0, 1, 0.0, NULL,
                 text);
}

void fp4_svg_rect(FILE *f, double x, double y, double w, double h, const char *colour,
                  const char *data_step, const char *tooltip)
{
    fputs("<rect", f);
    put_attr(f, "x", x);
    put_attr(f, "y", y);
    put_attr(f, "width", w > 0.0 ? w : 0.0);
    put_attr(f, "height", h > 0.0 ? h : 0.0);
    fprintf(f, " fill=\"%s\"", colour);
    if (data_step) {
        fputs(" data-step=\"", f);
        fp4_svg_escape(f, data_step);
        fputc('"', f);
    }
    if (tooltip) {
        fputc('>', f);
        put_tooltip(f, tooltip);
        fputs("</rect>\n", f);
    } else {
        fputs("/>\n", f);
    }
}

void fp4_svg_polyline(FILE *f, const double *x, const double *y, int n, const char *colour,
                      int dash, const char *series)
{
    const char *d = dash_pattern(dash);
    fputs("<polyline fill=\"none\"", f);
    fprintf(f, " stroke=\"%s\" stroke-width=\"1.8\"", colour);
    if (d) fprintf(f, " stroke-dasharray=\"%s\"", d);
    if (series) {
        fputs(" data-series=\"", f);
        fp4_svg_escape(f, series);
        fputc('"', f);
    }
    fputs(" points=\"", f);
    for (int i = 0; i < n; i++) {
        if (i) fputc(' ', f);
        put_coord(f, x[i]);
        fputc(',', f);
        put_coord(f, y[i]);
    }
    fputs("\"/>\n", f);
}

void fp4_svg_marker(FILE *f, double x, double y, int shape, const char *colour,
                    const char *series, const char *tooltip)
{
    const double r = 4.0;
    if (shape < 0) shape = -shape;
    switch (shape % FP4_SVG_MARKERS) {
    case 0:
        fputs("<circle", f);
        put_attr(f, "cx", x);
        put_attr(f, "cy", y);
        put_attr(f, "r", r);
        fprintf(f, " fill=\"%s\"", colour);
        break;
    case 1:
        fputs("<rect", f);
        put_attr(f, "x", x - r);
        put_attr(f, "y", y - r);
        put_attr(f, "width", 2 * r);
        put_attr(f, "height", 2 * r);
        fprintf(f, " fill=\"%s\"", colour);
        break;
    case 2:
    case 3:
        fputs("<path d=\"M", f);
        if (shape % FP4_SVG_MARKERS == 2) { /* triangle */
            put_coord(f, x); fputc(' ', f); put_coord(f, y - 1.2 * r); fputs(" L", f);
            put_coord(f, x + 1.1 * r); fputc(' ', f); put_coord(f, y + 0.8 * r); fputs(" L", f);
            put_coord(f, x - 1.1 * r); fputc(' ', f); put_coord(f, y + 0.8 * r);
        } else { /* diamond */
            put_coord(f, x); fputc(' ', f); put_coord(f, y - 1.3 * r); fputs(" L", f);
            put_coord(f, x + 1.3 * r); fputc(' ', f); put_coord(f, y); fputs(" L", f);
            put_coord(f, x); fputc(' ', f); put_coord(f, y + 1.3 * r); fputs(" L", f);
            put_coord(f, x - 1.3 * r); fputc(' ', f); put_coord(f, y);
        }
        fprintf(f, " Z\" fill=\"%s\"", colour);
        break;
    default: /* cross */
        fputs("<path d=\"M", f);
        put_coord(f, x - r); fputc(' ', f); put_coord(f, y - r); fputs(" L", f);
        put_coord(f, x + r); fputc(' ', f); put_coord(f, y + r); fputs(" M", f);
        put_coord(f, x - r); fputc(' ', f); put_coord(f, y + r); fputs(" L", f);
        put_coord(f, x + r); fputc(' ', f); put_coord(f, y - r);
        fprintf(f, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"", colour);
        break;
    }
    if (series) {
        fputs(" data-marker=\"", f);
        fp4_svg_escape(f, series);
        fputc('"', f);
    }
    if (tooltip) {
        fputc('>', f);
        put_tooltip(f, tooltip);
        /* the element's own closing tag: circle, rect or path */
        switch (shape % FP4_SVG_MARKERS) {
        case 0: fputs("</circle>\n", f); break;
        case 1: fputs("</rect>\n", f); break;
        default: fputs("</path>\n", f); break;
        }
    } else {
        fputs("/>\n", f);
    }
}

void fp4_svg_legend_entry(FILE *f, double x, double y, const char *colour, int line, int dash,
                          int shape, const char *text)
{
    if (line) fp4_svg_line(f, x, y - 4.0, x + 24.0, y - 4.0, colour, 1.8, dash);
    if (shape >= 0) fp4_svg_marker(f, x + 12.0, y - 4.0, shape, colour, NULL, NULL);
    fp4_svg_text(f, x + 30.0, y, "start", 12.0, 0, 0.0, NULL, text);
}

/* ---- axes ------------------------------------------------------------------------ */

/* Grid lines: labelled ticks darker than the minor ones. */
static const char *grid_colour(int major)
{
    return major ? "#d9d9d9" : "#f0f0f0";
}

void fp4_svg_axes(FILE *f, const fp4_svg_frame *fr, const fp4_svg_scale *x,
                  const fp4_svg_scale *y, const char *x_title, const char *y_title)
{
    fp4_svg_ticks t;
    char label[32];
    fputs("<g data-role=\"axes\">\n", f);
    if (x) {
        fp4_svg_ticks_make(x, &t);
        for (int i = 0; i < t.n; i++) {
            double px = fp4_svg_map(x, t.v[i]), tick = t.major[i] ? 5.0 : 3.0;
            fp4_svg_line(f, px, fr->top, px, fr->bottom, grid_colour(t.major[i]), 1.0, 0);
            fp4_svg_line(f, px, fr->bottom, px, fr->bottom + tick, "#666666", 1.0, 0);
            if (!t.major[i]) continue;
            fp4_svg_fmt_number(label, sizeof label, t.v[i]);
            fp4_svg_text(f, px, fr->bottom + 18.0, "middle", 11.0, 0, 0.0, "#333333", label);
        }
    }
    if (y) {
        fp4_svg_ticks_make(y, &t);
        for (int i = 0; i < t.n; i++) {
            double py = fp4_svg_map(y, t.v[i]), tick = t.major[i] ? 5.0 : 3.0;
            fp4_svg_line(f, fr->left, py, fr->right, py, grid_colour(t.major[i]), 1.0, 0);
            fp4_svg_line(f, fr->left - tick, py, fr->left, py, "#666666", 1.0, 0);
            if (!t.major[i]) continue;
            fp4_svg_fmt_number(label, sizeof label, t.v[i]);
            fp4_svg_text(f, fr->left - 8.0, py + 4.0, "end", 11.0, 0, 0.0, "#333333", label);
        }
    }
    fputs("<rect", f);
    put_attr(f, "x", fr->left);
    put_attr(f, "y", fr->top);
    put_attr(f, "width", fr->right - fr->left);
    put_attr(f, "height", fr->bottom - fr->top);
    fputs(" fill=\"none\" stroke=\"#888888\"/>\n", f);
    if (x_title)
        fp4_svg_text(f, (fr->left + fr->right) / 2.0, fr->bottom + 38.0, "middle", 12.0, 0, 0.0,
                     NULL, x_title);
    if (y_title)
        fp4_svg_text(f, fr->left - 52.0, (fr->top + fr->bottom) / 2.0, "middle", 12.0, 0, -90.0,
                     NULL, y_title);
    fputs("</g>\n", f);
}
