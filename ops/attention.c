#include "attention.h"

#include <math.h>
#include <string.h>

#include "attn_check.h"
#include "gemm.h"
#include "parallel.h"
#include "vmath.h"

typedef struct {
    int B, T, H, d, dv;
    float scale;
    int causal;
    float *P;   /* [B, H, T, T] weights, masked entries 0 (arena) */
} attn_rec;

/* The logit multiplier of head h: the op's scale times the head's own. */
static float head_mult(const attn_rec *r, const tg_tensor *head_scale, int h) {
    return r->scale * (head_scale ? head_scale->data[h] : 1.0f);
}

/* In place: the first nv scores of a row become the softmax weights of the
 * logits s·score, the masked tail becomes 0 without being read. Returns the
 * row's largest logit. */
__attribute__((always_inline)) static inline float softmax_row(float *row, int nv, int T, float s) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < nv; j++) {
        row[j] *= s;
        mx = row[j] > mx ? row[j] : mx;
    }
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < nv; j++) {
        row[j] = tg_exp_neg(row[j] - mx);   /* <= 1: no overflow however large the logits */
        sum += row[j];
    }
    float inv = (float)(1.0 / sum);
#pragma omp simd
    for (int j = 0; j < nv; j++) row[j] *= inv;
    if (nv < T) memset(row + nv, 0, (size_t)(T - nv) * sizeof(float));
    return mx;
}

/* Q Kᵀ and dO Vᵀ: libxsmm has no kernel for a transposed B, OpenBLAS has,
 * but for short rows it is slow. Measured with a head's K (V) transposed
 * first and the product on libxsmm: the whole op (bench_attn --attn composed,
 * one thread) 4-15% faster at T = 4·d and more (T 128-512, d 32-64), about
 * the same at T = 2·d (T 32, d 16; T 64, d 32; T 256, d 128 within 3%), and
 * 20% slower at T = d/2 (T 64, d 128); a `small` training step (T 32, d 16)
 * 3-4% faster, with one thread and with two (bench_step). */
static int transpose_first(int T, int d) { return T >= 2 * d; }

/* The backward's products, planned once a call (ops/gemm.h). */
typedef struct { tg_gemm_plan dV, dP, G, dK; } bwd_plans;

/* One (b, h) of the backward; returns its Σ Q ⊙ (dLogits K) for the head-scale grad. */
TG_VEC_CLONES static double backward_head(const attn_rec *r, const bwd_plans *pl, const tg_tensor *q, const tg_tensor *k,
                            const tg_tensor *v, const tg_tensor *out, int b, int h, float s, int need_G, int want_hs,
                            int dq_first, float *dL, float *G, float *Vt) {
    const int T = r->T, H = r->H, d = r->d, dv = r->dv;
    const int ldq = H * d, ldv = H * dv;   /* row strides of a head's [T,d] / [T,dv] view */
    /* Q, K are (T,d), V, dO are (T,dv), all with row stride H·d or H·dv; P is (T,T) */
    int64_t oq = (int64_t)b * T * ldq + (int64_t)h * d, ov = (int64_t)b * T * ldv + (int64_t)h * dv;
    const float *Q = q->data + oq, *K = k->data + oq, *V = v->data + ov, *dO = out->grad + ov;
    const float *P = r->P + ((int64_t)b * H + h) * T * T;
    double dhs = 0;

    /* O = P V  =>  dV += Pᵀ dO */
    if (v->grad) tg_gemm_run(&pl->dV, P, dO, v->grad + ov);
    if (!need_G && !k->grad) return 0;

    /* O = P V  =>  dP = dO Vᵀ (see transpose_first) */
    if (pl->dP.tb) {
        tg_gemm_run(&pl->dP, dO, V, dL);
    } else {
        tg_transpose(V, ldv, T, dv, Vt);
        tg_gemm_run(&pl->dP, dO, Vt, dL);
    }
    /* P = softmax(logits)  =>  dLogits = P ⊙ (dP − <dP, P>) per row, 0 where masked.
     * Each row of dLogits sums to 0 exactly, but not in float32; the head-scale
     * grad Σ dLogits ⊙ QKᵀ would multiply that leftover by the row's (large,
     * in a saturated head) raw logits. So it sums dLogits ⊙ (QKᵀ − m_i) instead,
     * m_i the raw logit of the row's top weight: the same in exact arithmetic,
     * as flash_attention.c does. centre = Σ_i m_i · Σ_j dLogits_ij. */
    double centre = 0;
    for (int i = 0; i < T; i++) {
        const float *p = P + (int64_t)i * T;
        float *g = dL + (int64_t)i * T;
        int nv = r->causal ? i + 1 : T;
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j < nv; j++) dot += (double)g[j] * p[j];
        const float fdot = (float)dot;
#pragma omp simd
        for (int j = 0; j < nv; j++) g[j] = p[j] * (g[j] - fdot);
        if (nv < T) memset(g + nv, 0, (size_t)(T - nv) * sizeof(float));
        if (want_hs) {   /* want_hs implies need_G */
            double rs = 0, m = 0;
            int top = 0;
            for (int j = 0; j < nv; j++) {
                rs += g[j];
                if (p[j] > p[top]) top = j;
            }
            const float *qi = Q + (int64_t)i * ldq, *kt = K + (int64_t)top * ldq;
            for (int c = 0; c < d; c++) m += (double)qi[c] * kt[c];
            centre += m * rs;
        }
    }
    /* logits = s · Q Kᵀ  =>  dQ = s · dLogits K,  ds = Σ dLogits ⊙ Q Kᵀ = Σ Q ⊙ (dLogits K).
     * G = dLogits K serves both, so the head-scale grad never divides by s. */
    if (need_G) {
        tg_gemm_run(&pl->G, dL, K, G);
        for (int i = 0; i < T; i++) {
            const float *gi = G + (int64_t)i * d, *qi = Q + (int64_t)i * ldq;
            float *dq = q->grad ? q->grad + oq + (int64_t)i * ldq : NULL;
            if (dq && dq_first) {
#pragma omp simd
                for (int c = 0; c < d; c++) dq[c] = s * gi[c];
            } else if (dq) {
#pragma omp simd
                for (int c = 0; c < d; c++) dq[c] += s * gi[c];
            }
            if (want_hs)
                for (int c = 0; c < d; c++) dhs += (double)qi[c] * gi[c];
        }
    }
    /* logits = s · Q Kᵀ  =>  dK += (s · dLogits)ᵀ Q */
    if (k->grad) {
#pragma omp simd
        for (int64_t i = 0; i < (int64_t)T * T; i++) dL[i] *= s;
        tg_gemm_run(&pl->dK, dL, Q, k->grad + oq);
    }
    return dhs - centre;
}

