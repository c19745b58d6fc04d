/* Measuring an attention kernel from the outside: its weights, their health,
 * and the multiplier of q·k it actually applied, without trusting anything the
 * kernel reports.
 *
 * How: the kernel is called once more with the call's args (q, k, head_scale,
 * scale, causal, window, kv_len, bias, ALiBi, softcap, sinks: all as given;
 * dropout off; stats NULL) but V = the identity over key positions
 * (v [B, Tk, Hkv, dv], v[b, j, g, :] = e_j, dv = Tk, or dv = d with zero columns
 * after the first Tk when Tk < d, so that a kernel written for dv = d takes it),
 * so that its output row i of head h IS the weight row P[i, :] (its first Tk
 * columns; the others must stay 0). Grad is off for that call (nothing is
 * recorded), and a tg_fail of the kernel is caught. The weights must then look
 * like weights: finite, >= 0, rows summing to 1 (with sinks: at most 1; a row
 * that sees no key: 0); otherwise nothing is measured and err says why. Weight
 * on a key the args hide (tg_attn_visible) is a leak: TG_MEASURE_LEAK.
 * From P and the logits S = q·k of each query head with its key/value head
 * (computed here, in double):
 *   entropy[h]    mean over b, i (rows that see a key) of −Σ_j p_ij ln p_ij, nats
 *   saturation[h] share of those rows whose largest weight is > 0.99
 *   mult[h]       the multiplier c_h in P = softmax(c_h · S + bias − ALiBi): the
 *                 least-squares slope of ln p_ij + ALiBi − bias against S_ij,
 *                 both centred per row, over the visible entries with
 *                 p_ij > 1e-30 (NaN when no row keeps two). Under a softcap it
 *                 is the slope of the capped logits: an effective multiplier.
 *   max_logit[h]  c_h · S over the visible entries, at its largest
 * These are the quantities the built-in ops' stats report, so a log's columns
 * mean the same for a built-in op and a plugin. Cost: one more call of the
 * kernel with dv = max(Tk, d), and B·H·Tq·Tk·d multiply-adds for S, at each
 * logged step. */
#ifndef TG_ATTN_PROBE_H
#define TG_ATTN_PROBE_H
#include <stddef.h>

#include "tg_core.h"
#include "tg_ops.h"

enum { TG_MEASURE_OK = 0, TG_MEASURE_FAILED = -1, TG_MEASURE_LEAK = -2 };

/* stats: arrays of stats->H (NULL ones skipped); mult: [H] or NULL; probs:
 * NULL or room for B·H·Tq·Tk floats, [B, H, Tq, Tk] (hidden entries as the kernel
 * gave them). Returns TG_MEASURE_OK, or TG_MEASURE_FAILED / TG_MEASURE_LEAK with
 * a message in err (stats untouched). */
int tg_attn_measure(tg_ctx *ctx, const tg_attn_kernel *kernel, const tg_attn_args *args, tg_attn_stats *stats,
                    float *mult, float *probs, char *err, size_t errlen);

/* How far kernel's weights may stray from exact ones (a row's sum from 1, a weight from its equal):
 * 1e-3 plus two roundings of its declared precision (each weight, then the output: 0.0088 in bf16).
 * Since 0.21; the measurement above and attn_check's probes read weights with it. */
double tg_attn_weight_tol(const tg_attn_kernel *kernel);

/* The kernel's weights as they are, unchecked: the call of args with V = the
 * identity (as above; dropout as args say, so a dropout probe sees its mask)
 * into probs [B, H, Tq, Tk]. 0, or -1 with a message in err (refused, wrong
 * shape, something in V's zero columns). */
int tg_attn_weights(tg_ctx *ctx, const tg_attn_kernel *kernel, const tg_attn_args *args, float *probs, char *err,
                    size_t errlen);

/* tg_attn_kernel_call(ctx, kernel, args) with ctx->grad_enabled = grad for the
 * call and a tg_fail inside it caught: the output, or NULL with the kernel's
 * message in msg (msg[0] = 0 when it returned NULL itself). ctx's error handler
 * and grad setting are restored. */
tg_tensor *tg_attn_call_caught(tg_ctx *ctx, const tg_attn_kernel *kernel, const tg_attn_args *args, int grad,
                               char *msg, size_t len);

#endif
