/* The decoded-column cache of a .qem file (column_cache_bytes): every
 * weighted sum read partly from kept columns equals the file without the
 * cache and the dense reference path, bit for bit, on the upstream
 * fixtures (uint8, uint16 with samples far above 255, masked, scaled codes)
 * and on generated files of several chunks; kept columns are actually
 * read (hits) once a reduction filled them, across a product's pieces;
 * the cache stays within its bytes; two files side by side each get their
 * own columns; a file changed after opening (mapped or read per use) is
 * refused, not answered from columns of its old content, and its columns
 * are dropped; concurrent reductions (make test-tsan) agree. */
#include <pthread.h>

#include "test_util.h"

static qem_column_cache_stats stats_of(const qem_container *c)
{
    qem_column_cache_stats s = {.struct_size = sizeof s};
    qem_error e = {0};
    CHECK_OK(qem_container_column_cache_stats(c, &s, &e), &e);
    return s;
}

/* One file opened twice: with the cache (products on the fast path) and
 * plainly (products on the dense reference path). */
typedef struct pair {
    qem_container *c, *plain;
    qem_products *pc, *ref;
    qem_container_info info;
    uint64_t P, S;
    int32_t *w; /* room for three planes of weights */
} pair;

static void pair_free(pair *t)
{
    if (!t)
        return;
    qem_products_close(t->pc);
    qem_products_close(t->ref);
    qem_container_close(t->c);
    qem_container_close(t->plain);
    free(t->w);
    free(t);
}

/* NULL when either open fails (the failure is counted). */
static pair *pair_new(const char *path, int resident, uint64_t bytes)
{
    pair *t = calloc(1, sizeof *t);
    t->c = test_open_source(path, resident, bytes);
    t->plain = test_open_source(path, 0, 0);
    if (!t->c || !t->plain) {
        pair_free(t);
        return NULL;
    }
    t->info.struct_size = sizeof t->info;
    qem_error e = {0};
    CHECK_OK(qem_container_get_info(t->c, &t->info, &e), &e);
    t->pc = test_products_path(t->c, QEM_PATH_FAST);
    t->ref = test_products_path(t->plain, QEM_PATH_REFERENCE);
    t->P = t->info.pixels;
    t->S = t->info.scans;
    t->w = malloc((size_t)(3 * t->P) * sizeof *t->w);
    return t;
}

/* Weights of "move" k: a disk of radius 4 centred at column 4 + k % 7 of
 * row 7 (a detector dragged sideways) on detectors of at least 16 x 16,
 * plus, for `planes` > 1, signed coordinate planes (CoM-like). */
static void move_weights(int32_t *w, uint64_t rows, uint64_t cols, int k, unsigned planes)
{
    const uint64_t P = rows * cols;
    for (uint64_t p = 0; p < P; p++) {
        const long dr = (long)(p / cols) - 7, dc = (long)(p % cols) - (4 + k % 7);
        const int in = dr * dr + dc * dc <= 16;
        w[p] = in;
        if (planes > 1)
            w[P + p] = in ? (int32_t)(p % cols) - 8 : 0;
        if (planes > 2)
            w[2 * P + p] = in ? 3 * ((int32_t)(p / cols) - 8) : 0;
    }
}

/* Sums over [first, first + count) of `c` (cached) against `ref`. */
static void sums_equal(qem_products *c, qem_products *ref, const int32_t *w, uint64_t P,
                       unsigned planes, uint64_t first, uint64_t count)
{
    const int32_t *pl[3] = {w, w + P, w + 2 * P};
    int64_t *a = malloc((size_t)(count * planes) * 8), *b = malloc((size_t)(count * planes) * 8);
    qem_error e = {0};
    CHECK_OK(qem_products_weighted_sums(c, first, count, pl, planes, a, count * planes * 8, &e),
             &e);
    CHECK_OK(qem_products_weighted_sums(ref, first, count, pl, planes, b, count * planes * 8, &e),
             &e);
    CHECK(memcmp(a, b, (size_t)(count * planes) * 8) == 0);
    free(a);
    free(b);
}

/* A sequence of moves (each new plan looks its pixels up) over `path`,
 * cached against the reference path; kept columns must be read. */
