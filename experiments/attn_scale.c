/* attn_scale: train the toy transformer with one attention-scale mode and log
 * loss and per-head attention health. The √d_k experiment in one binary:
 *   attn_scale --scale none --log runs/none.tsv     (the forgotten scale)
 *   attn_scale --scale sqrt --log runs/sqrt.tsv     (the baseline)
 *   attn_scale --attn plugin:mykernel.so ...        (your own attention kernel)
 *   attn_scale --attn exec:'python3 k.py' ...       (one in another process, any language)
 *   attn_scale --task code --eval-every 100 ...      (real text: libc6-dev's headers, byte level)
 * A thin main over the training kit (experiments/libtapegrad_train/: the model, the tasks,
 * the loop). See docs/experiment.md for the flags, docs/logs.md for the log and
 * docs/plugins.md for plugins, docs/exec_protocol.md for exec kernels. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attn_cfg.h"
#include "attn_dump.h"
#include "tg_attn_log.h"
#include "tg_attn_probe.h"
#include "tg_blas.h"
#include "tg_runtime.h"
#include "tg_corpus.h"
#include "tg_gemm_plan.h"
#include "tg_guard.h"
#include "tg_kernel.h"
#include "tg_model.h"
#include "tg_tasks.h"
#include "tg_timing.h"
#include "tg_train.h"

/* What the loop's hooks see. */
typedef struct {
    const attn_cfg *c;
    tg_model m;
    tg_task_cfg tc;
    tg_task_refs refs;
    double uniform;
    int *tokens, *targets;
    attn_dump dump;
    int dumping;
    const tg_cli_opt *opts;
    int n_opts;
    const char *unmeasured;   /* a kernel from outside: why its weights cannot be measured (NULL: they can) */
    const tg_setting *settings;   /* the run's identity beyond its flags */
    int n_settings;
    tg_kernel *kernel;        /* the attention kernel, as the registry opened it */
    int eval_failed;          /* the validation loss's kernel call failed (the run fails as a step would) */
    const tg_corpus *corpus;  /* task code */
    tg_ctx eval_ctx;          /* the validation loss's own context and batch */
    int *eval_x, *eval_y;
    int eval_ready;
    double val_loss;          /* at the row being logged; NaN when not evaluated there */
    int noted;                /* a failed measurement was reported */
    /* per layer, slices of one allocation (wq_std0 owns it): ‖W_q‖ of the unfolded initialisation and ‖W_k‖ at the
     * start (growth_start), their norms at the logged step's forward, before its update */
    double *wq_std0, *wk0, *wq_now, *wk_now;
} run;

static void batch(void *u, tg_rng *rng, int step) {
    run *r = u;
    /* --attn-dropout's masks: from the run's seed and the step, so a resumed run draws the same */
    r->m.dropout_seed = ((uint64_t)r->c->seed << 32 | (uint32_t)step) * 0xd1342543de82ef95ULL + 0x5d0;
    tg_task_batch(&r->tc, rng, r->c->batch, r->tokens, r->targets);
}

static double frobenius(const tg_tensor *t) {
    double s = 0;
    for (int64_t i = 0; i < t->numel; i++) s += (double)t->data[i] * t->data[i];
    return sqrt(s);
}

static tg_tensor *forward(tg_ctx *ctx, void *u, int logging) {
    run *r = u;
    tg_tensor *loss = tg_model_forward(&r->m, ctx, r->tokens, r->targets, r->c->batch, logging && !r->unmeasured);
    if (logging)   /* the weights this row's loss and entropy were computed with */
        for (int l = 0; l < r->m.cfg.layers; l++) {
            r->wq_now[l] = frobenius(r->m.layer[l].wq);
            r->wk_now[l] = frobenius(r->m.layer[l].wk);
        }
    if (logging && r->unmeasured)
        for (int i = 0; i < r->m.cfg.layers * r->m.cfg.heads; i++)
            r->m.ent[i] = r->m.maxlogit[i] = r->m.sat[i] = r->m.logit_scale[i] = NAN;
    if (logging && r->m.measure_note[0] && !r->noted) {
        fprintf(stderr, "attn_scale: note: the kernel's attention weights were not measured (%s); those columns "
                "are nan\n", r->m.measure_note);
        r->noted = 1;
    }
    return loss;
}

