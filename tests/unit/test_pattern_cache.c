/* Single-pattern reads of a .qem source decode the 512-scan block of the
 * chunk that holds the scan and keep the last two blocks: every pattern
 * read one at a time, in order and at random, equals the file's whole
 * read, blocks never cross a chunk, and the counts of decoded blocks show
 * the cache at work (the viewer's /api/stats reports them). A scaled file
 * read as values and as codes keeps the two apart; packs need no cache. */
#include "test_util.h"

static uint8_t *read_all(qem_container *c, qem_values values, uint64_t scans, size_t *bytes)
{
    qem_error e = {0};
    *bytes = (size_t)qem_container_read_bound(c, values, scans);
    uint8_t *all = malloc(*bytes);
    CHECK_OK(qem_container_read(c, 0, scans, values, all, *bytes, &e), &e);
    return all;
}

/* Reads scans one at a time in `order`; 1 when each equals `all`. */
static int singles_match(qem_container *c, qem_values values, const uint64_t *order, uint64_t n,
                         const uint8_t *all, size_t frame)
{
    qem_error e = {0};
    uint8_t *one = malloc(frame);
    int ok = 1;
    for (uint64_t k = 0; k < n && ok; k++) {
        memset(one, 0x5a, frame);
        ok = qem_container_read(c, order[k], 1, values, one, frame, &e) == QEM_OK &&
             memcmp(one, all + order[k] * frame, frame) == 0;
        if (!ok)
            fprintf(stderr, "pattern %llu differs or failed: %s\n", (unsigned long long)order[k],
                    e.message);
    }
    free(one);
    return ok;
}

int main(void)
{
    /* 1200 scans in chunks of 700: blocks [0,512), [512,700), [700,1200). */
    const uint64_t shape[4] = {30, 40, 8, 9};
    const uint64_t scans = 1200;
    char *npy = strdup(test_path("src.npy")), *qem = strdup(test_path("src.qem")),
         *pack = strdup(test_path("src.h5"));
    CHECK(write_count_sources(shape, 5, 11, 700, npy, qem, pack));
    qem_error e = {0};
    qem_container *c = NULL;
    CHECK_OK(qem_container_open(qem, NULL, &c, &e), &e);
    if (c) {
        size_t bytes = 0;
        uint8_t *all = read_all(c, QEM_VALUES_WORKING, scans, &bytes);
        const size_t frame = bytes / scans;
        uint64_t *order = malloc(scans * sizeof *order);
        for (uint64_t k = 0; k < scans; k++)
            order[k] = k;
        uint64_t hits = 0, misses = 0;
        CHECK(singles_match(c, QEM_VALUES_WORKING, order, scans, all, frame));
        qem_container_pattern_cache_stats(c, &hits, &misses);
        CHECK_EQ_U64(misses, 3); /* one decode per block, in order */
        CHECK_EQ_U64(hits, scans - 3);
        /* Back and forth across the chunk boundary: two blocks kept, the
         * least recently used replaced: 699-701 hit; 511 replaces
         * [512,700), 512 then [700,1200); 699 hits, 700 decodes again. */
        const uint64_t swing[] = {699, 700, 698, 701, 511, 512, 699, 700};
        CHECK(singles_match(c, QEM_VALUES_WORKING, swing, 8, all, frame));
        uint64_t h2, m2;
        qem_container_pattern_cache_stats(c, &h2, &m2);
        CHECK_EQ_U64(m2 - misses, 3);
        CHECK_EQ_U64(h2 - hits, 5);
        uint64_t seed = 9;
        for (uint64_t k = 0; k < scans; k++)
            order[k] = test_rand(&seed) % scans;
        CHECK(singles_match(c, QEM_VALUES_WORKING, order, scans, all, frame));
        free(order);
        free(all);
        qem_container_close(c);
    }
    /* A scaled file: values and codes of the same scan are kept apart. */
    c = NULL;
    CHECK_OK(qem_container_open(fixture_path("qem/scaled_u16_regions.qem"), NULL, &c, &e), &e);
    if (c) {
        qem_container_info info = {.struct_size = sizeof info};
        CHECK_OK(qem_container_get_info(c, &info, &e), &e);
        size_t vb = 0, cb = 0;
        uint8_t *values = read_all(c, QEM_VALUES_WORKING, info.scans, &vb);
        uint8_t *codes = read_all(c, QEM_VALUES_RAW, info.scans, &cb);
        for (uint64_t s = 0; s < info.scans; s++) {
            CHECK(singles_match(c, QEM_VALUES_WORKING, &s, 1, values, vb / info.scans));
            CHECK(singles_match(c, QEM_VALUES_RAW, &s, 1, codes, cb / info.scans));
        }
        free(values);
        free(codes);
        qem_container_close(c);
    }
    c = NULL;
    CHECK_OK(qem_container_open(pack, NULL, &c, &e), &e);
    if (c) {
        uint64_t hits = 1, misses = 1;
        uint8_t one[8 * 9 * 2];
        CHECK_OK(qem_container_read(c, 3, 1, QEM_VALUES_WORKING, one, sizeof one, &e), &e);
        qem_container_pattern_cache_stats(c, &hits, &misses);
        CHECK(hits == 0 && misses == 0);
        qem_container_close(c);
    }
    free(npy);
    free(qem);
    free(pack);
    return test_finish("unit_pattern_cache");
}
