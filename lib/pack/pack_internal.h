/* Internals of Lossless Pack Format v1: an HDF5 file whose user block
 * holds a prelude, a JSON manifest and a binary index over bit-packed
 * shards. Readers use only those and the byte ranges they name, never
 * HDF5 structures. */
#ifndef QEM_PACK_INTERNAL_H
#define QEM_PACK_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/fileio.h"
#include "qem_experimental.h"
#include <string.h>
#include <sys/types.h>
#include <time.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "common/large_alloc.h"
#include "pack/prepared.h"
#include "qem.h"

#define PACK_MAGIC "QGPUH5\0\x01"
#define PACK_PRELUDE_BYTES 24u
#define PACK_INDEX_MAGIC_V1 "QGIX\0\0\0\x01"
#define PACK_INDEX_MAGIC_V3 "QGIX\0\0\0\x03"
#define PACK_RECORD_BYTES 96u
#define PACK_V1_TILE 128u
#define PACK_V3_TILE 32u
#define PACK_CHUNK_BYTES 128u
/* Loading decodes and hashes LZ4 blocks in segments of this many blocks. */
#define PACK_SEGMENT_CHUNKS 256u
/* A thread that loads a whole shard reads its payload this many segments
 * at a time (about 200 KiB), into cache, just before decoding them. */
#define PACK_PIECE_SEGMENTS 8u
#define PACK_MAX_WORDS (1ull << 27) /* descriptor offsets are 27 bits */

#define PACK_SCHEMA_V1 "quantem.gpu.packed-detector-h5/v1"
#define PACK_SCHEMA_V3 "quantem.gpu.packed-detector-h5/v3"
#define PACK_V3_WORKING_DEFINITION \
    "all admitted source counts exactly; authenticated dead pixels set to zero"

typedef struct pack_shard {
    /* From the binary index. */
    uint64_t payload_offset, payload_bytes;
    uint64_t lengths_offset, lengths_bytes;
    uint64_t widths_offset, widths_bytes; /* uint8: compact headers */
    uint64_t decoded_bytes;
    uint32_t descriptor_count, chunk_count;
    uint8_t decoded_sha256[32];
    /* Optional manifest digests of the stored ranges (uint16 profile). */
    int has_compressed_sha256, has_widths_sha256;
    uint8_t compressed_sha256[32], widths_sha256[32];
    /* Resident once loaded. */
    uint32_t *words;       /* decoded (uint16) or stored (uint8) payload */
    uint8_t *tile_widths;  /* uint16: the stored width of each (pixel, tile) */
    uint32_t *pixel_words; /* uint16: the word where each pixel's tiles start */
    uint32_t *headers;     /* uint8: compact headers as stored */
} pack_shard;

struct qem_pack {
    int fd;
    char *path;
    qem_file_stamp stamp; /* the file as opened; checked after loading */
    uint64_t file_size;

    char *manifest_text;
    uint64_t manifest_bytes;
    json_t *manifest;

    qem_pack_profile profile;
    uint64_t shape[4], scans, pixels;
    uint64_t shard_count, sps;
    uint64_t tiles;        /* tiles per pixel per shard */
    uint64_t checkpoints;  /* uint8: checkpoint words per pixel (C) */
    uint64_t width_words;  /* uint8: width words per pixel (W) */
    uint32_t *excluded;    /* ascending row-major indices */
    uint64_t excluded_count;
    uint8_t *is_excluded;  /* pixels bytes */
    uint16_t *raw_constants; /* uint8 profile: one per excluded pixel, or NULL */
    uint8_t identity[32];
    pack_shard *shards;

    qem_dtype working_dtype;
    qem_raw_access raw_access;
    int has_calibration;
    qem_detector_calibration calibration;
    pack_prepared prepared; /* optional extensions, authenticated at open */

    atomic_int loaded;
    /* QEM_LOAD_AWAITED: reads wait for the load another thread runs
     * (qem_pack_ready) rather than being refused. The outcome is set once,
     * under ready_lock, by the first load to end. */
    int load_awaited;
    pthread_mutex_t ready_lock;
    pthread_cond_t ready_cond;
    int load_finished;
    qem_status load_status;
    qem_error load_error;
    uint8_t *max_width; /* per pixel, over every tile and shard, once loaded */
    qem_pack_timings timings;
    struct timespec opened_at;
    int first_diffraction_taken;
    int first_detector_taken;
};

/* QEM_OK once the pack is loaded; while an awaited load runs, waits for
 * it and gives its outcome; otherwise refuses (not loaded). */
qem_status qem_pack_ready(const qem_pack *p, qem_error *error);
/* From now on reads wait for the load (QEM_LOAD_AWAITED). */
void qem_pack_await_load(qem_pack *p);

/* A byte range of the file, named for messages. */
typedef struct pack_range {
    uint64_t start, end;
    char label[48];
} pack_range;

