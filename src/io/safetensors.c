/* .safetensors files and NVFP4 checkpoints in them.
 *
 * A .safetensors file is: a u64 LE header length N, N bytes of JSON (padded
 * with spaces), then the data section. The JSON maps each tensor name to
 * {"dtype": "F32", "shape": [3, 4], "data_offsets": [begin, end]}, offsets
 * relative to the data section; an optional "__metadata__" maps strings to
 * strings. As the reference implementation does, reading requires the tensors
 * to cover the data section exactly, without gaps or overlaps, so truncated
 * and corrupted files are caught (FP4_ERR_FORMAT). */
#include "fp4/io.h"
#include "io/file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "fp4bench reads and writes little-endian files by memcpy: a little-endian host is needed"
#endif

#define ST_HEADER_CAP 100000000ull   /* the reference implementation's limit */
#define ST_MAX_INT 9007199254740992.0 /* 2^53: integers exact in a JSON double */
#define ST_ALIGN 8

/* ---- header parsing ---------------------------------------------------------- */

/* A tensor entry of the header with its data range. */
typedef struct st_entry {
    fp4_tensor *t;
    unsigned long long begin, end;
} st_entry;

/* ---- the header scan ------------------------------------------------------- */

/* cJSON builds a node of about 64 bytes for every value, so a 100 MB header
 * of "0,0,0,..." would cost gigabytes before any check of ours could refuse
 * it. The header text is therefore first scanned, in chunks as it is read,
 * by this small state machine, which only follows strings, nesting and
 * separators: it bounds the nesting depth, the entries of any list and the
 * values in all (FP4_ST_MAX_*), and refuses "\u0000" (a NUL would cut a name
 * short inside cJSON). Syntax errors are left to cJSON. */
typedef enum scan_why {
    SCAN_OK = 0,
    SCAN_DEPTH,  /* nested deeper than FP4_ST_MAX_DEPTH */
    SCAN_ARRAY,  /* a list longer than FP4_ST_MAX_ARRAY */
    SCAN_VALUES, /* more than FP4_ST_MAX_VALUES values */
    SCAN_NUL     /* a \u0000 escape */
} scan_why;

typedef struct st_scan {
    int depth;
    char kind[FP4_ST_MAX_DEPTH + 1]; /* '{' or '[' of each open level, from 1 */
    long long entries[FP4_ST_MAX_DEPTH + 1];
    int expect_key;                  /* in an object, the next string is a key */
    int in_token;                    /* inside a number or a literal */
    int in_string, escape;
    int u_digits;                    /* 1 + hex digits of a \u escape seen so far */
    unsigned u_value;
    long long values;
    unsigned long long at;           /* bytes scanned */
    scan_why why;
} st_scan;

/* A value starts here: count it, and as a list entry when in a list. */
static void scan_value(st_scan *sc)
{
    if (sc->depth > 0 && sc->kind[sc->depth] == '[' &&
        ++sc->entries[sc->depth] > FP4_ST_MAX_ARRAY)
        sc->why = SCAN_ARRAY;
    else if (++sc->values > FP4_ST_MAX_VALUES)
        sc->why = SCAN_VALUES;
}

/* One byte inside a string. */
static void scan_string_byte(st_scan *sc, char c)
{
    if (sc->u_digits > 0) {
        int h = (c >= '0' && c <= '9') ? c - '0'
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (h < 0) { /* a bad escape: cJSON refuses it */
            sc->u_digits = 0;
            if (c == '"') sc->in_string = 0;
            return;
        }
        sc->u_value = sc->u_value << 4 | (unsigned)h;
        if (++sc->u_digits == 5) {
            if (sc->u_value == 0) sc->why = SCAN_NUL;
            sc->u_digits = 0;
        }
    } else if (sc->escape) {
        sc->escape = 0;
        if (c == 'u') {
            sc->u_digits = 1;
            sc->u_value = 0;
        }
    } else if (c == '\\') {
        sc->escape = 1;
    } else if (c == '"') {
        sc->in_string = 0;
    }
}

/* Feed n more bytes of header text; -1 (with sc->why) once refused. */
static int scan_feed(st_scan *sc, const char *p, size_t n)
{
    for (size_t i = 0; i < n && sc->why == SCAN_OK; i++, sc->at++) {
        char c = p[i];
        int in_obj = sc->depth > 0 && sc->kind[sc->depth] == '{';
        if (sc->in_string) {
            scan_string_byte(sc, c);
            continue;
        }
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != ':' && c != ',' &&
            c != '"' && c != '{' && c != '[' && c != '}' && c != ']') {
            /* a number or literal: only its first byte starts a value */
            if (!sc->in_token) scan_value(sc);
            sc->in_token = 1;
            continue;
        }
        sc->in_token = 0;
        switch (c) {
        case ':': sc->expect_key = 0; break;
        case ',': sc->expect_key = in_obj; break;
        case '"':
            if (!(in_obj && sc->expect_key)) scan_value(sc);
            sc->in_string = 1;
            break;
        case '{':
        case '[':
            scan_value(sc);
            if (sc->why != SCAN_OK) break;
            if (sc->depth == FP4_ST_MAX_DEPTH) {
                sc->why = SCAN_DEPTH;
                break;
            }
            sc->depth++;
            sc->kind[sc->depth] = c;
            sc->entries[sc->depth] = 0;
            sc->expect_key = c == '{';
            break;
        case '}':
        case ']':
            if (sc->depth > 0) sc->depth--;
            sc->expect_key = 0;
            break;
        default: break; /* white space */
        }
    }
    return sc->why == SCAN_OK ? 0 : -1;
}

