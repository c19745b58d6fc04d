#define _POSIX_C_SOURCE 200809L   /* stat */
#include "seedfig.h"

#include "tg_file.h"
#include "tg_timing.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tg_ops.h"

/* ---- the worked example ---------------------------------------------------- */
const float seed_Q[3][4] = {{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 1, 1, 0}};
const float seed_K[3][4] = {{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 1, 0, 0}};
const float seed_V[3][2] = {{1, 0}, {0, 1}, {1, 1}};
const float seed_scores[3][3] = {{2, 0, 1}, {0, 2, 1}, {2, 1, 2}};
const float seed_scaled[3][3] = {{1.0f, 0.0f, 0.5f}, {0.0f, 1.0f, 0.5f}, {1.0f, 0.5f, 1.0f}};
const float seed_weights[3][3] = {{0.506f, 0.186f, 0.307f}, {0.186f, 0.506f, 0.307f}, {0.384f, 0.233f, 0.384f}};
const float seed_output[3][2] = {{0.814f, 0.494f}, {0.494f, 0.814f}, {0.767f, 0.616f}};

static double max_diff(const float *a, const float *b, int n, double m) {
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        m = d > m || isnan(d) ? d : m;   /* a NaN must not hide behind the max */
    }
    return m;
}

void seed_worked_run(tg_ctx *ctx, seed_worked *w) {
    memset(w, 0, sizeof *w);
    tg_params P;
    tg_params_init(&P);
    P.err = ctx->err;
    tg_tensor *Q = tg_param(&P, "Q", 2, (int[]){3, 4});
    tg_tensor *K = tg_param(&P, "K", 2, (int[]){3, 4});
    tg_tensor *V = tg_param(&P, "V", 2, (int[]){3, 2});
    tg_params_alloc(&P);
    memcpy(Q->data, seed_Q, sizeof seed_Q);
    memcpy(K->data, seed_K, sizeof seed_K);
    memcpy(V->data, seed_V, sizeof seed_V);
    const float scale = 1.0f / sqrtf(4.0f);

    /* the four steps, one op each */
    tg_ctx_reset(ctx);
    tg_tensor *S = tg_matmul(ctx, Q, K, 0, 1);
    tg_tensor *Z = tg_scale(ctx, S, scale);
    tg_tensor *W = tg_softmax(ctx, Z, 0);
    tg_tensor *O = tg_matmul(ctx, W, V, 0, 0);
    tg_backward(ctx, tg_sum(ctx, O));
    memcpy(w->scores, S->data, sizeof w->scores);
    memcpy(w->scaled, Z->data, sizeof w->scaled);
    memcpy(w->weights, W->data, sizeof w->weights);
    memcpy(w->out, O->data, sizeof w->out);
    memcpy(w->dQ, Q->grad, sizeof w->dQ);
    memcpy(w->dK, K->grad, sizeof w->dK);
    memcpy(w->dV, V->grad, sizeof w->dV);

    /* the same in one attention call, on [B,T,H,d] views of the same parameters */
    tg_params_zero_grad(&P);
    tg_ctx_reset(ctx);
    tg_tensor *q = tg_reshape(ctx, Q, 4, (int[]){1, 3, 1, 4});
    tg_tensor *k = tg_reshape(ctx, K, 4, (int[]){1, 3, 1, 4});
    tg_tensor *v = tg_reshape(ctx, V, 4, (int[]){1, 3, 1, 2});
    tg_tensor *o = tg_attention(ctx, q, k, v, NULL, scale, 0, NULL);
    memcpy(w->weights_attn, tg_attention_probs(ctx, o), sizeof w->weights_attn);
    memcpy(w->out_attn, o->data, sizeof w->out_attn);
    tg_backward(ctx, tg_sum(ctx, o));
    memcpy(w->dQ_attn, Q->grad, sizeof w->dQ_attn);
    memcpy(w->dK_attn, K->grad, sizeof w->dK_attn);
    memcpy(w->dV_attn, V->grad, sizeof w->dV_attn);
    tg_params_free(&P);

    double m = 0;
    m = max_diff(&w->scores[0][0], &seed_scores[0][0], 9, m);
    m = max_diff(&w->scaled[0][0], &seed_scaled[0][0], 9, m);
    m = max_diff(&w->weights[0][0], &seed_weights[0][0], 9, m);
    w->seed_diff = max_diff(&w->out[0][0], &seed_output[0][0], 6, m);
    m = max_diff(&w->weights[0][0], &w->weights_attn[0][0], 9, 0);
    m = max_diff(&w->out[0][0], &w->out_attn[0][0], 6, m);
    m = max_diff(&w->dQ[0][0], &w->dQ_attn[0][0], 12, m);
    m = max_diff(&w->dK[0][0], &w->dK_attn[0][0], 12, m);
    w->path_diff = max_diff(&w->dV[0][0], &w->dV_attn[0][0], 6, m);
    /* every array took part in a comparison, and max_diff keeps NaN (inf − x is inf) */
    w->finite = isfinite(w->seed_diff) && isfinite(w->path_diff);
}

