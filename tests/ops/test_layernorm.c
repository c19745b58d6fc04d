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

typedef struct { tg_tensor *x, *gain, *bias; float eps; } ln_case;

static tg_tensor *f_ln(tg_ctx *ctx, void *u) {
    ln_case *c = u;
    return tg_layernorm(ctx, c->x, c->gain, c->bias, c->eps);
}

static void test_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    /* row [1,2,3,4]: mean 2.5, variance 1.25, rstd 1/sqrt(1.25) */
    tg_tensor *x = tg_new(&ctx, 2, (int[]){2, 4});
    memcpy(x->data, (float[]){1, 2, 3, 4, 10, 10, 10, 10}, 8 * sizeof(float));
    tg_tensor *y = tg_layernorm(&ctx, x, NULL, NULL, 0.0f);
    const float r = 1.3416407865f, q = 0.4472135955f;   /* 1.5/sqrt(1.25), 0.5/sqrt(1.25) */
    const float want[] = {-r, -q, q, r};
    for (int j = 0; j < 4; j++) assert_float_equal(y->data[j], want[j], 1e-6);
    /* a constant row is all zeros once eps keeps rstd finite */
    tg_tensor *ye = tg_layernorm(&ctx, x, NULL, NULL, 1e-5f);
    for (int j = 4; j < 8; j++) assert_float_equal(ye->data[j], 0, 0);
    /* gain and bias: y = x̂ ⊙ gain + bias */
    tg_tensor *g = tg_new(&ctx, 1, (int[]){4}), *b = tg_new(&ctx, 1, (int[]){4});
    memcpy(g->data, (float[]){1, 2, -1, 0.5f}, 4 * sizeof(float));
    memcpy(b->data, (float[]){0, 1, 2, 3}, 4 * sizeof(float));
    tg_tensor *yg = tg_layernorm(&ctx, x, g, b, 0.0f);
    const float want_g[] = {-r, 1 - 2 * q, 2 - q, 3 + 0.5f * r};
    for (int j = 0; j < 4; j++) assert_float_equal(yg->data[j], want_g[j], 1e-6);
    /* eps enters under the root: row [1,-1] has variance 1, with eps 1 rstd = 1/sqrt(2) */
    tg_tensor *x2 = tg_new(&ctx, 1, (int[]){2});
    memcpy(x2->data, (float[]){1, -1}, 2 * sizeof(float));
    tg_tensor *y2 = tg_layernorm(&ctx, x2, NULL, NULL, 1.0f);
    assert_float_equal(y2->data[0], (float)(1 / sqrt(2.0)), 1e-6);
    assert_float_equal(y2->data[1], (float)(-1 / sqrt(2.0)), 1e-6);
    tg_ctx_free(&ctx);
}

/* dbias = Σ_rows dy, dgain = Σ_rows dy ⊙ x̂, dx by the compact formula, by hand */
static void test_grad_values(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 2, (int[]){2, 4});
    tg_tensor *g = tg_param(&P, "g", 1, (int[]){4}), *b = tg_param(&P, "b", 1, (int[]){4});
    tg_params_alloc(&P);
    memcpy(x->data, (float[]){1, 2, 3, 4, 4, 3, 2, 1}, 8 * sizeof(float));
    for (int j = 0; j < 4; j++) g->data[j] = 1.0f + (float)j;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *y = tg_layernorm(&ctx, x, g, b, 0.0f);
    tg_backward_seed(&ctx, y, (float[]){1, 0, 0, 0, 1, 0, 0, 0});
    assert_float_equal(b->grad[0], 2, 0);
    for (int j = 1; j < 4; j++) assert_float_equal(b->grad[j], 0, 0);
    assert_float_equal(g->grad[0], 0, 1e-6);   /* x̂[0] = −r in row 0, +r in row 1 */
    /* row 0: x̂ = [−r, −q, q, r] (r = 1.5/√1.25, q = 0.5/√1.25), ĝ = [1,0,0,0], mean(ĝ) = 1/4, mean(ĝ ⊙ x̂) = −r/4, r² = 1.8, r·q = 0.6, so
     * dx = rstd · (ĝ − 1/4 + x̂·r/4) = rstd · [0.3, −0.4, −0.1, 0.2]; row 1 (x reversed) alike */
    const float rs = 0.894427191f, want[] = {0.3f * rs, -0.4f * rs, -0.1f * rs, 0.2f * rs};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) assert_float_equal(x->grad[i * 4 + j], want[j], 1e-6);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

