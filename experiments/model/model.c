#define _POSIX_C_SOURCE 200809L   /* strsignal */
#include "tg_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_attn_probe.h"
#include "tg_gemm_plan.h"
#include "tg_kernel.h"
#include "tg_ops.h"
#include "tg_sandbox.h"

const char *const tg_scale_names[] = {"sqrt", "none", "dk", "qknorm", "learned", "mult", NULL};
const char *const tg_learned_init_names[] = {"sqrt", "none", NULL};
const char *const tg_learned_param_names[] = {"linear", "log", NULL};
const char *const tg_init_names[] = {"fanin", "gpt2", "lm", NULL};
const char *const tg_bias_names[] = {"none", "table", NULL};
const char *const tg_qinit_names[] = {"default", "fold", NULL};

/* A parameter of layer l (or of the model, l < 0); weight decay applies when
 * `decayed` (the matrices and embeddings). */
static tg_tensor *declare(tg_model *m, const char *name, int l, int decayed, int ndim, const int *shape) {
    char full[64];
    if (l >= 0) snprintf(full, sizeof full, "l%d.%s", l, name);
    else snprintf(full, sizeof full, "%s", name);
    return (decayed ? tg_param_decayed : tg_param)(&m->P, full, ndim, shape);
}
static tg_tensor *mat(tg_model *m, const char *name, int l, int rows, int cols) {
    return declare(m, name, l, 1, 2, (int[]){rows, cols});
}
static tg_tensor *vec(tg_model *m, const char *name, int l, int n) { return declare(m, name, l, 0, 1, (int[]){n}); }

static void fill_const(tg_tensor *t, float v) {
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = v;
}

float tg_model_scale(const tg_model_cfg *c) {
    switch (c->scale_mode) {
    case TG_SCALE_NONE: return 1.0f;
    case TG_SCALE_DK: return 1.0f / (float)c->d_head;
    case TG_SCALE_MULT: return c->mult / sqrtf((float)c->d_head);   /* c = 1: the float of sqrt */
    default: return 1.0f / sqrtf((float)c->d_head);
    }
}

int tg_model_kv_heads(const tg_model_cfg *c) { return c->kv_heads > 0 ? c->kv_heads : c->heads; }

double tg_model_uniform_entropy(const tg_model_cfg *c) {
    if (c->window <= 0) return tg_attn_uniform_entropy(c->seq_len, 1);
    double sum = 0;   /* query i sees keys max(0, i − W + 1) .. i */
    for (int i = 0; i < c->seq_len; i++) sum += log((double)(i + 1 < c->window ? i + 1 : c->window));
    return sum / c->seq_len;
}

/* fanin: embeddings N(0,1), a linear weight N(0, 1/fan_in), so LN'd inputs give
 * q and k entries of about unit variance (the seed's variance argument).
 * gpt2: every weight N(0, 0.02²).
 * lm: a standard small language model's: embeddings N(0, 0.02²) (a token's
 * vector starts small, so what the layers add is not drowned by it), linear
 * weights N(0, 1/fan_in) as fanin (the code task's default: docs/results.md#on-real-code).
 * Biases 0 and gains 1 in all. */
static void init_weight(tg_model *m, tg_rng *r, tg_tensor *w, int fan_in) {
    float std = m->cfg.init == TG_INIT_GPT2 ? 0.02f : 1.0f / sqrtf((float)fan_in);
    tg_fill_normal(r, w->data, w->numel, 0.0f, std);
}

