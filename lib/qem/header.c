/* Validation of the JSON header against the file: container and codec
 * identity, shape, body length, checksum table and the codec's chunk and
 * array layout. Malformed structure is corruption; an unknown container,
 * codec or codec version asks for an update. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/json.h"
#include "qem/qem_internal.h"

static qem_status get_u64(const json_t *obj, const char *key, uint64_t *out, qem_error *error)
{
    if (!qem_json_as_u64(json_object_get(obj, key), out))
        return qem_fail(error, QEM_E_HEADER, "QEM header key '%s' is missing or not an integer",
                        key);
    return QEM_OK;
}

static qem_status get_string(const json_t *obj, const char *key, const char **out,
                             qem_error *error)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_string(v))
        return qem_fail(error, QEM_E_HEADER, "QEM header key '%s' is missing or not a string",
                        key);
    *out = json_string_value(v);
    return QEM_OK;
}

static int hex_value(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

static qem_status check_identity(qem_file *f, qem_error *error)
{
    const json_t *h = f->header;
    const char *container = "", *codec = "", *profile = "";
    QEM_TRY(get_string(h, "container", &container, error));
    if (strcmp(container, "quantem.qem") != 0)
        return qem_fail(error, QEM_E_HEADER, "QEM container '%s' is not quantem.qem", container);
    uint64_t version = 0;
    QEM_TRY(get_u64(h, "container_version", &version, error));
    if (version != 1)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "QEM container version %llu is not supported by this qem (it reads "
                        "version 1); update qem",
                        (unsigned long long)version);
    QEM_TRY(get_string(h, "codec", &codec, error));
    if (!strcmp(codec, qem_codec_name(QEM_CODEC_INTEGER)))
        f->codec = QEM_CODEC_INTEGER;
    else if (!strcmp(codec, qem_codec_name(QEM_CODEC_FLOAT32)))
        f->codec = QEM_CODEC_FLOAT32;
    else if (!strcmp(codec, qem_codec_name(QEM_CODEC_SCALED)))
        f->codec = QEM_CODEC_SCALED;
    else if (!strcmp(codec, "empad-xor-row-packed-v1"))
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "QEM codec 'empad-xor-row-packed-v1' is retired; re-export the original "
                        "acquisition as float32-bit-lanes-rans-v1");
    else
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "QEM codec '%s' is not supported by this qem; update qem", codec);
    QEM_TRY(get_string(h, "profile", &profile, error));
    if (strcmp(profile, codec) != 0)
        return qem_fail(error, QEM_E_HEADER, "QEM profile '%s' differs from codec '%s'", profile,
                        codec);
    QEM_TRY(get_u64(h, "version", &version, error));
    if (version != 1)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "QEM codec %s version %llu is not supported by this qem; update qem",
                        codec, (unsigned long long)version);
    return QEM_OK;
}

static qem_status check_shape(qem_file *f, qem_error *error)
{
    const json_t *shape = json_object_get(f->header, "shape");
    if (!json_is_array(shape) || json_array_size(shape) != 4)
        return qem_fail(error, QEM_E_HEADER, "QEM shape must be a list of four integers");
    for (size_t i = 0; i < 4; i++) {
        uint64_t v;
        if (!qem_json_as_u64(json_array_get(shape, i), &v) || v == 0 || v >= QEM_AXIS_LIMIT)
            return qem_fail(error, QEM_E_HEADER,
                            "QEM shape entries must be integers in (0, 2^24)");
        f->shape[i] = v;
    }
    f->scans = f->shape[0] * f->shape[1];
    f->pixels = f->shape[2] * f->shape[3];
    qem_geometry_init(&f->geometry, f->shape[2], f->shape[3]);
    return QEM_OK;
}

static qem_status check_body_table(qem_file *f, qem_error *error)
{
    uint64_t bytes = 0, end = 0;
    QEM_TRY(get_u64(f->header, "bytes", &bytes, error));
    if (bytes == 0)
        return qem_fail(error, QEM_E_HEADER, "QEM body length 'bytes' must be positive");
    if (qem_add_overflow_u64(f->body_start, bytes, &end) || end != f->file_size)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "QEM file length disagrees with metadata; recopy the file.");
    f->body_bytes = bytes;
    const json_t *sha = json_object_get(f->header, "sha256");
    uint64_t blocks = (bytes + QEM_BODY_BLOCK_BYTES - 1) / QEM_BODY_BLOCK_BYTES;
    if (!json_is_array(sha) || json_array_size(sha) != blocks)
        return qem_fail(error, QEM_E_HEADER,
                        "QEM sha256 must list one digest per 64 MiB body block (%llu)",
                        (unsigned long long)blocks);
    f->block_count = blocks;
    f->block_sha = malloc((size_t)blocks * sizeof *f->block_sha);
    f->block_checked = calloc((size_t)blocks, sizeof *f->block_checked);
    if (!f->block_sha || !f->block_checked)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t b = 0; b < blocks; b++) {
        const json_t *d = json_array_get(sha, b);
        const char *hex = json_is_string(d) ? json_string_value(d) : "";
        if (strlen(hex) != 64)
            return qem_fail(error, QEM_E_HEADER, "QEM sha256[%llu] is not a 64-digit hex digest",
                            (unsigned long long)b);
        for (int i = 0; i < 32; i++) {
            int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
            if (hi < 0 || lo < 0)
                return qem_fail(error, QEM_E_HEADER,
                                "QEM sha256[%llu] is not a 64-digit hex digest",
                                (unsigned long long)b);
            f->block_sha[b][i] = (uint8_t)(hi << 4 | lo);
        }
    }
    return QEM_OK;
}

static qem_status check_valid_mask(qem_file *f, qem_error *error)
{
    const char *hex = "";
    QEM_TRY(get_string(f->header, "valid", &hex, error));
    uint64_t bytes = (f->pixels + 7) / 8;
    if (strlen(hex) != 2 * bytes)
        return qem_fail(error, QEM_E_HEADER,
                        "QEM valid mask has %zu hex digits; %llu detector pixels need %llu",
                        strlen(hex), (unsigned long long)f->pixels,
                        (unsigned long long)(2 * bytes));
    f->valid = malloc((size_t)f->pixels);
    if (!f->valid)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    f->valid_count = 0;
    for (uint64_t k = 0; k < f->pixels; k++) {
        int hi = hex_value(hex[2 * (k / 8)]), lo = hex_value(hex[2 * (k / 8) + 1]);
        if (hi < 0 || lo < 0)
            return qem_fail(error, QEM_E_HEADER, "QEM valid mask is not hexadecimal");
        unsigned byte = (unsigned)(hi << 4 | lo);
        f->valid[k] = (uint8_t)((byte >> (7 - k % 8)) & 1); /* first pixel = MSB */
        f->valid_count += f->valid[k];
    }
    return QEM_OK;
}

