/* The attention contract of tg_attn_args (ops/attn_args.h) in both ops:
 * grouped-query heads, bottom-right alignment with Tq != Tk, windows, key
 * padding, rows that see nothing; an additive bias (broadcast, learned, −inf
 * masks), ALiBi, soft-capping, sinks and dropout; against a float64 reference written here
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
    int act;   /* 1: q, k, v and bias reach the op as activations (views of P's tensors): their grads are
                  arena memory the op writes first (tg_grad_first), not parameter grads it adds to */
    const int *kv_len;
    float scale;
    /* bias: 0 none, else a learned bias of shape [B or 1, H or 1, Tq, Tk]: 1 [B,H], 2 [1,H], 3 [B,1], 4 [1,1] */
    int bias_mode, alibi, sinks;
    int bias_ninf;   /* > 0: every bias_ninf-th bias entry is −inf (a mask inside a learned bias) */
    float softcap, dropout;
    uint64_t dseed;
    tg_tensor *q, *k, *v, *hs, *bias, *sk;
    float slopes[16];
    tg_tensor alibi_t;   /* [H] slopes: no gradient */
} feat;

static tg_attn_args args_of(feat *f, tg_attn_stats *st) {
    tg_attn_args a = tg_attn_args_make(f->q, f->k, f->v, f->scale);
    a.head_scale = f->hs, a.causal = f->causal, a.window_left = f->left, a.window_right = f->right;
    a.kv_len = f->kv_len, a.stats = st;
    a.bias = f->bias, a.sinks = f->sk, a.softcap = f->softcap, a.dropout = f->dropout, a.dropout_seed = f->dseed;
    if (f->alibi) {   /* ALiBi's geometric slopes 2^(−8(h+1)/H) */
        for (int h = 0; h < f->H; h++) f->slopes[h] = powf(2.0f, -8.0f * (float)(h + 1) / (float)f->H);
        f->alibi_t = (tg_tensor){.ndim = 1, .shape = {f->H}, .numel = f->H, .data = f->slopes};
        a.alibi = &f->alibi_t;
    }
    return a;
}

static tg_tensor *call(tg_ctx *ctx, feat *f, tg_attn_stats *st) {
    tg_attn_args a = args_of(f, st);
    if (f->act) {
        tg_tensor **t[4] = {&a.q, &a.k, &a.v, &a.bias};
        for (int i = 0; i < 4; i++)
            if (*t[i]) *t[i] = tg_reshape(ctx, *t[i], (*t[i])->ndim, (*t[i])->shape);
    }
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
    const int bm = f->bias_mode;
    f->bias = bm ? tg_param(P, "bias", 4, (int[]){bm == 1 || bm == 3 ? f->B : 1, bm <= 2 ? f->H : 1, f->Tq, f->Tk})
                 : NULL;
    f->sk = f->sinks ? tg_param(P, "sinks", 1, (int[]){f->H}) : NULL;
    tg_params_alloc(P);
    tg_test_fill(P, seed, std);
    if (f->hs)
        for (int h = 0; h < f->H; h++) f->hs->data[h] = 0.6f + 0.3f * (float)h;
    if (f->sk)   /* sinks around the logits' size, some above, some below */
        for (int h = 0; h < f->H; h++) f->sk->data[h] = -0.8f + 0.7f * (float)h;
}

static void mask_bias(feat *f) {
    if (f->bias && f->bias_ninf > 0)
        for (int64_t i = 0; i < f->bias->numel; i += f->bias_ninf) f->bias->data[i] = -INFINITY;
}

/* ---- the float64 reference ------------------------------------------------- */

/* Visible: the contract's three rules, written out again here on purpose (not
 * tg_attn_visible): causal j <= p, window p - left <= j <= p + right, j < kv_len. */
static double ref_bias(const feat *f, int b, int h, int i, int j) {
    if (!f->bias) return 0;
    const tg_tensor *t = f->bias;
    const int bb = t->shape[0] == 1 ? 0 : b, hh = t->shape[1] == 1 ? 0 : h;
    return t->data[(((int64_t)bb * t->shape[1] + hh) * f->Tq + i) * f->Tk + j];
}

static int64_t ref_bias_index(const feat *f, int b, int h, int i, int j) {
    const tg_tensor *t = f->bias;
    const int bb = t->shape[0] == 1 ? 0 : b, hh = t->shape[1] == 1 ? 0 : h;
    return (((int64_t)bb * t->shape[1] + hh) * f->Tq + i) * f->Tk + j;
}

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
    double *dbias, *dsink;
    double mag[7];                      /* per tensor: the largest Σ |term| of an element */
    double ent[16], mxl[16];            /* per head, over rows that see a key */
    double cond;                        /* max |s| Σ_c |q_ic k_jc| over visible pairs */
} ref_t;

