/* fp4-sm90 "v4-decode": PLACEHOLDER while the new decode kernel is written.
 * Uses v1-decode's packed layout; launch reports unsupported. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "fp4/format.h"
#include "kernels/fp4_sm90.h"

extern "C" {
size_t fp4_sm90_decode_codes_size(int64_t n, int64_t k);
size_t fp4_sm90_decode_scales_size(int64_t n, int64_t k);
size_t fp4_sm90_decode4_codes_size(int64_t n, int64_t k) { return fp4_sm90_decode_codes_size(n, k); }
size_t fp4_sm90_decode4_scales_size(int64_t n, int64_t k) { return fp4_sm90_decode_scales_size(n, k); }
void fp4_sm90_decode4_pack_b(const fp4_matrix *b, uint8_t *codes, uint8_t *scales)
{
    fp4_sm90_decode_pack_b(b, codes, scales);
}
int fp4_sm90_decode4_fits(int64_t m, int64_t n, int64_t k, int num_sms)
{
    (void)m, (void)n, (void)k, (void)num_sms;
    return 1;
}
fp4_status fp4_sm90_decode4_init(fp4_err *err)
{
    (void)err;
    return FP4_OK;
}
fp4_status fp4_sm90_decode4_launch(const fp4_sm90_gemm_args *a, cudaStream_t stream, fp4_err *err)
{
    (void)a, (void)stream;
    return fp4_fail(err, FP4_ERR_UNSUPPORTED, "fp4-sm90 v4-decode: not written yet");
}
}
