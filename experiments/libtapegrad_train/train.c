#define _POSIX_C_SOURCE 200809L   /* open_memstream */
#include "tg_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tg_blas.h"
#include "tg_gemm_plan.h"
#include "tg_guard.h"
#include "tg_optim.h"
#include "tg_precision.h"
#include "tg_runlock.h"
#include "tg_services.h"

void tg_train_defaults(tg_train_cfg *c, const char *prog) {
    *c = (tg_train_cfg){.prog = prog, .steps = 100, .warmup = 0, .log_every = 10, .save_every = 100, .lr = 1e-3f,
                        .lr_min = 1e-4f, .clip = 1.0f, .optim = TG_OPTIM_ADAM, .beta1 = 0.9f, .beta2 = 0.95f,
                        .eps = 1e-8f, .momentum = 0.9f, .data_seed = 1, .on_nan = TG_ONNAN_STOP, .max_skipped = 0.5f,
                        .debug_nan = -1, .progress = 1};
}

static int count(const char *const *list) {
    int n = 0;
    for (; list && *list; list++) n++;
    return n;
}

int tg_train_cfg_check(const tg_train_cfg *c, char *err, size_t errlen) {
#define BAD(...) return tg_errf(err, errlen, __VA_ARGS__)
    if (!c->prog || !c->prog[0]) BAD("tg_train_cfg: prog is not set (messages and the log header name it)");
    if (c->steps < 0) BAD("tg_train_cfg: steps %d is negative", c->steps);
    if (c->log_every < 1) BAD("tg_train_cfg: log_every %d: must be at least 1", c->log_every);
    if (c->save && c->save_every < 1) BAD("tg_train_cfg: save_every %d: must be at least 1", c->save_every);
    if (c->warmup < 0 || c->warmup > c->steps) BAD("tg_train_cfg: warmup %d is outside 0..steps (%d)", c->warmup, c->steps);
    if (c->stop_at < 0 || c->stop_at > c->steps) BAD("tg_train_cfg: stop_at %d is outside 0..steps (%d)", c->stop_at, c->steps);
    if (c->stop_at && !c->save) BAD("tg_train_cfg: stop_at %d without save: the stopped run could not be resumed", c->stop_at);
    if (!(c->lr > 0 && isfinite(c->lr))) BAD("tg_train_cfg: lr %g must be finite and > 0", c->lr);
    if (!(c->lr_min >= 0 && c->lr_min <= c->lr)) BAD("tg_train_cfg: lr_min %g is outside 0..lr (%g)", c->lr_min, c->lr);
    if (!(c->clip >= 0 && isfinite(c->clip))) BAD("tg_train_cfg: clip %g must be finite and >= 0 (0: none)", c->clip);
    if (c->optim != TG_OPTIM_ADAM && c->optim != TG_OPTIM_SGD && c->optim != TG_OPTIM_ADAFACTOR)
        BAD("tg_train_cfg: optim %d is not TG_OPTIM_ADAM, TG_OPTIM_SGD or TG_OPTIM_ADAFACTOR", c->optim);
    if (!(c->adafactor_beta1 >= 0 && c->adafactor_beta1 < 1))
        BAD("tg_train_cfg: Adafactor's beta1 %g must be in [0, 1)", c->adafactor_beta1);
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
        BAD("tg_train_cfg: AdamW's betas %g, %g must be in [0, 1)", c->beta1, c->beta2);
    if (!(c->eps > 0 && isfinite(c->eps))) BAD("tg_train_cfg: AdamW's eps %g must be finite and > 0", c->eps);
    if (!(c->momentum >= 0 && c->momentum < 1)) BAD("tg_train_cfg: momentum %g must be in [0, 1)", c->momentum);
    if (!(c->weight_decay >= 0 && isfinite(c->weight_decay))) BAD("tg_train_cfg: weight_decay %g must be >= 0", c->weight_decay);
    if (c->on_nan != TG_ONNAN_STOP && c->on_nan != TG_ONNAN_SKIP) BAD("tg_train_cfg: on_nan %d is not STOP or SKIP", c->on_nan);
    if (c->precision < 0 || c->precision >= TG_N_PRECISIONS)
        BAD("tg_train_cfg: precision %d is none of TG_FP32, TG_BF16, TG_FP16", c->precision);
    if (!(c->max_skipped >= 0 && c->max_skipped <= 1)) BAD("tg_train_cfg: max_skipped %g is outside 0..1", c->max_skipped);
    if (c->n_opts < 0 || (c->n_opts > 0 && !c->opts)) BAD("tg_train_cfg: n_opts %d without opts", c->n_opts);
    if (c->n_settings < 0 || (c->n_settings > 0 && !c->settings)) BAD("tg_train_cfg: n_settings %d without settings", c->n_settings);
    if (c->n_files < 0 || (c->n_files > 0 && !c->files)) BAD("tg_train_cfg: n_files %d without files", c->n_files);
    if (c->n_services < 0 || (c->n_services > 0 && !c->services))
        BAD("tg_train_cfg: n_services %d without services", c->n_services);
    if (c->n_services > TG_TRAIN_MAX_SERVICES)
        BAD("tg_train_cfg: %d services of the program's own, at most %d", c->n_services, TG_TRAIN_MAX_SERVICES);
    if (c->n_files > TG_TRAIN_MAX_FILES)
        BAD("tg_train_cfg: %d more files, at most %d (each is locked and checked like the log)", c->n_files, TG_TRAIN_MAX_FILES);
    const int nfree = count(c->may_differ) + count(c->header_may_differ);
    if (nfree > TG_TRAIN_MAX_FREE)
        BAD("tg_train_cfg: %d may_differ and header_may_differ entries, at most %d", nfree, TG_TRAIN_MAX_FREE);
    return 0;
#undef BAD
}

