/* Decoded pixel columns of a resident .qem body, kept for detector
 * reductions that touch few pixels (a detector dragged back and forth, an
 * annulus resized): the columns a move decoded are what the next move
 * back needs. One column is one pixel's samples in one 512-scan block,
 * keyed by (chunk, block, pixel) of its own open file: the body they were
 * decoded from is held in memory and never changes, so an entry can be
 * wrong for no other file and no later state of the file. A fixed number
 * of entries, the least recently used replaced; safe from many threads. */
#ifndef QEM_QEM_COLUMN_CACHE_H
#define QEM_QEM_COLUMN_CACHE_H

#include <stdint.h>

#include "qem.h"

typedef struct qem_column_cache qem_column_cache;

/* A cache of at most `bytes` (entries of one 512-sample column and their
 * bookkeeping; the memory is taken as it fills). */
qem_status qem_column_cache_new(uint64_t bytes, qem_column_cache **out, qem_error *error);
void qem_column_cache_free(qem_column_cache *cache);
/* How many columns it can hold. */
uint64_t qem_column_cache_capacity(const qem_column_cache *cache);

/* The kept column of `pixel` in (chunk, block), held (its shard locked)
 * until qem_column_cache_release(*hold); NULL (nothing held) when it is
 * not kept. Counts a hit or a miss. */
typedef void *qem_column_hold;
const uint16_t *qem_column_cache_hold(qem_column_cache *cache, uint64_t chunk, uint64_t block,
                                      uint64_t pixel, qem_column_hold *hold);
void qem_column_cache_release(qem_column_hold hold);
/* Keeps the columns of pixels[0 .. count) of (chunk, block), column j at
 * columns + j * samples (samples <= 512). */
void qem_column_cache_put(qem_column_cache *cache, uint64_t chunk, uint64_t block,
                          const uint64_t *pixels, uint64_t count, uint32_t samples,
                          const uint16_t *columns);
void qem_column_cache_stats(qem_column_cache *cache, uint64_t *hits, uint64_t *misses);

#endif
