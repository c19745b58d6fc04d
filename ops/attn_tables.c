/* The features' and conventions' behaviour (attn_tables.h): one row each, in bit order. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attn_tables.h"

/* ---- features ------------------------------------------------------------------------------ */
/* the shape features: only of q, k, v that are 4-D (a malformed call is the op's to refuse) */
static int shaped3(const tg_attn_args *a) {
    return a->q && a->k && a->v && a->q->ndim == 4 && a->k->ndim == 4 && a->v->ndim == 4;
}
static int uses_dv(const tg_attn_args *a) { return shaped3(a) && a->v->shape[3] != a->q->shape[3]; }
static int uses_gqa(const tg_attn_args *a) { return shaped3(a) && a->k->shape[2] != a->q->shape[2]; }
static int uses_tq_tk(const tg_attn_args *a) { return shaped3(a) && a->k->shape[1] != a->q->shape[1]; }
static int uses_window(const tg_attn_args *a) { return a->window_left >= 0 || (a->window_right >= 0 && !a->causal); }
static int uses_padding(const tg_attn_args *a) { return a->kv_len != NULL; }
static int uses_bias(const tg_attn_args *a) { return a->bias != NULL; }
static int uses_alibi(const tg_attn_args *a) { return a->alibi != NULL; }
static int uses_softcap(const tg_attn_args *a) { return a->softcap > 0; }
static int uses_sinks(const tg_attn_args *a) { return a->sinks != NULL; }
static int uses_dropout(const tg_attn_args *a) { return a->dropout > 0; }

/* name_<ID>, token_<ID>: the table's words, for the rows below */
#define WORDS_(id, bit, name, token) static const char name_##id[] = name, token_##id[] = token;
TG_ATTN_FEATURE_TABLE(WORDS_)
TG_ATTN_CONVENTION_TABLE(WORDS_)

/* a row a feature, in the table's order (tests/ops/test_attention.c checks the bits) */
static const tg_attn_feature features[] = {
    {TG_ATTN_F_DV, name_DV, token_DV, NULL, "v's last dim", "v [B, Tk, Hkv, dv] with dv != d", uses_dv},
    {TG_ATTN_F_GQA, name_GQA, token_GQA, "--kv-heads", "k's and v's third dim",
     "Hkv < H key/value heads: query head h reads kv head h / (H / Hkv)", uses_gqa},
    {TG_ATTN_F_TQ_TK, name_TQ_TK, token_TQ_TK, NULL, "q's and k's second dims",
     "Tq != Tk: the queries are the last Tq positions (bottom-right)", uses_tq_tk},
    {TG_ATTN_F_WINDOW, name_WINDOW, token_WINDOW, "--window", "window_left, window_right",
     "a window: keys p_i - left .. p_i + right (-1: unbounded)", uses_window},
    {TG_ATTN_F_PADDING, name_PADDING, token_PADDING, NULL, "kv_len [B] (whole numbers as F32)",
     "padding: batch row b's keys from kv_len[b] on hidden", uses_padding},
    {TG_ATTN_F_BIAS, name_BIAS, token_BIAS, "--bias", "bias [B or 1, H or 1, Tq, Tk]; dbias",
     "an additive bias on the scaled logits (-inf hides a key)", uses_bias},
    {TG_ATTN_F_ALIBI, name_ALIBI, token_ALIBI, "--alibi", "alibi [H]", "ALiBi: logit -= slope_h * abs(j - p_i)", uses_alibi},
    {TG_ATTN_F_SOFTCAP, name_SOFTCAP, token_SOFTCAP, "--softcap", "softcap",
     "soft-capping: cap * tanh(x / cap) on the scaled logits, before bias and ALiBi", uses_softcap},
    {TG_ATTN_F_SINKS, name_SINKS, token_SINKS, "--sinks", "sinks [H]; dsinks",
     "a sink logit per query head in each row's denominator", uses_sinks},
    {TG_ATTN_F_DROPOUT, name_DROPOUT, token_DROPOUT, "--attn-dropout", "dropout, dropout_seed",
     "dropout of the weights, its mask from dropout_seed (tg_attn_kept)", uses_dropout},
};
_Static_assert(sizeof features / sizeof features[0] == TG_ATTN_N_FEATURES,
               "a feature of TG_ATTN_FEATURE_TABLE without its row in features[]");

