/* scientific_metadata rules: every rejection of qem_metadata_validate is
 * hit by one mutation of a valid object taken from an upstream fixture,
 * and asserted by status plus two message substrings (the key path and
 * the rule); then the positive side: upstream objects, unknown optional
 * keys, schema-1 units, calibration extraction and calibration files. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>

#include "common/sha256.h"
#include "qem/metadata.h"
#include "test_util.h"

#define V_PATH "electron_source/accelerating_voltage"
#define BEAM_PATH "electron_source/beam_energy"
#define ANGLE_PATH "illumination_system/semi_convergence_angle"
#define DWELL_PATH "scan_controller/regular_scan/dwell_time"
#define CAMERA_PATH "imaging_system/camera_length"
#define ROW_PATH "scan_controller/regular_scan/pixel_size_row"
#define COL_PATH "scan_controller/regular_scan/pixel_size_column"
#define RROW_PATH "imaging_system/reciprocal_pixel_size_row"
#define RCOL_PATH "imaging_system/reciprocal_pixel_size_column"
#define ANGSTROM "\xc3\x85"

/* An upstream header: its scientific_metadata, metadata, shape and dtype. */
typedef struct base {
    json_t *header;
    json_t *sm;
    json_t *hm;
    uint64_t shape[4];
    const char *dtype;
} base;

static base bases[2]; /* 0: u16_dense_highdose (recorded), 1: u16_nonsquare_masked (overrides) */

/* Reads an authentic header (its SHA-256 matches the prefix); NULL if not. */
static json_t *load_header(const char *path)
{
    size_t size = 0;
    uint8_t *data = read_file(path, &size);
    json_t *header = NULL;
    if (data && size >= 56 && memcmp(data, "QEMDATA1", 8) == 0) {
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--)
            len = (len << 8) | data[8 + i];
        uint8_t digest[32];
        if (len <= size - 56 && qem_sha256_oneshot(data + 56, (size_t)len, digest) == 0 &&
            memcmp(digest, data + 24, 32) == 0)
            header = json_loadb((const char *)data + 56, (size_t)len, JSON_REJECT_DUPLICATES, NULL);
    }
    free(data);
    return header;
}

static int header_shape(const json_t *header, uint64_t shape[4])
{
    const json_t *s = json_object_get(header, "shape");
    if (!json_is_array(s) || json_array_size(s) != 4)
        return 0;
    for (size_t i = 0; i < 4; i++) {
        if (!json_is_integer(json_array_get(s, i)))
            return 0;
        shape[i] = (uint64_t)json_integer_value(json_array_get(s, i));
    }
    return 1;
}

static void load_base(base *b, const char *name)
{
    b->header = load_header(fixture_path(name));
    if (!b->header || !header_shape(b->header, b->shape)) {
        fprintf(stderr, "cannot read fixture %s\n", name);
        exit(1);
    }
    b->sm = json_object_get(b->header, "scientific_metadata");
    b->hm = json_object_get(b->header, "metadata");
    b->dtype = json_string_value(json_object_get(b->header, "dtype"));
}

/* --- builders ---------------------------------------------------------------- */

static json_t *axis(json_t *sm, size_t i)
{
    return json_array_get(json_object_get(sm, "axes"), i);
}
static json_t *sampling(json_t *sm, size_t i)
{
    return json_object_get(axis(sm, i), "sampling");
}
static json_t *em(json_t *sm)
{
    return json_object_get(sm, "electron_microscope");
}
static json_t *ov(json_t *sm)
{
    return json_object_get(sm, "calibration_overrides");
}
static json_t *emq(json_t *sm, const char *path)
{
    return json_object_get(em(sm), path);
}
static json_t *ovq(json_t *sm, const char *path)
{
    return json_object_get(ov(sm), path);
}
static json_t *processing(json_t *sm, size_t i)
{
    return json_array_get(json_object_get(sm, "processing"), i);
}

static json_t *quantity(double value, const char *unit, const char *provenance)
{
    json_t *q = json_pack("{s:f, s:s}", "value", value, "unit", unit);
    if (provenance)
        json_object_set_new(q, "provenance", json_string(provenance));
    return q;
}

static json_t *override_q(double value, const char *unit)
{
    return json_pack("{s:f, s:s, s:s, s:s}", "value", value, "unit", unit, "provenance",
                     "user_override", "evidence", "test");
}

static json_t *document(const char *filename, const char *media, const char *content, size_t n)
{
    uint8_t d[32];
    char hex[65];
    qem_sha256_oneshot(content, n, d);
    qem_sha256_hex(d, hex);
    json_t *doc = json_pack("{s:s, s:s, s:s%, s:s}", "filename", filename, "mediaType", media,
                            "content", content, n, "sha256", hex);
    return doc;
}

static void add_doc(json_t *sm, const char *filename, const char *media, const char *content)
{
    json_array_append_new(json_object_get(sm, "source_documents"),
                          document(filename, media, content, strlen(content)));
}
static json_t *doc0(json_t *sm)
{
    return json_array_get(json_object_get(sm, "source_documents"), 0);
}

static const char *const sample_text =
    "{\"provenance\": \"dataset.yaml\", \"id\": \"S1\", \"name\": \"BTO on STO\","
    " \"description\": \"film\", \"orientation_relationship\": \"(001)||(001)\","
    " \"evidence\": \"notebook p. 4\", \"geometry\": \"cross-section\","
    " \"growth_direction\": [0, 0, 1], \"x-lab\": {\"any\": 1},"
    " \"components\": {"
    "  \"BTO\": {\"chemical_formula\": \"BaTiO3\", \"role\": \"film\", \"zone_axis\": [1, 0, 0],"
    "   \"cif\": {\"document\": \"BTO.cif\", \"sha256\": \"ab\"}, \"note\": \"kept\","
    "   \"thickness_estimates\": ["
    "    {\"method\": \"pacbed_fit\", \"value\": 120.5, \"unit\": \"angstrom\", \"uncertainty\": 5,"
    "     \"range\": [110, 130], \"region\": {\"rows\": [0, 2], \"cols\": [1, 3]},"
    "     \"reference\": \"r\", \"date\": \"2026-10-01\", \"preferred\": true},"
    "    {\"method\": \"nominal\", \"value\": 100, \"unit\": \"angstrom\", \"region\": \"STO\","
    "     \"preferred\": false},"
    "    {\"method\": \"ssb_depth\", \"value\": 90, \"unit\": \"angstrom\","
    "     \"region\": {\"point\": [0, 0]}}]},"
    "  \"STO\": {\"chemical_formula\": \"SrTiO3\", \"role\": \"substrate\","
    "   \"zone_axis\": [1, 1, -2, 0]}},"
    " \"components_in_view\": [\"BTO\", \"STO\"]}";

static json_t *with_sample(json_t *sm)
{
    json_t *s = json_loads(sample_text, 0, NULL);
    json_object_set_new(sm, "sample", s);
    return s;
}
static json_t *component(json_t *sm, const char *label)
{
    json_t *s = json_object_get(sm, "sample");
    if (!s)
        s = with_sample(sm);
    return json_object_get(json_object_get(s, "components"), label);
}
static json_t *estimate(json_t *sm, size_t i)
{
    return json_array_get(json_object_get(component(sm, "BTO"), "thickness_estimates"), i);
}

#define SET(obj, key, value) json_object_set_new((obj), (key), (value))
#define DEL(obj, key) json_object_del((obj), (key))
#define MUT(name, body)                                                                            \
    static void name(json_t *sm, json_t *hm)                                                       \
    {                                                                                              \
        (void)sm;                                                                                  \
        (void)hm;                                                                                  \
        body;                                                                                      \
    }

/* --- mutations: schema and axes ------------------------------------------------ */
MUT(schema_missing, DEL(sm, "schema"))
MUT(schema_number, SET(sm, "schema", json_integer(2)))
MUT(schema_3, SET(sm, "schema", json_string("quantem.scientific-metadata/3")))
MUT(schema_10, SET(sm, "schema", json_string("quantem.scientific-metadata/10")))
MUT(schema_0, SET(sm, "schema", json_string("quantem.scientific-metadata/0")))
MUT(schema_02, SET(sm, "schema", json_string("quantem.scientific-metadata/02")))
MUT(schema_2_1, SET(sm, "schema", json_string("quantem.scientific-metadata/2.1")))
MUT(schema_3x, SET(sm, "schema", json_string("quantem.scientific-metadata/3x")))
MUT(schema_empty_major, SET(sm, "schema", json_string("quantem.scientific-metadata/")))
MUT(schema_other, SET(sm, "schema", json_string("quantem.other/2")))
MUT(axes_missing, DEL(sm, "axes"))
MUT(axes_object, SET(sm, "axes", json_object()))
MUT(axes_three, json_array_remove(json_object_get(sm, "axes"), 3))
MUT(axes_five, json_array_append(json_object_get(sm, "axes"), axis(sm, 3)))
MUT(axis_not_object, json_array_set_new(json_object_get(sm, "axes"), 1, json_string("scan_column")))
MUT(axis_name_y, SET(axis(sm, 0), "name", json_string("y")))
MUT(axis_name_missing, DEL(axis(sm, 3), "name"))
MUT(axis_names_swapped, {
    SET(axis(sm, 0), "name", json_string("scan_column"));
    SET(axis(sm, 1), "name", json_string("scan_row"));
})
MUT(axis_size_9, SET(axis(sm, 2), "size", json_integer(9)))
MUT(axis_size_text, SET(axis(sm, 2), "size", json_string("16")))
MUT(axis_size_real, SET(axis(sm, 2), "size", json_real(16.0)))
MUT(axis_size_missing, DEL(axis(sm, 3), "size"))

/* --- sections and retired names ------------------------------------------------ */
MUT(em_list, SET(sm, "electron_microscope", json_array()))
MUT(em_null, SET(sm, "electron_microscope", json_null()))
MUT(ov_string, SET(sm, "calibration_overrides", json_string("none")))
MUT(retired_pixel_y, SET(em(sm), "scan_controller/regular_scan/pixel_size_y",
                         quantity(0.5, "angstrom", "source_metadata")))
MUT(retired_recip_x, SET(em(sm), "imaging_system/reciprocal_pixel_size_x",
                         quantity(0.8, "mrad", "source_metadata")))
MUT(retired_ov_pixel_x,
    SET(ov(sm), "scan_controller/regular_scan/pixel_size_x", override_q(3.0, "angstrom")))
MUT(retired_ov_recip_y,
    SET(ov(sm), "imaging_system/reciprocal_pixel_size_y", override_q(1.0, "mrad")))

/* --- quantities: axis sampling --------------------------------------------------- */
MUT(sampling_number, SET(axis(sm, 0), "sampling", json_real(0.5)))
MUT(sampling_null, SET(axis(sm, 0), "sampling", json_null()))
MUT(sampling_no_provenance, DEL(sampling(sm, 2), "provenance"))
MUT(sampling_blank_provenance, SET(sampling(sm, 3), "provenance", json_string(" \t ")))
MUT(sampling_number_provenance, SET(sampling(sm, 1), "provenance", json_integer(1)))
MUT(sampling_bool, SET(sampling(sm, 0), "value", json_true()))
MUT(sampling_text_value, SET(sampling(sm, 0), "value", json_string("0.5")))
MUT(sampling_no_value, DEL(sampling(sm, 1), "value"))
MUT(sampling_zero, SET(sampling(sm, 2), "value", json_integer(0)))
MUT(sampling_negative, SET(sampling(sm, 3), "value", json_real(-0.8)))
MUT(scan_unit_m, {
    SET(sampling(sm, 0), "unit", json_string("m"));
    SET(sampling(sm, 0), "value", json_real(5e-11));
})
MUT(scan_unit_nm, SET(sampling(sm, 1), "unit", json_string("nm")))
MUT(scan_unit_sign, SET(sampling(sm, 0), "unit", json_string(ANGSTROM)))
MUT(scan_unit_mrad, SET(sampling(sm, 0), "unit", json_string("mrad")))
MUT(scan_unit_case, SET(sampling(sm, 1), "unit", json_string("Angstrom")))
MUT(detector_unit_inv_nm, SET(sampling(sm, 2), "unit", json_string("1/nm")))
MUT(detector_unit_inv_sign, SET(sampling(sm, 3), "unit", json_string("1/" ANGSTROM)))
MUT(detector_unit_rad, SET(sampling(sm, 2), "unit", json_string("rad")))
MUT(detector_unit_angstrom, SET(sampling(sm, 2), "unit", json_string("angstrom")))
MUT(sampling_unit_missing, DEL(sampling(sm, 2), "unit"))
MUT(sampling_unit_empty, SET(sampling(sm, 3), "unit", json_string("")))
MUT(sampling_unit_number, SET(sampling(sm, 3), "unit", json_integer(1)))
MUT(sampling_evidence_number, SET(sampling(sm, 0), "evidence", json_integer(5)))

/* --- quantities: electron_microscope ---------------------------------------------- */
MUT(voltage_in_v, SET(emq(sm, V_PATH), "unit", json_string("V")))
MUT(voltage_furlong, SET(emq(sm, V_PATH), "unit", json_string("furlong")))
MUT(voltage_false, SET(emq(sm, V_PATH), "value", json_false()))
MUT(voltage_zero, SET(emq(sm, V_PATH), "value", json_real(0.0)))
MUT(voltage_no_provenance, DEL(emq(sm, V_PATH), "provenance"))
MUT(angle_not_object, SET(em(sm), ANGLE_PATH, json_real(21.4)))
MUT(angle_in_rad, SET(em(sm), ANGLE_PATH, quantity(0.0214, "rad", "source_metadata")))
MUT(beam_in_ev, SET(em(sm), BEAM_PATH, quantity(300000, "eV", "source_metadata")))
MUT(beam_in_kv, SET(em(sm), BEAM_PATH, quantity(300, "kV", "source_metadata")))
MUT(dwell_in_ms, SET(em(sm), DWELL_PATH, quantity(0.001, "ms", "source_metadata")))
MUT(dwell_in_s, SET(em(sm), DWELL_PATH, quantity(1e-6, "s", "source_metadata")))
MUT(camera_in_m, SET(em(sm), CAMERA_PATH, quantity(0.12, "m", "source_metadata")))
MUT(camera_in_cm, SET(em(sm), CAMERA_PATH, quantity(12, "cm", "source_metadata")))
MUT(unknown_path_negative, SET(em(sm), "lab/stage_tilt", quantity(-3, "deg", "log")))
MUT(unknown_path_no_provenance, SET(em(sm), "lab/stage_tilt", quantity(3, "deg", NULL)))
MUT(unknown_path_not_object, SET(em(sm), "lab/stage_tilt", json_string("3 deg")))
MUT(unknown_path_no_unit, SET(em(sm), "lab/stage_tilt", json_pack("{s:i, s:s}", "value", 3,
                                                                   "provenance", "log")))
