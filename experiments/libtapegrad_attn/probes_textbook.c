/* attn_check's textbook probes (tg_attn_check.h): the forward against tg_attend, the temperature. */
#include "check_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- forward ------------------------------------------------------------------------ */
/* A low-precision kernel's out on a against FlashAttention's rule: rel (its error, of the output's
 * scale) over what the rule allows, in *tol (tgc_lowprec_ratio); -1: a non-finite output. */
static double lowprec_forward(int prec, tg_ctx *ctx, const tg_attn_args *a, const tg_tensor *out, double *rel,
                              double *tol) {
    tg_tensor *exact = tg_new(ctx, 4, out->shape), *low = tg_new(ctx, 4, out->shape);
    tgc_textbook(a, prec, 0, NULL, exact->data, NULL, NULL, NULL);
    tgc_textbook(a, prec, 1, NULL, low->data, NULL, NULL, NULL);
    return tgc_lowprec_ratio(out->data, exact->data, low->data, out->numel, 2, tg_precision_u(prec), rel, tol);
}

void tgc_probe_forward(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    int ds[4], nd = tgc_grid(o, ds);
    const int Ts[4] = {1, 7, 64, 256}, low = tg_attn_kernel_precision(K) != TG_FP32;
    const char *ref_name = low ? "an exact attention" : "tg_attend";
    for (int di = 0; di < nd; di++) {
        const int d = ds[di], dv = K->features & TG_ATTN_F_DV ? d / 2 + 3 : d, B = 2, H = 2;
        double worst = 0, worst_rel = 0;
        int explained = -1;   /* the precision that explains every failing case (0: none does) */
        char where[120] = "", what[24], bad[400] = "";
        snprintf(what, sizeof what, "d_head=%d", d);
        for (int ti = 0; ti < 4 && !bad[0]; ti++)
            for (int causal = 0; causal <= 1 && !bad[0]; causal++)
                for (int with_hs = 0; with_hs <= 1 && !bad[0]; with_hs++) {
                    if (!tgc_takes(K, causal, with_hs)) continue;   /* outside its conventions */
                    const int T = Ts[ti];
                    tg_ctx ctx;
                    tg_ctx_init(&ctx, 0);
                    ctx.grad_enabled = 0;
                    tg_rng rng;
                    tg_rng_seed(&rng, 1000u + (uint64_t)(d * 10 + ti), (uint64_t)(causal * 2 + with_hs));
                    tg_tensor *q = tgc_randn(&ctx, &rng, B, T, H, d, 1), *k = tgc_randn(&ctx, &rng, B, T, H, d, 1);
                    tg_tensor *v = tgc_randn(&ctx, &rng, B, T, H, dv, 1);
                    tg_attn_args a = tg_attn_args_make(q, k, v, 1.0f / sqrtf((float)d));
                    a.head_scale = with_hs ? tgc_head_scales(&ctx, H, 0.5f, 2.0f) : NULL, a.causal = causal;
                    tgc_conform(K, &a);
                    char msg[300];
                    tg_tensor *out = tgc_call(&ctx, K, &a, msg, sizeof msg);
                    tg_tensor *ref = tg_attend(&ctx, &a);
                    char at[100];
                    snprintf(at, sizeof at, "T=%d, %s, %s head_scale", T, causal ? "causal" : "not causal",
                             with_hs ? "with" : "without");
                    int64_t nf;
                    if (!out) snprintf(bad, sizeof bad, "at %s (dv = %d): %.250s", at, dv, msg);
                    else {
                        double rel = tgc_rel_err(out, ref, &nf), tol = TG_ATTN_CHECK_FWD_TOL(d, T);
                        if (low && nf < 0 && lowprec_forward(tg_attn_kernel_precision(K), &ctx, &a, out, &rel, &tol) < 0)
                            nf = 0;
                        if (!low && nf < 0 && rel > tol) {   /* would a declared fp16 or bf16 explain it? */
                            double r2, t2;
                            const int p = lowprec_forward(TG_FP16, &ctx, &a, out, &r2, &t2) <= 1   ? TG_FP16
                                          : lowprec_forward(TG_BF16, &ctx, &a, out, &r2, &t2) <= 1 ? TG_BF16 : 0;
                            explained = explained < 0 ? p : !p || !explained ? 0 : p == TG_BF16 || explained == TG_BF16 ? TG_BF16 : TG_FP16;
                        }
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
        char rule[120] = "";
        if (low)
            snprintf(rule, sizeof rule, " (%s: at most 2x a textbook attention's error in %s, plus u = its unit roundoff)",
                     tg_precision_name(tg_attn_kernel_precision(K)), tg_precision_name(tg_attn_kernel_precision(K)));
        if (bad[0]) tgc_add(r, "forward", what, TG_ATTN_CHECK_FAIL, NAN, tol, "%s", bad);
        else if (worst_rel > 1)
            tgc_add(r, "forward", what, TG_ATTN_CHECK_FAIL, worst, worst / worst_rel,
                "differs from %s by %.3g of the output's scale at %s (limit %.2g%s): not the same function%s", ref_name,
                worst, where, worst / worst_rel, rule, low && worst_rel < 4 ? " (or products accumulated in its "
                "precision rather than fp32, as torch 1.13's CPU matmul in bf16 does: within 4x of the rule)" : explained > 0 ? explained == TG_BF16 ? " (it differs by about bf16's "
                    "rounding: declare precision bf16 if the kernel computes in it)" : " (it differs by about fp16's rounding: "
                    "declare precision fp16 if the kernel computes in it)" : "");
        else
            tgc_add(r, "forward", what, TG_ATTN_CHECK_PASS, worst, low ? worst / worst_rel : tol,
                "agrees with %s to %.2g of the output's scale (limit %.2g%s) over T 1, 7, 64, 256, "
                "%s, %s, dv = %d", ref_name, worst, low ? worst / fmax(worst_rel, 1e-30) : tol,
                low ? rule : " at T = 256", tgc_takes(K, 0, 0) ? "causal and not" : "causal",
                tgc_takes(K, 1, 1) ? "with and without head_scale" : "without head_scale", dv);
    }
    /* each declared feature alone (dropout's mask is the kernel's own: the dropout probe) */
    for (int i = 1; i < TG_ATTN_N_FEATURES; i++) {
        const unsigned f = 1u << i;
        if (!(K->features & f) || f == TG_ATTN_F_DROPOUT) continue;
        tgc_feature_case c;
        tgc_make_case(&c, f, !!(K->features & TG_ATTN_F_DV), 0, NULL, 2024);
        tgc_conform(K, &c.a);
        c.ctx.grad_enabled = 0;
        char msg[300];
        tg_tensor *out = tgc_call(&c.ctx, K, &c.a, msg, sizeof msg), *ref = tg_attend(&c.ctx, &c.a);
        double tol = TG_ATTN_CHECK_FWD_TOL(c.a.q->shape[3], c.a.k->shape[1]);
        int64_t nf;
        double rel = out ? tgc_rel_err(out, ref, &nf) : NAN;
        if (out && low && nf < 0 && lowprec_forward(tg_attn_kernel_precision(K), &c.ctx, &c.a, out, &rel, &tol) < 0) nf = 0;
        if (!out) tgc_add(r, "forward", c.what, TG_ATTN_CHECK_FAIL, NAN, tol, "with %s: %s", c.what, msg);
        else if (nf >= 0) tgc_add(r, "forward", c.what, TG_ATTN_CHECK_FAIL, NAN, tol, "with %s: a non-finite output (%g)", c.what, out->data[nf]);
        else if (rel > tol)
            tgc_add(r, "forward", c.what, TG_ATTN_CHECK_FAIL, rel, tol, "with %s: differs from %s by %.3g of the output's "
                "scale (limit %.2g): see the %s probe for what", c.what, ref_name, rel, tol,
                tg_attn_check_probe_of(f));
        else
            tgc_add(r, "forward", c.what, TG_ATTN_CHECK_PASS, rel, tol, "with %s: agrees with %s to %.2g", c.what, ref_name, rel);
        tg_ctx_free(&c.ctx);
    }
}

/* ---- temperature ----------------------------------------------------------------------- */
/* The multiplier the kernel applies to q·k at `scale` (mean over heads; per head into ph), measured
 * where its rows are not saturated: q is shrunk by 8 until fewer than a fifth of the rows are (c does
 * not depend on q's size in softmax(c·scale·q·k)). NaN with why when it cannot be measured. */
double tgc_multiplier(const tg_attn_kernel *K, int d, int H, float scale, const float *hs, float *ph, char *why,
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
        tg_tensor *q = tgc_randn(&ctx, &rng, B, T, H, d, qs), *k = tgc_randn(&ctx, &rng, B, T, H, d, 0.5f);
        tg_attn_args a = tg_attn_args_make(q, k, k, scale);
        a.head_scale = hs ? tgc_vec(&ctx, H, hs) : NULL;   /* not causal: a mask's bug is the mask probe's */
        tgc_conform(K, &a);   /* causal for a causal-only kernel: c is measured under its mask */
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
        if (tgc_near(c, sig[i].v, 0.01)) {
            int n = snprintf(out + used, len - used, "%s%s", used ? "; or " : "; possibly c = ", sig[i].what);
            if (n < 0 || (size_t)n >= len - used) break;
            used += (size_t)n;
        }
}

void tgc_probe_temperature(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    int ds[4], nd = tgc_grid(o, ds);
    const int H = 3;
    for (int di = 0; di < nd; di++) {
        const int d = ds[di];
        const float s = 1.0f / sqrtf((float)d);
        char what[24], why[400], sig[400];
        snprintf(what, sizeof what, "d_head=%d", d);
        /* c from weights rounded to the kernel's precision, of logits it may have rounded (OPT rounds
         * q·scaling to bf16): within u of 1 is as near as such a kernel can be */
        const double ctol = TG_ATTN_CHECK_C_TOL + tg_precision_u(tg_attn_kernel_precision(K));
        double m1 = tgc_multiplier(K, d, H, s, NULL, NULL, why, sizeof why);
        if (isnan(m1)) {
            tgc_add(r, "temperature", what, TG_ATTN_CHECK_FAIL, NAN, NAN, "not measured: %s", why);
            continue;
        }
        const double c = m1 / s;
        signatures(c, d, H, sig, sizeof sig);
        if (tg_attn_kernel_conventions(K) & TG_ATTN_C_SCALE_FOLDED) {   /* no multiplier by design */
            if (tgc_near(m1, 1, ctol))
                tgc_add(r, "temperature", what, TG_ATTN_CHECK_PASS, m1, 1, "multiplier %.4f on q·k: no scale, as declared "
                    "(scale_folded: the model folds 1/√d_head into W_q's initialisation, as T5; c = √%d against the "
                    "textbook's scale is the model's to absorb)", m1, d);
            else
                tgc_add(r, "temperature", what, TG_ATTN_CHECK_FAIL, m1, 1, "multiplier %.4g on q·k: the kernel declares no "
                    "scale (scale_folded) but applies one%s", m1, sig);
        } else if (tgc_fitted_scale(K, d, 2 * s) != 2 * s) {   /* its own multiplier: only s is sent, and it must be s */
            if (tgc_near(c, 1, ctol))
                tgc_add(r, "temperature", what, TG_ATTN_CHECK_PASS, c, 1, "c = %.4f: softmax(q·k/√d_head) with its own "
                    "multiplier, as declared (scale_rsqrt_d: calls with another scale are refused)", c);
            else
                tgc_add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.4g: the kernel declares its own 1/√d_head "
                    "but applies %.4g to q·k, not %.4g%s", c, m1, (double)s, sig);
        } else {
        double m2 = tgc_multiplier(K, d, H, 2 * s, NULL, NULL, why, sizeof why);
        const double ratio = m2 / m1;
        const char *rel = tgc_near(ratio, 2, 0.01) ? "follows" : tgc_near(ratio, 1, 0.01) ? "ignores"
                          : tgc_near(ratio, 0.5, 0.01) ? "inverse" : tgc_near(ratio, 4, 0.02) ? "square" : "other";
        if (rel[0] == 'f' && tgc_near(c, 1, ctol))
            tgc_add(r, "temperature", what, TG_ATTN_CHECK_PASS, c, 1, "c = %.4f: softmax(scale · q·k) with the scale passed, "
                "and it follows the scale (c the same at twice the scale)", c);
        else if (rel[0] == 'f')
            tgc_add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.4g: it follows `scale` but %.2f times too %s%s", c,
                c > 1 ? c : 1 / c, c > 1 ? "warm (logits too large)" : "cold (logits too small)", sig);
        else if (rel[0] == 'i' && rel[1] == 'g' && tgc_near(m1, 1, 0.01))
            tgc_add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.2f = √%d: the kernel ignores `scale` (softmax of "
                "the raw q·k, the seed's bug)", c, d);
        else if (rel[0] == 'i' && rel[1] == 'g')
            tgc_add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.4g: the kernel ignores `scale` and applies its own "
                "multiplier %.4g to q·k (the same at twice the scale)%s%s", c, m1,
                tgc_near(m1, s, 0.01) ? ": its own 1/√d_head, right at this scale only (declare scale_rsqrt_d if the "
                                    "model's own code does so)"
                : tgc_near(m1, 1.0 / d, 0.01) ? ": its own 1/d_head" : "", sig);
        else if (rel[1] == 'n')
            tgc_add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.4g: the kernel follows `scale` inversely (half the "
                "multiplier at twice the scale): it divides by `scale` instead of multiplying%s", c, sig);
        else if (rel[0] == 's')
            tgc_add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.4g: the multiplier grows as scale² (4 times at twice "
                "the scale): the scale is applied twice%s", c, sig);
        else
            tgc_add(r, "temperature", what, TG_ATTN_CHECK_FAIL, c, 1, "c = %.4g and %.4g times that at twice the scale: the "
                "multiplier does not follow `scale` in any simple way%s", c, ratio, sig);
        }
        if (!tgc_takes(K, 1, 1)) continue;
        /* head scales 0.5, 2, 0.5 must multiply the heads' multipliers */
        float hm[3];
        const float hs[3] = {0.5f, 2.0f, 0.5f};
        double mh = tgc_multiplier(K, d, H, s, hs, hm, why, sizeof why);
        if (isnan(mh)) continue;
        double c0 = hm[0] / (0.5 * m1), c1 = hm[1] / (2.0 * m1);
        if (tgc_near(c0, 1, 0.01) && tgc_near(c1, 1, 0.01))
            tgc_add(r, "temperature", "head_scale", TG_ATTN_CHECK_PASS, c1, 1, "at d_head %d head scales 0.5 and 2 multiply the "
                "multiplier as they should", d);
        else if (tgc_near(hm[0], m1, 0.01) && tgc_near(hm[1], m1, 0.01))
            tgc_add(r, "temperature", "head_scale", TG_ATTN_CHECK_FAIL, c1, 1, "at d_head %d the kernel ignores head_scale (its "
                "multiplier is %.4g with head scales 0.5 and 2 as without; declare no_head_scale if the model has none)", d, m1);
        else
            tgc_add(r, "temperature", "head_scale", TG_ATTN_CHECK_FAIL, c1, 1, "at d_head %d head scales 0.5 and 2 change the "
                "multiplier by %.3g and %.3g, not 0.5 and 2", d, hm[0] / m1, hm[1] / m1);
    }
}


