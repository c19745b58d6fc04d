/* Code you do not trust, run in a forked child with a wall-clock limit, its
 * answer read from a pipe. Code we did not write may crash or hang (a BLAS
 * kernel the CPU cannot run, an attention plugin): the child takes it, not the
 * caller. The one fork-with-timeout runner of tapegrad: the BLAS self-check
 * (core/blas.c), attn_check's probes and its training comparison, the plugin
 * pre-flight (the training kit). */
#ifndef TG_CHILD_H
#define TG_CHILD_H
#include <stddef.h>

typedef struct {
    int timed_out;   /* killed at the limit */
    int signal;      /* > 0: died of this signal */
    int status;      /* exit status otherwise */
} tg_child_end;

/* fork; in the child fatal signals are reset to their default (a crash is the
 * answer: a sanitizer's handler would exit 1 instead), then fn(user, fd) runs
 * and the child _exits with its return value. The parent passes every byte the
 * child writes to fd to on_bytes(u, bytes, n) as it comes, until the child ends
 * or `seconds` pass on a monotonic clock (then SIGKILL; seconds <= 0: no
 * limit). Core dumps are off in the child (a crash is an answer, not a core
 * file). Returns 0 with *end
 * filled, or -1 when no child could be started (err). Call it before any OpenMP
 * region has run in this process (the child forks from it). */
int tg_child_run(int (*fn)(void *user, int fd), void *user, double seconds,
                 void (*on_bytes)(void *u, const char *bytes, size_t n), void *u, tg_child_end *end, char *err,
                 size_t errlen);

/* tg_child_run with the child's standard output taken too (since 0.20): its fd 1 is a pipe to
 * this process, whose bytes go to on_out(u_out, bytes, n) as they come (on_out NULL: dropped), so
 * what code run in the child prints cannot mix with the caller's own output. What the child wrote
 * there before it ended is all passed on; a process it started that still holds the pipe is not
 * waited for. */
int tg_child_run_out(int (*fn)(void *user, int fd), void *user, double seconds,
                     void (*on_bytes)(void *u, const char *bytes, size_t n), void *u,
                     void (*on_out)(void *u_out, const char *bytes, size_t n), void *u_out, tg_child_end *end,
                     char *err, size_t errlen);

#endif
