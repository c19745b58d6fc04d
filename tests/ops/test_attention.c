#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "tg_ops.h"
#include "testutil.h"

/* ---- the seed's worked example: B = 1, T = 3, H = 1, d = 4, dv = 2 -------- */
static const float EX_Q[] = {1, 0, 1, 0, 0, 1, 0, 1, 1, 1, 1, 0};
static const float EX_K[] = {1, 0, 1, 0, 0, 1, 0, 1, 1, 1, 0, 0};
static const float EX_V[] = {1, 0, 0, 1, 1, 1};

typedef struct {
    tg_tensor *q, *k, *v, *hs;
    float scale;
    int causal;
} attn_case;

static tg_tensor *f_attn(tg_ctx *ctx, void *u) {
    attn_case *c = u;
    return tg_attention(ctx, c->q, c->k, c->v, c->hs, c->scale, c->causal, NULL);
}

static void example_params(tg_params *P, attn_case *c) {
    tg_params_init(P);
    c->q = tg_param(P, "q", 4, (int[]){1, 3, 1, 4});
    c->k = tg_param(P, "k", 4, (int[]){1, 3, 1, 4});
    c->v = tg_param(P, "v", 4, (int[]){1, 3, 1, 2});
    tg_params_alloc(P);
    memcpy(c->q->data, EX_Q, sizeof EX_Q);
    memcpy(c->k->data, EX_K, sizeof EX_K);
    memcpy(c->v->data, EX_V, sizeof EX_V);
}

static void test_worked_example(void **s) {
    (void)s;
    tg_params P;
    attn_case c = { .scale = 0.5f };   /* 1 / sqrt(4) */
    example_params(&P, &c);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    float ent, mxl, sat;
    tg_attn_stats st = { .H = 1, .entropy = &ent, .max_logit = &mxl, .saturation = &sat };
    tg_tensor *out = tg_attention(&ctx, c.q, c.k, c.v, NULL, c.scale, 0, &st);
    assert_int_equal(out->ndim, 4);
    assert_int_equal(out->shape[3], 2);
    const float want_p[] = {0.506f, 0.186f, 0.307f, 0.186f, 0.506f, 0.307f, 0.384f, 0.233f, 0.384f};
    const float want_o[] = {0.814f, 0.494f, 0.494f, 0.814f, 0.767f, 0.616f};
    const float *p = tg_attention_probs(&ctx, out);
    assert_non_null(p);
    for (int i = 0; i < 9; i++) assert_float_equal(p[i], want_p[i], 5e-4 + 1e-6);  /* 3 decimals */
    for (int i = 0; i < 6; i++) assert_float_equal(out->data[i], want_o[i], 5e-4 + 1e-6);
    /* the seed's own check of row 1: e^1, e^0, e^0.5 over their sum */
    double z = exp(1.0) + 1 + exp(0.5);
    assert_float_equal(p[0], exp(1.0) / z, 1e-6);
    assert_float_equal(out->data[0], (exp(1.0) + exp(0.5)) / z, 1e-6);
    assert_float_equal(mxl, 1.0, 1e-6);          /* largest scaled score: 2 / 2 */
    assert_float_equal(sat, 0.0, 0);
    tg_ctx_free(&ctx);

    assert_int_equal(tg_gradcheck("attention worked example", &P, f_attn, &c, NULL), 0);
    c.causal = 1;
    assert_int_equal(tg_gradcheck("attention worked example causal", &P, f_attn, &c, NULL), 0);
    tg_params_free(&P);
}

/* ---- the composed path, from matmul + softmax and two test-local ops ------ */

/* [A, X, Y, C] -> [A, Y, X, C]: moves heads in front of time and back. */
static void swap12_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *x = n->in[0], *y = n->out;
    if (!x->grad) return;
    int A = x->shape[0], X = x->shape[1], Y = x->shape[2], C = x->shape[3];
    for (int a = 0; a < A; a++)
        for (int i = 0; i < X; i++)
            for (int j = 0; j < Y; j++)
                for (int c = 0; c < C; c++)
                    x->grad[((a * X + i) * Y + j) * C + c] += y->grad[((a * Y + j) * X + i) * C + c];
}

