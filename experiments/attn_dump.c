#define _POSIX_C_SOURCE 200809L   /* strdup */
#include "attn_dump.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_checkpoint.h"
#include "safetensors.h"
#include "tg_corpus.h"

#define DUMP_FORMAT "tapegrad.attn_maps"

void attn_probe_tokens(const tg_task_cfg *t, int *tokens) {
    tg_rng r;
    tg_rng_seed(&r, ATTN_PROBE_SEED, ATTN_PROBE_STREAM);
    int *targets = tokens + t->seq_len;   /* scratch: the caller's buffer holds 2·T */
    if (t->kind == TG_TASK_CODE) tg_corpus_val_batch(t->corpus, 0, 1, t->seq_len, tokens, targets);   /* real text */
    else tg_task_batch(t, &r, 1, tokens, targets);
}

static size_t per_step(const attn_dump *d) { return (size_t)d->L * d->H * d->T * d->T; }

static int in_list(const char *const *list, const char *name) {
    for (; *list; list++)
        if (strcmp(*list, name) == 0) return 1;
    return 0;
}

/* The existing file's maps of steps before resume_step, when it is this run's:
 * same format, probe and settings (the run's free flags excepted). */
static void keep_earlier(attn_dump *d, int resume_step, char *info, size_t infolen) {
    tg_st_file f;
    char why[300];
    if (tg_st_read(d->path, &f, why, sizeof why)) {
        snprintf(info, infolen, "--dump-attn-file: nothing kept from before step %d (%s)", resume_step, why);
        return;
    }
    const char *fmt = tg_st_meta(&f, "format");
    const tg_st_entry *tok = tg_st_find(&f, "probe.tokens");
    int same = fmt && strcmp(fmt, DUMP_FORMAT) == 0 && tok && tok->dtype == TG_ST_I64 && tok->numel == d->T;
    if (same) {
        int64_t t[4096];
        tg_st_get_i64(tok, t);
        for (int i = 0; i < d->T; i++) same = same && t[i] == d->tokens[i];
    }
    for (int i = 0; same && i < d->n_opts; i++) {
        const tg_cli_opt *o = &d->opts[i];
        if (o->kind == TG_CLI_STR || in_list(attn_run_options, o->name)) continue;
        char key[96], now[96];
        snprintf(key, sizeof key, "config.%s", o->name);
        tg_cli_value(o, now, sizeof now);
        const char *then = tg_st_meta(&f, key);
        if (!then) then = tg_cli_added_value(attn_added_flags, o->name);   /* a file from before the flag */
        same = then && strcmp(then, now) == 0;
    }
    if (!same) {
        snprintf(info, infolen, "--dump-attn-file %s is not this run's maps: nothing kept from before step %d",
                 d->path, resume_step);
        tg_st_free(&f);
        return;
    }
    int kept = 0, lost = 0;
    size_t tt = (size_t)d->T * d->T;
    for (int s = 0; s < d->n_steps && d->steps[s] < resume_step; s++) {
        int all = 1;
        for (int l = 0; l < d->L && all; l++)
            for (int h = 0; h < d->H && all; h++) {
                char name[96];
                snprintf(name, sizeof name, "attn.l%d.h%d.step%d", l, h, d->steps[s]);
                const tg_st_entry *e = tg_st_find(&f, name);
                all = e && e->dtype == TG_ST_F32 && e->ndim == 2 && e->shape[0] == d->T && e->shape[1] == d->T;
                if (all) tg_st_get_f32(e, d->maps + s * per_step(d) + ((size_t)l * d->H + h) * tt);
            }
        d->made[s] = all;
        kept += all;
        lost += !all;
    }
    tg_st_free(&f);
    snprintf(info, infolen, "--dump-attn-file %s: kept the maps of %d earlier steps%s", d->path, kept,
             lost ? "; some earlier steps were not in it and are left out" : "");
}

int attn_dump_init(attn_dump *d, const attn_cfg *c, const tg_cli_opt *opts, int n_opts, int resume_step, char *info,
                   size_t infolen, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    if (info && infolen) info[0] = 0;
    d->path = c->dump_attn_file;
    d->opts = opts;
    d->n_opts = n_opts;
    d->n_steps = attn_dump_steps(c->dump_attn, c->steps, d->steps, ATTN_MAX_DUMPS, err, errlen);
    if (d->n_steps < 0) return -1;
    char why[600];
    if (tg_ckpt_check_writable(d->path, why, sizeof why)) return tg_errf(err, errlen, "--dump-attn-file %s", why);
    d->T = c->seq_len;
    d->L = c->layers;
    d->H = c->heads;
    if (d->T > 4096) return tg_errf(err, errlen, "--dump-attn: seq-len %d is too long for maps (at most 4096)", d->T);
    double bytes = 4.0 * d->n_steps * (double)per_step(d);
    d->tokens = malloc(2 * (size_t)d->T * sizeof *d->tokens);
    d->maps = bytes < 4e9 ? calloc((size_t)d->n_steps * per_step(d), sizeof(float)) : NULL;
    if (!d->tokens || !d->maps) {
        attn_dump_free(d);
        return tg_errf(err, errlen, "--dump-attn: out of memory for %d steps of %d×%d heads of %d×%d weights (%.0f MB)",
                       d->n_steps, d->L, d->H, d->T, d->T, bytes / 1e6);
    }
    tg_task_cfg tc = attn_cfg_task(c);
    attn_probe_tokens(&tc, d->tokens);
    if (resume_step > 0 && d->steps[0] < resume_step) keep_earlier(d, resume_step, info, infolen);
    return 0;
}

