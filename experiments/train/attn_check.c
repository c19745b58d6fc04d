#define _POSIX_C_SOURCE 200809L   /* fork, poll, kill, strsignal */
#include "tg_attn_check.h"
#include "tg_timing.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gradcheck.h"
#include "tg_attn_probe.h"

/* ---- the report ------------------------------------------------------------------ */
static int out_fd = -1;   /* a probe's child writes its lines here */

static void add(tg_attn_check_report *r, const char *check, const char *what, int status, double value, double limit,
                const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void add(tg_attn_check_report *r, const char *check, const char *what, int status, double value, double limit,
                const char *fmt, ...) {
    tg_attn_check_line l = {.status = status, .value = value, .limit = limit};
    snprintf(l.check, sizeof l.check, "%s", check);
    snprintf(l.what, sizeof l.what, "%s", what);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l.text, sizeof l.text, fmt, ap);
    va_end(ap);
    for (char *p = l.text; *p; p++)
        if (*p == '\t' || *p == '\n') *p = ' ';
    if (out_fd >= 0) {   /* in a probe's child: to the parent at once, so a later crash loses nothing */
        if (write(out_fd, &l, sizeof l) != (ssize_t)sizeof l) _exit(3);
        return;
    }
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 32;
        tg_attn_check_line *p = realloc(r->lines, (size_t)cap * sizeof *p);
        if (!p) return;
        r->lines = p, r->cap = cap;
    }
    r->lines[r->n++] = l;
    r->failed += status == TG_CHECK_FAIL || status == TG_CHECK_CRASH;
}

/* ---- calling the kernel ------------------------------------------------------------ */
/* fn on ctx with its tg_fail caught: the output, or NULL with the message in msg. */
static tg_tensor *call(tg_ctx *ctx, tg_attention_fn fn, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *hs,
                       float scale, int causal, char *msg, size_t len) {
    char why[300];
    tg_tensor *out = tg_attn_call_caught(ctx, fn, q, k, v, hs, scale, causal, ctx->grad_enabled, why, sizeof why);
    if (!out && why[0]) {
        snprintf(msg, len, "it refused: %.250s", why);
        return NULL;
    }
    const int B = q->shape[0], T = q->shape[1], H = q->shape[2], dv = v->shape[3];
    if (!out || out->ndim != 4 || out->shape[0] != B || out->shape[1] != T || out->shape[2] != H || out->shape[3] != dv) {
        snprintf(msg, len, "it returned %s, not [%d,%d,%d,%d]", out ? TG_SHAPE(out) : "NULL", B, T, H, dv);
        return NULL;
    }
    return out;
}

static tg_tensor *randn(tg_ctx *ctx, tg_rng *r, int B, int T, int H, int d, float std) {
    tg_tensor *t = tg_new(ctx, 4, (int[]){B, T, H, d});
    tg_fill_normal(r, t->data, t->numel, 0.0f, std);
    return t;
}

static tg_tensor *head_scales(tg_ctx *ctx, int H, float a, float b) {
    tg_tensor *t = tg_new(ctx, 1, (int[]){H});
    for (int h = 0; h < H; h++) t->data[h] = h % 2 ? b : a;
    return t;
}

static int grid(const tg_attn_check_opts *o, int *d) {
    if (o->d_head > 0) {
        d[0] = o->d_head;
        return 1;
    }
    d[0] = 8, d[1] = 32, d[2] = 64, d[3] = 128;
    return 4;
}

