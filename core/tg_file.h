/* The one way tapegrad writes a file: every checkpoint, log, attention-map
 * dump, seed figure and anything new goes through here.
 *
 * Atomic replace: the bytes go to a temporary file in the target's folder
 * (".NAME.XXXXXX", close-on-exec, mode 0666 less the umask, as open(2) would
 * make it), which is fsynced, renamed over the target, and
 * then the folder is fsynced, so that after a crash at any moment the target is
 * either the old file or the whole new one, never a part. A target that exists
 * and is not a regular file (a device node, a FIFO, a socket, a folder) is
 * refused before anything is created: the rename would replace it for the
 * whole machine. A target that is a symbolic link stays one: the file it points
 * at is replaced, in that file's folder (a link to nothing is refused). On any
 * failure the temporary file is removed and the old target is untouched.
 *
 *   tg_file_replace(path, bytes, n, err, errlen)          one buffer
 *   tg_file_begin / tg_file_write ... / tg_file_commit     streamed; commit may keep
 *                                                         the file open to append to
 *                                                         (the run log does)
 * Errors: 0, or -1 with a message naming the path and the reason in err. */
#ifndef TG_FILE_H
#define TG_FILE_H
#include <stddef.h>

/* write(2) until all n bytes are written (EINTR retried); 0, or -1 with errno. */
int tg_write_all(int fd, const void *p, size_t n);

/* 0 if path does not exist or is a regular file; else -1 ("PATH: not a regular file"). */
int tg_file_check_target(const char *path, char *err, size_t errlen);

typedef struct tg_file {
    int fd;
    char *tmp;          /* the temporary file's path (NULL when none) */
    const char *path;   /* the target */
    int failed;         /* a write failed: commit refuses */
    int err_no;         /* the errno of a failed begin or write */
    char *target;       /* path is a symbolic link: the file it points at (owned), else NULL */
} tg_file;

int tg_file_begin(tg_file *f, const char *path, char *err, size_t errlen);
int tg_file_write(tg_file *f, const void *p, size_t n, char *err, size_t errlen);
/* fsync, rename over the target, fsync its folder. keep_open: f->fd stays
 * open on the new file (the caller closes it), else it is closed. On failure
 * the temporary file is removed (tg_file_abort). */
int tg_file_commit(tg_file *f, int keep_open, char *err, size_t errlen);
void tg_file_abort(tg_file *f);   /* removes the temporary file; the target is as it was */

int tg_file_replace(const char *path, const void *p, size_t n, char *err, size_t errlen);

/* Opens path for reading: an fd (close-on-exec), or -1 with errno kept and a
 * message in err ("PATH: no such file", "PATH: not a regular file (a FIFO)").
 * Anything but a regular file is refused without blocking (a FIFO would wait
 * for a writer) and without reading from it. */
int tg_file_open_read(const char *path, char *err, size_t errlen);

/* An exclusive POSIX record lock (fcntl F_SETLK) on the file path, created if
 * missing (mode 0666 less the umask); a symbolic link or anything but a regular
 * file at path is refused. Waits up to wait_s seconds on a monotonic clock (0:
 * one try). Returns 0 with *fd holding the lock (closing it releases it),
 * TG_FILE_BUSY with the holder in err ("process 4242 on node1"), or -1 with the
 * reason. Record locks belong to a process: two threads of one process do not
 * exclude each other, and closing any other descriptor of the same file
 * releases the lock, so lock a file kept for locking only (a "NAME.lock"). */
#define TG_FILE_BUSY 1
int tg_file_lock(const char *path, double wait_s, int *fd, char *err, size_t errlen);

#endif
