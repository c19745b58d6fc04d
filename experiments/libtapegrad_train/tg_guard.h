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
/* The handlers found before tg_guard_install, back (tg_train does so when it returns). */
void tg_guard_restore(void);
/* A program stopped by signal sig (tg_train returned TG_TRAIN_STOPPED, r.signal = sig, its checkpoint written)
 * ends by dying of it, default action: the shell that started it then stops too (a loop of runs
 * ends at ^C instead of starting the next). Returns only if the signal is blocked or ignored. */
void tg_guard_reraise(int sig);
int tg_guard_signal(void);              /* 0, or the first signal received */
const char *tg_guard_signal_name(int sig);

/* Crashes (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) while armed: the handler
 * writes one line "# crashed: SIGNAME at step N: what\n" to fd (write(2) only:
 * async-signal-safe), then restores the default action and re-raises, so the
 * process still dies of the signal (exit status 128 + n in a shell; a core
 * dump where enabled). `what` names what ran (a plugin, say); it must stay
 * valid while armed. The run's locks are fcntl locks: the kernel drops them
 * with the process. tg_guard_crash_disarm restores the handlers found. */
void tg_guard_crash_arm(int fd, const char *what);
void tg_guard_crash_step(int step);     /* the step the line names */
void tg_guard_crash_disarm(void);

void tg_guard_forward(const tg_ctx *ctx, const tg_params *P, char *msg, size_t len);
void tg_guard_backward(const tg_ctx *ctx, const tg_params *P, char *msg, size_t len);

#endif
