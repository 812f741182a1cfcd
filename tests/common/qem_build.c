#include "qem_build.h"

#include "common/sha256.h"

int qem_parts_load(const char *path, qem_parts *parts)
{
    memset(parts, 0, sizeof *parts);
    size_t size = 0;
    uint8_t *data = read_file(path, &size);
    if (!data || size < 56)
        return 0;
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--)
        len = (len << 8) | data[8 + i];
    json_error_t jerr;
    parts->header = json_loadb((const char *)data + 56, (size_t)len, 0, &jerr);
    parts->body_size = size - 56 - (size_t)len;
    parts->body = malloc(parts->body_size ? parts->body_size : 1);
    memcpy(parts->body, data + 56 + len, parts->body_size);
    free(data);
    return parts->header != NULL;
}

void qem_parts_free(qem_parts *parts)
{
    json_decref(parts->header);
    free(parts->body);
    memset(parts, 0, sizeof *parts);
}

int qem_parts_write(const char *path, json_t *header, const uint8_t *body, size_t body_size,
                    int rehash_body)
{
    if (rehash_body) {
        json_t *sha = json_array();
        const size_t block = (size_t)1 << 26;
        for (size_t off = 0; off < body_size || off == 0; off += block) {
            size_t n = body_size - off < block ? body_size - off : block;
            uint8_t d[32];
            char hex[65];
            qem_sha256_oneshot(body + off, n, d);
            qem_sha256_hex(d, hex);
            json_array_append_new(sha, json_string(hex));
            if (body_size == 0)
                break;
        }
        json_object_set_new(header, "sha256", sha);
    }
    char *text = json_dumps(header, JSON_COMPACT | JSON_SORT_KEYS);
    int ok = qem_raw_write(path, text, strlen(text), body, body_size);
    free(text);
    return ok;
}

int qem_raw_write(const char *path, const char *header, size_t len, const uint8_t *body,
                  size_t body_size)
{
    size_t total = 56 + len + body_size;
    uint8_t *out = malloc(total);
    memcpy(out, "QEMDATA1", 8);
    for (int i = 0; i < 8; i++) {
        out[8 + i] = (uint8_t)((uint64_t)len >> (8 * i));
        out[16 + i] = (uint8_t)((uint64_t)(56 + len) >> (8 * i));
    }
    qem_sha256_oneshot(header, len, out + 24);
    memcpy(out + 56, header, len);
    memcpy(out + 56 + len, body, body_size);
    int ok = write_file(path, out, total);
    free(out);
    return ok;
}

qem_status open_status(const char *path, qem_error *error)
{
    qem_file *f = NULL;
    qem_status st = qem_open(path, NULL, &f, error);
    qem_close(f);
    return st;
}

qem_status record_tampered(const char *src, const char *path, const char *record,
                           const char *field, json_t *value, qem_error *error)
{
    qem_parts parts;
    if (!qem_parts_load(src, &parts)) {
        json_decref(value);
        return QEM_E_IO;
    }
    json_t *ext = json_object_get(json_object_get(parts.header, "scientific_metadata"),
                                  "extensions");
    if (!field)
        json_object_set_new(ext, record, value);
    else if (value)
        json_object_set_new(json_object_get(ext, record), field, value);
    else
        json_object_del(json_object_get(ext, record), field);
    const int written = qem_parts_write(path, parts.header, parts.body, parts.body_size, 0);
    qem_parts_free(&parts);
    return written ? open_status(path, error) : QEM_E_IO;
}

uint64_t array_offset(json_t *header, size_t c, size_t a)
{
    json_t *chunk = json_array_get(json_object_get(header, "chunks"), c);
    json_t *arr = json_array_get(json_object_get(chunk, "arrays"), a);
    return (uint64_t)json_integer_value(json_object_get(arr, "offset"));
}
