/* The experiment's pieces at small size: tasks, reference losses, the flag
 * parser, and the direction of the √d_k result at initialisation. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <cblas.h>

#include "attn_dump.h"
#include "tg_cli.h"
#include "tg_model.h"
#include "tg_optim.h"
#include "tg_tasks.h"
#include "gradcheck.h"
#include "testutil.h"
#include "tg_ops.h"

/* hist targets are the running count of the token, checked by recounting */
static void test_hist_targets(void **s) {
    (void)s;
    tg_task_cfg t = {.kind = TG_TASK_HIST, .vocab = 64, .seq_len = 40, .alphabet = 5};
    tg_rng r;
    tg_rng_seed(&r, 9, 0);
    int x[3 * 40], y[3 * 40];
    tg_task_batch(&t, &r, 3, x, y);
    for (int b = 0; b < 3; b++) {
        assert_int_equal(x[b * 40], 5);   /* BOS */
        assert_int_equal(y[b * 40], -1);
        for (int i = 1; i < 40; i++) {
            int c = 0;
            for (int j = 1; j <= i; j++) c += x[b * 40 + j] == x[b * 40 + i];
            assert_true(x[b * 40 + i] >= 0 && x[b * 40 + i] < 5);
            assert_int_equal(y[b * 40 + i], c - 1);
        }
    }
}

/* recall: every query's target is the value its key was shown with */
static void test_recall_targets(void **s) {
    (void)s;
    tg_task_cfg t = {.kind = TG_TASK_RECALL, .vocab = 64, .seq_len = 16, .keys = 4, .values = 6};
    tg_rng r;
    tg_rng_seed(&r, 4, 0);
    int x[2 * 16], y[2 * 16];
    tg_task_batch(&t, &r, 2, x, y);
    for (int b = 0; b < 2; b++)
        for (int i = 8; i < 16; i++) {
            int k = x[b * 16 + i] - 4 * 6, found = 0;
            assert_true(k >= 0 && k < 4);
            for (int j = 0; j < 8; j++)
                if (x[b * 16 + j] / 6 == k) {
                    assert_int_equal(x[b * 16 + j] % 6, y[b * 16 + i]);
                    found = 1;
                }
            assert_true(found);
        }
}

/* The exact context-free loss of hist against a Monte-Carlo estimate: the
 * empirical entropy of the target given the position. */
static void test_hist_reference(void **s) {
    (void)s;
    enum { T = 12, A = 3, N = 40000 };
    tg_task_cfg t = {.kind = TG_TASK_HIST, .vocab = 64, .seq_len = T, .alphabet = A};
    static int x[N * T], y[N * T];
    tg_rng r;
    tg_rng_seed(&r, 5, 0);
    tg_task_batch(&t, &r, N, x, y);
    double total = 0;
    for (int i = 1; i < T; i++) {
        int cnt[T + 1] = {0};
        for (int b = 0; b < N; b++) cnt[y[b * T + i]]++;
        for (int c = 0; c <= T; c++)
            if (cnt[c]) total -= (double)cnt[c] / N * log((double)cnt[c] / N);
    }
    double mc = total / (T - 1), exact = tg_task_reference(&t).context_free;
    print_message("hist context-free loss: exact %.4f, sampled %.4f\n", exact, mc);
    assert_true(fabs(mc - exact) < 0.01);
    char err[128];
    tg_task_cfg bad = {.kind = TG_TASK_HIST, .vocab = 8, .seq_len = 16, .alphabet = 8};
    assert_int_not_equal(tg_task_check(&bad, err, sizeof err), 0);
    assert_non_null(strstr(err, "alphabet 8"));
}

