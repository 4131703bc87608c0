/* Tests of include/fp4/io.h: .npy and .safetensors round trips, NVFP4
 * checkpoints (one layer of several, scales that are no scales), and bad
 * files (truncated at every length, corrupted headers, wrong dtypes and
 * shapes) that must fail cleanly with the right status; the
 * readers' limits (huge shape lists, deep nesting, names), UTF-8 checks, and
 * the spec-file limits of fp4/shapes.h (line length, labels, case count). */
#include "fp4/io.h"
#include "fp4/shapes.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check.h"
#include "test_rng.h"

static char g_dir[64];
static int g_verbose; /* FP4_TEST_VERBOSE=1: print every expected error message */

/* Path of file name in the temporary directory, in a buffer of its own: a
 * ring of 8, so that a few paths can be alive at once (tests keep theirs in
 * local arrays, see TMP_PATH). */
static const char *tmp_path(const char *name)
{
    static char buf[8][512];
    static int which;
    which = (which + 1) % 8;
    snprintf(buf[which], sizeof buf[which], "%s/%s", g_dir, name);
    return buf[which];
}

/* Declare a local char array var holding the temporary path of name. */
#define TMP_PATH(var, name)                                                      \
    char var[512];                                                               \
    snprintf(var, sizeof var, "%s/%s", g_dir, name)

/* Remove every file of the temporary directory and the directory. */
static void cleanup_dir(void)
{
    DIR *d = opendir(g_dir);
    struct dirent *e;
    if (!d) return;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        remove(tmp_path(e->d_name));
    }
    closedir(d);
    rmdir(g_dir);
}

/* Deterministic bytes from r. */
static void fill_random(test_rng *r, void *p, size_t n)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(test_rng_u64(r) >> 16);
}

/* Filler bytes for a hand-made file of n bytes: reproducible from n alone, so
 * a file's content does not depend on which tests wrote files before it. */
static void fill_filler(void *p, size_t len, size_t n)
{
    test_rng r = test_rng_seed(0x9e3779b97f4a7c15ull ^ (uint64_t)n);
    fill_random(&r, p, len);
}

/* Write n bytes to path; 0 on success. */
static int write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok;
    if (!f) return -1;
    ok = fwrite(p, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* Whole file into a malloc'ed buffer; NULL on failure. */
static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *p = NULL;
    long sz;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (sz = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        p = malloc((size_t)sz + 1);
        if (p && fread(p, 1, (size_t)sz, f) != (size_t)sz) {
            free(p);
            p = NULL;
        }
        *n = (size_t)sz;
    }
    fclose(f);
    return p;
}

/* A one-line message that names the file. */
static int good_msg(const fp4_err *e, const char *path)
{
    return e->msg[0] && !strchr(e->msg, '\n') && strstr(e->msg, path) != NULL;
}

static int tensor_empty(const fp4_tensor *t)
{
    return t->data == NULL && t->nbytes == 0 && t->ndim == 0;
}

/* ---- .npy ------------------------------------------------------------------ */

/* Write a .npy by hand: version major, header text (padded with '\n' only if
 * pad), then ndata random bytes. */
static void write_npy_raw(const char *path, int major, int hlen_override, const char *header,
                          size_t ndata)
{
    size_t hl = strlen(header), pre = major == 1 ? 10 : 12, n = pre + hl + ndata;
    unsigned char *b = calloc(n, 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    if (hlen_override >= 0) hl = (size_t)hlen_override;
    b[8] = (unsigned char)(hl & 0xff);
    b[9] = (unsigned char)(hl >> 8 & 0xff);
    if (major != 1) {
        b[10] = (unsigned char)(hl >> 16 & 0xff);
        b[11] = (unsigned char)(hl >> 24 & 0xff);
    }
    memcpy(b + pre, header, strlen(header));
    fill_filler(b + pre + strlen(header), ndata, n);
    CHECK(write_bytes(path, b, n) == 0);
    free(b);
}

/* Expect fp4_npy_read(path) to give status want with a good message. */
static void expect_npy(const char *path, fp4_status want, const char *what)
{
    fp4_tensor t;
    fp4_err e = {FP4_OK, ""};
    fp4_status st = fp4_npy_read(path, &t, &e);
    CHECK_MSG(st == want, "%s: status %d, want %d (%s)", what, (int)st, (int)want, e.msg);
    if (g_verbose) printf("%-28s %s\n", what, e.msg);
    if (st != FP4_OK) {
        CHECK_MSG(good_msg(&e, path), "%s: message '%s'", what, e.msg);
        CHECK_MSG(tensor_empty(&t), "%s: output not empty on failure", what);
    }
    fp4_tensor_free(&t);
}

static void test_dtype_helpers(void)
{
    fp4_tensor t[3];
    memset(t, 0, sizeof t);
    CHECK(fp4_dtype_size(FP4_DT_F32) == 4);
    CHECK(fp4_dtype_size(FP4_DT_F16) == 2);
    CHECK(fp4_dtype_size(FP4_DT_BF16) == 2);
    CHECK(fp4_dtype_size(FP4_DT_U8) == 1);
    CHECK(fp4_dtype_size(FP4_DT_F8_E4M3) == 1);
    CHECK(fp4_dtype_size(FP4_DT_COUNT) == 0);
    CHECK(strcmp(fp4_dtype_name(FP4_DT_F8_E4M3), "F8_E4M3") == 0);
    CHECK(strcmp(fp4_dtype_name(FP4_DT_BF16), "BF16") == 0);
    CHECK(strcmp(fp4_dtype_name(FP4_DT_U8), "U8") == 0);
    CHECK(fp4_tensor_numel(&t[0]) == 1); /* scalar */
    t[0].ndim = 3;
    t[0].shape[0] = 2;
    t[0].shape[1] = 3;
    t[0].shape[2] = 4;
    CHECK(fp4_tensor_numel(&t[0]) == 24);
    t[0].shape[1] = 0;
    CHECK(fp4_tensor_numel(&t[0]) == 0);
    t[0].shape[1] = -1;
    CHECK(fp4_tensor_numel(&t[0]) == -1);
    t[0].ndim = 2;
    t[0].shape[0] = INT64_MAX;
    t[0].shape[1] = 2;
    CHECK(fp4_tensor_numel(&t[0]) == -1);
    t[0].ndim = 3;
    t[0].shape[2] = 0; /* a zero dimension: no elements, though the others overflow */
    CHECK(fp4_tensor_numel(&t[0]) == 0);
    t[0].shape[0] = -1;
    CHECK(fp4_tensor_numel(&t[0]) == -1);
    t[0].ndim = 5;
    CHECK(fp4_tensor_numel(&t[0]) == -1);
    CHECK(fp4_tensor_numel(NULL) == -1);
    strcpy(t[0].name, "a");
    strcpy(t[1].name, "bb");
    strcpy(t[2].name, "c");
    CHECK(fp4_tensor_find(t, 3, "bb") == &t[1]);
    CHECK(fp4_tensor_find(t, 3, "b") == NULL);
    CHECK(fp4_tensor_find(NULL, 0, "b") == NULL);
    fp4_tensor_free(NULL);
}

static void test_npy_roundtrip(void)
{
    static const int ndims[] = {0, 1, 2, 3, 2, 4, 1};
    static const int64_t shapes[][4] = {{0}, {5}, {3, 4}, {2, 3, 4}, {1, 0}, {2, 1, 3, 1}, {1}};
    static const fp4_dtype dts[] = {FP4_DT_F32, FP4_DT_F16, FP4_DT_BF16, FP4_DT_U8};
    TMP_PATH(path, "rt.npy");
    test_rng rng = test_rng_seed(1);
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        for (size_t s = 0; s < sizeof ndims / sizeof ndims[0]; s++) {
            fp4_tensor t, r;
            fp4_err e = {FP4_OK, ""};
            size_t fsz = 0;
            unsigned char *raw;
            memset(&t, 0, sizeof t);
            t.dtype = dts[d];
            t.ndim = ndims[s];
            memcpy(t.shape, shapes[s], sizeof t.shape);
            t.nbytes = (size_t)fp4_tensor_numel(&t) * fp4_dtype_size(t.dtype);
            t.data = malloc(t.nbytes + 1);
            fill_random(&rng, t.data, t.nbytes);
            CHECK_MSG(fp4_npy_write(path, &t, &e) == FP4_OK, "write: %s", e.msg);
            CHECK_MSG(fp4_npy_read(path, &r, &e) == FP4_OK, "read: %s", e.msg);
            CHECK(r.dtype == t.dtype);
            CHECK(r.ndim == t.ndim);
            CHECK(memcmp(r.shape, t.shape, sizeof(int64_t) * (size_t)t.ndim) == 0);
            CHECK(r.nbytes == t.nbytes);
            CHECK(r.data && (t.nbytes == 0 || memcmp(r.data, t.data, t.nbytes) == 0));
            raw = read_bytes(path, &fsz);
            CHECK(raw != NULL);
            if (raw) {
                size_t hl = (size_t)raw[8] | (size_t)raw[9] << 8;
                CHECK(raw[6] == 1 && raw[7] == 0);
                CHECK((10 + hl) % 64 == 0);
                CHECK(fsz == 10 + hl + t.nbytes);
                CHECK(raw[10 + hl - 1] == '\n');
            }
            free(raw);
            fp4_tensor_free(&r);
            free(t.data);
        }
    }
}

