/* The public header's contract with callers built against other versions:
 * every result struct is filled only up to the struct_size its caller
 * declares (an older, smaller struct is never overrun; a newer, larger one
 * learns how much was filled), struct_size 0 is refused, every handle's
 * close/free takes NULL, and every status belongs to a documented group. */
#include <jansson.h>
#include <stddef.h>

#include "pack_build.h"
#include "test_util.h"

/* --- status groups ------------------------------------------------------------ */

static void test_status_groups(void)
{
    int seen[8] = {0};
    for (int s = QEM_OK; s <= QEM_E_STREAM; s++) {
        const qem_status_group g = qem_status_group_of((qem_status)s);
        CHECK(g >= QEM_GROUP_OK && g <= QEM_GROUP_CANCELLED);
        seen[g]++;
        /* Usage errors: an invalid argument, a buffer too small; OK is the
         * only "ok". */
        CHECK((g == QEM_GROUP_USAGE) ==
              (s == QEM_E_INVALID_ARGUMENT || s == QEM_E_BUFFER_TOO_SMALL));
        CHECK((g == QEM_GROUP_OK) == (s == QEM_OK));
    }
    for (int g = 0; g < 8; g++) {
        CHECK(seen[g] > 0); /* every group is used */
        for (int h = 0; h < g; h++)
            CHECK(strcmp(qem_status_group_name((qem_status_group)g),
                         qem_status_group_name((qem_status_group)h)) != 0);
    }
    static const qem_status checksums[] = {QEM_E_HEADER_CHECKSUM, QEM_E_BODY_CHECKSUM,
                                           QEM_E_LOGICAL_CHECKSUM, QEM_E_PACK_CRC,
                                           QEM_E_PACK_DIGEST, QEM_E_FILE_DIGEST};
    for (size_t k = 0; k < sizeof checksums / sizeof checksums[0]; k++)
        CHECK_EQ_U64(qem_status_group_of(checksums[k]), QEM_GROUP_CHECKSUM);
    CHECK_EQ_U64(seen[QEM_GROUP_CHECKSUM], 6);
    CHECK_EQ_U64(qem_status_group_of(QEM_E_IO), QEM_GROUP_IO);
    CHECK_EQ_U64(qem_status_group_of(QEM_E_EXISTS), QEM_GROUP_IO);
    CHECK_EQ_U64(qem_status_group_of(QEM_E_CHANGED), QEM_GROUP_IO);
    CHECK_EQ_U64(qem_status_group_of(QEM_E_LAYOUT), QEM_GROUP_FORMAT);
    CHECK_EQ_U64(qem_status_group_of(QEM_E_PACK_LZ4), QEM_GROUP_FORMAT);
    CHECK_EQ_U64(qem_status_group_of(QEM_E_UNSUPPORTED), QEM_GROUP_UNSUPPORTED);
    CHECK_EQ_U64(qem_status_group_of(QEM_E_NOT_RECORDED), QEM_GROUP_UNSUPPORTED);
    CHECK_EQ_U64(qem_status_group_of(QEM_E_LIMIT), QEM_GROUP_LIMIT);
    CHECK_EQ_U64(qem_status_group_of(QEM_E_NO_MEMORY), QEM_GROUP_LIMIT);
    CHECK_EQ_U64(qem_status_group_of(QEM_E_INSUFFICIENT_DISK), QEM_GROUP_LIMIT);
    CHECK_EQ_U64(qem_status_group_of(QEM_E_CANCELLED), QEM_GROUP_CANCELLED);
    CHECK_EQ_U64(qem_status_group_of((qem_status)999), QEM_GROUP_USAGE);
    CHECK(!strcmp(qem_status_group_name(QEM_GROUP_CHECKSUM), "checksum"));
}

/* --- every handle's close/free takes NULL ----------------------------------- */

static void test_null_frees(void)
{
    qem_close(NULL);
    qem_writer_free(NULL);
    qem_pack_close(NULL);
    qem_pack_inspection_free(NULL);
    qem_container_close(NULL);
    qem_npy_close(NULL);
    qem_npy_writer_free(NULL);
    qem_products_close(NULL);
    qem_detector_session_free(NULL);
    qem_image_free(NULL);
    qem_dpc_result_free(NULL);
    qem_free(NULL);
    /* Zeroed value structs free cleanly too. */
    qem_image empty;
    memset(&empty, 0, sizeof empty);
    qem_image_free(&empty);
    qem_dpc_result none;
    memset(&none, 0, sizeof none);
    qem_dpc_result_free(&none);
    CHECK(1);
}

/* --- result structs of every size -------------------------------------------- */

