/* The kernel's gradient, checked with tapegrad's finite-difference checker,
 * causal and not, with a per-head scale, dv != d, odd sizes. Built against
 * my_attention.c directly (and once more with -DFORGET_SCALE).
 *
 * What this does NOT tell: whether the forward is the right function. The
 * kernel that forgets the scale passes too, because its backward is the exact
 * gradient of what its forward computes. attn_check compares the forward with
 * tapegrad's reference; training shows what the forgotten scale does. */
#include <stdio.h>
#include <tapegrad/tapegrad.h>

tg_tensor *attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale, float scale,
                     int causal, tg_attn_stats *stats);

typedef struct { tg_tensor *q, *k, *v, *hs; int causal; } args;

static tg_tensor *f(tg_ctx *ctx, void *u) {
    args *a = u;
    return attention(ctx, a->q, a->k, a->v, a->hs, 0.35f, a->causal, NULL);
}

int main(int argc, char **argv) {
    if (tg_runtime_init("check", argc, argv)) return 1;   /* first: the BLAS kernel check, threads */
    int bad = 0;
    for (int causal = 0; causal <= 1; causal++) {
        tg_params P;
        tg_params_init(&P);
        args a = {tg_param(&P, "q", 4, (int[]){2, 5, 3, 4}), tg_param(&P, "k", 4, (int[]){2, 5, 3, 4}),
                  tg_param(&P, "v", 4, (int[]){2, 5, 3, 3}), tg_param(&P, "hs", 1, (int[]){3}), causal};
        tg_params_alloc(&P);
        tg_rng r;
        tg_rng_seed(&r, 11, (uint64_t)causal);
        tg_fill_normal(&r, P.data, (int64_t)P.numel, 0.0f, 1.0f);
        for (int h = 0; h < 3; h++) a.hs->data[h] = 0.5f + 0.4f * (float)h;
        int n = tg_gradcheck(causal ? "my_attention causal" : "my_attention", &P, f, &a, &(tg_gc_opts){.verbose = 1});
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
