/* Errors go through a replaceable handler; if it returns we abort, so an op
 * never continues past a detected misuse. */
#include "tg_core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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
