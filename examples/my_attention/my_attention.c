/* my_attention: plain multi-head attention, one head at a time, with its own
 * backward: the kind of kernel a research team writes to try an idea, with
 * grouped heads and a sliding window. Built as an attention plugin (ABI 2) for
 * attn_scale (--attn plugin:FILE.so) and attn_check.
 *
 * Shapes as tg_attend (the args of ops/attn_args.h): q [B, Tq, H, d], k [B, Tk,
 * Hkv, d], v [B, Tk, Hkv, dv]; query head h reads key/value head h / (H/Hkv);
 * query i sits at key position p = i + Tk − Tq. Per batch b and head h, with
 *   s = scale · head_scale[h]                   (the right kernel)
 *   s = head_scale[h]                           (-DFORGET_SCALE: the seed's bug)
 * row i sees keys [p − left, p] (causal, window_left = left ≥ 0), or
 * [p − left − 1, p] with -DWINDOW_OFF_BY_ONE (a window of W + 1 keys: the bug
 * of Mistral-style kernels that take the window as "left" and add one);
 *   P = softmax(s · q kᵀ) over the row's keys,  O = P v  (a row with no key: 0).
 * Gradient: dV = Pᵀ dO; dZ = P ⊙ (dO vᵀ − rowsum(P ⊙ dO vᵀ)); dQ = s dZ k;
 *   dK = s dZᵀ q (summed over a group's query heads); d head_scale[h] =
 *   (s / head_scale[h]) Σ dZ ⊙ q kᵀ.
 * It fills no stats: the training kit measures a plugin's weights itself. */
#include <math.h>
#include <string.h>
#include <tapegrad/tapegrad.h>

#ifdef FORGET_SCALE
#define SCALE_USED(scale) 1.0f   /* "forgot the / sqrt(d_k)" */
#else
#define SCALE_USED(scale) (scale)
#endif
#ifdef WINDOW_OFF_BY_ONE
#define EXTRA_LEFT 1
#else
#define EXTRA_LEFT 0
#endif

typedef struct {
    float *P;          /* [B, H, Tq, Tk] */
    float scale_used;
    int causal, left, right;
} rec;

static float head_mult(const tg_tensor *hs, int h) { return hs ? hs->data[h] : 1.0f; }

/* the keys [*lo, *hi) row i sees */
static void span_of(const rec *r, int Tq, int Tk, int i, int *lo, int *hi) {
    const int p = i + Tk - Tq;
    int l = r->left < 0 ? 0 : p - r->left - EXTRA_LEFT, h = r->causal ? p + 1 : r->right < 0 ? Tk : p + r->right + 1;
    if (l < 0) l = 0;
    if (h > Tk) h = Tk;
    *lo = l, *hi = h > l ? h : l;
}

static void backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    const rec *r = n->saved;
    tg_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2], *hs = n->n_in > 3 ? n->in[3] : NULL;
    const int B = q->shape[0], Tq = q->shape[1], H = q->shape[2], d = q->shape[3], Tk = k->shape[1],
              Hkv = k->shape[2], dv = v->shape[3], group = H / Hkv;
    const float *dO = n->out->grad;
    float dz[Tk];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int g = h / group;
            const float s = r->scale_used * head_mult(hs, h);
            double dhs = 0;
            for (int i = 0; i < Tq; i++) {
                const float *P = r->P + (((size_t)b * H + h) * Tq + i) * Tk;
                const float *go = dO + (((size_t)b * Tq + i) * H + h) * dv;
                const float *qi = q->data + (((size_t)b * Tq + i) * H + h) * d;
                int lo, hi;
                span_of(r, Tq, Tk, i, &lo, &hi);
                double dot_sum = 0;
                for (int j = lo; j < hi; j++) {
                    const float *vj = v->data + (((size_t)b * Tk + j) * Hkv + g) * dv;
                    float gs = 0;
                    for (int e = 0; e < dv; e++) gs += go[e] * vj[e];
                    dz[j] = gs;
                    dot_sum += (double)P[j] * gs;
                    if (v->grad) {
                        float *gv = v->grad + (((size_t)b * Tk + j) * Hkv + g) * dv;
                        for (int e = 0; e < dv; e++) gv[e] += P[j] * go[e];
                    }
                }
                for (int j = lo; j < hi; j++) {
                    dz[j] = P[j] * (dz[j] - (float)dot_sum);
                    const float *kj = k->data + (((size_t)b * Tk + j) * Hkv + g) * d;
                    if (hs && hs->grad) {
                        float sij = 0;
                        for (int e = 0; e < d; e++) sij += qi[e] * kj[e];
                        dhs += (double)dz[j] * sij;
                    }
                    if (q->grad) {
                        float *gq = q->grad + (((size_t)b * Tq + i) * H + h) * d;
                        for (int e = 0; e < d; e++) gq[e] += s * dz[j] * kj[e];
                    }
                    if (k->grad) {
                        float *gk = k->grad + (((size_t)b * Tk + j) * Hkv + g) * d;
                        for (int e = 0; e < d; e++) gk[e] += s * dz[j] * qi[e];
                    }
                }
            }
            if (hs && hs->grad) hs->grad[h] += r->scale_used * (float)dhs;
        }
}

