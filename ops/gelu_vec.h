/* Internal to tg_gelu and tg_bias_gelu (not installed, not exported): GELU's
 * element loops, one copy per ISA (AVX-512, AVX2+FMA, plain C), picked at run
 * time as the attention tiles' are.
 *
 * gelu(v) = ½v(1 + tanh u), u = C·v·(1 + K v²) (C = √(2/π), K = 0.044715), the
 * tanh form; tanh u = sign(u)(1 − e)/(1 + e), e = e^{−2 min(|u|, 20)} (tanh is
 * 1 in float past 20, so e never underflows); e^x = 2^n e^r, r = x − n ln2
 * (ln2 in two parts), e^r by its Taylor series to r⁷ (truncation < 1e-8
 * relative) evaluated by FMAs in Estrin's order: three dependent steps where
 * Horner's form takes seven multiply-adds, which is what made the loop
 * latency-bound (experiments/bench_gelu). gelu'(v) = ½(1 + t) + ½v(1 − t²)·C(1 + 3K v²).
 *
 * Each copy runs the same IEEE operations in the same order (the C copy's FMAs
 * by fmaf, exact), so every CPU gives the same bits. Error against the tanh
 * form in double, on [−12, 12] (tests/test_gelu_vec.c): forward within
 * 1.6e-7 + 2⁻²²|gelu(v)|, the derivative within 1.1e-6, as accurate as
 * 0.19.0's scalar code (Horner, no FMA; 1.51e-7 and 1.04e-6 measured the same
 * way), but not its bits. NaN in, NaN out; gelu(−inf) is NaN (−inf · 0),
 * gelu(+inf) = +inf, as before. */
#ifndef TG_OPS_GELU_VEC_H
#define TG_OPS_GELU_VEC_H
#include <stdint.h>

typedef struct {
    const char *name;   /* "avx512", "avx2", "c" */
    /* y[i] = gelu(x[i] + b[i]), i < n (b NULL: gelu(x[i])) */
    void (*fwd)(const float *x, const float *b, float *y, int64_t n);
    /* d = g[i]·gelu'(x[i] + b[i]) (b NULL: of x[i]); dx[i] = d, or dx[i] += d when add;
     * db[i] += d. dx or db may be NULL. */
    void (*bwd)(const float *x, const float *b, const float *g, float *dx, float *db, int64_t n, int add);
} tg_gelu_ops;

/* 0: the best this CPU runs (AVX-512 unless built with -DTG_AVX512_CLONES=OFF,
 * else AVX2, else C); 1 AVX-512, 2 AVX2, 3 C; NULL when this CPU or build
 * cannot run it. */
__attribute__((visibility("hidden"))) const tg_gelu_ops *tg_gelu_ops_for(int isa);

#endif
