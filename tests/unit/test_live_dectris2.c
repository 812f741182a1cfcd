/* The DECTRIS SIMPLON stream V2 receiver (lib/live/dectris_cbor.c, the V2
 * path of dectris_zmq.c): every refusal of the loader and of the start,
 * image and end parsers (QEM_E_STREAM naming the frame), the lz4 (HDF5
 * framing) and bslz4 decoders against data this test compresses itself,
 * and the receiver end to end over loopback against
 * tests/live/sim_dectris2.py serving the Arina fixture and synthetic
 * counts, into the tests' own sink
 * (tests/common/live_test.c). */
#include <jansson.h>
#include <unistd.h>

#include "cbor_build.h"
#include "common/error.h"
#include "common/json.h"
#include "live/dectris_cbor.h"
#include "live/live.h"
#include "live_test.h"
#include "test_util.h"

/* --- the loader ------------------------------------------------------------------ */

static qem_status load(const cbw *w, qem_dectris2_message *m, qem_error *e)
{
    return qem_dectris2_load(w->bytes, w->size, 3, m, e);
}

static void refused_load(const cbw *w, const char *want, const char *what)
{
    qem_dectris2_message m;
    qem_error e = {0};
    CHECK_STATUS(load(w, &m, &e), QEM_E_STREAM, &e);
    CHECK(m.root == NULL);
    if (!live_test_names(&e, want) || !live_test_names(&e, "frame 3 (expected next)"))
        fprintf(stderr, "  (case: %s)\n", what);
}

static void test_loader(void)
{
    qem_error e = {0};
    qem_dectris2_message m;
    cbw w = {0};
    cbw_end(&w, 7);
    CHECK_OK(load(&w, &m, &e), &e);
    CHECK_EQ_U64(m.kind, QEM_DECTRIS2_END);
    qem_dectris2_message_free(&m);

    cbw_free(&w); /* no tag 55799 */
    cbw_map(&w, 1);
    cbw_text(&w, "type");
    cbw_text(&w, "end");
    refused_load(&w, "not self-described CBOR", "no tag 55799");

    cbw_free(&w); /* cut short */
    cbw_end(&w, 7);
    w.size -= 2;
    refused_load(&w, "not well-formed CBOR", "cut");

    cbw_free(&w);
    cbw_end(&w, 7);
    cbw_uint(&w, 1);
    refused_load(&w, "bytes follow", "trailing bytes");

    cbw_free(&w); /* 40 nested arrays */
    cbw_self_described(&w);
    for (int k = 0; k < 40; k++)
        cbw_array(&w, 1);
    cbw_uint(&w, 0);
    refused_load(&w, "nests more than 32 deep", "deep");

    cbw_free(&w); /* 70000 items */
    cbw_self_described(&w);
    cbw_array(&w, 70000);
    for (int k = 0; k < 70000; k++)
        cbw_uint(&w, 0);
    refused_load(&w, "more than 65536 data items", "many items");

    cbw_free(&w); /* an array stating more items than bytes left */
    cbw_self_described(&w);
    cbw_array(&w, 1000000);
    cbw_uint(&w, 0);
    refused_load(&w, "longer than the message", "long array");

    cbw_free(&w); /* a reserved additional-information value */
    cbw_self_described(&w);
    cbw_raw(&w, "\x1c", 1);
    refused_load(&w, "reserved", "reserved");

    cbw_free(&w); /* an indefinite map breaking after a key */
    cbw_self_described(&w);
    cbw_raw(&w, "\xbf", 1);
    cbw_text(&w, "type");
    cbw_raw(&w, "\xff", 1);
    refused_load(&w, "breaks after a key", "odd indefinite map");

    cbw_free(&w); /* an indefinite-length map: accepted */
    cbw_self_described(&w);
    cbw_raw(&w, "\xbf", 1);
    cbw_text(&w, "type");
    cbw_text(&w, "end");
    cbw_raw(&w, "\xff", 1);
    CHECK_OK(load(&w, &m, &e), &e);
    CHECK_EQ_U64(m.kind, QEM_DECTRIS2_END);
    qem_dectris2_message_free(&m);

    cbw_free(&w); /* an indefinite-length string: refused (libcbor keeps its chunks) */
    cbw_self_described(&w);
    cbw_map(&w, 1);
    cbw_text(&w, "type");
    cbw_raw(&w, "\x7f\x63" "end" "\xff", 6);
    refused_load(&w, "an indefinite-length string", "indefinite string");

    cbw_free(&w);
    cbw_self_described(&w);
    cbw_array(&w, 0);
    refused_load(&w, "not a CBOR map", "array");

    cbw_free(&w);
    cbw_self_described(&w);
    cbw_map(&w, 1);
    cbw_text(&w, "series_id");
    cbw_uint(&w, 1);
    refused_load(&w, "no type text string", "no type");

    cbw_free(&w);
    cbw_self_described(&w);
    cbw_map(&w, 1);
    cbw_text(&w, "type");
    cbw_text(&w, "pause");
    refused_load(&w, "unknown message type 'pause'", "unknown type");

    cbw_free(&w);
    cbw_self_described(&w);
    cbw_map(&w, 2);
    cbw_text(&w, "type");
    cbw_text(&w, "end");
    cbw_text(&w, "type");
    cbw_text(&w, "end");
    refused_load(&w, "the key 'type' appears twice", "duplicate key");

    cbw_free(&w);
    cbw_self_described(&w);
    cbw_map(&w, 2);
    cbw_text(&w, "type");
    cbw_text(&w, "end");
    cbw_uint(&w, 5);
    cbw_uint(&w, 5);
    refused_load(&w, "not a text string", "integer key");
    cbw_free(&w);
}