/* Every nonempty shard range and each of `extra` inside the file, and no
 * two overlapping, the user block's prelude, manifest and index
 * ([0, metadata_end)) included. QEM_E_PACK_RANGE, or QEM_E_PACK_PREPARED
 * when `extra` ranges were given. */
qem_status qem_pack_check_ranges(const qem_pack *p, uint64_t metadata_end, const pack_range *extra,
                                 size_t extra_count, qem_error *error);

/* Milliseconds since `start`. */
double qem_pack_elapsed_ms(const struct timespec *start);
void qem_pack_now(struct timespec *t);

/* Exact per-scan sums of the mask-applied working values over the pixels
 * where `mask` is nonzero (excluded pixels never count). `image` holds one
 * value per scan. */
qem_status qem_pack_detector_sums(const qem_pack *pack, const uint8_t *mask, uint64_t *image);

/* Adds each admitted pixel's working-value sum over scans [first, first +
 * count) into sums[p] and raises max[p] (optional); excluded pixels end
 * at 0. Only the resident tiles are read. */
qem_status qem_pack_pixel_sums(const qem_pack *pack, uint64_t first, uint64_t count, uint64_t *sums,
                               uint32_t *max, int threads, qem_error *error);

/* qem_pack_read_scans on `threads` threads (0: OpenMP's default). */
qem_status qem_pack_read_scans_threads(qem_pack *pack, uint64_t first, uint64_t count,
                                       qem_values values, void *out, size_t out_size,
                                       int threads, qem_error *error);

/* Exact out[k * count + i] = sum over admitted pixels p of weights[k][p] *
 * working(first + i, p), unpacking only the tiles of pixels with a nonzero
 * weight, straight from the resident. `threads` 0 = one. */
qem_status qem_pack_weighted_sums(const qem_pack *pack, uint64_t first, uint64_t count,
                                  const int32_t *const *weights, unsigned planes, int64_t *out,
                                  int threads, qem_error *error);

/* Sum of n tile widths (bytes), 16 at a time by SSE2 where the target has
 * it; a tile's words start 4 * (sum of the widths before it) after its
 * pixel's first word. With `widest`, also the largest width (loading
 * checks it in the same pass; lookups pass NULL and the compiler drops it). */
static inline __attribute__((always_inline)) uint64_t pack_width_sum(const uint8_t *w, uint64_t n,
                                                                     uint8_t *widest)
{
    uint64_t sum = 0, k = 0;
    uint8_t top = 0;
#ifdef __SSE2__
    __m128i acc = _mm_setzero_si128(), vmax = _mm_setzero_si128();
    for (; k + 16 <= n; k += 16) {
        const __m128i b = _mm_loadu_si128((const __m128i *)(w + k));
        acc = _mm_add_epi64(acc, _mm_sad_epu8(b, _mm_setzero_si128()));
        if (widest)
            vmax = _mm_max_epu8(vmax, b);
    }
    sum = (uint64_t)_mm_cvtsi128_si64(acc) + (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc));
    if (widest) {
        uint8_t lanes[16];
        _mm_storeu_si128((__m128i *)lanes, vmax);
        for (int i = 0; i < 16; i++)
            top = lanes[i] > top ? lanes[i] : top;
    }
#endif
    for (; k < n; k++) {
        sum += w[k];
        top = w[k] > top ? w[k] : top;
    }
    if (widest)
        *widest = top;
    return sum;
}

/* Resident words with one zeroed word after them: tile unpacking reads
 * words in pairs, branch-free. */
static inline uint32_t *pack_words_alloc(uint64_t bytes)
{
    uint32_t *w = (uint32_t *)qem_large_alloc((size_t)bytes + 8);
    if (w)
        memset((uint8_t *)w + bytes, 0, 8);
    return w;
}

/* Unpacks one tile (count values of width w starting at `word`). */
void qem_pack_unpack_tile(const uint32_t *words, uint64_t word, unsigned width, unsigned count,
                          uint32_t *values);

/* Stored width of tile `tile` of `pixel` (uint8 profile compact headers). */
static inline unsigned pack_v3_width(const qem_pack *p, const uint32_t *headers, uint64_t pixel,
                                     uint64_t tile)
{
    const uint32_t *h = headers + pixel * (p->checkpoints + p->width_words) + p->checkpoints;
    return (h[tile / 8] >> (4 * (tile % 8))) & 15u;
}

/* The complete qem_pack_info of `p` (what qem_pack_get_info delivers). */
void qem_pack_fill_info(const qem_pack *p, qem_pack_info *info);

/* qem_pack_open on a descriptor already open on `path` and stat'ed as `sb`
 * (see qem_open_descriptor). The handle takes `fd`; on failure it is
 * closed. */
struct stat;
qem_status qem_pack_open_descriptor(const char *path, int fd, const struct stat *sb,
                                    qem_pack **out, qem_error *error);

#endif
