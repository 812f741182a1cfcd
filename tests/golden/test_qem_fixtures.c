/* Files written by the upstream Python reference decode bit-exactly to
 * their original arrays, pass verify, and carry the spatial sums the
 * reference computed; every corrupted copy is refused with its own status. */
#include <jansson.h>

#include "common/bitpack.h"
#include "common/sha256.h"
#include "qem/qem_internal.h"
#include "test_util.h"

/* The spatial fields of scan `scan`, read straight from the index. */
static int read_fields(qem_file *f, uint64_t scan, uint32_t *fields)
{
    qem_chunk_view v;
    uint64_t ci = qem_chunk_index_of(f, scan);
    if (qem_chunk_load(f, ci, 1, &v, NULL) != QEM_OK)
        return 0;
    uint64_t rel = scan - v.chunk->first, block = rel / 512;
    uint32_t values[512];
    for (uint64_t fld = 0; fld < f->geometry.fields; fld++) {
        uint64_t s = block * f->geometry.fields + fld;
        if (qem_view_spatial_unpack(&v, s, qem_block_samples(v.chunk, block), values) != QEM_OK) {
            qem_chunk_view_free(&v);
            return 0;
        }
        fields[fld] = values[rel % 512];
    }
    qem_chunk_view_free(&v);
    return 1;
}

static void check_integer_fixture(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "qem/%s.json", name);
    json_t *facts = test_load_json(fixture_path(rel));
    CHECK(facts != NULL);
    if (!facts)
        return;
    qem_error e = {0};
    snprintf(rel, sizeof rel, "qem/%s.qem", name);
    qem_file *f = NULL;
    CHECK_OK(qem_open(fixture_path(rel), NULL, &f, &e), &e);
    snprintf(rel, sizeof rel, "qem/%s.npy", name);
    qem_npy *npy = NULL;
    CHECK_OK(qem_npy_open(fixture_path(rel), &npy, &e), &e);
    if (!f || !npy) {
        qem_close(f);
        qem_npy_close(npy);
        json_decref(facts);
        return;
    }
    qem_file_info info = {.struct_size = sizeof info};
    qem_get_info(f, &info, NULL);
    qem_npy_info ninfo = {.struct_size = sizeof ninfo};
    qem_npy_get_info(npy, &ninfo, NULL);
    json_t *shape = json_object_get(facts, "shape");
    for (size_t i = 0; i < 4; i++) {
        CHECK_EQ_U64(info.shape[i], json_integer_value(json_array_get(shape, i)));
        CHECK_EQ_U64(ninfo.shape[i], info.shape[i]);
    }
    CHECK(!strcmp(qem_dtype_name(info.dtype), json_string_value(json_object_get(facts, "dtype"))));
    CHECK_EQ_U64(info.dtype, ninfo.dtype);
    CHECK_EQ_U64(info.file_bytes, json_integer_value(json_object_get(facts, "file_bytes")));
    json_t *hfacts = json_object_get(facts, "header");
    CHECK_EQ_U64(info.header_bytes, json_integer_value(json_object_get(hfacts, "header_bytes")));
    CHECK_EQ_U64(info.body_bytes, json_integer_value(json_object_get(hfacts, "bytes")));

    /* Bit-exact against the original array, and against its digest. */
    size_t bytes = (size_t)qem_read_scans_bound(f, info.scans);
    uint8_t *decoded = malloc(bytes), *original = malloc(bytes);
    CHECK_OK(qem_read_scans(f, 0, info.scans, decoded, bytes, &e), &e);
    CHECK_OK(qem_npy_read(npy, 0, ninfo.elements, original, npy_read_size(npy, ninfo.elements), &e), &e);
    CHECK(memcmp(decoded, original, bytes) == 0);
    uint8_t digest[32];
    char hex[65];
    qem_sha256_oneshot(decoded, bytes, digest);
    qem_sha256_hex(digest, hex);
    CHECK(!strcmp(hex, json_string_value(json_object_get(facts, "original_sha256"))));

    /* The validity mask as the reference decoded it. */
    uint8_t *mask = malloc((size_t)info.pixels);
    CHECK_OK(qem_get_valid_mask(f, mask, (size_t)info.pixels, NULL), NULL);
    json_t *vrows = json_object_get(facts, "valid_pixels_decoded");
    int mask_bad = 0;
    for (uint64_t p = 0; p < info.pixels; p++) {
        json_t *row = json_array_get(vrows, p / info.shape[3]);
        if ((json_integer_value(json_array_get(row, p % info.shape[3])) != 0) != (mask[p] != 0))
            mask_bad++;
    }
    CHECK_EQ_U64(mask_bad, 0);

    /* Spatial sums stored by the reference equal its expected fields. */
    json_t *fields = json_object_get(json_object_get(facts, "products"), "spatial_fields_valid");
    CHECK_EQ_U64(json_array_size(fields), info.scans);
    uint32_t got[4096];
    int field_bad = 0;
    for (uint64_t s = 0; s < info.scans && s < json_array_size(fields); s++) {
        json_t *want = json_array_get(fields, s);
        CHECK_EQ_U64(json_array_size(want), info.spatial_fields);
        CHECK(read_fields(f, s, got));
        for (size_t k = 0; k < json_array_size(want); k++)
            if ((json_int_t)got[k] != json_integer_value(json_array_get(want, k)))
                field_bad++;
    }
    CHECK_EQ_U64(field_bad, 0);

    qem_verify_report report = {.struct_size = sizeof report};
    CHECK_OK(qem_verify(f, NULL, &report, &e), &e);
    CHECK_EQ_U64(report.samples_decoded, info.scans * info.pixels);

    /* The reference's metadata passes our checks and reads back as written. */
    size_t hlen = 0;
    const char *htext = qem_header_json(f, &hlen);
    json_t *h = json_loadb(htext, hlen, 0, NULL);
    CHECK(h && !strcmp(json_string_value(json_object_get(h, "codec")),
                       "runtime-column-rans-spatial-v2"));
    json_decref(h);
    free(mask);
    free(decoded);
    free(original);
    qem_npy_close(npy);
    qem_close(f);
    json_decref(facts);
}

