/* runtime-column-rans-spatial-v2 decoding: load one chunk's arrays, check
 * their internal rules, and decode count streams into scan rows. */
#include <stdlib.h>
#include <string.h>

#include "common/bitpack.h"
#include "common/error.h"
#include "common/fileio.h"
#include "qem/qem_internal.h"

/* Pixels decoded together by one thread: a 512 x 64 u16 column tile
 * (64 KiB) that stays in L2 while it is transposed into scan rows. */
#define PIXEL_GROUP 64

void qem_chunk_view_free(qem_chunk_view *view)
{
    free(view->buffer);
    memset(view, 0, sizeof *view);
}

static qem_status check_count_arrays(const qem_file *f, uint64_t index, const qem_chunk_view *v,
                                     qem_error *error)
{
    const qem_int_chunk *c = v->chunk;
    const uint64_t streams = c->blocks * f->pixels;
    if (v->offsets[0] != 0)
        return qem_fail(error, QEM_E_LAYOUT, "QEM chunk %llu: payload offsets must begin at zero",
                        (unsigned long long)index);
    for (uint64_t s = 0; s < streams; s++) {
        if (v->offsets[s + 1] < v->offsets[s])
            return qem_fail(error, QEM_E_LAYOUT,
                            "QEM chunk %llu: payload offset %llu decreases",
                            (unsigned long long)index, (unsigned long long)(s + 1));
        if (!qem_model_is_valid(v->models[s]))
            return qem_fail(error, QEM_E_MODEL,
                            "QEM chunk %llu stream %llu has invalid model selector %u",
                            (unsigned long long)index, (unsigned long long)s, v->models[s]);
    }
    if (v->offsets[streams] != c->arrays[0].count)
        return qem_fail(error, QEM_E_LAYOUT,
                        "QEM chunk %llu: payload offsets end at %u, not at the payload size %llu",
                        (unsigned long long)index, v->offsets[streams],
                        (unsigned long long)c->arrays[0].count);
    return QEM_OK;
}

static qem_status check_spatial_arrays(const qem_file *f, uint64_t index, const qem_chunk_view *v,
                                       qem_error *error)
{
    const qem_int_chunk *c = v->chunk;
    const uint64_t F = f->geometry.fields;
    if (v->spatial_offsets[0] != 0)
        return qem_fail(error, QEM_E_SPATIAL, "QEM chunk %llu: spatial offsets must begin at zero",
                        (unsigned long long)index);
    for (uint64_t b = 0; b < c->blocks; b++) {
        uint32_t n = qem_block_samples(c, b);
        for (uint64_t fld = 0; fld < F; fld++) {
            uint64_t s = b * F + fld;
            unsigned w = v->spatial_widths[s];
            if (w > 32)
                return qem_fail(error, QEM_E_SPATIAL,
                                "QEM chunk %llu spatial stream %llu has width %u above 32",
                                (unsigned long long)index, (unsigned long long)s, w);
            if (v->spatial_offsets[s + 1] < v->spatial_offsets[s] ||
                v->spatial_offsets[s + 1] - v->spatial_offsets[s] != qem_bitpack_words(n, w))
                return qem_fail(error, QEM_E_SPATIAL,
                                "QEM chunk %llu spatial stream %llu spans the wrong number of "
                                "words for %u values of %u bits",
                                (unsigned long long)index, (unsigned long long)s, n, w);
        }
    }
    if (v->spatial_offsets[c->blocks * F] != c->arrays[3].count)
        return qem_fail(error, QEM_E_SPATIAL,
                        "QEM chunk %llu: spatial offsets do not end at the word count",
                        (unsigned long long)index);
    return QEM_OK;
}