const tg_attn_feature *tg_attn_feature_row(int i) { return i >= 0 && i < TG_ATTN_N_FEATURES ? &features[i] : NULL; }

/* ---- conventions ------------------------------------------------------------------------------ */
static int shaped(const tg_attn_args *a) { return a->q && a->k && a->q->ndim == 4 && a->k->ndim == 4; }

static int refuses_causal_only(const tg_attn_args *a, char *why, size_t len) {
    return a->causal ? 0 : (snprintf(why, len, "the call is not causal"), 1);
}
static void fit_causal_only(tg_attn_args *a) { a->causal = 1; }

static int refuses_no_head_scale(const tg_attn_args *a, char *why, size_t len) {
    return !a->head_scale ? 0 : (snprintf(why, len, "the call has a per-head scale (head_scale)"), 1);
}
static void fit_no_head_scale(tg_attn_args *a) { a->head_scale = NULL; }

static int refuses_scale_rsqrt_d(const tg_attn_args *a, char *why, size_t len) {
    if (!shaped(a)) return 0;
    const float own = 1.0f / sqrtf((float)a->q->shape[3]);
    if (a->scale == own) return 0;
    snprintf(why, len, "the call's scale is %.6g, not 1/sqrt(%d) = %.6g, and the kernel applies its own", a->scale,
             a->q->shape[3], own);
    return 1;
}
static void fit_scale_rsqrt_d(tg_attn_args *a) { a->scale = 1.0f / sqrtf((float)a->q->shape[3]); }

static int refuses_window_causal(const tg_attn_args *a, char *why, size_t len) {
    if (!(a->window_left >= 0 || a->window_right >= 0) || a->causal) return 0;
    return snprintf(why, len, "the call has a window without the causal mask"), 1;
}
static void fit_window_causal(tg_attn_args *a) {
    if (a->window_left >= 0 || a->window_right >= 0) a->causal = 1, a->window_right = -1;
}

static int refuses_alibi_causal(const tg_attn_args *a, char *why, size_t len) {
    return !a->alibi || a->causal ? 0 : (snprintf(why, len, "the call has ALiBi without the causal mask"), 1);
}
static void fit_alibi_causal(tg_attn_args *a) {
    if (a->alibi) a->causal = 1;
}

static void complete_sinks_always(tg_ctx *ctx, tg_attn_args *a) {   /* e^−inf = 0: the softmax without sinks */
    if (a->sinks) return;
    a->sinks = tg_new(ctx, 1, (int[]){a->q->shape[2]});
    for (int h = 0; h < a->q->shape[2]; h++) a->sinks->data[h] = -INFINITY;
}

/* The first row of args that sees no key: 1 with (*b, *i), else 0. */
static int empty_row_of(const tg_attn_args *a, int *b, int *i) {
    for (*b = 0; *b < a->q->shape[0]; ++*b)
        for (*i = 0; *i < a->q->shape[1]; ++*i) {
            int lo, hi;
            tg_attn_visible(a, *b, *i, &lo, &hi);
            if (lo == hi) return 1;
        }
    return 0;
}
static int refuses_empty(const tg_attn_args *a, const char *gives, char *why, size_t len) {
    int b, i;
    if (!shaped(a) || !empty_row_of(a, &b, &i)) return 0;
    return snprintf(why, len, "row %d of batch row %d sees no key, which gives %s there, not 0", i, b, gives), 1;
}
static int refuses_empty_mean(const tg_attn_args *a, char *why, size_t len) { return refuses_empty(a, "the mean of v", why, len); }
static int refuses_empty_nan(const tg_attn_args *a, char *why, size_t len) { return refuses_empty(a, "NaN", why, len); }
static int refuses_empty_prefix(const tg_attn_args *a, char *why, size_t len) {
    return refuses_empty(a, "the mean of v over its causal prefix", why, len);
}