/* a kernel whose measured weights reach hidden keys: the run fails unless allowed */
static int after_row(void *u, int step, char *err, size_t errlen) {
    run *r = u;
    (void)step;
    if (!r->m.measure_leak || r->c->allow_noncausal) return 0;
    tg_errf(err, errlen, "the attention kernel's weights reach keys the mask hides (%s); the loss of such a run is "
            "not the task's (--allow-noncausal trains on anyway)", r->m.measure_note);
    return 1;
}

static tg_attn_stats stats_of(run *r) {
    return (tg_attn_stats){r->m.cfg.heads, r->m.ent, r->m.maxlogit, r->m.sat};
}

/* Where training took the fold (0.24): per layer, wq_growth = ‖W_q‖ / ‖W_q of the unfolded
 * initialisation‖ (1/√dh at the start of a folded run, 1 otherwise), and qk_mult = the multiplier
 * of q·k the layer applied (its heads' mean, the scale_ columns) × wq_growth × ‖W_k‖/‖W_k at the
 * start‖: the effective multiplier against an unscaled model at a standard initialisation, 1 for
 * none at step 0, 1/√dh for sqrt and for none with the fold. nan under qknorm (q and k are
 * normalised: the weights' size does not reach the logits). */
static void growth_start(run *r) {
    const tg_model_cfg *mc = &r->m.cfg;
    const double unfold = tg_model_qinit_fold(mc) ? sqrt((double)mc->d_head) : 1.0;
    for (int l = 0; l < mc->layers; l++) {
        r->wq_std0[l] = frobenius(r->m.layer[l].wq) * unfold;
        r->wk0[l] = frobenius(r->m.layer[l].wk);
    }
}

static void columns(void *u, FILE *f, int part) {
    run *r = u;
    tg_attn_log_columns(f, r->m.cfg.layers, r->m.cfg.heads, part);
    if (part == 1) {
        for (int l = 0; l < r->m.cfg.layers; l++) fprintf(f, "\twq_growth_l%d", l);
        for (int l = 0; l < r->m.cfg.layers; l++) fprintf(f, "\tqk_mult_l%d", l);
    }
    if (part == 1 && r->c->eval_every) fprintf(f, "\tval_loss");
}

static void values(void *u, tg_runlog *L, int part) {
    run *r = u;
    tg_attn_stats st = stats_of(r);
    tg_attn_log_values(L, &st, r->m.cfg.layers, r->uniform, r->m.logit_scale, part);
    if (part == 1) {
        const int H = r->m.cfg.heads, layers = r->m.cfg.layers;
        for (int l = 0; l < layers; l++) tg_runlog_add(L, "\t%.6g", r->wq_now[l] / r->wq_std0[l]);
        for (int l = 0; l < layers; l++) {
            double mult = 0;
            for (int h = 0; h < H; h++) mult += r->m.logit_scale[l * H + h];
            mult /= H;
            double c = r->m.cfg.scale_mode == TG_SCALE_QKNORM ? NAN : mult * r->wq_now[l] / r->wq_std0[l] *
                       r->wk_now[l] / r->wk0[l];
            tg_runlog_add(L, "\t%.6g", c);
        }
    }
    if (part == 1 && r->c->eval_every) tg_runlog_add(L, "\t%.6f", r->val_loss);
}

static double metric(void *u) {
    run *r = u;
    tg_attn_stats st = stats_of(r);
    return tg_attn_mean_entropy(&st, r->m.cfg.layers);
}

