/* Envelope and header rules: each malformed file is refused at open with
 * its specific status, before any measurement is decoded. */
#include "qem_build.h"

static qem_parts base;
static int case_no;

/* Writes the base file with `mutate` applied to a copy of its header. */
static const char *variant(void (*mutate)(json_t *h), int rehash)
{
    char name[32];
    snprintf(name, sizeof name, "case%d.qem", case_no++);
    const char *path = test_path(name);
    json_t *h = json_deep_copy(base.header);
    if (mutate)
        mutate(h);
    qem_parts_write(path, h, base.body, base.body_size, rehash);
    json_decref(h);
    return path;
}

#define MUTATION(name, body) static void name(json_t *h) { body; }
MUTATION(container_other, json_object_set_new(h, "container", json_string("other.qem")))
MUTATION(container_v2, json_object_set_new(h, "container_version", json_integer(2)))
MUTATION(container_v_string, json_object_set_new(h, "container_version", json_string("1")))
MUTATION(codec_unknown, json_object_set_new(h, "codec", json_string("runtime-column-rans-spatial-v9")))
MUTATION(codec_retired, json_object_set_new(h, "codec", json_string("empad-xor-row-packed-v1")))
MUTATION(profile_differs, json_object_set_new(h, "profile", json_string("float32-bit-lanes-rans-v1")))
MUTATION(profile_missing, json_object_del(h, "profile"))
MUTATION(version_2, json_object_set_new(h, "version", json_integer(2)))
MUTATION(shape_three, json_array_remove(json_object_get(h, "shape"), 3))
MUTATION(shape_zero, json_array_set_new(json_object_get(h, "shape"), 0, json_integer(0)))
MUTATION(shape_huge, json_array_set_new(json_object_get(h, "shape"), 2, json_integer(1 << 24)))
MUTATION(shape_real, json_array_set_new(json_object_get(h, "shape"), 1, json_real(3.0)))
MUTATION(shape_bool, json_array_set_new(json_object_get(h, "shape"), 1, json_true()))
MUTATION(sm_missing, json_object_del(h, "scientific_metadata"))
MUTATION(sm_array, json_object_set_new(h, "scientific_metadata", json_array()))
MUTATION(sm_schema_3, json_object_set_new(json_object_get(h, "scientific_metadata"), "schema",
                                          json_string("quantem.scientific-metadata/3")))
MUTATION(sm_schema_other, json_object_set_new(json_object_get(h, "scientific_metadata"), "schema",
                                              json_string("something/2")))
