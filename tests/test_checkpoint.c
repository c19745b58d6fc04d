/* Runs that survive, piece by piece: the safetensors writer and reader (every
 * kind of damage gets a message naming the tensor and the problem), the
 * training-state checkpoint (bit-exact round trip, refusals that leave the
 * state untouched), the run log's resume, the non-finite diagnosis, and the
 * cross-flag checks of attn_scale. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <cblas.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn_cfg.h"
#include "tg_checkpoint.h"
#include "tg_guard.h"
#include "tg_runlog.h"
#include "safetensors.h"
#include "tg_tasks.h"

static char dir[256];

static int setup_dir(void **s) {
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/tg_ckpt_test.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown_dir(void **s) {
    (void)s;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
    return 0;
}

static const char *path_of(const char *name) {
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* Files in the test folder whose name starts with '.': leftover temporaries. */
static int dot_files(void) {
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    b[*n] = 0;
    return b;
}

#define EXPECT_MSG(err, want)                                                    \
    do {                                                                         \
        if (!strstr((err), (want))) {                                            \
            print_error("message '%s' lacks '%s'\n", (err), (want));             \
            fail();                                                              \
        }                                                                        \
    } while (0)

/* ---- safetensors ----------------------------------------------------------- */
static void test_st_roundtrip(void **s) {
    (void)s;
    float a[6] = {1.5f, -2.0f, 0.0f, -0.0f, 3.4e38f, 1e-45f};
    double b[2] = {0.1, -1e300};
    int64_t c = -1234567890123LL;
    tg_st_tensor t[] = {
        {.name = "a", .dtype = TG_ST_F32, .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "b \"quoted\" \\ é", .dtype = TG_ST_F64, .ndim = 1, .shape = {2}, .data = b},
        {.name = "scalar", .dtype = TG_ST_I64, .ndim = 0, .data = &c},
        {.name = "empty", .dtype = TG_ST_F32, .ndim = 2, .shape = {0, 5}, .data = NULL},
    };
    tg_st_kv meta[] = {{"k", "line\nbreak\ttab \"q\" ∑"}, {"x", ""}};
    char err[256];
    const char *p = path_of("rt.safetensors");
    assert_int_equal(tg_st_write(p, t, 4, meta, 2, err, sizeof err), 0);
    assert_int_equal(dot_files(), 0);

    size_t n;
    unsigned char *raw = slurp(p, &n);
    uint64_t hn = 0;
    for (int i = 0; i < 8; i++) hn |= (uint64_t)raw[i] << (8 * i);
    assert_int_equal(hn % 8, 0);                       /* data 8-aligned */
    assert_int_equal(raw[8], '{');
    assert_int_equal(n, 8 + hn + 24 + 16 + 8);         /* little-endian, packed */
    assert_memory_equal(raw + 8 + hn, "\x00\x00\xc0\x3f", 4);   /* 1.5f */
    free(raw);

    tg_st_file f;
    assert_int_equal(tg_st_read(p, &f, err, sizeof err), 0);
    assert_int_equal(f.n, 4);
    assert_true(f.has_checksum);
    assert_string_equal(tg_st_meta(&f, "k"), "line\nbreak\ttab \"q\" ∑");
    assert_string_equal(tg_st_meta(&f, "x"), "");
    const tg_st_entry *e = tg_st_find(&f, "a");
    assert_non_null(e);
    assert_int_equal(e->ndim, 2);
    assert_int_equal(e->shape[1], 3);
    float a2[6];
    tg_st_get_f32(e, a2);
    assert_memory_equal(a, a2, sizeof a);               /* bit-exact, -0 and denormals too */
    double b2[2];
    e = tg_st_find(&f, "b \"quoted\" \\ é");
    assert_non_null(e);
    tg_st_get_f64(e, b2);
    assert_memory_equal(b, b2, sizeof b);
    int64_t c2;
    e = tg_st_find(&f, "scalar");
    assert_int_equal(e->ndim, 0);
    assert_int_equal(e->numel, 1);
    tg_st_get_i64(e, &c2);
    assert_true(c2 == c);
    e = tg_st_find(&f, "empty");
    assert_int_equal(e->numel, 0);
    tg_st_free(&f);

    /* in memory: the file's bytes exactly, parsed back; refusals the same, named tg_st_encode */
    unsigned char *mem;
    size_t mlen;
    assert_int_equal(tg_st_encode(t, 4, meta, 2, &mem, &mlen, err, sizeof err), 0);
    raw = slurp(p, &n);
    assert_int_equal(mlen, n);
    assert_memory_equal(mem, raw, n);
    free(raw);
    assert_int_equal(tg_st_parse(mem, mlen, &f, err, sizeof err), 0);
    assert_true(f.has_checksum);
    assert_int_equal(f.n, 4);
    tg_st_free(&f);
    free(mem);
    tg_st_tensor twice[] = {t[0], t[0]};
    assert_int_equal(tg_st_encode(twice, 2, NULL, 0, &mem, &mlen, err, sizeof err), -1);
    assert_null(mem);
    EXPECT_MSG(err, "tg_st_encode: two tensors named 'a'");

    /* into a buffer kept from message to message (the exec protocol's frames): with the checksum the
     * same bytes; without it, the same tensors and no checksum key; a message that fits reuses the
     * buffer; tg_st_parse_view reads the bytes where they are */
    unsigned char *buf = NULL;
    size_t cap = 0, blen = 0;
    assert_int_equal(tg_st_encode_to(t, 4, meta, 2, 1, &buf, &cap, &blen, err, sizeof err), 0);
    raw = slurp(p, &n);
    assert_int_equal(blen, n);
    assert_memory_equal(buf, raw, n);
    free(raw);
    const size_t cap_was = cap;
    unsigned char *const buf_was = buf;
    assert_int_equal(tg_st_encode_to(t, 4, meta, 2, 0, &buf, &cap, &blen, err, sizeof err), 0);
    assert_true(blen < n);
    assert_true(cap == cap_was && buf == buf_was);
    const size_t klen = strlen(TG_ST_CHECKSUM_KEY);
    for (size_t i = 0; i + klen <= blen; i++)
        if (!memcmp(buf + i, TG_ST_CHECKSUM_KEY, klen)) fail_msg("the checksum key at byte %zu", i);
    assert_int_equal(tg_st_parse_view(buf, blen, &f, err, sizeof err), 0);
    assert_false(f.has_checksum);
    assert_int_equal(f.n, 4);
    assert_string_equal(tg_st_meta(&f, meta[1].key), meta[1].value);
    e = tg_st_find(&f, t[0].name);
    assert_true(e->bytes >= buf && e->bytes < buf + blen);   /* a view, not a copy */
    float got[8];
    assert_true(e->numel <= 8);
    tg_st_get_f32(e, got);
    assert_memory_equal(got, t[0].data, (size_t)e->numel * sizeof(float));
    unsigned char head16[16];
    memcpy(head16, buf, 16);
    tg_st_free(&f);
    assert_memory_equal(buf, head16, 16);   /* tg_st_free left the caller's bytes alone */
    assert_int_equal(tg_st_encode_to(twice, 2, NULL, 0, 0, &buf, &cap, &blen, err, sizeof err), -1);
    EXPECT_MSG(err, "tg_st_encode: two tensors named 'a'");
    free(buf);

    /* a failed write leaves the old file as it was, and no temporary */
    raw = slurp(p, &n);
    tg_st_tensor dup[] = {t[0], t[0]};
    assert_int_not_equal(tg_st_write(p, dup, 2, NULL, 0, err, sizeof err), 0);
    EXPECT_MSG(err, "two tensors named 'a'");
    tg_st_kv reserved[] = {{TG_ST_CHECKSUM_KEY, "0"}};
    assert_int_not_equal(tg_st_write(p, t, 1, reserved, 1, err, sizeof err), 0);
    EXPECT_MSG(err, "reserved");
    size_t n2;
    unsigned char *raw2 = slurp(p, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(raw, raw2, n);
    free(raw);
    free(raw2);
    assert_int_not_equal(tg_st_write(path_of("no/such/dir/x.st"), t, 1, NULL, 0, err, sizeof err), 0);
    EXPECT_MSG(err, "cannot create a temporary file");
    assert_int_equal(dot_files(), 0);
}

/* A file from a JSON header text and data bytes, padded as the format wants. */
static unsigned char *make(const char *json, const void *data, size_t nd, size_t *n) {
    size_t hl = strlen(json), padded = (hl + 7) / 8 * 8;
    *n = 8 + padded + nd;
    unsigned char *b = malloc(*n);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(b + 8, json, hl);
    memset(b + 8 + hl, ' ', padded - hl);
    if (nd) memcpy(b + 8 + padded, data, nd);
    return b;
}

static void test_st_rejects(void **s) {
    (void)s;
    static const unsigned char zeros[64];
    struct { const char *json; size_t nd; const char *msg; } bad[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", 12,
         "tensor 'a': 2 elements of F32 need 8 bytes, data_offsets give 12"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
         "tensor 'a': data_offsets [0, 16] go past the data section (8 bytes)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, "end before they begin"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[8,12]}}", 12, "tensor 'b': data_offsets begin at 8, leaving a gap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
         "\"data_offsets\":[4,12]}}", 12, "tensor 'b': data_offsets begin at 4, overlapping"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 16, "cover 4 bytes of a 16-byte"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[4,8]}}", 8, "tensor 'a' appears twice"},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'a': unknown dtype 'F33'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "negative number"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "expected an integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "tensor 'a': unknown field 'x'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "tensor 'a': missing data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "data_offsets needs 2 numbers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "more than 8 dimensions"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
         "shape too large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4, "number too large"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "metadata values must be strings"},
        {"{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, "a metadata key appears twice"},
        {"{\"__metadata__\":{\"" TG_ST_CHECKSUM_KEY "\":\"xyz\"}}", 0, "is not 16 hex digits"},
        {"{\"__metadata__\":{\"" TG_ST_CHECKSUM_KEY "\":\"0000000000000000\"}}", 0, "checksum mismatch"},
        {"{\"a\\u0000b\":{}}", 0, "\\u0000 in a string"},
        {"{\"\xff\":{}}", 0, "invalid UTF-8"},
        {"{\"\xed\xa0\x80\":{}}", 0, "invalid UTF-8"},   /* an encoded surrogate */
        {"{\"\\ud800x\":{}}", 0, "bad escape"},
        {"{\"a\":{},}", 0, "tensor 'a': no dtype"},
        {"{\"a\" {}}", 0, "header JSON: expected ':'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4, "trailing bytes"},
        {"[]", 0, "must start with '{'"},
        {"{\"abc", 0, "unterminated string"},
    };
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n;
        unsigned char *b = make(bad[i].json, zeros, bad[i].nd, &n);
        tg_st_file f;
        err[0] = 0;
        if (tg_st_parse(b, n, &f, err, sizeof err) == 0) {
            print_error("case %zu (%s) was accepted\n", i, bad[i].json);
            fail();
        }
        EXPECT_MSG(err, bad[i].msg);
        assert_int_equal(f.n, 0);   /* nothing half-built */
        tg_st_free(&f);
        free(b);
    }
    /* the size field */
    unsigned char small[8] = {0};
    tg_st_file f;
    assert_int_not_equal(tg_st_parse(small, 5, &f, err, sizeof err), 0);
    EXPECT_MSG(err, "too short");
    small[7] = 1;   /* 2^56 header bytes */
    assert_int_not_equal(tg_st_parse(small, 8, &f, err, sizeof err), 0);
    EXPECT_MSG(err, "does not fit");
    /* a valid file: no metadata, other dtypes, surrogate pairs, escapes */
    size_t n;
    unsigned char *b = make("{\"\\ud83d\\ude00\\n\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                            "\"__metadata__\":{}}", zeros, 4, &n);
    assert_int_equal(tg_st_parse(b, n, &f, err, sizeof err), 0);
    assert_non_null(tg_st_find(&f, "\xf0\x9f\x98\x80\n"));
    assert_false(f.has_checksum);
    tg_st_free(&f);
    free(b);
    /* a damaged data byte of a written file */
    float x[4] = {1, 2, 3, 4};
    tg_st_tensor t = {.name = "x", .dtype = TG_ST_F32, .ndim = 1, .shape = {4}, .data = x};
    assert_int_equal(tg_st_write(path_of("d.st"), &t, 1, NULL, 0, err, sizeof err), 0);
    b = slurp(path_of("d.st"), &n);
    b[n - 3] ^= 1;
    assert_int_not_equal(tg_st_parse(b, n, &f, err, sizeof err), 0);
    EXPECT_MSG(err, "checksum mismatch");
    assert_int_not_equal(tg_st_parse(b, n - 4, &f, err, sizeof err), 0);   /* truncated */
    EXPECT_MSG(err, "tensor 'x': data_offsets [0, 16] go past the data section (12 bytes)");
    free(b);
}

