/* The tests' random numbers: one xorshift64 generator, seeded per test so a
 * failure reproduces. State is owned by the caller (no globals). */
#ifndef FP4_TEST_RNG_H
#define FP4_TEST_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct test_rng {
    uint64_t s;
} test_rng;

static inline test_rng test_rng_seed(uint64_t seed)
{
    test_rng r;
    r.s = seed ? seed : 0x9E3779B97F4A7C15ull;
    return r;
}

/* Next 64 random bits. */
static inline uint64_t test_rng_u64(test_rng *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

/* Uniform in (0, 1). */
static inline double test_rng_uniform(test_rng *r)
{
    return ((double)(test_rng_u64(r) >> 11) + 0.5) / 9007199254740992.0;
}

/* Standard normal (Box-Muller). */
static inline double test_rng_gauss(test_rng *r)
{
    const double u = test_rng_uniform(r), v = test_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif
