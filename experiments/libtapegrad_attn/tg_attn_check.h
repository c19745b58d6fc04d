/* attn_check: what is wrong with an attention kernel, before training it.
 *
 * The kernel is a black box (tg_attn_kernel: a plugin, an exec kernel or a built-in op, as the
 * registry opens it: tg_kernel.h); tg_attend is the reference. Each probe of a kernel in this
 * process (a plugin, a built-in op) runs in a sandbox (tg_sandbox.h: a child with a time limit; a
 * kernel that crashes or hangs is reported as such, not a crash of the caller, and what it prints
 * on stdout is kept out of the report and said in an info line); an exec kernel's run here, its
 * calls each under the limit, on one kernel process restarted after it died or hung. Each probe
 * isolates one thing. The textbook probes run on every kernel; a feature's probe runs when the
 * kernel declares the feature (its descriptor; tg_attn_check_probe_of names it), and a line
 * "features" says which were and were not checked. A kernel's conventions (attn_tables.h: causal
 * only, its own 1/√d, ...) are an info line each, and every probe sends only calls within them (its args fitted to them: causal for a causal-only
 * kernel, whose temperature is then measured under the mask, its own scale, ...).
 *
 * forward      against tg_attend on random q, k, v ~ N(0, 1): d_head 8, 32, 64,
 *              128 (or opts.d_head alone), T 1, 7, 64, 256, B = H = 2, dv = d/2 + 3
 *              (dv = d when the kernel does not declare dv != d), with and without
 *              a per-head scale, causal and not; then one call per declared
 *              feature but dropout (grouped heads, Tq < Tk, a window, padding,
 *              bias, ALiBi, a cap, sinks), each named. Error: max |out − ref| /
 *              max |ref|; it passes below TG_ATTN_CHECK_FWD_TOL(d, T) = 32 (d + T) u,
 *              u = 2^-24 (a float32 dot product of d terms and a weighted sum of T
 *              terms each carry about (d + T) u; 32 covers the exponentials, the
 *              normalisation and another summation order).
 * temperature  the multiplier c with which the kernel behaves as
 *              softmax(c · scale · q·k), from its weights alone (tg_attn_measure),
 *              at scale = 1/√d and at twice that, H = 3, not causal (a mask's bug
 *              is the mask probe's). q is shrunk until the
 *              rows are not saturated, so c is measured at any temperature. The
 *              relation to `scale` is named (follows it, ignores it, follows it
 *              inversely: divides by it, follows its square: applies it twice),
 *              and c's known signatures as possibilities: √d (scale ignored), 1/√d
 *              (divided by d, or the scale applied twice), d (multiplied by √d),
 *              1/√H (scaled by the model width H·d). Head scales 0.5 and 2 must
 *              multiply it.
 * mask         with equal logits (q = 0: every visible key weighs the same
 *              whatever the multiplier) and V = identity, the keys each row sees,
 *              causal and not: "row 0 sees key 1: off by one", "hides the
 *              diagonal", "no causal mask"; weights of equal logits that are not
 *              uniform, negative, or rows that do not sum to 1: "not a softmax".
 * gqa, alignment, window, padding, bias, alibi, softcap, sinks, dropout: each
 *              declared feature measured alone (docs/attn_check.md lists the
 *              words): which kv head a query head reads; where a row of Tq < Tk
 *              sits; the span a window lets a row see; keys past kv_len and rows
 *              with no key; the bias's slope and head; ALiBi's slope per head;
 *              the cap; the sink's logit; dropout's rate, rescale and mask.
 * gradient     tg_gradcheck of q, k, v and head_scale, causal and not, then of
 *              every input under each declared feature (bias and sinks too);
 *              worst error/limit below 1 passes.
 * health       q and k as the toy model's are at initialisation (entries ~
 *              N(0, 1)), d_head 128, T 32, causal: entropy / uniform, largest
 *              logit, saturated rows next to tg_attend's, and where the
 *              multiplier c the kernel really applies falls on the temperature
 *              map of docs/results.md (the band that trains as well as c = 1 at
 *              d_head 128 with AdamW: 1/16 .. 1). Outside: a failure. With opts.softcap,
 *              the band under that cap where the map under caps measured it, and what the
 *              forgotten scale cost there on the counting task and on code. */
#ifndef TG_ATTN_CHECK_H
#define TG_ATTN_CHECK_H
#include <stdio.h>

#include "tg_ops.h"

#define TG_ATTN_CHECK_FWD_TOL(d, T) (32.0 * ((double)(d) + (double)(T)) * 5.9604644775390625e-08)
#define TG_ATTN_CHECK_C_TOL 1e-3   /* |c − 1|: the fit recovers tg_attend's own c to ~1e-6 */

/* the status of a line (TG_ATTN_CHECK_FAIL is a line's, not a program's exit status) */
enum { TG_ATTN_CHECK_PASS, TG_ATTN_CHECK_FAIL, TG_ATTN_CHECK_INFO, TG_ATTN_CHECK_CRASH };

#define TG_ATTN_CHECK_MAX_LAYERS 8
typedef struct tg_attn_check_opts {
    int d_head;        /* 0: 8, 32, 64 and 128 */
    double timeout;    /* seconds a probe may take (0: 60) */
    const char *exec_cmd;   /* an exec kernel's command (tg_attn_exec.h): its probes run in the caller's
                               process on one kernel process (the caller's, when it is kernel's and
                               this process owns it), started again with this command only after
                               it died or hung (0.16; each probe's child started its own before) */
    float softcap;     /* the run's logit soft-cap (0: none; 0.17): the health forecast uses the temperature
                          map under that cap where it was measured (docs/results.md) */
    /* Since 0.21: the model layers the calls carry (tg_attn_args.layer), for a kernel whose
     * computation depends on it. Every probe runs at layers[0]; the forward and temperature
     * probes again at each further one, their lines named "L<layer> ...". n_layers 0: layer
     * 0 alone. */
    int n_layers;
    int layers[TG_ATTN_CHECK_MAX_LAYERS];
} tg_attn_check_opts;

typedef struct tg_attn_check_line {
    char check[16];    /* "forward", "temperature", "mask", "gqa", ..., "gradient", "health" */
    char what[40];     /* "d_head=128", "causal", "d/d q", ... */
    int status;        /* TG_ATTN_CHECK_* */
    double value, limit;   /* the figure and its limit (NaN where none) */
    char text[640];    /* in words (400 before 0.17) */
} tg_attn_check_line;

typedef struct tg_attn_check_report {
    tg_attn_check_line *lines;
    int n, cap;
    int failed;        /* lines that failed or crashed */
    void *sink;        /* internal (0.20): in a probe's sandbox, where its lines go; NULL otherwise */
} tg_attn_check_report;

/* The probe that checks a feature (a TG_ATTN_F_* bit): "gqa", "alignment", "window", ...; "forward" for
 * dv != d (no probe of its own); NULL for a bit no probe checks (tests/test_attn_check_subsets.c:
 * every row of attn_tables.h has one). Since 0.20. */
const char *tg_attn_check_probe_of(unsigned feature);

/* Runs every probe on kernel; returns 0 when it conforms, 1 when a check failed
 * (report->failed lines say which). */
int tg_attn_check(const tg_attn_kernel *kernel, const tg_attn_check_opts *opts, tg_attn_check_report *report);
void tg_attn_check_free(tg_attn_check_report *report);
/* The report: the verdict first, then a line per check; tsv: a header row and
 * check, what, status, value, limit, text. */
void tg_attn_check_print(FILE *f, const tg_attn_check_report *report, int tsv);

#endif
