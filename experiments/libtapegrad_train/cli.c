#include "tg_cli.h"
#include "tg_gemm_plan.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const tg_cli_opt *find(const tg_cli_opt *opts, int n, const char *name, size_t len) {
    for (int i = 0; i < n; i++)
        if (strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0) return &opts[i];
    return NULL;
}

/* Levenshtein distance of a[0..la) and b, capped: the nearest flag's */
static int distance(const char *a, size_t la, const char *b) {
    size_t lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    int row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            const int up = row[j], sub = diag + (a[i - 1] != b[j - 1]), del = up + 1, ins = row[j - 1] + 1;
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            diag = up;
        }
    }
    return row[lb];
}

/* The flag an unknown name most likely meant: within 2 edits (or a third of
 * its length), or one it is a prefix of; NULL when none is that close. */
static const tg_cli_opt *nearest(const tg_cli_opt *opts, int n, const char *name, size_t len) {
    const tg_cli_opt *best = NULL;
    int bd = 99;
    for (int i = 0; i < n; i++) {
        int dd = distance(name, len, opts[i].name);
        if (len >= 3 && strlen(opts[i].name) > len && !strncmp(opts[i].name, name, len) && dd > 1) dd = 2;
        if (dd < bd) bd = dd, best = &opts[i];
    }
    const int limit = len / 3 > 2 ? (int)(len / 3) : 2;
    return bd <= limit ? best : NULL;
}

static int set_value(const tg_cli_opt *o, const char *val, char *err, size_t errlen) {
    char *end;
    switch (o->kind) {
    case TG_CLI_INT: {
        errno = 0;
        long long v = strtoll(val, &end, 10);
        if (end == val || *end || errno) {
            snprintf(err, errlen, "--%s: '%s' is not an integer", o->name, val);
            return TG_CLI_ERROR;
        }
        if (v < o->lo || v > o->hi) {
            snprintf(err, errlen, "--%s: %lld is out of range [%.0f, %.0f]", o->name, v, o->lo, o->hi);
            return TG_CLI_ERROR;
        }
        *(int *)o->ptr = (int)v;
        return TG_CLI_OK;
    }
    case TG_CLI_FLOAT: {
        errno = 0;
        double v = strtod(val, &end);
        if (end == val || *end || errno || !isfinite(v)) {
            snprintf(err, errlen, "--%s: '%s' is not a finite number", o->name, val);
            return TG_CLI_ERROR;
        }
        if (v < o->lo || v > o->hi) {
            snprintf(err, errlen, "--%s: %g is out of range [%g, %g]", o->name, v, o->lo, o->hi);
            return TG_CLI_ERROR;
        }
        *(float *)o->ptr = (float)v;
        return TG_CLI_OK;
    }
    case TG_CLI_STR:
        if (!*val) {
            snprintf(err, errlen, "--%s: empty value", o->name);
            return TG_CLI_ERROR;
        }
        *(const char **)o->ptr = val;
        return TG_CLI_OK;
    case TG_CLI_CHOICE:
        for (int i = 0; o->choices[i]; i++)
            if (strcmp(o->choices[i], val) == 0) {
                *(int *)o->ptr = i;
                return TG_CLI_OK;
            }
        {
            int k = snprintf(err, errlen, "--%s: '%s' is not one of", o->name, val);
            for (int i = 0; o->choices[i] && k > 0 && (size_t)k < errlen; i++)
                k += snprintf(err + k, errlen - (size_t)k, " %s", o->choices[i]);
        }
        return TG_CLI_ERROR;
    case TG_CLI_FLAG:
    case TG_CLI_SWITCH:
        break;
    }
    snprintf(err, errlen, "--%s takes no value", o->name);
    return TG_CLI_ERROR;
}

int tg_cli_parse(const tg_cli_opt *opts, int n, int argc, char **argv, char *err, size_t errlen, int *seen) {
    if (seen) memset(seen, 0, (size_t)n * sizeof *seen);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return TG_CLI_HELP;
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument '%s' (flags start with --)", a);
            return TG_CLI_ERROR;
        }
        a += 2;
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const tg_cli_opt *o = find(opts, n, a, len);
        if (!o) {
            const tg_cli_opt *m = nearest(opts, n, a, len);
            int k = snprintf(err, errlen, "unknown flag '--%.*s'", (int)(len < 64 ? len : 64), a);
            if (m && k > 0 && (size_t)k < errlen) snprintf(err + k, errlen - (size_t)k, "; did you mean --%s?", m->name);
            return TG_CLI_ERROR;
        }
        if (seen) seen[o - opts] = 1;
        if (o->kind == TG_CLI_SWITCH) {   /* 1, or an explicit 0 or 1 after it */
            const char *v = eq ? eq + 1 : i + 1 < argc && (!strcmp(argv[i + 1], "0") || !strcmp(argv[i + 1], "1")) ? argv[++i] : "1";
            if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
                snprintf(err, errlen, "--%s: '%s' is not 0 or 1 (the switch alone means 1)", o->name, v);
                return TG_CLI_ERROR;
            }
            *(int *)o->ptr = v[0] == '1';
            continue;
        }
        if (o->kind == TG_CLI_FLAG) {
            if (eq) {
                snprintf(err, errlen, "--%s takes no value", o->name);
                return TG_CLI_ERROR;
            }
            *(int *)o->ptr = 1;
            continue;
        }
        const char *val = eq ? eq + 1 : NULL;
        if (!val) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--%s needs a value", o->name);
                return TG_CLI_ERROR;
            }
            val = argv[++i];
        }
        int rc = set_value(o, val, err, errlen);
        if (rc != TG_CLI_OK) return rc;
    }
    return TG_CLI_OK;
}

