#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "tg_ops.h"
#include "gradcheck.h"
#include "testutil.h"

static tg_tensor *f_exp(tg_ctx *ctx, void *u) { return tg_exp(ctx, (tg_tensor *)u); }

static void test_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *x = tg_new(&ctx, 2, (int[]){2, 2});
    memcpy(x->data, (float[]){0, 1, -2, 0.5f * logf(128.0f)}, 4 * sizeof(float));
    tg_tensor *y = tg_exp(&ctx, x);
    assert_float_equal(y->data[0], 1.0f, 0);
    assert_float_equal(y->data[1], 2.7182817f, 1e-6f);
    assert_float_equal(y->data[2], 0.13533528f, 1e-7f);
    assert_float_equal(y->data[3], sqrtf(128.0f), 2e-6f);   /* exp(ln √128): the log form's start */
    x->data[0] = 100.0f;   /* overflows to inf, as expf does */
    assert_true(isinf(tg_exp(&ctx, x)->data[0]));
    tg_ctx_free(&ctx);
}

/* d e^x / dx = e^x: the upstream grad times the output */
static void test_grad_values(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 1, (int[]){3});
    tg_params_alloc(&P);
    memcpy(x->data, (float[]){0, 1, -1}, 3 * sizeof(float));
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *y = tg_exp(&ctx, x);
    tg_backward_seed(&ctx, y, (float[]){4, 2, -3});
    const float want[] = {4, 2 * expf(1), -3 * expf(-1)};
    for (int i = 0; i < 3; i++) assert_float_equal(x->grad[i], want[i], 1e-6f);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

static void test_gradcheck(void **s) {
    (void)s;
    const float stds[] = {0.5f, 1.0f, 2.5f};   /* up to e^±7 or so: a wide range of slopes */
    for (int k = 0; k < 3; k++) {
        tg_params P;
        tg_params_init(&P);
        tg_tensor *x = tg_param(&P, "x", 3, (int[]){2, 3, 5});
        tg_params_alloc(&P);
        tg_test_fill(&P, 70 + (uint64_t)k, stds[k]);
        assert_int_equal(tg_gradcheck("exp", &P, f_exp, x, NULL), 0);
        tg_params_free(&P);
    }
}

/* a constant input records nothing */
static void test_no_grad_no_node(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *x = tg_zeros(&ctx, 1, (int[]){4});
    tg_tensor *y = tg_exp(&ctx, x);
    assert_int_equal(ctx.n_nodes, 0);
    assert_int_equal(y->requires_grad, 0);
    assert_float_equal(y->data[3], 1.0f, 0);
    tg_ctx_free(&ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_grad_values),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_no_grad_no_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
