/* The default detector's image qem's writer records in an integer file's
 * header (scientific_metadata.extensions "qem.detector_image", issue 29):
 * recorded by a save over the disk a plain BF request resolves, equal to a
 * dense sum over that mask; the products answer that mask from it
 * (origin "recorded") with the same values the reference path computes,
 * and compute any other mask; each rule broken in a header (rehashed, so
 * that only that rule fails) is refused on opening with QEM_E_METADATA; a
 * record that keeps every rule but lies is found by verify; a re-save and
 * a calibrated copy record their own; a body opened mapped with
 * QEM_BODY_CHECK_ON_READ is checked block by block: the recorded image is
 * served first, and a damaged block fails the load and every read of it,
 * whichever of several threads checking at once hashes it. */
#include <math.h>
#include <pthread.h>

#include "common/base64.h"
#include "qem_build.h"
#include "qem_experimental.h"
#include "test_util.h"

#define ROWS 64
#define COLS 64
#define DR 21
#define DC 20
#define PIXELS (DR * DC) /* 420: not a multiple of 8, so the mask has spare bits */
#define SCANS (ROWS * COLS)
#define KEY "qem.detector_image"

static const uint64_t shape[4] = {ROWS, COLS, DR, DC};

/* A bright disk of radius 6 near the centre over a faint background. */
static uint16_t *make_counts(uint64_t seed)
{
    uint16_t *data = malloc((size_t)SCANS * PIXELS * sizeof *data);
    uint64_t state = seed;
    for (size_t s = 0; s < SCANS; s++)
        for (size_t p = 0; p < PIXELS; p++) {
            const double dr = (double)(p / DC) - 10.3, dc = (double)(p % DC) - 9.6;
            const int inside = dr * dr + dc * dc <= 36;
            data[s * PIXELS + p] = (uint16_t)(test_rand(&state) % (inside ? 40 : 3));
        }
    return data;
}

static int save(const char *path, const uint16_t *data)
{
    uint8_t valid[PIXELS];
    memset(valid, 1, sizeof valid);
    valid[5] = valid[10 * DC + 10] = 0; /* one outside, one inside the disk */
    qem_save_options o;
    qem_save_options_init(&o);
    o.valid = valid;
    qem_writer *w = NULL;
    qem_error e = {0};
    CHECK_OK(qem_writer_create(path, QEM_DTYPE_UINT16, shape, &o, &w, &e), &e);
    const int ok = w && qem_writer_append(w, data, SCANS, &e) == QEM_OK &&
                   qem_writer_finish(w, &e) == QEM_OK;
    if (!ok)
        fprintf(stderr, "save: %s\n", e.message);
    qem_writer_free(w);
    return ok;
}

static json_t *record_of(json_t *header)
{
    return json_object_get(
        json_object_get(json_object_get(header, "scientific_metadata"), "extensions"), KEY);
}

static json_t *record_in(const char *path)
{
    qem_parts parts;
    CHECK(qem_parts_load(path, &parts));
    json_t *r = json_deep_copy(record_of(parts.header));
    qem_parts_free(&parts);
    return r;
}

static uint8_t *bytes_of(json_t *record, const char *key, size_t *size)
{
    const char *text = json_string_value(json_object_get(record, key));
    return text ? qem_base64_decode(text, strlen(text), size) : NULL;
}

static json_t *string_of(const uint8_t *bytes, size_t size)
{
    char *text = qem_base64_encode(bytes, size);
    json_t *j = json_string(text);
    free(text);
    return j;
}

/* The record's mask, one byte a pixel. */
static void mask_of(json_t *record, uint8_t *mask)
{
    size_t n = 0;
    uint8_t *bits = bytes_of(record, "mask", &n);
    CHECK(bits && n == (PIXELS + 7) / 8);
    for (size_t p = 0; bits && p < PIXELS; p++)
        mask[p] = bits[p / 8] >> (p % 8) & 1;
    free(bits);
}

/* The default BF disk's mask and image through the products, with the
 * origin of the image, fast and reference paths compared. */
