#define _POSIX_C_SOURCE 200809L   /* fsync, mkstemp, fchmod */
#include "tg_runlog.h"

#include "tg_file.h"
#include "tg_core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes `a` then `b` as the new file at path (atomically, tg_file.h); on
 * success L->fd is that file, open for appending rows. */
static int replace_with(tg_runlog *L, const char *path, const char *a, size_t na, const char *b, size_t nb, char *err,
                        size_t errlen) {
    memset(L, 0, sizeof *L);
    L->fd = -1;
    tg_file f;
    if (tg_file_begin(&f, path, err, errlen)) return -1;
    if (tg_file_write(&f, a, na, err, errlen) || tg_file_write(&f, b, nb, err, errlen)) {
        tg_file_abort(&f);
        return -1;
    }
    if (tg_file_commit(&f, 1, err, errlen)) return -1;
    L->fd = f.fd;
    return 0;
}

int tg_runlog_open(tg_runlog *L, const char *path, const char *header, char *err, size_t errlen) {
    return replace_with(L, path, header, strlen(header), "", 0, err, errlen);
}

/* ---- resume ---------------------------------------------------------------- */
typedef struct { const char *key, *val; size_t klen, vlen; } hkv;

/* The "# key=value" lines of a header (up to the column line) into kv;
 * returns how many, and the column line in *col (NULL if none). */
static int header_kv(const char *s, const char *end, hkv *kv, int cap, const char **col, const char **after) {
    int n = 0;
    *col = NULL;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        if (!nl) break;   /* a partial line: not a header */
        if (*s != '#') {
            *col = s;
            *after = nl + 1;
            return n;
        }
        const char *eq = memchr(s, '=', (size_t)(nl - s));
        if (s + 2 <= nl && s[1] == ' ' && eq && n < cap) {
            kv[n] = (hkv){s + 2, eq + 1, (size_t)(eq - s - 2), (size_t)(nl - eq - 1)};
            n++;
        }
        s = nl + 1;
    }
    *after = end;
    return n;
}

static int key_is(const hkv *k, const char *name) {   /* '-' in name matches '_' */
    if (strlen(name) != k->klen) return 0;
    for (size_t i = 0; i < k->klen; i++) {
        char a = k->key[i], b = name[i] == '-' ? '_' : name[i];
        if ((a == '-' ? '_' : a) != b) return 0;
    }
    return 1;
}

static int free_key(const hkv *k, const char *const *may_differ) {
    for (; may_differ && *may_differ; may_differ++)
        if (key_is(k, *may_differ)) return 1;
    return 0;
}

static const hkv *find_key(const hkv *kv, int n, const hkv *k) {
    for (int i = 0; i < n; i++)
        if (kv[i].klen == k->klen && memcmp(kv[i].key, k->key, k->klen) == 0) return &kv[i];
    return NULL;
}

enum { MAX_KEYS = 4096 };

int tg_runlog_plan(const char *old, size_t n, const char *header, const char *const *may_differ, int step,
                tg_runlog_keep *k, char *err, size_t errlen) {
    memset(k, 0, sizeof *k);
    hkv *okv = malloc(2 * MAX_KEYS * sizeof *okv), *nkv = okv + MAX_KEYS;
    if (!okv) return tg_errf(err, errlen, "out of memory");
    const char *ocol, *ncol, *orows, *nend;
    int on = header_kv(old, old + n, okv, MAX_KEYS, &ocol, &orows);
    int nn = header_kv(header, header + strlen(header), nkv, MAX_KEYS, &ncol, &nend);
    int rc = 0;
    /* the same run: every setting but the free ones, both ways, and the columns */
    for (int i = 0; i < nn && !rc; i++) {
        if (free_key(&nkv[i], may_differ)) continue;
        const hkv *o = find_key(okv, on, &nkv[i]);
        if (!o)
            rc = tg_errf(err, errlen, "its header has no %.*s (not this run's log?); refusing to append to it",
                      (int)nkv[i].klen, nkv[i].key);
        else if (o->vlen != nkv[i].vlen || memcmp(o->val, nkv[i].val, o->vlen) != 0)
            rc = tg_errf(err, errlen, "its header says %.*s=%.*s, this run has %.*s (not this run's log?); refusing "
                      "to append to it", (int)o->klen, o->key, (int)(o->vlen < 60 ? o->vlen : 60), o->val,
                      (int)(nkv[i].vlen < 60 ? nkv[i].vlen : 60), nkv[i].val);
    }
    for (int i = 0; i < on && !rc; i++)
        if (!free_key(&okv[i], may_differ) && !find_key(nkv, nn, &okv[i]))
            rc = tg_errf(err, errlen, "its header has a setting %.*s this run does not (not this run's log?)",
                      (int)(okv[i].klen < 60 ? okv[i].klen : 60), okv[i].key);
    size_t ncol_len = ncol ? (size_t)(nend - ncol) : 0;
    if (!rc && ocol && ((size_t)(orows - ocol) != ncol_len || memcmp(ocol, ncol, ncol_len) != 0))
        rc = tg_errf(err, errlen, "its columns differ from this run's (not this run's log?)");
    long old_every = 1;   /* digits inside the value only: the buffer has no NUL */
    for (int i = 0; i < on; i++)
        if (key_is(&okv[i], "log_every")) {
            old_every = 0;
            for (size_t j = 0; j < okv[i].vlen && okv[i].val[j] >= '0' && okv[i].val[j] <= '9' && old_every < 100000000; j++)
                old_every = old_every * 10 + (okv[i].val[j] - '0');
        }
    free(okv);
    if (rc) return rc;

    /* the rows before the checkpoint's step; a partial last line and '#' notes go */
    const char *s = ocol ? orows : old + n, *end = old + n, *keep_end = s;
    long last = -1, dropped = 0, kept = 0;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        if (!nl) break;
        if (*s != '#') {
            /* digits then a tab, all inside this line (the buffer has no NUL) */
            const char *e = s;
            long st = 0;
            while (e < nl && *e >= '0' && *e <= '9' && st <= 999999999) st = st * 10 + (*e++ - '0');
            if (e == s || *e != '\t' || st <= last) {
                int show = nl - s < 20 ? (int)(nl - s) : 20;
                return tg_errf(err, errlen, "line '%.*s...' is not a row after step %ld", show, s, last);
            }
            if (st >= step) break;
            last = st;
            kept++;
            keep_end = nl + 1;
        }
        s = nl + 1;
    }
    if (step > 0 && (last < 0 || last + (old_every > 0 ? old_every : 1) < step))
        return tg_errf(err, errlen, "its rows end at step %ld but the checkpoint is at step %d: rows are missing "
                    "(not this run's log?); refusing to append to it", last, step);
    for (const char *p = keep_end; p < end; p++) dropped += *p == '\n';
    if (end > keep_end && end[-1] != '\n') dropped++;   /* a partial last line */
    /* '#' notes between kept rows are copied with them; only rows are counted */
    const char *rows = ocol ? orows : end;
    *k = (tg_runlog_keep){(size_t)(rows - old), (size_t)(keep_end - old), kept, last, dropped};
    return 0;
}

