/* attn_check's probes of what changes the logits and weights (tg_attn_check.h): bias, ALiBi, the
 * soft-cap, sinks, dropout. */
#include "check_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

void tgc_probe_bias(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 2, T = 6, H = 2, d = 8;
    const float scale = 0.25f;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_rng rng;
    tg_rng_seed(&rng, 21, 1);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){B, T, H, d}), *k = tgc_randn(&ctx, &rng, B, T, H, d, 1);
    tg_tensor *bias = tg_new(&ctx, 4, (int[]){1, H, T, T});
    tg_fill_normal(&rng, bias->data, bias->numel, 0.0f, 1.0f);
    tg_attn_args a = tg_attn_args_make(q, k, k, scale);
    a.bias = bias;
    tgc_conform(K, &a);
    float *P = malloc(sizeof(float) * B * H * T * T);
    char why[400] = "out of memory";
    if (!P || tg_attn_weights(&ctx, K, &a, P, why, sizeof why)) {
        tgc_add(r, "bias", "[1,H,T,T]", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", why);
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
        if (tgc_near(own, 1, 0.01)) continue;
        bad = 1;
        if (tgc_near(own, a.scale, 0.02))
            tgc_add(r, "bias", what, TG_ATTN_CHECK_FAIL, own, 1, "the bias enters the logits times %.3g = the softmax scale: it "
                "is added before the scale, not after", own);
        else if (tgc_near(other, 1, 0.01))
            tgc_add(r, "bias", what, TG_ATTN_CHECK_FAIL, own, 1, "head %d gets head %d's bias: %s", h, 1 - h,
                h == 1 ? "one head's bias for every head (not broadcast per head), or heads swapped" : "heads swapped");
        else if (isnan(own) || fabs(own) < 0.01)
            tgc_add(r, "bias", what, TG_ATTN_CHECK_FAIL, own, 1, "the bias has no effect on the weights (ignored)");
        else
            tgc_add(r, "bias", what, TG_ATTN_CHECK_FAIL, own, 1, "the bias enters the logits times %.3g, not 1", own);
    }
    if (!bad) {
        /* one bias for every head: [1, 1, T, T] must act as that bias on each head */
        tg_tensor *b1 = tg_new(&ctx, 4, (int[]){1, 1, T, T});
        memcpy(b1->data, bias->data, sizeof(float) * T * T);
        a.bias = b1;
        if (tg_attn_weights(&ctx, K, &a, P, why, sizeof why))
            tgc_add(r, "bias", "[1,1,T,T]", TG_ATTN_CHECK_FAIL, NAN, NAN, "a bias [1,1,T,T] (one for every head) is not taken: %s",
                why), bad = 1;
        else {
            const double s1 = slope_vs(P, b1->data, B, H, T, T, 1, 0, 0);
            if (!tgc_near(s1, 1, 0.01))
                tgc_add(r, "bias", "[1,1,T,T]", TG_ATTN_CHECK_FAIL, s1, 1, "a bias [1,1,T,T] reaches head 1 times %.3g: not "
                    "broadcast over heads", s1), bad = 1;
        }
    }
    if (!bad)
        tgc_add(r, "bias", "[1,H,T,T]", TG_ATTN_CHECK_PASS, 1, 1, "each head's logits get its own bias, after the scale (slope 1 "
            "per head); [1,1,T,T] is broadcast over heads");
    free(P);
    tg_ctx_free(&ctx);
}