typedef struct {
    const attn_rec *r;
    const bwd_plans *pl;
    const tg_tensor *q, *k, *v, *hs, *out;
    int need_G, want_hs, dq_first;
    float *dL, *G, *Vt;   /* per-thread scratch */
    double *dhs;     /* per (b, h) */
} bwd_job;

static void backward_item(void *arg, int bh, int t) {
    const bwd_job *j = arg;
    const int T = j->r->T, H = j->r->H, d = j->r->d, h = bh % H;
    j->dhs[bh] = backward_head(j->r, j->pl, j->q, j->k, j->v, j->out, bh / H, h, head_mult(j->r, j->hs, h),
                               j->need_G, j->want_hs, j->dq_first, j->dL + (int64_t)t * T * T,
                               j->G ? j->G + (int64_t)t * T * d : NULL, j->Vt + (int64_t)t * j->r->dv * T);
}

static void attention_backward(tg_ctx *ctx, const tg_node *n) {
    const attn_rec *r = n->saved;
    tg_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2], *out = n->out;
    tg_tensor *hs = n->n_in == 4 ? n->in[3] : NULL;
    const int B = r->B, T = r->T, H = r->H, d = r->d, dv = r->dv;
    int need_G = q->grad || (hs && hs->grad);
    /* per-thread scratch; per-(b,h) head-scale sums, added over b in order below */
    const int nt = tg_threads();
    float *dL = tg_arena_alloc(ctx, (size_t)nt * T * T * sizeof(float));
    float *G = need_G ? tg_arena_alloc(ctx, (size_t)nt * T * d * sizeof(float)) : NULL;
    double *dhs = tg_arena_alloc(ctx, (size_t)B * H * sizeof(double));
    /* grads nothing wrote yet are written (beta 0), not zeroed and added to;
     * each (b, h) writes its own slices, together all of them */
    const int ldq = H * d, ldv = H * dv;
    bwd_plans pl;
    if (v->grad) tg_gemm_plan_init(&pl.dV, 1, 0, T, dv, T, 1.0f, T, ldv, tg_grad_first(v) ? 0.0f : 1.0f, ldv);
    if (transpose_first(T, dv))
        tg_gemm_plan_init(&pl.dP, 0, 0, T, T, dv, 1.0f, ldv, T, 0.0f, T);
    else
        tg_gemm_plan_init(&pl.dP, 0, 1, T, T, dv, 1.0f, ldv, ldv, 0.0f, T);
    tg_gemm_plan_init(&pl.G, 0, 0, T, d, T, 1.0f, T, ldq, 0.0f, d);
    if (k->grad) tg_gemm_plan_init(&pl.dK, 1, 0, T, d, T, 1.0f, T, ldq, tg_grad_first(k) ? 0.0f : 1.0f, ldq);
    int dq_first = q->grad && tg_grad_first(q);
    if (hs && hs->grad) tg_grad_acc(hs);
    float *Vt = tg_arena_alloc(ctx, (size_t)nt * dv * T * sizeof(float));
    bwd_job job = { r, &pl, q, k, v, hs, out, need_G, hs && hs->grad, dq_first, dL, G, Vt, dhs };
    int blas = tg_blas_serial_begin();
    /* each (b, h) owns its slices of dQ, dK, dV: no two threads write one float */
    tg_parallel_for(B * H, (int64_t)B * H * T * T * (2 * d + 2 * dv), backward_item, &job);
    tg_blas_serial_end(blas);
    /* s = scale · head_scale[h]  =>  d head_scale[h] = scale · ds */
    if (hs && hs->grad)
        for (int h = 0; h < H; h++) {
            double sum = 0;
            for (int b = 0; b < B; b++) sum += dhs[b * H + h];
            hs->grad[h] += (float)(r->scale * sum);
        }
}

