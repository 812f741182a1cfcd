/* Decoding for all three codecs: load one chunk's arrays, check their
 * rules, decode its count streams and assemble scan rows: counts (integer),
 * float32 bits from two u16 lanes per pixel (float), or codes restored
 * with their region's scale and offset (scaled). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/bitpack.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/large_alloc.h"
#include "common/sha256.h"
#include "qem/qem_internal.h"
#include "rans/rans.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Pixels decoded together by one thread: a 512 x 128 tile of scan rows
 * (128 KiB) that stays in L2 until it is copied into the caller's rows,
 * 256 bytes of each (64 pixels were 5 % slower: twice the row visits). */
#define PIXEL_GROUP 128

/* Rows of at least this many bytes in one block bypass the caches (they
 * would not stay there) and cost no read of the lines they overwrite. */
#define STREAMED_ROWS_MIN ((size_t)4 << 20)

/* Streaming stores write whole 64-byte lines; one that covers part of a
 * line writes at a third of the rate (5.7 against 16-21 GB/s here). */
#define LINE 64

/* A chunk buffer of at least `size` bytes: the file's spare when it is
 * large enough, else a new one. */
static uint8_t *chunk_buffer_take(qem_file *f, size_t size, size_t *capacity)
{
    uint8_t *spare = atomic_exchange(&f->spare_buffer, NULL);
    if (spare) {
        size_t have;
        memcpy(&have, spare, sizeof have);
        if (have >= size) {
            *capacity = have;
            return spare;
        }
        free(spare);
    }
    *capacity = size;
    return qem_large_alloc(size);
}

void qem_chunk_view_free(qem_chunk_view *view)
{
    if (view->buffer && view->file && view->buffer_capacity >= sizeof(size_t)) {
        memcpy(view->buffer, &view->buffer_capacity, sizeof view->buffer_capacity);
        free(atomic_exchange(&view->file->spare_buffer, view->buffer));
    } else {
        free(view->buffer);
    }
    memset(view, 0, sizeof *view);
}

/* The float codec's validator rule on each lane's span (notes §2.2). */
static int float_span_ok(unsigned model, uint64_t len, uint64_t n)
{
    if (model < QEM_RANS_MODELS)
        return len >= 4 && len <= 2 * n;
    switch (model) {
    case QEM_MODEL_SPARSE: return len % 2 == 0 && len <= 2 * n;
    case QEM_MODEL_ZERO: return len == 0;
    case QEM_MODEL_RAW: return len == 2 * n;
    case QEM_MODEL_CONSTANT: return len == 2;
    }
    return 0;
}

static qem_status check_count_arrays(const qem_file *f, uint64_t index, const qem_chunk_view *v,
                                     qem_error *error)
{
    const qem_chunk *c = v->chunk;
    const uint64_t streams = c->blocks * c->lanes;
    const uint64_t payload = c->arrays[0].count;
    if (qem_view_offset(v, 0) != 0)
        return qem_fail(error, QEM_E_LAYOUT, "QEM chunk %llu: payload offsets must begin at zero",
                        (unsigned long long)index);
    /* Float payloads may carry padding after the last stream. */
    const uint32_t end = qem_view_offset(v, streams);
    int ends_ok = f->codec == QEM_CODEC_FLOAT32 ? end <= payload : end == payload;
    if (!ends_ok)
        return qem_fail(error, QEM_E_LAYOUT,
                        "QEM chunk %llu: payload offsets end at %u, %s the payload size %llu",
                        (unsigned long long)index, end,
                        f->codec == QEM_CODEC_FLOAT32 ? "beyond" : "not at",
                        (unsigned long long)payload);
    uint32_t next = qem_view_offset(v, 0);
    for (uint64_t s = 0; s < streams; s++) {
        const uint32_t at = next;
        next = qem_view_offset(v, s + 1);
        if (next < at)
            return qem_fail(error, QEM_E_LAYOUT,
                            "QEM chunk %llu: payload offset %llu decreases",
                            (unsigned long long)index, (unsigned long long)(s + 1));
        if (!qem_model_is_valid(v->models[s]))
            return qem_fail(error, QEM_E_MODEL,
                            "QEM chunk %llu stream %llu has invalid model selector %u",
                            (unsigned long long)index, (unsigned long long)s, v->models[s]);
        if (f->codec == QEM_CODEC_FLOAT32 &&
            !float_span_ok(v->models[s], next - at, c->scans))
            return qem_fail(error, QEM_E_MODEL,
                            "QEM float chunk %llu lane %llu spans %u bytes, not allowed for "
                            "model %u over %llu scans",
                            (unsigned long long)index, (unsigned long long)s,
                            next - at, v->models[s],
                            (unsigned long long)c->scans);
    }
    return QEM_OK;
}