static int refuses_mqa_only(const tg_attn_args *a, char *why, size_t len) {
    if (!shaped(a) || a->k->shape[2] == 1) return 0;
    return snprintf(why, len, "the call has %d key/value heads, not 1", a->k->shape[2]), 1;
}
/* k's (and v's) first head, compacted in place: [B, Tk, Hkv, d] → [B, Tk, 1, d] */
static void first_head(tg_tensor *t) {
    const int B = t->shape[0], T = t->shape[1], Hkv = t->shape[2], d = t->shape[3];
    if (Hkv == 1) return;
    if (t->data)
        for (int64_t r = 0; r < (int64_t)B * T; r++) memmove(t->data + r * d, t->data + r * Hkv * d, sizeof(float) * d);
    t->shape[2] = 1, t->numel = (int64_t)B * T * d;
}
static void fit_mqa_only(tg_attn_args *a) {
    if (!shaped(a) || !a->v || a->v->ndim != 4) return;
    first_head(a->k);
    if (a->v != a->k) first_head(a->v);
}

static int refuses_scale_folded(const tg_attn_args *a, char *why, size_t len) {
    if (a->scale == 1.0f) return 0;
    return snprintf(why, len, "the call's scale is %.6g, not 1, and the kernel applies none (1/sqrt(d_head) folded "
                    "into W_q's initialisation)", a->scale), 1;
}
static void fit_scale_folded(tg_attn_args *a) { a->scale = 1.0f; }

/* a row a convention, in the table's order */
static const tg_attn_convention conventions[] = {
    {TG_ATTN_C_CAUSAL_ONLY, name_CAUSAL_ONLY, token_CAUSAL_ONLY, 0, 0,
     "every call causal: a non-causal one is refused (most decoder kernels)", refuses_causal_only, fit_causal_only,
     NULL, TG_ATTN_EMPTY_ZERO},
    {TG_ATTN_C_NO_HEAD_SCALE, name_NO_HEAD_SCALE, token_NO_HEAD_SCALE, 0, 0,
     "no per-head scale: a call with head_scale is refused", refuses_no_head_scale, fit_no_head_scale, NULL,
     TG_ATTN_EMPTY_ZERO},
    {TG_ATTN_C_SCALE_RSQRT_D, name_SCALE_RSQRT_D, token_SCALE_RSQRT_D, 0, TG_ATTN_C_SCALE_FOLDED,
     "its own multiplier 1/sqrt(d), `scale` ignored: a call with another scale is refused (nanoGPT)",
     refuses_scale_rsqrt_d, fit_scale_rsqrt_d, NULL, TG_ATTN_EMPTY_ZERO},
    {TG_ATTN_C_WINDOW_CAUSAL, name_WINDOW_CAUSAL, token_WINDOW_CAUSAL, TG_ATTN_F_WINDOW, 0,
     "windows only as causal left windows (Mistral, Gemma 2)", refuses_window_causal, fit_window_causal, NULL,
     TG_ATTN_EMPTY_ZERO},
    {TG_ATTN_C_ALIBI_CAUSAL, name_ALIBI_CAUSAL, token_ALIBI_CAUSAL, TG_ATTN_F_ALIBI, 0,
     "ALiBi only under a causal mask: the one-sided ramp slope * j (BLOOM)", refuses_alibi_causal, fit_alibi_causal,
     NULL, TG_ATTN_EMPTY_ZERO},
    {TG_ATTN_C_SINKS_ALWAYS, name_SINKS_ALWAYS, token_SINKS_ALWAYS, TG_ATTN_F_SINKS, 0,
     "no call without sinks: one without gets sinks of -inf (GPT-OSS)", NULL, NULL, complete_sinks_always,
     TG_ATTN_EMPTY_ZERO},
    {TG_ATTN_C_EMPTY_MEAN, name_EMPTY_MEAN, token_EMPTY_MEAN, 0, TG_ATTN_C_EMPTY_NAN | TG_ATTN_C_EMPTY_PREFIX,
     "a row that sees no key gives the mean of v (an additive finfo.min mask: transformers' eager code)",
     refuses_empty_mean, NULL, NULL, TG_ATTN_EMPTY_MEAN},
    {TG_ATTN_C_EMPTY_NAN, name_EMPTY_NAN, token_EMPTY_NAN, 0, TG_ATTN_C_EMPTY_MEAN | TG_ATTN_C_EMPTY_PREFIX,
     "a row that sees no key gives NaN (a -inf mask: 0/0)", refuses_empty_nan, NULL, NULL, TG_ATTN_EMPTY_NAN},
    {TG_ATTN_C_MQA_ONLY, name_MQA_ONLY, token_MQA_ONLY, TG_ATTN_F_GQA, 0,
     "exactly one key/value head (multi-query: StarCoder/GPTBigCode's kernels)", refuses_mqa_only, fit_mqa_only, NULL,
     TG_ATTN_EMPTY_ZERO},
    {TG_ATTN_C_EMPTY_PREFIX, name_EMPTY_PREFIX, token_EMPTY_PREFIX, 0, TG_ATTN_C_EMPTY_MEAN | TG_ATTN_C_EMPTY_NAN,
     "a row that sees no key averages v over its causal prefix (a causal where(., finfo.min) plus an added finfo.min "
     "padding mask: CodeGen, GPT-NeoX)", refuses_empty_prefix, NULL, NULL, TG_ATTN_EMPTY_PREFIX},
    {TG_ATTN_C_SCALE_FOLDED, name_SCALE_FOLDED, token_SCALE_FOLDED, 0, TG_ATTN_C_SCALE_RSQRT_D,
     "no multiplier, `scale` ignored: 1/sqrt(d_head) folded into W_q's initialisation (T5); a call with another scale "
     "is refused", refuses_scale_folded, fit_scale_folded, NULL, TG_ATTN_EMPTY_ZERO},
};
_Static_assert(sizeof conventions / sizeof conventions[0] == TG_ATTN_N_CONVENTIONS,
               "a convention of TG_ATTN_CONVENTION_TABLE without its row in conventions[]");

