/* Whole-file pixel sums kept between opens (qem_products_options.cache_dir)
 * for files that do not record them: the first open computes and keeps
 * them, the second takes them (the mean equal to the dense reference bit
 * for bit each time); a changed file has another key; a damaged or forged
 * entry is ignored and replaced; a file that records its sums, a uint8
 * pack (no cheap content identity), the reference path and a folder that
 * cannot be written keep nothing and still give the right mean. The
 * default detector's image is kept the same way: the second open's first
 * image (a pack's before it loads) comes from it, equal to the reference;
 * other masks are not kept; a damaged, forged or out-of-bounds entry is
 * ignored. */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/byteorder.h"
#include "common/sha256.h"
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

/* The path of the one entry of `kind` ("pixel-sums-", "detector-image-")
 * in `dir`. */
static const char *the_entry(const char *dir, const char *kind)
{
    static char path[4096];
    DIR *d = opendir(dir);
    struct dirent *x;
    path[0] = 0;
    while (d && (x = readdir(d)))
        if (!strncmp(x->d_name, kind, strlen(kind)))
            snprintf(path, sizeof path, "%s/%s", dir, x->d_name);
    if (d)
        closedir(d);
    return path;
}

/* The image over `mask` (NULL: the default detector's, resolved) of
 * `path` opened with `load`, through the cache: its origin. Checked equal
 * to the reference path; `loaded` says whether the source had loaded. */
static qem_origin image_checked(const char *path, const char *cache, qem_load load,
                                const uint8_t *mask, int *loaded)
{
    qem_container_options co;
    qem_container_options_init(&co);
    co.load = load;
    qem_container *c = NULL, *rc = NULL;
    qem_error e = {0};
    CHECK_OK(qem_container_open(path, &co, &c, &e), &e);
    CHECK_OK(qem_container_open(path, NULL, &rc, &e), &e);
    qem_products_options o;
    qem_products_options_init(&o);
    o.cache_dir = cache;
    qem_products *p = NULL, *ref = NULL;
    if (c)
        CHECK_OK(qem_products_open(c, &o, &p, &e), &e);
    if (rc)
        CHECK_OK(qem_products_open_path(rc, NULL, QEM_PATH_REFERENCE, &ref, &e), &e);
    qem_origin origin = QEM_ORIGIN_NONE;
    qem_image got = {0}, want = {0};
    qem_container_info info = {.struct_size = sizeof info};
    if (p && ref) {
        const qem_container_info *i = &info;
        qem_container_get_info(c, &info, NULL);
        uint8_t *m = malloc((size_t)i->pixels);
        if (mask) {
            memcpy(m, mask, (size_t)i->pixels);
        } else {
            qem_detector_request rq;
            qem_detector_request_init(&rq);
            CHECK_OK(qem_products_resolve_detector(p, &rq, m, (size_t)i->pixels, NULL, &e), &e);
        }
        CHECK_OK(qem_products_virtual(p, m, &got, &e), &e);
        origin = qem_products_last_origin(p);
        qem_container_get_info(c, &info, NULL);
        *loaded = info.loaded;
        CHECK_OK(qem_products_virtual(ref, m, &want, &e), &e);
        CHECK(got.data && want.data && got.dtype == want.dtype &&
              memcmp(got.data, want.data, (size_t)(i->scans * qem_dtype_size(got.dtype))) == 0);
        free(m);
    }
    qem_image_free(&got);
    qem_image_free(&want);
    qem_products_close(p);
    qem_products_close(ref);
    qem_container_close(c);
    qem_container_close(rc);
    return origin;
}

