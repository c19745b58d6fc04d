/* The kernel registry (tg_kernel.h): the spec grammar, opening and closing, a kernel's identity
 * for a run and its words in messages and logs. */
#define _POSIX_C_SOURCE 200809L
#include "tg_kernel.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tg_sha256.h"

/* the built-in ops: the names that open them, the run identity each keeps (0.19's word) */
static const struct {
    const char *name, *old, *id;
    const tg_attn_kernel *k;
} builtins[] = {{"saved", "composed", "composed", &tg_attn_kernel_saved},
                {"online", "fused", "fused", &tg_attn_kernel_online}};
enum { N_BUILTINS = sizeof builtins / sizeof builtins[0] };

/* the header lines are text about the columns (0.16 added the meaning lines): a log of 0.15 resumes */
const char *const tg_kernel_header_free[] = {"attn_plugin_file", "attn_plugin_abi", "attn_multiplier_meaning",
                                             "attn_max_logit_meaning", NULL};

static int has_control(const char *s) {
    for (; s && *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 1;
    return 0;
}

static int builtin_of(const char *name) {
    for (int i = 0; i < N_BUILTINS; i++)
        if (!strcmp(name, builtins[i].name) || !strcmp(name, builtins[i].old)) return i;
    return -1;
}

int tg_kernel_spec(const char *spec, int *kind, const char **rest, char *err, size_t errlen) {
    const char *s = spec ? spec : "";
    *kind = 0, *rest = s;
    if (builtin_of(s) >= 0) return *kind = TG_KERNEL_BUILTIN, 0;
    if (!strncmp(s, "builtin:", 8)) {
        if (builtin_of(s + 8) < 0)
            return tg_errf(err, errlen, "'%.60s': the built-in ops are builtin:saved and builtin:online (builtin:composed "
                           "and builtin:fused: their names before 0.20)", s);
        return *kind = TG_KERNEL_BUILTIN, *rest = s + 8, 0;
    }
    if (!strncmp(s, "plugin:", 7) && s[7] && s[7] != ':') {
        if (has_control(s)) return tg_errf(err, errlen, "plugin: the path contains a control character (tab, newline, ...)");
        return *kind = TG_KERNEL_PLUGIN, *rest = s + 7, 0;
    }
    if (!strncmp(s, "exec:", 5)) {
        if (!s[5] || strspn(s + 5, " ") == strlen(s + 5)) return tg_errf(err, errlen, "exec: no command");
        if (has_control(s)) return tg_errf(err, errlen, "exec: the command contains a control character (tab, newline, ...)");
        if (strlen(s + 5) >= sizeof ((tg_attn_exec *)0)->cmd)
            return tg_errf(err, errlen, "exec: the command is longer than %zu bytes", sizeof ((tg_attn_exec *)0)->cmd - 1);
        return *kind = TG_KERNEL_EXEC, *rest = s + 5, 0;
    }
    /* a file named as it is: say which spelling runs it (a library is loaded, anything else started) */
    struct stat st;
    if (!stat(s, &st) && S_ISREG(st.st_mode)) {
        const size_t n = strlen(s);
        const int so = n > 3 && !strcmp(s + n - 3, ".so");
        return tg_errf(err, errlen, "'%.60s' is a file: name the kernel in it as %s%.60s%s (%s)", s,
                       so ? "plugin:" : n > 3 && !strcmp(s + n - 3, ".py") ? "exec:'python3 " : "exec:'", s,
                       so ? "" : "'", so ? "a C kernel built as a shared library: docs/plugins.md"
                                         : "a kernel in another process: docs/exec_protocol.md");
    }
    return tg_errf(err, errlen, "'%.60s': expected saved, online, plugin:FILE.so[:SYMBOL] or exec:CMD (composed and fused: "
                   "saved and online before 0.20)", s);
}

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

static int open_plugin(tg_kernel *K, const char *rest, char *err, size_t errlen) {
    if (!(K->plugin = calloc(1, sizeof *K->plugin))) return tg_errf(err, errlen, "plugin %s: out of memory", rest);
    if (tg_attn_plugin_open(K->plugin, rest, err, errlen)) return -1;
    K->k = &K->plugin->kernel, K->id = "plugin";
    tg_attn_plugin_describe(K->plugin, K->declared, sizeof K->declared);
    snprintf(K->what, sizeof K->what, "the attention plugin %s:%s (sha256 %.12s)", K->plugin->path, K->plugin->symbol,
             K->plugin->sha256);
    snprintf(K->who, sizeof K->who, "the plugin %s", rest);
    return 0;
}

static int open_exec(tg_kernel *K, const char *cmd, double timeout, char *err, size_t errlen) {
    if (!(K->exec = malloc(sizeof *K->exec))) return tg_errf(err, errlen, "exec:%s: out of memory", cmd);
    *K->exec = (tg_attn_exec){.to = -1, .from = -1, .err = -1};
    if (exec_ident(cmd, K->exec_ident, sizeof K->exec_ident, err, errlen) ||
        tg_attn_exec_open(K->exec, cmd, timeout, err, errlen))
        return -1;
    K->k = &K->exec->kernel, K->id = "exec";
    /* the features and, since 0.17, the conventions it declares: part of the run's identity (a resume
     * with a kernel that now declares other conventions is another run) */
    tg_attn_declared_str(K->k, K->exec_decl, sizeof K->exec_decl);
    snprintf(K->declared, sizeof K->declared, "it declares %s", K->exec_decl);
    snprintf(K->what, sizeof K->what, "the exec kernel '%s' (exec:%s)", K->exec->name, cmd);
    snprintf(K->who, sizeof K->who, "%s", K->what);
    return 0;
}

int tg_kernel_open(tg_kernel *K, const char *spec, const tg_kernel_opts *o, char *err, size_t errlen) {
    memset(K, 0, sizeof *K);
    int kind;
    const char *rest;
    if (tg_kernel_spec(spec, &kind, &rest, err, errlen)) return -1;
    snprintf(K->spec, sizeof K->spec, "%s", spec);
    int rc = 0;
    if (kind == TG_KERNEL_BUILTIN) {
        const int i = builtin_of(rest);
        K->k = builtins[i].k, K->id = builtins[i].id;
        snprintf(K->declared, sizeof K->declared, "every feature");
        snprintf(K->what, sizeof K->what, "the built-in op %s", builtins[i].name);
        snprintf(K->who, sizeof K->who, "%s", K->what);
    } else if (kind == TG_KERNEL_PLUGIN)
        rc = open_plugin(K, rest, err, errlen);
    else
        rc = open_exec(K, rest, o && o->exec_timeout > 0 ? o->exec_timeout : TG_ATTN_EXEC_TIMEOUT, err, errlen);
    K->kind = kind;
    if (rc) tg_kernel_close(K);
    return rc;
}

void tg_kernel_close(tg_kernel *K) {
    if (K->plugin) tg_attn_plugin_close(K->plugin);
    if (K->exec) tg_attn_exec_close(K->exec);
    free(K->plugin), free(K->exec);
    K->plugin = NULL, K->exec = NULL, K->k = NULL, K->kind = 0;
}

int tg_kernel_reopen(tg_kernel *K, char *err, size_t errlen) {
    return K->kind == TG_KERNEL_EXEC ? tg_attn_exec_reopen(K->exec, err, errlen) : 0;
}

int tg_kernel_trusted(const tg_kernel *K) { return K->kind == TG_KERNEL_BUILTIN; }

int tg_kernel_refuses_call(const tg_kernel *K, const tg_attn_args *a, const char *context, char *err, size_t errlen) {
    const unsigned missing = tg_attn_args_features(a) & ~K->k->features;
    if (missing) {
        const char *flag = "the model";   /* the first missing feature that a flag turns on */
        for (int i = 0; i < TG_ATTN_N_FEATURES; i++)
            if (missing & tg_attn_feature_row(i)->bit && tg_attn_feature_row(i)->flag) {
                flag = tg_attn_feature_row(i)->flag;
                break;
            }
        char names[300];
        return tg_errf(err, errlen, "%s needs %s, which %s does not declare (%s)", flag,
                       tg_attn_features_str(missing, names, sizeof names), K->who, K->declared), 1;
    }
    char why[400];
    if (!tg_attn_convention_refuses(tg_attn_kernel_conventions(K->k), a, why, sizeof why)) return 0;
    return tg_errf(err, errlen, "%s: %s: %s cannot run this model's attention (%s)", context, why, K->who,
                   K->declared), 1;
}

int tg_kernel_identity(const tg_kernel *K, const char **keys, const char **values) {
    int n = 0;
    if (K->kind == TG_KERNEL_PLUGIN) {
        keys[n] = "attn_plugin_sha256", values[n++] = K->plugin->sha256;
        keys[n] = "attn_plugin_symbol", values[n++] = K->plugin->symbol;
    } else if (K->kind == TG_KERNEL_EXEC) {
        keys[n] = "attn_exec", values[n++] = K->exec_ident;
        keys[n] = "attn_exec_name", values[n++] = K->exec->name;
        keys[n] = "attn_exec_features", values[n++] = K->exec_decl;
    }
    return n;
}

void tg_kernel_header(const tg_kernel *K, FILE *f) {
    if (K->kind == TG_KERNEL_PLUGIN) {
        char abi[400];
        fprintf(f, "# attn_plugin_file=%s\n", K->plugin->path);
        fprintf(f, "# attn_plugin_abi=%s\n", tg_attn_plugin_describe(K->plugin, abi, sizeof abi));
    } else if (K->kind == TG_KERNEL_EXEC)
        fprintf(f, "# attn_exec_protocol=%s\n", TG_ATTN_EXEC_PROTOCOL);
    if (tg_attn_kernel_precision(K->k) != TG_FP32)   /* since 0.21: what its products computed in */
        fprintf(f, "# attn_precision=%s\n", tg_precision_name(tg_attn_kernel_precision(K->k)));
}