/* The refusal of a scan as a message. */
static fp4_status scan_fail(const st_scan *sc, const char *path, fp4_err *err)
{
    unsigned long long at = sc->at ? sc->at - 1 : 0;
    switch (sc->why) {
    case SCAN_DEPTH:
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: header nested more than %d levels deep (at byte %llu)",
                        path, FP4_ST_MAX_DEPTH, at);
    case SCAN_ARRAY:
        return fp4_fail(err, FP4_ERR_FORMAT,
                        "%s: header has a list of more than %d entries (at byte %llu; a shape has at most %d "
                        "dimensions)", path, FP4_ST_MAX_ARRAY, at, FP4_MAX_DIMS);
    case SCAN_VALUES:
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: header has more than %d JSON values (at byte %llu)", path,
                        FP4_ST_MAX_VALUES, at);
    case SCAN_NUL:
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: header has a string with a NUL character (at byte %llu)",
                        path, at);
    case SCAN_OK: break;
    }
    return fp4_fail(err, FP4_ERR_INTERNAL, "%s: header scan failed without a reason", path);
}

/* The dtype named s in safetensors spelling; -1 when fp4bench has no such dtype. */
static int dtype_from_name(const char *s, fp4_dtype *t)
{
    for (int i = 0; i < FP4_DT_COUNT; i++) {
        if (strcmp(s, fp4_dtype_name((fp4_dtype)i)) == 0) {
            *t = (fp4_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* A JSON number that is a non-negative integer exactly representable (<= 2^53). */
static int json_uint(const cJSON *j, unsigned long long *v)
{
    double d;
    if (!cJSON_IsNumber(j)) return -1;
    d = j->valuedouble;
    if (!(d >= 0.0 && d <= ST_MAX_INT) || d != floor(d)) return -1;
    *v = (unsigned long long)d;
    return 0;
}

/* Fill e->t (name, dtype, shape, nbytes) and the offsets from the header
 * entry j. Does not allocate data. */
static fp4_status parse_entry(const cJSON *j, st_entry *e, const char *path, fp4_err *err)
{
    const char *name = j->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    const cJSON *x;
    fp4_tensor *t = e->t;
    size_t numel = 1;
    int n;

    const char *why = fp4_tensor_name_problem(name);

    if (why) {
        /* a long name is legal safetensors that fp4bench cannot hold; the
         * rest is no name at all (and is not echoed: it may not print) */
        size_t len = strlen(name);
        if (len >= FP4_TENSOR_NAME_LEN && fp4_utf8_valid(name, len))
            return fp4_fail(err, FP4_ERR_UNSUPPORTED, "%s: tensor name '%.40s...' longer than %d bytes",
                            path, name, FP4_TENSOR_NAME_LEN - 1);
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: a tensor name %s", path, why);
    }
    memcpy(t->name, name, strlen(name) + 1);
    if (!cJSON_IsObject(j))
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: tensor '%s' is not a JSON object", path, name);
    if (!cJSON_IsString(dt))
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: tensor '%s' has no \"dtype\" string", path, name);
    if (!cJSON_IsArray(sh))
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: tensor '%s' has no \"shape\" list", path, name);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: tensor '%s' has no \"data_offsets\" pair", path, name);
    if (dtype_from_name(dt->valuestring, &t->dtype))
        return fp4_fail(err, FP4_ERR_DTYPE,
                        "%s: tensor '%s' has dtype %.32s, not one fp4bench reads (U8, F8_E4M3, F16, BF16, F32)",
                        path, name, dt->valuestring);
    n = cJSON_GetArraySize(sh);
    if (n > FP4_MAX_DIMS)
        return fp4_fail(err, FP4_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dimensions, at most %d supported",
                        path, name, n, FP4_MAX_DIMS);
    t->ndim = 0;
    cJSON_ArrayForEach(x, sh) {
        unsigned long long d;
        if (json_uint(x, &d) || d > (unsigned long long)INT64_MAX)
            return fp4_fail(err, FP4_ERR_FORMAT, "%s: tensor '%s' has a shape entry that is not a non-negative integer",
                            path, name);
        t->shape[t->ndim++] = (int64_t)d;
    }
    /* a zero dimension makes it 0 whatever the others (fp4_tensor_numel) */
    for (int i = 0; i < t->ndim && numel; i++)
        if (t->shape[i] == 0) numel = 0;
    for (int i = 0; i < t->ndim && numel; i++)
        if (fp4_size_mul(numel, (size_t)t->shape[i], &numel))
            return fp4_fail(err, FP4_ERR_FORMAT, "%s: tensor '%s': shape element count overflows", path, name);
    if (fp4_size_mul(numel, fp4_dtype_size(t->dtype), &t->nbytes) || t->nbytes > (size_t)INT64_MAX)
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: tensor '%s': shape byte count overflows", path, name);
    if (json_uint(cJSON_GetArrayItem(off, 0), &e->begin) ||
        json_uint(cJSON_GetArrayItem(off, 1), &e->end))
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: tensor '%s' has data_offsets that are not non-negative integers",
                        path, name);
    if (e->begin > e->end)
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: tensor '%s' has data_offsets [%llu, %llu], begin after end",
                        path, name, e->begin, e->end);
    if (e->end - e->begin != (unsigned long long)t->nbytes)
        return fp4_fail(err, FP4_ERR_FORMAT,
                        "%s: tensor '%s' has data_offsets spanning %llu bytes, but %s with %zu elements needs %zu",
                        path, name, e->end - e->begin, fp4_dtype_name(t->dtype), numel, t->nbytes);
    return FP4_OK;
}