static int is_flag(const tg_train_cfg *c, const char *key) {
    for (int i = 0; i < c->n_opts; i++) {
        const char *a = c->opts[i].name, *b = key;
        for (; *a && *b; a++, b++)   /* '-' in a flag is '_' in the header */
            if (*a != *b && !((*a == '-' && *b == '_') || (*a == '_' && *b == '-'))) break;
        if (!*a && !*b) return 1;
    }
    return 0;
}

/* The log's header: the configuration, the model's lines, the BLAS, the columns. */
static char *make_header(const tg_train_cfg *c, tg_train_model *m) {
    char *hdr = NULL, *mh = NULL;
    size_t len = 0, mlen = 0;
    FILE *f = open_memstream(&hdr, &len), *g = m->header ? open_memstream(&mh, &mlen) : NULL;
    if (!f || (m->header && !g)) {
        if (f) fclose(f);
        if (g) fclose(g);
        free(hdr);
        free(mh);
        return NULL;
    }
    fprintf(f, "# tapegrad %s\n", c->prog);
    tg_cli_dump_added(f, c->opts, c->n_opts, c->added);
    /* what the log tools and a resumed log need, when the program has no such flag */
    if (!is_flag(c, "steps")) fprintf(f, "# steps=%d\n", c->steps);
    if (!is_flag(c, "log_every")) fprintf(f, "# log_every=%d\n", c->log_every);
    for (int i = 0; i < c->n_settings; i++)
        if (!is_flag(c, c->settings[i].key)) fprintf(f, "# %s=%s\n", c->settings[i].key, c->settings[i].value);
    if (g) {
        m->header(m->user, g);
        fclose(g);
        fputs(mh ? mh : "", f);
    }
    if (!mh || !strstr(mh, "# n_params=")) fprintf(f, "# n_params=%zu\n", m->P->numel);
    free(mh);
    tg_blas_info bi;
    char blas[256];
    tg_blas_info_get(&bi);
    fprintf(f, "# blas=%s\n", tg_blas_info_str(&bi, blas, sizeof blas));
    char plan[TG_PLAN_NAME_BUF];
    fprintf(f, "# gemm_plan=%s\n", tg_gemm_plan_name(plan));
    fprintf(f, "# gemm_plan_mode=%s\n", tg_gemm_plan_mode());   /* the program's choice: measure, estimate, file */
    if (c->precision != TG_FP32) {   /* absent: fp32 (every log before 0.22) */
        if (!is_flag(c, "precision")) fprintf(f, "# precision=%s\n", tg_precision_name(c->precision));
        /* no bf16/fp16 product kernels yet: the operands are rounded, the products float32's */
        fprintf(f, "# precision_emulated=1\n");
    }
    if (c->precision == TG_FP16) {
        tg_loss_scale ls;
        tg_loss_scale_init(&ls);
        fprintf(f, "# loss_scale=dynamic from %g, x2 after %d finite steps, x0.5 and the step skipped on overflow\n",
                ls.scale, ls.interval);
    }
    fprintf(f, "step\tloss");
    if (m->columns) m->columns(m->user, f, 0);
    fprintf(f, "\tgrad_norm\tlr");
    if (m->columns) m->columns(m->user, f, 1);
    if (c->precision == TG_FP16) fprintf(f, "\tloss_scale\toverflow_skips");
    fprintf(f, "\n");
    if (fclose(f)) {
        free(hdr);
        return NULL;
    }
    return hdr;
}