/* ---- forward ------------------------------------------------------------------------ */
static void probe_forward(tg_attention_fn fn, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    int ds[4], nd = grid(o, ds);
    const int Ts[4] = {1, 7, 64, 256};
    for (int di = 0; di < nd; di++) {
        const int d = ds[di], dv = d / 2 + 3, B = 2, H = 2;
        double worst = 0, worst_rel = 0;
        char where[120] = "", what[24], bad[400] = "";
        snprintf(what, sizeof what, "d_head=%d", d);
        for (int ti = 0; ti < 4 && !bad[0]; ti++)
            for (int causal = 0; causal <= 1 && !bad[0]; causal++)
                for (int with_hs = 0; with_hs <= 1 && !bad[0]; with_hs++) {
                    const int T = Ts[ti];
                    tg_ctx ctx;
                    tg_ctx_init(&ctx, 0);
                    ctx.grad_enabled = 0;
                    tg_rng rng;
                    tg_rng_seed(&rng, 1000u + (uint64_t)(d * 10 + ti), (uint64_t)(causal * 2 + with_hs));
                    tg_tensor *q = randn(&ctx, &rng, B, T, H, d, 1), *k = randn(&ctx, &rng, B, T, H, d, 1);
                    tg_tensor *v = randn(&ctx, &rng, B, T, H, dv, 1);
                    tg_tensor *hs = with_hs ? head_scales(&ctx, H, 0.5f, 2.0f) : NULL;
                    const float scale = 1.0f / sqrtf((float)d);
                    char msg[300];
                    tg_tensor *out = call(&ctx, fn, q, k, v, hs, scale, causal, msg, sizeof msg);
                    tg_tensor *ref = tg_attention(&ctx, q, k, v, hs, scale, causal, NULL);
                    char at[100];
                    snprintf(at, sizeof at, "T=%d, %s, %s head_scale", T, causal ? "causal" : "not causal",
                             with_hs ? "with" : "without");
                    if (!out) {
                        snprintf(bad, sizeof bad, "at %s (dv = %d): %.250s", at, dv, msg);
                    } else {
                        double maxref = 0, err = 0;
                        int64_t nonfinite = -1;
                        for (int64_t i = 0; i < ref->numel; i++) {
                            maxref = fmax(maxref, fabs(ref->data[i]));
                            if (!isfinite(out->data[i]) && nonfinite < 0) nonfinite = i;
                            err = fmax(err, fabs((double)out->data[i] - ref->data[i]));
                        }
                        if (nonfinite >= 0) {
                            int row = (int)(nonfinite / (H * dv) % T);
                            snprintf(bad, sizeof bad, "at %s: a non-finite output (%g, row %d of %d)", at,
                                     out->data[nonfinite], row, T);
                        } else {
                            double rel = err / (maxref > 0 ? maxref : 1), tol = TG_CHECK_FWD_TOL(d, T);
                            if (rel / tol > worst_rel) {
                                worst_rel = rel / tol;
                                worst = rel;
                                snprintf(where, sizeof where, "%s", at);
                            }
                        }
                    }
                    tg_ctx_free(&ctx);
                }
        double tol = TG_CHECK_FWD_TOL(d, 256);
        if (bad[0])
            add(r, "forward", what, TG_CHECK_FAIL, NAN, tol, "%s", bad);
        else if (worst_rel > 1)
            add(r, "forward", what, TG_CHECK_FAIL, worst, worst / worst_rel,
                "differs from tg_attention by %.3g of the output's scale at %s (limit %.2g): not the same function",
                worst, where, worst / worst_rel);
        else
            add(r, "forward", what, TG_CHECK_PASS, worst, tol,
                "agrees with tg_attention to %.2g of the output's scale (limit %.2g at T = 256) over T 1, 7, 64, 256, "
                "causal and not, with and without head_scale, dv = %d", worst, tol, dv);
    }
}

/* ---- temperature ----------------------------------------------------------------------- */
/* The multiplier fn applies to q·k, mean over heads; NaN with why when it cannot be measured. */
static double multiplier(tg_attention_fn fn, int d, float scale, int with_hs, float *per_head, char *why, size_t len) {
    const int B = 2, T = d < 64 ? d : 64, H = 2;   /* T <= d: V = identity padded to dv = d, which any kernel takes */
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_rng rng;
    tg_rng_seed(&rng, 77, (uint64_t)d);
    /* q·k of std 0.5·√d: not saturated at c = 1 nor at c = √d (d ≤ 128), so every row informs the fit */
    tg_tensor *q = randn(&ctx, &rng, B, T, H, d, 0.5f), *k = randn(&ctx, &rng, B, T, H, d, 0.5f);
    float mult[2];
    int rc = tg_attn_measure(&ctx, fn, q, k, with_hs ? head_scales(&ctx, H, 0.5f, 2.0f) : NULL, scale, 1, NULL, mult,
                             NULL, why, len);
    tg_ctx_free(&ctx);
    if (rc) return NAN;
    if (per_head) per_head[0] = mult[0], per_head[1] = mult[1];
    return 0.5 * (mult[0] + mult[1]);
}

static int near(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b); }

