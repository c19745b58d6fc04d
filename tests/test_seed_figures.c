/* The seed's figures at small size: the worked example's numbers and
 * gradients, std(q·k) ≈ √d_k, softmax saturation and its vanishing Jacobian,
 * and the binaries' shared list parser and atomic output. */
#define _POSIX_C_SOURCE 200809L   /* mkdtemp */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>
#include <cmocka.h>
#include <cblas.h>

#include "seedfig.h"
#include "testutil.h"

static void assert_close(const float *got, const float *want, int n, double tol) {
    for (int i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= tol)) {
            print_error("entry %d: got %.6f, want %.6f (tolerance %g)\n", i, got[i], want[i], tol);
            fail();
        }
}

/* Σ softmax(Q Kᵀ / 2) V in double, plain C: a reference that shares no code with the ops. */
static double sum_attention(const double *Q, const double *K, const double *V) {
    double total = 0;
    for (int i = 0; i < 3; i++) {
        double s[3], mx = -INFINITY, z = 0;
        for (int j = 0; j < 3; j++) {
            s[j] = 0;
            for (int c = 0; c < 4; c++) s[j] += Q[i * 4 + c] * K[j * 4 + c];
            s[j] /= 2;
            mx = s[j] > mx ? s[j] : mx;
        }
        for (int j = 0; j < 3; j++) z += s[j] = exp(s[j] - mx);
        for (int j = 0; j < 3; j++) total += s[j] / z * (V[j * 2] + V[j * 2 + 1]);
    }
    return total;
}

/* Central differences of sum_attention with respect to x[0..n-1] (one of Q, K, V). */
static void numeric_grad(double *Q, double *K, double *V, double *x, int n, double *g) {
    const double h = 1e-5;
    for (int i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + h;
        double up = sum_attention(Q, K, V);
        x[i] = x0 - h;
        double down = sum_attention(Q, K, V);
        x[i] = x0;
        g[i] = (up - down) / (2 * h);
    }
}

static void test_worked_example(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    seed_worked w;
    seed_worked_run(&ctx, &w);
    tg_ctx_free(&ctx);

    /* the seed's four steps: exact for the first two, to its third decimal after */
    assert_close(&w.scores[0][0], &seed_scores[0][0], 9, 0);
    assert_close(&w.scaled[0][0], &seed_scaled[0][0], 9, 0);
    assert_close(&w.weights[0][0], &seed_weights[0][0], 9, SEED_TOL);
    assert_close(&w.out[0][0], &seed_output[0][0], 6, SEED_TOL);
    /* its check of one entry, to more digits: e^1, e^0, e^0.5 over their sum 5.367 */
    assert_float_equal(w.weights[0][0], exp(1.0) / (exp(1.0) + 1 + exp(0.5)), 1e-6);
    assert_float_equal(w.out[0][1], (1 + exp(0.5)) / (exp(1.0) + 1 + exp(0.5)), 1e-6);
    /* one tg_attention call gives the same weights, output and gradients */
    assert_close(&w.weights_attn[0][0], &w.weights[0][0], 9, 1e-6);
    assert_close(&w.out_attn[0][0], &w.out[0][0], 6, 1e-6);
    assert_close(&w.dQ_attn[0][0], &w.dQ[0][0], 12, 1e-6);
    assert_close(&w.dK_attn[0][0], &w.dK[0][0], 12, 1e-6);
    assert_close(&w.dV_attn[0][0], &w.dV[0][0], 6, 1e-6);
    assert_true(w.finite);
    assert_true(w.seed_diff <= SEED_TOL);
    assert_true(seed_worked_ok(&w));

    /* d Σ out / d V[j,:] is column j's total weight */
    for (int j = 0; j < 3; j++) {
        double col = w.weights[0][j] + w.weights[1][j] + w.weights[2][j];
        assert_float_equal(w.dV[j][0], col, 1e-6);
        assert_float_equal(w.dV[j][1], col, 1e-6);
    }
    /* and every gradient against central differences of a double-precision reference */
    double Q[12], K[12], V[6], g[12];
    for (int i = 0; i < 12; i++) {
        Q[i] = (&seed_Q[0][0])[i];
        K[i] = (&seed_K[0][0])[i];
    }
    for (int i = 0; i < 6; i++) V[i] = (&seed_V[0][0])[i];
    float gf[12];
    numeric_grad(Q, K, V, Q, 12, g);
    for (int i = 0; i < 12; i++) gf[i] = (float)g[i];
    assert_close(&w.dQ[0][0], gf, 12, 1e-5);
    numeric_grad(Q, K, V, K, 12, g);
    for (int i = 0; i < 12; i++) gf[i] = (float)g[i];
    assert_close(&w.dK[0][0], gf, 12, 1e-5);
    numeric_grad(Q, K, V, V, 6, g);
    for (int i = 0; i < 6; i++) gf[i] = (float)g[i];
    assert_close(&w.dV[0][0], gf, 6, 1e-5);
}

