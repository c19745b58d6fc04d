/* Optimizers, clipping and the schedule against steps worked out by hand. */
#define _POSIX_C_SOURCE 200809L   /* fork, pipe, dup2 for the abort test */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "tg_core.h"
#include "tg_optim.h"
#include "testutil.h"

#define TOL 1e-6f

/* The set every hand-worked test uses: a 2-D w [1,2] declared decayed and a
 * 1-D b [1], laid out flat as P.data = {w0, w1, b0}. */
static void make_wb(tg_params *P, float w0, float w1, float b0) {
    tg_params_init(P);
    tg_param_decayed(P, "w", 2, (int[]){1, 2});
    tg_param(P, "b", 1, (int[]){1});
    tg_params_alloc(P);
    P->data[0] = w0;
    P->data[1] = w1;
    P->data[2] = b0;
}

static void set_grad(tg_params *P, const float *g) { memcpy(P->grad, g, 3 * sizeof(float)); }

static void expect_data(const tg_params *P, const float *want) {
    for (int i = 0; i < 3; i++) assert_float_equal(P->data[i], want[i], TOL);
}

static void catch_params(tg_params *P, tg_test_catch *c) {
    memset(c, 0, sizeof *c);
    P->err = (tg_errh){ tg_test_catch_handler, c };
}

/* ---- SGD ------------------------------------------------------------------ */
/* μ = 0.9, wd = 0.1 (on w only), lr = 0.1, w = [1, −2], b = 0.5.
 * step 1, g = [0.5, 1 | 1]:
 *   d = g + wd·w = [0.6, 0.8 | 1]            buf = d
 *   w = [1 − 0.06, −2 − 0.08 | 0.5 − 0.1] = [0.94, −2.08 | 0.4]
 * step 2, g = [−1, 0.5 | 0.5]:
 *   d = [−1 + 0.094, 0.5 − 0.208 | 0.5] = [−0.906, 0.292 | 0.5]
 *   buf = 0.9·[0.6, 0.8 | 1] + d = [−0.366, 1.012 | 1.4]
 *   w = [0.94 + 0.0366, −2.08 − 0.1012 | 0.4 − 0.14] = [0.9766, −2.1812 | 0.26]
 * step 3, g = [0, 2 | −1]:
 *   d = [0.09766, 2 − 0.21812 | −1] = [0.09766, 1.78188 | −1]
 *   buf = 0.9·[−0.366, 1.012 | 1.4] + d = [−0.23174, 2.69268 | 0.26]
 *   w = [0.9766 + 0.023174, −2.1812 − 0.269268 | 0.26 − 0.026]
 *     = [0.999774, −2.450468 | 0.234] */
static void test_sgd_momentum_three_steps(void **s) {
    (void)s;
    tg_params P;
    make_wb(&P, 1.0f, -2.0f, 0.5f);
    tg_sgd o;
    tg_sgd_init(&o, &P, 0.9f, 0.1f);
    const float g[3][3] = { { 0.5f, 1.0f, 1.0f }, { -1.0f, 0.5f, 0.5f }, { 0.0f, 2.0f, -1.0f } };
    const float want[3][3] = { { 0.94f, -2.08f, 0.4f },
                               { 0.9766f, -2.1812f, 0.26f },
                               { 0.999774f, -2.450468f, 0.234f } };
    const float want_buf[3] = { -0.23174f, 2.69268f, 0.26f };
    for (int k = 0; k < 3; k++) {
        set_grad(&P, g[k]);
        tg_sgd_step(&o, &P, 0.1f);
        expect_data(&P, want[k]);
    }
    for (int i = 0; i < 3; i++) assert_float_equal(o.buf[i], want_buf[i], TOL);
    tg_sgd_free(&o);
    assert_null(o.buf);
    tg_params_free(&P);
}

/* μ = 0, wd = 0: plain w −= lr·g, and no momentum buffer is made. */
static void test_sgd_plain(void **s) {
    (void)s;
    tg_params P;
    make_wb(&P, 1.0f, -2.0f, 0.5f);
    tg_sgd o;
    tg_sgd_init(&o, &P, 0.0f, 0.0f);
    assert_null(o.buf);
    set_grad(&P, (float[]){ 1.0f, -2.0f, 4.0f });
    tg_sgd_step(&o, &P, 0.5f);
    expect_data(&P, (float[]){ 0.5f, -1.0f, -1.5f });
    tg_sgd_free(&o);
    tg_params_free(&P);
}

