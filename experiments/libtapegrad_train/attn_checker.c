#define _POSIX_C_SOURCE 200809L   /* strsignal */
#include "tg_attn_check.h"
#include "tg_attn_exec.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tg_child.h"
#include "gradcheck.h"
#include "tg_attn_probe.h"

/* ---- the report ------------------------------------------------------------------ */
static int out_fd = -1;   /* a probe's child writes its lines here */

static void add(tg_attn_check_report *r, const char *check, const char *what, int status, double value, double limit,
                const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void add(tg_attn_check_report *r, const char *check, const char *what, int status, double value, double limit,
                const char *fmt, ...) {
    tg_attn_check_line l = {.status = status, .value = value, .limit = limit};
    snprintf(l.check, sizeof l.check, "%s", check);
    snprintf(l.what, sizeof l.what, "%s", what);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l.text, sizeof l.text, fmt, ap);
    va_end(ap);
    for (char *p = l.text; *p; p++)
        if (*p == '\t' || *p == '\n') *p = ' ';
    if (out_fd >= 0) {   /* in a probe's child: to the parent at once, so a later crash loses nothing */
        if (write(out_fd, &l, sizeof l) != (ssize_t)sizeof l) _exit(3);
        return;
    }
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 32;
        tg_attn_check_line *p = realloc(r->lines, (size_t)cap * sizeof *p);
        if (!p) return;
        r->lines = p, r->cap = cap;
    }
    r->lines[r->n++] = l;
    r->failed += status == TG_ATTN_CHECK_FAIL || status == TG_ATTN_CHECK_CRASH;
}

/* ---- calling the kernel ------------------------------------------------------------ */
/* The kernel on args, its tg_fail caught: the output, or NULL with the message in msg. */
static tg_tensor *call(tg_ctx *ctx, const tg_attn_kernel *K, const tg_attn_args *a, char *msg, size_t len) {
    char why[300];
    tg_tensor *out = tg_attn_call_caught(ctx, K, a, ctx->grad_enabled, why, sizeof why);
    if (!out && why[0]) {
        snprintf(msg, len, "it refused: %.250s", why);
        return NULL;
    }
    const int B = a->q->shape[0], Tq = a->q->shape[1], H = a->q->shape[2], dv = a->v->shape[3];
    if (!out || out->ndim != 4 || out->shape[0] != B || out->shape[1] != Tq || out->shape[2] != H || out->shape[3] != dv) {
        snprintf(msg, len, "it returned %s, not [%d,%d,%d,%d]", out ? TG_SHAPE(out) : "NULL", B, Tq, H, dv);
        return NULL;
    }
    return out;
}

/* The call a probe means, fitted to the kernel's conventions (attention.h): the nearest call the
 * kernel takes (causal for causal_only, its own scale for scale_rsqrt_d, ...). Each probe fits its
 * args before it calls the kernel or the reference, so both compute the same thing and no probe
 * sends what a declared convention excludes. Empty rows are the padding probe's alone. */
static unsigned conv_of(const tg_attn_kernel *K) { return tg_attn_kernel_conventions(K); }

static void conform(const tg_attn_kernel *K, tg_attn_args *a) {
    const unsigned c = conv_of(K);
    if (c & TG_ATTN_C_CAUSAL_ONLY) a->causal = 1;
    if (c & TG_ATTN_C_NO_HEAD_SCALE) a->head_scale = NULL;
    if (c & TG_ATTN_C_SCALE_RSQRT_D) a->scale = 1.0f / sqrtf((float)a->q->shape[3]);
    if (c & TG_ATTN_C_WINDOW_CAUSAL && (a->window_left >= 0 || a->window_right >= 0)) a->causal = 1, a->window_right = -1;
    if (c & TG_ATTN_C_ALIBI_CAUSAL && a->alibi) a->causal = 1;
}

static tg_tensor *randn(tg_ctx *ctx, tg_rng *r, int B, int T, int H, int d, float std) {
    tg_tensor *t = tg_new(ctx, 4, (int[]){B, T, H, d});
    tg_fill_normal(r, t->data, t->numel, 0.0f, std);
    return t;
}

static tg_tensor *vec(tg_ctx *ctx, int n, const float *x) {
    tg_tensor *t = tg_new(ctx, 1, (int[]){n});
    memcpy(t->data, x, sizeof(float) * (size_t)n);
    return t;
}

static tg_tensor *head_scales(tg_ctx *ctx, int H, float a, float b) {
    tg_tensor *t = tg_new(ctx, 1, (int[]){H});
    for (int h = 0; h < H; h++) t->data[h] = h % 2 ? b : a;
    return t;
}

static int grid(const tg_attn_check_opts *o, int *d) {
    if (o->d_head > 0) {
        d[0] = o->d_head;
        return 1;
    }
    d[0] = 8, d[1] = 32, d[2] = 64, d[3] = 128;
    return 4;
}

static int near(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b); }

/* max |out − ref| / max |ref| over a call; -1 with *bad set when out holds a non-finite value */
static double rel_err(const tg_tensor *out, const tg_tensor *ref, int64_t *bad) {
    double maxref = 0, err = 0;
    *bad = -1;
    for (int64_t i = 0; i < ref->numel; i++) {
        maxref = fmax(maxref, fabs(ref->data[i]));
        if (!isfinite(out->data[i]) && *bad < 0) *bad = i;
        err = fmax(err, fabs((double)out->data[i] - ref->data[i]));
    }
    return *bad >= 0 ? -1 : err / (maxref > 0 ? maxref : 1);
}

/* One call of each declared feature, on random data: the args of feature f (a TG_ATTN_F_* bit). */
typedef struct {
    tg_ctx ctx;
    tg_attn_args a;
    int kv_len[2];
    char what[40];
} feature_case;

