/* The product plan's store (ops/gemm_plan.h, tg_gemm_plan.h): a look-up never
 * measures, the program's measure times each wanted shape once, decisions
 * shared by threads without a lock on the hot path, saves merged under the
 * file's lock, files that are not files refused without hanging, nothing said
 * unless the program asked, fork while measuring. The plan is process-wide and set once, so each case runs in a
 * child process of its own. A fake timer stands in for the products: it makes
 * OpenBLAS 10x faster, the opposite of the estimate for these small shapes,
 * so a measured decision is told from an estimated one. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gemm_plan.h"
#include "tg_core.h"
#include "tg_gemm_plan.h"
#include "testutil.h"

static atomic_int timer_calls;
static atomic_int timer_started;
static int timer_ms;   /* how long the fake measurement takes */

static int fake_timer(const tg_plan_shape *k, float *ux, float *ub, int *can) {
    (void)k;
    atomic_fetch_add(&timer_calls, 1);
    atomic_store(&timer_started, 1);
    if (timer_ms) nanosleep(&(struct timespec){timer_ms / 1000, (long)(timer_ms % 1000) * 1000000L}, NULL);
    *ux = 10.0f, *ub = 1.0f, *can = 1;
    return 0;
}

static tg_plan_shape sq(int n) { return (tg_plan_shape){0, n, n, n, n, n, n, 0}; }

/* Runs fn in a child; its exit status (0: the case held), or 99 when it hung past 20 s. */
static int in_child(int (*fn)(const char *dir), const char *dir) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(fn(dir));
    for (int i = 0; i < 2000; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return 99;
}

static char *plan_path(const char *dir) {
    char key[600], *p = malloc(4200);
    tg_gemm_plan_machine(key, sizeof key);
    snprintf(p, 4200, "%s/gemm-plan-%016llx.tsv", dir,
             (unsigned long long)tg_fnv1a64(TG_FNV1A64_INIT, key, strlen(key)));
    return p;
}

static int setup_measure(const char *dir) {
    char spec[4100], err[4600];
    snprintf(spec, sizeof spec, "measure=%s", dir);
    return tg_gemm_plan_setup(spec, err, sizeof err);
}

/* ---- a product looks up; the program measures ---------------------------------- */
/* Every thread's planning pass sees the estimate and times nothing; the threads
 * then call measure at once (each shape timed by one of them), and from there
 * every look-up sees the measured decision, and nothing is timed again. */
enum { THREADS = 8, SHAPES = 6 };
static int seen[THREADS][SHAPES];
static pthread_barrier_t planned;
static void *chooser(void *arg) {
    int t = (int)(intptr_t)arg;
    for (int rep = 0; rep < 200; rep++) {
        if (rep == 1) {
            if (atomic_load(&timer_calls) != 0) seen[t][0] = -2;   /* a look-up timed something */
            pthread_barrier_wait(&planned);   /* every shape met before any thread measures */
            tg_gemm_plan_measure_with(fake_timer);
        }
        for (int s = 0; s < SHAPES; s++) {
            tg_plan_shape k = sq(8 + 4 * ((s + t) % SHAPES));
            int x = tg_gemm_plan_choose(&k);
            int i = (k.M - 8) / 4;
            if (rep == 0) seen[t][i] = x == 1 ? 0 : -3;   /* the estimate (libxsmm) in the planning pass */
            else if (x != 0 && seen[t][i] == 0) seen[t][i] = -1;   /* measured: OpenBLAS, and never changes */
        }
    }
    return NULL;
}

static int case_threads(const char *dir) {
    if (setup_measure(dir)) return 1;
    timer_ms = 20;
    pthread_barrier_init(&planned, NULL, THREADS);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, chooser, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    /* each shape measured by one thread: twice, as a measurement that overturns the estimate is repeated */
    if (atomic_load(&timer_calls) != 2 * SHAPES) return 2;
    for (int t = 0; t < THREADS; t++)
        for (int s = 0; s < SHAPES; s++)
            if (seen[t][s] != 0) return 3;
    if (tg_gemm_plan_measure_with(fake_timer) != 0) return 5;   /* nothing wanted any more */
    char buf[600];
    tg_gemm_plan_describe(buf, sizeof buf);
    return strstr(buf, ": 6 shapes (0 libxsmm, 6 openblas; 6 measured now, 0 estimated)") ? 0 : 4;
}

