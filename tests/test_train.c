/* Whole training steps: the toy model of the experiments learns a tiny task,
 * and after its first step a training step makes no heap allocation; a stop
 * signal as a run takes or drops its lock files leaves none behind. */
#define _DEFAULT_SOURCE   /* mkdtemp, unlinkat */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/utsname.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <cblas.h>
#include <omp.h>

#include "malloc_count.h"
#include "tg_model.h"
#include "tg_tasks.h"
#include "tg_train.h"
#include "testutil.h"
#include "tg_optim.h"

typedef struct {
    tg_model m;
    tg_adamw opt;
    tg_ctx ctx;
    tg_task_cfg task;
    tg_rng rng;
    int B, *tokens, *targets;
} trainer;

/* scale_mode past the last mode: learned in the log form (it adds tg_exp) */
static void trainer_init(trainer *t, int scale_mode) {
    int log_form = scale_mode > TG_SCALE_MULT;
    tg_model_cfg mc = {.vocab = 32, .seq_len = 12, .d_model = 32, .heads = 2, .d_head = 16, .layers = 1,
                    .scale_mode = log_form ? TG_SCALE_LEARNED : scale_mode, .init = TG_INIT_FANIN, .mult = 2.0f,
                    .learned_param = log_form ? TG_LEARNED_LOG : TG_LEARNED_LINEAR};
    tg_model_init(&t->m, &mc, 3);
    t->task = (tg_task_cfg){.kind = TG_TASK_RECALL, .vocab = 32, .seq_len = 12, .keys = 4, .values = 4};
    tg_rng_seed(&t->rng, 3, 1);
    tg_adamw_init(&t->opt, &t->m.P, 0.9f, 0.95f, 1e-8f, 0.0f);
    tg_ctx_init(&t->ctx, 0);
    t->B = 16;
    t->tokens = malloc(sizeof(int) * 16 * 12);
    t->targets = malloc(sizeof(int) * 16 * 12);
}

static float trainer_step(trainer *t, float lr, int stats) {
    tg_ctx_reset(&t->ctx);
    tg_task_batch(&t->task, &t->rng, t->B, t->tokens, t->targets);
    tg_tensor *loss = tg_model_forward(&t->m, &t->ctx, t->tokens, t->targets, t->B, stats);
    tg_params_zero_grad(&t->m.P);
    tg_backward(&t->ctx, loss);
    tg_clip_grad_norm(&t->m.P, 1.0f);
    tg_adamw_step(&t->opt, &t->m.P, lr);
    return loss->data[0];
}

static void trainer_free(trainer *t) {
    free(t->tokens);
    free(t->targets);
    tg_ctx_free(&t->ctx);
    tg_adamw_free(&t->opt);
    tg_model_free(&t->m);
}

static void test_no_allocation_after_first_step(void **s) {
    (void)s;
    for (int mode = 0; mode <= TG_SCALE_MULT + 1; mode++) {   /* every scale mode: qknorm and learned add ops */
        trainer t;
        trainer_init(&t, mode);
        trainer_step(&t, 1e-3f, 1);
        size_t ctx_allocs = t.ctx.heap_allocs;
        malloc_count_start();
        for (int i = 0; i < 5; i++) trainer_step(&t, 1e-3f, i % 2);
        size_t n = malloc_count_stop();
        assert_int_equal(t.ctx.heap_allocs, ctx_allocs);   /* the context's own count */
        if (malloc_count_available()) assert_int_equal(n, 0);   /* every malloc in the process */
        trainer_free(&t);
    }
    if (!malloc_count_available()) skip();
}

/* The same with two threads, at sizes where the ops do split their work
 * (matmul, both attention ops, row ops), and each attention op. libgomp keeps
 * a team of two threads between regions, so parallel regions malloc nothing
 * after the first step either. */
