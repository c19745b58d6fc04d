#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>
#include <omp.h>

#include "gradcheck.h"
#include "tg_ops.h"
#include "testutil.h"

typedef struct { tg_tensor *x, *b; } bg_case;

static tg_tensor *f_bias_gelu(tg_ctx *ctx, void *u) {
    bg_case *c = u;
    return tg_bias_gelu(ctx, c->x, c->b);
}

/* x also reaches the output directly: dx both written and added to */
static tg_tensor *f_bias_gelu_times_x(tg_ctx *ctx, void *u) {
    bg_case *c = u;
    return tg_mul(ctx, tg_bias_gelu(ctx, c->x, c->b), c->x);
}

static void test_gradcheck(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    bg_case c = { tg_param(&P, "x", 3, (int[]){2, 3, 5}), tg_param(&P, "b", 1, (int[]){5}) };
    tg_params_alloc(&P);
    tg_test_fill(&P, 151, 2.0f);   /* std 2 reaches the curved tails */
    assert_int_equal(tg_gradcheck("bias_gelu", &P, f_bias_gelu, &c, NULL), 0);
    assert_int_equal(tg_gradcheck("bias_gelu(x,b)*x", &P, f_bias_gelu_times_x, &c, NULL), 0);
    tg_params_free(&P);
}

/* The same bits as tg_gelu(tg_add(x, b)), forward and backward, over more
 * rows than one parallel part holds, on 1 and 2 threads. x is an activation
 * (its grad written, not added to), b a parameter. */
static void test_same_as_add_then_gelu(void **s) {
    (void)s;
    enum { R = 300, D = 96 };   /* 300 rows: several parts of ceil(8192 / 96) rows */
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        tg_params P;
        tg_params_init(&P);
        tg_tensor *w = tg_param(&P, "w", 2, (int[]){R, D}), *b = tg_param(&P, "b", 1, (int[]){D});
        tg_params_alloc(&P);
        tg_test_fill(&P, 152, 2.0f);
        float *dout = malloc(sizeof(float) * R * D), *y[2], *dw[2], *db[2];
        tg_rng r;
        tg_rng_seed(&r, 153, 1);
        tg_fill_normal(&r, dout, R * D, 0.0f, 1.0f);
        for (int k = 0; k < 2; k++) {
            tg_ctx ctx;
            tg_ctx_init(&ctx, 0);
            tg_params_zero_grad(&P);
            tg_tensor *x = tg_scale(&ctx, w, 1.0f);   /* an activation */
            tg_tensor *out = k ? tg_bias_gelu(&ctx, x, b) : tg_gelu(&ctx, tg_add(&ctx, x, b));
            tg_backward_seed(&ctx, out, dout);
            y[k] = malloc(sizeof(float) * R * D);
            dw[k] = malloc(sizeof(float) * R * D);
            db[k] = malloc(sizeof(float) * D);
            memcpy(y[k], out->data, sizeof(float) * R * D);
            memcpy(dw[k], w->grad, sizeof(float) * R * D);
            memcpy(db[k], b->grad, sizeof(float) * D);
            tg_ctx_free(&ctx);
        }
        assert_memory_equal(y[0], y[1], sizeof(float) * R * D);
        assert_memory_equal(dw[0], dw[1], sizeof(float) * R * D);
        assert_memory_equal(db[0], db[1], sizeof(float) * D);
        for (int k = 0; k < 2; k++) {
            free(y[k]);
            free(dw[k]);
            free(db[k]);
        }
        free(dout);
        tg_params_free(&P);
    }
    omp_set_num_threads(1);
}

static void test_errors(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    tg_tensor *x = tg_new(&ctx, 2, (int[]){3, 4}), *b3 = tg_new(&ctx, 1, (int[]){3});
    tg_tensor *b2d = tg_new(&ctx, 2, (int[]){1, 4});
    EXPECT_TG_ERROR(&c, tg_bias_gelu(&ctx, x, b3), "tg_bias_gelu: bias [3] does not match x [3,4]: it must be [4]");
    EXPECT_TG_ERROR(&c, tg_bias_gelu(&ctx, x, b2d), "tg_bias_gelu: bias [1,4] does not match x [3,4]: it must be [4]");
    tg_ctx_free(&ctx);
}

/* The "input used twice" check of an op that readies its inputs' grads itself
 * (tests/testutil.h, docs/ops.md#the-fast-kind-of-op). */
static tg_tensor *twice_op(tg_ctx *ctx, tg_tensor *h, void *u) {
    return tg_bias_gelu(ctx, h, u);
}

static void test_input_used_twice(void **s) {
    (void)s;
    tg_ctx cc;
    tg_ctx_init(&cc, 0);
    tg_tensor *b = tg_new(&cc, 1, (int[]){5});
    for (int i = 0; i < 5; i++) b->data[i] = 0.1f * (float)i - 0.2f;
    assert_int_equal(tg_test_used_twice_shape("bias_gelu", 2, (int[]){3, 5}, twice_op, b), 0);
    tg_ctx_free(&cc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_used_twice),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_same_as_add_then_gelu),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
