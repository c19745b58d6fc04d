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

typedef struct { tg_tensor *logits; const int *targets; } ce_case;

static tg_tensor *f_ce(tg_ctx *ctx, void *u) {
    ce_case *c = u;
    return tg_cross_entropy(ctx, c->logits, c->targets);
}

static void test_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    /* uniform logits: −log(1/V) = ln V whatever the targets */
    tg_tensor *u = tg_zeros(&ctx, 3, (int[]){2, 3, 7});
    tg_tensor *lu = tg_cross_entropy(&ctx, u, (int[]){0, 6, 3, 3, 1, 2});
    assert_string_equal(TG_SHAPE(lu), "[1]");
    assert_float_equal(lu->data[0], log(7.0), 1e-6);
    /* [1,2,3] with target 2: −log(e³/(e+e²+e³)) = log(1 + e⁻¹ + e⁻²); the second row is ignored */
    tg_tensor *x = tg_new(&ctx, 2, (int[]){2, 3});
    memcpy(x->data, (float[]){1, 2, 3, 50, -50, 0}, 6 * sizeof(float));
    tg_tensor *l = tg_cross_entropy(&ctx, x, (int[]){2, -1});
    assert_float_equal(l->data[0], log(1 + exp(-1.0) + exp(-2.0)), 1e-6);
    /* the mean over two counted rows: target 0 adds log(1 + e + e²) */
    tg_tensor *x2 = tg_new(&ctx, 2, (int[]){2, 3});
    memcpy(x2->data, (float[]){1, 2, 3, 1, 2, 3}, 6 * sizeof(float));
    tg_tensor *l3 = tg_cross_entropy(&ctx, x2, (int[]){2, 0});
    assert_float_equal(l3->data[0], 0.5 * (log(1 + exp(-1.0) + exp(-2.0)) + log(1 + exp(1.0) + exp(2.0))), 1e-6);
    /* stability: logits ±1000 would overflow exp without the max shift */
    tg_tensor *big = tg_new(&ctx, 2, (int[]){2, 3});
    memcpy(big->data, (float[]){1000, 0, -1000, 1000, 0, -1000}, 6 * sizeof(float));
    tg_tensor *lb = tg_cross_entropy(&ctx, big, (int[]){0, 1});
    assert_float_equal(lb->data[0], 500, 1e-3);   /* (0 + 1000) / 2 */
    tg_ctx_free(&ctx);
}

/* (softmax − onehot) / count for counted rows, 0 for ignored ones; targets are copied */
static void test_grad_values(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 2, (int[]){3, 3});
    tg_params_alloc(&P);
    memcpy(x->data, (float[]){1, 2, 3, 5, 5, 5, 0, 0, 0}, 9 * sizeof(float));
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    int targets[] = {2, -1, 0};
    tg_tensor *l = tg_cross_entropy(&ctx, x, targets);
    targets[0] = 0;   /* the caller reuses its buffer */
    targets[1] = 1;
    tg_backward(&ctx, l);
    double z = exp(1.0) + exp(2.0) + exp(3.0);
    const double want[] = {exp(1.0) / z / 2, exp(2.0) / z / 2, (exp(3.0) / z - 1) / 2, 0, 0, 0,
                           (1.0 / 3 - 1) / 2, 1.0 / 3 / 2, 1.0 / 3 / 2};
    for (int i = 0; i < 9; i++) assert_float_equal(x->grad[i], want[i], 1e-6);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

/* logits [2,3,5] with every target counted, then with ignored positions;
 * and a 2-D [4,6] with one counted row */
static void test_gradcheck(void **s) {
    (void)s;
    const int all[] = {0, 4, 2, 2, 1, 3}, some[] = {-1, 4, 2, -1, -1, 0};
    const int *tsets[2] = {all, some};
    for (int k = 0; k < 2; k++) {
        tg_params P;
        tg_params_init(&P);
        ce_case c = { .targets = tsets[k] };
        c.logits = tg_param(&P, "logits", 3, (int[]){2, 3, 5});
        tg_params_alloc(&P);
        tg_test_fill(&P, 160 + (uint64_t)k, 2.0f);
        assert_int_equal(tg_gradcheck(k ? "cross_entropy ignored" : "cross_entropy", &P, f_ce, &c, NULL), 0);
        tg_params_free(&P);
    }
    tg_params P;
    tg_params_init(&P);
    ce_case c = { .targets = (const int[]){-1, -1, 5, -1} };
    c.logits = tg_param(&P, "logits", 2, (int[]){4, 6});
    tg_params_alloc(&P);
    tg_test_fill(&P, 170, 1.0f);
    assert_int_equal(tg_gradcheck("cross_entropy one row", &P, f_ce, &c, NULL), 0);
    tg_params_free(&P);
}

/* a whole fixed-shape step through these ops: after the first step the
 * context makes no heap allocation (every saved value lives in the arena) */
static void test_step_no_heap(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *wte = tg_param(&P, "wte", 2, (int[]){7, 4}), *g = tg_param(&P, "g", 1, (int[]){4});
    tg_tensor *b = tg_param(&P, "b", 1, (int[]){4}), *w = tg_param(&P, "w", 2, (int[]){4, 7});
    tg_params_alloc(&P);
    tg_test_fill(&P, 180, 1.0f);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 1 << 16);
    int idx[6] = {1, 2, 3, 4, 5, 6}, tgt[6] = {2, 3, -1, 5, 6, 0};
    size_t allocs = 0;
    for (int step = 0; step < 3; step++) {
        tg_ctx_reset(&ctx);
        tg_params_zero_grad(&P);
        tg_tensor *h = tg_embedding(&ctx, wte, idx, 2, 3);
        h = tg_gelu(&ctx, tg_layernorm(&ctx, h, g, b, 1e-5f));
        tg_tensor *loss = tg_cross_entropy(&ctx, tg_matmul(&ctx, h, w, 0, 0), tgt);
        tg_backward(&ctx, loss);
        if (step == 0) allocs = ctx.heap_allocs;
        else assert_int_equal(ctx.heap_allocs, allocs);
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
    tg_tensor *x = tg_zeros(&ctx, 3, (int[]){2, 2, 5});
    EXPECT_TG_ERROR(&c, tg_cross_entropy(&ctx, x, (int[]){0, 1, 2, 5}),
                    "tg_cross_entropy: target 5 at position 3 is outside [0, 5) (or -1 to ignore) for logits [2,2,5]");
    EXPECT_TG_ERROR(&c, tg_cross_entropy(&ctx, x, (int[]){-2, 1, 2, 3}), "target -2 at position 0");
    EXPECT_TG_ERROR(&c, tg_cross_entropy(&ctx, x, (int[]){-1, -1, -1, -1}),
                    "tg_cross_entropy: all 4 positions of logits [2,2,5] are ignored");
    tg_ctx_free(&ctx);
}

/* The "input used twice" check of an op that readies its inputs' grads itself
 * (tests/testutil.h, docs/ops.md#the-fast-kind-of-op). */
static tg_tensor *twice_op(tg_ctx *ctx, tg_tensor *h, void *u) {
    return tg_cross_entropy(ctx, h, u);
}

static void test_input_used_twice(void **s) {
    (void)s;
    int targets[4] = {1, 4, -1, 0};
    assert_int_equal(tg_test_used_twice_shape("cross_entropy", 2, (int[]){4, 5}, twice_op, targets), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_used_twice),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_grad_values),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_step_no_heap),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
