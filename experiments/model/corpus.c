#define _DEFAULT_SOURCE   /* popen, realpath, DT_* */
#include "tg_corpus.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tg_sha256.h"

typedef struct {
    char **p;
    int n, cap;
} paths;

static int push(paths *ps, const char *p) {
    if (ps->n == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 64;
        char **q = realloc(ps->p, (size_t)cap * sizeof *q);
        if (!q) return -1;
        ps->p = q, ps->cap = cap;
    }
    return (ps->p[ps->n] = strdup(p)) ? (ps->n++, 0) : -1;
}

static void paths_free(paths *ps) {
    for (int i = 0; i < ps->n; i++) free(ps->p[i]);
    free(ps->p);
    *ps = (paths){0};
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* FILE or FOLDER (recursively, sorted) into ps. */
static int expand(paths *ps, const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) return tg_errf(err, errlen, "corpus %s: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode)) return push(ps, path) ? tg_errf(err, errlen, "corpus: out of memory") : 0;
    if (!S_ISDIR(st.st_mode)) return tg_errf(err, errlen, "corpus %s: not a file or a folder", path);
    DIR *d = opendir(path);
    if (!d) return tg_errf(err, errlen, "corpus %s: %s", path, strerror(errno));
    paths here = {0};
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char full[PATH_MAX];
        if ((size_t)snprintf(full, sizeof full, "%s/%s", path, e->d_name) >= sizeof full) continue;
        if (push(&here, full)) {
            closedir(d);
            paths_free(&here);
            return tg_errf(err, errlen, "corpus: out of memory");
        }
    }
    closedir(d);
    if (here.n) qsort(here.p, (size_t)here.n, sizeof *here.p, by_name);   /* qsort(NULL, 0) is undefined */
    int rc = 0;
    for (int i = 0; i < here.n && !rc; i++) {
        struct stat s2;
        if (lstat(here.p[i], &s2) == 0 && S_ISLNK(s2.st_mode)) continue;   /* no loops through links */
        rc = expand(ps, here.p[i], err, errlen);
    }
    paths_free(&here);
    return rc;
}

static int from_list(paths *ps, const char *list, char *err, size_t errlen) {
    char self[PATH_MAX], other[PATH_MAX];
    if (!realpath(list, self)) return tg_errf(err, errlen, "corpus @%s: %s", list, strerror(errno));
    FILE *f = fopen(list, "r");
    if (!f) return tg_errf(err, errlen, "corpus @%s: %s", list, strerror(errno));
    char line[PATH_MAX];
    int rc = 0, lineno = 0, before = ps->n;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        if (line[0] == '@')
            rc = tg_errf(err, errlen, "corpus @%s line %d: a list inside a list ('%s') is not supported", list, lineno,
                         line);
        else if (realpath(line, other) && strcmp(other, self) == 0)
            rc = tg_errf(err, errlen, "corpus @%s line %d: the list names itself", list, lineno);
        else rc = expand(ps, line, err, errlen);
    }
    fclose(f);
    if (!rc && ps->n == before) rc = tg_errf(err, errlen, "corpus @%s: lists no file", list);
    return rc;
}

/* The .h files `dpkg -L libc6-dev` lists, sorted; source gets the package and version. */
static int from_dpkg(paths *ps, char *source, size_t len, char *err, size_t errlen) {
    FILE *p = popen("dpkg -L libc6-dev 2>/dev/null", "r");
    if (!p) return tg_errf(err, errlen, "corpus: cannot run dpkg: name a corpus with --data PATH");
    char line[PATH_MAX];
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\r\n")] = 0;
        size_t n = strlen(line);
        struct stat st;
        if (n > 2 && !strcmp(line + n - 2, ".h") && stat(line, &st) == 0 && S_ISREG(st.st_mode) && push(ps, line)) {
            pclose(p);
            return tg_errf(err, errlen, "corpus: out of memory");
        }
    }
    int status = pclose(p);
    if (ps->n == 0)
        return tg_errf(err, errlen, "corpus: `dpkg -L libc6-dev` lists no .h file (%s): name a corpus with --data PATH",
                       status ? "no dpkg here, or libc6-dev is not installed" : "an empty package?");
    qsort(ps->p, (size_t)ps->n, sizeof *ps->p, by_name);
    char ver[100] = "?";
    FILE *q = popen("dpkg-query -W -f='${Version}' libc6-dev 2>/dev/null", "r");
    if (q) {
        if (!fgets(ver, sizeof ver, q)) snprintf(ver, sizeof ver, "?");
        ver[strcspn(ver, "\r\n")] = 0;
        pclose(q);
    }
    snprintf(source, len, "libc6-dev %s (its .h files, dpkg -L, sorted)", ver);
    return 0;
}

