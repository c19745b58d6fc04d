/* Mixed precision (tg_ctx_set_precision): the products of tg_matmul and both attention
 * ops read their operands rounded to bf16 or fp16 and accumulate in float32.
 *   - tg_matmul, forward and both gradients, against the same products computed in double
 *     on the rounded operands: equal to float32's accumulation error, so every operand
 *     was rounded (and nothing else was);
 *   - the attention ops, output and q, k, v gradients, against FlashAttention's rule as
 *     attn_check applies it to a bf16 kernel: error against the exact attention on the
 *     rounded inputs at most 2x a textbook computed in the precision (plus u);
 *   - under each precision the results differ from float32's (the path is taken), and
 *     float32 is the default and bit-identical to a context never set;
 *   - a bad precision is refused, naming it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "check_internal.h"
#include "tapegrad.h"
#include "testutil.h"

/* C[M,N] = A[M,K]·B[K,N] in double on A, B rounded to p; mag = Σ|a||b| per element */
static void ref_mm(int p, const float *A, const float *B, int M, int N, int K, double *C, double *mag) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, m = 0;
            for (int k = 0; k < K; k++) {
                double t = (double)tg_round_to(p, A[i * K + k]) * tg_round_to(p, B[k * N + j]);
                s += t, m += fabs(t);
            }
            C[i * N + j] = s, mag[i * N + j] = m;
        }
}

/* got against ref to float32's accumulation over K terms: |got − ref| <= K·2^-23·mag */
static void expect_accumulated(const char *what, const float *got, const double *ref, const double *mag, int n, int K) {
    for (int i = 0; i < n; i++) {
        double lim = K * ldexp(1.0, -23) * mag[i] + 1e-30;
        if (fabs(got[i] - ref[i]) > lim) fail_msg("%s[%d] = %.9g, the rounded operands' product %.9g (limit %.3g)", what, i, got[i], ref[i], lim);
    }
}

static void transpose(const float *x, int rows, int cols, float *y) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) y[j * rows + i] = x[i * cols + j];
}

static void test_matmul(void **state) {
    (void)state;
    const int M = 37, K = 70, N = 29;
    for (int p = TG_BF16; p <= TG_FP16; p++) {
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_ctx_set_precision(&ctx, p);
        tg_rng rng;
        tg_rng_seed(&rng, 7 + p, 1);
        tg_tensor *a = tg_new(&ctx, 2, (int[]){M, K}), *b = tg_new(&ctx, 2, (int[]){K, N});
        tg_fill_normal(&rng, a->data, a->numel, 0, 1.3f), tg_fill_normal(&rng, b->data, b->numel, 0, 0.7f);
        a->requires_grad = b->requires_grad = 1;
        tg_tensor *c = tg_matmul(&ctx, a, b, 0, 0);
        float *dc = tg_arena_alloc(&ctx, sizeof(float) * M * N);
        tg_fill_normal(&rng, dc, M * N, 0, 1.0f);
        tg_backward_seed(&ctx, c, dc);
        double *ref = tg_arena_alloc(&ctx, sizeof(double) * K * K * 2), *mag = ref + K * K;
        ref_mm(p, a->data, b->data, M, N, K, ref, mag);
        expect_accumulated("C", c->data, ref, mag, M * N, K);
        /* dA = dC·Bᵀ, dB = Aᵀ·dC on dC, A, B rounded */
        float *bt = tg_arena_alloc(&ctx, sizeof(float) * K * N), *at = tg_arena_alloc(&ctx, sizeof(float) * M * K);
        transpose(b->data, K, N, bt), transpose(a->data, M, K, at);
        ref_mm(p, dc, bt, M, K, N, ref, mag);
        expect_accumulated("dA", a->grad, ref, mag, M * K, N);
        ref_mm(p, at, dc, K, N, M, ref, mag);
        expect_accumulated("dB", b->grad, ref, mag, K * N, M);
        /* the same product in float32 differs: the operands were rounded */
        tg_ctx f;
        tg_ctx_init(&f, 0);
        tg_tensor *c32 = tg_matmul(&f, a, b, 0, 0);
        double diff = 0;
        for (int i = 0; i < M * N; i++) diff = fmax(diff, fabs(c32->data[i] - c->data[i]));
        assert_true(diff > 1e-3);
        tg_ctx_free(&f);
        tg_ctx_free(&ctx);
    }
}

