/* A .qem file opened resident (its encoded body held in memory and
 * authenticated once: copied, or mapped from the file) gives every read and
 * product the file-per-use path gives, bit for bit, on every upstream
 * fixture (whose bodies start off any word boundary, so a mapping reads
 * unaligned arrays); a detector session over it keeps the images of recent
 * masks (qem_detector_session_keep) and serves a mask set again from them,
 * equal to a computation, within its byte limit; two files side by side
 * and a file replaced or rewritten in place after opening each give their
 * own values, or, mapped, the rewrite is refused; a damaged body is
 * refused while opening, as without resident, and so is a truncated one. */

#include "test_util.h"

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

/* Every read and product of `path`, resident (`mode`: copied or mapped)
 * against per-use reads. */
static void fixture_equal(const char *name, int mode)
{
    const char *path = fixture_path(name);
    qem_container *plain = test_open_source(path, 0, 0), *held = test_open_source(path, mode, 0);
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
        /* The same buffer with other weights: the plan each file keeps
         * for its last weights must not answer for these; the reference
         * path (a dense pass, no plan) says what they give. */
        for (uint64_t p = 0; p < pixels; p += 3)
            w[p] = w[p] ? 0 : 5;
        qem_products *ref = NULL;
        CHECK_OK(qem_products_open_path(plain, NULL, QEM_PATH_REFERENCE, &ref, &e), &e);
        int64_t *s3 = malloc((size_t)scans * 8);
        a = qem_products_weighted_sums(pp, 0, scans, planes, 1, s1, scans * 8, &e);
        b = qem_products_weighted_sums(hp, 0, scans, planes, 1, s2, scans * 8, &e);
        const qem_status c = qem_products_weighted_sums(ref, 0, scans, planes, 1, s3, scans * 8, &e);
        CHECK(a == b && b == c);
        CHECK(a != QEM_OK || (memcmp(s1, s3, (size_t)scans * 8) == 0 &&
                              memcmp(s2, s3, (size_t)scans * 8) == 0));
        free(s3);
        qem_products_close(ref);
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

static qem_image session_image(qem_detector_session *s)
{
    qem_image im = {0};
    qem_error e = {0};
    CHECK_OK(qem_detector_session_image(s, 0, &im, &e), &e);
    return im;
}

/* Disk masks of radius 3 at (8, c) on a 16 x 16 detector. */
static void disk_at(uint8_t *mask, int c)
{
    for (int p = 0; p < 256; p++) {
        const int dr = p / 16 - 8, dc = p % 16 - c;
        mask[p] = dr * dr + dc * dc <= 9;
    }
}

static void kept_masks_and_isolation(int mode)
{
    /* 1200 scans in chunks of 700: blocks that cross no chunk. */
    const uint64_t shape[4] = {30, 40, 16, 16}, scans = 1200;
    char name[5][32];
    const char *what[5] = {"a.qem", "b.qem", "x.qem", "a.npy", "b.npy"};
    for (int k = 0; k < 5; k++)
        snprintf(name[k], sizeof name[k], "mode%d-%s", mode, what[k]);
    char *a = strdup(test_path(name[0])), *b = strdup(test_path(name[1])),
         *x = strdup(test_path(name[2]));
    CHECK(write_count_sources(shape, 3, 40, 700, test_path(name[3]), a, NULL));
    /* File b's sums over a disk pass 65535: its kept images stay uint32. */
    CHECK(write_count_sources(shape, 4, 5000, 700, test_path(name[4]), b, NULL));
    qem_container *pa = test_open_source(a, 0, 0), *ca = test_open_source(a, mode, 0),
                  *cb = test_open_source(b, mode, 0);
    if (!pa || !ca || !cb)
        goto out;
    qem_products *ppa = products_of(pa), *pca = products_of(ca), *pcb = products_of(cb);
    qem_error e = {0};
    /* A series over two resident files, keeping recent masks; a plain
     * session over file a as the reference. */
    qem_products *both[2] = {pca, pcb};
    qem_detector_session *kept = NULL, *ref = NULL;
    CHECK_OK(qem_detector_session_create(both, 2, &kept, &e), &e);
    CHECK_OK(qem_detector_session_create(&ppa, 1, &ref, &e), &e);
    /* Room for three masks' results: each its mask (256 bytes) and, per
     * source, its image (counts: the image holds the exact sums), kept as
     * uint16 where every value fits (file a), else uint32 (file b). */
    CHECK_OK(qem_detector_session_keep(kept, 3 * (256 + 1200 * 2 + 1200 * 4), &e), &e);
    uint8_t mask[256];
    const int path[] = {5, 6, 7, 8, 7, 6, 5, 9, 5, 8};
    /* Back over 7, 6, 5: kept; 9 is new (8, the least recent, goes); back
     * to 5, the mask before it; 8 again: computed. */
    const int want_kept[] = {0, 0, 0, 0, 1, 1, 1, 0, 1, 0};
    for (size_t k = 0; k < sizeof path / sizeof path[0]; k++) {
        disk_at(mask, path[k]);
        CHECK_OK(qem_detector_session_set_mask(kept, mask, &e), &e);
        CHECK_OK(qem_detector_session_set_mask(ref, mask, &e), &e);
        qem_session_stats st = {.struct_size = sizeof st};
        CHECK_OK(qem_detector_session_stats(kept, &st, &e), &e);
        if (st.from_kept != want_kept[k])
            fprintf(stderr, "step %zu: from_kept %d, expected %d\n", k, st.from_kept, want_kept[k]);
        CHECK(st.from_kept == want_kept[k]);
        CHECK(k == 0 || st.pixels_changed > 0);
        qem_image got = session_image(kept), want = session_image(ref);
        CHECK(same_image(&got, &want));
        qem_image_free(&got);
        qem_image_free(&want);
        /* The second source is file b's own image. */
        qem_image other = {0}, direct = {0};
        CHECK_OK(qem_detector_session_image(kept, 1, &other, &e), &e);
        CHECK_OK(qem_products_virtual(pcb, mask, &direct, &e), &e);
        CHECK(same_image(&other, &direct));
        qem_image_free(&other);
        qem_image_free(&direct);
    }
    /* Keeping nothing: every move computes. */
    CHECK_OK(qem_detector_session_keep(kept, 0, &e), &e);
    disk_at(mask, 6);
    CHECK_OK(qem_detector_session_set_mask(kept, mask, &e), &e);
    qem_session_stats st = {.struct_size = sizeof st};
    CHECK_OK(qem_detector_session_stats(kept, &st, &e), &e);
    CHECK(!st.from_kept);
    qem_detector_session_free(kept);
    qem_detector_session_free(ref);

    /* The file changed after a resident open: a copy keeps what it read
     * and authenticated, a mapping refuses to read on; a new open reads the
     * new file. */
    size_t size_a = 0, size_b = 0;
    uint8_t *bytes_a = read_file(a, &size_a), *bytes_b = read_file(b, &size_b);
    CHECK(bytes_a && bytes_b && write_file(x, bytes_a, size_a));
    qem_container *cx = test_open_source(x, mode, 0);
    if (cx) {
        qem_products *pcx = products_of(cx);
        qem_image before = {0}, after = {0}, want = {0};
        disk_at(mask, 7);
        CHECK_OK(qem_products_virtual(pcx, mask, &before, &e), &e);
        CHECK_OK(qem_products_virtual(ppa, mask, &want, &e), &e);
        CHECK(same_image(&before, &want));
        CHECK(rewrite_in_place(x, bytes_b, size_b));
        if (mode == QEM_RESIDENT_MAPPED) {
            CHECK_STATUS(qem_products_virtual(pcx, mask, &after, &e), QEM_E_CHANGED, &e);
        } else {
            CHECK_OK(qem_products_virtual(pcx, mask, &after, &e), &e);
            CHECK(same_image(&before, &after));
        }
        qem_image_free(&after);
        qem_container *cy = test_open_source(x, mode, 0);
        if (cy) {
            qem_products *pcy = products_of(cy);
            qem_image fresh = {0}, of_b = {0};
            CHECK_OK(qem_products_virtual(pcy, mask, &fresh, &e), &e);
            CHECK_OK(qem_products_virtual(pcb, mask, &of_b, &e), &e);
            CHECK(same_image(&fresh, &of_b) && !same_image(&fresh, &before));
            qem_image_free(&fresh);
            qem_image_free(&of_b);
            qem_products_close(pcy);
            qem_container_close(cy);
        }
        qem_image_free(&before);
        qem_image_free(&want);
        qem_products_close(pcx);
        qem_container_close(cx);
    }
    (void)scans;
    free(bytes_a);
    free(bytes_b);
    qem_products_close(ppa);
    qem_products_close(pca);
    qem_products_close(pcb);
out:
    qem_container_close(pa);
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
    o.resident = 1;
    /* A damaged body is refused while opening resident, with the status a
     * default open gives. */
    CHECK_STATUS(qem_container_open(fixture_path("qem/corrupt/flipped_body_byte.qem"), &o, &c, &e),
                 QEM_E_BODY_CHECKSUM, &e);
    CHECK(c == NULL);
    o.resident = QEM_RESIDENT_MAPPED;
    CHECK_STATUS(qem_container_open(fixture_path("qem/corrupt/flipped_body_byte.qem"), &o, &c, &e),
                 QEM_E_BODY_CHECKSUM, &e);
    CHECK(c == NULL);
    /* Mapped, the body is hashed where it lies: a file shorter than its
     * header says is refused before any byte past its end is touched. */
    CHECK_STATUS(qem_container_open(fixture_path("qem/corrupt/truncated.qem"), &o, &c, &e),
                 QEM_E_FILE_LENGTH, &e);
    CHECK(c == NULL);
    o.resident = 3;
    CHECK_STATUS(qem_container_open(fixture_path("qem/u8_sparse_lowdose.qem"), &o, &c, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    CHECK(c == NULL);
    o.resident = QEM_RESIDENT_MAPPED;
    /* A pack is resident anyway. */
    CHECK_OK(qem_container_open(fixture_path("pack/v1_u16_4x32_16x16.h5"), &o, &c, &e), &e);
    qem_container_close(c);
    CHECK_STATUS(qem_detector_session_keep(NULL, 1, &e), QEM_E_INVALID_ARGUMENT, &e);
}

int main(void)
{
    for (int mode = QEM_RESIDENT_COPY; mode <= QEM_RESIDENT_MAPPED; mode++) {
        fixture_equal("qem/u8_sparse_lowdose.qem", mode);
        fixture_equal("qem/u16_dense_highdose.qem", mode);
        fixture_equal("qem/u16_nonsquare_masked.qem", mode);
        fixture_equal("qem/scaled_u16_regions.qem", mode);
        fixture_equal("qem/f32_special_bits.qem", mode);
        kept_masks_and_isolation(mode);
    }
    refusals();
    return test_finish("unit_qem_resident");
}