MUTATION(sm_axis_size, json_object_set_new(json_array_get(json_object_get(json_object_get(h, "scientific_metadata"), "axes"), 2), "size", json_integer(9)))
MUTATION(sm_axis_name, json_object_set_new(json_array_get(json_object_get(json_object_get(h, "scientific_metadata"), "axes"), 0), "name", json_string("y")))
MUTATION(sm_processing_missing, json_object_del(json_object_get(h, "scientific_metadata"), "processing"))
MUTATION(sm_processing_flag, json_object_del(json_array_get(json_object_get(json_object_get(h, "scientific_metadata"), "processing"), 0), "changes_measurements"))
MUTATION(sm_coverage_missing, json_object_del(json_object_get(h, "scientific_metadata"), "source_metadata_coverage"))
MUTATION(sm_em_list, json_object_set_new(json_object_get(h, "scientific_metadata"), "electron_microscope", json_array()))
MUTATION(sm_source_metadata, json_object_set_new(json_object_get(h, "scientific_metadata"), "source_metadata", json_string("x")))
MUTATION(bytes_more, json_object_set_new(h, "bytes", json_integer(json_integer_value(json_object_get(h, "bytes")) + 1)))
MUTATION(bytes_zero, json_object_set_new(h, "bytes", json_integer(0)))
MUTATION(bytes_missing, json_object_del(h, "bytes"))
MUTATION(sha_two, json_array_append_new(json_object_get(h, "sha256"), json_string("00")))
MUTATION(sha_not_hex, json_array_set_new(json_object_get(h, "sha256"), 0, json_string("zz4cd401ba1aa1bcf31d9fe2aa07293f17445946fd3790c335e9c1a30003d945")))
MUTATION(sha_wrong, json_array_set_new(json_object_get(h, "sha256"), 0, json_string("194cd401ba1aa1bcf31d9fe2aa07293f17445946fd3790c335e9c1a30003d945")))
MUTATION(interval_256, json_object_set_new(h, "interval", json_integer(256)))
MUTATION(dtype_int16, json_object_set_new(h, "dtype", json_string("int16")))
MUTATION(dtype_float, json_object_set_new(h, "dtype", json_string("float32")))
MUTATION(valid_short, json_object_set_new(h, "valid", json_string("ffff")))
MUTATION(valid_not_hex, json_object_set_new(h, "valid", json_string("ffffffffffffffgf")))
MUTATION(metadata_list, json_object_set_new(h, "metadata", json_array()))
MUTATION(metadata_missing, json_object_del(h, "metadata"))
MUTATION(chunks_empty, json_object_set_new(h, "chunks", json_array()))
MUTATION(chunk_gap, json_object_set_new(json_array_get(json_object_get(h, "chunks"), 1), "first", json_integer(5)))
MUTATION(chunk_overlap, json_object_set_new(json_array_get(json_object_get(h, "chunks"), 1), "first", json_integer(3)))
MUTATION(chunk_short, json_object_set_new(json_array_get(json_object_get(h, "chunks"), 1), "scans", json_integer(1)))
MUTATION(chunk_long, json_object_set_new(json_array_get(json_object_get(h, "chunks"), 1), "scans", json_integer(3)))
MUTATION(chunk_zero, json_object_set_new(json_array_get(json_object_get(h, "chunks"), 0), "scans", json_integer(0)))
MUTATION(chunk_five_arrays, json_array_remove(json_object_get(json_array_get(json_object_get(h, "chunks"), 0), "arrays"), 5))
MUTATION(chunk_misaligned, {
    json_t *a = json_array_get(json_object_get(json_array_get(json_object_get(h, "chunks"), 0), "arrays"), 1);
    json_object_set_new(a, "offset", json_integer(json_integer_value(json_object_get(a, "offset")) + 4));
})
MUTATION(chunk_offset_count, {
    json_t *a = json_array_get(json_object_get(json_array_get(json_object_get(h, "chunks"), 0), "arrays"), 1);
    json_object_set_new(a, "count", json_integer(json_integer_value(json_object_get(a, "count")) - 1));
})
MUTATION(chunk_model_count, {
    json_t *a = json_array_get(json_object_get(json_array_get(json_object_get(h, "chunks"), 1), "arrays"), 2);
    json_object_set_new(a, "count", json_integer(json_integer_value(json_object_get(a, "count")) + 1));
})
MUTATION(chunk_spatial_count, {
    json_t *a = json_array_get(json_object_get(json_array_get(json_object_get(h, "chunks"), 0), "arrays"), 5);
    json_object_set_new(a, "count", json_integer(json_integer_value(json_object_get(a, "count")) + 1));
})
MUTATION(chunk_payload_bigger, {
    /* Array 0 claims more bytes: every later offset now misses its cursor. */
    json_t *a = json_array_get(json_object_get(json_array_get(json_object_get(h, "chunks"), 1), "arrays"), 0);
    json_object_set_new(a, "count", json_integer(json_integer_value(json_object_get(a, "count")) + 8));
})
/* A chunk whose worst-case payload would overflow 32-bit offsets. */
MUTATION(chunk_offset_bound, {
    json_t *shape = json_pack("[i,i,i,i]", 65536, 65536, 1, 1);
    json_object_set_new(h, "shape", shape);
    json_t *axes = json_object_get(json_object_get(h, "scientific_metadata"), "axes");
    for (size_t i = 0; i < 4; i++)
        json_object_set(json_array_get(axes, i), "size", json_array_get(shape, i));
    json_object_set_new(h, "valid", json_string("80"));
    json_t *chunk = json_array_get(json_object_get(h, "chunks"), 0);
    json_object_set_new(chunk, "scans", json_integer(65536ll * 65536ll));
    json_array_remove(json_object_get(h, "chunks"), 1);
})
MUTATION(chunk_offset_string, json_object_set_new(json_array_get(json_object_get(json_array_get(json_object_get(h, "chunks"), 0), "arrays"), 0), "offset", json_string("0")))

