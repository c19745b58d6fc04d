/* attn_check's gradient and health probes (tg_attn_check.h): finite differences of every input,
 * and where the kernel's multiplier falls on the temperature map. */
#include "check_internal.h"
#include "gradcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- gradient --------------------------------------------------------------------------------- */
typedef struct {
    const tg_attn_kernel *K;
    tg_attn_args a;
} gc_case;

static tg_tensor *gc_f(tg_ctx *ctx, void *u) {
    gc_case *c = u;
    return tg_attn_kernel_call(ctx, c->K, &c->a);
}

/* Whether the kernel takes the call with grad on at all (a refusal would abort the checker); *mass:
 * Σ |out|, which sizes the finite differences' noise. */
static int gc_can_call(const tg_attn_kernel *K, const tg_attn_args *a, double *mass, char *msg, size_t len) {
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *out = tgc_call(&ctx, K, a, msg, len);
    int ok = out != NULL;
    if (ok && !ctx.n_nodes) snprintf(msg, len, "it recorded no node on the tape (no backward): tg_record it"), ok = 0;
    *mass = 0;
    for (int64_t i = 0; ok && i < out->numel; i++) *mass += fabs(out->data[i]);
    tg_ctx_free(&ctx);
    return ok;
}

/* The checker's options for a call whose Σ |out| is mass: its absolute limit no tighter than the noise
 * of a float32 forward's differences. L = Σ out ⊙ R carries ~u·Σ|out ⊙ R| of rounding however the kernel
 * sums (a kernel in torch sums in another order than tg_attend), and D = ΔL / 2h: a correct backward
 * of gradients near 0 (a cold multiplier: c = 0.025) sat at the default 1e-4 (issue 55). */
static tg_gc_opts gc_opts(double mass, double *worst) {
    const double h = 1e-2, noise = 8 * 0x1p-24 * mass / (2 * h);
    return (tg_gc_opts){.quiet = 1, .worst = worst, .atol = noise > 1e-4 ? noise : 0};
}

/* A low-precision kernel's gradients of q, k, v on the args of one case (q, k, v parameters of P)
 * against FlashAttention's rule, the analytic gradients of the exact attention as the reference (finite
 * differences of a rounded forward measure its rounding): the worst ratio of error to what the rule
 * allows, into *worst (NAN and msg when the call failed). */
static void lowprec_grads(const tg_attn_kernel *K, tg_params *P, tg_attn_args *a, double *worst, char *which,
                          int *fwd_off, char *msg, size_t len) {
    const int prec = tg_attn_kernel_precision(K);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_rng rng;
    tg_rng_seed(&rng, 5, 5);
    tg_params_zero_grad(P);
    tg_tensor *out = tgc_call(&ctx, K, a, msg, len);
    if (!out) {
        *worst = NAN;
        tg_ctx_free(&ctx);
        return;
    }
    float *dout = tg_arena_alloc(&ctx, sizeof(float) * (size_t)out->numel);
    tg_fill_normal(&rng, dout, out->numel, 0.0f, 1.0f);
    tg_backward_seed(&ctx, out, dout);
    const tg_tensor *in[3] = {a->q, a->k, a->v};
    float *ex[3], *lo[3], *o2 = tg_arena_alloc(&ctx, sizeof(float) * (size_t)out->numel);
    for (int i = 0; i < 3; i++)
        ex[i] = tg_arena_alloc(&ctx, sizeof(float) * (size_t)in[i]->numel),
        lo[i] = tg_arena_alloc(&ctx, sizeof(float) * (size_t)in[i]->numel);
    tgc_textbook(a, prec, 0, dout, o2, ex[0], ex[1], ex[2]);
    float *o_lo = tg_arena_alloc(&ctx, sizeof(float) * (size_t)out->numel);
    tgc_textbook(a, prec, 1, dout, o_lo, lo[0], lo[1], lo[2]);
    double ferr, fallowed;   /* another forward has other gradients: the backward is then not judged apart */
    if (tgc_lowprec_ratio(out->data, o2, o_lo, out->numel, 2, tg_precision_u(prec), &ferr, &fallowed) > 1) *fwd_off = 1;
    for (int i = 0; i < 3; i++) {
        double err, allowed;
        const double ratio = !in[i]->grad ? 0
                           : tgc_lowprec_ratio(in[i]->grad, ex[i], lo[i], in[i]->numel, a->softcap > 0 ? 4 : 2, tg_precision_u(prec),
                                               &err, &allowed);
        if (ratio < 0 || ratio > *worst) *worst = ratio < 0 ? INFINITY : ratio, *which = "qkv"[i];
    }
    tg_ctx_free(&ctx);
}