/* Check that __metadata__ is an object of strings. */
static fp4_status check_metadata(const cJSON *m, const char *path, fp4_err *err)
{
    const cJSON *x;
    if (!cJSON_IsObject(m))
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: __metadata__ is not a JSON object", path);
    cJSON_ArrayForEach(x, m) {
        if (!cJSON_IsString(x))
            return fp4_fail(err, FP4_ERR_FORMAT, "%s: __metadata__ value '%.64s' is not a string", path,
                            x->string);
    }
    return FP4_OK;
}

/* qsort order of entries by data range. */
static int cmp_range(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* qsort order of entries by name. */
static int cmp_name(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    return strcmp(x->t->name, y->t->name);
}

/* Scan the hlen header bytes at the source's position (see st_scan) in
 * chunks, so that a refused header is never held in memory whole. */
static fp4_status scan_header(fp4_io_src *src, unsigned long long hlen, fp4_err *err)
{
    char chunk[16384];
    st_scan sc;
    memset(&sc, 0, sizeof sc);
    while (hlen > 0) {
        size_t n = hlen < sizeof chunk ? (size_t)hlen : sizeof chunk;
        fp4_status st = fp4_io_src_read(src, chunk, n, err);
        if (st) return st;
        if (scan_feed(&sc, chunk, n)) return scan_fail(&sc, src->name, err);
        hlen -= n;
    }
    return FP4_OK;
}

/* Which tensors' data a read loads: all of them, or those named in a list. */
typedef struct st_want {
    int all;
    const char *const *names;
    int count;
} st_want;

/* Is the data of the tensor called name to be read? */
static int is_wanted(const st_want *w, const char *name)
{
    if (w->all) return 1;
    for (int i = 0; i < w->count; i++)
        if (w->names[i] && strcmp(w->names[i], name) == 0) return 1;
    return 0;
}

/* Read the tensors from src (see io.h), the data of those w wants. On failure
 * *out is NULL and *count 0. */
static fp4_status st_read_src(fp4_io_src *src, const st_want *w, fp4_tensor **out, int *count,
                              fp4_err *err)
{
    fp4_status st = FP4_OK;
    const char *path = src->name;
    long long fsize = src->size;
    unsigned char lenbuf[8];
    unsigned long long hlen = 0, data_len, pos;
    char *hdr = NULL;
    const char *end = NULL;
    cJSON *root = NULL;
    const cJSON *j;
    fp4_tensor *ts = NULL;
    st_entry *es = NULL;
    int n = 0, i, skipped = 0;

    if (fsize < 8) {
        st = fp4_fail(err, FP4_ERR_FORMAT, "%s: truncated: %lld bytes, less than the 8-byte header length",
                      path, fsize);
        goto out;
    }
    st = fp4_io_src_read(src, lenbuf, 8, err);
    if (st) goto out;
    if (memcmp(lenbuf, "\x93NUMPY", 6) == 0) {
        st = fp4_fail(err, FP4_ERR_FORMAT, "%s: this is a .npy file, not safetensors", path);
        goto out;
    }
    for (i = 7; i >= 0; i--) hlen = hlen << 8 | lenbuf[i];
    if (hlen > ST_HEADER_CAP) {
        st = fp4_fail(err, FP4_ERR_FORMAT, "%s: header length %llu is absurd (more than %llu bytes)", path,
                      hlen, ST_HEADER_CAP);
        goto out;
    }
    if (hlen > (unsigned long long)(fsize - 8)) {
        st = fp4_fail(err, FP4_ERR_FORMAT, "%s: truncated: header says %llu bytes of JSON, file has %lld",
                      path, hlen, fsize - 8);
        goto out;
    }
    data_len = (unsigned long long)(fsize - 8) - hlen;
    st = scan_header(src, hlen, err);
    if (st) goto out;
    st = fp4_io_src_seek(src, 8, err);
    if (st) goto out;
    hdr = malloc((size_t)hlen + 1);
    if (!hdr) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "%s: out of memory for a %llu-byte header", path, hlen);
        goto out;
    }
    st = fp4_io_src_read(src, hdr, (size_t)hlen, err);
    if (st) goto out;
    hdr[hlen] = '\0';

    root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
    if (!root) {
        size_t at = end && end >= hdr && end <= hdr + hlen ? (size_t)(end - hdr) : 0;
        st = fp4_fail(err, FP4_ERR_FORMAT, "%s: header is not valid JSON (error near byte %zu)", path, at);
        goto out;
    }
    for (const char *c = end; c && c < hdr + hlen; c++) {
        if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r') {
            st = fp4_fail(err, FP4_ERR_FORMAT, "%s: unexpected bytes after the JSON header (at byte %zu)",
                          path, (size_t)(c - hdr));
            goto out;
        }
    }
    if (!cJSON_IsObject(root)) {
        st = fp4_fail(err, FP4_ERR_FORMAT, "%s: header is not a JSON object", path);
        goto out;
    }

    cJSON_ArrayForEach(j, root) {
        if (strcmp(j->string, "__metadata__") == 0) {
            st = check_metadata(j, path, err);
            if (st) goto out;
        } else {
            n++;
        }
    }
    ts = calloc((size_t)(n ? n : 1), sizeof *ts);
    es = calloc((size_t)(n ? n : 1), sizeof *es);
    if (!ts || !es) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "%s: out of memory for %d tensors", path, n);
        goto out;
    }
    i = 0;
    cJSON_ArrayForEach(j, root) {
        if (strcmp(j->string, "__metadata__") == 0) continue;
        es[i].t = &ts[i];
        st = parse_entry(j, &es[i], path, err);
        if (st) goto out;
        if (es[i].end > data_len) {
            st = fp4_fail(err, FP4_ERR_FORMAT,
                          "%s: tensor '%s' has data_offsets [%llu, %llu] beyond the %llu bytes of data (truncated?)",
                          path, ts[i].name, es[i].begin, es[i].end, data_len);
            goto out;
        }
        i++;
    }

    /* names unique */
    qsort(es, (size_t)n, sizeof *es, cmp_name);
    for (i = 1; i < n; i++) {
        if (strcmp(es[i - 1].t->name, es[i].t->name) == 0) {
            st = fp4_fail(err, FP4_ERR_FORMAT, "%s: tensor '%s' appears twice", path, es[i].t->name);
            goto out;
        }
    }
    /* data ranges tile the data section exactly */
    qsort(es, (size_t)n, sizeof *es, cmp_range);
    pos = 0;
    for (i = 0; i < n; i++) {
        if (es[i].begin < pos) {
            st = fp4_fail(err, FP4_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", path,
                          es[i - 1].t->name, es[i].t->name);
            goto out;
        }
        if (es[i].begin > pos) {
            st = fp4_fail(err, FP4_ERR_FORMAT, "%s: %llu unused bytes of data before tensor '%s'", path,
                          es[i].begin - pos, es[i].t->name);
            goto out;
        }
        pos = es[i].end;
    }
    if (pos != data_len) {
        st = fp4_fail(err, FP4_ERR_FORMAT, "%s: the data section has %llu bytes, the tensors cover %llu",
                      path, data_len, pos);
        goto out;
    }

    /* data, in file order, so the reads are sequential; after a tensor that
     * is not wanted, a seek to the next that is */
    for (i = 0; i < n; i++) {
        fp4_tensor *t = es[i].t;
        if (!is_wanted(w, t->name)) {
            skipped = 1;
            continue;
        }
        if (skipped) {
            st = fp4_io_src_seek(src, (long long)(8 + hlen + es[i].begin), err);
            if (st) goto out;
            skipped = 0;
        }
        t->data = malloc(t->nbytes ? t->nbytes : 1);
        if (!t->data) {
            st = fp4_fail(err, FP4_ERR_NOMEM, "%s: out of memory for tensor '%s' (%zu bytes)", path,
                          t->name, t->nbytes);
            goto out;
        }
        st = fp4_io_src_read(src, t->data, t->nbytes, err);
        if (st) goto out;
    }
    *out = ts;
    *count = n;
    ts = NULL;
