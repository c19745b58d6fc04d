#define _POSIX_C_SOURCE 200809L   /* mkdtemp */
/* The training kit's view of a kernel it did not write (tg_attn_probe.h): the
 * weights, entropy, saturation, max logit and multiplier measured from the
 * outside must be the built-in ops' own stats, for both ops, causal or not,
 * with and without a per-head scale, at a cool and a saturated temperature; a
 * kernel that refuses V = identity is reported, not crashed on. And SHA-256
 * against FIPS 180-4's vectors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"
#include "tg_attn_plugin.h"
#include "tg_attn_probe.h"
#include "tg_sha256.h"

enum { B = 2, T = 9, H = 3, D = 6 };

static tg_attn_kernel textbook(tg_attention_fn fn) {   /* an ABI 1 kernel, as the plugin loader makes one */
    return (tg_attn_kernel){sizeof(tg_attn_kernel), 1, TG_ATTN_F_DV, "test", NULL, fn, NULL, NULL, 0, 0};
}

static void compare(tg_attention_fn fn, int causal, int with_hs, float std, float scale) {
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_params P;
    tg_params_init(&P);
    tg_tensor *q = tg_param(&P, "q", 4, (int[]){B, T, H, D}), *k = tg_param(&P, "k", 4, (int[]){B, T, H, D});
    tg_tensor *v = tg_param(&P, "v", 4, (int[]){B, T, H, D + 1}), *hs = tg_param(&P, "hs", 1, (int[]){H});
    tg_params_alloc(&P);
    tg_test_fill(&P, 5 + (uint64_t)causal, std);
    for (int h = 0; h < H; h++) hs->data[h] = 0.6f + 0.5f * (float)h;
    float ent[H], mx[H], sat[H], ment[H], mmx[H], msat[H], mult[H];
    tg_attn_stats own = {H, ent, mx, sat}, meas = {H, ment, mmx, msat};
    tg_tensor *a = tg_attention(&ctx, q, k, v, with_hs ? hs : NULL, scale, causal, &own);
    const float *Pref = tg_attention_probs(&ctx, a);
    assert_non_null(Pref);
    if (fn != tg_attention) fn(&ctx, q, k, v, with_hs ? hs : NULL, scale, causal, &own);
    static float probs[B * H * T * T];
    char err[256] = "";
    tg_attn_kernel K = textbook(fn);
    tg_attn_args args = tg_attn_args_make(q, k, v, scale);
    args.head_scale = with_hs ? hs : NULL, args.causal = causal;
    int rc = tg_attn_measure(&ctx, &K, &args, &meas, mult, probs, err, sizeof err);
    if (rc) fail_msg("measure: %s", err);
    for (int i = 0; i < B * H * T * T; i++) assert_true(fabsf(probs[i] - Pref[i]) <= 1e-6f);
    for (int h = 0; h < H; h++) {
        float want = scale * (with_hs ? hs->data[h] : 1.0f);
        if (fabsf(mult[h] - want) > 1e-3f * want) fail_msg("head %d: multiplier %g, want %g", h, mult[h], want);
        if (fabsf(ment[h] - ent[h]) > 1e-4f) fail_msg("head %d: entropy %g, own %g", h, ment[h], ent[h]);
        if (fabsf(mmx[h] - mx[h]) > 1e-3f * (1 + fabsf(mx[h]))) fail_msg("head %d: max logit %g, own %g", h, mmx[h], mx[h]);
        assert_float_equal(msat[h], sat[h], 1e-6);
    }
    tg_params_free(&P);
    tg_ctx_free(&ctx);
}

static void test_measure_composed(void **s) {
    (void)s;
    for (int causal = 0; causal <= 1; causal++)
        for (int hs = 0; hs <= 1; hs++) {
            compare(tg_attention, causal, hs, 1.0f, 1.0f / sqrtf(D));
            compare(tg_attention, causal, hs, 3.0f, 1.0f);   /* saturated rows: the forgotten scale */
        }
}

static void test_measure_fused(void **s) {
    (void)s;
    for (int causal = 0; causal <= 1; causal++) compare(tg_flash_attention, causal, 1, 2.0f, 1.0f / sqrtf(D));
}

static tg_tensor *refuses(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *hs, float scale, int causal,
                          tg_attn_stats *st) {
    if (v->shape[3] != q->shape[3]) tg_fail(ctx, "refuses: dv must be d");
    return tg_attention(ctx, q, k, v, hs, scale, causal, st);
}

