/* The Thermo Fisher/FEI TIA family (lib/input/tia.c). HyperSpy's real
 * files (QEM_HYPERSPY_IO, Debian python3-hyperspy) are read and compared
 * bit for bit with their elements decoded here from the offset array;
 * files built by tests/common/tia_build.c (from the published layout)
 * cover every sample type, both offset sizes, scan shapes from the
 * dimension arrays or the caller, an interrupted series, the .emi
 * companion and opening an .emi; one refusal per rule; members hashed
 * while read; a file changed during the read. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/sha256.h"
#include "input/input.h"
#include "input_check.h"
#include "test_util.h"
#include "tia_build.h"

/* --- helpers ------------------------------------------------------------------ */

static const char *hyperspy_io(void)
{
    const char *d = getenv("QEM_HYPERSPY_IO");
    return d && *d ? d : "/usr/lib/python3/dist-packages/hyperspy/tests/io";
}

static uint64_t frames_of(const acquisition *a)
{
    return a->shape[0] * a->shape[1];
}

static uint64_t pixels_of(const acquisition *a)
{
    return a->shape[2] * a->shape[3];
}

static void *read_all(acquisition *a, size_t *size)
{
    const qem_dtype target = qem_input_stored_dtype(a);
    *size = (size_t)(frames_of(a) * pixels_of(a) * qem_dtype_size(target));
    void *out = malloc(*size ? *size : 1);
    qem_error e = {0};
    if (out) {
        const qem_status st = qem_input_read(a, 0, frames_of(a), target, out, *size, &e);
        CHECK_OK(st, &e);
        if (st != QEM_OK) {
            free(out);
            return NULL;
        }
    }
    return out;
}

static void file_sha256(const char *path, uint8_t d[32])
{
    size_t n = 0;
    uint8_t *data = read_file(path, &n);
    CHECK(data != NULL);
    CHECK(qem_sha256_oneshot(data ? data : (const uint8_t *)"", data ? n : 0, d) == 0);
    free(data);
}

/* Reading every frame in order (as a save does) hashes every member to
 * its file's SHA-256, the .ser by the reads themselves. */
static void check_streamed(acquisition *a)
{
    qem_error e = {0};
    CHECK_OK(qem_input_stream_begin(a, &e), &e);
    const qem_dtype target = qem_input_stored_dtype(a);
    const size_t frame = (size_t)(pixels_of(a) * qem_dtype_size(target));
    uint8_t *buf = malloc(frame * 2);
    for (uint64_t f = 0; buf && f < frames_of(a); f += 2) {
        const uint64_t n = frames_of(a) - f < 2 ? frames_of(a) - f : 2;
        CHECK_OK(qem_input_read(a, f, n, target, buf, frame * n, &e), &e);
    }
    free(buf);
    CHECK_OK(qem_input_stream_finish(a, NULL, NULL, &e), &e);
    CHECK(a->authenticated);
    for (size_t i = 0; i < a->member_count; i++) {
        uint8_t d[32];
        file_sha256(a->members[i].path, d);
        CHECK(a->members[i].hashed && memcmp(a->members[i].sha256, d, 32) == 0);
    }
}

static const char *fact_string(const json_t *facts, const char *key)
{
    return json_string_value(json_object_get(facts, key));
}

static double quantity(const acquisition *a, const char *name, const char *unit)
{
    json_t *q = json_object_get(json_object_get(a->calibration, "quantities"), name);
    if (!q || strcmp(json_string_value(json_object_get(q, "unit")), unit) != 0)
        return NAN;
    return json_number_value(json_object_get(q, "value"));
}

static uint64_t le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

/* --- the real files -------------------------------------------------------------- */

/* Element k's samples of a real .ser, found here through its offset
 * array, as doubles (types 2 uint16, 6 int32, 7 float32). */