/* The attention ops' output and gradients under p: FlashAttention's rule (tgc_lowprec_ratio),
 * exact = the attention on q, k, v rounded to p, in double; textbook = the same computed in p. */
typedef tg_tensor *(*attend_fn)(tg_ctx *ctx, const tg_attn_args *args);

/* fn on a's q, k, v (copied into a context of its own) under precision p: out, dq, dk, dv into got */
static void run_op(attend_fn fn, int p, const tg_attn_args *a, const float *dout, float *got[4]) {
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_ctx_set_precision(&ctx, p);
    tg_tensor *t[3] = {a->q, a->k, a->v};
    for (int i = 0; i < 3; i++) {
        tg_tensor *x = tg_new(&ctx, 4, t[i]->shape);
        memcpy(x->data, t[i]->data, sizeof(float) * x->numel);
        x->requires_grad = 1;
        t[i] = x;
    }
    tg_attn_args b = *a;
    b.q = t[0], b.k = t[1], b.v = t[2];
    tg_tensor *out = fn(&ctx, &b);
    tg_backward_seed(&ctx, out, dout);
    const float *g[4] = {out->data, t[0]->grad, t[1]->grad, t[2]->grad};
    for (int i = 0; i < 4; i++) memcpy(got[i], g[i], sizeof(float) * (i == 0 ? out->numel : t[i - 1]->numel));
    tg_ctx_free(&ctx);
}

static void attn_case(const char *op, attend_fn fn, int p, float scale, int causal, float std) {
    const int B = 2, T = 40, H = 4, Hkv = 2, d = 64;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_rng rng;
    tg_rng_seed(&rng, 11 + p, 1);
    tg_tensor *q = tgc_randn(&ctx, &rng, B, T, H, d, std), *k = tgc_randn(&ctx, &rng, B, T, Hkv, d, std);
    tg_tensor *v = tgc_randn(&ctx, &rng, B, T, Hkv, d, 1.0f);
    tg_attn_args a = tg_attn_args_make(q, k, v, scale);
    a.causal = causal;
    float *dout = tg_arena_alloc(&ctx, sizeof(float) * q->numel);
    tg_fill_normal(&rng, dout, q->numel, 0, 1.0f);
    const int64_t n[4] = {q->numel, q->numel, k->numel, v->numel};
    float *ex[4], *tb[4], *got[4], *f32[4];
    for (int i = 0; i < 4; i++) {
        ex[i] = tg_arena_alloc(&ctx, sizeof(float) * n[i]), tb[i] = tg_arena_alloc(&ctx, sizeof(float) * n[i]);
        got[i] = tg_arena_alloc(&ctx, sizeof(float) * n[i]), f32[i] = tg_arena_alloc(&ctx, sizeof(float) * n[i]);
    }
    tgc_textbook(&a, p, 0, dout, ex[0], ex[1], ex[2], ex[3]);
    tgc_textbook(&a, p, 1, dout, tb[0], tb[1], tb[2], tb[3]);
    run_op(fn, p, &a, dout, got);
    run_op(fn, TG_FP32, &a, dout, f32);
    const char *name[4] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < 4; i++) {
        double err, allowed;
        double ratio = tgc_lowprec_ratio(got[i], ex[i], tb[i], n[i], 2, tg_precision_u(p), &err, &allowed);
        if (!(ratio >= 0 && ratio <= 1))
            fail_msg("%s in %s (scale %g, causal %d): %s error %.3g of its scale, the rule allows %.3g", op,
                     tg_precision_name(p), scale, causal, name[i], err, allowed);
        /* float32 differs from p by more than float32's own rounding: the path was taken */
        double diff = 0, top = 0;
        for (int64_t e = 0; e < n[i]; e++) diff = fmax(diff, fabs(f32[i][e] - got[i][e])), top = fmax(top, fabs(f32[i][e]));
        if (!(diff > 1e-4 * top))
            fail_msg("%s in %s: %s within %.3g of float32's: not rounded", op, tg_precision_name(p), name[i], diff / top);
    }
    tg_ctx_free(&ctx);
}

/* tg_attention's rounding points exactly: q, k, v and the weights P (normalised, as the op
 * saves them) rounded to p, all else in double: the op's output is that to float32's error */
