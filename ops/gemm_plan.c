/* The product plan (tg_gemm_plan.h): a table of decided shapes, the machine's
 * plan file, the measurement, the estimate. Not an op. */
#define _GNU_SOURCE   /* flock, mkdir */
#include "tg_gemm_plan.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <libxsmm.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "gemm.h"
#include "tg_file.h"
#include "tg_profile.h"   /* its clock */
#include "safetensors.h"   /* tg_fnv1a64 */

#define FORMAT "# tapegrad gemm plan 1"
#define COLUMNS "ta\tM\tN\tK\tlda\tldb\tldc\trun\tlib\txsmm_us\tblas_us"
#define CAP 4096                 /* shapes a process can hold (a model has tens) */
#define LOCK_WAIT_S 120          /* then measure without the lock, and say so */
#define MARGIN 0.03f             /* what the other library must win by to replace the estimate's pick */

typedef struct {
    int ta, M, N, K, lda, ldb, ldc;   /* the key (the strides too: a head's view runs
                                         slower than a whole matrix); M = 0: empty slot */
    int blocks;                  /* key too: 1 when run by tg_gemm_run_threads (OpenBLAS in blocks of C) */
    signed char xsmm;            /* the decision */
    char from;                   /* 'f' the file, 'm' measured now, 'e' estimated */
    char used;
    float us_xsmm, us_blas;      /* measured times (0: not measured) */
} entry;

static struct {
    pthread_mutex_t mu;
    int ready, mode;
    int planned;                 /* a product was planned: the mode is fixed from here on */
    char file[4096];             /* the plan file ("" when none) */
    char dir[3900];              /* measure: its folder, named by the program ("" when kept by none) */
    char key[600];
    int file_loaded;             /* measure mode: the file was read once */
    entry tab[CAP];
    int warned_full, warned_keep;
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};


typedef struct { int ta, M, N, K, lda, ldb, ldc, blocks; } shape;

static int same(const entry *e, const shape *k) {
    return e->ta == k->ta && e->M == k->M && e->N == k->N && e->K == k->K && e->lda == k->lda && e->ldb == k->ldb &&
           e->ldc == k->ldc && e->blocks == k->blocks;
}

static entry *slot(const shape *k) {
    uint64_t h = tg_fnv1a64(TG_FNV1A64_INIT, k, sizeof *k);
    for (unsigned i = 0; i < CAP; i++) {
        entry *e = &S.tab[(h + i) % CAP];
        if (!e->M || same(e, k)) return e;
    }
    return NULL;
}

static entry new_entry(const shape *k, int xsmm, char from) {
    return (entry){.ta = k->ta, .M = k->M, .N = k->N, .K = k->K, .lda = k->lda, .ldb = k->ldb, .ldc = k->ldc,
                   .blocks = k->blocks, .xsmm = (signed char)xsmm, .from = from};
}

/* ---- the machine key ---------------------------------------------------- */
static void cpu_name(char *buf, size_t len) {
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *v = strchr(line, ':');
            if (v) {
                v++;
                while (*v == ' ' || *v == '\t') v++;
                snprintf(buf, len, "%.*s", (int)strcspn(v, "\n"), v);
            }
            break;
        }
    }
    fclose(f);
}

const char *tg_gemm_plan_machine(char *buf, size_t len) {
    char name[256];
    cpu_name(name, sizeof name);
    unsigned fam = 0, model = 0, step = 0;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        fam = (a >> 8) & 15;
        model = (a >> 4) & 15;
        step = a & 15;
        if (fam == 15) fam += (a >> 20) & 255;
        if (fam >= 6) model += ((a >> 16) & 15) << 4;
    }
#endif
    const char *cfg = openblas_get_config(), *core = openblas_get_corename();
    snprintf(buf, len, "cpu=%s family=%u model=%u stepping=%u; openblas=%s core=%s; libxsmm=%s target=%s; format=1",
             name, fam, model, step, cfg ? cfg : "?", core ? core : "?", LIBXSMM_VERSION, libxsmm_get_target_arch());
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\t') *p = ' ';
    return buf;
}

