/* The recorded per-pixel sums of an integer-codec file (pixel_sums.h). */
#include "qem/pixel_sums.h"

#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/byteorder.h"
#include "common/error.h"
#include "common/sha256.h"
#include "qem/qem_internal.h"

qem_status qem_pixel_sums_body_digest(const uint8_t (*digests)[32], uint64_t count,
                                      char hex[65], qem_error *error)
{
    uint8_t digest[QEM_SHA256_BYTES];
    if (qem_sha256_oneshot(digests, (size_t)count * 32, digest) != 0)
        return qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
    qem_sha256_hex(digest, hex);
    return QEM_OK;
}

qem_status qem_pixel_sums_put(json_t *scientific, const uint64_t *sums, uint64_t scans,
                              uint64_t pixels, const char *body_digest_hex, qem_error *error)
{
    json_t *ext = json_object_get(scientific, "extensions");
    if (!sums) {
        if (json_is_object(ext))
            json_object_del(ext, QEM_PIXEL_SUMS_KEY);
        return QEM_OK;
    }
    QEM_TRY(qem_record_extensions(scientific, &ext, error));
    if (!ext)
        return QEM_OK;
    uint8_t *le = malloc((size_t)pixels * 8);
    if (!le)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t p = 0; p < pixels; p++)
        qem_put_le64(le + p * 8, sums[p]);
    char *data = qem_base64_encode(le, (size_t)pixels * 8);
    free(le);
    json_t *record = data ? json_pack("{s:s, s:I, s:I, s:s, s:s, s:s}", "schema",
                                      QEM_PIXEL_SUMS_SCHEMA, "scans", (json_int_t)scans, "pixels",
                                      (json_int_t)pixels, "dtype", "<u8", "body_digest",
                                      body_digest_hex, "data", data)
                          : NULL;
    free(data);
    if (!record || json_object_set_new(ext, QEM_PIXEL_SUMS_KEY, record) != 0)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory recording the pixel sums");
    return QEM_OK;
}

const json_t *qem_record_get(const qem_file *f, const char *key)
{
    return json_object_get(
        json_object_get(json_object_get(f->header, "scientific_metadata"), "extensions"), key);
}

qem_status qem_record_extensions(json_t *scientific, json_t **out, qem_error *error)
{
    json_t *ext = json_object_get(scientific, "extensions");
    if (!ext) {
        ext = json_object();
        if (!ext || json_object_set_new(scientific, "extensions", ext) != 0)
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    *out = json_is_object(ext) ? ext : NULL;
    return QEM_OK;
}

qem_status qem_record_refuse(const qem_file *f, const char *key, const char *why,
                             qem_error *error)
{
    return qem_fail(error, QEM_E_METADATA,
                    "'%s': scientific_metadata.extensions.%s %s; the file was altered after qem "
                    "wrote it",
                    f->path, key, why);
}

int qem_record_integer_equals(const json_t *v, uint64_t want)
{
    return json_is_integer(v) && json_integer_value(v) >= 0 &&
           (uint64_t)json_integer_value(v) == want;
}

qem_status qem_record_check_head(const qem_file *f, const json_t *record, const char *key,
                                const char *schema, qem_error *error)
{
    if (!json_is_object(record))
        return qem_record_refuse(f, key, "is not an object", error);
    const char *named = json_string_value(json_object_get(record, "schema"));
    if (!named || strcmp(named, schema) != 0)
        return qem_record_refuse(f, key, "has an unknown schema", error);
    if (f->codec != QEM_CODEC_INTEGER)
        return qem_record_refuse(f, key, "is in a file of another codec than the integer one",
                                 error);
    if (!qem_record_integer_equals(json_object_get(record, "scans"), f->scans))
        return qem_record_refuse(f, key, "counts another number of scans than the file", error);
    if (!qem_record_integer_equals(json_object_get(record, "pixels"), f->pixels))
        return qem_record_refuse(f, key, "counts another number of pixels than the file", error);
    char hex[65];
    QEM_TRY(qem_pixel_sums_body_digest((const uint8_t(*)[32])f->block_sha, f->block_count, hex,
                                       error));
    const char *digest = json_string_value(json_object_get(record, "body_digest"));
    if (!digest || strcmp(digest, hex) != 0)
        return qem_record_refuse(f, key, "was recorded for another body", error);
    return QEM_OK;
}

static qem_status refuse(const qem_file *f, const char *why, qem_error *error)
{
    return qem_record_refuse(f, QEM_PIXEL_SUMS_KEY, why, error);
}

qem_status qem_pixel_sums_load(qem_file *f, qem_error *error)
{
    const json_t *record = qem_record_get(f, QEM_PIXEL_SUMS_KEY);
    if (!record)
        return QEM_OK;
    QEM_TRY(qem_record_check_head(f, record, QEM_PIXEL_SUMS_KEY, QEM_PIXEL_SUMS_SCHEMA, error));
    const char *dtype = json_string_value(json_object_get(record, "dtype"));
    if (!dtype || strcmp(dtype, "<u8") != 0)
        return refuse(f, "has a dtype other than <u8", error);
    const json_t *data = json_object_get(record, "data");
    if (!json_is_string(data))
        return refuse(f, "has no data string", error);
    size_t size = 0;
    uint8_t *le = qem_base64_decode(json_string_value(data), json_string_length(data), &size);
    if (!le || size != f->pixels * 8) {
        free(le);
        return refuse(f, "data is not base64 of one u64 per detector pixel", error);
    }
    uint64_t *sums = malloc((size_t)f->pixels * sizeof *sums);
    if (!sums) {
        free(le);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    uint64_t bound;
    if (__builtin_mul_overflow(f->scans, f->dtype == QEM_DTYPE_UINT8 ? 255u : 65535u, &bound))
        bound = UINT64_MAX;
    qem_status st = QEM_OK;
    for (uint64_t p = 0; p < f->pixels && st == QEM_OK; p++) {
        const uint64_t v = qem_get_le64(le + p * 8);
        sums[p] = v;
        if (!f->valid[p] && v)
            st = refuse(f, "gives an invalid pixel a nonzero sum", error);
        else if (v > bound)
            st = refuse(f, "gives a pixel a sum above scans times the dtype's maximum", error);
    }
    free(le);
    if (st != QEM_OK) {
        free(sums);
        return st;
    }
    f->recorded_sums = sums;
    return QEM_OK;
}