static void test_no_allocation_threaded(void **s) {
    (void)s;
    omp_set_num_threads(2);
    for (int attn = 0; attn < 2; attn++) {
        tg_model m;
        tg_model_cfg mc = {.vocab = 64, .seq_len = 64, .d_model = 64, .heads = 4, .d_head = 32, .layers = 1,
                        .scale_mode = TG_SCALE_LEARNED, .init = TG_INIT_FANIN, .attn_kernel = attn ? &tg_attn_kernel_online : &tg_attn_kernel_saved};
        tg_model_init(&m, &mc, 5);
        tg_adamw opt;
        tg_adamw_init(&opt, &m.P, 0.9f, 0.95f, 1e-8f, 0.01f);
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_task_cfg task = {.kind = TG_TASK_HIST, .vocab = 64, .seq_len = 64, .alphabet = 8};
        tg_rng rng;
        tg_rng_seed(&rng, 5, 1);
        enum { NB = 8 };
        int tokens[NB * 64], targets[NB * 64];
        size_t n = 0;
        for (int step = 0; step < 4; step++) {
            if (step == 1) malloc_count_start();
            tg_ctx_reset(&ctx);
            tg_task_batch(&task, &rng, NB, tokens, targets);
            tg_tensor *loss = tg_model_forward(&m, &ctx, tokens, targets, NB, step % 2);
            tg_params_zero_grad(&m.P);
            tg_backward(&ctx, loss);
            tg_clip_grad_norm(&m.P, 1.0f);
            tg_adamw_step(&opt, &m.P, 1e-3f);
        }
        n = malloc_count_stop();
        if (malloc_count_available()) assert_int_equal(n, 0);
        tg_ctx_free(&ctx);
        tg_adamw_free(&opt);
        tg_model_free(&m);
    }
    omp_set_num_threads(1);
}

/* Backward twice on one tape: the same activation grads, bit for bit (each
 * pass starts them from zero, written lazily by the ops); parameter grads
 * accumulate (twice the first pass's, within rounding). Both attention ops,
 * learned head scales (every input of attention has a grad). */
static void test_backward_twice(void **s) {
    (void)s;
    for (int attn = 0; attn < 2; attn++) {
        tg_model m;
        tg_model_cfg mc = {.vocab = 32, .seq_len = 12, .d_model = 32, .heads = 2, .d_head = 16, .layers = 2,
                        .scale_mode = TG_SCALE_LEARNED, .init = TG_INIT_FANIN, .attn_kernel = attn ? &tg_attn_kernel_online : &tg_attn_kernel_saved};
        tg_model_init(&m, &mc, 7);
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_task_cfg task = {.kind = TG_TASK_RECALL, .vocab = 32, .seq_len = 12, .keys = 4, .values = 4};
        tg_rng rng;
        tg_rng_seed(&rng, 7, 1);
        int tokens[4 * 12], targets[4 * 12];
        tg_task_batch(&task, &rng, 4, tokens, targets);
        tg_tensor *loss = tg_model_forward(&m, &ctx, tokens, targets, 4, 0);
        tg_params_zero_grad(&m.P);
        tg_backward(&ctx, loss);
        size_t total = 0;
        for (int i = 0; i < ctx.n_nodes; i++) total += (size_t)ctx.nodes[i].out->numel;
        float *acts = malloc(total * sizeof(float)), *pg = malloc(m.P.numel * sizeof(float));
        size_t at = 0;
        for (int i = 0; i < ctx.n_nodes; i++, at += (size_t)ctx.nodes[i - 1].out->numel)
            memcpy(acts + at, ctx.nodes[i].out->grad, (size_t)ctx.nodes[i].out->numel * sizeof(float));
        memcpy(pg, m.P.grad, m.P.numel * sizeof(float));
        tg_backward(&ctx, loss);
        at = 0;
        for (int i = 0; i < ctx.n_nodes; i++) {
            const tg_tensor *o = ctx.nodes[i].out;
            if (memcmp(acts + at, o->grad, (size_t)o->numel * sizeof(float)))
                fail_msg("attn %d: node %d (%s): its output's grad differs in the second pass", attn, i,
                         ctx.nodes[i].op);
            at += (size_t)o->numel;
        }
        /* accumulated: twice the first pass's, up to float rounding of the sums */
        float gmax = 0;
        for (size_t i = 0; i < m.P.numel; i++) gmax = fabsf(pg[i]) > gmax ? fabsf(pg[i]) : gmax;
        assert_true(gmax > 0);
        for (size_t i = 0; i < m.P.numel; i++) assert_float_equal(m.P.grad[i], 2 * pg[i], 1e-6 * gmax);
        free(acts);
        free(pg);
        tg_ctx_free(&ctx);
        tg_model_free(&m);
    }
}

