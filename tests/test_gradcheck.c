/* The gradient checker is library API (core/gradcheck.h): it must pass a
 * correct backward and catch a slightly wrong one, a NaN gradient, an output
 * whose size depends on the parameters, and an op that reads memory it never
 * wrote. */
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

/* y = 2·x with a backward multiplied by `factor` (1: correct) or NaN. */
typedef struct { float factor; int nan; } twice_rec;
typedef struct { tg_tensor *x; float factor; int nan; } twice_case;

static void twice_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    const twice_rec *r = n->saved;
    tg_tensor *x = n->in[0];
    if (x->grad)
        for (int64_t i = 0; i < x->numel; i++) x->grad[i] += r->nan ? NAN : 2.0f * r->factor * n->out->grad[i];
}

static tg_tensor *f_twice(tg_ctx *ctx, void *u) {
    twice_case *c = u;
    tg_tensor *out = tg_new_like(ctx, c->x);
    for (int64_t i = 0; i < c->x->numel; i++) out->data[i] = 2.0f * c->x->data[i];
    tg_node *n = tg_record(ctx, "twice", twice_backward, out, 1, (tg_tensor *[]){c->x}, sizeof(twice_rec));
    if (n) *(twice_rec *)n->saved = (twice_rec){ c->factor, c->nan };
    return out;
}

static int check_twice(float factor, int nan, const tg_gc_opts *o, tg_params *P) {
    twice_case c = { .factor = factor, .nan = nan };
    c.x = tg_param(P, "x", 2, (int[]){3, 5});
    tg_params_alloc(P);
    tg_test_fill(P, 3, 1.0f);
    return tg_gradcheck("twice", P, f_twice, &c, o);
}

static void test_correct_passes(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    assert_int_equal(check_twice(1.0f, 0, NULL, &P), 0);
    /* the analytic gradient is left in P->grad, the values are restored */
    tg_params P2;
    tg_params_init(&P2);
    tg_param(&P2, "x", 2, (int[]){3, 5});
    tg_params_alloc(&P2);
    tg_test_fill(&P2, 3, 1.0f);
    for (size_t i = 0; i < P.numel; i++) assert_float_equal(P.data[i], P2.data[i], 0);
    for (size_t i = 0; i < P.numel; i++) assert_true(P.grad[i] != 0);
    tg_params_free(&P2);
    tg_params_free(&P);
}

static void test_wrong_backward_fails(void **s) {
    (void)s;
    tg_params P;   /* 0.3% off: the documented resolution of the default tolerances */
    tg_params_init(&P);
    assert_true(check_twice(1.003f, 0, NULL, &P) > 0);
    tg_params_free(&P);
    tg_params_init(&P);   /* 10% off: every element */
    assert_int_equal(check_twice(1.1f, 0, NULL, &P), 15);
    tg_params_free(&P);
    tg_params_init(&P);   /* a looser rtol is honoured: 10% passes under rtol 0.2 */
    assert_int_equal(check_twice(1.1f, 0, &(tg_gc_opts){ .rtol = 0.2 }, &P), 0);
    tg_params_free(&P);
}

static void test_nan_fails(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    assert_int_equal(check_twice(1.0f, 1, NULL, &P), 15);
    tg_params_free(&P);
}

/* Rows of x [4, 1]: 2 of them when x[0] is above its starting value, else 3. */
static float x0_start;
static tg_tensor *f_size_changes(tg_ctx *ctx, void *u) {
    tg_tensor *x = u;
    return tg_embedding(ctx, x, (int[]){0, 1, 2}, 1, x->data[0] > x0_start ? 2 : 3);
}

static void test_size_change_reported(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 2, (int[]){4, 1});
    tg_params_alloc(&P);
    tg_test_fill(&P, 4, 1.0f);
    x0_start = x->data[0];
    assert_int_equal(tg_gradcheck("size", &P, f_size_changes, x, NULL), -1);
    assert_float_equal(x->data[0], x0_start, 0);   /* restored on that path too */
    tg_params_free(&P);
}

