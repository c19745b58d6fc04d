/* bench_gemm: every matrix product of a training step of the toy transformer,
 * each timed on OpenBLAS and on libxsmm, and the library ops/gemm.c picks.
 *   bench_gemm --size seed --threads 2
 * One line per distinct product (count: how many a step makes), then the sum
 * over the step with OpenBLAS only, libxsmm wherever it can, and the plans'
 * picks. Linear layers run as tg_matmul runs them (tiles or row blocks over
 * the threads); per-head attention products as the attention op runs them
 * (one head a thread, strided [T, d] views of [B·T, H·d]). Times: the best of
 * --reps runs, µs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_cli.h"
#include "gemm.h"
#include "tg_gemm_plan.h"
#include "parallel.h"
#include "tg_blas.h"
#include "tg_runtime.h"
#include "tg_core.h"
#include "tg_timing.h"

static const char *const size_names[] = {"small", "seed", "large", NULL};
/* V T D H d_head L B, as bench_step's sizes */
static const int sizes[][7] = {
    {64, 32, 64, 4, 16, 1, 16},
    {64, 64, 128, 4, 128, 1, 32},
    {256, 256, 256, 8, 32, 2, 16},
};

enum { WHOLE, HEAD, SCRATCH };   /* where an operand lives: a whole matrix, a head's view, per-thread scratch */

typedef struct {
    char what[24];
    int ta, tb, M, N, K, lda, ldb, ldc, count;
    float beta;
    int kind[3];   /* of A, B, C */
    int op_transposes;   /* tb = 1 and the op makes Bᵀ first and runs B un-transposed */
} product;

typedef struct {
    const product *p;
    const tg_gemm_call *plan;
    float *buf[3];
    int T, HD, d, H;
    float *bt;   /* non-NULL: B transposed into here first (per thread: K·N floats each) */
} head_job;

static float *operand(const head_job *j, int which, int bh, int thread) {
    switch (j->p->kind[which]) {
    case HEAD: return j->buf[which] + (int64_t)(bh / j->H) * j->T * j->HD + (int64_t)(bh % j->H) * j->d;
    case SCRATCH: return j->buf[which] + (int64_t)thread * j->T * (j->T > j->d ? j->T : j->d);
    default: return j->buf[which];
    }
}

/* With bt: B [N,K] (row stride ldb) is transposed first, as the ops do, and
 * the plan runs on the transposed copy. */
static void run_one(const head_job *j, const float *A, const float *B, float *C, float *bt) {
    const product *p = j->p;
    if (bt) {
        tg_transpose(B, p->ldb, p->N, p->K, bt);
        B = bt;
    }
    tg_gemm_run(j->plan, A, B, C);
}

static void head_item(void *arg, int bh, int thread) {
    const head_job *j = arg;
    run_one(j, operand(j, 0, bh, thread), operand(j, 1, bh, thread), operand(j, 2, bh, thread),
            j->bt ? j->bt + (int64_t)thread * j->p->K * j->p->N : NULL);
}

static int n_products;
static product products[64];

static void add(const char *what, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, float beta,
                int count, int ka, int kb, int kc) {
    product *p = &products[n_products++];
    *p = (product){ .ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc,
                    .count = count, .beta = beta, .kind = {ka, kb, kc} };
    snprintf(p->what, sizeof p->what, "%s", what);
}

/* y[BT, out] = x[BT, in] · W[in, out]: forward, dx = dy·Wᵀ, dW = xᵀ·dy */
static void linear(const char *name, int BT, int in, int out, int count) {
    char w[24];
    snprintf(w, sizeof w, "%s.fwd", name);
    add(w, 0, 0, BT, out, in, in, out, out, 0.0f, count, WHOLE, WHOLE, WHOLE);
    snprintf(w, sizeof w, "%s.dx", name);
    add(w, 0, 1, BT, in, out, out, out, in, 1.0f, count, WHOLE, WHOLE, WHOLE);
    products[n_products - 1].op_transposes = BT >= 256;   /* as tg_matmul (TRANSPOSE_MIN_ROWS) */
    snprintf(w, sizeof w, "%s.dW", name);
    add(w, 1, 0, in, out, BT, in, out, out, 1.0f, count, WHOLE, WHOLE, WHOLE);
}

/* Times the product with plan p (with Bᵀ made first into bt if not NULL),
 * best of reps runs. */