void tg_model_init(tg_model *m, const tg_model_cfg *c, uint64_t seed) {
    m->cfg = *c;
    int V = c->vocab, T = c->seq_len, D = c->d_model, H = c->heads, dh = c->d_head, HD = H * dh;
    const int Hkv = tg_model_kv_heads(c), KD = Hkv * dh;
    tg_params_init(&m->P);
    const int log_scale = c->learned_param == TG_LEARNED_LOG;
    m->tok_emb = mat(m, "tok_emb", -1, V, D);
    m->pos_emb = mat(m, "pos_emb", -1, T, D);
    m->layer = calloc((size_t)c->layers, sizeof *m->layer);
    for (int l = 0; l < c->layers; l++) {
        tg_model_layer *L = &m->layer[l];
        L->ln1_g = vec(m, "ln1_g", l, D);
        L->ln1_b = vec(m, "ln1_b", l, D);
        L->wq = mat(m, "wq", l, D, HD);
        L->wk = mat(m, "wk", l, D, KD);
        L->wv = mat(m, "wv", l, D, KD);
        L->wo = mat(m, "wo", l, HD, D);
        if (c->scale_mode == TG_SCALE_QKNORM) {   /* gains [H, dh]: 2-D, and still never decayed */
            L->qn_g = declare(m, "qn_g", l, 0, 2, (int[]){H, dh});
            L->kn_g = declare(m, "kn_g", l, 0, 2, (int[]){Hkv, dh});
        }
        if (c->scale_mode == TG_SCALE_LEARNED) L->hscale = vec(m, log_scale ? "hscale_log" : "hscale", l, H);
        if (c->bias == TG_BIAS_TABLE) L->attn_bias = declare(m, "attn_bias", l, 0, 4, (int[]){1, H, T, T});
        if (c->sinks) L->sinks = vec(m, "sinks", l, H);
        L->ln2_g = vec(m, "ln2_g", l, D);
        L->ln2_b = vec(m, "ln2_b", l, D);
        L->w1 = mat(m, "w1", l, D, 4 * D);
        L->b1 = vec(m, "b1", l, 4 * D);
        L->w2 = mat(m, "w2", l, 4 * D, D);
        L->b2 = vec(m, "b2", l, D);
    }
    m->lnf_g = vec(m, "lnf_g", -1, D);
    m->lnf_b = vec(m, "lnf_b", -1, D);
    m->w_out = mat(m, "w_out", -1, D, V);
    tg_params_alloc(&m->P);   /* all zero: biases stay 0 */

    tg_rng r;
    tg_rng_seed(&r, seed, 0x5eed);
    float emb_std = c->init == TG_INIT_FANIN ? 1.0f : 0.02f;
    tg_fill_normal(&r, m->tok_emb->data, m->tok_emb->numel, 0.0f, emb_std);
    tg_fill_normal(&r, m->pos_emb->data, m->pos_emb->numel, 0.0f, emb_std);
    for (int l = 0; l < c->layers; l++) {
        tg_model_layer *L = &m->layer[l];
        fill_const(L->ln1_g, 1.0f);
        fill_const(L->ln2_g, 1.0f);
        init_weight(m, &r, L->wq, D);
        if (tg_model_qinit_fold(c))   /* T5: q·k starts as small as (q·k)/√dh would, with no scale in the kernel */
            for (int64_t i = 0; i < L->wq->numel; i++) L->wq->data[i] /= sqrtf((float)dh);
        init_weight(m, &r, L->wk, D);
        init_weight(m, &r, L->wv, D);
        init_weight(m, &r, L->wo, HD);
        init_weight(m, &r, L->w1, D);
        init_weight(m, &r, L->w2, 4 * D);
        if (L->qn_g) {
            fill_const(L->qn_g, 1.0f);
            fill_const(L->kn_g, 1.0f);
        }
        if (L->hscale) {
            float start = c->learned_init == TG_LEARNED_FROM_NONE ? sqrtf((float)dh) : 1.0f;
            fill_const(L->hscale, log_scale ? logf(start) : start);
            if (c->scale_lr_mult > 0) L->hscale->lr_mult = c->scale_lr_mult;
        }
    }
    fill_const(m->lnf_g, 1.0f);
    init_weight(m, &r, m->w_out, D);

    m->pos_idx = malloc((size_t)T * sizeof *m->pos_idx);
    for (int t = 0; t < T; t++) m->pos_idx[t] = t;
    m->alibi_slopes = NULL;
    if (c->alibi) {   /* the paper's geometric slopes, 2^(−8/H) to 2^−8 (any H, not only powers of 2) */
        m->alibi_slopes = malloc((size_t)H * sizeof *m->alibi_slopes);
        for (int h = 0; h < H; h++) m->alibi_slopes[h] = powf(2.0f, -8.0f * (float)(h + 1) / (float)H);
        m->alibi_t = (tg_tensor){.ndim = 1, .shape = {H}, .numel = H, .data = m->alibi_slopes, .name = "alibi"};
    }
    m->dropout_seed = seed;
    size_t nh = (size_t)c->layers * H;
    m->ent = calloc(nh, sizeof(float));
    m->maxlogit = calloc(nh, sizeof(float));
    m->sat = calloc(nh, sizeof(float));
    m->logit_scale = calloc(nh, sizeof(float));
}

