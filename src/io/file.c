/* File helpers shared by the readers and the writers of files (see file.h). */
#include "io/file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* Longest chain of symlinks followed, as the Linux kernel's own limit. */
#define FP4_IO_MAX_LINKS 40

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

/* ---- writing ------------------------------------------------------------------ */

/* The text of the symlink at path, malloc'ed, or NULL with errno set. */
static char *read_link(const char *path)
{
    size_t cap = 256;
    for (;;) {
        char *buf = malloc(cap);
        ssize_t n;
        if (!buf) return NULL;
        n = readlink(path, buf, cap);
        if (n < 0) {
            free(buf);
            return NULL;
        }
        if ((size_t)n < cap) {
            buf[n] = '\0';
            return buf;
        }
        free(buf); /* may have been cut short: try a larger buffer */
        if (cap > ((size_t)1 << 20)) {
            errno = ENAMETOOLONG;
            return NULL;
        }
        cap *= 2;
    }
}

/* a relative to the folder holding b, malloc'ed (a itself when absolute or
 * b has no folder), or NULL when out of memory. */
static char *beside(const char *b, const char *a)
{
    const char *slash = strrchr(b, '/');
    size_t dlen = (a[0] == '/' || !slash) ? 0 : (size_t)(slash - b) + 1, alen = strlen(a);
    char *out = malloc(dlen + alen + 1);
    if (!out) return NULL;
    memcpy(out, b, dlen);
    memcpy(out + dlen, a, alen + 1);
    return out;
}

/* Follow symlinks from path to the file they name: *target (malloc'ed) and,
 * when it exists (*exists), its stat in *st. A dangling link names a file to
 * be created, as open(2) would create it. */
static fp4_status follow_links(const char *path, char **target, struct stat *st, int *exists, fp4_err *err)
{
    char *cur = strdup(path);
    *target = NULL;
    *exists = 0;
    for (int hops = 0; cur; hops++) {
        char *link, *next;
        if (lstat(cur, st) != 0) {
            if (errno != ENOENT) {
                int e = errno;
                free(cur);
                return fp4_fail(err, FP4_ERR_IO, "cannot create %s: %s", path, strerror(e));
            }
            *target = cur;
            return FP4_OK;
        }
        if (!S_ISLNK(st->st_mode)) {
            *exists = 1;
            *target = cur;
            return FP4_OK;
        }
        if (hops == FP4_IO_MAX_LINKS) {
            free(cur);
            return fp4_fail(err, FP4_ERR_IO, "cannot create %s: %s", path, strerror(ELOOP));
        }
        link = read_link(cur);
        if (!link) {
            int e = errno;
            free(cur);
            return fp4_fail(err, FP4_ERR_IO, "cannot read the symlink %s: %s", path, strerror(e));
        }
        next = beside(cur, link);
        free(link);
        free(cur);
        cur = next;
    }
    return fp4_fail(err, FP4_ERR_NOMEM, "out of memory writing %s", path);
}

/* The process's file-creation mask: umask() reads it only by setting it, so
 * it is set back at once. */
static mode_t creation_mask(void)
{
    mode_t mask = umask(077);
    umask(mask);
    return mask;
}

/* Create the temporary for target beside it ("dir/.name.XXXXXX") and open it
 * as out->f with out->tmp set. mode: the permissions it will have once
 * renamed. */
