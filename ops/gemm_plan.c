/* The product plan (tg_gemm_plan.h): a table of decided shapes, the machine's
 * plan file, the estimate. Not an op, and not the products: ops/gemm.c asks
 * it for decisions, and hands it a timer when the program measures
 * (ops/gemm_plan.h); this file never runs a product itself.
 *
 * Two phases, as FFTW plans before it computes: a product only looks its
 * shape up (a miss is estimated, and in measure mode marked wanted); the
 * program's tg_gemm_plan_measure times the wanted shapes and keeps them. The
 * file is read and written only in the program's calls (set-up, measure):
 * never a file, a lock or a timing inside a product.
 *
 * Threads: a decided shape is read without a lock (its slot's state is
 * published with release/acquire after its fields are written; slots are
 * never freed while products run). The mutex guards inserts and set-up; a
 * measurement runs outside it, one at a time in the process (S.measuring),
 * under the plan file's lock, its shapes PENDING meanwhile (a product that
 * meets one waits for its decision). */
#define _GNU_SOURCE   /* mkdir, nanosleep */
#include "tg_gemm_plan.h"
#include "gemm_plan.h"

#include <cblas.h>
#include <errno.h>
#include <libxsmm.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "tg_core.h"   /* tg_errf, tg_fnv1a64 */
#include "tg_file.h"

#define FORMAT "# tapegrad gemm plan 1"
#define COLUMNS "ta\tM\tN\tK\tlda\tldb\tldc\trun\tlib\txsmm_us\tblas_us"
#define CAP 4096                 /* shapes a process can hold (a model has tens) */
#define LOCK_WAIT_S 120          /* then measure for this process only, and say so */
#define MARGIN 0.03f             /* what the other library must win by to replace the estimate's pick */
/* The AVX-512 estimate (bench_gemm, one thread, AMD Zen 5): with A as stored
 * libxsmm was 2-25% faster up to the widest measured, N = 1024; with A
 * transposed (weight grads, K = the batch's rows, long) only while C is
 * small, M·N <= 256·512. */
#define XSMM_MAX_N 1024
#define XSMM_MAX_MN_TA (256 * 512)

enum { EMPTY, PENDING, DECIDED };   /* a slot's state: PENDING while one thread measures it */

typedef struct {
    _Atomic int state;
    tg_plan_shape k;             /* set before the state leaves EMPTY, never changed after */
    signed char xsmm;            /* the decision */
    char from;                   /* 'f' the file, 'm' measured now, 'e' estimated */
    char wanted;                 /* estimated in measure mode: the next tg_gemm_plan_measure times it */
    atomic_char used;            /* looked up since the start or the last reset */
    float us_xsmm, us_blas;      /* measured times (0: not measured) */
} entry;

/* What the plan says at most once a process (notes go to the program's
 * callback, tg_gemm_plan_on_note; none set, nothing is said). */
enum { SAID_REFUSED = 1, SAID_NOT_KEPT = 2, SAID_BUSY = 4, SAID_SAVE = 8, SAID_FULL = 16 };

static struct {
    pthread_mutex_t mu;          /* inserts, set-up, notes; never a decided shape's look-up */
    pthread_cond_t decided;      /* broadcast when a PENDING slot is decided */
    pthread_mutex_t measuring;   /* one measurement at a time: they would disturb each other, and
                                    the file's record lock belongs to the process, not a thread */
    _Atomic int ready;
    int mode, planned, said;
    char file[4096];             /* the plan file ("" when none) */
    char dir[3900];              /* measure: its folder, named by the program ("" when kept by none) */
    char key[600];
    void (*note)(const char *msg, void *user);
    void *note_user;
    entry tab[CAP];
} S = {.mu = PTHREAD_MUTEX_INITIALIZER, .decided = PTHREAD_COND_INITIALIZER,
       .measuring = PTHREAD_MUTEX_INITIALIZER};

static int same(const tg_plan_shape *a, const tg_plan_shape *b) {
    return a->ta == b->ta && a->M == b->M && a->N == b->N && a->K == b->K && a->lda == b->lda &&
           a->ldb == b->ldb && a->ldc == b->ldc && a->blocks == b->blocks;
}

static int cmp_shape(const tg_plan_shape *x, const tg_plan_shape *y) {
    const int a[8] = {x->ta, x->M, x->N, x->K, x->lda, x->ldb, x->ldc, x->blocks};
    const int b[8] = {y->ta, y->M, y->N, y->K, y->lda, y->ldb, y->ldc, y->blocks};
    for (int i = 0; i < 8; i++)
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
}

