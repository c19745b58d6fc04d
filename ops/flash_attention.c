#include "flash_attention.h"

#include <math.h>
#include <string.h>

#include "attn_check.h"
#include "gemm.h"
#include "parallel.h"
#include "vmath.h"

enum { BQ = TG_FLASH_BQ, BK = TG_FLASH_BK };

typedef struct {
    int B, T, H, d, dv;
    float scale;
    int causal;
    float *lse;   /* [B, H, T] (arena) */
} flash_rec;

static float head_mult(const flash_rec *r, const tg_tensor *head_scale, int h) {
    return r->scale * (head_scale ? head_scale->data[h] : 1.0f);
}

/* Keys a query row i sees in the key tile starting at j0 of nk keys. */
static int visible(int causal, int i, int j0, int nk) {
    if (!causal) return nk;
    int n = i - j0 + 1;
    return n < 0 ? 0 : n < nk ? n : nk;
}

/* What one (batch, head) contributes to the stats. */
typedef struct { double entropy; float max_logit; int saturated; } head_part;

/* Per-thread scratch of the forward: a logit tile, the output accumulator,
 * the running max, sum and entropy accumulator of each query row, and the
 * head's Kᵀ [d, T]: Q_i K_jᵀ then runs on libxsmm (ops/gemm.h), which has no
 * kernel for a transposed B; a head's K is transposed once. */
typedef struct { float *S, *O; float *m; double *l, *A; float *Kt; } fwd_scratch;

TG_VEC_CLONES static void forward_head(const flash_rec *r, const float *Q, const float *K, const float *V,
                                       float *O, float *lse, float s, int want_stats, fwd_scratch *w,
                                       head_part *part) {
    const int T = r->T, d = r->d, dv = r->dv, ldq = r->H * d, ldv = r->H * dv;
    tg_transpose(K, ldq, T, d, w->Kt);
    part->entropy = 0;
    part->max_logit = -INFINITY;
    part->saturated = 0;
    for (int i0 = 0; i0 < T; i0 += BQ) {
        int nq = T - i0 < BQ ? T - i0 : BQ;
        int kend = r->causal ? i0 + nq : T;
        for (int a = 0; a < nq; a++) {
            w->m[a] = -INFINITY;
            w->l[a] = 0;
            w->A[a] = 0;
        }
        memset(w->O, 0, (size_t)nq * dv * sizeof(float));
        for (int j0 = 0; j0 < kend; j0 += BK) {
            int nk = kend - j0 < BK ? kend - j0 : BK;
            /* S = Q_i K_jᵀ; the logits are s·S, scaled below row by row as in backward */
            tg_gemm(0, 0, nq, nk, d, 1.0f, Q + (int64_t)i0 * ldq, ldq, w->Kt + j0, T, 0.0f, w->S, BK);
            for (int a = 0; a < nq; a++) {
                float *x = w->S + (int64_t)a * BK;
                int nv = visible(r->causal, i0 + a, j0, nk);
                float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
                for (int j = 0; j < nv; j++) {
                    x[j] *= s;
                    mx = x[j] > mx ? x[j] : mx;
                }
                float m_old = w->m[a], m = mx > m_old ? mx : m_old;
                if (m != m_old && w->l[a] > 0) {
                    /* the new max: Σ e^{x−m}  = α Σ e^{x−m_old} and
                     * Σ e^{x−m}(x−m) = α (Σ e^{x−m_old}(x−m_old) + (m_old−m) Σ e^{x−m_old}) */
                    double alpha = exp((double)m_old - m);
                    w->A[a] = alpha * (w->A[a] + ((double)m_old - m) * w->l[a]);
                    w->l[a] *= alpha;
                    float fa = (float)alpha;
                    float *o = w->O + (int64_t)a * dv;
#pragma omp simd
                    for (int c = 0; c < dv; c++) o[c] *= fa;
                }
                w->m[a] = m;
                double l = 0, A = 0;
                if (want_stats) {
#pragma omp simd reduction(+ : l, A)
                    for (int j = 0; j < nv; j++) {
                        float y = x[j] - m;   /* <= 0: exp never overflows, whatever the logits */
                        x[j] = tg_exp_neg(y);
                        l += x[j];
                        A += (double)x[j] * y;
                    }
                } else {
#pragma omp simd reduction(+ : l)
                    for (int j = 0; j < nv; j++) {
                        x[j] = tg_exp_neg(x[j] - m);
                        l += x[j];
                    }
                }
                w->l[a] += l;
                w->A[a] += A;
                if (nv < nk)   /* masked: weight 0, never exponentiated */
                    memset(x + nv, 0, (size_t)(nk - nv) * sizeof(float));
            }
            /* O_i += P V_j (unnormalised: divided by ℓ at the end) */
            tg_gemm(0, 0, nq, dv, nk, 1.0f, w->S, BK, V + (int64_t)j0 * ldv, ldv, 1.0f, w->O, dv);
        }
        for (int a = 0; a < nq; a++) {
            double l = w->l[a];
            float inv = (float)(1.0 / l);
            const float *o = w->O + (int64_t)a * dv;
            float *out = O + (int64_t)(i0 + a) * ldv;
#pragma omp simd
            for (int c = 0; c < dv; c++) out[c] = o[c] * inv;
            lse[i0 + a] = (float)(w->m[a] + log(l));
            if (want_stats) {
                part->entropy += log(l) - w->A[a] / l;
                part->max_logit = w->m[a] > part->max_logit ? w->m[a] : part->max_logit;
                part->saturated += 1.0 / l > 0.99;   /* the top weight is e^{m−m}/ℓ */
            }
        }
    }
}