void tg_model_free(tg_model *m) {
    tg_params_free(&m->P);
    free(m->layer);
    free(m->pos_idx);
    free(m->alibi_slopes);
    free(m->ent);
    free(m->maxlogit);
    free(m->sat);
    free(m->logit_scale);
}

int tg_model_qinit_fold(const tg_model_cfg *c) {
    return c->qinit == TG_QINIT_FOLD ||
           (c->attn_kernel && (tg_attn_kernel_conventions(c->attn_kernel) & TG_ATTN_C_SCALE_FOLDED));
}

tg_attn_args tg_model_attn_args(tg_model *m, int l, tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *hs) {
    const tg_model_cfg *c = &m->cfg;
    const tg_model_layer *L = &m->layer[l];
    tg_attn_args aa = tg_attn_args_make(q, k, v, tg_model_scale(c));
    aa.head_scale = hs, aa.causal = 1, aa.layer = l;   /* a kernel that computes by layer knows which */
    if (c->window > 0) aa.window_left = c->window - 1, aa.window_right = 0;
    aa.bias = L->attn_bias, aa.sinks = L->sinks, aa.softcap = c->softcap;
    if (c->alibi) aa.alibi = &m->alibi_t;
    if (c->attn_dropout > 0 && ctx->grad_enabled)   /* training steps only; a mask per layer */
        aa.dropout = c->attn_dropout, aa.dropout_seed = m->dropout_seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(l + 1));
    return aa;
}

tg_attn_args tg_model_attn_call(const tg_model_cfg *c, tg_tensor room[4]) {
    const int T = c->seq_len, H = c->heads;
    room[0] = (tg_tensor){.ndim = 4, .shape = {1, T, H, c->d_head}};
    room[1] = (tg_tensor){.ndim = 4, .shape = {1, T, tg_model_kv_heads(c), c->d_head}};
    room[2] = (tg_tensor){.ndim = 1, .shape = {H}, .numel = H};   /* head scales, sinks, ALiBi's slopes */
    room[3] = (tg_tensor){.ndim = 4, .shape = {1, H, T, T}};      /* the bias table */
    tg_model_layer L = {.attn_bias = c->bias ? &room[3] : NULL, .sinks = c->sinks ? &room[2] : NULL};
    tg_model m = {.cfg = *c, .layer = &L, .alibi_t = room[2]};
    tg_ctx training = {.grad_enabled = 1};
    tg_attn_args a = tg_model_attn_args(&m, 0, &training, &room[0], &room[1], &room[1],
                                        c->scale_mode == TG_SCALE_LEARNED ? &room[2] : NULL);
    if (a.alibi) a.alibi = &room[2];   /* not m's: m ends here */
    return a;
}

/* Layer l's attention on aa: the kernel's output, with what the step asks of its weights: stats
 * (a built-in op fills its own; a kernel from outside is measured), maps (the weights into maps;
 * *failed when a measured kernel's could not be had: NULL returned). One path for every kernel. */
static tg_tensor *attend(tg_model *m, tg_ctx *ctx, int l, const tg_attn_kernel *K, tg_attn_args *aa, int stats,
                         float *maps, int *failed) {
    const tg_model_cfg *c = &m->cfg;
    const int H = c->heads, measured = c->attn_measure;
    tg_attn_stats st = {H, m->ent + l * H, m->maxlogit + l * H, m->sat + l * H};
    if (stats && !measured)
        for (int h = 0; h < H; h++) m->logit_scale[l * H + h] = aa->scale * (aa->head_scale ? aa->head_scale->data[h] : 1.0f);
    aa->stats = stats && !measured ? &st : NULL;
    tg_tensor *a = maps && measured ? NULL : tg_attn_kernel_call(ctx, K, aa);
    if (maps && !measured) {   /* the saved op's own weights */
        const float *P = tg_attention_probs(ctx, a);
        if (!P) tg_fail(ctx, "tg_model_attention_maps: the attention op kept no weights (grad disabled?)");
        memcpy(maps, P, sizeof(float) * (size_t)aa->q->shape[0] * H * c->seq_len * c->seq_len);
    }
    if (measured && (stats || maps)) {   /* a kernel we did not write: its word on its weights is not taken */
        char why[400];
        int rc = tg_attn_measure(ctx, K, aa, stats ? &st : NULL, stats ? m->logit_scale + l * H : NULL, maps, why,
                                 sizeof why);
        if (rc) {
            snprintf(m->measure_note, sizeof m->measure_note, "layer %d: %s", l, why);
            m->measure_leak |= rc == TG_MEASURE_LEAK;
            for (int hh = 0; hh < H && stats; hh++)
                m->ent[l * H + hh] = m->maxlogit[l * H + hh] = m->sat[l * H + hh] = m->logit_scale[l * H + hh] = NAN;
            if (maps) return *failed = 1, NULL;
        }
        if (maps && l < c->layers - 1) a = tg_attn_kernel_call(ctx, K, aa);
    }
    return a;
}

