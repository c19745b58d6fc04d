#include "flash_attention.h"
#include "tg_precision.h"

#include <math.h>
#include <string.h>

#include "attn_geom.h"
#include "gemm.h"
#include "parallel.h"
#include "vmath.h"

enum { BQ = TG_FLASH_BQ, BK = TG_FLASH_BK };

typedef struct {
    tg_attn_geom g;
    float *m, *ll, *lse;   /* per row [B, H, Tq]: the max logit, ln ℓ, m + ln ℓ (arena) */
    const float *qd, *kd, *vd;   /* q, k, v as the products read them: rounded to g.prec (arena), or their data */
} flash_rec;

static float head_mult(const flash_rec *r, const tg_tensor *head_scale, int h) {
    return r->g.scale * (head_scale ? head_scale->data[h] : 1.0f);
}

static int64_t off(int b, int T, int heads, int h, int width) { return ((int64_t)b * T * heads + h) * width; }

/* A query tile's keys: tg_attn_rows_keys (attn_geom.h). Key tiles start at klo,
 * not at a multiple of BK: measured with bench_attn --window at T = 4096 (AMD
 * EPYC Zen 3, AVX2; OpenBLAS Zen, libxsmm hsw), W = 64 took 83 ms instead of
 * 105 and W = 256 141 instead of 171. */

/* Row i's visible keys inside the key tile [j0, j0 + nk), relative to j0. */
static void tile_span(const tg_attn_geom *g, int b, int i, int j0, int nk, int *ja, int *jb) {
    int l, h;
    tg_attn_span(g, b, i, &l, &h);
    l -= j0, h -= j0;
    *ja = l < 0 ? 0 : l > nk ? nk : l;
    *jb = h < *ja ? *ja : h > nk ? nk : h;
}

/* How many keys row i of batch row b sees (its span's length). */
static int row_keys(const tg_attn_geom *g, int b, int i) {
    int l, h;
    tg_attn_span(g, b, i, &l, &h);
    return h > l ? h - l : 0;
}

/* Per-thread scratch of the forward: a logit tile, the output accumulator,
 * and per query row the running max m (with the sink), the largest key logit,
 * the sum ℓ (with the sink), the keys' part of it and the entropy accumulator. */
typedef struct { float *S, *O; float *m, *mk; double *l, *lk, *A; } fwd_scratch;

/* A tile's logits of row i (visible keys [ja, jb) of the tile at j0), in place
 * from its raw scores: s·S, then (tg_attn_logit) the cap, bias and ALiBi. */
static inline void tile_logits(const tg_attn_geom *g, int b, int h, int i, int j0, float *x, int ja, int jb, float s) {
    if (!g->extras) {
#pragma omp simd
        for (int j = ja; j < jb; j++) x[j] *= s;
        return;
    }
    const float *brow = tg_attn_bias_row(g, b, h, i);
    for (int j = ja; j < jb; j++) x[j] = tg_attn_logit(g, brow, h, i, j0 + j, x[j] * s);
}

/* Kt: the key/value head's Kᵀ [d, Tk] (tg_attn_kt): Q_i K_jᵀ then runs on
 * libxsmm (ops/gemm.h), which has no kernel for a transposed B. */
