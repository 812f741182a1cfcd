#include "common/large_alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

enum { HUGE_PAGE = 2u << 20 };

static size_t page_round(size_t n)
{
    const long page = sysconf(_SC_PAGESIZE);
    const size_t unit = page > 0 ? (size_t)page : 4096u;
    return (n + unit - 1) / unit * unit;
}

void *qem_large_alloc(size_t size)
{
    if (size < (size_t)HUGE_PAGE)
        return malloc(size ? size : 1);
    /* Aligned but not rounded up: the whole 2 MiB pages inside get huge
     * pages, the tail ordinary ones, and nothing is wasted. */
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, size) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, size / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE); /* advice only: ignore refusal */
#endif
    return p;
}

void *qem_large_reserve(size_t size)
{
    size = page_round(size ? size : 1);
    if (size > SIZE_MAX - HUGE_PAGE)
        return NULL;
    /* HUGE_PAGE more than asked, then the unaligned ends unmapped. */
    uint8_t *map = mmap(NULL, size + HUGE_PAGE, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED)
        return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)map + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > map)
        munmap(map, (size_t)(p - map));
    const size_t tail = (size_t)(map + size + HUGE_PAGE - (p + size));
    if (tail)
        munmap(p + size, tail);
#ifdef MADV_HUGEPAGE
    madvise(p, size / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE); /* advice only */
#endif
    return p;
}

void qem_large_trim(void *p, size_t reserved, size_t keep)
{
    const size_t from = page_round(keep ? keep : 1), to = page_round(reserved ? reserved : 1);
    if (p && from < to)
        munmap((uint8_t *)p + from, to - from);
}

void qem_large_release(void *p, size_t size)
{
    if (p)
        munmap(p, page_round(size ? size : 1));
}
