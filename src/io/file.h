/* File helpers shared by the .npy and .safetensors readers. */
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

#endif
