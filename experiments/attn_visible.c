/* attn_visible: which keys each query row sees under tg_attn_args, as text.
 *   attn_visible                         the worked examples of docs/ops.md
 *   attn_visible --logits                what bias, ALiBi, a cap, a sink and dropout do to one row
 *   attn_visible --tq 3 --tk 8 --causal 1 --left 2 --right 0 --kv-len 6
 * One line per query row: its position p = i + Tk − Tq, the span of keys it
 * sees, and the row drawn over the keys ('x' visible, '.' not). Computed by
 * tg_attn_visible, the function both attention ops use. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tg_blas.h"
#include "tg_runtime.h"
#include "tg_cli.h"
#include "tg_ops.h"

static void show(const char *title, int Tq, int Tk, int causal, int left, int right, int kv_len) {
    tg_ctx ctx;
    tg_ctx_init(&ctx, 1 << 16);
    tg_tensor *q = tg_new(&ctx, 4, (int[]){1, Tq, 1, 1}), *k = tg_new(&ctx, 4, (int[]){1, Tk, 1, 1});
    tg_attn_args a = tg_attn_args_make(q, k, k, 1);
    a.causal = causal, a.window_left = left, a.window_right = right;
    a.kv_len = kv_len >= 0 ? &kv_len : NULL;
    printf("%s\n  Tq %d, Tk %d, causal %d, window (%d, %d), kv_len %s", title, Tq, Tk, causal, left, right,
           kv_len >= 0 ? "" : "-");
    if (kv_len >= 0) printf("%d", kv_len);
    printf("\n");
    for (int i = 0; i < Tq; i++) {
        int lo, hi;
        tg_attn_visible(&a, 0, i, &lo, &hi);
        char row[64] = "", span[32];
        for (int j = 0; j < Tk && j < 63; j++) row[j] = j >= lo && j < hi ? 'x' : '.';
        if (hi > lo) snprintf(span, sizeof span, "keys %d..%d", lo, hi - 1);
        else snprintf(span, sizeof span, "no key: out 0");
        printf("  query %d at p=%-2d %-14s %s\n", i, i + Tk - Tq, span, row);
    }
    printf("\n");
    tg_ctx_free(&ctx);
}

/* One query at position 3 against 4 keys, causal, s = 1, q·k = 2, 1, 0, −1: the
 * weights tg_attend gives under each feature (computed by the op itself). */
