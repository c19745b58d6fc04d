/* attn_scale: train the toy transformer with one attention-scale mode and log
 * loss and per-head attention health. The √d_k experiment in one binary:
 *   attn_scale --scale none --log runs/none.tsv     (the forgotten scale)
 *   attn_scale --scale sqrt --log runs/sqrt.tsv     (the baseline)
 * See docs/experiment.md for the log format and docs/results.md for what the defaults reproduce. */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime, isatty, open_memstream */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attn_cfg.h"
#include "attn_dump.h"
#include "checkpoint.h"
#include "guard.h"
#include "model.h"
#include "runlog.h"
#include "runlock.h"
#include "tasks.h"
#include "tg_blas.h"
#include "tg_ops.h"
#include "tg_optim.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void log_header(FILE *f, const model_cfg *mc) {
    fprintf(f, "step\tloss\tent_mean");
    for (int l = 0; l < mc->layers; l++)
        for (int h = 0; h < mc->heads; h++) fprintf(f, "\tent_l%d_h%d", l, h);
    for (int l = 0; l < mc->layers; l++) fprintf(f, "\tmaxlogit_l%d", l);
    for (int l = 0; l < mc->layers; l++) fprintf(f, "\tsat_l%d", l);
    for (int l = 0; l < mc->layers; l++)
        for (int h = 0; h < mc->heads; h++) fprintf(f, "\tnent_l%d_h%d", l, h);
    fprintf(f, "\tgrad_norm\tlr");
    for (int l = 0; l < mc->layers; l++)
        for (int h = 0; h < mc->heads; h++) fprintf(f, "\tscale_l%d_h%d", l, h);
    fprintf(f, "\n");
}

static void log_row(runlog *L, int step, float loss, const model *m, double uniform, float gnorm, float lr) {
    const model_cfg *mc = &m->cfg;
    int nh = mc->layers * mc->heads;
    double mean = 0;
    for (int i = 0; i < nh; i++) mean += m->ent[i];
    runlog_add(L, "%d\t%.6f\t%.6f", step, loss, mean / nh);
    for (int i = 0; i < nh; i++) runlog_add(L, "\t%.6f", m->ent[i]);
    for (int l = 0; l < mc->layers; l++) {
        float mx = -INFINITY;
        for (int h = 0; h < mc->heads; h++)
            if (m->maxlogit[l * mc->heads + h] > mx) mx = m->maxlogit[l * mc->heads + h];
        runlog_add(L, "\t%.4f", mx);
    }
    for (int l = 0; l < mc->layers; l++) {
        double s = 0;
        for (int h = 0; h < mc->heads; h++) s += m->sat[l * mc->heads + h];
        runlog_add(L, "\t%.4f", s / mc->heads);
    }
    for (int i = 0; i < nh; i++) runlog_add(L, "\t%.6f", m->ent[i] / uniform);
    runlog_add(L, "\t%.6g\t%.6g", gnorm, lr);
    for (int i = 0; i < nh; i++) runlog_add(L, "\t%.6g", m->logit_scale[i]);   /* what the forward used */
    runlog_add(L, "\n");
}

/* The log's header: the configuration, the reference values, the columns. */
static char *make_header(const cli_opt *opts, int nopt, const model_cfg *mc, const model *m, task_refs refs,
                         double uniform) {
    char *hdr = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&hdr, &len);
    if (!f) return NULL;
    fprintf(f, "# tapegrad attn_scale\n");
    cli_dump(f, opts, nopt);
    fprintf(f, "# attn_scale_value=%.9g\n", model_scale(mc));
    fprintf(f, "# n_params=%zu\n", m->P.numel);
    fprintf(f, "# ref_loss_optimal=%.6f\n# ref_loss_context_free=%.6f\n", refs.optimal, refs.context_free);
    fprintf(f, "# ref_entropy_uniform=%.6f\n", uniform);
    tg_blas_info bi;
    char blas[256];
    tg_blas_info_get(&bi);
    fprintf(f, "# blas=%s\n", tg_blas_info_str(&bi, blas, sizeof blas));
    log_header(f, mc);
    if (fclose(f)) {
        free(hdr);
        return NULL;
    }
    return hdr;
}

