/* attn_check (tg_attn_check.h): the report, what every probe shares, and the driver that runs each
 * probe in a sandbox (tg_sandbox.h) or, for a kernel in another process, here. The probes:
 * probes_textbook.c, probes_spans.c, probes_logits.c, probes_health.c. */
#define _POSIX_C_SOURCE 200809L   /* strsignal */
#include "check_internal.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tg_attn_exec.h"
#include "tg_attn_probe.h"
#include "tg_sandbox.h"

/* ---- the report ------------------------------------------------------------------ */
void tgc_add(tg_attn_check_report *r, const char *check, const char *what, int status, double value, double limit,
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
    if (r->sink) {   /* in a probe's sandbox: to the parent at once, so a later crash loses nothing */
        if (tg_sandbox_send(r->sink, &l, sizeof l)) _exit(3);
        return;
    }
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 32;
        tg_attn_check_line *p = realloc(r->lines, (size_t)cap * sizeof *p);
        if (!p) return;
        r->lines = p, r->cap = cap;
    }
    r->lines[r->n++] = l;
    r->failed += status == TG_ATTN_CHECK_FAIL || status == TG_ATTN_CHECK_CRASH;
}

/* ---- calling the kernel ------------------------------------------------------------ */
/* The kernel on args, its tg_fail caught: the output, or NULL with the message in msg. */
tg_tensor *tgc_call(tg_ctx *ctx, const tg_attn_kernel *K, const tg_attn_args *a, char *msg, size_t len) {
    char why[300];
    tg_tensor *out = tg_attn_call_caught(ctx, K, a, ctx->grad_enabled, why, sizeof why);
    if (!out && why[0]) {
        snprintf(msg, len, "it refused: %.250s", why);
        return NULL;
    }
    const int B = a->q->shape[0], Tq = a->q->shape[1], H = a->q->shape[2], dv = a->v->shape[3];
    if (!out || out->ndim != 4 || out->shape[0] != B || out->shape[1] != Tq || out->shape[2] != H || out->shape[3] != dv) {
        snprintf(msg, len, "it returned %s, not [%d,%d,%d,%d]", out ? TG_SHAPE(out) : "NULL", B, Tq, H, dv);
        return NULL;
    }
    return out;
}

/* The call a probe means, fitted to the kernel's conventions (attn_tables.h: each convention's fit):
 * the nearest call the kernel takes (causal for causal_only, its own scale for scale_rsqrt_d, ...).
 * Each probe fits its args before it calls the kernel or the reference, so both compute the same
 * thing and no probe sends what a declared convention excludes. Empty rows are the padding probe's
 * alone. */
void tgc_conform(const tg_attn_kernel *K, tg_attn_args *a) { tg_attn_conform(tg_attn_kernel_conventions(K), a); }

int tgc_takes(const tg_attn_kernel *K, int causal, int with_head_scale) {
    tg_tensor q = {.ndim = 4, .shape = {1, 1, 1, 8}}, hs = {.ndim = 1, .shape = {1}};
    tg_attn_args a = tg_attn_args_make(&q, &q, &q, 0.5f);
    a.causal = causal, a.head_scale = with_head_scale ? &hs : NULL;
    tg_attn_conform(tg_attn_kernel_conventions(K), &a);
    return a.causal == causal && !a.head_scale == !with_head_scale;
}

float tgc_fitted_scale(const tg_attn_kernel *K, int d, float scale) {
    tg_tensor q = {.ndim = 4, .shape = {1, 1, 1, d}};
    tg_attn_args a = tg_attn_args_make(&q, &q, &q, scale);
    tg_attn_conform(tg_attn_kernel_conventions(K), &a);
    return a.scale;
}

tg_tensor *tgc_randn(tg_ctx *ctx, tg_rng *r, int B, int T, int H, int d, float std) {
    tg_tensor *t = tg_new(ctx, 4, (int[]){B, T, H, d});
    tg_fill_normal(r, t->data, t->numel, 0.0f, std);
    return t;
}

