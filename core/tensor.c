#include "tg_core.h"

#include <stdint.h>
#include <stdio.h>

int64_t tg_numel_of(int ndim, const int *shape) {
    /* at most what a float array's byte count (size_t) can hold, and int64 */
    const int64_t most = (int64_t)((SIZE_MAX / sizeof(float)) < (size_t)INT64_MAX ? SIZE_MAX / sizeof(float) : INT64_MAX);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] > 0 && n > most / shape[i])) return -1;
        n *= shape[i];
    }
    return n;
}

int tg_same_shape(const tg_tensor *a, const tg_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

int tg_is_trailing_shape(const tg_tensor *a, const tg_tensor *b) {
    if (b->ndim > a->ndim) return 0;
    for (int i = 0; i < b->ndim; i++)
        if (b->shape[i] != a->shape[a->ndim - b->ndim + i]) return 0;
    return 1;
}

const char *tg_shape_str(const tg_tensor *t, char *buf) {
    int k = snprintf(buf, TG_SHAPE_BUF, "[");
    for (int i = 0; i < t->ndim && k < TG_SHAPE_BUF; i++)
        k += snprintf(buf + k, (size_t)(TG_SHAPE_BUF - k), i ? ",%d" : "%d", t->shape[i]);
    if (k < TG_SHAPE_BUF) snprintf(buf + k, (size_t)(TG_SHAPE_BUF - k), "]");
    return buf;
}
