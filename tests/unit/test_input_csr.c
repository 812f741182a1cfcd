/* The raw_csr family of the input layer (lib/input/csr.c): sparse sets
 * built here from random dense frames (tests/common/csr_build.c, the CSR a
 * scipy.sparse.csr_matrix of them holds) in every value type, index type
 * and byte order, read back through qem_input_open/qem_input_read and
 * compared frame by frame, bit for bit, with the dense frames; windows
 * across the reader's block boundaries; duplicates adding as
 * scipy.sparse's toarray does; members hashed while read; one refusal per
 * rule of the descriptor's TOML subset, the descriptor and the arrays.
 *
 * The layout's facts checked here come from LiberTEM, the reader this
 * layout is LiberTEM's own (https://github.com/LiberTEM/LiberTEM,
 * src/libertem/io/dataset/raw_csr.py: the RawCSRDataSet docstring gives
 * the descriptor; get_descriptor() joins the file names to the
 * descriptor's folder and looks the arrays' table up by the filetype's
 * value; get_nav_size() counts frames as len(indptr) - 1; check() requires
 * as many indices as values, and its debug checks indices < prod(sig_shape)
 * and max(indptr) == len(indices); read_tiles_straight() builds
 * scipy.sparse.csr_matrix tiles, whose toarray() adds duplicates). */
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/sha256.h"
#include "csr_build.h"
#include "input/input.h"
#include "input_check.h"
#include "test_util.h"

#define NAV_ROWS 3
#define NAV_COLS 4
#define SIG_ROWS 5
#define SIG_COLS 6
#define FRAMES (NAV_ROWS * NAV_COLS)
#define PIXELS (SIG_ROWS * SIG_COLS)

/* --- helpers ---------------------------------------------------------------- */

/* Opens, then reading every frame fails with `status` naming `needle`. */
static void refused_at_read(const char *path, qem_status status, const char *needle)
{
    acquisition *a = ic_open(path, NULL);
    if (!a)
        return;
    const qem_dtype target = qem_input_stored_dtype(a);
    const uint64_t frames = a->shape[0] * a->shape[1], pixels = a->shape[2] * a->shape[3];
    const size_t size = (size_t)(frames * pixels) * qem_dtype_size(target);
    void *out = malloc(size);
    qem_error e = {0};
    CHECK_STATUS(qem_input_read(a, 0, frames, target, out, size, &e), status, &e);
    if (needle && !strstr(e.message, needle)) {
        CHECK(!"the refusal names what is wrong");
        fprintf(stderr, "  missing '%s' in: %s\n", needle, e.message);
    }
    free(out);
    qem_input_close(a);
}

static void file_sha256(const char *path, uint8_t d[32])
{
    size_t n = 0;
    uint8_t *data = read_file(path, &n);
    CHECK(data != NULL);
    CHECK(qem_sha256_oneshot(data ? data : (const uint8_t *)"", data ? n : 0, d) == 0);
    free(data);
}

static uint64_t rnd(uint64_t *state)
{
    return test_rand(state);
}

/* Random sparse frames: about one pixel in `sparsity` holds a value in
 * [lo, hi] (x 0.25 for floats, never -0.0); frame 0 is empty. */
static void *random_dense(char kind, size_t size, uint64_t frames, uint64_t pixels, int64_t lo,
                          int64_t hi, unsigned sparsity, uint64_t seed)
{
    uint8_t *out = calloc((size_t)(frames * pixels), size);
    uint64_t state = seed;
    for (uint64_t k = pixels; out && k < frames * pixels; k++) {
        if (rnd(&state) % sparsity)
            continue;
        const int64_t v = lo + (int64_t)(rnd(&state) % (uint64_t)(hi - lo + 1));
        void *at = out + k * size;
        if (kind == 'f' && size == 4) {
            const float f = (float)v * 0.25f;
            memcpy(at, &f, 4);
        } else if (kind == 'f') {
            const double d = (double)v * 0.25;
            memcpy(at, &d, 8);
        } else {
            memcpy(at, &v, size); /* little-endian host: the low bytes */
        }
    }
    return out;
}

