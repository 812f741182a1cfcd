/* The Gatan Digital Micrograph family (lib/input/dm.c). HyperSpy's own
 * DM3/DM4 test files (Debian python3-hyperspy, QEM_HYPERSPY_IO) are read
 * bit for bit against the values HyperSpy's generator wrote into them
 * (tests/io/generate_dm_testing_files.py: 1, 2, 3, ... in C order); files
 * built here (tests/common/dm_build.c, from the published format
 * descriptions) cover 4D images, both versions, both byte orders, every
 * sample type, calibration and facts, hashing while reading; one refusal
 * per rule. DM files name no companion files, so there is no containment
 * case here. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/sha256.h"
#include "dm_build.h"
#include "input/input.h"
#include "test_util.h"

#ifndef QEM_HYPERSPY_IO_DEFAULT
#define QEM_HYPERSPY_IO_DEFAULT "/usr/lib/python3/dist-packages/hyperspy/tests/io"
#endif

static const char *hyperspy_io(void)
{
    const char *env = getenv("QEM_HYPERSPY_IO");
    return env && *env ? env : QEM_HYPERSPY_IO_DEFAULT;
}

/* Opens `path` with scan shape (rows, columns) (0, 0: the file's). */
static qem_status open_dm(const char *path, uint64_t rows, uint64_t columns, acquisition **a,
                          qem_error *e)
{
    input_options o;
    memset(&o, 0, sizeof o);
    qem_error_clear(e);
    o.scan_shape[0] = rows;
    o.scan_shape[1] = columns;
    return qem_input_open(path, &o, a, e);
}

/* Every frame read as the stored type, as doubles. */
static double *read_all(acquisition *a, qem_error *e)
{
    const uint64_t n = a->shape[0] * a->shape[1] * a->shape[2] * a->shape[3];
    const qem_dtype t = qem_input_stored_dtype(a);
    const size_t item = qem_dtype_size(t);
    uint8_t *raw = malloc((size_t)n * item + 1);
    double *out = malloc((size_t)n * sizeof *out + 1);
    CHECK(raw && out);
    if (!raw || !out)
        return free(raw), free(out), NULL;
    CHECK_OK(qem_input_read(a, 0, a->shape[0] * a->shape[1], t, raw, (size_t)n * item, e), e);
    for (uint64_t k = 0; k < n; k++) {
        if (t == QEM_DTYPE_UINT8)
            out[k] = raw[k];
        else if (t == QEM_DTYPE_UINT16)
            out[k] = ((uint16_t *)raw)[k];
        else
            out[k] = ((float *)raw)[k];
    }
    free(raw);
    return out;
}

/* --- HyperSpy's files ------------------------------------------------------- */