/* ---- the training state ---------------------------------------------------- */
static char *tiny_args[] = {"t", "--vocab", "8", "--seq-len", "6", "--d-model", "8", "--heads", "2", "--d-head",
                            "4", "--alphabet", "4", "--batch", "3", "--steps", "10", "--warmup", "0"};

typedef struct {
    attn_cfg c;
    tg_cli_opt opts[ATTN_MAX_OPTS];
    int nopt;
    tg_model m;
    tg_adamw adam;
    tg_sgd sgd;
    tg_adafactor af;
    tg_rng rng;
    tg_train_state st;
} run;

/* A run from the tiny flags plus `extra` ones ("--d-model", "16", ...). */
static void run_init(run *r, int n_extra, char **extra) {
    char *argv[64];
    int argc = 0;
    for (size_t i = 0; i < sizeof tiny_args / sizeof *tiny_args; i++) argv[argc++] = tiny_args[i];
    for (int i = 0; i < n_extra; i++) argv[argc++] = extra[i];
    char err[256];
    attn_cfg_defaults(&r->c);
    r->nopt = attn_cfg_options(&r->c, r->opts);
    assert_int_equal(tg_cli_parse(r->opts, r->nopt, argc, argv, err, sizeof err, NULL), TG_CLI_OK);
    tg_model_cfg mc = attn_cfg_model(&r->c);
    tg_model_init(&r->m, &mc, (uint64_t)r->c.seed);
    tg_rng_seed(&r->rng, (uint64_t)r->c.seed, 0xda7a);
    r->st = (tg_train_state){.P = &r->m.P, .data_rng = &r->rng};
    if (r->c.optim == OPT_ADAM) {
        tg_adamw_init(&r->adam, &r->m.P, 0.9f, 0.95f, 1e-8f, r->c.weight_decay);
        r->st.adam = &r->adam;
    } else if (r->c.optim == OPT_ADAFACTOR) {
        tg_adafactor_init(&r->af, &r->m.P, 0.0f, r->c.weight_decay);
        r->st.adafactor = &r->af;
    } else {
        tg_sgd_init(&r->sgd, &r->m.P, r->c.momentum, r->c.weight_decay);
        r->st.sgd = &r->sgd;
    }
}

