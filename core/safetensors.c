/* safetensors writer (atomic) and validating reader. See safetensors.h. */
#define _POSIX_C_SOURCE 200809L   /* fsync, mkstemp, fchmod */
#include "safetensors.h"
#include "tg_precision.h"
#include "tg_file.h"
#include "tg_core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER (100u << 20)   /* the reference implementation's limit */

static const struct { const char *name; size_t size; } dtypes[TG_ST_NDTYPES] = {
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2},
    {"F16", 2}, {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"F64", 8}, {"I64", 8}, {"U64", 8},
};

const char *tg_st_dtype_name(tg_st_dtype d) { return (unsigned)d < TG_ST_NDTYPES ? dtypes[d].name : "?"; }
size_t tg_st_dtype_size(tg_st_dtype d) { return (unsigned)d < TG_ST_NDTYPES ? dtypes[d].size : 0; }

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else return 0;
    if (n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    return len;
}

static int utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    while (n) {
        size_t l = utf8_len(p, n);
        if (!l) return 0;
        p += l;
        n -= l;
    }
    return 1;
}

/* ---- little-endian conversion, independent of the host's byte order ------- */
static void put_u64(unsigned char *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_u64(const unsigned char *b) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}
static uint32_t get_u32(const unsigned char *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Element i of a host-order tensor as little-endian bytes into out; returns its size. */
static size_t elem_le(const tg_st_tensor *t, int64_t i, unsigned char *out) {
    if (t->dtype == TG_ST_F32) {
        uint32_t u;
        memcpy(&u, (const float *)t->data + i, 4);
        for (int k = 0; k < 4; k++) out[k] = (unsigned char)(u >> (8 * k));
        return 4;
    }
    if (t->dtype == TG_ST_BF16 || t->dtype == TG_ST_F16) {
        const uint16_t h = ((const uint16_t *)t->data)[i];
        out[0] = (unsigned char)h, out[1] = (unsigned char)(h >> 8);
        return 2;
    }
    uint64_t u;
    memcpy(&u, (const unsigned char *)t->data + 8 * i, 8);   /* F64 or I64 */
    put_u64(out, u);
    return 8;
}

void tg_st_get_f32(const tg_st_entry *e, float *out) {
    if (e->dtype == TG_ST_BF16 || e->dtype == TG_ST_F16) {   /* widened: exact */
        for (int64_t i = 0; i < e->numel; i++) {
            const uint16_t h = (uint16_t)(e->bytes[2 * i] | e->bytes[2 * i + 1] << 8);
            out[i] = e->dtype == TG_ST_BF16 ? tg_f32_of_bf16(h) : tg_f32_of_f16(h);
        }
        return;
    }
    for (int64_t i = 0; i < e->numel; i++) {
        uint32_t u = get_u32(e->bytes + 4 * i);
        memcpy(out + i, &u, 4);
    }
}
void tg_st_get_f64(const tg_st_entry *e, double *out) {
    for (int64_t i = 0; i < e->numel; i++) {
        uint64_t u = get_u64(e->bytes + 8 * i);
        memcpy(out + i, &u, 8);
    }
}
void tg_st_get_i64(const tg_st_entry *e, int64_t *out) {
    for (int64_t i = 0; i < e->numel; i++) {
        uint64_t u = get_u64(e->bytes + 8 * i);
        memcpy(out + i, &u, 8);
    }
}

/* ---- a growing string ------------------------------------------------------ */
typedef struct { char *s; size_t len, cap; int oom; } sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) sb_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}
/* A JSON string literal: quotes, backslashes and control bytes escaped; other
 * bytes (valid UTF-8, checked by the caller) as they are. */
static void sb_json(sbuf *b, const char *s) {
    sb_str(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c < 0x20) sb_printf(b, "\\u%04x", c);
        else sb_put(b, s, 1);
    }
    sb_str(b, "\"");
}

/* ---- writing --------------------------------------------------------------- */
enum { CHUNK = 1 << 16 };