/* x [2,3,5] with gain and bias, each of them absent, and x a constant */
static void test_gradcheck(void **s) {
    (void)s;
    for (int k = 0; k < 4; k++) {
        tg_params P;
        tg_params_init(&P);
        ln_case c = { .eps = 1e-5f };
        c.x = tg_param(&P, "x", 3, (int[]){2, 3, 5});
        if (k != 1) c.gain = tg_param(&P, "gain", 1, (int[]){5});
        if (k != 2) c.bias = tg_param(&P, "bias", 1, (int[]){5});
        tg_params_alloc(&P);
        tg_test_fill(&P, 100 + (uint64_t)k, 1.0f);
        if (k == 3) c.eps = 0.5f;   /* a large eps is part of the function, not a fudge */
        char label[48];
        snprintf(label, sizeof label, "layernorm variant %d", k);
        assert_int_equal(tg_gradcheck(label, &P, f_ln, &c, NULL), 0);
        tg_params_free(&P);
    }
    tg_ctx consts;
    tg_ctx_init(&consts, 0);
    tg_rng r;
    tg_rng_seed(&r, 3, 3);
    tg_params P;
    tg_params_init(&P);
    ln_case c = { .eps = 1e-5f };
    c.x = tg_new(&consts, 2, (int[]){4, 3});
    tg_fill_normal(&r, c.x->data, c.x->numel, 0.5f, 2.0f);
    c.gain = tg_param(&P, "gain", 1, (int[]){3});
    c.bias = tg_param(&P, "bias", 1, (int[]){3});
    tg_params_alloc(&P);
    tg_test_fill(&P, 110, 1.0f);
    assert_int_equal(tg_gradcheck("layernorm const x", &P, f_ln, &c, NULL), 0);
    tg_params_free(&P);
    tg_ctx_free(&consts);
}

static void test_errors(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    tg_tensor *x = tg_new(&ctx, 3, (int[]){2, 3, 5});
    tg_tensor *g4 = tg_new(&ctx, 1, (int[]){4}), *g5 = tg_new(&ctx, 1, (int[]){5});
    tg_tensor *g35 = tg_new(&ctx, 2, (int[]){3, 5});
    EXPECT_TG_ERROR(&c, tg_layernorm(&ctx, x, g4, g5, 1e-5f), "tg_layernorm: gain [4] does not match x [2,3,5]: it must be [5]");
    EXPECT_TG_ERROR(&c, tg_layernorm(&ctx, x, g5, g35, 1e-5f), "tg_layernorm: bias [3,5] does not match x [2,3,5]");
    EXPECT_TG_ERROR(&c, tg_layernorm(&ctx, x, g5, g5, -1.0f), "tg_layernorm: eps is -1 for x [2,3,5]");
    tg_ctx_free(&ctx);
}

/* The "input used twice" check of an op that readies its inputs' grads itself
 * (tests/testutil.h, docs/ops.md#the-fast-kind-of-op). */
static tg_tensor *twice_op(tg_ctx *ctx, tg_tensor *h, void *u) {
    tg_tensor **gb = u;
    return tg_layernorm(ctx, h, gb[0], gb[1], 1e-5f);
}

static void test_input_used_twice(void **s) {
    (void)s;
    tg_ctx cc;
    tg_ctx_init(&cc, 0);
    tg_tensor *gb[2] = {tg_new(&cc, 1, (int[]){5}), tg_new(&cc, 1, (int[]){5})};
    for (int i = 0; i < 5; i++) gb[0]->data[i] = 1.0f + 0.1f * (float)i, gb[1]->data[i] = 0.05f * (float)i;
    assert_int_equal(tg_test_used_twice_shape("layernorm", 2, (int[]){3, 5}, twice_op, gb), 0);
    tg_ctx_free(&cc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_used_twice),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_grad_values),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
