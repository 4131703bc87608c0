/* .npy files (NumPy format versions 1.0, 2.0 and 3.0) and the dtype helpers.
 *
 * A .npy file is: the magic "\x93NUMPY", a major and a minor version byte, the
 * header length (u16 LE in 1.0, u32 LE in 2.0 and 3.0), a Python dict literal
 * such as {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded
 * with spaces and ended by '\n', then the raw C-order array data.
 *
 * Reading trusts nothing: every header field is checked, sizes are
 * overflow-checked, and the data size must match the file exactly, so a
 * truncated or corrupted file gives FP4_ERR_FORMAT, never a crash. */
#include "fp4/io.h"
#include "io/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "fp4bench reads and writes little-endian files by memcpy: a little-endian host is needed"
#endif

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_HEADER_CAP (1u << 20) /* real headers are < 200 bytes; refuse huge ones */
#define NPY_MAX_PARSED_DIMS 64    /* dims counted while parsing; > FP4_MAX_DIMS is refused */
#define NPY_ALIGN 64

/* ---- dtype and tensor helpers -------------------------------------------- */

/* Bytes per element of t; 0 for an invalid dtype. */
size_t fp4_dtype_size(fp4_dtype t)
{
    switch (t) {
    case FP4_DT_F32: return 4;
    case FP4_DT_F16: return 2;
    case FP4_DT_BF16: return 2;
    case FP4_DT_U8: return 1;
    case FP4_DT_F8_E4M3: return 1;
    case FP4_DT_COUNT: break;
    }
    return 0;
}

/* The safetensors spelling of t ("F32", ...); "?" for an invalid dtype. */
const char *fp4_dtype_name(fp4_dtype t)
{
    switch (t) {
    case FP4_DT_F32: return "F32";
    case FP4_DT_F16: return "F16";
    case FP4_DT_BF16: return "BF16";
    case FP4_DT_U8: return "U8";
    case FP4_DT_F8_E4M3: return "F8_E4M3";
    case FP4_DT_COUNT: break;
    }
    return "?";
}

/* Number of elements of t (1 for a scalar); -1 when ndim or a dimension is
 * out of range or the product overflows int64. A zero dimension makes it 0
 * whatever the others multiply to, as the file parsers count it. */
int64_t fp4_tensor_numel(const fp4_tensor *t)
{
    int64_t n = 1;
    if (!t || t->ndim < 0 || t->ndim > FP4_MAX_DIMS) return -1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0) return -1;
        if (t->shape[i] == 0) n = 0;
    }
    if (n == 0) return 0;
    for (int i = 0; i < t->ndim; i++) {
        const int64_t d = t->shape[i];
        if (n > INT64_MAX / d) return -1;
        n *= d;
    }
    return n;
}