void tgc_probe_alibi(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 1, T = 8, H = 3, d = 8;
    const float scale = 0.25f, sl[3] = {0.5f, 0.25f, 0.125f};
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_rng rng;
    tg_rng_seed(&rng, 22, 1);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){B, T, H, d}), *k = tgc_randn(&ctx, &rng, B, T, H, d, 1);
    tg_attn_args a = tg_attn_args_make(q, k, k, scale);
    a.alibi = tgc_vec(&ctx, H, sl);
    tgc_conform(K, &a);   /* alibi_causal: under the mask, BLOOM's slope·j is −slope·|j − i| plus the row's constant */
    float *P = malloc(sizeof(float) * B * H * T * T), *dist = malloc(sizeof(float) * 2 * T * T);
    char why[400] = "out of memory";
    float *ramp = dist ? dist + T * T : NULL;
    for (int i = 0; i < T && ramp; i++)
        for (int j = 0; j < T; j++) dist[i * T + j] = -fabsf((float)(j - i)), ramp[i * T + j] = (float)j;
    if (!P || !dist || tg_attn_weights(&ctx, K, &a, P, why, sizeof why))
        tgc_add(r, "alibi", "slopes", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", why);
    else {
        double m[3];
        int ok = 1;
        for (int h = 0; h < H; h++) m[h] = slope_vs(P, dist, B, H, T, T, h, 0, 0), ok &= tgc_near(m[h], sl[h], 0.01);
        if (ok)
            tgc_add(r, "alibi", "slopes", TG_ATTN_CHECK_PASS, m[0], sl[0], "logit −= slope_h·|j − i| with each head's own slope "
                "(measured %.4g %.4g %.4g)", m[0], m[1], m[2]);
        else {
            /* BLOOM's one-sided ramp slope·j (the key's position): −slope·|j − i| up to the row's constant only
             * under a causal mask, so outside one it is a convention, not a wrong sign */
            int one_sided = !a.causal;
            for (int h = 0; h < H; h++) one_sided &= tgc_near(slope_vs(P, ramp, B, H, T, T, h, 0, 0), sl[h], 0.01);
            const char *why2 = one_sided ? ": the logits get +slope·j (the key's position), BLOOM's one-sided ramp, equal to "
                                           "ALiBi only under a causal mask (declare alibi_causal if the model's own code "
                                           "does so)"
                               : m[0] < 0 ? ": the sign is flipped (farther keys favoured)"
                               : tgc_near(m[0], sl[2], 0.01) && tgc_near(m[2], sl[0], 0.01) ? ": the heads' slopes in reverse order"
                               : tgc_near(m[0], sl[0] * a.scale, 0.01) ? ": the slopes are multiplied by the softmax scale"
                               : tgc_near(m[0], sl[0] / a.scale, 0.01) ? ": the slopes are divided by the softmax scale"
                               : fabs(m[0]) < 1e-3 ? ": ALiBi has no effect (ignored)" : "";
            tgc_add(r, "alibi", "slopes", TG_ATTN_CHECK_FAIL, m[0], sl[0], "slopes measured %.4g %.4g %.4g, given %.4g %.4g %.4g%s",
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
    tg_tensor *k = tgc_randn(&ctx, &rng, 1, T, 1, T, 1);
    tg_attn_args a = tg_attn_args_make(q, k, k, 0.5f);
    a.softcap = cap, a.causal = 1;
    tgc_conform(K, &a);
    float P[T * T];
    char why[400];
    if (tg_attn_weights(&ctx, K, &a, P, why, sizeof why)) {
        tgc_add(r, "softcap", "cap and mask", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", why);
        tg_ctx_free(&ctx);
        return;
    }
    double leak = 0, ratio = 0;   /* the largest weight of a hidden key, and it over its row's key 0 */
    for (int i = 0; i < T; i++)
        for (int j = i + 1; j < T; j++)
            if (P[i * T + j] > leak) leak = P[i * T + j], ratio = P[i * T] > 0 ? P[i * T + j] / P[i * T] : NAN;
    if (!(leak > 1e-6))
        tgc_add(r, "softcap", "cap and mask", TG_ATTN_CHECK_PASS, leak, 1e-6, "with the cap and the causal mask, hidden keys "
            "weigh 0: the mask comes after the cap");
    else if (fabs(ratio - exp(-cap)) < 0.05 * exp(-cap))
        tgc_add(r, "softcap", "cap and mask", TG_ATTN_CHECK_FAIL, leak, 1e-6, "hidden keys weigh e^-%g = %.3g of a seen key "
            "(up to %.3g): the mask is added to the logits before the cap, which turns it into -cap", (double)cap, ratio, leak);
    else
        tgc_add(r, "softcap", "cap and mask", TG_ATTN_CHECK_FAIL, leak, 1e-6, "with the cap and the causal mask, hidden keys "
            "get weight (up to %.3g)", leak);
    tg_ctx_free(&ctx);
}

void tgc_probe_softcap(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
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
    tgc_conform(K, &a);   /* causal: the last row, which sees every key, is read */
    const float scale = a.scale;
    const int row = a.causal ? T - 1 : 0;
    for (int i = 0; i < T; i++) q->data[(size_t)i * d] = 1.0f;
    for (int j = 0; j < T; j++) k->data[(size_t)j * d] = (float)(mult[j] * cap / scale);   /* s·q·k = mult · cap */
    float P[T * T];
    char why[400];
    if (tg_attn_weights(&ctx, K, &a, P, why, sizeof why)) {
        tgc_add(r, "softcap", "cap 5", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", why);
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
        tgc_add(r, "softcap", "cap 5", TG_ATTN_CHECK_FAIL, NAN, cap, "no cap: %d of %d keys get weight 0 (logits out to ±%.0f pass "
            "unchanged; a cap of 5 keeps every weight above e^-10 of the largest)", T - n, T, 256 * cap);
    else if (bad || !isfinite(measured))
        tgc_add(r, "softcap", "cap 5", TG_ATTN_CHECK_FAIL, NAN, cap, "not measured: the weights of the row are not finite");
    else if (tgc_near(measured, cap, 0.01))
        tgc_add(r, "softcap", "cap 5", TG_ATTN_CHECK_PASS, measured, cap, "logits capped to ±%.3g (measured), after the scale",
            measured);
    else if (tgc_near(measured, cap * scale, 0.02))
        tgc_add(r, "softcap", "cap 5", TG_ATTN_CHECK_FAIL, measured, cap, "the cap is applied before the scale: logits capped to "
            "±%.3g = scale · cap, not ±5", measured);
    else if (measured > 1.5 * cap)
        tgc_add(r, "softcap", "cap 5", TG_ATTN_CHECK_FAIL, measured, cap, "no cap: logits spread over ±%.3g, the cap asks ±5",
            measured);
    else
        tgc_add(r, "softcap", "cap 5", TG_ATTN_CHECK_FAIL, measured, cap, "the logits are capped to ±%.3g, not ±5", measured);
    tg_ctx_free(&ctx);
    probe_cap_and_mask(K, r);
}

/* ---- sinks: with equal logits a row's keys weigh n/(e^σ + n) in all ----------------------------- */
#define LN2 0.6931471805599453   /* a sink taken in base 2 measures σ·ln 2 */
void tgc_probe_sinks(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 1, T = 4, H = 2, d = 8;
    const float sk[2] = {0.5f, -1.0f};
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){B, T, H, d}), *k = tg_zeros(&ctx, 4, (int[]){B, T, H, d});
    tg_attn_args a = tg_attn_args_make(q, k, k, 0.25f);   /* q = k = 0: equal logits */
    a.sinks = tgc_vec(&ctx, H, sk);
    tgc_conform(K, &a);
    const int row = a.causal ? T - 1 : 0;   /* a row that sees all T keys */
    float P[B * H * T * T];
    char why[400];
    if (tg_attn_weights(&ctx, K, &a, P, why, sizeof why))
        tgc_add(r, "sinks", "logit", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", why);
    else {
        double got[2], S[2];
        for (int h = 0; h < H; h++) {
            S[h] = 0;
            for (int j = 0; j < T; j++) S[h] += P[((size_t)h * T + row) * T + j];
            got[h] = fabs(S[h] - 1) <= 1e-6 ? -INFINITY : S[h] > 1 ? NAN : log(T * (1 - S[h]) / S[h]);
        }
        if (S[0] > 1 + 1e-4 || S[1] > 1 + 1e-4)   /* no sink logit explains weights that sum above 1 */
            tgc_add(r, "sinks", "logit", TG_ATTN_CHECK_FAIL, S[0], 1, "the keys' weights sum to %.3g and %.3g, above 1: the "
                "sink's e^σ is added to the keys' weights (the numerator), not only to the denominator", S[0], S[1]);
        else if (tgc_near(got[0], sk[0], 0.01) && tgc_near(got[1], sk[1], 0.01))
            tgc_add(r, "sinks", "logit", TG_ATTN_CHECK_PASS, got[0], sk[0], "each head's sink takes e^σ of the denominator "
                "(σ measured %.3g and %.3g)", got[0], got[1]);
        else
            tgc_add(r, "sinks", "logit", TG_ATTN_CHECK_FAIL, got[0], sk[0], "sink logits measured %.3g and %.3g, given %.3g and "
                "%.3g%s", got[0], got[1], sk[0], sk[1],
                isinf(got[0]) ? ": the rows sum to 1, the sink is ignored"
                : tgc_near(got[0], sk[0] * a.scale, 0.02) ? ": the sink is multiplied by the softmax scale"
                : tgc_near(got[0], sk[0] * LN2, 0.02) && tgc_near(got[1], sk[1] * LN2, 0.02)
                    ? ": σ·ln 2: the sink is taken in base 2 (2^σ), the keys in base e"
                : tgc_near(got[0], sk[1], 0.01) ? ": heads swapped" : "");
    }
    tg_ctx_free(&ctx);
}

/* ---- dropout: its rate, rescale and mask ------------------------------------------------------ */
void tgc_probe_dropout(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 1, T = 64, H = 2, d = 8, n = B * H * T * T;
    const float p = 0.25f;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){B, T, H, d}), *k = tg_zeros(&ctx, 4, (int[]){B, T, H, d});
    tg_attn_args a = tg_attn_args_make(q, k, k, 0.3f);   /* q = k = 0: equal logits */
    a.dropout = p, a.dropout_seed = 7;
    tgc_conform(K, &a);   /* causal: only the visible weights count, row i's 1/(i + 1) each */
    float *P1 = malloc(sizeof(float) * 3 * n), *P2 = P1 ? P1 + n : NULL, *P3 = P1 ? P2 + n : NULL;
    char why[400] = "out of memory";
    int rc = P1 ? tg_attn_weights(&ctx, K, &a, P1, why, sizeof why) : -1;
    if (!rc) rc = tg_attn_weights(&ctx, K, &a, P2, why, sizeof why);
    a.dropout_seed = 8;
    if (!rc) rc = tg_attn_weights(&ctx, K, &a, P3, why, sizeof why);
    if (rc) tgc_add(r, "dropout", "p=0.25", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", why);
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
            tgc_add(r, "dropout", "p=0.25", TG_ATTN_CHECK_FAIL, rate, p, "two calls with one dropout_seed drop different weights: "
                "the mask does not come from the seed, so a backward (or a recomputation) cannot use the forward's");
        else if (fabs(rate - p) > 0.03)
            tgc_add(r, "dropout", "p=0.25", TG_ATTN_CHECK_FAIL, rate, p, "drops %.3f of the weights, asked %.2f%s", rate, p,
                rate < 1e-6 ? ": dropout ignored" : tgc_near(rate, 1 - p, 0.1) ? ": keeps p instead of 1 − p" : "");
        else if (!tgc_near(resc, 1 / (1 - p), 0.01))
            tgc_add(r, "dropout", "p=0.25", TG_ATTN_CHECK_FAIL, resc, 1 / (1 - p), "kept weights are scaled by %.3g, not 1/(1 − p) "
                "= %.3g%s", resc, 1 / (1 - p), tgc_near(resc, 1, 0.01) ? ": no rescale" : "");
        else if (differ < visible / 10)
            tgc_add(r, "dropout", "p=0.25", TG_ATTN_CHECK_FAIL, differ, visible / 10, "dropout_seed 7 and 8 drop the same weights "
                "(%d of %d differ): the seed is not used", differ, visible);
        else
            tgc_add(r, "dropout", "p=0.25", TG_ATTN_CHECK_PASS, rate, p, "drops %.3f of the weights (asked %.2f), kept ones scaled "
                "by %.3f = 1/(1 − p), the same mask for one seed, another for another (the backward: the gradient probe)",
                rate, p, resc);
    }
    free(P1);
    tg_ctx_free(&ctx);
}

