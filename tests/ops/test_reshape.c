#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "tg_ops.h"
#include "testutil.h"

typedef struct { tg_tensor *x, *w; } reshape_case;

/* [2,3,4] -> [6,4] ⊙ w[4] -> [4,6]: the view feeds a real op, then reshapes again */
static tg_tensor *f_chain(tg_ctx *ctx, void *u) {
    reshape_case *c = u;
    tg_tensor *v = tg_reshape(ctx, c->x, 2, (int[]){6, 4});
    return tg_reshape(ctx, tg_mul(ctx, v, c->w), 2, (int[]){4, 6});
}

/* x + reshape(x): x is read twice, once through a view */
static tg_tensor *f_twice(tg_ctx *ctx, void *u) {
    reshape_case *c = u;
    tg_tensor *v = tg_reshape(ctx, tg_reshape(ctx, c->x, 1, (int[]){24}), 3, (int[]){2, 3, 4});
    return tg_add(ctx, c->x, v);
}

static void test_view_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *x = tg_new(&ctx, 2, (int[]){2, 3});
    for (int i = 0; i < 6; i++) x->data[i] = (float)i;
    tg_tensor *v = tg_reshape(&ctx, x, 3, (int[]){3, 1, 2});
    assert_string_equal(TG_SHAPE(v), "[3,1,2]");
    assert_int_equal(v->numel, 6);
    assert_ptr_equal(v->data, x->data);   /* a view: no copy */
    x->data[5] = 42;
    assert_float_equal(v->data[5], 42, 0);
    tg_ctx_free(&ctx);
}

static void test_grad_values(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 2, (int[]){2, 3});
    tg_params_alloc(&P);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *v = tg_reshape(&ctx, x, 2, (int[]){3, 2});
    tg_backward_seed(&ctx, v, (float[]){1, 2, 3, 4, 5, 6});
    assert_true(v->grad != x->grad);   /* its own grad */
    for (int i = 0; i < 6; i++) assert_float_equal(x->grad[i], i + 1, 0);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

static void test_gradcheck(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    reshape_case c;
    c.x = tg_param(&P, "x", 3, (int[]){2, 3, 4});
    c.w = tg_param(&P, "w", 1, (int[]){4});
    tg_params_alloc(&P);
    tg_test_fill(&P, 60, 1.0f);
    assert_int_equal(tg_gradcheck("reshape chain", &P, f_chain, &c, NULL), 0);
    assert_int_equal(tg_gradcheck("reshape x + view(x)", &P, f_twice, &c, NULL), 0);
    tg_params_free(&P);
}

/* two views of x summed: x's grad gets 2 */
static void test_used_twice(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 2, (int[]){2, 3});
    tg_params_alloc(&P);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *a = tg_reshape(&ctx, x, 1, (int[]){6}), *b = tg_reshape(&ctx, x, 1, (int[]){6});
    tg_tensor *y = tg_add(&ctx, a, b);
    tg_backward_seed(&ctx, y, (float[]){1, 1, 1, 1, 1, 1});
    for (int i = 0; i < 6; i++) assert_float_equal(x->grad[i], 2, 0);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

/* An activation whose only reader is the view takes the view's grad buffer (no
 * copy); one read by another op too keeps its own, and the view's grad stays dout. */
static void test_adopted_grad(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *w = tg_param(&P, "w", 2, (int[]){2, 3});
    tg_params_alloc(&P);
    for (int i = 0; i < 6; i++) w->data[i] = 0.5f * (float)(i + 1);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *h = tg_mul(&ctx, w, w), *v = tg_reshape(&ctx, h, 1, (int[]){6});
    tg_backward_seed(&ctx, v, (float[]){1, 2, 3, 4, 5, 6});
    assert_ptr_equal(h->grad, v->grad);
    for (int i = 0; i < 6; i++) {
        assert_float_equal(h->grad[i], i + 1, 0);
        assert_float_equal(w->grad[i], 2 * w->data[i] * (i + 1), 1e-6);
    }
    tg_ctx_reset(&ctx);
    tg_params_zero_grad(&P);
    h = tg_mul(&ctx, w, w);
    tg_tensor *g = tg_mul(&ctx, h, h), *r = tg_reshape(&ctx, h, 2, (int[]){2, 3});
    tg_tensor *y = tg_add(&ctx, g, r);   /* h: read by g's product, then by the view */
    tg_backward_seed(&ctx, y, (float[]){1, 1, 1, 1, 1, 1});
    assert_true(h->grad != r->grad);
    for (int i = 0; i < 6; i++) {
        const float hv = w->data[i] * w->data[i];
        assert_float_equal(r->grad[i], 1, 0);   /* the view's own grad: dout */
        assert_float_equal(h->grad[i], 1 + 2 * hv, 1e-5);
    }
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

static void test_errors(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    tg_tensor *x = tg_new(&ctx, 2, (int[]){2, 3});
    EXPECT_TG_ERROR(&c, tg_reshape(&ctx, x, 2, (int[]){4, 2}), "tg_reshape: [2,3] has 6 elements, [4,2] has 8");
    EXPECT_TG_ERROR(&c, tg_reshape(&ctx, x, 2, (int[]){0, 6}), "tg_reshape: [2,3] to [0,6]: dimension 0 is 0");
    EXPECT_TG_ERROR(&c, tg_reshape(&ctx, x, 5, (int[]){1, 1, 2, 3, 1}), "tg_reshape: [2,3] to 5 dimensions");
    EXPECT_TG_ERROR(&c, tg_reshape(&ctx, x, 0, NULL), "tg_reshape: [2,3] to 0 dimensions");
    tg_ctx_free(&ctx);
}

/* The "input used twice" check of an op that readies its inputs' grads itself
 * (tests/testutil.h, docs/ops.md#the-fast-kind-of-op). */
static tg_tensor *twice_op(tg_ctx *ctx, tg_tensor *h, void *u) {
    (void)u;
    return tg_reshape(ctx, h, 2, (int[]){5, 3});
}

static void test_input_used_twice(void **s) {
    (void)s;
    assert_int_equal(tg_test_used_twice_shape("reshape", 2, (int[]){3, 5}, twice_op, NULL), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_used_twice),
        cmocka_unit_test(test_view_values),
        cmocka_unit_test(test_grad_values),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_used_twice),
        cmocka_unit_test(test_adopted_grad),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