/* One-layer model, associative recall: from ln(values) = 1.39 nats to well
 * below half of it in 300 steps. */
static void test_end_to_end_learns(void **s) {
    (void)s;
    trainer t;
    trainer_init(&t, TG_SCALE_SQRT);
    double first = 0, last = 0;
    const int steps = 300;
    for (int i = 0; i < steps; i++) {
        float l = trainer_step(&t, tg_lr_schedule(i, 20, steps, 3e-3f, 3e-4f), 0);
        if (i < 10) first += l / 10;
        if (i >= steps - 20) last += l / 20;
    }
    print_message("recall loss: first 10 steps %.3f, last 20 steps %.3f\n", first, last);
    assert_true(first > 1.2);
    assert_true(last < 0.3);
    trainer_free(&t);
}

/* Every limit of tg_train_cfg is a clear error up front (tg_train_cfg_check), never a division by
 * zero, a NULL printed or an entry silently dropped. */
static void expect_bad(const tg_train_cfg *c, const char *want) {
    char err[512] = "";
    assert_int_equal(tg_train_cfg_check(c, err, sizeof err), -1);
    if (!strstr(err, want)) fail_msg("tg_train_cfg_check: '%s' lacks '%s'", err, want);
}

static void test_cfg_check(void **s) {
    (void)s;
    char err[512];
    tg_train_cfg c, d;
    tg_train_defaults(&c, "t");
    assert_int_equal(tg_train_cfg_check(&c, err, sizeof err), 0);
    d = c, d.log_every = 0;
    expect_bad(&d, "log_every 0: must be at least 1");
    d = c, d.stop_at = 10;
    expect_bad(&d, "stop_at 10 without save");
    d = c, d.warmup = c.steps + 1;
    expect_bad(&d, "warmup 101 is outside 0..steps (100)");
    d = c, d.beta2 = 1.0f;
    expect_bad(&d, "AdamW's betas 0.9, 1 must be in [0, 1)");
    d = c, d.lr = 0;
    expect_bad(&d, "lr 0 must be finite and > 0");
    static const char *const many[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o",
                                       "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "aa", "bb", "cc", "dd",
                                       "ee", "ff", "gg", "hh", "ii", "jj", "kk", NULL};
    d = c, d.may_differ = many;
    expect_bad(&d, "37 may_differ and header_may_differ entries, at most 36");
    const char *files[17][2];
    for (int i = 0; i < 17; i++) files[i][0] = "--x", files[i][1] = NULL;
    d = c, d.files = (const char *const(*)[2])files, d.n_files = 17;
    expect_bad(&d, "17 more files, at most 16");
    d = c, d.prog = NULL;
    expect_bad(&d, "prog is not set");
    d = c, d.precision = 3;
    expect_bad(&d, "precision 3 is none of TG_FP32, TG_BF16, TG_FP16");
}

/* tg_train is tg_train_update with a driver around it: a loop of one's own over the same batches
 * gives the same losses, byte for byte (no log, no checkpoint). */