out:
    if (ts) {
        for (i = 0; i < n; i++) fp4_tensor_free(&ts[i]);
        free(ts);
    }
    free(es);
    cJSON_Delete(root);
    free(hdr);
    return st;
}

/* Read the tensors of a file, the data of those w wants. */
static fp4_status st_read_path(const char *path, const st_want *w, fp4_tensor **out, int *count,
                               fp4_err *err)
{
    fp4_io_src src;
    fp4_status st;
    *out = NULL;
    *count = 0;
    memset(&src, 0, sizeof src);
    src.name = path;
    st = fp4_io_open_sized(path, &src.f, &src.size, err);
    if (st) return st;
    st = st_read_src(&src, w, out, count, err);
    fclose(src.f);
    return st;
}

/* Read every tensor of a file (see io.h). */
fp4_status fp4_safetensors_read(const char *path, fp4_tensor **out, int *count, fp4_err *err)
{
    const st_want all = {1, NULL, 0};
    if (!path || !out || !count)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_safetensors_read: NULL argument");
    return st_read_path(path, &all, out, count, err);
}

/* Read every tensor's header, and the data of those wanted (see io.h). */
fp4_status fp4_safetensors_read_some(const char *path, const char *const *want, int nwant,
                                     fp4_tensor **out, int *count, fp4_err *err)
{
    const st_want some = {0, want, nwant};
    if (!path || !out || !count || nwant < 0 || (nwant > 0 && !want))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_safetensors_read_some: bad argument");
    return st_read_path(path, &some, out, count, err);
}

/* Read every tensor of a file held in memory (see io.h). */
fp4_status fp4_safetensors_parse(const void *buf, size_t len, const char *name, fp4_tensor **out,
                                 int *count, fp4_err *err)
{
    fp4_io_src src;
    const st_want all = {1, NULL, 0};
    if (!out || !count || (!buf && len) || len > (size_t)INT64_MAX)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_safetensors_parse: bad argument");
    *out = NULL;
    *count = 0;
    memset(&src, 0, sizeof src);
    src.mem = buf;
    src.size = (long long)len;
    src.name = name ? name : "(memory)";
    return st_read_src(&src, &all, out, count, err);
}

/* ---- writing ------------------------------------------------------------------ */

/* A JSON integer added to array a, printed exactly (cJSON prints doubles). */
static int add_uint(cJSON *a, unsigned long long v)
{
    char buf[32];
    cJSON *x;
    snprintf(buf, sizeof buf, "%llu", v);
    x = cJSON_CreateRaw(buf);
    if (!x) return -1;
    if (!cJSON_AddItemToArray(a, x)) {
        cJSON_Delete(x);
        return -1;
    }
    return 0;
}

/* Check tensor t before writing it; FP4_ERR_INVALID_ARG or FP4_ERR_DTYPE. */
static fp4_status check_tensor(const fp4_tensor *t, const char *path, fp4_err *err)
{
    size_t need;
    int64_t numel;
    const char *why = fp4_tensor_name_problem(t->name);
    /* the reader's rule, so that every file written here reads back */
    if (why) return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: a tensor name %s", path, why);
    if (fp4_dtype_size(t->dtype) == 0)
        return fp4_fail(err, FP4_ERR_DTYPE, "%s: tensor '%s' has an invalid dtype %d", path, t->name,
                        (int)t->dtype);
    numel = fp4_tensor_numel(t);
    if (numel < 0)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: tensor '%s' has a bad shape", path, t->name);
    if (fp4_size_mul((size_t)numel, fp4_dtype_size(t->dtype), &need) || need != t->nbytes)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: tensor '%s' holds %zu bytes, which does not match its shape",
                        path, t->name, t->nbytes);
    if (t->nbytes && !t->data)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: tensor '%s' has NULL data", path, t->name);
    return FP4_OK;
}

