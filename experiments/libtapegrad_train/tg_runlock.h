/* One writer per run file: attn_scale holds an exclusive lock on each file it
 * writes (the log, the checkpoint) and on the checkpoint it resumes from, for
 * as long as it runs. A second process naming any of them is refused at once.
 *
 * What is locked: a sidecar FILE.lock beside FILE, not FILE itself. The log
 * and the checkpoint are replaced by an atomic rename (a new inode), so a lock
 * on FILE's inode would be gone after the first checkpoint; the sidecar is
 * never renamed, so its lock lasts for the whole run. POSIX record locks
 * (fcntl F_SETLK) are used because F_GETLK names the holder's pid, and they
 * work on NFS; the holder also writes "pid=N host=H" into the sidecar.
 *
 * The sidecar is unlinked at exit (while still locked). A process that opened
 * it just before that unlink would lock a dead inode, so taking the lock
 * checks that the locked inode is still the one at FILE.lock, and retries if
 * not. A run killed with SIGKILL leaves its sidecar behind, unlocked: the next
 * run takes it over. */
#ifndef TG_RUNLOCK_H
#define TG_RUNLOCK_H
#include <stddef.h>
#include <sys/types.h>

/* Internal to the training kit since 0.18 (tg_train's one-writer locks on its files): not installed, and hidden
 * in a shared libtapegrad_train; the programs and tests here link the kit's objects. */
#pragma GCC visibility push(hidden)

typedef struct {
    int fd;
    dev_t dev;
    ino_t ino;
    char *path;   /* FILE.lock */
} tg_runlock;

/* Locks `file` (flag: "--log", ... for the messages) unless one of the n
 * locks already held covers it; appends the new lock to locks[*n]. Returns 0;
 * TG_RUNLOCK_BUSY with a message in err when the file is in use (naming the
 * holder's pid); -1 with a message when its folder cannot hold the lock file. `optional` (a file only
 * read): a read-only folder is no error, the file is then left unlocked. */
#define TG_RUNLOCK_BUSY 1
int tg_runlock_take(tg_runlock *locks, int *n, const char *flag, const char *file, int optional, char *err, size_t errlen);

/* Unlinks each lock file and releases the lock. */
void tg_runlock_release(tg_runlock *locks, int n);

/* A file the run will write (flag "--log" or "--save"), before anything is
 * written: refused if it exists and is not a regular file (a device, a FIFO,
 * a folder, a socket): the atomic rename would replace a device node for the
 * whole machine. Only stat(); touches nothing. */
int tg_run_target_check(const char *flag, const char *file, char *err, size_t errlen);

/* A file the run will replace: refused if it is a non-empty file that belongs
 * to another run, i.e. unless `overwrite` is set or it is the checkpoint
 * being resumed (`resume`, NULL for a fresh run). `how` ends the message
 * (what to do instead). */
int tg_run_owner_check(const char *flag, const char *file, const char *resume, int overwrite, const char *how,
                    char *err, size_t errlen);

#pragma GCC visibility pop
#endif