/* Free t's data and reset it to an empty tensor; NULL is allowed. */
void fp4_tensor_free(fp4_tensor *t)
{
    if (!t) return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

/* The first tensor named name among tensors[0..count), or NULL. */
const fp4_tensor *fp4_tensor_find(const fp4_tensor *tensors, int count, const char *name)
{
    if (!tensors || !name) return NULL;
    for (int i = 0; i < count; i++)
        if (strncmp(tensors[i].name, name, FP4_TENSOR_NAME_LEN) == 0) return &tensors[i];
    return NULL;
}

/* ---- the header dict --------------------------------------------------------- */

typedef struct npy_header {
    char descr[32];
    int fortran;
    int ndim; /* may exceed FP4_MAX_DIMS; only the first FP4_MAX_DIMS are stored */
    int64_t shape[FP4_MAX_DIMS];
    int have_descr, have_fortran, have_shape;
} npy_header;

/* A cursor over the header text s[0..n) (NUL-terminated at n). On a syntax
 * error `why` is set to a static description and pos marks the place. */
typedef struct npy_parser {
    const char *s;
    size_t n, pos;
    const char *why;
} npy_parser;

/* Skip spaces, tabs and newlines. */
static void p_ws(npy_parser *p)
{
    while (p->pos < p->n &&
           (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
            p->s[p->pos] == '\r'))
        p->pos++;
}

/* Consume character c after optional whitespace; 0 on success, -1 if absent. */
static int p_expect(npy_parser *p, char c, const char *why)
{
    p_ws(p);
    if (p->pos < p->n && p->s[p->pos] == c) {
        p->pos++;
        return 0;
    }
    p->why = why;
    return -1;
}

/* A Python string literal in ' or " quotes, without escapes, copied to out
 * (cap bytes including the NUL). 0 on success, -1 on error. */
static int p_string(npy_parser *p, char *out, size_t cap)
{
    char q;
    size_t len = 0;
    p_ws(p);
    if (p->pos >= p->n || (p->s[p->pos] != '\'' && p->s[p->pos] != '"')) {
        p->why = "expected a quoted string";
        return -1;
    }
    q = p->s[p->pos++];
    while (p->pos < p->n && p->s[p->pos] != q) {
        char c = p->s[p->pos];
        if (c == '\\' || c == '\n' || c == '\0') {
            p->why = "unsupported character in a string";
            return -1;
        }
        if (len + 1 >= cap) {
            p->why = "string too long";
            return -1;
        }
        out[len++] = c;
        p->pos++;
    }
    if (p->pos >= p->n) {
        p->why = "unterminated string";
        return -1;
    }
    p->pos++; /* closing quote */
    out[len] = '\0';
    return 0;
}

/* True or False into *v. 0 on success, -1 on error. */
static int p_bool(npy_parser *p, int *v)
{
    p_ws(p);
    if (p->n - p->pos >= 4 && memcmp(p->s + p->pos, "True", 4) == 0) {
        p->pos += 4;
        *v = 1;
    } else if (p->n - p->pos >= 5 && memcmp(p->s + p->pos, "False", 5) == 0) {
        p->pos += 5;
        *v = 0;
    } else {
        p->why = "'fortran_order' must be True or False";
        return -1;
    }
    /* "Truex" is not True */
    if (p->pos < p->n && (p->s[p->pos] == '_' || (p->s[p->pos] >= 'a' && p->s[p->pos] <= 'z') ||
                          (p->s[p->pos] >= 'A' && p->s[p->pos] <= 'Z') ||
                          (p->s[p->pos] >= '0' && p->s[p->pos] <= '9'))) {
        p->why = "'fortran_order' must be True or False";
        return -1;
    }
    return 0;
}

/* A non-negative decimal integer (Python 2's trailing 'L' allowed) that fits
 * in int64. 0 on success, -1 on error. */
static int p_dim(npy_parser *p, int64_t *v)
{
    int64_t x = 0;
    size_t start;
    p_ws(p);
    start = p->pos;
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        int d = p->s[p->pos] - '0';
        if (x > (INT64_MAX - d) / 10) {
            p->why = "shape dimension too large";
            return -1;
        }
        x = x * 10 + d;
        p->pos++;
    }
    if (p->pos == start) {
        p->why = (p->pos < p->n && p->s[p->pos] == '-') ? "negative shape dimension"
                                                         : "expected a non-negative integer";
        return -1;
    }
    if (p->pos < p->n && p->s[p->pos] == 'L') p->pos++;
    *v = x;
    return 0;
}

