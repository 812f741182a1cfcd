/* Products against an independent dense computation done here: for .qem
 * (integer u8/u16 with invalid pixels, float32 with a dark plane) and packs
 * (both profiles, with exclusions), the fast path and the reference path
 * each equal the dense result (integers exactly, floats within 1e-6 of a
 * float64 reference); masks keep their boundary and never hold invalid
 * pixels; detector sessions updated by signed deltas equal a full
 * recomputation after 100 random moves; a series changes all or nothing. */
#include <math.h>

#include "pack_build.h"
#include "test_util.h"

#define SR 6u
#define SC 16u
#define DR 40u
#define DC 36u
#define SCANS (SR * SC)
#define PIXELS (DR * DC)

static uint16_t counts[SCANS * PIXELS];
static uint8_t valid[PIXELS];

typedef struct dense {
    qem_dtype dtype;          /* uint8/uint16 counts or float32 */
    const void *values;
    const uint8_t *valid;
    const float *dark;        /* float only */
} dense;

static double dense_at(const dense *d, uint64_t s, uint64_t px)
{
    const uint64_t k = s * PIXELS + px;
    if (!d->valid[px])
        return 0;
    switch (d->dtype) {
    case QEM_DTYPE_UINT8: return ((const uint8_t *)d->values)[k];
    case QEM_DTYPE_UINT16: return ((const uint16_t *)d->values)[k];
    default: {
        const float x = ((const float *)d->values)[k];
        return d->dark ? (double)(x - d->dark[px]) : (double)x;
    }
    }
}

static qem_container *open_source(const char *path, qem_products **products, qem_products_path path_kind)
{
    qem_error e = {0};
    qem_container *src = NULL;
    CHECK_OK(qem_container_open(path, NULL, &src, &e), &e);
    qem_products_options o;
    qem_products_options_init(&o);
    *products = NULL;
    if (src)
        CHECK_OK(qem_products_open_path(src, &o, path_kind, products, &e), &e);
    return src;
}

static int64_t int_at(const qem_image *im, uint64_t k)
{
    switch (im->dtype) {
    case QEM_DTYPE_UINT32: return ((const uint32_t *)im->data)[k];
    case QEM_DTYPE_UINT64: return (int64_t)((const uint64_t *)im->data)[k];
    case QEM_DTYPE_UINT16: return ((const uint16_t *)im->data)[k];
    case QEM_DTYPE_UINT8: return ((const uint8_t *)im->data)[k];
    default: return -1;
    }
}

static int close_enough(double got, double want)
{
    if (isnan(want))
        return isnan(got);
    return fabs(got - want) <= 1e-6 + 1e-6 * fabs(want);
}

