/* Progress of a preliminary step told in the units of the work after it. */
#ifndef QEM_COMMON_PROGRESS_H
#define QEM_COMMON_PROGRESS_H

#include <stdint.h>

#include "qem.h"

/* A caller's callback and the total of the work it was promised. */
typedef struct qem_progress_before {
    qem_progress_fn progress;
    void *progress_user;
    uint64_t total;
} qem_progress_before;

/* A qem_progress_fn for a step that comes before the counted work (a
 * whole-file hash before the shards or scans): it reports "0 of total
 * done", so that the caller sees consistent units and can still cancel. */
static inline int qem_progress_none_done_yet(void *user, uint64_t done, uint64_t total)
{
    const qem_progress_before *b = user;
    (void)done;
    (void)total;
    return b->progress(b->progress_user, 0, b->total);
}

#endif
