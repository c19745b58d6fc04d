#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "tg_ops.h"
#include "testutil.h"

static tg_tensor *f_sum(tg_ctx *ctx, void *u) { return tg_sum(ctx, u); }

/* x + x summed: one x through two paths into the reduction */
static tg_tensor *f_sum_twice(tg_ctx *ctx, void *u) { return tg_sum(ctx, tg_add(ctx, u, u)); }

static void test_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *x = tg_new(&ctx, 2, (int[]){2, 3});
    memcpy(x->data, (float[]){1, 2, 3, 4, 5, -6}, 6 * sizeof(float));
    tg_tensor *y = tg_sum(&ctx, x);
    assert_int_equal(y->ndim, 1);
    assert_int_equal(y->shape[0], 1);
    assert_float_equal(y->data[0], 9, 0);
    tg_ctx_free(&ctx);
}

/* 2^20 copies of 0.1f: exactly 104857.6015625 in double. A float running sum
 * drifts by whole units here; the double accumulator lands on the float
 * nearest the true sum. */
static void test_double_accumulation(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    const int n = 1 << 20;
    tg_tensor *x = tg_new(&ctx, 2, (int[]){1024, n / 1024});
    for (int i = 0; i < n; i++) x->data[i] = 0.1f;
    tg_tensor *y = tg_sum(&ctx, x);
    assert_float_equal(y->data[0], (float)(n * (double)0.1f), 0);
    tg_ctx_free(&ctx);
}

static void test_grad(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 3, (int[]){2, 3, 5});
    tg_params_alloc(&P);
    tg_test_fill(&P, 70, 1.0f);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_backward_seed(&ctx, tg_sum(&ctx, x), (float[]){2.5f});
    for (int i = 0; i < 30; i++) assert_float_equal(x->grad[i], 2.5f, 0);
    tg_ctx_free(&ctx);
    assert_int_equal(tg_gradcheck("sum", &P, f_sum, x, NULL), 0);
    assert_int_equal(tg_gradcheck("sum x+x", &P, f_sum_twice, x, NULL), 0);
    tg_params_free(&P);
}

/* tg_sum takes any tensor, so its misuse is on the other side: a non-scalar loss */
static void test_errors(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 2, (int[]){2, 3});
    tg_params_alloc(&P);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    tg_tensor *y = tg_add(&ctx, x, x);
    EXPECT_TG_ERROR(&c, tg_backward(&ctx, y), "the loss must have one element, got [2,3]");
    tg_backward(&ctx, tg_sum(&ctx, y));
    for (int i = 0; i < 6; i++) assert_float_equal(x->grad[i], 2, 0);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_double_accumulation),
        cmocka_unit_test(test_grad),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
