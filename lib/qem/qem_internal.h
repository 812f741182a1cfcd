/* Internals of the .qem container (QuantEM data, container version 1). */
#ifndef QEM_QEM_INTERNAL_H
#define QEM_QEM_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "qem.h"
#include "qem_experimental.h"
#include "common/fileio.h"
#include "common/threads.h"
#include "qem/column_cache.h"
#include "qem/metadata.h"
#include "rans/rans.h"

#define QEM_MAGIC "QEMDATA1"
#define QEM_PREFIX_BYTES 56u
#define QEM_MAX_HEADER_BYTES (16u << 20)
#define QEM_BODY_BLOCK_BYTES (1ull << 26)
#define QEM_INTERVAL 512u
/* Decoded 512-scan blocks kept per open file for single-pattern reads. */
#define QEM_PATTERN_BLOCKS 2
#define QEM_AXIS_LIMIT (1ull << 24) /* every axis lies in (0, 2^24) */
#define QEM_INT_ARRAYS 6

/* --- detector geometry and the spatial-sum fields ------------------------ */

typedef struct qem_geometry {
    uint64_t rows, columns, pixels;
    uint32_t tile8_columns, fields8;   /* 8x8 tiles, row-major */
    uint32_t tile32_columns, fields32; /* then 32x32 tiles */
    uint32_t fields;                   /* F = fields8 + fields32 */
} qem_geometry;

void qem_geometry_init(qem_geometry *g, uint64_t rows, uint64_t columns);

/* Field indices of pixel (r, c): its 8x8 tile and its 32x32 tile. */
static inline uint32_t qem_field8_of(const qem_geometry *g, uint64_t r, uint64_t c)
{
    return (uint32_t)((r / 8) * g->tile8_columns + c / 8);
}
static inline uint32_t qem_field32_of(const qem_geometry *g, uint64_t r, uint64_t c)
{
    return g->fields8 + (uint32_t)((r / 32) * g->tile32_columns + c / 32);
}

/* Per scan, the F field sums of valid pixels over `n` scans of a window
 * laid out [scan][pixel] (u8 or u16). `sums` holds n*F values. */
void qem_spatial_sums_from_rows(const qem_geometry *g, const uint8_t *valid, const void *rows,
                                qem_dtype dtype, uint64_t n, uint64_t *sums);

/* --- envelope ------------------------------------------------------------- */

/* Reads and authenticates the prefix and header: signature, lengths, and
 * the header SHA-256 (before any parsing). Returns the header bytes. */
qem_status qem_envelope_read(int fd, uint64_t file_size, char **header, uint64_t *header_bytes,
                             qem_error *error);

/* The 56-byte prefix for a header of `size` bytes. */
qem_status qem_envelope_prefix(const char *header, size_t size, uint8_t prefix[QEM_PREFIX_BYTES],
                               qem_error *error);

/* --- header --------------------------------------------------------------- */

typedef struct qem_array_ref {
    uint64_t offset; /* body-relative byte offset */
    uint64_t count;  /* elements */
} qem_array_ref;

/* One chunk of any codec. Its count streams are `blocks` x `lanes`: the
 * integer and scaled codecs have one lane per pixel and 512-scan blocks;
 * the float codec has one block and two u16 lanes per pixel (low word
 * first). arrays[0..2] are payload (bytes), stream offsets (u32) and model
 * selectors (u8); the integer codec adds the three spatial arrays. */
typedef struct qem_chunk {
    uint64_t first, scans, blocks, lanes;
    uint64_t region; /* scaled codec: index into the precision report */
    qem_array_ref arrays[QEM_INT_ARRAYS];
} qem_chunk;

/* A region of the scaled codec's precision report. */
typedef struct qem_region {
    uint64_t first, stop;
    double scale, offset;
} qem_region;

/* A decoded block of scans kept for single-pattern reads (qem_file). */
typedef struct qem_pattern_block {
    uint8_t *data;
    size_t size;        /* bytes allocated */
    uint64_t first;     /* first scan */
    uint64_t count;     /* scans held */
    int output;         /* the qem_output the values are in */
    uint64_t tick;      /* last use */
    int used;
} qem_pattern_block;