static void run_free(run *r) {
    if (r->st.adam) tg_adamw_free(&r->adam);
    else if (r->st.adafactor) tg_adafactor_free(&r->af);
    else tg_sgd_free(&r->sgd);
    tg_train_state_free_logged(&r->st);
    tg_model_free(&r->m);
}

/* k training steps, logging every step into st.logged */
static void run_steps(run *r, int k) {
    tg_task_cfg tc = attn_cfg_task(&r->c);
    int tok[3 * 6], tgt[3 * 6];
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    for (int i = 0; i < k; i++) {
        tg_ctx_reset(&ctx);
        tg_task_batch(&tc, &r->rng, r->c.batch, tok, tgt);
        tg_tensor *loss = tg_model_forward(&r->m, &ctx, tok, tgt, r->c.batch, 1);
        tg_params_zero_grad(&r->m.P);
        tg_backward(&ctx, loss);
        if (r->st.adam) tg_adamw_step(&r->adam, &r->m.P, 1e-2f);
        else if (r->st.adafactor) tg_adafactor_step(&r->af, &r->m.P, 1e-2f);
        else tg_sgd_step(&r->sgd, &r->m.P, 1e-2f);
        assert_int_equal(tg_train_state_reserve(&r->st, r->st.n_logged + 1), 0);
        r->st.logged[2 * r->st.n_logged] = loss->data[0];
        r->st.logged[2 * r->st.n_logged + 1] = r->m.ent[0];
        r->st.n_logged++;
        r->st.step++;
    }
    tg_ctx_free(&ctx);
}

