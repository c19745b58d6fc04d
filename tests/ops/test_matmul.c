#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "tg_ops.h"
#include "testutil.h"

typedef struct { tg_tensor *a, *b; int ta, tb; } mm_case;

static tg_tensor *f_mm(tg_ctx *ctx, void *u) {
    mm_case *c = u;
    return tg_matmul(ctx, c->a, c->b, c->ta, c->tb);
}

/* a [B,M,K] (or [B,K,M]) with b shared 2-D or batched, every transpose combo */
static void check(int batched_b, int ta, int tb) {
    const int B = 3, M = 4, K = 5, N = 2;
    tg_params P;
    tg_params_init(&P);
    mm_case c = { .ta = ta, .tb = tb };
    c.a = tg_param(&P, "a", 3, (int[]){B, ta ? K : M, ta ? M : K});
    if (batched_b) c.b = tg_param(&P, "b", 3, (int[]){B, tb ? N : K, tb ? K : N});
    else c.b = tg_param(&P, "b", 2, (int[]){tb ? N : K, tb ? K : N});
    tg_params_alloc(&P);
    tg_test_fill(&P, 1 + 4 * batched_b + 2 * ta + tb, 1.0f);
    char label[64];
    snprintf(label, sizeof label, "matmul b%s ta=%d tb=%d", batched_b ? "batched" : "shared", ta, tb);
    assert_int_equal(tg_gradcheck(label, &P, f_mm, &c, NULL), 0);
    tg_params_free(&P);
}

static void test_grad_all_variants(void **s) {
    (void)s;
    for (int bb = 0; bb < 2; bb++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) check(bb, ta, tb);
}

static void test_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *a = tg_new(&ctx, 2, (int[]){2, 3}), *b = tg_new(&ctx, 2, (int[]){3, 2});
    const float av[] = {1, 2, 3, 4, 5, 6}, bv[] = {7, 8, 9, 10, 11, 12};
    memcpy(a->data, av, sizeof av);
    memcpy(b->data, bv, sizeof bv);
    tg_tensor *c = tg_matmul(&ctx, a, b, 0, 0);
    const float want[] = {58, 64, 139, 154};
    for (int i = 0; i < 4; i++) assert_float_equal(c->data[i], want[i], 1e-5);
    tg_tensor *ct = tg_matmul(&ctx, a, a, 0, 1);  /* a aᵀ = [[14,32],[32,77]] */
    const float want2[] = {14, 32, 32, 77};
    for (int i = 0; i < 4; i++) assert_float_equal(ct->data[i], want2[i], 1e-5);
    tg_ctx_free(&ctx);
}

/* Tall products (2·600 rows, over tg_matmul's TRANSPOSE_MIN_ROWS): dA = dC·Bᵀ
 * runs with Bᵀ made first; a gradient check of that size costs too much, so
 * against a double loop. The rows also fold two batches over a shared b. */
static void test_tall_backward(void **s) {
    (void)s;
    enum { NB = 2, R = 600, K = 24, N = 40 };
    tg_params P;
    tg_params_init(&P);
    tg_tensor *a = tg_param(&P, "a", 3, (int[]){NB, R, K}), *b = tg_param(&P, "b", 2, (int[]){K, N});
    tg_params_alloc(&P);
    tg_test_fill(&P, 31, 1.0f);
    float *dc = malloc(sizeof(float) * NB * R * N);
    tg_rng r;
    tg_rng_seed(&r, 32, 1);
    tg_fill_normal(&r, dc, NB * R * N, 0.0f, 1.0f);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *x = tg_scale(&ctx, a, 1.0f);   /* an activation: its grad is written, not added to */
    tg_backward_seed(&ctx, tg_matmul(&ctx, x, b, 0, 0), dc);
    for (int i = 0; i < NB * R; i++)
        for (int k = 0; k < K; k++) {
            double want = 0, mag = 0;
            for (int j = 0; j < N; j++) {
                want += (double)dc[i * N + j] * b->data[k * N + j];
                mag += fabs((double)dc[i * N + j] * b->data[k * N + j]);
            }
            assert_float_equal(x->grad[i * K + k], want, (N + 2) * 0x1p-23 * mag + 1e-30);
            assert_float_equal(a->grad[i * K + k], want, (N + 2) * 0x1p-23 * mag + 1e-30);
        }
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) {
            double want = 0, mag = 0;
            for (int i = 0; i < NB * R; i++) {
                want += (double)a->data[i * K + k] * dc[i * N + j];
                mag += fabs((double)a->data[i * K + k] * dc[i * N + j]);
            }
            assert_float_equal(b->grad[k * N + j], want, (NB * R + 2) * 0x1p-23 * mag + 1e-30);
        }
    free(dc);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

static void test_shape_errors(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    tg_tensor *a = tg_new(&ctx, 2, (int[]){8, 16}), *b = tg_new(&ctx, 2, (int[]){32, 4});
    EXPECT_TG_ERROR(&c, tg_matmul(&ctx, a, b, 0, 0), "tg_matmul: inner dimensions differ: [8,16] x [32,4]");
    tg_tensor *a3 = tg_new(&ctx, 3, (int[]){2, 8, 16}), *b3 = tg_new(&ctx, 3, (int[]){3, 16, 4});
    EXPECT_TG_ERROR(&c, tg_matmul(&ctx, a3, b3, 0, 0), "batch dimensions differ: [2,8,16] x [3,16,4]");
    tg_tensor *v = tg_new(&ctx, 1, (int[]){16});
    EXPECT_TG_ERROR(&c, tg_matmul(&ctx, v, b, 0, 0), "at least 2 dimensions");
    tg_ctx_free(&ctx);
}

/* The "input used twice" check of an op that readies its inputs' grads itself
 * (tests/testutil.h, docs/ops.md#the-fast-kind-of-op). */
static tg_tensor *twice_op(tg_ctx *ctx, tg_tensor *h, void *u) {
    (void)u;
    return tg_matmul(ctx, h, h, 0, 1);   /* h·hᵀ: h twice inside the op too */
}

static void test_input_used_twice(void **s) {
    (void)s;
    assert_int_equal(tg_test_used_twice_shape("matmul", 2, (int[]){3, 5}, twice_op, NULL), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_used_twice),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_grad_all_variants),
        cmocka_unit_test(test_tall_backward),
        cmocka_unit_test(test_shape_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
