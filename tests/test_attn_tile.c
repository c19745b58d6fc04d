/* ops/attn_tile.h: every copy this CPU runs (AVX-512, AVX2, C) against plain
 * loops here, and against each other to the bit.
 * - gemm: each C entry one FMA chain in k order (fmaf here): equal to the bit,
 *   over shapes that reach every register block, row tail and masked tail,
 *   with A read both ways, α ≠ 1 and adding into C.
 * - softmax: a plain softmax per lane in double within float rounding, and
 *   every copy equal to the bit; masks, sinks, rows with no key, −inf and NaN.
 * - exp: the vector exp equals tg_exp_neg_fma on every 1024th float of [−100, 0]
 *   and the specials (through the softmax of one key and a sink); tg_exp_neg_fma
 *   within its stated bound of exp.
 * - transpose: exact, every edge of the register blocks, nothing outside written.
 * - dsoftmax: D and dS against plain loops, to the bit, D near the exact sum,
 *   other lanes untouched. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "attn_tile.h"
#include "vmath.h"

static unsigned next(unsigned *s) { return *s = *s * 1664525u + 1013904223u; }
static float unif(unsigned *s) { return (float)((next(s) >> 8) % 20001) / 10000.0f - 1.0f; }

enum { NCOPY = 5 };   /* C, AVX2, AVX-512, and the last two with 4-row blocks */

/* the copies this machine runs; the C one first */
static int copies(const tg_tile_ops **ops) {
    int n = 0;
    for (int isa = 3; isa >= 1; isa--)
        if (tg_tile_ops_for(isa)) ops[n++] = tg_tile_ops_for(isa);
    for (int isa = 4; isa <= 5; isa++)   /* AVX-512, AVX2 with 4-row blocks */
        if (tg_tile_ops_for(isa)) ops[n++] = tg_tile_ops_for(isa);
    return n;
}

static void test_best_is_one_of_them(void **st) {
    (void)st;
    const tg_tile_ops *best = tg_tile_ops_for(0);
    assert_non_null(best);
    assert_non_null(tg_tile_ops_for(3));
    int found = 0;
    for (int isa = 1; isa <= 5; isa++) found += best == tg_tile_ops_for(isa);
    assert_int_equal(found, 1);
    assert_null(tg_tile_ops_for(6));
    for (int isa = 4; isa <= 5; isa++)
        if (tg_tile_ops_for(isa)) {   /* the same copy as isa − 3 but the gemm's row blocks */
            const tg_tile_ops *r4 = tg_tile_ops_for(isa), *plain = tg_tile_ops_for(isa - 3);
            assert_non_null(plain);
            assert_ptr_not_equal(r4->gemm, plain->gemm);
            assert_ptr_equal(r4->softmax, plain->softmax);
            assert_ptr_equal(r4->dsoftmax, plain->dsoftmax);
        }
    print_message("tiles: %s\n", best->name);
}

static void test_gemm_all_blocks(void **st) {
    (void)st;
    const tg_tile_ops *ops[NCOPY];
    const int n_ops = copies(ops);
    const int Ms[] = {1, 3, 4, 5, 8, 13, 16, 17, 33}, Ns[] = {1, 7, 8, 9, 16, 17, 24, 31, 32, 33, 48, 64, 65, 100, 128};
    const int Ks[] = {0, 1, 5, 16, 37};
    unsigned s = 7;
    enum { MAXA = 64 * 200, MAXC = 40 * 140 };
    float *A = malloc(MAXA * sizeof(float)), *B = malloc(MAXA * sizeof(float));
    float *C0 = malloc(MAXC * sizeof(float)), *C = malloc(MAXC * sizeof(float)), *W = malloc(MAXC * sizeof(float));
    for (int i = 0; i < MAXA; i++) A[i] = unif(&s), B[i] = unif(&s);
    int cases = 0;
    for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
            for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
                for (int trans = 0; trans < 2; trans++)
                    for (int add = 0; add < 2; add++) {
                        const int M = Ms[mi], N = Ns[ni], K = Ks[ki], lda = (trans ? M : K) + 3, ldb = N + 5,
                                  ldc = N + 2;
                        const int64_t ars = trans ? 1 : lda, acs = trans ? lda : 1;
                        const float alpha = add ? 0.75f : 1.0f;
                        for (int i = 0; i < M * ldc; i++) C0[i] = unif(&s);
                        /* the plain loop: one fmaf chain per entry */
                        for (int m = 0; m < M; m++)
                            for (int n = 0; n < ldc; n++) {
                                float acc = 0;
                                for (int k = 0; k < K; k++) acc = fmaf(A[m * ars + k * acs], B[k * ldb + n], acc);
                                const float x = alpha != 1.0f ? acc * alpha : acc;
                                W[m * ldc + n] = n >= N ? C0[m * ldc + n] : add ? C0[m * ldc + n] + x : x;
                            }
                        for (int o = 0; o < n_ops; o++) {
                            memcpy(C, C0, (size_t)M * ldc * sizeof(float));
                            ops[o]->gemm(M, N, K, alpha, A, ars, acs, B, ldb, C, ldc, add);
                            if (memcmp(C, W, (size_t)M * ldc * sizeof(float))) {
                                int i = 0;
                                while (C[i] == W[i]) i++;
                                fail_msg("%s gemm M %d N %d K %d trans %d add %d: C[%d] = %.9g, want %.9g", ops[o]->name,
                                         M, N, K, trans, add, i, C[i], W[i]);
                            }
                        }
                        cases++;
                    }
    assert_true(cases > 1000);
    free(A), free(B), free(C0), free(C), free(W);
}

