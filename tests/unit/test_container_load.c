/* The container's load phase and verification, the calls every front-end
 * uses instead of a format's own: QEM_LOAD_LATER describes a pack without
 * decoding it, refuses reads until qem_container_load, and verifies by
 * loading; QEM_LOAD_AWAITED lets reads wait for a load another thread
 * runs, and answers prepared values before it; a .qem file has no load
 * phase. Each against the fixtures. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "test_util.h"

static qem_container *open_with(const char *path, qem_load load, const char *expect)
{
    qem_container_options o;
    qem_container_options_init(&o);
    o.load = load;
    o.expect_sha256 = expect;
    qem_container *s = NULL;
    qem_error e = {0};
    CHECK_OK(qem_container_open(path, &o, &s, &e), &e);
    return s;
}

static void info_of(const qem_container *s, qem_container_info *info)
{
    qem_error e = {0};
    memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
    CHECK_OK(qem_container_get_info(s, info, &e), &e);
}

static void pack_load_later(void)
{
    const char *path = fixture_path("pack/v1_u16_4x32_16x16.h5");
    qem_container *s = open_with(path, QEM_LOAD_LATER, NULL);
    qem_container_info info;
    info_of(s, &info);
    CHECK(info.kind == QEM_KIND_PACK && info.has_load_phase && !info.loaded);
    /* Described and summarised without loading; reads refused until loaded. */
    qem_error e = {0};
    char *summary = qem_container_summary_json(s, &e);
    CHECK(summary && strstr(summary, "\"profile\""));
    qem_free(summary);
    uint16_t frame[16 * 16];
    CHECK_STATUS(qem_container_read(s, 0, 1, QEM_VALUES_WORKING, frame, sizeof frame, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, "qem_container_load") != NULL);
    CHECK_STATUS(qem_container_time_first_access(s, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK_OK(qem_container_load(s, &e), &e);
    CHECK_OK(qem_container_load(s, &e), &e); /* loaded already: nothing to do */
    info_of(s, &info);
    CHECK(info.loaded);
    /* The same values as the fixture's array. */
    size_t size = 0;
    uint8_t *npy = read_file(fixture_path("pack/v1_u16_4x32_16x16.npy"), &size);
    CHECK(npy && size > sizeof frame);
    CHECK_OK(qem_container_read(s, 0, 1, QEM_VALUES_WORKING, frame, sizeof frame, &e), &e);
    const size_t header = size - (size_t)4 * 32 * 16 * 16 * 2;
    CHECK(memcmp(frame, npy + header, sizeof frame) == 0);
    free(npy);
    CHECK_OK(qem_container_time_first_access(s, &e), &e);
    /* A loaded pack was loaded without the stored digests: verify refuses. */
    CHECK_STATUS(qem_container_verify(s, NULL, NULL, &e), QEM_E_INVALID_ARGUMENT, &e);
    qem_container_close(s);
}

typedef struct waiting_read {
    qem_container *s;
    uint16_t frame[16 * 16];
    qem_status status;
    qem_error error;
    atomic_int done;
} waiting_read;

static void *read_main(void *arg)
{
    waiting_read *w = arg;
    w->status = qem_container_read(w->s, 3, 1, QEM_VALUES_WORKING, w->frame, sizeof w->frame,
                                   &w->error);
    atomic_store(&w->done, 1);
    return NULL;
}

/* Starts a read on another thread and checks it is still waiting 50 ms
 * later: nothing has loaded the pack, so a read that returned has refused
 * instead of waiting. */
static int start_waiting_read(waiting_read *w, pthread_t *t)
{
    atomic_store(&w->done, 0);
    if (pthread_create(t, NULL, read_main, w) != 0)
        return 0;
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    CHECK(!atomic_load(&w->done));
    return 1;
}

static void pack_load_awaited(void)
{
    /* A copy recording a calibration: qem writes its BF/ABF/ADF values. */
    const char *src = fixture_path("pack/v1_u16_4x32_16x16.h5");
    char copy[768];
    snprintf(copy, sizeof copy, "%s", test_path("awaited.h5"));
    qem_detector_calibration cal = {.struct_size = sizeof cal, .center_row = 7.3,
                                    .center_column = 8.6, .bright_field_radius = 4.4};
    snprintf(cal.method, sizeof cal.method, "manual");
    qem_error e = {0};
    CHECK_OK(qem_write_calibrated_copy(src, copy, &cal, &e), &e);
    qem_container *s = open_with(copy, QEM_LOAD_AWAITED, NULL);
    if (!s)
        return;
    qem_container_info info;
    info_of(s, &info);
    CHECK(info.kind == QEM_KIND_PACK && info.has_load_phase && !info.loaded);

    /* The default BF image comes from the prepared values before any load. */
    qem_products *pp = NULL;
    CHECK_OK(qem_products_open(s, NULL, &pp, &e), &e);
    uint8_t mask[16 * 16];
    qem_detector_request rq;
    qem_detector_request_init(&rq);
    rq.detector = QEM_DETECTOR_BF;
    CHECK_OK(qem_products_resolve_detector(pp, &rq, mask, sizeof mask, NULL, &e), &e);
    qem_image bf = {0};
    CHECK_OK(qem_products_virtual(pp, mask, &bf, &e), &e);
    CHECK(qem_products_last_origin(pp) == QEM_ORIGIN_RECORDED);
    info_of(s, &info);
    CHECK(!info.loaded);

    /* A read waits for the load run here, then equals the array. */
    waiting_read w = {.s = s};
    pthread_t t;
    const int started = start_waiting_read(&w, &t);
    CHECK(started);
    CHECK_OK(qem_container_load(s, &e), &e);
    if (started)
        pthread_join(t, NULL);
    CHECK_OK(w.status, &w.error);
    size_t size = 0;
    uint8_t *npy = read_file(fixture_path("pack/v1_u16_4x32_16x16.npy"), &size);
    const size_t frame_bytes = sizeof w.frame, header = npy ? size - 4 * 32 * frame_bytes : 0;
    CHECK(npy && memcmp(w.frame, npy + header + 3 * frame_bytes, frame_bytes) == 0);
    /* The recorded image equals the sum over the array. */
    for (uint64_t scan = 0; npy && bf.data && scan < 4 * 32; scan++) {
        const uint16_t *frame = (const uint16_t *)(void *)(npy + header + scan * frame_bytes);
        uint64_t sum = 0;
        for (size_t px = 0; px < 16 * 16; px++)
            sum += mask[px] ? frame[px] : 0;
        CHECK_EQ_U64(((const uint32_t *)bf.data)[scan], sum);
    }
    free(npy);
    qem_image_free(&bf);
    qem_products_close(pp);
    qem_container_close(s);

    /* A damaged payload: the load fails, and the waiting read with it. */
    s = open_with(fixture_path("pack/corrupt/v1_payload_byte_flipped_compressed_rehashed.h5"),
                  QEM_LOAD_AWAITED, NULL);
    if (!s)
        return;
    waiting_read bad = {.s = s};
    const int bad_started = start_waiting_read(&bad, &t);
    CHECK(bad_started);
    const qem_status load = qem_container_load(s, &e);
    CHECK(load != QEM_OK && e.message[0]);
    if (bad_started)
        pthread_join(t, NULL);
    CHECK(bad.status == load && !strcmp(bad.error.message, e.message));
    printf("  a read waiting on a damaged pack: %s\n", bad.error.message);
    /* Later reads give the same failure at once. */
    uint16_t frame[16 * 16];
    CHECK(qem_container_read(s, 0, 1, QEM_VALUES_WORKING, frame, sizeof frame, &e) == load);
    info_of(s, &info);
    CHECK(!info.loaded);
    qem_container_close(s);
}

static void pack_verify(void)
{
    const char *path = fixture_path("pack/v1_u16_4x32_16x16.h5");
    qem_container *s = open_with(path, QEM_LOAD_LATER, NULL);
    qem_verify_report r = {.struct_size = sizeof r};
    qem_error e = {0};
    CHECK_OK(qem_container_verify(s, NULL, &r, &e), &e);
    CHECK_EQ_U64(r.shards_loaded, 1);
    CHECK_EQ_U64(r.digests_checked, 1);
    CHECK(!r.identity_checked && !r.identity_needed && r.body_blocks_checked == 0);
    CHECK(!strcmp(r.summary, "1 shards loaded, 1 payload digests verified"));
    qem_container_info info;
    info_of(s, &info);
    CHECK(info.loaded);
    qem_container_close(s);

    /* A uint8 pack's index does not hash its compact headers. */
    s = open_with(fixture_path("pack/v3_upstream_test_writer_notes_v3.h5"), QEM_LOAD_LATER, NULL);
    CHECK_OK(qem_container_verify(s, NULL, &r, &e), &e);
    CHECK(r.identity_needed && !r.identity_checked);
    qem_container_close(s);

    /* A wrong identity is refused by the load verify runs. */
    s = open_with(path, QEM_LOAD_LATER,
                  "0000000000000000000000000000000000000000000000000000000000000000");
    CHECK_STATUS(qem_container_verify(s, NULL, &r, &e), QEM_E_FILE_DIGEST, &e);
    info_of(s, &info);
    CHECK(!info.loaded); /* nothing kept */
    qem_container_close(s);
}

static void qem_has_no_load_phase(void)
{
    const char *path = fixture_path("qem/u16_dense_highdose.qem");
    qem_container *s = open_with(path, QEM_LOAD_LATER, NULL);
    qem_container_info info;
    info_of(s, &info);
    CHECK(info.kind == QEM_KIND_QEM && !info.has_load_phase && info.loaded);
    qem_error e = {0};
    CHECK_OK(qem_container_load(s, &e), &e);
    CHECK_STATUS(qem_container_time_first_access(s, &e), QEM_E_WRONG_CODEC, &e);
    qem_verify_report r = {.struct_size = sizeof r};
    CHECK_OK(qem_container_verify(s, NULL, &r, &e), &e);
    CHECK(r.body_blocks_checked == 1 && r.streams_decoded > 0 && r.spatial_values_checked > 0);
    CHECK(r.shards_loaded == 0 && strstr(r.summary, "spatial sums verified"));
    qem_container_close(s);
}

static void kinds_and_options(void)
{
    CHECK(!strcmp(qem_file_kind_name(QEM_KIND_QEM), "qem"));
    CHECK(!strcmp(qem_file_kind_name(QEM_KIND_PACK), "pack"));
    CHECK(!strcmp(qem_file_kind_name(QEM_KIND_NPY), "npy"));
    CHECK(!strcmp(qem_file_kind_name((qem_file_kind)99), "unknown"));
    CHECK(qem_file_kind_is_container(QEM_KIND_QEM) && qem_file_kind_is_container(QEM_KIND_PACK));
    CHECK(!qem_file_kind_is_container(QEM_KIND_NPY) && !qem_file_kind_is_container(QEM_KIND_HDF5));
    CHECK(!strcmp(qem_file_kind_extensions(QEM_KIND_PACK), "h5|hdf5"));
    CHECK(!strcmp(qem_file_kind_extensions(QEM_KIND_QEM), "qem"));
    qem_container_options o;
    qem_container_options_init(&o);
    o.load = (qem_load)7;
    qem_container *s = NULL;
    qem_error e = {0};
    CHECK_STATUS(qem_container_open(fixture_path("qem/u16_dense_highdose.qem"), &o, &s, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    CHECK(s == NULL && strstr(e.message, "load"));
}

int main(void)
{
    pack_load_later();
    pack_load_awaited();
    pack_verify();
    qem_has_no_load_phase();
    kinds_and_options();
    return test_finish("unit_container_load");
}