qem_status qem_chunk_load(qem_file *f, uint64_t index, int with_spatial, qem_chunk_view *v,
                          qem_error *error)
{
    memset(v, 0, sizeof *v);
    const qem_int_chunk *c = &f->chunks[index];
    const int last = with_spatial ? 5 : 2;
    const uint64_t begin = c->arrays[0].offset;
    const uint64_t item[QEM_INT_ARRAYS] = {1, 4, 1, 4, 8, 1};
    const uint64_t end = c->arrays[last].offset + c->arrays[last].count * item[last];
    QEM_TRY(qem_body_check_range(f, begin, end, 0, NULL, error));
    v->chunk = c;
    v->buffer = malloc((size_t)(end - begin));
    if (!v->buffer)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a %llu-byte chunk",
                        (unsigned long long)(end - begin));
    qem_status st = qem_pread_full(f->fd, v->buffer, (size_t)(end - begin), f->body_start + begin,
                                   QEM_E_FILE_LENGTH, error);
    if (st != QEM_OK) {
        qem_chunk_view_free(v);
        return st;
    }
    /* Array offsets are 8-aligned relative to `begin`, so these casts are
     * aligned within the malloc'd buffer. */
    v->payload = v->buffer;
    v->offsets = (const uint32_t *)(v->buffer + (c->arrays[1].offset - begin));
    v->models = v->buffer + (c->arrays[2].offset - begin);
    st = check_count_arrays(f, index, v, error);
    if (st == QEM_OK && with_spatial) {
        v->spatial_words = (const uint32_t *)(v->buffer + (c->arrays[3].offset - begin));
        v->spatial_offsets = (const uint64_t *)(v->buffer + (c->arrays[4].offset - begin));
        v->spatial_widths = v->buffer + (c->arrays[5].offset - begin);
        st = check_spatial_arrays(f, index, v, error);
    }
    if (st != QEM_OK)
        qem_chunk_view_free(v);
    return st;
}

static uint32_t dtype_max(qem_dtype dtype)
{
    return dtype == QEM_DTYPE_UINT8 ? 255u : 65535u;
}

/* Decodes one stream without recording a message (safe inside threads). */
static qem_status decode_stream_quiet(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                                      uint64_t pixel, uint16_t *out)
{
    uint64_t s = block * f->pixels + pixel;
    uint32_t lo = v->offsets[s], hi = v->offsets[s + 1];
    return qem_count_stream_decode(f->tables, v->models[s], v->payload + lo, hi - lo,
                                   qem_block_samples(v->chunk, block), dtype_max(f->dtype), out);
}

static qem_status stream_failure(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                                 uint64_t pixel, qem_status st, qem_error *error)
{
    uint64_t index = (uint64_t)(v->chunk - f->chunks);
    uint64_t s = block * f->pixels + pixel;
    const char *what = st == QEM_E_RANS_FINAL ? "has trailing data or an invalid final state"
                       : st == QEM_E_RANS_STATE ? "starts with a state outside [2^23, 2^31)"
                       : st == QEM_E_RANS_TRUNCATED ? "ends before all samples are decoded"
                       : st == QEM_E_SPARSE ? "has sparse positions that are not strictly "
                                              "increasing within the stream"
                       : st == QEM_E_VALUE_RANGE ? "decodes a value that does not fit the dtype"
                       : st == QEM_E_MODEL ? "has a length that does not match its model"
                                           : "is invalid";
    return qem_fail(error, st,
                    "QEM count stream %s (chunk %llu, stream %llu: block %llu, detector pixel "
                    "%llu, model %u); the file is damaged.",
                    what, (unsigned long long)index, (unsigned long long)s,
                    (unsigned long long)block, (unsigned long long)pixel, v->models[s]);
}

qem_status qem_chunk_decode_stream(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                                   uint64_t pixel, uint16_t *out, qem_error *error)
{
    qem_status st = decode_stream_quiet(f, v, block, pixel, out);
    if (st != QEM_OK)
        return stream_failure(f, v, block, pixel, st, error);
    return QEM_OK;
}

/* Decodes every pixel of `block` and writes samples [lo, hi) of it as scan
 * rows to `rows` (row i - lo at rows + (i - lo) * pixels * item). */