TG_VEC_CLONES static void forward_head(const flash_rec *r, int b, int h, const float *Q, const float *Kt,
                                       const float *V, float *O, int64_t row0, float s, int want_stats,
                                       fwd_scratch *w, tg_attn_part *part) {
    const tg_attn_geom *g = &r->g;
    const int Tq = g->Tq, Tk = g->Tk, d = g->d, dv = g->dv, ldq = g->H * d;
    const int ldo = g->H * dv, ldv = g->Hkv * dv;
    const float sink = g->sinks ? g->sinks[h] : -INFINITY;
    *part = (tg_attn_part){0, -INFINITY, 0, 0};
    for (int i0 = 0; i0 < Tq; i0 += BQ) {
        const int nq = Tq - i0 < BQ ? Tq - i0 : BQ;
        int klo, khi;
        tg_attn_rows_keys(g, b, i0, nq, &klo, &khi);
        for (int a = 0; a < nq; a++) {   /* a sink starts each row: e^{sink − m} = 1 at m = sink */
            w->m[a] = sink;
            w->mk[a] = -INFINITY;
            w->l[a] = g->sinks ? 1 : 0;
            w->lk[a] = 0;
            w->A[a] = 0;
        }
        memset(w->O, 0, (size_t)nq * dv * sizeof(float));
        for (int j0 = klo; j0 < khi; j0 += BK) {
            const int nk = khi - j0 < BK ? khi - j0 : BK;
            /* S = Q_i K_jᵀ; the logits scaled (and capped, biased) below row by row as in backward */
            tg_gemm(0, 0, nq, nk, d, 1.0f, Q + (int64_t)i0 * ldq, ldq, Kt + j0, Tk, 0.0f, w->S, BK);
            for (int a = 0; a < nq; a++) {
                float *x = w->S + (int64_t)a * BK;
                int ja, jb;
                tile_span(g, b, i0 + a, j0, nk, &ja, &jb);
                /* invisible: weight 0, never exponentiated */
                if (ja > 0) memset(x, 0, (size_t)ja * sizeof(float));
                if (jb < nk) memset(x + jb, 0, (size_t)(nk - jb) * sizeof(float));
                if (jb <= ja) continue;
                tile_logits(g, b, h, i0 + a, j0, x, ja, jb, s);
                const float mx = tg_row_max(x + ja, jb - ja);   /* vmath.h: GCC's omp-simd fold is slow */
                w->mk[a] = mx > w->mk[a] ? mx : w->mk[a];
                float m_old = w->m[a], m = mx > m_old ? mx : m_old;
                if (m == -INFINITY) {   /* only −inf logits so far (a bias mask), no sink: nothing to weigh */
                    for (int j = ja; j < jb; j++)
                        if (isnan(x[j])) w->l[a] = w->lk[a] = NAN;   /* NaN, which the max skips: never hidden */
                    memset(x + ja, 0, (size_t)(jb - ja) * sizeof(float));
                    continue;
                }
                if (m != m_old && w->l[a] > 0) {
                    /* the new max: Σ e^{x−m}  = α Σ e^{x−m_old} and
                     * Σ e^{x−m}(x−m) = α (Σ e^{x−m_old}(x−m_old) + (m_old−m) Σ e^{x−m_old}) */
                    double alpha = exp((double)m_old - m);
                    w->A[a] = alpha * (w->A[a] + ((double)m_old - m) * w->lk[a]);
                    w->l[a] *= alpha;
                    w->lk[a] *= alpha;
                    float fa = (float)alpha;
                    float *o = w->O + (int64_t)a * dv;
#pragma omp simd
                    for (int c = 0; c < dv; c++) o[c] *= fa;
                }
                w->m[a] = m;
                double l = 0, A = 0;
                if (want_stats) {
#pragma omp simd reduction(+ : l, A)
                    for (int j = ja; j < jb; j++) {
                        float y = x[j] - m;   /* <= 0: exp never overflows, whatever the logits */
                        x[j] = tg_exp_neg(y);
                        l += x[j];
                        A += x[j] > 0 ? (double)x[j] * y : 0.0;   /* e^{−inf}·(−inf): 0 */
                    }
                } else {
#pragma omp simd
                    for (int j = ja; j < jb; j++) x[j] = tg_exp_neg(x[j] - m);
                    l = tg_row_dot_d(x + ja, NULL, jb - ja);
                }
                w->l[a] += l;
                w->lk[a] += l;
                w->A[a] += A;
                if (g->dropout > 0)   /* the stats above are of the weights before dropout */
                    for (int j = ja; j < jb; j++)
                        x[j] = tg_attn_keep(g, b, h, i0 + a, j0 + j) ? x[j] * g->drop_scale : 0.0f;
                /* the product's operand in g->prec; ℓ above summed the weights in float32, as FlashAttention does */
                if (g->prec) tg_round_all(g->prec, x + ja, jb - ja);
            }
            /* O_i += P V_j (unnormalised: divided by ℓ at the end) */
            tg_gemm(0, 0, nq, dv, nk, 1.0f, w->S, BK, V + (int64_t)j0 * ldv, ldv, 1.0f, w->O, dv);
        }
        for (int a = 0; a < nq; a++) {
            const double l = w->l[a], lk = w->lk[a];   /* l >= 1: the largest term is e^0 */
            float *out = O + (int64_t)(i0 + a) * ldo;
            const int64_t row = row0 + i0 + a;
            if (w->mk[a] == -INFINITY && !isnan(l)) {   /* no visible key (with a finite logit): output 0, no gradient */
                memset(out, 0, (size_t)dv * sizeof(float));
                r->m[row] = r->lse[row] = -INFINITY;
                r->ll[row] = 0;
                continue;
            }
            float inv = (float)(1.0 / l);
            const float *o = w->O + (int64_t)a * dv;
#pragma omp simd
            for (int c = 0; c < dv; c++) out[c] = o[c] * inv;
            r->m[row] = w->m[a];
            r->ll[row] = (float)log(l);
            r->lse[row] = (float)(w->m[a] + log(l));
            if (want_stats) {   /* of the keys' weights e^{x−m}/ℓ (a sink's is not a key's) */
                part->entropy += g->sinks ? (log(l) * lk - w->A[a]) / l : log(l) - w->A[a] / l;
                part->max_logit = w->mk[a] > part->max_logit ? w->mk[a] : part->max_logit;
                part->saturated += exp((double)w->mk[a] - w->m[a]) / l > 0.99;   /* the top key's weight */
                part->rows++;
            }
        }
    }
}

