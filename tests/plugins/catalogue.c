/* A catalogue of wrong attention kernels (plugin ABI 2), one per bug class of
 * attn_check (tests/attn_check_cli.sh names each verdict), most of them after
 * a bug reported in a public repository. Each is tg_attend, the right function,
 * but for the one thing its name says; `right` is tg_attend itself and must
 * pass every check of every feature. */
#include <math.h>
#include <signal.h>
#include <string.h>
#include <tapegrad/tapegrad.h>

#define F_ALL TG_ATTN_F_ALL
/* name: the kernel; feats: what it declares; body: changes args `a` before tg_attend runs on them */
#define KERNEL(name, feats, ...)                                                   \
    static tg_tensor *name(tg_ctx *ctx, const tg_attn_args *in) {                 \
        tg_attn_args a = *in;                                                      \
        (void)ctx;                                                                 \
        __VA_ARGS__;                                                               \
        return tg_attend(ctx, &a);                                                 \
    }                                                                              \
    TG_ATTENTION_PLUGIN(name, feats)

static tg_tensor *copy1(tg_ctx *ctx, const tg_tensor *t, float mult, int reverse) {
    tg_tensor *c = tg_new(ctx, t->ndim, t->shape);
    for (int64_t i = 0; i < t->numel; i++) c->data[i] = mult * t->data[reverse ? t->numel - 1 - i : i];
    return c;
}

KERNEL(right, F_ALL, )

/* ---- the temperature ---- */
KERNEL(sqrt_inverse, F_ALL, a.scale = 1.0f / a.scale)   /* multiplies by √d: the exponent's sign (maxtext #1370) */
KERNEL(width_scale, F_ALL, a.scale = 1.0f / sqrtf((float)(a.q->shape[2] * a.q->shape[3])))   /* 1/√(H·d) */
KERNEL(scale_twice, F_ALL, a.scale = a.scale * a.scale)
KERNEL(forgets_scale_capped, F_ALL, a.scale = 1)   /* the seed's bug in a kernel that can cap: the forecast under --softcap */

/* ---- masks and spans ---- */
KERNEL(gqa_tile, F_ALL, {   /* query head h reads kv head h mod Hkv: k, v expanded in tile order (not recorded) */
    const int B = a.k->shape[0], Tk = a.k->shape[1], Hkv = a.k->shape[2], H = a.q->shape[2];
    tg_tensor *kk = tg_new(ctx, 4, (int[]){B, Tk, H, a.k->shape[3]}), *vv = tg_new(ctx, 4, (int[]){B, Tk, H, a.v->shape[3]});
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Tk; j++)
            for (int h = 0; h < H; h++) {
                memcpy(kk->data + (((size_t)b * Tk + j) * H + h) * kk->shape[3],
                       a.k->data + (((size_t)b * Tk + j) * Hkv + h % Hkv) * kk->shape[3], sizeof(float) * kk->shape[3]);
                memcpy(vv->data + (((size_t)b * Tk + j) * H + h) * vv->shape[3],
                       a.v->data + (((size_t)b * Tk + j) * Hkv + h % Hkv) * vv->shape[3], sizeof(float) * vv->shape[3]);
            }
    a.k = kk, a.v = vv;
})
KERNEL(top_left, F_ALL, {   /* PyTorch's is_causal with Tq < Tk: query i sees keys 0..i */
    if (a.causal && a.q->shape[1] != a.k->shape[1] && !a.bias) {
        const int Tq = a.q->shape[1], Tk = a.k->shape[1];
        tg_tensor *m = tg_zeros(ctx, 4, (int[]){1, 1, Tq, Tk});
        for (int i = 0; i < Tq; i++)
            for (int j = i + 1; j < Tk; j++) m->data[(size_t)i * Tk + j] = -INFINITY;
        a.bias = m, a.causal = 0;
    }
})
KERNEL(window_plus_one, F_ALL, if (a.window_left >= 0) a.window_left += 1)   /* W + 1 keys */
KERNEL(window_two_sided, F_ALL, if (a.window_left >= 0 && a.causal) a.causal = 0, a.window_right = a.window_left)
KERNEL(window_ignored, F_ALL, a.window_left = a.window_right = -1)
KERNEL(padding_leak, F_ALL, a.kv_len = NULL)
/* a two-sided window read as (left, left): the right bound taken from the left one */
KERNEL(window_right_from_left, F_ALL, if (!a.causal && a.window_left >= 0) a.window_right = a.window_left)
/* BLOOM's ALiBi: + slope_h · j (the key's position), a one-sided ramp: ALiBi only under the causal
 * mask. Undeclared it fails the alibi probe, named; `bloom_alibi` is the same declaring alibi_causal. */
