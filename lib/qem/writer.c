/* Streaming .qem writer (integer codec). Scans arrive in order; every
 * full window of chunk_scans scans is encoded and appended to an anonymous
 * body scratch file while its 64 MiB block digests are computed. Finishing
 * writes prefix + header + body into a temporary file beside the
 * destination and links it into place. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/json.h"
#include "common/options.h"
#include "common/sha256.h"
#include "qem/int_encode.h"
#include "qem/qem_internal.h"

struct qem_writer {
    qem_dtype dtype;
    uint64_t shape[4];
    uint64_t scans, pixels;
    qem_geometry geometry;
    uint8_t *valid;
    uint32_t chunk_scans;
    int threads;
    char *source_format;
    qem_progress_fn progress;
    void *progress_user;

    qem_publish publish;
    int body_fd;
    uint64_t body_bytes;
    qem_block_hasher hasher;

    uint8_t *window;
    uint64_t window_fill;  /* scans in the window */
    uint64_t scans_encoded;
    json_t *chunks;
    qem_rans_tables *tables;
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
    if (w->body_fd >= 0)
        close(w->body_fd);
    qem_block_hasher_free(&w->hasher);
    free(w->valid);
    free(w->source_format);
    free(w->window);
    json_decref(w->chunks);
    free(w->tables);
    free(w);
}

qem_status qem_writer_create(const char *dest, qem_dtype dtype, const uint64_t shape[4],
                             const qem_save_options *options, qem_writer **out, qem_error *error)
{
    qem_error_clear(error);
    if (!dest || !shape || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_writer_create: NULL argument");
    *out = NULL;
    qem_save_options local;
    qem_save_options_init(&local);
    QEM_TRY(qem_options_overlay(&local, sizeof local, options, "qem_save_options", error));
    options = &local;
    if (!ends_with_qem(dest))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "destination '%s' must end in .qem; the format is recognised by its "
                        "signature, but the name should say what the file is",
                        dest);
    if (dtype == QEM_DTYPE_FLOAT32)
        return qem_fail(error, QEM_E_NOT_YET,
                        "saving float32 data (float32-bit-lanes-rans-v1) is not implemented yet");
    if (dtype != QEM_DTYPE_UINT8 && dtype != QEM_DTYPE_UINT16)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "dtype must be uint8 or uint16");
    for (int i = 0; i < 4; i++)
        if (shape[i] == 0 || shape[i] >= QEM_AXIS_LIMIT)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "every axis must lie in 1..16777215; axis %d is %llu", i,
                            (unsigned long long)shape[i]);
    const uint64_t scans = shape[0] * shape[1], pixels = shape[2] * shape[3];
    uint64_t chunk = options->chunk_scans ? options->chunk_scans : QEM_INTERVAL;
    if (chunk > scans)
        chunk = scans;
    uint64_t blocks = (chunk + QEM_INTERVAL - 1) / QEM_INTERVAL, worst;
    uint64_t per_stream = 2 * (chunk < QEM_INTERVAL ? chunk : QEM_INTERVAL) + 4;
    if (qem_mul_overflow_u64(blocks * pixels, per_stream, &worst) || worst >= (1ull << 32))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "%llu scans per chunk are too many for %llu detector pixels (32-bit "
                        "payload offsets); use fewer scans per chunk",
                        (unsigned long long)chunk, (unsigned long long)pixels);

    qem_writer *w = calloc(1, sizeof *w);
    if (!w)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    w->body_fd = -1;
    w->publish.fd = -1;
    w->dtype = dtype;
    memcpy(w->shape, shape, sizeof w->shape);
    w->scans = scans;
    w->pixels = pixels;
    qem_geometry_init(&w->geometry, shape[2], shape[3]);
    w->chunk_scans = (uint32_t)chunk;
    w->threads = qem_resolve_threads(options->threads);
    w->progress = options->progress;
    w->progress_user = options->progress_user;
    w->valid = malloc((size_t)pixels);
    w->window = malloc((size_t)(chunk * pixels * qem_dtype_size(dtype)));
    w->chunks = json_array();
    w->tables = malloc(sizeof *w->tables);
    w->source_format = strdup(options->source_format ? options->source_format : "unknown");
    qem_status st = QEM_OK;
    if (!w->valid || !w->window || !w->chunks || !w->tables || !w->source_format) {
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a %llu-scan window",
                      (unsigned long long)chunk);
        goto fail;
    }
    for (uint64_t p = 0; p < pixels; p++)
        w->valid[p] = options->valid ? (options->valid[p] != 0) : 1;
    qem_rans_tables_init(w->tables);
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

