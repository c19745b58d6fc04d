/* The BLAS underneath: its name and kernel, the kernel's ranking against the
 * CPU, the start-up decision and the sgemm self-check. See tg_blas.h for the
 * rules. The re-execution the decision may ask for is the program's (the
 * training kit's tg_runtime_init): the library never execs. */
#define _POSIX_C_SOURCE 200809L   /* setenv, readlink, fork, strsignal */
#include "tg_blas.h"
#include "tg_core.h"
#include "tg_child.h"   /* the one fork-with-timeout runner */

#include <cblas.h>
#include <errno.h>
#include <libxsmm.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the ranking ------------------------------------------------------------- */
/* The x86-64 cores of OpenBLAS's DYNAMIC_ARCH builds by the instruction set
 * their kernels need (AMD's too); the first of each tier is the one we set. */
static const struct { const char *name; int tier; } cores[] = {
    {"SkylakeX", 4},    {"Cooperlake", 4},  {"SapphireRapids", 4},
    {"Haswell", 3},     {"Zen", 3},         {"Excavator", 3},
    {"Sandybridge", 2}, {"Bulldozer", 2},   {"Piledriver", 2},  {"Steamroller", 2},
    {"Nehalem", 1},
    {"Prescott", 0},    {"Core2", 0},       {"Penryn", 0},      {"Dunnington", 0},  {"Atom", 0},
    {"Barcelona", 0},   {"Bobcat", 0},      {"Nano", 0},        {"Opteron_SSE3", 0},
    {"Katmai", -1},     {"Coppermine", -1}, {"Northwood", -1},  {"Banias", -1},     {"Athlon", -1},
    {"Opteron", -1},
};
static const char *const tier_isa[] = {"SSE3", "SSE4.2", "AVX", "AVX2+FMA", "AVX-512"};

int tg_blas_core_tier(const char *core) {
    for (size_t i = 0; core && i < sizeof cores / sizeof cores[0]; i++)
        if (strcasecmp(core, cores[i].name) == 0) return cores[i].tier;   /* OpenBLAS ignores case too */
    return TG_TIER_UNKNOWN;
}

const char *tg_blas_tier_core(int tier) {
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
        if (tier >= 0 && cores[i].tier == tier) return cores[i].name;
    return NULL;
}

int tg_cpu_tier(const tg_cpu_features *c) {
    if (c->avx512f && c->avx512bw && c->avx512dq && c->avx512vl && c->avx2 && c->fma) return 4;
    if (c->avx2 && c->fma) return 3;
    if (c->avx) return 2;
    if (c->sse4_2) return 1;
    return c->sse3 ? 0 : TG_TIER_NONE;
}

const char *tg_blas_best_core(const tg_cpu_features *cpu) { return tg_blas_tier_core(tg_cpu_tier(cpu)); }

tg_cpu_features tg_cpu_detect(void) {
#if !defined(__x86_64__) && !defined(__i386__)
    return (tg_cpu_features){0};   /* no x86 core fits: nothing is upgraded, the self-check still runs */
#else
    /* libgcc's answer includes the OS's consent (XCR0) for the AVX and AVX-512 registers */
    __builtin_cpu_init();
    return (tg_cpu_features){
        .sse3 = !!__builtin_cpu_supports("sse3"),         .sse4_2 = !!__builtin_cpu_supports("sse4.2"),
        .avx = !!__builtin_cpu_supports("avx"),           .avx2 = !!__builtin_cpu_supports("avx2"),
        .fma = !!__builtin_cpu_supports("fma"),           .avx512f = !!__builtin_cpu_supports("avx512f"),
        .avx512bw = !!__builtin_cpu_supports("avx512bw"), .avx512dq = !!__builtin_cpu_supports("avx512dq"),
        .avx512vl = !!__builtin_cpu_supports("avx512vl"),
    };
#endif
}

