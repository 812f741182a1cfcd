/* Detector calibration: the half-maximum estimate on synthetic bright-field
 * disks, and calibrated copies of the upstream pack fixtures. */
#include <jansson.h>
#include <math.h>
#include <sys/stat.h>

#include "common/sha256.h"
#include "pack/calibrated_copy.h"
#include "pack/encode.h"
#include "common/calibration_estimate.h"
#include "test_util.h"

#define BLOCK 65536u

/* --- Part A: the estimate ----------------------------------------------------- */

static double uniform(uint64_t *state)
{
    return (double)(test_rand(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* A uniform disk of `level` over a background `bg` + noise in [0, noise).
 * Edge pixels get their 8x8-subsampled area fraction, as a real disk would. */
static float *disk_pattern(uint64_t rows, uint64_t cols, double cr, double cc, double radius,
                           double level, double bg, double noise, uint64_t seed)
{
    float *m = malloc((size_t)(rows * cols) * sizeof *m);
    uint64_t state = seed;
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t c = 0; c < cols; c++) {
            int inside = 0;
            for (int i = 0; i < 8; i++)
                for (int j = 0; j < 8; j++) {
                    double dr = (double)r - 0.5 + (i + 0.5) / 8 - cr;
                    double dc = (double)c - 0.5 + (j + 0.5) / 8 - cc;
                    inside += dr * dr + dc * dc <= radius * radius;
                }
            m[r * cols + c] = (float)(bg + noise * uniform(&state) + level * inside / 64.0);
        }
    return m;
}

typedef struct disk_case {
    uint64_t rows, cols;
    double cr, cc, radius;
} disk_case;

static void check_estimate(const product_calibration *e, const disk_case *d)
{
    CHECK(fabs(e->center_row - d->cr) < 0.5);
    CHECK(fabs(e->center_col - d->cc) < 0.5);
    CHECK(fabs(e->radius - d->radius) < 0.5);
    if (fabs(e->center_row - d->cr) >= 0.5 || fabs(e->center_col - d->cc) >= 0.5 ||
        fabs(e->radius - d->radius) >= 0.5)
        fprintf(stderr, "  case %llux%llu (%g, %g) r %g: got (%g, %g) r %g\n",
                (unsigned long long)d->rows, (unsigned long long)d->cols, d->cr, d->cc, d->radius,
                e->center_row, e->center_col, e->radius);
}

static void test_estimate_disks(void)
{
    static const disk_case cases[] = {
        {96, 128, 40.3, 57.8, 5},    {96, 128, 40.3, 57.8, 12.5}, {96, 128, 47.6, 61.2, 30},
        {128, 128, 63.4, 61.7, 41},  {80, 200, 39.7, 120.2, 30}, /* nonsquare */
        {200, 72, 101.1, 35.45, 12.5},                          /* nonsquare, tall */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const disk_case *d = &cases[k];
        float *m = disk_pattern(d->rows, d->cols, d->cr, d->cc, d->radius, 1000, 3, 2, 17 + k);
        product_calibration e;
        qem_error err;
        CHECK_OK(qem_product_calibration_estimate(m, NULL, d->rows, d->cols, &e, &err), &err);
        check_estimate(&e, d);
        CHECK(e.maximum >= 1003 && e.maximum <= 1005);
        CHECK(e.pixels > 0);
        /* An all-valid mask means the same as none. */
        uint8_t *valid = malloc((size_t)(d->rows * d->cols));
        memset(valid, 1, (size_t)(d->rows * d->cols));
        product_calibration f;
        CHECK_OK(qem_product_calibration_estimate(m, valid, d->rows, d->cols, &f, &err), &err);
        CHECK(f.center_row == e.center_row && f.center_col == e.center_col &&
              f.radius == e.radius && f.pixels == e.pixels);
        free(valid);
        free(m);
    }
}

/* Hot pixels at huge values, marked invalid, must not set the maximum; a
 * NaN and an infinity marked valid are skipped as non-finite. */
static void test_estimate_hot_pixels(void)
{
    const disk_case d = {90, 110, 40.3, 57.8, 12.5};
    float *m = disk_pattern(d.rows, d.cols, d.cr, d.cc, d.radius, 500, 1, 1.5, 99);
    uint8_t *valid = malloc((size_t)(d.rows * d.cols));
    memset(valid, 1, (size_t)(d.rows * d.cols));
    static const uint64_t hot[][2] = {{3, 4}, {40, 58}, {85, 100}, {10, 90}, {60, 20}};
    for (size_t i = 0; i < 5; i++) {
        m[hot[i][0] * d.cols + hot[i][1]] = i % 2 ? 1e30f : 6.5e6f;
        valid[hot[i][0] * d.cols + hot[i][1]] = 0;
    }
    m[5 * d.cols + 5] = NAN;
    m[6 * d.cols + 7] = INFINITY;
    m[7 * d.cols + 9] = -INFINITY;
    product_calibration e;
    qem_error err;
    CHECK_OK(qem_product_calibration_estimate(m, valid, d.rows, d.cols, &e, &err), &err);
    check_estimate(&e, &d);
    CHECK(e.maximum < 510);
    /* Unmasked, isolated hot pixels are kept out by the 3x3 median guard. */
    product_calibration unmasked;
    CHECK_OK(qem_product_calibration_estimate(m, NULL, d.rows, d.cols, &unmasked, &err), &err);
    check_estimate(&unmasked, &d);
    CHECK(unmasked.maximum < 510);
    free(valid);
    free(m);
}

static void test_estimate_refusals(void)
{
    enum { R = 6, C = 9 };
    float m[R * C];
    uint8_t valid[R * C];
    product_calibration e;
    qem_error err;
    for (int i = 0; i < R * C; i++)
        m[i] = (float)(i + 1);
    memset(valid, 0, sizeof valid);
    CHECK_STATUS(qem_product_calibration_estimate(m, valid, R, C, &e, &err), QEM_E_INVALID_ARGUMENT,
                 &err);
    CHECK(strstr(err.message, "no valid finite pixel") != NULL);
    memset(m, 0, sizeof m);
    CHECK_STATUS(qem_product_calibration_estimate(m, NULL, R, C, &e, &err), QEM_E_INVALID_ARGUMENT,
                 &err);
    CHECK(strstr(err.message, "not positive") != NULL);
    for (int i = 0; i < R * C; i++)
        m[i] = -1.0f - (float)i;
    CHECK_STATUS(qem_product_calibration_estimate(m, NULL, R, C, &e, &err), QEM_E_INVALID_ARGUMENT,
                 &err);
    for (int i = 0; i < R * C; i++)
        m[i] = NAN;
    CHECK_STATUS(qem_product_calibration_estimate(m, NULL, R, C, &e, &err), QEM_E_INVALID_ARGUMENT,
                 &err);
    CHECK(strstr(err.message, "no valid finite pixel") != NULL);
    /* The only finite pixel is invalid. */
    m[7] = 5;
    memset(valid, 1, sizeof valid);
    valid[7] = 0;
    CHECK_STATUS(qem_product_calibration_estimate(m, valid, R, C, &e, &err), QEM_E_INVALID_ARGUMENT,
                 &err);
    valid[7] = 1;
    CHECK_OK(qem_product_calibration_estimate(m, valid, R, C, &e, &err), &err);
    CHECK(e.center_row == 0 && e.center_col == 7 && e.pixels == 1);
    CHECK_STATUS(qem_product_calibration_estimate(NULL, NULL, R, C, &e, &err),
                 QEM_E_INVALID_ARGUMENT, &err);
    CHECK_STATUS(qem_product_calibration_estimate(m, NULL, 0, C, &e, &err), QEM_E_INVALID_ARGUMENT,
                 &err);
    CHECK_STATUS(qem_product_calibration_estimate(m, NULL, R, C, NULL, &err),
                 QEM_E_INVALID_ARGUMENT, &err);
}

/* --- Part B: calibrated copies -------------------------------------------------- */

static const char *const fixtures[] = {
    "v1_u16_4x32_16x16",
    "v1_u16_excluded_retained", /* already carries a calibration */
    "v3_upstream_test_writer_notes_v3",
    "v3_upstream_test_writer_legacy_nonportable",
};

static int sha_of_file(const char *path, uint8_t digest[32])
{
    size_t n = 0;
    uint8_t *b = read_file(path, &n);
    if (!b)
        return 0;
    qem_sha256_oneshot(b, n, digest);
    free(b);
    return 1;
}

static json_t *manifest_of(const char *path)
{
    qem_pack *p = NULL;
    qem_error err;
    if (qem_pack_open(path, NULL, &p, &err) != QEM_OK)
        return NULL;
    size_t n = 0;
    const char *text = qem_pack_manifest_json(p, &n);
    json_t *m = json_loadb(text, n, 0, NULL);
    qem_pack_close(p);
    return m;
}

/* All scans of a loaded pack in `values`; NULL when the file refuses. */
static uint8_t *read_all(qem_pack *p, qem_values values, uint64_t *bytes)
{
    qem_pack_info info = {.struct_size = sizeof info};
    qem_pack_get_info(p, &info, NULL);
    *bytes = qem_pack_read_bound(p, values, info.scans);
    uint8_t *out = malloc((size_t)*bytes);
    qem_error err;
    if (qem_pack_read_scans(p, 0, info.scans, values, out, (size_t)*bytes, &err) != QEM_OK) {
        free(out);
        return NULL;
    }
    return out;
}

/* The copy opens, loads, carries `cal` and reads exactly like `orig`. */
static void check_copy(const char *orig, const char *copy, const pack_calibration_in *cal)
{
    qem_error err;
    qem_pack *a = NULL, *b = NULL;
    CHECK_OK(qem_pack_open(orig, NULL, &a, &err), &err);
    CHECK_OK(qem_pack_open(copy, NULL, &b, &err), &err);
    if (!a || !b) {
        qem_pack_close(a);
        qem_pack_close(b);
        return;
    }
    qem_detector_calibration c = {.struct_size = sizeof c};
    CHECK_OK(qem_pack_get_detector_calibration(b, &c, NULL), NULL);
    CHECK(c.center_row == cal->center_row && c.center_column == cal->center_col);
    CHECK(c.bright_field_radius == cal->radius);
    CHECK(strcmp(c.method, cal->method) == 0);
    CHECK(c.has_dpc == !!cal->has_dpc);
    if (cal->has_dpc)
        CHECK(c.dpc_rotation_degrees == cal->dpc_rotation_degrees &&
              c.dpc_component_order_exchanged == !!cal->dpc_component_order_exchanged);
    qem_pack_info ia = {.struct_size = sizeof ia};
    qem_pack_info ib = {.struct_size = sizeof ib};
    qem_pack_get_info(a, &ia, NULL);
    qem_pack_get_info(b, &ib, NULL);
    CHECK(ib.has_detector_calibration);
    CHECK(strcmp(ia.source_identity_sha256, ib.source_identity_sha256) == 0);
    /* The prepared values were written wherever the file can carry them
     * (every fixture here has its working identity and mask digest). */
    CHECK(ib.file_bytes >= ia.file_bytes);
    CHECK(ib.has_prepared_dpc_moments);
    CHECK(ib.has_prepared_detector_products); /* qem's member for uint16 */
    CHECK(ia.raw_access == ib.raw_access && ia.working_dtype == ib.working_dtype);
    CHECK_OK(qem_pack_load(a, NULL, &err), &err);
    CHECK_OK(qem_pack_load(b, NULL, &err), &err);
    for (int v = 0; v < 2; v++) {
        uint64_t na = 0, nb = 0;
        uint8_t *ra = read_all(a, (qem_values)v, &na);
        uint8_t *rb = read_all(b, (qem_values)v, &nb);
        CHECK((ra == NULL) == (rb == NULL));
        if (v == QEM_VALUES_WORKING)
            CHECK(ra != NULL);
        if (ra && rb)
            CHECK(na == nb && memcmp(ra, rb, (size_t)na) == 0);
        free(ra);
        free(rb);
    }
    qem_pack_close(a);
    qem_pack_close(b);

    /* The same index (every shard range where it was); a body that is not
     * HDF5 only gains bytes at its end; every other manifest key equal;
     * the calibration object holds exactly the specification's keys. */
    size_t sa = 0, sb = 0;
    uint8_t *fa = read_file(orig, &sa), *fb = read_file(copy, &sb);
    CHECK(fa && fb && sb >= sa && sa > BLOCK);
    if (fa && fb && sb >= sa && sa > BLOCK) {
        uint32_t ia_at, ia_n, ib_at, ib_n;
        memcpy(&ia_at, fa + 16, 4);
        memcpy(&ia_n, fa + 20, 4);
        memcpy(&ib_at, fb + 16, 4);
        memcpy(&ib_n, fb + 20, 4);
        CHECK(ia_n == ib_n && memcmp(fa + ia_at, fb + ib_at, ia_n) == 0);
        if (memcmp(fa + BLOCK, "\x89HDF\r\n\x1a\n", 8) != 0)
            CHECK(memcmp(fa + BLOCK, fb + BLOCK, sa - BLOCK) == 0);
    }
    free(fa);
    free(fb);
    json_t *ma = manifest_of(orig), *mb = manifest_of(copy);
    CHECK(ma && mb);
    if (ma && mb) {
        json_t *k = json_object_get(mb, "detector_calibration");
        CHECK(json_object_size(k) == (cal->has_dpc ? 7u : 5u));
        CHECK(json_is_string(json_object_get(k, "schema")) &&
              strcmp(json_string_value(json_object_get(k, "schema")),
                     "quantem.gpu.detector-calibration/v1") == 0);
        CHECK(json_is_string(json_object_get(k, "source_identity_sha256")) &&
              strcmp(json_string_value(json_object_get(k, "source_identity_sha256")),
                     ia.source_identity_sha256) == 0);
        CHECK(json_is_real(json_object_get(k, "bright_field_radius_px")));
        CHECK(json_array_size(json_object_get(k, "detector_center_px")) == 2);
        /* A uint16 pack without its working identity gains one, to which
         * the moments and products are bound. */
        if (!json_object_get(ma, "working_logical_sha256"))
            json_object_del(mb, "working_logical_sha256");
        static const char *const added[] = {"detector_calibration", "prepared_dpc_moments",
                                            "prepared_detector_products",
                                            "qem_prepared_detector_products"};
        for (size_t i = 0; i < 4; i++) {
            json_object_del(ma, added[i]);
            json_object_del(mb, added[i]);
        }
        CHECK(json_equal(ma, mb));
    }
    json_decref(ma);
    json_decref(mb);
}

/* h5py still reads a copy of a genuine HDF5 pack, user block and all. */
static void check_h5py(const char *path)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c 'import sys, h5py; f = h5py.File(sys.argv[1], \"r\"); "
             "assert f.userblock_size == 65536; f.visititems(lambda n, o: None)' '%s' >&2",
             path);
    CHECK(system(cmd) == 0);
}

