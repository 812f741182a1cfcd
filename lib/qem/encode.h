/* Encoding one chunk of any codec in memory. */
#ifndef QEM_QEM_ENCODE_H
#define QEM_QEM_ENCODE_H

#include "qem/qem_internal.h"

/* The arrays of one chunk, ready to be written in order (the spatial ones
 * for the integer codec only). */
typedef struct qem_encoded_chunk {
    uint8_t *payload;
    uint64_t payload_bytes;
    uint32_t *offsets; /* streams + 1 */
    uint8_t *models;   /* streams */
    uint64_t streams;
    uint32_t *spatial_words;
    uint64_t spatial_word_count;
    uint64_t *spatial_offsets; /* spatial_streams + 1 */
    uint8_t *spatial_widths;   /* spatial_streams */
    uint64_t spatial_streams;
    /* Integer codec: each stream's sum of counts (streams), from which the
     * writer adds the pixel sums without another pass. */
    uint32_t *stream_sums;
    /* Working arrays and the room every array has, kept from chunk to
     * chunk by qem_encode_chunk_again (fresh pages cost more to fault in
     * than to fill). */
    uint32_t *lengths;
    uint64_t *field_sums;
    size_t payload_room, stream_room, spatial_room, word_room, field_room;
} qem_encoded_chunk;

/* Encodes `scans` scan rows ([scan][pixel]): u8/u16 counts (integer), u16
 * codes (scaled) or float32 bits (float, two lanes per pixel). Memory: the
 * payload slots take 2 * min(scans, 512) bytes per stream, i.e. about
 * 2 * scans * lanes bytes, plus scans * fields * 8 bytes of sums. */
qem_status qem_encode_chunk(const qem_rans_tables *tables, qem_codec codec, const qem_geometry *g,
                            const uint8_t *valid, const void *rows, qem_dtype dtype,
                            uint64_t scans, int threads, qem_encoded_chunk *e, qem_error *error);
/* Work one thread of the encoding team does first (the next window's
 * read), so that it shares the cores with the encoding instead of taking
 * a thread of its own. */
typedef struct qem_encode_side {
    void (*run)(void *arg);
    void *arg;
    const struct qem_encode_side *next; /* another job, on another thread if any */
} qem_encode_side;

/* The same into `e` as a previous call left it (or zeroed), reusing its
 * arrays; free it with qem_encoded_chunk_free after the last. Each job of
 * `side` (a list) runs exactly once, job k on the team's thread
 * T - 1 - k mod T, before it encodes, unless the call fails before
 * encoding (out of memory). */
qem_status qem_encode_chunk_again(const qem_rans_tables *tables, qem_codec codec,
                                  const qem_geometry *g, const uint8_t *valid, const void *rows,
                                  qem_dtype dtype, uint64_t scans, int threads,
                                  const qem_encode_side *side, qem_encoded_chunk *e,
                                  qem_error *error);
void qem_encoded_chunk_free(qem_encoded_chunk *e);

#endif
