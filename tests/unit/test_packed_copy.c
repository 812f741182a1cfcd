/* The bit-packed copy of a .qem file (qem_container_build_packed_copy):
 * once built, every weighted sum (one to five planes, int32- and
 * int64-sized weights, whole and partial ranges) and every single pattern
 * equals the file without it and the dense reference path, bit for bit, on
 * the upstream fixtures (uint8, uint16 far above 255, masked, scaled codes)
 * and on generated files of several chunks, partial blocks and tiles of
 * every width up to 16 and of sparse counts (one-plane tiles held in one
 * 16-bit half), and beside the spatial sums' whole tiles for a
 * detector of over 1024 pixels; a limit it would pass keeps nothing; a float file,
 * a pack and a cancelled build get their own errors; reductions running
 * while another thread builds it agree (make test-tsan). */
#include <pthread.h>

#include "test_util.h"
#include "qem_experimental.h"

/* A file opened twice: `c` (where the copy is built) and `plain`. */
typedef struct pair {
    qem_container *c, *plain;
    qem_container_info info;
} pair;

/* 0 when either open fails (the failure is counted). */
static int pair_open(const char *path, int resident, pair *t)
{
    t->c = test_open_source(path, resident, 0);
    t->plain = test_open_source(path, QEM_RESIDENT_NONE, 0);
    t->info = (qem_container_info){.struct_size = sizeof t->info};
    qem_error e = {0};
    if (t->c && t->plain && qem_container_get_info(t->c, &t->info, &e) == QEM_OK)
        return 1;
    qem_container_close(t->c);
    qem_container_close(t->plain);
    return 0;
}

static void pair_close(pair *t)
{
    qem_container_close(t->c);
    qem_container_close(t->plain);
}

static qem_packed_copy_stats stats_of(const qem_container *c)
{
    qem_packed_copy_stats s = {.struct_size = sizeof s};
    qem_error e = {0};
    CHECK_OK(qem_container_packed_copy_stats(c, &s, &e), &e);
    return s;
}

enum { PLANES = 5 };

/* Weights of detector k for `planes` planes: a disk of radius 4 moved
 * along row 7 (0/1), signed coordinate planes, and for planes 4 and 5
 * weights large enough that the sums need 64 bits. */
static void detector_weights(int32_t *w, uint64_t rows, uint64_t cols, int k, unsigned planes)
{
    const uint64_t P = rows * cols;
    for (uint64_t p = 0; p < P; p++) {
        const long r = (long)(p / cols), c = (long)(p % cols);
        const long dr = r - 7, dc = c - (4 + k % 7);
        const int in = dr * dr + dc * dc <= 16;
        w[p] = in;
        if (planes > 1)
            w[P + p] = in ? (int32_t)c - 8 : 0;
        if (planes > 2)
            w[2 * P + p] = (int32_t)(3 * (r - 8));
        if (planes > 3)
            w[3 * P + p] = (int32_t)((p * 2654435761u) % 200001) - 100000;
        if (planes > 4)
            w[4 * P + p] = (p % 5 == 0) ? 2000000000 : -7;
    }
}

/* Sums over [first, first + count) from `a` and from `b`, equal. */
static void sums_equal(qem_products *a, qem_products *b, const int32_t *w, uint64_t P,
                       unsigned planes, uint64_t first, uint64_t count)
{
    const int32_t *pl[PLANES];
    for (unsigned k = 0; k < planes; k++)
        pl[k] = w + k * P;
    const size_t size = (size_t)(count * planes) * 8;
    int64_t *x = malloc(size ? size : 8), *y = malloc(size ? size : 8);
    qem_error e = {0};
    CHECK_OK(qem_products_weighted_sums(a, first, count, pl, planes, x, size, &e), &e);
    CHECK_OK(qem_products_weighted_sums(b, first, count, pl, planes, y, size, &e), &e);
    CHECK(memcmp(x, y, size) == 0);
    free(x);
    free(y);
}