MUT(reciprocal_prefix_inv_nm,
    SET(em(sm), "imaging_system/reciprocal_pixel_size_diagonal", quantity(1, "1/nm", "log")))

/* --- duplicates (schema 2) ----------------------------------------------------- */
MUT(conflicting_scan_step, SET(sampling(sm, 0), "value", json_integer(99)))
MUT(duplicate_without_sampling, DEL(axis(sm, 0), "sampling"))
MUT(duplicate_column_without_sampling, DEL(axis(sm, 1), "sampling"))
MUT(duplicate_unit_differs,
    SET(em(sm), RROW_PATH, quantity(0.8, "1/angstrom", "source_metadata")))
MUT(duplicate_detector_missing, {
    SET(em(sm), RCOL_PATH, quantity(0.8, "mrad", "source_metadata"));
    DEL(axis(sm, 3), "sampling");
})
MUT(duplicate_beyond_tolerance, SET(emq(sm, COL_PATH), "value", json_real(0.25 * (1 + 1e-13))))

/* --- calibration_overrides (masked base) --------------------------------------------- */
MUT(ov_unknown_path, SET(ov(sm), "lab/stage_tilt", override_q(3, "deg")))
MUT(ov_beam_energy, SET(ov(sm), BEAM_PATH, override_q(300, "keV")))
MUT(ov_provenance_other, SET(ovq(sm, V_PATH), "provenance", json_string("source_metadata")))
MUT(ov_provenance_missing, DEL(ovq(sm, V_PATH), "provenance"))
MUT(ov_evidence_missing, DEL(ovq(sm, ROW_PATH), "evidence"))
MUT(ov_evidence_empty, SET(ovq(sm, COL_PATH), "evidence", json_string("")))
MUT(ov_evidence_number, SET(ovq(sm, COL_PATH), "evidence", json_integer(7)))
MUT(ov_scan_in_m, {
    SET(ov(sm), ROW_PATH, override_q(2e-10, "m"));
    SET(ov(sm), COL_PATH, override_q(3e-10, "m"));
})
MUT(ov_voltage_in_v, SET(ov(sm), V_PATH, override_q(200000, "V")))
MUT(ov_dwell_in_s, SET(ov(sm), DWELL_PATH, override_q(1e-6, "s")))
MUT(ov_voltage_parsec, SET(ovq(sm, V_PATH), "unit", json_string("parsec")))
MUT(ov_value_true, SET(ovq(sm, V_PATH), "value", json_true()))
MUT(ov_value_negative, SET(ovq(sm, ROW_PATH), "value", json_real(-2.0)))
MUT(ov_not_object, SET(ov(sm), ANGLE_PATH, json_real(20.0)))
MUT(ov_scan_too_small, SET(ovq(sm, ROW_PATH), "value", json_real(1e-5)))
MUT(ov_scan_too_large, SET(ovq(sm, COL_PATH), "value", json_real(2e4)))
MUT(ov_column_missing, DEL(ov(sm), COL_PATH))
MUT(ov_row_missing, DEL(ov(sm), ROW_PATH))
MUT(ov_reciprocal_row_only, SET(ov(sm), RROW_PATH, override_q(1.0, "mrad")))
MUT(ov_reciprocal_units_differ, {
    SET(ov(sm), RROW_PATH, override_q(1.0, "mrad"));
    SET(ov(sm), RCOL_PATH, override_q(0.1, "1/angstrom"));
})

/* --- source metadata and coverage ------------------------------------------------- */
MUT(source_metadata_string, SET(sm, "source_metadata", json_string("x")))
MUT(source_metadata_missing, DEL(sm, "source_metadata"))
MUT(coverage_missing, DEL(sm, "source_metadata_coverage"))
MUT(coverage_other, SET(sm, "source_metadata_coverage", json_string("complete")))
MUT(coverage_number, SET(sm, "source_metadata_coverage", json_integer(1)))

/* --- source_documents -------------------------------------------------------------- */
MUT(docs_object, SET(sm, "source_documents", json_object()))
MUT(docs_null, SET(sm, "source_documents", json_null()))
MUT(docs_17, {
    for (int i = 0; i < 17; i++)
        add_doc(sm, "a.json", "application/json", "{}");
})
MUT(doc_not_object, json_array_append_new(json_object_get(sm, "source_documents"),
                                          json_string("a.xml")))
MUT(doc_filename_missing, {
    add_doc(sm, "a.xml", "application/xml", "<a/>");
    DEL(doc0(sm), "filename");
})
MUT(doc_filename_empty, add_doc(sm, "", "application/xml", "<a/>"))
MUT(doc_filename_slash, add_doc(sm, "dir/a.xml", "application/xml", "<a/>"))
MUT(doc_filename_backslash, add_doc(sm, "dir\\a.xml", "application/xml", "<a/>"))
MUT(doc_filename_number, {
    add_doc(sm, "a.xml", "application/xml", "<a/>");
    SET(doc0(sm), "filename", json_integer(1));
})
MUT(doc_content_number, {
    add_doc(sm, "a.xml", "application/xml", "<a/>");
    SET(doc0(sm), "content", json_integer(1));
})
MUT(doc_content_missing, {
    add_doc(sm, "a.xml", "application/xml", "<a/>");
    DEL(doc0(sm), "content");
})
MUT(docs_oversized, {
    /* Two JSON documents of 2 MiB + 2 bytes each: 4 MiB + 4 in total. */
    size_t n = ((size_t)2 << 20) + 2;
    char *text = malloc(n + 1);
    memset(text, ' ', n);
    text[0] = '{';
    text[n - 1] = '}';
    text[n] = '\0';
    add_doc(sm, "a.json", "application/json", text);
    add_doc(sm, "b.json", "application/json", text);
    free(text);
})
MUT(doc_sha_wrong, {
    add_doc(sm, "a.xml", "application/xml", "<a/>");
    SET(doc0(sm), "sha256",
        json_string("0000000000000000000000000000000000000000000000000000000000000000"));
})
MUT(doc_sha_upper, {
    add_doc(sm, "a.xml", "application/xml", "<a/>");
    char upper[65];
    snprintf(upper, sizeof upper, "%s", json_string_value(json_object_get(doc0(sm), "sha256")));
    for (char *c = upper; *c; c++)
        if (*c >= 'a' && *c <= 'f')
            *c = (char)(*c - 'a' + 'A');
    SET(doc0(sm), "sha256", json_string(upper));
})
MUT(doc_sha_missing, {
    add_doc(sm, "a.xml", "application/xml", "<a/>");
    DEL(doc0(sm), "sha256");
})
MUT(doc_media_text, add_doc(sm, "a.txt", "text/plain", "hello"))
MUT(doc_media_missing, {
    add_doc(sm, "a.xml", "application/xml", "<a/>");
    DEL(doc0(sm), "mediaType");
})
MUT(doc_xml_doctype, add_doc(sm, "a.xml", "application/xml", "<!DOCTYPE a><a/>"))
MUT(doc_xml_doctype_lower, add_doc(sm, "a.xml", "application/xml", "<!doctype a><a/>"))
MUT(doc_xml_entity_mixed,
    add_doc(sm, "a.xml", "application/xml", "<a><!-- x --><!EnTiTy e \"y\"></a>"))
MUT(doc_xml_malformed, add_doc(sm, "a.xml", "application/xml", "<a><b></a>"))
MUT(doc_xml_empty, add_doc(sm, "a.xml", "application/xml", ""))
MUT(doc_xml_two_roots, add_doc(sm, "a.xml", "application/xml", "<a/><b/>"))
MUT(doc_json_nan, add_doc(sm, "a.json", "application/json", "{\"a\": NaN}"))
MUT(doc_json_infinity, add_doc(sm, "a.json", "application/json", "{\"a\": -Infinity}"))
MUT(doc_json_truncated, add_doc(sm, "a.json", "application/json", "{\"a\": "))
MUT(doc_json_array, add_doc(sm, "a.json", "application/json", "[1, 2]"))
MUT(doc_json_string, add_doc(sm, "a.json", "application/json", "\"text\""))

/* --- processing ------------------------------------------------------------------ */
MUT(processing_missing, DEL(sm, "processing"))
MUT(processing_empty, SET(sm, "processing", json_array()))
MUT(processing_object, SET(sm, "processing", json_object()))
MUT(processing_string_entry,
    json_array_set_new(json_object_get(sm, "processing"), 0, json_string("lossless_storage")))
MUT(processing_no_operation, DEL(processing(sm, 0), "operation"))
MUT(processing_empty_operation, SET(processing(sm, 0), "operation", json_string("")))
MUT(processing_number_operation, SET(processing(sm, 0), "operation", json_integer(3)))
MUT(processing_no_flag, DEL(processing(sm, 0), "changes_measurements"))
MUT(processing_int_flag, SET(processing(sm, 0), "changes_measurements", json_integer(0)))
MUT(processing_text_flag, {
    json_array_append_new(json_object_get(sm, "processing"),
                          json_pack("{s:s, s:s}", "operation", "binning",
                                    "changes_measurements", "false"));
})

/* --- sample ----------------------------------------------------------------------- */
MUT(sample_list, SET(sm, "sample", json_array()))
MUT(sample_null, SET(sm, "sample", json_null()))
MUT(sample_no_provenance, DEL(with_sample(sm), "provenance"))
MUT(sample_blank_provenance, SET(with_sample(sm), "provenance", json_string("  ")))
MUT(sample_name_number, SET(with_sample(sm), "name", json_integer(1)))
MUT(sample_id_number, SET(with_sample(sm), "id", json_integer(1)))
MUT(sample_description_list, SET(with_sample(sm), "description", json_array()))
MUT(sample_orientation_number, SET(with_sample(sm), "orientation_relationship", json_integer(1)))
MUT(sample_evidence_number, SET(with_sample(sm), "evidence", json_integer(1)))
MUT(sample_geometry_other, SET(with_sample(sm), "geometry", json_string("side-view")))
MUT(sample_geometry_number, SET(with_sample(sm), "geometry", json_integer(1)))
MUT(sample_growth_zero, SET(with_sample(sm), "growth_direction", json_pack("[i,i,i]", 0, 0, 0)))
MUT(sample_growth_two, SET(with_sample(sm), "growth_direction", json_pack("[i,i]", 0, 1)))
MUT(sample_growth_five, SET(with_sample(sm), "growth_direction",
                            json_pack("[i,i,i,i,i]", 1, 0, 0, 0, 0)))
MUT(sample_growth_real, SET(with_sample(sm), "growth_direction", json_pack("[f,i,i]", 1.0, 0, 0)))
MUT(sample_growth_bool, SET(with_sample(sm), "growth_direction", json_pack("[b,i,i]", 1, 0, 1)))
MUT(sample_components_list, SET(with_sample(sm), "components", json_array()))
MUT(sample_components_empty_label,
    SET(json_object_get(with_sample(sm), "components"), "", json_object()))
MUT(component_not_object, SET(json_object_get(with_sample(sm), "components"), "STO",
                              json_string("SrTiO3")))
MUT(component_formula_number, SET(component(sm, "BTO"), "chemical_formula", json_integer(1)))
MUT(component_role_other, SET(component(sm, "BTO"), "role", json_string("matrix")))
MUT(component_zone_zero, SET(component(sm, "STO"), "zone_axis",
                             json_pack("[i,i,i,i]", 0, 0, 0, 0)))
MUT(component_zone_text, SET(component(sm, "STO"), "zone_axis", json_string("[110]")))
MUT(component_cif_string, SET(component(sm, "BTO"), "cif", json_string("BTO.cif")))
MUT(component_cif_no_sha, DEL(json_object_get(component(sm, "BTO"), "cif"), "sha256"))
MUT(component_cif_document_number,
    SET(json_object_get(component(sm, "BTO"), "cif"), "document", json_integer(1)))
MUT(component_estimates_object, SET(component(sm, "BTO"), "thickness_estimates", json_object()))
MUT(estimate_not_object, json_array_set_new(json_object_get(component(sm, "BTO"),
                                                            "thickness_estimates"),
                                            0, json_integer(120)))
MUT(estimate_method_other, SET(estimate(sm, 0), "method", json_string("guess")))
MUT(estimate_method_missing, DEL(estimate(sm, 1), "method"))
MUT(estimate_unit_nm, SET(estimate(sm, 0), "unit", json_string("nm")))
MUT(estimate_value_zero, SET(estimate(sm, 0), "value", json_integer(0)))
MUT(estimate_value_bool, SET(estimate(sm, 0), "value", json_true()))
MUT(estimate_value_missing, DEL(estimate(sm, 2), "value"))
MUT(estimate_uncertainty_negative, SET(estimate(sm, 0), "uncertainty", json_integer(-1)))
MUT(estimate_range_reversed, SET(estimate(sm, 0), "range", json_pack("[i,i]", 130, 110)))
MUT(estimate_range_zero, SET(estimate(sm, 0), "range", json_pack("[i,i]", 0, 110)))
MUT(estimate_range_one, SET(estimate(sm, 0), "range", json_pack("[i]", 110)))
MUT(estimate_range_text, SET(estimate(sm, 0), "range", json_string("110-130")))
MUT(estimate_region_unknown_label, SET(estimate(sm, 1), "region", json_string("LAO")))
MUT(estimate_region_rows_reversed,
    SET(estimate(sm, 0), "region",
        json_pack("{s:[i,i], s:[i,i]}", "rows", 2, 1, "cols", 0, 1)))
