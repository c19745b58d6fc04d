/* Core: tensors, arena, tape bookkeeping, params, RNG. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "tg_core.h"
#include "testutil.h"

static void test_shape_helpers(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *t = tg_new(&ctx, 3, (int[]){2, 3, 4});
    assert_int_equal(t->numel, 24);
    assert_string_equal(TG_SHAPE(t), "[2,3,4]");
    tg_tensor *v = tg_view(&ctx, t, 2, (int[]){6, 4});
    assert_ptr_equal(v->data, t->data);
    assert_true(!tg_same_shape(t, v));
    tg_tensor *row = tg_new(&ctx, 1, (int[]){4}), *mat = tg_new(&ctx, 2, (int[]){3, 4});
    tg_tensor *other = tg_new(&ctx, 2, (int[]){2, 4});
    assert_true(tg_is_trailing_shape(t, row));
    assert_true(tg_is_trailing_shape(t, mat));
    assert_true(tg_is_trailing_shape(t, t));
    assert_false(tg_is_trailing_shape(t, other));
    assert_false(tg_is_trailing_shape(row, mat));   /* b longer than a */
    tg_ctx_free(&ctx);
}

static void test_bad_tensors_error(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    EXPECT_TG_ERROR(&c, tg_new(&ctx, 5, (int[]){1, 1, 1, 1, 1}), "1 to 4 dimensions");
    EXPECT_TG_ERROR(&c, tg_new(&ctx, 2, (int[]){3, 0}), "dimension 1 is 0");
    tg_tensor *t = tg_new(&ctx, 2, (int[]){2, 3});
    EXPECT_TG_ERROR(&c, tg_view(&ctx, t, 2, (int[]){4, 2}), "tg_view: [2,3] has 6 elements, the view [4,2] has 8");
    tg_ctx_free(&ctx);
}

/* The arena reuses its blocks after a reset: same sizes, no new malloc. */
static void test_arena_reuse(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 4096);
    for (int step = 0; step < 3; step++) {
        tg_ctx_reset(&ctx);
        size_t before = ctx.heap_allocs;
        for (int i = 0; i < 50; i++) {
            float *p = tg_arena_alloc(&ctx, 1000 + 37 * (size_t)i);
            assert_int_equal((uintptr_t)p % 64, 0);
            memset(p, 1, 1000);
        }
        (void)tg_arena_alloc(&ctx, 100000);   /* bigger than a block */
        if (step > 0) assert_int_equal(ctx.heap_allocs, before);
        else assert_true(ctx.heap_allocs > before);
    }
    tg_ctx_free(&ctx);
}

static void test_params_flat(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    char name[16];
    snprintf(name, sizeof name, "w");
    tg_tensor *w = tg_param(&P, name, 2, (int[]){3, 4});
    snprintf(name, sizeof name, "b");   /* names are copied */
    tg_tensor *b = tg_param(&P, name, 1, (int[]){4});
    tg_params_alloc(&P);
    assert_int_equal(P.numel, 16);
    assert_ptr_equal(w->data, P.data);
    assert_ptr_equal(b->data, P.data + 12);
    assert_ptr_equal(b->grad, P.grad + 12);
    assert_string_equal(w->name, "w");
    assert_ptr_equal(tg_params_find(&P, "b"), b);
    assert_null(tg_params_find(&P, "nope"));
    tg_params_free(&P);
}

/* PCG32 reference stream: seed 42, stream 54 is the example of the PCG paper's
 * pcg32-demo; these are its first outputs. */
static void test_rng_reference(void **s) {
    (void)s;
    tg_rng r;
    tg_rng_seed(&r, 42, 54);
    const uint32_t want[] = {0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e};
    for (int i = 0; i < 6; i++) assert_int_equal(tg_rng_u32(&r), want[i]);
}

static void test_rng_normal_moments(void **s) {
    (void)s;
    tg_rng r;
    tg_rng_seed(&r, 1, 1);
    double m = 0, v = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = tg_rng_normal(&r);
        m += x;
        v += x * x;
    }
    m /= n;
    v = v / n - m * m;
    assert_true(m > -0.01 && m < 0.01);
    assert_true(v > 0.98 && v < 1.02);
    for (int i = 0; i < 1000; i++) {
        uint32_t k = tg_rng_below(&r, 7);
        assert_true(k < 7);
        float u = tg_rng_uniform(&r);
        assert_true(u >= 0.0f && u < 1.0f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_helpers),
        cmocka_unit_test(test_bad_tensors_error),
        cmocka_unit_test(test_arena_reuse),
        cmocka_unit_test(test_params_flat),
        cmocka_unit_test(test_rng_reference),
        cmocka_unit_test(test_rng_normal_moments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