const tg_attn_convention *tg_attn_convention_row(int i) {
    return i >= 0 && i < TG_ATTN_N_CONVENTIONS ? &conventions[i] : NULL;
}

/* ---- names, tokens, sets ---------------------------------------------------------------------- */
static const char *row_name(int conv, int i) {
    return conv ? tg_attn_convention_row(i)->name : tg_attn_feature_row(i)->name;
}
static const char *row_token(int conv, int i) {
    return conv ? tg_attn_convention_row(i)->token : tg_attn_feature_row(i)->token;
}

/* tokens → bits over one table (conv: the conventions', else the features') */
static unsigned of_tokens(int conv, const char *list, char *bad, size_t len) {
    const int n_rows = conv ? TG_ATTN_N_CONVENTIONS : TG_ATTN_N_FEATURES;
    unsigned f = 0;
    if (len) bad[0] = 0;
    for (const char *p = list; *p;) {
        const size_t n = strcspn(p, ",");
        int i = 0;
        while (i < n_rows && !(strlen(row_token(conv, i)) == n && !strncmp(p, row_token(conv, i), n))) i++;
        if (i < n_rows) f |= 1u << i;
        else if (len && !bad[0]) snprintf(bad, len, "%.*s", (int)(n < 40 ? n : 40), p);
        p += n + (p[n] == ',');
    }
    return f;
}

static const char *names_str(int conv, unsigned f, char *buf, size_t len) {
    if (!len) return buf;
    buf[0] = 0;
    size_t used = 0;
    for (int i = 0; i < (conv ? TG_ATTN_N_CONVENTIONS : TG_ATTN_N_FEATURES); i++)
        if (f & (1u << i)) {
            int n = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", row_name(conv, i));
            if (n < 0 || (size_t)n >= len - used) break;
            used += (size_t)n;
        }
    if (!used) snprintf(buf, len, "none");
    return buf;
}

static int bit_index(int n_rows, unsigned bit) {
    for (int i = 0; i < n_rows; i++)
        if (bit == 1u << i) return i;
    return -1;
}