typedef struct {
    const flash_rec *r;
    const tg_tensor *q, *k, *v, *hs, *out;
    int want_stats;
    fwd_scratch *ws;
    tg_attn_part *parts;
    const float *Kt;   /* [B, Hkv] heads' Kᵀ */
} fwd_job;

static void forward_item(void *arg, int bh, int thread) {
    const fwd_job *j = arg;
    const tg_attn_geom *g = &j->r->g;
    const int H = g->H, b = bh / H, h = bh % H, kh = h / g->group;
    forward_head(j->r, b, h, j->q->data + off(b, g->Tq, H, h, g->d), j->Kt + ((int64_t)b * g->Hkv + kh) * g->d * g->Tk,
                 j->v->data + off(b, g->Tk, g->Hkv, kh, g->dv), j->out->data + off(b, g->Tq, H, h, g->dv),
                 (int64_t)bh * g->Tq, head_mult(j->r, j->hs, h), j->want_stats, &j->ws[thread], &j->parts[bh]);
}

/* Per-thread scratch of the backward: raw scores, weights, dP then s·dy, D,
 * per row Σ dy·S, Σ dS and Σ P·S for the head-scale gradient, and the key/value
 * head's Kᵀ [d, Tk] and Vᵀ [dv, Tk] (as in the forward). */
typedef struct { float *S, *P, *G, *D; double *gs, *g1, *ps; float *Kt, *Vt; } bwd_scratch;

typedef struct {
    const flash_rec *r;
    const tg_tensor *q, *k, *v, *hs, *bias, *sinks, *out;
    int need_dS, want_hs;
    tg_attn_split split;
    bwd_scratch *ws;
    double *dhs, *dsink;   /* per (b, h) */
} bwd_job;

/* Query head h of batch row b: adds into its dQ, into dK, dV of its key/value
 * head and into its bias rows. Returns Σ dy ⊙ Q Kᵀ over the head (for the
 * head-scale gradient); its sink's gradient goes to dsink[b·H + h]. */
