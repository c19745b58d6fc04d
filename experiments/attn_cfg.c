#define _POSIX_C_SOURCE 200809L   /* sysconf */
#include "attn_cfg.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>


const char *const optim_names[] = {"adam", "sgd", "adafactor", NULL};
const char *const on_nan_names[] = {"stop", "skip", NULL};
const char *const attn_run_options[] = {"steps", "threads", "log", "log-every", "save", "save-every",
                                        "resume", "stop-at", "attn", "sample", "sample-len", "temperature", "on-nan", "debug-nan", "dump-attn", "dump-attn-file",
                                        "overwrite", "check", "profile", "exec-timeout", NULL};

const char *const attn_added_flags[] = {"kv-heads=0", "window=0", "bias=none", "alibi=0", "softcap=0", "sinks=0",
                                        "attn-dropout=0", "exec-timeout=60", "precision=fp32", "qinit=default", NULL};

const char *const precision_names[] = {"fp32", "bf16", "fp16", NULL};   /* TG_FP32, TG_BF16, TG_FP16 */

void attn_cfg_defaults(attn_cfg *c) {
    *c = (attn_cfg){
        .task = TG_TASK_HIST, .steps = 600, .batch = 32, .seq_len = 32, .vocab = 64, .d_model = 128,
        .heads = 4, .d_head = 128, .layers = 1, .scale = TG_SCALE_SQRT, .init = TG_INIT_FANIN,
        .optim = OPT_ADAM, .warmup = 50, .seed = 1, .threads = 1, .log_every = 10, .attn_spec = "composed",
        .alphabet = 8, .keys = 8, .values = 6,
        .lr = 3e-3f, .lr_min = 3e-4f, .clip = 1.0f, .momentum = 0.9f, .weight_decay = 0.0f,
        .learned_param = TG_LEARNED_LINEAR, .scale_mult = 1.0f, .scale_lr = 0.0f,
        .log = NULL, .dump_attn = NULL, .dump_attn_file = NULL,
        .save = NULL, .resume = NULL, .save_every = 100, .stop_at = 0, .on_nan = ONNAN_STOP, .debug_nan = -1,
        .sample_len = 200, .temperature = 0.8f, .exec_timeout = 60,
    };
}

