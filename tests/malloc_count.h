/* Counts every heap allocation in the process (ours, libc's, OpenBLAS's) by
 * interposing malloc and friends on glibc's __libc_* entry points. Sanitizer
 * builds bring their own allocator, so there the counter is unavailable. */
#ifndef TG_MALLOC_COUNT_H
#define TG_MALLOC_COUNT_H
#include <stddef.h>

int malloc_count_available(void);
void malloc_count_start(void);
size_t malloc_count_stop(void);   /* allocations since start */

#endif