static double time_plan(const product *pr, const tg_gemm_call *p, float **buf, int heads, int T, int HD, int d,
                        int H, int reps, float *bt) {
    head_job j = { pr, p, {buf[0], buf[1], buf[2]}, T, HD, d, H, bt };
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        double t0 = 1e3 * tg_timing_now_ms();
        if (heads) {
            int blas = tg_blas_serial_begin();
            tg_parallel_for(heads, (int64_t)heads * pr->M * pr->N * pr->K, head_item, &j);
            tg_blas_serial_end(blas);
        } else {
            const float *B = buf[1];
            if (bt) {
                tg_transpose(B, pr->ldb, pr->N, pr->K, bt);
                B = bt;
            }
            tg_gemm_run_threads(p, buf[0], B, buf[2]);
        }
        double t = 1e3 * tg_timing_now_ms() - t0;
        best = t < best ? t : best;
    }
    return best;
}

/* The products of one training step of model size z (bench_step's sizes), into products[]. */
static void add_step_products(const int *z) {
    const int V = z[0], T = z[1], D = z[2], H = z[3], d = z[4], L = z[5], B = z[6], BT = B * T, HD = H * d;
    linear("qkv", BT, D, HD, 3 * L);
    linear("o", BT, HD, D, L);
    linear("w1", BT, D, 4 * D, L);
    linear("w2", BT, 4 * D, D, L);
    linear("out", BT, D, V, 1);
    /* attention per head, as ops/attention.c: S = Q Kᵀ, O = P V; dV += Pᵀ dO,
     * dP = dO Vᵀ, G = dL K, dK += dLᵀ Q */
    add("attn.QKt", 0, 1, T, T, d, HD, HD, T, 0.0f, L, HEAD, HEAD, SCRATCH);
    products[n_products - 1].op_transposes = T >= 2 * d;   /* as tg_attention (transpose_first) */
    add("attn.PV", 0, 0, T, d, T, T, HD, HD, 0.0f, L, SCRATCH, HEAD, HEAD);
    add("attn.PtdO", 1, 0, T, d, T, T, HD, HD, 1.0f, L, SCRATCH, HEAD, HEAD);
    add("attn.dOVt", 0, 1, T, T, d, HD, HD, T, 0.0f, L, HEAD, HEAD, SCRATCH);
    products[n_products - 1].op_transposes = T >= 2 * d;
    add("attn.dLK", 0, 0, T, d, T, T, HD, d, 0.0f, L, SCRATCH, HEAD, SCRATCH);
    add("attn.dLtQ", 1, 0, T, d, T, T, HD, HD, 1.0f, L, SCRATCH, HEAD, HEAD);
}

typedef struct {
    int T, HD, d, H, B, reps;
    float **buf, *bt;
} bench_env;
typedef struct { double blas, xsmm, pick, worst; } totals;

/* One product on OpenBLAS, on libxsmm and on the plan's pick: its line, and the step's totals. */
static void bench_product(const product *p, const bench_env *e, totals *t) {
    int heads = p->kind[2] == WHOLE ? 0 : e->B * e->H;
    /* libxsmm's column for a transposed B: Bᵀ made first (its time included), as the ops may */
    tg_gemm_call pick, blas, xsmm;
    int blocks = !heads;   /* a whole matrix runs as tg_matmul runs it: tg_gemm_run_threads */
    tg_gemm_call_make(&blas, p->ta, p->tb, p->M, p->N, p->K, 1.0f, p->lda, p->ldb, p->beta, p->ldc, blocks);
    tg_gemm_call_make(&xsmm, p->ta, 0, p->M, p->N, p->K, 1.0f, p->lda, p->tb ? p->N : p->ldb, p->beta, p->ldc,
                      blocks);
    /* tg_matmul makes Bᵀ only where the plan puts that product on libxsmm (else
     * OpenBLAS takes B transposed); the attention op by its own rule (T >= 2d) */
    int transposes = p->tb && p->op_transposes && (heads || xsmm.xsmm);
    pick = transposes ? xsmm : blas;
    blas.xsmm = 0;
    int has_xsmm = tg_gemm_call_xsmm(&xsmm);
    float *btx = p->tb ? e->bt : NULL, *btp = transposes ? e->bt : NULL;
    double tb = time_plan(p, &blas, e->buf, heads, e->T, e->HD, e->d, e->H, e->reps, NULL);
    double tx = has_xsmm ? time_plan(p, &xsmm, e->buf, heads, e->T, e->HD, e->d, e->H, e->reps, btx) : NAN;
    double tp = pick.xsmm ? time_plan(p, &pick, e->buf, heads, e->T, e->HD, e->d, e->H, e->reps, btp) : tb;
    double flop = 2.0 * p->M * p->N * p->K * (heads ? heads : 1);
    t->blas += p->count * tb;
    t->xsmm += p->count * (has_xsmm ? tx : tb);
    t->pick += p->count * tp;
    /* the picked library's own column over the faster column (the pick's separate
     * timing, tp, is for the step total; comparing it would compare noise) */
    double best = has_xsmm && tx < tb ? tx : tb, vs = (pick.xsmm ? tx : transposes ? tp : tb) / best;
    t->worst = vs > t->worst ? vs : t->worst;
    printf("%-10s %2d %2d %5d %5d %5d %5d %10.1f %10.1f %9.1f %9.1f %-8s %.3f\n", p->what, p->ta, p->tb, p->M, p->N,
           p->K, p->count, tb, tx, flop / tb / 1e3, flop / tx / 1e3, tg_gemm_backend(&pick), vs);
}