static void test_cli(void **s) {
    (void)s;
    int steps = 5, choice = 0, flag = 0;
    float lr = 0.1f;
    const char *path = NULL;
    static const char *const ch[] = {"a", "b", NULL};
    const tg_cli_opt o[] = {
        {"steps", TG_CLI_INT, &steps, 1, 100, NULL, ""},
        {"lr", TG_CLI_FLOAT, &lr, 0, 1, NULL, ""},
        {"mode", TG_CLI_CHOICE, &choice, 0, 0, ch, ""},
        {"log", TG_CLI_STR, &path, 0, 0, NULL, ""},
        {"quiet", TG_CLI_FLAG, &flag, 0, 0, NULL, ""},
    };
    char err[256];
    char *ok[] = {"p", "--steps", "7", "--lr=0.5", "--mode", "b", "--log", "x.tsv", "--quiet"};
    assert_int_equal(tg_cli_parse(o, 5, 9, ok, err, sizeof err, NULL), TG_CLI_OK);
    assert_int_equal(steps, 7);
    assert_float_equal(lr, 0.5f, 0);
    assert_int_equal(choice, 1);
    assert_string_equal(path, "x.tsv");
    assert_int_equal(flag, 1);
    struct { int argc; char *argv[3]; const char *msg; } bad[] = {
        {2, {"p", "--nope"}, "unknown flag '--nope'"},
        {3, {"p", "--steps", "0"}, "--steps: 0 is out of range [1, 100]"},
        {3, {"p", "--steps", "7x"}, "--steps: '7x' is not an integer"},
        {3, {"p", "--steps", "99999999999999999999"}, "not an integer"},
        {3, {"p", "--lr", "nan"}, "--lr: 'nan' is not a finite number"},
        {3, {"p", "--lr", "2"}, "--lr: 2 is out of range"},
        {3, {"p", "--mode", "c"}, "--mode: 'c' is not one of a b"},
        {2, {"p", "--steps"}, "--steps needs a value"},
        {2, {"p", "--quiet=1"}, "--quiet takes no value"},
        {2, {"p", "stray"}, "unexpected argument 'stray'"},
        {3, {"p", "--log", ""}, "--log: empty value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(tg_cli_parse(o, 5, bad[i].argc, bad[i].argv, err, sizeof err, NULL), TG_CLI_ERROR);
        if (!strstr(err, bad[i].msg)) {
            print_error("case %zu: '%s' lacks '%s'\n", i, err, bad[i].msg);
            fail();
        }
    }
    char *help[] = {"p", "--help"};
    assert_int_equal(tg_cli_parse(o, 5, 2, help, err, sizeof err, NULL), TG_CLI_HELP);
}

/* Mean normalised attention entropy of a freshly initialised model. */
static double init_entropy(int scale_mode, int d_head, uint64_t seed) {
    tg_model_cfg mc = {.vocab = 16, .seq_len = 16, .d_model = 32, .heads = 4, .d_head = d_head, .layers = 1,
                    .scale_mode = scale_mode, .init = TG_INIT_FANIN};
    tg_model m;
    tg_model_init(&m, &mc, seed);
    tg_task_cfg t = {.kind = TG_TASK_HIST, .vocab = 16, .seq_len = 16, .alphabet = 8};
    tg_rng r;
    tg_rng_seed(&r, seed, 1);
    int x[8 * 16], y[8 * 16];
    tg_task_batch(&t, &r, 8, x, y);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_model_forward(&m, &ctx, x, y, 8, 1);
    double e = 0;
    for (int h = 0; h < 4; h++) e += m.ent[h];
    e /= 4 * tg_attn_uniform_entropy(16, 1);
    tg_ctx_free(&ctx);
    tg_model_free(&m);
    return e;
}

/* The seed's claim in miniature: with unit-variance q and k at d_head = 128,
 * unscaled heads start almost one-hot while 1/√d_head keeps them soft and
 * 1/d_head makes them almost uniform. */
static void test_direction_at_init(void **s) {
    (void)s;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        double none = init_entropy(TG_SCALE_NONE, 128, seed), sq = init_entropy(TG_SCALE_SQRT, 128, seed),
               dk = init_entropy(TG_SCALE_DK, 128, seed);
        print_message("seed %d: entropy/uniform at init, d_head 128: none %.3f, sqrt %.3f, dk %.3f\n",
                      (int)seed, none, sq, dk);
        assert_true(none < 0.25);
        assert_true(sq > 0.6);
        assert_true(dk > 0.95);
        assert_true(none < sq / 3);
    }
    /* and the gap grows with the head size */
    assert_true(init_entropy(TG_SCALE_NONE, 8, 1) > init_entropy(TG_SCALE_NONE, 128, 1) + 0.2);
}

/* --scale mult: only the float changes. c = 1 gives sqrt's float and c = √dh
 * (as the float sqrtf gives, which is also what the decimal √dh parses to)
 * gives none's 1 exactly, for every head size the flags allow; c = 1/√dh is
 * dk's 1/dh only up to rounding, and the test says how often it is exact. */
