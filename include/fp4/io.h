/* fp4bench: tensors in files (.npy and .safetensors).
 *
 * .npy: version 1.0-3.0, C order, little-endian; dtypes '<f4', '<f2', '|u1',
 *       and bf16 written by ml_dtypes (descr '<V2' or '|V2', always read as
 *       bf16: no other 2-byte void type is meaningful here).
 * .safetensors: 8-byte little-endian header length, a JSON header (parsed with
 *       cJSON), then the data; dtypes U8, F8_E4M3, F32, F16, BF16.
 * Limits (checked before anything is allocated for them; docs/FORMAT.md):
 *       .npy header <= 1 MiB; safetensors header <= 100,000,000 bytes, JSON
 *       nesting <= FP4_ST_MAX_DEPTH, arrays <= FP4_ST_MAX_ARRAY entries, at most
 *       FP4_ST_MAX_VALUES JSON values in all; tensor names as
 *       fp4_tensor_name_problem says.
 * NVFP4 checkpoints follow ModelOpt: `weight` U8 [N, K/2], `weight_scale`
 * F8_E4M3 [N, K/16] (plain row-major), `weight_scale_2` F32 [] (decode scale),
 * optional `input_scale` F32 []; in a whole model's checkpoint each layer's
 * names carry its prefix (`model.layers.3.mlp.experts.7.down_proj.weight`). */
#ifndef FP4_IO_H
#define FP4_IO_H

#include <stddef.h>
#include <stdint.h>

#include "fp4/format.h"
#include "fp4/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fp4_dtype {
    FP4_DT_F32 = 0,
    FP4_DT_F16 = 1,
    FP4_DT_BF16 = 2,
    FP4_DT_U8 = 3,
    FP4_DT_F8_E4M3 = 4,
    FP4_DT_COUNT
} fp4_dtype;

#define FP4_MAX_DIMS 4
#define FP4_TENSOR_NAME_LEN 128 /* a tensor's name, with its NUL */

/* Safetensors header limits, enforced by a scan of the header text before
 * cJSON builds a tree of it (a tree costs about 64 bytes per value). */
#define FP4_ST_MAX_DEPTH 8          /* a real header nests 3 deep */
#define FP4_ST_MAX_ARRAY 64         /* shape and data_offsets are short lists */
#define FP4_ST_MAX_VALUES (1 << 21) /* about 250,000 tensors */

/* A dense tensor in host memory; owns data when filled by a reader. */
typedef struct fp4_tensor {
    char name[FP4_TENSOR_NAME_LEN];
    fp4_dtype dtype;
    int ndim;                      /* 0 for a scalar */
    int64_t shape[FP4_MAX_DIMS];
    void *data;
    size_t nbytes;
} fp4_tensor;

size_t fp4_dtype_size(fp4_dtype t);
const char *fp4_dtype_name(fp4_dtype t); /* safetensors spelling: "F32" ... */
int64_t fp4_tensor_numel(const fp4_tensor *t);
void fp4_tensor_free(fp4_tensor *t);

/* Read a .npy file (float32, float16 or bf16 as described above; u8 too). */
fp4_status fp4_npy_read(const char *path, fp4_tensor *out, fp4_err *err);
/* The same from the len bytes at buf (a whole file's content); name is used
 * in messages. */
fp4_status fp4_npy_parse(const void *buf, size_t len, const char *name, fp4_tensor *out,
                         fp4_err *err);
/* Write t as .npy (F32 '<f4', F16 '<f2', U8 '|u1'; BF16 as '<V2'). */
fp4_status fp4_npy_write(const char *path, const fp4_tensor *t, fp4_err *err);

/* Read every tensor of a .safetensors file; *out is a malloc'ed array of
 * *count tensors, free each with fp4_tensor_free and the array with free(). */
fp4_status fp4_safetensors_read(const char *path, fp4_tensor **out, int *count,
                                fp4_err *err);
/* The same from the len bytes at buf (a whole file's content); name is used
 * in messages. */
fp4_status fp4_safetensors_parse(const void *buf, size_t len, const char *name, fp4_tensor **out,
                                 int *count, fp4_err *err);
