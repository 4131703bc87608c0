/* Workloads: shape strings, presets (CONTEXT.md sections 1 and 6) and spec files. */
#include "fp4/shapes.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp4/io.h"
#include "fp4/moe.h"

fp4_status fp4_cases_add(fp4_case_list *l, int64_t m, int64_t n, int64_t k, const char *label,
                         fp4_err *err)
{
    fp4_shape s = {m, n, k};
    if (!l) return fp4_fail(err, FP4_ERR_INVALID_ARG, "NULL case list");
    fp4_status st = fp4_shape_check(&s, err);
    size_t len = label ? strlen(label) : 0;
    if (st != FP4_OK) return st;
    /* labels go into JSON, CSV and tables: refuse what would be cut short or
     * would not print (a label cut at 63 bytes could end mid-character) */
    if (len >= FP4_LABEL_LEN)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "label '%.20s...' is longer than %d bytes", label,
                        FP4_LABEL_LEN - 1);
    if (!fp4_utf8_valid(label, len))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "a label is not valid UTF-8");
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)label[i] < 0x20 || label[i] == 0x7F)
            return fp4_fail(err, FP4_ERR_INVALID_ARG, "a label has a control character");
    if (l->count >= FP4_MAX_CASES)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "more than %d cases", FP4_MAX_CASES);
    if (l->count == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        fp4_case *p = realloc(l->items, (size_t)cap * sizeof *p);
        if (!p) return fp4_fail(err, FP4_ERR_NOMEM, "no memory for the case list");
        l->items = p;
        l->cap = cap;
    }
    fp4_case *c = &l->items[l->count++];
    c->shape = s;
    snprintf(c->label, sizeof c->label, "%s", label && label[0] ? label : "custom");
    return FP4_OK;
}

void fp4_cases_free(fp4_case_list *l)
{
    free(l->items);
    memset(l, 0, sizeof *l);
}

/* Parse a signed decimal integer from [s, end); -1 on junk or overflow (a
 * sign '+' or a space, which strtoll would skip, is junk too: " 16x64x64" is
 * no shape). */
static int parse_int(const char *s, const char *end, int64_t *out)
{
    char buf[32];
    size_t len = (size_t)(end - s);
    char *stop;
    if (len == 0 || len >= sizeof buf) return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (!(isdigit((unsigned char)buf[0]) || (buf[0] == '-' && isdigit((unsigned char)buf[1])))) return -1;
    errno = 0;
    long long v = strtoll(buf, &stop, 10);
    if (*stop != '\0' || errno == ERANGE) return -1;
    *out = v;
    return 0;
}

fp4_status fp4_cases_parse_shapes(fp4_case_list *l, const char *arg, fp4_err *err)
{
    const char *p = arg;
    if (!l) return fp4_fail(err, FP4_ERR_INVALID_ARG, "NULL case list");
    if (!arg || !*arg) return fp4_fail(err, FP4_ERR_INVALID_ARG, "empty list");
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        int64_t dims[3];
        const char *q = p;
        for (int i = 0; i < 3; i++) {
            const char *x = q;
            while (x < end && *x != 'x' && *x != 'X') x++;
            if ((i < 2 && x == end) || (i == 2 && x != end) || parse_int(q, x, &dims[i]))
                return fp4_fail(err, FP4_ERR_INVALID_ARG,
                                "'%.*s' is not MxNxK (three integers joined by 'x')",
                                (int)(end - p), p);
            q = x + 1;
        }
        fp4_status st = fp4_cases_add(l, dims[0], dims[1], dims[2], "custom", err);
        if (st != FP4_OK) return st;
        p = *end ? end + 1 : end;
        if (*end && !*p) return fp4_fail(err, FP4_ERR_INVALID_ARG, "trailing comma");
    }
    return FP4_OK;
}

int64_t fp4_moe_tokens_per_expert(int64_t batch, int topk, int experts)
{
    if (experts < 1) return 1; /* no experts: the least, not a division by zero */
    int64_t t = (batch * topk + experts - 1) / experts;
    return t < 1 ? 1 : t;
}

static fp4_status preset_seed(fp4_case_list *l, fp4_err *err)
{
    static const int64_t up_m[] = {16, 64, 256, 512, 1024}, attn_m[] = {16, 64, 256};
    fp4_status st = FP4_OK;
    for (int i = 0; i < 5 && st == FP4_OK; i++)
        st = fp4_cases_add(l, up_m[i], 2048, 6144, "moe-up", err);
    for (int i = 0; i < 3 && st == FP4_OK; i++)
        st = fp4_cases_add(l, attn_m[i], 768, 6144, "attn-tp8", err);
    return st;
}