typedef struct {
    const flash_rec *r;
    const tg_tensor *q, *k, *v, *hs, *out;
    int want_stats;
    fwd_scratch *ws;
    head_part *parts;
} fwd_job;

static void forward_item(void *arg, int bh, int thread) {
    const fwd_job *j = arg;
    const flash_rec *r = j->r;
    const int T = r->T, H = r->H, d = r->d, dv = r->dv, b = bh / H, h = bh % H;
    int64_t oq = (int64_t)b * T * H * d + (int64_t)h * d, ov = (int64_t)b * T * H * dv + (int64_t)h * dv;
    forward_head(r, j->q->data + oq, j->k->data + oq, j->v->data + ov, j->out->data + ov,
                 r->lse + (int64_t)bh * T, head_mult(r, j->hs, h), j->want_stats, &j->ws[thread], &j->parts[bh]);
}

/* Per-thread scratch of the backward: raw scores, weights, dP then s·dS, D,
 * per row Σ dS·S, Σ dS and Σ P·S for the head-scale gradient, and the head's
 * Kᵀ [d, T] and Vᵀ [dv, T] (as in the forward). */
typedef struct { float *S, *P, *G, *D; double *gs, *g1, *ps; float *Kt, *Vt; } bwd_scratch;

/* Returns Σ dS ⊙ Q Kᵀ over the head (for the head-scale gradient). */
TG_VEC_CLONES static double backward_head(const flash_rec *r, const float *Q, const float *K, const float *V,
                                          const float *O, const float *dO, const float *lse, float *dQ, float *dK,
                                          float *dV, float s, int need_dS, int want_hs, bwd_scratch *w) {
    const int T = r->T, d = r->d, dv = r->dv, ldq = r->H * d, ldv = r->H * dv;
    double dhs = 0;
    tg_transpose(K, ldq, T, d, w->Kt);
    if (need_dS) tg_transpose(V, ldv, T, dv, w->Vt);
    for (int i0 = 0; i0 < T; i0 += BQ) {
        int nq = T - i0 < BQ ? T - i0 : BQ;
        int kend = r->causal ? i0 + nq : T;
        /* P = softmax  =>  dx = P ⊙ (dP − Σ_j dP P) and Σ_j dP_ij P_ij = Σ_c dO_ic O_ic */
        if (need_dS)
            for (int a = 0; a < nq; a++) {
                const float *o = O + (int64_t)(i0 + a) * ldv, *g = dO + (int64_t)(i0 + a) * ldv;
                double D = 0;
#pragma omp simd reduction(+ : D)
                for (int c = 0; c < dv; c++) D += (double)g[c] * o[c];
                w->D[a] = (float)D;
                w->gs[a] = w->g1[a] = w->ps[a] = 0;
            }
        for (int j0 = 0; j0 < kend; j0 += BK) {
            int nk = kend - j0 < BK ? kend - j0 : BK;
            tg_gemm(0, 0, nq, nk, d, 1.0f, Q + (int64_t)i0 * ldq, ldq, w->Kt + j0, T, 0.0f, w->S, BK);
            for (int a = 0; a < nq; a++) {
                const float *x = w->S + (int64_t)a * BK;
                float *p = w->P + (int64_t)a * BK, L = lse[i0 + a];
                int nv = visible(r->causal, i0 + a, j0, nk);
#pragma omp simd
                for (int j = 0; j < nv; j++) p[j] = tg_exp_neg(s * x[j] - L);   /* s·x <= lse: <= 0 */
                if (nv < nk) memset(p + nv, 0, (size_t)(nk - nv) * sizeof(float));
            }
            /* O = P V  =>  dV_j += Pᵀ dO_i */
            if (dV)
                tg_gemm(1, 0, nk, dv, nq, 1.0f, w->P, BK, dO + (int64_t)i0 * ldv, ldv, 1.0f, dV + (int64_t)j0 * ldv,
                        ldv);
            if (!need_dS) continue;
            /* dP = dO_i V_jᵀ, then dS = P ⊙ (dP − D) (0 where masked, as P is); G keeps s·dS */
            tg_gemm(0, 0, nq, nk, dv, 1.0f, dO + (int64_t)i0 * ldv, ldv, w->Vt + j0, T, 0.0f, w->G, BK);
            for (int a = 0; a < nq; a++) {
                const float *p = w->P + (int64_t)a * BK, *x = w->S + (int64_t)a * BK;
                float *g = w->G + (int64_t)a * BK, D = w->D[a];
                int nv = visible(r->causal, i0 + a, j0, nk);
                if (want_hs) {
                    double gs = 0, g1 = 0, ps = 0;
#pragma omp simd reduction(+ : gs, g1, ps)
                    for (int j = 0; j < nv; j++) {
                        float ds = p[j] * (g[j] - D);
                        gs += (double)ds * x[j];
                        g1 += ds;
                        ps += (double)p[j] * x[j];
                        g[j] = s * ds;
                    }
                    w->gs[a] += gs;
                    w->g1[a] += g1;
                    w->ps[a] += ps;
                } else {
#pragma omp simd
                    for (int j = 0; j < nv; j++) g[j] = s * (p[j] * (g[j] - D));
                }
                if (nv < nk) memset(g + nv, 0, (size_t)(nk - nv) * sizeof(float));
            }
            /* logits = s · Q Kᵀ  =>  dQ_i += (s dS) K_j,  dK_j += (s dS)ᵀ Q_i */
            if (dQ)
                tg_gemm(0, 0, nq, d, nk, 1.0f, w->G, BK, K + (int64_t)j0 * ldq, ldq, 1.0f, dQ + (int64_t)i0 * ldq,
                        ldq);
            if (dK)
                tg_gemm(1, 0, nk, d, nq, 1.0f, w->G, BK, Q + (int64_t)i0 * ldq, ldq, 1.0f, dK + (int64_t)j0 * ldq,
                        ldq);
        }
        /* Exactly, Σ_j dS_ij = 0, so Σ_j dS_ij S_ij = Σ_j dS_ij (S_ij − c_i) for any c_i.
         * In float32, D (from O) and the recomputed P disagree by about |logit|·2^-24, so a
         * row's dS sums to a leftover that raw scores of tens or hundreds multiply (3-10×
         * tg_attention's error in saturated heads). Taking c_i = Σ_j P_ij S_ij gives what a
         * D consistent with the recomputed P would (up to (Σ_j P_ij − 1)·leftover), with no
         * second pass over the keys and nothing more saved by the forward. */
        if (want_hs)
            for (int a = 0; a < nq; a++) dhs += w->gs[a] - w->g1[a] * w->ps[a];
    }
    return dhs;
}

