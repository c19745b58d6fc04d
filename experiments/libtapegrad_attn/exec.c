/* An attention kernel in another process (tg_attn_exec.h, docs/exec_protocol.md). */
#define _GNU_SOURCE   /* pipe2, sigtimedwait */
#include "tg_attn_exec.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>

#include "safetensors.h"
#include "tg_version.h"
#include "tg_profile.h"   /* its clock */

#define MAX_FRAME ((uint64_t)1 << 30)
enum { N_IN = 6 };
static const char *const in_names[N_IN] = {"q", "k", "v", "head_scale", "bias", "sinks"};

/* ---- the process -------------------------------------------------------------------- */
static void reap(tg_attn_exec *x) {
    if (x->pid > 0) {
        kill(-x->pid, SIGKILL);   /* the whole group: the shell and what it started */
        while (waitpid(x->pid, NULL, 0) < 0 && errno == EINTR) {}
        x->pid = 0;
    }
    int *fds[3] = {&x->to, &x->from, &x->err};
    for (int i = 0; i < 3; i++)
        if (*fds[i] >= 0) close(*fds[i]), *fds[i] = -1;
}

/* Records why the kernel failed (every later call says it too) and stops it. */
static void broke(tg_attn_exec *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void broke(tg_attn_exec *x, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->why, sizeof x->why, fmt, ap);
    va_end(ap);
    x->failed = 1;
    reap(x);
}

/* The kernel's stderr, line by line, prefixed: the kernel's own words. */
static void pass_stderr(tg_attn_exec *x, const char *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (b[i] != '\n' && x->line_len + 1 < sizeof x->line) {
            x->line[x->line_len++] = b[i];
            continue;
        }
        fprintf(stderr, "[kernel %s] %.*s\n", x->name, (int)x->line_len, x->line);
        if (x->line_len) snprintf(x->last, sizeof x->last, "%.*s", (int)x->line_len, x->line);
        x->line_len = 0;
        if (b[i] != '\n') x->line[x->line_len++] = b[i];
    }
}

static void drain_stderr(tg_attn_exec *x) {
    char buf[4096];
    ssize_t k;
    while (x->err >= 0 && (k = read(x->err, buf, sizeof buf)) > 0) pass_stderr(x, buf, (size_t)k);
}

/* What a kernel that died said last, and what to do: "; its last line on stderr: ...", with
 * a hint for a Python module its interpreter lacks (the usual first failure: `python3` is
 * not the interpreter that has torch), or "" when it said nothing. */
static const char *last_words(tg_attn_exec *x, char *buf, size_t len) {
    if (x->line_len) pass_stderr(x, "\n", 1);   /* a last line without its newline: said too (and kept) */
    if (!x->last[0]) return "";
    const char *mod = strstr(x->last, "No module named '");
    char hint[400] = "";
    if (mod) {
        mod += strlen("No module named '");
        const int n = (int)strcspn(mod, "'.");
        if (n == 13 && !strncmp(mod, "tapegrad_exec", 13))
            snprintf(hint, sizeof hint, " (tapegrad's Python module: put <prefix>/share/tapegrad/python, or "
                     "scripts/python of a source tree, on PYTHONPATH)");
        else
            snprintf(hint, sizeof hint, " (the interpreter the command starts has no module %.*s: install it "
                     "for that interpreter%s, or start the kernel with one that has it, e.g. "
                     "exec:'/path/to/venv/bin/python3 kernel.py')", n, mod,
                     n == 5 && !strncmp(mod, "torch", 5) ? " (Debian: apt-get install python3-torch)" : "");
    }
    snprintf(buf, len, "; its last line on stderr: %.300s%s", x->last, hint);
    return buf;
}

