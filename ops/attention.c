#include "attention.h"

#include <math.h>
#include <string.h>

#include "attn_geom.h"
#include "gemm.h"
#include "parallel.h"
#include "vmath.h"

/* A block of query rows [i0, i1) and the keys [k0, k1) any of them may see
 * (whole 16-float vectors, as vec_span: the rows' loops stay inside). */
typedef struct { int i0, i1, k0, k1; } attn_blk;

typedef struct {
    tg_attn_geom g;
    float *P;        /* [B, H, Tq, Tk] weights before dropout, invisible entries 0 (arena) */
    float *psink;    /* sinks only: [B, H, Tq] the sink's weight of each row */
    int nblk;        /* the products run per block of query rows (see query_blocks) */
    attn_blk *blk;   /* [nblk] (arena) */
} attn_rec;

/* The logit multiplier of head h: the op's scale times the head's own. */
static float head_mult(const attn_rec *r, const tg_tensor *head_scale, int h) {
    return r->g.scale * (head_scale ? head_scale->data[h] : 1.0f);
}

/* The span [lo, hi) widened to whole 16-float vectors, within [0, T): the rows'
 * loops run over it with the entries outside the span masked, so they have no
 * scalar remainder. Measured: causal rows of a short head (T 32) are 1-32 keys
 * long, and their remainders made the forward's softmax the op's largest cost. */
static inline void vec_span(int lo, int hi, int T, int *alo, int *ahi) {
    *alo = lo & ~15;
    *ahi = hi + 15 < T ? (hi + 15) & ~15 : T;
}

/* In place: the scores [lo, hi) of row i of a head's T keys become the softmax
 * weights of their logits (s·score, or tg_attn_logit's with a cap, bias or
 * ALiBi; a sink joins the denominator), the rest 0. Returns the row's largest
 * key logit (−inf: no key, or all −inf: the row is all 0); *psink gets the
 * sink's weight. */
__attribute__((always_inline)) static inline float softmax_row(float *row, int lo, int hi, int T, float s,
                                                               const tg_attn_geom *g, int b, int h, int i,
                                                               float *psink) {
    float mx = -INFINITY;
    *psink = 0;
    if (hi <= lo) {
        memset(row, 0, (size_t)T * sizeof(float));
        return mx;
    }
    int alo, ahi;   /* the loops' range; between it and the span, logits −inf and weights 0 */
    vec_span(lo, hi, T, &alo, &ahi);
    if (alo > 0) memset(row, 0, (size_t)alo * sizeof(float));
    if (ahi < T) memset(row + ahi, 0, (size_t)(T - ahi) * sizeof(float));
    if (!g->extras) {
#pragma omp simd
        for (int j = alo; j < ahi; j++) row[j] = tg_select(j >= lo && j < hi, row[j] * s, -INFINITY);
    } else {
        const float *brow = tg_attn_bias_row(g, b, h, i);
        for (int j = alo; j < ahi; j++)
            row[j] = j >= lo && j < hi ? tg_attn_logit(g, brow, h, i, j, row[j] * s) : -INFINITY;
    }
    mx = tg_row_max(row + alo, ahi - alo);
    const float top = mx, sink = g->sinks ? g->sinks[h] : -INFINITY;
    if (sink > mx) mx = sink;
    if (mx == -INFINITY) {   /* every visible logit −inf (a bias mask) and no sink: as no key */
        int nan = 0;
        for (int j = lo; j < hi; j++) nan |= isnan(row[j]);
        memset(row + alo, 0, (size_t)(ahi - alo) * sizeof(float));
        if (!nan) return mx;
        for (int c = lo; c < hi; c++) row[c] = NAN;   /* NaN, which the max skips: never hidden as an empty row */
        return NAN;
    }
#pragma omp simd
    for (int j = alo; j < ahi; j++) row[j] = tg_exp_neg(row[j] - mx);   /* <= 1: no overflow; e^−inf = 0 */
    double sum = tg_row_dot_d(row + alo, NULL, ahi - alo);
    double es = 0;
    if (g->sinks) sum += es = tg_exp_neg(sink - mx);
    float inv = (float)(1.0 / sum);
#pragma omp simd
    for (int j = alo; j < ahi; j++) row[j] *= inv;
    *psink = (float)(es / sum);
    return top;
}

