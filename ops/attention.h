/* tg_attend / tg_attention: multi-head scaled dot-product attention, composed:
 * the Tq×Tk weights of every head are made and saved (tg_attention_probs).
 *
 * The contract of both built-in attention ops (this one and tg_flash_attend,
 * flash_attention.h), one struct, tg_attn_args:
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
#ifndef TG_OP_ATTENTION_H
#define TG_OP_ATTENTION_H
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

tg_tensor *tg_attend(tg_ctx *ctx, const tg_attn_args *args);

/* The textbook call (Tq = Tk, Hkv = H, no window, no padding), kept for the
 * programs and plugins written before tg_attn_args: tg_attend with those args. */
tg_tensor *tg_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale,
                        float scale, int causal, tg_attn_stats *stats);

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

/* ---- attention kernels: the plugin ABI ------------------------------------------
 * A kernel is any function that takes the args above (tg_attend_fn), described by
 * what it implements beyond the textbook call (one q/k/v length T, Hkv = H, scale,
 * head_scale, causal, stats): the features below. tg_attn_kernel_call never hands a
 * kernel args that use a feature it did not declare. */
/* The features, one row each: X(ID, bit, name, token). ID makes TG_ATTN_F_<ID> = 1 << bit;
 * name is what messages and reports say; token is the feature's one identifier outside C: the
 * exec protocol's hello lists tokens (scripts/python/tapegrad_exec.py's FEATURES, in this order:
 * tests/feature_table.py checks both), and docs use them. The bits, the names, the tokens and
 * their parsing (tg_attn_features_of_tokens) come from this table; a new feature is a row here,
 * its args field and check (attn_geom.c), the line of tg_attn_args_features that detects it, its
 * maths in the two ops, and its attn_check probe. */
#define TG_ATTN_FEATURE_TABLE(X)                       \
    X(DV, 0, "dv != d", "dv")                /* v's width differs from q and k's */          \
    X(GQA, 1, "grouped heads", "gqa")        /* Hkv < H, head h reads kv head h/(H/Hkv) */   \
    X(TQ_TK, 2, "Tq != Tk", "tq_tk")         /* bottom-right aligned */                      \
    X(WINDOW, 3, "window", "window")         /* window_left / window_right */                \
    X(PADDING, 4, "padding", "padding")      /* kv_len */                                    \
    X(BIAS, 5, "bias", "bias")                                                               \
    X(ALIBI, 6, "alibi", "alibi")                                                            \
    X(SOFTCAP, 7, "softcap", "softcap")                                                      \
    X(SINKS, 8, "sinks", "sinks")                                                            \
    X(DROPOUT, 9, "dropout", "dropout")
#define TG_ATTN_FEATURE_ENUM_(id, bit, name, token) TG_ATTN_F_##id = 1u << (bit),
#define TG_ATTN_FEATURE_COUNT_(id, bit, name, token) +1
enum { TG_ATTN_FEATURE_TABLE(TG_ATTN_FEATURE_ENUM_) };
enum { TG_ATTN_N_FEATURES = 0 TG_ATTN_FEATURE_TABLE(TG_ATTN_FEATURE_COUNT_) };
#define TG_ATTN_F_ALL ((1u << TG_ATTN_N_FEATURES) - 1)

/* Conventions a kernel may declare (tapegrad 0.17): how real model code computes attention where
 * it differs from the contract above without being wrong for its model. One row each,
 * X(ID, bit, name, token): TG_ATTN_C_<ID> = 1 << bit; token is the exec hello's and the docs'.
 *   causal_only    every call causal: a non-causal one is refused (most decoder kernels)
 *   no_head_scale  a call with head_scale is refused
 *   scale_rsqrt_d  the kernel's own multiplier 1/√d (d = q's last dim), `scale` ignored: a call
 *                  whose scale is not the float 1/sqrtf(d) is refused (nanoGPT)
 *   window_causal  windows only as causal left windows: a window needs causal (right bound 0)
 *   alibi_causal   ALiBi only under a causal mask: the one-sided ramp slope·j (BLOOM), equal to
 *                  −slope·|j − p_i| up to a row's constant only where j ≤ p_i
 *   sinks_always   no call without sinks: one without gets sinks of −inf (GPT-OSS)
 *   empty_mean     a row that sees no key weighs every key of the buffer equally (an additive
 *                  finfo.min mask: transformers' eager code), so it gives the mean of v
 *   empty_nan      a row that sees no key gives NaN (a −inf mask: 0/0)
 * Empty-row conventions make the call that has such a row be refused (its out would not be the
 * contract's 0). tg_attn_kernel_call refuses a call outside a kernel's conventions, naming the
 * convention; attn_check sends only calls inside them and reports each as info. A new convention
 * is a row here, its test in tg_attn_convention_refuses (attn_kernel.c) and how attn_check fits
 * its probes to it (conform in the kit's attn_checker.c). */