KERNEL(alibi_one_sided, F_ALL, if (a.alibi && !a.bias) {
    const int H = a.q->shape[2], Tq = a.q->shape[1], Tk = a.k->shape[1];
    tg_tensor *m = tg_new(ctx, 4, (int[]){1, H, Tq, Tk});
    for (int h = 0; h < H; h++)
        for (int i = 0; i < Tq; i++)
            for (int j = 0; j < Tk; j++) m->data[((size_t)h * Tq + i) * Tk + j] = a.alibi->data[h] * (float)j;
    a.bias = m, a.alibi = NULL;
})
static tg_tensor *bloom_alibi(tg_ctx *ctx, const tg_attn_args *in) { return alibi_one_sided(ctx, in); }
TG_ATTENTION_PLUGIN_CONV(bloom_alibi, F_ALL, TG_ATTN_C_ALIBI_CAUSAL)
/* kv_len applied to the queries: a [B, 1, Tq, Tk] bias of 0 on rows i < kv_len[b], −inf on the rest */
KERNEL(padding_on_queries, F_ALL, if (a.kv_len && !a.bias) {
    const int B = a.q->shape[0], Tq = a.q->shape[1], Tk = a.k->shape[1];
    tg_tensor *m = tg_new(ctx, 4, (int[]){B, 1, Tq, Tk});
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Tq; i++)
            for (int j = 0; j < Tk; j++) m->data[((size_t)b * Tq + i) * Tk + j] = i < a.kv_len[b] ? 0.0f : -INFINITY;
    a.bias = m, a.kv_len = NULL;
})
static tg_tensor *padding_nan(tg_ctx *ctx, const tg_attn_args *in) {   /* 0/0 for a row that sees no key */
    tg_tensor *out = tg_attend(ctx, in);
    if (in->kv_len)
        for (int b = 0; b < out->shape[0]; b++)
            if (in->kv_len[b] <= 0)
                for (int64_t i = 0; i < out->numel / out->shape[0]; i++) out->data[b * (out->numel / out->shape[0]) + i] = NAN;
    return out;
}
TG_ATTENTION_PLUGIN(padding_nan, F_ALL)

/* ---- what changes the logits ---- */
KERNEL(bias_scaled, F_ALL, if (a.bias) a.bias = copy1(ctx, a.bias, a.scale, 0))   /* (q·k + bias) · scale */
KERNEL(bias_head0, F_ALL, {   /* head 0's bias for every head */
    if (a.bias && a.bias->shape[1] > 1) {
        const int Bb = a.bias->shape[0], H = a.bias->shape[1], Tq = a.bias->shape[2], Tk = a.bias->shape[3];
        tg_tensor *b0 = tg_new(ctx, 4, (int[]){Bb, 1, Tq, Tk});
        for (int b = 0; b < Bb; b++)
            memcpy(b0->data + (size_t)b * Tq * Tk, a.bias->data + (size_t)b * H * Tq * Tk, sizeof(float) * Tq * Tk);
        a.bias = b0;
    }
})
KERNEL(alibi_flipped, F_ALL, if (a.alibi) a.alibi = copy1(ctx, a.alibi, -1.0f, 0))
KERNEL(alibi_reversed, F_ALL, if (a.alibi) a.alibi = copy1(ctx, a.alibi, 1.0f, 1))
KERNEL(alibi_scaled, F_ALL, if (a.alibi) a.alibi = copy1(ctx, a.alibi, a.scale, 0))
KERNEL(cap_before_scale, F_ALL, a.softcap = a.softcap * a.scale)   /* scale · cap · tanh(q·k / cap) */
KERNEL(cap_ignored, F_ALL, a.softcap = 0)
/* the causal mask added as −1e9 to the logits before the cap: cap·tanh((s·q·k − 1e9)/cap) = −cap,
 * so hidden keys keep e^−cap (a port that masks first, then caps). Forward only; the textbook
 * call with grouped heads, Tq != Tk and the cap. */