struct qem_file {
    int fd;
    char *path;
    qem_file_stamp stamp; /* the file as opened; checked after validation */
    uint64_t file_size;

    char *header_text;
    uint64_t header_bytes;
    uint64_t body_start;
    uint64_t body_bytes;
    json_t *header;

    qem_codec codec;
    qem_dtype dtype;
    uint64_t shape[4];
    uint64_t scans, pixels;
    qem_geometry geometry;
    uint8_t *valid; /* pixels bytes, 1 = valid */
    uint64_t valid_count;

    uint8_t (*block_sha)[32];
    uint64_t block_count;
    /* Per body block: 0 not checked, 1 authenticated, 2 being hashed by
     * one thread, whom another thread needing it waits for (check_done,
     * under check_lock) rather than hashing it too. */
    atomic_uchar *block_checked;
    pthread_mutex_t check_lock;
    pthread_cond_t check_done;

    qem_chunk *chunks;
    uint64_t chunk_count;

    qem_region *regions; /* scaled codec */
    uint64_t region_count;
    uint8_t logical_sha256[32]; /* float codec: digest of the original bits */
    float *dark;                /* float codec: optional mean-dark plane */

    /* The encoded body held in memory (qem_open_options.resident):
     * authenticated once while opening, then every chunk view points into
     * it; at least QEM_SPAN_PADDING zero bytes follow the body. A copy is
     * 64-byte aligned; a mapping aligns the body as the file does, so
     * views read arrays through unaligned loads. NULL when chunks are read
     * from the file per use. */
    const uint8_t *resident;
    /* Set only while the open fills a copy: body checks read into it. */
    uint8_t *resident_fill;
    /* The mapping behind `resident` (QEM_RESIDENT_MAPPED), else NULL: the
     * file from offset 0 on a 2 MiB boundary, inside an anonymous
     * reservation of zero pages (`resident_area`) that pads it. */
    uint8_t *resident_map;
    void *resident_area;
    size_t resident_area_bytes;
    /* Resident bodies: chunks whose arrays passed every rule already
     * (decoding still bounds-checks each span it uses, so a mapped file
     * changed in place cannot lead a read astray). */
    atomic_uchar *chunk_checked;
    /* Each pixel's sum over every scan as qem's writer recorded it
     * (pixel_sums.h), checked while opening; NULL when not recorded. */
    uint64_t *recorded_sums;
    /* The default detector's image as the writer recorded it
     * (detector_image.h), checked while opening: each scan's sum over
     * recorded_image_mask (pixels bytes, 0/1); NULL when not recorded. */
    uint64_t *recorded_image;
    uint8_t *recorded_image_mask;

    qem_rans_path rans_path; /* resolved once at open */
    int threads;
    /* The last chunk buffer given back, kept for the next chunk: a float
     * chunk is tens of MiB, which fresh pages would make the kernel zero
     * again for every chunk. Its capacity sits in its first 8 bytes. */
    _Atomic(uint8_t *) spare_buffer;
    /* One pattern read through the representation (the viewer's cursor,
     * Python's f[r, c], qem_products_frame) decodes the 512-scan block that
     * holds it, about what one scan costs; the last QEM_PATTERN_BLOCKS
     * blocks are kept (least recently used replaced), so neighbouring
     * patterns are copies. pattern_lock guards them. */
    pthread_mutex_t pattern_lock;
    qem_pattern_block pattern_blocks[QEM_PATTERN_BLOCKS];
    uint64_t pattern_clock;
    atomic_ullong pattern_hits, pattern_misses;
    /* The last detector plan (select.c), kept for the next call with the
     * same weights: a product runs in pieces of scans, and planning a
     * 192 x 192 detector costs as much as a small move decodes.
     * plan_lock guards the pointer and the plan's reference count. */
    pthread_mutex_t plan_lock;
    struct select_cached_plan *last_plan;
    /* Decoded pixel columns kept for later reductions (select.c). */
    qem_column_cache columns;
    /* The bit-packed copy of every count (packed_copy.h), once built. */
    _Atomic(struct qem_packed_copy *) packed;
};