/* One forward and backward of the first step's batch, drawn from a copy of the
 * data RNG, before the log's header, then tg_gemm_plan_measure: every product
 * of a step is then planned (measured, or read from the plan file:
 * tg_gemm_plan.h) before the header names the plan, and outside the timed loop. Parameters, optimizer and data
 * RNG are left as they were (the parameters' grads zeroed). */
typedef struct {
    tg_train_model *m;
    const tg_train_state *st;
} plan_job;

static void plan_pass(tg_ctx *ctx, void *u) {
    plan_job *j = u;
    tg_rng rng = *j->st->data_rng;
    j->m->batch(j->m->user, &rng, j->st->step);
    tg_tensor *loss = j->m->forward(ctx, j->m->user, 0);
    if (loss->requires_grad && isfinite(loss->data[0])) {
        tg_params_zero_grad(j->m->P);
        tg_backward(ctx, loss);
        tg_params_zero_grad(j->m->P);
    }
}

/* 0, or -1 when an op failed in the pass (err: its message) */
static int plan_products(tg_ctx *ctx, tg_train_model *m, const tg_train_state *st, char *err, size_t errlen) {
    plan_job j = {m, st};
    /* the header names a step's products: what the program looked up before (a gradient check, the
     * shapes of an evaluation in its start callback) stays decided, and unnamed */
    tg_gemm_plan_reset_used();
    int rc = tg_try(ctx, plan_pass, &j, err, errlen);
    if (!rc) tg_gemm_plan_measure();   /* the planning phase's end: the pass's new shapes timed and kept */
    tg_params_zero_grad(m->P);
    tg_ctx_reset(ctx);   /* the loop's context: its arena is grown already */
    return rc;
}

/* A step's forward and, but for the last step, its backward and update: run
 * under tg_try, so that an op that fails (an exec kernel that died) ends the
 * run cleanly instead of aborting it. The update is the last thing done, so a
 * failure leaves parameters and optimizer state as they were before the step. */
typedef struct {
    const tg_train_cfg *c;
    tg_train_model *m;
    tg_train_state *st;
    int step, logging, update_failed;
    tg_profile *prof;
    float lv, gnorm, lr;
} step_job;

static int update(const tg_train_cfg *c, tg_params *P, tg_adamw *adam, tg_sgd *sgd, tg_adafactor *af, tg_loss_scale *ls,
                  tg_ctx *ctx, tg_tensor *loss, int step, tg_profile *prof, float *gnorm, float *lr);

