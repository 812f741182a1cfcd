/* A .qem file opened resident (its encoded body held in memory, read and
 * authenticated once) gives every read and product the file-per-use path
 * gives, bit for bit, on every upstream fixture; the decoded-column cache
 * serves detector moves only columns of its own file as opened (two files
 * side by side, the file replaced or rewritten in place after opening),
 * is used only for reductions it can hold, and counts its hits; the
 * options that make no sense are refused; a damaged body is refused while
 * opening, as without resident. */
#include <sys/stat.h>

#include "test_util.h"

static qem_container *open_source(const char *path, int resident, uint64_t cache_bytes)
{
    qem_container_options o;
    qem_container_options_init(&o);
    o.resident = resident;
    o.column_cache_bytes = cache_bytes;
    qem_container *c = NULL;
    qem_error e = {0};
    CHECK_OK(qem_container_open(path, &o, &c, &e), &e);
    return c;
}

static qem_products *products_of(qem_container *c)
{
    qem_products *p = NULL;
    qem_error e = {0};
    CHECK_OK(qem_products_open(c, NULL, &p, &e), &e);
    return p;
}

static int same_image(const qem_image *a, const qem_image *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim ||
        memcmp(a->shape, b->shape, sizeof a->shape) != 0)
        return 0;
    uint64_t n = a->shape[0] * a->shape[1] * (a->ndim == 3 ? a->shape[2] : 1);
    return memcmp(a->data, b->data, (size_t)(n * qem_dtype_size(a->dtype))) == 0;
}

/* Every read and product of `path`, resident (with a cache) against
 * per-use reads. */
static void fixture_equal(const char *name)
{
    const char *path = fixture_path(name);
    qem_container *plain = open_source(path, 0, 0), *held = open_source(path, 1, 1 << 20);
    if (!plain || !held) {
        qem_container_close(plain);
        qem_container_close(held);
        return;
    }
    qem_container_info info = {.struct_size = sizeof info};
    qem_error e = {0};
    CHECK_OK(qem_container_get_info(plain, &info, &e), &e);
    const uint64_t scans = info.scans, pixels = info.pixels;
    for (int v = 0; v < 2; v++) {
        const qem_values values = v ? QEM_VALUES_RAW : QEM_VALUES_WORKING;
        const size_t bytes = (size_t)qem_container_read_bound(plain, values, scans);
        uint8_t *a = malloc(bytes), *b = malloc(bytes);
        memset(b, 0x5a, bytes);
        CHECK_OK(qem_container_read(plain, 0, scans, values, a, bytes, &e), &e);
        CHECK_OK(qem_container_read(held, 0, scans, values, b, bytes, &e), &e);
        CHECK(memcmp(a, b, bytes) == 0);
        /* Single patterns, which go through the kept blocks. */
        const size_t frame = bytes / scans;
        for (uint64_t s = 0; s < scans; s += scans / 7 + 1) {
            CHECK_OK(qem_container_read(held, s, 1, values, b, frame, &e), &e);
            CHECK(memcmp(b, a + s * frame, frame) == 0);
        }
        free(a);
        free(b);
    }
    qem_products *pp = products_of(plain), *hp = products_of(held);
    uint8_t *mask = calloc((size_t)pixels, 1);
    for (uint64_t p = 0; p < pixels; p++)
        mask[p] = (p * 7 + p / 5) % 3 == 0;
    qem_image x = {0}, y = {0};
    CHECK_OK(qem_products_virtual(pp, mask, &x, &e), &e);
    CHECK_OK(qem_products_virtual(hp, mask, &y, &e), &e);
    CHECK(same_image(&x, &y));
    qem_image_free(&x);
    qem_image_free(&y);
    CHECK_OK(qem_products_mean(pp, &x, &e), &e);
    CHECK_OK(qem_products_mean(hp, &y, &e), &e);
    CHECK(same_image(&x, &y));
    qem_image_free(&x);
    qem_image_free(&y);
    CHECK_OK(qem_products_frame(pp, scans - 1, &x, &e), &e);
    CHECK_OK(qem_products_frame(hp, scans - 1, &y, &e), &e);
    CHECK(same_image(&x, &y));
    qem_image_free(&x);
    qem_image_free(&y);
    if (info.working_dtype != QEM_DTYPE_FLOAT32 || info.raw_dtype != QEM_DTYPE_FLOAT32) {
        /* Exact sums (integer and scaled codecs) with signed weights. */
        int32_t *w = malloc((size_t)pixels * sizeof *w);
        for (uint64_t p = 0; p < pixels; p++)
            w[p] = (int32_t)((p * 2654435761u) % 9) - 4;
        const int32_t *planes[1] = {w};
        int64_t *s1 = malloc((size_t)scans * 8), *s2 = malloc((size_t)scans * 8);
        qem_status a = qem_products_weighted_sums(pp, 0, scans, planes, 1, s1, scans * 8, &e);
        qem_status b = qem_products_weighted_sums(hp, 0, scans, planes, 1, s2, scans * 8, &e);
        CHECK(a == b);
        CHECK(a != QEM_OK || memcmp(s1, s2, (size_t)scans * 8) == 0);
        free(w);
        free(s1);
        free(s2);
    }
    free(mask);
    qem_products_close(pp);
    qem_products_close(hp);
    qem_container_close(plain);
    qem_container_close(held);
}

