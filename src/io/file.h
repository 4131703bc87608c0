/* File helpers shared by the .npy and .safetensors readers and by every
 * writer of an output file (reports, tensors). */
#ifndef FP4_IO_FILE_H
#define FP4_IO_FILE_H

#include <stdio.h>

#include "fp4/status.h"

/* Open path for reading and get its size; the file must be a regular file.
 * On failure *fp is NULL and err says why (FP4_ERR_IO). */
fp4_status fp4_io_open_sized(const char *path, FILE **fp, long long *size, fp4_err *err);

/* Read exactly n bytes at the current position; the caller has checked that
 * the file holds them, so a short read is FP4_ERR_FORMAT ("truncated") and a
 * read error FP4_ERR_IO. */
fp4_status fp4_io_read_exact(FILE *f, void *buf, size_t n, const char *path, fp4_err *err);

/* Where a reader's bytes come from: an open file or a buffer in memory, so
 * one parser serves fp4_*_read (paths) and fp4_*_parse (buffers, the fuzz
 * targets). size is known up front in both cases. */
typedef struct fp4_io_src {
    FILE *f;                      /* NULL: read from mem */
    const unsigned char *mem;
    size_t pos;                   /* position in mem */
    long long size;               /* bytes in the file or buffer */
    const char *name;             /* for messages */
} fp4_io_src;

/* Read exactly n bytes at the current position (as fp4_io_read_exact). */
fp4_status fp4_io_src_read(fp4_io_src *s, void *buf, size_t n, fp4_err *err);
/* Go to offset off (0 <= off <= size). */
fp4_status fp4_io_src_seek(fp4_io_src *s, long long off, fp4_err *err);

/* An output file being written (fp4_io_out_open .. fp4_io_out_finish).
 *
 * A symlink is followed: the file it points to is written and the link kept.
 * A regular file, or a path that does not exist yet, is written to a new
 * temporary file in the same folder (mkstemp) and renamed over the target
 * when complete, so a reader never sees half a file and a failed write
 * leaves an existing file as it was. Anything else that exists (a device, a
 * FIFO) is written straight into, since renaming would replace it with a
 * regular file. Nothing but the temporary file is ever removed. */
typedef struct fp4_io_out {
    FILE *f;            /* write here */
    const char *path;   /* as given, for messages */
    char *target;       /* the file written in the end: path with symlinks followed */
    char *tmp;          /* the temporary renamed onto target; NULL: writing into target */
} fp4_io_out;

/* Open path for writing as above. On failure out->f is NULL, nothing was
 * created, and err says why (FP4_ERR_IO or FP4_ERR_NOMEM). */
fp4_status fp4_io_out_open(fp4_io_out *out, const char *path, fp4_err *err);

/* Finish what fp4_io_out_open began: when st is FP4_OK, flush, check for
 * write errors, sync and close the file and rename the temporary into place;
 * otherwise (or when any of that fails) close and remove the temporary.
 * Returns st when it is an error (err untouched), else the outcome. */
fp4_status fp4_io_out_finish(fp4_io_out *out, fp4_status st, fp4_err *err);

/* Write len bytes of text to path through fp4_io_out. */
fp4_status fp4_io_write_text(const char *path, const char *text, size_t len, fp4_err *err);

#endif
