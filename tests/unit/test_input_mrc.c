/* The MRC family (lib/input/mrc.c). No 4D-STEM MRC ships here, so every
 * file is built by tests/common/mrc_build.c from the MRC2014 description
 * (https://www.ccpem.ac.uk/mrc_format/mrc2014.php, "Main header" table;
 * the facts each check relies on are cited where it is made). Each mode
 * qem reads, in both byte orders, is read back bit for bit (float16 against
 * a conversion written here with ldexp); signed modes are settled exactly;
 * the extended header is skipped; one refusal per rule; members hashed
 * while read equal the file's SHA-256; a file changed during the read is
 * caught. An MRC file names no companion files: nothing to contain. */
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sha256.h"
#include "input/input.h"
#include "mrc_build.h"
#include "input_check.h"
#include "test_util.h"

/* --- helpers ---------------------------------------------------------------- */

static uint64_t frames_of(const acquisition *a)
{
    return a->shape[0] * a->shape[1];
}

static uint64_t pixels_of(const acquisition *a)
{
    return a->shape[2] * a->shape[3];
}

static void *read_all(acquisition *a, qem_dtype target)
{
    qem_error e = {0};
    const size_t size = (size_t)(frames_of(a) * pixels_of(a) * qem_dtype_size(target));
    void *out = malloc(size ? size : 1);
    if (out && qem_input_read(a, 0, frames_of(a), target, out, size, &e) != QEM_OK) {
        fprintf(stderr, "read: %s\n", e.message);
        free(out);
        return NULL;
    }
    return out;
}

static void check_streamed(acquisition *a, qem_dtype target)
{
    qem_error e = {0};
    CHECK_OK(qem_input_stream_begin(a, &e), &e);
    const uint64_t per = 4;
    const size_t frame = (size_t)(pixels_of(a) * qem_dtype_size(target));
    uint8_t *buf = malloc(frame * per);
    for (uint64_t f = 0; f < frames_of(a); f += per) {
        const uint64_t n = frames_of(a) - f < per ? frames_of(a) - f : per;
        CHECK_OK(qem_input_read(a, f, n, target, buf, frame * n, &e), &e);
    }
    free(buf);
    CHECK_EQ_U64(a->members[0].streamed, a->members[0].bytes);
    CHECK_OK(qem_input_stream_finish(a, NULL, NULL, &e), &e);
    size_t n = 0;
    uint8_t *data = read_file(a->members[0].path, &n), d[32];
    CHECK(data && qem_sha256_oneshot(data, n, d) == 0);
    CHECK(a->members[0].hashed && memcmp(a->members[0].sha256, d, 32) == 0);
    free(data);
}

static void patch(const char *path, uint64_t offset, const void *bytes, size_t n)
{
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, bytes, n, (off_t)offset) == (ssize_t)n);
    close(fd);
}

static void put_le32(const char *path, uint64_t offset, int32_t v)
{
    uint8_t b[4];
    for (int k = 0; k < 4; k++)
        b[k] = (uint8_t)((uint32_t)v >> (8 * k));
    patch(path, offset, b, 4);
}

/* The value of binary16 bits `h` (IEEE 754: 1 sign, 5 exponent bits biased
 * by 15, 10 fraction bits), as float32 bits, computed with ldexp. */
