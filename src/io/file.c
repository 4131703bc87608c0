/* File helpers shared by the .npy and .safetensors readers (see file.h). */
#include "io/file.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

fp4_status fp4_io_open_sized(const char *path, FILE **fp, long long *size, fp4_err *err)
{
    struct stat st;
    FILE *f = fopen(path, "rb");
    *fp = NULL;
    if (!f) return fp4_fail(err, FP4_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fileno(f), &st) != 0) {
        int e = errno;
        fclose(f);
        return fp4_fail(err, FP4_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        fclose(f);
        return fp4_fail(err, FP4_ERR_IO, "%s: not a regular file", path);
    }
    *fp = f;
    *size = (long long)st.st_size;
    return FP4_OK;
}

fp4_status fp4_io_read_exact(FILE *f, void *buf, size_t n, const char *path, fp4_err *err)
{
    if (n == 0) return FP4_OK;
    if (fread(buf, 1, n, f) != n) {
        if (ferror(f))
            return fp4_fail(err, FP4_ERR_IO, "%s: read error: %s", path, strerror(errno));
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: truncated: the file ended while reading %zu bytes",
                        path, n);
    }
    return FP4_OK;
}

fp4_status fp4_io_src_read(fp4_io_src *s, void *buf, size_t n, fp4_err *err)
{
    if (s->f) return fp4_io_read_exact(s->f, buf, n, s->name, err);
    if (n > (size_t)s->size - s->pos)
        return fp4_fail(err, FP4_ERR_FORMAT, "%s: truncated: the data ended while reading %zu bytes",
                        s->name, n);
    if (n) memcpy(buf, s->mem + s->pos, n);
    s->pos += n;
    return FP4_OK;
}

fp4_status fp4_io_src_seek(fp4_io_src *s, long long off, fp4_err *err)
{
    if (off < 0 || off > s->size)
        return fp4_fail(err, FP4_ERR_INTERNAL, "%s: seek to %lld outside the %lld bytes", s->name, off,
                        s->size);
    if (!s->f) {
        s->pos = (size_t)off;
        return FP4_OK;
    }
    if (fseeko(s->f, (off_t)off, SEEK_SET) != 0)
        return fp4_fail(err, FP4_ERR_IO, "%s: cannot seek: %s", s->name, strerror(errno));
    return FP4_OK;
}