/* ---- AdamW ----------------------------------------------------------------- */
/* β1 = 0.9, β2 = 0.999, eps = 1e-8, wd = 0.1, lr = 0.1, w = [1, −2], b = 0.5.
 * step 1 (t = 1), g = [0.5, −1 | 1]: bias corrections 1 − β1 = 0.1, 1 − β2 = 0.001
 *   decay: w = 0.99·[1, −2] = [0.99, −1.98]; b stays 0.5
 *   m = [0.05, −0.1 | 0.1], v = [0.00025, 0.001 | 0.001]
 *   m̂ = g, v̂ = g², so the update is lr·g/|g| = ±0.1 (eps aside)
 *   w = [0.99 − 0.1, −1.98 + 0.1 | 0.5 − 0.1] = [0.89, −1.88 | 0.4]
 *   (had b been decayed it would be 0.495 − 0.1 = 0.395)
 * step 2 (t = 2), g = [−1, 0.5 | 0.5]: 1 − β1² = 0.19, 1 − β2² = 0.001999
 *   element 0: w = 0.89·0.99 = 0.8811; m = 0.045 − 0.1 = −0.055;
 *     v = 0.999·0.00025 + 0.001 = 0.00124975; m̂ = −0.289473684,
 *     sqrt(v̂) = sqrt(0.625187594) = 0.790688051; w = 0.8811 + 0.1·0.366103541 = 0.917710354
 *   element 1: w = −1.88·0.99 = −1.8612; m = −0.09 + 0.05 = −0.04; v = 0.000999 + 0.00025 = 0.001249;
 *     m̂ = −0.210526316, sqrt(v̂) = 0.790451919; w = −1.8612 + 0.1·0.266337017 = −1.8345663
 *   element 2 (no decay): w = 0.4; m = 0.09 + 0.05 = 0.14; v = 0.001249;
 *     m̂ = 0.736842105; w = 0.4 − 0.1·0.932179620 = 0.306782038
 * step 3 (t = 3), g = [0.2, 2 | −1]: the same rules give
 *   m = [−0.0295, 0.164 | 0.026], v = [0.00128850025, 0.005247751 | 0.002247751],
 *   w = [0.925135002, −1.86195381 | 0.295703731]
 *   (computed in double; float32 agrees to ~1e-7) */
static void test_adamw_three_steps(void **s) {
    (void)s;
    tg_params P;
    make_wb(&P, 1.0f, -2.0f, 0.5f);
    tg_adamw o;
    tg_adamw_init(&o, &P, 0.9f, 0.999f, 1e-8f, 0.1f);
    assert_int_equal(o.n, 3);
    assert_int_equal(P.list[0]->decay, 1);
    assert_int_equal(P.list[1]->decay, 0);
    const float g[3][3] = { { 0.5f, -1.0f, 1.0f }, { -1.0f, 0.5f, 0.5f }, { 0.2f, 2.0f, -1.0f } };
    const float want[3][3] = { { 0.89f, -1.88f, 0.4f },
                               { 0.917710354f, -1.8345663f, 0.306782038f },
                               { 0.925135002f, -1.86195381f, 0.295703731f } };
    for (int k = 0; k < 3; k++) {
        set_grad(&P, g[k]);
        tg_adamw_step(&o, &P, 0.1f);
        expect_data(&P, want[k]);
    }
    assert_int_equal(o.t, 3);
    const float want_m[3] = { -0.0295f, 0.164f, 0.026f };
    const float want_v[3] = { 0.00128850025f, 0.005247751f, 0.002247751f };
    for (int i = 0; i < 3; i++) {
        assert_float_equal(o.m[i], want_m[i], 1e-7f);
        assert_float_equal(o.v[i], want_v[i], 1e-7f);   /* 0.999f is 0.99900001: 1 − β2 is off by 1e-5 relative */
    }
    tg_adamw_free(&o);
    assert_null(o.m);
    tg_params_free(&P);
}

/* The decay rule is the flag given at declaration, not the shape: a 2-D gain
 * declared with tg_param is not decayed, a 1-D vector declared with
 * tg_param_decayed is. With a zero gradient neither optimizer moves a
 * parameter but for the decay, so after k steps w = w0·(1 − lr·wd)^k where the
 * flag is set and w = w0 elsewhere. */
static void make_flagged(tg_params *P) {
    tg_params_init(P);
    tg_param_decayed(P, "emb", 2, (int[]){3, 2});       /* 0..5   decayed */
    tg_param(P, "gain", 1, (int[]){2});                 /* 6..7 */
    tg_param_decayed(P, "w3", 3, (int[]){1, 2, 2});     /* 8..11  decayed */
    tg_param(P, "qk_gain", 2, (int[]){2, 2});           /* 12..15 a 2-D gain: not decayed */
    tg_param_decayed(P, "user_vec", 1, (int[]){2});     /* 16..17 a 1-D parameter the user decays */
    tg_param(P, "scale", 1, (int[]){1});                /* 18 */
    tg_params_alloc(P);
    for (size_t i = 0; i < P->numel; i++) P->data[i] = 1.0f + (float)i;
}

static int flagged_decayed(size_t i) { return i < 6 || (i >= 8 && i < 12) || (i >= 16 && i < 18); }