typedef struct {
    const attn_rec *r;
    const tg_gemm_plan *S, *O;   /* S = Q Kᵀ, O = P V */
    const tg_tensor *q, *k, *v, *hs, *out;
    int want_stats;
    double *ent;   /* per (b, h) stats */
    float *mxl;
    int64_t *sat;
    float *Kt;     /* per-thread scratch: a head's Kᵀ */
} fwd_job;

TG_VEC_CLONES static void forward_item(void *arg, int bh, int thread) {
    const fwd_job *j = arg;
    const attn_rec *r = j->r;
    const int T = r->T, H = r->H, d = r->d, dv = r->dv, ldq = H * d, ldv = H * dv, b = bh / H, h = bh % H;
    float s = head_mult(r, j->hs, h);
    double entropy = 0;
    float max_logit = -INFINITY;
    int64_t saturated = 0;
    /* Q, K are (T,d), V, O are (T,dv), all with row stride H·d or H·dv; P is (T,T) */
    int64_t oq = (int64_t)b * T * ldq + (int64_t)h * d, ov = (int64_t)b * T * ldv + (int64_t)h * dv;
    const float *Q = j->q->data + oq, *K = j->k->data + oq, *V = j->v->data + ov;
    float *P = r->P + ((int64_t)b * H + h) * T * T, *O = j->out->data + ov;

    /* scores Q Kᵀ, logits s·Q Kᵀ (the masked upper triangle is computed but never read) */
    if (j->S->tb) {
        tg_gemm_run(j->S, Q, K, P);
    } else {   /* see transpose_first */
        float *Kt = j->Kt + (int64_t)thread * d * T;
        tg_transpose(K, ldq, T, d, Kt);
        tg_gemm_run(j->S, Q, Kt, P);
    }
    for (int i = 0; i < T; i++) {
        float *p = P + (int64_t)i * T;
        int nv = r->causal ? i + 1 : T;
        float m = softmax_row(p, nv, T, s);
        if (!j->want_stats) continue;
        max_logit = m > max_logit ? m : max_logit;
        float pmax = 0;
        for (int c = 0; c < nv; c++) {
            if (p[c] > 0) entropy -= (double)p[c] * log((double)p[c]);   /* 0 ln 0 = 0 */
            pmax = p[c] > pmax ? p[c] : pmax;
        }
        saturated += pmax > 0.99f;
    }
    /* O = P V */
    tg_gemm_run(j->O, P, V, O);
    j->ent[bh] = entropy;
    j->mxl[bh] = max_logit;
    j->sat[bh] = saturated;
}

void tg_attention_check(tg_ctx *ctx, const char *op, const tg_tensor *q, const tg_tensor *k,
                        const tg_tensor *v, const tg_tensor *head_scale, float scale, const tg_attn_stats *stats) {
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        tg_fail(ctx, "%s: q, k and v must be 4-D [B,T,H,d]: q %s, k %s, v %s", op, TG_SHAPE(q), TG_SHAPE(k),
                TG_SHAPE(v));
    int same = tg_same_shape(q, k);
    for (int i = 0; i < 3; i++) same = same && v->shape[i] == q->shape[i];
    if (!same)
        tg_fail(ctx, "%s: q and k must have one shape [B,T,H,d] and v the same [B,T,H] "
                "(its d may differ): q %s, k %s, v %s", op, TG_SHAPE(q), TG_SHAPE(k), TG_SHAPE(v));
    int H = q->shape[2];
    if (head_scale && (head_scale->ndim != 1 || head_scale->shape[0] != H))
        tg_fail(ctx, "%s: head_scale must be [H] = [%d] for q %s, got %s", op, H, TG_SHAPE(q),
                TG_SHAPE(head_scale));
    if (stats && stats->H != H)
        tg_fail(ctx, "%s: stats->H is %d but q %s has H = %d heads", op, stats->H, TG_SHAPE(q), H);
    if (!isfinite(scale)) tg_fail(ctx, "%s: scale must be finite, got %g", op, (double)scale);
}