/* dv_ok: the kernel declares dv != d (else dv = d: a probe uses no feature the kernel did not declare) */
static void make_case(feature_case *c, unsigned f, int dv_ok, int grad_inputs, tg_params *P, uint64_t seed) {
    tg_ctx_init(&c->ctx, 0);
    tg_rng rng;
    tg_rng_seed(&rng, seed, f);
    const int B = 2, H = 4, d = 6;
    int Tq = 5, Tk = 5, Hkv = H, dv = dv_ok ? 4 : d;
    if (f == TG_ATTN_F_GQA) Hkv = 2;
    if (f == TG_ATTN_F_TQ_TK) Tq = 3, Tk = 7;
    const int shapes[3][4] = {{B, Tq, H, d}, {B, Tk, Hkv, d}, {B, Tk, Hkv, dv}};
    static const char *const names[3] = {"q", "k", "v"};
    tg_tensor *t[3];
    for (int i = 0; i < 3; i++) {
        t[i] = grad_inputs ? tg_param(P, names[i], 4, shapes[i]) : tg_new(&c->ctx, 4, shapes[i]);
    }
    tg_tensor *bias = NULL, *sinks = NULL;
    if (f == TG_ATTN_F_BIAS)
        bias = grad_inputs ? tg_param(P, "bias", 4, (int[]){1, H, Tq, Tk}) : tg_new(&c->ctx, 4, (int[]){1, H, Tq, Tk});
    if (f == TG_ATTN_F_SINKS) sinks = grad_inputs ? tg_param(P, "sinks", 1, (int[]){H}) : tg_new(&c->ctx, 1, (int[]){H});
    if (grad_inputs) tg_params_alloc(P);
    for (int i = 0; i < 3; i++) tg_fill_normal(&rng, t[i]->data, t[i]->numel, 0.0f, 1.0f);
    if (bias) tg_fill_normal(&rng, bias->data, bias->numel, 0.0f, 1.0f);
    if (sinks)
        for (int h = 0; h < H; h++) sinks->data[h] = 0.5f * (float)h - 0.5f;
    c->a = tg_attn_args_make(t[0], t[1], t[2], 0.5f);
    c->a.causal = 1;
    c->a.bias = bias, c->a.sinks = sinks;
    if (f == TG_ATTN_F_WINDOW) c->a.window_left = 1;
    if (f == TG_ATTN_F_PADDING) c->kv_len[0] = 3, c->kv_len[1] = 5, c->a.kv_len = c->kv_len, c->a.causal = 0;
    if (f == TG_ATTN_F_ALIBI) {
        const float sl[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
        c->a.alibi = vec(&c->ctx, H, sl);
    }
    if (f == TG_ATTN_F_SOFTCAP) c->a.softcap = 1.5f, c->a.scale = 1.2f;
    if (f == TG_ATTN_F_DROPOUT) c->a.dropout = 0.3f, c->a.dropout_seed = 11;
    snprintf(c->what, sizeof c->what, "%s", tg_attn_feature_name(f));
}

/* ---- forward ------------------------------------------------------------------------ */
static void probe_forward(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    int ds[4], nd = grid(o, ds);
    const int Ts[4] = {1, 7, 64, 256};
    for (int di = 0; di < nd; di++) {
        const int d = ds[di], dv = K->features & TG_ATTN_F_DV ? d / 2 + 3 : d, B = 2, H = 2;
        double worst = 0, worst_rel = 0;
        char where[120] = "", what[24], bad[400] = "";
        snprintf(what, sizeof what, "d_head=%d", d);
        for (int ti = 0; ti < 4 && !bad[0]; ti++)
            for (int causal = 0; causal <= 1 && !bad[0]; causal++)
                for (int with_hs = 0; with_hs <= 1 && !bad[0]; with_hs++) {
                    if ((!causal && conv_of(K) & TG_ATTN_C_CAUSAL_ONLY) || (with_hs && conv_of(K) & TG_ATTN_C_NO_HEAD_SCALE))
                        continue;   /* outside its conventions */
                    const int T = Ts[ti];
                    tg_ctx ctx;
                    tg_ctx_init(&ctx, 0);
                    ctx.grad_enabled = 0;
                    tg_rng rng;
                    tg_rng_seed(&rng, 1000u + (uint64_t)(d * 10 + ti), (uint64_t)(causal * 2 + with_hs));
                    tg_tensor *q = randn(&ctx, &rng, B, T, H, d, 1), *k = randn(&ctx, &rng, B, T, H, d, 1);
                    tg_tensor *v = randn(&ctx, &rng, B, T, H, dv, 1);
                    tg_attn_args a = tg_attn_args_make(q, k, v, 1.0f / sqrtf((float)d));
                    a.head_scale = with_hs ? head_scales(&ctx, H, 0.5f, 2.0f) : NULL, a.causal = causal;
                    conform(K, &a);
                    char msg[300];
                    tg_tensor *out = call(&ctx, K, &a, msg, sizeof msg);
                    tg_tensor *ref = tg_attend(&ctx, &a);
                    char at[100];
                    snprintf(at, sizeof at, "T=%d, %s, %s head_scale", T, causal ? "causal" : "not causal",
                             with_hs ? "with" : "without");
                    int64_t nf;
                    if (!out) snprintf(bad, sizeof bad, "at %s (dv = %d): %.250s", at, dv, msg);
                    else {
                        double rel = rel_err(out, ref, &nf), tol = TG_ATTN_CHECK_FWD_TOL(d, T);
                        if (nf >= 0)
                            snprintf(bad, sizeof bad, "at %s: a non-finite output (%g, row %d of %d)", at,
                                     out->data[nf], (int)(nf / (H * dv) % T), T);
                        else if (rel / tol > worst_rel) {
                            worst_rel = rel / tol, worst = rel;
                            snprintf(where, sizeof where, "%s", at);
                        }
                    }
                    tg_ctx_free(&ctx);
                }
        double tol = TG_ATTN_CHECK_FWD_TOL(d, 256);
        if (bad[0]) add(r, "forward", what, TG_ATTN_CHECK_FAIL, NAN, tol, "%s", bad);
        else if (worst_rel > 1)
            add(r, "forward", what, TG_ATTN_CHECK_FAIL, worst, worst / worst_rel,
                "differs from tg_attend by %.3g of the output's scale at %s (limit %.2g): not the same function", worst,
                where, worst / worst_rel);
        else
            add(r, "forward", what, TG_ATTN_CHECK_PASS, worst, tol,
                "agrees with tg_attend to %.2g of the output's scale (limit %.2g at T = 256) over T 1, 7, 64, 256, "
                "%s, %s, dv = %d", worst, tol, conv_of(K) & TG_ATTN_C_CAUSAL_ONLY ? "causal" : "causal and not",
                conv_of(K) & TG_ATTN_C_NO_HEAD_SCALE ? "without head_scale" : "with and without head_scale", dv);
    }
    /* each declared feature alone (dropout's mask is the kernel's own: the dropout probe) */
    for (int i = 1; i < TG_ATTN_N_FEATURES; i++) {
        const unsigned f = 1u << i;
        if (!(K->features & f) || f == TG_ATTN_F_DROPOUT) continue;
        feature_case c;
        make_case(&c, f, !!(K->features & TG_ATTN_F_DV), 0, NULL, 2024);
        conform(K, &c.a);
        c.ctx.grad_enabled = 0;
        char msg[300];
        tg_tensor *out = call(&c.ctx, K, &c.a, msg, sizeof msg), *ref = tg_attend(&c.ctx, &c.a);
        const double tol = TG_ATTN_CHECK_FWD_TOL(c.a.q->shape[3], c.a.k->shape[1]);
        int64_t nf;
        double rel = out ? rel_err(out, ref, &nf) : NAN;
        if (!out) add(r, "forward", c.what, TG_ATTN_CHECK_FAIL, NAN, tol, "with %s: %s", c.what, msg);
        else if (nf >= 0) add(r, "forward", c.what, TG_ATTN_CHECK_FAIL, NAN, tol, "with %s: a non-finite output (%g)", c.what, out->data[nf]);
        else if (rel > tol)
            add(r, "forward", c.what, TG_ATTN_CHECK_FAIL, rel, tol, "with %s: differs from tg_attend by %.3g of the output's "
                "scale (limit %.2g): see the %s probe for what", c.what, rel, tol,
                f == TG_ATTN_F_GQA ? "gqa" : f == TG_ATTN_F_TQ_TK ? "alignment" : c.what);
        else
            add(r, "forward", c.what, TG_ATTN_CHECK_PASS, rel, tol, "with %s: agrees with tg_attend to %.2g", c.what, rel);
        tg_ctx_free(&c.ctx);
    }
}

/* ---- temperature ----------------------------------------------------------------------- */
/* The multiplier the kernel applies to q·k at `scale` (mean over heads; per head into ph), measured
 * where its rows are not saturated: q is shrunk by 8 until fewer than a fifth of the rows are (c does
 * not depend on q's size in softmax(c·scale·q·k)). NaN with why when it cannot be measured. */
static double multiplier(const tg_attn_kernel *K, int d, int H, float scale, const float *hs, float *ph, char *why,
                         size_t len) {
    const int B = 2, T = d < 64 ? d : 64;   /* T <= d: V = identity padded to dv = d, which any kernel takes */
    float mult[8], sat[8];
    double c = NAN;
    for (int shrink = 0; shrink < 6; shrink++) {
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_rng rng;
        tg_rng_seed(&rng, 77, (uint64_t)d);
        const float qs = 0.5f / powf(8.0f, (float)shrink);
        tg_tensor *q = randn(&ctx, &rng, B, T, H, d, qs), *k = randn(&ctx, &rng, B, T, H, d, 0.5f);
        tg_attn_args a = tg_attn_args_make(q, k, k, scale);
        a.head_scale = hs ? vec(&ctx, H, hs) : NULL;   /* not causal: a mask's bug is the mask probe's */
        conform(K, &a);   /* causal for a causal-only kernel: c is measured under its mask */
        tg_attn_stats st = {H, NULL, NULL, sat};
        int rc = tg_attn_measure(&ctx, K, &a, &st, mult, NULL, why, len);
        tg_ctx_free(&ctx);
        if (rc) return NAN;
        double s = 0, m = 0;
        int ok = 1;
        for (int h = 0; h < H; h++) s += sat[h] / H, m += mult[h] / H, ok &= isfinite(mult[h]);
        c = m;
        if (ph)
            for (int h = 0; h < H; h++) ph[h] = mult[h];
        if (ok && s < 0.2) return c;
    }
    if (isnan(c)) snprintf(why, len, "the weights stay saturated (one-hot rows) however small q is");
    return c;
}

/* c's known signatures at d_head d and H heads: what each would mean, as possibilities. */
static void signatures(double c, int d, int H, char *out, size_t len) {
    const double sd = sqrt((double)d);
    struct { double v; const char *what; } sig[] = {
        {sd, "√d_head: `scale` ignored, softmax of the raw q·k (the seed's bug)"},
        {1 / sd, "1/√d_head: divided by d_head, or the scale applied twice"},
        {(double)d, "d_head: multiplied by √d_head instead of divided (the exponent's sign flipped)"},
        {1 / sqrt((double)H), "1/√H: scaled by the model width H·d_head, not the head's d_head"}};
    out[0] = 0;
    size_t used = 0;
    for (size_t i = 0; i < sizeof sig / sizeof sig[0]; i++)
        if (near(c, sig[i].v, 0.01)) {
            int n = snprintf(out + used, len - used, "%s%s", used ? "; or " : "; possibly c = ", sig[i].what);
            if (n < 0 || (size_t)n >= len - used) break;
            used += (size_t)n;
        }
}

static void probe_temperature(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    int ds[4], nd = grid(o, ds);
    const int H = 3;
    for (int di = 0; di < nd; di++) {
        const int d = ds[di];
        const float s = 1.0f / sqrtf((float)d);
        char what[24], why[400], sig[400];
        snprintf(what, sizeof what, "d_head=%d", d);
        double m1 = multiplier(K, d, H, s, NULL, NULL, why, sizeof why);
        if (isnan(m1)) {
            add(r, "temperature", what, TG_ATTN_CHECK_FAIL, NAN, NAN, "not measured: %s", why);
            continue;
        }
        const double c = m1 / s;
        signatures(c, d, H, sig, sizeof sig);
        if (conv_of(K) & TG_ATTN_C_SCALE_RSQRT_D) {   /* its own multiplier: only s is sent, and it must be s */
            if (near(c, 1, TG_ATTN_CHECK_C_TOL))
                add(r, "temperature", what, TG_ATTN_CHECK_PASS, c, 1, "c = %.4f: softmax(q·k/√d_head) with its own "
                    "multiplier, as declared (scale_rsqrt_d: calls with another scale are refused)", c);
            else
                add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.4g: the kernel declares its own 1/√d_head "
                    "but applies %.4g to q·k, not %.4g%s", c, m1, (double)s, sig);
        } else {
        double m2 = multiplier(K, d, H, 2 * s, NULL, NULL, why, sizeof why);
        const double ratio = m2 / m1;
        const char *rel = near(ratio, 2, 0.01) ? "follows" : near(ratio, 1, 0.01) ? "ignores"
                          : near(ratio, 0.5, 0.01) ? "inverse" : near(ratio, 4, 0.02) ? "square" : "other";
        if (rel[0] == 'f' && near(c, 1, TG_ATTN_CHECK_C_TOL))
            add(r, "temperature", what, TG_ATTN_CHECK_PASS, c, 1, "c = %.4f: softmax(scale · q·k) with the scale passed, "
                "and it follows the scale (c the same at twice the scale)", c);
        else if (rel[0] == 'f')
            add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.4g: it follows `scale` but %.2f times too %s%s", c,
                c > 1 ? c : 1 / c, c > 1 ? "warm (logits too large)" : "cold (logits too small)", sig);
        else if (rel[0] == 'i' && rel[1] == 'g' && near(m1, 1, 0.01))
            add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.2f = √%d: the kernel ignores `scale` (softmax of "
                "the raw q·k, the seed's bug)", c, d);
        else if (rel[0] == 'i' && rel[1] == 'g')
            add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.4g: the kernel ignores `scale` and applies its own "
                "multiplier %.4g to q·k (the same at twice the scale)%s%s", c, m1,
                near(m1, s, 0.01) ? ": its own 1/√d_head, right at this scale only (declare scale_rsqrt_d if the "
                                    "model's own code does so)"
                : near(m1, 1.0 / d, 0.01) ? ": its own 1/d_head" : "", sig);
        else if (rel[1] == 'n')
            add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.4g: the kernel follows `scale` inversely (half the "
                "multiplier at twice the scale): it divides by `scale` instead of multiplying%s", c, sig);
        else if (rel[0] == 's')
            add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.4g: the multiplier grows as scale² (4 times at twice "
                "the scale): the scale is applied twice%s", c, sig);
        else
            add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.4g and %.4g times that at twice the scale: the "
                "multiplier does not follow `scale` in any simple way%s", c, ratio, sig);
        }
        if (conv_of(K) & TG_ATTN_C_NO_HEAD_SCALE) continue;
        /* head scales 0.5, 2, 0.5 must multiply the heads' multipliers */
        float hm[3];
        const float hs[3] = {0.5f, 2.0f, 0.5f};
        double mh = multiplier(K, d, H, s, hs, hm, why, sizeof why);
        if (isnan(mh)) continue;
        double c0 = hm[0] / (0.5 * m1), c1 = hm[1] / (2.0 * m1);
        if (near(c0, 1, 0.01) && near(c1, 1, 0.01))
            add(r, "temperature", "head_scale", TG_ATTN_CHECK_PASS, c1, 1, "at d_head %d head scales 0.5 and 2 multiply the "
                "multiplier as they should", d);
        else if (near(hm[0], m1, 0.01) && near(hm[1], m1, 0.01))
            add(r, "temperature", "head_scale", TG_ATTN_CHECK_FAIL, c1, 1, "at d_head %d the kernel ignores head_scale (its "
                "multiplier is %.4g with head scales 0.5 and 2 as without; declare no_head_scale if the model has none)", d, m1);
        else
            add(r, "temperature", "head_scale", TG_ATTN_CHECK_FAIL, c1, 1, "at d_head %d head scales 0.5 and 2 change the "
                "multiplier by %.3g and %.3g, not 0.5 and 2", d, hm[0] / m1, hm[1] / m1);
    }
}

