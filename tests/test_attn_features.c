/* The attention contract of tg_attn_args (ops/attention.h) in both ops:
 * grouped-query heads, bottom-right alignment with Tq != Tk, windows, key
 * padding, rows that see nothing; against a float64 reference written here
 * (the slowest, most obvious loops), against finite differences, and the fused
 * op against the composed one at tile edges, in saturated rows and at 1 and 2
 * threads. Bad args are refused with the op and the value. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "gradcheck.h"
#include "tg_ops.h"
#include "testutil.h"

/* One call's settings; the tensors live in P. */
typedef struct {
    int B, Tq, Tk, H, Hkv, d, dv;
    int causal, left, right, with_hs, fused;
    const int *kv_len;
    float scale;
    tg_tensor *q, *k, *v, *hs;
} feat;

static tg_attn_args args_of(feat *f, tg_attn_stats *st) {
    tg_attn_args a = tg_attn_args_make(f->q, f->k, f->v, f->scale);
    a.head_scale = f->hs, a.causal = f->causal, a.window_left = f->left, a.window_right = f->right;
    a.kv_len = f->kv_len, a.stats = st;
    return a;
}

static tg_tensor *call(tg_ctx *ctx, feat *f, tg_attn_stats *st) {
    tg_attn_args a = args_of(f, st);
    return f->fused ? tg_flash_attend(ctx, &a) : tg_attend(ctx, &a);
}

static tg_tensor *f_call(tg_ctx *ctx, void *u) { return call(ctx, u, NULL); }

/* The output seed R of a backward: N(0, 1), [B, Tq, H, dv] (malloc'd). */
static float *out_seed(const feat *f, uint64_t seed, uint64_t stream) {
    const int64_t n = (int64_t)f->B * f->Tq * f->H * f->dv;
    float *R = malloc(sizeof(float) * (size_t)n);
    tg_rng rng;
    tg_rng_seed(&rng, seed, stream);
    tg_fill_normal(&rng, R, n, 0, 1);
    return R;
}

static void make(tg_params *P, feat *f, uint64_t seed, float std) {
    tg_params_init(P);
    f->q = tg_param(P, "q", 4, (int[]){f->B, f->Tq, f->H, f->d});
    f->k = tg_param(P, "k", 4, (int[]){f->B, f->Tk, f->Hkv, f->d});
    f->v = tg_param(P, "v", 4, (int[]){f->B, f->Tk, f->Hkv, f->dv});
    f->hs = f->with_hs ? tg_param(P, "hs", 1, (int[]){f->H}) : NULL;
    tg_params_alloc(P);
    tg_test_fill(P, seed, std);
    if (f->hs)
        for (int h = 0; h < f->H; h++) f->hs->data[h] = 0.6f + 0.3f * (float)h;
}

/* ---- the float64 reference ------------------------------------------------- */

/* Visible: the contract's three rules, written out again here on purpose (not
 * tg_attn_visible): causal j <= p, window p - left <= j <= p + right, j < kv_len. */
static int ref_visible(const feat *f, int b, int i, int j) {
    const long p = (long)i + f->Tk - f->Tq;
    if (f->causal && j > p) return 0;
    if (f->left >= 0 && j < p - f->left) return 0;
    if (f->right >= 0 && j > p + f->right) return 0;
    if (f->kv_len && j >= f->kv_len[b]) return 0;
    return 1;
}

#define AT4(t, b, i, h, c) ((t)->data[(((int64_t)(b) * (t)->shape[1] + (i)) * (t)->shape[2] + (h)) * (t)->shape[3] + (c)])
#define IX4(t, b, i, h, c) ((((int64_t)(b) * (t)->shape[1] + (i)) * (t)->shape[2] + (h)) * (t)->shape[3] + (c))

typedef struct {
    double *out, *dq, *dk, *dv, *dhs;   /* the out and grads for seed R */
    double mag[5];                      /* per tensor: the largest Σ |term| of an element */
    double ent[16], mxl[16];            /* per head, over rows that see a key */
    double cond;                        /* max |s| Σ_c |q_ic k_jc| over visible pairs */
} ref_t;