tg_tensor *tgc_vec(tg_ctx *ctx, int n, const float *x) {
    tg_tensor *t = tg_new(ctx, 1, (int[]){n});
    memcpy(t->data, x, sizeof(float) * (size_t)n);
    return t;
}

tg_tensor *tgc_head_scales(tg_ctx *ctx, int H, float a, float b) {
    tg_tensor *t = tg_new(ctx, 1, (int[]){H});
    for (int h = 0; h < H; h++) t->data[h] = h % 2 ? b : a;
    return t;
}

int tgc_grid(const tg_attn_check_opts *o, int *d) {
    if (o->d_head > 0) {
        d[0] = o->d_head;
        return 1;
    }
    d[0] = 8, d[1] = 32, d[2] = 64, d[3] = 128;
    return 4;
}

int tgc_near(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b); }

/* max |out − ref| / max |ref| over a call; -1 with *bad set when out holds a non-finite value */
double tgc_rel_err(const tg_tensor *out, const tg_tensor *ref, int64_t *bad) {
    double maxref = 0, err = 0;
    *bad = -1;
    for (int64_t i = 0; i < ref->numel; i++) {
        maxref = fmax(maxref, fabs(ref->data[i]));
        if (!isfinite(out->data[i]) && *bad < 0) *bad = i;
        err = fmax(err, fabs((double)out->data[i] - ref->data[i]));
    }
    return *bad >= 0 ? -1 : err / (maxref > 0 ? maxref : 1);
}

/* dv_ok: the kernel declares dv != d (else dv = d: a probe uses no feature the kernel did not declare) */
void tgc_make_case(tgc_feature_case *c, unsigned f, int dv_ok, int grad_inputs, tg_params *P, uint64_t seed) {
    tg_ctx_init(&c->ctx, 0);
    tg_rng rng;
    tg_rng_seed(&rng, seed, f);
    const int B = 2, H = 4, d = 6;
    int Tq = 5, Tk = 5, Hkv = H, dv = dv_ok ? 4 : d;
    if (f == TG_ATTN_F_GQA) Hkv = 2;
    if (f == TG_ATTN_F_TQ_TK) Tq = 3, Tk = 7;
    const int shapes[3][4] = {{B, Tq, H, d}, {B, Tk, Hkv, d}, {B, Tk, Hkv, dv}};
    static const char *const names[3] = {"q", "k", "v"};
    tg_tensor *t[3];
    for (int i = 0; i < 3; i++) {
        t[i] = grad_inputs ? tg_param(P, names[i], 4, shapes[i]) : tg_new(&c->ctx, 4, shapes[i]);
    }
    tg_tensor *bias = NULL, *sinks = NULL;
    if (f == TG_ATTN_F_BIAS)
        bias = grad_inputs ? tg_param(P, "bias", 4, (int[]){1, H, Tq, Tk}) : tg_new(&c->ctx, 4, (int[]){1, H, Tq, Tk});
    if (f == TG_ATTN_F_SINKS) sinks = grad_inputs ? tg_param(P, "sinks", 1, (int[]){H}) : tg_new(&c->ctx, 1, (int[]){H});
    if (grad_inputs) tg_params_alloc(P);
    for (int i = 0; i < 3; i++) tg_fill_normal(&rng, t[i]->data, t[i]->numel, 0.0f, 1.0f);
    if (bias) tg_fill_normal(&rng, bias->data, bias->numel, 0.0f, 1.0f);
    if (sinks)
        for (int h = 0; h < H; h++) sinks->data[h] = 0.5f * (float)h - 0.5f;
    c->a = tg_attn_args_make(t[0], t[1], t[2], 0.5f);
    c->a.causal = 1;
    c->a.bias = bias, c->a.sinks = sinks;
    if (f == TG_ATTN_F_WINDOW) c->a.window_left = 1;
    if (f == TG_ATTN_F_PADDING) c->kv_len[0] = 3, c->kv_len[1] = 5, c->a.kv_len = c->kv_len, c->a.causal = 0;
    if (f == TG_ATTN_F_ALIBI) {
        const float sl[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
        c->a.alibi = tgc_vec(&c->ctx, H, sl);
    }
    if (f == TG_ATTN_F_SOFTCAP) c->a.softcap = 1.5f, c->a.scale = 1.2f;
    if (f == TG_ATTN_F_DROPOUT) c->a.dropout = 0.3f, c->a.dropout_seed = 11;
    snprintf(c->what, sizeof c->what, "%s", tg_attn_feature_name(f));
}


/* ---- the probes, in order: the textbook ones, then each feature's (it runs when the kernel declares
 * the feature; dv != d has none of its own: the forward and every probe's V = identity call take
 * dv != d when it is declared) ---------------------------------------------------------------------- */
static const struct {
    const char *name;
    tgc_probe_fn p;
    unsigned f;
} probes[] = {
    {"forward", tgc_probe_forward, 0},          {"temperature", tgc_probe_temperature, 0},
    {"layout", tgc_probe_layout, 0},            {"mask", tgc_probe_mask, 0},                {"gqa", tgc_probe_gqa, TG_ATTN_F_GQA},
    {"alignment", tgc_probe_alignment, TG_ATTN_F_TQ_TK}, {"window", tgc_probe_window, TG_ATTN_F_WINDOW},
    {"padding", tgc_probe_padding, TG_ATTN_F_PADDING},   {"bias", tgc_probe_bias, TG_ATTN_F_BIAS},
    {"alibi", tgc_probe_alibi, TG_ATTN_F_ALIBI},         {"softcap", tgc_probe_softcap, TG_ATTN_F_SOFTCAP},
    {"sinks", tgc_probe_sinks, TG_ATTN_F_SINKS},         {"dropout", tgc_probe_dropout, TG_ATTN_F_DROPOUT},
    {"gradient", tgc_probe_gradient, 0},        {"health", tgc_probe_health, 0}};

const char *tg_attn_check_probe_of(unsigned feature) {
    if (feature == TG_ATTN_F_DV) return "forward";
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++)
        if (probes[i].f == feature) return probes[i].name;
    return NULL;
}