static void probe_temperature(tg_attention_fn fn, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    int ds[4], nd = grid(o, ds);
    for (int di = 0; di < nd; di++) {
        const int d = ds[di];
        const float s = 1.0f / sqrtf((float)d);
        char what[24], why[400];
        snprintf(what, sizeof what, "d_head=%d", d);
        float hm[2];
        double m1 = multiplier(fn, d, s, 0, NULL, why, sizeof why);
        if (isnan(m1)) {
            add(r, "temperature", what, TG_CHECK_INFO, NAN, NAN, "not measured: %s", why);
            continue;
        }
        double m2 = multiplier(fn, d, 2 * s, 0, NULL, why, sizeof why);
        double mh = multiplier(fn, d, s, 1, hm, why, sizeof why);
        const double c = m1 / s, sd = sqrt((double)d);
        const int follows = near(m2 / (2 * s), c, 0.01);
        if (follows && near(c, 1, TG_CHECK_C_TOL))
            add(r, "temperature", what, TG_CHECK_PASS, c, 1, "c = %.4f: softmax(scale · q·k) with the scale passed", c);
        else if (!follows && near(m1, 1, 0.01))
            add(r, "temperature", what, TG_CHECK_FAIL, c, 1,
                "c = %.2f = √%d: the kernel ignores `scale` (softmax of the raw q·k, the seed's bug)", c, d);
        else if (!follows && near(m1, 1.0 / d, 0.01))
            add(r, "temperature", what, TG_CHECK_FAIL, c, 1,
                "c = %.4f = 1/√%d: it divides by d_head instead of using `scale` (too cold by √d_head)", c, d);
        else if (!follows && near(m1, 1.0 / sd, 0.01))
            add(r, "temperature", what, TG_CHECK_FAIL, c, 1,
                "c does not follow `scale`: the kernel computes its own 1/√d_head (c = %.2f at twice the scale)",
                m2 / (2 * s));
        else if (!follows)
            add(r, "temperature", what, TG_CHECK_FAIL, c, 1,
                "c does not follow `scale`: the kernel computes its own multiplier (%.4g of q·k, whatever the scale)",
                m1);
        else
            add(r, "temperature", what, TG_CHECK_FAIL, c, 1, "c = %.2f: %.2f times too %s", c, c > 1 ? c : 1 / c,
                c > 1 ? "warm (logits too large)" : "cold (logits too small)");
        if (isnan(mh)) continue;
        /* head scales 0.5 and 2 must multiply the heads' multipliers */
        double c0 = hm[0] / (0.5 * m1), c1 = hm[1] / (2.0 * m1);
        if (near(c0, 1, 0.01) && near(c1, 1, 0.01))
            add(r, "temperature", "head_scale", TG_CHECK_PASS, c1, 1, "at d_head %d head scales 0.5 and 2 multiply the "
                "multiplier as they should", d);
        else if (near(hm[0], m1, 0.01) && near(hm[1], m1, 0.01))
            add(r, "temperature", "head_scale", TG_CHECK_FAIL, c1, 1, "at d_head %d the kernel ignores head_scale (its "
                "multiplier is %.4g with head scales 0.5 and 2 as without)", d, m1);
        else
            add(r, "temperature", "head_scale", TG_CHECK_FAIL, c1, 1, "at d_head %d head scales 0.5 and 2 change the "
                "multiplier by %.3g and %.3g, not 0.5 and 2", d, hm[0] / m1, hm[1] / m1);
    }
}