static double real_sample(const uint8_t *f, size_t n, uint64_t k, uint64_t pixel, int *ok)
{
    const unsigned os = le(f + 4, 2) <= 0x0210 ? 4 : 8;
    const uint64_t array = le(f + 22, os), at = le(f + array + k * os, os);
    const unsigned type = (unsigned)le(f + at + 40, 2);
    const size_t item = type == 2 ? 2 : 4;
    const uint64_t p = at + 50 + pixel * item;
    if (p + item > n) {
        *ok = 0;
        return 0;
    }
    const uint64_t v = le(f + p, item);
    if (type == 7) {
        const uint32_t bits = (uint32_t)v;
        float x;
        memcpy(&x, &bits, sizeof x);
        return x;
    }
    return type == 6 ? (double)(int32_t)(uint32_t)v : (double)v;
}

/* Every frame of a real file equals its elements decoded here. */
static void check_real_values(acquisition *a, const char *path)
{
    size_t n = 0, size = 0;
    uint8_t *f = read_file(path, &n);
    void *got = read_all(a, &size);
    CHECK(f && got);
    int ok = f && got;
    const qem_dtype t = qem_input_stored_dtype(a);
    for (uint64_t k = 0; ok && k < frames_of(a); k++)
        for (uint64_t p = 0; ok && p < pixels_of(a); p++) {
            const double want = real_sample(f, n, k, p, &ok);
            const uint64_t i = k * pixels_of(a) + p;
            const double have = t == QEM_DTYPE_UINT16 ? ((const uint16_t *)got)[i]
                                                      : ((const float *)got)[i];
            ok = ok && have == want;
        }
    CHECK(ok);
    free(got);
    free(f);
}

