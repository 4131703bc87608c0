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