/* ---- the probes in sandboxes ----------------------------------------------------------------------- */
typedef struct {
    tgc_probe_fn p;
    const tg_attn_kernel *K;
    const tg_attn_check_opts *o;
    tg_attn_check_report *r;   /* the parent's */
} probe_job;

static int probe_child(tg_sandbox *sb, void *u) {
    probe_job *j = u;
    tg_attn_check_report mine = {.sink = sb};   /* each line to the parent as it is made */
    j->p(j->K, j->o, &mine);
    return 0;
}

static void probe_line(void *u, const void *data, size_t n) {
    probe_job *j = u;
    tg_attn_check_line l;
    if (n != sizeof l) return;
    memcpy(&l, data, sizeof l);
    tgc_add(j->r, l.check, l.what, l.status, l.value, l.limit, "%s", l.text);
}

static void run_probe(const char *name, tgc_probe_fn p, const tg_attn_kernel *K, const tg_attn_check_opts *o,
                      tg_attn_check_report *r) {
    probe_job j = {.p = p, .K = K, .o = o, .r = r};
    const double limit = o->timeout > 0 ? o->timeout : 60;
    tg_sandbox_end end;
    tg_sandbox_run(probe_child, &j, &(tg_sandbox_opts){.seconds = limit, .on_record = probe_line, .u = &j}, &end);
    if (end.outcome == TG_SANDBOX_NOT_RUN)
        tgc_add(r, name, "-", TG_ATTN_CHECK_CRASH, NAN, NAN, "could not run the probe: %s", end.msg);
    else if (end.outcome == TG_SANDBOX_HUNG)
        tgc_add(r, name, "-", TG_ATTN_CHECK_CRASH, NAN, limit, "the kernel hung: the %s probe got no answer within %.0f s",
                name, limit);
    else if (end.outcome == TG_SANDBOX_CRASHED)
        tgc_add(r, name, "-", TG_ATTN_CHECK_CRASH, NAN, NAN, "the kernel crashed (%s) in the %s probe%s",
                strsignal(end.signal), name,
                end.signal == SIGABRT ? " (an abort: a tg_fail outside a caught call, or no node recorded?)" : "");
    else if (end.outcome == TG_SANDBOX_EXITED || end.outcome == TG_SANDBOX_FAILED)
        tgc_add(r, name, "-", TG_ATTN_CHECK_CRASH, NAN, NAN, "the %s probe exited with status %d", name,
                end.outcome == TG_SANDBOX_FAILED ? 3 : end.status);
    if (end.stray)
        tgc_add(r, name, "stdout", TG_ATTN_CHECK_INFO, (double)end.stray, NAN, "the kernel wrote %zu bytes on its standard "
                "output in the %s probe (kept out of this report), first: %s", end.stray, name, end.stray_head);
}

