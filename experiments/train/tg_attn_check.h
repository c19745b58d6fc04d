/* attn_check: what is wrong with an attention kernel, before training it.
 *
 * The kernel is a black box with tg_attention's signature (tg_attention_fn);
 * tapegrad's tg_attention is the reference. Five probes, each in a child
 * process with a time limit (a kernel that crashes or hangs is reported as
 * such, not a crash of the caller):
 *
 * forward      against tg_attention on random q, k, v ~ N(0, 1): d_head 8, 32,
 *              64, 128 (or opts.d_head alone), T 1, 7, 64, 256, B = H = 2,
 *              dv = d/2 + 3 (not d), with and without a per-head scale, causal
 *              and not. The error is max |out − ref| / max |ref| over the call;
 *              it passes below TG_CHECK_FWD_TOL(d, T) = 32 (d + T) u, u = 2^-24:
 *              a float32 dot product of d terms and a weighted sum of T terms
 *              each carry a relative error of at most about (d + T) u, and 32
 *              covers the exponentials, the normalisation and a different
 *              summation order (tg_flash_attention, tiled and online, stays
 *              under a tenth of it: tests/test_attn_check.c).
 * temperature  the multiplier c with which the kernel behaves as
 *              softmax(c · scale · q·k), from its outputs alone (tg_attn_measure:
 *              V = identity, a least-squares fit over rows), at scale = 1/√d and
 *              at twice that, and with head scales 0.5 and 2: it must be 1
 *              (within TG_CHECK_C_TOL) and follow both. In words: "c = 11.31 =
 *              √128: the kernel ignores `scale`", "c = 0.0884 = 1/√128: it
 *              divides by d_head", "c = 2.00: twice too warm", "c does not
 *              follow `scale`: the kernel computes its own".
 * mask         causal: perturbing the key and value at position j changes no
 *              row i < j (a leak is named by row and position) and does change
 *              row j (its own position is visible); not causal: perturbing the
 *              last position changes every row.
 * gradient     tg_gradcheck of q, k, v and head_scale, one at a time, causal and
 *              not; each named with its worst error/limit (below 1 passes).
 * health       q and k as the toy model's are at initialisation (d_model 128,
 *              fan-in init: entries ~ N(0, 1)), d_head 128, T 32, causal: the
 *              kernel's entropy / uniform, largest logit and share of saturated
 *              rows next to tg_attention's, and where its c falls on the
 *              temperature map measured in docs/results.md (the band of c that
 *              trains as well as c = 1 at d_head 128 with AdamW: 1/16 .. 1).
 *              Outside the band: "expect the collapse of
 *              docs/results.md#the-main-result" (a failure).
 * A kernel that cannot take dv != d fails `forward`; `temperature` (T = d up
 * to 64) and `health` (T = 32 < d) still measure it, with V = identity padded to
 * dv = d, and `mask` (dv = d) runs too. */
#ifndef TG_ATTN_CHECK_H
#define TG_ATTN_CHECK_H
#include <stdio.h>

#include "tg_ops.h"

#define TG_CHECK_FWD_TOL(d, T) (32.0 * ((double)(d) + (double)(T)) * 5.9604644775390625e-08)
#define TG_CHECK_C_TOL 1e-3   /* |c − 1|: the fit recovers tg_attention's own c to ~1e-6 */

enum { TG_CHECK_PASS, TG_CHECK_FAIL, TG_CHECK_INFO, TG_CHECK_CRASH };

typedef struct tg_attn_check_opts {
    int d_head;        /* 0: 8, 32, 64 and 128 */
    double timeout;    /* seconds a probe may take (0: 60) */
} tg_attn_check_opts;

typedef struct tg_attn_check_line {
    char check[16];    /* "forward", "temperature", "mask", "gradient", "health" */
    char what[40];     /* "d_head=128", "causal", "d/dq", ... */
    int status;        /* TG_CHECK_* */
    double value, limit;   /* the figure and its limit (NaN where none) */
    char text[400];    /* in words */
} tg_attn_check_line;

typedef struct tg_attn_check_report {
    tg_attn_check_line *lines;
    int n, cap;
    int failed;        /* lines that failed or crashed */
} tg_attn_check_report;

/* Runs every probe on fn; returns 0 when it conforms, 1 when a check failed
 * (report->failed lines say which). */
int tg_attn_check(tg_attention_fn fn, const tg_attn_check_opts *opts, tg_attn_check_report *report);
void tg_attn_check_free(tg_attn_check_report *report);
/* The report: the verdict first, then a line per check; tsv: a header row and
 * check, what, status, value, limit, text. */
void tg_attn_check_print(FILE *f, const tg_attn_check_report *report, int tsv);

#endif