int attn_cfg_options(attn_cfg *c, tg_cli_opt *opts) {
    const tg_cli_opt o[] = {
        {"task", TG_CLI_CHOICE, &c->task, 0, 0, tg_task_names, "hist: count earlier copies (needs spread attention); recall: key-value lookup (sharp is right); code: next byte of real text (--data)"},
        {"data", TG_CLI_STR, &c->data, 0, 0, NULL, "--task code: the corpus: FILE, FOLDER or @LIST of paths (default: the C headers of Debian's libc6-dev)"},
        {"eval-every", TG_CLI_INT, &c->eval_every, 0, 10000000, NULL, "--task code: the validation loss (64 fixed windows of the last 10%) every N steps, N a multiple of --log-every (it goes in a logged row), column val_loss (0: none)"},
        {"steps", TG_CLI_INT, &c->steps, 1, 10000000, NULL, "training steps (the total, also with --resume)"},
        {"batch", TG_CLI_INT, &c->batch, 1, 65536, NULL, "sequences per step"},
        {"seq-len", TG_CLI_INT, &c->seq_len, 2, 4096, NULL, "tokens per sequence"},
        {"vocab", TG_CLI_INT, &c->vocab, 3, 4096, NULL, "vocabulary (input tokens and output classes)"},
        {"d-model", TG_CLI_INT, &c->d_model, 1, 8192, NULL, "residual width D"},
        {"heads", TG_CLI_INT, &c->heads, 1, 256, NULL, "attention heads H"},
        {"d-head", TG_CLI_INT, &c->d_head, 1, 4096, NULL, "head size d_head (= d_k)"},
        {"layers", TG_CLI_INT, &c->layers, 1, 64, NULL, "transformer blocks"},
        {"kv-heads", TG_CLI_INT, &c->kv_heads, 0, 256, NULL, "key/value heads Hkv dividing --heads: grouped-query attention (query head h reads k,v head h/(H/Hkv)); 1 is multi-query; 0: as --heads"},
        {"window", TG_CLI_INT, &c->window, 0, 1000000, NULL, "sliding window: each query sees its W latest keys, its own included (window (W-1, 0), Mistral's W); 0: every earlier key"},
        {"bias", TG_CLI_CHOICE, &c->bias, 0, 0, tg_bias_names, "a learned additive bias on the logits: table = a plain [H, T, T] table per layer (init 0, not decayed)"},
        {"alibi", TG_CLI_SWITCH, &c->alibi, 0, 0, NULL, "ALiBi: logit -= slope_h * |j - i|, slopes 2^(-8(h+1)/H), fixed"},
        {"softcap", TG_CLI_FLOAT, &c->softcap, 0, 1e6, NULL, "logit soft-capping (Gemma 2): x = C tanh(x/C) on the scaled logits, before bias and ALiBi; 0: none"},
        {"sinks", TG_CLI_SWITCH, &c->sinks, 0, 0, NULL, "attention sinks: a learned logit per head in each row's softmax denominator (init 0)"},
        {"attn-dropout", TG_CLI_FLOAT, &c->attn_dropout, 0, 0.99, NULL, "dropout of the attention weights in training steps (its mask from --seed and the step: a resumed run draws the same)"},
        {"scale", TG_CLI_CHOICE, &c->scale, 0, 0, tg_scale_names, "attention scale: 1/sqrt(dh), 1, 1/dh, QK-norm + 1/sqrt(dh), learned per head, c/sqrt(dh) (--scale-mult c)"},
        {"scale-mult", TG_CLI_FLOAT, &c->scale_mult, 0, 1e6, NULL, "--scale mult: c > 0 in softmax(c/sqrt(dh) q.k); 1 is sqrt, sqrt(dh) is none"},
        {"learned-init", TG_CLI_CHOICE, &c->learned_init, 0, 0, tg_learned_init_names, "--scale learned: start at s_h = 1 (as sqrt) or s_h = sqrt(d_head) (as none)"},
        {"learned-param", TG_CLI_CHOICE, &c->learned_param, 0, 0, tg_learned_param_names, "--scale learned: train s_h itself, or theta_h with s_h = exp(theta_h)"},
        {"scale-lr", TG_CLI_FLOAT, &c->scale_lr, 0, 100, NULL, "--scale learned: peak learning rate of the head scales, on the same schedule in proportion (0: --lr)"},
        {"qinit", TG_CLI_CHOICE, &c->qinit, 0, 0, tg_qinit_names, "W_q's initialisation: the --init's (default), or times 1/sqrt(d_head) (fold: the scale folded into it, T5's way; meant with --scale none, a kernel with no scale). A kernel that declares scale_folded always folds"},
        {"init", TG_CLI_CHOICE, &c->init, 0, 0, tg_init_names, "fanin: N(0,1/fan_in) weights, N(0,1) embeddings (the default, but for --task code); gpt2: all N(0,0.02^2); lm: N(0,1/fan_in) weights, N(0,0.02^2) embeddings (--task code's default)"},
        {"optim", TG_CLI_CHOICE, &c->optim, 0, 0, optim_names, "AdamW, SGD with momentum, or Adafactor (T5's: factored second moments, update clipping, steps relative to each parameter's RMS, no first moment; --lr is its relative step, T5: 0.01)"},
        {"precision", TG_CLI_CHOICE, &c->precision, 0, 0, precision_names, "the products' inputs (matmul, both attention ops, forward and backward), accumulated in fp32; softmax, layernorm, loss, optimizer and weights stay fp32 (autocast's split). Emulated: inputs rounded, fp32 kernels. fp16: with a dynamic loss scale"},
        {"lr", TG_CLI_FLOAT, &c->lr, 1e-9, 100, NULL, "peak learning rate"},
        {"lr-min", TG_CLI_FLOAT, &c->lr_min, 0, 100, NULL, "learning rate at the end of the cosine"},
        {"warmup", TG_CLI_INT, &c->warmup, 0, 10000000, NULL, "linear warm-up steps"},
        {"clip", TG_CLI_FLOAT, &c->clip, 0, 1e9, NULL, "global grad-norm clip (0: none)"},
        {"momentum", TG_CLI_FLOAT, &c->momentum, 0, 0.999, NULL, "SGD momentum"},
        {"weight-decay", TG_CLI_FLOAT, &c->weight_decay, 0, 10, NULL, "decoupled weight decay (matrices and embeddings; never gains, biases or scales)"},
        {"alphabet", TG_CLI_INT, &c->alphabet, 2, 4095, NULL, "hist: number of symbols"},
        {"keys", TG_CLI_INT, &c->keys, 2, 4096, NULL, "recall: number of keys"},
        {"values", TG_CLI_INT, &c->values, 2, 4096, NULL, "recall: number of values"},
        {"seed", TG_CLI_INT, &c->seed, 0, 2147483647, NULL, "seed of the init and the data"},
        {"threads", TG_CLI_INT, &c->threads, 1, 256, NULL, "threads (OpenMP: the ops split their own work; OpenBLAS runs single-threaded)"},
        {"attn", TG_CLI_STR, &c->attn_spec, 0, 0, NULL, "attention kernel: saved (the built-in op that saves the TxT weights; also composed, its name before 0.20), online (the built-in op that recomputes them with an online softmax; also fused), plugin:FILE.so[:SYMBOL] (your own kernel; docs/plugins.md), or exec:CMD (a kernel in another process, started with /bin/sh -c CMD; docs/exec_protocol.md)"},
        {"exec-timeout", TG_CLI_FLOAT, &c->exec_timeout, 0.1, 86400, NULL, "--attn exec: seconds a reply of the kernel may take before the run fails (exit 6)"},
        {"log", TG_CLI_STR, &c->log, 0, 0, NULL, "TSV log file (default: none)"},
        {"log-every", TG_CLI_INT, &c->log_every, 1, 10000000, NULL, "log every N steps (and the last)"},
        {"save", TG_CLI_STR, &c->save, 0, 0, NULL, "checkpoint file (safetensors), written atomically every --save-every steps, at the end and on SIGINT/SIGTERM/SIGHUP"},
        {"save-every", TG_CLI_INT, &c->save_every, 1, 10000000, NULL, "steps between checkpoints"},
        {"resume", TG_CLI_STR, &c->resume, 0, 0, NULL, "continue the run saved in this checkpoint (same settings; --steps is the total)"},
        {"stop-at", TG_CLI_INT, &c->stop_at, 0, 10000000, NULL, "stop before this step with a checkpoint, as if interrupted (0: run to --steps)"},
        {"on-nan", TG_CLI_CHOICE, &c->on_nan, 0, 0, on_nan_names, "on a non-finite loss or gradient: stop (exit 3) or skip that step's update"},
        {"debug-nan", TG_CLI_INT, &c->debug_nan, -1, 10000000, NULL, "testing aid: poison a gradient with NaN at this step (-1: never)"},
        {"dump-attn", TG_CLI_STR, &c->dump_attn, 0, 0, NULL, "STEP[,STEP...]: save every head's attention weights on the probe sequence at these steps (needs --dump-attn-file)"},
        {"dump-attn-file", TG_CLI_STR, &c->dump_attn_file, 0, 0, NULL, "safetensors file of --dump-attn, rewritten atomically at each of its steps"},
        {"allow-noncausal", TG_CLI_FLAG, &c->allow_noncausal, 0, 0, NULL, "--attn plugin: or exec: train on even when the kernel's measured weights reach keys the mask hides (the causal mask or a window; without it such a run fails, exit 5)"},
        {"overwrite", TG_CLI_FLAG, &c->overwrite, 0, 0, NULL, "a fresh run may replace an existing --log or --save file (of another run); without it such a run is refused"},
        {"sample", TG_CLI_STR, &c->sample, 0, 0, NULL, "--task code: print what the model of --resume writes after this prompt, then exit"},
        {"sample-len", TG_CLI_INT, &c->sample_len, 1, 1000000, NULL, "--sample: bytes to write"},
        {"temperature", TG_CLI_FLOAT, &c->temperature, 0, 100, NULL, "--sample: sampling temperature (0: always the likeliest byte); the draw follows --seed"},
        {"profile", TG_CLI_FLAG, &c->profile, 0, 0, NULL, "print on stderr, after the run, where a training step's time went: per op forward and backward ms, calls, share of the step, GFLOP/s (the first step left out)"},
        {"check", TG_CLI_FLAG, &c->check, 0, 0, NULL, "check the flags and their combination, then exit (0: this run would start) without reading or writing any file"},
    };
    int n = (int)(sizeof o / sizeof o[0]);
    _Static_assert(sizeof o / sizeof o[0] <= ATTN_MAX_OPTS, "raise ATTN_MAX_OPTS");
    memcpy(opts, o, sizeof o);
    return n;
}

