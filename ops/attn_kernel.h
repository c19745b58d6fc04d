/* The attention kernel ABI: a kernel is any function that takes the contract's args (tg_attend_fn,
 * attn_args.h), described by what it implements beyond the textbook call (one q/k/v length T,
 * Hkv = H, scale, head_scale, causal, stats): its features, and the conventions it keeps
 * (attn_tables.h). tg_attn_kernel_call, the one gate every call of a kernel goes through, never
 * hands a kernel args that use a feature it did not declare or fall outside a convention it did.
 * Opening one (a built-in op, a plugin, a kernel in another process) is the kernel layer's
 * (experiments/libtapegrad_attn/tg_kernel.h). */
#ifndef TG_OP_ATTN_KERNEL_H
#define TG_OP_ATTN_KERNEL_H
#include <stddef.h>

#include "attn_args.h"
#include "attn_tables.h"
#include "tg_precision.h"

/* The plugin ABI this tapegrad takes: 2 = tg_attend_fn on tg_attn_args, and the
 * tg_ctx / tg_node / tg_tensor of tapegrad 0.12. 1 = tg_attention_fn (textbook
 * only), loaded through an adapter. Changed on purpose only, with the version. */
#define TG_ATTENTION_PLUGIN_ABI 2

/* A kernel and what it implements. A plugin exports one per kernel with
 * TG_ATTENTION_PLUGIN; the loader makes one for an ABI 1 function (attend NULL,
 * textbook set). `size` is sizeof(tg_attn_kernel) as the plugin was built. */
typedef struct tg_attn_kernel {
    size_t size;
    int abi;                  /* TG_ATTENTION_PLUGIN_ABI when built */
    unsigned features;        /* TG_ATTN_F_* */
    const char *name;
    tg_attend_fn attend;      /* ABI 2 */
    tg_attention_fn textbook; /* ABI 1 (attend NULL): called with the textbook arguments */
    /* Since 0.14 (read only when `size` holds them): a kernel with state of its own (a
     * process it talks to: the kernel layer's exec kernels), called as attend_self(self, ...)
     * when set; plugins leave both 0. */
    void *self;
    tg_tensor *(*attend_self)(void *self, tg_ctx *ctx, const tg_attn_args *args);
    /* Since 0.17 (read only when `size` holds it; 0 for an older descriptor): TG_ATTN_C_*. */
    unsigned conventions;
    /* Since 0.21 (read alike): the precision its products compute in, TG_FP32 (0), TG_BF16 or
     * TG_FP16 (tg_precision.h). An exec kernel is sent q, k, v and dout in it; attn_check judges it
     * against a textbook computed in it (docs/attn_check.md#kernels-in-bf16-and-fp16). */
    int precision;
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
        {sizeof(tg_attn_kernel), TG_ATTENTION_PLUGIN_ABI, (feats), #fn, fn, 0, 0, 0, 0, 0};
/* A kernel with conventions (0.17): TG_ATTENTION_PLUGIN_CONV(fn, TG_ATTN_F_GQA, TG_ATTN_C_CAUSAL_ONLY) */
#define TG_ATTENTION_PLUGIN_CONV(fn, feats, conv) TG_ATTENTION_PLUGIN_CONV_(fn, feats, conv)
#define TG_ATTENTION_PLUGIN_CONV_(fn, feats, conv)                                                     \
    TG_ATTN_EXTERN_C __attribute__((visibility("default"), used)) const tg_attn_kernel tg_attn_plugin_##fn = \
        {sizeof(tg_attn_kernel), TG_ATTENTION_PLUGIN_ABI, (feats), #fn, fn, 0, 0, 0, (conv), 0};
/* A kernel that computes in bf16 or fp16 (0.21): TG_ATTENTION_PLUGIN_PREC(fn, feats, conv, TG_BF16) */
#define TG_ATTENTION_PLUGIN_PREC(fn, feats, conv, prec) TG_ATTENTION_PLUGIN_PREC_(fn, feats, conv, prec)
#define TG_ATTENTION_PLUGIN_PREC_(fn, feats, conv, prec)                                               \
    TG_ATTN_EXTERN_C __attribute__((visibility("default"), used)) const tg_attn_kernel tg_attn_plugin_##fn = \
        {sizeof(tg_attn_kernel), TG_ATTENTION_PLUGIN_ABI, (feats), #fn, fn, 0, 0, 0, (conv), (prec)};
/* An ABI 1 plugin (a tg_attention_fn): declares ABI 1, exported alike. */
#define TG_ATTENTION_PLUGIN_DECLARE \
    TG_ATTN_EXTERN_C __attribute__((visibility("default"), used)) const int tg_attention_plugin_abi = 1;

/* The conventions a descriptor declares (0 when its size does not hold the field). */
unsigned tg_attn_kernel_conventions(const tg_attn_kernel *kernel);
/* Its precision (TG_FP32 when its size does not hold the field). */
int tg_attn_kernel_precision(const tg_attn_kernel *kernel);

/* ---- what a kernel declares, in one place (since 0.20): a plugin's descriptor, an exec kernel's
 * hello, a run's identity and the logs' words all go through these three. */
/* 0 when kernel's declaration is one this tapegrad knows and whose parts fit together (each
 * convention's needs and excludes); else -1 with why in msg. */
int tg_attn_declared_valid(const tg_attn_kernel *kernel, char *msg, size_t len);
/* The declaration read from its words outside C, value(u, KEY) giving each field's text or NULL:
 * "features" (required: tokens, comma-separated, "" for none), "conventions" (optional),
 * "precision" (optional, since 0.21: fp32, bf16 or fp16). Into kernel's fields; 0, or -1 with why
 * in msg ("no features", "unknown feature X", "unknown convention X", "unknown precision X", or
 * tg_attn_declared_valid's). */
int tg_attn_declared_read(tg_attn_kernel *kernel, const char *(*value)(void *u, const char *key), void *u, char *msg,
                          size_t len);
/* The declaration in words: "dv != d, grouped heads" and, when it has any, "; conventions: causal
 * only", and when not fp32 "; precision bf16" (a run's identity records it: another declaration is
 * another run). */
const char *tg_attn_declared_str(const tg_attn_kernel *kernel, char *buf, size_t len);

/* Whether kernel takes args: 0, or 1 with why in msg: the features args use that it did not
 * declare (named), or the first convention it declared that args fall outside (named). The gate's
 * test without the call: a program asks it of its model's calls (shapes and settings, no data)
 * before a run starts. */
int tg_attn_kernel_refuses(const tg_attn_kernel *kernel, const tg_attn_args *args, char *msg, size_t len);

/* kernel on args: tg_fail with tg_attn_kernel_refuses' message, naming the kernel, when it
 * refuses args; else the call completed by its conventions (sinks_always: sinks of −inf when the
 * call has none) and, for an ABI 1 kernel, with the textbook arguments. */
tg_tensor *tg_attn_kernel_call(tg_ctx *ctx, const tg_attn_kernel *kernel, const tg_attn_args *args);

/* The built-in ops as kernels (every feature): `saved` is tg_attend (it saves the weights:
 * tg_attention_probs), `online` is tg_flash_attend (an online softmax: the weights recomputed in the
 * backward). Since 0.20; tg_attn_kernel_composed and tg_attn_kernel_fused, their names before,
 * are the same descriptors (kept through 0.20). */
extern const tg_attn_kernel tg_attn_kernel_saved, tg_attn_kernel_online;
extern const tg_attn_kernel tg_attn_kernel_composed, tg_attn_kernel_fused;

#endif
