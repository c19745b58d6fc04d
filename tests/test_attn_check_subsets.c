/* attn_check sends a kernel only what it declared (issue 38, part 3): tg_attend
 * itself, declaring exactly one feature, then random subsets of them, passes
 * the whole battery; a probe that hands it an undeclared feature would be
 * refused at the gate (tg_attn_kernel_call) and fail the check. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "tg_attn_check.h"

static int check_subset(unsigned feats) {
    char name[64];
    snprintf(name, sizeof name, "tg_attend declaring 0x%03x", feats);
    const tg_attn_kernel K = {sizeof(tg_attn_kernel), TG_ATTENTION_PLUGIN_ABI, feats, name, tg_attend, NULL, NULL, NULL, 0, 0};
    tg_attn_check_report r = {0};
    const int rc = tg_attn_check(&K, &(tg_attn_check_opts){.d_head = 8}, &r);
    if (rc || r.failed) {
        char buf[300];
        print_error("%s (%s):\n", name, tg_attn_features_str(feats, buf, sizeof buf));
        for (int i = 0; i < r.n; i++)
            if (r.lines[i].status == TG_ATTN_CHECK_FAIL || r.lines[i].status == TG_ATTN_CHECK_CRASH)
                print_error("  FAIL %s %s: %s\n", r.lines[i].check, r.lines[i].what, r.lines[i].text);
    }
    tg_attn_check_free(&r);
    return rc;
}

/* every feature of the table (ops/attn_tables.h) has the probe that checks it: a feature added without
 * one fails here */
static void test_every_feature_has_a_probe(void **s) {
    (void)s;
    for (int i = 0; i < TG_ATTN_N_FEATURES; i++) {
        const tg_attn_feature *f = tg_attn_feature_row(i);
        assert_int_equal(f->bit, 1u << i);
        assert_non_null(f->uses);
        if (!tg_attn_check_probe_of(f->bit)) fail_msg("feature %s has no probe in attn_check", f->token);
    }
    assert_null(tg_attn_check_probe_of(1u << TG_ATTN_N_FEATURES));
    for (int i = 0; i < TG_ATTN_N_CONVENTIONS; i++)   /* the conventions' rows in bit order too */
        assert_int_equal(tg_attn_convention_row(i)->bit, 1u << i);
}

static void test_each_feature_alone(void **s) {
    (void)s;
    int bad = 0;
    for (int i = 0; i < TG_ATTN_N_FEATURES; i++) bad += check_subset(1u << i) != 0;
    assert_int_equal(bad, 0);
}

static void test_random_subsets(void **s) {
    (void)s;
    tg_rng rng;
    tg_rng_seed(&rng, 38, 3);
    int bad = 0;
    for (int k = 0; k < 8; k++) bad += check_subset(tg_rng_u32(&rng) & TG_ATTN_F_ALL) != 0;
    bad += check_subset(0) != 0;   /* the textbook kernel */
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_feature_has_a_probe),
        cmocka_unit_test(test_each_feature_alone),
        cmocka_unit_test(test_random_subsets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
