#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tg_ops.h"

const char *const scale_names[] = {"sqrt", "none", "dk", "qknorm", "learned", NULL};
const char *const learned_init_names[] = {"sqrt", "none", NULL};
const char *const init_names[] = {"fanin", "gpt2", NULL};
const char *const attn_names[] = {"composed", "fused", NULL};

static tg_tensor *par(model *m, const char *name, int l, int ndim, const int *shape) {
    char full[64];
    if (l >= 0) snprintf(full, sizeof full, "l%d.%s", l, name);
    else snprintf(full, sizeof full, "%s", name);
    return tg_param(&m->P, full, ndim, shape);
}

static void fill_const(tg_tensor *t, float v) {
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = v;
}

float model_scale(const model_cfg *c) {
    switch (c->scale_mode) {
    case SCALE_NONE: return 1.0f;
    case SCALE_DK: return 1.0f / (float)c->d_head;
    default: return 1.0f / sqrtf((float)c->d_head);
    }
}

/* fanin: embeddings N(0,1), a linear weight N(0, 1/fan_in), so LN'd inputs give
 * q and k entries of about unit variance (the seed's variance argument).
 * gpt2: every weight N(0, 0.02²). Biases 0 and gains 1 in both. */
static void init_weight(model *m, tg_rng *r, tg_tensor *w, int fan_in) {
    float std = m->cfg.init == INIT_GPT2 ? 0.02f : 1.0f / sqrtf((float)fan_in);
    tg_fill_normal(r, w->data, w->numel, 0.0f, std);
}

void model_init(model *m, const model_cfg *c, uint64_t seed) {
    m->cfg = *c;
    int V = c->vocab, T = c->seq_len, D = c->d_model, H = c->heads, dh = c->d_head, HD = H * dh;
    tg_params_init(&m->P);
    m->tok_emb = par(m, "tok_emb", -1, 2, (int[]){V, D});
    m->pos_emb = par(m, "pos_emb", -1, 2, (int[]){T, D});
    m->layer = calloc((size_t)c->layers, sizeof *m->layer);
    for (int l = 0; l < c->layers; l++) {
        model_layer *L = &m->layer[l];
        L->ln1_g = par(m, "ln1_g", l, 1, (int[]){D});
        L->ln1_b = par(m, "ln1_b", l, 1, (int[]){D});
        L->wq = par(m, "wq", l, 2, (int[]){D, HD});
        L->wk = par(m, "wk", l, 2, (int[]){D, HD});
        L->wv = par(m, "wv", l, 2, (int[]){D, HD});
        L->wo = par(m, "wo", l, 2, (int[]){HD, D});
        if (c->scale_mode == SCALE_QKNORM) {
            L->qn_g = par(m, "qn_g", l, 2, (int[]){H, dh});
            L->kn_g = par(m, "kn_g", l, 2, (int[]){H, dh});
        }
        if (c->scale_mode == SCALE_LEARNED) L->hscale = par(m, "hscale", l, 1, (int[]){H});
        L->ln2_g = par(m, "ln2_g", l, 1, (int[]){D});
        L->ln2_b = par(m, "ln2_b", l, 1, (int[]){D});
        L->w1 = par(m, "w1", l, 2, (int[]){D, 4 * D});
        L->b1 = par(m, "b1", l, 1, (int[]){4 * D});
        L->w2 = par(m, "w2", l, 2, (int[]){4 * D, D});
        L->b2 = par(m, "b2", l, 1, (int[]){D});
    }
    m->lnf_g = par(m, "lnf_g", -1, 1, (int[]){D});
    m->lnf_b = par(m, "lnf_b", -1, 1, (int[]){D});
    m->w_out = par(m, "w_out", -1, 2, (int[]){D, V});
    tg_params_alloc(&m->P);   /* all zero: biases stay 0 */

    tg_rng r;
    tg_rng_seed(&r, seed, 0x5eed);
    float emb_std = c->init == INIT_GPT2 ? 0.02f : 1.0f;
    tg_fill_normal(&r, m->tok_emb->data, m->tok_emb->numel, 0.0f, emb_std);
    tg_fill_normal(&r, m->pos_emb->data, m->pos_emb->numel, 0.0f, emb_std);
    for (int l = 0; l < c->layers; l++) {
        model_layer *L = &m->layer[l];
        fill_const(L->ln1_g, 1.0f);
        fill_const(L->ln2_g, 1.0f);
        init_weight(m, &r, L->wq, D);
        init_weight(m, &r, L->wk, D);
        init_weight(m, &r, L->wv, D);
        init_weight(m, &r, L->wo, HD);
        init_weight(m, &r, L->w1, D);
        init_weight(m, &r, L->w2, 4 * D);
        if (L->qn_g) {
            fill_const(L->qn_g, 1.0f);
            fill_const(L->kn_g, 1.0f);
        }
        if (L->hscale)
            fill_const(L->hscale, c->learned_init == LEARNED_FROM_NONE ? sqrtf((float)dh) : 1.0f);
    }
    fill_const(m->lnf_g, 1.0f);
    init_weight(m, &r, m->w_out, D);

    m->pos_idx = malloc((size_t)T * sizeof *m->pos_idx);
    for (int t = 0; t < T; t++) m->pos_idx[t] = t;
    size_t nh = (size_t)c->layers * H;
    m->ent = calloc(nh, sizeof(float));
    m->maxlogit = calloc(nh, sizeof(float));
    m->sat = calloc(nh, sizeof(float));
    m->logit_scale = calloc(nh, sizeof(float));
}

