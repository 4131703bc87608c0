/* mkfile: write test fixtures for fp4bench's tests.
 *
 * Usage:
 *   mkfile npy-f32|npy-f16|npy-bf16 ROWS COLS SEED OUT
 *       a [ROWS, COLS] .npy of normal(0, 1) values from SEED (bf16 as '<V2')
 *   mkfile npy-u8 ROWS COLS SEED OUT      a [ROWS, COLS] .npy of random bytes
 *   mkfile npy-vec N SEED OUT             a 1-D float32 .npy of N values
 *   mkfile npy-raw DESCR FORTRAN ROWS COLS ITEMSIZE OUT
 *       a hand-made .npy with any descr (e.g. '>f4', '<f8') and fortran_order
 *       0 or 1, holding ROWS*COLS*ITEMSIZE zero bytes
 *   mkfile nvfp4 ROWS COLS SEED OUT [INPUT_SCALE]
 *       an NVFP4 checkpoint (.safetensors) of a quantized normal(0, 1) matrix
 *   mkfile truncate IN NBYTES OUT         the first NBYTES bytes of IN
 *   mkfile setbyte IN OFFSET VALUE OUT    IN with the byte at OFFSET set to VALUE
 *                                         (0-255; OFFSET < 0 counts from the end)
 * The same SEED gives the same values on every run. Exit status 0 on success,
 * 1 on a failure (with a message on stderr), 2 on a usage error. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp4/format.h"
#include "fp4/io.h"
#include "test_rng.h"

static void usage(void)
{
    fprintf(stderr,
            "usage: mkfile npy-f32|npy-f16|npy-bf16|npy-u8 ROWS COLS SEED OUT\n"
            "       mkfile npy-vec N SEED OUT\n"
            "       mkfile npy-raw DESCR FORTRAN ROWS COLS ITEMSIZE OUT\n"
            "       mkfile nvfp4 ROWS COLS SEED OUT [INPUT_SCALE]\n"
            "       mkfile truncate IN NBYTES OUT\n"
            "       mkfile setbyte IN OFFSET VALUE OUT\n");
}

/* Parse a whole decimal integer in [lo, hi]; -1 on error. */
static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v)
{
    char *end;
    long long x;
    errno = 0;
    x = strtoll(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi) {
        fprintf(stderr, "mkfile: bad number '%s' (want %lld..%lld)\n", s, (long long)lo, (long long)hi);
        return -1;
    }
    *v = x;
    return 0;
}

/* n normal(0, 1) floats from seed (the tests' generator), malloc'ed; NULL
 * when out of memory. */
static float *normals(size_t n, uint64_t seed)
{
    float *x = malloc(n ? n * sizeof *x : 1);
    test_rng r = test_rng_seed(seed);
    if (!x) return NULL;
    for (size_t i = 0; i < n; i++) x[i] = (float)test_rng_gauss(&r);
    return x;
}

/* The .npy commands with a generated payload. */
static int cmd_npy(const char *kind, int64_t rows, int64_t cols, uint64_t seed, int ndim, const char *out)
{
    fp4_tensor t;
    fp4_err e = {FP4_OK, ""};
    size_t n = (size_t)rows * (size_t)cols;
    float *x = NULL;
    int rc = 1;

    memset(&t, 0, sizeof t);
    t.ndim = ndim;
    t.shape[0] = ndim == 1 ? rows * cols : rows;
    t.shape[1] = cols;
    if (strcmp(kind, "npy-u8") == 0) {
        test_rng r = test_rng_seed(seed);
        t.dtype = FP4_DT_U8;
        t.nbytes = n;
        t.data = malloc(n ? n : 1);
        if (!t.data) goto oom;
        for (size_t i = 0; i < n; i++) ((uint8_t *)t.data)[i] = (uint8_t)(test_rng_u64(&r) >> 32);
    } else {
        x = normals(n, seed);
        if (!x) goto oom;
        if (strcmp(kind, "npy-f32") == 0 || strcmp(kind, "npy-vec") == 0) {
            t.dtype = FP4_DT_F32;
            t.data = x;
            x = NULL;
            t.nbytes = n * sizeof(float);
        } else {
            int bf = strcmp(kind, "npy-bf16") == 0;
            uint16_t *h = malloc(n ? n * 2 : 1);
            if (!h) goto oom;
            for (size_t i = 0; i < n; i++) h[i] = bf ? fp4_bf16_from_float(x[i]) : fp4_f16_from_float(x[i]);
            t.dtype = bf ? FP4_DT_BF16 : FP4_DT_F16;
            t.data = h;
            t.nbytes = n * 2;
        }
    }
    if (fp4_npy_write(out, &t, &e) != FP4_OK) {
        fprintf(stderr, "mkfile: %s\n", fp4_err_text(&e));
        goto done;
    }
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "mkfile: out of memory\n");
done:
    free(x);
    free(t.data);
    return rc;
}