/* Element sizes of the integer codec's six arrays; the scaled codec uses
 * the first three. */
static const uint64_t item_size[QEM_INT_ARRAYS] = {1, 4, 1, 4, 8, 1};

static qem_status alloc_chunks(qem_file *f, const json_t *chunks, qem_error *error)
{
    if (!json_is_array(chunks) || json_array_size(chunks) == 0)
        return qem_fail(error, QEM_E_LAYOUT, "QEM chunks must be a non-empty list");
    size_t n = json_array_size(chunks);
    if (n > f->scans)
        return qem_fail(error, QEM_E_LAYOUT, "QEM declares more chunks than scan positions");
    f->chunks = calloc(n, sizeof *f->chunks);
    if (!f->chunks)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    f->chunk_count = n;
    return QEM_OK;
}

/* first/scans of chunk i: contiguous from 0, positive, within the scans. */
static qem_status chunk_span(qem_file *f, const json_t *cj, size_t i, uint64_t next_scan,
                             qem_chunk *c, qem_error *error)
{
    if (!json_is_object(cj) || !qem_json_as_u64(json_object_get(cj, "first"), &c->first) ||
        !qem_json_as_u64(json_object_get(cj, "scans"), &c->scans))
        return qem_fail(error, QEM_E_LAYOUT, "QEM chunk %zu lacks integer first/scans", i);
    if (c->first != next_scan || c->scans == 0 || c->scans > f->scans - next_scan)
        return qem_fail(error, QEM_E_LAYOUT,
                        "QEM chunk %zu covers scans [%llu, +%llu) but must start at %llu "
                        "without gap or overlap",
                        i, (unsigned long long)c->first, (unsigned long long)c->scans,
                        (unsigned long long)next_scan);
    return QEM_OK;
}

static qem_status check_coverage(const qem_file *f, uint64_t next_scan, uint64_t cursor,
                                 qem_error *error)
{
    if (next_scan != f->scans)
        return qem_fail(error, QEM_E_LAYOUT, "QEM chunks cover %llu of %llu scan positions",
                        (unsigned long long)next_scan, (unsigned long long)f->scans);
    if (cursor != f->body_bytes)
        return qem_fail(error, QEM_E_LAYOUT,
                        "QEM arrays end at byte %llu but the body has %llu bytes",
                        (unsigned long long)cursor, (unsigned long long)f->body_bytes);
    return QEM_OK;
}

