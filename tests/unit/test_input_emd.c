/* The Berkeley EMD family (lib/input/emd.c): files built here with
 * libhdf5 (tests/common/h5_build.c) in the three layouts the format has
 * had, and HyperSpy's own EMD test files. Layout facts, from the EMD
 * specifications (https://emdatasets.com/format/) and the writers:
 *   EMD 0.2: root attributes version_major = 0, version_minor = 2; a data
 *     group carries emd_group_type = 1 and holds `data` and dim1..dimN,
 *     each dim a dataset with `name` and `units` attributes.
 *   py4DSTEM 0.x / prismatic: a top group (4DSTEM_experiment,
 *     4DSTEM_simulation) carries emd_group_type = 2 and the version; a
 *     datacube group holds `datacube` (Rx, Ry, Qx, Qy) and dim1..dim4
 *     (HyperSpy's Si100_4D.emd is one).
 *   EMD 1.0 (emdfile): root attributes emd_group_type = "file",
 *     version_major = 1, version_minor = 0; a root group emd_group_type =
 *     "root"; an array group emd_group_type = "array" holding `data` and
 *     dim0..dimN-1 (emdfile writes f"dim{n}" for n in range(rank)).
 * Every frame is read back against the array written, bit for bit; each
 * refusal has its own status. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/sha256.h"
#include "h5_build.h"
#include "input/input.h"
#include "test_util.h"

#ifndef QEM_HYPERSPY_IO
#define QEM_HYPERSPY_IO "/usr/lib/python3/dist-packages/hyperspy/tests/io"
#endif

static input_options options(const char *dataset, uint64_t rows, uint64_t columns)
{
    input_options o;
    memset(&o, 0, sizeof o);
    o.dataset = dataset;
    o.scan_shape[0] = rows;
    o.scan_shape[1] = columns;
    return o;
}

/* qem_input_open with a cleared error (the first failure recorded wins). */
static qem_status open_acq(const char *path, const input_options *o, acquisition **a,
                           qem_error *e)
{
    qem_error_clear(e);
    return qem_input_open(path, o, a, e);
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

/* dimK datasets of a data group: `n` values first + k * step each. */
static void dims(const char *file, const char *group, int base, int rank, const uint64_t *shape,
                 const char *const *names)
{
    for (int k = 0; k < rank; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/dim%d", group, base + k);
        float v[64];
        for (uint64_t i = 0; i < shape[k] && i < 64; i++)
            v[i] = 0.5f * (float)i - (float)k;
        CHECK(dataset(file, path, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, &shape[k], NULL, v) == 0);
        CHECK(h5b_attr_string(file, path, "name", names[k], 0) == 0);
        CHECK(h5b_attr_string(file, path, "units", k < 2 ? "[n_m]" : "[n_m^-1]", 0) == 0);
    }
}

static const char *const rq[4] = {"R_x", "R_y", "Q_x", "Q_y"};

/* Every frame, one read and one frame at a time, against `expected`. */
static void check_frames(acquisition *a, qem_dtype target, const void *expected)
{
    const uint64_t frames = a->shape[0] * a->shape[1], pixels = a->shape[2] * a->shape[3];
    const size_t item = qem_dtype_size(target), frame = (size_t)pixels * item;
    uint8_t *all = malloc(frame * frames), *one = malloc(frame);
    qem_error e;
    CHECK_OK(qem_input_read(a, 0, frames, target, all, frame * frames, &e), &e);
    CHECK(memcmp(all, expected, frame * frames) == 0);
    for (uint64_t f = frames; f-- > 0;) {
        CHECK_OK(qem_input_read(a, f, 1, target, one, frame, &e), &e);
        CHECK(memcmp(one, (const uint8_t *)expected + f * frame, frame) == 0);
    }
    free(all);
    free(one);
}

static void check_member(acquisition *a, const char *path)
{
    CHECK_EQ_U64(a->member_count, 1);
    CHECK(a->members[0].is_master);
    CHECK(strcmp(a->members[0].path, path) == 0);
    qem_error e;
    CHECK_OK(qem_input_authenticate(a, NULL, NULL, &e), &e);
    size_t n = 0;
    uint8_t *bytes = read_file(path, &n), digest[32];
    CHECK(bytes && qem_sha256_oneshot(bytes, n, digest) == 0);
    CHECK(memcmp(digest, a->members[0].sha256, 32) == 0);
    free(bytes);
}

static const char *fact_string(const acquisition *a, const char *key)
{
    return json_string_value(json_object_get(a->facts, key));
}

/* --- py4DSTEM 0.x: a uint16 datacube --------------------------------------------- */

#define G0 "/4DSTEM_experiment/data/datacubes/scan"

static void build_py4dstem(const char *path, uint16_t *cube, const uint64_t shape[4])
{
    uint64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    for (uint64_t i = 0; i < n; i++)
        cube[i] = (uint16_t)(i * 37 % 65521);
    CHECK(h5b_create(path, 0) == 0);
    CHECK(h5b_group(path, "/4DSTEM_experiment") == 0);
    CHECK(h5b_attr_int(path, "/4DSTEM_experiment", "emd_group_type", 2) == 0);
    CHECK(h5b_attr_int(path, "/4DSTEM_experiment", "version_major", 0) == 0);
    CHECK(h5b_attr_int(path, "/4DSTEM_experiment", "version_minor", 12) == 0);
    const uint64_t chunk[4] = {1, 2, shape[2], shape[3]};
    CHECK(dataset(path, G0 "/datacube", H5T_STD_U16BE, H5T_NATIVE_UINT16, 4, shape, chunk, cube) ==
          0);
    CHECK(h5b_attr_int(path, G0, "emd_group_type", 1) == 0);
    dims(path, G0, 1, 4, shape, rq);
}

static void test_py4dstem(void)
{
    const uint64_t shape[4] = {3, 4, 5, 6};
    uint16_t cube[3 * 4 * 5 * 6];
    const char *path = test_path("py4dstem.emd");
    build_py4dstem(path, cube, shape);
    acquisition *a = NULL;
    qem_error e;
    input_options o = options(NULL, 0, 0);
    CHECK_OK(open_acq(path, &o, &a, &e), &e);
    if (!a)
        return;
    CHECK(strcmp(a->family->name, "emd") == 0);
    for (int i = 0; i < 4; i++)
        CHECK_EQ_U64(a->shape[i], shape[i]);
    CHECK(a->sample_type == QEM_DTYPE_UINT16);
    CHECK_EQ_U64(a->flagged_count, 0);
    CHECK(a->calibration == NULL);
    check_frames(a, QEM_DTYPE_UINT16, cube);
    CHECK(fact_string(a, "emd_version") && strcmp(fact_string(a, "emd_version"), "0.12") == 0);
    CHECK(fact_string(a, "data_group") && strcmp(fact_string(a, "data_group"), G0) == 0);
    CHECK(fact_string(a, "array") && strcmp(fact_string(a, "array"), "datacube") == 0);
    json_t *d = json_object_get(a->facts, "dims");
    CHECK_EQ_U64(json_array_size(d), 4);
    for (size_t k = 0; k < 4; k++) {
        json_t *dk = json_array_get(d, k);
        CHECK(strcmp(json_string_value(json_object_get(dk, "name")), rq[k]) == 0);
        CHECK_EQ_U64(json_integer_value(json_object_get(dk, "values")), shape[k]);
        CHECK(json_real_value(json_object_get(dk, "step")) == 0.5);
    }
    check_member(a, path);
    qem_input_close(a);
}

/* --- EMD 1.0: int16 with negative values, float64 --------------------------------- */

static void build_emd1(const char *path, const char *group, hid_t file_type, hid_t mem_type,
                       const uint64_t shape[4], const void *data)
{
    CHECK(h5b_create(path, 0) == 0);
    CHECK(h5b_attr_string(path, "/", "emd_group_type", "file", 1) == 0);
    CHECK(h5b_attr_int(path, "/", "version_major", 1) == 0);
    CHECK(h5b_attr_int(path, "/", "version_minor", 0) == 0);
    CHECK(h5b_group(path, "/root") == 0);
    CHECK(h5b_attr_string(path, "/root", "emd_group_type", "root", 1) == 0);
    char name[256];
    snprintf(name, sizeof name, "%s/data", group);
    CHECK(dataset(path, name, file_type, mem_type, 4, shape, NULL, data) == 0);
    CHECK(h5b_attr_string(path, group, "emd_group_type", "array", 1) == 0);
    CHECK(h5b_attr_string(path, group, "python_class", "DataCube", 1) == 0);
    dims(path, group, 0, 4, shape, rq);
}

static void test_emd1(void)
{
    const uint64_t shape[4] = {2, 3, 4, 4};
    int16_t cube[2 * 3 * 4 * 4];
    float as_f32[2 * 3 * 4 * 4];
    for (size_t i = 0; i < sizeof cube / sizeof cube[0]; i++) {
        cube[i] = (int16_t)((int)i * 101 - 3000);
        as_f32[i] = (float)cube[i];
    }
    const char *path = test_path("emd1.emd");
    build_emd1(path, "/root/datacube", H5T_STD_I16LE, H5T_NATIVE_INT16, shape, cube);
    acquisition *a = NULL;
    qem_error e;
    input_options o = options(NULL, 0, 0);
    CHECK_OK(open_acq(path, &o, &a, &e), &e);
    if (!a)
        return;
    CHECK(strcmp(a->family->name, "emd") == 0);
    /* Signed values settled exactly: negative ones make it float32. */
    CHECK(a->read_values == INPUT_VALUES_INT16);
    CHECK(a->sample_type == QEM_DTYPE_FLOAT32);
    CHECK(strcmp(qem_input_read_as_name(a), "int16") == 0);
    check_frames(a, QEM_DTYPE_FLOAT32, as_f32);
    CHECK(strcmp(fact_string(a, "emd_version"), "1.0") == 0);
    json_t *d0 = json_array_get(json_object_get(a->facts, "dims"), 0);
    CHECK(strcmp(json_string_value(json_object_get(d0, "dataset")), "dim0") == 0);
    CHECK(strcmp(json_string_value(json_object_get(
                     json_object_get(a->facts, "group_attributes"), "python_class")),
                 "DataCube") == 0);
    qem_input_close(a);

    /* float64 that float32 holds exactly. */
    double f64[2 * 3 * 4 * 4];
    for (size_t i = 0; i < sizeof f64 / sizeof f64[0]; i++)
        f64[i] = (double)as_f32[i] / 4.0;
    float f64_as_f32[2 * 3 * 4 * 4];
    for (size_t i = 0; i < sizeof f64 / sizeof f64[0]; i++)
        f64_as_f32[i] = (float)f64[i];
    path = test_path("emd1_f64.emd");
    build_emd1(path, "/root/cube", H5T_IEEE_F64BE, H5T_NATIVE_DOUBLE, shape, f64);
    CHECK_OK(open_acq(path, &o, &a, &e), &e);
    if (a) {
        CHECK(a->read_values == INPUT_VALUES_FLOAT64);
        check_frames(a, QEM_DTYPE_FLOAT32, f64_as_f32);
        qem_input_close(a);
    }
    /* A value float32 cannot hold is refused with the range. */
    f64[5] = 0.1;
    path = test_path("emd1_f64_inexact.emd");
    build_emd1(path, "/root/cube", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, shape, f64);
    CHECK_STATUS(open_acq(path, &o, &a, &e), QEM_E_VALUE_RANGE, &e);
}

/* --- EMD 0.2: several groups, a 3D stack, the dataset option --------------------- */

static void test_emd02_choice(void)
{
    const char *path = test_path("emd02.emd");
    const uint64_t four[4] = {2, 2, 3, 3}, three[3] = {6, 2, 5};
    uint8_t a4[36], b4[36], s3[60];
    for (int i = 0; i < 36; i++) {
        a4[i] = (uint8_t)i;
        b4[i] = (uint8_t)(200 - i);
    }
    for (int i = 0; i < 60; i++)
        s3[i] = (uint8_t)(i * 3);
    CHECK(h5b_create(path, 0) == 0);
    CHECK(h5b_attr_string(path, "/", "version_major", "0", 1) == 0);
    CHECK(h5b_attr_string(path, "/", "version_minor", "2", 1) == 0);
    CHECK(dataset(path, "/signals/a/data", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, four, NULL, a4) == 0);
    CHECK(dataset(path, "/signals/b/data", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, four, NULL, b4) == 0);
    CHECK(dataset(path, "/signals/s/data", H5T_STD_U8LE, H5T_NATIVE_UINT8, 3, three, NULL, s3) ==
          0);
    /* A group without emd_group_type is no data group. */
    CHECK(dataset(path, "/other/data", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, four, NULL, a4) == 0);
    CHECK(h5b_group(path, "/microscope") == 0);
    CHECK(h5b_attr_string(path, "/microscope", "voltage", "300kV", 1) == 0);
    for (const char *g = "a"; g; g = g[0] == 'a' ? "b" : g[0] == 'b' ? "s" : NULL) {
        char group[64];
        snprintf(group, sizeof group, "/signals/%s", g);
        CHECK(h5b_attr_int(path, group, "emd_group_type", 1) == 0);
    }
    acquisition *a = NULL;
    qem_error e;
    input_options o = options(NULL, 0, 0);
    CHECK_STATUS(open_acq(path, &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "2 4D data groups") && strstr(e.message, "/signals/a (4D)") &&
          strstr(e.message, "/signals/b (4D)") && !strstr(e.message, "/other"));
    /* The group, its array, with or without slashes. */
    const char *names[] = {"/signals/b", "signals/b/", "/signals/b/data", "signals//b"};
    for (size_t k = 0; k < 4; k++) {
        o = options(names[k], 0, 0);
        CHECK_OK(open_acq(path, &o, &a, &e), &e);
        if (a) {
            CHECK(a->sample_type == QEM_DTYPE_UINT8);
            check_frames(a, QEM_DTYPE_UINT8, b4);
            CHECK(strcmp(fact_string(a, "emd_version"), "0.2") == 0);
            CHECK(strcmp(json_string_value(json_object_get(
                             json_object_get(a->facts, "microscope"), "voltage")),
                         "300kV") == 0);
            qem_input_close(a);
        }
    }
    o = options("/signals/nothing", 0, 0);
    CHECK_STATUS(open_acq(path, &o, &a, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, "/signals/s (3D)") != NULL);
    o = options("/signals/a", 4, 1);
    CHECK_STATUS(open_acq(path, &o, &a, &e), QEM_E_INVALID_ARGUMENT, &e);
    /* The 3D stack: (frames, rows, columns) with a scan shape. */
    o = options("/signals/s", 0, 0);
    CHECK_STATUS(open_acq(path, &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "--scan-shape") != NULL);
    o = options("/signals/s", 4, 2);
    CHECK_STATUS(open_acq(path, &o, &a, &e), QEM_E_LAYOUT, &e);
    o = options("/signals/s", 2, 3);
    CHECK_OK(open_acq(path, &o, &a, &e), &e);
    if (a) {
        CHECK_EQ_U64(a->shape[0], 2);
        CHECK_EQ_U64(a->shape[1], 3);
        CHECK_EQ_U64(a->shape[2], 2);
        CHECK_EQ_U64(a->shape[3], 5);
        check_frames(a, QEM_DTYPE_UINT8, s3);
        qem_input_close(a);
    }
}

/* --- refusals ---------------------------------------------------------------------- */

/* An EMD 0.2 file whose one data group /g holds `data` as described. */
static const char *emd_with(const char *name, hid_t file_type, hid_t mem_type, int rank,
                            const uint64_t *shape, const uint64_t *chunk, const void *data)
{
    const char *path = test_path(name);
    CHECK(h5b_create(path, 0) == 0);
    CHECK(h5b_attr_int(path, "/", "version_major", 0) == 0);
    CHECK(h5b_attr_int(path, "/", "version_minor", 2) == 0);
    CHECK(dataset(path, "/g/data", file_type, mem_type, rank, shape, chunk, data) == 0);
    CHECK(h5b_attr_int(path, "/g", "emd_group_type", 1) == 0);
    return path;
}

static void test_refusals(void)
{
    acquisition *a = NULL;
    qem_error e;
    input_options o = options(NULL, 0, 0);
    const uint64_t shape[4] = {2, 2, 4, 4};
    uint16_t v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (uint16_t)i;

    /* Declared but never written: the rest would read as fill values. */
    const char *p = emd_with("unwritten.emd", H5T_STD_U16LE, H5T_NATIVE_UINT16, 4, shape, NULL,
                             NULL);
    CHECK_STATUS(open_acq(p, &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "stores only 0") != NULL);
    /* Cut short: no longer an HDF5 file libhdf5 opens. */
    p = emd_with("cut.emd", H5T_STD_U16LE, H5T_NATIVE_UINT16, 4, shape, NULL, v);
    size_t n = 0;
    uint8_t *bytes = read_file(p, &n);
    FILE *f = fopen(test_path("cut_half.emd"), "wb");
    CHECK(bytes && f && fwrite(bytes, 1, n / 2, f) == n / 2);
    if (f)
        fclose(f);
    free(bytes);
    CHECK_STATUS(open_acq(test_path("cut_half.emd"), &o, &a, &e), QEM_E_IO, &e);
    /* Complex numbers (a compound of two floats). */
    hid_t complex = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(complex, "r", 0, H5T_IEEE_F32LE);
    H5Tinsert(complex, "i", 4, H5T_IEEE_F32LE);
    float pairs[128] = {0};
    p = emd_with("complex.emd", complex, complex, 4, shape, NULL, pairs);
    H5Tclose(complex);
    CHECK_STATUS(open_acq(p, &o, &a, &e), QEM_E_UNSUPPORTED, &e);
    CHECK(strstr(e.message, "compound records") != NULL);
    /* A detector past 2^26 pixels (chunked, never written: nothing stored). */
    const uint64_t huge[4] = {1u << 20, 1u << 20, 9000, 9000}, chunk[4] = {1, 1, 9000, 9000};
    p = emd_with("huge.emd", H5T_STD_U16LE, H5T_NATIVE_UINT16, 4, huge, chunk, NULL);
    CHECK_STATUS(open_acq(p, &o, &a, &e), QEM_E_LIMIT, &e);
    /* A scan whose byte count overflows 64 bits. */
    const uint64_t wide[4] = {1ull << 31, 1ull << 31, 64, 64}, wchunk[4] = {1, 1, 64, 64};
    p = emd_with("overflow.emd", H5T_STD_U16LE, H5T_NATIVE_UINT16, 4, wide, wchunk, NULL);
    CHECK_STATUS(open_acq(p, &o, &a, &e), QEM_E_LIMIT, &e);
    /* A 2D array, named, and as the file's only data group. */
    const uint64_t plane[2] = {2, 2};
    p = emd_with("two_d.emd", H5T_STD_U16LE, H5T_NATIVE_UINT16, 2, plane, NULL, v);
    o = options("/g", 0, 0);
    CHECK_STATUS(open_acq(p, &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "2 dimensions") != NULL);
    o = options(NULL, 0, 0);
    CHECK_STATUS(open_acq(p, &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "holds no 4D data group") != NULL);
    /* The array is a link to another file: never followed. */
    const char *other = emd_with("other.emd", H5T_STD_U16LE, H5T_NATIVE_UINT16, 4, shape, NULL, v);
    p = test_path("linked.emd");
    CHECK(h5b_create(p, 0) == 0);
    CHECK(h5b_attr_int(p, "/", "version_major", 0) == 0);
    CHECK(h5b_group(p, "/g") == 0);
    CHECK(h5b_attr_int(p, "/g", "emd_group_type", 1) == 0);
    CHECK(h5b_external_link(p, "/g/data", other, "/g/data") == 0);
    o = options(NULL, 0, 0);
    CHECK_STATUS(open_acq(p, &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "/g (a link)") != NULL);
    o = options("/g", 0, 0);
    CHECK_STATUS(open_acq(p, &o, &a, &e), QEM_E_UNSUPPORTED, &e);
    CHECK(strstr(e.message, "another file") != NULL);
    /* Without version attributes it is a plain HDF5 file. */
    p = test_path("plain.h5");
    CHECK(h5b_create(p, 0) == 0);
    CHECK(dataset(p, "/g/data", H5T_STD_U16LE, H5T_NATIVE_UINT16, 4, shape, NULL, v) == 0);
    CHECK(h5b_attr_int(p, "/g", "emd_group_type", 1) == 0);
    o = options(NULL, 0, 0);
    CHECK_OK(open_acq(p, &o, &a, &e), &e);
    if (a) {
        CHECK(strcmp(a->family->name, "hdf5") == 0);
        qem_input_close(a);
    }
}

/* --- HyperSpy's files ------------------------------------------------------------- */

static void test_real_files(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/emd_files/Si100_4D.emd", QEM_HYPERSPY_IO);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "HyperSpy's EMD files are missing (%s)\n", path);
        CHECK(0);
        return;
    }
    acquisition *a = NULL;
    qem_error e;
    input_options o = options(NULL, 0, 0);
    CHECK_STATUS(open_acq(path, &o, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "CBED_array_depth0000") && strstr(e.message, "CBED_array_depth0001"));
    o = options("/4DSTEM_simulation/data/datacubes/CBED_array_depth0000", 0, 0);
    CHECK_OK(open_acq(path, &o, &a, &e), &e);
    if (a) {
        CHECK(strcmp(a->family->name, "emd") == 0);
        CHECK(a->sample_type == QEM_DTYPE_FLOAT32);
        const uint64_t want[4] = {11, 11, 8, 8};
        for (int i = 0; i < 4; i++)
            CHECK_EQ_U64(a->shape[i], want[i]);
        CHECK(strcmp(fact_string(a, "emd_version"), "0.5") == 0);
        CHECK(strcmp(fact_string(a, "version_group"), "/4DSTEM_simulation") == 0);
        json_t *dims_fact = json_object_get(a->facts, "dims");
        CHECK(strcmp(json_string_value(json_object_get(json_array_get(dims_fact, 0), "name")),
                     "R_x") == 0);
        CHECK(strcmp(json_string_value(json_object_get(json_array_get(dims_fact, 3), "name")),
                     "Q_y") == 0);
        CHECK(json_object_get(a->facts, "simulation_parameters") != NULL);
        float *frames = malloc(121 * 64 * sizeof *frames);
        CHECK_OK(qem_input_read(a, 0, 121, QEM_DTYPE_FLOAT32, frames, 121 * 64 * 4, &e), &e);
        int finite = 1;
        for (int i = 0; i < 121 * 64; i++)
            finite &= isfinite(frames[i]);
        CHECK(finite);
        free(frames);
        check_member(a, path);
        qem_input_close(a);
    }
    snprintf(path, sizeof path, "%s/emd_files/example_signal.emd", QEM_HYPERSPY_IO);
    o = options("/signals/__unnamed__", 3, 1);
    CHECK_OK(open_acq(path, &o, &a, &e), &e);
    if (a) {
        /* int32 0..26 as stored: settled to uint16. */
        uint16_t want[27], got[27];
        for (int i = 0; i < 27; i++)
            want[i] = (uint16_t)i;
        CHECK(a->read_values == INPUT_VALUES_INT32 && a->sample_type == QEM_DTYPE_UINT16);
        CHECK_OK(qem_input_read(a, 0, 3, QEM_DTYPE_UINT16, got, sizeof got, &e), &e);
        CHECK(memcmp(got, want, sizeof got) == 0);
        qem_input_close(a);
    }
}

int main(void)
{
    test_py4dstem();
    test_emd1();
    test_emd02_choice();
    test_refusals();
    test_real_files();
    return test_finish("unit_input_emd");
}