static int write_file(attn_dump *d, char *err, size_t errlen) {
    int n_made = 0;
    for (int s = 0; s < d->n_steps; s++) n_made += d->made[s];
    int nt = 1 + n_made * d->L * d->H, nm = 0;
    tg_st_tensor *t = calloc((size_t)nt, sizeof *t);
    char (*names)[48] = calloc((size_t)nt, sizeof *names);
    char (*kv)[2][96] = calloc((size_t)d->n_opts + 8, sizeof *kv);
    tg_st_kv *meta = calloc((size_t)d->n_opts + 8, sizeof *meta);
    int64_t *tok = malloc((size_t)d->T * sizeof *tok);
    int rc = -1;
    if (!t || !names || !kv || !meta || !tok) {
        tg_errf(err, errlen, "%s: out of memory", d->path);
        goto out;
    }
    for (int i = 0; i < d->T; i++) tok[i] = d->tokens[i];
    t[0] = (tg_st_tensor){.name = "probe.tokens", .dtype = TG_ST_I64, .ndim = 1, .shape = {d->T}, .data = tok};
    int k = 1;
    size_t tt = (size_t)d->T * d->T;
    char steps[ATTN_MAX_DUMPS * 12] = "";
    for (int s = 0; s < d->n_steps; s++) {
        if (!d->made[s]) continue;
        snprintf(steps + strlen(steps), sizeof steps - strlen(steps), "%s%d", steps[0] ? "," : "", d->steps[s]);
        for (int l = 0; l < d->L; l++)
            for (int h = 0; h < d->H; h++, k++) {
                snprintf(names[k], sizeof names[k], "attn.l%d.h%d.step%d", l, h, d->steps[s]);
                t[k] = (tg_st_tensor){.name = names[k], .dtype = TG_ST_F32, .ndim = 2, .shape = {d->T, d->T},
                                      .data = d->maps + s * per_step(d) + ((size_t)l * d->H + h) * tt};
            }
    }
#define META(key, ...)                                             \
    do {                                                           \
        snprintf(kv[nm][0], sizeof kv[nm][0], "%s", key);          \
        snprintf(kv[nm][1], sizeof kv[nm][1], __VA_ARGS__);        \
        nm++;                                                      \
    } while (0)
    META("format", "%s", DUMP_FORMAT);
    META("format_version", "1");
    META("steps", "%s", "");   /* the list may be longer than a value: pointed to below */
    META("probe_seed", "%u", ATTN_PROBE_SEED);
    META("probe_stream", "0x%x", ATTN_PROBE_STREAM);
#undef META
    for (int i = 0; i < d->n_opts; i++) {   /* the run's identity: not paths, not what a resume may change */
        if (d->opts[i].kind == TG_CLI_STR || in_list(attn_run_options, d->opts[i].name)) continue;
        if (tg_cli_unrecorded(&d->opts[i], attn_added_flags)) continue;   /* as files from before the flag */
        snprintf(kv[nm][0], sizeof kv[nm][0], "config.%s", d->opts[i].name);
        tg_cli_value(&d->opts[i], kv[nm][1], sizeof kv[nm][1]);
        nm++;
    }
    for (int i = 0; i < nm; i++) meta[i] = (tg_st_kv){kv[i][0], i == 2 ? steps : kv[i][1]};
    rc = tg_st_write(d->path, t, nt, meta, nm, err, errlen);
out:
    free(t);
    free(names);
    free(kv);
    free(meta);
    free(tok);
    return rc;
}

static void dump_ctx(attn_dump *d) {
    if (!d->ctx_ready) {
        tg_ctx_init(&d->ctx, 0);
        d->ctx_ready = 1;
    }
}

void attn_dump_plan(attn_dump *d, tg_model *m) {
    float *scratch = d->n_steps ? malloc(sizeof(float) * per_step(d)) : NULL;
    if (!scratch) return;   /* nothing to dump, or no memory: the maps' shapes stay estimated */
    dump_ctx(d);
    (void)tg_model_attention_maps(m, &d->ctx, d->tokens, 1, scratch);   /* a failure is the step's to report */
    free(scratch);
}

int attn_dump_step(attn_dump *d, tg_model *m, int step, char *err, size_t errlen) {
    int s = 0;
    while (s < d->n_steps && d->steps[s] != step) s++;
    if (s == d->n_steps) return 0;
    dump_ctx(d);
    if (tg_model_attention_maps(m, &d->ctx, d->tokens, 1, d->maps + s * per_step(d)))
        return tg_errf(err, errlen, "--dump-attn-file not written: the kernel's weights could not be measured: %s",
                       m->measure_note);
    d->made[s] = 1;
    if (write_file(d, err, errlen)) {
        char *msg = strdup(err);
        tg_errf(err, errlen, "--dump-attn-file not written: %s", msg ? msg : "");
        free(msg);
        return -1;
    }
    return 0;
}

void attn_dump_free(attn_dump *d) {
    free(d->tokens);
    free(d->maps);
    if (d->ctx_ready) tg_ctx_free(&d->ctx);
    memset(d, 0, sizeof *d);
}