/* Drops the file's kept detector plan (select.c; qem_close). */
void qem_select_plan_drop(qem_file *file);

/* Validates the parsed header against the file (codec, shape, lengths,
 * checksum table and codec layout) and fills `file`. */
qem_status qem_header_load(qem_file *file, qem_error *error);

/* Authenticates every body block overlapping [begin, end) that has not
 * been checked yet (or every one, when `again` is set). Returns the number
 * of blocks hashed in *hashed if non-NULL. `progress` (or NULL) hears the
 * bytes hashed of those to hash, on the calling thread only (a binding
 * checks its signals there); nonzero cancels (QEM_E_CANCELLED). */
/* A mapped body's pages all mapped now (none faults later); nothing for
 * a body read per use or copied. */
void qem_body_populate(qem_file *file);
/* A mapped body's pages of body bytes [begin, end) out of the process
 * (whole pages inside the range): a later read maps them again from the
 * page cache. Nothing for a body read per use or copied. */
void qem_body_release(qem_file *file, uint64_t begin, uint64_t end);
qem_status qem_body_check_range(qem_file *file, uint64_t begin, uint64_t end, int again,
                                uint64_t *hashed, qem_progress_fn progress, void *progress_user,
                                qem_error *error);

/* --- reading chunks -------------------------------------------------------- */

/* One chunk's arrays in memory, checked for internal consistency. */
typedef struct qem_chunk_view {
    const qem_chunk *chunk;
    qem_file *file;
    const qem_rans_tables *tables; /* the process's, resolved once per load */
    uint8_t *buffer;
    size_t buffer_capacity;
    const uint8_t *payload;
    /* The arrays where they lie: little-endian words that need not be
     * aligned (float arrays follow each other unpadded, and a mapped body
     * starts where the file's header ends); read through the calls below. */
    const uint8_t *offset_bytes; /* u32, blocks * lanes + 1 */
    const uint8_t *models;       /* blocks * lanes */
    const uint8_t *spatial_word_bytes;   /* u32 */
    const uint8_t *spatial_offset_bytes; /* u64, blocks * fields + 1 */
    const uint8_t *spatial_widths;       /* blocks * fields */
} qem_chunk_view;

static inline uint32_t qem_view_offset(const qem_chunk_view *v, uint64_t s)
{
    uint32_t x;
    memcpy(&x, v->offset_bytes + 4 * s, sizeof x);
    return x;
}

static inline uint64_t qem_view_spatial_offset(const qem_chunk_view *v, uint64_t s)
{
    uint64_t x;
    memcpy(&x, v->spatial_offset_bytes + 8 * s, sizeof x);
    return x;
}

/* Stream s's payload span, or 0 when it does not lie inside the payload:
 * each offset is read once, so what is checked is what is used. */
static inline int qem_view_span(const qem_chunk_view *v, uint64_t s, uint32_t *lo, uint32_t *hi)
{
    *lo = qem_view_offset(v, s);
    *hi = qem_view_offset(v, s + 1);
    return *lo <= *hi && *hi <= v->chunk->arrays[0].count;
}

/* Unpacks spatial stream s (n values) of a view; QEM_E_SPATIAL when its
 * words do not lie inside the chunk's spatial words. */
qem_status qem_view_spatial_unpack(const qem_chunk_view *v, uint64_t s, uint32_t n,
                                   uint32_t *values);

qem_status qem_chunk_load(qem_file *file, uint64_t index, int with_spatial, qem_chunk_view *view,
                          qem_error *error);
void qem_chunk_view_free(qem_chunk_view *view);

/* Samples in block `block` of a chunk. */
static inline uint32_t qem_block_samples(const qem_chunk *c, uint64_t block)
{
    uint64_t left = c->scans - block * QEM_INTERVAL;
    return (uint32_t)(left < QEM_INTERVAL ? left : QEM_INTERVAL);
}