/* Reads a whole fixture .npy into memory. */
static uint8_t *fixture_array(const char *rel, qem_npy_info *info)
{
    qem_npy *npy = NULL;
    qem_error e = {0};
    CHECK_OK(qem_npy_open(fixture_path(rel), &npy, &e), &e);
    if (!npy)
        return NULL;
    qem_npy_get_info(npy, info, NULL);
    uint8_t *data = malloc((size_t)(info->elements * qem_dtype_size(info->dtype)));
    CHECK_OK(qem_npy_read(npy, 0, info->elements, data, npy_read_size(npy, info->elements), &e), &e);
    qem_npy_close(npy);
    return data;
}

static void check_digest(const void *data, size_t size, json_t *facts)
{
    uint8_t digest[32];
    char hex[65];
    qem_sha256_oneshot(data, size, digest);
    qem_sha256_hex(digest, hex);
    CHECK(!strcmp(hex, json_string_value(json_object_get(facts, "original_sha256"))));
}

/* float32 bits, compared as bits so that NaN payloads count. */
static void check_float_fixture(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "qem/%s.json", name);
    json_t *facts = test_load_json(fixture_path(rel));
    snprintf(rel, sizeof rel, "qem/%s.qem", name);
    qem_error e = {0};
    qem_file *f = NULL;
    CHECK_OK(qem_open(fixture_path(rel), NULL, &f, &e), &e);
    snprintf(rel, sizeof rel, "qem/%s.npy", name);
    qem_npy_info ninfo = {.struct_size = sizeof ninfo};
    uint8_t *original = fixture_array(rel, &ninfo);
    if (!f || !original || !facts) {
        qem_close(f);
        free(original);
        json_decref(facts);
        return;
    }
    qem_file_info info = {.struct_size = sizeof info};
    qem_get_info(f, &info, NULL);
    CHECK_EQ_U64(info.codec, QEM_CODEC_FLOAT32);
    CHECK_EQ_U64(info.dtype, QEM_DTYPE_FLOAT32);
    CHECK_EQ_U64(ninfo.dtype, QEM_DTYPE_FLOAT32);
    CHECK_EQ_U64(info.chunk_count, 2);
    CHECK_EQ_U64(info.file_bytes, json_integer_value(json_object_get(facts, "file_bytes")));
    CHECK(!info.has_dark);
    size_t bytes = (size_t)qem_read_scans_bound(f, info.scans);
    CHECK_EQ_U64(bytes, ninfo.elements * 4);
    uint8_t *decoded = malloc(bytes);
    CHECK_OK(qem_read_scans(f, 0, info.scans, decoded, bytes, &e), &e);
    CHECK(memcmp(decoded, original, bytes) == 0);
    check_digest(decoded, bytes, facts);
    /* The special classes really are in there. */
    int nan_payloads = 0, neg_zero = 0, subnormal = 0, inf = 0;
    for (size_t k = 0; k < bytes / 4; k++) {
        uint32_t b;
        memcpy(&b, decoded + 4 * k, 4);
        uint32_t exp = (b >> 23) & 255, man = b & 0x7fffff;
        nan_payloads += exp == 255 && man != 0 && man != 0x400000;
        neg_zero += b == 0x80000000u;
        subnormal += exp == 0 && man != 0;
        inf += exp == 255 && man == 0;
    }
    CHECK(nan_payloads > 0 && neg_zero > 0 && subnormal > 0 && inf > 0);
    /* A window, and values (identical bits for this codec). */
    float *values = malloc(bytes);
    CHECK_OK(qem_read_values(f, 0, info.scans, values, bytes, &e), &e);
    CHECK(memcmp(values, original, bytes) == 0);
    CHECK_OK(qem_read_scans(f, 3, 2, decoded, bytes, &e), &e);
    CHECK(memcmp(decoded, original + 3 * info.pixels * 4, 2 * info.pixels * 4) == 0);
    uint16_t codes[4];
    CHECK_STATUS(qem_read_codes(f, 0, 1, codes, sizeof codes, &e), QEM_E_WRONG_CODEC, &e);
    qem_verify_report report = {.struct_size = sizeof report};
    CHECK_OK(qem_verify(f, NULL, &report, &e), &e);
    CHECK_EQ_U64(report.streams_decoded, 2 * 2 * info.pixels);
    free(values);
    free(decoded);
    free(original);
    qem_close(f);
    json_decref(facts);
}

