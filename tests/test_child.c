/* tg_child_run (tg_child.h), the one fork-with-timeout runner: the child's
 * bytes reach the parent as they come, its exit status and its fatal signal are
 * told apart, a child that hangs is killed at the limit on a monotonic clock
 * (and reaped: no zombie), and seconds <= 0 means no limit. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tg_child.h"
#include "tg_profile.h"

typedef struct { char buf[256]; size_t n; } bytes;
static void keep(void *u, const char *b, size_t n) {
    bytes *x = u;
    for (size_t i = 0; i < n && x->n + 1 < sizeof x->buf; i++) x->buf[x->n++] = b[i];
    x->buf[x->n] = 0;
}

static int speak_then_exit(void *user, int fd) {
    (void)user;
    const char *m = "hello ";
    if (write(fd, m, strlen(m)) < 0) return 9;
    usleep(50 * 1000);
    if (write(fd, "world", 5) < 0) return 9;
    return 7;
}
static int crash(void *user, int fd) {
    (void)user, (void)fd;
    raise(SIGSEGV);
    return 0;
}
static int hang(void *user, int fd) {
    (void)user, (void)fd;
    for (;;) pause();
    return 0;
}
static int sleep_short(void *user, int fd) {
    (void)user, (void)fd;
    usleep(300 * 1000);
    return 0;
}

static void test_bytes_and_status(void **s) {
    (void)s;
    bytes b = {0};
    tg_child_end end;
    char err[128];
    assert_int_equal(tg_child_run(speak_then_exit, NULL, 10, keep, &b, &end, err, sizeof err), 0);
    assert_string_equal(b.buf, "hello world");
    assert_int_equal(end.timed_out, 0);
    assert_int_equal(end.signal, 0);
    assert_int_equal(end.status, 7);
}

static void test_crash_is_a_signal(void **s) {
    (void)s;
    tg_child_end end;
    char err[128];
    assert_int_equal(tg_child_run(crash, NULL, 10, NULL, NULL, &end, err, sizeof err), 0);
    assert_int_equal(end.signal, SIGSEGV);
    assert_int_equal(end.timed_out, 0);
}

static void test_hang_killed_at_the_limit(void **s) {
    (void)s;
    tg_child_end end;
    char err[128];
    double t0 = tg_profile_clock();
    assert_int_equal(tg_child_run(hang, NULL, 0.3, NULL, NULL, &end, err, sizeof err), 0);
    double took = tg_profile_clock() - t0;
    assert_int_equal(end.timed_out, 1);
    assert_true(took >= 0.3 && took < 5.0);
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);   /* reaped: no child left, zombie or not */
}

static void test_no_limit(void **s) {
    (void)s;
    tg_child_end end;
    char err[128];
    assert_int_equal(tg_child_run(sleep_short, NULL, 0, NULL, NULL, &end, err, sizeof err), 0);
    assert_int_equal(end.timed_out, 0);
    assert_int_equal(end.status, 0);
}

/* A child that starts a program of its own (exec'd, still running when the child exits): that program
 * must not inherit the child's end of the pipe, or the parent waits for an end of file that comes only
 * when the program does (until the time limit, which it then reports as a hang; forever without one). */
static int start_program(void *user, int fd) {
    (void)user;
    pid_t p = fork();
    if (p == 0) {
        execl("/bin/sleep", "sleep", "30", (char *)NULL);
        _exit(127);
    }
    char line[32];
    int n = snprintf(line, sizeof line, "%d", (int)p);
    return write(fd, line, (size_t)n) == n ? 0 : 1;
}

static void test_a_program_the_child_starts_holds_no_pipe(void **s) {
    (void)s;
    tg_child_end end;
    char err[128];
    bytes got = {.n = 0};
    assert_int_equal(tg_child_run(start_program, NULL, 20, keep, &got, &end, err, sizeof err), 0);
    const pid_t g = (pid_t)atoi(got.buf);
    assert_true(g > 0);
    const int alive = kill(g, 0) == 0;   /* the parent came back while the program still runs */
    kill(g, SIGKILL);
    assert_int_equal(end.timed_out, 0);
    assert_int_equal(end.status, 0);
    assert_true(alive);
}

/* tg_child_run_out: what the child prints on stdout comes apart from its records, all of it, and a
 * program the child starts that keeps the stdout pipe (its fd 1 is the child's) is not waited for. */
static int print_and_speak(void *user, int fd) {
    (void)user;
    printf("stray ");
    fflush(stdout);
    if (write(fd, "record", 6) != 6) return 9;
    printf("output");   /* still buffered when fn returns: the runner flushes it */
    if (user) {
        pid_t p = fork();
        if (p == 0) {
            execl("/bin/sleep", "sleep", "30", (char *)NULL);   /* inherits fd 1: the pipe */
            _exit(127);
        }
        char line[32];
        int n = snprintf(line, sizeof line, " %d", (int)p);
        if (write(fd, line, (size_t)n) != n) return 9;
    }
    return 4;
}

static void test_stdout_taken_apart(void **s) {
    (void)s;
    for (int with_program = 0; with_program <= 1; with_program++) {
        bytes rec = {.n = 0}, out = {.n = 0};
        tg_child_end end;
        char err[128];
        const double t0 = tg_profile_clock();
        assert_int_equal(tg_child_run_out(print_and_speak, with_program ? &rec : NULL, 20, keep, &rec, keep, &out,
                                          &end, err, sizeof err), 0);
        assert_true(tg_profile_clock() - t0 < 10);
        assert_int_equal(end.status, 4);
        assert_int_equal(end.timed_out, 0);
        assert_string_equal(out.buf, "stray output");
        assert_memory_equal(rec.buf, "record", 6);
        if (with_program) {
            const pid_t g = (pid_t)atoi(rec.buf + 7);
            assert_true(g > 0);
            kill(g, SIGKILL);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_and_status),
        cmocka_unit_test(test_crash_is_a_signal),
        cmocka_unit_test(test_hang_killed_at_the_limit),
        cmocka_unit_test(test_no_limit),
        cmocka_unit_test(test_a_program_the_child_starts_holds_no_pipe),
        cmocka_unit_test(test_stdout_taken_apart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