static void reference(const feat *f, const float *R, ref_t *r) {
    const int B = f->B, Tq = f->Tq, Tk = f->Tk, H = f->H, d = f->d, dv = f->dv, g = f->H / f->Hkv;
    int64_t no = (int64_t)B * Tq * H * dv;
    r->out = calloc((size_t)no, sizeof(double));
    r->dq = calloc((size_t)f->q->numel, sizeof(double));
    r->dk = calloc((size_t)f->k->numel, sizeof(double));
    r->dv = calloc((size_t)f->v->numel, sizeof(double));
    r->dhs = calloc((size_t)H, sizeof(double));
    r->cond = 0;
    double *m_out = calloc((size_t)no, sizeof(double)), *m_dq = calloc((size_t)f->q->numel, sizeof(double));
    double *m_dk = calloc((size_t)f->k->numel, sizeof(double)), *m_dv = calloc((size_t)f->v->numel, sizeof(double));
    double *m_dhs = calloc((size_t)H, sizeof(double));
    double *S = malloc(sizeof(double) * Tk), *p = malloc(sizeof(double) * Tk), *dp = malloc(sizeof(double) * Tk);
    int64_t rows[16] = {0};
    for (int h = 0; h < H; h++) r->ent[h] = 0, r->mxl[h] = -INFINITY;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int kh = h / g;   /* repeat_interleave: query heads [kh·g, kh·g + g) read kv head kh */
            const double s = (double)f->scale * (f->hs ? f->hs->data[h] : 1.0);
            for (int i = 0; i < Tq; i++) {
                double mx = -INFINITY, z = 0;
                int any = 0;
                for (int j = 0; j < Tk; j++) {
                    if (!ref_visible(f, b, i, j)) continue;
                    double dot = 0, mag = 0;
                    for (int c = 0; c < d; c++) {
                        dot += (double)AT4(f->q, b, i, h, c) * AT4(f->k, b, j, kh, c);
                        mag += fabs((double)AT4(f->q, b, i, h, c) * AT4(f->k, b, j, kh, c));
                    }
                    S[j] = dot;
                    r->cond = fmax(r->cond, fabs(s) * mag);
                    mx = fmax(mx, s * dot);
                    any = 1;
                }
                if (!any) continue;   /* out 0, no gradient */
                for (int j = 0; j < Tk; j++) p[j] = ref_visible(f, b, i, j) ? exp(s * S[j] - mx) : 0, z += p[j];
                double ent = 0, dotp = 0;
                for (int j = 0; j < Tk; j++) {
                    p[j] /= z;
                    if (p[j] > 0) ent -= p[j] * log(p[j]);
                }
                r->ent[h] += ent, rows[h]++;
                r->mxl[h] = fmax(r->mxl[h], mx);
                for (int c = 0; c < dv; c++) {
                    double o = 0, mo = 0;
                    for (int j = 0; j < Tk; j++) o += p[j] * AT4(f->v, b, j, kh, c), mo += p[j] * fabs(AT4(f->v, b, j, kh, c));
                    r->out[IX4(f->q, b, i, h, 0) / d * dv + c] = o;
                    m_out[IX4(f->q, b, i, h, 0) / d * dv + c] = mo;
                }
                /* backward of the seed R */
                const float *dO = R + ((int64_t)(b * Tq + i) * H + h) * dv;
                for (int j = 0; j < Tk; j++) {
                    dp[j] = 0;
                    for (int c = 0; c < dv; c++) dp[j] += (double)dO[c] * AT4(f->v, b, j, kh, c);
                    dotp += dp[j] * p[j];
                }
                for (int j = 0; j < Tk; j++) {
                    if (p[j] == 0 && !ref_visible(f, b, i, j)) continue;
                    for (int c = 0; c < dv; c++) {
                        r->dv[IX4(f->v, b, j, kh, c)] += p[j] * dO[c];
                        m_dv[IX4(f->v, b, j, kh, c)] += p[j] * fabs(dO[c]);
                    }
                    double dl = p[j] * (dp[j] - dotp), ml = p[j] * (fabs(dp[j]) + fabs(dotp));   /* d loss / d logit */
                    for (int c = 0; c < d; c++) {
                        r->dq[IX4(f->q, b, i, h, c)] += s * dl * AT4(f->k, b, j, kh, c);
                        r->dk[IX4(f->k, b, j, kh, c)] += s * dl * AT4(f->q, b, i, h, c);
                        m_dq[IX4(f->q, b, i, h, c)] += fabs(s * ml * AT4(f->k, b, j, kh, c));
                        m_dk[IX4(f->k, b, j, kh, c)] += fabs(s * ml * AT4(f->q, b, i, h, c));
                    }
                    r->dhs[h] += f->scale * dl * S[j];
                    m_dhs[h] += fabs(f->scale * ml * S[j]);
                }
            }
        }
    for (int h = 0; h < H; h++) r->ent[h] = rows[h] ? r->ent[h] / rows[h] : 0;
    double *mags[5] = {m_out, m_dq, m_dk, m_dv, m_dhs};
    const int64_t ns[5] = {no, f->q->numel, f->k->numel, f->v->numel, H};
    for (int t = 0; t < 5; t++) {
        r->mag[t] = 0;
        for (int64_t i = 0; i < ns[t]; i++) r->mag[t] = fmax(r->mag[t], mags[t][i]);
        free(mags[t]);
    }
    free(S);
    free(p);
    free(dp);
}