static int state(const entry *e) { return atomic_load_explicit(&((entry *)e)->state, memory_order_acquire); }
static void publish(entry *e, int st) { atomic_store_explicit(&e->state, st, memory_order_release); }

/* The slot holding k, or NULL with *empty the first empty slot on its probe
 * path (NULL too: the table is full). Lock-free: EMPTY ends the path, and a
 * slot's key is written before its state leaves EMPTY. */
static entry *find(const tg_plan_shape *k, entry **empty) {
    uint64_t h = tg_fnv1a64(TG_FNV1A64_INIT, k, sizeof *k);
    if (empty) *empty = NULL;
    for (unsigned i = 0; i < CAP; i++) {
        entry *e = &S.tab[(h + i) % CAP];
        int st = state(e);
        if (st == EMPTY) {
            if (empty) *empty = e;
            return NULL;
        }
        if (same(&e->k, k)) return e;
    }
    return NULL;
}

static void mark_used(entry *e) {
    if (!atomic_load_explicit(&e->used, memory_order_relaxed)) atomic_store_explicit(&e->used, 1, memory_order_relaxed);
}

/* Says msg once per kind (under S.mu), to the program's callback if it set one. */
static void note_locked(int kind, const char *msg) {
    if (S.said & kind) return;
    S.said |= kind;
    if (S.note) S.note(msg, S.note_user);
}

