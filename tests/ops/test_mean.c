#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "tg_ops.h"
#include "testutil.h"

static tg_tensor *f_mean(tg_ctx *ctx, void *u) { return tg_mean(ctx, u); }

static tg_tensor *f_mean_sq(tg_ctx *ctx, void *u) { return tg_mean(ctx, tg_mul(ctx, u, u)); }

static void test_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *x = tg_new(&ctx, 2, (int[]){2, 4});
    memcpy(x->data, (float[]){1, 2, 3, 4, 5, 6, 7, -4}, 8 * sizeof(float));
    tg_tensor *y = tg_mean(&ctx, x);
    assert_int_equal(y->ndim, 1);
    assert_int_equal(y->shape[0], 1);
    assert_float_equal(y->data[0], 3, 0);   /* 24 / 8 */
    tg_ctx_free(&ctx);
}

/* 2^20 copies of 0.1f average to 0.1f itself only if the sum is not drifting */
static void test_double_accumulation(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    const int n = 1 << 20;
    tg_tensor *x = tg_new(&ctx, 1, (int[]){n});
    for (int i = 0; i < n; i++) x->data[i] = 0.1f;
    assert_float_equal(tg_mean(&ctx, x)->data[0], 0.1f, 0);
    tg_ctx_free(&ctx);
}

static void test_grad(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 3, (int[]){2, 3, 4});
    tg_params_alloc(&P);
    tg_test_fill(&P, 80, 1.0f);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_backward(&ctx, tg_mean(&ctx, x));
    for (int i = 0; i < 24; i++) assert_float_equal(x->grad[i], 1.0f / 24, 1e-9);
    tg_ctx_free(&ctx);
    assert_int_equal(tg_gradcheck("mean", &P, f_mean, x, NULL), 0);
    assert_int_equal(tg_gradcheck("mean x*x", &P, f_mean_sq, x, NULL), 0);
    tg_params_free(&P);
}

/* param grads accumulate across two backward calls (mean is a typical loss) */
static void test_accumulates(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 2, (int[]){2, 2});
    tg_params_alloc(&P);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    for (int step = 0; step < 2; step++) {
        tg_ctx_reset(&ctx);
        tg_backward(&ctx, tg_mean(&ctx, x));
    }
    for (int i = 0; i < 4; i++) assert_float_equal(x->grad[i], 0.5f, 0);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

static void test_errors(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    tg_tensor *x = tg_zeros(&ctx, 2, (int[]){2, 3});
    /* a mean of constants has nothing to differentiate */
    EXPECT_TG_ERROR(&c, tg_backward(&ctx, tg_mean(&ctx, x)), "the output [1] does not depend on anything");
    tg_ctx_free(&ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_double_accumulation),
        cmocka_unit_test(test_grad),
        cmocka_unit_test(test_accumulates),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