static tg_tensor *attention(tg_ctx *ctx, const tg_attn_args *a) {
    tg_tensor *q = a->q, *k = a->k, *v = a->v, *head_scale = a->head_scale;
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || k->shape[0] != q->shape[0] || k->shape[3] != q->shape[3] ||
        v->shape[0] != q->shape[0] || v->shape[1] != k->shape[1] || v->shape[2] != k->shape[2] ||
        q->shape[2] % k->shape[2])
        tg_fail(ctx, "my_attention: q %s, k %s, v %s: want q [B,Tq,H,d], k [B,Tk,Hkv,d], v [B,Tk,Hkv,dv], Hkv | H",
                TG_SHAPE(q), TG_SHAPE(k), TG_SHAPE(v));
    if (head_scale && (head_scale->ndim != 1 || head_scale->shape[0] != q->shape[2]))
        tg_fail(ctx, "my_attention: head_scale %s, want [%d]", TG_SHAPE(head_scale), q->shape[2]);
    const int B = q->shape[0], Tq = q->shape[1], H = q->shape[2], d = q->shape[3], Tk = k->shape[1],
              Hkv = k->shape[2], dv = v->shape[3], group = H / Hkv;
    const rec r0 = {NULL, SCALE_USED(a->scale), a->causal, a->window_left, a->window_right};
    float *Pall = tg_arena_alloc(ctx, sizeof(float) * (size_t)B * H * Tq * Tk);
    memset(Pall, 0, sizeof(float) * (size_t)B * H * Tq * Tk);
    tg_tensor *out = tg_zeros(ctx, 4, (int[]){B, Tq, H, dv});
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int g = h / group;
            const float s = r0.scale_used * head_mult(head_scale, h);
            for (int i = 0; i < Tq; i++) {
                float *P = Pall + (((size_t)b * H + h) * Tq + i) * Tk;
                const float *qi = q->data + (((size_t)b * Tq + i) * H + h) * d;
                int lo, hi;
                span_of(&r0, Tq, Tk, i, &lo, &hi);
                float mx = -INFINITY;
                for (int j = lo; j < hi; j++) {
                    const float *kj = k->data + (((size_t)b * Tk + j) * Hkv + g) * d;
                    float z = 0;
                    for (int e = 0; e < d; e++) z += qi[e] * kj[e];
                    P[j] = s * z;
                    if (P[j] > mx) mx = P[j];
                }
                double sum = 0;
                for (int j = lo; j < hi; j++) sum += P[j] = expf(P[j] - mx);
                for (int j = lo; j < hi; j++) P[j] = (float)(P[j] / sum);
                float *o = out->data + (((size_t)b * Tq + i) * H + h) * dv;
                for (int j = lo; j < hi; j++) {
                    const float *vj = v->data + (((size_t)b * Tk + j) * Hkv + g) * dv;
                    for (int e = 0; e < dv; e++) o[e] += P[j] * vj[e];
                }
            }
        }
    tg_tensor *in[4] = {q, k, v, head_scale};
    tg_node *n = tg_record(ctx, "my_attention", backward, out, head_scale ? 4 : 3, in, sizeof(rec));
    if (n) {
        rec *r = n->saved;
        *r = r0;
        r->P = Pall;
    }
    return out;
}

/* what it implements beyond the textbook call: attn_check probes these, the programs never pass others */
TG_ATTENTION_PLUGIN(attention, TG_ATTN_F_DV | TG_ATTN_F_GQA | TG_ATTN_F_TQ_TK | TG_ATTN_F_WINDOW)
