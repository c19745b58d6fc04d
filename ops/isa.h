/* Which hand-written per-ISA copy this CPU and build run (the attention tiles,
 * gelu's loops: 1 AVX-512, 2 AVX2+FMA, 3 plain C; x86-64 with GCC only, where
 * the copies are compiled). Header-only, internal. */
#ifndef TG_OPS_ISA_H
#define TG_OPS_ISA_H

/* isa 0: the best this CPU runs (AVX-512 unless built with
 * -DTG_AVX512_CLONES=OFF, else AVX2, else C); 1, 2, 3: that copy. Returns the
 * copy to use, or 0 when this CPU or build cannot run the one asked for. */
static inline int tg_isa_pick(int isa) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#ifdef TG_NO_AVX512_CLONES   /* -DTG_AVX512_CLONES=OFF: the AVX2 code on any machine (docs/speed.md) */
    const int avx512 = 0;
#else
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
#endif
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    const int avx512 = 0, avx2 = 0;
#endif
    switch (isa) {
    case 0: return avx512 ? 1 : avx2 ? 2 : 3;
    case 1: return avx512 ? 1 : 0;
    case 2: return avx2 ? 2 : 0;
    case 3: return 3;
    default: return 0;
    }
}

#endif
