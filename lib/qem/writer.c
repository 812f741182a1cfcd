/* Streaming .qem writer for all three codecs. Scans arrive in order; every
 * full window is encoded and appended to an anonymous body scratch file
 * while its 64 MiB block digests are computed. Finishing writes prefix +
 * header + body into a temporary file beside the destination and links it
 * into place.
 *
 * The codec follows from what is written: uint8/uint16 counts use the
 * integer codec, float32 values the float codec, and uint16 codes with a
 * precision report the scaled codec (whose chunks never cross a region). */
#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/json.h"
#include "common/large_alloc.h"
#include "common/options.h"
#include "common/sha256.h"
#include "qem/chunk_blob.h"
#include "qem/detector_image.h"
#include "qem/encode.h"
#include "qem/pixel_sums.h"
#include "qem/qem_internal.h"

#define FLOAT_WINDOW_BYTES (32ull << 20)

struct qem_writer {
    qem_codec codec;
    qem_dtype dtype; /* element type of the window */
    uint64_t shape[4];
    uint64_t scans, pixels;
    qem_geometry geometry;
    uint8_t *valid;
    uint8_t valid_sha256[QEM_SHA256_BYTES]; /* what encoded chunks must have been made with */
    uint32_t chunk_scans;
    int threads;
    qem_progress_fn progress;
    void *progress_user;

    json_t *scientific;   /* scientific_metadata, validated */
    int kept_scientific;  /* the caller gave it whole: never amended */
    json_t *metadata;     /* header "metadata" */
    json_t *empad;        /* float codec */
    json_t *report;       /* scaled codec: intensity_calibration */
    json_t *attributes;   /* scaled codec, optional */
    qem_region *regions;  /* scaled codec */
    uint64_t region_count;
    qem_sha256 *logical;  /* float codec: digest of the original bits */

    qem_publish publish;
    char *dest; /* for error messages, kept past the publication */
    int body_fd;
    uint64_t body_bytes;
    qem_block_hasher hasher;

    /* Integer codec: each pixel's sum over the scans written so far,
     * recorded in the header (pixel_sums.h); NULL when it will not be
     * (another codec, too many pixels, or a chunk encoded elsewhere). */
    uint64_t *pixel_sums;

    qem_encoded_chunk encoded; /* its arrays kept from chunk to chunk */
    const qem_encode_side *side; /* runs beside the next chunk's encoding */
    uint8_t *window;
    uint64_t window_fill; /* scans in the window */
    uint64_t scans_encoded;
    json_t *chunks;
    int broken; /* a failure happened; only free() remains */
};

void qem_save_options_init(qem_save_options *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->chunk_scans = QEM_INTERVAL;
}

static int ends_with_qem(const char *path)
{
    size_t n = strlen(path);
    return n >= 4 && path[n - 4] == '.' && tolower((unsigned char)path[n - 3]) == 'q' &&
           tolower((unsigned char)path[n - 2]) == 'e' && tolower((unsigned char)path[n - 1]) == 'm';
}

void qem_writer_free(qem_writer *w)
{
    if (!w)
        return;
    qem_publish_abort(&w->publish);
    free(w->dest);
    if (w->body_fd >= 0)
        close(w->body_fd);
    qem_block_hasher_free(&w->hasher);
    qem_sha256_free(w->logical);
    free(w->valid);
    free(w->window);
    qem_encoded_chunk_free(&w->encoded);
    free(w->pixel_sums);
    free(w->regions);
    json_decref(w->chunks);
    json_decref(w->scientific);
    json_decref(w->metadata);
    json_decref(w->empad);
    json_decref(w->report);
    json_decref(w->attributes);
    free(w);
}

/* Parses an optional JSON object option; NULL text gives NULL. */
static qem_status option_object(const char *text, const char *what, json_t **out,
                                qem_error *error)
{
    *out = NULL;
    if (!text)
        return QEM_OK;
    qem_status st = qem_json_parse_object(text, strlen(text), QEM_E_INVALID_ARGUMENT, out, error);
    if (st != QEM_OK)
        return qem_fail(error, st, "%s is not a JSON object", what);
    return QEM_OK;
}

/* Appends a processing entry unless one with its operation is there. */
static void record_processing(json_t *scientific, json_t *entry)
{
    const char *wanted = json_string_value(json_object_get(entry, "operation"));
    json_t *processing = json_object_get(scientific, "processing");
    size_t i;
    json_t *old;
    json_array_foreach(processing, i, old) {
        const char *op = json_string_value(json_object_get(old, "operation"));
        if (op && !strcmp(op, wanted)) {
            json_decref(entry);
            return;
        }
    }
    json_array_append_new(processing, entry);
}