typedef struct rule {
    const char *name;
    void (*mutate)(json_t *h);
    int rehash;
    qem_status expected;
} rule;

static void test_prefix_rules(void)
{
    qem_error e = {0};
    size_t size = 0;
    uint8_t *good = read_file(variant(NULL, 1), &size);
    uint8_t *bad = malloc(size + 8);
    const char *path = test_path("prefix.qem");

    CHECK(write_file(path, good, 40));
    CHECK_STATUS(open_status(path, &e), QEM_E_NOT_QEM, &e);
    memcpy(bad, good, size);
    memcpy(bad, "QEMDATA2", 8);
    CHECK(write_file(path, bad, size));
    CHECK_STATUS(open_status(path, &e), QEM_E_NOT_QEM, &e);
    memcpy(bad, "QGPUSTRM", 8);
    CHECK(write_file(path, bad, size));
    CHECK_STATUS(open_status(path, &e), QEM_E_RETIRED_FORMAT, &e);
    CHECK(strstr(e.message, "export") != NULL);
    memcpy(bad, "QGANS\0\0\0", 8);
    CHECK(write_file(path, bad, size));
    CHECK_STATUS(open_status(path, &e), QEM_E_RETIRED_FORMAT, &e);

    /* Header length 0, above 16 MiB, body start != 56 + L, past the end. */
    memcpy(bad, good, size);
    memset(bad + 8, 0, 8);
    CHECK(write_file(path, bad, size));
    CHECK_STATUS(open_status(path, &e), QEM_E_HEADER_LENGTH, &e);
    memcpy(bad, good, size);
    bad[8] = 1, bad[9] = 0, bad[10] = 0, bad[11] = 1; /* 16 MiB + 1 */
    CHECK(write_file(path, bad, size));
    CHECK_STATUS(open_status(path, &e), QEM_E_HEADER_LENGTH, &e);
    memcpy(bad, good, size);
    bad[16] ^= 1;
    CHECK(write_file(path, bad, size));
    CHECK_STATUS(open_status(path, &e), QEM_E_HEADER_LENGTH, &e);
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--)
        len = (len << 8) | good[8 + i];
    CHECK(write_file(path, good, 56 + (size_t)len - 1));
    CHECK_STATUS(open_status(path, &e), QEM_E_HEADER_LENGTH, &e);

    /* One header byte changed: the checksum catches it before parsing. */
    memcpy(bad, good, size);
    bad[60] ^= 0x20;
    CHECK(write_file(path, bad, size));
    CHECK_STATUS(open_status(path, &e), QEM_E_HEADER_CHECKSUM, &e);

    /* The body: a flipped byte, a missing byte and an extra byte. */
    memcpy(bad, good, size);
    bad[size - 1] ^= 1;
    CHECK(write_file(path, bad, size));
    CHECK_STATUS(open_status(path, &e), QEM_E_BODY_CHECKSUM, &e);
    CHECK(write_file(path, good, size - 1));
    CHECK_STATUS(open_status(path, &e), QEM_E_FILE_LENGTH, &e);
    memcpy(bad, good, size);
    bad[size] = 0;
    CHECK(write_file(path, bad, size + 1));
    CHECK_STATUS(open_status(path, &e), QEM_E_FILE_LENGTH, &e);

    /* With checks deferred to reading, open succeeds but no decoder ever
     * sees the damaged block. */
    memcpy(bad, good, size);
    bad[size - 1] ^= 1;
    CHECK(write_file(path, bad, size));
    qem_open_options oo;
    qem_open_options_init(&oo);
    oo.body_check = QEM_BODY_CHECK_ON_READ;
    qem_file *f = NULL;
    CHECK_OK(qem_open(path, &oo, &f, &e), &e);
    if (f) {
        uint16_t frame[64];
        CHECK_STATUS(qem_read_scans(f, 0, 1, frame, sizeof frame, &e), QEM_E_BODY_CHECKSUM, &e);
        CHECK_STATUS(qem_verify(f, NULL, NULL, &e), QEM_E_BODY_CHECKSUM, &e);
        qem_close(f);
    }
    free(good);
    free(bad);
}