/* "exited with status 3" / "was killed by signal 9" / "closed its output", once the kernel is gone. */
static const char *how_it_ended(tg_attn_exec *x, char *buf, size_t len) {
    int st;
    pid_t w = 0;
    for (int i = 0; i < 100 && (w = waitpid(x->pid, &st, WNOHANG)) == 0; i++) {
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    if (w == x->pid) {
        x->pid = 0;
        if (WIFEXITED(st)) snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
        else snprintf(buf, len, "was killed by signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    } else
        snprintf(buf, len, "closed its output");
    return buf;
}

/* ---- frames ------------------------------------------------------------------------ */
/* All of p to the kernel by t_end, SIGPIPE blocked in this thread (a kernel that
 * died is an error, not a signal to this process). 0, or -1 with x broken. */
static int send_all(tg_attn_exec *x, const char *call, const void *p, size_t n, double t_end) {
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    const char *c = p;
    int rc = 0;
    while (n && !rc) {
        struct pollfd pf[2] = {{.fd = x->to, .events = POLLOUT}, {.fd = x->err, .events = POLLIN}};
        double left = t_end - tg_profile_clock();
        if (left <= 0) {
            broke(x, "%s: the kernel took no input for %.0f s", call, x->timeout);
            rc = -1;
            break;
        }
        if (poll(pf, 2, (int)(left * 1e3) + 1) < 0 && errno != EINTR) continue;
        if (pf[1].revents) drain_stderr(x);
        if (!pf[0].revents) continue;
        ssize_t k = write(x->to, c, n);
        if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (k <= 0) {
            char how[64];
            int e = errno;
            if (e == EPIPE) {
                struct timespec zero = {0, 0};
                sigtimedwait(&pipe_set, NULL, &zero);   /* the pending SIGPIPE, taken */
            }
            char said[900];
            drain_stderr(x);
            /* EPIPE: it closed its input before it answered; whether this write or the read of
             * its answer notices first is timing, and the message must not depend on it. */
            if (e == EPIPE)
                broke(x, "%s: the kernel %s before answering%s", call, how_it_ended(x, how, sizeof how),
                      last_words(x, said, sizeof said));
            else
                broke(x, "%s: the kernel %s (writing to it: %s)%s", call, how_it_ended(x, how, sizeof how),
                      strerror(e), last_words(x, said, sizeof said));
            rc = -1;
            break;
        }
        c += k;
        n -= (size_t)k;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* One frame: the body's length (8 bytes, little-endian), then the body. */
static int send_frame(tg_attn_exec *x, const char *call, const unsigned char *body, size_t len, double t_end) {
    unsigned char head[8];
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)((uint64_t)len >> (8 * i));
    return send_all(x, call, head, 8, t_end) || send_all(x, call, body, len, t_end) ? -1 : 0;
}

/* One reply frame's body by t_end, into x->rbuf (kept from call to call: a
 * buffer of that size allocated afresh would fault its pages in every time).
 * 0 with *len set, or -1 with x broken. */
static int receive(tg_attn_exec *x, const char *call, size_t *len, double t_end) {
    unsigned char head[8];
    size_t got = 0, want = 8;
    int in_body = 0;
    for (;;) {
        struct pollfd pf[2] = {{.fd = x->from, .events = POLLIN}, {.fd = x->err, .events = POLLIN}};
        double left = t_end - tg_profile_clock();
        if (left <= 0) {
            broke(x, "%s: no answer in %.0f s", call, x->timeout);
            return -1;
        }
        if (poll(pf, 2, (int)(left * 1e3) + 1) < 0 && errno != EINTR) continue;
        if (pf[1].revents) drain_stderr(x);
        if (!pf[0].revents) continue;
        ssize_t k = in_body ? read(x->from, x->rbuf + got, want - got) : read(x->from, head + got, want - got);
        if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (k <= 0) {
            char how[64];
            const int inside = got || in_body;
            char said[900];
            drain_stderr(x);
            broke(x, "%s: the kernel %s%s%s", call, how_it_ended(x, how, sizeof how),
                  inside ? " in the middle of a frame" : " before answering", last_words(x, said, sizeof said));
            return -1;
        }
        got += (size_t)k;
        if (got < want) continue;
        if (in_body) break;
        uint64_t n = 0;
        for (int i = 0; i < 8; i++) n |= (uint64_t)head[i] << (8 * i);
        if (n < 1 || n > MAX_FRAME) {
            broke(x, "%s: the kernel's frame says %llu bytes, outside 1..2^30 (not the protocol: stray output on "
                  "its stdout?)", call, (unsigned long long)n);
            return -1;
        }
        if (n > x->rcap) {
            unsigned char *grown = realloc(x->rbuf, (size_t)n);
            if (!grown) {
                broke(x, "%s: out of memory for a %llu-byte frame", call, (unsigned long long)n);
                return -1;
            }
            x->rbuf = grown, x->rcap = (size_t)n;
        }
        got = 0;
        want = (size_t)n;
        in_body = 1;
    }
    *len = want;
    return 0;
}

/* Sends the request (meta, tensors) and reads the reply into f, checked: the
 * protocol, the type wanted and the id. 0, or -1 with x->why said: x broken,
 * or, for an "error" reply (the kernel refused the call), still serving. */
static int exchange(tg_attn_exec *x, const char *call, const tg_st_kv *meta, int n_meta, const tg_st_tensor *t, int n,
                    const char *want_type, uint64_t id, tg_st_file *f) {
    char err[512];
    size_t len = 0;
    /* no checksum: the frame's length and the body's structure are checked, and a pipe loses no byte */
    if (tg_st_encode_to(t, n, meta, n_meta, 0, &x->sbuf, &x->scap, &len, err, sizeof err)) {
        broke(x, "%s: %s", call, err);
        return -1;
    }
    const double t_end = tg_profile_clock() + x->timeout;
    if (send_frame(x, call, x->sbuf, len, t_end) || receive(x, call, &len, t_end)) return -1;
    if (tg_st_parse_view(x->rbuf, len, f, err, sizeof err)) {   /* f reads x->rbuf: used up before the next call */
        broke(x, "%s: the kernel's reply is not a safetensors body: %s", call, err);
        return -1;
    }
    const char *proto = tg_st_meta(f, "protocol"), *type = tg_st_meta(f, "type"), *rid = tg_st_meta(f, "id");
    char idbuf[32];
    snprintf(idbuf, sizeof idbuf, "%llu", (unsigned long long)id);
    const char *bad = NULL;
    if (!proto || strcmp(proto, TG_ATTN_EXEC_PROTOCOL)) bad = "protocol is not 1";
    else if (type && !strcmp(type, "error")) {   /* the kernel refused this call; it serves on */
        const char *m = tg_st_meta(f, "message");
        snprintf(x->why, sizeof x->why, "%s: the kernel answered error: %.500s", call, m ? m : "(no message)");
        tg_st_free(f);
        return -1;
    } else if (!type || strcmp(type, want_type)) bad = "the wrong message type";
    else if (id && (!rid || strcmp(rid, idbuf))) bad = "another id";
    if (bad) {
        broke(x, "%s: the kernel answered with %s (type %.40s, id %.40s; wanted %s, id %s)", call, bad,
              type ? type : "none", rid ? rid : "none", want_type, id ? idbuf : "none");
        tg_st_free(f);
        return -1;
    }
    return 0;
}

/* The reply's tensor `name`: F32 (or BF16, F16, widened: a kernel may answer in its precision) of
 * exactly that shape, copied to dst. 0, or -1 with x broken. */
static int take(tg_attn_exec *x, const char *call, const tg_st_file *f, const char *name, const tg_tensor *like,
                float *dst) {
    const tg_st_entry *e = tg_st_find(f, name);
    char want[TG_SHAPE_BUF];
    tg_shape_str(like, want);
    int ok = e && (e->dtype == TG_ST_F32 || e->dtype == TG_ST_BF16 || e->dtype == TG_ST_F16) && e->ndim == like->ndim;
    for (int d = 0; ok && d < like->ndim; d++) ok = e->shape[d] == like->shape[d];
    if (!ok) {
        char got[160] = "missing";
        if (e) {
            int k = snprintf(got, sizeof got, "%s [", tg_st_dtype_name(e->dtype));
            for (int d = 0; d < e->ndim && k < (int)sizeof got - 24; d++)
                k += snprintf(got + k, sizeof got - k, "%s%lld", d ? "," : "", (long long)e->shape[d]);
            snprintf(got + k, sizeof got - k, "]");
        }
        broke(x, "%s: the kernel's %s is %s, the call needs F32 %s", call, name, got, want);
        return -1;
    }
    tg_st_get_f32(e, dst);
    return 0;
}

/* ---- forward, backward, release ------------------------------------------------------- */
/* Every failed call ends here: counted (the program tells a kernel's failure from others by it). */
static TG_NORETURN void call_failed(tg_ctx *ctx, tg_attn_exec *x, const char *why) {
    x->calls_failed++;
    tg_fail(ctx, "exec kernel %s: %s", x->name, why);
}

/* A forked child speaking on the parent's pipes would interleave frames with it. */
static void check_owner(tg_ctx *ctx, tg_attn_exec *x) {
    if (getpid() != x->owner) {
        char why[200];
        snprintf(why, sizeof why, "called from process %ld, a fork of the process that started it (%ld): the child "
                 "must start its own first (tg_attn_exec_reopen)", (long)getpid(), (long)x->owner);
        call_failed(ctx, x, why);
    }
}
typedef struct {
    tg_attn_exec *x;
    uint64_t id;
} exec_rec;

static void release(tg_ctx *ctx, tg_attn_exec *x, uint64_t id) {
    char call[64], idbuf[32];
    snprintf(call, sizeof call, "release %llu", (unsigned long long)id);
    snprintf(idbuf, sizeof idbuf, "%llu", (unsigned long long)id);
    const tg_st_kv meta[] = {{"protocol", TG_ATTN_EXEC_PROTOCOL}, {"type", "release"}, {"id", idbuf}};
    tg_st_file f;
    if (exchange(x, call, meta, 3, NULL, 0, "released", id, &f)) call_failed(ctx, x, x->why);
    tg_st_free(&f);
}

/* t as a tensor of the frame: F32, or in prec (BF16, F16: rounded to nearest even, in ctx's arena) */
static tg_st_tensor st_of(tg_ctx *ctx, const char *name, const float *data, const tg_tensor *t, int prec) {
    tg_st_tensor s = {.name = name, .dtype = TG_ST_F32, .ndim = t->ndim, .data = data};
    for (int d = 0; d < t->ndim; d++) s.shape[d] = t->shape[d];
    if (prec != TG_FP32) {
        uint16_t *h = tg_arena_alloc(ctx, (size_t)t->numel * sizeof(uint16_t));
        for (int64_t i = 0; i < t->numel; i++) h[i] = prec == TG_BF16 ? tg_bf16_of(data[i]) : tg_f16_of(data[i]);
        s.dtype = prec == TG_BF16 ? TG_ST_BF16 : TG_ST_F16, s.data = h;
    }
    return s;
}

static void exec_backward(tg_ctx *ctx, const tg_node *n) {
    const exec_rec *r = n->saved;
    tg_attn_exec *x = r->x;
    check_owner(ctx, x);
    if (x->failed) call_failed(ctx, x, x->why);
    char call[64], idbuf[32];
    snprintf(call, sizeof call, "backward %llu", (unsigned long long)r->id);
    snprintf(idbuf, sizeof idbuf, "%llu", (unsigned long long)r->id);
    const tg_st_kv meta[] = {{"protocol", TG_ATTN_EXEC_PROTOCOL}, {"type", "backward"}, {"id", idbuf}};
    const tg_st_tensor dout = st_of(ctx, "dout", n->out->grad, n->out, tg_attn_kernel_precision(&x->kernel));
    tg_st_file f;
    if (exchange(x, call, meta, 3, &dout, 1, "grads", r->id, &f)) call_failed(ctx, x, x->why);
    for (int i = 0; i < N_IN; i++) {
        tg_tensor *in = n->in[i];
        if (!in || !in->grad) continue;
        char name[16];
        snprintf(name, sizeof name, "d%s", in_names[i]);
        float *g = malloc((size_t)in->numel * sizeof(float));
        if (!g || take(x, call, &f, name, in, g)) {
            free(g);
            tg_st_free(&f);
            call_failed(ctx, x, g ? x->why : "out of memory");
        }
        for (int64_t j = 0; j < in->numel; j++) in->grad[j] += g[j];
        free(g);
    }
    tg_st_free(&f);
    release(ctx, x, r->id);
}

static tg_tensor *exec_attend(void *self, tg_ctx *ctx, const tg_attn_args *args) {
    tg_attn_exec *x = self;
    check_owner(ctx, x);
    if (x->failed) call_failed(ctx, x, x->why);
    const tg_attn_args a = tg_attn_args_of(args);
    if (!a.q || !a.k || !a.v || a.q->ndim != 4 || a.k->ndim != 4 || a.v->ndim != 4)
        tg_fail(ctx, "exec kernel %s: q, k and v must be [B, T, heads, dim]", x->name);
    const int B = a.q->shape[0], Tq = a.q->shape[1], H = a.q->shape[2], dv = a.v->shape[3];
    const uint64_t id = ++x->next_id;
    tg_tensor *ins[N_IN] = {a.q, a.k, a.v, a.head_scale, a.bias, a.sinks};
    char needs[64] = "";
    for (int i = 0; i < N_IN; i++)
        if (ins[i] && ins[i]->requires_grad && ctx->grad_enabled)
            snprintf(needs + strlen(needs), sizeof needs - strlen(needs), "%s%s", needs[0] ? "," : "", in_names[i]);
    char sc[32], cap[32], drop[32], seed[32], wl[16], wr[16], idbuf[32], causal[4], layer[16];
    snprintf(sc, sizeof sc, "%.9g", a.scale);
    snprintf(cap, sizeof cap, "%.9g", a.softcap);
    snprintf(drop, sizeof drop, "%.9g", a.dropout);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)a.dropout_seed);
    snprintf(wl, sizeof wl, "%d", a.window_left);
    snprintf(wr, sizeof wr, "%d", a.window_right);
    snprintf(idbuf, sizeof idbuf, "%llu", (unsigned long long)id);
    snprintf(causal, sizeof causal, "%d", a.causal ? 1 : 0);
    snprintf(layer, sizeof layer, "%d", a.layer);
    /* layer only when not 0: a kernel before 0.21 reads the call as before */
    const tg_st_kv meta[] = {{"protocol", TG_ATTN_EXEC_PROTOCOL}, {"type", "forward"}, {"id", idbuf}, {"scale", sc},
                             {"causal", causal}, {"window_left", wl}, {"window_right", wr}, {"softcap", cap},
                             {"dropout", drop}, {"dropout_seed", seed}, {"needs_grad", needs}, {"layer", layer}};
    const int prec = tg_attn_kernel_precision(&x->kernel);
    tg_st_tensor t[N_IN + 2];
    int n = 0;
    for (int i = 0; i < N_IN; i++)   /* q, k, v in the kernel's precision; the rest F32 */
        if (ins[i]) t[n++] = st_of(ctx, in_names[i], ins[i]->data, ins[i], i < 3 ? prec : TG_FP32);
    if (a.alibi) t[n++] = st_of(ctx, "alibi", a.alibi->data, a.alibi, TG_FP32);
    float *kv_len = NULL;
    if (a.kv_len) {   /* whole numbers, as F32 (the protocol has one dtype) */
        kv_len = tg_arena_alloc(ctx, (size_t)B * sizeof(float));
        for (int b = 0; b < B; b++) kv_len[b] = (float)a.kv_len[b];
        t[n++] = (tg_st_tensor){.name = "kv_len", .dtype = TG_ST_F32, .ndim = 1, .shape = {B}, .data = kv_len};
    }
    char call[160];
    snprintf(call, sizeof call, "forward %llu (q [%d,%d,%d,%d], k [%d,%d,%d,%d], v [%d,%d,%d,%d])",
             (unsigned long long)id, B, Tq, H, a.q->shape[3], a.k->shape[0], a.k->shape[1], a.k->shape[2],
             a.k->shape[3], a.v->shape[0], a.v->shape[1], a.v->shape[2], dv);
    tg_st_file f;
    if (exchange(x, call, meta, (int)(sizeof meta / sizeof meta[0]) - !a.layer, t, n, "out", id, &f))
        call_failed(ctx, x, x->why);
    tg_tensor *out = tg_new(ctx, 4, (int[]){B, Tq, H, dv});
    if (take(x, call, &f, "out", out, out->data)) {
        tg_st_free(&f);
        call_failed(ctx, x, x->why);
    }
    tg_st_free(&f);
    tg_node *node = tg_record(ctx, "exec_attention", exec_backward, out, N_IN, ins, sizeof(exec_rec));
    if (node) *(exec_rec *)node->saved = (exec_rec){x, id};
    else release(ctx, x, id);   /* nothing will ask for its backward */
    return out;
}

/* ---- open, close ------------------------------------------------------------------------ */
static void drop_buffers(tg_attn_exec *x) {
    free(x->sbuf), free(x->rbuf);
    x->sbuf = x->rbuf = NULL;
    x->scap = x->rcap = 0;
}


#ifndef TG_PYTHON_DIRS
#define TG_PYTHON_DIRS ""
#endif
extern char **environ;

/* The kernel's environment: this process's, with tapegrad's Python folders that
 * hold tapegrad_exec.py (the installed one, then the source tree's, as built:
 * TG_PYTHON_DIRS) after whatever PYTHONPATH says, so a kernel's `import
 * tapegrad_exec` works in an uninstalled tree too. Made before fork (malloc is
 * not for a forked child); NULL: out of memory, the kernel gets this environment. */
static char **kernel_env(void) {
    char dirs[2048] = "";
    const char *src = TG_PYTHON_DIRS;
    while (*src) {
        const size_t n = strcspn(src, ":");
        char probe[1100];
        if (n && n < 1000) {
            snprintf(probe, sizeof probe, "%.*s/tapegrad_exec.py", (int)n, src);
            if (!access(probe, R_OK) && strlen(dirs) + n + 2 < sizeof dirs)
                snprintf(dirs + strlen(dirs), sizeof dirs - strlen(dirs), "%s%.*s", dirs[0] ? ":" : "", (int)n, src);
        }
        src += n + (src[n] == ':');
    }
    if (!dirs[0]) return NULL;
    size_t count = 0;
    while (environ[count]) count++;
    char **env = malloc((count + 2) * sizeof *env);
    const char *old = getenv("PYTHONPATH");
    const size_t len = strlen("PYTHONPATH=") + (old ? strlen(old) + 1 : 0) + strlen(dirs) + 1;
    char *pp = malloc(len);
    if (!env || !pp) {
        free(env), free(pp);
        return NULL;
    }
    snprintf(pp, len, "PYTHONPATH=%s%s%s", old && *old ? old : "", old && *old ? ":" : "", dirs);
    size_t k = 0;
    for (size_t i = 0; i < count; i++)
        if (strncmp(environ[i], "PYTHONPATH=", 11)) env[k++] = environ[i];
    env[k++] = pp;
    env[k] = NULL;
    return env;
}

static void free_kernel_env(char **env) {
    if (!env) return;
    for (char **e = env; *e; e++)
        if (!strncmp(*e, "PYTHONPATH=", 11)) free(*e);
    free(env);
}

static const char *hello_field(void *f, const char *key) { return tg_st_meta(f, key); }

int tg_attn_exec_open(tg_attn_exec *x, const char *cmd, double timeout, char *err, size_t errlen) {
    *x = (tg_attn_exec){.to = -1, .from = -1, .err = -1, .timeout = timeout > 0 ? timeout : TG_ATTN_EXEC_TIMEOUT,
                        .owner = getpid()};
    if (!cmd || !*cmd) return tg_errf(err, errlen, "exec: no command");
    snprintf(x->cmd, sizeof x->cmd, "%s", cmd);
    snprintf(x->name, sizeof x->name, "%.60s", cmd);   /* until the kernel names itself */
    int p_in[2], p_out[2], p_err[2];
    if (pipe2(p_in, O_CLOEXEC)) return tg_errf(err, errlen, "exec:%s: no pipe (%s)", cmd, strerror(errno));
    if (pipe2(p_out, O_CLOEXEC)) {
        close(p_in[0]), close(p_in[1]);
        return tg_errf(err, errlen, "exec:%s: no pipe (%s)", cmd, strerror(errno));
    }
    if (pipe2(p_err, O_CLOEXEC)) {
        close(p_in[0]), close(p_in[1]), close(p_out[0]), close(p_out[1]);
        return tg_errf(err, errlen, "exec:%s: no pipe (%s)", cmd, strerror(errno));
    }
    fflush(NULL);
    char **env = kernel_env();
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);   /* its own group: killed as one, with what the shell starts */
        prctl(PR_SET_PDEATHSIG, SIGKILL);   /* and with us, should we die first (a probe's child killed) */
        if (getppid() != parent) _exit(127);   /* we died before that took */
        dup2(p_in[0], 0), dup2(p_out[1], 1), dup2(p_err[1], 2);   /* dup2 clears close-on-exec */
        char *const argv[] = {"sh", "-c", (char *)cmd, NULL};
        execve("/bin/sh", argv, env ? env : environ);
        _exit(127);
    }
    free_kernel_env(env);
    close(p_in[0]), close(p_out[1]), close(p_err[1]);
    if (pid < 0) {
        close(p_in[1]), close(p_out[0]), close(p_err[0]);
        return tg_errf(err, errlen, "exec:%s: fork failed (%s)", cmd, strerror(errno));
    }
    setpgid(pid, pid);   /* also here: whichever runs first */
    x->pid = pid, x->to = p_in[1], x->from = p_out[0], x->err = p_err[0];
    /* 1 MiB pipes (Linux's default ceiling for an unprivileged process) instead of 64 KiB: a frame of
     * the toy model's is 2-6 MB, and each pipe-full is a wake-up of both processes */
    fcntl(x->to, F_SETPIPE_SZ, 1 << 20);
    fcntl(x->from, F_SETPIPE_SZ, 1 << 20);
    for (int i = 0; i < 3; i++) {
        int fd = i == 0 ? x->to : i == 1 ? x->from : x->err;
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    const tg_st_kv meta[] = {{"protocol", TG_ATTN_EXEC_PROTOCOL}, {"type", "hello"}, {"tapegrad", tg_version()}};
    tg_st_file f;
    const double call_limit = x->timeout;   /* starting (an interpreter, its imports) may take longer than a call */
    x->timeout = call_limit > TG_ATTN_EXEC_START ? call_limit : TG_ATTN_EXEC_START;
    const int rc = exchange(x, "hello", meta, 3, NULL, 0, "hello", 0, &f);
    x->timeout = call_limit;
    if (rc) {
        drop_buffers(x);   /* a failed open leaves nothing to close */
        return tg_errf(err, errlen, "exec:%s: %s", cmd, x->why);
    }
    const char *name = tg_st_meta(&f, "name");
    /* what it declares, read as the tables read every declaration (attn_kernel.h) */
    x->kernel = (tg_attn_kernel){sizeof(tg_attn_kernel), TG_ATTENTION_PLUGIN_ABI, 0, x->name, NULL, NULL, x,
                                 exec_attend, 0, TG_FP32};
    char why[400] = "";
    if (!name || !*name) snprintf(why, sizeof why, "the kernel gave no name");
    else (void)tg_attn_declared_read(&x->kernel, hello_field, &f, why, sizeof why);
    if (why[0]) {
        tg_st_free(&f);
        broke(x, "hello: %s", why);
        drop_buffers(x);
        return tg_errf(err, errlen, "exec:%s: %s", cmd, x->why);
    }
    snprintf(x->name, sizeof x->name, "%s", name);
    tg_st_free(&f);
    return 0;
}

int tg_attn_exec_reopen(tg_attn_exec *x, char *err, size_t errlen) {
    if (x->owner == getpid()) return tg_errf(err, errlen, "exec kernel %s: reopen: this process started it", x->name);
    int *fds[3] = {&x->to, &x->from, &x->err};   /* our copies of the parent's ends; its kernel runs on */
    for (int i = 0; i < 3; i++)
        if (*fds[i] >= 0) close(*fds[i]), *fds[i] = -1;
    x->pid = 0;
    drop_buffers(x);   /* this process's copies */
    char cmd[sizeof x->cmd], name[sizeof x->name];
    snprintf(cmd, sizeof cmd, "%s", x->cmd);
    snprintf(name, sizeof name, "%s", x->name);
    char declared[600], again[600];
    tg_attn_declared_str(&x->kernel, declared, sizeof declared);
    const double timeout = x->timeout;
    if (tg_attn_exec_open(x, cmd, timeout, err, errlen)) {
        x->failed = 1;
        snprintf(x->why, sizeof x->why, "%s", err);
        return -1;
    }
    if (strcmp(name, x->name) || strcmp(declared, tg_attn_declared_str(&x->kernel, again, sizeof again))) {
        broke(x, "hello: this copy greets as '%s' declaring other features or conventions than the first ('%s')",
              x->name, name);
        return tg_errf(err, errlen, "exec:%s: %s", cmd, x->why);
    }
    return 0;
}

tg_attn_exec *tg_attn_exec_of(const tg_attn_kernel *k) {
    return k && k->size >= sizeof(tg_attn_kernel) && k->attend_self == exec_attend ? k->self : NULL;
}

void tg_attn_exec_close(tg_attn_exec *x) {
    if (x->owner != getpid()) {   /* a fork's copy that was not reopened: the pipes and kernel are the parent's */
        int *fds[3] = {&x->to, &x->from, &x->err};
        for (int i = 0; i < 3; i++)
            if (*fds[i] >= 0) close(*fds[i]), *fds[i] = -1;
        x->pid = 0;
        drop_buffers(x);
        return;
    }
    if (x->pid > 0 && !x->failed) {
        const tg_st_kv meta[] = {{"protocol", TG_ATTN_EXEC_PROTOCOL}, {"type", "bye"}};
        unsigned char *body;
        size_t len;
        char err[128];
        if (!tg_st_encode(NULL, 0, meta, 2, &body, &len, err, sizeof err)) {
            if (!send_frame(x, "bye", body, len, tg_profile_clock() + 2)) {
                int st;   /* it exits on its own: 2 s */
                for (int i = 0; i < 200; i++) {
                    drain_stderr(x);
                    if (waitpid(x->pid, &st, WNOHANG) == x->pid) {
                        x->pid = 0;
                        break;
                    }
                    struct timespec nap = {0, 10 * 1000 * 1000};
                    nanosleep(&nap, NULL);
                }
            }
            free(body);
        }
    }
    drain_stderr(x);
    if (x->line_len) pass_stderr(x, "\n", 1);
    reap(x);
    drop_buffers(x);
}
