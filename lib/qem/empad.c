/* The float codec's empad block and its optional mean-dark recipe
 * (empad-mean-dark/v1): a detector-shaped float32 plane that products
 * subtract once; raw reads never do. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/error.h"
#include "common/sha256.h"
#include "qem/qem_internal.h"

#define DARK_SCHEMA "empad-mean-dark/v1"

static int is_hex64(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (int i = 0; i < 64; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return 0;
    }
    return 1;
}

qem_status qem_empad_load(qem_file *f, const json_t *empad, qem_error *error)
{
    const json_t *bg = json_object_get(empad, "background");
    if (!bg || json_is_null(bg))
        return QEM_OK;
    if (!json_is_object(bg))
        return qem_fail(error, QEM_E_METADATA, "empad.background must be an object");
    const json_t *schema = json_object_get(bg, "schema");
    if (!json_is_string(schema) || strcmp(json_string_value(schema), DARK_SCHEMA) != 0)
        return qem_fail(error, QEM_E_METADATA,
                        "empad.background schema must be \"" DARK_SCHEMA "\"; a newer recipe "
                        "needs a newer qem");
    const json_t *identity = json_object_get(bg, "identity");
    if (!json_is_string(identity) || !is_hex64(json_string_value(identity)))
        return qem_fail(error, QEM_E_METADATA,
                        "empad.background identity must be 64 hexadecimal digits");
    const json_t *values = json_object_get(bg, "values_float32_le");
    if (!json_is_string(values))
        return qem_fail(error, QEM_E_METADATA,
                        "empad.background values_float32_le must be a base64 string");
    size_t size = 0;
    uint8_t *plane = qem_base64_decode(json_string_value(values), json_string_length(values), &size);
    if (!plane)
        return qem_fail(error, QEM_E_METADATA,
                        "empad.background values_float32_le is not valid base64");
    if (size != 4 * f->pixels) {
        free(plane);
        return qem_fail(error, QEM_E_METADATA,
                        "empad.background plane holds %zu bytes; the %llux%llu detector needs "
                        "%llu",
                        size, (unsigned long long)f->shape[2], (unsigned long long)f->shape[3],
                        (unsigned long long)(4 * f->pixels));
    }
    f->dark = (float *)plane; /* malloc'd: suitably aligned for float */
    for (uint64_t p = 0; p < f->pixels; p++)
        if (!isfinite(f->dark[p]))
            return qem_fail(error, QEM_E_METADATA,
                            "empad.background value at detector pixel %llu is not finite",
                            (unsigned long long)p);
    return QEM_OK;
}

void qem_dark_identity(const float *plane, uint64_t pixels, const void *frames,
                       uint64_t frames_bytes, char hex[65])
{
    /* SHA-256 over the schema, one NUL, every dark frame, then the plane. */
    uint8_t digest[QEM_SHA256_BYTES];
    qem_sha256 *ctx = qem_sha256_new();
    if (!ctx) {
        hex[0] = '\0';
        return;
    }
    qem_sha256_update(ctx, DARK_SCHEMA, sizeof DARK_SCHEMA); /* includes the NUL */
    if (frames && frames_bytes)
        qem_sha256_update(ctx, frames, (size_t)frames_bytes);
    qem_sha256_update(ctx, plane, (size_t)(4 * pixels));
    qem_sha256_final(ctx, digest);
    qem_sha256_free(ctx);
    qem_sha256_hex(digest, hex);
}

json_t *qem_empad_new(const float *dark, uint64_t pixels, const char *identity)
{
    json_t *empad = json_pack("{s:s, s:s, s:{}}", "format_identifier", "numpy-float32",
                              "format_name", "NumPy float32", "microscope_metadata");
    if (!empad || !dark)
        return empad;
    char computed[65];
    if (!identity) {
        qem_dark_identity(dark, pixels, NULL, 0, computed);
        identity = computed;
    }
    char *b64 = qem_base64_encode(dark, (size_t)(4 * pixels));
    if (!b64) {
        json_decref(empad);
        return NULL;
    }
    json_object_set_new(empad, "background",
                        json_pack("{s:s, s:s, s:s}", "schema", DARK_SCHEMA, "identity", identity,
                                  "values_float32_le", b64));
    free(b64);
    return empad;
}
