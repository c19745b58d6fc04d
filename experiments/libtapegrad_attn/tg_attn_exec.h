/* An attention kernel in another process (docs/exec_protocol.md): tapegrad's
 * side of the exec protocol, version 1. tg_attn_exec_open starts CMD with
 * /bin/sh -c in a process group of its own, greets it and makes x->kernel, a
 * tg_attn_kernel like a plugin's: tg_attn_kernel_call(ctx, &x->kernel, args)
 * sends a forward, and the node it records sends the backward (dout) and adds
 * the gradients it gets back; every id is released. The kernel's stderr lines
 * reach this process's stderr prefixed "[kernel NAME] ".
 *
 * A kernel that dies, closes its output, answers garbage, the wrong message,
 * id or shape, or nothing within x->timeout seconds: tg_fail on the call's
 * context naming the kernel and the call ("exec kernel K: forward 3
 * (q [1,8,2,16]): no answer in 60 s"); the process group is killed and reaped
 * at once, and every later call fails the same way. A kernel that answers
 * `error` (it refused the call) fails that call with its message and serves on.
 * Not thread-safe: one call at a time (the ops' threads never call a kernel).
 * x must stay where it is while open (x->kernel.self points to it).
 *
 * A forked child must not speak on its parent's pipes (the two would interleave
 * frames): a child that calls the kernel first calls tg_attn_exec_reopen, which
 * starts a kernel of its own with the same command; a call from a child that
 * did not fails naming the problem. The sandbox (tg_sandbox.h, opts.kernel) does this itself. */
#ifndef TG_ATTN_EXEC_H
#define TG_ATTN_EXEC_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tg_core.h"
#include "tg_ops.h"

#define TG_ATTN_EXEC_PROTOCOL "1"
#define TG_ATTN_EXEC_TIMEOUT 60.0   /* seconds a reply may take, by default */
#define TG_ATTN_EXEC_START 60.0     /* seconds the hello may take at least (start-up: an interpreter, imports) */

typedef struct tg_attn_exec {
    tg_attn_kernel kernel;   /* name and features from the kernel's hello; self = this struct */
    pid_t pid;               /* the shell's (and the group's) pid; 0 once reaped */
    int to, from, err;       /* our ends of its stdin, stdout, stderr */
    double timeout;
    uint64_t next_id;
    int failed;              /* 1 after a failure: later calls fail at once */
    int calls_failed;        /* calls that failed, broken or refused (an error reply) */
    pid_t owner;             /* the process that started it: the only one that may call it */
    char name[128], cmd[1024];
    char why[768];           /* the failure, for later calls */
    char line[512];          /* a stderr line being assembled */
    size_t line_len;
    unsigned char *sbuf, *rbuf;   /* the last frame sent and received, kept for the next (0.15) */
    size_t scap, rcap;
    char last[512];          /* its last non-empty stderr line, for the message when it dies (0.16) */
} tg_attn_exec;

/* Starts and greets the kernel. 0, or -1 with a message in err (naming the
 * command: it did not start, exited, or answered the hello badly); nothing is
 * left running on failure. */
int tg_attn_exec_open(tg_attn_exec *x, const char *cmd, double timeout, char *err, size_t errlen);

/* In a forked child of the process that opened x: forgets the parent's kernel
 * (its pipes closed here only; the parent's kernel runs on) and starts one of
 * the child's own with the same command and limit, which must greet with the
 * same name and features. 0, or -1 with a message in err (x is then failed). */
int tg_attn_exec_reopen(tg_attn_exec *x, char *err, size_t errlen);

/* x when k is an exec kernel's (tg_attn_exec.kernel), else NULL. */
tg_attn_exec *tg_attn_exec_of(const tg_attn_kernel *k);

/* bye, then the process group is waited for (2 s) or killed, and reaped. */
void tg_attn_exec_close(tg_attn_exec *x);

#endif
