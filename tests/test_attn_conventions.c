/* Conventions a kernel declares (issue 38, part 2; ops/attn_tables.h's TG_ATTN_CONVENTION_TABLE).
 * Each kernel here is tg_attend bent the way real model code bends it: only causal, its own
 * 1/√d, no per-head scale, causal left windows only, BLOOM's one-sided ALiBi ramp, sinks it
 * cannot do without, transformers' finfo.min mask; and (0.21) one kv head, CodeGen's double mask,
 * T5's folded scale. Declared, each passes attn_check's whole
 * battery with its conventions as info lines; the same function undeclared fails, with the
 * cause named; and the gate refuses a call outside a declared convention, naming it. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "tg_attn_check.h"
#include "tg_attn_probe.h"

/* a kernel that knows only causal attention: every call is computed causal */
static tg_tensor *causal_kernel(tg_ctx *ctx, const tg_attn_args *args) {
    tg_attn_args a = tg_attn_args_of(args);
    a.causal = 1;
    return tg_attend(ctx, &a);
}

/* nanoGPT: y = softmax(q·kᵀ / √d), whatever scale is passed */
static tg_tensor *own_scale(tg_ctx *ctx, const tg_attn_args *args) {
    tg_attn_args a = tg_attn_args_of(args);
    a.scale = 1.0f / sqrtf((float)a.q->shape[3]);
    return tg_attend(ctx, &a);
}

static tg_tensor *no_head_scale(tg_ctx *ctx, const tg_attn_args *args) {
    tg_attn_args a = tg_attn_args_of(args);
    a.head_scale = NULL;
    return tg_attend(ctx, &a);
}

/* Mistral's sliding window: a window is (left, 0) under the causal mask, whatever else was asked */
static tg_tensor *left_window(tg_ctx *ctx, const tg_attn_args *args) {
    tg_attn_args a = tg_attn_args_of(args);
    if (a.window_left >= 0 || a.window_right >= 0) a.causal = 1, a.window_right = -1;
    return tg_attend(ctx, &a);
}

/* BLOOM: the logits get + slope_h · j (the key's position), a bias of its own, not −slope·|j − i| */
static tg_tensor *bloom_ramp(tg_ctx *ctx, const tg_attn_args *args) {
    tg_attn_args a = tg_attn_args_of(args);
    if (a.alibi) {
        const int H = a.q->shape[2], Tq = a.q->shape[1], Tk = a.k->shape[1];
        tg_tensor *ramp = tg_new(ctx, 4, (int[]){1, H, Tq, Tk});
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++)
                for (int j = 0; j < Tk; j++) ramp->data[((size_t)h * Tq + i) * Tk + j] = a.alibi->data[h] * (float)j;
        a.bias = ramp, a.alibi = NULL;
    }
    return tg_attend(ctx, &a);
}

/* GPT-OSS: the sinks are part of the layer; a call without them is not one it can make */
static tg_tensor *needs_sinks(tg_ctx *ctx, const tg_attn_args *args) {
    tg_attn_args a = tg_attn_args_of(args);
    if (!a.sinks) tg_fail(ctx, "needs_sinks: no sinks given");
    return tg_attend(ctx, &a);
}

/* The call's causal mask and padding as an additive bias: a padded key gets finfo.min, a key the
 * causal mask hides gets causal_hidden (always_causal: the kernel is a decoder's, causal whatever
 * was asked) */
static tg_tensor *additive_mask(tg_ctx *ctx, const tg_attn_args *args, int always_causal, float causal_hidden) {
    tg_attn_args a = tg_attn_args_of(args);
    if (always_causal) a.causal = 1;
    if (!a.kv_len) return tg_attend(ctx, &a);
    const int B = a.q->shape[0], T = a.q->shape[1];
    tg_tensor *mask = tg_new(ctx, 4, (int[]){B, 1, T, T});
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                mask->data[((size_t)b * T + i) * T + j] = a.causal && j > i ? causal_hidden : j >= a.kv_len[b] ? -FLT_MAX : 0.0f;
    a.bias = mask, a.kv_len = NULL, a.causal = 0;
    return tg_attend(ctx, &a);
}

/* transformers' eager code: padding and the causal mask as an additive finfo.min, so a row that
 * sees no key weighs every key alike (the mean of v) */
static tg_tensor *finfo_mask(tg_ctx *ctx, const tg_attn_args *args) { return additive_mask(ctx, args, 0, -FLT_MAX); }