#define TG_ATTN_CONVENTION_TABLE(X)                                            \
    X(CAUSAL_ONLY, 0, "causal only", "causal_only")                            \
    X(NO_HEAD_SCALE, 1, "no per-head scale", "no_head_scale")                  \
    X(SCALE_RSQRT_D, 2, "its own scale 1/sqrt(d_head)", "scale_rsqrt_d")       \
    X(WINDOW_CAUSAL, 3, "causal left windows only", "window_causal")           \
    X(ALIBI_CAUSAL, 4, "ALiBi under a causal mask only", "alibi_causal")       \
    X(SINKS_ALWAYS, 5, "sinks always on", "sinks_always")                      \
    X(EMPTY_MEAN, 6, "an empty row gives the mean of v", "empty_mean")         \
    X(EMPTY_NAN, 7, "an empty row gives NaN", "empty_nan")
#define TG_ATTN_CONVENTION_ENUM_(id, bit, name, token) TG_ATTN_C_##id = 1u << (bit),
enum { TG_ATTN_CONVENTION_TABLE(TG_ATTN_CONVENTION_ENUM_) };
enum { TG_ATTN_N_CONVENTIONS = 0 TG_ATTN_CONVENTION_TABLE(TG_ATTN_FEATURE_COUNT_) };
#define TG_ATTN_C_ALL ((1u << TG_ATTN_N_CONVENTIONS) - 1)

/* The plugin ABI this tapegrad takes: 2 = tg_attend_fn on tg_attn_args, and the
 * tg_ctx / tg_node / tg_tensor of tapegrad 0.12. 1 = tg_attention_fn (textbook
 * only), loaded through an adapter. Changed on purpose only, with the version. */
#define TG_ATTENTION_PLUGIN_ABI 2

/* A kernel and what it implements. A plugin exports one per kernel with
 * TG_ATTENTION_PLUGIN; the programs make one for an ABI 1 function (attend NULL,
 * textbook set). `size` is sizeof(tg_attn_kernel) as the plugin was built. */
typedef struct tg_attn_kernel {
    size_t size;
    int abi;                  /* TG_ATTENTION_PLUGIN_ABI when built */
    unsigned features;        /* TG_ATTN_F_* */
    const char *name;
    tg_attend_fn attend;      /* ABI 2 */
    tg_attention_fn textbook; /* ABI 1 (attend NULL): called with the textbook arguments */
    /* Since 0.14 (read only when `size` holds them): a kernel with state of its own (a
     * process it talks to: the training kit's exec kernels), called as attend_self(self, ...)
     * when set; plugins leave both 0. */
    void *self;
    tg_tensor *(*attend_self)(void *self, tg_ctx *ctx, const tg_attn_args *args);
    /* Since 0.17 (read only when `size` holds it; 0 for an older descriptor): TG_ATTN_C_*. */
    unsigned conventions;
} tg_attn_kernel;

#ifdef __cplusplus
#define TG_ATTN_EXTERN_C extern "C"
#else
#define TG_ATTN_EXTERN_C
#endif
/* In a plugin, after the kernel `fn` (a tg_attend_fn):
 *   TG_ATTENTION_PLUGIN(fn, TG_ATTN_F_GQA | TG_ATTN_F_WINDOW)
 * exports tg_attn_plugin_<fn>, a descriptor loading reads (attn_scale --attn
 * plugin:FILE.so:fn). Exported with default visibility and C linkage, so it
 * survives -fvisibility=hidden and C++. */