/* 10,000 seeded pairs: std(q·k)/√d_k within 3% of 1 (its standard error is
 * about 1% at d_k = 4 and less above), and the other two scalings as predicted. */
static void test_dot_variance(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    seed_dot_cfg cfg = {.pairs = 10000, .queries = 200, .keys = 16, .seed = 1};
    const int dims[] = {4, 16, 64, 128};
    for (int i = 0; i < 4; i++) {
        int d = dims[i];
        seed_dot_row r;
        assert_int_equal(seed_dot_run(&ctx, &cfg, d, &r), 0);
        assert_int_equal(r.d, d);
        assert_float_equal(r.std_pred, sqrt(d), 1e-12);
        assert_float_equal(r.std[SEED_RAW] / sqrt(d), 1.0, 0.03);
        assert_float_equal(r.var[SEED_RAW] / d, 1.0, 0.06);
        assert_float_equal(r.mean[SEED_RAW] / sqrt(d), 0.0, 0.05);   /* 5 standard errors */
        assert_float_equal(r.std[SEED_SQRT], 1.0, 0.03);
        assert_float_equal(r.std[SEED_DK] * sqrt(d), 1.0, 0.03);
        /* the scalings are one set of draws: exactly proportional */
        assert_float_equal(r.std[SEED_SQRT] * sqrt(d), r.std[SEED_RAW], 1e-4 * r.std[SEED_RAW]);
        /* entropy: the larger the logits, the sharper; nothing beyond uniform */
        double uni = log(16.0);
        assert_true(r.ent[SEED_RAW] < r.ent[SEED_SQRT] && r.ent[SEED_SQRT] < r.ent[SEED_DK]);
        assert_true(r.ent[SEED_DK] <= uni + 1e-6 && r.ent[SEED_RAW] > 0);
        assert_true(r.pmax[SEED_RAW] > r.pmax[SEED_SQRT] && r.pmax[SEED_SQRT] > r.pmax[SEED_DK]);
        /* unit-variance logits: ln T − σ²/2 to first order, whatever d_k */
        assert_float_equal(r.ent[SEED_SQRT], uni - 0.5, 0.15);
    }
    /* d_k = 128 unscaled: the seed's 11.3 */
    seed_dot_row r;
    seed_dot_run(&ctx, &cfg, 128, &r);
    assert_float_equal(r.std[SEED_RAW], 11.3, 0.3);
    assert_true(r.ent[SEED_RAW] < 0.25 * log(16.0));   /* near one-hot */
    assert_true(r.ent[SEED_DK] > 0.99 * log(16.0));    /* near uniform */
    /* seeded: the same numbers again, other numbers from another seed */
    seed_dot_row r2;
    seed_dot_run(&ctx, &cfg, 128, &r2);
    assert_memory_equal(&r, &r2, sizeof r);
    cfg.seed = 2;
    seed_dot_run(&ctx, &cfg, 128, &r2);
    assert_true(r2.std[SEED_RAW] != r.std[SEED_RAW]);
    tg_ctx_free(&ctx);
}