/* The exact sums of `count` single pixels weighted +1/-1 (a move's changed
 * pixels), through products `p`. */
static void move_sums(qem_products *p, uint64_t pixels, uint64_t scans, const uint64_t *at,
                      unsigned count, int64_t *out)
{
    int32_t *w = calloc((size_t)pixels, sizeof *w);
    for (unsigned k = 0; k < count; k++)
        w[at[k] % pixels] = k % 2 ? -1 : 1;
    const int32_t *planes[1] = {w};
    qem_error e = {0};
    CHECK_OK(qem_products_weighted_sums(p, 0, scans, planes, 1, out, scans * 8, &e), &e);
    free(w);
}

static void column_cache(void)
{
    /* 1200 scans in chunks of 700: three blocks, one crossing no chunk. */
    const uint64_t shape[4] = {30, 40, 16, 16}, scans = 1200, pixels = 256;
    char *a = strdup(test_path("a.qem")), *b = strdup(test_path("b.qem")),
         *x = strdup(test_path("x.qem"));
    CHECK(write_count_sources(shape, 3, 40, 700, test_path("a.npy"), a, NULL));
    CHECK(write_count_sources(shape, 4, 40, 700, test_path("b.npy"), b, NULL));
    qem_container *pa = open_source(a, 0, 0), *pb = open_source(b, 0, 0);
    /* A cache of 1 MiB holds about 980 columns: moves of 4 pixels over
     * three blocks are kept, a whole image (256 x 3) is not. */
    qem_container *ca = open_source(a, 1, 1 << 20), *cb = open_source(b, 1, 1 << 20);
    if (!pa || !pb || !ca || !cb)
        goto out;
    qem_products *ppa = products_of(pa), *ppb = products_of(pb), *pca = products_of(ca),
                 *pcb = products_of(cb);
    int64_t *want = malloc((size_t)scans * 8), *got = malloc((size_t)scans * 8);
    uint64_t hits = 0, misses = 0;
    const uint64_t moves[4][4] = {{3, 4, 19, 20}, {5, 6, 21, 22}, {3, 4, 19, 20}, {100, 101, 7, 9}};
    for (int round = 0; round < 2; round++)
        for (int m = 0; m < 4; m++) {
            /* The same pixels of two files, interleaved: each its own. */
            move_sums(ppa, pixels, scans, moves[m], 4, want);
            move_sums(pca, pixels, scans, moves[m], 4, got);
            CHECK(memcmp(want, got, (size_t)scans * 8) == 0);
            move_sums(ppb, pixels, scans, moves[m], 4, want);
            move_sums(pcb, pixels, scans, moves[m], 4, got);
            CHECK(memcmp(want, got, (size_t)scans * 8) == 0);
        }
    /* 3 distinct moves' 12 pixels x 3 blocks decoded once (the repeated
     * move and the second round from the cache). */
    qem_container_column_cache_stats(ca, &hits, &misses);
    CHECK(misses == 3 * 4 * 3);
    CHECK(hits == (8 * 4 - 3 * 4) * 3);
    /* A whole image is more than the cache should take: no lookups. */
    uint8_t *mask = malloc(pixels);
    memset(mask, 1, pixels);
    qem_image want_image = {0}, got_image = {0};
    qem_error e = {0};
    CHECK_OK(qem_products_virtual(ppa, mask, &want_image, &e), &e);
    CHECK_OK(qem_products_virtual(pca, mask, &got_image, &e), &e);
    CHECK(same_image(&want_image, &got_image));
    uint64_t hits2 = 0, misses2 = 0;
    qem_container_column_cache_stats(ca, &hits2, &misses2);
    CHECK(hits2 == hits && misses2 == misses);
    qem_image_free(&want_image);
    qem_image_free(&got_image);
    free(mask);
    /* A file without a cache reports none. */
    qem_container_column_cache_stats(pa, &hits2, &misses2);
    CHECK(hits2 == 0 && misses2 == 0);

    /* The file changed after a resident open: the open keeps what it read
     * and authenticated (its cache included); a new open reads the new file. */
    int64_t *before = malloc((size_t)scans * 8);
    size_t size_a = 0, size_b = 0;
    uint8_t *bytes_a = read_file(a, &size_a), *bytes_b = read_file(b, &size_b);
    CHECK(bytes_a && bytes_b && write_file(x, bytes_a, size_a));
    qem_container *cx = open_source(x, 1, 1 << 20);
    if (cx) {
        qem_products *pcx = products_of(cx);
        move_sums(pcx, pixels, scans, moves[0], 4, before);
        move_sums(ppa, pixels, scans, moves[0], 4, want);
        CHECK(memcmp(before, want, (size_t)scans * 8) == 0);
        /* Rewritten in place (same inode), then replaced by another file. */
        FILE *fp = fopen(x, "r+b");
        CHECK(fp && fwrite(bytes_b, 1, size_b, fp) == size_b);
        if (fp)
            fclose(fp);
        move_sums(pcx, pixels, scans, moves[0], 4, got);
        CHECK(memcmp(before, got, (size_t)scans * 8) == 0);
        move_sums(pcx, pixels, scans, moves[1], 4, got);
        move_sums(ppa, pixels, scans, moves[1], 4, want);
        CHECK(memcmp(want, got, (size_t)scans * 8) == 0);
        qem_container *cy = open_source(x, 1, 1 << 20);
        if (cy) {
            qem_products *pcy = products_of(cy);
            move_sums(pcy, pixels, scans, moves[0], 4, got);
            move_sums(ppb, pixels, scans, moves[0], 4, want);
            CHECK(memcmp(want, got, (size_t)scans * 8) == 0);
            qem_products_close(pcy);
            qem_container_close(cy);
        }
        qem_products_close(pcx);
        qem_container_close(cx);
    }
    free(bytes_a);
    free(bytes_b);
    free(before);
    free(want);
    free(got);
    qem_products_close(ppa);
    qem_products_close(ppb);
    qem_products_close(pca);
    qem_products_close(pcb);
out:
    qem_container_close(pa);
    qem_container_close(pb);
    qem_container_close(ca);
    qem_container_close(cb);
    free(a);
    free(b);
    free(x);
}

