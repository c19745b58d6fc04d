/* The run's services: what a training loop does around its steps, one piece
 * each, so that tg_train is their composition, a program adds its own to it
 * (tg_train_cfg.services) and a loop of your own can take any of them (since
 * 0.18; 0.20: the list open to a program, each service's state its own).
 *
 * A service is a table of optional hooks over one tg_run, called with the
 * service's own state (self): start, before a step's batch, after its update,
 * stop. The run (tg_run) holds the run's facts only, which any service may
 * read: the step at hand, its loss, gradient norm and rate, whether it is
 * logged, a caught signal and whether the run stops before this step, the step
 * of the last checkpoint written. A hook returns TG_TRAIN_OK to go on, or a
 * tg_train_status that ends the run; a service that ends the run without
 * failing (--stop-at) sets run->ended. tg_train runs, in this order,
 *   tg_svc_checkpoint  before: the checkpoint when due (cfg save, save_every, stop_at; a caught
 *                      signal): the log's rows synced first. A failed write ends the run.
 *   tg_svc_stop        before: a caught stop signal ends the run (TG_TRAIN_STOPPED,
 *                      r->signal), stop_at ends it cleanly (run->ended)
 *   tg_svc_nan         after: the NaN policy (cfg on_nan): a non-finite loss or gradient norm
 *                      said (the first 10), then stop (TG_TRAIN_NONFINITE) or skip (r->skipped);
 *                      stop: a run that skipped more than cfg max_skipped fails
 *   tg_svc_runlog      after: a logged step's row (the model's values()), and the logged
 *                      loss and metric the checkpoints and the result keep
 *   tg_svc_model       before: the model's before_step (a failure ends the run,
 *                      TG_TRAIN_FAILED); after: its after_row at a logged step (a failure
 *                      ends the run, TG_TRAIN_CONTRACT, "# failed: ..." the log's last line)
 *   progress           after: a progress line on a terminal (cfg progress); stop: its newline
 *                      (tg_svc_progress_make: its state is the time of its last line)
 * then cfg's own services, in their order; around the step itself (tg_train_update).
 * Stop hooks run last to first. Messages go to stderr as "PROG: ...", and a '#'
 * note to the log (tg_run_note), as tg_train's.
 *
 * A loop of your own with two of them (docs/install.md#a-loop-of-your-own-with-the-runs-services; tests/test_services.c):
 *   tg_service svc[] = {tg_svc_checkpoint, tg_svc_nan};
 *   tg_run run;
 *   tg_run_init(&run, &c, &m, &st, &L, &r, &ctx);
 *   int status = tg_services_start(svc, 2, &run);
 *   for (int step = st.step; !status && !run.ended && step <= c.steps; step++) {
 *       tg_run_begin_step(&run, step);
 *       if ((status = tg_services_before(svc, 2, &run)) || run.ended) break;
 *       ... the batch, the forward, tg_train_update: run.loss, run.gnorm, run.lr, run.update_failed
 *       status = tg_services_after(svc, 2, &run);
 *   }
 *   status = tg_services_stop(svc, 2, &run, status);
 * Or a service of your own in tg_train's loop (tests/test_services.c):
 *   tg_service mine = {.name = "mine", .after = my_after, .self = &my_state};
 *   c.services = &mine, c.n_services = 1;
 *   tg_train(&c, &m, &r); */
#ifndef TG_SERVICES_H
#define TG_SERVICES_H

#include "tg_train.h"

/* The run's facts, read by any service; each written by the loop, or by the one service the
 * comment names (through its hooks only). */
typedef struct tg_run {
    const tg_train_cfg *c;
    tg_train_model *m;
    tg_train_state *st;        /* what checkpoints hold: st->step, the parameters, the logged rows */
    tg_runlog *L;              /* the run log (L->fd < 0: none) */
    tg_train_result *r;
    tg_ctx *ctx;
    int start;                 /* the first step of this process (a resumed run's checkpoint step) */
    int step;                  /* the step at hand (tg_run_begin_step) */
    int signal;                /* a stop signal caught before this step (tg_guard.h), else 0 */
    int stop_here;             /* the run stops before this step: a signal, or cfg stop_at */
    int last_saved;            /* the step of the last checkpoint on disk, -1: none (tg_svc_checkpoint) */
    int logging;               /* this step's row is logged (every log_every steps and the last) */
    float loss, gnorm, lr;     /* the step's, set by the loop before the after hooks */
    int update_failed;         /* the gradient norm was not finite: nothing was updated */
    int ended;                 /* a service ended the run without a failure */
    double t0;                 /* the start (the kit's clock, seconds) */
} tg_run;

typedef struct tg_service {
    const char *name;
    int (*start)(void *self, tg_run *run);
    int (*before)(void *self, tg_run *run);
    int (*after)(void *self, tg_run *run);
    int (*stop)(void *self, tg_run *run, int status);   /* the status so far in, the run's out */
    void *self;                /* the service's own state, passed to each hook (NULL: it has none) */
} tg_service;

/* The kit's services without state of their own (0.18's; tg_svc_model since 0.20: the model's
 * before_step and after_row; 0.18's tg_svc_contract, its after_row alone, kept through 0.20). */
extern const tg_service tg_svc_checkpoint, tg_svc_stop, tg_svc_nan, tg_svc_runlog, tg_svc_model, tg_svc_contract;
/* The progress line's service over its state (since 0.20; 0.19's constant tg_svc_progress kept
 * its state in the run). */
typedef struct tg_svc_progress_state {
    double last_print;         /* when its last line was written (the kit's clock, seconds) */
} tg_svc_progress_state;
tg_service tg_svc_progress_make(tg_svc_progress_state *state);

/* The run over its pieces (L and r may not be NULL; L->fd -1 for no log), at st->step. */
void tg_run_init(tg_run *run, const tg_train_cfg *c, tg_train_model *m, tg_train_state *st, tg_runlog *L,
                 tg_train_result *r, tg_ctx *ctx);
/* A step begins: run->step, r->step, the caught signal and whether the run stops before it. */
void tg_run_begin_step(tg_run *run, int step);
/* Each service's hook in order (stop: last to first, after r->seconds is set:
 * the time since tg_run_init), until one ends the run; its status. */
int tg_services_start(const tg_service *s, int n, tg_run *run);
int tg_services_before(const tg_service *s, int n, tg_run *run);
int tg_services_after(const tg_service *s, int n, tg_run *run);
int tg_services_stop(const tg_service *s, int n, tg_run *run, int status);

/* A '#' line after the rows (tabs and newlines made spaces); nothing without a log. */
void tg_run_note(tg_runlog *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