static void test_threads_share_one_measurement(void **st) {
    assert_int_equal(in_child(case_threads, *st), 0);
}

/* ---- a save keeps another run's rows ------------------------------------------------ */
static int count_rows(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    char line[1024];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) n += strncmp(line, needle, strlen(needle)) == 0;
    if (f) fclose(f);
    return n;
}

static int case_merge(const char *dir) {
    if (setup_measure(dir)) return 1;
    tg_plan_shape b = sq(24), c = sq(40);
    if (tg_gemm_plan_choose(&b) != 1 || tg_gemm_plan_choose(&c) != 1) return 2;   /* estimated (libxsmm), wanted */
    /* meanwhile another run measures B and saves it (this process's file row for it) */
    char *path = plan_path(dir), key[600];
    FILE *f = fopen(path, "w");
    fprintf(f, "# tapegrad gemm plan 1\n# machine=%s\nta\tM\tN\tK\tlda\tldb\tldc\trun\tlib\txsmm_us\tblas_us\n"
               "0\t24\t24\t24\t24\t24\t24\twhole\topenblas\t5.00\t4.00\n", tg_gemm_plan_machine(key, sizeof key));
    fclose(f);
    if (tg_gemm_plan_measure_with(fake_timer) != 1) return 3;   /* B from the file, C timed: the file saved */
    if (tg_gemm_plan_choose(&b) != 0 || tg_gemm_plan_choose(&c) != 0) return 5;
    int rc = count_rows(path, "0\t24\t24\t24\t24\t24\t24\twhole\topenblas\t5.00\t4.00") == 1 &&
             count_rows(path, "0\t40\t40\t40\t40\t40\t40\twhole\topenblas\t10.00\t1.00") == 1 ? 0 : 4;
    free(path);
    return rc;
}

static void test_save_merges_another_runs_rows(void **st) {
    assert_int_equal(in_child(case_merge, *st), 0);
}

/* Two processes measuring different shapes at once, one folder: both kept. */
static int case_two_runs(const char *dir) {
    timer_ms = 150;
    pid_t other = fork();
    int first = other == 0 ? 100 : 200;   /* disjoint shapes */
    if (setup_measure(dir)) _exit(1);
    for (int i = 0; i < 3; i++) {
        tg_plan_shape k = sq(first + 4 * i);
        tg_gemm_plan_choose(&k);
    }
    tg_gemm_plan_measure_with(fake_timer);
    if (other == 0) _exit(0);
    int ws;
    waitpid(other, &ws, 0);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws)) return 2;
    char *path = plan_path(dir);
    int rows = count_rows(path, "0\t");
    free(path);
    return rows == 6 ? 0 : 3;
}

static void test_two_runs_lose_nothing(void **st) {
    assert_int_equal(in_child(case_two_runs, *st), 0);
}

/* ---- files that are not files; nothing said unless asked ------------------------------ */
static char said[8][4800];
static int n_said;
static void keep_note(const char *msg, void *user) {
    (void)user;
    if (n_said < 8) snprintf(said[n_said], sizeof said[0], "%s", msg);
    n_said++;
}

static int case_fifo_file_mode(const char *dir) {
    char fifo[4200], err[4600];
    snprintf(fifo, sizeof fifo, "%s/plan.fifo", dir);
    if (mkfifo(fifo, 0600)) return 1;
    if (tg_gemm_plan_setup(fifo, err, sizeof err) != -1) return 2;   /* returns at once: the child would hang otherwise */
    return strstr(err, "not a regular file (a FIFO)") ? 0 : 3;
}

static void test_fifo_refused_not_waited_on(void **st) {
    assert_int_equal(in_child(case_fifo_file_mode, *st), 0);
}