/* ---- the estimate --------------------------------------------------------- */
/* Measured with bench_gemm, one thread (docs/speed.md#plan). On AVX-512
 * (libxsmm's skx/cpx targets; AMD Zen 5) libxsmm was 2-25% faster with A as
 * stored up to N = 1024, and with A transposed only while C is small. On AVX2
 * (libxsmm's hsw target, OpenBLAS's Haswell/Zen kernels; an AMD Zen 3 and the
 * same code on Zen 5) OpenBLAS was faster for all but small products: libxsmm
 * won only with A as stored and N or K at most 64, or a transposed A with
 * M·N·K at most 2^17. */
static int estimate(int ta, int M, int N, int K) {
    if (libxsmm_get_target_archid() >= LIBXSMM_X86_AVX512_CORE)
        return ta ? (int64_t)M * N <= TG_GEMM_XSMM_MAX_MN_TA : N <= TG_GEMM_XSMM_MAX_N;
    if (ta) return (int64_t)M * N * K <= ((int64_t)1 << 17);
    return N <= 64 || K <= 64;
}

/* ---- the file --------------------------------------------------------------- */
static int mkdirs(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) && errno != EEXIST) return -1;
            *s = '/';
        }
    return mkdir(p, 0755) && errno != EEXIST ? -1 : 0;
}

/* Reads path into the table ('f' entries; a shape decided already is kept,
 * but for adopt, which takes the file's decision if the file has it).
 * 0 read (or no file: *missing = 1), -1 refused with the reason in err. */
typedef struct { shape k; int x; float ux, ub; } file_row;
static int load(const char *path, int *missing, entry *adopt, char *err, size_t errlen) {
    *missing = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) {
            *missing = 1;
            return 0;
        }
        snprintf(err, errlen, "plan file %s: %s", path, strerror(errno));
        return -1;
    }
    char line[1024], want[700];
    snprintf(want, sizeof want, "# machine=%s", S.key);
    static file_row rows[CAP];   /* under S.mu */
    int n = 0, ln = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        size_t l = strlen(line);
        if (!l || line[l - 1] != '\n') {
            snprintf(err, errlen, "plan file %s line %d: cut short or longer than %zu bytes", path, ln, sizeof line - 2);
            rc = -1;
            break;
        }
        line[--l] = 0;
        if (ln == 1 && strcmp(line, FORMAT) != 0) {
            snprintf(err, errlen, "plan file %s line 1: not a tapegrad plan of this format (want '%s')", path, FORMAT);
            rc = -1;
            break;
        }
        if (ln == 2 && strcmp(line, want) != 0) {
            snprintf(err, errlen, "plan file %s was made on another machine or with other libraries: it says '%.250s', "
                     "this is '%.250s'", path, strncmp(line, "# machine=", 10) ? line : line + 10, S.key);
            rc = -1;
            break;
        }
        if (ln <= 3) {   /* line 3: the column names */
            if (ln == 3 && strcmp(line, COLUMNS) != 0) {
                snprintf(err, errlen, "plan file %s line 3: not the column line", path);
                rc = -1;
                break;
            }
            continue;
        }
        char lib[16], run[16], tail;
        shape k;
        float ux, ub;
        if (sscanf(line, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%15s\t%15s\t%f\t%f%c", &k.ta, &k.M, &k.N, &k.K, &k.lda,
                   &k.ldb, &k.ldc, run, lib, &ux, &ub, &tail) != 11 || (strcmp(run, "whole") && strcmp(run, "blocks")) ||
            (k.ta != 0 && k.ta != 1) || k.M <= 0 || k.N <= 0 || k.K <= 0 || k.lda < (k.ta ? k.M : k.K) ||
            k.ldb < k.N || k.ldc < k.N || !(ux >= 0) || !(ub >= 0) ||
            (strcmp(lib, "libxsmm") && strcmp(lib, "openblas"))) {
            snprintf(err, errlen, "plan file %s line %d: not 'ta M N K lda ldb ldc whole|blocks libxsmm|openblas xsmm_us "
                     "blas_us' "
                     "with sizes that fit: '%.80s'", path, ln, line);
            rc = -1;
            break;
        }
        k.blocks = run[0] == 'b';
        if (n == CAP) {
            snprintf(err, errlen, "plan file %s: more than %d shapes", path, CAP);
            rc = -1;
            break;
        }
        rows[n++] = (file_row){k, lib[0] == 'l', ux, ub};
    }
    if (!rc && ferror(f)) {
        snprintf(err, errlen, "plan file %s: read error", path);
        rc = -1;
    }
    if (!rc && ln < 3) {
        snprintf(err, errlen, "plan file %s: %s", path, ln ? "cut short before its column line" : "empty");
        rc = -1;
    }
    fclose(f);
    if (rc) return rc;   /* refused as a whole: nothing of it is used */
    for (int i = 0; i < n; i++) {
        entry *e = slot(&rows[i].k);
        if (!e || (e->M && e != adopt)) continue;
        char used = e->M ? e->used : 0;
        *e = new_entry(&rows[i].k, rows[i].x, 'f');
        e->used = used;
        e->us_xsmm = rows[i].ux;
        e->us_blas = rows[i].ub;
    }
    return 0;
}

