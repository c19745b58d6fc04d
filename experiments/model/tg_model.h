/* The toy transformer of the √d_k experiments.
 *
 * tokens [B,T] -> x = tok_emb[tokens] + pos_emb[0..T-1]          x [B,T,D]
 * L pre-LN blocks:
 *   q = LN1(x)·Wq, k,v = LN1(x)·Wk, ·Wv  (no bias)   q [B,T,H,dh], k, v [B,T,Hkv,dh]
 *   qknorm mode: q, k = rmsnorm over dh with a learnable gain [H,dh], [Hkv,dh] (init 1)
 *   a = attention(q, k, v; scale, causal, window)                 [B,T,H,dh]
 *     kv_heads = Hkv < H: grouped-query heads (query head h reads k, v head
 *     h / (H / Hkv); 1 is multi-query); window W > 0: each query sees its W
 *     latest keys, its own included (tg_attn_args window (W − 1, 0) with causal);
 *     what changes the logits (tg_attn_args): bias = TG_BIAS_TABLE, a learned
 *     [H, T, T] table per layer "l*.attn_bias" (stored [1, H, T, T], init 0, not
 *     decayed: any relative or absolute pattern, no buckets); alibi: ALiBi's fixed
 *     slopes 2^(−8(h+1)/H); softcap C: Gemma 2's cap; sinks: a learned logit per
 *     head "l*.sinks" (init 0: the "off-by-one" softmax); attn_dropout p: dropout of
 *     the weights in training steps only (a context with grad enabled), its mask
 *     from dropout_seed (set by the program each step) and the layer
 *   x += a·Wo                                                     Wo [H·dh, D]
 *   x += GELU(LN2(x)·W1 + b1)·W2 + b2                            W1 [D,4D]
 * logits = LN_f(x)·W_out                                          [B,T,V]
 * loss = mean cross-entropy over scored positions.
 *
 * Scale modes all run the same code path; only the attention op's `scale`
 * argument and, for `learned`, its per-head scale tensor change:
 *   sqrt 1/√dh · none 1 · dk 1/dh · mult c/√dh (any c > 0: c = 1 is sqrt, c = √dh
 *   is none) · qknorm 1/√dh after RMS-normalising q and k
 *   · learned 1/√dh · s_h with s_h per head, initialised to 1 (it starts as sqrt)
 *     or to √dh (it starts as none, and must learn its way out); the parameter
 *     is s_h itself (linear, "l*.hscale") or θ_h with s_h = exp(θ_h) (log,
 *     "l*.hscale_log"), so that an optimizer's steps in θ change s_h by a
 *     factor, whatever its size.
 * Weight decay (tg_param_decayed) applies to the embeddings and the weight
 * matrices only; gains, biases, QK-norm gains and head scales are never decayed. */
#ifndef TG_MODEL_H
#define TG_MODEL_H
#include "attn_kernel.h"
#include "tg_core.h"
#include "tg_ops.h"

struct tg_kernel;   /* the kernel layer's registry (tg_kernel.h) */

/* The experiments' model (experiments/model/, internal: not installed; in the training kit from 0.18 to
 * 0.19): attn_scale's and attn_check --train's. */
#pragma GCC visibility push(hidden)

enum { TG_SCALE_SQRT, TG_SCALE_NONE, TG_SCALE_DK, TG_SCALE_QKNORM, TG_SCALE_LEARNED, TG_SCALE_MULT };
extern const char *const tg_scale_names[];
enum { TG_INIT_FANIN, TG_INIT_GPT2, TG_INIT_LM };   /* tg_init_names: fanin, gpt2, lm (model.c) */
extern const char *const tg_init_names[];
enum { TG_BIAS_NONE, TG_BIAS_TABLE };
/* W_q's initialisation: the init's own, or times 1/√dh (the scale folded into it, T5's way) */
enum { TG_QINIT_DEFAULT, TG_QINIT_FOLD };
extern const char *const tg_qinit_names[];
extern const char *const tg_bias_names[];
/* where a learned scale starts: s_h = 1 (the 1/√dh of sqrt) or s_h = √dh (the unscaled kernel) */
enum { TG_LEARNED_FROM_SQRT, TG_LEARNED_FROM_NONE };
extern const char *const tg_learned_init_names[];
/* how a learned scale is parameterised: s_h itself, or θ_h = ln s_h */
enum { TG_LEARNED_LINEAR, TG_LEARNED_LOG };
extern const char *const tg_learned_param_names[];

typedef struct {
    int vocab, seq_len, d_model, heads, d_head, layers;
    int scale_mode, init;
    int learned_init;            /* learned only: TG_LEARNED_FROM_SQRT (0) or TG_LEARNED_FROM_NONE */
    int learned_param;           /* learned only: TG_LEARNED_LINEAR (0) or TG_LEARNED_LOG */
    float mult;                  /* mult only: c in c/√dh, finite and > 0 */
    float scale_lr_mult;         /* learned only: the head scales' lr_mult (0: 1, the model's rate) */
    /* The attention kernel of every layer (attn_kernel.h; NULL: the built-in saved op), called
     * through tg_attn_kernel_call with one args for every kernel (tg_model_attn_args; the kernel
     * must take them: tg_kernel_refuses_call). attn_measure = 1: a kernel from outside, whose stats
     * are not taken: its weights are measured at logged steps (tg_attn_measure) and the
     * multiplier it applied logged; 0: a built-in op, which fills its stats itself. */
    const tg_attn_kernel *attn_kernel;
    int attn_measure;
    int kv_heads;                /* key/value heads Hkv, dividing heads (0: heads, the textbook model) */
    int window;                  /* a sliding window of this many keys (0: none) */
    int bias, alibi, sinks;      /* TG_BIAS_*, 0/1, 0/1 */
    float softcap;               /* 0: none */
    float attn_dropout;          /* in [0, 1) */
    int qinit;                   /* TG_QINIT_DEFAULT, or TG_QINIT_FOLD: W_q's initialisation times 1/√dh (0.24) */
} tg_model_cfg;