int seed_worked_ok(const seed_worked *w) {
    return w->finite && w->seed_diff <= SEED_TOL && w->path_diff <= 1e-5;
}

/* ---- the variance of q·k -------------------------------------------------- */
const char *const seed_scale_names[] = {"raw", "sqrt", "dk"};

double seed_scale_factor(int scaling, int d) {
    return scaling == SEED_RAW ? 1.0 : scaling == SEED_SQRT ? 1.0 / sqrt((double)d) : 1.0 / d;
}

/* Two-pass mean and unbiased variance. */
static void moments(const double *x, int n, double *mean, double *var) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    double m = s / n, ss = 0;
    for (int i = 0; i < n; i++) ss += (x[i] - m) * (x[i] - m);
    *mean = m;
    *var = n > 1 ? ss / (n - 1) : 0;
}

/* −Σ p ln p of one row (0 ln 0 = 0) and its largest weight. */
static double row_entropy(const float *p, int n, double *pmax) {
    double h = 0, mx = 0;
    for (int j = 0; j < n; j++) {
        if (p[j] > 0) h -= (double)p[j] * log((double)p[j]);
        mx = p[j] > mx ? p[j] : mx;
    }
    *pmax = mx;
    return h;
}

/* Operands are drawn in chunks of at most this many floats, so d = 1024 with
 * 10,000 pairs stays a few MB of arena. */
#define SEED_CHUNK_FLOATS (1 << 20)