static void test_npy_header_text(void)
{
    fp4_tensor t;
    fp4_err e = {FP4_OK, ""};
    float v[12] = {0};
    unsigned char *raw;
    size_t n = 0;
    TMP_PATH(path, "text.npy");
    memset(&t, 0, sizeof t);
    t.dtype = FP4_DT_F32;
    t.ndim = 2;
    t.shape[0] = 3;
    t.shape[1] = 4;
    t.data = v;
    t.nbytes = sizeof v;
    CHECK(fp4_npy_write(path, &t, &e) == FP4_OK);
    raw = read_bytes(path, &n);
    CHECK(raw && n > 80 &&
          memcmp(raw + 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 59) == 0);
    free(raw);
    t.ndim = 1;
    t.shape[0] = 12;
    t.dtype = FP4_DT_F32;
    CHECK(fp4_npy_write(path, &t, &e) == FP4_OK);
    raw = read_bytes(path, &n);
    CHECK(raw && strstr((char *)raw + 10, "'shape': (12,), }") != NULL);
    free(raw);
    t.ndim = 0;
    t.nbytes = 4;
    CHECK(fp4_npy_write(path, &t, &e) == FP4_OK);
    raw = read_bytes(path, &n);
    CHECK(raw && strstr((char *)raw + 10, "'shape': (), }") != NULL);
    free(raw);
    t.ndim = 1;
    t.shape[0] = 12;
    t.nbytes = sizeof v;
    t.dtype = FP4_DT_BF16; /* 48 bytes are 24 bf16, not 12 */
    CHECK(fp4_npy_write(path, &t, &e) == FP4_ERR_INVALID_ARG);
    t.nbytes = 24;
    CHECK(fp4_npy_write(path, &t, &e) == FP4_OK);
    raw = read_bytes(path, &n);
    CHECK(raw && strstr((char *)raw + 10, "{'descr': '<V2',") != NULL);
    free(raw);
    /* invalid tensors are refused */
    t.dtype = FP4_DT_F8_E4M3;
    t.nbytes = 12;
    CHECK(fp4_npy_write(path, &t, &e) == FP4_ERR_DTYPE);
    t.dtype = FP4_DT_F32;
    t.nbytes = 47;
    CHECK(fp4_npy_write(path, &t, &e) == FP4_ERR_INVALID_ARG);
    t.shape[0] = -3;
    CHECK(fp4_npy_write(path, &t, &e) == FP4_ERR_INVALID_ARG);
    t.shape[0] = 12;
    t.nbytes = 48;
    CHECK(fp4_npy_write(tmp_path("no/such/dir.npy"), &t, &e) == FP4_ERR_IO);
}

static void test_npy_parse_variants(void)
{
    TMP_PATH(p, "var.npy");
    fp4_tensor t;
    fp4_err e = {FP4_OK, ""};

    write_npy_raw(p, 2, -1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 24);
    expect_npy(p, FP4_OK, "v2.0");
    write_npy_raw(p, 3, -1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 24);
    expect_npy(p, FP4_OK, "v3.0");
    write_npy_raw(p, 1, -1, "{\"shape\":(2,3,),\"fortran_order\":False,\"descr\":\"<f2\"}", 12);
    expect_npy(p, FP4_OK, "keys reordered, double quotes, no spaces");
    write_npy_raw(p, 1, -1, "  { 'fortran_order' : False , 'shape' : ( 3L , 2L ) , 'descr' : '|u1' }  \n ",
                  6);
    expect_npy(p, FP4_OK, "spaces and python2 longs");
    write_npy_raw(p, 1, -1, "{'descr': '<u1', 'fortran_order': False, 'shape': (7,)}", 7);
    expect_npy(p, FP4_OK, "<u1");

    write_npy_raw(p, 1, -1, "{'descr': '|V2', 'fortran_order': False, 'shape': (4,), }", 8);
    CHECK(fp4_npy_read(p, &t, &e) == FP4_OK && t.dtype == FP4_DT_BF16 && t.ndim == 1 && t.shape[0] == 4);
    fp4_tensor_free(&t);
    write_npy_raw(p, 1, -1, "{'descr': 'bfloat16', 'fortran_order': False, 'shape': (2, 2), }", 8);
    CHECK(fp4_npy_read(p, &t, &e) == FP4_OK && t.dtype == FP4_DT_BF16 && t.nbytes == 8);
    fp4_tensor_free(&t);
    write_npy_raw(p, 1, -1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4);
    CHECK(fp4_npy_read(p, &t, &e) == FP4_OK && t.ndim == 0 && t.nbytes == 4);
    fp4_tensor_free(&t);
    /* a zero dimension: no elements, though the others multiply past int64
     * (the parser and fp4_tensor_numel agree on 0) */
    write_npy_raw(p, 1, -1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 87500, 87582001641832, 0), }", 0);
    CHECK(fp4_npy_read(p, &t, &e) == FP4_OK && t.ndim == 4 && t.nbytes == 0 &&
          fp4_tensor_numel(&t) == 0);
    fp4_tensor_free(&t);

    /* rejected */
    write_npy_raw(p, 1, -1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24);
    expect_npy(p, FP4_ERR_UNSUPPORTED, "fortran order");
    write_npy_raw(p, 1, -1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
    expect_npy(p, FP4_ERR_DTYPE, "big-endian");
    write_npy_raw(p, 1, -1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", 24);
    expect_npy(p, FP4_ERR_DTYPE, "float64");
    write_npy_raw(p, 1, -1, "{'descr': '|V1', 'fortran_order': False, 'shape': (3,), }", 3);
    expect_npy(p, FP4_ERR_DTYPE, "V1");
    write_npy_raw(p, 1, -1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", 12);
    expect_npy(p, FP4_ERR_FORMAT, "structured");
    write_npy_raw(p, 1, -1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 2), }", 8);
    expect_npy(p, FP4_ERR_UNSUPPORTED, "5 dims");
    {
        static const char *const bad[] = {
            "{'descr': '<f4', 'fortran_order': False}",                           /* no shape */
            "{'descr': '<f4', 'shape': (3,)}",                                    /* no fortran */
            "{'fortran_order': False, 'shape': (3,)}",                            /* no descr */
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': [3]}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4}",
            "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (3,)}",
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}",
            "{'descr': <f4, 'fortran_order': False, 'shape': (3,)}",
            "{'descr': '<f4, 'fortran_order': False, 'shape': (3,)}",
            "{'descr': '<f4' 'fortran_order': False, 'shape': (3,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} x",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)",
            "'descr': '<f4', 'fortran_order': False, 'shape': (3,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776, 1099511627776)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854775807,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", /* data: 12 expected, 13 present */
            "",
            "{}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            char what[64];
            write_npy_raw(p, 1, -1, bad[i], 13);
            snprintf(what, sizeof what, "bad header %zu", i);
            expect_npy(p, FP4_ERR_FORMAT, what);
        }
    }
    /* a NUL inside the header */
    {
        unsigned char b[10 + 58 + 12];
        const char *h = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}  \n";
        memcpy(b, "\x93NUMPY\x01\x00\x3a\x00", 10);
        memcpy(b + 10, h, 58);
        b[10 + 56] = '\0';
        memset(b + 68, 0, 12);
        CHECK(write_bytes(p, b, sizeof b) == 0);
        expect_npy(p, FP4_ERR_FORMAT, "NUL in header");
        b[10 + 56] = ' ';
        CHECK(write_bytes(p, b, sizeof b) == 0);
        expect_npy(p, FP4_OK, "NUL in header, control");
    }
    /* absurd header lengths, a header longer than the file, bad magic, version */
    write_npy_raw(p, 2, 0x7fffffff, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 12);
    expect_npy(p, FP4_ERR_FORMAT, "absurd header length");
    write_npy_raw(p, 1, 0xffff, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 12);
    expect_npy(p, FP4_ERR_FORMAT, "header longer than the file");
    write_npy_raw(p, 4, -1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 12);
    expect_npy(p, FP4_ERR_FORMAT, "version 4");
    CHECK(write_bytes(p, "\x93NUMPX\x01\x00\x00\x00", 10) == 0);
    expect_npy(p, FP4_ERR_FORMAT, "bad magic");
    CHECK(write_bytes(p, "", 0) == 0);
    expect_npy(p, FP4_ERR_FORMAT, "empty file");
    /* missing files and directories */
    expect_npy(tmp_path("missing.npy"), FP4_ERR_IO, "missing");
    expect_npy(g_dir, FP4_ERR_IO, "directory");
    CHECK(fp4_npy_read(NULL, &t, &e) == FP4_ERR_INVALID_ARG);
}