static void header(void *u, FILE *f) {
    run *r = u;
    fprintf(f, "# attn_scale_value=%.9g\n", tg_model_scale(&r->m.cfg));
    if (tg_model_qinit_fold(&r->m.cfg)) {   /* --qinit fold is in the flags above; a kernel's convention is not */
        if (r->c->qinit != TG_QINIT_FOLD) fprintf(f, "# qinit=fold\n");
        fprintf(f, "# qinit_factor=%.9g (W_q's initialisation times 1/sqrt(d_head), T5's way%s)\n",
                1.0 / sqrt((double)r->m.cfg.d_head), r->c->qinit == TG_QINIT_FOLD ? "" : "; the kernel declares scale_folded");
    }
    if (r->m.cfg.attn_measure) {
        /* a kernel from outside: the scale above is what it was passed; the scale_* columns what it applied */
        tg_kernel_header(r->kernel, f);
        fprintf(f, "# attn_scale_columns=measured\n");
        /* what a measured multiplier and max logit are: a built-in op logs the multiplier it
         * applied and its largest logit after the cap; a black box's are fitted from its weights */
        if (r->c->softcap > 0) {
            fprintf(f, "# attn_multiplier_meaning=an effective slope: the least-squares slope of the kernel's "
                    "log-weights in q.k per head (bias and ALiBi taken out); under the cap of %g tanh flattens large "
                    "logits, so it is below the multiplier the kernel applies before the cap and falls as logits "
                    "grow (a built-in op logs scale x head scale)\n", (double)r->c->softcap);
            fprintf(f, "# attn_max_logit_meaning=that slope times the largest q.k of the step: not capped, it may "
                    "exceed the cap of %g (a built-in op logs its largest logit after the cap)\n",
                    (double)r->c->softcap);
        } else {
            fprintf(f, "# attn_multiplier_meaning=the least-squares slope of the kernel's log-weights in q.k per "
                    "head (bias and ALiBi taken out): the multiplier it applied\n");
            fprintf(f, "# attn_max_logit_meaning=that slope times the largest q.k of the step: its largest logit "
                    "before bias and ALiBi\n");
        }
        fprintf(f, "# attn_measured=%s\n", r->unmeasured ? "no" : "yes");
        if (r->unmeasured) fprintf(f, "# attn_measure_note=%s\n", r->unmeasured);
    }
    if (r->corpus) {
        fprintf(f, "# corpus_source=%s\n", r->corpus->source);
        fprintf(f, "# corpus_files=%d\n# corpus_bytes=%zu\n# corpus_train_bytes=%zu\n# corpus_non_text_bytes=%zu\n",
                r->corpus->n_files, r->corpus->n, r->corpus->n_train, r->corpus->non_text);
    }
    fprintf(f, "# n_params=%zu\n", r->m.P.numel);
    fprintf(f, "# ref_loss_optimal=%.6f\n# ref_loss_context_free=%.6f\n", r->refs.optimal, r->refs.context_free);
    fprintf(f, "# ref_entropy_uniform=%.6f\n", r->uniform);
}

enum { VB = 16 };   /* validation windows per forward */

/* val_loss: the mean loss of the TG_CORPUS_VAL fixed validation windows, VB at a time, on ctx (the run's own
 * validation context). */
static void validation_loss(tg_ctx *ctx, void *u) {
    run *r = u;
    const int T = r->m.cfg.seq_len;
    double sum = 0;
    for (int first = 0; first < TG_CORPUS_VAL; first += VB) {
        tg_ctx_reset(ctx);
        tg_corpus_val_batch(r->corpus, first, VB, T, r->eval_x, r->eval_y);
        sum += tg_model_forward(&r->m, ctx, r->eval_x, r->eval_y, VB, 0)->data[0];
    }
    r->val_loss = sum / (TG_CORPUS_VAL / VB);
}

/* The validation batch and context, made once: no allocation in a step after the first. */
static int eval_ready(run *r, char *err, size_t errlen) {
    if (!r->eval_ready) {
        tg_ctx_init(&r->eval_ctx, 0);
        r->eval_ctx.grad_enabled = 0;
        tg_ctx_set_precision(&r->eval_ctx, r->c->precision);   /* validated as trained, as autocast does */
        r->eval_x = malloc(sizeof(int) * VB * (size_t)r->m.cfg.seq_len);
        r->eval_y = malloc(sizeof(int) * VB * (size_t)r->m.cfg.seq_len);
        r->eval_ready = 1;
    }
    return r->eval_x && r->eval_y ? 0 : tg_errf(err, errlen, "out of memory for the validation batch");
}

/* One validation forward, its loss thrown away: its products looked up. */
static void validation_plan(tg_ctx *ctx, void *u) {
    run *r = u;
    tg_ctx_reset(ctx);
    tg_corpus_val_batch(r->corpus, 0, VB, r->m.cfg.seq_len, r->eval_x, r->eval_y);
    (void)tg_model_forward(&r->m, ctx, r->eval_x, r->eval_y, VB, 0);
    tg_ctx_reset(ctx);
}