/* StarCoder's kernels (0.21): one key/value head, shared by every query head */
static tg_tensor *one_kv_head(tg_ctx *ctx, const tg_attn_args *args) {
    if (args->k->shape[2] != 1) tg_fail(ctx, "one_kv_head: one key/value head only (got %d)", args->k->shape[2]);
    return tg_attend(ctx, args);
}

/* CodeGen, GPT-NeoX (0.21): the causal mask by where(·, finfo.min) and the padding added as finfo.min,
 * so a key hidden by both is −inf and a row without keys averages its causal prefix */
static tg_tensor *prefix_mask(tg_ctx *ctx, const tg_attn_args *args) { return additive_mask(ctx, args, 1, -INFINITY); }

/* T5 (0.21): no multiplier at all, the model folds 1/√d into W_q's initialisation */
static tg_tensor *folded(tg_ctx *ctx, const tg_attn_args *args) {
    tg_attn_args a = tg_attn_args_of(args);
    a.scale = 1.0f;
    return tg_attend(ctx, &a);
}

typedef struct {
    const char *name;
    tg_attend_fn fn;
    unsigned features, conventions;
    const char *check, *undeclared;   /* undeclared: the check that fails and words of its cause */
    unsigned kept;                    /* conventions still declared in the undeclared run (0: none) */
} conv_case;

static const conv_case cases[] = {
    {"causal only", causal_kernel, TG_ATTN_F_TQ_TK | TG_ATTN_F_GQA, TG_ATTN_C_CAUSAL_ONLY, "mask", "declare causal_only", 0},
    {"own scale", own_scale, TG_ATTN_F_DV, TG_ATTN_C_SCALE_RSQRT_D | TG_ATTN_C_NO_HEAD_SCALE, "temperature",
     "declare scale_rsqrt_d", 0},
    {"no head scale", no_head_scale, 0, TG_ATTN_C_NO_HEAD_SCALE, "temperature", "declare no_head_scale", 0},
    {"left window", left_window, TG_ATTN_F_WINDOW, TG_ATTN_C_WINDOW_CAUSAL, "window", "declare window_causal", 0},
    {"BLOOM ramp", bloom_ramp, TG_ATTN_F_ALIBI, TG_ATTN_C_ALIBI_CAUSAL, "alibi", "one-sided ramp", 0},
    {"needs sinks", needs_sinks, TG_ATTN_F_SINKS, TG_ATTN_C_SINKS_ALWAYS, "forward", "no sinks given", 0},
    {"finfo mask", finfo_mask, TG_ATTN_F_PADDING, TG_ATTN_C_EMPTY_MEAN, "padding", "declare empty_mean", 0},
    {"finfo mask, causal only", finfo_mask, TG_ATTN_F_PADDING, TG_ATTN_C_EMPTY_MEAN | TG_ATTN_C_CAUSAL_ONLY, "padding",
     "declare empty_mean", 0},
    /* its own scale without dv != d, with dropout and windows: the V = identity calls (dv = 64 > d = 8) pad q
     * and k, and must keep the call's scale (issue 55: the gate read 1/√dv) */
    {"own scale, no dv", own_scale, TG_ATTN_F_DROPOUT | TG_ATTN_F_WINDOW, TG_ATTN_C_SCALE_RSQRT_D | TG_ATTN_C_NO_HEAD_SCALE,
     "temperature", "declare scale_rsqrt_d", 0},
    {"one kv head", one_kv_head, TG_ATTN_F_GQA, TG_ATTN_C_MQA_ONLY, "gqa", "one key/value head only", 0},
    {"prefix mask", prefix_mask, TG_ATTN_F_PADDING, TG_ATTN_C_EMPTY_PREFIX | TG_ATTN_C_CAUSAL_ONLY, "padding",
     "declare empty_prefix", TG_ATTN_C_CAUSAL_ONLY},
    {"folded scale", folded, 0, TG_ATTN_C_SCALE_FOLDED | TG_ATTN_C_NO_HEAD_SCALE, "temperature", "the seed's bug", 0},
};

static void print_failures(const char *name, const tg_attn_check_report *r) {
    for (int i = 0; i < r->n; i++)
        if (r->lines[i].status == TG_ATTN_CHECK_FAIL || r->lines[i].status == TG_ATTN_CHECK_CRASH)
            print_error("  %s: FAIL %s %s: %s\n", name, r->lines[i].check, r->lines[i].what, r->lines[i].text);
}