/* A '#' line after the rows, saying why the run ended early. */
static void log_note(runlog *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_note(runlog *L, const char *fmt, ...) {
    if (L->fd < 0) return;
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    for (char *p = line; *p; p++)
        if (*p == '\n' || *p == '\t') *p = ' ';
    runlog_add(L, "# %s\n", line);
    runlog_end_row(L);
}

/* Trains from st (fresh or resumed) to c->steps; returns the exit status. */
static int train(const attn_cfg *c, const cli_opt *opts, int nopt, train_state *st, runlog *L, attn_dump *dump,
                 double uniform, task_refs refs) {
    model *m = st->m;
    const model_cfg *mc = &m->cfg;
    task_cfg tc = attn_cfg_task(c);
    int *tokens = malloc(sizeof(int) * (size_t)c->batch * c->seq_len);
    int *targets = malloc(sizeof(int) * (size_t)c->batch * c->seq_len);
    if (!tokens || !targets) {
        fprintf(stderr, "attn_scale: out of memory for the batch\n");
        free(tokens);
        free(targets);
        return 1;
    }
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    char err[1024], why[1024];
    int tty = isatty(2), status = 0, stopped = 0, skipped = 0;
    double t0 = now_s(), last_print = 0;
    const int start = st->step;
    int last_saved = c->resume && c->save && strcmp(c->resume, c->save) == 0 ? start : -1;
    for (int step = start; step <= c->steps; step++) {
        /* a checkpoint at step s: s updates done, the data RNG ready for batch s */
        int sig = guard_signal();
        int stop_here = sig || (c->stop_at && step == c->stop_at);
        if (c->save && step != last_saved &&
            (stop_here || step == c->steps || (step > start && step % c->save_every == 0))) {
            st->step = step;
            runlog_sync(L);   /* the rows the checkpoint has seen are on disk first */
            if (ckpt_save(c->save, st, opts, nopt, err, sizeof err)) {
                fprintf(stderr, "attn_scale: step %d: checkpoint not written, stopping: %s\n", step, err);
                log_note(L, "stopped before step %d: checkpoint not written: %s", step, err);
                status = 1;
                break;
            }
            last_saved = step;
        }
        if (sig) {
            fprintf(stderr, "attn_scale: %s before step %d: %s\n", guard_signal_name(sig), step,
                    c->save ? "checkpoint written, continue with --resume" : "no --save: only the log is kept");
            log_note(L, "interrupted by %s before step %d", guard_signal_name(sig), step);
            status = 128 + sig;
            break;
        }
        if (stop_here) {
            fprintf(stderr, "attn_scale: stopped before step %d of %d (--stop-at); continue with --resume %s\n", step,
                    c->steps, c->save);
            stopped = 1;
            break;
        }

        /* the probe's maps of the model that logs this row, on their own context */
        if (dump && attn_dump_step(dump, m, step, err, sizeof err)) {
            fprintf(stderr, "attn_scale: step %d: --dump-attn-file not written, stopping: %s\n", step, err);
            log_note(L, "stopped before step %d: attention maps not written: %s", step, err);
            status = 1;
            break;
        }

        int logging = step % c->log_every == 0 || step == c->steps;
        tg_ctx_reset(&ctx);
        task_batch(&tc, st->data_rng, c->batch, tokens, targets);
        tg_tensor *loss = model_forward(m, &ctx, tokens, targets, c->batch, logging);
        float lv = loss->data[0], gnorm = 0, lr = 0;
        const char *bad = NULL;
        if (!isfinite(lv)) {
            guard_forward(&ctx, &m->P, why, sizeof why);
            bad = "loss";
        } else if (step < c->steps) {   /* the last row is an evaluation after the last update */
            tg_params_zero_grad(&m->P);
            tg_backward(&ctx, loss);
            if (step == c->debug_nan) m->P.grad[0] = NAN;   /* --debug-nan: as an overflowing backward would */
            gnorm = tg_clip_grad_norm(&m->P, c->clip);
            lr = tg_lr_schedule(step, c->warmup, c->steps, c->lr, c->lr_min);
            if (!isfinite(gnorm)) {
                guard_backward(&ctx, &m->P, why, sizeof why);
                bad = "gradient norm";
                lr = 0;
            } else if (st->adam) tg_adamw_step(st->adam, &m->P, lr);
            else tg_sgd_step(st->sgd, &m->P, lr);
        }
        if (bad) {
            fprintf(stderr, "attn_scale: step %d: non-finite %s (%g): %s\n", step, bad, bad[0] == 'l' ? lv : gnorm, why);
            if (c->on_nan == ONNAN_STOP) {
                fprintf(stderr, "attn_scale: stopping (--on-nan stop)%s\n",
                        c->save && last_saved >= 0 ? "; the last checkpoint is kept" : "");
                log_note(L, "stopped at step %d: non-finite %s: %s", step, bad, why);
                status = 3;
                break;
            }
            skipped++;   /* --on-nan skip: parameters and optimizer state stay as they were */
        }
        if (logging) {
            if (L->fd >= 0) {
                log_row(L, step, lv, m, uniform, gnorm, lr);
                if (runlog_end_row(L)) {
                    fprintf(stderr, "attn_scale: step %d: --log %s: write failed, stopping\n", step, c->log);
                    status = 1;
                    break;
                }
            }
            double e = 0;
            for (int i = 0; i < mc->layers * mc->heads; i++) e += m->ent[i];
            if (train_state_reserve(st, st->n_logged + 1) == 0) {
                st->logged[2 * st->n_logged] = lv;
                st->logged[2 * st->n_logged + 1] = e / (mc->layers * mc->heads);
                st->n_logged++;
            }
        }
        double t = now_s() - t0;
        if (tty && (t - last_print > 0.5 || step == c->steps)) {
            double rate = (step - start + 1) / t;
            fprintf(stderr, "\rstep %d/%d  loss %.4f  %.1f step/s  ETA %.0fs   ", step, c->steps, lv, rate,
                    (c->steps - step) / rate);
            last_print = t;
        }
    }
    if (tty) fprintf(stderr, "\n");
    double secs = now_s() - t0;
    if (skipped) fprintf(stderr, "attn_scale: %d steps skipped for non-finite values (--on-nan skip)\n", skipped);
    if (status == 0 && !stopped) {
        /* final loss: the mean over the last 10% of logged steps */
        int n_total = c->steps / c->log_every + 1, tail_from = n_total - (n_total + 9) / 10, tail_n = 0;
        double tail_sum = 0, tail_ent = 0;
        if (tail_from > st->n_logged - 1) tail_from = st->n_logged - 1;   /* --log-every changed on resume */
        if (tail_from < 0) tail_from = 0;
        for (int i = tail_from; i < st->n_logged; i++) {
            tail_sum += st->logged[2 * i];
            tail_ent += st->logged[2 * i + 1];
            tail_n++;
        }
        printf("task=%s scale=%s d_head=%d seed=%d steps=%d final_loss=%.4f final_ent=%.4f uniform_ent=%.4f "
               "ref_context_free=%.4f seconds=%.1f\n",
               task_names[c->task], scale_names[c->scale], c->d_head, c->seed, c->steps, tail_sum / tail_n,
               tail_ent / tail_n, uniform, refs.context_free, secs);
    }
    free(tokens);
    free(targets);
    tg_ctx_free(&ctx);
    return status;
}

int main(int argc, char **argv) {
    if (tg_blas_ensure("attn_scale", argv)) return 1;   /* first: it may restart the program */
    attn_cfg c;
    attn_cfg_defaults(&c);
    cli_opt opts[ATTN_MAX_OPTS];
    int seen[ATTN_MAX_OPTS];
    const int nopt = attn_cfg_options(&c, opts);
    const char *summary = "Train a toy transformer with one attention-scale mode; log loss and per-head attention entropy.";
    char err[1024];
    int rc = cli_parse(opts, nopt, argc, argv, err, sizeof err, seen);
    if (rc == CLI_HELP) {
        cli_usage(stdout, "attn_scale", summary, opts, nopt);
        return 0;
    }
    if (rc != CLI_OK) {
        fprintf(stderr, "attn_scale: %s\n", err);
        cli_usage(stderr, "attn_scale", summary, opts, nopt);
        return 2;
    }
    if (attn_cfg_check(&c, opts, nopt, seen, err, sizeof err)) {
        fprintf(stderr, "attn_scale: %s\n", err);
        return 2;
    }
    if (c.check) return 0;   /* --check: these flags would start; no file read or written */
    /* one writer per run file, for the whole run; then nothing is written before every check */
    runlock locks[4];
    int nlocks = 0;
    if (run_target_check("--log", c.log, err, sizeof err) || run_target_check("--save", c.save, err, sizeof err) ||
        run_target_check("--dump-attn-file", c.dump_attn_file, err, sizeof err) ||
        (c.log && runlock_take(locks, &nlocks, "--log", c.log, 0, err, sizeof err)) ||
        (c.save && runlock_take(locks, &nlocks, "--save", c.save, 0, err, sizeof err)) ||
        (c.dump_attn_file && runlock_take(locks, &nlocks, "--dump-attn-file", c.dump_attn_file, 0, err, sizeof err)) ||
        (c.resume && runlock_take(locks, &nlocks, "--resume", c.resume, 1, err, sizeof err))) {
        fprintf(stderr, "attn_scale: %s\n", err);
        runlock_release(locks, nlocks);
        return 2;
    }
    if (c.save && ckpt_check_writable(c.save, err, sizeof err)) {
        fprintf(stderr, "attn_scale: --save %s\n", err);
        runlock_release(locks, nlocks);
        return 2;
    }
    openblas_set_num_threads(1);   /* its threaded sgemm mallocs per call; the ops use OpenMP instead */
    omp_set_num_threads(c.threads);

    model_cfg mc = attn_cfg_model(&c);
    model m;
    model_init(&m, &mc, (uint64_t)c.seed);
    tg_rng data_rng;
    tg_rng_seed(&data_rng, (uint64_t)c.seed, 0xda7a);
    task_cfg tc = attn_cfg_task(&c);
    task_refs refs = task_reference(&tc);
    double uniform = tg_attn_uniform_entropy(c.seq_len, 1);
    tg_adamw adam;
    tg_sgd sgd;
    if (c.optim == OPT_ADAM) tg_adamw_init(&adam, &m.P, 0.9f, 0.95f, 1e-8f, c.weight_decay);
    else tg_sgd_init(&sgd, &m.P, c.momentum, c.weight_decay);
    train_state st = {.m = &m, .adam = c.optim == OPT_ADAM ? &adam : NULL, .sgd = c.optim == OPT_SGD ? &sgd : NULL,
                      .data_rng = &data_rng};
    runlog L = {.fd = -1};
    attn_dump dump = {0};
    char *hdr = NULL;
    int status = 0;
    if (train_state_reserve(&st, c.steps / c.log_every + 2)) {
        fprintf(stderr, "attn_scale: out of memory\n");
        status = 1;
        goto done;
    }

    /* every check before anything is written: the checkpoint, then the log */
    if (c.resume) {
        char changed[512] = "";
        if (ckpt_load(c.resume, &st, opts, nopt, attn_run_options, changed, sizeof changed, err, sizeof err)) {
            fprintf(stderr, "attn_scale: --resume %s\n", err);
            status = 2;
            goto done;
        }
        if (st.step > c.steps) {
            fprintf(stderr, "attn_scale: --resume %s is at step %d, beyond --steps %d\n", c.resume, st.step, c.steps);
            status = 2;
            goto done;
        }
        if (c.stop_at && c.stop_at <= st.step) {
            fprintf(stderr, "attn_scale: --stop-at %d is not after the checkpoint's step %d\n", c.stop_at, st.step);
            status = 2;
            goto done;
        }
        fprintf(stderr, "attn_scale: resuming %s at step %d%s%s\n", c.resume, st.step, changed[0] ? "; changed: " : "",
                changed);
        if (strstr(changed, "--steps ") && !(c.lr_min == c.lr && st.step >= c.warmup))
            fprintf(stderr, "attn_scale: note: the learning-rate schedule now ends at step %d, so from here on this "
                    "is not the run a straight --steps %d would have been\n", c.steps, c.steps);
    }
    /* a fresh run does not replace another run's files, unless told to */
    if ((!c.resume && run_owner_check("--log", c.log, NULL, c.overwrite,
                                      "continue that run with --resume CHECKPOINT (its log is kept)", err, sizeof err)) ||
        run_owner_check("--save", c.save, c.resume, c.overwrite,
                        c.resume ? "to continue a run, --save names its --resume file"
                                 : "continue that run with --resume on it", err, sizeof err)) {
        fprintf(stderr, "attn_scale: %s\n", err);
        status = 2;
        goto done;
    }
    if (c.dump_attn) {
        char info[600];
        if (attn_dump_init(&dump, &c, opts, nopt, st.step, info, sizeof info, err, sizeof err)) {
            fprintf(stderr, "attn_scale: %s\n", err);
            status = 2;
            goto done;
        }
        if (info[0]) fprintf(stderr, "attn_scale: %s\n", info);
    }
    hdr = make_header(opts, nopt, &mc, &m, refs, uniform);
    if (!hdr) {
        fprintf(stderr, "attn_scale: out of memory\n");
        status = 1;
        goto done;
    }
    if (c.log) {
        char info[1024] = "", old_blas[256] = "", blas[256];
        const char *log_free[32];   /* what a resumed log's header may change: those flags, and the BLAS line */
        int nf = 0;
        for (const char *const *o = attn_run_options; *o && nf < 30; o++) log_free[nf++] = *o;
        log_free[nf++] = "blas";
        log_free[nf] = NULL;
        if (c.resume) runlog_header_value(c.log, "blas", old_blas, sizeof old_blas);
        int r = c.resume ? runlog_resume(&L, c.log, hdr, log_free, st.step, info, sizeof info, err, sizeof err)
                         : runlog_open(&L, c.log, hdr, err, sizeof err);
        if (r) {
            fprintf(stderr, "attn_scale: --log %s\n", err);
            status = 2;
            goto done;
        }
        if (info[0]) fprintf(stderr, "attn_scale: %s\n", info);
        tg_blas_info bi;
        tg_blas_info_get(&bi);
        if (old_blas[0] && !tg_blas_same_kernel(old_blas, tg_blas_info_str(&bi, blas, sizeof blas)))
            fprintf(stderr, "attn_scale: note: the log was started with %s, this run has %s: the resumed run may not "
                    "be bit-identical to one made in one go\n", old_blas, blas);
    }

    guard_install();
    status = train(&c, opts, nopt, &st, &L, c.dump_attn ? &dump : NULL, uniform, refs);
    if (L.fd >= 0 && runlog_close(&L)) {
        fprintf(stderr, "attn_scale: --log %s: write failed\n", c.log);
        status = status ? status : 1;
    }
done:
    runlog_close(&L);
    runlock_release(locks, nlocks);
    attn_dump_free(&dump);
    free(hdr);
    train_state_free_logged(&st);
    if (c.optim == OPT_ADAM) tg_adamw_free(&adam);
    else tg_sgd_free(&sgd);
    model_free(&m);
    return status;
}
