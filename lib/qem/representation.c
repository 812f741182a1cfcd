/* A .qem file behind the representation interface. Working values are
 * counts, float32 bits or restored scaled intensities; raw values are the
 * stored counts, bits or codes. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/json.h"
#include "common/sha256.h"
#include "common/representation.h"
#include "qem/detector_image.h"
#include "qem/packed_copy.h"
#include "qem/qem_internal.h"

static qem_output output_of(const qem_file *f, qem_values values)
{
    if (f->codec == QEM_CODEC_SCALED)
        return values == QEM_VALUES_RAW ? QEM_OUTPUT_CODES : QEM_OUTPUT_VALUES;
    return QEM_OUTPUT_NATIVE;
}

static qem_dtype dtype_of(const qem_file *f, qem_values values)
{
    if (f->codec == QEM_CODEC_SCALED)
        return values == QEM_VALUES_RAW ? QEM_DTYPE_UINT16 : QEM_DTYPE_FLOAT32;
    return f->dtype;
}

static void describe(const void *impl, qem_container_info *info)
{
    const qem_file *f = impl;
    info->kind = QEM_KIND_QEM;
    for (int i = 0; i < 4; i++)
        info->shape[i] = f->shape[i];
    info->scans = f->scans;
    info->pixels = f->pixels;
    info->working_dtype = dtype_of(f, QEM_VALUES_WORKING);
    info->raw_dtype = dtype_of(f, QEM_VALUES_RAW);
    info->has_raw = 1;
    info->has_calibration = 1;
    info->loaded = 1; /* no load phase: readable once open */
}

/* One pattern through the file's block cache (see qem_file): the block of
 * the chunk that holds `scan` is decoded once and kept. */
static qem_status read_pattern(qem_file *f, uint64_t scan, qem_output output, void *out,
                               size_t out_size, int threads, qem_error *error)
{
    const size_t frame = (size_t)f->pixels * qem_output_item(f, output);
    if (out_size < frame)
        return qem_fail(error, QEM_E_BUFFER_TOO_SMALL,
                        "output buffer of %zu bytes is smaller than the %zu needed", out_size,
                        frame);
    const qem_chunk *c = &f->chunks[qem_chunk_index_of(f, scan)];
    const uint64_t first = c->first + (scan - c->first) / QEM_INTERVAL * QEM_INTERVAL;
    const uint64_t count =
        c->first + c->scans - first < QEM_INTERVAL ? c->first + c->scans - first : QEM_INTERVAL;
    pthread_mutex_lock(&f->pattern_lock);
    qem_pattern_block *b = NULL;
    for (int k = 0; k < QEM_PATTERN_BLOCKS && !b; k++)
        if (f->pattern_blocks[k].used && f->pattern_blocks[k].first == first &&
            f->pattern_blocks[k].output == (int)output)
            b = &f->pattern_blocks[k];
    qem_status st = QEM_OK;
    if (b) {
        atomic_fetch_add(&f->pattern_hits, 1);
    } else {
        atomic_fetch_add(&f->pattern_misses, 1);
        b = &f->pattern_blocks[0];
        for (int k = 1; k < QEM_PATTERN_BLOCKS; k++)
            if (!f->pattern_blocks[k].used ||
                (b->used && f->pattern_blocks[k].tick < b->tick))
                b = &f->pattern_blocks[k];
        b->used = 0;
        const size_t size = (size_t)count * frame;
        if (b->size < size) {
            free(b->data);
            b->data = malloc(size);
            b->size = b->data ? size : 0;
        }
        st = b->data ? qem_read_into(f, first, count, output, b->data, size, threads, error)
                     : qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a block of patterns");
        if (st == QEM_OK) {
            b->used = 1;
            b->first = first;
            b->count = count;
            b->output = (int)output;
        }
    }
    if (st == QEM_OK) {
        b->tick = ++f->pattern_clock;
        memcpy(out, b->data + (scan - first) * frame, frame);
    }
    pthread_mutex_unlock(&f->pattern_lock);
    return st;
}