/* ---- the decision --------------------------------------------------------------- */
static tg_blas_decision plan(tg_blas_action a, const char *core, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static tg_blas_decision plan(tg_blas_action a, const char *core, const char *fmt, ...) {
    tg_blas_decision p = {.action = a, .core = core};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p.msg, sizeof p.msg, fmt, ap);
    va_end(ap);
    return p;
}

tg_blas_decision tg_blas_decide(const tg_blas_state *s) {
    const int best = tg_cpu_tier(&s->cpu), cur = tg_blas_core_tier(s->core);
    const char *core = s->core ? s->core : "unnamed";
    const char *detail = s->check_detail && s->check_detail[0] ? s->check_detail : "no detail";
    const int weaker = cur != TG_TIER_UNKNOWN && cur < best;
    if (s->check == TG_CHECK_NOT_RUN) {
        if (weaker && !s->user_core && s->restarts == 0 && !s->asked && s->can_restart)
            return plan(TG_BLAS_RESTART, tg_blas_tier_core(best),
                        "OpenBLAS picked its %s kernel but this CPU has %s: restarting once with "
                        "OPENBLAS_CORETYPE=%s (set OPENBLAS_CORETYPE yourself to choose)",
                        core, tier_isa[best], tg_blas_tier_core(best));
        return plan(TG_BLAS_CHECK, NULL, "run the sgemm self-check");
    }
    if (s->user_core) {   /* the user's choice stands; say what we see */
        if (s->check == TG_CHECK_CRASHED)
            return plan(TG_BLAS_FAIL, NULL,
                        "the %s kernel (OPENBLAS_CORETYPE=%s, set by you) crashed in the sgemm self-check (%s); "
                        "unset OPENBLAS_CORETYPE or set a lower core", core, s->user_core, detail);
        if (s->check == TG_CHECK_MISMATCH)
            return plan(TG_BLAS_WARN, NULL,
                        "WARNING: the %s kernel (OPENBLAS_CORETYPE=%s, set by you) failed the sgemm self-check "
                        "(%s): matrix products may be wrong; keeping it as you asked", core, s->user_core, detail);
        if (weaker)
            return plan(TG_BLAS_WARN, NULL,
                        "note: OPENBLAS_CORETYPE=%s keeps OpenBLAS on its %s kernel although this CPU has %s "
                        "(%s); keeping it as you asked", s->user_core, core, tier_isa[best], tg_blas_tier_core(best));
        return plan(TG_BLAS_GO, NULL, "%s", "");
    }
    if (s->check == TG_CHECK_PASSED) return plan(TG_BLAS_GO, NULL, "%s", "");

    /* failed: one tier below both the core in use and the one last asked for,
     * so every restart asks for less than the one before */
    const char *how = s->check == TG_CHECK_CRASHED ? "crashed with" : "failed with";
    int from = cur == TG_TIER_UNKNOWN ? best + 1 : cur, asked = tg_blas_core_tier(s->asked);
    if (asked != TG_TIER_UNKNOWN && asked < from) from = asked;
    int next = from - 1 < best ? from - 1 : best;
    const char *why = next < 0 ? "there is no lower kernel to try"
                    : s->restarts >= TG_BLAS_MAX_RESTARTS ? "the restarts are used up"
                    : !s->can_restart ? "the program could not restart itself" : NULL;
    if (why)
        return plan(TG_BLAS_FAIL, NULL,
                    "the sgemm self-check %s the %s kernel (%s) and %s: OpenBLAS computes wrong products on this "
                    "machine; set OPENBLAS_CORETYPE yourself to run anyway (then only a warning)", how, core, detail,
                    why);
    return plan(TG_BLAS_RESTART, tg_blas_tier_core(next),
                "the sgemm self-check %s the %s kernel (%s): restarting with OPENBLAS_CORETYPE=%s", how, core, detail,
                tg_blas_tier_core(next));
}