static void test_decay_follows_the_flag(void **s) {
    (void)s;
    const float k4 = 0.9f * 0.9f * 0.9f * 0.9f;
    for (int opt = 0; opt < 2; opt++) {   /* AdamW, SGD (plain and with momentum: zero grads either way) */
        tg_params P;
        make_flagged(&P);
        tg_adamw a;
        tg_sgd o;
        if (opt == 0) tg_adamw_init(&a, &P, 0.9f, 0.95f, 1e-8f, 0.5f);
        else tg_sgd_init(&o, &P, 0.0f, 0.5f);
        for (int k = 0; k < 4; k++) {   /* keep = 1 − 0.2·0.5 = 0.9 a step */
            if (opt == 0) tg_adamw_step(&a, &P, 0.2f);
            else tg_sgd_step(&o, &P, 0.2f);
        }
        for (size_t i = 0; i < P.numel; i++) {   /* values up to 19: float rounding is relative */
            float want = (1.0f + (float)i) * (flagged_decayed(i) ? k4 : 1.0f);
            assert_float_equal(P.data[i], want, TOL * want);
        }
        if (opt == 0) tg_adamw_free(&a);
        else tg_sgd_free(&o);
        tg_params_free(&P);
    }
}

/* lr_mult: a parameter's rate is lr·lr_mult, in both optimizers. Two
 * parameters with the same values and grads, one at lr_mult 2.5: its step is
 * 2.5 times the other's (Adam's first step is lr·sign(g); SGD's is lr·g), and
 * its decoupled decay uses its own rate too. */
static void test_lr_mult(void **s) {
    (void)s;
    for (int opt = 0; opt < 2; opt++) {
        tg_params P;
        tg_params_init(&P);
        tg_tensor *a = tg_param(&P, "a", 1, (int[]){2});
        tg_tensor *b = tg_param(&P, "b", 1, (int[]){2});
        tg_tensor *c = tg_param_decayed(&P, "c", 1, (int[]){1});
        tg_params_alloc(&P);
        b->lr_mult = 2.5f;
        c->lr_mult = 2.0f;
        const float w0[] = {1.0f, -1.0f}, g[] = {0.5f, -0.25f};
        for (int i = 0; i < 2; i++) {
            a->data[i] = b->data[i] = w0[i];
            a->grad[i] = b->grad[i] = g[i];
        }
        c->data[0] = 1.0f;   /* zero grad: only its decay moves it */
        tg_adamw ad;
        tg_sgd sg;
        if (opt == 0) {
            tg_adamw_init(&ad, &P, 0.9f, 0.95f, 1e-8f, 0.1f);
            tg_adamw_step(&ad, &P, 0.01f);
        } else {
            tg_sgd_init(&sg, &P, 0.9f, 0.1f);
            tg_sgd_step(&sg, &P, 0.01f);
        }
        for (int i = 0; i < 2; i++) {
            float da = a->data[i] - w0[i], db = b->data[i] - w0[i];
            float want = opt == 0 ? -0.01f * (g[i] > 0 ? 1.0f : -1.0f) : -0.01f * g[i];
            assert_float_equal(da, want, 1e-7f);
            assert_float_equal(db, 2.5f * want, 1e-7f);
        }
        /* AdamW: c *= 1 − lr·2·wd = 0.998; SGD: c −= lr·2·(0 + wd·c) = 0.998 too */
        assert_float_equal(c->data[0], 0.998f, 1e-7f);
        if (opt == 0) tg_adamw_free(&ad);
        else tg_sgd_free(&sg);
        tg_params_free(&P);
    }
}

/* L = ½ Σ a_i (x_i − c_i)² over a [3,2] matrix and a [3] vector, curvatures
 * spanning 200×: AdamW (no decay) with warm-up + cosine reaches the minimum. */
static void test_adamw_minimises_quadratic(void **s) {
    (void)s;
    static const float a[9] = { 0.1f, 0.5f, 1.0f, 2.0f, 5.0f, 10.0f, 0.3f, 3.0f, 0.05f };
    static const float c[9] = { 0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f, -2.0f, 1.0f, 0.1f };
    tg_params P;
    tg_params_init(&P);
    tg_param(&P, "W", 2, (int[]){3, 2});
    tg_param(&P, "b", 1, (int[]){3});
    tg_params_alloc(&P);
    tg_adamw o;
    tg_adamw_init(&o, &P, 0.9f, 0.999f, 1e-8f, 0.0f);
    double loss0 = 0.0;
    for (int i = 0; i < 9; i++) loss0 += 0.5 * a[i] * c[i] * c[i];
    for (int step = 0; step < 500; step++) {
        for (int i = 0; i < 9; i++) P.grad[i] = a[i] * (P.data[i] - c[i]);
        tg_adamw_step(&o, &P, tg_lr_schedule(step, 20, 500, 0.1f, 0.0f));
    }
    double loss = 0.0;
    for (int i = 0; i < 9; i++) {
        assert_float_equal(P.data[i], c[i], 1e-4f);
        loss += 0.5 * a[i] * (P.data[i] - c[i]) * (P.data[i] - c[i]);
    }
    assert_true(loss < 1e-8 * loss0);
    tg_adamw_free(&o);
    tg_params_free(&P);
}

