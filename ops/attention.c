#define _POSIX_C_SOURCE 200809L   /* sysconf */
#include "attention.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "attn_geom.h"
#include "attn_tile.h"
#include "tg_precision.h"
#include "parallel.h"

/* The weights are kept key-major, PT [B, H, Tk, ld]: a row of PT is a key, its
 * lanes the queries (ld: Tq rounded up to an odd multiple of 16; the lanes of the
 * last tile past Tq hold 0, the rest are never touched), so the softmax of a tile
 * of 16 queries runs across them, a vector per key (attn_tile.h), and both passes
 * read PT in place. Every product runs on attn_tile.h's register-blocked gemm,
 * on a tile's keys only:
 *   forward, per query tile (or pair):  Sᵀ = K Qᵀ into PT, softmax, O = P̃ V;
 *   backward, per query tile (or pair): dPᵀ = V dOᵀ, dSᵀ = Pᵀ ⊙ (dPᵀ − D), dQ = s·dS K;
 *   per 16 keys, over the query rows that see them: dV = P̃ᵀ dO, dK = s·dSᵀ Q.
 * No library is called per tile: a 16×nk product is too small for a call to pay
 * (docs/speed.md#the-attention-tiles). When a pass's operands outgrow the cache
 * (big_pass), each head asks for the next head's rows a few at a time, its
 * products cut into chunks to let it (pf_gemm): the same arithmetic, so the
 * same bits. */

/* Query rows [i0, i1) (at most TG_TILE_Q) and the keys [k0, k1) any of them may
 * see (whole 16-float vectors within Tk, as vec_span). */
typedef struct { int i0, i1, k0, k1; } attn_blk;
/* Keys [k0, k1) and the query rows [q0, q1) that may see any of them. */
typedef struct { int k0, k1, q0, q1; } key_blk;

typedef struct {
    tg_attn_geom g;
    int ld;          /* PT's row stride: Tq rounded up to TG_TILE_Q, an odd multiple of it */
    float *PT;       /* [B, H, Tk, ld] weights before dropout, key-major, 0 where invisible (arena) */
    float *P;        /* [B, H, Tq, Tk] row-major: made on tg_attention_probs's first call, else NULL */
    float *psink;    /* sinks only: [B, H, Tq] the sink's weight of each row */
    int nblk, nkb;
    attn_blk *blk;   /* [nblk] query tiles (arena) */
    key_blk *kb;     /* [nkb] key tiles (arena) */
    int64_t qpairs, kpairs;   /* the pairs a head's products run: blk_pairs, kb_pairs */
    int *span;       /* without padding: [nblk][2][16] each query tile's lanes' lo, then hi (arena); else NULL */
    int pf_fwd, pf_bwd;   /* 1: each head asks for the next one's rows (a pass over big_pass bytes) */
    const float *qd, *kd, *vd;   /* q, k, v as the products read them: rounded to g.prec (arena), or their data */
} attn_rec;

/* The logit multiplier of head h: the op's scale times the head's own. */
static float head_mult(const attn_rec *r, const tg_tensor *head_scale, int h) {
    return r->g.scale * (head_scale ? head_scale->data[h] : 1.0f);
}

/* The span [lo, hi) widened to whole 16-float vectors, within [0, T). */
static inline void vec_span(int lo, int hi, int T, int *alo, int *ahi) {
    *alo = lo & ~15;
    *ahi = hi + 15 < T ? (hi + 15) & ~15 : T;
}

/* Offsets of batch row b's head h in q/out (H heads) and kh in k/v (Hkv heads). */
static int64_t off(int b, int T, int heads, int h, int width) { return ((int64_t)b * T * heads + h) * width; }

/* The query tiles of a call and their keys: causal or windowed rows see a
 * part of the keys, and a tile's products run on its keys only (causal, at
 * T 32 that is 3/4 of the square, at T 256 17/32). The spans ignore padding
 * (kv_len, per batch row): a tile's keys are a superset of what any batch
 * row sees. Every key when the tiles would save under an eighth. */
static int query_blocks(tg_ctx *ctx, const tg_attn_geom *g, attn_blk **out) {
    const int Tq = g->Tq, Tk = g->Tk, n = (Tq + TG_TILE_Q - 1) / TG_TILE_Q;
    attn_blk *blk = tg_arena_alloc(ctx, (size_t)n * sizeof *blk);
    tg_attn_geom g0 = *g;
    g0.kv_len = NULL;
    int64_t pairs = 0;
    for (int q = 0; q < n; q++) {
        attn_blk *k = &blk[q];
        k->i0 = q * TG_TILE_Q, k->i1 = k->i0 + TG_TILE_Q < Tq ? k->i0 + TG_TILE_Q : Tq;
        int lo, hi;
        tg_attn_rows_keys(&g0, 0, k->i0, k->i1 - k->i0, &lo, &hi);
        if (hi <= lo) lo = 0, hi = 1;   /* rows that see nothing: a token product, their weights are 0 */
        vec_span(lo, hi, Tk, &k->k0, &k->k1);
        pairs += (int64_t)(k->i1 - k->i0) * (k->k1 - k->k0);
    }
    if (pairs * 8 > (int64_t)Tq * Tk * 7)
        for (int q = 0; q < n; q++) blk[q].k0 = 0, blk[q].k1 = Tk;
    *out = blk;
    return n;
}

/* The key tiles: for each TG_TILE_Q keys, the query rows whose spans meet them
 * (none: q0 = q1, the product writes 0). Without padding both ends of a span
 * rise with the row, so the rows with hi > k0 and lo < k1 are one run, found
 * by two cursors in one pass (a row in it whose span is empty has weight 0). */
