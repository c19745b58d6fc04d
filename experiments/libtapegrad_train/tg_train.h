/* The kit's training loop: any model that can build a loss gets checkpoints,
 * exact resume, one-writer locks, the NaN guard, clean stops on signals and a
 * run log, the way attn_scale trains the toy model (attn_scale is one user).
 *
 *   tg_train_model m = {.P = &params, .user = &me, .batch = my_batch, .forward = my_forward};
 *   tg_train_cfg c;
 *   tg_train_defaults(&c, "my_prog");
 *   c.steps = 1000, c.lr = 1e-3f, c.log = "run.tsv", c.save = "run.st";
 *   c.opts = my_flags, c.n_opts = n;          (the settings recorded and checked on resume)
 *   tg_train_result r;
 *   int status = tg_train(&c, &m, &r);        (0, or an exit status: see below)
 *
 * A step: m.batch draws the step's data from the data RNG (the only randomness
 * of the loop: it is saved in checkpoints, so a resumed run draws the same
 * batches; m.batch must draw from nothing else: before the header, the loop
 * runs one forward and backward on a batch drawn from a copy of the RNG, so
 * that every matrix product is planned before the header names the plan); m.forward builds the loss on a context the loop resets; then, but
 * for the last step (an evaluation after the last update), backward, global
 * grad-norm clipping, the warm-up + cosine learning rate and an AdamW, SGD or
 * Adafactor update. Step s is logged when s % log_every == 0 and at the last step; a
 * checkpoint at step s holds the state after s updates (tg_checkpoint.h).
 *
 * The log (docs/logs.md): '#' lines "tapegrad PROG", every flag of opts
 * (tg_cli_dump), "steps" and "log_every" unless they are flags, every setting
 * whose key is not a flag, what m.header writes,
 * "n_params" unless m.header writes it, "blas", "gemm_plan" (the product plan's
 * name, tg_gemm_plan.h); then the columns step, loss,
 * m.columns(part 0), grad_norm, lr, m.columns(part 1); one row per logged step.
 *
 * tg_train returns a tg_train_status; programs exit with TG_EXIT_* (tg_train_exit_status),
 * one meaning each (docs/robustness.md). */
#ifndef TG_TRAIN_H
#define TG_TRAIN_H
#include <stdint.h>
#include <stdio.h>

#include "tg_checkpoint.h"
#include "tg_cli.h"
#include "tg_core.h"
#include "tg_optim.h"
#include "tg_profile.h"
#include "tg_runlog.h"

/* What tg_train returns: the library's own codes, not a process's exit status.
 * A program maps them with tg_train_exit_status (or its own rule). */
typedef enum {
    TG_TRAIN_OK = 0,          /* done, or stopped by stop_at with a checkpoint */
    TG_TRAIN_FAILED,          /* the run failed: a file could not be written, out of memory */
    TG_TRAIN_USAGE,           /* bad configuration or input, before anything was written: a flag, a
                                 checkpoint of another run, a target that is not a regular file */
    TG_TRAIN_NONFINITE,       /* a non-finite loss or gradient, with on_nan = stop; or too many skipped */
    TG_TRAIN_BUSY,            /* a file of the run is in use by another process (its pid in the message) */
    TG_TRAIN_CONTRACT,        /* the model broke a rule it was checked against while training (after_row) */
    TG_TRAIN_STOPPED,         /* stopped by a signal (tg_train_result.signal), checkpoint written */
    TG_TRAIN_OP_FAILED        /* an op failed (tg_fail) in a step or in the planning pass before the header: an
                                 exec kernel that died, hung or answered wrongly, the arena out of memory. In a
                                 step: "# failed: step N: MESSAGE" the log's last line, no checkpoint after it,
                                 parameters as before the step; before the header: nothing written */
} tg_train_status;

/* The programs' exit statuses, one meaning each (docs/robustness.md#exit-statuses):
 * what tg_train_exit_status maps tg_train's codes to. */