/* Where stream_data puts the bytes: the checksum, a file, or memory. */
typedef struct {
    uint64_t *h;          /* the checksum (when file and mem are NULL) */
    tg_file *file;
    unsigned char *mem;   /* advanced as bytes are copied */
} sink;

static int sink_put(sink *s, const unsigned char *p, size_t n, char *err, size_t errlen) {
    if (s->file) return tg_file_write(s->file, p, n, err, errlen);
    if (s->mem) {
        memcpy(s->mem, p, n);
        s->mem += n;
    } else
        *s->h = tg_fnv1a64(*s->h, p, n);
    return 0;
}

static int host_is_le(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Streams every tensor's little-endian bytes into the sink: on a little-endian
 * host the values' bytes as they are, else element by element. */
static int stream_data(const tg_st_tensor *t, int n, sink *out, unsigned char *chunk, char *err, size_t errlen) {
    size_t used = 0;
    const int le = host_is_le();
    for (int j = 0; j < n; j++) {
        int64_t numel = 1;
        for (int d = 0; d < t[j].ndim; d++) numel *= t[j].shape[d];
        if (le && numel) {
            if (used && sink_put(out, chunk, used, err, errlen)) return -1;
            used = 0;
            if (sink_put(out, t[j].data, (size_t)numel * tg_st_dtype_size(t[j].dtype), err, errlen)) return -1;
            continue;
        }
        for (int64_t i = 0; i < numel; i++) {
            used += elem_le(&t[j], i, chunk + used);
            if (used > CHUNK - 8) {
                if (sink_put(out, chunk, used, err, errlen)) return -1;
                used = 0;
            }
        }
    }
    return used ? sink_put(out, chunk, used, err, errlen) : 0;
}

/* Checks the tensors and metadata (messages start with `who`), and builds the
 * header (the checksum of the data in it, padded to 8 bytes) into b; *total:
 * the data's bytes. chunk: CHUNK bytes of scratch. 0, or -1 with err. */
static int build_header(const char *who, const tg_st_tensor *t, int n, const tg_st_kv *meta, int n_meta, int checksum,
                        sbuf *b, uint64_t *total, unsigned char *chunk, char *err, size_t errlen) {
    if (n < 0 || n_meta < 0) return tg_errf(err, errlen, "%s: negative count", who);
    *total = 0;
    for (int j = 0; j < n; j++) {
        const tg_st_tensor *x = &t[j];
        if (!x->name || !*x->name || !utf8_valid(x->name) || strcmp(x->name, "__metadata__") == 0)
            return tg_errf(err, errlen, "%s: tensor %d has an empty, reserved or non-UTF-8 name", who, j);
        for (int k = 0; k < j; k++)
            if (strcmp(t[k].name, x->name) == 0) return tg_errf(err, errlen, "%s: two tensors named '%s'", who, x->name);
        if (x->dtype != TG_ST_F32 && x->dtype != TG_ST_F64 && x->dtype != TG_ST_I64 && x->dtype != TG_ST_BF16 &&
            x->dtype != TG_ST_F16)
            return tg_errf(err, errlen, "%s: tensor '%s': only F32, F64, I64, BF16 and F16 can be written", who, x->name);
        if (x->ndim < 0 || x->ndim > TG_ST_MAX_DIMS)
            return tg_errf(err, errlen, "%s: tensor '%s' has %d dimensions", who, x->name, x->ndim);
        uint64_t bytes = tg_st_dtype_size(x->dtype);
        for (int d = 0; d < x->ndim; d++) {
            if (x->shape[d] < 0 || (x->shape[d] && bytes > (UINT64_MAX >> 2) / (uint64_t)x->shape[d]))
                return tg_errf(err, errlen, "%s: tensor '%s' has a bad dimension %lld", who, x->name,
                               (long long)x->shape[d]);
            bytes *= (uint64_t)x->shape[d];
        }
        if (bytes && !x->data) return tg_errf(err, errlen, "%s: tensor '%s' has no data", who, x->name);
        if (*total > (UINT64_MAX >> 2) - bytes) return tg_errf(err, errlen, "%s: too much data", who);
        *total += bytes;
    }
    for (int j = 0; j < n_meta; j++) {
        if (!meta[j].key || !meta[j].value || !utf8_valid(meta[j].key) || !utf8_valid(meta[j].value))
            return tg_errf(err, errlen, "%s: metadata entry %d is missing or not UTF-8", who, j);
        if (strcmp(meta[j].key, TG_ST_CHECKSUM_KEY) == 0)
            return tg_errf(err, errlen, "%s: metadata key '%s' is reserved", who, TG_ST_CHECKSUM_KEY);
        for (int k = 0; k < j; k++)
            if (strcmp(meta[k].key, meta[j].key) == 0) return tg_errf(err, errlen, "%s: metadata key '%s' twice", who, meta[j].key);
    }

    sb_str(b, "{\"__metadata__\":{");
    for (int j = 0; j < n_meta; j++) {
        sb_json(b, meta[j].key);
        sb_str(b, ":");
        sb_json(b, meta[j].value);
        if (j + 1 < n_meta || checksum) sb_str(b, ",");
    }
    if (checksum) {
        uint64_t h = TG_FNV1A64_INIT;
        sink hash = {.h = &h};
        stream_data(t, n, &hash, chunk, NULL, 0);
        sb_printf(b, "\"%s\":\"%016llx\"", TG_ST_CHECKSUM_KEY, (unsigned long long)h);
    }
    sb_str(b, "}");
    uint64_t off = 0;
    for (int j = 0; j < n; j++) {
        uint64_t bytes = tg_st_dtype_size(t[j].dtype);
        for (int d = 0; d < t[j].ndim; d++) bytes *= (uint64_t)t[j].shape[d];
        sb_str(b, ",");
        sb_json(b, t[j].name);
        sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", tg_st_dtype_name(t[j].dtype));
        for (int d = 0; d < t[j].ndim; d++) sb_printf(b, "%s%lld", d ? "," : "", (long long)t[j].shape[d]);
        sb_printf(b, "],\"data_offsets\":[%llu,", (unsigned long long)off);
        sb_printf(b, "%llu]}", (unsigned long long)(off + bytes));
        off += bytes;
    }
    sb_str(b, "}");
    while (b->len % 8) sb_str(b, " ");   /* the data section starts 8-aligned */
    if (b->oom) return tg_errf(err, errlen, "%s: out of memory", who);
    return 0;
}

int tg_st_write(const char *path, const tg_st_tensor *t, int n, const tg_st_kv *meta, int n_meta,
                char *err, size_t errlen) {
    char who[300];
    snprintf(who, sizeof who, "tg_st_write %s", path);
    unsigned char *chunk = malloc(CHUNK);
    if (!chunk) return tg_errf(err, errlen, "%s: out of memory", who);
    sbuf b = {0};
    uint64_t total;
    if (build_header(who, t, n, meta, n_meta, 1, &b, &total, chunk, err, errlen)) {
        free(chunk);
        free(b.s);
        return -1;
    }
    /* atomically (tg_file.h): a non-regular target refused, a temporary file
     * beside it fsynced and renamed over it, the folder fsynced */
    unsigned char len8[8];
    put_u64(len8, b.len);
    tg_file out;
    int rc = tg_file_begin(&out, path, err, errlen);
    sink to_file = {.file = &out};
    if (!rc)
        rc = tg_file_write(&out, len8, 8, err, errlen) || tg_file_write(&out, b.s, b.len, err, errlen) ||
                     stream_data(t, n, &to_file, chunk, err, errlen)
                 ? (tg_file_abort(&out), -1)
                 : tg_file_commit(&out, 0, err, errlen);
    free(chunk);
    free(b.s);
    return rc;
}

int tg_st_encode_to(const tg_st_tensor *t, int n, const tg_st_kv *meta, int n_meta, int checksum, unsigned char **buf,
                    size_t *cap, size_t *len, char *err, size_t errlen) {
    *len = 0;
    unsigned char *chunk = malloc(CHUNK);
    if (!chunk) return tg_errf(err, errlen, "tg_st_encode: out of memory");
    sbuf b = {0};
    uint64_t total;
    int rc = build_header("tg_st_encode", t, n, meta, n_meta, checksum, &b, &total, chunk, err, errlen);
    if (!rc && total > SIZE_MAX - 8 - b.len)
        rc = tg_errf(err, errlen, "tg_st_encode: %llu bytes do not fit in memory", (unsigned long long)total);
    const size_t need = rc ? 0 : 8 + b.len + (size_t)total;
    if (!rc && need > *cap) {
        unsigned char *grown = realloc(*buf, need);
        if (!grown) rc = tg_errf(err, errlen, "tg_st_encode: out of memory for %zu bytes", need);
        else *buf = grown, *cap = need;
    }
    if (!rc) {
        put_u64(*buf, b.len);
        memcpy(*buf + 8, b.s, b.len);
        sink to_mem = {.mem = *buf + 8 + b.len};
        stream_data(t, n, &to_mem, chunk, NULL, 0);
        *len = need;
    }
    free(chunk);
    free(b.s);
    return rc;
}

int tg_st_encode(const tg_st_tensor *t, int n, const tg_st_kv *meta, int n_meta, unsigned char **bytes, size_t *len,
                 char *err, size_t errlen) {
    size_t cap = 0;
    *bytes = NULL;
    if (tg_st_encode_to(t, n, meta, n_meta, 1, bytes, &cap, len, err, errlen)) {
        free(*bytes);
        *bytes = NULL;
        *len = 0;
        return -1;
    }
    return 0;
}

/* ---- a strict JSON reader for the header --------------------------------- */
typedef struct {
    const char *p, *start, *end;
    char *err;
    size_t errlen;
} jp;

static int jfail(jp *j, const char *what) {
    return tg_errf(j->err, j->errlen, "header JSON: %s at byte %ld", what, (long)(j->p - j->start));
}
static void jws(jp *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}
static int jexpect(jp *j, char c) {
    jws(j);
    if (j->p >= j->end || *j->p != c) {
        char what[32];
        snprintf(what, sizeof what, "expected '%c'", c);
        return jfail(j, what);
    }
    j->p++;
    return 0;
}
static int jpeek(jp *j, char c) {
    jws(j);
    return j->p < j->end && *j->p == c;
}

static int hex4(const char *p, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        if (d > 15) return -1;
        *v = *v * 16 + d;
    }
    return 0;
}

