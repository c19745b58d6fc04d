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

typedef struct { tg_tensor *x; float s; } scale_case;

static tg_tensor *f_scale(tg_ctx *ctx, void *u) {
    scale_case *c = u;
    return tg_scale(ctx, c->x, c->s);
}

static void test_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *x = tg_new(&ctx, 2, (int[]){2, 2});
    memcpy(x->data, (float[]){1, -2, 0.5f, 4}, 4 * sizeof(float));
    tg_tensor *y = tg_scale(&ctx, x, -1.5f);
    const float want[] = {-1.5f, 3, -0.75f, -6};
    for (int i = 0; i < 4; i++) assert_float_equal(y->data[i], want[i], 0);
    assert_true(y->data != x->data);
    tg_ctx_free(&ctx);
}

static void test_grad_values(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 1, (int[]){3});
    tg_params_alloc(&P);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *y = tg_scale(&ctx, x, 0.25f);
    tg_backward_seed(&ctx, y, (float[]){4, 8, -2});
    const float want[] = {1, 2, -0.5f};
    for (int i = 0; i < 3; i++) assert_float_equal(x->grad[i], want[i], 0);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

static void test_gradcheck(void **s) {
    (void)s;
    const float scales[] = {-1.5f, 0.125f, 3.0f};
    for (int k = 0; k < 3; k++) {
        tg_params P;
        tg_params_init(&P);
        scale_case c = { .s = scales[k] };
        c.x = tg_param(&P, "x", 3, (int[]){2, 3, 5});
        tg_params_alloc(&P);
        tg_test_fill(&P, 50 + (uint64_t)k, 1.0f);
        assert_int_equal(tg_gradcheck("scale", &P, f_scale, &c, NULL), 0);
        tg_params_free(&P);
    }
}

/* a constant input records nothing */
static void test_no_grad_no_node(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *x = tg_zeros(&ctx, 2, (int[]){3, 4});
    tg_tensor *y = tg_scale(&ctx, x, 2.0f);
    assert_int_equal(ctx.n_nodes, 0);
    assert_int_equal(y->requires_grad, 0);
    tg_ctx_free(&ctx);
}

static void test_errors(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    tg_tensor *x = tg_zeros(&ctx, 2, (int[]){3, 4});
    EXPECT_TG_ERROR(&c, tg_scale(&ctx, x, INFINITY), "tg_scale: the scale is inf for [3,4]; it must be finite");
    EXPECT_TG_ERROR(&c, tg_scale(&ctx, x, NAN), "tg_scale: the scale is");
    tg_ctx_free(&ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_grad_values),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_no_grad_no_node),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