static void ref_free(ref_t *r) {
    free(r->out);
    free(r->dq);
    free(r->dk);
    free(r->dv);
    free(r->dhs);
}

/* max |a − ref| / max |ref| (the plain max error when ref is all 0) */
static double rel_err(const float *a, const double *ref, int64_t n) {
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        e = fmax(e, fabs(a[i] - ref[i]));
        m = fmax(m, fabs(ref[i]));
    }
    return m > 0 ? e / m : e;
}

/* max |a − ref| / mag: float32 rounding is relative to the size of the terms
 * summed (mag), not of their sum, which cancels to 0 in a row that sees one key. */
static double mag_err(const float *a, const double *ref, int64_t n, double mag) {
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        e = fmax(e, fabs(a[i] - ref[i]));
        
    }
    return mag > 0 ? e / mag : e;
}

enum { N_T = 6 };   /* out, dq, dk, dv, dhs, entropy */
typedef struct { float *out, *grad, ent[16], mxl[16]; } run_t;

/* One op's forward with stats and backward from R, copied out of ctx. */
static void run_op(feat *f, tg_params *P, const float *R, run_t *o) {
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    float sat[16];
    tg_attn_stats st = {f->H, o->ent, o->mxl, sat};
    tg_tensor *out = call(&ctx, f, &st);
    tg_params_zero_grad(P);
    tg_backward_seed(&ctx, out, R);
    o->out = malloc(sizeof(float) * (size_t)out->numel);
    memcpy(o->out, out->data, sizeof(float) * (size_t)out->numel);
    o->grad = malloc(sizeof(float) * P->numel);
    memcpy(o->grad, P->grad, sizeof(float) * P->numel);
    tg_ctx_free(&ctx);
}

/* Each tensor's error against the reference relative to the size of its terms,
 * in units of κ = 2^-24 · cond (how far float32 rounding can move a logit;
 * tests/ops/test_flash_attention.c says why 2κ bounds a tensor's error). */
static void errors(const feat *f, const tg_params *P, const run_t *o, const ref_t *r, double e[N_T]) {
    const double kappa = 0x1p-24 * fmax(r->cond, 1.0);
    const int64_t no = (int64_t)f->B * f->Tq * f->H * f->dv;
    e[0] = mag_err(o->out, r->out, no, r->mag[0]) / kappa;
    e[1] = mag_err(o->grad + (f->q->grad - P->grad), r->dq, f->q->numel, r->mag[1]) / kappa;
    e[2] = mag_err(o->grad + (f->k->grad - P->grad), r->dk, f->k->numel, r->mag[2]) / kappa;
    e[3] = mag_err(o->grad + (f->v->grad - P->grad), r->dv, f->v->numel, r->mag[3]) / kappa;
    e[4] = f->hs ? mag_err(o->grad + (f->hs->grad - P->grad), r->dhs, f->H, r->mag[4]) / kappa : 0;
    e[5] = 0;   /* a logit error δ moves a row's entropy by up to 2δ(1 + entropy) */
    for (int h = 0; h < f->H; h++) e[5] = fmax(e[5], fabs(o->ent[h] - r->ent[h]) / (1 + r->ent[h]) / kappa);
}

static const char *describe(const feat *f, char *buf, size_t n) {
    snprintf(buf, n, "%s B%d Tq%d Tk%d H%d Hkv%d d%d dv%d causal%d window(%d,%d) kv_len%s hs%d",
             f->fused ? "fused" : "composed", f->B, f->Tq, f->Tk, f->H, f->Hkv, f->d, f->dv, f->causal, f->left,
             f->right, f->kv_len ? "[..]" : "-", f->with_hs);
    return buf;
}

/* Both ops against the reference (each tensor within 2κ) for one configuration. */
static double worst[N_T];   /* over every configuration and op, for the summary line */