/* Builds and validates the metadata the header will carry. */
static qem_status prepare_metadata(qem_writer *w, const qem_save_options *o, qem_error *error)
{
    json_t *source = NULL;
    QEM_TRY(option_object(o->scientific_metadata_json, "scientific_metadata", &w->scientific,
                          error));
    w->kept_scientific = w->scientific != NULL;
    QEM_TRY(option_object(o->metadata_json, "metadata", &w->metadata, error));
    if (!w->scientific) {
        QEM_TRY(option_object(o->source_metadata_json, "source_metadata", &source, error));
        w->scientific = qem_metadata_new(w->shape, o->source_format ? o->source_format : "unknown",
                                         source);
        json_decref(source);
        if (!w->scientific)
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    if (!w->metadata)
        w->metadata = json_pack("{s:s}", "producer", "qem " QEM_VERSION_STRING);
    if (o->calibration_json) {
        json_t *calibration = NULL;
        QEM_TRY(option_object(o->calibration_json, "the calibration file", &calibration, error));
        qem_status st = qem_metadata_apply_calibration(w->scientific, calibration, error);
        json_decref(calibration);
        QEM_TRY(st);
    }
    if (w->codec == QEM_CODEC_SCALED)
        record_processing(w->scientific,
                          json_pack("{s:s, s:b}", "operation", "scaled_uint16_quantization",
                                    "changes_measurements", 1));
    if (w->codec == QEM_CODEC_FLOAT32 && o->dark) /* the recipe changes what products show */
        record_processing(w->scientific,
                          json_pack("{s:s, s:b, s:s, s:b}", "operation", "mean_dark_subtraction",
                                    "changes_measurements", 1, "scope", "display_and_products",
                                    "original_measurements_preserved", 1));
    const char *stored = w->codec == QEM_CODEC_SCALED ? "uint16" : qem_dtype_name(w->dtype);
    return qem_metadata_validate(w->scientific, w->metadata, w->shape, stored, error);
}

static qem_status prepare_codec(qem_writer *w, const qem_save_options *o, qem_error *error)
{
    if (w->codec == QEM_CODEC_SCALED) {
        QEM_TRY(option_object(o->intensity_calibration_json, "intensity_calibration", &w->report,
                              error));
        QEM_TRY(option_object(o->attributes_json, "attributes", &w->attributes, error));
        qem_status st = qem_precision_load(w->report, w->shape, &w->regions, &w->region_count,
                                           error);
        if (st != QEM_OK)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT, "the precision report is invalid");
        return QEM_OK;
    }
    if (w->codec == QEM_CODEC_FLOAT32) {
        if (o->empad_json) {
            QEM_TRY(option_object(o->empad_json, "empad", &w->empad, error));
            if (o->dark) { /* a new recipe replaces the kept one */
                json_t *fresh = qem_empad_new(o->dark, w->pixels, o->dark_identity);
                json_object_set(w->empad, "background", json_object_get(fresh, "background"));
                json_decref(fresh);
            }
        } else {
            w->empad = qem_empad_new(o->dark, w->pixels, o->dark_identity);
        }
        w->logical = qem_sha256_new();
        if (!w->empad || !w->logical)
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    return QEM_OK;
}

/* Checks what the chosen codec can store. */
static qem_status check_request(qem_codec codec, qem_dtype dtype, const uint64_t shape[4],
                                const qem_save_options *o, qem_error *error)
{
    for (int i = 0; i < 4; i++)
        if (shape[i] == 0 || shape[i] >= QEM_AXIS_LIMIT)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "every axis must lie in 1..16777215; axis %d is %llu", i,
                            (unsigned long long)shape[i]);
    const uint64_t pixels = shape[2] * shape[3];
    if (codec == QEM_CODEC_SCALED && dtype != QEM_DTYPE_UINT16)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "scaled codes are uint16; a precision report needs uint16 data");
    if (codec != QEM_CODEC_INTEGER && o->valid) {
        for (uint64_t p = 0; p < pixels; p++)
            if (!o->valid[p])
                return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                                "%s cannot store a detector validity mask; save without one",
                                qem_codec_name(codec));
    }
    if (codec != QEM_CODEC_FLOAT32 && (o->dark || o->empad_json))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "a mean-dark plane and the empad block belong to float32 data");
    if (codec == QEM_CODEC_FLOAT32 && 4 * pixels > FLOAT_WINDOW_BYTES)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "a float32 frame of %llu pixels exceeds the float codec's 32 MiB window",
                        (unsigned long long)pixels);
    return QEM_OK;
}

/* Scans per chunk: the option, capped by the codec's limits. */
static qem_status chunk_limit(qem_codec codec, const uint64_t shape[4], uint32_t requested,
                              uint64_t *out, qem_error *error)
{
    const uint64_t scans = shape[0] * shape[1], pixels = shape[2] * shape[3];
    uint64_t chunk = requested ? requested : QEM_INTERVAL;
    if (codec == QEM_CODEC_FLOAT32) {
        uint64_t cap = FLOAT_WINDOW_BYTES / (4 * pixels);
        cap = cap < QEM_INTERVAL ? cap : QEM_INTERVAL;
        chunk = chunk < cap ? chunk : cap;
    }
    if (chunk > scans)
        chunk = scans;
    uint64_t blocks = (chunk + QEM_INTERVAL - 1) / QEM_INTERVAL, worst;
    uint64_t per_stream = 2 * (chunk < QEM_INTERVAL ? chunk : QEM_INTERVAL) + 4;
    if (qem_mul_overflow_u64(blocks * pixels, per_stream, &worst) || worst >= (1ull << 32))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "%llu scans per chunk are too many for %llu detector pixels (32-bit "
                        "payload offsets); use fewer scans per chunk",
                        (unsigned long long)chunk, (unsigned long long)pixels);
    *out = chunk;
    return QEM_OK;
}

/* The writer's codec, chunking and validity from the options;
 * with `dest`, also its window, metadata and publication (a writer),
 * without, only what encoding chunks needs (an encoder). */