static qem_origin default_image(const char *path, const qem_container_options *co,
                                uint8_t *mask, uint64_t *image)
{
    /* A damaged body (checked on read) serves the recorded image alone. */
    const int reference = !co || co->body_check != QEM_BODY_CHECK_ON_READ || !strstr(path, "bad");
    qem_error e = {0};
    qem_container *c = NULL;
    CHECK_OK(qem_container_open(path, co, &c, &e), &e);
    qem_products *fast = NULL, *ref = NULL;
    CHECK_OK(qem_products_open_path(c, NULL, QEM_PATH_FAST, &fast, &e), &e);
    CHECK_OK(qem_products_open_path(c, NULL, QEM_PATH_REFERENCE, &ref, &e), &e);
    qem_detector_request q;
    qem_detector_request_init(&q);
    CHECK_OK(qem_products_resolve_detector(fast, &q, mask, PIXELS, NULL, &e), &e);
    qem_image a = {0}, b = {0};
    CHECK_OK(qem_products_virtual(fast, mask, &a, &e), &e);
    const qem_origin origin = qem_products_last_origin(fast);
    if (reference) {
        CHECK_OK(qem_products_virtual(ref, mask, &b, &e), &e);
        CHECK(a.data && b.data && a.dtype == b.dtype && a.dtype == QEM_DTYPE_UINT32 &&
              memcmp(a.data, b.data, SCANS * 4) == 0);
    }
    for (size_t s = 0; a.data && s < SCANS; s++)
        image[s] = ((const uint32_t *)a.data)[s];
    qem_image_free(&a);
    qem_image_free(&b);
    qem_products_close(fast);
    qem_products_close(ref);
    qem_container_close(c);
    return origin;
}

static qem_status tampered(const char *src, const char *path, const char *key, json_t *value,
                           qem_error *e)
{
    return record_tampered(src, path, KEY, key, value, e);
}

/* The record's data with scan `scan` set to `value`. */
static json_t *data_with(json_t *record, size_t scan, uint64_t value)
{
    size_t n = 0;
    uint8_t *le = bytes_of(record, "data", &n);
    CHECK(le && n == SCANS * 2);
    le[scan * 2] = (uint8_t)value;
    le[scan * 2 + 1] = (uint8_t)(value >> 8);
    json_t *j = string_of(le, n);
    free(le);
    return j;
}

static uint64_t data_at(json_t *record, size_t scan)
{
    size_t n = 0;
    uint8_t *le = bytes_of(record, "data", &n);
    const uint64_t v = le ? (uint64_t)le[scan * 2] | (uint64_t)le[scan * 2 + 1] << 8 : 0;
    free(le);
    return v;
}

/* The record's mask with pixel bit `bit` set. */
static json_t *mask_with(json_t *record, unsigned bit)
{
    size_t n = 0;
    uint8_t *bits = bytes_of(record, "mask", &n);
    CHECK(bits && n == (PIXELS + 7) / 8);
    bits[bit / 8] |= (uint8_t)(1u << (bit % 8));
    json_t *j = string_of(bits, n);
    free(bits);
    return j;
}

/* The record's data widened to <u4 with scan `scan` set to `value`. */
static json_t *wide_data_with(json_t *record, size_t scan, uint64_t value)
{
    size_t n = 0;
    uint8_t *le = bytes_of(record, "data", &n);
    uint8_t *wide = calloc(SCANS, 4);
    CHECK(le && wide && n == SCANS * 2);
    for (size_t s = 0; le && wide && s < SCANS; s++)
        memcpy(wide + 4 * s, le + 2 * s, 2);
    for (int k = 0; wide && k < 4; k++)
        wide[scan * 4 + (size_t)k] = (uint8_t)(value >> (8 * k));
    json_t *j = string_of(wide, SCANS * 4);
    free(le);
    free(wide);
    return j;
}