/* A shape tuple: (), (5,), (3, 4), (3, 4,). 0 on success, -1 on error. */
static int p_shape(npy_parser *p, npy_header *h)
{
    h->ndim = 0;
    if (p_expect(p, '(', "'shape' must be a tuple")) return -1;
    p_ws(p);
    if (p->pos < p->n && p->s[p->pos] == ')') {
        p->pos++;
        return 0;
    }
    for (;;) {
        int64_t d;
        if (p_dim(p, &d)) return -1;
        if (h->ndim >= NPY_MAX_PARSED_DIMS) {
            p->why = "too many dimensions";
            return -1;
        }
        if (h->ndim < FP4_MAX_DIMS) h->shape[h->ndim] = d;
        h->ndim++;
        p_ws(p);
        if (p->pos < p->n && p->s[p->pos] == ')') {
            p->pos++;
            /* (5) is the integer 5, not a tuple */
            if (h->ndim == 1) {
                p->why = "a 1-element shape tuple needs a trailing comma";
                return -1;
            }
            return 0;
        }
        if (p_expect(p, ',', "expected ',' or ')' in the shape")) return -1;
        p_ws(p);
        if (p->pos < p->n && p->s[p->pos] == ')') {
            p->pos++;
            return 0;
        }
    }
}

/* Parse the whole dict; every key exactly once, nothing after the closing
 * brace but whitespace. 0 on success, -1 with p->why set. */
static int parse_header(npy_parser *p, npy_header *h)
{
    memset(h, 0, sizeof *h);
    if (p_expect(p, '{', "the header does not start with '{'")) return -1;
    for (;;) {
        char key[32];
        p_ws(p);
        if (p->pos < p->n && p->s[p->pos] == '}') {
            p->pos++;
            break;
        }
        if (p_string(p, key, sizeof key)) return -1;
        if (p_expect(p, ':', "expected ':' after a key")) return -1;
        if (strcmp(key, "descr") == 0) {
            if (h->have_descr) goto dup;
            p_ws(p);
            if (p->pos < p->n && p->s[p->pos] == '[') {
                p->why = "structured dtypes (a 'descr' list) are not supported";
                return -1;
            }
            if (p_string(p, h->descr, sizeof h->descr)) return -1;
            h->have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (h->have_fortran) goto dup;
            if (p_bool(p, &h->fortran)) return -1;
            h->have_fortran = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (h->have_shape) goto dup;
            if (p_shape(p, h)) return -1;
            h->have_shape = 1;
        } else {
            p->why = "unknown key (expected 'descr', 'fortran_order', 'shape')";
            return -1;
        }
        p_ws(p);
        if (p->pos < p->n && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p_expect(p, '}', "expected ',' or '}' after a value")) return -1;
        break;
    }
    p_ws(p);
    if (p->pos != p->n) {
        p->why = "unexpected text after the closing '}'";
        return -1;
    }
    if (!h->have_descr || !h->have_fortran || !h->have_shape) {
        p->why = !h->have_descr ? "no 'descr' key"
                 : !h->have_fortran ? "no 'fortran_order' key"
                                    : "no 'shape' key";
        return -1;
    }
    return 0;
dup:
    p->why = "a key appears twice";
    return -1;
}

/* Map a descr string to a dtype; -1 when unknown. */
static int descr_dtype(const char *d, fp4_dtype *t)
{
    if (strcmp(d, "<f4") == 0) *t = FP4_DT_F32;
    else if (strcmp(d, "<f2") == 0) *t = FP4_DT_F16;
    else if (strcmp(d, "|u1") == 0 || strcmp(d, "<u1") == 0) *t = FP4_DT_U8;
    else if (strcmp(d, "<V2") == 0 || strcmp(d, "|V2") == 0 || strcmp(d, "bfloat16") == 0)
        *t = FP4_DT_BF16;
    else return -1;
    return 0;
}

/* ---- reading ------------------------------------------------------------------ */

/* A safetensors file starts with its header length (u64 LE) and the header,
 * a JSON object: say so instead of "bad magic" when pre looks like that. */
static int looks_like_safetensors(const unsigned char *pre, long long fsize)
{
    unsigned long long hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | pre[i];
    return pre[8] == '{' && hlen >= 2 && hlen <= (unsigned long long)(fsize - 8);
}

/* Read and parse src's preamble and header dict into *h; *data_bytes: what
 * follows the header. Little-endian data only. */
