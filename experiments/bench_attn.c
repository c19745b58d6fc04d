/* bench_attn: one attention op alone, forward + backward, at a long sequence:
 * milliseconds, the process's peak resident memory, and the op's rate against
 * one 2048³ sgemm on as many threads.
 *   bench_attn --attn online --seq-len 4096     (B = 1, H = 4, d_head = 64; any kernel: tg_kernel.h)
 * The rate counts the T×T×d products the op performs (online: 7, QKᵀ again in
 * backward; saved and any other kernel: 6), 2·T²·d FLOPs each, half of it when causal.
 * --window W: a causal sliding window of W keys (tg_attn_args (W − 1, 0)); the
 * rate then counts the visible pairs, and the online op's time should follow
 * T·W, not T² (it skips the key tiles no row sees):
 *   bench_attn --seq-len 4096 --window 256     against --window 0
 * --kv-heads N: grouped-query heads (k, v with N heads, read in place).
 * Run one process per configuration: peak RSS is the process's. */
#include <cblas.h>
#include <omp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "tg_gemm_plan.h"
#include "tg_kernel.h"
#include "tg_cli.h"
#include "tg_ops.h"
#include "tg_blas.h"
#include "tg_runtime.h"
#include "tg_timing.h"

/* The best of reps forward + backward passes, in ms, after an untimed
 * planning pass whose new product shapes are timed (tg_gemm_plan_measure). */
static double best_of(tg_ctx *ctx, tg_params *P, tg_tensor *q, tg_tensor *k, tg_tensor *v, const float *dout,
                      const tg_attn_kernel *K, int causal, int window, int reps) {
    const int dh = q->shape[3];
    double best = 1e300;
    for (int i = -1; i < reps; i++) {   /* -1: the planning pass, untimed; its new shapes timed after it */
        if (i == 0) tg_gemm_plan_measure();
        double t0 = tg_timing_now_ms();
        tg_ctx_reset(ctx);
        tg_params_zero_grad(P);
        tg_attn_args a = tg_attn_args_make(q, k, v, 1.0f / sqrtf((float)dh));
        a.causal = causal;
        if (window) a.window_left = window - 1, a.window_right = 0;
        tg_tensor *out = tg_attn_kernel_call(ctx, K, &a);
        tg_backward_seed(ctx, out, dout);
        double t = tg_timing_now_ms() - t0;
        if (i >= 0) best = t < best ? t : best;
    }
    return best;
}

/* The (query, key) pairs a row sees, summed over rows: T²/2 when causal, fewer in a window. */
static double visible_pairs(tg_tensor *q, tg_tensor *k, tg_tensor *v, int T, int causal, int window) {
    double pairs = (causal ? 0.5 : 1.0) * T * (double)T;   /* the pairs a row sees: T²/2 when causal */
    if (window) {
        tg_attn_args a = tg_attn_args_make(q, k, v, 1.0f);
        a.causal = 1, a.window_left = window - 1, a.window_right = 0;
        pairs = 0;
        for (int i = 0; i < T; i++) {
            int lo, hi;
            tg_attn_visible(&a, 0, i, &lo, &hi);
            pairs += hi - lo;
        }
    }
    return pairs;
}

