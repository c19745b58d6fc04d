/* SHA-256 (FIPS 180-4) of bytes and of files: the identity of a plugin (and of
 * any input a run must not silently swap) in logs and checkpoints. */
#ifndef TG_SHA256_H
#define TG_SHA256_H
#include <stddef.h>
#include <stdint.h>

/* Internal to the kernel layer since 0.20 (the training kit's from 0.18: a digest plugins, exec kernels' files and
 * the code task's corpus are named by): not installed, and hidden in a shared libtapegrad_attn; the programs and
 * tests here link the layer's objects. */
#pragma GCC visibility push(hidden)

typedef struct tg_sha256 {
    uint32_t h[8];
    uint64_t bytes;
    unsigned char buf[64];
    size_t nbuf;
} tg_sha256;

void tg_sha256_init(tg_sha256 *s);
void tg_sha256_update(tg_sha256 *s, const void *data, size_t n);
void tg_sha256_final(tg_sha256 *s, unsigned char digest[32]);
/* The digest as 64 lowercase hex digits and a NUL. */
void tg_sha256_hex(const unsigned char digest[32], char hex[65]);
/* The hex digest of a whole file; 0, or -1 with a message naming the file in err. */
int tg_sha256_file(const char *path, char hex[65], char *err, size_t errlen);

#pragma GCC visibility pop
#endif