/* Every proper prefix of the file at path must fail with FP4_ERR_FORMAT. */
static void check_prefixes(const char *path, int is_npy, const char *what)
{
    size_t n = 0;
    unsigned char *raw = read_bytes(path, &n);
    const char *q = tmp_path("prefix.bin");
    int bad = 0;
    CHECK(raw != NULL);
    if (!raw) return;
    for (size_t len = 0; len < n; len++) {
        fp4_err e = {FP4_OK, ""};
        fp4_status st;
        CHECK(write_bytes(q, raw, len) == 0);
        if (is_npy) {
            fp4_tensor t;
            st = fp4_npy_read(q, &t, &e);
            if (!tensor_empty(&t)) bad++;
            fp4_tensor_free(&t);
        } else {
            fp4_tensor *ts = (fp4_tensor *)&e; /* must be reset to NULL */
            int c = -1;
            st = fp4_safetensors_read(q, &ts, &c, &e);
            if (ts != NULL || c != 0) bad++;
        }
        if (st != FP4_ERR_FORMAT || !good_msg(&e, q)) {
            if (bad++ < 5)
                fprintf(stderr, "%s: prefix of %zu/%zu bytes: status %d (%s)\n", what, len, n, (int)st,
                        e.msg);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d prefixes misbehaved", what, bad);
    free(raw);
}

/* Flip bytes of the file: reading must never crash or leak; a success must be
 * self-consistent. */
static void fuzz_bytes(const char *path, int is_npy)
{
    size_t n = 0;
    unsigned char *raw = read_bytes(path, &n);
    const char *q = tmp_path("fuzz.bin");
    static const unsigned char vals[] = {0x00, 0xff, '9', ']', '"', ' '};
    int bad = 0;
    if (!raw) {
        CHECK(raw != NULL);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t v = 0; v < sizeof vals; v++) {
            unsigned char old = raw[i];
            fp4_err e = {FP4_OK, ""};
            raw[i] = vals[v];
            CHECK(write_bytes(q, raw, n) == 0);
            raw[i] = old;
            if (is_npy) {
                fp4_tensor t;
                fp4_status st = fp4_npy_read(q, &t, &e);
                if (st == FP4_OK &&
                    (size_t)fp4_tensor_numel(&t) * fp4_dtype_size(t.dtype) != t.nbytes)
                    bad++;
                if (st != FP4_OK && !good_msg(&e, q)) bad++;
                fp4_tensor_free(&t);
            } else {
                fp4_tensor *ts = NULL;
                int c = 0;
                fp4_status st = fp4_safetensors_read(q, &ts, &c, &e);
                if (st == FP4_OK) {
                    for (int k = 0; k < c; k++) {
                        if ((size_t)fp4_tensor_numel(&ts[k]) * fp4_dtype_size(ts[k].dtype) !=
                            ts[k].nbytes)
                            bad++;
                        fp4_tensor_free(&ts[k]);
                    }
                    free(ts);
                } else if (!good_msg(&e, q) || ts != NULL) {
                    bad++;
                }
            }
        }
    }
    CHECK_MSG(bad == 0, "fuzz %s: %d inconsistent results", path, bad);
    free(raw);
}

static void test_npy_truncated(void)
{
    TMP_PATH(p, "trunc.npy");
    fp4_tensor t;
    fp4_err e = {FP4_OK, ""};
    float v[12];
    test_rng rng = test_rng_seed(2);
    memset(&t, 0, sizeof t);
    fill_random(&rng, v, sizeof v);
    t.dtype = FP4_DT_F32;
    t.ndim = 2;
    t.shape[0] = 3;
    t.shape[1] = 4;
    t.data = v;
    t.nbytes = sizeof v;
    CHECK(fp4_npy_write(p, &t, &e) == FP4_OK);
    check_prefixes(p, 1, "npy v1");
    fuzz_bytes(p, 1);
    write_npy_raw(p, 2, -1, "{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }\n", 10);
    expect_npy(p, FP4_OK, "v2 for prefixes");
    check_prefixes(p, 1, "npy v2");
}

/* Write a .npy of float values v [rows, cols] in dtype dt. */
static void write_float_npy(const char *path, fp4_dtype dt, int ndim, int64_t rows, int64_t cols,
                            const float *v)
{
    fp4_tensor t;
    fp4_err e = {FP4_OK, ""};
    size_t n = (size_t)(rows * cols);
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = ndim;
    t.shape[0] = ndim == 1 ? rows * cols : rows;
    t.shape[1] = cols;
    t.nbytes = n * fp4_dtype_size(dt);
    t.data = malloc(t.nbytes + 1);
    for (size_t i = 0; i < n; i++) {
        if (dt == FP4_DT_F32) ((float *)t.data)[i] = v[i];
        else if (dt == FP4_DT_F16) ((uint16_t *)t.data)[i] = fp4_f16_from_float(v[i]);
        else if (dt == FP4_DT_BF16) ((uint16_t *)t.data)[i] = fp4_bf16_from_float(v[i]);
        else ((uint8_t *)t.data)[i] = (uint8_t)v[i];
    }
    CHECK_MSG(fp4_npy_write(path, &t, &e) == FP4_OK, "%s", e.msg);
    free(t.data);
}

static void test_npy_matrix_f32(void)
{
    static const fp4_dtype dts[] = {FP4_DT_F32, FP4_DT_F16, FP4_DT_BF16};
    TMP_PATH(p, "mat.npy");
    float v[15];
    for (int i = 0; i < 15; i++) v[i] = (float)(i - 7) * 0.25f; /* exact in f16 and bf16 */
    for (size_t d = 0; d < 3; d++) {
        float *x = NULL;
        int64_t r = 0, c = 0;
        fp4_err e = {FP4_OK, ""};
        write_float_npy(p, dts[d], 2, 3, 5, v);
        CHECK_MSG(fp4_npy_read_matrix_f32(p, &x, &r, &c, &e) == FP4_OK, "%s", e.msg);
        CHECK(r == 3 && c == 5 && x != NULL);
        CHECK(x && memcmp(x, v, sizeof v) == 0);
        free(x);
    }
    {
        float *x = (float *)v;
        int64_t r = 9, c = 9;
        fp4_err e = {FP4_OK, ""};
        write_float_npy(p, FP4_DT_F32, 1, 3, 5, v);
        CHECK(fp4_npy_read_matrix_f32(p, &x, &r, &c, &e) == FP4_ERR_DTYPE);
        CHECK_MSG(strstr(e.msg, "1-D") != NULL && good_msg(&e, p), "%s", e.msg);
        CHECK(x == NULL && r == 0 && c == 0);
        write_float_npy(p, FP4_DT_U8, 2, 3, 5, v);
        CHECK(fp4_npy_read_matrix_f32(p, &x, &r, &c, &e) == FP4_ERR_DTYPE);
        CHECK_MSG(strstr(e.msg, "U8") != NULL, "%s", e.msg);
        write_float_npy(p, FP4_DT_F32, 2, 0, 5, v);
        CHECK(fp4_npy_read_matrix_f32(p, &x, &r, &c, &e) == FP4_ERR_SHAPE);
        CHECK(fp4_npy_read_matrix_f32(tmp_path("nope.npy"), &x, &r, &c, &e) == FP4_ERR_IO);
        CHECK(x == NULL);
    }
}

/* ---- .safetensors --------------------------------------------------------------- */

/* Write a .safetensors by hand: 8-byte length (hlen, or strlen(json) if
 * hlen == UINT64_MAX), the JSON, then ndata random bytes. */
static void write_st_raw(const char *path, uint64_t hlen, const char *json, size_t ndata)
{
    size_t jl = strlen(json), n = 8 + jl + ndata;
    unsigned char *b = calloc(n, 1);
    if (hlen == UINT64_MAX) hlen = jl;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + 8, json, jl);
    fill_filler(b + 8 + jl, ndata, n);
    CHECK(write_bytes(path, b, n) == 0);
    free(b);
}

/* Expect fp4_safetensors_read(path) to give status want with a good message. */
static void expect_st(const char *path, fp4_status want, const char *what)
{
    fp4_tensor *ts = NULL;
    int c = -1;
    fp4_err e = {FP4_OK, ""};
    fp4_status st = fp4_safetensors_read(path, &ts, &c, &e);
    CHECK_MSG(st == want, "%s: status %d, want %d (%s)", what, (int)st, (int)want, e.msg);
    if (g_verbose) printf("%-28s %s\n", what, e.msg);
    if (st == FP4_OK) {
        for (int i = 0; i < c; i++) fp4_tensor_free(&ts[i]);
        free(ts);
    } else {
        CHECK_MSG(good_msg(&e, path), "%s: message '%s'", what, e.msg);
        CHECK(ts == NULL && c == 0);
    }
}

static void test_st_roundtrip(void)
{
    TMP_PATH(p, "rt.safetensors");
    fp4_tensor w[6], *r = NULL;
    int c = 0;
    fp4_err e = {FP4_OK, ""};
    size_t total = 0, n = 0;
    unsigned char *raw;
    static const fp4_dtype dts[6] = {FP4_DT_U8, FP4_DT_F8_E4M3, FP4_DT_F32, FP4_DT_F16, FP4_DT_BF16,
                                     FP4_DT_F32};
    static const int nd[6] = {2, 2, 0, 1, 3, 2};
    static const int64_t shp[6][4] = {{3, 8}, {3, 1}, {0}, {5}, {2, 1, 3}, {0, 4}};
    test_rng rng = test_rng_seed(3);
    memset(w, 0, sizeof w);
    for (int i = 0; i < 6; i++) {
        snprintf(w[i].name, sizeof w[i].name, "t%d.%s", 5 - i, fp4_dtype_name(dts[i]));
        w[i].dtype = dts[i];
        w[i].ndim = nd[i];
        memcpy(w[i].shape, shp[i], sizeof w[i].shape);
        w[i].nbytes = (size_t)fp4_tensor_numel(&w[i]) * fp4_dtype_size(dts[i]);
        w[i].data = malloc(w[i].nbytes + 1);
        fill_random(&rng, w[i].data, w[i].nbytes);
        total += w[i].nbytes;
    }
    CHECK_MSG(fp4_safetensors_write(p, w, 6, &e) == FP4_OK, "%s", e.msg);
    CHECK_MSG(fp4_safetensors_read(p, &r, &c, &e) == FP4_OK, "%s", e.msg);
    CHECK(c == 6);
    for (int i = 0; i < c && i < 6; i++) {
        const fp4_tensor *t = fp4_tensor_find(r, c, w[i].name);
        CHECK(strcmp(r[i].name, w[i].name) == 0); /* file order is write order */
        CHECK(t != NULL);
        if (!t) continue;
        CHECK(t->dtype == w[i].dtype && t->ndim == w[i].ndim && t->nbytes == w[i].nbytes);
        CHECK(memcmp(t->shape, w[i].shape, sizeof(int64_t) * (size_t)t->ndim) == 0);
        CHECK(t->data && (t->nbytes == 0 || memcmp(t->data, w[i].data, t->nbytes) == 0));
    }
    for (int i = 0; i < c; i++) fp4_tensor_free(&r[i]);
    free(r);
    raw = read_bytes(p, &n);
    if (raw) {
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | raw[i];
        CHECK(hl % 8 == 0);
        CHECK(n == 8 + hl + total);
        raw[8 + hl] = '\0'; /* hl < n, the data is non-empty */
        CHECK(strstr((char *)raw + 8, "\"t5.U8\":{\"dtype\":\"U8\",\"shape\":[3,8],\"data_offsets\":[0,24]}") != NULL);
        CHECK(strstr((char *)raw + 8, "\"shape\":[],\"data_offsets\":[27,31]") != NULL);
        CHECK(strstr((char *)raw + 8, "__metadata__") == NULL);
    }
    free(raw);
    check_prefixes(p, 0, "safetensors");
    fuzz_bytes(p, 0);

    /* bad arguments */
    CHECK(fp4_safetensors_write(p, w, -1, &e) == FP4_ERR_INVALID_ARG);
    strcpy(w[1].name, w[0].name);
    CHECK(fp4_safetensors_write(p, w, 6, &e) == FP4_ERR_INVALID_ARG);
    strcpy(w[1].name, "__metadata__");
    CHECK(fp4_safetensors_write(p, w, 6, &e) == FP4_ERR_INVALID_ARG);
    strcpy(w[1].name, "");
    CHECK(fp4_safetensors_write(p, w, 6, &e) == FP4_ERR_INVALID_ARG);
    strcpy(w[1].name, "ok");
    w[1].nbytes++;
    CHECK(fp4_safetensors_write(p, w, 6, &e) == FP4_ERR_INVALID_ARG);
    w[1].nbytes--;
    w[1].dtype = FP4_DT_COUNT;
    CHECK(fp4_safetensors_write(p, w, 6, &e) == FP4_ERR_DTYPE);
    w[1].dtype = FP4_DT_U8;
    CHECK(fp4_safetensors_write(tmp_path("no/dir.safetensors"), w, 6, &e) == FP4_ERR_IO);
    for (int i = 0; i < 6; i++) free(w[i].data);

    /* no tensors at all */
    CHECK(fp4_safetensors_write(p, NULL, 0, &e) == FP4_OK);
    r = (fp4_tensor *)&e;
    c = -1;
    CHECK(fp4_safetensors_read(p, &r, &c, &e) == FP4_OK && c == 0);
    free(r);
}