/* ---- the self-check ------------------------------------------------------------- */
/* Each shape aims at one of OpenBLAS's sgemm paths (0.3.21; AVX-512 names
 * them most finely): the "direct" kernel (row-major NN, alpha 1, beta 0), the
 * small-matrix kernels (M·N·K up to 100³, with and without beta, NN, NT and TN
 * with K >= 32 and M·N <= 1200), the blocked driver (TN with a larger C, TT:
 * packing, edges in M and N, K over one block of 384); odd sizes and padded
 * leading dimensions, as tapegrad's strided head views have. */
typedef struct { int ta, tb, m, n, k, pad; float alpha, beta; } check_shape;
static const check_shape shapes[] = {
    {0, 0, 64, 24, 40, 0, 1.0f, 0.0f}, {0, 0, 37, 16, 53, 3, 1.0f, 0.5f}, {0, 1, 29, 32, 41, 0, 1.0f, 0.0f},
    {1, 0, 45, 8, 67, 5, 0.5f, 0.0f},  {1, 0, 33, 50, 20, 1, 1.0f, 1.0f}, {1, 1, 25, 21, 420, 7, 1.0f, 0.75f},
};

/* 1 if TG_BLAS_TEST_FAIL names this core (with ":crash" if crash is 1); an
 * item with any other suffix names nothing. */
static int test_fail(const char *core, int crash) {
#ifndef TG_TEST_HOOKS   /* a build for tests only (-DTG_TEST_HOOKS=ON); never in an installed library */
    (void)core, (void)crash;
    return 0;
#endif
    const char *v = getenv("TG_BLAS_TEST_FAIL");
    while (v && *v) {
        size_t n = strcspn(v, ",:"), item = strcspn(v, ",");
        int kind = item == n ? 0 : item - n == 6 && strncmp(v + n, ":crash", 6) == 0 ? 1 : -1;
        if (kind == crash && ((n == 1 && *v == '*') || (core && strlen(core) == n && strncasecmp(v, core, n) == 0)))
            return 1;
        v += item + (v[item] == ',');
    }
    return 0;
}

/* One shape: 0 if every element is within the bound (and the padding of C
 * untouched), else -1 with detail. */
static int check_one(const check_shape *s, const char *core, tg_rng *rng, char *detail, size_t len) {
    const int lda = (s->ta ? s->m : s->k) + s->pad, ldb = (s->tb ? s->k : s->n) + s->pad, ldc = s->n + s->pad;
    const size_t na = (size_t)(s->ta ? s->k : s->m) * lda, nb = (size_t)(s->tb ? s->n : s->k) * ldb;
    const size_t nc = (size_t)s->m * ldc;
    float *a = malloc(sizeof(float) * (na + nb + 2 * nc));
    if (!a) return snprintf(detail, len, "out of memory"), -1;
    float *b = a + na, *c = b + nb, *c0 = c + nc;
    tg_fill_uniform(rng, a, (int64_t)(na + nb + nc), -1.0f, 1.0f);
    memcpy(c0, c, sizeof(float) * nc);
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, s->m, s->n, s->k,
                s->alpha, a, lda, b, ldb, s->beta, c, ldc);
    if (test_fail(core, 0)) c[(size_t)(s->m / 2) * ldc + s->n / 2] += 1.0f;   /* as a broken kernel would */

    /* Any summation order, FMA or not: |fl(sum) - sum| <= gamma_K sum|a b| with
     * gamma_K = K u / (1 - K u), u = 2^-24; alpha, beta and the last add are 3
     * roundings more. A wrong or missing term is of the order of sum|a b| / K,
     * thousands of times more at these K. */
    const double u = ldexp(1.0, -24), g = (s->k + 3) * u / (1 - (s->k + 3) * u);
    int rc = 0;
    for (int i = 0; i < s->m && !rc; i++)
        for (int j = 0; j < ldc && !rc; j++) {
            size_t at = (size_t)i * ldc + j;
            if (j >= s->n) {   /* the padding: never written */
                if (memcmp(&c[at], &c0[at], sizeof(float)) != 0)
                    rc = -1, snprintf(detail, len, "%s%s %dx%dx%d: wrote C[%d][%d] beyond its %d columns",
                                      s->ta ? "T" : "N", s->tb ? "T" : "N", s->m, s->n, s->k, i, j, s->n);
                continue;
            }
            double sum = 0, mag = 0;
            for (int k = 0; k < s->k; k++) {
                double x = s->ta ? a[(size_t)k * lda + i] : a[(size_t)i * lda + k];
                double y = s->tb ? b[(size_t)j * ldb + k] : b[(size_t)k * ldb + j];
                sum += x * y;
                mag += fabs(x * y);
            }
            double want = s->alpha * sum + (double)s->beta * c0[at];
            double bound = g * (fabs(s->alpha) * mag + fabs((double)s->beta * c0[at]));
            if (!(fabs(c[at] - want) <= bound))   /* NaN fails too */
                rc = -1, snprintf(detail, len, "%s%s %dx%dx%d: C[%d][%d] = %.7g, the double loop gives %.7g (bound %.2g)",
                                  s->ta ? "T" : "N", s->tb ? "T" : "N", s->m, s->n, s->k, i, j, c[at], want, bound);
        }
    free(a);
    return rc;
}

