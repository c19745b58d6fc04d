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

typedef struct { tg_tensor *x, *gain; float eps; } rms_case;

static tg_tensor *f_rms(tg_ctx *ctx, void *u) {
    rms_case *c = u;
    return tg_rmsnorm(ctx, c->x, c->gain, c->eps);
}

static void test_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    /* row [1,2,3,4]: mean of squares 30/4 = 7.5 */
    tg_tensor *x = tg_new(&ctx, 2, (int[]){1, 4});
    memcpy(x->data, (float[]){1, 2, 3, 4}, 4 * sizeof(float));
    tg_tensor *y = tg_rmsnorm(&ctx, x, NULL, 0.0f);
    for (int j = 0; j < 4; j++) assert_float_equal(y->data[j], (j + 1) / sqrt(7.5), 1e-6);
    /* eps under the root: [3,4] has mean square 12.5; with eps 0.5, rstd = 1/sqrt(13) */
    tg_tensor *x2 = tg_new(&ctx, 1, (int[]){2});
    memcpy(x2->data, (float[]){3, 4}, 2 * sizeof(float));
    tg_tensor *y2 = tg_rmsnorm(&ctx, x2, NULL, 0.5f);
    assert_float_equal(y2->data[0], 3 / sqrt(13.0), 1e-6);
    assert_float_equal(y2->data[1], 4 / sqrt(13.0), 1e-6);
    /* per-head gain: x [1,1,2,2] = heads [3,4] and [1,1], gain [[1,2],[10,100]];
     * head 0: rstd 1/sqrt(12.5), head 1: rstd 1 */
    tg_tensor *xh = tg_new(&ctx, 4, (int[]){1, 1, 2, 2}), *g = tg_new(&ctx, 2, (int[]){2, 2});
    memcpy(xh->data, (float[]){3, 4, 1, 1}, 4 * sizeof(float));
    memcpy(g->data, (float[]){1, 2, 10, 100}, 4 * sizeof(float));
    tg_tensor *yh = tg_rmsnorm(&ctx, xh, g, 0.0f);
    const double want[] = {3 / sqrt(12.5), 8 / sqrt(12.5), 10, 100};
    for (int j = 0; j < 4; j++) assert_float_equal(yh->data[j], want[j], 1e-5);
    tg_ctx_free(&ctx);
}

/* dgain = Σ over repeats of dy ⊙ x̂; dx by the compact formula, by hand */
static void test_grad_values(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 2, (int[]){2, 2}), *g = tg_param(&P, "g", 1, (int[]){2});
    tg_params_alloc(&P);
    memcpy(x->data, (float[]){3, 4, 1, 1}, 4 * sizeof(float));
    memcpy(g->data, (float[]){2, 1}, 2 * sizeof(float));
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *y = tg_rmsnorm(&ctx, x, g, 0.0f);
    tg_backward_seed(&ctx, y, (float[]){1, 0, 1, 1});
    /* x̂ row 0 = [3,4]/√12.5, row 1 = [1,1] */
    const double rs = 1 / sqrt(12.5);
    assert_float_equal(g->grad[0], 3 * rs + 1, 1e-6);
    assert_float_equal(g->grad[1], 1, 1e-6);
    /* row 0: ĝ = [2,0], mean(ĝ ⊙ x̂) = 3·rs, dx = rs · (ĝ − x̂ · 3·rs) */
    assert_float_equal(x->grad[0], rs * (2 - 9 * rs * rs), 1e-6);
    assert_float_equal(x->grad[1], rs * (0 - 12 * rs * rs), 1e-6);
    /* row 1: ĝ = [2,1], mean(ĝ ⊙ x̂) = 1.5, dx = ĝ − 1.5 */
    assert_float_equal(x->grad[2], 0.5, 1e-6);
    assert_float_equal(x->grad[3], -0.5, 1e-6);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

/* x [B,T,H,D] = [2,3,2,4] with gain [D], [H,D], none; a 2-D x; and x a constant */
static void test_gradcheck(void **s) {
    (void)s;
    const int gnd[3] = {1, 2, 0};
    const int gshape[3][2] = {{4}, {2, 4}, {0}};
    for (int k = 0; k < 3; k++) {
        tg_params P;
        tg_params_init(&P);
        rms_case c = { .eps = 1e-6f };
        c.x = tg_param(&P, "x", 4, (int[]){2, 3, 2, 4});
        if (gnd[k]) c.gain = tg_param(&P, "gain", gnd[k], gshape[k]);
        tg_params_alloc(&P);
        tg_test_fill(&P, 120 + (uint64_t)k, 1.0f);
        char label[48];
        snprintf(label, sizeof label, "rmsnorm gain ndim %d", gnd[k]);
        assert_int_equal(tg_gradcheck(label, &P, f_rms, &c, NULL), 0);
        tg_params_free(&P);
    }
    tg_params P;
    tg_params_init(&P);
    rms_case c = { .eps = 0.25f };
    c.x = tg_param(&P, "x", 2, (int[]){3, 5});
    c.gain = tg_param(&P, "gain", 2, (int[]){3, 5});   /* the whole shape is trailing too */
    tg_params_alloc(&P);
    tg_test_fill(&P, 130, 1.0f);
    assert_int_equal(tg_gradcheck("rmsnorm 2-D, full gain", &P, f_rms, &c, NULL), 0);
    tg_params_free(&P);

    tg_ctx consts;
    tg_ctx_init(&consts, 0);
    tg_rng r;
    tg_rng_seed(&r, 4, 4);
    tg_params_init(&P);
    c = (rms_case){ .eps = 1e-6f };
    c.x = tg_new(&consts, 3, (int[]){2, 3, 4});
    tg_fill_normal(&r, c.x->data, c.x->numel, 0.0f, 1.0f);
    c.gain = tg_param(&P, "gain", 2, (int[]){3, 4});
    tg_params_alloc(&P);
    tg_test_fill(&P, 140, 1.0f);
    assert_int_equal(tg_gradcheck("rmsnorm const x", &P, f_rms, &c, NULL), 0);
    tg_params_free(&P);
    tg_ctx_free(&consts);
}

static void test_errors(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    tg_tensor *x = tg_new(&ctx, 4, (int[]){2, 3, 2, 4});
    tg_tensor *g3 = tg_new(&ctx, 1, (int[]){3}), *g34 = tg_new(&ctx, 2, (int[]){3, 4});
    tg_tensor *x2 = tg_new(&ctx, 2, (int[]){2, 4}), *g224 = tg_new(&ctx, 3, (int[]){2, 2, 4});
    EXPECT_TG_ERROR(&c, tg_rmsnorm(&ctx, x, g3, 1e-6f),
                    "tg_rmsnorm: gain [3] does not match x [2,3,2,4]: it must have x's trailing dimensions");
    EXPECT_TG_ERROR(&c, tg_rmsnorm(&ctx, x, g34, 1e-6f), "tg_rmsnorm: gain [3,4] does not match x [2,3,2,4]");
    EXPECT_TG_ERROR(&c, tg_rmsnorm(&ctx, x2, g224, 1e-6f), "tg_rmsnorm: gain [2,2,4] does not match x [2,4]");
    EXPECT_TG_ERROR(&c, tg_rmsnorm(&ctx, x2, NULL, NAN), "tg_rmsnorm: eps is nan for x [2,4]");
    tg_ctx_free(&ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_grad_values),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
