/* dot_variance: the seed's missing table. For each d_k, the mean, variance and
 * standard deviation of q·k over random pairs with N(0,1) entries (predicted:
 * 0, d_k, √d_k), of q·k/√d_k (0, 1, 1) and of q·k/d_k (0, 1/d_k, 1/√d_k); and
 * the softmax entropy over T keys for each scaling (uniform is ln T).
 * stdout (or --out FILE): '#' lines, then the TSV; stderr: a summary. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>

#include "tg_cli.h"
#include "seedfig.h"
#include "tg_blas.h"
#include "tg_runtime.h"

#define MAX_DIMS 64

static int parse_dims(const char *s, double *v, char *err, size_t errlen) {
    char msg[400];
    int n = seed_parse_list(s, v, MAX_DIMS, msg, sizeof msg);
    for (int i = 0; i < n; i++)
        if (v[i] != floor(v[i]) || v[i] > 65536) {
            snprintf(msg, sizeof msg, "%g is not an integer in [1, 65536]", v[i]);
            n = -1;
        }
    if (n < 0) snprintf(err, errlen, "--dims: %s", msg);
    return n;
}

/* The TSV's column line and rows. */
static void table_rows(FILE *f, const seed_dot_row *rows, int nd, double uni) {
    fprintf(f, "d_k\tmean\tvar\tstd\tstd_pred\tstd_sqrt\tstd_dk\tent_raw\tent_sqrt\tent_dk\tstd_ratio\t"
               "mean_sqrt\tvar_sqrt\tmean_dk\tvar_dk\tpmax_raw\tpmax_sqrt\tpmax_dk\tent_uniform\n");
    for (int i = 0; i < nd; i++) {
        const seed_dot_row *r = &rows[i];
        fprintf(f, "%d\t%.4f\t%.3f\t%.4f\t%.4f\t%.4f\t%.5f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.6f\t%.6f\t%.4f\t%.4f\t%.4f\t%.4f\n",
                r->d, r->mean[SEED_RAW], r->var[SEED_RAW], r->std[SEED_RAW], r->std_pred, r->std[SEED_SQRT],
                r->std[SEED_DK], r->ent[SEED_RAW], r->ent[SEED_SQRT], r->ent[SEED_DK], r->std[SEED_RAW] / r->std_pred,
                r->mean[SEED_SQRT], r->var[SEED_SQRT], r->mean[SEED_DK], r->var[SEED_DK], r->pmax[SEED_RAW],
                r->pmax[SEED_SQRT], r->pmax[SEED_DK], uni);
    }
}

/* The summary on stderr: the variance against d_k, the entropies, the worst ratio. */
static void summary_lines(const seed_dot_row *rows, int nd, int pairs, int seed, int keys, int queries, double uni) {
    fprintf(stderr, "dot_variance: %d pairs per d_k (seed %d); entropy over T = %d keys, %d queries (uniform ln T = %.3f)\n",
            pairs, seed, keys, queries, uni);
    fprintf(stderr, "%6s %10s %9s %7s %9s %9s | %8s %8s %8s\n", "d_k", "var(q·k)", "std(q·k)", "√d_k", "std/√d_k",
            "std(/d_k)", "H raw", "H /√d_k", "H /d_k");
    double worst = 0;
    for (int i = 0; i < nd; i++) {
        const seed_dot_row *r = &rows[i];
        double ratio = r->std[SEED_RAW] / r->std_pred;
        worst = fabs(ratio - 1) > worst ? fabs(ratio - 1) : worst;
        fprintf(stderr, "%6d %10.2f %9.3f %7.3f %9.4f %9.5f | %8.3f %8.3f %8.3f\n", r->d, r->var[SEED_RAW],
                r->std[SEED_RAW], r->std_pred, ratio, r->std[SEED_DK], r->ent[SEED_RAW], r->ent[SEED_SQRT],
                r->ent[SEED_DK]);
    }
    fprintf(stderr, "dot_variance: std(q·k)/sqrt(d_k) is within %.1f%% of 1 at every d_k\n", 100 * worst);
    if (nd > 1)
        fprintf(stderr, "dot_variance: entropy from d_k = %d to %d: q·k %.3f -> %.3f, q·k/sqrt(d_k) %.3f -> %.3f, "
                "q·k/d_k %.3f -> %.3f (uniform %.3f)\n", rows[0].d, rows[nd - 1].d, rows[0].ent[SEED_RAW],
                rows[nd - 1].ent[SEED_RAW], rows[0].ent[SEED_SQRT], rows[nd - 1].ent[SEED_SQRT], rows[0].ent[SEED_DK],
                rows[nd - 1].ent[SEED_DK], uni);
}