static fp4_status npy_read_header(fp4_io_src *src, npy_header *h, long long *data_bytes, fp4_err *err)
{
    fp4_status st = FP4_OK;
    const char *path = src->name;
    char *hdr = NULL;
    long long fsize = src->size;
    unsigned char pre[12];
    size_t pre_len, hlen;
    npy_parser p;

    if (fsize < 10)
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: truncated: %lld bytes, too short for a .npy file",
                        path, fsize);
    st = fp4_io_src_read(src, pre, 10, err);
    if (st) return st;
    if (memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        if (looks_like_safetensors(pre, fsize))
            return fp4_fail(err, FP4_ERR_FORMAT, "%s: this is a .safetensors file, not .npy", path);
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: not a .npy file (bad magic)", path);
    }
    if (pre[6] == 1 && pre[7] == 0) {
        pre_len = 10;
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if ((pre[6] == 2 || pre[6] == 3) && pre[7] == 0) {
        if (fsize < 12)
            return fp4_fail(err, FP4_ERR_FORMAT, "%s: truncated: %lld bytes, too short for a .npy %d.0 file",
                            path, fsize, pre[6]);
        st = fp4_io_src_read(src, pre + 10, 2, err);
        if (st) return st;
        pre_len = 12;
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 |
               (size_t)pre[11] << 24;
    } else {
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: unsupported .npy version %d.%d (1.0, 2.0, 3.0 are read)",
                        path, pre[6], pre[7]);
    }
    if (hlen > NPY_HEADER_CAP)
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: header length %zu is absurd (more than %u bytes)", path,
                        hlen, NPY_HEADER_CAP);
    if ((long long)hlen > fsize - (long long)pre_len)
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: truncated: the header is %zu bytes, the file has %lld after the preamble",
                        path, hlen, fsize - (long long)pre_len);
    hdr = malloc(hlen + 1);
    if (!hdr) return fp4_fail(err, FP4_ERR_NOMEM, "%s: out of memory for a %zu-byte header", path, hlen);
    st = fp4_io_src_read(src, hdr, hlen, err);
    if (st) goto out;
    hdr[hlen] = '\0';
    if (memchr(hdr, '\0', hlen)) {
        st = fp4_fail(err, FP4_ERR_FORMAT, "%s: bad header: it contains a NUL byte", path);
        goto out;
    }
    p.s = hdr;
    p.n = hlen;
    p.pos = 0;
    p.why = NULL;
    if (parse_header(&p, h)) {
        st = fp4_fail(err, FP4_ERR_FORMAT, "%s: bad header: %s (at byte %zu of the header)", path,
                      p.why, p.pos);
        goto out;
    }
    if (h->descr[0] == '>') {
        st = fp4_fail(err, FP4_ERR_DTYPE, "%s: big-endian data ('%s') is not supported", path, h->descr);
        goto out;
    }
    if (h->fortran) {
        st = fp4_fail(err, FP4_ERR_UNSUPPORTED,
                      "%s: fortran_order True is not supported (save a C-order array)", path);
        goto out;
    }
    if (h->ndim > FP4_MAX_DIMS) {
        st = fp4_fail(err, FP4_ERR_UNSUPPORTED, "%s: %d dimensions, at most %d are supported", path,
                      h->ndim, FP4_MAX_DIMS);
        goto out;
    }
    *data_bytes = fsize - (long long)pre_len - (long long)hlen;
out:
    free(hdr);
    return st;
}

/* The data of h's shape in elements of esize bytes: *nbytes, which must be
 * exactly the avail bytes after the header. */
