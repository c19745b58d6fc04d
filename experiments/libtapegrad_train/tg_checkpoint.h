/* The training state of a run, saved to and restored from a safetensors file,
 * so that a resumed run is the same run.
 *
 * What a checkpoint at step s holds: the parameters after s updates (one
 * tensor per parameter, by name), the optimizer state (AdamW: "optim.adam.m",
 * "optim.adam.v" flat in parameter order, the step counter in metadata; SGD:
 * "optim.sgd.buf" when momentum > 0; Adafactor: "optim.adafactor.v", its factored second
 * moments, and "optim.adafactor.m" when β1 > 0), the data RNG ready to draw batch s, the
 * (loss, mean entropy) of every logged row before s ("run.logged", F64 [n, 2],
 * for the run's summary), and in "__metadata__" the step, the RNG state, and
 * every flag's value as "config.<flag>" (paths left out) and every setting's
 * as "config.<key>". The data section's
 * FNV-1a 64 checksum is required.
 *
 * Loading checks everything before it changes anything: the file's structure
 * (tg_st_read), format and version, every setting against the running
 * program's flags (a mismatch names the flag and both values), each tensor's
 * dtype and shape against the model, finite values, v >= 0, and no tensor
 * left over. On error the state is untouched. */
#ifndef TG_CHECKPOINT_H
#define TG_CHECKPOINT_H
#include <stddef.h>

#include "tg_cli.h"
#include "tg_core.h"
#include "tg_optim.h"

#define TG_CKPT_FORMAT "tapegrad.train_state"
#define TG_CKPT_VERSION "1"

/* A setting of the run that is not a flag (the plugin's SHA-256, say): saved
 * as "config.<key>" like a flag, and on resume it must match. */
typedef struct tg_setting {
    const char *key;
    const char *value;
} tg_setting;

typedef struct {
    tg_params *P;             /* the parameters (the toy model's: &model.P) */
    tg_adamw *adam;           /* exactly one of adam, sgd and adafactor is set */
    tg_sgd *sgd;
    tg_rng *data_rng;
    int step;                 /* updates done: the next step to run */
    double *logged;           /* 2 per logged row: loss, the model's metric (the toy model: mean entropy; may be NaN) */
    int n_logged, cap_logged;
    const tg_setting *settings;   /* more of the run's identity, n_settings of them (may be NULL) */
    int n_settings;
    const char *const *added;     /* flags added after runs were recorded (tg_cli_added_value; may be NULL) */
    tg_loss_scale *scaler;        /* since 0.22: an fp16 run's loss scale (saved as amp.*), else NULL */
    tg_adafactor *adafactor;      /* since 0.24: "optim.adafactor.v" (and ".m" when β1 > 0), the step in metadata */
} tg_train_state;

/* Room for `rows` logged rows; returns 0, or -1 when out of memory. */
int tg_train_state_reserve(tg_train_state *s, int rows);
void tg_train_state_free_logged(tg_train_state *s);

/* Writes the state atomically (see tg_st_write). opts: the program's flags,
 * recorded as configuration. Returns 0, or -1 with a message in err. */
int tg_ckpt_save(const char *path, const tg_train_state *s, const tg_cli_opt *opts, int n_opts, char *err, size_t errlen);

/* Loads a checkpoint into s, whose model and optimizer were made from the
 * current flags. may_differ: NULL-terminated flag names that need not match;
 * their changes are listed in `changed` ("--steps 100 -> 200, ..."; may be
 * NULL). Returns 0, or -1 with a message in err. */
int tg_ckpt_load(const char *path, tg_train_state *s, const tg_cli_opt *opts, int n_opts, const char *const *may_differ,
              char *changed, size_t changed_len, char *err, size_t errlen);
/* The same from bytes in memory (the fuzzer's entry). */
int tg_ckpt_load_bytes(const void *bytes, size_t size, tg_train_state *s, const tg_cli_opt *opts, int n_opts,
                    const char *const *may_differ, char *changed, size_t changed_len, char *err, size_t errlen);

/* Checks that a checkpoint can be written at path: its folder exists and takes
 * a new file, and path is not a folder or any other non-regular file (a FIFO,
 * a socket, a device node: the atomic rename would replace it). Nothing is
 * left behind. */
int tg_ckpt_check_writable(const char *path, char *err, size_t errlen);

#endif