static void test_declared_passes(void **s) {
    (void)s;
    int bad = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const tg_attn_kernel K = {sizeof K, TG_ATTENTION_PLUGIN_ABI, cases[c].features, cases[c].name, cases[c].fn, NULL, NULL,
                                  NULL, cases[c].conventions, 0};
        tg_attn_check_report r = {0};
        const int rc = tg_attn_check(&K, &(tg_attn_check_opts){.d_head = 8}, &r);
        int infos = 0;
        for (int i = 0; i < r.n; i++) infos += !strcmp(r.lines[i].check, "convention") && r.lines[i].status == TG_ATTN_CHECK_INFO;
        const int want = __builtin_popcount(cases[c].conventions);
        if (rc || infos != want) {
            print_error("%s declaring its conventions: rc %d, %d convention lines (want %d)\n", cases[c].name, rc, infos, want);
            print_failures(cases[c].name, &r);
            bad++;
        }
        tg_attn_check_free(&r);
    }
    assert_int_equal(bad, 0);
}

static void test_undeclared_named(void **s) {
    (void)s;
    int bad = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const tg_attn_kernel K = {sizeof K, TG_ATTENTION_PLUGIN_ABI, cases[c].features, cases[c].name, cases[c].fn, NULL, NULL,
                                  NULL, cases[c].kept, 0};
        tg_attn_check_report r = {0};
        const int rc = tg_attn_check(&K, &(tg_attn_check_opts){.d_head = 8}, &r);
        int named = 0;
        for (int i = 0; i < r.n; i++)
            named |= r.lines[i].status == TG_ATTN_CHECK_FAIL && !strcmp(r.lines[i].check, cases[c].check) &&
                     strstr(r.lines[i].text, cases[c].undeclared);
        if (!rc || !named) {
            print_error("%s undeclared: rc %d, no failed %s line saying \"%s\"\n", cases[c].name, rc, cases[c].check,
                        cases[c].undeclared);
            print_failures(cases[c].name, &r);
            bad++;
        }
        tg_attn_check_free(&r);
    }
    assert_int_equal(bad, 0);
}

/* The gate: a call outside a declared convention is refused with the convention's token; a
 * sinks_always kernel gets sinks of −inf, so its answer is the plain softmax's. */
static void test_gate(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    ctx.grad_enabled = 0;
    tg_rng rng;
    tg_rng_seed(&rng, 38, 2);
    tg_tensor *q = tg_new(&ctx, 4, (int[]){2, 5, 2, 4}), *k = tg_new(&ctx, 4, (int[]){2, 5, 2, 4});
    tg_fill_normal(&rng, q->data, q->numel, 0, 1);
    tg_fill_normal(&rng, k->data, k->numel, 0, 1);
    const struct { tg_attend_fn fn; unsigned f, c; const char *token; } refuse[] = {
        {causal_kernel, 0, TG_ATTN_C_CAUSAL_ONLY, "causal_only"},
        {own_scale, 0, TG_ATTN_C_SCALE_RSQRT_D, "scale_rsqrt_d"},
        {left_window, TG_ATTN_F_WINDOW, TG_ATTN_C_WINDOW_CAUSAL, "window_causal"},
        {bloom_ramp, TG_ATTN_F_ALIBI, TG_ATTN_C_ALIBI_CAUSAL, "alibi_causal"},
        {finfo_mask, TG_ATTN_F_PADDING, TG_ATTN_C_EMPTY_MEAN | TG_ATTN_C_CAUSAL_ONLY, "empty_mean"},
        {one_kv_head, TG_ATTN_F_GQA, TG_ATTN_C_MQA_ONLY, "mqa_only"},
        {folded, 0, TG_ATTN_C_SCALE_FOLDED, "scale_folded"},
        {prefix_mask, TG_ATTN_F_PADDING, TG_ATTN_C_EMPTY_PREFIX | TG_ATTN_C_CAUSAL_ONLY, "empty_prefix"}};
    const float slopes[2] = {0.5f, 0.25f};
    tg_tensor *alibi = tg_new(&ctx, 1, (int[]){2});
    memcpy(alibi->data, slopes, sizeof slopes);
    int kv_len[2] = {5, 0};
    for (size_t i = 0; i < sizeof refuse / sizeof refuse[0]; i++) {
        const tg_attn_kernel K = {sizeof K, TG_ATTENTION_PLUGIN_ABI, refuse[i].f, "k", refuse[i].fn, NULL, NULL, NULL,
                                  refuse[i].c, 0};
        tg_attn_args a = tg_attn_args_make(q, k, k, 0.3f);   /* not 1/√4: refused by scale_rsqrt_d */
        if (refuse[i].f & TG_ATTN_F_WINDOW) a.window_left = 1, a.window_right = 1;
        if (refuse[i].f & TG_ATTN_F_ALIBI) a.alibi = alibi;
        if (refuse[i].f & TG_ATTN_F_PADDING) a.causal = 1, a.kv_len = kv_len;
        char why[300];
        tg_tensor *out = tg_attn_call_caught(&ctx, &K, &a, 0, why, sizeof why);
        assert_null(out);
        if (!strstr(why, refuse[i].token)) print_error("refusal without %s: %s\n", refuse[i].token, why);
        assert_non_null(strstr(why, refuse[i].token));
    }
    /* inside the conventions: taken */
    const tg_attn_kernel C = {sizeof C, TG_ATTENTION_PLUGIN_ABI, 0, "c", causal_kernel, NULL, NULL, NULL, TG_ATTN_C_CAUSAL_ONLY, 0};
    tg_attn_args a = tg_attn_args_make(q, k, k, 0.3f);
    a.causal = 1;
    char why[300];
    assert_non_null(tg_attn_call_caught(&ctx, &C, &a, 0, why, sizeof why));
    /* sinks_always without sinks: −inf sinks, the plain softmax to the last bit */
    const tg_attn_kernel S = {sizeof S, TG_ATTENTION_PLUGIN_ABI, TG_ATTN_F_SINKS, "s", needs_sinks, NULL, NULL, NULL,
                              TG_ATTN_C_SINKS_ALWAYS, 0};
    tg_tensor *got = tg_attn_call_caught(&ctx, &S, &a, 0, why, sizeof why), *want = tg_attend(&ctx, &a);
    assert_non_null(got);
    assert_memory_equal(got->data, want->data, sizeof(float) * (size_t)want->numel);
    /* an older descriptor (0.16's size) has no conventions: read as none */
    tg_attn_kernel old = C;
    old.size = offsetof(tg_attn_kernel, conventions);
    assert_int_equal(tg_attn_kernel_conventions(&old), 0);
    a.causal = 0;
    assert_non_null(tg_attn_call_caught(&ctx, &old, &a, 0, why, sizeof why));
    tg_ctx_free(&ctx);
}