/* Chunks of the column codecs: `narrays` 8-byte aligned {offset, count}
 * arrays per chunk (6 integer, 3 scaled), scaled chunks naming a region. */
static qem_status check_column_chunks(qem_file *f, int narrays, qem_error *error)
{
    const json_t *chunks = json_object_get(f->header, "chunks");
    QEM_TRY(alloc_chunks(f, chunks, error));
    const uint64_t P = f->pixels, F = f->geometry.fields;
    uint64_t next_scan = 0, cursor = 0;
    for (size_t i = 0; i < f->chunk_count; i++) {
        const json_t *cj = json_array_get(chunks, i);
        qem_chunk *c = &f->chunks[i];
        QEM_TRY(chunk_span(f, cj, i, next_scan, c, error));
        next_scan += c->scans;
        c->blocks = (c->scans + QEM_INTERVAL - 1) / QEM_INTERVAL;
        c->lanes = P;
        /* Worst case payload (every stream raw, plus 4) must fit u32 offsets. */
        uint64_t per_stream = 2 * (c->scans < QEM_INTERVAL ? c->scans : QEM_INTERVAL) + 4, worst;
        if (qem_mul_overflow_u64(c->blocks * P, per_stream, &worst) || worst >= (1ull << 32))
            return qem_fail(error, QEM_E_LAYOUT,
                            "QEM chunk %zu is too large for 32-bit payload offsets", i);
        if (f->codec == QEM_CODEC_SCALED) {
            if (!qem_json_as_u64(json_object_get(cj, "region"), &c->region) ||
                c->region >= f->region_count)
                return qem_fail(error, QEM_E_LAYOUT,
                                "QEM chunk %zu must name a region of intensity_calibration", i);
            const qem_region *r = &f->regions[c->region];
            if (c->first < r->first || c->first + c->scans > r->stop)
                return qem_fail(error, QEM_E_LAYOUT,
                                "QEM chunk %zu (scans [%llu, %llu)) does not lie inside its "
                                "region [%llu, %llu)",
                                i, (unsigned long long)c->first,
                                (unsigned long long)(c->first + c->scans),
                                (unsigned long long)r->first, (unsigned long long)r->stop);
        }
        const uint64_t expected[QEM_INT_ARRAYS] = {UINT64_MAX, c->blocks * P + 1, c->blocks * P,
                                                   UINT64_MAX, c->blocks * F + 1, c->blocks * F};
        const json_t *arrays = json_object_get(cj, "arrays");
        if (!json_is_array(arrays) || json_array_size(arrays) != (size_t)narrays)
            return qem_fail(error, QEM_E_LAYOUT, "QEM chunk %zu must have %d arrays", i, narrays);
        for (int a = 0; a < narrays; a++) {
            const json_t *aj = json_array_get(arrays, (size_t)a);
            qem_array_ref *r = &c->arrays[a];
            if (!json_is_object(aj) || !qem_json_as_u64(json_object_get(aj, "offset"), &r->offset) ||
                !qem_json_as_u64(json_object_get(aj, "count"), &r->count))
                return qem_fail(error, QEM_E_LAYOUT,
                                "QEM chunk %zu array %d lacks integer offset/count", i, a);
            uint64_t aligned = (cursor + 7) & ~7ull, bytes;
            if (r->offset != aligned)
                return qem_fail(error, QEM_E_LAYOUT,
                                "QEM chunk %zu array %d starts at %llu, not at the 8-byte aligned "
                                "cursor %llu",
                                i, a, (unsigned long long)r->offset, (unsigned long long)aligned);
            if (expected[a] != UINT64_MAX && r->count != expected[a])
                return qem_fail(error, QEM_E_LAYOUT,
                                "QEM chunk %zu array %d holds %llu elements, expected %llu", i, a,
                                (unsigned long long)r->count, (unsigned long long)expected[a]);
            if (qem_mul_overflow_u64(r->count, item_size[a], &bytes) ||
                qem_add_overflow_u64(r->offset, bytes, &cursor) || cursor > f->body_bytes)
                return qem_fail(error, QEM_E_LAYOUT,
                                "QEM chunk %zu array %d runs past the end of the body", i, a);
        }
    }
    return check_coverage(f, next_scan, cursor, error);
}

