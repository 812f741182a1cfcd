/* The Velox EMD family (lib/input/velox.c, velox_meta.c): files built
 * here with libhdf5 (tests/common/h5_build.c) as Velox writes them, and
 * HyperSpy's own Velox test files. Layout facts, from the files Velox
 * writes (HyperSpy's fei_*.emd; RosettaSciIO's Velox reader describes the
 * same): /Version is a one-element string holding JSON {"version": "4",
 * "format": "Velox"}; /Data/Image/<uuid>/Data is (rows, columns, frames),
 * chunked one frame per chunk; /Data/Image/<uuid>/Metadata is a
 * (bytes, frames) uint8 array, per frame a NUL-padded JSON document with
 * Scan.ScanSize {width, height}, BinaryResult {AcquisitionUnit,
 * DetectorIndex, PixelSize, ...} and Detectors {"Detector-<i>":
 * {DetectorType, ...}}, numbers written as strings; EDS data lives in
 * /Data/SpectrumStream, /Data/Spectrum and /Data/SpectrumImage. */
#include <sys/stat.h>

#include "common/error.h"
#include "h5_build.h"
#include "input/input.h"
#include "test_util.h"

#ifndef QEM_HYPERSPY_IO
#define QEM_HYPERSPY_IO "/usr/lib/python3/dist-packages/hyperspy/tests/io"
#endif

#define UUID "0123456789abcdef0123456789abcdef"
#define IMAGE "/Data/Image/" UUID

static qem_status open_acq(const char *path, const input_options *o, acquisition **a,
                           qem_error *e)
{
    qem_error_clear(e);
    return qem_input_open(path, o, a, e);
}

static input_options options(const char *dataset, uint64_t rows, uint64_t columns)
{
    input_options o;
    memset(&o, 0, sizeof o);
    o.dataset = dataset;
    o.scan_shape[0] = rows;
    o.scan_shape[1] = columns;
    return o;
}

static int dataset(const char *file, const char *path, hid_t file_type, hid_t mem_type, int rank,
                   const uint64_t *dims, const uint64_t *chunk, const void *data)
{
    h5b_dataset d;
    memset(&d, 0, sizeof d);
    d.path = path;
    d.file_type = file_type;
    d.mem_type = mem_type;
    d.rank = rank;
    for (int i = 0; i < rank; i++) {
        d.dims[i] = dims[i];
        d.chunk[i] = chunk ? chunk[i] : 0;
    }
    d.data = data;
    return h5b_write_dataset(file, &d);
}

/* Metadata JSON of camera frames (or of a scanning detector) over a scan
 * of `width` x `height`. */
static void metadata_json(char *out, size_t size, int camera, const char *width,
                          const char *height)
{
    snprintf(out, size,
             "{\"Core\": {\"MetadataDefinitionVersion\": \"7.9\"},"
             " \"Instrument\": {\"InstrumentClass\": \"Talos\"},"
             " \"Scan\": {\"ScanSize\": {\"width\": \"%s\", \"height\": \"%s\"},"
             " \"DwellTime\": \"1e-3\"},"
             " \"BinaryResult\": {\"AcquisitionUnit\": \"%s\", \"DetectorIndex\": \"1\","
             " \"Detector\": \"%s\", \"PixelSize\": {\"width\": \"1e-10\", \"height\": \"1e-10\"}},"
             " \"Detectors\": {\"Detector-0\": {\"DetectorName\": \"BF\"},"
             " \"Detector-1\": {\"DetectorName\": \"%s\", \"DetectorType\": \"%s\"}}}",
             width, height, camera ? "CameraImage" : "", camera ? "BM-Ceta" : "HAADF",
             camera ? "BM-Ceta" : "HAADF", camera ? "ImagingDetector" : "ScanningDetector");
}

typedef struct velox_file {
    const char *name;
    const char *version;  /* NULL: {"version": "4", "format": "Velox"} */
    const char *metadata; /* NULL: no Metadata dataset */
    uint64_t metadata_bytes, metadata_frames;
    hid_t file_type, mem_type;
    int rank;
    uint64_t dims[4];
    const void *data; /* NULL: declared, never written */
} velox_file;

