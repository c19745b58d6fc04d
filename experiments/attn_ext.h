/* attn_scale's kernel from outside: a plugin (--attn plugin:FILE.so[:SYMBOL])
 * or a kernel in another process (--attn exec:CMD). One place that opens it,
 * says what it is, gives the run's identity for it and closes it, so the
 * program treats both alike.
 *
 * What identifies an exec kernel for a resume (the settings attn_ext_settings
 * adds): the command with every whitespace-separated word that names a regular
 * file (as the shell would find it from here: a path, relative or absolute)
 * replaced by "sha256:" and the file's digest, plus the name and the features
 * the kernel greets with. So a resume may move or rename the kernel's files but
 * not change a byte of them, nor any other word of the command. Not covered:
 * the environment, programs found on PATH (python3), modules the kernel
 * imports: name them in the command or put a version in the kernel's name. */
#ifndef ATTN_EXT_H
#define ATTN_EXT_H
#include <stddef.h>
#include <stdio.h>

#include "attn_cfg.h"
#include "tg_attn_exec.h"
#include "tg_attn_plugin.h"
#include "tg_checkpoint.h"

typedef struct {
    int kind;                  /* ATTN_PLUGIN or ATTN_EXEC; 0: none */
    tg_attn_plugin plugin;
    tg_attn_exec exec;
    const tg_attn_kernel *kernel;
    char ident[4096];          /* exec: the command, file words as sha256:HEX */
    char features[600];        /* exec: the features it declared (and its conventions, 0.17) */
    char what[4400];           /* "the attention plugin PATH:SYMBOL (sha256 ...)", "the exec kernel 'N' (exec:CMD)" */
    char who[4400];            /* "the plugin SPEC" (as given), or what */
} attn_ext;

/* Opens c's --attn when it is a plugin or an exec kernel (nothing to do
 * otherwise: kind 0), then checks that the kernel declares every feature the
 * model's flags use. 0, or -1 with a message in err ("--attn ..." when it did
 * not open; "--window needs window, which ..." when a feature is missing;
 * nothing left open). */
int attn_ext_open(attn_ext *e, const attn_cfg *c, const tg_model_cfg *mc, char *err, size_t errlen);
void attn_ext_close(attn_ext *e);

/* Appends the identity settings to s (room for 4); returns how many. */
int attn_ext_settings(const attn_ext *e, tg_setting *s);

/* The log's header lines about the kernel (not part of the identity). */
void attn_ext_header(const attn_ext *e, FILE *f);

/* The log header's keys about the kernel that a resume may change. */
extern const char *const attn_ext_moved[];

#endif