static void refusals(void)
{
    qem_error e = {0};
    qem_container *c = NULL;
    qem_container_options o;
    qem_container_options_init(&o);
    o.column_cache_bytes = 1 << 20; /* without resident */
    CHECK_STATUS(qem_container_open(fixture_path("qem/u8_sparse_lowdose.qem"), &o, &c, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, "resident") != NULL && c == NULL);
    o.resident = 1;
    o.column_cache_bytes = 100; /* less than one column */
    CHECK_STATUS(qem_container_open(fixture_path("qem/u8_sparse_lowdose.qem"), &o, &c, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    CHECK(c == NULL);
    /* A damaged body is refused while opening resident, with the status a
     * default open gives. */
    o.column_cache_bytes = 0;
    CHECK_STATUS(qem_container_open(fixture_path("qem/corrupt/flipped_body_byte.qem"), &o, &c, &e),
                 QEM_E_BODY_CHECKSUM, &e);
    CHECK(c == NULL);
    /* A pack ignores both. */
    o.column_cache_bytes = 1 << 20;
    CHECK_OK(qem_container_open(fixture_path("pack/v1_u16_4x32_16x16.h5"), &o, &c, &e), &e);
    qem_container_close(c);
}

int main(void)
{
    fixture_equal("qem/u8_sparse_lowdose.qem");
    fixture_equal("qem/u16_dense_highdose.qem");
    fixture_equal("qem/u16_nonsquare_masked.qem");
    fixture_equal("qem/scaled_u16_regions.qem");
    fixture_equal("qem/f32_special_bits.qem");
    column_cache();
    refusals();
    return test_finish("unit_qem_resident");
}