static void check_vs_reference(feat f, uint64_t seed) {
    tg_params P;
    make(&P, &f, seed, 1.0f);
    float *R = out_seed(&f, seed, 9);
    ref_t r;
    reference(&f, R, &r);
    for (int op = 0; op < 2; op++) {
        f.fused = op;
        run_t o;
        run_op(&f, &P, R, &o);
        double e[N_T];
        errors(&f, &P, &o, &r, e);
        char buf[200];
        for (int t = 0; t < N_T; t++) worst[t] = fmax(worst[t], e[t]);
        for (int t = 0; t < N_T; t++)
            if (!(e[t] <= 2)) {
                print_error("%s: tensor %d (out dq dk dv dhs entropy) is %.2f kappa from float64 (limit 2)\n",
                            describe(&f, buf, sizeof buf), t, e[t]);
                fail();
            }
        for (int h = 0; h < f.H; h++)
            assert_float_equal(o.mxl[h], r.mxl[h], isinf(r.mxl[h]) ? 0 : 2e-6 * fmax(1, fabs(r.mxl[h])) * r.cond);
        free(o.out);
        free(o.grad);
    }
    ref_free(&r);
    free(R);
    tg_params_free(&P);
}

/* Every feature and their combinations: GQA (H/Hkv = 1, 2, 4 incl. MQA) ×
 * window × causal × Tq ≠ Tk (both ways) × padding, with a head scale and dv ≠ d. */
static void test_against_reference(void **s) {
    (void)s;
    const int kv[2][3] = {{5, 0, 3}, {2, 4, 7}};
    const int windows[][2] = {{-1, -1}, {2, 0}, {1, 1}, {0, 3}, {3, -1}, {-1, 2}};
    const int shapes[][2] = {{6, 6}, {3, 7}, {1, 7}, {7, 4}};   /* Tq, Tk */
    const int heads[][2] = {{4, 4}, {4, 2}, {4, 1}};
    uint64_t seed = 1;
    int n = 0;
    for (int sh = 0; sh < 4; sh++)
        for (int hd = 0; hd < 3; hd++)
            for (int w = 0; w < 6; w++)
                for (int causal = 0; causal < 2; causal++)
                    for (int pad = 0; pad < 2; pad++) {
                        const int Tk = shapes[sh][1];
                        int kvl[3];
                        for (int b = 0; b < 3; b++) kvl[b] = kv[b % 2][b] > Tk ? Tk : kv[b % 2][b];
                        feat f = {.B = 3, .Tq = shapes[sh][0], .Tk = Tk, .H = heads[hd][0], .Hkv = heads[hd][1],
                                  .d = 5, .dv = 3, .causal = causal, .left = windows[w][0], .right = windows[w][1],
                                  .with_hs = (n % 2) == 0, .kv_len = pad ? kvl : NULL, .scale = 0.45f};
                        check_vs_reference(f, seed++);
                        n++;
                    }
    print_message("%d configurations, both ops; worst error in kappa (limit 2): out %.2f dq %.2f dk %.2f dv %.2f "
                  "dhs %.2f entropy %.2f\n", n, worst[0], worst[1], worst[2], worst[3], worst[4], worst[5]);
}

/* Finite differences for every input (q, k, v, head_scale) under each feature
 * and their combinations, in both ops. */
static void test_gradcheck_features(void **s) {
    (void)s;
    int kvl[2] = {5, 3};
    const feat cases[] = {
        {.B = 2, .Tq = 4, .Tk = 6, .H = 4, .Hkv = 2, .d = 3, .dv = 2, .causal = 1, .left = -1, .right = -1},
        {.B = 2, .Tq = 5, .Tk = 5, .H = 3, .Hkv = 1, .d = 4, .dv = 3, .causal = 0, .left = 1, .right = 1},
        {.B = 2, .Tq = 6, .Tk = 6, .H = 2, .Hkv = 2, .d = 3, .dv = 3, .causal = 1, .left = 2, .right = -1},
        {.B = 2, .Tq = 3, .Tk = 6, .H = 2, .Hkv = 1, .d = 3, .dv = 2, .causal = 0, .left = -1, .right = -1, .kv_len = kvl},
        {.B = 2, .Tq = 4, .Tk = 6, .H = 4, .Hkv = 2, .d = 3, .dv = 2, .causal = 1, .left = 2, .right = -1, .kv_len = kvl},
        {.B = 2, .Tq = 6, .Tk = 4, .H = 2, .Hkv = 1, .d = 3, .dv = 2, .causal = 1, .left = -1, .right = -1},   /* rows that see nothing */
        {.B = 2, .Tq = 1, .Tk = 6, .H = 4, .Hkv = 1, .d = 3, .dv = 2, .causal = 1, .left = 3, .right = -1, .kv_len = kvl},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int hs = 0; hs < 2; hs++)
            for (int op = 0; op < 2; op++) {
                feat f = cases[c];
                f.with_hs = hs, f.fused = op, f.scale = 0.6f;
                tg_params P;
                make(&P, &f, 100 + c, 1.0f);
                char buf[200];
                assert_int_equal(tg_gradcheck(describe(&f, buf, sizeof buf), &P, f_call, &f, NULL), 0);
                tg_params_free(&P);
            }
}