int seed_dot_run(tg_ctx *ctx, const seed_dot_cfg *cfg, int d, seed_dot_row *row) {
    const int N = cfg->pairs, R = cfg->queries, T = cfg->keys;
    memset(row, 0, sizeof *row);
    row->d = d;
    row->std_pred = sqrt((double)d);
    tg_rng rng;
    tg_rng_seed(&rng, cfg->seed, (uint64_t)d);

    double *dots = malloc(sizeof(double) * SEED_NSCALE * (size_t)N);
    if (!dots) tg_fail(ctx, "seed_dot_run: out of memory for %d pairs", N);
    int chunk = SEED_CHUNK_FLOATS / d > 0 ? SEED_CHUNK_FLOATS / d : 1;
    for (int i0 = 0; i0 < N; i0 += chunk) {
        int n = N - i0 < chunk ? N - i0 : chunk;
        tg_ctx_reset(ctx);
        tg_tensor *q = tg_new(ctx, 3, (int[]){n, 1, d}), *k = tg_new(ctx, 3, (int[]){n, 1, d});
        tg_fill_normal(&rng, q->data, q->numel, 0.0f, 1.0f);
        tg_fill_normal(&rng, k->data, k->numel, 0.0f, 1.0f);
        tg_tensor *dot = tg_matmul(ctx, q, k, 0, 1);   /* [n,1,1]: pair i's q·k */
        for (int s = 0; s < SEED_NSCALE; s++) {
            tg_tensor *y = tg_scale(ctx, dot, (float)seed_scale_factor(s, d));
            for (int i = 0; i < n; i++) dots[(size_t)s * N + i0 + i] = y->data[i];
        }
    }
    for (int s = 0; s < SEED_NSCALE; s++) {
        moments(dots + (size_t)s * N, N, &row->mean[s], &row->var[s]);
        row->std[s] = sqrt(row->var[s]);
    }
    free(dots);

    int64_t per = (int64_t)T * d;
    chunk = SEED_CHUNK_FLOATS / per > 0 ? (int)(SEED_CHUNK_FLOATS / per) : 1;
    for (int i0 = 0; i0 < R; i0 += chunk) {
        int n = R - i0 < chunk ? R - i0 : chunk;
        tg_ctx_reset(ctx);
        tg_tensor *q = tg_new(ctx, 3, (int[]){n, 1, d}), *k = tg_new(ctx, 3, (int[]){n, T, d});
        tg_fill_normal(&rng, q->data, q->numel, 0.0f, 1.0f);
        tg_fill_normal(&rng, k->data, k->numel, 0.0f, 1.0f);
        tg_tensor *logits = tg_matmul(ctx, q, k, 0, 1);   /* [n,1,T]: each query against its T keys */
        for (int s = 0; s < SEED_NSCALE; s++) {
            tg_tensor *p = tg_softmax(ctx, tg_scale(ctx, logits, (float)seed_scale_factor(s, d)), 0);
            for (int i = 0; i < n; i++) {
                double pm;
                row->ent[s] += row_entropy(p->data + (int64_t)i * T, T, &pm);
                row->pmax[s] += pm;
            }
        }
    }
    int ok = 1;
    for (int s = 0; s < SEED_NSCALE; s++) {
        row->ent[s] /= R;
        row->pmax[s] /= R;
        ok = ok && isfinite(row->mean[s]) && isfinite(row->var[s]) && isfinite(row->ent[s]) &&
             isfinite(row->pmax[s]);
    }
    return ok ? 0 : -1;
}

/* ---- softmax saturation ----------------------------------------------------- */
const float seed_sat_scores[3] = {2.0f, 1.0f, 0.5f};

/* ‖diag(p) − p pᵀ‖_F² entry by entry, with 1 − p_i taken as the sum of the
 * other weights: near one-hot, 1 − p_i and the Σp² − 2Σp³ + (Σp²)² form both
 * cancel to noise, while the entries themselves are tiny but exact. */
static double jac_exact_sq(const double *p, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++) {
        double rest = 0;
        for (int j = 0; j < n; j++)
            if (j != i) {
                rest += p[j];
                ss += p[i] * p[i] * p[j] * p[j];   /* J_ij = −p_i p_j */
            }
        ss += p[i] * rest * p[i] * rest;           /* J_ii = p_i (1 − p_i) */
    }
    return ss;
}

/* Stable softmax of n floats in double. */
static void softmax_d(const float *z, int n, double *p) {
    double mx = z[0], sum = 0;
    for (int j = 1; j < n; j++) mx = z[j] > mx ? z[j] : mx;
    for (int j = 0; j < n; j++) sum += p[j] = exp(z[j] - mx);
    for (int j = 0; j < n; j++) p[j] /= sum;
}

int seed_sat_run(tg_ctx *ctx, double c, seed_sat_row *row) {
    memset(row, 0, sizeof *row);
    row->c = c;
    tg_params P;
    tg_params_init(&P);
    P.err = ctx->err;
    tg_tensor *s = tg_param(&P, "scores", 2, (int[]){1, 3});
    tg_params_alloc(&P);
    memcpy(s->data, seed_sat_scores, sizeof seed_sat_scores);

    tg_ctx_reset(ctx);
    tg_tensor *z = tg_scale(ctx, s, (float)c);
    tg_tensor *p = tg_softmax(ctx, z, 0);
    /* backward from e_i gives d p_i / d z, row i of the Jacobian, in z's grad */
    double ss = 0;
    for (int i = 0; i < 3; i++) {
        float e[3] = {0, 0, 0};
        e[i] = 1;
        tg_backward_seed(ctx, p, e);
        for (int j = 0; j < 3; j++) ss += (double)z->grad[j] * z->grad[j];
    }
    row->jac_norm = sqrt(ss);
    double pm, pd[3];
    for (int j = 0; j < 3; j++) row->p[j] = p->data[j];
    row->entropy = row_entropy(p->data, 3, &pm);
    softmax_d(z->data, 3, pd);
    row->jac_exact = sqrt(jac_exact_sq(pd, 3));
    tg_params_free(&P);
    return isfinite(row->jac_norm) && isfinite(row->entropy) && isfinite(row->p[0]) ? 0 : -1;
}