enum {
    TG_EXIT_OK = 0,          /* done, or stopped by stop_at with a checkpoint */
    TG_EXIT_FAILED = 1,      /* the run failed: a file could not be written, out of memory */
    TG_EXIT_USAGE = 2,       /* bad usage or input, before anything was written: a flag, a checkpoint of
                                another run, a target that is not a regular file, a plugin that will not load */
    TG_EXIT_NONFINITE = 3,   /* a non-finite loss or gradient, with on_nan = stop */
    TG_EXIT_BUSY = 4,        /* a file of the run is in use by another process (its pid in the message) */
    TG_EXIT_CONTRACT = 5,    /* the model broke a rule it was checked against while training (after_row):
                                attn_scale: a plugin's weights on keys the mask hides */
    TG_EXIT_OP = 6,          /* an op failed in a step (TG_TRAIN_OP_FAILED): attn_scale: the attention kernel
                                (an exec kernel died, hung, wrote garbage or the wrong shape, refused a call) */
    TG_EXIT_SIGNAL = 128     /* + n: stopped by signal n (SIGINT, SIGTERM, SIGHUP), checkpoint written */
};

enum { TG_OPTIM_ADAM, TG_OPTIM_SGD, TG_OPTIM_ADAFACTOR };   /* ADAFACTOR since 0.24 */
enum { TG_ONNAN_STOP, TG_ONNAN_SKIP };

typedef struct tg_train_model {
    tg_params *P;          /* allocated and initialised */
    void *user;
    /* Draws step's batch (the model keeps it) from rng. */
    void (*batch)(void *user, tg_rng *rng, int step);
    /* The scalar loss of that batch, built on ctx. logging: 1 when the step's
     * row is logged (compute what values() will write). */
    tg_tensor *(*forward)(tg_ctx *ctx, void *user, int logging);
    /* Optional. Log columns and values, each after a tab; part 0 between loss and
     * grad_norm, part 1 after lr. */
    void (*columns)(void *user, FILE *f, int part);
    void (*values)(void *user, tg_runlog *L, int part);
    /* Optional: a number kept with the loss per logged row (checkpointed), whose
     * mean over the last 10% of rows is tg_train_result.final_metric. */
    double (*metric)(void *user);
    /* Optional: more '#' lines of the header ("# key=value\n"). */
    void (*header)(void *user, FILE *f);
    /* Optional: after a resume was loaded (step: where the run starts), before the
     * planning pass and the log; 0, or non-zero (exit 2) with a message in err.
     * Products the run meets besides a step's (an evaluation) looked up here are
     * timed with the step's (tg_gemm_plan.h); the log's gemm_plan names the
     * step's alone. */
    int (*start)(void *user, int step, char *err, size_t errlen);
    /* Optional: at each step before its batch (attn_scale's attention dumps);
     * 0, or non-zero (the run stops, TG_TRAIN_FAILED) with a message in err. */
    int (*before_step)(void *user, int step, char *err, size_t errlen);
    /* Optional: after a logged step's row is written; 0, or non-zero: the run
     * fails at once (TG_TRAIN_CONTRACT, "# failed: MESSAGE" the log's last
     * line, no checkpoint written after it) with a message in err. */
    int (*after_row)(void *user, int step, char *err, size_t errlen);
} tg_train_model;