static const char *raw_header_file(const char *name, const char *text)
{
    const char *path = test_path(name);
    qem_raw_write(path, text, strlen(text), base.body, base.body_size);
    return path;
}

static void test_json_rules(void)
{
    qem_error e = {0};
    CHECK_STATUS(open_status(raw_header_file("j1.qem", "{\"container\": "), &e), QEM_E_JSON, &e);
    CHECK_STATUS(open_status(raw_header_file("j2.qem", "[1, 2]"), &e), QEM_E_JSON, &e);
    CHECK_STATUS(open_status(raw_header_file("j3.qem", "{\"a\": 1, \"a\": 2}"), &e), QEM_E_JSON, &e);
    CHECK(strstr(e.message, "duplicate") != NULL);
    /* Duplicates are refused at any depth, even where a reader would not look. */
    char *text = json_dumps(base.header, JSON_COMPACT | JSON_SORT_KEYS);
    char *pos = strstr(text, "\"metadata\":{");
    CHECK(pos != NULL);
    if (pos) {
        size_t n = strlen(text);
        char *dup = malloc(n + 64);
        size_t head = (size_t)(pos - text) + strlen("\"metadata\":{");
        memcpy(dup, text, head);
        strcpy(dup + head, "\"k\":1,\"k\":2,");
        strcat(dup, text + head);
        CHECK_STATUS(open_status(raw_header_file("j4.qem", dup), &e), QEM_E_JSON, &e);
        free(dup);
    }
    free(text);
    /* Trailing garbage after the object. */
    text = json_dumps(base.header, JSON_COMPACT | JSON_SORT_KEYS);
    size_t n = strlen(text);
    text = realloc(text, n + 3);
    strcpy(text + n, " x");
    CHECK_STATUS(open_status(raw_header_file("j5.qem", text), &e), QEM_E_JSON, &e);
    free(text);
    /* Whitespace around the object is still one JSON object. */
    text = json_dumps(base.header, JSON_INDENT(1) | JSON_SORT_KEYS);
    CHECK_OK(open_status(raw_header_file("j6.qem", text), &e), &e);
    free(text);
}

