/* softmax_saturation: the seed's "why large scores hurt". softmax(c·[2, 1, 0.5])
 * for c from 0.1 to 20: the weights, the entropy and the Frobenius norm of the
 * softmax Jacobian diag(p) − p pᵀ, taken through the engine's backward pass (one
 * backward per Jacobian row) next to the closed form. Then rows of T random
 * scores with standard deviation σ: mean entropy and median Jacobian norm.
 * stdout (or --out FILE): the c sweep TSV; --sigma-out FILE: the σ sweep TSV;
 * stderr: a summary with both. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>

#include "tg_cli.h"
#include "seedfig.h"
#include "tg_blas.h"
#include "tg_runtime.h"

#define MAX_ROWS 128

static int parse_sigmas(const char *s, double *v, char *err, size_t errlen) {
    char msg[400];
    int n = seed_parse_list(s, v, MAX_ROWS, msg, sizeof msg);
    for (int i = 0; i < n; i++)
        if (v[i] > 1000) {
            snprintf(msg, sizeof msg, "%g is above 1000", v[i]);
            n = -1;
        }
    if (n < 0) snprintf(err, errlen, "--sigmas: %s", msg);
    return n;
}

static void c_table(FILE *f, const seed_sat_row *r, int n) {
    fprintf(f, "c\tp1\tp2\tp3\tentropy\tjac_norm\tjac_exact\trel_diff\tgone\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "%.6g\t%.6g\t%.6g\t%.6g\t%.6f\t%.6g\t%.6g\t%.2e\t%d\n", r[i].c, r[i].p[0], r[i].p[1], r[i].p[2],
                r[i].entropy, r[i].jac_norm, r[i].jac_exact, fabs(r[i].jac_norm - r[i].jac_exact) / r[i].jac_exact,
                r[i].jac_norm < SEED_GONE);
}

static void sigma_table(FILE *f, const seed_sigma_row *r, int n, int keys) {
    fprintf(f, "sigma\tent_mean\tent_uniform\tpmax_mean\tjac_median\tjac_exact_median\tfrac_gone\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "%.6g\t%.5f\t%.5f\t%.5f\t%.6g\t%.6g\t%.4f\n", r[i].sigma, r[i].ent_mean, log((double)keys),
                r[i].pmax_mean, r[i].jac_median, r[i].jac_exact_median, r[i].frac_gone);
}

/* The summary on stderr: the key rows of the c sweep, the threshold, the σ sweep. */
static void summary_lines(const seed_sat_row *cr, int nc, double c_gone, const seed_sigma_row *sr, int ns, int keys,
                          int rows) {
    fprintf(stderr, "softmax_saturation: softmax(c·[2, 1, 0.5]); ‖J‖_F through the backward pass vs the closed form\n");
    fprintf(stderr, "%8s  %-26s %8s %11s %11s\n", "c", "weights", "entropy", "‖J‖ engine", "‖J‖ exact");
    int first_gone = -1;
    for (int i = 0; i < nc; i++) {
        const seed_sat_row *r = &cr[i];
        int gone = r->jac_norm < SEED_GONE;
        int key = fabs(r->c - 0.1) < 1e-9 || fabs(r->c - 1) < 1e-9 || fabs(r->c - 11.3) < 1e-9 || fabs(r->c - 20) < 1e-9;
        if (gone && first_gone < 0) {
            first_gone = i;
            key = 1;
        }
        if (key)
            fprintf(stderr, "%8.4g  [%.3f, %.3f, %.3f]%*s %8.4f %11.3e %11.3e%s\n", r->c, r->p[0], r->p[1], r->p[2], 5, "",
                    r->entropy, r->jac_norm, r->jac_exact, i == first_gone ? "  <- first c with ‖J‖ < 1e-3" : "");
    }
    fprintf(stderr, "softmax_saturation: ‖J‖_F falls below %g at c = %.3f (bisection on the engine's norm)\n", SEED_GONE,
            c_gone);
    fprintf(stderr, "\nrows of T = %d random scores of std σ (%d rows, the same draws for every σ; uniform entropy ln T = %.3f)\n",
            keys, rows, log((double)keys));
    fprintf(stderr, "%8s %10s %10s %14s %14s %10s\n", "σ", "entropy", "max p", "median ‖J‖", "(exact)", "‖J‖<1e-3");
    for (int i = 0; i < ns; i++)
        fprintf(stderr, "%8.4g %10.4f %10.4f %14.4e %14.4e %10.4f\n", sr[i].sigma, sr[i].ent_mean, sr[i].pmax_mean,
                sr[i].jac_median, sr[i].jac_exact_median, sr[i].frac_gone);
}

