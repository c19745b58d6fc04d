#include "tg_attn_log.h"

#include <math.h>

void tg_attn_log_columns(FILE *f, int layers, int heads, int part) {
    if (part == 1) {
        for (int l = 0; l < layers; l++)
            for (int h = 0; h < heads; h++) fprintf(f, "\tscale_l%d_h%d", l, h);
        return;
    }
    fprintf(f, "\tent_mean");
    for (int l = 0; l < layers; l++)
        for (int h = 0; h < heads; h++) fprintf(f, "\tent_l%d_h%d", l, h);
    for (int l = 0; l < layers; l++) fprintf(f, "\tmaxlogit_l%d", l);
    for (int l = 0; l < layers; l++) fprintf(f, "\tsat_l%d", l);
    for (int l = 0; l < layers; l++)
        for (int h = 0; h < heads; h++) fprintf(f, "\tnent_l%d_h%d", l, h);
}

double tg_attn_mean_entropy(const tg_attn_stats *st, int layers) {
    int nh = layers * st->H;
    double mean = 0;
    for (int i = 0; i < nh; i++) mean += st->entropy[i];
    return mean / nh;
}

void tg_attn_log_values(tg_runlog *L, const tg_attn_stats *st, int layers, double uniform, const float *mult,
                        int part) {
    const int H = st->H, nh = layers * H;
    if (part == 1) {
        for (int i = 0; i < nh; i++) tg_runlog_add(L, "\t%.6g", mult[i]);
        return;
    }
    tg_runlog_add(L, "\t%.6f", tg_attn_mean_entropy(st, layers));
    for (int i = 0; i < nh; i++) tg_runlog_add(L, "\t%.6f", st->entropy[i]);
    for (int l = 0; l < layers; l++) {
        float mx = -INFINITY;
        for (int h = 0; h < H; h++) {
            float x = st->max_logit[l * H + h];
            if (isnan(x) || x > mx) mx = x;
            if (isnan(x)) break;
        }
        tg_runlog_add(L, "\t%.4f", mx);
    }
    for (int l = 0; l < layers; l++) {
        double s = 0;
        for (int h = 0; h < H; h++) s += st->saturation[l * H + h];
        tg_runlog_add(L, "\t%.4f", s / H);
    }
    /* uniform 0: every row sees one key (--window 1), where uniform and one-hot are the same weights: 1 */
    for (int i = 0; i < nh; i++) tg_runlog_add(L, "\t%.6f", uniform > 0 ? st->entropy[i] / uniform : 1.0);
}