static void note(int kind, const char *msg) {
    pthread_mutex_lock(&S.mu);
    note_locked(kind, msg);
    pthread_mutex_unlock(&S.mu);
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
/* Measured with bench_gemm, one thread (docs/speed.md#the-product-plan). On AVX-512
 * (libxsmm's skx/cpx targets; AMD Zen 5) libxsmm was 2-25% faster with A as
 * stored up to N = 1024, and with A transposed only while C is small. On AVX2
 * (libxsmm's hsw target, OpenBLAS's Haswell/Zen kernels; an AMD Zen 3 and the
 * same code on Zen 5) OpenBLAS was faster for all but small products: libxsmm
 * won only with A as stored and N or K at most 64, or a transposed A with
 * M·N·K at most 2^17. */
static int estimate(int ta, int M, int N, int K) {
    if (libxsmm_get_target_archid() >= LIBXSMM_X86_AVX512_CORE)
        return ta ? (int64_t)M * N <= XSMM_MAX_MN_TA : N <= XSMM_MAX_N;
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


/* ---- the file --------------------------------------------------------------- */
/* A file's rows, read whole or not at all (refused: the reason in err). */
typedef struct { tg_plan_shape k; int x; float ux, ub; } row;
typedef struct { row *r; int n; } rows;

static int read_rows(const char *path, rows *out, int *missing, char *err, size_t errlen) {
    *out = (rows){0};
    *missing = 0;
    char why[4400];
    int fd = tg_file_open_read(path, why, sizeof why);   /* a FIFO named as the plan is refused, not waited on */
    if (fd < 0) {
        if (errno == ENOENT) {
            *missing = 1;
            return 0;
        }
        return tg_errf(err, errlen, "plan file %s", why);
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return tg_errf(err, errlen, "plan file %s: %s", path, strerror(errno));
    }
    char line[1024], want[700];
    snprintf(want, sizeof want, "# machine=%s", S.key);
    row *r = malloc(CAP * sizeof *r);
    int n = 0, ln = 0, rc = r ? 0 : tg_errf(err, errlen, "plan file %s: out of memory", path);
    while (!rc && fgets(line, sizeof line, f)) {
        ln++;
        size_t l = strlen(line);
        if (!l || line[l - 1] != '\n') {
            rc = tg_errf(err, errlen, "plan file %s line %d: cut short or longer than %zu bytes", path, ln, sizeof line - 2);
            break;
        }
        line[--l] = 0;
        if (ln == 1 && strcmp(line, FORMAT) != 0) {
            rc = tg_errf(err, errlen, "plan file %s line 1: not a tapegrad plan of this format (want '%s')", path, FORMAT);
            break;
        }
        if (ln == 2 && strcmp(line, want) != 0) {
            rc = tg_errf(err, errlen, "plan file %s was made on another machine or with other libraries: it says '%.250s', "
                         "this is '%.250s'", path, strncmp(line, "# machine=", 10) ? line : line + 10, S.key);
            break;
        }
        if (ln <= 3) {   /* line 3: the column names */
            if (ln == 3 && strcmp(line, COLUMNS) != 0) {
                rc = tg_errf(err, errlen, "plan file %s line 3: not the column line", path);
                break;
            }
            continue;
        }
        char lib[16], run[16], tail;
        tg_plan_shape k;
        float ux, ub;
        if (sscanf(line, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%15s\t%15s\t%f\t%f%c", &k.ta, &k.M, &k.N, &k.K, &k.lda,
                   &k.ldb, &k.ldc, run, lib, &ux, &ub, &tail) != 11 || (strcmp(run, "whole") && strcmp(run, "blocks")) ||
            (k.ta != 0 && k.ta != 1) || k.M <= 0 || k.N <= 0 || k.K <= 0 || k.lda < (k.ta ? k.M : k.K) ||
            k.ldb < k.N || k.ldc < k.N || !(ux >= 0) || !(ub >= 0) ||
            (strcmp(lib, "libxsmm") && strcmp(lib, "openblas"))) {
            rc = tg_errf(err, errlen, "plan file %s line %d: not 'ta M N K lda ldb ldc whole|blocks libxsmm|openblas "
                         "xsmm_us blas_us' with sizes that fit: '%.80s'", path, ln, line);
            break;
        }
        k.blocks = run[0] == 'b';
        if (n == CAP) {
            rc = tg_errf(err, errlen, "plan file %s: more than %d shapes", path, CAP);
            break;
        }
        r[n++] = (row){k, lib[0] == 'l', ux, ub};
    }
    if (!rc && ferror(f)) rc = tg_errf(err, errlen, "plan file %s: read error", path);
    if (!rc && ln < 3) rc = tg_errf(err, errlen, "plan file %s: %s", path, ln ? "cut short before its column line" : "empty");
    fclose(f);
    if (rc) {   /* refused as a whole: nothing of it is used */
        free(r);
        return -1;
    }
    *out = (rows){r, n};
    return 0;
}

static const row *row_of(const rows *rs, const tg_plan_shape *k) {
    for (int i = 0; i < rs->n; i++)
        if (same(&rs->r[i].k, k)) return &rs->r[i];
    return NULL;
}

/* The file's rows as decisions of this process, for shapes not decided yet (under S.mu). */
static void adopt(const rows *rs) {
    for (int i = 0; i < rs->n; i++) {
        entry *empty, *e = find(&rs->r[i].k, &empty);
        if (e || !empty) continue;
        empty->k = rs->r[i].k;
        empty->xsmm = (signed char)rs->r[i].x;
        empty->from = 'f';
        empty->wanted = 0;
        empty->us_xsmm = rs->r[i].ux;
        empty->us_blas = rs->r[i].ub;
        atomic_store_explicit(&empty->used, 0, memory_order_relaxed);
        publish(empty, DECIDED);
    }
}

static int cmp_row(const void *a, const void *b) {
    const row *x = a, *y = b;
    int c = cmp_shape(&x->k, &y->k);
    return c ? c : x->x - y->x;
}

/* Under the file's lock: the file as it is now (rows), with this process's
 * measured and read decisions over it (the shapes being measured are PENDING
 * and this thread's), written whole. Another run's rows for shapes this run
 * only estimated stay. */
static int save_merged(const rows *file, char *err, size_t errlen) {
    row *all = malloc((size_t)(file->n + CAP) * sizeof *all);
    if (!all) return tg_errf(err, errlen, "out of memory");
    int n = 0;
    for (int i = 0; i < CAP; i++) {
        const entry *e = &S.tab[i];
        if (state(e) != EMPTY && e->from != 'e') all[n++] = (row){e->k, e->xsmm, e->us_xsmm, e->us_blas};
    }
    for (int i = 0; i < file->n; i++) {
        int mine = 0;
        for (int j = 0; j < n && !mine; j++) mine = same(&all[j].k, &file->r[i].k);
        if (!mine) all[n++] = file->r[i];
    }
    qsort(all, (size_t)n, sizeof *all, cmp_row);
    size_t cap = 256 + strlen(S.key) + (size_t)n * 144, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        free(all);
        return tg_errf(err, errlen, "out of memory");
    }
    len += (size_t)snprintf(buf + len, cap - len, "%s\n# machine=%s\n%s\n", FORMAT, S.key, COLUMNS);
    for (int i = 0; i < n; i++) {
        const row *r = &all[i];
        len += (size_t)snprintf(buf + len, cap - len, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%.2f\t%.2f\n", r->k.ta,
                                r->k.M, r->k.N, r->k.K, r->k.lda, r->k.ldb, r->k.ldc, r->k.blocks ? "blocks" : "whole",
                                r->x ? "libxsmm" : "openblas", r->ux, r->ub);
    }
    int rc = tg_file_replace(S.file, buf, len, err, errlen);
    free(buf);
    free(all);
    return rc;
}

/* S.file's rows into rs (none when it is missing), or -1 with rs empty when
 * the file is refused: said once (a note), and measure mode measures again.
 * mu_held: the caller holds S.mu. */
static int read_or_say(rows *rs, int mu_held) {
    char why[4600], msg[4800];
    int missing;
    if (read_rows(S.file, rs, &missing, why, sizeof why) == 0) return 0;
    snprintf(msg, sizeof msg, "%.4600s; measuring again (the file will be replaced)", why);
    if (mu_held) note_locked(SAID_REFUSED, msg);
    else note(SAID_REFUSED, msg);
    return -1;
}

/* ---- measuring ---------------------------------------------------------------- */
/* The estimate's pick stays unless the other library is faster by more than
 * MARGIN: near ties would otherwise flip from one measurement to the next, and
 * with them the rounding, for nothing; and unless a second measurement says so
 * too (a neighbour's burst of load, on a shared AMD Zen 5, once made a product
 * look 10% slower on libxsmm where it is 15% faster). */
static void measure(entry *e, tg_plan_timer timer) {
    float ux, ub, ux2, ub2;
    int can_x;
    if (timer(&e->k, &ux, &ub, &can_x)) return;   /* out of memory: the estimate stands */
    int pick = can_x && (e->xsmm ? !(ub < ux * (1 - MARGIN)) : ux < ub * (1 - MARGIN));
    struct timespec pause = {0, 30 * 1000 * 1000};
    if (pick != e->xsmm && can_x && nanosleep(&pause, NULL) == 0 && timer(&e->k, &ux2, &ub2, &can_x) == 0) {
        int again = e->xsmm ? !(ub2 < ux2 * (1 - MARGIN)) : ux2 < ub2 * (1 - MARGIN);
        if (again != pick) pick = e->xsmm;
        ux = ux < ux2 ? ux : ux2;
        ub = ub < ub2 ? ub : ub2;
    }
    e->xsmm = (signed char)pick;
    e->us_xsmm = ux;
    e->us_blas = ub;
    e->from = 'm';
}

/* Decides the n PENDING slots of list (no S.mu held): under the plan file's
 * lock, after re-reading the file (another run may have measured some
 * meanwhile), then the file saved once with the union. Without the lock (a
 * folder that cannot hold it, a holder past LOCK_WAIT_S) they are measured
 * for this process only, never saved. Returns how many were timed. */
static int measure_and_keep(entry **list, int n, tg_plan_timer timer) {
    char err[4600], msg[4800], lockpath[4200];
    int fd = -1, measured = 0;
    rows file = {0};
    if (S.file[0]) {   /* the folder the program named: made on its word */
        snprintf(lockpath, sizeof lockpath, "%s.lock", S.file);
        int rc = mkdirs(S.dir) ? tg_errf(err, sizeof err, "cannot make the folder %.900s: %s", S.dir, strerror(errno))
                               : tg_file_lock(lockpath, LOCK_WAIT_S, &fd, err, sizeof err);
        if (rc == TG_FILE_BUSY) {
            snprintf(msg, sizeof msg, "%.4200s held for %d s by %.300s: measuring for this process only, not kept",
                     lockpath, LOCK_WAIT_S, err);
            note(SAID_BUSY, msg);
        } else if (rc) {
            snprintf(msg, sizeof msg, "the product plan is not kept (%.4600s): measuring in this process only", err);
            note(SAID_NOT_KEPT, msg);
        } else {
            read_or_say(&file, 0);
        }
    }
    for (int i = 0; i < n; i++) {
        entry *e = list[i];
        const row *r = row_of(&file, &e->k);
        if (r) {   /* another run measured it meanwhile */
            e->xsmm = (signed char)r->x;
            e->us_xsmm = r->ux;
            e->us_blas = r->ub;
            e->from = 'f';
        } else {
            measure(e, timer);
            measured += e->from == 'm';
        }
    }
    if (fd >= 0 && measured && save_merged(&file, err, sizeof err)) {
        snprintf(msg, sizeof msg, "the product plan could not be kept: %.4600s", err);
        note(SAID_SAVE, msg);
    }
    free(file.r);
    if (fd >= 0) close(fd);   /* releases the file's lock */
    return measured;
}

/* ---- fork ---------------------------------------------------------------------- */
/* A fork while another thread held S.mu would leave the child's copy locked
 * for ever; one while a thread measured would leave its slot PENDING with no
 * thread to decide it. So a fork waits for S.mu, and the child starts with
 * fresh locks and every PENDING slot estimated. */
static void fork_prepare(void) { pthread_mutex_lock(&S.mu); }
static void fork_parent(void) { pthread_mutex_unlock(&S.mu); }
static void fork_child(void) {
    pthread_mutex_init(&S.mu, NULL);
    pthread_mutex_init(&S.measuring, NULL);
    pthread_cond_init(&S.decided, NULL);
    for (int i = 0; i < CAP; i++)
        if (state(&S.tab[i]) == PENDING) {
            entry *e = &S.tab[i];
            e->xsmm = (signed char)estimate(e->k.ta, e->k.M, e->k.N, e->k.K);
            e->from = 'e';
            e->us_xsmm = e->us_blas = 0;
            publish(e, DECIDED);
        }
}
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

/* ---- set-up --------------------------------------------------------------------- */
static int setup_locked(const char *spec, char *err, size_t errlen) {
    tg_gemm_plan_machine(S.key, sizeof S.key);
    S.dir[0] = S.file[0] = 0;
    int rc = 0;
    if (spec && (strcmp(spec, "measure") == 0 || strncmp(spec, "measure=", 8) == 0)) {
        S.mode = TG_PLAN_MEASURE;   /* "measure": in this process only; "measure=DIR": kept in the folder named */
        if (spec[7] == '=' && spec[8]) {
            snprintf(S.dir, sizeof S.dir, "%s", spec + 8);
            snprintf(S.file, sizeof S.file, "%s/gemm-plan-%016llx.tsv", S.dir,
                     (unsigned long long)tg_fnv1a64(TG_FNV1A64_INIT, S.key, strlen(S.key)));
            rows rs;   /* imported now, on the program's word; a refused file is measured again */
            if (read_or_say(&rs, 1) == 0) {
                adopt(&rs);
                free(rs.r);
            }
        }
    } else if (!spec || !*spec || strcmp(spec, "estimate") == 0) {
        S.mode = TG_PLAN_ESTIMATE;
    } else {
        S.mode = TG_PLAN_FILE;
        snprintf(S.file, sizeof S.file, "%s", spec);
        rows rs;
        int missing;
        if (read_rows(S.file, &rs, &missing, err, errlen) || missing) {
            if (missing) tg_errf(err, errlen, "plan file %s: no such file", S.file);
            rc = -1;   /* the caller says so; products are estimated */
        } else {
            adopt(&rs);
            free(rs.r);
        }
    }
    atomic_store_explicit(&S.ready, 1, memory_order_release);
    return rc;
}

int tg_gemm_plan_setup(const char *spec, char *err, size_t errlen) {
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&S.mu);
    int rc = -1;
    if (S.planned) tg_errf(err, errlen, "the product plan is already in use (set it before the first product)");
    else {   /* before any product the mode may be set again (a forked child that only probes, say) */
        memset(S.tab, 0, sizeof S.tab);
        rc = setup_locked(spec, err, errlen);
    }
    pthread_mutex_unlock(&S.mu);
    return rc;
}