static qem_status check_optional_object(const qem_file *f, const char *key, qem_error *error)
{
    const json_t *v = json_object_get(f->header, key);
    if (v && !json_is_object(v))
        return qem_fail(error, QEM_E_HEADER, "QEM header '%s' must be an object", key);
    return QEM_OK;
}

static qem_status check_interval(const qem_file *f, qem_error *error)
{
    uint64_t interval = 0;
    QEM_TRY(get_u64(f->header, "interval", &interval, error));
    if (interval != QEM_INTERVAL)
        return qem_fail(error, QEM_E_HEADER, "QEM interval %llu differs from 512",
                        (unsigned long long)interval);
    return QEM_OK;
}

static qem_status check_int_layout(qem_file *f, qem_error *error)
{
    const char *dtype = "";
    QEM_TRY(check_interval(f, error));
    QEM_TRY(get_string(f->header, "dtype", &dtype, error));
    if (!strcmp(dtype, "uint8"))
        f->dtype = QEM_DTYPE_UINT8;
    else if (!strcmp(dtype, "uint16"))
        f->dtype = QEM_DTYPE_UINT16;
    else
        return qem_fail(error, QEM_E_HEADER,
                        "QEM dtype '%s' is not valid for %s (uint8 or uint16)", dtype,
                        qem_codec_name(f->codec));
    QEM_TRY(check_valid_mask(f, error));
    if (!json_is_object(json_object_get(f->header, "metadata")))
        return qem_fail(error, QEM_E_HEADER, "QEM header 'metadata' must be an object");
    return check_column_chunks(f, QEM_INT_ARRAYS, error);
}

/* Every pixel is valid where the codec stores no mask. */
static qem_status all_valid(qem_file *f, qem_error *error)
{
    f->valid = malloc((size_t)f->pixels);
    if (!f->valid)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    memset(f->valid, 1, (size_t)f->pixels);
    f->valid_count = f->pixels;
    return QEM_OK;
}

static qem_status check_scaled_layout(qem_file *f, qem_error *error)
{
    const char *dtype = "";
    QEM_TRY(check_interval(f, error));
    QEM_TRY(get_string(f->header, "dtype", &dtype, error));
    if (strcmp(dtype, "uint16") != 0)
        return qem_fail(error, QEM_E_HEADER,
                        "QEM dtype '%s' is not valid for %s (the stored codes are uint16)", dtype,
                        qem_codec_name(f->codec));
    f->dtype = QEM_DTYPE_FLOAT32; /* restored intensities */
    QEM_TRY(check_optional_object(f, "metadata", error));
    QEM_TRY(check_optional_object(f, "attributes", error));
    QEM_TRY(qem_precision_load(json_object_get(f->header, "intensity_calibration"), f->shape,
                               &f->regions, &f->region_count, error));
    QEM_TRY(qem_precision_check_processing(json_object_get(f->header, "scientific_metadata"),
                                           error));
    QEM_TRY(all_valid(f, error));
    return check_column_chunks(f, 3, error);
}

#define FLOAT_WINDOW_BYTES (32ull << 20)