/* The three optimizers, and each with the learned scale in its log form (its own
 * rate through --scale-lr). */
static void test_ckpt_roundtrip(void **s) {
    (void)s;
    for (int k = 0; k < 6; k++) {
        int opt = k % 3, n_extra = k < 3 ? 2 : 10;
        char *extra[] = {"--optim", opt == 2 ? "adafactor" : opt ? "sgd" : "adam", "--scale", "learned", "--learned-param", "log",
                         "--learned-init", "none", "--scale-lr", "0.03"};
        run a, b;
        run_init(&a, n_extra, extra);
        run_steps(&a, 4);
        char err[512], changed[256];
        const char *p = path_of("state.st");
        assert_int_equal(tg_ckpt_save(p, &a.st, a.opts, a.nopt, err, sizeof err), 0);
        run_init(&b, n_extra, extra);
        assert_int_equal(tg_ckpt_load(p, &b.st, b.opts, b.nopt, attn_run_options, changed, sizeof changed, err,
                                   sizeof err), 0);
        assert_string_equal(changed, "");
        if (k >= 3) assert_true(b.m.layer[0].hscale->data[0] != logf(2.0f));   /* θ moved, and came back */
        assert_int_equal(b.st.step, 4);
        assert_memory_equal(a.m.P.data, b.m.P.data, a.m.P.numel * sizeof(float));
        if (opt == 0) {
            assert_memory_equal(a.adam.m, b.adam.m, a.m.P.numel * sizeof(float));
            assert_memory_equal(a.adam.v, b.adam.v, a.m.P.numel * sizeof(float));
            assert_int_equal(a.adam.t, b.adam.t);
        } else if (opt == 2) {
            assert_true(a.af.n_v < a.m.P.numel);   /* factored: rows + columns per matrix */
            assert_memory_equal(a.af.v, b.af.v, a.af.n_v * sizeof(float));
            assert_int_equal(a.af.t, b.af.t);
            assert_int_equal(b.af.t, 4);
        } else assert_memory_equal(a.sgd.buf, b.sgd.buf, a.m.P.numel * sizeof(float));
        assert_true(a.rng.state == b.rng.state && a.rng.inc == b.rng.inc);
        assert_int_equal(b.st.n_logged, 4);
        assert_memory_equal(a.st.logged, b.st.logged, 8 * sizeof(double));
        /* and both go on the same way */
        run_steps(&a, 2);
        run_steps(&b, 2);
        assert_memory_equal(a.m.P.data, b.m.P.data, a.m.P.numel * sizeof(float));
        run_free(&a);
        run_free(&b);
    }
}

/* The learned scale's log form (saved and restored in test_ckpt_roundtrip):
 * θ starts at ln s_h, the head scales' rate comes from --scale-lr, and a
 * checkpoint of the other form is refused by its flag, the state untouched. */
static void test_ckpt_learned_log(void **s) {
    (void)s;
    char *lg[] = {"--scale", "learned", "--learned-param", "log", "--learned-init", "none", "--scale-lr", "0.03"};
    run a, c;
    run_init(&a, 8, lg);
    assert_string_equal(a.m.layer[0].hscale->name, "l0.hscale_log");
    assert_float_equal(a.m.layer[0].hscale->lr_mult, 10.0f, 1e-6f);   /* 0.03 / the default lr 0.003 */
    assert_float_equal(a.m.layer[0].hscale->data[1], logf(2.0f), 0);   /* θ = ln √4 */
    run_steps(&a, 2);
    char err[512];
    const char *p = path_of("log.st");
    assert_int_equal(tg_ckpt_save(p, &a.st, a.opts, a.nopt, err, sizeof err), 0);
    char *lin[] = {"--scale", "learned", "--learned-init", "none", "--scale-lr", "0.03"};
    run_init(&c, 6, lin);
    float *snap = malloc(c.m.P.numel * sizeof(float));
    memcpy(snap, c.m.P.data, c.m.P.numel * sizeof(float));
    assert_int_not_equal(tg_ckpt_load(p, &c.st, c.opts, c.nopt, attn_run_options, NULL, 0, err, sizeof err), 0);
    EXPECT_MSG(err, "setting differs: --learned-param is log in the checkpoint, linear in this run");
    assert_memory_equal(snap, c.m.P.data, c.m.P.numel * sizeof(float));
    free(snap);
    run_free(&a);
    run_free(&c);
}

/* Rewrites the checkpoint at src into dst with one change: tensor `name`
 * replaced (dt, shape, values) or dropped (ndim < 0), or a metadata key set
 * (value NULL: removed). */
