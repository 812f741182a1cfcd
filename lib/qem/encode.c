/* Encoding one chunk held in memory as scan rows: count streams per
 * (512-scan block, lane), where a lane is a pixel's counts or codes, or one
 * 16-bit half of a pixel's float32 bits; then, for the integer codec, the
 * bit-packed spatial sums. The result is independent of the thread count. */
#include <omp.h>
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

/* Room for a chunk's streams and, for the integer codec, its per-scan
 * field sums. */
static qem_status make_room(qem_encoded_chunk *e, uint64_t streams, uint64_t slot,
                            uint64_t field_sums, qem_error *error)
{
    const size_t need = (size_t)streams + 1;
    e->payload = room_for(e->payload, e->payload_room, (size_t)(streams * slot), 1);
    e->payload_room = e->payload ? (size_t)(streams * slot) : 0;
    e->offsets = room_for(e->offsets, e->stream_room, need, sizeof *e->offsets);
    e->models = room_for(e->models, e->stream_room, need, 1);
    e->lengths = room_for(e->lengths, e->stream_room, need, sizeof *e->lengths);
    e->stream_sums = room_for(e->stream_sums, e->stream_room, need, sizeof *e->stream_sums);
    e->stream_room = need > e->stream_room ? need : e->stream_room;
    e->field_sums = room_for(e->field_sums, e->field_room, (size_t)field_sums,
                             sizeof *e->field_sums);
    e->field_room = e->field_sums ? (size_t)field_sums : 0;
    if (!e->payload || !e->offsets || !e->models || !e->lengths || !e->stream_sums ||
        !e->field_sums)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory encoding a chunk");
    return QEM_OK;
}

/* Closes the gaps between the fixed-size slots, in stream order. */
static void compact_streams(qem_encoded_chunk *e, uint64_t streams, uint64_t slot)
{
    uint64_t cursor = 0;
    for (uint64_t s = 0; s < streams; s++) {
        memmove(e->payload + cursor, e->payload + s * slot, e->lengths[s]);
        e->offsets[s] = (uint32_t)cursor;
        cursor += e->lengths[s];
    }
    e->offsets[streams] = (uint32_t)cursor;
    e->payload_bytes = cursor;
    e->streams = streams;
}

/* The spatial arrays from the per-scan field sums: widths per block and
 * field, then the bit-packed words. */
