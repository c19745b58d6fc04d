/* blas_info: what BLAS kernel tapegrad's programs run with on this machine.
 *   blas_info                  one line: library, version, core, who chose it, threads, the CPU's best core
 *   blas_info --best-core      the core for OPENBLAS_CORETYPE that fits this CPU (scripts/bench.sh gives it to PyTorch)
 *   blas_info --sgemm 2048 --threads 2    the sgemm rate, N×N×N, median of --reps
 *   blas_info --selfcheck 20   the start-up self-check's time, median of 20
 *   blas_info --fma --threads 2   the FMA peak (the core's limit) at 512 and 256 bits, and the width the products use
 * It starts as every program does (tg_runtime_init), so it reports the kernel
 * they get; with OPENBLAS_CORETYPE set it reports that one. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "tg_cli.h"
#include "tg_blas.h"
#include "tg_runtime.h"
#include "tg_core.h"
#include "tg_timing.h"

/* --sgemm N: the median of reps N×N by N×N products after one untimed; 0, or 1 out of memory (said). */
static int time_sgemm(int n, int threads, int reps) {
    float *A = malloc(sizeof(float) * 3 * (size_t)n * n);
    double *ms = malloc(sizeof(double) * (size_t)reps);
    if (!A || !ms) {
        fprintf(stderr, "blas_info: out of memory for --sgemm %d\n", n);
        free(A);
        free(ms);
        return 1;
    }
    tg_fill_uniform(&(tg_rng){1, 3}, A, 2 * (int64_t)n * n, -1, 1);
    for (int r = -1; r < reps; r++) {
        double t0 = tg_timing_now_ms();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, A + (size_t)n * n, n, 0.0f,
                    A + 2 * (size_t)n * n, n);
        if (r >= 0) ms[r] = tg_timing_now_ms() - t0;
    }
    double med = tg_timing_median(ms, reps);
    printf(" sgemm_n=%d sgemm_threads=%d sgemm_ms=%.2f sgemm_gflops=%.1f", n, threads, med,
           2.0 * n * n * (double)n / (med * 1e6));
    free(A);
    free(ms);
    return 0;
}

/* --selfcheck N: the start-up self-check timed N times; 0, or 1 out of memory (said). */
static int time_selfcheck(const char *core, int checks) {
    double *ms = malloc(sizeof(double) * (size_t)checks);
    char detail[256];
    int res = TG_CHECK_PASSED;
    for (int i = 0; i < checks && ms; i++) {
        double t0 = tg_timing_now_ms();
        int r = tg_blas_selfcheck(core, detail, sizeof detail);
        ms[i] = tg_timing_now_ms() - t0;
        if (r != TG_CHECK_PASSED) res = r;
    }
    if (!ms) {
        fprintf(stderr, "blas_info: out of memory\n");
        return 1;
    }
    printf(" selfcheck_runs=%d selfcheck_ms=%.2f selfcheck=%s", checks, tg_timing_median(ms, checks),
           res == TG_CHECK_PASSED ? "passed" : "FAILED");
    free(ms);
    return 0;
}

int main(int argc, char **argv) {
    int rc = tg_runtime_init("blas_info", argc, argv);
    if (rc) return rc;
    int best_core = 0, n = 0, threads = 1, reps = 5, checks = 0, fma = 0;
    const tg_cli_opt opts[] = {
        {"best-core", TG_CLI_FLAG, &best_core, 0, 0, NULL, "print only the OpenBLAS core that fits this CPU"},
        {"sgemm", TG_CLI_INT, &n, 0, 16384, NULL, "time cblas_sgemm of N×N by N×N (0: no)"},
        {"threads", TG_CLI_INT, &threads, 1, 256, NULL, "OpenBLAS threads for --sgemm; threads for --fma"},
        {"fma", TG_CLI_FLAG, &fma, 0, 0, NULL, "measure the FMA peak (FP32, GFLOP/s) at 512 and 256 bits on --threads"},
        {"reps", TG_CLI_INT, &reps, 1, 1000, NULL, "--sgemm repetitions after one untimed (the median is reported)"},
        {"selfcheck", TG_CLI_INT, &checks, 0, 100000, NULL, "time the start-up sgemm self-check this many times (0: no)"},
    };
    const int nopt = (int)(sizeof opts / sizeof opts[0]);
    char err[256];
    rc = tg_cli_parse(opts, nopt, argc, argv, err, sizeof err, NULL);
    if (rc == TG_CLI_HELP) {
        tg_cli_usage(stdout, "blas_info", "Say which BLAS kernel tapegrad runs with here; time sgemm and the self-check.",
                  opts, nopt);
        return 0;
    }
    if (rc != TG_CLI_OK) {
        fprintf(stderr, "blas_info: %s\n", err);
        return 2;
    }
    tg_cpu_features cpu = tg_cpu_detect();
    const char *best = tg_blas_best_core(&cpu);
    if (best_core) {
        if (!best) {
            fprintf(stderr, "blas_info: this CPU lacks SSE3: no OpenBLAS x86-64 core fits it\n");
            return 1;
        }
        printf("%s\n", best);
        return 0;
    }
    tg_blas_info b;
    char line[256];
    if (n) openblas_set_num_threads(threads);
    tg_blas_info_get(&b);
    printf("%s cpu_best=%s", tg_blas_info_str(&b, line, sizeof line), best ? best : "none");
    if (n && time_sgemm(n, threads, reps)) return 1;
    if (fma) {   /* 0: the CPU lacks that width */
        printf(" fma512_gflops=%.1f fma256_gflops=%.1f code_bits=%d fma_threads=%d",
               tg_timing_fma_gflops(512, threads, reps), tg_timing_fma_gflops(256, threads, reps),
               b.xsmm_bits, threads);
    }
    if (checks && time_selfcheck(b.core, checks)) return 1;
    printf("\n");
    return 0;
}