/* After a resume, before the kit's planning pass (tg_gemm_plan.h): the
 * products the loop meets besides a step's (the validation loss, the dumps'
 * maps) are looked up here, so they are timed with the step's and none is
 * first met inside the loop (the log's gemm_plan still names a step's
 * products: tg_train.h). A failure there is the loop's to report. */
static int start(void *u, int step, char *err, size_t errlen) {
    run *r = u;
    if (r->c->dump_attn) {
        char info[600];
        if (attn_dump_init(&r->dump, r->c, r->opts, r->n_opts, step, info, sizeof info, err, errlen)) return -1;
        r->dumping = 1;
        if (info[0]) fprintf(stderr, "attn_scale: %s\n", info);
        attn_dump_plan(&r->dump, &r->m);
    }
    if (r->c->eval_every && eval_ready(r, err, errlen) == 0) {
        char msg[600];
        (void)tg_try(&r->eval_ctx, validation_plan, r, msg, sizeof msg);
    }
    return 0;
}

static int before_step(void *u, int step, char *err, size_t errlen) {
    run *r = u;
    /* the probe's maps of the model that logs this row, on their own context */
    if (r->dumping && attn_dump_step(&r->dump, &r->m, step, err, errlen)) return -1;
    /* the validation loss of the model that logs this row (step updates done) */
    r->val_loss = NAN;
    if (!r->c->eval_every || (step % r->c->eval_every && step != r->c->steps)) return 0;
    if (eval_ready(r, err, errlen)) return -1;
    /* an op failing in it (an exec kernel that died) fails the run as a step's would, not abort it */
    char msg[600];
    if (tg_try(&r->eval_ctx, validation_loss, r, msg, sizeof msg)) {
        r->eval_failed = 1;
        return tg_errf(err, errlen, "the validation loss: %s", msg);
    }
    return 0;
}

/* --sample: the model of --resume writes after the prompt; bytes to stdout. */
static int sample(run *r, const attn_cfg *c, const tg_train_cfg *tc) {
    char err[1024];
    int status = 0;
    if (tg_train_load_params(tc, &r->m.P, err, sizeof err)) {
        fprintf(stderr, "attn_scale: --resume %s\n", err);
        status = 2;
    } else {
        const int T = c->seq_len;
        size_t n = strlen(c->sample), cap = n + (size_t)c->sample_len;
        int *text = malloc(sizeof(int) * (cap ? cap : 1)), *win = malloc(sizeof(int) * (size_t)T);
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        ctx.grad_enabled = 0;
        tg_ctx_set_precision(&ctx, c->precision);
        tg_rng rng;
        tg_rng_seed(&rng, (uint64_t)c->seed, 0x5a3b1e);
        for (size_t i = 0; i < n; i++) text[i] = (unsigned char)c->sample[i];
        fwrite(c->sample, 1, n, stdout);
        for (int k = 0; k < c->sample_len && text && win; k++) {
            /* the last T bytes at positions 0.., the rest of the window after them (causal: unseen) */
            size_t w = n < (size_t)T ? n : (size_t)T;
            for (int t = 0; t < T; t++) win[t] = (size_t)t < w ? text[n - w + (size_t)t] : ' ';
            tg_ctx_reset(&ctx);
            const float *lg = tg_model_logits(&r->m, &ctx, win, 1)->data + (w ? w - 1 : 0) * 256;
            int next = 0;
            if (c->temperature <= 0) {
                for (int v = 1; v < 256; v++)
                    if (lg[v] > lg[next]) next = v;
            } else {
                double p[256], mx = lg[0], sum = 0;
                for (int v = 1; v < 256; v++) mx = fmax(mx, lg[v]);
                for (int v = 0; v < 256; v++) sum += p[v] = exp((lg[v] - mx) / c->temperature);
                double u = tg_rng_uniform(&rng) * sum;
                for (next = 0; next < 255 && (u -= p[next]) > 0; next++) {
                }
            }
            text[n++] = next;
            putchar(next);
        }
        putchar('\n');
        fflush(stdout);
        tg_ctx_free(&ctx);
        free(text);
        free(win);
    }
    return status;
}

/* The message's newlines and tabs would break a log header line. */
static void one_line(char *s) {
    for (; *s; s++)
        if (*s == '\n' || *s == '\t') *s = ' ';
}

