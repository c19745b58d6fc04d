/* Core: tensors, arena, tape bookkeeping, params, RNG. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tg_core.h"
#include "gradcheck.h"
#include "safetensors.h"
#include "tg_precision.h"
#include "testutil.h"

static void test_shape_helpers(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *t = tg_new(&ctx, 3, (int[]){2, 3, 4});
    assert_int_equal(t->numel, 24);
    assert_string_equal(TG_SHAPE(t), "[2,3,4]");
    tg_tensor *v = tg_view(&ctx, t, 2, (int[]){6, 4});
    assert_ptr_equal(v->data, t->data);
    assert_true(!tg_same_shape(t, v));
    tg_tensor *row = tg_new(&ctx, 1, (int[]){4}), *mat = tg_new(&ctx, 2, (int[]){3, 4});
    tg_tensor *other = tg_new(&ctx, 2, (int[]){2, 4});
    assert_true(tg_is_trailing_shape(t, row));
    assert_true(tg_is_trailing_shape(t, mat));
    assert_true(tg_is_trailing_shape(t, t));
    assert_false(tg_is_trailing_shape(t, other));
    assert_false(tg_is_trailing_shape(row, mat));   /* b longer than a */
    tg_ctx_free(&ctx);
}

static void test_bad_tensors_error(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_test_catch c;
    tg_test_catch_errors(&ctx, &c);
    EXPECT_TG_ERROR(&c, tg_new(&ctx, 5, (int[]){1, 1, 1, 1, 1}), "1 to 4 dimensions");
    EXPECT_TG_ERROR(&c, tg_new(&ctx, 2, (int[]){3, 0}), "dimension 1 is 0");
    tg_tensor *t = tg_new(&ctx, 2, (int[]){2, 3});
    EXPECT_TG_ERROR(&c, tg_view(&ctx, t, 2, (int[]){4, 2}), "tg_view: [2,3] has 6 elements, the view [4,2] has 8");
    /* 2^124 elements: the count wraps an int64 four times over; refused, not allocated at some wrapped size */
    EXPECT_TG_ERROR(&c, tg_new(&ctx, 4, (int[]){2147483647, 2147483647, 2147483647, 2147483647}),
                    "tg_new: shape [2147483647,2147483647,2147483647,2147483647] has more elements than memory can index");
    assert_int_equal(tg_numel_of(2, (int[]){2147483647, 2147483647}), (int64_t)2147483647 * 2147483647);
    assert_int_equal(tg_numel_of(3, (int[]){2147483647, 2147483647, 2147483647}), -1);
    tg_params P;
    tg_params_init(&P);
    tg_test_catch pc;
    memset(&pc, 0, sizeof pc);
    P.err = (tg_errh){tg_test_catch_handler, &pc};
    pc.fired = 0;
    if (setjmp(pc.jb) == 0) tg_param(&P, "huge", 3, (int[]){2147483647, 2147483647, 2147483647});
    assert_true(pc.fired);
    assert_non_null(strstr(pc.msg, "tg_param huge: shape [2147483647,2147483647,2147483647] has more elements"));
    assert_int_equal(P.n, 0);
    tg_params_free(&P);
    tg_ctx_free(&ctx);
}

/* The arena reuses its blocks after a reset: same sizes, no new malloc. */
static void test_arena_reuse(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 4096);
    for (int step = 0; step < 3; step++) {
        tg_ctx_reset(&ctx);
        size_t before = ctx.heap_allocs;
        for (int i = 0; i < 50; i++) {
            float *p = tg_arena_alloc(&ctx, 1000 + 37 * (size_t)i);
            assert_int_equal((uintptr_t)p % 64, 0);
            memset(p, 1, 1000);
        }
        (void)tg_arena_alloc(&ctx, 100000);   /* bigger than a block */
        if (step > 0) assert_int_equal(ctx.heap_allocs, before);
        else assert_true(ctx.heap_allocs > before);
    }
    tg_ctx_free(&ctx);
}

