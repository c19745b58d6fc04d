/* The per-op profile (core/tg_profile.h) and the product plan's names
 * (ops/tg_gemm_plan.h: estimate mode, the library's own when no program sets one up). */
#define _POSIX_C_SOURCE 200809L   /* open_memstream */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tg_core.h"
#include "tg_gemm_plan.h"
#include "tg_ops.h"
#include "tg_profile.h"

static const tg_profile_row *find(const tg_profile *p, const char *name) {
    for (int i = 0; i < p->n_rows; i++)
        if (strcmp(p->rows[i].name, name) == 0) return &p->rows[i];
    return NULL;
}

/* y = mean(gelu(x W)) with W [K, N]: steps of it, profiled or not. */
static void steps(tg_ctx *ctx, tg_profile *prof, tg_tensor *W, const float *x0, int M, int K, int n, float *loss) {
    for (int s = 0; s < n; s++) {
        tg_ctx_reset(ctx);
        if (prof) tg_profile_step_begin(prof);
        tg_tensor *x = tg_new(ctx, 2, (int[]){M, K});
        memcpy(x->data, x0, sizeof(float) * (size_t)M * K);
        tg_tensor *y = tg_mean(ctx, tg_gelu(ctx, tg_matmul(ctx, x, W, 0, 0)));
        if (prof) tg_profile_phase(prof, "zero_grad");
        memset(W->grad, 0, sizeof(float) * (size_t)W->numel);
        tg_backward(ctx, y);
        if (prof) tg_profile_step_end(prof, ctx);
        *loss = y->data[0];
    }
}

static void test_profile_counts(void **s) {
    (void)s;
    const int M = 64, K = 48, N = 32;
    tg_params P;
    tg_params_init(&P);
    tg_tensor *W = tg_param(&P, "W", 2, (int[]){K, N});
    tg_params_alloc(&P);
    tg_rng r;
    tg_rng_seed(&r, 3, 4);
    tg_fill_normal(&r, W->data, W->numel, 0, 0.1f);
    float *x0 = malloc(sizeof(float) * M * K);
    tg_fill_normal(&r, x0, M * K, 0, 1);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);

    float plain, profiled;
    steps(&ctx, NULL, W, x0, M, K, 3, &plain);
    for (int i = 0; i < ctx.n_nodes; i++) assert_true(ctx.nodes[i].prof_s[0] == 0 && ctx.nodes[i].prof_s[1] == 0);

    tg_profile prof;
    tg_profile_init(&prof, 2);
    tg_profile_attach(&ctx, &prof);
    steps(&ctx, &prof, W, x0, M, K, 7, &profiled);
    tg_profile_attach(&ctx, NULL);
    assert_true(plain == profiled);   /* profiling changes no result */
    assert_int_equal(prof.steps, 5);  /* 2 left out */
    assert_true(prof.step_s > 0);

    const tg_profile_row *mm = find(&prof, "tg_matmul"), *g = find(&prof, "tg_gelu"), *mean = find(&prof, "tg_mean");
    const tg_profile_row *z = find(&prof, "zero_grad");
    assert_non_null(mm);
    assert_non_null(g);
    assert_non_null(mean);
    assert_non_null(z);
    assert_int_equal(mm->calls, 5);
    assert_int_equal(g->calls, 5);
    assert_true(z->phase && !mm->phase);
    /* matmul says its FLOPs: 2·M·N·K forward, and backward only for W (x needs none) */
    assert_true(mm->fwd_flop == 5 * 2.0 * M * N * K);
    assert_true(mm->bwd_flop == 5 * 2.0 * M * N * K);
    assert_true(g->fwd_flop == 0);
    assert_true(mm->fwd_s > 0 && mm->bwd_s > 0 && g->fwd_s > 0 && g->bwd_s > 0);
    double sum = 0;
    for (int i = 0; i < prof.n_rows; i++) sum += prof.rows[i].fwd_s + prof.rows[i].bwd_s;
    assert_true(sum <= prof.step_s * 1.0001);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    tg_profile_print(&prof, f);
    fclose(f);
    assert_non_null(strstr(text, "# profile: 5 steps"));
    assert_non_null(strstr(text, "\ntg_matmul "));
    assert_non_null(strstr(text, "\n(not in ops) "));
    assert_null(strstr(text, "of_fma"));   /* no peak set: no column */
    free(text);
    f = open_memstream(&text, &len);
    tg_profile_print_tsv(&prof, f);
    fclose(f);
    const char *head = "op\tkind\tcalls_per_step\tfwd_ms\tbwd_ms\ttotal_ms\tshare\tgflops\tof_fma\n";
    assert_true(strncmp(text, head, strlen(head)) == 0);
    assert_non_null(strstr(text, "\ntg_matmul\top\t1.00\t"));
    assert_non_null(strstr(text, "\tnan\n(not in ops)"));   /* matmul's of_fma without a peak: nan */
    free(text);

    /* with the machine's peak set: the step's share of it, and each op's that counts its FLOPs */
    const tg_profile_row mm_row = *mm;
    const double mm_gf = (mm_row.fwd_flop + mm_row.bwd_flop) / (mm_row.fwd_s + mm_row.bwd_s) * 1e-9;
    prof.peak_gflops = 4 * mm_gf;   /* matmul at 25% of it */
    f = open_memstream(&text, &len);
    tg_profile_print(&prof, f);
    fclose(f);
    assert_non_null(strstr(text, "# the FMA peak "));
    const char *mrow = strstr(text, "\ntg_matmul ");
    assert_non_null(mrow);
    assert_non_null(strstr(mrow, " 25.0%\n"));
    assert_true(strstr(mrow, " 25.0%\n") < strchr(mrow + 1, '\n') + 1);   /* on matmul's own row */
    free(text);
    f = open_memstream(&text, &len);
    tg_profile_print_tsv(&prof, f);
    fclose(f);
    assert_non_null(strstr(text, "\ntg_matmul\top\t1.00\t"));
    assert_non_null(strstr(strstr(text, "\ntg_matmul\t"), "\t0.2500\n"));
    free(text);

    /* a profile with no counted step says so */
    tg_profile none;
    tg_profile_init(&none, 0);
    f = open_memstream(&text, &len);
    tg_profile_print(&none, f);
    fclose(f);
    assert_non_null(strstr(text, "no step counted"));
    free(text);

    tg_ctx_free(&ctx);
    tg_params_free(&P);
    free(x0);
}