typedef struct {
    tg_model m;
    tg_task_cfg task;
    int B, *x, *y, n;
    int fail_at;   /* the forward (0: the planning pass, 1 + s: step s) that fails as an exec kernel would; -1: none */
    float loss[64];
} own_run;

static void own_batch(void *u, tg_rng *rng, int step) {
    own_run *r = u;
    (void)step;
    tg_task_batch(&r->task, rng, r->B, r->x, r->y);
}

static tg_tensor *own_forward(tg_ctx *ctx, void *u, int logging) {
    own_run *r = u;
    (void)logging;
    if (r->n == r->fail_at) tg_fail(ctx, "planted: forward %d failed", r->n);
    tg_tensor *l = tg_model_forward(&r->m, ctx, r->x, r->y, r->B, 0);
    if (r->n < 64) r->loss[r->n++] = l->data[0];
    return l;
}

static void own_init(own_run *r) {
    tg_model_cfg mc = {.vocab = 32, .seq_len = 12, .d_model = 32, .heads = 2, .d_head = 16, .layers = 1,
                       .scale_mode = TG_SCALE_SQRT, .init = TG_INIT_FANIN};
    *r = (own_run){.task = {.kind = TG_TASK_RECALL, .vocab = 32, .seq_len = 12, .keys = 4, .values = 4}, .B = 8,
                   .fail_at = -1};
    tg_model_init(&r->m, &mc, 5);
    r->x = malloc(sizeof(int) * 8 * 12);
    r->y = malloc(sizeof(int) * 8 * 12);
}

static void own_free(own_run *r) {
    free(r->x);
    free(r->y);
    tg_model_free(&r->m);
}

static void test_update_is_the_loop(void **s) {
    (void)s;
    tg_train_cfg c;
    tg_train_defaults(&c, "test_train");
    c.steps = 20, c.warmup = 3, c.log_every = 5, c.lr = 3e-3f, c.progress = 0, c.data_seed = 9;
    own_run a, b;
    own_init(&a);
    tg_train_model tm = {.P = &a.m.P, .user = &a, .batch = own_batch, .forward = own_forward};
    tg_train_result res;
    assert_int_equal(tg_train(&c, &tm, &res), 0);
    assert_int_equal(a.n, c.steps + 2);   /* the planning pass, the steps, the evaluation after the last */
    own_init(&b);
    tg_train_optim o;
    tg_train_optim_init(&c, &b.m.P, &o);
    tg_rng rng;
    tg_rng_seed(&rng, c.data_seed, 0xda7a);   /* tg_train's data RNG (tg_train.h) */
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    for (int step = 0; step < c.steps; step++) {
        tg_ctx_reset(&ctx);
        own_batch(&b, &rng, step);
        tg_tensor *loss = tg_model_forward(&b.m, &ctx, b.x, b.y, b.B, 0);
        float gnorm, lr;
        assert_int_equal(tg_train_update(&c, &b.m.P, &o, &ctx, loss, step, NULL, &gnorm, &lr), 0);
        if (loss->data[0] != a.loss[1 + step])
            fail_msg("step %d: own loop %.9g, tg_train %.9g", step, loss->data[0], a.loss[1 + step]);
    }
    for (size_t i = 0; i < b.m.P.numel; i++)
        if (a.m.P.data[i] != b.m.P.data[i]) fail_msg("parameter %zu differs after %d steps", i, c.steps);
    tg_ctx_free(&ctx);
    tg_train_optim_free(&c, &o);
    own_free(&a);
    own_free(&b);
}

/* The last line of a file, into buf. */
static void last_line(const char *path, char *buf, size_t len) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024];
    buf[0] = 0;
    while (fgets(line, sizeof line, f)) snprintf(buf, len, "%s", line);
    fclose(f);
}

/* A run of `steps` steps logging to DIR/run.tsv and saving DIR/run.st every save_every, DIR a
 * new folder (dir: its mkdtemp template); c.log and c.save left to the test. */