static fp4_status npy_data_bytes(const char *path, const npy_header *h, size_t esize, long long avail,
                                 size_t *nbytes, fp4_err *err)
{
    size_t numel = 1;
    int empty = 0; /* a zero dimension makes it 0 whatever the others (fp4_tensor_numel) */
    for (int i = 0; i < h->ndim; i++) empty |= h->shape[i] == 0;
    for (int i = 0; i < h->ndim && !empty; i++)
        if (fp4_size_mul(numel, (size_t)h->shape[i], &numel))
            return fp4_fail(err, FP4_ERR_FORMAT, "%s: the shape's element count overflows", path);
    if (empty) numel = 0;
    if (fp4_size_mul(numel, esize, nbytes) || *nbytes > (size_t)INT64_MAX)
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: the shape's byte count overflows", path);
    if ((unsigned long long)avail < (unsigned long long)*nbytes)
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: truncated: header says %zu bytes of data, file has %lld",
                        path, *nbytes, avail);
    if ((unsigned long long)avail > (unsigned long long)*nbytes)
        return fp4_fail(err, FP4_ERR_FORMAT,
                        "%s: %lld unexpected bytes after the data (header says %zu bytes of data)",
                        path, avail - (long long)*nbytes, *nbytes);
    return FP4_OK;
}

/* Read a whole .npy from src into out. On failure out is an empty tensor. */
static fp4_status npy_read_src(fp4_io_src *src, fp4_tensor *out, fp4_err *err)
{
    const char *path = src->name;
    size_t nbytes;
    long long avail = 0;
    npy_header h;
    fp4_tensor t;
    fp4_status st;

    memset(&t, 0, sizeof t);
    if ((st = npy_read_header(src, &h, &avail, err)) != FP4_OK) return st;
    if (descr_dtype(h.descr, &t.dtype))
        return fp4_fail(err, FP4_ERR_DTYPE,
                        "%s: unsupported dtype '%s' (read: '<f4', '<f2', '|u1', bf16 as '<V2')",
                        path, h.descr);
    t.ndim = h.ndim;
    for (int i = 0; i < h.ndim; i++) t.shape[i] = h.shape[i];
    if ((st = npy_data_bytes(path, &h, fp4_dtype_size(t.dtype), avail, &nbytes, err)) != FP4_OK) return st;
    t.data = malloc(nbytes ? nbytes : 1);
    if (!t.data)
        return fp4_fail(err, FP4_ERR_NOMEM, "%s: out of memory for %zu bytes of data", path, nbytes);
    t.nbytes = nbytes;
    st = fp4_io_src_read(src, t.data, nbytes, err);
    if (st) {
        fp4_tensor_free(&t);
        return st;
    }
    *out = t;
    return FP4_OK;
}

fp4_status fp4_npy_read_ids(const char *path, int32_t **ids, int64_t *rows, int64_t *cols, fp4_err *err)
{
    fp4_io_src src;
    npy_header h;
    long long avail = 0;
    size_t esize, nbytes;
    unsigned char *raw = NULL;
    fp4_status st;
    if (ids) *ids = NULL;
    if (!path || !ids || !rows || !cols) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_npy_read_ids: NULL argument");
    memset(&src, 0, sizeof src);
    src.name = path;
    if ((st = fp4_io_open_sized(path, &src.f, &src.size, err)) != FP4_OK) return st;
    if ((st = npy_read_header(&src, &h, &avail, err)) != FP4_OK) goto out;
    if (strcmp(h.descr, "<i4") == 0 || strcmp(h.descr, "|i4") == 0) esize = 4;
    else if (strcmp(h.descr, "<i8") == 0 || strcmp(h.descr, "|i8") == 0) esize = 8;
    else {
        st = fp4_fail(err, FP4_ERR_DTYPE, "%s: ids must be int32 or int64 ('<i4', '<i8'), not '%s'", path, h.descr);
        goto out;
    }
    if (h.ndim != 2 || h.shape[0] < 1 || h.shape[1] < 1) {
        st = fp4_fail(err, FP4_ERR_FORMAT, "%s: ids must have a 2-D shape with no empty side", path);
        goto out;
    }
    if ((st = npy_data_bytes(path, &h, esize, avail, &nbytes, err)) != FP4_OK) goto out;
    const size_t count = nbytes / esize;
    if (!(raw = malloc(nbytes)) || !(*ids = malloc(count * sizeof **ids))) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "%s: out of memory for %zu ids", path, count);
        goto out;
    }
    if ((st = fp4_io_src_read(&src, raw, nbytes, err)) != FP4_OK) goto out;
    for (size_t i = 0; i < count; i++) {
        uint64_t u = 0;
        for (size_t b = 0; b < esize; b++) u |= (uint64_t)raw[i * esize + b] << (8 * b);
        const int64_t v = esize == 4 ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
        if (v < INT32_MIN || v > INT32_MAX) {
            st = fp4_fail(err, FP4_ERR_FORMAT, "%s: [%zu, %zu]: %lld does not fit int32", path,
                          i / (size_t)h.shape[1], i % (size_t)h.shape[1], (long long)v);
            goto out;
        }
        (*ids)[i] = (int32_t)v;
    }
    *rows = h.shape[0];
    *cols = h.shape[1];
