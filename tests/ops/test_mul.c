#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "tg_ops.h"
#include "testutil.h"

typedef struct { tg_tensor *a, *b; } mul_case;

static tg_tensor *f_mul(tg_ctx *ctx, void *u) {
    mul_case *c = u;
    return tg_mul(ctx, c->a, c->b);
}

static void test_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *a = tg_new(&ctx, 2, (int[]){2, 3}), *b = tg_new(&ctx, 2, (int[]){2, 3});
    tg_tensor *w = tg_new(&ctx, 1, (int[]){3});
    memcpy(a->data, (float[]){1, 2, 3, 4, 5, 6}, 6 * sizeof(float));
    memcpy(b->data, (float[]){-1, 0.5f, 2, 3, -2, 0}, 6 * sizeof(float));
    memcpy(w->data, (float[]){10, 100, -1}, 3 * sizeof(float));
    tg_tensor *c = tg_mul(&ctx, a, b);
    const float want[] = {-1, 1, 6, 12, -10, 0};
    for (int i = 0; i < 6; i++) assert_float_equal(c->data[i], want[i], 0);
    tg_tensor *d = tg_mul(&ctx, a, w);   /* [3] repeated over the 2 rows */
    const float want2[] = {10, 200, -3, 40, 500, -6};
    for (int i = 0; i < 6; i++) assert_float_equal(d->data[i], want2[i], 0);
    tg_ctx_free(&ctx);
}

/* da = g ⊙ b, db = Σ_rows g ⊙ a, by hand for a [2,3] ⊙ w [3], g = 1 */
static void test_grad_values(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *a = tg_param(&P, "a", 2, (int[]){2, 3}), *w = tg_param(&P, "w", 1, (int[]){3});
    tg_params_alloc(&P);
    memcpy(a->data, (float[]){1, 2, 3, 4, 5, 6}, 6 * sizeof(float));
    memcpy(w->data, (float[]){10, 100, -1}, 3 * sizeof(float));
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *y = tg_mul(&ctx, a, w);
    tg_backward_seed(&ctx, y, (float[]){1, 1, 1, 1, 1, 1});
    const float da[] = {10, 100, -1, 10, 100, -1}, dw[] = {5, 7, 9};
    for (int i = 0; i < 6; i++) assert_float_equal(a->grad[i], da[i], 0);
    for (int j = 0; j < 3; j++) assert_float_equal(w->grad[j], dw[j], 0);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

static void test_gradcheck(void **s) {
    (void)s;
    const int B = 2, T = 3, D = 4;
    const int bshape[3][3] = {{B, T, D}, {D}, {T, D}};
    const int bnd[3] = {3, 1, 2};
    for (int k = 0; k < 3; k++) {
        tg_params P;
        tg_params_init(&P);
        mul_case c;
        c.a = tg_param(&P, "a", 3, (int[]){B, T, D});
        c.b = tg_param(&P, "b", bnd[k], bshape[k]);
        tg_params_alloc(&P);
        tg_test_fill(&P, 30 + (uint64_t)k, 1.0f);
        assert_int_equal(tg_gradcheck("mul", &P, f_mul, &c, NULL), 0);
        tg_params_free(&P);
    }
    /* a param, b a constant: b's grad is NULL and must be left alone */
    tg_ctx consts;
    tg_ctx_init(&consts, 0);
    tg_params P;
    tg_params_init(&P);
    mul_case c;
    c.a = tg_param(&P, "a", 3, (int[]){B, T, D});
    c.b = tg_new(&consts, 2, (int[]){T, D});
    for (int i = 0; i < T * D; i++) c.b->data[i] = 0.25f * (float)(i - 5);
    tg_params_alloc(&P);
    tg_test_fill(&P, 40, 1.0f);
    assert_int_equal(tg_gradcheck("mul const b", &P, f_mul, &c, NULL), 0);
    tg_params_free(&P);
    tg_ctx_free(&consts);
}

/* x ⊙ x: d/dx = 2x, from both inputs of one node */
static void test_used_twice(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 2, (int[]){3, 2});
    tg_params_alloc(&P);
    tg_test_fill(&P, 5, 1.0f);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *y = tg_mul(&ctx, x, x);
    tg_backward_seed(&ctx, y, (float[]){1, 1, 1, 1, 1, 1});
    for (int i = 0; i < 6; i++) assert_float_equal(x->grad[i], 2 * x->data[i], 1e-6);
    mul_case c = { x, x };
    assert_int_equal(tg_gradcheck("mul x*x", &P, f_mul, &c, NULL), 0);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

static void test_shape_errors(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    tg_tensor *a = tg_new(&ctx, 2, (int[]){4, 5}), *b = tg_new(&ctx, 2, (int[]){5, 4});
    tg_tensor *v = tg_new(&ctx, 1, (int[]){4});
    EXPECT_TG_ERROR(&c, tg_mul(&ctx, a, b), "tg_mul: [4,5] * [5,4]: b must have a's shape or a's trailing dimensions");
    EXPECT_TG_ERROR(&c, tg_mul(&ctx, a, v), "tg_mul: [4,5] * [4]");
    EXPECT_TG_ERROR(&c, tg_mul(&ctx, v, a), "tg_mul: [4] * [4,5]");
    tg_ctx_free(&ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_grad_values),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_used_twice),
        cmocka_unit_test(test_shape_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