static void moves_equal(const char *path, int resident, uint64_t bytes, unsigned planes,
                        int want_hits)
{
    pair *t = pair_new(path, resident, bytes);
    if (!t)
        return;
    /* Right, left and right again, twice over: uint16 columns first
     * overflow as uint8 and are kept as uint16 from the next fill. */
    const int path_k[] = {0, 1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2, 3};
    for (size_t k = 0; k < sizeof path_k / sizeof *path_k; k++) {
        move_weights(t->w, t->info.shape[2], t->info.shape[3], path_k[k], planes);
        sums_equal(t->pc, t->ref, t->w, t->P, planes, 0, t->S);
    }
    /* Part of the scans (no fill: it does not start at scan 0) and the
     * whole again. */
    move_weights(t->w, t->info.shape[2], t->info.shape[3], 5, planes);
    sums_equal(t->pc, t->ref, t->w, t->P, planes, t->S / 3, t->S - t->S / 3);
    sums_equal(t->pc, t->ref, t->w, t->P, planes, 0, t->S);
    const qem_column_cache_stats st = stats_of(t->c);
    if (want_hits && st.hits == 0)
        fprintf(stderr, "%s: no kept column was read (%llu misses)\n", path,
                (unsigned long long)st.misses);
    CHECK(!want_hits || (st.hits > 0 && st.columns > 0));
    CHECK(st.bytes <= st.limit);
    CHECK(st.limit == bytes);
    pair_free(t);
}

/* A product in pieces fills its columns across them: the next plan over
 * the same pixels reads them. */
static void pieces_fill(const char *path)
{
    pair *t = pair_new(path, QEM_RESIDENT_MAPPED, 1 << 24);
    if (!t)
        return;
    /* In order from scan 0, in three pieces, then other weights; twice,
     * as uint16 columns are first filled as uint8 and dropped. Then these
     * weights again: a new plan, whose every pixel is a kept column. */
    for (int round = 0; round < 2; round++) {
        move_weights(t->w, t->info.shape[2], t->info.shape[3], 2, 1);
        const uint64_t listed = stats_of(t->c).columns;
        sums_equal(t->pc, t->ref, t->w, t->P, 1, 0, t->S / 3);
        sums_equal(t->pc, t->ref, t->w, t->P, 1, t->S / 3, t->S / 3);
        CHECK(stats_of(t->c).columns == listed); /* not listed before the last scan */
        sums_equal(t->pc, t->ref, t->w, t->P, 1, 2 * (t->S / 3), t->S - 2 * (t->S / 3));
        move_weights(t->w, t->info.shape[2], t->info.shape[3], 6, 1);
        sums_equal(t->pc, t->ref, t->w, t->P, 1, 0, t->S);
    }
    const qem_column_cache_stats before = stats_of(t->c);
    CHECK(before.columns > 0);
    move_weights(t->w, t->info.shape[2], t->info.shape[3], 2, 1);
    sums_equal(t->pc, t->ref, t->w, t->P, 1, 0, t->S);
    const qem_column_cache_stats after = stats_of(t->c);
    CHECK(after.hits > before.hits && after.misses == before.misses);
    pair_free(t);
}

/* A cache of three columns' bytes never holds more, and still answers
 * exactly. */
static void small_limit(const char *path, uint64_t scans)
{
    moves_equal(path, QEM_RESIDENT_MAPPED, 3 * scans, 1, 1);
    qem_container *c = test_open_source(path, QEM_RESIDENT_MAPPED, 3 * scans);
    if (!c)
        return;
    qem_products *pc = test_products_path(c, QEM_PATH_FAST);
    qem_container_info info = {.struct_size = sizeof info};
    qem_error e = {0};
    CHECK_OK(qem_container_get_info(c, &info, &e), &e);
    int32_t *w = malloc((size_t)(3 * info.pixels) * sizeof *w);
    int64_t *s = malloc((size_t)info.scans * 8);
    for (int k = 0; k < 5; k++) {
        move_weights(w, info.shape[2], info.shape[3], k, 1);
        const int32_t *pl[1] = {w};
        CHECK_OK(qem_products_weighted_sums(pc, 0, info.scans, pl, 1, s, info.scans * 8, &e), &e);
        const qem_column_cache_stats st = stats_of(c);
        CHECK(st.columns <= 3 && st.bytes <= 3 * scans);
    }
    free(w);
    free(s);
    qem_products_close(pc);
    qem_container_close(c);
}

