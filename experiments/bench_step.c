/* bench_step: milliseconds per full training step (forward, backward, clip,
 * AdamW: the kit's tg_train_update) of the toy transformer (attn_scale's model,
 * attn_cfg_model) at a named size, what the same step's matrix products alone
 * take in OpenBLAS, and the rate of one 2048³ sgemm on as many threads (the
 * machine's practical peak: of_peak is the step's share of it).
 *   bench_step --size seed --threads 2 --attn online
 * prints one line of key=value pairs (docs/speed.md). Tokens and targets
 * are uniform random: speed does not depend on the task. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "attn_cfg.h"
#include "tg_cli.h"
#include "malloc_count.h"
#include "tg_kernel.h"
#include "tg_model.h"
#include "tg_train.h"
#include "tg_ops.h"
#include "tg_optim.h"
#include "tg_blas.h"
#include "tg_runtime.h"
#include "tg_gemm_plan.h"
#include "tg_profile.h"
#include "tg_timing.h"
#include "tg_precision.h"

static const char *const size_names[] = {"small", "seed", "large", NULL};
/* V T D H d_head L B, as in the issue (and scripts/bench_torch.py) */
static const int sizes[][7] = {
    {64, 32, 64, 4, 16, 1, 16},
    {64, 64, 128, 4, 128, 1, 32},
    {256, 256, 256, 8, 32, 2, 16},
};

/* Forward matrix-product FLOPs (attention counted over the full T×T, as
 * PyTorch's reference does); a training step is taken as 3× this. */
static double forward_flops(const tg_model_cfg *c, int B) {
    double BT = (double)B * c->seq_len, D = c->d_model, HD = (double)c->heads * c->d_head;
    double layer = 2 * BT * D * HD * 4 + 2 * BT * D * 4 * D * 2
                 + 2.0 * B * c->heads * (double)c->seq_len * c->seq_len * c->d_head * 2;
    return c->layers * layer + 2 * BT * D * c->vocab;
}

/* ---- the step's matrix products, alone ------------------------------------ */
typedef struct { int ta, tb, M, N, K; } gemm_shape;

static void run_gemm(const gemm_shape *g, const float *A, const float *Bm, float *C) {
    int lda = g->ta ? g->M : g->K, ldb = g->tb ? g->K : g->N;
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans, g->M, g->N,
                g->K, 1.0f, A, lda, Bm, ldb, 0.0f, C, g->N);
}

/* Milliseconds for every matrix product of one step: the linear layers as one
 * OpenBLAS call each with `threads` threads; the per-head attention products
 * (strided [T, d_head] views, as the ops use them) single-threaded inside an
 * OpenMP loop over batch × heads, as the attention ops run them. */