static int cmp_entry(const void *a, const void *b) {
    const entry *x = *(entry *const *)a, *y = *(entry *const *)b;
    if (x->ta != y->ta) return x->ta - y->ta;
    if (x->M != y->M) return x->M < y->M ? -1 : 1;
    if (x->N != y->N) return x->N < y->N ? -1 : 1;
    if (x->K != y->K) return x->K < y->K ? -1 : 1;
    if (x->lda != y->lda) return x->lda < y->lda ? -1 : 1;
    if (x->ldb != y->ldb) return x->ldb < y->ldb ? -1 : 1;
    if (x->ldc != y->ldc) return x->ldc < y->ldc ? -1 : 1;
    return x->blocks - y->blocks;
}

/* The entries (all, or the used ones) in key order: 0..n into list. */
static int sorted(entry **list, int used_only, int measured_only) {
    int n = 0;
    for (int i = 0; i < CAP; i++) {
        entry *e = &S.tab[i];
        if (e->M && (!used_only || e->used) && (!measured_only || e->from != 'e')) list[n++] = e;
    }
    qsort(list, (size_t)n, sizeof *list, cmp_entry);
    return n;
}

static int save(const char *path, char *err, size_t errlen) {
    static entry *list[CAP];
    int n = sorted(list, 0, 1);
    size_t cap = 256 + strlen(S.key) + (size_t)n * 144, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    len += (size_t)snprintf(buf + len, cap - len, "%s\n# machine=%s\n%s\n", FORMAT, S.key, COLUMNS);
    for (int i = 0; i < n; i++) {
        const entry *e = list[i];
        len += (size_t)snprintf(buf + len, cap - len, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%.2f\t%.2f\n", e->ta, e->M,
                                e->N, e->K, e->lda, e->ldb, e->ldc, e->blocks ? "blocks" : "whole",
                                e->xsmm ? "libxsmm" : "openblas", e->us_xsmm, e->us_blas);
    }
    int rc = tg_file_replace(path, buf, len, err, errlen);
    free(buf);
    return rc;
}

/* ---- measuring ---------------------------------------------------------------- */
static double now_us(void) { return 1e6 * tg_profile_clock(); }

/* Both libraries on this shape with its strides, on the calling thread, as
 * a step runs it: a head's product (run whole) on operands cycled through
 * copies that together outgrow the L2 cache, as the attention ops stream
 * through heads (one hot copy flattered libxsmm on a head's 64×128×64 by
 * 10%: AVX2 code on an AMD Zen 5, OpenBLAS Haswell, libxsmm hsw); a linear
 * layer's (run in blocks) on one hot copy, as tg_matmul runs on what was
 * just made (cycled, a 128×64×2048 weight grad came out 13% the other way
 * there); rounds alternating the two libraries, each the best of
 * its rounds (the least disturbed).
 * 0 and the times, or -1 (out of memory: the caller estimates). */