out:
    if (st != FP4_OK) {
        free(*ids);
        *ids = NULL;
    }
    free(raw);
    fclose(src.f);
    return st;
}

/* Read a whole .npy file into out (see io.h). */
fp4_status fp4_npy_read(const char *path, fp4_tensor *out, fp4_err *err)
{
    fp4_io_src src;
    fp4_status st;
    if (out) memset(out, 0, sizeof *out);
    if (!out || !path) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_npy_read: NULL argument");
    memset(&src, 0, sizeof src);
    src.name = path;
    st = fp4_io_open_sized(path, &src.f, &src.size, err);
    if (st) return st;
    st = npy_read_src(&src, out, err);
    fclose(src.f);
    return st;
}

/* Parse a .npy held in memory (see io.h). */
fp4_status fp4_npy_parse(const void *buf, size_t len, const char *name, fp4_tensor *out,
                         fp4_err *err)
{
    fp4_io_src src;
    if (out) memset(out, 0, sizeof *out);
    if (!out || (!buf && len) || len > (size_t)INT64_MAX)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_npy_parse: bad argument");
    memset(&src, 0, sizeof src);
    src.mem = buf;
    src.size = (long long)len;
    src.name = name ? name : "(memory)";
    return npy_read_src(&src, out, err);
}

/* ---- writing ------------------------------------------------------------------ */

/* Write t as a version 1.0 .npy through fp4_io_out: on failure an existing
 * file at path is left as it was. */
fp4_status fp4_npy_write(const char *path, const fp4_tensor *t, fp4_err *err)
{
    fp4_status st = FP4_OK;
    fp4_io_out out;
    const char *descr;
    char dict[256], shape[128];
    size_t len, pad, dlen = 0;
    int64_t numel;
    size_t need;
    unsigned char pre[10];

    if (!path || !t) return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_npy_write: NULL argument");
    switch (t->dtype) {
    case FP4_DT_F32: descr = "<f4"; break;
    case FP4_DT_F16: descr = "<f2"; break;
    case FP4_DT_BF16: descr = "<V2"; break;
    case FP4_DT_U8: descr = "|u1"; break;
    default:
        return fp4_fail(err, FP4_ERR_DTYPE, "%s: cannot write dtype %s as .npy (F32, F16, BF16, U8)",
                        path, fp4_dtype_name(t->dtype));
    }
    numel = fp4_tensor_numel(t);
    if (numel < 0)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: tensor has a bad shape (ndim %d)", path, t->ndim);
    if (fp4_size_mul((size_t)numel, fp4_dtype_size(t->dtype), &need))
        return fp4_fail(err, FP4_ERR_OVERFLOW, "%s: tensor shape too large", path);
    if (need != t->nbytes)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: tensor holds %zu bytes, its shape needs %zu",
                        path, t->nbytes, need);
    if (t->nbytes && !t->data)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: tensor data is NULL", path);

    /* shape: () (5,) (3, 4) */
    shape[dlen++] = '(';
    for (int i = 0; i < t->ndim; i++)
        dlen += (size_t)snprintf(shape + dlen, sizeof shape - dlen, "%s%lld", i ? ", " : "",
                                 (long long)t->shape[i]);
    dlen += (size_t)snprintf(shape + dlen, sizeof shape - dlen, "%s)", t->ndim == 1 ? "," : "");
    len = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                           descr, shape);
    /* 10-byte preamble + dict + pad spaces + '\n' is a multiple of NPY_ALIGN */
    pad = (NPY_ALIGN - (10 + len + 1) % NPY_ALIGN) % NPY_ALIGN;
    if (len + pad + 1 >= sizeof dict) {
        return fp4_fail(err, FP4_ERR_INTERNAL, "%s: .npy header too long", path);
    }
    memset(dict + len, ' ', pad);
    dict[len + pad] = '\n';
    len += pad + 1;

    memcpy(pre, NPY_MAGIC, NPY_MAGIC_LEN);
    pre[6] = 1;
    pre[7] = 0;
    pre[8] = (unsigned char)(len & 0xff);
    pre[9] = (unsigned char)(len >> 8);

    st = fp4_io_out_open(&out, path, err);
    if (st) return st;
    if (fwrite(pre, 1, sizeof pre, out.f) != sizeof pre || fwrite(dict, 1, len, out.f) != len ||
        (t->nbytes && fwrite(t->data, 1, t->nbytes, out.f) != t->nbytes))
        st = fp4_fail(err, FP4_ERR_IO, "%s: write error: %s", path, strerror(errno));
    return fp4_io_out_finish(&out, st, err);
}