/* The fused op equals the composed one at and across tile edges, GQA, window,
 * decoding (Tq = 1 against 1000 keys): outputs and gradients within κ. */
static void test_fused_tile_edges(void **s) {
    (void)s;
    const int Ts[] = {63, 64, 65, 127, 129, 1000};
    for (int ti = 0; ti < 7; ti++)
        for (int mode = 0; mode < 3; mode++) {
            int kvl[2];
            feat f = {.B = 2, .Tq = ti < 6 ? Ts[ti] : 1, .Tk = ti < 6 ? Ts[ti] : 1000, .H = 4, .Hkv = 2, .d = 8,
                      .dv = 6, .left = -1, .right = -1, .with_hs = 1, .scale = 0.35f};
            if (mode == 1) f.causal = 1;
            if (mode == 2) {   /* a sliding window of 40 keys and padding */
                f.causal = 1, f.left = 39;
                kvl[0] = f.Tk, kvl[1] = f.Tk - f.Tk / 3;
                f.kv_len = kvl;
            }
            tg_params P;
            make(&P, &f, 500 + ti * 3 + mode, 1.0f);
            const int64_t no = (int64_t)f.B * f.Tq * f.H * f.dv;
            float *R = out_seed(&f, 7, 1);
            run_t o[2];
            for (int op = 0; op < 2; op++) f.fused = op, run_op(&f, &P, R, &o[op]);
            /* the composed op as the reference, in double */
            double *w = malloc(sizeof(double) * (no > (int64_t)P.numel ? (size_t)no : P.numel)), cond = 0;
            for (int64_t i = 0; i < (int64_t)f.q->numel; i++) cond = fmax(cond, fabs(f.q->data[i]));
            double kmax = 0;
            for (int64_t i = 0; i < (int64_t)f.k->numel; i++) kmax = fmax(kmax, fabs(f.k->data[i]));
            const double kappa = 0x1p-24 * f.scale * 1.5 * cond * kmax * f.d;   /* a bound on max |s| Σ |q k| */
            for (int64_t i = 0; i < no; i++) w[i] = o[0].out[i];
            double e = rel_err(o[1].out, w, no);
            for (size_t i = 0; i < P.numel; i++) w[i] = o[0].grad[i];
            for (int p = 0; p < P.n; p++) {
                size_t at = (size_t)(P.list[p]->grad - P.grad);
                e = fmax(e, rel_err(o[1].grad + at, w + at, P.list[p]->numel));
            }
            char buf[200];
            print_message("%s: fused vs composed %.2f kappa\n", describe(&f, buf, sizeof buf), e / kappa);
            assert_true(e <= kappa);
            for (int op = 0; op < 2; op++) free(o[op].out), free(o[op].grad);
            free(w);
            free(R);
            tg_params_free(&P);
        }
}

/* All logits 10⁴: the fused backward rebuilds P from the saved row maximum and
 * ln ℓ apart, so dK and dV are exact to float32 (a float lse at 10⁴ is off by
 * 5·10⁻⁴, and so were dK, dV before). Both ops against float64 within 10⁻⁶. */
