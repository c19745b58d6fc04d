#define _GNU_SOURCE   /* mkostemp (O_CLOEXEC), realpath */
#include "tg_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tg_core.h"
#include "tg_profile.h"   /* its clock */

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

static const char *kind_of(mode_t m) {
    return S_ISDIR(m) ? "a folder" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : "not a plain file";
}

int tg_file_check_target(const char *path, char *err, size_t errlen) {
    struct stat st;   /* through a symbolic link: what it points at is what is replaced */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return tg_errf(err, errlen, "%s: not a regular file (%s)", path, kind_of(st.st_mode));
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && stat(path, &st) != 0)
        return tg_errf(err, errlen, "%s: a symbolic link to nothing (%s)", path, strerror(errno));
    return 0;
}

/* The process's umask, read without changing it (umask(2) would, for every thread): Linux's
 * /proc/self/status; 022 where that is not there. */
static mode_t current_umask(void) {
    FILE *f = fopen("/proc/self/status", "re");
    unsigned m = 022;
    char line[128];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Umask: %o", &m) == 1) break;
    if (f) fclose(f);
    return (mode_t)(m & 0777);
}

int tg_file_begin(tg_file *f, const char *path, char *err, size_t errlen) {
    *f = (tg_file){.fd = -1, .path = path};
    if (tg_file_check_target(path, err, errlen)) return -1;
    /* a symbolic link stays one: the new bytes replace the file it points at, in that file's folder */
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        f->target = realpath(path, NULL);
        if (!f->target) return tg_errf(err, errlen, "%s: cannot resolve the symbolic link (%s)", path, strerror(errno));
    }
    const char *target = f->target ? f->target : path;
    const char *slash = strrchr(target, '/');
    size_t dirlen = slash ? (size_t)(slash - target) + 1 : 0;
    f->tmp = malloc(strlen(target) + 16);
    if (!f->tmp) {
        tg_file_abort(f);
        return tg_errf(err, errlen, "%s: out of memory", path);
    }
    sprintf(f->tmp, "%.*s.%s.XXXXXX", (int)dirlen, target, target + dirlen);
    f->fd = mkostemp(f->tmp, O_CLOEXEC);   /* an open log is no child process's business */
    if (f->fd < 0) {
        int e = f->err_no = errno;
        free(f->tmp);
        f->tmp = NULL;
        tg_file_abort(f);
        return tg_errf(err, errlen, "%s: cannot create a temporary file in its folder (%s)", path, strerror(e));
    }
    /* mkostemp's 0600 would hide the file from the group: what open(O_CREAT, 0666) would give */
    if (fchmod(f->fd, 0666 & ~current_umask())) {
        int e = errno;
        tg_file_abort(f);
        return tg_errf(err, errlen, "%s: cannot set the new file's mode (%s)", path, strerror(e));
    }
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
    int dfd = open(dir, O_RDONLY | O_CLOEXEC);   /* no other thread's exec may take it along */
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
    const char *target = f->target ? f->target : f->path;
    if (!what && rename(f->tmp, target)) what = "rename the temporary file over it", e = errno;
    if (what) {
        tg_file_abort(f);
        return tg_errf(err, errlen, "%s: cannot %s (%s)", f->path, what, strerror(e));
    }
    sync_folder(target);
    free(f->tmp);
    f->tmp = NULL;
    free(f->target);
    f->target = NULL;
    return 0;
}

void tg_file_abort(tg_file *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->tmp) unlink(f->tmp);
    free(f->tmp);
    f->tmp = NULL;
    free(f->target);
    f->target = NULL;
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

/* ---- reading, locking ----------------------------------------------------------------- */
int tg_file_open_read(const char *path, char *err, size_t errlen) {
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; cleared once it is known to be a file */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        tg_errf(err, errlen, "%s: %s", path, e == ENOENT ? "no such file" : strerror(e));
        errno = e;
        return -1;
    }
    struct stat st = {0};
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        tg_errf(err, errlen, "%s: not a regular file (%s)", path, kind_of(st.st_mode));
        close(fd);
        errno = EINVAL;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

/* "process N on HOST": the lock's holder (F_GETLK) and the host it wrote, if any. */
static void lock_holder(int fd, char *buf, size_t len) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    char text[128] = "";
    ssize_t k = pread(fd, text, sizeof text - 1, 0);
    text[k > 0 ? k : 0] = 0;
    text[strcspn(text, "\n")] = 0;
    if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK && fl.l_pid > 0) {
        const char *host = strstr(text, "host=");
        snprintf(buf, len, "process %ld%s%.64s", (long)fl.l_pid, host ? " on " : "", host ? host + 5 : "");
    } else
        snprintf(buf, len, "another process (%.80s)", text[0] ? text : "no pid recorded");
}

int tg_file_lock(const char *path, double wait_s, int *fd_out, char *err, size_t errlen) {
    *fd_out = -1;
    /* O_NOFOLLOW: a link planted at the lock's name is not followed; O_NONBLOCK: nor does a FIFO hang us */
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) {
        int e = errno;
        tg_errf(err, errlen, "%s: cannot create or open the lock file (%s)", path, strerror(e));
        errno = e;   /* the caller may tell a read-only folder from the rest */
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        tg_errf(err, errlen, "%s: the lock file is not a regular file", path);
        errno = EINVAL;
        return -1;
    }
    const double t0 = tg_profile_clock();
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    while (fcntl(fd, F_SETLK, &fl)) {
        if (errno != EACCES && errno != EAGAIN && errno != EINTR) {
            int e = errno;
            close(fd);
            return tg_errf(err, errlen, "%s: cannot lock (%s)", path, strerror(e));
        }
        if (tg_profile_clock() - t0 >= wait_s) {
            char who[160];
            lock_holder(fd, who, sizeof who);
            close(fd);
            tg_errf(err, errlen, "%s", who);
            return TG_FILE_BUSY;
        }
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    *fd_out = fd;
    return 0;
}
