/* Test helpers: the finite-difference gradient checker and error capture.
 * Include after <stdarg.h>, <stddef.h>, <setjmp.h> and <cmocka.h>. */
#ifndef TG_TESTUTIL_H
#define TG_TESTUTIL_H
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include "tg_core.h"

/* ---- gradient check -------------------------------------------------------
 * The function builds a graph on ctx from the parameters in P (and anything in
 * `user`) and returns one output of any shape. The checker reduces it to
 * L = Σ out ⊙ R with a fixed random R, runs tg_backward_seed(out, R) for the
 * analytic gradient of every parameter, and compares each element with a
 * numeric derivative: central differences D(h) = (L(x+h) − L(x−h)) / (x+h − x−h)
 * at h and h/2, combined by Richardson extrapolation (4·D(h/2) − D(h)) / 3 so
 * the O(h²) truncation terms cancel. Perturbations are applied in float (and
 * the step actually taken is used); the reduction and quotients are in double.
 *
 * Why these numbers: the forward runs in float32, so each L carries rounding
 * noise of a few 1e-7 · Σ|out·R|; with h = 1e-2 · max(1, |x|) that becomes
 * ~1e-5 relative in the quotient, and the remaining truncation is O(h⁴).
 * An element passes when |analytic − numeric| ≤ atol + rtol·|numeric| with
 * rtol = 1e-3, atol = 1e-4 · max(1, max|numeric|). Correct ops use well under a
 * fifth of that limit; a backward off by 0.3% already fails (both checked on
 * matmul by mutating its backward). Set TG_GC_VERBOSE=1 to print the worst
 * error/limit ratio of every check. */
typedef tg_tensor *(*tg_gc_fn)(tg_ctx *ctx, void *user);

typedef struct {
    double h, rtol, atol;
    int verbose;
} tg_gc_opts;

/* Returns the number of failing elements (0: pass), printing the first few. */
int tg_gradcheck(const char *label, tg_params *P, tg_gc_fn f, void *user, const tg_gc_opts *opts);

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