/* Sample k of `dense` as a double (exact for the ranges used here). */
static double sample(char kind, size_t size, const void *dense, uint64_t k)
{
    const uint8_t *p = (const uint8_t *)dense + k * size;
    if (kind == 'f') {
        if (size == 4) {
            float f;
            memcpy(&f, p, 4);
            return f;
        }
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    int64_t s = 0;
    uint64_t u = 0;
    memcpy(&u, p, size);
    if (kind == 'i') {
        const int shift = (int)(64 - 8 * size);
        s = (int64_t)(u << shift) >> shift;
        return (double)s;
    }
    return (double)u;
}

/* The dense frames as the writers store them (`stored`). */
static void *expected_as(char kind, size_t size, const void *dense, uint64_t count,
                         qem_dtype stored)
{
    uint8_t *out = malloc((size_t)count * qem_dtype_size(stored));
    for (uint64_t k = 0; out && k < count; k++) {
        const double v = sample(kind, size, dense, k);
        if (stored == QEM_DTYPE_UINT8)
            out[k] = (uint8_t)v;
        else if (stored == QEM_DTYPE_UINT16)
            ((uint16_t *)out)[k] = (uint16_t)v;
        else
            ((float *)out)[k] = (float)v;
    }
    return out;
}

/* Every frame read in windows of 1, 5 and all frames equals `expected`. */
static void check_frames(acquisition *a, const void *expected)
{
    const qem_dtype target = qem_input_stored_dtype(a);
    const uint64_t frames = a->shape[0] * a->shape[1], pixels = a->shape[2] * a->shape[3];
    const size_t frame = (size_t)pixels * qem_dtype_size(target);
    uint8_t *out = malloc(frame * (size_t)frames);
    static const uint64_t windows[] = {1, 5, 0};
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
        const uint64_t per = windows[w] ? windows[w] : frames;
        memset(out, 0xa5, frame * (size_t)frames);
        for (uint64_t f = 0; f < frames; f += per) {
            const uint64_t n = frames - f < per ? frames - f : per;
            qem_error e = {0};
            CHECK_OK(qem_input_read(a, f, n, target, out + f * frame, frame * n, &e), &e);
        }
        for (uint64_t f = 0; f < frames; f++)
            if (memcmp(out + f * frame, (const uint8_t *)expected + f * frame, frame) != 0) {
                CHECK(!"frame read equals the dense frame bit for bit");
                fprintf(stderr, "  frame %llu differs (window %llu)\n", (unsigned long long)f,
                        (unsigned long long)per);
                break;
            }
    }
    free(out);
}

/* Reading every frame in order while hashing gives each member the SHA-256
 * of its bytes. */
static void check_streamed(acquisition *a)
{
    qem_error e = {0};
    CHECK_OK(qem_input_stream_begin(a, &e), &e);
    const qem_dtype target = qem_input_stored_dtype(a);
    const uint64_t frames = a->shape[0] * a->shape[1], pixels = a->shape[2] * a->shape[3];
    const size_t frame = (size_t)pixels * qem_dtype_size(target);
    uint8_t *buf = malloc(frame * 3);
    for (uint64_t f = 0; f < frames; f += 3) {
        const uint64_t n = frames - f < 3 ? frames - f : 3;
        CHECK_OK(qem_input_read(a, f, n, target, buf, frame * n, &e), &e);
    }
    free(buf);
    /* The arrays were hashed by the reads themselves, to their last byte. */
    for (size_t i = 1; i < a->member_count; i++)
        CHECK_EQ_U64(a->members[i].streamed, a->members[i].bytes);
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

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* --- every value type, index type and byte order ------------------------------- */

static void test_types(void)
{
    static const struct {
        const char *data_dtype, *indptr_dtype, *indices_dtype;
        char kind;
        size_t size;
        int64_t lo, hi;
        qem_dtype stored;   /* what the writers store */
        const char *read_as;
    } cases[] = {
        {"<u1", "<i4", "<i4", 'u', 1, 1, 255, QEM_DTYPE_UINT8, "uint8"},
        {"|u1", ">u8", "|u1", 'u', 1, 1, 255, QEM_DTYPE_UINT8, "uint8"},
        {">u2", "int64", ">i2", 'u', 2, 1, 65535, QEM_DTYPE_UINT16, "uint16"},
        {"uint16", "uint32", "uint16", 'u', 2, 1, 65535, QEM_DTYPE_UINT16, "uint16"},
        {"<u4", "<i8", "<u4", 'u', 4, 1, 65535, QEM_DTYPE_UINT16, "uint32"},
        {"<f4", "<i4", "<i4", 'f', 4, -4000, 4000, QEM_DTYPE_FLOAT32, "float32"},
        {">f4", ">i4", ">i4", 'f', 4, -4000, 4000, QEM_DTYPE_FLOAT32, "float32"},
        {"float32", "int32", "int32", 'f', 4, 1, 9, QEM_DTYPE_FLOAT32, "float32"},
        {"|i1", "<i4", "<i4", 'i', 1, -128, 127, QEM_DTYPE_FLOAT32, "int8"},
        {">i2", "<i4", "<i4", 'i', 2, 1, 32767, QEM_DTYPE_UINT16, "int16"},
        {"<i4", "<i4", "<i4", 'i', 4, -1000000, 1000000, QEM_DTYPE_FLOAT32, "int32"},
        {"int64", "int64", "int64", 'i', 8, 1, 65535, QEM_DTYPE_UINT16, "int64"},
        {">u8", "<u2", "<u2", 'u', 8, 1, 65535, QEM_DTYPE_UINT16, "uint64"},
        {"<f8", "<i4", "<i4", 'f', 8, -4000, 4000, QEM_DTYPE_FLOAT32, "float64"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        void *dense = random_dense(cases[c].kind, cases[c].size, FRAMES, PIXELS, cases[c].lo,
                                   cases[c].hi, 4, 100 + c);
        csrb_set s;
        CHECK(csrb_from_dense(&s, dense, cases[c].kind, cases[c].size, FRAMES, PIXELS,
                              c % 2 ? 7 + c : 0) == 0);
        CHECK(s.entries > 0 && s.indptr[1] == 0); /* frame 0 empty, the rest not */
        const char *path = test_path("types.toml");
        const csrb_options o = {.data_dtype = cases[c].data_dtype,
                                .indptr_dtype = cases[c].indptr_dtype,
                                .indices_dtype = cases[c].indices_dtype,
                                .nav_shape = "[3, 4]",
                                .sig_shape = "[5, 6]"};
        CHECK(csrb_write(path, &s, &o) == 0);
        acquisition *a = ic_open(path, NULL);
        if (a) {
            CHECK(!strcmp(a->family->name, "csr"));
            CHECK_EQ_U64(a->shape[0], NAV_ROWS);
            CHECK_EQ_U64(a->shape[1], NAV_COLS);
            CHECK_EQ_U64(a->shape[2], SIG_ROWS);
            CHECK_EQ_U64(a->shape[3], SIG_COLS);
            CHECK_EQ_U64(a->flagged_count, 0);
            CHECK(!strcmp(qem_input_read_as_name(a), cases[c].read_as));
            CHECK(qem_input_stored_dtype(a) == cases[c].stored);
            /* The descriptor first, then indptr, indices, data. */
            CHECK_EQ_U64(a->member_count, 4);
            CHECK(a->members[0].is_master && !strcmp(base_name(a->members[0].path),
                                                     "types.toml"));
            CHECK(!strcmp(base_name(a->members[1].path), "indptr.raw"));
            CHECK(!strcmp(base_name(a->members[2].path), "coords.raw"));
            CHECK(!strcmp(base_name(a->members[3].path), "values.raw"));
            CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "frames")), FRAMES);
            CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "entries")), s.entries);
            json_t *data = json_object_get(a->facts, "data");
            CHECK(!strcmp(fact_string(data, "dtype"), cases[c].data_dtype));
            CHECK(!strcmp(fact_string(data, "type"), cases[c].read_as));
            CHECK(a->calibration == NULL);
            void *expected = expected_as(cases[c].kind, cases[c].size, dense,
                                         (uint64_t)FRAMES * PIXELS, cases[c].stored);
            check_frames(a, expected);
            check_streamed(a);
            free(expected);
        }
        qem_input_close(a);
        csrb_free(&s);
        free(dense);
    }
}