/* Two files side by side with caches, their pixels' columns filled in
 * turn: each answers with its own values. Then file x, a copy of a, is
 * rewritten in place with b's bytes: mapped or read per use, a reduction
 * that would read kept columns is refused and the columns dropped; a copy
 * keeps answering from what it read. */
static void isolation_and_change(int mode)
{
    const uint64_t shape[4] = {30, 40, 16, 16};
    char name[5][32];
    const char *what[5] = {"a.qem", "b.qem", "x.qem", "a.npy", "b.npy"};
    for (int k = 0; k < 5; k++)
        snprintf(name[k], sizeof name[k], "cols%d-%s", mode, what[k]);
    char *a = strdup(test_path(name[0])), *b = strdup(test_path(name[1])),
         *x = strdup(test_path(name[2]));
    CHECK(write_count_sources(shape, 3, 40, 700, test_path(name[3]), a, NULL));
    CHECK(write_count_sources(shape, 4, 40, 700, test_path(name[4]), b, NULL));
    qem_container *ca = test_open_source(a, mode, 1 << 22), *cb = test_open_source(b, mode, 1 << 22);
    qem_container *ra = test_open_source(a, 0, 0), *rb = test_open_source(b, 0, 0);
    qem_error e = {0};
    const uint64_t P = 256, S = 1200;
    int32_t *w = malloc(3 * P * sizeof *w);
    int64_t *s = malloc(S * 8), *t = malloc(S * 8);
    if (!ca || !cb || !ra || !rb)
        goto out;
    qem_products *pa = test_products_path(ca, QEM_PATH_FAST), *pb = test_products_path(cb, QEM_PATH_FAST);
    qem_products *refa = test_products_path(ra, QEM_PATH_REFERENCE),
                 *refb = test_products_path(rb, QEM_PATH_REFERENCE);
    for (int k = 0; k < 8; k++) {
        move_weights(w, 16, 16, k % 4, 1);
        sums_equal(pa, refa, w, P, 1, 0, S);
        sums_equal(pb, refb, w, P, 1, 0, S);
    }
    CHECK(stats_of(ca).hits > 0 && stats_of(cb).hits > 0);

    size_t size_a = 0, size_b = 0;
    uint8_t *bytes_a = read_file(a, &size_a), *bytes_b = read_file(b, &size_b);
    CHECK(bytes_a && bytes_b && write_file(x, bytes_a, size_a));
    qem_container *cx = test_open_source(x, mode, 1 << 22);
    if (cx && bytes_b) {
        qem_products *px = test_products_path(cx, QEM_PATH_FAST);
        const int32_t *pl[1] = {w};
        /* Fill the disk at 1's columns, move on, then rewrite. */
        move_weights(w, 16, 16, 1, 1);
        sums_equal(px, refa, w, P, 1, 0, S);
        move_weights(w, 16, 16, 2, 1);
        sums_equal(px, refa, w, P, 1, 0, S);
        CHECK(stats_of(cx).columns > 0);
        CHECK(rewrite_in_place(x, bytes_b, size_b));
        move_weights(w, 16, 16, 1, 1);
        if (mode == QEM_RESIDENT_COPY) {
            CHECK_OK(qem_products_weighted_sums(px, 0, S, pl, 1, s, S * 8, &e), &e);
            CHECK_OK(qem_products_weighted_sums(refa, 0, S, pl, 1, t, S * 8, &e), &e);
            CHECK(memcmp(s, t, S * 8) == 0);
        } else {
            CHECK_STATUS(qem_products_weighted_sums(px, 0, S, pl, 1, s, S * 8, &e),
                         QEM_E_CHANGED, &e);
            CHECK(stats_of(cx).columns == 0);
        }
        qem_products_close(px);
    }
    qem_container_close(cx);
    free(bytes_a);
    free(bytes_b);
    qem_products_close(pa);
    qem_products_close(pb);
    qem_products_close(refa);
    qem_products_close(refb);
out:
    free(w);
    free(s);
    free(t);
    qem_container_close(ca);
    qem_container_close(cb);
    qem_container_close(ra);
    qem_container_close(rb);
    free(a);
    free(b);
    free(x);
}