static uint32_t half_bits_expected(uint16_t h)
{
    const int sign = h >> 15, exponent = (h >> 10) & 31, fraction = h & 1023;
    if (exponent == 31 && fraction) /* NaN: sign and payload kept, as numpy's astype */
        return (uint32_t)sign << 31 | 0x7f800000u | (uint32_t)fraction << 13;
    float f = exponent == 31  ? INFINITY
              : exponent == 0 ? (float)ldexp(fraction, -24)
                              : (float)ldexp(1024 + fraction, exponent - 25);
    f = sign ? -f : f;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* --- each mode ------------------------------------------------------------------- */

/* Mode numbers and sample types: MRC2014 "MODE" (word 4): 0 8-bit signed
 * integer, 1 16-bit signed integer, 2 32-bit signed real, 6 16-bit unsigned
 * integer, 12 16-bit float (IEEE 754). Data order: "the data block ...
 * stored with the column index (X) changing fastest, then row (Y), then
 * section (Z)". Byte order: MACHST (word 54) 0x44 0x44 0x00 0x00 for
 * little-endian, 0x11 0x11 0x00 0x00 for big-endian. */
static void test_modes(void)
{
    static const struct {
        int32_t mode;
        qem_dtype stored;
        const char *read_as;
    } modes[] = {{6, QEM_DTYPE_UINT16, "uint16"},
                 {2, QEM_DTYPE_FLOAT32, "float32"},
                 {12, QEM_DTYPE_FLOAT32, "float32"},
                 {1, QEM_DTYPE_FLOAT32, "int16"}, /* -1000 .. 58999: not uint16, exact float32 */
                 {0, QEM_DTYPE_FLOAT32, "int8"}};
    const char *p = strdup(test_path("modes.mrc"));
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        for (int big = 0; big < 2; big++) {
            const mrcb_options m = {.nx = 5, .ny = 4, .nz = 6, .mode = modes[i].mode,
                                    .big_endian = big, .cell = {50, 40, 60},
                                    .label = "built from the MRC2014 table"};
            CHECK(mrcb_write(p, &m) == 0);
            const input_options o = {.scan_shape = {2, 3}};
            acquisition *a = ic_open(p, &o);
            if (!a)
                continue;
            CHECK(!strcmp(a->family->name, "mrc"));
            CHECK_EQ_U64(a->shape[0], 2);
            CHECK_EQ_U64(a->shape[1], 3);
            CHECK_EQ_U64(a->shape[2], 4); /* NY rows */
            CHECK_EQ_U64(a->shape[3], 5); /* NX columns */
            CHECK(a->sample_type == modes[i].stored);
            CHECK(!strcmp(qem_input_read_as_name(a), modes[i].read_as));
            CHECK_EQ_U64(a->member_count, 1);
            CHECK(!strcmp(json_string_value(json_object_get(a->facts, "byte_order")),
                          big ? "big-endian" : "little-endian"));
            CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "mode")), modes[i].mode);
            CHECK(!strcmp(json_string_value(json_array_get(json_object_get(a->facts, "labels"),
                                                           0)),
                          "built from the MRC2014 table"));
            /* CELLA / MX (words 11, 8): 50 angstrom over 5 columns. */
            CHECK(json_real_value(json_array_get(json_object_get(a->facts,
                                                                 "pixel_size_angstrom"),
                                                 0)) == 10.0);
            CHECK(a->calibration == NULL);
            const qem_dtype target = modes[i].stored;
            uint8_t *got = read_all(a, target);
            CHECK(got != NULL);
            for (uint64_t k = 0; got && k < 6 * 20; k++) {
                uint8_t v[4] = {0};
                mrcb_value(m.mode, k, v);
                int same;
                if (m.mode == 6) {
                    uint16_t w;
                    memcpy(&w, v, 2);
                    same = ((uint16_t *)got)[k] == w;
                } else if (m.mode == 2) {
                    same = memcmp(got + 4 * k, v, 4) == 0;
                } else if (m.mode == 12) {
                    uint16_t hb;
                    memcpy(&hb, v, 2);
                    const uint32_t want = half_bits_expected(hb);
                    same = memcmp(got + 4 * k, &want, 4) == 0;
                } else {
                    const float want = m.mode == 1 ? (float)*(int16_t *)(void *)v
                                                   : (float)*(int8_t *)(void *)v;
                    same = ((float *)got)[k] == want;
                }
                if (!same) {
                    CHECK(!"every sample as written");
                    fprintf(stderr, "  mode %d big %d value %llu\n", m.mode, big,
                            (unsigned long long)k);
                    break;
                }
            }
            free(got);
            check_streamed(a, target);
            qem_input_close(a);
        }
    free((void *)p);
}