void model_free(model *m) {
    tg_params_free(&m->P);
    free(m->layer);
    free(m->pos_idx);
    free(m->ent);
    free(m->maxlogit);
    free(m->sat);
    free(m->logit_scale);
}

tg_tensor *model_forward(model *m, tg_ctx *ctx, const int *tokens, const int *targets, int B,
                         int stats) {
    const model_cfg *c = &m->cfg;
    int T = c->seq_len, D = c->d_model, H = c->heads, dh = c->d_head;
    float scale = model_scale(c);

    tg_tensor *pos = tg_reshape(ctx, tg_embedding(ctx, m->pos_emb, m->pos_idx, 1, T), 2, (int[]){T, D});
    tg_tensor *x = tg_add(ctx, tg_embedding(ctx, m->tok_emb, tokens, B, T), pos);
    for (int l = 0; l < c->layers; l++) {
        model_layer *L = &m->layer[l];
        tg_tensor *h = tg_layernorm(ctx, x, L->ln1_g, L->ln1_b, 1e-5f);
        int qshape[4] = {B, T, H, dh};
        tg_tensor *q = tg_reshape(ctx, tg_matmul(ctx, h, L->wq, 0, 0), 4, qshape);
        tg_tensor *k = tg_reshape(ctx, tg_matmul(ctx, h, L->wk, 0, 0), 4, qshape);
        tg_tensor *v = tg_reshape(ctx, tg_matmul(ctx, h, L->wv, 0, 0), 4, qshape);
        if (c->scale_mode == SCALE_QKNORM) {
            q = tg_rmsnorm(ctx, q, L->qn_g, 1e-6f);
            k = tg_rmsnorm(ctx, k, L->kn_g, 1e-6f);
        }
        tg_attn_stats st = {H, m->ent + l * H, m->maxlogit + l * H, m->sat + l * H};
        if (stats)
            for (int hh = 0; hh < H; hh++) m->logit_scale[l * H + hh] = scale * (L->hscale ? L->hscale->data[hh] : 1.0f);
        tg_tensor *a = (c->attn == ATTN_FUSED ? tg_flash_attention : tg_attention)(
            ctx, q, k, v, L->hscale, scale, 1, stats ? &st : NULL);
        a = tg_reshape(ctx, a, 3, (int[]){B, T, H * dh});
        x = tg_add(ctx, x, tg_matmul(ctx, a, L->wo, 0, 0));
        h = tg_layernorm(ctx, x, L->ln2_g, L->ln2_b, 1e-5f);
        h = tg_bias_gelu(ctx, tg_matmul(ctx, h, L->w1, 0, 0), L->b1);   /* = tg_gelu(tg_add(...)), one pass */
        x = tg_add(ctx, x, tg_add(ctx, tg_matmul(ctx, h, L->w2, 0, 0), L->b2));
    }
    x = tg_layernorm(ctx, x, m->lnf_g, m->lnf_b, 1e-5f);
    tg_tensor *logits = tg_matmul(ctx, x, m->w_out, 0, 0);
    return tg_cross_entropy(ctx, logits, targets);
}
