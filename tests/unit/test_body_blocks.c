/* The body checksum table has one SHA-256 per 64 MiB block: a body larger
 * than one block gets several digests, each block is checked, and damage
 * in a later block is reported as that block; with several damaged
 * blocks, the first, on any number of threads. */
#include <sys/stat.h>
#include <unistd.h>

#include "common/sha256.h"
#include "qem_build.h"

static void test_block_hasher(void)
{
    uint8_t data[2500];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 7 + 3);
    qem_block_hasher h;
    CHECK_OK(qem_block_hasher_init(&h, 1000, NULL), NULL);
    /* Fed in uneven pieces that straddle block boundaries. */
    CHECK_OK(qem_block_hasher_update(&h, data, 999, NULL), NULL);
    CHECK_OK(qem_block_hasher_update(&h, data + 999, 1200, NULL), NULL);
    CHECK_OK(qem_block_hasher_update(&h, data + 2199, 301, NULL), NULL);
    CHECK_OK(qem_block_hasher_finish(&h, NULL), NULL);
    CHECK_EQ_U64(h.count, 3);
    for (size_t b = 0; b < 3 && b < h.count; b++) {
        uint8_t want[32];
        qem_sha256_oneshot(data + 1000 * b, b < 2 ? 1000 : 500, want);
        CHECK(memcmp(h.digests[b], want, 32) == 0);
    }
    qem_block_hasher_free(&h);
}

int main(void)
{
    test_block_hasher();

    /* Incompressible uint16 counts: the body exceeds one 64 MiB block. */
    const uint64_t shape[4] = {64, 64, 96, 96};
    const uint64_t P = shape[2] * shape[3], scans = shape[0] * shape[1];
    qem_error e = {0};
    const char *path = test_path("two_blocks.qem");
    qem_writer *w = NULL;
    CHECK_OK(qem_writer_create(path, QEM_DTYPE_UINT16, shape, NULL, &w, &e), &e);
    uint16_t *rows = malloc((size_t)(64 * P) * sizeof *rows);
    uint64_t seed = 17;
    for (uint64_t s = 0; w && s < scans; s += 64) {
        for (uint64_t i = 0; i < 64 * P; i++)
            rows[i] = (uint16_t)test_rand(&seed);
        CHECK_OK(qem_writer_append(w, rows, 64, &e), &e);
    }
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);

    qem_file *f = NULL;
    CHECK_OK(qem_open(path, NULL, &f, &e), &e);
    if (f) {
        qem_file_info info = {.struct_size = sizeof info};
        qem_get_info(f, &info, NULL);
        CHECK(info.body_bytes > (1ull << 26));
        qem_verify_report report = {.struct_size = sizeof report};
        CHECK_OK(qem_verify(f, NULL, &report, &e), &e);
        CHECK_EQ_U64(report.body_blocks_checked, (info.body_bytes + (1ull << 26) - 1) >> 26);
        /* The last scans decode to the last rows written. */
        uint16_t *back = malloc((size_t)(64 * P) * sizeof *back);
        CHECK_OK(qem_read_scans(f, scans - 64, 64, back, (size_t)(64 * P) * 2, &e), &e);
        CHECK(memcmp(back, rows, (size_t)(64 * P) * 2) == 0);
        free(back);
        qem_close(f);
    }

    /* A file cut short after it was opened: the last chunk, read in
     * pieces on the file's threads (or whole on one), is refused as too
     * short, whichever piece comes up short. */
    for (int threads = 1; threads <= 3; threads++) {
        const char *cut = test_path("cut_after_open.qem");
        qem_parts whole;
        CHECK(qem_parts_load(path, &whole));
        if (!whole.header)
            break;
        CHECK(qem_parts_write(cut, whole.header, whole.body, whole.body_size, 0));
        qem_parts_free(&whole);
        qem_open_options oo;
        qem_open_options_init(&oo);
        oo.threads = threads;
        f = NULL;
        CHECK_OK(qem_open(cut, &oo, &f, &e), &e);
        struct stat st;
        CHECK(stat(cut, &st) == 0);
        CHECK(truncate(cut, st.st_size - 300000) == 0);
        if (f) {
            uint16_t *last = malloc((size_t)P * 2);
            CHECK_STATUS(qem_read_scans(f, scans - 1, 1, last, (size_t)P * 2, &e),
                         QEM_E_FILE_LENGTH, &e);
            CHECK(e.message[0] != '\0');
            free(last);
            qem_close(f);
        }
    }

    /* One byte changed in the second block, checksum table left alone. */
    qem_parts parts;
    CHECK(qem_parts_load(path, &parts));
    if (parts.header) {
        parts.body[(1u << 26) + 12345] ^= 0x40;
        const char *bad = test_path("second_block.qem");
        CHECK(qem_parts_write(bad, parts.header, parts.body, parts.body_size, 0));
        CHECK_STATUS(open_status(bad, &e), QEM_E_BODY_CHECKSUM, &e);
        CHECK(strstr(e.message, "block 1") != NULL);
        /* Deferred checking: the first chunks still read, the damaged block
         * is refused when a read reaches it. */
        qem_open_options oo;
        qem_open_options_init(&oo);
        oo.body_check = QEM_BODY_CHECK_ON_READ;
        CHECK_OK(qem_open(bad, &oo, &f, &e), &e);
        if (f) {
            uint16_t *one = malloc((size_t)P * 2);
            CHECK_OK(qem_read_scans(f, 0, 1, one, (size_t)P * 2, &e), &e);
            CHECK_STATUS(qem_read_scans(f, scans - 1, 1, one, (size_t)P * 2, &e),
                         QEM_E_BODY_CHECKSUM, &e);
            free(one);
            qem_close(f);
        }
        /* Both blocks damaged: the blocks are hashed on the file's
         * threads, and every thread count names block 0. */
        parts.body[777] ^= 0x01;
        const char *both = test_path("both_blocks.qem");
        CHECK(qem_parts_write(both, parts.header, parts.body, parts.body_size, 0));
        for (int threads = 1; threads <= 3; threads++) {
            qem_open_options_init(&oo);
            oo.threads = threads;
            f = NULL;
            CHECK_STATUS(qem_open(both, &oo, &f, &e), QEM_E_BODY_CHECKSUM, &e);
            CHECK(strstr(e.message, "block 0;") != NULL);
            CHECK(f == NULL);
        }
        qem_parts_free(&parts);
    }
    free(rows);
    return test_finish("unit_body_blocks");
}