static int key_blocks(tg_ctx *ctx, const tg_attn_geom *g, key_blk **out) {
    const int Tq = g->Tq, Tk = g->Tk, n = (Tk + TG_TILE_Q - 1) / TG_TILE_Q;
    key_blk *kb = tg_arena_alloc(ctx, (size_t)n * sizeof *kb);
    tg_attn_geom g0 = *g;
    g0.kv_len = NULL;
    int a = 0, b = 0, lo, hi;
    for (int q = 0; q < n; q++) {
        key_blk *k = &kb[q];
        k->k0 = q * TG_TILE_Q, k->k1 = k->k0 + TG_TILE_Q < Tk ? k->k0 + TG_TILE_Q : Tk;
        for (; a < Tq; a++) {   /* the first row whose span ends past k0 */
            tg_attn_span(&g0, 0, a, &lo, &hi);
            if (hi > k->k0) break;
        }
        for (; b < Tq; b++) {   /* past the last row whose span starts before k1 */
            tg_attn_span(&g0, 0, b, &lo, &hi);
            if (lo >= k->k1) break;
        }
        k->q0 = b > a ? a : 0, k->q1 = b > a ? b : 0;
    }
    *out = kb;
    return n;
}

/* The (query, key) pairs the products run, a head: per query tile, per key tile */
static int64_t blk_pairs(const attn_rec *r) {
    int64_t pairs = 0;
    for (int q = 0; q < r->nblk; q++) pairs += (int64_t)(r->blk[q].i1 - r->blk[q].i0) * (r->blk[q].k1 - r->blk[q].k0);
    return pairs;
}
static int64_t kb_pairs(const attn_rec *r) {
    int64_t pairs = 0;
    for (int q = 0; q < r->nkb; q++) pairs += (int64_t)(r->kb[q].k1 - r->kb[q].k0) * (r->kb[q].q1 - r->kb[q].q0);
    return pairs;
}

/* Two query tiles at a time, over the keys either sees: the products Sᵀ = K Qᵀ
 * and dPᵀ = V dOᵀ then have 32 columns, not 16, and load a float of K or V for
 * two FMAs, not one (experiments/bench_blocks on a Zen 5: 8×2 vectors at 98% of
 * the FMA peak, 16×1 at 77-91%). A tile's keys past its own are masked to weight 0
 * by its spans; they are computed, not counted (blk_pairs), and tiles pair only
 * when those are at most a quarter of their own (at T 32, causal, 16 of 48: the
 * two tiles run apart). */
typedef struct { int a0, nt, k0, k1; const attn_blk *t[2]; } tile_pair;
static tile_pair pair_at(const attn_rec *r, int q) {
    tile_pair p = {r->blk[q].i0, 1, r->blk[q].k0, r->blk[q].k1, {&r->blk[q], NULL}};
    if (q + 1 < r->nblk) {
        const attn_blk *a = &r->blk[q], *b = &r->blk[q + 1];
        const int k0 = a->k0 < b->k0 ? a->k0 : b->k0, k1 = a->k1 > b->k1 ? a->k1 : b->k1;
        const int64_t own = (int64_t)(a->k1 - a->k0) + (b->k1 - b->k0), extra = 2 * (int64_t)(k1 - k0) - own;
        if (extra * 4 <= own) p = (tile_pair){a->i0, 2, k0, k1, {a, b}};
    }
    return p;
}

/* A pair's lanes of the keys outside [k0, k1) to 0 (X key-major, rows ld apart).
 * A tile's lanes are 64 bytes: a memset of that constant size is a few stores,
 * where a call per key (its size known only at run time) was 6% of the op at
 * T 32 (perf, AMD EPYC Zen 5). */
static inline void zero_lanes(float *x, int nt) {
    memset(x, 0, TG_TILE_Q * sizeof(float));
    if (nt == 2) memset(x + TG_TILE_Q, 0, TG_TILE_Q * sizeof(float));
}
static void zero_keys(float *X, int64_t ld, const tile_pair *tp, int Tk) {
    for (int k = 0; k < tp->k0; k++) zero_lanes(X + k * ld + tp->a0, tp->nt);
    for (int k = tp->k1; k < Tk; k++) zero_lanes(X + k * ld + tp->a0, tp->nt);
}

/* X [rows, T] strided ldx → Y [cols, ld] with the lanes T..ld of each row 0:
 * the tiles from the one T falls in zeroed first (constant-size memsets, as
 * zero_lanes), then the transpose writes lanes 0..T */
static void transpose_pad(const tg_tile_ops *t, const float *X, int64_t ldx, int T, int cols, float *Y, int ld) {
    for (int c = 0; c < cols; c++)
        for (int x = T / TG_TILE_Q * TG_TILE_Q; x < ld; x += TG_TILE_Q) zero_lanes(Y + (int64_t)c * ld + x, 1);
    t->transpose(X, ldx, T, cols, Y, ld);
}

/* The next head's rows, asked for into the cache while this head computes:
 * all at once, they evict what this head is using. Each product is owed
 * lines in proportion to its flops (rate) and runs in chunks of a tile's rows
 * and three vectors of columns, each after its share of the lines: the misses
 * then overlap the FMAs. (A few hundred lines between two whole products, as
 * before, stalled the FMAs behind them: the op ran 12-20% slower at seed's
 * shape, B 32; two lines a k step inside the tiles' kernel cost its branch
 * 6-12% in cache. docs/speed.md, the attention tiles, "In chunks".) */
typedef struct {
    const float *p[8];
    int64_t ld[8];
    int rows[8], width[8], write[8], n;
    int e, row;         /* the cursor: entry, row */
    double rate, owed;  /* lines a flop of the products; lines owed (below 0: asked for ahead) */
} pf_list;

/* An empty list: its counters only (a whole-struct zeroing, 256 bytes by rep stos,
 * was a tenth of forward_item's own time at T 32, perf, AMD EPYC Zen 4) */
static inline void pf_init(pf_list *l) { l->n = l->e = l->row = 0, l->rate = l->owed = 0; }

static void pf_add(pf_list *l, const float *p, int rows, int64_t ld, int width, int write) {
    l->p[l->n] = p, l->rows[l->n] = rows, l->ld[l->n] = ld, l->width[l->n] = width, l->write[l->n] = write;
    l->n++;
}

/* Head bh's rows of x [B, T, heads of width]: of the query heads (kv 0, H of them)
 * or of the key/value head it reads (kv 1, Hkv) */
static void pf_head(pf_list *l, const tg_attn_geom *g, const float *x, int bh, int kv, int width, int write) {
    const int b = bh / g->H, h = bh % g->H, T = kv ? g->Tk : g->Tq, heads = kv ? g->Hkv : g->H;
    pf_add(l, x + off(b, T, heads, kv ? h / g->group : h, width), T, (int64_t)heads * width, width, write);
}