/* A string into a new NUL-terminated buffer (*out, caller frees). Escapes are
 * decoded to UTF-8; raw bytes must be valid UTF-8; \u0000 is refused (names
 * are C strings). */
static int jstring(jp *j, char **out) {
    *out = NULL;
    if (jexpect(j, '"')) return -1;
    const char *s = j->p;
    size_t max = 0;
    while (s < j->end && *s != '"') {   /* each unit decodes to at most one byte */
        if (*s == '\\' && s + 1 < j->end) s++;
        s++;
        max++;
    }
    if (s >= j->end) return jfail(j, "unterminated string");
    char *o = malloc(max + 1), *w = o;
    if (!o) return jfail(j, "out of memory");
    while (*j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20) goto bad_control;
        if (c != '\\') {
            size_t l = utf8_len((const unsigned char *)j->p, (size_t)(j->end - j->p));
            if (!l) goto bad_utf8;
            memcpy(w, j->p, l);
            w += l;
            j->p += l;
            continue;
        }
        j->p++;
        char e = *j->p++;
        switch (e) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            unsigned u, lo;
            if (j->end - j->p < 4 || hex4(j->p, &u)) goto bad_escape;
            j->p += 4;
            if (u >= 0xdc00 && u <= 0xdfff) goto bad_escape;
            if (u >= 0xd800 && u <= 0xdbff) {   /* a surrogate pair */
                if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, &lo) ||
                    lo < 0xdc00 || lo > 0xdfff)
                    goto bad_escape;
                j->p += 6;
                u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (u == 0) {
                free(o);
                return jfail(j, "\\u0000 in a string");
            }
            if (u < 0x80) *w++ = (char)u;
            else if (u < 0x800) {
                *w++ = (char)(0xc0 | u >> 6);
                *w++ = (char)(0x80 | (u & 0x3f));
            } else if (u < 0x10000) {
                *w++ = (char)(0xe0 | u >> 12);
                *w++ = (char)(0x80 | (u >> 6 & 0x3f));
                *w++ = (char)(0x80 | (u & 0x3f));
            } else {
                *w++ = (char)(0xf0 | u >> 18);
                *w++ = (char)(0x80 | (u >> 12 & 0x3f));
                *w++ = (char)(0x80 | (u >> 6 & 0x3f));
                *w++ = (char)(0x80 | (u & 0x3f));
            }
            break;
        }
        default: goto bad_escape;
        }
    }
    j->p++;
    *w = 0;
    *out = o;
    return 0;