/* Every scan's pattern of both value kinds, from `a` and from `b`. */
static void patterns_equal(qem_container *a, qem_container *b, uint64_t scans, uint64_t step)
{
    for (int values = QEM_VALUES_WORKING; values <= QEM_VALUES_RAW; values++) {
        const size_t size = (size_t)qem_container_read_bound(a, (qem_values)values, 1);
        uint8_t *x = malloc(size), *y = malloc(size);
        for (uint64_t s = 0; s < scans; s += step) {
            qem_error e = {0};
            CHECK_OK(qem_container_read(a, s, 1, (qem_values)values, x, size, &e), &e);
            CHECK_OK(qem_container_read(b, s, 1, (qem_values)values, y, size, &e), &e);
            CHECK(memcmp(x, y, size) == 0);
        }
        free(x);
        free(y);
    }
}

/* Builds the copy of `path` (opened `resident`), then checks products and
 * patterns against the same file without it and the reference path. */
static void copy_equals(const char *path, int resident, uint64_t pattern_step)
{
    pair t;
    if (!pair_open(path, resident, &t))
        return;
    const uint64_t P = t.info.pixels, S = t.info.scans;
    qem_error e = {0};
    CHECK(!stats_of(t.c).ready);
    CHECK_OK(qem_container_build_packed_copy(t.c, 0, 0, NULL, NULL, &e), &e);
    const qem_packed_copy_stats st = stats_of(t.c);
    CHECK(st.ready && st.bytes > 0);
    /* A second build keeps the first. */
    CHECK_OK(qem_container_build_packed_copy(t.c, 0, 0, NULL, NULL, &e), &e);
    CHECK(stats_of(t.c).bytes == st.bytes);

    qem_products *fast = test_products_path(t.c, QEM_PATH_FAST);
    qem_products *ref = test_products_path(t.plain, QEM_PATH_REFERENCE);
    qem_products *plain_fast = test_products_path(t.plain, QEM_PATH_FAST);
    int32_t *w = malloc((size_t)(PLANES * P) * sizeof *w);
    for (unsigned planes = 1; planes <= PLANES; planes++)
        for (int k = 0; k < 4; k++) {
            detector_weights(w, t.info.shape[2], t.info.shape[3], k, planes);
            sums_equal(fast, ref, w, P, planes, 0, S);
            sums_equal(fast, plain_fast, w, P, planes, 0, S);
        }
    /* One plane at a time, as a detector move asks (the one-plane kernel):
     * a disk of -1, then weights from -8 to 7, then multiples of 3. */
    int32_t *one = malloc((size_t)P * sizeof *one);
    detector_weights(w, t.info.shape[2], t.info.shape[3], 3, 3);
    for (unsigned k = 0; k < 3; k++) {
        for (uint64_t p = 0; p < P; p++)
            one[p] = k ? w[k * P + p] : -w[p];
        sums_equal(fast, ref, one, P, 1, 0, S);
    }
    /* A move adds some pixels and takes others away: +1 and -1 in one
     * plane, pixels of every width mixed in each group. */
    for (uint64_t k = 0; k < 3; k++) {
        for (uint64_t p = 0; p < P; p++)
            one[p] = (int32_t)((p * 37 + k) % 3) - 1;
        sums_equal(fast, ref, one, P, 1, 0, S);
    }
    free(one);
    /* Ranges starting and ending inside tiles and blocks. */
    detector_weights(w, t.info.shape[2], t.info.shape[3], 2, 3);
    const uint64_t ranges[][2] = {{S / 3, S - S / 3}, {1, S > 2 ? S - 2 : 0}, {S - 1, 1},
                                  {S / 2, S > 40 ? 33 : S - S / 2}};
    for (size_t k = 0; k < sizeof ranges / sizeof *ranges; k++)
        sums_equal(fast, ref, w, P, 3, ranges[k][0], ranges[k][1]);
    patterns_equal(t.c, t.plain, S, pattern_step);
    free(w);
    qem_products_close(fast);
    qem_products_close(ref);
    qem_products_close(plain_fast);
    pair_close(&t);
}

