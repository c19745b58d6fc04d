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

int tg_child_run(int (*fn)(void *user, int fd), void *user, double seconds,
                 void (*on_bytes)(void *u, const char *bytes, size_t n), void *u, tg_child_end *end, char *err,
                 size_t errlen) {
    *end = (tg_child_end){0};
    int fds[2];
    if (pipe(fds)) return tg_errf(err, errlen, "no pipe (%s)", strerror(errno));
    /* close-on-exec: a program the child starts (an exec kernel, say) must not hold the write end, or
     * the end of file this parent waits for comes only when that program ends */
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return tg_errf(err, errlen, "fork failed (%s)", strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
        const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
        for (int i = 0; i < 5; i++) signal(fatal[i], SIG_DFL);
        int rc = fn(user, fds[1]);
        _exit(rc & 255);
    }
    close(fds[1]);
    const double t0 = tg_profile_clock();
    int status = 0, eof = 0;
    char buf[4096];
    for (;;) {
        const double left_ms = seconds > 0 ? seconds * 1e3 - 1e3 * (tg_profile_clock() - t0) : 1e9;
        if (left_ms <= 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            close(fds[0]);
            end->timed_out = 1;
            return 0;
        }
        if (eof) {   /* the pipe closed: the child is ending; wait for it within the limit */
            pid_t w = waitpid(pid, &status, WNOHANG);
            if (w == pid) break;
            struct pollfd none = {.fd = -1};
            poll(&none, 0, 5);
            continue;
        }
        struct pollfd pf = {.fd = fds[0], .events = POLLIN};
        int r = poll(&pf, 1, left_ms < 100 ? (int)left_ms + 1 : 100);
        if (r < 0 && errno != EINTR) eof = 1;
        if (r > 0) {
            ssize_t n = read(fds[0], buf, sizeof buf);
            if (n > 0) {
                if (on_bytes) on_bytes(u, buf, (size_t)n);
            } else if (n == 0 || errno != EINTR)
                eof = 1;
        }
    }
    close(fds[0]);
    if (WIFSIGNALED(status)) end->signal = WTERMSIG(status);
    else end->status = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    return 0;
}
