/* attn_scale's configuration: its defaults, its flag table and the checks that
 * involve more than one flag. A library piece, so that the flag fuzzer and the
 * checkpoint tests use exactly the binary's table. */
#ifndef TG_ATTN_CFG_H
#define TG_ATTN_CFG_H
#include <stddef.h>

#include "tg_cli.h"
#include "tg_kernel.h"
#include "tg_model.h"
#include "tg_tasks.h"

enum { OPT_ADAM, OPT_SGD, OPT_ADAFACTOR };
extern const char *const optim_names[];
extern const char *const precision_names[];   /* --precision's choices, by tg_precision (attn_scale, bench_step) */
enum { ONNAN_STOP, ONNAN_SKIP };
extern const char *const on_nan_names[];

typedef struct {
    int task, steps, batch, seq_len, vocab, d_model, heads, d_head, layers;
    int scale, init, optim, warmup, seed, threads, log_every, learned_init, learned_param;
    int alphabet, keys, values;
    int precision;          /* --precision: tg_precision of the products (tg_ctx_set_precision) */
    int kv_heads, window;   /* grouped-query heads (0: --heads), a sliding window of keys (0: none) */
    int bias, alibi, sinks; /* TG_BIAS_*, switches */
    float softcap, attn_dropout;
    int qinit;              /* TG_QINIT_*: W_q's initialisation as the init's, or folded (times 1/sqrt(dh)) */
    float lr, lr_min, clip, momentum, weight_decay, scale_mult, scale_lr;
    const char *log;
    /* --attn: a kernel as the registry reads it (tg_kernel.h: saved, online, plugin:FILE.so[:SYMBOL],
     * exec:CMD; composed and fused, 0.19's names); attn_cfg_check checks its grammar and sets
     * attn_kind (TG_KERNEL_*) from it; the program opens it */
    const char *attn_spec;
    int attn_kind;
    float exec_timeout;   /* --exec-timeout: seconds an exec kernel's reply may take */
    /* attention maps of the probe sequence at some steps (attn_dump.h) */
    const char *dump_attn, *dump_attn_file;
    /* runs that survive: checkpoints, resume, failure handling */
    const char *save, *resume;
    int save_every, stop_at, on_nan, debug_nan;
    int overwrite, check, profile;   /* switches of the invocation, not settings of the run */
    int allow_noncausal;             /* plugins: a leaking kernel trains on (a switch of the invocation) */
    /* task code: the corpus (tg_corpus.h; NULL: libc6-dev's headers), validation loss every N steps */
    const char *data;
    int eval_every;
    const struct tg_corpus *corpus;   /* set by the program once the corpus is loaded (attn_cfg_task passes it on) */
    /* --sample PROMPT: print what the model of --resume writes after PROMPT, then exit */
    const char *sample;
    int sample_len;
    float temperature;
} attn_cfg;

void attn_cfg_defaults(attn_cfg *c);

/* Fills opts (room for ATTN_MAX_OPTS) with the flags bound to c's fields;
 * returns how many. */
#define ATTN_MAX_OPTS 60
int attn_cfg_options(attn_cfg *c, tg_cli_opt *opts);

/* The flags a resumed run may change (NULL-terminated): how long it runs,
 * where it logs, saves and dumps, threads. Every other flag must match the
 * checkpoint's. */
extern const char *const attn_run_options[];

/* The flags added after runs were recorded, with the value every earlier run
 * had (tg_cli_added_value): not written while they hold it, so earlier logs and
 * checkpoints stay valid and a default run's log keeps its bytes. */
extern const char *const attn_added_flags[];

/* The model's and the task's settings out of the flags (the one place that
 * maps them, for the binary, the fuzzer and the tests). */
tg_model_cfg attn_cfg_model(const attn_cfg *c);
tg_task_cfg attn_cfg_task(const attn_cfg *c);

/* The checks that involve several flags (task sizes, warm-up against steps,
 * --save-every without --save, paths that collide, a model too big for this
 * machine's memory), after tg_cli_parse; opts, n and `seen` are tg_cli_parse's. No file is
 * touched. Returns 0, or non-zero with a message in err. */
int attn_cfg_check(attn_cfg *c, const tg_cli_opt *opts, int n, const int *seen, char *err, size_t errlen);

/* --dump-attn's list "STEP[,STEP...]" into steps (room for max), each in
 * [0, total], strictly increasing. Returns how many, or -1 with a message in err. */
#define ATTN_MAX_DUMPS 64
int attn_dump_steps(const char *spec, int total, int *steps, int max, char *err, size_t errlen);

#endif
