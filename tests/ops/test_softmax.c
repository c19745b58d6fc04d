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

static tg_tensor *vec(tg_ctx *ctx, int n, const float *v) {
    tg_tensor *t = tg_new(ctx, 1, (int[]){n});
    memcpy(t->data, v, (size_t)n * sizeof *v);
    return t;
}

/* The seed's figures: softmax([2, 1, 0.5]) = [0.63, 0.23, 0.14]; the same
 * scores times 11.3 put almost all the weight on the first. */
static void test_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *y = tg_softmax(&ctx, vec(&ctx, 3, (float[]){2, 1, 0.5f}), 0);
    const float want[] = {0.63f, 0.23f, 0.14f};
    for (int i = 0; i < 3; i++) assert_float_equal(y->data[i], want[i], 0.005);
    assert_float_equal(y->data[0] + y->data[1] + y->data[2], 1.0, 1e-6);

    y = tg_softmax(&ctx, vec(&ctx, 3, (float[]){2 * 11.3f, 1 * 11.3f, 0.5f * 11.3f}), 0);
    assert_true(y->data[0] > 0.9999f);
    assert_true(y->data[1] < 1e-4f && y->data[2] < 1e-4f);

    /* exp(1000) overflows float; the row max is subtracted first */
    y = tg_softmax(&ctx, vec(&ctx, 2, (float[]){1000, 1001}), 0);
    assert_true(isfinite(y->data[0]) && isfinite(y->data[1]));
    assert_float_equal(y->data[0], 1 / (1 + exp(1.0)), 1e-6);
    assert_float_equal(y->data[1], 1 / (1 + exp(-1.0)), 1e-6);
    y = tg_softmax(&ctx, vec(&ctx, 2, (float[]){-1000, -1001}), 0);
    assert_float_equal(y->data[0], 1 / (1 + exp(-1.0)), 1e-6);
    tg_ctx_free(&ctx);
}

/* Causal: row i of each [T,T] block weights keys 0..i, the rest exactly 0.
 * Masked inputs are never read: NaN and inf there change nothing. */
static void test_causal_mask(void **s) {
    (void)s;
    const int B = 2, T = 4;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *x = tg_new(&ctx, 3, (int[]){B, T, T});
    tg_rng r;
    tg_rng_seed(&r, 3, 1);
    tg_fill_normal(&r, x->data, x->numel, 0.0f, 2.0f);
    tg_tensor *y = tg_softmax(&ctx, x, 1);
    tg_tensor *x2 = tg_new_like(&ctx, x);
    memcpy(x2->data, x->data, (size_t)x->numel * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++)
            for (int j = i + 1; j < T; j++) x2->data[(b * T + i) * T + j] = j % 2 ? NAN : INFINITY;
    tg_tensor *y2 = tg_softmax(&ctx, x2, 1);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
            const float *row = y->data + (b * T + i) * T, *xr = x->data + (b * T + i) * T;
            double sum = 0, mx = -INFINITY;
            for (int j = 0; j <= i; j++) mx = fmax(mx, xr[j]);
            for (int j = 0; j <= i; j++) sum += exp(xr[j] - mx);
            for (int j = 0; j < T; j++) {
                if (j > i) assert_true(row[j] == 0.0f);
                else assert_float_equal(row[j], exp(xr[j] - mx) / sum, 1e-6);
                assert_true(row[j] == y2->data[(b * T + i) * T + j]);
            }
        }
    assert_true(y->data[0] == 1.0f);   /* the first query sees only itself */
    tg_ctx_free(&ctx);
}

typedef struct { tg_tensor *x; int causal; } sm_case;

static tg_tensor *f_sm(tg_ctx *ctx, void *u) {
    sm_case *c = u;
    return tg_softmax(ctx, c->x, c->causal);
}

static void check(int ndim, const int *shape, int causal, uint64_t seed) {
    tg_params P;
    tg_params_init(&P);
    sm_case c = { .causal = causal };
    c.x = tg_param(&P, "x", ndim, shape);
    tg_params_alloc(&P);
    tg_test_fill(&P, seed, 1.5f);
    char label[64];
    snprintf(label, sizeof label, "softmax %s causal=%d", TG_SHAPE(c.x), causal);
    assert_int_equal(tg_gradcheck(label, &P, f_sm, &c, NULL), 0);
    tg_params_free(&P);
}

static void test_grad(void **s) {
    (void)s;
    check(3, (int[]){2, 3, 5}, 0, 1);
    check(2, (int[]){7, 1}, 0, 2);                 /* a 1-wide row: y = 1, dx = 0 */
    check(4, (int[]){2, 3, 4, 4}, 0, 3);
    check(4, (int[]){2, 3, 4, 4}, 1, 4);
    check(3, (int[]){3, 5, 5}, 1, 5);
}

/* Masked entries get gradient exactly 0, and grads add into what is there. */
static void test_grad_masked_zero_and_accumulates(void **s) {
    (void)s;
    const int T = 3;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 3, (int[]){2, T, T});
    tg_params_alloc(&P);
    tg_test_fill(&P, 9, 1.0f);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    float dy[18];
    for (int i = 0; i < 18; i++) dy[i] = (float)(i % 5) - 2.0f;
    tg_backward_seed(&ctx, tg_softmax(&ctx, x, 1), dy);
    float g1[18];
    memcpy(g1, x->grad, sizeof g1);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < T; i++)
            for (int j = i + 1; j < T; j++) assert_true(g1[(b * T + i) * T + j] == 0.0f);
    tg_ctx_reset(&ctx);
    tg_backward_seed(&ctx, tg_softmax(&ctx, x, 1), dy);   /* param grads accumulate */
    for (int i = 0; i < 18; i++) assert_float_equal(x->grad[i], 2 * g1[i], 1e-6);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

static void test_misuse(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    tg_tensor *x = tg_new(&ctx, 3, (int[]){2, 3, 5});
    EXPECT_TG_ERROR(&c, tg_softmax(&ctx, x, 1), "tg_softmax: causal needs square last two dimensions [..,T,T], got [2,3,5]");
    tg_tensor *v = tg_new(&ctx, 1, (int[]){4});
    EXPECT_TG_ERROR(&c, tg_softmax(&ctx, v, 1), "got [4]");
    tg_ctx_free(&ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_causal_mask),
        cmocka_unit_test(test_grad),
        cmocka_unit_test(test_grad_masked_zero_and_accumulates),
        cmocka_unit_test(test_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