static int measure(const shape *k, float *us_x, float *us_b, int *xsmm) {
    const int M = k->M, N = k->N, K = k->K;
    size_t na = (size_t)(k->ta ? K : M) * k->lda, nb = (size_t)K * k->ldb, nc = (size_t)M * k->ldc;
    size_t one = (na + nb + nc) * sizeof(float);
    int copies = (int)((size_t)(8 << 20) / one);
    copies = copies < 1 ? 1 : copies > 32 ? 32 : copies;
    if (k->blocks) copies = 1;   /* a linear layer's product: its operands were just made, and are hot */
    float *mem = malloc(one * (size_t)copies);
    if (!mem) return -1;
    for (size_t i = 0; i < (na + nb + nc) * (size_t)copies; i++) mem[i] = (float)((i * 7) % 13) * 0.01f - 0.06f;
    tg_gemm_plan px, pb;
    tg_gemm_plan_fixed(&pb, k->ta, 0, M, N, K, 1.0f, k->lda, k->ldb, 0.0f, k->ldc, 0);
    tg_gemm_plan_fixed(&px, k->ta, 0, M, N, K, 1.0f, k->lda, k->ldb, 0.0f, k->ldc, 1);
    *xsmm = px.xsmm;
    double flops = 2.0 * M * N * K;
    int reps = (int)(4e6 / (flops > 1 ? flops : 1)) + 1;   /* a round: ~4 MFLOP, 0.05-0.3 ms */
    if (reps < copies) reps = copies;
    if (reps > 2000) reps = 2000;
    double best[2] = {1e30, 1e30}, spent = 0;
    /* round -1 warms pages, caches and kernels; then at least 9 rounds and 20 ms */
    for (int round = -1; round < 9 || (spent < 20e3 && round < 40); round++)
        for (int w = 0; w < 1 + px.xsmm; w++) {
            const tg_gemm_plan *p = w ? &px : &pb;
            double t0 = now_us();
            for (int r = 0; r < reps; r++) {
                float *A = mem + (size_t)(r % copies) * (na + nb + nc);
                tg_gemm_run_serial(p, k->blocks, A, A + na, A + na + nb);
            }
            double t = (now_us() - t0) / reps;
            if (round >= 0 && t < best[w]) best[w] = t;
            if (round >= 0) spent += t * reps;
        }
    *us_b = (float)best[0];
    *us_x = px.xsmm ? (float)best[1] : 0.0f;
    free(mem);
    return 0;
}

/* ---- set-up --------------------------------------------------------------------- */
static int setup_locked(const char *spec, char *err, size_t errlen) {
    tg_gemm_plan_machine(S.key, sizeof S.key);
    S.dir[0] = S.file[0] = 0;
    if (spec && (strcmp(spec, "measure") == 0 || strncmp(spec, "measure=", 8) == 0)) {
        S.mode = TG_PLAN_MEASURE;   /* "measure": in this process only; "measure=DIR": kept in the folder named */
        if (spec[7] == '=' && spec[8]) {
            char h[17];
            snprintf(S.dir, sizeof S.dir, "%s", spec + 8);
            snprintf(h, sizeof h, "%016llx", (unsigned long long)tg_fnv1a64(TG_FNV1A64_INIT, S.key, strlen(S.key)));
            snprintf(S.file, sizeof S.file, "%s/gemm-plan-%s.tsv", S.dir, h);
        }
    } else if (!spec || !*spec || strcmp(spec, "estimate") == 0) {
        S.mode = TG_PLAN_ESTIMATE;
        S.file[0] = 0;
    } else {
        S.mode = TG_PLAN_FILE;
        snprintf(S.file, sizeof S.file, "%s", spec);
        int missing;
        if (load(S.file, &missing, NULL, err, errlen) || missing) {
            if (missing) snprintf(err, errlen, "plan file %s: no such file", S.file);
            S.ready = 1;
            return -1;   /* the caller says so; products are estimated */
        }
    }
    S.ready = 1;
    return 0;
}

int tg_gemm_plan_setup(const char *spec, char *err, size_t errlen) {
    pthread_mutex_lock(&S.mu);
    int rc = -1;
    if (S.planned) snprintf(err, errlen, "the product plan is already in use (set it before the first product)");
    else {   /* before any product the mode may be set again (a forked child that only probes, say) */
        memset(S.tab, 0, sizeof S.tab);
        S.file_loaded = 0;
        rc = setup_locked(spec, err, errlen);
    }
    pthread_mutex_unlock(&S.mu);
    return rc;
}

