/* my_attention: plain causal-or-not multi-head attention, one head at a time,
 * with its own backward: the kind of kernel a research team writes to try an
 * idea. Built as an attention plugin for attn_scale (--attn plugin:FILE.so).
 *
 * Shapes as tg_attention: q, k [B, T, H, d], v [B, T, H, dv], head_scale NULL
 * or [H]; out [B, T, H, dv]. Per batch b and head h, with
 *   s = scale · head_scale[h]                   (the right kernel)
 *   s = head_scale[h]                           (built with -DFORGET_SCALE: the seed's bug)
 *   P = softmax(s · q kᵀ) by rows (causal: j > i masked),  O = P v.
 * Gradient: dV = Pᵀ dO; dZ = P ⊙ (dO vᵀ − rowsum(P ⊙ dO vᵀ)); dQ = s dZ k;
 *   dK = s dZᵀ q; d head_scale[h] = (s / head_scale[h]) Σ dZ ⊙ q kᵀ.
 * It fills no stats: the training kit measures a plugin's weights itself. */
#include <math.h>
#include <string.h>
#include <tapegrad/tapegrad.h>
#include <tapegrad/tg_attn_plugin.h>

TG_ATTENTION_PLUGIN_DECLARE

#ifdef FORGET_SCALE
#define SCALE_USED(scale) 1.0f   /* "forgot the / sqrt(d_k)" */
#else
#define SCALE_USED(scale) (scale)
#endif

typedef struct {
    float *P;          /* [B, H, T, T] */
    float scale_used;
    int causal;
} rec;

static float head_mult(const tg_tensor *hs, int h) { return hs ? hs->data[h] : 1.0f; }

static void backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    const rec *r = n->saved;
    tg_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2], *hs = n->n_in > 3 ? n->in[3] : NULL;
    const int B = q->shape[0], T = q->shape[1], H = q->shape[2], d = q->shape[3], dv = v->shape[3];
    const float *dO = n->out->grad;
    float dz[T];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float s = r->scale_used * head_mult(hs, h);
            double dhs = 0;
            for (int i = 0; i < T; i++) {
                const float *P = r->P + (((size_t)b * H + h) * T + i) * T;
                const float *go = dO + (((size_t)b * T + i) * H + h) * dv;
                const float *qi = q->data + (((size_t)b * T + i) * H + h) * d;
                const int nj = r->causal ? i + 1 : T;
                double dot_sum = 0;
                for (int j = 0; j < nj; j++) {
                    const float *vj = v->data + (((size_t)b * T + j) * H + h) * dv;
                    float g = 0;
                    for (int e = 0; e < dv; e++) g += go[e] * vj[e];
                    dz[j] = g;
                    dot_sum += (double)P[j] * g;
                    if (v->grad) {
                        float *gv = v->grad + (((size_t)b * T + j) * H + h) * dv;
                        for (int e = 0; e < dv; e++) gv[e] += P[j] * go[e];
                    }
                }
                for (int j = 0; j < nj; j++) {
                    dz[j] = P[j] * (dz[j] - (float)dot_sum);
                    const float *kj = k->data + (((size_t)b * T + j) * H + h) * d;
                    if (hs && hs->grad) {
                        float sij = 0;
                        for (int e = 0; e < d; e++) sij += qi[e] * kj[e];
                        dhs += (double)dz[j] * sij;
                    }
                    if (q->grad) {
                        float *gq = q->grad + (((size_t)b * T + i) * H + h) * d;
                        for (int e = 0; e < d; e++) gq[e] += s * dz[j] * kj[e];
                    }
                    if (k->grad) {
                        float *gk = k->grad + (((size_t)b * T + j) * H + h) * d;
                        for (int e = 0; e < d; e++) gk[e] += s * dz[j] * qi[e];
                    }
                }
            }
            if (hs && hs->grad) hs->grad[h] += r->scale_used * (float)dhs;
        }
}

tg_tensor *attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale, float scale,
                     int causal, tg_attn_stats *stats) {
    (void)stats;   /* not filled: allowed for a plugin */
    (void)scale;   /* read by SCALE_USED, unless the kernel forgets it */
    if (q->ndim != 4 || !tg_same_shape(q, k) || v->ndim != 4 || v->shape[0] != q->shape[0] ||
        v->shape[1] != q->shape[1] || v->shape[2] != q->shape[2])
        tg_fail(ctx, "my_attention: q %s, k %s, v %s: want q, k [B,T,H,d] and v [B,T,H,dv]", TG_SHAPE(q), TG_SHAPE(k),
                TG_SHAPE(v));
    if (head_scale && (head_scale->ndim != 1 || head_scale->shape[0] != q->shape[2]))
        tg_fail(ctx, "my_attention: head_scale %s, want [%d]", TG_SHAPE(head_scale), q->shape[2]);
    const int B = q->shape[0], T = q->shape[1], H = q->shape[2], d = q->shape[3], dv = v->shape[3];
    const float su = SCALE_USED(scale);
    float *Pall = tg_arena_alloc(ctx, sizeof(float) * (size_t)B * H * T * T);
    tg_tensor *out = tg_zeros(ctx, 4, (int[]){B, T, H, dv});
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float s = su * head_mult(head_scale, h);
            for (int i = 0; i < T; i++) {
                float *P = Pall + (((size_t)b * H + h) * T + i) * T;
                const float *qi = q->data + (((size_t)b * T + i) * H + h) * d;
                const int nj = causal ? i + 1 : T;
                float mx = -INFINITY;
                for (int j = 0; j < nj; j++) {
                    const float *kj = k->data + (((size_t)b * T + j) * H + h) * d;
                    float z = 0;
                    for (int e = 0; e < d; e++) z += qi[e] * kj[e];
                    P[j] = s * z;
                    if (P[j] > mx) mx = P[j];
                }
                double sum = 0;
                for (int j = 0; j < nj; j++) sum += P[j] = expf(P[j] - mx);
                for (int j = 0; j < nj; j++) P[j] = (float)(P[j] / sum);
                for (int j = nj; j < T; j++) P[j] = 0;
                float *o = out->data + (((size_t)b * T + i) * H + h) * dv;
                for (int j = 0; j < nj; j++) {
                    const float *vj = v->data + (((size_t)b * T + j) * H + h) * dv;
                    for (int e = 0; e < dv; e++) o[e] += P[j] * vj[e];
                }
            }
        }
    tg_tensor *in[4] = {q, k, v, head_scale};
    tg_node *n = tg_record(ctx, "my_attention", backward, out, head_scale ? 4 : 3, in, sizeof(rec));
    if (n) *(rec *)n->saved = (rec){Pall, su, causal};
    return out;
}
