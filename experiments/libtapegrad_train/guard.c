#define _POSIX_C_SOURCE 200809L   /* sigaction */
#include "tg_guard.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t got_signal;

static void on_signal(int sig) {
    if (!got_signal) got_signal = sig;
}

static const int stop_sigs[3] = {SIGINT, SIGTERM, SIGHUP};   /* SIGHUP: the terminal or ssh session went away */
static struct sigaction stop_saved[3];
static int stop_installed;

void tg_guard_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;   /* writes go on; a second signal kills */
    got_signal = 0;
    for (int i = 0; i < 3; i++) sigaction(stop_sigs[i], &sa, stop_installed ? NULL : &stop_saved[i]);
    stop_installed = 1;
}

void tg_guard_restore(void) {
    if (!stop_installed) return;
    for (int i = 0; i < 3; i++) sigaction(stop_sigs[i], &stop_saved[i], NULL);
    stop_installed = 0;
}

void tg_guard_reraise(int sig) {
    signal(sig, SIG_DFL);
    raise(sig);
}

int tg_guard_signal(void) { return got_signal; }

/* ---- crashes ------------------------------------------------------------------ */
static const int crash_sigs[5] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
static struct sigaction crash_saved[5];
static volatile sig_atomic_t crash_fd = -1, crash_step = -1, crash_armed;
static const char *volatile crash_what;

static void put(int fd, const char *s) {
    size_t n = strlen(s);   /* strlen is async-signal-safe (POSIX.1-2008 TC2) */
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w <= 0) return;
        s += w, n -= (size_t)w;
    }
}

static void on_crash(int sig) {
    for (int pass = 0; pass < 2; pass++) {
        const int fd = pass ? 2 : crash_fd;
        if (fd < 0 || (pass && crash_fd == 2)) continue;
        const char *name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE"
                           : sig == SIGILL ? "SIGILL" : "SIGABRT";
        char num[24], *p = num + sizeof num;
        *--p = 0;
        int v = crash_step < 0 ? 0 : crash_step;
        do *--p = (char)('0' + v % 10), v /= 10;
        while (v);
        put(fd, "# crashed: ");
        put(fd, name);
        put(fd, " at step ");
        put(fd, p);
        if (crash_what) put(fd, ": "), put(fd, crash_what);
        put(fd, "\n");
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void tg_guard_crash_arm(int fd, const char *what) {
    crash_fd = fd, crash_what = what, crash_step = -1;
    if (crash_armed) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    for (int i = 0; i < 5; i++) sigaction(crash_sigs[i], &sa, &crash_saved[i]);
    crash_armed = 1;
}

void tg_guard_crash_step(int step) { crash_step = step; }

void tg_guard_crash_disarm(void) {
    if (!crash_armed) return;
    for (int i = 0; i < 5; i++) sigaction(crash_sigs[i], &crash_saved[i], NULL);
    crash_armed = 0, crash_fd = -1, crash_what = NULL;
}

const char *tg_guard_signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

static int64_t first_bad(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

/* "tg_matmul (tape node 7, output [32,32,512], inputs l0.wq, [32,32,128])" */
static void describe_node(const tg_ctx *ctx, int i, char *buf, size_t len) {
    const tg_node *n = &ctx->nodes[i];
    int k = snprintf(buf, len, "%s (tape node %d of %d, output %s, inputs", n->op, i, ctx->n_nodes, TG_SHAPE(n->out));
    for (int j = 0, shown = 0; j < n->n_in && k > 0 && (size_t)k < len; j++) {
        if (!n->in[j]) continue;   /* an op's absent input (the attention ops keep fixed slots) */
        k += snprintf(buf + k, len - (size_t)k, "%s %s", shown++ ? "," : "",
                      n->in[j]->name ? n->in[j]->name : TG_SHAPE(n->in[j]));
    }
    if (k > 0 && (size_t)k < len) snprintf(buf + k, len - (size_t)k, ")");
}

void tg_guard_forward(const tg_ctx *ctx, const tg_params *P, char *msg, size_t len) {
    for (int p = 0; p < P->n; p++) {
        int64_t i = first_bad(P->list[p]->data, P->list[p]->numel);
        if (i >= 0) {
            snprintf(msg, len, "parameter %s %s holds %g at element %lld", P->list[p]->name, TG_SHAPE(P->list[p]),
                     P->list[p]->data[i], (long long)i);
            return;
        }
    }
    for (int n = 0; n < ctx->n_nodes; n++) {
        const tg_tensor *o = ctx->nodes[n].out;
        int64_t i = first_bad(o->data, o->numel);
        if (i >= 0) {
            char d[512];
            describe_node(ctx, n, d, sizeof d);
            snprintf(msg, len, "the first non-finite value (%g) is in the output of %s", o->data[i], d);
            return;
        }
    }
    snprintf(msg, len, "no parameter or recorded op output is non-finite (an unrecorded op made it)");
}

void tg_guard_backward(const tg_ctx *ctx, const tg_params *P, char *msg, size_t len) {
    int k = 0;
    msg[0] = 0;
    for (int p = 0; p < P->n; p++) {
        int64_t i = first_bad(P->list[p]->grad, P->list[p]->numel);
        if (i >= 0) {
            k = snprintf(msg, len, "gradient of parameter %s %s is %g at element %lld", P->list[p]->name,
                         TG_SHAPE(P->list[p]), P->list[p]->grad[i], (long long)i);
            break;
        }
    }
    for (int n = ctx->n_nodes - 1; n >= 0; n--) {
        const tg_tensor *o = ctx->nodes[n].out;
        if (!o->grad || first_bad(o->grad, o->numel) < 0) continue;
        char d[512];
        describe_node(ctx, n, d, sizeof d);
        if (k >= 0 && (size_t)k < len)
            snprintf(msg + k, len - (size_t)k, "%sthe first non-finite gradient in backward order is that of the "
                     "output of %s", k ? "; " : "", d);
        return;
    }
    if (!k) snprintf(msg, len, "no non-finite gradient found");
}