static void rewrite(const char *src, const char *dst, const char *name, tg_st_dtype dt, int ndim,
                    const int64_t *shape, const void *values, const char *key, const char *value) {
    tg_st_file f;
    char err[256];
    assert_int_equal(tg_st_read(src, &f, err, sizeof err), 0);
    tg_st_tensor *t = calloc((size_t)f.n + 1, sizeof *t);
    tg_st_kv *kv = calloc((size_t)f.n_meta + 1, sizeof *kv);
    void **bufs = calloc((size_t)f.n + 1, sizeof *bufs);
    int n = 0, nk = 0, found = 0;
    for (int i = 0; i < f.n; i++) {
        const tg_st_entry *e = &f.t[i];
        if (name && strcmp(e->name, name) == 0) {
            found = 1;
            if (ndim < 0) continue;
            t[n] = (tg_st_tensor){.name = e->name, .dtype = dt, .ndim = ndim, .data = values};
            memcpy(t[n].shape, shape, (size_t)ndim * sizeof *shape);
            n++;
            continue;
        }
        bufs[n] = malloc((size_t)(e->numel ? e->numel : 1) * 8);
        if (e->dtype == TG_ST_F32) tg_st_get_f32(e, bufs[n]);
        else tg_st_get_f64(e, bufs[n]);
        t[n] = (tg_st_tensor){.name = e->name, .dtype = e->dtype, .ndim = e->ndim, .data = bufs[n]};
        memcpy(t[n].shape, e->shape, sizeof e->shape);
        n++;
    }
    if (name && !found) {   /* an extra tensor */
        t[n] = (tg_st_tensor){.name = name, .dtype = dt, .ndim = ndim, .data = values};
        memcpy(t[n].shape, shape, (size_t)ndim * sizeof *shape);
        n++;
    }
    for (int i = 0; i < f.n_meta; i++) {
        if (!strcmp(f.meta[i].key, TG_ST_CHECKSUM_KEY)) continue;
        if (key && !strcmp(f.meta[i].key, key)) continue;
        kv[nk++] = f.meta[i];
    }
    if (key && value) kv[nk++] = (tg_st_kv){key, value};
    assert_int_equal(tg_st_write(dst, t, n, kv, nk, err, sizeof err), 0);
    for (int i = 0; i < f.n; i++) free(bufs[i]);
    free(bufs);
    free(t);
    free(kv);
    tg_st_free(&f);
}

