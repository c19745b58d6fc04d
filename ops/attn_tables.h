/* The attention features and conventions: what a kernel declares beyond the textbook call, one
 * table each, every consumer driven by it.
 *
 * A feature is a part of the contract (attn_args.h) a kernel implements: grouped heads, a window,
 * padding, ... A convention is how real model code computes attention where it differs from the
 * contract without being wrong for its model (causal only, its own 1/√d, an empty row that gives
 * the mean of v). Each has two rows of one descriptor:
 *   - a row of its X-macro table below: ID, bit, name, token. ID makes TG_ATTN_F_<ID> (or
 *     TG_ATTN_C_<ID>) = 1 << bit, the constant a plugin declares; name is what messages and reports
 *     say; token is its one identifier outside C (the exec hello, the Python module's FEATURES and
 *     CONVENTIONS in this order, the docs; tests/feature_table.py checks them);
 *   - its behaviour, a row of tg_attn_feature or tg_attn_convention in attn_tables.c: for a
 *     feature, how a call's args use it (the gate and the programs' pre-check), the programs' flag
 *     that turns it on, what carries it on the exec wire and the docs' line; for a convention, when
 *     it refuses a call (the gate, the pre-check), the nearest call inside it (every attn_check probe
 *     sends only such calls), what the gate completes (sinks of −inf) and what an empty row gives.
 * The docs' tables are printed from these rows (attn_check --tables). Adding a feature or a
 * convention is its two rows here and in attn_tables.c, its maths (the ops, attn_geom.c's check),
 * and its probe in attn_check (the kernel layer's checker). */
#ifndef TG_OP_ATTN_TABLES_H
#define TG_OP_ATTN_TABLES_H
#include <stddef.h>

#include "attn_args.h"

/* The features, X(ID, bit, name, token). */
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

/* The conventions (tapegrad 0.17), X(ID, bit, name, token):
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
 *   mqa_only       exactly one key/value head (multi-query: StarCoder's kernels); a call with
 *                  another Hkv is refused (since 0.21, as the next two)
 *   empty_prefix   a row that sees no key averages v over the keys the causal mask alone leaves it
 *                  (a causal where(·, finfo.min) and an added finfo.min padding mask: a key hidden
 *                  twice gets −inf; CodeGen, GPT-NeoX)
 *   scale_folded   no multiplier at all, `scale` ignored: 1/√d_head is folded into W_q's
 *                  initialisation (T5); a call whose scale is not 1 is refused
 * Empty-row conventions make the call that has such a row be refused (its out would not be the
 * contract's 0). */
#define TG_ATTN_CONVENTION_TABLE(X)                                            \
    X(CAUSAL_ONLY, 0, "causal only", "causal_only")                            \
    X(NO_HEAD_SCALE, 1, "no per-head scale", "no_head_scale")                  \
    X(SCALE_RSQRT_D, 2, "its own scale 1/sqrt(d_head)", "scale_rsqrt_d")       \
    X(WINDOW_CAUSAL, 3, "causal left windows only", "window_causal")           \
    X(ALIBI_CAUSAL, 4, "ALiBi under a causal mask only", "alibi_causal")       \
    X(SINKS_ALWAYS, 5, "sinks always on", "sinks_always")                      \
    X(EMPTY_MEAN, 6, "an empty row gives the mean of v", "empty_mean")         \
    X(EMPTY_NAN, 7, "an empty row gives NaN", "empty_nan")                    \
    X(MQA_ONLY, 8, "one key/value head only", "mqa_only")                     \
    X(EMPTY_PREFIX, 9, "an empty row averages its causal prefix", "empty_prefix") \
    X(SCALE_FOLDED, 10, "no scale: 1/sqrt(d_head) folded into W_q", "scale_folded")
#define TG_ATTN_CONVENTION_ENUM_(id, bit, name, token) TG_ATTN_C_##id = 1u << (bit),
enum { TG_ATTN_CONVENTION_TABLE(TG_ATTN_CONVENTION_ENUM_) };
enum { TG_ATTN_N_CONVENTIONS = 0 TG_ATTN_CONVENTION_TABLE(TG_ATTN_FEATURE_COUNT_) };
#define TG_ATTN_C_ALL ((1u << TG_ATTN_N_CONVENTIONS) - 1)