static qem_status check_spatial_arrays(const qem_file *f, uint64_t index, const qem_chunk_view *v,
                                       qem_error *error)
{
    const qem_chunk *c = v->chunk;
    const uint64_t F = f->geometry.fields;
    if (qem_view_spatial_offset(v, 0) != 0)
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
            const uint64_t at = qem_view_spatial_offset(v, s),
                           next = qem_view_spatial_offset(v, s + 1);
            if (next < at || next - at != qem_bitpack_words(n, w))
                return qem_fail(error, QEM_E_SPATIAL,
                                "QEM chunk %llu spatial stream %llu spans the wrong number of "
                                "words for %u values of %u bits",
                                (unsigned long long)index, (unsigned long long)s, n, w);
        }
    }
    if (qem_view_spatial_offset(v, c->blocks * F) != c->arrays[3].count)
        return qem_fail(error, QEM_E_SPATIAL,
                        "QEM chunk %llu: spatial offsets do not end at the word count",
                        (unsigned long long)index);
    return QEM_OK;
}

/* A chunk of 512 KiB or more is read in pieces by the file's threads:
 * the copy out of the page cache is otherwise one thread's work while the
 * others wait (set B's 0.8 MB chunks: two-thread decode +1.4-3.3 % with
 * 256 KiB pieces rather than 4 MiB ones). */
static qem_status read_chunk(const qem_file *f, uint8_t *buf, uint64_t size, uint64_t offset,
                             qem_error *error)
{
    enum { PIECE = 256u << 10 };
    const int threads = qem_threads_resolve(f->threads);
    if (size < 2 * (uint64_t)PIECE || threads < 2 || omp_in_parallel())
        return qem_pread_full(f->fd, buf, (size_t)size, offset, QEM_E_FILE_LENGTH, error);
    /* Equal pieces, a whole number per thread, so no thread waits for
     * another's extra piece. */
    const uint64_t rounds = (size + (uint64_t)PIECE * threads - 1) / ((uint64_t)PIECE * threads);
    const uint64_t pieces = rounds * (uint64_t)threads;
    const uint64_t piece = ((size + pieces - 1) / pieces + 4095) / 4096 * 4096;
    qem_status st = QEM_OK;
    uint64_t failed = UINT64_MAX;
    qem_error first = {0};
#pragma omp parallel for schedule(static) num_threads(qem_threads_resolve(threads))
    for (uint64_t k = 0; k < pieces; k++) {
        const uint64_t at = k * piece;
        if (at >= size)
            continue;
        const uint64_t n = size - at < piece ? size - at : piece;
        qem_error e = {0};
        const qem_status pst =
            qem_pread_full(f->fd, buf + at, (size_t)n, offset + at, QEM_E_FILE_LENGTH, &e);
        if (pst != QEM_OK) {
#pragma omp critical(qem_read_chunk)
            if (k < failed) {
                failed = k;
                st = pst;
                first = e;
            }
        }
    }
    if (st != QEM_OK && error)
        *error = first;
    return st;
}