static void test_saturation(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    seed_sat_row r;
    /* the seed: softmax([2, 1, 0.5]) = [0.63, 0.23, 0.14], a soft preference */
    assert_int_equal(seed_sat_run(&ctx, 1.0, &r), 0);
    const double want[] = {0.63, 0.23, 0.14};
    for (int j = 0; j < 3; j++) assert_float_equal(r.p[j], want[j], 5e-3);
    assert_true(r.jac_norm > 0.1);
    assert_float_equal(r.jac_norm, r.jac_exact, 1e-6 * r.jac_exact);
    /* times 11.3: about [1, 0, 0], and the gradient is about gone */
    assert_int_equal(seed_sat_run(&ctx, 11.3, &r), 0);
    assert_true(r.p[0] > 0.9999 && r.p[1] < 1e-4 && r.p[2] < 1e-4);
    assert_true(r.jac_norm < 1e-3);
    assert_float_equal(r.jac_norm, r.jac_exact, 1e-3 * r.jac_exact);
    assert_true(r.entropy < 1e-3);
    /* c = 0: uniform weights, ‖J‖² = (n − 1)/n² = 2/9 */
    seed_sat_run(&ctx, 0.0, &r);
    assert_float_equal(r.jac_norm, sqrt(2.0 / 9), 1e-6);
    assert_float_equal(r.entropy, log(3.0), 1e-6);

    /* the grid: ascending from 0.1 to 20 with 1 and 11.3 in it; ‖J‖ and
     * entropy fall along it, and the engine follows the closed form while
     * float can still tell 1 − p₁ from 0 */
    double c[128];
    int n = seed_sat_grid(c, 128), has1 = 0, has113 = 0;
    assert_true(n > 30);
    assert_float_equal(c[0], 0.1, 1e-12);
    assert_float_equal(c[n - 1], 20.0, 1e-12);
    double prev_norm = INFINITY, prev_ent = INFINITY;
    for (int i = 0; i < n; i++) {
        if (i) assert_true(c[i] > c[i - 1]);
        has1 |= c[i] == 1.0;
        has113 |= c[i] == 11.3;
        assert_int_equal(seed_sat_run(&ctx, c[i], &r), 0);
        assert_true(r.jac_norm < prev_norm && r.entropy <= prev_ent);
        if (c[i] <= 11.3) assert_float_equal(r.jac_norm, r.jac_exact, 1e-3 * r.jac_exact);
        prev_norm = r.jac_norm;
        prev_ent = r.entropy;
    }
    assert_true(has1 && has113);
    /* where the gradient is gone: between the two, and the norm there is the level */
    double cg = seed_sat_threshold(&ctx, SEED_GONE, 1.0, 20.0);
    assert_true(cg > 1 && cg < 11.3);
    seed_sat_run(&ctx, cg, &r);
    assert_float_equal(r.jac_norm, SEED_GONE, 1e-5);
    tg_ctx_free(&ctx);
}

static void test_sigma_sweep(void **s) {
    (void)s;
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    const int T = 16;
    seed_sigma_cfg cfg = {.rows = 300, .keys = T, .seed = 1};
    seed_sigma_row r;
    /* tiny σ: uniform rows, ‖J‖ = √(T − 1)/T, entropy ln T */
    assert_int_equal(seed_sigma_run(&ctx, &cfg, 1e-3, &r), 0);
    assert_float_equal(r.jac_median, sqrt(T - 1.0) / T, 1e-3);
    assert_float_equal(r.ent_mean, log((double)T), 1e-4);
    assert_float_equal(r.pmax_mean, 1.0 / T, 1e-3);
    const double sig[] = {0.5, 1, 2, 4, 8, 16, 32};
    double prev_ent = INFINITY, prev_pmax = 0, peak = 0;
    for (int i = 0; i < 7; i++) {
        assert_int_equal(seed_sigma_run(&ctx, &cfg, sig[i], &r), 0);
        assert_float_equal(r.sigma, sig[i], 0);
        assert_true(r.ent_mean < prev_ent && r.pmax_mean > prev_pmax);
        assert_float_equal(r.jac_median, r.jac_exact_median, 1e-3 * r.jac_exact_median);
        peak = r.jac_median > peak ? r.jac_median : peak;
        prev_ent = r.ent_mean;
        prev_pmax = r.pmax_mean;
    }
    /* large σ: most weight on one key, the median Jacobian well below its peak,
     * and a share of rows whose gradient is gone */
    assert_true(r.pmax_mean > 0.9);
    assert_true(r.jac_median < 0.25 * peak);
    assert_true(r.frac_gone > 0.2);
    tg_ctx_free(&ctx);
}

