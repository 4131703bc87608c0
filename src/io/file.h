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

#endif
