/* The kernel's gradient, checked with tapegrad's finite-difference checker,
 * causal and not, with a per-head scale, dv != d, odd sizes, and grouped heads
 * with Tq < Tk and a window. Built against
 * my_attention.c directly (and once more with -DFORGET_SCALE).
 *
 * What this does NOT tell: whether the forward is the right function. The
 * kernel that forgets the scale passes too, because its backward is the exact
 * gradient of what its forward computes. attn_check compares the forward with
 * tapegrad's reference; training shows what the forgotten scale does. */
#include <stdio.h>
#include <tapegrad/tapegrad.h>
#include <tapegrad/tg_runtime.h>   /* the program's start: the training kit's (tapegrad-train) */

extern const tg_attn_kernel tg_attn_plugin_attention;   /* my_attention.c's descriptor */

typedef struct { tg_tensor *q, *k, *v, *hs; int causal, window_left; } args;

static tg_tensor *f(tg_ctx *ctx, void *u) {
    args *a = u;
    tg_attn_args x = tg_attn_args_make(a->q, a->k, a->v, 0.35f);
    x.head_scale = a->hs, x.causal = a->causal, x.window_left = a->window_left;
    return tg_attn_plugin_attention.attend(ctx, &x);
}

int main(int argc, char **argv) {
    if (tg_runtime_init("check", argc, argv)) return 1;   /* first: the BLAS kernel check, threads */
    int bad = 0;
    /* not causal; causal; causal with grouped heads (4 query heads on 2), 3 queries on 6 keys and a window of 3 */
    for (int c = 0; c < 3; c++) {
        const int causal = c > 0, Tq = c == 2 ? 3 : 5, Tk = c == 2 ? 6 : 5, H = c == 2 ? 4 : 3, Hkv = c == 2 ? 2 : 3;
        tg_params P;
        tg_params_init(&P);
        args a = {tg_param(&P, "q", 4, (int[]){2, Tq, H, 4}), tg_param(&P, "k", 4, (int[]){2, Tk, Hkv, 4}),
                  tg_param(&P, "v", 4, (int[]){2, Tk, Hkv, 3}), tg_param(&P, "hs", 1, (int[]){H}), causal,
                  c == 2 ? 2 : -1};
        tg_params_alloc(&P);
        tg_rng r;
        tg_rng_seed(&r, 11, (uint64_t)causal);
        tg_fill_normal(&r, P.data, (int64_t)P.numel, 0.0f, 1.0f);
        for (int h = 0; h < H; h++) a.hs->data[h] = 0.5f + 0.4f * (float)h;
        int n = tg_gradcheck(c == 2 ? "my_attention grouped, window" : causal ? "my_attention causal" : "my_attention",
                             &P, f, &a, &(tg_gc_opts){.verbose = 1});
        bad += n != 0;
        tg_params_free(&P);
    }
    printf("%s: gradient checks %s\n",
#ifdef FORGET_SCALE
           "my_attention (forgets the scale)",
#else
           "my_attention",
#endif
           bad ? "FAILED" : "passed");
    return bad ? 1 : 0;
}