/* ---- norm and clipping --------------------------------------------------------- */
static void test_grad_norm(void **s) {
    (void)s;
    tg_params P;
    make_wb(&P, 0, 0, 0);
    set_grad(&P, (float[]){ 2.0f, -4.0f, 4.0f });   /* sqrt(4 + 16 + 16) = 6 */
    assert_float_equal(tg_grad_norm(&P), 6.0f, 1e-6f);
    tg_params_zero_grad(&P);
    assert_float_equal(tg_grad_norm(&P), 0.0f, 0.0f);
    tg_params_free(&P);
}

/* g = [3, 0 | 4], norm 5, clipped to 1: g·1/(5 + 1e-6) = [0.59999988, 0 | 0.79999984]. */
static void test_clip_above(void **s) {
    (void)s;
    tg_params P;
    make_wb(&P, 0, 0, 0);
    set_grad(&P, (float[]){ 3.0f, 0.0f, 4.0f });
    assert_float_equal(tg_clip_grad_norm(&P, 1.0f), 5.0f, 1e-6f);
    assert_float_equal(P.grad[0], 0.59999988f, 1e-7f);
    assert_float_equal(P.grad[1], 0.0f, 0.0f);
    assert_float_equal(P.grad[2], 0.79999984f, 1e-7f);
    assert_float_equal(tg_grad_norm(&P), 1.0f, 1e-6f);
    tg_params_free(&P);
}

/* Below the limit, at it exactly, or with max_norm <= 0: grads untouched. */
static void test_clip_not_needed(void **s) {
    (void)s;
    tg_params P;
    make_wb(&P, 0, 0, 0);
    const float g[3] = { 3.0f, 0.0f, 4.0f };
    const float limits[4] = { 10.0f, 5.0f, 0.0f, -1.0f };
    for (int k = 0; k < 4; k++) {
        set_grad(&P, g);
        assert_float_equal(tg_clip_grad_norm(&P, limits[k]), 5.0f, 1e-6f);
        for (int i = 0; i < 3; i++) assert_float_equal(P.grad[i], g[i], 0.0f);
    }
    tg_params_free(&P);
}

/* inf grads: the norm says so and nothing is scaled (no inf·0 = NaN spreading). */
static void test_clip_nonfinite(void **s) {
    (void)s;
    tg_params P;
    make_wb(&P, 0, 0, 0);
    set_grad(&P, (float[]){ INFINITY, 1.0f, 2.0f });
    assert_true(isinf(tg_clip_grad_norm(&P, 1.0f)));
    assert_float_equal(P.grad[1], 1.0f, 0.0f);
    assert_float_equal(P.grad[2], 2.0f, 0.0f);
    tg_params_free(&P);
}

/* ---- schedule ------------------------------------------------------------------ */
/* warmup 10, total 110, lr_max 1, lr_min 0.2: cosine over 100 steps.
 *   step 0: 1·1/10 = 0.1          step 9: 1·10/10 = 1       step 10: cos(0) → 1
 *   step 35: p = 1/4, 0.2 + 0.4·(1 + cos(π/4)) = 0.882842712
 *   step 60: p = 1/2, 0.2 + 0.4·(1 + 0) = 0.6
 *   step 85: p = 3/4, 0.2 + 0.4·(1 − cos(π/4)) = 0.317157288
 *   step 110 and beyond: 0.2 */
static void test_schedule_values(void **s) {
    (void)s;
    const int steps[] = { 0, 4, 9, 10, 35, 60, 85, 110, 111, 1000 };
    const float want[] = { 0.1f, 0.5f, 1.0f, 1.0f, 0.882842712f, 0.6f, 0.317157288f, 0.2f, 0.2f, 0.2f };
    for (size_t k = 0; k < sizeof steps / sizeof *steps; k++)
        assert_float_equal(tg_lr_schedule(steps[k], 10, 110, 1.0f, 0.2f), want[k], 1e-6f);
    /* warmup 0: cosine from step 0, 3e-4 → 0 over 4 steps */
    assert_float_equal(tg_lr_schedule(0, 0, 4, 3e-4f, 0.0f), 3e-4f, 1e-10f);
    assert_float_equal(tg_lr_schedule(2, 0, 4, 3e-4f, 0.0f), 1.5e-4f, 1e-10f);
    assert_float_equal(tg_lr_schedule(4, 0, 4, 3e-4f, 0.0f), 0.0f, 0.0f);
    /* total == warmup: warm-up, then straight to lr_min */
    assert_float_equal(tg_lr_schedule(1, 2, 2, 1.0f, 0.5f), 1.0f, 1e-6f);
    assert_float_equal(tg_lr_schedule(2, 2, 2, 1.0f, 0.5f), 0.5f, 1e-6f);
    /* constant when lr_min == lr_max after warm-up */
    assert_float_equal(tg_lr_schedule(50, 10, 100, 0.3f, 0.3f), 0.3f, 1e-7f);
}

/* tg_lr_schedule has no handler to call, so misuse prints and aborts: run it in
 * a child and check the signal and the message on its stderr. */