tg_tensor *tg_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale,
                        float scale, int causal, tg_attn_stats *stats) {
    tg_attention_check(ctx, "tg_attention", q, k, v, head_scale, scale, stats);
    attn_rec r = { .B = q->shape[0], .T = q->shape[1], .H = q->shape[2], .d = q->shape[3],
                   .dv = v->shape[3], .scale = scale, .causal = !!causal };
    const int B = r.B, T = r.T, H = r.H, d = r.d, dv = r.dv;
    /* P is the forward's scratch for the logits and what backward needs: always made */
    r.P = tg_arena_alloc(ctx, (size_t)B * H * T * T * sizeof(float));
    tg_tensor *out = tg_new(ctx, 4, (int[]){B, T, H, dv});

    /* per-(b,h) stats, combined over b in a fixed order after the parallel loop */
    double *ent = tg_arena_alloc(ctx, (size_t)B * H * sizeof(double));
    float *mxl = tg_arena_alloc(ctx, (size_t)B * H * sizeof(float));
    int64_t *sat = tg_arena_alloc(ctx, (size_t)B * H * sizeof(int64_t));
    tg_gemm_plan pS, pO;
    if (transpose_first(T, d))
        tg_gemm_plan_init(&pS, 0, 0, T, T, d, 1.0f, H * d, T, 0.0f, T);
    else
        tg_gemm_plan_init(&pS, 0, 1, T, T, d, 1.0f, H * d, H * d, 0.0f, T);
    tg_gemm_plan_init(&pO, 0, 0, T, dv, T, 1.0f, T, H * dv, 0.0f, H * dv);
    float *Kt = tg_arena_alloc(ctx, (size_t)tg_threads() * d * T * sizeof(float));   /* per thread */
    fwd_job job = { &r, &pS, &pO, q, k, v, head_scale, out, stats != NULL, ent, mxl, sat, Kt };
    int blas = tg_blas_serial_begin();
    tg_parallel_for(B * H, (int64_t)B * H * T * T * (d + dv), forward_item, &job);
    tg_blas_serial_end(blas);
    if (stats)
        for (int h = 0; h < H; h++) {
            double entropy = 0;
            float max_logit = -INFINITY;
            int64_t saturated = 0;
            for (int b = 0; b < B; b++) {
                entropy += ent[b * H + h];
                max_logit = mxl[b * H + h] > max_logit ? mxl[b * H + h] : max_logit;
                saturated += sat[b * H + h];
            }
            double rows = (double)B * T;
            if (stats->entropy) stats->entropy[h] = (float)(entropy / rows);
            if (stats->max_logit) stats->max_logit[h] = max_logit;
            if (stats->saturation) stats->saturation[h] = (float)(saturated / rows);
        }

    tg_tensor *in[] = {q, k, v, head_scale};
    tg_node *n = tg_record(ctx, "tg_attention", attention_backward, out, head_scale ? 4 : 3, in, sizeof r);
    if (n) {
        *(attn_rec *)n->saved = r;
        n->own_grads = 1;
        /* S = QKᵀ, O = PV; back: dV = PᵀdO, dP = dO Vᵀ, dQ = G K, dK = Gᵀ Q */
        double pairs = 2.0 * B * H * T * T;
        int dS = q->requires_grad || k->requires_grad || (head_scale && head_scale->requires_grad);
        n->flops[0] = pairs * (d + dv);
        n->flops[1] = pairs * (dv * (v->requires_grad + dS) + d * (q->requires_grad + k->requires_grad));
    }
    return out;
}

double tg_attn_uniform_entropy(int T, int causal) {
    if (!causal) return log((double)T);
    double sum = 0;
    for (int i = 0; i < T; i++) sum += log((double)(i + 1));
    return sum / T;
}

const float *tg_attention_probs(const tg_ctx *ctx, const tg_tensor *out) {
    for (int i = ctx->n_nodes - 1; i >= 0; i--) {
        const tg_node *n = &ctx->nodes[i];
        if (n->out == out && n->backward == attention_backward) return ((const attn_rec *)n->saved)->P;
    }
    return NULL;
}