static tg_tensor *not_weights(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *hs, float scale,
                              int causal, tg_attn_stats *st) {
    tg_tensor *o = tg_attention(ctx, q, k, v, hs, scale, causal, st);
    return tg_scale(ctx, o, 2.0f);   /* rows sum to 2 */
}

static tg_tensor *no_mask(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *hs, float scale,
                          int causal, tg_attn_stats *st) {
    (void)causal;
    return tg_attention(ctx, q, k, v, hs, scale, 0, st);
}

static void test_measure_refusals(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_rng r;
    tg_rng_seed(&r, 1, 2);
    tg_tensor *q = tg_new(&ctx, 4, (int[]){B, T, H, D}), *k = tg_new(&ctx, 4, (int[]){B, T, H, D});
    tg_fill_normal(&r, q->data, q->numel, 0, 1);
    tg_fill_normal(&r, k->data, k->numel, 0, 1);
    float e[H] = {7, 7, 7};
    tg_attn_stats st = {H, e, NULL, NULL};
    char err[512];
    tg_attn_kernel Kr = textbook(refuses), Kn = textbook(not_weights), Kc = textbook(no_mask);
    tg_attn_args a = tg_attn_args_make(q, k, k, 0.5f);
    a.causal = 1;
    assert_int_equal(tg_attn_measure(&ctx, &Kr, &a, &st, NULL, NULL, err, sizeof err), TG_MEASURE_FAILED);
    assert_non_null(strstr(err, "the call with V = identity (dv = 9) failed: refuses: dv must be d"));
    assert_int_equal(tg_attn_measure(&ctx, &Kn, &a, &st, NULL, NULL, err, sizeof err), TG_MEASURE_FAILED);
    assert_non_null(strstr(err, "sums to 2"));
    assert_int_equal(tg_attn_measure(&ctx, &Kc, &a, &st, NULL, NULL, err, sizeof err), TG_MEASURE_LEAK);
    assert_non_null(strstr(err, "not causal weights"));
    assert_true(e[0] == 7);   /* untouched on failure */
    assert_true(ctx.grad_enabled == 1);
    /* the gate: a call with a feature the kernel does not declare is refused, naming both */
    tg_attn_args g = a;
    g.window_left = 2;
    tg_tensor *out = tg_attn_call_caught(&ctx, &Kr, &g, 0, err, sizeof err);
    assert_null(out);
    assert_non_null(strstr(err, "the call uses window, which the kernel does not declare (it declares: dv != d)"));
    tg_ctx_free(&ctx);
}

/* Every feature: the weights and stats measured from the outside are the op's own, and the fitted
 * multiplier is scale · head_scale with the bias and ALiBi taken out. */
static void test_measure_features(void **s) {
    (void)s;
    enum { Hq = 4, Hk = 2, Tq = 5, Tk = 9, d = 6 };
    for (int feat = 0; feat < 5; feat++) {
        tg_ctx ctx;
        tg_ctx_init(&ctx, 0);
        ctx.grad_enabled = 0;
        tg_rng r;
        tg_rng_seed(&r, 3, (uint64_t)feat);
        tg_tensor *q = tg_new(&ctx, 4, (int[]){2, Tq, Hq, d}), *k = tg_new(&ctx, 4, (int[]){2, Tk, Hk, d});
        tg_fill_normal(&r, q->data, q->numel, 0, 1);
        tg_fill_normal(&r, k->data, k->numel, 0, 1);
        tg_tensor *bias = tg_new(&ctx, 4, (int[]){1, Hq, Tq, Tk}), *alibi = tg_new(&ctx, 1, (int[]){Hq});
        tg_fill_normal(&r, bias->data, bias->numel, 0, 1);
        for (int h = 0; h < Hq; h++) alibi->data[h] = 0.1f * (float)(h + 1);
        int kv_len[2] = {7, 4};
        tg_attn_args a = tg_attn_args_make(q, k, k, 0.4f);
        a.causal = 1;
        if (feat == 1) a.window_left = 2;
        if (feat == 2) a.bias = bias;
        if (feat == 3) a.alibi = alibi;
        if (feat == 4) a.kv_len = kv_len, a.causal = 0;
        float ent[Hq], mx[Hq], sat[Hq], ment[Hq], mmx[Hq], msat[Hq], mult[Hq];
        tg_attn_stats own = {Hq, ent, mx, sat}, meas = {Hq, ment, mmx, msat};
        a.stats = &own;
        tg_attend(&ctx, &a);
        a.stats = NULL;
        char err[300];
        int rc = tg_attn_measure(&ctx, &tg_attn_kernel_fused, &a, &meas, mult, NULL, err, sizeof err);
        if (rc) fail_msg("feature case %d: %s", feat, err);
        for (int h = 0; h < Hq; h++) {
            if (fabsf(mult[h] - 0.4f) > 1e-3f) fail_msg("case %d head %d: multiplier %g, want 0.4", feat, h, mult[h]);
            if (fabsf(ment[h] - ent[h]) > 1e-4f) fail_msg("case %d head %d: entropy %g, own %g", feat, h, ment[h], ent[h]);
            assert_float_equal(msat[h], sat[h], 1e-6);
        }
        tg_ctx_free(&ctx);
    }
}

