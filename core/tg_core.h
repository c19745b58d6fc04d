/* tapegrad core: tensors, the tape, the arena, parameters, the RNG, errors.
 *
 * The whole autograd idea in one paragraph: every op appends one tg_node to the
 * context's tape (its inputs, its output, its backward function and whatever
 * it saved). tg_backward seeds d(loss)/d(loss) = 1 and walks the tape from the
 * last node to the first, each backward adding (+=) into its inputs' grads.
 * Execution order is already a topological order, so no sort is needed.
 *
 * Memory: activations, their grads, the nodes' saved values and the tape live in
 * the context and are reused by tg_ctx_reset() every step; parameters live in a
 * tg_params (flat data and grad buffers) that outlives every step. After the
 * first step of a fixed-shape loop the context makes no heap allocation.
 *
 * Nothing in a context or a tg_params is global: two contexts (two models) can live in one
 * process and train side by side. What is process-wide in the library, each because it belongs
 * to the machine, not to a model, and each set by the program, never by the library itself:
 *   - the product plan (ops/tg_gemm_plan.h): which library makes each matrix product shape on this
 *     CPU, a table shared by every context (a shape's decision never changes once made);
 *   - the BLAS kernel chosen at start-up and the thread count (core/tg_blas.h, OpenMP's own);
 *   - the attention tiles' copy for this CPU (ops/attention.h, tg_attn_tiles), read-only. */
#ifndef TG_CORE_H
#define TG_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus   /* the headers compile as C++ too (a plugin in C++) */
#define TG_NORETURN [[noreturn]]
#else
#define TG_NORETURN _Noreturn
#endif

#define TG_MAX_DIMS 4
#define TG_MAX_IN 6   /* the attention ops: q, k, v, head_scale, bias, sinks */

typedef struct tg_ctx tg_ctx;
typedef struct tg_node tg_node;
typedef struct tg_profile tg_profile;   /* tg_profile.h */

/* ---- errors ------------------------------------------------------------ */
/* Misuse (bad shapes, bad arguments) calls the handler with a message that
 * names the op and the shapes. If the handler returns, the process aborts:
 * an op never goes on with garbage. A test or an embedding program installs a
 * handler that longjmps out. */
