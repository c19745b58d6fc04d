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

/* ---- errors ---------------------------------------------------------------- */
typedef struct {
    jmp_buf jb;
    char msg[512];
    int fired;
} tg_test_catch;

/* Installs a handler on ctx that copies the message into c->msg and longjmps. */
void tg_test_catch_errors(tg_ctx *ctx, tg_test_catch *c);
void tg_test_catch_handler(const char *msg, void *user);

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
