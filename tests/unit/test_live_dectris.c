/* The DECTRIS SIMPLON stream V1 receiver (lib/live/dectris_message.c,
 * dectris_zmq.c): the bit-unshuffle against a bit-by-bit reference and
 * against the `bitshuffle` Python module's own output; every refusal of
 * the message parsers (QEM_E_STREAM naming the frame); and the receiver
 * end to end over loopback against tests/live/sim_dectris.py serving the
 * Arina fixture and synthetic counts, into the tests' own sink
 * (tests/common/live_test.c). */
#include <jansson.h>
#include <lz4.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "live/dectris_message.h"
#include "live/live.h"
#include "live_test.h"
#include "test_util.h"

/* --- bit-unshuffle ---------------------------------------------------------------- */

static int get_bit(const uint8_t *p, size_t bit)
{
    return (p[bit / 8] >> (bit % 8)) & 1;
}

static void set_bit(uint8_t *p, size_t bit, int v)
{
    if (v)
        p[bit / 8] |= (uint8_t)(1u << (bit % 8));
}

/* Bitshuffle by its definition, one bit at a time: bit b of byte k of
 * element e goes to row 8k + b, position e. */
static void shuffle_reference(const uint8_t *in, uint8_t *out, size_t n, unsigned es)
{
    memset(out, 0, n * es);
    for (size_t e = 0; e < n; e++)
        for (unsigned k = 0; k < es; k++)
            for (unsigned b = 0; b < 8; b++)
                set_bit(out, (8 * k + b) * n + e, get_bit(in, (e * es + k) * 8 + b));
}

static void test_unshuffle_reference(void)
{
    static const size_t counts[] = {8, 16, 120, 2048, 4096};
    uint64_t state = 7;
    for (unsigned es = 1; es <= 4; es *= 2)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            const size_t n = counts[c], bytes = n * es;
            uint8_t *in = malloc(bytes), *shuffled = malloc(bytes), *back = malloc(bytes);
            for (size_t i = 0; i < bytes; i++)
                in[i] = (uint8_t)test_rand(&state);
            shuffle_reference(in, shuffled, n, es);
            memset(back, 0xA5, bytes);
            qem_bitunshuffle(shuffled, back, n, es);
            CHECK(!memcmp(in, back, bytes));
            free(in);
            free(shuffled);
            free(back);
        }
}

/* The value the Python helper below computes for element i. */
static uint32_t pattern(uint64_t i, unsigned es)
{
    const uint32_t v = (uint32_t)((i * 2654435761u) & 0xFFFFFFFFu) >> (i % 23);
    return es == 4 ? v : es == 2 ? (v & 0xFFFFu) : (v & 0xFFu);
}

/* bitshuffle.compress_lz4's blocks in the HDF5 filter's framing, written
 * by the module itself, decoded here. */
static void test_against_bitshuffle_module(void)
{
    static const struct {
        unsigned es, block; /* block in elements */
        size_t n;
    } cases[] = {{4, 2048, 192 * 192}, {4, 16, 13 * 7}, {2, 4096, 96 * 50},
                 {2, 24, 11 * 9},      {1, 8192, 300}, {4, 2048, 5}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *path = test_path("bs.bin");
        char cmd[1400];
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c 'import struct, numpy as np, bitshuffle\n"
                 "i = np.arange(%zu, dtype=np.uint64)\n"
                 "v = (((i * 2654435761) & 0xFFFFFFFF) >> (i %% 23)).astype(np.uint32)\n"
                 "a = v.astype(np.uint%u)\n"
                 "body = bitshuffle.compress_lz4(a, %u).tobytes()\n"
                 "open(\"%s\", \"wb\").write(struct.pack(\">QI\", a.nbytes, %u) + body)'",
                 cases[c].n, 8 * cases[c].es, cases[c].block, path,
                 cases[c].block * cases[c].es);
        CHECK(system(cmd) == 0);
        size_t size = 0;
        uint8_t *blob = read_file(path, &size);
        CHECK(blob != NULL);
        if (!blob)
            continue;
        const size_t bytes = cases[c].n * cases[c].es;
        qem_dectris_image im = {.frame = 9, .encoding = QEM_DECTRIS_ENC_BSLZ4,
                                .element_size = cases[c].es, .blob = blob, .blob_size = size,
                                .frame_bytes = bytes};
        uint8_t *out = malloc(bytes), *scratch = malloc(bytes);
        qem_error e = {0};
        CHECK_OK(qem_dectris_decode_image(&im, out, bytes, scratch, bytes, &e), &e);
        uint64_t wrong = 0;
        for (size_t i = 0; i < cases[c].n; i++) {
            uint32_t got = 0;
            memcpy(&got, out + i * cases[c].es, cases[c].es); /* little-endian host */
            wrong += got != pattern(i, cases[c].es);
        }
        CHECK_EQ_U64(wrong, 0);
        free(out);
        free(scratch);
        free(blob);
    }
}