int tg_runlog_resume(tg_runlog *L, const char *path, const char *header, const char *const *may_differ, int step,
                  char *info, size_t infolen, char *err, size_t errlen) {
    memset(L, 0, sizeof *L);
    L->fd = -1;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno != ENOENT) return tg_errf(err, errlen, "%s: cannot read (%s)", path, strerror(errno));
        snprintf(info, infolen, "%s did not exist: started it at step %d, without the earlier rows", path, step);
        return tg_runlog_open(L, path, header, err, errlen);
    }
    char *old = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 > cap) {
            cap = cap ? 2 * cap : 1 << 20;
            char *p = realloc(old, cap);
            if (!p) {
                free(old);
                fclose(f);
                return tg_errf(err, errlen, "%s: out of memory", path);
            }
            old = p;
        }
        size_t k = fread(old + n, 1, cap - n, f);
        n += k;
        if (k == 0) break;
    }
    int read_err = ferror(f);
    fclose(f);
    if (read_err) {
        free(old);
        return tg_errf(err, errlen, "%s: read error", path);
    }
    if (n == 0) {
        free(old);
        snprintf(info, infolen, "%s was empty: started it at step %d, without the earlier rows", path, step);
        return tg_runlog_open(L, path, header, err, errlen);
    }

    tg_runlog_keep k;
    int rc = tg_runlog_plan(old, n, header, may_differ, step, &k, err, errlen);
    if (!rc) {
        rc = replace_with(L, path, header, strlen(header), old + k.from, k.to - k.from, err, errlen);
        if (!rc)
            snprintf(info, infolen, "%s: kept %ld rows (steps 0..%ld), dropped %ld lines from step %d on", path,
                     k.kept, k.last, k.dropped, step);
    } else {
        char *msg = strdup(err);
        if (msg) {
            snprintf(err, errlen, "%s: %s", path, msg);
            free(msg);
        }
    }
    free(old);
    return rc;
}

int tg_runlog_header_value(const char *path, const char *key, char *val, size_t len) {
    char why[600];
    int fd = tg_file_open_read(path, why, sizeof why);   /* a FIFO would block: refused */
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return -1;
    }
    char line[2048];
    size_t k = strlen(key);
    int rc = -1;
    while (rc && fgets(line, sizeof line, f) && line[0] == '#')
        if (strncmp(line, "# ", 2) == 0 && strncmp(line + 2, key, k) == 0 && line[2 + k] == '=') {
            line[strcspn(line, "\n")] = '\0';
            snprintf(val, len, "%s", line + 3 + k);
            rc = 0;
        }
    fclose(f);
    return rc;
}

/* ---- rows ------------------------------------------------------------------ */
void tg_runlog_add(tg_runlog *L, const char *fmt, ...) {
    if (L->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = L->cap - L->len;
        int k = vsnprintf(L->row ? L->row + L->len : NULL, room, fmt, ap);
        va_end(ap);
        if (k < 0) {
            L->failed = 1;
            return;
        }
        if ((size_t)k < room) {
            L->len += (size_t)k;
            return;
        }
        size_t cap = L->cap ? 2 * L->cap : 4096;
        while (cap < L->len + (size_t)k + 1) cap *= 2;
        char *p = realloc(L->row, cap);
        if (!p) {
            L->failed = 1;
            return;
        }
        L->row = p;
        L->cap = cap;
    }
}

int tg_runlog_end_row(tg_runlog *L) {
    int rc = L->failed || L->fd < 0 || tg_write_all(L->fd, L->row, L->len) ? -1 : 0;
    L->len = 0;
    L->failed = 0;
    return rc;
}

int tg_runlog_sync(tg_runlog *L) { return L->fd >= 0 ? fsync(L->fd) : 0; }

int tg_runlog_close(tg_runlog *L) {
    int rc = L->fd >= 0 ? close(L->fd) : 0;
    free(L->row);
    memset(L, 0, sizeof *L);
    L->fd = -1;
    return rc;
}
