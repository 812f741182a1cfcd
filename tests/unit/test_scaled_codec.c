/* scaled-uint16-column-rans-v1: codes plus a precision report round-trip,
 * chunks never cross a region, values restore as float32(code*scale+offset),
 * and every report and layout rule is refused with its status. */
#include "qem_build.h"
#include "qem/qem_internal.h" /* qem_file_export_npy */

static const char *report_json =
    "{\"version\": 2, \"storage\": \"scaled_uint16\", \"complete\": true,"
    " \"source_shape\": [2, 5, 8, 8], \"source_dtype\": \"float32\","
    " \"rmse\": 0.002, \"max_abs_error\": 0.005, \"clipped\": 0, \"overflow\": 0,"
    " \"regions\": ["
    "  {\"first_frame\": 0, \"stop_frame\": 4, \"scale\": 0.5, \"offset\": -10.0,"
    "   \"storage\": \"scaled_uint16\", \"intensity_min\": -10.0, \"intensity_max\": 22757.5},"
    "  {\"first_frame\": 4, \"stop_frame\": 10, \"scale\": 0.009918364232852674, \"offset\": -50.0,"
    "   \"storage\": \"scaled_uint16\", \"intensity_min\": -50.0, \"intensity_max\": 600.0}]}";

static qem_parts base;
static int case_no;

static const char *variant(void (*edit)(json_t *h))
{
    char name[32];
    snprintf(name, sizeof name, "case%d.qem", case_no++);
    const char *path = test_path(name);
    json_t *h = json_deep_copy(base.header);
    edit(h);
    qem_parts_write(path, h, base.body, base.body_size, 1);
    json_decref(h);
    return path;
}

static json_t *report(json_t *h)
{
    return json_object_get(h, "intensity_calibration");
}
static json_t *region(json_t *h, size_t i)
{
    return json_array_get(json_object_get(report(h), "regions"), i);
}
static json_t *chunk(json_t *h, size_t i)
{
    return json_array_get(json_object_get(h, "chunks"), i);
}

#define EDIT(name, code) static void name(json_t *h) { code; }
EDIT(no_report, json_object_del(h, "intensity_calibration"))
EDIT(version_1, json_object_set_new(report(h), "version", json_integer(1)))
EDIT(storage, json_object_set_new(report(h), "storage", json_string("scaled_uint8")))
EDIT(incomplete, json_object_set_new(report(h), "complete", json_false()))
EDIT(source_shape, json_array_set_new(json_object_get(report(h), "source_shape"), 3, json_integer(9)))
EDIT(no_rmse, json_object_del(report(h), "rmse"))
EDIT(no_max_error, json_object_del(report(h), "max_abs_error"))
EDIT(no_clipped, json_object_del(report(h), "clipped"))
EDIT(no_overflow, json_object_del(report(h), "overflow"))
EDIT(no_regions, json_object_set_new(report(h), "regions", json_array()))
EDIT(region_gap, json_object_set_new(region(h, 1), "first_frame", json_integer(5)))
EDIT(region_empty, json_object_set_new(region(h, 0), "stop_frame", json_integer(0)))
EDIT(region_short, json_object_set_new(region(h, 1), "stop_frame", json_integer(9)))
EDIT(scale_zero, json_object_set_new(region(h, 0), "scale", json_real(0.0)))
EDIT(scale_negative, json_object_set_new(region(h, 1), "scale", json_real(-0.5)))
EDIT(scale_text, json_object_set_new(region(h, 1), "scale", json_string("NaN")))
EDIT(offset_missing, json_object_del(region(h, 0), "offset"))
EDIT(region_storage, json_object_set_new(region(h, 0), "storage", json_string("raw")))
EDIT(region_min, json_object_del(region(h, 1), "intensity_min"))
EDIT(no_quantization, {
    json_t *proc = json_object_get(json_object_get(h, "scientific_metadata"), "processing");
    json_array_remove(proc, json_array_size(proc) - 1);
})
EDIT(quantization_unchanged, {
    json_t *proc = json_object_get(json_object_get(h, "scientific_metadata"), "processing");
    json_object_set_new(json_array_get(proc, json_array_size(proc) - 1), "changes_measurements",
                        json_false());
})
EDIT(dtype_u8, json_object_set_new(h, "dtype", json_string("uint8")))
EDIT(attributes_list, json_object_set_new(h, "attributes", json_array()))
EDIT(chunk_region_missing, json_object_del(chunk(h, 0), "region"))
EDIT(chunk_region_range, json_object_set_new(chunk(h, 0), "region", json_integer(2)))
EDIT(chunk_wrong_region, json_object_set_new(chunk(h, 0), "region", json_integer(1)))
EDIT(chunk_four_arrays, json_array_append_new(json_object_get(chunk(h, 0), "arrays"),
                                              json_pack("{s:i, s:i}", "count", 0, "offset", 0)))