static void step_pass(tg_ctx *ctx, void *u) {
    step_job *j = u;
    tg_tensor *loss = j->m->forward(ctx, j->m->user, j->logging);
    if (j->prof) tg_profile_phase(j->prof, "forward (not in ops)");
    j->lv = loss->data[0];
    if (isfinite(j->lv) && j->step < j->c->steps)   /* the last row is an evaluation after the last update */
        j->update_failed = update(j->c, j->m->P, j->st->adam, j->st->sgd, j->st->adafactor, j->st->scaler, ctx, loss,
                                  j->step, j->prof, &j->gnorm, &j->lr) == 1;   /* 2: the scaler's skip */
}

static int update(const tg_train_cfg *c, tg_params *P, tg_adamw *adam, tg_sgd *sgd, tg_adafactor *af, tg_loss_scale *ls,
                  tg_ctx *ctx, tg_tensor *loss, int step, tg_profile *prof, float *gnorm, float *lr) {
    tg_params_zero_grad(P);
    if (prof) tg_profile_phase(prof, "zero_grad");
    if (ls) {
        if (loss->numel != 1) tg_fail(ctx, "tg_train_update_scaled: the loss must have one element, got %s", TG_SHAPE(loss));
        tg_backward_seed(ctx, loss, &ls->scale);
    } else
        tg_backward(ctx, loss);
    if (step == c->debug_nan) P->grad[0] = NAN;   /* as an overflowing backward would */
    const float scale = ls ? ls->scale : 1;
    if (ls && !tg_loss_scale_unscale(ls, P)) {   /* overflowed: fp16's skipped step, the scale halved */
        *gnorm = tg_grad_norm(P);
        *lr = 0;
        return scale > 1 ? 2 : 1;   /* at scale 1 nothing is left to back off: not finite, as without a scale */
    }
    *gnorm = tg_clip_grad_norm(P, c->clip);
    if (prof) tg_profile_phase(prof, "clip");
    *lr = tg_lr_schedule(step, c->warmup, c->steps, c->lr, c->lr_min);
    if (!isfinite(*gnorm)) {   /* nothing updated */
        *lr = 0;
        return 1;
    }
    if (c->optim == TG_OPTIM_ADAM) tg_adamw_step(adam, P, *lr);
    else if (c->optim == TG_OPTIM_ADAFACTOR) tg_adafactor_step(af, P, *lr);
    else tg_sgd_step(sgd, P, *lr);
    if (prof) tg_profile_phase(prof, "optimizer");
    return 0;
}

int tg_train_update(const tg_train_cfg *c, tg_params *P, tg_train_optim *o, tg_ctx *ctx, tg_tensor *loss, int step,
                    tg_profile *prof, float *gnorm, float *lr) {
    return update(c, P, &o->adam, &o->sgd, &o->adafactor, NULL, ctx, loss, step, prof, gnorm, lr);
}

int tg_train_update_scaled(const tg_train_cfg *c, tg_params *P, tg_train_optim *o, tg_loss_scale *ls, tg_ctx *ctx,
                           tg_tensor *loss, int step, tg_profile *prof, float *gnorm, float *lr) {
    return update(c, P, &o->adam, &o->sgd, &o->adafactor, ls, ctx, loss, step, prof, gnorm, lr);
}

/* The step itself, after the services' before hooks: the batch, the forward,
 * the update (step_pass under tg_try: an op that fails ends the run cleanly);
 * prof: NULL, or the profile the step's ops and phases go to. */
static int run_step(tg_run *run, tg_profile *prof) {
    const tg_train_cfg *c = run->c;
    const int step = run->step;
    char err[1024];
    if (c->crash_what) tg_guard_crash_step(step);
    tg_ctx_reset(run->ctx);
    tg_profile_attach(run->ctx, prof);
    if (prof) tg_profile_step_begin(prof);
    run->m->batch(run->m->user, run->st->data_rng, step);
    if (prof) tg_profile_phase(prof, "batch");
    step_job job = {.c = c, .m = run->m, .st = run->st, .step = step, .logging = run->logging, .prof = prof};
    if (tg_try(run->ctx, step_pass, &job, err, sizeof err)) {
        fprintf(stderr, "%s: step %d: an op failed, stopping: %s\n", c->prog, step, err);
        if (c->save && run->last_saved >= 0)
            fprintf(stderr, "%s: the last checkpoint (step %d) is kept\n", c->prog, run->last_saved);
        tg_run_note(run->L, "failed: step %d: %s", step, err);
        return TG_TRAIN_OP_FAILED;
    }
    run->loss = job.lv, run->gnorm = job.gnorm, run->lr = job.lr, run->update_failed = job.update_failed;
    return TG_TRAIN_OK;
}