/* A feature's forward line points at that feature's probe ("see the sinks probe for what"). When
 * that probe passed, the pointer would lead nowhere: the line says so, and where the difference
 * is instead (the temperature, the textbook forward) when one of those failed. */
static int failed_check(const tg_attn_check_report *r, const char *check, const char *what_prefix) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->lines[i].check, check) && !strncmp(r->lines[i].what, what_prefix, strlen(what_prefix)) &&
            (r->lines[i].status == TG_ATTN_CHECK_FAIL || r->lines[i].status == TG_ATTN_CHECK_CRASH))
            return 1;
    return 0;
}

static void point_forward_lines(tg_attn_check_report *r) {
    static const char *const tail = " probe for what";
    for (int i = 0; i < r->n; i++) {
        tg_attn_check_line *l = &r->lines[i];
        char *see = strstr(l->text, "see the ");
        if (strcmp(l->check, "forward") || l->status != TG_ATTN_CHECK_FAIL || !see || !strstr(see, tail)) continue;
        char probe[40];
        snprintf(probe, sizeof probe, "%.*s", (int)(strstr(see, tail) - (see + 8)), see + 8);
        if (failed_check(r, probe, "")) continue;
        const int temp = failed_check(r, "temperature", ""), plain = failed_check(r, "forward", "d_head="),
                  layout = failed_check(r, "layout", "");
        snprintf(see, sizeof l->text - (size_t)(see - l->text), "the %s probe passed, so the difference is elsewhere%s",
                 probe, layout ? ": the layout check failed (which row of q each query reads)"
                 : temp ? ": the temperature check failed (the multiplier applied to q·k)"
                 : plain ? ": the textbook forward differs too (the forward lines by d_head)"
                         : " (a combination of this feature with the rest of the call that its probe does not isolate)");
    }
}

/* ---- layers: the kernel seen through a layer (its calls carry it) -------------------------------- */
typedef struct {
    const tg_attn_kernel *K;
    int layer;
} at_layer;

static tg_tensor *layer_attend(void *self, tg_ctx *ctx, const tg_attn_args *args) {
    const at_layer *w = self;
    tg_attn_args a = tg_attn_args_of(args);
    a.layer = w->layer;
    return tg_attn_kernel_call(ctx, w->K, &a);
}

/* K as a kernel whose every call carries layer: its declaration, calls through layer_attend */
static tg_attn_kernel kernel_at(const tg_attn_kernel *K, at_layer *w) {
    tg_attn_kernel L = {sizeof L, TG_ATTENTION_PLUGIN_ABI, K->features, K->name, NULL, NULL, w, layer_attend,
                        tg_attn_kernel_conventions(K), tg_attn_kernel_precision(K)};
    return L;
}

