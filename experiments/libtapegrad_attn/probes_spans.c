/* attn_check's probes of which keys a row sees (tg_attn_check.h): the mask, grouped heads, the
 * alignment of Tq < Tk, windows, padding; all with equal logits, so at any temperature. */
#include "check_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- equal logits: which keys a row sees, at any temperature --------------------------------- */
/* q = 0 makes every logit of a row equal whatever the kernel multiplies q·k by, so with V = identity
 * each visible key weighs 1/n and a hidden one 0. Fills seen[b][h][i] = [lo, hi) when the row's
 * visible keys are one contiguous run (else lo = -1) and returns 0; -1 with msg when the call
 * failed or the weights are not those of a softmax of equal logits. */
typedef struct { int lo, hi; } span;

static int equal_logit_spans(tg_ctx *ctx, const tg_attn_kernel *K, tg_attn_args *a, span *seen, double *sums,
                             char *msg, size_t len) {
    const int B = a->q->shape[0], Tq = a->q->shape[1], H = a->q->shape[2], Tk = a->k->shape[1];
    memset(a->q->data, 0, sizeof(float) * (size_t)a->q->numel);
    float *P = malloc(sizeof(float) * (size_t)B * H * Tq * Tk);
    if (!P) return snprintf(msg, len, "out of memory"), -1;
    char why[400];
    if (tg_attn_weights(ctx, K, a, P, why, sizeof why)) {
        snprintf(msg, len, "%s", why);
        free(P);
        return -1;
    }
    int expected = 0, zero_rows = 0;
    const double wtol = tg_attn_weight_tol(K);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                const float *p = P + (((size_t)b * H + h) * Tq + i) * Tk;
                int lo = -1, hi = -1, runs = 0, n = 0;
                double sum = 0, pos = 0;
                int nan_row = 0;
                for (int j = 0; j < Tk; j++) nan_row |= !isfinite(p[j]);
                if (nan_row) {   /* 0/0: a row that sees no key, usually */
                    if (sums) sums[((size_t)b * H + h) * Tq + i] = NAN;
                    seen[((size_t)b * H + h) * Tq + i] = (span){-2, -2};
                    continue;
                }
                for (int j = 0; j < Tk; j++) {
                    if (p[j] < -1e-6f) {
                        snprintf(msg, len, "row %d of head %d (batch %d) holds weight %g for key %d with equal logits: "
                                 "not a softmax", i, h, b, p[j], j);
                        free(P);
                        return -1;
                    }
                    sum += p[j];
                    if (p[j] > 1e-6f) {
                        if (hi != j) runs++, lo = j;
                        hi = j + 1, n++, pos = p[j];
                    }
                }
                for (int j = 0; j < Tk; j++)   /* equal logits: equal weights */
                    if (p[j] > 1e-6f && !tgc_near(p[j], pos, wtol)) {
                        snprintf(msg, len, "row %d of head %d: equal logits give unequal weights (%g and %g): not a "
                                 "softmax of the logits (or a bias where none was asked)", i, h, p[j], pos);
                        free(P);
                        return -1;
                    }
                int vlo, vhi;
                tg_attn_visible(a, b, i, &vlo, &vhi);
                expected += vhi > vlo, zero_rows += vhi > vlo && sum == 0;
                if (vhi > vlo && fabs(sum - 1) > wtol && sum != 0 && !a->sinks) {   /* 0: no key seen, the spans say */
                    if (n < Tk && fabs(sum - (double)n / Tk) < wtol)
                        snprintf(msg, len, "row %d of head %d (batch %d) sums to %g = %d/%d with equal logits: the mask "
                                 "is applied after the softmax (each seen key keeps 1/%d of all keys, not renormalised)",
                                 i, h, b, sum, n, Tk, Tk);
                    else
                        snprintf(msg, len, "row %d of head %d (batch %d) sums to %g with equal logits, not 1: not a "
                                 "softmax (attention weights sum to 1)", i, h, b, sum);
                    free(P);
                    return -1;
                }
                if (sums) sums[((size_t)b * H + h) * Tq + i] = sum;
                seen[((size_t)b * H + h) * Tq + i] = runs > 1 ? (span){-1, -1} : n ? (span){lo, hi} : (span){0, 0};
            }
    free(P);
    if (expected && zero_rows == expected && !a->sinks)
        return snprintf(msg, len, "every row weighs its keys 0 with equal logits: not a softmax (attention weights "
                        "sum to 1)"), -1;
    return 0;
}