static qem_status writer_setup(const char *dest, qem_dtype dtype, const uint64_t shape[4],
                               const qem_save_options *options, qem_writer **out,
                               qem_error *error)
{
    *out = NULL;
    qem_save_options local;
    qem_save_options_init(&local);
    QEM_TRY(qem_options_overlay(&local, sizeof local, options, "qem_save_options", error));
    QEM_TRY(qem_threads_check(local.threads, "qem_save_options.threads", error));
    options = &local;
    if (dest && !ends_with_qem(dest))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "destination '%s' must end in .qem; the format is recognised by its "
                        "signature, but the name should say what the file is",
                        dest);
    if (dtype != QEM_DTYPE_UINT8 && dtype != QEM_DTYPE_UINT16 && dtype != QEM_DTYPE_FLOAT32)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "dtype must be uint8, uint16 or float32");
    const qem_codec codec = dtype == QEM_DTYPE_FLOAT32       ? QEM_CODEC_FLOAT32
                            : options->intensity_calibration_json ? QEM_CODEC_SCALED
                                                                : QEM_CODEC_INTEGER;
    QEM_TRY(check_request(codec, dtype, shape, options, error));
    uint64_t chunk = 0;
    QEM_TRY(chunk_limit(codec, shape, options->chunk_scans, &chunk, error));

    qem_writer *w = calloc(1, sizeof *w);
    if (!w)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    w->body_fd = -1;
    w->publish.fd = -1;
    w->codec = codec;
    w->dtype = dtype;
    memcpy(w->shape, shape, sizeof w->shape);
    w->scans = shape[0] * shape[1];
    w->pixels = shape[2] * shape[3];
    qem_geometry_init(&w->geometry, shape[2], shape[3]);
    w->chunk_scans = (uint32_t)chunk;
    w->threads = qem_threads_resolve(options->threads);
    w->progress = options->progress;
    w->progress_user = options->progress_user;
    w->valid = malloc((size_t)w->pixels);
    /* 2 MiB pages: the encoder reads the window a column strip at a time,
     * one 4 KiB page per scan row otherwise. */
    w->window = dest ? qem_large_alloc((size_t)(chunk * w->pixels * qem_dtype_size(dtype))) : NULL;
    w->chunks = json_array();
    const int sums = dest && codec == QEM_CODEC_INTEGER && w->pixels <= QEM_PIXEL_SUMS_MAX_PIXELS;
    if (sums)
        w->pixel_sums = calloc((size_t)w->pixels, sizeof *w->pixel_sums);
    qem_status st = QEM_OK;
    if (!w->valid || (dest && !w->window) || !w->chunks || (sums && !w->pixel_sums)) {
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a %llu-scan window",
                      (unsigned long long)chunk);
        goto fail;
    }
    for (uint64_t p = 0; p < w->pixels; p++)
        w->valid[p] = options->valid ? (options->valid[p] != 0) : 1;
    qem_sha256_oneshot(w->valid, (size_t)w->pixels, w->valid_sha256);
    st = prepare_codec(w, options, error);
    if (!dest) {
        if (st != QEM_OK)
            goto fail;
        *out = w;
        return QEM_OK;
    }
    if (st == QEM_OK)
        st = prepare_metadata(w, options, error);
    if (st == QEM_OK && !(w->dest = strdup(dest)))
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK)
        st = qem_publish_begin(&w->publish, dest, error);
    if (st == QEM_OK)
        st = qem_scratch_open(w->publish.dir, &w->body_fd, error);
    if (st == QEM_OK)
        st = qem_block_hasher_init(&w->hasher, QEM_BODY_BLOCK_BYTES, error);
    if (st != QEM_OK)
        goto fail;
    *out = w;
    return QEM_OK;
fail:
    qem_writer_free(w);
    return st;
}