#define TG_ATTENTION_PLUGIN(fn, feats) TG_ATTENTION_PLUGIN_(fn, feats)   /* fn may be a macro: expanded first */
#define TG_ATTENTION_PLUGIN_(fn, feats)                                                                \
    TG_ATTN_EXTERN_C __attribute__((visibility("default"), used)) const tg_attn_kernel tg_attn_plugin_##fn = \
        {sizeof(tg_attn_kernel), TG_ATTENTION_PLUGIN_ABI, (feats), #fn, fn, 0, 0, 0, 0};
/* A kernel with conventions (0.17): TG_ATTENTION_PLUGIN_CONV(fn, TG_ATTN_F_GQA, TG_ATTN_C_CAUSAL_ONLY) */
#define TG_ATTENTION_PLUGIN_CONV(fn, feats, conv) TG_ATTENTION_PLUGIN_CONV_(fn, feats, conv)
#define TG_ATTENTION_PLUGIN_CONV_(fn, feats, conv)                                                     \
    TG_ATTN_EXTERN_C __attribute__((visibility("default"), used)) const tg_attn_kernel tg_attn_plugin_##fn = \
        {sizeof(tg_attn_kernel), TG_ATTENTION_PLUGIN_ABI, (feats), #fn, fn, 0, 0, 0, (conv)};
/* An ABI 1 plugin (a tg_attention_fn): declares ABI 1, exported alike. */
#define TG_ATTENTION_PLUGIN_DECLARE \
    TG_ATTN_EXTERN_C __attribute__((visibility("default"), used)) const int tg_attention_plugin_abi = 1;

/* The features args use (TG_ATTN_F_*); args as tg_attend takes them. */
unsigned tg_attn_args_features(const tg_attn_args *args);
/* The name of one feature bit ("grouped heads", "window", ...); "?" for others. */
const char *tg_attn_feature_name(unsigned bit);
/* The features of a comma-separated list of tokens ("gqa,window"); an unknown token goes into
 * bad (bad[0] = 0 when none). */
unsigned tg_attn_features_of_tokens(const char *list, char *bad, size_t len);
/* The names of a set, comma-separated, into buf ("none" for 0). */
const char *tg_attn_features_str(unsigned features, char *buf, size_t len);
/* The conventions a descriptor declares (0 when its size does not hold the field). */
unsigned tg_attn_kernel_conventions(const tg_attn_kernel *kernel);
/* The name / token of one convention bit; "?" for others. */
const char *tg_attn_convention_name(unsigned bit);
const char *tg_attn_convention_token(unsigned bit);
/* The conventions of a comma-separated list of tokens; an unknown token goes into bad. */
unsigned tg_attn_conventions_of_tokens(const char *list, char *bad, size_t len);
/* The names of a set of conventions, comma-separated ("none" for 0). */
const char *tg_attn_conventions_str(unsigned conventions, char *buf, size_t len);
/* 0 when features and conventions fit together; else -1 with why in msg (sinks_always without the
 * sinks feature, window_causal without window, alibi_causal without alibi, empty_mean with empty_nan). */
int tg_attn_conventions_valid(unsigned features, unsigned conventions, char *msg, size_t len);
/* 1 with the reason in msg when args fall outside conventions (the first convention they break,
 * named), else 0. Reads shapes, flags and kv_len only. */
int tg_attn_convention_refuses(unsigned conventions, const tg_attn_args *args, char *msg, size_t len);
/* kernel on args: tg_fail naming the kernel and the feature when args use one it
 * did not declare, or the convention when they fall outside one it declared; a kernel with
 * sinks_always gets sinks of −inf when the call has none; an ABI 1 kernel gets the textbook
 * arguments. */
tg_tensor *tg_attn_kernel_call(tg_ctx *ctx, const tg_attn_kernel *kernel, const tg_attn_args *args);
/* The built-in ops as kernels (every feature). */
extern const tg_attn_kernel tg_attn_kernel_composed, tg_attn_kernel_fused;

/* The weights P [B, H, Tq, Tk] (invisible entries 0) that the tg_attend call
 * which made `out` saved on ctx's tape; NULL when that call recorded no node
 * (no input needed a gradient, or grad was disabled). Valid until the reset.
 * The op keeps them key-major (a key's row holds its queries: the softmax runs
 * across queries); this row-major copy is made on ctx's arena at the first
 * call for `out` (hence ctx not const since 0.19), later calls return it. */
const float *tg_attention_probs(tg_ctx *ctx, const tg_tensor *out);

/* The code tg_attend's tiles run on here: "avx512", "avx2" (picked at run time
 * by what the CPU runs; AVX2 on any machine in a -DTG_AVX512_CLONES=OFF build)
 * or "c"; since 0.19.4 "avx512-r4" or "avx2-r4" on AMD family 19h (Zen 4): the
 * same copies with the products a tile wide (16 floats) in blocks of 4 rows.
 * All give the same bits (tests/test_attn_tile.c). Since 0.19. */
const char *tg_attn_tiles(void);

#endif