/* Write tensors in the given order, contiguous, with an optional
 * __metadata__ of n_meta key/value pairs (meta[2i], meta[2i+1]), through
 * fp4_io_out: on failure an existing file at path is left as it was. */
static fp4_status st_write(const char *path, const fp4_tensor *ts, int count, const char *const *meta,
                           int n_meta, fp4_err *err)
{
    fp4_status st = FP4_OK;
    cJSON *root = NULL, *m, *e, *a;
    char *json = NULL;
    fp4_io_out out;
    unsigned long long off = 0, hlen;
    unsigned char lenbuf[8];
    size_t jlen, pad;
    int i;
    static const char spaces[ST_ALIGN] = "        ";

    if (!path || (count > 0 && !ts) || count < 0)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_safetensors_write: bad argument");
    for (i = 0; i < count; i++) {
        st = check_tensor(&ts[i], path, err);
        if (st) return st;
        for (int k = 0; k < i; k++)
            if (strcmp(ts[k].name, ts[i].name) == 0)
                return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: tensor name '%s' given twice", path,
                                ts[i].name);
    }

    root = cJSON_CreateObject();
    if (!root) goto nomem;
    if (n_meta > 0) {
        m = cJSON_AddObjectToObject(root, "__metadata__");
        if (!m) goto nomem;
        for (i = 0; i < n_meta; i++)
            if (!cJSON_AddStringToObject(m, meta[2 * i], meta[2 * i + 1])) goto nomem;
    }
    for (i = 0; i < count; i++) {
        const fp4_tensor *t = &ts[i];
        e = cJSON_AddObjectToObject(root, t->name);
        if (!e || !cJSON_AddStringToObject(e, "dtype", fp4_dtype_name(t->dtype))) goto nomem;
        a = cJSON_AddArrayToObject(e, "shape");
        if (!a) goto nomem;
        for (int d = 0; d < t->ndim; d++)
            if (add_uint(a, (unsigned long long)t->shape[d])) goto nomem;
        a = cJSON_AddArrayToObject(e, "data_offsets");
        if (!a || add_uint(a, off) || add_uint(a, off + t->nbytes)) goto nomem;
        off += t->nbytes;
        if (off > (unsigned long long)ST_MAX_INT) {
            st = fp4_fail(err, FP4_ERR_OVERFLOW, "%s: more than 2^53 bytes of tensors", path);
            goto out;
        }
    }
    json = cJSON_PrintUnformatted(root);
    if (!json) goto nomem;
    jlen = strlen(json);
    pad = (ST_ALIGN - jlen % ST_ALIGN) % ST_ALIGN;
    hlen = (unsigned long long)(jlen + pad);
    if (hlen > ST_HEADER_CAP) {
        st = fp4_fail(err, FP4_ERR_OVERFLOW, "%s: header of %llu bytes is over the %llu-byte limit", path,
                      hlen, ST_HEADER_CAP);
        goto out;
    }
    for (i = 0; i < 8; i++) lenbuf[i] = (unsigned char)(hlen >> (8 * i));

    st = fp4_io_out_open(&out, path, err);
    if (st) goto out;
    if (fwrite(lenbuf, 1, 8, out.f) != 8 || fwrite(json, 1, jlen, out.f) != jlen ||
        fwrite(spaces, 1, pad, out.f) != pad)
        st = fp4_fail(err, FP4_ERR_IO, "%s: write error: %s", path, strerror(errno));
    for (i = 0; i < count && !st; i++)
        if (ts[i].nbytes && fwrite(ts[i].data, 1, ts[i].nbytes, out.f) != ts[i].nbytes)
            st = fp4_fail(err, FP4_ERR_IO, "%s: write error: %s", path, strerror(errno));
    st = fp4_io_out_finish(&out, st, err);
    goto out;
nomem:
    st = fp4_fail(err, FP4_ERR_NOMEM, "%s: out of memory building the header", path);
out:
    free(json);
    cJSON_Delete(root);
    return st;
}

/* Write tensors in the given order (see io.h). */
fp4_status fp4_safetensors_write(const char *path, const fp4_tensor *tensors, int count, fp4_err *err)
{
    return st_write(path, tensors, count, NULL, 0, err);
}

/* ---- NVFP4 checkpoints ------------------------------------------------------------ */