/* Scaled codes restore to the expected float32 values; codes are never
 * presented as counts. */
static void check_scaled_fixture(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "qem/%s.json", name);
    json_t *facts = test_load_json(fixture_path(rel));
    snprintf(rel, sizeof rel, "qem/%s.qem", name);
    qem_error e = {0};
    qem_file *f = NULL;
    CHECK_OK(qem_open(fixture_path(rel), NULL, &f, &e), &e);
    qem_npy_info vinfo = {.struct_size = sizeof vinfo};
    qem_npy_info cinfo = {.struct_size = sizeof cinfo};
    snprintf(rel, sizeof rel, "qem/%s.npy", name);
    uint8_t *values = fixture_array(rel, &vinfo);
    snprintf(rel, sizeof rel, "qem/%s.codes.npy", name);
    uint8_t *codes = fixture_array(rel, &cinfo);
    if (!f || !values || !codes || !facts) {
        qem_close(f);
        free(values);
        free(codes);
        json_decref(facts);
        return;
    }
    qem_file_info info = {.struct_size = sizeof info};
    qem_get_info(f, &info, NULL);
    CHECK_EQ_U64(info.codec, QEM_CODEC_SCALED);
    CHECK_EQ_U64(info.dtype, QEM_DTYPE_FLOAT32);
    CHECK_EQ_U64(info.region_count, 2);
    CHECK_EQ_U64(info.chunk_count, 3);
    CHECK_EQ_U64(vinfo.dtype, QEM_DTYPE_FLOAT32);
    CHECK_EQ_U64(cinfo.dtype, QEM_DTYPE_UINT16);
    const size_t n = (size_t)(info.scans * info.pixels);
    float *restored = malloc(n * 4);
    uint16_t *stored = malloc(n * 2);
    CHECK_OK(qem_read_values(f, 0, info.scans, restored, n * 4, &e), &e);
    CHECK(memcmp(restored, values, n * 4) == 0);
    check_digest(restored, n * 4, facts);
    CHECK_OK(qem_read_codes(f, 0, info.scans, stored, n * 2, &e), &e);
    CHECK(memcmp(stored, codes, n * 2) == 0);
    /* A window crossing the region boundary at frame 4. */
    CHECK_OK(qem_read_values(f, 2, 5, restored, n * 4, &e), &e);
    CHECK(memcmp(restored, values + 2 * info.pixels * 4, 5 * info.pixels * 4) == 0);
    CHECK_STATUS(qem_read_scans(f, 0, 1, stored, n * 2, &e), QEM_E_WRONG_CODEC, &e);
    CHECK(strstr(e.message, "not detector counts") != NULL);
    CHECK_OK(qem_verify(f, NULL, NULL, &e), &e);
    free(restored);
    free(stored);
    free(values);
    free(codes);
    qem_close(f);
    json_decref(facts);
}