void tg_cli_usage(FILE *f, const char *prog, const char *summary, const tg_cli_opt *opts, int n) {
    fprintf(f, "usage: %s [flags]\n%s\n\nflags:\n", prog, summary);
    for (int i = 0; i < n; i++) {
        const tg_cli_opt *o = &opts[i];
        char arg[160] = "";
        switch (o->kind) {
        case TG_CLI_INT: snprintf(arg, sizeof arg, " N (%.0f..%.0f, default %d)", o->lo, o->hi, *(int *)o->ptr); break;
        case TG_CLI_FLOAT: snprintf(arg, sizeof arg, " X (%g..%g, default %g)", o->lo, o->hi, *(float *)o->ptr); break;
        case TG_CLI_STR: {
            const char *v = *(const char **)o->ptr;
            snprintf(arg, sizeof arg, " S%s%s%s", v ? " (default " : "", v ? v : "", v ? ")" : "");
            break;
        }
        case TG_CLI_CHOICE: {
            int k = snprintf(arg, sizeof arg, " ");
            for (int j = 0; o->choices[j] && k < (int)sizeof arg; j++)
                k += snprintf(arg + k, sizeof arg - (size_t)k, "%s%s", j ? "|" : "", o->choices[j]);
            if (k < (int)sizeof arg)
                snprintf(arg + k, sizeof arg - (size_t)k, " (default %s)", o->choices[*(int *)o->ptr]);
            break;
        }
        case TG_CLI_FLAG:
        case TG_CLI_SWITCH: break;
        }
        fprintf(f, "  --%s%s\n      %s\n", o->name, arg, o->help);
    }
    fprintf(f, "  --help\n      this text\n");
}

void tg_cli_value(const tg_cli_opt *o, char *buf, size_t len) {
    switch (o->kind) {
    case TG_CLI_INT: snprintf(buf, len, "%d", *(int *)o->ptr); return;
    case TG_CLI_FLOAT: snprintf(buf, len, "%.9g", *(float *)o->ptr); return;
    case TG_CLI_STR: snprintf(buf, len, "%s", *(const char **)o->ptr ? *(const char **)o->ptr : ""); return;
    case TG_CLI_CHOICE: snprintf(buf, len, "%s", o->choices[*(int *)o->ptr]); return;
    case TG_CLI_FLAG:
    case TG_CLI_SWITCH: snprintf(buf, len, "%d", *(int *)o->ptr); return;
    }
}

const tg_cli_opt *tg_cli_find(const tg_cli_opt *opts, int n, const char *name) {
    return find(opts, n, name, strlen(name));
}

const char *tg_cli_added_value(const char *const *added, const char *name) {
    size_t n = strlen(name);
    for (; added && *added; added++)
        if (strncmp(*added, name, n) == 0 && (*added)[n] == '=') return *added + n + 1;
    return NULL;
}

int tg_cli_unrecorded(const tg_cli_opt *o, const char *const *added) {
    const char *then = tg_cli_added_value(added, o->name);
    if (!then) return 0;
    char now[96];
    tg_cli_value(o, now, sizeof now);
    return strcmp(now, then) == 0;
}

void tg_cli_dump(FILE *f, const tg_cli_opt *opts, int n) { tg_cli_dump_added(f, opts, n, NULL); }

void tg_cli_dump_added(FILE *f, const tg_cli_opt *opts, int n, const char *const *added) {
    for (int i = 0; i < n; i++) {
        const tg_cli_opt *o = &opts[i];
        if (o->kind == TG_CLI_FLAG) continue;   /* a switch of the invocation, not a setting */
        if (tg_cli_unrecorded(o, added)) continue;
        fprintf(f, "# ");
        for (const char *c = o->name; *c; c++) fputc(*c == '-' ? '_' : *c, f);
        if (o->kind == TG_CLI_STR) {   /* a path may be long */
            const char *v = *(const char **)o->ptr;
            fprintf(f, "=%s\n", v ? v : "");
        } else {
            char v[64];
            tg_cli_value(o, v, sizeof v);
            fprintf(f, "=%s\n", v);
        }
    }
}

static void say_on_stderr(const char *msg, void *prog) { fprintf(stderr, "%s: %s\n", (const char *)prog, msg); }

int tg_gemm_plan_setup_env(const char *prog, const char *dflt) {
    const char *spec = getenv("TG_PLAN");
    char err[4600], kept[4000];
    if (!spec || !*spec) spec = dflt;
    if (spec && strcmp(spec, "measure") == 0) {   /* the machine's plan folder, as a program keeps it */
        const char *d = getenv("TG_PLAN_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
        if (d && *d) snprintf(kept, sizeof kept, "measure=%s", d);
        else if (x && *x) snprintf(kept, sizeof kept, "measure=%s/tapegrad", x);
        else if (h && *h) snprintf(kept, sizeof kept, "measure=%s/.cache/tapegrad", h);
        else snprintf(kept, sizeof kept, "measure");
        spec = kept;
    }
    tg_gemm_plan_on_note(say_on_stderr, (void *)prog);
    if (tg_gemm_plan_setup(spec, err, sizeof err) == 0) return 0;
    fprintf(stderr, "%s: TG_PLAN: %s; estimating every product instead\n", prog, err);
    return -1;
}
