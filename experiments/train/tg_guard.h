/* What stops a run cleanly: SIGINT/SIGTERM/SIGHUP, and non-finite numbers.
 *
 * Signals: tg_guard_install() makes SIGINT, SIGTERM and SIGHUP set a flag (the handler
 * does nothing else: no I/O in a handler); the training loop polls
 * tg_guard_signal() once a step, saves, flushes and exits 128 + signal. A second
 * signal of the same kind gets the default action (kill), for an impatient ^C.
 *
 * Non-finite: after a forward pass whose loss is inf/NaN, tg_guard_forward names
 * the first parameter holding a non-finite value, or else the first op on the
 * tape (execution order) whose output has one; after a backward pass whose
 * gradient norm is not finite, tg_guard_backward names the first parameter with a
 * non-finite gradient and the first op, in backward order, whose output
 * gradient went non-finite. */
#ifndef TG_GUARD_H
#define TG_GUARD_H
#include <stddef.h>

#include "tg_core.h"

void tg_guard_install(void);
int tg_guard_signal(void);              /* 0, or the first signal received */
const char *tg_guard_signal_name(int sig);

void tg_guard_forward(const tg_ctx *ctx, const tg_params *P, char *msg, size_t len);
void tg_guard_backward(const tg_ctx *ctx, const tg_params *P, char *msg, size_t len);

#endif
