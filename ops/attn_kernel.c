/* The kernel ABI's gate (attn_kernel.h): every call of a kernel goes through tg_attn_kernel_call,
 * which asks the tables (attn_tables.h) whether the kernel takes the call. */
#include <stdio.h>

#include "attention.h"
#include "attn_kernel.h"
#include "flash_attention.h"

unsigned tg_attn_kernel_conventions(const tg_attn_kernel *k) {
    return k && k->size >= offsetof(tg_attn_kernel, conventions) + sizeof k->conventions ? k->conventions : 0;
}

int tg_attn_kernel_precision(const tg_attn_kernel *k) {
    return k && k->size >= offsetof(tg_attn_kernel, precision) + sizeof k->precision ? k->precision : TG_FP32;
}

int tg_attn_declared_valid(const tg_attn_kernel *k, char *msg, size_t len) {
    const unsigned conv = tg_attn_kernel_conventions(k);
    const int prec = tg_attn_kernel_precision(k);
    if (prec < 0 || prec >= TG_N_PRECISIONS)
        return snprintf(msg, len, "precision %d this program does not know (it knows fp32, bf16 and fp16)", prec), -1;
    if (k->features & ~TG_ATTN_F_ALL)
        return snprintf(msg, len, "features 0x%x this program does not know (it knows 0x%x): built against a newer "
                        "tapegrad?", k->features, (unsigned)TG_ATTN_F_ALL), -1;
    if (conv & ~TG_ATTN_C_ALL)
        return snprintf(msg, len, "conventions 0x%x this program does not know (it knows 0x%x): built against a "
                        "newer tapegrad?", conv, (unsigned)TG_ATTN_C_ALL), -1;
    return tg_attn_conventions_valid(k->features, conv, msg, len);
}

int tg_attn_declared_read(tg_attn_kernel *k, const char *(*value)(void *u, const char *key), void *u, char *msg,
                          size_t len) {
    const char *feats = value(u, "features"), *convs = value(u, "conventions");   /* conventions: optional (0.17) */
    char bad[48] = "";
    if (!feats) return snprintf(msg, len, "the kernel gave no features"), -1;
    k->features = tg_attn_features_of_tokens(feats, bad, sizeof bad);
    if (bad[0]) return snprintf(msg, len, "unknown feature %s", bad), -1;
    k->conventions = convs ? tg_attn_conventions_of_tokens(convs, bad, sizeof bad) : 0;
    if (bad[0]) return snprintf(msg, len, "unknown convention %s", bad), -1;
    const char *prec = value(u, "precision");   /* optional (0.21) */
    k->precision = prec ? tg_precision_of(prec) : TG_FP32;
    if (k->precision < 0) return snprintf(msg, len, "unknown precision %.40s (fp32, bf16 or fp16)", prec), -1;
    return tg_attn_declared_valid(k, msg, len);
}

const char *tg_attn_declared_str(const tg_attn_kernel *k, char *buf, size_t len) {
    char feats[256], conv[256];
    const unsigned c = tg_attn_kernel_conventions(k);
    tg_attn_features_str(k->features, feats, sizeof feats);
    const int prec = tg_attn_kernel_precision(k);
    char p[32] = "";
    if (prec != TG_FP32) snprintf(p, sizeof p, "; precision %s", tg_precision_name(prec));
    if (c) snprintf(buf, len, "%s; conventions: %s%s", feats, tg_attn_conventions_str(c, conv, sizeof conv), p);
    else snprintf(buf, len, "%s%s", feats, p);
    return buf;
}

int tg_attn_kernel_refuses(const tg_attn_kernel *k, const tg_attn_args *args, char *msg, size_t len) {
    const unsigned missing = tg_attn_args_features(args) & ~k->features;
    if (missing) {
        char want[200], has[200];
        if (len)
            snprintf(msg, len, "the call uses %s, which the kernel does not declare (it declares: %s)",
                     tg_attn_features_str(missing, want, sizeof want), tg_attn_features_str(k->features, has, sizeof has));
        return 1;
    }
    return tg_attn_convention_refuses(tg_attn_kernel_conventions(k), args, msg, len);
}

/* attend_self, if the caller's descriptor is new enough to hold it */
static tg_tensor *(*self_fn(const tg_attn_kernel *k))(void *, tg_ctx *, const tg_attn_args *) {
    return k->size >= offsetof(tg_attn_kernel, attend_self) + sizeof k->attend_self ? k->attend_self : NULL;
}

tg_tensor *tg_attn_kernel_call(tg_ctx *ctx, const tg_attn_kernel *k, const tg_attn_args *args) {
    if (!k || (!k->attend && !k->textbook && !self_fn(k)))
        tg_fail(ctx, "tg_attn_kernel_call: no kernel (NULL or no function)");
    if (!args) tg_fail(ctx, "tg_attn_kernel_call: args is NULL");
    char why[400];
    if (tg_attn_kernel_refuses(k, args, why, sizeof why))
        tg_fail(ctx, "attention kernel %s: %s", k->name ? k->name : "(unnamed)", why);
    const unsigned conv = tg_attn_kernel_conventions(k);
    tg_attn_args a = tg_attn_args_of(args);
    for (int i = 0; i < TG_ATTN_N_CONVENTIONS; i++) {
        const tg_attn_convention *r = tg_attn_convention_row(i);
        if (conv & r->bit && r->complete) {
            r->complete(ctx, &a);
            args = &a;
        }
    }
    if (self_fn(k)) return self_fn(k)(k->self, ctx, args);
    if (k->attend) return k->attend(ctx, args);
    return k->textbook(ctx, a.q, a.k, a.v, a.head_scale, a.scale, a.causal, a.stats);
}

const tg_attn_kernel tg_attn_kernel_saved = {sizeof(tg_attn_kernel), TG_ATTENTION_PLUGIN_ABI, TG_ATTN_F_ALL, "saved",
                                             tg_attend, NULL, NULL, NULL, 0, TG_FP32};
const tg_attn_kernel tg_attn_kernel_online = {sizeof(tg_attn_kernel), TG_ATTENTION_PLUGIN_ABI, TG_ATTN_F_ALL, "online",
                                              tg_flash_attend, NULL, NULL, NULL, 0, TG_FP32};
/* 0.19's names: the same objects */
extern const tg_attn_kernel tg_attn_kernel_composed __attribute__((alias("tg_attn_kernel_saved")));
extern const tg_attn_kernel tg_attn_kernel_fused __attribute__((alias("tg_attn_kernel_online")));