static void test_ckpt_refusals(void **s) {
    (void)s;
    run a;
    run_init(&a, 0, NULL);
    run_steps(&a, 3);
    char err[512], changed[256];
    const char *good = path_of("good.st"), *bad = path_of("bad.st");
    assert_int_equal(tg_ckpt_save(good, &a.st, a.opts, a.nopt, err, sizeof err), 0);

    run b;
    /* a different model: named as the flag, both values */
    char *wide[] = {"--d-model", "16"};
    run_init(&b, 2, wide);
    assert_int_not_equal(tg_ckpt_load(good, &b.st, b.opts, b.nopt, attn_run_options, changed, sizeof changed, err,
                                   sizeof err), 0);
    EXPECT_MSG(err, "setting differs: --d-model is 8 in the checkpoint, 16 in this run");
    EXPECT_MSG(err, "good.st: ");
    run_free(&b);
    /* the run-control flags may change, and are listed */
    char *longer[] = {"--steps", "20", "--threads", "2"};
    run_init(&b, 4, longer);
    assert_int_equal(tg_ckpt_load(good, &b.st, b.opts, b.nopt, attn_run_options, changed, sizeof changed, err,
                               sizeof err), 0);
    assert_string_equal(changed, "--steps 10 -> 20, --threads 1 -> 2");
    run_free(&b);

    /* damaged tensors and metadata: a message naming the tensor or key, and the state untouched */
    run_init(&b, 0, NULL);
    float *snap = malloc(b.m.P.numel * sizeof(float));
    memcpy(snap, b.m.P.data, b.m.P.numel * sizeof(float));
    int64_t flat = (int64_t)b.m.P.numel, wq_wrong[2] = {8, 9}, two[2] = {1, 2};
    float *nanv = calloc(b.m.P.numel, sizeof(float)), *neg = calloc(b.m.P.numel, sizeof(float));
    nanv[3] = NAN;
    neg[5] = -1;
    static double logged[18];
    struct {
        const char *name;
        tg_st_dtype dt;
        int ndim;
        const int64_t *shape;
        const void *values;
        const char *key, *value, *msg;
    } cases[] = {
        {"l0.wq", TG_ST_F32, 2, wq_wrong, nanv, NULL, NULL, "tensor 'l0.wq' has shape [8,9], the model needs [8,8]"},
        {"l0.wq", TG_ST_F64, 2, (int64_t[]){8, 8}, nanv, NULL, NULL, "tensor 'l0.wq' is F64, expected F32"},
        {"l0.wq", TG_ST_F32, -1, NULL, NULL, NULL, NULL, "tensor 'l0.wq' is missing"},
        {"optim.adam.m", TG_ST_F32, 1, &flat, nanv, NULL, NULL, "tensor 'optim.adam.m': element 3 is nan"},
        {"optim.adam.v", TG_ST_F32, 1, &flat, neg, NULL, NULL, "tensor 'optim.adam.v': element 5 is -1 (must be >= 0)"},
        {"extra", TG_ST_F32, 1, &flat, neg, NULL, NULL, "tensor 'extra' is not part of this run's state"},
        {"run.logged", TG_ST_F64, 2, (int64_t[]){9, 2}, logged, NULL, NULL, "tensor 'run.logged' must be F64 [rows, 2] with rows <= step + 1"},
        {"run.logged", TG_ST_F32, 2, two, logged, NULL, NULL, "tensor 'run.logged' must be F64 [rows, 2]"},
        {NULL, 0, 0, NULL, NULL, "rng.data.inc", "2", "inc must be odd"},
        {NULL, 0, 0, NULL, NULL, "step", "-1", "metadata 'step'"},
        {NULL, 0, 0, NULL, NULL, "optim.adam.t", "4", "'optim.adam.t' is missing or above the step 3"},
        {NULL, 0, 0, NULL, NULL, "optim", "sgd", "metadata 'optim' is 'sgd', this run uses adam"},
        {NULL, 0, 0, NULL, NULL, "format", "other", "metadata format is 'other'"},
        {NULL, 0, 0, NULL, NULL, "format_version", "2", "format_version '2'"},
        {NULL, 0, 0, NULL, NULL, "config.d-model", NULL, "it records no --d-model"},
        {NULL, 0, 0, NULL, NULL, "config.dropout", "0.1", "a setting --dropout that this program does not know"},
        {NULL, 0, 0, NULL, NULL, "n_params", "7", "metadata 'n_params' is 7"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rewrite(good, bad, cases[i].name, cases[i].dt, cases[i].ndim, cases[i].shape, cases[i].values, cases[i].key,
                cases[i].value);
        err[0] = 0;
        if (tg_ckpt_load(bad, &b.st, b.opts, b.nopt, attn_run_options, changed, sizeof changed, err, sizeof err) == 0) {
            print_error("case %zu was accepted\n", i);
            fail();
        }
        EXPECT_MSG(err, cases[i].msg);
        assert_int_equal(b.st.step, 0);
        assert_memory_equal(snap, b.m.P.data, b.m.P.numel * sizeof(float));
    }
    /* a plain safetensors file without the checksum */
    size_t n;
    unsigned char *raw = make("{}", NULL, 0, &n);
    assert_int_not_equal(tg_ckpt_load_bytes(raw, n, &b.st, b.opts, b.nopt, attn_run_options, NULL, 0, err, sizeof err), 0);
    EXPECT_MSG(err, "no " TG_ST_CHECKSUM_KEY);
    free(raw);
    assert_int_not_equal(tg_ckpt_load(path_of("missing.st"), &b.st, b.opts, b.nopt, NULL, NULL, 0, err, sizeof err), 0);
    EXPECT_MSG(err, "cannot open");
    assert_int_equal(tg_ckpt_check_writable(path_of("x.st"), err, sizeof err), 0);
    assert_int_not_equal(tg_ckpt_check_writable(dir, err, sizeof err), 0);
    EXPECT_MSG(err, "not a regular file (a folder)");
    assert_int_equal(mkfifo(path_of("fifo"), 0600), 0);   /* a rename would replace it with a file */
    assert_int_not_equal(tg_ckpt_check_writable(path_of("fifo"), err, sizeof err), 0);
    EXPECT_MSG(err, "fifo: not a regular file");
    unlink(path_of("fifo"));
    assert_int_not_equal(tg_ckpt_check_writable(path_of("no/x.st"), err, sizeof err), 0);
    EXPECT_MSG(err, "cannot create a file in its folder");
    assert_int_equal(dot_files(), 0);
    free(snap);
    free(nanv);
    free(neg);
    run_free(&b);
    run_free(&a);
}

/* ---- the run log ----------------------------------------------------------- */
static const char *HDR = "# tapegrad test\n# seed=1\n# log_every=5\n# steps=50\nstep\tloss\n";

static void test_runlog_resume(void **s) {
    (void)s;
    const char *p = path_of("run.tsv");
    const char *may[] = {"steps", "log-every", NULL};
    char err[256], info[256];
    tg_runlog L;
    assert_int_equal(tg_runlog_open(&L, p, HDR, err, sizeof err), 0);
    for (int st = 0; st <= 40; st += 5) {
        tg_runlog_add(&L, "%d\t%.2f\n", st, st / 10.0);
        assert_int_equal(tg_runlog_end_row(&L), 0);
    }
    assert_int_equal(tg_runlog_close(&L), 0);
    FILE *f = fopen(p, "a");
    fputs("45\t4.", f);   /* a row cut by a kill */
    fclose(f);
    size_t n0;
    unsigned char *before = slurp(p, &n0);

    /* refused: another run's header, missing rows; the file stays as it was */
    const char *other = "# tapegrad test\n# seed=2\n# log_every=5\n# steps=50\nstep\tloss\n";
    assert_int_not_equal(tg_runlog_resume(&L, p, other, may, 25, info, sizeof info, err, sizeof err), 0);
    EXPECT_MSG(err, "its header says seed=1, this run has 2");
    const char *cols = "# tapegrad test\n# seed=1\n# log_every=5\n# steps=50\nstep\tloss\tx\n";
    assert_int_not_equal(tg_runlog_resume(&L, p, cols, may, 25, info, sizeof info, err, sizeof err), 0);
    EXPECT_MSG(err, "its columns differ");
    const char *more = "# tapegrad test\n# seed=1\n# lr=1\n# log_every=5\n# steps=50\nstep\tloss\n";
    assert_int_not_equal(tg_runlog_resume(&L, p, more, may, 25, info, sizeof info, err, sizeof err), 0);
    EXPECT_MSG(err, "its header has no lr");
    assert_int_not_equal(tg_runlog_resume(&L, p, HDR, may, 100, info, sizeof info, err, sizeof err), 0);
    EXPECT_MSG(err, "its rows end at step 40 but the checkpoint is at step 100");
    size_t n1;
    unsigned char *after = slurp(p, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(after);

    /* resumed at 25: rows 0..20 kept, 25.. and the partial line dropped, the new header in */
    const char *hdr2 = "# tapegrad test\n# seed=1\n# log_every=5\n# steps=80\nstep\tloss\n";
    assert_int_equal(tg_runlog_resume(&L, p, hdr2, may, 25, info, sizeof info, err, sizeof err), 0);
    EXPECT_MSG(info, "kept 5 rows (steps 0..20), dropped 5 lines");
    tg_runlog_add(&L, "%d\t%s\n", 25, "x");
    assert_int_equal(tg_runlog_end_row(&L), 0);
    assert_int_equal(tg_runlog_close(&L), 0);
    size_t n2;
    char *txt = (char *)slurp(p, &n2);
    assert_string_equal(txt, "# tapegrad test\n# seed=1\n# log_every=5\n# steps=80\nstep\tloss\n"
                             "0\t0.00\n5\t0.50\n10\t1.00\n15\t1.50\n20\t2.00\n25\tx\n");
    free(txt);
    free(before);
    assert_int_equal(dot_files(), 0);

    /* a missing log is started afresh */
    const char *q = path_of("new.tsv");
    assert_int_equal(tg_runlog_resume(&L, q, HDR, may, 25, info, sizeof info, err, sizeof err), 0);
    EXPECT_MSG(info, "did not exist");
    tg_runlog_close(&L);
    assert_int_not_equal(tg_runlog_open(&L, path_of("no/dir.tsv"), HDR, err, sizeof err), 0);
    EXPECT_MSG(err, "cannot create a temporary file in its folder");
    assert_int_not_equal(tg_runlog_open(&L, dir, HDR, err, sizeof err), 0);
    EXPECT_MSG(err, "not a regular file");
}

/* ---- the non-finite diagnosis ---------------------------------------------- */
static void test_guard(void **s) {
    (void)s;
    run r;
    run_init(&r, 0, NULL);
    tg_task_cfg tc = attn_cfg_task(&r.c);
    int tok[3 * 6], tgt[3 * 6];
    tg_task_batch(&tc, &r.rng, 3, tok, tgt);
    tg_ctx ctx;
    tg_ctx_init(&ctx, 0);
    char msg[1024];

    /* a parameter holding NaN is named first */
    tg_tensor *wk = tg_params_find(&r.m.P, "l0.wk");
    wk->data[7] = NAN;
    tg_tensor *loss = tg_model_forward(&r.m, &ctx, tok, tgt, 3, 0);
    assert_false(isfinite(loss->data[0]));
    tg_guard_forward(&ctx, &r.m.P, msg, sizeof msg);
    EXPECT_MSG(msg, "parameter l0.wk [8,8] holds nan at element 7");
    wk->data[7] = 0;

    /* finite parameters that overflow: the first op whose output is not finite */
    for (int64_t i = 0; i < r.m.tok_emb->numel; i++) r.m.tok_emb->data[i] = 3e38f;
    for (int64_t i = 0; i < r.m.pos_emb->numel; i++) r.m.pos_emb->data[i] = 3e38f;
    tg_ctx_reset(&ctx);
    loss = tg_model_forward(&r.m, &ctx, tok, tgt, 3, 0);
    assert_false(isfinite(loss->data[0]));
    tg_guard_forward(&ctx, &r.m.P, msg, sizeof msg);
    EXPECT_MSG(msg, "is in the output of tg_add");
    EXPECT_MSG(msg, "tape node");
    print_message("overflow diagnosis: %s\n", msg);

    /* a non-finite gradient: the parameter, and the op in backward order */
    run_free(&r);
    run_init(&r, 0, NULL);
    tg_ctx_reset(&ctx);
    loss = tg_model_forward(&r.m, &ctx, tok, tgt, 3, 0);
    tg_params_zero_grad(&r.m.P);
    tg_backward(&ctx, loss);
    tg_guard_backward(&ctx, &r.m.P, msg, sizeof msg);
    assert_string_equal(msg, "no non-finite gradient found");
    r.m.w_out->grad[2] = INFINITY;
    tg_guard_backward(&ctx, &r.m.P, msg, sizeof msg);
    EXPECT_MSG(msg, "gradient of parameter w_out [8,8] is inf at element 2");
    ctx.nodes[ctx.n_nodes - 2].out->grad[0] = NAN;
    tg_guard_backward(&ctx, &r.m.P, msg, sizeof msg);
    EXPECT_MSG(msg, "; the first non-finite gradient in backward order is that of the output of tg_matmul");
    tg_ctx_free(&ctx);
    run_free(&r);
}

/* ---- attn_scale's cross-flag checks ---------------------------------------- */
static void test_cfg_check(void **s) {
    (void)s;
    struct { int argc; char *argv[8]; const char *msg; } bad[] = {
        {3, {"p", "--save-every", "5"}, "--save-every needs --save FILE"},
        {5, {"p", "--stop-at", "5", "--save", "x"}, NULL},   /* fine */
        {5, {"p", "--stop-at", "600", "--save", "x"}, "--stop-at 600 is not before --steps 600"},
        {3, {"p", "--stop-at", "5"}, "--stop-at needs --save FILE"},
        {5, {"p", "--log", "a", "--save", "a"}, "--log a is also the checkpoint file"},
        {5, {"p", "--log", "a", "--resume", "a"}, "--log a is also the checkpoint file"},
        {3, {"p", "--log", "a\nb"}, "--log: the path contains a control character"},
        {3, {"p", "--debug-nan", "600"}, "--debug-nan 600 is not before --steps 600"},
        {5, {"p", "--steps", "10", "--warmup", "20"}, "--warmup 20 is longer than --steps 10"},
        {3, {"p", "--lr-min", "1"}, "--lr-min 1 is above --lr"},
        {5, {"p", "--task", "recall", "--seq-len", "7"}, "task recall: seq-len 7 must be even"},
        {3, {"p", "--vocab", "8"}, "task hist: alphabet 8 needs"},
        {7, {"p", "--batch", "65536", "--seq-len", "4096", "--vocab", "4096"}, "at most 2^31-1"},
        {7, {"p", "--layers", "64", "--d-model", "8192", "--d-head", "4096"}, "GiB"},
        {3, {"p", "--scale-mult", "2"}, "--scale-mult needs --scale mult (this run has --scale sqrt)"},
        {5, {"p", "--scale", "mult", "--scale-mult", "0"}, "--scale-mult 0: the multiplier must be finite and > 0"},
        {5, {"p", "--scale", "mult", "--scale-mult", "1e-50"}, "must be finite and > 0"},   /* 0 as a float */
        {5, {"p", "--scale", "mult", "--scale-mult", "0.0625"}, NULL},
        {3, {"p", "--scale", "mult"}, NULL},   /* c = 1 */
        {3, {"p", "--learned-param", "log"}, "--learned-param needs --scale learned"},
        {5, {"p", "--scale", "none", "--scale-lr", "0.1"}, "--scale-lr needs --scale learned (this run has --scale none)"},
        {3, {"p", "--learned-init", "none"}, "--learned-init needs --scale learned"},
        {7, {"p", "--scale", "learned", "--learned-param", "log", "--scale-lr", "0.1"}, NULL},
        {3, {"p", "--dump-attn", "0,10"}, "--dump-attn needs --dump-attn-file FILE"},
        {3, {"p", "--dump-attn-file", "m.st"}, "--dump-attn-file needs --dump-attn STEP"},
        {5, {"p", "--dump-attn", "0,601", "--dump-attn-file", "m.st"}, "--dump-attn: step 601 is beyond --steps 600"},
        {5, {"p", "--dump-attn", "10,5", "--dump-attn-file", "m.st"}, "--dump-attn: steps must increase (10, then 5)"},
        {5, {"p", "--dump-attn", "10,10", "--dump-attn-file", "m.st"}, "steps must increase"},
        {5, {"p", "--dump-attn", "1,,2", "--dump-attn-file", "m.st"}, "expected steps separated by commas"},
        {5, {"p", "--dump-attn", "-1", "--dump-attn-file", "m.st"}, "expected steps separated by commas"},
        {5, {"p", "--dump-attn", "99999999999999", "--dump-attn-file", "m.st"}, "beyond --steps 600"},
        {7, {"p", "--dump-attn", "0", "--dump-attn-file", "a", "--log", "a"}, "--dump-attn-file a is also the --log file"},
        {7, {"p", "--dump-attn", "0", "--dump-attn-file", "a", "--save", "a"}, "is also the --save file"},
        {5, {"p", "--dump-attn", "0", "--dump-attn-file", "a\tb"}, "--dump-attn-file: the path contains a control"},
        {5, {"p", "--dump-attn", "0,60,600", "--dump-attn-file", "m.st"}, NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        attn_cfg c;
        attn_cfg_defaults(&c);
        tg_cli_opt o[ATTN_MAX_OPTS];
        int seen[ATTN_MAX_OPTS], n = attn_cfg_options(&c, o);
        char err[512] = "";
        assert_int_equal(tg_cli_parse(o, n, bad[i].argc, bad[i].argv, err, sizeof err, seen), TG_CLI_OK);
        int rc = attn_cfg_check(&c, o, n, seen, err, sizeof err);
        if (!bad[i].msg) {
            assert_int_equal(rc, 0);
            continue;
        }
        if (rc == 0) {
            print_error("case %zu was accepted\n", i);
            fail();
        }
        EXPECT_MSG(err, bad[i].msg);
    }
    /* tg_cli_value writes what tg_cli_dump writes; tg_cli_find finds by name */
    attn_cfg c;
    attn_cfg_defaults(&c);
    tg_cli_opt o[ATTN_MAX_OPTS];
    int n = attn_cfg_options(&c, o);
    char v[64];
    tg_cli_value(tg_cli_find(o, n, "lr"), v, sizeof v);
    assert_string_equal(v, "0.00300000003");
    tg_cli_value(tg_cli_find(o, n, "scale"), v, sizeof v);
    assert_string_equal(v, "sqrt");
    assert_null(tg_cli_find(o, n, "nope"));
    for (const char *const *r = attn_run_options; *r; r++) assert_non_null(tg_cli_find(o, n, *r));
}

int main(void) {
    openblas_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_st_roundtrip),
        cmocka_unit_test(test_st_rejects),
        cmocka_unit_test(test_ckpt_roundtrip),
        cmocka_unit_test(test_ckpt_refusals),
        cmocka_unit_test(test_ckpt_learned_log),
        cmocka_unit_test(test_runlog_resume),
        cmocka_unit_test(test_guard),
        cmocka_unit_test(test_cfg_check),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