bad_control:
    free(o);
    return jfail(j, "control character in a string");
bad_utf8:
    free(o);
    return jfail(j, "invalid UTF-8 in a string");
bad_escape:
    free(o);
    return jfail(j, "bad escape in a string");
}

/* A non-negative integer that fits in 63 bits. */
static int juint(jp *j, uint64_t *v) {
    jws(j);
    const char *s = j->p;
    *v = 0;
    if (j->p < j->end && *j->p == '-') return jfail(j, "negative number");
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        unsigned d = (unsigned)(*j->p - '0');
        if (*v > ((uint64_t)INT64_MAX - d) / 10) return jfail(j, "number too large");
        *v = *v * 10 + d;
        j->p++;
    }
    if (j->p == s) return jfail(j, "expected a non-negative integer");
    if (j->p - s > 1 && *s == '0') return jfail(j, "leading zero in a number");
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E')) return jfail(j, "expected an integer");
    return 0;
}

/* [u, u, ...] with at most max entries; returns the count in *n, -2 if there
 * are more. */
static int juint_array(jp *j, uint64_t *v, int max, int *n) {
    *n = 0;
    if (jexpect(j, '[')) return -1;
    if (jpeek(j, ']')) {
        j->p++;
        return 0;
    }
    for (;;) {
        if (*n == max) return jfail(j, "too many entries in an array"), -2;
        if (juint(j, &v[(*n)++])) return -1;
        if (jpeek(j, ',')) {
            j->p++;
            continue;
        }
        return jexpect(j, ']');
    }
}

