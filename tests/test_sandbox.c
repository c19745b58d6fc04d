/* The kernel layer's sandbox (tg_sandbox.h): each outcome told apart (done, a tg_fail with its
 * message, a crash with its signal, a hang killed at the limit, a non-zero return), the records
 * whole and in order, the last stage reached, what the child printed kept out of the caller's
 * stdout (counted, its first line) or passed on when asked; and a kernel opened by the registry
 * (tg_kernel.h) called in the child, an exec kernel with a process of the child's own. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tg_kernel.h"
#include "tg_profile.h"
#include "tg_sandbox.h"
#include "testutil.h"

static const char *top = ".";   /* the source tree (argv[1]) */

typedef struct {
    int n, sum, order_ok;
    size_t last_len;
    char text[256];
} seen;

static void keep(void *u, const void *data, size_t n) {
    seen *s = u;
    int v;
    if (n == sizeof v) {
        memcpy(&v, data, sizeof v);
        s->order_ok &= v == s->n;   /* 0, 1, 2, ... as sent */
        s->sum += v;
    } else
        snprintf(s->text, sizeof s->text, "%.*s", (int)n, (const char *)data);
    s->n++, s->last_len = n;
}

static int job(tg_sandbox *sb, void *u) {
    const int kind = *(int *)u;
    for (int i = 0; i < 3; i++) tg_sandbox_send(sb, &i, sizeof i);
    tg_sandbox_stage(sb, 2);
    printf("stray line one\nand more\n");
    fflush(stdout);
    if (kind == 1) {   /* a tg_fail, caught by the sandbox's handler */
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_set_error_handler(&ctx, tg_sandbox_fail, sb);
        tg_fail(&ctx, "the op failed: %d", 42);
    }
    if (kind == 2) raise(SIGSEGV);
    if (kind == 3)
        for (;;) pause();
    if (kind == 5) {   /* a record a megabyte long arrives whole */
        char *big = malloc(1 << 20);
        memset(big, 'x', 1 << 20);
        tg_sandbox_send(sb, big, 1 << 20);
        free(big);
    }
    return kind == 4 ? 7 : 0;
}

static void run(int kind, double seconds, tg_sandbox_end *end, seen *s) {
    *s = (seen){.order_ok = 1};
    assert_int_equal(tg_sandbox_run(job, &kind, &(tg_sandbox_opts){.seconds = seconds, .on_record = keep, .u = s}, end),
                     0);
}

static void test_outcomes(void **state) {
    (void)state;
    tg_sandbox_end end;
    seen s;
    run(0, 20, &end, &s);
    assert_int_equal(end.outcome, TG_SANDBOX_OK);
    assert_int_equal(s.n, 3);
    assert_int_equal(s.sum, 3);
    assert_true(s.order_ok);
    assert_int_equal(end.stage, 2);
    assert_int_equal(end.stray, strlen("stray line one\nand more\n"));
    assert_string_equal(end.stray_head, "stray line one");

    run(1, 20, &end, &s);
    assert_int_equal(end.outcome, TG_SANDBOX_FAILED);
    assert_string_equal(end.msg, "the op failed: 42");
    assert_int_equal(end.stage, 2);
    assert_int_equal(s.n, 3);

    run(2, 20, &end, &s);
    assert_int_equal(end.outcome, TG_SANDBOX_CRASHED);
    assert_int_equal(end.signal, SIGSEGV);
    assert_int_equal(s.n, 3);   /* what it sent before it crashed is kept */

    const double t0 = tg_profile_clock();
    run(3, 0.5, &end, &s);
    assert_int_equal(end.outcome, TG_SANDBOX_HUNG);
    assert_true(tg_profile_clock() - t0 < 10);
    assert_int_equal(end.stage, 2);

    run(4, 20, &end, &s);
    assert_int_equal(end.outcome, TG_SANDBOX_EXITED);
    assert_int_equal(end.status, 7);

    run(5, 20, &end, &s);
    assert_int_equal(end.outcome, TG_SANDBOX_OK);
    assert_int_equal(s.n, 4);
    assert_int_equal(s.last_len, 1 << 20);
}

static void out(void *u, const char *b, size_t n) {
    seen *s = u;
    size_t have = strlen(s->text);
    snprintf(s->text + have, sizeof s->text - have, "%.*s", (int)n, b);
}

static void test_output_passed_on(void **state) {
    (void)state;
    seen s = {.order_ok = 1};
    tg_sandbox_end end;
    int kind = 0;
    assert_int_equal(tg_sandbox_run(job, &kind, &(tg_sandbox_opts){.seconds = 20, .on_output = out, .u = &s}, &end), 0);
    assert_int_equal(end.outcome, TG_SANDBOX_OK);
    assert_string_equal(s.text, "stray line one\nand more\n");
    assert_int_equal(end.stray, 0);   /* taken by on_output, not counted */
}