/* The list's lines, spread over `flops` of products */
static void pf_spread(pf_list *l, double flops) {
    int64_t n = 0;
    for (int e = 0; e < l->n; e++) n += (int64_t)l->rows[e] * ((l->width[e] + 15) / 16);
    l->rate = flops > 0 ? (double)n / flops : 0;
}

/* Returns the lines asked for: whole rows, so up to a row more than `lines` */
static int64_t pf_some(pf_list *l, int64_t lines) {
    int64_t done = 0;
    while (lines > 0 && l->e < l->n) {   /* a row at a time */
        const int e = l->e, w = l->width[e];
        const float *x = l->p[e] + l->row * l->ld[e];
        if (l->write[e])
            for (int c = 0; c < w; c += 16) __builtin_prefetch(x + c, 1, 2);
        else
            for (int c = 0; c < w; c += 16) __builtin_prefetch(x + c, 0, 2);
        lines -= (w + 15) / 16, done += (w + 15) / 16;
        if (++l->row == l->rows[e]) l->row = 0, l->e++;
    }
    return done;
}

/* C = α·A B (or +=) by the tiles' gemm; with lines left to ask for, in chunks,
 * each after the lines its flops are owed. Every entry of C is the same chain
 * of FMAs however the product is cut: the same bits. */
static void pf_gemm(const tg_tile_ops *t, pf_list *l, int M, int N, int K, float alpha, const float *A, int64_t ars,
                    int64_t acs, const float *B, int64_t ldb, float *C, int64_t ldc, int add) {
    enum { MC = TG_TILE_Q, NC = 48 };
    if (l->e >= l->n) {
        t->gemm(M, N, K, alpha, A, ars, acs, B, ldb, C, ldc, add);
        return;
    }
    for (int m0 = 0; m0 < M; m0 += MC)
        for (int n0 = 0; n0 < N; n0 += NC) {
            const int mc = M - m0 < MC ? M - m0 : MC, nc = N - n0 < NC ? N - n0 : NC;
            l->owed += 2.0 * mc * nc * K * l->rate;
            l->owed -= (double)pf_some(l, (int64_t)l->owed);
            t->gemm(mc, nc, K, alpha, A + m0 * ars, ars, acs, B + n0, ldb, C + m0 * ldc + n0, ldc, add);
        }
}

/* ---- backward ------------------------------------------------------------------------- */

/* Per-thread scratch: dOᵀ [dv, ld]; dSᵀ [Tk, ld]; with dropout P̃ᵀ [Tk, ld];
 * with a softcap the raw scores Sᵀ [Tk, ld] and Qᵀ [d, ld]; with a head-scale
 * grad G = dS K [Tq, d]. (Vᵀ and Kᵀ per head, which give the products'
 * broadcasts one pointer for 16 rows, not 16: no faster, measured side by
 * side on a Zen 5 at the three bench_step shapes, and a pass more.) */
typedef struct { float *dOT, *DS, *PD, *SC, *QT, *G; } bwd_scratch;

typedef struct {
    const attn_rec *r;
    const tg_tile_ops *tile;
    const tg_tensor *q, *k, *v, *hs, *bias, *sinks, *out;
    int need_G, want_hs, v_first, q_first, k_first;
    tg_attn_split split;
    bwd_scratch *ws;
    double *dhs, *dsink;   /* per (b, h) */
} bwd_job;

/* What a cap, bias, sink or head-scale grad adds to a tile's row work (per
 * lane, plain loops): d bias, the softcap's derivative, the centring of the
 * head-scale sum (see backward_head), d sink. Returns the tile's centre. */
static double tile_extras(const bwd_job *j, int b, int h, int a0, int nq, int k0, float *DSt, const float *PTt,
                          const float *SCt, const float *D, double *dsink) {
    const attn_rec *r = j->r;
    const tg_attn_geom *g = &r->g;
    const int ld = r->ld, d = g->d, ldq = g->H * d, ldk = g->Hkv * d;
    const float s = head_mult(r, j->hs, h);
    const float *ps = r->psink ? r->psink + ((int64_t)b * g->H + h) * g->Tq : NULL;
    const float *Q = j->q->data + off(b, g->Tq, g->H, h, d), *K = j->k->data + off(b, g->Tk, g->Hkv, h / g->group, d);
    double centre = 0;
    for (int a = 0; a < nq; a++) {
        const int i = a0 + a;
        int lo, hi;
        tg_attn_span(g, b, i, &lo, &hi);
        if (ps) *dsink -= (double)ps[i] * D[a];   /* P_sink = e^sink/Z  =>  d sink = −P_sink · D */
        if (j->bias && j->bias->grad && hi > lo) {   /* x += bias  =>  d bias = dx */
            float *gb = j->bias->grad + (tg_attn_bias_row(g, b, h, i) - g->bias);
            for (int c = lo; c < hi; c++) gb[c] += DSt[(int64_t)(c - k0) * ld + a];
        }
        if (g->softcap > 0) {   /* x = cap·tanh(y/cap)  =>  dy = dx ⊙ (1 − (x/cap)²) */
            for (int c = lo; c < hi; c++)
                DSt[(int64_t)(c - k0) * ld + a] *=
                    tg_attn_cap_grad(g, g->softcap * tanhf(SCt[(int64_t)(c - k0) * ld + a] * s / g->softcap));
        } else if (j->want_hs && hi > lo) {
            double rs = 0, m = 0;
            int top = lo;
            for (int c = lo; c < hi; c++) {
                rs += DSt[(int64_t)(c - k0) * ld + a];
                if (PTt[(int64_t)(c - k0) * ld + a] > PTt[(int64_t)(top - k0) * ld + a]) top = c;
            }
            const float *qi = Q + (int64_t)i * ldq, *kt = K + (int64_t)top * ldk;
            for (int c = 0; c < d; c++) m += (double)qi[c] * kt[c];
            centre += m * (rs - (ps ? (double)D[a] * ps[i] : 0.0));
        }
    }
    return centre;
}