/* The flags into c (opts: their table, *nopt of them): -1 to go on, or the exit status (0 after --help). */
static int parse(int argc, char **argv, attn_cfg *c, tg_cli_opt *opts, int *nopt) {
    int seen[ATTN_MAX_OPTS];
    char err[1024];
    attn_cfg_defaults(c);
    *nopt = attn_cfg_options(c, opts);
    const char *summary = "Train a toy transformer with one attention-scale mode; log loss and per-head attention entropy.";
    int rc = tg_cli_parse(opts, *nopt, argc, argv, err, sizeof err, seen);
    if (rc == TG_CLI_HELP) {
        tg_cli_usage(stdout, "attn_scale", summary, opts, *nopt);
        return 0;
    }
    if (rc != TG_CLI_OK) {
        fprintf(stderr, "attn_scale: %s\n", err);
        fprintf(stderr, "(attn_scale --help lists every flag)\n");
        return 2;
    }
    if (attn_cfg_check(c, opts, *nopt, seen, err, sizeof err)) {
        fprintf(stderr, "attn_scale: %s\n", err);
        return 2;
    }
    return -1;
}

static void run_free(run *r, tg_corpus *corpus, tg_kernel *K) {
    attn_dump_free(&r->dump);
    if (r->eval_ready) tg_ctx_free(&r->eval_ctx);
    free(r->eval_x);
    free(r->eval_y);
    tg_corpus_free(corpus);
    free(r->tokens);
    free(r->targets);
    free(r->wq_std0);
    tg_model_free(&r->m);
    tg_kernel_close(K);
}

/* Before any parallel region (the pre-flight forks): an outside kernel called as
 * training will call it. 0 to go on (r->unmeasured set when its weights cannot
 * be measured), or the exit status (nothing written). why: the reason's room. */
static int preflight(run *r, const attn_cfg *c, tg_kernel *K, char *why, size_t len) {
    tg_rng prng;
    tg_rng_seed(&prng, (uint64_t)c->seed, 0xf1);
    tg_task_batch(&r->tc, &prng, c->batch, r->tokens, r->targets);
    /* an exec kernel: the child starts its own, and each of its calls may take --exec-timeout */
    const double limit = K->kind == TG_KERNEL_EXEC ? TG_ATTN_EXEC_START + 10.0 * c->exec_timeout : 60;
    int pf = tg_model_preflight(&r->m, K, r->tokens, r->targets, c->batch, limit, why, len);
    one_line(why);
    if (pf == 3 || (pf == 2 && !c->allow_noncausal)) {
        fprintf(stderr, "attn_scale: --attn %s: %s%s; nothing was written\n", c->attn_spec, why,
                pf == 2 ? " (its weights reach keys the mask hides: --allow-noncausal trains on anyway)" : "");
        /* an exec kernel that failed its calls: the kernel's own status; a plugin's step: usage */
        return pf == 2 ? TG_EXIT_CONTRACT : K->kind == TG_KERNEL_EXEC ? TG_EXIT_OP : 2;
    }
    if (pf == 1) {
        r->unmeasured = why;
        fprintf(stderr, "attn_scale: note: the kernel's attention weights cannot be measured from the outside: "
                "%s; entropy, max-logit, saturation and scale columns will be nan\n", why);
    } else if (pf == 2) {   /* the measurement refuses weights past the mask: the columns are nan, and said so */
        r->unmeasured = why;
        fprintf(stderr, "attn_scale: note: --allow-noncausal: %s; entropy, max-logit, saturation and scale "
                "columns will be nan\n", why);
    }
    return 0;
}