/* The weights with dropout: P̃ = P ⊙ keep/(1 − p) over the row's span. */
static void dropped_row(const tg_attn_geom *g, int b, int h, int i, const float *p, float *out, int lo, int hi) {
    memset(out, 0, (size_t)g->Tk * sizeof(float));
    for (int j = lo; j < hi; j++) out[j] = tg_attn_keep(g, b, h, i, j) ? p[j] * g->drop_scale : 0.0f;
}

/* Q Kᵀ and dO Vᵀ: libxsmm has no kernel for a transposed B, OpenBLAS has,
 * but for short rows it is slow. So K and V are transposed first (Kt, Vt): no
 * product has a transposed B, and the plan may put each on libxsmm. Until
 * 0.15.1 this held only from T = 2·d on:
 * OpenBLAS's transposed B measured faster below, against an element-by-element
 * transpose. With tg_transpose's register shuffles and the query blocks, the
 * whole op (bench_attn --attn composed, one thread, side by side, AMD EPYC
 * Zen 4, libxsmm cpx, OpenBLAS Cooperlake) is 1.14x faster at T 32 d 128 and
 * 1.23x at T 64 d 128 (medians of 9), the same within noise at T 2·d-8·d. */

/* Offsets of batch row b's head h in q/out (H heads) and kh in k/v (Hkv heads). */
static int64_t off(int b, int T, int heads, int h, int width) { return ((int64_t)b * T * heads + h) * width; }

/* A block's products, planned once a call (ops/gemm.h); [0] writes, [1] adds. */
typedef struct { tg_gemm_call S, O, dV[2], dP, G, dK[2]; } blk_plans;

/* The query blocks of a call. Causal or windowed rows see a part of the keys,
 * and the products of a block need only its keys: causal, blocks of QB rows
 * run (1 + QB/T)/2 of the full products. QB measured with bench_attn --attn
 * composed, causal, one thread, side by side (AMD EPYC Zen 4, libxsmm cpx, OpenBLAS Cooperlake,
 * 2026-12-03, medians of 5-7, before K and V were transposed at every shape):
 * T 64 d 128: 16 rows 11.4 ms, 32 13.5, 64 14.5;
 * T 32 d 16: 16 rows 0.32 ms, one block 0.34; T 256 d 32: 16 rows 44 ms, 32
 * and 64 38; T 1024 d 64: 64 rows 29 ms, 32 33, 16 32. The AVX2 code (same
 * machine, OpenBLAS Haswell, libxsmm hsw, 0.15.2, medians of 5-7) prefers 32
 * rows only at T 64 d 128 (13.5 ms against 14.3-15.0); at T 32 d 16, T 32
 * d 128, T 64 d 32, T 128 d 64 and T 256 d 32 16 rows are best or within 2%
 * (and 0.15.2's AVX-512 code again as above): one rule for both. The spans ignore
 * padding (kv_len, per batch row): a block's keys are a superset of what any
 * batch row sees. One block, the whole head, when that saves under an eighth. */
static int query_blocks(tg_ctx *ctx, const tg_attn_geom *g, attn_blk **out) {
    const int Tq = g->Tq, Tk = g->Tk, QB = Tq <= 64 ? 16 : Tq < 256 ? 32 : 64;
    int n = Tq > QB ? (Tq + QB - 1) / QB : 1;
    attn_blk *blk = tg_arena_alloc(ctx, (size_t)n * sizeof *blk);
    tg_attn_geom g0 = *g;
    g0.kv_len = NULL;
    int64_t pairs = 0;
    for (int q = 0; q < n; q++) {
        attn_blk *k = &blk[q];
        k->i0 = q * QB, k->i1 = n == 1 ? Tq : (q + 1) * QB < Tq ? (q + 1) * QB : Tq;
        int lo, hi;
        tg_attn_rows_keys(&g0, 0, k->i0, k->i1 - k->i0, &lo, &hi);
        if (hi <= lo) lo = 0, hi = 1;   /* rows that see nothing: a token product, their weights are 0 */
        vec_span(lo, hi, Tk, &k->k0, &k->k1);
        pairs += (int64_t)(k->i1 - k->i0) * (k->k1 - k->k0);
    }
    if (n > 1 && pairs * 8 > (int64_t)Tq * Tk * 7) {
        n = 1;
        blk[0] = (attn_blk){0, Tq, 0, Tk};
    }
    *out = blk;
    return n;
}