/* Builds the file; returns its path. */
static const char *build(const velox_file *v)
{
    const char *path = test_path(v->name);
    CHECK(h5b_create(path, 0) == 0);
    static const char velox[] = "{\n    \"version\": \"4\",\n    \"format\": \"Velox\"\n}\n";
    CHECK(h5b_string_dataset(path, "/Version", v->version ? v->version : velox) == 0);
    uint64_t chunk[4] = {v->dims[0], v->dims[1], 1, 1};
    if (v->rank == 4)
        chunk[2] = v->dims[2];
    CHECK(dataset(path, IMAGE "/Data", v->file_type, v->mem_type, v->rank, v->dims, chunk,
                  v->data) == 0);
    if (v->metadata) {
        const uint64_t bytes = v->metadata_bytes, frames = v->metadata_frames;
        uint8_t *m = bytes * frames <= (64u << 20) ? calloc((size_t)(bytes * frames), 1) : NULL;
        const size_t n = strlen(v->metadata);
        for (uint64_t f = 0; m && f < frames; f++)
            for (uint64_t i = 0; i < n && i < bytes; i++)
                m[i * frames + f] = (uint8_t)v->metadata[i];
        const uint64_t dims[2] = {bytes, frames}, mchunk[2] = {bytes, 1};
        CHECK(dataset(path, IMAGE "/Metadata", H5T_STD_U8LE, H5T_NATIVE_UINT8, 2, dims, mchunk,
                      m) == 0);
        free(m);
    }
    return path;
}