static void test_tokens_and_validity(void **s) {
    (void)s;
    char bad[48], msg[200];
    assert_int_equal(tg_attn_conventions_of_tokens("causal_only,empty_mean", bad, sizeof bad),
                     TG_ATTN_C_CAUSAL_ONLY | TG_ATTN_C_EMPTY_MEAN);
    assert_string_equal(bad, "");
    tg_attn_conventions_of_tokens("causal_only,causual", bad, sizeof bad);
    assert_string_equal(bad, "causual");
    assert_int_equal(tg_attn_conventions_valid(TG_ATTN_F_SINKS, TG_ATTN_C_SINKS_ALWAYS, msg, sizeof msg), 0);
    assert_int_equal(tg_attn_conventions_valid(0, TG_ATTN_C_SINKS_ALWAYS, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "sinks"));
    assert_int_equal(tg_attn_conventions_valid(TG_ATTN_F_PADDING, TG_ATTN_C_EMPTY_MEAN | TG_ATTN_C_EMPTY_NAN, msg, sizeof msg),
                     -1);
    assert_int_equal(tg_attn_conventions_valid(0, 1u << TG_ATTN_N_CONVENTIONS, msg, sizeof msg), -1);
    /* 0.21's: mqa_only needs grouped heads; one empty row, one scale of its own */
    assert_int_equal(tg_attn_conventions_valid(0, TG_ATTN_C_MQA_ONLY, msg, sizeof msg), -1);
    assert_int_equal(tg_attn_conventions_valid(TG_ATTN_F_GQA, TG_ATTN_C_MQA_ONLY, msg, sizeof msg), 0);
    assert_int_equal(tg_attn_conventions_valid(0, TG_ATTN_C_EMPTY_PREFIX | TG_ATTN_C_EMPTY_MEAN, msg, sizeof msg), -1);
    assert_int_equal(tg_attn_conventions_valid(0, TG_ATTN_C_SCALE_FOLDED | TG_ATTN_C_SCALE_RSQRT_D, msg, sizeof msg), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens_and_validity),
        cmocka_unit_test(test_gate),
        cmocka_unit_test(test_declared_passes),
        cmocka_unit_test(test_undeclared_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