static void test_params_flat(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    char name[16];
    snprintf(name, sizeof name, "w");
    tg_tensor *w = tg_param(&P, name, 2, (int[]){3, 4});
    snprintf(name, sizeof name, "b");   /* names are copied */
    tg_tensor *b = tg_param(&P, name, 1, (int[]){4});
    tg_params_alloc(&P);
    assert_int_equal(P.numel, 16);
    assert_ptr_equal(w->data, P.data);
    assert_ptr_equal(b->data, P.data + 12);
    assert_ptr_equal(b->grad, P.grad + 12);
    assert_string_equal(w->name, "w");
    assert_ptr_equal(tg_params_find(&P, "b"), b);
    assert_null(tg_params_find(&P, "nope"));
    tg_params_free(&P);
}

/* PCG32 reference stream: seed 42, stream 54 is the example of the PCG paper's
 * pcg32-demo; these are its first outputs. */
/* ---- backward: activation grads start at zero every pass, lazily ---------- */
/* Two toy ops: y = 2x, adding into dx (the default: the tape zeroes dx first),
 * and z = 3x, which writes dx whole when nothing wrote it yet (own_grads). */
static void double_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *x = n->in[0];
    for (int64_t i = 0; i < x->numel; i++) x->grad[i] += 2 * n->out->grad[i];
}
static tg_tensor *op_double(tg_ctx *ctx, tg_tensor *x) {
    tg_tensor *y = tg_new_like(ctx, x);
    for (int64_t i = 0; i < x->numel; i++) y->data[i] = 2 * x->data[i];
    tg_record(ctx, "double", double_backward, y, 1, (tg_tensor *[]){x}, 0);
    return y;
}
static void triple_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *x = n->in[0];
    if (!x->grad) return;
    int first = tg_grad_first(x);
    for (int64_t i = 0; i < x->numel; i++) x->grad[i] = (first ? 0 : x->grad[i]) + 3 * n->out->grad[i];
}
static tg_tensor *op_triple(tg_ctx *ctx, tg_tensor *x) {
    tg_tensor *y = tg_new_like(ctx, x);
    for (int64_t i = 0; i < x->numel; i++) y->data[i] = 3 * x->data[i];
    tg_node *n = tg_record(ctx, "triple", triple_backward, y, 1, (tg_tensor *[]){x}, 0);
    if (n) n->own_grads = 1;
    return y;
}
/* out = a + b elementwise, adding into both (default) */
static void sum2_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    for (int j = 0; j < 2; j++)
        for (int64_t i = 0; i < n->out->numel; i++) n->in[j]->grad[i] += n->out->grad[i];
}
static tg_tensor *op_sum2(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) {
    tg_tensor *y = tg_new_like(ctx, a);
    for (int64_t i = 0; i < a->numel; i++) y->data[i] = a->data[i] + b->data[i];
    tg_record(ctx, "sum2", sum2_backward, y, 2, (tg_tensor *[]){a, b}, 0);
    return y;
}

static void test_backward_lazy_zeroing(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *w = tg_param(&P, "w", 1, (int[]){3});
    tg_params_alloc(&P);
    for (int i = 0; i < 3; i++) w->data[i] = (float)(i + 1);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    /* h = 2w; out = 3h + 2h + 2(3h) (h used three times, by both kinds of op);
     * dead = 3h is never used: its grad is nobody's, and reads as 0 */
    tg_tensor *h = op_double(&ctx, w);
    tg_tensor *t = op_triple(&ctx, h);
    tg_tensor *out = op_sum2(&ctx, op_sum2(&ctx, t, op_double(&ctx, h)), op_double(&ctx, op_triple(&ctx, h)));
    tg_tensor *dead = op_triple(&ctx, h);
    (void)dead;
    const float seed[3] = {1, 10, 100};
    float first[3], first_t[3];
    for (int pass = 0; pass < 2; pass++) {
        /* garbage where the grads live: nothing may read it as a value */
        for (int i = 0; i < ctx.n_nodes; i++)
            if (ctx.nodes[i].out->grad) memset(ctx.nodes[i].out->grad, 0x7f, (size_t)ctx.nodes[i].out->numel * 4);
        tg_backward_seed(&ctx, out, seed);
        for (int i = 0; i < 3; i++) {
            /* d out / d h = 3 + 2 + 6 = 11; d out / d t = 1 */
            assert_float_equal(h->grad[i], 11 * seed[i], 0);
            assert_float_equal(t->grad[i], seed[i], 0);
            /* param grads accumulate over the passes: d out / d w = 22 */
            assert_float_equal(w->grad[i], 22 * seed[i] * (pass + 1), 0);
        }
        if (pass == 0) {
            memcpy(first, h->grad, sizeof first);
            memcpy(first_t, t->grad, sizeof first_t);
        } else {   /* the same activation grads again */
            assert_memory_equal(first, h->grad, sizeof first);
            assert_memory_equal(first_t, t->grad, sizeof first_t);
        }
    }
    tg_ctx_free(&ctx);
    tg_params_free(&P);
}