int main(int argc, char **argv) {
    if (tg_runtime_init("bench_gemm", argc, argv)) return 1;   /* first: it may restart the program; threads */
    tg_gemm_plan_setup_env("bench_gemm", "measure");   /* the product plan: this program's decision (TG_PLAN overrides) */
    int size = 1, threads = 1, reps = 20;
    const tg_cli_opt opts[] = {
        {"size", TG_CLI_CHOICE, &size, 0, 0, size_names, "model size, as bench_step's"},
        {"threads", TG_CLI_INT, &threads, 1, 256, NULL, "OpenMP threads"},
        {"reps", TG_CLI_INT, &reps, 1, 100000, NULL, "runs of each product (the best is reported)"},
    };
    const int nopt = (int)(sizeof opts / sizeof opts[0]);
    char err[256];
    int rc = tg_cli_parse(opts, nopt, argc, argv, err, sizeof err, NULL);
    if (rc == TG_CLI_HELP) {
        tg_cli_usage(stdout, "bench_gemm", "Time a training step's matrix products on OpenBLAS and libxsmm.", opts,
                  nopt);
        return 0;
    }
    if (rc != TG_CLI_OK) {
        fprintf(stderr, "bench_gemm: %s\n", err);
        return 2;
    }
    const int *z = sizes[size];
    const int T = z[1], H = z[3], d = z[4], B = z[6], BT = B * T, HD = H * d;
    add_step_products(z);
    size_t need = (size_t)BT * HD + (size_t)threads * T * (T > d ? T : d);
    for (int i = 0; i < n_products; i++) {
        const product *p = &products[i];
        size_t a = (size_t)p->M * p->K, b = (size_t)p->K * p->N, c = (size_t)p->M * p->N;
        size_t m = a > b ? a : b;
        m = m > c ? m : c;
        need = need > m ? need : m;
    }
    float *buf[3], *bt = malloc((size_t)threads * need * sizeof(float));   /* Bᵀ, per thread */
    tg_rng rng = {7, 1};
    for (int i = 0; i < 3; i++) {
        buf[i] = malloc(need * sizeof(float));
        tg_fill_uniform(&rng, buf[i], (int64_t)need, -1.0f, 1.0f);
    }
    for (int i = 0; i < n_products; i++) {   /* the planning pass: each shape looked up, then timed */
        const product *p = &products[i];
        tg_gemm_call c;
        tg_gemm_call_make(&c, p->ta, 0, p->M, p->N, p->K, 1.0f, p->lda, p->tb ? p->N : p->ldb, p->beta, p->ldc,
                          p->kind[2] == WHOLE);
    }
    tg_gemm_plan_measure();

    tg_blas_info bi;
    char blas[160];
    tg_blas_info_get(&bi);
    printf("# size=%s threads=%d reps=%d blas=%s libxsmm_target=%s; us = best run of one product (heads: all B*H)\n",
           size_names[size], threads, reps, tg_blas_info_str(&bi, blas, sizeof blas), tg_gemm_target());
    printf("%-10s %2s %2s %5s %5s %5s %5s %10s %10s %9s %9s %-8s %s\n", "product", "ta", "tb", "M", "N", "K", "count",
           "openblas_us", "libxsmm_us", "oblas_GF/s", "xsmm_GF/s", "pick", "pick_vs_best");
    const bench_env e = {T, HD, d, H, B, reps, buf, bt};
    totals t = {0};
    for (int i = 0; i < n_products; i++) bench_product(&products[i], &e, &t);
    char plan[TG_PLAN_NAME_BUF];
    printf("step total: openblas_us=%.1f libxsmm_where_possible_us=%.1f picked_us=%.1f worst_pick_vs_best=%.3f "
           "plan=%s\n", t.blas, t.xsmm, t.pick, t.worst, tg_gemm_plan_name(plan));
    for (int i = 0; i < 3; i++) free(buf[i]);
    free(bt);
    return 0;
}
