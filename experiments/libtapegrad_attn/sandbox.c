/* Kernel code in a child, its outcome typed (tg_sandbox.h). The child's pipe carries records:
 * a kind (a byte), a length (4 bytes, little-endian), the bytes. */
#define _POSIX_C_SOURCE 200809L
#include "tg_sandbox.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tg_child.h"
#include "tg_kernel.h"

enum { REC_DATA = 1, REC_STAGE, REC_FAIL };
#define MAX_RECORD (1u << 20)

struct tg_sandbox {
    int fd;
};

typedef struct {
    int (*fn)(tg_sandbox *, void *);
    void *user;
    const tg_sandbox_opts *o;
} job;

typedef struct {
    const tg_sandbox_opts *o;
    tg_sandbox_end *end;
    unsigned char head[5];
    size_t got;          /* bytes of the record at hand so far (head, then body) */
    unsigned char *body; /* room for the body, kept from record to record */
    size_t cap;
    uint32_t len;
    int failed;          /* a REC_FAIL came */
    int lost;            /* a head our child did not write (over MAX_RECORD, out of memory): the rest ignored */
} reader;

static int send_record(tg_sandbox *sb, int kind, const void *data, size_t n) {
    if (n > MAX_RECORD) return -1;
    unsigned char head[5] = {(unsigned char)kind, (unsigned char)n, (unsigned char)(n >> 8), (unsigned char)(n >> 16),
                             (unsigned char)(n >> 24)};
    const unsigned char *parts[2] = {head, data};
    const size_t lens[2] = {5, n};
    for (int p = 0; p < 2; p++)
        for (size_t w = 0; w < lens[p];) {
            ssize_t k = write(sb->fd, parts[p] + w, lens[p] - w);
            if (k <= 0) return -1;
            w += (size_t)k;
        }
    return 0;
}

int tg_sandbox_send(tg_sandbox *sb, const void *data, size_t n) { return send_record(sb, REC_DATA, data, n); }

void tg_sandbox_stage(tg_sandbox *sb, int stage) { (void)send_record(sb, REC_STAGE, &stage, sizeof stage); }

void tg_sandbox_fail(const char *msg, void *sb) {
    (void)send_record(sb, REC_FAIL, msg, strlen(msg));
    _exit(3);
}

static int child(void *u, int fd) {
    job *j = u;
    tg_sandbox sb = {fd};
    char err[1024];
    if (j->o->kernel && tg_kernel_reopen(j->o->kernel, err, sizeof err)) {   /* a kernel of the child's own */
        tg_sandbox_fail(err, &sb);
        return 3;
    }
    const int rc = j->fn(&sb, j->user);
    if (j->o->kernel && j->o->kernel->kind == TG_KERNEL_EXEC) tg_kernel_close(j->o->kernel);   /* the child's own process */
    return rc;
}

/* One whole record: the sandbox's own kinds kept, the caller's passed on. */
static void record(reader *r) {
    if (r->head[0] == REC_STAGE && r->len == sizeof(int)) memcpy(&r->end->stage, r->body, sizeof(int));
    else if (r->head[0] == REC_FAIL) {
        r->failed = 1;
        snprintf(r->end->msg, sizeof r->end->msg, "%.*s", (int)r->len, r->len ? (const char *)r->body : "");
    } else if (r->head[0] == REC_DATA && r->o->on_record)
        r->o->on_record(r->o->u, r->body, r->len);
}

static void on_bytes(void *u, const char *b, size_t n) {
    reader *r = u;
    while (n && !r->lost) {
        if (r->got < 5) {   /* the head */
            const size_t take = 5 - r->got < n ? 5 - r->got : n;
            memcpy(r->head + r->got, b, take);
            r->got += take, b += take, n -= take;
            if (r->got < 5) return;
            r->len = (uint32_t)r->head[1] | (uint32_t)r->head[2] << 8 | (uint32_t)r->head[3] << 16 |
                     (uint32_t)r->head[4] << 24;
            if (r->len > MAX_RECORD) return (void)(r->lost = 1);
            if (r->len > r->cap) {
                unsigned char *grown = realloc(r->body, r->len);
                if (!grown) return (void)(r->lost = 1);
                r->body = grown, r->cap = r->len;
            }
        }
        const size_t have = r->got - 5, take = r->len - have < n ? r->len - have : n;
        if (take) memcpy(r->body + have, b, take);
        r->got += take, b += take, n -= take;
        if (r->got == 5 + (size_t)r->len) {
            record(r);
            r->got = 0;
        }
    }
}

static void on_stray(void *u, const char *b, size_t n) {
    tg_sandbox_end *end = u;
    const size_t have = strlen(end->stray_head);
    if (end->stray == have)   /* still within the first line */
        for (size_t i = 0; i < n && have + i + 1 < sizeof end->stray_head && b[i] != '\n'; i++) {
            end->stray_head[have + i] = b[i];
            end->stray_head[have + i + 1] = 0;
        }
    end->stray += n;
}

int tg_sandbox_run(int (*fn)(tg_sandbox *sb, void *user), void *user, const tg_sandbox_opts *o, tg_sandbox_end *end) {
    *end = (tg_sandbox_end){0};
    job j = {fn, user, o};
    reader r = {.o = o, .end = end};
    tg_child_end ce;
    const int rc = o->on_output ? tg_child_run_out(child, &j, o->seconds, on_bytes, &r, o->on_output, o->u, &ce,
                                                   end->msg, sizeof end->msg)
                                : tg_child_run_out(child, &j, o->seconds, on_bytes, &r, on_stray, end, &ce, end->msg,
                                                   sizeof end->msg);
    free(r.body);
    if (rc) {
        end->outcome = TG_SANDBOX_NOT_RUN;
        return -1;
    }
    end->signal = ce.signal, end->status = ce.status;
    end->outcome = ce.timed_out ? TG_SANDBOX_HUNG : ce.signal ? TG_SANDBOX_CRASHED : r.failed ? TG_SANDBOX_FAILED
                   : ce.status ? TG_SANDBOX_EXITED : TG_SANDBOX_OK;
    if (end->outcome != TG_SANDBOX_FAILED && end->outcome != TG_SANDBOX_NOT_RUN) end->msg[0] = 0;
    return 0;
}
