/* The BLAS underneath: what it is, and making sure its kernel fits the CPU.
 *
 * Debian's OpenBLAS (DYNAMIC_ARCH) picks its kernels ("core") when it loads,
 * from the CPU it recognises; a CPU newer than the library falls back to an
 * older kernel (an AVX-512 Xeon got the SSE3 "Prescott" kernels, 2.5-7x
 * slower). OPENBLAS_CORETYPE chooses the core, but only before the library
 * loads: so a program that finds a weak kernel sets it and re-executes itself.
 *
 * The decision is a pure function (tg_blas_decide) of the CPU's features, the
 * core in use, the user's OPENBLAS_CORETYPE, the re-execution marker and the
 * sgemm self-check's result; tg_blas_ensure gathers those and acts on it.
 * Nothing here keeps state: the marker lives in the environment. */
#ifndef TG_BLAS_H
#define TG_BLAS_H

#include <stddef.h>

/* ---- what runs ------------------------------------------------------------- */
typedef struct tg_blas_info {
    char name[32];       /* "OpenBLAS" */
    char version[32];    /* "0.3.21" */
    char core[32];       /* the kernel set in use: "SkylakeX" */
    const char *chosen_by;   /* "openblas" (its own detection), "tapegrad" or "user" */
    int blas_threads;    /* OpenBLAS's threads */
    int threads;         /* tapegrad's (OpenMP) threads */
    char xsmm[16];       /* libxsmm's code target for the small products (ops/gemm.c): "cpx" */
    int xsmm_bits;       /* its vector width (libxsmm's arch id): 512 (AVX-512), 256 (AVX, AVX2), 128 below */
} tg_blas_info;

void tg_blas_info_get(tg_blas_info *b);
/* "OpenBLAS 0.3.21 core=SkylakeX chosen_by=tapegrad threads=1 omp_threads=2
 * libxsmm=cpx" (threads: OpenBLAS's) into buf; returns buf. */
const char *tg_blas_info_str(const tg_blas_info *b, char *buf, size_t len);

/* 1 if two tg_blas_info_str lines name the same library, version and core,
 * and the same libxsmm target or none in both (threads aside): the same
 * products bit for bit. */
int tg_blas_same_kernel(const char *a, const char *b);

/* ---- the CPU and the kernels' ranking -------------------------------------- */
typedef struct tg_cpu_features {
    int sse3, sse4_2, avx, avx2, fma, avx512f, avx512bw, avx512dq, avx512vl;
} tg_cpu_features;

tg_cpu_features tg_cpu_detect(void);   /* this CPU, as the OS lets us use it */

/* Tiers by instruction set, best first:
 *   4 AVX-512 F/BW/DQ/VL  SkylakeX (Cooperlake, SapphireRapids)
 *   3 AVX2 + FMA          Haswell (Zen, Excavator)
 *   2 AVX                 Sandybridge (Bulldozer, Piledriver, Steamroller)
 *   1 SSE4.2              Nehalem
 *   0 SSE3                Prescott (Core2, Penryn, Dunnington, Atom, Barcelona, Bobcat, Nano, Opteron_SSE3)
 *  -1 SSE2 or less        Katmai, Coppermine, Northwood, Banias, Athlon, Opteron
 * The first name of a tier is the core tapegrad sets for it. */
enum { TG_TIER_NONE = -1, TG_TIER_TOP = 4, TG_TIER_UNKNOWN = -100 };
int tg_blas_core_tier(const char *core);          /* TG_TIER_UNKNOWN for a name not listed */
int tg_cpu_tier(const tg_cpu_features *cpu);      /* the best tier the CPU can run */
const char *tg_blas_tier_core(int tier);          /* "SkylakeX" for 4 ...; NULL outside 0..4 */
const char *tg_blas_best_core(const tg_cpu_features *cpu);   /* NULL if not even SSE3 */

/* ---- the decision ------------------------------------------------------------ */
enum { TG_CHECK_NOT_RUN, TG_CHECK_PASSED, TG_CHECK_MISMATCH, TG_CHECK_CRASHED };
#define TG_BLAS_MAX_RESTARTS 6   /* one upgrade + one step down per tier, and then some */

