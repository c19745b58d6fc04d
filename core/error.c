/* Errors go through a replaceable handler; if it returns we abort, so an op
 * never continues past a detected misuse. */
#include "tg_core.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

_Noreturn void tg_fail_h(const tg_errh *h, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (h && h->fn) h->fn(msg, h->user);
    else fprintf(stderr, "tapegrad: %s\n", msg);
    abort();
}

_Noreturn void tg_fail(tg_ctx *ctx, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tg_fail_h(ctx ? &ctx->err : NULL, "%s", msg);
}

int tg_errf(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* tg_try: the handler longjmps back to the tg_try frame of the thread that
 * called it. A tg_fail from elsewhere (another thread, or inside an OpenMP
 * region, where a longjmp out is undefined) is left to abort as before. */
typedef struct {
    jmp_buf env;
    pthread_t thread;
    char *err;
    size_t errlen;
} try_frame;

static void try_handler(const char *msg, void *user) {
    try_frame *t = user;
#ifdef _OPENMP
    if (omp_in_parallel()) return;
#endif
    if (!pthread_equal(pthread_self(), t->thread)) return;
    if (t->err && t->errlen) snprintf(t->err, t->errlen, "%s", msg);
    longjmp(t->env, 1);
}

int tg_try(tg_ctx *ctx, void (*fn)(tg_ctx *ctx, void *user), void *user, char *err, size_t errlen) {
    const tg_errh saved = ctx->err;
    try_frame t = {.thread = pthread_self(), .err = err, .errlen = errlen};
    if (setjmp(t.env)) {
        ctx->err = saved;
        return -1;
    }
    ctx->err = (tg_errh){try_handler, &t};
    fn(ctx, user);
    ctx->err = saved;
    return 0;
}
