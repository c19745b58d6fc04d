#define _POSIX_C_SOURCE 200809L   /* strdup */
#include "tg_checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"
#include "tg_file.h"

int tg_train_state_reserve(tg_train_state *s, int rows) {
    if (rows <= s->cap_logged) return 0;
    double *p = realloc(s->logged, (size_t)rows * 2 * sizeof *p);
    if (!p) return -1;
    s->logged = p;
    s->cap_logged = rows;
    return 0;
}

void tg_train_state_free_logged(tg_train_state *s) {
    free(s->logged);
    s->logged = NULL;
    s->n_logged = s->cap_logged = 0;
}

/* ---- saving ----------------------------------------------------------------- */
/* Keys and values of any length the program accepts (a plugin's symbol of 127 bytes, a path). */
typedef struct { char *key, *value; } kv_store;

static char *dupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dupf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!p) return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

/* The optimizer of a state as a checkpoint's "optim" names it. */
static const char *optim_name(const tg_train_state *s) {
    return s->adam ? "adam" : s->adafactor ? "adafactor" : "sgd";
}

int tg_ckpt_save(const char *path, const tg_train_state *s, const tg_cli_opt *opts, int n_opts, char *err, size_t errlen) {
    const tg_params *P = s->P;
    int nt = 0, nm = 0;
    tg_st_tensor *t = calloc((size_t)P->n + 4, sizeof *t);
    kv_store *kv = calloc((size_t)n_opts + (size_t)s->n_settings + 16, sizeof *kv);
    tg_st_kv *meta = calloc((size_t)n_opts + (size_t)s->n_settings + 16, sizeof *meta);
    if (!t || !kv || !meta) {
        free(t);
        free(kv);
        free(meta);
        return tg_errf(err, errlen, "%s: out of memory", path);
    }
    for (int i = 0; i < P->n; i++) {
        const tg_tensor *p = P->list[i];
        t[nt] = (tg_st_tensor){.name = p->name, .dtype = TG_ST_F32, .ndim = p->ndim, .data = p->data};
        for (int d = 0; d < p->ndim; d++) t[nt].shape[d] = p->shape[d];
        nt++;
    }
    int64_t flat = (int64_t)P->numel;
    if (s->adam) {
        t[nt++] = (tg_st_tensor){.name = "optim.adam.m", .dtype = TG_ST_F32, .ndim = 1, .shape = {flat}, .data = s->adam->m};
        t[nt++] = (tg_st_tensor){.name = "optim.adam.v", .dtype = TG_ST_F32, .ndim = 1, .shape = {flat}, .data = s->adam->v};
    } else if (s->adafactor) {
        t[nt++] = (tg_st_tensor){.name = "optim.adafactor.v", .dtype = TG_ST_F32, .ndim = 1,
                                 .shape = {(int64_t)s->adafactor->n_v}, .data = s->adafactor->v};
        if (s->adafactor->m)
            t[nt++] = (tg_st_tensor){.name = "optim.adafactor.m", .dtype = TG_ST_F32, .ndim = 1, .shape = {flat},
                                     .data = s->adafactor->m};
    } else if (s->sgd && s->sgd->buf)
        t[nt++] = (tg_st_tensor){.name = "optim.sgd.buf", .dtype = TG_ST_F32, .ndim = 1, .shape = {flat}, .data = s->sgd->buf};
    t[nt++] = (tg_st_tensor){.name = "run.logged", .dtype = TG_ST_F64, .ndim = 2, .shape = {s->n_logged, 2},
                             .data = s->logged};

#define META(k, ...)                                                    \
    do {                                                                \
        kv[nm].key = dupf("%s", k);                                     \
        kv[nm].value = dupf(__VA_ARGS__);                               \
        nm++;                                                           \
    } while (0)
    META("format", "%s", TG_CKPT_FORMAT);
    META("format_version", "%s", TG_CKPT_VERSION);
    META("step", "%d", s->step);
    META("rng.data.state", "%" PRIu64, s->data_rng->state);
    META("rng.data.inc", "%" PRIu64, s->data_rng->inc);
    META("optim", "%s", optim_name(s));
    if (s->adam) META("optim.adam.t", "%" PRId64, s->adam->t);
    if (s->adafactor) META("optim.adafactor.t", "%" PRId64, s->adafactor->t);
    if (s->scaler) {   /* a power of two: its exponent, exactly */
        META("amp.loss_scale_log2", "%d", ilogbf(s->scaler->scale));
        META("amp.good", "%d", s->scaler->good);
        META("amp.skipped", "%" PRId64, s->scaler->skipped);
    }
    META("n_params", "%zu", P->numel);
#undef META
    for (int i = 0; i < n_opts; i++) {
        if (opts[i].kind == TG_CLI_STR || opts[i].kind == TG_CLI_FLAG) continue;   /* paths and switches are not the run's identity */
        if (tg_cli_unrecorded(&opts[i], s->added)) continue;   /* as every checkpoint before the flag existed */
        char val[4200];
        tg_cli_value(&opts[i], val, sizeof val);
        kv[nm].key = dupf("config.%s", opts[i].name);
        kv[nm].value = dupf("%s", val);
        nm++;
    }
    for (int i = 0; i < s->n_settings; i++) {
        kv[nm].key = dupf("config.%s", s->settings[i].key);
        kv[nm].value = dupf("%s", s->settings[i].value);
        nm++;
    }
    int oom = 0;
    for (int i = 0; i < nm; i++) {
        meta[i] = (tg_st_kv){kv[i].key, kv[i].value};
        oom |= !kv[i].key || !kv[i].value;
    }
    int rc = oom ? tg_errf(err, errlen, "%s: out of memory", path) : tg_st_write(path, t, nt, meta, nm, err, errlen);
    for (int i = 0; i < nm; i++) free(kv[i].key), free(kv[i].value);
    free(t);
    free(kv);
    free(meta);
    return rc;
}