/* The forward pass. maps != NULL: the probe's pass of tg_model_attention_maps,
 * copying each layer's weights, and ending after the last attention (returns
 * NULL; sets *maps_failed when a measured kernel's weights could not be had). */
static tg_tensor *forward(tg_model *m, tg_ctx *ctx, const int *tokens, const int *targets, int B, int stats,
                          float *maps, int *maps_failed) {
    const tg_model_cfg *c = &m->cfg;
    int T = c->seq_len, D = c->d_model, H = c->heads, dh = c->d_head;
    /* the maps of a built-in op come from the one that keeps its weights (the same function) */
    const tg_attn_kernel *K = c->attn_kernel && !(maps && !c->attn_measure) ? c->attn_kernel : &tg_attn_kernel_saved;
    if (stats || maps) m->measure_note[0] = 0, m->measure_leak = 0;

    tg_tensor *pos = tg_reshape(ctx, tg_embedding(ctx, m->pos_emb, m->pos_idx, 1, T), 2, (int[]){T, D});
    tg_tensor *x = tg_add(ctx, tg_embedding(ctx, m->tok_emb, tokens, B, T), pos);
    for (int l = 0; l < c->layers; l++) {
        tg_model_layer *L = &m->layer[l];
        tg_tensor *h = tg_layernorm(ctx, x, L->ln1_g, L->ln1_b, 1e-5f);
        int qshape[4] = {B, T, H, dh}, kshape[4] = {B, T, tg_model_kv_heads(c), dh};
        tg_tensor *q = tg_reshape(ctx, tg_matmul(ctx, h, L->wq, 0, 0), 4, qshape);
        tg_tensor *k = tg_reshape(ctx, tg_matmul(ctx, h, L->wk, 0, 0), 4, kshape);
        tg_tensor *v = tg_reshape(ctx, tg_matmul(ctx, h, L->wv, 0, 0), 4, kshape);
        if (c->scale_mode == TG_SCALE_QKNORM) {
            q = tg_rmsnorm(ctx, q, L->qn_g, 1e-6f);
            k = tg_rmsnorm(ctx, k, L->kn_g, 1e-6f);
        }
        /* s_h: the parameter itself, or e^θ_h */
        tg_tensor *hs = L->hscale && c->learned_param == TG_LEARNED_LOG ? tg_exp(ctx, L->hscale) : L->hscale;
        tg_attn_args aa = tg_model_attn_args(m, l, ctx, q, k, v, hs);
        if (maps) aa.dropout = 0;
        float *lmaps = maps ? maps + (size_t)l * B * H * T * T : NULL;
        tg_tensor *a = attend(m, ctx, l, K, &aa, stats, lmaps, maps_failed);
        if (maps && (l == c->layers - 1 || *maps_failed)) return NULL;
        a = tg_reshape(ctx, a, 3, (int[]){B, T, H * dh});
        x = tg_add(ctx, x, tg_matmul(ctx, a, L->wo, 0, 0));
        h = tg_layernorm(ctx, x, L->ln2_g, L->ln2_b, 1e-5f);
        h = tg_bias_gelu(ctx, tg_matmul(ctx, h, L->w1, 0, 0), L->b1);   /* = tg_gelu(tg_add(...)), one pass */
        x = tg_add(ctx, x, tg_add(ctx, tg_matmul(ctx, h, L->w2, 0, 0), L->b2));
    }
    x = tg_layernorm(ctx, x, m->lnf_g, m->lnf_b, 1e-5f);
    tg_tensor *logits = tg_matmul(ctx, x, m->w_out, 0, 0);
    return targets ? tg_cross_entropy(ctx, logits, targets) : logits;
}