MUT(estimate_region_cols_equal,
    SET(estimate(sm, 0), "region",
        json_pack("{s:[i,i], s:[i,i]}", "rows", 0, 1, "cols", 3, 3)))
MUT(estimate_region_rows_only, SET(estimate(sm, 0), "region", json_pack("{s:[i,i]}", "rows", 0, 1)))
MUT(estimate_region_extra_key,
    SET(estimate(sm, 0), "region",
        json_pack("{s:[i,i], s:[i,i], s:i}", "rows", 0, 1, "cols", 0, 1, "z", 0)))
MUT(estimate_point_negative, SET(estimate(sm, 2), "region", json_pack("{s:[i,i]}", "point", -1, 0)))
MUT(estimate_point_extra, SET(estimate(sm, 2), "region",
                              json_pack("{s:[i,i], s:i}", "point", 0, 0, "z", 1)))
MUT(estimate_point_real, SET(estimate(sm, 2), "region", json_pack("{s:[f,i]}", "point", 0.0, 0)))
MUT(estimate_region_number, SET(estimate(sm, 2), "region", json_integer(4)))
MUT(estimate_reference_number, SET(estimate(sm, 0), "reference", json_integer(1)))
MUT(estimate_date_number, SET(estimate(sm, 0), "date", json_integer(20261001)))
MUT(estimate_preferred_text, SET(estimate(sm, 1), "preferred", json_string("no")))
MUT(estimate_two_preferred, SET(estimate(sm, 1), "preferred", json_true()))
MUT(sample_in_view_unknown, SET(with_sample(sm), "components_in_view", json_pack("[s]", "LAO")))
MUT(sample_in_view_string, SET(with_sample(sm), "components_in_view", json_string("BTO")))
MUT(sample_in_view_number, SET(with_sample(sm), "components_in_view", json_pack("[i]", 1)))

/* --- declared-processing cross-checks (header metadata) ------------------------------ */
MUT(hot_pixels_undeclared,
    SET(hm, "hot_pixel_correction", json_pack("{s:b, s:s, s:i}", "applied", 1, "method",
                                              "median", "pixel_count", 3)))
MUT(hot_pixels_declared_unchanged, {
    SET(hm, "hot_pixel_correction", json_pack("{s:i}", "applied", 1));
    json_array_append_new(json_object_get(sm, "processing"),
                          json_pack("{s:s, s:b}", "operation", "flagged_pixel_replacement",
                                    "changes_measurements", 0));
})
MUT(hot_pixels_last_record_wins, {
    SET(hm, "hot_pixel_correction", json_pack("{s:s}", "applied", "yes"));
    json_array_append_new(json_object_get(sm, "processing"),
                          json_pack("{s:s, s:b}", "operation", "flagged_pixel_replacement",
                                    "changes_measurements", 1));
    json_array_append_new(json_object_get(sm, "processing"),
                          json_pack("{s:s, s:b}", "operation", "flagged_pixel_replacement",
                                    "changes_measurements", 0));
})
MUT(markers_undeclared, SET(hm, "flagged_markers_stored_as_zero", json_integer(4096)))
MUT(markers_real, SET(hm, "flagged_markers_stored_as_zero", json_real(2.0)))
MUT(markers_list, SET(hm, "flagged_markers_stored_as_zero", json_pack("[i]", 1)))
MUT(hot_pixels_applied_object,
    SET(hm, "hot_pixel_correction", json_pack("{s:{s:i}}", "applied", "median", 1)))
MUT(narrowing_number_source, SET(hm, "source_dtype", json_integer(32)))
MUT(narrowing_undeclared, SET(hm, "source_dtype", json_string("uint32")))
MUT(narrowing_wrong_stored, {
    SET(hm, "source_dtype", json_string("uint32"));
    json_array_append_new(json_object_get(sm, "processing"),
                          json_pack("{s:s, s:b, s:s, s:s}", "operation", "exact_integer_narrowing",
                                    "changes_measurements", 0, "source_dtype", "uint32",
                                    "stored_dtype", "uint8"));
})
MUT(narrowing_wrong_source, {
    SET(hm, "source_dtype", json_string("uint32"));
    json_array_append_new(json_object_get(sm, "processing"),
                          json_pack("{s:s, s:b, s:s, s:s}", "operation", "exact_integer_narrowing",
                                    "changes_measurements", 0, "source_dtype", "int32",
                                    "stored_dtype", "uint16"));
})
MUT(narrowing_changes, {
    SET(hm, "source_dtype", json_string("uint32"));
    json_array_append_new(json_object_get(sm, "processing"),
                          json_pack("{s:s, s:b, s:s, s:s}", "operation", "exact_integer_narrowing",
                                    "changes_measurements", 1, "source_dtype", "uint32",
                                    "stored_dtype", "uint16"));
})
MUT(float_narrowing_undeclared, {
    SET(hm, "source_dtype", json_string("float64"));
    json_array_append_new(json_object_get(sm, "processing"),
                          json_pack("{s:s, s:b, s:s, s:s}", "operation", "exact_integer_narrowing",
                                    "changes_measurements", 0, "source_dtype", "float64",
                                    "stored_dtype", "float32"));
})

typedef struct rule_case {
    const char *name;
    int base;
    void (*mutate)(json_t *sm, json_t *hm);
    const char *dtype; /* NULL: the fixture's */
    qem_status expected;
    const char *what; /* the key path the message must name */
    const char *rule; /* the rule the message must state */
} rule_case;

