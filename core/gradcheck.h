/* tg_gradcheck: checks an op's (or a whole model's) backward against finite
 * differences. A new op is not done until this passes on it.
 *
 * What it compares. `f` builds a graph on the ctx it is given, from the
 * parameters in P (and anything in `user`: inputs, attributes), and returns one
 * output of any shape. The checker reduces that output to a scalar
 *     L = Σ out ⊙ R,   R a fixed N(0, 1) tensor (seeded: the same every run),
 * takes the analytic gradient dL/dP from one tg_backward_seed(out, R) (a
 * vector-Jacobian product: every element of the Jacobian is weighted), then for
 * every element x of P computes a numeric derivative: central differences
 *     D(h) = (L(x + h) − L(x − h)) / ((x + h) − (x − h))
 * at h and h/2, combined by Richardson extrapolation (4·D(h/2) − D(h)) / 3 so
 * the O(h²) truncation terms cancel. The perturbed x is rounded to float and the
 * step actually taken is used; L and the quotients are computed in double.
 *
 * Tolerances. h = opts.h · max(1, |x|). An element passes when
 *     |analytic − numeric| <= atol · max(1, max |numeric|) + rtol · |numeric|
 * (max over all elements of P). Defaults: h = 1e-2, rtol = 1e-3, atol = 1e-4.
 * Why: the forward runs in float32, so each L carries rounding noise of a few
 * 1e-7 · Σ|out ⊙ R|; with h = 1e-2 that is ~1e-5 relative in the quotient, and
 * the truncation left after Richardson is O(h⁴). The library's own ops use at
 * most about half of the limit (the attention ops; the others under a third;
 * every op's margin: docs/ops.md#the-gradient-checker), while a
 * backward off by 0.3% fails (tests/test_gradcheck.c). A non-finite
 * analytic or numeric value always fails. Loosen a tolerance only for an op
 * whose forward is itself noisier (say so where you do), never until it passes.
 *
 * Reading its report (stderr). For the first 5 failing elements:
 *     rope: d/d x[18]: analytic 0.90056, numeric -0.53144 (|diff| 1.43 > 0.000843)
 * `x[18]` is the flat element 18 of the parameter named "x" (row-major). Then,
 * when anything failed or when verbose:
 *     rope: 180 elements, 144 outside tolerance, worst error/limit 4449.498
 * (examples/custom_op with its backward rotating the wrong way.)
 * worst error/limit is the largest |analytic − numeric| / limit over P: under 1
 * passes; a wrong backward is usually far above 1 (inf for a NaN). A few
 * failures at isolated elements usually mean a kink in the forward (relu, max,
 * |x|) within h of x: move the test point, do not widen the tolerance.
 * Set the environment variable TG_GC_VERBOSE (any value) to print the summary
 * line of every check, passing or not.
 *
 * Stale memory. The analytic pass runs on an arena filled with 0 (a first pass
 * grows it; every byte the checker reads is then defined, under valgrind too).
 * Then f and the backward run again twice, the arena filled with 0xff bytes
 * (NaN) and with 0x3f bytes (0.747, plausible data) (tg_arena_fill): the output
 * and every gradient must keep their bytes. An op that reads memory it never wrote (a grad slice
 * it marks written but writes in part) looks right on fresh zero pages, and
 * finite differences cannot see it where the true gradient is 0; each element
 * that changes counts as outside tolerance, worst error/limit is inf, and the
 * report says which run changed it:
 *     head: d/d x[3] is 0 on an arena of zeros, -nan on one filled with 0xff
 *     (5 elements changed): the backward reads memory it did not write
 * (tests/test_gradcheck.c; since 0.16: issue 37's composed attention did this).
 *
 * Requirements on f: deterministic (the same P gives the same output; seed any
 * randomness afresh inside f), and the output's size must not depend on P.
 * Every element of P is perturbed (4 forward passes each), so check small
 * shapes: a few hundred to a few thousand elements. Non-square, batch > 1 and
 * odd sizes catch more transposition and indexing bugs than square ones.
 * f runs on the checker's own context: misuse inside it aborts with the op's
 * message, as an op called anywhere else would.
 *
 * What it cannot tell: whether the forward computes the right function. It
 * checks the backward against the forward, so a kernel that forgets the 1/√d
 * scale, or masks the wrong keys, passes as long as its backward is the exact
 * gradient of what it computes (examples/my_attention shows it). Compare the
 * forward with a reference for that; for an attention kernel, attn_check
 * (tg_attn_check.h) does, and the training kit's tg_attn_measure
 * (tg_attn_probe.h) reports the multiplier it applied. */
#ifndef TG_GRADCHECK_H
#define TG_GRADCHECK_H
#include "tg_core.h"

typedef tg_tensor *(*tg_gc_fn)(tg_ctx *ctx, void *user);

/* A field left 0 takes its default (h 1e-2, rtol 1e-3, atol 1e-4); verbose
 * prints the summary line even when the check passes, as TG_GC_VERBOSE does. */
typedef struct tg_gc_opts {
    double h, rtol, atol;
    int verbose;
    int quiet;          /* no report lines at all (a caller that reports itself, as attn_check) */
    double *worst;      /* if not NULL: gets the largest error/limit (inf for a NaN) */
} tg_gc_opts;

/* Checks d(Σ f(P) ⊙ R)/dP for every element of P (tg_params_alloc done, values
 * set). opts may be NULL (all defaults). `label` starts every report line.
 * Returns the number of elements outside tolerance (0: pass), or -1 when the
 * output's size changed under a perturbation. P's values are restored exactly;
 * P->grad holds the analytic gradient afterwards. Misuse (P not allocated or
 * empty, f returning NULL, a negative option) goes through tg_fail_h(&P->err). */
int tg_gradcheck(const char *label, tg_params *P, tg_gc_fn f, void *user, const tg_gc_opts *opts);

#endif
