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

#define PIXEL_GROUP 64

void qem_encoded_chunk_free(qem_encoded_chunk *e)
{
    free(e->payload);
    free(e->offsets);
    free(e->models);
    free(e->spatial_words);
    free(e->spatial_offsets);
    free(e->spatial_widths);
    memset(e, 0, sizeof *e);
}

/* Value of lane `lane` at scan row `i` (rows of P pixels). */
static inline uint16_t lane_value(const void *rows, qem_dtype dtype, uint64_t P, uint64_t i,
                                  uint64_t lane)
{
    switch (dtype) {
    case QEM_DTYPE_UINT8: return ((const uint8_t *)rows)[i * P + lane];
    case QEM_DTYPE_FLOAT32: {
        /* Lane 2p is the low word of pixel p's bits, lane 2p + 1 the high. */
        uint32_t bits = ((const uint32_t *)rows)[i * P + lane / 2];
        return (uint16_t)(lane & 1 ? bits >> 16 : bits & 0xffff);
    }
    default: return ((const uint16_t *)rows)[i * P + lane];
    }
}

static qem_status encode_streams(const qem_rans_tables *tables, const void *rows, qem_dtype dtype,
                                 uint64_t scans, uint64_t P, int threads, qem_encoded_chunk *e,
                                 qem_error *error)
{
    const uint64_t lanes = dtype == QEM_DTYPE_FLOAT32 ? 2 * P : P;
    const uint64_t blocks = (scans + QEM_INTERVAL - 1) / QEM_INTERVAL;
    const uint64_t streams = blocks * lanes;
    const uint64_t slot = 2 * (scans < QEM_INTERVAL ? scans : QEM_INTERVAL);
    const uint64_t groups = (lanes + PIXEL_GROUP - 1) / PIXEL_GROUP;
    uint32_t *lengths = malloc((size_t)streams * sizeof *lengths);
    e->payload = malloc((size_t)(streams * slot));
    e->offsets = malloc((size_t)(streams + 1) * sizeof *e->offsets);
    e->models = malloc((size_t)streams);
    if (!lengths || !e->payload || !e->offsets || !e->models) {
        free(lengths);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory encoding a chunk of %llu scans",
                        (unsigned long long)scans);
    }
    int nomem = 0;
#pragma omp parallel num_threads(qem_threads_resolve(threads))
    {
        uint16_t *tile = malloc((size_t)PIXEL_GROUP * QEM_INTERVAL * sizeof *tile);
        uint8_t *scratch = malloc(qem_stream_scratch_bound(QEM_INTERVAL));
        if (!tile || !scratch) {
#pragma omp atomic write
            nomem = 1;
        }
#pragma omp for schedule(dynamic, 2) collapse(2)
        for (uint64_t b = 0; b < blocks; b++) {
            for (uint64_t g = 0; g < groups; g++) {
                if (!tile || !scratch)
                    continue;
                uint64_t first = b * QEM_INTERVAL;
                uint32_t n = (uint32_t)(scans - first < QEM_INTERVAL ? scans - first
                                                                     : QEM_INTERVAL);
                uint64_t l0 = g * PIXEL_GROUP;
                uint64_t width = lanes - l0 < PIXEL_GROUP ? lanes - l0 : PIXEL_GROUP;
                /* Transpose a strip of 64 lanes of scan rows into columns. */
                for (uint32_t i = 0; i < n; i++)
                    for (uint64_t j = 0; j < width; j++)
                        tile[j * n + i] = lane_value(rows, dtype, P, first + i, l0 + j);
                for (uint64_t j = 0; j < width; j++) {
                    uint64_t s = b * lanes + l0 + j;
                    lengths[s] = (uint32_t)qem_count_stream_encode(
                        tables, tile + j * n, n, e->payload + s * slot, &e->models[s], scratch);
                }
            }
        }
        free(tile);
        free(scratch);
    }
    if (nomem) {
        free(lengths);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
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
    free(lengths);
    return QEM_OK;
}

static qem_status encode_spatial(const qem_geometry *g, const uint8_t *valid, const void *rows,
                                 qem_dtype dtype, uint64_t scans, int threads,
                                 qem_encoded_chunk *e, qem_error *error)
{
    const uint64_t F = g->fields;
    const uint64_t blocks = (scans + QEM_INTERVAL - 1) / QEM_INTERVAL;
    const size_t item = qem_dtype_size(dtype);
    uint64_t *sums = malloc((size_t)(scans * F) * sizeof *sums);
    uint32_t *column = malloc(QEM_INTERVAL * sizeof *column);
    e->spatial_offsets = malloc((size_t)(blocks * F + 1) * sizeof *e->spatial_offsets);
    e->spatial_widths = malloc((size_t)(blocks * F));
    if (!sums || !column || !e->spatial_offsets || !e->spatial_widths) {
        free(sums);
        free(column);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
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
    e->spatial_words = malloc((size_t)(words ? words : 1) * sizeof *e->spatial_words);
    if (!e->spatial_words) {
        free(sums);
        free(column);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
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
    free(sums);
    free(column);
    return QEM_OK;
}

qem_status qem_encode_chunk(const qem_rans_tables *tables, qem_codec codec, const qem_geometry *g,
                            const uint8_t *valid, const void *rows, qem_dtype dtype,
                            uint64_t scans, int threads, qem_encoded_chunk *e, qem_error *error)
{
    memset(e, 0, sizeof *e);
    qem_status st = encode_streams(tables, rows, dtype, scans, g->pixels, threads, e, error);
    if (st == QEM_OK && codec == QEM_CODEC_INTEGER)
        st = encode_spatial(g, valid, rows, dtype, scans, threads, e, error);
    if (st != QEM_OK)
        qem_encoded_chunk_free(e);
    return st;
}
