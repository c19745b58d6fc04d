/* The attention contract: one struct, tg_attn_args, that every attention op and kernel takes
 * (the built-in ops: tg_attend, attention.h, which saves the weights; tg_flash_attend,
 * flash_attention.h, which recomputes them online; a kernel of one's own: attn_kernel.h):
 *   q [B, Tq, H, d], k [B, Tk, Hkv, d], v [B, Tk, Hkv, dv], out [B, Tq, H, dv];
 *   heads are read in place as strided [T, d] matrices (the layout of x·W
 *   reshaped from [B, T, H·d]): no transposes, no copies per query head.
 * Grouped heads: H a multiple of Hkv; query head h reads key/value head
 *   h / (H / Hkv) (PyTorch's repeat_interleave / enable_gqa order; Hkv = 1 is
 *   multi-query attention). Gradients of a shared k, v head sum over its query heads.
 * Alignment: query i sits at key position p_i = i + Tk − Tq (bottom-right, as
 *   FlashAttention ≥ 2.1: the queries are the tail of the keys, as in decoding
 *   with a KV cache or chunked prefill). PyTorch's is_causal aligns top-left.
 * Key j is visible to query i of batch row b iff all of
 *   causal:  j ≤ p_i
 *   window:  p_i − left ≤ j ≤ p_i + right   (left, right: −1 unbounded; FlashAttention's
 *            window_size; Mistral's "sliding window W" is (W − 1, 0) with causal)
 *   padding: j < kv_len[b]                   (kv_len NULL: every key; positions still
 *            use the buffer length Tk, not kv_len; kv_len[b] in [0, Tk], 0 hides every key)
 * Per batch b and query head h, with s = scale · (head_scale ? head_scale[h] : 1),
 * the logit of a visible key, in this order (Gemma 2's):
 *   y_ij = s · q_i·k_j;  x_ij = cap · tanh(y_ij / cap) when softcap = cap > 0, else y_ij;
 *   x_ij += bias[b, h, i, j] (broadcast over B and H where its dim is 1; −inf hides the key)
 *        − alibi[h] · |j − p_i|            (ALiBi's slopes, never a [Tq, Tk] tensor)
 *   P_ij = e^{x_ij} / (e^{sink_h} + Σ_{visible k} e^{x_ik})   (no sinks: the plain softmax;
 *          the sink is a logit used as given: no scale, cap, bias or ALiBi)
 *   out_i = Σ_j P_ij · m_ij/(1 − p) · v_j, m_ij ∈ {0, 1} kept with probability 1 − p
 *          (dropout p > 0; m is a counter-based hash of (dropout_seed, b, h, i, j): the same
 *          for forward and backward, any tiling and any thread count); else Σ_j P_ij v_j.
 * A row with no visible key (or only −inf logits) is 0 and passes no gradient.
 * Gradient, P̃ = P ⊙ m/(1 − p):  dV = P̃ᵀ dO,  dP = (dO Vᵀ) ⊙ m/(1 − p),
 *   dx = P ⊙ (dP − D), D_i = Σ_j P_ij dP_ij,  d bias = dx (summed over broadcast dims),
 *   d sink_h = −Σ_{b,i} P_sink,i · D_i,  dy = dx ⊙ (1 − (x_cap/cap)²) (softcap) else dx,
 *   dQ = s·dy K, dK = s·dyᵀ Q, d head_scale[h] = scale · Σ_{b,i,j} dy ⊙ Q Kᵀ (dK, dV summed
 *   over the query heads of a group). ALiBi's slopes take no gradient. */
#ifndef TG_OP_ATTN_ARGS_H
#define TG_OP_ATTN_ARGS_H
#include <stddef.h>
#include <stdint.h>

#include "tg_core.h"

/* Attention health, per query head, filled by the forward when passed non-NULL.
 * The caller owns the arrays (length H, H equal to q's H; an array left NULL is
 * skipped). Over the visible entries only; rows with no visible key are left out.
 * Of the weights before dropout, over the keys (a sink's weight is not a key's).
 *   entropy[h]    mean over batch and query rows of −Σ_j p_j ln p_j, in nats;
 *                 compare with tg_attn_uniform_entropy(_args).
 *   max_logit[h]  the largest s·q·k over the head's visible entries (−inf: none).
 *   saturation[h] share of rows whose largest weight is > 0.99.
 * A head with no visible entry at all gets entropy 0 and saturation 0. */
typedef struct tg_attn_stats {
    int H;
    float *entropy;
    float *max_logit;
    float *saturation;
} tg_attn_stats;

