/* tapegrad optimizers: SGD with momentum, AdamW, Adafactor, global grad-norm clipping and
 * a warm-up + cosine learning-rate schedule.
 *
 * Every parameter lives in the flat buffers P->data and P->grad (P->numel
 * floats), and the optimizer state (momentum buffer, Adam moments) is flat in
 * the same order, so a step is one loop over P->numel elements. The state is
 * allocated by *_init, once; *_step makes no allocation. Call *_init after
 * tg_params_alloc, and use an optimizer only with the tg_params it was made for.
 *
 * Per-parameter settings come from the parameter itself, read at every step:
 * - decay: weight decay applies only to parameters declared with
 *   tg_param_decayed (the model's weight matrices and embeddings). Gains,
 *   biases, QK-norm gains and per-head scales are declared with tg_param and
 *   never decayed, whatever their shape: pulling a gain or a temperature
 *   towards 0 is not the regularisation we want. The rule is the flag, not the
 *   shape: a 1-D parameter declared decayed is decayed.
 * - lr_mult: the parameter's learning rate is lr · lr_mult (1 unless the caller
 *   sets it; finite and >= 0). With a scheduled lr it follows the schedule in
 *   proportion. Decoupled decay uses the parameter's own rate.
 *
 * Bad arguments (negative lr, betas outside [0, 1), ...) go through
 * tg_fail_h(&P->err, ...) with a message naming the function and the value.
 * tg_lr_schedule has no tg_params, so it reports through tg_fail_h(NULL, ...):
 * the message goes to stderr and the process aborts. */
#ifndef TG_OPTIM_H
#define TG_OPTIM_H
#include "tg_core.h"

/* ---- SGD (PyTorch semantics, no dampening, no Nesterov) --------------------
 *   g   = grad + wd·w            (wd only for decayed parameters)
 *   buf = μ·buf + g              (buf = g at the first step; no buf if μ = 0)
 *   w  -= lr·lr_mult·buf
 * momentum in [0, 1), weight_decay >= 0. */
typedef struct tg_sgd { float momentum, weight_decay; float *buf; size_t n; } tg_sgd;
void tg_sgd_init(tg_sgd *o, const tg_params *P, float momentum, float weight_decay);
void tg_sgd_step(tg_sgd *o, tg_params *P, float lr);
void tg_sgd_free(tg_sgd *o);

/* ---- AdamW (PyTorch torch.optim.AdamW semantics) ---------------------------
 *   t  += 1
 *   w  *= 1 − lr·lr_mult·wd      (decoupled decay, decayed parameters only)
 *   m   = β1·m + (1 − β1)·g
 *   v   = β2·v + (1 − β2)·g²
 *   w  -= lr·lr_mult/(1 − β1^t) · m / (sqrt(v)/sqrt(1 − β2^t) + eps)
 * β1, β2 in [0, 1), eps > 0, weight_decay >= 0. The bias corrections are
 * computed in double once per step, and per parameter its decay factor and
 * step size. */
typedef struct tg_adamw {
    float beta1, beta2, eps, weight_decay;
    float *m, *v;
    size_t n;
    int64_t t;                  /* steps taken */
    float *keep, *step_size;    /* scratch, one per parameter: this step's factors */
    int n_params;
} tg_adamw;
void tg_adamw_init(tg_adamw *o, const tg_params *P, float beta1, float beta2, float eps,
                   float weight_decay);
void tg_adamw_step(tg_adamw *o, tg_params *P, float lr);
void tg_adamw_free(tg_adamw *o);

