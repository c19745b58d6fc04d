/* A second implementation of the exec protocol's kernel side, in C, written from
 * docs/exec_protocol.md alone: its own frames and its own safetensors reader and
 * writer (F32 only), no tapegrad code linked. It computes the attention contract
 * (docs/ops.md) in double: causal, head_scale, and the features it declares —
 * dv ≠ d, grouped heads, Tq ≠ Tk (bottom-right), windows and padding (kv_len).
 *
 *   exec_kernel [--noscale] [--tag=ANY]
 *
 * --noscale is the seed's bug (the call's scale ignored: softmax(q·k)); --tag= is
 * ignored (a caller's marker for pgrep). A bad length prefix loses the stream: an
 * error reply, exit 2; end of input or bye: exit 0; any other bad request: an
 * error reply, and the kernel serves on. Little-endian hosts only, as the wire is. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_T 8      /* tensors in one message */
#define MAX_META 24  /* metadata keys in one message */
#define MAX_FRAME ((uint64_t)1 << 30)
static const char FEATURES[] = "dv,gqa,tq_tk,window,padding";

typedef struct {
    char name[32];
    int rank;
    int64_t shape[8];
    float *data; /* into the body (read) or owned (kept, written) */
} tensor;

typedef struct {
    int n, n_meta;
    tensor t[MAX_T];
    char *key[MAX_META], *val[MAX_META];
    float *aligned; /* the data part, copied when the header's length left it unaligned */
} message;

static char why[512]; /* the last refusal's reason */
static int refuse(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return -1;
}

static int64_t numel(const tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->shape[i];
    return n;
}

/* ---- the bytes: frames on stdin/stdout ------------------------------------------------------ */
static int read_all(void *p, size_t n) { /* 1 all, 0 end of input before any byte, -1 cut short */
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(0, (char *)p + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return got == 0 && k == 0 ? 0 : -1;
        got += (size_t)k;
    }
    return 1;
}

static void write_all(const void *p, size_t n) {
    while (n) {
        ssize_t k = write(1, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) exit(3); /* tapegrad went away */
        p = (const char *)p + k, n -= (size_t)k;
    }
}