static int copy_file(const char *from, const char *to) {   /* in place: the same inode, truncated and rewritten */
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    int ok = a && b;
    char buf[4096];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, n, b) == n;
    if (a) fclose(a);
    if (b && fclose(b)) ok = 0;
    return ok ? 0 : -1;
}

/* The bytes a plugin runs are the bytes its SHA-256 names: loading copies the file once, so
 * a file rewritten in place after loading (a rebuild) changes neither the code nor the hash. */
static void test_plugin_bytes(void **s) {
    (void)s;
    const char *ok = getenv("TG_TEST_PLUGIN_OK"), *noscale = getenv("TG_TEST_PLUGIN_NOSCALE");
    if (!ok || !noscale) {
        printf("test_plugin_bytes: skipped (TG_TEST_PLUGIN_OK and TG_TEST_PLUGIN_NOSCALE not set: run it through ctest)\n");
        skip();
    }
    char dir[] = "/tmp/tg_plugin_XXXXXX", path[64], want[65], err[600];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/k.so", dir);
    assert_int_equal(copy_file(ok, path), 0);
    assert_int_equal(tg_sha256_file(path, want, err, sizeof err), 0);
    tg_attn_plugin p;
    if (tg_attn_plugin_open(&p, path, err, sizeof err)) fail_msg("open: %s", err);
    assert_string_equal(p.sha256, want);
    assert_int_equal(p.abi, 2);
    assert_int_equal(copy_file(noscale, path), 0);   /* the rebuild: another kernel in the same file */
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    ctx.grad_enabled = 0;
    tg_rng r;
    tg_rng_seed(&r, 4, 4);
    tg_tensor *q = tg_new(&ctx, 4, (int[]){1, 6, 2, 8}), *k = tg_new(&ctx, 4, (int[]){1, 6, 2, 8});
    tg_fill_normal(&r, q->data, q->numel, 0, 1);
    tg_fill_normal(&r, k->data, k->numel, 0, 1);
    tg_attn_args a = tg_attn_args_make(q, k, k, 0.25f);
    a.causal = 1;
    tg_tensor *mine = tg_attn_kernel_call(&ctx, &p.kernel, &a), *ref = tg_attend(&ctx, &a);
    for (int64_t i = 0; i < ref->numel; i++)
        if (fabsf(mine->data[i] - ref->data[i]) > 1e-5f)
            fail_msg("after the file was rewritten the loaded kernel changed: %g vs %g at %lld", mine->data[i],
                     ref->data[i], (long long)i);
    tg_ctx_free(&ctx);
    tg_attn_plugin_close(&p);
    unlink(path);
    rmdir(dir);
}

static void test_sha256(void **s) {
    (void)s;
    static const struct { const char *in; const char *hex; } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        tg_sha256 h;
        unsigned char d[32];
        char hex[65];
        tg_sha256_init(&h);
        for (const char *p = v[i].in; *p; p++) tg_sha256_update(&h, p, 1);   /* byte by byte: the buffering */
        tg_sha256_final(&h, d);
        tg_sha256_hex(d, hex);
        assert_string_equal(hex, v[i].hex);
    }
    tg_sha256 h;   /* a million 'a's, in uneven pieces */
    tg_sha256_init(&h);
    char a[1000];
    memset(a, 'a', sizeof a);
    for (size_t done = 0, n = 1; done < 1000000; done += n, n = n % 997 + 1) {
        if (done + n > 1000000) n = 1000000 - done;
        tg_sha256_update(&h, a, n);
    }
    unsigned char d[32];
    char hex[65];
    tg_sha256_final(&h, d);
    tg_sha256_hex(d, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_measure_composed),
        cmocka_unit_test(test_measure_fused),
        cmocka_unit_test(test_measure_refusals),
        cmocka_unit_test(test_measure_features),
        cmocka_unit_test(test_plugin_bytes),
        cmocka_unit_test(test_sha256),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