typedef void (*tg_error_fn)(const char *msg, void *user);
typedef struct tg_errh { tg_error_fn fn; void *user; } tg_errh;
TG_NORETURN void tg_fail_h(const tg_errh *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Runs fn(ctx, user) so that a tg_fail on ctx from this thread (outside any
 * OpenMP region) comes back here instead of aborting: 0 when fn returned, -1
 * with the message in err when it failed. ctx's handler is restored either way.
 * What fn built on ctx stays until tg_ctx_reset; what fn malloc'd itself and
 * did not free before failing is lost, so an op frees before it fails. A run
 * that gets -1 should stop using what fn was building (the training loop: the
 * step is abandoned, parameters as they were before its update). */
int tg_try(tg_ctx *ctx, void (*fn)(tg_ctx *ctx, void *user), void *user, char *err, size_t errlen);
/* Bad *input* (a file, a flag) is not misuse: it is reported to the caller.
 * Writes the message into err (errlen bytes) and returns -1. */
int tg_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* FNV-1a 64, continuing from h (start with TG_FNV1A64_INIT): a checkpoint's
 * checksum (safetensors.h), the product plan's keys. Not cryptographic. */
#define TG_FNV1A64_INIT 0xcbf29ce484222325ULL
uint64_t tg_fnv1a64(uint64_t h, const void *p, size_t n);

/* ---- tensors ------------------------------------------------------------ */
typedef struct tg_tensor {
    int ndim;
    int shape[TG_MAX_DIMS];
    int64_t numel;
    float *data;
    float *grad;        /* NULL unless requires_grad (and grads were made) */
    int requires_grad;
    int is_param;       /* param grads accumulate across backward calls */
    int grad_set;       /* in backward: grad holds this pass's sum so far (else garbage, read as 0) */
    const char *name;   /* params and named activations; for messages */
    /* parameters only, read by the optimizers at every step (see tg_optim.h): */
    int decay;          /* 1: weight decay applies (declared with tg_param_decayed) */
    float lr_mult;      /* its learning rate is the optimizer's times this; 1 from tg_param */
} tg_tensor;

/* The element count of a shape; -1 when it overflows what a float array can index (a shape
 * checked by the caller: every dimension >= 0). */
int64_t tg_numel_of(int ndim, const int *shape);
int tg_same_shape(const tg_tensor *a, const tg_tensor *b);
/* 1 if b's shape equals a's last b->ndim dimensions (a bias row, a per-head
 * gain): the broadcast rule of tg_add, tg_mul and tg_rmsnorm's gain. */
int tg_is_trailing_shape(const tg_tensor *a, const tg_tensor *b);
/* "[8,16]" into buf (at least TG_SHAPE_BUF bytes); returns buf. */
#define TG_SHAPE_BUF 64
const char *tg_shape_str(const tg_tensor *t, char *buf);
#define TG_SHAPE(t) tg_shape_str((t), (char[TG_SHAPE_BUF]){0})

/* ---- context: arena + tape ---------------------------------------------- */
typedef struct tg_block tg_block;
struct tg_ctx {
    tg_block *head, *cur;   /* arena: a chain of blocks, kept across resets */
    size_t block_size;
    tg_node *nodes;         /* the tape, in execution order */
    int n_nodes, cap_nodes;
    int grad_enabled;       /* 0: ops compute but record nothing (eval) */
    tg_errh err;
    size_t heap_allocs;     /* every malloc this context has made */
    size_t arena_peak;      /* bytes handed out in the busiest step */
    tg_profile *prof;       /* NULL, or where the ops' times go (tg_profile.h) */
    int precision;          /* tg_precision (tg_precision.h) the products take their inputs in: tg_ctx_set_precision */
};

void tg_ctx_init(tg_ctx *ctx, size_t block_bytes);  /* 0: default 16 MiB */
void tg_ctx_free(tg_ctx *ctx);
void tg_ctx_reset(tg_ctx *ctx);      /* drop the tape and all activations */
void tg_set_error_handler(tg_ctx *ctx, tg_error_fn fn, void *user);
TG_NORETURN void tg_fail(tg_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void *tg_arena_alloc(tg_ctx *ctx, size_t bytes);     /* 64-byte aligned */
/* Mixed precision (since 0.22), autocast's split: the products of tg_matmul and both
 * attention ops take their inputs rounded to p (TG_BF16, TG_FP16; tg_precision.h) and
 * accumulate and write float32, forward and backward; everything else (softmax,
 * layernorm, loss, the optimizer, the parameters) stays float32. TG_FP32 (the default)
 * changes nothing. Emulated: operands are rounded, then multiplied by the float32
 * kernels (no bf16 instructions are used). A bad p fails on ctx. */
void tg_ctx_set_precision(tg_ctx *ctx, int p);
/* x itself under TG_FP32, else an arena copy of its n values rounded to p: a product's operand */
const float *tg_operand(tg_ctx *ctx, int p, const float *x, int64_t n);
/* Every byte of the arena's blocks, handed out or not, set to `byte`: after
 * tg_ctx_reset, so that the next step finds 0xff (NaN) or other garbage where
 * it finds memory it did not write. For tests (tg_gradcheck runs every check
 * again after it): an op that reads memory it never wrote then changes its
 * result, which fresh zero pages would hide. Live activations are destroyed. */
void tg_arena_fill(tg_ctx *ctx, unsigned char byte);
/* A new activation in the arena, uninitialised data, no grad. */
tg_tensor *tg_new(tg_ctx *ctx, int ndim, const int *shape);
tg_tensor *tg_new_like(tg_ctx *ctx, const tg_tensor *t);
tg_tensor *tg_zeros(tg_ctx *ctx, int ndim, const int *shape);
/* An activation that shares `t`'s data (a view); its grad is its own. */
tg_tensor *tg_view(tg_ctx *ctx, const tg_tensor *t, int ndim, const int *shape);

/* ---- the tape ------------------------------------------------------------- */
/* ctx is there for scratch memory (tg_arena_alloc) and for errors. */
typedef void (*tg_backward_fn)(tg_ctx *ctx, const tg_node *n);
struct tg_node {
    const char *op;           /* "tg_matmul": for messages and tape dumps */
    tg_backward_fn backward;  /* reads out->grad, adds into in[i]->grad */
    tg_tensor *out;
    tg_tensor *in[TG_MAX_IN];
    int n_in;
    void *saved;              /* op's own struct: attributes + saved values */
    int own_grads;            /* 1: backward readies its inputs' grads itself (tg_grad_first/tg_grad_acc) */
    double flops[2];          /* forward, backward: floating-point operations the op did, if it counts them
                                 (2·M·N·K a product), else 0; the profile's GFLOP/s (tg_profile.h) */
    double prof_s[2];         /* forward, backward seconds, while a profile is attached */
};

/* Called by an op after it made `out`. Sets out->requires_grad from the
 * inputs. If any input needs a gradient (and grad is enabled) appends a node
 * with `saved_bytes` of arena memory for the op's record and returns it;
 * otherwise returns NULL and the op need not save anything. */
tg_node *tg_record(tg_ctx *ctx, const char *op, tg_backward_fn bw, tg_tensor *out,
                   int n_in, tg_tensor *const *in, size_t saved_bytes);

/* Runs the nodes' backward functions last to first from d loss = 1, every
 * activation grad starting from 0 (allocated the first time). Parameter grads
 * accumulate: zero them between steps (tg_params_zero_grad).
 * Activation grads are zeroed lazily: before a node's backward, its output's
 * grad if nothing wrote it, and its inputs' grads if nothing wrote them yet
 * (unless the node set own_grads; then its backward calls, for each input
 * with a grad, tg_grad_first or tg_grad_acc, before any thread writes). */
void tg_backward(tg_ctx *ctx, tg_tensor *loss);
/* The same from any output: seeds out->grad with dout (out->numel floats), a
 * vector-Jacobian product. Gradient checks and Jacobian rows use it. */
void tg_backward_seed(tg_ctx *ctx, tg_tensor *out, const float *dout);

/* In a backward function: 1 if t's grad holds nothing yet in this pass, and
 * the caller then overwrites all of it instead of adding (a matrix product
 * with beta = 0: no zeroing, no read); 0 if it must add. Marks it written. */
int tg_grad_first(tg_tensor *t);
/* In a backward function: t's grad, zeroed first if nothing wrote it yet in
 * this pass, ready for +=. */
float *tg_grad_acc(tg_tensor *t);
/* 1 in a build that poisons unreadied activation grads with NaN (Debug builds,
 * and -DTG_POISON_GRADS=ON): there an own_grads op that forgets tg_grad_first /
 * tg_grad_acc fails its gradient check; elsewhere it may pass by luck. */
int tg_grads_poisoned(void);

/* ---- parameters --------------------------------------------------------- */
/* Declare every parameter, then tg_params_alloc lays them out in one flat data
 * buffer and one flat grad buffer, so zero-grad, optimizer steps and the
 * global grad norm are single loops over `numel` floats. */
typedef struct tg_params {
    tg_tensor **list;
    int n, cap;
    float *data, *grad;
    size_t numel;
    int allocated;
    tg_errh err;
} tg_params;

void tg_params_init(tg_params *p);
void tg_params_free(tg_params *p);
/* Whether weight decay applies is declared with the parameter, never inferred
 * from its shape: tg_param_decayed for what regularisation should shrink (weight
 * matrices, embeddings), tg_param for the rest (gains, biases, scales, anything
 * that sets a temperature). */
tg_tensor *tg_param(tg_params *p, const char *name, int ndim, const int *shape);
tg_tensor *tg_param_decayed(tg_params *p, const char *name, int ndim, const int *shape);
void tg_params_alloc(tg_params *p);     /* data and grad zeroed, each from a 64-byte boundary (since 0.19.4) */
void tg_params_zero_grad(tg_params *p);
tg_tensor *tg_params_find(const tg_params *p, const char *name);

/* ---- RNG: PCG32 (O'Neill's PCG-XSH-RR, 64-bit state, 32-bit output) ------ */
/* Pure integer arithmetic, so the same seed gives the same stream on every
 * machine; normals by Box-Muller in double, rounded to float. */
typedef struct tg_rng { uint64_t state, inc; } tg_rng;
void tg_rng_seed(tg_rng *r, uint64_t seed, uint64_t stream);
uint32_t tg_rng_u32(tg_rng *r);
uint32_t tg_rng_below(tg_rng *r, uint32_t n);       /* uniform in [0, n) */
float tg_rng_uniform(tg_rng *r);                     /* [0, 1) */
float tg_rng_normal(tg_rng *r);                      /* N(0, 1) */
void tg_fill_normal(tg_rng *r, float *x, int64_t n, float mean, float std);
void tg_fill_uniform(tg_rng *r, float *x, int64_t n, float lo, float hi);

#endif
