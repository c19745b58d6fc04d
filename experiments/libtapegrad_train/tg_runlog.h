/* The run's TSV log: a header ('#' lines with the configuration, then the
 * column line) and one row per logged step.
 *
 * Whole lines only: a row is built in memory and handed to the kernel in one
 * write(), right away, so a run killed at any moment (even SIGKILL) leaves a
 * log whose lines are all complete.
 *
 * Opening never destroys an existing log before the new one is ready: the
 * header (and, on resume, the rows kept) go to a temporary file in the same
 * folder, which is renamed over the log; rows are then appended to it.
 *
 * Resume: the existing log's settings must match the run's (keys listed in
 * may_differ excepted) and its column line must be the same; its rows before
 * the checkpoint's step are kept, later ones and a partial last line dropped,
 * so nothing is duplicated; a log that lacks rows the checkpoint has seen is
 * refused, so nothing is lost silently. A missing log is started afresh. */
#ifndef TG_RUNLOG_H
#define TG_RUNLOG_H
#include <stddef.h>

typedef struct {
    int fd;
    char *row;
    size_t len, cap;
    int failed;      /* building a row ran out of memory */
} tg_runlog;

/* header: the '#' lines and the column line, each ending in '\n'. */
int tg_runlog_open(tg_runlog *L, const char *path, const char *header, char *err, size_t errlen);
/* may_differ: flag names ("log-every" or "log_every") whose header values may
 * change. info gets one line about what was kept. */
int tg_runlog_resume(tg_runlog *L, const char *path, const char *header, const char *const *may_differ, int step,
                  char *info, size_t infolen, char *err, size_t errlen);

/* The value of "# key=value" in the header of the log at path into val;
 * 0, or -1 if the file or the key is not there. */
int tg_runlog_header_value(const char *path, const char *key, char *val, size_t len);

/* What tg_runlog_resume decides, on the old log's bytes in memory, touching no
 * file (the fuzzer's entry): the checks above, then the byte range
 * [from, to) of old to keep after the new header. */
typedef struct { size_t from, to; long kept, last, dropped; } tg_runlog_keep;
int tg_runlog_plan(const char *old, size_t n, const char *header, const char *const *may_differ, int step,
                tg_runlog_keep *k, char *err, size_t errlen);

/* Appends to the row being built; tg_runlog_end_row writes it (it must end in
 * '\n'). Returns 0, or -1 if the write failed. */
void tg_runlog_add(tg_runlog *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int tg_runlog_end_row(tg_runlog *L);
int tg_runlog_sync(tg_runlog *L);     /* fsync: rows survive a machine crash too */
int tg_runlog_close(tg_runlog *L);

#endif