static void test_st_bad(void)
{
    TMP_PATH(p, "bad.safetensors");
    const char *ok1 = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    char name[300], json[512];

    write_st_raw(p, UINT64_MAX, ok1, 16);
    expect_st(p, FP4_OK, "valid");
    write_st_raw(p, UINT64_MAX,
                 "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"shape\":[2,2],\"data_offsets\":[0,16],"
                 "\"dtype\":\"F32\",\"extra\":1}}   \n",
                 16);
    expect_st(p, FP4_OK, "metadata, key order, trailing spaces");
    write_st_raw(p, UINT64_MAX,
                 "{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[16,20]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                 "\"z\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[20,20]}}",
                 20);
    expect_st(p, FP4_OK, "offsets out of key order");

    {
        static const char *const fmt_bad[] = {
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}",        /* unclosed */
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}} x",     /* garbage */
            "[1, 2]",
            "",
            "{\"a\":[]}",
            "{\"a\":{\"shape\":[2,2],\"data_offsets\":[0,16]}}",
            "{\"a\":{\"dtype\":3,\"shape\":[2,2],\"data_offsets\":[0,16]}}",
            "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2]}}",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0]}}",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16,16]}}",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[5,5],\"data_offsets\":[0,100]}}",      /* past the end */
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[16,0]}}",       /* begin > end */
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}",       /* size mismatch */
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[0,8]}}",        /* 8 bytes unused */
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[8,16]}}",       /* gap */
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[-16,0]}}",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0.5,16]}}",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,1e400]}}",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2,-2],\"data_offsets\":[0,16]}}",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5,2],\"data_offsets\":[0,16]}}",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\",2],\"data_offsets\":[0,16]}}",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,16]}}",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]}}",       /* duplicate */
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",        /* overlap */
            "{\"__metadata__\":{\"n\":1},\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
            "{\"__metadata__\":[],\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
        };
        for (size_t i = 0; i < sizeof fmt_bad / sizeof fmt_bad[0]; i++) {
            char what[64];
            snprintf(what, sizeof what, "bad header %zu", i);
            write_st_raw(p, UINT64_MAX, fmt_bad[i], 16);
            expect_st(p, FP4_ERR_FORMAT, what);
        }
    }
    write_st_raw(p, UINT64_MAX, "{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16);
    expect_st(p, FP4_ERR_DTYPE, "F64");
    write_st_raw(p, UINT64_MAX, "{\"a\":{\"dtype\":\"f32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16);
    expect_st(p, FP4_ERR_DTYPE, "lowercase dtype");
    write_st_raw(p, UINT64_MAX,
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,2,2],\"data_offsets\":[0,16]}}", 16);
    expect_st(p, FP4_ERR_UNSUPPORTED, "5 dims");
    memset(name, 'n', 200);
    name[200] = '\0';
    snprintf(json, sizeof json, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", name);
    write_st_raw(p, UINT64_MAX, json, 16);
    expect_st(p, FP4_ERR_UNSUPPORTED, "long name");
    /* header lengths */
    write_st_raw(p, 1ull << 62, ok1, 16);
    expect_st(p, FP4_ERR_FORMAT, "absurd header length");
    write_st_raw(p, UINT64_MAX - 1, ok1, 16);
    expect_st(p, FP4_ERR_FORMAT, "header length 2^64-2");
    write_st_raw(p, 200000000ull, ok1, 16);
    expect_st(p, FP4_ERR_FORMAT, "header length over the cap");
    write_st_raw(p, strlen(ok1) + 17, ok1, 16);
    expect_st(p, FP4_ERR_FORMAT, "header longer than the file");
    write_st_raw(p, 0, "", 0);
    expect_st(p, FP4_ERR_FORMAT, "zero header");
    write_st_raw(p, UINT64_MAX, ok1, 15);
    expect_st(p, FP4_ERR_FORMAT, "data truncated by one byte");
    write_st_raw(p, UINT64_MAX, ok1, 17);
    expect_st(p, FP4_ERR_FORMAT, "one byte too many");
    expect_st(tmp_path("missing.safetensors"), FP4_ERR_IO, "missing");
    expect_st(g_dir, FP4_ERR_IO, "directory");
}

/* ---- NVFP4 checkpoints --------------------------------------------------------- */

/* Expect fp4_nvfp4_load(path) to give status want, the message mentioning
 * word, and a zeroed matrix. */
static void expect_load(const char *path, fp4_status want, const char *word, const char *what)
{
    fp4_matrix m;
    fp4_err e = {FP4_OK, ""};
    fp4_status st;
    memset(&m, 0xab, sizeof m);
    st = fp4_nvfp4_load(path, &m, &e);
    CHECK_MSG(st == want, "%s: status %d, want %d (%s)", what, (int)st, (int)want, e.msg);
    if (g_verbose) printf("%-28s %s\n", what, e.msg);
    if (st == FP4_OK) {
        fp4_matrix_free(&m);
        return;
    }
    CHECK_MSG(good_msg(&e, path) && (!word || strstr(e.msg, word)), "%s: message '%s'", what, e.msg);
    CHECK(m.codes == NULL && m.scales == NULL && m.rows == 0 && m.cols == 0);
}

/* The tensors of a checkpoint [rows, k] in ts[0..3]; data points into bufs. */
static void make_ckpt(fp4_tensor ts[4], uint8_t *codes, uint8_t *scales, float *gs, float *is,
                      int64_t rows, int64_t k)
{
    memset(ts, 0, 4 * sizeof *ts);
    strcpy(ts[0].name, "weight");
    ts[0].dtype = FP4_DT_U8;
    ts[0].ndim = 2;
    ts[0].shape[0] = rows;
    ts[0].shape[1] = k / 2;
    ts[0].data = codes;
    ts[0].nbytes = (size_t)(rows * k / 2);
    strcpy(ts[1].name, "weight_scale");
    ts[1].dtype = FP4_DT_F8_E4M3;
    ts[1].ndim = 2;
    ts[1].shape[0] = rows;
    ts[1].shape[1] = k / 16;
    ts[1].data = scales;
    ts[1].nbytes = (size_t)(rows * k / 16);
    strcpy(ts[2].name, "weight_scale_2");
    ts[2].dtype = FP4_DT_F32;
    ts[2].data = gs;
    ts[2].nbytes = 4;
    strcpy(ts[3].name, "input_scale");
    ts[3].dtype = FP4_DT_F32;
    ts[3].data = is;
    ts[3].nbytes = 4;
}

/* Set the shape of t and its byte count (data must be large enough). */
static void reshape(fp4_tensor *t, fp4_dtype dt, int ndim, int64_t a, int64_t b)
{
    t->dtype = dt;
    t->ndim = ndim;
    t->shape[0] = a;
    t->shape[1] = b;
    t->nbytes = (size_t)fp4_tensor_numel(t) * fp4_dtype_size(dt);
}

static void test_nvfp4(void)
{
    TMP_PATH(p, "w.safetensors");
    const int64_t rows = 7, k = 64;
    float *x = malloc(sizeof(float) * (size_t)(rows * k));
    fp4_matrix q, m;
    fp4_err e = {FP4_OK, ""};
    fp4_tensor *r = NULL, ts[4];
    int c = 0;
    uint8_t codes[512], scales[64];
    float gs = 0.125f, is = 2.0f, nanv = NAN;
    test_rng rng = test_rng_seed(4);

    memset(&q, 0, sizeof q);
    for (int64_t i = 0; i < rows * k; i++) x[i] = (float)((int)((test_rng_u64(&rng) >> 16) % 2001) - 1000) / 137.0f;
    CHECK_MSG(fp4_quantize_f32(x, rows, k, 0.0f, &q, &e) == FP4_OK, "%s", e.msg);
    CHECK_MSG(fp4_nvfp4_save(p, &q, 0.5f, &e) == FP4_OK, "%s", e.msg);
    CHECK_MSG(fp4_nvfp4_load(p, &m, &e) == FP4_OK, "%s", e.msg);
    CHECK(m.rows == rows && m.cols == k);
    CHECK(m.codes && memcmp(m.codes, q.codes, (size_t)(rows * k / 2)) == 0);
    CHECK(m.scales && memcmp(m.scales, q.scales, (size_t)(rows * k / 16)) == 0);
    CHECK(memcmp(&m.global_scale, &q.global_scale, sizeof(float)) == 0);
    fp4_matrix_free(&m);

    /* the file, seen as plain tensors */
    CHECK(fp4_safetensors_read(p, &r, &c, &e) == FP4_OK && c == 4);
    {
        const fp4_tensor *w = fp4_tensor_find(r, c, "weight");
        const fp4_tensor *s = fp4_tensor_find(r, c, "weight_scale");
        const fp4_tensor *g = fp4_tensor_find(r, c, "weight_scale_2");
        const fp4_tensor *in = fp4_tensor_find(r, c, "input_scale");
        CHECK(w && w->dtype == FP4_DT_U8 && w->ndim == 2 && w->shape[0] == rows && w->shape[1] == k / 2);
        CHECK(s && s->dtype == FP4_DT_F8_E4M3 && s->ndim == 2 && s->shape[0] == rows &&
              s->shape[1] == k / 16);
        CHECK(g && g->dtype == FP4_DT_F32 && g->ndim == 0 && *(float *)g->data == q.global_scale);
        CHECK(in && in->dtype == FP4_DT_F32 && in->ndim == 0 && *(float *)in->data == 0.5f);
    }
    for (int i = 0; i < c; i++) fp4_tensor_free(&r[i]);
    free(r);
    {
        size_t n = 0;
        unsigned char *raw = read_bytes(p, &n);
        if (raw) raw[n] = '\0';
        CHECK(raw && strstr((char *)raw + 8,
                            "\"__metadata__\":{\"format\":\"nvfp4\",\"producer\":\"fp4bench\"}") != NULL);
        free(raw);
    }
    /* input_scale < 0: omitted */
    CHECK(fp4_nvfp4_save(p, &q, -1.0f, &e) == FP4_OK);
    CHECK(fp4_safetensors_read(p, &r, &c, &e) == FP4_OK && c == 3 && !fp4_tensor_find(r, c, "input_scale"));
    for (int i = 0; i < c; i++) fp4_tensor_free(&r[i]);
    free(r);
    expect_load(p, FP4_OK, NULL, "no input_scale");
    /* a small checkpoint cut at every length */
    {
        fp4_matrix one;
        CHECK(fp4_quantize_f32(x, 1, 16, 0.0f, &one, &e) == FP4_OK);
        CHECK(fp4_nvfp4_save(tmp_path("one.safetensors"), &one, 1.0f, &e) == FP4_OK);
        expect_load(tmp_path("one.safetensors"), FP4_OK, NULL, "1x16");
        check_prefixes(tmp_path("one.safetensors"), 0, "nvfp4 1x16");
        fp4_matrix_free(&one);
    }
    /* invalid matrices are refused */
    q.cols = 15;
    CHECK(fp4_nvfp4_save(p, &q, 1.0f, &e) != FP4_OK);
    q.cols = k;
    /* what the loader refuses is never written: -0 means no input_scale, as a negative */
    CHECK(fp4_nvfp4_save(p, &q, -0.0f, &e) == FP4_OK);
    expect_load(p, FP4_OK, NULL, "input_scale -0: none");
    CHECK(fp4_nvfp4_save(p, &q, 0.0f, &e) == FP4_ERR_INVALID_ARG && strstr(e.msg, "input scale"));
    CHECK(fp4_nvfp4_save(p, &q, NAN, &e) == FP4_ERR_INVALID_ARG);
    {
        const float kept_gs = q.global_scale;
        const uint8_t s0 = q.scales[0];
        q.global_scale = -kept_gs;
        CHECK(fp4_nvfp4_save(p, &q, 1.0f, &e) == FP4_ERR_INVALID_ARG && strstr(e.msg, "global scale"));
        q.global_scale = kept_gs;
        q.scales[0] = 0x7F;
        CHECK(fp4_nvfp4_save(p, &q, 1.0f, &e) == FP4_ERR_INVALID_ARG && strstr(e.msg, "NaN"));
        q.scales[0] = 0x81;
        CHECK(fp4_nvfp4_save(p, &q, 1.0f, &e) == FP4_ERR_INVALID_ARG && strstr(e.msg, "negative"));
        q.scales[0] = s0;
    }
    fp4_matrix_free(&q);
    memset(&q, 0, sizeof q);
    q.rows = 1;
    q.cols = 16;
    CHECK(fp4_nvfp4_save(p, &q, 1.0f, &e) == FP4_ERR_INVALID_ARG);

    /* hand-made checkpoints, wrong in one way each */
    fill_random(&rng, codes, sizeof codes);
    memset(scales, 0x38, sizeof scales);
    make_ckpt(ts, codes, scales, &gs, &is, 4, 32);
    CHECK(fp4_safetensors_write(p, ts, 4, &e) == FP4_OK);
    CHECK(fp4_nvfp4_load(p, &m, &e) == FP4_OK && m.rows == 4 && m.cols == 32 && m.global_scale == 0.125f &&
          memcmp(m.codes, codes, 64) == 0 && m.scales[7] == 0x38);
    fp4_matrix_free(&m);
    reshape(&ts[2], FP4_DT_F32, 1, 1, 0); /* [1] is accepted */
    CHECK(fp4_safetensors_write(p, ts, 4, &e) == FP4_OK);
    expect_load(p, FP4_OK, NULL, "weight_scale_2 [1]");

    make_ckpt(ts, codes, scales, &gs, &is, 4, 32);
    reshape(&ts[1], FP4_DT_F32, 2, 4, 2);
    CHECK(fp4_safetensors_write(p, ts, 4, &e) == FP4_OK);
    expect_load(p, FP4_ERR_DTYPE, "tensor 'weight_scale' has dtype F32, expected F8_E4M3", "scale F32");
    make_ckpt(ts, codes, scales, &gs, &is, 4, 32);
    reshape(&ts[0], FP4_DT_F16, 2, 4, 8);
    CHECK(fp4_safetensors_write(p, ts, 4, &e) == FP4_OK);
    expect_load(p, FP4_ERR_DTYPE, "'weight'", "weight F16");
    make_ckpt(ts, codes, scales, &gs, &is, 4, 32);
    reshape(&ts[2], FP4_DT_F16, 0, 0, 0);
    CHECK(fp4_safetensors_write(p, ts, 4, &e) == FP4_OK);
    expect_load(p, FP4_ERR_DTYPE, "weight_scale_2", "weight_scale_2 F16");
    make_ckpt(ts, codes, scales, &gs, &is, 4, 32);
    reshape(&ts[2], FP4_DT_F32, 1, 2, 0);
    ts[2].data = codes;
    CHECK(fp4_safetensors_write(p, ts, 4, &e) == FP4_OK);
    expect_load(p, FP4_ERR_DTYPE, "weight_scale_2", "weight_scale_2 [2]");
    make_ckpt(ts, codes, scales, &gs, &is, 4, 32);
    ts[2].data = &nanv;
    CHECK(fp4_safetensors_write(p, ts, 4, &e) == FP4_OK);
    expect_load(p, FP4_ERR_FORMAT, "weight_scale_2", "weight_scale_2 NaN");
    make_ckpt(ts, codes, scales, &gs, &is, 4, 32);
    reshape(&ts[3], FP4_DT_U8, 1, 4, 0);
    CHECK(fp4_safetensors_write(p, ts, 4, &e) == FP4_OK);
    expect_load(p, FP4_ERR_DTYPE, "input_scale", "input_scale U8");
    make_ckpt(ts, codes, scales, &gs, &is, 4, 32);
    reshape(&ts[1], FP4_DT_F8_E4M3, 2, 3, 2);
    CHECK(fp4_safetensors_write(p, ts, 4, &e) == FP4_OK);
    expect_load(p, FP4_ERR_DTYPE, "rows", "scale rows");
    make_ckpt(ts, codes, scales, &gs, &is, 4, 32);
    reshape(&ts[1], FP4_DT_F8_E4M3, 2, 4, 3);
    CHECK(fp4_safetensors_write(p, ts, 4, &e) == FP4_OK);
    expect_load(p, FP4_ERR_DTYPE, "disagree", "K mismatch");
    make_ckpt(ts, codes, scales, &gs, &is, 4, 32);
    reshape(&ts[0], FP4_DT_U8, 1, 64, 0);
    CHECK(fp4_safetensors_write(p, ts, 4, &e) == FP4_OK);
    expect_load(p, FP4_ERR_DTYPE, "'weight'", "weight 1-D");
    make_ckpt(ts, codes, scales, &gs, &is, 4, 32);
    reshape(&ts[0], FP4_DT_U8, 2, 4, 0); /* K = 0 */
    reshape(&ts[1], FP4_DT_F8_E4M3, 2, 4, 0);
    CHECK(fp4_safetensors_write(p, ts, 4, &e) == FP4_OK);
    expect_load(p, FP4_ERR_DTYPE, "'weight'", "K = 0");
    make_ckpt(ts, codes, scales, &gs, &is, 0, 32);
    CHECK(fp4_safetensors_write(p, ts, 4, &e) == FP4_OK);
    expect_load(p, FP4_ERR_DTYPE, "'weight'", "N = 0");
    make_ckpt(ts, codes, scales, &gs, &is, 4, 32);
    CHECK(fp4_safetensors_write(p, ts, 2, &e) == FP4_OK);
    expect_load(p, FP4_ERR_NOT_FOUND, "weight_scale_2", "missing weight_scale_2");
    CHECK(fp4_safetensors_write(p, ts + 1, 3, &e) == FP4_OK);
    expect_load(p, FP4_ERR_NOT_FOUND, "'weight'", "missing weight");
    expect_load(tmp_path("missing.safetensors"), FP4_ERR_IO, NULL, "missing file");
    write_st_raw(p, UINT64_MAX, "{\"weight\":", 0);
    expect_load(p, FP4_ERR_FORMAT, NULL, "corrupt JSON");
    free(x);
}

/* ---- layers of a model's checkpoint ---------------------------------------------- */

#define LAYER0 "model.layers.0.mlp.experts.3.down_proj"
#define LAYER1 "model.layers.1.mlp.experts.7.gate_proj"

/* Expect fp4_nvfp4_load_layer(path, prefix) to give status want, the message
 * naming the file and holding each of words[] (NULL-terminated) on one line,
 * and a zeroed matrix. */
static void expect_layer(const char *path, const char *prefix, fp4_status want, const char *const *words,
                         const char *what)
{
    fp4_matrix m;
    fp4_err e = {FP4_OK, ""};
    float is = 123.0f;
    fp4_status st;
    memset(&m, 0xab, sizeof m);
    st = fp4_nvfp4_load_layer(path, prefix, &m, &is, &e);
    CHECK_MSG(st == want, "%s: status %d, want %d (%s)", what, (int)st, (int)want, e.msg);
    if (g_verbose) printf("%-28s %s\n", what, e.msg);
    if (st == FP4_OK) {
        fp4_matrix_free(&m);
        return;
    }
    CHECK_MSG(e.msg[0] && !strchr(e.msg, '\n'), "%s: message '%s'", what, e.msg);
    if (want != FP4_ERR_INVALID_ARG) CHECK_MSG(good_msg(&e, path), "%s: message '%s'", what, e.msg);
    for (int i = 0; words && words[i]; i++)
        CHECK_MSG(strstr(e.msg, words[i]) != NULL, "%s: '%s' not in '%s'", what, words[i], e.msg);
    CHECK(m.codes == NULL && m.scales == NULL && m.rows == 0 && m.cols == 0);
    CHECK(is == -1.0f);
}

/* A tensor named prefix.suffix of the given dtype and 0 to 2 dimensions. */
static fp4_tensor layer_tensor(const char *prefix, const char *suffix, fp4_dtype dt, int ndim, int64_t a,
                               int64_t b, void *data)
{
    fp4_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s.%s", prefix, suffix);
    t.dtype = dt;
    t.ndim = ndim;
    t.shape[0] = a;
    t.shape[1] = b;
    t.data = data;
    t.nbytes = (size_t)fp4_tensor_numel(&t) * fp4_dtype_size(dt);
    return t;
}

/* The tensors of a two-layer checkpoint with a bf16 tensor between: ts[0]
 * bf16, ts[1..3] LAYER0 (q0, no input_scale), ts[4..7] LAYER1 (q1 with
 * input_scale *is1). Returns the count (8). */
static int model_tensors(fp4_tensor ts[8], fp4_matrix *q0, float *gs0, fp4_matrix *q1, float *gs1, float *is1,
                         uint16_t *bf16)
{
    *gs0 = q0->global_scale;
    *gs1 = q1->global_scale;
    ts[0] = layer_tensor("model.embed_tokens", "weight", FP4_DT_BF16, 2, 2, 3, bf16);
    ts[1] = layer_tensor(LAYER0, "weight", FP4_DT_U8, 2, q0->rows, q0->cols / 2, q0->codes);
    ts[2] = layer_tensor(LAYER0, "weight_scale", FP4_DT_F8_E4M3, 2, q0->rows, q0->cols / 16, q0->scales);
    ts[3] = layer_tensor(LAYER0, "weight_scale_2", FP4_DT_F32, 0, 0, 0, gs0);
    ts[4] = layer_tensor(LAYER1, "weight", FP4_DT_U8, 2, q1->rows, q1->cols / 2, q1->codes);
    ts[5] = layer_tensor(LAYER1, "weight_scale", FP4_DT_F8_E4M3, 2, q1->rows, q1->cols / 16, q1->scales);
    ts[6] = layer_tensor(LAYER1, "weight_scale_2", FP4_DT_F32, 0, 0, 0, gs1);
    ts[7] = layer_tensor(LAYER1, "input_scale", FP4_DT_F32, 0, 0, 0, is1);
    return 8;
}

/* Every proper prefix of the checkpoint at path, and the file with one byte
 * changed at each place: loading layer prefix never crashes; a prefix fails
 * with FP4_ERR_FORMAT, any failure with a one-line message naming the file
 * and a zeroed matrix, a success gives a whole NVFP4 matrix. */
static void fuzz_layer(const char *path, const char *prefix)
{
    size_t n = 0;
    unsigned char *raw = read_bytes(path, &n);
    const char *q = tmp_path("fuzz_layer.bin");
    static const unsigned char vals[] = {0x00, 0xff, 0x7f, '9', ']', '"'};
    int bad = 0;
    CHECK(raw != NULL);
    for (size_t i = 0; raw && i < n; i++) {
        for (size_t v = 0; v <= sizeof vals; v++) {
            unsigned char old = raw[i];
            fp4_err e = {FP4_OK, ""};
            fp4_matrix m;
            fp4_status st;
            if (v < sizeof vals) { /* byte i changed; v == sizeof vals: the first i bytes */
                raw[i] = vals[v];
                CHECK(write_bytes(q, raw, n) == 0);
                raw[i] = old;
            } else {
                CHECK(write_bytes(q, raw, i) == 0);
            }
            st = fp4_nvfp4_load_layer(q, prefix, &m, NULL, &e);
            if (st == FP4_OK) {
                if (v == sizeof vals || m.rows < 1 || m.cols < 16 || m.cols % 16 || !m.codes || !m.scales)
                    bad++;
                fp4_matrix_free(&m);
            } else if (!good_msg(&e, q) || m.codes || m.scales || m.rows || m.cols ||
                       (v == sizeof vals && st != FP4_ERR_FORMAT)) {
                if (bad++ < 5)
                    fprintf(stderr, "fuzz_layer: byte %zu, change %zu: status %d (%s)\n", i, v, (int)st, e.msg);
            }
        }
    }
    CHECK_MSG(bad == 0, "fuzz_layer %s: %d inconsistent results", path, bad);
    free(raw);
}

/* One layer of a checkpoint holding several: the right tensors, only their
 * data read, and a missing one named with what there is instead. */
static void test_nvfp4_layers(void)
{
    TMP_PATH(p, "model.safetensors");
    TMP_PATH(part, "partial.safetensors");
    fp4_matrix q0, q1, m;
    fp4_tensor ts[8], *r = NULL;
    fp4_err e = {FP4_OK, ""};
    float x[6 * 64], gs0, gs1, is1 = 0.5f, is = 0;
    uint16_t bf16[6] = {1, 2, 3, 4, 5, 6};
    int n, c = 0;
    char longname[200];
    test_rng rng = test_rng_seed(5);

    for (int i = 0; i < 6 * 64; i++) x[i] = (float)test_rng_gauss(&rng);
    CHECK(fp4_quantize_f32(x, 6, 64, 0.0f, &q0, &e) == FP4_OK);
    CHECK(fp4_quantize_f32(x + 7, 3, 32, 0.0f, &q1, &e) == FP4_OK);
    n = model_tensors(ts, &q0, &gs0, &q1, &gs1, &is1, bf16);
    CHECK_MSG(fp4_safetensors_write(p, ts, n, &e) == FP4_OK, "%s", e.msg);

    /* each layer, as its own file would give it */
    CHECK_MSG(fp4_nvfp4_load_layer(p, LAYER0, &m, &is, &e) == FP4_OK, "%s", e.msg);
    CHECK(m.rows == 6 && m.cols == 64 && m.global_scale == q0.global_scale && is == -1.0f);
    CHECK(m.codes && memcmp(m.codes, q0.codes, 6 * 32) == 0 && memcmp(m.scales, q0.scales, 6 * 4) == 0);
    fp4_matrix_free(&m);
    CHECK_MSG(fp4_nvfp4_load_layer(p, LAYER1, &m, &is, &e) == FP4_OK, "%s", e.msg);
    CHECK(m.rows == 3 && m.cols == 32 && m.global_scale == q1.global_scale && is == 0.5f);
    CHECK(m.codes && memcmp(m.codes, q1.codes, 3 * 16) == 0 && memcmp(m.scales, q1.scales, 3 * 2) == 0);
    fp4_matrix_free(&m);
    CHECK(fp4_nvfp4_load_layer(p, LAYER1, &m, NULL, &e) == FP4_OK); /* input_scale not wanted */
    fp4_matrix_free(&m);

    /* only the wanted tensors' data is read; every header is there */
    {
        const char *want[2] = {LAYER1 ".weight", "not.there"};
        CHECK_MSG(fp4_safetensors_read_some(p, want, 2, &r, &c, &e) == FP4_OK, "%s", e.msg);
        CHECK(c == n);
        for (int i = 0; i < c; i++) {
            int wanted = strcmp(r[i].name, want[0]) == 0;
            CHECK_MSG(wanted ? r[i].data != NULL : r[i].data == NULL, "tensor %s", r[i].name);
            CHECK(r[i].nbytes == ts[i].nbytes && r[i].dtype == ts[i].dtype &&
                  strcmp(r[i].name, ts[i].name) == 0);
            if (wanted) CHECK(memcmp(r[i].data, q1.codes, r[i].nbytes) == 0);
        }
        for (int i = 0; i < c; i++) fp4_tensor_free(&r[i]);
        free(r);
        CHECK(fp4_safetensors_read_some(p, NULL, 0, &r, &c, &e) == FP4_OK && c == n);
        for (int i = 0; i < c; i++) CHECK(r[i].data == NULL);
        for (int i = 0; i < c; i++) fp4_tensor_free(&r[i]);
        free(r);
        CHECK(fp4_safetensors_read_some(p, NULL, 1, &r, &c, &e) == FP4_ERR_INVALID_ARG);
        CHECK(fp4_safetensors_read_some(p, want, -1, &r, &c, &e) == FP4_ERR_INVALID_ARG);
        CHECK(fp4_safetensors_read_some(tmp_path("none.safetensors"), want, 1, &r, &c, &e) == FP4_ERR_IO);
    }

    /* missing: the name looked for, and what is there instead */
    {
        static const char *const w_near[] = {"no tensor '" "model.layers.1.mlp.experts.7.up_proj.weight'",
                                             "2 NVFP4 layers", "nearest: '" LAYER1 "', '" LAYER0 "'", NULL};
        static const char *const w_under[] = {"'model.layers.1.mlp.experts.7' is no layer", "'gate_proj'", NULL};
        static const char *const w_bare[] = {"no tensor 'weight'", "such as '" LAYER0 "', '" LAYER1 "'", NULL};
        expect_layer(p, "model.layers.1.mlp.experts.7.up_proj", FP4_ERR_NOT_FOUND, w_near, "layer missing");
        expect_layer(p, "model.layers.1.mlp.experts.7", FP4_ERR_NOT_FOUND, w_under, "a parent of a layer");
        expect_layer(p, NULL, FP4_ERR_NOT_FOUND, w_bare, "bare names in a model");
        expect_layer(p, "", FP4_ERR_NOT_FOUND, w_bare, "empty prefix: bare names");
        expect_load(p, FP4_ERR_NOT_FOUND, "such as", "fp4_nvfp4_load of a model");
    }
    {
        static const char *const w_part[] = {"no tensor '" LAYER0 ".weight_scale_2'",
                                             "'" LAYER0 "' has only 'weight', 'weight_scale'", NULL};
        static const char *const w_one[] = {"no tensor 'foo.weight'", "one layer, under the bare names", NULL};
        CHECK(fp4_safetensors_write(part, ts, 3, &e) == FP4_OK); /* LAYER0 without weight_scale_2 */
        expect_layer(part, LAYER0, FP4_ERR_NOT_FOUND, w_part, "partial layer");
        CHECK(fp4_nvfp4_save(part, &q1, -1.0f, &e) == FP4_OK);
        expect_layer(part, "foo", FP4_ERR_NOT_FOUND, w_one, "a name for a one-layer file");
        expect_layer(part, NULL, FP4_OK, NULL, "the one-layer file");
    }
    /* names that cannot be */
    memset(longname, 'x', 115);
    longname[115] = '\0';
    {
        static const char *const w_long[] = {"weight_scale_2' is longer than 127 bytes", NULL};
        static const char *const w_ctrl[] = {"a layer name has a control character", NULL};
        expect_layer(p, longname, FP4_ERR_INVALID_ARG, w_long, "prefix too long for its names");
        memset(longname, 'x', 150);
        longname[150] = '\0';
        expect_layer(p, longname, FP4_ERR_INVALID_ARG, NULL, "prefix too long");
        expect_layer(p, "model\nlayers", FP4_ERR_INVALID_ARG, w_ctrl, "control character");
        expect_layer(p, "bad\xff", FP4_ERR_INVALID_ARG, NULL, "not UTF-8");
    }
    fuzz_layer(p, LAYER1);
    CHECK(fp4_nvfp4_load_layer(NULL, LAYER0, &m, NULL, &e) == FP4_ERR_INVALID_ARG);
    CHECK(fp4_nvfp4_load_layer(p, LAYER0, NULL, NULL, &e) == FP4_ERR_INVALID_ARG);
    fp4_matrix_free(&q0);
    fp4_matrix_free(&q1);
}

/* Scale bytes and global scales that are no scales are refused at load,
 * naming the tensor (and the scale's place); 0x80 (-0) is zero and kept. */
static void test_nvfp4_bad_scales(void)
{
    TMP_PATH(p, "scales.safetensors");
    fp4_matrix q0, q1;
    fp4_tensor ts[8];
    fp4_err e = {FP4_OK, ""};
    float x[6 * 64], gs0, gs1, is1 = 0.5f;
    uint16_t bf16[6] = {0};
    int n;
    char at[160];
    test_rng rng = test_rng_seed(6);
    static const uint8_t nan_bytes[] = {0x7F, 0xFF};
    static const uint8_t negative_bytes[] = {0x81, 0xB5, 0xF8, 0xFE};

    for (int i = 0; i < 6 * 64; i++) x[i] = (float)test_rng_gauss(&rng);
    CHECK(fp4_quantize_f32(x, 6, 64, 0.0f, &q0, &e) == FP4_OK);
    CHECK(fp4_quantize_f32(x, 3, 32, 0.0f, &q1, &e) == FP4_OK);
    n = model_tensors(ts, &q0, &gs0, &q1, &gs1, &is1, bf16);

    for (size_t i = 0; i < sizeof nan_bytes; i++) {
        const char *words[] = {at, ": NaN", NULL};
        uint8_t keep = q0.scales[2 * 4 + 1];
        snprintf(at, sizeof at, "tensor '%s.weight_scale' has scale byte 0x%02X at [2, 1]", LAYER0,
                 nan_bytes[i]);
        q0.scales[2 * 4 + 1] = nan_bytes[i];
        CHECK(fp4_safetensors_write(p, ts, n, &e) == FP4_OK);
        expect_layer(p, LAYER0, FP4_ERR_FORMAT, words, "NaN scale");
        expect_layer(p, LAYER1, FP4_OK, NULL, "the other layer still loads");
        q0.scales[2 * 4 + 1] = keep;
    }
    for (size_t i = 0; i < sizeof negative_bytes; i++) {
        const char *words[] = {at, ": negative", NULL};
        uint8_t keep = q0.scales[5 * 4 + 3];
        snprintf(at, sizeof at, "tensor '%s.weight_scale' has scale byte 0x%02X at [5, 3]", LAYER0,
                 negative_bytes[i]);
        q0.scales[5 * 4 + 3] = negative_bytes[i];
        CHECK(fp4_safetensors_write(p, ts, n, &e) == FP4_OK);
        expect_layer(p, LAYER0, FP4_ERR_FORMAT, words, "negative scale");
        q0.scales[5 * 4 + 3] = keep;
    }
    q0.scales[0] = 0x80; /* -0 */
    CHECK(fp4_safetensors_write(p, ts, n, &e) == FP4_OK);
    expect_layer(p, LAYER0, FP4_OK, NULL, "-0 scale");
    q0.scales[0] = 0x00;

    {
        const float bad[] = {0.0f, -0.0f, -1.0f, INFINITY, -INFINITY, NAN};
        const char *w2[] = {"tensor '" LAYER0 ".weight_scale_2' is", "expected a finite positive number", NULL};
        const char *wi[] = {"tensor '" LAYER1 ".input_scale' is", "expected a finite positive number", NULL};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            float keep0 = gs0;
            gs0 = bad[i];
            CHECK(fp4_safetensors_write(p, ts, n, &e) == FP4_OK);
            expect_layer(p, LAYER0, FP4_ERR_FORMAT, w2, "bad weight_scale_2");
            gs0 = keep0;
            is1 = bad[i];
            CHECK(fp4_safetensors_write(p, ts, n, &e) == FP4_OK);
            expect_layer(p, LAYER1, FP4_ERR_FORMAT, wi, "bad input_scale");
            is1 = 0.5f;
        }
        gs0 = 1e-40f; /* tiny, subnormal, but a positive number */
        CHECK(fp4_safetensors_write(p, ts, n, &e) == FP4_OK);
        expect_layer(p, LAYER0, FP4_OK, NULL, "subnormal weight_scale_2");
    }
    fp4_matrix_free(&q0);
    fp4_matrix_free(&q1);
}

