#include "common/large_alloc.h"

#include <stdlib.h>
#include <sys/mman.h>

void *qem_large_alloc(size_t size)
{
    enum { HUGE = 2u << 20 };
    if (size < (size_t)HUGE)
        return malloc(size ? size : 1);
    /* Aligned but not rounded up: the whole 2 MiB pages inside get huge
     * pages, the tail ordinary ones, and nothing is wasted. */
    void *p = NULL;
    if (posix_memalign(&p, HUGE, size) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, size / HUGE * HUGE, MADV_HUGEPAGE); /* advice only: ignore refusal */
#endif
    return p;
}