/* The kit's configuration of the run c describes; settings and files stay the caller's. */
static void train_cfg(tg_train_cfg *tc, const attn_cfg *c, const tg_cli_opt *opts, int nopt,
                      const tg_setting *settings, int ns, const char *const (*files)[2]) {
    tg_train_defaults(tc, "attn_scale");
    tc->steps = c->steps, tc->warmup = c->warmup, tc->log_every = c->log_every, tc->save_every = c->save_every;
    tc->stop_at = c->stop_at, tc->lr = c->lr, tc->lr_min = c->lr_min, tc->clip = c->clip;
    tc->optim = c->optim == OPT_ADAM ? TG_OPTIM_ADAM : c->optim == OPT_ADAFACTOR ? TG_OPTIM_ADAFACTOR : TG_OPTIM_SGD;
    tc->precision = c->precision;
    tc->momentum = c->momentum, tc->weight_decay = c->weight_decay, tc->data_seed = (uint64_t)c->seed;
    tc->on_nan = c->on_nan == ONNAN_STOP ? TG_ONNAN_STOP : TG_ONNAN_SKIP, tc->debug_nan = c->debug_nan;
    tc->log = c->log, tc->save = c->save, tc->resume = c->resume, tc->overwrite = c->overwrite;
    tc->opts = opts, tc->n_opts = nopt, tc->may_differ = attn_run_options, tc->added = attn_added_flags;
    tc->header_may_differ = tg_kernel_header_free;   /* the bytes count, not where they are */
    tc->settings = settings, tc->n_settings = ns;
    tc->files = files, tc->n_files = 1;
}

/* tg_train on the run, its profile and its summary line; a tg_train_status. */
static int train(run *r, const attn_cfg *c, tg_train_cfg *tc, tg_train_result *res) {
    tg_train_model tm = {.P = &r->m.P, .user = r, .batch = batch, .forward = forward, .columns = columns,
                         .values = values, .metric = metric, .header = header, .start = start,
                         .before_step = before_step, .after_row = after_row};
    char crash_what[4500];
    if (r->kernel->kind == TG_KERNEL_PLUGIN) {   /* it runs in this process: a crash of it is said in the log */
        snprintf(crash_what, sizeof crash_what, "while training with %s", r->kernel->what);
        tc->crash_what = crash_what;
    }
    tg_profile prof;
    tg_profile_init(&prof, 1);
    if (c->profile) {   /* the machine's limit at the width the products run at, on the run's threads */
        tg_blas_info bi;
        tg_blas_info_get(&bi);
        prof.peak_gflops = tg_timing_fma_gflops(bi.xsmm_bits, c->threads, 5);
        tc->profile = &prof;
    }
    int status = tg_train(tc, &tm, res);
    if (c->profile) {
        char plan[1200];
        fprintf(stderr, "# attn_scale --profile: plan %s\n", tg_gemm_plan_describe(plan, sizeof plan));
        tg_profile_print(&prof, stderr);
    }
    if (status == 0 && res->finished)
        printf("task=%s scale=%s d_head=%d seed=%d steps=%d final_loss=%.4f final_ent=%.4f uniform_ent=%.4f "
               "ref_context_free=%.4f seconds=%.1f\n",
               tg_task_names[c->task], tg_scale_names[c->scale], c->d_head, c->seed, c->steps, res->final_loss,
               res->final_metric, r->uniform, r->refs.context_free, res->seconds);
    /* the validation loss's kernel call failed: the run failed as a step's would have */
    if (status == TG_TRAIN_FAILED && r->eval_failed) status = TG_TRAIN_OP_FAILED;
    return status;
}

/* The kernel of --attn, opened by the registry (tg_kernel.h), and whether this model's calls are
 * ones it takes: 0, or 2 with the reason said (nothing written). */
static int open_kernel(const attn_cfg *c, tg_model_cfg *mc, tg_kernel *K) {
    char err[1024], ctx[80];
    if (tg_kernel_open(K, c->attn_spec, &(tg_kernel_opts){.exec_timeout = c->exec_timeout}, err, sizeof err)) {
        fprintf(stderr, "attn_scale: --attn %s; nothing was written\n", err);
        return 2;
    }
    /* the model's call, its shapes and settings (no data): what the gate will be asked at every step */
    tg_tensor room[4];
    tg_attn_args a = tg_model_attn_call(mc, room);
    snprintf(ctx, sizeof ctx, "--scale %s", tg_scale_names[mc->scale_mode]);
    if (tg_kernel_refuses_call(K, &a, ctx, err, sizeof err)) {
        const int folded = !!(tg_attn_kernel_conventions(K->k) & TG_ATTN_C_SCALE_FOLDED);
        fprintf(stderr, "attn_scale: %s; nothing was written%s\n", err,
                folded && mc->scale_mode != TG_SCALE_NONE ? " (a kernel with the scale folded runs with --scale none: the "
                "model then folds 1/sqrt(d_head) into W_q's initialisation, as T5)" : "");
        tg_kernel_close(K);
        return 2;
    }
    mc->attn_kernel = K->k, mc->attn_measure = !tg_kernel_trusted(K);   /* scale_folded: the model folds (tg_model_qinit_fold) */
    return 0;
}

