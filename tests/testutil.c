#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

void tg_test_fill(tg_params *P, uint64_t seed, float std) {
    tg_rng r;
    tg_rng_seed(&r, seed, 7);
    tg_fill_normal(&r, P->data, (int64_t)P->numel, 0.0f, std);
}

static double reduce(const tg_tensor *out, const float *R) {
    double s = 0;
    for (int64_t i = 0; i < out->numel; i++) s += (double)out->data[i] * (double)R[i];
    return s;
}

static double eval(tg_ctx *ctx, tg_gc_fn f, void *user, float *R, int64_t *nout) {
    tg_ctx_reset(ctx);
    tg_tensor *out = f(ctx, user);
    *nout = out->numel;
    return reduce(out, R);
}

int tg_gradcheck(const char *label, tg_params *P, tg_gc_fn f, void *user, const tg_gc_opts *o) {
    tg_gc_opts d = { .h = 1e-2, .rtol = 1e-3, .atol = 1e-4, .verbose = getenv("TG_GC_VERBOSE") != NULL };
    if (!o) o = &d;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);

    /* analytic: one VJP with seed R */
    tg_tensor *out = f(&ctx, user);
    float *R = malloc((size_t)out->numel * sizeof *R);
    tg_rng r;
    tg_rng_seed(&r, 12345, 1);
    tg_fill_normal(&r, R, out->numel, 0.0f, 1.0f);
    tg_params_zero_grad(P);
    tg_backward_seed(&ctx, out, R);
    float *analytic = malloc(P->numel * sizeof *analytic);
    memcpy(analytic, P->grad, P->numel * sizeof *analytic);
    int64_t n0 = out->numel;

    /* numeric, no tape needed */
    ctx.grad_enabled = 0;
    double *numeric = malloc(P->numel * sizeof *numeric);
    double maxnum = 0;
    for (size_t i = 0; i < P->numel; i++) {
        float x = P->data[i];
        double h = o->h * (fabs(x) > 1 ? fabs(x) : 1);
        double dh[2];
        for (int k = 0; k < 2; k++) {           /* steps h and h/2 */
            double hk = k ? h / 2 : h;
            float xp = (float)(x + hk), xm = (float)(x - hk);
            int64_t n1, n2;
            P->data[i] = xp;
            double lp = eval(&ctx, f, user, R, &n1);
            P->data[i] = xm;
            double lm = eval(&ctx, f, user, R, &n2);
            P->data[i] = x;
            dh[k] = (lp - lm) / ((double)xp - (double)xm);
            if (n1 != n0 || n2 != n0) {
                fprintf(stderr, "%s: output size changed under perturbation\n", label);
                return -1;
            }
        }
        /* Richardson: the h² terms of the two central differences cancel */
        numeric[i] = (4.0 * dh[1] - dh[0]) / 3.0;
        if (fabs(numeric[i]) > maxnum) maxnum = fabs(numeric[i]);
    }
    double atol = o->atol * (maxnum > 1 ? maxnum : 1);
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < P->numel; i++) {
        double err = fabs((double)analytic[i] - numeric[i]);
        double lim = atol + o->rtol * fabs(numeric[i]);
        if (err / lim > worst) worst = err / lim;
        if (err > lim) {
            if (bad < 5) {
                const char *name = "?";
                size_t off = i;
                for (int k = 0; k < P->n; k++) {
                    if (off < (size_t)P->list[k]->numel) { name = P->list[k]->name; break; }
                    off -= (size_t)P->list[k]->numel;
                }
                fprintf(stderr, "%s: d/d %s[%zu]: analytic %.6g, numeric %.6g (|diff| %.3g > %.3g)\n",
                        label, name, off, analytic[i], numeric[i], err, lim);
            }
            bad++;
        }
    }
    if (o->verbose || bad)
        fprintf(stderr, "%s: %zu elements, %d outside tolerance, worst error/limit %.3f\n", label,
                P->numel, bad, worst);
    free(R);
    free(analytic);
    free(numeric);
    tg_ctx_free(&ctx);
    return bad;
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
