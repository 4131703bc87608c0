/* A plugin whose backend takes a built-in backend's name: the loader must
 * refuse it, since rows are told apart by backend name. Complete otherwise,
 * so that the name is the only thing wrong with it. */
#include <stddef.h>

#include "fp4/backend.h"

static fp4_status clash_open(void **inst, fp4_err *err)
{
    *inst = NULL;
    return FP4_OK;
}

static void clash_close(void *inst)
{
}

static fp4_status clash_prepare(void *inst, const fp4_gemm_problem *p, int copies, void **plan,
                                fp4_err *err)
{
    *plan = NULL;
    return FP4_ERR_UNSUPPORTED;
}

static fp4_status clash_per_copy(void *plan, int copy, void *stream, fp4_err *err)
{
    return FP4_ERR_UNSUPPORTED;
}

static fp4_status clash_read_output(void *plan, int copy, float *d, fp4_err *err)
{
    return FP4_ERR_UNSUPPORTED;
}

static void clash_release(void *plan)
{
}

static const fp4_backend_ops clash_ops = {
    .api_version = FP4_BACKEND_API_VERSION,
    .name = "cpu-ref",
    .summary = "a plugin named like the built-in reference",
    .open = clash_open,
    .close = clash_close,
    .prepare = clash_prepare,
    .poison = clash_per_copy,
    .run = clash_per_copy,
    .read_output = clash_read_output,
    .release = clash_release,
};

const fp4_backend_ops *fp4_backend_entry(void);
const fp4_backend_ops *fp4_backend_entry(void)
{
    return &clash_ops;
}