const char *tg_gemm_plan_mode(void) {
    pthread_mutex_lock(&S.mu);
    const int m = S.ready ? S.mode : TG_PLAN_ESTIMATE;
    pthread_mutex_unlock(&S.mu);
    return m == TG_PLAN_MEASURE ? "measure" : m == TG_PLAN_FILE ? "file" : "estimate";
}

int tg_gemm_plan_setup_env(const char *prog, const char *dflt) {
    const char *spec = getenv("TG_PLAN");
    char err[1200], kept[4000];
    if (!spec || !*spec) spec = dflt;
    if (spec && strcmp(spec, "measure") == 0) {   /* the machine's plan folder, as a program keeps it */
        const char *d = getenv("TG_PLAN_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
        if (d && *d) snprintf(kept, sizeof kept, "measure=%s", d);
        else if (x && *x) snprintf(kept, sizeof kept, "measure=%s/tapegrad", x);
        else if (h && *h) snprintf(kept, sizeof kept, "measure=%s/.cache/tapegrad", h);
        else snprintf(kept, sizeof kept, "measure");
        spec = kept;
    }
    if (tg_gemm_plan_setup(spec, err, sizeof err) == 0) return 0;
    fprintf(stderr, "%s: TG_PLAN: %s; estimating every product instead\n", prog, err);   /* the program asked */
    return -1;
}

/* measure mode: the file read once, refused files said once (and replaced by
 * the next save, as measuring goes on). */
static void load_measure_file(void) {
    if (S.file_loaded || !S.file[0]) return;
    S.file_loaded = 1;
    char err[1200];
    int missing;
    if (load(S.file, &missing, NULL, err, sizeof err))
        fprintf(stderr, "tapegrad: %s; measuring again (the file will be replaced)\n", err);
}

/* Measures shape e under the file's lock, after re-reading the file (another
 * run may have measured it meanwhile), and saves the union. */
static void measure_and_keep(entry *e) {
    char err[1200], lockpath[4200];
    int fd = -1;
    if (S.file[0]) {   /* the folder the program named: made on its word */
        snprintf(lockpath, sizeof lockpath, "%s.lock", S.file);
        if (mkdirs(S.dir))
            snprintf(err, sizeof err, "cannot make the folder %.900s: %s", S.dir, strerror(errno));
        else if (tg_file_check_target(lockpath, err, sizeof err) == 0 &&
                 (fd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
            snprintf(err, sizeof err, "%.900s: %s", lockpath, strerror(errno));
        if (fd < 0 && !S.warned_keep) {   /* measured all the same, kept for this process only */
            fprintf(stderr, "tapegrad: the product plan is not kept (%s): measuring in this process only\n", err);
            S.warned_keep = 1;
        }
        if (fd >= 0) {
            double t0 = now_us();
            while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
                if (now_us() - t0 > LOCK_WAIT_S * 1e6) {
                    fprintf(stderr, "tapegrad: %s held for %d s by another run: measuring without it\n", lockpath,
                            LOCK_WAIT_S);
                    break;
                }
                struct timespec ts = {0, 20 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
            int missing;   /* re-read: another run may have measured this shape meanwhile (a refused file was said at the first load, and is replaced below) */
            if (load(S.file, &missing, e, err, sizeof err) == 0 && e->from == 'f') {
                close(fd);
                return;
            }
        }
    }
    float ux, ub;
    int can_x;
    shape k = {e->ta, e->M, e->N, e->K, e->lda, e->ldb, e->ldc, e->blocks};
    if (measure(&k, &ux, &ub, &can_x) == 0) {
        /* the estimate's pick stays unless the other library is faster by more than
         * MARGIN: near ties would otherwise flip from one measurement to the next, and
         * with them the rounding, for nothing; and unless a second measurement says
         * so too (a neighbour's burst of load, on a shared AMD Zen 5, once made a
         * product look 10% slower on libxsmm where it is 15% faster) */
        int pick = can_x && (e->xsmm ? !(ub < ux * (1 - MARGIN)) : ux < ub * (1 - MARGIN));
        float ux2, ub2;
        struct timespec pause = {0, 30 * 1000 * 1000};
        if (pick != e->xsmm && can_x && nanosleep(&pause, NULL) == 0 && measure(&k, &ux2, &ub2, &can_x) == 0) {
            int again = e->xsmm ? !(ub2 < ux2 * (1 - MARGIN)) : ux2 < ub2 * (1 - MARGIN);
            if (again != pick) pick = e->xsmm;
            ux = ux < ux2 ? ux : ux2;
            ub = ub < ub2 ? ub : ub2;
        }
        e->xsmm = (signed char)pick;
        e->us_xsmm = ux;
        e->us_blas = ub;
        e->from = 'm';
        if (S.file[0] && fd >= 0 && save(S.file, err, sizeof err))
            fprintf(stderr, "tapegrad: the product plan could not be kept: %s\n", err);
    }
    if (fd >= 0) close(fd);   /* releases the lock */
}

int tg_gemm_plan_choose(int ta, int M, int N, int K, int lda, int ldb, int ldc, int blocks, int may_measure) {
    shape k = {ta, M, N, K, lda, ldb, ldc, blocks};
    pthread_mutex_lock(&S.mu);
    if (!S.ready) {   /* no program set a plan up: the estimate, nothing read or written */
        char err[64];
        setup_locked("estimate", err, sizeof err);
    }
    S.planned = 1;
    if (S.mode == TG_PLAN_MEASURE) load_measure_file();
    entry *e = slot(&k);
    int x;
    if (!e) {   /* the table is full: estimate, unrecorded */
        if (!S.warned_full) fprintf(stderr, "tapegrad: more than %d product shapes: the rest are estimated\n", CAP);
        S.warned_full = 1;
        x = estimate(ta, M, N, K);
    } else {
        if (!e->M) {
            *e = new_entry(&k, estimate(ta, M, N, K), 'e');
            if (may_measure && S.mode == TG_PLAN_MEASURE) measure_and_keep(e);
        }
        e->used = 1;
        x = e->xsmm;
    }
    pthread_mutex_unlock(&S.mu);
    return x;
}

const char *tg_gemm_plan_name(char *buf) {
    static entry *list[CAP];
    pthread_mutex_lock(&S.mu);
    int n = sorted(list, 1, 0);
    uint64_t h = TG_FNV1A64_INIT;
    for (int i = 0; i < n; i++) {
        const entry *e = list[i];
        int k[9] = {e->ta, e->M, e->N, e->K, e->lda, e->ldb, e->ldc, e->blocks, e->xsmm};
        h = tg_fnv1a64(h, k, sizeof k);
    }
    pthread_mutex_unlock(&S.mu);
    if (!n) snprintf(buf, TG_PLAN_NAME_BUF, "none");
    else snprintf(buf, TG_PLAN_NAME_BUF, "%08x", (unsigned)(h ^ (h >> 32)));
    return buf;
}

const char *tg_gemm_plan_describe(char *buf, size_t len) {
    static entry *list[CAP];
    char name[TG_PLAN_NAME_BUF];
    tg_gemm_plan_name(name);
    pthread_mutex_lock(&S.mu);
    int n = sorted(list, 1, 0), nx = 0, nm = 0, ne = 0;
    for (int i = 0; i < n; i++) {
        nx += list[i]->xsmm;
        nm += list[i]->from == 'm';
        ne += list[i]->from == 'e';
    }
    const char *mode = S.mode == TG_PLAN_MEASURE ? "measure" : S.mode == TG_PLAN_ESTIMATE ? "estimate" : "file";
    snprintf(buf, len, "%s %s%s%s: %d shapes (%d libxsmm, %d openblas; %d measured now, %d estimated)", name, mode,
             S.file[0] ? " " : "", S.file, n, nx, n - nx, nm, ne);
    pthread_mutex_unlock(&S.mu);
    return buf;
}

void tg_gemm_plan_reset_used(void) {
    pthread_mutex_lock(&S.mu);
    for (int i = 0; i < CAP; i++) S.tab[i].used = 0;
    pthread_mutex_unlock(&S.mu);
}