/* The (query, key) pairs the products run, a head */
static int64_t blk_pairs(const attn_rec *r) {
    int64_t pairs = 0;
    for (int q = 0; q < r->nblk; q++) pairs += (int64_t)(r->blk[q].i1 - r->blk[q].i0) * (r->blk[q].k1 - r->blk[q].k0);
    return pairs;
}

typedef struct {
    const attn_rec *r;
    const blk_plans *pl;   /* [nblk] */
    const tg_tensor *q, *k, *v, *hs, *bias, *sinks, *out;
    int need_G, want_hs, v_first, q_first, k_first;
    tg_attn_split split;
    float *dL, *G, *Vt, *Kt, *X;   /* per-thread scratch; X: P̃ (dropout), then the raw scores (softcap) */
    double *dhs, *dsink;           /* per (b, h) */
} bwd_job;

/* rows × cols of x (row stride ld) to 0 */
static void zero_rows(float *x, int rows, int cols, int ld) {
    for (int i = 0; i < rows; i++) memset(x + (int64_t)i * ld, 0, (size_t)cols * sizeof(float));
}

/* Readies a key/value head's grad slice (Tk rows of cols, stride ld) for the
 * blocks' products, when this head writes it first (w); returns the index of
 * the product to run, 0 (β = 0, writes) or 1 (adds). One block writes its key
 * rows [k0, k1) and the rows outside it are set to 0 here: a single block's
 * keys may be a part of Tk (a window: Tq 3, Tk 799, left 16), and the rows no
 * query sees are still part of the slice marked written. Several blocks
 * overlap in keys: the slice is zeroed and every block adds. */
static int ready_slice(float *x, int w, int nb, const attn_blk *bk, int Tk, int cols, int ld) {
    if (!w) return 1;
    if (nb > 1) {
        zero_rows(x, Tk, cols, ld);
        return 1;
    }
    zero_rows(x, bk[0].k0, cols, ld);
    zero_rows(x + (int64_t)bk[0].k1 * ld, Tk - bk[0].k1, cols, ld);
    return 0;
}

/* Query head h of batch row b: dV and dK of its key/value head written (first)
 * or added to; dQ of its own; its bias rows and sink. Returns its Σ dy ⊙ Q Kᵀ
 * for the head-scale grad. Kt, Vt: the key/value head's, when the plans need them. */