int main(void)
{
    qem_error e = {0};
    uint64_t shape[4] = {2, 3, 8, 8};
    uint16_t data[6 * 64];
    uint64_t seed = 3;
    for (size_t i = 0; i < 6 * 64; i++)
        data[i] = (uint16_t)(test_rand(&seed) % 7);
    qem_save_options so;
    qem_save_options_init(&so);
    so.chunk_scans = 4; /* two chunks: [0, 4) and [4, 6) */
    qem_writer *w = NULL;
    CHECK_OK(qem_writer_create(test_path("base.qem"), QEM_DTYPE_UINT16, shape, &so, &w, &e), &e);
    CHECK_OK(qem_writer_append(w, data, 6, &e), &e);
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);
    CHECK(qem_parts_load(test_path("base.qem"), &base));
    if (!base.header)
        return test_finish("unit_header_rules");

    /* The rebuilt but unmodified file opens: the harness itself is sound. */
    CHECK_OK(open_status(variant(NULL, 1), &e), &e);
    CHECK_OK(open_status(variant(NULL, 0), &e), &e);

    const rule rules[] = {
        {"container", container_other, 1, QEM_E_HEADER},
        {"container_version 2", container_v2, 1, QEM_E_UNSUPPORTED},
        {"container_version string", container_v_string, 1, QEM_E_HEADER},
        {"unknown codec", codec_unknown, 1, QEM_E_UNSUPPORTED},
        {"retired codec", codec_retired, 1, QEM_E_UNSUPPORTED},
        {"profile differs", profile_differs, 1, QEM_E_HEADER},
        {"profile missing", profile_missing, 1, QEM_E_HEADER},
        {"codec version 2", version_2, 1, QEM_E_UNSUPPORTED},
        {"shape of three", shape_three, 1, QEM_E_HEADER},
        {"shape zero", shape_zero, 1, QEM_E_HEADER},
        {"shape 2^24", shape_huge, 1, QEM_E_HEADER},
        {"shape real", shape_real, 1, QEM_E_HEADER},
        {"shape boolean", shape_bool, 1, QEM_E_HEADER},
        {"metadata missing", sm_missing, 1, QEM_E_METADATA},
        {"metadata list", sm_array, 1, QEM_E_METADATA},
        {"metadata schema 3", sm_schema_3, 1, QEM_E_UNSUPPORTED},
        {"metadata schema other", sm_schema_other, 1, QEM_E_METADATA},
        {"axis size", sm_axis_size, 1, QEM_E_METADATA},
        {"axis name", sm_axis_name, 1, QEM_E_METADATA},
        {"processing missing", sm_processing_missing, 1, QEM_E_METADATA},
        {"processing flag", sm_processing_flag, 1, QEM_E_METADATA},
        {"coverage missing", sm_coverage_missing, 1, QEM_E_METADATA},
        {"electron_microscope list", sm_em_list, 1, QEM_E_METADATA},
        {"source_metadata string", sm_source_metadata, 1, QEM_E_METADATA},
        {"bytes + 1", bytes_more, 1, QEM_E_FILE_LENGTH},
        {"bytes 0", bytes_zero, 1, QEM_E_HEADER},
        {"bytes missing", bytes_missing, 1, QEM_E_HEADER},
        {"two digests", sha_two, 0, QEM_E_HEADER},
        {"digest not hex", sha_not_hex, 0, QEM_E_HEADER},
        {"digest wrong", sha_wrong, 0, QEM_E_BODY_CHECKSUM},
        {"interval 256", interval_256, 1, QEM_E_HEADER},
        {"dtype int16", dtype_int16, 1, QEM_E_HEADER},
        {"dtype float32", dtype_float, 1, QEM_E_HEADER},
        {"valid too short", valid_short, 1, QEM_E_HEADER},
        {"valid not hex", valid_not_hex, 1, QEM_E_HEADER},
        {"metadata list", metadata_list, 1, QEM_E_HEADER},
        {"metadata missing", metadata_missing, 1, QEM_E_HEADER},
        {"no chunks", chunks_empty, 1, QEM_E_LAYOUT},
        {"chunk gap", chunk_gap, 1, QEM_E_LAYOUT},
        {"chunk overlap", chunk_overlap, 1, QEM_E_LAYOUT},
        {"chunks short of the scans", chunk_short, 1, QEM_E_LAYOUT},
        {"chunks beyond the scans", chunk_long, 1, QEM_E_LAYOUT},
        {"chunk of zero scans", chunk_zero, 1, QEM_E_LAYOUT},
        {"five arrays", chunk_five_arrays, 1, QEM_E_LAYOUT},
        {"misaligned array", chunk_misaligned, 1, QEM_E_LAYOUT},
        {"offset count", chunk_offset_count, 1, QEM_E_LAYOUT},
        {"model count", chunk_model_count, 1, QEM_E_LAYOUT},
        {"spatial width count", chunk_spatial_count, 1, QEM_E_LAYOUT},
        {"payload count", chunk_payload_bigger, 1, QEM_E_LAYOUT},
        {"offset as string", chunk_offset_string, 1, QEM_E_LAYOUT},
        {"32-bit offset bound", chunk_offset_bound, 1, QEM_E_LAYOUT},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        qem_status st = open_status(variant(rules[i].mutate, rules[i].rehash), &e);
        if (st != rules[i].expected)
            fprintf(stderr, "rule '%s':\n", rules[i].name);
        CHECK_STATUS(st, rules[i].expected, &e);
    }
    test_prefix_rules();
    test_json_rules();
    qem_parts_free(&base);
    return test_finish("unit_header_rules");
}
