/* The run's services (tg_services.h) in a loop of one's own: the checkpointer
 * and the NaN policy around a hand-written step on a tiny model (loss =
 * sum(w^2) by AdamW). What tg_train would do, they do here: a checkpoint every
 * save_every steps and at the end, holding the step and the parameters; a
 * poisoned gradient skipped (skip) or the run stopped with the last
 * checkpoint kept (stop); and a service of the user's own in the same list.
 * Then services of one's own in tg_train's loop (tg_train_cfg.services, 0.20):
 * each with its own state, after the kit's, one ending the run early. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_checkpoint.h"
#include "tg_ops.h"
#include "tg_optim.h"
#include "tg_services.h"
#include "tg_train.h"
#include "testutil.h"

typedef struct {
    tg_params P;
    tg_train_optim o;
    tg_rng data;
    tg_train_state st;
    tg_train_model m;
    tg_train_cfg c;
    tg_runlog L;
    tg_train_result r;
    tg_ctx ctx;
    char path[256];
} hand;

static void hand_init(hand *h, const char *dir, int on_nan) {
    memset(h, 0, sizeof *h);
    tg_params_init(&h->P);
    tg_param(&h->P, "w", 1, (int[]){4});
    tg_params_alloc(&h->P);
    for (int i = 0; i < 4; i++) h->P.data[i] = 1.0f + (float)i;
    tg_train_defaults(&h->c, "hand");
    h->c.steps = 20, h->c.save_every = 5, h->c.lr = 0.05f, h->c.lr_min = 0.05f, h->c.progress = 0;
    h->c.on_nan = on_nan, h->c.debug_nan = 7;   /* step 7's gradient poisoned */
    snprintf(h->path, sizeof h->path, "%s/ck.st", dir);
    h->c.save = h->path;
    tg_train_optim_init(&h->c, &h->P, &h->o);
    tg_rng_seed(&h->data, 1, 2);
    h->st = (tg_train_state){.P = &h->P, .data_rng = &h->data};
    tg_train_optim_attach(&h->c, &h->o, &h->st);
    h->m = (tg_train_model){.P = &h->P};
    h->L = (tg_runlog){.fd = -1};
    tg_ctx_init(&h->ctx, 0);
}

static void hand_free(hand *h) {
    tg_ctx_free(&h->ctx);
    tg_train_optim_free(&h->c, &h->o);
    tg_params_free(&h->P);
    free(h->st.logged);
}

/* A service of one's own: counts the steps it saw after their update. */
static int count_after(void *self, tg_run *run) {
    (void)run;
    ++*(int *)self;
    return TG_TRAIN_OK;
}

static int hand_loop(hand *h, int *seen) {
    tg_service svc[] = {tg_svc_checkpoint, tg_svc_nan, {.name = "count", .after = count_after, .self = seen}};
    const int n = 3;
    tg_run run;
    tg_run_init(&run, &h->c, &h->m, &h->st, &h->L, &h->r, &h->ctx);
    int status = tg_services_start(svc, n, &run);
    for (int step = h->st.step; !status && !run.ended && step <= h->c.steps; step++) {
        tg_run_begin_step(&run, step);
        if ((status = tg_services_before(svc, n, &run)) || run.ended) break;
        tg_ctx_reset(&h->ctx);
        tg_tensor *w = tg_params_find(&h->P, "w"), *loss = tg_sum(&h->ctx, tg_mul(&h->ctx, w, w));
        run.loss = loss->data[0];
        if (step < h->c.steps)
            run.update_failed = tg_train_update(&h->c, &h->P, &h->o, &h->ctx, loss, step, NULL, &run.gnorm,
                                                &run.lr);
        status = tg_services_after(svc, n, &run);
    }
    return tg_services_stop(svc, n, &run, status);
}

/* The checkpoint at path: its step and parameters. */
static int load(const char *path, float *w) {
    hand g;
    hand_init(&g, "/nonexistent", TG_ONNAN_SKIP);
    char changed[256], err[512];
    int rc = tg_ckpt_load(path, &g.st, NULL, 0, NULL, changed, sizeof changed, err, sizeof err);
    int step = rc ? -1 : g.st.step;
    if (!rc) memcpy(w, g.P.data, 4 * sizeof *w);
    hand_free(&g);
    return step;
}

static void test_skip_then_the_end_saved(void **state) {
    hand h;
    int seen = 0;
    hand_init(&h, *state, TG_ONNAN_SKIP);
    assert_int_equal(hand_loop(&h, &seen), TG_TRAIN_OK);
    assert_int_equal(h.r.skipped, 1);   /* step 7: nothing updated */
    assert_int_equal(seen, 21);         /* steps 0..20, the own service after each */
    float w[4];
    assert_int_equal(load(h.path, w), 20);   /* the last checkpoint: the end */
    assert_memory_equal(w, h.P.data, sizeof w);
    assert_true(w[3] < 4.0f);               /* trained */
    hand_free(&h);
}