TG_VEC_CLONES static double backward_head(const bwd_job *j, int b, int h, int first, float *dL, float *G,
                                          const float *Vt, const float *Kt, float *X) {
    const attn_rec *r = j->r;
    const tg_attn_geom *g = &r->g;
    const blk_plans *pl = j->pl;
    const attn_blk *bk = r->blk;
    const int nb = r->nblk, Tq = g->Tq, Tk = g->Tk, d = g->d, kh = h / g->group;
    const int ldq = g->H * d, ldk = g->Hkv * d, ldo = g->H * g->dv, ldv = g->Hkv * g->dv;
    const int64_t oq = off(b, Tq, g->H, h, d), ok = off(b, Tk, g->Hkv, kh, d);
    const int64_t oo = off(b, Tq, g->H, h, g->dv), ov = off(b, Tk, g->Hkv, kh, g->dv);
    const float *Q = j->q->data + oq, *K = j->k->data + ok, *dO = j->out->grad + oo;
    const float *P = r->P + ((int64_t)b * g->H + h) * Tq * Tk;
    const float *ps = r->psink ? r->psink + ((int64_t)b * g->H + h) * Tq : NULL;
    const float s = head_mult(r, j->hs, h);
    double dhs = 0, dsink = 0;
    j->dsink[b * g->H + h] = 0;

    /* O = P̃ V  =>  dV += P̃ᵀ dO */
    if (j->v->grad) {
        const float *Pd = P;
        if (g->dropout > 0) {
            for (int i = 0; i < Tq; i++) {
                int lo, hi;
                tg_attn_span(g, b, i, &lo, &hi);
                dropped_row(g, b, h, i, P + (int64_t)i * Tk, X + (int64_t)i * Tk, lo, hi);
            }
            Pd = X;
        }
        float *dV = j->v->grad + ov;
        const int add = ready_slice(dV, first && j->v_first, nb, bk, Tk, g->dv, ldv);
        for (int q = 0; q < nb; q++)
            tg_gemm_run(&pl[q].dV[add], Pd + (int64_t)bk[q].i0 * Tk + bk[q].k0, dO + (int64_t)bk[q].i0 * ldo,
                        dV + (int64_t)bk[q].k0 * ldv);
    }
    if (!j->need_G && !j->k->grad && !(j->bias && j->bias->grad) && !(j->sinks && j->sinks->grad)) return 0;

    /* O = P̃ V  =>  dP = dO Vᵀ ⊙ keep/(1 − p), on Vt (K and V are transposed first, above) */
    for (int q = 0; q < nb; q++)
        tg_gemm_run(&pl[q].dP, dO + (int64_t)bk[q].i0 * ldo, Vt + bk[q].k0,
                    dL + (int64_t)bk[q].i0 * Tk + bk[q].k0);
    /* the raw scores again, for the softcap's derivative (the forward's product) */
    for (int q = 0; q < nb && g->softcap > 0; q++)
        tg_gemm_run(&pl[q].S, Q + (int64_t)bk[q].i0 * ldq, Kt + bk[q].k0,
                    X + (int64_t)bk[q].i0 * Tk + bk[q].k0);
    /* P = softmax(x)  =>  dx = P ⊙ (dP − D), D = <dP, P> per row, 0 where invisible.
     * Without sinks each row of dx sums to 0 exactly, but not in float32; the
     * head-scale grad Σ dx ⊙ QKᵀ would multiply that leftover by the row's
     * (large, in a saturated head) raw logits. So it sums dx ⊙ (QKᵀ − m_i)
     * instead, m_i the raw logit of the row's top weight: the same in exact
     * arithmetic, as flash_attention.c does. centre = Σ_i m_i · (Σ_j dx_ij − its
     * exact value), which a sink makes D_i·P_sink,i; a softcap multiplies dx by
     * its derivative, after which no row sum is known: no centring then. */
    double centre = 0;
    for (int i = 0; i < Tq; i++) {
        const float *p = P + (int64_t)i * Tk;
        float *gr = dL + (int64_t)i * Tk;
        int lo, hi;
        tg_attn_span(g, b, i, &lo, &hi);
        if (g->dropout > 0)
            for (int c = lo; c < hi; c++) gr[c] = tg_attn_keep(g, b, h, i, c) ? gr[c] * g->drop_scale : 0.0f;
        int alo, ahi;   /* whole vectors, the entries outside the span selected away (vec_span) */
        vec_span(lo, hi, Tk, &alo, &ahi);
#pragma omp simd
        for (int c = alo; c < ahi; c++) gr[c] = tg_select(c >= lo && c < hi, gr[c], 0.0f);   /* p is 0 there */
        const float fdot = (float)tg_row_dot_d(gr + alo, p + alo, ahi - alo);
#pragma omp simd
        for (int c = alo; c < ahi; c++) gr[c] = tg_select(c >= lo && c < hi, p[c] * (gr[c] - fdot), 0.0f);
        if (alo > 0) memset(gr, 0, (size_t)alo * sizeof(float));
        if (ahi < Tk) memset(gr + ahi, 0, (size_t)(Tk - ahi) * sizeof(float));
        if (ps) dsink -= (double)ps[i] * fdot;   /* P_sink = e^sink/Z  =>  d sink = −P_sink · D */
        if (j->bias && j->bias->grad && hi > lo) {   /* x += bias  =>  d bias = dx */
            float *gb = j->bias->grad + (tg_attn_bias_row(g, b, h, i) - g->bias);
            for (int c = lo; c < hi; c++) gb[c] += gr[c];
        }
        if (g->softcap > 0) {   /* x = cap·tanh(y/cap)  =>  dy = dx ⊙ (1 − (x/cap)²) */
            const float *sc = X + (int64_t)i * Tk;
            for (int c = lo; c < hi; c++) gr[c] *= tg_attn_cap_grad(g, g->softcap * tanhf(sc[c] * s / g->softcap));
        } else if (j->want_hs && hi > lo) {   /* want_hs implies need_G */
            double rs = 0, m = 0;
            int top = lo;
            for (int c = lo; c < hi; c++) {
                rs += gr[c];
                if (p[c] > p[top]) top = c;
            }
            const float *qi = Q + (int64_t)i * ldq, *kt = K + (int64_t)top * ldk;
            for (int c = 0; c < d; c++) m += (double)qi[c] * kt[c];
            centre += m * (rs - (ps ? (double)fdot * ps[i] : 0.0));
        }
    }
    j->dsink[b * g->H + h] = dsink;
    /* y = s · Q Kᵀ  =>  dQ = s · dy K,  ds = Σ dy ⊙ Q Kᵀ = Σ Q ⊙ (dy K).
     * G = dy K serves both, so the head-scale grad never divides by s. */
    if (j->need_G) {
        for (int q = 0; q < nb; q++)
            tg_gemm_run(&pl[q].G, dL + (int64_t)bk[q].i0 * Tk + bk[q].k0, K + (int64_t)bk[q].k0 * ldk,
                        G + (int64_t)bk[q].i0 * d);
        float *dQ = j->q->grad ? j->q->grad + oq : NULL;
        for (int i = 0; i < Tq; i++) {
            const float *gi = G + (int64_t)i * d, *qi = Q + (int64_t)i * ldq;
            float *dq = dQ ? dQ + (int64_t)i * ldq : NULL;
            if (dq && j->q_first) {
#pragma omp simd
                for (int c = 0; c < d; c++) dq[c] = s * gi[c];
            } else if (dq) {
#pragma omp simd
                for (int c = 0; c < d; c++) dq[c] += s * gi[c];
            }
            if (j->want_hs)
                for (int c = 0; c < d; c++) dhs += (double)qi[c] * gi[c];
        }
    }
    /* y = s · Q Kᵀ  =>  dK += (s · dy)ᵀ Q */
    if (j->k->grad) {
#pragma omp simd
        for (int64_t i = 0; i < (int64_t)Tq * Tk; i++) dL[i] *= s;
        float *dK = j->k->grad + ok;
        const int add = ready_slice(dK, first && j->k_first, nb, bk, Tk, d, ldk);
        for (int q = 0; q < nb; q++)
            tg_gemm_run(&pl[q].dK[add], dL + (int64_t)bk[q].i0 * Tk + bk[q].k0, Q + (int64_t)bk[q].i0 * ldq,
                        dK + (int64_t)bk[q].k0 * ldk);
    }
    return dhs - centre;
}