static void expect_schedule_abort(int step, int warmup, int total, float lr_max, float lr_min,
                                  const char *substr) {
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL);
        dup2(fd[1], STDERR_FILENO);
        close(fd[0]);
        (void)tg_lr_schedule(step, warmup, total, lr_max, lr_min);
        _exit(0);   /* did not fail: the parent sees a normal exit */
    }
    close(fd[1]);
    char msg[512] = { 0 };
    size_t len = 0;
    ssize_t r;
    while (len < sizeof msg - 1 && (r = read(fd[0], msg + len, sizeof msg - 1 - len)) > 0) len += (size_t)r;
    close(fd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    if (!strstr(msg, substr)) {
        print_error("message '%s' lacks '%s'\n", msg, substr);
        fail();
    }
}

static void test_schedule_misuse(void **s) {
    (void)s;
    expect_schedule_abort(5, 10, 8, 1.0f, 0.1f, "tg_lr_schedule: total 8 < warmup 10");
    expect_schedule_abort(-1, 10, 100, 1.0f, 0.1f, "tg_lr_schedule: step -1 is negative");
    expect_schedule_abort(0, -3, 100, 1.0f, 0.1f, "tg_lr_schedule: warmup -3 is negative");
    expect_schedule_abort(0, 0, 100, 0.1f, 0.5f, "lr_min 0.5, lr_max 0.1");
    expect_schedule_abort(0, 0, 100, 1.0f, -0.1f, "lr_min -0.1");
    expect_schedule_abort(0, 0, 100, NAN, 0.0f, "lr_max nan");
}

/* ---- misuse ---------------------------------------------------------------------- */
static void test_optim_misuse(void **s) {
    (void)s;
    tg_test_catch c;
    tg_params P;
    tg_params_init(&P);
    catch_params(&P, &c);
    tg_param(&P, "w", 2, (int[]){2, 2});
    tg_sgd sgd;
    tg_adamw adam;
    EXPECT_TG_ERROR(&c, tg_adamw_init(&adam, &P, 0.9f, 0.999f, 1e-8f, 0.0f), "tg_adamw_init: parameters not allocated");
    EXPECT_TG_ERROR(&c, tg_sgd_init(&sgd, &P, 0.9f, 0.0f), "tg_sgd_init: parameters not allocated");
    tg_params_alloc(&P);

    EXPECT_TG_ERROR(&c, tg_adamw_init(&adam, &P, 1.0f, 0.999f, 1e-8f, 0.0f), "tg_adamw_init: beta1 1 outside [0, 1)");
    EXPECT_TG_ERROR(&c, tg_adamw_init(&adam, &P, -0.1f, 0.999f, 1e-8f, 0.0f), "tg_adamw_init: beta1 -0.1");
    EXPECT_TG_ERROR(&c, tg_adamw_init(&adam, &P, 0.9f, 1.5f, 1e-8f, 0.0f), "tg_adamw_init: beta2 1.5 outside [0, 1)");
    EXPECT_TG_ERROR(&c, tg_adamw_init(&adam, &P, 0.9f, NAN, 1e-8f, 0.0f), "tg_adamw_init: beta2 nan");
    EXPECT_TG_ERROR(&c, tg_adamw_init(&adam, &P, 0.9f, 0.999f, 0.0f, 0.0f), "tg_adamw_init: eps 0 must be");
    EXPECT_TG_ERROR(&c, tg_adamw_init(&adam, &P, 0.9f, 0.999f, 1e-8f, -0.01f), "tg_adamw_init: weight_decay -0.01");
    EXPECT_TG_ERROR(&c, tg_sgd_init(&sgd, &P, 1.0f, 0.0f), "tg_sgd_init: momentum 1 outside [0, 1)");
    EXPECT_TG_ERROR(&c, tg_sgd_init(&sgd, &P, 0.9f, -1.0f), "tg_sgd_init: weight_decay -1");

    tg_adamw_init(&adam, &P, 0.9f, 0.999f, 1e-8f, 0.0f);
    tg_sgd_init(&sgd, &P, 0.9f, 0.0f);
    EXPECT_TG_ERROR(&c, tg_adamw_step(&adam, &P, -1e-3f), "tg_adamw_step: lr -0.001");
    EXPECT_TG_ERROR(&c, tg_adamw_step(&adam, &P, INFINITY), "tg_adamw_step: lr inf");
    EXPECT_TG_ERROR(&c, tg_sgd_step(&sgd, &P, -0.5f), "tg_sgd_step: lr -0.5");
    P.list[0]->lr_mult = -1.0f;
    EXPECT_TG_ERROR(&c, tg_adamw_step(&adam, &P, 0.1f), "tg_adamw_step: parameter 'w' has lr_mult -1");
    P.list[0]->lr_mult = NAN;
    EXPECT_TG_ERROR(&c, tg_sgd_step(&sgd, &P, 0.1f), "tg_sgd_step: parameter 'w' has lr_mult nan");
    P.list[0]->lr_mult = 1.0f;
    assert_int_equal(adam.t, 0);   /* a refused step changed nothing */

    /* an optimizer used with parameters it was not made for */
    tg_params Q;
    make_wb(&Q, 0, 0, 0);
    catch_params(&Q, &c);
    EXPECT_TG_ERROR(&c, tg_adamw_step(&adam, &Q, 0.1f), "tg_adamw_step: optimizer made for 4 parameter floats, the parameters have 3");
    EXPECT_TG_ERROR(&c, tg_sgd_step(&sgd, &Q, 0.1f), "tg_sgd_step: optimizer made for 4 parameter floats, the parameters have 3");

    /* after free: refused, not a use-after-free */
    tg_adamw_free(&adam);
    tg_sgd_free(&sgd);
    EXPECT_TG_ERROR(&c, tg_adamw_step(&adam, &P, 0.1f), "tg_adamw_step: optimizer has no state");
    EXPECT_TG_ERROR(&c, tg_sgd_step(&sgd, &P, 0.1f), "tg_sgd_step: optimizer made for 0 parameter floats");
    EXPECT_TG_ERROR(&c, tg_clip_grad_norm(&P, NAN), "tg_clip_grad_norm: max_norm is NaN");
    tg_adamw_free(&adam);   /* freeing twice is harmless */
    tg_params_free(&Q);
    tg_params_free(&P);
}

