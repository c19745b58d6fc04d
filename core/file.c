#define _POSIX_C_SOURCE 200809L   /* mkstemp, fsync, fchmod */
#include "tg_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tg_core.h"

int tg_write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (k == 0) {   /* no progress and no error: call it a full disk */
            errno = ENOSPC;
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

int tg_file_check_target(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return tg_errf(err, errlen, "%s: not a regular file%s", path, S_ISDIR(st.st_mode) ? " (a folder)" : "");
    return 0;
}

int tg_file_begin(tg_file *f, const char *path, char *err, size_t errlen) {
    *f = (tg_file){.fd = -1, .path = path};
    if (tg_file_check_target(path, err, errlen)) return -1;
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    f->tmp = malloc(strlen(path) + 16);
    if (!f->tmp) return tg_errf(err, errlen, "%s: out of memory", path);
    sprintf(f->tmp, "%.*s.%s.XXXXXX", (int)dirlen, path, path + dirlen);
    f->fd = mkstemp(f->tmp);
    if (f->fd < 0) {
        int e = f->err_no = errno;
        free(f->tmp);
        f->tmp = NULL;
        return tg_errf(err, errlen, "%s: cannot create a temporary file in its folder (%s)", path, strerror(e));
    }
    fchmod(f->fd, 0644);   /* mkstemp's 0600 would hide the file from the group */
    return 0;
}

int tg_file_write(tg_file *f, const void *p, size_t n, char *err, size_t errlen) {
    if (f->failed) return -1;
    if (tg_write_all(f->fd, p, n)) {
        f->failed = 1;
        f->err_no = errno;
        return tg_errf(err, errlen, "%s: cannot write (%s)", f->path, strerror(f->err_no));
    }
    return 0;
}

/* A folder that cannot be fsynced is no error: the rename is done, only its durability is the OS's. */
static void sync_folder(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    char *dir = malloc(dirlen + 2);
    if (!dir) return;
    if (dirlen) sprintf(dir, "%.*s", (int)dirlen, path);
    else strcpy(dir, ".");
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(dir);
}

int tg_file_commit(tg_file *f, int keep_open, char *err, size_t errlen) {
    const char *what = NULL;
    int e = 0;
    if (f->failed) what = "write", e = f->err_no;
    else if (fsync(f->fd)) what = "fsync", e = errno;
    if (!what && !keep_open) {
        int rc = close(f->fd);
        f->fd = -1;
        if (rc) what = "close", e = errno;
    }
    if (!what && rename(f->tmp, f->path)) what = "rename the temporary file over it", e = errno;
    if (what) {
        tg_file_abort(f);
        return tg_errf(err, errlen, "%s: cannot %s (%s)", f->path, what, strerror(e));
    }
    sync_folder(f->path);
    free(f->tmp);
    f->tmp = NULL;
    return 0;
}

void tg_file_abort(tg_file *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->tmp) unlink(f->tmp);
    free(f->tmp);
    f->tmp = NULL;
}

int tg_file_replace(const char *path, const void *p, size_t n, char *err, size_t errlen) {
    tg_file f;
    if (tg_file_begin(&f, path, err, errlen)) return -1;
    if (tg_file_write(&f, p, n, err, errlen)) {
        tg_file_abort(&f);
        return -1;
    }
    return tg_file_commit(&f, 0, err, errlen);
}