/* ---- Adafactor (Shazeer & Stern 2018; T5's optimizer, since 0.24) -----------
 * Per parameter W (gradient G, n elements), at step t = 1, 2, ...:
 *   ρ   = lr·lr_mult            (a relative step: T5 trains at ρ = 0.01, 1/√t past 10⁴ steps)
 *   β2t = 1 − t^(−decay)        (decay 0.8: β2t = 0 at t = 1, so V starts as G²)
 *   a matrix (ndim >= 2), factored over its last two dimensions [r, c], per index of the
 *   dimensions before them:
 *     R_i = β2t·R_i + (1 − β2t)·mean_j(G_ij² + eps1)
 *     C_j = β2t·C_j + (1 − β2t)·mean_i(G_ij² + eps1)
 *     V_ij = R_i·C_j / mean_i(R_i)
 *   anything else: V = β2t·V + (1 − β2t)·(G² + eps1)
 *   U   = G / sqrt(V);  U /= max(1, RMS(U)/clip_threshold)     (update clipping, d = 1)
 *   M   = β1·M + (1 − β1)·U, used instead of U         (only when β1 > 0; T5: β1 = 0, no M kept)
 *   α   = ρ·max(eps2, RMS(W)) with scale_parameter, else ρ   (steps relative to W's size)
 *   W  *= 1 − ρ·wd              (decoupled decay, decayed parameters only)
 *   W  -= α·U (or α·M)
 * RMS(x) = sqrt(mean(x²)); sums and means in double. State: R and C (r + c floats a matrix, not
 * r·c: the point of the method), V for the rest, M when β1 > 0. tg_adafactor_init sets T5's
 * constants (decay 0.8, eps1 1e-30, eps2 1e-3, clip_threshold 1, scale_parameter 1); a caller may
 * change them before a step, which checks them. */
typedef struct tg_adafactor {
    float beta1, weight_decay;
    float decay, eps1, eps2, clip_threshold;
    int scale_parameter;
    float *v;          /* second moments, flat: per parameter its R then C, or its V (n_v floats) */
    float *m;          /* the update's running mean (n floats), NULL when beta1 = 0 */
    size_t n, n_v;     /* parameter floats; second-moment floats */
    size_t *v_off;     /* n_params + 1 offsets into v */
    float *u;          /* scratch: one parameter's update */
    int n_params;
    int64_t t;         /* steps taken */
} tg_adafactor;
void tg_adafactor_init(tg_adafactor *o, const tg_params *P, float beta1, float weight_decay);
void tg_adafactor_step(tg_adafactor *o, tg_params *P, float lr);
void tg_adafactor_free(tg_adafactor *o);
/* The second-moment floats of one parameter: its rows plus columns per matrix, else its numel. */
size_t tg_adafactor_state_size(const tg_tensor *t);

/* ---- gradient norm and clipping ------------------------------------------- */
/* Global L2 norm of every parameter gradient, accumulated in double. */
float tg_grad_norm(const tg_params *P);
/* Returns the norm before clipping. When norm > max_norm > 0 every grad is
 * scaled by max_norm/(norm + 1e-6); max_norm <= 0 means no clipping. A
 * non-finite norm (inf or NaN grads) is returned and the grads are left as they
 * are, so the caller can see it and skip the step. */
float tg_clip_grad_norm(tg_params *P, float max_norm);

/* ---- dynamic loss scaling (fp16 training, since 0.22) ---------------------
 * fp16's smallest normal is 2^-14: small gradients round to 0 in fp16 products.
 * The backward is seeded with d(loss) = scale instead of 1, so every gradient
 * is scale times too large; tg_loss_scale_unscale then divides the parameter
 * grads by it. A non-finite grad (an fp16 product overflowed past 65504) means
 * the step is skipped and the scale halved; after `interval` finite steps in a
 * row it doubles. PyTorch's GradScaler's rule and defaults (2^16, x2 every
 * 2000, x0.5). Powers of two: the scaling and unscaling are exact. */
typedef struct tg_loss_scale {
    float scale;        /* what the backward is seeded with */
    int good;           /* finite steps since the scale last changed */
    int interval;       /* finite steps before it doubles */
    int64_t skipped;    /* steps skipped for overflow, in all */
} tg_loss_scale;
void tg_loss_scale_init(tg_loss_scale *s);   /* 65536, interval 2000 */
/* After a backward seeded with s->scale: 1 with P's grads divided by it (and the
 * scale doubled when its interval is up), or 0 when a grad is not finite: the
 * grads are left, the scale halved, the step is to be skipped. */
int tg_loss_scale_unscale(tg_loss_scale *s, tg_params *P);

/* ---- learning-rate schedule ------------------------------------------------
 * Linear warm-up lr_max·(step+1)/warmup for step < warmup (lr_max/warmup at
 * step 0, lr_max at step warmup−1), then cosine from lr_max at step warmup to
 * lr_min at step total: lr_min + (lr_max − lr_min)·(1 + cos(π·p))/2 with
 * p = (step − warmup)/(total − warmup). lr_min from step total on.
 * warmup = 0: no warm-up. Needs step >= 0, 0 <= warmup <= total and
 * 0 <= lr_min <= lr_max. */
float tg_lr_schedule(int step, int warmup, int total, float lr_max, float lr_min);

#endif
