/* The finite-difference gradient checker (gradcheck.h says what and why). */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double reduce(const tg_tensor *out, const float *R) {
    double s = 0;
    for (int64_t i = 0; i < out->numel; i++) s += (double)out->data[i] * (double)R[i];
    return s;
}

/* L at the current P, on a fresh tape; *n gets the output size (it must not change). */
static double eval(tg_ctx *ctx, tg_gc_fn f, void *user, const float *R, int64_t *n) {
    tg_ctx_reset(ctx);
    tg_tensor *out = f(ctx, user);
    *n = out ? out->numel : -1;
    return out ? reduce(out, R) : 0;
}

/* Richardson-extrapolated central difference of L with respect to *x. */
static int numeric_deriv(tg_ctx *ctx, tg_gc_fn f, void *user, const float *R, int64_t n0, float *x,
                         double h0, double *d) {
    float x0 = *x;
    double h = h0 * (fabs(x0) > 1 ? fabs(x0) : 1), dh[2];
    for (int k = 0; k < 2; k++) {           /* steps h and h/2 */
        double hk = k ? h / 2 : h;
        float xp = (float)(x0 + hk), xm = (float)(x0 - hk);
        int64_t n1, n2;
        *x = xp;
        double lp = eval(ctx, f, user, R, &n1);
        *x = xm;
        double lm = eval(ctx, f, user, R, &n2);
        *x = x0;
        if (n1 != n0 || n2 != n0) return -1;
        dh[k] = (lp - lm) / ((double)xp - (double)xm);
    }
    *d = (4.0 * dh[1] - dh[0]) / 3.0;       /* the h² terms of the two cancel */
    return 0;
}

/* "name[offset]" of flat element i of P, for the report. */
static void element_name(const tg_params *P, size_t i, char *buf, size_t len) {
    for (int k = 0; k < P->n; k++) {
        if (i < (size_t)P->list[k]->numel) {
            snprintf(buf, len, "%s[%zu]", P->list[k]->name, i);
            return;
        }
        i -= (size_t)P->list[k]->numel;
    }
    snprintf(buf, len, "?[%zu]", i);
}

int tg_gradcheck(const char *label, tg_params *P, tg_gc_fn f, void *user, const tg_gc_opts *opts) {
    tg_gc_opts o = opts ? *opts : (tg_gc_opts){0};
    if (!P->allocated || P->numel == 0)
        tg_fail_h(&P->err, "tg_gradcheck: %s: no parameters to check (declare them, then tg_params_alloc)", label);
    if (!(o.h >= 0 && o.rtol >= 0 && o.atol >= 0))
        tg_fail_h(&P->err, "tg_gradcheck: %s: h %g, rtol %g, atol %g; each must be >= 0 (0: default)", label,
                  o.h, o.rtol, o.atol);
    if (o.h == 0) o.h = 1e-2;
    if (o.rtol == 0) o.rtol = 1e-3;
    if (o.atol == 0) o.atol = 1e-4;
    if (getenv("TG_GC_VERBOSE")) o.verbose = 1;

    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *out = f(&ctx, user);
    if (!out) {
        tg_ctx_free(&ctx);
        tg_fail_h(&P->err, "tg_gradcheck: %s: the function returned no tensor", label);
    }
    int64_t n0 = out->numel;
    float *R = malloc((size_t)n0 * sizeof *R);
    double *analytic = malloc(P->numel * sizeof *analytic), *numeric = malloc(P->numel * sizeof *numeric);
    if (!R || !analytic || !numeric) {
        free(R);
        free(analytic);
        free(numeric);
        tg_ctx_free(&ctx);
        tg_fail_h(&P->err, "tg_gradcheck: %s: out of memory", label);
    }
    tg_rng r;
    tg_rng_seed(&r, 12345, 1);
    tg_fill_normal(&r, R, n0, 0.0f, 1.0f);

    /* analytic: one vector-Jacobian product with seed R */
    tg_params_zero_grad(P);
    tg_backward_seed(&ctx, out, R);
    for (size_t i = 0; i < P->numel; i++) analytic[i] = P->grad[i];

    /* numeric: forward passes only, no tape */
    ctx.grad_enabled = 0;
    int bad = 0;
    double maxnum = 0, worst = 0;
    for (size_t i = 0; i < P->numel && bad >= 0; i++) {
        if (numeric_deriv(&ctx, f, user, R, n0, &P->data[i], o.h, &numeric[i]) < 0) {
            if (!o.quiet) fprintf(stderr, "%s: the output's size changed under a perturbation\n", label);
            bad = -1;
        } else if (fabs(numeric[i]) > maxnum) {
            maxnum = fabs(numeric[i]);
        }
    }
    double atol = o.atol * (maxnum > 1 ? maxnum : 1);
    for (size_t i = 0; i < P->numel && bad >= 0; i++) {
        double err = fabs(analytic[i] - numeric[i]), lim = atol + o.rtol * fabs(numeric[i]);
        double ratio = isfinite(err) ? err / lim : INFINITY;
        if (ratio > worst) worst = ratio;
        if (err <= lim) continue;
        if (bad++ < 5 && !o.quiet) {              /* NaN lands here too: it is never <= lim */
            char name[96];
            element_name(P, i, name, sizeof name);
            fprintf(stderr, "%s: d/d %s: analytic %.6g, numeric %.6g (|diff| %.3g > %.3g)\n", label, name,
                    analytic[i], numeric[i], err, lim);
        }
    }
    if (!o.quiet && (bad > 0 || (bad == 0 && o.verbose)))
        fprintf(stderr, "%s: %zu elements, %d outside tolerance, worst error/limit %.3f\n", label, P->numel,
                bad, worst);
    if (o.worst) *o.worst = bad < 0 ? INFINITY : worst;
    free(R);
    free(analytic);
    free(numeric);
    tg_ctx_free(&ctx);
    return bad;
}
