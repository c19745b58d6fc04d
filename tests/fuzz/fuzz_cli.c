/* libFuzzer target: bytes as attn_scale's command line. The input is split at
 * NUL bytes into argv[1..]; it goes through tg_cli_parse with attn_scale's own
 * flag table, then the cross-flag checks, the usage text and the header dump.
 * Nothing may crash or read out of bounds, whatever the arguments. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_cfg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *sink;
    if (!sink) sink = fopen("/dev/null", "w");
    enum { MAX_ARGS = 64 };
    char *buf = malloc(size + 1), *argv[MAX_ARGS + 1];
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    int argc = 0;
    argv[argc++] = "attn_scale";
    for (size_t i = 0; i <= size && argc < MAX_ARGS;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;

    attn_cfg c;
    attn_cfg_defaults(&c);
    tg_cli_opt opts[ATTN_MAX_OPTS];
    int seen[ATTN_MAX_OPTS], n = attn_cfg_options(&c, opts);
    char err[256];
    int rc = tg_cli_parse(opts, n, argc, argv, err, sizeof err, seen);
    if (rc == TG_CLI_OK) {
        if (attn_cfg_check(&c, opts, n, seen, err, sizeof err) == 0 && sink) tg_cli_dump(sink, opts, n);
    } else if (sink) {
        fprintf(sink, "%s\n", rc == TG_CLI_ERROR ? err : "");
        tg_cli_usage(sink, "attn_scale", "fuzz", opts, n);
    }
    free(buf);
    return 0;
}