static void reference(const feat *f, const float *R, ref_t *r) {
    const int B = f->B, Tq = f->Tq, Tk = f->Tk, H = f->H, d = f->d, dv = f->dv, g = f->H / f->Hkv;
    const double cap = f->softcap, keep_scale = 1.0 / (1.0 - (double)f->dropout);
    int64_t no = (int64_t)B * Tq * H * dv, nb = f->bias ? f->bias->numel : 0;
    r->out = calloc((size_t)no, sizeof(double));
    r->dq = calloc((size_t)f->q->numel, sizeof(double));
    r->dk = calloc((size_t)f->k->numel, sizeof(double));
    r->dv = calloc((size_t)f->v->numel, sizeof(double));
    r->dhs = calloc((size_t)H, sizeof(double));
    r->dbias = calloc((size_t)nb + 1, sizeof(double));
    r->dsink = calloc((size_t)H, sizeof(double));
    r->cond = 0;
    double *m_out = calloc((size_t)no, sizeof(double)), *m_dq = calloc((size_t)f->q->numel, sizeof(double));
    double *m_dk = calloc((size_t)f->k->numel, sizeof(double)), *m_dv = calloc((size_t)f->v->numel, sizeof(double));
    double *m_dhs = calloc((size_t)H, sizeof(double)), *m_db = calloc((size_t)nb + 1, sizeof(double));
    double *m_ds = calloc((size_t)H, sizeof(double));
    double *S = malloc(sizeof(double) * Tk), *x = malloc(sizeof(double) * Tk), *p = malloc(sizeof(double) * Tk);
    double *dp = malloc(sizeof(double) * Tk), *kept = malloc(sizeof(double) * Tk);
    int64_t rows[16] = {0};
    tg_attn_args a = args_of((feat *)f, NULL);
    for (int h = 0; h < H; h++) r->ent[h] = 0, r->mxl[h] = -INFINITY;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int kh = h / g;   /* repeat_interleave: query heads [kh·g, kh·g + g) read kv head kh */
            const double s = (double)f->scale * (f->hs ? f->hs->data[h] : 1.0);
            const double sink = f->sk ? f->sk->data[h] : -INFINITY;
            for (int i = 0; i < Tq; i++) {
                const long pos = (long)i + Tk - Tq;
                double mx = -INFINITY, top = -INFINITY, z = 0;
                for (int j = 0; j < Tk; j++) {
                    x[j] = -INFINITY;
                    if (!ref_visible(f, b, i, j)) continue;
                    double dot = 0, mag = 0;
                    for (int c = 0; c < d; c++) {
                        dot += (double)AT4(f->q, b, i, h, c) * AT4(f->k, b, j, kh, c);
                        mag += fabs((double)AT4(f->q, b, i, h, c) * AT4(f->k, b, j, kh, c));
                    }
                    S[j] = dot;
                    /* the logit: s·q·k, capped, then the bias, then ALiBi */
                    double y = s * dot, xb = cap > 0 ? cap * tanh(y / cap) : y;
                    double al = f->alibi ? (double)f->slopes[h] * labs((long)j - pos) : 0;
                    x[j] = xb + ref_bias(f, b, h, i, j) - al;
                    if (isfinite(x[j])) r->cond = fmax(r->cond, fabs(s) * mag + fabs(ref_bias(f, b, h, i, j)) + al);
                    top = fmax(top, x[j]);
                }
                if (top == -INFINITY) continue;   /* no visible key (or only −inf logits): out 0, no gradient */
                mx = fmax(top, sink);
                for (int j = 0; j < Tk; j++) p[j] = exp(x[j] - mx), z += p[j];
                const double es = f->sk ? exp(sink - mx) : 0;
                z += es;
                double ent = 0, dotp = 0;
                for (int j = 0; j < Tk; j++) {
                    p[j] /= z;
                    if (p[j] > 0) ent -= p[j] * log(p[j]);
                    kept[j] = f->dropout > 0 ? (tg_attn_kept(&a, b, h, i, j) ? keep_scale : 0) : 1;
                }
                const double psink = es / z;
                r->ent[h] += ent, rows[h]++;
                r->mxl[h] = fmax(r->mxl[h], top);
                for (int c = 0; c < dv; c++) {
                    double o = 0, mo = 0;
                    for (int j = 0; j < Tk; j++)
                        o += p[j] * kept[j] * AT4(f->v, b, j, kh, c), mo += p[j] * kept[j] * fabs(AT4(f->v, b, j, kh, c));
                    r->out[IX4(f->q, b, i, h, 0) / d * dv + c] = o;
                    m_out[IX4(f->q, b, i, h, 0) / d * dv + c] = mo;
                }
                /* backward of the seed R */
                const float *dO = R + ((int64_t)(b * Tq + i) * H + h) * dv;
                for (int j = 0; j < Tk; j++) {
                    dp[j] = 0;
                    for (int c = 0; c < dv; c++) dp[j] += (double)dO[c] * AT4(f->v, b, j, kh, c);
                    dp[j] *= kept[j];
                    dotp += dp[j] * p[j];
                }
                r->dsink[h] -= psink * dotp;
                m_ds[h] += psink * fabs(dotp);
                for (int j = 0; j < Tk; j++) {
                    if (!(p[j] > 0)) continue;
                    for (int c = 0; c < dv; c++) {
                        r->dv[IX4(f->v, b, j, kh, c)] += p[j] * kept[j] * dO[c];
                        m_dv[IX4(f->v, b, j, kh, c)] += p[j] * kept[j] * fabs(dO[c]);
                    }
                    double dl = p[j] * (dp[j] - dotp), ml = p[j] * (fabs(dp[j]) + fabs(dotp));   /* d loss / d logit */
                    if (f->bias) {
                        r->dbias[ref_bias_index(f, b, h, i, j)] += dl;
                        m_db[ref_bias_index(f, b, h, i, j)] += ml;
                    }
                    if (cap > 0) {   /* d tanh */
                        const double t = tanh(s * S[j] / cap);
                        dl *= 1 - t * t, ml *= 1 - t * t;
                    }
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
    double *mags[7] = {m_out, m_dq, m_dk, m_dv, m_dhs, m_db, m_ds};
    const int64_t ns[7] = {no, f->q->numel, f->k->numel, f->v->numel, H, nb, H};
    for (int t = 0; t < 7; t++) {
        r->mag[t] = 0;
        for (int64_t i = 0; i < ns[t]; i++) r->mag[t] = fmax(r->mag[t], mags[t][i]);
        free(mags[t]);
    }
    free(S);
    free(x);
    free(p);
    free(dp);
    free(kept);
}

static void ref_free(ref_t *r) {
    free(r->out);
    free(r->dq);
    free(r->dk);
    free(r->dv);
    free(r->dhs);
    free(r->dbias);
    free(r->dsink);
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

enum { N_T = 8 };   /* out, dq, dk, dv, dhs, entropy, dbias, dsink */
typedef struct { float *out, *grad, ent[16], mxl[16]; } run_t;

static const char *describe(const feat *f, char *buf, size_t n);

/* One op's forward with stats and backward from R on ctx, copied out. */
static void run_on(tg_ctx *ctx, feat *f, tg_params *P, const float *R, run_t *o) {
    float sat[16];
    tg_attn_stats st = {f->H, o->ent, o->mxl, sat};
    tg_tensor *out = call(ctx, f, &st);
    tg_params_zero_grad(P);
    tg_backward_seed(ctx, out, R);
    o->out = malloc(sizeof(float) * (size_t)out->numel);
    memcpy(o->out, out->data, sizeof(float) * (size_t)out->numel);
    o->grad = malloc(sizeof(float) * P->numel);
    memcpy(o->grad, P->grad, sizeof(float) * P->numel);
}

/* Where a and b first differ in bytes, as "out[i]", "dk[i]"..., or NULL. */
static const char *first_change(const feat *f, const tg_params *P, const run_t *a, const run_t *b, char *buf,
                                size_t n) {
    const int64_t no = (int64_t)f->B * f->Tq * f->H * f->dv;
    for (int64_t i = 0; i < no; i++)
        if (memcmp(&a->out[i], &b->out[i], sizeof(float))) {
            snprintf(buf, n, "out[%lld]: %.9g, then %.9g", (long long)i, a->out[i], b->out[i]);
            return buf;
        }
    for (size_t i = 0; i < P->numel; i++)
        if (memcmp(&a->grad[i], &b->grad[i], sizeof(float))) {
            size_t e = i;
            int t = 0;
            while (e >= (size_t)P->list[t]->numel) e -= (size_t)P->list[t++]->numel;
            snprintf(buf, n, "d%s[%zu]: %.9g, then %.9g", P->list[t]->name, e, a->grad[i], b->grad[i]);
            return buf;
        }
    if (memcmp(a->ent, b->ent, sizeof(float) * (size_t)f->H) || memcmp(a->mxl, b->mxl, sizeof(float) * (size_t)f->H))
        return "the stats (entropy, max logit)";
    return NULL;
}

/* A context every configuration runs on after the one before it (another
 * shape): its arena and grad buffers hold that one's values, then 0xff (NaN)
 * and 0x3f (0.747, plausible data) bytes. Fresh arenas are zero pages, on which
 * an op that reads memory it never wrote looks right (issue 37: dK, dV of
 * keys no query sees). Freed by the group teardown. */
static tg_ctx stale;
static int stale_made;

static int free_stale(void **st) {
    (void)st;
    if (stale_made) tg_ctx_free(&stale);
    stale_made = 0;
    return 0;
}

/* One op's forward with stats and backward from R, copied out of a fresh
 * context; then the same on stale memory, which must give the same bytes. */
static void run_op(feat *f, tg_params *P, const float *R, run_t *o) {
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    run_on(&ctx, f, P, R, o);
    tg_ctx_free(&ctx);
    if (!stale_made) tg_ctx_init(&stale, 0), stale_made = 1;
    static const int fills[3] = {-1, 0xff, 0x3f};   /* -1: as the configuration before left it */
    for (int k = 0; k < 3; k++) {
        tg_ctx_reset(&stale);
        if (fills[k] >= 0) tg_arena_fill(&stale, (unsigned char)fills[k]);   /* the first run grew the arena */
        run_t r;
        run_on(&stale, f, P, R, &r);
        char buf[200], where[160];
        const char *c = first_change(f, P, o, &r, where, sizeof where);
        free(r.out), free(r.grad);
        if (c) {
            print_error("%s: on a fresh context, then on %s: %s\n", describe(f, buf, sizeof buf),
                        k == 0 ? "the memory the configuration before left" : fills[k] == 0xff ?
                        "an arena of 0xff (NaN)" : "an arena of 0x3f bytes", c);
            fail();
        }
    }
    memcpy(P->grad, o->grad, sizeof(float) * P->numel);
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
    e[6] = f->bias ? mag_err(o->grad + (f->bias->grad - P->grad), r->dbias, f->bias->numel, r->mag[5]) / kappa : 0;
    e[7] = f->sk ? mag_err(o->grad + (f->sk->grad - P->grad), r->dsink, f->H, r->mag[6]) / kappa : 0;
}

static const char *describe(const feat *f, char *buf, size_t n) {
    snprintf(buf, n, "%s%s B%d Tq%d Tk%d H%d Hkv%d d%d dv%d causal%d window(%d,%d) kv_len%s hs%d bias%d alibi%d "
             "cap%g sinks%d dropout%g", f->fused ? "fused" : "composed", f->act ? " (activations)" : "", f->B, f->Tq, f->Tk, f->H, f->Hkv, f->d, f->dv,
             f->causal, f->left, f->right, f->kv_len ? "[..]" : "-", f->with_hs, f->bias_mode, f->alibi,
             (double)f->softcap, f->sinks, (double)f->dropout);
    return buf;
}

/* Both ops against the reference (each tensor within 2κ) for one configuration. */
static double worst[N_T];   /* over every configuration and op, for the summary line */

static void check_vs_reference(feat f, uint64_t seed) {
    tg_params P;
    make(&P, &f, seed, 1.0f);
    mask_bias(&f);
    float *R = out_seed(&f, seed, 9);
    ref_t r;
    reference(&f, R, &r);
    for (int op = 0; op < 4; op++) {
        f.fused = op % 2, f.act = op / 2;
        run_t o;
        run_op(&f, &P, R, &o);
        double e[N_T];
        errors(&f, &P, &o, &r, e);
        char buf[200];
        for (int t = 0; t < N_T; t++) worst[t] = fmax(worst[t], e[t]);
        for (int t = 0; t < N_T; t++)
            if (!(e[t] <= 2)) {
                print_error("%s: tensor %d (out dq dk dv dhs entropy dbias dsink) is %.2f kappa from float64 (limit 2)\n",
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
                  "dhs %.2f entropy %.2f dbias %.2f dsink %.2f\n", n, worst[0], worst[1], worst[2], worst[3], worst[4],
                  worst[5], worst[6], worst[7]);
}

/* What changes the logits, each and combined with part 1's shapes: softcap ×
 * ALiBi × window × GQA; dropout × causal × padding; every bias broadcast ×
 * sinks × window; all of them at once. */
static void test_logits_against_reference(void **s) {
    (void)s;
    const float caps[] = {0, 0.8f, 5};
    const int windows[][2] = {{-1, -1}, {2, 0}, {1, 1}};
    const int heads[][2] = {{4, 4}, {4, 2}, {4, 1}};
    int kvl[3] = {7, 3, 0};
    uint64_t seed = 1000;
    int n = 0;
    for (int c = 0; c < 3; c++)
        for (int al = 0; al < 2; al++)
            for (int w = 0; w < 3; w++)
                for (int hd = 0; hd < 3; hd++)
                    for (int causal = 0; causal < 2; causal++, n++)
                        check_vs_reference((feat){.B = 2, .Tq = 5, .Tk = 7, .H = heads[hd][0], .Hkv = heads[hd][1],
                                                  .d = 4, .dv = 3, .causal = causal, .left = windows[w][0],
                                                  .right = windows[w][1], .softcap = caps[c], .alibi = al,
                                                  .with_hs = (n % 2) == 0, .scale = 0.7f},
                                           seed++);
    const float drops[] = {0.1f, 0.5f};
    for (int dp = 0; dp < 2; dp++)
        for (int causal = 0; causal < 2; causal++)
            for (int pad = 0; pad < 2; pad++)
                for (int shape = 0; shape < 2; shape++, n++)
                    check_vs_reference((feat){.B = 3, .Tq = shape ? 3 : 7, .Tk = 7, .H = 4, .Hkv = 2, .d = 4, .dv = 3,
                                              .causal = causal, .left = -1, .right = -1, .kv_len = pad ? kvl : NULL,
                                              .dropout = drops[dp], .dseed = 77 + (uint64_t)n, .with_hs = 1,
                                              .scale = 0.6f},
                                       seed++);
    for (int bm = 1; bm <= 4; bm++)
        for (int sk = 0; sk < 2; sk++)
            for (int w = 0; w < 2; w++)
                for (int causal = 0; causal < 2; causal++, n++)
                    check_vs_reference((feat){.B = 2, .Tq = 4, .Tk = 6, .H = 4, .Hkv = 2, .d = 4, .dv = 3,
                                              .causal = causal, .left = windows[w][0], .right = windows[w][1],
                                              .bias_mode = bm, .sinks = sk, .with_hs = 1, .scale = 0.5f},
                                       seed++);
    for (int causal = 0; causal < 2; causal++, n++)   /* everything at once */
        check_vs_reference((feat){.B = 3, .Tq = 4, .Tk = 7, .H = 4, .Hkv = 2, .d = 4, .dv = 3, .causal = causal,
                                  .left = 3, .right = 1, .kv_len = kvl, .bias_mode = 2, .alibi = 1, .softcap = 2,
                                  .sinks = 1, .dropout = 0.25f, .dseed = 5, .with_hs = 1, .scale = 0.6f},
                           seed++);
    print_message("%d configurations with bias, ALiBi, softcap, sinks, dropout; worst error in kappa (limit 2): out "
                  "%.2f dq %.2f dk %.2f dv %.2f dhs %.2f entropy %.2f dbias %.2f dsink %.2f\n", n, worst[0], worst[1],
                  worst[2], worst[3], worst[4], worst[5], worst[6], worst[7]);
}

/* Past 32 query rows the composed op runs its products per block of rows, on
 * the keys the block's rows may see (query_blocks in ops/attention.c): causal
 * and windowed heads at block edges and across them, fewer queries than keys
 * and more (rows that see nothing), padding, grouped heads, and what changes
 * the logits; both ops against float64. */
static void test_query_blocks(void **s) {
    (void)s;
    int kvl[2] = {61, 23};
    const feat cases[] = {
        {.B = 2, .Tq = 64, .Tk = 64, .H = 2, .Hkv = 2, .d = 8, .dv = 6, .causal = 1, .left = -1, .right = -1},
        {.B = 2, .Tq = 70, .Tk = 70, .H = 4, .Hkv = 2, .d = 8, .dv = 6, .causal = 1, .left = 19, .right = -1},
        {.B = 2, .Tq = 40, .Tk = 100, .H = 2, .Hkv = 1, .d = 5, .dv = 3, .causal = 1, .left = -1, .right = -1},
        {.B = 2, .Tq = 100, .Tk = 40, .H = 2, .Hkv = 2, .d = 5, .dv = 3, .causal = 1, .left = -1, .right = -1},
        {.B = 2, .Tq = 65, .Tk = 65, .H = 2, .Hkv = 1, .d = 4, .dv = 4, .causal = 0, .left = 8, .right = 8,
         .kv_len = kvl},
        {.B = 2, .Tq = 70, .Tk = 70, .H = 2, .Hkv = 2, .d = 4, .dv = 3, .causal = 1, .left = -1, .right = -1,
         .kv_len = kvl, .bias_mode = 1, .softcap = 2, .sinks = 1, .alibi = 1, .dropout = 0.2f, .dseed = 5},
        {.B = 1, .Tq = 300, .Tk = 300, .H = 2, .Hkv = 2, .d = 4, .dv = 4, .causal = 1, .left = -1, .right = -1},
    };
    uint64_t seed = 4000;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int hs = 0; hs < 2; hs++) {
            feat f = cases[c];
            f.with_hs = hs, f.scale = 0.5f;
            check_vs_reference(f, seed++);
        }
}

/* Issue 37: one block of query rows (Tq 3) whose window sees 17 of 799 keys.
 * The composed backward wrote dK and dV of those keys only, and left the rest
 * of the slice it marked written as the arena held it: garbage after another
 * configuration, 0 on fresh memory (so every test passed). Each case runs after
 * the one before on the same context, and on arenas of NaN and garbage
 * (run_op), both ops, against float64; with the bias of the report ([1, H, Tq,
 * Tk], −inf entries), grouped heads down to one, either side's window, sinks. */
static void test_keys_no_query_sees(void **s) {
    (void)s;
    const feat cases[] = {
        {.B = 2, .Tq = 3, .Tk = 799, .H = 6, .Hkv = 1, .d = 32, .dv = 32, .left = 16, .right = 0, .bias_mode = 2,
         .bias_ninf = 7},
        {.B = 2, .Tq = 3, .Tk = 799, .H = 6, .Hkv = 1, .d = 32, .dv = 32, .left = 16, .right = 0},
        {.B = 2, .Tq = 5, .Tk = 300, .H = 4, .Hkv = 2, .d = 8, .dv = 6, .left = 0, .right = 9, .with_hs = 1},
        {.B = 1, .Tq = 16, .Tk = 200, .H = 3, .Hkv = 3, .d = 16, .dv = 8, .causal = 1, .left = 5, .right = -1,
         .sinks = 1, .bias_mode = 4, .bias_ninf = 3},
        {.B = 2, .Tq = 3, .Tk = 799, .H = 6, .Hkv = 2, .d = 32, .dv = 16, .left = 16, .right = 0, .softcap = 3,
         .dropout = 0.2f, .dseed = 3},
    };
    uint64_t seed = 7000;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        feat f = cases[c];
        f.scale = 1.0f / sqrtf((float)f.d);
        check_vs_reference(f, seed++);
    }
}

/* A row that sees exactly one key puts weight 1 on it whatever its logit:
 * dQ, dK, the bias's and the head scale's gradients are exactly 0, in both ops
 * (the fused op's D = dO·O and its dP = dO·V are one dot product summed in two
 * orders: it must not leave their difference, ~1e-6, where the answer is 0).
 * Window (0, 0), and a causal first row with padding to one key; with a bias,
 * ALiBi, a softcap and dropout. dV is not 0: it gets the row's dO. */
static void test_one_key_rows_exact(void **s) {
    (void)s;
    int kvl[2] = {1, 1};
    for (int c = 0; c < 4; c++)
        for (int op = 0; op < 4; op++) {
            feat f = {.B = 2, .Tq = 6, .Tk = 6, .H = 4, .Hkv = 2, .d = 8, .dv = 3, .left = 0, .right = 0,
                      .with_hs = 1, .scale = 0.9f, .fused = op % 2, .act = op / 2};
            if (c == 1) f.bias_mode = 1, f.alibi = 1;
            if (c == 2) f.softcap = 2, f.dropout = 0.3f, f.dseed = 4, f.bias_mode = 2;
            if (c == 3) f.left = f.right = -1, f.causal = 1, f.kv_len = kvl, f.Tq = 1, f.Tk = 9, f.kv_len = kvl;
            tg_params P;
            make(&P, &f, 300 + (uint64_t)c, 2.0f);
            float *R = out_seed(&f, 31, (uint64_t)c);
            run_t o;
            run_op(&f, &P, R, &o);
            char buf[200];
            tg_tensor *zero[4] = {f.q, f.k, f.hs, f.bias};
            for (int t = 0; t < 4; t++) {
                if (!zero[t]) continue;
                const float *gr = o.grad + (zero[t]->grad - P.grad);
                for (int64_t i = 0; i < zero[t]->numel; i++)
                    if (gr[i] != 0) {
                        print_error("%s: d%s[%lld] is %g, not 0\n", describe(&f, buf, sizeof buf), zero[t]->name,
                                    (long long)i, (double)gr[i]);
                        fail();
                    }
            }
            const float *dv = o.grad + (f.v->grad - P.grad);
            double mx = 0;
            for (int64_t i = 0; i < f.v->numel; i++) mx = fmax(mx, fabs(dv[i]));
            assert_true(mx > 0.1);
            free(o.out), free(o.grad), free(R);
            tg_params_free(&P);
        }
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
        /* part 2: the logits' features, with part 1's */
        {.B = 2, .Tq = 5, .Tk = 5, .H = 4, .Hkv = 2, .d = 3, .dv = 2, .causal = 1, .left = 2, .right = -1,
         .softcap = 1.5f, .alibi = 1},
        {.B = 2, .Tq = 4, .Tk = 6, .H = 2, .Hkv = 2, .d = 3, .dv = 2, .causal = 1, .left = -1, .right = -1,
         .kv_len = kvl, .dropout = 0.3f, .dseed = 11},
        {.B = 2, .Tq = 4, .Tk = 5, .H = 2, .Hkv = 1, .d = 3, .dv = 2, .causal = 1, .left = -1, .right = -1,
         .bias_mode = 2, .sinks = 1},
        {.B = 2, .Tq = 3, .Tk = 5, .H = 2, .Hkv = 2, .d = 3, .dv = 2, .causal = 0, .left = 1, .right = 1,
         .bias_mode = 1, .softcap = 2, .sinks = 1, .alibi = 1, .dropout = 0.2f, .dseed = 3},
        {.B = 2, .Tq = 4, .Tk = 6, .H = 2, .Hkv = 1, .d = 3, .dv = 2, .causal = 1, .left = -1, .right = -1,
         .bias_mode = 4, .kv_len = kvl},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int hs = 0; hs < 2; hs++)
            for (int op = 0; op < 2; op++) {
                feat f = cases[c];
                f.with_hs = hs, f.fused = op, f.scale = 0.6f, f.act = (int)(c + hs) % 2;
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
        for (int mode = 0; mode < 4; mode++) {
            int kvl[2];
            feat f = {.B = 2, .Tq = ti < 6 ? Ts[ti] : 1, .Tk = ti < 6 ? Ts[ti] : 1000, .H = 4, .Hkv = 2, .d = 8,
                      .dv = 6, .left = -1, .right = -1, .with_hs = 1, .scale = 0.35f};
            if (mode == 1) f.causal = 1;
            if (mode == 2) {   /* a sliding window of 40 keys and padding */
                f.causal = 1, f.left = 39;
                kvl[0] = f.Tk, kvl[1] = f.Tk - f.Tk / 3;
                f.kv_len = kvl;
            }
            if (mode == 3)   /* what changes the logits, all at once, dropout included */
                f.causal = 1, f.bias_mode = 2, f.alibi = 1, f.softcap = 3, f.sinks = 1, f.dropout = 0.2f, f.dseed = 8;
            tg_params P;
            make(&P, &f, 500 + ti * 4 + mode, 1.0f);
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
 * shared head are summed by one thread in a fixed order), and with dropout, a
 * learned bias broadcast over the batch (summed by one thread) and sinks. */
static void test_threads(void **s) {
    (void)s;
#ifdef _OPENMP
    int kvl[3] = {70, 33, 0};
    for (int c = 0; c < 4; c++) {
        const int op = c % 2, more = c / 2;
        feat f = {.B = 3, .Tq = 50, .Tk = 70, .H = 4, .Hkv = 2, .d = 16, .dv = 8, .causal = 1, .left = 20,
                  .right = -1, .kv_len = kvl, .with_hs = 1, .scale = 0.25f, .fused = op};
        if (more) f.dropout = 0.2f, f.dseed = 99, f.bias_mode = 2, f.sinks = 1, f.softcap = 3;
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
        /* part 2 */
        tg_tensor *bad_bias = tg_zeros(&ctx, 4, (int[]){2, 6, 5, 6}), *h5 = tg_zeros(&ctx, 1, (int[]){5});
        tg_tensor *b2 = tg_zeros(&ctx, 4, (int[]){1, 2, 5, 7});
        a = tg_attn_args_make(q, k2, k2, 1);
        a.bias = bad_bias;
        snprintf(want, sizeof want, "%s: bias [2,6,5,6] does not broadcast to [B,H,Tq,Tk] = [2,6,5,7]", ops[op]);
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), want);
        a.bias = b2;
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), "bias [1,2,5,7] does not broadcast");
        a.bias = NULL, a.alibi = h5;
        snprintf(want, sizeof want, "%s: alibi slopes must be [H] = [6], got [5]", ops[op]);
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), want);
        a.alibi = NULL, a.sinks = h5;
        snprintf(want, sizeof want, "%s: sinks must be [H] = [6], got [5]", ops[op]);
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), want);
        a.sinks = NULL, a.softcap = -1;
        snprintf(want, sizeof want, "%s: softcap -1: the cap must be > 0", ops[op]);
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), want);
        a.softcap = NAN;
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), "softcap nan");
        a.softcap = 0, a.dropout = 1;
        snprintf(want, sizeof want, "%s: dropout 1 is outside [0, 1)", ops[op]);
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), want);
        a.dropout = -0.1f;
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), "dropout -0.1 is outside [0, 1)");
        a.dropout = NAN;
        EXPECT_TG_ERROR(&e, fn(&ctx, &a), "dropout nan is outside [0, 1)");
        tg_ctx_free(&ctx);
    }
}

