/* Attention plugins: a researcher's attention kernel, built out of tree as a
 * shared object, loaded into a training program (attn_scale --attn plugin:...).
 *
 * The kernel is a function with tg_attention's signature (tg_attention_fn):
 *
 *   #include <tapegrad/tapegrad.h>
 *   tg_tensor *attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale,
 *                        float scale, int causal, tg_attn_stats *stats) { ... }
 *   TG_ATTENTION_PLUGIN_DECLARE   (optional: records the ABI it was built for)
 *
 *   cc -O2 -shared -fPIC mykernel.c $(pkg-config --cflags tapegrad) -o mykernel.so
 *
 * Nothing else is linked: the plugin's tg_ symbols resolve against the program
 * that loads it (the programs export them; a program of yours must too: link
 * with -rdynamic, or with libtapegrad.so). It must record a node with
 * tg_record (and its own backward) when an input needs a gradient, like any
 * op. It need not fill `stats`: the kit measures the weights of a kernel it
 * did not write from the outside (tg_attn_probe.h).
 *
 * Spec: "FILE[:SYMBOL]", SYMBOL "attention" when left out. What loading checks,
 * each with a message that names FILE: that it exists and is a regular file; an
 * ELF shared object (ET_DYN) of this program's class and machine ("built for
 * aarch64, this program is x86-64"); that dlopen resolves it (an unresolved
 * symbol is named); that SYMBOL is there; that a declared ABI is this one. */
#ifndef TG_ATTN_PLUGIN_H
#define TG_ATTN_PLUGIN_H
#include <stddef.h>

#include "tg_core.h"
#include "tg_ops.h"

/* The plugin ABI: tg_attention_fn and the tapegrad structs it sees (tg_tensor,
 * tg_attn_stats, tg_node). Changed on purpose only, with the library's version. */
#define TG_ATTENTION_PLUGIN_ABI 1
#define TG_ATTENTION_PLUGIN_DECLARE const int tg_attention_plugin_abi = TG_ATTENTION_PLUGIN_ABI;

typedef struct tg_attn_plugin {
    char path[4096];      /* the file as opened (absolute) */
    char symbol[128];
    char sha256[65];      /* of the file: the plugin's identity in logs and checkpoints */
    void *handle;
    tg_attention_fn fn;
} tg_attn_plugin;

/* Splits spec ("FILE[:SYMBOL]": the text after the last ':' is the symbol when it
 * is a C identifier) into file and symbol ("attention" when left out). Touches
 * no file. 0, or -1 with a message in err. */
int tg_attn_plugin_spec(const char *spec, char *file, size_t flen, char *symbol, size_t slen, char *err,
                        size_t errlen);

/* Opens spec ("FILE[:SYMBOL]"). Returns 0, or -1 with a message in err
 * (nothing stays open). */
int tg_attn_plugin_open(tg_attn_plugin *p, const char *spec, char *err, size_t errlen);
void tg_attn_plugin_close(tg_attn_plugin *p);

#endif
