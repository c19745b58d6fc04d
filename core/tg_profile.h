/* Where a training step's time goes, per op: forward and backward time, calls,
 * share of the step and GFLOP/s, the table torch.profiler gives a PyTorch user.
 *
 *   tg_profile prof;
 *   tg_profile_init(&prof, 1);            // the first step (planning, JIT, first allocations) not counted
 *   tg_profile_attach(&ctx, &prof);
 *   for (...) {
 *       tg_profile_step_begin(&prof);
 *       make_batch(...);  tg_profile_phase(&prof, "batch");
 *       loss = forward(&ctx, ...);          // each op's forward: timed at its tg_record
 *       tg_params_zero_grad(P);  tg_profile_phase(&prof, "zero_grad");
 *       tg_backward(&ctx, loss);            // each node's backward: timed around it
 *       tg_adamw_step(...);  tg_profile_phase(&prof, "optimizer");
 *       tg_profile_step_end(&prof, &ctx);   // the tape's times summed per op name
 *       tg_ctx_reset(&ctx);
 *   }
 *   tg_profile_print(&prof, stdout);
 *
 * How it counts: an op's forward is the time from the previous mark (the step's
 * start, the previous op's tg_record, a phase) to its own tg_record, so it
 * holds the op's work and whatever the caller did since (glue between ops,
 * ops that recorded nothing because no input needs a gradient). Ops make their
 * output before they record (every op in ops/ does), so the time lands on the
 * right op. A backward is timed around the node's call, including the lazy
 * zeroing of the grads it adds into. What no mark covers is "(not in ops)".
 * FLOPs are what the op says it computed (tg_node.flops; matmul and the
 * attention ops say, element-wise ops do not).
 *
 * Off (no profile attached) it costs one branch per node in tg_record and in
 * tg_backward. No allocation: rows for TG_PROFILE_MAX_ROWS names, the rest
 * summed into "(other ops)". Not thread-safe: one profile per context, used by
 * the thread that runs the step (the ops' own threads never touch it). */
#ifndef TG_PROFILE_H
#define TG_PROFILE_H
#include <stdint.h>
#include <stdio.h>

#include "tg_core.h"

#define TG_PROFILE_MAX_ROWS 48

typedef struct {
    const char *name;      /* the op's name as recorded ("tg_matmul"), or a phase's */
    int phase;             /* 1: a phase (tg_profile_phase), not an op */
    int64_t calls;
    double fwd_s, bwd_s;   /* a phase's time is in fwd_s */
    double fwd_flop, bwd_flop;
} tg_profile_row;

struct tg_profile {
    tg_profile_row rows[TG_PROFILE_MAX_ROWS];
    int n_rows;
    int skip;              /* steps still to leave out (warm-up) */
    int steps;             /* steps counted */
    double step_s;         /* their wall time, begin to end */
    double step_t0, mark;  /* clock (s) at the step's start and at the last mark */
    int counting;          /* inside a counted step */
    /* The machine's limit, set by the program (0: unknown; tg_profile_init sets 0): the FMA peak
     * in GFLOP/s of the threads the step runs on. When set, the table gains each op's and the
     * step's share of it (core measures nothing of the machine: the kit's tg_timing_fma_gflops). */
    double peak_gflops;
};

/* skip: how many first steps to leave out (1: the first step plans products,
 * compiles kernels and allocates; it is not a step like the others). */
void tg_profile_init(tg_profile *p, int skip);
/* ctx's ops and backward report to p from now on; NULL detaches. */
void tg_profile_attach(tg_ctx *ctx, tg_profile *p);
void tg_profile_step_begin(tg_profile *p);
/* The time since the last mark goes to the phase `name` (a string that lives
 * as long as p: a literal). */
void tg_profile_phase(tg_profile *p, const char *name);
/* Ends the step: every node on ctx's tape adds its times and FLOPs to its op's
 * row (call it before tg_ctx_reset). */
void tg_profile_step_end(tg_profile *p, const tg_ctx *ctx);
/* The table, one row per op and phase, most time first; "# " lines around it.
 * Columns: name calls/step fwd_ms bwd_ms total_ms share GFLOP/s (per step,
 * share of the step's wall time; GFLOP/s over fwd+bwd where the op counts), and
 * of_fma (GFLOP/s over peak_gflops) when peak_gflops is set. */
void tg_profile_print(const tg_profile *p, FILE *f);
/* The same as tab-separated columns with a header line (for tglogs.py); of_fma is nan when
 * peak_gflops is not set. */
void tg_profile_print_tsv(const tg_profile *p, FILE *f);

/* For tg_record and tg_backward (core/ctx.c): the clock and the mark. */
double tg_profile_clock(void);
void tg_profile_mark_forward(tg_profile *p, tg_node *n);

#endif