int main(int argc, char **argv) {
    if (tg_runtime_init("dot_variance", argc, argv)) return 1;   /* first: it may restart the program; threads */
    const char *dims_s = "4,8,...,1024", *out = NULL;
    int pairs = 10000, queries = 1000, keys = 64, seed = 1;
    const tg_cli_opt opts[] = {
        {"dims", TG_CLI_STR, &dims_s, 0, 0, NULL, "d_k values: a comma list; 'a,b,...,z' continues the ratio b/a to z"},
        {"pairs", TG_CLI_INT, &pairs, 2, 10000000, NULL, "random q, k pairs per d_k for the moments"},
        {"queries", TG_CLI_INT, &queries, 1, 1000000, NULL, "queries per d_k for the softmax entropy"},
        {"keys", TG_CLI_INT, &keys, 2, 65536, NULL, "T: keys per query for the softmax entropy"},
        {"seed", TG_CLI_INT, &seed, 0, 2147483647, NULL, "seed of the draws (d_k is the stream)"},
        {"out", TG_CLI_STR, &out, 0, 0, NULL, "write the TSV to FILE (atomically) instead of stdout"},
    };
    const int nopt = (int)(sizeof opts / sizeof opts[0]);
    const char *summary = "Mean, variance and std of q·k, q·k/sqrt(d_k) and q·k/d_k over random N(0,1) pairs,\n"
                          "and the softmax entropy over T keys for each scaling.";
    char err[512];
    int rc = tg_cli_parse(opts, nopt, argc, argv, err, sizeof err, NULL);
    if (rc == TG_CLI_HELP) {
        tg_cli_usage(stdout, "dot_variance", summary, opts, nopt);
        return 0;
    }
    double dv[MAX_DIMS];
    int nd = 0;
    if (rc == TG_CLI_OK && (nd = parse_dims(dims_s, dv, err, sizeof err)) < 0) rc = TG_CLI_ERROR;
    if (rc != TG_CLI_OK) {
        fprintf(stderr, "dot_variance: %s\n", err);
        fprintf(stderr, "(dot_variance --help lists every flag)\n");
        return 2;
    }
    seed_out o;
    if (seed_out_open(&o, "out", out, err, sizeof err)) {
        fprintf(stderr, "dot_variance: %s\n", err);
        return 2;
    }

    seed_dot_cfg cfg = {pairs, queries, keys, (uint64_t)seed};
    seed_dot_row rows[MAX_DIMS];
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    int bad = 0;
    for (int i = 0; i < nd; i++)
        if (seed_dot_run(&ctx, &cfg, (int)dv[i], &rows[i])) {
            fprintf(stderr, "dot_variance: d_k = %d gave a non-finite statistic\n", (int)dv[i]);
            bad = 1;
        }
    tg_ctx_free(&ctx);
    if (bad) {
        seed_out_abort(&o);
        return 1;
    }

    double uni = log((double)keys);
    FILE *f = o.f;
    fprintf(f, "# tapegrad dot_variance: q·k of independent N(0,1) vectors; var predicted d_k, std sqrt(d_k)\n");
    tg_cli_dump(f, opts, nopt - 1);   /* not --out: where the file went is no property of its numbers */
    fprintf(f, "# columns: mean/var/std of q·k; std_pred = sqrt(d_k); std_sqrt, std_dk: std of q·k/sqrt(d_k), q·k/d_k;\n"
               "# ent_*: mean softmax entropy (nats) over T keys per scaling, ent_uniform = ln T; pmax_*: mean largest weight\n");
    table_rows(f, rows, nd, uni);
    if (seed_out_commit(&o, err, sizeof err)) {
        fprintf(stderr, "dot_variance: %s\n", err);
        return 2;
    }

    summary_lines(rows, nd, pairs, seed, keys, queries, uni);
    return 0;
}