/* dSᵀ of a pair's keys, in place of dPᵀ = V dOᵀ; their other keys 0. Returns
 * the centre of its rows (tile_extras). */
static double pair_ds(const bwd_job *j, int b, int h, const tile_pair *tp, const bwd_scratch *w, const float *PTh,
                      double *dsink, pf_list *pf) {
    const attn_rec *r = j->r;
    const tg_attn_geom *g = &r->g;
    const tg_tile_ops *t = j->tile;
    const int ld = r->ld, Tk = g->Tk, k0 = tp->k0, nk = tp->k1 - tp->k0;
    const int64_t at = (int64_t)k0 * ld + tp->a0;
    float *DSt = w->DS + at, D[TG_TILE_Q];
    zero_keys(w->DS, ld, tp, Tk);
    /* O = P̃ V  =>  dP = dO Vᵀ ⊙ keep/(1 − p) */
    const int kh = h / g->group;
    const float *V = j->v->data + off(b, Tk, g->Hkv, kh, g->dv) + (int64_t)k0 * g->Hkv * g->dv;
    pf_gemm(t, pf, nk, tp->nt * TG_TILE_Q, g->dv, 1.0f, V, g->Hkv * g->dv, 1, w->dOT + tp->a0, ld, DSt, ld, 0);
    const int nq = tp->t[tp->nt - 1]->i1 - tp->a0;
    if (g->dropout > 0)
        for (int c = 0; c < nk; c++)
            for (int a = 0; a < nq; a++) {
                float *x = DSt + (int64_t)c * ld + a;
                *x = tg_attn_keep(g, b, h, tp->a0 + a, k0 + c) ? *x * g->drop_scale : 0.0f;
            }
    if (g->softcap > 0)   /* the raw scores again, for the softcap's derivative */
        pf_gemm(t, pf, nk, tp->nt * TG_TILE_Q, g->d, 1.0f,
                j->k->data + off(b, Tk, g->Hkv, kh, g->d) + (int64_t)k0 * g->Hkv * g->d, g->Hkv * g->d, 1,
                w->QT + tp->a0, ld, w->SC + at, ld, 0);
    double centre = 0;
    for (int u = 0; u < tp->nt; u++) {
        /* P = softmax(x)  =>  dx = P ⊙ (dP − D), D = <dP, P> per row (0 where invisible, as P is) */
        const int64_t o = at + u * TG_TILE_Q;
        t->dsoftmax(w->DS + o, PTh + o, ld, nk, D);
        if (g->extras || g->sinks || j->want_hs || (j->bias && j->bias->grad))
            centre += tile_extras(j, b, h, tp->t[u]->i0, tp->t[u]->i1 - tp->t[u]->i0, k0, w->DS + o, PTh + o,
                                  w->SC + o, D, dsink);
    }
    if (g->prec)   /* dS as the products dQ = s·dS K, dK = s·dSᵀ Q read it (the extras above took it in float32) */
        for (int c = 0; c < nk; c++) tg_round_all(g->prec, DSt + (int64_t)c * ld, tp->nt * TG_TILE_Q);
    return centre;
}

/* Query head h of batch row b: dV and dK of its key/value head written (first)
 * or added to; dQ of its own; its bias rows and sink. Returns its Σ dy ⊙ Q Kᵀ
 * for the head-scale grad.
 * Without sinks each row of dx sums to 0 exactly, but not in float32; the
 * head-scale grad Σ dx ⊙ QKᵀ would multiply that leftover by the row's
 * (large, in a saturated head) raw logits. So it sums dx ⊙ (QKᵀ − m_i)
 * instead, m_i the raw logit of the row's top weight: the same in exact
 * arithmetic, as flash_attention.c does. centre = Σ_i m_i · (Σ_j dx_ij − its
 * exact value), which a sink makes D_i·P_sink,i; a softcap multiplies dx by
 * its derivative, after which no row sum is known: no centring then. */
