/* The per-pixel sums qem's writer records in an integer file's header
 * (scientific_metadata.extensions "qem.pixel_sums"): recorded by a save
 * (invalid pixels 0), the same by a save of chunks encoded elsewhere, not
 * for a file too small for them to pay; the mean pattern, pixel sums and
 * calibration estimate from them equal the dense reference path bit for
 * bit; each rule broken in a header (rehashed, so that only that rule
 * fails) is refused on opening with QEM_E_METADATA; a record that keeps
 * every rule but lies is found by verify; a re-save records its own. */
#include "common/base64.h"
#include "qem_build.h"
#include "test_util.h"

#define ROWS 40
#define COLS 40
#define DET 16
#define PIXELS (DET * DET)
#define SCANS (ROWS * COLS)

static const uint64_t shape[4] = {ROWS, COLS, DET, DET};

static uint16_t *make_counts(void)
{
    uint16_t *data = malloc((size_t)SCANS * PIXELS * sizeof *data);
    uint64_t state = 42;
    for (size_t i = 0; i < (size_t)SCANS * PIXELS; i++)
        data[i] = (uint16_t)(test_rand(&state) % 50);
    return data;
}

/* Saves `data` with pixels 3 and 77 invalid, through the writer. */
static int save(const char *path, const uint16_t *data)
{
    uint8_t valid[PIXELS];
    memset(valid, 1, sizeof valid);
    valid[3] = valid[77] = 0;
    qem_save_options o;
    qem_save_options_init(&o);
    o.valid = valid;
    o.chunk_scans = 700;
    qem_writer *w = NULL;
    qem_error e = {0};
    CHECK_OK(qem_writer_create(path, QEM_DTYPE_UINT16, shape, &o, &w, &e), &e);
    if (!w)
        return 0;
    int ok = qem_writer_append(w, data, SCANS, &e) == QEM_OK && qem_writer_finish(w, &e) == QEM_OK;
    if (!ok)
        fprintf(stderr, "save: %s\n", e.message);
    qem_writer_free(w);
    return ok;
}

static json_t *record_of(json_t *header)
{
    return json_object_get(
        json_object_get(json_object_get(header, "scientific_metadata"), "extensions"),
        "qem.pixel_sums");
}

/* The mean, pixel sums and estimate of `path`, fast and reference. */
static void products_equal_reference(const char *path)
{
    qem_error e = {0};
    qem_container *c = NULL;
    CHECK_OK(qem_container_open(path, NULL, &c, &e), &e);
    if (!c)
        return;
    qem_products *fast = NULL, *ref = NULL;
    CHECK_OK(qem_products_open_path(c, NULL, QEM_PATH_FAST, &fast, &e), &e);
    CHECK_OK(qem_products_open_path(c, NULL, QEM_PATH_REFERENCE, &ref, &e), &e);
    qem_image a = {0}, b = {0};
    CHECK_OK(qem_products_mean(fast, &a, &e), &e);
    CHECK_OK(qem_products_mean(ref, &b, &e), &e);
    CHECK(a.data && b.data && memcmp(a.data, b.data, PIXELS * sizeof(float)) == 0);
    qem_image_free(&a);
    qem_image_free(&b);
    uint64_t s1[PIXELS] = {0}, s2[PIXELS] = {0};
    CHECK_OK(qem_products_pixel_sums(fast, 0, SCANS, s1, sizeof s1, &e), &e);
    CHECK_OK(qem_products_pixel_sums(ref, 0, SCANS, s2, sizeof s2, &e), &e);
    CHECK(memcmp(s1, s2, sizeof s1) == 0 && s1[3] == 0 && s1[77] == 0 && s1[4] > 0);
    qem_detector_calibration x = {.struct_size = sizeof x}, y = {.struct_size = sizeof y};
    qem_status sx = qem_products_estimate_calibration(fast, &x, &e);
    qem_status sy = qem_products_estimate_calibration(ref, &y, &e);
    CHECK(sx == sy && (sx != QEM_OK || (x.center_row == y.center_row &&
                                         x.center_column == y.center_column &&
                                         x.bright_field_radius == y.bright_field_radius)));
    qem_products_close(fast);
    qem_products_close(ref);
    qem_container_close(c);
}

static qem_status tampered(const char *src, const char *path, const char *key, json_t *value,
                           qem_error *e)
{
    return record_tampered(src, path, "qem.pixel_sums", key, value, e);
}