static tg_tensor *mask_before_cap(tg_ctx *ctx, const tg_attn_args *in) {
    const tg_tensor *q = in->q, *k = in->k, *v = in->v;
    const int B = q->shape[0], Tq = q->shape[1], H = q->shape[2], d = q->shape[3], Tk = k->shape[1], Hkv = k->shape[2],
              dv = v->shape[3];
    tg_tensor *out = tg_zeros(ctx, 4, (int[]){B, Tq, H, dv});
    double *x = tg_arena_alloc(ctx, sizeof(double) * (size_t)Tk);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int kh = h / (H / Hkv);
            const double s = in->scale * (in->head_scale ? in->head_scale->data[h] : 1.0f);
            for (int i = 0; i < Tq; i++) {
                double mx = -INFINITY, z = 0;
                for (int j = 0; j < Tk; j++) {
                    double dot = 0;
                    for (int c = 0; c < d; c++)
                        dot += (double)q->data[(((size_t)b * Tq + i) * H + h) * d + c] *
                               k->data[(((size_t)b * Tk + j) * Hkv + kh) * d + c];
                    double y = s * dot - (in->causal && j > i + Tk - Tq ? 1e9 : 0);
                    x[j] = in->softcap > 0 ? in->softcap * tanh(y / in->softcap) : y;
                    mx = x[j] > mx ? x[j] : mx;
                }
                for (int j = 0; j < Tk; j++) z += x[j] = exp(x[j] - mx);
                for (int j = 0; j < Tk; j++)
                    for (int c = 0; c < dv; c++)
                        out->data[(((size_t)b * Tq + i) * H + h) * dv + c] +=
                            (float)(x[j] / z * v->data[(((size_t)b * Tk + j) * Hkv + kh) * dv + c]);
            }
        }
    return out;
}
TG_ATTENTION_PLUGIN(mask_before_cap, TG_ATTN_F_DV | TG_ATTN_F_GQA | TG_ATTN_F_TQ_TK | TG_ATTN_F_SOFTCAP)
KERNEL(sinks_ignored, F_ALL, a.sinks = NULL)
KERNEL(sinks_base2, F_ALL, if (a.sinks) a.sinks = copy1(ctx, a.sinks, 0.69314718f, 0))   /* 2^σ beside e^x */
/* the sink's e^σ in every key's numerator too: p_j = (e^x_j + e^σ) / (Z + e^σ), so
 * out = (the right output) + P_sink · Σ_j V_j, P_sink = 1 − Σ_j p_j (forward only) */
