#define _POSIX_C_SOURCE 200809L   /* fork, waitpid, kill, nanosleep */
#include "tg_attn_probe.h"

#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    jmp_buf jb;
    char msg[512];
} catcher;

static void catch_fail(const char *msg, void *user) {
    catcher *c = user;
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    longjmp(c->jb, 1);
}

tg_tensor *tg_attn_call_caught(tg_ctx *ctx, tg_attention_fn fn, tg_tensor *q, tg_tensor *k, tg_tensor *v,
                               tg_tensor *head_scale, float scale, int causal, int grad, char *msg, size_t len) {
    catcher c = {.msg = ""};
    if (len) msg[0] = 0;
    const tg_errh saved = ctx->err;
    const int was = ctx->grad_enabled;
    tg_tensor *volatile out = NULL;
    tg_set_error_handler(ctx, catch_fail, &c);
    ctx->grad_enabled = grad;
    if (setjmp(c.jb) == 0) out = fn(ctx, q, k, v, head_scale, scale, causal, NULL);
    ctx->err = saved;
    ctx->grad_enabled = was;
    if (c.msg[0]) {
        tg_errf(msg, len, "%s", c.msg);
        return NULL;
    }
    return out;
}

/* The kernel's call with V = the identity over key positions, padded with zero
 * columns to dv = d when T < d (a kernel written for dv = d takes it too); NULL
 * (message in err) when it failed. The weights are the first T columns. */
static tg_tensor *call_identity(tg_ctx *ctx, tg_attention_fn fn, tg_tensor *q, tg_tensor *k, tg_tensor *head_scale,
                                float scale, int causal, char *err, size_t errlen) {
    const int B = q->shape[0], T = q->shape[1], H = q->shape[2], d = q->shape[3], dv = T < d ? d : T;
    tg_tensor *v = tg_zeros(ctx, 4, (int[]){B, T, H, dv});
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T; j++)
            for (int h = 0; h < H; h++) v->data[(((size_t)b * T + j) * H + h) * dv + j] = 1.0f;
    char msg[400];
    tg_tensor *o = tg_attn_call_caught(ctx, fn, q, k, v, head_scale, scale, causal, 0, msg, sizeof msg);
    if (!o && msg[0]) {
        tg_errf(err, errlen, "the kernel refused V = identity (dv = %d): %s", dv, msg);
        return NULL;
    }
    if (!o || o->ndim != 4 || o->shape[0] != B || o->shape[1] != T || o->shape[2] != H || o->shape[3] != dv) {
        tg_errf(err, errlen, "with V = identity (dv = %d) the kernel returned %s, not [%d,%d,%d,%d]", dv,
                o ? TG_SHAPE(o) : "NULL", B, T, H, dv);
        return NULL;
    }
    for (int64_t i = 0; i < o->numel; i++)   /* the padding columns of V are zero: so must the output's be */
        if (i % dv >= T && o->data[i] != 0.0f) {
            tg_errf(err, errlen, "with V = identity padded to dv = %d the kernel put %g in a zero column: not a "
                    "weighted sum of V's rows", dv, o->data[i]);
            return NULL;
        }
    return o;
}