/* A boolean mask is a bias of 0 and −inf: the same output and gradients as
 * the padding it spells, both ops; a row masked whole gives 0, never NaN. */
static void test_bias_mask(void **s) {
    (void)s;
    int kvl[2] = {4, 2};
    for (int op = 0; op < 2; op++) {
        feat f = {.B = 2, .Tq = 5, .Tk = 6, .H = 2, .Hkv = 1, .d = 3, .dv = 2, .causal = 0, .left = -1, .right = -1,
                  .scale = 0.7f, .fused = op, .sinks = op};
        tg_params P;
        make(&P, &f, 21, 1.0f);
        float *R = out_seed(&f, 2, 2);
        run_t o[2];
        f.kv_len = kvl;
        run_op(&f, &P, R, &o[0]);
        /* the same keys hidden by a [B, 1, Tq, Tk] bias of 0 / −inf */
        tg_ctx ctx, mctx;   /* the mask lives on a context of its own: ctx is reset below */
        tg_ctx_init(&ctx, 0);
        tg_ctx_init(&mctx, 0);
        tg_tensor *mask = tg_zeros(&mctx, 4, (int[]){2, 1, 5, 6});
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < 5; i++)
                for (int j = kvl[b]; j < 6; j++) mask->data[(b * 5 + i) * 6 + j] = -INFINITY;
        f.kv_len = NULL, f.bias = mask;
        tg_attn_args a = args_of(&f, NULL);
        tg_tensor *out = f.fused ? tg_flash_attend(&ctx, &a) : tg_attend(&ctx, &a);
        tg_params_zero_grad(&P);
        tg_backward_seed(&ctx, out, R);
        for (int64_t i = 0; i < out->numel; i++) assert_float_equal(out->data[i], o[0].out[i], 2e-6);
        for (size_t i = 0; i < P.numel; i++) assert_float_equal(P.grad[i], o[0].grad[i], 2e-6);
        /* batch row 1, query 0 masked whole: 0 out, no NaN anywhere */
        for (int j = 0; j < 6; j++) mask->data[(1 * 5 + 0) * 6 + j] = -INFINITY;
        tg_ctx_reset(&ctx);
        out = f.fused ? tg_flash_attend(&ctx, &a) : tg_attend(&ctx, &a);
        tg_params_zero_grad(&P);
        tg_backward_seed(&ctx, out, R);
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 2; c++) assert_float_equal(out->data[((1 * 5 + 0) * 2 + h) * 2 + c], 0, 0);
        for (int64_t i = 0; i < out->numel; i++) assert_true(isfinite(out->data[i]));
        for (size_t i = 0; i < P.numel; i++) assert_true(isfinite(P.grad[i]));
        free(o[0].out), free(o[0].grad), free(R);
        tg_ctx_free(&ctx);
        tg_ctx_free(&mctx);
        tg_params_free(&P);
    }
}