#define E QEM_E_METADATA
static const rule_case cases[] = {
    /* schema */
    {"schema missing", 0, schema_missing, NULL, E, "scientific_metadata.schema", "missing or not a string"},
    {"schema number", 0, schema_number, NULL, E, "scientific_metadata.schema", "missing or not a string"},
    {"schema 3", 0, schema_3, NULL, QEM_E_UNSUPPORTED, "scientific-metadata/3", "update qem"},
    {"schema 10", 0, schema_10, NULL, QEM_E_UNSUPPORTED, "scientific-metadata/10", "newer than this qem"},
    {"schema 0", 0, schema_0, NULL, E, "scientific-metadata/0", "unknown scientific metadata schema"},
    {"schema 02", 0, schema_02, NULL, E, "scientific-metadata/02", "unknown scientific metadata schema"},
    {"schema 2.1", 0, schema_2_1, NULL, E, "scientific-metadata/2.1", "unknown scientific metadata schema"},
    {"schema 3x", 0, schema_3x, NULL, E, "scientific-metadata/3x", "unknown scientific metadata schema"},
    {"schema no major", 0, schema_empty_major, NULL, E, "scientific-metadata/'", "unknown scientific metadata schema"},
    {"schema other", 0, schema_other, NULL, E, "quantem.other/2", "unknown scientific metadata schema"},
    /* axes */
    {"axes missing", 0, axes_missing, NULL, E, "scientific_metadata.axes", "list of four axis objects"},
    {"axes object", 0, axes_object, NULL, E, "scientific_metadata.axes", "list of four axis objects"},
    {"axes three", 0, axes_three, NULL, E, "scientific_metadata.axes", "list of four axis objects"},
    {"axes five", 0, axes_five, NULL, E, "scientific_metadata.axes", "list of four axis objects"},
    {"axis not object", 0, axis_not_object, NULL, E, "axes[1]", "is not an object"},
    {"axis named y", 0, axis_name_y, NULL, E, "axes[0]", "must be named 'scan_row'"},
    {"axis name missing", 0, axis_name_missing, NULL, E, "axes[3]", "must be named 'detector_column'"},
    {"axis names swapped", 0, axis_names_swapped, NULL, E, "axes[0]", "must be named 'scan_row'"},
    {"axis size 9", 0, axis_size_9, NULL, E, "axes[2].size", "disagrees with the header shape 16"},
    {"axis size text", 0, axis_size_text, NULL, E, "axes[2].size", "disagrees with the header shape"},
    {"axis size real", 0, axis_size_real, NULL, E, "axes[2].size", "disagrees with the header shape"},
    {"axis size missing", 0, axis_size_missing, NULL, E, "axes[3].size", "disagrees with the header shape"},
    /* sections, retired names */
    {"electron_microscope list (portable)", 0, em_list, NULL, E, "electron_microscope", "must be an object of named quantities"},
    {"electron_microscope null", 0, em_null, NULL, E, "electron_microscope", "must be an object of named quantities"},
    {"calibration_overrides string", 1, ov_string, NULL, E, "calibration_overrides", "must be an object of named quantities"},
    {"retired pixel_size_y (portable)", 0, retired_pixel_y, NULL, E, "electron_microscope[\"scan_controller/regular_scan/pixel_size_y\"]", "retired x/y name"},
    {"retired reciprocal_pixel_size_x", 0, retired_recip_x, NULL, E, "electron_microscope[\"imaging_system/reciprocal_pixel_size_x\"]", "retired x/y name"},
    {"retired override pixel_size_x", 1, retired_ov_pixel_x, NULL, E, "calibration_overrides[\"scan_controller/regular_scan/pixel_size_x\"]", "retired x/y name"},
    {"retired override reciprocal_y", 1, retired_ov_recip_y, NULL, E, "calibration_overrides[\"imaging_system/reciprocal_pixel_size_y\"]", "retired x/y name"},
    /* axis sampling */
    {"sampling number", 0, sampling_number, NULL, E, "axes[0].sampling (scan_row)", "must be a quantity object"},
    {"sampling null", 0, sampling_null, NULL, E, "axes[0].sampling (scan_row)", "must be a quantity object"},
    {"sampling without provenance (portable)", 0, sampling_no_provenance, NULL, E, "axes[2].sampling (detector_row)", "lacks provenance"},
    {"sampling blank provenance", 0, sampling_blank_provenance, NULL, E, "axes[3].sampling", "lacks provenance"},
    {"sampling numeric provenance", 0, sampling_number_provenance, NULL, E, "axes[1].sampling", "lacks provenance"},
    {"boolean scan step (portable)", 0, sampling_bool, NULL, E, "axes[0].sampling", "value is a boolean"},
    {"sampling text value", 0, sampling_text_value, NULL, E, "axes[0].sampling", "value must be a number"},
    {"sampling without value", 0, sampling_no_value, NULL, E, "axes[1].sampling", "value must be a number"},
    {"sampling zero", 0, sampling_zero, NULL, E, "axes[2].sampling", "must be greater than zero"},
    {"sampling negative", 0, sampling_negative, NULL, E, "axes[3].sampling", "must be greater than zero"},
    {"scan unit m in schema 2 (portable)", 0, scan_unit_m, NULL, E, "axes[0].sampling", "require canonical microscopy units (angstrom)"},
    {"scan unit nm in schema 2", 0, scan_unit_nm, NULL, E, "axes[1].sampling", "require canonical microscopy units"},
    {"scan unit A-ring in schema 2", 0, scan_unit_sign, NULL, E, "axes[0].sampling", "require canonical microscopy units"},
    {"scan unit mrad", 0, scan_unit_mrad, NULL, E, "axes[0].sampling", "has unknown unit 'mrad'"},
    {"scan unit Angstrom", 0, scan_unit_case, NULL, E, "axes[1].sampling", "has unknown unit 'Angstrom'"},
    {"detector unit 1/nm in schema 2", 0, detector_unit_inv_nm, NULL, E, "axes[2].sampling", "require canonical microscopy units (mrad or 1/angstrom)"},
    {"detector unit 1/A-ring in schema 2", 0, detector_unit_inv_sign, NULL, E, "axes[3].sampling", "require canonical microscopy units"},
    {"detector unit rad in schema 2", 0, detector_unit_rad, NULL, E, "axes[2].sampling", "require canonical microscopy units"},
    {"detector unit angstrom", 0, detector_unit_angstrom, NULL, E, "axes[2].sampling", "has unknown unit 'angstrom'"},
    {"sampling unit missing", 0, sampling_unit_missing, NULL, E, "axes[2].sampling", "unit must be a non-empty string"},
    {"sampling unit empty", 0, sampling_unit_empty, NULL, E, "axes[3].sampling", "unit must be a non-empty string"},
    {"sampling unit number", 0, sampling_unit_number, NULL, E, "axes[3].sampling", "unit must be a non-empty string"},
    {"sampling evidence number", 0, sampling_evidence_number, NULL, E, "axes[0].sampling", "evidence must be a string"},
    /* electron_microscope quantities */
    {"voltage in V in schema 2", 0, voltage_in_v, NULL, E, "electron_microscope[\"" V_PATH "\"]", "require canonical microscopy units (kV)"},
    {"voltage in furlong", 0, voltage_furlong, NULL, E, "electron_microscope[\"" V_PATH "\"]", "has unknown unit 'furlong'"},
    {"voltage false", 0, voltage_false, NULL, E, "electron_microscope[\"" V_PATH "\"]", "value is a boolean"},
    {"voltage zero", 0, voltage_zero, NULL, E, "electron_microscope[\"" V_PATH "\"]", "must be greater than zero"},
    {"voltage without provenance", 0, voltage_no_provenance, NULL, E, "electron_microscope[\"" V_PATH "\"]", "lacks provenance"},
    {"semi-angle not object", 0, angle_not_object, NULL, E, "electron_microscope[\"" ANGLE_PATH "\"]", "must be a quantity object"},
    {"semi-angle in rad in schema 2", 0, angle_in_rad, NULL, E, "electron_microscope[\"" ANGLE_PATH "\"]", "require canonical microscopy units (mrad)"},
    {"beam energy in eV in schema 2", 0, beam_in_ev, NULL, E, "electron_microscope[\"" BEAM_PATH "\"]", "require canonical microscopy units (keV)"},
    {"beam energy in kV", 0, beam_in_kv, NULL, E, "electron_microscope[\"" BEAM_PATH "\"]", "has unknown unit 'kV'"},
    {"dwell in ms in schema 2", 0, dwell_in_ms, NULL, E, "electron_microscope[\"" DWELL_PATH "\"]", "require canonical microscopy units (us)"},
    {"dwell in s in schema 2", 0, dwell_in_s, NULL, E, "electron_microscope[\"" DWELL_PATH "\"]", "require canonical microscopy units (us)"},
    {"camera length in m in schema 2", 0, camera_in_m, NULL, E, "electron_microscope[\"" CAMERA_PATH "\"]", "require canonical microscopy units (mm)"},
    {"camera length in cm in schema 2", 0, camera_in_cm, NULL, E, "electron_microscope[\"" CAMERA_PATH "\"]", "require canonical microscopy units (mm)"},
    {"unknown quantity negative", 0, unknown_path_negative, NULL, E, "electron_microscope[\"lab/stage_tilt\"]", "must be greater than zero"},
    {"unknown quantity without provenance", 0, unknown_path_no_provenance, NULL, E, "electron_microscope[\"lab/stage_tilt\"]", "lacks provenance"},
    {"unknown quantity not object", 0, unknown_path_not_object, NULL, E, "electron_microscope[\"lab/stage_tilt\"]", "must be a quantity object"},
    {"unknown quantity without unit", 0, unknown_path_no_unit, NULL, E, "electron_microscope[\"lab/stage_tilt\"]", "unit must be a non-empty string"},
    {"reciprocal_pixel_size_* prefix in 1/nm", 0, reciprocal_prefix_inv_nm, NULL, E, "reciprocal_pixel_size_diagonal", "require canonical microscopy units (mrad or 1/angstrom)"},
    /* duplicates */
    {"conflicting scan step (portable)", 0, conflicting_scan_step, NULL, E, "electron_microscope[\"" ROW_PATH "\"]", "conflicts with axes[0].sampling"},
    {"duplicate without axis sampling", 0, duplicate_without_sampling, NULL, E, "electron_microscope[\"" ROW_PATH "\"]", "that axis has no sampling"},
    {"duplicate column without axis sampling", 0, duplicate_column_without_sampling, NULL, E, "electron_microscope[\"" COL_PATH "\"]", "that axis has no sampling"},
    {"duplicate unit differs", 0, duplicate_unit_differs, NULL, E, "electron_microscope[\"" RROW_PATH "\"]", "the unit differs"},
    {"detector duplicate without sampling", 0, duplicate_detector_missing, NULL, E, "electron_microscope[\"" RCOL_PATH "\"]", "that axis has no sampling"},
    {"duplicate beyond 1e-14", 0, duplicate_beyond_tolerance, NULL, E, "electron_microscope[\"" COL_PATH "\"]", "must agree within a relative 1e-14"},
    /* overrides */
    {"override unknown path", 1, ov_unknown_path, NULL, E, "calibration_overrides[\"lab/stage_tilt\"]", "is not an allowed override path"},
    {"override beam energy", 1, ov_beam_energy, NULL, E, "calibration_overrides[\"" BEAM_PATH "\"]", "is not an allowed override path"},
    {"override provenance other", 1, ov_provenance_other, NULL, E, "calibration_overrides[\"" V_PATH "\"]", "provenance must be exactly \"user_override\""},
    {"override provenance missing", 1, ov_provenance_missing, NULL, E, "calibration_overrides[\"" V_PATH "\"]", "provenance must be exactly \"user_override\""},
    {"override evidence missing", 1, ov_evidence_missing, NULL, E, "calibration_overrides[\"" ROW_PATH "\"]", "needs non-empty evidence"},
    {"override evidence empty", 1, ov_evidence_empty, NULL, E, "calibration_overrides[\"" COL_PATH "\"]", "needs non-empty evidence"},
    {"override evidence number", 1, ov_evidence_number, NULL, E, "calibration_overrides[\"" COL_PATH "\"]", "evidence must be a string"},
    {"override scan in m in schema 2", 1, ov_scan_in_m, NULL, E, "calibration_overrides[\"scan_controller/regular_scan/pixel_size_", "require canonical microscopy units (angstrom)"},
    {"override voltage in V in schema 2", 1, ov_voltage_in_v, NULL, E, "calibration_overrides[\"" V_PATH "\"]", "require canonical microscopy units (kV)"},
    {"override dwell in s in schema 2", 1, ov_dwell_in_s, NULL, E, "calibration_overrides[\"" DWELL_PATH "\"]", "require canonical microscopy units (us)"},
    {"override unknown unit", 1, ov_voltage_parsec, NULL, E, "calibration_overrides[\"" V_PATH "\"]", "has unknown unit 'parsec'"},
    {"override boolean value", 1, ov_value_true, NULL, E, "calibration_overrides[\"" V_PATH "\"]", "value is a boolean"},
    {"override negative value", 1, ov_value_negative, NULL, E, "calibration_overrides[\"" ROW_PATH "\"]", "must be greater than zero"},
    {"override not object", 1, ov_not_object, NULL, E, "calibration_overrides[\"" ANGLE_PATH "\"]", "must be a quantity object"},
    {"override scan below 1e-4 A", 1, ov_scan_too_small, NULL, E, "calibration_overrides[\"" ROW_PATH "\"]", "between 0.0001 and 10000 angstrom"},
    {"override scan above 1e4 A", 1, ov_scan_too_large, NULL, E, "calibration_overrides[\"" COL_PATH "\"]", "between 0.0001 and 10000 angstrom"},
    {"override column missing", 1, ov_column_missing, NULL, E, "calibration_overrides[\"" ROW_PATH "\"]", "needs both row and column: '" COL_PATH "' is missing"},
    {"override row missing", 1, ov_row_missing, NULL, E, "calibration_overrides[\"" COL_PATH "\"]", "needs both row and column: '" ROW_PATH "' is missing"},
    {"override reciprocal row only", 1, ov_reciprocal_row_only, NULL, E, "calibration_overrides[\"" RROW_PATH "\"]", "needs both row and column"},
    {"override pair units differ", 1, ov_reciprocal_units_differ, NULL, E, "calibration_overrides[\"" RROW_PATH "\"]", "row and column in the same unit"},
    /* source metadata */
    {"source_metadata string", 0, source_metadata_string, NULL, E, "scientific_metadata.source_metadata", "must be an object (possibly empty)"},
    {"source_metadata missing", 0, source_metadata_missing, NULL, E, "scientific_metadata.source_metadata", "must be an object (possibly empty)"},
    {"coverage deleted (portable)", 0, coverage_missing, NULL, E, "source_metadata_coverage", "must be one of reader-retained, exhaustive or unknown"},
    {"coverage other", 0, coverage_other, NULL, E, "source_metadata_coverage", "must be one of"},
    {"coverage number", 0, coverage_number, NULL, E, "source_metadata_coverage", "must be one of"},
    /* source documents */
    {"documents object", 0, docs_object, NULL, E, "source_documents", "must be a list"},
    {"documents null", 0, docs_null, NULL, E, "source_documents", "must be a list"},
    {"17 documents", 0, docs_17, NULL, E, "source_documents holds 17", "at most 16"},
    {"document not object", 0, doc_not_object, NULL, E, "source_documents[0]", "must be an object"},
    {"document filename missing", 0, doc_filename_missing, NULL, E, "source_documents[0].filename", "non-empty name without '/'"},
    {"document filename empty", 0, doc_filename_empty, NULL, E, "source_documents[0].filename", "non-empty name without '/'"},
    {"document filename slash", 0, doc_filename_slash, NULL, E, "source_documents[0].filename", "non-empty name without '/'"},
    {"document filename backslash", 0, doc_filename_backslash, NULL, E, "source_documents[0].filename", "non-empty name without '/'"},
    {"document filename number", 0, doc_filename_number, NULL, E, "source_documents[0].filename", "non-empty name without '/'"},
    {"document content number", 0, doc_content_number, NULL, E, "source_documents[0].content", "must be a string"},
    {"document content missing", 0, doc_content_missing, NULL, E, "source_documents[0].content", "must be a string"},
    {"documents over 4 MiB", 0, docs_oversized, NULL, E, "source_documents[1]", "exceed 4 MiB"},
    {"document sha256 wrong", 0, doc_sha_wrong, NULL, E, "source_documents[0].sha256", "does not match the SHA-256 of its content"},
    {"document sha256 uppercase", 0, doc_sha_upper, NULL, E, "source_documents[0].sha256", "does not match"},
    {"document sha256 missing", 0, doc_sha_missing, NULL, E, "source_documents[0].sha256", "does not match"},
    {"document text/plain", 0, doc_media_text, NULL, E, "source_documents[0].mediaType", "application/xml or application/json"},
    {"document mediaType missing", 0, doc_media_missing, NULL, E, "source_documents[0].mediaType", "application/xml or application/json"},
    {"XML DOCTYPE", 0, doc_xml_doctype, NULL, E, "source_documents[0]", "DOCTYPE or ENTITY"},
    {"XML doctype lower case", 0, doc_xml_doctype_lower, NULL, E, "source_documents[0]", "DOCTYPE or ENTITY"},
    {"XML EnTiTy mixed case", 0, doc_xml_entity_mixed, NULL, E, "source_documents[0]", "DOCTYPE or ENTITY"},
    {"XML malformed", 0, doc_xml_malformed, NULL, E, "source_documents[0]", "is not well-formed XML"},
    {"XML empty", 0, doc_xml_empty, NULL, E, "source_documents[0]", "is not well-formed XML"},
    {"XML two roots", 0, doc_xml_two_roots, NULL, E, "source_documents[0]", "is not well-formed XML"},
    {"JSON NaN", 0, doc_json_nan, NULL, E, "source_documents[0]", "is not valid JSON"},
    {"JSON Infinity", 0, doc_json_infinity, NULL, E, "source_documents[0]", "is not valid JSON"},
    {"JSON truncated", 0, doc_json_truncated, NULL, E, "source_documents[0]", "is not valid JSON"},
    {"JSON array", 0, doc_json_array, NULL, E, "source_documents[0]", "must be a JSON object"},
    {"JSON string", 0, doc_json_string, NULL, E, "source_documents[0]", "must be a JSON object"},
    /* processing */
    {"processing deleted (portable)", 0, processing_missing, NULL, E, "scientific_metadata.processing", "must be a non-empty list"},
    {"processing empty", 0, processing_empty, NULL, E, "scientific_metadata.processing", "must be a non-empty list"},
    {"processing object", 0, processing_object, NULL, E, "scientific_metadata.processing", "must be a non-empty list"},
    {"processing entry string", 0, processing_string_entry, NULL, E, "processing[0]", "must be an object"},
    {"processing without operation", 0, processing_no_operation, NULL, E, "processing[0]", "needs a non-empty string 'operation'"},
    {"processing empty operation", 0, processing_empty_operation, NULL, E, "processing[0]", "needs a non-empty string 'operation'"},
    {"processing numeric operation", 0, processing_number_operation, NULL, E, "processing[0]", "needs a non-empty string 'operation'"},
    {"processing without changes_measurements (portable)", 0, processing_no_flag, NULL, E, "processing[0] ('lossless_storage')", "needs a boolean 'changes_measurements'"},
    {"processing integer flag", 0, processing_int_flag, NULL, E, "processing[0]", "needs a boolean 'changes_measurements'"},
    {"processing text flag", 0, processing_text_flag, NULL, E, "processing[1] ('binning')", "needs a boolean 'changes_measurements'"},
    /* sample */
    {"sample list", 0, sample_list, NULL, E, "scientific_metadata.sample", "must be an object"},
    {"sample null", 0, sample_null, NULL, E, "scientific_metadata.sample", "must be an object"},
    {"sample without provenance", 0, sample_no_provenance, NULL, E, "scientific_metadata.sample", "lacks provenance"},
    {"sample blank provenance", 0, sample_blank_provenance, NULL, E, "scientific_metadata.sample", "lacks provenance"},
    {"sample name number", 0, sample_name_number, NULL, E, "sample.name", "must be a string"},
    {"sample id number", 0, sample_id_number, NULL, E, "sample.id", "must be a string"},
    {"sample description list", 0, sample_description_list, NULL, E, "sample.description", "must be a string"},
    {"sample orientation number", 0, sample_orientation_number, NULL, E, "sample.orientation_relationship", "must be a string"},
    {"sample evidence number", 0, sample_evidence_number, NULL, E, "sample.evidence", "must be a string"},
    {"sample geometry other", 0, sample_geometry_other, NULL, E, "sample.geometry", "cross-section or plan-view"},
    {"sample geometry number", 0, sample_geometry_number, NULL, E, "sample.geometry", "cross-section or plan-view"},
    {"growth direction zero", 0, sample_growth_zero, NULL, E, "sample.growth_direction", "3 or 4 integers, not all zero"},
    {"growth direction two", 0, sample_growth_two, NULL, E, "sample.growth_direction", "3 or 4 integers"},
    {"growth direction five", 0, sample_growth_five, NULL, E, "sample.growth_direction", "3 or 4 integers"},
    {"growth direction real", 0, sample_growth_real, NULL, E, "sample.growth_direction", "3 or 4 integers"},
    {"growth direction boolean", 0, sample_growth_bool, NULL, E, "sample.growth_direction", "3 or 4 integers"},
    {"components list", 0, sample_components_list, NULL, E, "sample.components", "must map non-empty labels"},
    {"components empty label", 0, sample_components_empty_label, NULL, E, "sample.components", "must map non-empty labels"},
    {"component not object", 0, component_not_object, NULL, E, "components[\"STO\"]", "must be an object"},
    {"component formula number", 0, component_formula_number, NULL, E, "components[\"BTO\"].chemical_formula", "must be a string"},
    {"component role other", 0, component_role_other, NULL, E, "components[\"BTO\"].role", "film, substrate, support, particle"},
    {"component zone axis zero", 0, component_zone_zero, NULL, E, "components[\"STO\"].zone_axis", "3 or 4 integers, not all zero"},
    {"component zone axis text", 0, component_zone_text, NULL, E, "components[\"STO\"].zone_axis", "3 or 4 integers"},
    {"component cif string", 0, component_cif_string, NULL, E, "components[\"BTO\"].cif", "string 'document' and 'sha256'"},
    {"component cif without sha256", 0, component_cif_no_sha, NULL, E, "components[\"BTO\"].cif", "string 'document' and 'sha256'"},
    {"component cif document number", 0, component_cif_document_number, NULL, E, "components[\"BTO\"].cif", "string 'document' and 'sha256'"},
    {"thickness estimates object", 0, component_estimates_object, NULL, E, "components[\"BTO\"].thickness_estimates", "must be a list"},
    {"estimate not object", 0, estimate_not_object, NULL, E, "thickness_estimates[0]", "must be an object"},
    {"estimate method other", 0, estimate_method_other, NULL, E, "thickness_estimates[0].method", "must be one of diffraction_ridge"},
    {"estimate method missing", 0, estimate_method_missing, NULL, E, "thickness_estimates[1].method", "must be one of"},
    {"estimate unit nm", 0, estimate_unit_nm, NULL, E, "thickness_estimates[0]", "positive value with unit \"angstrom\""},
    {"estimate value zero", 0, estimate_value_zero, NULL, E, "thickness_estimates[0]", "positive value with unit"},
    {"estimate value boolean", 0, estimate_value_bool, NULL, E, "thickness_estimates[0]", "positive value with unit"},
    {"estimate value missing", 0, estimate_value_missing, NULL, E, "thickness_estimates[2]", "positive value with unit"},
    {"estimate uncertainty negative", 0, estimate_uncertainty_negative, NULL, E, "thickness_estimates[0].uncertainty", "must be a positive number"},
    {"estimate range reversed", 0, estimate_range_reversed, NULL, E, "thickness_estimates[0].range", "[low, high]"},
    {"estimate range zero", 0, estimate_range_zero, NULL, E, "thickness_estimates[0].range", "[low, high]"},
    {"estimate range one value", 0, estimate_range_one, NULL, E, "thickness_estimates[0].range", "[low, high]"},
    {"estimate range text", 0, estimate_range_text, NULL, E, "thickness_estimates[0].range", "[low, high]"},
    {"estimate region unknown label", 0, estimate_region_unknown_label, NULL, E, "thickness_estimates[1].region 'LAO'", "is not a component label"},
    {"estimate region rows reversed", 0, estimate_region_rows_reversed, NULL, E, "thickness_estimates[0].region", "{rows:[a,b], cols:[c,d]}"},
    {"estimate region cols equal", 0, estimate_region_cols_equal, NULL, E, "thickness_estimates[0].region", "{rows:[a,b], cols:[c,d]}"},
    {"estimate region rows only", 0, estimate_region_rows_only, NULL, E, "thickness_estimates[0].region", "{rows:[a,b], cols:[c,d]}"},
    {"estimate region extra key", 0, estimate_region_extra_key, NULL, E, "thickness_estimates[0].region", "{rows:[a,b], cols:[c,d]}"},
    {"estimate point negative", 0, estimate_point_negative, NULL, E, "thickness_estimates[2].region", "{point:[row, col]}"},
    {"estimate point extra key", 0, estimate_point_extra, NULL, E, "thickness_estimates[2].region", "{point:[row, col]}"},
    {"estimate point real", 0, estimate_point_real, NULL, E, "thickness_estimates[2].region", "{point:[row, col]}"},
    {"estimate region number", 0, estimate_region_number, NULL, E, "thickness_estimates[2].region", "must be a component label"},
    {"estimate reference number", 0, estimate_reference_number, NULL, E, "thickness_estimates[0].reference", "must be a string"},
    {"estimate date number", 0, estimate_date_number, NULL, E, "thickness_estimates[0].date", "must be a string"},
    {"estimate preferred text", 0, estimate_preferred_text, NULL, E, "thickness_estimates[1].preferred", "must be true or false"},
    {"two preferred estimates", 0, estimate_two_preferred, NULL, E, "components[\"BTO\"]", "at most one preferred thickness estimate"},
    {"components_in_view unknown", 0, sample_in_view_unknown, NULL, E, "sample.components_in_view", "must list component labels"},
    {"components_in_view string", 0, sample_in_view_string, NULL, E, "sample.components_in_view", "must list component labels"},
    {"components_in_view number", 0, sample_in_view_number, NULL, E, "sample.components_in_view", "must list component labels"},
    /* declared processing */
    {"hot pixels replaced, undeclared", 0, hot_pixels_undeclared, NULL, E, "metadata.hot_pixel_correction.applied", "does not declare flagged_pixel_replacement"},
    {"hot pixels declared as unchanged", 0, hot_pixels_declared_unchanged, NULL, E, "metadata.hot_pixel_correction.applied", "flagged_pixel_replacement with changes_measurements true"},
    {"hot pixels: last record wins", 0, hot_pixels_last_record_wins, NULL, E, "metadata.hot_pixel_correction.applied", "flagged_pixel_replacement"},
    {"markers as a real, undeclared", 0, markers_real, NULL, E, "flagged_markers_stored_as_zero", "flagged_marker_zeroing"},
    {"markers as a list, undeclared", 0, markers_list, NULL, E, "flagged_markers_stored_as_zero", "flagged_marker_zeroing"},
    {"hot pixels applied as an object", 0, hot_pixels_applied_object, NULL, E, "metadata.hot_pixel_correction.applied", "flagged_pixel_replacement"},
    {"source dtype not a string", 0, narrowing_number_source, NULL, E, "from (not a string)", "matching exact_integer_narrowing"},
    {"markers zeroed, undeclared", 0, markers_undeclared, NULL, E, "metadata.flagged_markers_stored_as_zero", "does not declare flagged_marker_zeroing"},
    {"narrowing undeclared", 0, narrowing_undeclared, NULL, E, "stored as uint16 from uint32", "does not declare a matching exact_integer_narrowing"},
    {"narrowing wrong stored dtype", 0, narrowing_wrong_stored, NULL, E, "stored as uint16 from uint32", "matching exact_integer_narrowing"},
    {"narrowing wrong source dtype", 0, narrowing_wrong_source, NULL, E, "stored as uint16 from uint32", "matching exact_integer_narrowing"},
    {"narrowing declared as changing", 0, narrowing_changes, NULL, E, "stored as uint16 from uint32", "matching exact_integer_narrowing"},
    {"float narrowing undeclared", 0, float_narrowing_undeclared, "float32", E, "stored as float32 from float64", "matching exact_float_narrowing"},
};
#undef E

