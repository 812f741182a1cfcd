/* The NanoMegas blockfile family (lib/input/blo.c). HyperSpy's two real
 * blockfiles (QEM_HYPERSPY_IO/blockfile_data/test{1,2}.blo) are read
 * through qem_input_open/qem_input_read and compared bit for bit with the
 * patterns parsed here from the file's bytes, and test2's with the values
 * HyperSpy's own test expects; files built by tests/common/blo_build.c
 * cover 16- and 32-bit patterns (header magic 0x0103 with a "Blo Bit
 * Depth" note) and scan shapes; one refusal per rule; members hashed while
 * read equal the file's SHA-256; a pattern changed during the read is
 * caught. A blockfile has no companion files: nothing to contain. */
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blo_build.h"
#include "common/sha256.h"
#include "input/input.h"
#include "input_check.h"
#include "test_util.h"

#ifndef QEM_HYPERSPY_IO
#define QEM_HYPERSPY_IO "/usr/lib/python3/dist-packages/hyperspy/tests/io"
#endif

/* --- helpers ---------------------------------------------------------------- */

static uint64_t frames_of(const acquisition *a)
{
    return a->shape[0] * a->shape[1];
}

static uint64_t pixels_of(const acquisition *a)
{
    return a->shape[2] * a->shape[3];
}

static void *read_all(acquisition *a, qem_dtype target, size_t *size)
{
    qem_error e = {0};
    *size = (size_t)(frames_of(a) * pixels_of(a) * qem_dtype_size(target));
    void *out = malloc(*size ? *size : 1);
    if (out && qem_input_read(a, 0, frames_of(a), target, out, *size, &e) != QEM_OK) {
        fprintf(stderr, "read: %s\n", e.message);
        free(out);
        return NULL;
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

/* Reads every frame in order, three at a time, hashing while reading (as a
 * save does): the member's digest is the file's, the reads having
 * streamed every byte. */
static void check_streamed(acquisition *a, qem_dtype target)
{
    qem_error e = {0};
    CHECK_OK(qem_input_stream_begin(a, &e), &e);
    const uint64_t per = 3;
    const size_t frame = (size_t)(pixels_of(a) * qem_dtype_size(target));
    uint8_t *buf = malloc(frame * per);
    for (uint64_t f = 0; f < frames_of(a); f += per) {
        const uint64_t n = frames_of(a) - f < per ? frames_of(a) - f : per;
        CHECK_OK(qem_input_read(a, f, n, target, buf, frame * n, &e), &e);
    }
    free(buf);
    CHECK_EQ_U64(a->members[0].streamed, a->members[0].bytes);
    CHECK_OK(qem_input_stream_finish(a, NULL, NULL, &e), &e);
    uint8_t d[32];
    file_sha256(a->members[0].path, d);
    CHECK(a->members[0].hashed && memcmp(a->members[0].sha256, d, 32) == 0);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void patch(const char *path, uint64_t offset, const void *bytes, size_t n)
{
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, bytes, n, (off_t)offset) == (ssize_t)n);
    close(fd);
}

static double quantity(const json_t *cal, const char *name, const char *unit)
{
    const json_t *q = json_object_get(json_object_get(cal, "quantities"), name);
    CHECK(q != NULL);
    CHECK(q && !strcmp(json_string_value(json_object_get(q, "unit")), unit));
    return q ? json_real_value(json_object_get(q, "value")) : NAN;
}

/* --- HyperSpy's blockfiles ------------------------------------------------------- */

/* Frames 0 and 5 of test2.blo as HyperSpy's test_blockfile.py expects them
 * (ref_data2[0, 0] and ref_data2[1, 2]). */
static const uint8_t test2_first[25] = {20, 23, 25, 25, 27, 29, 23, 23, 0,  29, 24, 0, 0,
                                        22, 18, 0,  14, 19, 17, 26, 19, 21, 22, 27, 20};
static const uint8_t test2_last[25] = {24, 18, 20, 22, 21, 13, 25, 20, 28, 29, 15, 17, 24,
                                       23, 23, 22, 21, 21, 22, 18, 24, 25, 18, 18, 27};

static void test_real(void)
{
    static const struct {
        const char *name;
        uint64_t shape[4];
        double step_nm;
    } files[] = {{"test1.blo", {3, 2, 144, 144}, 12.8}, {"test2.blo", {2, 3, 5, 5}, 64.0}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/blockfile_data/%s", QEM_HYPERSPY_IO, files[i].name);
        size_t n = 0;
        uint8_t *bytes = read_file(path, &n);
        if (!bytes) {
            CHECK(!"HyperSpy's blockfiles are installed (python3-hyperspy)");
            fprintf(stderr, "  cannot read %s\n", path);
            continue;
        }
        acquisition *a = ic_open(path, NULL);
        if (!a) {
            free(bytes);
            continue;
        }
        CHECK(!strcmp(a->family->name, "blo"));
        for (int d = 0; d < 4; d++)
            CHECK_EQ_U64(a->shape[d], files[i].shape[d]);
        CHECK(a->sample_type == QEM_DTYPE_UINT8);
        CHECK_EQ_U64(a->member_count, 1);
        CHECK(a->members[0].is_master && !strcmp(a->members[0].path, path));
        CHECK_EQ_U64(a->flagged_count, 0);
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "magic")), 0x0102);
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "frames")), 6);
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "beam_energy_V")), 200000);
        const char *note = json_string_value(json_object_get(a->facts, "note"));
        CHECK(note && !strcmp(note, "Precession angle : \nPrecession Frequency : \n"
                                    "Camera gamma : on"));
        CHECK(quantity(a->calibration, "scan_sampling_row", "nm") == files[i].step_nm);
        CHECK(quantity(a->calibration, "scan_sampling_column", "nm") == files[i].step_nm);
        /* Each pattern: 6 bytes (0xAA 0x55, its number) after the one before,
         * from Data_offset_2 (header bytes 12-15), parsed here. */
        size_t size = 0;
        uint8_t *got = read_all(a, QEM_DTYPE_UINT8, &size);
        const uint64_t pixels = pixels_of(a), offset2 = le32(bytes + 12);
        CHECK(got != NULL);
        for (uint64_t f = 0; got && f < frames_of(a); f++) {
            const uint8_t *record = bytes + offset2 + f * (pixels + 6);
            CHECK(record[0] == 0xAA && record[1] == 0x55 && le32(record + 2) == f);
            CHECK(memcmp(got + f * pixels, record + 6, (size_t)pixels) == 0);
        }
        if (got && i == 1) {
            CHECK(memcmp(got, test2_first, 25) == 0);
            CHECK(memcmp(got + 5 * 25, test2_last, 25) == 0);
        }
        free(got);
        /* Widened to uint16 too, the values unchanged. */
        uint16_t *wide = read_all(a, QEM_DTYPE_UINT16, &size);
        CHECK(wide != NULL);
        for (uint64_t k = 0; wide && k < frames_of(a) * pixels; k++)
            if (wide[k] != bytes[offset2 + (k / pixels) * (pixels + 6) + 6 + k % pixels]) {
                CHECK(!"uint16 reads keep every value");
                break;
            }
        free(wide);
        check_streamed(a, QEM_DTYPE_UINT8);
        qem_input_close(a);
        /* The scan shape the header states, given again: the same; another: refused. */
        input_options o = {.scan_shape = {files[i].shape[0], files[i].shape[1]}};
        a = ic_open(path, &o);
        qem_input_close(a);
        input_options other = {.scan_shape = {files[i].shape[1], files[i].shape[0]}};
        ic_refused(path, &other, QEM_E_INVALID_ARGUMENT, "contradicts");
        free(bytes);
    }
}