typedef struct tg_train_cfg {
    const char *prog;          /* messages start with "PROG: "; the header names it */
    int steps, warmup, log_every, save_every, stop_at;
    float lr, lr_min, clip;    /* peak and final learning rate; clip 0: none */
    int optim;                 /* TG_OPTIM_ADAM, TG_OPTIM_SGD or TG_OPTIM_ADAFACTOR (its rate: lr as ρ) */
    float beta1, beta2, eps;   /* AdamW's (defaults 0.9, 0.95, 1e-8) */
    float momentum, weight_decay;
    uint64_t data_seed;        /* the data RNG: PCG32 (data_seed, 0xda7a) */
    int on_nan;                /* TG_ONNAN_STOP (exit 3) or TG_ONNAN_SKIP (no update that step) */
    float max_skipped;         /* SKIP: a run that skipped more than this share of its steps (default 0.5), or
                                  ends on a non-finite loss, fails (exit 3) */
    int debug_nan;             /* testing aid: poison a gradient at this step (-1: never) */
    const char *log, *save, *resume;   /* NULL: none */
    int overwrite;             /* a fresh run may replace another run's log or checkpoint */
    int progress;              /* 1: a progress line on stderr when it is a terminal */
    /* The run's identity: opts (every flag but paths and switches) and settings
     * are saved in checkpoints and must match on resume, but for the flags named
     * in may_differ (NULL-terminated). */
    const tg_cli_opt *opts;
    int n_opts;
    const char *const *may_differ;
    const char *const *header_may_differ;   /* more '#' keys of the log (not flags) a resumed run may change */
    const char *const *added;    /* flags added after runs were recorded, "name=value" (tg_cli_added_value) */
    const tg_setting *settings;
    int n_settings;
    /* More files the run writes, locked and checked like the log: pairs
     * {flag, path} (path NULL: none), n_files of them. */
    const char *const (*files)[2];
    int n_files;
    /* NULL, or a profile (tg_profile.h, initialised) that the loop fills: each
     * training step's ops, and its phases "batch", "forward (not in ops)",
     * "zero_grad", "clip", "optimizer", "log"; the caller prints it. */
    tg_profile *profile;
    /* NULL, or what runs in-process that may crash (attn_scale: "attention plugin
     * FILE:SYMBOL sha256 ..."): while training, a crash writes "# crashed: SIGNAL at
     * step N: crash_what" to the log and the process dies of the signal (tg_guard.h). */
    const char *crash_what;
    /* Since 0.20: services of the program's own (tg_services.h), run after the kit's, in this
     * order, each with its own state (self); at most TG_TRAIN_MAX_SERVICES. */
    const struct tg_service *services;
    int n_services;
    /* Since 0.22: the precision of the products (tg_precision.h; tg_ctx_set_precision on the
     * run's context): TG_FP32 (0, the default), TG_BF16, or TG_FP16 with a dynamic loss scale
     * (tg_loss_scale: checkpointed; the log's loss_scale and overflow_skips columns). */
    int precision;
    /* Since 0.24: Adafactor's β1 (0, T5's and the default: no first moment kept); its other constants
     * are T5's (tg_optim.h) */
    float adafactor_beta1;
} tg_train_cfg;
#define TG_TRAIN_MAX_SERVICES 16

typedef struct tg_train_result {
    int start_step, step;      /* where the run started and stopped */
    int finished;              /* 1: ran to cfg.steps (final_* are set) */
    double final_loss, final_metric;   /* means over the last 10% of logged rows */
    double seconds;
    int skipped;               /* steps skipped for non-finite values */
    int signal;                /* TG_TRAIN_STOPPED: the signal that stopped the run, else 0 */
} tg_train_result;

/* A program's exit status for tg_train's code: TG_EXIT_* (the same number for
 * OK to CONTRACT), TG_EXIT_OP for TG_TRAIN_OP_FAILED, TG_EXIT_SIGNAL + r->signal
 * for TG_TRAIN_STOPPED. */
int tg_train_exit_status(int status, const tg_train_result *r);

void tg_train_defaults(tg_train_cfg *c, const char *prog);
/* Every limit of c, before anything runs: 0, or -1 with a message naming the field and its value
 * (log_every 0, stop_at without save, more than TG_TRAIN_MAX_FILES files, more than
 * TG_TRAIN_MAX_FREE may_differ and header_may_differ entries, betas outside [0, 1), ...). tg_train
 * calls it first (TG_TRAIN_USAGE); nothing is truncated silently. */