static tg_tensor *sinks_numerator(tg_ctx *ctx, const tg_attn_args *in) {
    if (!in->sinks) return tg_attend(ctx, in);
    const tg_tensor *v = in->v;
    const int B = v->shape[0], Tk = v->shape[1], Hkv = v->shape[2], dv = v->shape[3], Tq = in->q->shape[1],
              H = in->q->shape[2], g = H / Hkv;
    tg_tensor *right = tg_attend(ctx, in);
    tg_tensor *ones = tg_new(ctx, 4, (int[]){B, Tk, Hkv, 1});
    for (int64_t i = 0; i < ones->numel; i++) ones->data[i] = 1.0f;
    tg_attn_args a = *in;
    a.v = ones;
    const tg_tensor *mass = tg_attend(ctx, &a);   /* Σ_j p_j per row */
    tg_tensor *out = tg_new(ctx, 4, right->shape);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Tq; i++)
            for (int h = 0; h < H; h++) {
                const float ps = 1.0f - mass->data[((size_t)b * Tq + i) * H + h];
                for (int c = 0; c < dv; c++) {
                    double sv = 0;
                    for (int j = 0; j < Tk; j++) sv += v->data[(((size_t)b * Tk + j) * Hkv + h / g) * dv + c];
                    const size_t o = (((size_t)b * Tq + i) * H + h) * dv + c;
                    out->data[o] = right->data[o] + ps * (float)sv;
                }
            }
    return out;
}
TG_ATTENTION_PLUGIN(sinks_numerator, F_ALL)

/* ---- dropout ---- */
static tg_tensor *dropout_no_rescale(tg_ctx *ctx, const tg_attn_args *in) {
    tg_tensor *out = tg_attend(ctx, in);
    return in->dropout > 0 ? tg_scale(ctx, out, 1.0f - in->dropout) : out;
}
TG_ATTENTION_PLUGIN(dropout_no_rescale, F_ALL)
static uint64_t calls;
KERNEL(dropout_fresh_mask, F_ALL, a.dropout_seed = a.dropout_seed + 1000003 * ++calls)   /* a new mask per call */
KERNEL(dropout_seed_ignored, F_ALL, a.dropout_seed = 42)

/* ---- not attention at all: linear "attention" without a softmax (flexflow-train #467) ---- */
static tg_tensor *no_softmax(tg_ctx *ctx, const tg_attn_args *a) {
    const int B = a->q->shape[0], Tq = a->q->shape[1], H = a->q->shape[2], d = a->q->shape[3], Tk = a->k->shape[1],
              Hkv = a->k->shape[2], dv = a->v->shape[3];
    tg_tensor *out = tg_zeros(ctx, 4, (int[]){B, Tq, H, dv});
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                int lo, hi;
                tg_attn_visible(a, b, i, &lo, &hi);
                for (int j = lo; j < hi; j++) {
                    float s = 0;
                    for (int e = 0; e < d; e++)
                        s += a->q->data[(((size_t)b * Tq + i) * H + h) * d + e] *
                             a->k->data[(((size_t)b * Tk + j) * Hkv + h / (H / Hkv)) * d + e];
                    for (int e = 0; e < dv; e++)
                        out->data[(((size_t)b * Tq + i) * H + h) * dv + e] +=
                            a->scale * s * a->v->data[(((size_t)b * Tk + j) * Hkv + h / (H / Hkv)) * dv + e];
                }
            }
    return out;
}
TG_ATTENTION_PLUGIN(no_softmax, F_ALL)

