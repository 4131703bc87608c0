/* fp4-sm90's choice of kernel (fp4_sm90_choose): host code, no GPU needed.
 * Checks the documented rule at the points it was measured on (docs/PERF.md,
 * "The heuristic") and that FP4_SM90_KERNEL forces a variant. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

#ifdef FP4_HAVE_CUDA
#include "kernels/fp4_sm90.h"

int main(void)
{
    unsetenv("FP4_SM90_KERNEL");
    const int sms = 132;
    /* decode below M = 512 at every N of the presets */
    CHECK(fp4_sm90_choose(1, 2048, 6144, sms) == FP4_SM90_V4_DECODE);
    CHECK(fp4_sm90_choose(16, 28672, 4096, sms) == FP4_SM90_V4_DECODE);
    CHECK(fp4_sm90_choose(511, 8192, 8192, sms) == FP4_SM90_V4_DECODE);
    /* N = 768: v4 measured faster than v5 up to M = 1024 (67.5 against 71.2 us) */
    CHECK(fp4_sm90_choose(512, 768, 6144, sms) == FP4_SM90_V4_DECODE);
    CHECK(fp4_sm90_choose(1024, 768, 6144, sms) == FP4_SM90_V4_DECODE);
    CHECK(fp4_sm90_choose(1025, 768, 6144, sms) == FP4_SM90_V8_PREFILL);
    /* N = 2048: v5 from M = 512 (72.0 against 89.6 us) */
    CHECK(fp4_sm90_choose(512, 2048, 6144, sms) == FP4_SM90_V8_PREFILL);
    CHECK(fp4_sm90_choose(8192, 8192, 8192, sms) == FP4_SM90_V8_PREFILL);
    /* forced, by name, alias and number; junk falls back to the rule */
    setenv("FP4_SM90_KERNEL", "v1-decode", 1);
    CHECK(fp4_sm90_choose(8192, 8192, 8192, sms) == FP4_SM90_V1_DECODE);
    setenv("FP4_SM90_KERNEL", "prefill", 1);
    CHECK(fp4_sm90_choose(1, 8, 16, sms) == FP4_SM90_V2_PREFILL);
    setenv("FP4_SM90_KERNEL", "3", 1);
    CHECK(fp4_sm90_choose(1, 8, 16, sms) == FP4_SM90_V3_DECODE);
    setenv("FP4_SM90_KERNEL", "no-such-kernel", 1);
    CHECK(fp4_sm90_choose(1, 2048, 6144, sms) == FP4_SM90_V4_DECODE);
    unsetenv("FP4_SM90_KERNEL");
    return check_finish("test_sm90_choose");
}
#else
int main(void)
{
    printf("test_sm90_choose: built without CUDA, nothing to check\n");
    return 77;
}
#endif