int main(int argc, char **argv) {
    if (tg_runtime_init("attn_scale", argc, argv)) return 1;   /* first: it may restart the program; threads */
    tg_gemm_plan_setup_env("attn_scale", "measure");   /* the product plan: this program's decision (TG_PLAN overrides) */
    attn_cfg c;
    tg_cli_opt opts[ATTN_MAX_OPTS];
    int nopt, rc = parse(argc, argv, &c, opts, &nopt);
    if (rc >= 0) return rc;
    char err[1024], why[600] = "";
    tg_model_cfg mc = attn_cfg_model(&c);
    tg_kernel K;   /* opened for --check too: what the kernel declares decides whether the run can start */
    if ((rc = open_kernel(&c, &mc, &K))) return rc;
    if (c.check) {   /* --check: these flags would start; no file written */
        tg_kernel_close(&K);
        return 0;
    }
    tg_corpus corpus = {0};
    if (c.task == TG_TASK_CODE && tg_corpus_load(&corpus, c.data, c.seq_len, err, sizeof err)) {
        fprintf(stderr, "attn_scale: --data %s\n", err);   /* before anything is written */
        tg_kernel_close(&K);
        return 2;
    }
    if (corpus.non_text)
        fprintf(stderr, "attn_scale: note: the corpus has %zu bytes that are not text (of %zu)\n", corpus.non_text,
                corpus.n);
    if (c.task == TG_TASK_CODE) c.corpus = &corpus;
    run r = {.c = &c, .opts = opts, .n_opts = nopt, .kernel = &K,
             .corpus = c.task == TG_TASK_CODE ? &corpus : NULL, .val_loss = NAN};
    tg_model_init(&r.m, &mc, (uint64_t)c.seed);
    if (!(r.wq_std0 = calloc(4 * (size_t)mc.layers, sizeof(double)))) {
        fprintf(stderr, "attn_scale: out of memory\n");
        return 1;
    }
    r.wk0 = r.wq_std0 + mc.layers, r.wq_now = r.wk0 + mc.layers, r.wk_now = r.wq_now + mc.layers;
    growth_start(&r);   /* before a resume loads its weights: the start is the seed's */
    r.tc = attn_cfg_task(&c);
    r.refs = tg_task_reference(&r.tc);
    r.uniform = tg_model_uniform_entropy(&mc);
    r.tokens = malloc(sizeof(int) * (size_t)c.batch * c.seq_len);
    r.targets = malloc(sizeof(int) * (size_t)c.batch * c.seq_len);
    if (!r.tokens || !r.targets) {
        fprintf(stderr, "attn_scale: out of memory for the batch\n");
        return 1;
    }
    if (mc.attn_measure && !c.sample && (rc = preflight(&r, &c, &K, why, sizeof why))) {
        run_free(&r, &corpus, &K);
        return rc;
    }
    /* the attention kernel is part of the run's identity: the built-in op (0.19's word), a plugin's bytes, an exec
     * kernel's command with its files' bytes (tg_kernel.h) */
    tg_setting settings[6];
    const char *keys[4], *values[4];
    int ns = 0;
    settings[ns++] = (tg_setting){"attn", K.id};
    for (int i = 0, n = tg_kernel_identity(&K, keys, values); i < n; i++) settings[ns++] = (tg_setting){keys[i], values[i]};
    if (r.corpus) settings[ns++] = (tg_setting){"corpus_sha256", corpus.sha256};   /* the same text, or no resume */
    r.settings = settings, r.n_settings = ns;
    const char *files[1][2] = {{"--dump-attn-file", c.dump_attn_file}};
    tg_train_cfg tc;
    train_cfg(&tc, &c, opts, nopt, settings, ns, (const char *const(*)[2])files);
    tg_train_result res;
    int status = c.sample ? sample(&r, &c, &tc) : train(&r, &c, &tc, &res);
    run_free(&r, &corpus, &K);
    if (c.sample) return status;
    /* stopped by a signal, the checkpoint written: die of it, so the shell that started us stops too */
    if (status == TG_TRAIN_STOPPED) tg_guard_reraise(res.signal);
    return tg_train_exit_status(status, &res);
}