static void test_saturated_rows(void **s) {
    (void)s;
    for (int op = 0; op < 2; op++)
        for (int causal = 0; causal < 2; causal++) {
            feat f = {.B = 2, .Tq = 70, .Tk = 300, .H = 2, .Hkv = 1, .d = 4, .dv = 5, .causal = causal, .left = -1,
                      .right = -1, .scale = 1.0f, .fused = op};
            tg_params P;
            make(&P, &f, 42, 1.0f);
            /* q·k = 50·100 + 50·100 = 10⁴ exactly, for every pair */
            for (int64_t i = 0; i < f.q->numel; i++) f.q->data[i] = i % 4 < 2 ? 50.0f : 0.0f;
            for (int64_t i = 0; i < f.k->numel; i++) f.k->data[i] = i % 4 < 2 ? 100.0f : 0.0f;
            const int64_t no = (int64_t)f.B * f.Tq * f.H * f.dv;
            float *R = out_seed(&f, 3, 3);
            ref_t r;
            reference(&f, R, &r);
            run_t o;
            run_op(&f, &P, R, &o);
            double ek = rel_err(o.grad + (f.k->grad - P.grad), r.dk, f.k->numel);
            double ev = rel_err(o.grad + (f.v->grad - P.grad), r.dv, f.v->numel);
            double eo = rel_err(o.out, r.out, no);
            print_message("%s causal %d, logits 1e4: out %.1e dK %.1e dV %.1e\n", op ? "fused" : "composed", causal,
                          eo, ek, ev);
            assert_true(eo <= 1e-6);
            assert_true(ek <= 1e-6);
            assert_true(ev <= 1e-6);
            free(o.out);
            free(o.grad);
            ref_free(&r);
            free(R);
            tg_params_free(&P);
        }
}

/* Rows with no visible key (kv_len 0, a causal query before the first key,
 * a window past the padding) output 0 and pass no gradient; nothing is NaN. */
static void test_empty_rows(void **s) {
    (void)s;
    int kvl[2] = {0, 2};
    for (int op = 0; op < 2; op++) {
        feat f = {.B = 2, .Tq = 6, .Tk = 4, .H = 2, .Hkv = 2, .d = 3, .dv = 2, .causal = 1, .left = 0, .right = -1,
                  .kv_len = kvl, .scale = 1.0f, .fused = op, .with_hs = 1};
        tg_params P;
        make(&P, &f, 8, 1.0f);
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        float ent[2], mxl[2], sat[2];
        tg_attn_stats st = {2, ent, mxl, sat};
        tg_tensor *out = call(&ctx, &f, &st);
        tg_params_zero_grad(&P);
        tg_backward(&ctx, tg_sum(&ctx, out));
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < 6; i++)
                for (int h = 0; h < 2; h++) {
                    int lo, hi;
                    tg_attn_args a = args_of(&f, NULL);
                    tg_attn_visible(&a, b, i, &lo, &hi);
                    /* row i sits at key i − 2 and sees only itself (left 0), if below kv_len */
                    int p = i - 2, want = p >= 0 && p < kvl[b];
                    assert_int_equal(hi - lo, want);
                    for (int c = 0; c < 2; c++) {
                        float y = out->data[((b * 6 + i) * 2 + h) * 2 + c];
                        assert_true(isfinite(y));
                        if (!want) assert_float_equal(y, 0, 0);
                    }
                    for (int c = 0; c < 3; c++) {
                        float gq = f.q->grad[((b * 6 + i) * 2 + h) * 3 + c];
                        assert_true(isfinite(gq));
                        if (!want) assert_float_equal(gq, 0, 0);
                    }
                }
        for (size_t i = 0; i < P.numel; i++) assert_true(isfinite(P.grad[i]));
        /* one visible key a row: weight 1, entropy 0, every row saturated */
        for (int h = 0; h < 2; h++) {
            assert_float_equal(ent[h], 0, 1e-6);
            assert_float_equal(sat[h], 1, 0);
            assert_true(isfinite(mxl[h]));
        }
        tg_ctx_free(&ctx);
        tg_params_free(&P);
    }
}