/* a lane's softmax in double: the weights of keys k0+j within [lo, hi), the sink's */
static void softmax_ref(const float *S0, int nk, int k0, int lo, int hi, float s, float sink, int a, double *p,
                        double *ps) {
    double m = sink;
    for (int j = 0; j < nk; j++)
        if (k0 + j >= lo && k0 + j < hi) m = fmax(m, (double)(S0[j * TG_TILE_Q + a] * s));
    double z = sink > -INFINITY ? exp(sink - m) : 0;
    for (int j = 0; j < nk; j++)
        if (k0 + j >= lo && k0 + j < hi) z += exp((double)(S0[j * TG_TILE_Q + a] * s) - m);
    for (int j = 0; j < nk; j++)
        p[j] = k0 + j >= lo && k0 + j < hi && m > -INFINITY ? exp((double)(S0[j * TG_TILE_Q + a] * s) - m) / z : 0;
    *ps = sink > -INFINITY && m > -INFINITY ? exp(sink - m) / z : 0;
}

static void test_softmax(void **st) {
    (void)st;
    const tg_tile_ops *ops[NCOPY];
    const int n_ops = copies(ops);
    enum { NK = 70 };
    float S0[NK * TG_TILE_Q], S[NCOPY][NK * TG_TILE_Q], top[NCOPY][TG_TILE_Q], psk[NCOPY][TG_TILE_Q];
    double p[NK], ps;
    unsigned s = 11;
    for (int c = 0; c < 200; c++) {
        const int nk = 1 + c % NK, k0 = c % 5;
        const float scale = c % 3 ? 3.0f : -0.5f, sink = c % 4 == 1 ? unif(&s) * 4 : -INFINITY;
        int lo[TG_TILE_Q], hi[TG_TILE_Q];
        for (int a = 0; a < TG_TILE_Q; a++) {   /* spans: whole, causal-like, empty, one key */
            const int kind = (a + c) % 4;
            lo[a] = kind == 0 ? 0 : k0 + (int)(next(&s) % (unsigned)nk);
            hi[a] = kind == 0 ? k0 + nk : kind == 2 ? lo[a] : kind == 3 ? lo[a] + 1 : k0 + nk;
        }
        for (int i = 0; i < nk * TG_TILE_Q; i++) S0[i] = unif(&s) * 8;
        for (int o = 0; o < n_ops; o++) {
            memcpy(S[o], S0, sizeof S0);
            ops[o]->softmax(S[o], TG_TILE_Q, nk, k0, lo, hi, 1, scale, sink, top[o], psk[o]);
            if (o) {
                assert_memory_equal(S[o], S[0], (size_t)nk * TG_TILE_Q * sizeof(float));
                assert_memory_equal(top[o], top[0], sizeof top[0]);
                assert_memory_equal(psk[o], psk[0], sizeof psk[0]);
            }
        }
        for (int a = 0; a < TG_TILE_Q; a++) {
            softmax_ref(S0, nk, k0, lo[a], hi[a], scale, sink, a, p, &ps);
            for (int j = 0; j < nk; j++) assert_float_equal(S[0][j * TG_TILE_Q + a], p[j], 2e-6 * p[j] + 1e-12);
            assert_float_equal(psk[0][a], ps, 2e-6 * ps + 1e-12);
            double t = -INFINITY;
            for (int j = 0; j < nk; j++)
                if (k0 + j >= lo[a] && k0 + j < hi[a]) t = fmax(t, (double)(S0[j * TG_TILE_Q + a] * scale));
            assert_true(top[0][a] == (float)t);
        }
    }
}