static void test_attention_points(void **state) {
    (void)state;
    const int B = 1, T = 33, H = 2, d = 48;
    for (int p = TG_BF16; p <= TG_FP16; p++) {
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_ctx_set_precision(&ctx, p);
        tg_rng rng;
        tg_rng_seed(&rng, 5 + p, 1);
        tg_tensor *q = tgc_randn(&ctx, &rng, B, T, H, d, 1), *k = tgc_randn(&ctx, &rng, B, T, H, d, 1);
        tg_tensor *v = tgc_randn(&ctx, &rng, B, T, H, d, 1);
        const float s = 0.3f;
        tg_attn_args a = tg_attn_args_make(q, k, v, s);
        a.causal = 1;
        tg_tensor *out = tg_attend(&ctx, &a);
        double x[64], P[64];
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                double m = -INFINITY, z = 0;
                for (int j = 0; j <= i; j++) {
                    double dot = 0;
                    for (int e = 0; e < d; e++)
                        dot += (double)tg_round_to(p, q->data[(i * H + h) * d + e]) * tg_round_to(p, k->data[(j * H + h) * d + e]);
                    x[j] = s * dot, m = fmax(m, x[j]);
                }
                for (int j = 0; j <= i; j++) z += exp(x[j] - m);
                for (int j = 0; j <= i; j++) P[j] = tg_round_to(p, (float)(exp(x[j] - m) / z));
                for (int e = 0; e < d; e++) {
                    double o = 0, mag = 0;
                    for (int j = 0; j <= i; j++) {
                        double t = P[j] * tg_round_to(p, v->data[(j * H + h) * d + e]);
                        o += t, mag += fabs(t);
                    }
                    /* the weights differ from P by their float32 softmax's few ulps before rounding:
                     * one in a few hundred lands on the other side of a rounding, by u of it */
                    double got = out->data[(i * H + h) * d + e], lim = 1e-5 * mag + 2 * tg_precision_u(p) * mag / (i + 1);
                    if (fabs(got - o) > lim)
                        fail_msg("%s: out[%d,%d,%d] = %.8g, rounded at q, k, v, P: %.8g", tg_precision_name(p), i, h, e, got, o);
                }
            }
        tg_ctx_free(&ctx);
    }
}

static void test_attention_ops(void **state) {
    (void)state;
    struct { const char *name; attend_fn fn; } ops[] = {{"tg_attention", tg_attend}, {"tg_flash_attention", tg_flash_attend}};
    for (int o = 0; o < 2; o++)
        for (int p = TG_BF16; p <= TG_FP16; p++) {
            attn_case(ops[o].name, ops[o].fn, p, 0.125f, 1, 1.0f);   /* 1/√64, causal */
            attn_case(ops[o].name, ops[o].fn, p, 1.0f, 0, 0.6f);     /* no scale: logits in the tens, peaked rows */
        }
}

/* fp32 is the default and the same bits as a context whose precision was set to it */
static void test_fp32_default(void **state) {
    (void)state;
    tg_ctx a, b;
    tg_ctx_init(&a, 0), tg_ctx_init(&b, 0);
    assert_int_equal(a.precision, TG_FP32);
    tg_ctx_set_precision(&b, TG_BF16);
    tg_ctx_set_precision(&b, TG_FP32);
    tg_rng rng;
    tg_rng_seed(&rng, 3, 1);
    tg_tensor *q = tgc_randn(&a, &rng, 1, 24, 2, 32, 1), *k = tgc_randn(&a, &rng, 1, 24, 2, 32, 1);
    tg_tensor *v = tgc_randn(&a, &rng, 1, 24, 2, 32, 1);
    tg_attn_args x = tg_attn_args_make(q, k, v, 0.2f);
    tg_tensor *o1 = tg_attend(&a, &x), *o2 = tg_attend(&b, &x);
    assert_memory_equal(o1->data, o2->data, sizeof(float) * o1->numel);
    tg_ctx_free(&a), tg_ctx_free(&b);
}

static void test_bad_precision(void **state) {
    (void)state;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    if (!setjmp(c.jb)) {
        tg_ctx_set_precision(&ctx, 3);
        fail_msg("precision 3 accepted");
    }
    assert_non_null(strstr(c.msg, "precision 3"));
    assert_int_equal(ctx.precision, TG_FP32);
    tg_ctx_free(&ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_attention_points),
        cmocka_unit_test(test_attention_ops),
        cmocka_unit_test(test_fp32_default),
        cmocka_unit_test(test_bad_precision),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