static qem_status check_float_layout(qem_file *f, qem_error *error)
{
    const char *dtype = "", *digest = "";
    QEM_TRY(get_string(f->header, "dtype", &dtype, error));
    if (strcmp(dtype, "float32") != 0)
        return qem_fail(error, QEM_E_HEADER, "QEM dtype '%s' is not valid for %s (float32)",
                        dtype, qem_codec_name(f->codec));
    f->dtype = QEM_DTYPE_FLOAT32;
    QEM_TRY(get_string(f->header, "logical_sha256", &digest, error));
    if (strlen(digest) != 64)
        return qem_fail(error, QEM_E_HEADER, "QEM logical_sha256 is not a 64-digit hex digest");
    for (int i = 0; i < 32; i++) {
        int hi = hex_value(digest[2 * i]), lo = hex_value(digest[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return qem_fail(error, QEM_E_HEADER, "QEM logical_sha256 is not a 64-digit hex digest");
        f->logical_sha256[i] = (uint8_t)(hi << 4 | lo);
    }
    QEM_TRY(check_optional_object(f, "metadata", error));
    const json_t *empad = json_object_get(f->header, "empad");
    if (!json_is_object(empad))
        return qem_fail(error, QEM_E_HEADER, "QEM header 'empad' must be an object");
    QEM_TRY(qem_empad_load(f, empad, error));
    QEM_TRY(all_valid(f, error));

    const uint64_t P = f->pixels;
    if (4 * P > FLOAT_WINDOW_BYTES)
        return qem_fail(error, QEM_E_LAYOUT,
                        "a float32 frame of %llu pixels exceeds the codec's 32 MiB window",
                        (unsigned long long)P);
    const uint64_t max_scans = FLOAT_WINDOW_BYTES / (4 * P) < QEM_INTERVAL
                                   ? FLOAT_WINDOW_BYTES / (4 * P)
                                   : QEM_INTERVAL;
    const json_t *chunks = json_object_get(f->header, "chunks");
    QEM_TRY(alloc_chunks(f, chunks, error));
    static const char *const names[3][2] = {{"payload_offset", "payload_bytes"},
                                            {"offset_offset", "offset_bytes"},
                                            {"model_offset", "model_bytes"}};
    uint64_t next_scan = 0, cursor = 0;
    for (size_t i = 0; i < f->chunk_count; i++) {
        const json_t *cj = json_array_get(chunks, i);
        qem_chunk *c = &f->chunks[i];
        QEM_TRY(chunk_span(f, cj, i, next_scan, c, error));
        if (c->scans > max_scans)
            return qem_fail(error, QEM_E_LAYOUT,
                            "QEM float chunk %zu holds %llu scans; at most %llu fit the codec",
                            i, (unsigned long long)c->scans, (unsigned long long)max_scans);
        next_scan += c->scans;
        c->blocks = 1;
        c->lanes = 2 * P;
        const uint64_t want_bytes[3] = {0, (2 * P + 1) * 4, 2 * P};
        for (int a = 0; a < 3; a++) {
            uint64_t offset, bytes;
            if (!qem_json_as_u64(json_object_get(cj, names[a][0]), &offset) ||
                !qem_json_as_u64(json_object_get(cj, names[a][1]), &bytes))
                return qem_fail(error, QEM_E_LAYOUT, "QEM float chunk %zu lacks integer %s/%s", i,
                                names[a][0], names[a][1]);
            if (offset != cursor)
                return qem_fail(error, QEM_E_LAYOUT,
                                "QEM float chunk %zu %s is %llu; the arrays must follow each "
                                "other at %llu",
                                i, names[a][0], (unsigned long long)offset,
                                (unsigned long long)cursor);
            if (bytes == 0 || (want_bytes[a] && bytes != want_bytes[a]))
                return qem_fail(error, QEM_E_LAYOUT, "QEM float chunk %zu %s is %llu bytes", i,
                                names[a][1], (unsigned long long)bytes);
            if (bytes > f->body_bytes - cursor)
                return qem_fail(error, QEM_E_LAYOUT,
                                "QEM float chunk %zu %s runs past the end of the body", i,
                                names[a][1]);
            c->arrays[a].offset = offset;
            c->arrays[a].count = a == 0 ? bytes : bytes / (a == 1 ? 4 : 1);
            cursor += bytes;
        }
    }
    return check_coverage(f, next_scan, cursor, error);
}

qem_status qem_header_load(qem_file *f, qem_error *error)
{
    QEM_TRY(check_identity(f, error));
    QEM_TRY(check_shape(f, error));
    const json_t *dtype = json_object_get(f->header, "dtype");
    QEM_TRY(qem_metadata_validate(json_object_get(f->header, "scientific_metadata"),
                                  json_object_get(f->header, "metadata"), f->shape,
                                  json_is_string(dtype) ? json_string_value(dtype) : "", error));
    QEM_TRY(check_body_table(f, error));
    /* Every detector pixel has at least a 4-byte stream offset in each
     * chunk, so the body bounds the pixel count: refused here, before any
     * per-pixel allocation (a small file must not make qem allocate for
     * the 2^48 pixels the axis limit allows). */
    if (f->pixels > f->body_bytes / 4)
        return qem_fail(error, QEM_E_LAYOUT,
                        "QEM shape declares %llu detector pixels, more than a %llu-byte body "
                        "can hold",
                        (unsigned long long)f->pixels, (unsigned long long)f->body_bytes);
    switch (f->codec) {
    case QEM_CODEC_INTEGER: return check_int_layout(f, error);
    case QEM_CODEC_SCALED: return check_scaled_layout(f, error);
    case QEM_CODEC_FLOAT32: return check_float_layout(f, error);
    case QEM_CODEC_NONE: break;
    }
    return qem_fail(error, QEM_E_UNSUPPORTED, "unknown codec");
}
