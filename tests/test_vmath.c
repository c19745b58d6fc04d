/* ops/vmath.h's row reductions against plain loops: every length 0..70 (whole
 * 16-lane blocks and each remainder), NaN skipped by the max as the plain
 * loop skips it, −inf and empty rows; the double sums equal to the plain
 * loop's within double rounding (their order differs). Called from a
 * target-cloned function as the ops call them: the clone of this machine's ISA. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "parallel.h"
#include "vmath.h"

enum { N = 70 };

/* the callers of the helpers are compiled once per ISA, as the ops' are */
TG_VEC_CLONES static void reduce(const float *x, const float *y, int n, float *mx, double *sum, double *dot) {
    *mx = tg_row_max(x, n);
    *sum = tg_row_dot_d(x, NULL, n);
    *dot = tg_row_dot_d(x, y, n);
}

static void fill(float *x, float *y, unsigned seed) {
    for (int i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) % 20001) / 1000.0f - 10.0f;
        y[i] = (float)((seed >> 4) % 997) / 97.0f - 5.0f;
    }
}

static void check_all_lengths(float *x, float *y, const char *what) {
    for (int n = 0; n <= N; n++) {
        float want = -INFINITY, mx;
        double s = 0, d = 0, abs_s = 0, abs_d = 0, sum, dot;
        for (int j = 0; j < n; j++) {
            want = x[j] > want ? x[j] : want;
            s += x[j], d += (double)x[j] * y[j];
            abs_s += fabs(x[j]), abs_d += fabs((double)x[j] * y[j]);
        }
        reduce(x, y, n, &mx, &sum, &dot);
        if (!(mx == want) && !(isnan(mx) && isnan(want)))
            fail_msg("%s, n %d: tg_row_max %g, want %g", what, n, mx, want);
        if (isfinite(s) && fabs(sum - s) > 1e-15 * abs_s)
            fail_msg("%s, n %d: tg_row_dot_d(x) %.17g, want %.17g", what, n, sum, s);
        if (isfinite(d) && fabs(dot - d) > 1e-15 * abs_d)
            fail_msg("%s, n %d: tg_row_dot_d(x, y) %.17g, want %.17g", what, n, dot, d);
    }
}

static void test_random(void **st) {
    (void)st;
    float x[N], y[N];
    for (unsigned seed = 1; seed <= 20; seed++) {
        fill(x, y, seed);
        check_all_lengths(x, y, "random");
    }
}

/* the max at each position in turn: a wrong lane or fold order would miss it */
static void test_max_everywhere(void **st) {
    (void)st;
    float x[N], y[N];
    fill(x, y, 7);
    for (int at = 0; at < N; at++) {
        float z[N];
        for (int i = 0; i < N; i++) z[i] = x[i];
        z[at] = 100.0f + at;
        for (int n = at + 1; n <= N; n++) {
            float mx;
            double s, d;
            reduce(z, y, n, &mx, &s, &d);
            if (mx != 100.0f + at) fail_msg("max at %d of %d: tg_row_max %g", at, n, mx);
        }
    }
}

static void test_nan_and_inf(void **st) {
    (void)st;
    float x[N], y[N];
    fill(x, y, 3);
    for (int i = 0; i < N; i += 5) x[i] = NAN;   /* skipped by both maxes; the sums NaN */
    for (int n = 1; n <= N; n++) {
        float want = -INFINITY, mx;
        double s, d;
        for (int j = 0; j < n; j++) want = x[j] > want ? x[j] : want;
        reduce(x, y, n, &mx, &s, &d);
        assert_true(mx == want);
        assert_true(isnan(s) && isnan(d));
    }
    for (int i = 0; i < N; i++) x[i] = -INFINITY;   /* a masked row: max −inf, sum −inf */
    for (int n = 1; n <= N; n++) {
        float mx;
        double s, d;
        reduce(x, y, n, &mx, &s, &d);
        assert_true(mx == -INFINITY && s == -INFINITY);
    }
    float mx;
    double s, d;
    reduce(x, y, 0, &mx, &s, &d);   /* no element */
    assert_true(mx == -INFINITY && s == 0 && d == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_max_everywhere),
        cmocka_unit_test(test_nan_and_inf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