int main(int argc, char **argv) {
    if (tg_runtime_init("bench_attn", argc, argv)) return 1;   /* first: it may restart the program; threads */
    tg_gemm_plan_setup_env("bench_attn", "measure");   /* the product plan: this program's decision (TG_PLAN overrides) */
    const char *spec = "online";
    int T = 4096, B = 1, H = 4, dh = 64, threads = 1, reps = 2, causal = 1, sgemm = 1;
    int window = 0, kv_heads = 0;
    const tg_cli_opt opts[] = {
        {"attn", TG_CLI_STR, &spec, 0, 0, NULL, "attention kernel, as attn_scale --attn takes it (tg_kernel.h): saved, "
         "online, plugin:FILE.so[:SYMBOL], exec:CMD"},
        {"seq-len", TG_CLI_INT, &T, 1, 1 << 20, NULL, "T"},
        {"batch", TG_CLI_INT, &B, 1, 4096, NULL, "B"},
        {"heads", TG_CLI_INT, &H, 1, 256, NULL, "H"},
        {"d-head", TG_CLI_INT, &dh, 1, 4096, NULL, "d_head"},
        {"causal", TG_CLI_INT, &causal, 0, 1, NULL, "causal mask"},
        {"window", TG_CLI_INT, &window, 0, 1 << 20, NULL, "a sliding window of W keys, causal (0: none)"},
        {"kv-heads", TG_CLI_INT, &kv_heads, 0, 256, NULL, "key/value heads, dividing --heads (0: --heads)"},
        {"threads", TG_CLI_INT, &threads, 1, 256, NULL, "OpenMP threads"},
        {"reps", TG_CLI_INT, &reps, 1, 1000, NULL, "forward+backward repetitions (the best is reported)"},
        {"sgemm", TG_CLI_INT, &sgemm, 0, 1, NULL, "1: also the rate of a 2048³ sgemm on --threads threads"},
    };
    const int nopt = (int)(sizeof opts / sizeof opts[0]);
    char err[256];
    int rc = tg_cli_parse(opts, nopt, argc, argv, err, sizeof err, NULL);
    if (rc == TG_CLI_HELP) {
        tg_cli_usage(stdout, "bench_attn", "Time one attention op, forward + backward; report peak RSS.", opts, nopt);
        return 0;
    }
    if (rc != TG_CLI_OK) {
        fprintf(stderr, "bench_attn: %s\n", err);
        return 2;
    }
    if (window && !causal) {
        fprintf(stderr, "bench_attn: --window %d needs --causal 1 (a sliding window of earlier keys)\n", window);
        return 2;
    }
    const int Hkv = kv_heads ? kv_heads : H;
    if (H % Hkv) {
        fprintf(stderr, "bench_attn: --kv-heads %d does not divide --heads %d\n", Hkv, H);
        return 2;
    }
    tg_kernel K;
    if (tg_kernel_open(&K, spec, NULL, err, sizeof err)) {
        fprintf(stderr, "bench_attn: --attn %s\n", err);
        return 2;
    }
    tg_params P;
    tg_params_init(&P);
    int shape[4] = {B, T, H, dh}, kshape[4] = {B, T, Hkv, dh};
    tg_tensor *q = tg_param(&P, "q", 4, shape), *k = tg_param(&P, "k", 4, kshape), *v = tg_param(&P, "v", 4, kshape);
    tg_params_alloc(&P);
    tg_rng r;
    tg_rng_seed(&r, 1, 1);
    tg_fill_normal(&r, P.data, (int64_t)P.numel, 0.0f, 1.0f);
    float *dout = malloc(sizeof(float) * (size_t)B * T * H * dh);
    tg_fill_normal(&r, dout, (int64_t)B * T * H * dh, 0.0f, 1.0f);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 1 << 20);   /* small blocks: the arena holds about what the op asks for */
    const double best = best_of(&ctx, &P, q, k, v, dout, K.k, causal, window, reps);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double pairs = visible_pairs(q, k, v, T, causal, window);
    double gflop = (K.k == &tg_attn_kernel_online ? 7 : 6) * 2 * pairs * dh * B * H / 1e9;   /* online: QKᵀ again */
    printf("attn=%s B=%d T=%d H=%d kv_heads=%d d_head=%d causal=%d window=%d threads=%d ms=%.3f gflops=%.1f peak_rss_mb=%.1f arena_mb=%.1f",
           K.kind == TG_KERNEL_BUILTIN ? K.id : K.spec, B, T, H, Hkv, dh, causal, window, threads, best, gflop / (best / 1e3), ru.ru_maxrss / 1024.0,
           (double)ctx.arena_peak / (1 << 20));
    if (sgemm) {
        double peak = tg_timing_sgemm_gflops(2048, threads, 3);
        printf(" sgemm_gflops=%.1f of_sgemm=%.0f%%", peak, 100 * gflop / (best / 1e3) / peak);
    }
    tg_blas_info bi;
    tg_blas_info_get(&bi);
    const double fma = tg_timing_fma_gflops(bi.xsmm_bits, threads, 5);   /* the limit, at the products' width */
    printf(" fma_bits=%d fma_gflops=%.1f of_fma=%.0f%%", bi.xsmm_bits, fma, fma > 0 ? 100 * gflop / (best / 1e3) / fma : NAN);
    printf(" blas_core=%s libxsmm=%s tiles=%s\n", bi.core, bi.xsmm, tg_attn_tiles());
    free(dout);
    tg_ctx_free(&ctx);
    tg_params_free(&P);
    tg_kernel_close(&K);
    return 0;
}