/* --- start ------------------------------------------------------------------------ */

/* A 3 x 4 (rows x columns) uint16 detector, 6 images, three flagged pixels. */
static const uint32_t MASK[12] = {1, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 2};

static qem_status start_of(const cbw *w, qem_dectris2_series *x, qem_error *e)
{
    qem_dectris2_message m;
    memset(x, 0, sizeof *x);
    QEM_TRY(qem_dectris2_load(w->bytes, w->size, 0, &m, e));
    const qem_status st = qem_dectris2_parse_start(&m, x, e);
    qem_dectris2_message_free(&m);
    return st;
}

/* A start message of `pairs` extra pairs the caller writes after it. */
static void start_head(cbw *w, unsigned pairs)
{
    cbw_self_described(w);
    cbw_map(w, 2 + pairs);
    cbw_text(w, "type");
    cbw_text(w, "start");
    cbw_text(w, "series_id");
    cbw_uint(w, 7);
}

static void refused_start(const cbw *w, const char *want, const char *what)
{
    qem_dectris2_series x;
    qem_error e = {0};
    CHECK_STATUS(start_of(w, &x, &e), QEM_E_STREAM, &e);
    if (!live_test_names(&e, want) || !live_test_names(&e, "start message"))
        fprintf(stderr, "  (case: %s)\n", what);
    qem_dectris2_series_free(&x);
}