TG_VEC_CLONES static double backward_head(const bwd_job *j, int b, int h, int first, const bwd_scratch *w,
                                          pf_list *pf) {
    const attn_rec *r = j->r;
    const tg_attn_geom *g = &r->g;
    const tg_tile_ops *t = j->tile;
    const int Tq = g->Tq, Tk = g->Tk, d = g->d, dv = g->dv, kh = h / g->group, ld = r->ld;
    const int ldq = g->H * d, ldk = g->Hkv * d, ldo = g->H * dv, ldv = g->Hkv * dv;
    const int64_t oq = off(b, Tq, g->H, h, d), ok = off(b, Tk, g->Hkv, kh, d);
    const float *Q = j->q->data + oq, *K = j->k->data + ok, *dO = j->out->grad + off(b, Tq, g->H, h, dv);
    const float *PTh = r->PT + ((int64_t)b * g->H + h) * Tk * ld;
    const float s = head_mult(r, j->hs, h);
    double dhs = 0, dsink = 0, centre = 0;
    j->dsink[b * g->H + h] = 0;

    /* O = P̃ V  =>  dV = P̃ᵀ dO, a key tile at a time over the rows that see it */
    if (j->v->grad) {
        const float *Pd = PTh;
        if (g->dropout > 0 || g->prec) {   /* P̃ as the forward's product read it */
            for (int k = 0; k < Tk; k++)
                for (int i = 0; i < Tq; i++) {   /* the key tiles read lanes below Tq */
                    const float p = PTh[(int64_t)k * ld + i];
                    const int keep = p != 0 && (g->dropout <= 0 || tg_attn_keep(g, b, h, i, k));
                    w->PD[(int64_t)k * ld + i] = keep ? (g->dropout > 0 ? p * g->drop_scale : p) : 0.0f;
                }
            for (int k = 0; k < Tk; k++) tg_round_all(g->prec, w->PD + (int64_t)k * ld, Tq);
            Pd = w->PD;
        }
        float *dV = j->v->grad + off(b, Tk, g->Hkv, kh, dv);
        for (int q = 0; q < r->nkb; q++) {
            const key_blk *kb = &r->kb[q];
            pf_gemm(t, pf, kb->k1 - kb->k0, dv, kb->q1 - kb->q0, 1.0f, Pd + (int64_t)kb->k0 * ld + kb->q0, ld, 1,
                    dO + (int64_t)kb->q0 * ldo, ldo, dV + (int64_t)kb->k0 * ldv, ldv, !(first && j->v_first));
        }
    }
    if (!j->need_G && !j->k->grad && !(j->bias && j->bias->grad) && !(j->sinks && j->sinks->grad)) return 0;

    transpose_pad(t, dO, ldo, Tq, dv, w->dOT, ld);
    if (g->softcap > 0) transpose_pad(t, Q, ldq, Tq, d, w->QT, ld);
    float *dQ = j->q->grad ? j->q->grad + oq : NULL;
    for (int q = 0, next = 0; q < r->nblk; q++) {
        const attn_blk *bk = &r->blk[q];
        const int a0 = bk->i0, nq = bk->i1 - a0, nk = bk->k1 - bk->k0;
        if (q == next) {
            const tile_pair tp = pair_at(r, q);
            centre += pair_ds(j, b, h, &tp, w, PTh, &dsink, pf);
            next += tp.nt;
        }
        /* y = s · Q Kᵀ  =>  dQ = s · dy K,  ds = Σ dy ⊙ Q Kᵀ = Σ Q ⊙ (dy K): G = dy K
         * serves both (the head-scale grad never divides by s) */
        const float *A = w->DS + (int64_t)bk->k0 * ld + a0, *Kk = K + (int64_t)bk->k0 * ldk;
        if (j->want_hs) {
            float *G = w->G + (int64_t)a0 * d;
            pf_gemm(t, pf, nq, d, nk, 1.0f, A, 1, ld, Kk, ldk, G, d, 0);
            for (int i = 0; i < nq; i++) {
                const float *gi = G + (int64_t)i * d, *qi = Q + (int64_t)(a0 + i) * ldq;
                float *dq = dQ ? dQ + (int64_t)(a0 + i) * ldq : NULL;
                for (int c = 0; dq && c < d; c++) dq[c] = j->q_first ? s * gi[c] : dq[c] + s * gi[c];
                for (int c = 0; c < d; c++) dhs += (double)qi[c] * gi[c];
            }
        } else if (dQ) {
            pf_gemm(t, pf, nq, d, nk, s, A, 1, ld, Kk, ldk, dQ + (int64_t)a0 * ldq, ldq, !j->q_first);
        }
    }
    j->dsink[b * g->H + h] = dsink;
    /* y = s · Q Kᵀ  =>  dK = s · dyᵀ Q, a key tile at a time */
    if (j->k->grad) {
        float *dK = j->k->grad + ok;
        for (int q = 0; q < r->nkb; q++) {
            const key_blk *kb = &r->kb[q];
            pf_gemm(t, pf, kb->k1 - kb->k0, d, kb->q1 - kb->q0, s, w->DS + (int64_t)kb->k0 * ld + kb->q0, ld, 1,
                    Q + (int64_t)kb->q0 * ldq, ldq, dK + (int64_t)kb->k0 * ldk, ldk, !(first && j->k_first));
        }
    }
    pf_some(pf, INT64_MAX);   /* what is left */
    return dhs - centre;
}

/* An item of the split (tg_attn_bwd_split): its batch rows and key/value heads,
 * each with the query heads that read it, in order: one thread owns every
 * slice they write. */
static void backward_item(void *arg, int item, int t) {
    const bwd_job *j = arg;
    const tg_attn_geom *g = &j->r->g;
    const int nh = j->split.by_h ? g->Hkv : 1;
    const int b0 = j->split.by_b ? item / nh : 0, b1 = j->split.by_b ? b0 + 1 : g->B;
    const int k0 = j->split.by_h ? item % nh : 0, k1 = j->split.by_h ? k0 + 1 : g->Hkv;
    for (int b = b0; b < b1; b++)
        for (int kh = k0; kh < k1; kh++)
            for (int a = 0; a < g->group; a++) {
                const int h = kh * g->group + a, nx = b * g->H + h + 1;
                pf_list pf;
                pf_init(&pf);
                if (j->r->pf_bwd && nx < g->B * g->H) {   /* the next head's rows, in the order they are used */
                    pf_head(&pf, g, j->out->grad, nx, 0, g->dv, 0);
                    pf_head(&pf, g, j->q->data, nx, 0, g->d, 0);
                    pf_head(&pf, g, j->k->data, nx, 1, g->d, 0);
                    pf_head(&pf, g, j->v->data, nx, 1, g->dv, 0);
                    pf_add(&pf, j->r->PT + (int64_t)nx * g->Tk * j->r->ld, g->Tk, j->r->ld, g->Tq, 0);
                    if (j->v->grad) pf_head(&pf, g, j->v->grad, nx, 1, g->dv, 1);
                    if (j->q->grad) pf_head(&pf, g, j->q->grad, nx, 0, g->d, 1);
                    if (j->k->grad) pf_head(&pf, g, j->k->grad, nx, 1, g->d, 1);
                    /* over the products backward_head runs */
                    pf_spread(&pf, 2.0 * j->r->qpairs * (g->dv + (j->need_G ? g->d : 0)) +
                                       2.0 * j->r->kpairs * ((j->v->grad ? g->dv : 0) + (j->k->grad ? g->d : 0)));
                }
                j->dhs[b * g->H + h] = backward_head(j, b, h, a == 0, &j->ws[t], &pf);
            }
}

