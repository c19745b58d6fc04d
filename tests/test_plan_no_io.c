/* No product does I/O (tg_gemm_plan.h): in measure=DIR mode, real ops on
 * shapes the plan has never met (tg_matmul, both attention ops, forward and
 * backward) run in a child under a seccomp filter that kills the process on
 * any call that reaches a file or a lock or sleeps (open, mkdir, rename,
 * unlink, fcntl, flock, fsync, write, nanosleep, ...). The child lives, the
 * plan says every shape was estimated and none timed, and the folder stays
 * empty. The program's tg_gemm_plan_measure then times them and writes the
 * file; a run reading it wants nothing. And the filter can fail: the same
 * child calling tg_gemm_plan_measure under it is killed. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tapegrad.h"
#include "testutil.h"

/* Killed by SIGSYS on any of these; everything else (mmap for libxsmm's JIT,
 * futex and clone for the threads, reads of memory) goes on. */
static const int banned[] = {
    SYS_open, SYS_openat, SYS_creat, SYS_mkdir, SYS_mkdirat, SYS_rename, SYS_renameat, SYS_renameat2,
    SYS_unlink, SYS_unlinkat, SYS_fcntl, SYS_flock, SYS_fsync, SYS_fdatasync, SYS_write, SYS_pwrite64,
    SYS_writev, SYS_nanosleep, SYS_clock_nanosleep, SYS_stat, SYS_lstat, SYS_newfstatat, SYS_access,
};
enum { NBAN = sizeof banned / sizeof banned[0] };

static int ban_file_calls(void) {
    struct sock_filter f[4 + NBAN * 2 + 1];
    int n = 0;
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    for (int i = 0; i < NBAN; i++) {
        f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)banned[i], 0, 1);
        f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    }
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = {.len = (unsigned short)n, .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

static void fill(tg_tensor *t, tg_rng *r) {
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = 0.5f * tg_rng_normal(r);
}

/* A step's kinds of product: a linear layer (forward, both grads), then both
 * attention ops with grads; the loss sums them. */
static void products(tg_ctx *ctx, tg_params *P) {
    tg_tensor *x = tg_params_find(P, "x"), *w = tg_params_find(P, "w");
    tg_tensor *q = tg_params_find(P, "q"), *k = tg_params_find(P, "k"), *v = tg_params_find(P, "v");
    tg_tensor *y = tg_matmul(ctx, x, w, 0, 0);
    tg_tensor *a = tg_attention(ctx, q, k, v, NULL, 0.25f, 1, NULL);
    tg_tensor *b = tg_flash_attention(ctx, q, k, v, NULL, 0.25f, 1, NULL);
    tg_tensor *loss = tg_add(ctx, tg_add(ctx, tg_sum(ctx, y), tg_sum(ctx, a)), tg_sum(ctx, b));
    tg_backward(ctx, loss);
}

static void make_params(tg_params *P) {
    tg_params_init(P);
    tg_param(P, "x", 2, (int[]){48, 40});
    tg_param(P, "w", 2, (int[]){40, 24});
    tg_param(P, "q", 4, (int[]){2, 40, 2, 16});
    tg_param(P, "k", 4, (int[]){2, 40, 2, 16});
    tg_param(P, "v", 4, (int[]){2, 40, 2, 16});
    tg_params_alloc(P);
    tg_rng r;
    tg_rng_seed(&r, 7, 1);
    for (int i = 0; i < P->n; i++) fill(P->list[i], &r);
}

enum { UNDER_FILTER = 1, MEASURE_UNDER_FILTER = 2, THEN_MEASURE = 4 };

/* The child: exit 0 when the plan held what it should; killed by SIGSYS when
 * something did I/O under the filter. */
static int child(const char *dir, int how) {
    char spec[4200], err[4600], what[600];
    snprintf(spec, sizeof spec, "measure=%s", dir);
    if (tg_gemm_plan_setup(spec, err, sizeof err)) return 10;
    tg_params P;
    make_params(&P);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    tg_set_threads(2);
    if ((how & UNDER_FILTER) && ban_file_calls()) return 11;
    products(&ctx, &P);
    tg_ctx_reset(&ctx);
    products(&ctx, &P);   /* a second step: the same shapes, looked up */
    if (how & MEASURE_UNDER_FILTER) tg_gemm_plan_measure();   /* the program's I/O: must be caught */
    tg_gemm_plan_describe(what, sizeof what);
    int shapes, nx, nb, measured, estimated;
    const char *counts = strstr(what, ": ");
    if (!counts || sscanf(counts, ": %d shapes (%d libxsmm, %d openblas; %d measured now, %d estimated)", &shapes,
                          &nx, &nb, &measured, &estimated) != 5 || shapes < 4)
        return 15;
    if (how & UNDER_FILTER) return measured == 0 && estimated == shapes ? 0 : 12;   /* looked up, never timed */
    if (how & THEN_MEASURE) return tg_gemm_plan_measure() == shapes ? 0 : 13;
    return measured == 0 && estimated == 0 ? 0 : 14;   /* the next run: every shape from the file */
}

static int run_child(const char *dir, int how, int *sig) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(child(dir, how));
    int st;
    waitpid(pid, &st, 0);
    *sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int files_in(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void test_products_do_no_io(void **st) {
    const char *dir = *st;
    int sig;
    assert_int_equal(run_child(dir, UNDER_FILTER, &sig), 0);   /* -1 with SIGSYS (31): a product did I/O */
    assert_int_equal(sig, 0);
    assert_int_equal(files_in(dir), 0);   /* nothing made, locked or written */
}

static void test_the_filter_catches_the_programs_io(void **st) {
    int sig;
    assert_int_equal(run_child(*st, UNDER_FILTER | MEASURE_UNDER_FILTER, &sig), -1);
    assert_int_equal(sig, SIGSYS);
}

static void test_the_program_measures_and_keeps(void **st) {
    const char *dir = *st;
    int sig;
    assert_int_equal(run_child(dir, THEN_MEASURE, &sig), 0);   /* shapes timed, the file written */
    assert_int_equal(sig, 0);
    assert_true(files_in(dir) >= 1);
    assert_int_equal(run_child(dir, 0, &sig), 0);   /* the next run: every shape from the file */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_products_do_no_io, tg_test_make_dir, tg_test_remove_dir),
        cmocka_unit_test_setup_teardown(test_the_filter_catches_the_programs_io, tg_test_make_dir, tg_test_remove_dir),
        cmocka_unit_test_setup_teardown(test_the_program_measures_and_keeps, tg_test_make_dir, tg_test_remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