/* A .npy with a free-form descr and fortran flag, zero data. */
static int cmd_npy_raw(const char *descr, int fortran, int64_t rows, int64_t cols, int64_t item,
                       const char *out)
{
    char hdr[256];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': %s, 'shape': (%lld, %lld), }",
                       descr, fortran ? "True" : "False", (long long)rows, (long long)cols);
    size_t pad, n = (size_t)rows * (size_t)cols * (size_t)item;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    FILE *f;
    int ok;
    if (len < 0 || len > 190) {
        fprintf(stderr, "mkfile: descr too long\n");
        return 2;
    }
    pad = (64 - (10 + (size_t)len + 1) % 64) % 64;
    memset(hdr + len, ' ', pad);
    hdr[(size_t)len + pad] = '\n';
    len += (int)pad + 1;
    pre[8] = (unsigned char)(len & 0xff);
    pre[9] = (unsigned char)(len >> 8);
    f = fopen(out, "wb");
    if (!f) {
        fprintf(stderr, "mkfile: %s: %s\n", out, strerror(errno));
        return 1;
    }
    ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)len, f) == (size_t)len;
    for (size_t i = 0; ok && i < n; i++) ok = fputc(0, f) != EOF;
    if (fclose(f) != 0 || !ok) {
        fprintf(stderr, "mkfile: %s: write error\n", out);
        return 1;
    }
    return 0;
}

/* An NVFP4 checkpoint of a quantized random matrix. */
static int cmd_nvfp4(int64_t rows, int64_t cols, uint64_t seed, const char *out, float input_scale)
{
    fp4_err e = {FP4_OK, ""};
    fp4_matrix m;
    float *x;
    int rc = 1;
    memset(&m, 0, sizeof m);
    if (fp4_check_dims(rows, cols, &e) != FP4_OK) {
        fprintf(stderr, "mkfile: %s\n", fp4_err_text(&e));
        return 2;
    }
    x = normals((size_t)rows * (size_t)cols, seed);
    if (!x) {
        fprintf(stderr, "mkfile: out of memory\n");
        return 1;
    }
    if (fp4_quantize_f32(x, rows, cols, 0.0f, &m, &e) != FP4_OK ||
        fp4_nvfp4_save(out, &m, input_scale, &e) != FP4_OK)
        fprintf(stderr, "mkfile: %s\n", fp4_err_text(&e));
    else
        rc = 0;
    fp4_matrix_free(&m);
    free(x);
    return rc;
}

/* Copy IN to OUT, keeping the first keep bytes (-1: all) and setting the
 * byte at offset at (if at >= 0) to val. */