static void check_rules(const char *path, const char *bad, json_t *record)
{
    qem_error e = {0};
    /* No value above the mask's pixel count times 65535: widened to <u4
     * to hold one. */
    {
        qem_parts parts;
        CHECK(qem_parts_load(path, &parts));
        json_t *r = record_of(parts.header);
        uint8_t mask[PIXELS];
        mask_of(r, mask);
        uint64_t selected = 0;
        for (size_t p = 0; p < PIXELS; p++)
            selected += mask[p];
        json_t *at = wide_data_with(r, 7, selected * 65535);
        json_t *above = wide_data_with(r, 7, selected * 65535 + 1);
        json_object_set_new(r, "dtype", json_string("<u4"));
        json_object_set_new(r, "data", at);
        CHECK(qem_parts_write(bad, parts.header, parts.body, parts.body_size, 0));
        CHECK_OK(open_status(bad, &e), &e); /* at the bound: kept */
        json_object_set_new(r, "data", above);
        CHECK(qem_parts_write(bad, parts.header, parts.body, parts.body_size, 0));
        qem_parts_free(&parts);
        CHECK_STATUS(open_status(bad, &e), QEM_E_METADATA, &e);
        CHECK(strstr(e.message, "above the mask's pixels") != NULL);
    }
    struct {
        const char *key;
        json_t *value;
        const char *says;
    } cases[] = {
        {"schema", json_string("qem.detector-image/v9"), "schema"},
        {"detector", json_string("adf"), "detector other than bf"},
        {"center_px", json_pack("[f]", 1.0), "centre"},
        {"radius_px", json_real(-1), "radius"},
        {"radius_px", NULL, "radius"},
        {"scans", json_integer(SCANS - 1), "scans"},
        {"pixels", json_integer(PIXELS + 1), "pixels"},
        {"dtype", json_string("<u1"), "dtype"},
        {"body_digest", json_string("00"), "another body"},
        {"mask", json_string("AAAA"), "one bit per detector pixel"},
        {"mask", NULL, "one bit per detector pixel"},
        {"mask", mask_with(record, 5), "invalid pixel"},
        {"mask", mask_with(record, PIXELS + 1), "past the last pixel"},
        {"data", json_string("not base64!"), "one value of its dtype per scan"},
        {"data", json_string("AAAA"), "one value of its dtype per scan"},
        {"dtype", json_string("<u4"), "one value of its dtype per scan"},
        {NULL, json_string("a record"), "not an object"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        CHECK_STATUS(tampered(path, bad, cases[k].key, cases[k].value, &e), QEM_E_METADATA, &e);
        if (!strstr(e.message, cases[k].says) || !strstr(e.message, KEY)) {
            fprintf(stderr, "rule %zu (%s): '%s' lacks '%s'\n", k,
                    cases[k].key ? cases[k].key : "record", e.message, cases[k].says);
            CHECK(0);
        }
    }
}

/* Several threads check one lazily opened body at once (the viewer's
 * check beside requests): one hashes each block, the others wait for it,
 * and all of them agree. */
typedef struct checker {
    qem_container *c;
    int read; /* read a pattern rather than load */
    qem_status st;
} checker;

static void *check_main(void *arg)
{
    checker *k = arg;
    qem_error e = {0};
    uint16_t pattern[PIXELS];
    k->st = k->read ? qem_container_read(k->c, SCANS - 1, 1, QEM_VALUES_WORKING, pattern,
                                         sizeof pattern, &e)
                    : qem_container_load(k->c, &e);
    return NULL;
}

static void concurrent_checks(const char *path, const qem_container_options *lazy,
                              qem_status want)
{
    for (int round = 0; round < 20; round++) {
        qem_error e = {0};
        qem_container *c = NULL;
        CHECK_OK(qem_container_open(path, lazy, &c, &e), &e);
        enum { N = 4 };
        pthread_t t[N];
        checker k[N];
        for (int i = 0; i < N; i++) {
            k[i] = (checker){c, i % 2, QEM_OK};
            pthread_create(&t[i], NULL, check_main, &k[i]);
        }
        for (int i = 0; i < N; i++) {
            pthread_join(t[i], NULL);
            CHECK_EQ_U64(k[i].st, want);
        }
        qem_container_close(c);
    }
}

int main(void)
{
    uint16_t *data = make_counts(7);
    char *path = strdup(test_path("image.qem")), *bad = strdup(test_path("bad.qem"));
    CHECK(save(path, data));
    json_t *record = record_in(path);
    CHECK(json_is_object(record));
    CHECK(!strcmp(json_string_value(json_object_get(record, "schema")), "qem.detector-image/v1"));
    CHECK(!strcmp(json_string_value(json_object_get(record, "dtype")), "<u2"));

    /* The record is the dense sum over its mask, which is the disk a plain
     * BF request resolves; the products answer it from the record. */
    uint8_t mask[PIXELS], resolved[PIXELS];
    mask_of(record, mask);
    uint64_t image[SCANS];
    CHECK(default_image(path, NULL, resolved, image) == QEM_ORIGIN_RECORDED);
    CHECK(memcmp(mask, resolved, PIXELS) == 0);
    size_t selected = 0;
    for (size_t p = 0; p < PIXELS; p++)
        selected += mask[p];
    CHECK(selected > 90 && selected < 130 && !mask[5] && !mask[10 * DC + 10]);
    for (size_t s = 0; s < SCANS; s++) {
        uint64_t dense = 0;
        for (size_t p = 0; p < PIXELS; p++)
            dense += mask[p] ? data[s * PIXELS + p] : 0;
        if (dense != data_at(record, s) || dense != image[s]) {
            fprintf(stderr, "scan %zu: dense %llu, record %llu, products %llu\n", s,
                    (unsigned long long)dense, (unsigned long long)data_at(record, s),
                    (unsigned long long)image[s]);
            CHECK(0);
            break;
        }
    }
    /* Any other mask is computed. */
    {
        qem_error e = {0};
        qem_container *c = NULL;
        CHECK_OK(qem_container_open(path, NULL, &c, &e), &e);
        qem_products *p = NULL;
        CHECK_OK(qem_products_open(c, NULL, &p, &e), &e);
        uint8_t other[PIXELS];
        memcpy(other, mask, PIXELS);
        other[0] = 1;
        qem_image a = {0};
        CHECK_OK(qem_products_virtual(p, other, &a, &e), &e);
        CHECK(qem_products_last_origin(p) == QEM_ORIGIN_COMPUTED);
        for (size_t s = 0; a.data && s < SCANS; s++)
            CHECK(((const uint32_t *)a.data)[s] == image[s] + data[s * PIXELS]);
        qem_image_free(&a);
        qem_verify_report report = {.struct_size = sizeof report};
        CHECK_OK(qem_container_verify(c, NULL, &report, &e), &e);
        CHECK(strstr(report.summary, "detector image") != NULL);
        qem_products_close(p);
        qem_container_close(c);
    }

    check_rules(path, bad, record);
    /* The record moved onto another file's body: that body's digest differs. */
    {
        uint16_t *other = make_counts(8);
        char *second = strdup(test_path("second.qem"));
        CHECK(save(second, other));
        qem_parts p2;
        CHECK(qem_parts_load(second, &p2));
        json_object_set(json_object_get(json_object_get(p2.header, "scientific_metadata"),
                                        "extensions"),
                        KEY, record);
        CHECK(qem_parts_write(bad, p2.header, p2.body, p2.body_size, 0));
        qem_parts_free(&p2);
        qem_error e = {0};
        CHECK_STATUS(open_status(bad, &e), QEM_E_METADATA, &e);
        CHECK(strstr(e.message, "another body") != NULL);
        free(other);
        free(second);
    }
    /* Within every bound but wrong: opens, and verify finds it. */
    {
        qem_error e = {0};
        CHECK_STATUS(tampered(path, bad, "data", data_with(record, 9, data_at(record, 9) + 1), &e),
                     QEM_OK, &e);
        qem_container *c = NULL;
        CHECK_OK(qem_container_open(bad, NULL, &c, &e), &e);
        CHECK_STATUS(qem_container_verify(c, NULL, NULL, &e), QEM_E_METADATA, &e);
        CHECK(strstr(e.message, "scan 9") != NULL);
        qem_container_close(c);
        /* A re-save records its own image (the true one), never the old. */
        char *resaved = strdup(test_path("resaved.qem"));
        CHECK_OK(qem_save_file(bad, resaved, NULL, &e), &e);
        json_t *again = record_in(resaved);
        CHECK(data_at(again, 9) == data_at(record, 9));
        json_decref(again);
        free(resaved);
    }
    /* A calibrated copy records the image of its own calibration's disk. */
    {
        qem_error e = {0};
        char *copy = strdup(test_path("calibrated.qem"));
        qem_detector_calibration cal = {.struct_size = sizeof cal};
        cal.center_row = 8.0;
        cal.center_column = 11.5;
        cal.bright_field_radius = 4.2;
        snprintf(cal.method, sizeof cal.method, "test");
        CHECK_OK(qem_write_calibrated_copy(path, copy, &cal, &e), &e);
        json_t *own = record_in(copy);
        uint8_t copy_mask[PIXELS], copy_resolved[PIXELS];
        mask_of(own, copy_mask);
        CHECK(json_real_value(json_object_get(own, "radius_px")) == 4.2);
        uint64_t copy_image[SCANS];
        CHECK(default_image(copy, NULL, copy_resolved, copy_image) == QEM_ORIGIN_RECORDED);
        CHECK(memcmp(copy_mask, copy_resolved, PIXELS) == 0 && memcmp(copy_mask, mask, PIXELS));
        json_decref(own);
        free(copy);
    }

    /* Mapped and checked on read: the same image with no block checked at
     * open; the load checks them all. */
    qem_container_options lazy;
    qem_container_options_init(&lazy);
    lazy.resident = QEM_RESIDENT_MAPPED;
    lazy.body_check = QEM_BODY_CHECK_ON_READ;
    {
        uint64_t again[SCANS];
        CHECK(default_image(path, &lazy, resolved, again) == QEM_ORIGIN_RECORDED);
        CHECK(memcmp(again, image, sizeof image) == 0);
        qem_error e = {0};
        qem_container *c = NULL;
        CHECK_OK(qem_container_open(path, &lazy, &c, &e), &e);
        CHECK_OK(qem_container_load(c, &e), &e);
        qem_container_close(c);
        concurrent_checks(path, &lazy, QEM_OK);
    }
    /* A damaged body opened so: the recorded image still comes first (its
     * header is authentic); the load and any read of the block refuse. */
    {
        qem_parts parts;
        CHECK(qem_parts_load(path, &parts));
        parts.body[parts.body_size / 2] ^= 0x40;
        CHECK(qem_parts_write(bad, parts.header, parts.body, parts.body_size, 0));
        qem_parts_free(&parts);
        qem_error e = {0};
        CHECK_STATUS(open_status(bad, &e), QEM_E_BODY_CHECKSUM, &e);
        uint64_t first[SCANS];
        CHECK(default_image(bad, &lazy, resolved, first) == QEM_ORIGIN_RECORDED);
        CHECK(memcmp(first, image, sizeof image) == 0);
        qem_container *c = NULL;
        CHECK_OK(qem_container_open(bad, &lazy, &c, &e), &e);
        uint16_t pattern[PIXELS];
        CHECK_STATUS(qem_container_read(c, 0, 1, QEM_VALUES_WORKING, pattern, sizeof pattern, &e),
                     QEM_E_BODY_CHECKSUM, &e);
        CHECK_STATUS(qem_container_load(c, &e), QEM_E_BODY_CHECKSUM, &e);
        CHECK(strstr(e.message, "block 0") != NULL);
        qem_container_close(c);
        concurrent_checks(bad, &lazy, QEM_E_BODY_CHECKSUM);
    }
    /* A file whose record would weigh more than 1/64 of its body: none. */
    {
        const uint64_t small[4] = {4, 4, DR, DC};
        char *tiny = strdup(test_path("tiny.qem"));
        qem_error e = {0};
        qem_writer *w = NULL;
        CHECK_OK(qem_writer_create(tiny, QEM_DTYPE_UINT16, small, NULL, &w, &e), &e);
        CHECK_OK(qem_writer_append(w, data, 16, &e), &e);
        CHECK_OK(qem_writer_finish(w, &e), &e);
        qem_writer_free(w);
        json_t *none = record_in(tiny);
        CHECK(none == NULL);
        free(tiny);
    }
    json_decref(record);
    free(data);
    free(path);
    free(bad);
    return test_finish("unit_qem_detector_image");
}
