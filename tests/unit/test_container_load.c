/* The container's load phase and verification, the calls every front-end
 * uses instead of a format's own: QEM_LOAD_LATER describes a pack without
 * decoding it, refuses reads until qem_container_load, and verifies by
 * loading; a .qem file has no load phase. Each against the fixtures. */
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
    pack_verify();
    qem_has_no_load_phase();
    kinds_and_options();
    return test_finish("unit_container_load");
}
