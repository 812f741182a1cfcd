/* The header rules and every codec's chunk decoder: the input is a header
 * JSON and a body, assembled into a file whose checksums hold, so that the
 * fuzzer reaches past them. Layout: u32 header length, header, body. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/sha256.h"
#include "fuzz_common.h"
#include "qem/qem_internal.h"

/* The library's own prefix (signature, lengths, header checksum). */
static int assemble(const char *path, const char *header, size_t header_len, const uint8_t *body,
                    size_t body_size)
{
    uint8_t prefix[QEM_PREFIX_BYTES];
    qem_error e;
    if (qem_envelope_prefix(header, header_len, prefix, &e) != QEM_OK)
        return 0;
    const size_t total = QEM_PREFIX_BYTES + header_len + body_size;
    uint8_t *out = malloc(total);
    if (!out)
        return 0;
    memcpy(out, prefix, QEM_PREFIX_BYTES);
    memcpy(out + QEM_PREFIX_BYTES, header, header_len);
    memcpy(out + QEM_PREFIX_BYTES + header_len, body, body_size);
    const int ok = fuzz_write(path, out, total);
    free(out);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t at = 0;
    size_t header_len = fuzz_u32(data, size, &at);
    if (header_len > size - (at < size ? at : size))
        header_len = size > at ? size - at : 0;
    const char *header = (const char *)data + (at < size ? at : size);
    const uint8_t *body = data + (at + header_len < size ? at + header_len : size);
    const size_t body_size = size > at + header_len ? size - at - header_len : 0;
    /* A header that parses gets its body checksum table recomputed. */
    json_t *h = json_loadb(header, header_len, 0, NULL);
    char *text = NULL;
    if (json_is_object(h)) {
        json_t *sha = json_array();
        const size_t block = (size_t)1 << 26;
        for (size_t off = 0; off < body_size || off == 0; off += block) {
            const size_t n = body_size - off < block ? body_size - off : block;
            uint8_t d[32];
            char hex[65];
            qem_sha256_oneshot(body + off, n, d);
            qem_sha256_hex(d, hex);
            json_array_append_new(sha, json_string(hex));
            if (!body_size)
                break;
        }
        json_object_set_new(h, "sha256", sha);
        text = json_dumps(h, JSON_COMPACT);
    }
    json_decref(h);
    const char *path = fuzz_path("decode.qem");
    const int ok = text ? assemble(path, text, strlen(text), body, body_size)
                        : assemble(path, header, header_len, body, body_size);
    free(text);
    if (!ok)
        return 0;
    qem_error e;
    qem_file *f = NULL;
    if (qem_open(path, NULL, &f, &e) != QEM_OK)
        return 0;
    qem_verify_report report = {.struct_size = sizeof report};
    qem_verify(f, NULL, &report, &e);
    qem_file_info info = {.struct_size = sizeof info};
    qem_get_info(f, &info, NULL);
    if (info.pixels && info.scans * info.pixels <= FUZZ_MAX_VALUES) {
        float *out = malloc((size_t)(info.scans * info.pixels) * sizeof *out);
        if (out)
            qem_read_values(f, 0, info.scans, out, (size_t)(info.scans * info.pixels) * 4, &e);
        free(out);
    }
    qem_close(f);
    return 0;
}