static int case_notes(const char *dir) {
    char *path = plan_path(dir);
    if (mkfifo(path, 0600)) return 1;   /* the machine's plan file is a FIFO */
    tg_gemm_plan_on_note(keep_note, NULL);
    if (setup_measure(dir)) return 2;
    tg_plan_shape a = sq(12), b = sq(16);
    tg_gemm_plan_choose(&a);
    tg_gemm_plan_choose(&b);
    tg_gemm_plan_measure_with(fake_timer);
    if (tg_gemm_plan_choose(&a) != 0 || tg_gemm_plan_choose(&b) != 0) return 3;
    free(path);
    /* said once, naming the file and why; the FIFO is not replaced (the rename would) */
    if (n_said < 1 || !strstr(said[0], "not a regular file (a FIFO)")) return 4;
    for (int i = 1; i < n_said && i < 8; i++)
        if (strstr(said[i], "measuring again")) return 5;   /* (the failed save may say why, once too) */
    return 0;
}

static void test_refused_file_said_once_to_the_program(void **st) {
    assert_int_equal(in_child(case_notes, *st), 0);
}

/* Without a callback: stderr stays empty. */
static int case_silent(const char *dir) {
    char *path = plan_path(dir), errf[4200];
    FILE *f = fopen(path, "w");
    fputs("not a plan\n", f);   /* refused: would be said */
    fclose(f);
    free(path);
    snprintf(errf, sizeof errf, "%s/stderr", dir);
    if (!freopen(errf, "w", stderr)) return 1;
    if (setup_measure(dir)) return 2;
    tg_plan_shape a = sq(20);
    tg_gemm_plan_choose(&a);
    tg_gemm_plan_measure_with(fake_timer);
    fflush(stderr);
    struct stat sb;
    return stat(errf, &sb) == 0 && sb.st_size == 0 ? 0 : 3;
}

static void test_library_says_nothing_unasked(void **st) {
    assert_int_equal(in_child(case_silent, *st), 0);
}

/* ---- fork while another thread measures ------------------------------------------------ */
static void *measure_slowly(void *arg) {
    (void)arg;
    tg_plan_shape k = sq(28);
    tg_gemm_plan_choose(&k);
    tg_gemm_plan_measure_with(fake_timer);
    return NULL;
}

static int case_fork(const char *dir) {
    (void)dir;
    char err[200];
    if (tg_gemm_plan_setup("measure", err, sizeof err)) return 1;
    timer_ms = 1500;
    pthread_t th;
    pthread_create(&th, NULL, measure_slowly, NULL);
    while (!atomic_load(&timer_started)) nanosleep(&(struct timespec){0, 1000000L}, NULL);
    pid_t pid = fork();   /* the measuring thread is not in the child */
    if (pid == 0) {
        tg_plan_shape k = sq(28), other = sq(44);
        int x = tg_gemm_plan_choose(&k);   /* the estimate (libxsmm), at once, not a wait for ever */
        int y = tg_gemm_plan_choose(&other);
        _exit(x == 1 && y == 1 ? 0 : 7);
    }
    int ws = 0;
    pid_t w = 0;
    for (int i = 0; i < 100 && w == 0; i++) {   /* well before the parent's measurement ends */
        w = waitpid(pid, &ws, WNOHANG);
        if (!w) nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
    if (w != pid) {
        kill(pid, SIGKILL);
        return 2;
    }
    pthread_join(th, NULL);
    tg_plan_shape k = sq(28);
    if (tg_gemm_plan_choose(&k) != 0) return 3;   /* the parent's own measurement stands */
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : 4;
}

static void test_fork_while_measuring(void **st) {
    assert_int_equal(in_child(case_fork, *st), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_threads_share_one_measurement, tg_test_make_dir, tg_test_remove_dir),
        cmocka_unit_test_setup_teardown(test_save_merges_another_runs_rows, tg_test_make_dir, tg_test_remove_dir),
        cmocka_unit_test_setup_teardown(test_two_runs_lose_nothing, tg_test_make_dir, tg_test_remove_dir),
        cmocka_unit_test_setup_teardown(test_fifo_refused_not_waited_on, tg_test_make_dir, tg_test_remove_dir),
        cmocka_unit_test_setup_teardown(test_refused_file_said_once_to_the_program, tg_test_make_dir, tg_test_remove_dir),
        cmocka_unit_test_setup_teardown(test_library_says_nothing_unasked, tg_test_make_dir, tg_test_remove_dir),
        cmocka_unit_test_setup_teardown(test_fork_while_measuring, tg_test_make_dir, tg_test_remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