/* ---- equal logits: which keys a row sees, at any temperature --------------------------------- */
/* q = 0 makes every logit of a row equal whatever the kernel multiplies q·k by, so with V = identity
 * each visible key weighs 1/n and a hidden one 0. Fills seen[b][h][i] = [lo, hi) when the row's
 * visible keys are one contiguous run (else lo = -1) and returns 0; -1 with msg when the call
 * failed or the weights are not those of a softmax of equal logits. */
typedef struct { int lo, hi; } span;

static int equal_logit_spans(tg_ctx *ctx, const tg_attn_kernel *K, tg_attn_args *a, span *seen, double *sums,
                             char *msg, size_t len) {
    const int B = a->q->shape[0], Tq = a->q->shape[1], H = a->q->shape[2], Tk = a->k->shape[1];
    memset(a->q->data, 0, sizeof(float) * (size_t)a->q->numel);
    float *P = malloc(sizeof(float) * (size_t)B * H * Tq * Tk);
    if (!P) return snprintf(msg, len, "out of memory"), -1;
    char why[400];
    if (tg_attn_weights(ctx, K, a, P, why, sizeof why)) {
        snprintf(msg, len, "%s", why);
        free(P);
        return -1;
    }
    int expected = 0, zero_rows = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                const float *p = P + (((size_t)b * H + h) * Tq + i) * Tk;
                int lo = -1, hi = -1, runs = 0, n = 0;
                double sum = 0, pos = 0;
                int nan_row = 0;
                for (int j = 0; j < Tk; j++) nan_row |= !isfinite(p[j]);
                if (nan_row) {   /* 0/0: a row that sees no key, usually */
                    if (sums) sums[((size_t)b * H + h) * Tq + i] = NAN;
                    seen[((size_t)b * H + h) * Tq + i] = (span){-2, -2};
                    continue;
                }
                for (int j = 0; j < Tk; j++) {
                    if (p[j] < -1e-6f) {
                        snprintf(msg, len, "row %d of head %d (batch %d) holds weight %g for key %d with equal logits: "
                                 "not a softmax", i, h, b, p[j], j);
                        free(P);
                        return -1;
                    }
                    sum += p[j];
                    if (p[j] > 1e-6f) {
                        if (hi != j) runs++, lo = j;
                        hi = j + 1, n++, pos = p[j];
                    }
                }
                for (int j = 0; j < Tk; j++)   /* equal logits: equal weights */
                    if (p[j] > 1e-6f && !near(p[j], pos, 1e-3)) {
                        snprintf(msg, len, "row %d of head %d: equal logits give unequal weights (%g and %g): not a "
                                 "softmax of the logits (or a bias where none was asked)", i, h, p[j], pos);
                        free(P);
                        return -1;
                    }
                int vlo, vhi;
                tg_attn_visible(a, b, i, &vlo, &vhi);
                expected += vhi > vlo, zero_rows += vhi > vlo && sum == 0;
                if (vhi > vlo && fabs(sum - 1) > 1e-3 && sum != 0 && !a->sinks) {   /* 0: no key seen, the spans say */
                    if (n < Tk && fabs(sum - (double)n / Tk) < 1e-3)
                        snprintf(msg, len, "row %d of head %d (batch %d) sums to %g = %d/%d with equal logits: the mask "
                                 "is applied after the softmax (each seen key keeps 1/%d of all keys, not renormalised)",
                                 i, h, b, sum, n, Tk, Tk);
                    else
                        snprintf(msg, len, "row %d of head %d (batch %d) sums to %g with equal logits, not 1: not a "
                                 "softmax (attention weights sum to 1)", i, h, b, sum);
                    free(P);
                    return -1;
                }
                if (sums) sums[((size_t)b * H + h) * Tq + i] = sum;
                seen[((size_t)b * H + h) * Tq + i] = runs > 1 ? (span){-1, -1} : n ? (span){lo, hi} : (span){0, 0};
            }
    free(P);
    if (expected && zero_rows == expected && !a->sinks)
        return snprintf(msg, len, "every row weighs its keys 0 with equal logits: not a softmax (attention weights "
                        "sum to 1)"), -1;
    return 0;
}

/* The first row whose span differs from args': *row, its spans; -1 when none does. */
static int first_wrong(const tg_attn_args *a, const span *seen, int b, int h, span *got, span *want) {
    const int Tq = a->q->shape[1], H = a->q->shape[2];
    for (int i = 0; i < Tq; i++) {
        int lo, hi;
        tg_attn_visible(a, b, i, &lo, &hi);
        if (lo == hi) lo = hi = 0;
        const span s = seen[((size_t)b * H + h) * Tq + i];
        if (s.lo != lo || s.hi != hi) {
            *got = s, *want = (span){lo, hi};
            return i;
        }
    }
    return -1;
}

/* 1 when every row of head 0 of every batch row sees what alt's args would show. */
static int spans_are(const tg_attn_args *alt, const span *seen) {
    const int B = alt->q->shape[0];
    span got, want;
    for (int b = 0; b < B; b++)
        if (first_wrong(alt, seen, b, 0, &got, &want) >= 0) return 0;
    return 1;
}

static void say_span(char *buf, size_t len, span s) {
    if (s.lo == -2) snprintf(buf, len, "NaN weights (no key at all: 0/0?)");
    else if (s.lo < 0) snprintf(buf, len, "a broken set of keys");
    else if (s.lo == s.hi) snprintf(buf, len, "no key");
    else if (s.hi - s.lo == 1) snprintf(buf, len, "key %d", s.lo);
    else snprintf(buf, len, "keys %d..%d", s.lo, s.hi - 1);
}

static void probe_mask(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 1, T = 12, H = 2, d = 16;
    for (int causal = 1; causal >= 0; causal--) {
        if (!causal && conv_of(K) & TG_ATTN_C_CAUSAL_ONLY) continue;
        const char *what = causal ? "causal" : "not causal";
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_rng rng;
        tg_rng_seed(&rng, 5, 5);
        tg_tensor *q = randn(&ctx, &rng, B, T, H, d, 1), *k = randn(&ctx, &rng, B, T, H, d, 1);
        tg_attn_args a = tg_attn_args_make(q, k, k, 0.25f);
        a.causal = causal;
        conform(K, &a);
        span seen[B * H * T];
        char msg[400], g[40], w[40];
        if (equal_logit_spans(&ctx, K, &a, seen, NULL, msg, sizeof msg)) {
            add(r, "mask", what, TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", msg);
            tg_ctx_free(&ctx);
            continue;
        }
        span got, want;
        int row = -1, hh = 0;
        for (int h = 0; h < H && row < 0; h++) row = first_wrong(&a, seen, 0, hh = h, &got, &want);
        if (row < 0)
            add(r, "mask", what, TG_ATTN_CHECK_PASS, 0, 0, "with equal logits (any temperature) every row sees exactly %s "
                "(T = %d)", causal ? "the keys up to its own position" : "every key", T);
        else {
            say_span(g, sizeof g, got), say_span(w, sizeof w, want);
            const char *kind = !causal ? ": the non-causal call masks (declare causal_only if the kernel is causal only)"
                               : got.lo == 0 && got.hi == want.hi + 1 ? ": the mask is off by one (each row sees the next position)"
                               : got.lo == 0 && got.hi == T ? ": no causal mask"
                               : (got.lo == 0 && got.hi == want.hi - 1) || (row == 0 && got.lo == -2)
                                   ? ": the mask hides the diagonal (off by one): row 0 does not see its own position"
                               : "";
            add(r, "mask", what, TG_ATTN_CHECK_FAIL, row, 0, "with equal logits (any temperature) row %d of head %d sees %s, "
                "not %s%s", row, hh, g, w, kind);
        }
        tg_ctx_free(&ctx);
    }
}

/* ---- grouped heads ----------------------------------------------------------------------------- */
/* q = 0 and v of kv head g all g + 1: each query head's output is the number of the head it reads. */
static void probe_gqa(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 1, T = 6, H = 4, Hkv = 2, d = 8, group = H / Hkv;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    ctx.grad_enabled = 0;
    tg_rng rng;
    tg_rng_seed(&rng, 3, 3);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){B, T, H, d}), *k = randn(&ctx, &rng, B, T, Hkv, d, 1);
    tg_tensor *v = tg_new(&ctx, 4, (int[]){B, T, Hkv, d});
    for (int64_t i = 0; i < v->numel; i++) v->data[i] = (float)((i / d) % Hkv + 1);
    tg_attn_args a = tg_attn_args_make(q, k, v, 0.3f);
    conform(K, &a);   /* causal: row 0 still reads its head's v */
    char msg[300];
    tg_tensor *out = call(&ctx, K, &a, msg, sizeof msg);
    if (!out) {
        add(r, "gqa", "H=4, Hkv=2", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", msg);
        tg_ctx_free(&ctx);
        return;
    }
    int read[4], tile = 1, right = 1, mixed = -1;
    for (int h = 0; h < H; h++) {
        const double x = out->data[(size_t)h * d] - 1;   /* batch 0, row 0 */
        read[h] = (int)lround(x);
        if (fabs(x - read[h]) > 1e-3 || read[h] < 0 || read[h] >= Hkv) mixed = h;
        right &= read[h] == h / group, tile &= read[h] == h % Hkv;
    }
    if (mixed >= 0)
        add(r, "gqa", "H=4, Hkv=2", TG_ATTN_CHECK_FAIL, NAN, NAN, "query head %d reads a mixture of key/value heads (its "
            "output is %.3g of a head numbered 0..1): keys repeated along the sequence, or heads mixed", mixed,
            out->data[(size_t)mixed * d] - 1);
    else if (right)
        add(r, "gqa", "H=4, Hkv=2", TG_ATTN_CHECK_PASS, 0, 0, "query heads 0..3 read kv heads 0 0 1 1 (repeat_interleave: "
            "h / (H/Hkv))");
    else {
        int h = 0;
        while (read[h] == h / group) h++;
        add(r, "gqa", "H=4, Hkv=2", TG_ATTN_CHECK_FAIL, h, 0, "query head %d reads kv head %d, not %d%s (reads %d %d %d %d)",
            h, read[h], h / group, tile ? ": tile order (h mod Hkv) instead of repeat_interleave (h / group)" : "",
            read[0], read[1], read[2], read[3]);
    }
    tg_ctx_free(&ctx);
}