/* A detector of over 1024 pixels on a 48 x 40 detector: the copy answers
 * beside the 8x8 and 32x32 tiles a plan takes whole from the spatial sums. */
static void large_detector_equals(const char *path)
{
    pair t;
    if (!pair_open(path, QEM_RESIDENT_MAPPED, &t))
        return;
    const uint64_t P = t.info.pixels, S = t.info.scans, cols = t.info.shape[3];
    qem_error e = {0};
    CHECK_OK(qem_container_build_packed_copy(t.c, 0, 0, NULL, NULL, &e), &e);
    qem_products *fast = test_products_path(t.c, QEM_PATH_FAST);
    qem_products *ref = test_products_path(t.plain, QEM_PATH_REFERENCE);
    int32_t *w = calloc((size_t)(PLANES * P), sizeof *w);
    for (int k = 0; k < 3; k++) {
        for (uint64_t p = 0; p < P; p++) {
            const long dr = (long)(p / cols) - 23, dc = (long)(p % cols) - 19 - k;
            const int in = dr * dr + dc * dc <= 19 * 19 - k * 40;
            w[p] = in;
            w[P + p] = in ? (int32_t)(p % cols) - 20 : 0;
            w[2 * P + p] = in ? 2 : 1; /* every pixel: whole tiles at 1, the disk at 2 */
        }
        sums_equal(fast, ref, w, P, 1, 0, S);
        sums_equal(fast, ref, w, P, 3, 0, S);
        sums_equal(fast, ref, w, P, 3, S / 3, S - S / 3);
    }
    free(w);
    qem_products_close(fast);
    qem_products_close(ref);
    pair_close(&t);
}

/* A file rewritten in place after its copy was built: a mapped or per-use
 * file is refused (QEM_E_CHANGED), moves and patterns alike, as its
 * decoded columns would be; a copied body keeps answering what it read. */
static void changed_file(const char *a, const char *b, int resident)
{
    const char *x = test_path("packed-changed.qem");
    size_t size_a = 0, size_b = 0;
    uint8_t *bytes_a = read_file(a, &size_a), *bytes_b = read_file(b, &size_b);
    CHECK(bytes_a && bytes_b && write_file(x, bytes_a, size_a));
    qem_container *c = bytes_a && bytes_b ? test_open_source(x, resident, 0) : NULL;
    qem_container *ref = test_open_source(a, QEM_RESIDENT_NONE, 0);
    if (c && ref) {
        qem_error e = {0};
        CHECK_OK(qem_container_build_packed_copy(c, 0, 0, NULL, NULL, &e), &e);
        CHECK(rewrite_in_place(x, bytes_b, size_b));
        qem_container_info info = {.struct_size = sizeof info};
        CHECK_OK(qem_container_get_info(c, &info, &e), &e);
        qem_products *p = test_products_path(c, QEM_PATH_FAST);
        qem_products *want = test_products_path(ref, QEM_PATH_REFERENCE);
        int32_t *w = malloc((size_t)(PLANES * info.pixels) * sizeof *w);
        detector_weights(w, info.shape[2], info.shape[3], 1, 1);
        const size_t size = (size_t)qem_container_read_bound(c, QEM_VALUES_WORKING, 1);
        uint8_t *one = malloc(size);
        if (resident == QEM_RESIDENT_COPY) {
            sums_equal(p, want, w, info.pixels, 1, 0, info.scans);
            patterns_equal(c, ref, info.scans, 11);
        } else {
            const int32_t *pl[1] = {w};
            int64_t *s = malloc((size_t)info.scans * 8);
            CHECK_STATUS(qem_products_weighted_sums(p, 0, info.scans, pl, 1, s, info.scans * 8, &e),
                         QEM_E_CHANGED, &e);
            CHECK_STATUS(qem_container_read(c, 3, 1, QEM_VALUES_WORKING, one, size, &e),
                         QEM_E_CHANGED, &e);
            free(s);
        }
        free(one);
        free(w);
        qem_products_close(p);
        qem_products_close(want);
    }
    qem_container_close(c);
    qem_container_close(ref);
    free(bytes_a);
    free(bytes_b);
}