static void attention_backward(tg_ctx *ctx, const tg_node *n) {
    const attn_rec *r = n->saved;
    const tg_attn_geom *g = &r->g;
    tg_tensor *q = n->in[TG_ATTN_IN_Q], *k = n->in[TG_ATTN_IN_K], *v = n->in[TG_ATTN_IN_V], *out = n->out;
    tg_tensor *hs = n->in[TG_ATTN_IN_HS], *bias = n->in[TG_ATTN_IN_BIAS], *sinks = n->in[TG_ATTN_IN_SINKS];
    const int B = g->B, Tq = g->Tq, Tk = g->Tk, H = g->H, d = g->d, dv = g->dv, ld = r->ld;
    const int need_G = q->grad || (hs && hs->grad);
    const int nt = tg_threads();
    bwd_scratch *ws = tg_arena_alloc(ctx, (size_t)nt * sizeof *ws);
    for (int t = 0; t < nt; t++) {
        ws[t] = (bwd_scratch){0};
        ws[t].dOT = tg_arena_alloc(ctx, (size_t)dv * ld * sizeof(float));
        ws[t].DS = tg_arena_alloc(ctx, (size_t)Tk * ld * sizeof(float));
        if (g->dropout > 0 || g->prec) ws[t].PD = tg_arena_alloc(ctx, (size_t)Tk * ld * sizeof(float));
        if (g->softcap > 0) {
            ws[t].SC = tg_arena_alloc(ctx, (size_t)Tk * ld * sizeof(float));
            ws[t].QT = tg_arena_alloc(ctx, (size_t)d * ld * sizeof(float));
        }
        if (hs && hs->grad) ws[t].G = tg_arena_alloc(ctx, (size_t)Tq * d * sizeof(float));
    }
    double *dhs = tg_arena_alloc(ctx, (size_t)B * H * sizeof(double));
    double *dsink = tg_arena_alloc(ctx, (size_t)B * H * sizeof(double));
    /* grads nothing wrote yet are written (beta 0), not zeroed and added to. The
     * flags are taken in the order a thread writes (dV, dQ, dK): when q, k, v are
     * one tensor only the first write may overwrite. */
    bwd_job job = {r, tg_tile_ops_for(0), q, k, v, hs, bias, sinks, out, need_G, hs && hs->grad, 0, 0, 0,
                   tg_attn_bwd_split(g, bias && bias->grad), ws, dhs, dsink};
    job.v_first = v->grad && tg_grad_first(v);
    job.q_first = q->grad && tg_grad_first(q);
    job.k_first = k->grad && tg_grad_first(k);
    tg_tensor qs = *q, ks = *k, vs = *v, os = *out;   /* under a precision: the products' operands, grads the tensors' */
    if (g->prec) {
        qs.data = (float *)r->qd, ks.data = (float *)r->kd, vs.data = (float *)r->vd;
        os.grad = (float *)tg_operand(ctx, g->prec, out->grad, out->numel);
        job.q = &qs, job.k = &ks, job.v = &vs, job.out = &os;
    }
    if (hs && hs->grad) tg_grad_acc(hs);
    if (bias && bias->grad) tg_grad_acc(bias);
    if (sinks && sinks->grad) tg_grad_acc(sinks);
    tg_parallel_for(job.split.items, (int64_t)B * H * Tq * Tk * (2 * d + 2 * dv), backward_item, &job);
    /* s = scale · head_scale[h]  =>  d head_scale[h] = scale · ds; the sinks' sums, over b in order */
    for (int h = 0; h < H; h++) {
        double sum = 0, sk = 0;
        for (int b = 0; b < B; b++) sum += dhs[b * H + h], sk += dsink[b * H + h];
        if (hs && hs->grad) hs->grad[h] += (float)(g->scale * sum);
        if (sinks && sinks->grad) sinks->grad[h] += (float)sk;
    }
}

/* ---- forward -------------------------------------------------------------------------- */

typedef struct {
    const attn_rec *r;
    const tg_tile_ops *tile;
    const tg_tensor *q, *k, *v, *hs, *out;
    int want_stats;
    tg_attn_part *parts;   /* per (b, h) */
    float *QT, *X;         /* per-thread scratch: the head's Qᵀ [d, ld]; dropout: a tile's P̃ [Tk, 16] */
} fwd_job;

/* A tile's logits in place, when a cap, bias or ALiBi makes them (tg_attn_logit,
 * as backward): lane a is row a0 + a, invisible keys −inf. */
static void tile_logits(const tg_attn_geom *g, int b, int h, int a0, int nq, int k0, int nk, const int *lo,
                        const int *hi, float s, float *S, int ld) {
    for (int a = 0; a < TG_TILE_Q; a++) {
        const float *brow = a < nq ? tg_attn_bias_row(g, b, h, a0 + a) : NULL;
        for (int j = 0; j < nk; j++) {
            float *x = S + (int64_t)j * ld + a;
            *x = k0 + j >= lo[a] && k0 + j < hi[a] ? tg_attn_logit(g, brow, h, a0 + a, k0 + j, *x * s) : -INFINITY;
        }
    }
}

/* The key spans [lo, hi) of a tile's 16 lanes, rows a0.. of batch row b; lanes past
 * the rows (past Tq) see no key, their weights are 0 */
static void tile_spans(const tg_attn_geom *g, int b, int a0, int nq, int *lo, int *hi) {
    for (int a = 0; a < TG_TILE_Q; a++) {
        lo[a] = hi[a] = 0;
        if (a < nq) tg_attn_span(g, b, a0 + a, &lo[a], &hi[a]);
    }
}

/* A tile's rows' stats (tg_attn_stats): entropy, largest logit, saturation */
static void tile_stats(const float *S, int ld, int k0, int nq, const int *lo, const int *hi, const float *top,
                       tg_attn_part *part) {
    for (int a = 0; a < nq; a++) {
        if (top[a] == -INFINITY) continue;   /* rows that see a key (with a finite logit) */
        part->max_logit = top[a] > part->max_logit ? top[a] : part->max_logit;
        float pmax = 0;
        for (int c = lo[a]; c < hi[a]; c++) {
            const float p = S[(int64_t)(c - k0) * ld + a];
            if (p > 0) part->entropy -= (double)p * log((double)p);   /* 0 ln 0 = 0 */
            pmax = p > pmax ? p : pmax;
        }
        part->saturated += pmax > 0.99f;
        part->rows++;
    }
}

/* A query tile of a pair: its rows' softmax on the pair's keys (the scores
 * already in PT), then O = P̃ V on its own keys. */
