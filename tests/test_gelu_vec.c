/* ops/gelu_vec.h: every copy this CPU runs (AVX-512, AVX2, C) against the C copy
 * to the bit (NaN: both NaN), and the C copy against the tanh form in double.
 * - inputs: the specials (±0, ±inf, NaN, subnormals, the largest floats, |u|
 *   about 20 where tanh is capped), every 65537th float, and [−12, 12] in steps
 *   of 1/512; with and without a bias;
 * - every length 0..40 from every offset 0..3 (the masked tails), nothing
 *   outside [0, n) written; backward written and added, with and without dx
 *   and db;
 * - the error bounds gelu_vec.h states. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gelu_vec.h"

/* the copies this machine runs; the C one first */
static int copies(const tg_gelu_ops **ops) {
    int n = 0;
    for (int isa = 3; isa >= 1; isa--)
        if (tg_gelu_ops_for(isa)) ops[n++] = tg_gelu_ops_for(isa);
    return n;
}

static void test_best_is_one_of_them(void **st) {
    (void)st;
    const tg_gelu_ops *best = tg_gelu_ops_for(0);
    assert_non_null(best);
    assert_non_null(tg_gelu_ops_for(3));
    assert_true(best == tg_gelu_ops_for(1) || best == tg_gelu_ops_for(2) || best == tg_gelu_ops_for(3));
    assert_null(tg_gelu_ops_for(4));
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* the inputs: specials, a sweep of the bit patterns, a dense sweep of the curve */
static float *inputs(int *count) {
    static const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                        0xffc00000u, 0x7fa00000u, 0x00000001u, 0x80000001u, 0x007fffffu,
                                        0x807fffffu, 0x00800000u, 0x7f7fffffu, 0xff7fffffu};
    const int ns = sizeof specials / sizeof *specials, nb = 65536, nd = 24 * 512 + 1;
    const float near20[] = {5.1f, 5.2f, 5.25f, 5.3f, 5.4f, -5.1f, -5.2f, -5.25f, -5.3f, -5.4f, 100, -100, 1e10f, -1e10f};
    const int nn = sizeof near20 / sizeof *near20;
    float *x = malloc((size_t)(ns + nb + nd + nn) * sizeof *x);
    int k = 0;
    for (int i = 0; i < ns; i++) x[k++] = from_bits(specials[i]);
    for (int i = 0; i < nb; i++) x[k++] = from_bits((uint32_t)i * 65537u);
    for (int i = 0; i < nd; i++) x[k++] = -12.0f + (float)i / 512.0f;
    for (int i = 0; i < nn; i++) x[k++] = near20[i];
    *count = k;
    return x;
}

static void assert_same(const float *a, const float *b, int n, const char *what, const char *isa) {
    for (int i = 0; i < n; i++) {
        if (isnan(a[i]) && isnan(b[i])) continue;
        if (memcmp(&a[i], &b[i], sizeof(float))) fail_msg("%s: %s gives %.9g, the C copy %.9g (element %d)", what, isa, b[i], a[i], i);
    }
}

static void test_copies_agree_to_the_bit(void **st) {
    (void)st;
    const tg_gelu_ops *ops[3];
    const int nc = copies(ops);
    int n;
    float *x = inputs(&n);
    float *b = malloc((size_t)n * sizeof *b), *g = malloc((size_t)n * sizeof *g);
    float *y[3], *dx[3], *db[3];
    unsigned s = 7;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        b[i] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f;
        g[i] = (float)((s >> 4) % 3001) / 1000.0f - 1.5f;
    }
    for (int c = 0; c < nc; c++) {
        y[c] = malloc((size_t)n * sizeof(float)), dx[c] = malloc((size_t)n * sizeof(float));
        db[c] = malloc((size_t)n * sizeof(float));
    }
    for (int withb = 0; withb < 2; withb++)
        for (int c = 0; c < nc; c++) {
            const float *bb = withb ? b : NULL;
            ops[c]->fwd(x, bb, y[c], n);
            for (int i = 0; i < n; i++) dx[c][i] = g[i], db[c][i] = b[i];
            ops[c]->bwd(x, bb, g, dx[c], db[c], n, 1);   /* added to both */
            assert_same(y[0], y[c], n, withb ? "forward with a bias" : "forward", ops[c]->name);
            assert_same(dx[0], dx[c], n, withb ? "backward with a bias" : "backward", ops[c]->name);
            assert_same(db[0], db[c], n, "db", ops[c]->name);
        }
    for (int c = 0; c < nc; c++) free(y[c]), free(dx[c]), free(db[c]);
    free(x), free(b), free(g);
}