static int is_hdf5(const char *path)
{
    return hdf5_after_block(path, BLOCK);
}

static void test_copy_fixtures(void)
{
    int have_h5py = system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") == 0;
    for (size_t k = 0; k < sizeof fixtures / sizeof fixtures[0]; k++) {
        char name[256], src[768], dest[768], again[768];
        snprintf(name, sizeof name, "pack/%s.h5", fixtures[k]);
        /* A writable copy, so "never modified" is a real check. */
        size_t n = 0;
        uint8_t *bytes = read_file(fixture_path(name), &n);
        CHECK(bytes != NULL);
        if (!bytes)
            continue;
        snprintf(src, sizeof src, "%s", test_path(fixtures[k]));
        CHECK(write_file(src, bytes, n));
        free(bytes);
        char stem[300];
        snprintf(stem, sizeof stem, "%s.cal", fixtures[k]);
        snprintf(dest, sizeof dest, "%s", test_path(stem));
        snprintf(stem, sizeof stem, "%s.cal2", fixtures[k]);
        snprintf(again, sizeof again, "%s", test_path(stem));

        qem_pack *p = NULL;
        qem_error err;
        CHECK_OK(qem_pack_open(src, NULL, &p, &err), &err);
        if (!p)
            continue;
        qem_pack_info info = {.struct_size = sizeof info};
        qem_pack_get_info(p, &info, NULL);
        qem_pack_close(p);
        const double rows = (double)info.shape[2], cols = (double)info.shape[3];

        uint8_t before[32], after[32];
        CHECK(sha_of_file(src, before));
        pack_calibration_in cal = {.center_row = rows * 0.4 + 0.1,
                                   .center_col = cols * 0.55,
                                   .radius = fmin(rows, cols) * 0.3 + 0.25,
                                   .method = PRODUCT_CALIBRATION_METHOD,
                                   .has_dpc = 1,
                                   .dpc_rotation_degrees = 176.98,
                                   .dpc_component_order_exchanged = 1};
        CHECK_OK(qem_pack_write_calibrated_copy(src, dest, &cal, NULL, &err), &err);
        CHECK(sha_of_file(src, after) && memcmp(before, after, 32) == 0);
        check_copy(src, dest, &cal);
        if (have_h5py && is_hdf5(src))
            check_h5py(dest);

        /* Copy a copy: the calibration is replaced, the DPC pair dropped. */
        pack_calibration_in cal2 = {.center_row = rows - 1,
                                    .center_col = 0,
                                    .radius = 1.0 / 3,
                                    .method = "manual: caf\xc3\xa9 \"quoted\"\n"};
        CHECK_OK(qem_pack_write_calibrated_copy(dest, again, &cal2, NULL, &err), &err);
        check_copy(src, again, &cal2);
        check_copy(dest, again, &cal2);
        if (have_h5py && is_hdf5(src))
            check_h5py(again);

        /* An existing destination is refused and left alone. */
        uint8_t kept[32], kept_after[32];
        CHECK(sha_of_file(again, kept));
        CHECK_STATUS(qem_pack_write_calibrated_copy(src, again, &cal, NULL, &err), QEM_E_EXISTS, &err);
        CHECK(sha_of_file(again, kept_after) && memcmp(kept, kept_after, 32) == 0);
        CHECK_STATUS(qem_pack_write_calibrated_copy(src, src, &cal, NULL, &err), QEM_E_EXISTS, &err);

        /* Out-of-range or non-finite values: refused, nothing created. */
        pack_calibration_in bad[12];
        for (int i = 0; i < 12; i++)
            bad[i] = cal;
        bad[0].center_row = rows;
        bad[1].center_col = cols;
        bad[2].center_row = -0.01;
        bad[3].center_col = -1;
        bad[4].radius = 0;
        bad[5].radius = -2;
        bad[6].radius = hypot(rows, cols) * 1.01;
        bad[7].center_row = NAN;
        bad[8].radius = INFINITY;
        bad[9].dpc_rotation_degrees = NAN;
        bad[10].method = " \t";
        bad[11].method = NULL;
        const char *never = test_path("never.h5");
        for (int i = 0; i < 12; i++) {
            CHECK_STATUS(qem_pack_write_calibrated_copy(src, never, &bad[i], NULL, &err),
                         QEM_E_INVALID_ARGUMENT, &err);
            CHECK(err.message[0] != '\0');
            CHECK(!file_exists(never));
        }
        CHECK(count_entries(test_dir(), ".qem-") == 0);
        CHECK(sha_of_file(src, after) && memcmp(before, after, 32) == 0);
    }
}