/* Save m as weight / weight_scale / weight_scale_2 [/ input_scale]. */
fp4_status fp4_nvfp4_save(const char *path, const fp4_matrix *m, float input_scale, fp4_err *err)
{
    static const char *const meta[] = {"format", "nvfp4", "producer", "fp4bench"};
    fp4_tensor ts[4];
    float gs, is = input_scale;
    int n = 3;
    fp4_status st;

    if (!path || !m) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_nvfp4_save: NULL argument");
    st = fp4_check_dims(m->rows, m->cols, err);
    if (st) return st;
    if (!m->codes || !m->scales)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: NVFP4 matrix without codes or scales", path);
    gs = m->global_scale;
    /* nothing fp4_nvfp4_load would refuse: finite positive global scales (a -0 or
     * negative input_scale means none), UE4M3 block scales */
    if (!isfinite(gs) || !(gs > 0.0f))
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: global scale %g, expected a finite positive number",
                        path, (double)gs);
    if (!signbit(is) && (!isfinite(is) || !(is > 0.0f)))
        return fp4_fail(err, FP4_ERR_INVALID_ARG,
                        "%s: input scale %g, expected a finite positive number (negative: none saved)", path,
                        (double)is);
    for (size_t i = 0; i < (size_t)m->rows * (size_t)(m->cols / FP4_BLOCK); i++)
        if ((m->scales[i] & 0x7F) == 0x7F || m->scales[i] > 0x80)
            return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: scale byte 0x%02X at %zu is %s", path, m->scales[i], i,
                            (m->scales[i] & 0x7F) == 0x7F ? "NaN" : "negative (block scales are UE4M3)");
    memset(ts, 0, sizeof ts);

    snprintf(ts[0].name, sizeof ts[0].name, "weight");
    ts[0].dtype = FP4_DT_U8;
    ts[0].ndim = 2;
    ts[0].shape[0] = m->rows;
    ts[0].shape[1] = m->cols / 2;
    ts[0].data = m->codes;
    ts[0].nbytes = (size_t)m->rows * (size_t)(m->cols / 2); /* fp4_check_dims: fits */

    snprintf(ts[1].name, sizeof ts[1].name, "weight_scale");
    ts[1].dtype = FP4_DT_F8_E4M3;
    ts[1].ndim = 2;
    ts[1].shape[0] = m->rows;
    ts[1].shape[1] = m->cols / FP4_BLOCK;
    ts[1].data = m->scales;
    ts[1].nbytes = (size_t)m->rows * (size_t)(m->cols / FP4_BLOCK);

    snprintf(ts[2].name, sizeof ts[2].name, "weight_scale_2");
    ts[2].dtype = FP4_DT_F32;
    ts[2].ndim = 0;
    ts[2].data = &gs;
    ts[2].nbytes = sizeof gs;

    if (!signbit(is)) {
        snprintf(ts[3].name, sizeof ts[3].name, "input_scale");
        ts[3].dtype = FP4_DT_F32;
        ts[3].ndim = 0;
        ts[3].data = &is;
        ts[3].nbytes = sizeof is;
        n = 4;
    }
    return st_write(path, ts, n, meta, 2, err);
}

/* The F32 scalar (shape [] or [1]) t into *v; FP4_ERR_DTYPE when it has
 * another dtype or shape. */
static fp4_status get_scalar(const fp4_tensor *t, const char *path, float *v, fp4_err *err)
{
    if (t->dtype != FP4_DT_F32)
        return fp4_fail(err, FP4_ERR_DTYPE, "%s: tensor '%s' has dtype %s, expected F32", path, t->name,
                        fp4_dtype_name(t->dtype));
    if (!(t->ndim == 0 || (t->ndim == 1 && t->shape[0] == 1)))
        return fp4_fail(err, FP4_ERR_DTYPE, "%s: tensor '%s' has %d dimensions (%lld elements), expected "
                        "a scalar ([] or [1])", path, t->name, t->ndim, (long long)fp4_tensor_numel(t));
    memcpy(v, t->data, sizeof *v);
    return FP4_OK;
}

/* A global scale (weight_scale_2, input_scale) t into *v: an F32 scalar that
 * is finite and positive, since it multiplies every value of its tensor. */
static fp4_status get_global_scale(const fp4_tensor *t, const char *path, float *v, fp4_err *err)
{
    fp4_status st = get_scalar(t, path, v, err);
    if (st) return st;
    if (!isfinite(*v) || !(*v > 0.0f))
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: tensor '%s' is %g, expected a finite positive number",
                        path, t->name, (double)*v);
    return FP4_OK;
}

/* Every byte of the block scales s [rows, K/16] must be a UE4M3 scale: not
 * NaN (0x7F, 0xFF) and not negative. 0x80 is -0: zero under every reading
 * (E4M3 or UE4M3), like 0x00, and the references take it so; it is kept. */
static fp4_status check_scales(const fp4_tensor *s, const char *path, fp4_err *err)
{
    const uint8_t *b = s->data;
    const size_t per_row = (size_t)s->shape[1]; /* >= 1: checked by the caller */
    for (size_t i = 0; i < s->nbytes; i++) {
        if ((b[i] & 0x7F) != 0x7F && b[i] <= 0x80) continue;
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: tensor '%s' has scale byte 0x%02X at [%zu, %zu]: %s", path,
                        s->name, b[i], i / per_row, i % per_row,
                        (b[i] & 0x7F) == 0x7F ? "NaN" : "negative (block scales are UE4M3, unsigned)");
    }
    return FP4_OK;
}

/* ---- NVFP4 layers ------------------------------------------------------------------ */

/* The tensors of one layer, in the order of layer_suffix. */
enum { PART_WEIGHT, PART_SCALE, PART_SCALE_2, PART_INPUT_SCALE, LAYER_PARTS };
static const char *const layer_suffix[LAYER_PARTS] = {"weight", "weight_scale", "weight_scale_2",
                                                      "input_scale"};
#define SCALE_SUFFIX_LEN 12 /* strlen("weight_scale") */

/* The full names of layer prefix's tensors (prefix NULL or "": the bare
 * suffixes). FP4_ERR_INVALID_ARG when they would break the name rule; the
 * prefix is echoed only when it prints. */