int tg_attn_measure(tg_ctx *ctx, tg_attention_fn fn, tg_tensor *q, tg_tensor *k, tg_tensor *head_scale, float scale,
                    int causal, tg_attn_stats *stats, float *mult, float *probs, char *err, size_t errlen) {
    if (q->ndim != 4 || k->ndim != 4 || !tg_same_shape(q, k))
        return tg_errf(err, errlen, "tg_attn_measure: q %s and k %s must be the same [B,T,H,d]", TG_SHAPE(q), TG_SHAPE(k));
    const int B = q->shape[0], T = q->shape[1], H = q->shape[2], d = q->shape[3], dv = T < d ? d : T;
    tg_tensor *o = call_identity(ctx, fn, q, k, head_scale, scale, causal, err, errlen);
    if (!o) return -1;
    /* the weights must be weights: that is what makes the rest mean anything */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const float *p = o->data + (((size_t)b * T + i) * H + h) * dv;
                double sum = 0;
                for (int j = 0; j < T; j++) {
                    if (!isfinite(p[j]) || p[j] < -1e-6f)
                        return tg_errf(err, errlen, "with V = identity the kernel's output holds %g (batch %d, head %d, "
                                       "row %d, key %d): not attention weights", p[j], b, h, i, j);
                    if (causal && j > i && fabsf(p[j]) > 1e-6f)
                        return tg_errf(err, errlen, "with V = identity the kernel puts weight %g on key %d of row %d "
                                       "(head %d): not causal weights", p[j], j, i, h);
                    sum += p[j];
                }
                if (fabs(sum - 1.0) > 1e-3)
                    return tg_errf(err, errlen, "with V = identity row %d of head %d sums to %g, not 1: not attention "
                                   "weights (does the kernel assume dv = d?)", i, h, sum);
            }
    for (int h = 0; h < H; h++) {
        double ent = 0, sat = 0, sxy = 0, sxx = 0, smax = -INFINITY, smin = INFINITY;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < T; i++) {
                const float *p = o->data + (((size_t)b * T + i) * H + h) * dv;
                const float *qi = q->data + (((size_t)b * T + i) * H + h) * d;
                const int n = causal ? i + 1 : T;
                double s[n > 0 ? n : 1], lp[n > 0 ? n : 1];
                int m = 0;
                double ms = 0, ml = 0, pmax = 0;
                for (int j = 0; j < n; j++) {
                    const float *kj = k->data + (((size_t)b * T + j) * H + h) * d;
                    double dot = 0;
                    for (int e = 0; e < d; e++) dot += (double)qi[e] * kj[e];
                    if (dot > smax) smax = dot;
                    if (dot < smin) smin = dot;
                    if (p[j] > 0) ent -= p[j] * log(p[j]);
                    if (p[j] > pmax) pmax = p[j];
                    if (p[j] > 1e-30f) {
                        s[m] = dot, lp[m] = log(p[j]);
                        ms += dot, ml += lp[m];
                        m++;
                    }
                }
                sat += pmax > 0.99;
                if (m < 2) continue;
                ms /= m, ml /= m;
                for (int j = 0; j < m; j++) sxy += (s[j] - ms) * (lp[j] - ml), sxx += (s[j] - ms) * (s[j] - ms);
            }
        double c = sxx > 0 ? sxy / sxx : NAN;
        if (stats && stats->entropy) stats->entropy[h] = (float)(ent / ((double)B * T));
        if (stats && stats->saturation) stats->saturation[h] = (float)(sat / ((double)B * T));
        if (stats && stats->max_logit) stats->max_logit[h] = (float)(isnan(c) ? NAN : c >= 0 ? c * smax : c * smin);
        if (mult) mult[h] = (float)c;
    }
    if (probs)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < T; i++)
                    memcpy(probs + (((size_t)b * H + h) * T + i) * T, o->data + (((size_t)b * T + i) * H + h) * dv,
                           sizeof(float) * T);
    return 0;
}

int tg_attn_measure_preflight(tg_attention_fn fn, int B, int T, int H, int d, int causal, float scale,
                              double seconds, char *err, size_t errlen) {
    int fds[2];
    if (pipe(fds)) return tg_errf(err, errlen, "preflight: no pipe");
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return tg_errf(err, errlen, "preflight: fork failed");
    }
    if (pid == 0) {
        close(fds[0]);
        /* a crash is the answer here: die of it (a sanitizer's handler would exit 1 instead) */
        const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
        for (int i = 0; i < 5; i++) signal(fatal[i], SIG_DFL);
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_rng r;
        tg_rng_seed(&r, 7, 7);
        tg_tensor *q = tg_new(&ctx, 4, (int[]){B, T, H, d}), *k = tg_new(&ctx, 4, (int[]){B, T, H, d});
        tg_fill_normal(&r, q->data, q->numel, 0, 1);
        tg_fill_normal(&r, k->data, k->numel, 0, 1);
        char msg[512] = "";
        float *ent = calloc((size_t)H, sizeof *ent);
        tg_attn_stats st = {H, ent, NULL, NULL};
        int rc = tg_attn_measure(&ctx, fn, q, k, NULL, scale, causal, &st, NULL, NULL, msg, sizeof msg);
        if (rc && write(fds[1], msg, strlen(msg)) < 0) rc = 2;
        _exit(rc ? 1 : 0);
    }
    close(fds[1]);
    int status = 0, done = 0;
    struct timespec nap = {0, 5000000};
    for (double waited = 0; waited < seconds; waited += 0.005) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            done = 1;
            break;
        }
        nanosleep(&nap, NULL);
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        close(fds[0]);
        return tg_errf(err, errlen, "the kernel did not return within %.0f s when called with V = identity (dv = %d)",
                       seconds, T);
    }
    char msg[512];
    ssize_t n = read(fds[0], msg, sizeof msg - 1);
    close(fds[0]);
    msg[n > 0 ? n : 0] = 0;
    if (WIFSIGNALED(status))
        return tg_errf(err, errlen, "the kernel crashed (%s) when called with V = identity (dv = %d)",
                       strsignal(WTERMSIG(status)), T);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return tg_errf(err, errlen, "%s", msg[0] ? msg : "probe failed");
    return 0;
}