static double sgemm_ms(const tg_model_cfg *c, int B, int threads, int reps) {
    const int BT = B * c->seq_len, D = c->d_model, HD = c->heads * c->d_head, T = c->seq_len;
    const int H = c->heads, dh = c->d_head, V = c->vocab;
    /* forward X[M,K]·W[K,N]; backward dX = dY·Wᵀ, dW = Xᵀ·dY */
    int lin[][2] = {{D, HD}, {D, HD}, {D, HD}, {HD, D}, {D, 4 * D}, {4 * D, D}};
    gemm_shape shapes[3 * (6 * 8 + 1)];
    int n = 0;
    for (int l = 0; l <= c->layers; l++)
        for (int i = 0; i < (l < c->layers ? 6 : 1); i++) {
            int K = l < c->layers ? lin[i][0] : D, N = l < c->layers ? lin[i][1] : V;
            shapes[n++] = (gemm_shape){0, 0, BT, N, K};
            shapes[n++] = (gemm_shape){0, 1, BT, K, N};
            shapes[n++] = (gemm_shape){1, 0, K, N, BT};
        }
    size_t big = (size_t)BT * 4 * D;
    if ((size_t)BT * V > big) big = (size_t)BT * V;
    if ((size_t)BT * HD > big) big = (size_t)BT * HD;
    float *A = calloc(big, sizeof(float)), *Bm = calloc(big, sizeof(float)), *C = calloc(big, sizeof(float));
    float *Q = calloc((size_t)BT * HD, sizeof(float)), *K2 = calloc((size_t)BT * HD, sizeof(float));
    float *P = calloc((size_t)threads * T * T, sizeof(float)), *O = calloc((size_t)BT * HD, sizeof(float));
    tg_fill_uniform(&(tg_rng){1, 3}, A, (int64_t)big, -1, 1);
    tg_fill_uniform(&(tg_rng){2, 3}, Bm, (int64_t)big, -1, 1);
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        double t0 = tg_timing_now_ms();
        openblas_set_num_threads(threads);
        for (int l = 0; l < c->layers; l++) {
            /* attention, per (b, h): S = Q Kᵀ, O = P V; backward dV = Pᵀ dO, dP = dO Vᵀ,
             * dQ = dS K, dK = dSᵀ Q */
            openblas_set_num_threads(1);
#pragma omp parallel for schedule(static) num_threads(threads)
            for (int bh = 0; bh < B * H; bh++) {
                int b = bh / H, h = bh % H;
                float *S = P + (size_t)omp_get_thread_num() * T * T;
                const float *q = Q + (size_t)b * T * HD + h * dh, *k = K2 + (size_t)b * T * HD + h * dh;
                float *o = O + (size_t)b * T * HD + h * dh;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, dh, 1, q, HD, k, HD, 0, S, T);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, dh, T, 1, S, T, k, HD, 0, o, HD);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, dh, T, 1, S, T, q, HD, 1, o, HD);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, dh, 1, q, HD, k, HD, 0, S, T);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, dh, T, 1, S, T, k, HD, 1, o, HD);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, dh, T, 1, S, T, q, HD, 1, o, HD);
            }
            openblas_set_num_threads(threads);
        }
        for (int i = 0; i < n; i++) run_gemm(&shapes[i], A, Bm, C);
        double t = tg_timing_now_ms() - t0;
        best = t < best ? t : best;
    }
    openblas_set_num_threads(1);
    free(A), free(Bm), free(C), free(Q), free(K2), free(P), free(O);
    return best;
}

/* The kit's step (tg_train_update) as the benchmark runs it: AdamW at a constant 1e-3, clip 1. */
static tg_train_cfg step_cfg(void) {
    tg_train_cfg c;
    tg_train_defaults(&c, "bench_step");
    c.steps = 1000000, c.lr = c.lr_min = 1e-3f, c.clip = 1.0f, c.warmup = 0;
    return c;
}

/* One training step; prof (or NULL) gets its phases. Returns the loss. */
static float train_step(tg_model *m, const tg_train_cfg *c, tg_train_optim *opt, tg_ctx *ctx, const int *tokens,
                        const int *targets, int B, tg_profile *prof) {
    tg_ctx_reset(ctx);
    if (prof) tg_profile_step_begin(prof);
    tg_tensor *l = tg_model_forward(m, ctx, tokens, targets, B, 0);
    if (prof) tg_profile_phase(prof, "forward (not in ops)");
    float gnorm, lr;
    tg_train_update(c, &m->P, opt, ctx, l, 0, prof, &gnorm, &lr);
    if (prof) tg_profile_step_end(prof, ctx);
    return l->data[0];
}

/* Random tokens and targets (PCG32 seed 1, stream 2). */
static void random_tokens(int *tokens, int *targets, int n, int vocab) {
    tg_rng rng;
    tg_rng_seed(&rng, 1, 2);
    for (int i = 0; i < n; i++) {
        tokens[i] = (int)tg_rng_below(&rng, (uint32_t)vocab);
        targets[i] = (int)tg_rng_below(&rng, (uint32_t)vocab);
    }
}

/* warmup untimed steps (the first the planning pass, its new shapes timed
 * after it), then steps timed into ms and cpu; the heap allocations of the
 * timed steps, and the last loss in *loss. */
static size_t timed_steps(tg_model *m, const tg_train_cfg *c, tg_train_optim *opt, tg_ctx *ctx, const int *tokens, const int *targets, int B,
                          int warmup, int steps, double *ms, double *cpu, float *loss) {
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) malloc_count_start();
        double t0 = tg_timing_now_ms(), c0 = tg_timing_cpu_ms();
        *loss = train_step(m, c, opt, ctx, tokens, targets, B, NULL);
        if (s == 0) tg_gemm_plan_measure();
        if (s >= warmup) {
            ms[s - warmup] = tg_timing_now_ms() - t0;
            cpu[s - warmup] = tg_timing_cpu_ms() - c0;
        }
    }
    return malloc_count_stop();
}