static fp4_status layer_names(const char *prefix, char names[LAYER_PARTS][FP4_TENSOR_NAME_LEN],
                              fp4_err *err)
{
    char longest[2 * FP4_TENSOR_NAME_LEN];
    const char *why;
    if (!prefix || !prefix[0]) {
        for (int i = 0; i < LAYER_PARTS; i++) snprintf(names[i], FP4_TENSOR_NAME_LEN, "%s", layer_suffix[i]);
        return FP4_OK;
    }
    if (strnlen(prefix, FP4_TENSOR_NAME_LEN) >= FP4_TENSOR_NAME_LEN)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "layer name longer than %d bytes", FP4_TENSOR_NAME_LEN - 1);
    snprintf(longest, sizeof longest, "%s.%s", prefix, layer_suffix[PART_SCALE_2]);
    why = fp4_tensor_name_problem(longest);
    if (why && fp4_tensor_name_problem(prefix) == NULL)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "layer '%s': its tensor name '%s' %s", prefix, longest,
                        why);
    if (why) return fp4_fail(err, FP4_ERR_INVALID_ARG, "a layer name %s", fp4_tensor_name_problem(prefix));
    for (int i = 0; i < LAYER_PARTS; i++)
        snprintf(names[i], FP4_TENSOR_NAME_LEN, "%s.%s", prefix, layer_suffix[i]);
    return FP4_OK;
}

/* Append s[0..len), quoted, to the list in buf (cap bytes), after ", ". */
static void list_add(char *buf, size_t cap, const char *s, size_t len)
{
    size_t used = strlen(buf);
    if (used + 1 < cap) snprintf(buf + used, cap - used, "%s'%.*s'", used ? ", " : "", (int)len, s);
}

/* Length of the common beginning of a and b. */
static size_t common_length(const char *a, const char *b)
{
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    return i;
}

/* The length of the layer prefix of t (a tensor "<prefix>.weight_scale" of
 * dtype F8_E4M3), or -1 when t is no layer's block scales or has no prefix. */
static long layer_stem(const fp4_tensor *t)
{
    size_t len = strlen(t->name);
    if (t->dtype != FP4_DT_F8_E4M3 || len < SCALE_SUFFIX_LEN + 2) return -1;
    if (strcmp(t->name + len - SCALE_SUFFIX_LEN, "weight_scale") != 0) return -1;
    if (t->name[len - SCALE_SUFFIX_LEN - 1] != '.') return -1;
    return (long)(len - SCALE_SUFFIX_LEN - 1);
}

#define MISSING_SHOWN 3 /* names listed in a missing-tensor message */

/* Keep layer i (its score: the length of its name's common beginning with
 * the prefix) among the best MISSING_SHOWN in near[], by descending score,
 * ties in file order; shown counts the layers kept so far. */
static void keep_nearest(int i, size_t score, int near[MISSING_SHOWN], size_t near_score[MISSING_SHOWN],
                         int *shown)
{
    int at = *shown;
    while (at > 0 && near_score[at - 1] < score) at--;
    if (at == MISSING_SHOWN) return;
    for (int j = (*shown < MISSING_SHOWN ? *shown : MISSING_SHOWN - 1); j > at; j--) {
        near[j] = near[j - 1];
        near_score[j] = near_score[j - 1];
    }
    near[at] = i;
    near_score[at] = score;
    if (*shown < MISSING_SHOWN) (*shown)++;
}

/* Say that tensor names[missing] of layer prefix is not among path's tensors
 * ts[0..n), with what is there instead: the layer's other tensors; else the
 * layers whose names begin "<prefix>."; else the file's NVFP4 layers nearest
 * to prefix (the longest common beginning, ties in file order). */
static fp4_status missing_tensor(const char *path, const char *prefix,
                                 const char names[LAYER_PARTS][FP4_TENSOR_NAME_LEN], int missing,
                                 const fp4_tensor *ts, int n, fp4_err *err)
{
    char list[FP4_ERR_MSG_LEN / 2] = "";
    const int bare = !prefix || !prefix[0];
    const size_t plen = bare ? 0 : strlen(prefix);
    int parts = 0, below = 0, layers = 0, shown = 0, near[MISSING_SHOWN];
    size_t near_score[MISSING_SHOWN];

    for (int i = 0; i < LAYER_PARTS; i++)
        if (fp4_tensor_find(ts, n, names[i])) {
            list_add(list, sizeof list, layer_suffix[i], strlen(layer_suffix[i]));
            parts++;
        }
    if (parts)
        return fp4_fail(err, FP4_ERR_NOT_FOUND, "%s: no tensor '%s' (an NVFP4 layer has weight, weight_scale, "
                        "weight_scale_2; %s%s%s has only %s)", path, names[missing], bare ? "this file" : "'",
                        bare ? "" : prefix, bare ? "" : "'", list);

    for (int i = 0; i < n; i++) {
        long stem = layer_stem(&ts[i]);
        if (stem < 0) continue;
        layers++;
        if (!bare && (size_t)stem > plen + 1 && strncmp(ts[i].name, prefix, plen) == 0 &&
            ts[i].name[plen] == '.') {
            if (below++ < MISSING_SHOWN)
                list_add(list, sizeof list, ts[i].name + plen + 1, (size_t)stem - plen - 1);
            continue;
        }
        if (!below) {
            size_t score = bare ? 0 : common_length(ts[i].name, prefix);
            keep_nearest(i, score < (size_t)stem ? score : (size_t)stem, near, near_score, &shown);
        }
    }
    if (below)
        return fp4_fail(err, FP4_ERR_NOT_FOUND, "%s: no tensor '%s': '%s' is no layer; the layers under it: %s%s",
                        path, names[missing], prefix, list, below > MISSING_SHOWN ? ", ..." : "");
    if (layers == 0 && !bare && fp4_tensor_find(ts, n, layer_suffix[PART_SCALE]))
        return fp4_fail(err, FP4_ERR_NOT_FOUND, "%s: no tensor '%s': the file holds one layer, under the bare "
                        "names (weight, weight_scale, ...), read without a layer name", path, names[missing]);
    if (layers == 0)
        return fp4_fail(err, FP4_ERR_NOT_FOUND,
                        "%s: no tensor '%s' (an NVFP4 layer has weight, weight_scale, weight_scale_2), and no "
                        "layer with a name prefix either (an F8_E4M3 '<prefix>.weight_scale')", path,
                        names[missing]);
    for (int j = 0; j < shown; j++)
        list_add(list, sizeof list, ts[near[j]].name, (size_t)layer_stem(&ts[near[j]]));
    return fp4_fail(err, FP4_ERR_NOT_FOUND, "%s: no tensor '%s'; the file has %d NVFP4 layer%s, %s %s%s", path,
                    names[missing], layers, layers == 1 ? "" : "s", bare ? "such as" : "the nearest:", list,
                    layers > MISSING_SHOWN ? ", ..." : "");
}