/* the lines from n0 on: a further layer's, named by it */
static void name_layer(tg_attn_check_report *r, int n0, int layer) {
    for (int i = n0; i < r->n; i++) {
        char w[sizeof r->lines[i].what];
        snprintf(w, sizeof w, "L%d %.30s", layer, r->lines[i].what);
        memcpy(r->lines[i].what, w, sizeof w);
    }
}

/* at a further layer: the function and its multiplier (the finite differences of the gradient probe
 * would double a battery's time for each layer: ~6 s an exec kernel on 2 cores) */
static int probe_at_layer(const char *name) { return !strcmp(name, "forward") || !strcmp(name, "temperature"); }

/* A gradient line "with <feature>" that failed where the feature's own probe failed too: that probe
 * named the cause; finite differences of a forward that is wrong there (logits at finfo.min: the mask's
 * rounding) add a second verdict on the same thing, which can mislead. Made info, saying so. */
static void defer_gradient_lines(tg_attn_check_report *r) {
    for (int i = 0; i < r->n; i++) {
        tg_attn_check_line *l = &r->lines[i];
        if (strcmp(l->check, "gradient") || l->status != TG_ATTN_CHECK_FAIL || strncmp(l->what, "with ", 5)) continue;
        const char *probe = NULL;
        for (int f = 0; f < TG_ATTN_N_FEATURES && !probe; f++)
            if (!strcmp(l->what + 5, tg_attn_feature_name(1u << f))) probe = tg_attn_check_probe_of(1u << f);
        if (!probe || !strcmp(probe, "forward") || !failed_check(r, probe, "")) continue;
        char text[sizeof l->text];
        snprintf(text, sizeof text, "not judged apart: the %s probe failed and names the cause (%.400s)", probe, l->text);
        memcpy(l->text, text, sizeof text);
        l->status = TG_ATTN_CHECK_INFO;
        r->failed--;
    }
}

int tg_attn_check(const tg_attn_kernel *K, const tg_attn_check_opts *opts, tg_attn_check_report *r) {
    tg_attn_check_opts o = opts ? *opts : (tg_attn_check_opts){0};
    *r = (tg_attn_check_report){0};
    char has[300], not_declared[300];
    tgc_add(r, "features", K->abi == 1 ? "ABI 1" : "declared", TG_ATTN_CHECK_INFO, NAN, NAN, "%s%s; not declared (not checked, "
        "and never called with them): %s", K->abi == 1 ? "ABI 1: textbook features only, and " : "",
        tg_attn_features_str(K->features, has, sizeof has),
        tg_attn_features_str(TG_ATTN_F_ALL & ~K->features, not_declared, sizeof not_declared));
    for (int i = 0; i < TG_ATTN_N_CONVENTIONS; i++)
        if (tg_attn_kernel_conventions(K) & (1u << i)) {
            const unsigned c = 1u << i;
            tgc_add(r, "convention", tg_attn_convention_token(c), TG_ATTN_CHECK_INFO, NAN, NAN, "declared: %s; the probes send only "
                "calls within it, and the programs refuse a call or run outside it, naming it", tg_attn_convention_name(c));
        }
    /* An exec kernel runs in a process of its own: what it does cannot crash this one, and each of
     * its calls has a time limit. So its probes run here, on one kernel process, started again only
     * after it died or hung (issue 38: a probe's child started its own, an interpreter and its
     * imports each time). A plugin or built-in op runs in this process: each probe in a child. */
    tg_attn_exec *caller = o.exec_cmd ? tg_attn_exec_of(K) : NULL, own = {.to = -1, .from = -1, .err = -1};
    tg_attn_exec *x = caller && caller->owner == getpid() ? caller : NULL;
    const int n_layers = o.n_layers > 0 ? (o.n_layers < TG_ATTN_CHECK_MAX_LAYERS ? o.n_layers : TG_ATTN_CHECK_MAX_LAYERS) : 1;
    if (o.n_layers <= 0) o.layers[0] = 0;
    if (n_layers > 1 || o.layers[0]) {
        char ls[80] = "";
        for (int l = 0; l < n_layers; l++)
            snprintf(ls + strlen(ls), sizeof ls - strlen(ls), "%s%d", l ? ", " : "", o.layers[l]);
        tgc_add(r, "layers", "calls", TG_ATTN_CHECK_INFO, NAN, NAN, "the calls carry layer %s: every probe at layer %d, "
            "the forward and temperature probes at each further one (lines L<layer>)", ls, o.layers[0]);
    }
    for (size_t n = 0; n < n_layers * (sizeof probes / sizeof probes[0]); n++) {
        const size_t i = n % (sizeof probes / sizeof probes[0]);
        const int l = (int)(n / (sizeof probes / sizeof probes[0])), n0 = r->n;
        if (probes[i].f && !(K->features & probes[i].f)) continue;
        if (l && !probe_at_layer(probes[i].name)) continue;
        at_layer w = {K, o.layers[l]};
        tg_attn_kernel KL;
        if (!o.exec_cmd) {
            KL = kernel_at(K, &w);
            run_probe(probes[i].name, probes[i].p, o.layers[l] ? &KL : K, &o, r);
            if (l) name_layer(r, n0, o.layers[l]);
            continue;
        }
        if (!x || x->failed) {
            char err[1024];
            if (x == &own) tg_attn_exec_close(&own);
            x = NULL;
            if (tg_attn_exec_open(&own, o.exec_cmd, o.timeout > 0 ? o.timeout : 60, err, sizeof err)) {
                tgc_add(r, probes[i].name, "-", TG_ATTN_CHECK_CRASH, NAN, NAN, "the kernel could not be started again for "
                    "the %s probe: %s", probes[i].name, err);
                own = (tg_attn_exec){.to = -1, .from = -1, .err = -1};
                continue;
            }
            x = &own;
        }
        w.K = &x->kernel, KL = kernel_at(&x->kernel, &w);
        probes[i].p(o.layers[l] ? &KL : &x->kernel, &o, r);
        if (l) name_layer(r, n0, o.layers[l]);
    }
    if (x == &own) tg_attn_exec_close(&own);
    point_forward_lines(r);
    defer_gradient_lines(r);
    return r->failed ? 1 : 0;
}