/* Dropout keeps 1 − p of the weights, a different set for another seed, the
 * same for the same seed; a huge cap is no cap; a sink of −inf is no sink. */
static void test_dropout_cap_sink(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){4, 64, 4, 2}), *k = tg_zeros(&ctx, 4, (int[]){4, 64, 4, 2});
    tg_attn_args a = tg_attn_args_make(q, k, k, 1), b = a;
    a.dropout = b.dropout = 0.3f, a.dropout_seed = 1, b.dropout_seed = 2;
    int64_t n = 0, kept = 0, same = 0, again = 0;
    for (int bb = 0; bb < 4; bb++)
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < 64; i++)
                for (int j = 0; j < 64; j++, n++) {
                    int x = tg_attn_kept(&a, bb, h, i, j);
                    kept += x, same += x == tg_attn_kept(&b, bb, h, i, j), again += x == tg_attn_kept(&a, bb, h, i, j);
                }
    /* 65536 draws: 1 − p within 5 standard deviations (0.0018) */
    assert_true(fabs((double)kept / n - 0.7) < 0.01);
    assert_int_equal(again, n);
    assert_true(same < n * 0.7);   /* two seeds agree about 0.7² + 0.3² = 58% of the time */
    tg_ctx_free(&ctx);
    for (int op = 0; op < 2; op++) {
        feat f = {.B = 2, .Tq = 5, .Tk = 6, .H = 2, .Hkv = 2, .d = 3, .dv = 2, .causal = 1, .left = -1, .right = -1,
                  .scale = 0.7f, .fused = op, .sinks = 1};
        tg_params P;
        make(&P, &f, 31, 1.0f);
        float *R = out_seed(&f, 4, 4);
        run_t o[3];
        for (int h = 0; h < 2; h++) f.sk->data[h] = -INFINITY;
        run_op(&f, &P, R, &o[0]);   /* sinks of −inf */
        tg_tensor *sk = f.sk;
        f.sk = NULL;
        run_op(&f, &P, R, &o[1]);   /* none */
        f.softcap = 1e7f;
        run_op(&f, &P, R, &o[2]);   /* a cap far above every logit */
        f.sk = sk;
        for (int64_t i = 0; i < 2 * 5 * 2 * 2; i++) {
            assert_float_equal(o[0].out[i], o[1].out[i], 1e-6);
            assert_float_equal(o[2].out[i], o[1].out[i], 1e-6);
        }
        for (int t = 0; t < 3; t++) free(o[t].out), free(o[t].grad);
        free(R);
        tg_params_free(&P);
    }
}

