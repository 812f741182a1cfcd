/* The header rules and every codec's chunk decoder, on every decode path:
 * the input is a header JSON and a body, assembled into a file whose
 * checksums hold, so that the fuzzer reaches past them. Layout: u32 header
 * length, header, body. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/sha256.h"
#include "fuzz_common.h"
#include "qem/qem_internal.h"
#include "qem_experimental.h"

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

/* The whole file read on every decode path this CPU has: each gives the
 * scalar path's status, message (the first failing stream) and values. */
static void read_on_every_path(const char *path, uint64_t scans, size_t values)
{
    static const qem_decode_path paths[] = {QEM_DECODE_SCALAR, QEM_DECODE_AVX2,
                                            QEM_DECODE_AVX512, QEM_DECODE_AVX2_LOADS};
    const size_t bytes = values * sizeof(float);
    float *want = malloc(bytes), *got = malloc(bytes);
    qem_status want_st = QEM_OK;
    qem_error want_e = {0};
    for (size_t k = 0; want && got && k < sizeof paths / sizeof paths[0]; k++) {
        if (!qem_decode_path_supported(paths[k]))
            continue;
        qem_open_options oo;
        qem_open_options_init(&oo);
        oo.threads = 1;
        qem_experimental_open_options xo;
        qem_experimental_open_options_init(&xo);
        xo.decode_path = paths[k];
        qem_error e = {0};
        qem_file *f = NULL;
        if (qem_open_experimental(path, &oo, &xo, &f, &e) != QEM_OK)
            abort(); /* it opened on the default path */
        float *out = k == 0 ? want : got;
        memset(out, 0, bytes);
        const qem_status st = qem_read_values(f, 0, scans, out, bytes, &e);
        qem_close(f);
        if (k == 0) {
            want_st = st;
            want_e = e;
        } else if (st != want_st || (st != QEM_OK && strcmp(e.message, want_e.message) != 0) ||
                   (st == QEM_OK && memcmp(got, want, bytes) != 0)) {
            abort();
        }
    }
    free(want);
    free(got);
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
    qem_close(f);
    if (info.pixels && info.scans * info.pixels <= FUZZ_MAX_VALUES)
        read_on_every_path(path, info.scans, (size_t)(info.scans * info.pixels));
    return 0;
}
