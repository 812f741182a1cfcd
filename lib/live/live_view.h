/* A recording seen while it runs: the stored frames so far in an
 * anonymous journal file, and a container over them (unreceived positions
 * read as zeros) that products and the viewer use like any file. */
#ifndef QEM_LIVE_LIVE_VIEW_H
#define QEM_LIVE_LIVE_VIEW_H

#include <stdint.h>

#include "input/input.h"
#include "qem.h"

typedef struct live_journal {
    int fd; /* -1 until opened */
    uint64_t shape[4];
    qem_dtype dtype;
    size_t frame_bytes;
    uint64_t frames; /* readable frames (atomic) */
    int ready;       /* opened (atomic) */
    char *url;
} live_journal;

qem_status qem_live_journal_open(live_journal *j, const char *dir, const char *dest,
                                 const uint64_t shape[4], qem_dtype dtype, qem_error *error);
/* Frames [first, first + count) of the stored type. */
qem_status qem_live_journal_append(live_journal *j, uint64_t first, const void *frames,
                                   uint64_t count, qem_error *error);
/* Frames [0, count) are readable. */
void qem_live_journal_published(live_journal *j, uint64_t count);
int qem_live_journal_ready(const live_journal *j);
/* A container over the journal, valid until the journal closes. */
qem_status qem_live_journal_container(live_journal *j, const acquisition *a, qem_container **out,
                                      qem_error *error);
void qem_live_journal_close(live_journal *j);

#endif