/* A kernel in the child: a built-in op, and an exec kernel, which gets a process of the child's own
 * (the parent's still serves after). */
typedef struct {
    tg_kernel *K;
} call_job;

static int call_child(tg_sandbox *sb, void *u) {
    call_job *j = u;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_set_error_handler(&ctx, tg_sandbox_fail, sb);
    tg_rng rng;
    tg_rng_seed(&rng, 1, 1);
    tg_tensor *q = tg_new(&ctx, 4, (int[]){1, 4, 2, 8});
    tg_fill_normal(&rng, q->data, q->numel, 0.0f, 1.0f);
    tg_attn_args a = tg_attn_args_make(q, q, q, 0.35f);
    a.causal = 1;
    tg_tensor *o = tg_attn_kernel_call(&ctx, j->K->k, &a), *ref = tg_attend(&ctx, &a);
    float worst = 0;
    for (int64_t i = 0; i < o->numel; i++) worst = fmaxf(worst, fabsf(o->data[i] - ref->data[i]));
    tg_sandbox_send(sb, &worst, sizeof worst);
    tg_ctx_free(&ctx);
    return 0;
}

static void keep_float(void *u, const void *data, size_t n) {
    if (n == sizeof(float)) memcpy(u, data, n);
}

static void test_a_kernel_in_the_child(void **state) {
    (void)state;
    char spec[600], err[1200];
    snprintf(spec, sizeof spec, "exec:python3 %s/tests/exec_protocol_test.py --serve", top);
    const char *specs[] = {"online", spec};
    for (int i = 0; i < 2; i++) {
        tg_kernel K;
        if (tg_kernel_open(&K, specs[i], NULL, err, sizeof err)) fail_msg("%s: %s", specs[i], err);
        float worst = -1;
        call_job j = {&K};
        tg_sandbox_end end;
        assert_int_equal(tg_sandbox_run(call_child, &j, &(tg_sandbox_opts){.seconds = 60, .kernel = &K,
                                                                          .on_record = keep_float, .u = &worst},
                                        &end), 0);
        if (end.outcome != TG_SANDBOX_OK) fail_msg("%s: outcome %d: %s", specs[i], end.outcome, end.msg);
        assert_true(worst >= 0 && worst < 1e-5f);
        if (K.kind == TG_KERNEL_EXEC) assert_false(K.exec->failed);   /* the parent's process was not touched */
        tg_kernel_close(&K);
    }
}

/* The registry's grammar: every spelling, and what it refuses, without touching a file. */
static void test_spec_grammar(void **state) {
    (void)state;
    int kind;
    const char *rest;
    char err[300];
    const struct { const char *spec; int kind; const char *rest; } ok[] = {
        {"saved", TG_KERNEL_BUILTIN, "saved"}, {"online", TG_KERNEL_BUILTIN, "online"},
        {"composed", TG_KERNEL_BUILTIN, "composed"}, {"builtin:fused", TG_KERNEL_BUILTIN, "fused"},
        {"plugin:k.so:sym", TG_KERNEL_PLUGIN, "k.so:sym"}, {"exec:python3 k.py", TG_KERNEL_EXEC, "python3 k.py"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_int_equal(tg_kernel_spec(ok[i].spec, &kind, &rest, err, sizeof err), 0);
        assert_int_equal(kind, ok[i].kind);
        assert_string_equal(rest, ok[i].rest);
    }
    const char *bad[] = {"nosuch", "builtin:flash", "plugin:", "exec:", "exec:   ", "plugin:a\tb.so"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(tg_kernel_spec(bad[i], &kind, &rest, err, sizeof err), -1);
    tg_kernel K;
    assert_int_equal(tg_kernel_open(&K, "composed", NULL, err, sizeof err), 0);
    assert_ptr_equal(K.k, &tg_attn_kernel_saved);   /* 0.19's name: the same op, the same identity word */
    assert_string_equal(K.id, "composed");
    assert_true(tg_kernel_trusted(&K));
    tg_kernel_close(&K);
    assert_ptr_equal(&tg_attn_kernel_fused, &tg_attn_kernel_online);
}

int main(int argc, char **argv) {
    if (argc > 1) top = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outcomes),
        cmocka_unit_test(test_output_passed_on),
        cmocka_unit_test(test_a_kernel_in_the_child),
        cmocka_unit_test(test_spec_grammar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
