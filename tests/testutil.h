/* Test-only helpers: seeded parameter values and error capture. The gradient
 * checker is library API (core/gradcheck.h); the op tests include it as users do.
 * Include after <stdarg.h>, <stddef.h>, <setjmp.h> and <cmocka.h>. */
#ifndef TG_TESTUTIL_H
#define TG_TESTUTIL_H
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include "tg_core.h"

/* Fill every parameter with N(0, std²) from a seeded PCG32. */
void tg_test_fill(tg_params *P, uint64_t seed, float std);

/* ---- the "input used twice" check ------------------------------------------ */
/* Every op that readies its inputs' grads itself (own_grads: tg_grad_first /
 * tg_grad_acc) must pass this (tests/CMakeLists.txt refuses to configure
 * otherwise; docs/ops.md#the-fast-kind-of-op). From a parameter x of P it makes
 * an activation h = 1.5·x and the scalar
 *     L = Σ op(h) + Σ op(h) + Σ (−0.5·h)        (and again, the plain use first)
 * so that h's grad is reached by the op twice and by a plain op once, in both
 * orders, and gradient-checks it: a backward that overwrites what another use
 * wrote, or adds into a grad nobody readied, fails. op(ctx, h, user) applies the
 * op under test with h as its input (its other operands from user). Returns the
 * failing elements (0: pass). */
typedef tg_tensor *(*tg_test_op1)(tg_ctx *ctx, tg_tensor *h, void *user);
int tg_test_used_twice(const char *label, tg_params *P, tg_tensor *x, tg_test_op1 op, void *user);
/* The same with x a parameter of that shape, N(0, 1) from a fixed seed, made and freed here. */
int tg_test_used_twice_shape(const char *label, int ndim, const int *shape, tg_test_op1 op, void *user);

/* ---- errors ---------------------------------------------------------------- */
typedef struct {
    jmp_buf jb;
    char msg[512];
    int fired;
} tg_test_catch;

/* Installs a handler on ctx that copies the message into c->msg and longjmps. */
void tg_test_catch_errors(tg_ctx *ctx, tg_test_catch *c);
void tg_test_catch_handler(const char *msg, void *user);

/* A CMocka setup that makes a folder of the test's own under /tmp (mkdtemp) into
 * *state, and the teardown that removes it and all in it: tests write only there. */
int tg_test_make_dir(void **state);
int tg_test_remove_dir(void **state);

/* Runs STMT and asserts that it raised a tapegrad error whose message contains
 * SUBSTR. */
#define EXPECT_TG_ERROR(catcher, STMT, SUBSTR)                                   \
    do {                                                                         \
        (catcher)->fired = 0;                                                    \
        if (setjmp((catcher)->jb) == 0) {                                        \
            STMT;                                                                \
        }                                                                        \
        assert_true((catcher)->fired);                                           \
        if (!strstr((catcher)->msg, (SUBSTR))) {                                 \
            print_error("error message '%s' lacks '%s'\n", (catcher)->msg, (SUBSTR)); \
            fail();                                                              \
        }                                                                        \
    } while (0)

#endif