static void file_clear(tg_st_file *f) {
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    for (int i = 0; i < f->n_meta; i++) {
        free((char *)f->meta[i].key);
        free((char *)f->meta[i].value);
    }
    free(f->t);
    free(f->meta);
    if (!f->borrowed) free(f->buf);
    memset(f, 0, sizeof *f);
}
void tg_st_free(tg_st_file *f) { file_clear(f); }

static int parse_metadata(jp *j, tg_st_file *f) {
    if (f->meta) return jfail(j, "\"__metadata__\" twice");
    if (jexpect(j, '{')) return -1;
    int cap = 0;
    if (jpeek(j, '}')) {
        j->p++;
        f->meta = malloc(1);   /* non-NULL: seen */
        return f->meta ? 0 : jfail(j, "out of memory");
    }
    for (;;) {
        char *k, *v;
        if (jstring(j, &k)) return -1;
        if (jexpect(j, ':')) {
            free(k);
            return -1;
        }
        if (!jpeek(j, '"')) {
            free(k);
            return jfail(j, "metadata values must be strings");
        }
        if (jstring(j, &v)) {
            free(k);
            return -1;
        }
        for (int i = 0; i < f->n_meta; i++)
            if (strcmp(f->meta[i].key, k) == 0) {
                free(k);
                free(v);
                return jfail(j, "a metadata key appears twice");
            }
        if (f->n_meta == cap) {
            cap = cap ? 2 * cap : 16;
            tg_st_kv *m = realloc(f->meta, (size_t)cap * sizeof *m);
            if (!m) {
                free(k);
                free(v);
                return jfail(j, "out of memory");
            }
            f->meta = m;
        }
        f->meta[f->n_meta].key = k;
        f->meta[f->n_meta++].value = v;
        if (jpeek(j, ',')) {
            j->p++;
            continue;
        }
        return jexpect(j, '}');
    }
}