qem_status qem_writer_create(const char *dest, qem_dtype dtype, const uint64_t shape[4],
                             const qem_save_options *options, qem_writer **out, qem_error *error)
{
    qem_error_clear(error);
    if (!dest || !shape || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_writer_create: NULL argument");
    return writer_setup(dest, dtype, shape, options, out, error);
}

static qem_status body_append(qem_writer *w, const void *data, uint64_t size, qem_error *error)
{
    if (size == 0)
        return QEM_OK;
    QEM_TRY(qem_block_hasher_update(&w->hasher, data, (size_t)size, error));
    QEM_TRY(qem_write_full(w->body_fd, data, (size_t)size, error));
    w->body_bytes += size;
    return QEM_OK;
}

/* Pads the body to the next multiple of 8 and returns the array offset. */
static qem_status body_align(qem_writer *w, uint64_t *offset, qem_error *error)
{
    static const uint8_t zeros[8];
    uint64_t pad = (8 - (w->body_bytes & 7)) & 7;
    QEM_TRY(body_append(w, zeros, pad, error));
    *offset = w->body_bytes;
    return QEM_OK;
}

/* Column codecs: `narrays` 8-byte aligned arrays, described as
 * {"arrays": [{count, offset}...]} (plus "region" for the scaled codec). */
static qem_status write_column_arrays(qem_writer *w, const qem_encoded_chunk *e, int narrays,
                                      json_t *chunk, qem_error *error)
{
    const void *data[QEM_INT_ARRAYS] = {e->payload,       e->offsets,         e->models,
                                        e->spatial_words, e->spatial_offsets, e->spatial_widths};
    const uint64_t counts[QEM_INT_ARRAYS] = {e->payload_bytes,      e->streams + 1,
                                             e->streams,            e->spatial_word_count,
                                             e->spatial_streams + 1, e->spatial_streams};
    const uint64_t item[QEM_INT_ARRAYS] = {1, 4, 1, 4, 8, 1};
    json_t *arrays = json_array();
    if (!arrays || json_object_set_new(chunk, "arrays", arrays) != 0)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (int a = 0; a < narrays; a++) {
        uint64_t offset = 0;
        QEM_TRY(body_align(w, &offset, error));
        QEM_TRY(body_append(w, data[a], counts[a] * item[a], error));
        if (json_array_append_new(arrays, json_pack("{s:I, s:I}", "count", (json_int_t)counts[a],
                                                    "offset", (json_int_t)offset)) != 0)
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    return QEM_OK;
}

/* Float codec: payload, offsets and models back to back; an empty payload
 * keeps one padding byte because a zero-length array is not allowed. */
static qem_status write_float_arrays(qem_writer *w, const qem_encoded_chunk *e, json_t *chunk,
                                     qem_error *error)
{
    static const uint8_t pad = 0;
    const uint64_t payload_bytes = e->payload_bytes ? e->payload_bytes : 1;
    const uint64_t payload_offset = w->body_bytes;
    QEM_TRY(body_append(w, e->payload_bytes ? e->payload : &pad, payload_bytes, error));
    const uint64_t offset_offset = w->body_bytes;
    QEM_TRY(body_append(w, e->offsets, (e->streams + 1) * 4, error));
    const uint64_t model_offset = w->body_bytes;
    QEM_TRY(body_append(w, e->models, e->streams, error));
    json_t *fields = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "payload_offset",
                               (json_int_t)payload_offset, "payload_bytes",
                               (json_int_t)payload_bytes, "offset_offset",
                               (json_int_t)offset_offset, "offset_bytes",
                               (json_int_t)((e->streams + 1) * 4), "model_offset",
                               (json_int_t)model_offset, "model_bytes", (json_int_t)e->streams);
    if (!fields || json_object_update(chunk, fields) != 0) {
        json_decref(fields);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    json_decref(fields);
    return QEM_OK;
}

/* The region containing flat scan `scan` (scaled codec). */
static uint64_t region_of(const qem_writer *w, uint64_t scan)
{
    uint64_t r = 0;
    while (r + 1 < w->region_count && w->regions[r].stop <= scan)
        r++;
    return r;
}

/* Writes an encoded chunk of `scans` scans as the next chunk of the body;
 * `bits` (float codec) are its source bits, for logical_sha256, unless
 * NULL (hashed already). */
static qem_status write_encoded(qem_writer *w, const qem_encoded_chunk *e, uint64_t scans,
                                const void *bits, qem_error *error)
{
    if (w->logical && bits && qem_sha256_update(w->logical, bits, (size_t)(scans * w->pixels * 4)) != 0)
        return qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
    json_t *chunk = json_pack("{s:I, s:I}", "first", (json_int_t)w->scans_encoded, "scans",
                              (json_int_t)scans);
    qem_status st = chunk ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK && w->codec == QEM_CODEC_FLOAT32)
        st = write_float_arrays(w, e, chunk, error);
    else if (st == QEM_OK)
        st = write_column_arrays(w, e, w->codec == QEM_CODEC_INTEGER ? QEM_INT_ARRAYS : 3, chunk,
                                 error);
    if (st == QEM_OK && w->codec == QEM_CODEC_SCALED)
        json_object_set_new(chunk, "region", json_integer((json_int_t)region_of(w, w->scans_encoded)));
    if (st == QEM_OK && json_array_append(w->chunks, chunk) != 0)
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    json_decref(chunk);
    QEM_TRY(st);
    w->scans_encoded += scans;
    if (w->progress && w->progress(w->progress_user, w->scans_encoded, w->scans))
        return qem_fail(error, QEM_E_CANCELLED, "saving cancelled; nothing was written");
    return QEM_OK;
}

/* Adds each valid pixel's sums over the blocks of an encoded chunk. */
static void add_stream_sums(const qem_writer *w, const qem_encoded_chunk *e, uint64_t *sums)
{
    const uint64_t P = w->pixels;
    for (uint64_t s = 0; s < e->streams; s++)
        sums[s % P] += w->valid[s % P] ? e->stream_sums[s] : 0;
}

/* The float codec's digest of its source bits, one window at a time. */
typedef struct logical_digest {
    qem_sha256 *sha;
    const void *bits;
    size_t size;
    int failed;
} logical_digest;

static void logical_digest_run(void *arg)
{
    logical_digest *d = arg;
    d->failed = qem_sha256_update(d->sha, d->bits, d->size) != 0;
}

static qem_status write_chunk(qem_writer *w, qem_error *error)
{
    const uint64_t scans = w->window_fill;
    /* The digest of the window's bits runs beside its encoding, as the
     * next window's read does. */
    logical_digest digest = {w->logical, w->window, (size_t)(scans * w->pixels * 4), -1};
    const qem_encode_side hash = {logical_digest_run, &digest, w->side};
    const qem_encode_side *side = w->logical ? &hash : w->side;
    QEM_TRY(qem_encode_chunk_again(qem_rans_tables_shared(), w->codec, &w->geometry, w->valid,
                                   w->window, w->dtype, scans, w->threads, side, &w->encoded,
                                   error));
    if (w->logical && digest.failed < 0)
        logical_digest_run(&digest);
    if (digest.failed > 0)
        return qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
    if (w->pixel_sums)
        add_stream_sums(w, &w->encoded, w->pixel_sums);
    w->window_fill = 0;
    return write_encoded(w, &w->encoded, scans, NULL, error);
}

/* Scans in the chunk that starts at flat scan `first`. */
static uint64_t chunk_room(const qem_writer *w, uint64_t first)
{
    uint64_t limit = w->scans - first;
    if (w->codec == QEM_CODEC_SCALED) /* a chunk never crosses a region */
        limit = w->regions[region_of(w, first)].stop - first;
    return w->chunk_scans < limit ? w->chunk_scans : limit;
}

void *qem_writer_window(qem_writer *w, uint64_t *room)
{
    *room = chunk_room(w, w->scans_encoded) - w->window_fill;
    return w->window + w->window_fill * w->pixels * qem_dtype_size(w->dtype);
}

static qem_status qem_writer_commit_body(qem_writer *w, uint64_t count, qem_error *error)
{
    uint64_t room;
    qem_writer_window(w, &room);
    if (count > room)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "more scans than the window holds");
    w->window_fill += count;
    qem_writer_window(w, &room);
    if (w->window_fill > 0 && room == 0) {
        qem_status st = write_chunk(w, error);
        if (st != QEM_OK)
            w->broken = 1;
        return st;
    }
    return QEM_OK;
}