TG_VEC_CLONES static double backward_head(const bwd_job *j, int b, int h, bwd_scratch *w) {
    const flash_rec *r = j->r;
    const tg_attn_geom *g = &r->g;
    const int Tq = g->Tq, Tk = g->Tk, d = g->d, dv = g->dv, kh = h / g->group;
    const int ldq = g->H * d, ldk = g->Hkv * d, ldo = g->H * dv, ldv = g->Hkv * dv;
    const int64_t oq = off(b, Tq, g->H, h, d), ok = off(b, Tk, g->Hkv, kh, d);
    const int64_t oo = off(b, Tq, g->H, h, dv), ov = off(b, Tk, g->Hkv, kh, dv);
    const float *Q = j->q->data + oq, *K = j->k->data + ok, *O = j->out->data + oo, *dO = j->out->grad + oo;
    float *dQ = j->q->grad ? j->q->grad + oq : NULL, *dK = j->k->grad ? j->k->grad + ok : NULL;
    float *dV = j->v->grad ? j->v->grad + ov : NULL;
    const int64_t row0 = ((int64_t)b * g->H + h) * Tq;
    const float *M = r->m + row0, *LL = r->ll + row0;
    const float s = head_mult(r, j->hs, h), sink = g->sinks ? g->sinks[h] : 0.0f;
    const int need_dS = j->need_dS, want_hs = j->want_hs;
    /* the centring of the head-scale sum (below) needs rows of dS that sum to 0 */
    const int centre = !g->sinks && !(g->softcap > 0);
    float *dbias = j->bias && j->bias->grad ? j->bias->grad : NULL;
    double dhs = 0, dsink = 0;
    for (int i0 = 0; i0 < Tq; i0 += BQ) {
        const int nq = Tq - i0 < BQ ? Tq - i0 : BQ;
        int klo, khi;
        tg_attn_rows_keys(g, b, i0, nq, &klo, &khi);
        if (khi <= klo) continue;
        /* P = softmax  =>  dx = P ⊙ (dP − Σ_j dP P) and Σ_j dP_ij P_ij = Σ_c dO_ic O_ic */
        if (need_dS)
            for (int a = 0; a < nq; a++) {
                const float *o = O + (int64_t)(i0 + a) * ldo, *gr = dO + (int64_t)(i0 + a) * ldo;
                const double D = tg_row_dot_d(gr, o, dv);
                w->D[a] = (float)D;
                w->gs[a] = w->g1[a] = w->ps[a] = 0;
                /* P_sink = e^{sink − m − ln ℓ}  =>  d sink = −P_sink · D (a row that sees nothing: no gradient) */
                if (g->sinks && M[i0 + a] > -INFINITY)
                    dsink -= exp((double)sink - M[i0 + a] - LL[i0 + a]) * D;
            }
        for (int j0 = klo; j0 < khi; j0 += BK) {
            const int nk = khi - j0 < BK ? khi - j0 : BK;
            tg_gemm(0, 0, nq, nk, d, 1.0f, Q + (int64_t)i0 * ldq, ldq, w->Kt + j0, Tk, 0.0f, w->S, BK);
            for (int a = 0; a < nq; a++) {
                const float *x = w->S + (int64_t)a * BK;
                float *p = w->P + (int64_t)a * BK;
                const float m = M[i0 + a], ll = LL[i0 + a];
                int ja, jb;
                tile_span(g, b, i0 + a, j0, nk, &ja, &jb);
                if (m == -INFINITY) ja = jb = 0;   /* a row the forward found empty */
                memset(p, 0, (size_t)nk * sizeof(float));
                if (!g->extras) {
                    /* s·x − m as the forward exponentiated it (<= 0), then ln ℓ (>= 0) apart */
#pragma omp simd
                    for (int c = ja; c < jb; c++) p[c] = tg_exp_neg((s * x[c] - m) - ll);
                } else {
                    const float *brow = tg_attn_bias_row(g, b, h, i0 + a);
                    for (int c = ja; c < jb; c++)
                        p[c] = tg_exp_neg((tg_attn_logit(g, brow, h, i0 + a, j0 + c, x[c] * s) - m) - ll);
                }
            }
            /* O = P̃ V  =>  dV_j += P̃ᵀ dO_i (P̃ = P ⊙ keep/(1 − p), made in G, which dP overwrites next) */
            if (dV) {
                const float *Pd = w->P;
                if (g->dropout > 0) {
                    for (int a = 0; a < nq; a++)
                        for (int c = 0; c < nk; c++)
                            w->G[(int64_t)a * BK + c] = w->P[(int64_t)a * BK + c] != 0 &&
                                                                tg_attn_keep(g, b, h, i0 + a, j0 + c)
                                                            ? w->P[(int64_t)a * BK + c] * g->drop_scale
                                                            : 0.0f;
                    Pd = w->G;
                }
                if (g->prec) {   /* P̃ rounded into G as the product reads it; dS below takes P in float32 */
                    tg_round_copy(g->prec, Pd, w->G, (int64_t)nq * BK);
                    Pd = w->G;
                }
                tg_gemm(1, 0, nk, dv, nq, 1.0f, Pd, BK, dO + (int64_t)i0 * ldo, ldo, 1.0f, dV + (int64_t)j0 * ldv, ldv);
            }
            if (!need_dS) continue;
            /* dP = dO_i V_jᵀ ⊙ keep/(1 − p), then dx = P ⊙ (dP − D) (0 where invisible, as P is); G keeps s·dy */
            tg_gemm(0, 0, nq, nk, dv, 1.0f, dO + (int64_t)i0 * ldo, ldo, w->Vt + j0, Tk, 0.0f, w->G, BK);
            for (int a = 0; a < nq; a++) {
                const float *p = w->P + (int64_t)a * BK, *x = w->S + (int64_t)a * BK;
                float *gr = w->G + (int64_t)a * BK, D = w->D[a];
                int ja, jb;
                tile_span(g, b, i0 + a, j0, nk, &ja, &jb);
                if (M[i0 + a] == -INFINITY) ja = jb = 0;
                if (g->dropout > 0)
                    for (int c = ja; c < jb; c++) gr[c] = tg_attn_keep(g, b, h, i0 + a, j0 + c) ? gr[c] * g->drop_scale : 0.0f;
                /* A row that sees one key (and no sink) has dx = P (dP − D) = 0 exactly, but D
                 * (from O) and dP (a product) are one dot product summed in two orders: their
                 * difference, ~1e-6 of it, would be left where the answer is 0. Its D is its dP. */
                if (jb - ja == 1 && !g->sinks && row_keys(g, b, i0 + a) == 1) D = gr[ja];
                double gs = 0, g1 = 0, ps = 0;
                if (g->extras || g->sinks) {   /* the general row: bias grad, the softcap's derivative, no centring */
                    float *gb = dbias ? dbias + (tg_attn_bias_row(g, b, h, i0 + a) - g->bias) + j0 : NULL;
                    for (int c = ja; c < jb; c++) {
                        float ds = p[c] * (gr[c] - D);
                        if (gb) gb[c] += ds;   /* x += bias  =>  d bias = dx */
                        if (g->softcap > 0)    /* x = cap·tanh(y/cap)  =>  dy = dx (1 − (x/cap)²) */
                            ds *= tg_attn_cap_grad(g, g->softcap * tanhf(x[c] * s / g->softcap));
                        gs += (double)ds * x[c];
                        g1 += ds;
                        ps += (double)p[c] * x[c];
                        gr[c] = s * ds;
                    }
                } else if (want_hs) {
#pragma omp simd reduction(+ : gs, g1, ps)
                    for (int c = ja; c < jb; c++) {
                        float ds = p[c] * (gr[c] - D);
                        gs += (double)ds * x[c];
                        g1 += ds;
                        ps += (double)p[c] * x[c];
                        gr[c] = s * ds;
                    }
                } else {
#pragma omp simd
                    for (int c = ja; c < jb; c++) gr[c] = s * (p[c] * (gr[c] - D));
                }
                w->gs[a] += gs;
                w->g1[a] += g1;
                w->ps[a] += ps;
                if (ja > 0) memset(gr, 0, (size_t)ja * sizeof(float));
                if (jb < nk) memset(gr + jb, 0, (size_t)(nk - jb) * sizeof(float));
            }
            /* y = s · Q Kᵀ  =>  dQ_i += (s dy) K_j,  dK_j += (s dy)ᵀ Q_i; s·dy the products' operand */
            if (g->prec) tg_round_all(g->prec, w->G, (int64_t)nq * BK);
            if (dQ)
                tg_gemm(0, 0, nq, d, nk, 1.0f, w->G, BK, K + (int64_t)j0 * ldk, ldk, 1.0f, dQ + (int64_t)i0 * ldq,
                        ldq);
            if (dK)
                tg_gemm(1, 0, nk, d, nq, 1.0f, w->G, BK, Q + (int64_t)i0 * ldq, ldq, 1.0f, dK + (int64_t)j0 * ldk,
                        ldk);
        }
        /* Exactly, Σ_j dS_ij = 0, so Σ_j dS_ij S_ij = Σ_j dS_ij (S_ij − c_i) for any c_i.
         * In float32, D (from O) and the recomputed P disagree by about |logit|·2^-24, so a
         * row's dS sums to a leftover that raw scores of tens or hundreds multiply (3-10×
         * tg_attention's error in saturated heads). Taking c_i = Σ_j P_ij S_ij gives what a
         * D consistent with the recomputed P would (up to (Σ_j P_ij − 1)·leftover), with no
         * second pass over the keys and nothing more saved by the forward. A sink or a
         * softcap makes the exact row sum other than 0: then the plain sum. */
        if (want_hs)
            for (int a = 0; a < nq; a++) dhs += w->gs[a] - (centre ? w->g1[a] * w->ps[a] : 0.0);
    }
    j->dsink[b * g->H + h] = dsink;
    return dhs;
}