static qem_status decode_block_rows(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                                    uint32_t lo, uint32_t hi, uint8_t *rows, int threads,
                                    qem_error *error)
{
    const uint64_t P = f->pixels;
    const uint32_t n = qem_block_samples(v->chunk, block);
    const uint64_t groups = (P + PIXEL_GROUP - 1) / PIXEL_GROUP;
    const int u8 = f->dtype == QEM_DTYPE_UINT8;
    uint64_t bad_pixel = UINT64_MAX;
    qem_status bad_status = QEM_OK;
    int nomem = 0;
#pragma omp parallel num_threads(threads)
    {
        uint16_t *tile = malloc((size_t)PIXEL_GROUP * n * sizeof *tile);
        if (!tile) {
#pragma omp atomic write
            nomem = 1;
        }
#pragma omp for schedule(dynamic, 4)
        for (uint64_t g = 0; g < groups; g++) {
            if (!tile)
                continue;
            uint64_t p0 = g * PIXEL_GROUP;
            uint64_t width = P - p0 < PIXEL_GROUP ? P - p0 : PIXEL_GROUP;
            int ok = 1;
            for (uint64_t j = 0; j < width && ok; j++) {
                qem_status st = decode_stream_quiet(f, v, block, p0 + j, tile + j * n);
                if (st != QEM_OK) {
                    ok = 0;
#pragma omp critical(qem_decode_error)
                    if (p0 + j < bad_pixel) {
                        bad_pixel = p0 + j;
                        bad_status = st;
                    }
                }
            }
            if (!ok)
                continue;
            for (uint32_t i = lo; i < hi; i++) {
                uint64_t row = (uint64_t)(i - lo) * P + p0;
                if (u8) {
                    uint8_t *dst = rows + row;
                    for (uint64_t j = 0; j < width; j++)
                        dst[j] = (uint8_t)tile[j * n + i];
                } else {
                    uint16_t *dst = (uint16_t *)rows + row;
                    for (uint64_t j = 0; j < width; j++)
                        dst[j] = tile[j * n + i];
                }
            }
        }
        free(tile);
    }
    if (nomem)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (bad_status != QEM_OK)
        return stream_failure(f, v, block, bad_pixel, bad_status, error);
    return QEM_OK;
}

qem_status qem_read_scans(qem_file *f, uint64_t first, uint64_t count, void *out, size_t out_size,
                          qem_error *error)
{
    qem_error_clear(error);
    if (!f)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_read_scans: NULL file");
    return qem_read_scans_threads(f, first, count, out, out_size, f->threads, error);
}

qem_status qem_read_scans_threads(qem_file *f, uint64_t first, uint64_t count, void *out,
                                  size_t out_size, int requested_threads, qem_error *error)
{
    if (!f || (!out && count))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_read_scans: NULL argument");
    if (f->codec != QEM_CODEC_INTEGER)
        return qem_fail(error, QEM_E_WRONG_CODEC,
                        "qem_read_scans reads detector counts; %s does not store counts",
                        qem_codec_name(f->codec));
    if (first > f->scans || count > f->scans - first)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "scans [%llu, +%llu) lie outside the %llu scan positions",
                        (unsigned long long)first, (unsigned long long)count,
                        (unsigned long long)f->scans);
    if (out_size < qem_read_scans_bound(f, count))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "output buffer of %zu bytes is smaller than the %llu needed", out_size,
                        (unsigned long long)qem_read_scans_bound(f, count));
    const int threads = qem_resolve_threads(requested_threads);
    const size_t row_bytes = (size_t)(f->pixels * qem_dtype_size(f->dtype));
    const uint64_t end = first + count;
    uint64_t pos = first;
    while (pos < end) {
        uint64_t ci = qem_chunk_index_of(f, pos);
        qem_chunk_view view;
        QEM_TRY(qem_chunk_load(f, ci, 0, &view, error));
        const qem_int_chunk *c = view.chunk;
        qem_status st = QEM_OK;
        for (uint64_t b = (pos - c->first) / QEM_INTERVAL; b < c->blocks && st == QEM_OK; b++) {
            uint64_t block_first = c->first + b * QEM_INTERVAL;
            if (block_first >= end)
                break;
            uint32_t n = qem_block_samples(c, b);
            uint32_t lo = (uint32_t)(pos - block_first);
            uint32_t hi = (uint32_t)(end - block_first < n ? end - block_first : n);
            st = decode_block_rows(f, &view, b, lo, hi,
                                   (uint8_t *)out + (size_t)(pos - first) * row_bytes, threads,
                                   error);
            pos = block_first + hi;
        }
        qem_chunk_view_free(&view);
        QEM_TRY(st);
    }
    return QEM_OK;
}