static void check_corrupt(void)
{
    json_t *manifest = test_load_json(fixture_path("qem/corrupt/corrupt.json"));
    CHECK(manifest != NULL);
    if (!manifest)
        return;
    static const struct {
        const char *file;
        qem_status at_open;
        qem_status at_read;
        const char *words;
    } expected[] = {
        {"truncated.qem", QEM_E_FILE_LENGTH, QEM_OK, "length disagrees"},
        {"flipped_header_byte.qem", QEM_E_HEADER_CHECKSUM, QEM_OK, "header checksum mismatch"},
        {"flipped_body_byte.qem", QEM_E_BODY_CHECKSUM, QEM_OK, "body checksum mismatch in block 0"},
        {"unknown_codec_rehashed.qem", QEM_E_UNSUPPORTED, QEM_OK, "update qem"},
        {"bad_rans_stream_rehashed.qem", QEM_OK, QEM_E_RANS_FINAL,
         "trailing data or an invalid final state"},
    };
    json_t *cases = json_object_get(manifest, "cases");
    size_t handled = 0, i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *file = json_string_value(json_object_get(c, "file"));
        for (size_t k = 0; k < sizeof expected / sizeof expected[0]; k++) {
            if (strcmp(file, expected[k].file) != 0)
                continue;
            handled++;
            char rel[256];
            snprintf(rel, sizeof rel, "qem/corrupt/%s", file);
            /* The file on disk is the one the manifest describes. */
            size_t size = 0;
            uint8_t *bytes = read_file(fixture_path(rel), &size), digest[32];
            char hex[65];
            qem_sha256_oneshot(bytes, size, digest);
            qem_sha256_hex(digest, hex);
            CHECK(!strcmp(hex, json_string_value(json_object_get(c, "sha256"))));
            free(bytes);

            qem_error e = {0};
            qem_file *f = NULL;
            qem_status st = qem_open(fixture_path(rel), NULL, &f, &e);
            CHECK_STATUS(st, expected[k].at_open, &e);
            if (st == QEM_OK) {
                qem_file_info info = {.struct_size = sizeof info};
                qem_get_info(f, &info, NULL);
                size_t n = (size_t)qem_read_scans_bound(f, info.scans);
                void *buf = malloc(n);
                CHECK_STATUS(qem_read_scans(f, 0, info.scans, buf, n, &e), expected[k].at_read, &e);
                CHECK_STATUS(qem_verify(f, NULL, NULL, &e), expected[k].at_read, &e);
                free(buf);
                qem_close(f);
            }
            CHECK(strstr(e.message, expected[k].words) != NULL);
        }
    }
    CHECK_EQ_U64(handled, json_array_size(cases));
    CHECK_EQ_U64(handled, sizeof expected / sizeof expected[0]);
    json_decref(manifest);
}

int main(void)
{
    json_t *index = test_load_json(fixture_path("qem/INDEX.json"));
    CHECK(index != NULL);
    size_t i, integer = 0, others = 0;
    json_t *fx;
    json_array_foreach(json_object_get(index, "fixtures"), i, fx) {
        const char *name = json_string_value(json_object_get(fx, "name"));
        const char *codec = json_string_value(json_object_get(fx, "codec"));
        if (!strcmp(codec, "runtime-column-rans-spatial-v2")) {
            check_integer_fixture(name);
            integer++;
        } else if (!strcmp(codec, "float32-bit-lanes-rans-v1")) {
            check_float_fixture(name);
            others++;
        } else if (!strcmp(codec, "scaled-uint16-column-rans-v1")) {
            check_scaled_fixture(name);
            others++;
        }
    }
    CHECK_EQ_U64(integer, 3);
    CHECK_EQ_U64(others, 2);
    json_decref(index);
    check_corrupt();
    return test_finish("golden_qem_fixtures");
}
