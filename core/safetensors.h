/* safetensors files: named tensors + string metadata, readable by standard tools.
 *
 * Layout: 8 bytes, little-endian u64 N; N bytes of JSON header, padded with
 * spaces to a multiple of 8; then the data section. The header maps each tensor
 * name to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (offsets
 * into the data section) and "__metadata__" to an object of string values.
 * Tensor data is raw little-endian, whatever the host: values are converted
 * byte by byte, so a big-endian host reads and writes the same files.
 *
 * tapegrad adds one metadata key, "checksum_fnv1a64": FNV-1a 64 of the data
 * section, 16 hex digits. The reader verifies it when present and says whether
 * it was (`has_checksum`), so a caller can demand it.
 *
 * A file is input, not a program's misuse: every failure is a message in the
 * caller's `err` buffer and a non-zero return, never an abort. The reader
 * trusts no size or offset in the file; it is what the fuzzer hits. */
#ifndef TG_SAFETENSORS_H
#define TG_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

#include "tg_core.h"   /* tg_fnv1a64, the checksum's hash */

#define TG_ST_MAX_DIMS 8
#define TG_ST_CHECKSUM_KEY "checksum_fnv1a64"

/* Every dtype of the format, so any file can be validated; only F32, F64 and
 * I64 have typed accessors. */
typedef enum {
    TG_ST_BOOL, TG_ST_U8, TG_ST_I8, TG_ST_F8_E5M2, TG_ST_F8_E4M3, TG_ST_I16, TG_ST_U16,
    TG_ST_F16, TG_ST_BF16, TG_ST_I32, TG_ST_U32, TG_ST_F32, TG_ST_F64, TG_ST_I64, TG_ST_U64,
    TG_ST_NDTYPES
} tg_st_dtype;
const char *tg_st_dtype_name(tg_st_dtype d);
size_t tg_st_dtype_size(tg_st_dtype d);

/* ---- writing -------------------------------------------------------------- */
typedef struct {
    const char *name;        /* UTF-8, unique, not "__metadata__" */
    tg_st_dtype dtype;       /* TG_ST_F32, TG_ST_F64, TG_ST_I64, or (since 0.21) TG_ST_BF16, TG_ST_F16 */
    int ndim;                /* 0..TG_ST_MAX_DIMS */
    int64_t shape[TG_ST_MAX_DIMS];
    const void *data;        /* host-order values (float, double, int64_t; uint16_t bits for BF16, F16) */
} tg_st_tensor;

typedef struct { const char *key, *value; } tg_st_kv;   /* UTF-8 strings */

/* Writes atomically: a temporary file in the same folder, fsync, rename over
 * `path`, fsync of the folder. On failure `path` is untouched and no temporary
 * file is left. Returns 0, or -1 with a message in err. */
int tg_st_write(const char *path, const tg_st_tensor *t, int n, const tg_st_kv *meta, int n_meta,
                char *err, size_t errlen);

/* The same file's bytes in memory (a message, a frame's body): *bytes (malloced,
 * the caller frees) and *len, the checksum in its metadata as tg_st_write's.
 * 0, or -1 with a message in err (*bytes NULL). */
int tg_st_encode(const tg_st_tensor *t, int n, const tg_st_kv *meta, int n_meta, unsigned char **bytes, size_t *len,
                 char *err, size_t errlen);
/* The same into a buffer the caller keeps (*buf malloced or NULL, *cap its
 * size; grown with realloc when short), so that a stream of messages allocates
 * once; checksum 0 leaves the checksum out (a message checked otherwise: a pipe
 * loses no byte silently). *len: the bytes written. 0, or -1 with err (*buf,
 * *cap still the caller's to free). */
int tg_st_encode_to(const tg_st_tensor *t, int n, const tg_st_kv *meta, int n_meta, int checksum, unsigned char **buf,
                    size_t *cap, size_t *len, char *err, size_t errlen);

/* ---- reading -------------------------------------------------------------- */
typedef struct {
    char *name;
    tg_st_dtype dtype;
    int ndim;
    int64_t shape[TG_ST_MAX_DIMS];
    int64_t numel;
    size_t begin, end;       /* validated offsets into the data section */
    const unsigned char *bytes;  /* data + begin, little-endian */
} tg_st_entry;

typedef struct {
    unsigned char *buf;      /* the whole file (owned, unless borrowed) */
    size_t size;
    const unsigned char *data;   /* the data section, inside buf */
    size_t data_size;
    tg_st_entry *t;          /* in file order of the header */
    int n;
    tg_st_kv *meta;          /* owned strings */
    int n_meta;
    int has_checksum;        /* 1: the checksum was there and matched */
    int borrowed;            /* 1: buf is the caller's (tg_st_parse_view) */
} tg_st_file;

/* Parses and validates a whole file: header size, JSON syntax, UTF-8 strings,
 * unique names, known dtypes, shapes (numel × size = end − begin, no
 * overflow), offsets inside the data section, tensors tiling it without gap or
 * overlap, and the checksum if present. tg_st_parse copies the bytes. On error
 * *f is left empty (tg_st_free is still safe). */
int tg_st_read(const char *path, tg_st_file *f, char *err, size_t errlen);
int tg_st_parse(const void *bytes, size_t size, tg_st_file *f, char *err, size_t errlen);
/* The same without the copy: f reads bytes, which must outlive f and not change
 * while f is used (tg_st_free frees only f's index). */
int tg_st_parse_view(const void *bytes, size_t size, tg_st_file *f, char *err, size_t errlen);
void tg_st_free(tg_st_file *f);

const tg_st_entry *tg_st_find(const tg_st_file *f, const char *name);
const char *tg_st_meta(const tg_st_file *f, const char *key);   /* NULL if absent */
/* Copies an entry's values in host order; the entry must have that dtype (tg_st_get_f32 also
 * takes BF16 and F16, widened exactly: tg_precision.h). */
void tg_st_get_f32(const tg_st_entry *e, float *out);
void tg_st_get_f64(const tg_st_entry *e, double *out);
void tg_st_get_i64(const tg_st_entry *e, int64_t *out);

#endif