void tg_gemm_plan_on_note(void (*fn)(const char *msg, void *user), void *user) {
    pthread_mutex_lock(&S.mu);
    S.note = fn;
    S.note_user = user;
    pthread_mutex_unlock(&S.mu);
}

const char *tg_gemm_plan_mode(void) {
    pthread_mutex_lock(&S.mu);
    const int m = atomic_load(&S.ready) ? S.mode : TG_PLAN_ESTIMATE;
    pthread_mutex_unlock(&S.mu);
    return m == TG_PLAN_MEASURE ? "measure" : m == TG_PLAN_FILE ? "file" : "estimate";
}

/* ---- deciding ------------------------------------------------------------------- */
static int choose_slow(const tg_plan_shape *k) {
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&S.mu);
    if (!atomic_load(&S.ready)) {   /* no program set a plan up: the estimate, nothing read or written */
        char err[64];
        setup_locked("estimate", err, sizeof err);
    }
    S.planned = 1;
    for (;;) {
        entry *empty, *e = find(k, &empty);
        if (e && state(e) == PENDING) {   /* the program measures it now: its decision is ours */
            pthread_cond_wait(&S.decided, &S.mu);
            continue;
        }
        int x;
        if (e) x = e->xsmm, mark_used(e);
        else if (!empty) {   /* the table is full: estimate, unrecorded */
            char msg[96];
            snprintf(msg, sizeof msg, "more than %d product shapes: the rest are estimated", CAP);
            note_locked(SAID_FULL, msg);
            x = estimate(k->ta, k->M, k->N, k->K);
        } else {
            e = empty;
            e->k = *k;
            e->xsmm = (signed char)estimate(k->ta, k->M, k->N, k->K);
            e->from = 'e';
            e->wanted = S.mode == TG_PLAN_MEASURE;
            e->us_xsmm = e->us_blas = 0;
            atomic_store_explicit(&e->used, 1, memory_order_relaxed);
            publish(e, DECIDED);
            x = e->xsmm;
        }
        pthread_mutex_unlock(&S.mu);
        return x;
    }
}