/* ---- spans of rows: alignment, window, padding -------------------------------------------------- */
/* The args' visible keys against the kernel's, with equal logits; the first wrong row in words. */
static int span_verdict(const tg_attn_kernel *K, tg_attn_args *a, char *text, size_t len, span *got, span *want) {
    const int B = a->q->shape[0], Tq = a->q->shape[1], H = a->q->shape[2];
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    span *seen = malloc(sizeof(span) * (size_t)B * H * Tq);
    int row = -1;
    if (!seen || equal_logit_spans(&ctx, K, a, seen, NULL, text, len)) {
        if (!seen) snprintf(text, len, "out of memory");
        free(seen);
        tg_ctx_free(&ctx);
        return -2;
    }
    for (int b = 0; b < B && row < 0; b++) row = first_wrong(a, seen, b, 0, got, want);
    free(seen);
    tg_ctx_free(&ctx);
    return row;
}

static tg_attn_args span_args(tg_ctx *ctx, int B, int Tq, int Tk, int d) {
    tg_rng rng;
    tg_rng_seed(&rng, 9, (uint64_t)(Tq * 1000 + Tk));
    tg_tensor *q = tg_zeros(ctx, 4, (int[]){B, Tq, 1, d}), *k = randn(ctx, &rng, B, Tk, 1, d, 1);
    tg_attn_args a = tg_attn_args_make(q, k, k, 0.3f);
    return a;
}

static void probe_alignment(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int cases[2][2] = {{3, 8}, {1, 8}};
    for (int c = 0; c < 2; c++) {
        const int Tq = cases[c][0], Tk = cases[c][1];
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_attn_args a = span_args(&ctx, 1, Tq, Tk, 8);
        a.causal = 1;
        conform(K, &a);
        char what[40], text[400], g[40], w[40];
        snprintf(what, sizeof what, "Tq=%d, Tk=%d, causal", Tq, Tk);
        span got, want;
        int row = span_verdict(K, &a, text, sizeof text, &got, &want);
        if (row == -2) add(r, "alignment", what, TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", text);
        else if (row < 0)
            add(r, "alignment", what, TG_ATTN_CHECK_PASS, 0, 0, "query i sees keys 0..i + %d: the queries are the last %d "
                "position%s (bottom-right, as decoding with a KV cache)", Tk - Tq, Tq, Tq > 1 ? "s" : "");
        else {
            say_span(g, sizeof g, got), say_span(w, sizeof w, want);
            const int top_left = got.lo == 0 && got.hi == row + 1;
            add(r, "alignment", what, TG_ATTN_CHECK_FAIL, row, 0, "query %d sees %s, not %s%s", row, g, w,
                top_left ? (Tq == 1 ? ": causal mask aligned top-left: a decoding step with a KV cache sees only the "
                                      "first key"
                                    : ": causal mask aligned top-left (query i at position i, not i + Tk − Tq)")
                         : "");
        }
        tg_ctx_free(&ctx);
    }
}

static void probe_window(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    struct { int causal, left, right, T; } cases[] = {{1, 127, -1, 300}, {0, 3, 2, 12}};
    for (int c = 0; c < 2; c++) {
        const int T = cases[c].T;
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_attn_args a = span_args(&ctx, 1, T, T, 8);
        a.causal = cases[c].causal, a.window_left = cases[c].left, a.window_right = cases[c].right;
        conform(K, &a);   /* window_causal, causal_only: the two-sided case becomes a causal (3, 0) */
        char what[40], text[400], g[40], w[40];
        snprintf(what, sizeof what, "%s (%d, %d)", a.causal ? "causal" : "two-sided", a.window_left,
                 a.causal ? 0 : a.window_right);
        span *seen = malloc(sizeof(span) * T);
        if (!seen || equal_logit_spans(&ctx, K, &a, seen, NULL, text, sizeof text)) {
            add(r, "window", what, TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", seen ? text : "out of memory");
            free(seen);
            tg_ctx_free(&ctx);
            continue;
        }
        /* over every row: what kind of wrong, if any */
        int first = -1, ignored = 1, plus_one = 1, ahead = 0, clipped = 0;
        span got = {0, 0}, want = {0, 0};
        for (int i = 0; i < T; i++) {
            int lo, hi;
            tg_attn_visible(&a, 0, i, &lo, &hi);
            const span s = seen[i];
            if (s.lo < 0) {
                ignored = plus_one = 0;
                if (first < 0) first = i, got = s, want = (span){lo, hi};
                continue;
            }
            if ((s.lo != lo || s.hi != hi) && first < 0) first = i, got = s, want = (span){lo, hi};
            if (lo > 0 || hi < T) clipped = 1;
            if ((lo > 0 && s.lo != 0) || (!a.causal && hi < T && s.hi != T) || (a.causal && s.hi != hi)) ignored = 0;
            if (s.hi != hi || (lo > 0 && s.lo != lo - 1) || (lo == 0 && s.lo != 0)) plus_one = 0;
            if (a.causal && s.hi > hi && s.hi - hi > ahead) ahead = s.hi - hi;
        }
        if (first < 0)
            add(r, "window", what, TG_ATTN_CHECK_PASS, 0, 0, "every row sees the span asked for: its own key and %d back%s "
                "(T = %d)", a.window_left, a.causal ? ", none ahead" : ", 2 ahead", T);
        else {
            say_span(g, sizeof g, got), say_span(w, sizeof w, want);
            char why[160] = "";
            if (ahead)
                snprintf(why, sizeof why, ": also sees up to %d key%s ahead: a two-sided window", ahead, ahead > 1 ? "s" : "");
            else if (ignored && clipped)
                snprintf(why, sizeof why, ": sees every key%s: the window is ignored", a.causal ? " up to its own" : "");
            else if (plus_one)
                snprintf(why, sizeof why, ": sees %d keys, the window asks for %d (left = %d): off by one",
                         got.hi - got.lo, want.hi - want.lo, a.window_left);
            else if (!a.causal) {   /* a two-sided window read wrong: one bound taken for the other, or dropped */
                tg_attn_args alt = a;
                alt.window_right = a.window_left;
                if (spans_are(&alt, seen))
                    snprintf(why, sizeof why, ": a (%d, %d) window: the right bound is taken from the left one",
                             a.window_left, a.window_left);
                alt = a, alt.window_left = a.window_right;
                if (!why[0] && spans_are(&alt, seen))
                    snprintf(why, sizeof why, ": a (%d, %d) window: the left bound is taken from the right one",
                             a.window_right, a.window_right);
                alt = a, alt.window_right = -1;
                if (!why[0] && spans_are(&alt, seen))
                    snprintf(why, sizeof why, ": the right bound is ignored (every key ahead is seen)");
                alt = a, alt.window_right = 0;
                if (!why[0] && spans_are(&alt, seen))
                    snprintf(why, sizeof why, ": no key ahead: the window is applied as a causal (left-only) one "
                             "(declare window_causal if the model's own code does so)");
                alt = a, alt.window_left = -1;
                if (!why[0] && spans_are(&alt, seen))
                    snprintf(why, sizeof why, ": the left bound is ignored (every key behind is seen)");
            }
            add(r, "window", what, TG_ATTN_CHECK_FAIL, first, 0, "row %d sees %s, not %s%s", first, g, w, why);
        }
        free(seen);
        tg_ctx_free(&ctx);
    }
}

static void probe_padding(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 2, T = 8, d = 8;
    int kv_len[2] = {5, 0};
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_attn_args a = span_args(&ctx, B, T, T, d);
    a.kv_len = kv_len;
    conform(K, &a);
    /* A kernel whose empty rows give the mean of v or NaN (a convention) is refused a call with such
     * a row by the gate; here the row is sent past that refusal, to see that it gives what is declared. */
    const unsigned empty = conv_of(K) & (TG_ATTN_C_EMPTY_MEAN | TG_ATTN_C_EMPTY_NAN);
    tg_attn_kernel K2 = *K;
    K2.conventions &= ~empty;
    span *seen = malloc(sizeof(span) * B * T);
    char text[400], g[40];
    if (!seen || equal_logit_spans(&ctx, empty ? &K2 : K, &a, seen, NULL, text, sizeof text)) {
        add(r, "padding", "kv_len 5, 0", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", seen ? text : "out of memory");
    } else {
        span got, want;
        int leak = first_wrong(&a, seen, 0, 0, &got, &want);
        int bad_empty = -1, empty_is = 0;   /* empty_is: 1 every empty row weighs every key alike, 2 NaN */
        for (int i = 0; i < T; i++) {
            const span s = seen[T + i];
            const int is = s.lo == 0 && s.hi == T ? 1 : s.lo == -2 ? 2 : s.lo == s.hi ? 0 : -1;
            if (i == 0) empty_is = is;
            if (is != empty_is && bad_empty < 0) bad_empty = i;
        }
        const int declared = empty & TG_ATTN_C_EMPTY_MEAN ? 1 : empty & TG_ATTN_C_EMPTY_NAN ? 2 : 0;
        static const char *const gives[3] = {"0", "the mean of v (every key weighs alike)", "NaN"};
        /* kv_len applied to the queries (a [B, T, 1] mask, not [B, 1, T]): rows past it see nothing,
         * the rest every key (not causal) or every key up to their own */
        int on_queries = 1;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < T; i++) {
                const span s = seen[(size_t)b * T + i];
                on_queries &= i < kv_len[b] ? s.lo == 0 && s.hi == (a.causal ? i + 1 : T)
                                            : s.lo == -2 || s.lo == s.hi || (declared == 1 && s.lo == 0 && s.hi == T);
            }
        if (leak >= 0 && on_queries)
            add(r, "padding", "kv_len 5, 0", TG_ATTN_CHECK_FAIL, leak, 0, "rows 0..4 of batch 0 (kv_len 5) see every key%s "
                "and rows 5..7 none: kv_len masks the queries, not the keys (a [B, T, 1] mask where [B, 1, T] belongs)",
                a.causal ? " up to their own" : "");
        else if (leak >= 0) {
            span s = seen[leak];
            say_span(g, sizeof g, s);
            add(r, "padding", "kv_len 5, 0", TG_ATTN_CHECK_FAIL, leak, 0, "row %d of batch 0 (kv_len 5) sees %s: %s", leak, g,
                s.lo >= 0 && s.hi > 5 ? "keys past kv_len leak" : "not keys 0..4");
        } else if (bad_empty >= 0 || empty_is < 0 || empty_is != declared)
            add(r, "padding", "kv_len 5, 0", TG_ATTN_CHECK_FAIL, bad_empty, 0, "a row that sees no key (kv_len 0) gives %s "
                "instead of %s%s", empty_is < 0 || bad_empty >= 0 ? "weights on some keys" : empty_is == 2 ? "NaN"
                : empty_is == 1 ? "weights: every key alike, the mean of v" : "0", gives[declared],
                declared ? " (as its convention declares)" : empty_is == 1 ? " (an additive finfo.min mask? declare "
                "empty_mean if the model's own code does so)" : empty_is == 2 ? " (a -inf mask: 0/0? declare empty_nan "
                "if the model's own code does so)" : "");
        else {
            add(r, "padding", "kv_len 5, 0", TG_ATTN_CHECK_PASS, 0, 0, "keys past kv_len get no weight%s", declared ? ""
                : "; a row with no key (kv_len 0) is 0, not NaN");
            if (declared)
                add(r, "padding", "empty row", TG_ATTN_CHECK_INFO, NAN, NAN, "a row with no key (kv_len 0) gives %s, as "
                    "declared (%s); the programs refuse calls with such rows", gives[declared],
                    tg_attn_convention_token(empty));
        }
    }
    free(seen);
    tg_ctx_free(&ctx);
}

/* ---- additive logits: bias and ALiBi, with q = 0 the logits are theirs alone ------------------ */
/* ln p of each visible key of row (b, h, i), centred; from V = identity weights P [B,H,Tq,Tk]. The
 * least-squares slope of it against x (centred per row) over the rows of head h; NaN if none. */
static double slope_vs(const float *P, const float *x_of, int B, int H, int Tq, int Tk, int h, int bx, int hx) {
    double sxy = 0, sxx = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Tq; i++) {
            const float *p = P + (((size_t)b * H + h) * Tq + i) * Tk;
            const float *x = x_of + (((size_t)(bx ? b : 0) * (hx ? H : 1) + (hx ? h : 0)) * Tq + i) * Tk;
            double ml = 0, mx = 0;
            int n = 0;
            for (int j = 0; j < Tk; j++)
                if (p[j] > 1e-30f) ml += log(p[j]), mx += x[j], n++;
            if (n < 2) continue;
            ml /= n, mx /= n;
            for (int j = 0; j < Tk; j++)
                if (p[j] > 1e-30f) sxy += (log(p[j]) - ml) * (x[j] - mx), sxx += (x[j] - mx) * (x[j] - mx);
        }
    return sxx > 0 ? sxy / sxx : NAN;
}

static void probe_bias(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 2, T = 6, H = 2, d = 8;
    const float scale = 0.25f;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_rng rng;
    tg_rng_seed(&rng, 21, 1);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){B, T, H, d}), *k = randn(&ctx, &rng, B, T, H, d, 1);
    tg_tensor *bias = tg_new(&ctx, 4, (int[]){1, H, T, T});
    tg_fill_normal(&rng, bias->data, bias->numel, 0.0f, 1.0f);
    tg_attn_args a = tg_attn_args_make(q, k, k, scale);
    a.bias = bias;
    conform(K, &a);
    float *P = malloc(sizeof(float) * B * H * T * T);
    char why[400] = "out of memory";
    if (!P || tg_attn_weights(&ctx, K, &a, P, why, sizeof why)) {
        add(r, "bias", "[1,H,T,T]", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", why);
        free(P);
        tg_ctx_free(&ctx);
        return;
    }
    int bad = 0;
    for (int h = 0; h < H && !bad; h++) {
        const double own = slope_vs(P, bias->data, B, H, T, T, h, 0, 1);
        const double other = slope_vs(P, bias->data + (size_t)(1 - h) * T * T, B, H, T, T, h, 0, 0);
        char what[24];
        snprintf(what, sizeof what, "head %d", h);
        if (near(own, 1, 0.01)) continue;
        bad = 1;
        if (near(own, a.scale, 0.02))
            add(r, "bias", what, TG_ATTN_CHECK_FAIL, own, 1, "the bias enters the logits times %.3g = the softmax scale: it "
                "is added before the scale, not after", own);
        else if (near(other, 1, 0.01))
            add(r, "bias", what, TG_ATTN_CHECK_FAIL, own, 1, "head %d gets head %d's bias: %s", h, 1 - h,
                h == 1 ? "one head's bias for every head (not broadcast per head), or heads swapped" : "heads swapped");
        else if (isnan(own) || fabs(own) < 0.01)
            add(r, "bias", what, TG_ATTN_CHECK_FAIL, own, 1, "the bias has no effect on the weights (ignored)");
        else
            add(r, "bias", what, TG_ATTN_CHECK_FAIL, own, 1, "the bias enters the logits times %.3g, not 1", own);
    }
    if (!bad) {
        /* one bias for every head: [1, 1, T, T] must act as that bias on each head */
        tg_tensor *b1 = tg_new(&ctx, 4, (int[]){1, 1, T, T});
        memcpy(b1->data, bias->data, sizeof(float) * T * T);
        a.bias = b1;
        if (tg_attn_weights(&ctx, K, &a, P, why, sizeof why))
            add(r, "bias", "[1,1,T,T]", TG_ATTN_CHECK_FAIL, NAN, NAN, "a bias [1,1,T,T] (one for every head) is not taken: %s",
                why), bad = 1;
        else {
            const double s1 = slope_vs(P, b1->data, B, H, T, T, 1, 0, 0);
            if (!near(s1, 1, 0.01))
                add(r, "bias", "[1,1,T,T]", TG_ATTN_CHECK_FAIL, s1, 1, "a bias [1,1,T,T] reaches head 1 times %.3g: not "
                    "broadcast over heads", s1), bad = 1;
        }
    }
    if (!bad)
        add(r, "bias", "[1,H,T,T]", TG_ATTN_CHECK_PASS, 1, 1, "each head's logits get its own bias, after the scale (slope 1 "
            "per head); [1,1,T,T] is broadcast over heads");
    free(P);
    tg_ctx_free(&ctx);
}