/* More frames than one block of row pointers (4096) and more entries than
 * one block of indices and values (65536): windows across both. */
static void test_blocks(void)
{
    const uint64_t frames = 100 * 50, pixels = 4 * 5;
    uint16_t *dense = random_dense('u', 2, frames, pixels, 1, 65535, 1, 11);
    csrb_set s;
    CHECK(csrb_from_dense(&s, dense, 'u', 2, frames, pixels, 3) == 0);
    CHECK(s.entries > 65536);
    const char *path = test_path("blocks.toml");
    const csrb_options o = {.nav_shape = "[100, 50]", .sig_shape = "[4, 5]",
                            .indptr_dtype = "<u8"};
    CHECK(csrb_write(path, &s, &o) == 0);
    acquisition *a = ic_open(path, NULL);
    if (a) {
        uint16_t *out = malloc(frames * pixels * 2);
        qem_error e = {0};
        /* All at once, then a window straddling frame 4096 and entry 65536. */
        CHECK_OK(qem_input_read(a, 0, frames, QEM_DTYPE_UINT16, out, frames * pixels * 2, &e),
                 &e);
        CHECK(memcmp(out, dense, frames * pixels * 2) == 0);
        memset(out, 0, frames * pixels * 2);
        CHECK_OK(qem_input_read(a, 3000, 1500, QEM_DTYPE_UINT16, out, 1500 * pixels * 2, &e),
                 &e);
        CHECK(memcmp(out, dense + 3000 * pixels, 1500 * pixels * 2) == 0);
        free(out);
        check_streamed(a);
    }
    qem_input_close(a);
    csrb_free(&s);
    free(dense);
}

/* --- duplicates, -0.0, the scan shape -------------------------------------------- */