int tg_gemm_plan_choose(const tg_plan_shape *k) {
    if (atomic_load_explicit(&S.ready, memory_order_acquire)) {   /* the hot path: no lock */
        entry *e = find(k, NULL);
        if (e && state(e) == DECIDED) {
            mark_used(e);
            return e->xsmm;
        }
    }
    return choose_slow(k);
}

/* The wanted shapes, PENDING from here until tg_gemm_plan_measure_with publishes them (under S.mu). */
static int take_wanted(entry **list) {
    int n = 0;
    if (atomic_load(&S.ready) && S.mode == TG_PLAN_MEASURE)
        for (int i = 0; i < CAP; i++) {
            entry *e = &S.tab[i];
            if (state(e) == DECIDED && e->wanted) {
                publish(e, PENDING);
                list[n++] = e;
            }
        }
    return n;
}

int tg_gemm_plan_measure_with(tg_plan_timer timer) {
    static entry *list[CAP];   /* under S.measuring */
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&S.measuring);
    pthread_mutex_lock(&S.mu);
    int n = take_wanted(list), measured = 0;
    pthread_mutex_unlock(&S.mu);
    if (n) measured = measure_and_keep(list, n, timer);
    pthread_mutex_lock(&S.mu);
    for (int i = 0; i < n; i++) {
        list[i]->wanted = 0;
        publish(list[i], DECIDED);
    }
    pthread_cond_broadcast(&S.decided);
    pthread_mutex_unlock(&S.mu);
    pthread_mutex_unlock(&S.measuring);
    return measured;
}