static qem_status read(void *impl, uint64_t first, uint64_t count, qem_values values, void *out,
                       size_t out_size, int threads, qem_error *error)
{
    qem_file *f = impl;
    threads = threads ? threads : f->threads;
    const qem_output output = output_of(f, values);
    const qem_packed_copy *packed = qem_packed_copy_of(f);
    if (count == 1 && first < f->scans && packed && output != QEM_OUTPUT_VALUES) {
        const size_t item = qem_output_item(f, output);
        if (out_size < (size_t)f->pixels * item)
            return qem_fail(error, QEM_E_BUFFER_TOO_SMALL,
                            "output buffer of %zu bytes is smaller than the %zu needed", out_size,
                            (size_t)f->pixels * item);
        QEM_TRY(qem_packed_copy_check(f, error));
        qem_packed_pattern(packed, f, first, out, (unsigned)item);
        return QEM_OK;
    }
    /* Float chunks are one block of up to 32 MiB: no gain in keeping it. */
    if (count == 1 && first < f->scans && f->codec != QEM_CODEC_FLOAT32)
        return read_pattern(f, first, output_of(f, values), out, out_size, threads, error);
    return qem_read_into(f, first, count, output_of(f, values), out, out_size, threads, error);
}

/* To the end of the chunk holding `first`. */
static uint64_t window(const void *impl, uint64_t first)
{
    const qem_file *f = impl;
    const qem_chunk *c = &f->chunks[qem_chunk_index_of(f, first)];
    return c->first + c->scans - first;
}

static qem_status export_npy(void *impl, const char *dest, const qem_export_options *options,
                             qem_error *error)
{
    return qem_file_export_npy(impl, dest, options, error);
}

static void close_file(void *impl)
{
    qem_close(impl);
}

static qem_product_data data_of(const void *impl)
{
    const qem_file *f = impl;
    return f->codec == QEM_CODEC_FLOAT32 ? QEM_DATA_FLOAT
           : f->codec == QEM_CODEC_SCALED ? QEM_DATA_CODES
                                          : QEM_DATA_COUNTS;
}

static void valid_of(const void *impl, uint8_t *mask)
{
    const qem_file *f = impl;
    memcpy(mask, f->valid, (size_t)f->pixels);
}

static qem_status weighted_sums(void *impl, uint64_t first, uint64_t count,
                                const int32_t *const *weights, unsigned planes, int use_tiles,
                                int64_t *out, int threads, qem_error *error)
{
    return qem_weighted_sums(impl, first, count, weights, planes, use_tiles, out, threads, error);
}

static qem_status pixel_sums(void *impl, uint64_t first, uint64_t count, uint64_t *sums,
                             uint32_t *max, int threads, qem_error *error)
{
    return qem_pixel_sums(impl, first, count, sums, max, threads, error);
}

static void code_affine(const void *impl, uint64_t scan, double *scale, double *offset)
{
    const qem_file *f = impl;
    *scale = 1.0;
    *offset = 0.0;
    if (f->codec != QEM_CODEC_SCALED)
        return;
    const qem_region *r = &f->regions[f->chunks[qem_chunk_index_of(f, scan)].region];
    *scale = r->scale;
    *offset = r->offset;
}

static int dark_of(const void *impl, float *plane)
{
    const qem_file *f = impl;
    if (!f->dark)
        return 0;
    memcpy(plane, f->dark, (size_t)f->pixels * sizeof *plane);
    return 1;
}

static int detector_calibration_of(const void *impl, qem_detector_calibration *c)
{
    const qem_file *f = impl;
    return qem_metadata_detector_calibration(json_object_get(f->header, "scientific_metadata"), c);
}

static int semiangle_of(const void *impl, double *mrad)
{
    const qem_file *f = impl;
    qem_calibration cal;
    qem_metadata_calibration(json_object_get(f->header, "scientific_metadata"), &cal);
    if (cal.semiangle.source == QEM_CALIBRATION_ABSENT)
        return 0;
    *mrad = cal.semiangle.value;
    return 1;
}

/* A .qem file holds one chunk's arrays at a time, or its whole body when
 * opened resident. */
static uint64_t resident_of(const void *impl)
{
    const qem_file *f = impl;
    return f->pixels + (f->dark ? f->pixels * sizeof(float) : 0) +
           (f->resident ? f->body_bytes : 0);
}

static int recorded_pixel_sums_of(const void *impl, uint64_t *sums)
{
    const qem_file *f = impl;
    if (!f->recorded_sums)
        return 0;
    memcpy(sums, f->recorded_sums, (size_t)f->pixels * sizeof *sums);
    return 1;
}

static int prepared_sums_of(const void *impl, uint64_t first, uint64_t count,
                            const int32_t *const *weights, unsigned planes, int64_t *out)
{
    return qem_detector_image_answer(impl, first, count, weights, planes, out);
}