qem_status qem_chunk_load(qem_file *f, uint64_t index, int with_spatial, qem_chunk_view *v,
                          qem_error *error)
{
    memset(v, 0, sizeof *v);
    const qem_chunk *c = &f->chunks[index];
    with_spatial = with_spatial && f->codec == QEM_CODEC_INTEGER;
    const int last = with_spatial ? 5 : 2;
    const uint64_t item[QEM_INT_ARRAYS] = {1, 4, 1, 4, 8, 1};
    const uint64_t begin = c->arrays[0].offset;
    const uint64_t end = c->arrays[last].offset + c->arrays[last].count * item[last];
    QEM_TRY(qem_body_check_range(f, begin, end, 0, NULL, NULL, NULL, error));
    v->chunk = c;
    v->file = f;
    v->tables = qem_rans_tables_shared();
    const uint8_t *base;
    if (f->resident_map) {
        /* A mapped body is only as good as the file: refuse one rewritten
         * since it was authenticated, before reading any of it. */
        QEM_TRY(qem_file_stamp_check(f->fd, &f->stamp, f->path, "read", error));
    }
    if (f->resident) {
        /* Bytes past a stream are the body's next bytes or its zero padding. */
        base = f->resident + begin;
    } else {
        /* Zeroed padding: SIMD decoding reads a few bytes past a stream. */
        v->buffer =
            chunk_buffer_take(f, (size_t)(end - begin) + QEM_SPAN_PADDING, &v->buffer_capacity);
        if (v->buffer)
            memset(v->buffer + (end - begin), 0, QEM_SPAN_PADDING);
        if (!v->buffer)
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a %llu-byte chunk",
                            (unsigned long long)(end - begin));
        qem_status st = read_chunk(f, v->buffer, end - begin, f->body_start + begin, error);
        if (st != QEM_OK) {
            qem_chunk_view_free(v);
            return st;
        }
        base = v->buffer;
    }
    /* A resident chunk's arrays are checked on its first load only (bit 1:
     * payload arrays, bit 2: spatial arrays); a chunk read per use may
     * have changed since, so its arrays are checked every time. */
    const unsigned checked = f->chunk_checked ? atomic_load(&f->chunk_checked[index]) : 0;
    qem_status st = QEM_OK;
    v->payload = base;
    v->offset_bytes = base + (c->arrays[1].offset - begin);
    v->models = base + (c->arrays[2].offset - begin);
    if (!(checked & 1))
        st = check_count_arrays(f, index, v, error);
    if (st == QEM_OK && with_spatial) {
        v->spatial_word_bytes = base + (c->arrays[3].offset - begin);
        v->spatial_offset_bytes = base + (c->arrays[4].offset - begin);
        v->spatial_widths = base + (c->arrays[5].offset - begin);
        if (!(checked & 2))
            st = check_spatial_arrays(f, index, v, error);
    }
    if (st == QEM_OK && f->chunk_checked)
        atomic_fetch_or(&f->chunk_checked[index], (unsigned char)(with_spatial ? 3 : 1));
    if (st != QEM_OK)
        qem_chunk_view_free(v);
    return st;
}

qem_status qem_view_spatial_unpack(const qem_chunk_view *v, uint64_t s, uint32_t n,
                                   uint32_t *values)
{
    const uint64_t at = qem_view_spatial_offset(v, s);
    const unsigned w = v->spatial_widths[s];
    const uint64_t words = qem_bitpack_words(n, w), count = v->chunk->arrays[3].count;
    if (w > 32 || at > count || words > count - at)
        return QEM_E_SPATIAL;
    const uint8_t *from = v->spatial_word_bytes + 4 * at;
    if (((uintptr_t)from & 3) == 0) {
        qem_bitunpack_u32((const uint32_t *)(const void *)from, n, w, values);
        return QEM_OK;
    }
    /* A mapped body's words may sit off a 4-byte boundary. */
    uint32_t aligned[QEM_INTERVAL];
    if (words > QEM_INTERVAL)
        return QEM_E_SPATIAL;
    memcpy(aligned, from, (size_t)words * 4);
    qem_bitunpack_u32(aligned, n, w, values);
    return QEM_OK;
}