static void test_hyperspy_files(void)
{
    static const struct {
        int64_t key;
        qem_dtype stored;
        const char *read_as;
    } ok[] = {{1, QEM_DTYPE_UINT16, "int16"},    {2, QEM_DTYPE_FLOAT32, "float32"},
              {6, QEM_DTYPE_UINT8, "uint8"},     {7, QEM_DTYPE_UINT16, "int32"},
              {9, QEM_DTYPE_UINT16, "int8"},     {10, QEM_DTYPE_UINT16, "uint16"},
              {11, QEM_DTYPE_UINT16, "uint32"},  {12, QEM_DTYPE_FLOAT32, "float64"}};
    char path[1024];
    for (int version = 3; version <= 4; version++)
        for (int dims = 2; dims <= 3; dims++)
            for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
                snprintf(path, sizeof path, "%s/dm%d_%dD_data/test-%lld.dm%d", hyperspy_io(),
                         version, dims, (long long)ok[i].key, version);
                acquisition *a = NULL;
                qem_error e;
                /* A 3D stack of 2 frames: its scan shape is given. */
                CHECK_OK(open_dm(path, dims == 3 ? 2 : 0, dims == 3 ? 1 : 0, &a, &e), &e);
                if (!a)
                    continue;
                CHECK(!strcmp(a->family->name, "dm"));
                CHECK_EQ_U64(a->shape[0], dims == 3 ? 2 : 1);
                CHECK_EQ_U64(a->shape[1], 1);
                CHECK_EQ_U64(a->shape[2], 2);
                CHECK_EQ_U64(a->shape[3], 2);
                CHECK(qem_input_stored_dtype(a) == ok[i].stored);
                CHECK(!strcmp(qem_input_read_as_name(a), ok[i].read_as));
                CHECK_EQ_U64(a->member_count, 1);
                double *v = read_all(a, &e);
                const uint64_t n = dims == 3 ? 8 : 4;
                for (uint64_t k = 0; v && k < n; k++)
                    CHECK(v[k] == (double)(k + 1));
                free(v);
                json_t *f = a->facts;
                CHECK_EQ_U64(json_integer_value(json_object_get(f, "dm_version")), version);
                CHECK_EQ_U64(json_integer_value(json_object_get(f, "image")), 1);
                CHECK_EQ_U64(json_integer_value(json_object_get(f, "data_type")), ok[i].key);
                CHECK(!strcmp(json_string_value(json_object_get(f, "name")), "test"));
                CHECK(json_integer_value(json_array_get(json_object_get(f, "thumbnails"), 0)) ==
                      0);
                qem_input_close(a);
            }
    /* Complex, RGB(A), bool: refused naming the type. */
    static const int64_t refused[] = {3, 5, 13, 14, 23, 27, 28};
    for (int version = 3; version <= 4; version++)
        for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
            if (version == 3 && refused[i] > 23)
                continue;
            snprintf(path, sizeof path, "%s/dm%d_3D_data/test-%lld.dm%d", hyperspy_io(), version,
                     (long long)refused[i], version);
            acquisition *a = NULL;
            qem_error e;
            CHECK_STATUS(open_dm(path, 2, 1, &a, &e), QEM_E_UNSUPPORTED, &e);
            CHECK(strstr(e.message, "complex") || strstr(e.message, "RGB") ||
                  strstr(e.message, "bool"));
        }
    /* A 3D stack without its scan shape; spectra and spectrum images. */
    acquisition *a = NULL;
    qem_error e;
    snprintf(path, sizeof path, "%s/dm3_3D_data/test-10.dm3", hyperspy_io());
    CHECK_STATUS(open_dm(path, 0, 0, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "--scan-shape") != NULL);
    snprintf(path, sizeof path, "%s/dm3_1D_data/test-10.dm3", hyperspy_io());
    CHECK_STATUS(open_dm(path, 0, 0, &a, &e), QEM_E_UNSUPPORTED, &e);
    CHECK(strstr(e.message, "spectrum (1 dimension)") != NULL);
    snprintf(path, sizeof path, "%s/dm4_3D_data/EELS_SI.dm4", hyperspy_io());
    CHECK_STATUS(open_dm(path, 0, 0, &a, &e), QEM_E_UNSUPPORTED, &e);
    CHECK(strstr(e.message, "Spectrum image") != NULL);
    /* A diffraction pattern: its 1/nm calibration becomes the detector's. */
    snprintf(path, sizeof path, "%s/dm3_2D_data/test_diffraction_pattern.dm3", hyperspy_io());
    CHECK_OK(open_dm(path, 0, 0, &a, &e), &e);
    if (a) {
        json_t *q = json_object_get(a->calibration, "quantities");
        json_t *row = json_object_get(q, "detector_sampling_row");
        CHECK(!strcmp(json_string_value(json_object_get(row, "unit")), "1/nm"));
        CHECK(fabs(json_real_value(json_object_get(row, "value")) - 0.17443285882472992) < 1e-9);
        CHECK(json_object_get(q, "scan_sampling_row") == NULL);
        CHECK(json_object_get(json_object_get(a->facts, "image_tags"),
                              "Microscope Info/Voltage") != NULL);
        qem_input_close(a);
    }
}