/* An own_grads op that forgets tg_grad_first/tg_grad_acc: it adds into its
 * input's grad as if the tape had zeroed it. Inside a graph its contribution
 * is lost (the tape or the next op takes the grad as unwritten and zeroes or
 * overwrites it): the gradient check fails in every build, used once or twice.
 * On a leaf activation (a gradient with respect to an input, read after
 * backward) nothing overwrites it: it adds into whatever the memory held (the
 * last pass's grad, on a reused tape). A build that poisons unreadied grads
 * (tg_grads_poisoned(): Debug, the sanitizer job) makes that NaN. */
static void forgetful_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *x = n->in[0];
    if (x->grad)   /* missing: tg_grad_first(x) or tg_grad_acc(x) */
        for (int64_t i = 0; i < x->numel; i++) x->grad[i] += 3 * n->out->grad[i];
}
static tg_tensor *op_forgetful(tg_ctx *ctx, tg_tensor *x) {
    tg_tensor *y = tg_new_like(ctx, x);
    for (int64_t i = 0; i < x->numel; i++) y->data[i] = 3 * x->data[i];
    tg_node *n = tg_record(ctx, "forgetful", forgetful_backward, y, 1, (tg_tensor *[]){x}, 0);
    if (n) n->own_grads = 1;
    return y;
}
/* h = double(w) used once, by the forgetful op */
static tg_tensor *f_forgetful_once(tg_ctx *ctx, void *u) { return op_forgetful(ctx, op_double(ctx, u)); }
/* h used twice, the forgetful op recorded last, so its backward reaches h's grad
 * first: triple then takes the grad as unwritten and overwrites what it added */
static tg_tensor *f_forgetful_twice(tg_ctx *ctx, void *u) {
    tg_tensor *h = op_double(ctx, u);
    tg_tensor *a = op_triple(ctx, h);
    tg_tensor *b = op_forgetful(ctx, h);
    return op_sum2(ctx, a, b);
}
static tg_tensor *f_triple_twice(tg_ctx *ctx, void *u) {   /* the right op, its input used twice */
    tg_tensor *h = op_double(ctx, u);
    tg_tensor *a = op_triple(ctx, h);
    tg_tensor *b = op_triple(ctx, h);
    return op_sum2(ctx, a, b);
}

static void test_forgotten_grad_rule(void **s) {
    (void)s;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *w = tg_param(&P, "w", 2, (int[]){3, 4});
    tg_params_alloc(&P);
    tg_test_fill(&P, 3, 1.0f);
    assert_int_equal(tg_gradcheck("triple twice", &P, f_triple_twice, w, NULL), 0);
    assert_true(tg_gradcheck("forgetful op twice (expected to fail)", &P, f_forgetful_twice, w, NULL) > 0);
    assert_true(tg_gradcheck("forgetful op once (expected to fail)", &P, f_forgetful_once, w, NULL) > 0);
    tg_params_free(&P);

    /* a leaf activation's grad, two passes on one tape */
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *x = tg_zeros(&ctx, 1, (int[]){4});
    x->requires_grad = 1;
    tg_tensor *y = op_forgetful(&ctx, x);
    const float g[4] = {1, 1, 1, 1};
    tg_backward_seed(&ctx, y, g);
    tg_backward_seed(&ctx, y, g);
    if (tg_grads_poisoned()) assert_true(isnan(x->grad[0]));
    else print_message("this build does not poison grads (Release): after two passes the forgetful op's input grad "
                       "reads %g where 3 is right (Debug and sanitizer builds: NaN)\n", x->grad[0]);
    tg_ctx_free(&ctx);
}