/* The copy's manifest is the original's with one member inserted, byte for
 * byte, in sorted position (the fixture has none to replace). */
static void test_manifest_splice(void)
{
    const char *src = fixture_path("pack/v1_u16_4x32_16x16.h5");
    char dest[768];
    snprintf(dest, sizeof dest, "%s", test_path("splice.h5"));
    pack_calibration_in cal = {.center_row = 7.5, .center_col = 8.25, .radius = 41.0 / 8,
                               .method = PRODUCT_CALIBRATION_METHOD};
    qem_error err;
    CHECK_OK(qem_pack_write_calibrated_copy(src, dest, &cal, NULL, &err), &err);
    qem_pack *a = NULL, *b = NULL;
    CHECK_OK(qem_pack_open(src, NULL, &a, &err), &err);
    CHECK_OK(qem_pack_open(dest, NULL, &b, &err), &err);
    if (!a || !b) {
        qem_pack_close(a);
        qem_pack_close(b);
        return;
    }
    size_t na = 0, nb = 0;
    const char *ta = qem_pack_manifest_json(a, &na), *tb0 = qem_pack_manifest_json(b, &nb);
    /* Less the members the prepared values add (their own test is
     * unit_pack_prepared), the calibration is the only change. */
    char *tb = NULL, *tb1 = NULL, *tb2 = NULL;
    const size_t nb_full = nb;
    CHECK_OK(qem_pack_manifest_splice(tb0, nb, "prepared_dpc_moments", NULL, &tb1, &nb, &err),
             &err);
    CHECK_OK(qem_pack_manifest_splice(tb1, nb, "qem_prepared_detector_products", NULL, &tb2, &nb,
                                      &err),
             &err);
    CHECK_OK(qem_pack_manifest_splice(tb2, nb, "working_logical_sha256", NULL, &tb, &nb, &err),
             &err);
    free(tb1);
    free(tb2);
    if (!tb) {
        qem_pack_close(a);
        qem_pack_close(b);
        return;
    }
    char hex[65];
    qem_pack_info info = {.struct_size = sizeof info};
    qem_pack_get_info(a, &info, NULL);
    memcpy(hex, info.source_identity_sha256, 65);
    char member[512];
    snprintf(member, sizeof member,
             "\"detector_calibration\":{\"bright_field_radius_px\":5.125,\"detector_center_px\":"
             "[7.5,8.25],\"method\":\"mean-diffraction-half-maximum\",\"schema\":\"quantem.gpu."
             "detector-calibration/v1\",\"source_identity_sha256\":\"%s\"},",
             hex);
    const char *at = strstr(tb, member);
    CHECK(at != NULL);
    if (at) {
        size_t off = (size_t)(at - tb), len = strlen(member);
        CHECK(nb == na + len);
        CHECK(memcmp(tb, ta, off) == 0 && memcmp(tb + off + len, ta + off, na - off) == 0);
        /* Sorted position: right after detector_bin. */
        CHECK(off >= 17 && memcmp(tb + off - 17, "\"detector_bin\":1,", 17) == 0);
    }
    /* The prelude's index offset is the next 8-byte boundary. */
    size_t n = 0;
    uint8_t *bytes = read_file(dest, &n);
    CHECK(bytes != NULL);
    if (bytes) {
        uint32_t json_bytes, index_at;
        memcpy(&json_bytes, bytes + 8, 4);
        memcpy(&index_at, bytes + 16, 4);
        CHECK(json_bytes == nb_full && index_at == ((24 + nb_full + 7) & ~(size_t)7));
    }
    free(bytes);
    free(tb);
    qem_pack_close(a);
    qem_pack_close(b);
}