qem_status qem_writer_commit(qem_writer *w, uint64_t count, qem_error *error)
{
    const qem_status st = qem_writer_commit_body(w, count, error);
    qem_error_name_destination(error, w ? w->dest : NULL);
    return st;
}

qem_status qem_writer_note_source(qem_writer *w, const char *key, json_t *value,
                                  qem_error *error)
{
    json_t *source = json_object_get(w->scientific, "source_metadata");
    if (!json_is_object(source) || w->kept_scientific) {
        json_decref(value);
        return QEM_OK;
    }
    if (!value || json_object_set_new(source, key, value) != 0)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    return QEM_OK;
}

qem_status qem_writer_shorten(qem_writer *w, uint64_t rows, qem_error *error)
{
    const uint64_t held = w->scans_encoded + w->window_fill;
    if (w->broken || w->kept_scientific || w->codec == QEM_CODEC_SCALED || rows == 0 ||
        rows > w->shape[0] || rows * w->shape[1] < held)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the writer cannot end after %llu scan rows (%llu scans appended)",
                        (unsigned long long)rows, (unsigned long long)held);
    w->shape[0] = rows;
    w->scans = rows * w->shape[1];
    /* The scan-row axis states the size the file has. */
    json_t *axis = json_array_get(json_object_get(w->scientific, "axes"), 0);
    if (json_is_object(axis) && json_object_get(axis, "size") &&
        json_object_set_new(axis, "size", json_integer((json_int_t)rows)) != 0)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const char *stored = qem_dtype_name(w->dtype);
    QEM_TRY(qem_metadata_validate(w->scientific, w->metadata, w->shape, stored, error));
    /* The window may now hold the whole last chunk: encode it. */
    return qem_writer_commit_body(w, 0, error);
}

static qem_status qem_writer_append_body(qem_writer *w, const void *scans, uint64_t count, qem_error *error)
{
    qem_error_clear(error);
    if (!w || (!scans && count))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_writer_append: NULL argument");
    if (w->broken)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "the writer failed earlier; free it");
    if (count > w->scans - w->scans_encoded - w->window_fill)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "appending %llu scans would exceed the %llu declared by the shape",
                        (unsigned long long)count, (unsigned long long)w->scans);
    const size_t row = (size_t)(w->pixels * qem_dtype_size(w->dtype));
    const uint8_t *src = scans;
    while (count > 0) {
        uint64_t room;
        void *dst = qem_writer_window(w, &room);
        uint64_t take = count < room ? count : room;
        memcpy(dst, src, (size_t)take * row);
        QEM_TRY(qem_writer_commit(w, take, error));
        src += take * row;
        count -= take;
    }
    return QEM_OK;
}

qem_status qem_writer_append(qem_writer *w, const void *scans, uint64_t count, qem_error *error)
{
    const qem_status st = qem_writer_append_body(w, scans, count, error);
    qem_error_name_destination(error, w ? w->dest : NULL);
    return st;
}

/* --- chunks encoded elsewhere (distributed saves) ------------------------------ */

qem_status qem_save_chunks(qem_dtype dtype, const uint64_t shape[4],
                           const qem_save_options *options, uint64_t *first_scans,
                           size_t capacity, size_t *count, qem_error *error)
{
    qem_error_clear(error);
    if (!shape || !count || (capacity && !first_scans))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_save_chunks: NULL argument");
    qem_writer *w = NULL;
    QEM_TRY(writer_setup(NULL, dtype, shape, options, &w, error));
    size_t n = 0;
    for (uint64_t s = 0; s < w->scans; s += chunk_room(w, s)) {
        if (n < capacity)
            first_scans[n] = s;
        n++;
    }
    qem_writer_free(w);
    *count = n;
    return n > capacity && capacity
               ? qem_fail(error, QEM_E_BUFFER_TOO_SMALL,
                          "the save makes %zu chunks; the array holds %zu", n, capacity)
               : QEM_OK;
}

