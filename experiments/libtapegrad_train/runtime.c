/* A program's start (tg_runtime.h): the BLAS kernel made to fit the CPU, by
 * the library's decision (tg_blas.h) and, when it says so, a re-execution of
 * the process; then the threads. Here, in the kit, not in the library: the
 * library decides and checks, and never execs or prints; the program's start
 * does both. */
#define _POSIX_C_SOURCE 200809L   /* setenv, readlink */
#include "tg_runtime.h"
#include "tg_blas.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Sets the core and the marker and re-executes this program; returns only if
 * that failed (with why), the environment as it was. */
static void restart(const char *core, int n, char **argv, char *why, size_t len) {
    char self[4096], mark[64];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self);
    if (k <= 0 || (size_t)k >= sizeof self) {
        snprintf(why, len, "cannot read /proc/self/exe: %s", k < 0 ? strerror(errno) : "path too long");
        return;
    }
    self[k] = '\0';
    if (!argv) {
        snprintf(why, len, "no argv");
        return;
    }
    char *old_core = getenv("OPENBLAS_CORETYPE"), *old_mark = getenv(TG_BLAS_MARKER);
    old_core = old_core ? strdup(old_core) : NULL;
    old_mark = old_mark ? strdup(old_mark) : NULL;
    snprintf(mark, sizeof mark, "%d:%s", n, core);
    fflush(NULL);
    if (setenv("OPENBLAS_CORETYPE", core, 1) == 0 && setenv(TG_BLAS_MARKER, mark, 1) == 0) execv(self, argv);
    snprintf(why, len, "%.300s: %s", self, strerror(errno));
    if (old_core) setenv("OPENBLAS_CORETYPE", old_core, 1);
    else unsetenv("OPENBLAS_CORETYPE");
    if (old_mark) setenv(TG_BLAS_MARKER, old_mark, 1);
    else unsetenv(TG_BLAS_MARKER);
    free(old_core);
    free(old_mark);
}

int tg_blas_ensure(const char *prog, char **argv) {
    char asked[32], detail[256] = "", why[512];
    tg_blas_state s;
    tg_blas_start_state(&s, asked, sizeof asked, detail);
    for (int round = 0; round < 4; round++) {   /* decide, check, decide: at most 3 rounds */
        tg_blas_decision p = tg_blas_decide(&s);
        if (p.action != TG_BLAS_GO && p.action != TG_BLAS_CHECK) fprintf(stderr, "%s: %s\n", prog, p.msg);
        switch (p.action) {
        case TG_BLAS_GO:
        case TG_BLAS_WARN: return 0;
        case TG_BLAS_FAIL: return 1;
        case TG_BLAS_CHECK: s.check = tg_blas_selfcheck(s.core, detail, sizeof detail); break;
        case TG_BLAS_RESTART:
            restart(p.core, s.restarts + 1, argv, why, sizeof why);
            fprintf(stderr, "%s: could not restart (%s)\n", prog, why);
            s.can_restart = 0;
            break;
        }
    }
    return 1;
}

/* A thread count in 1..4096, or 0 when s is not one. */
static int thread_count(const char *s) {
    char *end;
    long x = strtol(s, &end, 10);
    return *s && !*end && x >= 1 && x <= 4096 ? (int)x : 0;
}

/* "--threads N" or "--threads=N" in argv (the last one), else 0 (a bad value: the program's parser says so). */
static int threads_flag(int argc, char **argv) {
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) n = thread_count(argv[i + 1]);
        else if (strncmp(argv[i], "--threads=", 10) == 0) n = thread_count(argv[i] + 10);
    }
    return n;
}

int tg_runtime_init(const char *prog, int argc, char **argv) {
    int rc = tg_blas_ensure(prog, argv);
    if (rc) return rc;
    int n = threads_flag(argc, argv);
    const char *env = getenv("TG_THREADS");
    if (!n && env && *env && !(n = thread_count(env))) {
        fprintf(stderr, "%s: TG_THREADS='%.20s' is not a thread count (1..4096)\n", prog, env);
        return 2;
    }
    tg_set_threads(n ? n : 1);
    return 0;
}