int main(int argc, char **argv) {
    if (tg_runtime_init("softmax_saturation", argc, argv)) return 1;   /* first: it may restart the program; threads */
    const char *sigmas_s = "0.1,0.2,0.35,0.5,0.7,1,1.4,2,2.8,4,5.7,8,11.3,16", *out = NULL, *sigma_out = NULL;
    int rows = 2000, keys = 64, seed = 1;
    const tg_cli_opt opts[] = {
        {"sigmas", TG_CLI_STR, &sigmas_s, 0, 0, NULL, "σ values of the random-score sweep (comma list; 'a,b,...,z' continues b/a)"},
        {"rows", TG_CLI_INT, &rows, 1, 1000000, NULL, "rows of random scores per σ"},
        {"keys", TG_CLI_INT, &keys, 2, 4096, NULL, "T: scores per row"},
        {"seed", TG_CLI_INT, &seed, 0, 2147483647, NULL, "seed of the random scores"},
        {"out", TG_CLI_STR, &out, 0, 0, NULL, "write the c-sweep TSV to FILE (atomically) instead of stdout"},
        {"sigma-out", TG_CLI_STR, &sigma_out, 0, 0, NULL, "write the σ-sweep TSV to FILE (atomically; default: summary only)"},
    };
    const int nopt = (int)(sizeof opts / sizeof opts[0]);
    const char *summary = "softmax(c·[2, 1, 0.5]) for c in 0.1..20: weights, entropy and ‖diag(p) − p pᵀ‖_F through the\n"
                          "backward pass; then the same norm over rows of T random scores of std σ.";
    char err[512];
    int rc = tg_cli_parse(opts, nopt, argc, argv, err, sizeof err, NULL);
    if (rc == TG_CLI_HELP) {
        tg_cli_usage(stdout, "softmax_saturation", summary, opts, nopt);
        return 0;
    }
    double sig[MAX_ROWS];
    int ns = 0;
    if (rc == TG_CLI_OK && (ns = parse_sigmas(sigmas_s, sig, err, sizeof err)) < 0) rc = TG_CLI_ERROR;
    if (rc != TG_CLI_OK) {
        fprintf(stderr, "softmax_saturation: %s\n", err);
        fprintf(stderr, "(softmax_saturation --help lists every flag)\n");
        return 2;
    }
    seed_out o, os;
    if (seed_out_open(&o, "out", out, err, sizeof err)) {
        fprintf(stderr, "softmax_saturation: %s\n", err);
        return 2;
    }
    if (sigma_out && seed_out_open(&os, "sigma-out", sigma_out, err, sizeof err)) {
        fprintf(stderr, "softmax_saturation: %s\n", err);
        seed_out_abort(&o);
        return 2;
    }

    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    double cs[MAX_ROWS];
    int nc = seed_sat_grid(cs, MAX_ROWS), bad = 0;
    seed_sat_row cr[MAX_ROWS];
    for (int i = 0; i < nc; i++) bad |= seed_sat_run(&ctx, cs[i], &cr[i]);
    double c_gone = seed_sat_threshold(&ctx, SEED_GONE, 1.0, 20.0);
    seed_sigma_cfg scfg = {rows, keys, (uint64_t)seed};
    seed_sigma_row sr[MAX_ROWS];
    for (int i = 0; i < ns; i++) bad |= seed_sigma_run(&ctx, &scfg, sig[i], &sr[i]);
    tg_ctx_free(&ctx);
    if (bad) {
        fprintf(stderr, "softmax_saturation: a result is NaN or infinite\n");
        seed_out_abort(&o);
        if (sigma_out) seed_out_abort(&os);
        return 1;
    }

    fprintf(o.f, "# tapegrad softmax_saturation: p = softmax(c·[2, 1, 0.5]), J = diag(p) − p pᵀ\n");
    tg_cli_dump(o.f, opts, nopt - 2);   /* not --out, --sigma-out (the last two) */
    fprintf(o.f, "# jac_norm: ‖J‖_F through the backward pass (row i: backward seeded with e_i); jac_exact: closed form in double\n");
    fprintf(o.f, "# gone: jac_norm < %g\n# c_gone=%.4f\n", SEED_GONE, c_gone);
    c_table(o.f, cr, nc);
    if (sigma_out) {
        fprintf(os.f, "# tapegrad softmax_saturation, σ sweep: rows of T = %d scores σ·x, x ~ N(0,1), the same x for every σ\n", keys);
        tg_cli_dump(os.f, opts, nopt - 2);
        fprintf(os.f, "# jac_median: median over rows of ‖J‖_F through the backward pass; frac_gone: share of rows below %g\n",
                SEED_GONE);
        sigma_table(os.f, sr, ns, keys);
    }
    if (seed_out_commit(&o, err, sizeof err) || (sigma_out && seed_out_commit(&os, err, sizeof err))) {
        fprintf(stderr, "softmax_saturation: %s\n", err);
        if (sigma_out && os.f) seed_out_abort(&os);
        return 2;
    }

    summary_lines(cr, nc, c_gone, sr, ns, keys, rows);
    return 0;
}