/* Every float16 bit pattern (zeros, subnormals, normals, infinities, NaNs
 * with payloads) widened exactly. */
static void test_float16_all(void)
{
    const char *p = strdup(test_path("half.mrc"));
    uint16_t *all = malloc(65536 * sizeof *all);
    for (uint32_t k = 0; k < 65536; k++)
        all[k] = (uint16_t)k;
    const mrcb_options m = {.nx = 256, .ny = 256, .nz = 1, .mode = 12, .data = all};
    CHECK(mrcb_write(p, &m) == 0);
    acquisition *a = ic_open(p, NULL);
    if (a) {
        CHECK_EQ_U64(a->shape[0], 1);
        CHECK_EQ_U64(a->shape[1], 1);
        uint32_t *got = read_all(a, QEM_DTYPE_FLOAT32);
        size_t wrong = 0;
        for (uint32_t k = 0; got && k < 65536; k++)
            wrong += got[k] != half_bits_expected((uint16_t)k);
        CHECK(got && wrong == 0);
        free(got);
    }
    qem_input_close(a);
    free(all);
    free((void *)p);
}

/* Signed samples settled exactly (lib/input/values.c): non-negative int16
 * and int8 to uint16. */
static void test_signed_to_uint16(void)
{
    const char *p = strdup(test_path("signed.mrc"));
    int16_t s16[2 * 3 * 4];
    int8_t s8[2 * 3 * 4];
    for (int k = 0; k < 24; k++) {
        s16[k] = (int16_t)(k * 1000);
        s8[k] = (int8_t)(k * 5);
    }
    const mrcb_options m16 = {.nx = 4, .ny = 3, .nz = 2, .mode = 1, .big_endian = 1,
                              .data = s16};
    const input_options o = {.scan_shape = {1, 2}};
    CHECK(mrcb_write(p, &m16) == 0);
    acquisition *a = ic_open(p, &o);
    if (a) {
        CHECK(a->sample_type == QEM_DTYPE_UINT16);
        uint16_t *got = read_all(a, QEM_DTYPE_UINT16);
        for (int k = 0; got && k < 24; k++)
            CHECK_EQ_U64(got[k], (uint64_t)k * 1000);
        free(got);
        CHECK(!strcmp(json_string_value(json_object_get(a->values, "read_as")), "int16"));
    }
    qem_input_close(a);
    const mrcb_options m8 = {.nx = 4, .ny = 3, .nz = 2, .mode = 0, .data = s8};
    CHECK(mrcb_write(p, &m8) == 0);
    a = ic_open(p, &o);
    if (a) {
        CHECK(a->sample_type == QEM_DTYPE_UINT16);
        uint16_t *got = read_all(a, QEM_DTYPE_UINT16);
        for (int k = 0; got && k < 24; k++)
            CHECK_EQ_U64(got[k], (uint64_t)k * 5);
        free(got);
    }
    qem_input_close(a);
    free((void *)p);
}

/* NSYMBT (word 24): "number of bytes in extended header"; EXTTYP (word 27,
 * bytes 105-108): its type, e.g. "FEI1". The data start after it. */
static void test_extended_header(void)
{
    const char *p = strdup(test_path("fei.mrc"));
    const mrcb_options m = {.nx = 3, .ny = 2, .nz = 4, .mode = 6, .nsymbt = 4 * 768,
                            .exttyp = "FEI1"};
    CHECK(mrcb_write(p, &m) == 0);
    const input_options o = {.scan_shape = {2, 2}};
    acquisition *a = ic_open(p, &o);
    if (a) {
        CHECK(!strcmp(json_string_value(json_object_get(a->facts, "exttyp")), "FEI1"));
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "nsymbt")), 4 * 768);
        uint16_t *got = read_all(a, QEM_DTYPE_UINT16);
        for (uint64_t k = 0; got && k < 24; k++) {
            uint16_t want;
            mrcb_value(6, k, &want);
            CHECK_EQ_U64(got[k], want);
        }
        free(got);
        check_streamed(a, QEM_DTYPE_UINT16);
    }
    qem_input_close(a);
    free((void *)p);
}

