/* Full verification: every checksum, every stream decoded to completion,
 * every spatial sum recomputed from the decoded counts. */
#include <stdlib.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <string.h>

#include "common/bitpack.h"
#include "common/error.h"
#include "common/options.h"
#include "common/progress.h"
#include "common/sha256.h"
#include "qem/detector_image.h"
#include "qem/qem_internal.h"

#define PIXEL_GROUP 64

void qem_verify_options_init(qem_verify_options *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

/* Decodes all streams of one block and sums valid pixels into fields:
 * sums[field * n + scan]. */
static qem_status block_field_sums(qem_file *f, const qem_chunk_view *v, uint64_t block,
                                   uint64_t *sums, uint64_t *pixel_totals, int threads,
                                   qem_error *error)
{
    const qem_geometry *g = &f->geometry;
    const uint64_t P = f->pixels, F = g->fields;
    const uint32_t n = qem_block_samples(v->chunk, block);
    const uint64_t groups = (P + PIXEL_GROUP - 1) / PIXEL_GROUP;
    memset(sums, 0, (size_t)(n * F) * sizeof *sums);
    uint64_t bad_pixel = UINT64_MAX;
    int nomem = 0;
#pragma omp parallel num_threads(qem_threads_resolve(threads))
    {
        uint16_t *tile = malloc((size_t)PIXEL_GROUP * n * sizeof *tile);
        /* Field by field (local[field * n + scan]): a run of pixels adds to
         * two fields' consecutive scans, not to two words a row of F
         * fields apart for each scan. A 32x32 field sums at most 1024 x
         * 65535 < 2^32. */
        uint32_t *local = calloc((size_t)(n * F), sizeof *local);
        if (!tile || !local) {
#pragma omp atomic write
            nomem = 1;
        }
#pragma omp for schedule(dynamic, 4)
        for (uint64_t grp = 0; grp < groups; grp++) {
            if (!tile || !local)
                continue;
            const uint64_t p0 = grp * PIXEL_GROUP;
            const uint64_t p_end = p0 + PIXEL_GROUP < P ? p0 + PIXEL_GROUP : P;
            const uint64_t m = p_end - p0;
            uint64_t failed_lane, lanes[PIXEL_GROUP];
            for (uint64_t j = 0; j < m; j++)
                lanes[j] = p0 + j;
            if (qem_chunk_decode_rows(f, v, block, lanes, m, tile, &failed_lane) != QEM_OK) {
#pragma omp critical(qem_verify_error)
                if (failed_lane < bad_pixel)
                    bad_pixel = failed_lane;
                continue;
            }
            if (pixel_totals) {
                /* Each pixel's total, against the writer's record (the
                 * group's pixels are this thread's alone). */
                uint32_t total[PIXEL_GROUP] = {0};
                for (uint32_t i = 0; i < n; i++)
                    for (uint64_t j = 0; j < m; j++)
                        total[j] += tile[(size_t)i * m + j];
                for (uint64_t j = 0; j < m; j++)
                    pixel_totals[p0 + j] += f->valid[p0 + j] ? total[j] : 0;
            }
            /* A tile of scan rows: eight pixels side by side in one detector
             * row share their 8x8 and 32x32 fields when the detector width
             * is a multiple of 8 (groups start at multiples of 64). */
            const int runs = g->columns % 8 == 0 && m % 8 == 0;
            for (uint64_t j = 0; j < m; j += runs ? 8 : 1) {
                const uint64_t p = p0 + j, r = p / g->columns, c = p % g->columns;
                const uint64_t f8 = qem_field8_of(g, r, c), f32 = qem_field32_of(g, r, c);
                const unsigned width = runs ? 8 : 1;
                uint16_t keep[8];
                unsigned any = 0;
                for (unsigned q = 0; q < width; q++) {
                    keep[q] = f->valid[p + q] ? 0xffff : 0;
                    any |= keep[q];
                }
                if (!any)
                    continue;
                uint32_t *sum8 = local + f8 * n, *sum32 = local + f32 * n;
#if defined(__SSE2__)
                if (runs) {
                    const __m128i mask = _mm_loadu_si128((const __m128i *)keep);
                    const __m128i bias = _mm_set1_epi16((short)0x8000), ones = _mm_set1_epi16(1);
                    const __m128i unbias = _mm_set1_epi32(8 * 32768);
                    /* One row's 8 counts as four pair sums: signed words
                     * offset by 2^15 (madd is signed), 8 x 2^15 added back. */
#define PAIR_SUMS(i)                                                                         \
    _mm_madd_epi16(_mm_xor_si128(_mm_and_si128(_mm_loadu_si128((const __m128i *)(tile +  \
                                                                            (size_t)(i) * m + j)), \
                                               mask),                                     \
                                 bias),                                                   \
                   ones)
                    uint32_t i = 0;
                    for (; i + 4 <= n; i += 4) {
                        /* Four rows at once: their pair sums transposed and
                         * added, one vector of four row sums. */
                        const __m128i t0 = PAIR_SUMS(i), t1 = PAIR_SUMS(i + 1);
                        const __m128i t2 = PAIR_SUMS(i + 2), t3 = PAIR_SUMS(i + 3);
                        const __m128i s01 = _mm_add_epi32(_mm_unpacklo_epi32(t0, t1),
                                                          _mm_unpackhi_epi32(t0, t1));
                        const __m128i s23 = _mm_add_epi32(_mm_unpacklo_epi32(t2, t3),
                                                          _mm_unpackhi_epi32(t2, t3));
                        const __m128i sum = _mm_add_epi32(
                            _mm_add_epi32(_mm_unpacklo_epi64(s01, s23), _mm_unpackhi_epi64(s01, s23)),
                            unbias);
                        _mm_storeu_si128((__m128i *)(sum8 + i),
                                         _mm_add_epi32(_mm_loadu_si128((const __m128i *)(sum8 + i)), sum));
                        _mm_storeu_si128((__m128i *)(sum32 + i),
                                         _mm_add_epi32(_mm_loadu_si128((const __m128i *)(sum32 + i)), sum));
                    }
                    for (; i < n; i++) {
                        __m128i t = PAIR_SUMS(i);
                        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
                        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
                        const uint32_t sum = (uint32_t)_mm_cvtsi128_si32(t) + 8u * 32768u;
                        sum8[i] += sum;
                        sum32[i] += sum;
                    }
#undef PAIR_SUMS
                    continue;
                }
#endif
                for (uint32_t i = 0; i < n; i++) {
                    const uint16_t *row = tile + (size_t)i * m + j;
                    uint32_t sum = 0;
                    for (unsigned q = 0; q < width; q++)
                        sum += row[q] & keep[q];
                    sum8[i] += sum;
                    sum32[i] += sum;
                }
            }
        }
#pragma omp critical(qem_verify_merge)
        if (local && tile)
            for (uint64_t k = 0; k < n * F; k++)
                sums[k] += local[k];
        free(tile);
        free(local);
    }
    if (nomem)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (bad_pixel != UINT64_MAX) {
        uint16_t *one = malloc((size_t)n * sizeof *one);
        if (!one)
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        qem_status st = qem_chunk_decode_stream(f, v, block, bad_pixel, one, error);
        free(one);
        return st;
    }
    return QEM_OK;
}

static qem_status compare_fields(const qem_file *f, const qem_chunk_view *v, uint64_t chunk_index,
                                 uint64_t block, const uint64_t *sums, uint32_t *unpacked,
                                 qem_error *error)
{
    const uint64_t F = f->geometry.fields;
    const uint32_t n = qem_block_samples(v->chunk, block);
    for (uint64_t fld = 0; fld < F; fld++) {
        uint64_t s = block * F + fld;
        if (qem_view_spatial_unpack(v, s, n, unpacked) != QEM_OK)
            return qem_fail(error, QEM_E_SPATIAL,
                            "QEM spatial stream %llu of chunk %llu lies outside its chunk's words",
                            (unsigned long long)s, (unsigned long long)chunk_index);
        for (uint32_t i = 0; i < n; i++) {
            if (unpacked[i] != sums[fld * n + i])
                return qem_fail(error, QEM_E_SPATIAL,
                                "QEM spatial sum disagrees with the decoded counts (chunk %llu, "
                                "block %llu, field %llu, scan %llu: stored %u, counts give %llu); "
                                "the index is wrong",
                                (unsigned long long)chunk_index, (unsigned long long)block,
                                (unsigned long long)fld,
                                (unsigned long long)(v->chunk->first + block * QEM_INTERVAL + i),
                                unpacked[i], (unsigned long long)sums[fld * n + i]);
        }
    }
    return QEM_OK;
}

/* Integer codec: every stream decoded and every spatial sum recomputed. */
static qem_status verify_block_integer(qem_file *f, const qem_chunk_view *v, uint64_t ci,
                                       uint64_t b, int threads, uint64_t *sums,
                                       uint64_t *pixel_totals, uint32_t *unpacked,
                                       qem_verify_report *report, qem_error *error)
{
    QEM_TRY(block_field_sums(f, v, b, sums, pixel_totals, threads, error));
    QEM_TRY(compare_fields(f, v, ci, b, sums, unpacked, error));
    report->spatial_values_checked += (uint64_t)qem_block_samples(v->chunk, b) * f->geometry.fields;
    return QEM_OK;
}

static qem_status verify_file(qem_file *f, const qem_verify_options *options,
                              qem_verify_report *report, qem_error *error);

qem_status qem_verify(qem_file *f, const qem_verify_options *options, qem_verify_report *out,
                      qem_error *error)
{
    qem_error_clear(error);
    if (out)
        QEM_TRY(qem_result_check(out, "qem_verify_report", error));
    qem_verify_report report;
    memset(&report, 0, sizeof report);
    const qem_status st = verify_file(f, options, &report, error);
    /* Delivered on failure too: the counts show how far it got. */
    if (out)
        qem_result_deliver(out, &report, sizeof report, "qem_verify_report", NULL);
    return st;
}

static qem_status verify_file(qem_file *f, const qem_verify_options *options,
                              qem_verify_report *report, qem_error *error)
{
    qem_verify_options local_options;
    qem_verify_options_init(&local_options);
    QEM_TRY(qem_options_overlay(&local_options, sizeof local_options, options,
                                "qem_verify_options", error));
    QEM_TRY(qem_threads_check(local_options.threads, "qem_verify_options.threads", error));
    options = &local_options;
    if (!f)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_verify: NULL file");
    /* Hashing the body reports "0 scans verified" so that it can be cancelled. */
    qem_progress_before before = {options->progress, options->progress_user, f->scans};
    QEM_TRY(qem_body_check_range(f, 0, f->body_bytes, 1, &report->body_blocks_checked,
                                 options->progress ? qem_progress_none_done_yet : NULL, &before,
                                 error));

    const int threads = qem_threads_resolve(options->threads);
    const int integer = f->codec == QEM_CODEC_INTEGER;
    const qem_output kind = f->codec == QEM_CODEC_SCALED ? QEM_OUTPUT_CODES : QEM_OUTPUT_NATIVE;
    const size_t row_bytes = (size_t)f->pixels * qem_output_item(f, kind);
    const uint64_t F = f->geometry.fields;
    /* Integer: per-block field sums. Others: one decoded block of rows
     * (a float chunk is a single block of at most 32 MiB). */
    uint64_t *sums = integer ? malloc((size_t)(QEM_INTERVAL * F) * sizeof *sums) : NULL;
    uint32_t *unpacked = integer ? malloc(QEM_INTERVAL * sizeof *unpacked) : NULL;
    uint8_t *rows = integer ? NULL : malloc(QEM_INTERVAL * row_bytes);
    qem_sha256 *logical = f->codec == QEM_CODEC_FLOAT32 ? qem_sha256_new() : NULL;
    uint64_t *pixel_totals =
        f->recorded_sums ? calloc((size_t)f->pixels, sizeof *pixel_totals) : NULL;
    qem_status st = QEM_OK;
    if (integer ? (!sums || !unpacked) : (!rows || (f->codec == QEM_CODEC_FLOAT32 && !logical)))
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (f->recorded_sums && !pixel_totals)
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    uint64_t done = 0;
    for (uint64_t ci = 0; ci < f->chunk_count && st == QEM_OK; ci++) {
        qem_chunk_view view;
        st = qem_chunk_load(f, ci, 1, &view, error);
        for (uint64_t b = 0; st == QEM_OK && b < view.chunk->blocks; b++) {
            uint32_t n = qem_block_samples(view.chunk, b);
            if (integer)
                st = verify_block_integer(f, &view, ci, b, threads, sums, pixel_totals, unpacked,
                                          report, error);
            else
                st = qem_decode_block(f, &view, b, 0, n, kind, rows, threads, error);
            if (st == QEM_OK && logical && qem_sha256_update(logical, rows, n * row_bytes) != 0)
                st = qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
            if (st == QEM_OK) {
                report->streams_decoded += view.chunk->lanes;
                report->samples_decoded += (uint64_t)n * f->pixels;
            }
        }
        if (st == QEM_OK) {
            done += view.chunk->scans;
            if (options->progress && options->progress(options->progress_user, done, f->scans))
                st = qem_fail(error, QEM_E_CANCELLED, "verification cancelled");
        }
        qem_chunk_view_free(&view);
    }
    if (st == QEM_OK && logical) {
        uint8_t digest[QEM_SHA256_BYTES];
        if (qem_sha256_final(logical, digest) != 0)
            st = qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
        else
            st = qem_logical_digest_check(f, digest, error);
    }
    for (uint64_t p = 0; st == QEM_OK && pixel_totals && p < f->pixels; p++)
        if (pixel_totals[p] != f->recorded_sums[p])
            st = qem_fail(error, QEM_E_METADATA,
                          "the pixel sums recorded in the header disagree with the decoded "
                          "counts (detector pixel %llu: recorded %llu, counts give %llu); the "
                          "header was altered or written wrongly",
                          (unsigned long long)p, (unsigned long long)f->recorded_sums[p],
                          (unsigned long long)pixel_totals[p]);
    /* Spatial sums proved above, so the tiles the recomputation takes are
     * the counts' own. */
    if (st == QEM_OK)
        st = qem_detector_image_verify(f, threads, error);
    free(pixel_totals);
    qem_sha256_free(logical);
    free(sums);
    free(unpacked);
    free(rows);
    return st;
}
