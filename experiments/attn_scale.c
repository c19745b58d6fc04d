/* attn_scale: train the toy transformer with one attention-scale mode and log
 * loss and per-head attention health. The √d_k experiment in one binary:
 *   attn_scale --scale none --log runs/none.tsv     (the forgotten scale)
 *   attn_scale --scale sqrt --log runs/sqrt.tsv     (the baseline)
 * See README.md for the log format and what the defaults reproduce. */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime, isatty */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "model.h"
#include "tasks.h"
#include "tg_ops.h"
#include "tg_optim.h"

enum { OPT_ADAM, OPT_SGD };
static const char *const optim_names[] = {"adam", "sgd", NULL};

typedef struct {
    int task, steps, batch, seq_len, vocab, d_model, heads, d_head, layers;
    int scale, init, optim, warmup, seed, threads, log_every, attn;
    int alphabet, keys, values;
    float lr, lr_min, clip, momentum, weight_decay;
    const char *log;
} config;

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
    fprintf(f, "\tgrad_norm\tlr\n");
}

static void log_row(FILE *f, int step, float loss, const model *m, double uniform, float gnorm, float lr) {
    const model_cfg *mc = &m->cfg;
    int nh = mc->layers * mc->heads;
    double mean = 0;
    for (int i = 0; i < nh; i++) mean += m->ent[i];
    fprintf(f, "%d\t%.6f\t%.6f", step, loss, mean / nh);
    for (int i = 0; i < nh; i++) fprintf(f, "\t%.6f", m->ent[i]);
    for (int l = 0; l < mc->layers; l++) {
        float mx = -INFINITY;
        for (int h = 0; h < mc->heads; h++)
            if (m->maxlogit[l * mc->heads + h] > mx) mx = m->maxlogit[l * mc->heads + h];
        fprintf(f, "\t%.4f", mx);
    }
    for (int l = 0; l < mc->layers; l++) {
        double s = 0;
        for (int h = 0; h < mc->heads; h++) s += m->sat[l * mc->heads + h];
        fprintf(f, "\t%.4f", s / mc->heads);
    }
    for (int i = 0; i < nh; i++) fprintf(f, "\t%.6f", m->ent[i] / uniform);
    fprintf(f, "\t%.6g\t%.6g\n", gnorm, lr);
}

