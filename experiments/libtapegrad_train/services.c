/* The run's services (tg_services.h): each what tg_train's loop did in one
 * place, a table of hooks over the run's facts and its own state. */
#define _POSIX_C_SOURCE 200809L   /* isatty */
#include "tg_services.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tg_checkpoint.h"
#include "tg_guard.h"
#include "tg_timing.h"

static double now_s(void) { return 1e-3 * tg_timing_now_ms(); }   /* the kit's one clock */

void tg_run_note(tg_runlog *L, const char *fmt, ...) {
    if (L->fd < 0) return;
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    for (char *p = line; *p; p++)
        if (*p == '\n' || *p == '\t') *p = ' ';
    tg_runlog_add(L, "# %s\n", line);
    tg_runlog_end_row(L);
}

void tg_run_init(tg_run *run, const tg_train_cfg *c, tg_train_model *m, tg_train_state *st, tg_runlog *L,
                 tg_train_result *r, tg_ctx *ctx) {
    *run = (tg_run){.c = c, .m = m, .st = st, .L = L, .r = r, .ctx = ctx, .start = st->step, .step = st->step,
                    .last_saved = -1, .t0 = now_s()};
}

void tg_run_begin_step(tg_run *run, int step) {
    run->step = run->r->step = step;
    run->signal = tg_guard_signal();
    run->stop_here = run->signal || (run->c->stop_at && step == run->c->stop_at);
    run->logging = step % run->c->log_every == 0 || step == run->c->steps;
    run->loss = run->gnorm = run->lr = 0;
    run->update_failed = 0;
}

enum { START, BEFORE, AFTER };

static int each(const tg_service *s, int n, tg_run *run, int hook) {
    for (int i = 0; i < n && !run->ended; i++) {
        int (*fn)(void *, tg_run *) = hook == START ? s[i].start : hook == BEFORE ? s[i].before : s[i].after;
        int status = fn ? fn(s[i].self, run) : TG_TRAIN_OK;
        if (status) return status;
    }
    return TG_TRAIN_OK;
}

int tg_services_start(const tg_service *s, int n, tg_run *run) { return each(s, n, run, START); }
int tg_services_before(const tg_service *s, int n, tg_run *run) { return each(s, n, run, BEFORE); }
int tg_services_after(const tg_service *s, int n, tg_run *run) { return each(s, n, run, AFTER); }

int tg_services_stop(const tg_service *s, int n, tg_run *run, int status) {
    run->r->seconds = now_s() - run->t0;
    for (int i = n - 1; i >= 0; i--)
        if (s[i].stop) status = s[i].stop(s[i].self, run, status);
    return status;
}

/* ---- checkpoints ------------------------------------------------------------------ */
/* A checkpoint at step s: s updates done, the data RNG ready for batch s. A
 * run resumed from the file it saves to has that step's already. */
static int ckpt_start(void *self, tg_run *run) {
    (void)self;
    const tg_train_cfg *c = run->c;
    if (c->resume && c->save && strcmp(c->resume, c->save) == 0) run->last_saved = run->start;
    return TG_TRAIN_OK;
}

static int ckpt_before(void *self, tg_run *run) {
    (void)self;
    const tg_train_cfg *c = run->c;
    const int step = run->step;
    if (!c->save || step == run->last_saved ||
        !(run->stop_here || step == c->steps || (step > run->start && step % c->save_every == 0)))
        return TG_TRAIN_OK;
    char err[1024];
    run->st->step = step;
    tg_runlog_sync(run->L);   /* the rows the checkpoint has seen are on disk first */
    if (tg_ckpt_save(c->save, run->st, c->opts, c->n_opts, err, sizeof err)) {
        fprintf(stderr, "%s: step %d: checkpoint not written, stopping: %s\n", c->prog, step, err);
        tg_run_note(run->L, "stopped before step %d: checkpoint not written: %s", step, err);
        return TG_TRAIN_FAILED;
    }
    run->last_saved = step;
    return TG_TRAIN_OK;
}

const tg_service tg_svc_checkpoint = {.name = "checkpoint", .start = ckpt_start, .before = ckpt_before};