static void test_rng_reference(void **s) {
    (void)s;
    tg_rng r;
    tg_rng_seed(&r, 42, 54);
    const uint32_t want[] = {0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e};
    for (int i = 0; i < 6; i++) assert_int_equal(tg_rng_u32(&r), want[i]);
}

static void test_rng_normal_moments(void **s) {
    (void)s;
    tg_rng r;
    tg_rng_seed(&r, 1, 1);
    double m = 0, v = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = tg_rng_normal(&r);
        m += x;
        v += x * x;
    }
    m /= n;
    v = v / n - m * m;
    assert_true(m > -0.01 && m < 0.01);
    assert_true(v > 0.98 && v < 1.02);
    for (int i = 0; i < 1000; i++) {
        uint32_t k = tg_rng_below(&r, 7);
        assert_true(k < 7);
        float u = tg_rng_uniform(&r);
        assert_true(u >= 0.0f && u < 1.0f);
    }
}

/* bf16 and fp16 (0.21): every value of each round-trips; known roundings; within u of any float */
static void test_precision_rounding(void **s) {
    (void)s;
    for (uint32_t h = 0; h < 0x10000; h++) {
        const float f = tg_f32_of_f16((uint16_t)h), b = tg_f32_of_bf16((uint16_t)h);
        if (!isnan(f)) assert_int_equal(tg_f16_of(f), h);
        if (!isnan(b)) assert_int_equal(tg_bf16_of(b), h);
        if (isnan(f)) assert_true(isnan(tg_f32_of_f16(tg_f16_of(f))));
    }
    assert_int_equal(tg_bf16_of(1.0f), 0x3f80);
    assert_int_equal(tg_bf16_of(1.0f + 0x1p-8f), 0x3f80);         /* a tie: to even */
    assert_int_equal(tg_bf16_of(1.0f + 3 * 0x1p-8f), 0x3f82);     /* a tie: to even, up */
    assert_int_equal(tg_bf16_of(3.4e38f), 0x7f80);                /* past bf16's largest: inf */
    assert_int_equal(tg_f16_of(65504.0f), 0x7bff);
    assert_int_equal(tg_f16_of(65519.0f), 0x7bff);
    assert_int_equal(tg_f16_of(65520.0f), 0x7c00);
    assert_int_equal(tg_f16_of(0x1p-24f), 0x0001);
    assert_int_equal(tg_f16_of(0x1p-25f), 0x0000);                /* a tie at the smallest subnormal: to 0 */
    assert_int_equal(tg_f16_of(3 * 0x1p-25f), 0x0002);
    assert_int_equal(tg_f16_of(1.0f / 3), 0x3555);
    assert_int_equal(tg_f16_of(-0.0f), 0x8000);
    assert_true(isnan(tg_round_to(TG_BF16, NAN)) && isnan(tg_round_to(TG_FP16, NAN)));
    tg_rng r;
    tg_rng_seed(&r, 9, 9);
    for (int i = 0; i < 100000; i++) {
        /* |x| in [2^-11, 2^10): normal in both (fp16's subnormals, below 2^-14, round absolutely) */
        const float x = ldexpf((tg_rng_uniform(&r) < 0.5f ? -0.5f : 0.5f) * (1 + tg_rng_uniform(&r)),
                               (int)(tg_rng_uniform(&r) * 20) - 10);
        for (int p = TG_BF16; p <= TG_FP16; p++)
            assert_true(fabs((double)tg_round_to(p, x) - x) <= tg_precision_u(p) * fabs(x));
    }
    assert_int_equal(tg_precision_of("bf16"), TG_BF16);
    assert_int_equal(tg_precision_of("fp8"), -1);
    assert_string_equal(tg_precision_name(TG_FP16), "fp16");
}

/* tg_round_copy (0.22, vectorised; fp16 by F16C where the CPU has it) gives tg_round_to's
 * bits: on every tie and its neighbours in both formats, and on a stride through all floats */