static void forward_tile(const fwd_job *j, int b, int h, const tile_pair *tp, int u, float *X, tg_attn_part *part,
                         pf_list *pf) {
    const attn_rec *r = j->r;
    const tg_attn_geom *g = &r->g;
    const tg_tile_ops *t = j->tile;
    const attn_blk *bk = tp->t[u];
    const int Tq = g->Tq, Tk = g->Tk, H = g->H, dv = g->dv, kh = h / g->group, ld = r->ld;
    const int a0 = bk->i0, nq = bk->i1 - bk->i0, k0 = tp->k0, nk = tp->k1 - tp->k0, bh = b * H + h;
    const int ldv = g->Hkv * dv, ldo = H * dv;
    const float s = head_mult(r, j->hs, h), sink = g->sinks ? g->sinks[h] : -INFINITY;
    float *S = r->PT + (int64_t)bh * Tk * ld + (int64_t)k0 * ld + a0, top[TG_TILE_Q], psink[TG_TILE_Q];
    int los[TG_TILE_Q], his[TG_TILE_Q];
    const int *lo = los, *hi = his;
    if (r->span) {   /* the same for every batch row: made once a call */
        lo = r->span + (int64_t)(a0 / TG_TILE_Q) * 2 * TG_TILE_Q, hi = lo + TG_TILE_Q;
    } else
        tile_spans(g, b, a0, nq, los, his);
    if (g->extras) tile_logits(g, b, h, a0, nq, k0, nk, lo, hi, s, S, ld);
    t->softmax(S, ld, nk, k0, lo, hi, !g->extras, s, sink, top, psink);
    if (r->psink)
        for (int a = 0; a < nq; a++) r->psink[(int64_t)bh * Tq + a0 + a] = psink[a];
    if (j->want_stats) tile_stats(S, ld, k0, nq, lo, hi, top, part);
    /* O = P̃ V on the tile's own keys: A(i, c) = P̃ᵀ[c][i] (a row with no visible key is all 0, and so is its output) */
    const float *A = S + (int64_t)(bk->k0 - k0) * ld;
    int64_t acs = ld;
    if (g->dropout > 0 || g->prec) {   /* P̃ = P ⊙ keep/(1 − p), rounded to g->prec, in X; PT keeps the weights */
        for (int c = bk->k0; c < bk->k1; c++)
            for (int a = 0; a < TG_TILE_Q; a++) {
                const float p = S[(int64_t)(c - k0) * ld + a];
                const int keep = a < nq && (g->dropout <= 0 || tg_attn_keep(g, b, h, a0 + a, c));
                X[(c - bk->k0) * TG_TILE_Q + a] = keep ? (g->dropout > 0 ? p * g->drop_scale : p) : 0.0f;
            }
        tg_round_all(g->prec, X, (int64_t)(bk->k1 - bk->k0) * TG_TILE_Q);
        A = X, acs = TG_TILE_Q;
    }
    pf_gemm(t, pf, nq, dv, bk->k1 - bk->k0, 1.0f, A, 1, acs,
            j->v->data + off(b, Tk, g->Hkv, kh, dv) + (int64_t)bk->k0 * ldv, ldv,
            j->out->data + off(b, Tq, H, h, dv) + (int64_t)a0 * ldo, ldo, 0);
}

/* A pair of query tiles of head h: the scores key-major into PT (Sᵀ = K Qᵀ, a
 * lane per query) on the pair's keys, 0 on the others, then each tile. */
static void forward_pair(const fwd_job *j, int b, int h, const tile_pair *tp, const float *QT, float *X,
                         tg_attn_part *part, pf_list *pf) {
    const attn_rec *r = j->r;
    const tg_attn_geom *g = &r->g;
    const int Tk = g->Tk, d = g->d, ld = r->ld;
    float *PTh = r->PT + ((int64_t)b * g->H + h) * Tk * ld;
    zero_keys(PTh, ld, tp, Tk);
    const int ldk = g->Hkv * d;
    pf_gemm(j->tile, pf, tp->k1 - tp->k0, tp->nt * TG_TILE_Q, d, 1.0f,
            j->k->data + off(b, Tk, g->Hkv, h / g->group, d) + (int64_t)tp->k0 * ldk, ldk, 1, QT + tp->a0, ld,
            PTh + (int64_t)tp->k0 * ld + tp->a0, ld, 0);
    for (int u = 0; u < tp->nt; u++) forward_tile(j, b, h, tp, u, X, part, pf);
}

static void forward_item(void *arg, int bh, int thread) {
    const fwd_job *j = arg;
    const attn_rec *r = j->r;
    const tg_attn_geom *g = &r->g;
    const int Tq = g->Tq, H = g->H, d = g->d, b = bh / H, h = bh % H;
    tg_attn_part part = {0, -INFINITY, 0, 0};
    float *QT = j->QT + (int64_t)thread * d * r->ld, *X = j->X ? j->X + (int64_t)thread * g->Tk * TG_TILE_Q : NULL;
    pf_list pf;
    pf_init(&pf);
    if (r->pf_fwd && bh + 1 < g->B * H) {   /* the next head's rows */
        pf_head(&pf, g, j->q->data, bh + 1, 0, d, 0);
        pf_head(&pf, g, j->k->data, bh + 1, 1, d, 0);
        pf_head(&pf, g, j->v->data, bh + 1, 1, g->dv, 0);
        pf_head(&pf, g, j->out->data, bh + 1, 0, g->dv, 1);
        pf_add(&pf, r->PT + (int64_t)(bh + 1) * g->Tk * r->ld, g->Tk, r->ld, r->ld, 1);
        pf_spread(&pf, 2.0 * r->qpairs * (d + g->dv));
    }
    transpose_pad(j->tile, j->q->data + off(b, Tq, H, h, d), H * d, Tq, d, QT, r->ld);
    for (int q = 0; q < r->nblk;) {
        const tile_pair tp = pair_at(r, q);
        forward_pair(j, b, h, &tp, QT, X, &part, &pf);
        q += tp.nt;
    }
    pf_some(&pf, INT64_MAX);   /* what is left */
    j->parts[bh] = part;
}

/* The bytes above which a pass prefetches: twice the L2. Above it the
 * operands come from L3 or memory and a head waited for its rows (at seed's
 * shape the op took twice as long a head at B 32 as at B 4); at or below it
 * the previous op left them in cache and the prefetches only cost (small's op
 * 1.3x slower with them). Measured on an AMD EPYC Zen 4, docs/speed.md. */
