/* The BLAS kernel choice: the ranking of cores and CPUs, the start-up decision
 * (a pure function: every case runs on any machine), the self-check's hooks. */
#define _POSIX_C_SOURCE 200809L   /* setenv */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tg_blas.h"

static const tg_cpu_features AVX512 = {1, 1, 1, 1, 1, 1, 1, 1, 1};
static const tg_cpu_features AVX2 = {.sse3 = 1, .sse4_2 = 1, .avx = 1, .avx2 = 1, .fma = 1};
static const tg_cpu_features AVX = {.sse3 = 1, .sse4_2 = 1, .avx = 1};
static const tg_cpu_features SSE3 = {.sse3 = 1};

static void test_tiers(void **st) {
    (void)st;
    struct { const char *core; int tier; } c[] = {
        {"SkylakeX", 4}, {"Cooperlake", 4}, {"skylakex", 4}, {"Haswell", 3}, {"Zen", 3}, {"Excavator", 3},
        {"Steamroller", 2}, {"Piledriver", 2}, {"Bulldozer", 2}, {"Sandybridge", 2}, {"Nehalem", 1},
        {"Prescott", 0}, {"Core2", 0}, {"Barcelona", 0}, {"Opteron", -1}, {"Katmai", -1},
        {"NoSuchCore", TG_TIER_UNKNOWN}, {"", TG_TIER_UNKNOWN}, {NULL, TG_TIER_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) assert_int_equal(tg_blas_core_tier(c[i].core), c[i].tier);

    assert_int_equal(tg_cpu_tier(&AVX512), 4);
    assert_int_equal(tg_cpu_tier(&AVX2), 3);
    assert_int_equal(tg_cpu_tier(&AVX), 2);
    assert_int_equal(tg_cpu_tier(&SSE3), 0);
    assert_int_equal(tg_cpu_tier(&(tg_cpu_features){0}), TG_TIER_NONE);
    tg_cpu_features no_vl = AVX512, no_fma = AVX2;   /* SkylakeX's kernels need all four; Haswell's need FMA */
    no_vl.avx512vl = 0;
    no_fma.fma = 0;
    assert_int_equal(tg_cpu_tier(&no_vl), 3);
    assert_int_equal(tg_cpu_tier(&no_fma), 2);
    assert_string_equal(tg_blas_best_core(&AVX512), "SkylakeX");
    assert_string_equal(tg_blas_best_core(&AVX2), "Haswell");
    assert_string_equal(tg_blas_best_core(&AVX), "Sandybridge");
    assert_string_equal(tg_blas_best_core(&(tg_cpu_features){.sse3 = 1, .sse4_2 = 1}), "Nehalem");
    assert_string_equal(tg_blas_best_core(&SSE3), "Prescott");
    assert_null(tg_blas_best_core(&(tg_cpu_features){0}));
    /* every tier's core ranks as that tier: what we set is what we judge */
    for (int t = 0; t <= TG_TIER_TOP; t++) assert_int_equal(tg_blas_core_tier(tg_blas_tier_core(t)), t);
    assert_null(tg_blas_tier_core(-1));
    assert_null(tg_blas_tier_core(5));
    /* this machine's own answer is some tier (which one depends on it) */
    tg_cpu_features here = tg_cpu_detect();
    assert_true(tg_cpu_tier(&here) >= TG_TIER_NONE && tg_cpu_tier(&here) <= TG_TIER_TOP);
}

/* One row of the decision table. */
typedef struct {
    const char *what;
    tg_cpu_features cpu;
    const char *core, *user, *asked;
    int restarts, check, can_restart;
    tg_blas_action action;
    const char *set;     /* RESTART: the core it sets */
    const char *says;    /* a piece of the message ("" for none) */
} row;

static void test_decide_table(void **st) {
    (void)st;
    const int N = TG_CHECK_NOT_RUN, P = TG_CHECK_PASSED, M = TG_CHECK_MISMATCH, C = TG_CHECK_CRASHED;
    const row rows[] = {
        /* the case: an AVX-512 Xeon OpenBLAS does not know */
        {"Prescott on AVX-512", AVX512, "Prescott", NULL, NULL, 0, N, 1, TG_BLAS_RESTART, "SkylakeX",
         "OpenBLAS picked its Prescott kernel but this CPU has AVX-512: restarting once with OPENBLAS_CORETYPE=SkylakeX"},
        {"Haswell on AVX-512", AVX512, "Haswell", NULL, NULL, 0, N, 1, TG_BLAS_RESTART, "SkylakeX", "AVX-512"},
        {"AMD Zen on AVX-512", AVX512, "Zen", NULL, NULL, 0, N, 1, TG_BLAS_RESTART, "SkylakeX", "Zen"},
        {"Prescott on AVX2", AVX2, "Prescott", NULL, NULL, 0, N, 1, TG_BLAS_RESTART, "Haswell", "AVX2+FMA"},
        {"Piledriver on AVX", AVX, "Piledriver", NULL, NULL, 0, N, 1, TG_BLAS_CHECK, NULL, ""},
        /* a fitting kernel: check, then nothing */
        {"Haswell on AVX2", AVX2, "Haswell", NULL, NULL, 0, N, 1, TG_BLAS_CHECK, NULL, ""},
        {"Haswell on AVX2, passed", AVX2, "Haswell", NULL, NULL, 0, P, 1, TG_BLAS_GO, NULL, ""},
        {"Excavator on AVX2", AVX2, "Excavator", NULL, NULL, 0, N, 1, TG_BLAS_CHECK, NULL, ""},
        {"Cooperlake on AVX-512", AVX512, "Cooperlake", NULL, NULL, 0, N, 1, TG_BLAS_CHECK, NULL, ""},
        {"a core we do not know: no guess", AVX512, "FutureLake", NULL, NULL, 0, N, 1, TG_BLAS_CHECK, NULL, ""},
        {"a core better than the CPU's", AVX2, "SkylakeX", NULL, NULL, 0, P, 1, TG_BLAS_GO, NULL, ""},
        /* the user's variable is never replaced */
        {"user Haswell on AVX-512", AVX512, "Haswell", "Haswell", NULL, 0, N, 1, TG_BLAS_CHECK, NULL, ""},
        {"user Haswell, passed", AVX512, "Haswell", "Haswell", NULL, 0, P, 1, TG_BLAS_WARN, NULL,
         "note: OPENBLAS_CORETYPE=Haswell keeps OpenBLAS on its Haswell kernel although this CPU has AVX-512"},
        {"user SkylakeX, passed", AVX512, "SkylakeX", "SkylakeX", NULL, 0, P, 1, TG_BLAS_GO, NULL, ""},
        {"user bogus name", AVX512, "Cooperlake", "bogus", NULL, 0, P, 1, TG_BLAS_GO, NULL, ""},
        {"user's core fails the check", AVX512, "SkylakeX", "SkylakeX", NULL, 0, M, 1, TG_BLAS_WARN, NULL,
         "WARNING: the SkylakeX kernel (OPENBLAS_CORETYPE=SkylakeX, set by you) failed the sgemm self-check (x)"},
        {"user's core crashes", AVX2, "SkylakeX", "SkylakeX", NULL, 0, C, 1, TG_BLAS_FAIL, NULL,
         "crashed in the sgemm self-check (x); unset OPENBLAS_CORETYPE"},
        {"user's core and a marker", AVX512, "Prescott", "Prescott", "SkylakeX", 1, M, 1, TG_BLAS_WARN, NULL,
         "keeping it"},
        /* the marker: no second upgrade, whatever OpenBLAS did with our ask */
        {"after our restart", AVX512, "SkylakeX", NULL, "SkylakeX", 1, N, 1, TG_BLAS_CHECK, NULL, ""},
        {"after our restart, passed", AVX512, "SkylakeX", NULL, "SkylakeX", 1, P, 1, TG_BLAS_GO, NULL, ""},
        {"our ask ignored", AVX512, "Prescott", NULL, "SkylakeX", 1, N, 1, TG_BLAS_CHECK, NULL, ""},
        {"our ask ignored, passed", AVX512, "Prescott", NULL, "SkylakeX", 1, P, 1, TG_BLAS_GO, NULL, ""},
        {"a mangled marker", AVX512, "Prescott", NULL, NULL, TG_BLAS_MAX_RESTARTS, N, 1, TG_BLAS_CHECK, NULL, ""},
        /* a failed check: the next kernel down */
        {"SkylakeX mismatch", AVX512, "SkylakeX", NULL, "SkylakeX", 1, M, 1, TG_BLAS_RESTART, "Haswell",
         "the sgemm self-check failed with the SkylakeX kernel (x): restarting with OPENBLAS_CORETYPE=Haswell"},
        {"OpenBLAS's own pick fails", AVX512, "Cooperlake", NULL, NULL, 0, M, 1, TG_BLAS_RESTART, "Haswell", ""},
        {"Haswell crashes", AVX2, "Haswell", NULL, "Haswell", 1, C, 1, TG_BLAS_RESTART, "Sandybridge", "crashed with"},
        {"below both core and ask", AVX512, "Haswell", NULL, "SkylakeX", 1, M, 1, TG_BLAS_RESTART, "Sandybridge", ""},
        {"below the ask if OpenBLAS ignored it", AVX512, "SkylakeX", NULL, "Sandybridge", 3, M, 1, TG_BLAS_RESTART,
         "Nehalem", ""},
        {"unknown core fails: the CPU's best", AVX512, "FutureLake", NULL, NULL, 0, M, 1, TG_BLAS_RESTART, "SkylakeX",
         ""},
        {"never above the CPU", AVX2, "Zen", NULL, NULL, 0, M, 1, TG_BLAS_RESTART, "Sandybridge", ""},
        {"Nehalem fails", AVX512, "Nehalem", NULL, "Nehalem", 4, M, 1, TG_BLAS_RESTART, "Prescott", ""},
        /* ... and the end of the chain */
        {"the lowest fails", AVX512, "Prescott", NULL, "Prescott", 5, M, 1, TG_BLAS_FAIL, NULL,
         "with the Prescott kernel (x) and there is no lower kernel to try"},
        {"restarts used up", AVX512, "SkylakeX", NULL, NULL, TG_BLAS_MAX_RESTARTS, M, 1, TG_BLAS_FAIL, NULL,
         "the restarts are used up"},
        {"no SSE3 at all", (tg_cpu_features){0}, "Prescott", NULL, NULL, 0, M, 1, TG_BLAS_FAIL, NULL, "no lower"},
        /* a restart that could not happen */
        {"restart impossible: check instead", AVX512, "Prescott", NULL, NULL, 0, N, 0, TG_BLAS_CHECK, NULL, ""},
        {"restart impossible, passed", AVX512, "Prescott", NULL, NULL, 0, P, 0, TG_BLAS_GO, NULL, ""},
        {"restart impossible, failed", AVX512, "SkylakeX", NULL, NULL, 0, M, 0, TG_BLAS_FAIL, NULL,
         "could not restart itself"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const row *r = &rows[i];
        tg_blas_state s = {.cpu = r->cpu, .core = r->core, .user_core = r->user, .asked = r->asked,
                           .restarts = r->restarts, .check = r->check, .check_detail = "x",
                           .can_restart = r->can_restart};
        tg_blas_decision p = tg_blas_decide(&s);
        if (p.action != r->action || (r->set && (!p.core || strcmp(p.core, r->set))) || !strstr(p.msg, r->says))
            fail_msg("%s: action %d core %s msg '%s'; want %d %s '%s'", r->what, p.action, p.core ? p.core : "-", p.msg,
                     r->action, r->set ? r->set : "-", r->says);
        if (p.action == TG_BLAS_RESTART || p.action == TG_BLAS_WARN || p.action == TG_BLAS_FAIL)
            assert_null(strchr(p.msg, '\n'));   /* one line */
    }
}

/* No loop, whatever happens: run the whole start-up as tg_blas_ensure would,
 * every check failing (or crashing), for every CPU tier, every core OpenBLAS
 * might pick, and an OpenBLAS that honours our ask or ignores it. */
static void test_chain_ends(void **st) {
    (void)st;
    const tg_cpu_features cpus[] = {AVX512, AVX2, AVX, {.sse3 = 1, .sse4_2 = 1}, SSE3, {0}};
    const char *picks[] = {"Prescott", "Nehalem", "Sandybridge", "Haswell", "Zen", "SkylakeX", "Cooperlake", "Weird"};
    for (size_t c = 0; c < sizeof cpus / sizeof cpus[0]; c++)
        for (size_t k = 0; k < sizeof picks / sizeof picks[0]; k++)
            for (int honour = 0; honour < 2; honour++)
                for (int crash = 0; crash < 2; crash++) {
                    tg_blas_state s = {.cpu = cpus[c], .core = picks[k], .check_detail = "x", .can_restart = 1};
                    int processes = 1, prev = 100, end = -1;
                    while (end < 0) {
                        assert_true(processes <= TG_BLAS_MAX_RESTARTS + 1);
                        tg_blas_decision p = tg_blas_decide(&s);
                        if (p.action == TG_BLAS_CHECK) {
                            s.check = crash ? TG_CHECK_CRASHED : TG_CHECK_MISMATCH;
                            continue;
                        }
                        if (p.action != TG_BLAS_RESTART) {
                            end = p.action;
                            break;
                        }
                        int t = tg_blas_core_tier(p.core);
                        assert_true(t >= 0 && t <= tg_cpu_tier(&cpus[c]));   /* never above the CPU */
                        if (s.restarts > 0) assert_true(t < prev);          /* every step down asks for less */
                        prev = t;
                        /* the new process: the marker, and the core OpenBLAS loads */
                        s = (tg_blas_state){.cpu = cpus[c], .core = honour ? p.core : picks[k], .asked = p.core,
                                            .restarts = s.restarts + 1, .check_detail = "x", .can_restart = 1};
                        processes++;
                    }
                    assert_int_equal(end, TG_BLAS_FAIL);   /* everything failed: it says so and stops */
                }
}

static void test_same_kernel(void **st) {
    (void)st;
    assert_true(tg_blas_same_kernel("OpenBLAS 0.3.21 core=SkylakeX chosen_by=tapegrad threads=1 omp_threads=2",
                                    "OpenBLAS 0.3.21 core=SkylakeX chosen_by=user threads=1 omp_threads=1"));
    assert_false(tg_blas_same_kernel("OpenBLAS 0.3.21 core=Haswell chosen_by=user threads=1",
                                     "OpenBLAS 0.3.21 core=SkylakeX chosen_by=user threads=1"));
    assert_false(tg_blas_same_kernel("OpenBLAS 0.3.21 core=Haswell", "OpenBLAS 0.3.26 core=Haswell"));
    assert_false(tg_blas_same_kernel("OpenBLAS 0.3.21 core=Sky", "OpenBLAS 0.3.21 core=SkylakeX"));
    /* libxsmm's target too: a line without one (before libxsmm) differs from one with */
    assert_true(tg_blas_same_kernel("OpenBLAS 0.3.21 core=Haswell threads=1 libxsmm=hsw",
                                    "OpenBLAS 0.3.21 core=Haswell threads=2 libxsmm=hsw"));
    assert_false(tg_blas_same_kernel("OpenBLAS 0.3.21 core=Haswell threads=1 libxsmm=hsw",
                                     "OpenBLAS 0.3.21 core=Haswell threads=1 libxsmm=cpx"));
    assert_false(tg_blas_same_kernel("OpenBLAS 0.3.21 core=Haswell threads=1",
                                     "OpenBLAS 0.3.21 core=Haswell threads=1 libxsmm=hsw"));
    tg_blas_info b;
    char line[256];
    tg_blas_info_get(&b);
    assert_string_equal(b.name, "OpenBLAS");
    assert_true(tg_blas_core_tier(b.core) != TG_TIER_UNKNOWN);   /* a name the table knows */
    tg_blas_info_str(&b, line, sizeof line);
    assert_non_null(strstr(line, "core="));
    assert_non_null(strstr(line, " libxsmm="));
    assert_true(tg_blas_same_kernel(line, line));
}

/* The real check on the kernel this test runs with, and its test hooks. */
static void test_selfcheck(void **st) {
    (void)st;
    char detail[256];
    tg_blas_info b;
    tg_blas_info_get(&b);
    unsetenv("TG_BLAS_TEST_FAIL");
    assert_int_equal(tg_blas_selfcheck(b.core, detail, sizeof detail), TG_CHECK_PASSED);
    setenv("TG_BLAS_TEST_FAIL", "Nehalem,*", 1);
    assert_int_equal(tg_blas_selfcheck(b.core, detail, sizeof detail), TG_CHECK_MISMATCH);
    assert_non_null(strstr(detail, "the double loop gives"));
    setenv("TG_BLAS_TEST_FAIL", "NoSuchCore", 1);   /* another core: not this one */
    assert_int_equal(tg_blas_selfcheck(b.core, detail, sizeof detail), TG_CHECK_PASSED);
    setenv("TG_BLAS_TEST_FAIL", "NoSuchCore:crash", 1);
    assert_int_equal(tg_blas_selfcheck("nosuchcore", detail, sizeof detail), TG_CHECK_CRASHED);
    assert_non_null(strstr(detail, "signal 4"));   /* SIGILL, in the child only: we are still here */
    setenv("TG_BLAS_TEST_FAIL", "NoSuchCore:crashy", 1);   /* not the crash hook, not a mismatch either */
    assert_int_equal(tg_blas_selfcheck("NoSuchCore", detail, sizeof detail), TG_CHECK_PASSED);
    unsetenv("TG_BLAS_TEST_FAIL");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiers),       cmocka_unit_test(test_decide_table), cmocka_unit_test(test_chain_ends),
        cmocka_unit_test(test_same_kernel), cmocka_unit_test(test_selfcheck),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