static void test_parse_list(void **s) {
    (void)s;
    double v[64];
    char err[256];
    assert_int_equal(seed_parse_list("4,8,...,1024", v, 64, err, sizeof err), 9);
    for (int i = 0; i < 9; i++) assert_float_equal(v[i], (double)(4 << i), 0);
    assert_int_equal(seed_parse_list("1,10,...,1000,2000", v, 64, err, sizeof err), 5);
    assert_float_equal(v[3], 1000, 0);
    assert_float_equal(v[4], 2000, 0);
    assert_int_equal(seed_parse_list("0.1,0.35,16", v, 64, err, sizeof err), 3);
    assert_float_equal(v[1], 0.35, 1e-15);
    assert_int_equal(seed_parse_list("7", v, 64, err, sizeof err), 1);
    const char *bad[] = {"", "4,,8", "4,8,", "0,1", "-1", "x", "4,...,8", "4,8,...", "4,8,...,1000",
                         "8,4,...,1", "4,8,...,16,...,64", "1e999", "nan"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        if (seed_parse_list(bad[i], v, 64, err, sizeof err) != -1) {
            print_error("'%s' was accepted\n", bad[i]);
            fail();
        }
        assert_true(strlen(err) > 0);
    }
    assert_int_equal(seed_parse_list("1,2,...,1024", v, 64, err, sizeof err), 11);
    assert_int_equal(seed_parse_list("1,2,...,1024", v, 8, err, sizeof err), -1);
    assert_non_null(strstr(err, "more than 8"));
}

static int files_in(const char *dir) {   /* entries but . and .. */
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

static void test_out_atomic(void **s) {
    (void)s;
    char dir[] = "/tmp/tg_seedfig_XXXXXX", path[256], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/t.tsv", dir);
    seed_out o;
    /* while writing, only the temporary file exists (tg_file.h); commit renames it */
    assert_int_equal(seed_out_open(&o, "out", path, err, sizeof err), 0);
    fprintf(o.f, "a\tb\n1\t2\n");
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(files_in(dir), 1);
    assert_int_equal(seed_out_commit(&o, err, sizeof err), 0);
    assert_int_equal(files_in(dir), 1);
    FILE *f = fopen(path, "r");
    char line[64];
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "a\tb\n");
    fclose(f);
    /* abort leaves the old file alone and no .tmp */
    assert_int_equal(seed_out_open(&o, "out", path, err, sizeof err), 0);
    fprintf(o.f, "half");
    seed_out_abort(&o);
    assert_int_equal(files_in(dir), 1);
    f = fopen(path, "r");
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "a\tb\n");
    fclose(f);
    /* unwritable places fail at open, naming the flag */
    assert_int_equal(seed_out_open(&o, "sigma-out", "/nonexistent-dir/x.tsv", err, sizeof err), -1);
    assert_non_null(strstr(err, "--sigma-out /nonexistent-dir/x.tsv"));
    assert_int_equal(seed_out_open(&o, "out", dir, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file (a folder)"));
    /* NULL: stdout */
    assert_int_equal(seed_out_open(&o, "out", NULL, err, sizeof err), 0);
    assert_ptr_equal(o.f, stdout);
    remove(path);
    rmdir(dir);
}

int main(void) {
    openblas_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_example), cmocka_unit_test(test_dot_variance),
        cmocka_unit_test(test_saturation),     cmocka_unit_test(test_sigma_sweep),
        cmocka_unit_test(test_parse_list),     cmocka_unit_test(test_out_atomic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
