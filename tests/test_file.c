/* The one file layer (core/tg_file.h) and every kind of file written through
 * it, under injected faults: a write that fails half way with ENOSPC, a write
 * that fails at its first byte, an fsync that fails. Each time the writer must
 * report the path, the old file must be byte for byte what it was, and no
 * temporary file may be left in the folder. The kinds: a checkpoint
 * (tg_ckpt_save), an attention-map dump and any safetensors file (tg_st_write,
 * which attn_dump uses), the run log (tg_runlog_open and tg_runlog_resume), a
 * seed figure (seed_out), and tg_file_replace itself.
 *
 * The faults come from this file's write() and fsync(), which the test
 * executable defines: the library's objects, linked in statically, call them
 * instead of libc's (the library is built static for the tests). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "seedfig.h"
#include "safetensors.h"
#include "testutil.h"
#include "tg_checkpoint.h"
#include "tg_file.h"
#include "tg_runlog.h"

/* ---- the faults ------------------------------------------------------------ */
static long budget = -1;   /* bytes write() may still write; -1: no fault */
static int fail_fsync;

ssize_t write(int fd, const void *p, size_t n) {
    if (budget < 0) return syscall(SYS_write, fd, p, n);
    if (budget == 0) {
        errno = ENOSPC;
        return -1;
    }
    size_t k = n < (size_t)budget ? n : (size_t)budget;
    ssize_t w = syscall(SYS_write, fd, p, k);
    if (w > 0) budget -= w;
    return w;
}

int fsync(int fd) {
    if (fail_fsync) {
        errno = EIO;
        return -1;
    }
    return (int)syscall(SYS_fsync, fd);
}

/* ---- helpers --------------------------------------------------------------- */
static char dir[64];

static const char *in_dir(const char *name) {
    static char p[4][256];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", dir, name);
    return p[i];
}

static char *slurp(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = malloc(1 << 20);
    *n = fread(b, 1, 1 << 20, f);
    fclose(f);
    return b;
}