static void probe_alibi(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 1, T = 8, H = 3, d = 8;
    const float scale = 0.25f, sl[3] = {0.5f, 0.25f, 0.125f};
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_rng rng;
    tg_rng_seed(&rng, 22, 1);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){B, T, H, d}), *k = randn(&ctx, &rng, B, T, H, d, 1);
    tg_attn_args a = tg_attn_args_make(q, k, k, scale);
    a.alibi = vec(&ctx, H, sl);
    conform(K, &a);   /* alibi_causal: under the mask, BLOOM's slope·j is −slope·|j − i| plus the row's constant */
    float *P = malloc(sizeof(float) * B * H * T * T), *dist = malloc(sizeof(float) * 2 * T * T);
    char why[400] = "out of memory";
    float *ramp = dist ? dist + T * T : NULL;
    for (int i = 0; i < T && ramp; i++)
        for (int j = 0; j < T; j++) dist[i * T + j] = -fabsf((float)(j - i)), ramp[i * T + j] = (float)j;
    if (!P || !dist || tg_attn_weights(&ctx, K, &a, P, why, sizeof why))
        add(r, "alibi", "slopes", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", why);
    else {
        double m[3];
        int ok = 1;
        for (int h = 0; h < H; h++) m[h] = slope_vs(P, dist, B, H, T, T, h, 0, 0), ok &= near(m[h], sl[h], 0.01);
        if (ok)
            add(r, "alibi", "slopes", TG_ATTN_CHECK_PASS, m[0], sl[0], "logit −= slope_h·|j − i| with each head's own slope "
                "(measured %.4g %.4g %.4g)", m[0], m[1], m[2]);
        else {
            /* BLOOM's one-sided ramp slope·j (the key's position): −slope·|j − i| up to the row's constant only
             * under a causal mask, so outside one it is a convention, not a wrong sign */
            int one_sided = !a.causal;
            for (int h = 0; h < H; h++) one_sided &= near(slope_vs(P, ramp, B, H, T, T, h, 0, 0), sl[h], 0.01);
            const char *why2 = one_sided ? ": the logits get +slope·j (the key's position), BLOOM's one-sided ramp, equal to "
                                           "ALiBi only under a causal mask (declare alibi_causal if the model's own code "
                                           "does so)"
                               : m[0] < 0 ? ": the sign is flipped (farther keys favoured)"
                               : near(m[0], sl[2], 0.01) && near(m[2], sl[0], 0.01) ? ": the heads' slopes in reverse order"
                               : near(m[0], sl[0] * a.scale, 0.01) ? ": the slopes are multiplied by the softmax scale"
                               : near(m[0], sl[0] / a.scale, 0.01) ? ": the slopes are divided by the softmax scale"
                               : fabs(m[0]) < 1e-3 ? ": ALiBi has no effect (ignored)" : "";
            add(r, "alibi", "slopes", TG_ATTN_CHECK_FAIL, m[0], sl[0], "slopes measured %.4g %.4g %.4g, given %.4g %.4g %.4g%s",
                m[0], m[1], m[2], sl[0], sl[1], sl[2], why2);
        }
    }
    free(P), free(dist);
    tg_ctx_free(&ctx);
}

/* ---- soft-capping: logits out to ±256 cap along one row ------------------------------------------ */
/* Whatever the kernel's multiplier c (any c above about 1/256), the outermost logits saturate a cap,
 * so half the spread of ln p over the row is the cap the kernel applies: cap = 5 is right, scale · cap
 * is "the cap before the scale", a spread far past the cap is "no cap". */
/* The cap and the causal mask together: a kernel that masks by adding a large negative to the
 * logits *before* the cap leaks, since tanh turns that negative into −cap, and e^−cap is not 0
 * (the mask is the mask probe's; here only its order against the cap). Equal logits (q = 0),
 * T = d = 8, causal, cap 5: a hidden key must weigh 0; the leak's signature is e^−cap of a seen
 * key's weight. */
static void probe_cap_and_mask(const tg_attn_kernel *K, tg_attn_check_report *r) {
    enum { T = 8 };
    const float cap = 5.0f;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){1, T, 1, T});
    tg_rng rng;
    tg_rng_seed(&rng, 5, 5);
    tg_tensor *k = randn(&ctx, &rng, 1, T, 1, T, 1);
    tg_attn_args a = tg_attn_args_make(q, k, k, 0.5f);
    a.softcap = cap, a.causal = 1;
    conform(K, &a);
    float P[T * T];
    char why[400];
    if (tg_attn_weights(&ctx, K, &a, P, why, sizeof why)) {
        add(r, "softcap", "cap and mask", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", why);
        tg_ctx_free(&ctx);
        return;
    }
    double leak = 0, ratio = 0;   /* the largest weight of a hidden key, and it over its row's key 0 */
    for (int i = 0; i < T; i++)
        for (int j = i + 1; j < T; j++)
            if (P[i * T + j] > leak) leak = P[i * T + j], ratio = P[i * T] > 0 ? P[i * T + j] / P[i * T] : NAN;
    if (!(leak > 1e-6))
        add(r, "softcap", "cap and mask", TG_ATTN_CHECK_PASS, leak, 1e-6, "with the cap and the causal mask, hidden keys "
            "weigh 0: the mask comes after the cap");
    else if (fabs(ratio - exp(-cap)) < 0.05 * exp(-cap))
        add(r, "softcap", "cap and mask", TG_ATTN_CHECK_FAIL, leak, 1e-6, "hidden keys weigh e^-%g = %.3g of a seen key "
            "(up to %.3g): the mask is added to the logits before the cap, which turns it into -cap", (double)cap, ratio, leak);
    else
        add(r, "softcap", "cap and mask", TG_ATTN_CHECK_FAIL, leak, 1e-6, "with the cap and the causal mask, hidden keys "
            "get weight (up to %.3g)", leak);
    tg_ctx_free(&ctx);
}

