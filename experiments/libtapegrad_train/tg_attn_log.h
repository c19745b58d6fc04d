/* The attention columns of the run log (the schema: docs/logs.md), for any
 * program that logs attention health the way attn_scale does, so that the log
 * tools (tapegrad-logs summarize|plot|logat, the gnuplot scripts) read it.
 *
 * part 0 (right after "loss"): ent_mean, ent_l<l>_h<h>, maxlogit_l<l>,
 *   sat_l<l>, nent_l<l>_h<h>        (nent = entropy / uniform entropy)
 * part 1 (right after "lr"):  scale_l<l>_h<h>   (the multiplier of q·k each head
 *   used: scale · head_scale for a built-in op, the measured c_h for a plugin)
 * A value that was not measured is written "nan" (its layer's maxlogit and sat
 * too), never a made-up number. */
#ifndef TG_ATTN_LOG_H
#define TG_ATTN_LOG_H
#include <stdio.h>

#include "tg_ops.h"
#include "tg_runlog.h"

/* Column names, each after a tab. */
void tg_attn_log_columns(FILE *f, int layers, int heads, int part);
/* One row's values, each after a tab. stats->H = heads; its arrays (and mult)
 * hold layers × heads values, layer-major. uniform: tg_attn_uniform_entropy. */
void tg_attn_log_values(tg_runlog *L, const tg_attn_stats *stats, int layers, double uniform, const float *mult,
                        int part);
/* The mean entropy over every head (NaN if one was not measured). */
double tg_attn_mean_entropy(const tg_attn_stats *stats, int layers);

#endif