/* The step's matrix products alone in OpenBLAS, and the sgemm peak, beside the step's median med. */
static void print_sgemm(const tg_model_cfg *mc, int B, int threads, double gflop, double med) {
    double g = sgemm_ms(mc, B, threads, 5), peak = tg_timing_sgemm_gflops(2048, threads, 3);
    printf(" sgemm_ms=%.3f sgemm_gflops=%.1f sgemm_share=%.2f peak_gflops=%.1f of_peak=%.2f", g, gflop / (g / 1e3),
           g / med, peak, gflop / (med / 1e3) / peak);
}

/* steps more steps under the per-op profile, printed after head. */
static void profile_steps(tg_model *m, const tg_train_cfg *c, tg_train_optim *opt, tg_ctx *ctx, const int *tokens, const int *targets, int B,
                          int steps, double fma, const char *head) {
    tg_profile prof;
    tg_profile_init(&prof, 0);
    prof.peak_gflops = fma;
    tg_profile_attach(ctx, &prof);
    for (int s = 0; s < steps; s++) train_step(m, c, opt, ctx, tokens, targets, B, &prof);
    tg_profile_attach(ctx, NULL);
    fputs(head, stdout);
    tg_profile_print(&prof, stdout);
}

/* The machine's limit (the FMA peak at the width the products run at, on the step's threads), the
 * step's share of it, the loss and the kernels; into *bi, the BLAS; returns the peak. */
static double print_limit(int threads, double gflop, double med, float loss, tg_blas_info *bi) {
    tg_blas_info_get(bi);
    const double fma = tg_timing_fma_gflops(bi->xsmm_bits, threads, 5);
    printf(" fma_bits=%d fma_gflops=%.1f of_fma=%.3f", bi->xsmm_bits, fma, fma > 0 ? gflop / (med / 1e3) / fma : NAN);
    char plan[TG_PLAN_NAME_BUF];
    printf(" loss=%.4f blas_core=%s libxsmm=%s tiles=%s plan=%s\n", loss, bi->core, bi->xsmm, tg_attn_tiles(),
           tg_gemm_plan_name(plan));
    return fma;
}

/* attn_scale's model (attn_cfg_model) at a size's dimensions z (V T D H d_head L B; T seq_len when
 * not 0), on kernel K; its batch into *B. */
static tg_model_cfg size_model(const int *z, int seq_len, const tg_kernel *K, int *B) {
    attn_cfg a;
    attn_cfg_defaults(&a);
    a.vocab = z[0], a.seq_len = seq_len ? seq_len : z[1], a.d_model = z[2], a.heads = z[3], a.d_head = z[4];
    a.layers = z[5], a.batch = z[6];
    tg_model_cfg mc = attn_cfg_model(&a);
    mc.attn_kernel = K->k, mc.attn_measure = !tg_kernel_trusted(K);
    *B = a.batch;
    return mc;
}