/* The first row whose span differs from args': *row, its spans; -1 when none does. */
static int first_wrong(const tg_attn_args *a, const span *seen, int b, int h, span *got, span *want) {
    const int Tq = a->q->shape[1], H = a->q->shape[2];
    for (int i = 0; i < Tq; i++) {
        int lo, hi;
        tg_attn_visible(a, b, i, &lo, &hi);
        if (lo == hi) lo = hi = 0;
        const span s = seen[((size_t)b * H + h) * Tq + i];
        if (s.lo != lo || s.hi != hi) {
            *got = s, *want = (span){lo, hi};
            return i;
        }
    }
    return -1;
}

/* 1 when every row of head 0 of every batch row sees what alt's args would show. */
static int spans_are(const tg_attn_args *alt, const span *seen) {
    const int B = alt->q->shape[0];
    span got, want;
    for (int b = 0; b < B; b++)
        if (first_wrong(alt, seen, b, 0, &got, &want) >= 0) return 0;
    return 1;
}

static void say_span(char *buf, size_t len, span s) {
    if (s.lo == -2) snprintf(buf, len, "NaN weights (no key at all: 0/0?)");
    else if (s.lo < 0) snprintf(buf, len, "a broken set of keys");
    else if (s.lo == s.hi) snprintf(buf, len, "no key");
    else if (s.hi - s.lo == 1) snprintf(buf, len, "key %d", s.lo);
    else snprintf(buf, len, "keys %d..%d", s.lo, s.hi - 1);
}