/* The means over the last 10% of logged steps. */
static void final_means(const tg_run *run) {
    const tg_train_state *st = run->st;
    int n_total = run->c->steps / run->c->log_every + 1, tail_from = n_total - (n_total + 9) / 10, tail_n = 0;
    double tail_sum = 0, tail_metric = 0;
    if (tail_from > st->n_logged - 1) tail_from = st->n_logged - 1;   /* --log-every changed on resume */
    if (tail_from < 0) tail_from = 0;
    for (int i = tail_from; i < st->n_logged; i++) {
        tail_sum += st->logged[2 * i];
        tail_metric += st->logged[2 * i + 1];
        tail_n++;
    }
    run->r->finished = 1;
    run->r->final_loss = tail_sum / tail_n;
    run->r->final_metric = tail_metric / tail_n;
}

/* From st (fresh or resumed) to c->steps: the step between the run's
 * services (tg_services.h), the kit's and then the program's own; returns a
 * tg_train_status. */
static int loop(tg_ctx *ctx, const tg_train_cfg *c, tg_train_model *m, tg_train_state *st, tg_runlog *L,
                tg_train_result *r) {
    tg_svc_progress_state progress;
    tg_service svc[6 + TG_TRAIN_MAX_SERVICES] = {tg_svc_checkpoint, tg_svc_stop, tg_svc_nan, tg_svc_runlog,
                                                tg_svc_model, tg_svc_progress_make(&progress)};
    int n = 6;
    for (int i = 0; i < c->n_services; i++) svc[n++] = c->services[i];   /* n_services <= TG_TRAIN_MAX_SERVICES: checked */
    tg_run run;
    tg_run_init(&run, c, m, st, L, r, ctx);
    int status = tg_services_start(svc, n, &run);
    for (int step = run.start; !status && !run.ended && step <= c->steps; step++) {
        tg_run_begin_step(&run, step);
        if ((status = tg_services_before(svc, n, &run)) || run.ended) break;
        tg_profile *prof = step < c->steps ? c->profile : NULL;   /* training steps only */
        if ((status = run_step(&run, prof))) break;
        if ((status = tg_services_after(svc, n, &run))) break;
        if (prof) {
            tg_profile_phase(prof, "log");
            tg_profile_step_end(prof, ctx);
        }
    }
    status = tg_services_stop(svc, n, &run, status);
    if (status == 0 && !run.ended) final_means(&run);
    return status;
}

void tg_train_optim_init(const tg_train_cfg *c, tg_params *P, tg_train_optim *o) {
    memset(o, 0, sizeof *o);
    if (c->optim == TG_OPTIM_ADAM) tg_adamw_init(&o->adam, P, c->beta1, c->beta2, c->eps, c->weight_decay);
    else if (c->optim == TG_OPTIM_ADAFACTOR) tg_adafactor_init(&o->adafactor, P, c->adafactor_beta1, c->weight_decay);
    else tg_sgd_init(&o->sgd, P, c->momentum, c->weight_decay);
}

void tg_train_optim_free(const tg_train_cfg *c, tg_train_optim *o) {
    if (c->optim == TG_OPTIM_ADAM) tg_adamw_free(&o->adam);
    else if (c->optim == TG_OPTIM_ADAFACTOR) tg_adafactor_free(&o->adafactor);
    else tg_sgd_free(&o->sgd);
}