static tg_train_cfg run_in(char *dir, char *log, char *save, size_t len, int steps, int save_every) {
    assert_non_null(mkdtemp(dir));
    snprintf(log, len, "%s/run.tsv", dir);
    snprintf(save, len, "%s/run.st", dir);
    tg_train_cfg c;
    tg_train_defaults(&c, "test_train");
    c.steps = steps, c.warmup = 2, c.log_every = 1, c.save_every = save_every, c.lr = 3e-3f, c.progress = 0;
    c.data_seed = 4;
    return c;
}

/* An op that fails in a step (tg_fail: an exec kernel that died) ends the run cleanly: its own status
 * and exit status, the log's last line names the step and the message, the checkpoint before it is
 * intact (resuming from it gives the parameters of a run that never failed); failing in the planning
 * pass writes nothing. */
static void test_op_failure_ends_the_run(void **s) {
    (void)s;
    char dir[] = "/tmp/tg_train_test.XXXXXX", log[64], save[64], line[1024];
    tg_train_cfg c = run_in(dir, log, save, sizeof log, 12, 5);
    own_run straight, a, b;
    tg_train_result res;
    own_init(&straight);
    tg_train_model tm = {.P = &straight.m.P, .user = &straight, .batch = own_batch, .forward = own_forward};
    assert_int_equal(tg_train(&c, &tm, &res), TG_TRAIN_OK);

    own_init(&a);
    a.fail_at = 0;   /* the planning pass, before the header: nothing written */
    c.log = log, c.save = save;
    tm.P = &a.m.P, tm.user = &a;
    assert_int_equal(tg_train(&c, &tm, &res), TG_TRAIN_OP_FAILED);
    assert_int_equal(access(log, F_OK), -1);
    assert_int_equal(access(save, F_OK), -1);

    own_free(&a);
    own_init(&a);
    a.fail_at = 1 + 7;   /* step 7: the checkpoint of step 5 is the last */
    tm.P = &a.m.P, tm.user = &a;
    const int st = tg_train(&c, &tm, &res);
    assert_int_equal(st, TG_TRAIN_OP_FAILED);
    assert_int_equal(tg_train_exit_status(st, &res), TG_EXIT_OP);
    last_line(log, line, sizeof line);
    assert_string_equal(line, "# failed: step 7: planted: forward 8 failed\n");

    own_init(&b);   /* resumed with a kernel that works: the straight run's parameters, bit for bit */
    c.resume = save;
    tm.P = &b.m.P, tm.user = &b;
    assert_int_equal(tg_train(&c, &tm, &res), TG_TRAIN_OK);
    assert_int_equal(res.start_step, 5);
    for (size_t i = 0; i < b.m.P.numel; i++)
        if (straight.m.P.data[i] != b.m.P.data[i]) fail_msg("parameter %zu differs from the straight run", i);
    own_free(&straight);
    own_free(&a);
    own_free(&b);
    unlink(log), unlink(save);
    assert_int_equal(rmdir(dir), 0);
}

/* ---- a stop signal at the lock files' edges ----------------------------------------------------
 * Interposed on the kit's calls: gethostname follows each lock taken (runlock.c) and unlink removes
 * each lock file. At those moments tg_train's stop handler must hold SIGTERM (else its default death
 * leaves the lock files behind, as a sweep met when it stopped a run that was starting or ending);
 * the hook checks so, then sends SIGTERM there once. */
enum { HOOK_OFF, HOOK_TAKE, HOOK_RELEASE };
static int hook_mode, hook_raised, hook_unguarded;

static int term_is_default(void) {
    struct sigaction now;
    sigaction(SIGTERM, NULL, &now);
    return now.sa_handler == SIG_DFL;
}

static void hook_at(int mode) {
    if (hook_mode != mode || hook_raised) return;
    if (term_is_default()) {
        hook_unguarded++;   /* raising it now would kill this test */
        return;
    }
    hook_raised = 1;
    raise(SIGTERM);
}