/* Decodes streams [lane0, lane0 + count) of block `block` into `out`
 * (count columns of the block's samples), on the file's decode path. On
 * failure *failed is the first bad lane. */
qem_status qem_chunk_decode_lanes(const qem_file *file, const qem_chunk_view *view,
                                  uint64_t block, uint64_t lane0, uint64_t count, uint16_t *out,
                                  uint64_t *failed);
/* The same for an arbitrary list of lanes; out[j] receives lanes[j]. */
qem_status qem_chunk_decode_list(const qem_file *file, const qem_chunk_view *view, uint64_t block,
                                 const uint64_t *lanes, uint64_t count, uint16_t *out,
                                 uint64_t *failed);

/* The same into a tile of scan rows: sample i of lanes[j] at
 * tile[i * count + j] (count <= 128); products sum rows of it. */
qem_status qem_chunk_decode_rows(const qem_file *file, const qem_chunk_view *view, uint64_t block,
                                 const uint64_t *lanes, uint64_t count, uint16_t *tile,
                                 uint64_t *failed);

/* Decodes stream (block, lane) of a loaded chunk into `out`. */
qem_status qem_chunk_decode_stream(const qem_file *file, const qem_chunk_view *view,
                                   uint64_t block, uint64_t lane, uint16_t *out,
                                   qem_error *error);

/* What a read produces. */
typedef enum qem_output {
    QEM_OUTPUT_NATIVE, /* the file's dtype: u8/u16 counts or float32 bits */
    QEM_OUTPUT_CODES,  /* scaled codec: the stored u16 codes */
    QEM_OUTPUT_VALUES  /* float32 values: counts, float bits or restored codes */
} qem_output;

/* Decodes scans [first, first + count) with an explicit thread count. A
 * float file read whole is checked against logical_sha256. */
qem_status qem_read_into(qem_file *file, uint64_t first, uint64_t count, qem_output kind,
                         void *out, size_t out_size, int threads, qem_error *error);

/* Bytes per element of `kind` for this file; 0 if the codec has none. */
size_t qem_output_item(const qem_file *file, qem_output kind);

/* Decodes every stream of `block` of a loaded chunk and writes its samples
 * [lo, hi) as scan rows of `kind`. */
qem_status qem_decode_block(const qem_file *file, const qem_chunk_view *view, uint64_t block,
                            uint32_t lo, uint32_t hi, qem_output kind, uint8_t *rows, int threads,
                            qem_error *error);

/* Compares a digest of the decoded float32 bits with logical_sha256. */
/* Writes the decoded array as a 4D .npy, one chunk at a time: counts,
 * float32 bits (proven against logical_sha256 before the file appears),
 * restored scaled values or (values RAW) a scaled file's codes. */
qem_status qem_file_export_npy(qem_file *file, const char *dest,
                               const qem_export_options *options, qem_error *error);
qem_status qem_logical_digest_check(const qem_file *file, const uint8_t digest[32],
                                    qem_error *error);

/* qem_open on a descriptor already open on `path` and stat'ed as `sb`
 * (qem_container_open identifies the file through it, so what was
 * identified is what is read). The handle takes `fd`; on failure it is
 * closed. */
struct stat;
/* The file a writer is finishing, over its body alone (body_fd from
 * offset 0, hashed as written, so no block is checked again), read per
 * chunk (a mapping would count the whole body in the writer's resident
 * memory): what the writer computes from its own output. */
qem_status qem_open_written(const char *path, const char *header_text, size_t header_bytes,
                            int body_fd, uint64_t body_bytes, int threads, qem_file **out,
                            qem_error *error);
qem_status qem_open_descriptor(const char *path, int fd, const struct stat *sb,
                               const qem_open_options *options,
                               const qem_experimental_open_options *experimental,
                               qem_file **out, qem_error *error);

/* Chunk containing flat scan `scan` (binary search). */
uint64_t qem_chunk_index_of(const qem_file *file, uint64_t scan);

