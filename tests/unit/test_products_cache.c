/* Whole-file pixel sums kept between opens (qem_products_options.cache_dir)
 * for files that do not record them: the first open computes and keeps
 * them, the second takes them (the mean equal to the dense reference bit
 * for bit each time); a changed file has another key; a damaged or forged
 * entry is ignored and replaced; a file that records its sums, a uint8
 * pack (no cheap content identity), the reference path and a folder that
 * cannot be written keep nothing and still give the right mean. */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

static qem_origin mean_of(const char *path, const char *cache, qem_products_path route,
                          float **mean, uint64_t *pixels)
{
    qem_container *c = NULL;
    qem_error e = {0};
    CHECK_OK(qem_container_open(path, NULL, &c, &e), &e);
    if (!c)
        return QEM_ORIGIN_NONE;
    qem_products_options o;
    qem_products_options_init(&o);
    o.cache_dir = cache;
    qem_products *p = NULL;
    CHECK_OK(qem_products_open_path(c, &o, route, &p, &e), &e);
    qem_origin origin = QEM_ORIGIN_NONE;
    if (p) {
        CHECK(qem_products_sums_origin(p) == QEM_ORIGIN_NONE);
        qem_image im = {0};
        CHECK_OK(qem_products_mean(p, &im, &e), &e);
        origin = qem_products_sums_origin(p);
        *pixels = im.shape[0] * im.shape[1];
        *mean = im.data;
        qem_products_close(p);
    }
    qem_container_close(c);
    return origin;
}

/* The mean of `path` through the cache against the reference path. */
static qem_origin mean_checked(const char *path, const char *cache)
{
    float *got = NULL, *want = NULL;
    uint64_t n = 0, m = 0;
    const qem_origin origin = mean_of(path, cache, QEM_PATH_FAST, &got, &n);
    CHECK(mean_of(path, cache, QEM_PATH_REFERENCE, &want, &m) == QEM_ORIGIN_COMPUTED);
    CHECK(got && want && n == m && memcmp(got, want, (size_t)n * sizeof *got) == 0);
    free(got);
    free(want);
    return origin;
}

static int entries(const char *dir)
{
    return count_entries(dir, "pixel-sums-");
}

/* The one entry's path in `dir`. */
static const char *the_entry(const char *dir)
{
    static char path[4096];
    DIR *d = opendir(dir);
    struct dirent *x;
    path[0] = 0;
    while (d && (x = readdir(d)))
        if (!strncmp(x->d_name, "pixel-sums-", 11))
            snprintf(path, sizeof path, "%s/%s", dir, x->d_name);
    if (d)
        closedir(d);
    return path;
}

int main(void)
{
    char *cache = strdup(test_path("cache/qem")); /* parents made too */
    char *copy = strdup(test_path("copy.qem"));
    size_t size = 0;
    uint8_t *bytes = read_file(fixture_path("qem/u16_nonsquare_masked.qem"), &size);
    CHECK(bytes && write_file(copy, bytes, size));

    CHECK(mean_checked(copy, cache) == QEM_ORIGIN_COMPUTED);
    CHECK(entries(cache) == 1);
    struct stat sb;
    CHECK(stat(cache, &sb) == 0 && (sb.st_mode & 0777) == 0700);
    CHECK(mean_checked(copy, cache) == QEM_ORIGIN_CACHED);

    /* Damaged: one byte of a sum flipped (the entry's digest no longer
     * matches): ignored, recomputed, replaced. */
    {
        char entry[4096];
        snprintf(entry, sizeof entry, "%s", the_entry(cache));
        size_t n = 0;
        uint8_t *e = read_file(entry, &n);
        CHECK(e && n > 100);
        e[60] ^= 1;
        CHECK(write_file(entry, e, n));
        CHECK(mean_checked(copy, cache) == QEM_ORIGIN_COMPUTED);
        CHECK(mean_checked(copy, cache) == QEM_ORIGIN_CACHED);
        free(e);
    }
    /* Truncated: ignored too. */
    {
        char entry[4096];
        snprintf(entry, sizeof entry, "%s", the_entry(cache));
        CHECK(truncate(entry, 40) == 0);
        CHECK(mean_checked(copy, cache) == QEM_ORIGIN_COMPUTED);
    }

    /* The file changed (another fixture at the same path): another key. */
    uint8_t *other = read_file(fixture_path("qem/u16_dense_highdose.qem"), &size);
    CHECK(other && write_file(copy, other, size));
    CHECK(mean_checked(copy, cache) == QEM_ORIGIN_COMPUTED);
    CHECK(entries(cache) == 2);
    CHECK(mean_checked(copy, cache) == QEM_ORIGIN_CACHED);

    /* Packs: a uint16 pack is keyed by its manifest and shard digests; a
     * uint8 pack is not keyed at all. */
    CHECK(mean_checked(fixture_path("pack/v1_u16_excluded_retained.h5"), cache) ==
          QEM_ORIGIN_COMPUTED);
    CHECK(mean_checked(fixture_path("pack/v1_u16_excluded_retained.h5"), cache) ==
          QEM_ORIGIN_CACHED);
    CHECK(entries(cache) == 3);
    CHECK(mean_checked(fixture_path("pack/v3_upstream_test_writer_notes_v3.h5"), cache) ==
          QEM_ORIGIN_COMPUTED);
    CHECK(entries(cache) == 3);

    /* A file qem wrote records its sums: nothing kept. */
    const uint64_t shape[4] = {48, 48, 16, 16};
    char *recorded = strdup(test_path("recorded.qem"));
    CHECK(write_count_sources(shape, 9, 30, 0, test_path("recorded.npy"), recorded, NULL));
    CHECK(mean_checked(recorded, cache) == QEM_ORIGIN_RECORDED);
    CHECK(entries(cache) == 3);

    /* A folder that cannot be made (a file stands in the way): the mean is
     * still right; nothing is kept. */
    char *blocked = strdup(test_path("blocked"));
    CHECK(write_file(blocked, "x", 1));
    char *inside = strdup(test_path("blocked/qem"));
    CHECK(mean_checked(copy, inside) == QEM_ORIGIN_COMPUTED);
    CHECK(mean_checked(copy, inside) == QEM_ORIGIN_COMPUTED);

    /* No cache_dir: computed every time. */
    CHECK(mean_checked(copy, NULL) == QEM_ORIGIN_COMPUTED);
    CHECK(!strcmp(qem_origin_name(QEM_ORIGIN_CACHED), "cached"));
    CHECK(!strcmp(qem_origin_name((qem_origin)99), "none"));

    free(bytes);
    free(other);
    free(cache);
    free(copy);
    free(recorded);
    free(blocked);
    free(inside);
    return test_finish("unit_products_cache");
}
