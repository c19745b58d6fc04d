/* Synthetic tasks, generated on the fly from a seeded PCG32 (no data files).
 * Each fills tokens [B*T] and targets [B*T] (-1 = position not scored).
 *
 * hist (default): tokens from an alphabet of A symbols after a BOS token; the
 *   target at position i is how many times x_i has occurred in x_1..x_i
 *   (class count-1, clipped to the vocabulary). Counting needs attention spread
 *   evenly over all earlier copies of a token: a head that always picks one
 *   token cannot do it. The optimum is 0 (the target is a function of the
 *   prefix).
 * code: byte-level next-token prediction over a text corpus (tg_corpus.h): a
 *   window of seq_len bytes from its training part, each target the next byte;
 *   vocabulary 256. The optimum is unknown (NaN); the context-free reference is
 *   H(next byte | this byte) of the training part.
 * recall (control): the first half holds (key, value) pair tokens from a random
 *   per-sequence map of K keys to NV values; the second half holds query tokens
 *   of keys that appeared; the target at a query is the key's value. One sharp
 *   look at the matching pair is the right answer; optimum 0. */
#ifndef TG_TASKS_H
#define TG_TASKS_H
#include "tg_core.h"

/* Internal to the training kit since 0.18 (the toy model's synthetic tasks): not installed, and hidden
 * in a shared libtapegrad_train; the programs and tests here link the kit's objects. */
#pragma GCC visibility push(hidden)

enum { TG_TASK_HIST, TG_TASK_RECALL, TG_TASK_CODE, TG_TASK_COUNT };
extern const char *const tg_task_names[];   /* NULL-terminated, for --task */

struct tg_corpus;

typedef struct {
    int kind;
    int vocab, seq_len;
    const struct tg_corpus *corpus;   /* code: the text (tg_corpus.h); vocab must be 256 */
    int alphabet;          /* hist: symbols 0..A-1, BOS = A */
    int keys, values;      /* recall: pair token k*NV+v, query token K*NV+k */
} tg_task_cfg;

/* Checks the sizes fit the vocabulary; on a problem writes why into err and
 * returns non-zero. */
int tg_task_check(const tg_task_cfg *t, char *err, size_t errlen);
void tg_task_batch(const tg_task_cfg *t, tg_rng *rng, int B, int *tokens, int *targets);

/* Reference losses in nats per scored position:
 * optimal: the best any model can do (0 for both tasks: targets are
 *   functions of the prefix);
 * context_free: the best a model that sees only the current token and its
 *   position can do (exact, from the target distribution). */
typedef struct { double optimal, context_free; } tg_task_refs;
tg_task_refs tg_task_reference(const tg_task_cfg *t);

#pragma GCC visibility pop
#endif