tg_tensor *tg_model_logits(tg_model *m, tg_ctx *ctx, const int *tokens, int B) {
    return forward(m, ctx, tokens, NULL, B, 0, NULL, NULL);
}

tg_tensor *tg_model_forward(tg_model *m, tg_ctx *ctx, const int *tokens, const int *targets, int B, int stats) {
    return forward(m, ctx, tokens, targets, B, stats, NULL, NULL);
}

int tg_model_attention_maps(tg_model *m, tg_ctx *ctx, const int *tokens, int B, float *out) {
    int grad = ctx->grad_enabled, failed = 0;
    ctx->grad_enabled = 1;   /* the composed op keeps its weights only on a recorded node */
    tg_ctx_reset(ctx);
    forward(m, ctx, tokens, NULL, B, 0, out, &failed);
    tg_ctx_reset(ctx);
    ctx->grad_enabled = grad;
    return failed ? -1 : 0;
}

/* ---- the pre-flight: the kernel called as training will, in a sandbox ------------------------ */
typedef struct {
    tg_model *m;
    const int *tokens, *targets;
    int B;
} preflight_job;

enum { TRAINED = 1 };   /* the sandbox's stage after a training step's forward and backward */
typedef struct {
    int rc;            /* the measurement's: 0, 1 failed, 2 leaked */
    char note[600];
} measured;

static int preflight_child(tg_sandbox *sb, void *u) {
    preflight_job *j = u;
    /* the products by the estimate: the child neither measures (it could outlast the limit) nor writes the
     * plan file; the parent's plan is its own (no product has run in it yet) */
    char plan_err[1200];
    (void)tg_gemm_plan_setup("estimate", plan_err, sizeof plan_err);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_set_error_handler(&ctx, tg_sandbox_fail, sb);
    tg_tensor *loss = tg_model_forward(j->m, &ctx, j->tokens, j->targets, j->B, 0);
    if (loss->requires_grad) tg_backward(&ctx, loss);
    tg_sandbox_stage(sb, TRAINED);
    tg_ctx_reset(&ctx);
    ctx.grad_enabled = 0;   /* as a logged step's measurement: its own call, grad off */
    tg_model_forward(j->m, &ctx, j->tokens, j->targets, j->B, 1);
    measured r = {j->m->measure_note[0] ? (j->m->measure_leak ? 2 : 1) : 0, ""};
    snprintf(r.note, sizeof r.note, "%s", j->m->measure_note);
    tg_ctx_free(&ctx);   /* the child exits next: freed so that a leak check of it (valgrind follows forks) is clean */
    return tg_sandbox_send(sb, &r, sizeof r) ? 2 : 0;
}

static void keep_measured(void *u, const void *data, size_t n) {
    if (n == sizeof(measured)) memcpy(u, data, n);
}

int tg_model_preflight(tg_model *m, tg_kernel *K, const int *tokens, const int *targets, int B, double seconds,
                       char *err, size_t errlen) {
    preflight_job j = {m, tokens, targets, B};
    measured r = {-1, ""};
    tg_sandbox_end end;
    if (tg_sandbox_run(preflight_child, &j, &(tg_sandbox_opts){.seconds = seconds, .kernel = K,
                                                               .on_record = keep_measured, .u = &r}, &end))
        return tg_errf(err, errlen, "%s", end.msg), 3;
    const int trained = end.stage >= TRAINED;
    const char *stage = trained ? "a logged step's measurement (V = identity)" : "a training step";
    if (end.outcome == TG_SANDBOX_HUNG)
        return tg_errf(err, errlen, "the kernel did not return within %.0f s in %s", seconds, stage), trained ? 1 : 3;
    if (end.outcome == TG_SANDBOX_CRASHED)
        return tg_errf(err, errlen, "the kernel crashed (%s) in %s", strsignal(end.signal), stage), trained ? 1 : 3;
    const char *msg = end.outcome == TG_SANDBOX_FAILED ? end.msg : "(no message)";
    if (!trained) return tg_errf(err, errlen, "a training step failed: %s", msg), 3;
    if (r.rc < 0) return tg_errf(err, errlen, "%s failed: %s", stage, msg), 1;
    if (r.rc) tg_errf(err, errlen, "%s", r.note);
    return r.rc;
}
