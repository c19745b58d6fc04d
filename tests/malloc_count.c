#include "malloc_count.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
int malloc_count_available(void) { return 0; }
void malloc_count_start(void) {}
size_t malloc_count_stop(void) { return 0; }
#else
#include <errno.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static int counting;
static size_t count;

int malloc_count_available(void) { return 1; }
void malloc_count_start(void) { count = 0; counting = 1; }
size_t malloc_count_stop(void) { counting = 0; return count; }

void *malloc(size_t n) {
    if (counting) count++;
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t m) {
    if (counting) count++;
    return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n) {
    if (counting) count++;
    return __libc_realloc(p, n);
}
void *aligned_alloc(size_t a, size_t n) {
    if (counting) count++;
    return __libc_memalign(a, n);
}
void *memalign(size_t a, size_t n) {
    if (counting) count++;
    return __libc_memalign(a, n);
}
int posix_memalign(void **out, size_t a, size_t n) {
    if (counting) count++;
    void *p = __libc_memalign(a, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
#endif