/* ---- mask ---------------------------------------------------------------------------------- */
static void probe_mask(tg_attention_fn fn, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 1, T = 12, H = 2, d = 16;
    for (int causal = 1; causal >= 0; causal--) {
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        ctx.grad_enabled = 0;
        tg_rng rng;
        tg_rng_seed(&rng, 5, 5);
        tg_tensor *q = randn(&ctx, &rng, B, T, H, d, 1), *k = randn(&ctx, &rng, B, T, H, d, 1);
        tg_tensor *v = randn(&ctx, &rng, B, T, H, d, 1);
        char msg[300];
        const char *what = causal ? "causal" : "not causal";
        tg_tensor *base = call(&ctx, fn, q, k, v, NULL, 0.25f, causal, msg, sizeof msg);
        if (!base) {
            add(r, "mask", what, TG_CHECK_FAIL, NAN, NAN, "%s", msg);
            tg_ctx_free(&ctx);
            continue;
        }
        for (int64_t i = 0; i < base->numel; i++)
            if (!isfinite(base->data[i])) {
                int row = (int)(i / (H * d) % T);
                add(r, "mask", what, TG_CHECK_FAIL, NAN, NAN, "row %d of the output is not finite (%g): %s", row,
                    base->data[i], row == 0 && causal ? "row 0 sees no key? (its own position masked)" : "");
                tg_ctx_free(&ctx);
                base = NULL;
                break;
            }
        if (!base) continue;
        int leak_i = -1, leak_j = -1, blind = -1, unseen_i = -1, unseen_j = -1;
        float *k0 = malloc(sizeof(float) * (size_t)k->numel), *v0 = malloc(sizeof(float) * (size_t)v->numel);
        memcpy(k0, k->data, sizeof(float) * (size_t)k->numel);
        memcpy(v0, v->data, sizeof(float) * (size_t)v->numel);
        for (int j = causal ? 0 : T - 1; j < T; j++) {
            memcpy(k->data, k0, sizeof(float) * (size_t)k->numel);
            memcpy(v->data, v0, sizeof(float) * (size_t)v->numel);
            for (int e = 0; e < H * d; e++) k->data[(size_t)j * H * d + e] += 1.5f, v->data[(size_t)j * H * d + e] -= 2.0f;
            tg_tensor *out = call(&ctx, fn, q, k, v, NULL, 0.25f, causal, msg, sizeof msg);
            if (!out) break;
            for (int i = 0; i < T; i++) {
                double diff = 0;
                for (int e = 0; e < H * d; e++)
                    diff = fmax(diff, fabs((double)out->data[(size_t)i * H * d + e] - base->data[(size_t)i * H * d + e]));
                int changed = diff > 1e-5;
                if (causal && i < j && changed && (leak_i < 0 || j - i > leak_j - leak_i)) leak_i = i, leak_j = j;
                if (causal && i == j && !changed && blind < 0) blind = i;
                if (!causal && !changed && unseen_i < 0) unseen_i = i, unseen_j = j;
            }
        }
        free(k0);
        free(v0);
        if (causal && leak_i >= 0)   /* the farthest leak says what kind of mask this is */
            add(r, "mask", what, TG_CHECK_FAIL, leak_j - leak_i, 0, "leak: row %d depends on position %d, %d later%s",
                leak_i, leak_j, leak_j - leak_i,
                leak_j == leak_i + 1 ? ": the mask is off by one (each row sees the next position)"
                : leak_i == 0 && leak_j == T - 1 ? ": no causal mask (row 0 sees the last position)" : "");
        else if (causal && blind >= 0)
            add(r, "mask", what, TG_CHECK_FAIL, blind, 0, "row %d does not see its own position: the mask hides the "
                "diagonal (off by one)", blind);
        else if (causal)
            add(r, "mask", what, TG_CHECK_PASS, 0, 0, "no row depends on a later position; every row sees its own "
                "(T = %d)", T);
        else if (unseen_i >= 0)
            add(r, "mask", what, TG_CHECK_FAIL, unseen_i, 0, "row %d does not see position %d: the non-causal call "
                "masks", unseen_i, unseen_j);
        else
            add(r, "mask", what, TG_CHECK_PASS, 0, 0, "every row sees the last position (T = %d)", T);
        tg_ctx_free(&ctx);
    }
}

/* ---- gradient --------------------------------------------------------------------------------- */
typedef struct {
    tg_attention_fn fn;
    tg_tensor *t[4];   /* q, k, v, head_scale: one a parameter, the others constants */
    int causal;
} gc_case;

static tg_tensor *gc_f(tg_ctx *ctx, void *u) {
    gc_case *c = u;
    return c->fn(ctx, c->t[0], c->t[1], c->t[2], c->t[3], 0.5f, c->causal, NULL);
}

static void probe_gradient(tg_attention_fn fn, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 2, T = 5, H = 2, d = 4, dv = 3;
    const char *names[4] = {"q", "k", "v", "head_scale"};
    for (int which = 0; which < 4; which++) {
        double worst = 0;
        for (int causal = 0; causal <= 1; causal++) {
            tg_ctx consts;
            tg_ctx_init(&consts, 0);
            tg_params P;
            tg_params_init(&P);
            tg_rng rng;
            tg_rng_seed(&rng, 31, (uint64_t)(which * 2 + causal));
            const int shapes[4][4] = {{B, T, H, d}, {B, T, H, d}, {B, T, H, dv}, {H}};
            gc_case c = {.fn = fn, .causal = causal};
            for (int i = 0; i < 4; i++) {
                const int nd = i == 3 ? 1 : 4;
                c.t[i] = i == which ? tg_param(&P, names[i], nd, shapes[i]) : tg_new(&consts, nd, shapes[i]);
            }
            tg_params_alloc(&P);
            for (int i = 0; i < 4; i++) {
                if (i == 3) for (int h = 0; h < H; h++) c.t[3]->data[h] = 0.7f + 0.6f * (float)h;
                else tg_fill_normal(&rng, c.t[i]->data, c.t[i]->numel, 0.0f, 1.0f);
            }
            double w = 0;
            tg_gradcheck(names[which], &P, gc_f, &c, &(tg_gc_opts){.quiet = 1, .worst = &w});
            worst = fmax(worst, w);
            tg_params_free(&P);
            tg_ctx_free(&consts);
        }
        char what[24];
        snprintf(what, sizeof what, "d/d %s", names[which]);
        if (worst <= 1)
            add(r, "gradient", what, TG_CHECK_PASS, worst, 1, "worst error/limit %.3f against finite differences "
                "(causal and not)", worst);
        else
            add(r, "gradient", what, TG_CHECK_FAIL, worst, 1, "worst error/limit %.3g: the backward is not the "
                "gradient of the forward for %s", worst, names[which]);
    }
}