void tgc_probe_mask(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 1, T = 12, H = 2, d = 16;
    for (int causal = 1; causal >= 0; causal--) {
        if (!tgc_takes(K, causal, 0)) continue;
        const char *what = causal ? "causal" : "not causal";
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_rng rng;
        tg_rng_seed(&rng, 5, 5);
        tg_tensor *q = tgc_randn(&ctx, &rng, B, T, H, d, 1), *k = tgc_randn(&ctx, &rng, B, T, H, d, 1);
        tg_attn_args a = tg_attn_args_make(q, k, k, 0.25f);
        a.causal = causal;
        tgc_conform(K, &a);
        span seen[B * H * T];
        char msg[400], g[40], w[40];
        if (equal_logit_spans(&ctx, K, &a, seen, NULL, msg, sizeof msg)) {
            tgc_add(r, "mask", what, TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", msg);
            tg_ctx_free(&ctx);
            continue;
        }
        span got, want;
        int row = -1, hh = 0;
        for (int h = 0; h < H && row < 0; h++) row = first_wrong(&a, seen, 0, hh = h, &got, &want);
        if (row < 0)
            tgc_add(r, "mask", what, TG_ATTN_CHECK_PASS, 0, 0, "with equal logits (any temperature) every row sees exactly %s "
                "(T = %d)", causal ? "the keys up to its own position" : "every key", T);
        else {
            say_span(g, sizeof g, got), say_span(w, sizeof w, want);
            const char *kind = !causal ? ": the non-causal call masks (declare causal_only if the kernel is causal only)"
                               : got.lo == 0 && got.hi == want.hi + 1 ? ": the mask is off by one (each row sees the next position)"
                               : got.lo == 0 && got.hi == T ? ": no causal mask"
                               : (got.lo == 0 && got.hi == want.hi - 1) || (row == 0 && got.lo == -2)
                                   ? ": the mask hides the diagonal (off by one): row 0 does not see its own position"
                               : "";
            tgc_add(r, "mask", what, TG_ATTN_CHECK_FAIL, row, 0, "with equal logits (any temperature) row %d of head %d sees %s, "
                "not %s%s", row, hh, g, w, kind);
        }
        tg_ctx_free(&ctx);
    }
}

/* ---- grouped heads ----------------------------------------------------------------------------- */
/* q = 0 and v of kv head g all g + 1: each query head's output is the number of the head it reads. */
void tgc_probe_gqa(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    /* a multi-query-only kernel: one kv head, which every query head reads */
    const int mqa = !!(tg_attn_kernel_conventions(K) & TG_ATTN_C_MQA_ONLY);
    const int B = 1, T = 6, H = 4, Hkv = mqa ? 1 : 2, d = 8, group = H / Hkv;
    char what[24];
    snprintf(what, sizeof what, "H=4, Hkv=%d", Hkv);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    ctx.grad_enabled = 0;
    tg_rng rng;
    tg_rng_seed(&rng, 3, 3);
    tg_tensor *q = tg_zeros(&ctx, 4, (int[]){B, T, H, d}), *k = tgc_randn(&ctx, &rng, B, T, Hkv, d, 1);
    tg_tensor *v = tg_new(&ctx, 4, (int[]){B, T, Hkv, d});
    for (int64_t i = 0; i < v->numel; i++) v->data[i] = (float)((i / d) % Hkv + 1);
    tg_attn_args a = tg_attn_args_make(q, k, v, 0.3f);
    tgc_conform(K, &a);   /* causal: row 0 still reads its head's v */
    char msg[300];
    tg_tensor *out = tgc_call(&ctx, K, &a, msg, sizeof msg);
    if (!out) {
        tgc_add(r, "gqa", what, TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", msg);
        tg_ctx_free(&ctx);
        return;
    }
    int read[4], tile = 1, right = 1, mixed = -1;
    for (int h = 0; h < H; h++) {
        const double x = out->data[(size_t)h * d] - 1;   /* batch 0, row 0 */
        read[h] = (int)lround(x);
        if (fabs(x - read[h]) > Hkv * tg_attn_weight_tol(K) || read[h] < 0 || read[h] >= Hkv) mixed = h;
        right &= read[h] == h / group, tile &= read[h] == h % Hkv;
    }
    if (mixed >= 0)
        tgc_add(r, "gqa", what, TG_ATTN_CHECK_FAIL, NAN, NAN, "query head %d reads a mixture of key/value heads (its "
            "output is %.3g of a head numbered 0..1): keys repeated along the sequence, or heads mixed", mixed,
            out->data[(size_t)mixed * d] - 1);
    else if (right)
        tgc_add(r, "gqa", what, TG_ATTN_CHECK_PASS, 0, 0, "%s", mqa ? "query heads 0..3 all read the one kv head "
            "(multi-query: its convention mqa_only)" : "query heads 0..3 read kv heads 0 0 1 1 (repeat_interleave: "
            "h / (H/Hkv))");
    else {
        int h = 0;
        while (read[h] == h / group) h++;
        tgc_add(r, "gqa", what, TG_ATTN_CHECK_FAIL, h, 0, "query head %d reads kv head %d, not %d%s (reads %d %d %d %d)",
            h, read[h], h / group, tile ? ": tile order (h mod Hkv) instead of repeat_interleave (h / group)" : "",
            read[0], read[1], read[2], read[3]);
    }
    tg_ctx_free(&ctx);
}

/* ---- spans of rows: alignment, window, padding -------------------------------------------------- */
/* The args' visible keys against the kernel's, with equal logits; the first wrong row in words. */
static int span_verdict(const tg_attn_kernel *K, tg_attn_args *a, char *text, size_t len, span *got, span *want) {
    const int B = a->q->shape[0], Tq = a->q->shape[1], H = a->q->shape[2];
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    span *seen = malloc(sizeof(span) * (size_t)B * H * Tq);
    int row = -1;
    if (!seen || equal_logit_spans(&ctx, K, a, seen, NULL, text, len)) {
        if (!seen) snprintf(text, len, "out of memory");
        free(seen);
        tg_ctx_free(&ctx);
        return -2;
    }
    for (int b = 0; b < B && row < 0; b++) row = first_wrong(a, seen, b, 0, got, want);
    free(seen);
    tg_ctx_free(&ctx);
    return row;
}

static tg_attn_args span_args(tg_ctx *ctx, int B, int Tq, int Tk, int d) {
    tg_rng rng;
    tg_rng_seed(&rng, 9, (uint64_t)(Tq * 1000 + Tk));
    tg_tensor *q = tg_zeros(ctx, 4, (int[]){B, Tq, 1, d}), *k = tgc_randn(ctx, &rng, B, Tk, 1, d, 1);
    tg_attn_args a = tg_attn_args_make(q, k, k, 0.3f);
    return a;
}

void tgc_probe_alignment(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int cases[2][2] = {{3, 8}, {1, 8}};
    for (int c = 0; c < 2; c++) {
        const int Tq = cases[c][0], Tk = cases[c][1];
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_attn_args a = span_args(&ctx, 1, Tq, Tk, 8);
        a.causal = 1;
        tgc_conform(K, &a);
        char what[40], text[400], g[40], w[40];
        snprintf(what, sizeof what, "Tq=%d, Tk=%d, causal", Tq, Tk);
        span got, want;
        int row = span_verdict(K, &a, text, sizeof text, &got, &want);
        if (row == -2) tgc_add(r, "alignment", what, TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", text);
        else if (row < 0)
            tgc_add(r, "alignment", what, TG_ATTN_CHECK_PASS, 0, 0, "query i sees keys 0..i + %d: the queries are the last %d "
                "position%s (bottom-right, as decoding with a KV cache)", Tk - Tq, Tq, Tq > 1 ? "s" : "");
        else {
            say_span(g, sizeof g, got), say_span(w, sizeof w, want);
            const int top_left = got.lo == 0 && got.hi == row + 1;
            tgc_add(r, "alignment", what, TG_ATTN_CHECK_FAIL, row, 0, "query %d sees %s, not %s%s", row, g, w,
                top_left ? (Tq == 1 ? ": causal mask aligned top-left: a decoding step with a KV cache sees only the "
                                      "first key"
                                    : ": causal mask aligned top-left (query i at position i, not i + Tk − Tq)")
                         : "");
        }
        tg_ctx_free(&ctx);
    }
}

void tgc_probe_window(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    struct { int causal, left, right, T; } cases[] = {{1, 127, -1, 300}, {0, 3, 2, 12}};
    for (int c = 0; c < 2; c++) {
        const int T = cases[c].T;
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        tg_attn_args a = span_args(&ctx, 1, T, T, 8);
        a.causal = cases[c].causal, a.window_left = cases[c].left, a.window_right = cases[c].right;
        tgc_conform(K, &a);   /* window_causal, causal_only: the two-sided case becomes a causal (3, 0) */
        char what[40], text[400], g[40], w[40];
        snprintf(what, sizeof what, "%s (%d, %d)", a.causal ? "causal" : "two-sided", a.window_left,
                 a.causal ? 0 : a.window_right);
        span *seen = malloc(sizeof(span) * T);
        if (!seen || equal_logit_spans(&ctx, K, &a, seen, NULL, text, sizeof text)) {
            tgc_add(r, "window", what, TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", seen ? text : "out of memory");
            free(seen);
            tg_ctx_free(&ctx);
            continue;
        }
        /* over every row: what kind of wrong, if any */
        int first = -1, ignored = 1, plus_one = 1, ahead = 0, clipped = 0;
        span got = {0, 0}, want = {0, 0};
        for (int i = 0; i < T; i++) {
            int lo, hi;
            tg_attn_visible(&a, 0, i, &lo, &hi);
            const span s = seen[i];
            if (s.lo < 0) {
                ignored = plus_one = 0;
                if (first < 0) first = i, got = s, want = (span){lo, hi};
                continue;
            }
            if ((s.lo != lo || s.hi != hi) && first < 0) first = i, got = s, want = (span){lo, hi};
            if (lo > 0 || hi < T) clipped = 1;
            if ((lo > 0 && s.lo != 0) || (!a.causal && hi < T && s.hi != T) || (a.causal && s.hi != hi)) ignored = 0;
            if (s.hi != hi || (lo > 0 && s.lo != lo - 1) || (lo == 0 && s.lo != 0)) plus_one = 0;
            if (a.causal && s.hi > hi && s.hi - hi > ahead) ahead = s.hi - hi;
        }
        if (first < 0)
            tgc_add(r, "window", what, TG_ATTN_CHECK_PASS, 0, 0, "every row sees the span asked for: its own key and %d back%s "
                "(T = %d)", a.window_left, a.causal ? ", none ahead" : ", 2 ahead", T);
        else {
            say_span(g, sizeof g, got), say_span(w, sizeof w, want);
            char why[160] = "";
            if (ahead)
                snprintf(why, sizeof why, ": also sees up to %d key%s ahead: a two-sided window", ahead, ahead > 1 ? "s" : "");
            else if (ignored && clipped)
                snprintf(why, sizeof why, ": sees every key%s: the window is ignored", a.causal ? " up to its own" : "");
            else if (plus_one)
                snprintf(why, sizeof why, ": sees %d keys, the window asks for %d (left = %d): off by one",
                         got.hi - got.lo, want.hi - want.lo, a.window_left);
            else if (!a.causal) {   /* a two-sided window read wrong: one bound taken for the other, or dropped */
                tg_attn_args alt = a;
                alt.window_right = a.window_left;
                if (spans_are(&alt, seen))
                    snprintf(why, sizeof why, ": a (%d, %d) window: the right bound is taken from the left one",
                             a.window_left, a.window_left);
                alt = a, alt.window_left = a.window_right;
                if (!why[0] && spans_are(&alt, seen))
                    snprintf(why, sizeof why, ": a (%d, %d) window: the left bound is taken from the right one",
                             a.window_right, a.window_right);
                alt = a, alt.window_right = -1;
                if (!why[0] && spans_are(&alt, seen))
                    snprintf(why, sizeof why, ": the right bound is ignored (every key ahead is seen)");
                alt = a, alt.window_right = 0;
                if (!why[0] && spans_are(&alt, seen))
                    snprintf(why, sizeof why, ": no key ahead: the window is applied as a causal (left-only) one "
                             "(declare window_causal if the model's own code does so)");
                alt = a, alt.window_left = -1;
                if (!why[0] && spans_are(&alt, seen))
                    snprintf(why, sizeof why, ": the left bound is ignored (every key behind is seen)");
            }
            tgc_add(r, "window", what, TG_ATTN_CHECK_FAIL, first, 0, "row %d sees %s, not %s%s", first, g, w, why);
        }
        free(seen);
        tg_ctx_free(&ctx);
    }
}

void tgc_probe_padding(const tg_attn_kernel *K, const tg_attn_check_opts *o, tg_attn_check_report *r) {
    (void)o;
    const int B = 2, T = 8, d = 8;
    int kv_len[2] = {5, 0};
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_attn_args a = span_args(&ctx, B, T, T, d);
    a.kv_len = kv_len;
    tgc_conform(K, &a);
    /* A kernel whose empty rows give the mean of v or NaN (a convention) is refused a call with such
     * a row by the gate; here the row is sent past that refusal, to see that it gives what is declared. */
    unsigned empty;   /* the convention that says what an empty row gives; 0: none (the contract's 0) */
    const int declared = tg_attn_empty_row(tg_attn_kernel_conventions(K), &empty);
    tg_attn_kernel K2 = *K;
    K2.conventions &= ~empty;
    span *seen = malloc(sizeof(span) * B * T);
    char text[400], g[40];
    if (!seen || equal_logit_spans(&ctx, empty ? &K2 : K, &a, seen, NULL, text, sizeof text)) {
        tgc_add(r, "padding", "kv_len 5, 0", TG_ATTN_CHECK_FAIL, NAN, NAN, "%s", seen ? text : "out of memory");
    } else {
        span got, want;
        int leak = first_wrong(&a, seen, 0, 0, &got, &want);
        int bad_empty = -1, empty_is = TG_ATTN_EMPTY_ZERO;   /* what the empty rows give: TG_ATTN_EMPTY_*, -1 neither */
        for (int i = 0; i < T; i++) {
            const span s = seen[T + i];
            /* its causal prefix: keys 0..i (the last row's is every key: read as the first row's kind) */
            const int all = s.lo == 0 && s.hi == T,
                      prefix = a.causal ? s.lo == 0 && s.hi == i + 1 && (!all || empty_is == TG_ATTN_EMPTY_PREFIX)
                                        : all && declared == TG_ATTN_EMPTY_PREFIX;   /* not causal: every key */
            const int is = prefix ? TG_ATTN_EMPTY_PREFIX : all ? TG_ATTN_EMPTY_MEAN : s.lo == -2 ? TG_ATTN_EMPTY_NAN
                           : s.lo == s.hi ? TG_ATTN_EMPTY_ZERO : -1;
            if (i == 0) empty_is = is;
            if (is != empty_is && bad_empty < 0) bad_empty = i;
        }
        static const char *const gives[] = {[TG_ATTN_EMPTY_ZERO] = "0",
                                            [TG_ATTN_EMPTY_MEAN] = "the mean of v (every key weighs alike)",
                                            [TG_ATTN_EMPTY_NAN] = "NaN",
                                            [TG_ATTN_EMPTY_PREFIX] = "the mean of v over its causal prefix (keys 0 up to its own)"};
        /* kv_len applied to the queries (a [B, T, 1] mask, not [B, 1, T]): rows past it see nothing,
         * the rest every key (not causal) or every key up to their own */
        int on_queries = 1;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < T; i++) {
                const span s = seen[(size_t)b * T + i];
                on_queries &= i < kv_len[b] ? s.lo == 0 && s.hi == (a.causal ? i + 1 : T)
                                            : s.lo == -2 || s.lo == s.hi ||
                                                  (declared == TG_ATTN_EMPTY_MEAN && s.lo == 0 && s.hi == T) ||
                                                  (declared == TG_ATTN_EMPTY_PREFIX && s.lo == 0 &&
                                                   s.hi == (a.causal ? i + 1 : T));
            }
        if (leak >= 0 && on_queries)
            tgc_add(r, "padding", "kv_len 5, 0", TG_ATTN_CHECK_FAIL, leak, 0, "rows 0..4 of batch 0 (kv_len 5) see every key%s "
                "and rows 5..7 none: kv_len masks the queries, not the keys (a [B, T, 1] mask where [B, 1, T] belongs)",
                a.causal ? " up to their own" : "");
        else if (leak >= 0) {
            span s = seen[leak];
            say_span(g, sizeof g, s);
            tgc_add(r, "padding", "kv_len 5, 0", TG_ATTN_CHECK_FAIL, leak, 0, "row %d of batch 0 (kv_len 5) sees %s: %s", leak, g,
                s.lo >= 0 && s.hi > 5 ? "keys past kv_len leak" : "not keys 0..4");
        } else if (bad_empty >= 0 || empty_is < 0 || empty_is != declared)
            tgc_add(r, "padding", "kv_len 5, 0", TG_ATTN_CHECK_FAIL, bad_empty, 0, "a row that sees no key (kv_len 0) gives %s "
                "instead of %s%s", empty_is < 0 || bad_empty >= 0 ? "weights on some keys"
                : empty_is == TG_ATTN_EMPTY_NAN ? "NaN" : empty_is == TG_ATTN_EMPTY_MEAN ? "weights: every key alike, the mean of v"
                : empty_is == TG_ATTN_EMPTY_PREFIX ? "weights: the keys up to its own alike, the mean of its causal prefix"
                : "0", gives[declared], declared ? " (as its convention declares)" : empty_is == TG_ATTN_EMPTY_MEAN ? " (an "
                "additive finfo.min mask? declare empty_mean if the model's own code does so)" : empty_is == TG_ATTN_EMPTY_NAN ?
                " (a -inf mask: 0/0? declare empty_nan if the model's own code does so)" : empty_is == TG_ATTN_EMPTY_PREFIX ?
                " (a causal where(., finfo.min) and an added finfo.min padding mask: a key hidden twice is -inf? declare "
                "empty_prefix if the model's own code does so)" : "");
        else {
            tgc_add(r, "padding", "kv_len 5, 0", TG_ATTN_CHECK_PASS, 0, 0, "keys past kv_len get no weight%s", declared ? ""
                : "; a row with no key (kv_len 0) is 0, not NaN");
            if (declared)
                tgc_add(r, "padding", "empty row", TG_ATTN_CHECK_INFO, NAN, NAN, "a row with no key (kv_len 0) gives %s, as "
                    "declared (%s); the programs refuse calls with such rows", gives[declared],
                    tg_attn_convention_token(empty));
        }
    }
    free(seen);
    tg_ctx_free(&ctx);
}