qem_status qem_encode_scans(qem_dtype dtype, const uint64_t shape[4],
                            const qem_save_options *options, uint64_t first_scan,
                            const void *scans, uint64_t count, void **blob, size_t *blob_size,
                            qem_error *error)
{
    qem_error_clear(error);
    if (!shape || !scans || !blob || !blob_size)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_encode_scans: NULL argument");
    *blob = NULL;
    qem_writer *w = NULL;
    QEM_TRY(writer_setup(NULL, dtype, shape, options, &w, error));
    /* Only whole chunks, where the writer would cut them. */
    uint64_t s = 0;
    while (s < w->scans && s < first_scan)
        s += chunk_room(w, s);
    qem_status st = QEM_OK;
    if (s != first_scan || s >= w->scans || count != chunk_room(w, s))
        st = qem_fail(error, QEM_E_INVALID_ARGUMENT,
                      "scans [%llu, +%llu) are not one chunk of this save; encode the chunks "
                      "qem_save_chunks gives",
                      (unsigned long long)first_scan, (unsigned long long)count);
    qem_encoded_chunk e;
    memset(&e, 0, sizeof e);
    if (st == QEM_OK)
        st = qem_encode_chunk(qem_rans_tables_shared(), w->codec, &w->geometry, w->valid, scans,
                              w->dtype, count, w->threads, &e, error);
    if (st == QEM_OK) {
        qem_chunk_blob_header h = {w->codec, w->dtype, {0}, first_scan, count, {0}};
        memcpy(h.shape, w->shape, sizeof h.shape);
        memcpy(h.valid_sha256, w->valid_sha256, sizeof h.valid_sha256);
        /* Float: the source bits (logical_sha256); integer: each valid
         * pixel's sum over the chunk (the header's pixel-sum record). */
        uint64_t *sums = NULL;
        if (w->codec == QEM_CODEC_INTEGER) {
            sums = calloc((size_t)w->pixels, sizeof *sums);
            if (sums)
                add_stream_sums(w, &e, sums);
            else
                st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        }
        const uint64_t bits = w->codec == QEM_CODEC_FLOAT32   ? count * w->pixels * 4
                              : w->codec == QEM_CODEC_INTEGER ? w->pixels * 8
                                                              : 0;
        if (st == QEM_OK)
            st = qem_chunk_blob_pack(&h, &e, sums ? (const void *)sums : scans, bits, blob,
                                     blob_size, error);
        free(sums);
        qem_encoded_chunk_free(&e);
    }
    qem_writer_free(w);
    return st;
}

static qem_status append_encoded(qem_writer *w, const void *blob, size_t size, qem_error *error)
{
    if (!w || !blob)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_writer_append_encoded: NULL argument");
    if (w->broken)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "the writer failed earlier; free it");
    if (w->window_fill)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "an encoded chunk can only follow whole chunks; %llu scans of a chunk "
                        "were appended before it",
                        (unsigned long long)w->window_fill);
    void *aligned = NULL;
    if ((uintptr_t)blob % 8) { /* views into it need 8-byte alignment */
        if (!(aligned = malloc(size ? size : 1)))
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        memcpy(aligned, blob, size);
        blob = aligned;
    }
    qem_chunk_blob_header h;
    qem_encoded_chunk e;
    const void *bits = NULL;
    uint64_t bits_bytes = 0;
    qem_status st = qem_chunk_blob_parse(blob, size, &h, &e, &bits, &bits_bytes, error);
    if (st == QEM_OK &&
        (h.codec != w->codec || h.dtype != w->dtype || memcmp(h.shape, w->shape, sizeof h.shape)))
        st = qem_fail(error, QEM_E_INVALID_ARGUMENT,
                      "the encoded chunk is of another save (%s %s, shape %llux%llux%llux%llu)",
                      qem_codec_name(h.codec), qem_dtype_name(h.dtype),
                      (unsigned long long)h.shape[0], (unsigned long long)h.shape[1],
                      (unsigned long long)h.shape[2], (unsigned long long)h.shape[3]);
    if (st == QEM_OK && memcmp(h.valid_sha256, w->valid_sha256, sizeof h.valid_sha256))
        st = qem_fail(error, QEM_E_INVALID_ARGUMENT,
                      "the encoded chunk was made with another validity mask");
    if (st == QEM_OK && (h.first_scan != w->scans_encoded || h.scans != chunk_room(w, h.first_scan)))
        st = qem_fail(error, QEM_E_INVALID_ARGUMENT,
                      "the writer's next chunk is scans [%llu, +%llu); this one is [%llu, +%llu) "
                      "(chunks go in order, cut as qem_save_chunks says)",
                      (unsigned long long)w->scans_encoded,
                      (unsigned long long)chunk_room(w, w->scans_encoded),
                      (unsigned long long)h.first_scan, (unsigned long long)h.scans);
    if (st == QEM_OK && w->codec == QEM_CODEC_INTEGER && w->pixel_sums) {
        /* The encoding side summed the chunk's rows (trusted as its counts are). */
        const uint64_t *sums = bits;
        for (uint64_t p = 0; p < w->pixels; p++)
            w->pixel_sums[p] += sums[p];
    }
    if (st == QEM_OK) {
        st = write_encoded(w, &e, h.scans, w->codec == QEM_CODEC_FLOAT32 ? bits : NULL, error);
        if (st != QEM_OK)
            w->broken = 1;
    }
    free(aligned);
    return st;
}

qem_status qem_writer_append_encoded(qem_writer *w, const void *blob, size_t size,
                                     qem_error *error)
{
    qem_error_clear(error);
    const qem_status st = append_encoded(w, blob, size, error);
    qem_error_name_destination(error, w ? w->dest : NULL);
    return st;
}