#define TG_TRAIN_MAX_FILES 16
#define TG_TRAIN_MAX_FREE 36
int tg_train_cfg_check(const tg_train_cfg *c, char *err, size_t errlen);
/* The step, for a loop of your own (KANN's kann_train_fnn1, llm.c's inline loop): tg_train is
 * this function with the checkpoints, log, locks, signals and NaN guard around it.
 *   tg_train_optim o;
 *   tg_train_optim_init(&c, &P, &o);                           (the optimizer c names)
 *   for (int step = 0; step < c.steps; step++) {
 *       tg_ctx_reset(&ctx);
 *       tg_tensor *loss = my_forward(&ctx, ...);
 *       float gnorm, lr;
 *       if (tg_train_update(&c, &P, &o, &ctx, loss, step, NULL, &gnorm, &lr)) ...   (non-finite)
 *   }
 *   tg_train_optim_free(&c, &o);
 * tg_train_update: zero the grads, backward, global grad-norm clipping (c->clip), the rate of step
 * (warm-up + cosine of c), and the update of the optimizer c names. *gnorm and *lr say what was
 * used. Returns 0, or 1 when the gradient norm is not finite: nothing updated, *lr = 0. prof:
 * NULL, or a profile to mark the phases in.
 * tg_train_update_scaled (since 0.22), for fp16: the backward seeded with ls->scale, the grads
 * unscaled (tg_loss_scale_unscale) before clipping; returns 2 when they overflowed: nothing
 * updated, *lr = 0, the scale halved (a step fp16 training skips by design, not a failure). ls
 * NULL: tg_train_update.
 * tg_train_optim_attach: points st's adam, sgd or adafactor at o's (the one c names; the others
 * NULL), for a checkpoint (tg_checkpoint.h).
 * Since 0.24 the optimizer is one tg_train_optim; until 0.23 a tg_adamw and a tg_sgd were passed
 * apart (tg_train_optim_init(&c, &P, &adam, &sgd)): o.adam and o.sgd are those. */
typedef struct tg_train_optim {
    tg_adamw adam;
    tg_sgd sgd;
    tg_adafactor adafactor;
} tg_train_optim;
void tg_train_optim_init(const tg_train_cfg *c, tg_params *P, tg_train_optim *o);
void tg_train_optim_free(const tg_train_cfg *c, tg_train_optim *o);
void tg_train_optim_attach(const tg_train_cfg *c, tg_train_optim *o, tg_train_state *st);
int tg_train_update(const tg_train_cfg *c, tg_params *P, tg_train_optim *o, tg_ctx *ctx, tg_tensor *loss, int step,
                    tg_profile *prof, float *gnorm, float *lr);
int tg_train_update_scaled(const tg_train_cfg *c, tg_params *P, tg_train_optim *o, tg_loss_scale *ls, tg_ctx *ctx,
                           tg_tensor *loss, int step, tg_profile *prof, float *gnorm, float *lr);

/* The parameters of the checkpoint c->resume into P (declared and allocated as
 * for training), checked against c's settings as a resume is; the optimizer
 * state and data RNG in it are read and dropped (for inference: sampling, a
 * probe). 0, or -1 with a message in err; P is untouched on error. */
int tg_train_load_params(const tg_train_cfg *c, tg_params *P, char *err, size_t errlen);

/* Checks, locks, resumes, trains, logs and saves; returns a tg_train_status. Stopped by a signal
 * it returns TG_TRAIN_STOPPED with r->signal = n, the checkpoint written and the signal handlers
 * restored: a program ends then with tg_guard_reraise(n) (tg_guard.h). The handlers hold from
 * before the first lock file is made until after the last is removed: a signal as the run starts
 * stops it at its first step, one after its last step is dropped (the run is done). With on_nan =
 * TG_ONNAN_SKIP a run that skipped more than max_skipped of its updates, or ends on a non-finite
 * loss, did not train: TG_TRAIN_NONFINITE. */
int tg_train(const tg_train_cfg *c, tg_train_model *m, tg_train_result *r);   /* a tg_train_status */

#endif