/* More names than rows: the rest go to "(other ops)", nothing is lost or overrun. */
static void test_profile_overflow(void **s) {
    (void)s;
    tg_profile prof;
    tg_profile_init(&prof, 0);
    static char names[TG_PROFILE_MAX_ROWS + 10][16];
    tg_profile_step_begin(&prof);
    for (int i = 0; i < TG_PROFILE_MAX_ROWS + 10; i++) {
        snprintf(names[i], sizeof names[i], "phase%d", i);
        tg_profile_phase(&prof, names[i]);
    }
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_profile_step_end(&prof, &ctx);
    assert_int_equal(prof.n_rows, TG_PROFILE_MAX_ROWS - 1);
    assert_string_equal(prof.rows[TG_PROFILE_MAX_ROWS - 1].name, "(other ops)");
    tg_ctx_free(&ctx);
}

/* The plan's name follows the decisions used, and setup after the first product is refused. */
static void test_plan_names(void **s) {
    (void)s;
    char a[TG_PLAN_NAME_BUF], b[TG_PLAN_NAME_BUF], c[TG_PLAN_NAME_BUF], err[256];
    assert_string_equal(tg_gemm_plan_name(a), "none");
    assert_int_equal(tg_gemm_plan_setup("estimate", err, sizeof err), 0);   /* again and again, before a product */
    assert_int_equal(tg_gemm_plan_setup("estimate", err, sizeof err), 0);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_tensor *x = tg_zeros(&ctx, 2, (int[]){8, 16}), *w = tg_zeros(&ctx, 2, (int[]){16, 4});
    tg_matmul(&ctx, x, w, 0, 0);
    tg_gemm_plan_name(a);
    assert_int_equal(strlen(a), 8);
    assert_int_equal(tg_gemm_plan_setup("estimate", err, sizeof err), -1);
    assert_non_null(strstr(err, "already in use"));
    assert_string_equal(tg_gemm_plan_mode(), "estimate");   /* no program set it up: the estimate */
    tg_matmul(&ctx, x, w, 0, 0);
    assert_string_equal(tg_gemm_plan_name(b), a);   /* the same shape again: the same plan */
    tg_tensor *w2 = tg_zeros(&ctx, 2, (int[]){16, 8});
    tg_matmul(&ctx, x, w2, 0, 0);
    assert_string_not_equal(tg_gemm_plan_name(c), a);
    tg_gemm_plan_reset_used();
    assert_string_equal(tg_gemm_plan_name(c), "none");
    char d[400];
    assert_non_null(strstr(tg_gemm_plan_describe(d, sizeof d), "estimate"));
    tg_gemm_plan_machine(d, sizeof d);
    assert_non_null(strstr(d, "cpu="));
    assert_non_null(strstr(d, "libxsmm="));
    tg_ctx_free(&ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_names),   /* first: no product planned before it */
        cmocka_unit_test(test_profile_counts),
        cmocka_unit_test(test_profile_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
