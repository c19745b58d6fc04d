/* Parameters outlive the tape: declared once, laid out in one flat data buffer
 * and one flat grad buffer, so optimizers and grad clipping are single loops. */
#include "tg_core.h"

#include <stdlib.h>
#include <stdint.h>
#include <string.h>

void tg_params_init(tg_params *p) { memset(p, 0, sizeof *p); }

void tg_params_free(tg_params *p) {
    for (int i = 0; i < p->n; i++) free(p->list[i]);
    free(p->list);
    free(p->data);
    free(p->grad);
    memset(p, 0, sizeof *p);
}

tg_tensor *tg_param(tg_params *p, const char *name, int ndim, const int *shape) {
    if (p->allocated)
        tg_fail_h(&p->err, "tg_param: '%s' declared after tg_params_alloc", name);
    if (ndim < 1 || ndim > TG_MAX_DIMS)
        tg_fail_h(&p->err, "tg_param: '%s' has %d dimensions; 1 to %d allowed", name, ndim, TG_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0)
            tg_fail_h(&p->err, "tg_param: '%s' dimension %d is %d; sizes must be positive", name, i, shape[i]);
    if (tg_params_find(p, name))
        tg_fail_h(&p->err, "tg_param: a parameter named '%s' exists already", name);
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 32;
        tg_tensor **l = realloc(p->list, (size_t)cap * sizeof *l);
        if (!l) tg_fail_h(&p->err, "tg_param: out of memory");
        p->list = l;
        p->cap = cap;
    }
    const int64_t numel = tg_numel_of(ndim, shape);
    if (numel < 0 || p->numel > SIZE_MAX / sizeof(float) - (size_t)numel) {
        tg_tensor shown = {.ndim = ndim};
        memcpy(shown.shape, shape, (size_t)ndim * sizeof *shape);
        char buf[TG_SHAPE_BUF];
        tg_fail_h(&p->err, "tg_param %s: shape %s has more elements than memory can index", name,
                  tg_shape_str(&shown, buf));
    }
    size_t len = strlen(name) + 1;            /* the name is copied: callers may reuse buffers */
    tg_tensor *t = calloc(1, sizeof *t + len);
    if (!t) tg_fail_h(&p->err, "tg_param: out of memory");
    memcpy((char *)(t + 1), name, len);
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->numel = numel;
    t->requires_grad = 1;
    t->is_param = 1;
    t->lr_mult = 1.0f;
    t->name = (const char *)(t + 1);
    p->list[p->n++] = t;
    p->numel += (size_t)t->numel;
    return t;
}

tg_tensor *tg_param_decayed(tg_params *p, const char *name, int ndim, const int *shape) {
    tg_tensor *t = tg_param(p, name, ndim, shape);
    t->decay = 1;
    return t;
}

/* n floats, zeroed, on a 64-byte boundary (a cache line, an AVX-512 vector): calloc's
 * 16 put every row of a [.., 16·k] parameter across two lines, and the attention
 * tiles' vector loads and stores with it (bench_attn, whose q, k, v are parameters,
 * ran its backward on split lines) */
static float *zeroed64(size_t n) {
    if (n > (SIZE_MAX - 63) / sizeof(float)) return NULL;
    const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    float *x = aligned_alloc(64, bytes);
    if (x) memset(x, 0, bytes);
    return x;
}

void tg_params_alloc(tg_params *p) {
    if (p->allocated) tg_fail_h(&p->err, "tg_params_alloc: called twice");
    size_t n = p->numel ? p->numel : 1;
    p->data = zeroed64(n);
    p->grad = zeroed64(n);
    if (!p->data || !p->grad) tg_fail_h(&p->err, "tg_params_alloc: out of memory for %zu floats", n);
    size_t off = 0;
    for (int i = 0; i < p->n; i++) {
        p->list[i]->data = p->data + off;
        p->list[i]->grad = p->grad + off;
        off += (size_t)p->list[i]->numel;
    }
    p->allocated = 1;
}

void tg_params_zero_grad(tg_params *p) { memset(p->grad, 0, p->numel * sizeof(float)); }

tg_tensor *tg_params_find(const tg_params *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->list[i]->name, name) == 0) return p->list[i];
    return NULL;
}