/* ---- signals and --stop-at ---------------------------------------------------------- */
static int stop_before(void *self, tg_run *run) {
    (void)self;
    const tg_train_cfg *c = run->c;
    const int step = run->step;
    if (run->signal) {
        fprintf(stderr, "%s: %s before step %d: %s\n", c->prog, tg_guard_signal_name(run->signal), step,
                c->save ? "checkpoint written, continue with --resume" : "no --save: only the log is kept");
        tg_run_note(run->L, "interrupted by %s before step %d", tg_guard_signal_name(run->signal), step);
        run->r->signal = run->signal;
        return TG_TRAIN_STOPPED;
    }
    if (run->stop_here) {
        fprintf(stderr, "%s: stopped before step %d of %d (--stop-at); continue with --resume %s\n", c->prog, step,
                c->steps, c->save);
        run->ended = 1;
    }
    return TG_TRAIN_OK;
}

const tg_service tg_svc_stop = {.name = "stop", .before = stop_before};

/* ---- the NaN policy ------------------------------------------------------------------ */
static int nan_after(void *self, tg_run *run) {
    (void)self;
    const tg_train_cfg *c = run->c;
    tg_train_result *r = run->r;
    char why[1024];
    const char *bad = NULL;
    if (!isfinite(run->loss)) {
        tg_guard_forward(run->ctx, run->m->P, why, sizeof why);
        bad = "loss";
    } else if (run->update_failed) {
        tg_guard_backward(run->ctx, run->m->P, why, sizeof why);
        bad = "gradient norm";
    }
    if (!bad) return TG_TRAIN_OK;
    if (c->on_nan == TG_ONNAN_STOP || r->skipped < 10)
        fprintf(stderr, "%s: step %d: non-finite %s (%g): %s\n", c->prog, run->step, bad,
                bad[0] == 'l' ? run->loss : run->gnorm, why);
    else if (r->skipped == 10)
        fprintf(stderr, "%s: more steps with non-finite values: counted, not printed (--on-nan skip)\n", c->prog);
    if (c->on_nan == TG_ONNAN_STOP) {
        fprintf(stderr, "%s: stopping (--on-nan stop)%s\n", c->prog,
                c->save && run->last_saved >= 0 ? "; the last checkpoint is kept" : "");
        tg_run_note(run->L, "stopped at step %d: non-finite %s: %s", run->step, bad, why);
        return TG_TRAIN_NONFINITE;
    }
    r->skipped++;   /* skip: parameters and optimizer state stay as they were */
    return TG_TRAIN_OK;
}

/* A run that skipped more than max_skipped of its steps, or ends on a
 * non-finite loss, did not train as asked, whatever the loop says. */
static int nan_stop(void *self, tg_run *run, int status) {
    (void)self;
    const tg_train_cfg *c = run->c;
    const tg_train_result *r = run->r;
    const tg_train_state *st = run->st;
    if (r->skipped) fprintf(stderr, "%s: %d steps skipped for non-finite values (--on-nan skip)\n", c->prog, r->skipped);
    if (st->scaler && st->scaler->skipped)   /* fp16's own: an overflow halves the loss scale, not a failure */
        fprintf(stderr, "%s: fp16: %" PRId64 " steps skipped for overflow in all, the loss scale now %g\n", c->prog,
                st->scaler->skipped, st->scaler->scale);
    const int updates = (r->step < c->steps ? r->step : c->steps) - run->start;
    const double last = st->n_logged ? st->logged[2 * (st->n_logged - 1)] : 0;
    if (status || run->ended || !r->skipped || (r->skipped <= c->max_skipped * updates && isfinite(last)))
        return status;
    char why[200];
    if (r->skipped >= updates)
        snprintf(why, sizeof why, "every one of the %d steps was skipped for non-finite values", updates);
    else if (!isfinite(last))
        snprintf(why, sizeof why, "the last loss is %g after %d of %d steps were skipped", last, r->skipped, updates);
    else
        snprintf(why, sizeof why, "%d of the %d steps (%.0f%%) were skipped for non-finite values, more than %.0f%%",
                 r->skipped, updates, 100.0 * r->skipped / updates, 100.0 * c->max_skipped);
    fprintf(stderr, "%s: %s: the model did not train as asked\n", c->prog, why);
    tg_run_note(run->L, "failed: %s (--on-nan skip)", why);
    return TG_TRAIN_NONFINITE;
}