/* ---- limits and refusals -------------------------------------------------------- */

/* Peak resident set of this process so far, in KiB. */
static long peak_rss_kib(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

/* A safetensors file whose one tensor has an n-entry shape list, written in
 * pieces (the file is large; the test must not hold it in memory). */
static void write_st_long_shape(const char *path, long n)
{
    FILE *f = fopen(path, "wb");
    const char *head = "{\"t\":{\"dtype\":\"U8\",\"data_offsets\":[0,1],\"shape\":[1";
    const char *tail = "]}}";
    uint64_t hlen = strlen(head) + 2 * (uint64_t)(n - 1) + strlen(tail);
    unsigned char len[8];
    static char chunk[65536];
    CHECK(f != NULL);
    if (!f) return;
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(hlen >> (8 * i));
    for (size_t i = 0; i < sizeof chunk; i += 2) memcpy(chunk + i, ",1", 2);
    fwrite(len, 1, 8, f);
    fputs(head, f);
    for (long left = 2 * (n - 1); left > 0; left -= (long)sizeof chunk)
        fwrite(chunk, 1, left < (long)sizeof chunk ? (size_t)left : sizeof chunk, f);
    fputs(tail, f);
    fputc('z', f);
    CHECK(fclose(f) == 0);
}

/* Run first (before anything large is allocated) so that the peak RSS says
 * whether a refusal allocated: a 40-million-entry shape list (an 80 MB
 * header, under the 100 MB header cap) is refused by the scan, which reads
 * the header in small chunks. */
static void test_st_huge_shape(void)
{
    TMP_PATH(p, "huge_shape.safetensors");
    long before;
    fp4_tensor *ts = NULL;
    int c = 0;
    fp4_err e = {FP4_OK, ""};
    write_st_long_shape(p, 40 * 1000 * 1000);
    before = peak_rss_kib();
    CHECK(fp4_safetensors_read(p, &ts, &c, &e) == FP4_ERR_FORMAT);
    CHECK_MSG(strstr(e.msg, "list of more than 64 entries") != NULL, "huge shape: %s", e.msg);
    CHECK_MSG(peak_rss_kib() - before < 16 * 1024, "huge shape: peak RSS grew by %ld KiB",
              peak_rss_kib() - before);
    CHECK(ts == NULL && c == 0);
    remove(p);

    /* the same list, 65 entries: still refused; 64 passes the scan and meets
     * the "at most 4 dimensions" check */
    write_st_long_shape(p, 65);
    expect_st(p, FP4_ERR_FORMAT, "65-entry shape");
    write_st_long_shape(p, 64);
    expect_st(p, FP4_ERR_UNSUPPORTED, "64-entry shape");
    remove(p);
}

static void test_st_limits(void)
{
    TMP_PATH(p, "lim.safetensors");
    TMP_PATH(q, "lim.npy");
    char json[1024], deep[256];
    fp4_tensor t, *ts = NULL;
    int c = 0;
    fp4_err e = {FP4_OK, ""};
    unsigned char u8[4] = {1, 2, 3, 4};

    /* too deep: 9 nested lists */
    snprintf(deep, sizeof deep, "{\"t\":{\"dtype\":\"U8\",\"shape\":[[[[[[[[[1]]]]]]]]],\"data_offsets\":[0,1]}}");
    write_st_raw(p, UINT64_MAX, deep, 1);
    expect_st(p, FP4_ERR_FORMAT, "deep");
    CHECK(fp4_safetensors_read(p, &ts, &c, &e) == FP4_ERR_FORMAT && strstr(e.msg, "nested more than 8"));

    /* a .npy where safetensors is expected, and the reverse */
    memset(&t, 0, sizeof t);
    t.dtype = FP4_DT_U8;
    t.ndim = 1;
    t.shape[0] = 4;
    t.data = u8;
    t.nbytes = 4;
    snprintf(t.name, sizeof t.name, "w");
    CHECK(fp4_npy_write(q, &t, &e) == FP4_OK);
    CHECK(fp4_safetensors_read(q, &ts, &c, &e) == FP4_ERR_FORMAT);
    CHECK_MSG(strstr(e.msg, "this is a .npy file, not safetensors") != NULL, "npy as st: %s", e.msg);
    CHECK(fp4_safetensors_write(p, &t, 1, &e) == FP4_OK);
    {
        fp4_tensor r;
        CHECK(fp4_npy_read(p, &r, &e) == FP4_ERR_FORMAT);
        CHECK_MSG(strstr(e.msg, "this is a .safetensors file, not .npy") != NULL, "st as npy: %s", e.msg);
        CHECK(tensor_empty(&r));
    }

    /* a NUL inside a name (\u0000) would cut it short: refused */
    snprintf(json, sizeof json, "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}");
    write_st_raw(p, UINT64_MAX, json, 1);
    expect_st(p, FP4_ERR_FORMAT, "NUL in a name");

    /* from memory, the same parser: a valid file and a cut one */
    {
        size_t n = 0;
        unsigned char *raw;
        CHECK(fp4_safetensors_write(p, &t, 1, &e) == FP4_OK);
        raw = read_bytes(p, &n);
        CHECK(raw != NULL);
        if (raw) {
            CHECK(fp4_safetensors_parse(raw, n, "mem", &ts, &c, &e) == FP4_OK && c == 1 &&
                  memcmp(ts[0].data, u8, 4) == 0);
            if (ts) {
                fp4_tensor_free(&ts[0]);
                free(ts);
                ts = NULL;
            }
            CHECK(fp4_safetensors_parse(raw, n - 1, "mem", &ts, &c, &e) == FP4_ERR_FORMAT && ts == NULL);
            free(raw);
        }
        CHECK(fp4_npy_write(q, &t, &e) == FP4_OK);
        raw = read_bytes(q, &n);
        CHECK(raw != NULL);
        if (raw) {
            fp4_tensor r;
            CHECK(fp4_npy_parse(raw, n, "mem", &r, &e) == FP4_OK && r.nbytes == 4);
            fp4_tensor_free(&r);
            CHECK(fp4_npy_parse(raw, n - 1, "mem", &r, &e) == FP4_ERR_FORMAT && tensor_empty(&r));
            free(raw);
        }
    }
    remove(p);
    remove(q);
}

/* The reader and the writer agree on names: the writer takes exactly the
 * names fp4_tensor_name_problem allows, and the reader refuses a file that
 * holds any other name (written by hand). */
static void test_st_names(void)
{
    TMP_PATH(p, "names.safetensors");
    static const char *const good[] = {"weight", "model.layers.0.mlp.w1", "caf\xc3\xa9", "\xe2\x82\xac/x",
                                       "a b"};
    /* raw name bytes, and the same name as JSON text for the hand-made file */
    static const char *const bad[][2] = {
        {"", ""},
        {"bad\xff", "bad\xff"},
        {"\xc0\xaf", "\xc0\xaf"},       /* an overlong '/' */
        {"\xed\xa0\x80", "\xed\xa0\x80"}, /* an encoded surrogate */
        {"tab\there", "tab\\there"},
        {"ctl\x01", "ctl\\u0001"},
    };
    unsigned char byte = 7;
    fp4_tensor t;
    fp4_err e = {FP4_OK, ""};
    char json[512], longname[FP4_TENSOR_NAME_LEN + 8];

    memset(&t, 0, sizeof t);
    t.dtype = FP4_DT_U8;
    t.ndim = 1;
    t.shape[0] = 1;
    t.data = &byte;
    t.nbytes = 1;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        fp4_tensor *ts = NULL;
        int c = 0;
        CHECK_MSG(fp4_tensor_name_problem(good[i]) == NULL, "good name %zu", i);
        snprintf(t.name, sizeof t.name, "%s", good[i]);
        CHECK_MSG(fp4_safetensors_write(p, &t, 1, &e) == FP4_OK, "write good %zu: %s", i, e.msg);
        CHECK_MSG(fp4_safetensors_read(p, &ts, &c, &e) == FP4_OK && c == 1 &&
                  strcmp(ts[0].name, good[i]) == 0, "read good %zu: %s", i, e.msg);
        if (ts) {
            fp4_tensor_free(&ts[0]);
            free(ts);
        }
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(fp4_tensor_name_problem(bad[i][0]) != NULL, "bad name %zu", i);
        snprintf(t.name, sizeof t.name, "%s", bad[i][0]);
        CHECK_MSG(fp4_safetensors_write(p, &t, 1, &e) == FP4_ERR_INVALID_ARG && strstr(e.msg, "tensor name"),
                  "write bad %zu: %s", i, e.msg);
        snprintf(json, sizeof json, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                 bad[i][1]);
        write_st_raw(p, UINT64_MAX, json, 1);
        expect_st(p, FP4_ERR_FORMAT, "bad name");
    }
    /* __metadata__ is the header's, never a tensor's */
    CHECK(fp4_tensor_name_problem("__metadata__") != NULL);
    snprintf(t.name, sizeof t.name, "__metadata__");
    CHECK(fp4_safetensors_write(p, &t, 1, &e) == FP4_ERR_INVALID_ARG);
    /* 127 bytes is the longest name; 128 is refused by both */
    memset(longname, 'n', sizeof longname);
    longname[FP4_TENSOR_NAME_LEN - 1] = '\0';
    CHECK(fp4_tensor_name_problem(longname) == NULL);
    longname[FP4_TENSOR_NAME_LEN - 1] = 'n';
    longname[FP4_TENSOR_NAME_LEN] = '\0';
    CHECK(fp4_tensor_name_problem(longname) != NULL);
    memcpy(t.name, longname, sizeof t.name); /* unterminated */
    CHECK(fp4_safetensors_write(p, &t, 1, &e) == FP4_ERR_INVALID_ARG);
    remove(p);
}