/* −inf, NaN and logits already made (raw 0), each copy alike */
static void test_softmax_specials(void **st) {
    (void)st;
    const tg_tile_ops *ops[NCOPY];
    const int n_ops = copies(ops);
    int lo[TG_TILE_Q] = {0}, hi[TG_TILE_Q];
    for (int a = 0; a < TG_TILE_Q; a++) hi[a] = 3;
    for (int o = 0; o < n_ops; o++) {
        float S[3 * TG_TILE_Q], top[TG_TILE_Q], psk[TG_TILE_Q];
        for (int j = 0; j < 3; j++)
            for (int a = 0; a < TG_TILE_Q; a++) S[j * TG_TILE_Q + a] = (float)j;
        /* lane 0 all −inf; lane 1 a NaN among finite; lane 2 a NaN among −inf; lane 3 one finite */
        for (int j = 0; j < 3; j++) S[j * TG_TILE_Q] = S[j * TG_TILE_Q + 2] = S[j * TG_TILE_Q + 3] = -INFINITY;
        S[1 * TG_TILE_Q + 1] = NAN, S[2 * TG_TILE_Q + 2] = NAN, S[1 * TG_TILE_Q + 3] = 5;
        ops[o]->softmax(S, TG_TILE_Q, 3, 0, lo, hi, 0, 1.0f, -INFINITY, top, psk);
        for (int j = 0; j < 3; j++) {
            assert_true(S[j * TG_TILE_Q] == 0.0f);               /* nothing to weigh: 0 */
            assert_true(isnan(S[j * TG_TILE_Q + 1]));            /* a NaN is never hidden */
            assert_true(isnan(S[j * TG_TILE_Q + 2]));
            assert_true(S[j * TG_TILE_Q + 3] == (j == 1 ? 1.0f : 0.0f));
        }
        assert_true(top[0] == -INFINITY && top[1] == 2.0f && isnan(top[2]) && top[3] == 5.0f);
        assert_true(psk[0] == 0.0f);
        for (int a = 4; a < TG_TILE_Q; a++) assert_float_equal(S[2 * TG_TILE_Q + a], exp(2.0) / (1 + exp(1.0) + exp(2.0)), 1e-6);
    }
}

/* The vector exp against tg_exp_neg_fma: a key of logit 0 (the max) and NK keys of logits x
 * make weights e^x·inv, inv = 1/(1 + Σ e^x) summed as the tiles sum: both computed here from
 * tg_exp_neg_fma must come out to the bit. */
static void test_exp_matches_scalar(void **st) {
    (void)st;
    const tg_tile_ops *ops[NCOPY];
    const int n_ops = copies(ops);
    enum { NK = 64 };
    float S[(NK + 1) * TG_TILE_Q], top[TG_TILE_Q];
    int lo[TG_TILE_Q] = {0}, hi[TG_TILE_Q];
    for (int a = 0; a < TG_TILE_Q; a++) hi[a] = NK + 1;
    int64_t checked = 0;
    for (int o = 0; o < n_ops; o++)
        for (uint32_t bits = 0x80000000u; bits <= 0xc2c80000u; bits += 1024 * TG_TILE_Q * NK) {
            float xs[NK * TG_TILE_Q];
            for (int i = 0; i < NK * TG_TILE_Q; i++) {
                uint32_t b = bits + (uint32_t)i * 1024;
                memcpy(&xs[i], &b, sizeof b);
            }
            for (int a = 0; a < TG_TILE_Q; a++) S[a] = 0.0f;   /* key 0: logit 0, the max */
            for (int j = 0; j < NK; j++)
                for (int a = 0; a < TG_TILE_Q; a++) S[(j + 1) * TG_TILE_Q + a] = xs[j * TG_TILE_Q + a];
            ops[o]->softmax(S, TG_TILE_Q, NK + 1, 0, lo, hi, 0, 1.0f, -INFINITY, top, NULL);
            for (int a = 0; a < TG_TILE_Q; a++) {
                /* key 0 (e^0) and the others, by blocks of 8 keys: float within, even and odd
                 * keys apart, double across (attn_tile.h) */
                double l[2] = {0, 0};
                float f[2] = {0, 0};
                for (int j = 0; j <= NK; j++) {
                    f[j & 1] += j ? tg_exp_neg_fma(xs[(j - 1) * TG_TILE_Q + a]) : 1.0f;
                    if (j % 8 == 7 || j == NK) l[0] += f[0], l[1] += f[1], f[0] = f[1] = 0;
                }
                const float inv = (float)(1.0 / (l[0] + l[1]));
                assert_true(S[a] == inv);
                for (int j = 0; j < NK; j++) {
                    const float want = tg_exp_neg_fma(xs[j * TG_TILE_Q + a]) * inv;
                    if (S[(j + 1) * TG_TILE_Q + a] != want)
                        fail_msg("%s: e^%.9g: %.9g, want %.9g", ops[o]->name, xs[j * TG_TILE_Q + a],
                                 S[(j + 1) * TG_TILE_Q + a], want);
                    checked++;
                }
            }
        }
    assert_true(checked > 100000);
}