static void test_real_files(void)
{
    char path[2048];
    /* The 5 x 5 scan of 256 x 256 int32 diffraction patterns. */
    snprintf(path, sizeof path, "%s/FEI_new/16x16-diffraction_imagel_5x5x256x256_EDS_2.ser",
             hyperspy_io());
    acquisition *a = ic_open(path, NULL);
    if (!a)
        return;
    CHECK(!strcmp(a->family->name, "tia"));
    CHECK_EQ_U64(a->shape[0], 5);
    CHECK_EQ_U64(a->shape[1], 5);
    CHECK_EQ_U64(a->shape[2], 256);
    CHECK_EQ_U64(a->shape[3], 256);
    CHECK(!strcmp(qem_input_read_as_name(a), "int32"));
    CHECK(a->sample_type == QEM_DTYPE_FLOAT32); /* -846 .. 649 */
    CHECK_EQ_U64(a->member_count, 2);
    CHECK(a->members[0].is_master && strstr(a->members[0].path, "_EDS_2.ser"));
    CHECK(!a->members[1].is_master && strstr(a->members[1].path, "_EDS.emi"));
    CHECK(!strcmp(fact_string(a->facts, "series_version"), "0x0220"));
    CHECK(!strcmp(fact_string(a->facts, "emi_file"),
                  "16x16-diffraction_imagel_5x5x256x256_EDS.emi"));
    json_t *emi = json_object_get(a->facts, "emi");
    CHECK(!strcmp(fact_string(emi, "microscope"), "Microscope TalosF200X 200 kV D6308 XTwin"));
    CHECK(!strcmp(fact_string(emi, "camera_length_m"), "0.260"));
    CHECK_EQ_U64(json_integer_value(json_object_get(emi, "documents")), 9);
    CHECK(fabs(quantity(a, "electron_source/accelerating_voltage", "kV") - 200) < 1e-12);
    CHECK(fabs(quantity(a, "imaging_system/camera_length", "m") - 0.26) < 1e-12);
    CHECK(fabs(quantity(a, "scan_sampling_row", "m") - 1.873900423719105e-09) < 1e-20);
    CHECK(fabs(quantity(a, "scan_sampling_column", "m") - 1.873900423719105e-09) < 1e-20);
    check_real_values(a, path);
    check_streamed(a);
    qem_input_close(a);

    /* A uint16 series of 5 (a stack: the caller's scan shape), 32-bit offsets. */
    snprintf(path, sizeof path, "%s/FEI_old/16x16x5_STEM_BF_DF_preview_1.ser", hyperspy_io());
    ic_refused(path, NULL, QEM_E_LAYOUT, "--scan-shape");
    input_options o = {0};
    o.scan_shape[0] = 5;
    o.scan_shape[1] = 1;
    a = ic_open(path, &o);
    if (a) {
        CHECK(a->sample_type == QEM_DTYPE_UINT16 && a->read_values == INPUT_VALUES_AS_STORED);
        CHECK(!strcmp(fact_string(a->facts, "offsets"), "32-bit"));
        check_real_values(a, path);
        check_streamed(a);
        qem_input_close(a);
    }
    /* Interrupted: 5 valid elements of 200. */
    snprintf(path, sizeof path, "%s/FEI_old/03_Scanning Preview_1.ser", hyperspy_io());
    ic_refused(path, NULL, QEM_E_LAYOUT, "holds 5 frames");
    a = ic_open(path, &o);
    if (a) {
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "total_elements")), 200);
        check_real_values(a, path);
        qem_input_close(a);
    }
    /* float32, opened through its .emi: the same acquisition as its .ser. */
    snprintf(path, sizeof path, "%s/FEI_old/64x64_TEM_images_acquire.emi", hyperspy_io());
    a = ic_open(path, NULL);
    snprintf(path, sizeof path, "%s/FEI_old/64x64_TEM_images_acquire_1.ser", hyperspy_io());
    acquisition *b = ic_open(path, NULL);
    if (a && b) {
        CHECK(a->sample_type == QEM_DTYPE_FLOAT32);
        CHECK(!strcmp(a->members[0].path, b->members[0].path) &&
              !strcmp(a->members[1].path, b->members[1].path));
        check_real_values(a, path);
    }
    qem_input_close(a);
    qem_input_close(b);
    /* Spectra and an .emi of two series. */
    snprintf(path, sizeof path, "%s/FEI_old/16x16-spectrum_image-5x5x1024_1.ser", hyperspy_io());
    ic_refused(path, NULL, QEM_E_UNSUPPORTED, "1D spectra");
    snprintf(path, sizeof path, "%s/FEI_new/16x16-line_profile_horizontal_5x128x128_EDS.emi",
             hyperspy_io());
    ic_refused(path, NULL, QEM_E_UNSUPPORTED, "_EDS_1.ser', '16x16-line_profile_horizontal_5x128x");
}

/* --- built files ------------------------------------------------------------------ */

/* The frames of a built file as qem stores them equal tiab_value. */
static void check_built(const char *path, const tiab_options *t, const input_options *o,
                        uint64_t rows, uint64_t cols, qem_dtype stored)
{
    acquisition *a = ic_open(path, o);
    if (!a)
        return;
    CHECK_EQ_U64(a->shape[0], rows);
    CHECK_EQ_U64(a->shape[1], cols);
    CHECK_EQ_U64(a->shape[2], t->size_y ? t->size_y : 6);
    CHECK_EQ_U64(a->shape[3], t->size_x ? t->size_x : 8);
    CHECK(qem_input_stored_dtype(a) == stored);
    size_t size = 0;
    void *got = read_all(a, &size);
    int same = got != NULL;
    for (uint64_t k = 0; same && k < frames_of(a); k++)
        for (uint64_t p = 0; same && p < pixels_of(a); p++) {
            const uint64_t i = k * pixels_of(a) + p;
            const double want = tiab_value(t, k, p);
            const double have = stored == QEM_DTYPE_UINT8    ? ((const uint8_t *)got)[i]
                                : stored == QEM_DTYPE_UINT16 ? ((const uint16_t *)got)[i]
                                                             : ((const float *)got)[i];
            same = have == want;
        }
    CHECK(same);
    free(got);
    check_streamed(a);
    qem_input_close(a);
}