/* UTF-8 validity (RFC 3629) and the '?' replacement of the JSON writer. */
static void test_utf8(void)
{
    char s[16];
    CHECK(fp4_utf8_valid("", 0) && fp4_utf8_valid("abc", 3));
    CHECK(fp4_utf8_valid("\xc2\x80\xdf\xbf", 4));                 /* U+0080, U+07FF */
    CHECK(fp4_utf8_valid("\xe0\xa0\x80\xef\xbf\xbf", 6));         /* U+0800, U+FFFF */
    CHECK(fp4_utf8_valid("\xf0\x90\x80\x80\xf4\x8f\xbf\xbf", 8)); /* U+10000, U+10FFFF */
    CHECK(!fp4_utf8_valid("\x80", 1) && !fp4_utf8_valid("\xc1\xbf", 2)); /* stray, overlong */
    CHECK(!fp4_utf8_valid("\xe0\x9f\xbf", 3) && !fp4_utf8_valid("\xed\xa0\x80", 3));
    CHECK(!fp4_utf8_valid("\xf4\x90\x80\x80", 4) && !fp4_utf8_valid("\xf5\x80\x80\x80", 4));
    CHECK(!fp4_utf8_valid("\xe2\x82", 2) && !fp4_utf8_valid("\xff", 1));
    memcpy(s, "a\xff\xe2\x82\xac\xe2\x82", 8);
    CHECK(fp4_utf8_sanitize(s, 8) == 3 && memcmp(s, "a?\xe2\x82\xac??", 8) == 0);
}