double seed_sat_threshold(tg_ctx *ctx, double level, double lo, double hi) {
    double a = log(lo), b = log(hi);
    for (int it = 0; it < 60; it++) {
        double m = 0.5 * (a + b);
        seed_sat_row r;
        seed_sat_run(ctx, exp(m), &r);
        if (r.jac_norm > level) a = m;
        else b = m;
    }
    return exp(0.5 * (a + b));
}

int seed_sat_grid(double *c, int max) {
    int n = 0;
    const double extra[] = {11.3, 20.0};
    int e = 0;
    for (int k = -20; k <= 26 && n < max; k++) {
        double v = pow(10.0, k / 20.0);
        while (e < 2 && extra[e] <= v && n < max) {
            if (fabs(extra[e] - v) > 1e-9) c[n++] = extra[e];
            e++;
        }
        if (n < max) c[n++] = v;
    }
    while (e < 2 && n < max) c[n++] = extra[e++];
    return n;
}

int seed_sigma_run(tg_ctx *ctx, const seed_sigma_cfg *cfg, double sigma, seed_sigma_row *row) {
    const int N = cfg->rows, T = cfg->keys;
    memset(row, 0, sizeof *row);
    row->sigma = sigma;
    tg_params P;
    tg_params_init(&P);
    P.err = ctx->err;
    tg_tensor *x = tg_param(&P, "x", 2, (int[]){N, T});
    tg_params_alloc(&P);
    tg_rng rng;
    tg_rng_seed(&rng, cfg->seed, 0x5163);
    tg_fill_normal(&rng, x->data, x->numel, 0.0f, 1.0f);
    double *norm = calloc((size_t)N, sizeof(double)), *exact = malloc(sizeof(double) * (size_t)N);
    double *pd = malloc(sizeof(double) * (size_t)T);
    if (!norm || !exact || !pd) tg_fail(ctx, "seed_sigma_run: out of memory for %d rows", N);

    tg_ctx_reset(ctx);
    tg_tensor *z = tg_scale(ctx, x, (float)sigma);
    tg_tensor *p = tg_softmax(ctx, z, 0);
    float *seed = tg_arena_alloc(ctx, sizeof(float) * (size_t)x->numel);
    for (int i = 0; i < T; i++) {
        memset(seed, 0, sizeof(float) * (size_t)x->numel);
        for (int r = 0; r < N; r++) seed[(int64_t)r * T + i] = 1.0f;
        tg_backward_seed(ctx, p, seed);
        for (int r = 0; r < N; r++)
            for (int j = 0; j < T; j++) {
                double g = z->grad[(int64_t)r * T + j];
                norm[r] += g * g;
            }
    }
    int gone = 0;
    for (int r = 0; r < N; r++) {
        double pm;
        row->ent_mean += row_entropy(p->data + (int64_t)r * T, T, &pm);
        row->pmax_mean += pm;
        norm[r] = sqrt(norm[r]);
        gone += norm[r] < SEED_GONE;
        softmax_d(z->data + (int64_t)r * T, T, pd);
        exact[r] = sqrt(jac_exact_sq(pd, T));
    }
    row->ent_mean /= N;
    row->pmax_mean /= N;
    row->frac_gone = (double)gone / N;
    row->jac_median = tg_timing_median(norm, N);
    row->jac_exact_median = tg_timing_median(exact, N);
    free(norm);
    free(exact);
    free(pd);
    tg_params_free(&P);
    return isfinite(row->ent_mean) && isfinite(row->jac_median) && isfinite(row->jac_exact_median) ? 0 : -1;
}

