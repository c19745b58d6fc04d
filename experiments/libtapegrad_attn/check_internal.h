/* Internal to attn_check (tg_attn_check.h): what its probes share (check.c) and the probes
 * themselves, one file a family. Not installed; hidden in a shared library. */
#ifndef TG_CHECK_INTERNAL_H
#define TG_CHECK_INTERNAL_H
#include <stdint.h>

#include "tg_attn_check.h"
#include "tg_attn_probe.h"

#pragma GCC visibility push(hidden)

/* A probe: its lines into r (tgc_add), for kernel K under o. */
typedef void (*tgc_probe_fn)(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);

/* One line of the report (in a probe's sandbox: sent to the parent at once). */
void tgc_add(tg_attn_check_report *r, const char *check, const char *what, int status, double value, double limit,
             const char *fmt, ...) __attribute__((format(printf, 7, 8)));

/* The kernel on a, its tg_fail caught: the output of the right shape, or NULL with why in msg. */
tg_tensor *tgc_call(tg_ctx *ctx, const tg_attn_kernel *K, const tg_attn_args *a, char *msg, size_t len);
/* a fitted to K's conventions (attn_tables.h: tg_attn_conform): what every probe sends. */
void tgc_conform(const tg_attn_kernel *K, tg_attn_args *a);
/* 1 when K's conventions leave a call of this causal flag and head scale (or none) as it is: a
 * probe's case outside them is not sent. */
int tgc_takes(const tg_attn_kernel *K, int causal, int with_head_scale);
/* The scale K's conventions make of `scale` at d_head d (scale itself, or the kernel's own). */
float tgc_fitted_scale(const tg_attn_kernel *K, int d, float scale);

/* q, k or v [B, T, H, d] ~ N(0, std²); a vector of x; H head scales a, b, a, ... */
tg_tensor *tgc_randn(tg_ctx *ctx, tg_rng *r, int B, int T, int H, int d, float std);
tg_tensor *tgc_vec(tg_ctx *ctx, int n, const float *x);
tg_tensor *tgc_head_scales(tg_ctx *ctx, int H, float a, float b);
/* the head sizes checked: opts' d_head, or 8, 32, 64, 128; how many into d */
int tgc_grid(const tg_attn_check_opts *o, int *d);
int tgc_near(double a, double b, double rel);
/* max |out − ref| / max |ref|; -1 with *bad the first non-finite entry of out */
double tgc_rel_err(const tg_tensor *out, const tg_tensor *ref, int64_t *bad);

/* The textbook attention of a (every feature of the contract; q, k, v rounded to prec first) in
 * double, or with inner set rounded to prec where a computation in it rounds (FlashAttention's
 * reference with upcast off): the logits, the weights before the product with v, the output; dout
 * rounded, dP and dS before their products, each gradient. out [B,Tq,H,dv]; dout NULL: no backward,
 * else dq, dk, dv in q's, k's and v's shapes (textbook.c). */
void tgc_textbook(const tg_attn_args *a, int prec, int inner, const float *dout, float *out, float *dq, float *dk,
                  float *dv);
/* FlashAttention's rule for a low-precision kernel: its error against the exact reference at most
 * mult (2; 4 for gradients under a soft-cap) times the textbook's in its precision, plus floor_rel of
 * the values' scale (the probes: u, the precision's unit roundoff, as FlashAttention's Hopper tests
 * add the rounding of values near 0.3 in the dtype). *err and *allowed relative to max |exact|; returns err/allowed (≤ 1: passes),
 * -1 when got holds a non-finite value. */
double tgc_lowprec_ratio(const float *got, const float *exact, const float *textbook, int64_t n, double mult,
                         double floor_rel, double *err, double *allowed);

/* One call of a declared feature alone, on random data: the args of feature f (a TG_ATTN_F_* bit). */
typedef struct {
    tg_ctx ctx;
    tg_attn_args a;
    int kv_len[2];
    char what[40];
} tgc_feature_case;
/* dv_ok: the kernel declares dv != d (else dv = d); grad_inputs: q, k, v (bias, sinks) are
 * parameters of P (allocated here) */
void tgc_make_case(tgc_feature_case *c, unsigned f, int dv_ok, int grad_inputs, tg_params *P, uint64_t seed);

/* The multiplier K applies to q·k at `scale` (mean over H heads; per head into ph), measured where
 * its rows are not saturated; NaN with why when it cannot be (probes_textbook.c). */
double tgc_multiplier(const tg_attn_kernel *K, int d, int H, float scale, const float *hs, float *ph, char *why,
                      size_t len);

/* the probes (probes_textbook.c, probes_spans.c, probes_logits.c, probes_health.c) */
void tgc_probe_forward(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_temperature(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_layout(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_mask(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_gqa(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_alignment(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_window(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_padding(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_bias(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_alibi(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_softcap(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_sinks(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_dropout(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_gradient(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);
void tgc_probe_health(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r);

#pragma GCC visibility pop
#endif
