/* Re-saving a .qem keeps everything that is not ours to change: the data
 * bit for bit, scientific_metadata and overrides, the header metadata, the
 * validity mask, the empad block and the precision report. Saving a .npy
 * keeps its header as source metadata. */
#include "qem_build.h"

static json_t *header_of(qem_file *f)
{
    size_t n = 0;
    const char *text = qem_header_json(f, &n);
    return json_loadb(text, n, 0, NULL);
}

static int same_member(json_t *a, json_t *b, const char *key)
{
    json_t *x = json_object_get(a, key), *y = json_object_get(b, key);
    if (!x && !y)
        return 1;
    int same = x && y && json_equal(x, y);
    if (!same)
        fprintf(stderr, "member '%s' differs after re-saving\n", key);
    return same;
}

static void resave(const char *fixture, uint32_t chunk_scans)
{
    qem_error e = {0};
    char name[128];
    snprintf(name, sizeof name, "%s_%u.qem", fixture, chunk_scans);
    char rel[128];
    snprintf(rel, sizeof rel, "qem/%s.qem", fixture);
    qem_save_options so;
    qem_save_options_init(&so);
    so.chunk_scans = chunk_scans;
    CHECK_OK(qem_save_file(fixture_path(rel), test_path(name), &so, &e), &e);
    qem_file *a = NULL, *b = NULL;
    CHECK_OK(qem_open(fixture_path(rel), NULL, &a, &e), &e);
    CHECK_OK(qem_open(test_path(name), NULL, &b, &e), &e);
    if (!a || !b) {
        qem_close(a);
        qem_close(b);
        return;
    }
    qem_file_info ia = {.struct_size = sizeof ia};
    qem_file_info ib = {.struct_size = sizeof ib};
    qem_get_info(a, &ia, NULL);
    qem_get_info(b, &ib, NULL);
    CHECK_EQ_U64(ib.codec, ia.codec);
    CHECK_EQ_U64(ib.dtype, ia.dtype);
    CHECK(memcmp(ia.shape, ib.shape, sizeof ia.shape) == 0);
    json_t *ha = header_of(a), *hb = header_of(b);
    static const char *const kept[] = {"scientific_metadata", "metadata", "valid", "empad",
                                       "intensity_calibration", "attributes", "logical_sha256"};
    for (size_t k = 0; k < sizeof kept / sizeof kept[0]; k++)
        CHECK(same_member(ha, hb, kept[k]));
    json_decref(ha);
    json_decref(hb);
    /* The data, as bits (scaled files: codes). */
    size_t item = ia.codec == QEM_CODEC_SCALED ? 2 : qem_dtype_size(ia.dtype);
    size_t bytes = (size_t)(ia.scans * ia.pixels) * item;
    uint8_t *x = malloc(bytes), *y = malloc(bytes);
    if (ia.codec == QEM_CODEC_SCALED) {
        CHECK_OK(qem_read_codes(a, 0, ia.scans, (uint16_t *)x, bytes, &e), &e);
        CHECK_OK(qem_read_codes(b, 0, ib.scans, (uint16_t *)y, bytes, &e), &e);
    } else {
        CHECK_OK(qem_read_scans(a, 0, ia.scans, x, bytes, &e), &e);
        CHECK_OK(qem_read_scans(b, 0, ib.scans, y, bytes, &e), &e);
    }
    CHECK(memcmp(x, y, bytes) == 0);
    CHECK_OK(qem_verify(b, NULL, NULL, &e), &e);
    free(x);
    free(y);
    qem_close(a);
    qem_close(b);
}

int main(void)
{
    static const char *const fixtures[] = {"u8_sparse_lowdose", "u16_dense_highdose",
                                           "u16_nonsquare_masked", "f32_special_bits",
                                           "scaled_u16_regions"};
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
        resave(fixtures[i], 0);
        resave(fixtures[i], 2);
    }

    /* A .npy source: its header is retained as source metadata. */
    qem_error e = {0};
    const uint64_t shape[4] = {2, 2, 3, 3};
    uint16_t data[36] = {0};
    data[5] = 9;
    CHECK(write_npy4(test_path("src.npy"), QEM_DTYPE_UINT16, shape, data));
    CHECK_OK(qem_save_file(test_path("src.npy"), test_path("src.qem"), NULL, &e), &e);
    qem_file *f = NULL;
    CHECK_OK(qem_open(test_path("src.qem"), NULL, &f, &e), &e);
    if (f) {
        json_t *h = header_of(f);
        json_t *sm = json_object_get(h, "scientific_metadata");
        json_t *npy = json_object_get(json_object_get(sm, "source_metadata"), "npy");
        CHECK(npy && !strcmp(json_string_value(json_object_get(npy, "descr")), "<u2"));
        CHECK(json_is_false(json_object_get(npy, "fortran_order")));
        CHECK_EQ_U64(json_array_size(json_object_get(npy, "shape")), 4);
        CHECK(!strcmp(json_string_value(json_object_get(sm, "source_metadata_coverage")),
                      "reader-retained"));
        CHECK(!strcmp(json_string_value(json_object_get(sm, "source_format")), "npy"));
        /* Nothing guessed: no calibration appears from nowhere. */
        CHECK_EQ_U64(json_object_size(json_object_get(sm, "electron_microscope")), 0);
        qem_calibration cal = {.struct_size = sizeof cal};
        qem_get_calibration(f, &cal, NULL);
        CHECK_EQ_U64(cal.voltage.source, QEM_CALIBRATION_ABSENT);
        CHECK_EQ_U64(cal.scan_step[0].source, QEM_CALIBRATION_ABSENT);
        json_decref(h);
        qem_close(f);
    }
    /* The source kind comes from the signature: a .qem named .npy still
     * re-saves as .qem. */
    size_t n = 0;
    uint8_t *bytes = read_file(fixture_path("qem/u8_sparse_lowdose.qem"), &n);
    CHECK(write_file(test_path("disguised.npy"), bytes, n));
    free(bytes);
    CHECK_OK(qem_save_file(test_path("disguised.npy"), test_path("undisguised.qem"), NULL, &e), &e);
    return test_finish("unit_resave");
}
