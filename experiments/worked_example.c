/* worked_example: the seed's attention by hand (3 tokens, d_k = 4), step by
 * step with tapegrad's ops, checked against the seed's printed numbers and
 * against one tg_attention call; then d Σ output / d Q, K, V.
 * stdout (or --out FILE): the steps as '#' lines, then a TSV, one row per
 * entry. Exit 0 only if every step matches the seed and both paths agree. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>

#include "tg_cli.h"
#include "seedfig.h"
#include "tg_blas.h"
#include "tg_runtime.h"

/* "#   [ 0.506  0.186  0.307]" rows of two matrices side by side. */
static void print_pair(FILE *f, const char *title, const float *a, const float *b, int rows, int cols,
                       int prec) {
    fprintf(f, "# %s\n", title);
    for (int i = 0; i < rows; i++) {
        fprintf(f, "#   [");
        for (int j = 0; j < cols; j++) fprintf(f, "%s%*.*f", j ? " " : "", prec + 3, prec, a[i * cols + j]);
        fprintf(f, "]");
        if (b) {
            fprintf(f, "    [");
            for (int j = 0; j < cols; j++) fprintf(f, "%s%*.*f", j ? " " : "", prec + 3, prec, b[i * cols + j]);
            fprintf(f, "]");
        }
        fprintf(f, "\n");
    }
}

static void tsv_rows(FILE *f, const char *name, const float *v, const float *seed, int rows, int cols) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            float x = v[i * cols + j];
            if (seed)
                fprintf(f, "%s\t%d\t%d\t%.6f\t%.3f\t%.6f\n", name, i, j, x, seed[i * cols + j],
                        fabs((double)x - seed[i * cols + j]));
            else
                fprintf(f, "%s\t%d\t%d\t%.6f\tnan\tnan\n", name, i, j, x);
        }
}

int main(int argc, char **argv) {
    if (tg_runtime_init("worked_example", argc, argv)) return 1;   /* first: it may restart the program; threads */
    const char *out = NULL;
    const tg_cli_opt opts[] = {
        {"out", TG_CLI_STR, &out, 0, 0, NULL, "write the output to FILE (atomically) instead of stdout"},
    };
    const int nopt = (int)(sizeof opts / sizeof opts[0]);
    const char *summary = "The seed's worked example (Q Kᵀ, / √4, row softmax, times V) with tapegrad's ops,\n"
                          "checked against the seed's numbers and tg_attention; then d Σ out / d Q, K, V.";
    char err[512];
    int rc = tg_cli_parse(opts, nopt, argc, argv, err, sizeof err, NULL);
    if (rc == TG_CLI_HELP) {
        tg_cli_usage(stdout, "worked_example", summary, opts, nopt);
        return 0;
    }
    if (rc != TG_CLI_OK) {
        fprintf(stderr, "worked_example: %s\n", err);
        fprintf(stderr, "(worked_example --help lists every flag)\n");
        return 2;
    }
    seed_out o;
    if (seed_out_open(&o, "out", out, err, sizeof err)) {
        fprintf(stderr, "worked_example: %s\n", err);
        return 2;
    }
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    seed_worked w;
    seed_worked_run(&ctx, &w);
    tg_ctx_free(&ctx);
    int ok = seed_worked_ok(&w);

    FILE *f = o.f;
    fprintf(f, "# tapegrad worked_example: Attention(Q, K, V) = softmax(Q Kᵀ / sqrt(d_k)) V, 3 tokens, d_k = 4\n");
    print_pair(f, "inputs: Q (left), K (right)", &seed_Q[0][0], &seed_K[0][0], 3, 4, 0);
    print_pair(f, "V", &seed_V[0][0], NULL, 3, 2, 0);
    fprintf(f, "#\n# each step: tapegrad (left), the seed (right)\n");
    print_pair(f, "Step 1: Q Kᵀ (tg_matmul)", &w.scores[0][0], &seed_scores[0][0], 3, 3, 3);
    print_pair(f, "Step 2: divide by sqrt(4) = 2 (tg_scale 0.5)", &w.scaled[0][0], &seed_scaled[0][0], 3, 3, 3);
    print_pair(f, "Step 3: softmax of each row (tg_softmax)", &w.weights[0][0], &seed_weights[0][0], 3, 3, 3);
    print_pair(f, "Step 4: weights times V (tg_matmul)", &w.out[0][0], &seed_output[0][0], 3, 2, 3);
    fprintf(f, "# largest |tapegrad - seed| over the four steps: %.2e (tolerance %.0e: %s)\n", w.seed_diff,
            SEED_TOL, w.seed_diff <= SEED_TOL ? "match" : "MISMATCH");
    fprintf(f, "#\n# one tg_attention call (scale 1/sqrt(4)): weights (tg_attention_probs), output\n");
    print_pair(f, "weights", &w.weights_attn[0][0], NULL, 3, 3, 3);
    print_pair(f, "output", &w.out_attn[0][0], NULL, 3, 2, 3);
    fprintf(f, "#\n# gradient of sum(output) (composed path; tg_attention gives the same)\n");
    print_pair(f, "d/dQ", &w.dQ[0][0], NULL, 3, 4, 4);
    print_pair(f, "d/dK", &w.dK[0][0], NULL, 3, 4, 4);
    print_pair(f, "d/dV (column sums of the weights)", &w.dV[0][0], NULL, 3, 2, 4);
    fprintf(f, "# largest |composed - tg_attention| over weights, output and gradients: %.2e (tolerance 1e-05: %s)\n",
            w.path_diff, w.path_diff <= 1e-5 ? "agree" : "DISAGREE");
    fprintf(f, "quantity\ti\tj\tvalue\tseed\tabs_diff\n");
    tsv_rows(f, "scores", &w.scores[0][0], &seed_scores[0][0], 3, 3);
    tsv_rows(f, "scaled", &w.scaled[0][0], &seed_scaled[0][0], 3, 3);
    tsv_rows(f, "weights", &w.weights[0][0], &seed_weights[0][0], 3, 3);
    tsv_rows(f, "out", &w.out[0][0], &seed_output[0][0], 3, 2);
    tsv_rows(f, "weights_attn", &w.weights_attn[0][0], &seed_weights[0][0], 3, 3);
    tsv_rows(f, "out_attn", &w.out_attn[0][0], &seed_output[0][0], 3, 2);
    tsv_rows(f, "dQ", &w.dQ[0][0], NULL, 3, 4);
    tsv_rows(f, "dK", &w.dK[0][0], NULL, 3, 4);
    tsv_rows(f, "dV", &w.dV[0][0], NULL, 3, 2);
    if (seed_out_commit(&o, err, sizeof err)) {
        fprintf(stderr, "worked_example: %s\n", err);
        return 2;
    }

    fprintf(stderr, "worked_example: the four steps %s the seed's numbers (largest difference %.2e, tolerance %.0e)\n",
            w.seed_diff <= SEED_TOL ? "match" : "DO NOT match", w.seed_diff, SEED_TOL);
    fprintf(stderr, "worked_example: composed ops and tg_attention %s (largest difference %.2e over weights, "
            "output and d/dQ, d/dK, d/dV)\n", w.path_diff <= 1e-5 ? "agree" : "DISAGREE", w.path_diff);
    if (!w.finite) fprintf(stderr, "worked_example: a value or gradient is NaN or infinite\n");
    fprintf(stderr, "worked_example: %s\n", ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}
