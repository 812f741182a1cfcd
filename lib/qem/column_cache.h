/* Decoded pixel columns of one .qem file (qem_open_options.column_cache_bytes):
 * a pixel's samples over every scan, kept after a detector reduction decoded
 * them, so that a later reduction needing the pixel again (a detector moved
 * back and forth, an edge that entered and now leaves) reads them instead of
 * decoding. Bounded in bytes, least recently used out. A column is stored as
 * uint8 until a sample above 255 shows the pixel needs 16 bits.
 *
 * A column is listed only once complete: it is filled while a reduction
 * runs over the scans in order (a product's pieces), and published when the
 * last scan is in. Users pin what they read; a column evicted while pinned
 * is freed by its last release. The cache belongs to its file, so no other
 * file's column is ever served; a file found changed clears it. */
#ifndef QEM_COLUMN_CACHE_H
#define QEM_COLUMN_CACHE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct qem_column {
    uint64_t pixel;
    int wide;      /* samples are uint16, else uint8 */
    void *samples; /* one per scan */
    uint64_t bytes;
    /* Set by a fill that met a sample above 255 in a uint8 column: the
     * column is then dropped at publication and the pixel marked wide. */
    atomic_int overflow;
    /* Under the cache's lock: */
    int pins;
    int listed;
    struct qem_column *newer, *older;
} qem_column;

typedef struct qem_column_cache {
    uint64_t limit; /* bytes; 0: the cache is off */
    uint64_t scans, pixels;
    pthread_mutex_t lock;
    uint64_t bytes; /* columns listed, being filled, or evicted but pinned */
    uint64_t listed;
    qem_column **by_pixel;   /* the listed column of each pixel, or NULL */
    qem_column *newest, *oldest;
    atomic_uchar *wide;      /* pixels: a sample above 255 was seen */
    atomic_ullong hits, misses;
} qem_column_cache;

/* An empty cache, off. */
void qem_column_cache_init(qem_column_cache *cache);
/* Turns it on for columns of `scans` samples of `pixels` pixels, holding
 * up to `limit` bytes (0 leaves it off); 0 when memory runs out. */
int qem_column_cache_start(qem_column_cache *cache, uint64_t pixels, uint64_t scans,
                           uint64_t limit);
void qem_column_cache_free(qem_column_cache *cache);
/* Drops every listed column (pinned ones go with their last release). */
void qem_column_cache_clear(qem_column_cache *cache);

/* The pixel's complete column, pinned and made the most recent, or NULL
 * (counted as a hit or a miss). */
qem_column *qem_column_take(qem_column_cache *cache, uint64_t pixel);
/* A new unlisted column for the pixel to be filled, pinned by the caller,
 * its bytes counted in the cache's (least recently used columns make room,
 * their memory reused); NULL when it cannot fit beside the columns pinned
 * or being filled, or memory runs out. */
qem_column *qem_column_new(qem_column_cache *cache, uint64_t pixel);
/* Lists a filled column (the caller's pin goes): dropped instead when it
 * overflowed (the pixel is then filled as uint16 next time) or when the
 * pixel is already listed. */
void qem_column_publish(qem_column_cache *cache, qem_column *column);
void qem_column_release(qem_column_cache *cache, qem_column *column);

void qem_column_cache_read_stats(qem_column_cache *cache, uint64_t *hits, uint64_t *misses,
                                 uint64_t *columns, uint64_t *bytes, uint64_t *limit);

/* Copies tile rows [lo, hi) (row i holds `width` samples of the pixels in
 * order; dst[j] takes column j, or skips it when NULL) into each column at
 * scan `scan0 + i`. */
void qem_columns_fill(qem_column *const *dst, const uint16_t *tile, uint64_t width, uint32_t lo,
                      uint32_t hi, uint64_t scan0);

/* out[k * count + s - first] += sum over j of weight[j * planes + k] x
 * column j's sample at scan s, for s in [first, first + count): exact.
 * `avx2`: the caller's decision, as for its decoding (not forced scalar,
 * and the CPU has it). */
void qem_columns_accumulate(const qem_column *const *columns, const int32_t *weight, uint64_t n,
                            unsigned planes, uint64_t first, uint64_t count, int64_t *out,
                            int avx2, int threads);

#endif /* QEM_COLUMN_CACHE_H */