static void test_scale_mult_floats(void **s) {
    (void)s;
    int dk_exact = 0;
    for (int dh = 1; dh <= 4096; dh++) {
        tg_model_cfg sq = {.d_head = dh, .scale_mode = TG_SCALE_SQRT}, none = sq, dk = sq, m1 = sq, mr = sq, mi = sq;
        none.scale_mode = TG_SCALE_NONE;
        dk.scale_mode = TG_SCALE_DK;
        m1.scale_mode = mr.scale_mode = mi.scale_mode = TG_SCALE_MULT;
        m1.mult = 1.0f;
        mr.mult = (float)sqrt((double)dh);           /* what --scale-mult <decimal √dh> parses to */
        mi.mult = (float)(1.0 / sqrt((double)dh));
        assert_true(mr.mult == sqrtf((float)dh));
        assert_true(tg_model_scale(&m1) == tg_model_scale(&sq));
        assert_true(tg_model_scale(&mr) == tg_model_scale(&none));
        dk_exact += tg_model_scale(&mi) == tg_model_scale(&dk);
        assert_float_equal(tg_model_scale(&mi), tg_model_scale(&dk), 2e-7f * tg_model_scale(&dk));
    }
    print_message("mult c = 1/sqrt(d_head) gives dk's float exactly for %d of 4096 head sizes (else within 2e-7 relative)\n",
                  dk_exact);
}

enum { SAVED, ONLINE };   /* the built-in kernels: tg_attn_kernel_saved, tg_attn_kernel_online */

/* layers 2: D 8, H 2, dh 4; layers 1 (the gradient checks, cheap enough for
 * valgrind): D 6, H 2, dh 4 */
static void tiny_model_l(tg_model *m, int layers, int scale_mode, int learned_param, int learned_init, int attn) {
    tg_model_cfg mc = {.vocab = 8, .seq_len = 6, .d_model = layers > 1 ? 8 : 6, .heads = 2, .d_head = 4,
                    .layers = layers, .scale_mode = scale_mode, .init = TG_INIT_FANIN,
                    .attn_kernel = attn == ONLINE ? &tg_attn_kernel_online : &tg_attn_kernel_saved,
                    .learned_init = learned_init, .learned_param = learned_param, .mult = 1.0f};
    tg_model_init(m, &mc, 11);
}
static void tiny_model(tg_model *m, int scale_mode, int learned_param, int learned_init, int attn) {
    tiny_model_l(m, 2, scale_mode, learned_param, learned_init, attn);
}

static void tiny_batch(int B, int *x, int *y) {
    tg_task_cfg t = {.kind = TG_TASK_HIST, .vocab = 8, .seq_len = 6, .alphabet = 4};
    tg_rng r;
    tg_rng_seed(&r, 5, 3);
    tg_task_batch(&t, &r, B, x, y);
}

typedef struct { tg_model *m; int x[3 * 6], y[3 * 6]; } model_case;
static tg_tensor *f_model(tg_ctx *ctx, void *u) {
    model_case *c = u;
    return tg_model_forward(c->m, ctx, c->x, c->y, 3, 0);
}

/* The whole model's gradient against finite differences with the learned
 * scale in its log form, started at the forgotten scale (s_h = √dh), through
 * both attention ops, and in the linear form through the composed op; and the
 * chain rule through exp checked directly: with the same other weights,
 * d/dθ_h = s_h · d/ds_h. */