/* ---- health ------------------------------------------------------------------------------------- */
/* The band of c at d_head 128 with AdamW where every seed trained as well as c = 1 (docs/results.md, the
 * temperature map; docs/data/science-map-band.tsv, which tests/test_attn_check.c reads to keep these
 * in step). */
#define TG_BAND_D 128
#define TG_BAND_LO 0.0625
#define TG_BAND_HI 1.0

static void probe_health(tg_attention_fn fn, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 4, T = 32, H = 4, d = TG_BAND_D;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_rng rng;
    tg_rng_seed(&rng, 2024, 1);
    tg_tensor *q = randn(&ctx, &rng, B, T, H, d, 1), *k = randn(&ctx, &rng, B, T, H, d, 1);
    tg_tensor *v = randn(&ctx, &rng, B, T, H, d, 1);
    const float s = 1.0f / sqrtf((float)d);
    float e[H], mx[H], sat[H], e0[H], mx0[H], sat0[H], mult[H];
    tg_attn_stats ref = {H, e0, mx0, sat0}, mine = {H, e, mx, sat};
    ctx.grad_enabled = 0;
    tg_attention(&ctx, q, k, v, NULL, s, 1, &ref);
    char why[400];
    if (tg_attn_measure(&ctx, fn, q, k, NULL, s, 1, &mine, mult, NULL, why, sizeof why)) {
        add(r, "health", "d_head=128", TG_CHECK_INFO, NAN, NAN, "not measured: %s", why);
        tg_ctx_free(&ctx);
        return;
    }
    const double u = tg_attn_uniform_entropy(T, 1);
    double E = 0, E0 = 0, S = 0, S0 = 0, M = -INFINITY, M0 = -INFINITY, c = 0;
    for (int h = 0; h < H; h++) {
        E += e[h] / u / H, E0 += e0[h] / u / H, S += sat[h] / H, S0 += sat0[h] / H;
        M = fmax(M, mx[h]), M0 = fmax(M0, mx0[h]), c += mult[h] / s / H;
    }
    const int inside = c >= TG_BAND_LO * (1 - TG_CHECK_C_TOL) && c <= TG_BAND_HI * (1 + TG_CHECK_C_TOL);
    add(r, "health", "d_head=128", inside ? TG_CHECK_PASS : TG_CHECK_FAIL, c, TG_BAND_HI,
        "at initialisation (q, k ~ N(0, 1), T = %d, causal): entropy/uniform %.3f (tg_attention: %.3f), largest "
        "logit %.1f (%.1f), saturated rows %.0f%% (%.0f%%); c = %.3g is %s the band 1/16 .. 1 that trains as well "
        "as c = 1 (docs/results.md#how-far-off-may-the-scale-be)%s", T, E, E0, M, M0, 100 * S, 100 * S0, c,
        inside ? "inside" : "outside", inside ? "" : ": expect the collapse of docs/results.md#the-main-result");
    tg_ctx_free(&ctx);
}

/* ---- the probes in child processes ---------------------------------------------------------------- */
typedef void (*probe_fn)(tg_attention_fn, const tg_attn_check_opts *, tg_attn_check_report *);