static int check_here(const char *core, char *detail, size_t len) {
    if (test_fail(core, 1)) raise(SIGILL);   /* as a kernel with instructions the CPU lacks would */
    tg_rng rng;
    tg_rng_seed(&rng, 20240917, 1);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (check_one(&shapes[i], core, &rng, detail, len)) return TG_CHECK_MISMATCH;
    return TG_CHECK_PASSED;
}

typedef struct { const char *core; } check_job;
typedef struct { char *buf; size_t len, got; } check_text;

static int check_in_child(void *user, int fd) {
    const check_job *j = user;
    /* OpenBLAS's thread pool did not come along (Debian's build has no
     * fork handler): one thread, so no call waits for a thread that is gone */
    openblas_set_num_threads(1);
    char msg[256] = "";
    int r = check_here(j->core, msg, sizeof msg);
    ssize_t w = write(fd, msg, strlen(msg));
    return r == TG_CHECK_PASSED && w >= 0 ? 0 : 1;
}

static void keep_text(void *u, const char *bytes, size_t n) {
    check_text *t = u;
    while (n-- && t->got + 1 < t->len) t->buf[t->got++] = *bytes++;
    if (t->len) t->buf[t->got] = '\0';
}

int tg_blas_selfcheck(const char *core, char *detail, size_t len) {
    if (len) detail[0] = '\0';
    check_job job = {core};
    check_text text = {detail, len, 0};
    tg_child_end end;
    char err[160];
    if (tg_child_run(check_in_child, &job, 10.0, keep_text, &text, &end, err, sizeof err))
        return check_here(core, detail, len);   /* no child: no crash guard either */
    if (end.timed_out) snprintf(detail, len, "no answer in 10 s");
    else if (end.signal) snprintf(detail, len, "killed by signal %d, %s", end.signal, strsignal(end.signal));
    else return end.status == 0 ? TG_CHECK_PASSED : TG_CHECK_MISMATCH;
    return TG_CHECK_CRASHED;
}

/* ---- start-up ------------------------------------------------------------------- */
/* The marker "<restarts>:<core>"; anything else counts as restarts used up,
 * so a mangled marker can only stop restarts, never start a loop. */
static void read_marker(int *restarts, char *asked, size_t len) {
    const char *m = getenv(TG_BLAS_MARKER);
    *restarts = 0;
    asked[0] = '\0';
    if (!m) return;
    char *end;
    long n = strtol(m, &end, 10);
    size_t k = *end == ':' ? strlen(end + 1) : 0;
    if (n < 1 || n > TG_BLAS_MAX_RESTARTS || k == 0 || k >= len) {
        *restarts = TG_BLAS_MAX_RESTARTS;
        return;
    }
    *restarts = (int)n;
    memcpy(asked, end + 1, k + 1);
}