/* An item of the split (tg_attn_bwd_split): its batch rows and key/value heads,
 * each with the query heads that read it, in order: one thread owns every
 * slice they write. */
static void backward_item(void *arg, int item, int t) {
    const bwd_job *j = arg;
    const tg_attn_geom *g = &j->r->g;
    const int Tq = g->Tq, Tk = g->Tk, nh = j->split.by_h ? g->Hkv : 1;
    const int b0 = j->split.by_b ? item / nh : 0, b1 = j->split.by_b ? b0 + 1 : g->B;
    const int k0 = j->split.by_h ? item % nh : 0, k1 = j->split.by_h ? k0 + 1 : g->Hkv;
    float *dL = j->dL + (int64_t)t * Tq * Tk, *G = j->G ? j->G + (int64_t)t * Tq * g->d : NULL;
    float *Vt = j->Vt + (int64_t)t * g->dv * Tk, *Kt = j->Kt ? j->Kt + (int64_t)t * g->d * Tk : NULL;
    float *X = j->X ? j->X + (int64_t)t * Tq * Tk : NULL;
    for (int b = b0; b < b1; b++)
        for (int kh = k0; kh < k1; kh++) {
            tg_transpose(j->v->data + off(b, Tk, g->Hkv, kh, g->dv), g->Hkv * g->dv, Tk, g->dv, Vt);
            if (Kt) tg_transpose(j->k->data + off(b, Tk, g->Hkv, kh, g->d), g->Hkv * g->d, Tk, g->d, Kt);
            for (int a = 0; a < g->group; a++) {
                const int h = kh * g->group + a;
                j->dhs[b * g->H + h] = backward_head(j, b, h, a == 0, dL, G, Vt, Kt, X);
            }
        }
}