static void test_start(void)
{
    qem_error e = {0};
    qem_dectris2_series x;
    cbw w = {0};
    cbw_start(&w, 7, 3, 4, "uint16", 6, MASK);
    CHECK_OK(start_of(&w, &x, &e), &e);
    CHECK(qem_dectris_series_known(&x.s));
    CHECK_EQ_U64(x.s.rows, 3);
    CHECK_EQ_U64(x.s.columns, 4);
    CHECK_EQ_U64(x.s.sample_type, QEM_DTYPE_UINT16);
    CHECK_EQ_U64(x.s.frames, 6);
    CHECK_EQ_U64(x.s.series, 7);
    CHECK_EQ_U64(x.s.flagged_count, 3);
    if (x.s.flagged_count == 3) {
        CHECK_EQ_U64(x.s.flagged[0], 0);
        CHECK_EQ_U64(x.s.flagged[1], 5);
        CHECK_EQ_U64(x.s.flagged[2], 11);
    }
    CHECK(!strcmp(x.channel, "threshold_1"));
    CHECK(!strcmp(x.unique_id, "u-1"));
    live_header h;
    qem_dectris2_series_header(&x, &h);
    CHECK(!strcmp(h.protocol, "dectris-stream-v2"));
    CHECK_EQ_U64(h.flagged_count, 3);
    const json_t *start = json_object_get(h.facts, "start");
    CHECK(json_real_value(json_object_get(start, "count_time")) == 0.001);
    CHECK(qem_json_string_is(json_object_get(start, "arm_date"), "2026-01-01T00:00:00Z"));
    CHECK(json_array_size(json_object_get(h.facts, "not_kept")) == 1); /* the pixel mask */
    CHECK(qem_json_string_is(json_object_get(h.facts, "channel"), "threshold_1"));
    json_decref(h.facts);
    qem_dectris2_series_free(&x);

    /* A mask in bslz4 (two blocks of 8 elements... here one, 4 left) and
     * in lz4 decodes to the same flagged pixels. */
    for (int alg = 0; alg < 2; alg++) {
        size_t size = 0;
        uint8_t *z = alg ? cbw_lz4_hdf5(MASK, sizeof MASK, 16, &size)
                         : cbw_bslz4(MASK, 12, 4, 8, &size);
        cbw_free(&w);
        start_head(&w, 1);
        cbw_text(&w, "pixel_mask");
        cbw_map(&w, 1);
        cbw_text(&w, "threshold_1");
        cbw_multidim(&w, 3, 4, 70, alg ? "lz4" : "bslz4", alg ? 0 : 4, z, size);
        CHECK_OK(start_of(&w, &x, &e), &e);
        CHECK_EQ_U64(x.s.flagged_count, 3);
        CHECK_EQ_U64(x.s.rows, 3); /* the mask states the shape */
        CHECK(!strcmp(x.channel, "threshold_1")); /* the mask's first channel */
        qem_dectris2_series_free(&x);
        free(z);
    }

    /* Every start rule. */
    cbw_free(&w);
    cbw_self_described(&w);
    cbw_map(&w, 1);
    cbw_text(&w, "type");
    cbw_text(&w, "start");
    refused_start(&w, "no unsigned integer series_id", "no series_id");
    struct {
        const char *what, *key, *text, *want;
        int64_t value; /* < 0: none; the text instead */
    } bad[] = {
        {"only x", "image_size_x", NULL, "only one of", 4},
        {"long unique id", "series_unique_id",
         "0123456789012345678901234567890123456789012345678901234567890123456789", "at most",
         -1},
        {"float32", "image_dtype", "float32", "image_dtype", -1},
        {"no images", "number_of_images", NULL, "number_of_images", 0},
        {"channels not array", "channels", "threshold_1", "channels", -1},
        {"mask not map", "pixel_mask", "x", "pixel_mask", -1},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        cbw_free(&w);
        start_head(&w, 1);
        cbw_text(&w, bad[k].key);
        if (bad[k].value >= 0)
            cbw_uint(&w, (uint64_t)bad[k].value);
        else
            cbw_text(&w, bad[k].text);
        refused_start(&w, bad[k].want, bad[k].what);
    }
    /* Sides 0 and above 65536. */
    for (int k = 0; k < 2; k++) {
        cbw_free(&w);
        start_head(&w, 2);
        cbw_text(&w, "image_size_x");
        cbw_uint(&w, k ? 65537 : 0);
        cbw_text(&w, "image_size_y");
        cbw_uint(&w, 3);
        refused_start(&w, "from 1 to 65536", "side");
    }
    /* Empty channels; a channel that is not text. */
    for (int k = 0; k < 2; k++) {
        cbw_free(&w);
        start_head(&w, 1);
        cbw_text(&w, "channels");
        cbw_array(&w, k);
        if (k)
            cbw_uint(&w, 1);
        refused_start(&w, k ? "channel 0 is not a name" : "array of 1 to 16", "channels");
    }
    /* Masks: of another shape, uint16, of no channel named, raw too short,
     * compressed data too small to hold it, unknown compression. */
    const struct {
        const char *what, *want, *channel, *algorithm;
        uint64_t rows, typed;
        size_t size;
    } masks[] = {
        {"mask shape", "is 4 x 4 but the detector is 3 x 4", "threshold_1", NULL, 4, 70, 64},
        {"mask uint16", "is not uint32", "threshold_1", NULL, 3, 69, 24},
        {"mask channel", "has no channel 'threshold_1'", "threshold_2", NULL, 3, 70, 48},
        {"mask short", "the data has 44 bytes, not 3 x 4 x 4", "threshold_1", NULL, 3, 70, 44},
        {"mask zstd", "unknown compression 'zstd'", "threshold_1", "zstd", 3, 70, 48},
    };
    for (size_t k = 0; k < sizeof masks / sizeof masks[0]; k++) {
        uint32_t big[16] = {0};
        cbw_free(&w);
        start_head(&w, 4);
        cbw_text(&w, "image_size_x");
        cbw_uint(&w, 4);
        cbw_text(&w, "image_size_y");
        cbw_uint(&w, 3);
        cbw_text(&w, "channels");
        cbw_array(&w, 1);
        cbw_text(&w, "threshold_1");
        cbw_text(&w, "pixel_mask");
        cbw_map(&w, 1);
        cbw_text(&w, masks[k].channel);
        cbw_multidim(&w, masks[k].rows, 4, masks[k].typed, masks[k].algorithm, 4, big,
                     masks[k].size);
        refused_start(&w, masks[k].want, masks[k].what);
    }
    /* 1 GiB stated by 20 compressed bytes: refused before any allocation. */
    uint8_t tiny[20] = {0};
    cbw_free(&w);
    start_head(&w, 1);
    cbw_text(&w, "pixel_mask");
    cbw_map(&w, 1);
    cbw_text(&w, "threshold_1");
    cbw_multidim(&w, 16384, 16384, 70, "lz4", 0, tiny, sizeof tiny);
    refused_start(&w, "cannot decode to 1073741824 bytes", "expansion");
    cbw_free(&w);
}

