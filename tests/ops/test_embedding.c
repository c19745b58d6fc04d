#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "tg_ops.h"
#include "testutil.h"

typedef struct { tg_tensor *table; const int *idx; int B, T; } emb_case;

static tg_tensor *f_emb(tg_ctx *ctx, void *u) {
    emb_case *c = u;
    return tg_embedding(ctx, c->table, c->idx, c->B, c->T);
}

static void test_values(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *table = tg_new(&ctx, 2, (int[]){4, 3});   /* row v = [v, 10v, 100v] */
    for (int v = 0; v < 4; v++)
        for (int j = 0; j < 3; j++) table->data[v * 3 + j] = (float)(v * (j == 0 ? 1 : j == 1 ? 10 : 100));
    const int idx[] = {2, 0, 2, 3, 1, 0};
    tg_tensor *y = tg_embedding(&ctx, table, idx, 2, 3);
    assert_string_equal(TG_SHAPE(y), "[2,3,3]");
    for (int p = 0; p < 6; p++) {
        assert_float_equal(y->data[p * 3 + 0], idx[p], 0);
        assert_float_equal(y->data[p * 3 + 1], 10 * idx[p], 0);
        assert_float_equal(y->data[p * 3 + 2], 100 * idx[p], 0);
    }
    tg_ctx_free(&ctx);
}

/* repeated indices get every row's gradient; idx is copied at forward time */
static void test_scatter_add(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *table = tg_param(&P, "wte", 2, (int[]){5, 2});
    tg_params_alloc(&P);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    int idx[] = {3, 1, 3, 3, 0, 1};
    tg_tensor *y = tg_embedding(&ctx, table, idx, 3, 2);
    for (int p = 0; p < 6; p++) idx[p] = 4;   /* the caller reuses its buffer */
    float seed[12];
    for (int i = 0; i < 12; i++) seed[i] = (float)(i + 1);
    tg_backward_seed(&ctx, y, seed);
    /* row 3 from positions 0, 2, 3: (1,2)+(5,6)+(7,8); row 1 from 1, 5: (3,4)+(11,12); row 0 from 4 */
    const float want[] = {9, 10, 14, 16, 0, 0, 13, 16, 0, 0};
    for (int i = 0; i < 10; i++) assert_float_equal(table->grad[i], want[i], 0);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

static void test_gradcheck(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    const int idx[] = {4, 0, 4, 2, 2, 4, 1, 0};   /* row 3 unused: its grad must stay 0 */
    emb_case c = { .idx = idx, .B = 2, .T = 4 };
    c.table = tg_param(&P, "wte", 2, (int[]){5, 3});
    tg_params_alloc(&P);
    tg_test_fill(&P, 90, 1.0f);
    assert_int_equal(tg_gradcheck("embedding", &P, f_emb, &c, NULL), 0);
    tg_params_free(&P);
}

static void test_errors(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    tg_tensor *table = tg_new(&ctx, 2, (int[]){5, 3});
    EXPECT_TG_ERROR(&c, tg_embedding(&ctx, table, (int[]){0, 1, 2, 3, 5, 0}, 2, 3),
                    "tg_embedding: index 5 at position 4 (b=1, t=1) is outside [0, 5) for table [5,3]");
    EXPECT_TG_ERROR(&c, tg_embedding(&ctx, table, (int[]){-1, 0}, 1, 2), "index -1 at position 0");
    tg_tensor *t3 = tg_new(&ctx, 3, (int[]){5, 3, 2});
    EXPECT_TG_ERROR(&c, tg_embedding(&ctx, t3, (int[]){0}, 1, 1), "tg_embedding: the table must be [V, D], got [5,3,2]");
    EXPECT_TG_ERROR(&c, tg_embedding(&ctx, table, (int[]){0}, 0, 1), "tg_embedding: B = 0, T = 1 for table [5,3]");
    tg_ctx_free(&ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_scatter_add),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