static void round_copy_check(const uint32_t *u, int n) {
    float x[4096], y[4096];
    memcpy(x, u, sizeof(float) * n);
    for (int p = TG_BF16; p <= TG_FP16; p++) {
        tg_round_copy(p, x, y, n);
        for (int i = 0; i < n; i++) {
            const float want = tg_round_to(p, x[i]);
            if (isnan(want)) {
                if (!isnan(y[i])) fail_msg("%s of bits %08x: %g, not NaN", tg_precision_name(p), u[i], y[i]);
            } else if (memcmp(&want, y + i, 4))
                fail_msg("%s of bits %08x: %a, tg_round_to %a", tg_precision_name(p), u[i], y[i], want);
        }
    }
}

static void test_round_copy(void **s) {
    (void)s;
    uint32_t u[4096];
    int n = 0;
    static const uint32_t lo16[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff};   /* bf16's ties */
    static const uint32_t lo13[] = {0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff};   /* fp16's ties (normal range) */
    for (uint32_t hi = 0; hi < 0x10000; hi++)
        for (int k = 0; k < 6; k++) {
            u[n++] = hi << 16 | lo16[k];
            if (n == 4096) round_copy_check(u, n), n = 0;
        }
    for (uint32_t hi = 0; hi < 0x80000; hi++)
        for (int k = 0; k < 6; k++) {
            u[n++] = hi << 13 | lo13[k];
            if (n == 4096) round_copy_check(u, n), n = 0;
        }
    for (uint64_t b = 0; b < 0x100000000ull; b += 257) {
        u[n++] = (uint32_t)b;
        if (n == 4096) round_copy_check(u, n), n = 0;
    }
    round_copy_check(u, n);
    float z[3] = {1.0f + 0x1p-8f, 3.0f, 65520.0f};   /* in place */
    tg_round_copy(TG_BF16, z, z, 3);
    assert_true(z[0] == 1.0f && z[1] == 3.0f);
}

/* safetensors carries BF16 and F16 (0.21): written from their bits, read back widened */
static void test_safetensors_half(void **s) {
    (void)s;
    const float x[5] = {1.0f, -2.5f, 0.1f, 65504.0f, 1e-6f};
    uint16_t b[5], h[5];
    for (int i = 0; i < 5; i++) b[i] = tg_bf16_of(x[i]), h[i] = tg_f16_of(x[i]);
    const tg_st_tensor t[2] = {{.name = "b", .dtype = TG_ST_BF16, .ndim = 1, .shape = {5}, .data = b},
                               {.name = "h", .dtype = TG_ST_F16, .ndim = 1, .shape = {5}, .data = h}};
    unsigned char *bytes;
    size_t len;
    char err[200];
    assert_int_equal(tg_st_encode(t, 2, NULL, 0, &bytes, &len, err, sizeof err), 0);
    tg_st_file f;
    assert_int_equal(tg_st_parse(bytes, len, &f, err, sizeof err), 0);
    float got[5];
    tg_st_get_f32(tg_st_find(&f, "b"), got);
    for (int i = 0; i < 5; i++) assert_true(got[i] == tg_round_to(TG_BF16, x[i]));
    tg_st_get_f32(tg_st_find(&f, "h"), got);
    for (int i = 0; i < 5; i++) assert_true(got[i] == tg_round_to(TG_FP16, x[i]));
    assert_int_equal(tg_st_find(&f, "h")->dtype, TG_ST_F16);
    tg_st_free(&f);
    free(bytes);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_helpers),
        cmocka_unit_test(test_bad_tensors_error),
        cmocka_unit_test(test_arena_reuse),
        cmocka_unit_test(test_params_flat),
        cmocka_unit_test(test_backward_lazy_zeroing),
        cmocka_unit_test(test_forgotten_grad_rule),
        cmocka_unit_test(test_rng_reference),
        cmocka_unit_test(test_rng_normal_moments),
        cmocka_unit_test(test_precision_rounding),
        cmocka_unit_test(test_round_copy),
        cmocka_unit_test(test_safetensors_half),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
