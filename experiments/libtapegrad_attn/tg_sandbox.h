/* Kernel code run in a child process, its outcome typed: the one way the kernel layer and the
 * programs run code they did not write (a plugin, a kernel in another process) where a crash, a
 * hang or stray output must not be theirs: attn_check's probes and its --train comparison, the
 * programs' pre-flight of a kernel (tg_model_preflight). Since 0.20; built on core's tg_child_run_out.
 *
 *   static int job(tg_sandbox *sb, void *u) {
 *       tg_ctx ctx; tg_ctx_init(&ctx, 0);
 *       tg_set_error_handler(&ctx, tg_sandbox_fail, sb);   (a tg_fail: the outcome FAILED, its message)
 *       ... the kernel's calls ...;  tg_sandbox_stage(sb, 1);   (how far it got)
 *       tg_sandbox_send(sb, &result, sizeof result);           (records, whole and in order)
 *       return 0;
 *   }
 *   tg_sandbox_end end;
 *   tg_sandbox_run(job, &data, &(tg_sandbox_opts){.seconds = 60, .kernel = K, .on_record = got, .u = &me}, &end);
 *
 * In the child, fatal signals are at their default (a crash is the answer) and no core file is
 * written; with .kernel, a kernel in another process is started again for the child first (the
 * parent's pipes stay the parent's: tg_kernel_reopen) and closed at the end. Call it before any
 * OpenMP region has run in this process (the child forks from it). */
#ifndef TG_SANDBOX_H
#define TG_SANDBOX_H
#include <stddef.h>

/* How the child ended, worst first as told: */
enum {
    TG_SANDBOX_OK,        /* fn returned 0 */
    TG_SANDBOX_FAILED,    /* a tg_fail in the child (tg_sandbox_fail): msg holds its message */
    TG_SANDBOX_CRASHED,   /* it died of a signal (signal) */
    TG_SANDBOX_HUNG,      /* killed at the limit */
    TG_SANDBOX_EXITED,    /* fn returned non-zero (status) */
    TG_SANDBOX_NOT_RUN    /* no child could be started (msg) */
};

typedef struct tg_sandbox tg_sandbox;   /* the child's side: where its records go */

typedef struct tg_sandbox_end {
    int outcome;           /* TG_SANDBOX_* */
    int signal;            /* CRASHED: the signal */
    int status;            /* EXITED: fn's return value */
    int stage;             /* the last stage the child reached (tg_sandbox_stage), 0: none */
    char msg[1024];        /* FAILED: tg_fail's message; NOT_RUN: why */
    size_t stray;          /* bytes the child wrote on its standard output, unless on_output took them */
    char stray_head[160];  /* their first line */
} tg_sandbox_end;

struct tg_kernel;
typedef struct tg_sandbox_opts {
    double seconds;                    /* the wall-clock limit (<= 0: none) */
    struct tg_kernel *kernel;          /* NULL, or the kernel the child calls (tg_kernel.h): an exec kernel
                                          gets a process of the child's own */
    void (*on_record)(void *u, const void *data, size_t n);   /* each record the child sent, whole, in order */
    void *u;
    /* the child's standard output as it comes (NULL: kept out of the caller's, counted as stray) */
    void (*on_output)(void *u, const char *bytes, size_t n);
} tg_sandbox_opts;

/* fn(sb, user) in a child under o; *end says how it ended. 0, or -1 when no child could be
 * started (end->outcome TG_SANDBOX_NOT_RUN, why in end->msg). */
int tg_sandbox_run(int (*fn)(tg_sandbox *sb, void *user), void *user, const tg_sandbox_opts *o, tg_sandbox_end *end);

/* In the child: one record to the parent's on_record (at most 1 MiB). 0, or -1 when it could not
 * be sent (the parent is gone). */
int tg_sandbox_send(tg_sandbox *sb, const void *data, size_t n);
/* In the child: how far it got (any number above 0); the parent's end->stage is the last. */
void tg_sandbox_stage(tg_sandbox *sb, int stage);
/* In the child, as a context's error handler (tg_set_error_handler(ctx, tg_sandbox_fail, sb)):
 * the message to the parent, then the child exits; the outcome is TG_SANDBOX_FAILED. */
void tg_sandbox_fail(const char *msg, void *sb);

#endif