const char *tg_attn_feature_name(unsigned bit) {
    const int i = bit_index(TG_ATTN_N_FEATURES, bit);
    return i < 0 ? "?" : tg_attn_feature_row(i)->name;
}
const char *tg_attn_convention_name(unsigned bit) {
    const int i = bit_index(TG_ATTN_N_CONVENTIONS, bit);
    return i < 0 ? "?" : tg_attn_convention_row(i)->name;
}
const char *tg_attn_convention_token(unsigned bit) {
    const int i = bit_index(TG_ATTN_N_CONVENTIONS, bit);
    return i < 0 ? "?" : tg_attn_convention_row(i)->token;
}
unsigned tg_attn_features_of_tokens(const char *list, char *bad, size_t len) { return of_tokens(0, list, bad, len); }
unsigned tg_attn_conventions_of_tokens(const char *list, char *bad, size_t len) { return of_tokens(1, list, bad, len); }
const char *tg_attn_features_str(unsigned f, char *buf, size_t len) { return names_str(0, f, buf, len); }
const char *tg_attn_conventions_str(unsigned c, char *buf, size_t len) { return names_str(1, c, buf, len); }

/* ---- what the gate, the pre-check and the probes ask ------------------------------------------ */
unsigned tg_attn_args_features(const tg_attn_args *args) {
    const tg_attn_args a = tg_attn_args_of(args);   /* fields past the caller's size at their defaults */
    unsigned f = 0;
    for (int i = 0; i < TG_ATTN_N_FEATURES; i++)
        if (features[i].uses(&a)) f |= features[i].bit;
    return f;
}

int tg_attn_conventions_valid(unsigned f, unsigned c, char *msg, size_t len) {
    char why[400] = "";
    if (c & ~TG_ATTN_C_ALL) snprintf(why, sizeof why, "an unknown convention bit");
    for (int i = 0; i < TG_ATTN_N_CONVENTIONS && !why[0]; i++) {
        const tg_attn_convention *r = tg_attn_convention_row(i);
        if (!(c & r->bit)) continue;
        if (r->needs & ~f) {
            char names[120];
            snprintf(why, sizeof why, "%s (%s) without the %s feature", r->token, r->name,
                     tg_attn_features_str(r->needs & ~f, names, sizeof names));
        } else if (r->excludes & c)
            snprintf(why, sizeof why, "%s with %s", r->token, tg_attn_convention_token(r->excludes & c & -(r->excludes & c)));
    }
    if (why[0] && len) snprintf(msg, len, "conventions that do not fit: %s", why);
    return why[0] ? -1 : 0;
}

int tg_attn_convention_refuses(unsigned c, const tg_attn_args *args, char *msg, size_t len) {
    if (!c) return 0;   /* every call of a kernel without conventions: the gate's common case */
    const tg_attn_args a = tg_attn_args_of(args);
    for (int i = 0; i < TG_ATTN_N_CONVENTIONS; i++) {
        const tg_attn_convention *r = tg_attn_convention_row(i);
        char why[200];
        if (!(c & r->bit) || !r->refuses || !r->refuses(&a, why, sizeof why)) continue;
        if (len) snprintf(msg, len, "%s (its convention %s: %s)", why, r->token, r->name);
        return 1;
    }
    return 0;
}

void tg_attn_conform(unsigned c, tg_attn_args *a) {
    for (int i = 0; i < TG_ATTN_N_CONVENTIONS; i++) {
        const tg_attn_convention *r = tg_attn_convention_row(i);
        if (c & r->bit && r->fit) r->fit(a);
    }
}

int tg_attn_empty_row(unsigned c, unsigned *which) {
    for (int i = 0; i < TG_ATTN_N_CONVENTIONS; i++) {
        const tg_attn_convention *r = tg_attn_convention_row(i);
        if (c & r->bit && r->empty_row != TG_ATTN_EMPTY_ZERO) {
            if (which) *which = r->bit;
            return r->empty_row;
        }
    }
    if (which) *which = 0;
    return TG_ATTN_EMPTY_ZERO;
}