/* A variant of a fixture whose manifest gains `extra` (a member text) and,
 * optionally, a stray nonzero byte in the zero fill. */
static int write_variant(const char *fixture, const char *extra, uint64_t stray,
                         const char *path)
{
    size_t n = 0;
    uint8_t *bytes = read_file(fixture_path(fixture), &n);
    if (!bytes)
        return 0;
    uint32_t json_bytes, index_at, index_bytes;
    memcpy(&json_bytes, bytes + 8, 4);
    memcpy(&index_at, bytes + 16, 4);
    memcpy(&index_bytes, bytes + 20, 4);
    size_t extra_bytes = strlen(extra);
    char *manifest = malloc(json_bytes + extra_bytes + 2);
    /* Insert at the end, before the closing brace. */
    memcpy(manifest, bytes + 24, json_bytes - 1);
    manifest[json_bytes - 1] = ',';
    memcpy(manifest + json_bytes, extra, extra_bytes);
    manifest[json_bytes + extra_bytes] = '}';
    uint8_t *block = NULL;
    qem_error err;
    int ok = qem_pack_user_block(manifest, json_bytes + extra_bytes + 1, bytes + index_at,
                                 index_bytes, BLOCK, &block, &err) == QEM_OK;
    if (ok) {
        memcpy(bytes, block, BLOCK);
        if (stray)
            bytes[stray] = 0x5a;
        ok = write_file(path, bytes, n);
    }
    free(block);
    free(manifest);
    free(bytes);
    return ok;
}