static int entries(void) {   /* files in the folder: a temporary one left behind shows */
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

/* A fault of each kind, then `write_it` (which must fail naming path), then the old bytes. */
typedef int (*writer)(const char *path, char *err, size_t errlen);

static void faults(const char *label, const char *path, writer write_it, long half) {
    size_t n0 = 0, n1 = 0;
    char *before = slurp(path, &n0), err[1024];
    assert_non_null(before);
    const int files = entries();
    const long budgets[] = {half, 0};
    for (int k = 0; k < 3; k++) {
        err[0] = 0;
        if (k < 2) budget = budgets[k];
        else fail_fsync = 1;
        int rc = write_it(path, err, sizeof err);
        budget = -1;
        fail_fsync = 0;
        if (rc == 0) fail_msg("%s, fault %d: the write did not fail", label, k);
        if (!strstr(err, path)) fail_msg("%s, fault %d: message '%s' does not name %s", label, k, err, path);
        char *after = slurp(path, &n1);
        if (n1 != n0 || memcmp(before, after, n0)) fail_msg("%s, fault %d: the old file changed", label, k);
        free(after);
        if (entries() != files) fail_msg("%s, fault %d: a temporary file was left behind", label, k);
    }
    /* and without a fault it works, replacing the old file */
    if (write_it(path, err, sizeof err)) fail_msg("%s, no fault: %s", label, err);
    free(before);
}

/* ---- the kinds of file ----------------------------------------------------- */
static int replace_bytes(const char *path, char *err, size_t errlen) {
    static char big[200000];
    memset(big, 'x', sizeof big);
    return tg_file_replace(path, big, sizeof big, err, errlen);
}

static tg_params P;
static tg_sgd sgd;
static tg_rng rng;

static int save_ckpt(const char *path, char *err, size_t errlen) {
    tg_train_state st = {.P = &P, .sgd = &sgd, .data_rng = &rng, .step = 7};
    return tg_ckpt_save(path, &st, NULL, 0, err, errlen);
}

static int write_maps(const char *path, char *err, size_t errlen) {   /* what attn_dump writes */
    static float m[2][64 * 64];
    tg_st_tensor t[2] = {{.name = "attn.l0.h0.step0", .dtype = TG_ST_F32, .ndim = 2, .shape = {64, 64}, .data = m[0]},
                         {.name = "attn.l0.h1.step0", .dtype = TG_ST_F32, .ndim = 2, .shape = {64, 64}, .data = m[1]}};
    tg_st_kv kv[1] = {{"format", "tapegrad.attn_maps"}};
    return tg_st_write(path, t, 2, kv, 1, err, errlen);
}

static int open_log(const char *path, char *err, size_t errlen) {
    tg_runlog L;
    int rc = tg_runlog_open(&L, path, "# tapegrad test\n# steps=10\n# log_every=5\nstep\tloss\n", err, errlen);
    tg_runlog_close(&L);
    return rc;
}

static int resume_log(const char *path, char *err, size_t errlen) {
    tg_runlog L;
    char info[256];
    int rc = tg_runlog_resume(&L, path, "# tapegrad test\n# steps=10\n# log_every=5\nstep\tloss\n", NULL, 5, info, sizeof info, err,
                              errlen);
    tg_runlog_close(&L);
    return rc;
}

static int seed_figure(const char *path, char *err, size_t errlen) {
    seed_out o;
    if (seed_out_open(&o, "out", path, err, errlen)) return -1;
    for (int i = 0; i < 3000; i++) fprintf(o.f, "%d\t%d\n", i, i * i);
    return seed_out_commit(&o, err, errlen);
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void test_each_kind(void **s) {
    (void)s;
    put(in_dir("bytes"), "old bytes\n");
    faults("tg_file_replace", in_dir("bytes"), replace_bytes, 100000);

    tg_params_init(&P);
    tg_param(&P, "w", 2, (int[]){300, 100});
    tg_params_alloc(&P);
    tg_sgd_init(&sgd, &P, 0.0f, 0.0f);
    tg_rng_seed(&rng, 1, 2);
    char err[512];
    assert_int_equal(save_ckpt(in_dir("run.st"), err, sizeof err), 0);   /* the old checkpoint */
    faults("checkpoint", in_dir("run.st"), save_ckpt, 60000);
    tg_sgd_free(&sgd);
    tg_params_free(&P);

    assert_int_equal(write_maps(in_dir("maps.st"), err, sizeof err), 0);
    faults("attention maps", in_dir("maps.st"), write_maps, 20000);

    put(in_dir("run.tsv"), "# tapegrad test\n# steps=10\n# log_every=5\nstep\tloss\n0\t1.0\n5\t0.5\n");
    faults("run log, opened", in_dir("run.tsv"), open_log, 20);
    put(in_dir("run.tsv"), "# tapegrad test\n# steps=10\n# log_every=5\nstep\tloss\n0\t1.0\n5\t0.5\n");
    faults("run log, resumed", in_dir("run.tsv"), resume_log, 40);

    put(in_dir("fig.tsv"), "old figure\n");
    faults("seed figure", in_dir("fig.tsv"), seed_figure, 10000);
}

/* A target that is not a regular file is refused before anything is created. */
static void test_not_regular(void **s) {
    (void)s;
    char err[512];
    const char *fifo = in_dir("fifo");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    const int files = entries();
    assert_int_equal(tg_file_replace(fifo, "x", 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file"));
    assert_int_equal(tg_file_replace(dir, "x", 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file (a folder)"));
    assert_int_equal(entries(), files);
    struct stat st;
    assert_int_equal(stat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    unlink(fifo);
}

/* A symbolic link stays one: the file it points at is replaced. The new file is close-on-exec
 * while written and gets the mode open(2) would give under the umask. */
static void test_link_mode_cloexec(void **s) {
    (void)s;
    char err[512], real[600], link[600];
    snprintf(real, sizeof real, "%s", in_dir("real.tsv"));
    snprintf(link, sizeof link, "%s", in_dir("link.tsv"));
    assert_int_equal(tg_file_replace(real, "old", 3, err, sizeof err), 0);
    assert_int_equal(symlink(real, link), 0);
    assert_int_equal(tg_file_replace(link, "new!", 4, err, sizeof err), 0);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(stat(real, &st), 0);
    assert_int_equal(st.st_size, 4);
    const char *dangling = in_dir("dangling.tsv");
    assert_int_equal(symlink(in_dir("nothing-here"), dangling), 0);
    assert_int_equal(tg_file_replace(dangling, "x", 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "a symbolic link to nothing"));
    for (int k = 0; k < 2; k++) {
        const mode_t mask = k ? 077 : 022, old = umask(mask);
        tg_file f;
        assert_int_equal(tg_file_begin(&f, real, err, sizeof err), 0);
        assert_true(fcntl(f.fd, F_GETFD) & FD_CLOEXEC);
        assert_int_equal(fstat(f.fd, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0666 & ~mask);
        tg_file_abort(&f);
        umask(old);
    }
    unlink(dangling);
    unlink(link);
    unlink(real);
}

/* tg_file_open_read: a regular file opens (close-on-exec, blocking again); a
 * FIFO (which open(2) would wait on for a writer) and a folder are refused at
 * once, a missing file says so with ENOENT. */
static void test_open_read(void **s) {
    (void)s;
    char err[512];
    const char *file = in_dir("plain"), *fifo = in_dir("fifo2");
    assert_int_equal(tg_file_replace(file, "abc", 3, err, sizeof err), 0);
    int fd = tg_file_open_read(file, err, sizeof err);
    assert_true(fd >= 0);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    assert_false(fcntl(fd, F_GETFL) & O_NONBLOCK);
    close(fd);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(tg_file_open_read(fifo, err, sizeof err), -1);
    assert_non_null(strstr(err, "fifo2: not a regular file (a FIFO)"));
    assert_int_equal(tg_file_open_read(dir, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file (a folder)"));
    assert_int_equal(tg_file_open_read(in_dir("missing"), err, sizeof err), -1);
    assert_int_equal(errno, ENOENT);
    assert_non_null(strstr(err, "missing: no such file"));
    unlink(fifo);
    unlink(file);
}

/* tg_file_lock: held by another process, it says who (its pid) after the wait;
 * a holder that lets go within the wait is waited for; a symbolic link or a
 * FIFO at the lock's name is refused. */
static void test_lock(void **s) {
    (void)s;
    char err[512];
    const char *lock = in_dir("x.lock");
    int ready[2], fd;
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {   /* the holder: 400 ms, then gone */
        char e[256];
        int f;
        if (tg_file_lock(lock, 0, &f, e, sizeof e)) _exit(1);
        if (write(ready[1], "x", 1) != 1) _exit(2);
        usleep(400 * 1000);
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    assert_int_equal(tg_file_lock(lock, 0, &fd, err, sizeof err), TG_FILE_BUSY);
    char want[64];
    snprintf(want, sizeof want, "process %ld", (long)pid);
    assert_non_null(strstr(err, want));
    assert_int_equal(fd, -1);
    assert_int_equal(tg_file_lock(lock, 10, &fd, err, sizeof err), 0);   /* waits out the holder */
    assert_true(fd >= 0);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    close(fd);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(ready[0]);
    close(ready[1]);
    const char *link = in_dir("l.lock"), *fifo = in_dir("f.lock");
    assert_int_equal(symlink(in_dir("elsewhere"), link), 0);
    assert_int_equal(tg_file_lock(link, 0, &fd, err, sizeof err), -1);
    assert_int_equal(access(in_dir("elsewhere"), F_OK), -1);   /* nothing made through the link */
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(tg_file_lock(fifo, 0, &fd, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file"));
    unlink(link);
    unlink(fifo);
    unlink(lock);
}

static int setup(void **s) {
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/tg_file_test.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **s) {
    (void)s;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_kind),
        cmocka_unit_test(test_not_regular),
        cmocka_unit_test(test_link_mode_cloexec),
        cmocka_unit_test(test_open_read),
        cmocka_unit_test(test_lock),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
