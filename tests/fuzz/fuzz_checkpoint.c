/* libFuzzer target: bytes as a checkpoint file. They go through the generic
 * safetensors reader (every typed accessor on what it accepts) and then the
 * training-state loader against two tiny attn_scale runs with the settings
 * below (one with AdamW, one with SGD), the same ones as the seed checkpoints
 * in corpus/fuzz_checkpoint/.
 * Nothing may crash, leak or read out of bounds, whatever the bytes.
 *
 * A mutated byte almost always breaks the data checksum, which would stop
 * every input at the checksum check; so each input is also tried with its
 * checksum recomputed (when the header has one where the writer puts it), to
 * reach the checks behind it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_cfg.h"
#include "tg_checkpoint.h"
#include "safetensors.h"

static char *tiny_args[] = {"fuzz", "--vocab", "8", "--seq-len", "4", "--d-model", "4", "--heads", "1",
                            "--d-head", "2", "--alphabet", "4", "--batch", "2", "--steps", "3", "--warmup", "0"};

typedef struct {
    attn_cfg cfg;
    tg_cli_opt opts[ATTN_MAX_OPTS];
    int nopt;
    tg_model m;
    tg_adamw adam;
    tg_sgd sgd;
    tg_adafactor af;
    tg_rng rng;
    tg_train_state st;
} tiny_run;
static tiny_run runs[3];   /* adam, sgd, adafactor */

static void setup(tiny_run *r, const char *optim) {
    char err[256], *argv[sizeof tiny_args / sizeof *tiny_args + 2];
    int argc = 0;
    for (size_t i = 0; i < sizeof tiny_args / sizeof *tiny_args; i++) argv[argc++] = tiny_args[i];
    argv[argc++] = "--optim";
    argv[argc++] = (char *)optim;
    attn_cfg_defaults(&r->cfg);
    r->nopt = attn_cfg_options(&r->cfg, r->opts);
    if (tg_cli_parse(r->opts, r->nopt, argc, argv, err, sizeof err, NULL)) abort();
    tg_model_cfg mc = attn_cfg_model(&r->cfg);
    tg_model_init(&r->m, &mc, 1);
    tg_rng_seed(&r->rng, 1, 0xda7a);
    r->st = (tg_train_state){.P = &r->m.P, .data_rng = &r->rng};
    if (r->cfg.optim == OPT_ADAM) {
        tg_adamw_init(&r->adam, &r->m.P, 0.9f, 0.95f, 1e-8f, 0);
        r->st.adam = &r->adam;
    } else if (r->cfg.optim == OPT_ADAFACTOR) {
        tg_adafactor_init(&r->af, &r->m.P, 0.0f, 0);
        r->st.adafactor = &r->af;
    } else {
        tg_sgd_init(&r->sgd, &r->m.P, r->cfg.momentum, 0);
        r->st.sgd = &r->sgd;
    }
}

/* A copy of the input with the checksum's 16 hex digits set to the data
 * section's FNV-1a; NULL if there is no header size or no checksum key. */
static uint8_t *with_checksum(const uint8_t *data, size_t size) {
    if (size < 8) return NULL;
    uint64_t hn = 0;
    for (int i = 0; i < 8; i++) hn |= (uint64_t)data[i] << (8 * i);
    if (hn > size - 8) return NULL;
    static const char key[] = "\"" TG_ST_CHECKSUM_KEY "\":\"";
    const size_t kl = sizeof key - 1;
    for (size_t i = 8; i + kl + 16 <= 8 + hn; i++)
        if (memcmp(data + i, key, kl) == 0) {
            uint8_t *copy = malloc(size);
            if (!copy) return NULL;
            memcpy(copy, data, size);
            char hex[17];
            snprintf(hex, sizeof hex, "%016llx",
                     (unsigned long long)tg_fnv1a64(TG_FNV1A64_INIT, data + 8 + hn, size - 8 - hn));
            memcpy(copy + i + kl, hex, 16);
            return copy;
        }
    return NULL;
}

static void one(const uint8_t *data, size_t size) {
    char err[512], changed[512];
    tg_st_file f;
    if (tg_st_parse(data, size, &f, err, sizeof err) == 0) {
        for (int i = 0; i < f.n; i++) {
            const tg_st_entry *e = &f.t[i];
            size_t n = e->numel ? (size_t)e->numel : 1;
            void *buf = malloc(n * 8);
            if (!buf) continue;
            if (e->dtype == TG_ST_F32) tg_st_get_f32(e, buf);
            else if (e->dtype == TG_ST_F64) tg_st_get_f64(e, buf);
            else if (e->dtype == TG_ST_I64) tg_st_get_i64(e, buf);
            free(buf);
            if (tg_st_find(&f, e->name) != e) abort();   /* names are unique */
        }
        tg_st_meta(&f, "format");
        tg_st_free(&f);
    }
    for (int i = 0; i < 3; i++)
        tg_ckpt_load_bytes(data, size, &runs[i].st, runs[i].opts, runs[i].nopt, attn_run_options, changed, sizeof changed,
                        err, sizeof err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!runs[0].nopt) {
        setup(&runs[0], "adam");
        setup(&runs[1], "sgd");
        setup(&runs[2], "adafactor");
    }
    one(data, size);
    uint8_t *fixed = with_checksum(data, size);
    if (fixed) {
        if (memcmp(fixed, data, size) != 0) one(fixed, size);
        free(fixed);
    }
    return 0;
}
