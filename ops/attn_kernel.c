/* Attention kernels as plain data (attention.h, "the plugin ABI"): which
 * features a call uses, and the one gate every kernel call goes through. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "attention.h"
#include "flash_attention.h"

#define NAME_(id, bit, name, token) [bit] = name,
#define TOKEN_(id, bit, name, token) [bit] = token,
static const char *const feature_names[TG_ATTN_N_FEATURES] = {TG_ATTN_FEATURE_TABLE(NAME_)};
static const char *const feature_tokens[TG_ATTN_N_FEATURES] = {TG_ATTN_FEATURE_TABLE(TOKEN_)};

const char *tg_attn_feature_name(unsigned bit) {
    for (int i = 0; i < TG_ATTN_N_FEATURES; i++)
        if (bit == 1u << i) return feature_names[i];
    return "?";
}

unsigned tg_attn_features_of_tokens(const char *list, char *bad, size_t len) {
    unsigned f = 0;
    if (len) bad[0] = 0;
    for (const char *p = list; *p;) {
        const size_t n = strcspn(p, ",");
        int i = 0;
        while (i < TG_ATTN_N_FEATURES && !(strlen(feature_tokens[i]) == n && !strncmp(p, feature_tokens[i], n))) i++;
        if (i < TG_ATTN_N_FEATURES) f |= 1u << i;
        else if (len && !bad[0]) snprintf(bad, len, "%.*s", (int)(n < 40 ? n : 40), p);
        p += n + (p[n] == ',');
    }
    return f;
}

const char *tg_attn_features_str(unsigned f, char *buf, size_t len) {
    if (!len) return buf;
    buf[0] = 0;
    size_t used = 0;
    for (int i = 0; i < TG_ATTN_N_FEATURES; i++)
        if (f & (1u << i)) {
            int n = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", feature_names[i]);
            if (n < 0 || (size_t)n >= len - used) break;
            used += (size_t)n;
        }
    if (!used) snprintf(buf, len, "none");
    return buf;
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
    if (self_fn(k)) return self_fn(k)(k->self, ctx, args);
    if (k->attend) return k->attend(ctx, args);
    const tg_attn_args a = tg_attn_args_of(args);
    return k->textbook(ctx, a.q, a.k, a.v, a.head_scale, a.scale, a.causal, a.stats);
}

const tg_attn_kernel tg_attn_kernel_composed = {sizeof(tg_attn_kernel), TG_ATTENTION_PLUGIN_ABI, TG_ATTN_F_ALL,
                                                "composed", tg_attend, NULL, NULL, NULL};
const tg_attn_kernel tg_attn_kernel_fused = {sizeof(tg_attn_kernel), TG_ATTENTION_PLUGIN_ABI, TG_ATTN_F_ALL,
                                             "fused", tg_flash_attend, NULL, NULL, NULL};
