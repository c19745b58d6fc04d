/* attn_maps: an attn_scale --dump-attn file as text, for gnuplot
 * (scripts/plot_attn.sh), or a summary of where each head looks.
 *   attn_maps FILE
 *   attn_maps --summary FILE
 * stdout: the file's metadata as "# key=value" lines, "# tokens=..." (the
 * probe), then one block per layer, head and step (in that nesting, block
 * number ((l·H) + h)·n_steps + s), each "# block=k layer=l head=h step=s" and
 * T·T lines "key query weight", the keys the query does not see (key > query,
 * and with config.window W those before query − W + 1) as NaN; blocks
 * end with two blank lines (gnuplot's `index`). With grouped heads
 * (config.kv-heads N) a block line also names the key/value head, h / (H/N).
 * Files from before --window and --kv-heads have neither key: 0 and H. With
 * sinks (config.sinks 1) a block line also gives sink_weight, the mean over
 * query rows of the weight the sink took (1 − the row's sum), and --summary a
 * column sink. Exit 2 with a message when the
 * file is not such a dump or lacks a map its metadata promises.
 * --summary: one line per layer, head and step: the mean largest weight of a
 * row, and where each query row (positions 1..T-1) puts its largest weight,
 * as shares of the rows, checked in this order: itself, the BOS (position 0),
 * an earlier copy of its own token ("same"), the previous position, elsewhere. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "tg_blas.h"
#include "tg_runtime.h"

static int meta_int(const tg_st_file *f, const char *key, int lo, int hi, int *v) {
    const char *s = tg_st_meta(f, key);
    char *end;
    long x = s ? strtol(s, &end, 10) : 0;
    if (!s || end == s || *end || x < lo || x > hi) return -1;
    *v = (int)x;
    return 0;
}

/* where row i of a T×T map puts its largest weight; see the header */
/* The mean over query rows of 1 − Σ_j w_ij: what a sink took. */
static double sink_weight(const float *w, int T) {
    double s = 0;
    for (int i = 0; i < T; i++) {
        double r = 0;
        for (int j = 0; j < T; j++) r += w[(size_t)i * T + j];
        s += 1 - r;
    }
    return s / T;
}

static void summarise(const float *w, const int64_t *tok, int T, int l, int h, int step, int sinks) {
    int n[5] = {0};   /* self, bos, same, prev, other */
    double top = 0;
    for (int i = 1; i < T; i++) {
        const float *r = w + (size_t)i * T;
        int a = 0;
        for (int j = 1; j <= i; j++) a = r[j] > r[a] ? j : a;
        top += r[a];
        n[a == i ? 0 : a == 0 ? 1 : tok[a] == tok[i] ? 2 : a == i - 1 ? 3 : 4]++;
    }
    double rows = T - 1;
    printf("%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f", l, h, step, top / rows, n[0] / rows, n[1] / rows,
           n[2] / rows, n[3] / rows, n[4] / rows);
    if (sinks) printf("\t%.3f", sink_weight(w, T));
    printf("\n");
}

/* What a dump holds besides its maps, checked: layers, heads, steps, window, kv heads, sinks. */
typedef struct { int L, H, steps[256], n, W, Hkv, sinks; const tg_st_entry *tok; } dump_info;

