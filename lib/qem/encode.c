/* Encoding one chunk held in memory as scan rows: count streams per
 * (512-scan block, lane), where a lane is a pixel's counts or codes, or one
 * 16-bit half of a pixel's float32 bits; then, for the integer codec, the
 * bit-packed spatial sums. The result is independent of the thread count. */
#include <stdlib.h>
#include <string.h>

#include "common/bitpack.h"
#include "common/error.h"
#include "common/threads.h"
#include "qem/encode.h"

void qem_encoded_chunk_free(qem_encoded_chunk *e)
{
    free(e->stream_sums);
    free(e->lengths);
    free(e->field_sums);
    free(e->payload);
    free(e->offsets);
    free(e->models);
    free(e->spatial_words);
    free(e->spatial_offsets);
    free(e->spatial_widths);
    memset(e, 0, sizeof *e);
}

/* `old` if its `room` elements hold `need`, else a fresh array of `need`
 * elements of `size` bytes (old freed; NULL when memory is short). */
static void *room_for(void *old, size_t room, size_t need, size_t size)
{
    if (old && need <= room)
        return old;
    free(old);
    return malloc((need ? need : 1) * size);
}

static qem_status encode_streams(const qem_rans_tables *tables, qem_encode_path path,
                                 const void *rows, qem_dtype dtype, uint64_t scans, uint64_t P,
                                 int threads, qem_encoded_chunk *e, qem_error *error)
{
    const uint64_t lanes = dtype == QEM_DTYPE_FLOAT32 ? 2 * P : P;
    const uint64_t blocks = (scans + QEM_INTERVAL - 1) / QEM_INTERVAL;
    const uint64_t streams = blocks * lanes;
    const uint64_t slot = 2 * (scans < QEM_INTERVAL ? scans : QEM_INTERVAL);
    const uint64_t groups = (lanes + QEM_ENCODE_LANES - 1) / QEM_ENCODE_LANES;
    const size_t item = qem_dtype_size(dtype);
    const size_t need = (size_t)streams + 1;
    e->payload = room_for(e->payload, e->payload_room, (size_t)(streams * slot), 1);
    e->payload_room = e->payload ? (size_t)(streams * slot) : 0;
    e->offsets = room_for(e->offsets, e->stream_room, need, sizeof *e->offsets);
    e->models = room_for(e->models, e->stream_room, need, 1);
    e->lengths = room_for(e->lengths, e->stream_room, need, sizeof *e->lengths);
    e->stream_sums = room_for(e->stream_sums, e->stream_room, need, sizeof *e->stream_sums);
    e->stream_room = need > e->stream_room ? need : e->stream_room;
    if (!e->payload || !e->offsets || !e->models || !e->lengths || !e->stream_sums)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory encoding a chunk of %llu scans",
                        (unsigned long long)scans);
    uint32_t *lengths = e->lengths;
    int nomem = 0;
#pragma omp parallel num_threads(qem_threads_resolve(threads))
    {
        qem_encode_workspace *ws = qem_encode_workspace_new();
        if (!ws) {
#pragma omp atomic write
            nomem = 1;
        }
#pragma omp for schedule(dynamic, 4) collapse(2)
        for (uint64_t b = 0; b < blocks; b++) {
            for (uint64_t g = 0; g < groups; g++) {
                if (!ws)
                    continue;
                const uint64_t first = b * QEM_INTERVAL;
                const uint32_t n = (uint32_t)(scans - first < QEM_INTERVAL ? scans - first
                                                                           : QEM_INTERVAL);
                const uint64_t l0 = g * QEM_ENCODE_LANES;
                const unsigned count = (unsigned)(lanes - l0 < QEM_ENCODE_LANES
                                                      ? lanes - l0
                                                      : QEM_ENCODE_LANES);
                /* The float codec's lanes are the uint16 halves of its bits. */
                const qem_lane_source src = {
                    (const uint8_t *)rows + first * P * item,
                    dtype == QEM_DTYPE_UINT8 ? P : lanes, dtype == QEM_DTYPE_UINT8 ? 1u : 2u,
                    dtype == QEM_DTYPE_FLOAT32};
                uint8_t *dst[QEM_ENCODE_LANES];
                for (unsigned k = 0; k < count; k++)
                    dst[k] = e->payload + (b * lanes + l0 + k) * slot;
                qem_count_streams_encode(tables, path, &src, l0, count, n, dst,
                                         lengths + b * lanes + l0, e->models + b * lanes + l0,
                                         e->stream_sums + b * lanes + l0, ws);
            }
        }
        qem_encode_workspace_free(ws);
    }
    if (nomem)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    /* Close the gaps between fixed-size slots, in stream order. */
    uint64_t cursor = 0;
    for (uint64_t s = 0; s < streams; s++) {
        memmove(e->payload + cursor, e->payload + s * slot, lengths[s]);
        e->offsets[s] = (uint32_t)cursor;
        cursor += lengths[s];
    }
    e->offsets[streams] = (uint32_t)cursor;
    e->payload_bytes = cursor;
    e->streams = streams;
    return QEM_OK;
}