/* An item of the split (tg_attn_bwd_split): its batch rows and key/value heads,
 * each with its query heads in order: one thread owns the dK, dV (and bias)
 * slices they add into, so sums do not depend on threads. */
static void backward_item(void *arg, int item, int thread) {
    const bwd_job *j = arg;
    const tg_attn_geom *g = &j->r->g;
    const int nh = j->split.by_h ? g->Hkv : 1;
    const int b0 = j->split.by_b ? item / nh : 0, b1 = j->split.by_b ? b0 + 1 : g->B;
    const int k0 = j->split.by_h ? item % nh : 0, k1 = j->split.by_h ? k0 + 1 : g->Hkv;
    bwd_scratch *w = &j->ws[thread];
    for (int b = b0; b < b1; b++)
        for (int kh = k0; kh < k1; kh++) {
            tg_transpose(j->k->data + off(b, g->Tk, g->Hkv, kh, g->d), g->Hkv * g->d, g->Tk, g->d, w->Kt);
            if (j->need_dS)
                tg_transpose(j->v->data + off(b, g->Tk, g->Hkv, kh, g->dv), g->Hkv * g->dv, g->Tk, g->dv, w->Vt);
            for (int a = 0; a < g->group; a++) {
                const int h = kh * g->group + a;
                j->dhs[b * g->H + h] = backward_head(j, b, h, w);
            }
        }
}

