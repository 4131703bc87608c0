/* The MoE backends compiled into libfp4 (moe_registry.c lists them). */
#ifndef FP4_MOE_BACKENDS_H
#define FP4_MOE_BACKENDS_H

#include "fp4/moe_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const fp4_moe_backend_ops fp4_moe_backend_cpu_ref;
#ifdef FP4_HAVE_CUDA
extern const fp4_moe_backend_ops fp4_moe_backend_cublas_bf16;
extern const fp4_moe_backend_ops fp4_moe_backend_cublaslt_fp8;
extern const fp4_moe_backend_ops fp4_moe_backend_loop_fp4;
extern const fp4_moe_backend_ops fp4_moe_backend_fp4_sm90;
#endif

#ifdef __cplusplus
}
#endif
#endif