static qem_status write_chunk(qem_writer *w, qem_error *error)
{
    const uint64_t scans = w->window_fill;
    qem_encoded_chunk e;
    QEM_TRY(qem_encode_chunk(w->tables, &w->geometry, w->valid, w->window, w->dtype, scans,
                             w->threads, &e, error));
    const void *data[QEM_INT_ARRAYS] = {e.payload,       e.offsets,         e.models,
                                        e.spatial_words, e.spatial_offsets, e.spatial_widths};
    const uint64_t counts[QEM_INT_ARRAYS] = {e.payload_bytes,      e.streams + 1,
                                             e.streams,            e.spatial_word_count,
                                             e.spatial_streams + 1, e.spatial_streams};
    const uint64_t item[QEM_INT_ARRAYS] = {1, 4, 1, 4, 8, 1};
    json_t *arrays = json_array();
    qem_status st = arrays ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (int a = 0; a < QEM_INT_ARRAYS && st == QEM_OK; a++) {
        uint64_t offset = 0;
        st = body_align(w, &offset, error);
        if (st == QEM_OK)
            st = body_append(w, data[a], counts[a] * item[a], error);
        if (st == QEM_OK &&
            json_array_append_new(arrays, json_pack("{s:I, s:I}", "count", (json_int_t)counts[a],
                                                    "offset", (json_int_t)offset)) != 0)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    qem_encoded_chunk_free(&e);
    if (st == QEM_OK &&
        json_array_append_new(w->chunks, json_pack("{s:o, s:I, s:I}", "arrays", arrays, "first",
                                                   (json_int_t)w->scans_encoded, "scans",
                                                   (json_int_t)scans)) != 0)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st != QEM_OK) {
        json_decref(arrays);
        return st;
    }
    w->scans_encoded += scans;
    w->window_fill = 0;
    if (w->progress && w->progress(w->progress_user, w->scans_encoded, w->scans))
        return qem_fail(error, QEM_E_CANCELLED, "saving cancelled; nothing was written");
    return QEM_OK;
}

void *qem_writer_window(qem_writer *w, uint64_t *room)
{
    uint64_t remaining = w->scans - w->scans_encoded - w->window_fill;
    uint64_t space = w->chunk_scans - w->window_fill;
    *room = space < remaining ? space : remaining;
    return w->window + w->window_fill * w->pixels * qem_dtype_size(w->dtype);
}

qem_status qem_writer_commit(qem_writer *w, uint64_t count, qem_error *error)
{
    uint64_t room;
    qem_writer_window(w, &room);
    if (count > room)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "more scans than the window holds");
    w->window_fill += count;
    if (w->window_fill == w->chunk_scans ||
        w->scans_encoded + w->window_fill == w->scans) {
        qem_status st = write_chunk(w, error);
        if (st != QEM_OK)
            w->broken = 1;
        return st;
    }
    return QEM_OK;
}

qem_status qem_writer_append(qem_writer *w, const void *scans, uint64_t count, qem_error *error)
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

static json_t *build_header(qem_writer *w)
{
    json_t *sha = json_array();
    for (size_t i = 0; sha && i < w->hasher.count; i++) {
        char hex[65];
        qem_sha256_hex(w->hasher.digests[i], hex);
        json_array_append_new(sha, json_string(hex));
    }
    char *valid = valid_hex(w->valid, w->pixels);
    json_t *metadata = json_pack("{s:s}", "producer", "qem " QEM_VERSION_STRING);
    json_t *scientific = qem_metadata_new(w->shape, w->source_format);
    json_t *header = NULL;
    if (sha && valid && metadata && scientific)
        header = json_pack(
            "{s:I, s:O, s:s, s:s, s:i, s:s, s:i, s:o, s:s, s:o, s:o, s:[I,I,I,I], s:s, s:i}",
            "bytes", (json_int_t)w->body_bytes, "chunks", w->chunks, "codec",
            qem_codec_name(QEM_CODEC_INTEGER), "container", "quantem.qem", "container_version", 1,
            "dtype", qem_dtype_name(w->dtype), "interval", (int)QEM_INTERVAL, "metadata",
            metadata, "profile", qem_codec_name(QEM_CODEC_INTEGER), "scientific_metadata",
            scientific, "sha256", sha, "shape", (json_int_t)w->shape[0], (json_int_t)w->shape[1],
            (json_int_t)w->shape[2], (json_int_t)w->shape[3], "valid", valid, "version", 1);
    else {
        json_decref(sha);
        json_decref(metadata);
        json_decref(scientific);
    }
    free(valid);
    return header;
}

qem_status qem_writer_finish(qem_writer *w, qem_error *error)
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
    json_t *header = build_header(w);
    if (!header)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory building the header");
    size_t size = 0;
    char *text = qem_json_dump_canonical(header, &size);
    json_decref(header);
    if (!text)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory serialising the header");
    uint8_t prefix[QEM_PREFIX_BYTES];
    qem_status st = qem_envelope_prefix(text, size, prefix, error);
    if (st == QEM_OK)
        st = qem_write_full(w->publish.fd, prefix, sizeof prefix, error);
    if (st == QEM_OK)
        st = qem_write_full(w->publish.fd, text, size, error);
    free(text);
    if (st == QEM_OK)
        st = qem_copy_range(w->body_fd, 0, w->publish.fd, w->body_bytes, error);
    if (st == QEM_OK)
        st = qem_publish_commit(&w->publish, error);
    return st;
}