/* The semantics the public bug reports are about, as visible spans. */
static void test_visible_spans(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *q = tg_new(&ctx, 4, (int[]){1, 10, 1, 2}), *k = tg_new(&ctx, 4, (int[]){1, 10, 1, 2});
    tg_tensor *q1 = tg_new(&ctx, 4, (int[]){1, 1, 1, 2});
    tg_attn_args a = tg_attn_args_make(q, k, k, 1);
    int lo, hi;
    /* Mistral's sliding window W = 4 with causal is (W − 1, 0): exactly W keys, the query's own last */
    a.causal = 1, a.window_left = 3, a.window_right = 0;
    tg_attn_visible(&a, 0, 7, &lo, &hi);
    assert_int_equal(lo, 4);
    assert_int_equal(hi, 8);
    /* (w, w) not causal is two-sided: 2w + 1 keys */
    a.causal = 0, a.window_left = 3, a.window_right = 3;
    tg_attn_visible(&a, 0, 5, &lo, &hi);
    assert_int_equal(hi - lo, 7);
    /* causal wins over a right window */
    a.causal = 1;
    tg_attn_visible(&a, 0, 5, &lo, &hi);
    assert_int_equal(hi, 6);
    /* (−1, −1) without causal: every key */
    a = tg_attn_args_make(q, k, k, 1);
    tg_attn_visible(&a, 0, 0, &lo, &hi);
    assert_int_equal(hi - lo, 10);
    /* decoding: one query against 10 cached keys sits at position 9 and, causal, sees all 10 (bottom-right) */
    a = tg_attn_args_make(q1, k, k, 1);
    a.causal = 1;
    tg_attn_visible(&a, 0, 0, &lo, &hi);
    assert_int_equal(lo, 0);
    assert_int_equal(hi, 10);
    /* padding uses positions of the buffer: kv_len 6 hides keys 6..9, the query still sits at 9 */
    int kvl = 6;
    a.kv_len = &kvl, a.window_left = 4;
    tg_attn_visible(&a, 0, 0, &lo, &hi);
    assert_int_equal(lo, 5);
    assert_int_equal(hi, 6);
    tg_ctx_free(&ctx);
}

/* Query head h reads key/value head h / (H / Hkv) (repeat_interleave), not h mod Hkv. */
static void test_gqa_mapping(void **s) {
    (void)s;
    for (int op = 0; op < 2; op++) {
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        const int H = 6, Hkv = 3, T = 5;
        tg_tensor *q = tg_zeros(&ctx, 4, (int[]){1, T, H, 2}), *k = tg_zeros(&ctx, 4, (int[]){1, T, Hkv, 2});
        tg_tensor *v = tg_new(&ctx, 4, (int[]){1, T, Hkv, 1});
        for (int j = 0; j < T; j++)
            for (int kh = 0; kh < Hkv; kh++) v->data[j * Hkv + kh] = (float)(10 * kh + 1);
        tg_attn_args a = tg_attn_args_make(q, k, v, 1);
        tg_tensor *out = op ? tg_flash_attend(&ctx, &a) : tg_attend(&ctx, &a);
        for (int i = 0; i < T; i++)
            for (int h = 0; h < H; h++) assert_float_equal(out->data[i * H + h], 10 * (h / 2) + 1, 1e-5);
        tg_ctx_free(&ctx);
    }
}

/* Uniform attention (q = 0) has the entropy tg_attn_uniform_entropy_args says. */
static void test_uniform_entropy(void **s) {
    (void)s;
    int kvl[2] = {9, 4};
    for (int op = 0; op < 2; op++) {
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_tensor *q = tg_zeros(&ctx, 4, (int[]){2, 7, 4, 3}), *k = tg_new(&ctx, 4, (int[]){2, 9, 2, 3});
        for (int64_t i = 0; i < k->numel; i++) k->data[i] = (float)(i % 7) - 3;
        float ent[4], mxl[4], sat[4];
        tg_attn_stats st = {4, ent, mxl, sat};
        tg_attn_args a = tg_attn_args_make(q, k, k, 0.5f);
        a.causal = 1, a.window_left = 4, a.kv_len = kvl, a.stats = &st;
        if (op) tg_flash_attend(&ctx, &a);
        else tg_attend(&ctx, &a);
        double u = tg_attn_uniform_entropy_args(&a);
        /* by hand: b 0 rows sit at 2..8 and see min(5, p+1) keys; b 1 sees keys max(0,p−4)..min(p,3) */
        double want = 0;
        int rows = 0;
        for (int i = 0; i < 7; i++) {
            int p = i + 2, n0 = p + 1 < 5 ? p + 1 : 5, lo = p - 4 > 0 ? p - 4 : 0, hi = p < 3 ? p : 3;
            want += log(n0), rows++;
            if (hi >= lo) want += log(hi - lo + 1), rows++;
        }
        assert_float_equal(u, want / rows, 1e-12);
        for (int h = 0; h < 4; h++) assert_float_equal(ent[h], u, 1e-5);
        tg_ctx_free(&ctx);
    }
}

/* The same bytes at 1 and 2 threads, both ops, GQA with a window (dK, dV of a
 * shared head are summed by one thread in a fixed order). */