/* y = 2·x[0:3] of an x of 8 elements, an op that writes its input's grad
 * first (own_grads). `forget`: its backward writes the 3 elements it reads and
 * leaves the other 5, whose gradient is 0, as the arena held them (issue 37's
 * composed attention did this to keys no query sees). On zero pages finite
 * differences agree with it; the checker's runs on NaN and garbage arenas do not.
 * `stale_fwd`: the forward leaves out[1] unwritten instead. */
typedef struct { tg_tensor *x; int forget, stale_fwd; } head_case;

static void head_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    const int forget = *(const int *)n->saved;
    tg_tensor *x = n->in[0];
    if (!x->grad) return;
    const int first = tg_grad_first(x);
    for (int i = 0; i < 3; i++) x->grad[i] = (first ? 0 : x->grad[i]) + 2.0f * n->out->grad[i];
    if (first && !forget) memset(x->grad + 3, 0, 5 * sizeof(float));
}

static tg_tensor *f_head(tg_ctx *ctx, void *u) {
    const head_case *c = u;
    tg_tensor *h = tg_scale(ctx, c->x, 1.0f);   /* an activation: its grad is arena memory */
    tg_tensor *out = tg_new(ctx, 1, (int[]){3});
    for (int i = 0; i < 3; i++)
        if (!(c->stale_fwd && i == 1)) out->data[i] = 2.0f * h->data[i];
    tg_node *n = tg_record(ctx, "head", head_backward, out, 1, (tg_tensor *[]){h}, sizeof(int));
    if (n) {
        n->own_grads = 1;
        *(int *)n->saved = c->forget;
    }
    return out;
}

static void test_stale_memory_fails(void **s) {
    (void)s;
    for (int k = 0; k < 3; k++) {
        tg_params P;
        tg_params_init(&P);
        head_case c = {tg_param(&P, "x", 1, (int[]){8}), k == 1, k == 2};
        tg_params_alloc(&P);
        tg_test_fill(&P, 5, 1.0f);
        double worst = 0;
        int bad = tg_gradcheck(k == 0 ? "head" : k == 1 ? "head, backward forgets" : "head, forward forgets", &P,
                               f_head, &c, &(tg_gc_opts){.worst = &worst});
        if (k == 0) {
            assert_int_equal(bad, 0);
            assert_true(worst <= 1);
        } else {
            assert_true(bad > 0);
            assert_true(isinf(worst));
        }
        tg_params_free(&P);
    }
}

static tg_tensor *f_null(tg_ctx *ctx, void *u) {
    (void)ctx;
    (void)u;
    return NULL;
}

static void test_misuse(void **s) {
    (void)s;
    tg_test_catch c;
    tg_params P;
    tg_params_init(&P);
    memset(c.msg, 0, sizeof c.msg);
    P.err = (tg_errh){ tg_test_catch_handler, &c };
    EXPECT_TG_ERROR(&c, tg_gradcheck("empty", &P, f_twice, NULL, NULL), "tg_gradcheck: empty: no parameters");
    twice_case tc = { .factor = 1 };
    tc.x = tg_param(&P, "x", 1, (int[]){2});
    tg_params_alloc(&P);
    EXPECT_TG_ERROR(&c, tg_gradcheck("neg", &P, f_twice, &tc, &(tg_gc_opts){ .h = -1 }),
                    "tg_gradcheck: neg: h -1");
    EXPECT_TG_ERROR(&c, tg_gradcheck("null", &P, f_null, NULL, NULL), "tg_gradcheck: null: the function returned no tensor");
    tg_params_free(&P);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_correct_passes),
        cmocka_unit_test(test_wrong_backward_fails),
        cmocka_unit_test(test_nan_fails),
        cmocka_unit_test(test_size_change_reported),
        cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_stale_memory_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
