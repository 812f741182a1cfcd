/* Large buffers that are filled once (a float chunk, a pack shard's
 * resident words or payload): in 2 MiB pages where the kernel offers them
 * on request, so that filling tens of MiB is not thousands of 4 KiB page
 * faults. Free with free(). */
#ifndef QEM_COMMON_LARGE_ALLOC_H
#define QEM_COMMON_LARGE_ALLOC_H

#include <stddef.h>

void *qem_large_alloc(size_t size);

/* Address space for up to `size` bytes, filled from the front, of which
 * only the pages touched take memory: a buffer whose final size is known
 * only once it is filled is written where it will stay, not staged and
 * copied. 2 MiB aligned, in 2 MiB pages where the kernel offers them; NULL
 * if refused. qem_large_trim returns all but the first `keep` of the
 * `reserved` bytes; qem_large_release frees the `size` bytes kept. */
void *qem_large_reserve(size_t size);
void qem_large_trim(void *p, size_t reserved, size_t keep);
void qem_large_release(void *p, size_t size);

#endif