/* The block products run inside the parallel region: their shapes are looked
 * up here first, so the threads find them decided (no lock) and a planning
 * pass wants every one of them (tg_gemm_plan.h). */
static void prepare_products(const tg_attn_geom *g, int backward) {
    const int Tk = g->Tk, d = g->d, dv = g->dv, ldq = g->H * d, ldk = g->Hkv * d, ldo = g->H * dv;
    const int ldv = g->Hkv * dv;
    int seen[64][2], n = 0;
    for (int b = 0; b < (g->kv_len ? g->B : 1); b++)
        for (int i0 = 0; i0 < g->Tq; i0 += BQ) {
            const int nq = g->Tq - i0 < BQ ? g->Tq - i0 : BQ;
            int klo, khi;
            tg_attn_rows_keys(g, b, i0, nq, &klo, &khi);
            for (int j0 = klo; j0 < khi; j0 += BK) {
                const int nk = khi - j0 < BK ? khi - j0 : BK;
                int dup = 0;
                for (int i = 0; i < n; i++) dup |= seen[i][0] == nq && seen[i][1] == nk;
                if (dup || n == 64) continue;
                seen[n][0] = nq, seen[n][1] = nk, n++;
                tg_gemm_prepare(0, nq, nk, d, ldq, Tk, BK);   /* S = Q_i K_jᵀ (Kᵀ made per head) */
                if (!backward) {
                    tg_gemm_prepare(0, nq, dv, nk, BK, ldv, dv);
                } else {
                    tg_gemm_prepare(1, nk, dv, nq, BK, ldo, ldv);
                    tg_gemm_prepare(0, nq, nk, dv, ldo, Tk, BK);
                    tg_gemm_prepare(0, nq, d, nk, BK, ldk, ldq);
                    tg_gemm_prepare(1, nk, d, nq, BK, ldq, ldk);
                }
            }
        }
}