static void logits_row(const char *title, float softcap, const float *bias, float slope, float sink, float dropout) {
    tg_ctx ctx;
    tg_ctx_init(&ctx, 1 << 16);
    tg_params P;
    tg_params_init(&P);
    tg_tensor *q = tg_param(&P, "q", 4, (int[]){1, 1, 1, 1}), *k = tg_param(&P, "k", 4, (int[]){1, 4, 1, 1});
    tg_tensor *v = tg_param(&P, "v", 4, (int[]){1, 4, 1, 4});
    tg_params_alloc(&P);
    q->data[0] = 1;
    for (int j = 0; j < 4; j++) k->data[j] = (float)(2 - j), v->data[j * 4 + j] = 1;   /* v_j = e_j: out shows P̃ */
    tg_tensor *bt = bias ? tg_new(&ctx, 4, (int[]){1, 1, 1, 4}) : NULL, *st = tg_new(&ctx, 1, (int[]){1});
    tg_tensor *al = tg_new(&ctx, 1, (int[]){1});
    if (bt) memcpy(bt->data, bias, 4 * sizeof(float));
    st->data[0] = sink, al->data[0] = slope;
    tg_attn_args a = tg_attn_args_make(q, k, v, 1);
    a.causal = 1, a.softcap = softcap, a.bias = bt, a.dropout = dropout, a.dropout_seed = 1;
    if (slope > 0) a.alibi = al;
    if (sink > -INFINITY) a.sinks = st;
    tg_tensor *out = tg_attend(&ctx, &a);
    const float *w = tg_attention_probs(&ctx, out);
    double sum = 0;
    printf("%s\n  weights ", title);
    for (int j = 0; j < 4; j++) printf(" %.4f", w[j]), sum += w[j];
    if (a.sinks) printf("   sink %.4f", 1 - sum);
    if (dropout > 0) {
        printf("\n  after dropout %g (seed 1), out = ", dropout);
        for (int j = 0; j < 4; j++) printf(" %.4f", out->data[j]);
    }
    printf("\n\n");
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

int main(int argc, char **argv) {
    if (tg_runtime_init("attn_visible", argc, argv)) return 1;
    if (argc == 2 && strcmp(argv[1], "--logits") == 0) {
        printf("one query at p = 3, causal, s = 1, raw logits q.k = 2, 1, 0, -1 for keys 0..3\n\n");
        logits_row("plain softmax", 0, NULL, 0, -INFINITY, 0);
        logits_row("softcap 1.5: logits 1.5 tanh(x/1.5) = 1.3052, 0.8742, 0, -0.8742", 1.5f, NULL, 0, -INFINITY, 0);
        logits_row("bias 0, 0, -inf, 0.5 (a -inf entry hides key 2)", 0, (const float[]){0, 0, -INFINITY, 0.5f}, 0,
                   -INFINITY, 0);
        logits_row("ALiBi slope 0.5: logits - 0.5 |j - 3| = 0.5, 0, -0.5, -1", 0, NULL, 0.5f, -INFINITY, 0);
        logits_row("a sink of logit 1 joins the denominator and takes weight", 0, NULL, 0, 1, 0);
        logits_row("dropout 0.5: kept weights doubled (the weights above are before dropout)", 0, NULL, 0, -INFINITY,
                   0.5f);
        return 0;
    }
    int Tq = 0, Tk = 0, causal = 0, left = -1, right = -1, kv_len = -1;
    const tg_cli_opt opts[] = {
        {"tq", TG_CLI_INT, &Tq, 1, 60, NULL, "queries (0 with --tk 0: the worked examples)"},
        {"tk", TG_CLI_INT, &Tk, 1, 60, NULL, "keys"},
        {"causal", TG_CLI_INT, &causal, 0, 1, NULL, "causal mask, aligned bottom-right"},
        {"left", TG_CLI_INT, &left, -1, 1000, NULL, "window_left (-1: unbounded)"},
        {"right", TG_CLI_INT, &right, -1, 1000, NULL, "window_right (-1: unbounded)"},
        {"kv-len", TG_CLI_INT, &kv_len, -1, 60, NULL, "valid keys (-1: all)"},
    };
    const int n = (int)(sizeof opts / sizeof opts[0]);
    char err[256];
    int rc = tg_cli_parse(opts, n, argc, argv, err, sizeof err, NULL);
    if (rc == TG_CLI_HELP) {
        tg_cli_usage(stdout, "attn_visible", "Which keys each query sees under tg_attn_args.", opts, n);
        return 0;
    }
    if (rc != TG_CLI_OK || (!Tq) != (!Tk) || kv_len > Tk) {
        fprintf(stderr, "attn_visible: %s\n", rc != TG_CLI_OK ? err : "--tq and --tk go together; --kv-len at most --tk");
        return 2;
    }
    if (Tq) {
        show("your args", Tq, Tk, causal, left, right, kv_len);
        return 0;
    }
    show("causal, Tq = Tk: the textbook mask", 6, 6, 1, -1, -1, -1);
    show("chunked prefill: 3 new queries after 5 cached keys, causal (bottom-right: query 0 sits at key 5)",
         3, 8, 1, -1, -1, -1);
    show("decoding: one query against a KV cache of 8 keys, causal: it sees all 8", 1, 8, 1, -1, -1, -1);
    show("Mistral's sliding window W = 3 is window (W - 1, 0) with causal: exactly 3 keys, its own the last",
         8, 8, 1, 2, 0, -1);
    show("window (2, 2) without causal is two-sided: 2w + 1 = 5 keys (passing (w, w) for a causal window of w is "
         "the bug of transformers #39408)", 8, 8, 0, 2, 2, -1);
    show("padding: kv_len 5 of 8 keys; positions still come from Tk = 8, not from kv_len", 8, 8, 1, -1, -1, 5);
    show("more queries than keys, causal: the first rows see nothing and give 0", 6, 4, 1, -1, -1, -1);
    return 0;
}