typedef struct tg_blas_state {
    tg_cpu_features cpu;
    const char *core;        /* the core in use (openblas_get_corename) */
    const char *user_core;   /* OPENBLAS_CORETYPE as the user set it, NULL if not set */
    int restarts;            /* re-executions so far (from the marker) */
    const char *asked;       /* the core the last re-execution asked for, NULL if none */
    int check;               /* TG_CHECK_* */
    const char *check_detail;   /* what the self-check saw, for the message */
    int can_restart;         /* 0 once a re-execution failed */
} tg_blas_state;

typedef enum {
    TG_BLAS_GO,        /* nothing to do */
    TG_BLAS_WARN,      /* print msg, go on */
    TG_BLAS_CHECK,     /* run the self-check, set state.check, decide again */
    TG_BLAS_RESTART,   /* print msg, set OPENBLAS_CORETYPE=core, re-execute */
    TG_BLAS_FAIL,      /* print msg, exit non-zero */
} tg_blas_action;

typedef struct tg_blas_decision {
    tg_blas_action action;
    const char *core;    /* TG_BLAS_RESTART: the core to set (a static string) */
    char msg[512];       /* the stderr line, without the program's name */
} tg_blas_decision;

/* Pure: the same state gives the same plan on any machine. The rules:
 * - a core weaker than the CPU's best tier, no OPENBLAS_CORETYPE set, no
 *   re-execution yet: restart once with the CPU's best core;
 * - otherwise run the self-check; if it fails, restart with the best core of
 *   the next tier down (below both the core in use and the one last asked
 *   for, so every restart asks for less and the chain ends); when there is
 *   none (or the restarts are used up): fail;
 * - OPENBLAS_CORETYPE set by the user is never replaced: a weaker core or a
 *   failed check is a warning; a crash in the check fails, as the program
 *   would crash in its first product anyway. */
tg_blas_decision tg_blas_decide(const tg_blas_state *s);

/* ---- the self-check ------------------------------------------------------------ */
/* cblas_sgemm against a double-accumulated loop on a few shapes (every
 * transpose pair, odd sizes, strided operands, alpha/beta, the paths
 * OpenBLAS takes for small, "direct" and blocked products). Every element must
 * be within the float32 worst-case rounding bound. Runs in a child process, so
 * a kernel that crashes (or hangs: 10 s) is a failed check, not a dead
 * program. Returns TG_CHECK_PASSED, _MISMATCH or _CRASHED; detail gets a
 * description of a failure.
 * Test hook (a build with -DTG_TEST_HOOKS=ON only, as scripts/test.sh makes;
 * never an installed library): TG_BLAS_TEST_FAIL=core[:crash][,core...] ("*":
 * any core) makes the check of those cores fail by a wrong element (or a SIGILL). */
int tg_blas_selfcheck(const char *core, char *detail, size_t len);

/* ---- start-up ------------------------------------------------------------------ */
#define TG_BLAS_MARKER "TG_BLAS_RESTART"   /* "<restarts>:<core asked for>" */

/* The start's facts as tg_blas_decide takes them: this CPU, OpenBLAS's core,
 * the marker of an earlier restart (its core into asked, len bytes), the
 * user's OPENBLAS_CORETYPE; the check not run (detail: where the caller keeps
 * the self-check's words), restarts possible. The program's start
 * (tg_runtime_init, the training kit's tg_runtime.h) decides with it and acts:
 * this library never re-executes a process. Test hook (TG_TEST_HOOKS builds):
 * with TG_BLAS_TEST_AS_DETECTED=1 (and no marker), the core OPENBLAS_CORETYPE
 * loaded counts as OpenBLAS's own pick, not the user's. */
void tg_blas_start_state(tg_blas_state *s, char *asked, size_t len, const char *detail);

/* Threads for the library's ops: n OpenMP threads, OpenBLAS single-threaded (the
 * ops split batch, heads and rows themselves; OpenBLAS's own threads would
 * allocate per call). Every result is the same for any n (docs/speed.md#threads).
 * The kit's tg_runtime_init calls it; call it again to change the count. */
void tg_set_threads(int n);

#endif
