/* Atomic publication: a destination appears complete or not at all, an
 * existing file is never touched, and failures leave no temporary files. */
#include <sys/stat.h>

#include "test_util.h"

static const uint64_t shape[4] = {2, 2, 4, 4};
static uint16_t data[4 * 16];

static int cancel_after_first(void *user, uint64_t done, uint64_t total)
{
    (void)user;
    return done < total;
}

/* Lets every window through, then stops at the first word after the
 * last one: the copy of the body into the destination. */
static int cancel_when_copying(void *user, uint64_t done, uint64_t total)
{
    int *finished = user;
    if (done < total)
        return 0;
    return (*finished)++ > 0;
}

static int nothing_left(void)
{
    return count_entries(test_dir(), ".qem-") == 0;
}

int main(void)
{
    qem_error e = {0};
    for (int i = 0; i < 64; i++)
        data[i] = (uint16_t)(i % 5);
    qem_writer *w = NULL;

    /* An existing destination is refused up front and left as it was. */
    const char *existing = test_path("existing.qem");
    CHECK(write_file(existing, "keep me", 7));
    CHECK_STATUS(qem_writer_create(existing, QEM_DTYPE_UINT16, shape, NULL, &w, &e), QEM_E_EXISTS, &e);
    size_t n = 0;
    uint8_t *kept = read_file(existing, &n);
    CHECK(kept && n == 7 && memcmp(kept, "keep me", 7) == 0);
    free(kept);

    /* A destination that appears while writing is not replaced either. */
    const char *racing = test_path("racing.qem");
    CHECK_OK(qem_writer_create(racing, QEM_DTYPE_UINT16, shape, NULL, &w, &e), &e);
    CHECK_OK(qem_writer_append(w, data, 4, &e), &e);
    CHECK(write_file(racing, "someone else", 12));
    CHECK_STATUS(qem_writer_finish(w, &e), QEM_E_EXISTS, &e);
    qem_writer_free(w);
    kept = read_file(racing, &n);
    CHECK(kept && n == 12 && memcmp(kept, "someone else", 12) == 0);
    free(kept);
    CHECK(nothing_left());

    /* Too few scans: finishing fails and nothing is published. */
    const char *partial = test_path("partial.qem");
    CHECK_OK(qem_writer_create(partial, QEM_DTYPE_UINT16, shape, NULL, &w, &e), &e);
    CHECK_OK(qem_writer_append(w, data, 3, &e), &e);
    CHECK_STATUS(qem_writer_finish(w, &e), QEM_E_INVALID_ARGUMENT, &e);
    qem_writer_free(w);
    CHECK(!file_exists(partial));
    CHECK(nothing_left());

    /* Too many scans are refused without disturbing the writer. */
    CHECK_OK(qem_writer_create(partial, QEM_DTYPE_UINT16, shape, NULL, &w, &e), &e);
    CHECK_STATUS(qem_writer_append(w, data, 5, &e), QEM_E_INVALID_ARGUMENT, &e);
    /* Abandoning a writer leaves no trace. */
    qem_writer_free(w);
    CHECK(!file_exists(partial));
    CHECK(nothing_left());

    /* Cancelling through the progress callback. */
    qem_save_options so;
    qem_save_options_init(&so);
    so.chunk_scans = 2;
    so.progress = cancel_after_first;
    CHECK_OK(qem_writer_create(partial, QEM_DTYPE_UINT16, shape, &so, &w, &e), &e);
    CHECK_STATUS(qem_writer_append(w, data, 4, &e), QEM_E_CANCELLED, &e);
    CHECK_STATUS(qem_writer_finish(w, &e), QEM_E_INVALID_ARGUMENT, &e);
    qem_writer_free(w);
    CHECK(!file_exists(partial));
    CHECK(nothing_left());

    /* ... and while the finished body is copied into the destination. */
    int finished = 0;
    so.progress = cancel_when_copying;
    so.progress_user = &finished;
    CHECK_OK(qem_writer_create(partial, QEM_DTYPE_UINT16, shape, &so, &w, &e), &e);
    CHECK_OK(qem_writer_append(w, data, 4, &e), &e);
    CHECK_STATUS(qem_writer_finish(w, &e), QEM_E_CANCELLED, &e);
    CHECK_EQ_U64(finished, 2);
    qem_writer_free(w);
    CHECK(!file_exists(partial));
    CHECK(nothing_left());
    so.progress_user = NULL;

    /* Arguments refused before anything is created. */
    CHECK_STATUS(qem_writer_create(test_path("name.npy"), QEM_DTYPE_UINT16, shape, NULL, &w, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    CHECK_STATUS(qem_writer_create(test_path("no/such/dir/x.qem"), QEM_DTYPE_UINT16, shape, NULL,
                                   &w, &e),
                 QEM_E_IO, &e);
    CHECK_STATUS(qem_writer_create(test_path("f.qem"), QEM_DTYPE_NONE, shape, NULL, &w, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    const uint64_t zero_axis[4] = {2, 0, 4, 4};
    CHECK_STATUS(qem_writer_create(test_path("z.qem"), QEM_DTYPE_UINT16, zero_axis, NULL, &w, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    const uint64_t wide[4] = {1024, 1024, 256, 256};
    so.progress = NULL;
    so.chunk_scans = 1u << 20; /* 2048 blocks x 65536 pixels overflows u32 offsets */
    CHECK_STATUS(qem_writer_create(test_path("wide.qem"), QEM_DTYPE_UINT16, wide, &so, &w, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    CHECK(!file_exists(test_path("wide.qem")));

    /* A finished file has ordinary permissions and opens. */
    const char *good = test_path("good.QEM");
    CHECK_OK(qem_writer_create(good, QEM_DTYPE_UINT16, shape, NULL, &w, &e), &e);
    CHECK_OK(qem_writer_append(w, data, 4, &e), &e);
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);
    struct stat sb;
    mode_t mask = umask(0);
    umask(mask);
    CHECK(stat(good, &sb) == 0 && (sb.st_mode & 0777) == (0666 & ~mask));
    qem_file *f = NULL;
    CHECK_OK(qem_open(good, NULL, &f, &e), &e);
    qem_close(f);
    CHECK(nothing_left());
    return test_finish("unit_publish");
}
