/* The experiment's pieces at small size: tasks, reference losses, the flag
 * parser, and the direction of the √d_k result at initialisation. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <cmocka.h>
#include <cblas.h>

#include "cli.h"
#include "model.h"
#include "tasks.h"
#include "testutil.h"
#include "tg_ops.h"

/* hist targets are the running count of the token, checked by recounting */
static void test_hist_targets(void **s) {
    (void)s;
    task_cfg t = {.kind = TASK_HIST, .vocab = 64, .seq_len = 40, .alphabet = 5};
    tg_rng r;
    tg_rng_seed(&r, 9, 0);
    int x[3 * 40], y[3 * 40];
    task_batch(&t, &r, 3, x, y);
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
    task_cfg t = {.kind = TASK_RECALL, .vocab = 64, .seq_len = 16, .keys = 4, .values = 6};
    tg_rng r;
    tg_rng_seed(&r, 4, 0);
    int x[2 * 16], y[2 * 16];
    task_batch(&t, &r, 2, x, y);
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
    task_cfg t = {.kind = TASK_HIST, .vocab = 64, .seq_len = T, .alphabet = A};
    static int x[N * T], y[N * T];
    tg_rng r;
    tg_rng_seed(&r, 5, 0);
    task_batch(&t, &r, N, x, y);
    double total = 0;
    for (int i = 1; i < T; i++) {
        int cnt[T + 1] = {0};
        for (int b = 0; b < N; b++) cnt[y[b * T + i]]++;
        for (int c = 0; c <= T; c++)
            if (cnt[c]) total -= (double)cnt[c] / N * log((double)cnt[c] / N);
    }
    double mc = total / (T - 1), exact = task_reference(&t).context_free;
    print_message("hist context-free loss: exact %.4f, sampled %.4f\n", exact, mc);
    assert_true(fabs(mc - exact) < 0.01);
    char err[128];
    task_cfg bad = {.kind = TASK_HIST, .vocab = 8, .seq_len = 16, .alphabet = 8};
    assert_int_not_equal(task_check(&bad, err, sizeof err), 0);
    assert_non_null(strstr(err, "alphabet 8"));
}

static void test_cli(void **s) {
    (void)s;
    int steps = 5, choice = 0, flag = 0;
    float lr = 0.1f;
    const char *path = NULL;
    static const char *const ch[] = {"a", "b", NULL};
    const cli_opt o[] = {
        {"steps", CLI_INT, &steps, 1, 100, NULL, ""},
        {"lr", CLI_FLOAT, &lr, 0, 1, NULL, ""},
        {"mode", CLI_CHOICE, &choice, 0, 0, ch, ""},
        {"log", CLI_STR, &path, 0, 0, NULL, ""},
        {"quiet", CLI_FLAG, &flag, 0, 0, NULL, ""},
    };
    char err[256];
    char *ok[] = {"p", "--steps", "7", "--lr=0.5", "--mode", "b", "--log", "x.tsv", "--quiet"};
    assert_int_equal(cli_parse(o, 5, 9, ok, err, sizeof err, NULL), CLI_OK);
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
        assert_int_equal(cli_parse(o, 5, bad[i].argc, bad[i].argv, err, sizeof err, NULL), CLI_ERROR);
        if (!strstr(err, bad[i].msg)) {
            print_error("case %zu: '%s' lacks '%s'\n", i, err, bad[i].msg);
            fail();
        }
    }
    char *help[] = {"p", "--help"};
    assert_int_equal(cli_parse(o, 5, 2, help, err, sizeof err, NULL), CLI_HELP);
}

/* Mean normalised attention entropy of a freshly initialised model. */
static double init_entropy(int scale_mode, int d_head, uint64_t seed) {
    model_cfg mc = {.vocab = 16, .seq_len = 16, .d_model = 32, .heads = 4, .d_head = d_head, .layers = 1,
                    .scale_mode = scale_mode, .init = INIT_FANIN};
    model m;
    model_init(&m, &mc, seed);
    task_cfg t = {.kind = TASK_HIST, .vocab = 16, .seq_len = 16, .alphabet = 8};
    tg_rng r;
    tg_rng_seed(&r, seed, 1);
    int x[8 * 16], y[8 * 16];
    task_batch(&t, &r, 8, x, y);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    model_forward(&m, &ctx, x, y, 8, 1);
    double e = 0;
    for (int h = 0; h < 4; h++) e += m.ent[h];
    e /= 4 * tg_attn_uniform_entropy(16, 1);
    tg_ctx_free(&ctx);
    model_free(&m);
    return e;
}

/* The seed's claim in miniature: with unit-variance q and k at d_head = 128,
 * unscaled heads start almost one-hot while 1/√d_head keeps them soft and
 * 1/d_head makes them almost uniform. */
static void test_direction_at_init(void **s) {
    (void)s;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        double none = init_entropy(SCALE_NONE, 128, seed), sq = init_entropy(SCALE_SQRT, 128, seed),
               dk = init_entropy(SCALE_DK, 128, seed);
        print_message("seed %d: entropy/uniform at init, d_head 128: none %.3f, sqrt %.3f, dk %.3f\n",
                      (int)seed, none, sq, dk);
        assert_true(none < 0.25);
        assert_true(sq > 0.6);
        assert_true(dk > 0.95);
        assert_true(none < sq / 3);
    }
    /* and the gap grows with the head size */
    assert_true(init_entropy(SCALE_NONE, 8, 1) > init_entropy(SCALE_NONE, 128, 1) + 0.2);
}

int main(void) {
    openblas_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist_targets),
        cmocka_unit_test(test_recall_targets),
        cmocka_unit_test(test_hist_reference),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_direction_at_init),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
