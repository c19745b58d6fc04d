/* One ISA's copy of GELU's loops (gelu_vec.h), included by gelu_vec.c once per
 * ISA with GV(name), GV_NAME, GV_TARGET, GV_W (floats a vector), V, M (a tail
 * mask) and the V_* operations defined. Every line is the C copy's
 * (gelu_vec.c), operation for operation. No include guard: that is the point. */

/* tanh u */
GV_TARGET __attribute__((always_inline)) static inline V GV(tanh_u)(V u) {
    const V x = V_MUL(V_MIN(V_ABS(u), V_SET1(20.0f)), V_SET1(-2.0f));   /* min: NaN → 20 */
    const V shift = V_SET1(12582912.0f);   /* 1.5·2²³: adding it rounds to an integer */
    const V n = V_SUB(V_FMA(x, V_SET1(1.44269504f), shift), shift);
    const V r = V_FMA(n, V_SET1(2.12194440e-4f), V_FMA(n, V_SET1(-0.693359375f), x));
    const V r2 = V_MUL(r, r), r4 = V_MUL(r2, r2);
    const V lo = V_FMA(V_FMA(r, V_SET1(1.0f / 6), V_SET1(0.5f)), r2, V_ADD(r, V_SET1(1.0f)));
    const V hi = V_FMA(V_FMA(r, V_SET1(1.0f / 5040), V_SET1(1.0f / 720)), r2,
                       V_FMA(r, V_SET1(1.0f / 120), V_SET1(1.0f / 24)));
    const V e = V_MUL(V_FMA(hi, r4, lo), V_POW2(n));
    return V_COPYSIGN(V_DIV(V_SUB(V_SET1(1.0f), e), V_ADD(V_SET1(1.0f), e)), u);
}

GV_TARGET __attribute__((always_inline)) static inline V GV(gelu)(V v) {
    const V u = V_MUL(V_MUL(V_SET1(GV_C), v), V_FMA(V_MUL(v, v), V_SET1(GV_K), V_SET1(1.0f)));
    return V_MUL(V_MUL(V_SET1(0.5f), v), V_ADD(V_SET1(1.0f), GV(tanh_u)(u)));
}

GV_TARGET __attribute__((always_inline)) static inline V GV(grad)(V v) {
    const V v2 = V_MUL(v, v);
    const V t = GV(tanh_u)(V_MUL(V_MUL(V_SET1(GV_C), v), V_FMA(v2, V_SET1(GV_K), V_SET1(1.0f))));
    const V du = V_MUL(V_SET1(GV_C), V_FMA(v2, V_SET1(3.0f * GV_K), V_SET1(1.0f)));
    return V_FMA(V_MUL(V_MUL(V_SET1(0.5f), v), V_FNMA(t, t, V_SET1(1.0f))), du, V_FMA(V_SET1(0.5f), t, V_SET1(0.5f)));
}

GV_TARGET static void GV(fwd)(const float *x, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + GV_W <= n; i += GV_W) {
        const V v = b ? V_ADD(V_LOAD(x + i), V_LOAD(b + i)) : V_LOAD(x + i);
        V_STORE(y + i, GV(gelu)(v));
    }
    if (i < n) {
        const M m = M_FIRST(n - i);
        const V v = b ? V_ADD(V_LOADM(x + i, m), V_LOADM(b + i, m)) : V_LOADM(x + i, m);
        V_STOREM(y + i, m, GV(gelu)(v));
    }
}

/* one vector of the backward: d = g·gelu'(v) into dx (or added) and added to db */
GV_TARGET __attribute__((always_inline)) static inline void GV(bwd_at)(const float *x, const float *b, const float *g,
                                                                       float *dx, float *db, int add, int64_t i,
                                                                       int masked, M m) {
    const V xv = masked ? V_LOADM(x + i, m) : V_LOAD(x + i);
    const V v = b ? V_ADD(xv, masked ? V_LOADM(b + i, m) : V_LOAD(b + i)) : xv;
    const V d = V_MUL(masked ? V_LOADM(g + i, m) : V_LOAD(g + i), GV(grad)(v));
    if (dx) {
        const V o = add ? V_ADD(masked ? V_LOADM(dx + i, m) : V_LOAD(dx + i), d) : d;
        if (masked) V_STOREM(dx + i, m, o);
        else V_STORE(dx + i, o);
    }
    if (db) {
        const V o = V_ADD(masked ? V_LOADM(db + i, m) : V_LOAD(db + i), d);
        if (masked) V_STOREM(db + i, m, o);
        else V_STORE(db + i, o);
    }
}

GV_TARGET static void GV(bwd)(const float *x, const float *b, const float *g, float *dx, float *db, int64_t n,
                              int add) {
    int64_t i = 0;
    const M none = M_FIRST(0);
    for (; i + GV_W <= n; i += GV_W) GV(bwd_at)(x, b, g, dx, db, add, i, 0, none);
    if (i < n) GV(bwd_at)(x, b, g, dx, db, add, i, 1, M_FIRST(n - i));
}

static const tg_gelu_ops GV(ops) = {GV_NAME, GV(fwd), GV(bwd)};
