#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

void tg_test_fill(tg_params *P, uint64_t seed, float std) {
    tg_rng r;
    tg_rng_seed(&r, seed, 7);
    tg_fill_normal(&r, P->data, (int64_t)P->numel, 0.0f, std);
}

void tg_test_catch_handler(const char *msg, void *user) {
    tg_test_catch *c = user;
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    c->fired = 1;
    longjmp(c->jb, 1);
}

void tg_test_catch_errors(tg_ctx *ctx, tg_test_catch *c) {
    memset(c->msg, 0, sizeof c->msg);
    c->fired = 0;
    tg_set_error_handler(ctx, tg_test_catch_handler, c);
}
