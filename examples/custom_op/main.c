/* A new op outside tapegrad, checked and trained: rotary position embeddings
 * (rope.c) on q and k of a one-layer attention model that must copy the
 * previous token, a task that needs positions. The model has no position
 * embedding: RoPE is its only source of them.
 *
 * 1. tg_gradcheck: rope alone, then rope on q and k inside tg_attention.
 * 2. Training with AdamW through the training kit's loop (tapegrad/train.h: the
 *    run log, checkpoints, signals come with it; `custom_op LOG.tsv` writes the
 *    log); the loss must fall by MIN_FALL, or the exit status is 1.
 * 3. The same training without rope, for comparison. */
#include <math.h>
#include <stdio.h>
#include <tapegrad/tapegrad.h>
#include <tapegrad/train.h>

#include "rope.h"

enum { B = 8, T = 16, V = 12, D = 32, H = 2, STEPS = 300 };
#define ROPE_BASE 10000.0f
#define MIN_FALL 10.0       /* first 10 steps' mean loss / the mean over the last 10% */

typedef struct {
    tg_tensor *emb, *wq, *wk, *wv, *wo, *wout;
    int x[B * T], y[B * T];  /* tokens, and the targets: y[t] = x[t − 1] */
    int use_rope;
    double first;            /* mean loss of the first 10 steps */
    int n_seen;
} model;

/* The loss: embed, attend (causal, rope on q and k), add, project to logits. */
static tg_tensor *forward(tg_ctx *ctx, void *u) {
    model *m = u;
    const int heads[4] = {B, T, H, D / H};
    tg_tensor *h = tg_embedding(ctx, m->emb, m->x, B, T);                      /* [B, T, D] */
    tg_tensor *q = tg_reshape(ctx, tg_matmul(ctx, h, m->wq, 0, 0), 4, heads);
    tg_tensor *k = tg_reshape(ctx, tg_matmul(ctx, h, m->wk, 0, 0), 4, heads);
    tg_tensor *v = tg_reshape(ctx, tg_matmul(ctx, h, m->wv, 0, 0), 4, heads);
    if (m->use_rope) {
        q = rope(ctx, q, ROPE_BASE);
        k = rope(ctx, k, ROPE_BASE);
    }
    tg_tensor *a = tg_attention(ctx, q, k, v, NULL, 1.0f / sqrtf(D / H), 1, NULL);
    tg_tensor *o = tg_matmul(ctx, tg_reshape(ctx, a, 3, (int[]){B, T, D}), m->wo, 0, 0);
    return tg_cross_entropy(ctx, tg_matmul(ctx, tg_add(ctx, h, o), m->wout, 0, 0), m->y);
}

static void make_params(tg_params *P, model *m, uint64_t seed) {
    tg_params_init(P);
    m->emb = tg_param(P, "emb", 2, (int[]){V, D});
    m->wq = tg_param(P, "wq", 2, (int[]){D, D});
    m->wk = tg_param(P, "wk", 2, (int[]){D, D});
    m->wv = tg_param(P, "wv", 2, (int[]){D, D});
    m->wo = tg_param(P, "wo", 2, (int[]){D, D});
    m->wout = tg_param(P, "wout", 2, (int[]){D, V});
    tg_params_alloc(P);
    tg_rng r;
    tg_rng_seed(&r, seed, 1);
    for (int i = 0; i < P->n; i++) {   /* embeddings N(0, 1), matrices N(0, 1/D) */
        tg_tensor *t = P->list[i];
        tg_fill_normal(&r, t->data, t->numel, 0.0f, t == m->emb ? 1.0f : 1.0f / sqrtf(D));
    }
}

static void make_batch(model *m, tg_rng *r) {
    for (int i = 0; i < B * T; i++) m->x[i] = (int)tg_rng_below(r, V);
    for (int i = 0; i < B * T; i++) m->y[i] = i % T == 0 ? -1 : m->x[i - 1];   /* −1: no target */
}

/* The training kit's loop (tapegrad/train.h) calls these: draw a batch, build the loss. */
static void batch(void *u, tg_rng *rng, int step) {
    (void)step;
    make_batch(u, rng);
}

static tg_tensor *train_forward(tg_ctx *ctx, void *u, int logging) {
    model *m = u;
    tg_tensor *loss = forward(ctx, m);
    if (logging && m->n_seen < 10) m->first += loss->data[0] / 10;   /* log_every 1: every step */
    m->n_seen++;
    return loss;
}

/* Trains through the kit from a fixed seed; returns the mean loss of the first
 * 10 steps over that of the last 10% (the kit's final_loss). */
static double train(int use_rope, const char *log) {
    tg_params P;
    model m = { .use_rope = use_rope };
    make_params(&P, &m, 1);
    tg_train_cfg c;
    tg_train_defaults(&c, use_rope ? "custom_op (rope)" : "custom_op (no rope)");
    c.steps = STEPS, c.lr = c.lr_min = 3e-3f, c.clip = 0, c.log_every = 1, c.data_seed = 2, c.progress = 0;
    c.log = log, c.overwrite = 1;
    tg_train_model tm = { .P = &P, .user = &m, .batch = batch, .forward = train_forward };
    tg_train_result r;
    int status = tg_train(&c, &tm, &r);
    tg_params_free(&P);
    if (status) return 0;
    return m.first / r.final_loss;
}

/* What tg_gradcheck differentiates: any graph built from the parameters. */
static tg_tensor *f_rope(tg_ctx *ctx, void *x) { return rope(ctx, x, 10.0f); }

static tg_tensor *f_rope_attention(tg_ctx *ctx, void *u) {   /* as the model uses it */
    tg_tensor **qkv = u;
    return tg_attention(ctx, rope(ctx, qkv[0], 10.0f), rope(ctx, qkv[1], 10.0f), qkv[2], NULL, 0.5f, 1, NULL);
}

static void fill_normal(tg_params *P, uint64_t seed) {
    tg_rng r;
    tg_rng_seed(&r, seed, 1);
    tg_fill_normal(&r, P->data, (int64_t)P->numel, 0.0f, 1.0f);
}

int main(int argc, char **argv) {
    if (tg_runtime_init("custom_op", argc, argv)) return 1;   /* first: the BLAS kernel check, threads */
    printf("tapegrad %s (headers %s)\n", tg_version(), TG_VERSION_STRING);

    /* 1. gradient checks: odd sizes, batch > 1, base 10 for large angles */
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", 4, (int[]){2, 5, 3, 6});
    tg_params_alloc(&P);
    fill_normal(&P, 3);
    int bad = tg_gradcheck("rope", &P, f_rope, x, NULL);
    tg_params_free(&P);

    tg_params_init(&P);
    tg_tensor *qkv[3] = { tg_param(&P, "q", 4, (int[]){2, 5, 2, 4}), tg_param(&P, "k", 4, (int[]){2, 5, 2, 4}),
                          tg_param(&P, "v", 4, (int[]){2, 5, 2, 3}) };
    tg_params_alloc(&P);
    fill_normal(&P, 4);
    bad += tg_gradcheck("rope in attention", &P, f_rope_attention, qkv, NULL);
    tg_params_free(&P);
    printf("gradient checks: %s\n", bad ? "FAILED" : "passed");
    if (bad) return 1;

    /* 2., 3. training */
    double fall = train(1, argc > 1 ? argv[1] : NULL);
    printf("with rope: the loss fell %.1fx (needs %.0fx)\n", fall, MIN_FALL);
    printf("without rope: the loss fell %.1fx\n", train(0, NULL));
    return fall >= MIN_FALL ? 0 : 1;
}