static void lowprec_gradient(const tg_attn_kernel *K, tg_attn_check_report *r) {
    const int B = 2, T = 5, H = 2, d = 4, dv = K->features & TG_ATTN_F_DV ? 3 : 4;
    const char *pn = tg_precision_name(tg_attn_kernel_precision(K));
    for (int i = 0; i < TG_ATTN_N_FEATURES; i++) {   /* i = 0: the textbook call, causal and not */
        const unsigned f = i ? 1u << i : 0;
        if (i && !(K->features & f)) continue;
        if (f == TG_ATTN_F_DV) continue;   /* every case has dv != d when declared */
        double worst = 0;
        int fwd_off = 0;
        char which = 'q', msg[300] = "", what[48];
        for (int causal = 0; causal <= (i ? 0 : 1) && !msg[0]; causal++) {
            if (!i && !tgc_takes(K, causal, 0)) continue;
            tg_params P;
            tg_params_init(&P);
            tgc_feature_case fc;
            if (i) {
                tgc_make_case(&fc, f, !!(K->features & TG_ATTN_F_DV), 1, &P, 77);
            } else {
                tg_ctx_init(&fc.ctx, 0);
                tg_tensor *q = tg_param(&P, "q", 4, (int[]){B, T, H, d}), *k = tg_param(&P, "k", 4, (int[]){B, T, H, d});
                tg_tensor *v = tg_param(&P, "v", 4, (int[]){B, T, H, dv});
                tg_params_alloc(&P);
                tg_rng rng;
                tg_rng_seed(&rng, 31, (uint64_t)causal);
                tg_fill_normal(&rng, P.data, (int64_t)P.numel, 0.0f, 1.0f);
                fc.a = tg_attn_args_make(q, k, v, 0.5f);
                fc.a.causal = causal;
            }
            tgc_conform(K, &fc.a);
            lowprec_grads(K, &P, &fc.a, &worst, &which, &fwd_off, msg, sizeof msg);
            tg_params_free(&P);
            tg_ctx_free(&fc.ctx);
        }
        snprintf(what, sizeof what, i ? "with %s" : "d/d q, k, v", i ? tg_attn_feature_name(f) : "");
        if (msg[0]) tgc_add(r, "gradient", what, TG_ATTN_CHECK_FAIL, NAN, 1, "%s", msg);
        else if (worst > 1 && fwd_off)
            tgc_add(r, "gradient", what, TG_ATTN_CHECK_INFO, worst, 1, "not judged: the forward of this call is not the "
                "contract's (see the forward lines), so neither are its gradients (error/limit %.3g for d%c against the "
                "contract's); in %s the backward is compared with the contract's gradients only, not finite differences "
                "of the kernel's own forward", worst, which, pn);
        else if (worst <= 1)
            tgc_add(r, "gradient", what, TG_ATTN_CHECK_PASS, worst, 1, "worst error/limit %.3f against the exact gradients "
                "(%s: at most %dx a textbook backward's error in %s, plus u)", worst, pn, f == TG_ATTN_F_SOFTCAP ? 4 : 2, pn);
        else if (worst < 4)   /* near the rule: more rounding than a GPU's kernel makes, not another function */
            tgc_add(r, "gradient", what, TG_ATTN_CHECK_FAIL, worst, 1, "worst error/limit %.3g for d%c: more error than "
                "%s's rounding explains (at most %dx a textbook backward's in it), though not by much: products "
                "accumulated in %s rather than fp32 (torch 1.13's CPU matmul in bf16 does so; no GPU kernel does), or a "
                "backward slightly off", worst, which, pn, f == TG_ATTN_F_SOFTCAP ? 4 : 2, pn);
        else
            tgc_add(r, "gradient", what, TG_ATTN_CHECK_FAIL, worst, 1, "worst error/limit %.3g for d%c: the backward is not "
                "the gradient of the forward, even allowing for %s's rounding (at most %dx a textbook backward's error in "
                "it)", worst, which, pn, f == TG_ATTN_F_SOFTCAP ? 4 : 2);
    }
}

