/* PCG32 (PCG-XSH-RR): M. E. O'Neill, "PCG: A Family of Simple Fast
 * Space-Efficient Statistically Good Algorithms for Random Number Generation". */
#include "tg_core.h"

#include <math.h>

void tg_rng_seed(tg_rng *r, uint64_t seed, uint64_t stream) {
    r->state = 0;
    r->inc = (stream << 1u) | 1u;
    tg_rng_u32(r);
    r->state += seed;
    tg_rng_u32(r);
}

uint32_t tg_rng_u32(tg_rng *r) {
    uint64_t old = r->state;
    r->state = old * 6364136223846793005ULL + r->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

/* Lemire-free rejection: unbiased, and simple enough to read. */
uint32_t tg_rng_below(tg_rng *r, uint32_t n) {
    uint32_t threshold = (uint32_t)(-n) % n;
    for (;;) {
        uint32_t x = tg_rng_u32(r);
        if (x >= threshold) return x % n;
    }
}

float tg_rng_uniform(tg_rng *r) {
    return (float)(tg_rng_u32(r) >> 8) * (1.0f / 16777216.0f);  /* 24 bits: exact */
}

float tg_rng_normal(tg_rng *r) {
    /* u1 in (0, 1]: log never sees 0. One normal per call (the second
     * Box-Muller value is dropped) keeps the RNG state a plain (state, inc). */
    double u1 = ((double)tg_rng_u32(r) + 1.0) / 4294967296.0;
    double u2 = (double)tg_rng_u32(r) / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void tg_fill_normal(tg_rng *r, float *x, int64_t n, float mean, float std) {
    for (int64_t i = 0; i < n; i++) x[i] = mean + std * tg_rng_normal(r);
}

void tg_fill_uniform(tg_rng *r, float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * tg_rng_uniform(r);
}