int tg_corpus_load(tg_corpus *c, const char *spec, int window, char *err, size_t errlen) {
    *c = (tg_corpus){0};
    paths ps = {0};
    int rc = !spec ? from_dpkg(&ps, c->source, sizeof c->source, err, errlen)
             : spec[0] == '@' ? from_list(&ps, spec + 1, err, errlen)
                              : expand(&ps, spec, err, errlen);
    if (!rc && ps.n == 0) rc = tg_errf(err, errlen, "corpus %s: a folder with no files", spec ? spec : "(default)");
    if (spec) snprintf(c->source, sizeof c->source, "%s", spec);
    size_t cap = 0;
    for (int i = 0; i < ps.n && !rc; i++) {
        FILE *f = fopen(ps.p[i], "rb");
        if (!f) {
            rc = tg_errf(err, errlen, "corpus %s: %s", ps.p[i], strerror(errno));
            break;
        }
        size_t before = c->n;
        for (;;) {
            if (c->n + 65536 > cap) {
                size_t ncap = cap ? 2 * cap : 1 << 20;
                unsigned char *b = realloc(c->bytes, ncap);
                if (!b) {
                    rc = tg_errf(err, errlen, "corpus: out of memory at %zu bytes", c->n);
                    break;
                }
                c->bytes = b, cap = ncap;
            }
            size_t k = fread(c->bytes + c->n, 1, 65536, f);
            c->n += k;
            if (k < 65536) break;
        }
        if (!rc && ferror(f)) rc = tg_errf(err, errlen, "corpus %s: read error", ps.p[i]);
        fclose(f);
        if (!rc && c->n == before) rc = tg_errf(err, errlen, "corpus %s: the file is empty", ps.p[i]);
        c->n_files++;
    }
    paths_free(&ps);
    if (!rc) {
        size_t val = c->n / 10;
        c->n_train = c->n - val;
        if (val < (size_t)window + 1 || c->n_train < (size_t)window + 1)
            rc = tg_errf(err, errlen, "corpus %s: %zu bytes; with --seq-len %d it needs at least %d (one window + 1 "
                         "in the training part and in the last 10%%)", c->source, c->n, window, 10 * (window + 1));
    }
    if (rc) {
        tg_corpus_free(c);
        return -1;
    }
    for (size_t i = 0; i < c->n; i++) {
        unsigned char b = c->bytes[i];
        c->non_text += !((b >= 32 && b < 127) || b == '\t' || b == '\n' || b == '\r');
    }
    tg_sha256 h;
    unsigned char d[32];
    tg_sha256_init(&h);
    tg_sha256_update(&h, c->bytes, c->n);
    tg_sha256_final(&h, d);
    tg_sha256_hex(d, c->sha256);
    return 0;
}

void tg_corpus_free(tg_corpus *c) {
    free(c->bytes);
    c->bytes = NULL;
    c->n = c->n_train = 0;
}

static void window_at(const tg_corpus *c, size_t start, int T, int *x, int *y) {
    for (int t = 0; t < T; t++) x[t] = c->bytes[start + t], y[t] = c->bytes[start + t + 1];
}

void tg_corpus_batch(const tg_corpus *c, tg_rng *rng, int B, int T, int *tokens, int *targets) {
    /* uniform over [0, n_train - T - 1], from 32-bit draws: a corpus above 4 GiB would need two */
    const size_t span = c->n_train - (size_t)T;
    for (int b = 0; b < B; b++) {
        size_t start = (size_t)tg_rng_below(rng, (uint32_t)(span < UINT32_MAX ? span : UINT32_MAX));
        window_at(c, start, T, tokens + (size_t)b * T, targets + (size_t)b * T);
    }
}

void tg_corpus_val_batch(const tg_corpus *c, int first, int B, int T, int *tokens, int *targets) {
    const size_t span = c->n - c->n_train - (size_t)T - 1;
    for (int b = 0; b < B; b++) {
        size_t i = (size_t)((first + b) % TG_CORPUS_VAL);
        window_at(c, c->n_train + span * i / (TG_CORPUS_VAL - 1), T, tokens + (size_t)b * T, targets + (size_t)b * T);
    }
}

double tg_corpus_bigram_entropy(const tg_corpus *c) {
    unsigned (*counts)[256] = calloc(256, sizeof *counts), row[256] = {0};
    if (!counts) return NAN;
    for (size_t i = 0; i + 1 < c->n_train; i++) counts[c->bytes[i]][c->bytes[i + 1]]++, row[c->bytes[i]]++;
    double h = 0, n = (double)(c->n_train - 1);
    for (int a = 0; a < 256; a++)
        for (int b = 0; b < 256; b++)
            if (counts[a][b]) h -= counts[a][b] / n * log((double)counts[a][b] / row[a]);
    free(counts);
    return h;
}