/* --- built files ------------------------------------------------------------ */

static void base_options(dmb_options *o, int version, int64_t type)
{
    memset(o, 0, sizeof *o);
    o->version = version;
    o->data_type = type;
    o->order_swapped = -1;
    o->thumbnail = 1;
}

/* The 4D image of every sample type, both versions and byte orders: scan
 * 2 x 4, detector 3 x 5 (DM order 5, 3, 4, 2). */
static void test_built_4d(void)
{
    static const int64_t types[] = {1, 2, 6, 7, 9, 10, 11, 12};
    const char *path = test_path("four.dm4");
    for (int version = 3; version <= 4; version++)
        for (int big = 0; big <= 1; big++)
            for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
                dmb_options o;
                base_options(&o, version, types[i]);
                o.big_endian = big;
                o.ndims = 4;
                o.dims[0] = 5, o.dims[1] = 3, o.dims[2] = 4, o.dims[3] = 2;
                o.order_swapped = 1;
                o.units[0] = o.units[1] = "1/nm";
                o.scales[0] = o.scales[1] = 0.125;
                o.units[2] = o.units[3] = "\xc2\xb5m";
                o.scales[2] = o.scales[3] = 0.002;
                o.voltage = 300000;
                CHECK(dmb_write(path, &o) == 0);
                acquisition *a = NULL;
                qem_error e;
                CHECK_OK(open_dm(path, 0, 0, &a, &e), &e);
                if (!a)
                    continue;
                CHECK_EQ_U64(a->shape[0], 2);
                CHECK_EQ_U64(a->shape[1], 4);
                CHECK_EQ_U64(a->shape[2], 3);
                CHECK_EQ_U64(a->shape[3], 5);
                /* The value at C index k of (scan rows, scan columns,
                 * detector rows, detector columns) is the k-th written. */
                double *v = read_all(a, &e);
                for (uint64_t k = 0; v && k < 120; k++) {
                    uint8_t raw[8];
                    dmb_value(types[i], k, raw);
                    double want;
                    switch (types[i]) {
                    case 1: want = *(int16_t *)raw; break;
                    case 2: want = *(float *)raw; break;
                    case 6: want = raw[0]; break;
                    case 7: want = *(int32_t *)raw; break;
                    case 9: want = *(int8_t *)raw; break;
                    case 10: want = *(uint16_t *)raw; break;
                    case 11: want = *(uint32_t *)raw; break;
                    default: want = *(double *)raw; break;
                    }
                    CHECK(v[k] == want);
                }
                free(v);
                json_t *q = json_object_get(a->calibration, "quantities");
                json_t *scan = json_object_get(q, "scan_sampling_column");
                CHECK(!strcmp(json_string_value(json_object_get(scan, "unit")), "nm"));
                CHECK(fabs(json_real_value(json_object_get(scan, "value")) - 2.0) < 1e-6);
                CHECK(json_object_get(q, "detector_sampling_row") != NULL);
                json_t *f = a->facts;
                CHECK_EQ_U64(json_integer_value(json_object_get(f, "data_order_swapped")), 1);
                CHECK(!strcmp(json_string_value(json_object_get(f, "byte_order")),
                              big ? "big-endian" : "little-endian"));
                CHECK(json_real_value(json_object_get(json_object_get(f, "image_tags"),
                                                      "Microscope Info/Voltage")) == 300000);
                CHECK(!strcmp(json_string_value(json_object_get(
                                  json_object_get(f, "image_tags"), "Acquisition/Device/Name")),
                              "K3"));
                qem_input_close(a);
                /* A scan shape given must agree with the file's. */
                CHECK_STATUS(open_dm(path, 4, 2, &a, &e), QEM_E_INVALID_ARGUMENT, &e);
                CHECK_OK(open_dm(path, 2, 4, &a, &e), &e);
                qem_input_close(a);
            }
}