static void probe_softcap(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    /* T queries, all the same, on T keys and d = T: the call uses neither Tq != Tk nor dv != d
     * (V = identity is T wide), so a kernel that declares softcap alone takes it; row 0 is read */
    enum { T = 15 };
    const int d = T;
    const float cap = 5.0f;
    const double mult[T] = {-256, -64, -16, -4, -2, -1, -0.5, 0, 0.5, 1, 2, 4, 16, 64, 256};
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){1, T, 1, d}), *k = tg_zeros(&ctx, 4, (int[]){1, T, 1, d});
    tg_attn_args a = tg_attn_args_make(q, k, k, 0.5f);
    a.softcap = cap;
    conform(K, &a);   /* causal: the last row, which sees every key, is read */
    const float scale = a.scale;
    const int row = a.causal ? T - 1 : 0;
    for (int i = 0; i < T; i++) q->data[(size_t)i * d] = 1.0f;
    for (int j = 0; j < T; j++) k->data[(size_t)j * d] = (float)(mult[j] * cap / scale);   /* s·q·k = mult · cap */
    float P[T * T];
    char why[400];
    if (tg_attn_weights(&ctx, K, &a, P, why, sizeof why)) {
        add(r, "softcap", "cap 5", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", why);
        tg_ctx_free(&ctx);
        return;
    }
    double lo = INFINITY, hi = -INFINITY;
    int n = 0, bad = 0;
    for (int j = 0; j < T; j++) {
        const float p = P[row * T + j];
        bad |= !isfinite(p);
        if (p > 0 && isfinite(p)) lo = fmin(lo, log(p)), hi = fmax(hi, log(p)), n++;
    }
    const double measured = (hi - lo) / 2;
    if (!bad && n < T)   /* a capped row keeps every key above e^−2cap of the top: one that drops keys is uncapped */
        add(r, "softcap", "cap 5", TG_ATTN_CHECK_FAIL, NAN, cap, "no cap: %d of %d keys get weight 0 (logits out to ±%.0f pass "
            "unchanged; a cap of 5 keeps every weight above e^-10 of the largest)", T - n, T, 256 * cap);
    else if (bad || !isfinite(measured))
        add(r, "softcap", "cap 5", TG_ATTN_CHECK_FAIL, NAN, cap, "not measured: the weights of the row are not finite");
    else if (near(measured, cap, 0.01))
        add(r, "softcap", "cap 5", TG_ATTN_CHECK_PASS, measured, cap, "logits capped to ±%.3g (measured), after the scale",
            measured);
    else if (near(measured, cap * scale, 0.02))
        add(r, "softcap", "cap 5", TG_ATTN_CHECK_FAIL, measured, cap, "the cap is applied before the scale: logits capped to "
            "±%.3g = scale · cap, not ±5", measured);
    else if (measured > 1.5 * cap)
        add(r, "softcap", "cap 5", TG_ATTN_CHECK_FAIL, measured, cap, "no cap: logits spread over ±%.3g, the cap asks ±5",
            measured);
    else
        add(r, "softcap", "cap 5", TG_ATTN_CHECK_FAIL, measured, cap, "the logits are capped to ±%.3g, not ±5", measured);
    tg_ctx_free(&ctx);
    probe_cap_and_mask(K, r);
}

/* ---- sinks: with equal logits a row's keys weigh n/(e^σ + n) in all ----------------------------- */
#define LN2 0.6931471805599453   /* a sink taken in base 2 measures σ·ln 2 */
static void probe_sinks(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 1, T = 4, H = 2, d = 8;
    const float sk[2] = {0.5f, -1.0f};
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){B, T, H, d}), *k = tg_zeros(&ctx, 4, (int[]){B, T, H, d});
    tg_attn_args a = tg_attn_args_make(q, k, k, 0.25f);   /* q = k = 0: equal logits */
    a.sinks = vec(&ctx, H, sk);
    conform(K, &a);
    const int row = a.causal ? T - 1 : 0;   /* a row that sees all T keys */
    float P[B * H * T * T];
    char why[400];
    if (tg_attn_weights(&ctx, K, &a, P, why, sizeof why))
        add(r, "sinks", "logit", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", why);
    else {
        double got[2], S[2];
        for (int h = 0; h < H; h++) {
            S[h] = 0;
            for (int j = 0; j < T; j++) S[h] += P[((size_t)h * T + row) * T + j];
            got[h] = fabs(S[h] - 1) <= 1e-6 ? -INFINITY : S[h] > 1 ? NAN : log(T * (1 - S[h]) / S[h]);
        }
        if (S[0] > 1 + 1e-4 || S[1] > 1 + 1e-4)   /* no sink logit explains weights that sum above 1 */
            add(r, "sinks", "logit", TG_ATTN_CHECK_FAIL, S[0], 1, "the keys' weights sum to %.3g and %.3g, above 1: the "
                "sink's e^σ is added to the keys' weights (the numerator), not only to the denominator", S[0], S[1]);
        else if (near(got[0], sk[0], 0.01) && near(got[1], sk[1], 0.01))
            add(r, "sinks", "logit", TG_ATTN_CHECK_PASS, got[0], sk[0], "each head's sink takes e^σ of the denominator "
                "(σ measured %.3g and %.3g)", got[0], got[1]);
        else
            add(r, "sinks", "logit", TG_ATTN_CHECK_FAIL, got[0], sk[0], "sink logits measured %.3g and %.3g, given %.3g and "
                "%.3g%s", got[0], got[1], sk[0], sk[1],
                isinf(got[0]) ? ": the rows sum to 1, the sink is ignored"
                : near(got[0], sk[0] * a.scale, 0.02) ? ": the sink is multiplied by the softmax scale"
                : near(got[0], sk[0] * LN2, 0.02) && near(got[1], sk[1] * LN2, 0.02)
                    ? ": σ·ln 2: the sink is taken in base 2 (2^σ), the keys in base e"
                : near(got[0], sk[1], 0.01) ? ": heads swapped" : "");
    }
    tg_ctx_free(&ctx);
}

/* ---- dropout: its rate, rescale and mask ------------------------------------------------------ */
static void probe_dropout(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 1, T = 64, H = 2, d = 8, n = B * H * T * T;
    const float p = 0.25f;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){B, T, H, d}), *k = tg_zeros(&ctx, 4, (int[]){B, T, H, d});
    tg_attn_args a = tg_attn_args_make(q, k, k, 0.3f);   /* q = k = 0: equal logits */
    a.dropout = p, a.dropout_seed = 7;
    conform(K, &a);   /* causal: only the visible weights count, row i's 1/(i + 1) each */
    float *P1 = malloc(sizeof(float) * 3 * n), *P2 = P1 ? P1 + n : NULL, *P3 = P1 ? P2 + n : NULL;
    char why[400] = "out of memory";
    int rc = P1 ? tg_attn_weights(&ctx, K, &a, P1, why, sizeof why) : -1;
    if (!rc) rc = tg_attn_weights(&ctx, K, &a, P2, why, sizeof why);
    a.dropout_seed = 8;
    if (!rc) rc = tg_attn_weights(&ctx, K, &a, P3, why, sizeof why);
    if (rc) add(r, "dropout", "p=0.25", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", why);
    else {
        int zeros = 0, kept = 0, same = 1, differ = 0, visible = 0;
        double kept_sum = 0;
        for (int e = 0; e < n; e++) {
            const int i = e / T % T, j = e % T, seen = a.causal ? i + 1 : T;
            if (j >= seen) continue;
            visible++;
            if (P1[e] == 0) zeros++;
            else kept++, kept_sum += P1[e] * seen;   /* a kept weight of equal logits: 1/seen, times 1/(1 − p) */
            same &= (P1[e] == 0) == (P2[e] == 0);
            differ += (P1[e] == 0) != (P3[e] == 0);
        }
        const double rate = (double)zeros / visible, resc = kept ? kept_sum / kept : 0;
        if (!same)
            add(r, "dropout", "p=0.25", TG_ATTN_CHECK_FAIL, rate, p, "two calls with one dropout_seed drop different weights: "
                "the mask does not come from the seed, so a backward (or a recomputation) cannot use the forward's");
        else if (fabs(rate - p) > 0.03)
            add(r, "dropout", "p=0.25", TG_ATTN_CHECK_FAIL, rate, p, "drops %.3f of the weights, asked %.2f%s", rate, p,
                rate < 1e-6 ? ": dropout ignored" : near(rate, 1 - p, 0.1) ? ": keeps p instead of 1 − p" : "");
        else if (!near(resc, 1 / (1 - p), 0.01))
            add(r, "dropout", "p=0.25", TG_ATTN_CHECK_FAIL, resc, 1 / (1 - p), "kept weights are scaled by %.3g, not 1/(1 − p) "
                "= %.3g%s", resc, 1 / (1 - p), near(resc, 1, 0.01) ? ": no rescale" : "");
        else if (differ < visible / 10)
            add(r, "dropout", "p=0.25", TG_ATTN_CHECK_FAIL, differ, visible / 10, "dropout_seed 7 and 8 drop the same weights "
                "(%d of %d differ): the seed is not used", differ, visible);
        else
            add(r, "dropout", "p=0.25", TG_ATTN_CHECK_PASS, rate, p, "drops %.3f of the weights (asked %.2f), kept ones scaled "
                "by %.3f = 1/(1 − p), the same mask for one seed, another for another (the backward: the gradient probe)",
                rate, p, resc);
    }
    free(P1);
    tg_ctx_free(&ctx);
}

/* ---- gradient --------------------------------------------------------------------------------- */
typedef struct {
    const tg_attn_kernel *K;
    tg_attn_args a;
} gc_case;

static tg_tensor *gc_f(tg_ctx *ctx, void *u) {
    gc_case *c = u;
    return tg_attn_kernel_call(ctx, c->K, &c->a);
}

/* Whether the kernel takes the call with grad on at all (a refusal would abort the checker). */
static int gc_can_call(const tg_attn_kernel *K, const tg_attn_args *a, char *msg, size_t len) {
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *out = call(&ctx, K, a, msg, len);
    int ok = out != NULL;
    if (ok && !ctx.n_nodes) snprintf(msg, len, "it recorded no node on the tape (no backward): tg_record it"), ok = 0;
    tg_ctx_free(&ctx);
    return ok;
}