/* A NaN input is never hidden as an empty row: a query of NaN (every logit
 * NaN, which a max skips) gives NaN out, in both ops, with and without sinks. */
static void test_nan_propagates(void **s) {
    (void)s;
    for (int c = 0; c < 4; c++) {
        feat f = {.B = 1, .Tq = 4, .Tk = 4, .H = 1, .Hkv = 1, .d = 2, .dv = 2, .causal = 1, .left = -1, .right = -1,
                  .scale = 1, .fused = c % 2, .sinks = c / 2};
        tg_params P;
        make(&P, &f, 5, 1.0f);
        f.q->data[2 * 2] = f.q->data[2 * 2 + 1] = NAN;   /* query 2 */
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_attn_args a = args_of(&f, NULL);
        tg_tensor *out = f.fused ? tg_flash_attend(&ctx, &a) : tg_attend(&ctx, &a);
        assert_true(isnan(out->data[2 * 2]));
        assert_true(isfinite(out->data[1 * 2]));
        tg_ctx_free(&ctx);
        tg_params_free(&P);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_visible_spans),
        cmocka_unit_test(test_gqa_mapping),
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_logits_against_reference),
        cmocka_unit_test(test_query_blocks),
        cmocka_unit_test(test_keys_no_query_sees),
        cmocka_unit_test(test_one_key_rows_exact),
        cmocka_unit_test(test_gradcheck_features),
        cmocka_unit_test(test_fused_tile_edges),
        cmocka_unit_test(test_saturated_rows),
        cmocka_unit_test(test_empty_rows),
        cmocka_unit_test(test_uniform_entropy),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_bias_mask),
        cmocka_unit_test(test_dropout_cap_sink),
        cmocka_unit_test(test_nan_propagates),
    };
    return cmocka_run_group_tests(tests, NULL, free_stale);
}