static int message_has(const qem_error *e, const char *text)
{
    return !text || strstr(e->message, text) != NULL;
}

/* Validates `sm` against base `b` and checks status and message. */
static void expect(const char *name, const json_t *sm, const json_t *hm, const base *b,
                   const char *dtype, qem_status expected, const char *what, const char *rule)
{
    qem_error e = {0};
    qem_status st = qem_metadata_validate(sm, hm, b->shape, dtype ? dtype : b->dtype, &e);
    test_checks++;
    if (st != expected || (expected != QEM_OK && (!message_has(&e, what) ||
                                                   !message_has(&e, rule)))) {
        test_failures++;
        fprintf(stderr, "case '%s': status %d (expected %d); message: %s\n  wanted: [%s] [%s]\n",
                name, (int)st, (int)expected, e.message, what ? what : "", rule ? rule : "");
    }
}

static void run_rule_cases(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const rule_case *c = &cases[i];
        const base *b = &bases[c->base];
        json_t *sm = json_deep_copy(b->sm);
        json_t *hm = json_deep_copy(b->hm);
        c->mutate(sm, hm);
        expect(c->name, sm, hm, b, c->dtype, c->expected, c->what, c->rule);
        json_decref(sm);
        json_decref(hm);
    }
    /* Not an object at all. */
    expect("scientific_metadata missing", NULL, NULL, &bases[0], NULL, QEM_E_METADATA,
           "scientific_metadata", "missing or not an object");
    json_t *list = json_array();
    expect("scientific_metadata list", list, NULL, &bases[0], NULL, QEM_E_METADATA,
           "scientific_metadata", "missing or not an object");
    json_decref(list);
    /* A shape the axes do not match. */
    uint64_t other[4] = {3, 4, 16, 17};
    qem_error e = {0};
    CHECK_STATUS(qem_metadata_validate(bases[0].sm, bases[0].hm, other, "uint16", &e),
                 QEM_E_METADATA, &e);
    CHECK(strstr(e.message, "axes[3].size") && strstr(e.message, "header shape 17"));
}

/* --- accepted variants -------------------------------------------------------------- */

static void expect_ok(const char *name, const json_t *sm, const json_t *hm, const base *b,
                      const char *dtype)
{
    expect(name, sm, hm, b, dtype, QEM_OK, NULL, NULL);
}

MUT(ok_unknown_keys, {
    SET(sm, "extensions", json_pack("{s:{s:i}}", "org.example", "level", 3));
    SET(sm, "x-private", json_string("kept"));
    SET(sm, "source_format", json_string("dectris-arina-hdf5"));
    SET(axis(sm, 0), "units_note", json_string("ignored"));
    SET(sampling(sm, 0), "evidence", json_string("master.h5"));
    SET(sampling(sm, 0), "uncertainty", json_real(0.01));
    SET(emq(sm, V_PATH), "note", json_string("HT"));
    SET(em(sm), "lab/stage_tilt", quantity(3.5, "deg", "microscope log"));
    SET(em(sm), "lab/odd", quantity(1, "furlong per fortnight", "log"));
    SET(processing(sm, 0), "tool", json_string("qem"));
    json_array_append_new(json_object_get(sm, "processing"),
                          json_pack("{s:s, s:b, s:s}", "operation", "binning",
                                    "changes_measurements", 1, "note", "2x2"));
    SET(json_object_get(sm, "source_metadata"), "anything", json_pack("[i, s]", 1, "two"));
})
MUT(ok_documents, {
    add_doc(sm, "master.xml", "application/xml",
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><m a=\"1\"><v u=\"kV\">300</v>"
            "<t>\xc3\x85ngstr\xc3\xb6m</t></m>");
    add_doc(sm, "session.json", "application/json",
            "{\"voltage\": 300, \"big\": 123456789012345678901234567890, \"x\": [1e300]}");
    SET(doc0(sm), "note", json_string("extra fields are kept"));
})
MUT(ok_16_documents, {
    for (int i = 0; i < 16; i++)
        add_doc(sm, "a.json", "application/json", "{}");
})
MUT(ok_4_mib, {
    size_t n = (size_t)4 << 20;
    char *text = malloc(n + 1);
    memset(text, ' ', n);
    text[0] = '{';
    text[n - 1] = '}';
    text[n] = '\0';
    add_doc(sm, "a.json", "application/json", text);
    free(text);
})
MUT(ok_sample, with_sample(sm))
MUT(ok_sample_minimal, SET(sm, "sample", json_pack("{s:s}", "provenance", "user")))
MUT(ok_within_tolerance, SET(emq(sm, COL_PATH), "value", json_real(0.25 * (1 + 5e-15))))
MUT(ok_reciprocal_duplicate, SET(em(sm), RROW_PATH, quantity(0.8, "mrad", "source_metadata")))
MUT(ok_canonical_quantities, {
    SET(em(sm), BEAM_PATH, quantity(300, "keV", "source_metadata"));
    SET(em(sm), DWELL_PATH, quantity(1.5, "us", "source_metadata"));
    SET(em(sm), CAMERA_PATH, quantity(120, "mm", "source_metadata"));
    SET(sampling(sm, 2), "unit", json_string("1/angstrom"));
    SET(sampling(sm, 3), "unit", json_string("1/angstrom"));
})
MUT(ok_override_bounds, {
    SET(ov(sm), ROW_PATH, override_q(1e-4, "angstrom"));
    SET(ov(sm), COL_PATH, override_q(1e4, "angstrom"));
    SET(ov(sm), RROW_PATH, override_q(0.1, "1/angstrom"));
    SET(ov(sm), RCOL_PATH, override_q(0.2, "1/angstrom"));
    SET(ov(sm), ANGLE_PATH, override_q(20, "mrad"));
    SET(ov(sm), DWELL_PATH, override_q(2, "us"));
    SET(ov(sm), CAMERA_PATH, override_q(250, "mm"));
})
MUT(ok_no_optional_sections, {
    DEL(sm, "electron_microscope");
    DEL(sm, "calibration_overrides");
    DEL(sm, "source_documents");
    DEL(sm, "source_format");
    for (size_t i = 0; i < 4; i++)
        DEL(axis(sm, i), "sampling");
})
MUT(ok_coverage_values, SET(sm, "source_metadata_coverage", json_string("exhaustive")))
MUT(ok_hot_pixels_declared, {
    SET(hm, "hot_pixel_correction", json_pack("{s:b}", "applied", 1));
    json_array_append_new(json_object_get(sm, "processing"),
                          json_pack("{s:s, s:b, s:s, s:i}", "operation",
                                    "flagged_pixel_replacement", "changes_measurements", 1,
                                    "method", "median", "pixel_count", 3));
})
MUT(ok_hot_pixels_not_applied, {
    SET(hm, "hot_pixel_correction", json_pack("{s:i, s:s}", "applied", 0, "method", "none"));
    SET(hm, "flagged_markers_stored_as_zero", json_integer(0));
    SET(hm, "source_dtype", json_string("uint16"));
})
MUT(ok_markers_declared, {
    SET(hm, "flagged_markers_stored_as_zero", json_integer(4096));
    SET(hm, "source_dtype", json_string("uint32"));
    json_array_append_new(json_object_get(sm, "processing"),
                          json_pack("{s:s, s:b, s:s, s:s}", "operation", "exact_integer_narrowing",
                                    "changes_measurements", 0, "source_dtype", "uint32",
                                    "stored_dtype", "uint16"));
    json_array_append_new(json_object_get(sm, "processing"),
                          json_pack("{s:s, s:b, s:i}", "operation", "flagged_marker_zeroing",
                                    "changes_measurements", 0, "value_count", 4096));
})
MUT(ok_float_narrowing, {
    SET(hm, "source_dtype", json_string("float64"));
    json_array_append_new(json_object_get(sm, "processing"),
                          json_pack("{s:s, s:b, s:s, s:s}", "operation", "exact_float_narrowing",
                                    "changes_measurements", 0, "source_dtype", "float64",
                                    "stored_dtype", "float32"));
})
MUT(ok_metadata_not_object, json_object_clear(hm))
MUT(ok_flags_falsy_1, {
    SET(hm, "hot_pixel_correction", json_pack("{s:f}", "applied", 0.0));
    SET(hm, "flagged_markers_stored_as_zero", json_array());
    SET(hm, "source_dtype", json_string(""));
})
MUT(ok_flags_falsy_2, {
    SET(hm, "hot_pixel_correction", json_pack("{s:{}}", "applied"));
    SET(hm, "flagged_markers_stored_as_zero", json_null());
    SET(hm, "source_dtype", json_null());
})
MUT(ok_flags_falsy_3, {
    SET(hm, "hot_pixel_correction", json_true()); /* not an object: no record to check */
    SET(hm, "flagged_markers_stored_as_zero", json_false());
    SET(hm, "source_dtype", json_false());
})
MUT(ok_flags_falsy_4, {
    SET(hm, "hot_pixel_correction", json_pack("{s:n}", "applied"));
    SET(hm, "flagged_markers_stored_as_zero", json_object());
})
MUT(ok_sample_nulls, {
    json_t *s = with_sample(sm);
    SET(s, "components_in_view", json_null());
    SET(component(sm, "BTO"), "cif", json_null());
    SET(estimate(sm, 0), "range", json_null());
    SET(estimate(sm, 0), "region", json_null());
    DEL(component(sm, "STO"), "zone_axis");
})