static qem_status encode_spatial(const qem_geometry *g, const uint8_t *valid, const void *rows,
                                 qem_dtype dtype, uint64_t scans, int threads,
                                 qem_encoded_chunk *e, qem_error *error)
{
    const uint64_t F = g->fields;
    const uint64_t blocks = (scans + QEM_INTERVAL - 1) / QEM_INTERVAL;
    const size_t item = qem_dtype_size(dtype);
    uint32_t column[QEM_INTERVAL];
    e->field_sums = room_for(e->field_sums, e->field_room, (size_t)(scans * F),
                             sizeof *e->field_sums);
    e->field_room = e->field_sums ? (size_t)(scans * F) : 0;
    e->spatial_offsets = room_for(e->spatial_offsets, e->spatial_room, (size_t)(blocks * F + 1),
                                  sizeof *e->spatial_offsets);
    e->spatial_widths = room_for(e->spatial_widths, e->spatial_room, (size_t)(blocks * F + 1), 1);
    e->spatial_room = (size_t)(blocks * F + 1) > e->spatial_room ? (size_t)(blocks * F + 1)
                                                                   : e->spatial_room;
    if (!e->field_sums || !e->spatial_offsets || !e->spatial_widths)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    uint64_t *sums = e->field_sums;
    const int64_t step = 64;
#pragma omp parallel for num_threads(qem_threads_resolve(threads)) schedule(static)
    for (int64_t s0 = 0; s0 < (int64_t)scans; s0 += step) {
        uint64_t n = scans - (uint64_t)s0 < (uint64_t)step ? scans - (uint64_t)s0 : (uint64_t)step;
        qem_spatial_sums_from_rows(g, valid, (const uint8_t *)rows + (uint64_t)s0 * g->pixels * item,
                                   dtype, n, sums + (uint64_t)s0 * F);
    }
    /* Widths first, so that the word array is allocated once. */
    uint64_t words = 0;
    for (uint64_t b = 0; b < blocks; b++) {
        uint64_t first = b * QEM_INTERVAL;
        uint64_t n = scans - first < QEM_INTERVAL ? scans - first : QEM_INTERVAL;
        for (uint64_t fld = 0; fld < F; fld++) {
            uint64_t vmax = 0;
            for (uint64_t i = 0; i < n; i++) {
                uint64_t v = sums[(first + i) * F + fld];
                vmax = v > vmax ? v : vmax;
            }
            unsigned w = qem_bit_length(vmax); /* <= 26: 1024 * 65535 */
            e->spatial_widths[b * F + fld] = (uint8_t)w;
            e->spatial_offsets[b * F + fld] = words;
            words += qem_bitpack_words(n, w);
        }
    }
    e->spatial_offsets[blocks * F] = words;
    e->spatial_word_count = words;
    e->spatial_words = room_for(e->spatial_words, e->word_room, (size_t)words,
                                sizeof *e->spatial_words);
    e->word_room = e->spatial_words ? (size_t)words : 0;
    if (!e->spatial_words)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t b = 0; b < blocks; b++) {
        uint64_t first = b * QEM_INTERVAL;
        uint64_t n = scans - first < QEM_INTERVAL ? scans - first : QEM_INTERVAL;
        for (uint64_t fld = 0; fld < F; fld++) {
            for (uint64_t i = 0; i < n; i++)
                column[i] = (uint32_t)sums[(first + i) * F + fld];
            qem_bitpack_u32(column, (size_t)n, e->spatial_widths[b * F + fld],
                            e->spatial_words + e->spatial_offsets[b * F + fld]);
        }
    }
    e->spatial_streams = blocks * F;
    return QEM_OK;
}

qem_status qem_encode_chunk(const qem_rans_tables *tables, qem_codec codec, const qem_geometry *g,
                            const uint8_t *valid, const void *rows, qem_dtype dtype,
                            uint64_t scans, int threads, qem_encoded_chunk *e, qem_error *error)
{
    memset(e, 0, sizeof *e);
    return qem_encode_chunk_again(tables, codec, g, valid, rows, dtype, scans, threads, e, error);
}

qem_status qem_encode_chunk_again(const qem_rans_tables *tables, qem_codec codec,
                                  const qem_geometry *g, const uint8_t *valid, const void *rows,
                                  qem_dtype dtype, uint64_t scans, int threads,
                                  qem_encoded_chunk *e, qem_error *error)
{
    const qem_encode_path path = qem_encode_path_resolve(QEM_ENCODE_AUTO);
    e->spatial_streams = e->spatial_word_count = 0;
    qem_status st = encode_streams(tables, path, rows, dtype, scans, g->pixels, threads, e, error);
    if (st == QEM_OK && codec == QEM_CODEC_INTEGER)
        st = encode_spatial(g, valid, rows, dtype, scans, threads, e, error);
    if (st != QEM_OK)
        qem_encoded_chunk_free(e);
    return st;
}
