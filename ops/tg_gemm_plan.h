/* The product plan: which library makes each matrix product shape on this
 * machine (libxsmm's JIT kernels or OpenBLAS), measured here, kept, reused.
 *
 * Like FFTW, the program plans before it computes, and a product never does
 * more than look its shape up: no file, no lock, no timing inside a product.
 * Planning is a phase the program runs:
 *   1. tg_gemm_plan_setup(spec): the mode; in measure=DIR mode the machine's
 *      plan file is read now (imported), FILE mode likewise;
 *   2. a planning pass: the program runs its products once (a step's forward
 *      and backward: tg_train does; the benchmarks their warm-up). A shape
 *      not in the plan is estimated, and in measure mode marked wanted;
 *   3. tg_gemm_plan_measure(): times each wanted shape on both libraries
 *      (a few ms each), keeps the faster (the estimate's pick unless the other
 *      is more than 3% faster: near ties do not flip between measurements),
 *      and in measure=DIR mode adds them to the plan file (exported), which
 *      every later run reuses.
 * After that a shape's decision never changes in the process. A shape first
 * met after the last tg_gemm_plan_measure keeps the estimate until the next.
 * Where nothing may be measured the fixed rule per instruction set decides
 * (deterministic).
 *
 * The mode is the program's decision, set with tg_gemm_plan_setup (or
 * the training kit's tg_gemm_plan_setup_env, tg_cli.h, which reads TG_PLAN) before its first product; a
 * library that no program set up estimates every product, and never reads an
 * environment variable, creates a folder, takes a lock or writes a file of its
 * own:
 *   measure=DIR  the machine's plan file in the folder DIR (made if missing
 *              when tg_gemm_plan_measure keeps a shape), shapes not in it
 *              measured and added (attn_scale, bench_step, bench_gemm and
 *              bench_attn ask for it unless TG_PLAN says otherwise);
 *   measure    shapes measured, kept in this process only;
 *   estimate   the rule only, no file read or written (the default; tests, CI,
 *              attn_check, the other programs);
 *   FILE       that plan file, read-only; shapes not in it estimated.
 * The machine's plan file is DIR/gemm-plan-<16 hex of the machine key>.tsv;
 * the kit's tg_gemm_plan_setup_env turns TG_PLAN=measure (or its default "measure") into
 * DIR = $TG_PLAN_DIR, else $XDG_CACHE_HOME/tapegrad, else $HOME/.cache/tapegrad.
 * The file's second line is the machine key: the CPU (model name, family, model,
 * stepping), OpenBLAS's build and core, libxsmm's version and target, the
 * format version. A file whose key is not this machine's, from another library
 * version, or damaged anywhere is refused as a whole, with a message naming the
 * file (and line): measure mode then measures again and replaces it, FILE mode
 * estimates. Nothing crashes on a bad file.
 *
 * Runs started together: tg_gemm_plan_measure takes an exclusive POSIX record
 * lock (tg_file_lock) on the plan file's ".lock" beside it, re-reads the file
 * under the lock (another run may have just measured the same shapes),
 * measures only what is still missing, and replaces the file atomically
 * (tg_file.h) with the union: its rows as they are now, this process's
 * measured rows over them. So runs on one machine never time their products
 * at the same time, no run's rows are lost, and the file is never
 * half-written. A run that cannot hold the lock (a folder it cannot write, a
 * holder past 120 s) measures for itself and saves nothing. A plan file that
 * is not a regular file (a FIFO, a device) is refused without being opened
 * for long. A run that measures while others train on the same machine times
 * its products under their load (each time is the best of 9 rounds, which
 * keeps most of it out); to keep it out entirely, plan each configuration once
 * before starting the runs (attn_scale ... --steps 1 --warmup 0 without
 * --log, docs/speed.md#the-product-plan).
 *
 * The plan is part of the rounding: libxsmm and OpenBLAS sum in different
 * orders. tg_gemm_plan_name() names the decisions a process used (a short hash
 * of every (shape, library) looked up since the start or the last
 * tg_gemm_plan_reset_used): equal names, equal products, byte for byte. Logs
 * and bench lines carry it (docs/logs.md, docs/speed.md#the-product-plan).
 *
 * Process-wide, like libxsmm's own kernel registry: the plan describes the
 * machine, not a model, so two contexts share it. A shape decided before is
 * read without a lock (the products' hot path); a new shape is inserted under
 * a mutex. While tg_gemm_plan_measure times shapes, a product that meets one
 * waits for its decision. After fork() the child has its own copy, with a
 * shape another thread was measuring at the fork decided by the estimate.
 *
 * The library says nothing of its own: what the plan would report (a refused
 * file, a plan that could not be kept, a busy lock) goes to the callback the
 * program sets with tg_gemm_plan_on_note, each kind once a process; none set,
 * nothing is said. The kit's tg_gemm_plan_setup_env sets one that prints "PROG: ..." on
 * stderr. */
#ifndef TG_GEMM_PLAN_H
#define TG_GEMM_PLAN_H
#include <stddef.h>

enum { TG_PLAN_MEASURE, TG_PLAN_ESTIMATE, TG_PLAN_FILE };

/* Sets the mode ("measure", "measure=DIR", "estimate" or a plan file's path)
 * before the first product (again, too, until then), and reads the plan file
 * the mode names; later calls fail. 0, or -1 with the reason in err (FILE
 * mode: the file is refused, products are estimated). */
int tg_gemm_plan_setup(const char *spec, char *err, size_t errlen);

/* The planning phase's end: times every shape the products wanted since the
 * last call (measure modes; none in the others) and in measure=DIR mode adds
 * them to the plan file, under its lock. Call it between products (after a
 * planning pass, before the timed work), not inside a parallel region.
 * Returns how many shapes were timed (problems keeping them are notes). */
int tg_gemm_plan_measure(void);


/* Where the plan's notes go (msg without a newline), each kind once a process;
 * NULL: nowhere (the default). fn runs under the plan's lock: it must not call
 * the plan (print, log, return). */
void tg_gemm_plan_on_note(void (*fn)(const char *msg, void *user), void *user);

/* "3f2a91c0": the hash of the decisions used so far (8 hex digits) into buf
 * (at least 9 bytes); returns buf. "none" when no product was planned. */
#define TG_PLAN_NAME_BUF 16
const char *tg_gemm_plan_name(char *buf);

/* One line about the plan: mode, file, shapes measured / from the file /
 * estimated, and the counts per library, e.g.
 * "3f2a91c0 measure /root/.cache/tapegrad/gemm-plan-….tsv: 14 shapes (9 libxsmm, 5 openblas; 2 measured now)" */
const char *tg_gemm_plan_describe(char *buf, size_t len);

/* Forget which decisions were used (not the decisions): the next name covers
 * what is used from here on (a benchmark between sizes). */
void tg_gemm_plan_reset_used(void);

/* "measure", "estimate" or "file": the mode in use (what a run's log says beside the name). */
const char *tg_gemm_plan_mode(void);

/* The machine key (see above) into buf; returns buf. */
const char *tg_gemm_plan_machine(char *buf, size_t len);

#endif
