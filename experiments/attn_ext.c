#define _POSIX_C_SOURCE 200809L
#include "attn_ext.h"

#include <string.h>
#include <sys/stat.h>

#include "tg_sha256.h"

/* the meaning lines are text about the columns (0.16 added them): a log of 0.15 resumes */
const char *const attn_ext_moved[] = {"attn_plugin_file", "attn_plugin_abi", "attn_multiplier_meaning",
                                      "attn_max_logit_meaning", NULL};

/* The exec kernel's identity: the command, each word that is a regular file as sha256:HEX. */
static int exec_ident(const char *cmd, char *out, size_t len, char *err, size_t errlen) {
    size_t n = 0;
    out[0] = 0;
    for (const char *p = cmd; *p;) {
        p += strspn(p, " ");
        size_t w = strcspn(p, " ");
        if (!w) break;
        char word[4096], piece[4200];
        snprintf(word, sizeof word, "%.*s", (int)(w < sizeof word ? w : sizeof word - 1), p);
        struct stat sb;
        if (stat(word, &sb) == 0 && S_ISREG(sb.st_mode)) {
            char hex[65];
            if (tg_sha256_file(word, hex, err, errlen)) return -1;
            snprintf(piece, sizeof piece, "sha256:%s", hex);
        } else
            snprintf(piece, sizeof piece, "%s", word);
        int k = snprintf(out + n, len - n, "%s%s", n ? " " : "", piece);
        if (k < 0 || (size_t)k >= len - n) return tg_errf(err, errlen, "exec:%s: the command is too long to record", cmd);
        n += (size_t)k;
        p += w;
    }
    return 0;
}

/* The first flag of the model's that needs a feature in missing. */
static const char *flag_of(unsigned missing) {
    static const struct { unsigned f; const char *flag; } flags[] = {
        {TG_ATTN_F_WINDOW, "--window"}, {TG_ATTN_F_GQA, "--kv-heads"}, {TG_ATTN_F_BIAS, "--bias"},
        {TG_ATTN_F_ALIBI, "--alibi"}, {TG_ATTN_F_SOFTCAP, "--softcap"}, {TG_ATTN_F_SINKS, "--sinks"},
        {TG_ATTN_F_DROPOUT, "--attn-dropout"}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (missing & flags[i].f) return flags[i].flag;
    return "the model";
}

/* "--attn " and the message err holds */
static int open_failed(char *err, size_t errlen) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", err);
    return tg_errf(err, errlen, "--attn %s", msg);
}

/* The model's attention call (its shapes and settings, no data) against the kernel's conventions:
 * 1 with why (naming the flag and the convention) when the run's calls would be refused. */
static int outside_conventions(const tg_attn_kernel *K, const tg_model_cfg *mc, char *why, size_t len) {
    const int T = mc->seq_len, H = mc->heads, Hkv = tg_model_kv_heads(mc), d = mc->d_head;
    tg_tensor q = {.ndim = 4, .shape = {1, T, H, d}}, k = {.ndim = 4, .shape = {1, T, Hkv, d}}, hv = {.ndim = 1, .shape = {H}};
    tg_attn_args a = tg_attn_args_make(&q, &k, &k, tg_model_scale(mc));
    a.causal = 1, a.head_scale = mc->scale_mode == TG_SCALE_LEARNED ? &hv : NULL;
    if (mc->window > 0) a.window_left = mc->window - 1, a.window_right = 0;
    a.alibi = mc->alibi ? &hv : NULL, a.sinks = mc->sinks ? &hv : NULL, a.softcap = mc->softcap;
    char what[300];
    if (!tg_attn_convention_refuses(tg_attn_kernel_conventions(K), &a, what, sizeof what)) return 0;
    snprintf(why, len, "--scale %s: %s", tg_scale_names[mc->scale_mode], what);
    return 1;
}

