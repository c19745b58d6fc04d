#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "tg_ops.h"
#include "testutil.h"

typedef struct { tg_tensor *a, *b; } add_case;

static tg_tensor *f_add(tg_ctx *ctx, void *u) {
    add_case *c = u;
    return tg_add(ctx, c->a, c->b);
}

static void test_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *a = tg_new(&ctx, 2, (int[]){2, 3}), *b = tg_new(&ctx, 1, (int[]){3});
    memcpy(a->data, (float[]){1, 2, 3, 4, 5, 6}, 6 * sizeof(float));
    memcpy(b->data, (float[]){10, 20, 30}, 3 * sizeof(float));
    tg_tensor *c = tg_add(&ctx, a, b);   /* bias repeated over the 2 rows */
    const float want[] = {11, 22, 33, 14, 25, 36};
    assert_int_equal(c->ndim, 2);
    for (int i = 0; i < 6; i++) assert_float_equal(c->data[i], want[i], 0);
    tg_tensor *d = tg_add(&ctx, a, a);
    for (int i = 0; i < 6; i++) assert_float_equal(d->data[i], 2 * (i + 1), 0);
    tg_ctx_free(&ctx);
}

/* db of a broadcast bias sums dout over the repeated dims: a [2,2,3] + b [2,3] */
static void test_bias_grad_values(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *a = tg_param(&P, "a", 3, (int[]){2, 2, 3}), *b = tg_param(&P, "b", 2, (int[]){2, 3});
    tg_params_alloc(&P);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *c = tg_add(&ctx, a, b);
    float seed[12];
    for (int i = 0; i < 12; i++) seed[i] = (float)i;
    tg_backward_seed(&ctx, c, seed);
    for (int i = 0; i < 12; i++) assert_float_equal(a->grad[i], i, 0);
    for (int j = 0; j < 6; j++) assert_float_equal(b->grad[j], j + (j + 6), 0);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

/* same shape, bias [D], bias [T,D]; and a constant a (no grad) with a param b */
static void test_gradcheck(void **s) {
    (void)s;
    const int B = 2, T = 3, D = 4;
    const int bshape[3][3] = {{B, T, D}, {D}, {T, D}};
    const int bnd[3] = {3, 1, 2};
    for (int k = 0; k < 3; k++) {
        tg_params P;
        tg_params_init(&P);
        add_case c;
        c.a = tg_param(&P, "a", 3, (int[]){B, T, D});
        c.b = tg_param(&P, "b", bnd[k], bshape[k]);
        tg_params_alloc(&P);
        tg_test_fill(&P, 10 + (uint64_t)k, 1.0f);
        assert_int_equal(tg_gradcheck("add", &P, f_add, &c, NULL), 0);
        tg_params_free(&P);
    }
    tg_ctx consts;
    tg_ctx_init(&consts, 0);
    tg_params P;
    tg_params_init(&P);
    add_case c;
    c.a = tg_zeros(&consts, 3, (int[]){B, T, D});
    c.b = tg_param(&P, "b", 1, (int[]){D});
    tg_params_alloc(&P);
    tg_test_fill(&P, 20, 1.0f);
    assert_int_equal(tg_gradcheck("add const a", &P, f_add, &c, NULL), 0);
    tg_params_free(&P);
    tg_ctx_free(&consts);
}

/* x used twice: both contributions reach x's grad */
static void test_used_twice(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 2, (int[]){2, 3});
    tg_params_alloc(&P);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *y = tg_add(&ctx, x, x);
    const float ones[6] = {1, 1, 1, 1, 1, 1};
    tg_backward_seed(&ctx, y, ones);
    for (int i = 0; i < 6; i++) assert_float_equal(x->grad[i], 2, 0);
    add_case c = { x, x };
    tg_test_fill(&P, 3, 1.0f);
    assert_int_equal(tg_gradcheck("add x+x", &P, f_add, &c, NULL), 0);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

static void test_shape_errors(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    tg_tensor *a = tg_new(&ctx, 3, (int[]){2, 3, 4});
    tg_tensor *b1 = tg_new(&ctx, 1, (int[]){3}), *b2 = tg_new(&ctx, 2, (int[]){2, 4});
    tg_tensor *big = tg_new(&ctx, 4, (int[]){5, 2, 3, 4});
    EXPECT_TG_ERROR(&c, tg_add(&ctx, a, b1), "tg_add: [2,3,4] + [3]");
    EXPECT_TG_ERROR(&c, tg_add(&ctx, a, b2), "tg_add: [2,3,4] + [2,4]: b must have a's shape or a's trailing dimensions");
    EXPECT_TG_ERROR(&c, tg_add(&ctx, a, big), "tg_add: [2,3,4] + [5,2,3,4]");
    tg_ctx_free(&ctx);
}

/* The "input used twice" check of an op that readies its inputs' grads itself
 * (tests/testutil.h, docs/ops.md#the-fast-kind-of-op). */
static tg_tensor *twice_op(tg_ctx *ctx, tg_tensor *h, void *u) {
    (void)u;
    return tg_add(ctx, h, h);   /* h twice inside the op too */
}

static void test_input_used_twice(void **s) {
    (void)s;
    assert_int_equal(tg_test_used_twice_shape("add", 2, (int[]){3, 4}, twice_op, NULL), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_used_twice),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_bias_grad_values),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_used_twice),
        cmocka_unit_test(test_shape_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