void tg_attn_check_free(tg_attn_check_report *r) {
    free(r->lines);
    *r = (tg_attn_check_report){0};
}

/* l is a further layer's line ("L<n> what") whose check failed at the first layer too */
static int failed_at_first_layer(const tg_attn_check_report *r, const tg_attn_check_line *l) {
    const char *base = l->what;
    if (base[0] != 'L' || !strchr(base, ' ')) return 0;
    for (const char *p = base + 1; *p != ' '; p++)
        if (*p < '0' || *p > '9') return 0;
    base = strchr(base, ' ') + 1;
    for (int i = 0; i < r->n; i++)
        if ((r->lines[i].status == TG_ATTN_CHECK_FAIL || r->lines[i].status == TG_ATTN_CHECK_CRASH) &&
            !strcmp(r->lines[i].check, l->check) && !strcmp(r->lines[i].what, base))
            return 1;
    return 0;
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
        int first = 1, same = 0;
        for (int i = 0; i < r->n; i++)
            if (r->lines[i].status == TG_ATTN_CHECK_FAIL || r->lines[i].status == TG_ATTN_CHECK_CRASH) {
                if (failed_at_first_layer(r, &r->lines[i])) {   /* a further layer's repeat: said once below */
                    same++;
                    continue;
                }
                fprintf(f, "%s %s %s", first ? "" : ";", r->lines[i].check, r->lines[i].what);
                first = 0;
            }
        if (same) fprintf(f, "; and %d of these again at further layers", same);
        fprintf(f, "\n");
    }
    for (int i = 0; i < r->n; i++) {
        const tg_attn_check_line *l = &r->lines[i];
        fprintf(f, "%-5s %-11s %-11s %s\n", st[l->status], l->check, l->what, l->text);
    }
}
