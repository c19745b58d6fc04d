#define _POSIX_C_SOURCE 200809L   /* fcntl locks, gethostname */
#include "tg_runlock.h"

#include "tg_file.h"
#include "tg_core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int held(const tg_runlock *locks, int n, const struct stat *st) {
    for (int i = 0; i < n; i++)
        if (locks[i].dev == st->st_dev && locks[i].ino == st->st_ino) return 1;
    return 0;
}

int tg_runlock_take(tg_runlock *locks, int *n, const char *flag, const char *file, int optional, char *err, size_t errlen) {
    size_t len = strlen(file) + 6;
    char *path = malloc(len);
    if (!path) return tg_errf(err, errlen, "%s %s: out of memory", flag, file);
    snprintf(path, len, "%s.lock", file);
    for (int attempt = 0; attempt < 100; attempt++) {
        struct stat st;
        if (stat(path, &st) == 0 && held(locks, *n, &st)) {   /* e.g. --resume and --save one file */
            free(path);
            return 0;
        }
        int fd;
        char why[300];
        int rc = tg_file_lock(path, 0, &fd, why, sizeof why);   /* tg_file.h: the one lock */
        if (rc == TG_FILE_BUSY) {
            tg_errf(err, errlen, "%s %s is in use by %s (it holds %s); refusing to be a second writer of that run",
                    flag, file, why, path);
            free(path);
            return TG_RUNLOCK_BUSY;
        }
        if (rc && optional && (errno == EACCES || errno == EPERM || errno == EROFS)) {
            free(path);   /* a read-only folder: nobody can write there either */
            return 0;
        }
        if (rc) {
            tg_errf(err, errlen, "%s %s: %s (%s)", flag, file,
                    errno == EINVAL ? "cannot hold its lock" : "cannot create a file in its folder", why);
            free(path);
            return -1;
        }
        if (fstat(fd, &st)) {
            close(fd);
            continue;
        }
        struct stat now;
        if (stat(path, &now) || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
            close(fd);   /* the holder unlinked it as we opened it: take the new one */
            continue;
        }
        char host[64] = "?", text[128];
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        int k = snprintf(text, sizeof text, "pid=%ld host=%s\n", (long)getpid(), host);
        if (ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)k, 0) != k) { /* informative only */ }
        locks[*n] = (tg_runlock){.fd = fd, .dev = st.st_dev, .ino = st.st_ino, .path = path};
        (*n)++;
        return 0;
    }
    free(path);
    return tg_errf(err, errlen, "%s %s: its lock file keeps being replaced", flag, file);
}

void tg_runlock_release(tg_runlock *locks, int n) {
    for (int i = 0; i < n; i++) {
        unlink(locks[i].path);   /* before the lock goes, so nobody takes a lock on a file about to vanish */
        close(locks[i].fd);
        free(locks[i].path);
    }
}

int tg_run_target_check(const char *flag, const char *file, char *err, size_t errlen) {
    char why[600];   /* the one "not a regular file" rule: tg_file.h's */
    if (!file || tg_file_check_target(file, why, sizeof why) == 0) return 0;   /* missing: created later */
    return tg_errf(err, errlen, "%s %s; name a new or regular file", flag, why);
}

int tg_run_owner_check(const char *flag, const char *file, const char *resume, int overwrite, const char *how,
                    char *err, size_t errlen) {
    struct stat st, rs;
    if (!file || overwrite || stat(file, &st) || st.st_size == 0) return 0;
    if (resume && stat(resume, &rs) == 0 && rs.st_dev == st.st_dev && rs.st_ino == st.st_ino) return 0;
    return tg_errf(err, errlen, "%s %s exists (%lld bytes) and belongs to another run; %s, or pass --overwrite to "
                   "replace it on purpose", flag, file, (long long)st.st_size, how);
}