/* Prints the unshuffle's speed on 192 x 192 uint32 frames (not asserted:
 * the machine may be shared or sanitised). */
static void report_unshuffle_speed(void)
{
    const size_t n = 192 * 192, bytes = n * 4;
    uint8_t *in = calloc(1, bytes), *out = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        in[i] = (uint8_t)(i * 37);
    struct timespec t0, t1;
    const int rounds = 300;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < rounds; r++)
        for (size_t b = 0; b < n; b += 2048)
            qem_bitunshuffle(in + b * 4, out + b * 4, 2048, 4);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("bit-unshuffle: %.2f GB/s on 192x192 uint32 (%d frames)\n",
           (double)bytes * rounds / s / 1e9, rounds);
    free(in);
    free(out);
}

/* --- message parsers -------------------------------------------------------------- */

#define MAX_TEST_PARTS 12

typedef struct message {
    qem_dectris_part parts[MAX_TEST_PARTS];
    char *owned[MAX_TEST_PARTS];
    size_t count;
} message;

static void add_part(message *m, const void *data, size_t size)
{
    char *copy = malloc(size ? size : 1);
    memcpy(copy, data, size);
    m->owned[m->count] = copy;
    m->parts[m->count].data = copy;
    m->parts[m->count].size = size;
    m->count++;
}

static void add_text(message *m, const char *text)
{
    add_part(m, text, strlen(text));
}

static void message_free(message *m)
{
    for (size_t k = 0; k < m->count; k++)
        free(m->owned[k]);
    memset(m, 0, sizeof *m);
}

/* A 4 x 3 (columns x rows) uint16 detector: a basic header. */
#define CONFIG_OK                                                                                  \
    "{\"x_pixels_in_detector\": 4, \"y_pixels_in_detector\": 3, \"bit_depth_image\": 16,"        \
    " \"nimages\": 2, \"ntrigger\": 3, \"detector_serial_number\": \"T-1\"}"
#define HEAD_BASIC "{\"htype\": \"dheader-1.0\", \"series\": 7, \"header_detail\": \"basic\"}"

static qem_status header_of(const char *head, const char *config, qem_dectris_series *s,
                            qem_error *e)
{
    message m = {0};
    add_text(&m, head);
    if (config)
        add_text(&m, config);
    memset(s, 0, sizeof *s);
    const qem_status st = qem_dectris_parse_header(m.parts, m.count, s, e);
    message_free(&m);
    return st;
}

/* An image message: frame `frame` of series 7, raw uint16 pixels i + frame. */
typedef struct image_spec {
    const char *head;  /* NULL: the right one */
    const char *desc;  /* NULL: the right one */
    const char *tail;  /* NULL: the right one */
    const void *blob;  /* NULL: the raw pixels */
    size_t blob_size;
    int parts;         /* 0: 4 */
} image_spec;

static void image_message(message *m, uint64_t frame, const image_spec *spec)
{
    uint16_t pixels[12];
    for (int i = 0; i < 12; i++)
        pixels[i] = (uint16_t)(i + frame);
    const void *blob = spec->blob ? spec->blob : pixels;
    const size_t size = spec->blob ? spec->blob_size : sizeof pixels;
    char head[256], desc[256];
    snprintf(head, sizeof head,
             "{\"htype\": \"dimage-1.0\", \"series\": 7, \"frame\": %llu, \"hash\": \"00\"}",
             (unsigned long long)frame);
    snprintf(desc, sizeof desc,
             "{\"htype\": \"dimage_d-1.0\", \"shape\": [4, 3], \"type\": \"uint16\","
             " \"encoding\": \"<\", \"size\": %zu}", size);
    add_text(m, spec->head ? spec->head : head);
    add_text(m, spec->desc ? spec->desc : desc);
    add_part(m, blob, size);
    if (spec->parts != 3)
        add_text(m, spec->tail ? spec->tail : "{\"htype\": \"dconfig-1.0\", \"real_time\": 1}");
}