/* ---- naming --------------------------------------------------------------------- */
static int cmp_entry(const void *a, const void *b) {
    return cmp_shape(&(*(entry *const *)a)->k, &(*(entry *const *)b)->k);
}

/* The decided entries looked up since the last reset, in key order (under S.mu). */
static int used_sorted(entry **list) {
    int n = 0;
    for (int i = 0; i < CAP; i++) {
        entry *e = &S.tab[i];
        if (state(e) == DECIDED && atomic_load_explicit(&e->used, memory_order_relaxed)) list[n++] = e;
    }
    qsort(list, (size_t)n, sizeof *list, cmp_entry);
    return n;
}

static const char *name_locked(char *buf) {
    static entry *list[CAP];   /* under S.mu */
    int n = used_sorted(list);
    uint64_t h = TG_FNV1A64_INIT;
    for (int i = 0; i < n; i++) {
        const entry *e = list[i];
        int k[9] = {e->k.ta, e->k.M, e->k.N, e->k.K, e->k.lda, e->k.ldb, e->k.ldc, e->k.blocks, e->xsmm};
        h = tg_fnv1a64(h, k, sizeof k);
    }
    if (!n) snprintf(buf, TG_PLAN_NAME_BUF, "none");
    else snprintf(buf, TG_PLAN_NAME_BUF, "%08x", (unsigned)(h ^ (h >> 32)));
    return buf;
}

const char *tg_gemm_plan_name(char *buf) {
    pthread_mutex_lock(&S.mu);
    name_locked(buf);
    pthread_mutex_unlock(&S.mu);
    return buf;
}

const char *tg_gemm_plan_describe(char *buf, size_t len) {
    static entry *list[CAP];   /* under S.mu */
    char name[TG_PLAN_NAME_BUF];
    pthread_mutex_lock(&S.mu);
    name_locked(name);
    int n = used_sorted(list), nx = 0, nm = 0, ne = 0;
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
    for (int i = 0; i < CAP; i++) atomic_store_explicit(&S.tab[i].used, 0, memory_order_relaxed);
    pthread_mutex_unlock(&S.mu);
}