int attn_ext_open(attn_ext *e, const attn_cfg *c, const tg_model_cfg *mc, char *err, size_t errlen) {
    *e = (attn_ext){.exec = {.to = -1, .from = -1, .err = -1}};
    char declared[640];
    if (c->attn_plugin) {
        if (tg_attn_plugin_open(&e->plugin, c->attn_plugin, err, errlen)) return open_failed(err, errlen);
        e->kind = ATTN_PLUGIN;
        e->kernel = &e->plugin.kernel;
        tg_attn_plugin_describe(&e->plugin, declared, sizeof declared);
        snprintf(e->what, sizeof e->what, "the attention plugin %s:%s (sha256 %.12s)", e->plugin.path,
                 e->plugin.symbol, e->plugin.sha256);
        snprintf(e->who, sizeof e->who, "the plugin %s", c->attn_plugin);
    } else if (c->attn_exec) {
        if (exec_ident(c->attn_exec, e->ident, sizeof e->ident, err, errlen) ||
            tg_attn_exec_open(&e->exec, c->attn_exec, c->exec_timeout, err, errlen))
            return open_failed(err, errlen);
        e->kind = ATTN_EXEC;
        e->kernel = &e->exec.kernel;
        /* the features and, since 0.17, the conventions it declares: part of the run's identity (a resume
         * with a kernel that now declares other conventions is another run) */
        char feats[256], conv[256];
        tg_attn_features_str(e->kernel->features, feats, sizeof feats);
        if (e->kernel->conventions)
            snprintf(e->features, sizeof e->features, "%s; conventions: %s", feats,
                     tg_attn_conventions_str(e->kernel->conventions, conv, sizeof conv));
        else
            snprintf(e->features, sizeof e->features, "%s", feats);
        snprintf(declared, sizeof declared, "it declares %s", e->features);
        snprintf(e->what, sizeof e->what, "the exec kernel '%s' (exec:%s)", e->exec.name, c->attn_exec);
        snprintf(e->who, sizeof e->who, "%s", e->what);
    } else
        return 0;
    const unsigned missing = tg_model_attn_features(mc) & ~e->kernel->features;
    if (missing) {
        char names[300];
        tg_errf(err, errlen, "%s needs %s, which %s does not declare (%s)", flag_of(missing),
                tg_attn_features_str(missing, names, sizeof names), e->who, declared);
        attn_ext_close(e);
        return -1;
    }
    char why[400];
    if (outside_conventions(e->kernel, mc, why, sizeof why)) {
        tg_errf(err, errlen, "%s: %s cannot run this model's attention (%s)", why, e->who, declared);
        attn_ext_close(e);
        return -1;
    }
    return 0;
}

void attn_ext_close(attn_ext *e) {
    if (e->kind == ATTN_PLUGIN) tg_attn_plugin_close(&e->plugin);
    if (e->kind == ATTN_EXEC) tg_attn_exec_close(&e->exec);
    e->kind = 0;
    e->kernel = NULL;
}

int attn_ext_settings(const attn_ext *e, tg_setting *s) {
    if (e->kind == ATTN_PLUGIN) {
        s[0] = (tg_setting){"attn_plugin_sha256", e->plugin.sha256};
        s[1] = (tg_setting){"attn_plugin_symbol", e->plugin.symbol};
        return 2;
    }
    if (e->kind == ATTN_EXEC) {
        s[0] = (tg_setting){"attn_exec", e->ident};
        s[1] = (tg_setting){"attn_exec_name", e->exec.name};
        s[2] = (tg_setting){"attn_exec_features", e->features};
        return 3;
    }
    return 0;
}

void attn_ext_header(const attn_ext *e, FILE *f) {
    if (e->kind == ATTN_PLUGIN) {
        char abi[400];
        fprintf(f, "# attn_plugin_file=%s\n", e->plugin.path);
        fprintf(f, "# attn_plugin_abi=%s\n", tg_attn_plugin_describe(&e->plugin, abi, sizeof abi));
    } else if (e->kind == ATTN_EXEC)
        fprintf(f, "# attn_exec_protocol=%s\n", TG_ATTN_EXEC_PROTOCOL);
}