/* A 3D stack read as a save reads it: hashed while read, the digest the
 * file's own. */
static void test_stream_hash(void)
{
    const char *path = test_path("stack.dm3");
    dmb_options o;
    base_options(&o, 3, 10);
    o.big_endian = 1;
    o.ndims = 3;
    o.dims[0] = 7, o.dims[1] = 6, o.dims[2] = 12;
    CHECK(dmb_write(path, &o) == 0);
    acquisition *a = NULL;
    qem_error e;
    CHECK_OK(open_dm(path, 3, 4, &a, &e), &e);
    if (!a)
        return;
    CHECK_OK(qem_input_stream_begin(a, &e), &e);
    uint16_t frame[42 * 2];
    for (uint64_t f = 0; f < 12; f += 2) {
        CHECK_OK(qem_input_read(a, f, 2, QEM_DTYPE_UINT16, frame, sizeof frame, &e), &e);
        for (uint64_t p = 0; p < 84; p++) {
            uint16_t want;
            dmb_value(10, f * 42 + p, &want);
            CHECK(frame[p] == want);
        }
    }
    CHECK_OK(qem_input_stream_finish(a, NULL, NULL, &e), &e);
    size_t n = 0;
    uint8_t *bytes = read_file(path, &n), digest[32];
    CHECK(bytes && qem_sha256_oneshot(bytes, n, digest) == 0);
    CHECK(bytes && memcmp(digest, a->members[0].sha256, 32) == 0);
    free(bytes);
    qem_input_close(a);
}

/* --- refusals ---------------------------------------------------------------- */

static void expect(const dmb_options *o, uint64_t rows, uint64_t columns, qem_status want,
                   const char *words)
{
    const char *path = test_path("refused.dm");
    CHECK(dmb_write(path, o) == 0);
    acquisition *a = NULL;
    qem_error e;
    CHECK_STATUS(open_dm(path, rows, columns, &a, &e), want, &e);
    if (words && !strstr(e.message, words)) {
        CHECK(!"message");
        fprintf(stderr, "  '%s' lacks '%s'\n", e.message, words);
    }
    qem_input_close(a);
}