/* Dynamic loss scaling (fp16, 0.22): finite grads divided by the scale exactly (a power of two),
 * the scale doubled after `interval` finite steps; an overflow leaves the grads, halves the scale,
 * counts a skip and restarts the count; the scale never goes below 1. */
static void test_loss_scale(void **s) {
    (void)s;
    tg_params P;
    make_wb(&P, 1, 2, 3);
    tg_loss_scale ls;
    tg_loss_scale_init(&ls);
    assert_true(ls.scale == 65536.0f && ls.interval == 2000 && ls.good == 0 && ls.skipped == 0);
    ls.interval = 3;
    const float g[3] = {0.5f * 65536, -3e-5f * 65536, 1e-9f * 65536};
    for (int step = 0; step < 2; step++) {
        set_grad(&P, g);
        assert_int_equal(tg_loss_scale_unscale(&ls, &P), 1);
        assert_true(P.grad[0] == 0.5f && P.grad[1] == -3e-5f * 65536 / 65536 && P.grad[2] == 1e-9f * 65536 / 65536);
    }
    assert_true(ls.scale == 65536.0f && ls.good == 2);
    set_grad(&P, g);
    assert_int_equal(tg_loss_scale_unscale(&ls, &P), 1);   /* the third: the scale doubles */
    assert_true(ls.scale == 131072.0f && ls.good == 0);
    const float bad[3] = {1, INFINITY, 2};
    set_grad(&P, bad);
    assert_int_equal(tg_loss_scale_unscale(&ls, &P), 0);
    assert_true(P.grad[0] == 1 && isinf(P.grad[1]));      /* left as they were */
    assert_true(ls.scale == 65536.0f && ls.skipped == 1 && ls.good == 0);
    const float nan3[3] = {NAN, 0, 0};
    ls.scale = 1.0f;
    set_grad(&P, nan3);
    assert_int_equal(tg_loss_scale_unscale(&ls, &P), 0);
    assert_true(ls.scale == 1.0f && ls.skipped == 2);
    tg_params_free(&P);
}

/* ---- Adafactor -------------------------------------------------------------
 * The reference: the paper's Algorithms 4 and 5 (Shazeer & Stern 2018) written again in double,
 * with its sums R = (G² + eps1)·1_c and C = 1_rᵀ·(G² + eps1) and V = R·C / (1_rᵀ·R), where
 * tg_adafactor keeps means (the factors of r and c cancel in V). One parameter of shape
 * [nb, r, c] (nb = 1, r = 1 for a vector); state R [nb, r], C [nb, c] or V [n]. */
typedef struct { int nb, r, c, factored, decayed; double *w, *R, *C, *V, *M; } af_ref;

static void af_ref_step(af_ref *p, const float *g, int t, double rho, double beta1, double wd, double eps1,
                        double eps2, double d) {
    const int n = p->nb * p->r * p->c;
    const double b2 = 1.0 - pow(t, -0.8);
    double U[64], ss = 0, ww = 0;
    assert_true(n <= 64);
    for (int b = 0; b < p->nb; b++) {
        const float *G = g + b * p->r * p->c;
        if (p->factored) {
            double *R = p->R + b * p->r, *C = p->C + b * p->c, sumR = 0;
            for (int i = 0; i < p->r; i++) {
                double row = 0;
                for (int j = 0; j < p->c; j++) row += (double)G[i * p->c + j] * G[i * p->c + j] + eps1;
                R[i] = b2 * R[i] + (1 - b2) * row;
                sumR += R[i];
            }
            for (int j = 0; j < p->c; j++) {
                double col = 0;
                for (int i = 0; i < p->r; i++) col += (double)G[i * p->c + j] * G[i * p->c + j] + eps1;
                C[j] = b2 * C[j] + (1 - b2) * col;
            }
            for (int i = 0; i < p->r; i++)
                for (int j = 0; j < p->c; j++) U[b * p->r * p->c + i * p->c + j] = G[i * p->c + j] / sqrt(R[i] * C[j] / sumR);
        } else {
            for (int i = 0; i < n; i++) {
                p->V[i] = b2 * p->V[i] + (1 - b2) * ((double)G[i] * G[i] + eps1);
                U[i] = G[i] / sqrt(p->V[i]);
            }
        }
    }
    for (int i = 0; i < n; i++) ss += U[i] * U[i], ww += p->w[i] * p->w[i];
    const double clip = fmax(1.0, sqrt(ss / n) / d), alpha = rho * fmax(eps2, sqrt(ww / n));
    for (int i = 0; i < n; i++) {
        double u = U[i] / clip;
        if (beta1 > 0) u = p->M[i] = beta1 * p->M[i] + (1 - beta1) * u;
        p->w[i] = p->w[i] * (p->decayed ? 1 - rho * wd : 1) - alpha * u;
    }
}