static void test_copy_refusals(void)
{
    qem_error err;
    pack_calibration_in cal = {.center_row = 1, .center_col = 1, .radius = 1,
                               .method = PRODUCT_CALIBRATION_METHOD};
    const char *never = test_path("refused.h5");

    /* A manifest that just fits its block cannot take the calibration. */
    size_t pad = BLOCK - 24 - 1503 - 168 - 100;
    char *extra = malloc(pad + 64);
    int len = snprintf(extra, pad + 64, "\"zz_padding\":\"");
    memset(extra + len, 'x', pad);
    strcpy(extra + len + pad, "\"");
    char full[768];
    snprintf(full, sizeof full, "%s", test_path("full.h5"));
    CHECK(write_variant("pack/v1_u16_4x32_16x16.h5", extra, 0, full));
    free(extra);
    qem_pack *p = NULL;
    CHECK_OK(qem_pack_open(full, NULL, &p, &err), &err);
    qem_pack_close(p);
    CHECK_STATUS(qem_pack_write_calibrated_copy(full, never, &cal, NULL, &err), QEM_E_LIMIT, &err);
    CHECK(!file_exists(never));

    /* A source whose prepared extension breaks a rule is refused as
     * opening refuses it. */
    char prepared[768];
    snprintf(prepared, sizeof prepared, "%s", test_path("prepared.h5"));
    CHECK(write_variant("pack/v1_u16_excluded_retained.h5",
                        "\"prepared_detector_products\":{\"schema\":\"quantem.gpu.prepared-"
                        "detector-products/v1\"}",
                        0, prepared));
    CHECK_STATUS(qem_pack_write_calibrated_copy(prepared, never, &cal, NULL, &err),
                 QEM_E_PACK_PREPARED, &err);
    CHECK(!file_exists(never));

    /* Unknown bytes in the user block's zero fill are not silently lost. */
    char stray[768];
    snprintf(stray, sizeof stray, "%s", test_path("stray.h5"));
    CHECK(write_variant("pack/v3_upstream_test_writer_notes_v3.h5", "\"note\":1", 60000, stray));
    CHECK_OK(qem_pack_open(stray, NULL, &p, &err), &err);
    qem_pack_close(p);
    CHECK_STATUS(qem_pack_write_calibrated_copy(stray, never, &cal, NULL, &err), QEM_E_UNSUPPORTED, &err);
    CHECK(!file_exists(never));

    /* A file that is not a valid pack fails as qem_pack_open says. */
    CHECK_STATUS(qem_pack_write_calibrated_copy(
                     fixture_path("pack/corrupt/v1_json_byte_flipped.h5"), never, &cal, NULL, &err),
                 QEM_E_PACK_CRC, &err);
    CHECK_STATUS(qem_pack_write_calibrated_copy(test_path("missing.h5"), never, &cal, NULL, &err),
                 QEM_E_IO, &err);
    CHECK_STATUS(qem_pack_write_calibrated_copy(NULL, never, &cal, NULL, &err), QEM_E_INVALID_ARGUMENT,
                 &err);
    CHECK_STATUS(qem_pack_write_calibrated_copy(full, never, NULL, NULL, &err), QEM_E_INVALID_ARGUMENT,
                 &err);
    /* A method the reader's 127-byte record could not hold whole. */
    char long_method[200];
    memset(long_method, 'm', sizeof long_method - 1);
    long_method[sizeof long_method - 1] = '\0';
    cal.method = long_method;
    CHECK_STATUS(qem_pack_write_calibrated_copy(stray, never, &cal, NULL, &err), QEM_E_INVALID_ARGUMENT,
                 &err);
    cal.method = "bad utf-8 \xff";
    CHECK_STATUS(qem_pack_write_calibrated_copy(stray, never, &cal, NULL, &err), QEM_E_INVALID_ARGUMENT,
                 &err);
    CHECK(!file_exists(never));
    CHECK(count_entries(test_dir(), ".qem-") == 0);
}

int main(void)
{
    test_estimate_disks();
    test_estimate_hot_pixels();
    test_estimate_refusals();
    test_copy_fixtures();
    test_manifest_splice();
    test_copy_refusals();
    return test_finish("unit_calibration");
}
