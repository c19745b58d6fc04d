/* FNV-1a 64 (tg_core.h): the checkpoints' checksum, the product plan's keys. */
#include "tg_core.h"

uint64_t tg_fnv1a64(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
