/* A bit-packed copy of a .qem file's counts (or scaled codes) in memory,
 * built once in the background so that detector moves and patterns unpack
 * bits instead of decoding rANS streams: about 2.5x less work a sample.
 *
 * One part per 512-scan block of the file: each pixel's samples in tiles of
 * 32 scans, each tile as W bit planes, W the bit length of its largest
 * sample: plane b holds bit b of the tile's 32 samples, bit i for its i-th
 * scan, in two 16-bit halves (low scans first). A tile's code is a nibble:
 * 0-12 that many planes, 13 sixteen (widths 13-16, rare in counts), 14 and
 * 15 one plane whose set bits all lie in scans 0-15 (14) or 16-31 (15),
 * held in one half: most one-plane tiles of sparse counts (dose 4: 70 %),
 * a fifth less memory. The copy holds what was decoded from
 * authenticated blocks, and answers only while a mapped or per-use file is
 * unchanged (qem_packed_copy_check). */
#ifndef QEM_PACKED_COPY_H
#define QEM_PACKED_COPY_H

#include <stdint.h>

#include "qem.h"

#define QEM_PACKED_TILE 32u
#define QEM_PACKED_TILES 16u /* tiles of a 512-scan block */

/* Bytes describing one pixel in a slab: the half where its run of tiles
 * starts (u32, from the slab's first half), then for each of the slab's
 * parts eight bytes of tile codes (tile t's nibble at bits 4 (t % 2) of
 * byte t / 2). A part's tiles follow the previous part's in the run, so
 * where they start is the run's start plus the halves the earlier parts'
 * codes take: no start is stored per part (a third less of the records). */
#define QEM_PACKED_RUN_START 4u
#define QEM_PACKED_CODES 8u

/* Parts a slab gathers (whole chunks, at least one): one allocation in
 * which each pixel's descriptions, then each pixel's halves, lie together
 * for all the slab's parts. A move reads few pixels of every part, so it
 * reads runs of consecutive memory rather than lines scattered over every
 * part (fewer lines, pages and page walks; doc/benchmarks.md). */
#define QEM_PACKED_SLAB_PARTS 16u

typedef struct qem_packed_part {
    uint64_t first;        /* first scan */
    uint32_t scans;        /* samples a pixel (<= 512) */
    uint32_t meta_stride;  /* bytes from one pixel's description to the next */
    uint32_t index;        /* the part's place in its slab */
    const uint8_t *meta;   /* pixel 0's tile codes in this part */
    const uint16_t *halves; /* the slab's; 2 PLANES_READ zero halves after */
} qem_packed_part;

typedef struct qem_packed_copy {
    uint64_t pixels, scans;
    uint64_t part_count;
    qem_packed_part *parts;
    uint64_t *chunk_part; /* the file's chunks: index of each one's first part */
    uint64_t slab_count;
    uint64_t *slab_part;  /* each slab's first part, then part_count */
    void **slabs;         /* each slab's allocation (qem_large_reserve, trimmed) */
    uint64_t *slab_bytes; /* each slab's bytes kept */
    uint64_t bytes;       /* memory held */
    double build_ms;
} qem_packed_copy;

/* Builds the copy of every scan on `threads` threads, published in the
 * file on success (qem_packed_copy_of). QEM_E_LIMIT when it would take
 * more than `limit` bytes (0: no limit), nothing kept; QEM_E_WRONG_CODEC
 * for float files; QEM_E_CHANGED when the file changed meanwhile;
 * `progress` hears parts done (nonzero cancels). Building twice is a no-op. */
qem_status qem_packed_copy_build(qem_file *file, uint64_t limit, int threads,
                                 qem_progress_fn progress, void *progress_user, qem_error *error);

/* The file's published copy, or NULL. */
const qem_packed_copy *qem_packed_copy_of(const qem_file *file);

/* QEM_OK while the copy may answer: a copy of a mapped or per-use file is
 * only as good as the file, so a file changed since is refused
 * (QEM_E_CHANGED), as its decoded columns would be; a copied body's file
 * may change. */
qem_status qem_packed_copy_check(const qem_file *file, qem_error *error);

void qem_packed_copy_free(qem_packed_copy *copy);

/* Exact out[k * count + i] = sum over valid pixels p of weights[k][p] *
 * sample(first + i, p), as qem_weighted_sums. */
qem_status qem_packed_weighted_sums(const qem_file *file, const qem_packed_copy *copy,
                                    uint64_t first, uint64_t count,
                                    const int32_t *const *weights, unsigned planes, int64_t *out,
                                    int threads, qem_error *error);

/* Every pixel's sample at `scan`, as uint8 (item 1) or uint16 (item 2). */
void qem_packed_pattern(const qem_packed_copy *copy, const qem_file *file, uint64_t scan,
                        void *out, unsigned item);

#endif