/* The block products run inside the parallel region, where the product plan
 * measures nothing (ops/gemm.h): their shapes are decided here first. */
static void prepare_products(const flash_rec *r, int backward) {
    const int T = r->T, d = r->d, dv = r->dv, ldq = r->H * d, ldv = r->H * dv;
    int seen[64][2], n = 0;
    for (int i0 = 0; i0 < T; i0 += BQ) {
        int nq = T - i0 < BQ ? T - i0 : BQ, kend = r->causal ? i0 + nq : T;
        for (int pass = 0; pass < 2; pass++) {   /* a full key block (if any), the last one */
            int nk = pass ? kend - (kend - 1) / BK * BK : BK;
            if (!pass && kend < BK) continue;
            int dup = 0;
            for (int i = 0; i < n; i++) dup |= seen[i][0] == nq && seen[i][1] == nk;
            if (dup || n == 64) continue;
            seen[n][0] = nq, seen[n][1] = nk, n++;
            tg_gemm_prepare(0, nq, nk, d, ldq, T, BK);   /* S = Q_i K_jᵀ (Kᵀ made per head) */
            if (!backward) {
                tg_gemm_prepare(0, nq, dv, nk, BK, ldv, dv);
            } else {
                tg_gemm_prepare(1, nk, dv, nq, BK, ldv, ldv);
                tg_gemm_prepare(0, nq, nk, dv, ldv, T, BK);
                tg_gemm_prepare(0, nq, d, nk, BK, ldq, ldq);
                tg_gemm_prepare(1, nk, d, nq, BK, ldq, ldq);
            }
        }
    }
}

