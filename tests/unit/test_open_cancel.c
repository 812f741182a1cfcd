/* Opening hashes whole files (expect_sha256, the body blocks of a .qem, a
 * pack's identity) and verify hashes the body again: each tells its
 * progress callback, on the calling thread only (where a binding checks
 * Ctrl-C), and stops with QEM_E_CANCELLED when it says so; before, these
 * hashes ran to the end whatever the caller wanted. */
#include <pthread.h>

#include "common/sha256.h"
#include "test_util.h"

typedef struct listener {
    int calls, stop_at; /* stop when calls reaches stop_at (0: never) */
    uint64_t first_done, first_total, last_done, last_total;
    pthread_t caller;
    int other_thread;
} listener;

static int listen_fn(void *user, uint64_t done, uint64_t total)
{
    listener *l = user;
    if (l->calls++ == 0) {
        l->first_done = done;
        l->first_total = total;
    }
    l->last_done = done;
    l->last_total = total;
    l->other_thread |= !pthread_equal(pthread_self(), l->caller);
    return l->stop_at && l->calls >= l->stop_at;
}

static listener fresh(int stop_at)
{
    listener l = {0};
    l.stop_at = stop_at;
    l.caller = pthread_self();
    return l;
}

static void file_sha(const char *path, char hex[65])
{
    size_t size = 0;
    uint8_t *bytes = read_file(path, &size), digest[32];
    qem_sha256_oneshot(bytes, size, digest);
    qem_sha256_hex(digest, hex);
    free(bytes);
}

static void qem_file_opening(const char *path)
{
    qem_error e = {0};
    qem_file *f = NULL;
    qem_open_options o;
    qem_open_options_init(&o);
    o.threads = 2;
    o.progress = listen_fn;

    /* The body blocks: progress to the end, then a cancel. */
    listener l = fresh(0);
    o.progress_user = &l;
    CHECK_OK(qem_open(path, &o, &f, &e), &e);
    qem_file_info info = {.struct_size = sizeof info};
    if (f)
        CHECK_OK(qem_get_info(f, &info, &e), &e);
    qem_close(f);
    f = NULL;
    CHECK(l.calls >= 1);
    CHECK_EQ_U64(l.last_done, info.body_bytes);
    CHECK_EQ_U64(l.last_total, info.body_bytes);
    CHECK(!l.other_thread);
    l = fresh(1);
    CHECK_STATUS(qem_open(path, &o, &f, &e), QEM_E_CANCELLED, &e);
    CHECK(f == NULL);

    /* The whole-file identity first: its total is the file's size. */
    char hex[65];
    file_sha(path, hex);
    o.expect_sha256 = hex;
    l = fresh(1);
    CHECK_STATUS(qem_open(path, &o, &f, &e), QEM_E_CANCELLED, &e);
    CHECK_EQ_U64(l.first_total, info.file_bytes);
    l = fresh(0);
    CHECK_OK(qem_open(path, &o, &f, &e), &e);
    CHECK_EQ_U64(l.first_total, info.file_bytes);
    CHECK_EQ_U64(l.last_total, info.body_bytes);

    /* verify: hashing the body says "0 scans verified" and can stop. */
    if (f) {
        qem_verify_options vo;
        qem_verify_options_init(&vo);
        vo.progress = listen_fn;
        l = fresh(1);
        vo.progress_user = &l;
        qem_verify_report report = {.struct_size = sizeof report};
        CHECK_STATUS(qem_verify(f, &vo, &report, &e), QEM_E_CANCELLED, &e);
        CHECK_EQ_U64(l.first_done, 0);
        CHECK_EQ_U64(l.first_total, info.scans);
        CHECK_EQ_U64(report.streams_decoded, 0);
        qem_close(f);
    }

    /* Through the container. */
    qem_container_options co;
    qem_container_options_init(&co);
    co.progress = listen_fn;
    l = fresh(1);
    co.progress_user = &l;
    qem_container *c = NULL;
    CHECK_STATUS(qem_container_open(path, &co, &c, &e), QEM_E_CANCELLED, &e);
    CHECK(c == NULL);
    CHECK_EQ_U64(l.calls, 1);
}

static void pack_opening(const char *path)
{
    qem_error e = {0};
    char hex[65];
    file_sha(path, hex);
    qem_container_options co;
    qem_container_options_init(&co);
    co.expect_sha256 = hex;
    co.progress = listen_fn;
    listener l = fresh(1);
    co.progress_user = &l;
    qem_container *c = NULL;
    CHECK_STATUS(qem_container_open(path, &co, &c, &e), QEM_E_CANCELLED, &e);
    CHECK(c == NULL);
    /* Stopped while hashing the file: no shard loaded yet. */
    CHECK_EQ_U64(l.calls, 1);
    CHECK_EQ_U64(l.first_done, 0);
    CHECK(l.first_total > 0);
    l = fresh(0);
    CHECK_OK(qem_container_open(path, &co, &c, &e), &e);
    CHECK(l.calls >= 2);
    CHECK_EQ_U64(l.last_done, l.last_total);
    qem_container_close(c);
}

int main(void)
{
    const uint64_t shape[4] = {6, 16, 20, 18};
    char *npy = strdup(test_path("src.npy")), *qem = strdup(test_path("src.qem")),
         *pack = strdup(test_path("src.h5"));
    CHECK(write_count_sources(shape, 11, 17, 32, npy, qem, pack));

    qem_file_opening(qem);
    pack_opening(pack);
    free(npy);
    free(qem);
    free(pack);
    return test_finish("unit_open_cancel");
}