void tgc_probe_gradient(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    if (tg_attn_kernel_precision(K) != TG_FP32) {
        lowprec_gradient(K, r);
        return;
    }
    const int B = 2, T = 5, H = 2, d = 4, dv = K->features & TG_ATTN_F_DV ? 3 : 4;
    const char *names[4] = {"q", "k", "v", "head_scale"};
    for (int which = 0; which < 4; which++) {
        if (which == 3 && !tgc_takes(K, 1, 1)) continue;
        double worst = 0;
        char msg[300] = "";
        for (int causal = 0; causal <= 1 && !msg[0]; causal++) {
            if (!tgc_takes(K, causal, 0)) continue;
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
            tgc_conform(K, &c.a);
            double mass;
            if (gc_can_call(K, &c.a, &mass, msg, sizeof msg)) {
                double w = 0;
                tg_gc_opts go = gc_opts(mass, &w);
                tg_gradcheck(names[which], &P, gc_f, &c, &go);
                worst = fmax(worst, w);
            }
            tg_params_free(&P);
            tg_ctx_free(&consts);
        }
        char what[24];
        snprintf(what, sizeof what, "d/d %s", names[which]);
        if (msg[0]) tgc_add(r, "gradient", what, TG_ATTN_CHECK_FAIL, NAN, 1, "%s", msg);
        else if (worst <= 1)
            tgc_add(r, "gradient", what, TG_ATTN_CHECK_PASS, worst, 1, "worst error/limit %.3f against finite differences "
                "(%s)", worst, tgc_takes(K, 0, 0) ? "causal and not" : "causal");
        else
            tgc_add(r, "gradient", what, TG_ATTN_CHECK_FAIL, worst, 1, "worst error/limit %.3g: the backward is not the "
                "gradient of the forward for %s", worst, names[which]);
    }
    /* every input at once under each declared feature (bias and sinks learned); dropout at a fixed seed:
     * the finite differences call the forward again, so its mask must come from the seed alone */
    for (int i = 1; i < TG_ATTN_N_FEATURES; i++) {
        const unsigned f = 1u << i;
        if (!(K->features & f)) continue;
        tgc_feature_case fc;
        tg_params P;
        tg_params_init(&P);
        tgc_make_case(&fc, f, !!(K->features & TG_ATTN_F_DV), 1, &P, 77);
        tgc_conform(K, &fc.a);
        gc_case c = {K, fc.a};
        char msg[300], what[48];
        snprintf(what, sizeof what, "with %s", fc.what);
        double mass;
        if (!gc_can_call(K, &c.a, &mass, msg, sizeof msg)) tgc_add(r, "gradient", what, TG_ATTN_CHECK_FAIL, NAN, 1, "%s", msg);
        else {
            double w = 0;
            tg_gc_opts go = gc_opts(mass, &w);
            tg_gradcheck(what, &P, gc_f, &c, &go);
            if (w <= 1)
                tgc_add(r, "gradient", what, TG_ATTN_CHECK_PASS, w, 1, "q, k, v%s: worst error/limit %.3f", f == TG_ATTN_F_BIAS ?
                    ", bias" : f == TG_ATTN_F_SINKS ? ", sinks" : "", w);
            else
                tgc_add(r, "gradient", what, TG_ATTN_CHECK_FAIL, w, 1, "worst error/limit %.3g with %s: the backward is not the "
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

void tgc_probe_health(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    const int B = 4, T = 32, H = 4, d = TG_BAND_D;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_rng rng;
    tg_rng_seed(&rng, 2024, 1);
    tg_tensor *q = tgc_randn(&ctx, &rng, B, T, H, d, 1), *k = tgc_randn(&ctx, &rng, B, T, H, d, 1);
    tg_tensor *v = tgc_randn(&ctx, &rng, B, T, H, d, 1);
    const float s = 1.0f / sqrtf((float)d);
    float e[H], mx[H], sat[H], e0[H], mx0[H], sat0[H], mult[H];
    tg_attn_stats ref = {H, e0, mx0, sat0}, mine = {H, e, mx, sat};
    ctx.grad_enabled = 0;
    tg_attn_args a = tg_attn_args_make(q, k, v, s);
    a.causal = 1, a.stats = &ref;
    tgc_conform(K, &a);
    tg_attend(&ctx, &a);   /* uncapped: its largest logit is s·max q·k, which the kernel's c rescales */
    /* under the run's cap the entropy and saturation are measured capped (the kernel must declare softcap
     * to be called so; a kernel that does not is measured uncapped, said) */
    const int capped = o->softcap > 0 && (K->features & TG_ATTN_F_SOFTCAP);
    float e0c[H], mx0c[H], sat0c[H];
    if (capped) {
        tg_attn_stats refc = {H, e0c, mx0c, sat0c};
        a.softcap = o->softcap, a.stats = &refc;
        tg_attend(&ctx, &a);
        for (int h = 0; h < H; h++) e0[h] = e0c[h], sat0[h] = sat0c[h];
    }
    a.stats = NULL;
    char why[400];
    if (tg_attn_measure(&ctx, K, &a, &mine, mult, NULL, why, sizeof why)) {
        tgc_add(r, "health", "d_head=128", TG_ATTN_CHECK_FAIL, NAN, NAN, "not measured: %s", why);
        tg_ctx_free(&ctx);
        return;
    }
    /* the multiplier where the rows are not saturated (at initialisation they may be) */
    double c = tgc_multiplier(K, d, H, s, NULL, NULL, why, sizeof why) / s;
    const double u = tg_attn_uniform_entropy(T, 1);
    double E = 0, E0 = 0, S = 0, S0 = 0, M = -INFINITY, M0 = -INFINITY;
    for (int h = 0; h < H; h++) {
        E += e[h] / u / H, E0 += e0[h] / u / H, S += sat[h] / H, S0 += sat0[h] / H;
        M = fmax(M, mx[h]), M0 = fmax(M0, mx0[h]);
    }
    if (isnan(c)) {
        tgc_add(r, "health", "d_head=128", TG_ATTN_CHECK_FAIL, NAN, NAN, "its multiplier cannot be measured: %s", why);
        tg_ctx_free(&ctx);
        return;
    }
    M = c * s * (M0 / s);   /* the largest logit at the kernel's own c */
    if (capped) {   /* and what the cap makes of it: C·tanh(x/C) */
        const double C = o->softcap;
        M = C * tanh(M / C), M0 = C * tanh(M0 / C);
    }
    /* scale_folded: the model's W_q starts 1/√d_head smaller (T5's init): the logits at initialisation are
     * those of c·(1/√d_head); that the fold survives training is an assumption, said */
    const int folded = !!(tg_attn_kernel_conventions(K) & TG_ATTN_C_SCALE_FOLDED);
    if (folded) c *= s, M *= s;
    char fc[600], said[800];
    /* a kernel without softcap cannot train under a cap (attn_scale --softcap refuses it): no cap's forecast */
    tg_attn_check_opts uncapped = *o;
    if (!capped) uncapped.softcap = 0;
    const int inside = forecast(&uncapped, c, fc, sizeof fc);
    if (folded) {
        snprintf(said, sizeof said, "%.599s; assuming 1/√d_head folded into W_q's initialisation (scale_folded: attn_scale "
                 "does so with this kernel), not whether training keeps it folded", fc);
        snprintf(fc, sizeof fc, "%.599s", said);
    }
    tgc_add(r, "health", "d_head=128", inside ? TG_ATTN_CHECK_PASS : TG_ATTN_CHECK_FAIL, c, TG_BAND_HI,
        "at initialisation (q, k ~ N(0, 1), T = %d, causal%s): entropy/uniform %.3f (tg_attend: %.3f), largest "
        "logit %.1f (%.1f), saturated rows %.0f%% (%.0f%%); %s", T, capped ? ", capped" : o->softcap > 0 ?
        ", not capped: the kernel does not declare softcap, so no run caps it" : "", E, E0, M, M0, 100 * S, 100 * S0, fc);
    (void)mult;
    tg_ctx_free(&ctx);
}