tg_model_cfg attn_cfg_model(const attn_cfg *c) {
    return (tg_model_cfg){.vocab = c->vocab, .seq_len = c->seq_len, .d_model = c->d_model, .heads = c->heads,
                       .d_head = c->d_head, .layers = c->layers, .scale_mode = c->scale, .init = c->init,
                       .learned_init = c->learned_init, .learned_param = c->learned_param,
                       .mult = c->scale_mult, .kv_heads = c->kv_heads, .window = c->window, .bias = c->bias,
                       .alibi = c->alibi, .sinks = c->sinks, .softcap = c->softcap, .attn_dropout = c->attn_dropout, .qinit = c->qinit,
                       /* --scale-lr: lr(step) · scale_lr/lr, the model's schedule in proportion */
                       .scale_lr_mult = c->scale_lr > 0 ? c->scale_lr / c->lr : 0.0f};
}

tg_task_cfg attn_cfg_task(const attn_cfg *c) {
    return (tg_task_cfg){.kind = c->task, .vocab = c->vocab, .seq_len = c->seq_len, .corpus = c->corpus, .alphabet = c->alphabet,
                      .keys = c->keys, .values = c->values};
}

static int seen_flag(const tg_cli_opt *opts, int n, const int *seen, const char *name) {
    const tg_cli_opt *o = opts && seen ? tg_cli_find(opts, n, name) : NULL;
    return o ? seen[o - opts] : 0;
}