static void test_duplicates(void)
{
    /* Entries naming one pixel twice add (scipy.sparse toarray). */
    const uint64_t indptr[3] = {0, 4, 6}, indices[6] = {3, 7, 3, 3, 0, 0};
    const uint8_t counts[6] = {1, 5, 2, 250, 9, 1};
    csrb_set s;
    CHECK(csrb_from_entries(&s, 'u', 1, 2, 8, indptr, indices, counts) == 0);
    const char *path = test_path("dup.toml");
    const csrb_options o = {.nav_shape = "[1, 2]", .sig_shape = "[2, 4]"};
    CHECK(csrb_write(path, &s, &o) == 0);
    acquisition *a = ic_open(path, NULL);
    if (a) {
        uint8_t out[16];
        const uint8_t expected[16] = {0, 0, 0, 253, 0, 0, 0, 5, 10, 0, 0, 0, 0, 0, 0, 0};
        qem_error e = {0};
        CHECK_OK(qem_input_read(a, 0, 2, QEM_DTYPE_UINT8, out, sizeof out, &e), &e);
        CHECK(memcmp(out, expected, 16) == 0);
    }
    qem_input_close(a);
    csrb_free(&s);
    /* A sum past the type is refused (numpy would wrap it): at read for
     * uint8, at open for int16 (settled over every value). */
    const uint8_t over[6] = {1, 5, 2, 253, 9, 1};
    CHECK(csrb_from_entries(&s, 'u', 1, 2, 8, indptr, indices, over) == 0);
    CHECK(csrb_write(path, &s, &o) == 0);
    refused_at_read(path, QEM_E_VALUE_RANGE, "pixel (0, 3) more than once");
    csrb_free(&s);
    const int16_t big[6] = {1, 5, 32000, 32000, 9, 1};
    CHECK(csrb_from_entries(&s, 'i', 2, 2, 8, indptr, indices, big) == 0);
    CHECK(csrb_write(path, &s, &o) == 0);
    ic_refused(path, NULL, QEM_E_VALUE_RANGE, "beyond int16");
    csrb_free(&s);
    /* float32 duplicates add in float32, in stored order, onto +0.0: a
     * lone -0.0 becomes +0.0, as toarray makes it. */
    const float f[6] = {0.1f, -0.0f, 0.2f, 0.3f, 1e30f, -1e30f};
    CHECK(csrb_from_entries(&s, 'f', 4, 2, 8, indptr, indices, f) == 0);
    CHECK(csrb_write(path, &s, &o) == 0);
    a = ic_open(path, NULL);
    if (a) {
        float out[16];
        qem_error e = {0};
        CHECK_OK(qem_input_read(a, 0, 2, QEM_DTYPE_FLOAT32, out, sizeof out, &e), &e);
        volatile float sum = 0.0f;
        sum += 0.1f;
        sum += 0.2f;
        sum += 0.3f;
        const float sum_f = sum, plus_zero = 0.0f;
        CHECK(memcmp(&out[3], &sum_f, 4) == 0);
        CHECK(memcmp(&out[7], &plus_zero, 4) == 0); /* -0.0 alone: +0.0 */
        CHECK(memcmp(&out[8], &plus_zero, 4) == 0); /* 1e30 + -1e30 */
    }
    qem_input_close(a);
    csrb_free(&s);
}

static void test_scan_shapes(void)
{
    uint8_t *dense = random_dense('u', 1, FRAMES, PIXELS, 1, 255, 3, 5);
    csrb_set s;
    CHECK(csrb_from_dense(&s, dense, 'u', 1, FRAMES, PIXELS, 0) == 0);
    const char *path = test_path("scan.toml");
    /* One nav axis states the frame count only: the scan shape is asked. */
    csrb_options o = {.nav_shape = "[12]", .sig_shape = "[5, 6]"};
    CHECK(csrb_write(path, &s, &o) == 0);
    ic_refused(path, NULL, QEM_E_LAYOUT, "--scan-shape");
    input_options io = {0};
    io.scan_shape[0] = 2;
    io.scan_shape[1] = 6;
    acquisition *a = ic_open(path, &io);
    CHECK(a && a->shape[0] == 2 && a->shape[1] == 6);
    if (a)
        check_frames(a, dense);
    qem_input_close(a);
    /* A scan shape contradicting nav_shape. */
    o.nav_shape = "[3, 4]";
    CHECK(csrb_write(path, &s, &o) == 0);
    ic_refused(path, &io, QEM_E_INVALID_ARGUMENT, "contradicts");
    io.scan_shape[0] = 3;
    io.scan_shape[1] = 4;
    a = ic_open(path, &io);
    qem_input_close(a);
    /* --dataset does not apply. */
    io.dataset = "/x";
    ic_refused(path, &io, QEM_E_INVALID_ARGUMENT, "--dataset");
    /* LiberTEM compares the filetype without case, and looks the arrays'
     * table up by the filetype as written. */
    o.filetype = "RAW_CSR";
    CHECK(csrb_write(path, &s, &o) == 0);
    a = ic_open(path, NULL);
    qem_input_close(a);
    o.filetype = NULL;
    o.extra = "# comment after\n\n[other]\nkey = 'x'\n";
    CHECK(csrb_write(path, &s, &o) == 0);
    a = ic_open(path, NULL);
    if (a) {
        json_t *other = json_object_get(json_object_get(a->facts, "descriptor"), "other");
        CHECK(!strcmp(fact_string(other, "key"), "x"));
    }
    qem_input_close(a);
    csrb_free(&s);
    free(dense);
}

/* --- the descriptor's TOML subset ---------------------------------------------------- */