/* --- blockfiles built here --------------------------------------------------------- */

static void check_built(const char *path, const blob_options *b, qem_dtype stored)
{
    acquisition *a = ic_open(path, NULL);
    if (!a)
        return;
    CHECK_EQ_U64(a->shape[0], b->ny);
    CHECK_EQ_U64(a->shape[1], b->nx);
    CHECK_EQ_U64(a->shape[2], b->dp);
    CHECK_EQ_U64(a->shape[3], b->dp);
    CHECK(a->sample_type == stored);
    const int bits = b->bits ? b->bits : 8;
    CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "bit_depth")), bits);
    const qem_dtype target = stored == QEM_DTYPE_UINT8 ? QEM_DTYPE_UINT8 : QEM_DTYPE_UINT16;
    size_t size = 0;
    void *got = read_all(a, target, &size);
    CHECK(got != NULL);
    const uint64_t pixels = pixels_of(a);
    for (uint64_t k = 0; got && k < frames_of(a) * pixels; k++) {
        const uint32_t want = blob_value(k / pixels, k % pixels, bits);
        const uint32_t v = target == QEM_DTYPE_UINT8 ? ((uint8_t *)got)[k] : ((uint16_t *)got)[k];
        if (v != want) {
            CHECK(!"every pixel as written");
            fprintf(stderr, "  value %llu: %u, wanted %u\n", (unsigned long long)k, v, want);
            break;
        }
    }
    free(got);
    check_streamed(a, target);
    qem_input_close(a);
}