void tg_train_optim_attach(const tg_train_cfg *c, tg_train_optim *o, tg_train_state *st) {
    st->adam = c->optim == TG_OPTIM_ADAM ? &o->adam : NULL;
    st->sgd = c->optim == TG_OPTIM_SGD ? &o->sgd : NULL;
    st->adafactor = c->optim == TG_OPTIM_ADAFACTOR ? &o->adafactor : NULL;
}




int tg_train_load_params(const tg_train_cfg *c, tg_params *P, char *err, size_t errlen) {
    tg_train_optim o;
    tg_train_optim_init(c, P, &o);
    tg_rng data;
    tg_loss_scale ls;
    tg_loss_scale_init(&ls);
    tg_train_state st = {.P = P, .data_rng = &data, .settings = c->settings, .n_settings = c->n_settings,
                         .added = c->added, .scaler = c->precision == TG_FP16 ? &ls : NULL};
    tg_train_optim_attach(c, &o, &st);
    char changed[512];
    int rc = tg_ckpt_load(c->resume, &st, c->opts, c->n_opts, c->may_differ, changed, sizeof changed, err, errlen);
    tg_train_state_free_logged(&st);
    tg_train_optim_free(c, &o);
    return rc;
}

/* One writer per run file, for the whole run; nothing is written before every
 * check. TG_TRAIN_OK with the locks taken, or a status with the message said. */
static int take_locks(const tg_train_cfg *c, tg_runlock *locks, int *nlocks) {
    char err[1024];
    int bad = 0;
    const char *run_files[][2] = {{"--log", c->log}, {"--save", c->save}};
    for (int i = 0; i < 2 && !bad; i++) bad = tg_run_target_check(run_files[i][0], run_files[i][1], err, sizeof err);
    for (int i = 0; i < c->n_files && !bad; i++) bad = tg_run_target_check(c->files[i][0], c->files[i][1], err, sizeof err);
    for (int i = 0; i < 2 && !bad; i++)
        if (run_files[i][1]) bad = tg_runlock_take(locks, nlocks, run_files[i][0], run_files[i][1], 0, err, sizeof err);
    for (int i = 0; i < c->n_files && !bad; i++)   /* n_files <= TG_TRAIN_MAX_FILES: checked */
        if (c->files[i][1]) bad = tg_runlock_take(locks, nlocks, c->files[i][0], c->files[i][1], 0, err, sizeof err);
    if (!bad && c->resume) bad = tg_runlock_take(locks, nlocks, "--resume", c->resume, 1, err, sizeof err);
    if (bad) {
        fprintf(stderr, "%s: %s\n", c->prog, err);
        return bad == TG_RUNLOCK_BUSY ? TG_TRAIN_BUSY : TG_TRAIN_USAGE;
    }
    if (c->save && tg_ckpt_check_writable(c->save, err, sizeof err)) {
        fprintf(stderr, "%s: --save %s\n", c->prog, err);
        return TG_TRAIN_USAGE;
    }
    return TG_TRAIN_OK;
}

/* --resume: the checkpoint into st, checked against the run's settings and
 * --steps/--stop-at, and what changed said. */
static int resume_state(const tg_train_cfg *c, tg_train_state *st) {
    const char *prog = c->prog;
    char err[1024], changed[512] = "";
    if (tg_ckpt_load(c->resume, st, c->opts, c->n_opts, c->may_differ, changed, sizeof changed, err, sizeof err)) {
        fprintf(stderr, "%s: --resume %s\n", prog, err);
        return TG_TRAIN_USAGE;
    }
    if (st->step > c->steps) {
        fprintf(stderr, "%s: --resume %s is at step %d, beyond --steps %d\n", prog, c->resume, st->step, c->steps);
        return TG_TRAIN_USAGE;
    }
    if (c->stop_at && c->stop_at <= st->step) {
        fprintf(stderr, "%s: --stop-at %d is not after the checkpoint's step %d\n", prog, c->stop_at, st->step);
        return TG_TRAIN_USAGE;
    }
    fprintf(stderr, "%s: resuming %s at step %d%s%s\n", prog, c->resume, st->step, changed[0] ? "; changed: " : "",
            changed);
    if (strstr(changed, "--steps ") && !(c->lr_min == c->lr && st->step >= c->warmup))
        fprintf(stderr, "%s: note: the learning-rate schedule now ends at step %d, so from here on this "
                "is not the run a straight --steps %d would have been\n", prog, c->steps, c->steps);
    return TG_TRAIN_OK;
}

