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

/* The first run (on an arena of zeros) again on arenas filled with NaN (0xff)
 * and finite garbage (0x3f: 0.747 a float, plausible data): f's output and the
 * gradient must keep their bytes. Zeros, what fresh pages hold, hide an op that
 * reads what it never wrote; finite differences cannot see it where the true
 * gradient is 0, and only the analytic side runs the backward. Marks the
 * elements whose gradient changed in changed[]; returns 1 when anything (an
 * output element too) changed, else 0, or -1 when the output's size did. The
 * report names the first. */
static int stale_reruns(tg_ctx *ctx, const char *label, tg_params *P, tg_gc_fn f, void *user, const float *R,
                        int64_t n0, const float *out0, const float *grad0, int quiet, unsigned char *changed) {
    static const unsigned char fills[2] = {0xff, 0x3f};
    int bad = 0;
    ctx->grad_enabled = 1;
    for (int k = 0; k < 2 && !bad; k++) {
        tg_ctx_reset(ctx);
        tg_arena_fill(ctx, fills[k]);
        tg_tensor *out = f(ctx, user);
        if (!out || out->numel != n0) {
            if (!quiet) fprintf(stderr, "%s: the output's size changed on a run again\n", label);
            return -1;
        }
        int64_t io = -1;
        for (int64_t i = 0; i < n0 && io < 0; i++)
            if (memcmp(&out->data[i], &out0[i], sizeof(float))) io = i;
        tg_params_zero_grad(P);
        if (out->requires_grad) tg_backward_seed(ctx, out, R);
        size_t first = P->numel;
        for (size_t i = 0; i < P->numel; i++)
            if (memcmp(&P->grad[i], &grad0[i], sizeof(float))) {
                if (first == P->numel) first = i;
                changed[i] = 1;
                bad++;
            }
        if (io >= 0) bad++;
        if (!bad || quiet) continue;
        if (io >= 0)
            fprintf(stderr, "%s: output[%lld] is %.9g on an arena of zeros, %.9g on one filled with 0x%02x: the "
                    "forward reads memory it did not write\n", label, (long long)io, out0[io], out->data[io], fills[k]);
        if (first < P->numel) {
            char name[96];
            element_name(P, first, name, sizeof name);
            fprintf(stderr, "%s: d/d %s is %.9g on an arena of zeros, %.9g on one filled with 0x%02x (%d elements "
                    "changed): the backward reads memory it did not write\n", label, name, grad0[first],
                    P->grad[first], fills[k], bad - (io >= 0));
        }
    }
    memcpy(P->grad, grad0, P->numel * sizeof(float));
    return bad > 0;
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
    float *R = malloc((size_t)n0 * sizeof *R), *out0 = malloc((size_t)n0 * sizeof *out0);
    float *grad0 = malloc(P->numel * sizeof *grad0);
    unsigned char *changed = calloc(P->numel, 1);
    double *analytic = malloc(P->numel * sizeof *analytic), *numeric = malloc(P->numel * sizeof *numeric);
    if (!R || !out0 || !grad0 || !changed || !analytic || !numeric) {
        free(R);
        free(out0);
        free(grad0);
        free(changed);
        free(analytic);
        free(numeric);
        tg_ctx_free(&ctx);
        tg_fail_h(&P->err, "tg_gradcheck: %s: out of memory", label);
    }
    tg_rng r;
    tg_rng_seed(&r, 12345, 1);
    tg_fill_normal(&r, R, n0, 0.0f, 1.0f);

    /* analytic: one vector-Jacobian product with seed R. The first pass only grows the arena;
     * the one kept runs again on it filled with 0 (what fresh pages hold), so that every byte
     * the checker reads is defined (valgrind stays quiet on an op that reads what it never
     * wrote, and the reruns below name it) */
    tg_params_zero_grad(P);
    tg_backward_seed(&ctx, out, R);
    tg_ctx_reset(&ctx);
    tg_arena_fill(&ctx, 0);
    out = f(&ctx, user);
    if (!out || out->numel != n0) {
        free(R), free(out0), free(grad0), free(changed), free(analytic), free(numeric);
        tg_ctx_free(&ctx);
        tg_fail_h(&P->err, "tg_gradcheck: %s: the function's output changed from one call to the next", label);
    }
    tg_params_zero_grad(P);
    tg_backward_seed(&ctx, out, R);
    for (size_t i = 0; i < P->numel; i++) analytic[i] = P->grad[i];
    memcpy(out0, out->data, (size_t)n0 * sizeof(float));
    memcpy(grad0, P->grad, P->numel * sizeof(float));

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
    if (bad >= 0) {   /* an element the reruns changed is outside tolerance, counted once */
        const int stale = stale_reruns(&ctx, label, P, f, user, R, n0, out0, grad0, o.quiet, changed);
        if (stale < 0) bad = -1;
        int more = 0;
        for (size_t i = 0; i < P->numel && stale > 0; i++) {
            const double err = fabs(analytic[i] - numeric[i]), lim = atol + o.rtol * fabs(numeric[i]);
            more += changed[i] && err <= lim;
        }
        if (stale > 0) {
            bad += more ? more : bad ? 0 : 1;   /* an output element alone still fails the check */
            worst = INFINITY;
        }
    }
    if (!o.quiet && (bad > 0 || (bad == 0 && o.verbose)))
        fprintf(stderr, "%s: %zu elements, %d outside tolerance, worst error/limit %.3f\n", label, P->numel,
                bad, worst);
    if (o.worst) *o.worst = bad < 0 ? INFINITY : worst;
    free(R);
    free(out0);
    free(grad0);
    free(changed);
    free(analytic);
    free(numeric);
    tg_ctx_free(&ctx);
    return bad;
}