static void flash_backward(tg_ctx *ctx, const tg_node *n) {
    const flash_rec *r = n->saved;
    const tg_attn_geom *g = &r->g;
    tg_tensor *q = n->in[TG_ATTN_IN_Q], *k = n->in[TG_ATTN_IN_K], *v = n->in[TG_ATTN_IN_V], *out = n->out;
    tg_tensor *hs = n->in[TG_ATTN_IN_HS], *bias = n->in[TG_ATTN_IN_BIAS], *sinks = n->in[TG_ATTN_IN_SINKS];
    const int B = g->B, H = g->H, d = g->d, dv = g->dv, Tk = g->Tk;
    const int want_hs = hs && hs->grad;
    const int need_dS = q->grad || k->grad || want_hs || (bias && bias->grad) || (sinks && sinks->grad);
    const int nt = tg_threads();
    bwd_scratch *ws = tg_arena_alloc(ctx, (size_t)nt * sizeof *ws);
    for (int t = 0; t < nt; t++) {
        ws[t].S = tg_arena_alloc(ctx, (size_t)BQ * BK * sizeof(float));
        ws[t].P = tg_arena_alloc(ctx, (size_t)BQ * BK * sizeof(float));
        ws[t].G = tg_arena_alloc(ctx, (size_t)BQ * BK * sizeof(float));
        ws[t].D = tg_arena_alloc(ctx, (size_t)BQ * sizeof(float));
        ws[t].gs = tg_arena_alloc(ctx, (size_t)BQ * sizeof(double));
        ws[t].g1 = tg_arena_alloc(ctx, (size_t)BQ * sizeof(double));
        ws[t].ps = tg_arena_alloc(ctx, (size_t)BQ * sizeof(double));
        ws[t].Kt = tg_arena_alloc(ctx, (size_t)d * Tk * sizeof(float));
        ws[t].Vt = tg_arena_alloc(ctx, (size_t)dv * Tk * sizeof(float));
    }
    double *dhs = tg_arena_alloc(ctx, (size_t)B * H * sizeof(double));
    double *dsink = tg_arena_alloc(ctx, (size_t)B * H * sizeof(double));
    bwd_job job = {r, q, k, v, hs, bias, sinks, out, need_dS, want_hs, tg_attn_bwd_split(g, bias && bias->grad),
                   ws, dhs, dsink};
    tg_tensor qs = *q, ks = *k, vs = *v, os = *out;   /* under a precision: the products' operands, grads the tensors' */
    if (g->prec) {
        qs.data = (float *)r->qd, ks.data = (float *)r->kd, vs.data = (float *)r->vd;
        os.grad = (float *)tg_operand(ctx, g->prec, out->grad, out->numel);
        job.q = &qs, job.k = &ks, job.v = &vs, job.out = &os;
    }
    prepare_products(g, 1);
    int blas = tg_blas_serial_begin();
    tg_parallel_for(job.split.items, (int64_t)n->flops[1] / 2, backward_item, &job);
    tg_blas_serial_end(blas);
    /* s = scale · head_scale[h]  =>  d head_scale[h] = scale · Σ dy ⊙ Q Kᵀ; the sinks'; summed over b in order */
    for (int h = 0; h < H; h++) {
        double sum = 0, sk = 0;
        for (int b = 0; b < B; b++) sum += dhs[b * H + h], sk += dsink[b * H + h];
        if (want_hs) hs->grad[h] += (float)(g->scale * sum);
        if (sinks && sinks->grad) sinks->grad[h] += (float)sk;
    }
}

