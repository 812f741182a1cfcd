/* float32-bit-lanes-rans-v1: every bit pattern survives a round trip, chunks
 * respect the codec's window, the mean-dark recipe is kept but never
 * applied, and each layout or recipe rule is refused with its status. */
#include <math.h>

#include "common/base64.h"
#include "common/sha256.h"
#include "qem_build.h"
#include "qem/qem_internal.h" /* qem_file_export_npy */

static const uint32_t specials[] = {
    0x00000000u, 0x80000000u,             /* +0, -0 */
    0x7f800000u, 0xff800000u,             /* +inf, -inf */
    0x7fc00000u, 0x7fc00001u, 0xffc12345u, /* quiet NaNs with payloads */
    0x7f800001u, 0xff800123u, 0x7fbfffffu, /* signalling NaNs */
    0x00000001u, 0x807fffffu, 0x00400000u, /* subnormals */
    0x7f7fffffu, 0xff7fffffu, 0x00800000u, /* extremes, smallest normal */
    0x3f800000u, 0xbf800000u,             /* +-1 */
};

static uint64_t seed = 77;

/* Gaussian read noise around 100, with special values sprinkled in. */
static uint32_t sample(uint64_t scan, uint64_t p)
{
    uint64_t r = test_rand(&seed);
    if ((scan + p) % 11 == 0)
        return specials[r % (sizeof specials / sizeof specials[0])];
    double u1 = ((double)(r >> 11) + 1) * 0x1.0p-53, u2 = (double)(test_rand(&seed) >> 11) * 0x1.0p-53;
    float v = (float)(100.0 + 3.0 * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
    uint32_t b;
    memcpy(&b, &v, 4);
    return b;
}

static int save_float(const char *path, const uint64_t shape[4], const uint32_t *bits,
                      const qem_save_options *so, qem_error *e)
{
    qem_writer *w = NULL;
    qem_status st = qem_writer_create(path, QEM_DTYPE_FLOAT32, shape, so, &w, e);
    if (st == QEM_OK)
        st = qem_writer_append(w, bits, shape[0] * shape[1], e);
    if (st == QEM_OK)
        st = qem_writer_finish(w, e);
    qem_writer_free(w);
    return st == QEM_OK;
}

static void roundtrip(const char *name, const uint64_t shape[4], uint32_t chunk_scans,
                      const float *dark, uint64_t expect_chunks)
{
    const uint64_t scans = shape[0] * shape[1], P = shape[2] * shape[3];
    uint32_t *bits = malloc((size_t)(scans * P) * 4);
    for (uint64_t s = 0; s < scans; s++)
        for (uint64_t p = 0; p < P; p++)
            bits[s * P + p] = sample(s, p);
    qem_error e = {0};
    qem_save_options so;
    qem_save_options_init(&so);
    so.chunk_scans = chunk_scans;
    so.dark = dark;
    const char *path = test_path(name);
    CHECK(save_float(path, shape, bits, &so, &e));
    if (e.status)
        fprintf(stderr, "%s\n", e.message);
    qem_file *f = NULL;
    CHECK_OK(qem_open(path, NULL, &f, &e), &e);
    if (f) {
        qem_file_info info = {.struct_size = sizeof info};
        qem_get_info(f, &info, NULL);
        CHECK_EQ_U64(info.codec, QEM_CODEC_FLOAT32);
        CHECK_EQ_U64(info.chunk_count, expect_chunks);
        uint32_t *back = malloc((size_t)(scans * P) * 4);
        CHECK_OK(qem_read_scans(f, 0, scans, back, (size_t)(scans * P) * 4, &e), &e);
        CHECK(memcmp(back, bits, (size_t)(scans * P) * 4) == 0);
        uint64_t first = scans / 3, count = scans - first;
        CHECK_OK(qem_read_scans(f, first, count, back, (size_t)(count * P) * 4, &e), &e);
        CHECK(memcmp(back, bits + first * P, (size_t)(count * P) * 4) == 0);
        CHECK_OK(qem_verify(f, NULL, NULL, &e), &e);
        CHECK_EQ_U64(info.has_dark, dark != NULL);
        if (dark) {
            float *plane = malloc((size_t)P * 4);
            CHECK_OK(qem_get_dark(f, plane, (size_t)P * sizeof *plane, NULL), NULL);
            CHECK(memcmp(plane, dark, (size_t)P * 4) == 0);
            free(plane);
            size_t hlen = 0;
            const char *h = qem_header_json(f, &hlen);
            CHECK(strstr(h, "mean_dark_subtraction") && strstr(h, "empad-mean-dark/v1"));
        } else {
            float plane[1];
            CHECK_STATUS(qem_get_dark(f, plane, 4, NULL), QEM_E_NOT_RECORDED, NULL);
        }
        /* Export keeps every bit. */
        char npy[64];
        snprintf(npy, sizeof npy, "%s.npy", name);
        CHECK_OK(qem_file_export_npy(f, test_path(npy), NULL, &e), &e);
        qem_npy *n = NULL;
        CHECK_OK(qem_npy_open(test_path(npy), &n, &e), &e);
        if (n) {
            CHECK_OK(qem_npy_read(n, 0, scans * P, back, npy_read_size(n, scans * P), &e), &e);
            CHECK(memcmp(back, bits, (size_t)(scans * P) * 4) == 0);
            qem_npy_close(n);
        }
        free(back);
        qem_close(f);
    }
    free(bits);
}

static qem_parts base;
static uint64_t P0;
static int case_no;

static const char *variant(void (*edit)(json_t *h, uint8_t *body), int rehash)
{
    char name[32];
    snprintf(name, sizeof name, "case%d.qem", case_no++);
    const char *path = test_path(name);
    json_t *h = json_deep_copy(base.header);
    uint8_t *body = malloc(base.body_size);
    memcpy(body, base.body, base.body_size);
    edit(h, body);
    qem_parts_write(path, h, body, base.body_size, rehash);
    json_decref(h);
    free(body);
    return path;
}

static json_t *chunk0(json_t *h)
{
    return json_array_get(json_object_get(h, "chunks"), 0);
}
static json_t *background(json_t *h)
{
    return json_object_get(json_object_get(h, "empad"), "background");
}
static uint64_t field(json_t *obj, const char *key)
{
    return (uint64_t)json_integer_value(json_object_get(obj, key));
}

#define EDIT(name, code) static void name(json_t *h, uint8_t *b) { (void)h; (void)b; code; }
EDIT(no_empad, json_object_del(h, "empad"))
EDIT(empad_list, json_object_set_new(h, "empad", json_array()))
EDIT(dark_schema, json_object_set_new(background(h), "schema", json_string("empad-mean-dark/v2")))
EDIT(dark_identity, json_object_set_new(background(h), "identity", json_string("abc")))
EDIT(dark_base64, json_object_set_new(background(h), "values_float32_le", json_string("!!!!")))
EDIT(dark_length, json_object_set_new(background(h), "values_float32_le", json_string("AAAAAA==")))
EDIT(dark_nan, {
    float plane[64];
    for (int i = 0; i < 64; i++)
        plane[i] = 1.0f;
    plane[7] = NAN;
    char *b64 = NULL;
    b64 = qem_base64_encode(plane, sizeof plane);
    json_object_set_new(background(h), "values_float32_le", json_string(b64));
    free(b64);
})
EDIT(no_digest, json_object_del(h, "logical_sha256"))
EDIT(bad_digest_hex, json_object_set_new(h, "logical_sha256", json_string("xyz")))
EDIT(wrong_digest, {
    const char *d = json_string_value(json_object_get(h, "logical_sha256"));
    char copy[65];
    strcpy(copy, d);
    copy[0] = copy[0] == '0' ? '1' : '0';
    json_object_set_new(h, "logical_sha256", json_string(copy));
})
EDIT(dtype_u16, json_object_set_new(h, "dtype", json_string("uint16")))
EDIT(gap_before_offsets, json_object_set_new(chunk0(h), "offset_offset", json_integer((json_int_t)field(chunk0(h), "offset_offset") + 1)))
EDIT(offset_bytes, json_object_set_new(chunk0(h), "offset_bytes", json_integer((json_int_t)field(chunk0(h), "offset_bytes") - 4)))
EDIT(model_bytes, json_object_set_new(chunk0(h), "model_bytes", json_integer(1)))
EDIT(payload_zero, json_object_set_new(chunk0(h), "payload_bytes", json_integer(0)))
EDIT(too_many_scans, {
    /* One chunk claiming more than 512 scans. */
    json_object_set_new(h, "shape", json_pack("[i,i,i,i]", 1, 600, 8, 8));
    json_t *axes = json_object_get(json_object_get(h, "scientific_metadata"), "axes");
    json_object_set_new(json_array_get(axes, 0), "size", json_integer(1));
    json_object_set_new(json_array_get(axes, 1), "size", json_integer(600));
    json_object_set_new(chunk0(h), "scans", json_integer(600));
    json_array_remove(json_object_get(h, "chunks"), 1);
})
EDIT(offsets_past_payload, {
    /* The last lane offset of chunk 0 beyond its payload. */
    uint64_t at = field(chunk0(h), "offset_offset") + 4 * 2 * P0;
    uint32_t v = (uint32_t)field(chunk0(h), "payload_bytes") + 1;
    memcpy(b + at, &v, 4);
})
EDIT(lane_span, {
    /* A constant lane (2 bytes) relabelled raw, which needs 2n bytes. */
    uint64_t models = field(chunk0(h), "model_offset");
    for (uint64_t l = 0; l < 2 * P0; l++)
        if (b[models + l] == 255) {
            b[models + l] = 254;
            break;
        }
})

/* Dark recipes from .npy: a plane as given, or the mean of a frame stack;
 * the identity hashes the schema, a NUL, the frames and the plane. */
static void test_dark_from_npy(void)
{
    qem_error e = {0};
    uint16_t frames[3][4] = {{1, 2, 3, 4}, {1, 2, 3, 5}, {1, 2, 4, 5}};
    uint64_t shape3[3] = {3, 2, 2};
    qem_npy_writer *w = NULL;
    CHECK_OK(qem_npy_writer_create(test_path("stack.npy"), QEM_DTYPE_UINT16, 3, shape3, &w, &e), &e);
    CHECK_OK(qem_npy_writer_append(w, frames, 12, &e), &e);
    CHECK_OK(qem_npy_writer_finish(w, &e), &e);
    qem_npy_writer_free(w);
    float plane[6]; /* room for the 2x3 and 3x2 requests refused below */
    char identity[65];
    CHECK_OK(qem_dark_from_npy(test_path("stack.npy"), 2, 2, plane, sizeof plane, identity, sizeof identity, &e), &e);
    const float mean[4] = {1.0f, 2.0f, (float)(10.0 / 3.0), (float)(14.0 / 3.0)};
    CHECK(memcmp(plane, mean, sizeof mean) == 0);
    uint8_t buf[19 + 24 + 16], digest[32];
    memcpy(buf, "empad-mean-dark/v1", 19); /* with its NUL */
    memcpy(buf + 19, frames, 24);
    memcpy(buf + 43, mean, 16);
    char want[65];
    qem_sha256_oneshot(buf, sizeof buf, digest);
    qem_sha256_hex(digest, want);
    CHECK(!strcmp(identity, want));
    /* A float32 plane is taken as it is. */
    uint64_t shape2[2] = {2, 2};
    CHECK_OK(qem_npy_writer_create(test_path("plane.npy"), QEM_DTYPE_FLOAT32, 2, shape2, &w, &e), &e);
    CHECK_OK(qem_npy_writer_append(w, mean, 4, &e), &e);
    CHECK_OK(qem_npy_writer_finish(w, &e), &e);
    qem_npy_writer_free(w);
    CHECK_OK(qem_dark_from_npy(test_path("plane.npy"), 2, 2, plane, sizeof plane, identity, sizeof identity, &e), &e);
    CHECK(memcmp(plane, mean, sizeof mean) == 0);
    CHECK_STATUS(qem_dark_from_npy(test_path("plane.npy"), 2, 3, plane, sizeof plane, identity, sizeof identity, &e), QEM_E_NPY, &e);
    CHECK_STATUS(qem_dark_from_npy(test_path("stack.npy"), 3, 2, plane, sizeof plane, identity, sizeof identity, &e), QEM_E_NPY, &e);
}

int main(void)
{
    qem_error e = {0};
    test_dark_from_npy();
    /* Special values, several chunks, with and without a dark plane. */
    const uint64_t small[4] = {4, 5, 6, 7};
    roundtrip("plain.qem", small, 3, NULL, 7);
    float dark[42];
    for (int i = 0; i < 42; i++)
        dark[i] = 0.25f * (float)i - 3.0f;
    roundtrip("dark.qem", small, 0, dark, 1);
    /* 130x130 pixels: 32 MiB / (4 P) = 496 scans per chunk at most. */
    const uint64_t wide[4] = {2, 500, 130, 130};
    roundtrip("wide.qem", wide, 0, NULL, 3);

    /* An all-zero array: every lane is empty, one padding byte remains. */
    const uint64_t tiny[4] = {1, 2, 2, 2};
    uint32_t zeros[8] = {0};
    CHECK(save_float(test_path("zeros.qem"), tiny, zeros, NULL, &e));
    qem_parts zp;
    CHECK(qem_parts_load(test_path("zeros.qem"), &zp));
    CHECK_EQ_U64(field(json_array_get(json_object_get(zp.header, "chunks"), 0), "payload_bytes"), 1);
    qem_parts_free(&zp);
    CHECK_OK(open_status(test_path("zeros.qem"), &e), &e);

    /* What the float codec cannot hold. */
    qem_writer *w = NULL;
    qem_save_options so;
    qem_save_options_init(&so);
    uint8_t valid[42];
    memset(valid, 1, sizeof valid);
    valid[3] = 0;
    so.valid = valid;
    CHECK_STATUS(qem_writer_create(test_path("masked.qem"), QEM_DTYPE_FLOAT32, small, &so, &w, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    qem_save_options_init(&so);
    so.dark = dark;
    CHECK_STATUS(qem_writer_create(test_path("dark16.qem"), QEM_DTYPE_UINT16, small, &so, &w, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    const uint64_t huge[4] = {1, 1, 4096, 4096}; /* 64 MiB frames */
    CHECK_STATUS(qem_writer_create(test_path("huge.qem"), QEM_DTYPE_FLOAT32, huge, NULL, &w, &e),
                 QEM_E_INVALID_ARGUMENT, &e);

    /* Rules, on a 8x8-detector file of two chunks with a dark plane. */
    const uint64_t shape[4] = {2, 3, 8, 8};
    P0 = 64;
    uint32_t bits[6 * 64];
    for (int i = 0; i < 6 * 64; i++)
        bits[i] = i % 9 == 0 ? specials[i % 18] : (uint32_t)(0x42c80000u + (i % 5)); /* ~100 */
    float plane[64];
    for (int i = 0; i < 64; i++)
        plane[i] = 2.0f;
    qem_save_options_init(&so);
    so.chunk_scans = 4;
    so.dark = plane;
    CHECK(save_float(test_path("base.qem"), shape, bits, &so, &e));
    CHECK(qem_parts_load(test_path("base.qem"), &base));
    if (!base.header)
        return test_finish("unit_float_codec");
    struct {
        const char *name;
        void (*edit)(json_t *, uint8_t *);
        qem_status at_open, at_read;
        const char *words;
    } rules[] = {
        {"no empad", no_empad, QEM_E_HEADER, 0, "empad"},
        {"empad list", empad_list, QEM_E_HEADER, 0, "empad"},
        {"dark schema", dark_schema, QEM_E_METADATA, 0, "schema"},
        {"dark identity", dark_identity, QEM_E_METADATA, 0, "identity"},
        {"dark base64", dark_base64, QEM_E_METADATA, 0, "base64"},
        {"dark length", dark_length, QEM_E_METADATA, 0, "detector needs"},
        {"dark NaN", dark_nan, QEM_E_METADATA, 0, "not finite"},
        {"no digest", no_digest, QEM_E_HEADER, 0, "logical_sha256"},
        {"digest not hex", bad_digest_hex, QEM_E_HEADER, 0, "logical_sha256"},
        {"dtype uint16", dtype_u16, QEM_E_HEADER, 0, "float32"},
        {"gap before offsets", gap_before_offsets, QEM_E_LAYOUT, 0, "follow each other"},
        {"offset bytes", offset_bytes, QEM_E_LAYOUT, 0, "offset_bytes"},
        {"model bytes", model_bytes, QEM_E_LAYOUT, 0, "model_bytes"},
        {"empty payload", payload_zero, QEM_E_LAYOUT, 0, "payload_bytes"},
        {"too many scans", too_many_scans, QEM_E_LAYOUT, 0, "at most"},
        {"offsets past payload", offsets_past_payload, QEM_OK, QEM_E_LAYOUT, "beyond"},
        {"lane span", lane_span, QEM_OK, QEM_E_MODEL, "not allowed"},
        {"wrong digest", wrong_digest, QEM_OK, QEM_E_LOGICAL_CHECKSUM, "logical_sha256"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        const char *path = variant(rules[i].edit, 1);
        qem_file *f = NULL;
        qem_status st = qem_open(path, NULL, &f, &e);
        if (st != rules[i].at_open)
            fprintf(stderr, "rule '%s'\n", rules[i].name);
        CHECK_STATUS(st, rules[i].at_open, &e);
        if (f) {
            uint32_t out[6 * 64];
            st = qem_read_scans(f, 0, 6, out, sizeof out, &e);
            if (st != rules[i].at_read)
                fprintf(stderr, "rule '%s' (read)\n", rules[i].name);
            CHECK_STATUS(st, rules[i].at_read, &e);
            CHECK_STATUS(qem_verify(f, NULL, NULL, &e), rules[i].at_read, &e);
            if (rules[i].at_read == QEM_E_LOGICAL_CHECKSUM) {
                /* Partial reads cannot prove the digest and still work;
                 * export refuses to publish unproven bits. */
                CHECK_OK(qem_read_scans(f, 0, 5, out, sizeof out, &e), &e);
                CHECK_STATUS(qem_file_export_npy(f, test_path("bad.npy"), NULL, &e),
                             QEM_E_LOGICAL_CHECKSUM, &e);
                CHECK(!file_exists(test_path("bad.npy")));
            }
            qem_close(f);
        }
        if (!strstr(e.message, rules[i].words))
            fprintf(stderr, "rule '%s': message '%s' lacks '%s'\n", rules[i].name, e.message,
                    rules[i].words);
        CHECK(strstr(e.message, rules[i].words) != NULL);
    }
    qem_parts_free(&base);
    return test_finish("unit_float_codec");
}