static int cancel_at_once(void *user, uint64_t done, uint64_t total)
{
    (void)user;
    (void)done;
    (void)total;
    return 1;
}

/* What is refused, and what keeps nothing. */
static void refusals(const char *qem_path, const char *pack_path)
{
    qem_error e = {0};
    qem_container *c = test_open_source(qem_path, QEM_RESIDENT_MAPPED, 0);
    if (c) {
        CHECK(qem_container_build_packed_copy(c, 1000, 0, NULL, NULL, &e) == QEM_E_LIMIT);
        CHECK(strstr(e.message, "1000 bytes") != NULL);
        CHECK(!stats_of(c).ready);
        CHECK(qem_container_build_packed_copy(c, 0, 1, cancel_at_once, NULL, &e) ==
              QEM_E_CANCELLED);
        CHECK(!stats_of(c).ready);
        qem_container_close(c);
    }
    c = test_open_source(fixture_path("qem/f32_special_bits.qem"), QEM_RESIDENT_MAPPED, 0);
    if (c) {
        CHECK(qem_container_build_packed_copy(c, 0, 0, NULL, NULL, &e) == QEM_E_WRONG_CODEC);
        CHECK(!stats_of(c).ready);
        qem_container_close(c);
    }
    c = test_open_source(pack_path, QEM_RESIDENT_MAPPED, 0);
    if (c) {
        CHECK(qem_container_build_packed_copy(c, 0, 0, NULL, NULL, &e) == QEM_E_WRONG_CODEC);
        CHECK(!stats_of(c).ready);
        qem_container_close(c);
    }
}

typedef struct race_arg {
    qem_products *fast, *ref;
    const qem_container_info *info;
    int ok; /* set by the thread: CHECK counts are not shared */
} race_arg;

static void *race(void *arg)
{
    race_arg *r = arg;
    const uint64_t P = r->info->pixels, S = r->info->scans;
    int32_t *w = malloc((size_t)(PLANES * P) * sizeof *w);
    int64_t *x = malloc((size_t)(3 * S) * 8), *y = malloc((size_t)(3 * S) * 8);
    r->ok = w && x && y;
    for (int k = 0; r->ok && k < 12; k++) {
        const unsigned planes = 1 + k % 3;
        detector_weights(w, r->info->shape[2], r->info->shape[3], k, planes);
        const int32_t *pl[3] = {w, w + P, w + 2 * P};
        qem_error e = {0};
        r->ok = qem_products_weighted_sums(r->fast, 0, S, pl, planes, x, 3 * S * 8, &e) ==
                    QEM_OK &&
                qem_products_weighted_sums(r->ref, 0, S, pl, planes, y, 3 * S * 8, &e) == QEM_OK &&
                memcmp(x, y, (size_t)(planes * S) * 8) == 0;
    }
    free(w);
    free(x);
    free(y);
    return NULL;
}

/* Moves on two threads while a third builds the copy. */
static void concurrent(const char *path)
{
    pair t;
    if (!pair_open(path, QEM_RESIDENT_MAPPED, &t))
        return;
    race_arg arg[2];
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        arg[k] = (race_arg){test_products_path(t.c, QEM_PATH_FAST),
                            test_products_path(t.plain, QEM_PATH_REFERENCE), &t.info, 0};
        CHECK(pthread_create(&th[k], NULL, race, &arg[k]) == 0);
    }
    qem_error e = {0};
    CHECK_OK(qem_container_build_packed_copy(t.c, 0, 1, NULL, NULL, &e), &e);
    for (int k = 0; k < 2; k++) {
        pthread_join(th[k], NULL);
        CHECK(arg[k].ok);
        qem_products_close(arg[k].fast);
        qem_products_close(arg[k].ref);
    }
    CHECK(stats_of(t.c).ready);
    pair_close(&t);
}