/* ---- loading ---------------------------------------------------------------- */
static int parse_u64(const char *s, uint64_t *v) {
    if (!s || !*s) return -1;
    *v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        unsigned d = (unsigned)(*s - '0');
        if (*v > (UINT64_MAX - d) / 10) return -1;
        *v = *v * 10 + d;
    }
    return 0;
}

static int in_list(const char *const *list, const char *name) {
    for (; list && *list; list++)
        if (strcmp(*list, name) == 0) return 1;
    return 0;
}

static void append(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...) {
    if (!buf || !len) return;
    size_t used = strlen(buf);
    if (used + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

/* A tensor of the file that must exist with this dtype and shape. */
static const tg_st_entry *need(const tg_st_file *f, const char *name, tg_st_dtype dt, int ndim, const int64_t *shape,
                               char *err, size_t errlen) {
    const tg_st_entry *e = tg_st_find(f, name);
    if (!e) {
        tg_errf(err, errlen, "tensor '%s' is missing", name);
        return NULL;
    }
    if (e->dtype != dt) {
        tg_errf(err, errlen, "tensor '%s' is %s, expected %s", name, tg_st_dtype_name(e->dtype), tg_st_dtype_name(dt));
        return NULL;
    }
    int same = e->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = e->shape[d] == shape[d];
    if (!same) {
        char a[160] = "[", b[160] = "[";
        for (int d = 0; d < e->ndim; d++) append(a, sizeof a, "%s%lld", d ? "," : "", (long long)e->shape[d]);
        for (int d = 0; d < ndim; d++) append(b, sizeof b, "%s%lld", d ? "," : "", (long long)shape[d]);
        tg_errf(err, errlen, "tensor '%s' has shape %s], the model needs %s]", name, a, b);
        return NULL;
    }
    return e;
}

/* Every value finite (and >= 0 when nonneg): a checkpoint is a good state. */
static int check_values(const tg_st_entry *e, int nonneg, char *err, size_t errlen) {
    for (int64_t i = 0; i < e->numel; i++) {
        double x;
        if (e->dtype == TG_ST_F32) {
            float v;
            tg_st_get_f32(&(tg_st_entry){.numel = 1, .bytes = e->bytes + 4 * i}, &v);
            x = v;
        } else tg_st_get_f64(&(tg_st_entry){.numel = 1, .bytes = e->bytes + 8 * i}, &x);
        if (!isfinite(x) || (nonneg && x < 0))
            return tg_errf(err, errlen, "tensor '%s': element %lld is %g%s", e->name, (long long)i, x,
                        isfinite(x) ? " (must be >= 0)" : " (a checkpoint holds finite values)");
    }
    return 0;
}

/* The flags of the run against the checkpoint's config.*, before any tensor (a
 * different model is best said as a flag); changed: what may_differ let change. */
static int check_flags(const tg_st_file *f, const tg_train_state *s, const tg_cli_opt *opts, int n_opts,
                       const char *const *may_differ, char *changed, size_t changed_len, char *err, size_t errlen) {
    if (changed && changed_len) changed[0] = 0;
    for (int i = 0; i < n_opts; i++) {
        if (opts[i].kind == TG_CLI_STR || opts[i].kind == TG_CLI_FLAG) continue;
        char key[160], now[4200];   /* a value of any length the flags accept */
        snprintf(key, sizeof key, "config.%s", opts[i].name);
        tg_cli_value(&opts[i], now, sizeof now);
        const char *then = tg_st_meta(f, key);
        int free_flag = in_list(may_differ, opts[i].name);
        if (!then) then = tg_cli_added_value(s->added, opts[i].name);   /* a checkpoint from before the flag */
        if (!then) {
            if (free_flag) continue;
            return tg_errf(err, errlen, "it records no --%s (made by another version of the program?)", opts[i].name);
        }
        if (strcmp(then, now) == 0) continue;
        if (!free_flag) {
            char list[256] = "";
            for (const char *const *m = may_differ; m && *m; m++) append(list, sizeof list, "%s--%s", list[0] ? ", " : "", *m);
            return tg_errf(err, errlen, "setting differs: --%s is %.40s in the checkpoint, %s in this run (a resumed run "
                        "keeps every setting but %s)", opts[i].name, then, now, list);
        }
        append(changed, changed_len, "%s--%s %.40s -> %s", changed && changed[0] ? ", " : "", opts[i].name, then, now);
    }
    return 0;
}

/* The run's settings (not flags) against the checkpoint's, and no config.* the program does not know. */
static int check_settings(const tg_st_file *f, const tg_train_state *s, const tg_cli_opt *opts, int n_opts, char *err,
                          size_t errlen) {
    for (int i = 0; i < s->n_settings; i++) {
        char key[160];
        snprintf(key, sizeof key, "config.%s", s->settings[i].key);
        const char *then = tg_st_meta(f, key);
        if (!then) return tg_errf(err, errlen, "it records no %s (made by another version of the program?)", s->settings[i].key);
        const char *now = s->settings[i].value;
        if (strcmp(then, now) != 0) {   /* long values (a command, a digest) shown from a little before they part */
            size_t at = 0;
            while (then[at] && then[at] == now[at]) at++;
            const size_t from = at > 30 ? at - 20 : 0;
            return tg_errf(err, errlen, "setting differs: %s is %s%.70s%s in the checkpoint, %s%.70s%s in this run",
                           s->settings[i].key, from ? "..." : "", then + from, strlen(then + from) > 70 ? "..." : "",
                           from ? "..." : "", now + from, strlen(now + from) > 70 ? "..." : "");
        }
    }
    for (int i = 0; i < f->n_meta; i++) {
        const char *k = f->meta[i].key;
        if (strncmp(k, "config.", 7) != 0) continue;
        int setting = 0;
        for (int j = 0; j < s->n_settings; j++) setting |= strcmp(k + 7, s->settings[j].key) == 0;
        if (setting) continue;
        const tg_cli_opt *o = tg_cli_find(opts, n_opts, k + 7);
        if (!o || o->kind == TG_CLI_STR || o->kind == TG_CLI_FLAG)
            return tg_errf(err, errlen, "it has a setting --%.40s that this program does not know", k + 7);
    }
    return 0;
}

/* The checkpoint's numbers: its step, the data RNG, the optimizer's. */
typedef struct { uint64_t step, state, inc, optim_t, ls_log2, ls_good, ls_skipped; } ckpt_scalars;   /* optim_t: AdamW's or Adafactor's step count */

static int read_scalars(const tg_st_file *f, const tg_train_state *s, ckpt_scalars *c, char *err, size_t errlen) {
    const tg_params *P = s->P;
    uint64_t step, state, inc, n_params, optim_t = 0;
    if (parse_u64(tg_st_meta(f, "step"), &step) || step > 2147483647u)
        return tg_errf(err, errlen, "metadata 'step' is missing or not a step number");
    if (parse_u64(tg_st_meta(f, "rng.data.state"), &state) || parse_u64(tg_st_meta(f, "rng.data.inc"), &inc) || !(inc & 1))
        return tg_errf(err, errlen, "metadata 'rng.data.state'/'rng.data.inc' missing or not a PCG32 state (inc must be odd)");
    if (parse_u64(tg_st_meta(f, "n_params"), &n_params) || n_params != P->numel)
        return tg_errf(err, errlen, "metadata 'n_params' is %.30s, the model has %zu", tg_st_meta(f, "n_params") ?
                    tg_st_meta(f, "n_params") : "(none)", P->numel);
    const char *optim = tg_st_meta(f, "optim");
    if (!optim || strcmp(optim, optim_name(s)) != 0)
        return tg_errf(err, errlen, "metadata 'optim' is '%.20s', this run uses %s", optim ? optim : "(none)",
                    optim_name(s));
    if (s->adam && (parse_u64(tg_st_meta(f, "optim.adam.t"), &optim_t) || optim_t > step))
        return tg_errf(err, errlen, "metadata 'optim.adam.t' is missing or above the step %" PRIu64, step);
    if (s->adafactor && (parse_u64(tg_st_meta(f, "optim.adafactor.t"), &optim_t) || optim_t > step))
        return tg_errf(err, errlen, "metadata 'optim.adafactor.t' is missing or above the step %" PRIu64, step);
    uint64_t ls_log2 = 0, ls_good = 0, ls_skipped = 0;
    if (s->scaler && (parse_u64(tg_st_meta(f, "amp.loss_scale_log2"), &ls_log2) || ls_log2 > 100 ||
                      parse_u64(tg_st_meta(f, "amp.good"), &ls_good) || ls_good >= (uint64_t)s->scaler->interval ||
                      parse_u64(tg_st_meta(f, "amp.skipped"), &ls_skipped) || ls_skipped > step))
        return tg_errf(err, errlen, "metadata 'amp.loss_scale_log2'/'amp.good'/'amp.skipped' missing or out of range "
                       "(an fp16 run's loss scale: exponent 0..100, good steps below %d, skips at most the step)",
                       s->scaler->interval);
    *c = (ckpt_scalars){step, state, inc, optim_t, ls_log2, ls_good, ls_skipped};
    return 0;
}

/* The tensors: every one the state needs, with its dtype and shape, and no other. */
typedef struct { const tg_st_entry *m, *v, *buf, *lg, *af_v, *af_m; } ckpt_tensors;

static int check_tensors(const tg_st_file *f, tg_train_state *s, uint64_t step, ckpt_tensors *t, char *err,
                         size_t errlen) {
    const tg_params *P = s->P;
    int used = 0;
    for (int i = 0; i < P->n; i++) {
        const tg_tensor *p = P->list[i];
        int64_t shape[TG_MAX_DIMS];
        for (int d = 0; d < p->ndim; d++) shape[d] = p->shape[d];
        const tg_st_entry *e = need(f, p->name, TG_ST_F32, p->ndim, shape, err, errlen);
        if (!e || check_values(e, 0, err, errlen)) return -1;
        used++;
    }
    int64_t flat = (int64_t)P->numel;
    const tg_st_entry *m = NULL, *v = NULL, *buf = NULL, *af_v = NULL, *af_m = NULL;
    if (s->adam) {
        if (!(m = need(f, "optim.adam.m", TG_ST_F32, 1, &flat, err, errlen)) || check_values(m, 0, err, errlen)) return -1;
        if (!(v = need(f, "optim.adam.v", TG_ST_F32, 1, &flat, err, errlen)) || check_values(v, 1, err, errlen)) return -1;
        used += 2;
    } else if (s->adafactor) {
        int64_t nv = (int64_t)s->adafactor->n_v;
        if (!(af_v = need(f, "optim.adafactor.v", TG_ST_F32, 1, &nv, err, errlen)) || check_values(af_v, 1, err, errlen))
            return -1;
        used++;
        if (s->adafactor->m) {
            if (!(af_m = need(f, "optim.adafactor.m", TG_ST_F32, 1, &flat, err, errlen)) ||
                check_values(af_m, 0, err, errlen))
                return -1;
            used++;
        }
    } else if (s->sgd->buf) {
        if (!(buf = need(f, "optim.sgd.buf", TG_ST_F32, 1, &flat, err, errlen)) || check_values(buf, 0, err, errlen))
            return -1;
        used++;
    }
    const tg_st_entry *lg = tg_st_find(f, "run.logged");
    if (!lg) return tg_errf(err, errlen, "tensor 'run.logged' is missing");
    if (lg->dtype != TG_ST_F64 || lg->ndim != 2 || lg->shape[1] != 2 || lg->shape[0] > (int64_t)step + 1)
        return tg_errf(err, errlen, "tensor 'run.logged' must be F64 [rows, 2] with rows <= step + 1");
    used++;
    if (used != f->n)
        for (int i = 0; i < f->n; i++) {
            const char *name = f->t[i].name;
            int known = tg_params_find(P, name) || strcmp(name, "run.logged") == 0 ||
                        (m && (strcmp(name, "optim.adam.m") == 0 || strcmp(name, "optim.adam.v") == 0)) ||
                        (buf && strcmp(name, "optim.sgd.buf") == 0) ||
                        (af_v && strcmp(name, "optim.adafactor.v") == 0) || (af_m && strcmp(name, "optim.adafactor.m") == 0);
            if (!known) return tg_errf(err, errlen, "tensor '%s' is not part of this run's state", name);
        }
    if (tg_train_state_reserve(s, (int)lg->shape[0])) return tg_errf(err, errlen, "out of memory");

    *t = (ckpt_tensors){m, v, buf, lg, af_v, af_m};
    return 0;
}

static int load_parsed(const tg_st_file *f, tg_train_state *s, const tg_cli_opt *opts, int n_opts,
                       const char *const *may_differ, char *changed, size_t changed_len, char *err, size_t errlen) {
    const tg_params *P = s->P;
    if (!f->has_checksum) return tg_errf(err, errlen, "no %s in its metadata (not a tapegrad checkpoint?)", TG_ST_CHECKSUM_KEY);
    const char *fmt = tg_st_meta(f, "format"), *ver = tg_st_meta(f, "format_version");
    if (!fmt || strcmp(fmt, TG_CKPT_FORMAT) != 0)
        return tg_errf(err, errlen, "metadata format is '%.40s', expected '%s'", fmt ? fmt : "(none)", TG_CKPT_FORMAT);
    if (!ver || strcmp(ver, TG_CKPT_VERSION) != 0)
        return tg_errf(err, errlen, "format_version '%.20s' (this program reads %s)", ver ? ver : "(none)", TG_CKPT_VERSION);
    ckpt_scalars c = {0};
    ckpt_tensors t = {0};
    if (check_flags(f, s, opts, n_opts, may_differ, changed, changed_len, err, errlen) ||
        check_settings(f, s, opts, n_opts, err, errlen) || read_scalars(f, s, &c, err, errlen) ||
        check_tensors(f, s, c.step, &t, err, errlen))
        return -1;
    const tg_st_entry *m = t.m, *v = t.v, *buf = t.buf, *lg = t.lg;
    const uint64_t step = c.step, state = c.state, inc = c.inc, optim_t = c.optim_t;
    /* all checked: now change the state */
    if (s->scaler) {
        s->scaler->scale = ldexpf(1.0f, (int)c.ls_log2);
        s->scaler->good = (int)c.ls_good;
        s->scaler->skipped = (int64_t)c.ls_skipped;
    }
    for (int i = 0; i < P->n; i++) tg_st_get_f32(tg_st_find(f, P->list[i]->name), P->list[i]->data);
    if (m) {
        tg_st_get_f32(m, s->adam->m);
        tg_st_get_f32(v, s->adam->v);
        s->adam->t = (int64_t)optim_t;
    }
    if (buf) tg_st_get_f32(buf, s->sgd->buf);
    if (t.af_v) {
        tg_st_get_f32(t.af_v, s->adafactor->v);
        if (t.af_m) tg_st_get_f32(t.af_m, s->adafactor->m);
        s->adafactor->t = (int64_t)optim_t;
    }
    tg_st_get_f64(lg, s->logged);
    s->n_logged = (int)lg->shape[0];
    s->data_rng->state = state;
    s->data_rng->inc = inc;
    s->step = (int)step;
    return 0;
}

int tg_ckpt_load_bytes(const void *bytes, size_t size, tg_train_state *s, const tg_cli_opt *opts, int n_opts,
                    const char *const *may_differ, char *changed, size_t changed_len, char *err, size_t errlen) {
    tg_st_file f;
    if (tg_st_parse(bytes, size, &f, err, errlen)) return -1;
    int rc = load_parsed(&f, s, opts, n_opts, may_differ, changed, changed_len, err, errlen);
    tg_st_free(&f);
    return rc;
}

int tg_ckpt_load(const char *path, tg_train_state *s, const tg_cli_opt *opts, int n_opts, const char *const *may_differ,
              char *changed, size_t changed_len, char *err, size_t errlen) {
    tg_st_file f;
    if (tg_st_read(path, &f, err, errlen)) return -1;
    int rc = load_parsed(&f, s, opts, n_opts, may_differ, changed, changed_len, err, errlen);
    tg_st_free(&f);
    if (rc) {
        char *msg = strdup(err);
        if (msg) {
            snprintf(err, errlen, "%s: %s", path, msg);
            free(msg);
        }
    }
    return rc;
}

int tg_ckpt_check_writable(const char *path, char *err, size_t errlen) {
    if (tg_file_check_target(path, err, errlen)) return -1;   /* the rename would replace a folder, FIFO or device */
    /* the writer's own first step, undone */
    tg_file f;
    if (tg_file_begin(&f, path, err, errlen))
        return tg_errf(err, errlen, "%s: cannot create a file in its folder (%s)", path, strerror(f.err_no));
    tg_file_abort(&f);
    return 0;
}
