#include "tg_tasks.h"

#include "tg_corpus.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const tg_task_names[] = {"hist", "recall", "code", NULL};

int tg_task_check(const tg_task_cfg *t, char *err, size_t errlen) {
    if (t->kind == TG_TASK_CODE) {
        if (t->vocab != 256) {
            snprintf(err, errlen, "task code: bytes need --vocab 256 (got %d)", t->vocab);
            return 1;
        }
        return 0;
    }
    if (t->kind == TG_TASK_HIST) {
        if (t->alphabet < 2 || t->alphabet + 1 > t->vocab) {
            snprintf(err, errlen, "task hist: alphabet %d needs 2 <= alphabet <= vocab-1 (vocab %d)",
                     t->alphabet, t->vocab);
            return 1;
        }
        if (t->seq_len < 2) {
            snprintf(err, errlen, "task hist: seq-len %d is too short (at least 2)", t->seq_len);
            return 1;
        }
    } else {
        if (t->keys < 2 || t->values < 2 || t->keys * t->values + t->keys > t->vocab) {
            snprintf(err, errlen, "task recall: %d keys x %d values need keys*values+keys <= vocab (%d)",
                     t->keys, t->values, t->vocab);
            return 1;
        }
        if (t->seq_len < 4 || t->seq_len % 2) {
            snprintf(err, errlen, "task recall: seq-len %d must be even and at least 4", t->seq_len);
            return 1;
        }
    }
    return 0;
}

static void hist_seq(const tg_task_cfg *t, tg_rng *r, int *x, int *y) {
    int T = t->seq_len, A = t->alphabet;
    int counts[4096];
    memset(counts, 0, sizeof(int) * (size_t)A);
    x[0] = A;     /* BOS: something to attend to that is not a symbol */
    y[0] = -1;
    for (int i = 1; i < T; i++) {
        x[i] = (int)tg_rng_below(r, (uint32_t)A);
        int c = ++counts[x[i]];
        y[i] = (c < t->vocab ? c : t->vocab) - 1;
    }
}

static void recall_seq(const tg_task_cfg *t, tg_rng *r, int *x, int *y) {
    int T = t->seq_len, K = t->keys, NV = t->values, half = T / 2;
    int map[4096], seen[4096], shown[4096], n_shown = 0;
    for (int k = 0; k < K; k++) {
        map[k] = (int)tg_rng_below(r, (uint32_t)NV);
        seen[k] = 0;
    }
    for (int i = 0; i < half; i++) {
        int k = (int)tg_rng_below(r, (uint32_t)K);
        x[i] = k * NV + map[k];
        y[i] = -1;
        if (!seen[k]) shown[n_shown++] = k;
        seen[k] = 1;
    }
    for (int i = half; i < T; i++) {
        int k = shown[tg_rng_below(r, (uint32_t)n_shown)];
        x[i] = K * NV + k;
        y[i] = map[k];
    }
}

void tg_task_batch(const tg_task_cfg *t, tg_rng *rng, int B, int *tokens, int *targets) {
    if (t->kind == TG_TASK_CODE) {
        tg_corpus_batch(t->corpus, rng, B, t->seq_len, tokens, targets);
        return;
    }
    for (int b = 0; b < B; b++) {
        int *x = tokens + (size_t)b * t->seq_len, *y = targets + (size_t)b * t->seq_len;
        if (t->kind == TG_TASK_HIST) hist_seq(t, rng, x, y);
        else recall_seq(t, rng, x, y);
    }
}

/* hist, context-free: at position i (1-based among symbols) the count is
 * 1 + Binomial(i-1, 1/A) whatever the symbol; the best prediction is that
 * distribution (clipped like the targets), and its entropy is the loss. */
static double hist_context_free(const tg_task_cfg *t) {
    int T = t->seq_len, A = t->alphabet, V = t->vocab;
    double p = 1.0 / A, total = 0;
    for (int i = 1; i < T; i++) {
        int n = i - 1;
        double probs[4097] = {0};
        for (int j = 0; j <= n; j++) {
            double lc = lgamma(n + 1.0) - lgamma(j + 1.0) - lgamma(n - j + 1.0);
            double pj = exp(lc + j * log(p) + (n - j) * log1p(-p));
            int cls = (j + 1 < V ? j + 1 : V) - 1;
            probs[cls] += pj;
        }
        double h = 0;
        for (int c = 0; c < V; c++)
            if (probs[c] > 0) h -= probs[c] * log(probs[c]);
        total += h;
    }
    return total / (T - 1);
}

tg_task_refs tg_task_reference(const tg_task_cfg *t) {
    tg_task_refs r = {0, 0};
    if (t->kind == TG_TASK_CODE) r = (tg_task_refs){NAN, t->corpus ? tg_corpus_bigram_entropy(t->corpus) : NAN};
    else if (t->kind == TG_TASK_HIST) r.context_free = hist_context_free(t);
    else r.context_free = log((double)t->values);   /* a query's value is uniform without the pairs */
    return r;
}