/* ---- layout ----------------------------------------------------------------------------------- */
/* Each query (i, h) points at one key of its own: k_j = e_j (one-hot, the same for every head), q = α·e_key(i, h),
 * so row (i, h) of the weights peaks at key(i, h), whatever the multiplier. A kernel that reads q's heads and
 * positions swapped ([B, H, T, d] where [B, T, H, d] is given) peaks where q's flat row (i·H + h) read as
 * (h', i') points: the probe names that, which the equal-logit probes (q = 0) cannot see. */
static int key_of(int i, int h, int causal, int T) { return causal ? (i - h > 0 ? i - h : 0) : (i + 3 * h + 1) % T; }

void tgc_probe_layout(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 1, T = 8, H = 2, d = 8, causal = !tgc_takes(K, 0, 0);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){B, T, H, d}), *k = tg_zeros(&ctx, 4, (int[]){B, T, H, d});
    for (int j = 0; j < T; j++)
        for (int h = 0; h < H; h++) k->data[((size_t)j * H + h) * d + j] = 1.0f;
    for (int i = 0; i < T; i++)
        for (int h = 0; h < H; h++) q->data[((size_t)i * H + h) * d + key_of(i, h, causal, T)] = 40.0f;
    tg_attn_args a = tg_attn_args_make(q, k, k, 1.0f / sqrtf((float)d));
    a.causal = causal;
    tgc_conform(K, &a);
    float *P = tg_arena_alloc(&ctx, sizeof(float) * (size_t)B * H * T * T);
    char why[400], what[24];
    snprintf(what, sizeof what, "T=%d, H=%d", T, H);
    if (tg_attn_weights(&ctx, K, &a, P, why, sizeof why)) {
        tgc_add(r, "layout", what, TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", why);
        tg_ctx_free(&ctx);
        return;
    }
    int right = 0, swapped = 0, first = -1, first_h = 0, got = 0;
    for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
            const float *p = P + ((size_t)h * T + i) * T;
            int m = 0;
            for (int j = 1; j < T; j++)
                if (p[j] > p[m]) m = j;
            const int flat = h * T + i, target = key_of(flat / H, flat % H, causal, T);   /* as [B, H, T, d] */
            int flat_row = 1;   /* a target the causal mask hides: every visible logit 0, the row uniform */
            for (int j = 1; j <= i; j++) flat_row &= fabsf(p[j] - p[0]) < 0.01f;
            right += m == key_of(i, h, causal, T);
            swapped += causal && target > i ? flat_row : m == target;
            if (m != key_of(i, h, causal, T) && first < 0) first = i, first_h = h, got = m;
        }
    if (right == H * T)
        tgc_add(r, "layout", what, TG_ATTN_CHECK_PASS, 0, 0, "each query (position, head) reads its own row of q: "
            "q is read as [B, T, H, d]");
    else if (swapped == H * T)
        tgc_add(r, "layout", what, TG_ATTN_CHECK_FAIL, H * T - right, 0, "query %d of head %d reads the row of q that "
            "[B, H, T, d] puts there: heads and positions swapped (q read as [B, H, T, d], given [B, T, H, d]: a "
            "transpose(1, 2) missing or doubled)", first, first_h);
    else
        tgc_add(r, "layout", what, TG_ATTN_CHECK_FAIL, H * T - right, 0, "query %d of head %d peaks at key %d, not %d: "
            "rows of q are read from elsewhere (%d of %d rows right; not a heads/positions swap)", first, first_h, got,
            key_of(first, first_h, causal, T), right, H * T);
    tg_ctx_free(&ctx);
}