static void test_stop_keeps_the_last_checkpoint(void **state) {
    hand h;
    int seen = 0;
    hand_init(&h, *state, TG_ONNAN_STOP);
    float at5[4];
    assert_int_equal(hand_loop(&h, &seen), TG_TRAIN_NONFINITE);
    assert_int_equal(h.r.step, 7);
    assert_int_equal(seen, 7);   /* steps 0..6: the NaN policy ended step 7 before the own service */
    assert_int_equal(load(h.path, at5), 5);
    hand_free(&h);
}

/* ---- services of one's own in tg_train's loop ---------------------------------------------------- */
typedef struct {
    tg_params *P;
    int batches, befores;
} tiny;

static void tiny_batch(void *u, tg_rng *rng, int step) {
    (void)rng, (void)step;
    ((tiny *)u)->batches++;
}
static tg_tensor *tiny_forward(tg_ctx *ctx, void *u, int logging) {
    (void)logging;
    tg_tensor *w = tg_params_find(((tiny *)u)->P, "w");
    return tg_sum(ctx, tg_mul(ctx, w, w));
}
static int tiny_before(void *u, int step, char *err, size_t errlen) {
    (void)step, (void)err, (void)errlen;
    ((tiny *)u)->befores++;   /* the model's own hook: the kit's model service calls it */
    return 0;
}

/* Early stopping: the run ends cleanly at the first logged loss below `below`. */
typedef struct {
    float below;
    int stopped_at, rows;
} early;
static int early_after(void *self, tg_run *run) {
    early *e = self;
    if (!run->logging) return TG_TRAIN_OK;
    e->rows++;
    if (run->loss < e->below && e->stopped_at < 0) e->stopped_at = run->step, run->ended = 1;
    return TG_TRAIN_OK;
}
/* A service that fails the run at a step of its choosing. */
static int fail_before(void *self, tg_run *run) {
    return run->step == *(int *)self ? TG_TRAIN_FAILED : TG_TRAIN_OK;
}

static void test_own_services_in_tg_train(void **state) {
    (void)state;
    tg_params P;
    tg_params_init(&P);
    tg_param(&P, "w", 1, (int[]){4});
    tg_params_alloc(&P);
    for (int i = 0; i < 4; i++) P.data[i] = 1.0f + (float)i;
    tiny t = {.P = &P};
    tg_train_model m = {.P = &P, .user = &t, .batch = tiny_batch, .forward = tiny_forward, .before_step = tiny_before};
    tg_train_cfg c;
    tg_train_defaults(&c, "own");
    c.steps = 400, c.log_every = 10, c.lr = c.lr_min = 0.05f, c.progress = 0;
    early e = {.below = 1.0f, .stopped_at = -1};
    tg_service mine[] = {{.name = "early", .after = early_after, .self = &e}};
    c.services = mine, c.n_services = 1;
    tg_train_result r;
    assert_int_equal(tg_train(&c, &m, &r), TG_TRAIN_OK);
    /* sum(w²) from 30 falls below 1 well before step 400: the run ended there, not finished */
    assert_true(e.stopped_at > 0 && e.stopped_at < 400);
    assert_int_equal(e.stopped_at % 10, 0);
    assert_int_equal(e.rows, e.stopped_at / 10 + 1);
    assert_int_equal(r.step, e.stopped_at);
    assert_int_equal(r.finished, 0);
    /* the model's before_step ran at every step, as a service, before the batch (+1: the planning pass's batch) */
    assert_int_equal(t.befores, e.stopped_at + 1);
    assert_int_equal(t.batches, e.stopped_at + 2);

    int at = 3;   /* a service's failure ends the run with its status */
    tg_service failing[] = {{.name = "fail", .before = fail_before, .self = &at}};
    c.services = failing;
    assert_int_equal(tg_train(&c, &m, &r), TG_TRAIN_FAILED);
    assert_int_equal(r.step, 3);
    c.n_services = TG_TRAIN_MAX_SERVICES + 1;   /* more than the loop takes: refused, nothing run */
    assert_int_equal(tg_train(&c, &m, &r), TG_TRAIN_USAGE);
    tg_params_free(&P);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_skip_then_the_end_saved, tg_test_make_dir, tg_test_remove_dir),
        cmocka_unit_test_setup_teardown(test_stop_keeps_the_last_checkpoint, tg_test_make_dir, tg_test_remove_dir),
        cmocka_unit_test(test_own_services_in_tg_train),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