/* 0, or 2 with the reason said. */
static int read_info(const tg_st_file *f, const char *path, dump_info *d) {
    *d = (dump_info){0};
    const char *fmt = tg_st_meta(f, "format"), *list = tg_st_meta(f, "steps");
    const tg_st_entry *tok = d->tok = tg_st_find(f, "probe.tokens");
    if (!fmt || strcmp(fmt, "tapegrad.attn_maps") != 0 || !list || !tok || tok->dtype != TG_ST_I64 || tok->ndim != 1 ||
        tok->numel < 1 || tok->numel > 4096 || meta_int(f, "config.layers", 1, 64, &d->L) ||
        meta_int(f, "config.heads", 1, 256, &d->H)) {
        fprintf(stderr, "attn_maps: %s is not an attn_scale --dump-attn file (format, steps, probe.tokens, config)\n", path);
        return 2;
    }
    /* recorded only when set (attn_added_flags) */
    if ((tg_st_meta(f, "config.window") && meta_int(f, "config.window", 0, 1000000, &d->W)) ||
        (tg_st_meta(f, "config.kv-heads") &&
         (meta_int(f, "config.kv-heads", 0, 256, &d->Hkv) || (d->Hkv && d->H % d->Hkv)))) {
        fprintf(stderr, "attn_maps: %s: config.window or config.kv-heads is not a valid value\n", path);
        return 2;
    }
    if (tg_st_meta(f, "config.sinks") && meta_int(f, "config.sinks", 0, 1, &d->sinks)) {
        fprintf(stderr, "attn_maps: %s: config.sinks is not 0 or 1\n", path);
        return 2;
    }
    for (const char *p = list; *p && d->n < 256;) {
        char *end;
        long s = strtol(p, &end, 10);
        if (end == p || s < 0 || (*end && *end != ',')) {
            fprintf(stderr, "attn_maps: %s: metadata steps '%.40s' is not a list of steps\n", path, list);
            return 2;
        }
        d->steps[d->n++] = (int)s;
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* Every map, as gnuplot blocks (or a summary line each); 0, or 2 with the reason said. w: T*T floats of room. */
static int print_maps(const tg_st_file *f, const char *path, const dump_info *d, const int64_t *tokens, int T,
                      float *w, int summary) {
    const int L = d->L, H = d->H, n = d->n, W = d->W, Hkv = d->Hkv, sinks = d->sinks;
    const int *steps = d->steps;
    if (summary) printf("layer\thead\tstep\ttop_weight\tself\tbos\tsame\tprev\tother%s\n", sinks ? "\tsink" : "");
    for (int l = 0, k = 0; l < L; l++)
        for (int h = 0; h < H; h++)
            for (int s = 0; s < n; s++, k++) {
                char name[96];
                snprintf(name, sizeof name, "attn.l%d.h%d.step%d", l, h, steps[s]);
                const tg_st_entry *e = tg_st_find(f, name);
                if (!e || e->dtype != TG_ST_F32 || e->ndim != 2 || e->shape[0] != T || e->shape[1] != T) {
                    fprintf(stderr, "attn_maps: %s: tensor %s is missing or not F32 [%d,%d]\n", path, name, T, T);
                    return 2;
                }
                tg_st_get_f32(e, w);
                if (summary) {
                    summarise(w, tokens, T, l, h, steps[s], sinks);
                    continue;
                }
                printf("# block=%d layer=%d head=%d step=%d", k, l, h, steps[s]);
                if (Hkv) printf(" kv_head=%d", h / (H / Hkv));
                if (sinks) printf(" sink_weight=%.6f", sink_weight(w, T));
                printf("\n");
                for (int i = 0; i < T; i++)
                    for (int j = 0; j < T; j++) {
                        if (j > i || (W && j < i - W + 1)) printf("%d %d NaN\n", j, i);
                        else printf("%d %d %.6g\n", j, i, (double)w[(size_t)i * T + j]);
                    }
                printf("\n\n");
            }
    return 0;
}

int main(int argc, char **argv) {
    if (tg_runtime_init("attn_maps", argc, argv)) return 1;   /* first: it may restart the program; threads */
    int summary = argc == 3 && strcmp(argv[1], "--summary") == 0;
    if ((argc != 2 && !summary) || argv[argc - 1][0] == '-') {
        fprintf(stderr, "usage: attn_maps [--summary] FILE\n(FILE: written by attn_scale --dump-attn ... --dump-attn-file FILE)\n");
        return 2;
    }
    const char *path = argv[argc - 1];
    char err[600];
    tg_st_file f;
    if (tg_st_read(path, &f, err, sizeof err)) {
        fprintf(stderr, "attn_maps: %s\n", err);
        return 2;
    }
    int rc = 2;
    dump_info d;
    const tg_st_entry *tok = NULL;
    float *w = NULL;
    int64_t *tokens = NULL;
    if (read_info(&f, path, &d)) goto out;
    tok = d.tok;
    const int T = (int)tok->numel;
    tokens = malloc((size_t)T * sizeof *tokens);
    w = malloc((size_t)T * T * sizeof *w);
    if (!tokens || !w) {
        fprintf(stderr, "attn_maps: out of memory\n");
        goto out;
    }
    tg_st_get_i64(tok, tokens);
    for (int i = 0; i < f.n_meta; i++)
        if (strcmp(f.meta[i].key, TG_ST_CHECKSUM_KEY) != 0) printf("# %s=%s\n", f.meta[i].key, f.meta[i].value);
    printf("# seq_len=%d\n# tokens=", T);
    for (int i = 0; i < T; i++) printf("%s%lld", i ? " " : "", (long long)tokens[i]);
    printf("\n");
    if (print_maps(&f, path, &d, tokens, T, w, summary)) goto out;
    rc = fflush(stdout) || ferror(stdout) ? 1 : 0;
    if (rc) fprintf(stderr, "attn_maps: write error on stdout\n");
out:
    free(w);
    free(tokens);
    tg_st_free(&f);
    return rc;
}