/* The record's data with sum `pixel` set to `value`. */
static json_t *data_with(json_t *record, unsigned pixel, uint64_t value)
{
    const char *text = json_string_value(json_object_get(record, "data"));
    size_t size = 0;
    uint8_t *le = qem_base64_decode(text, strlen(text), &size);
    CHECK(le && size == PIXELS * 8);
    for (int k = 0; k < 8; k++)
        le[pixel * 8 + (unsigned)k] = (uint8_t)(value >> (8 * k));
    char *out = qem_base64_encode(le, size);
    free(le);
    json_t *j = json_string(out);
    free(out);
    return j;
}

static uint64_t sum_of(json_t *record, unsigned pixel)
{
    size_t size = 0;
    const char *text = json_string_value(json_object_get(record, "data"));
    uint8_t *le = qem_base64_decode(text, strlen(text), &size);
    uint64_t v = 0;
    for (int k = 7; le && k >= 0; k--)
        v = v << 8 | le[pixel * 8 + (unsigned)k];
    free(le);
    return v;
}

int main(void)
{
    uint16_t *data = make_counts();
    char *path = strdup(test_path("sums.qem")), *bad = strdup(test_path("bad.qem"));
    CHECK(save(path, data));
    qem_parts parts;
    CHECK(qem_parts_load(path, &parts));
    json_t *record = json_deep_copy(record_of(parts.header));
    qem_parts_free(&parts);
    CHECK(json_is_object(record));
    CHECK(!strcmp(json_string_value(json_object_get(record, "schema")), "qem.pixel-sums/v1"));
    /* The record holds the exact sums of valid pixels. */
    uint64_t want4 = 0;
    for (size_t s = 0; s < SCANS; s++)
        want4 += data[s * PIXELS + 4];
    CHECK(sum_of(record, 4) == want4 && sum_of(record, 3) == 0 && sum_of(record, 77) == 0);
    products_equal_reference(path);
    qem_error e = {0};
    qem_container *c = NULL;
    CHECK_OK(qem_container_open(path, NULL, &c, &e), &e);
    qem_verify_report report = {.struct_size = sizeof report};
    CHECK_OK(qem_container_verify(c, NULL, &report, &e), &e);
    CHECK(strstr(report.summary, "recorded pixel sums") != NULL);
    qem_container_close(c);

    /* One test per rule, each refused on opening. */
    CHECK_STATUS(tampered(path, bad, "schema", json_string("qem.pixel-sums/v9"), &e),
                 QEM_E_METADATA, &e);
    CHECK(strstr(e.message, "schema") != NULL);
    CHECK_STATUS(tampered(path, bad, "scans", json_integer(SCANS - 1), &e), QEM_E_METADATA, &e);
    CHECK(strstr(e.message, "scans") != NULL);
    CHECK_STATUS(tampered(path, bad, "pixels", json_integer(PIXELS + 1), &e), QEM_E_METADATA, &e);
    CHECK(strstr(e.message, "pixels") != NULL);
    CHECK_STATUS(tampered(path, bad, "dtype", json_string("<u4"), &e), QEM_E_METADATA, &e);
    CHECK_STATUS(tampered(path, bad, "body_digest", json_string("00"), &e), QEM_E_METADATA, &e);
    CHECK(strstr(e.message, "another body") != NULL);
    CHECK_STATUS(tampered(path, bad, "data", json_string("not base64!"), &e), QEM_E_METADATA, &e);
    CHECK_STATUS(tampered(path, bad, "data", json_string("AAAAAAAAAAA="), &e), QEM_E_METADATA, &e);
    CHECK(strstr(e.message, "one u64 per detector pixel") != NULL);
    CHECK_STATUS(tampered(path, bad, "data", NULL, &e), QEM_E_METADATA, &e);
    CHECK_STATUS(tampered(path, bad, "data", data_with(record, 3, 1), &e), QEM_E_METADATA, &e);
    CHECK(strstr(e.message, "invalid pixel") != NULL);
    CHECK_STATUS(tampered(path, bad, "data", data_with(record, 5, (uint64_t)SCANS * 65535 + 1), &e),
                 QEM_E_METADATA, &e);
    CHECK(strstr(e.message, "above") != NULL);
    /* The record moved onto another file's body: that body's digest differs. */
    {
        uint16_t *other = make_counts();
        other[0] ^= 1;
        char *second = strdup(test_path("second.qem"));
        CHECK(save(second, other));
        qem_parts p2;
        CHECK(qem_parts_load(second, &p2));
        json_object_set(json_object_get(json_object_get(p2.header, "scientific_metadata"),
                                        "extensions"),
                        "qem.pixel_sums", record);
        CHECK(qem_parts_write(bad, p2.header, p2.body, p2.body_size, 0));
        qem_parts_free(&p2);
        CHECK_STATUS(open_status(bad, &e), QEM_E_METADATA, &e);
        CHECK(strstr(e.message, "another body") != NULL);
        free(other);
        free(second);
    }
    /* Within every bound but wrong: opens, and verify finds it. */
    CHECK_STATUS(tampered(path, bad, "data", data_with(record, 5, sum_of(record, 5) + 1), &e),
                 QEM_OK, &e);
    c = NULL;
    CHECK_OK(qem_container_open(bad, NULL, &c, &e), &e);
    CHECK_STATUS(qem_container_verify(c, NULL, NULL, &e), QEM_E_METADATA, &e);
    CHECK(strstr(e.message, "detector pixel 5") != NULL);
    qem_container_close(c);

    /* A re-save records its own sums (the same), never copies the old. */
    char *resaved = strdup(test_path("resaved.qem"));
    CHECK_OK(qem_save_file(bad, resaved, NULL, &e), &e);
    CHECK(qem_parts_load(resaved, &parts));
    CHECK(sum_of(record_of(parts.header), 5) == sum_of(record, 5));
    qem_parts_free(&parts);
    products_equal_reference(resaved);

    /* Chunks encoded elsewhere carry their sums: the file is the one a
     * serial save writes, byte for byte. */
    char *distributed = strdup(test_path("distributed.qem"));
    char *serial = strdup(test_path("serial.qem"));
    {
        qem_save_options o;
        qem_save_options_init(&o);
        o.chunk_scans = 800;
        qem_writer *sw = NULL;
        CHECK_OK(qem_writer_create(serial, QEM_DTYPE_UINT16, shape, &o, &sw, &e), &e);
        CHECK_OK(qem_writer_append(sw, data, SCANS, &e), &e);
        CHECK_OK(qem_writer_finish(sw, &e), &e);
        qem_writer_free(sw);
        qem_writer *w = NULL;
        CHECK_OK(qem_writer_create(distributed, QEM_DTYPE_UINT16, shape, &o, &w, &e), &e);
        for (uint64_t first = 0; w && first < SCANS; first += 800) {
            void *blob = NULL;
            size_t size = 0;
            CHECK_OK(qem_encode_scans(QEM_DTYPE_UINT16, shape, &o, first,
                                      data + first * PIXELS, 800, &blob, &size, &e),
                     &e);
            CHECK_OK(qem_writer_append_encoded(w, blob, size, &e), &e);
            qem_free(blob);
        }
        CHECK_OK(qem_writer_finish(w, &e), &e);
        qem_writer_free(w);
        CHECK(qem_parts_load(distributed, &parts));
        CHECK(record_of(parts.header) != NULL);
        qem_parts_free(&parts);
        size_t n1 = 0, n2 = 0;
        uint8_t *b1 = read_file(serial, &n1), *b2 = read_file(distributed, &n2);
        CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0);
        free(b1);
        free(b2);
    }
    /* A file whose record would weigh more than 1/64 of its body: none. */
    {
        const uint64_t small[4] = {2, 2, DET, DET};
        char *tiny = strdup(test_path("tiny.qem"));
        qem_writer *w = NULL;
        CHECK_OK(qem_writer_create(tiny, QEM_DTYPE_UINT16, small, NULL, &w, &e), &e);
        CHECK_OK(qem_writer_append(w, data, 4, &e), &e);
        CHECK_OK(qem_writer_finish(w, &e), &e);
        qem_writer_free(w);
        CHECK(qem_parts_load(tiny, &parts));
        CHECK(record_of(parts.header) == NULL);
        qem_parts_free(&parts);
        free(tiny);
    }
    json_decref(record);
    free(data);
    free(path);
    free(bad);
    free(resaved);
    free(distributed);
    free(serial);
    return test_finish("unit_qem_pixel_sums");
}