int main(void)
{
    qem_error e = {0};
    const uint64_t shape[4] = {2, 5, 8, 8};
    const uint64_t scans = 10, P = 64;
    uint16_t codes[10 * 64];
    uint64_t seed = 4;
    for (uint64_t i = 0; i < scans * P; i++)
        codes[i] = (uint16_t)(i % 7 == 0 ? 65535 : test_rand(&seed) % 300);
    qem_save_options so;
    qem_save_options_init(&so);
    so.chunk_scans = 3; /* regions [0,4) and [4,10): chunks 3,1 | 3,3 */
    so.intensity_calibration_json = report_json;
    so.attributes_json = "{\"producer\": \"unit test\"}";
    qem_writer *w = NULL;
    CHECK_OK(qem_writer_create(test_path("base.qem"), QEM_DTYPE_UINT16, shape, &so, &w, &e), &e);
    CHECK_OK(qem_writer_append(w, codes, 2, &e), &e);
    CHECK_OK(qem_writer_append(w, codes + 2 * P, 8, &e), &e);
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);

    qem_file *f = NULL;
    CHECK_OK(qem_open(test_path("base.qem"), NULL, &f, &e), &e);
    if (f) {
        qem_file_info info = {.struct_size = sizeof info};
        qem_get_info(f, &info, NULL);
        CHECK_EQ_U64(info.codec, QEM_CODEC_SCALED);
        CHECK_EQ_U64(info.region_count, 2);
        CHECK_EQ_U64(info.chunk_count, 4);
        const uint64_t firsts[4] = {0, 3, 4, 7};
        for (uint64_t c = 0; c < 4 && c < info.chunk_count; c++) {
            uint64_t first = 0;
            qem_get_chunk(f, c, &first, NULL, NULL);
            CHECK_EQ_U64(first, firsts[c]);
        }
        uint16_t back[10 * 64];
        CHECK_OK(qem_read_codes(f, 0, scans, back, sizeof back, &e), &e);
        CHECK(memcmp(back, codes, sizeof codes) == 0);
        float values[10 * 64];
        CHECK_OK(qem_read_values(f, 0, scans, values, sizeof values, &e), &e);
        int wrong = 0;
        for (uint64_t s = 0; s < scans; s++)
            for (uint64_t p = 0; p < P; p++) {
                double scale = s < 4 ? 0.5 : 0.009918364232852674, offset = s < 4 ? -10.0 : -50.0;
                float want = (float)((double)codes[s * P + p] * scale + offset);
                wrong += memcmp(&want, &values[s * P + p], 4) != 0;
            }
        CHECK_EQ_U64(wrong, 0);
        CHECK_STATUS(qem_read_scans(f, 0, 1, back, sizeof back, &e), QEM_E_WRONG_CODEC, &e);
        CHECK_OK(qem_verify(f, NULL, NULL, &e), &e);
        /* Export: restored values by default, codes on request. */
        CHECK_OK(qem_file_export_npy(f, test_path("values.npy"), NULL, &e), &e);
        qem_export_options xo;
        qem_export_options_init(&xo);
        xo.values = QEM_VALUES_RAW;
        CHECK_OK(qem_file_export_npy(f, test_path("codes.npy"), &xo, &e), &e);
        qem_npy *n = NULL;
        CHECK_OK(qem_npy_open(test_path("codes.npy"), &n, &e), &e);
        if (n) {
            memset(back, 0, sizeof back);
            CHECK_OK(qem_npy_read(n, 0, scans * P, back, npy_read_size(n, scans * P), &e), &e);
            CHECK(memcmp(back, codes, sizeof codes) == 0);
            qem_npy_close(n);
        }
        CHECK_OK(qem_npy_open(test_path("values.npy"), &n, &e), &e);
        if (n) {
            float exported[10 * 64];
            CHECK_OK(qem_npy_read(n, 0, scans * P, exported, npy_read_size(n, scans * P), &e), &e);
            CHECK(memcmp(exported, values, sizeof values) == 0);
            qem_npy_close(n);
        }
        size_t hlen = 0;
        const char *h = qem_header_json(f, &hlen);
        CHECK(strstr(h, "scaled_uint16_quantization") && strstr(h, "\"unit test\""));
        qem_close(f);
    }

    /* A report the writer cannot use is refused before anything exists. */
    so.intensity_calibration_json = "{\"version\": 2}";
    CHECK_STATUS(qem_writer_create(test_path("bad.qem"), QEM_DTYPE_UINT16, shape, &so, &w, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    so.intensity_calibration_json = report_json;
    CHECK_STATUS(qem_writer_create(test_path("bad.qem"), QEM_DTYPE_UINT8, shape, &so, &w, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    CHECK(!file_exists(test_path("bad.qem")));

    CHECK(qem_parts_load(test_path("base.qem"), &base));
    if (!base.header)
        return test_finish("unit_scaled_codec");
    struct {
        const char *name;
        void (*edit)(json_t *);
        qem_status status;
        const char *words;
    } rules[] = {
        {"no report", no_report, QEM_E_METADATA, "missing"},
        {"version 1", version_1, QEM_E_METADATA, "version must be 2"},
        {"storage", storage, QEM_E_METADATA, "storage must be"},
        {"incomplete", incomplete, QEM_E_METADATA, "complete must be true"},
        {"source shape", source_shape, QEM_E_METADATA, "source_shape differs"},
        {"no rmse", no_rmse, QEM_E_METADATA, "rmse"},
        {"no max_abs_error", no_max_error, QEM_E_METADATA, "max_abs_error"},
        {"no clipped", no_clipped, QEM_E_METADATA, "clipped"},
        {"no overflow", no_overflow, QEM_E_METADATA, "overflow"},
        {"no regions", no_regions, QEM_E_METADATA, "non-empty list"},
        {"region gap", region_gap, QEM_E_METADATA, "follow each other"},
        {"empty region", region_empty, QEM_E_METADATA, "follow each other"},
        {"regions short", region_short, QEM_E_METADATA, "regions end at frame 9"},
        {"scale zero", scale_zero, QEM_E_METADATA, "scale must be finite and positive"},
        {"scale negative", scale_negative, QEM_E_METADATA, "scale must be finite and positive"},
        {"scale text", scale_text, QEM_E_METADATA, "scale must be finite and positive"},
        {"offset missing", offset_missing, QEM_E_METADATA, "offset must be finite"},
        {"region storage", region_storage, QEM_E_METADATA, "region 0 storage"},
        {"region min", region_min, QEM_E_METADATA, "intensity_min"},
        {"no quantization entry", no_quantization, QEM_E_METADATA, "scaled_uint16_quantization"},
        {"quantization unchanged", quantization_unchanged, QEM_E_METADATA,
         "scaled_uint16_quantization"},
        {"dtype uint8", dtype_u8, QEM_E_HEADER, "codes are uint16"},
        {"attributes list", attributes_list, QEM_E_HEADER, "attributes"},
        {"chunk without region", chunk_region_missing, QEM_E_LAYOUT, "must name a region"},
        {"chunk region out of range", chunk_region_range, QEM_E_LAYOUT, "must name a region"},
        {"chunk outside its region", chunk_wrong_region, QEM_E_LAYOUT, "inside its region"},
        {"four arrays", chunk_four_arrays, QEM_E_LAYOUT, "must have 3 arrays"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        qem_status st = open_status(variant(rules[i].edit), &e);
        if (st != rules[i].status || !strstr(e.message, rules[i].words))
            fprintf(stderr, "rule '%s': %s\n", rules[i].name, e.message);
        CHECK_STATUS(st, rules[i].status, &e);
        CHECK(strstr(e.message, rules[i].words) != NULL);
    }
    qem_parts_free(&base);
    return test_finish("unit_scaled_codec");
}