tg_tensor *tg_flash_attend(tg_ctx *ctx, const tg_attn_args *args) {
    tg_attn_args a;
    flash_rec r;
    tg_attn_read(ctx, "tg_flash_attention", args, &a, &r.g);
    const tg_attn_geom *g = &r.g;
    const int B = g->B, Tq = g->Tq, H = g->H, d = g->d, dv = g->dv;
    tg_tensor *out = tg_new(ctx, 4, (int[]){B, Tq, H, dv});
    r.m = tg_arena_alloc(ctx, (size_t)B * H * Tq * sizeof(float));
    r.ll = tg_arena_alloc(ctx, (size_t)B * H * Tq * sizeof(float));
    r.lse = tg_arena_alloc(ctx, (size_t)B * H * Tq * sizeof(float));
    const int nt = tg_threads();
    fwd_scratch *ws = tg_arena_alloc(ctx, (size_t)nt * sizeof *ws);
    for (int t = 0; t < nt; t++) {
        ws[t].S = tg_arena_alloc(ctx, (size_t)BQ * BK * sizeof(float));
        ws[t].O = tg_arena_alloc(ctx, (size_t)BQ * dv * sizeof(float));
        ws[t].m = tg_arena_alloc(ctx, BQ * sizeof(float));
        ws[t].mk = tg_arena_alloc(ctx, BQ * sizeof(float));
        ws[t].l = tg_arena_alloc(ctx, BQ * sizeof(double));
        ws[t].lk = tg_arena_alloc(ctx, BQ * sizeof(double));
        ws[t].A = tg_arena_alloc(ctx, BQ * sizeof(double));
    }
    /* the (query row, key) pairs the tiles compute: what skipping invisible tiles saves */
    double pairs = 0;
    for (int b = 0; b < B; b++)
        for (int i0 = 0; i0 < Tq; i0 += BQ) {
            const int nq = Tq - i0 < BQ ? Tq - i0 : BQ;
            int klo, khi;
            tg_attn_rows_keys(g, b, i0, nq, &klo, &khi);
            pairs += (double)nq * (khi - klo);
        }
    pairs *= 2.0 * H;
    tg_attn_part *parts = tg_arena_alloc(ctx, (size_t)B * H * sizeof *parts);
    /* under a precision the products read q, k, v rounded (tg_ctx_set_precision), the backward's too */
    const tg_tensor *qp = tg_attn_operand(ctx, g->prec, a.q), *kp = tg_attn_operand(ctx, g->prec, a.k);
    const tg_tensor *vp = tg_attn_operand(ctx, g->prec, a.v);
    r.qd = qp->data, r.kd = kp->data, r.vd = vp->data;
    fwd_job job = {&r, qp, kp, vp, a.head_scale, out, a.stats != NULL, ws, parts, tg_attn_kt(ctx, g, kp->data)};
    prepare_products(g, 0);
    int blas = tg_blas_serial_begin();
    tg_parallel_for(B * H, (int64_t)(pairs / 2 * (d + dv)), forward_item, &job);
    tg_blas_serial_end(blas);
    tg_attn_stats_fill(a.stats, parts, B, H);

    tg_tensor *in[TG_ATTN_N_IN] = {a.q, a.k, a.v, a.head_scale, a.bias, a.sinks};
    tg_node *n = tg_record(ctx, "tg_flash_attention", flash_backward, out, TG_ATTN_N_IN, in, sizeof r);
    if (n) {
        *(flash_rec *)n->saved = r;
        /* the blocks it runs: S = Q_i K_jᵀ, O += P V_j; back: S again, dV, dP, dQ, dK */
        int dS = a.q->requires_grad || a.k->requires_grad || (a.head_scale && a.head_scale->requires_grad);
        n->flops[0] = pairs * (d + dv);
        n->flops[1] = pairs * (d + dv * (a.v->requires_grad + dS) + d * (a.q->requires_grad + a.k->requires_grad));
    }
    return out;
}

tg_tensor *tg_flash_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale,
                              float scale, int causal, tg_attn_stats *stats) {
    tg_attn_args a = tg_attn_args_make(q, k, v, scale);
    a.head_scale = head_scale, a.causal = causal, a.stats = stats;
    return tg_flash_attend(ctx, &a);
}

const float *tg_flash_attention_lse(const tg_ctx *ctx, const tg_tensor *out) {
    for (int i = ctx->n_nodes - 1; i >= 0; i--) {
        const tg_node *n = &ctx->nodes[i];
        if (n->out == out && n->backward == flash_backward) return ((const flash_rec *)n->saved)->lse;
    }
    return NULL;
}