/* ---- shared by the binaries --------------------------------------------- */
int seed_parse_list(const char *s, double *v, int max, char *err, size_t errlen) {
    int n = 0, dots_at = -1;   /* dots_at: how many numbers came before "..." */
    const char *c = s;
    while (1) {
        const char *end = strchr(c, ',');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        if (len == 3 && strncmp(c, "...", 3) == 0) {
            if (dots_at != -1 || n < 2) {
                snprintf(err, errlen, "'%s': '...' needs two numbers before it, once", s);
                return -1;
            }
            dots_at = n;
        } else {
            char tok[64], *e;
            if (len == 0 || len >= sizeof tok) {
                snprintf(err, errlen, "'%s': empty or overlong item", s);
                return -1;
            }
            memcpy(tok, c, len);
            tok[len] = 0;
            errno = 0;
            double x = strtod(tok, &e);
            if (*e || errno || !isfinite(x) || x <= 0) {
                snprintf(err, errlen, "'%s': '%s' is not a positive number", s, tok);
                return -1;
            }
            if (dots_at == n) {   /* the end of a geometric run: fill it in */
                double r = v[n - 1] / v[n - 2];
                if (!(r > 1) || x <= v[n - 1]) {
                    snprintf(err, errlen, "'%s': 'a,b,...,z' needs a < b < z", s);
                    return -1;
                }
                double y = v[n - 1] * r;
                while (y < x * (1 - 1e-9)) {
                    if (n >= max) goto too_many;
                    v[n++] = y;
                    y *= r;
                }
                if (fabs(y - x) > 1e-9 * x) {
                    snprintf(err, errlen, "'%s': %g is not on the run %g, %g, ...", s, x, v[dots_at - 2],
                             v[dots_at - 1]);
                    return -1;
                }
                dots_at = -2;   /* done: a second "..." is an error */
            }
            if (n >= max) goto too_many;
            v[n++] = x;
        }
        if (!end) break;
        c = end + 1;
    }
    if (dots_at >= 0) {
        snprintf(err, errlen, "'%s': '...' needs the last number after it", s);
        return -1;
    }
    return n;
too_many:
    snprintf(err, errlen, "'%s': more than %d values", s, max);
    return -1;
}

int seed_out_open(seed_out *o, const char *flag, const char *path, char *err, size_t errlen) {
    *o = (seed_out){.flag = flag, .path = path};
    if (!path) {
        o->f = stdout;
        return 0;
    }
    char msg[600];
    if (tg_file_begin(&o->file, path, msg, sizeof msg)) {   /* before the work: a folder, a device, no folder */
        snprintf(err, errlen, "--%s %s", flag, msg);
        return -1;
    }
    o->f = open_memstream(&o->buf, &o->len);
    if (!o->f) {
        tg_file_abort(&o->file);
        snprintf(err, errlen, "--%s %s: out of memory", flag, path);
        return -1;
    }
    return 0;
}

int seed_out_commit(seed_out *o, char *err, size_t errlen) {
    if (!o->path) {
        if (fflush(stdout) != 0 || ferror(stdout)) {
            snprintf(err, errlen, "writing stdout failed");
            return -1;
        }
        return 0;
    }
    int bad = ferror(o->f);
    bad |= fclose(o->f) != 0;
    o->f = NULL;
    char msg[600];
    int rc = bad ? tg_errf(msg, sizeof msg, "%s: out of memory", o->path)
                 : tg_file_write(&o->file, o->buf, o->len, msg, sizeof msg) ? -1 : tg_file_commit(&o->file, 0, msg, sizeof msg);
    if (rc) tg_file_abort(&o->file);
    free(o->buf);
    o->buf = NULL;
    if (rc) snprintf(err, errlen, "--%s %s", o->flag, msg);
    return rc;
}

void seed_out_abort(seed_out *o) {
    if (!o->path || !o->f) return;
    fclose(o->f);
    o->f = NULL;
    free(o->buf);
    o->buf = NULL;
    tg_file_abort(&o->file);
}