static void run_accepted(void)
{
    static const struct {
        const char *name;
        int base;
        void (*mutate)(json_t *, json_t *);
        const char *dtype;
    } ok[] = {
        {"unknown optional keys", 0, ok_unknown_keys, NULL},
        {"valid XML and JSON documents", 0, ok_documents, NULL},
        {"16 documents", 0, ok_16_documents, NULL},
        {"exactly 4 MiB of documents", 0, ok_4_mib, NULL},
        {"valid sample", 0, ok_sample, NULL},
        {"minimal sample", 0, ok_sample_minimal, NULL},
        {"duplicate within 1e-14", 0, ok_within_tolerance, NULL},
        {"detector duplicate agrees", 0, ok_reciprocal_duplicate, NULL},
        {"canonical quantities", 0, ok_canonical_quantities, NULL},
        {"override bounds and all paths", 1, ok_override_bounds, NULL},
        {"no optional sections", 0, ok_no_optional_sections, NULL},
        {"coverage exhaustive", 0, ok_coverage_values, NULL},
        {"hot pixels declared", 0, ok_hot_pixels_declared, NULL},
        {"flags that are not truthy", 0, ok_hot_pixels_not_applied, NULL},
        {"narrowing and markers declared", 0, ok_markers_declared, NULL},
        {"float narrowing declared", 0, ok_float_narrowing, "float32"},
        {"empty header metadata", 0, ok_metadata_not_object, NULL},
        {"falsy flags (real, list, empty text)", 0, ok_flags_falsy_1, NULL},
        {"falsy flags (object, null)", 0, ok_flags_falsy_2, NULL},
        {"falsy flags (false, correction not an object)", 0, ok_flags_falsy_3, NULL},
        {"falsy flags (null, empty object)", 0, ok_flags_falsy_4, NULL},
        {"sample with null optional fields", 0, ok_sample_nulls, NULL},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        const base *b = &bases[ok[i].base];
        json_t *sm = json_deep_copy(b->sm);
        json_t *hm = json_deep_copy(b->hm);
        ok[i].mutate(sm, hm);
        json_t *before = json_deep_copy(sm);
        expect_ok(ok[i].name, sm, hm, b, ok[i].dtype);
        CHECK(json_equal(before, sm)); /* validation never converts or drops anything */
        json_decref(before);
        json_decref(sm);
        json_decref(hm);
    }
    /* No header metadata object: the cross-checks have nothing to check. */
    expect_ok("header metadata absent", bases[0].sm, NULL, &bases[0], NULL);
    json_t *list = json_pack("[s]", "source_dtype");
    expect_ok("header metadata a list", bases[0].sm, list, &bases[0], NULL);
    json_decref(list);
}

/* Every scientific_metadata object in an authentic upstream fixture header. */
static void run_fixtures(void)
{
    static const char *const folders[] = {"qem", "qem/corrupt"};
    int validated = 0;
    for (size_t f = 0; f < 2; f++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", fixture_path(folders[f]));
        DIR *d = opendir(dir);
        CHECK(d != NULL);
        struct dirent *ent;
        while (d && (ent = readdir(d)) != NULL) {
            size_t n = strlen(ent->d_name);
            if (n < 5 || strcmp(ent->d_name + n - 4, ".qem") != 0)
                continue;
            char path[4352];
            snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
            json_t *header = load_header(path);
            uint64_t shape[4];
            if (!header || !header_shape(header, shape)) {
                json_decref(header); /* a corrupt-envelope fixture */
                continue;
            }
            qem_error e = {0};
            const json_t *dtype = json_object_get(header, "dtype");
            qem_status st = qem_metadata_validate(json_object_get(header, "scientific_metadata"),
                                                  json_object_get(header, "metadata"), shape,
                                                  json_string_value(dtype), &e);
            test_checks++;
            if (st != QEM_OK) {
                test_failures++;
                fprintf(stderr, "fixture %s: %s\n", path, e.message);
            }
            validated++;
            json_decref(header);
        }
        if (d)
            closedir(d);
    }
    /* 5 fixtures plus the corrupt ones whose header is intact. */
    CHECK(validated >= 8);
}

/* --- schema 1 ---------------------------------------------------------------------- */

static const char *const schema1_text =
    "{\"schema\": \"quantem.scientific-metadata/1\","
    " \"axes\": ["
    "  {\"name\": \"scan_row\", \"size\": 3,"
    "   \"sampling\": {\"value\": 5e-11, \"unit\": \"m\", \"provenance\": \"source_metadata\"}},"
    "  {\"name\": \"scan_column\", \"size\": 4,"
    "   \"sampling\": {\"value\": 0.025, \"unit\": \"nm\", \"provenance\": \"source_metadata\"}},"
    "  {\"name\": \"detector_row\", \"size\": 16,"
    "   \"sampling\": {\"value\": 0.0008, \"unit\": \"rad\", \"provenance\": \"source_metadata\"}},"
    "  {\"name\": \"detector_column\", \"size\": 16,"
    "   \"sampling\": {\"value\": 0.0008, \"unit\": \"rad\", \"provenance\": \"source_metadata\"}}],"
    " \"electron_microscope\": {"
    "  \"electron_source/accelerating_voltage\": {\"value\": 300000, \"unit\": \"V\", \"provenance\": \"s\"},"
    "  \"electron_source/beam_energy\": {\"value\": 300000, \"unit\": \"eV\", \"provenance\": \"s\"},"
    "  \"illumination_system/semi_convergence_angle\": {\"value\": 0.0214, \"unit\": \"rad\", \"provenance\": \"s\"},"
    "  \"scan_controller/regular_scan/dwell_time\": {\"value\": 0.001, \"unit\": \"ms\", \"provenance\": \"s\"},"
    "  \"imaging_system/camera_length\": {\"value\": 0.5, \"unit\": \"m\", \"provenance\": \"s\"},"
    "  \"scan_controller/regular_scan/pixel_size_row\": {\"value\": 0.7, \"unit\": \"\xc3\x85\", \"provenance\": \"s\"},"
    "  \"imaging_system/reciprocal_pixel_size_row\": {\"value\": 2, \"unit\": \"1/nm\", \"provenance\": \"s\"}},"
    " \"calibration_overrides\": {},"
    " \"source_metadata\": {}, \"source_metadata_coverage\": \"unknown\","
    " \"processing\": [{\"operation\": \"lossless_storage\", \"changes_measurements\": false}]}";

static const char *const schema1_overrides_text =
    "{\"electron_source/accelerating_voltage\": {\"value\": 200000, \"unit\": \"V\","
    "   \"provenance\": \"user_override\", \"evidence\": \"HT\"},"
    " \"illumination_system/semi_convergence_angle\": {\"value\": 20, \"unit\": \"mrad\","
    "   \"provenance\": \"user_override\", \"evidence\": \"aperture\"},"
    " \"scan_controller/regular_scan/dwell_time\": {\"value\": 2e-6, \"unit\": \"s\","
    "   \"provenance\": \"user_override\", \"evidence\": \"log\"},"
    " \"imaging_system/camera_length\": {\"value\": 0.25, \"unit\": \"m\","
    "   \"provenance\": \"user_override\", \"evidence\": \"log\"},"
    " \"scan_controller/regular_scan/pixel_size_row\": {\"value\": 2e-10, \"unit\": \"m\","
    "   \"provenance\": \"user_override\", \"evidence\": \"grating\"},"
    " \"scan_controller/regular_scan/pixel_size_column\": {\"value\": 3e-10, \"unit\": \"m\","
    "   \"provenance\": \"user_override\", \"evidence\": \"grating\"},"
    " \"imaging_system/reciprocal_pixel_size_row\": {\"value\": 2, \"unit\": \"1/nm\","
    "   \"provenance\": \"user_override\", \"evidence\": \"Au rings\"},"
    " \"imaging_system/reciprocal_pixel_size_column\": {\"value\": 2, \"unit\": \"1/nm\","
    "   \"provenance\": \"user_override\", \"evidence\": \"Au rings\"}}";

static int near(double a, double b)
{
    return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b));
}

#define CHECK_Q(q, v, u, src)                                                                      \
    do {                                                                                           \
        CHECK(near((q).value, (v)));                                                               \
        CHECK(strcmp((q).unit, (u)) == 0);                                                         \
        CHECK((q).source == (src));                                                                \
    } while (0)
#define CHECK_ABSENT(q)                                                                            \
    do {                                                                                           \
        CHECK((q).source == QEM_CALIBRATION_ABSENT);                                               \
        CHECK((q).value == 0);                                                                     \
        CHECK((q).unit[0] == '\0');                                                                \
    } while (0)

static void run_schema1(void)
{
    const base *b = &bases[0];
    json_t *sm = json_loads(schema1_text, 0, NULL);
    CHECK(sm != NULL);
    json_t *before = json_deep_copy(sm);
    /* Source units validate in schema 1, and the duplicate rule is schema 2's
     * (pixel_size_row 0.7 A against axis 0.5 A). */
    expect_ok("schema 1 with source units", sm, NULL, b, NULL);
    CHECK(json_equal(before, sm));
    qem_calibration cal = {.struct_size = sizeof cal};
    qem_metadata_calibration(sm, &cal);
    CHECK_Q(cal.scan_step[0], 0.5, "angstrom", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.scan_step[1], 0.25, "angstrom", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.detector_step[0], 0.8, "mrad", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.detector_step[1], 0.8, "mrad", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.voltage, 300, "kV", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.semiangle, 21.4, "mrad", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.dwell, 1, "us", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.camera_length, 500, "mm", QEM_CALIBRATION_RECORDED);

    /* Schema-1 overrides are stored in calculation units. */
    json_object_set_new(sm, "calibration_overrides", json_loads(schema1_overrides_text, 0, NULL));
    expect_ok("schema 1 overrides in calculation units", sm, NULL, b, NULL);
    qem_metadata_calibration(sm, &cal);
    CHECK_Q(cal.scan_step[0], 2, "angstrom", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.scan_step[1], 3, "angstrom", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.detector_step[0], 0.2, "1/angstrom", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.detector_step[1], 0.2, "1/angstrom", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.voltage, 200, "kV", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.semiangle, 20, "mrad", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.dwell, 2, "us", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.camera_length, 250, "mm", QEM_CALIBRATION_OVERRIDE);

    /* Schema-1 rejections. */
    json_t *c = json_deep_copy(sm);
    json_object_set_new(ovq(c, V_PATH), "unit", json_string("kV"));
    json_object_set_new(ovq(c, V_PATH), "value", json_integer(200));
    expect("schema 1 override in kV", c, NULL, b, NULL, QEM_E_METADATA,
           "calibration_overrides[\"" V_PATH "\"]", "schema-1 calibration overrides use calculation units (V)");
    json_decref(c);
    c = json_deep_copy(sm);
    json_object_set_new(ovq(c, ROW_PATH), "unit", json_string("angstrom"));
    json_object_set_new(ovq(c, ROW_PATH), "value", json_integer(2));
    json_object_set_new(ovq(c, COL_PATH), "unit", json_string("angstrom"));
    json_object_set_new(ovq(c, COL_PATH), "value", json_integer(3));
    expect("schema 1 scan override in angstrom", c, NULL, b, NULL, QEM_E_METADATA,
           "scan_controller/regular_scan/pixel_size_", "use calculation units (m)");
    json_decref(c);
    c = json_deep_copy(sm);
    json_object_set_new(ovq(c, ROW_PATH), "value", json_real(1e-15));
    expect("schema 1 scan override below 1e-14 m", c, NULL, b, NULL, QEM_E_METADATA,
           "calibration_overrides[\"" ROW_PATH "\"]", "between 0.0001 and 10000 angstrom");
    json_decref(c);
    c = json_deep_copy(sm);
    json_object_set_new(ovq(c, ROW_PATH), "value", json_real(1e-14));
    json_object_set_new(ovq(c, COL_PATH), "value", json_real(1e-6));
    expect_ok("schema 1 scan override bounds in metres", c, NULL, b, NULL);
    json_object_set_new(ovq(c, COL_PATH), "value", json_real(1.5e-6));
    expect("schema 1 scan override above 1e-6 m", c, NULL, b, NULL, QEM_E_METADATA,
           "calibration_overrides[\"" COL_PATH "\"]", "between 0.0001 and 10000 angstrom");
    json_decref(c);
    c = json_deep_copy(sm);
    json_object_set_new(ovq(c, RROW_PATH), "unit", json_string("1/angstrom"));
    json_object_set_new(ovq(c, RROW_PATH), "value", json_real(0.2));
    expect("schema 1 detector override in 1/angstrom", c, NULL, b, NULL, QEM_E_METADATA,
           "calibration_overrides[\"" RROW_PATH "\"]", "use calculation units (mrad, 1/nm or 1/");
    json_decref(c);
    c = json_deep_copy(sm);
    json_object_set_new(ovq(c, RCOL_PATH), "unit", json_string("mrad"));
    expect("schema 1 override pair units differ", c, NULL, b, NULL, QEM_E_METADATA,
           "calibration_overrides[\"" RROW_PATH "\"]", "row and column in the same unit");
    json_decref(c);
    c = json_deep_copy(sm);
    json_object_set_new(emq(c, DWELL_PATH), "unit", json_string("minute"));
    expect("schema 1 unknown unit", c, NULL, b, NULL, QEM_E_METADATA,
           "electron_microscope[\"" DWELL_PATH "\"]", "has unknown unit 'minute'");
    json_decref(c);
    c = json_deep_copy(sm);
    json_object_set_new(sampling(c, 0), "value", json_real(1e300));
    expect("schema 1 value overflows once converted", c, NULL, b, NULL, QEM_E_METADATA,
           "axes[0].sampling", "is not finite once converted to angstrom");
    json_decref(c);
    c = json_deep_copy(sm);
    json_object_set_new(em(c), "scan_controller/regular_scan/pixel_size_x",
                        quantity(5e-11, "m", "s"));
    expect("schema 1 retired name", c, NULL, b, NULL, QEM_E_METADATA, "pixel_size_x",
           "retired x/y name");
    json_decref(c);
    json_decref(before);
    json_decref(sm);
}

