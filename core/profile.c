/* The per-op profile (tg_profile.h). */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
#include "tg_profile.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

double tg_profile_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void tg_profile_init(tg_profile *p, int skip) {
    memset(p, 0, sizeof *p);
    p->skip = skip > 0 ? skip : 0;
}

void tg_profile_attach(tg_ctx *ctx, tg_profile *p) { ctx->prof = p; }

/* The row of name (names compared as strings: an op's name is a literal in
 * its own file, a phase's the caller's). The last row takes what overflows. */
static tg_profile_row *row(tg_profile *p, const char *name, int phase) {
    for (int i = 0; i < p->n_rows; i++)
        if (p->rows[i].phase == phase && strcmp(p->rows[i].name, name) == 0) return &p->rows[i];
    if (p->n_rows == TG_PROFILE_MAX_ROWS - 1) {
        tg_profile_row *r = &p->rows[TG_PROFILE_MAX_ROWS - 1];
        if (!r->name) *r = (tg_profile_row){.name = "(other ops)"};
        return r;
    }
    tg_profile_row *r = &p->rows[p->n_rows++];
    *r = (tg_profile_row){.name = name, .phase = phase};
    return r;
}

void tg_profile_step_begin(tg_profile *p) {
    p->counting = p->skip == 0;
    if (p->skip) p->skip--;
    p->step_t0 = p->mark = tg_profile_clock();
}

void tg_profile_mark_forward(tg_profile *p, tg_node *n) {
    double t = tg_profile_clock();
    n->prof_s[0] = t - p->mark;
    p->mark = t;
}

void tg_profile_phase(tg_profile *p, const char *name) {
    double t = tg_profile_clock();
    if (p->counting) row(p, name, 1)->fwd_s += t - p->mark;
    p->mark = t;
}

void tg_profile_step_end(tg_profile *p, const tg_ctx *ctx) {
    double t = tg_profile_clock();
    if (!p->counting) return;
    for (int i = 0; i < ctx->n_nodes; i++) {
        const tg_node *n = &ctx->nodes[i];
        tg_profile_row *r = row(p, n->op, 0);
        r->calls++;
        r->fwd_s += n->prof_s[0];
        r->bwd_s += n->prof_s[1];
        r->fwd_flop += n->flops[0];
        r->bwd_flop += n->flops[1];
    }
    p->steps++;
    p->step_s += t - p->step_t0;
    p->counting = 0;
}

static double total(const tg_profile_row *r) { return r->fwd_s + r->bwd_s; }

static int by_time(const void *a, const void *b) {
    double x = total(a), y = total(b);
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The rows most time first, then "(not in ops)": what no op or phase holds. */
static int table(const tg_profile *p, tg_profile_row *out, double *rest) {
    int n = p->n_rows + (p->n_rows == TG_PROFILE_MAX_ROWS - 1 && p->rows[TG_PROFILE_MAX_ROWS - 1].name);
    memcpy(out, p->rows, (size_t)n * sizeof *out);
    qsort(out, (size_t)n, sizeof *out, by_time);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += total(&out[i]);
    *rest = p->step_s - sum;
    return n;
}

void tg_profile_print(const tg_profile *p, FILE *f) {
    if (!p->steps) {
        fprintf(f, "# profile: no step counted\n");
        return;
    }
    tg_profile_row rows[TG_PROFILE_MAX_ROWS];
    double rest, s = p->steps, ms = 1e3 / s;
    int n = table(p, rows, &rest);
    fprintf(f, "# profile: %d steps, %.3f ms a step (wall time, begin to end of each)\n", p->steps, p->step_s * ms);
    const int peak = p->peak_gflops > 0;
    if (peak) {
        double flop = 0;
        for (int i = 0; i < n; i++) flop += rows[i].fwd_flop + rows[i].bwd_flop;
        fprintf(f, "# the FMA peak %.1f GFLOP/s; the step: %.1f GFLOP/s, %.1f%% of it (the FLOPs the ops count, over "
                   "the step's wall time)\n", p->peak_gflops, flop / p->step_s * 1e-9,
                100 * flop / p->step_s * 1e-9 / p->peak_gflops);
    }
    /* of_fma, the last column, only with a peak: each row ends with of[] ("" without one) */
    fprintf(f, "%-30s %10s %9s %9s %9s %6s %8s%s\n", "op", "calls/step", "fwd_ms", "bwd_ms", "total_ms", "share", "GFLOP/s",
            peak ? "  of_fma" : "");
    const char *none = peak ? "       -" : "";
    for (int i = 0; i < n; i++) {
        const tg_profile_row *r = &rows[i];
        double flop = r->fwd_flop + r->bwd_flop;
        char gf[32] = "-", of[32];
        snprintf(of, sizeof of, "%s", none);
        if (flop > 0 && total(r) > 0) {
            snprintf(gf, sizeof gf, "%.1f", flop / total(r) * 1e-9);
            if (peak) snprintf(of, sizeof of, " %6.1f%%", 100 * flop / total(r) * 1e-9 / p->peak_gflops);
        }
        if (r->phase)
            fprintf(f, "%-30s %10s %9.3f %9s %9.3f %5.1f%% %8s%s\n", r->name, "-", r->fwd_s * ms, "-", r->fwd_s * ms,
                    100 * r->fwd_s / p->step_s, "-", none);
        else
            fprintf(f, "%-30s %10.1f %9.3f %9.3f %9.3f %5.1f%% %8s%s\n", r->name, (double)r->calls / s, r->fwd_s * ms,
                    r->bwd_s * ms, total(r) * ms, 100 * total(r) / p->step_s, gf, of);
    }
    fprintf(f, "%-30s %10s %9s %9s %9.3f %5.1f%% %8s%s\n", "(not in ops)", "-", "-", "-", rest * ms,
            100 * rest / p->step_s, "-", none);
}

void tg_profile_print_tsv(const tg_profile *p, FILE *f) {
    tg_profile_row rows[TG_PROFILE_MAX_ROWS];
    double rest, s = p->steps ? p->steps : 1, ms = 1e3 / s, step = p->step_s > 0 ? p->step_s : 1;
    int n = table(p, rows, &rest);
    fprintf(f, "op\tkind\tcalls_per_step\tfwd_ms\tbwd_ms\ttotal_ms\tshare\tgflops\tof_fma\n");
    for (int i = 0; i < n; i++) {
        const tg_profile_row *r = &rows[i];
        double flop = r->fwd_flop + r->bwd_flop;
        fprintf(f, "%s\t%s\t%.2f\t%.4f\t%.4f\t%.4f\t%.4f\t", r->name, r->phase ? "phase" : "op", (double)r->calls / s,
                r->fwd_s * ms, r->bwd_s * ms, total(r) * ms, total(r) / step);
        if (flop > 0 && total(r) > 0) {
            const double gf = flop / total(r) * 1e-9;
            if (p->peak_gflops > 0) fprintf(f, "%.2f\t%.4f\n", gf, gf / p->peak_gflops);
            else fprintf(f, "%.2f\tnan\n", gf);
        } else {
            fprintf(f, "nan\tnan\n");
        }
    }
    fprintf(f, "(not in ops)\tphase\t0\t%.4f\tnan\t%.4f\t%.4f\tnan\tnan\n", rest * ms, rest * ms, rest / step);
}