typedef struct {
    const flash_rec *r;
    const tg_tensor *q, *k, *v, *hs, *out;
    int need_dS, want_hs;
    bwd_scratch *ws;
    double *dhs;
} bwd_job;

static void backward_item(void *arg, int bh, int thread) {
    const bwd_job *j = arg;
    const flash_rec *r = j->r;
    const int T = r->T, H = r->H, d = r->d, dv = r->dv, b = bh / H, h = bh % H;
    int64_t oq = (int64_t)b * T * H * d + (int64_t)h * d, ov = (int64_t)b * T * H * dv + (int64_t)h * dv;
    const tg_tensor *q = j->q, *k = j->k, *v = j->v;
    j->dhs[bh] = backward_head(r, q->data + oq, k->data + oq, v->data + ov, j->out->data + ov,
                               j->out->grad + ov, r->lse + (int64_t)bh * T, q->grad ? q->grad + oq : NULL,
                               k->grad ? k->grad + oq : NULL, v->grad ? v->grad + ov : NULL,
                               head_mult(r, j->hs, h), j->need_dS, j->want_hs, &j->ws[thread]);
}

static void flash_backward(tg_ctx *ctx, const tg_node *n) {
    const flash_rec *r = n->saved;
    tg_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2], *out = n->out;
    tg_tensor *hs = n->n_in == 4 ? n->in[3] : NULL;
    const int B = r->B, T = r->T, H = r->H, d = r->d, dv = r->dv;
    const int want_hs = hs && hs->grad, need_dS = q->grad || k->grad || want_hs;
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
        ws[t].Kt = tg_arena_alloc(ctx, (size_t)d * T * sizeof(float));
        ws[t].Vt = tg_arena_alloc(ctx, (size_t)dv * T * sizeof(float));
    }
    double *dhs = tg_arena_alloc(ctx, (size_t)B * H * sizeof(double));
    bwd_job job = { r, q, k, v, hs, out, need_dS, want_hs, ws, dhs };
    prepare_products(r, 1);
    int blas = tg_blas_serial_begin();
    /* each (b, h) owns its slices of dQ, dK, dV: no two threads write one float */
    tg_parallel_for(B * H, (int64_t)B * H * T * T * (2 * d + 2 * dv), backward_item, &job);
    tg_blas_serial_end(blas);
    /* s = scale · head_scale[h]  =>  d head_scale[h] = scale · Σ dS ⊙ Q Kᵀ, summed over b in order */
    if (want_hs)
        for (int h = 0; h < H; h++) {
            double sum = 0;
            for (int b = 0; b < B; b++) sum += dhs[b * H + h];
            hs->grad[h] += (float)(r->scale * sum);
        }
}