static int has_control(const char *s) {
    for (; s && *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 1;
    return 0;
}

/* --attn's grammar (the registry's: tg_kernel.h) into c->attn_kind; nothing is opened here. */
static int parse_attn(attn_cfg *c, char *err, size_t errlen) {
    const char *rest;
    char why[400];
    if (tg_kernel_spec(c->attn_spec ? c->attn_spec : "composed", &c->attn_kind, &rest, why, sizeof why))
        return tg_errf(err, errlen, "--attn %s", why);
    return 0;
}

/* The task's flags: the code task's own, --sample, --eval-every, --kv-heads, the task's sizes. */
static int check_task(attn_cfg *c, const tg_cli_opt *opts, int n, const int *seen, char *err, size_t errlen) {
    if (parse_attn(c, err, errlen)) return 1;
    if (c->task == TG_TASK_CODE) {   /* bytes: the vocabulary is 256, whatever --vocab's default says */
        if (seen_flag(opts, n, seen, "vocab") && c->vocab != 256) {
            snprintf(err, errlen, "--task code: the vocabulary is the 256 byte values; --vocab %d is refused", c->vocab);
            return 1;
        }
        c->vocab = 256;
        /* a language model's recipe: small embeddings (docs/results.md#on-real-code); recorded as the flag */
        if (!seen_flag(opts, n, seen, "init")) c->init = TG_INIT_LM;
    } else {
        static const char *const code_only[] = {"data", "eval-every", "sample"};
        for (int i = 0; i < 3; i++)
            if (seen_flag(opts, n, seen, code_only[i])) {
                snprintf(err, errlen, "--%s needs --task code (this run has --task %s)", code_only[i], tg_task_names[c->task]);
                return 1;
            }
    }
    if (c->sample && !c->resume) {
        snprintf(err, errlen, "--sample needs --resume CHECKPOINT (the trained model)");
        return 1;
    }
    if (c->sample && (c->log || c->save || c->dump_attn)) {
        snprintf(err, errlen, "--sample writes nothing but stdout: no --log, --save or --dump-attn with it");
        return 1;
    }
    if (c->eval_every && c->eval_every % c->log_every) {
        snprintf(err, errlen, "--eval-every %d must be a multiple of --log-every %d (the validation loss goes in a logged row)",
                 c->eval_every, c->log_every);
        return 1;
    }
    if (c->kv_heads && c->heads % c->kv_heads) {
        snprintf(err, errlen, "--kv-heads %d does not divide --heads %d (each key/value head serves --heads/--kv-heads "
                 "query heads)", c->kv_heads, c->heads);
        return 1;
    }
    tg_task_cfg tc = attn_cfg_task(c);
    if (tg_task_check(&tc, err, errlen)) return 1;
    return 0;
}

/* The schedule and the scale: the warm-up (a short run's default shortened), the rates, the scale's own flags. */
static int check_schedule(attn_cfg *c, const tg_cli_opt *opts, int n, const int *seen, char *err, size_t errlen) {
    if (c->warmup > c->steps && !seen_flag(opts, n, seen, "warmup")) {
        /* the default warm-up of a short run (a smoke test): a tenth of it, said, and recorded as the flag
         * (the same on --resume with the same --steps, so the same command line resumes) */
        int w = c->steps / 10;
        if (!c->check) fprintf(stderr, "attn_scale: note: --steps %d is shorter than the default --warmup %d: using --warmup %d\n",
                               c->steps, c->warmup, w);
        c->warmup = w;
    }
    if (c->warmup > c->steps) {
        snprintf(err, errlen, "--warmup %d is longer than --steps %d", c->warmup, c->steps);
        return 1;
    }
    if (c->lr_min > c->lr) {
        snprintf(err, errlen, "--lr-min %g is above --lr %g", c->lr_min, c->lr);
        return 1;
    }
    if (!(c->scale_mult > 0.0f && isfinite(c->scale_mult))) {   /* a float, after rounding: 1e-50 is 0 */
        snprintf(err, errlen, "--scale-mult %g: the multiplier must be finite and > 0", c->scale_mult);
        return 1;
    }
    if (c->scale != TG_SCALE_MULT && seen_flag(opts, n, seen, "scale-mult")) {
        snprintf(err, errlen, "--scale-mult needs --scale mult (this run has --scale %s)", tg_scale_names[c->scale]);
        return 1;
    }
    static const char *const learned_only[] = {"learned-init", "learned-param", "scale-lr"};
    for (int i = 0; i < 3; i++)
        if (c->scale != TG_SCALE_LEARNED && seen_flag(opts, n, seen, learned_only[i])) {
            snprintf(err, errlen, "--%s needs --scale learned (this run has --scale %s)", learned_only[i],
                     tg_scale_names[c->scale]);
            return 1;
        }
    return 0;
}

/* The run's files: no control characters, no file two things, what needs --save. */
static int check_files(attn_cfg *c, const tg_cli_opt *opts, int n, const int *seen, char *err, size_t errlen) {
    const char *paths[][2] = {{"log", c->log}, {"save", c->save}, {"resume", c->resume},
                              {"dump-attn-file", c->dump_attn_file}};
    for (int i = 0; i < 4; i++)
        if (has_control(paths[i][1])) {
            snprintf(err, errlen, "--%s: the path contains a control character (tab, newline, ...)", paths[i][0]);
            return 1;
        }
    if (c->log && ((c->save && strcmp(c->log, c->save) == 0) || (c->resume && strcmp(c->log, c->resume) == 0))) {
        snprintf(err, errlen, "--log %s is also the checkpoint file", c->log);
        return 1;
    }
    if (!c->dump_attn != !c->dump_attn_file) {
        snprintf(err, errlen, "--%s needs --%s", c->dump_attn ? "dump-attn" : "dump-attn-file",
                 c->dump_attn ? "dump-attn-file FILE" : "dump-attn STEP[,STEP...]");
        return 1;
    }
    if (c->dump_attn) {
        int steps[ATTN_MAX_DUMPS];
        if (attn_dump_steps(c->dump_attn, c->steps, steps, ATTN_MAX_DUMPS, err, errlen) < 0) return 1;
        for (int i = 0; i < 3; i++)
            if (paths[i][1] && strcmp(paths[i][1], c->dump_attn_file) == 0) {
                snprintf(err, errlen, "--dump-attn-file %s is also the --%s file", c->dump_attn_file, paths[i][0]);
                return 1;
            }
    }
    if (!c->save && (seen_flag(opts, n, seen, "save-every") || c->stop_at)) {
        snprintf(err, errlen, "--%s needs --save FILE", c->stop_at ? "stop-at" : "save-every");
        return 1;
    }
    if (c->stop_at && c->stop_at >= c->steps) {
        snprintf(err, errlen, "--stop-at %d is not before --steps %d", c->stop_at, c->steps);
        return 1;
    }
    if (c->debug_nan >= c->steps) {
        snprintf(err, errlen, "--debug-nan %d is not before --steps %d", c->debug_nan, c->steps);
        return 1;
    }
    return 0;
}

/* Sizes: the largest activation must index with an int, and the whole step
 * must fit in this machine's memory (a rough count: every activation of a
 * block, its gradient, the attention weights, the parameters with their
 * gradient and two optimizer moments). */
static int check_sizes(const attn_cfg *c, char *err, size_t errlen) {
    double B = c->batch, T = c->seq_len, D = c->d_model, H = c->heads, HD = (double)c->heads * c->d_head;
    double L = c->layers, V = c->vocab;
    double biggest = B * T * (4 * D > HD ? 4 * D : HD);
    if (B * H * T * T > biggest) biggest = B * H * T * T;
    if (B * T * V > biggest) biggest = B * T * V;
    if (biggest >= 2147483647.0) {
        snprintf(err, errlen, "--batch %d --seq-len %d --d-model %d --heads %d --d-head %d: one activation would "
                 "have %.3g elements; at most 2^31-1", c->batch, c->seq_len, c->d_model, c->heads, c->d_head, biggest);
        return 1;
    }
    double params = V * D + T * D + 3 * D + D * V + L * (4 * D * HD + 8 * D * D + 2 * HD + H + 10 * D);
    double acts = B * T * (L * (18 * D + 9 * HD) + 3 * D + 3 * V) + L * 2 * B * H * T * T;
    double bytes = 4 * (4 * params + 2 * acts);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double mem = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (mem > 0 && bytes > mem) {
        snprintf(err, errlen, "this model and batch need about %.1f GiB (parameters, optimizer state, activations "
                 "and their gradients); this machine has %.1f GiB", bytes / 1073741824.0, mem / 1073741824.0);
        return 1;
    }
    return 0;
}

int attn_cfg_check(attn_cfg *c, const tg_cli_opt *opts, int n, const int *seen, char *err, size_t errlen) {
    return check_task(c, opts, n, seen, err, errlen) || check_schedule(c, opts, n, seen, err, errlen) ||
           check_files(c, opts, n, seen, err, errlen) || check_sizes(c, err, errlen);
}

int attn_dump_steps(const char *spec, int total, int *steps, int max, char *err, size_t errlen) {
    int n = 0;
    for (const char *p = spec;;) {
        long v = 0;
        const char *d = p;
        for (; *d >= '0' && *d <= '9'; d++) v = v < 1000000000 ? v * 10 + (*d - '0') : v;   /* saturates */
        if (d == p || (*d && *d != ',')) {
            snprintf(err, errlen, "--dump-attn '%.40s': expected steps separated by commas, like 0,60,600", spec);
            return -1;
        }
        if (v > total) {
            snprintf(err, errlen, "--dump-attn: step %ld is beyond --steps %d", v, total);
            return -1;
        }
        if (n && v <= steps[n - 1]) {
            snprintf(err, errlen, "--dump-attn: steps must increase (%d, then %ld)", steps[n - 1], v);
            return -1;
        }
        if (n == max) {
            snprintf(err, errlen, "--dump-attn: at most %d steps", max);
            return -1;
        }
        steps[n++] = (int)v;
        if (!*d) return n;
        p = d + 1;
    }
}