/* The scan shape: the caller's; a single section is one position; more
 * sections without one are refused, naming --scan-shape. */
static void test_scan_shapes(void)
{
    const char *p = strdup(test_path("scan.mrc"));
    mrcb_options m = {.nx = 4, .ny = 4, .nz = 1, .mode = 2};
    CHECK(mrcb_write(p, &m) == 0);
    acquisition *a = ic_open(p, NULL);
    CHECK(a && a->shape[0] == 1 && a->shape[1] == 1);
    qem_input_close(a);
    m.nz = 6;
    CHECK(mrcb_write(p, &m) == 0);
    ic_refused(p, NULL, QEM_E_LAYOUT, "--scan-shape");
    const input_options wrong = {.scan_shape = {4, 2}};
    ic_refused(p, &wrong, QEM_E_LAYOUT, "does not match the 6 frames");
    const input_options o = {.scan_shape = {3, 2}};
    a = ic_open(p, &o);
    CHECK(a && a->shape[0] == 3 && a->shape[1] == 2);
    qem_input_close(a);
    /* NX 60: the file starts with '<' (0x3C), still an MRC file, not EMPAD XML. */
    m.nx = 60;
    m.nz = 1;
    CHECK(mrcb_write(p, &m) == 0);
    a = ic_open(p, NULL);
    CHECK(a && !strcmp(a->family->name, "mrc"));
    qem_input_close(a);
    free((void *)p);
}

/* --- refusals ------------------------------------------------------------------- */