/* --- calibration extraction ------------------------------------------------------------ */

static void run_calibration(void)
{
    qem_calibration cal = {.struct_size = sizeof cal};
    /* u16_dense_highdose: recorded values only. */
    qem_metadata_calibration(bases[0].sm, &cal);
    CHECK_Q(cal.scan_step[0], 0.5, "angstrom", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.scan_step[1], 0.25, "angstrom", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.detector_step[0], 0.8, "mrad", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.detector_step[1], 0.8, "mrad", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.voltage, 300, "kV", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.semiangle, 21.4, "mrad", QEM_CALIBRATION_RECORDED);
    CHECK_ABSENT(cal.dwell);
    CHECK_ABSENT(cal.camera_length);

    /* u16_nonsquare_masked: overrides, in canonical units (the header's
     * metadata keeps them in calculation units; those are never read). */
    qem_metadata_calibration(bases[1].sm, &cal);
    CHECK_Q(cal.scan_step[0], 2, "angstrom", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.scan_step[1], 3, "angstrom", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.voltage, 200, "kV", QEM_CALIBRATION_OVERRIDE);
    CHECK_ABSENT(cal.detector_step[0]);
    CHECK_ABSENT(cal.detector_step[1]);
    CHECK_ABSENT(cal.semiangle);
    CHECK_ABSENT(cal.dwell);
    CHECK_ABSENT(cal.camera_length);

    /* An override takes precedence over a record without replacing it. */
    json_t *sm = json_deep_copy(bases[0].sm);
    json_object_set_new(ov(sm), V_PATH, override_q(250, "kV"));
    json_object_set_new(ov(sm), RROW_PATH, override_q(0.05, "1/angstrom"));
    json_object_set_new(ov(sm), RCOL_PATH, override_q(0.06, "1/angstrom"));
    expect_ok("overrides over records", sm, bases[0].hm, &bases[0], NULL);
    qem_metadata_calibration(sm, &cal);
    CHECK_Q(cal.voltage, 250, "kV", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.detector_step[0], 0.05, "1/angstrom", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.detector_step[1], 0.06, "1/angstrom", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.scan_step[0], 0.5, "angstrom", QEM_CALIBRATION_RECORDED);
    CHECK(json_number_value(json_object_get(emq(sm, V_PATH), "value")) == 300);
    json_decref(sm);

    /* Without axis sampling, the electron_microscope pixel sizes are used. */
    sm = json_deep_copy(bases[0].sm);
    for (size_t i = 0; i < 4; i++)
        json_object_del(axis(sm, i), "sampling");
    json_object_set_new(em(sm), RROW_PATH, quantity(0.07, "1/angstrom", "s"));
    json_object_set_new(em(sm), RCOL_PATH, quantity(0.08, "1/angstrom", "s"));
    qem_metadata_calibration(sm, &cal);
    CHECK_Q(cal.scan_step[0], 0.5, "angstrom", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.scan_step[1], 0.25, "angstrom", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.detector_step[0], 0.07, "1/angstrom", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.detector_step[1], 0.08, "1/angstrom", QEM_CALIBRATION_RECORDED);
    json_decref(sm);

    /* Unknown units and invalid values are never used, even unvalidated. */
    sm = json_deep_copy(bases[0].sm);
    json_object_set_new(emq(sm, V_PATH), "unit", json_string("furlong"));
    json_object_set_new(emq(sm, ANGLE_PATH), "value", json_true());
    json_object_set_new(sampling(sm, 0), "value", json_integer(-1));
    json_object_set_new(sampling(sm, 1), "unit", json_integer(7));
    json_object_set_new(em(sm), ROW_PATH, json_string("0.5 A"));
    json_object_set_new(em(sm), COL_PATH, quantity(1e300, "m", "s"));
    json_object_set_new(sampling(sm, 2), "unit", json_string("pixels"));
    json_object_set_new(em(sm), DWELL_PATH, quantity(0, "us", "s"));
    json_object_set_new(sm, "calibration_overrides", json_pack("{s:s}", V_PATH, "200 kV"));
    qem_metadata_calibration(sm, &cal);
    CHECK_ABSENT(cal.voltage);
    CHECK_ABSENT(cal.semiangle);
    CHECK_ABSENT(cal.scan_step[0]);
    CHECK_ABSENT(cal.scan_step[1]);
    CHECK_ABSENT(cal.detector_step[0]);
    CHECK_Q(cal.detector_step[1], 0.8, "mrad", QEM_CALIBRATION_RECORDED);
    CHECK_ABSENT(cal.dwell);
    json_decref(sm);

    /* Sections of the wrong type, or no object at all. */
    sm = json_pack("{s:[], s:[], s:s}", "axes", "electron_microscope", "calibration_overrides",
                   "x");
    memset(&cal, 0xff, sizeof cal);
    qem_metadata_calibration(sm, &cal);
    CHECK_ABSENT(cal.scan_step[0]);
    CHECK_ABSENT(cal.voltage);
    json_decref(sm);
    memset(&cal, 0xff, sizeof cal);
    qem_metadata_calibration(NULL, &cal);
    CHECK_ABSENT(cal.detector_step[1]);
    CHECK_ABSENT(cal.camera_length);
}

/* --- new metadata -------------------------------------------------------------------- */

static void run_new(void)
{
    const uint64_t shape[4] = {3, 4, 16, 16};
    json_t *source = json_pack("{s:s}", "fixture", "x");
    json_t *sm = qem_metadata_new(shape, "npy", source);
    CHECK(sm != NULL);
    qem_error e = {0};
    CHECK_OK(qem_metadata_validate(sm, NULL, shape, "uint16", &e), &e);
    static const char *const keys[] = {"schema", "axes", "calibration_overrides",
                                       "electron_microscope", "processing", "source_documents",
                                       "source_format", "source_metadata",
                                       "source_metadata_coverage"};
    CHECK_EQ_U64(json_object_size(sm), sizeof keys / sizeof keys[0]);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK(json_object_get(sm, keys[i]) != NULL);
    CHECK(strcmp(json_string_value(json_object_get(sm, "schema")),
                 "quantem.scientific-metadata/2") == 0);
    CHECK(json_array_size(json_object_get(sm, "source_documents")) == 0);
    CHECK(json_object_size(em(sm)) == 0 && json_object_size(ov(sm)) == 0);
    CHECK(strcmp(json_string_value(json_object_get(sm, "source_format")), "npy") == 0);
    CHECK(strcmp(json_string_value(json_object_get(processing(sm, 0), "operation")),
                 "lossless_storage") == 0);
    CHECK(json_is_false(json_object_get(processing(sm, 0), "changes_measurements")));
    CHECK(json_object_get(sm, "source_metadata") != source);
    CHECK(json_equal(json_object_get(sm, "source_metadata"), source));
    for (size_t i = 0; i < 4; i++)
        CHECK(sampling(sm, i) == NULL);
    qem_calibration cal = {.struct_size = sizeof cal};
    qem_metadata_calibration(sm, &cal);
    CHECK_ABSENT(cal.scan_step[0]);
    CHECK_ABSENT(cal.voltage);
    json_decref(sm);
    json_decref(source);
    sm = qem_metadata_new(shape, NULL, NULL);
    CHECK(strcmp(json_string_value(json_object_get(sm, "source_format")), "unknown") == 0);
    CHECK(json_is_object(json_object_get(sm, "source_metadata")));
    json_decref(sm);
}

/* --- calibration files ----------------------------------------------------------------- */

static const char *const calibration_text =
    "{\"quantities\": {"
    "  \"scan_sampling_row\": {\"value\": 0.05, \"unit\": \"nm\"},"
    "  \"scan_sampling_column\": {\"value\": 0.25, \"unit\": \"angstrom\","
    "    \"provenance\": \"microscope log\", \"evidence\": \"session.txt\"},"
    "  \"detector_sampling_row\": {\"value\": 0.0008, \"unit\": \"rad\"},"
    "  \"detector_sampling_column\": {\"value\": 0.8, \"unit\": \"mrad\"},"
    "  \"electron_source/accelerating_voltage\": {\"value\": 300000, \"unit\": \"V\"},"
    "  \"electron_source/beam_energy\": {\"value\": 300, \"unit\": \"keV\"},"
    "  \"illumination_system/semi_convergence_angle\": {\"value\": 21.4, \"unit\": \"mrad\"},"
    "  \"scan_controller/regular_scan/dwell_time\": {\"value\": 0.001, \"unit\": \"ms\"},"
    "  \"imaging_system/camera_length\": {\"value\": 12, \"unit\": \"cm\"}},"
    " \"overrides\": {"
    "  \"scan_controller/regular_scan/pixel_size_row\": {\"value\": 2e-10, \"unit\": \"m\","
    "    \"evidence\": \"grating replica\"},"
    "  \"scan_sampling_column\": {\"value\": 0.3, \"unit\": \"nm\", \"evidence\": \"grating replica\","
    "    \"provenance\": \"user_override\"},"
    "  \"electron_source/accelerating_voltage\": {\"value\": 200, \"unit\": \"kV\","
    "    \"evidence\": \"HT log\"}}}";