static uint64_t le64(const unsigned char *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

static void put_le64(unsigned char *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

/* ---- a small JSON reader: the safetensors header --------------------------------------------- */
typedef struct {
    const char *p, *end;
} json;

static void ws(json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int expect(json *j, char c) {
    ws(j);
    if (j->p >= j->end || *j->p != c) return refuse("the header is not JSON (wanted '%c')", c);
    j->p++;
    return 0;
}

static int peek(json *j, char c) {
    ws(j);
    return j->p < j->end && *j->p == c;
}

/* A string into a fresh buffer (UTF-8 kept; \u escapes of the BMP encoded). */
static int string(json *j, char **out) {
    if (expect(j, '"')) return -1;
    size_t cap = (size_t)(j->end - j->p) + 1, n = 0;
    char *s = malloc(cap);
    if (!s) return refuse("out of memory");
    while (j->p < j->end && *j->p != '"') {
        unsigned c = (unsigned char)*j->p++;
        if (c < 0x20) return free(s), refuse("the header is not JSON (a control character in a string)");
        if (c == '\\') {
            if (j->p >= j->end) break;
            c = (unsigned char)*j->p++;
            const char *simple = strchr("\"\\/bfnrt", (int)c);
            if (c && simple) {
                s[n++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
                continue;
            }
            if (c != 'u' || j->end - j->p < 4) return free(s), refuse("the header is not JSON (a bad escape)");
            unsigned u = 0;
            for (int i = 0; i < 4; i++) {
                int h = *j->p++;
                if (!isxdigit(h)) return free(s), refuse("the header is not JSON (a bad \\u escape)");
                u = u * 16 + (unsigned)(isdigit(h) ? h - '0' : tolower(h) - 'a' + 10);
            }
            if (u == 0 || (u >= 0xd800 && u < 0xe000)) return free(s), refuse("a \\u escape this kernel refuses");
            if (u < 0x80) s[n++] = (char)u;
            else if (u < 0x800) s[n++] = (char)(0xc0 | u >> 6), s[n++] = (char)(0x80 | (u & 0x3f));
            else
                s[n++] = (char)(0xe0 | u >> 12), s[n++] = (char)(0x80 | ((u >> 6) & 0x3f)),
                s[n++] = (char)(0x80 | (u & 0x3f));
            continue;
        }
        s[n++] = (char)c;
    }
    if (j->p >= j->end) return free(s), refuse("the header is not JSON (a string not closed)");
    j->p++;
    s[n] = 0;
    *out = s;
    return 0;
}

static int integer(json *j, int64_t *v) {
    ws(j);
    const char *start = j->p;
    int64_t x = 0;
    while (j->p < j->end && isdigit((unsigned char)*j->p)) {
        if (x > (INT64_MAX - 9) / 10) return refuse("the header is not JSON (a number too large)");
        x = x * 10 + (*j->p++ - '0');
    }
    if (j->p == start) return refuse("the header is not JSON (wanted a whole number)");
    *v = x;
    return 0;
}

static int int_list(json *j, int64_t *v, int max, int *n) {
    if (expect(j, '[')) return -1;
    *n = 0;
    if (peek(j, ']')) return j->p++, 0;
    do {
        if (*n == max) return refuse("a list longer than %d", max);
        if (integer(j, &v[(*n)++])) return -1;
    } while (peek(j, ',') && j->p++);
    return expect(j, ']');
}

static void message_free(message *m) {
    for (int i = 0; i < m->n_meta; i++) free(m->key[i]), free(m->val[i]);
    free(m->aligned);
    memset(m, 0, sizeof *m);
}

/* One tensor's entry: {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}. */
static int entry(json *j, tensor *t, int64_t off[2]) {
    int have = 0;
    if (expect(j, '{')) return -1;
    do {
        char *key;
        if (string(j, &key)) return -1;
        int bad = expect(j, ':');
        if (!bad && !strcmp(key, "dtype")) {
            char *dt = NULL;
            bad = string(j, &dt);
            if (!bad && strcmp(dt, "F32")) bad = refuse("tensor %s has dtype %s: only F32 is spoken", t->name, dt);
            if (dt) free(dt), dt = NULL;
            have |= 1;
        } else if (!bad && !strcmp(key, "shape")) {
            bad = int_list(j, t->shape, 8, &t->rank);
            have |= 2;
        } else if (!bad && !strcmp(key, "data_offsets")) {
            int n;
            bad = int_list(j, off, 2, &n);
            if (!bad && n != 2) bad = refuse("tensor %s: data_offsets is not [begin, end]", t->name);
            have |= 4;
        } else if (!bad) {
            bad = refuse("tensor %s: unknown key '%s'", t->name, key);
        }
        free(key);
        if (bad) return -1;
    } while (peek(j, ',') && j->p++);
    if (expect(j, '}')) return -1;
    return have == 7 ? 0 : refuse("tensor %s lacks dtype, shape or data_offsets", t->name);
}

/* A safetensors body into m: the tensors point into body. */
static int parse(unsigned char *body, uint64_t size, message *m) {
    memset(m, 0, sizeof *m);
    if (size < 8) return refuse("a body of %llu bytes is not a safetensors file", (unsigned long long)size);
    const uint64_t h = le64(body);
    if (h > size - 8) return refuse("the header's length %llu runs past the body", (unsigned long long)h);
    json j = {(const char *)body + 8, (const char *)body + 8 + h};
    unsigned char *data = body + 8 + h;
    const uint64_t data_len = size - 8 - h;
    int64_t off[MAX_T][2];
    if (expect(&j, '{')) return -1;
    if (!peek(&j, '}')) do {
            char *key;
            if (string(&j, &key)) return message_free(m), -1;
            if (expect(&j, ':')) return free(key), message_free(m), -1;
            if (!strcmp(key, "__metadata__")) {
                free(key);
                if (expect(&j, '{')) return message_free(m), -1;
                if (!peek(&j, '}')) do {
                        if (m->n_meta == MAX_META) return message_free(m), refuse("more than %d metadata keys", MAX_META);
                        char *k, *v;
                        if (string(&j, &k)) return message_free(m), -1;
                        if (expect(&j, ':') || string(&j, &v)) return free(k), message_free(m), -1;
                        m->key[m->n_meta] = k, m->val[m->n_meta++] = v;
                    } while (peek(&j, ',') && j.p++);
                if (expect(&j, '}')) return message_free(m), -1;
                continue;
            }
            if (m->n == MAX_T) return free(key), message_free(m), refuse("more than %d tensors", MAX_T);
            tensor *t = &m->t[m->n];
            snprintf(t->name, sizeof t->name, "%s", key);
            free(key);
            if (entry(&j, t, off[m->n])) return message_free(m), -1;
            m->n++;
        } while (peek(&j, ',') && j.p++);
    if (expect(&j, '}')) return message_free(m), -1;
    ws(&j);
    if (j.p != j.end) return message_free(m), refuse("the header is not JSON (bytes after its object)");
    /* the data part: each tensor's bytes, no gaps, no overlaps, nothing left over */
    uint64_t covered = 0;
    for (int i = 0; i < m->n; i++) {
        tensor *t = &m->t[i];
        if (off[i][1] < off[i][0] || (uint64_t)off[i][1] > data_len)
            return message_free(m), refuse("tensor %s: data_offsets [%lld, %lld] outside the %llu data bytes",
                                           t->name, (long long)off[i][0], (long long)off[i][1],
                                           (unsigned long long)data_len);
        if ((uint64_t)(off[i][1] - off[i][0]) != 4 * (uint64_t)numel(t))
            return message_free(m), refuse("tensor %s: %lld bytes for %lld values", t->name,
                                           (long long)(off[i][1] - off[i][0]), (long long)numel(t));
        for (int k = 0; k < i; k++)
            if (off[i][0] < off[k][1] && off[k][0] < off[i][1])
                return message_free(m), refuse("tensors %s and %s overlap", m->t[k].name, t->name);
        covered += (uint64_t)(off[i][1] - off[i][0]);
    }
    if (covered != data_len)
        return message_free(m), refuse("%llu data bytes, the tensors use %llu", (unsigned long long)data_len,
                                       (unsigned long long)covered);
    if ((uintptr_t)data % sizeof(float)) { /* a header whose length is no multiple of 4: read floats from a copy */
        if (!(m->aligned = malloc(data_len ? data_len : 1))) return message_free(m), refuse("out of memory");
        memcpy(m->aligned, data, data_len);
        data = (unsigned char *)m->aligned;
    }
    for (int i = 0; i < m->n; i++) m->t[i].data = (float *)(data + off[i][0]); /* offsets of F32s: multiples of 4 */
    return 0;
}

static const char *meta(const message *m, const char *key) {
    for (int i = 0; i < m->n_meta; i++)
        if (!strcmp(m->key[i], key)) return m->val[i];
    return NULL;
}

static tensor *find(message *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->t[i].name, name)) return &m->t[i];
    return NULL;
}

/* ---- writing a reply ------------------------------------------------------------------------ */
static void json_string(char *b, size_t cap, size_t *n, const char *s) {
    *n += (size_t)snprintf(b + *n, cap - *n, "\"");
    for (; *s && *n + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') *n += (size_t)snprintf(b + *n, cap - *n, "\\%c", c);
        else if (c < 0x20) *n += (size_t)snprintf(b + *n, cap - *n, "\\u%04x", c);
        else b[(*n)++] = (char)c;
    }
    *n += (size_t)snprintf(b + *n, cap - *n, "\"");
}

/* keys/vals: n_meta pairs; "protocol" is added. */
static void reply(const char *const *kv, int n_meta, const tensor *t, int n) {
    char head[4096];
    size_t len = 0;
    len += (size_t)snprintf(head + len, sizeof head - len, "{\"__metadata__\":{\"protocol\":\"1\"");
    for (int i = 0; i < n_meta; i++) {
        head[len++] = ',';
        json_string(head, sizeof head, &len, kv[2 * i]);
        head[len++] = ':';
        json_string(head, sizeof head, &len, kv[2 * i + 1]);
    }
    head[len++] = '}';
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(head + len, sizeof head - len, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[", t[i].name);
        for (int d = 0; d < t[i].rank; d++)
            len += (size_t)snprintf(head + len, sizeof head - len, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        const uint64_t bytes = 4 * (uint64_t)numel(&t[i]);
        len += (size_t)snprintf(head + len, sizeof head - len, "],\"data_offsets\":[%llu,%llu]}",
                                (unsigned long long)off, (unsigned long long)(off + bytes));
        off += bytes;
    }
    len += (size_t)snprintf(head + len, sizeof head - len, "}");
    while (len % 8) head[len++] = ' '; /* the data part starts 8-aligned, as safetensors writers do */
    unsigned char pre[16];
    put_le64(pre, 8 + len + off);
    put_le64(pre + 8, len);
    write_all(pre, 16);
    write_all(head, len);
    for (int i = 0; i < n; i++) write_all(t[i].data, 4 * (size_t)numel(&t[i]));
}

static void reply_error(const char *id, const char *message) {
    const char *kv[] = {"type", "error", "message", message, "id", id};
    reply(kv, id ? 3 : 2, NULL, 0);
}

/* ---- attention ---------------------------------------------------------------------------- */
typedef struct kept {
    char id[24];
    int backwarded;
    double scale;
    int causal;
    int64_t wl, wr;
    tensor q, k, v, hs, kv_len; /* owned copies; hs, kv_len: rank 0 when absent */
    char needs[64];
    struct kept *next;
} kept;

static int visible(const kept *c, int64_t b, int64_t i, int64_t j, int64_t Tq, int64_t Tk) {
    const int64_t p = i + Tk - Tq;
    if (c->causal && j > p) return 0;
    if (c->wl >= 0 && j < p - c->wl) return 0;
    if (c->wr >= 0 && j > p + c->wr) return 0;
    if (c->kv_len.rank && j >= (int64_t)c->kv_len.data[b]) return 0;
    return 1;
}

#define AT(t, b, i, h, x) (t).data[(((b) * (t).shape[1] + (i)) * (t).shape[2] + (h)) * (t).shape[3] + (x)]

/* One row's weights P[j] (0 where invisible); returns how many keys it sees. dots[j] = q·k. */
static int row(const kept *c, int64_t b, int64_t i, int64_t h, double *P, double *dots) {
    const int64_t Tq = c->q.shape[1], Tk = c->k.shape[1], H = c->q.shape[2], d = c->q.shape[3];
    const int64_t g = h / (H / c->k.shape[2]);
    const double s = c->scale * (c->hs.rank ? c->hs.data[h] : 1.0);
    double m = -INFINITY, z = 0;
    int seen = 0;
    for (int64_t j = 0; j < Tk; j++) {
        dots[j] = 0;
        for (int64_t x = 0; x < d; x++) dots[j] += (double)AT(c->q, b, i, h, x) * AT(c->k, b, j, g, x);
        if (visible(c, b, i, j, Tq, Tk)) m = fmax(m, s * dots[j]), seen++;
    }
    for (int64_t j = 0; j < Tk; j++) P[j] = visible(c, b, i, j, Tq, Tk) ? exp(s * dots[j] - m) : 0, z += P[j];
    for (int64_t j = 0; j < Tk; j++) P[j] = seen ? P[j] / z : 0;
    return seen;
}

static void forward(const kept *c, tensor *out) {
    const int64_t B = c->q.shape[0], Tq = c->q.shape[1], H = c->q.shape[2], Tk = c->k.shape[1];
    const int64_t dv = c->v.shape[3], G = H / c->k.shape[2];
    double *P = malloc(2 * (size_t)Tk * sizeof *P);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Tq; i++) {
                row(c, b, i, h, P, P + Tk);
                for (int64_t x = 0; x < dv; x++) {
                    double o = 0;
                    for (int64_t j = 0; j < Tk; j++) o += P[j] * AT(c->v, b, j, h / G, x);
                    AT(*out, b, i, h, x) = (float)o;
                }
            }
    free(P);
}

/* dlogit_ij = P_ij (dP_ij − Σ_k P_ik dP_ik), dP_ij = dout_i · v_j; logit = s·q·k, s = scale·hs[h]. */
static void backward(const kept *c, const tensor *dout, double *dq, double *dk, double *dvv, double *dhs) {
    const int64_t B = c->q.shape[0], Tq = c->q.shape[1], H = c->q.shape[2], Tk = c->k.shape[1];
    const int64_t d = c->q.shape[3], dv = c->v.shape[3], G = H / c->k.shape[2];
    const int64_t Hkv = c->k.shape[2];
    double *P = malloc(3 * (size_t)Tk * sizeof *P), *dots = P + Tk, *dP = P + 2 * Tk;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Tq; i++) {
                if (!row(c, b, i, h, P, dots)) continue; /* an empty row passes no gradient */
                const int64_t g = h / G;
                const double hs = c->hs.rank ? c->hs.data[h] : 1.0, s = c->scale * hs;
                double D = 0;
                for (int64_t j = 0; j < Tk; j++) {
                    dP[j] = 0;
                    for (int64_t x = 0; x < dv; x++) dP[j] += (double)AT(*dout, b, i, h, x) * AT(c->v, b, j, g, x);
                    D += P[j] * dP[j];
                }
                for (int64_t j = 0; j < Tk; j++) {
                    if (P[j] == 0) continue;
                    const double dl = P[j] * (dP[j] - D);
                    for (int64_t x = 0; x < dv; x++)
                        dvv[((b * Tk + j) * Hkv + g) * dv + x] += P[j] * AT(*dout, b, i, h, x);
                    for (int64_t x = 0; x < d; x++) {
                        dq[((b * Tq + i) * H + h) * d + x] += dl * s * AT(c->k, b, j, g, x);
                        dk[((b * Tk + j) * Hkv + g) * d + x] += dl * s * AT(c->q, b, i, h, x);
                    }
                    dhs[h] += dl * c->scale * dots[j];
                }
            }
    free(P);
}

/* ---- the messages ----------------------------------------------------------------------------- */
static kept *calls;
static int noscale;

static int copy(tensor *to, const tensor *from) {
    *to = *from;
    to->data = malloc(4 * (size_t)(numel(from) ? numel(from) : 1));
    if (!to->data) return refuse("out of memory");
    memcpy(to->data, from->data, 4 * (size_t)numel(from));
    return 0;
}

static void kept_free(kept *c) {
    free(c->q.data), free(c->k.data), free(c->v.data), free(c->hs.data), free(c->kv_len.data);
    free(c);
}

static kept *lookup(const char *id, kept ***link) {
    for (kept **p = &calls; *p; p = &(*p)->next)
        if (!strcmp((*p)->id, id)) {
            if (link) *link = p;
            return *p;
        }
    return NULL;
}

static int int_field(const message *m, const char *key, int64_t def, int64_t lo, int64_t *v) {
    const char *s = meta(m, key);
    if (!s) return *v = def, 0;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (!*s || *end || errno || x < lo) return refuse("field %s '%s' is not a whole number >= %lld", key, s, (long long)lo);
    *v = x;
    return 0;
}

static int dims_fit(const tensor *t, int rank, const char *what) {
    return t->rank == rank ? 0 : refuse("%s has %d dimensions, the call needs %d", what, t->rank, rank);
}

static int do_forward(message *m, const char *id, tensor *out, kept **made) {
    for (const char *f = "softcap\0dropout\0"; *f; f += strlen(f) + 1) {
        const char *s = meta(m, f);
        if (s && strtod(s, NULL) != 0) return refuse("the call uses %s, which this kernel did not declare", f);
    }
    const char *scale = meta(m, "scale");
    char *end;
    if (!scale) return refuse("the forward's scale is missing");
    const double sc = strtod(scale, &end);
    if (!*scale || *end || !isfinite(sc)) return refuse("scale '%s' is not a number", scale);
    kept c = {.scale = noscale ? 1.0 : sc};
    int64_t causal;
    if (int_field(m, "causal", 0, 0, &causal) || causal > 1 || int_field(m, "window_left", -1, -1, &c.wl) ||
        int_field(m, "window_right", -1, -1, &c.wr))
        return why[0] ? -1 : refuse("causal is 0 or 1");
    c.causal = (int)causal;
    tensor *q = find(m, "q"), *k = find(m, "k"), *v = find(m, "v"), *hs = find(m, "head_scale"),
           *kl = find(m, "kv_len");
    if (!q || !k || !v) return refuse("a forward without tensor %s", !q ? "q" : !k ? "k" : "v");
    for (int i = 0; i < m->n; i++)
        if (&m->t[i] != q && &m->t[i] != k && &m->t[i] != v && &m->t[i] != hs && &m->t[i] != kl)
            return refuse("tensor %s: not one this kernel takes (features: %s)", m->t[i].name, FEATURES);
    if (dims_fit(q, 4, "q") || dims_fit(k, 4, "k") || dims_fit(v, 4, "v")) return -1;
    const int64_t B = q->shape[0], Tq = q->shape[1], H = q->shape[2], d = q->shape[3];
    const int64_t Tk = k->shape[1], Hkv = k->shape[2];
    if (k->shape[0] != B || v->shape[0] != B || v->shape[1] != Tk || v->shape[2] != Hkv || k->shape[3] != d ||
        Hkv < 1 || H % Hkv || B < 1 || Tq < 1 || Tk < 1 || d < 1 || v->shape[3] < 1)
        return refuse("q [%lld,%lld,%lld,%lld], k [%lld,%lld,%lld,%lld], v [%lld,%lld,%lld,%lld] do not fit",
                      (long long)B, (long long)Tq, (long long)H, (long long)d, (long long)k->shape[0],
                      (long long)Tk, (long long)Hkv, (long long)k->shape[3], (long long)v->shape[0],
                      (long long)v->shape[1], (long long)v->shape[2], (long long)v->shape[3]);
    if (hs && (hs->rank != 1 || hs->shape[0] != H)) return refuse("head_scale must be [%lld]", (long long)H);
    if (kl) {
        if (kl->rank != 1 || kl->shape[0] != B) return refuse("kv_len must be [%lld]", (long long)B);
        for (int64_t b = 0; b < B; b++)
            if (kl->data[b] != floorf(kl->data[b]) || kl->data[b] < 0 || kl->data[b] > Tk)
                return refuse("kv_len[%lld] = %g is not a whole number in [0, %lld]", (long long)b, kl->data[b],
                              (long long)Tk);
    }
    const char *needs = meta(m, "needs_grad");
    snprintf(c.needs, sizeof c.needs, "%s", needs ? needs : "");
    for (const char *p = c.needs; *p;) {
        size_t n = strcspn(p, ",");
        int ok = (n == 1 && strchr("qkv", *p)) || (n == 10 && !strncmp(p, "head_scale", 10) && hs);
        if (!ok) return refuse("needs_grad names %.*s, which this call has no gradient for", (int)n, p);
        p += n + (p[n] == ',');
    }
    kept *k2 = calloc(1, sizeof *k2);
    if (!k2) return refuse("out of memory");
    *k2 = c;
    snprintf(k2->id, sizeof k2->id, "%s", id);
    if (copy(&k2->q, q) || copy(&k2->k, k) || copy(&k2->v, v) || (hs && copy(&k2->hs, hs)) ||
        (kl && copy(&k2->kv_len, kl)))
        return kept_free(k2), -1;
    *out = (tensor){"out", 4, {B, Tq, H, v->shape[3]}, malloc(4 * (size_t)(B * Tq * H * v->shape[3]))};
    forward(k2, out);
    *made = k2;
    return 0;
}

static int do_backward(message *m, kept *c, tensor *g, int *n) {
    if (c->backwarded) return refuse("id %s was backwarded already", c->id);
    tensor *dout = find(m, "dout");
    if (!dout || m->n != 1) return refuse("a backward carries exactly one tensor, dout");
    const int64_t B = c->q.shape[0], Tq = c->q.shape[1], H = c->q.shape[2], dv = c->v.shape[3];
    if (dout->rank != 4 || dout->shape[0] != B || dout->shape[1] != Tq || dout->shape[2] != H || dout->shape[3] != dv)
        return refuse("dout does not have out's shape [%lld,%lld,%lld,%lld]", (long long)B, (long long)Tq,
                      (long long)H, (long long)dv);
    const tensor *in[4] = {&c->q, &c->k, &c->v, &c->hs};
    double *acc[4];
    for (int i = 0; i < 4; i++) /* dhead_scale: [H] whether or not the call had head_scale */
        acc[i] = calloc((size_t)(i == 3 ? H : numel(in[i])), sizeof(double));
    backward(c, dout, acc[0], acc[1], acc[2], acc[3]);
    static const char *const names[4] = {"dq", "dk", "dv", "dhead_scale"};
    *n = 0;
    for (const char *p = c->needs; *p;) {
        size_t len = strcspn(p, ",");
        int i = *p == 'q' ? 0 : *p == 'k' ? 1 : *p == 'v' ? 2 : 3;
        tensor *t = &g[(*n)++];
        *t = *in[i];
        snprintf(t->name, sizeof t->name, "%s", names[i]);
        t->data = malloc(4 * (size_t)numel(in[i]));
        for (int64_t e = 0; e < numel(in[i]); e++) t->data[e] = (float)acc[i][e];
        p += len + (p[len] == ',');
    }
    for (int i = 0; i < 4; i++) free(acc[i]);
    c->backwarded = 1;
    return 0;
}

/* One request; returns 1 when the kernel should exit 0 (bye). */
static int serve_one(unsigned char *body, uint64_t size, int *greeted) {
    message m;
    why[0] = 0;
    if (parse(body, size, &m)) return reply_error(NULL, why), 0;
    const char *proto = meta(&m, "protocol"), *type = meta(&m, "type"), *id = meta(&m, "id");
    int rc = 0;
    if (!proto || strcmp(proto, "1")) {
        snprintf(why, sizeof why, "protocol '%s': this kernel speaks 1", proto ? proto : "(none)");
        reply_error(id, why);
    } else if (!type) {
        reply_error(id, "a message without a type");
    } else if (!strcmp(type, "bye")) {
        rc = 1;
    } else if (!strcmp(type, "hello")) {
        *greeted = 1;
        const char *kv[] = {"type", "hello", "name", noscale ? "c kernel (no scale)" : "c kernel", "features", FEATURES};
        reply(kv, 3, NULL, 0);
    } else if (!*greeted) {
        reply_error(id, "a request before hello");
    } else if (strcmp(type, "forward") && strcmp(type, "backward") && strcmp(type, "release")) {
        snprintf(why, sizeof why, "unknown message type '%.40s'", type);
        reply_error(id, why);
    } else if (!id || !*id || strspn(id, "0123456789") != strlen(id) || strlen(id) >= sizeof calls->id ||
               *id == '0') {
        snprintf(why, sizeof why, "a %s without an id (a decimal integer >= 1)", type);
        reply_error(id, why);
    } else if (!strcmp(type, "forward")) {
        tensor out;
        kept *c = NULL;
        if (lookup(id, NULL)) refuse("id %s is in use", id), reply_error(id, why);
        else if (do_forward(&m, id, &out, &c)) reply_error(id, why);
        else {
            c->next = calls, calls = c;
            const char *kv[] = {"type", "out", "id", id};
            reply(kv, 2, &out, 1);
            free(out.data);
        }
    } else {
        kept **link, *c = lookup(id, &link);
        if (!c) {
            snprintf(why, sizeof why, "id %s: no forward made it (or it was released)", id);
            reply_error(id, why);
        } else if (!strcmp(type, "release")) {
            *link = c->next;
            kept_free(c);
            const char *kv[] = {"type", "released", "id", id};
            reply(kv, 2, NULL, 0);
        } else {
            tensor g[4];
            int n = 0;
            if (do_backward(&m, c, g, &n)) reply_error(id, why);
            else {
                const char *kv[] = {"type", "grads", "id", id};
                reply(kv, 2, g, n);
            }
            for (int i = 0; i < n; i++) free(g[i].data);
        }
    }
    message_free(&m);
    return rc;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--noscale")) noscale = 1;
        else if (strncmp(argv[i], "--tag=", 6)) {
            fprintf(stderr, "exec_kernel: unknown option '%s' (--noscale, --tag=ANY)\n", argv[i]);
            return 2;
        }
    }
    const uint16_t one = 1;
    if (*(const unsigned char *)&one != 1) {
        fprintf(stderr, "exec_kernel: a big-endian host: the wire's floats are little-endian\n");
        return 2;
    }
    int greeted = 0, rc = 0;
    for (;;) {
        unsigned char pre[8];
        int r = read_all(pre, 8);
        if (r == 0) break; /* end of input */
        const uint64_t n = le64(pre);
        if (r < 0 || n == 0 || n > MAX_FRAME) {
            reply_error(NULL, r < 0 ? "a length prefix cut short" : "a frame's length outside 1..2^30: the stream is lost");
            rc = 2;
            break;
        }
        unsigned char *body = malloc(n);
        if (!body || read_all(body, n) != 1) {
            reply_error(NULL, body ? "a frame cut short" : "out of memory for a frame");
            free(body);
            rc = 2;
            break;
        }
        const int bye = serve_one(body, n, &greeted);
        free(body);
        if (bye) break;
    }
    while (calls) {
        kept *c = calls;
        calls = c->next;
        kept_free(c);
    }
    return rc;
}