static void run_probe(const char *name, probe_fn p, tg_attention_fn fn, const tg_attn_check_opts *o,
                      tg_attn_check_report *r) {
    int fds[2];
    if (pipe(fds)) {
        add(r, name, "-", TG_CHECK_CRASH, NAN, NAN, "could not run the probe: no pipe (%s)", strerror(errno));
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        add(r, name, "-", TG_CHECK_CRASH, NAN, NAN, "could not run the probe: fork failed (%s)", strerror(errno));
        return;
    }
    if (pid == 0) {
        close(fds[0]);
        const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};   /* die of a crash: it is the answer */
        for (int i = 0; i < 5; i++) signal(fatal[i], SIG_DFL);
        out_fd = fds[1];
        p(fn, o, NULL);
        _exit(0);
    }
    close(fds[1]);
    tg_attn_check_line l;
    size_t got = 0;
    int status = 0, done = 0, eof = 0;
    const double t0 = 1e-3 * tg_timing_now_ms(), limit = o->timeout > 0 ? o->timeout : 60;
    while (!(done && eof)) {
        struct pollfd pf = {.fd = fds[0], .events = POLLIN};
        if (!eof && poll(&pf, 1, 20) > 0) {
            ssize_t n = read(fds[0], (char *)&l + got, sizeof l - got);
            if (n <= 0) eof = 1;
            else if ((got += (size_t)n) == sizeof l) {
                got = 0;
                add(r, l.check, l.what, l.status, l.value, l.limit, "%s", l.text);
            }
        } else if (eof) {
            struct timespec nap = {0, 5000000};
            nanosleep(&nap, NULL);
        }
        if (!done && waitpid(pid, &status, WNOHANG) == pid) done = 1;
        if (!done && 1e-3 * tg_timing_now_ms() - t0 > limit) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            close(fds[0]);
            add(r, name, "-", TG_CHECK_CRASH, NAN, limit, "the kernel hung: the %s probe got no answer within %.0f s",
                name, limit);
            return;
        }
    }
    close(fds[0]);
    if (WIFSIGNALED(status))
        add(r, name, "-", TG_CHECK_CRASH, NAN, NAN, "the kernel crashed (%s) in the %s probe%s", strsignal(WTERMSIG(status)),
            name, WTERMSIG(status) == SIGABRT ? " (an abort: a tg_fail outside a caught call, or no node recorded?)" : "");
    else if (WEXITSTATUS(status) != 0)
        add(r, name, "-", TG_CHECK_CRASH, NAN, NAN, "the %s probe exited with status %d", name, WEXITSTATUS(status));
}

int tg_attn_check(tg_attention_fn fn, const tg_attn_check_opts *opts, tg_attn_check_report *r) {
    tg_attn_check_opts o = opts ? *opts : (tg_attn_check_opts){0};
    *r = (tg_attn_check_report){0};
    run_probe("forward", probe_forward, fn, &o, r);
    run_probe("temperature", probe_temperature, fn, &o, r);
    run_probe("mask", probe_mask, fn, &o, r);
    run_probe("gradient", probe_gradient, fn, &o, r);
    run_probe("health", probe_health, fn, &o, r);
    return r->failed ? 1 : 0;
}

void tg_attn_check_free(tg_attn_check_report *r) {
    free(r->lines);
    *r = (tg_attn_check_report){0};
}

void tg_attn_check_print(FILE *f, const tg_attn_check_report *r, int tsv) {
    static const char *const st[] = {"ok", "FAIL", "info", "CRASH"};
    if (tsv) {
        fprintf(f, "check\twhat\tstatus\tvalue\tlimit\ttext\n");
        for (int i = 0; i < r->n; i++) {
            const tg_attn_check_line *l = &r->lines[i];
            fprintf(f, "%s\t%s\t%s\t%.6g\t%.6g\t%s\n", l->check, l->what, st[l->status], l->value, l->limit, l->text);
        }
        return;
    }
    if (r->failed) fprintf(f, "verdict: %d check%s FAILED:", r->failed, r->failed > 1 ? "s" : "");
    else fprintf(f, "verdict: the kernel conforms (%d checks)\n", r->n);
    if (r->failed) {
        int first = 1;
        for (int i = 0; i < r->n; i++)
            if (r->lines[i].status == TG_CHECK_FAIL || r->lines[i].status == TG_CHECK_CRASH) {
                fprintf(f, "%s %s %s", first ? "" : ";", r->lines[i].check, r->lines[i].what);
                first = 0;
            }
        fprintf(f, "\n");
    }
    for (int i = 0; i < r->n; i++) {
        const tg_attn_check_line *l = &r->lines[i];
        fprintf(f, "%-5s %-11s %-11s %s\n", st[l->status], l->check, l->what, l->text);
    }
}