static char *valid_hex(const uint8_t *valid, uint64_t pixels)
{
    static const char digits[] = "0123456789abcdef";
    uint64_t bytes = (pixels + 7) / 8;
    char *hex = malloc((size_t)(2 * bytes + 1));
    if (!hex)
        return NULL;
    for (uint64_t b = 0; b < bytes; b++) {
        unsigned v = 0;
        for (unsigned bit = 0; bit < 8; bit++) {
            uint64_t k = b * 8 + bit;
            if (k < pixels && valid[k])
                v |= 0x80u >> bit; /* first pixel in the most significant bit */
        }
        hex[2 * b] = digits[v >> 4];
        hex[2 * b + 1] = digits[v & 15];
    }
    hex[2 * bytes] = '\0';
    return hex;
}

/* Adds the codec's own keys to the common header. */
static qem_status codec_keys(qem_writer *w, json_t *h, qem_error *error)
{
    int failed = 0;
    if (w->codec == QEM_CODEC_INTEGER) {
        char *valid = valid_hex(w->valid, w->pixels);
        failed |= !valid || json_object_set_new(h, "valid", json_string(valid)) != 0;
        free(valid);
        failed |= json_object_set_new(h, "interval", json_integer(QEM_INTERVAL)) != 0;
        failed |= json_object_set_new(h, "dtype", json_string(qem_dtype_name(w->dtype))) != 0;
    } else if (w->codec == QEM_CODEC_SCALED) {
        failed |= json_object_set_new(h, "interval", json_integer(QEM_INTERVAL)) != 0;
        failed |= json_object_set_new(h, "dtype", json_string("uint16")) != 0;
        failed |= json_object_set(h, "intensity_calibration", w->report) != 0;
        if (w->attributes)
            failed |= json_object_set(h, "attributes", w->attributes) != 0;
    } else {
        uint8_t digest[QEM_SHA256_BYTES];
        char hex[65];
        if (qem_sha256_final(w->logical, digest) != 0)
            return qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
        qem_sha256_hex(digest, hex);
        failed |= json_object_set_new(h, "dtype", json_string("float32")) != 0;
        failed |= json_object_set_new(h, "logical_sha256", json_string(hex)) != 0;
        failed |= json_object_set(h, "empad", w->empad) != 0;
    }
    return failed ? qem_fail(error, QEM_E_NO_MEMORY, "out of memory building the header") : QEM_OK;
}

static qem_status build_header(qem_writer *w, json_t **out, qem_error *error)
{
    /* Recorded from the data written, whatever metadata the caller gave
     * (a re-save passes its source's on: never an old record). */
    char body_digest[65];
    QEM_TRY(qem_pixel_sums_body_digest((const uint8_t(*)[32])w->hasher.digests, w->hasher.count,
                                       body_digest, error));
    QEM_TRY(qem_pixel_sums_put(w->scientific,
                               qem_pixel_sums_worth_recording(w->pixels, w->body_bytes)
                                   ? w->pixel_sums
                                   : NULL,
                               w->scans, w->pixels, body_digest, error));
    qem_detector_image_drop(w->scientific); /* recorded anew once the header exists */
    json_t *sha = json_array();
    for (size_t i = 0; sha && i < w->hasher.count; i++) {
        char hex[65];
        qem_sha256_hex(w->hasher.digests[i], hex);
        json_array_append_new(sha, json_string(hex));
    }
    const char *codec = qem_codec_name(w->codec);
    json_t *h = sha ? json_pack("{s:I, s:O, s:s, s:s, s:i, s:O, s:s, s:O, s:o, s:[I,I,I,I], s:i}",
                                "bytes", (json_int_t)w->body_bytes, "chunks", w->chunks, "codec",
                                codec, "container", "quantem.qem", "container_version", 1,
                                "metadata", w->metadata, "profile", codec, "scientific_metadata",
                                w->scientific, "sha256", sha, "shape", (json_int_t)w->shape[0],
                                (json_int_t)w->shape[1], (json_int_t)w->shape[2],
                                (json_int_t)w->shape[3], "version", 1)
                    : NULL;
    if (!h)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory building the header");
    qem_status st = codec_keys(w, h, error);
    if (st != QEM_OK) {
        json_decref(h);
        return st;
    }
    *out = h;
    return QEM_OK;
}

/* The default detector's image (detector_image.h), computed from the body
 * just written under the header `*text` describes, joins that header
 * (`header` holds w->scientific), which is then serialised again. */
static qem_status record_detector_image(qem_writer *w, json_t *header, char **text, size_t *size,
                                        qem_error *error)
{
    if (w->codec != QEM_CODEC_INTEGER || !w->pixel_sums ||
        !qem_pixel_sums_worth_recording(w->pixels, w->body_bytes))
        return QEM_OK;
    qem_file *f = NULL;
    QEM_TRY(qem_open_written(w->dest, *text, *size, w->body_fd, w->body_bytes, w->threads, &f,
                             error));
    qem_status st = qem_detector_image_record(w->scientific, f, w->threads, error);
    qem_close(f);
    if (st != QEM_OK ||
        !json_object_get(json_object_get(w->scientific, "extensions"), QEM_DETECTOR_IMAGE_KEY))
        return st;
    free(*text);
    *text = qem_json_dump_canonical(header, size);
    return *text ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory serialising the header");
}