/* A feature's behaviour (since 0.20). */
typedef struct tg_attn_feature {
    unsigned bit;          /* TG_ATTN_F_<ID> */
    const char *name, *token;
    const char *flag;      /* the programs' flag that makes the model use it ("--window"); NULL: none does */
    const char *wire;      /* what carries it in the exec protocol's forward (docs/exec_protocol.md) */
    const char *what;      /* the docs' line: what a call that uses it holds */
    /* 1 when args use it; args complete (tg_attn_args_of) */
    int (*uses)(const tg_attn_args *a);
} tg_attn_feature;

/* What a row that sees no key gives, by the contract (ZERO) or by a convention. */
enum { TG_ATTN_EMPTY_ZERO, TG_ATTN_EMPTY_MEAN, TG_ATTN_EMPTY_NAN, TG_ATTN_EMPTY_PREFIX };

/* A convention's behaviour (since 0.20). */
typedef struct tg_attn_convention {
    unsigned bit;          /* TG_ATTN_C_<ID> */
    const char *name, *token;
    unsigned needs;        /* the features it needs declared (0: none) */
    unsigned excludes;     /* the conventions it cannot be declared with */
    const char *what;      /* the docs' line: the model code that does so */
    /* 1 with why (about the call: "the call is not causal") when args fall outside it; args
     * complete, q and k 4-D */
    int (*refuses)(const tg_attn_args *a, char *why, size_t len);
    /* args moved to the nearest call inside it (NULL: nothing to move); mqa_only's keeps the first
     * key/value head of k and v in place (their tensors shrink to Hkv = 1) */
    void (*fit)(tg_attn_args *a);
    /* what the gate completes a call with before the kernel sees it (NULL: nothing) */
    void (*complete)(tg_ctx *ctx, tg_attn_args *a);
    int empty_row;         /* TG_ATTN_EMPTY_*: what an empty row gives under it */
} tg_attn_convention;

/* Row i (0 .. TG_ATTN_N_FEATURES − 1, in bit order), or NULL outside. */
const tg_attn_feature *tg_attn_feature_row(int i);
const tg_attn_convention *tg_attn_convention_row(int i);

/* The features args use (TG_ATTN_F_*); args as tg_attend takes them. */
unsigned tg_attn_args_features(const tg_attn_args *args);
/* The name of one feature bit ("grouped heads", "window", ...); "?" for others. */
const char *tg_attn_feature_name(unsigned bit);
/* The features of a comma-separated list of tokens ("gqa,window"); an unknown token goes into
 * bad (bad[0] = 0 when none). */
unsigned tg_attn_features_of_tokens(const char *list, char *bad, size_t len);
/* The names of a set, comma-separated, into buf ("none" for 0). */
const char *tg_attn_features_str(unsigned features, char *buf, size_t len);
/* The name / token of one convention bit; "?" for others. */
const char *tg_attn_convention_name(unsigned bit);
const char *tg_attn_convention_token(unsigned bit);
/* The conventions of a comma-separated list of tokens; an unknown token goes into bad. */
unsigned tg_attn_conventions_of_tokens(const char *list, char *bad, size_t len);
/* The names of a set of conventions, comma-separated ("none" for 0). */
const char *tg_attn_conventions_str(unsigned conventions, char *buf, size_t len);
/* 0 when features and conventions fit together (each convention's needs and excludes); else -1
 * with why in msg. */
int tg_attn_conventions_valid(unsigned features, unsigned conventions, char *msg, size_t len);
/* 1 with the reason in msg when args fall outside conventions (the first convention they break,
 * named), else 0. Reads shapes, flags and kv_len only. */
int tg_attn_convention_refuses(unsigned conventions, const tg_attn_args *args, char *msg, size_t len);
/* args moved to the nearest call inside every one of conventions (their fits, in bit order). */
void tg_attn_conform(unsigned conventions, tg_attn_args *args);
/* What an empty row gives under conventions: TG_ATTN_EMPTY_*, and in *which the convention that
 * says so (0: the contract's 0). */
int tg_attn_empty_row(unsigned conventions, unsigned *which);

#endif