/* Every product of one source equals the dense computation. */
static void check_products(const char *path, const dense *d)
{
    const int is_float = d->dtype == QEM_DTYPE_FLOAT32;
    qem_error e = {0};
    uint64_t seed = 77;
    uint8_t mask[PIXELS];
    for (uint64_t px = 0; px < PIXELS; px++)
        mask[px] = (uint8_t)(test_rand(&seed) % 3 == 0);
    /* A large block inside the mask lets .qem take whole tiles. */
    for (uint64_t r = 0; r < 32; r++)
        for (uint64_t c = 0; c < 32; c++)
            mask[r * DC + c] = 1;
    for (int path_kind = 0; path_kind < 2; path_kind++) {
        qem_products *p = NULL;
        qem_container *src = open_source(path, &p, (qem_products_path)path_kind);
        if (!p) {
            qem_container_close(src);
            return;
        }
        /* Virtual images: the random mask, then a disk and a ring whose
         * partial tiles .qem takes from the spatial sums minus the pixels
         * outside. */
        for (int m = 0; m < 3; m++) {
            uint8_t shaped[PIXELS];
            for (uint64_t px = 0; px < PIXELS; px++) {
                const double dr = (double)(px / DC) - 20.5, dc = (double)(px % DC) - 17.5;
                const double d2 = dr * dr + dc * dc;
                shaped[px] = m == 0 ? mask[px] : m == 1 ? d2 <= 14.2 * 14.2
                                                        : d2 >= 6.0 * 6.0 && d2 <= 19.0 * 19.0;
            }
            qem_image im;
            CHECK_OK(qem_products_virtual(p, shaped, &im, &e), &e);
            int wrong = 0;
            for (uint64_t s = 0; s < SCANS; s++) {
                double want = 0;
                for (uint64_t px = 0; px < PIXELS; px++)
                    if (shaped[px])
                        want += dense_at(d, s, px);
                if (is_float)
                    wrong += !close_enough(((float *)im.data)[s], want);
                else
                    wrong += int_at(&im, s) != (int64_t)want;
            }
            CHECK_EQ_U64(wrong, 0);
            CHECK(is_float ? im.dtype == QEM_DTYPE_FLOAT32 : im.dtype == QEM_DTYPE_UINT32);
            qem_image_free(&im);
        }
        qem_image im;
        int wrong = 0;

        /* Signed weights (the primitive) on integer data, over a sub-range. */
        if (!is_float) {
            int32_t w[PIXELS];
            for (uint64_t px = 0; px < PIXELS; px++)
                w[px] = (int32_t)(test_rand(&seed) % 7) - 3;
            const int32_t *planes[1] = {w};
            int64_t out[SCANS];
            CHECK_OK(qem_products_weighted_sums(p, 5, 50, planes, 1, out, sizeof out, &e), &e);
            wrong = 0;
            for (uint64_t i = 0; i < 50; i++) {
                int64_t want = 0;
                for (uint64_t px = 0; px < PIXELS; px++)
                    want += (int64_t)w[px] * (int64_t)dense_at(d, 5 + i, px);
                wrong += out[i] != want;
            }
            CHECK_EQ_U64(wrong, 0);
        }

        /* Partial results merge by addition: pixel sums of two partitions
         * of the scans add up to those of the whole. */
        if (!is_float) {
            static uint64_t whole[PIXELS], parts[PIXELS];
            memset(whole, 0, sizeof whole);
            memset(parts, 0, sizeof parts);
            CHECK_OK(qem_products_pixel_sums(p, 0, SCANS, whole, sizeof whole, &e), &e);
            CHECK_OK(qem_products_pixel_sums(p, 0, 41, parts, sizeof parts, &e), &e);
            CHECK_OK(qem_products_pixel_sums(p, 41, SCANS - 41, parts, sizeof parts, &e), &e);
            CHECK(memcmp(whole, parts, sizeof whole) == 0);
            wrong = 0;
            for (uint64_t px = 0; px < PIXELS; px++) {
                double want = 0;
                for (uint64_t s = 0; s < SCANS; s++)
                    want += dense_at(d, s, px);
                wrong += whole[px] != (uint64_t)want;
            }
            CHECK_EQ_U64(wrong, 0);
        }

        /* Mean pattern: exact total / N in float64, rounded once. */
        CHECK_OK(qem_products_mean(p, &im, &e), &e);
        wrong = 0;
        for (uint64_t px = 0; px < PIXELS; px++) {
            double total = 0;
            for (uint64_t s = 0; s < SCANS; s++)
                total += dense_at(d, s, px);
            const float got = ((float *)im.data)[px];
            wrong += is_float ? !close_enough(got, total / SCANS) : got != (float)(total / SCANS);
        }
        CHECK_EQ_U64(wrong, 0);
        qem_image_free(&im);

        /* One pattern, invalid pixels 0. */
        CHECK_OK(qem_products_frame(p, 37, &im, &e), &e);
        wrong = 0;
        for (uint64_t px = 0; px < PIXELS; px++) {
            const double want = dense_at(d, 37, px);
            wrong += is_float ? !close_enough(((float *)im.data)[px], want)
                              : int_at(&im, px) != (int64_t)want;
        }
        CHECK_EQ_U64(wrong, 0);
        qem_image_free(&im);

        /* Region rows [1, 4) x columns [3, 11): sum, mean, max. */
        for (int r = 0; r < 3; r++) {
            CHECK_OK(qem_products_region(p, 1, 4, 3, 11, (qem_reduce)r, &im, &e), &e);
            wrong = 0;
            for (uint64_t px = 0; px < PIXELS; px++) {
                double sum = 0, max = -INFINITY;
                for (uint64_t row = 1; row < 4; row++)
                    for (uint64_t col = 3; col < 11; col++) {
                        const double v = dense_at(d, row * SC + col, px);
                        sum += v;
                        max = v > max ? v : max;
                    }
                const double want = r == QEM_REDUCE_SUM ? sum : r == QEM_REDUCE_MEAN ? sum / 24 : max;
                if (is_float || r == QEM_REDUCE_MEAN)
                    wrong += r == QEM_REDUCE_MEAN && !is_float
                                 ? ((float *)im.data)[px] != (float)want
                                 : !close_enough(((float *)im.data)[px], want);
                else
                    wrong += int_at(&im, px) != (int64_t)want;
            }
            CHECK_EQ_U64(wrong, 0);
            qem_image_free(&im);
        }
        CHECK_STATUS(qem_products_region(p, 2, 2, 0, 1, QEM_REDUCE_SUM, &im, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        CHECK_STATUS(qem_products_region(p, 0, SR + 1, 0, 1, QEM_REDUCE_SUM, &im, &e),
                     QEM_E_INVALID_ARGUMENT, &e);

        /* Centre of mass, absolute coordinates; mean-subtracted. */
        CHECK_OK(qem_products_com(p, NULL, 0, &im, &e), &e);
        CHECK(im.ndim == 3 && im.shape[2] == 2);
        wrong = 0;
        double mean_r = 0, mean_c = 0;
        uint64_t used = 0;
        float want_com[SCANS][2];
        for (uint64_t s = 0; s < SCANS; s++) {
            double t = 0, mr = 0, mc = 0;
            for (uint64_t px = 0; px < PIXELS; px++) {
                const double v = dense_at(d, s, px);
                t += v;
                mr += v * (double)(px / DC);
                mc += v * (double)(px % DC);
            }
            want_com[s][0] = t != 0 ? (float)(mr / t) : NAN;
            want_com[s][1] = t != 0 ? (float)(mc / t) : NAN;
            const float *got = (float *)im.data + 2 * s;
            if (is_float)
                wrong += !close_enough(got[0], want_com[s][0]) || !close_enough(got[1], want_com[s][1]);
            else
                wrong += (isnan(want_com[s][0]) ? !isnan(got[0]) : got[0] != want_com[s][0]) ||
                         (isnan(want_com[s][1]) ? !isnan(got[1]) : got[1] != want_com[s][1]);
            if (!isnan(want_com[s][0])) {
                mean_r += want_com[s][0];
                mean_c += want_com[s][1];
                used++;
            }
        }
        CHECK_EQ_U64(wrong, 0);
        qem_image_free(&im);
        CHECK_OK(qem_products_com(p, NULL, 1, &im, &e), &e);
        wrong = 0;
        for (uint64_t s = 0; s < SCANS; s++) {
            const float *got = (float *)im.data + 2 * s;
            const double wr = want_com[s][0] - (float)(mean_r / (double)used);
            wrong += !isnan(want_com[s][0]) && !close_enough(got[0], wr);
        }
        CHECK_EQ_U64(wrong, 0);
        qem_image_free(&im);

        /* DPC runs end to end and counts its FFTs. */
        qem_dpc_result dpc = {.struct_size = sizeof dpc};
        CHECK_OK(qem_products_dpc(p, NULL, NAN, &dpc, &e), &e);
        CHECK(dpc.ffts > 0 && dpc.phase.shape[0] == SR && dpc.phase.shape[1] == SC);
        qem_dpc_result_free(&dpc);

        qem_products_close(p);
        qem_container_close(src);
    }
}

/* Named masks: the boundary circle belongs to BF, ADF and DF alike;
 * invalid pixels never appear; a mask .npy must hold only 0 and 1. */
static void check_masks(const char *path)
{
    qem_error e = {0};
    qem_products *p = NULL;
    qem_container *src = open_source(path, &p, QEM_PATH_FAST);
    if (!p)
        return;
    qem_detector_request g;
    qem_detector_request_init(&g);
    g.center_row = 20;
    g.center_column = 17;
    g.radius = 5; /* (20, 22) and (25, 17) lie exactly at r */
    uint8_t bf[PIXELS], adf[PIXELS], df[PIXELS], abf[PIXELS];
    CHECK_OK(qem_products_detector_mask(p, &g, 0, bf, sizeof bf, &e), &e);
    g.detector = QEM_DETECTOR_ADF;
    CHECK_OK(qem_products_detector_mask(p, &g, 0, adf, sizeof adf, &e), &e);
    g.detector = QEM_DETECTOR_DF;
    CHECK_OK(qem_products_detector_mask(p, &g, 0, df, sizeof df, &e), &e);
    g.detector = QEM_DETECTOR_ABF;
    CHECK_OK(qem_products_detector_mask(p, &g, 0, abf, sizeof abf, &e), &e);
    const uint64_t edge = 20 * DC + 22, edge2 = 25 * DC + 17;
    CHECK(bf[edge] && adf[edge] && df[edge] && abf[edge]);
    CHECK(bf[edge2] && adf[edge2] && df[edge2]);
    CHECK(bf[20 * DC + 17] && !adf[20 * DC + 17] && !abf[20 * DC + 17]);
    CHECK(!bf[20 * DC + 23] && adf[20 * DC + 23] && df[20 * DC + 23]);
    int bad = 0;
    uint64_t in_bf = 0;
    for (uint64_t px = 0; px < PIXELS; px++) {
        const double dr = (double)(px / DC) - 20, dc = (double)(px % DC) - 17;
        const int want = dr * dr + dc * dc <= 25 && valid[px];
        bad += bf[px] != want;
        bad += !valid[px] && (bf[px] || adf[px] || df[px] || abf[px]);
        in_bf += bf[px];
    }
    CHECK_EQ_U64(bad, 0);
    CHECK(in_bf > 60);
    /* mrad needs a semi-angle. */
    g.detector = QEM_DETECTOR_BF;
    g.unit_mrad = 1;
    CHECK_STATUS(qem_products_detector_mask(p, &g, 10, bf, sizeof bf, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, "semi-angle") != NULL);
    g.semiangle_mrad = 20; /* 10 mrad with r = 10 px at 20 mrad: 5 px */
    g.radius = 10;
    CHECK_OK(qem_products_detector_mask(p, &g, 10, bf, sizeof bf, &e), &e);
    CHECK(bf[edge] && !bf[20 * DC + 23]);
    g.unit_mrad = 0;
    g.radius = -1;
    CHECK_STATUS(qem_products_detector_mask(p, &g, 0, bf, sizeof bf, &e), QEM_E_INVALID_ARGUMENT, &e);
    /* .npy masks: 0/1 only, shape checked, invalid cleared. */
    uint8_t m[PIXELS];
    memset(m, 1, sizeof m);
    const uint64_t shape2[2] = {DR, DC};
    qem_npy_writer *w = NULL;
    CHECK_OK(qem_npy_writer_create(test_path("ones.npy"), QEM_DTYPE_UINT8, 2, shape2, &w, &e), &e);
    CHECK_OK(qem_npy_writer_append(w, m, PIXELS, &e), &e);
    CHECK_OK(qem_npy_writer_finish(w, &e), &e);
    qem_npy_writer_free(w);
    uint8_t got[PIXELS];
    CHECK_OK(qem_products_mask_from_npy(p, test_path("ones.npy"), got, sizeof got, &e), &e);
    CHECK(memcmp(got, valid, PIXELS) == 0);
    m[3] = 2;
    CHECK_OK(qem_npy_writer_create(test_path("twos.npy"), QEM_DTYPE_UINT8, 2, shape2, &w, &e), &e);
    CHECK_OK(qem_npy_writer_append(w, m, PIXELS, &e), &e);
    CHECK_OK(qem_npy_writer_finish(w, &e), &e);
    qem_npy_writer_free(w);
    CHECK_STATUS(qem_products_mask_from_npy(p, test_path("twos.npy"), got, sizeof got, &e), QEM_E_NPY, &e);
    CHECK(strstr(e.message, "only 0 and 1") != NULL);
    qem_products_close(p);
    qem_container_close(src);
}

static int cancel_now(void *user, uint64_t done, uint64_t total)
{
    (void)done;
    (void)total;
    return *(int *)user;
}

/* Signed-delta updates equal full recomputation after 100 random moves;
 * a series changes together or not at all. */
static void check_sessions(const char *qem_path, const char *pack_path)
{
    qem_error e = {0};
    qem_products *a = NULL, *b = NULL, *dup = NULL;
    qem_container *sa = open_source(qem_path, &a, QEM_PATH_FAST);
    qem_container *sb = open_source(pack_path, &b, QEM_PATH_FAST);
    qem_container *sd = open_source(qem_path, &dup, QEM_PATH_FAST);
    if (!a || !b || !dup)
        goto out;
    qem_detector_session *s = NULL;
    qem_products *same[2] = {a, dup};
    CHECK_STATUS(qem_detector_session_create(same, 2, &s, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, "same file") != NULL);
    {
        /* Another detector shape cannot share the mask. */
        qem_error e2 = {0};
        const uint64_t shape[4] = {2, 2, 8, 8};
        uint16_t small[4 * 64] = {0};
        qem_writer *w = NULL;
        CHECK_OK(qem_writer_create(test_path("small.qem"), QEM_DTYPE_UINT16, shape, NULL, &w, &e2),
                 &e2);
        CHECK_OK(qem_writer_append(w, small, 4, &e2), &e2);
        CHECK_OK(qem_writer_finish(w, &e2), &e2);
        qem_writer_free(w);
        qem_products *other = NULL;
        qem_container *so = open_source(test_path("small.qem"), &other, QEM_PATH_FAST);
        qem_products *mixed[2] = {a, other};
        if (other) {
            CHECK_STATUS(qem_detector_session_create(mixed, 2, &s, &e), QEM_E_INVALID_ARGUMENT,
                         &e);
            CHECK(strstr(e.message, "8 x 8 detector") != NULL);
        }
        qem_products_close(other);
        qem_container_close(so);
    }
    /* A pack and a .qem of one detector shape make a series. */
    qem_products *series[2] = {a, b};
    CHECK_OK(qem_detector_session_create(series, 2, &s, &e), &e);
    qem_detector_session_free(s);

    CHECK_OK(qem_detector_session_create(&a, 1, &s, &e), &e);
    qem_session_stats st = {.struct_size = sizeof st};
    qem_detector_session_stats(s, &st, NULL);
    CHECK_EQ_U64(st.sources, 1);
    /* No image before a mask; no source 1 of one. */
    const qem_image *held = &(qem_image){0};
    CHECK_STATUS(qem_detector_session_image_view(s, 0, &held, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(held == NULL);
    CHECK_STATUS(qem_detector_session_image_view(s, 0, NULL, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(st.resident_bytes > 0);
    uint64_t seed = 5;
    qem_detector_request g;
    qem_detector_request_init(&g);
    int wrong = 0;
    for (int move = 0; move <= 100; move++) {
        g.detector = move % 3 == 0 ? QEM_DETECTOR_BF : QEM_DETECTOR_ANNULUS;
        g.center_row = 5 + (double)(test_rand(&seed) % 300) / 10;
        g.center_column = 5 + (double)(test_rand(&seed) % 260) / 10;
        g.radius = 2 + (double)(test_rand(&seed) % 120) / 10;
        g.inner = (double)(test_rand(&seed) % 60) / 10;
        g.outer = g.inner + 1 + (double)(test_rand(&seed) % 100) / 10;
        uint8_t mask[PIXELS];
        CHECK_OK(qem_products_detector_mask(a, &g, 0, mask, sizeof mask, &e), &e);
        CHECK_OK(qem_detector_session_set_mask(s, mask, &e), &e);
        qem_detector_session_stats(s, &st, NULL);
        CHECK(st.ffts == 0 && st.full_recomputation == (move == 0));
        qem_image got, want;
        CHECK_OK(qem_detector_session_image(s, 0, &got, &e), &e);
        CHECK_OK(qem_products_virtual(a, mask, &want, &e), &e);
        wrong += got.dtype != want.dtype || memcmp(got.data, want.data, SCANS * 4) != 0;
        /* The image the session holds is the copy's. */
        CHECK_OK(qem_detector_session_image_view(s, 0, &held, &e), &e);
        wrong += !held || held->dtype != got.dtype || held->ndim != got.ndim ||
                 memcmp(held->shape, got.shape, sizeof got.shape) != 0 ||
                 memcmp(held->data, got.data, SCANS * 4) != 0;
        CHECK_STATUS(qem_detector_session_image_view(s, 1, &held, &e), QEM_E_INVALID_ARGUMENT, &e);
        qem_image_free(&got);
        qem_image_free(&want);
    }
    CHECK_EQ_U64(wrong, 0);
    qem_detector_session_free(s);

    /* A series of two: a failure in the second leaves both images. */
    qem_products *pair[2] = {a, NULL};
    qem_container *sc = NULL;
    qem_products *c = NULL;
    int cancel = 0;
    {
        qem_container_options so;
        qem_container_options_init(&so);
        CHECK_OK(qem_container_open(test_path("u8.qem"), &so, &sc, &e), &e);
        qem_products_options o;
        qem_products_options_init(&o);
        o.progress = cancel_now;
        o.progress_user = &cancel;
        if (sc)
            CHECK_OK(qem_products_open(sc, &o, &c, &e), &e);
    }
    pair[1] = c;
    if (c) {
        CHECK_OK(qem_detector_session_create(pair, 2, &s, &e), &e);
        uint8_t m1[PIXELS], m2[PIXELS];
        g.detector = QEM_DETECTOR_BF;
        g.center_row = 20;
        g.center_column = 18;
        g.radius = 8;
        CHECK_OK(qem_products_detector_mask(a, &g, 0, m1, sizeof m1, &e), &e);
        g.radius = 11;
        CHECK_OK(qem_products_detector_mask(a, &g, 0, m2, sizeof m2, &e), &e);
        CHECK_OK(qem_detector_session_set_mask(s, m1, &e), &e);
        qem_image before0, before1, after0, after1;
        CHECK_OK(qem_detector_session_image(s, 0, &before0, &e), &e);
        CHECK_OK(qem_detector_session_image(s, 1, &before1, &e), &e);
        cancel = 1;
        CHECK_STATUS(qem_detector_session_set_mask(s, m2, &e), QEM_E_CANCELLED, &e);
        CHECK_OK(qem_detector_session_image(s, 0, &after0, &e), &e);
        CHECK_OK(qem_detector_session_image(s, 1, &after1, &e), &e);
        CHECK(memcmp(before0.data, after0.data, SCANS * 4) == 0);
        CHECK(memcmp(before1.data, after1.data, SCANS * 4) == 0);
        qem_detector_session_stats(s, &st, NULL);
        CHECK_EQ_U64(st.sources, 2);
        qem_image_free(&before0);
        qem_image_free(&before1);
        qem_image_free(&after0);
        qem_image_free(&after1);
        cancel = 0;
        CHECK_OK(qem_detector_session_set_mask(s, m2, &e), &e);
        qem_detector_session_free(s);
    }
    qem_products_close(c);
    qem_container_close(sc);
out:
    qem_products_close(a);
    qem_products_close(b);
    qem_products_close(dup);
    qem_container_close(sa);
    qem_container_close(sb);
    qem_container_close(sd);
}

/* Partitioned products merged equal the whole-scan ones: virtual and CoM
 * bit for bit (per-scan values) on every kind of data; pattern sums and
 * maxima merged by addition and max give region and mean exactly for
 * counts, and within one float32 rounding for float data. */
static void check_parts(const char *path)
{
    qem_products *p = NULL;
    qem_container *src = open_source(path, &p, QEM_PATH_FAST);
    if (!p) {
        qem_container_close(src);
        return;
    }
    qem_container_info info = {.struct_size = sizeof info};
    qem_container_get_info(src, &info, NULL);
    const uint64_t S = info.scans, P = info.pixels;
    uint8_t *mask = malloc((size_t)P);
    for (uint64_t px = 0; px < P; px++)
        mask[px] = px % 3 != 1;
    qem_error e = {0};
    qem_image whole_v, whole_c, mean, max_whole;
    CHECK_OK(qem_products_virtual(p, mask, &whole_v, &e), &e);
    CHECK_OK(qem_products_com(p, mask, 0, &whole_c, &e), &e);
    CHECK_OK(qem_products_mean(p, &mean, &e), &e);
    CHECK_OK(qem_products_region(p, 0, info.shape[0], 0, info.shape[1], QEM_REDUCE_MAX,
                                 &max_whole, &e),
             &e);
    const uint64_t bounds[4] = {0, 7, S / 2 + 3, S};
    const size_t vitem = qem_dtype_size(whole_v.dtype);
    double *total = calloc((size_t)P, sizeof *total);
    uint64_t *itotal = calloc((size_t)P, sizeof *itotal);
    double *fmax = malloc((size_t)P * sizeof *fmax);
    int virt_same = 1, com_same = 1;
    for (int k = 0; k < 3; k++) {
        const uint64_t first = bounds[k], count = bounds[k + 1] - bounds[k];
        qem_image v, c, sum, mx;
        CHECK_OK(qem_products_virtual_part(p, mask, first, count, &v, &e), &e);
        CHECK_OK(qem_products_com_part(p, mask, first, count, &c, &e), &e);
        CHECK_OK(qem_products_patterns_part(p, first, count, &sum, &mx, &e), &e);
        CHECK(v.dtype == whole_v.dtype && v.shape[0] == 1 && v.shape[1] == count);
        virt_same &= v.data && !memcmp(v.data, (uint8_t *)whole_v.data + first * vitem,
                                       (size_t)(count * vitem));
        com_same &= c.data && !memcmp(c.data, (float *)whole_c.data + 2 * first,
                                      (size_t)(count * 8));
        for (uint64_t px = 0; sum.data && mx.data && px < P; px++) {
            if (sum.dtype == QEM_DTYPE_UINT64) {
                itotal[px] += ((uint64_t *)sum.data)[px];
                const double m = (double)((uint64_t *)mx.data)[px];
                fmax[px] = k == 0 || m > fmax[px] ? m : fmax[px];
            } else {
                total[px] += ((double *)sum.data)[2 * px] + ((double *)sum.data)[2 * px + 1];
                const double m = ((float *)mx.data)[px];
                fmax[px] = k == 0 || m > fmax[px] ? m : fmax[px];
            }
        }
        qem_image_free(&v);
        qem_image_free(&c);
        qem_image_free(&sum);
        qem_image_free(&mx);
    }
    CHECK(virt_same);
    CHECK(com_same);
    int mean_ok = 1, max_ok = 1;
    for (uint64_t px = 0; px < P; px++) {
        const float got = mean.dtype == QEM_DTYPE_FLOAT32 && info.working_dtype != QEM_DTYPE_FLOAT32 &&
                                  itotal[px]
                              ? (float)((double)itotal[px] / (double)S)
                              : (float)((total[px] + (double)itotal[px]) / (double)S);
        const float want = ((float *)mean.data)[px];
        mean_ok &= info.working_dtype == QEM_DTYPE_FLOAT32
                       ? fabsf(got - want) <= 1e-6f * fabsf(want) + 1e-30f
                       : got == want;
        const double wmax = max_whole.dtype == QEM_DTYPE_UINT64
                                ? (double)((uint64_t *)max_whole.data)[px]
                                : (double)((float *)max_whole.data)[px];
        max_ok &= fmax[px] == wmax;
    }
    CHECK(mean_ok);
    CHECK(max_ok);
    /* Out of range. */
    qem_image x;
    CHECK_STATUS(qem_products_virtual_part(p, mask, S - 1, 2, &x, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK_STATUS(qem_products_patterns_part(p, 0, 0, &x, NULL, &e), QEM_E_INVALID_ARGUMENT, &e);
    free(total);
    free(itotal);
    free(fmax);
    free(mask);
    qem_image_free(&whole_v);
    qem_image_free(&whole_c);
    qem_image_free(&mean);
    qem_image_free(&max_whole);
    qem_products_close(p);
    qem_container_close(src);
}

/* A session over `path` on the machine's threads (OMP_NUM_THREADS=1 under
 * TSan, which cannot see libgomp's barriers) against
 * qem_products_virtual, mask after mask (each mask pixels bytes); the
 * number of images that differ. */
static int session_wrong(const char *path, const uint8_t *const *masks, int count,
                         qem_dtype *dtypes)
{
    qem_error e = {0};
    qem_container *src = NULL;
    qem_products *p = NULL;
    qem_detector_session *s = NULL;
    qem_products_options o;
    qem_products_options_init(&o);
    int wrong = 0;
    CHECK_OK(qem_container_open(path, NULL, &src, &e), &e);
    if (src)
        CHECK_OK(qem_products_open(src, &o, &p, &e), &e);
    if (p)
        CHECK_OK(qem_detector_session_create(&p, 1, &s, &e), &e);
    for (int k = 0; s && k < count; k++) {
        qem_image want = {0};
        const qem_image *got = NULL;
        CHECK_OK(qem_detector_session_set_mask(s, masks[k], &e), &e);
        CHECK_OK(qem_detector_session_image_view(s, 0, &got, &e), &e);
        CHECK_OK(qem_products_virtual(p, masks[k], &want, &e), &e);
        const uint64_t n = want.shape[0] * want.shape[1];
        wrong += !got || !want.data || got->dtype != want.dtype ||
                 memcmp(got->data, want.data, (size_t)(n * qem_dtype_size(want.dtype))) != 0;
        dtypes[k] = got ? got->dtype : QEM_DTYPE_UINT8;
        qem_image_free(&want);
    }
    qem_detector_session_free(s);
    qem_products_close(p);
    qem_container_close(src);
    return wrong;
}

/* A session's images at the sizes where each move's pass over the scans
 * runs on the source's threads (65536 scans or more), and where the bound makes
 * them uint64 (a mask of more than 65537 uint16 pixels), moving between
 * the two widths: each equals qem_products_virtual. */
static void check_session_passes(void)
{
    const uint64_t many[4] = {256, 260, 4, 4}, wide[4] = {2, 3, 260, 260};
    uint8_t small[4][16];
    for (int k = 0; k < 4; k++)
        for (int px = 0; px < 16; px++)
            small[k][px] = (uint8_t)((px * 7 + k * 3) % 5 < 2 + k % 2);
    const uint8_t *moves[5] = {small[0], small[1], small[2], small[3], small[1]};
    qem_dtype dtypes[6];
    CHECK(write_count_sources(many, 11, 5003, 0, test_path("session-many.npy"),
                              test_path("session-many.qem"), NULL));
    CHECK_EQ_U64(session_wrong(test_path("session-many.qem"), moves, 5, dtypes), 0);
    CHECK_EQ_U64(dtypes[4], QEM_DTYPE_UINT32);

    const uint64_t P = 260 * 260;
    uint8_t *all = malloc(P), *some = calloc(P, 1);
    if (!all || !some) {
        CHECK(0);
        free(all);
        free(some);
        return;
    }
    memset(all, 1, P);
    all[P / 2] = 0;
    for (uint64_t px = 0; px < P; px += 67)
        some[px] = 1;
    const uint8_t *widths[4] = {all, some, all, some};
    CHECK(write_count_sources(wide, 12, 65535, 0, test_path("session-wide.npy"),
                              test_path("session-wide.qem"), NULL));
    CHECK_EQ_U64(session_wrong(test_path("session-wide.qem"), widths, 4, dtypes), 0);
    CHECK(dtypes[0] == QEM_DTYPE_UINT64 && dtypes[1] == QEM_DTYPE_UINT32 &&
          dtypes[2] == QEM_DTYPE_UINT64);
    free(all);
    free(some);

    /* Scaled codes: the session keeps exact code sums and adds each
     * move's changes to them. */
    uint8_t coded[6][64];
    const uint8_t *coded_moves[6];
    for (int k = 0; k < 6; k++) {
        for (int px = 0; px < 64; px++)
            coded[k][px] = (uint8_t)((px * 5 + k * 11) % 7 < 3 + k % 3);
        coded_moves[k] = coded[k];
    }
    CHECK_EQ_U64(session_wrong(fixture_path("qem/scaled_u16_regions.qem"), coded_moves, 6, dtypes),
                 0);
    CHECK_EQ_U64(dtypes[5], QEM_DTYPE_FLOAT32);
}

static int write_qem(const char *path, qem_dtype dtype, const void *values, const uint8_t *v,
                     const float *dark, uint32_t chunk)
{
    qem_error e = {0};
    qem_save_options o;
    qem_save_options_init(&o);
    o.chunk_scans = chunk;
    o.valid = v;
    o.dark = dark;
    const uint64_t shape[4] = {SR, SC, DR, DC};
    qem_writer *w = NULL;
    int ok = qem_writer_create(path, dtype, shape, &o, &w, &e) == QEM_OK &&
             qem_writer_append(w, values, SCANS, &e) == QEM_OK &&
             qem_writer_finish(w, &e) == QEM_OK;
    if (!ok)
        fprintf(stderr, "write_qem %s: %s\n", path, e.message);
    qem_writer_free(w);
    return ok;
}

int main(void)
{
    uint64_t seed = 2026;
    for (uint64_t px = 0; px < PIXELS; px++)
        valid[px] = test_rand(&seed) % 17 != 0;
    for (uint64_t k = 0; k < SCANS * PIXELS; k++) {
        const uint64_t px = k % PIXELS, r = px / DC, c = px % DC;
        const double d2 = ((double)r - 20) * ((double)r - 20) + ((double)c - 18) * ((double)c - 18);
        counts[k] = (uint16_t)(d2 < 64 ? 150 + test_rand(&seed) % 100 : test_rand(&seed) % 4);
    }
    counts[5 * PIXELS + 7] = 65535; /* one saturated count */
    static uint8_t counts8[SCANS * PIXELS];
    for (uint64_t k = 0; k < SCANS * PIXELS; k++)
        counts8[k] = (uint8_t)(counts[k] > 255 ? 255 : counts[k]);
    static float floats[SCANS * PIXELS];
    float dark_plane[PIXELS];
    for (uint64_t k = 0; k < SCANS * PIXELS; k++)
        floats[k] = (float)counts[k] * 0.37f + (float)(test_rand(&seed) % 1000) / 997.0f - 0.5f;
    for (uint64_t px = 0; px < PIXELS; px++)
        dark_plane[px] = (float)(test_rand(&seed) % 100) / 50.0f;
    uint8_t all_valid[PIXELS];
    memset(all_valid, 1, sizeof all_valid);

    CHECK(write_qem(test_path("u16.qem"), QEM_DTYPE_UINT16, counts, valid, NULL, 17));
    CHECK(write_qem(test_path("u8.qem"), QEM_DTYPE_UINT8, counts8, valid, NULL, 40));
    CHECK(write_qem(test_path("f32.qem"), QEM_DTYPE_FLOAT32, floats, NULL, dark_plane, 0));
    const dense d16 = {QEM_DTYPE_UINT16, counts, valid, NULL};
    const dense d8 = {QEM_DTYPE_UINT8, counts8, valid, NULL};
    const dense df = {QEM_DTYPE_FLOAT32, floats, all_valid, dark_plane};
    check_products(test_path("u16.qem"), &d16);
    check_products(test_path("u8.qem"), &d8);
    check_products(test_path("f32.qem"), &df);

    /* Packs of the same counts, with the invalid pixels excluded. */
    uint32_t excluded[PIXELS];
    uint64_t n_excluded = 0;
    for (uint64_t px = 0; px < PIXELS; px++)
        if (!valid[px])
            excluded[n_excluded++] = (uint32_t)px;
    pack_spec v1 = {QEM_PACK_UINT16_LZ4, {SR, SC, DR, DC}, 32, counts, excluded, n_excluded, 1,
                    QEM_DTYPE_UINT16, 0, 0};
    CHECK(pack_build(test_path("u16.pack"), &v1, NULL));
    check_products(test_path("u16.pack"), &d16);
    /* uint8 profile: excluded pixels must be constant, admitted <= 255. */
    static uint16_t for_v3[SCANS * PIXELS];
    for (uint64_t k = 0; k < SCANS * PIXELS; k++)
        for_v3[k] = valid[k % PIXELS] ? counts8[k] : 4095;
    pack_spec v3 = {QEM_PACK_UINT8_BITPACKED, {SR, SC, DR, DC}, 32, for_v3, excluded, n_excluded,
                    0, QEM_DTYPE_UINT8, 1, 0};
    CHECK(pack_build(test_path("u8.pack"), &v3, NULL));
    check_products(test_path("u8.pack"), &d8);

    check_parts(test_path("u16.qem"));
    check_parts(test_path("u8.qem"));
    check_parts(test_path("f32.qem"));
    check_parts(test_path("u16.pack"));
    check_parts(test_path("u8.pack"));
    check_parts(fixture_path("qem/scaled_u16_regions.qem"));
    check_masks(test_path("u16.qem"));
    check_sessions(test_path("u16.qem"), test_path("u8.pack"));
    check_session_passes();
    return test_finish("unit_products");
}