static fp4_status preset_sweep_m(fp4_case_list *l, fp4_err *err)
{
    fp4_status st = FP4_OK;
    for (int64_t m = 1; m <= 8192 && st == FP4_OK; m *= 2)
        st = fp4_cases_add(l, m, 2048, 6144, "moe-up", err);
    for (int64_t m = 1; m <= 8192 && st == FP4_OK; m *= 2)
        st = fp4_cases_add(l, m, 768, 6144, "attn-tp8", err);
    return st;
}

/* The shapes fp4-sm90 has performance targets for: M = 16 and 64 on both seed
 * (N, K) pairs, M = 256 .. 8192 at 2048x6144, 8192^3, and M = 16 on two
 * larger weights (8192x8192, 28672x4096). */
static fp4_status preset_targets(fp4_case_list *l, fp4_err *err)
{
    static const int64_t t[][3] = {{16, 2048, 6144},   {64, 2048, 6144},   {16, 768, 6144},
                                   {64, 768, 6144},    {256, 2048, 6144},  {1024, 2048, 6144},
                                   {2048, 2048, 6144}, {4096, 2048, 6144}, {8192, 2048, 6144},
                                   {8192, 8192, 8192}, {16, 8192, 8192},   {16, 28672, 4096}};
    fp4_status st = FP4_OK;
    for (size_t i = 0; i < sizeof t / sizeof t[0] && st == FP4_OK; i++)
        st = fp4_cases_add(l, t[i][0], t[i][1], t[i][2], "target", err);
    return st;
}

/* Every model's expert GEMMs at decode (a batch of 512 requests) and prefill
 * (8192 tokens): M is the tokens one expert sees on average. */
static fp4_status preset_models(fp4_case_list *l, fp4_err *err)
{
    static const int64_t batches[] = {512, 8192};
    fp4_status st = FP4_OK;
    char label[FP4_LABEL_LEN];
    for (int i = 0; i < fp4_moe_preset_count() && st == FP4_OK; i++) {
        const fp4_moe_preset *md = fp4_moe_preset_at(i);
        for (int b = 0; b < 2 && st == FP4_OK; b++) {
            int64_t m = fp4_moe_tokens_per_expert(batches[b], md->top_k, md->experts);
            snprintf(label, sizeof label, "%s.gate_up.b%lld", md->name, (long long)batches[b]);
            st = fp4_cases_add(l, m, 2 * (int64_t)md->inter, md->hidden, label, err);
            if (st != FP4_OK) break;
            snprintf(label, sizeof label, "%s.down.b%lld", md->name, (long long)batches[b]);
            st = fp4_cases_add(l, m, md->hidden, md->inter, label, err);
        }
    }
    return st;
}

/* Small shapes that exercise tails: for quick checks and tests. */
static fp4_status preset_odd(fp4_case_list *l, fp4_err *err)
{
    static const int64_t t[][3] = {{1, 8, 16},     {3, 200, 48},    {17, 1, 2880},
                                   {129, 256, 2880}, {1, 2048, 6144}, {33, 768, 160}};
    fp4_status st = FP4_OK;
    for (size_t i = 0; i < sizeof t / sizeof t[0] && st == FP4_OK; i++)
        st = fp4_cases_add(l, t[i][0], t[i][1], t[i][2], "odd", err);
    return st;
}

typedef struct preset {
    const char *name;
    const char *summary;
    fp4_status (*fill)(fp4_case_list *, fp4_err *);
} preset;

static const preset presets[] = {
    {"seed", "the 8 shapes of the GLM-5 report: moe-up (16..1024)x2048x6144, attn-tp8 (16..256)x768x6144",
     preset_seed},
    {"sweep-m", "M = 1, 2, 4 ... 8192 on both seed (N, K) pairs (28 shapes)", preset_sweep_m},
    {"targets", "the 12 shapes fp4-sm90 has performance targets for", preset_targets},
    {"models", "gate_up and down expert GEMMs of 8 MoE models at batch 512 and 8192", preset_models},
    {"odd", "small shapes with tails (M=1, N=1, K=16/48/2880)", preset_odd},
};

int fp4_preset_count(void)
{
    return (int)(sizeof presets / sizeof presets[0]);
}

const char *fp4_preset_name(int i)
{
    return (i >= 0 && i < fp4_preset_count()) ? presets[i].name : NULL;
}

const char *fp4_preset_summary(int i)
{
    return (i >= 0 && i < fp4_preset_count()) ? presets[i].summary : NULL;
}

fp4_status fp4_cases_from_preset(fp4_case_list *l, const char *name, fp4_err *err)
{
    if (!l || !name) return fp4_fail(err, FP4_ERR_INVALID_ARG, "NULL case list or preset name");
    for (int i = 0; i < fp4_preset_count(); i++)
        if (strcmp(presets[i].name, name) == 0) return presets[i].fill(l, err);
    char names[256] = "";
    for (int i = 0; i < fp4_preset_count(); i++) {
        strncat(names, presets[i].name, sizeof names - strlen(names) - 1);
        if (i + 1 < fp4_preset_count()) strncat(names, ", ", sizeof names - strlen(names) - 1);
    }
    return fp4_fail(err, FP4_ERR_NOT_FOUND, "unknown preset '%s' (known: %s)", name, names);
}

