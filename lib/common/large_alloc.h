/* Large buffers that are filled once (a float chunk, a pack shard's
 * resident words or payload): in 2 MiB pages where the kernel offers them
 * on request, so that filling tens of MiB is not thousands of 4 KiB page
 * faults. Free with free(). */
#ifndef QEM_COMMON_LARGE_ALLOC_H
#define QEM_COMMON_LARGE_ALLOC_H

#include <stddef.h>

void *qem_large_alloc(size_t size);

#endif