static qem_status pack_spatial(const qem_geometry *g, uint64_t scans, qem_encoded_chunk *e,
                               qem_error *error)
{
    const uint64_t F = g->fields;
    const uint64_t blocks = (scans + QEM_INTERVAL - 1) / QEM_INTERVAL;
    const uint64_t *sums = e->field_sums;
    uint32_t column[QEM_INTERVAL];
    e->spatial_offsets = room_for(e->spatial_offsets, e->spatial_room, (size_t)(blocks * F + 1),
                                  sizeof *e->spatial_offsets);
    e->spatial_widths = room_for(e->spatial_widths, e->spatial_room, (size_t)(blocks * F + 1), 1);
    e->spatial_room = (size_t)(blocks * F + 1) > e->spatial_room ? (size_t)(blocks * F + 1)
                                                                   : e->spatial_room;
    if (!e->spatial_offsets || !e->spatial_widths)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
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

#define SPATIAL_SCANS 64

qem_status qem_encode_chunk(const qem_rans_tables *tables, qem_codec codec, const qem_geometry *g,
                            const uint8_t *valid, const void *rows, qem_dtype dtype,
                            uint64_t scans, int threads, qem_encoded_chunk *e, qem_error *error)
{
    memset(e, 0, sizeof *e);
    return qem_encode_chunk_again(tables, codec, g, valid, rows, dtype, scans, threads, NULL, e,
                                  error);
}

qem_status qem_encode_chunk_again(const qem_rans_tables *tables, qem_codec codec,
                                  const qem_geometry *g, const uint8_t *valid, const void *rows,
                                  qem_dtype dtype, uint64_t scans, int threads,
                                  const qem_encode_side *side, qem_encoded_chunk *e,
                                  qem_error *error)
{
    /* As for decoding, a path asked for by name must exist and run here;
     * every path writes the same bytes. */
    const char *asked = getenv("QEM_ENCODE_PATH");
    qem_encode_path path = QEM_ENCODE_AUTO;
    if (asked && *asked && !qem_encode_path_from_name(asked, &path))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "QEM_ENCODE_PATH is '%.32s'; it must be auto, scalar or avx512", asked);
    if (!qem_encode_path_supported(path))
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "QEM_ENCODE_PATH asks for the %s encode path, which this CPU cannot run",
                        qem_encode_path_name(path));
    path = qem_encode_path_resolve(path);
    const uint64_t P = g->pixels;
    const uint64_t lanes = dtype == QEM_DTYPE_FLOAT32 ? 2 * P : P;
    const uint64_t blocks = (scans + QEM_INTERVAL - 1) / QEM_INTERVAL;
    const uint64_t streams = blocks * lanes;
    const uint64_t slot = 2 * (scans < QEM_INTERVAL ? scans : QEM_INTERVAL);
    const uint64_t bands = (lanes + QEM_ENCODE_LANES - 1) / QEM_ENCODE_LANES;
    const size_t item = qem_dtype_size(dtype);
    const int spatial = codec == QEM_CODEC_INTEGER;
    const int64_t pieces = spatial ? (int64_t)((scans + SPATIAL_SCANS - 1) / SPATIAL_SCANS) : 0;
    e->spatial_streams = e->spatial_word_count = 0;
    qem_status st = make_room(e, streams, slot, spatial ? scans * g->fields : 1, error);
    if (st != QEM_OK) {
        qem_encoded_chunk_free(e);
        return st;
    }
    int nomem = 0;
    /* One team for the streams and the spatial sums, no barrier between;
     * the side jobs (the next window's read, the float codec's digest of
     * this one) take a thread each first. */
#pragma omp parallel num_threads(qem_threads_resolve(threads))
    {
        const int team = omp_get_num_threads(), me = omp_get_thread_num();
        int nth = 0;
        for (const qem_encode_side *job = side; job; job = job->next, nth++)
            if (team - 1 - nth % team == me)
                job->run(job->arg);
        qem_encode_workspace *ws = qem_encode_workspace_new();
        if (!ws) {
#pragma omp atomic write
            nomem = 1;
        }
#pragma omp for schedule(dynamic, 2) collapse(2) nowait
        for (uint64_t b = 0; b < blocks; b++) {
            for (uint64_t band = 0; band < bands; band++) {
                if (!ws)
                    continue;
                const uint64_t first = b * QEM_INTERVAL;
                const uint32_t n = (uint32_t)(scans - first < QEM_INTERVAL ? scans - first
                                                                           : QEM_INTERVAL);
                const uint64_t l0 = band * QEM_ENCODE_LANES;
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
                const uint64_t s0 = b * lanes + l0;
                qem_count_streams_encode(tables, path, &src, l0, count, n, dst, e->lengths + s0,
                                         e->models + s0, e->stream_sums + s0, ws);
            }
        }
#pragma omp for schedule(dynamic) nowait
        for (int64_t piece = 0; piece < pieces; piece++) {
            const uint64_t s0 = (uint64_t)piece * SPATIAL_SCANS;
            const uint64_t n = scans - s0 < SPATIAL_SCANS ? scans - s0 : SPATIAL_SCANS;
            qem_spatial_sums_from_rows(g, valid, (const uint8_t *)rows + s0 * P * item, dtype, n,
                                       e->field_sums + s0 * g->fields);
        }
        qem_encode_workspace_free(ws);
    }
    if (nomem)
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK)
        compact_streams(e, streams, slot);
    if (st == QEM_OK && spatial)
        st = pack_spatial(g, scans, e, error);
    if (st != QEM_OK)
        qem_encoded_chunk_free(e);
    return st;
}
