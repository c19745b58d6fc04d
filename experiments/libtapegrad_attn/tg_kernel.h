/* The kernel registry: one grammar and one function that open any attention kernel, for every
 * program (attn_scale --attn, attn_check KERNEL, a program of yours). Since 0.20.
 *
 *   saved | online           the built-in ops (attn_kernel.h): tg_attend, which saves the weights,
 *                            and tg_flash_attend, which recomputes them online; composed and fused,
 *                            their names before 0.20, open the same (and stay the runs' identity)
 *   builtin:NAME             the same (attn_check's spelling before 0.20)
 *   plugin:FILE[:SYMBOL]     a shared object's kernel (tg_attn_plugin.h)
 *   exec:CMD                 a kernel in another process (tg_attn_exec.h, docs/exec_protocol.md)
 *
 *   tg_kernel K;
 *   if (tg_kernel_open(&K, "plugin:mine.so", NULL, err, sizeof err)) ...   (err names the spec)
 *   tg_tensor *out = tg_attn_kernel_call(ctx, K.k, &args);
 *   tg_kernel_close(&K);
 *
 * What a kernel declares (features, conventions: attn_tables.h) is in K.k, the descriptor the gate
 * reads; tg_kernel_refuses_call asks the same of a program's calls before a run, and attn_check's
 * probes fit theirs to the same conventions. A kernel's identity for a run (what must not change on
 * a resume) and its log lines come from here too. */
#ifndef TG_KERNEL_H
#define TG_KERNEL_H
#include <stddef.h>
#include <stdio.h>

#include "tg_attn_exec.h"
#include "tg_attn_plugin.h"
#include "tg_core.h"
#include "tg_ops.h"

enum { TG_KERNEL_BUILTIN = 1, TG_KERNEL_PLUGIN, TG_KERNEL_EXEC };

typedef struct tg_kernel_opts {
    double exec_timeout;   /* seconds an exec kernel's reply may take (0: TG_ATTN_EXEC_TIMEOUT) */
} tg_kernel_opts;

typedef struct tg_kernel {
    int kind;                    /* TG_KERNEL_*; 0: not open */
    const tg_attn_kernel *k;     /* what to call: tg_attn_kernel_call(ctx, K->k, args) */
    const char *id;              /* the run's "attn" setting: composed, fused (0.19's words: a run's identity
                                    keeps them), plugin or exec */
    char spec[4200];             /* as given */
    char what[4400];             /* "the attention plugin PATH:SYMBOL (sha256 ...)", "the exec kernel 'N' (exec:CMD)",
                                    "the built-in op saved" */
    char who[4400];              /* "the plugin SPEC" (as given), or what */
    char declared[640];          /* what it declares, in words ("ABI 2: grouped heads; conventions: causal only") */
    tg_attn_plugin *plugin;      /* PLUGIN: the loaded file */
    tg_attn_exec *exec;          /* EXEC: the process */
    char exec_ident[4096];       /* EXEC: the command, each word that names a regular file as sha256:HEX */
    char exec_decl[600];         /* EXEC: its features (and conventions), as the identity records them */
} tg_kernel;

/* spec's kind (TG_KERNEL_*) and the text after its prefix (the built-in op's name, FILE[:SYMBOL],
 * CMD) in *rest, checked as far as can be without touching a file: 0, or -1 with why in err
 * ("'x': expected saved, online, plugin:FILE.so[:SYMBOL] or exec:CMD ..."). */
int tg_kernel_spec(const char *spec, int *kind, const char **rest, char *err, size_t errlen);

/* Opens spec (o may be NULL). 0, or -1 with a message in err naming what failed (nothing left
 * open). K must stay where it is while open (an exec kernel's calls point into it). */
int tg_kernel_open(tg_kernel *K, const char *spec, const tg_kernel_opts *o, char *err, size_t errlen);
/* Closes what tg_kernel_open opened (an exec kernel: asked to go, then reaped); K->kind 0 after. */
void tg_kernel_close(tg_kernel *K);

/* In a forked child of the process that opened K: an exec kernel gets a process of the child's own
 * (the parent's runs on); the others need nothing. 0, or -1 with a message in err. The sandbox
 * (tg_sandbox.h, opts.kernel) does this itself. */
int tg_kernel_reopen(tg_kernel *K, char *err, size_t errlen);

/* 1 when K computes what the built-in ops compute and fills their stats itself; 0 for a kernel
 * from outside, whose weights a program measures (tg_attn_probe.h). */
int tg_kernel_trusted(const tg_kernel *K);

/* Whether K takes a program's call (its shapes and settings, no data needed): 0, or 1 with a
 * message in err: "--window needs window, which the plugin K.so does not declare (ABI 2: ...)"
 * (the feature's flag from attn_tables.h) or, for a convention, "CONTEXT: the call is not causal
 * (its convention causal_only: causal only): the plugin K.so cannot run this model's attention (...)".
 * context: what the program's settings are called in that message ("--scale sqrt"). */
int tg_kernel_refuses_call(const tg_kernel *K, const tg_attn_args *a, const char *context, char *err, size_t errlen);

/* The run's identity of K, as key and value pairs into keys/values (room for 4): what a resume
 * must find the same. Returns how many. The "attn" key (K->id) is the program's to add. */
int tg_kernel_identity(const tg_kernel *K, const char **keys, const char **values);
/* The log header's lines about K that are not its identity ("# attn_plugin_file=..."): to f. */
void tg_kernel_header(const tg_kernel *K, FILE *f);
/* Those lines' keys, which a resume may change (NULL-terminated). */
extern const char *const tg_kernel_header_free[];

#endif