static void test_built(void)
{
    /* 8 bits, a scan of 3 rows of 5 positions. */
    const char *p = strdup(test_path("built8.blo"));
    blob_options b = {.nx = 5, .ny = 3, .dp = 7, .sx = 1.5, .sy = 2.5, .note = "a note"};
    CHECK(blob_write(p, &b) == 0);
    check_built(p, &b, QEM_DTYPE_UINT8);
    acquisition *a = ic_open(p, NULL);
    if (a) {
        CHECK(quantity(a->calibration, "scan_sampling_row", "nm") == 2.5);
        CHECK(quantity(a->calibration, "scan_sampling_column", "nm") == 1.5);
    }
    qem_input_close(a);
    /* No scan step: no calibration. */
    b.sx = b.sy = 0;
    CHECK(blob_write(p, &b) == 0);
    a = ic_open(p, NULL);
    CHECK(a && a->calibration == NULL);
    qem_input_close(a);
    /* Magic 0x0103 with no bit depth stated: 8 bits, as LiberTEM reads it. */
    b.magic = 0x0103;
    CHECK(blob_write(p, &b) == 0);
    check_built(p, &b, QEM_DTYPE_UINT8);
    /* 16 bits, stated in the note. */
    blob_options b16 = {.nx = 4, .ny = 2, .dp = 6, .bits = 16, .magic = 0x0103,
                        .note = "Camera gamma : on\r\nBlo Bit Depth: 16 bits\r\n"};
    CHECK(blob_write(p, &b16) == 0);
    check_built(p, &b16, QEM_DTYPE_UINT16);
    /* 32 bits: uint32 narrowed exactly (blob_value's are all above 65535
     * somewhere), so a value that does not fit is refused when read. */
    blob_options b32 = {.nx = 2, .ny = 2, .dp = 3, .bits = 32, .magic = 0x0103,
                        .note = "blo bit depth: 32 bits"};
    uint32_t small[2 * 2 * 9];
    for (size_t k = 0; k < sizeof small / sizeof small[0]; k++)
        small[k] = (uint32_t)(k * 1000);
    b32.data = small;
    CHECK(blob_write(p, &b32) == 0);
    a = ic_open(p, NULL);
    if (a) {
        CHECK(a->sample_type == QEM_DTYPE_UINT32);
        size_t size = 0;
        uint16_t *got = read_all(a, QEM_DTYPE_UINT16, &size);
        for (size_t k = 0; got && k < 36; k++)
            CHECK_EQ_U64(got[k], k * 1000);
        free(got);
    }
    qem_input_close(a);
    small[20] = 70000;
    CHECK(blob_write(p, &b32) == 0);
    a = ic_open(p, NULL);
    if (a) {
        uint16_t out[36];
        qem_error e = {0};
        CHECK_STATUS(qem_input_read(a, 0, 4, QEM_DTYPE_UINT16, out, sizeof out, &e),
                     QEM_E_VALUE_RANGE, &e);
        CHECK(strstr(e.message, "70000") != NULL);
    }
    qem_input_close(a);
    /* A 0x0102 file ignores a bit depth in its note (HyperSpy and LiberTEM
     * read 0x0102 files as 8 bits). */
    blob_options b8 = {.nx = 2, .ny = 1, .dp = 4, .note = "Blo Bit Depth: 16 bits"};
    CHECK(blob_write(p, &b8) == 0);
    check_built(p, &b8, QEM_DTYPE_UINT8);
    free((void *)p);
}

/* --- refusals ------------------------------------------------------------------- */