const tg_service tg_svc_nan = {.name = "nan", .after = nan_after, .stop = nan_stop};

/* ---- the run log ------------------------------------------------------------------ */
static int runlog_after(void *self, tg_run *run) {
    (void)self;
    if (!run->logging) return TG_TRAIN_OK;
    tg_runlog *L = run->L;
    tg_train_model *m = run->m;
    tg_train_state *st = run->st;
    if (L->fd >= 0) {
        tg_runlog_add(L, "%d\t%.6f", run->step, run->loss);
        if (m->values) m->values(m->user, L, 0);
        tg_runlog_add(L, "\t%.6g\t%.6g", run->gnorm, run->lr);
        if (m->values) m->values(m->user, L, 1);
        if (st->scaler) tg_runlog_add(L, "\t%g\t%" PRId64, st->scaler->scale, st->scaler->skipped);
        tg_runlog_add(L, "\n");
        if (tg_runlog_end_row(L)) {
            fprintf(stderr, "%s: step %d: --log %s: write failed, stopping\n", run->c->prog, run->step, run->c->log);
            return TG_TRAIN_FAILED;
        }
    }
    if (tg_train_state_reserve(st, st->n_logged + 1) == 0) {
        st->logged[2 * st->n_logged] = run->loss;
        st->logged[2 * st->n_logged + 1] = m->metric ? m->metric(m->user) : 0.0;
        st->n_logged++;
    }
    return TG_TRAIN_OK;
}

const tg_service tg_svc_runlog = {.name = "runlog", .after = runlog_after};

/* ---- the model's own hooks ----------------------------------------------------------- */
/* Its before_step (attn_scale's dumps and validation loss). */
static int model_before(void *self, tg_run *run) {
    (void)self;
    char err[1024];
    tg_train_model *m = run->m;
    if (!m->before_step || m->before_step(m->user, run->step, err, sizeof err) == 0) return TG_TRAIN_OK;
    fprintf(stderr, "%s: step %d: stopping: %s\n", run->c->prog, run->step, err);
    tg_run_note(run->L, "stopped before step %d: %s", run->step, err);
    return TG_TRAIN_FAILED;
}

/* Its after_row, the contract it was checked against, at a logged step. */
static int contract_after(void *self, tg_run *run) {
    (void)self;
    tg_train_model *m = run->m;
    char err[1024];
    if (!run->logging || !m->after_row || m->after_row(m->user, run->step, err, sizeof err) == 0) return TG_TRAIN_OK;
    fprintf(stderr, "%s: step %d: the run failed: %s\n", run->c->prog, run->step, err);
    if (run->L->fd >= 0) {
        for (char *p = err; *p; p++)
            if (*p == '\n' || *p == '\t') *p = ' ';
        tg_runlog_add(run->L, "# failed: step %d: %s\n", run->step, err);
        tg_runlog_end_row(run->L);
    }
    return TG_TRAIN_CONTRACT;
}

const tg_service tg_svc_model = {.name = "model", .before = model_before, .after = contract_after};
const tg_service tg_svc_contract = {.name = "contract", .after = contract_after};

/* ---- progress ------------------------------------------------------------------------ */
static int progress_on(const tg_run *run) { return run->c->progress && isatty(2); }

static int progress_after(void *self, tg_run *run) {
    tg_svc_progress_state *s = self;
    const int step = run->step, steps = run->c->steps;
    double t = now_s() - run->t0;
    if (progress_on(run) && (t - s->last_print > 0.5 || step == steps)) {
        double rate = (step - run->start + 1) / t;
        fprintf(stderr, "\rstep %d/%d  loss %.4f  %.1f step/s  ETA %.0fs   ", step, steps, run->loss, rate,
                (steps - step) / rate);
        s->last_print = t;
    }
    return TG_TRAIN_OK;
}

static int progress_stop(void *self, tg_run *run, int status) {
    (void)self;
    if (progress_on(run)) fprintf(stderr, "\n");
    return status;
}

tg_service tg_svc_progress_make(tg_svc_progress_state *state) {
    *state = (tg_svc_progress_state){0};
    return (tg_service){.name = "progress", .after = progress_after, .stop = progress_stop, .self = state};
}