static void test_refusals(void)
{
    const char *p = strdup(test_path("bad.mrc"));
    const mrcb_options m = {.nx = 4, .ny = 3, .nz = 2, .mode = 6};
    const input_options o = {.scan_shape = {1, 2}};
    const off_t size = 1024 + 4 * 3 * 2 * 2;
    /* Truncated, longer, shorter than the header. */
    CHECK(mrcb_write(p, &m) == 0);
    CHECK(truncate(p, size - 1) == 0);
    ic_refused(p, &o, QEM_E_FILE_LENGTH, "truncated");
    CHECK(truncate(p, size + 2) == 0);
    ic_refused(p, &o, QEM_E_FILE_LENGTH, "bytes follow the last section");
    CHECK(truncate(p, 600) == 0);
    ic_refused(p, &o, QEM_E_FILE_LENGTH, "shorter than its 1024-byte header");
    /* A machine stamp of neither byte order. */
    static const uint8_t odd[4] = {0x22, 0x22, 0, 0};
    mrcb_options s = m;
    s.stamp = odd;
    CHECK(mrcb_write(p, &s) == 0);
    ic_refused(p, &o, QEM_E_LAYOUT, "machine stamp 22 22 00 00");
    /* 0x44 0x41 is little-endian too: the stamp CCP4 writes, which mrcfile
     * also reads as little-endian (not in the MRC2014 table). */
    static const uint8_t da[4] = {0x44, 0x41, 0, 0};
    s.stamp = da;
    CHECK(mrcb_write(p, &s) == 0);
    acquisition *a = ic_open(p, &o);
    qem_input_close(a);
    /* Empty or negative dimensions; a negative extended header. */
    CHECK(mrcb_write(p, &m) == 0);
    put_le32(p, 4, 0);
    ic_refused(p, &o, QEM_E_LAYOUT, "NY 0");
    CHECK(mrcb_write(p, &m) == 0);
    put_le32(p, 0, -4);
    ic_refused(p, &o, QEM_E_LAYOUT, "NX -4");
    CHECK(mrcb_write(p, &m) == 0);
    put_le32(p, 92, -8);
    ic_refused(p, &o, QEM_E_LAYOUT, "NSYMBT");
    /* An extended header past the end of the file. */
    CHECK(mrcb_write(p, &m) == 0);
    put_le32(p, 92, 1 << 30);
    ic_refused(p, &o, QEM_E_FILE_LENGTH, "truncated");
    /* Sizes beyond the detector cap; sections beyond the file. */
    CHECK(mrcb_write(p, &m) == 0);
    put_le32(p, 0, INT32_MAX);
    put_le32(p, 4, INT32_MAX);
    ic_refused(p, &o, QEM_E_LIMIT, "8192 x 8192");
    CHECK(mrcb_write(p, &m) == 0);
    put_le32(p, 8, INT32_MAX);
    ic_refused(p, &o, QEM_E_FILE_LENGTH, "2147483647 sections");
    /* Modes: complex (3, 4), packed 4-bit (101), undefined (7). */
    static const struct {
        int32_t mode;
        const char *needle;
    } modes[] = {{3, "complex 16-bit integers"},
                 {4, "complex float32"},
                 {101, "4-bit"},
                 {7, "mode 7, which MRC2014 does not define"}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        CHECK(mrcb_write(p, &m) == 0);
        put_le32(p, 12, modes[i].mode);
        ic_refused(p, &o, QEM_E_UNSUPPORTED, modes[i].needle);
    }
    /* MAPC, MAPR, MAPS (words 17-19): a transposed order is refused as
     * unsupported, anything but a permutation of 1, 2, 3 as malformed. */
    mrcb_options t = m;
    t.map[0] = 2, t.map[1] = 1, t.map[2] = 3;
    CHECK(mrcb_write(p, &t) == 0);
    ic_refused(p, &o, QEM_E_UNSUPPORTED, "axes 2, 1, 3");
    t.map[0] = 1, t.map[1] = 1, t.map[2] = 3;
    CHECK(mrcb_write(p, &t) == 0);
    ic_refused(p, &o, QEM_E_LAYOUT, "permutation of 1, 2, 3");
    /* Options that do not apply. */
    CHECK(mrcb_write(p, &m) == 0);
    input_options ds = {.dataset = "/data", .scan_shape = {1, 2}};
    ic_refused(p, &ds, QEM_E_INVALID_ARGUMENT, "--dataset");
    /* Not MRC2014 without "MAP " at byte 208 (word 53). */
    patch(p, 208, "MAX ", 4);
    ic_refused(p, &o, QEM_E_UNSUPPORTED, "not a detector file");
    free((void *)p);
}

/* A file changed after it was described: the read that finds it short
 * fails, and the stamps say it changed. */
static void test_changed_during_read(void)
{
    const char *p = strdup(test_path("changing.mrc"));
    const mrcb_options m = {.nx = 4, .ny = 4, .nz = 4, .mode = 6};
    CHECK(mrcb_write(p, &m) == 0);
    const input_options o = {.scan_shape = {2, 2}};
    acquisition *a = ic_open(p, &o);
    if (a) {
        uint16_t out[4 * 16];
        qem_error e = {0};
        CHECK_OK(qem_input_read(a, 0, 2, QEM_DTYPE_UINT16, out, sizeof out, &e), &e);
        CHECK(truncate(p, 1024 + 2 * 32) == 0);
        CHECK_STATUS(qem_input_read(a, 2, 2, QEM_DTYPE_UINT16, out, sizeof out, &e),
                     QEM_E_CHANGED, &e);
        qem_error e1 = {0};
        CHECK_STATUS(qem_input_check_unchanged(a, &e1), QEM_E_CHANGED, &e1);
    }
    qem_input_close(a);
    free((void *)p);
}

int main(void)
{
    test_modes();
    test_float16_all();
    test_signed_to_uint16();
    test_extended_header();
    test_scan_shapes();
    test_refusals();
    test_changed_during_read();
    return test_finish("unit_input_mrc");
}