static void put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void test_refusals(void)
{
    const char *p = strdup(test_path("bad.blo"));
    const blob_options b = {.nx = 3, .ny = 2, .dp = 5, .sx = 64, .sy = 64};
    const uint64_t size = blob_size(&b);
    uint8_t two[2];
    /* Truncated: the last pattern short; bytes after the last pattern. */
    CHECK(blob_write(p, &b) == 0);
    CHECK(truncate(p, (off_t)(size - 1)) == 0);
    ic_refused(p, NULL, QEM_E_FILE_LENGTH, "truncated");
    CHECK(truncate(p, (off_t)(size + 1)) == 0);
    ic_refused(p, NULL, QEM_E_FILE_LENGTH, "bytes follow the last pattern");
    CHECK(truncate(p, 100) == 0);
    ic_refused(p, NULL, QEM_E_FILE_LENGTH, "shorter than its 240-byte header");
    CHECK(truncate(p, 4000) == 0); /* the patterns start at byte 4112 */
    ic_refused(p, NULL, QEM_E_FILE_LENGTH, "puts the patterns at byte");
    /* A pattern header that is not 0xAA 0x55; a pattern numbered out of order. */
    CHECK(blob_write(p, &b) == 0);
    patch(p, blob_record_at(&b, 3), "\xAA\x56", 2);
    ic_refused(p, NULL, QEM_E_LAYOUT, "before pattern 3");
    CHECK(blob_write(p, &b) == 0);
    patch(p, blob_record_at(&b, 4) + 2, "\x05", 1);
    ic_refused(p, NULL, QEM_E_LAYOUT, "numbers pattern 4 as 5");
    /* An unknown header magic. */
    CHECK(blob_write(p, &b) == 0);
    put16(two, 0x0104);
    patch(p, 6, two, 2);
    ic_refused(p, NULL, QEM_E_UNSUPPORTED, "magic 0x0104");
    /* An empty scan or detector. */
    CHECK(blob_write(p, &b) == 0);
    put16(two, 0);
    patch(p, 24, two, 2);
    ic_refused(p, NULL, QEM_E_LAYOUT, "empty scan or detector");
    CHECK(blob_write(p, &b) == 0);
    patch(p, 20, two, 2);
    ic_refused(p, NULL, QEM_E_LAYOUT, "DP_SZ 0");
    /* The blocks out of order: the bright field inside the header; the
     * patterns over the bright field. */
    CHECK(blob_write(p, &b) == 0);
    patch(p, 8, "\x10\x00\x00\x00", 4);
    ic_refused(p, NULL, QEM_E_LAYOUT, "must follow the 240-byte header");
    CHECK(blob_write(p, &b) == 0);
    patch(p, 12, "\x02\x10\x00\x00", 4); /* 4098 < 4096 + 6 */
    ic_refused(p, NULL, QEM_E_LAYOUT, "virtual bright-field");
    /* A detector beyond the cap, a scan of 65535 x 65535: refused before
     * any per-pattern read (sizes checked first; 16-bit fields cannot
     * overflow 64 bits). */
    CHECK(blob_write(p, &b) == 0);
    put16(two, 65535);
    patch(p, 20, two, 2);
    ic_refused(p, NULL, QEM_E_LIMIT, "8192 x 8192");
    CHECK(blob_write(p, &b) == 0);
    patch(p, 24, two, 2);
    patch(p, 26, two, 2);
    patch(p, 12, "\x00\xF0\xFF\xFF", 4); /* the patterns after the bright field */
    ic_refused(p, NULL, QEM_E_FILE_LENGTH, "puts the patterns at byte 4294963200");
    /* Bit depths qem does not read, or that the file does not hold. */
    blob_options d = b;
    d.magic = 0x0103;
    d.note = "Blo Bit Depth: 12 bits";
    CHECK(blob_write(p, &d) == 0);
    ic_refused(p, NULL, QEM_E_UNSUPPORTED, "bit depth");
    d.note = "Blo Bit Depth: sixteen";
    CHECK(blob_write(p, &d) == 0);
    ic_refused(p, NULL, QEM_E_UNSUPPORTED, "Blo Bit Depth");
    d.note = "Blo Bit Depth: 16 bits"; /* but 8-bit patterns follow */
    CHECK(blob_write(p, &d) == 0);
    ic_refused(p, NULL, QEM_E_FILE_LENGTH, "16-bit pixels");
    /* Options that do not apply. */
    CHECK(blob_write(p, &b) == 0);
    input_options ds = {.dataset = "/data"};
    ic_refused(p, &ds, QEM_E_INVALID_ARGUMENT, "--dataset");
    /* Not a blockfile: "IMGBLX". */
    patch(p, 5, "X", 1);
    ic_refused(p, NULL, QEM_E_UNSUPPORTED, "not a detector file");
    free((void *)p);
}

/* A pattern rewritten after the file was described: its read fails. */
static void test_changed_during_read(void)
{
    const char *p = strdup(test_path("changing.blo"));
    const blob_options b = {.nx = 2, .ny = 2, .dp = 4};
    CHECK(blob_write(p, &b) == 0);
    acquisition *a = ic_open(p, NULL);
    if (a) {
        uint8_t out[4 * 16];
        qem_error e = {0};
        CHECK_OK(qem_input_read(a, 0, 2, QEM_DTYPE_UINT8, out, sizeof out, &e), &e);
        patch(p, blob_record_at(&b, 3) + 2, "\x09", 1);
        CHECK_STATUS(qem_input_read(a, 2, 2, QEM_DTYPE_UINT8, out, sizeof out, &e),
                     QEM_E_CHANGED, &e);
        CHECK(strstr(e.message, "changed since it was described") != NULL);
        qem_error e1 = {0};
        CHECK_STATUS(qem_input_check_unchanged(a, &e1), QEM_E_CHANGED, &e1);
    }
    qem_input_close(a);
    free((void *)p);
}

int main(void)
{
    test_real();
    test_built();
    test_refusals();
    test_changed_during_read();
    return test_finish("unit_input_blo");
}
