/* tapegrad's side of the exec protocol (tg_attn_exec.h), against the Python
 * kernel side (scripts/python/tapegrad_exec.py) running the plain-Python
 * attention of tests/exec_protocol_test.py: the same out and the same
 * gradients as tg_attend (causal, a window, grouped heads), a feature it did
 * not declare refused by the gate, and each way a kernel can fail — it exits at
 * once, hangs, writes garbage, answers the wrong shape or an error — a
 * tg_fail naming the kernel and the call, the process gone and reaped, later
 * calls failing the same way. argv[1]: the source folder. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"
#include "tg_attn_exec.h"
#include "tg_core.h"
#include "tg_ops.h"

static const char *src;
static char cmd[2048];

static const char *kernel_cmd(const char *mode) {
    snprintf(cmd, sizeof cmd, "python3 '%s/tests/exec_protocol_test.py' --serve %s", src, mode);
    return cmd;
}

typedef struct {
    tg_params P;
    tg_tensor *q, *k, *v;
} qkv;

static void make_qkv(qkv *t, int B, int T, int H, int Hkv, int d) {
    tg_params_init(&t->P);
    t->q = tg_param(&t->P, "q", 4, (int[]){B, T, H, d});
    t->k = tg_param(&t->P, "k", 4, (int[]){B, T, Hkv, d});
    t->v = tg_param(&t->P, "v", 4, (int[]){B, T, Hkv, d});
    tg_params_alloc(&t->P);
    tg_rng r;
    tg_rng_seed(&r, 11, 3);
    tg_fill_normal(&r, t->P.data, (int64_t)t->P.numel, 0.0f, 1.0f);
}

/* out and the grads of sum(out · w) under kernel K (NULL: tg_attend), into out[] and grad[] (P's layout). */
static void run(const tg_attn_kernel *K, qkv *t, int causal, int left, float *out, float *grad, size_t n_out) {
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_params_zero_grad(&t->P);
    tg_attn_args a = tg_attn_args_make(t->q, t->k, t->v, 0.6f);
    a.causal = causal, a.window_left = left;
    tg_tensor *o = K ? tg_attn_kernel_call(&ctx, K, &a) : tg_attend(&ctx, &a);
    assert_int_equal((size_t)o->numel, n_out);
    memcpy(out, o->data, n_out * sizeof(float));
    float *w = malloc(n_out * sizeof(float));
    for (size_t i = 0; i < n_out; i++) w[i] = (float)((i * 7) % 5) * 0.3f - 0.5f;
    tg_backward_seed(&ctx, o, w);
    memcpy(grad, t->P.grad, t->P.numel * sizeof(float));
    free(w);
    tg_ctx_free(&ctx);
}

static void test_same_as_tg_attend(void **s) {
    (void)s;
    tg_attn_exec x;
    char err[1024];
    assert_int_equal(tg_attn_exec_open(&x, kernel_cmd(""), 30, err, sizeof err), 0);
    assert_string_equal(x.kernel.name, "plain python");
    assert_int_equal(x.kernel.features, TG_ATTN_F_DV | TG_ATTN_F_GQA | TG_ATTN_F_WINDOW);
    qkv t;
    make_qkv(&t, 2, 5, 2, 1, 3);
    const size_t n_out = 2 * 5 * 2 * 3;
    float o1[60], o2[60], *g1 = malloc(t.P.numel * sizeof(float)), *g2 = malloc(t.P.numel * sizeof(float));
    for (int mode = 0; mode < 2; mode++) {   /* causal; causal with a window of 2 back */
        run(NULL, &t, 1, mode ? 2 : -1, o1, g1, n_out);
        run(&x.kernel, &t, 1, mode ? 2 : -1, o2, g2, n_out);
        for (size_t i = 0; i < n_out; i++) assert_float_equal(o1[i], o2[i], 2e-6f);
        for (size_t i = 0; i < t.P.numel; i++) assert_float_equal(g1[i], g2[i], 2e-5f);
    }
    /* evaluation (no grad): released at once, and the same out */
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    ctx.grad_enabled = 0;
    tg_attn_args a = tg_attn_args_make(t.q, t.k, t.v, 0.6f);
    a.causal = 1;
    tg_tensor *o = tg_attn_kernel_call(&ctx, &x.kernel, &a);
    run(NULL, &t, 1, -1, o1, g1, n_out);
    for (size_t i = 0; i < n_out; i++) assert_float_equal(o1[i], o->data[i], 2e-6f);
    /* a feature it did not declare: the gate refuses before anything is sent */
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    a.softcap = 30;
    EXPECT_TG_ERROR(&c, tg_attn_kernel_call(&ctx, &x.kernel, &a), "does not declare");
    tg_ctx_free(&ctx);
    free(g1);
    free(g2);
    tg_params_free(&t.P);
    tg_attn_exec_close(&x);
    assert_int_equal(x.pid, 0);
}