/* One attention call, everything it says. Make it with tg_attn_args_make (it
 * sets `size` and the defaults), then set what the call needs:
 *   tg_attn_args a = tg_attn_args_make(q, k, v, 1 / sqrtf(d));
 *   a.causal = 1, a.window_left = W - 1;           (a sliding window of W keys)
 *   tg_tensor *out = tg_attend(ctx, &a);
 * `size` is sizeof(tg_attn_args) as the caller was compiled: a later version
 * appends fields, and an op reads only what the caller's size holds (the rest
 * takes its default), so a program or plugin built against this header keeps
 * working. kv_len is read during the call (the op keeps its own copy). */
typedef struct tg_attn_args {
    size_t size;
    tg_tensor *q, *k, *v;          /* [B,Tq,H,d], [B,Tk,Hkv,d], [B,Tk,Hkv,dv] */
    tg_tensor *head_scale;         /* NULL or [H]: a per-head multiplier (e.g. learnable) */
    float scale;                   /* any finite float: 1/sqrt(d) usually */
    int causal;                    /* 0 or 1 */
    int window_left, window_right; /* −1: unbounded (the default) */
    const int *kv_len;             /* NULL or [B]: valid keys of each batch row */
    tg_attn_stats *stats;          /* NULL, or per-head stats to fill */
    tg_tensor *bias;               /* NULL or [B or 1, H or 1, Tq, Tk]: added to the logits; a gradient
                                      when it requires one (a learned relative bias) */
    tg_tensor *alibi;              /* NULL or [H]: ALiBi slopes (no gradient) */
    float softcap;                 /* 0: none; > 0: logits capped to (−cap, cap) by tanh */
    tg_tensor *sinks;              /* NULL or [H]: a learnable logit per query head in each row's denominator */
    float dropout;                 /* p in [0, 1): dropout of the weights (0: none) */
    uint64_t dropout_seed;         /* which weights drop: any value; a run derives it from its seed and step */
    /* Since 0.21: */
    int layer;                     /* the model's layer of this call, 0 first (≥ 0): for kernels whose
                                      computation depends on it (GPTBigCode's 1/(layer + 1) in fp16,
                                      alternating sliding and global layers); the built-in ops ignore it */
} tg_attn_args;

/* The size of the first version of tg_attn_args (tapegrad 0.12): the least an op accepts. */
#define TG_ATTN_ARGS_SIZE_V1 (offsetof(tg_attn_args, dropout_seed) + sizeof(uint64_t))

/* q, k, v and scale set; no head_scale, not causal, windows −1, no kv_len, no stats,
 * no bias, ALiBi, cap, sinks or dropout. */
tg_attn_args tg_attn_args_make(tg_tensor *q, tg_tensor *k, tg_tensor *v, float scale);

/* args as this version's whole struct: what args->size holds, the later fields at their defaults
 * (a caller built against an older header), size set to this version's. No checks: an op checks. */
tg_attn_args tg_attn_args_of(const tg_attn_args *args);

/* Any attention op that takes the args: tg_attend, tg_flash_attend. */
typedef tg_tensor *(*tg_attend_fn)(tg_ctx *ctx, const tg_attn_args *args);

/* Any attention op with tg_attention's signature and contract: tg_attention,
 * tg_flash_attention, or a researcher's own kernel (a plugin, tg_attn_plugin.h of
 * the training kit). `stats` may be NULL; a kernel that does not fill it must
 * leave it alone. */
typedef tg_tensor *(*tg_attention_fn)(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale,
                                      float scale, int causal, tg_attn_stats *stats);

/* The entropy of uniform attention: mean over query rows of ln(visible keys),
 * i.e. ln T, or the mean over i of ln(i + 1) when causal. */
double tg_attn_uniform_entropy(int T, int causal);
/* The same for a call's args: the mean over batch rows and query rows that see
 * at least one key of ln(visible keys); 0 when no row sees any. */
double tg_attn_uniform_entropy_args(const tg_attn_args *args);

/* The visible keys of query row i in batch row b under args: [*lo, *hi)
 * (empty: *lo == *hi). The one definition the ops, the tests and the programs use. */
void tg_attn_visible(const tg_attn_args *args, int b, int i, int *lo, int *hi);

/* 1 if dropout keeps weight (b, h, i, j) under args (dropout, dropout_seed and
 * the shapes): SplitMix64 of dropout_seed + (1 + ((b·H + h)·Tq + i)·Tk + j)·φ,
 * φ = 0x9e3779b97f4a7c15, kept when its top 24 bits are ≥ ⌈p·2^24⌉. The one
 * definition both ops use; a twin of this mask in another framework needs it. */
int tg_attn_kept(const tg_attn_args *args, int b, int h, int i, int j);

#endif