/* tg_adafactor against the double reference over 8 steps: a decayed [3, 4] matrix, a [2, 3, 2]
 * tensor (two factored [3, 2] slices), a [5] vector and a [1, 1] matrix (factored with r = c = 1),
 * gradients of mixed sizes (some steps clip, some do not), a changing ρ, with and without β1 and
 * decay. float32 state agrees with double to a few ulps of the weights. */
static void adafactor_vs_reference(float beta1, float wd) {
    tg_params P;
    tg_params_init(&P);
    tg_param_decayed(&P, "m", 2, (int[]){3, 4});
    tg_param(&P, "t3", 3, (int[]){2, 3, 2});
    tg_param(&P, "v", 1, (int[]){5});
    tg_param_decayed(&P, "s", 2, (int[]){1, 1});
    tg_params_alloc(&P);
    tg_rng rng;
    tg_rng_seed(&rng, 7, 1);
    tg_fill_normal(&rng, P.data, P.numel, 0.0f, 0.5f);
    af_ref ref[4];
    double store[4][6][64];
    memset(store, 0, sizeof store);
    for (int p = 0; p < 4; p++) {
        const tg_tensor *t = P.list[p];
        af_ref *a = &ref[p];
        *a = (af_ref){.nb = t->ndim == 3 ? t->shape[0] : 1, .r = t->ndim >= 2 ? t->shape[t->ndim - 2] : 1,
                      .c = t->shape[t->ndim - 1], .factored = t->ndim >= 2, .decayed = t->decay,
                      .w = store[p][0], .R = store[p][1], .C = store[p][2], .V = store[p][3], .M = store[p][4]};
        for (int i = 0; i < t->numel; i++) a->w[i] = t->data[i];
    }
    tg_adafactor o;
    tg_adafactor_init(&o, &P, beta1, wd);
    assert_int_equal(o.n_v, (3 + 4) + 2 * (3 + 2) + 5 + (1 + 1));   /* rows + columns, not rows x columns */
    assert_true((o.m != NULL) == (beta1 > 0));
    for (int t = 1; t <= 8; t++) {
        float gscale = t == 3 ? 40.0f : t == 5 ? 1e-3f : 1.0f;   /* a burst and a lull: clipping, then none */
        tg_fill_normal(&rng, P.grad, P.numel, 0.0f, gscale);
        const double rho = 0.01 * (1.0 + 0.1 * t);
        for (int p = 0; p < 4; p++)
            af_ref_step(&ref[p], P.grad + (P.list[p]->data - P.data), t, (float)rho, beta1, wd, 1e-30, 1e-3, 1.0);
        tg_adafactor_step(&o, &P, (float)rho);
        for (int p = 0; p < 4; p++)
            for (int i = 0; i < P.list[p]->numel; i++) {
                double want = ref[p].w[i], got = P.list[p]->data[i];
                if (fabs(got - want) > 4e-7 * fmax(1.0, fabs(want)))
                    fail_msg("step %d, %s[%d]: %.9g, the double reference %.9g", t, P.list[p]->name, i, got, want);
            }
    }
    assert_int_equal(o.t, 8);
    tg_adafactor_free(&o);
    assert_null(o.v);
    tg_params_free(&P);
}
static void test_adafactor_reference(void **s) {
    (void)s;
    adafactor_vs_reference(0.0f, 0.0f);     /* T5's: no first moment, no decay */
    adafactor_vs_reference(0.9f, 0.1f);
}

/* Worked by hand. A rank-1 gradient G = a·bᵀ is fitted exactly by the factors (V = G² + eps1),
 * so at t = 1 U = sign(G), RMS(U) = 1, no clipping, and each weight moves by α = ρ·RMS(W) against
 * its gradient's sign: W = [[3, 4], [0, 0]] (RMS 2.5), ρ = 0.1: every element moves by 0.25.
 * A vector w = [0.0005, -0.001] (RMS 7.9e-4, below eps2 = 1e-3, so α = ρ·eps2) with g = [1, 1]
 * then [10, 10]: t = 1: U = [1, 1], w -= 0.1·1e-3 = [0.0004, -0.0011] (RMS 8.3e-4, still below);
 * t = 2: β2t = 1 − 2^−0.8 = 0.425650, V = 0.425650 + 0.574350·100 = 57.8607, U = 10/7.60662 =
 * 1.31465 > 1: clipped to RMS 1, U = [1, 1] again: w = [0.0003, -0.0012]. */