static void test_learned_scale_gradients(void **s) {
    (void)s;
    for (int attn = 0; attn < 2; attn++) {
        tg_model lin, lg;
        model_case cl, cg;
        tiny_model_l(&lin, 1, TG_SCALE_LEARNED, TG_LEARNED_LINEAR, TG_LEARNED_FROM_NONE, attn);
        tiny_model_l(&lg, 1, TG_SCALE_LEARNED, TG_LEARNED_LOG, TG_LEARNED_FROM_NONE, attn);
        assert_string_equal(lg.layer[0].hscale->name, "l0.hscale_log");
        assert_float_equal(lg.layer[0].hscale->data[1], logf(2.0f), 0);
        cl.m = &lin;
        cg.m = &lg;
        tiny_batch(3, cl.x, cl.y);
        tiny_batch(3, cg.x, cg.y);
        assert_int_equal(tg_gradcheck("model, learned log scale", &lg.P, f_model, &cg, NULL), 0);
        if (attn == SAVED)
            assert_int_equal(tg_gradcheck("model, learned linear scale", &lin.P, f_model, &cl, NULL), 0);
        /* one backward each at the same point: dθ = e^θ · ds */
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_params_zero_grad(&lin.P);
        tg_backward(&ctx, f_model(&ctx, &cl));
        tg_ctx_reset(&ctx);
        tg_params_zero_grad(&lg.P);
        tg_backward(&ctx, f_model(&ctx, &cg));
        for (int h = 0; h < 2; h++) {
            float ds = lin.layer[0].hscale->grad[h], dth = lg.layer[0].hscale->grad[h];
            float sh = expf(lg.layer[0].hscale->data[h]);
            assert_true(fabsf(ds) > 1e-6f);   /* a gradient there is to compare */
            assert_float_equal(dth, sh * ds, 1e-4f * fabsf(sh * ds) + 1e-7f);
        }
        tg_ctx_free(&ctx);
        tg_model_free(&lin);
        tg_model_free(&lg);
    }
}

/* Weight decay in the model is the parameters' flag: embeddings and matrices
 * decayed; LayerNorm gains and biases, the MLP biases, the QK-norm gains
 * ([H, dh], 2-D) and the learned head scales never. Checked on the flags and on
 * what a step of AdamW with zero gradients and SGD does. */
static int should_decay(const char *name) {
    static const char *const decayed[] = {"tok_emb", "pos_emb", "w_out", "wq", "wk", "wv", "wo", "w1", "w2"};
    const char *base = strchr(name, '.') ? strchr(name, '.') + 1 : name;
    for (size_t i = 0; i < sizeof decayed / sizeof *decayed; i++)
        if (strcmp(base, decayed[i]) == 0) return 1;
    return 0;
}

static void test_decay_in_model(void **s) {
    (void)s;
    const int modes[][2] = {{TG_SCALE_QKNORM, 0}, {TG_SCALE_LEARNED, TG_LEARNED_LINEAR}, {TG_SCALE_LEARNED, TG_LEARNED_LOG}};
    for (int k = 0; k < 3; k++)
        for (int opt = 0; opt < 2; opt++) {
            tg_model m;
            tiny_model(&m, modes[k][0], modes[k][1], TG_LEARNED_FROM_SQRT, SAVED);
            int n_never = 0, qk = 0, hs = 0;
            for (int i = 0; i < m.P.n; i++) {
                const tg_tensor *t = m.P.list[i];
                assert_int_equal(t->decay, should_decay(t->name));
                n_never += !t->decay;
                qk += strstr(t->name, "n_g") != NULL && t->ndim == 2;
                hs += strstr(t->name, "hscale") != NULL;
            }
            assert_true(n_never >= 9);   /* lnf_g, lnf_b, and per layer ln1/ln2 gains and biases, b1, b2 */
            if (modes[k][0] == TG_SCALE_QKNORM) assert_int_equal(qk, 4);
            else assert_int_equal(hs, 2);
            float *before = malloc(m.P.numel * sizeof(float));
            for (size_t i = 0; i < m.P.numel; i++) m.P.data[i] = 0.5f + (float)(i % 7);   /* no zeros */
            memcpy(before, m.P.data, m.P.numel * sizeof(float));
            tg_params_zero_grad(&m.P);
            tg_adamw a;
            tg_sgd o;
            if (opt == 0) {
                tg_adamw_init(&a, &m.P, 0.9f, 0.95f, 1e-8f, 0.5f);
                tg_adamw_step(&a, &m.P, 0.2f);
            } else {
                tg_sgd_init(&o, &m.P, 0.9f, 0.5f);
                tg_sgd_step(&o, &m.P, 0.2f);
            }
            for (int i = 0; i < m.P.n; i++) {
                const tg_tensor *t = m.P.list[i];
                const float *b = before + (t->data - m.P.data);
                for (int64_t j = 0; j < t->numel; j++)
                    if (t->decay) assert_float_equal(t->data[j], b[j] * 0.9f, 1e-6f * b[j]);
                    else assert_true(t->data[j] == b[j]);   /* untouched, bit for bit */
            }
            if (opt == 0) tg_adamw_free(&a);
            else tg_sgd_free(&o);
            free(before);
            tg_model_free(&m);
        }
}