static void test_toml(void)
{
    uint8_t dense[PIXELS] = {0, 3};
    csrb_set s;
    CHECK(csrb_from_dense(&s, dense, 'u', 1, 1, PIXELS, 0) == 0);
    const char *path = test_path("toml.toml");
    const csrb_options o = {.nav_shape = "[1, 1]", .sig_shape = "[5, 6]"};
    CHECK(csrb_write(path, &s, &o) == 0); /* the three files */
    static const struct {
        const char *text; /* after the two lines "[params]", "filetype = ..." */
        qem_status status;
        const char *needle;
    } cases[] = {
        {"flag = true\n", QEM_E_UNSUPPORTED, "line 3: a boolean"},
        {"x = 1.5\n", QEM_E_UNSUPPORTED, "line 3: a float"},
        {"x = 1e3\n", QEM_E_UNSUPPORTED, "line 3: a float"},
        {"x = inf\n", QEM_E_UNSUPPORTED, "line 3: a float (inf"},
        {"x = 0x1f\n", QEM_E_UNSUPPORTED, "hexadecimal"},
        {"x = 1979-05-27\n", QEM_E_UNSUPPORTED, "a date"},
        {"x = {a = 1}\n", QEM_E_UNSUPPORTED, "inline table"},
        {"a.b = 1\n", QEM_E_UNSUPPORTED, "dotted key"},
        {"\"a\" = 1\n", QEM_E_UNSUPPORTED, "quoted key"},
        {"[[t]]\n", QEM_E_UNSUPPORTED, "array of tables"},
        {"[a.b]\n", QEM_E_UNSUPPORTED, "dotted table name"},
        {"x = \"\"\"s\"\"\"\n", QEM_E_UNSUPPORTED, "multi-line string"},
        {"x = [\"a\"]\n", QEM_E_UNSUPPORTED, "something else than integers"},
        {"x = \"abc\n", QEM_E_LAYOUT, "line 3: a string that does not end"},
        {"x = 'abc\n", QEM_E_LAYOUT, "does not end"},
        {"x = \"a\\qb\"\n", QEM_E_LAYOUT, "unknown escape"},
        {"x = \"a\\u00\"\n", QEM_E_LAYOUT, "hex digits"},
        {"x = \"a\\u0000\"\n", QEM_E_LAYOUT, "U+0000"},
        {"x = \"a\\uD800\"\n", QEM_E_LAYOUT, "U+D800"},
        {"x = 1\nx = 2\n", QEM_E_LAYOUT, "line 4: the key 'x' given twice"},
        {"[params]\n", QEM_E_LAYOUT, "line 3: the table [params] defined twice"},
        {"x = 01\n", QEM_E_LAYOUT, "leading zero"},
        {"x = 9223372036854775808\n", QEM_E_LAYOUT, "64 bits"},
        {"x = 1 2\n", QEM_E_LAYOUT, "where the line should end"},
        {"x = 1_\n", QEM_E_LAYOUT, "line 3: not an integer"},
        {"x = [1, 2\n", QEM_E_LAYOUT, "does not end"},
        {"x = [1 2]\n", QEM_E_LAYOUT, "not separated"},
        {"x = [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]\n", QEM_E_LIMIT, "more than 16"},
        {"x =\n", QEM_E_LAYOUT, "no value"},
        {"x 1\n", QEM_E_LAYOUT, "without '='"},
        {"[t\n", QEM_E_LAYOUT, "without its ']'"},
        {"= 1\n", QEM_E_LAYOUT, "no key"},
        {"x = \"a\x01\"\n", QEM_E_LAYOUT, "line 3: control character 0x01"},
        {"x = \"a\rb\"\n", QEM_E_LAYOUT, "control character 0x0d"},
        {"x = \"\xc3\x28\"\n", QEM_E_LAYOUT, "line 3: bytes that are not UTF-8"},
        {"x = \"\xed\xa0\x80\"\n", QEM_E_LAYOUT, "not UTF-8"},
        {"x = \"\xc0\xaf\"\n", QEM_E_LAYOUT, "not UTF-8"},
    };
    char text[512];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = snprintf(text, sizeof text, "[params]\nfiletype = \"raw_csr\"\n%s",
                               cases[c].text);
        CHECK(write_file(path, text, (size_t)n));
        ic_refused(path, NULL, cases[c].status, cases[c].needle);
    }
    /* What the subset does take: comments, CRLF, blank lines, both string
     * forms with escapes, signs and underscores, multi-line arrays with a
     * trailing comma, keys before any table. */
    const char *full = "\xef\xbb\xbf# a raw_csr descriptor\r\n"
                       "title = \"caf\\u00e9 \\\"x\\\"\" # comment\r\n"
                       "\r\n"
                       "[params]\n"
                       "  filetype = 'raw_csr'  # literal string\n"
                       "nav_shape = [\n  1, # rows\n  +1,\n]\n"
                       "sig_shape=[5,6]\n"
                       "offset = -1_000\n"
                       "[raw_csr]\n"
                       "indptr_file = \"indptr.raw\"\nindptr_dtype = \"<i4\"\n"
                       "indices_file = 'coords.raw'\nindices_dtype = \"<i4\"\n"
                       "data_file = \"values.raw\"\ndata_dtype = \"|u1\"";
    CHECK(write_file(path, full, strlen(full)));
    acquisition *a = ic_open(path, NULL);
    if (a) {
        json_t *d = json_object_get(a->facts, "descriptor");
        CHECK(!strcmp(fact_string(json_object_get(d, ""), "title"), "caf\xc3\xa9 \"x\""));
        CHECK(json_integer_value(json_object_get(json_object_get(d, "params"), "offset")) ==
              -1000);
        check_frames(a, dense);
    }
    qem_input_close(a);
    /* A descriptor over 1 MiB. */
    const size_t big = (1u << 20) + 10;
    char *huge = malloc(big);
    memset(huge, '#', big);
    memcpy(huge, "[params]\nfiletype = \"raw_csr\"\n#", 31);
    CHECK(write_file(path, huge, big));
    ic_refused(path, NULL, QEM_E_LIMIT, "raw_csr descriptor");
    free(huge);
    /* Not a raw_csr descriptor: not recognised. */
    const char *other = "[params]\nfiletype = \"raw\"\n";
    CHECK(write_file(path, other, strlen(other)));
    ic_refused(path, NULL, QEM_E_UNSUPPORTED, "not a detector file qem recognises");
    csrb_free(&s);
}