int gethostname(char *name, size_t len) {
    hook_at(HOOK_TAKE);
    struct utsname u;
    if (uname(&u)) return -1;
    snprintf(name, len, "%s", u.nodename);
    return 0;
}

static int is_lock_file(const char *name) {
    const size_t n = strlen(name);
    return n > 5 && strcmp(name + n - 5, ".lock") == 0;
}

int unlink(const char *path) {
    const int rc = unlinkat(AT_FDCWD, path, 0);
    if (is_lock_file(path)) hook_at(HOOK_RELEASE);
    return rc;
}

static int lock_files_in(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += is_lock_file(e->d_name);
    closedir(d);
    return n;
}

/* SIGTERM as the first lock is taken: a clean stop before step 0 (its checkpoint written), no lock
 * file left. SIGTERM after the first lock file of a finished run is removed: moot (the run is done),
 * the other lock files go too. Both times SIGTERM's default action is back afterwards. */
static void test_stop_signal_leaves_no_lock_files(void **s) {
    (void)s;
    char dir[] = "/tmp/tg_train_test.XXXXXX", log[64], save[64];
    tg_train_cfg c = run_in(dir, log, save, sizeof log, 6, 3);
    c.log = log, c.save = save;
    own_run a;
    tg_train_result res;
    own_init(&a);
    tg_train_model tm = {.P = &a.m.P, .user = &a, .batch = own_batch, .forward = own_forward};

    hook_mode = HOOK_TAKE, hook_raised = hook_unguarded = 0;
    const int st = tg_train(&c, &tm, &res);
    hook_mode = HOOK_OFF;
    assert_int_equal(hook_unguarded, 0);
    assert_int_equal(hook_raised, 1);
    assert_int_equal(st, TG_TRAIN_STOPPED);
    assert_int_equal(res.signal, SIGTERM);
    assert_int_equal(res.step, 0);
    assert_int_equal(lock_files_in(dir), 0);
    assert_true(term_is_default());

    c.resume = save;   /* the rest of the run, from that checkpoint */
    hook_mode = HOOK_RELEASE, hook_raised = hook_unguarded = 0;
    assert_int_equal(tg_train(&c, &tm, &res), TG_TRAIN_OK);
    hook_mode = HOOK_OFF;
    assert_int_equal(hook_unguarded, 0);
    assert_int_equal(hook_raised, 1);
    assert_int_equal(res.step, c.steps);
    assert_int_equal(lock_files_in(dir), 0);
    assert_true(term_is_default());

    own_free(&a);
    unlink(log), unlink(save);
    assert_int_equal(rmdir(dir), 0);
}

/* tg_try: a tg_fail comes back as -1 with its message; the handler is restored either way. */
static void try_fails(tg_ctx *ctx, void *u) {
    (void)u;
    tg_fail(ctx, "%s", "planted failure");
}
static void try_works(tg_ctx *ctx, void *u) {
    *(int *)u = tg_new(ctx, 1, (int[]){3})->numel;
}
static void test_try(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    char err[64] = "";
    int n = 0;
    assert_int_equal(tg_try(&ctx, try_works, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_null(ctx.err.fn);
    assert_int_equal(tg_try(&ctx, try_fails, NULL, err, sizeof err), -1);
    assert_string_equal(err, "planted failure");
    assert_null(ctx.err.fn);
    tg_ctx_free(&ctx);
}

int main(void) {
    openblas_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_allocation_after_first_step),
        cmocka_unit_test(test_no_allocation_threaded),
        cmocka_unit_test(test_backward_twice),
        cmocka_unit_test(test_end_to_end_learns),
        cmocka_unit_test(test_cfg_check),
        cmocka_unit_test(test_update_is_the_loop),
        cmocka_unit_test(test_op_failure_ends_the_run),
        cmocka_unit_test(test_try),
        cmocka_unit_test(test_stop_signal_leaves_no_lock_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