static void attention_backward(tg_ctx *ctx, const tg_node *n) {
    const attn_rec *r = n->saved;
    const tg_attn_geom *g = &r->g;
    tg_tensor *q = n->in[TG_ATTN_IN_Q], *k = n->in[TG_ATTN_IN_K], *v = n->in[TG_ATTN_IN_V], *out = n->out;
    tg_tensor *hs = n->in[TG_ATTN_IN_HS], *bias = n->in[TG_ATTN_IN_BIAS], *sinks = n->in[TG_ATTN_IN_SINKS];
    const int B = g->B, Tq = g->Tq, Tk = g->Tk, H = g->H, d = g->d, dv = g->dv;
    const int ldq = H * d, ldk = g->Hkv * d, ldo = H * dv, ldv = g->Hkv * dv;
    const int need_G = q->grad || (hs && hs->grad);
    /* per-thread scratch; per-(b,h) head-scale and sink sums, added over b in order below */
    const int nt = tg_threads();
    float *dL = tg_arena_alloc(ctx, (size_t)nt * Tq * Tk * sizeof(float));
    float *G = need_G ? tg_arena_alloc(ctx, (size_t)nt * Tq * d * sizeof(float)) : NULL;
    float *Vt = tg_arena_alloc(ctx, (size_t)nt * dv * Tk * sizeof(float));
    const int need_X = g->dropout > 0 || g->softcap > 0;
    float *X = need_X ? tg_arena_alloc(ctx, (size_t)nt * Tq * Tk * sizeof(float)) : NULL;
    double *dhs = tg_arena_alloc(ctx, (size_t)B * H * sizeof(double));
    double *dsink = tg_arena_alloc(ctx, (size_t)B * H * sizeof(double));
    blk_plans *pl = tg_arena_alloc(ctx, (size_t)r->nblk * sizeof *pl);
    for (int q = 0; q < r->nblk; q++) {
        const int nq = r->blk[q].i1 - r->blk[q].i0, kn = r->blk[q].k1 - r->blk[q].k0;
        for (int add = 0; add < 2; add++) {
            if (v->grad) tg_gemm_call_init(&pl[q].dV[add], 1, 0, kn, dv, nq, 1.0f, Tk, ldo, add ? 1.0f : 0.0f, ldv);
            if (k->grad) tg_gemm_call_init(&pl[q].dK[add], 1, 0, kn, d, nq, 1.0f, Tk, ldq, add ? 1.0f : 0.0f, ldk);
        }
        tg_gemm_call_init(&pl[q].dP, 0, 0, nq, kn, dv, 1.0f, ldo, Tk, 0.0f, Tk);
        if (g->softcap > 0)   /* the forward's S = Q Kᵀ, for the softcap's derivative */
            tg_gemm_call_init(&pl[q].S, 0, 0, nq, kn, d, 1.0f, ldq, Tk, 0.0f, Tk);
        tg_gemm_call_init(&pl[q].G, 0, 0, nq, d, kn, 1.0f, Tk, ldk, 0.0f, d);
    }
    float *Kt = g->softcap > 0 ? tg_arena_alloc(ctx, (size_t)nt * d * Tk * sizeof(float)) : NULL;
    /* grads nothing wrote yet are written (beta 0), not zeroed and added to. The
     * flags are taken in the order a thread writes (dV, dQ, dK): when q, k, v are
     * one tensor only the first write may overwrite. */
    bwd_job job = {r, pl, q, k, v, hs, bias, sinks, out, need_G, hs && hs->grad, 0, 0, 0,
                   tg_attn_bwd_split(g, bias && bias->grad), dL, G, Vt, Kt, X, dhs, dsink};
    job.v_first = v->grad && tg_grad_first(v);
    job.q_first = q->grad && tg_grad_first(q);
    job.k_first = k->grad && tg_grad_first(k);
    if (hs && hs->grad) tg_grad_acc(hs);
    if (bias && bias->grad) tg_grad_acc(bias);
    if (sinks && sinks->grad) tg_grad_acc(sinks);
    int blas = tg_blas_serial_begin();
    tg_parallel_for(job.split.items, (int64_t)B * H * Tq * Tk * (2 * d + 2 * dv), backward_item, &job);
    tg_blas_serial_end(blas);
    /* s = scale · head_scale[h]  =>  d head_scale[h] = scale · ds; the sinks' sums, over b in order */
    for (int h = 0; h < H; h++) {
        double sum = 0, sk = 0;
        for (int b = 0; b < B; b++) sum += dhs[b * H + h], sk += dsink[b * H + h];
        if (hs && hs->grad) hs->grad[h] += (float)(g->scale * sum);
        if (sinks && sinks->grad) sinks->grad[h] += (float)sk;
    }
}

