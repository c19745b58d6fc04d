/* The seed's own figures, computed with tapegrad's ops: the worked example,
 * the variance of q·k, and softmax saturation with its vanishing gradient.
 * Shared by the binaries worked_example, dot_variance and softmax_saturation
 * and by tests/test_seed_figures.c.
 *
 * Every *_run function resets the context it is given and uses it as scratch;
 * misuse goes to that context's error handler. Statistics (means, medians,
 * entropies) are reductions in double over what the ops produced. */
#ifndef TG_SEEDFIG_H
#define TG_SEEDFIG_H
#include <stddef.h>
#include <stdio.h>
#include "tg_core.h"
#include "tg_file.h"

/* ---- the worked example (../shared/worked-example.md) -------------------- */
extern const float seed_Q[3][4], seed_K[3][4], seed_V[3][2];
/* The seed's printed steps: Q Kᵀ, / √4, row softmax (3 decimals), times V (3 decimals). */
extern const float seed_scores[3][3], seed_scaled[3][3], seed_weights[3][3], seed_output[3][2];
#define SEED_TOL 5e-4   /* half a unit in the seed's third decimal */

typedef struct {
    /* composed: tg_matmul, tg_scale(1/√4), tg_softmax, tg_matmul */
    float scores[3][3], scaled[3][3], weights[3][3], out[3][2];
    float dQ[3][4], dK[3][4], dV[3][2];        /* d Σ out / d Q, K, V */
    /* one tg_attention call: B = 1, T = 3, H = 1, d = 4, dv = 2, scale 1/√4 */
    float weights_attn[3][3], out_attn[3][2];
    float dQ_attn[3][4], dK_attn[3][4], dV_attn[3][2];
    double seed_diff;   /* largest |computed − seed| over the four steps */
    double path_diff;   /* largest |composed − tg_attention| over weights, out and grads */
    int finite;         /* 1 if no value or grad is NaN or inf */
} seed_worked;

void seed_worked_run(tg_ctx *ctx, seed_worked *w);
/* 1 when the steps match the seed within SEED_TOL and the two paths agree within 1e-5. */
int seed_worked_ok(const seed_worked *w);

/* ---- the variance of q·k ------------------------------------------------- */
/* The three scalings of a dot product: q·k, q·k/√d_k, q·k/d_k. */
enum { SEED_RAW, SEED_SQRT, SEED_DK, SEED_NSCALE };
extern const char *const seed_scale_names[];   /* "raw", "sqrt", "dk" */
double seed_scale_factor(int scaling, int d);

typedef struct {
    int pairs;      /* q, k pairs for the moments */
    int queries;    /* query rows for the softmax entropy */
    int keys;       /* T: keys per query */
    uint64_t seed;
} seed_dot_cfg;

typedef struct {
    int d;
    double std_pred;                  /* √d_k */
    /* per scaling (SEED_RAW, SEED_SQRT, SEED_DK): */
    double mean[SEED_NSCALE], var[SEED_NSCALE], std[SEED_NSCALE];   /* of the pairs' dot products */
    double ent[SEED_NSCALE];          /* mean over queries of the softmax entropy over T keys, nats */
    double pmax[SEED_NSCALE];         /* mean over queries of the largest weight */
} seed_dot_row;

/* Draws cfg->pairs pairs q, k with N(0,1) entries (stream d of cfg->seed, so a
 * row does not depend on the other dims asked for); q·k by a batched tg_matmul
 * [n,1,d]·[n,1,d]ᵀ, scaled by tg_scale. Then cfg->queries queries against T
 * fresh keys each: logits by tg_matmul [n,1,d]·[n,T,d]ᵀ, tg_scale, tg_softmax.
 * Returns 0, or -1 if a statistic is not finite. */
int seed_dot_run(tg_ctx *ctx, const seed_dot_cfg *cfg, int d, seed_dot_row *row);

/* ---- softmax saturation ------------------------------------------------- */
extern const float seed_sat_scores[3];   /* the seed's [2, 1, 0.5] */
#define SEED_GONE 1e-3                   /* a Jacobian norm below this: the gradient is about gone */

typedef struct {
    double c;
    double p[3];         /* softmax(c·[2,1,0.5]) by tg_scale + tg_softmax */
    double entropy;      /* nats */
    double jac_norm;     /* ‖diag(p) − p pᵀ‖_F from three backward passes, one per row */
    double jac_exact;    /* the same from the closed form, in double */
} seed_sat_row;

int seed_sat_run(tg_ctx *ctx, double c, seed_sat_row *row);
/* The c in [lo, hi] where the engine's Jacobian norm falls to `level`, by
 * bisection in log c (the norm decreases with c there). */
double seed_sat_threshold(tg_ctx *ctx, double level, double lo, double hi);
/* The default c grid: 10^(k/20) from 0.1 to 10^1.3, with 11.3 and 20 added,
 * ascending. Returns the count (at most max). */
int seed_sat_grid(double *c, int max);

typedef struct {
    int rows;   /* rows of random scores */
    int keys;   /* T: scores per row */
    uint64_t seed;
} seed_sigma_cfg;

typedef struct {
    double sigma;
    double ent_mean;          /* mean softmax entropy, nats (ln T is uniform) */
    double pmax_mean;         /* mean largest weight */
    double jac_median;        /* median over rows of ‖J‖_F, engine (T backward passes) */
    double jac_exact_median;  /* the same, closed form in double */
    double frac_gone;         /* share of rows with engine ‖J‖_F < SEED_GONE */
} seed_sigma_row;

/* Rows of T scores σ·x, x ~ N(0,1); the same x for every σ (common random
 * numbers), so the curve over σ is smooth. x is a parameter, σ·x is tg_scale,
 * then tg_softmax; backward pass i seeds e_i in every row at once (rows are
 * independent), which gives row i of every row's Jacobian. */
int seed_sigma_run(tg_ctx *ctx, const seed_sigma_cfg *cfg, double sigma, seed_sigma_row *row);

/* ---- shared by the binaries -------------------------------------------- */
/* A comma-separated list of positive numbers into v (at most max); "a,b,...,z"
 * continues the ratio b/a up to z, which must lie on it ("4,8,...,1024").
 * Returns the count, or -1 with a message in err. */
int seed_parse_list(const char *s, double *v, int max, char *err, size_t errlen);

/* Output that is either stdout or a file written atomically: FILE.tmp, renamed
 * to FILE by seed_out_commit, so a failed run never leaves half a file. */
typedef struct {
    FILE *f;            /* stdout, or a buffer in memory written to path by commit (tg_file.h) */
    const char *flag;   /* for messages: "out" */
    const char *path;   /* NULL: stdout */
    char *buf;
    size_t len;
    tg_file file;       /* begun at open, so that an unwritable place fails before the work */
} seed_out;

int seed_out_open(seed_out *o, const char *flag, const char *path, char *err, size_t errlen);   /* 0 or -1 */
int seed_out_commit(seed_out *o, char *err, size_t errlen);                                     /* 0 or -1 */
void seed_out_abort(seed_out *o);                                                               /* drops the buffer */

#endif
