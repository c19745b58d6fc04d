/* Internal to the attention ops (not installed, not exported): the args read
 * and checked once (shapes, heads, windows, padding; messages start with the
 * op's name), the visible keys of a row, and the per-head stats combined. */
#ifndef TG_OPS_ATTN_GEOM_H
#define TG_OPS_ATTN_GEOM_H
#include <math.h>
#include <stdint.h>

#include "attention.h"

#define TG_ATTN_API __attribute__((visibility("hidden")))

/* What a call says, read from its args. right already folds in causal (then
 * right = 0: the diagonal of p_i = i + Tk − Tq is the last visible key). */
typedef struct {
    int B, Tq, Tk, H, Hkv, group, d, dv;   /* group = H / Hkv query heads per key/value head */
    float scale;
    int causal, left, right;               /* −1: unbounded */
    int *kv_len;                           /* NULL or [B], the op's own copy (arena) */
    /* what changes the logits and weights (attention.h) */
    float softcap;                         /* 0: none */
    const float *bias;                     /* NULL or the bias tensor's data */
    int bias_B, bias_H;                    /* its dims 0 and 1: B or 1, H or 1 */
    const float *alibi, *sinks;            /* NULL or [H] */
    int extras;                            /* 1: softcap, bias or ALiBi (tg_attn_logit), else x = s·score */
    float dropout, drop_scale;             /* p, 1/(1 − p) */
    uint32_t drop_below;                   /* a weight drops when its 24-bit hash is below this */
    uint64_t seed;
    int prec;                              /* the context's precision (tg_ctx_set_precision): what the products' operands are rounded to */
} tg_attn_geom;

/* The record's inputs, in fixed slots (NULL when absent). */
enum { TG_ATTN_IN_Q, TG_ATTN_IN_K, TG_ATTN_IN_V, TG_ATTN_IN_HS, TG_ATTN_IN_BIAS, TG_ATTN_IN_SINKS, TG_ATTN_N_IN };

/* Checks the args of op (misuse: tg_fail naming op, the shapes and the value)
 * and returns them complete in *a (fields past args->size at their defaults)
 * with their geometry in *g (kv_len copied to ctx's arena). */
TG_ATTN_API void tg_attn_read(tg_ctx *ctx, const char *op, const tg_attn_args *args, tg_attn_args *a, tg_attn_geom *g);

/* t as the op's products read it under precision prec: t itself (fp32), or a copy
 * of the tensor (arena) whose data are t's rounded to prec; its grad is t's. */
TG_ATTN_API tg_tensor *tg_attn_operand(tg_ctx *ctx, int prec, tg_tensor *t);

/* The geometry of complete args, without checks (tg_attn_visible, the tests). */
TG_ATTN_API void tg_attn_geom_of(const tg_attn_args *a, tg_attn_geom *g);

/* The keys [*lo, *hi) query row i of batch row b sees; *lo == *hi: none. */
static inline void tg_attn_span(const tg_attn_geom *g, int b, int i, int *lo, int *hi) {
    const int64_t Tk = g->Tk, p = (int64_t)i + g->Tk - g->Tq;
    int64_t l = g->left < 0 ? 0 : p - g->left;
    int64_t r = g->right < 0 ? Tk : p + g->right + 1;
    const int64_t n = g->kv_len ? g->kv_len[b] : Tk;
    if (r > n) r = n;
    if (r > Tk) r = Tk;
    if (l < 0) l = 0;
    if (l > Tk) l = Tk;
    if (r < l) r = l;
    *lo = (int)l;
    *hi = (int)r;
}

/* The keys [*klo, *khi) that any of query rows [i0, i0 + nq) of batch row b
 * sees (0, 0: none): a tile's (flash_attention.c) or a query block's
 * (attention.c) key range. */
static inline void tg_attn_rows_keys(const tg_attn_geom *g, int b, int i0, int nq, int *klo, int *khi) {
    int lo = g->Tk, hi = 0;
    for (int a = 0; a < nq; a++) {
        int l, h;
        tg_attn_span(g, b, i0 + a, &l, &h);
        if (h > l) {
            lo = l < lo ? l : lo;
            hi = h > hi ? h : hi;
        }
    }
    *klo = hi > lo ? lo : 0;
    *khi = hi > lo ? hi : 0;
}

/* Kᵀ of every key/value head, [B, Hkv] blocks of [d, Tk] (arena), made once a
 * call in parallel over (b, kv head): the query heads of a group share their
 * head's, so nothing is copied per query head. libxsmm has no kernel for a
 * transposed B (ops/gemm.h). */
TG_ATTN_API float *tg_attn_kt(tg_ctx *ctx, const tg_attn_geom *g, const float *k);

/* Row i of batch row b, head h of the bias (its broadcast dims read at 0), or NULL. */
static inline const float *tg_attn_bias_row(const tg_attn_geom *g, int b, int h, int i) {
    if (!g->bias) return NULL;
    const int64_t bb = g->bias_B == 1 ? 0 : b, hh = g->bias_H == 1 ? 0 : h;
    return g->bias + ((bb * g->bias_H + hh) * g->Tq + i) * g->Tk;
}

/* The logit of a visible key j of row i, head h, from y = s·q·k (the caller
 * multiplies: both ops round y alike): the cap, then the bias, then ALiBi.
 * Forward and backward call this one function, so they agree to the bit. */
static inline float tg_attn_logit(const tg_attn_geom *g, const float *brow, int h, int i, int j, float y) {
    float x = y;
    if (g->softcap > 0) x = g->softcap * tanhf(x / g->softcap);
    if (brow) x += brow[j];
    if (g->alibi) x -= g->alibi[h] * fabsf((float)(j - (i + g->Tk - g->Tq)));
    return x;
}

/* dx → dy: the softcap's derivative at the capped logit x, 1 − tanh² = 1 − (x/cap)². */
static inline float tg_attn_cap_grad(const tg_attn_geom *g, float x_capped) {
    const float t = x_capped / g->softcap;
    return 1.0f - t * t;
}

/* 1 if the weight (b, h, i, j) is kept by dropout: a SplitMix64 hash of the
 * seed and the element's flat index, so every tiling and thread agrees. */
static inline int tg_attn_keep(const tg_attn_geom *g, int b, int h, int i, int j) {
    uint64_t z = (((uint64_t)b * g->H + h) * g->Tq + i) * g->Tk + j;
    z = g->seed + (z + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (uint32_t)(z >> 40) >= g->drop_below;
}

/* The backward's split over threads: items of (batch rows) × (key/value heads)
 * such that no two items write one float. A learned bias broadcast over B (or
 * H) makes every batch row (head) add into one slice: those are then done in
 * one item, in order. */
typedef struct { int by_b, by_h, items; } tg_attn_split;
static inline tg_attn_split tg_attn_bwd_split(const tg_attn_geom *g, int bias_grad) {
    tg_attn_split s = {1, 1, 0};
    if (bias_grad && g->bias_B == 1 && g->B > 1) s.by_b = 0;
    if (bias_grad && g->bias_H == 1 && g->H > 1) s.by_h = 0;
    s.items = (s.by_b ? g->B : 1) * (s.by_h ? g->Hkv : 1);
    return s;
}

/* One (batch, query head)'s part of the stats, from either op. */
typedef struct { double entropy; float max_logit; int64_t saturated, rows; } tg_attn_part;

/* stats from parts [B * H] (b-major), combined over b in a fixed order. */
TG_ATTN_API void tg_attn_stats_fill(tg_attn_stats *stats, const tg_attn_part *parts, int B, int H);

#endif
