/* The context: an arena for activations and a tape of nodes.
 *
 * The arena is a chain of blocks. Reset rewinds to the first block but keeps
 * the chain, so a loop whose steps allocate the same sizes in the same order
 * grows the chain during its first step only and never calls malloc again. */
#include "tg_core.h"
#include "tg_precision.h"
#include "tg_profile.h"

#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#define TG_ALIGN 64

struct tg_block {
    tg_block *next;
    size_t cap, used;
    unsigned char *mem;   /* TG_ALIGN-aligned */
};

static void *xmalloc(tg_ctx *ctx, size_t n) {
    void *p = malloc(n);
    if (!p) tg_fail(ctx, "out of memory asking for %zu bytes", n);
    ctx->heap_allocs++;
    return p;
}

static tg_block *block_new(tg_ctx *ctx, size_t cap) {
    tg_block *b = xmalloc(ctx, sizeof *b);
    b->mem = aligned_alloc(TG_ALIGN, cap);
    if (!b->mem) tg_fail(ctx, "out of memory asking for an arena block of %zu bytes", cap);
    ctx->heap_allocs++;
    b->next = NULL;
    b->cap = cap;
    b->used = 0;
    return b;
}

void tg_ctx_init(tg_ctx *ctx, size_t block_bytes) {
    memset(ctx, 0, sizeof *ctx);
    ctx->block_size = block_bytes ? block_bytes : ((size_t)16 << 20);
    ctx->block_size = (ctx->block_size + TG_ALIGN - 1) / TG_ALIGN * TG_ALIGN;
    ctx->grad_enabled = 1;
}

void tg_ctx_free(tg_ctx *ctx) {
    for (tg_block *b = ctx->head, *nx; b; b = nx) {
        nx = b->next;
        free(b->mem);
        free(b);
    }
    free(ctx->nodes);
    ctx->head = ctx->cur = NULL;
    ctx->nodes = NULL;
    ctx->n_nodes = ctx->cap_nodes = 0;
}

static size_t arena_used(const tg_ctx *ctx) {
    size_t used = 0;
    for (const tg_block *b = ctx->head; b; b = b->next) {
        used += b->used;
        if (b == ctx->cur) break;
    }
    return used;
}

void tg_ctx_reset(tg_ctx *ctx) {
    size_t used = arena_used(ctx);
    if (used > ctx->arena_peak) ctx->arena_peak = used;
    for (tg_block *b = ctx->head; b; b = b->next) b->used = 0;
    ctx->cur = ctx->head;
    ctx->n_nodes = 0;
}

void tg_ctx_set_precision(tg_ctx *ctx, int p) {
    if (p < 0 || p >= TG_N_PRECISIONS) tg_fail(ctx, "tg_ctx_set_precision: precision %d is none of fp32, bf16, fp16", p);
    ctx->precision = p;
}

const float *tg_operand(tg_ctx *ctx, int p, const float *x, int64_t n) {
    if (p == TG_FP32 || !x) return x;
    float *y = tg_arena_alloc(ctx, (size_t)n * sizeof(float));
    tg_round_copy(p, x, y, n);
    return y;
}

void tg_set_error_handler(tg_ctx *ctx, tg_error_fn fn, void *user) {
    ctx->err.fn = fn;
    ctx->err.user = user;
}

void *tg_arena_alloc(tg_ctx *ctx, size_t bytes) {
    if (bytes > SIZE_MAX - TG_ALIGN) tg_fail(ctx, "out of memory asking the arena for %zu bytes", bytes);
    bytes = (bytes + TG_ALIGN - 1) / TG_ALIGN * TG_ALIGN;
    if (bytes == 0) bytes = TG_ALIGN;
    /* walk forward through blocks kept from earlier steps before making one */
    while (ctx->cur && ctx->cur->used + bytes > ctx->cur->cap) {
        if (!ctx->cur->next) break;
        ctx->cur = ctx->cur->next;
    }
    if (!ctx->cur || ctx->cur->used + bytes > ctx->cur->cap) {
        tg_block *b = block_new(ctx, bytes > ctx->block_size ? bytes : ctx->block_size);
        if (ctx->cur) ctx->cur->next = b;
        else ctx->head = b;
        ctx->cur = b;
    }
    void *p = ctx->cur->mem + ctx->cur->used;
    ctx->cur->used += bytes;
    return p;
}

void tg_arena_fill(tg_ctx *ctx, unsigned char byte) {
    for (tg_block *b = ctx->head; b; b = b->next) memset(b->mem, byte, b->cap);
}

static tg_tensor *tensor_header(tg_ctx *ctx, int ndim, const int *shape, const char *who) {
    if (ndim < 1 || ndim > TG_MAX_DIMS)
        tg_fail(ctx, "%s: a tensor has 1 to %d dimensions, got %d", who, TG_MAX_DIMS, ndim);
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0)
            tg_fail(ctx, "%s: dimension %d is %d; sizes must be positive", who, i, shape[i]);
    tg_tensor *t = tg_arena_alloc(ctx, sizeof *t);
    memset(t, 0, sizeof *t);
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->numel = tg_numel_of(ndim, shape);
    if (t->numel < 0) {
        char buf[TG_SHAPE_BUF];
        tg_fail(ctx, "%s: shape %s has more elements than memory can index", who, tg_shape_str(t, buf));
    }
    return t;
}

tg_tensor *tg_new(tg_ctx *ctx, int ndim, const int *shape) {
    tg_tensor *t = tensor_header(ctx, ndim, shape, "tg_new");
    t->data = tg_arena_alloc(ctx, (size_t)t->numel * sizeof(float));
    return t;
}