/* Where spec text comes from: a stream or a buffer (fp4_cases_parse_spec). */
typedef struct spec_src {
    FILE *f;
    const char *mem;
    size_t len, pos;
} spec_src;

/* The next byte, or EOF. */
static int spec_getc(spec_src *s)
{
    if (s->f) return getc(s->f);
    return s->pos < s->len ? (unsigned char)s->mem[s->pos++] : EOF;
}

/* One line without its '\n' into line[FP4_SPEC_LINE_MAX + 1]: 1 when a line
 * was read, 0 at the end, -1 when it is longer than FP4_SPEC_LINE_MAX bytes
 * (the rest is not read: the limit holds while reading, whatever the line's
 * length), -2 when it holds a NUL byte. */
static int spec_line(spec_src *s, char *line, size_t *len)
{
    int c, any = 0;
    *len = 0;
    while ((c = spec_getc(s)) != EOF) {
        any = 1;
        if (c == '\n') break;
        if (c == '\0') return -2;
        if (*len == FP4_SPEC_LINE_MAX) return -1;
        line[(*len)++] = (char)c;
    }
    line[*len] = '\0';
    return any;
}

/* Parse spec text from s; name is the file's name in messages. */
static fp4_status spec_parse(fp4_case_list *l, spec_src *s, const char *path, fp4_err *err)
{
    char *line = malloc(FP4_SPEC_LINE_MAX + 1);
    size_t len;
    int lineno = 0, added = 0, got;
    fp4_status st = FP4_OK;
    if (!line) return fp4_fail(err, FP4_ERR_NOMEM, "%s: out of memory", path);
    while ((got = spec_line(s, line, &len)) != 0) {
        lineno++;
        if (got == -2) { /* a NUL byte: not a text file */
            st = fp4_fail(err, FP4_ERR_FORMAT, "%s:%d: NUL byte (not a text file)", path, lineno);
            goto out;
        }
        if (got == -1) {
            st = fp4_fail(err, FP4_ERR_FORMAT, "%s:%d: line too long (more than %d bytes)", path, lineno,
                          FP4_SPEC_LINE_MAX);
            goto out;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *tok[5];
        int ntok = 0;
        for (char *save = NULL, *t = strtok_r(line, " \t\r\n", &save); t;
             t = strtok_r(NULL, " \t\r\n", &save)) {
            if (ntok == 5) break;
            tok[ntok++] = t;
        }
        if (ntok == 0) continue;
        int64_t d[3];
        if (ntok < 3 || ntok > 4) {
            st = fp4_fail(err, FP4_ERR_FORMAT, "%s:%d: expected 'M N K [label]'", path, lineno);
            goto out;
        }
        for (int i = 0; i < 3; i++)
            if (parse_int(tok[i], tok[i] + strlen(tok[i]), &d[i])) {
                /* the token may be any bytes: show it only when it prints */
                size_t tl = strlen(tok[i]);
                int shown = tl <= 32 && fp4_utf8_valid(tok[i], tl);
                st = fp4_fail(err, FP4_ERR_FORMAT, "%s:%d: '%s' is not an integer", path, lineno,
                              shown ? tok[i] : "(a word)");
                goto out;
            }
        fp4_err inner;
        st = fp4_cases_add(l, d[0], d[1], d[2], ntok == 4 ? tok[3] : "spec", &inner);
        if (st != FP4_OK) {
            fp4_fail(err, st, "%s:%d: %s", path, lineno, inner.msg);
            goto out;
        }
        added++;
    }
    if (s->f && ferror(s->f)) {
        st = fp4_fail(err, FP4_ERR_IO, "error reading %s", path);
        goto out;
    }
    if (added == 0) st = fp4_fail(err, FP4_ERR_FORMAT, "%s: no problems in the spec file", path);
out:
    free(line);
    return st;
}

fp4_status fp4_cases_from_spec(fp4_case_list *l, const char *path, fp4_err *err)
{
    spec_src s;
    fp4_status st;
    memset(&s, 0, sizeof s);
    if (!l || !path) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_cases_from_spec: NULL argument");
    s.f = fopen(path, "r");
    if (!s.f) return fp4_fail(err, FP4_ERR_IO, "cannot open spec file %s: %s", path, strerror(errno));
    st = spec_parse(l, &s, path, err);
    fclose(s.f);
    return st;
}

fp4_status fp4_cases_parse_spec(fp4_case_list *l, const char *text, size_t len, const char *name,
                                fp4_err *err)
{
    spec_src s;
    memset(&s, 0, sizeof s);
    if (!l || (!text && len)) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_cases_parse_spec: NULL argument");
    s.mem = text;
    s.len = len;
    return spec_parse(l, &s, name ? name : "(memory)", err);
}
