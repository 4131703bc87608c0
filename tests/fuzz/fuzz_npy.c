/* libFuzzer target: fp4_npy_parse on arbitrary bytes. A parsed tensor must
 * be consistent (its bytes match its shape and dtype); everything is freed. */
#include <stdint.h>
#include <stdlib.h>

#include "fp4/io.h"

/* libFuzzer's entry point (declared here: no header declares it). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fp4_tensor t;
    fp4_err err;
    if (fp4_npy_parse(data, size, "fuzz.npy", &t, &err) == FP4_OK) {
        int64_t numel = fp4_tensor_numel(&t);
        if (numel < 0 || (size_t)numel * fp4_dtype_size(t.dtype) != t.nbytes || !t.data) abort();
    }
    fp4_tensor_free(&t);
    return 0;
}