static uint32_t max_value(const qem_file *f)
{
    return f->codec == QEM_CODEC_INTEGER && f->dtype == QEM_DTYPE_UINT8 ? 255u : 65535u;
}

/* Decodes one stream without recording a message (safe inside threads). */
static qem_status decode_stream_quiet(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                                      uint64_t lane, uint16_t *out)
{
    uint64_t s = block * v->chunk->lanes + lane;
    uint32_t lo, hi;
    if (!qem_view_span(v, s, &lo, &hi))
        return QEM_E_LAYOUT;
    return qem_count_stream_decode(v->tables, v->models[s], v->payload + lo, hi - lo,
                                   qem_block_samples(v->chunk, block), max_value(f), out);
}

static qem_status stream_failure(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                                 uint64_t lane, qem_status st, qem_error *error)
{
    uint64_t index = (uint64_t)(v->chunk - f->chunks);
    uint64_t s = block * v->chunk->lanes + lane;
    const char *what = st == QEM_E_RANS_FINAL ? "has trailing data or an invalid final state"
                       : st == QEM_E_RANS_STATE ? "starts with a state outside [2^23, 2^31)"
                       : st == QEM_E_RANS_TRUNCATED ? "ends before all samples are decoded"
                       : st == QEM_E_SPARSE ? "has sparse positions that are not strictly "
                                              "increasing within the stream"
                       : st == QEM_E_VALUE_RANGE ? "decodes a value that does not fit the dtype"
                       : st == QEM_E_MODEL ? "has a length that does not match its model"
                       : st == QEM_E_LAYOUT ? "lies outside the chunk's payload (the file "
                                              "changed since it was checked?)"
                                           : "is invalid";
    char where[96];
    if (f->codec == QEM_CODEC_FLOAT32)
        snprintf(where, sizeof where, "detector pixel %llu, %s 16 bits",
                 (unsigned long long)(lane / 2), lane % 2 ? "high" : "low");
    else
        snprintf(where, sizeof where, "detector pixel %llu", (unsigned long long)lane);
    return qem_fail(error, st,
                    "QEM count stream %s (chunk %llu, stream %llu: block %llu, %s, model %u); "
                    "the file is damaged.",
                    what, (unsigned long long)index, (unsigned long long)s,
                    (unsigned long long)block, where, v->models[s]);
}

/* Decodes lanes[0 .. count) of `block`; sample i of lanes[j] goes to
 * out[j * column + i * stride] (column = n, stride = 1: columns; column =
 * 1, stride = tile width: a tile of scan rows). */
static qem_status decode_list_strided(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                                      const uint64_t *lanes, uint64_t count, uint16_t *out,
                                      size_t column, size_t stride, int zeroed,
                                      uint64_t *failed)
{
    enum { BATCH = 64 };
    const uint32_t n = qem_block_samples(v->chunk, block);
    qem_stream_job jobs[BATCH];
    for (uint64_t at = 0; at < count; at += BATCH) {
        const uint64_t m = count - at < BATCH ? count - at : BATCH;
        for (uint64_t j = 0; j < m; j++) {
            const uint64_t s = block * v->chunk->lanes + lanes[at + j];
            uint32_t lo, hi;
            if (!qem_view_span(v, s, &lo, &hi)) {
                *failed = lanes[at + j];
                return QEM_E_LAYOUT;
            }
            jobs[j].model = v->models[s];
            jobs[j].span = v->payload + lo;
            jobs[j].size = hi - lo;
            jobs[j].out = out + (at + j) * column;
            jobs[j].stride = stride;
            jobs[j].out_zeroed = zeroed;
        }
        size_t bad;
        const qem_status st = qem_count_streams_decode(v->tables, f->rans_path, v->payload, jobs,
                                                       (size_t)m, n, max_value(f), &bad);
        if (st != QEM_OK) {
            *failed = lanes[at + bad];
            return st;
        }
    }
    return QEM_OK;
}

