/* Measuring an attention kernel from the outside: its weights, their health,
 * and the multiplier of q·k it actually applied, without trusting anything the
 * kernel reports.
 *
 * How: the kernel is called once more on the layer's q and k (and head_scale,
 * scale, causal) with V = the identity over key positions (v [B, T, H, dv],
 * v[b, j, h, :] = e_j, dv = T, or dv = d with zero columns after the first T
 * when T < d, so that a kernel written for dv = d takes it), so that its
 * output row i of head h IS the weight row P[i, :] (its first T columns; the
 * others must stay 0). Grad is off for that call (nothing is recorded), and a tg_fail of the
 * kernel (say, one that insists dv = d) is caught. The weights must then look
 * like weights: finite, >= 0, rows summing to 1, and (causal) no weight on j > i;
 * otherwise nothing is measured and err says why.
 * From P and the logits S = q·k (computed here, in double):
 *   entropy[h]    mean over b, i of −Σ_j p_ij ln p_ij, in nats
 *   saturation[h] share of rows whose largest weight is > 0.99
 *   mult[h]       the multiplier c_h in P = softmax(c_h · S): the least-squares
 *                 slope of ln p_ij against S_ij, both centred per row, over the
 *                 entries with p_ij > 1e-30 (NaN when no row keeps two)
 *   max_logit[h]  c_h · S over the unmasked entries, at its largest
 * These are the quantities tg_attention's stats report, so a log's columns mean
 * the same for a built-in op and a plugin. Cost: one more call of the kernel with
 * dv = max(T, d), and B·H·T²·d multiply-adds for S, at each logged step. */
#ifndef TG_ATTN_PROBE_H
#define TG_ATTN_PROBE_H
#include <stddef.h>

#include "tg_core.h"
#include "tg_ops.h"

/* stats: arrays of stats->H (NULL ones skipped); mult: [H] or NULL; probs:
 * NULL or room for B·H·T·T floats, [B, H, T, T] (masked entries as the kernel
 * gave them). Returns 0, or -1 with a message in err (stats untouched). */
int tg_attn_measure(tg_ctx *ctx, tg_attention_fn fn, tg_tensor *q, tg_tensor *k, tg_tensor *head_scale, float scale,
                    int causal, tg_attn_stats *stats, float *mult, float *probs, char *err, size_t errlen);

/* fn(ctx, q, k, v, head_scale, scale, causal, NULL) with ctx->grad_enabled = grad
 * for the call and a tg_fail inside it caught: the output, or NULL with the
 * kernel's message in msg (msg[0] = 0 when it returned NULL itself). ctx's
 * error handler and grad setting are restored. */
tg_tensor *tg_attn_call_caught(tg_ctx *ctx, tg_attention_fn fn, tg_tensor *q, tg_tensor *k, tg_tensor *v,
                               tg_tensor *head_scale, float scale, int causal, int grad, char *msg, size_t len);

/* Before a run: whether fn can be measured at all, on random q, k of the shapes
 * [B, T, H, d] in a child process (a kernel that crashes or hangs for dv != d
 * takes the child with it, not the caller), with a limit of `seconds`. Returns
 * 0, or -1 with the reason in err. Call it before any OpenMP region has run in
 * this process (the child forks from it). */
int tg_attn_measure_preflight(tg_attention_fn fn, int B, int T, int H, int d, int causal, float scale,
                              double seconds, char *err, size_t errlen);

#endif