static void run_apply(void)
{
    const uint64_t shape[4] = {3, 4, 16, 16};
    json_t *sm = qem_metadata_new(shape, "npy", NULL);
    json_t *cal_file = json_loads(calibration_text, 0, NULL);
    CHECK(cal_file != NULL);
    qem_error e = {0};
    CHECK_OK(qem_metadata_apply_calibration(sm, cal_file, &e), &e);
    qem_error v = {0};
    CHECK_OK(qem_metadata_validate(sm, NULL, shape, "uint16", &v), &v);

    /* Axis sampling and its electron_microscope duplicate, canonical. */
    CHECK(near(json_number_value(json_object_get(sampling(sm, 0), "value")), 0.5));
    CHECK(strcmp(json_string_value(json_object_get(sampling(sm, 0), "unit")), "angstrom") == 0);
    CHECK(strcmp(json_string_value(json_object_get(sampling(sm, 0), "provenance")),
                 "calibration_file") == 0);
    CHECK(json_equal(sampling(sm, 0), emq(sm, ROW_PATH)));
    CHECK(json_equal(sampling(sm, 1), emq(sm, COL_PATH)));
    CHECK(strcmp(json_string_value(json_object_get(sampling(sm, 1), "provenance")),
                 "microscope log") == 0);
    CHECK(strcmp(json_string_value(json_object_get(sampling(sm, 1), "evidence")),
                 "session.txt") == 0);
    CHECK(near(json_number_value(json_object_get(sampling(sm, 2), "value")), 0.8));
    CHECK(strcmp(json_string_value(json_object_get(sampling(sm, 2), "unit")), "mrad") == 0);
    CHECK(emq(sm, RROW_PATH) == NULL); /* detector aliases set the axes only */
    CHECK(near(json_number_value(json_object_get(emq(sm, BEAM_PATH), "value")), 300));
    CHECK(strcmp(json_string_value(json_object_get(emq(sm, CAMERA_PATH), "unit")), "mm") == 0);
    CHECK(strcmp(json_string_value(json_object_get(ovq(sm, COL_PATH), "provenance")),
                 "user_override") == 0);
    CHECK(strcmp(json_string_value(json_object_get(ovq(sm, COL_PATH), "evidence")),
                 "grating replica") == 0);

    qem_calibration cal = {.struct_size = sizeof cal};
    qem_metadata_calibration(sm, &cal);
    CHECK_Q(cal.scan_step[0], 2, "angstrom", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.scan_step[1], 3, "angstrom", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.detector_step[0], 0.8, "mrad", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.detector_step[1], 0.8, "mrad", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.voltage, 200, "kV", QEM_CALIBRATION_OVERRIDE);
    CHECK_Q(cal.semiangle, 21.4, "mrad", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.dwell, 1, "us", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.camera_length, 120, "mm", QEM_CALIBRATION_RECORDED);
    CHECK_Q(cal.voltage, 200, "kV", QEM_CALIBRATION_OVERRIDE);
    CHECK(near(json_number_value(json_object_get(emq(sm, V_PATH), "value")), 300));

    /* Round trip: through text and applying the same file again changes nothing. */
    char *text = json_dumps(sm, JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    json_t *reread = json_loads(text, 0, NULL);
    free(text);
    CHECK(json_equal(reread, sm));
    qem_error e2 = {0};
    CHECK_OK(qem_metadata_apply_calibration(reread, cal_file, &e2), &e2);
    CHECK(json_equal(reread, sm));
    json_decref(reread);

    /* On an upstream object: a reciprocal path sets the axis and its
     * duplicate; a detector alias then keeps the duplicate in step. */
    json_t *dense = json_deep_copy(bases[0].sm);
    json_t *f = json_loads("{\"quantities\": {"
                           " \"imaging_system/reciprocal_pixel_size_row\": {\"value\": 0.5, \"unit\": \"mrad\"},"
                           " \"imaging_system/reciprocal_pixel_size_column\": {\"value\": 0.5, \"unit\": \"mrad\"}}}",
                           0, NULL);
    qem_error e3 = {0};
    CHECK_OK(qem_metadata_apply_calibration(dense, f, &e3), &e3);
    CHECK(json_equal(sampling(dense, 2), emq(dense, RROW_PATH)));
    json_decref(f);
    f = json_loads("{\"quantities\": {"
                   " \"detector_sampling_row\": {\"value\": 0.06, \"unit\": \"1/nm\"},"
                   " \"detector_sampling_column\": {\"value\": 0.006, \"unit\": \"1/" ANGSTROM "\"}}}",
                   0, NULL);
    qem_error e4 = {0};
    CHECK_OK(qem_metadata_apply_calibration(dense, f, &e4), &e4);
    CHECK(json_equal(sampling(dense, 3), emq(dense, RCOL_PATH)));
    CHECK(strcmp(json_string_value(json_object_get(sampling(dense, 2), "unit")), "1/angstrom") == 0);
    qem_error v2 = {0};
    CHECK_OK(qem_metadata_validate(dense, bases[0].hm, bases[0].shape, "uint16", &v2), &v2);
    CHECK(json_equal(json_object_get(dense, "source_metadata"),
                     json_object_get(bases[0].sm, "source_metadata")));
    json_decref(f);
    json_decref(dense);

    /* Sections that are absent are created. */
    json_t *bare = qem_metadata_new(shape, "npy", NULL);
    json_object_del(bare, "electron_microscope");
    json_object_del(bare, "calibration_overrides");
    qem_error e5 = {0};
    CHECK_OK(qem_metadata_apply_calibration(bare, cal_file, &e5), &e5);
    CHECK(json_equal(bare, sm));
    json_decref(bare);
    json_decref(cal_file);
    json_decref(sm);
}

typedef struct apply_case {
    const char *name;
    const char *file; /* calibration file text; NULL: JSON array */
    const char *what;
    const char *rule;
} apply_case;

#define Q1(path, entry) "{\"quantities\": {\"" path "\": " entry "}}"
#define O1(path, entry) "{\"overrides\": {\"" path "\": " entry "}}"
#define PAIR(p, a, b) "{\"overrides\": {\"" p "row\": " a ", \"" p "column\": " b "}}"
#define SP "scan_controller/regular_scan/pixel_size_"
#define RP "imaging_system/reciprocal_pixel_size_"

static const apply_case apply_cases[] = {
    {"not an object", NULL, "calibration file", "must be a JSON object"},
    {"empty", "{}", "calibration file", "sets nothing"},
    {"unknown top-level key", "{\"quantity\": {}}", "'quantity'", "unknown top-level key"},
    {"quantities list", "{\"quantities\": []}", "\"quantities\"", "must be an object mapping paths"},
    {"overrides string", "{\"overrides\": \"x\"}", "\"overrides\"", "must be an object mapping paths"},
    {"unknown path", Q1("lab/tilt", "{\"value\": 1, \"unit\": \"deg\"}"), "quantities[\"lab/tilt\"]", "is not a known quantity path"},
    {"retired path", Q1(SP "x", "{\"value\": 1, \"unit\": \"angstrom\"}"), "quantities[\"" SP "x\"]", "is not a known quantity path"},
    {"beam energy override", O1(BEAM_PATH, "{\"value\": 300, \"unit\": \"keV\", \"evidence\": \"x\"}"), "overrides[\"" BEAM_PATH "\"]", "is not an allowed override path"},
    {"entry not object", Q1(V_PATH, "300"), "quantities[\"" V_PATH "\"]", "must be an object with value and unit"},
    {"unknown field", Q1(V_PATH, "{\"value\": 300, \"units\": \"kV\"}"), "quantities[\"" V_PATH "\"]", "has unknown field 'units'"},
    {"negative value", Q1(V_PATH, "{\"value\": -300, \"unit\": \"kV\"}"), "quantities[\"" V_PATH "\"]", "value must be a finite number greater than zero"},
    {"zero value", O1(V_PATH, "{\"value\": 0, \"unit\": \"kV\", \"evidence\": \"x\"}"), "overrides[\"" V_PATH "\"]", "greater than zero"},
    {"boolean value", Q1(V_PATH, "{\"value\": true, \"unit\": \"kV\"}"), "quantities[\"" V_PATH "\"]", "greater than zero"},
    {"text value", Q1(V_PATH, "{\"value\": \"300\", \"unit\": \"kV\"}"), "quantities[\"" V_PATH "\"]", "greater than zero"},
    {"missing value", Q1(V_PATH, "{\"unit\": \"kV\"}"), "quantities[\"" V_PATH "\"]", "greater than zero"},
    {"unknown unit", Q1(DWELL_PATH, "{\"value\": 1, \"unit\": \"minute\"}"), "quantities[\"" DWELL_PATH "\"]", "has unknown unit 'minute'"},
    {"missing unit", Q1(CAMERA_PATH, "{\"value\": 1}"), "quantities[\"" CAMERA_PATH "\"]", "has unknown unit '(missing)'"},
    {"scan unit for detector", Q1("detector_sampling_row", "{\"value\": 1, \"unit\": \"angstrom\"}"), "quantities[\"detector_sampling_row\"]", "has unknown unit 'angstrom'"},
    {"overflow", Q1("scan_sampling_row", "{\"value\": 1e300, \"unit\": \"m\"}"), "quantities[\"scan_sampling_row\"]", "not finite once converted to angstrom"},
    {"blank provenance", Q1(V_PATH, "{\"value\": 300, \"unit\": \"kV\", \"provenance\": \" \"}"), "quantities[\"" V_PATH "\"]", "provenance must be a non-blank string"},
    {"numeric provenance", Q1(V_PATH, "{\"value\": 300, \"unit\": \"kV\", \"provenance\": 1}"), "quantities[\"" V_PATH "\"]", "provenance must be a non-blank string"},
    {"numeric evidence", Q1(V_PATH, "{\"value\": 300, \"unit\": \"kV\", \"evidence\": 1}"), "quantities[\"" V_PATH "\"]", "evidence must be a string"},
    {"override without evidence", O1(V_PATH, "{\"value\": 300, \"unit\": \"kV\"}"), "overrides[\"" V_PATH "\"]", "needs non-empty evidence"},
    {"override empty evidence", O1(V_PATH, "{\"value\": 300, \"unit\": \"kV\", \"evidence\": \"\"}"), "overrides[\"" V_PATH "\"]", "needs non-empty evidence"},
    {"override numeric provenance", O1(V_PATH, "{\"value\": 300, \"unit\": \"kV\", \"evidence\": \"x\", \"provenance\": 1}"), "overrides[\"" V_PATH "\"]", "must be \"user_override\""},
    {"override provenance", O1(V_PATH, "{\"value\": 300, \"unit\": \"kV\", \"evidence\": \"x\", \"provenance\": \"me\"}"), "overrides[\"" V_PATH "\"]", "must be \"user_override\""},
    {"override scan too small", PAIR(SP, "{\"value\": 1e-15, \"unit\": \"m\", \"evidence\": \"x\"}", "{\"value\": 1, \"unit\": \"angstrom\", \"evidence\": \"x\"}"), "overrides[\"" SP "row\"]", "between 0.0001 and 10000 angstrom"},
    {"unpaired override", O1(SP "row", "{\"value\": 2, \"unit\": \"angstrom\", \"evidence\": \"x\"}"), "override \"" SP "row\"", "needs its partner \"" SP "column\""},
    {"unpaired detector override", O1("detector_sampling_column", "{\"value\": 2, \"unit\": \"mrad\", \"evidence\": \"x\"}"), "override \"" RP "column\"", "needs its partner \"" RP "row\""},
    {"override pair units differ", PAIR(RP, "{\"value\": 2, \"unit\": \"mrad\", \"evidence\": \"x\"}", "{\"value\": 2, \"unit\": \"1/nm\", \"evidence\": \"x\"}"), "overrides \"" RP "row\"", "must resolve to the same unit"},
    {"detector units differ", "{\"quantities\": {\"detector_sampling_row\": {\"value\": 1, \"unit\": \"mrad\"}, \"detector_sampling_column\": {\"value\": 1, \"unit\": \"1/nm\"}}}", "calibration file: detector", "row and column sampling must use the same unit"},
    {"same quantity twice", "{\"quantities\": {\"scan_sampling_row\": {\"value\": 1, \"unit\": \"angstrom\"}, \"" SP "row\": {\"value\": 1, \"unit\": \"angstrom\"}}}", "scan_sampling_row", "set the same quantity"},
};

static void run_apply_rejections(void)
{
    const uint64_t shape[4] = {3, 4, 16, 16};
    json_t *sm = qem_metadata_new(shape, "npy", NULL);
    json_t *original = json_deep_copy(sm);
    for (size_t i = 0; i < sizeof apply_cases / sizeof apply_cases[0]; i++) {
        const apply_case *c = &apply_cases[i];
        json_t *file = c->file ? json_loads(c->file, 0, NULL) : json_array();
        if (!file) {
            test_failures++;
            fprintf(stderr, "apply case '%s': bad test JSON\n", c->name);
            continue;
        }
        qem_error e = {0};
        qem_status st = qem_metadata_apply_calibration(sm, file, &e);
        test_checks++;
        if (st != QEM_E_METADATA || !strstr(e.message, c->what) || !strstr(e.message, c->rule)) {
            test_failures++;
            fprintf(stderr, "apply case '%s': status %d; message: %s\n  wanted: [%s] [%s]\n",
                    c->name, (int)st, e.message, c->what, c->rule);
        }
        CHECK(json_equal(sm, original)); /* a refused file changes nothing */
        json_decref(file);
    }
    json_t *file = json_loads(Q1(V_PATH, "{\"value\": 300, \"unit\": \"kV\"}"), 0, NULL);
    /* Metadata that cannot take a calibration file. */
    json_t *s1 = json_deep_copy(sm);
    json_object_set_new(s1, "schema", json_string("quantem.scientific-metadata/1"));
    qem_error e = {0};
    CHECK_STATUS(qem_metadata_apply_calibration(s1, file, &e), QEM_E_METADATA, &e);
    CHECK(strstr(e.message, "schema-2 scientific metadata only") != NULL);
    json_decref(s1);
    json_t *broken = json_deep_copy(sm);
    json_object_del(broken, "source_metadata_coverage");
    json_t *kept = json_deep_copy(broken);
    qem_error e2 = {0};
    CHECK_STATUS(qem_metadata_apply_calibration(broken, file, &e2), QEM_E_METADATA, &e2);
    CHECK(strstr(e2.message, "the scientific metadata is invalid") &&
          strstr(e2.message, "source_metadata_coverage"));
    CHECK(json_equal(broken, kept));
    json_decref(kept);
    json_decref(broken);
    /* A section of the wrong type is refused, never replaced. */
    json_t *wrong = json_deep_copy(sm);
    json_object_set_new(wrong, "electron_microscope", json_array());
    qem_error e5 = {0};
    CHECK_STATUS(qem_metadata_apply_calibration(wrong, file, &e5), QEM_E_METADATA, &e5);
    CHECK(strstr(e5.message, "electron_microscope must be an object") != NULL);
    CHECK(json_is_array(json_object_get(wrong, "electron_microscope")));
    json_decref(wrong);
    json_t *no_axes = json_deep_copy(sm);
    json_array_remove(json_object_get(no_axes, "axes"), 0);
    qem_error e3 = {0};
    CHECK_STATUS(qem_metadata_apply_calibration(no_axes, file, &e3), QEM_E_METADATA, &e3);
    CHECK(strstr(e3.message, "axes must be a list of four") != NULL);
    json_decref(no_axes);
    qem_error e4 = {0};
    CHECK_STATUS(qem_metadata_apply_calibration(NULL, file, &e4), QEM_E_INVALID_ARGUMENT, &e4);
    json_decref(file);
    json_decref(original);
    json_decref(sm);
}

int main(void)
{
    load_base(&bases[0], "qem/u16_dense_highdose.qem");
    load_base(&bases[1], "qem/u16_nonsquare_masked.qem");
    /* The bases themselves are valid, with their own header metadata. */
    expect_ok("base dense", bases[0].sm, bases[0].hm, &bases[0], NULL);
    expect_ok("base masked", bases[1].sm, bases[1].hm, &bases[1], NULL);
    run_rule_cases();
    run_accepted();
    run_fixtures();
    run_schema1();
    run_calibration();
    run_new();
    run_apply();
    run_apply_rejections();
    json_decref(bases[0].header);
    json_decref(bases[1].header);
    return test_finish("unit_metadata_rules");
}