static tg_tensor *swap12(tg_ctx *ctx, tg_tensor *x) {
    int A = x->shape[0], X = x->shape[1], Y = x->shape[2], C = x->shape[3];
    tg_tensor *y = tg_new(ctx, 4, (int[]){A, Y, X, C});
    for (int a = 0; a < A; a++)
        for (int i = 0; i < X; i++)
            for (int j = 0; j < Y; j++)
                for (int c = 0; c < C; c++)
                    y->data[((a * Y + j) * X + i) * C + c] = x->data[((a * X + i) * Y + j) * C + c];
    tg_record(ctx, "test_swap12", swap12_backward, y, 1, (tg_tensor *[]){x}, 0);
    return y;
}

/* y[b,h] = scale · hs[h] · x[b,h] for x [B, H, T, T]; hs may be NULL. */
typedef struct { float scale; } sh_rec;

static void scale_heads_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *x = n->in[0], *y = n->out, *hs = n->n_in == 2 ? n->in[1] : NULL;
    float scale = ((const sh_rec *)n->saved)->scale;
    int H = x->shape[1];
    int64_t TT = (int64_t)x->shape[2] * x->shape[3];
    for (int64_t i = 0; i < x->numel; i++) {
        int h = (int)(i / TT % H);
        if (x->grad) x->grad[i] += scale * (hs ? hs->data[h] : 1.0f) * y->grad[i];
        if (hs && hs->grad) hs->grad[h] += scale * x->data[i] * y->grad[i];
    }
}

static tg_tensor *scale_heads(tg_ctx *ctx, tg_tensor *x, tg_tensor *hs, float scale) {
    tg_tensor *y = tg_new_like(ctx, x);
    int H = x->shape[1];
    int64_t TT = (int64_t)x->shape[2] * x->shape[3];
    for (int64_t i = 0; i < x->numel; i++) y->data[i] = scale * (hs ? hs->data[i / TT % H] : 1.0f) * x->data[i];
    tg_node *n = tg_record(ctx, "test_scale_heads", scale_heads_backward, y, hs ? 2 : 1,
                           (tg_tensor *[]){x, hs}, sizeof(sh_rec));
    if (n) ((sh_rec *)n->saved)->scale = scale;
    return y;
}

/* out = swap12(softmax(scale·hs · swap12(q) swap12(k)ᵀ) swap12(v)); *probs = P */
static tg_tensor *composed(tg_ctx *ctx, const attn_case *c, tg_tensor **probs) {
    tg_tensor *qh = swap12(ctx, c->q), *kh = swap12(ctx, c->k), *vh = swap12(ctx, c->v);
    tg_tensor *S = tg_matmul(ctx, qh, kh, 0, 1);
    tg_tensor *P = tg_softmax(ctx, scale_heads(ctx, S, c->hs, c->scale), c->causal);
    if (probs) *probs = P;
    return swap12(ctx, tg_matmul(ctx, P, vh, 0, 0));
}

enum { B = 2, T = 5, H = 3, D = 4, DV = 3 };