#define CANARY 0xA5
#define ROOM 512 /* larger than any result struct */

/* A caller's struct of `declared` bytes in a buffer of canaries. */
typedef struct caller_struct {
    union {
        size_t struct_size;
        unsigned char bytes[ROOM];
        max_align_t align;
    } u;
} caller_struct;

static void caller_init(caller_struct *c, size_t declared)
{
    memset(c->u.bytes, CANARY, sizeof c->u.bytes);
    c->u.struct_size = declared;
}

/* Nothing written past `declared`; struct_size now says what was written. */
static void caller_check(const char *what, const caller_struct *c, size_t declared, size_t full)
{
    const size_t written = declared < full ? declared : full;
    size_t now;
    memcpy(&now, c->u.bytes, sizeof now);
    /* struct_size itself holds the caller's 0 when nothing may be written. */
    const size_t from = written > sizeof now ? written : sizeof now;
    test_checks++;
    if (now != written) {
        test_failures++;
        fprintf(stderr, "%s: struct_size %zu after the call, expected %zu\n", what, now, written);
    }
    for (size_t k = from; k < sizeof c->u.bytes; k++)
        if (c->u.bytes[k] != CANARY) {
            test_checks++;
            test_failures++;
            fprintf(stderr, "%s: byte %zu past the %zu declared was written\n", what, k, declared);
            return;
        }
}

/* Calls `fill` with an older struct (ending at `old_end`), the current one
 * and a newer, larger one; each is filled exactly to the smaller size. A
 * struct_size of 0 is refused and writes nothing. */