/* 1 when W_q's initialisation is multiplied by 1/√dh, the scale folded into it as T5 does: asked
 * for (qinit = TG_QINIT_FOLD, 0.24), or the model's kernel declares scale_folded (0.21). Once, not
 * twice, when both. Derived from the config, never set apart from it. */
int tg_model_qinit_fold(const tg_model_cfg *c);

typedef struct {
    tg_tensor *ln1_g, *ln1_b, *wq, *wk, *wv, *wo;
    tg_tensor *qn_g, *kn_g;      /* qknorm only */
    tg_tensor *hscale;           /* learned only: s_h [H] (linear) or θ_h = ln s_h (log) */
    tg_tensor *attn_bias;        /* bias table only: [1, H, T, T] */
    tg_tensor *sinks;            /* sinks only: [H] */
    tg_tensor *ln2_g, *ln2_b, *w1, *b1, *w2, *b2;
} tg_model_layer;

typedef struct {
    tg_model_cfg cfg;
    tg_params P;
    tg_tensor *tok_emb, *pos_emb, *lnf_g, *lnf_b, *w_out;
    tg_model_layer *layer;
    int *pos_idx;                /* 0..T-1 */
    float *alibi_slopes;         /* alibi only: [H], and alibi_t viewing them (no gradient) */
    tg_tensor alibi_t;
    uint64_t dropout_seed;       /* attn_dropout: the program sets it before each training step */
    /* attention health of the last forward run with stats, [layers * heads];
     * logit_scale: the multiplier of q·k each head used (scale · s_h) */
    float *ent, *maxlogit, *sat, *logit_scale;
    /* attn_measure: why the last measurement failed ("" when it did not; the
     * arrays then hold NaN for that layer); measure_leak: 1 when it failed
     * because the kernel weighs keys the args hide (TG_MEASURE_LEAK) */
    char measure_note[512];
    int measure_leak;
} tg_model;

void tg_model_init(tg_model *m, const tg_model_cfg *cfg, uint64_t seed);
void tg_model_free(tg_model *m);
float tg_model_scale(const tg_model_cfg *cfg);   /* the float passed to the attention op */
int tg_model_kv_heads(const tg_model_cfg *cfg);  /* Hkv: kv_heads, or heads when 0 */
/* The entropy of uniform attention over the keys each query sees (causal, the window). */
double tg_model_uniform_entropy(const tg_model_cfg *cfg);
/* The model's attention args of layer l for q, k, v (the one place they are made:
 * the built-in ops, a kernel and its measurement get the same). */
tg_attn_args tg_model_attn_args(tg_model *m, int l, tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *hs);
/* The model's attention call under cfg without data: its shapes and settings (head scales, bias,
 * sinks, ALiBi, dropout as in a training step), what a kernel is asked before a run
 * (tg_kernel_refuses_call); the tensors are headers in room (no data). */
tg_attn_args tg_model_attn_call(const tg_model_cfg *cfg, tg_tensor room[4]);
/* Builds the graph on ctx and returns the scalar loss. With stats != 0 the
 * attention health arrays are filled. */
tg_tensor *tg_model_forward(tg_model *m, tg_ctx *ctx, const int *tokens, const int *targets, int B,
                         int stats);
/* The logits [B, T, vocab] of a batch, on ctx (no loss, no stats). */
tg_tensor *tg_model_logits(tg_model *m, tg_ctx *ctx, const int *tokens, int B);
/* Before a run with a kernel from outside (K, opened by the registry, is m's attn_kernel): one
 * training step's forward and backward, then a logged step's forward with its measurement,
 * exactly as training calls the kernel (the model's shapes, B, head scales, every feature), in a
 * sandbox (tg_sandbox.h) with a limit of `seconds` (a kernel that crashes or hangs takes the
 * child with it). tokens, targets: one batch. Returns
 *   0  both ran and the weights were measured;
 *   1  training works but the weights cannot be measured (why in err);
 *   2  the weights leak: keys the mask hides get weight (err);
 *   3  the training step itself failed, crashed or hung (err).
 * Call it before any OpenMP region has run in this process. m is unchanged. */
int tg_model_preflight(tg_model *m, struct tg_kernel *K, const int *tokens, const int *targets, int B, double seconds,
                       char *err, size_t errlen);
/* The attention weights of every layer for one batch of tokens: out gets
 * layers × [B, H, T, T] floats (invisible entries 0). They come from the saved
 * op for either built-in kernel (the online op keeps no weights), or for a
 * kernel from outside measured (tg_attn_measure), on ctx (reset first);
 * nothing of the model changes: no stats, no gradient. Returns 0, or -1 when
 * the kernel's weights could not be measured (why: m->measure_note). */
int tg_model_attention_maps(tg_model *m, tg_ctx *ctx, const int *tokens, int B, float *out);

#pragma GCC visibility pop
#endif