/* every length and offset: the tails agree, and nothing past them is written */
static void test_tails(void **st) {
    (void)st;
    const tg_gelu_ops *ops[3];
    const int nc = copies(ops);
    enum { L = 48 };
    float x[L], b[L], g[L];
    for (int i = 0; i < L; i++) x[i] = 0.37f * (float)i - 7.0f, b[i] = 0.01f * (float)i, g[i] = 1.0f - 0.03f * (float)i;
    for (int off = 0; off < 4; off++)
        for (int n = 0; off + n <= 44; n++)
            for (int mode = 0; mode < 4; mode++) {   /* backward: dx written / added, with / without db */
                float ref[3][L];
                for (int c = 0; c < nc; c++) {
                    float y[L], dx[L], db[L];
                    for (int i = 0; i < L; i++) y[i] = -1.0f, dx[i] = 2.0f, db[i] = 3.0f;
                    ops[c]->fwd(x + off, mode & 1 ? b + off : NULL, y + off, n);
                    ops[c]->bwd(x + off, mode & 1 ? b + off : NULL, g + off, dx + off, mode & 2 ? db + off : NULL, n,
                                mode & 2);
                    for (int i = 0; i < L; i++) {
                        const int in = i >= off && i < off + n;
                        if (!in) {
                            assert_true(y[i] == -1.0f && dx[i] == 2.0f && db[i] == 3.0f);
                            continue;
                        }
                        if (!(mode & 2)) assert_true(db[i] == 3.0f);
                    }
                    if (c == 0) memcpy(ref[0], y, sizeof y), memcpy(ref[1], dx, sizeof dx), memcpy(ref[2], db, sizeof db);
                    else {
                        assert_memory_equal(ref[0], y, sizeof y);
                        assert_memory_equal(ref[1], dx, sizeof dx);
                        assert_memory_equal(ref[2], db, sizeof db);
                    }
                }
            }
    /* no dx at all: only db */
    for (int c = 0; c < nc; c++) {
        float db[L] = {0};
        ops[c]->bwd(x, b, g, NULL, db, 37, 0);
        float dx[L];
        ops[c]->bwd(x, b, g, dx, NULL, 37, 0);
        assert_memory_equal(db, dx, 37 * sizeof(float));
    }
}

static double ref(double v, int grad) {
    const double C = sqrt(2.0 / acos(-1.0)), K = 0.044715, t = tanh(C * (v + K * v * v * v));
    return grad ? 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * C * (1 + 3 * K * v * v) : 0.5 * v * (1 + t);
}

/* gelu_vec.h's bounds, on [−12, 12] in steps of 1/4096 (98,305 points): 0.19.0's
 * scalar code (Horner, no FMA) measured the same way 1.51e-7 and 1.04e-6; the
 * bounds are those rounded up, so a copy less accurate than it fails. The C copy
 * is IEEE operations and exact fmaf only: the same on every machine. */
static void test_error_bounds(void **st) {
    (void)st;
    enum { N = 24 * 4096 + 1 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *d = malloc(N * sizeof *d), *one = malloc(N * sizeof *one);
    for (int i = 0; i < N; i++) x[i] = -12.0f + (float)i / 4096.0f, one[i] = 1.0f;
    const tg_gelu_ops *c = tg_gelu_ops_for(3);
    c->fwd(x, NULL, y, N);
    c->bwd(x, NULL, one, d, NULL, N, 0);
    double ef = 0, ed = 0;
    for (int i = 0; i < N; i++) {
        const double f = ref(x[i], 0);
        const double e = fabs(y[i] - f) - 0x1p-22 * fabs(f);   /* beyond 2⁻²² relative */
        ef = e > ef ? e : ef;
        ed = fabs(d[i] - ref(x[i], 1)) > ed ? fabs(d[i] - ref(x[i], 1)) : ed;
    }
    print_message("gelu: largest error beyond 2^-22 relative %.3g (bound 1.6e-7); gelu': %.3g (bound 1.1e-6)\n", ef, ed);
    assert_true(ef <= 1.6e-7);
    assert_true(ed <= 1.1e-6);
    free(x), free(y), free(d), free(one);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_best_is_one_of_them),
        cmocka_unit_test(test_copies_agree_to_the_bit),
        cmocka_unit_test(test_tails),
        cmocka_unit_test(test_error_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