/* ---- the mask after the softmax: each row normalised over every key, then the hidden ones zeroed ---- */
static tg_tensor *mask_after_softmax(tg_ctx *ctx, const tg_attn_args *in) {
    tg_attn_args a = *in;
    const int B = a.q->shape[0], Tq = a.q->shape[1], H = a.q->shape[2], Tk = a.k->shape[1], dv = a.v->shape[3],
              Hkv = a.k->shape[2];
    tg_attn_args all = a;
    all.causal = 0, all.window_left = all.window_right = -1, all.kv_len = NULL, all.stats = NULL;
    /* the weights over every key, through V = identity, then the mask, then · v (forward only) */
    tg_tensor *id = tg_zeros(ctx, 4, (int[]){B, Tk, Hkv, Tk});
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Tk; j++)
            for (int g = 0; g < Hkv; g++) id->data[(((size_t)b * Tk + j) * Hkv + g) * Tk + j] = 1.0f;
    all.v = id;
    const int was = ctx->grad_enabled;
    ctx->grad_enabled = 0;
    tg_tensor *P = tg_attend(ctx, &all);
    ctx->grad_enabled = was;
    tg_tensor *out = tg_zeros(ctx, 4, (int[]){B, Tq, H, dv});
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                int lo, hi;
                tg_attn_visible(&a, b, i, &lo, &hi);
                for (int j = lo; j < hi; j++) {
                    const float p = P->data[(((size_t)b * Tq + i) * H + h) * Tk + j];
                    for (int e = 0; e < dv; e++)
                        out->data[(((size_t)b * Tq + i) * H + h) * dv + e] +=
                            p * a.v->data[(((size_t)b * Tk + j) * Hkv + h / (H / Hkv)) * dv + e];
                }
            }
    return out;
}
TG_ATTENTION_PLUGIN(mask_after_softmax, F_ALL)

/* ---- for attn_scale's run-time guards (tests/plugin_cli.sh) ---- */
KERNEL(noncausal, F_ALL, a.causal = 0)
static uint64_t late_calls;
KERNEL(leaks_late, F_ALL, if (++late_calls > 40) a.causal = 0)   /* right for a while, then it leaks */
static uint64_t crash_calls;
KERNEL(crashes_late, F_ALL, if (++crash_calls > 40) raise(SIGSEGV))
KERNEL(textbook_only, TG_ATTN_F_DV, )   /* declares nothing beyond the textbook call */
static tg_tensor *nan_out(tg_ctx *ctx, const tg_attn_args *in) {   /* every output NaN: no step can train */
    tg_tensor *out = tg_attend(ctx, in);
    for (int64_t i = 0; i < out->numel; i++) out->data[i] = NAN;
    return out;
}
TG_ATTENTION_PLUGIN(nan_out, F_ALL)
static uint64_t often_calls;
static tg_tensor *nan_often(tg_ctx *ctx, const tg_attn_args *in) {   /* NaN but every 4th call */
    tg_tensor *out = tg_attend(ctx, in);
    if (++often_calls % 4)
        for (int64_t i = 0; i < out->numel; i++) out->data[i] = NAN;
    return out;
}
TG_ATTENTION_PLUGIN(nan_often, F_ALL)

/* ---- precision (0.21) ---- */
/* x rounded to bf16 on the tape, its gradient passed straight through (as a cast in autocast is) */
static void st_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *x = n->in[0];
    if (x->grad)
        for (int64_t i = 0; i < x->numel; i++) x->grad[i] += n->out->grad[i];
}
static tg_tensor *to_bf16(tg_ctx *ctx, tg_tensor *x) {
    tg_tensor *y = tg_new(ctx, x->ndim, x->shape);
    for (int64_t i = 0; i < x->numel; i++) y->data[i] = tg_round_to(TG_BF16, x->data[i]);
    tg_record(ctx, "to_bf16", st_backward, y, 1, &x, 0);
    return y;
}
/* a kernel in bf16: q, k, v and its output rounded to bf16, the rest in fp32. Declared bf16 it
 * conforms; declared fp32 (bf16_undeclared) attn_check names its precision. */
static tg_tensor *bf16_right(tg_ctx *ctx, const tg_attn_args *in) {
    tg_attn_args a = *in;
    a.q = to_bf16(ctx, a.q), a.k = to_bf16(ctx, a.k), a.v = to_bf16(ctx, a.v);
    return to_bf16(ctx, tg_attend(ctx, &a));
}
TG_ATTENTION_PLUGIN_PREC(bf16_right, TG_ATTN_F_DV, 0, TG_BF16)
static tg_tensor *bf16_undeclared(tg_ctx *ctx, const tg_attn_args *in) { return bf16_right(ctx, in); }
TG_ATTENTION_PLUGIN(bf16_undeclared, TG_ATTN_F_DV)