static void test_header_and_images(void)
{
    qem_error e = {0};
    qem_dectris_series s;
    CHECK_OK(header_of(HEAD_BASIC, CONFIG_OK, &s, &e), &e);
    CHECK(qem_dectris_series_known(&s));
    CHECK_EQ_U64(s.rows, 3);
    CHECK_EQ_U64(s.columns, 4);
    CHECK_EQ_U64(s.sample_type, QEM_DTYPE_UINT16);
    CHECK_EQ_U64(s.frames, 6);
    CHECK_EQ_U64(s.series, 7);
    CHECK(json_is_object(json_object_get(s.facts, "config")));
    for (uint64_t f = 0; f < 3; f++) {
        message m = {0};
        image_spec spec = {0};
        image_message(&m, f, &spec);
        qem_dectris_image im;
        CHECK_OK(qem_dectris_parse_image(m.parts, m.count, &s, &im, &e), &e);
        CHECK_EQ_U64(im.frame, f);
        uint16_t out[12];
        CHECK_OK(qem_dectris_decode_image(&im, out, sizeof out, NULL, 0, &e), &e);
        CHECK_EQ_U64(out[11], 11 + f);
        message_free(&m);
    }
    CHECK_EQ_U64(s.next_frame, 3);

    /* Every image rule, each at frame 3 after three good frames. */
    uint8_t lz4_garbage[24];
    memset(lz4_garbage, 0xFF, sizeof lz4_garbage);
    const struct {
        const char *what;
        uint64_t frame;
        image_spec spec;
        const char *names;
    } bad[] = {
        {"out of order", 4, {0}, "frame 4 is out of order (expected frame 3)"},
        {"repeated", 2, {0}, "frame 2 is repeated (expected frame 3)"},
        {"bad JSON", 3, {.head = "{\"htype\": \"dimage-1.0\", \"frame\": 3"}, "frame 3"},
        {"not an object", 3, {.desc = "[1, 2]"}, "frame 3"},
        {"no frame", 3, {.head = "{\"htype\": \"dimage-1.0\", \"series\": 7}"}, "frame 3"},
        {"wrong htype", 3, {.head = "{\"htype\": \"dimage-2.0\", \"frame\": 3}"}, "frame 3"},
        {"other series", 3,
         {.head = "{\"htype\": \"dimage-1.0\", \"series\": 8, \"frame\": 3}"}, "series 8"},
        {"three parts", 3, {.parts = 3}, "frame 3"},
        {"no dimage_d", 3, {.desc = "{\"htype\": \"dimage-1.0\"}"}, "frame 3"},
        {"no dconfig", 3, {.tail = "{\"htype\": \"dconfig-2.0\"}"}, "frame 3"},
        {"wrong shape", 3,
         {.desc = "{\"htype\": \"dimage_d-1.0\", \"shape\": [3, 4], \"type\": \"uint16\","
                  " \"encoding\": \"<\", \"size\": 24}"}, "frame 3"},
        {"shape of 3", 3,
         {.desc = "{\"htype\": \"dimage_d-1.0\", \"shape\": [4, 3, 1], \"type\": \"uint16\","
                  " \"encoding\": \"<\", \"size\": 24}"}, "frame 3"},
        {"wrong type", 3,
         {.desc = "{\"htype\": \"dimage_d-1.0\", \"shape\": [4, 3], \"type\": \"uint32\","
                  " \"encoding\": \"<\", \"size\": 24}"}, "frame 3"},
        {"unknown type", 3,
         {.desc = "{\"htype\": \"dimage_d-1.0\", \"shape\": [4, 3], \"type\": \"float32\","
                  " \"encoding\": \"<\", \"size\": 24}"}, "frame 3"},
        {"unknown encoding", 3,
         {.desc = "{\"htype\": \"dimage_d-1.0\", \"shape\": [4, 3], \"type\": \"uint16\","
                  " \"encoding\": \"zstd<\", \"size\": 24}"}, "frame 3"},
        {"bs32 on uint16", 3,
         {.desc = "{\"htype\": \"dimage_d-1.0\", \"shape\": [4, 3], \"type\": \"uint16\","
                  " \"encoding\": \"bs32-lz4<\", \"size\": 24}"}, "frame 3"},
        {"size disagrees", 3,
         {.desc = "{\"htype\": \"dimage_d-1.0\", \"shape\": [4, 3], \"type\": \"uint16\","
                  " \"encoding\": \"<\", \"size\": 23}"}, "frame 3"},
        {"no size", 3,
         {.desc = "{\"htype\": \"dimage_d-1.0\", \"shape\": [4, 3], \"type\": \"uint16\","
                  " \"encoding\": \"<\"}"}, "frame 3"},
        {"hash not a string", 3,
         {.head = "{\"htype\": \"dimage-1.0\", \"series\": 7, \"frame\": 3, \"hash\": 1}"},
         "frame 3"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        qem_dectris_series copy = s; /* shallow: the parse changes only its numbers */
        message m = {0};
        image_message(&m, bad[k].frame, &bad[k].spec);
        qem_dectris_image im;
        qem_error ek = {0};
        CHECK_STATUS(qem_dectris_parse_image(m.parts, m.count, &copy, &im, &ek), QEM_E_STREAM,
                     &ek);
        if (!live_test_names(&ek, bad[k].names))
            fprintf(stderr, "  (case: %s)\n", bad[k].what);
        CHECK(live_test_names(&ek, bad[k].names));
        CHECK_EQ_U64(copy.next_frame, 3);
        message_free(&m);
    }

    /* Decoding rules, on messages whose JSON passes. */
    const struct {
        const char *encoding;
        const void *blob;
        size_t size;
    } undecodable[] = {
        {"<", lz4_garbage, 23},
        {"lz4<", lz4_garbage, sizeof lz4_garbage},
        {"bs16-lz4<", lz4_garbage, 8},  /* shorter than the 12-byte header */
        {"bs16-lz4<", lz4_garbage, 24}, /* states 2^64 - 1 bytes */
    };
    for (size_t k = 0; k < sizeof undecodable / sizeof undecodable[0]; k++) {
        qem_dectris_series copy = s;
        char desc[256];
        snprintf(desc, sizeof desc,
                 "{\"htype\": \"dimage_d-1.0\", \"shape\": [4, 3], \"type\": \"uint16\","
                 " \"encoding\": \"%s\", \"size\": %zu}", undecodable[k].encoding,
                 undecodable[k].size);
        message m = {0};
        image_spec spec = {.desc = desc, .blob = undecodable[k].blob,
                           .blob_size = undecodable[k].size};
        image_message(&m, 3, &spec);
        qem_dectris_image im;
        qem_error ek = {0};
        CHECK_OK(qem_dectris_parse_image(m.parts, m.count, &copy, &im, &ek), &ek);
        uint16_t out[12], scratch[12];
        CHECK_STATUS(qem_dectris_decode_image(&im, out, sizeof out, scratch, sizeof scratch, &ek),
                     QEM_E_STREAM, &ek);
        CHECK(live_test_names(&ek, "frame 3"));
        message_free(&m);
    }

    /* The bitshuffle framing's rules, on a good 12-sample uint16 image. */
    uint16_t values[12], shuffled[8];
    for (int i = 0; i < 12; i++)
        values[i] = (uint16_t)(1000 * i + 3);
    shuffle_reference((const uint8_t *)values, (uint8_t *)shuffled, 8, 2);
    uint8_t good[64];
    size_t good_size = 0;
    const uint8_t framing[12] = {0, 0, 0, 0, 0, 0, 0, 24, 0, 0, 0, 16};
    memcpy(good, framing, 12);
    const int c = LZ4_compress_default((const char *)shuffled, (char *)good + 16, 16, 40);
    CHECK(c > 0);
    good[12] = good[13] = good[14] = 0;
    good[15] = (uint8_t)c;
    memcpy(good + 16 + c, values + 8, 8); /* 4 samples left: stored as they are */
    good_size = 16 + (size_t)c + 8;
    const struct {
        const char *what;
        size_t at; /* byte changed (SIZE_MAX: none) */
        uint8_t value;
        long size_change;
        int ok;
    } framings[] = {
        {"good", SIZE_MAX, 0, 0, 1},
        {"total", 7, 26, 0, 0},
        {"block 0", 11, 0, 0, 0},
        {"block not 8 samples", 11, 10, 0, 0},
        {"block runs past", 15, 200, 0, 0},
        {"truncated rest", SIZE_MAX, 0, -1, 0},
        {"trailing byte", SIZE_MAX, 0, 1, 0},
        {"lz4 damaged", 16, 0x0F, 0, 0}, /* a match before any output */
    };
    for (size_t k = 0; k < sizeof framings / sizeof framings[0]; k++) {
        uint8_t blob[80];
        memcpy(blob, good, good_size);
        blob[good_size] = 0;
        if (framings[k].at != SIZE_MAX)
            blob[framings[k].at] = framings[k].value;
        const size_t size = (size_t)((long)good_size + framings[k].size_change);
        qem_dectris_image im = {.frame = 3, .encoding = QEM_DECTRIS_ENC_BSLZ4, .element_size = 2,
                                .blob = blob, .blob_size = size, .frame_bytes = 24};
        uint16_t out[12], scratch[12];
        qem_error ek = {0};
        const qem_status st = qem_dectris_decode_image(&im, out, sizeof out, scratch,
                                                       sizeof scratch, &ek);
        if (framings[k].ok) {
            CHECK_OK(st, &ek);
            CHECK(!memcmp(out, values, sizeof values));
        } else {
            CHECK_STATUS(st, QEM_E_STREAM, &ek);
            CHECK(live_test_names(&ek, "frame 3"));
        }
    }

    /* The series end. */
    message m = {0};
    add_text(&m, "{\"htype\": \"dseries_end-1.0\", \"series\": 7}");
    CHECK_OK(qem_dectris_parse_end(m.parts, m.count, &s, &e), &e);
    add_text(&m, "{}");
    CHECK_STATUS(qem_dectris_parse_end(m.parts, m.count, &s, &e), QEM_E_STREAM, &e);
    message_free(&m);
    add_text(&m, "{\"htype\": \"dseries_end-1.0\", \"series\": 6}");
    qem_error ee = {0};
    CHECK_STATUS(qem_dectris_parse_end(m.parts, m.count, &s, &ee), QEM_E_STREAM, &ee);
    CHECK(live_test_names(&ee, "frame 3"));
    message_free(&m);

    /* What a message opens with. */
    qem_dectris_kind kind;
    const char *opens[] = {"{\"htype\": \"dheader-1.0\"}", "{\"htype\": \"dimage-1.0\"}",
                           "{\"htype\": \"dseries_end-1.0\"}"};
    for (int k = 0; k < 3; k++) {
        qem_dectris_part p = {opens[k], strlen(opens[k])};
        CHECK_OK(qem_dectris_message_kind(&p, 3, &kind, &e), &e);
        CHECK_EQ_U64(kind, (uint64_t)(k + 1));
    }
    const char *unknown[] = {"{\"htype\": \"dimage-9.0\"}", "{\"frame\": 1}", "not json", "[]"};
    for (int k = 0; k < 4; k++) {
        qem_dectris_part p = {unknown[k], strlen(unknown[k])};
        qem_error ek = {0};
        CHECK_STATUS(qem_dectris_message_kind(&p, 3, &kind, &ek), QEM_E_STREAM, &ek);
        CHECK(live_test_names(&ek, "frame 3"));
    }
    qem_dectris_series_free(&s);

    /* An image before any header. */
    qem_dectris_series none;
    memset(&none, 0, sizeof none);
    message early = {0};
    image_spec spec = {0};
    image_message(&early, 0, &spec);
    qem_dectris_image im;
    qem_error ek = {0};
    CHECK_STATUS(qem_dectris_parse_image(early.parts, early.count, &none, &im, &ek),
                 QEM_E_STREAM, &ek);
    CHECK(live_test_names(&ek, "before the series header"));
    CHECK(live_test_names(&ek, "frame 0"));
    message_free(&early);
}

static void test_header_rules(void)
{
    qem_error e = {0};
    qem_dectris_series s;
    /* "none": the first image states the shape and type. */
    CHECK_OK(header_of("{\"htype\": \"dheader-1.0\", \"series\": 7, \"header_detail\": \"none\"}",
                       NULL, &s, &e), &e);
    CHECK(!qem_dectris_series_known(&s));
    message m = {0};
    image_spec spec = {0};
    image_message(&m, 0, &spec);
    qem_dectris_image im;
    CHECK_OK(qem_dectris_parse_image(m.parts, m.count, &s, &im, &e), &e);
    CHECK(qem_dectris_series_known(&s));
    CHECK_EQ_U64(s.rows, 3);
    CHECK_EQ_U64(s.columns, 4);
    CHECK_EQ_U64(s.sample_type, QEM_DTYPE_UINT16);
    message_free(&m);
    qem_dectris_series_free(&s);

    /* "all": appendices in any order, the mask's flagged pixels, unknown
     * appendices recorded. */
    uint32_t mask[12] = {0};
    mask[0] = 1;
    mask[5] = 0x10;
    mask[11] = 2;
    float flat[12] = {0};
    add_text(&m, "{\"htype\": \"dheader-1.0\", \"series\": 7, \"header_detail\": \"all\"}");
    add_text(&m, CONFIG_OK);
    add_text(&m, "{\"htype\": \"dfuture-1.0\", \"shape\": [1], \"type\": \"uint8\"}");
    add_part(&m, "x", 1);
    add_text(&m, "{\"htype\": \"dpixelmask-1.0\", \"shape\": [4, 3], \"type\": \"uint32\"}");
    add_part(&m, mask, sizeof mask);
    add_text(&m, "{\"htype\": \"dflatfield-1.0\", \"shape\": [4, 3], \"type\": \"float32\"}");
    add_part(&m, flat, sizeof flat);
    memset(&s, 0, sizeof s);
    CHECK_OK(qem_dectris_parse_header(m.parts, m.count, &s, &e), &e);
    CHECK_EQ_U64(s.flagged_count, 3);
    if (s.flagged_count == 3) {
        CHECK_EQ_U64(s.flagged[0], 0);
        CHECK_EQ_U64(s.flagged[1], 5);
        CHECK_EQ_U64(s.flagged[2], 11);
    }
    const json_t *seen = json_object_get(s.facts, "appendices");
    CHECK(json_array_size(seen) == 3 &&
          !strcmp(json_string_value(json_array_get(seen, 0)), "dfuture-1.0"));
    live_header h;
    qem_dectris_series_header(&s, &h);
    CHECK_EQ_U64(h.detector[0], 3);
    CHECK_EQ_U64(h.detector[1], 4);
    CHECK_EQ_U64(h.frames, 6);
    CHECK_EQ_U64(h.flagged_count, 3);
    json_decref(h.facts);
    qem_dectris_series_free(&s);
    message_free(&m);

    /* Every header rule. */
    const char *basic = HEAD_BASIC;
    const struct {
        const char *what, *head, *config;
    } bad[] = {
        {"not JSON", "{\"htype\": ", CONFIG_OK},
        {"wrong htype", "{\"htype\": \"dimage-1.0\", \"series\": 7, \"header_detail\": \"basic\"}",
         CONFIG_OK},
        {"no series", "{\"htype\": \"dheader-1.0\", \"header_detail\": \"basic\"}", CONFIG_OK},
        {"negative series",
         "{\"htype\": \"dheader-1.0\", \"series\": -1, \"header_detail\": \"basic\"}", CONFIG_OK},
        {"unknown detail",
         "{\"htype\": \"dheader-1.0\", \"series\": 7, \"header_detail\": \"full\"}", CONFIG_OK},
        {"basic without config", basic, NULL},
        {"none with config",
         "{\"htype\": \"dheader-1.0\", \"series\": 7, \"header_detail\": \"none\"}", CONFIG_OK},
        {"all without config",
         "{\"htype\": \"dheader-1.0\", \"series\": 7, \"header_detail\": \"all\"}", NULL},
        {"config not JSON", basic, "{\"x_pixels_in_detector\": "},
        {"only x", basic, "{\"x_pixels_in_detector\": 4}"},
        {"x zero", basic, "{\"x_pixels_in_detector\": 0, \"y_pixels_in_detector\": 3}"},
        {"x not an integer", basic, "{\"x_pixels_in_detector\": 4.5, \"y_pixels_in_detector\": 3}"},
        {"x too large", basic,
         "{\"x_pixels_in_detector\": 65537, \"y_pixels_in_detector\": 3}"},
        {"bit depth 12", basic, "{\"bit_depth_image\": 12}"},
        {"nimages 0", basic, "{\"nimages\": 0}"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        qem_error ek = {0};
        CHECK_STATUS(header_of(bad[k].head, bad[k].config, &s, &ek), QEM_E_STREAM, &ek);
        if (!live_test_names(&ek, "series header"))
            fprintf(stderr, "  (case: %s)\n", bad[k].what);
        qem_dectris_series_free(&s);
    }

    /* Appendix rules. */
    const struct {
        const char *what, *meta;
        const void *data;
        size_t size;
        int pair;
    } appendix[] = {
        {"no data part", "{\"htype\": \"dflatfield-1.0\","
                         " \"shape\": [4, 3], \"type\": \"float32\"}",
         flat, sizeof flat, 0},
        {"no htype", "{\"shape\": [4, 3], \"type\": \"float32\"}", flat, sizeof flat, 1},
        {"mask of 3 x 4", "{\"htype\": \"dpixelmask-1.0\","
                          " \"shape\": [3, 4], \"type\": \"uint32\"}",
         mask, sizeof mask, 1},
        {"mask short", "{\"htype\": \"dpixelmask-1.0\", \"shape\": [4, 3], \"type\": \"uint32\"}",
         mask, sizeof mask - 4, 1},
        {"mask float", "{\"htype\": \"dpixelmask-1.0\", \"shape\": [4, 3], \"type\": \"float32\"}",
         mask, sizeof mask, 1},
        {"flatfield long", "{\"htype\": \"dflatfield-1.0\","
                           " \"shape\": [2, 3], \"type\": \"float32\"}",
         flat, sizeof flat, 1},
        {"flatfield no shape", "{\"htype\": \"dflatfield-1.0\", \"type\": \"float32\"}", flat,
         sizeof flat, 1},
        {"flatfield type", "{\"htype\": \"dflatfield-1.0\","
                           " \"shape\": [4, 3], \"type\": \"int64\"}",
         flat, sizeof flat, 1},
        {"appendix not JSON", "{\"htype\"", flat, sizeof flat, 1},
    };
    for (size_t k = 0; k < sizeof appendix / sizeof appendix[0]; k++) {
        message a = {0};
        add_text(&a, "{\"htype\": \"dheader-1.0\", \"series\": 7, \"header_detail\": \"all\"}");
        add_text(&a, CONFIG_OK);
        add_text(&a, appendix[k].meta);
        if (appendix[k].pair)
            add_part(&a, appendix[k].data, appendix[k].size);
        qem_error ek = {0};
        memset(&s, 0, sizeof s);
        CHECK_STATUS(qem_dectris_parse_header(a.parts, a.count, &s, &ek), QEM_E_STREAM, &ek);
        if (!live_test_names(&ek, "series header"))
            fprintf(stderr, "  (case: %s)\n", appendix[k].what);
        qem_dectris_series_free(&s);
        message_free(&a);
    }
    /* A mask given twice. */
    message twice = {0};
    add_text(&twice, "{\"htype\": \"dheader-1.0\", \"series\": 7, \"header_detail\": \"all\"}");
    add_text(&twice, CONFIG_OK);
    for (int k = 0; k < 2; k++) {
        add_text(&twice, "{\"htype\": \"dpixelmask-1.0\","
                         " \"shape\": [4, 3], \"type\": \"uint32\"}");
        add_part(&twice, mask, sizeof mask);
    }
    memset(&s, 0, sizeof s);
    CHECK_STATUS(qem_dectris_parse_header(twice.parts, twice.count, &s, &e), QEM_E_STREAM, &e);
    qem_dectris_series_free(&s);
    message_free(&twice);
}

/* --- the receiver against the simulator ---------------------------------------- */

/* The receiver run against sim_dectris.py. */
static qem_status receive(const char *const *args, live_sink *sink, int idle_ms, qem_error *e)
{
    sink->protocol = "dectris-stream-v1";
    return live_test_receive(QEM_SIM_DECTRIS, LIVE_DECTRIS, qem_live_receive_dectris, args, sink,
                             idle_ms, e);
}

static void test_receiver(void)
{
    const char *arina_npy = fixture_path("detectors/arina/test_00_data_000001.npy");
    char arina[1024];
    snprintf(arina, sizeof arina, "%s", arina_npy);
    const char *details[] = {"all", "basic", "none"};
    const char *encodings[] = {"bs32-lz4", "lz4", "raw"};
    for (int k = 0; k < 3; k++) {
        const char *args[] = {"--detail", details[k], "--encoding", encodings[k], NULL};
        live_sink sink = {0};
        qem_error e = {0};
        CHECK_OK(receive(args, &sink, 0, &e), &e);
        CHECK_EQ_U64(sink.header_calls, 1);
        CHECK_EQ_U64(sink.rows, 192);
        CHECK_EQ_U64(sink.columns, 192);
        CHECK_EQ_U64(sink.type, QEM_DTYPE_UINT32);
        CHECK_EQ_U64(sink.frames_announced, k < 2 ? 16 : 0);
        CHECK_EQ_U64(sink.flagged_count, 0);
        live_test_frames_equal(&sink, arina, 16);
        live_test_sink_free(&sink);
    }

    /* Synthetic counts (the fixture's are all 0), bitshuffled by the module. */
    const char *synthetic_encodings[] = {"bs32-lz4", "lz4"};
    for (int k = 0; k < 2; k++) {
        const char *expect = test_path(k ? "synthetic_lz4.npy" : "synthetic_bs.npy");
        const char *args[] = {"--synthetic", "3,4,24,20", "--seed", "5", "--encoding",
                              synthetic_encodings[k], "--expect-npy", expect, NULL};
        live_sink sink = {0};
        qem_error e = {0};
        CHECK_OK(receive(args, &sink, 0, &e), &e);
        CHECK_EQ_U64(sink.rows, 24);
        CHECK_EQ_U64(sink.columns, 20);
        CHECK_EQ_U64(sink.frames_announced, 12);
        CHECK_EQ_U64(sink.flagged_count, 2);
        CHECK_EQ_U64(sink.flagged[0], 0);
        CHECK_EQ_U64(sink.flagged[1], 23 * 20 + 10);
        live_test_frames_equal(&sink, expect, 12);
        uint64_t nonzero = 0;
        for (size_t i = 0; i < sink.count * sink.frame_bytes; i++)
            nonzero += sink.data[i] != 0;
        CHECK(nonzero > 1000);
        live_test_sink_free(&sink);
    }

    /* A cut stream and a sink that stops the receiver. */
    live_test_cut_and_stop(receive);

    /* Corruptions at frame 3: refused, naming the frame, after 3 frames. */
    const struct {
        const char *kind, *encoding, *names;
        uint64_t received;
    } corrupt[] = {
        {"size@3", "raw", "frame 3", 3},
        {"json@3", "raw", "frame 3", 3},
        {"order@3", "raw", "frame 4 is out of order", 3},
        {"repeat@3", "raw", "frame 2 is repeated", 3},
        {"shape@3", "bs32-lz4", "frame 3", 3},
        {"lz4@3", "bs32-lz4", "frame 3", 3},
        {"lz4@3", "lz4", "frame 3", 3},
        {"nohead@0", "raw", "before the series header", 0},
    };
    for (size_t k = 0; k < sizeof corrupt / sizeof corrupt[0]; k++) {
        const char *args[] = {"--corrupt", corrupt[k].kind, "--encoding", corrupt[k].encoding,
                              NULL};
        live_sink sink = {0};
        qem_error e = {0};
        CHECK_STATUS(receive(args, &sink, 0, &e), QEM_E_STREAM, &e);
        if (!live_test_names(&e, corrupt[k].names))
            fprintf(stderr, "  (corruption %s)\n", corrupt[k].kind);
        CHECK_EQ_U64(sink.count, corrupt[k].received);
        live_test_sink_free(&sink);
    }

    /* Nothing listening: QEM_E_IO once the connect timeout passes. */
    {
        live_address address = {.protocol = LIVE_DECTRIS, .port = 9}; /* discard: closed */
        snprintf(address.host, sizeof address.host, "127.0.0.1");
        live_receive_options options = {.connect_timeout_ms = 400, .idle_ms = 0};
        live_sink sink = {0};
        qem_error e = {0};
        CHECK_STATUS(qem_live_receive_dectris(&address, &options, &sink, &e), QEM_E_IO, &e);
        CHECK(live_test_names(&e, "nothing arrived from tcp://127.0.0.1:9"));
        CHECK_EQ_U64(sink.header_calls, 0);
    }
}

int main(void)
{
    test_unshuffle_reference();
    test_against_bitshuffle_module();
    report_unshuffle_speed();
    test_header_and_images();
    test_header_rules();
    test_receiver();
    return test_finish("unit_live_dectris");
}
