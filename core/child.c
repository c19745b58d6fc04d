#define _POSIX_C_SOURCE 200809L   /* fork, poll, kill */
#include "tg_child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tg_core.h"
#include "tg_profile.h"   /* its clock */

typedef struct {
    int fd, eof;
    void (*on)(void *u, const char *bytes, size_t n);
    void *u;
} stream;

/* What is there on s (poll said so), passed on; EOF noted. */
static void take(stream *s) {
    char buf[4096];
    ssize_t n = read(s->fd, buf, sizeof buf);
    if (n > 0) {
        if (s->on) s->on(s->u, buf, (size_t)n);
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN))
        s->eof = 1;
}

/* The child's end: fatal signals at their default (a crash is the answer: a sanitizer's handler
 * would exit 1 instead), no core file, fd 1 on the capture pipe when there is one. */
static void child_side(int (*fn)(void *, int), void *user, const int rec[2], const int out[2]) {
    close(rec[0]);
    if (out[1] >= 0) {
        close(out[0]);
        dup2(out[1], 1);   /* dup2 clears close-on-exec: a program the child starts writes there too */
        close(out[1]);
    }
    setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
    const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (int i = 0; i < 5; i++) signal(fatal[i], SIG_DFL);
    int rc = fn(user, rec[1]);
    fflush(stdout);
    _exit(rc & 255);
}

static int run(int (*fn)(void *user, int fd), void *user, double seconds,
               void (*on_bytes)(void *u, const char *bytes, size_t n), void *u, int capture,
               void (*on_out)(void *u_out, const char *bytes, size_t n), void *u_out, tg_child_end *end, char *err,
               size_t errlen) {
    *end = (tg_child_end){0};
    int rec[2], out[2] = {-1, -1};
    if (pipe(rec)) return tg_errf(err, errlen, "no pipe (%s)", strerror(errno));
    if (capture && pipe(out)) {
        close(rec[0]), close(rec[1]);
        return tg_errf(err, errlen, "no pipe (%s)", strerror(errno));
    }
    /* close-on-exec: a program the child starts (an exec kernel, say) must not hold the write end, or
     * the end of file this parent waits for comes only when that program ends */
    for (int i = 0; i < 2; i++) {
        fcntl(rec[i], F_SETFD, FD_CLOEXEC);
        if (capture) fcntl(out[i], F_SETFD, FD_CLOEXEC);
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(rec[0]), close(rec[1]);
        if (capture) close(out[0]), close(out[1]);
        return tg_errf(err, errlen, "fork failed (%s)", strerror(errno));
    }
    if (pid == 0) child_side(fn, user, rec, out);
    close(rec[1]);
    if (capture) close(out[1]), fcntl(out[0], F_SETFL, O_NONBLOCK);
    stream s[2] = {{rec[0], 0, on_bytes, u}, {out[0], !capture, on_out, u_out}};
    const double t0 = tg_profile_clock();
    int status = 0;
    for (;;) {
        const double left_ms = seconds > 0 ? seconds * 1e3 - 1e3 * (tg_profile_clock() - t0) : 1e9;
        if (left_ms <= 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            end->timed_out = 1;
            break;
        }
        if (s[0].eof) {   /* the record pipe closed: the child is ending; wait for it within the limit */
            if (waitpid(pid, &status, WNOHANG) == pid) break;
            struct pollfd o = {.fd = s[1].eof ? -1 : s[1].fd, .events = POLLIN};
            if (poll(&o, 1, 5) > 0) take(&s[1]);
            continue;
        }
        struct pollfd pf[2] = {{.fd = s[0].fd, .events = POLLIN}, {.fd = s[1].eof ? -1 : s[1].fd, .events = POLLIN}};
        int r = poll(pf, 2, left_ms < 100 ? (int)left_ms + 1 : 100);
        if (r < 0 && errno != EINTR) s[0].eof = 1;
        for (int i = 0; i < 2 && r > 0; i++)
            if (pf[i].revents) take(&s[i]);
    }
    /* what the child wrote on fd 1 before it ended (a process it started may hold the pipe: no waiting) */
    struct pollfd o = {.fd = s[1].fd, .events = POLLIN};
    while (!end->timed_out && !s[1].eof && poll(&o, 1, 0) > 0) take(&s[1]);
    close(rec[0]);
    if (capture) close(out[0]);
    if (end->timed_out) return 0;
    if (WIFSIGNALED(status)) end->signal = WTERMSIG(status);
    else end->status = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    return 0;
}

int tg_child_run_out(int (*fn)(void *user, int fd), void *user, double seconds,
                     void (*on_bytes)(void *u, const char *bytes, size_t n), void *u,
                     void (*on_out)(void *u_out, const char *bytes, size_t n), void *u_out, tg_child_end *end,
                     char *err, size_t errlen) {
    return run(fn, user, seconds, on_bytes, u, 1, on_out, u_out, end, err, errlen);
}

int tg_child_run(int (*fn)(void *user, int fd), void *user, double seconds,
                 void (*on_bytes)(void *u, const char *bytes, size_t n), void *u, tg_child_end *end, char *err,
                 size_t errlen) {
    return run(fn, user, seconds, on_bytes, u, 0, NULL, NULL, end, err, errlen);
}