/* Validates the float codec's empad block, keeping any mean-dark plane. */
qem_status qem_empad_load(qem_file *file, const json_t *empad, qem_error *error);
/* The empad block a writer stores; with `dark` (pixels floats) it carries
 * the mean-dark recipe, its identity computed when `identity` is NULL. */
json_t *qem_empad_new(const float *dark, uint64_t pixels, const char *identity);
/* Recipe identity: SHA-256 of the schema, a NUL, the dark frames, the plane. */
void qem_dark_identity(const float *plane, uint64_t pixels, const void *frames,
                       uint64_t frames_bytes, char hex[65]);

/* The scaled codec's precision report: validated regions. */
qem_status qem_precision_load(const json_t *report, const uint64_t shape[4],
                              qem_region **regions, uint64_t *count, qem_error *error);
/* Scaled files must declare scaled_uint16_quantization as a change. */
qem_status qem_precision_check_processing(const json_t *scientific, qem_error *error);

/* --- selected-pixel reductions (products) -------------------------------- */

/* Exact out[k * count + i] = sum over valid pixels p of weights[k][p] *
 * value(first + i, p) for the integer codec's counts or the scaled codec's
 * codes. Only pixels with a nonzero weight are decoded; with `use_tiles`,
 * tiles of the integer codec whose valid pixels share one weight come from
 * the spatial sums. Float files: QEM_E_WRONG_CODEC. */
qem_status qem_weighted_sums(qem_file *file, uint64_t first, uint64_t count,
                             const int32_t *const *weights, unsigned planes, int use_tiles,
                             int64_t *out, int threads, qem_error *error);

/* Adds each valid pixel's sum over scans [first, first + count) into
 * sums[p] and raises max[p] (optional) to its largest value, from the
 * decoded columns (counts or codes); invalid pixels end at 0. */
qem_status qem_pixel_sums(qem_file *file, uint64_t first, uint64_t count, uint64_t *sums,
                          uint32_t *max, int threads, qem_error *error);

/* --- writing --------------------------------------------------------------- */

/* The writer's source window, for callers that fill it in place (saving
 * from .npy): room for *room more scans at the returned address. */
void *qem_writer_window(qem_writer *writer, uint64_t *room);
/* Accepts `count` scans written into the window. */
qem_status qem_writer_commit(qem_writer *writer, uint64_t count, qem_error *error);
/* Streams a source into the writer's window, chunk by chunk: `fill` reads
 * scans [first, first + count) into `window`; `settle` runs after the last
 * read and before anything is written (it proves the source did not change
 * under the reads and may record what it learnt); then the file is
 * finished and published. With `ahead`, the next chunk's scans are read on
 * a thread of their own, into a second window, while the chunk before is
 * encoded (one window more of memory; `fill` must not need the calling
 * thread). QEM_FAULT_SAVE_PAUSE_MS pauses after the first window (tests
 * rewrite the source there). */
typedef qem_status (*qem_writer_fill_fn)(void *source, uint64_t first, uint64_t count,
                                         void *window, qem_error *error);
typedef qem_status (*qem_writer_settle_fn)(void *source, qem_writer *writer, qem_error *error);
qem_status qem_writer_pump(qem_writer *writer, void *source, qem_writer_fill_fn fill,
                           qem_writer_settle_fn settle, int ahead, qem_error *error);

/* Re-saves a .qem file (its own codec, data, metadata); options may add a
 * calibration or a new chunk size. */
qem_status qem_resave_file(const char *source, const char *dest, const qem_save_options *options,
                           qem_error *error);

/* Ends the file after `rows` scan rows instead of the shape's (a live
 * recording cut short): at least the scans appended so far; the scan-row
 * axis of the metadata follows. Not for the scaled codec or a caller's
 * complete scientific_metadata. */
qem_status qem_writer_shorten(qem_writer *writer, uint64_t rows, qem_error *error);

/* Records a source fact learnt while reading (the source's digest), as
 * scientific_metadata.source_metadata[key]; takes `value`. No-op when the
 * caller supplied the complete scientific_metadata. */
qem_status qem_writer_note_source(qem_writer *writer, const char *key, json_t *value,
                                  qem_error *error);

#endif
