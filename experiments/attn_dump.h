/* attn_scale --dump-attn: every head's attention weights on a fixed probe
 * sequence at chosen steps, in a safetensors file, for scripts/plot_attn.sh.
 *
 * The probe is the first sequence tg_task_batch draws from a PCG32 seeded with
 * (ATTN_PROBE_SEED, ATTN_PROBE_STREAM): the same tokens for every run of a task
 * and size, whatever --seed, and never taken from the training data stream.
 * At step s (the model that logs row s: s updates done) the probe goes through
 * the model on a context of its own, through the composed attention op whatever
 * --attn says (the fused op keeps no weights), with no stats and no backward:
 * no RNG, parameter, gradient, optimizer state or statistic of the run changes,
 * so the log is the same with and without the dump.
 *
 * The file: "probe.tokens" (I64 [T]) and one F32 [T, T] tensor per layer, head
 * and step, "attn.l<l>.h<h>.step<s>" (row i: query position i, masked entries
 * 0), with metadata format "tapegrad.attn_maps", "steps" (those in the file,
 * comma-separated), the probe's seed and stream, and as "config.<flag>" every
 * flag but the paths and those a resumed run may change (attn_run_options). It is rewritten atomically (tg_st_write) after each dump
 * step, so a run that dies keeps the maps made so far. A resumed run keeps the
 * maps of steps before its checkpoint from the existing file when that file is
 * this run's (same probe, same settings), and makes the rest. */
#ifndef TG_ATTN_DUMP_H
#define TG_ATTN_DUMP_H
#include <stddef.h>

#include "attn_cfg.h"
#include "tg_cli.h"
#include "tg_model.h"

#define ATTN_PROBE_SEED 1u
#define ATTN_PROBE_STREAM 0x9b0beu

typedef struct {
    const char *path;
    const tg_cli_opt *opts;
    int n_opts;
    int steps[ATTN_MAX_DUMPS], n_steps;
    int made[ATTN_MAX_DUMPS];   /* 1: the maps of steps[i] are in `maps` */
    int T, L, H;
    int *tokens;                /* the probe [T] */
    float *maps;                /* n_steps × L × [1, H, T, T] */
    tg_ctx ctx;                 /* the probe's own */
    int ctx_ready;
} attn_dump;

/* The probe tokens of a task: the first sequence of (ATTN_PROBE_SEED,
 * ATTN_PROBE_STREAM). tokens gets seq_len ints. */
void attn_probe_tokens(const tg_task_cfg *t, int *tokens);

/* From c->dump_attn and c->dump_attn_file (both set): the steps, the probe,
 * the memory, and the file's folder tried (as --save's). resume_step > 0: keep
 * the existing file's maps of earlier steps when it is this run's; info gets a
 * line saying what was kept or why nothing was. Touches no file but a test file
 * it removes. Returns 0, or -1 with a message in err. */
int attn_dump_init(attn_dump *d, const attn_cfg *c, const tg_cli_opt *opts, int n_opts, int resume_step, char *info,
                   size_t infolen, char *err, size_t errlen);

/* At a training step: if it is one of the dump steps, computes its maps from m
 * and rewrites the file. Returns 0 (also when there is nothing to do), or -1
 * with a message in err when the file could not be written. */
int attn_dump_step(attn_dump *d, tg_model *m, int step, char *err, size_t errlen);

/* The maps' products looked up once, their maps thrown away: run before the
 * planning pass ends (tg_gemm_plan.h), so none is first met inside the loop. */
void attn_dump_plan(attn_dump *d, tg_model *m);

void attn_dump_free(attn_dump *d);

#endif