/* As fp4_safetensors_read, but only the data of the tensors named in
 * want[0..nwant) is read; every other tensor comes with its name, dtype, shape
 * and nbytes (checked as always) and data NULL. One layer of a checkpoint of
 * many gigabytes costs the bytes of that layer. A wanted name the file lacks
 * is no error (fp4_tensor_find says what is there); nwant 0: headers only. */
fp4_status fp4_safetensors_read_some(const char *path, const char *const *want, int nwant,
                                     fp4_tensor **out, int *count, fp4_err *err);
fp4_status fp4_safetensors_write(const char *path, const fp4_tensor *tensors, int count,
                                 fp4_err *err);
/* Why name cannot be a tensor name, or NULL when it can. The one rule for
 * the safetensors reader and writer: 1 to FP4_TENSOR_NAME_LEN - 1 bytes,
 * valid UTF-8, no control characters (so no NUL), not "__metadata__". */
const char *fp4_tensor_name_problem(const char *name);

/* 1 when s[0..len) is well-formed UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), else 0. */
int fp4_utf8_valid(const char *s, size_t len);
/* Replace every byte of s[0..len) that is not part of a well-formed UTF-8
 * sequence by '?', in place (lengths do not change); returns how many. */
size_t fp4_utf8_sanitize(char *s, size_t len);

/* The tensor of that name in an array, or NULL. */
const fp4_tensor *fp4_tensor_find(const fp4_tensor *tensors, int count, const char *name);

/* Save an NVFP4 matrix as a ModelOpt-style checkpoint (input_scale negative or -0:
 * omitted). What fp4_nvfp4_load would refuse is FP4_ERR_INVALID_ARG: a global or
 * input scale that is not finite and positive, a NaN or negative scale byte. */
fp4_status fp4_nvfp4_save(const char *path, const fp4_matrix *m, float input_scale,
                          fp4_err *err);
/* Load one; checks every dtype and shape and says which tensor is wrong.
 * The same as fp4_nvfp4_load_layer(path, NULL, m, NULL, err). */
fp4_status fp4_nvfp4_load(const char *path, fp4_matrix *m, fp4_err *err);
/* Load the layer named prefix: the tensors `<prefix>.weight`,
 * `<prefix>.weight_scale`, `<prefix>.weight_scale_2` and, if present,
 * `<prefix>.input_scale` (prefix NULL or "": the bare names). Only their data
 * is read. Refused, naming the tensor (FP4_ERR_FORMAT): a scale byte that is
 * NaN (0x7F, 0xFF) or negative (sign bit set; 0x80, -0, is zero either way
 * and accepted); a weight_scale_2 or input_scale that is NaN, infinite or
 * <= 0. A missing tensor (FP4_ERR_NOT_FOUND) is named, with a few of the
 * names the file has under the prefix, or else its NVFP4 layers nearest to
 * the prefix. FP4_ERR_INVALID_ARG: prefix cannot begin a tensor name (the
 * rule of fp4_tensor_name_problem, for `<prefix>.weight_scale_2`).
 * *input_scale (if not NULL) gets input_scale, or -1 when there is none. On
 * failure *m is all zero. */
fp4_status fp4_nvfp4_load_layer(const char *path, const char *prefix, fp4_matrix *m,
                                float *input_scale, fp4_err *err);

/* Read a [rows, cols] matrix of int32 or int64 ('<i4', '<i8', C order) from
 * .npy into int32 (*ids malloc'ed), such as a routing's expert ids; a value
 * outside int32 is an error that names its place. The file is read as
 * strictly as fp4_npy_read reads (the whole header dict, no bytes after the
 * data). */
fp4_status fp4_npy_read_ids(const char *path, int32_t **ids, int64_t *rows, int64_t *cols, fp4_err *err);

/* Read a [rows, cols] matrix of any float dtype from .npy into floats
 * (*data malloc'ed). */
fp4_status fp4_npy_read_matrix_f32(const char *path, float **data, int64_t *rows,
                                   int64_t *cols, fp4_err *err);

#ifdef __cplusplus
}
#endif
#endif