/* --- images ------------------------------------------------------------------------ */

typedef struct image_over {
    int64_t image_id;      /* -1: none */
    uint64_t series;
    const char *unique;    /* NULL: "u-1" */
    const char *channel;   /* NULL: "threshold_1" */
    uint64_t rows, typed;  /* 0: 3, 69 */
    const char *algorithm; /* compression, with `element` */
    uint64_t element;
    const void *data;      /* NULL: 12 uint16 values i + image_id */
    size_t size;
    int data_kind;         /* 0: a map; 1: none; 2: an array instead; 3: not tag 40 */
} image_over;

static void image_msg(cbw *w, const image_over *o)
{
    uint16_t pixels[12];
    for (int i = 0; i < 12; i++)
        pixels[i] = (uint16_t)(i + o->image_id);
    cbw_self_described(w);
    cbw_map(w, (o->image_id >= 0 ? 4 : 3) + (o->data_kind != 1));
    cbw_text(w, "type");
    cbw_text(w, "image");
    cbw_text(w, "series_id");
    cbw_uint(w, o->series ? o->series : 7);
    cbw_text(w, "series_unique_id");
    cbw_text(w, o->unique ? o->unique : "u-1");
    if (o->image_id >= 0) {
        cbw_text(w, "image_id");
        cbw_uint(w, (uint64_t)o->image_id);
    }
    if (o->data_kind == 1)
        return;
    cbw_text(w, "data");
    if (o->data_kind == 2) {
        cbw_array(w, 0);
        return;
    }
    cbw_map(w, 1);
    cbw_text(w, o->channel ? o->channel : "threshold_1");
    if (o->data_kind == 3) {
        cbw_bytes(w, pixels, sizeof pixels);
        return;
    }
    cbw_multidim(w, o->rows ? o->rows : 3, 4, o->typed ? o->typed : 69, o->algorithm, o->element,
                 o->data ? o->data : pixels, o->data ? o->size : sizeof pixels);
}

static qem_status image_of(const image_over *o, qem_dectris2_series *x, uint16_t out[12],
                           qem_error *e)
{
    cbw w = {0};
    image_msg(&w, o);
    qem_dectris2_message m;
    qem_status st = qem_dectris2_load(w.bytes, w.size, x->s.next_frame, &m, e);
    qem_dectris_image im;
    if (st == QEM_OK)
        st = qem_dectris2_parse_image(&m, x, &im, e);
    uint8_t scratch[64];
    if (st == QEM_OK)
        st = qem_dectris2_decode_image(&im, out, 24, scratch, sizeof scratch, e);
    qem_dectris2_message_free(&m);
    cbw_free(&w);
    return st;
}