tg_tensor *tg_flash_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale,
                              float scale, int causal, tg_attn_stats *stats) {
    tg_attention_check(ctx, "tg_flash_attention", q, k, v, head_scale, scale, stats);
    flash_rec r = { .B = q->shape[0], .T = q->shape[1], .H = q->shape[2], .d = q->shape[3],
                    .dv = v->shape[3], .scale = scale, .causal = !!causal };
    const int B = r.B, T = r.T, H = r.H, d = r.d, dv = r.dv;
    tg_tensor *out = tg_new(ctx, 4, (int[]){B, T, H, dv});
    r.lse = tg_arena_alloc(ctx, (size_t)B * H * T * sizeof(float));
    const int nt = tg_threads();
    fwd_scratch *ws = tg_arena_alloc(ctx, (size_t)nt * sizeof *ws);
    for (int t = 0; t < nt; t++) {
        ws[t].S = tg_arena_alloc(ctx, (size_t)BQ * BK * sizeof(float));
        ws[t].O = tg_arena_alloc(ctx, (size_t)BQ * dv * sizeof(float));
        ws[t].m = tg_arena_alloc(ctx, BQ * sizeof(float));
        ws[t].l = tg_arena_alloc(ctx, BQ * sizeof(double));
        ws[t].A = tg_arena_alloc(ctx, BQ * sizeof(double));
        ws[t].Kt = tg_arena_alloc(ctx, (size_t)d * T * sizeof(float));
    }
    head_part *parts = tg_arena_alloc(ctx, (size_t)B * H * sizeof *parts);
    fwd_job job = { &r, q, k, v, head_scale, out, stats != NULL, ws, parts };
    prepare_products(&r, 0);
    int blas = tg_blas_serial_begin();
    tg_parallel_for(B * H, (int64_t)B * H * T * T * (d + dv), forward_item, &job);
    tg_blas_serial_end(blas);
    if (stats)   /* means over batch and rows, combined in a fixed order */
        for (int h = 0; h < H; h++) {
            double ent = 0;
            float mx = -INFINITY;
            int64_t sat = 0;
            for (int b = 0; b < B; b++) {
                const head_part *p = &parts[b * H + h];
                ent += p->entropy;
                mx = p->max_logit > mx ? p->max_logit : mx;
                sat += p->saturated;
            }
            double rows = (double)B * T;
            if (stats->entropy) stats->entropy[h] = (float)(ent / rows);
            if (stats->max_logit) stats->max_logit[h] = mx;
            if (stats->saturation) stats->saturation[h] = (float)(sat / rows);
        }

    tg_tensor *in[] = {q, k, v, head_scale};
    tg_node *n = tg_record(ctx, "tg_flash_attention", flash_backward, out, head_scale ? 4 : 3, in, sizeof r);
    if (n) {
        *(flash_rec *)n->saved = r;
        /* the blocks it runs: S = Q_i K_jᵀ, O += P V_j; back: S again, dV, dP, dQ, dK */
        double pairs = 0;
        for (int i0 = 0; i0 < T; i0 += BQ) {
            int nq = T - i0 < BQ ? T - i0 : BQ;
            pairs += (double)nq * (causal ? i0 + nq : T);
        }
        pairs *= 2.0 * B * H;
        int dS = q->requires_grad || k->requires_grad || (head_scale && head_scale->requires_grad);
        n->flops[0] = pairs * (d + dv);
        n->flops[1] = pairs * (d + dv * (v->requires_grad + dS) + d * (q->requires_grad + k->requires_grad));
    }
    return out;
}

const float *tg_flash_attention_lse(const tg_ctx *ctx, const tg_tensor *out) {
    for (int i = ctx->n_nodes - 1; i >= 0; i--) {
        const tg_node *n = &ctx->nodes[i];
        if (n->out == out && n->backward == flash_backward) return ((const flash_rec *)n->saved)->lse;
    }
    return NULL;
}