/* --- the descriptor's content and the three files ------------------------------------- */

/* `count` integers as `dtype` into test_path(name). */
static void write_ints(const char *name, const char *dtype, const uint64_t *v, size_t count)
{
    uint8_t buf[64];
    const size_t size = csrb_encode_integers(dtype, v, count, buf);
    CHECK(size != 0);
    CHECK(write_file(test_path(name), buf, count * size));
}

/* The descriptor of the set written by test_descriptor_refusals with
 * `params` and `arrays` lines in place of its own. */
static void write_descriptor(const char *path, const char *params, const char *arrays)
{
    char text[1024];
    const int n = snprintf(
        text, sizeof text, "[params]\n%s\n[raw_csr]\n%s\n",
        params ? params : "filetype = \"raw_csr\"\nnav_shape = [1, 2]\nsig_shape = [5, 6]",
        arrays ? arrays
               : "indptr_file = \"indptr.raw\"\nindptr_dtype = \"<i4\"\nindices_file = "
                 "\"coords.raw\"\nindices_dtype = \"<i4\"\ndata_file = \"values.raw\"\n"
                 "data_dtype = \"<u2\"");
    CHECK(write_file(path, text, (size_t)n));
}

static void test_descriptor_refusals(void)
{
    uint16_t dense[2 * PIXELS] = {0, 3, 0, 0, 9};
    dense[PIXELS + 7] = 4;
    csrb_set s;
    CHECK(csrb_from_dense(&s, dense, 'u', 2, 2, PIXELS, 0) == 0);
    CHECK_EQ_U64(s.entries, 3);
    const char *path = strdup(test_path("d.toml"));
    const csrb_options good = {.nav_shape = "[1, 2]", .sig_shape = "[5, 6]"};
    CHECK(csrb_write(path, &s, &good) == 0);
    write_descriptor(path, NULL, NULL);
    acquisition *a = ic_open(path, NULL);
    if (a)
        check_frames(a, dense);
    qem_input_close(a);
    static const struct {
        const char *params, *arrays;
        qem_status status;
        const char *needle;
    } cases[] = {
        {"filetype = \"raw_csr\"\nsig_shape = [5, 6]", NULL, QEM_E_LAYOUT, "no nav_shape"},
        {"filetype = \"raw_csr\"\nnav_shape = [1, 2]", NULL, QEM_E_LAYOUT, "no sig_shape"},
        {"filetype = \"raw_csr\"\nnav_shape = \"1,2\"\nsig_shape = [5, 6]", NULL, QEM_E_LAYOUT,
         "line 3: nav_shape must be an array of positive integers"},
        {"filetype = \"raw_csr\"\nnav_shape = [0, 2]\nsig_shape = [5, 6]", NULL, QEM_E_LAYOUT,
         "positive integers"},
        {"filetype = \"raw_csr\"\nnav_shape = []\nsig_shape = [5, 6]", NULL, QEM_E_LAYOUT,
         "positive integers"},
        {"filetype = \"raw_csr\"\nnav_shape = [1, 1, 2]\nsig_shape = [5, 6]", NULL,
         QEM_E_UNSUPPORTED, "3 axes"},
        {"filetype = \"raw_csr\"\nnav_shape = [1, 2]\nsig_shape = [30]", NULL,
         QEM_E_UNSUPPORTED, "1 axes; qem reads detectors"},
        {"filetype = \"raw_csr\"\nnav_shape = [1, 3]\nsig_shape = [5, 6]", NULL, QEM_E_LAYOUT,
         "(3 frames), but"},
        {"filetype = \"raw_csr\"\nnav_shape = [4611686018427387904, 4]\nsig_shape = [5, 6]",
         NULL, QEM_E_LAYOUT, "overflows"},
        {"filetype = \"raw_csr\"\nnav_shape = [1, 2]\nsig_shape = [100000, 100000]", NULL,
         QEM_E_LIMIT, "at most"},
        {"filetype = 'RAW_CSR'\nnav_shape = [1, 2]\nsig_shape = [5, 6]", NULL, QEM_E_LAYOUT,
         "no [RAW_CSR] table"},
        {"nav_shape = [1, 2]\nsig_shape = [5, 6]\n[x]\nfiletype = \"raw_csr\"", NULL,
         QEM_E_LAYOUT, "no filetype in [params]"},
        {"filetype = \"raw_csrx\"\n[x]\nfiletype = \"raw_csr\"", NULL, QEM_E_UNSUPPORTED,
         "qem reads \"raw_csr\""},
        {NULL, "indptr_file = \"indptr.raw\"\nindptr_dtype = \"<i4\"\ndata_file = "
               "\"values.raw\"\ndata_dtype = \"<u2\"",
         QEM_E_LAYOUT, "no indices_file in [raw_csr]"},
        {NULL, "indptr_file = \"indptr.raw\"\nindptr_dtype = \"<i4\"\nindices_file = "
               "\"coords.raw\"\nindices_dtype = \"<i4\"\ndata_file = \"\"\ndata_dtype = \"<u2\"",
         QEM_E_LAYOUT, "line 10: data_file must be a non-empty string"},
        {NULL, "indptr_file = \"indptr.raw\"\nindptr_dtype = \"<i4\"\nindices_file = "
               "\"coords.raw\"\nindices_dtype = \"<i4\"\ndata_file = \"values.raw\"",
         QEM_E_LAYOUT, "no data_dtype"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        write_descriptor(path, cases[c].params, cases[c].arrays);
        ic_refused(path, NULL, cases[c].status, cases[c].needle);
    }
    /* numpy types qem does not read, each named. */
    static const struct {
        const char *indptr, *indices, *data;
        const char *needle;
    } types[] = {
        {"<i4", "<i4", "complex64", "(complex64)"}, {"<i4", "<i4", "<c16", "(complex128)"},
        {"<i4", "<i4", "<f2", "(float16)"},         {"<i4", "<i4", "bool", "(bool)"},
        {"<i4", "<i4", "?", "(bool)"},              {"<i4", "<i4", "<U8", "not a numpy dtype"},
        {"<i4", "<i4", "i3", "not a numpy dtype"},  {"<i4", "<i4", "", "non-empty"},
        {"<f4", "<i4", "<u2", "row pointers and pixel indices are integers"},
        {"<i4", "float64", "<u2", "indices_file as float64"},
    };
    for (size_t c = 0; c < sizeof types / sizeof types[0]; c++) {
        char arrays[512];
        snprintf(arrays, sizeof arrays,
                 "indptr_file = \"indptr.raw\"\nindptr_dtype = \"%s\"\nindices_file = "
                 "\"coords.raw\"\nindices_dtype = \"%s\"\ndata_file = \"values.raw\"\n"
                 "data_dtype = \"%s\"",
                 types[c].indptr, types[c].indices, types[c].data);
        write_descriptor(path, NULL, arrays);
        ic_refused(path, NULL, types[c].data[0] ? QEM_E_UNSUPPORTED : QEM_E_LAYOUT,
                types[c].needle);
    }

    /* Companions: only regular files inside the descriptor's folder. */
    mkdir(test_path("sub"), 0700);
    CHECK(write_file(test_path("outside.raw"), "", 0));
    mkdir(test_path("inner"), 0700);
    const char *inner = strdup(test_path("inner/d.toml"));
    static const struct {
        const char *name;
        qem_status status;
        const char *needle;
    } places[] = {
        {"../outside.raw", QEM_E_LAYOUT, "outside the descriptor's folder"},
        {"/etc/passwd", QEM_E_LAYOUT, "outside the descriptor's folder"},
        {"link.raw", QEM_E_LAYOUT, "resolves to"},
        {"sub", QEM_E_LAYOUT, "not a regular file"},
        {"missing.raw", QEM_E_IO, "cannot be read"},
    };
    CHECK(csrb_write(inner, &s, &good) == 0);
    CHECK(symlink("../outside.raw", test_path("inner/link.raw")) == 0);
    mkdir(test_path("inner/sub"), 0700);
    for (size_t c = 0; c < sizeof places / sizeof places[0]; c++) {
        const csrb_options o = {.nav_shape = "[1, 2]", .sig_shape = "[5, 6]",
                                .indices_file = places[c].name, .no_files = 1};
        CHECK(csrb_write(inner, &s, &o) == 0);
        ic_refused(inner, NULL, places[c].status, places[c].needle);
    }
    /* A symlink inside the folder is followed; one file named twice is not
     * two members. */
    csrb_options in = {.nav_shape = "[1, 2]", .sig_shape = "[5, 6]",
                       .indices_file = "sub/coords.raw"};
    CHECK(csrb_write(inner, &s, &in) == 0);
    CHECK(symlink("sub/coords.raw", test_path("inner/inlink.raw")) == 0);
    in.indices_file = "inlink.raw";
    in.no_files = 1;
    CHECK(csrb_write(inner, &s, &in) == 0);
    a = ic_open(inner, NULL);
    if (a)
        check_frames(a, dense);
    qem_input_close(a);
    in.indices_file = "indptr.raw";
    CHECK(csrb_write(inner, &s, &in) == 0);
    ic_refused(inner, NULL, QEM_E_LAYOUT, "named twice");

    /* The arrays' sizes. */
    const uint64_t ptr[3] = {0, 2, 3}, idx[3] = {1, 4, 7};
    const uint16_t val[3] = {3, 9, 4};
    write_descriptor(path, NULL, NULL);
    CHECK(write_file(test_path("values.raw"), val, 5));
    ic_refused(path, NULL, QEM_E_FILE_LENGTH, "not a whole number of uint16 items");
    CHECK(write_file(test_path("values.raw"), val, 4));
    ic_refused(path, NULL, QEM_E_LAYOUT, "one value per index");
    CHECK(write_file(test_path("values.raw"), val, 6));
    CHECK(write_file(test_path("indptr.raw"), "\0\0\0\0\0", 5));
    ic_refused(path, NULL, QEM_E_FILE_LENGTH, "not a whole number of int32 items");
    write_ints("indptr.raw", "<i4", ptr, 1);
    ic_refused(path, NULL, QEM_E_LAYOUT, "(at least 2)");
    /* The row pointers: from 0, never down, ending at the entries. */
    static const struct {
        const char *dtype;
        uint64_t ptr[3];
        const char *needle;
    } ptrs[] = {
        {"<i4", {1, 2, 3}, "row pointer 0 of"},
        {"<i4", {0, 3, 2}, "is below the one before"},
        {"<u8", {0, 1, 4}, "points past the entries"},
        {">i2", {0, 1, 2}, "leaves entries of the indices and data files unused"},
        {"<i4", {0, UINT32_MAX, 3}, "row pointer 1 of"},
    };
    for (size_t c = 0; c < sizeof ptrs / sizeof ptrs[0]; c++) {
        char arrays[512];
        snprintf(arrays, sizeof arrays,
                 "indptr_file = \"indptr.raw\"\nindptr_dtype = \"%s\"\nindices_file = "
                 "\"coords.raw\"\nindices_dtype = \"<i4\"\ndata_file = \"values.raw\"\n"
                 "data_dtype = \"<u2\"",
                 ptrs[c].dtype);
        write_descriptor(path, NULL, arrays);
        write_ints("indptr.raw", ptrs[c].dtype, ptrs[c].ptr, 3);
        ic_refused(path, NULL, QEM_E_LAYOUT, ptrs[c].needle);
    }
    /* A negative pointer is named as such. */
    write_descriptor(path, NULL, NULL);
    const uint64_t negative[3] = {0, UINT32_MAX, 3}; /* -1 as <i4 */
    write_ints("indptr.raw", "<i4", negative, 3);
    ic_refused(path, NULL, QEM_E_LAYOUT, "(-1) is negative");
    write_ints("indptr.raw", "<i4", ptr, 3);
    a = ic_open(path, NULL);
    qem_input_close(a);

    /* Pixel indices past the detector: found by the read (uint16 samples),
     * or at open where the values are settled (int16). */
    const uint64_t out_of_range[3] = {1, 30, 7}, minus_one[3] = {1, UINT32_MAX, 7};
    write_ints("coords.raw", "<i4", out_of_range, 3);
    refused_at_read(path, QEM_E_LAYOUT, "(frame 0) names pixel 30");
    write_ints("coords.raw", "<i4", minus_one, 3);
    refused_at_read(path, QEM_E_LAYOUT, "names pixel -1");
    write_descriptor(path, NULL,
                     "indptr_file = \"indptr.raw\"\nindptr_dtype = \"<i4\"\nindices_file = "
                     "\"coords.raw\"\nindices_dtype = \"<i4\"\ndata_file = \"values.raw\"\n"
                     "data_dtype = \"<i2\"");
    ic_refused(path, NULL, QEM_E_LAYOUT, "names pixel -1");
    write_ints("coords.raw", "<i4", idx, 3);
    a = ic_open(path, NULL);
    qem_input_close(a);

    /* Row pointers changed after the open: the read says the file changed. */
    write_descriptor(path, NULL, NULL);
    a = ic_open(path, NULL);
    if (a) {
        const uint64_t down[3] = {0, 3, 2};
        uint8_t bytes[12];
        csrb_encode_integers("<i4", down, 3, bytes);
        FILE *f = fopen(test_path("indptr.raw"), "r+b");
        CHECK(f && fwrite(bytes, 1, 12, f) == 12);
        if (f)
            fclose(f);
        uint16_t out[2 * PIXELS];
        qem_error e = {0};
        CHECK_STATUS(qem_input_read(a, 0, 2, QEM_DTYPE_UINT16, out, sizeof out, &e),
                     QEM_E_CHANGED, &e);
    }
    qem_input_close(a);
    csrb_free(&s);
    free((void *)path);
    free((void *)inner);
}

int main(void)
{
    test_types();
    test_blocks();
    test_duplicates();
    test_scan_shapes();
    test_toml();
    test_descriptor_refusals();
    return test_finish("unit_input_csr");
}
