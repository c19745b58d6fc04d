/* Attention kernels as plain data (attention.h, "the plugin ABI"): which
 * features a call uses, and the one gate every kernel call goes through. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "attention.h"
#include "flash_attention.h"

#define NAME_(id, bit, name, token) [bit] = name,
#define TOKEN_(id, bit, name, token) [bit] = token,
static const char *const feature_names[TG_ATTN_N_FEATURES] = {TG_ATTN_FEATURE_TABLE(NAME_)};
static const char *const feature_tokens[TG_ATTN_N_FEATURES] = {TG_ATTN_FEATURE_TABLE(TOKEN_)};

static const char *const convention_names[TG_ATTN_N_CONVENTIONS] = {TG_ATTN_CONVENTION_TABLE(NAME_)};
static const char *const convention_tokens[TG_ATTN_N_CONVENTIONS] = {TG_ATTN_CONVENTION_TABLE(TOKEN_)};

/* tokens → bits over one table (features or conventions) */
static unsigned of_tokens(const char *const *tokens, int n_tokens, const char *list, char *bad, size_t len) {
    unsigned f = 0;
    if (len) bad[0] = 0;
    for (const char *p = list; *p;) {
        const size_t n = strcspn(p, ",");
        int i = 0;
        while (i < n_tokens && !(strlen(tokens[i]) == n && !strncmp(p, tokens[i], n))) i++;
        if (i < n_tokens) f |= 1u << i;
        else if (len && !bad[0]) snprintf(bad, len, "%.*s", (int)(n < 40 ? n : 40), p);
        p += n + (p[n] == ',');
    }
    return f;
}

static const char *names_str(const char *const *names, int n_names, unsigned f, char *buf, size_t len) {
    if (!len) return buf;
    buf[0] = 0;
    size_t used = 0;
    for (int i = 0; i < n_names; i++)
        if (f & (1u << i)) {
            int n = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", names[i]);
            if (n < 0 || (size_t)n >= len - used) break;
            used += (size_t)n;
        }
    if (!used) snprintf(buf, len, "none");
    return buf;
}

static const char *bit_name(const char *const *names, int n_names, unsigned bit) {
    for (int i = 0; i < n_names; i++)
        if (bit == 1u << i) return names[i];
    return "?";
}

const char *tg_attn_convention_name(unsigned bit) { return bit_name(convention_names, TG_ATTN_N_CONVENTIONS, bit); }
const char *tg_attn_convention_token(unsigned bit) { return bit_name(convention_tokens, TG_ATTN_N_CONVENTIONS, bit); }

unsigned tg_attn_conventions_of_tokens(const char *list, char *bad, size_t len) {
    return of_tokens(convention_tokens, TG_ATTN_N_CONVENTIONS, list, bad, len);
}

const char *tg_attn_conventions_str(unsigned c, char *buf, size_t len) {
    return names_str(convention_names, TG_ATTN_N_CONVENTIONS, c, buf, len);
}

unsigned tg_attn_kernel_conventions(const tg_attn_kernel *k) {
    return k && k->size >= offsetof(tg_attn_kernel, conventions) + sizeof k->conventions ? k->conventions : 0;
}

int tg_attn_conventions_valid(unsigned f, unsigned c, char *msg, size_t len) {
    const char *why = c & ~TG_ATTN_C_ALL ? "an unknown convention bit"
                      : c & TG_ATTN_C_SINKS_ALWAYS && !(f & TG_ATTN_F_SINKS) ? "sinks always on without the sinks feature"
                      : c & TG_ATTN_C_WINDOW_CAUSAL && !(f & TG_ATTN_F_WINDOW) ? "causal left windows without the window feature"
                      : c & TG_ATTN_C_ALIBI_CAUSAL && !(f & TG_ATTN_F_ALIBI) ? "ALiBi under a causal mask without the alibi feature"
                      : (c & TG_ATTN_C_EMPTY_MEAN) && (c & TG_ATTN_C_EMPTY_NAN) ? "empty rows both the mean of v and NaN"
                      : NULL;
    if (why && len) snprintf(msg, len, "conventions that do not fit: %s", why);
    return why ? -1 : 0;
}

/* The first row of args that sees no key: 1 with (*b, *i), else 0. */
static int empty_row(const tg_attn_args *a, int *b, int *i) {
    for (*b = 0; *b < a->q->shape[0]; ++*b)
        for (*i = 0; *i < a->q->shape[1]; ++*i) {
            int lo, hi;
            tg_attn_visible(a, *b, *i, &lo, &hi);
            if (lo == hi) return 1;
        }
    return 0;
}