/* Spec files: the line limit holds while reading, labels must be UTF-8, and
 * a list has at most FP4_MAX_CASES cases. */
static void test_spec_limits(void)
{
    TMP_PATH(p, "long.spec");
    fp4_case_list l;
    fp4_err e = {FP4_OK, ""};
    FILE *f;
    char *big;
    memset(&l, 0, sizeof l);

    /* an 8 MB line: refused at byte 4097, with a short message */
    f = fopen(p, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("16 2048 6144 ok\n", f);
        for (int i = 0; i < 8 * 1024; i++) fputs("16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 "
                                                 "16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 ", f);
        fputs("\n", f);
        CHECK(fclose(f) == 0);
    }
    CHECK(fp4_cases_from_spec(&l, p, &e) == FP4_ERR_FORMAT);
    CHECK_MSG(strstr(e.msg, "long.spec:2: line too long (more than 4096 bytes)") != NULL, "%s", e.msg);
    fp4_cases_free(&l);

    /* exactly 4096 bytes (plus the newline) is fine */
    big = malloc(FP4_SPEC_LINE_MAX + 2);
    CHECK(big != NULL);
    if (big) {
        memset(big, ' ', FP4_SPEC_LINE_MAX);
        memcpy(big, "1 8 16 edge", 11);
        big[FP4_SPEC_LINE_MAX] = '\n';
        CHECK_MSG(fp4_cases_parse_spec(&l, big, FP4_SPEC_LINE_MAX + 1, "edge", &e) == FP4_OK && l.count == 1,
                  "4096: %s", e.msg);
        fp4_cases_free(&l);
        big[FP4_SPEC_LINE_MAX] = ' ';
        big[FP4_SPEC_LINE_MAX + 1] = '\n';
        CHECK(fp4_cases_parse_spec(&l, big, FP4_SPEC_LINE_MAX + 2, "edge", &e) == FP4_ERR_FORMAT);
        fp4_cases_free(&l);
        free(big);
    }

    /* a NULL list or preset name is an error, not a crash; no experts is not a division */
    CHECK(fp4_cases_parse_shapes(NULL, "1x1x16", &e) == FP4_ERR_INVALID_ARG);
    CHECK(fp4_cases_add(NULL, 1, 1, 16, NULL, &e) == FP4_ERR_INVALID_ARG);
    CHECK(fp4_cases_from_preset(&l, NULL, &e) == FP4_ERR_INVALID_ARG);
    CHECK(fp4_moe_tokens_per_expert(512, 8, 0) == 1 && fp4_moe_tokens_per_expert(512, 8, 256) == 16);

    /* labels: valid UTF-8, no control characters, under 64 bytes */
    CHECK(fp4_cases_parse_spec(&l, "1 8 16 caf\xc3\xa9\n", 13, "s", &e) == FP4_OK &&
          strcmp(l.items[0].label, "caf\xc3\xa9") == 0);
    fp4_cases_free(&l);
    CHECK(fp4_cases_parse_spec(&l, "1 8 16 bad\xff\n", 12, "s", &e) == FP4_ERR_INVALID_ARG);
    CHECK_MSG(strstr(e.msg, "s:1: a label is not valid UTF-8") != NULL, "%s", e.msg);
    fp4_cases_free(&l);
    CHECK(fp4_cases_parse_spec(&l, "1 8 16 a\x01\n", 10, "s", &e) == FP4_ERR_INVALID_ARG &&
          strstr(e.msg, "control character"));
    fp4_cases_free(&l);
    CHECK(fp4_cases_parse_spec(&l, "1 8 16 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", 72, "s",
                               &e) == FP4_ERR_INVALID_ARG && strstr(e.msg, "longer than 63 bytes"));
    fp4_cases_free(&l);
    CHECK(fp4_cases_add(&l, 1, 8, 16, "\xe2\x82", &e) == FP4_ERR_INVALID_ARG && l.count == 0);
    fp4_cases_free(&l);

    /* at most FP4_MAX_CASES cases */
    {
        size_t n = (size_t)(FP4_MAX_CASES + 1) * 7;
        char *text = malloc(n);
        CHECK(text != NULL);
        if (text) {
            for (size_t i = 0; i < n; i += 7) memcpy(text + i, "1 8 16\n", 7);
            CHECK(fp4_cases_parse_spec(&l, text, n, "many", &e) == FP4_ERR_INVALID_ARG);
            CHECK_MSG(strstr(e.msg, "more than 100000 cases") != NULL && l.count == FP4_MAX_CASES, "%s",
                      e.msg);
            fp4_cases_free(&l);
            free(text);
        }
    }
    remove(p);
}

