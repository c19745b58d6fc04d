/* A text corpus for the byte-level task `code`: files concatenated in a fixed
 * order, read once, split into training and validation bytes.
 *
 * What it is made of (spec):
 *   FILE          that file
 *   FOLDER        every regular file under it, recursively, in byte order of the path
 *   @LIST         the paths listed in LIST, one a line (files or folders; '#' lines
 *                 and empty lines skipped), each expanded as above, in the order given
 *   NULL          the default: the C headers (.h) of Debian's libc6-dev, as
 *                 `dpkg -L libc6-dev` lists them, sorted (present wherever tapegrad
 *                 builds: build-essential brings it)
 * Bytes are bytes: a binary file is allowed, and non_text counts the bytes that
 * are not printable ASCII, tab, newline or carriage return.
 *
 * The split: the last 10% of the bytes are the validation part (at least one
 * window + 1 of each). Training windows are drawn uniformly from the training
 * part with the run's data RNG; the validation windows are fixed: TG_CORPUS_VAL
 * windows at evenly spaced offsets of the validation part, the same every run.
 *
 * Refused, with a message that names the path: a missing or unreadable path, an
 * empty file, a folder with no files, a @LIST that names itself, a corpus too
 * short for one window + 1 in each part, no dpkg (then name one with --data). */
#ifndef TG_CORPUS_H
#define TG_CORPUS_H
#include <stddef.h>

#include "tg_core.h"

/* Internal to the training kit since 0.18 (the code task's corpus): not installed, and hidden
 * in a shared libtapegrad_train; the programs and tests here link the kit's objects. */
#pragma GCC visibility push(hidden)

#define TG_CORPUS_VAL 64   /* validation windows */

typedef struct tg_corpus {
    unsigned char *bytes;
    size_t n, n_train;     /* [0, n_train): training, [n_train, n): validation */
    int n_files;
    size_t non_text;
    char sha256[65];       /* of the bytes, as concatenated */
    char source[300];      /* "libc6-dev 2.36-9+deb12u14 (dpkg -L)" or the spec */
} tg_corpus;

/* window: the sequence length (a window is window + 1 bytes). 0, or -1 with err. */
int tg_corpus_load(tg_corpus *c, const char *spec, int window, char *err, size_t errlen);
void tg_corpus_free(tg_corpus *c);

/* B training windows from rng: tokens[b*T + t] = byte, targets = the next byte. */
void tg_corpus_batch(const tg_corpus *c, tg_rng *rng, int B, int T, int *tokens, int *targets);
/* Validation windows first .. first+B-1 (of TG_CORPUS_VAL). */
void tg_corpus_val_batch(const tg_corpus *c, int first, int B, int T, int *tokens, int *targets);

/* H(next byte | this byte) over the training part, in nats: the best a model that
 * sees only the current token can do (the context-free reference). */
double tg_corpus_bigram_entropy(const tg_corpus *c);

#pragma GCC visibility pop
#endif