static void default_image_kept(void)
{
    char *cache = strdup(test_path("image-cache"));
    char *copy = strdup(test_path("image-copy.qem"));
    size_t size = 0;
    uint8_t *bytes = read_file(fixture_path("qem/u16_nonsquare_masked.qem"), &size);
    CHECK(bytes && write_file(copy, bytes, size));
    int loaded = 0;
    CHECK(image_checked(copy, cache, QEM_LOAD_ON_OPEN, NULL, &loaded) == QEM_ORIGIN_COMPUTED);
    CHECK(count_entries(cache, "detector-image-") == 1);
    CHECK(image_checked(copy, cache, QEM_LOAD_ON_OPEN, NULL, &loaded) == QEM_ORIGIN_CACHED);

    /* Another mask (the default centre, another radius) is computed and
     * not kept. */
    qem_container *c = NULL;
    qem_products *p = NULL;
    qem_error e = {0};
    CHECK_OK(qem_container_open(copy, NULL, &c, &e), &e);
    if (c)
        CHECK_OK(qem_products_open(c, NULL, &p, &e), &e);
    qem_container_info info = {.struct_size = sizeof info};
    uint8_t *other = NULL;
    if (p) {
        qem_container_get_info(c, &info, NULL);
        other = malloc((size_t)info.pixels);
        qem_detector_request rq;
        qem_detector_request_init(&rq);
        rq.radius = 5.5;
        CHECK_OK(qem_products_resolve_detector(p, &rq, other, (size_t)info.pixels, NULL, &e), &e);
    }
    qem_products_close(p);
    qem_container_close(c);
    if (other) {
        CHECK(image_checked(copy, cache, QEM_LOAD_ON_OPEN, other, &loaded) == QEM_ORIGIN_COMPUTED);
        CHECK(image_checked(copy, cache, QEM_LOAD_ON_OPEN, other, &loaded) == QEM_ORIGIN_COMPUTED);
        CHECK(count_entries(cache, "detector-image-") == 1);
    }

    /* Damaged (a value byte flipped: the digest fails), then a value past
     * its bound with the digest made good: ignored, computed, replaced. */
    char entry[4096];
    snprintf(entry, sizeof entry, "%s", the_entry(cache, "detector-image-"));
    size_t n = 0;
    uint8_t *ent = read_file(entry, &n);
    CHECK(ent && n > 96 + 8);
    if (ent && n > 96 + 8) {
        ent[96] ^= 1;
        CHECK(write_file(entry, ent, n));
        CHECK(image_checked(copy, cache, QEM_LOAD_ON_OPEN, NULL, &loaded) == QEM_ORIGIN_COMPUTED);
        CHECK(image_checked(copy, cache, QEM_LOAD_ON_OPEN, NULL, &loaded) == QEM_ORIGIN_CACHED);
        free(ent);
        ent = read_file(entry, &n);
        const uint64_t selected = qem_get_le64(ent + 88);
        qem_put_le64(ent + 96, selected * 65535 + 1);
        CHECK(qem_sha256_oneshot(ent, n - 32, ent + n - 32) == 0);
        CHECK(write_file(entry, ent, n));
        CHECK(image_checked(copy, cache, QEM_LOAD_ON_OPEN, NULL, &loaded) == QEM_ORIGIN_COMPUTED);
        CHECK(image_checked(copy, cache, QEM_LOAD_ON_OPEN, NULL, &loaded) == QEM_ORIGIN_CACHED);
    }
    free(ent);

    /* A uint16 pack written elsewhere: the second open's first image comes
     * from the entry before the pack has loaded (QEM_LOAD_AWAITED). */
    const char *pack = fixture_path("pack/v1_u16_4x32_16x16.h5");
    CHECK(image_checked(pack, cache, QEM_LOAD_ON_OPEN, NULL, &loaded) == QEM_ORIGIN_COMPUTED);
    CHECK(count_entries(cache, "detector-image-") == 2);
    CHECK(image_checked(pack, cache, QEM_LOAD_AWAITED, NULL, &loaded) == QEM_ORIGIN_CACHED);
    CHECK(!loaded);

    /* The file changed: another key, computed. */
    uint8_t *changed = read_file(fixture_path("qem/u16_dense_highdose.qem"), &size);
    CHECK(changed && write_file(copy, changed, size));
    CHECK(image_checked(copy, cache, QEM_LOAD_ON_OPEN, NULL, &loaded) == QEM_ORIGIN_COMPUTED);
    CHECK(count_entries(cache, "detector-image-") == 3);
    free(changed);
    free(other);
    free(bytes);
    free(copy);
    free(cache);
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
        snprintf(entry, sizeof entry, "%s", the_entry(cache, "pixel-sums-"));
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
        snprintf(entry, sizeof entry, "%s", the_entry(cache, "pixel-sums-"));
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
    default_image_kept();
    return test_finish("unit_products_cache");
}
