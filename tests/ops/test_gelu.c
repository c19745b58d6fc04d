#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "tg_ops.h"
#include "testutil.h"

static tg_tensor *f_gelu(tg_ctx *ctx, void *u) { return tg_gelu(ctx, u); }

/* gelu(x) · x: x reaches the output through gelu and directly */
static tg_tensor *f_gelu_times_x(tg_ctx *ctx, void *u) { return tg_mul(ctx, tg_gelu(ctx, u), u); }

/* the tanh form and its derivative, in double, written out independently of the op */
static double gelu_ref(double x) {
    const double c = sqrt(2.0 / acos(-1.0));
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
}

static double gelu_dref(double x) {
    const double c = sqrt(2.0 / acos(-1.0));
    double t = tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

static const float pts[] = {-3, -1, -0.5f, 0, 0.5f, 1, 2, 3};

static void test_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *x = tg_new(&ctx, 2, (int[]){2, 4});
    memcpy(x->data, pts, sizeof pts);
    tg_tensor *y = tg_gelu(&ctx, x);
    /* a few values of the tanh form, known to 6 digits */
    const float known[] = {-0.0036374f, -0.1588080f, -0.1542860f, 0, 0.3457140f, 0.8411920f, 1.9545977f, 2.9963626f};
    for (int i = 0; i < 8; i++) {
        assert_float_equal(y->data[i], gelu_ref(pts[i]), 1e-6);
        assert_float_equal(y->data[i], known[i], 1e-6);
    }
    /* large |x|: identity on the right, 0 on the left, nothing NaN */
    tg_tensor *big = tg_new(&ctx, 1, (int[]){2});
    memcpy(big->data, (float[]){-40, 40}, 2 * sizeof(float));
    tg_tensor *yb = tg_gelu(&ctx, big);
    assert_float_equal(yb->data[0], 0, 0);
    assert_float_equal(yb->data[1], 40, 0);
    tg_ctx_free(&ctx);
}

static void test_derivative_values(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 1, (int[]){8});
    tg_params_alloc(&P);
    memcpy(x->data, pts, sizeof pts);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *y = tg_gelu(&ctx, x);
    tg_backward_seed(&ctx, y, (float[]){1, 1, 1, 1, 1, 1, 1, 1});
    for (int i = 0; i < 8; i++) assert_float_equal(x->grad[i], gelu_dref(pts[i]), 1e-6);
    assert_float_equal(x->grad[3], 0.5, 1e-7);   /* gelu'(0) = 1/2 */
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

static void test_gradcheck(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 3, (int[]){2, 3, 5});
    tg_params_alloc(&P);
    tg_test_fill(&P, 150, 2.0f);   /* std 2 reaches the curved tails */
    assert_int_equal(tg_gradcheck("gelu", &P, f_gelu, x, NULL), 0);
    assert_int_equal(tg_gradcheck("gelu(x)*x", &P, f_gelu_times_x, x, NULL), 0);
    tg_params_free(&P);
}

/* gelu takes any shape, so the misuse is downstream: gelu's output is not a loss */
static void test_errors(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 2, (int[]){3, 2});
    tg_params_alloc(&P);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    EXPECT_TG_ERROR(&c, tg_backward(&ctx, tg_gelu(&ctx, x)), "the loss must have one element, got [3,2]");
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

/* The "input used twice" check of an op that readies its inputs' grads itself
 * (tests/testutil.h, docs/ops.md#the-fast-kind-of-op). */
static tg_tensor *twice_op(tg_ctx *ctx, tg_tensor *h, void *u) {
    (void)u;
    return tg_gelu(ctx, h);
}

static void test_input_used_twice(void **s) {
    (void)s;
    assert_int_equal(tg_test_used_twice_shape("gelu", 2, (int[]){3, 5}, twice_op, NULL), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_used_twice),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_derivative_values),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