static int parse_tensor(jp *j, tg_st_entry *e) {
    int have_dtype = 0, have_shape = 0, have_off = 0;
    if (jexpect(j, '{')) return -1;
    if (jpeek(j, '}')) return tg_errf(j->err, j->errlen, "tensor '%s': no dtype, shape or data_offsets", e->name);
    for (;;) {
        char *k;
        if (jstring(j, &k)) return -1;
        if (jexpect(j, ':')) {
            free(k);
            return -1;
        }
        if (strcmp(k, "dtype") == 0 && !have_dtype) {
            char *d;
            if (jstring(j, &d)) {
                free(k);
                return -1;
            }
            int found = -1;
            for (int i = 0; i < TG_ST_NDTYPES; i++)
                if (strcmp(dtypes[i].name, d) == 0) found = i;
            if (found < 0) {
                tg_errf(j->err, j->errlen, "tensor '%s': unknown dtype '%.32s'", e->name, d);
                free(d);
                free(k);
                return -1;
            }
            free(d);
            e->dtype = (tg_st_dtype)found;
            have_dtype = 1;
        } else if (strcmp(k, "shape") == 0 && !have_shape) {
            uint64_t s[TG_ST_MAX_DIMS];
            int rc = juint_array(j, s, TG_ST_MAX_DIMS, &e->ndim);
            if (rc) {
                if (rc == -2)
                    tg_errf(j->err, j->errlen, "tensor '%s': shape has more than %d dimensions", e->name, TG_ST_MAX_DIMS);
                free(k);
                return -1;
            }
            for (int d = 0; d < e->ndim; d++) e->shape[d] = (int64_t)s[d];
            have_shape = 1;
        } else if (strcmp(k, "data_offsets") == 0 && !have_off) {
            uint64_t o[2];
            int no, rc = juint_array(j, o, 2, &no);
            if (rc || no != 2) {
                if (rc != -1) tg_errf(j->err, j->errlen, "tensor '%s': data_offsets needs 2 numbers", e->name);
                free(k);
                return -1;
            }
            e->begin = (size_t)o[0];
            e->end = (size_t)o[1];
            have_off = 1;
        } else {
            int dup = !strcmp(k, "dtype") || !strcmp(k, "shape") || !strcmp(k, "data_offsets");
            tg_errf(j->err, j->errlen, "tensor '%s': %s field '%.32s'", e->name, dup ? "repeated" : "unknown", k);
            free(k);
            return -1;
        }
        free(k);
        if (jpeek(j, ',')) {
            j->p++;
            continue;
        }
        if (jexpect(j, '}')) return -1;
        break;
    }
    if (!have_dtype || !have_shape || !have_off)
        return tg_errf(j->err, j->errlen, "tensor '%s': missing %s", e->name,
                    !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    return 0;
}

static int by_begin(const void *a, const void *b) {
    const tg_st_entry *x = *(tg_st_entry *const *)a, *y = *(tg_st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Shapes against offsets, offsets inside the data, and the tiling. */
static int check_layout(tg_st_file *f, char *err, size_t errlen) {
    for (int i = 0; i < f->n; i++) {
        tg_st_entry *e = &f->t[i];
        uint64_t numel = 1;
        int overflow = 0;
        for (int d = 0; d < e->ndim; d++) {
            uint64_t s = (uint64_t)e->shape[d];
            if (s && numel > (UINT64_MAX >> 4) / s) overflow = 1;
            else numel *= s;
        }
        uint64_t esz = tg_st_dtype_size(e->dtype);
        if (overflow || numel > (UINT64_MAX >> 4) / esz)
            return tg_errf(err, errlen, "tensor '%s': shape too large", e->name);
        if (e->begin > e->end)
            return tg_errf(err, errlen, "tensor '%s': data_offsets [%zu, %zu] end before they begin", e->name,
                        e->begin, e->end);
        if (e->end > f->data_size)
            return tg_errf(err, errlen, "tensor '%s': data_offsets [%zu, %zu] go past the data section (%zu bytes)",
                        e->name, e->begin, e->end, f->data_size);
        if (numel * esz != e->end - e->begin)
            return tg_errf(err, errlen, "tensor '%s': %llu elements of %s need %llu bytes, data_offsets give %zu",
                        e->name, (unsigned long long)numel, dtypes[e->dtype].name,
                        (unsigned long long)(numel * esz), e->end - e->begin);
        e->numel = (int64_t)numel;
        e->bytes = f->data + e->begin;
    }
    tg_st_entry **order = malloc((f->n > 0 ? (size_t)f->n : 1) * sizeof *order);
    if (!order) return tg_errf(err, errlen, "out of memory");
    for (int i = 0; i < f->n; i++) order[i] = &f->t[i];
    qsort(order, (size_t)f->n, sizeof *order, by_begin);
    size_t at = 0;
    for (int i = 0; i < f->n; i++) {
        if (order[i]->begin != at) {
            int gap = order[i]->begin > at;
            tg_errf(err, errlen, "tensor '%s': data_offsets begin at %zu, %s", order[i]->name, order[i]->begin,
                 gap ? "leaving a gap before it" : "overlapping the tensor before it");
            free(order);
            return -1;
        }
        at = order[i]->end;
    }
    free(order);
    if (at != f->data_size)
        return tg_errf(err, errlen, "the tensors cover %zu bytes of a %zu-byte data section", at, f->data_size);
    return 0;
}

static int parse_owned(tg_st_file *f, char *err, size_t errlen) {
    if (f->size < 8) return tg_errf(err, errlen, "%zu bytes: too short for a safetensors file", f->size);
    uint64_t hn = get_u64(f->buf);
    if (hn > MAX_HEADER || hn > f->size - 8)
        return tg_errf(err, errlen, "header size %llu does not fit the %zu-byte file", (unsigned long long)hn, f->size);
    if (hn < 2) return tg_errf(err, errlen, "header size %llu: too short", (unsigned long long)hn);
    f->data = f->buf + 8 + hn;
    f->data_size = f->size - 8 - (size_t)hn;
    jp j = {(const char *)f->buf + 8, (const char *)f->buf + 8, (const char *)f->buf + 8 + hn, err, errlen};
    if (*j.p != '{') return jfail(&j, "the header must start with '{'");
    j.p++;
    int cap = 0;
    if (jpeek(&j, '}')) j.p++;
    else
        for (;;) {
            char *name;
            if (jstring(&j, &name)) return -1;
            if (jexpect(&j, ':')) {
                free(name);
                return -1;
            }
            if (strcmp(name, "__metadata__") == 0) {
                free(name);
                if (parse_metadata(&j, f)) return -1;
            } else {
                for (int i = 0; i < f->n; i++)
                    if (strcmp(f->t[i].name, name) == 0) {
                        tg_errf(err, errlen, "tensor '%s' appears twice", name);
                        free(name);
                        return -1;
                    }
                if (!*name) {
                    free(name);
                    return jfail(&j, "a tensor with an empty name");
                }
                if (f->n == cap) {
                    cap = cap ? 2 * cap : 16;
                    tg_st_entry *t = realloc(f->t, (size_t)cap * sizeof *t);
                    if (!t) {
                        free(name);
                        return jfail(&j, "out of memory");
                    }
                    f->t = t;
                }
                tg_st_entry *e = &f->t[f->n++];
                memset(e, 0, sizeof *e);
                e->name = name;
                if (parse_tensor(&j, e)) return -1;
            }
            if (jpeek(&j, ',')) {
                j.p++;
                continue;
            }
            if (jexpect(&j, '}')) return -1;
            break;
        }
    jws(&j);
    if (j.p != j.end) return jfail(&j, "trailing bytes after the header object");
    if (f->meta && f->n_meta == 0) {   /* the placeholder of an empty "__metadata__" */
        free(f->meta);
        f->meta = NULL;
    }
    if (check_layout(f, err, errlen)) return -1;
    const char *sum = tg_st_meta(f, TG_ST_CHECKSUM_KEY);
    if (sum) {
        uint64_t want = 0;
        size_t len = strlen(sum);
        for (size_t i = 0; i < len && len == 16; i++) {
            unsigned v;
            char h4[4] = {'0', '0', '0', sum[i]};
            if (hex4(h4, &v)) len = 0;
            want = want << 4 | v;
        }
        if (len != 16) return tg_errf(err, errlen, "metadata %s '%.20s' is not 16 hex digits", TG_ST_CHECKSUM_KEY, sum);
        uint64_t got = tg_fnv1a64(TG_FNV1A64_INIT, f->data, f->data_size);
        if (got != want)
            return tg_errf(err, errlen, "checksum mismatch: the data section hashes to %016llx, the header says %s "
                        "(the file is damaged)", (unsigned long long)got, sum);
        f->has_checksum = 1;
    }
    return 0;
}

int tg_st_parse(const void *bytes, size_t size, tg_st_file *f, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    f->buf = malloc(size ? size : 1);
    if (!f->buf) return tg_errf(err, errlen, "out of memory for %zu bytes", size);
    if (size) memcpy(f->buf, bytes, size);
    f->size = size;
    if (parse_owned(f, err, errlen)) {
        file_clear(f);
        return -1;
    }
    return 0;
}

int tg_st_parse_view(const void *bytes, size_t size, tg_st_file *f, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    f->buf = (unsigned char *)bytes;   /* read only: the parse never writes into buf */
    f->size = size;
    f->borrowed = 1;
    if (parse_owned(f, err, errlen)) {
        file_clear(f);
        return -1;
    }
    return 0;
}

int tg_st_read(const char *path, tg_st_file *f, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    char why[600];
    int fd = tg_file_open_read(path, why, sizeof why);   /* a FIFO is refused, not waited on */
    if (fd < 0 && errno == EINVAL) return tg_errf(err, errlen, "%s", why);
    if (fd < 0) return tg_errf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        int e = errno;
        close(fd);
        return tg_errf(err, errlen, "%s: cannot stat (%s)", path, strerror(e));
    }
    size_t size = (size_t)st.st_size;
    f->buf = malloc(size ? size : 1);
    if (!f->buf) {
        close(fd);
        return tg_errf(err, errlen, "%s: out of memory for %zu bytes", path, size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t k = read(fd, f->buf + got, size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (got != size) {
        file_clear(f);
        return tg_errf(err, errlen, "%s: short read (%zu of %zu bytes)", path, got, size);
    }
    f->size = size;
    if (parse_owned(f, err, errlen)) {
        /* prefix the path, keeping the parser's message */
        if (err && errlen) {
            char *msg = strdup(err);
            if (msg) {
                snprintf(err, errlen, "%s: %s", path, msg);
                free(msg);
            }
        }
        file_clear(f);
        return -1;
    }
    return 0;
}

const tg_st_entry *tg_st_find(const tg_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

const char *tg_st_meta(const tg_st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}