/* ---- a float matrix from any float .npy ------------------------------------------ */

/* Read a 2-D f32/f16/bf16 .npy as floats; *data is malloc'ed [rows, cols].
 * On failure *data is NULL and *rows, *cols are 0. */
fp4_status fp4_npy_read_matrix_f32(const char *path, float **data, int64_t *rows, int64_t *cols,
                                   fp4_err *err)
{
    fp4_status st;
    fp4_tensor t;
    size_t n, bytes;
    float *x = NULL;

    if (!path || !data || !rows || !cols)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "fp4_npy_read_matrix_f32: NULL argument");
    *data = NULL;
    *rows = *cols = 0;
    st = fp4_npy_read(path, &t, err);
    if (st) return st;

    if (t.dtype != FP4_DT_F32 && t.dtype != FP4_DT_F16 && t.dtype != FP4_DT_BF16) {
        st = fp4_fail(err, FP4_ERR_DTYPE, "%s: dtype %s, expected a float matrix (F32, F16 or BF16)",
                      path, fp4_dtype_name(t.dtype));
        goto out;
    }
    if (t.ndim != 2) {
        st = fp4_fail(err, FP4_ERR_DTYPE, "%s: a %d-D array, expected a 2-D matrix [rows, cols]", path,
                      t.ndim);
        goto out;
    }
    if (t.shape[0] == 0 || t.shape[1] == 0) {
        st = fp4_fail(err, FP4_ERR_SHAPE, "%s: empty matrix [%lld, %lld]", path,
                      (long long)t.shape[0], (long long)t.shape[1]);
        goto out;
    }
    n = (size_t)t.shape[0] * (size_t)t.shape[1]; /* fits: the file held it */
    if (t.dtype == FP4_DT_F32) {
        x = t.data;
        t.data = NULL;
    } else {
        const uint16_t *h = t.data;
        if (fp4_size_mul(n, sizeof *x, &bytes)) {
            st = fp4_fail(err, FP4_ERR_OVERFLOW, "%s: matrix too large", path);
            goto out;
        }
        x = malloc(bytes);
        if (!x) {
            st = fp4_fail(err, FP4_ERR_NOMEM, "%s: out of memory for %zu bytes", path, bytes);
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            x[i] = t.dtype == FP4_DT_F16 ? fp4_f16_to_float(h[i]) : fp4_bf16_to_float(h[i]);
    }
    *data = x;
    *rows = t.shape[0];
    *cols = t.shape[1];
out:
    fp4_tensor_free(&t);
    return st;
}