int main(int argc, char **argv) {
    if (tg_runtime_init("bench_step", argc, argv)) return 1;   /* first: it may restart the program; threads */
    tg_gemm_plan_setup_env("bench_step", "measure");   /* the product plan: this program's decision (TG_PLAN overrides) */
    int size = 1, threads = 1, steps = 20, warmup = 3, seq_len = 0, sgemm = 1, profile = 0, precision = TG_FP32;
    const char *spec = "composed";
    const tg_cli_opt opts[] = {
        {"size", TG_CLI_CHOICE, &size, 0, 0, size_names, "small: V64 T32 D64 H4 dh16 L1 B16; seed: V64 T64 D128 H4 dh128 L1 B32; large: V256 T256 D256 H8 dh32 L2 B16"},
        {"threads", TG_CLI_INT, &threads, 1, 256, NULL, "threads (OpenMP; the sgemm reference gives OpenBLAS as many)"},
        {"steps", TG_CLI_INT, &steps, 1, 1000000, NULL, "timed steps"},
        {"warmup", TG_CLI_INT, &warmup, 1, 1000000, NULL, "untimed steps first (the first one grows the arena)"},
        {"attn", TG_CLI_STR, &spec, 0, 0, NULL, "attention kernel, as attn_scale --attn takes it (tg_kernel.h): saved, online, ..."},
        {"seq-len", TG_CLI_INT, &seq_len, 0, 1 << 20, NULL, "override the size's T (0: keep)"},
        {"sgemm", TG_CLI_INT, &sgemm, 0, 1, NULL, "1: also time the step's matrix products alone in OpenBLAS"},
        {"profile", TG_CLI_FLAG, &profile, 0, 0, NULL, "then profile --steps more steps and print where the time went, per op (tg_profile.h)"},
        {"precision", TG_CLI_CHOICE, &precision, 0, 0, precision_names, "the products' inputs (tg_ctx_set_precision; emulated: rounded operands, fp32 kernels); fp16 steps as bf16's (no loss scale)"},
    };
    const int nopt = (int)(sizeof opts / sizeof opts[0]);
    char err[256];
    int rc = tg_cli_parse(opts, nopt, argc, argv, err, sizeof err, NULL);
    if (rc == TG_CLI_HELP) {
        tg_cli_usage(stdout, "bench_step", "Time training steps of the toy transformer.", opts, nopt);
        return 0;
    }
    if (rc != TG_CLI_OK) {
        fprintf(stderr, "bench_step: %s\n", err);
        return 2;
    }
    tg_kernel K;
    if (tg_kernel_open(&K, spec, NULL, err, sizeof err)) {
        fprintf(stderr, "bench_step: --attn %s\n", err);
        return 2;
    }
    int B;
    const tg_model_cfg mc = size_model(sizes[size], seq_len, &K, &B);
    const tg_train_cfg tc = step_cfg();
    const int T = mc.seq_len;
    const char *attn = K.kind == TG_KERNEL_BUILTIN ? K.id : K.spec;

    tg_model m;
    tg_model_init(&m, &mc, 1);
    tg_train_optim opt;   /* step_cfg's: AdamW 0.9, 0.95, eps 1e-8, no decay */
    tg_train_optim_init(&tc, &m.P, &opt);
    int *tokens = malloc(sizeof(int) * (size_t)B * T), *targets = malloc(sizeof(int) * (size_t)B * T);
    random_tokens(tokens, targets, B * T, mc.vocab);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_ctx_set_precision(&ctx, precision);
    /* wall time, and the CPU time of all threads (on a busy machine it leaves
     * out the time the process waited for a core) */
    double *ms = malloc(sizeof(double) * (size_t)steps), *cpu = malloc(sizeof(double) * (size_t)steps);
    float loss = 0;
    const size_t allocs = timed_steps(&m, &tc, &opt, &ctx, tokens, targets, B, warmup, steps, ms, cpu, &loss);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double peak_mb = ru.ru_maxrss / 1024.0;   /* before the sgemm timing allocates its own buffers */
    double med = tg_timing_median(ms, steps), cpu_med = tg_timing_median(cpu, steps);   /* sorts: ms[0] is the min */
    double gflop = 3 * forward_flops(&mc, B) / 1e9;
    /* emulated=1: no bf16/fp16 product kernels, the rounding is extra work (no speed claim) */
    printf("size=%s threads=%d attn=%s precision=%s emulated=%d T=%d median_ms=%.3f min_ms=%.3f max_ms=%.3f gflops=%.1f peak_rss_mb=%.1f "
           "allocs_per_step=%.2f cpu_ms=%.3f",
           size_names[size], threads, attn, precision_names[precision], precision != TG_FP32, T, med, ms[0], ms[steps - 1], gflop / (med / 1e3), peak_mb,
           (double)allocs / steps, cpu_med);
    if (sgemm) print_sgemm(&mc, B, threads, gflop, med);
    tg_blas_info bi;
    const double fma = print_limit(threads, gflop, med, loss, &bi);
    if (profile) {   /* after the timed steps, so that they are timed as without it */
        char head[6000], what[1200], plan_blas[256];
        snprintf(head, sizeof head,
                 "# bench_step --profile: size=%s threads=%d attn=%s T=%d; plan %s; blas=%s; attention tiles=%s\n",
                 size_names[size], threads, attn, T, tg_gemm_plan_describe(what, sizeof what),
                 tg_blas_info_str(&bi, plan_blas, sizeof plan_blas), tg_attn_tiles());
        profile_steps(&m, &tc, &opt, &ctx, tokens, targets, B, steps, fma, head);
    }
    free(ms);
    free(cpu);
    free(tokens);
    free(targets);
    tg_ctx_free(&ctx);
    tg_train_optim_free(&tc, &opt);
    tg_model_free(&m);
    tg_kernel_close(&K);
    return 0;
}