static const char *fact_string(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static void check_frames(acquisition *a, qem_dtype target, const void *expected)
{
    const uint64_t frames = a->shape[0] * a->shape[1], pixels = a->shape[2] * a->shape[3];
    const size_t frame = (size_t)pixels * qem_dtype_size(target);
    uint8_t *all = malloc(frame * frames), *one = malloc(frame);
    qem_error e;
    qem_error_clear(&e);
    CHECK_OK(qem_input_read(a, 0, frames, target, all, frame * frames, &e), &e);
    CHECK(memcmp(all, expected, frame * frames) == 0);
    for (uint64_t f = frames; f-- > 0;) {
        CHECK_OK(qem_input_read(a, f, 1, target, one, frame, &e), &e);
        CHECK(memcmp(one, (const uint8_t *)expected + f * frame, frame) == 0);
    }
    free(all);
    free(one);
}

/* --- camera frames over a stated scan ---------------------------------------------- */

enum { H = 5, W = 4, F = 6 };

static void test_camera_scan(void)
{
    /* Stored (rows, columns, frames); frame k is [:, :, k]. */
    uint16_t stored[H * W * F], frames[F * H * W];
    for (int r = 0; r < H; r++)
        for (int c = 0; c < W; c++)
            for (int k = 0; k < F; k++) {
                const uint16_t v = (uint16_t)(1000 * k + 10 * r + c);
                stored[(r * W + c) * F + k] = v;
                frames[(k * H + r) * W + c] = v;
            }
    char json[2048];
    metadata_json(json, sizeof json, 1, "3", "2");
    velox_file v = {.name = "camera.emd", .metadata = json, .metadata_bytes = 4000,
                    .metadata_frames = F, .file_type = H5T_STD_U16BE,
                    .mem_type = H5T_NATIVE_UINT16, .rank = 3, .dims = {H, W, F}, .data = stored};
    const char *path = build(&v);
    acquisition *a = NULL;
    qem_error e;
    input_options o = options(NULL, 0, 0);
    CHECK_OK(open_acq(path, &o, &a, &e), &e);
    if (!a)
        return;
    CHECK(strcmp(a->family->name, "velox") == 0);
    /* Scan.ScanSize height x width = 2 x 3 = the six camera frames. */
    const uint64_t want[4] = {2, 3, H, W};
    for (int i = 0; i < 4; i++)
        CHECK_EQ_U64(a->shape[i], want[i]);
    CHECK(a->sample_type == QEM_DTYPE_UINT16);
    CHECK_EQ_U64(a->member_count, 1);
    CHECK(a->calibration == NULL);
    check_frames(a, QEM_DTYPE_UINT16, frames);
    CHECK(strcmp(fact_string(a->facts, "image"), IMAGE) == 0);
    CHECK(strcmp(fact_string(a->facts, "scan_shape_from"), "Scan.ScanSize (camera frames)") == 0);
    json_t *meta = json_object_get(a->facts, "metadata");
    CHECK(strcmp(fact_string(json_object_get(meta, "detector"), "DetectorName"), "BM-Ceta") == 0);
    CHECK(json_is_true(json_object_get(meta, "frames_from_camera")));
    CHECK(strcmp(fact_string(json_object_get(a->facts, "version"), "format"), "Velox") == 0);
    qem_input_close(a);
    /* The caller's scan shape must agree with the metadata's. */
    o = options(NULL, 3, 2);
    CHECK_STATUS(open_acq(path, &o, &a, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, "Scan.ScanSize") != NULL);

    /* The same frames from a scanning detector: ScanSize is the image's
     * own raster, so the scan shape must be given. */
    metadata_json(json, sizeof json, 0, "3", "2");
    v.name = "haadf.emd";
    path = build(&v);
    o = options(NULL, 0, 0);
    CHECK_STATUS(open_acq(path, &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "--scan-shape") != NULL);
    o = options(NULL, 1, 6);
    CHECK_OK(open_acq(path, &o, &a, &e), &e);
    if (a) {
        check_frames(a, QEM_DTYPE_UINT16, frames);
        CHECK(json_is_false(json_object_get(json_object_get(a->facts, "metadata"),
                                            "frames_from_camera")));
        qem_input_close(a);
    }
}

/* --- sample types ------------------------------------------------------------------ */

static void test_types(void)
{
    int16_t stored[H * W * 2];
    float as_f32[2 * H * W];
    for (int r = 0; r < H; r++)
        for (int c = 0; c < W; c++)
            for (int k = 0; k < 2; k++) {
                const int16_t v = (int16_t)(r * 7 - c * 300 - k);
                stored[(r * W + c) * 2 + k] = v;
                as_f32[(k * H + r) * W + c] = v;
            }
    char json[2048];
    metadata_json(json, sizeof json, 1, "0", "0");
    velox_file v = {.name = "int16.emd", .metadata = json, .metadata_bytes = 60000,
                    .metadata_frames = 2, .file_type = H5T_STD_I16LE,
                    .mem_type = H5T_NATIVE_INT16, .rank = 3, .dims = {H, W, 2}, .data = stored};
    acquisition *a = NULL;
    qem_error e;
    input_options o = options(NULL, 2, 1);
    CHECK_OK(open_acq(build(&v), &o, &a, &e), &e);
    if (a) {
        CHECK(a->read_values == INPUT_VALUES_INT16 && a->sample_type == QEM_DTYPE_FLOAT32);
        check_frames(a, QEM_DTYPE_FLOAT32, as_f32);
        qem_input_close(a);
    }
    /* Complex numbers (Velox FFT and DPC images): refused by type. */
    hid_t complex = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(complex, "realFloat", 0, H5T_IEEE_F32LE);
    H5Tinsert(complex, "imagFloat", 4, H5T_IEEE_F32LE);
    float pairs[2 * H * W * 2] = {0};
    v.name = "complex.emd";
    v.file_type = v.mem_type = complex;
    v.data = pairs;
    CHECK_STATUS(open_acq(build(&v), &o, &a, &e), QEM_E_UNSUPPORTED, &e);
    CHECK(strstr(e.message, "compound records") != NULL);
    H5Tclose(complex);
}

/* --- refusals ---------------------------------------------------------------------- */

static void test_refusals(void)
{
    uint16_t data[H * W * 2] = {0};
    char json[2048];
    metadata_json(json, sizeof json, 1, "2", "1");
    const velox_file good = {.name = "good.emd", .metadata = json, .metadata_bytes = 3000,
                             .metadata_frames = 2, .file_type = H5T_STD_U16LE,
                             .mem_type = H5T_NATIVE_UINT16, .rank = 3, .dims = {H, W, 2},
                             .data = data};
    acquisition *a = NULL;
    qem_error e;
    input_options o = options(NULL, 0, 0);
    CHECK_OK(open_acq(build(&good), &o, &a, &e), &e);
    qem_input_close(a);
    a = NULL;

    velox_file v = good;
    v.name = "no_metadata.emd";
    v.metadata = NULL;
    CHECK_STATUS(open_acq(build(&v), &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "Metadata") != NULL);
    v = good;
    v.name = "metadata_frames.emd";
    v.metadata_frames = 3;
    CHECK_STATUS(open_acq(build(&v), &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "metadata for 3 frames") != NULL);
    v = good;
    v.name = "metadata_bad.emd";
    v.metadata = "{\"Scan\": [1, 2";
    CHECK_STATUS(open_acq(build(&v), &o, &a, &e), QEM_E_METADATA, &e);
    char bad_count[2048];
    metadata_json(bad_count, sizeof bad_count, 1, "2x", "1");
    v = good;
    v.name = "scan_size_bad.emd";
    v.metadata = bad_count;
    CHECK_STATUS(open_acq(build(&v), &o, &a, &e), QEM_E_METADATA, &e);
    CHECK(strstr(e.message, "ScanSize") != NULL);
    v = good;
    v.name = "metadata_huge.emd";
    v.metadata_bytes = VELOX_MAX_METADATA_BYTES + 1;
    v.metadata = "";
    CHECK_STATUS(open_acq(build(&v), &o, &a, &e), QEM_E_LIMIT, &e);
    v = good;
    v.name = "unwritten.emd";
    v.data = NULL;
    CHECK_STATUS(open_acq(build(&v), &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "stores only 0") != NULL);
    v = good;
    v.name = "four_d.emd";
    v.rank = 4;
    v.dims[3] = 1;
    CHECK_STATUS(open_acq(build(&v), &o, &a, &e), QEM_E_UNSUPPORTED, &e);
    CHECK(strstr(e.message, "4 dimensions") != NULL);
    /* A detector past 2^26 pixels, never written (more chunks than are
     * walked), refused before its metadata is read. */
    v = good;
    v.name = "huge.emd";
    v.dims[0] = 9000;
    v.dims[1] = 9000;
    v.dims[2] = (1u << 24) + 1;
    v.data = NULL;
    v.metadata = NULL;
    CHECK_STATUS(open_acq(build(&v), &o, &a, &e), QEM_E_LIMIT, &e);

    /* A second image: one must be named; spectra are refused. */
    const char *two = build(&(velox_file){.name = "two.emd", .metadata = json,
                                          .metadata_bytes = 3000, .metadata_frames = 2,
                                          .file_type = H5T_STD_U16LE,
                                          .mem_type = H5T_NATIVE_UINT16, .rank = 3,
                                          .dims = {H, W, 2}, .data = data});
    const uint64_t other[3] = {2, 2, 1}, spectrum[2] = {16, 1};
    uint8_t small[4] = {1, 2, 3, 4};
    CHECK(dataset(two, "/Data/Image/ffff/Data", H5T_STD_U8LE, H5T_NATIVE_UINT8, 3, other, NULL,
                  small) == 0);
    CHECK(dataset(two, "/Data/SpectrumStream/abcd/Data", H5T_STD_U16LE, H5T_NATIVE_UINT16, 2,
                  spectrum, NULL, data) == 0);
    CHECK_STATUS(open_acq(two, &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "2 images") && strstr(e.message, IMAGE));
    o = options(IMAGE, 0, 0);
    CHECK_OK(open_acq(two, &o, &a, &e), &e);
    if (a) {
        CHECK_EQ_U64(json_integer_value(json_object_get(json_object_get(a->facts, "not_read"),
                                                        "SpectrumStream")),
                     1);
        qem_input_close(a);
    }
    o = options(IMAGE "/Data", 0, 0);
    CHECK_OK(open_acq(two, &o, &a, &e), &e);
    qem_input_close(a);
    o = options("/Data/Image/nope", 0, 0);
    CHECK_STATUS(open_acq(two, &o, &a, &e), QEM_E_INVALID_ARGUMENT, &e);
    o = options("/Data/SpectrumStream/abcd", 0, 0);
    CHECK_STATUS(open_acq(two, &o, &a, &e), QEM_E_UNSUPPORTED, &e);
    CHECK(strstr(e.message, "EDS spectra") != NULL);
    /* Spectra only. */
    const char *eds = test_path("eds.emd");
    CHECK(h5b_create(eds, 0) == 0);
    CHECK(h5b_string_dataset(eds, "/Version", "{\"format\": \"Velox\", \"version\": \"4\"}") == 0);
    CHECK(dataset(eds, "/Data/SpectrumStream/abcd/Data", H5T_STD_U16LE, H5T_NATIVE_UINT16, 2,
                  spectrum, NULL, data) == 0);
    o = options(NULL, 0, 0);
    CHECK_STATUS(open_acq(eds, &o, &a, &e), QEM_E_UNSUPPORTED, &e);
    CHECK(strstr(e.message, "only EDS spectra") != NULL);
    /* Another format's /Version: not Velox, a plain HDF5 file. */
    v = good;
    v.name = "not_velox.emd";
    v.version = "{\"format\": \"Other\"}";
    o = options(IMAGE "/Data", 1, 2);
    CHECK_STATUS(open_acq(build(&v), &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "must be a 3D stack") || strstr(e.message, "scan shape"));
}

/* --- the JSON alone ---------------------------------------------------------------- */

static void test_metadata_parser(void)
{
    json_t *version = NULL;
    static const char velox[] = "{\"version\": \"6\", \"format\": \"Velox\"}\0\0\0";
    CHECK(qem_input_velox_version(velox, sizeof velox, &version) == 1);
    json_decref(version);
    CHECK(qem_input_velox_version("{\"format\": \"velox\"}", 19, &version) == 0);
    CHECK(qem_input_velox_version("[\"Velox\"]", 9, &version) == 0);
    CHECK(qem_input_velox_version("", 0, &version) == 0);
    input_velox_meta m;
    qem_error e;
    qem_error_clear(&e);
    CHECK_STATUS(qem_input_velox_parse_metadata("[]", 2, 1, "test", &m, &e), QEM_E_METADATA, &e);
    char json[2048];
    /* 7 x 3 camera positions need 21 frames. */
    metadata_json(json, sizeof json, 1, "7", "3");
    qem_error_clear(&e);
    CHECK_OK(qem_input_velox_parse_metadata(json, strlen(json), 21, "test", &m, &e), &e);
    CHECK(m.camera && m.scan[0] == 3 && m.scan[1] == 7);
    qem_input_velox_meta_free(&m);
    CHECK_OK(qem_input_velox_parse_metadata(json, strlen(json), 20, "test", &m, &e), &e);
    CHECK(m.scan[0] == 0 && m.scan[1] == 0);
    qem_input_velox_meta_free(&m);
    /* Counts that overflow. */
    metadata_json(json, sizeof json, 1, "999999999999", "999999999999");
    CHECK_OK(qem_input_velox_parse_metadata(json, strlen(json), 21, "test", &m, &e), &e);
    CHECK(m.scan[0] == 0);
    qem_input_velox_meta_free(&m);
    metadata_json(json, sizeof json, 1, "9999999999999", "1");
    CHECK_STATUS(qem_input_velox_parse_metadata(json, strlen(json), 21, "test", &m, &e),
                 QEM_E_METADATA, &e);
}

/* --- HyperSpy's files -------------------------------------------------------------- */

static void test_real_files(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/emd_files/fei_example_tem_stack.emd", QEM_HYPERSPY_IO);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "HyperSpy's Velox files are missing (%s)\n", path);
        CHECK(0);
        return;
    }
    acquisition *a = NULL;
    qem_error e;
    input_options o = options(NULL, 1, 2);
    CHECK_OK(open_acq(path, &o, &a, &e), &e);
    if (a) {
        CHECK(strcmp(a->family->name, "velox") == 0);
        const uint64_t want[4] = {1, 2, 3, 3};
        for (int i = 0; i < 4; i++)
            CHECK_EQ_U64(a->shape[i], want[i]);
        CHECK(a->read_values == INPUT_VALUES_INT16);
        json_t *meta = json_object_get(a->facts, "metadata");
        CHECK(json_object_get(meta, "Optics") != NULL);
        qem_input_close(a);
    }
    snprintf(path, sizeof path, "%s/emd_files/fei_example_dpc_titles.emd", QEM_HYPERSPY_IO);
    o = options(NULL, 0, 0);
    CHECK_STATUS(open_acq(path, &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "9 images") != NULL);
}

int main(void)
{
    test_camera_scan();
    test_types();
    test_refusals();
    test_metadata_parser();
    test_real_files();
    return test_finish("unit_input_velox");
}