/* A kernel that fails: open refuses it, or the call fails naming the kernel
 * and the call; the process is gone; the next call fails at once. */
static void expect_failure(const char *command, double timeout, const char *open_msg, const char *call_msg,
                           int refused) {
    tg_attn_exec x;
    char err[1024];
    int rc = tg_attn_exec_open(&x, command, timeout, err, sizeof err);
    if (open_msg) {
        assert_int_equal(rc, -1);
        if (!strstr(err, open_msg)) {
            print_error("open's message '%s' lacks '%s'\n", err, open_msg);
            fail();
        }
        assert_int_equal(x.pid, 0);
        return;
    }
    if (rc) print_error("open: %s\n", err);
    assert_int_equal(rc, 0);
    qkv t;
    make_qkv(&t, 1, 4, 1, 1, 2);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    tg_attn_args a = tg_attn_args_make(t.q, t.k, t.v, 0.5f);
    EXPECT_TG_ERROR(&c, tg_attn_kernel_call(&ctx, &x.kernel, &a), call_msg);
    assert_non_null(strstr(c.msg, "exec kernel "));
    assert_non_null(strstr(c.msg, "forward 1 (q [1,4,1,2]"));
    if (!refused) {
        assert_int_equal(x.pid, 0);                        /* killed and reaped */
        assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);  /* no child left, zombie or not */
    } else
        assert_true(x.pid > 0);                            /* it refused the call: still serving */
    EXPECT_TG_ERROR(&c, tg_attn_kernel_call(&ctx, &x.kernel, &a), call_msg);   /* and later calls */
    tg_ctx_free(&ctx);
    tg_params_free(&t.P);
    tg_attn_exec_close(&x);
    assert_int_equal(x.pid, 0);
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
}

static void test_failures(void **s) {
    (void)s;
    expect_failure("exit 3", 5, "exited with status 3 before answering", NULL, 0);
    /* the two ways of noticing it, forced: the request read, then no answer (EOF), and the
     * request written into a pipe nobody reads (EPIPE); one message, as callers match on it */
    expect_failure("head -c 1 >/dev/null; exit 3", 5, "exited with status 3 before answering", NULL, 0);
    char closer[2100];   /* exec: sh, the kernel's parent otherwise, would hold the pipe open */
    snprintf(closer, sizeof closer, "exec %s", kernel_cmd("--close-input-after-hello"));
    expect_failure(closer, 5, NULL, "exited with status 3 before answering", 0);
    expect_failure("echo stray output; sleep 5", 5, "outside 1..2^30 (not the protocol: stray output", NULL, 0);
    expect_failure(kernel_cmd("--die-on-forward"), 5, NULL, "exited with status 4 before answering", 0);
    expect_failure(kernel_cmd("--hang-on-forward"), 1, NULL, "no answer in 1 s", 0);
    expect_failure(kernel_cmd("--garbage-on-forward"), 5, NULL, "outside 1..2^30", 0);
    expect_failure(kernel_cmd("--wrong-shape"), 5, NULL, "the kernel answered error: the kernel's out has shape", 1);
    expect_failure(kernel_cmd("--raw-wrong-shape"), 5, NULL, "the kernel's out is F32 [1,4,1,3], the call needs F32 [1,4,1,2]", 0);
}

int main(int argc, char **argv) {
    src = argc > 1 ? argv[1] : ".";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_tg_attend),
        cmocka_unit_test(test_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