/* The header's SHA-256: the prefix authenticates the header, the header
 * holds every body block's digest, and no block is decoded unchecked. */
static int content_identity_of(const void *impl, uint8_t id[32])
{
    const qem_file *f = impl;
    return qem_sha256_oneshot(f->header_text, (size_t)f->header_bytes, id) == 0;
}

static void file_id_of(const void *impl, uint64_t id[2])
{
    const qem_file *f = impl;
    id[0] = (uint64_t)f->stamp.dev;
    id[1] = (uint64_t)f->stamp.ino;
}

static const char *header_json_of(const void *impl, size_t *length)
{
    return qem_header_json(impl, length);
}

/* No load phase: a file opened with QEM_BODY_CHECK_ON_READ has the body
 * blocks no read has touched yet checked. */
static qem_status load_of(void *impl, const qem_container_options *options, qem_error *error)
{
    qem_file *f = impl;
    qem_body_populate(f); /* deferred with the check (reader.c) */
    return qem_body_check_range(f, 0, f->body_bytes, 0, NULL, options->progress,
                                options->progress_user, error);
}

static qem_status verify_of(void *impl, const qem_container_options *options,
                            const qem_verify_options *verify, qem_verify_report *report,
                            qem_error *error)
{
    (void)options;
    QEM_TRY(qem_verify(impl, verify, report, error));
    const qem_file *f = impl;
    snprintf(report->summary, sizeof report->summary,
             "%llu body blocks, %llu streams (%llu counts), %llu spatial sums%s verified",
             (unsigned long long)report->body_blocks_checked,
             (unsigned long long)report->streams_decoded,
             (unsigned long long)report->samples_decoded,
             (unsigned long long)report->spatial_values_checked,
             f->recorded_sums && f->recorded_image ? ", the recorded pixel sums and detector image"
             : f->recorded_sums                      ? " and the recorded pixel sums"
                                                     : "");
    return QEM_OK;
}

static char *summary_json_of(const void *impl, qem_error *error)
{
    return qem_summary_json(impl, error);
}

/* The codec and what it keeps (valid pixels, a dark plane, spatial
 * fields), sizes, and each chunk's [first, end) scans. */
static char *details_json_of(const void *impl, qem_error *error)
{
    const qem_file *f = impl;
    json_t *chunks = json_array();
    for (uint64_t k = 0; chunks && k < f->chunk_count; k++)
        if (json_array_append_new(chunks, json_pack("[I, I]", (json_int_t)f->chunks[k].first,
                                                    (json_int_t)(f->chunks[k].first +
                                                                 f->chunks[k].scans))) != 0) {
            json_decref(chunks);
            chunks = NULL;
        }
    json_t *j = chunks ? json_pack("{s:s, s:I, s:I, s:I, s:I, s:i, s:I, s:o}", "codec",
                                   qem_codec_name(f->codec), "file_bytes",
                                   (json_int_t)f->file_size, "logical_bytes",
                                   (json_int_t)(f->scans * f->pixels * qem_dtype_size(f->dtype)),
                                   "valid_pixels", (json_int_t)f->valid_count, "chunk_count",
                                   (json_int_t)f->chunk_count, "has_dark", f->dark != NULL,
                                   "spatial_fields",
                                   (json_int_t)(f->codec == QEM_CODEC_INTEGER ? f->geometry.fields
                                                                              : 0),
                                   "chunks", chunks)
                       : NULL;
    return qem_json_take_text(j, error);
}

const qem_representation_ops qem_file_representation = {
    .kind = QEM_KIND_QEM,
    .describe = describe,
    .read = read,
    .window = window,
    .export_npy = export_npy,
    .close = close_file,
    .verify = verify_of,
    .load = load_of,
    .data = data_of,
    .valid = valid_of,
    .weighted_sums = weighted_sums,
    .pixel_sums = pixel_sums,
    .code_affine = code_affine,
    .dark = dark_of,
    .detector_calibration = detector_calibration_of,
    .semiangle_mrad = semiangle_of,
    .recorded_pixel_sums = recorded_pixel_sums_of,
    .prepared_sums = prepared_sums_of,
    .content_identity = content_identity_of,
    .resident_bytes = resident_of,
    .file_id = file_id_of,
    .header_json = header_json_of,
    .summary_json = summary_json_of,
    .details_json = details_json_of,
};