static void random_params(tg_params *P, attn_case *c, int with_hs, int dv, uint64_t seed) {
    tg_params_init(P);
    c->q = tg_param(P, "q", 4, (int[]){B, T, H, D});
    c->k = tg_param(P, "k", 4, (int[]){B, T, H, D});
    c->v = tg_param(P, "v", 4, (int[]){B, T, H, dv});
    c->hs = with_hs ? tg_param(P, "head_scale", 1, (int[]){H}) : NULL;
    tg_params_alloc(P);
    tg_test_fill(P, seed, 0.7f);
    if (with_hs) {   /* a mix: shrink, grow, and flip the sign of the logits */
        c->hs->data[0] = 0.8f;
        c->hs->data[1] = 1.5f;
        c->hs->data[2] = -0.6f;
    }
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static void test_matches_composed(void **s) {
    (void)s;
    const float scales[] = {1.0f, 0.5f, 0.25f, -0.3f};
    int cases = 0;
    for (int si = 0; si < 4; si++)
        for (int causal = 0; causal < 2; causal++)
            for (int with_hs = 0; with_hs < 2; with_hs++) {
                tg_params P;
                attn_case c = { .scale = scales[si], .causal = causal };
                random_params(&P, &c, with_hs, DV, 100 + (uint64_t)cases++);
                for (size_t i = 0; i < P.numel; i++) P.data[i] *= 2.0f;   /* peakier weights */
                tg_ctx ctx;
                tg_ctx_init(&ctx, 0);
                tg_tensor *o1 = f_attn(&ctx, &c);
                float R[B * T * H * DV];
                tg_rng r;
                tg_rng_seed(&r, 77, 3);
                tg_fill_normal(&r, R, o1->numel, 0.0f, 1.0f);
                tg_params_zero_grad(&P);
                tg_backward_seed(&ctx, o1, R);
                float g1[B * T * H * (2 * D + DV) + H];
                memcpy(g1, P.grad, P.numel * sizeof(float));
                const float *p1 = tg_attention_probs(&ctx, o1);

                tg_tensor *p2;
                tg_tensor *o2 = composed(&ctx, &c, &p2);
                tg_params_zero_grad(&P);
                tg_backward_seed(&ctx, o2, R);

                assert_int_equal(o2->numel, o1->numel);
                for (int64_t i = 0; i < o1->numel; i++) assert_float_equal(o1->data[i], o2->data[i], 1e-5);
                for (int64_t i = 0; i < p2->numel; i++) assert_float_equal(p1[i], p2->data[i], 1e-6);
                double gscale = fmax(1.0, max_abs(P.grad, P.numel));
                for (size_t i = 0; i < P.numel; i++) assert_float_equal(g1[i], P.grad[i], 1e-5 * gscale);
                tg_ctx_free(&ctx);
                tg_params_free(&P);
            }
}

/* ---- gradient checks ------------------------------------------------------ */

static void test_grad_grid(void **s) {
    (void)s;
    const float scales[] = {1.0f, 0.5f /* 1/sqrt(d) */, 0.25f /* 1/d */};
    int cases = 0;
    for (int si = 0; si < 3; si++)
        for (int causal = 0; causal < 2; causal++)
            for (int with_hs = 0; with_hs < 2; with_hs++) {
                tg_params P;
                attn_case c = { .scale = scales[si], .causal = causal };
                random_params(&P, &c, with_hs, DV, 1 + (uint64_t)cases++);
                char label[96];
                snprintf(label, sizeof label, "attention [%d,%d,%d,%d] dv=%d scale=%g causal=%d head_scale=%d",
                         B, T, H, D, DV, (double)c.scale, causal, with_hs);
                assert_int_equal(tg_gradcheck(label, &P, f_attn, &c, NULL), 0);
                tg_params_free(&P);
            }
}

/* T >= 2·d: the op transposes K (and V in backward) and runs Q Kᵀ and dO Vᵀ
 * on libxsmm (ops/attention.c, transpose_first); the cases above (T 5, d 4)
 * take the other path. */
static void test_grad_long_rows(void **s) {
    (void)s;
    for (int causal = 0; causal < 2; causal++) {
        tg_params P;
        tg_params_init(&P);
        attn_case c = { .scale = 0.7f, .causal = causal };
        c.q = tg_param(&P, "q", 4, (int[]){2, 9, 2, 2});
        c.k = tg_param(&P, "k", 4, (int[]){2, 9, 2, 2});
        c.v = tg_param(&P, "v", 4, (int[]){2, 9, 2, 2});
        c.hs = tg_param(&P, "head_scale", 1, (int[]){2});
        tg_params_alloc(&P);
        tg_test_fill(&P, 70 + (uint64_t)causal, 0.7f);
        assert_int_equal(tg_gradcheck(causal ? "attention T=9 d=2 causal" : "attention T=9 d=2", &P, f_attn, &c, NULL),
                         0);
        tg_params_free(&P);
    }
}

/* Self-attention on one tensor: q, k and v's three contributions must add. */
static tg_tensor *f_self(tg_ctx *ctx, void *u) {
    attn_case *c = u;
    return tg_attention(ctx, c->q, c->q, c->q, c->hs, c->scale, c->causal, NULL);
}

static void test_grad_shared_input(void **s) {
    (void)s;
    for (int causal = 0; causal < 2; causal++) {
        tg_params P;
        attn_case c = { .scale = 0.5f, .causal = causal };
        random_params(&P, &c, 1, DV, 50 + (uint64_t)causal);
        assert_int_equal(tg_gradcheck(causal ? "attention q=k=v causal" : "attention q=k=v", &P, f_self, &c, NULL), 0);
        tg_params_free(&P);
    }
}

/* Only some inputs need a gradient: the others are constants made per call. */
typedef struct { attn_case c; const float *q, *k, *v; } partial_case;

static tg_tensor *constant(tg_ctx *ctx, tg_tensor *like, const float *data) {
    tg_tensor *t = tg_new_like(ctx, like);
    memcpy(t->data, data, (size_t)t->numel * sizeof(float));
    return t;
}

static tg_tensor *f_partial(tg_ctx *ctx, void *u) {
    partial_case *pc = u;
    tg_tensor *q = pc->q ? constant(ctx, pc->c.q, pc->q) : pc->c.q;
    tg_tensor *k = pc->k ? constant(ctx, pc->c.k, pc->k) : pc->c.k;
    tg_tensor *v = pc->v ? constant(ctx, pc->c.v, pc->v) : pc->c.v;
    return tg_attention(ctx, q, k, v, pc->c.hs, pc->c.scale, pc->c.causal, NULL);
}

static void test_grad_partial(void **s) {
    (void)s;
    /* the params' values stand in for the constants; only the rest are checked */
    tg_params P, Pq, Pv;
    attn_case c = { .scale = 0.5f, .causal = 1 };
    random_params(&P, &c, 1, DV, 60);
    tg_params_init(&Pq);
    tg_tensor *hs_only = tg_param(&Pq, "head_scale", 1, (int[]){H});
    tg_params_alloc(&Pq);
    memcpy(hs_only->data, c.hs->data, H * sizeof(float));
    partial_case pc = { .c = c, .q = c.q->data, .k = c.k->data, .v = c.v->data };
    pc.c.hs = hs_only;
    assert_int_equal(tg_gradcheck("attention head_scale only", &Pq, f_partial, &pc, NULL), 0);

    tg_params_init(&Pv);
    tg_tensor *v_only = tg_param(&Pv, "v", 4, (int[]){B, T, H, DV});
    tg_params_alloc(&Pv);
    memcpy(v_only->data, c.v->data, (size_t)v_only->numel * sizeof(float));
    pc = (partial_case){ .c = c, .q = c.q->data, .k = c.k->data };
    pc.c.v = v_only;
    pc.c.hs = NULL;
    assert_int_equal(tg_gradcheck("attention v only", &Pv, f_partial, &pc, NULL), 0);
    tg_params_free(&P);
    tg_params_free(&Pq);
    tg_params_free(&Pv);
}

/* ---- stats ---------------------------------------------------------------- */

static void test_stats_match_probs(void **s) {
    (void)s;
    for (int causal = 0; causal < 2; causal++) {
        tg_params P;
        attn_case c = { .scale = 0.5f, .causal = causal };
        random_params(&P, &c, 1, DV, 70 + (uint64_t)causal);
        for (int i = 0; i < B * T * H * D; i++) c.q->data[i] *= 4.0f;   /* some rows saturate */
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        float ent[H], mxl[H], sat[H];
        tg_attn_stats st = { .H = H, .entropy = ent, .max_logit = mxl, .saturation = sat };
        tg_tensor *out = tg_attention(&ctx, c.q, c.k, c.v, c.hs, c.scale, causal, &st);
        const float *p = tg_attention_probs(&ctx, out);
        int any_sat = 0;
        for (int h = 0; h < H; h++) {
            double e = 0, m = -INFINITY;
            int n_sat = 0;
            for (int b = 0; b < B; b++)
                for (int i = 0; i < T; i++) {
                    const float *row = p + (((int64_t)b * H + h) * T + i) * T;
                    double pmax = 0;
                    for (int j = 0; j < T; j++) {
                        if (causal && j > i) {
                            assert_true(row[j] == 0.0f);
                            continue;
                        }
                        if (row[j] > 0) e -= row[j] * log(row[j]);
                        pmax = fmax(pmax, row[j]);
                        double dot = 0;   /* the logit, straight from q and k */
                        for (int x = 0; x < D; x++)
                            dot += (double)c.q->data[((b * T + i) * H + h) * D + x] * c.k->data[((b * T + j) * H + h) * D + x];
                        m = fmax(m, dot * c.scale * c.hs->data[h]);
                    }
                    n_sat += pmax > 0.99;
                }
            assert_float_equal(ent[h], e / (B * T), 1e-5);
            assert_float_equal(mxl[h], m, 1e-5 * fmax(1, fabs(m)));
            assert_float_equal(sat[h], (double)n_sat / (B * T), 1e-6);
            any_sat += n_sat > 0 && n_sat < B * T;
        }
        assert_true(any_sat > 0);   /* some head has both saturated and soft rows */
        tg_ctx_free(&ctx);
        tg_params_free(&P);
    }
}

/* q = 0: every logit is 0, the weights uniform over the visible keys. */
static void test_stats_uniform(void **s) {
    (void)s;
    assert_float_equal(tg_attn_uniform_entropy(1, 0), 0.0, 0);
    assert_float_equal(tg_attn_uniform_entropy(4, 0), log(4.0), 1e-12);
    assert_float_equal(tg_attn_uniform_entropy(3, 1), (log(2.0) + log(3.0)) / 3, 1e-12);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    for (int causal = 0; causal < 2; causal++) {
        tg_tensor *q = tg_zeros(&ctx, 4, (int[]){B, T, H, D}), *k = tg_new_like(&ctx, q);
        tg_tensor *v = tg_new(&ctx, 4, (int[]){B, T, H, DV});
        tg_rng r;
        tg_rng_seed(&r, 5, 5);
        tg_fill_normal(&r, k->data, k->numel, 0.0f, 3.0f);
        tg_fill_normal(&r, v->data, v->numel, 0.0f, 1.0f);
        float ent[H], mxl[H], sat[H];
        tg_attn_stats st = { .H = H, .entropy = ent, .max_logit = mxl, .saturation = sat };
        tg_tensor *out = tg_attention(&ctx, q, k, v, NULL, 0.5f, causal, &st);
        for (int h = 0; h < H; h++) {
            assert_float_equal(ent[h], tg_attn_uniform_entropy(T, causal), 1e-6);
            assert_float_equal(mxl[h], 0.0, 0);
            assert_float_equal(sat[h], causal ? 1.0 / T : 0.0, 1e-7);   /* causal row 0 sees one key */
        }
        /* uniform weights: output row i is the mean of the visible v rows */
        for (int b = 0; b < B; b++)
            for (int i = 0; i < T; i++)
                for (int h = 0; h < H; h++)
                    for (int x = 0; x < DV; x++) {
                        int nv = causal ? i + 1 : T;
                        double m = 0;
                        for (int j = 0; j < nv; j++) m += v->data[((b * T + j) * H + h) * DV + x];
                        assert_float_equal(out->data[((b * T + i) * H + h) * DV + x], m / nv, 1e-6);
                    }
        assert_null(tg_attention_probs(&ctx, out));   /* constants only: nothing recorded */
    }
    tg_ctx_free(&ctx);
}

/* q_i = 40·e_i, k_j = e_j (d = T): row i puts weight ~1 on key i. */
static void test_stats_saturated(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    const int t = 4;
    for (int causal = 0; causal < 2; causal++) {
        tg_tensor *q = tg_zeros(&ctx, 4, (int[]){1, t, 1, t}), *k = tg_zeros(&ctx, 4, (int[]){1, t, 1, t});
        tg_tensor *v = tg_zeros(&ctx, 4, (int[]){1, t, 1, 2});
        for (int i = 0; i < t; i++) {
            q->data[i * t + i] = 40.0f;
            k->data[i * t + i] = 1.0f;
        }
        float ent, mxl, sat;
        tg_attn_stats st = { .H = 1, .entropy = &ent, .max_logit = &mxl, .saturation = &sat };
        tg_attention(&ctx, q, k, v, NULL, 0.5f, causal, &st);
        assert_float_equal(sat, 1.0, 0);
        assert_float_equal(mxl, 20.0, 1e-6);
        assert_true(ent >= 0.0f && ent < 1e-6f);
        assert_true(isfinite(ent));
    }
    tg_ctx_free(&ctx);
}

/* ---- memory, misuse ------------------------------------------------------- */

/* A fixed-shape step (forward, stats, backward) mallocs nothing after the first. */
static void test_no_heap_after_first_step(void **s) {
    (void)s;
    tg_params P;
    attn_case c = { .scale = 0.5f, .causal = 1 };
    random_params(&P, &c, 1, DV, 80);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 1 << 16);
    float ent[H], mxl[H], sat[H], R[B * T * H * DV];
    for (int i = 0; i < B * T * H * DV; i++) R[i] = 1.0f;
    tg_attn_stats st = { .H = H, .entropy = ent, .max_logit = mxl, .saturation = sat };
    size_t after_first = 0;
    for (int step = 0; step < 3; step++) {
        tg_ctx_reset(&ctx);
        tg_tensor *out = tg_attention(&ctx, c.q, c.k, c.v, c.hs, c.scale, c.causal, &st);
        tg_backward_seed(&ctx, out, R);
        if (step == 0) after_first = ctx.heap_allocs;
        else assert_int_equal(ctx.heap_allocs, after_first);
    }
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

static void test_misuse(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch e;
    tg_test_catch_errors(&ctx, &e);
    tg_tensor *q = tg_new(&ctx, 4, (int[]){2, 5, 3, 4}), *k = tg_new_like(&ctx, q);
    tg_tensor *v = tg_new(&ctx, 4, (int[]){2, 5, 3, 6});
    tg_tensor *k2 = tg_new(&ctx, 4, (int[]){2, 5, 3, 8}), *k3 = tg_new(&ctx, 4, (int[]){2, 6, 3, 4});
    tg_tensor *v2 = tg_new(&ctx, 4, (int[]){2, 5, 2, 4}), *q3 = tg_new(&ctx, 3, (int[]){2, 5, 12});
    EXPECT_TG_ERROR(&e, tg_attention(&ctx, q3, k, v, NULL, 1, 0, NULL),
                    "tg_attention: q, k and v must be 4-D [B,T,H,d]: q [2,5,12], k [2,5,3,4], v [2,5,3,6]");
    EXPECT_TG_ERROR(&e, tg_attention(&ctx, q, k2, v, NULL, 1, 0, NULL),
                    "tg_attention: expected q [B,Tq,H,d], k [B,Tk,Hkv,d], v [B,Tk,Hkv,dv] (one B, q and k one d, k and v one "
                    "Tk and Hkv): q [2,5,3,4], k [2,5,3,8], v [2,5,3,6]");
    EXPECT_TG_ERROR(&e, tg_attention(&ctx, q, k3, v, NULL, 1, 1, NULL), "q [2,5,3,4], k [2,6,3,4], v [2,5,3,6]");
    EXPECT_TG_ERROR(&e, tg_attention(&ctx, q, k, v2, NULL, 1, 0, NULL), "q [2,5,3,4], k [2,5,3,4], v [2,5,2,4]");
    tg_tensor *hs = tg_new(&ctx, 1, (int[]){4}), *hs2 = tg_new(&ctx, 2, (int[]){1, 3});
    EXPECT_TG_ERROR(&e, tg_attention(&ctx, q, k, v, hs, 1, 0, NULL),
                    "tg_attention: head_scale must be [H] = [3] for q [2,5,3,4], got [4]");
    EXPECT_TG_ERROR(&e, tg_attention(&ctx, q, k, v, hs2, 1, 0, NULL), "got [1,3]");
    float a[3], b[3], c[3];
    tg_attn_stats st = { .H = 2, .entropy = a, .max_logit = b, .saturation = c };
    EXPECT_TG_ERROR(&e, tg_attention(&ctx, q, k, v, NULL, 1, 0, &st),
                    "tg_attention: stats->H is 2 but q [2,5,3,4] has H = 3 heads");
    EXPECT_TG_ERROR(&e, tg_attention(&ctx, q, k, v, NULL, NAN, 0, NULL), "tg_attention: scale must be finite");
    EXPECT_TG_ERROR(&e, tg_attention(&ctx, q, k, v, NULL, INFINITY, 0, NULL), "got inf");
    /* scores that overflow a size_t in bytes (2^70 of them): refused by name before any memory is asked
     * for (the unchecked product wrapped around to a small arena block). Headers only: no data is read. */
    tg_tensor big = {.ndim = 4, .shape = {1 << 20, 1 << 20, 1 << 10, 1}, .data = a};
    EXPECT_TG_ERROR(&e, tg_attention(&ctx, &big, &big, &big, NULL, 1, 0, NULL),
                    "tg_attention: q [1048576,1048576,1024,1] and k [1048576,1048576,1024,1] make B*H*Tq*Tk = "
                    "1048576*1024*1048576*1048576 scores, more bytes than a size_t counts");
    EXPECT_TG_ERROR(&e, tg_flash_attention(&ctx, &big, &big, &big, NULL, 1, 1, NULL),
                    "tg_flash_attention: q [1048576,1048576,1024,1] and k [1048576,1048576,1024,1] make");
    tg_ctx_free(&ctx);
}

/* The "input used twice" check of an op that readies its inputs' grads itself
 * (tests/testutil.h, docs/ops.md#the-fast-kind-of-op). */
static tg_tensor *twice_op(tg_ctx *ctx, tg_tensor *h, void *u) {
    (void)u;
    return tg_attention(ctx, h, h, h, NULL, 0.5f, 1, NULL);   /* h as q, k and v */
}

static void test_input_used_twice(void **s) {
    (void)s;
    assert_int_equal(tg_test_used_twice_shape("attention", 4, (int[]){2, 5, 2, 3}, twice_op, NULL), 0);
}

/* A pass over more than twice the L2 asks for the next head's rows while a head
 * computes and cuts its products into chunks to do so (ops/attention.c,
 * pf_gemm); a batch row on its own fits the cache and does neither. Batch rows
 * are independent, so each row's output and q, k, v grads must be the same
 * bits both ways. (Not head_scale's grad: a sum over the batch rows.) */
static void test_big_pass_same_bits(void **s) {
    (void)s;
    enum { BB = 12, TT = 64, HH = 4, DD = 128 };   /* q, k, v, out: 6 MB, above twice any L2 up to 3 MB */
    for (int variant = 0; variant < 2; variant++) {
        const int hkv = variant ? 2 : HH;   /* 1: grouped heads, a head scale, causal with a window */
        const int64_t nq = (int64_t)TT * HH * DD, nk = (int64_t)TT * hkv * DD;
        float *want = NULL;   /* per batch row: out, dq, dk, dv */
        for (int whole = 1; whole >= 0; whole--)
            for (int b0 = 0; b0 < (whole ? 1 : BB); b0++) {
                const int nb = whole ? BB : 1;
                tg_params P;
                tg_params_init(&P);
                tg_tensor *q = tg_param(&P, "q", 4, (int[]){nb, TT, HH, DD});
                tg_tensor *k = tg_param(&P, "k", 4, (int[]){nb, TT, hkv, DD});
                tg_tensor *v = tg_param(&P, "v", 4, (int[]){nb, TT, hkv, DD});
                tg_tensor *hs = variant ? tg_param(&P, "head_scale", 1, (int[]){HH}) : NULL;
                tg_params_alloc(&P);
                tg_rng r;   /* row b's values the same whichever call holds it */
                for (int b = 0; b < nb; b++) {
                    tg_rng_seed(&r, 300 + variant, (uint64_t)(b0 + b));
                    tg_fill_normal(&r, q->data + b * nq, nq, 0.0f, 1.0f);
                    tg_fill_normal(&r, k->data + b * nk, nk, 0.0f, 1.0f);
                    tg_fill_normal(&r, v->data + b * nk, nk, 0.0f, 1.0f);
                }
                if (hs)
                    for (int h = 0; h < HH; h++) hs->data[h] = 0.5f + 0.25f * h;
                tg_attn_args a = tg_attn_args_make(q, k, v, 0.09f);
                a.head_scale = hs, a.causal = variant, a.window_left = variant ? 23 : -1;
                tg_ctx ctx;
                tg_ctx_init(&ctx, 0);
                tg_tensor *out = tg_attend(&ctx, &a);
                float *R = malloc((size_t)out->numel * sizeof *R);
                for (int b = 0; b < nb; b++) {
                    tg_rng_seed(&r, 400 + variant, (uint64_t)(b0 + b));
                    tg_fill_normal(&r, R + b * nq, nq, 0.0f, 1.0f);
                }
                tg_params_zero_grad(&P);
                tg_backward_seed(&ctx, out, R);
                const int64_t row = 2 * nq + 2 * nk;
                for (int b = 0; b < nb; b++) {
                    const float *part[4] = {out->data + b * nq, q->grad + b * nq, k->grad + b * nk, v->grad + b * nk};
                    const int64_t len[4] = {nq, nq, nk, nk};
                    if (whole && !want) want = malloc((size_t)(BB * row) * sizeof *want);
                    float *w = want + (b0 + b) * row;
                    for (int i = 0; i < 4; w += len[i], i++) {
                        if (whole) memcpy(w, part[i], (size_t)len[i] * sizeof *w);
                        else if (memcmp(w, part[i], (size_t)len[i] * sizeof *w))
                            fail_msg("variant %d, batch row %d: %s differs between B %d and B 1", variant, b0 + b,
                                     (const char *[]){"out", "dq", "dk", "dv"}[i], BB);
                    }
                }
                free(R);
                tg_ctx_free(&ctx);
                tg_params_free(&P);
            }
        free(want);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_used_twice),
        cmocka_unit_test(test_worked_example),
        cmocka_unit_test(test_matches_composed),
        cmocka_unit_test(test_grad_grid),
        cmocka_unit_test(test_grad_long_rows),
        cmocka_unit_test(test_grad_shared_input),
        cmocka_unit_test(test_grad_partial),
        cmocka_unit_test(test_stats_match_probs),
        cmocka_unit_test(test_stats_uniform),
        cmocka_unit_test(test_stats_saturated),
        cmocka_unit_test(test_no_heap_after_first_step),
        cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_big_pass_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