static void test_images(void)
{
    qem_error e = {0};
    qem_dectris2_series x;
    cbw w = {0};
    cbw_start(&w, 7, 3, 4, "uint16", 6, NULL);
    CHECK_OK(start_of(&w, &x, &e), &e);
    cbw_free(&w);
    uint16_t want[12], out[12];
    for (int i = 0; i < 12; i++)
        want[i] = (uint16_t)(1000 + 37 * i);
    /* Frame 0 raw, 1 bslz4 (8 shuffled + 4 left), 2 lz4 in blocks of 16
     * bytes (the last stored as it is: 8 bytes LZ4 cannot shrink). */
    size_t bs_size = 0, lz_size = 0;
    uint8_t *bs = cbw_bslz4(want, 12, 2, 8, &bs_size);
    uint8_t *lz = cbw_lz4_hdf5(want, sizeof want, 16, &lz_size);
    const image_over good[3] = {
        {.image_id = 0},
        {.image_id = 1, .algorithm = "bslz4", .element = 2, .data = bs, .size = bs_size},
        {.image_id = 2, .algorithm = "lz4", .data = lz, .size = lz_size},
    };
    for (int f = 0; f < 3; f++) {
        memset(out, 0, sizeof out);
        CHECK_OK(image_of(&good[f], &x, out, &e), &e);
        if (f == 0)
            CHECK_EQ_U64(out[11], 11);
        else
            CHECK(!memcmp(out, want, sizeof want));
    }
    CHECK_EQ_U64(x.s.next_frame, 3);

    /* Every image rule, each at frame 3 after three good frames. */
    uint8_t garbage[64];
    memset(garbage, 0xFF, sizeof garbage);
    uint8_t header_only[12] = {0, 0, 0, 0, 0, 0, 0, 24, 0, 0, 0, 16};
    uint8_t other_total[12] = {0, 0, 0, 0, 0, 0, 0, 25, 0, 0, 0, 16};
    uint8_t zero_block[12] = {0, 0, 0, 0, 0, 0, 0, 24, 0, 0, 0, 0};
    uint8_t *trailing = malloc(lz_size + 1);
    memcpy(trailing, lz, lz_size);
    trailing[lz_size] = 0;
    /* Zeros compress: one real LZ4 block, its first byte (a token) broken. */
    const uint16_t zeros[12] = {0};
    size_t bad_size = 0;
    uint8_t *bad_block = cbw_lz4_hdf5(zeros, sizeof zeros, 24, &bad_size);
    CHECK(bad_size < 12 + 4 + 24);
    bad_block[16] = 0xFF;
    const struct {
        const char *what;
        image_over o;
        const char *want;
    } bad[] = {
        {"out of order", {.image_id = 4}, "frame 4 is out of order (expected frame 3)"},
        {"repeated", {.image_id = 2}, "frame 2 is repeated (expected frame 3)"},
        {"no image_id", {.image_id = -1}, "frame 3 (expected next): the image has no"},
        {"other series", {.image_id = 3, .series = 8}, "frame 3 belongs to series 8"},
        {"other unique id", {.image_id = 3, .unique = "u-2"}, "frame 3 belongs to another"},
        {"no data", {.image_id = 3, .data_kind = 1}, "frame 3: the image's data is not a map"},
        {"data an array", {.image_id = 3, .data_kind = 2}, "frame 3: the image's data"},
        {"other channel", {.image_id = 3, .channel = "t2"}, "frame 3: the image has no channel"},
        {"not tag 40", {.image_id = 3, .data_kind = 3}, "frame 3: channel 'threshold_1' is not"},
        {"wrong shape", {.image_id = 3, .rows = 4}, "is 4 x 4, not the detector's 3 x 4"},
        {"wrong type", {.image_id = 3, .typed = 70, .size = 48, .data = garbage},
         "holds uint32 samples, not the series' uint16"},
        {"uint64", {.image_id = 3, .typed = 71}, "typed array tag 71"},
        {"big-endian", {.image_id = 3, .typed = 65}, "typed array tag 65"},
        {"raw short", {.image_id = 3, .data = garbage, .size = 23}, "the data has 23 bytes"},
        {"zstd", {.image_id = 3, .algorithm = "zstd", .data = lz, .size = lz_size},
         "frame 3: channel 'threshold_1': unknown compression 'zstd'"},
        {"bslz4 of 4", {.image_id = 3, .algorithm = "bslz4", .element = 4, .data = bs,
                        .size = bs_size},
         "bslz4 of 4-byte elements"},
        {"lz4 short", {.image_id = 3, .algorithm = "lz4", .data = garbage, .size = 8},
         "frame 3: the LZ4 data is shorter than its 12-byte header"},
        {"lz4 other total", {.image_id = 3, .algorithm = "lz4", .data = other_total, .size = 12},
         "frame 3: the LZ4 header states 25 bytes"},
        {"lz4 block 0", {.image_id = 3, .algorithm = "lz4", .data = zero_block, .size = 12},
         "frame 3: the LZ4 block size 0"},
        {"lz4 no blocks", {.image_id = 3, .algorithm = "lz4", .data = header_only, .size = 12},
         "frame 3: the LZ4 data ends at byte 0 of 24"},
        {"lz4 trailing", {.image_id = 3, .algorithm = "lz4", .data = trailing,
                          .size = lz_size + 1},
         "frame 3: the LZ4 data has 1 bytes after its blocks"},
        {"lz4 bad block", {.image_id = 3, .algorithm = "lz4", .data = bad_block,
                           .size = bad_size},
         "frame 3: an LZ4 block"},
        {"bslz4 garbage", {.image_id = 3, .algorithm = "bslz4", .element = 2, .data = garbage,
                           .size = sizeof garbage},
         "frame 3: the bitshuffle header states"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        qem_dectris2_series copy = x; /* shallow: a parse changes only numbers */
        qem_error ek = {0};
        CHECK_STATUS(image_of(&bad[k].o, &copy, out, &ek), QEM_E_STREAM, &ek);
        if (!live_test_names(&ek, bad[k].want))
            fprintf(stderr, "  (case: %s)\n", bad[k].what);
        if (strcmp(bad[k].what, "lz4 short") && strncmp(bad[k].what, "lz4 ", 4) &&
            strcmp(bad[k].what, "bslz4 garbage"))
            CHECK_EQ_U64(copy.s.next_frame, 3); /* refused in the parse: not counted */
    }
    free(trailing);
    free(bad_block);
    free(bs);
    free(lz);

    /* End: right; of another series; another unique id. */
    qem_dectris2_message m;
    cbw_end(&w, 7);
    CHECK_OK(qem_dectris2_load(w.bytes, w.size, 3, &m, &e), &e);
    CHECK_OK(qem_dectris2_parse_end(&m, &x, &e), &e);
    qem_dectris2_message_free(&m);
    cbw_free(&w);
    cbw_end(&w, 8);
    CHECK_OK(qem_dectris2_load(w.bytes, w.size, 3, &m, &e), &e);
    qem_error ek = {0};
    CHECK_STATUS(qem_dectris2_parse_end(&m, &x, &ek), QEM_E_STREAM, &ek);
    CHECK(live_test_names(&ek, "the series end after frame 3 belongs to series 8"));
    qem_dectris2_message_free(&m);
    cbw_free(&w);
    qem_dectris2_series_free(&x);

    /* An image before any start; an image naming the shape itself (a
     * start without shape, type or channels). */
    qem_dectris2_series none;
    memset(&none, 0, sizeof none);
    image_over first = {.image_id = 0};
    memset(&ek, 0, sizeof ek);
    CHECK_STATUS(image_of(&first, &none, out, &ek), QEM_E_STREAM, &ek);
    CHECK(live_test_names(&ek, "frame 0 (expected next): an image arrived before the start "
                               "message"));
    start_head(&w, 0);
    CHECK_OK(start_of(&w, &none, &e), &e);
    CHECK(!qem_dectris_series_known(&none.s));
    CHECK_OK(image_of(&first, &none, out, &e), &e);
    CHECK(qem_dectris_series_known(&none.s));
    CHECK_EQ_U64(none.s.rows, 3);
    CHECK_EQ_U64(none.s.columns, 4);
    CHECK_EQ_U64(none.s.sample_type, QEM_DTYPE_UINT16);
    CHECK(!strcmp(none.channel, "threshold_1"));
    qem_dectris2_series_free(&none);
    cbw_free(&w);
}

/* --- the receiver against the simulator ---------------------------------------- */

/* The receiver run against sim_dectris2.py. */
static qem_status receive(const char *const *args, live_sink *sink, int idle_ms, qem_error *e)
{
    sink->protocol = "dectris-stream-v2";
    return live_test_receive(QEM_SIM_DECTRIS2, LIVE_DECTRIS2, qem_live_receive_dectris2, args,
                             sink, idle_ms, e);
}

static void test_receiver(void)
{
    char arina[1024];
    snprintf(arina, sizeof arina, "%s",
             fixture_path("detectors/arina/test_00_data_000001.npy"));
    const char *details[] = {"all", "basic", "minimal"};
    const char *compressions[] = {"bslz4", "lz4", "none"};
    for (int k = 0; k < 3; k++) {
        const char *args[] = {"--detail", details[k], "--compression", compressions[k], NULL};
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

    /* Synthetic counts, two channels (the second differs): the first's
     * frames and pixel mask, each compression. */
    for (int k = 0; k < 3; k++) {
        const char *expect = test_path(k == 0 ? "syn_bs.npy" : k == 1 ? "syn_lz.npy"
                                                                      : "syn_raw.npy");
        const char *args[] = {"--synthetic", "3,4,24,20", "--seed", "5", "--compression",
                              compressions[k], "--lz4-block", "1000", "--channels", "2",
                              "--expect-npy", expect, NULL};
        live_sink sink = {0};
        qem_error e = {0};
        CHECK_OK(receive(args, &sink, 0, &e), &e);
        CHECK_EQ_U64(sink.rows, 24);
        CHECK_EQ_U64(sink.columns, 20);
        CHECK_EQ_U64(sink.frames_announced, 12);
        CHECK_EQ_U64(sink.flagged_count, 2);
        CHECK_EQ_U64(sink.flagged[0], 0);
        CHECK_EQ_U64(sink.flagged[1], 23 * 20 + 10);
        CHECK(qem_json_string_is(json_object_get(sink.facts, "channel"), "threshold_1"));
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
        const char *kind, *compression, *want;
        uint64_t received;
    } corrupt[] = {
        {"cbor@3", "none", "frame 3 (expected next): the message is not well-formed CBOR", 3},
        {"order@3", "none", "frame 4 is out of order (expected frame 3)", 3},
        {"repeat@3", "none", "frame 2 is repeated (expected frame 3)", 3},
        {"shape@3", "bslz4", "frame 3: channel 'threshold_1' is 192 x 193", 3},
        {"size@3", "none", "frame 3: channel 'threshold_1': the data has 147455 bytes", 3},
        {"lz4@3", "lz4", "frame 3: an LZ4 block does not decode", 3},
        {"lz4@3", "bslz4", "frame 3: a bitshuffle LZ4 block does not decode", 3},
        {"compression@3", "lz4", "unknown compression 'zstd'", 3},
        {"dtype@3", "none", "frame 3: channel 'threshold_1': typed array tag 71", 3},
        {"series@3", "none", "frame 3 belongs to series 2", 3},
        {"channel@3", "none", "frame 3: the image has no channel 'threshold_1'", 3},
        {"multipart@3", "none", "frame 3 (expected next): a message of 2 parts", 3},
        {"nostart@0", "none", "frame 0 (expected next): an image arrived before the start", 0},
    };
    for (size_t k = 0; k < sizeof corrupt / sizeof corrupt[0]; k++) {
        const char *args[] = {"--corrupt", corrupt[k].kind, "--compression",
                              corrupt[k].compression, NULL};
        live_sink sink = {0};
        qem_error e = {0};
        CHECK_STATUS(receive(args, &sink, 0, &e), QEM_E_STREAM, &e);
        if (!live_test_names(&e, corrupt[k].want))
            fprintf(stderr, "  (corruption %s)\n", corrupt[k].kind);
        CHECK_EQ_U64(sink.count, corrupt[k].received);
        live_test_sink_free(&sink);
    }

    /* Nothing listening: QEM_E_IO once the connect timeout passes. */
    {
        live_address address = {.protocol = LIVE_DECTRIS2, .port = 9}; /* discard: closed */
        snprintf(address.host, sizeof address.host, "127.0.0.1");
        live_receive_options options = {.connect_timeout_ms = 400, .idle_ms = 0};
        live_sink sink = {0};
        qem_error e = {0};
        CHECK_STATUS(qem_live_receive_dectris2(&address, &options, &sink, &e), QEM_E_IO, &e);
        CHECK(live_test_names(&e, "nothing arrived from tcp://127.0.0.1:9"));
        CHECK_EQ_U64(sink.header_calls, 0);
    }

    /* The scheme and its default port. */
    live_address a;
    qem_error e = {0};
    CHECK_OK(qem_live_parse_url("dectris2://det.example", &a, &e), &e);
    CHECK_EQ_U64(a.protocol, LIVE_DECTRIS2);
    CHECK_EQ_U64(a.port, 31001);
    CHECK_OK(qem_live_parse_url("dectris2://[::1]:4000", &a, &e), &e);
    CHECK_EQ_U64(a.port, 4000);
    CHECK(!strcmp(a.host, "::1"));
    CHECK_STATUS(qem_live_parse_url("dectris2://host:0", &a, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(live_test_names(&e, "dectris2://HOST"));
}

int main(void)
{
    test_loader();
    test_start();
    test_images();
    test_receiver();
    return test_finish("unit_live_dectris2");
}