static qem_status qem_writer_finish_body(qem_writer *w, qem_error *error)
{
    qem_error_clear(error);
    if (!w)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_writer_finish: NULL writer");
    if (w->broken)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "the writer failed earlier; free it");
    if (w->scans_encoded + w->window_fill != w->scans) {
        w->broken = 1;
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "only %llu of %llu scans were appended; nothing was written",
                        (unsigned long long)(w->scans_encoded + w->window_fill),
                        (unsigned long long)w->scans);
    }
    w->broken = 1; /* whatever happens below, the writer is spent */
    QEM_TRY(qem_block_hasher_finish(&w->hasher, error));
    json_t *header = NULL;
    QEM_TRY(build_header(w, &header, error));
    size_t size = 0;
    char *text = qem_json_dump_canonical(header, &size);
    qem_status st = text ? record_detector_image(w, header, &text, &size, error)
                         : qem_fail(error, QEM_E_NO_MEMORY, "out of memory serialising the header");
    json_decref(header);
    if (st != QEM_OK) {
        free(text);
        return st;
    }
    uint8_t prefix[QEM_PREFIX_BYTES];
    st = qem_envelope_prefix(text, size, prefix, error);
    if (st == QEM_OK)
        st = qem_write_full(w->publish.fd, prefix, sizeof prefix, error);
    if (st == QEM_OK)
        st = qem_write_full(w->publish.fd, text, size, error);
    free(text);
    /* The body is copied in pieces, each after a word with the progress
     * callback ("every scan encoded"), so that a caller can still stop a
     * large save here; nothing is published until the copy is whole. */
    enum { COPY_PIECE = 64 << 20 };
    for (uint64_t at = 0; st == QEM_OK && at < w->body_bytes; at += COPY_PIECE) {
        if (w->progress && w->progress(w->progress_user, w->scans, w->scans))
            st = qem_fail(error, QEM_E_CANCELLED, "saving cancelled; nothing was written");
        const uint64_t n = w->body_bytes - at < COPY_PIECE ? w->body_bytes - at : COPY_PIECE;
        if (st == QEM_OK)
            st = qem_copy_range(w->body_fd, at, w->publish.fd, n, error);
    }
    if (st == QEM_OK)
        st = qem_publish_commit(&w->publish, error);
    return st;
}

qem_status qem_writer_finish(qem_writer *w, qem_error *error)
{
    const qem_status st = qem_writer_finish_body(w, error);
    qem_error_name_destination(error, w ? w->dest : NULL);
    return st;
}

/* Fault injection for the tests: a pause after the first window, in which
 * a test rewrites the source. */
static void fault_pause_after_first_window(void)
{
    const char *env = getenv("QEM_FAULT_SAVE_PAUSE_MS");
    const long ms = env ? strtol(env, NULL, 10) : 0;
    if (ms > 0) {
        struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&pause, NULL);
    }
}

/* One fill into the writer's spare window: on a thread of its own, or
 * as the side job of the encoding team. */
typedef struct read_ahead {
    void *source;
    qem_writer_fill_fn fill;
    uint64_t first, count;
    void *window;
    int done;
    qem_status status;
    qem_error error;
} read_ahead;

static void read_ahead_fill(void *arg)
{
    read_ahead *r = arg;
    r->status = r->fill(r->source, r->first, r->count, r->window, &r->error);
    r->done = 1;
}

static void *read_ahead_run(void *arg)
{
    read_ahead_fill(arg);
    return NULL;
}

qem_status qem_writer_pump(qem_writer *w, void *source, qem_writer_fill_fn fill,
                           qem_writer_settle_fn settle, int ahead, qem_error *error)
{
    uint64_t room;
    void *window = qem_writer_window(w, &room);
    if (room) {
        QEM_TRY(fill(source, 0, room, window, error));
        fault_pause_after_first_window();
    }
    /* `room` scans wait in the window from flat scan `next - room`. */
    uint64_t next = room;
    uint8_t *spare = NULL;
    qem_status st = QEM_OK;
    while (st == QEM_OK && room) {
        const uint64_t after = next < w->scans ? chunk_room(w, next) : 0;
        read_ahead r = {source, fill, next, after, NULL, 0, QEM_OK, {0}};
        pthread_t reader;
        int reading = 0;
        if (ahead && after && !spare)
            spare = qem_large_alloc((size_t)(w->chunk_scans * w->pixels * qem_dtype_size(w->dtype)));
        /* From two threads the read is one more job of the encoding team,
         * so the cores never hold more threads than they run; on one, it
         * takes a thread of its own beside the encoder. */
        const qem_encode_side side = {read_ahead_fill, &r, NULL};
        if (ahead && after && spare) {
            r.window = spare;
            if (w->threads >= 2)
                w->side = &side;
            else
                reading = pthread_create(&reader, NULL, read_ahead_run, &r) == 0;
        }
        st = qem_writer_commit(w, room, error);
        w->side = NULL;
        if (reading)
            pthread_join(reader, NULL);
        if (st == QEM_OK && r.window && !r.done)
            read_ahead_fill(&r); /* the encoding ended before its side job */
        if (st != QEM_OK || !after)
            break;
        if (r.window) {
            st = r.status;
            if (st != QEM_OK && error)
                *error = r.error;
            uint8_t *filled = spare;
            spare = w->window;
            w->window = filled;
        } else {
            st = fill(source, next, after, w->window, error);
        }
        room = after;
        next += after;
    }
    free(spare);
    QEM_TRY(st);
    QEM_TRY(settle(source, w, error));
    return qem_writer_finish(w, error);
}