/* The probe's maps: softmax rows over the visible keys (sum 1, masked keys 0),
 * the same weights the training forward's composed op saves for that
 * sequence, the same from a model configured with the fused op, and the model
 * untouched (parameters, gradients, statistics). */
static void test_attention_maps(void **s) {
    (void)s;
    tg_model mc, mf;
    tiny_model(&mc, TG_SCALE_LEARNED, TG_LEARNED_LOG, TG_LEARNED_FROM_NONE, SAVED);
    tiny_model(&mf, TG_SCALE_LEARNED, TG_LEARNED_LOG, TG_LEARNED_FROM_NONE, ONLINE);
    tg_task_cfg t = {.kind = TG_TASK_HIST, .vocab = 8, .seq_len = 6, .alphabet = 4};
    int probe[12], again[12];
    attn_probe_tokens(&t, probe);
    attn_probe_tokens(&t, again);
    assert_memory_equal(probe, again, 6 * sizeof(int));
    assert_int_equal(probe[0], 4);   /* hist's BOS */
    enum { L = 2, H = 2, T = 6, N = L * H * T * T };
    float maps[N], mapf[N];
    int x[3 * 6], y[3 * 6];
    tiny_batch(3, x, y);
    tg_ctx ctx, pc;
    tg_ctx_init(&ctx, 0);
    tg_ctx_init(&pc, 0);
    /* a training step's state: grads and stats from the last batch */
    tg_params_zero_grad(&mc.P);
    tg_backward(&ctx, tg_model_forward(&mc, &ctx, x, y, 3, 1));
    size_t bytes = mc.P.numel * sizeof(float);
    float *data = malloc(bytes), *grad = malloc(bytes), ent[L * H], lsc[L * H];
    memcpy(data, mc.P.data, bytes);
    memcpy(grad, mc.P.grad, bytes);
    memcpy(ent, mc.ent, sizeof ent);
    memcpy(lsc, mc.logit_scale, sizeof lsc);
    tg_model_attention_maps(&mc, &pc, probe, 1, maps);
    tg_model_attention_maps(&mf, &pc, probe, 1, mapf);
    assert_memory_equal(data, mc.P.data, bytes);
    assert_memory_equal(grad, mc.P.grad, bytes);
    assert_memory_equal(ent, mc.ent, sizeof ent);
    assert_memory_equal(lsc, mc.logit_scale, sizeof lsc);
    assert_memory_equal(maps, mapf, sizeof maps);   /* the same parameters: the same composed op */
    for (int lh = 0; lh < L * H; lh++)
        for (int i = 0; i < T; i++) {
            double sum = 0;
            for (int j = 0; j < T; j++) {
                float w = maps[(lh * T + i) * T + j];
                if (j > i) assert_true(w == 0.0f);
                sum += w;
            }
            assert_float_equal(sum, 1.0, 1e-6);
        }
    /* the weights a training forward saves for the probe as its batch */
    int py[6];
    for (int i = 0; i < 6; i++) py[i] = -1;
    py[1] = 0;
    tg_ctx_reset(&ctx);
    tg_model_forward(&mc, &ctx, probe, py, 1, 0);
    int layer = 0;
    for (int i = 0; i < ctx.n_nodes; i++)
        if (strcmp(ctx.nodes[i].op, "tg_attention") == 0) {
            const float *P = tg_attention_probs(&ctx, ctx.nodes[i].out);
            assert_non_null(P);
            assert_memory_equal(P, maps + layer * H * T * T, H * T * T * sizeof(float));
            layer++;
        }
    assert_int_equal(layer, L);
    free(data);
    free(grad);
    tg_ctx_free(&ctx);
    tg_ctx_free(&pc);
    tg_model_free(&mc);
    tg_model_free(&mf);
}

int main(void) {
    openblas_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist_targets),
        cmocka_unit_test(test_recall_targets),
        cmocka_unit_test(test_hist_reference),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_direction_at_init),
        cmocka_unit_test(test_scale_mult_floats),
        cmocka_unit_test(test_learned_scale_gradients),
        cmocka_unit_test(test_decay_in_model),
        cmocka_unit_test(test_attention_maps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
