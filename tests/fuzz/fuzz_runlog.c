/* libFuzzer target: bytes as an existing log that a resumed run checks and
 * truncates (tg_runlog_plan, which touches no file), against an attn_scale-like
 * header, at a checkpoint step taken from the first input byte. The input is
 * copied into a buffer of exactly its size, so any read past a line's end is
 * caught. Nothing may crash or read out of bounds, whatever the bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn_cfg.h"
#include "tg_runlog.h"

static const char header[] = "# tapegrad attn_scale\n# task=hist\n# steps=100\n# log_every=5\n# seed=1\n# log=x.tsv\n"
                             "# n_params=12\nstep\tloss\tent_mean\tgrad_norm\tlr\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int step = data[0];
    char *old = malloc(size - 1 ? size - 1 : 1);
    if (!old) return 0;
    memcpy(old, data + 1, size - 1);
    tg_runlog_keep k;
    char err[256];
    if (tg_runlog_plan(old, size - 1, header, attn_run_options, step, &k, err, sizeof err) == 0 &&
        (k.from > k.to || k.to > size - 1))
        abort();
    free(old);
    return 0;
}
