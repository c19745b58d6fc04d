#define _GNU_SOURCE   /* mkdtemp, strdup */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "gradcheck.h"
#include "tg_ops.h"

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

typedef struct { tg_tensor *x; tg_test_op1 op; void *user; int plain_first; } twice_case;

static tg_tensor *f_twice(tg_ctx *ctx, void *u) {
    twice_case *c = u;
    tg_tensor *h = tg_scale(ctx, c->x, 1.5f);
    tg_tensor *plain = c->plain_first ? tg_sum(ctx, tg_scale(ctx, h, -0.5f)) : NULL;
    tg_tensor *a = tg_sum(ctx, c->op(ctx, h, c->user));
    tg_tensor *b = tg_sum(ctx, c->op(ctx, h, c->user));
    if (!plain) plain = tg_sum(ctx, tg_scale(ctx, h, -0.5f));
    return tg_add(ctx, tg_add(ctx, a, b), plain);
}

int tg_test_used_twice(const char *label, tg_params *P, tg_tensor *x, tg_test_op1 op, void *user) {
    int bad = 0;
    char name[160];
    for (int order = 0; order < 2; order++) {
        twice_case c = {x, op, user, order};
        snprintf(name, sizeof name, "%s, input used twice%s", label, order ? " (plain use first)" : "");
        bad += tg_gradcheck(name, P, f_twice, &c, NULL);
    }
    return bad;
}

int tg_test_used_twice_shape(const char *label, int ndim, const int *shape, tg_test_op1 op, void *user) {
    tg_params P;
    tg_params_init(&P);
    tg_tensor *x = tg_param(&P, "x", ndim, shape);
    tg_params_alloc(&P);
    tg_test_fill(&P, 21, 1.0f);
    int bad = tg_test_used_twice(label, &P, x, op, user);
    tg_params_free(&P);
    return bad;
}

int tg_test_make_dir(void **state) {
    char tmpl[] = "/tmp/tg_test_XXXXXX";
    char *d = mkdtemp(tmpl);
    if (!d || !(*state = strdup(d))) return -1;
    return 0;
}

int tg_test_remove_dir(void **state) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", (char *)*state);
    int rc = system(cmd);
    free(*state);
    return rc;
}