typedef struct {
    const attn_rec *r;
    const blk_plans *pl;   /* [nblk]: S = Q Kᵀ, O = P V */
    const tg_tensor *q, *k, *v, *hs, *out;
    int want_stats;
    tg_attn_part *parts;   /* per (b, h) */
    const float *Kt;       /* Kᵀ per (b, kv head) (tg_attn_kt) */
    float *Pd;             /* dropout: per-thread P̃ [Tq, Tk] */
} fwd_job;

TG_VEC_CLONES static void forward_item(void *arg, int bh, int thread) {
    const fwd_job *j = arg;
    const attn_rec *r = j->r;
    const tg_attn_geom *g = &r->g;
    const int Tq = g->Tq, Tk = g->Tk, H = g->H, d = g->d, dv = g->dv, b = bh / H, h = bh % H, kh = h / g->group;
    const float s = head_mult(r, j->hs, h);
    tg_attn_part part = {0, -INFINITY, 0, 0};
    const float *Q = j->q->data + off(b, Tq, H, h, d);
    const float *V = j->v->data + off(b, Tk, g->Hkv, kh, dv);
    float *P = r->P + (int64_t)bh * Tq * Tk, *O = j->out->data + off(b, Tq, H, h, dv);
    float *ps = r->psink ? r->psink + (int64_t)bh * Tq : NULL;

    /* scores Q Kᵀ of each block's keys, then logits on each row's visible span (softmax_row
     * reads within the block's keys: the rest of the row is written 0, never read) */
    const attn_blk *bk = r->blk;
    const int ldq = H * d, ldo = H * dv, ldv = g->Hkv * dv;
    const float *Kt = j->Kt + ((int64_t)b * g->Hkv + kh) * d * Tk;
    for (int q = 0; q < r->nblk; q++)
        tg_gemm_run(&j->pl[q].S, Q + (int64_t)bk[q].i0 * ldq, Kt + bk[q].k0,
                    P + (int64_t)bk[q].i0 * Tk + bk[q].k0);
    for (int i = 0; i < Tq; i++) {
        float *p = P + (int64_t)i * Tk, psink;
        int lo, hi;
        tg_attn_span(g, b, i, &lo, &hi);
        float m = softmax_row(p, lo, hi, Tk, s, g, b, h, i, &psink);
        if (ps) ps[i] = psink;
        if (!j->want_stats || m == -INFINITY) continue;   /* rows that see a key (with a finite logit) */
        part.max_logit = m > part.max_logit ? m : part.max_logit;
        float pmax = 0;
        for (int c = lo; c < hi; c++) {
            if (p[c] > 0) part.entropy -= (double)p[c] * log((double)p[c]);   /* 0 ln 0 = 0 */
            pmax = p[c] > pmax ? p[c] : pmax;
        }
        part.saturated += pmax > 0.99f;
        part.rows++;
    }
    /* O = P̃ V (a row with no visible key is all 0, and so is its output) */
    const float *Pd = P;
    if (g->dropout > 0) {
        float *x = j->Pd + (int64_t)thread * Tq * Tk;
        for (int i = 0; i < Tq; i++) {
            int lo, hi;
            tg_attn_span(g, b, i, &lo, &hi);
            dropped_row(g, b, h, i, P + (int64_t)i * Tk, x + (int64_t)i * Tk, lo, hi);
        }
        Pd = x;
    }
    for (int q = 0; q < r->nblk; q++)
        tg_gemm_run(&j->pl[q].O, Pd + (int64_t)bk[q].i0 * Tk + bk[q].k0, V + (int64_t)bk[q].k0 * ldv,
                    O + (int64_t)bk[q].i0 * ldo);
    j->parts[bh] = part;
}