static void test_adafactor_by_hand(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_param(&P, "W", 2, (int[]){2, 2});
    tg_param(&P, "w", 1, (int[]){2});
    tg_params_alloc(&P);
    const float w0[6] = {3, 4, 0, 0, 0.0005f, -0.001f};
    memcpy(P.data, w0, sizeof w0);
    const float g1[6] = {2 * 1, 2 * -3, 0.5f * 1, 0.5f * -3, 1, 1};   /* [2, 0.5]ᵀ [1, −3] */
    memcpy(P.grad, g1, sizeof g1);
    tg_adafactor o;
    tg_adafactor_init(&o, &P, 0.0f, 0.0f);
    tg_adafactor_step(&o, &P, 0.1f);
    const float want1[6] = {3 - 0.25f, 4 + 0.25f, -0.25f, 0.25f, 0.0004f, -0.0011f};
    for (int i = 0; i < 6; i++) assert_float_equal(P.data[i], want1[i], 2e-7f);
    const float g2[6] = {0, 0, 0, 0, 10, 10};
    memcpy(P.grad, g2, sizeof g2);
    tg_adafactor_step(&o, &P, 0.1f);
    assert_float_equal(P.data[4], 0.0003f, 1e-10f);
    assert_float_equal(P.data[5], -0.0012f, 1e-10f);
    for (int i = 0; i < 4; i++) assert_float_equal(P.data[i], want1[i], 2e-7f);   /* G = 0: U = 0, no move */
    assert_float_equal(o.v[2 + 2 + 0], 0.425650 + 0.574350 * 100.0, 1e-3);   /* W's R, C come first */
    tg_adafactor_free(&o);
    tg_params_free(&P);
}

static void test_adafactor_misuse(void **s) {
    (void)s;
    tg_test_catch c;
    tg_params P;
    tg_params_init(&P);
    catch_params(&P, &c);
    tg_param(&P, "w", 2, (int[]){2, 2});
    tg_adafactor o;
    EXPECT_TG_ERROR(&c, tg_adafactor_init(&o, &P, 0.0f, 0.0f), "tg_adafactor_init: parameters not allocated");
    tg_params_alloc(&P);
    EXPECT_TG_ERROR(&c, tg_adafactor_init(&o, &P, 1.0f, 0.0f), "tg_adafactor_init: beta1 1 outside [0, 1)");
    EXPECT_TG_ERROR(&c, tg_adafactor_init(&o, &P, 0.0f, NAN), "tg_adafactor_init: weight_decay nan");
    tg_adafactor_init(&o, &P, 0.0f, 0.0f);
    EXPECT_TG_ERROR(&c, tg_adafactor_step(&o, &P, -0.1f), "tg_adafactor_step: lr -0.1");
    o.decay = 0.0f;
    EXPECT_TG_ERROR(&c, tg_adafactor_step(&o, &P, 0.1f), "tg_adafactor_step: decay 0 outside (0, 1]");
    o.decay = 0.8f, o.clip_threshold = 0.0f;
    EXPECT_TG_ERROR(&c, tg_adafactor_step(&o, &P, 0.1f), "tg_adafactor_step: clip_threshold 0");
    o.clip_threshold = 1.0f;
    P.list[0]->lr_mult = -1.0f;
    EXPECT_TG_ERROR(&c, tg_adafactor_step(&o, &P, 0.1f), "tg_adafactor_step: parameter 'w' has lr_mult -1");
    P.list[0]->lr_mult = 1.0f;
    assert_int_equal(o.t, 0);   /* a refused step changed nothing */
    tg_params Q;
    make_wb(&Q, 0, 0, 0);
    catch_params(&Q, &c);
    EXPECT_TG_ERROR(&c, tg_adafactor_step(&o, &Q, 0.1f), "tg_adafactor_step: optimizer made for 1 parameters of 4 floats, there are 2 of 3");
    tg_adafactor_free(&o);
    EXPECT_TG_ERROR(&c, tg_adafactor_step(&o, &P, 0.1f), "tg_adafactor_step: optimizer has no state");
    tg_adafactor_free(&o);
    tg_params_free(&Q);
    tg_params_free(&P);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_momentum_three_steps),
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_adamw_three_steps),
        cmocka_unit_test(test_decay_follows_the_flag),
        cmocka_unit_test(test_lr_mult),
        cmocka_unit_test(test_adamw_minimises_quadratic),
        cmocka_unit_test(test_grad_norm),
        cmocka_unit_test(test_clip_above),
        cmocka_unit_test(test_clip_not_needed),
        cmocka_unit_test(test_clip_nonfinite),
        cmocka_unit_test(test_schedule_values),
        cmocka_unit_test(test_schedule_misuse),
        cmocka_unit_test(test_optim_misuse),
        cmocka_unit_test(test_loss_scale),
        cmocka_unit_test(test_adafactor_reference),
        cmocka_unit_test(test_adafactor_by_hand),
        cmocka_unit_test(test_adafactor_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