int tg_attn_convention_refuses(unsigned c, const tg_attn_args *args, char *msg, size_t len) {
    const tg_attn_args a = tg_attn_args_of(args);
    const int shaped = a.q && a.k && a.q->ndim == 4 && a.k->ndim == 4;
    const float own = shaped ? 1.0f / sqrtf((float)a.q->shape[3]) : 0;
    char why[160] = "";
    unsigned bit = 0;
    int b, i;
    if (c & TG_ATTN_C_CAUSAL_ONLY && !a.causal)
        bit = TG_ATTN_C_CAUSAL_ONLY, snprintf(why, sizeof why, "the call is not causal");
    else if (c & TG_ATTN_C_NO_HEAD_SCALE && a.head_scale)
        bit = TG_ATTN_C_NO_HEAD_SCALE, snprintf(why, sizeof why, "the call has a per-head scale (head_scale)");
    else if (c & TG_ATTN_C_SCALE_RSQRT_D && shaped && a.scale != own)
        bit = TG_ATTN_C_SCALE_RSQRT_D, snprintf(why, sizeof why, "the call's scale is %.6g, not 1/sqrt(%d) = %.6g, "
                                                "and the kernel applies its own", a.scale, a.q->shape[3], own);
    else if (c & TG_ATTN_C_WINDOW_CAUSAL && (a.window_left >= 0 || a.window_right >= 0) && !a.causal)
        bit = TG_ATTN_C_WINDOW_CAUSAL, snprintf(why, sizeof why, "the call has a window without the causal mask");
    else if (c & TG_ATTN_C_ALIBI_CAUSAL && a.alibi && !a.causal)
        bit = TG_ATTN_C_ALIBI_CAUSAL, snprintf(why, sizeof why, "the call has ALiBi without the causal mask");
    else if (c & (TG_ATTN_C_EMPTY_MEAN | TG_ATTN_C_EMPTY_NAN) && shaped && empty_row(&a, &b, &i))
        bit = c & (TG_ATTN_C_EMPTY_MEAN | TG_ATTN_C_EMPTY_NAN),
        snprintf(why, sizeof why, "row %d of batch row %d sees no key, which gives %s there, not 0", i, b,
                 c & TG_ATTN_C_EMPTY_MEAN ? "the mean of v" : "NaN");
    if (!bit) return 0;
    if (len) snprintf(msg, len, "%s (its convention %s: %s)", why, tg_attn_convention_token(bit), tg_attn_convention_name(bit));
    return 1;
}

const char *tg_attn_feature_name(unsigned bit) { return bit_name(feature_names, TG_ATTN_N_FEATURES, bit); }

unsigned tg_attn_features_of_tokens(const char *list, char *bad, size_t len) {
    return of_tokens(feature_tokens, TG_ATTN_N_FEATURES, list, bad, len);
}

const char *tg_attn_features_str(unsigned f, char *buf, size_t len) {
    return names_str(feature_names, TG_ATTN_N_FEATURES, f, buf, len);
}

unsigned tg_attn_args_features(const tg_attn_args *args) {
    const tg_attn_args a = tg_attn_args_of(args);   /* fields past the caller's size at their defaults */
    unsigned f = 0;
    if (a.q && a.v && a.v->ndim == 4 && a.q->ndim == 4 && a.v->shape[3] != a.q->shape[3]) f |= TG_ATTN_F_DV;
    if (a.q && a.k && a.k->ndim == 4 && a.q->ndim == 4) {
        if (a.k->shape[2] != a.q->shape[2]) f |= TG_ATTN_F_GQA;
        if (a.k->shape[1] != a.q->shape[1]) f |= TG_ATTN_F_TQ_TK;
    }
    if (a.window_left >= 0 || (a.window_right >= 0 && !a.causal)) f |= TG_ATTN_F_WINDOW;
    if (a.kv_len) f |= TG_ATTN_F_PADDING;
    if (a.bias) f |= TG_ATTN_F_BIAS;
    if (a.alibi) f |= TG_ATTN_F_ALIBI;
    if (a.softcap > 0) f |= TG_ATTN_F_SOFTCAP;
    if (a.sinks) f |= TG_ATTN_F_SINKS;
    if (a.dropout > 0) f |= TG_ATTN_F_DROPOUT;
    return f;
}

/* attend_self, if the caller's descriptor is new enough to hold it */
static tg_tensor *(*self_fn(const tg_attn_kernel *k))(void *, tg_ctx *, const tg_attn_args *) {
    return k->size >= offsetof(tg_attn_kernel, attend_self) + sizeof k->attend_self ? k->attend_self : NULL;
}

tg_tensor *tg_attn_kernel_call(tg_ctx *ctx, const tg_attn_kernel *k, const tg_attn_args *args) {
    if (!k || (!k->attend && !k->textbook && !self_fn(k)))
        tg_fail(ctx, "tg_attn_kernel_call: no kernel (NULL or no function)");
    if (!args) tg_fail(ctx, "tg_attn_kernel_call: args is NULL");
    const unsigned missing = tg_attn_args_features(args) & ~k->features;
    if (missing) {
        char want[200], has[200];
        tg_fail(ctx, "attention kernel %s: the call uses %s, which the kernel does not declare (it declares: %s)",
                k->name ? k->name : "(unnamed)", tg_attn_features_str(missing, want, sizeof want),
                tg_attn_features_str(k->features, has, sizeof has));
    }
    const unsigned conv = tg_attn_kernel_conventions(k);
    char why[300];
    if (tg_attn_convention_refuses(conv, args, why, sizeof why))
        tg_fail(ctx, "attention kernel %s: %s", k->name ? k->name : "(unnamed)", why);
    tg_attn_args a = tg_attn_args_of(args);
    if (conv & TG_ATTN_C_SINKS_ALWAYS && !a.sinks) {   /* e^−inf = 0: the contract's softmax without sinks */
        a.sinks = tg_new(ctx, 1, (int[]){a.q->shape[2]});
        for (int h = 0; h < a.q->shape[2]; h++) a.sinks->data[h] = -INFINITY;
        args = &a;
    }
    if (self_fn(k)) return self_fn(k)(k->self, ctx, args);
    if (k->attend) return k->attend(ctx, args);
    return k->textbook(ctx, a.q, a.k, a.v, a.head_scale, a.scale, a.causal, a.stats);
}

const tg_attn_kernel tg_attn_kernel_composed = {sizeof(tg_attn_kernel), TG_ATTENTION_PLUGIN_ABI, TG_ATTN_F_ALL,
                                                "composed", tg_attend, NULL, NULL, NULL, 0};
const tg_attn_kernel tg_attn_kernel_fused = {sizeof(tg_attn_kernel), TG_ATTENTION_PLUGIN_ABI, TG_ATTN_F_ALL,
                                             "fused", tg_flash_attend, NULL, NULL, NULL, 0};