/* Load one layer of a checkpoint (see io.h). */
fp4_status fp4_nvfp4_load_layer(const char *path, const char *prefix, fp4_matrix *m, float *input_scale,
                                fp4_err *err)
{
    char names[LAYER_PARTS][FP4_TENSOR_NAME_LEN];
    const char *want[LAYER_PARTS];
    const fp4_tensor *part[LAYER_PARTS];
    const fp4_tensor *w, *s;
    fp4_status st;
    fp4_tensor *ts = NULL;
    int n = 0;
    float gs, is = -1.0f;
    int64_t rows, k;
    fp4_matrix tmp;

    if (!path || !m) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_nvfp4_load_layer: NULL argument");
    memset(m, 0, sizeof *m);
    if (input_scale) *input_scale = -1.0f;
    if ((st = layer_names(prefix, names, err)) != FP4_OK) return st;
    for (int i = 0; i < LAYER_PARTS; i++) want[i] = names[i];
    st = fp4_safetensors_read_some(path, want, LAYER_PARTS, &ts, &n, err);
    if (st) return st;

    for (int i = 0; i < LAYER_PARTS; i++) {
        part[i] = fp4_tensor_find(ts, n, names[i]);
        if (!part[i] && i != PART_INPUT_SCALE) {
            st = missing_tensor(path, prefix, names, i, ts, n, err);
            goto out;
        }
    }
    w = part[PART_WEIGHT];
    s = part[PART_SCALE];

    if (w->dtype != FP4_DT_U8) {
        st = fp4_fail(err, FP4_ERR_DTYPE, "%s: tensor '%s' has dtype %s, expected U8", path, w->name,
                      fp4_dtype_name(w->dtype));
        goto out;
    }
    if (s->dtype != FP4_DT_F8_E4M3) {
        st = fp4_fail(err, FP4_ERR_DTYPE, "%s: tensor '%s' has dtype %s, expected F8_E4M3", path, s->name,
                      fp4_dtype_name(s->dtype));
        goto out;
    }
    if (w->ndim != 2 || s->ndim != 2) {
        st = fp4_fail(err, FP4_ERR_DTYPE, "%s: tensor '%s' has %d dimensions, expected 2", path,
                      w->ndim != 2 ? w->name : s->name, w->ndim != 2 ? w->ndim : s->ndim);
        goto out;
    }
    rows = w->shape[0];
    if (s->shape[0] != rows) {
        st = fp4_fail(err, FP4_ERR_DTYPE, "%s: tensor '%s' has %lld rows, '%s' has %lld", path, s->name,
                      (long long)s->shape[0], w->name, (long long)rows);
        goto out;
    }
    /* shapes come from the file (<= 2^53), so these products do not overflow */
    if (w->shape[1] * 2 != s->shape[1] * FP4_BLOCK) {
        st = fp4_fail(err, FP4_ERR_DTYPE,
                      "%s: '%s' [%lld, %lld] (K = %lld) and '%s' [%lld, %lld] (K = %lld) disagree", path,
                      w->name, (long long)w->shape[0], (long long)w->shape[1], (long long)w->shape[1] * 2,
                      s->name, (long long)s->shape[0], (long long)s->shape[1],
                      (long long)s->shape[1] * FP4_BLOCK);
        goto out;
    }
    k = w->shape[1] * 2;
    if (rows < 1 || k < FP4_BLOCK || k % FP4_BLOCK != 0) {
        st = fp4_fail(err, FP4_ERR_DTYPE, "%s: '%s' [%lld, %lld] is no NVFP4 matrix (N >= 1, K >= 16, "
                      "K %% 16 == 0 needed)", path, w->name, (long long)w->shape[0], (long long)w->shape[1]);
        goto out;
    }
    if ((st = check_scales(s, path, err)) != FP4_OK) goto out;
    if ((st = get_global_scale(part[PART_SCALE_2], path, &gs, err)) != FP4_OK) goto out;
    if (part[PART_INPUT_SCALE] && (st = get_global_scale(part[PART_INPUT_SCALE], path, &is, err)) != FP4_OK)
        goto out;
    st = fp4_matrix_alloc(&tmp, rows, k, err);
    if (st) goto out;
    memcpy(tmp.codes, w->data, w->nbytes);
    memcpy(tmp.scales, s->data, s->nbytes);
    tmp.global_scale = gs;
    *m = tmp;
    if (input_scale) *input_scale = is;
out:
    for (int i = 0; i < n; i++) fp4_tensor_free(&ts[i]);
    free(ts);
    return st;
}

/* Load a checkpoint of one layer under the bare names (see io.h). */
fp4_status fp4_nvfp4_load(const char *path, fp4_matrix *m, fp4_err *err)
{
    return fp4_nvfp4_load_layer(path, NULL, m, NULL, err);
}