/* tg_exp_neg_fma's bound (vmath.h): within 0.94 ulp of e^x on every 1024th float of
 * [−87, 0] (the bound holds on all of them: measured once, 20 s); 0 below −87, NaN for NaN. */
static void test_exp_bound(void **st) {
    (void)st;
    double worst = 0;
    for (uint32_t bits = 0x80000000u; bits <= 0xc2ae0000u; bits += 1024) {
        float x;
        memcpy(&x, &bits, sizeof x);
        const double e = exp((double)x);
        const float ef = (float)e, ulp = nextafterf(ef, INFINITY) - ef;
        const double err = fabs((double)tg_exp_neg_fma(x) - e) / ulp;
        worst = err > worst ? err : worst;
    }
    if (worst > 0.94) fail_msg("tg_exp_neg_fma: %.3f ulp", worst);
    assert_true(tg_exp_neg_fma(-87.5f) == 0.0f && tg_exp_neg_fma(-INFINITY) == 0.0f);
    assert_true(isnan(tg_exp_neg_fma(NAN)) && tg_exp_neg_fma(0.0f) == 1.0f);
}

static void test_transpose(void **st) {
    (void)st;
    const tg_tile_ops *ops[NCOPY];
    const int n_ops = copies(ops);
    enum { R = 40, C = 37, LDX = 41, LDY = 45 };
    float X[R * LDX], Y[C * LDY];
    for (int i = 0; i < R * LDX; i++) X[i] = (float)i;
    for (int o = 0; o < n_ops; o++)
        for (int rows = 0; rows <= R; rows += 1 + rows / 8)
            for (int cols = 0; cols <= C; cols += 1 + cols / 8) {
                for (int i = 0; i < C * LDY; i++) Y[i] = -1;
                ops[o]->transpose(X, LDX, rows, cols, Y, LDY);
                for (int c = 0; c < C; c++)
                    for (int r = 0; r < LDY; r++)
                        assert_true(Y[c * LDY + r] == (c < cols && r < rows ? X[r * LDX + c] : -1.0f));
            }
}

/* dS = P ⊙ (dP − D), D = Σ P dP per lane in double: against plain loops, every copy to the bit */
static void test_dsoftmax(void **st) {
    (void)st;
    const tg_tile_ops *ops[NCOPY];
    const int n_ops = copies(ops);
    enum { NK = 37, LD = 48 };
    float P[NK * LD], G0[NK * LD], G[NCOPY][NK * LD], D[NCOPY][TG_TILE_Q];
    unsigned s = 5;
    for (int nk = 0; nk <= NK; nk += 3) {
        for (int i = 0; i < NK * LD; i++) P[i] = (unif(&s) + 1) / 2, G0[i] = unif(&s) * 3;
        for (int o = 0; o < n_ops; o++) {
            memcpy(G[o], G0, sizeof G0);
            ops[o]->dsoftmax(G[o] + 16, P + 16, LD, nk, D[o]);   /* lanes 16..31 of rows LD apart */
            if (o) {
                assert_memory_equal(G[o], G[0], sizeof G0);
                assert_memory_equal(D[o], D[0], sizeof D[0]);
            }
        }
        for (int a = 0; a < TG_TILE_Q; a++) {
            /* D in the order attn_tile.h states (blocks of 8 keys: FMAs in float within, even and
             * odd keys apart, double across), and within 8 float roundings of |P·dP| summed of
             * the exact sum (each block's float sums: at most 4 roundings) */
            double l2[2] = {0, 0}, l, exact = 0, mag = 0;
            float f[2] = {0, 0};
            for (int j = 0; j < nk; j++) {
                const float p = P[j * LD + 16 + a], g = G0[j * LD + 16 + a];
                f[j & 1] = fmaf(p, g, f[j & 1]);
                if (j % 8 == 7 || j == nk - 1) l2[0] += f[0], l2[1] += f[1], f[0] = f[1] = 0;
                exact += (double)p * g, mag += fabs((double)p * g);
            }
            l = l2[0] + l2[1];
            assert_true(D[0][a] == (float)l);
            assert_true(fabs(l - exact) <= 8 * 0x1p-24 * mag);
            for (int j = 0; j < nk; j++)
                assert_true(G[0][j * LD + 16 + a] == P[j * LD + 16 + a] * (G0[j * LD + 16 + a] - (float)l));
        }
        for (int j = 0; j < NK; j++)   /* the other lanes untouched */
            for (int a = 0; a < LD; a++)
                if (a < 16 || a >= 32 || j >= nk) assert_true(G[0][j * LD + a] == G0[j * LD + a]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_best_is_one_of_them), cmocka_unit_test(test_gemm_all_blocks),
        cmocka_unit_test(test_softmax),             cmocka_unit_test(test_softmax_specials),
        cmocka_unit_test(test_exp_matches_scalar),  cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_dsoftmax),            cmocka_unit_test(test_exp_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
