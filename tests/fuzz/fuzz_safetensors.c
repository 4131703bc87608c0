/* libFuzzer target: fp4_safetensors_parse on arbitrary bytes. Every tensor
 * it returns must have a name the writer accepts (the reader and the writer
 * share one rule) and bytes that match its shape; everything is freed. */
#include <stdint.h>
#include <stdlib.h>

#include "fp4/io.h"

/* libFuzzer's entry point (declared here: no header declares it). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fp4_tensor *ts = NULL;
    int n = 0;
    fp4_err err;
    if (fp4_safetensors_parse(data, size, "fuzz.safetensors", &ts, &n, &err) == FP4_OK) {
        for (int i = 0; i < n; i++) {
            int64_t numel = fp4_tensor_numel(&ts[i]);
            if (fp4_tensor_name_problem(ts[i].name)) abort();
            if (numel < 0 || (size_t)numel * fp4_dtype_size(ts[i].dtype) != ts[i].nbytes) abort();
        }
        for (int i = 0; i < n; i++) fp4_tensor_free(&ts[i]);
        free(ts);
    } else if (ts || n) {
        abort(); /* a failed read leaves nothing behind */
    }
    return 0;
}