static void test_refusals(void)
{
    dmb_options o;
    const char *path = test_path("cut.dm4");
    /* Truncated: at every few bytes from the end of the tags back. */
    base_options(&o, 4, 10);
    o.ndims = 2, o.dims[0] = 8, o.dims[1] = 8;
    CHECK(dmb_write(path, &o) == 0);
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    /* (the 8 bytes after the tags are not part of them) */
    for (off_t cut = 9; cut < sb.st_size; cut += 97) {
        CHECK(truncate(path, sb.st_size - cut) == 0);
        acquisition *a = NULL;
        qem_error e;
        CHECK_STATUS(open_dm(path, 0, 0, &a, &e), QEM_E_FILE_LENGTH, &e);
        CHECK(dmb_write(path, &o) == 0);
    }
    /* Inconsistent. */
    base_options(&o, 3, 10);
    o.ndims = 2, o.dims[0] = 8, o.dims[1] = 8;
    o.extra_values = 1;
    expect(&o, 0, 0, QEM_E_LAYOUT, "does not hold the 64 uint16 values");
    o.extra_values = 0;
    o.bad_mark = 1;
    expect(&o, 0, 0, QEM_E_LAYOUT, "'%%%%' mark");
    o.bad_mark = 0;
    o.no_data_type = 1;
    expect(&o, 0, 0, QEM_E_LAYOUT, "no DataType");
    o.no_data_type = 0;
    o.stated_dims[0] = 8, o.stated_dims[1] = 0;
    expect(&o, 0, 0, QEM_E_LAYOUT, "empty dimension");
    memset(o.stated_dims, 0, sizeof o.stated_dims);
    base_options(&o, 4, 10);
    o.ndims = 2, o.dims[0] = 8, o.dims[1] = 8;
    o.group_len_delta = 1;
    expect(&o, 0, 0, QEM_E_LAYOUT, "stated length");
    /* Sizes that overflow 64 bits, and stated sizes the Data lacks. */
    base_options(&o, 3, 11);
    o.ndims = 4, o.dims[0] = 2, o.dims[1] = 2, o.dims[2] = 1, o.dims[3] = 1;
    o.order_swapped = 1;
    for (int k = 0; k < 4; k++)
        o.stated_dims[k] = 0x7fffffff;
    expect(&o, 0, 0, QEM_E_LIMIT, "beyond 64 bits");
    o.stated_dims[2] = o.stated_dims[3] = 1;
    expect(&o, 0, 0, QEM_E_LAYOUT, "does not hold");
    /* Unsupported variants, each named. */
    base_options(&o, 4, 10);
    o.ndims = 4, o.dims[0] = 2, o.dims[1] = 2, o.dims[2] = 2, o.dims[3] = 2;
    expect(&o, 0, 0, QEM_E_UNSUPPORTED, "older Digital Micrograph layout");
    o.order_swapped = 0;
    expect(&o, 0, 0, QEM_E_UNSUPPORTED, "older Digital Micrograph layout");
    o.order_swapped = 1;
    o.ndims = 5, o.dims[4] = 2;
    expect(&o, 0, 0, QEM_E_UNSUPPORTED, "more than 4 dimensions");
    o.ndims = 3;
    o.order_swapped = -1;
    o.format = "Spectrum image";
    expect(&o, 2, 1, QEM_E_UNSUPPORTED, "spectrum image");
    o.format = NULL;
    o.data_type = 14;
    expect(&o, 2, 1, QEM_E_UNSUPPORTED, "bool samples (DataType 14)");
    o.data_type = 99;
    expect(&o, 2, 1, QEM_E_UNSUPPORTED, "unknown samples (DataType 99)");
    /* Depth and byte-order flag. */
    base_options(&o, 3, 6);
    o.ndims = 2, o.dims[0] = 2, o.dims[1] = 2;
    o.nest = 70;
    expect(&o, 0, 0, QEM_E_LIMIT, "more than 64 deep");
    o.nest = 0;
    path = test_path("flag.dm3");
    CHECK(dmb_write(path, &o) == 0);
    FILE *f = fopen(path, "r+b");
    CHECK(f && fseek(f, 11, SEEK_SET) == 0 && fputc(2, f) == 2 && fclose(f) == 0);
    acquisition *a = NULL;
    qem_error e;
    CHECK_STATUS(open_dm(path, 0, 0, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "byte order flag is 2") != NULL);
    /* A tag that is neither group nor data: the root's first tag. */
    CHECK(dmb_write(path, &o) == 0);
    f = fopen(path, "r+b");
    CHECK(f && fseek(f, 18, SEEK_SET) == 0 && fputc(7, f) == 7 && fclose(f) == 0);
    CHECK_STATUS(open_dm(path, 0, 0, &a, &e), QEM_E_LAYOUT, &e);
    CHECK(strstr(e.message, "neither a group") != NULL);
    /* A file that changed after it was described. */
    base_options(&o, 3, 10);
    o.ndims = 2, o.dims[0] = 4, o.dims[1] = 4;
    path = test_path("changed.dm3");
    CHECK(dmb_write(path, &o) == 0);
    CHECK_OK(open_dm(path, 0, 0, &a, &e), &e);
    if (a) {
        CHECK(truncate(path, 100) == 0);
        uint16_t frame[16];
        CHECK_STATUS(qem_input_read(a, 0, 1, QEM_DTYPE_UINT16, frame, sizeof frame, &e),
                     QEM_E_CHANGED, &e);
        qem_input_close(a);
    }
}

int main(void)
{
    test_hyperspy_files();
    test_built_4d();
    test_stream_hash();
    test_refusals();
    return test_finish("unit_input_dm");
}