typedef struct racer {
    qem_products *p;
    const int64_t *want[4];
    int ok;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    int32_t *w = malloc(3 * 256 * sizeof *w);
    int64_t *s = malloc(1200 * 8);
    r->ok = 1;
    qem_error e = {0};
    for (int k = 0; k < 12; k++) {
        move_weights(w, 16, 16, k % 4, 1);
        const int32_t *pl[1] = {w};
        r->ok &= qem_products_weighted_sums(r->p, 0, 1200, pl, 1, s, 1200 * 8, &e) == QEM_OK &&
                 memcmp(s, r->want[k % 4], 1200 * 8) == 0;
    }
    free(w);
    free(s);
    return NULL;
}

/* Two threads moving detectors over one cached file at once. */
static void concurrent(void)
{
    const uint64_t shape[4] = {30, 40, 16, 16};
    char *q = strdup(test_path("cols-race.qem"));
    CHECK(write_count_sources(shape, 9, 300, 700, test_path("cols-race.npy"), q, NULL));
    qem_container *c = test_open_source(q, QEM_RESIDENT_MAPPED, 1 << 22), *plain = test_open_source(q, 0, 0);
    if (c && plain) {
        qem_products *ref = test_products_path(plain, QEM_PATH_REFERENCE);
        qem_products *p1 = test_products_path(c, QEM_PATH_FAST), *p2 = test_products_path(c, QEM_PATH_FAST);
        int64_t *want[4];
        int32_t w[3 * 256];
        qem_error e = {0};
        for (int k = 0; k < 4; k++) {
            want[k] = malloc(1200 * 8);
            move_weights(w, 16, 16, k, 1);
            const int32_t *pl[1] = {w};
            CHECK_OK(qem_products_weighted_sums(ref, 0, 1200, pl, 1, want[k], 1200 * 8, &e), &e);
        }
        racer r1 = {p1, {want[0], want[1], want[2], want[3]}, 0};
        racer r2 = {p2, {want[0], want[1], want[2], want[3]}, 0};
        pthread_t t1, t2;
        CHECK(pthread_create(&t1, NULL, race, &r1) == 0);
        CHECK(pthread_create(&t2, NULL, race, &r2) == 0);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        CHECK(r1.ok && r2.ok);
        for (int k = 0; k < 4; k++)
            free(want[k]);
        qem_products_close(p1);
        qem_products_close(p2);
        qem_products_close(ref);
    }
    qem_container_close(c);
    qem_container_close(plain);
    free(q);
}

int main(void)
{
    const char *fixtures[] = {"qem/u8_sparse_lowdose.qem", "qem/u16_dense_highdose.qem",
                              "qem/u16_nonsquare_masked.qem", "qem/scaled_u16_regions.qem"};
    for (size_t k = 0; k < sizeof fixtures / sizeof *fixtures; k++)
        for (unsigned planes = 1; planes <= 3; planes += 2) {
            /* Upstream fixtures hold a few scans and may have every pixel
             * in one tile sum: hits are asserted on the files below. */
            moves_equal(fixture_path(fixtures[k]), QEM_RESIDENT_MAPPED, 1 << 20, planes, 0);
            moves_equal(fixture_path(fixtures[k]), QEM_RESIDENT_NONE, 1 << 20, planes, 0);
        }
    /* Generated: 1200 scans in chunks of 700; counts below 40 (uint8
     * columns) and below 300 (uint16 columns). */
    const uint64_t shape[4] = {30, 40, 16, 16};
    char *narrow = strdup(test_path("cols-narrow.qem")), *wide = strdup(test_path("cols-wide.qem"));
    CHECK(write_count_sources(shape, 5, 40, 700, test_path("cols-narrow.npy"), narrow, NULL));
    CHECK(write_count_sources(shape, 6, 300, 700, test_path("cols-wide.npy"), wide, NULL));
    for (unsigned planes = 1; planes <= 3; planes++) {
        moves_equal(narrow, QEM_RESIDENT_MAPPED, 1 << 22, planes, 1);
        moves_equal(wide, QEM_RESIDENT_MAPPED, 1 << 22, planes, 1);
    }
    moves_equal(narrow, QEM_RESIDENT_COPY, 1 << 22, 1, 1);
    moves_equal(wide, QEM_RESIDENT_NONE, 1 << 22, 1, 1);
    pieces_fill(narrow);
    pieces_fill(wide);
    small_limit(narrow, 1200);
    isolation_and_change(QEM_RESIDENT_MAPPED);
    isolation_and_change(QEM_RESIDENT_NONE);
    isolation_and_change(QEM_RESIDENT_COPY);
    concurrent();
    free(narrow);
    free(wide);
    return test_finish("unit_column_cache");
}