static void test_types(void)
{
    const char *p = strdup(test_path("types_1.ser"));
    static const struct {
        uint16_t type;
        int negative;
        qem_dtype stored;
    } cases[] = {
        {1, 0, QEM_DTYPE_UINT8},    {2, 0, QEM_DTYPE_UINT16},  {3, 0, QEM_DTYPE_UINT16},
        {4, 0, QEM_DTYPE_UINT16},   {4, 1, QEM_DTYPE_FLOAT32}, {5, 0, QEM_DTYPE_UINT16},
        {5, 1, QEM_DTYPE_FLOAT32},  {6, 0, QEM_DTYPE_UINT16},  {6, 1, QEM_DTYPE_FLOAT32},
        {7, 0, QEM_DTYPE_FLOAT32},  {8, 1, QEM_DTYPE_FLOAT32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int version = 0; version < 2; version++) {
            tiab_options t = {.data_type = cases[i].type, .negative = cases[i].negative,
                              .ndim = 2, .dims = {3, 2}, .version = version ? 0x0210 : 0x0220,
                              .gap = (uint32_t)i};
            CHECK(tiab_write(p, &t) == 0);
            check_built(p, &t, NULL, 2, 3, cases[i].stored);
        }
    /* float64 that float32 does not hold is refused, naming the range. */
    tiab_options t = {.data_type = 8, .fractional = 1};
    CHECK(tiab_write(p, &t) == 0);
    ic_refused(p, NULL, QEM_E_VALUE_RANGE, "float64 values from 0.10000000000000001");
    /* Complex and unknown types. */
    t = (tiab_options){.data_type = 9};
    CHECK(tiab_write(p, &t) == 0);
    ic_refused(p, NULL, QEM_E_UNSUPPORTED, "complex64");
    t.data_type = 10;
    CHECK(tiab_write(p, &t) == 0);
    ic_refused(p, NULL, QEM_E_UNSUPPORTED, "complex128");
    t.data_type = 12;
    CHECK(tiab_write(p, &t) == 0);
    ic_refused(p, NULL, QEM_E_UNSUPPORTED, "TIA data type 12");
    unlink(p);
    free((void *)p);
}

static void test_scan_shapes(void)
{
    const char *p = strdup(test_path("scan_1.ser"));
    input_options given = {0};
    /* X moves first: dimension 2 the rows, dimension 1 the columns. */
    tiab_options t = {.ndim = 2, .dims = {4, 3}};
    CHECK(tiab_write(p, &t) == 0);
    check_built(p, &t, NULL, 3, 4, QEM_DTYPE_UINT16);
    acquisition *a = ic_open(p, NULL);
    if (a) {
        CHECK(fabs(quantity(a, "scan_sampling_column", "m") - 2e-9) < 1e-20);
        CHECK(fabs(quantity(a, "scan_sampling_row", "m") - 2e-9) < 1e-20);
        CHECK(!strcmp(fact_string(a->facts, "emi_file"),
                      "none: 'scan.emi' is not beside the .ser (the .ser's header was read "
                      "alone)"));
        qem_input_close(a);
    }
    given.scan_shape[0] = 4, given.scan_shape[1] = 3;
    ic_refused(p, &given, QEM_E_INVALID_ARGUMENT, "contradicts the scan shape 3x4");
    /* Y moves first: not stated, the caller's. */
    t.y_first = 1;
    CHECK(tiab_write(p, &t) == 0);
    ic_refused(p, NULL, QEM_E_LAYOUT, "--scan-shape");
    check_built(p, &t, &given, 4, 3, QEM_DTYPE_UINT16);
    /* Time-only tags: a square scan is stated, another is not. */
    t = (tiab_options){.ndim = 2, .dims = {3, 3}, .tag_type = 0x4152};
    CHECK(tiab_write(p, &t) == 0);
    check_built(p, &t, NULL, 3, 3, QEM_DTYPE_UINT16);
    a = ic_open(p, NULL);
    CHECK(a && !json_object_get(json_object_get(a->calibration, "quantities"),
                                "scan_sampling_row"));
    qem_input_close(a);
    t.dims[0] = 4;
    CHECK(tiab_write(p, &t) == 0);
    ic_refused(p, NULL, QEM_E_LAYOUT, "--scan-shape");
    /* One dimension (a stack): the caller's; one element: 1 x 1. */
    t = (tiab_options){.ndim = 1, .dims = {6}};
    CHECK(tiab_write(p, &t) == 0);
    ic_refused(p, NULL, QEM_E_LAYOUT, "holds 6 frames");
    given.scan_shape[0] = 2, given.scan_shape[1] = 3;
    check_built(p, &t, &given, 2, 3, QEM_DTYPE_UINT16);
    t = (tiab_options){.ndim = 0};
    CHECK(tiab_write(p, &t) == 0);
    check_built(p, &t, NULL, 1, 1, QEM_DTYPE_UINT16);
    /* Interrupted: 4 valid of 12; the valid frames with the caller's shape. */
    t = (tiab_options){.ndim = 2, .dims = {4, 3}, .valid = 4};
    CHECK(tiab_write(p, &t) == 0);
    ic_refused(p, NULL, QEM_E_LAYOUT, "holds 4 frames");
    given.scan_shape[0] = 1, given.scan_shape[1] = 4;
    check_built(p, &t, &given, 1, 4, QEM_DTYPE_UINT16);
    unlink(p);
    free((void *)p);
}

static void patch(const char *path, uint64_t offset, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(fseek(f, (long)offset, SEEK_SET) == 0 && fwrite(bytes, 1, n, f) == n);
    fclose(f);
}

static void patch_u32(const char *path, uint64_t offset, uint32_t v)
{
    const uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    patch(path, offset, b, 4);
}

static void patch_u64(const char *path, uint64_t offset, uint64_t v)
{
    patch_u32(path, offset, (uint32_t)v);
    patch_u32(path, offset + 4, (uint32_t)(v >> 32));
}

static void test_refusals(void)
{
    const char *p = strdup(test_path("bad_1.ser"));
    const tiab_options t = {.ndim = 2, .dims = {3, 2}}; /* version 0x0220 */
    const uint64_t oa = tiab_offsets_at(&t), e1 = tiab_element_at(&t, 1);
#define FRESH() CHECK(tiab_write(p, &t) == 0)
    /* Truncated: the last element cut; the header cut. */
    FRESH();
    CHECK(truncate(p, (off_t)tiab_element_at(&t, 6) - 30) == 0);
    ic_refused(p, NULL, QEM_E_FILE_LENGTH, "element 6");
    FRESH();
    CHECK(truncate(p, 20) == 0);
    ic_refused(p, NULL, QEM_E_FILE_LENGTH, "header");
    /* The offset array past the end. */
    FRESH();
    patch_u64(p, 22, 1u << 30);
    ic_refused(p, NULL, QEM_E_FILE_LENGTH, "offset array");
    /* An element outside the file, one overlapping the one before, the
     * first inside the header. */
    FRESH();
    patch_u64(p, oa + 8 * 2, UINT64_MAX - 10);
    ic_refused(p, NULL, QEM_E_FILE_LENGTH, "element 3");
    FRESH();
    patch_u64(p, oa + 8 * 2, e1 + 10);
    ic_refused(p, NULL, QEM_E_LAYOUT, "inside element 2");
    FRESH();
    patch_u64(p, oa, 8);
    ic_refused(p, NULL, QEM_E_LAYOUT, "inside the header");
    /* An element of another shape or type. */
    FRESH();
    patch_u32(p, e1 + 42, 9);
    ic_refused(p, NULL, QEM_E_LAYOUT, "element 2 of");
    FRESH();
    patch(p, e1 + 40, "\x06\x00", 2);
    ic_refused(p, NULL, QEM_E_LAYOUT, "TIA data type 6");
    /* Inconsistent counts: dimensions against the total, valid above it,
     * none valid. */
    FRESH();
    patch_u32(p, 14, 7);
    ic_refused(p, NULL, QEM_E_LAYOUT, "hold 6 elements, but its header states 7");
    FRESH();
    patch_u32(p, 18, 7);
    ic_refused(p, NULL, QEM_E_LAYOUT, "7 valid elements of 6");
    FRESH();
    patch_u32(p, 18, 0);
    ic_refused(p, NULL, QEM_E_LAYOUT, "no valid element");
    /* Sizes: a dimension count the file cannot hold, a text past the end,
     * elements whose size overflows, a detector too large. */
    FRESH();
    patch_u32(p, 30, 0x7fffffff);
    ic_refused(p, NULL, QEM_E_FILE_LENGTH, "dimension arrays");
    FRESH();
    patch_u32(p, 34 + 24, 0xfffffff0);
    ic_refused(p, NULL, QEM_E_FILE_LENGTH, "dimension array 1");
    FRESH();
    for (uint64_t k = 0; k < 6; k++) {
        patch_u32(p, tiab_element_at(&t, k) + 42, 0xffffffff);
        patch_u32(p, tiab_element_at(&t, k) + 46, 0xffffffff);
        patch(p, tiab_element_at(&t, k) + 40, "\x08\x00", 2);
    }
    ic_refused(p, NULL, QEM_E_LIMIT, "too large");
    FRESH();
    patch_u32(p, tiab_element_at(&t, 0) + 42, 100000);
    ic_refused(p, NULL, QEM_E_FILE_LENGTH, NULL);
    FRESH();
    patch_u32(p, 34, 0);
    ic_refused(p, NULL, QEM_E_LAYOUT, "dimension 1");
    /* Variants: spectra, an unknown data type id, version, empty images. */
    FRESH();
    patch_u32(p, 6, 0x4120);
    ic_refused(p, NULL, QEM_E_UNSUPPORTED, "1D spectra");
    FRESH();
    patch_u32(p, 6, 0x4121);
    ic_refused(p, NULL, QEM_E_LAYOUT, "0x4121");
    FRESH();
    patch(p, 4, "\x30\x02", 2);
    ic_refused(p, NULL, QEM_E_UNSUPPORTED, "version 0x0230");
    FRESH();
    patch_u32(p, tiab_element_at(&t, 0) + 42, 0);
    ic_refused(p, NULL, QEM_E_LAYOUT, "0 x 6 images");
    /* A tag of another type than the header's, or outside the file: the
     * scan order is unknown (a 3 x 2 scan then needs the caller's). */
    FRESH();
    patch(p, tiab_element_at(&t, 1) - 24, "\x52\x41", 2);
    ic_refused(p, NULL, QEM_E_LAYOUT, "--scan-shape");
    FRESH();
    patch_u64(p, oa + 8 * 6, UINT64_MAX);
    ic_refused(p, NULL, QEM_E_LAYOUT, "--scan-shape");
    input_options shape = {0};
    shape.scan_shape[0] = 2, shape.scan_shape[1] = 3;
    acquisition *a = ic_open(p, &shape);
    CHECK(a && strstr(json_string_value(json_object_get(a->facts, "first_tag")),
                      "lies past the end"));
    qem_input_close(a);
    /* --dataset does not apply. */
    FRESH();
    input_options o = {0};
    o.dataset = "/x";
    ic_refused(p, &o, QEM_E_INVALID_ARGUMENT, "--dataset");
#undef FRESH
    unlink(p);
    free((void *)p);
}

/* --- the .emi --------------------------------------------------------------------------- */

static void test_emi_companion(void)
{
    mkdir(test_path("emidir"), 0700);
    mkdir(test_path("emidir/sub"), 0700);
    const char *ser = strdup(test_path("emidir/acq_1.ser"));
    const char *emi = strdup(test_path("emidir/acq.emi"));
    const char *secret = strdup(test_path("secret.emi"));
    const tiab_options t = {.ndim = 2, .dims = {2, 2}};
    CHECK(tiab_write(ser, &t) == 0);
    char d1[2048], d2[2048];
    tiab_object_info(d1, sizeof d1, "Titan", "300", "0.115");
    tiab_object_info(d2, sizeof d2, "Titan", "300", "0.230");
    const char *docs[] = {d1, d2};
    CHECK(tiab_write_emi(emi, docs, 2) == 0);
    acquisition *a = ic_open(ser, NULL);
    if (a) {
        CHECK_EQ_U64(a->member_count, 2);
        json_t *facts = json_object_get(a->facts, "emi");
        CHECK(!strcmp(fact_string(facts, "microscope"), "Titan"));
        CHECK(!strcmp(fact_string(facts, "high_tension_kV"), "300"));
        /* The camera length differs between the documents: not taken. */
        CHECK(!strcmp(fact_string(facts, "camera_length_m"),
                      "differs between the .emi's documents"));
        CHECK(fabs(quantity(a, "electron_source/accelerating_voltage", "kV") - 300) < 1e-12);
        CHECK(isnan(quantity(a, "imaging_system/camera_length", "m")));
        json_t *first = json_array_get(json_object_get(facts, "object_info"), 0);
        CHECK(!strcmp(fact_string(json_object_get(first, "values"), "AcquireInfo/CameraNamePath"),
                      "BM-Ceta"));
        CHECK(!json_object_get(json_object_get(first, "values"), "TrueImageHeaderInfo"));
        check_streamed(a);
        qem_input_close(a);
    }
    /* Agreeing documents: the camera length is calibration. */
    CHECK(tiab_write_emi(emi, docs, 1) == 0);
    a = ic_open(ser, NULL);
    CHECK(a && fabs(quantity(a, "imaging_system/camera_length", "m") - 0.115) < 1e-12);
    qem_input_close(a);
    /* Outside the folder: a symlink out, a relative one through "..", a
     * dangling one, a folder in its place; a symlink inside is followed. */
    CHECK(tiab_write_emi(secret, docs, 1) == 0);
    CHECK(unlink(emi) == 0 && symlink(secret, emi) == 0);
    ic_refused(ser, NULL, QEM_E_LAYOUT, "has the .emi 'acq.emi', which resolves to");
    CHECK(unlink(emi) == 0 && symlink("../secret.emi", emi) == 0);
    ic_refused(ser, NULL, QEM_E_LAYOUT, "outside the .ser's folder");
    CHECK(unlink(emi) == 0 && symlink("gone.emi", emi) == 0);
    ic_refused(ser, NULL, QEM_E_IO, "which cannot be read");
    CHECK(unlink(emi) == 0 && mkdir(emi, 0700) == 0);
    ic_refused(ser, NULL, QEM_E_LAYOUT, "which is not a regular file");
    CHECK(rmdir(emi) == 0);
    CHECK(tiab_write_emi(test_path("emidir/sub/real.emi"), docs, 1) == 0);
    CHECK(symlink("sub/real.emi", emi) == 0);
    a = ic_open(ser, NULL);
    CHECK(a && a->member_count == 2);
    qem_input_close(a);
    CHECK(unlink(emi) == 0);
    /* Not an .emi; a DOCTYPE inside the document; XML not well-formed. */
    CHECK(write_file(emi, "not an emi", 10));
    ic_refused(ser, NULL, QEM_E_LAYOUT, "is not a TIA .emi");
    const char *doctype[] = {"<ObjectInfo><!DOCTYPE x [<!ENTITY a \"b\">]><A>&a;</A></ObjectInfo>"};
    CHECK(tiab_write_emi(emi, doctype, 1) == 0);
    ic_refused(ser, NULL, QEM_E_LAYOUT, "not well-formed");
    const char *bad[] = {"<ObjectInfo><A></B></ObjectInfo>"};
    CHECK(tiab_write_emi(emi, bad, 1) == 0);
    ic_refused(ser, NULL, QEM_E_LAYOUT, "not well-formed");
    unlink(emi);
    /* A .ser not named <name>_<N>.ser has no .emi qem looks for. */
    const char *plain = strdup(test_path("emidir/plain.ser"));
    CHECK(tiab_write(plain, &t) == 0);
    a = ic_open(plain, NULL);
    CHECK(a && a->member_count == 1 && strstr(fact_string(a->facts, "emi_file"), "none"));
    qem_input_close(a);
    unlink(plain);
    unlink(ser);
    free((void *)plain);
    free((void *)ser);
    free((void *)emi);
    free((void *)secret);
}

static void test_open_emi(void)
{
    mkdir(test_path("open"), 0700);
    const char *emi = strdup(test_path("open/run.emi"));
    char doc[2048];
    tiab_object_info(doc, sizeof doc, "Talos", "200", "0.26");
    const char *docs[] = {doc};
    CHECK(tiab_write_emi(emi, docs, 1) == 0);
    ic_refused(emi, NULL, QEM_E_IO, "are not beside it");
    const tiab_options t = {.ndim = 2, .dims = {2, 2}, .data_type = 1};
    CHECK(tiab_write(test_path("open/run_1.ser"), &t) == 0);
    /* One series: read, the .ser the master. */
    acquisition *a = ic_open(emi, NULL);
    if (a) {
        CHECK(strstr(a->members[0].path, "run_1.ser") && a->members[0].is_master);
        CHECK(strstr(a->members[1].path, "run.emi") && !a->members[1].is_master);
        CHECK(a->sample_type == QEM_DTYPE_UINT8);
        qem_input_close(a);
    }
    check_built(emi, &t, NULL, 2, 2, QEM_DTYPE_UINT8);
    /* Two: refused, naming both. */
    CHECK(tiab_write(test_path("open/run_2.ser"), &t) == 0);
    ic_refused(emi, NULL, QEM_E_UNSUPPORTED, "2 series beside it ('run_1.ser', 'run_2.ser')");
    CHECK(unlink(test_path("open/run_1.ser")) == 0);
    /* The only series a symlink leading out. */
    const char *out = strdup(test_path("elsewhere_2.ser"));
    CHECK(tiab_write(out, &t) == 0);
    CHECK(unlink(test_path("open/run_2.ser")) == 0);
    CHECK(symlink(out, test_path("open/run_2.ser")) == 0);
    ic_refused(emi, NULL, QEM_E_LAYOUT, "outside the .emi's folder");
    unlink(test_path("open/run_2.ser"));
    unlink(emi);
    free((void *)out);
    free((void *)emi);
}

/* A file rewritten between open and read is QEM_E_CHANGED. */
static void test_changed(void)
{
    const char *p = strdup(test_path("changed_1.ser"));
    const tiab_options t = {.ndim = 2, .dims = {2, 2}};
    CHECK(tiab_write(p, &t) == 0);
    acquisition *a = ic_open(p, NULL);
    patch_u32(p, tiab_element_at(&t, 3) + 42, 7);
    if (a) {
        uint16_t buf[4 * 48];
        qem_error e = {0};
        CHECK_STATUS(qem_input_read(a, 0, 4, QEM_DTYPE_UINT16, buf, sizeof buf, &e),
                     QEM_E_CHANGED, &e);
        qem_input_close(a);
    }
    unlink(p);
    free((void *)p);
}

int main(void)
{
    test_real_files();
    test_types();
    test_scan_shapes();
    test_refusals();
    test_emi_companion();
    test_open_emi();
    test_changed();
    return test_finish("unit_input_tia");
}