qem_status qem_chunk_decode_list(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                                 const uint64_t *lanes, uint64_t count, uint16_t *out,
                                 uint64_t *failed)
{
    return decode_list_strided(f, v, block, lanes, count, out, qem_block_samples(v->chunk, block),
                               1, 0, failed);
}

qem_status qem_chunk_decode_lanes(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                                  uint64_t lane0, uint64_t count, uint16_t *out, uint64_t *failed)
{
    uint64_t lanes[64];
    for (uint64_t at = 0; at < count; at += 64) {
        const uint64_t m = count - at < 64 ? count - at : 64;
        for (uint64_t j = 0; j < m; j++)
            lanes[j] = lane0 + at + j;
        QEM_TRY(qem_chunk_decode_list(f, v, block, lanes, m,
                                      out + at * qem_block_samples(v->chunk, block), failed));
    }
    return QEM_OK;
}

qem_status qem_chunk_decode_stream(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                                   uint64_t lane, uint16_t *out, qem_error *error)
{
    qem_status st = decode_stream_quiet(f, v, block, lane, out);
    if (st != QEM_OK)
        return stream_failure(f, v, block, lane, st, error);
    return QEM_OK;
}

qem_status qem_chunk_decode_rows(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                                 const uint64_t *lanes, uint64_t count, uint16_t *tile,
                                 uint64_t *failed)
{
    /* Zeroed first where zero or sparse streams are among them, so those
     * cost nothing or only their events; every other model writes each
     * sample itself. */
    int zeroed = 0;
    for (uint64_t j = 0; j < count && !zeroed; j++) {
        const unsigned model = v->models[block * v->chunk->lanes + lanes[j]];
        zeroed = model == QEM_MODEL_ZERO || model == QEM_MODEL_SPARSE;
    }
    if (zeroed)
        memset(tile, 0, (size_t)count * qem_block_samples(v->chunk, block) * sizeof *tile);
    return decode_list_strided(f, v, block, lanes, count, tile, 1, (size_t)count, zeroed, failed);
}