static fp4_status open_temporary(fp4_io_out *out, mode_t mode, fp4_err *err)
{
    const char *slash = strrchr(out->target, '/');
    size_t dlen = slash ? (size_t)(slash - out->target) + 1 : 0, blen = strlen(out->target) - dlen;
    static const char suffix[] = ".XXXXXX";
    int fd, e;
    out->tmp = malloc(dlen + 1 + blen + sizeof suffix);
    if (!out->tmp) return fp4_fail(err, FP4_ERR_NOMEM, "out of memory writing %s", out->path);
    memcpy(out->tmp, out->target, dlen);
    out->tmp[dlen] = '.'; /* hidden: a half-written file is not mistaken for a result */
    memcpy(out->tmp + dlen + 1, out->target + dlen, blen);
    memcpy(out->tmp + dlen + 1 + blen, suffix, sizeof suffix);
    fd = mkstemp(out->tmp);
    if (fd < 0) {
        e = errno;
        free(out->tmp);
        out->tmp = NULL;
        return fp4_fail(err, FP4_ERR_IO, "cannot create %s: %s", out->path, strerror(e));
    }
    /* mkstemp makes it 0600; the finished file gets what fopen would give */
    if (fchmod(fd, mode) != 0 || !(out->f = fdopen(fd, "wb"))) {
        e = errno;
        close(fd);
        remove(out->tmp);
        free(out->tmp);
        out->tmp = NULL;
        return fp4_fail(err, FP4_ERR_IO, "cannot create %s: %s", out->path, strerror(e));
    }
    return FP4_OK;
}

fp4_status fp4_io_out_open(fp4_io_out *out, const char *path, fp4_err *err)
{
    struct stat st;
    int exists;
    fp4_status status;
    memset(out, 0, sizeof *out);
    out->path = path;
    if (!path || !path[0]) return fp4_fail(err, FP4_ERR_IO, "cannot create a file with an empty name");
    status = follow_links(path, &out->target, &st, &exists, err);
    if (status != FP4_OK) return status;
    if (exists && !S_ISREG(st.st_mode)) {
        /* a device or FIFO: renaming over it would replace it, so write into it */
        out->f = fopen(out->target, "wb");
        if (out->f) return FP4_OK;
        status = fp4_fail(err, FP4_ERR_IO, "cannot open %s for writing: %s", path, strerror(errno));
    } else if (exists && access(out->target, W_OK) != 0) {
        /* a file its owner made read-only is refused, as writing into it would be */
        status = fp4_fail(err, FP4_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    } else {
        status = open_temporary(out, exists ? (st.st_mode & 07777) : (0666 & ~creation_mask()), err);
        if (status == FP4_OK) return FP4_OK;
    }
    free(out->target);
    out->target = NULL;
    return status;
}

fp4_status fp4_io_out_finish(fp4_io_out *out, fp4_status st, fp4_err *err)
{
    if (out->f) {
        if (st == FP4_OK && (fflush(out->f) != 0 || ferror(out->f)))
            st = fp4_fail(err, FP4_ERR_IO, "cannot write %s: %s", out->path, strerror(errno));
        /* synced before the rename so that a crash leaves the old file or the new, not an empty one */
        if (st == FP4_OK && out->tmp && fsync(fileno(out->f)) != 0 && errno != EINVAL)
            st = fp4_fail(err, FP4_ERR_IO, "cannot sync %s: %s", out->path, strerror(errno));
        if (fclose(out->f) != 0 && st == FP4_OK)
            st = fp4_fail(err, FP4_ERR_IO, "cannot write %s: %s", out->path, strerror(errno));
        out->f = NULL;
    } else if (st == FP4_OK) {
        st = fp4_fail(err, FP4_ERR_INTERNAL, "%s: not open for writing", out->path ? out->path : "?");
    }
    if (out->tmp) {
        if (st == FP4_OK && rename(out->tmp, out->target) != 0)
            st = fp4_fail(err, FP4_ERR_IO, "cannot write %s: cannot rename the temporary %s onto it: %s",
                          out->path, out->tmp, strerror(errno));
        if (st != FP4_OK) remove(out->tmp);
        free(out->tmp);
        out->tmp = NULL;
    }
    free(out->target);
    out->target = NULL;
    return st;
}

fp4_status fp4_io_write_text(const char *path, const char *text, size_t len, fp4_err *err)
{
    fp4_io_out out;
    fp4_status st = fp4_io_out_open(&out, path, err);
    if (st != FP4_OK) return st;
    if (len && fwrite(text, 1, len, out.f) != len)
        st = fp4_fail(err, FP4_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return fp4_io_out_finish(&out, st, err);
}