int main(int argc, char **argv) {
    config c = {
        .task = TASK_HIST, .steps = 600, .batch = 32, .seq_len = 64, .vocab = 64, .d_model = 128,
        .heads = 4, .d_head = 128, .layers = 1, .scale = SCALE_SQRT, .init = INIT_FANIN,
        .optim = OPT_ADAM, .warmup = 50, .seed = 1, .threads = 1, .log_every = 10,
        .alphabet = 16, .keys = 8, .values = 6,
        .lr = 1e-3f, .lr_min = 1e-4f, .clip = 1.0f, .momentum = 0.9f, .weight_decay = 0.0f,
        .log = NULL, .attn = ATTN_COMPOSED,
    };
    const cli_opt opts[] = {
        {"task", CLI_CHOICE, &c.task, 0, 0, task_names, "hist: count earlier copies (needs spread attention); recall: key-value lookup (sharp is right)"},
        {"steps", CLI_INT, &c.steps, 1, 10000000, NULL, "training steps"},
        {"batch", CLI_INT, &c.batch, 1, 65536, NULL, "sequences per step"},
        {"seq-len", CLI_INT, &c.seq_len, 2, 4096, NULL, "tokens per sequence"},
        {"vocab", CLI_INT, &c.vocab, 3, 4096, NULL, "vocabulary (input tokens and output classes)"},
        {"d-model", CLI_INT, &c.d_model, 1, 8192, NULL, "residual width D"},
        {"heads", CLI_INT, &c.heads, 1, 256, NULL, "attention heads H"},
        {"d-head", CLI_INT, &c.d_head, 1, 4096, NULL, "head size d_head (= d_k)"},
        {"layers", CLI_INT, &c.layers, 1, 64, NULL, "transformer blocks"},
        {"scale", CLI_CHOICE, &c.scale, 0, 0, scale_names, "attention scale: 1/sqrt(dh), 1, 1/dh, QK-norm + 1/sqrt(dh), learned per head"},
        {"init", CLI_CHOICE, &c.init, 0, 0, init_names, "fanin: N(0,1/fan_in) weights, N(0,1) embeddings; gpt2: all N(0,0.02^2)"},
        {"optim", CLI_CHOICE, &c.optim, 0, 0, optim_names, "AdamW or SGD with momentum"},
        {"lr", CLI_FLOAT, &c.lr, 1e-9, 100, NULL, "peak learning rate"},
        {"lr-min", CLI_FLOAT, &c.lr_min, 0, 100, NULL, "learning rate at the end of the cosine"},
        {"warmup", CLI_INT, &c.warmup, 0, 10000000, NULL, "linear warm-up steps"},
        {"clip", CLI_FLOAT, &c.clip, 0, 1e9, NULL, "global grad-norm clip (0: none)"},
        {"momentum", CLI_FLOAT, &c.momentum, 0, 0.999, NULL, "SGD momentum"},
        {"weight-decay", CLI_FLOAT, &c.weight_decay, 0, 10, NULL, "decoupled weight decay (matrices only)"},
        {"alphabet", CLI_INT, &c.alphabet, 2, 4095, NULL, "hist: number of symbols"},
        {"keys", CLI_INT, &c.keys, 2, 4096, NULL, "recall: number of keys"},
        {"values", CLI_INT, &c.values, 2, 4096, NULL, "recall: number of values"},
        {"seed", CLI_INT, &c.seed, 0, 2147483647, NULL, "seed of the init and the data"},
        {"threads", CLI_INT, &c.threads, 1, 256, NULL, "threads (OpenMP: the ops split their own work; OpenBLAS runs single-threaded)"},
        {"attn", CLI_CHOICE, &c.attn, 0, 0, attn_names, "attention op: composed (saves the TxT weights) or fused (tiled)"},
        {"log", CLI_STR, &c.log, 0, 0, NULL, "TSV log file (default: none)"},
        {"log-every", CLI_INT, &c.log_every, 1, 10000000, NULL, "log every N steps (and the last)"},
    };
    const int nopt = (int)(sizeof opts / sizeof opts[0]);
    const char *summary = "Train a toy transformer with one attention-scale mode; log loss and per-head attention entropy.";
    char err[256];
    int rc = cli_parse(opts, nopt, argc, argv, err, sizeof err, NULL);
    if (rc == CLI_HELP) {
        cli_usage(stdout, "attn_scale", summary, opts, nopt);
        return 0;
    }
    if (rc != CLI_OK) {
        fprintf(stderr, "attn_scale: %s\n", err);
        cli_usage(stderr, "attn_scale", summary, opts, nopt);
        return 2;
    }
    task_cfg tc = {c.task, c.vocab, c.seq_len, c.alphabet, c.keys, c.values};
    if (task_check(&tc, err, sizeof err)) {
        fprintf(stderr, "attn_scale: %s\n", err);
        return 2;
    }
    if (c.warmup > c.steps) {
        fprintf(stderr, "attn_scale: --warmup %d is longer than --steps %d\n", c.warmup, c.steps);
        return 2;
    }
    if (c.lr_min > c.lr) {
        fprintf(stderr, "attn_scale: --lr-min %g is above --lr %g\n", c.lr_min, c.lr);
        return 2;
    }
    FILE *logf = NULL;
    if (c.log) {
        logf = fopen(c.log, "w");
        if (!logf) {
            fprintf(stderr, "attn_scale: --log %s: cannot open for writing\n", c.log);
            return 2;
        }
    }
    openblas_set_num_threads(1);
    omp_set_num_threads(c.threads);

    model_cfg mc = {c.vocab, c.seq_len, c.d_model, c.heads, c.d_head, c.layers, c.scale, c.init, c.attn};
    model m;
    model_init(&m, &mc, (uint64_t)c.seed);
    tg_rng data_rng;
    tg_rng_seed(&data_rng, (uint64_t)c.seed, 0xda7a);
    task_refs refs = task_reference(&tc);
    double uniform = tg_attn_uniform_entropy(c.seq_len, 1);

    tg_adamw adam;
    tg_sgd sgd;
    if (c.optim == OPT_ADAM) tg_adamw_init(&adam, &m.P, 0.9f, 0.95f, 1e-8f, c.weight_decay);
    else tg_sgd_init(&sgd, &m.P, c.momentum, c.weight_decay);

    if (logf) {
        fprintf(logf, "# tapegrad attn_scale\n");
        cli_dump(logf, opts, nopt);
        fprintf(logf, "# attn_scale_value=%.9g\n", model_scale(&mc));
        fprintf(logf, "# n_params=%zu\n", m.P.numel);
        fprintf(logf, "# ref_loss_optimal=%.6f\n# ref_loss_context_free=%.6f\n", refs.optimal, refs.context_free);
        fprintf(logf, "# ref_entropy_uniform=%.6f\n", uniform);
        log_header(logf, &mc);
        fflush(logf);
    }

    int *tokens = malloc(sizeof(int) * (size_t)c.batch * c.seq_len);
    int *targets = malloc(sizeof(int) * (size_t)c.batch * c.seq_len);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    int tty = isatty(2);
    double t0 = now_s(), last_print = 0;
    /* final loss: the mean over the last 10% of logged steps */
    int n_logged_total = c.steps / c.log_every + 1, tail_from = n_logged_total - (n_logged_total + 9) / 10;
    double tail_sum = 0, tail_ent = 0;
    int tail_n = 0, n_logged = 0, status = 0;
    for (int step = 0; step <= c.steps; step++) {
        int logging = step % c.log_every == 0 || step == c.steps;
        tg_ctx_reset(&ctx);
        task_batch(&tc, &data_rng, c.batch, tokens, targets);
        tg_tensor *loss = model_forward(&m, &ctx, tokens, targets, c.batch, logging);
        float lv = loss->data[0];
        if (!isfinite(lv)) {
            fprintf(stderr, "attn_scale: loss is %g at step %d; stopping\n", lv, step);
            status = 3;
            break;
        }
        float gnorm = 0, lr = 0;
        if (step < c.steps) {   /* the last row is an evaluation after the last update */
            tg_params_zero_grad(&m.P);
            tg_backward(&ctx, loss);
            gnorm = tg_clip_grad_norm(&m.P, c.clip);
            lr = tg_lr_schedule(step, c.warmup, c.steps, c.lr, c.lr_min);
            if (c.optim == OPT_ADAM) tg_adamw_step(&adam, &m.P, lr);
            else tg_sgd_step(&sgd, &m.P, lr);
        }
        if (logging) {
            if (logf) {
                log_row(logf, step, lv, &m, uniform, gnorm, lr);
                fflush(logf);
            }
            if (n_logged >= tail_from) {
                double e = 0;
                for (int i = 0; i < mc.layers * mc.heads; i++) e += m.ent[i];
                tail_sum += lv;
                tail_ent += e / (mc.layers * mc.heads);
                tail_n++;
            }
            n_logged++;
        }
        double t = now_s() - t0;
        if (tty && (t - last_print > 0.5 || step == c.steps)) {
            double rate = (step + 1) / t;
            fprintf(stderr, "\rstep %d/%d  loss %.4f  %.1f step/s  ETA %.0fs   ", step, c.steps, lv, rate,
                    (c.steps - step) / rate);
            last_print = t;
        }
    }
    if (tty) fprintf(stderr, "\n");
    double secs = now_s() - t0;
    if (logf && fclose(logf) != 0) {
        fprintf(stderr, "attn_scale: --log %s: write failed\n", c.log);
        status = status ? status : 1;
    }
    if (status == 0)
        printf("task=%s scale=%s d_head=%d seed=%d steps=%d final_loss=%.4f final_ent=%.4f uniform_ent=%.4f "
               "ref_context_free=%.4f seconds=%.1f\n",
               task_names[c.task], scale_names[c.scale], c.d_head, c.seed, c.steps, tail_sum / tail_n,
               tail_ent / tail_n, uniform, refs.context_free, secs);
    if (c.optim == OPT_ADAM) tg_adamw_free(&adam);
    else tg_sgd_free(&sgd);
    free(tokens);
    free(targets);
    tg_ctx_free(&ctx);
    model_free(&m);
    return status;
}
