/* Internal to the attention ops (not installed, not exported): the args read
 * and checked once (shapes, heads, windows, padding; messages start with the
 * op's name), the visible keys of a row, and the per-head stats combined. */
#ifndef TG_OPS_ATTN_GEOM_H
#define TG_OPS_ATTN_GEOM_H
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
} tg_attn_geom;

/* Checks the args of op (misuse: tg_fail naming op, the shapes and the value)
 * and returns them complete in *a (fields past args->size at their defaults)
 * with their geometry in *g (kv_len copied to ctx's arena). */
TG_ATTN_API void tg_attn_read(tg_ctx *ctx, const char *op, const tg_attn_args *args, tg_attn_args *a, tg_attn_geom *g);

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

/* Kᵀ of every key/value head, [B, Hkv] blocks of [d, Tk] (arena), made once a
 * call in parallel over (b, kv head): the query heads of a group share their
 * head's, so nothing is copied per query head. libxsmm has no kernel for a
 * transposed B (ops/gemm.h). */
TG_ATTN_API float *tg_attn_kt(tg_ctx *ctx, const tg_attn_geom *g, const float *k);

/* One (batch, query head)'s part of the stats, from either op. */
typedef struct { double entropy; float max_logit; int64_t saturated, rows; } tg_attn_part;

/* stats from parts [B * H] (b-major), combined over b in a fixed order. */
TG_ATTN_API void tg_attn_stats_fill(tg_attn_stats *stats, const tg_attn_part *parts, int B, int H);

#endif
