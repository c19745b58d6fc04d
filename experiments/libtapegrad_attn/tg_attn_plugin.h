/* Attention plugins: a researcher's attention kernel, built out of tree as a
 * shared object, loaded into a training program (attn_scale --attn plugin:...)
 * or checked (attn_check plugin:...), opened by the kernel layer's registry
 * (tg_kernel.h: plugin:FILE[:SYMBOL]) or directly here.
 *
 * ABI 2 (tapegrad 0.13): the kernel takes the attention contract's args
 * (tg_attend_fn, attn_args.h) and the plugin exports a descriptor saying
 * what it implements (attn_kernel.h):
 *
 *   #include <tapegrad/tapegrad.h>
 *   static tg_tensor *attention(tg_ctx *ctx, const tg_attn_args *a) { ... }
 *   TG_ATTENTION_PLUGIN(attention, TG_ATTN_F_DV | TG_ATTN_F_GQA | TG_ATTN_F_WINDOW)
 *
 *   cc -O2 -shared -fPIC mykernel.c $(pkg-config --cflags tapegrad) -o mykernel.so
 *
 * ABI 1 (tapegrad ≤ 0.12: a tg_attention_fn and TG_ATTENTION_PLUGIN_DECLARE)
 * is refused since 0.20, the message naming the version and the rewrite
 * (0.13 to 0.19 loaded it through an adapter, as a kernel declaring dv != d).
 *
 * Nothing else is linked: the plugin's tg_ symbols resolve against the program
 * that loads it (the programs export them; a program of yours must too: link
 * with -rdynamic, or with libtapegrad.so). It must record a node with
 * tg_record (and its own backward) when an input needs a gradient, like any
 * op. It need not fill `stats`: a program measures the weights of a kernel it
 * did not write from the outside (tg_attn_probe.h).
 *
 * Spec: "FILE[:SYMBOL]", SYMBOL "attention" when left out: the kernel's name
 * (the descriptor tg_attn_plugin_SYMBOL).
 * The file is opened once: checked (a regular file; an ELF shared object of
 * this program's class and machine), copied into a sealed memory file while
 * hashed, and loaded from that copy, so the SHA-256 a run logs is of the bytes
 * it runs, whatever happens to the file meanwhile. Then: the descriptor, its
 * ABI (this program takes TG_ATTENTION_PLUGIN_ABI), its size. Each failure
 * is a message that names FILE. */
#ifndef TG_ATTN_PLUGIN_H
#define TG_ATTN_PLUGIN_H
#include <stddef.h>

#include "tg_core.h"
#include "tg_ops.h"

typedef struct tg_attn_plugin {
    char path[4096];      /* the file as opened (absolute) */
    char symbol[128];     /* up to 127 bytes */
    char sha256[65];      /* of the bytes loaded: the plugin's identity in logs and checkpoints */
    void *handle;
    int abi;              /* TG_ATTENTION_PLUGIN_ABI (1, through an adapter, before 0.20) */
    tg_attn_kernel kernel;/* what to call: tg_attn_kernel_call(ctx, &p->kernel, args) */
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

/* "ABI 2: grouped heads, window; conventions: causal only", into buf. */
const char *tg_attn_plugin_describe(const tg_attn_plugin *p, char *buf, size_t len);

#endif