static void probe_gradient(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 2, T = 5, H = 2, d = 4, dv = K->features & TG_ATTN_F_DV ? 3 : 4;
    const char *names[4] = {"q", "k", "v", "head_scale"};
    for (int which = 0; which < 4; which++) {
        if (which == 3 && conv_of(K) & TG_ATTN_C_NO_HEAD_SCALE) continue;
        double worst = 0;
        char msg[300] = "";
        for (int causal = 0; causal <= 1 && !msg[0]; causal++) {
            if (!causal && conv_of(K) & TG_ATTN_C_CAUSAL_ONLY) continue;
            tg_ctx consts;
            tg_ctx_init(&consts, 0);
            tg_params P;
            tg_params_init(&P);
            tg_rng rng;
            tg_rng_seed(&rng, 31, (uint64_t)(which * 2 + causal));
            const int shapes[4][4] = {{B, T, H, d}, {B, T, H, d}, {B, T, H, dv}, {H}};
            tg_tensor *t[4];
            for (int i = 0; i < 4; i++) {
                const int nd = i == 3 ? 1 : 4;
                t[i] = i == which ? tg_param(&P, names[i], nd, shapes[i]) : tg_new(&consts, nd, shapes[i]);
            }
            tg_params_alloc(&P);
            for (int i = 0; i < 4; i++) {
                if (i == 3) for (int h = 0; h < H; h++) t[3]->data[h] = 0.7f + 0.6f * (float)h;
                else tg_fill_normal(&rng, t[i]->data, t[i]->numel, 0.0f, 1.0f);
            }
            gc_case c = {K, tg_attn_args_make(t[0], t[1], t[2], 0.5f)};
            c.a.head_scale = t[3], c.a.causal = causal;
            conform(K, &c.a);
            if (gc_can_call(K, &c.a, msg, sizeof msg)) {
                double w = 0;
                tg_gradcheck(names[which], &P, gc_f, &c, &(tg_gc_opts){.quiet = 1, .worst = &w});
                worst = fmax(worst, w);
            }
            tg_params_free(&P);
            tg_ctx_free(&consts);
        }
        char what[24];
        snprintf(what, sizeof what, "d/d %s", names[which]);
        if (msg[0]) add(r, "gradient", what, TG_ATTN_CHECK_FAIL, NAN, 1, "%s", msg);
        else if (worst <= 1)
            add(r, "gradient", what, TG_ATTN_CHECK_PASS, worst, 1, "worst error/limit %.3f against finite differences "
                "(%s)", worst, conv_of(K) & TG_ATTN_C_CAUSAL_ONLY ? "causal" : "causal and not");
        else
            add(r, "gradient", what, TG_ATTN_CHECK_FAIL, worst, 1, "worst error/limit %.3g: the backward is not the "
                "gradient of the forward for %s", worst, names[which]);
    }
    /* every input at once under each declared feature (bias and sinks learned); dropout at a fixed seed:
     * the finite differences call the forward again, so its mask must come from the seed alone */
    for (int i = 1; i < TG_ATTN_N_FEATURES; i++) {
        const unsigned f = 1u << i;
        if (!(K->features & f)) continue;
        feature_case fc;
        tg_params P;
        tg_params_init(&P);
        make_case(&fc, f, !!(K->features & TG_ATTN_F_DV), 1, &P, 77);
        conform(K, &fc.a);
        gc_case c = {K, fc.a};
        char msg[300], what[48];
        snprintf(what, sizeof what, "with %s", fc.what);
        if (!gc_can_call(K, &c.a, msg, sizeof msg)) add(r, "gradient", what, TG_ATTN_CHECK_FAIL, NAN, 1, "%s", msg);
        else {
            double w = 0;
            tg_gradcheck(what, &P, gc_f, &c, &(tg_gc_opts){.quiet = 1, .worst = &w});
            if (w <= 1)
                add(r, "gradient", what, TG_ATTN_CHECK_PASS, w, 1, "q, k, v%s: worst error/limit %.3f", f == TG_ATTN_F_BIAS ?
                    ", bias" : f == TG_ATTN_F_SINKS ? ", sinks" : "", w);
            else
                add(r, "gradient", what, TG_ATTN_CHECK_FAIL, w, 1, "worst error/limit %.3g with %s: the backward is not the "
                    "gradient of the forward%s", w, fc.what, f == TG_ATTN_F_DROPOUT ? " (does the backward use the "
                    "forward's mask? does the mask come from dropout_seed alone?)" : f == TG_ATTN_F_SINKS ?
                    " (the sink's gradient?)" : "");
        }
        tg_params_free(&P);
        tg_ctx_free(&fc.ctx);
    }
}

/* ---- health ------------------------------------------------------------------------------------- */
/* The band of c at d_head 128 with AdamW where every seed trained as well as c = 1 (docs/results.md, the
 * temperature map; docs/data/science-map-band.tsv, which tests/attn_check_cli.sh reads to keep these
 * in step). */
#define TG_BAND_D 128
#define TG_BAND_LO 0.0625
#define TG_BAND_HI 1.0
/* cap, the cells reached (c of cap_map_c), the forgotten scale's gap on the counting task and on code */
#define TG_CAP_MAP_ROWS                                                                                       \
    {50, "1111100011", -0.0028, 0.5730}, {30, "1111100111", -0.0030, 0.4493}, {10, "1111111111", -0.0234, 0.2585}, \
        {5, "1111111111", -0.0222, NAN}

/* The map under soft-capping (docs/results.md#would-a-soft-cap-have-saved-the-team; scripts/science.sh capmap
 * and capcode; docs/data/science-capmap-cells.tsv and -gaps.tsv, docs/data/science-capcode-table.tsv, which
 * tests/attn_check_cli.sh reads to keep these in step). At d_head 128, AdamW, the counting task, 3 seeds, per
 * cap: which cells c of the grid trained as well as that cap's c = 1 (its final loss + 0.05 nats, every
 * seed; not a band: under caps 30 and 50, c = 2 and 4 fail while 8 .. 16 reach), and what the forgotten
 * scale (c = √128) cost against sqrt without a cap: the counting task's final loss and code's validation
 * loss (1,000 steps), mean over seeds (NAN: not measured). */
static const double cap_map_c[10] = {0.0625, 0.125, 0.25, 0.5, 1, 2, 4, 8, 11.313708498984761, 16};
static const struct { float cap; const char *reached; double gap_hist, gap_code; } cap_map[] = {
    TG_CAP_MAP_ROWS
};

/* the health line's forecast: c against the band, or under the run's cap against the map's cell nearest c */
static int forecast(const tg_attn_check_opts *o, double c, char *text, size_t len) {
    const double tol = TG_ATTN_CHECK_C_TOL;
    const int n = (int)(sizeof cap_map / sizeof cap_map[0]);
    int i = 0;
    while (o->softcap > 0 && i < n && cap_map[i].cap != o->softcap) i++;
    if (o->softcap > 0 && i < n) {
        int near_c = 0;
        for (int j = 1; j < 10; j++)
            if (fabs(log2(c / cap_map_c[j])) < fabs(log2(c / cap_map_c[near_c]))) near_c = j;
        if (fabs(log2(c / cap_map_c[near_c])) > 0.5) {
            snprintf(text, len, "under cap %g, c = %.3g is off the map under caps (c = 1/16 .. 16, "
                     "docs/results.md#would-a-soft-cap-have-saved-the-team): not forecast", (double)o->softcap, c);
            return 0;
        }
        /* the cell must reach on the counting task, and the forgotten scale at this cap must cost less than
         * the map's 0.05 nats on code where code was measured: a cap that saves the toy task alone is no cure */
        const int count_ok = cap_map[i].reached[near_c] == '1';
        const int code_ok = isnan(cap_map[i].gap_code) || cap_map[i].gap_code < 0.05;
        char code[120] = "; code not measured at this cap";
        if (!isnan(cap_map[i].gap_code))
            snprintf(code, sizeof code, "; on code it costs %+.3f nats%s", cap_map[i].gap_code,
                     code_ok ? "" : ": fix the scale");
        snprintf(text, len, "c = %.3g under cap %g: the counting task's map cell c = %.3g %s as well as c = 1 there "
                 "(c = √128 ends %+.3f nats from uncapped sqrt)%s (docs/results.md#would-a-soft-cap-have-saved-the-team)",
                 c, (double)o->softcap, cap_map_c[near_c], count_ok ? "trains" : "does not train", cap_map[i].gap_hist,
                 code);
        return count_ok && code_ok;
    }
    const int inside = c >= TG_BAND_LO * (1 - tol) && c <= TG_BAND_HI * (1 + tol);
    char nomap[120] = "";
    if (o->softcap > 0)
        snprintf(nomap, sizeof nomap, " (without a cap: the map under caps has no cap %g, only 50, 30, 10, 5)",
                 (double)o->softcap);
    snprintf(text, len, "c = %.3g is %s the band 1/16 .. 1 that trains as well as c = 1%s "
             "(docs/results.md#how-far-off-may-the-scale-be)%s", c, inside ? "inside" : "outside", nomap,
             inside ? "" : ": expect the collapse of docs/results.md#the-main-result");
    return inside;
}

static void probe_health(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    const int B = 4, T = 32, H = 4, d = TG_BAND_D;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_rng rng;
    tg_rng_seed(&rng, 2024, 1);
    tg_tensor *q = randn(&ctx, &rng, B, T, H, d, 1), *k = randn(&ctx, &rng, B, T, H, d, 1);
    tg_tensor *v = randn(&ctx, &rng, B, T, H, d, 1);
    const float s = 1.0f / sqrtf((float)d);
    float e[H], mx[H], sat[H], e0[H], mx0[H], sat0[H], mult[H];
    tg_attn_stats ref = {H, e0, mx0, sat0}, mine = {H, e, mx, sat};
    ctx.grad_enabled = 0;
    tg_attn_args a = tg_attn_args_make(q, k, v, s);
    a.causal = 1, a.stats = &ref;
    conform(K, &a);
    tg_attend(&ctx, &a);
    a.stats = NULL;
    char why[400];
    if (tg_attn_measure(&ctx, K, &a, &mine, mult, NULL, why, sizeof why)) {
        add(r, "health", "d_head=128", TG_ATTN_CHECK_FAIL, NAN, NAN, "not measured: %s", why);
        tg_ctx_free(&ctx);
        return;
    }
    /* the multiplier where the rows are not saturated (at initialisation they may be) */
    double c = multiplier(K, d, H, s, NULL, NULL, why, sizeof why) / s;
    const double u = tg_attn_uniform_entropy(T, 1);
    double E = 0, E0 = 0, S = 0, S0 = 0, M = -INFINITY, M0 = -INFINITY;
    for (int h = 0; h < H; h++) {
        E += e[h] / u / H, E0 += e0[h] / u / H, S += sat[h] / H, S0 += sat0[h] / H;
        M = fmax(M, mx[h]), M0 = fmax(M0, mx0[h]);
    }
    if (isnan(c)) {
        add(r, "health", "d_head=128", TG_ATTN_CHECK_FAIL, NAN, NAN, "its multiplier cannot be measured: %s", why);
        tg_ctx_free(&ctx);
        return;
    }
    M = c * s * (M0 / s);   /* the largest logit at the kernel's own c */
    char fc[300];
    const int inside = forecast(o, c, fc, sizeof fc);
    add(r, "health", "d_head=128", inside ? TG_ATTN_CHECK_PASS : TG_ATTN_CHECK_FAIL, c, TG_BAND_HI,
        "at initialisation (q, k ~ N(0, 1), T = %d, causal): entropy/uniform %.3f (tg_attend: %.3f), largest "
        "logit %.1f (%.1f), saturated rows %.0f%% (%.0f%%); %s", T, E, E0, M, M0, 100 * S, 100 * S0, fc);
    (void)mult;
    tg_ctx_free(&ctx);
}