#define CHECK_GROWTH(type, old_end, call)                                                          \
    do {                                                                                           \
        qem_error e_ = {0};                                                                        \
        const size_t sizes_[3] = {(old_end), sizeof(type), sizeof(type) + 24};                     \
        for (int k_ = 0; k_ < 3; k_++) {                                                           \
            caller_struct c_;                                                                      \
            caller_init(&c_, sizes_[k_]);                                                          \
            type *out = (type *)(void *)c_.u.bytes;                                                \
            CHECK_OK(call, &e_);                                                                   \
            caller_check(#type, &c_, sizes_[k_], sizeof(type));                                    \
        }                                                                                          \
        caller_struct z_;                                                                          \
        caller_init(&z_, 0);                                                                       \
        type *out = (type *)(void *)z_.u.bytes;                                                    \
        CHECK_STATUS(call, QEM_E_INVALID_ARGUMENT, &e_);                                           \
        caller_check(#type " with struct_size 0", &z_, 0, sizeof(type));                           \
    } while (0)

static void test_result_structs(void)
{
    qem_error e = {0};
    /* A small .qem and a small pack of the same counts. */
    enum { SR = 2, SC = 4, DR = 8, DC = 8, SCANS = SR * SC, PIXELS = DR * DC };
    static uint16_t data[SCANS * PIXELS];
    for (int i = 0; i < SCANS * PIXELS; i++)
        data[i] = (uint16_t)((i * 7) % 23);
    const uint64_t shape[4] = {SR, SC, DR, DC};
    const char *npy = test_path("c.npy"), *qem = test_path("c.qem"), *pack = test_path("c.h5");
    CHECK(write_npy4(npy, QEM_DTYPE_UINT16, shape, data));
    CHECK_OK(qem_save_file(npy, qem, NULL, &e), &e);
    pack_spec spec = {.profile = QEM_PACK_UINT16_LZ4,
                      .shape = {SR, SC, DR, DC},
                      .sps = SCANS,
                      .data = data,
                      .working_dtype = QEM_DTYPE_UINT16,
                      .calibration = 1};
    CHECK(pack_build(pack, &spec, NULL));

    qem_file *f = NULL;
    CHECK_OK(qem_open(qem, NULL, &f, &e), &e);
    qem_pack *p = NULL;
    qem_pack_options lo;
    qem_pack_options_init(&lo);
    CHECK_OK(qem_pack_open(pack, NULL, &p, &e), &e);
    CHECK_OK(qem_pack_load(p, &lo, &e), &e);
    qem_container *src = NULL;
    CHECK_OK(qem_container_open(qem, NULL, &src, &e), &e);
    qem_products *pr = NULL;
    CHECK_OK(qem_products_open(src, NULL, &pr, &e), &e);
    qem_npy *n = NULL;
    CHECK_OK(qem_npy_open(npy, &n, &e), &e);
    qem_pack_inspection *in = NULL;
    CHECK_OK(qem_pack_inspect(npy, NULL, &in, &e), &e);
    qem_detector_session *session = NULL;
    CHECK_OK(qem_detector_session_create(&pr, 1, &session, &e), &e);
    if (!f || !p || !src || !pr || !n || !in || !session)
        return;

    /* What an older caller sees is the same as what a current one sees. */
    qem_file_info full = {.struct_size = sizeof full};
    CHECK_OK(qem_get_info(f, &full, &e), &e);
    struct file_info_v0 {
        size_t struct_size;
        qem_codec codec;
        qem_dtype dtype;
        uint64_t shape[4];
    } old = {.struct_size = sizeof old};
    CHECK_OK(qem_get_info(f, (qem_file_info *)(void *)&old, &e), &e);
    CHECK(old.codec == full.codec && old.dtype == full.dtype &&
          !memcmp(old.shape, full.shape, sizeof old.shape));
    CHECK_EQ_U64(old.shape[3], DC);

    CHECK_GROWTH(qem_file_info, offsetof(qem_file_info, scans), qem_get_info(f, out, &e_));
    CHECK_GROWTH(qem_calibration, offsetof(qem_calibration, voltage),
                 qem_get_calibration(f, out, &e_));
    qem_verify_options vo;
    qem_verify_options_init(&vo);
    CHECK_GROWTH(qem_verify_report, offsetof(qem_verify_report, streams_decoded),
                 qem_verify(f, &vo, out, &e_));
    CHECK_GROWTH(qem_pack_info, offsetof(qem_pack_info, scans), qem_pack_get_info(p, out, &e_));
    CHECK_GROWTH(qem_detector_calibration, offsetof(qem_detector_calibration, bright_field_radius),
                 qem_pack_get_detector_calibration(p, out, &e_));
    CHECK_GROWTH(qem_pack_timings, offsetof(qem_pack_timings, source_read),
                 qem_pack_get_timings(p, out, &e_));
    CHECK_GROWTH(qem_container_info, offsetof(qem_container_info, scans),
                 qem_container_get_info(src, out, &e_));
    CHECK_GROWTH(qem_npy_info, offsetof(qem_npy_info, ndim), qem_npy_get_info(n, out, &e_));
    CHECK_GROWTH(qem_detector_calibration, offsetof(qem_detector_calibration, center_column),
                 qem_products_estimate_calibration(pr, out, &e_));
    qem_pack_plan_options po;
    qem_pack_plan_options_init(&po);
    po.destination = test_path("planned.h5");
    CHECK_GROWTH(qem_pack_plan, offsetof(qem_pack_plan, shard_count),
                 qem_pack_plan_make(in, &po, out, &e_));
    uint8_t mask[PIXELS];
    memset(mask, 1, sizeof mask);
    CHECK_OK(qem_detector_session_set_mask(session, mask, &e), &e);
    CHECK_GROWTH(qem_session_stats, offsetof(qem_session_stats, pixels_changed),
                 qem_detector_session_stats(session, out, &e_));
    /* A DPC result holds images the caller frees: only whole versions. */
    {
        caller_struct c;
        caller_init(&c, sizeof(qem_dpc_result) + 24);
        qem_dpc_result *out = (qem_dpc_result *)(void *)c.u.bytes;
        CHECK_OK(qem_products_dpc(pr, NULL, 10.0, out, &e), &e);
        caller_check("qem_dpc_result", &c, sizeof(qem_dpc_result) + 24, sizeof(qem_dpc_result));
        CHECK(out->phase.data != NULL && out->rotation_degrees == 10.0);
        qem_dpc_result_free(out);
        qem_dpc_result zero;
        memset(&zero, 0, sizeof zero);
        CHECK_STATUS(qem_products_dpc(pr, NULL, 10.0, &zero, &e), QEM_E_INVALID_ARGUMENT, &e);
    }
    /* A calibration handed in by an older caller: missing fields read 0. */
    qem_detector_calibration cal = {.struct_size = sizeof cal};
    CHECK_OK(qem_pack_get_detector_calibration(p, &cal, &e), &e);
    cal.struct_size = offsetof(qem_detector_calibration, has_dpc);
    cal.has_dpc = 1; /* beyond what this caller declares: ignored */
    CHECK_OK(qem_write_calibrated_copy(pack, test_path("copy.h5"), &cal, &e), &e);
    qem_pack *copy = NULL;
    CHECK_OK(qem_pack_open(test_path("copy.h5"), NULL, &copy, &e), &e);
    qem_detector_calibration back = {.struct_size = sizeof back};
    CHECK_OK(qem_pack_get_detector_calibration(copy, &back, &e), &e);
    CHECK(back.has_dpc == 0 && back.bright_field_radius == cal.bright_field_radius);
    qem_pack_close(copy);

    /* Buffers too small are refused, named, and not written. */
    uint8_t small[PIXELS];
    memset(small, CANARY, sizeof small);
    CHECK_STATUS(qem_get_valid_mask(f, small, PIXELS - 1, &e), QEM_E_BUFFER_TOO_SMALL, &e);
    CHECK_STATUS(qem_products_valid(pr, small, PIXELS - 1, &e), QEM_E_BUFFER_TOO_SMALL, &e);
    qem_detector_request g;
    qem_detector_request_init(&g);
    g.radius = 2;
    CHECK_STATUS(qem_products_detector_mask(pr, &g, 2, small, PIXELS - 1, &e),
                 QEM_E_BUFFER_TOO_SMALL, &e);
    CHECK(strstr(e.message, "needs 64 bytes, 63 given") != NULL);
    uint64_t sums[PIXELS];
    CHECK_STATUS(qem_products_pixel_sums(pr, 0, SCANS, sums, sizeof sums - 8, &e),
                 QEM_E_BUFFER_TOO_SMALL, &e);
    /* Reads into a buffer one scan short: refused, nothing written. */
    const uint64_t one = qem_read_scans_bound(f, 1);
    uint8_t *two = malloc((size_t)(2 * one));
    memset(two, CANARY, (size_t)(2 * one));
    CHECK_STATUS(qem_read_scans(f, 0, 2, two, (size_t)(2 * one - 1), &e), QEM_E_BUFFER_TOO_SMALL,
                 &e);
    CHECK_STATUS(qem_container_read(src, 0, 2, QEM_VALUES_WORKING, two,
                                    (size_t)(qem_container_read_bound(src, QEM_VALUES_WORKING, 2) -
                                             1),
                                    &e),
                 QEM_E_BUFFER_TOO_SMALL, &e);
    for (uint64_t k = 0; k < 2 * one; k++)
        CHECK_EQ_U64(two[k], CANARY);
    free(two);
    /* The container tells what the format-specific calls tell: front-ends
     * need no downcast for a header or a summary. */
    {
        size_t n1 = 0, n2 = 0;
        const char *h1 = qem_container_header_json(src, &n1), *h2 = qem_header_json(f, &n2);
        CHECK(h1 && h2 && n1 == n2 && memcmp(h1, h2, n1) == 0);
        char *s1 = qem_container_summary_json(src, &e), *s2 = qem_summary_json(f, &e);
        CHECK(s1 && s2 && strcmp(s1, s2) == 0);
        qem_free(s1);
        qem_free(s2);
        qem_container *pc = NULL;
        CHECK_OK(qem_container_open(pack, NULL, &pc, &e), &e);
        h1 = qem_container_header_json(pc, &n1);
        h2 = qem_pack_manifest_json(p, &n2);
        CHECK(h1 && h2 && n1 == n2 && memcmp(h1, h2, n1) == 0);
        s1 = qem_container_summary_json(pc, &e);
        s2 = qem_pack_summary_json(p, &e);
        /* The same but for the two loads' timings. */
        json_t *j1 = s1 ? json_loads(s1, 0, NULL) : NULL, *j2 = s2 ? json_loads(s2, 0, NULL) : NULL;
        CHECK(j1 && j2 && json_object_get(j1, "timings_ms") && json_object_get(j2, "timings_ms"));
        json_object_del(j1, "timings_ms");
        json_object_del(j2, "timings_ms");
        CHECK(j1 && j2 && json_equal(j1, j2));
        json_decref(j1);
        json_decref(j2);
        qem_free(s1);
        qem_free(s2);
        /* Details: each format's own facts, agreeing with its info. */
        qem_pack_info pinfo = {.struct_size = sizeof pinfo};
        CHECK_OK(qem_pack_get_info(p, &pinfo, &e), &e);
        s1 = qem_container_details_json(pc, &e);
        j1 = s1 ? json_loads(s1, 0, NULL) : NULL;
        CHECK(j1 && !strcmp(json_string_value(json_object_get(j1, "profile")), "exact-uint16-lz4"));
        CHECK(j1 && (uint64_t)json_integer_value(json_object_get(j1, "shard_count")) ==
                        pinfo.shard_count);
        CHECK(j1 && json_array_size(json_object_get(j1, "chunks")) == pinfo.shard_count);
        json_decref(j1);
        qem_free(s1);
        qem_file_info finfo = {.struct_size = sizeof finfo};
        CHECK_OK(qem_get_info(f, &finfo, &e), &e);
        s1 = qem_container_details_json(src, &e);
        j1 = s1 ? json_loads(s1, 0, NULL) : NULL;
        CHECK(j1 && !strcmp(json_string_value(json_object_get(j1, "codec")),
                            qem_codec_name(finfo.codec)));
        CHECK(j1 && (uint64_t)json_integer_value(json_object_get(j1, "valid_pixels")) ==
                        finfo.valid_pixels);
        json_t *last = j1 ? json_array_get(json_object_get(j1, "chunks"), finfo.chunk_count - 1)
                          : NULL;
        CHECK(last && (uint64_t)json_integer_value(json_array_get(last, 1)) == finfo.scans);
        json_decref(j1);
        qem_free(s1);
        /* Calibration: a .qem file's own; a pack records none. */
        qem_container_info ci = {.struct_size = sizeof ci};
        CHECK_OK(qem_container_get_info(pc, &ci, &e), &e);
        CHECK(!ci.has_calibration && !strcmp(qem_file_kind_name(ci.kind), "pack"));
        qem_calibration cc = {.struct_size = sizeof cc};
        CHECK_STATUS(qem_container_get_calibration(pc, &cc, &e), QEM_E_NOT_RECORDED, &e);
        CHECK_OK(qem_container_get_info(src, &ci, &e), &e);
        CHECK(ci.has_calibration && !strcmp(qem_file_kind_name(ci.kind), "qem"));
        qem_calibration cf = {.struct_size = sizeof cf};
        cc.struct_size = sizeof cc;
        CHECK_OK(qem_container_get_calibration(src, &cc, &e), &e);
        CHECK_OK(qem_get_calibration(f, &cf, &e), &e);
        CHECK(memcmp(&cc, &cf, sizeof cc) == 0);
        qem_container_close(pc);
        CHECK(qem_container_header_json(NULL, &n1) == NULL && n1 == 0);
        CHECK_STATUS((s1 = qem_container_summary_json(NULL, &e)) ? QEM_OK : e.status,
                     QEM_E_INVALID_ARGUMENT, &e);
    }
    /* Bounds past 64 bits say so instead of wrapping. */
    CHECK_EQ_U64(qem_read_scans_bound(f, UINT64_MAX / 2), UINT64_MAX);
    CHECK_EQ_U64(qem_pack_read_bound(p, QEM_VALUES_WORKING, UINT64_MAX / 3), UINT64_MAX);
    CHECK_EQ_U64(qem_container_read_bound(src, QEM_VALUES_RAW, UINT64_MAX / 4 + 1), UINT64_MAX);
    CHECK_EQ_U64(qem_read_scans_bound(f, 3), 3 * one);
    for (size_t k = 0; k < sizeof small; k++)
        CHECK_EQ_U64(small[k], CANARY);
    CHECK_OK(qem_get_valid_mask(f, small, PIXELS, &e), &e);
    CHECK_OK(qem_products_valid(pr, small, PIXELS, &e), &e);

    qem_detector_session_free(session);
    qem_pack_inspection_free(in);
    qem_npy_close(n);
    qem_products_close(pr);
    qem_container_close(src);
    qem_pack_close(p);
    qem_close(f);
}

/* A caller built against a newer qem hands in a larger options struct:
 * accepted while the fields this library does not know are unset (zero),
 * refused once one is set, since it would be silently ignored. */
static void test_larger_caller_structs(void)
{
    struct {
        qem_open_options known;
        uint64_t newer_field;
    } big;
    memset(&big, 0, sizeof big);
    qem_open_options_init(&big.known);
    big.known.struct_size = sizeof big;
    qem_error e = {0};
    qem_file *f = NULL;
    const char *path = fixture_path("qem/u16_dense_highdose.qem");
    CHECK_OK(qem_open(path, &big.known, &f, &e), &e);
    qem_close(f);
    f = NULL;
    big.newer_field = 1;
    CHECK_STATUS(qem_open(path, &big.known, &f, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, "update qem") != NULL);
    CHECK(f == NULL);
}

/* The version as one comparable number, the header's and the library's. */
static void test_version_number(void)
{
    CHECK_EQ_U64(QEM_VERSION_NUMBER,
                 QEM_VERSION_MAJOR * 10000 + QEM_VERSION_MINOR * 100 + QEM_VERSION_PATCH);
    CHECK_EQ_U64(qem_version_number(), QEM_VERSION_NUMBER);
    char text[32];
    snprintf(text, sizeof text, "%u.%u.%u", qem_version_number() / 10000,
             qem_version_number() / 100 % 100, qem_version_number() % 100);
    CHECK(strcmp(text, qem_version()) == 0);
}

int main(void)
{
    test_status_groups();
    test_null_frees();
    test_result_structs();
    test_larger_caller_structs();
    test_version_number();
    return test_finish("unit_api_contract");
}