/* OPENBLAS_CORETYPE unless it is the one our own restart set. */
static const char *user_core(const char *asked) {
    const char *env = getenv("OPENBLAS_CORETYPE");   /* even "" counts: OpenBLAS acts on it */
    return env && !(asked[0] && strcasecmp(env, asked) == 0) ? env : NULL;
}

void tg_blas_info_get(tg_blas_info *b) {
    memset(b, 0, sizeof *b);
    const char *cfg = openblas_get_config(), *core = openblas_get_corename();
    /* "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the first two words */
    if (sscanf(cfg ? cfg : "", "%31s %31s", b->name, b->version) != 2) snprintf(b->version, sizeof b->version, "?");
    snprintf(b->core, sizeof b->core, "%s", core ? core : "?");
    int restarts;
    char asked[32];
    read_marker(&restarts, asked, sizeof asked);
    b->chosen_by = !getenv("OPENBLAS_CORETYPE") ? "openblas" : user_core(asked) ? "user" : "tapegrad";
    b->blas_threads = openblas_get_num_threads();
    b->threads = omp_get_max_threads();
    snprintf(b->xsmm, sizeof b->xsmm, "%s", libxsmm_get_target_arch());
    const int arch = libxsmm_get_target_archid();
    b->xsmm_bits = arch >= LIBXSMM_X86_AVX512 ? 512 : arch >= LIBXSMM_X86_AVX ? 256 : 128;
}

const char *tg_blas_info_str(const tg_blas_info *b, char *buf, size_t len) {
    snprintf(buf, len, "%s %s core=%s chosen_by=%s threads=%d omp_threads=%d libxsmm=%s", b->name, b->version,
             b->core, b->chosen_by, b->blas_threads, b->threads, b->xsmm);
    return buf;
}

/* The length of the word after "libxsmm=" in line (0 if absent), *w at it. */
static size_t xsmm_word(const char *line, const char **w) {
    const char *p = strstr(line, " libxsmm=");
    *w = p ? p + 9 : "";
    return p ? strcspn(*w, " ") : 0;
}

int tg_blas_same_kernel(const char *a, const char *b) {
    const char *xa, *xb;
    size_t xn = xsmm_word(a, &xa), xm = xsmm_word(b, &xb);
    if (xn != xm || strncmp(xa, xb, xn) != 0) return 0;
    for (int words = 0; words < 3; words++) {   /* name, version, core=... */
        size_t n = strcspn(a, " "), m = strcspn(b, " ");
        if (n != m || strncmp(a, b, n) != 0) return 0;
        a += n + (a[n] == ' ');
        b += m + (b[m] == ' ');
    }
    return 1;
}

void tg_blas_start_state(tg_blas_state *s, char *asked, size_t len, const char *detail) {
    *s = (tg_blas_state){.cpu = tg_cpu_detect(), .check = TG_CHECK_NOT_RUN, .check_detail = detail, .can_restart = 1};
    read_marker(&s->restarts, asked, len);
    s->asked = asked[0] ? asked : NULL;
    s->user_core = user_core(asked);
#ifdef TG_TEST_HOOKS
    const char *hook = getenv("TG_BLAS_TEST_AS_DETECTED");   /* OPENBLAS_CORETYPE plays OpenBLAS's own pick */
    if (hook && strcmp(hook, "1") == 0 && s->restarts == 0 && !s->asked) s->user_core = NULL;
#endif
    s->core = openblas_get_corename();
}

void tg_set_threads(int n) {
    openblas_set_num_threads(1);   /* its threaded sgemm mallocs per call; the ops split their own work */
    omp_set_num_threads(n > 0 ? n : 1);
}