/* ---- the probes in child processes ---------------------------------------------------------------- */
typedef void (*probe_fn)(const tg_attn_kernel *, const tg_attn_check_opts *, tg_attn_check_report *);

typedef struct {
    probe_fn p;
    const tg_attn_kernel *K;
    const tg_attn_check_opts *o;
    tg_attn_check_report *r;
    tg_attn_check_line l;   /* the parent's partial line */
    size_t got;
} probe_job;

static int probe_child(void *u, int fd) {
    probe_job *j = u;
    out_fd = fd;
    if (!j->o->exec_cmd) {
        j->p(j->K, j->o, NULL);
        return 0;
    }
    tg_attn_exec x;   /* a kernel of this child's own: the caller's pipes are the caller's */
    char err[1024];
    if (tg_attn_exec_open(&x, j->o->exec_cmd, j->o->timeout > 0 ? j->o->timeout : 60, err, sizeof err)) {
        fprintf(stderr, "attn_check: %s\n", err);
        return 5;
    }
    j->p(&x.kernel, j->o, NULL);
    tg_attn_exec_close(&x);
    return 0;
}

static void probe_bytes(void *u, const char *b, size_t n) {
    probe_job *j = u;
    while (n) {
        size_t take = sizeof j->l - j->got < n ? sizeof j->l - j->got : n;
        memcpy((char *)&j->l + j->got, b, take);
        j->got += take, b += take, n -= take;
        if (j->got == sizeof j->l) {
            j->got = 0;
            add(j->r, j->l.check, j->l.what, j->l.status, j->l.value, j->l.limit, "%s", j->l.text);
        }
    }
}

static void run_probe(const char *name, probe_fn p, const tg_attn_kernel *K, const tg_attn_check_opts *o,
                      tg_attn_check_report *r) {
    probe_job j = {.p = p, .K = K, .o = o, .r = r};
    tg_child_end end;
    char err[200];
    const double limit = o->timeout > 0 ? o->timeout : 60;
    /* an exec kernel's client holds each call to the limit and kills the kernel itself: the child's
     * own limit is only a net, far enough out not to kill the child (and orphan its kernel) first */
    const double child_limit = o->exec_cmd ? 10 * limit + 10 : limit;
    if (tg_child_run(probe_child, &j, child_limit, probe_bytes, &j, &end, err, sizeof err))
        add(r, name, "-", TG_ATTN_CHECK_CRASH, NAN, NAN, "could not run the probe: %s", err);
    else if (end.timed_out)
        add(r, name, "-", TG_ATTN_CHECK_CRASH, NAN, limit, "the kernel hung: the %s probe got no answer within %.0f s", name,
            limit);
    else if (end.signal)
        add(r, name, "-", TG_ATTN_CHECK_CRASH, NAN, NAN, "the kernel crashed (%s) in the %s probe%s", strsignal(end.signal),
            name, end.signal == SIGABRT ? " (an abort: a tg_fail outside a caught call, or no node recorded?)" : "");
    else if (end.status != 0)
        add(r, name, "-", TG_ATTN_CHECK_CRASH, NAN, NAN, "the %s probe exited with status %d", name, end.status);
}

/* A feature's forward line points at that feature's probe ("see the sinks probe for what"). When
 * that probe passed, the pointer would lead nowhere: the line says so, and where the difference
 * is instead (the temperature, the textbook forward) when one of those failed. */
static int failed_check(const tg_attn_check_report *r, const char *check, const char *what_prefix) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->lines[i].check, check) && !strncmp(r->lines[i].what, what_prefix, strlen(what_prefix)) &&
            (r->lines[i].status == TG_ATTN_CHECK_FAIL || r->lines[i].status == TG_ATTN_CHECK_CRASH))
            return 1;
    return 0;
}

static void point_forward_lines(tg_attn_check_report *r) {
    static const char *const tail = " probe for what";
    for (int i = 0; i < r->n; i++) {
        tg_attn_check_line *l = &r->lines[i];
        char *see = strstr(l->text, "see the ");
        if (strcmp(l->check, "forward") || l->status != TG_ATTN_CHECK_FAIL || !see || !strstr(see, tail)) continue;
        char probe[40];
        snprintf(probe, sizeof probe, "%.*s", (int)(strstr(see, tail) - (see + 8)), see + 8);
        if (failed_check(r, probe, "")) continue;
        const int temp = failed_check(r, "temperature", ""), plain = failed_check(r, "forward", "d_head=");
        snprintf(see, sizeof l->text - (size_t)(see - l->text), "the %s probe passed, so the difference is elsewhere%s",
                 probe, temp ? ": the temperature check failed (the multiplier applied to q·k)"
                 : plain ? ": the textbook forward differs too (the forward lines by d_head)"
                         : " (a combination of this feature with the rest of the call that its probe does not isolate)");
    }
}

int tg_attn_check(const tg_attn_kernel *K, const tg_attn_check_opts *opts, tg_attn_check_report *r) {
    tg_attn_check_opts o = opts ? *opts : (tg_attn_check_opts){0};
    *r = (tg_attn_check_report){0};
    char has[300], not_declared[300];
    add(r, "features", K->abi == 1 ? "ABI 1" : "declared", TG_ATTN_CHECK_INFO, NAN, NAN, "%s%s; not declared (not checked, "
        "and never called with them): %s", K->abi == 1 ? "ABI 1: textbook features only, and " : "",
        tg_attn_features_str(K->features, has, sizeof has),
        tg_attn_features_str(TG_ATTN_F_ALL & ~K->features, not_declared, sizeof not_declared));
    for (int i = 0; i < TG_ATTN_N_CONVENTIONS; i++)
        if (conv_of(K) & (1u << i)) {
            const unsigned c = 1u << i;
            add(r, "convention", tg_attn_convention_token(c), TG_ATTN_CHECK_INFO, NAN, NAN, "declared: %s; the probes send only "
                "calls within it, and the programs refuse a call or run outside it, naming it", tg_attn_convention_name(c));
        }
    static const struct { const char *name; probe_fn p; unsigned f; } probes[] = {
        {"forward", probe_forward, 0},          {"temperature", probe_temperature, 0},
        {"mask", probe_mask, 0},                {"gqa", probe_gqa, TG_ATTN_F_GQA},
        {"alignment", probe_alignment, TG_ATTN_F_TQ_TK}, {"window", probe_window, TG_ATTN_F_WINDOW},
        {"padding", probe_padding, TG_ATTN_F_PADDING},   {"bias", probe_bias, TG_ATTN_F_BIAS},
        {"alibi", probe_alibi, TG_ATTN_F_ALIBI},         {"softcap", probe_softcap, TG_ATTN_F_SOFTCAP},
        {"sinks", probe_sinks, TG_ATTN_F_SINKS},         {"dropout", probe_dropout, TG_ATTN_F_DROPOUT},
        {"gradient", probe_gradient, 0},        {"health", probe_health, 0}};
    /* An exec kernel runs in a process of its own: what it does cannot crash this one, and each of
     * its calls has a time limit. So its probes run here, on one kernel process, started again only
     * after it died or hung (issue 38: a probe's child started its own, an interpreter and its
     * imports each time). A plugin or built-in op runs in this process: each probe in a child. */
    tg_attn_exec *caller = o.exec_cmd ? tg_attn_exec_of(K) : NULL, own = {.to = -1, .from = -1, .err = -1};
    tg_attn_exec *x = caller && caller->owner == getpid() ? caller : NULL;
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        if (probes[i].f && !(K->features & probes[i].f)) continue;
        if (!o.exec_cmd) {
            run_probe(probes[i].name, probes[i].p, K, &o, r);
            continue;
        }
        if (!x || x->failed) {
            char err[1024];
            if (x == &own) tg_attn_exec_close(&own);
            x = NULL;
            if (tg_attn_exec_open(&own, o.exec_cmd, o.timeout > 0 ? o.timeout : 60, err, sizeof err)) {
                add(r, probes[i].name, "-", TG_ATTN_CHECK_CRASH, NAN, NAN, "the kernel could not be started again for "
                    "the %s probe: %s", probes[i].name, err);
                own = (tg_attn_exec){.to = -1, .from = -1, .err = -1};
                continue;
            }
            x = &own;
        }
        probes[i].p(&x->kernel, &o, r);
    }
    if (x == &own) tg_attn_exec_close(&own);
    point_forward_lines(r);
    return r->failed ? 1 : 0;
}

void tg_attn_check_free(tg_attn_check_report *r) {
    free(r->lines);
    *r = (tg_attn_check_report){0};
}

void tg_attn_check_print(FILE *f, const tg_attn_check_report *r, int tsv) {
    static const char *const st[] = {"ok", "FAIL", "info", "CRASH"};
    if (tsv) {
        fprintf(f, "check\twhat\tstatus\tvalue\tlimit\ttext\n");
        for (int i = 0; i < r->n; i++) {
            const tg_attn_check_line *l = &r->lines[i];
            fprintf(f, "%s\t%s\t%s\t%.6g\t%.6g\t%s\n", l->check, l->what, st[l->status], l->value, l->limit, l->text);
        }
        return;
    }
    if (r->failed) fprintf(f, "verdict: %d check%s FAILED:", r->failed, r->failed > 1 ? "s" : "");
    else fprintf(f, "verdict: the kernel conforms (%d checks)\n", r->n);
    if (r->failed) {
        int first = 1;
        for (int i = 0; i < r->n; i++)
            if (r->lines[i].status == TG_ATTN_CHECK_FAIL || r->lines[i].status == TG_ATTN_CHECK_CRASH) {
                fprintf(f, "%s %s %s", first ? "" : ";", r->lines[i].check, r->lines[i].what);
                first = 0;
            }
        fprintf(f, "\n");
    }
    for (int i = 0; i < r->n; i++) {
        const tg_attn_check_line *l = &r->lines[i];
        fprintf(f, "%-5s %-11s %-11s %s\n", st[l->status], l->check, l->what, l->text);
    }
}