static int64_t big_pass(void) {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return 2 * (l2 > 0 ? (int64_t)l2 : (int64_t)1 << 20);
}

tg_tensor *tg_attend(tg_ctx *ctx, const tg_attn_args *args) {
    tg_attn_args a;
    attn_rec r;
    tg_attn_read(ctx, "tg_attention", args, &a, &r.g);
    const tg_attn_geom *g = &r.g;
    const int B = g->B, Tq = g->Tq, Tk = g->Tk, H = g->H, d = g->d, dv = g->dv;
    /* an odd number of 64-byte lines a row: a tile's keys, rows ld apart, then fall in
     * every set of the L1 (at ld 256 only four: the tile missed L1 on every pass) */
    r.ld = (Tq + TG_TILE_Q - 1) / TG_TILE_Q * TG_TILE_Q;
    if ((r.ld / TG_TILE_Q) % 2 == 0) r.ld += TG_TILE_Q;
    /* PT is what backward needs: always made */
    r.PT = tg_arena_alloc(ctx, (size_t)B * H * Tk * r.ld * sizeof(float));
    r.P = NULL;
    r.psink = g->sinks ? tg_arena_alloc(ctx, (size_t)B * H * Tq * sizeof(float)) : NULL;
    tg_tensor *out = tg_new(ctx, 4, (int[]){B, Tq, H, dv});
    tg_attn_part *parts = tg_arena_alloc(ctx, (size_t)B * H * sizeof *parts);
    {   /* the forward reads q, k, v and writes out; the backward adds dO, PT and the grads */
        const int64_t qo = (int64_t)B * Tq * H * (d + dv), kv = (int64_t)B * Tk * g->Hkv * (d + dv);
        const int64_t big = big_pass();
        r.pf_fwd = 4 * (qo + kv) > big;
        r.pf_bwd = 4 * (2 * (qo + kv) + (int64_t)B * H * Tk * r.ld) > big;
    }
    r.nblk = query_blocks(ctx, g, &r.blk);
    r.nkb = key_blocks(ctx, g, &r.kb);
    r.qpairs = blk_pairs(&r), r.kpairs = kb_pairs(&r);
    r.span = NULL;
    if (!g->kv_len) {   /* the lanes' spans depend on the batch row only through its padding */
        r.span = tg_arena_alloc(ctx, (size_t)r.nblk * 2 * TG_TILE_Q * sizeof(int));
        for (int q = 0; q < r.nblk; q++)
            tile_spans(g, 0, r.blk[q].i0, r.blk[q].i1 - r.blk[q].i0, r.span + q * 2 * TG_TILE_Q,
                       r.span + q * 2 * TG_TILE_Q + TG_TILE_Q);
    }
    const int nt = tg_threads();
    float *QT = tg_arena_alloc(ctx, (size_t)nt * d * r.ld * sizeof(float));
    float *X = g->dropout > 0 || g->prec ? tg_arena_alloc(ctx, (size_t)nt * Tk * TG_TILE_Q * sizeof(float)) : NULL;
    /* under a precision the products read q, k, v rounded (tg_ctx_set_precision), the backward's too */
    const tg_tensor *qp = tg_attn_operand(ctx, g->prec, a.q), *kp = tg_attn_operand(ctx, g->prec, a.k);
    const tg_tensor *vp = tg_attn_operand(ctx, g->prec, a.v);
    r.qd = qp->data, r.kd = kp->data, r.vd = vp->data;
    fwd_job job = {&r, tg_tile_ops_for(0), qp, kp, vp, a.head_scale, out, a.stats != NULL, parts, QT, X};
    tg_parallel_for(B * H, (int64_t)B * H * Tq * Tk * (d + dv), forward_item, &job);
    tg_attn_stats_fill(a.stats, parts, B, H);

    tg_tensor *in[TG_ATTN_N_IN] = {a.q, a.k, a.v, a.head_scale, a.bias, a.sinks};
    tg_node *n = tg_record(ctx, "tg_attention", attention_backward, out, TG_ATTN_N_IN, in, sizeof r);
    if (n) {
        *(attn_rec *)n->saved = r;
        n->own_grads = 1;
        /* S = QKᵀ, O = PV, back dP = dO Vᵀ, dQ = dS K over the query tiles' pairs;
         * dV = PᵀdO, dK = dSᵀ Q over the key tiles' (not the T² a mask hides) */
        const double qp = 2.0 * B * H * (double)r.qpairs, kp = 2.0 * B * H * (double)r.kpairs;
        int dS = a.q->requires_grad || a.k->requires_grad || (a.head_scale && a.head_scale->requires_grad);
        n->flops[0] = qp * (d + dv);
        n->flops[1] = qp * (dv * dS + d * a.q->requires_grad) + kp * (dv * a.v->requires_grad + d * a.k->requires_grad);
    }
    return out;
}

tg_tensor *tg_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale,
                        float scale, int causal, tg_attn_stats *stats) {
    tg_attn_args a = tg_attn_args_make(q, k, v, scale);
    a.head_scale = head_scale, a.causal = causal, a.stats = stats;
    return tg_attend(ctx, &a);
}

const float *tg_attention_probs(tg_ctx *ctx, const tg_tensor *out) {
    for (int i = ctx->n_nodes - 1; i >= 0; i--) {
        tg_node *n = &ctx->nodes[i];
        if (n->out != out || n->backward != attention_backward) continue;
        attn_rec *r = n->saved;
        if (!r->P) {   /* row-major from PT, once */
            const tg_attn_geom *g = &r->g;
            const int64_t heads = (int64_t)g->B * g->H;
            float *P = tg_arena_alloc(ctx, (size_t)heads * g->Tq * g->Tk * sizeof(float));
            for (int64_t bh = 0; bh < heads; bh++)
                tg_tile_ops_for(0)->transpose(r->PT + bh * g->Tk * r->ld, r->ld, g->Tk, g->Tq,
                                              P + bh * g->Tq * g->Tk, g->Tk);
            r->P = P;
        }
        return r->P;
    }
    return NULL;
}

const char *tg_attn_tiles(void) { return tg_tile_ops_for(0)->name; }