static int cmd_copy(const char *in, int64_t keep, int64_t at, int neg_at, int val, const char *out)
{
    FILE *f = fopen(in, "rb"), *g = NULL;
    unsigned char *b = NULL;
    long sz;
    int rc = 1;
    if (!f) {
        fprintf(stderr, "mkfile: %s: %s\n", in, strerror(errno));
        return 1;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "mkfile: %s: cannot get its size\n", in);
        goto done;
    }
    b = malloc((size_t)sz + 1);
    if (!b || fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        fprintf(stderr, "mkfile: %s: read error\n", in);
        goto done;
    }
    if (keep > sz) {
        fprintf(stderr, "mkfile: %s has %ld bytes, fewer than %lld\n", in, sz, (long long)keep);
        goto done;
    }
    if (keep >= 0) sz = (long)keep;
    if (neg_at) at += sz;
    if (at >= sz || at < -1 || (neg_at && at < 0)) {
        fprintf(stderr, "mkfile: offset out of the file (%ld bytes)\n", sz);
        goto done;
    }
    if (at >= 0) b[at] = (unsigned char)val;
    g = fopen(out, "wb");
    if (!g || fwrite(b, 1, (size_t)sz, g) != (size_t)sz) {
        fprintf(stderr, "mkfile: %s: write error\n", out);
        goto done;
    }
    rc = 0;
done:
    if (g && fclose(g) != 0) rc = 1;
    free(b);
    fclose(f);
    return rc;
}

int main(int argc, char **argv)
{
    const int64_t big = (int64_t)1 << 40;
    int64_t a, b, c, d;
    const char *cmd = argc > 1 ? argv[1] : "";

    if (strncmp(cmd, "npy-", 4) == 0 && strcmp(cmd, "npy-vec") != 0 && strcmp(cmd, "npy-raw") != 0) {
        if (argc != 6 || (strcmp(cmd, "npy-f32") && strcmp(cmd, "npy-f16") && strcmp(cmd, "npy-bf16") &&
                          strcmp(cmd, "npy-u8"))) {
            usage();
            return 2;
        }
        if (parse_i64(argv[2], 0, big, &a) || parse_i64(argv[3], 0, big, &b) ||
            parse_i64(argv[4], 0, INT64_MAX, &c) || (a && b > big / a))
            return 2;
        return cmd_npy(cmd, a, b, (uint64_t)c, 2, argv[5]);
    }
    if (strcmp(cmd, "npy-vec") == 0 && argc == 5) {
        if (parse_i64(argv[2], 0, big, &a) || parse_i64(argv[3], 0, INT64_MAX, &c)) return 2;
        return cmd_npy(cmd, 1, a, (uint64_t)c, 1, argv[4]);
    }
    if (strcmp(cmd, "npy-raw") == 0 && argc == 8) {
        if (parse_i64(argv[3], 0, 1, &a) || parse_i64(argv[4], 0, 1 << 20, &b) ||
            parse_i64(argv[5], 0, 1 << 20, &c) || parse_i64(argv[6], 1, 16, &d) || b * c * d > (1 << 30))
            return 2;
        return cmd_npy_raw(argv[2], (int)a, b, c, d, argv[7]);
    }
    if (strcmp(cmd, "nvfp4") == 0 && (argc == 6 || argc == 7)) {
        float is = -1.0f;
        if (parse_i64(argv[2], 1, big, &a) || parse_i64(argv[3], 1, big, &b) ||
            parse_i64(argv[4], 0, INT64_MAX, &c) || b > big / a)
            return 2;
        if (argc == 7) {
            char *end;
            is = strtof(argv[6], &end);
            if (end == argv[6] || *end) {
                fprintf(stderr, "mkfile: bad INPUT_SCALE '%s'\n", argv[6]);
                return 2;
            }
        }
        return cmd_nvfp4(a, b, (uint64_t)c, argv[5], is);
    }
    if (strcmp(cmd, "truncate") == 0 && argc == 5) {
        if (parse_i64(argv[3], 0, INT64_MAX, &a)) return 2;
        return cmd_copy(argv[2], a, -1, 0, 0, argv[4]);
    }
    if (strcmp(cmd, "setbyte") == 0 && argc == 6) {
        if (parse_i64(argv[3], INT64_MIN + 1, INT64_MAX, &a) || parse_i64(argv[4], 0, 255, &b)) return 2;
        return cmd_copy(argv[2], -1, a, a < 0, (int)b, argv[5]);
    }
    usage();
    return 2;
}