/* A fresh run does not replace another run's files, unless told to. */
static int owner_check(const tg_train_cfg *c) {
    char err[1024];
    if ((!c->resume && tg_run_owner_check("--log", c->log, NULL, c->overwrite,
                                          "continue that run with --resume CHECKPOINT (its log is kept)", err, sizeof err)) ||
        tg_run_owner_check("--save", c->save, c->resume, c->overwrite,
                           c->resume ? "to continue a run, --save names its --resume file"
                                     : "continue that run with --resume on it", err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", c->prog, err);
        return TG_TRAIN_USAGE;
    }
    return TG_TRAIN_OK;
}

/* The run log: a fresh one, or the resumed one checked against hdr (what its
 * header may change: the free flags, the BLAS line, the plan); a change of BLAS
 * kernel or product plan said, and the plan's written where it happened. */
static int open_log(const tg_train_cfg *c, const char *hdr, int step, tg_runlog *L) {
    const char *prog = c->prog;
    char err[1024], info[1024] = "", old_blas[256] = "", blas[256];
    const char *log_free[TG_TRAIN_MAX_FREE + 6];   /* what a resumed log's header may change: those flags, and the BLAS line */
    int nf = 0;
    for (const char *const *o = c->may_differ; o && *o; o++) log_free[nf++] = *o;   /* at most TG_TRAIN_MAX_FREE */
    for (const char *const *o = c->header_may_differ; o && *o; o++) log_free[nf++] = *o;
    log_free[nf++] = "blas";
    log_free[nf++] = "gemm_plan";   /* a requeued run may land on another CPU: said below, at the step */
    log_free[nf++] = "gemm_plan_mode";
    log_free[nf++] = "steps";       /* as flags they are in may_differ; written by the kit, free too */
    log_free[nf++] = "log_every";
    log_free[nf] = NULL;
    char old_plan[64] = "", plan[TG_PLAN_NAME_BUF];
    if (c->resume) {
        tg_runlog_header_value(c->log, "blas", old_blas, sizeof old_blas);
        tg_runlog_header_value(c->log, "gemm_plan", old_plan, sizeof old_plan);
    }
    int rc = c->resume ? tg_runlog_resume(L, c->log, hdr, log_free, step, info, sizeof info, err, sizeof err)
                       : tg_runlog_open(L, c->log, hdr, err, sizeof err);
    if (rc) {
        fprintf(stderr, "%s: --log %s\n", prog, err);
        return TG_TRAIN_USAGE;
    }
    if (info[0]) fprintf(stderr, "%s: %s\n", prog, info);
    tg_blas_info bi;
    tg_blas_info_get(&bi);
    if (old_blas[0] && !tg_blas_same_kernel(old_blas, tg_blas_info_str(&bi, blas, sizeof blas)))
        fprintf(stderr, "%s: note: the log was started with %s, this run has %s: the resumed run may not "
                "be bit-identical to one made in one go\n", prog, old_blas, blas);
    /* the plan is part of the rounding: a change is written where it happened */
    tg_gemm_plan_name(plan);
    if (c->resume && strcmp(old_plan, plan) != 0) {
        fprintf(stderr, "%s: note: the log was made with product plan %s, this run has %s (another CPU or "
                "plan file): it goes on, and from step %d is not bit-identical to a run made in one go\n", prog,
                old_plan[0] ? old_plan : "(none named)", plan, step);
        tg_run_note(L, "gemm_plan changed at step %d: %s -> %s", step, old_plan[0] ? old_plan : "(none named)", plan);
    }
    return TG_TRAIN_OK;
}

int tg_train(const tg_train_cfg *c, tg_train_model *m, tg_train_result *r) {
    const char *prog = c->prog;
    char err[1024];
    *r = (tg_train_result){0};
    if (tg_train_cfg_check(c, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", prog ? prog : "tg_train", err);
        return TG_TRAIN_USAGE;
    }
    /* A stop signal is held from before the first lock file is made until after the last is removed:
     * one arriving as the run starts waits for the loop's first check (a clean stop), one arriving as
     * it ends is moot; the default death in between would leave lock files behind. */
    tg_guard_install();
    tg_runlock locks[TG_TRAIN_MAX_FILES + 3];
    int nlocks = 0, status = take_locks(c, locks, &nlocks);
    if (status) {
        tg_runlock_release(locks, nlocks);
        tg_guard_restore();
        return status;
    }
    tg_rng data_rng;
    tg_rng_seed(&data_rng, c->data_seed, 0xda7a);
    tg_train_optim o;
    tg_train_optim_init(c, m->P, &o);
    tg_train_state st = {.P = m->P, .data_rng = &data_rng, .settings = c->settings, .n_settings = c->n_settings,
                         .added = c->added};
    tg_train_optim_attach(c, &o, &st);
    tg_loss_scale ls;
    tg_loss_scale_init(&ls);
    if (c->precision == TG_FP16) st.scaler = &ls;
    tg_runlog L = {.fd = -1};
    tg_ctx ctx;   /* every step's, the planning pass's first */
    tg_ctx_init(&ctx, 0);
    tg_ctx_set_precision(&ctx, c->precision);
    char *hdr = NULL;
    if (tg_train_state_reserve(&st, c->steps / c->log_every + 2)) {
        fprintf(stderr, "%s: out of memory\n", prog);
        status = TG_TRAIN_FAILED;
        goto done;
    }
    /* every check before anything is written: the checkpoint, then the log */
    if (c->resume && (status = resume_state(c, &st))) goto done;
    r->start_step = r->step = st.step;
    if ((status = owner_check(c))) goto done;
    if (m->start && m->start(m->user, st.step, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", prog, err);
        status = TG_TRAIN_USAGE;
        goto done;
    }
    if (plan_products(&ctx, m, &st, err, sizeof err)) {
        fprintf(stderr, "%s: an op failed before the first step (nothing was written): %s\n", prog, err);
        status = TG_TRAIN_OP_FAILED;
        goto done;
    }
    if (!(hdr = make_header(c, m))) {
        fprintf(stderr, "%s: out of memory\n", prog);
        status = TG_TRAIN_FAILED;
        goto done;
    }
    if (c->log && (status = open_log(c, hdr, st.step, &L))) goto done;

    if (c->crash_what) tg_guard_crash_arm(L.fd, c->crash_what);
    status = loop(&ctx, c, m, &st, &L, r);
    if (c->crash_what) tg_guard_crash_disarm();
    if (L.fd >= 0 && tg_runlog_close(&L)) {
        fprintf(stderr, "%s: --log %s: write failed\n", prog, c->log);
        status = status ? status : TG_TRAIN_FAILED;
    }
done:
    tg_ctx_free(&ctx);
    tg_runlog_close(&L);
    tg_runlock_release(locks, nlocks);
    tg_guard_restore();
    free(hdr);
    tg_train_state_free_logged(&st);
    tg_train_optim_free(c, &o);
    return status;
}

int tg_train_exit_status(int status, const tg_train_result *r) {
    if (status == TG_TRAIN_STOPPED) return TG_EXIT_SIGNAL + (r && r->signal > 0 ? r->signal : 0);
    if (status == TG_TRAIN_OP_FAILED) return TG_EXIT_OP;
    return status >= TG_TRAIN_OK && status <= TG_TRAIN_CONTRACT ? status : TG_EXIT_FAILED;   /* the same numbers */
}