static void test_threads(void **s) {
    (void)s;
#ifdef _OPENMP
    int kvl[3] = {70, 33, 0};
    for (int op = 0; op < 2; op++) {
        feat f = {.B = 3, .Tq = 50, .Tk = 70, .H = 4, .Hkv = 2, .d = 16, .dv = 8, .causal = 1, .left = 20,
                  .right = -1, .kv_len = kvl, .with_hs = 1, .scale = 0.25f, .fused = op};
        tg_params P;
        make(&P, &f, 77, 1.0f);
        const int64_t no = (int64_t)f.B * f.Tq * f.H * f.dv;
        float *R = out_seed(&f, 1, 1);
        run_t o[2];
        const int saved = omp_get_max_threads();
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t + 1);
            run_op(&f, &P, R, &o[t]);
        }
        omp_set_num_threads(saved);
        assert_memory_equal(o[0].out, o[1].out, sizeof(float) * (size_t)no);
        assert_memory_equal(o[0].grad, o[1].grad, sizeof(float) * P.numel);
        for (int t = 0; t < 2; t++) free(o[t].out), free(o[t].grad);
        free(R);
        tg_params_free(&P);
    }
#else
    skip();
#endif
}

/* Bad args: each refused with the op's name and the value. */
static void test_bad_args(void **s) {
    (void)s;
    const char *ops[] = {"tg_attention", "tg_flash_attention"};
    for (int op = 0; op < 2; op++) {
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_test_catch e;
        tg_test_catch_errors(&ctx, &e);
        tg_tensor *q = tg_zeros(&ctx, 4, (int[]){2, 5, 6, 4}), *k = tg_zeros(&ctx, 4, (int[]){2, 7, 4, 4});
        tg_tensor *k2 = tg_zeros(&ctx, 4, (int[]){2, 7, 2, 4}), *v2 = tg_zeros(&ctx, 4, (int[]){2, 6, 2, 4});
        tg_attend_fn volatile fn = op ? tg_flash_attend : tg_attend;
        char want[300];
        tg_attn_args a = tg_attn_args_make(q, k, k, 1);
        snprintf(want, sizeof want, "%s: H = 6 query heads is not a multiple of Hkv = 4", ops[op]);
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), want);
        a = tg_attn_args_make(q, k2, v2, 1);
        snprintf(want, sizeof want, "%s: expected q [B,Tq,H,d], k [B,Tk,Hkv,d], v [B,Tk,Hkv,dv]", ops[op]);
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), want);
        a = tg_attn_args_make(q, k2, k2, 1);
        a.window_left = -2;
        snprintf(want, sizeof want, "%s: window (left -2, right -1): each must be >= 0, or -1", ops[op]);
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), want);
        a.window_left = 3, a.window_right = -5;
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), "(left 3, right -5)");
        a.window_right = -1;
        int kv_big[2] = {7, 8}, kv_neg[2] = {-1, 3};
        a.kv_len = kv_big;
        snprintf(want, sizeof want, "%s: kv_len[1] = 8 is outside [0, Tk = 7]", ops[op]);
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), want);
        a.kv_len = kv_neg;
        snprintf(want, sizeof want, "%s: kv_len[0] = -1 is outside [0, Tk = 7]", ops[op]);
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), want);
        a.kv_len = NULL;
        a.size = 8;
        snprintf(want, sizeof want, "%s: args.size is 8, less than the first version's", ops[op]);
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), want);
        /* a caller built against a newer header: extra fields at 0 are fine, set ones refused */
        struct { tg_attn_args a; int later[4]; } newer = {a, {0, 0, 0, 0}};
        newer.a.size = sizeof newer;
        tg_tensor *o = fn(&ctx, &newer.a);
        assert_int_equal(o->shape[1], 5);
        newer.later[2] = 1;
        snprintf(want, sizeof want, "%s: args.size is %zu and sets fields this tapegrad", ops[op], sizeof newer);
        EXPECT_TG_ERROR(&e, fn(&ctx, &newer.a), want);
        EXPECT_TG_ERROR(&e, fn(&ctx, NULL), "args is NULL");
        tg_ctx_free(&ctx);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_visible_spans),
        cmocka_unit_test(test_gqa_mapping),
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_gradcheck_features),
        cmocka_unit_test(test_fused_tile_edges),
        cmocka_unit_test(test_saturated_rows),
        cmocka_unit_test(test_empty_rows),
        cmocka_unit_test(test_uniform_entropy),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