/* Sparse counts, as at low dose: mostly zeros, ones at 5 % (most one-plane
 * tiles then hold their ones in one half of their scans, stored in 16
 * bits), a count up to 8191 in one tile of 2000 (widths 2-13, 13 stored as
 * 16). */
static int write_sparse_sources(const uint64_t shape[4], uint64_t seed, const char *npy,
                                const char *qem)
{
    const uint64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    uint16_t *data = malloc((size_t)n * 2);
    if (!data)
        return 0;
    for (uint64_t k = 0; k < n; k++) {
        const uint64_t r = test_rand(&seed);
        data[k] = r % 2000 == 0 ? (uint16_t)(r >> 32) % 8192 : r % 100 < 5;
    }
    int ok = write_npy4(npy, QEM_DTYPE_UINT16, shape, data);
    free(data);
    qem_error e = {0};
    qem_save_options so;
    qem_save_options_init(&so);
    so.chunk_scans = 700;
    if (ok && qem_save_file(npy, qem, &so, &e) != QEM_OK) {
        fprintf(stderr, "write_sparse_sources(%s): %s\n", qem, e.message);
        ok = 0;
    }
    return ok;
}

/* Pixels of each kind a move reads differently, by p % 7: zeros; ones
 * (one plane); ones in low or high half tiles only; below 3 (two planes);
 * below 16 (four); below 40 with rare large counts (wider). */
static int write_graded_sources(const uint64_t shape[4], uint64_t seed, uint64_t chunk_scans,
                                const char *npy, const char *qem)
{
    const uint64_t P = shape[2] * shape[3], n = shape[0] * shape[1] * P;
    uint16_t *data = malloc((size_t)n * 2);
    if (!data)
        return 0;
    for (uint64_t k = 0; k < n; k++) {
        /* Which 16 scans of its 32-scan tile (blocks of 512 in each chunk). */
        const uint64_t r = test_rand(&seed), half = k / P % chunk_scans % 512 % 32 / 16;
        const unsigned kinds[7] = {0,
                                   r % 100 < 5,
                                   half == 0 && r % 10 == 0,
                                   half == 1 && r % 10 == 0,
                                   (unsigned)(r % 3),
                                   (unsigned)(r % 16),
                                   r % 3000 == 0 ? 9000 : (unsigned)(r % 40)};
        data[k] = (uint16_t)kinds[k % P % 7];
    }
    int ok = write_npy4(npy, QEM_DTYPE_UINT16, shape, data);
    free(data);
    qem_error e = {0};
    qem_save_options so;
    qem_save_options_init(&so);
    so.chunk_scans = chunk_scans;
    if (ok && qem_save_file(npy, qem, &so, &e) != QEM_OK) {
        fprintf(stderr, "write_graded_sources(%s): %s\n", qem, e.message);
        ok = 0;
    }
    return ok;
}