tg_tensor *tg_attend(tg_ctx *ctx, const tg_attn_args *args) {
    tg_attn_args a;
    attn_rec r;
    tg_attn_read(ctx, "tg_attention", args, &a, &r.g);
    const tg_attn_geom *g = &r.g;
    const int B = g->B, Tq = g->Tq, Tk = g->Tk, H = g->H, d = g->d, dv = g->dv;
    /* P is the forward's scratch for the logits and what backward needs: always made */
    r.P = tg_arena_alloc(ctx, (size_t)B * H * Tq * Tk * sizeof(float));
    r.psink = g->sinks ? tg_arena_alloc(ctx, (size_t)B * H * Tq * sizeof(float)) : NULL;
    tg_tensor *out = tg_new(ctx, 4, (int[]){B, Tq, H, dv});
    tg_attn_part *parts = tg_arena_alloc(ctx, (size_t)B * H * sizeof *parts);
    r.nblk = query_blocks(ctx, g, &r.blk);
    blk_plans *pl = tg_arena_alloc(ctx, (size_t)r.nblk * sizeof *pl);
    for (int q = 0; q < r.nblk; q++) {
        const int nq = r.blk[q].i1 - r.blk[q].i0, kn = r.blk[q].k1 - r.blk[q].k0;
        tg_gemm_call_init(&pl[q].S, 0, 0, nq, kn, d, 1.0f, H * d, Tk, 0.0f, Tk);
        tg_gemm_call_init(&pl[q].O, 0, 0, nq, dv, kn, 1.0f, Tk, g->Hkv * dv, 0.0f, H * dv);
    }
    const float *Kt = tg_attn_kt(ctx, g, a.k->data);
    float *Pd = g->dropout > 0 ? tg_arena_alloc(ctx, (size_t)tg_threads() * Tq * Tk * sizeof(float)) : NULL;
    fwd_job job = {&r, pl, a.q, a.k, a.v, a.head_scale, out, a.stats != NULL, parts, Kt, Pd};
    int blas = tg_blas_serial_begin();
    tg_parallel_for(B * H, (int64_t)B * H * Tq * Tk * (d + dv), forward_item, &job);
    tg_blas_serial_end(blas);
    tg_attn_stats_fill(a.stats, parts, B, H);

    tg_tensor *in[TG_ATTN_N_IN] = {a.q, a.k, a.v, a.head_scale, a.bias, a.sinks};
    tg_node *n = tg_record(ctx, "tg_attention", attention_backward, out, TG_ATTN_N_IN, in, sizeof r);
    if (n) {
        *(attn_rec *)n->saved = r;
        n->own_grads = 1;
        /* S = QKᵀ, O = PV; back: dV = PᵀdO, dP = dO Vᵀ, dQ = G K, dK = Gᵀ Q; over the
         * pairs the blocks' products run (not the T² the row loops span) */
        double pairs = 2.0 * B * H * (double)blk_pairs(&r);
        int dS = a.q->requires_grad || a.k->requires_grad || (a.head_scale && a.head_scale->requires_grad);
        n->flops[0] = pairs * (d + dv);
        n->flops[1] = pairs * (dv * (a.v->requires_grad + dS) + d * (a.q->requires_grad + a.k->requires_grad));
    }
    return out;
}

tg_tensor *tg_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale,
                        float scale, int causal, tg_attn_stats *stats) {
    tg_attn_args a = tg_attn_args_make(q, k, v, scale);
    a.head_scale = head_scale, a.causal = causal, a.stats = stats;
    return tg_attend(ctx, &a);
}

const float *tg_attention_probs(const tg_ctx *ctx, const tg_tensor *out) {
    for (int i = ctx->n_nodes - 1; i >= 0; i--) {
        const tg_node *n = &ctx->nodes[i];
        if (n->out == out && n->backward == attention_backward) return ((const attn_rec *)n->saved)->P;
    }
    return NULL;
}