/* Streams [lane0, lane0 + count) of `block` (count <= 2 * PIXEL_GROUP) into a row tile. */
static qem_status decode_row_tile(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                                  uint64_t lane0, uint64_t count, uint16_t *tile, uint64_t *failed)
{
    uint64_t lanes[2 * PIXEL_GROUP];
    for (uint64_t j = 0; j < count; j++)
        lanes[j] = lane0 + j;
    return qem_chunk_decode_rows(f, v, block, lanes, count, tile, failed);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QEM_DECODE_AVX2_ROWS 1
/* One tile row of u16 counts streamed to a 64-byte aligned `dst` in
 * 32-byte stores: half the SSE2 loop's instructions (set B +5 %). */
__attribute__((target("avx2"))) static void stream_row_avx2(uint8_t *dst, const uint16_t *src)
{
    for (int q = 0; q < PIXEL_GROUP * 2 / 32; q++)
        _mm256_stream_si256((__m256i *)dst + q, _mm256_loadu_si256((const __m256i *)src + q));
}
#endif

#if defined(__SSE2__)
/* 16 counts below 256 as bytes (the saturation never applies). */
static inline __m128i narrow16(const uint16_t *src)
{
    return _mm_packus_epi16(_mm_loadu_si128((const __m128i *)src),
                            _mm_loadu_si128((const __m128i *)(src + 8)));
}
#endif

/* One tile row of a uint8 file's counts (all below 256) narrowed into
 * dst, 16 at a time; `stream`: past the caches, dst on a line. */
static void narrow_row(uint8_t *dst, const uint16_t *src, uint64_t width, int stream)
{
    uint64_t j = 0;
#if defined(__SSE2__)
    if (stream)
        for (; j + 16 <= width; j += 16)
            _mm_stream_si128((__m128i *)(dst + j), narrow16(src + j));
    for (; j + 16 <= width; j += 16)
        _mm_storeu_si128((__m128i *)(dst + j), narrow16(src + j));
#else
    (void)stream;
#endif
    for (; j < width; j++)
        dst[j] = (uint8_t)src[j];
}

/* Writes samples [lo, hi) of a decoded row tile (sample i of lane j at
 * tile[i * lanes + j]) for pixels p0 .. p0 + width as scan rows: each
 * row of the tile is already a piece of a scan row. */
static void emit_rows(const qem_file *f, const qem_chunk_view *v, qem_output kind,
                      const uint16_t *tile, uint64_t p0, uint64_t width, uint32_t lo, uint32_t hi,
                      uint8_t *rows, int streamed)
{
    const uint64_t P = f->pixels;
    const uint64_t lanes = f->codec == QEM_CODEC_FLOAT32 ? 2 * width : width;
#ifdef QEM_DECODE_AVX2_ROWS
    const int wide = __builtin_cpu_supports("avx2");
#endif
    for (uint32_t i = lo; i < hi; i++) {
        const uint64_t row = (uint64_t)(i - lo) * P + p0;
        const uint16_t *src = tile + (size_t)i * lanes;
        if (kind != QEM_OUTPUT_VALUES && f->codec == QEM_CODEC_INTEGER &&
            f->dtype == QEM_DTYPE_UINT8) {
            uint8_t *dst = rows + row;
            narrow_row(dst, src, width,
                       streamed && width == PIXEL_GROUP && (uintptr_t)dst % LINE == 0);
        } else if (kind != QEM_OUTPUT_VALUES) {
            /* u16 counts or codes; a float pixel's low and high words are
             * its little-endian float32 bits. */
            uint8_t *dst = rows + row * (lanes / width) * 2;
#if defined(__SSE2__)
            /* A whole block's rows go past the caches (STREAMED_ROWS_MIN). */
            if (streamed && lanes == PIXEL_GROUP && (uintptr_t)dst % LINE == 0) {
#ifdef QEM_DECODE_AVX2_ROWS
                if (wide) {
                    stream_row_avx2(dst, src);
                    continue;
                }
#endif
                for (int q = 0; q < PIXEL_GROUP * 2 / 16; q++)
                    _mm_stream_si128((__m128i *)dst + q, _mm_loadu_si128((const __m128i *)src + q));
                continue;
            }
#endif
            /* Constant sizes for whole pixel groups: GCC then copies with
             * vector moves, not `rep movs`, which starts slowly on AMD.
             * Rows lie a scan row apart, too far for the hardware
             * prefetchers: ask 16 rows ahead (a prefetch never faults). */
            if (lanes == PIXEL_GROUP) {
                __builtin_prefetch(dst + 16 * P * 2, 1);
                __builtin_prefetch(dst + 16 * P * 2 + 64, 1);
                memcpy(dst, src, PIXEL_GROUP * 2);
            } else if (lanes == 2 * PIXEL_GROUP)
                memcpy(dst, src, 2 * PIXEL_GROUP * 2);
            else
                memcpy(dst, src, (size_t)lanes * 2);
        } else if (f->codec == QEM_CODEC_FLOAT32) {
            uint32_t *dst = (uint32_t *)rows + row;
            for (uint64_t j = 0; j < width; j++)
                dst[j] = (uint32_t)src[2 * j] | ((uint32_t)src[2 * j + 1] << 16);
        } else if (f->codec == QEM_CODEC_SCALED) {
            const qem_region *r = &f->regions[v->chunk->region];
            float *dst = (float *)rows + row;
            for (uint64_t j = 0; j < width; j++) /* float64 product, rounded once */
                dst[j] = (float)((double)src[j] * r->scale + r->offset);
        } else {
            float *dst = (float *)rows + row;
            for (uint64_t j = 0; j < width; j++)
                dst[j] = (float)src[j];
        }
    }
#if defined(__SSE2__)
    if (streamed)
        _mm_sfence(); /* streamed stores are ordered before the block ends */
#endif
}

qem_status qem_decode_block(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                            uint32_t lo, uint32_t hi, qem_output kind, uint8_t *rows, int threads,
                            qem_error *error)
{
    const uint64_t P = f->pixels;
    const uint32_t n = qem_block_samples(v->chunk, block);
    const uint64_t lanes_per_pixel = v->chunk->lanes / P;
    uint64_t bad_lane = UINT64_MAX;
    qem_status bad_status = QEM_OK;
    int nomem = 0;
    const size_t item = qem_output_item(f, kind);
    const int streamed = (size_t)(hi - lo) * P * item >= STREAMED_ROWS_MIN;
    /* Streamed u8 or u16 rows whose starts share one place in a line (a
     * malloc buffer is 16 bytes past one): a short first group of pixels
     * puts every later group's rows on line boundaries. */
    uint64_t lead = 0;
    if (streamed && (item == 1 || item == 2) && lanes_per_pixel == 1 && (P * item) % LINE == 0 &&
        (uintptr_t)rows % item == 0)
        lead = (LINE - (uintptr_t)rows % LINE) % LINE / item;
    const uint64_t groups = (lead ? 1 : 0) + (P - lead + PIXEL_GROUP - 1) / PIXEL_GROUP;
#pragma omp parallel num_threads(qem_threads_resolve(threads))
    {
        uint16_t *tile = malloc((size_t)(PIXEL_GROUP * lanes_per_pixel * n) * sizeof *tile);
        if (!tile) {
#pragma omp atomic write
            nomem = 1;
        }
#pragma omp for schedule(dynamic, 4)
        for (uint64_t g = 0; g < groups; g++) {
            if (!tile)
                continue;
            const uint64_t p0 = lead && g > 0 ? lead + (g - 1) * PIXEL_GROUP : g * PIXEL_GROUP;
            const uint64_t width = lead && g == 0      ? lead
                                   : P - p0 < PIXEL_GROUP ? P - p0
                                                          : PIXEL_GROUP;
            const uint64_t lane0 = p0 * lanes_per_pixel;
            uint64_t failed_lane;
            const qem_status st =
                decode_row_tile(f, v, block, lane0, width * lanes_per_pixel, tile, &failed_lane);
            if (st != QEM_OK) {
#pragma omp critical(qem_decode_error)
                if (failed_lane < bad_lane) {
                    bad_lane = failed_lane;
                    bad_status = st;
                }
            }
            if (st == QEM_OK)
                emit_rows(f, v, kind, tile, p0, width, lo, hi, rows, streamed);
        }
        free(tile);
    }
    if (nomem)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (bad_status != QEM_OK)
        return stream_failure(f, v, block, bad_lane, bad_status, error);
    return QEM_OK;
}

size_t qem_output_item(const qem_file *f, qem_output kind)
{
    switch (kind) {
    case QEM_OUTPUT_NATIVE: return f->codec == QEM_CODEC_SCALED ? 0 : qem_dtype_size(f->dtype);
    case QEM_OUTPUT_CODES: return f->codec == QEM_CODEC_SCALED ? 2 : 0;
    case QEM_OUTPUT_VALUES: return 4;
    }
    return 0;
}

static qem_status check_kind(const qem_file *f, qem_output kind, qem_error *error)
{
    if (kind == QEM_OUTPUT_NATIVE && f->codec == QEM_CODEC_SCALED)
        return qem_fail(error, QEM_E_WRONG_CODEC,
                        "this file (%s) stores calibrated intensities as scaled uint16 codes, "
                        "not detector counts; read restored values with qem_read_values()",
                        qem_codec_name(f->codec));
    if (kind == QEM_OUTPUT_CODES && f->codec != QEM_CODEC_SCALED)
        return qem_fail(error, QEM_E_WRONG_CODEC,
                        "only scaled-uint16-column-rans-v1 files store codes; this is %s",
                        qem_codec_name(f->codec));
    return QEM_OK;
}

qem_status qem_logical_digest_check(const qem_file *f, const uint8_t digest[32], qem_error *error)
{
    if (memcmp(digest, f->logical_sha256, 32) != 0)
        return qem_fail(error, QEM_E_LOGICAL_CHECKSUM,
                        "the decoded float32 bits do not match logical_sha256; the file is "
                        "damaged.");
    return QEM_OK;
}

qem_status qem_read_into(qem_file *f, uint64_t first, uint64_t count, qem_output kind, void *out,
                         size_t out_size, int requested_threads, qem_error *error)
{
    if (!f || (!out && count))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "read: NULL argument");
    QEM_TRY(check_kind(f, kind, error));
    if (first > f->scans || count > f->scans - first)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "scans [%llu, +%llu) lie outside the %llu scan positions",
                        (unsigned long long)first, (unsigned long long)count,
                        (unsigned long long)f->scans);
    const size_t row_bytes = (size_t)(f->pixels * qem_output_item(f, kind));
    if (out_size / row_bytes < count)
        return qem_fail(error, QEM_E_BUFFER_TOO_SMALL,
                        "output buffer of %zu bytes is smaller than the %llu needed", out_size,
                        (unsigned long long)(count * row_bytes));
    const int threads = qem_threads_resolve(requested_threads);
    const uint64_t end = first + count;
    uint64_t pos = first;
    while (pos < end) {
        uint64_t ci = qem_chunk_index_of(f, pos);
        qem_chunk_view view;
        QEM_TRY(qem_chunk_load(f, ci, 0, &view, error));
        const qem_chunk *c = view.chunk;
        qem_status st = QEM_OK;
        for (uint64_t b = (pos - c->first) / QEM_INTERVAL; b < c->blocks && st == QEM_OK; b++) {
            uint64_t block_first = c->first + b * QEM_INTERVAL;
            if (block_first >= end)
                break;
            uint32_t n = qem_block_samples(c, b);
            uint32_t lo = (uint32_t)(pos - block_first);
            uint32_t hi = (uint32_t)(end - block_first < n ? end - block_first : n);
            st = qem_decode_block(f, &view, b, lo, hi, kind,
                                  (uint8_t *)out + (size_t)(pos - first) * row_bytes, threads,
                                  error);
            pos = block_first + hi;
        }
        qem_chunk_view_free(&view);
        QEM_TRY(st);
    }
    /* A float file read whole can prove its bits against logical_sha256. */
    if (f->codec == QEM_CODEC_FLOAT32 && first == 0 && count == f->scans) {
        uint8_t digest[QEM_SHA256_BYTES];
        if (qem_sha256_oneshot(out, (size_t)(count * row_bytes), digest) != 0)
            return qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
        QEM_TRY(qem_logical_digest_check(f, digest, error));
    }
    return QEM_OK;
}

qem_status qem_read_scans(qem_file *f, uint64_t first, uint64_t count, void *out, size_t out_size,
                          qem_error *error)
{
    qem_error_clear(error);
    if (!f)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_read_scans: NULL file");
    return qem_read_into(f, first, count, QEM_OUTPUT_NATIVE, out, out_size, f->threads, error);
}

qem_status qem_read_values(qem_file *f, uint64_t first, uint64_t count, float *out,
                           size_t out_size, qem_error *error)
{
    qem_error_clear(error);
    if (!f)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_read_values: NULL file");
    return qem_read_into(f, first, count, QEM_OUTPUT_VALUES, out, out_size, f->threads, error);
}

qem_status qem_read_codes(qem_file *f, uint64_t first, uint64_t count, uint16_t *out,
                          size_t out_size, qem_error *error)
{
    qem_error_clear(error);
    if (!f)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_read_codes: NULL file");
    return qem_read_into(f, first, count, QEM_OUTPUT_CODES, out, out_size, f->threads, error);
}