/* An empty tensor whose other dimensions multiply past 2^64 is written and
 * read back: a zero dimension makes it 0 in the readers as in fp4_tensor_numel. */
static void test_empty_huge_dims(void)
{
    fp4_tensor t, *r = NULL, back;
    fp4_err e;
    int c = 0;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "empty");
    t.dtype = FP4_DT_F32;
    t.ndim = 3;
    t.shape[0] = (int64_t)1 << 40;
    t.shape[1] = (int64_t)1 << 40;
    t.shape[2] = 0;
    CHECK(fp4_tensor_numel(&t) == 0);
    CHECK(fp4_safetensors_write(tmp_path("empty.safetensors"), &t, 1, &e) == FP4_OK);
    CHECK_MSG(fp4_safetensors_read(tmp_path("empty.safetensors"), &r, &c, &e) == FP4_OK && c == 1 &&
                  r[0].nbytes == 0 && r[0].shape[1] == t.shape[1],
              "%s", e.msg);
    for (int i = 0; i < c; i++) fp4_tensor_free(&r[i]);
    free(r);
    CHECK(fp4_npy_write(tmp_path("empty.npy"), &t, &e) == FP4_OK);
    CHECK_MSG(fp4_npy_read(tmp_path("empty.npy"), &back, &e) == FP4_OK && back.nbytes == 0 && back.ndim == 3,
              "%s", e.msg);
    fp4_tensor_free(&back);
}

int main(void)
{
    g_verbose = getenv("FP4_TEST_VERBOSE") != NULL;
    snprintf(g_dir, sizeof g_dir, "/tmp/fp4_test_io.XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_st_huge_shape(); /* first: it checks the peak RSS */
    test_dtype_helpers();
    test_npy_roundtrip();
    test_npy_header_text();
    test_npy_parse_variants();
    test_npy_truncated();
    test_npy_matrix_f32();
    test_st_roundtrip();
    test_st_bad();
    test_nvfp4();
    test_nvfp4_layers();
    test_nvfp4_bad_scales();
    test_st_limits();
    test_st_names();
    test_utf8();
    test_spec_limits();
    test_empty_huge_dims();
    cleanup_dir();
    return check_finish("test_io");
}