tg_tensor *tg_new_like(tg_ctx *ctx, const tg_tensor *t) { return tg_new(ctx, t->ndim, t->shape); }

tg_tensor *tg_zeros(tg_ctx *ctx, int ndim, const int *shape) {
    tg_tensor *t = tg_new(ctx, ndim, shape);
    memset(t->data, 0, (size_t)t->numel * sizeof(float));
    return t;
}

tg_tensor *tg_view(tg_ctx *ctx, const tg_tensor *src, int ndim, const int *shape) {
    tg_tensor *t = tensor_header(ctx, ndim, shape, "tg_view");
    if (t->numel != src->numel)
        tg_fail(ctx, "tg_view: %s has %lld elements, the view %s has %lld", TG_SHAPE(src),
                (long long)src->numel, TG_SHAPE(t), (long long)t->numel);
    t->data = src->data;
    return t;
}

tg_node *tg_record(tg_ctx *ctx, const char *op, tg_backward_fn bw, tg_tensor *out,
                   int n_in, tg_tensor *const *in, size_t saved_bytes) {
    if (n_in < 0 || n_in > TG_MAX_IN) tg_fail(ctx, "%s: an op takes at most %d inputs", op, TG_MAX_IN);
    int need = 0;
    for (int i = 0; i < n_in; i++)
        if (in[i] && in[i]->requires_grad) need = 1;
    out->requires_grad = need && ctx->grad_enabled;
    if (!out->requires_grad) return NULL;
    if (ctx->n_nodes == ctx->cap_nodes) {
        int cap = ctx->cap_nodes ? 2 * ctx->cap_nodes : 256;
        tg_node *nodes = realloc(ctx->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes) tg_fail(ctx, "%s: out of memory growing the tape to %d nodes", op, cap);
        ctx->heap_allocs++;
        ctx->nodes = nodes;
        ctx->cap_nodes = cap;
    }
    tg_node *n = &ctx->nodes[ctx->n_nodes++];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->backward = bw;
    n->out = out;
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    n->saved = saved_bytes ? tg_arena_alloc(ctx, saved_bytes) : NULL;
    if (ctx->prof) tg_profile_mark_forward(ctx->prof, n);
    return n;
}

/* Activation grads start every backward pass unwritten (grad_set = 0, read as
 * zeros), so backward twice on one tape gives the same activation grads; they
 * are zeroed only when an op adds into them first (just before it does: the
 * zeroing and the adding share the cache), and not at all when an op writes
 * them whole first. Parameter grads are always written: they accumulate. */
static void prepare_grad(tg_ctx *ctx, tg_tensor *t) {
    if (!t || !t->requires_grad || t->is_param) return;
    if (!t->grad) t->grad = tg_arena_alloc(ctx, (size_t)t->numel * sizeof(float));
    t->grad_set = 0;
#ifdef TG_POISON_GRADS
    /* debug builds: a grad nobody readied reads as NaN, not as whatever the
     * arena held, so an own_grads op that adds without tg_grad_first/tg_grad_acc
     * fails every gradient check instead of passing on a lucky zero */
    for (int64_t i = 0; i < t->numel; i++) t->grad[i] = NAN;
#endif
}

int tg_grads_poisoned(void) {
#ifdef TG_POISON_GRADS
    return 1;
#else
    return 0;
#endif
}

int tg_grad_first(tg_tensor *t) {
    if (t->is_param || t->grad_set) return 0;
    t->grad_set = 1;
    return 1;
}

float *tg_grad_acc(tg_tensor *t) {
    if (tg_grad_first(t)) memset(t->grad, 0, (size_t)t->numel * sizeof(float));
    return t->grad;
}

void tg_backward_seed(tg_ctx *ctx, tg_tensor *out, const float *dout) {
    if (!out->requires_grad)
        tg_fail(ctx, "tg_backward: the output %s does not depend on anything that requires a gradient",
                TG_SHAPE(out));
    tg_profile *prof = ctx->prof;
    if (prof) tg_profile_phase(prof, "(before backward)");
    for (int i = 0; i < ctx->n_nodes; i++) {
        tg_node *n = &ctx->nodes[i];
        prepare_grad(ctx, n->out);
        for (int j = 0; j < n->n_in; j++) prepare_grad(ctx, n->in[j]);
    }
    if (!out->grad) tg_fail(ctx, "tg_backward: the output is not made by an op on this tape");
    if (tg_grad_first(out)) memcpy(out->grad, dout, (size_t)out->numel * sizeof(float));
    else for (int64_t i = 0; i < out->numel; i++) out->grad[i] += dout[i];
    if (prof) tg_profile_phase(prof, "(backward: grads readied)");
    for (int i = ctx->n_nodes - 1; i >= 0; i--) {
        tg_node *n = &ctx->nodes[i];
        double t0 = prof ? tg_profile_clock() : 0;
        tg_grad_acc(n->out);   /* nothing downstream wrote it: its gradient is 0 */
        if (!n->own_grads)
            for (int j = 0; j < n->n_in; j++)
                if (n->in[j] && n->in[j]->grad) tg_grad_acc(n->in[j]);
        n->backward(ctx, n);
        if (prof) {
            double t1 = tg_profile_clock();
            n->prof_s[1] += t1 - t0;
            prof->mark = t1;
        }
    }
}

void tg_backward(tg_ctx *ctx, tg_tensor *loss) {
    if (loss->numel != 1)
        tg_fail(ctx, "tg_backward: the loss must have one element, got %s", TG_SHAPE(loss));
    const float one = 1.0f;
    tg_backward_seed(ctx, loss, &one);
}
