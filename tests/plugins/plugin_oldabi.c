/* A plugin built against another ABI version: the loader must refuse it. */
#include <stddef.h>

#include "fp4/backend.h"

static const fp4_backend_ops old_ops = {.api_version = 0, .name = "plugin-old"};

const fp4_backend_ops *fp4_backend_entry(void);
const fp4_backend_ops *fp4_backend_entry(void)
{
    return &old_ops;
}