int main(void)
{
    const char *fixtures[] = {"qem/u8_sparse_lowdose.qem", "qem/u16_dense_highdose.qem",
                              "qem/u16_nonsquare_masked.qem", "qem/scaled_u16_regions.qem"};
    for (size_t k = 0; k < sizeof fixtures / sizeof *fixtures; k++) {
        copy_equals(fixture_path(fixtures[k]), QEM_RESIDENT_MAPPED, 1);
        copy_equals(fixture_path(fixtures[k]), QEM_RESIDENT_NONE, 1);
    }
    /* Generated: 1200 scans in chunks of 700 (blocks of 512, 188 and
     * 500 scans); counts below 40, below 32768 (widths up to 15, stored
     * as 16) and below 65535 (width 16). */
    const uint64_t shape[4] = {30, 40, 16, 16};
    const unsigned maxima[] = {40, 32768, 65535};
    char *pack = strdup(test_path("packed-40.h5"));
    for (size_t k = 0; k < sizeof maxima / sizeof *maxima; k++) {
        char name[64], npy[64];
        snprintf(name, sizeof name, "packed-%u.qem", maxima[k]);
        snprintf(npy, sizeof npy, "packed-%u.npy", maxima[k]);
        char *qem = strdup(test_path(name));
        CHECK(write_count_sources(shape, 7 + k, maxima[k], 700, test_path(npy), qem,
                                  k == 0 ? pack : NULL));
        copy_equals(qem, QEM_RESIDENT_MAPPED, 7);
        if (k == 0) {
            copy_equals(qem, QEM_RESIDENT_COPY, 13);
            refusals(qem, pack);
            concurrent(qem);
        }
        if (k == 1) {
            /* Same shape, other counts: a rewrite in place. */
            char *first = strdup(test_path("packed-40.qem"));
            changed_file(first, qem, QEM_RESIDENT_MAPPED);
            changed_file(first, qem, QEM_RESIDENT_NONE);
            changed_file(first, qem, QEM_RESIDENT_COPY);
            free(first);
        }
        free(qem);
    }
    free(pack);
    const uint64_t sparse_shape[4] = {30, 40, 16, 16};
    char *sparse = strdup(test_path("packed-sparse.qem"));
    CHECK(write_sparse_sources(sparse_shape, 41, test_path("packed-sparse.npy"), sparse));
    copy_equals(sparse, QEM_RESIDENT_MAPPED, 5);
    copy_equals(sparse, QEM_RESIDENT_COPY, 3);
    free(sparse);
    char *graded = strdup(test_path("packed-graded.qem"));
    CHECK(write_graded_sources(sparse_shape, 43, 700, test_path("packed-graded.npy"), graded));
    copy_equals(graded, QEM_RESIDENT_MAPPED, 5);
    free(graded);
    /* Many parts: slabs of whole chunks (5 chunks of 3 parts each), which
     * the reduction shares out slab by slab once each of the product's
     * four pieces of scans spans 4 slabs or more; and chunks of 18 parts,
     * each a slab alone. */
    const uint64_t many[4] = {256, 520, 4, 4}, long_chunks[4] = {150, 150, 4, 4};
    char *slabs = strdup(test_path("packed-slabs.qem"));
    CHECK(write_count_sources(many, 31, 20, 1500, test_path("packed-slabs.npy"), slabs, NULL));
    copy_equals(slabs, QEM_RESIDENT_MAPPED, 997);
    free(slabs);
    /* The same slabs, pixels of every kind: a move carries each pixel's
     * start from part to part. */
    slabs = strdup(test_path("packed-graded-slabs.qem"));
    CHECK(write_graded_sources(many, 33, 1500, test_path("packed-graded-slabs.npy"), slabs));
    copy_equals(slabs, QEM_RESIDENT_MAPPED, 997);
    free(slabs);
    slabs = strdup(test_path("packed-long-chunks.qem"));
    CHECK(write_count_sources(long_chunks, 32, 20, 9000, test_path("packed-long-chunks.npy"),
                              slabs, NULL));
    copy_equals(slabs, QEM_RESIDENT_NONE, 89);
    free(slabs);
    const uint64_t large[4] = {10, 12, 48, 40};
    char *qem = strdup(test_path("packed-large.qem"));
    CHECK(write_count_sources(large, 21, 300, 0, test_path("packed-large.npy"), qem, NULL));
    large_detector_equals(qem);
    free(qem);
    return test_finish("unit_packed_copy");
}
