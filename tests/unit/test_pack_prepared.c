/* The upstream's prepared extensions of packs (pack notes 2.7): the
 * canonical calibration digest vector, calibrated copies of every fixture
 * whose recorded values answer products exactly as the reference path
 * and a dense recomputation do, copies of copies, one refusal per reader
 * rule, qem verify against the data, and h5py reading the dataset. */
#include <jansson.h>
#include <math.h>

#include "common/sha256.h"
#include "pack/calibrated_copy.h"
#include "pack/encode.h"
#include "pack/prepared.h"
#include "common/calibration_estimate.h"
#include "test_util.h"

#define BLOCK 65536u
#define DPC "prepared_dpc_moments"
#define PRODUCTS "prepared_detector_products"
/* qem's member of the same form for the uint16 profile. */
#define PRODUCTS_U16 "qem_prepared_detector_products"

static const char *const fixtures[] = {
    "v1_u16_4x32_16x16",
    "v1_u16_excluded_retained",
    "v3_upstream_test_writer_notes_v3",
    "v3_upstream_test_writer_legacy_nonportable",
};
#define FIXTURE_COUNT (sizeof fixtures / sizeof fixtures[0])

/* A valid digest that names nothing in these files. */
static const char other_hex[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

static int have_h5py = -1;

/* --- little helpers ------------------------------------------------------------ */

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void hex_of(const void *data, size_t n, char hex[65])
{
    uint8_t d[32];
    qem_sha256_oneshot(data, n, d);
    qem_sha256_hex(d, hex);
}

static const char *str_of(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static uint64_t u64_of(const json_t *o, const char *key)
{
    return (uint64_t)json_integer_value(json_object_get(o, key));
}

static void set_int(json_t *o, const char *key, uint64_t v)
{
    json_object_set_new(o, key, json_integer((json_int_t)v));
}

static void set_str(json_t *o, const char *key, const char *v)
{
    json_object_set_new(o, key, json_string(v));
}

/* --- a pack held in memory: bytes plus its parsed manifest ------------------------ */

typedef struct packfile {
    uint8_t *bytes;
    size_t n;
    json_t *m;
    uint32_t index_at, index_bytes;
} packfile;

/* Duplicate keys are refused: a splice must never leave two members. */
static int pf_read(const char *path, packfile *f)
{
    memset(f, 0, sizeof *f);
    f->bytes = read_file(path, &f->n);
    if (!f->bytes || f->n < 24)
        return 0;
    uint32_t j;
    memcpy(&j, f->bytes + 8, 4);
    memcpy(&f->index_at, f->bytes + 16, 4);
    memcpy(&f->index_bytes, f->bytes + 20, 4);
    json_error_t je;
    f->m = json_loadb((const char *)f->bytes + 24, j, JSON_REJECT_DUPLICATES, &je);
    if (!f->m)
        fprintf(stderr, "%s: manifest: %s\n", path, je.text);
    return f->m != NULL;
}

static void pf_free(packfile *f)
{
    free(f->bytes);
    json_decref(f->m);
    memset(f, 0, sizeof *f);
}

static packfile pf_clone(const packfile *f)
{
    packfile c = *f;
    c.bytes = malloc(f->n);
    memcpy(c.bytes, f->bytes, f->n);
    c.m = json_deep_copy(f->m);
    return c;
}

/* The manifest re-serialised and the user block rebuilt around the same
 * index, written with the (possibly altered) body to `path`. */
static int pf_write(const packfile *f, const char *path)
{
    char *text = json_dumps(f->m, JSON_COMPACT | JSON_SORT_KEYS);
    uint8_t *block = NULL;
    qem_error err;
    int ok = text && qem_pack_user_block(text, strlen(text), f->bytes + f->index_at, f->index_bytes,
                                         BLOCK, &block, &err) == QEM_OK;
    if (ok) {
        uint8_t *out = malloc(f->n);
        memcpy(out, f->bytes, f->n);
        memcpy(out, block, BLOCK);
        ok = write_file(path, out, f->n);
        free(out);
    } else {
        fprintf(stderr, "rebuilding the user block for %s failed: %s\n", path,
                text ? err.message : "json_dumps");
    }
    free(block);
    free(text);
    return ok;
}

static json_t *dpc_of(const packfile *f)
{
    return json_object_get(f->m, DPC);
}

static json_t *products_of(const packfile *f)
{
    json_t *upstream = json_object_get(f->m, PRODUCTS);
    return upstream ? upstream : json_object_get(f->m, PRODUCTS_U16);
}

static json_t *product_of(const packfile *f, size_t k)
{
    return json_array_get(json_object_get(products_of(f), "products"), k);
}

/* --- 1. the canonical calibration digest ------------------------------------------ */

static void check_digest(const char *text, const char *want)
{
    json_error_t je;
    json_t *v = json_loads(text, 0, &je);
    CHECK(v != NULL);
    uint8_t d[32];
    char hex[65] = "";
    CHECK(v && qem_pack_calibration_digest(v, d));
    if (v)
        qem_sha256_hex(d, hex);
    if (strcmp(hex, want) != 0)
        fprintf(stderr, "calibration digest of %s\n  is   %s\n  want %s\n", text, hex, want);
    CHECK(strcmp(hex, want) == 0);
    json_decref(v);
}

static void test_digest_vector(void)
{
    static const char zeros[] = "0000000000000000000000000000000000000000000000000000000000000000";
    char text[1024];
    /* Notes section 7, V4: the example calibration with the DPC pair. */
    snprintf(
        text, sizeof text,
        "{\"schema\":\"quantem.gpu.detector-calibration/v1\",\"source_identity_sha256\":\"%s\","
        "\"detector_center_px\":[97.26,95.67],\"bright_field_radius_px\":41.0,"
        "\"dpc_rotation_degrees\":176.98,\"dpc_component_order_exchanged\":false,"
        "\"method\":\"mean-diffraction-half-maximum\"}",
        zeros);
    check_digest(text, "141641ff4fc1f2fce1f87c62d6a6c58c75b544d20416d897f47122956e6437f1");
    /* Integers encode as doubles too, and key order does not matter. */
    snprintf(text, sizeof text,
             "{\"method\":\"mean-diffraction-half-maximum\",\"bright_field_radius_px\":41,"
             "\"dpc_component_order_exchanged\":false,\"dpc_rotation_degrees\":176.98,"
             "\"detector_center_px\":[97.26,95.67],\"source_identity_sha256\":\"%s\","
             "\"schema\":\"quantem.gpu.detector-calibration/v1\"}",
             zeros);
    check_digest(text, "141641ff4fc1f2fce1f87c62d6a6c58c75b544d20416d897f47122956e6437f1");
    /* Without the pair: another digest (computed for this test by an
     * independent Python script from the notes' rule). */
    snprintf(
        text, sizeof text,
        "{\"schema\":\"quantem.gpu.detector-calibration/v1\",\"source_identity_sha256\":\"%s\","
        "\"detector_center_px\":[97.26,95.67],\"bright_field_radius_px\":41.0,"
        "\"method\":\"mean-diffraction-half-maximum\"}",
        zeros);
    check_digest(text, "758767878114e45017167715df63ac4b2bdb1197c495793dec083afc589636d2");
    /* Strings as Python's json.dumps writes them (ensure_ascii): escapes,
     * non-ASCII as \uXXXX, astral characters as surrogate pairs, and DEL
     * (0x7f) escaped too (expected values from Python). */
    snprintf(
        text, sizeof text,
        "{\"schema\":\"quantem.gpu.detector-calibration/v1\",\"source_identity_sha256\":\"%s\","
        "\"detector_center_px\":[97.26,95.67],\"bright_field_radius_px\":41.0,"
        "\"method\":\"caf\\u00e9 \\\"q\\\" \\\\ /\\n\\t\\u0001 \\ud83d\\ude00\"}",
        zeros);
    check_digest(text, "ea5c76230a12e81ad38e0efed105bc138b0dee3829d0401bf4744bf090bf1bac");
    snprintf(
        text, sizeof text,
        "{\"schema\":\"quantem.gpu.detector-calibration/v1\",\"source_identity_sha256\":\"%s\","
        "\"detector_center_px\":[97.26,95.67],\"bright_field_radius_px\":41.0,"
        "\"method\":\"a\\u007fb\"}",
        zeros);
    check_digest(text, "0258df8804459e93a0c5d045ae43db8869537b9ec78eb6969c443fe4d16bc044");
}

/* --- 2. and 3. prepared copies answer products exactly ------------------------------- */

static int same_image(const qem_image *a, const qem_image *b)
{
    if (!a->data || !b->data || a->dtype != b->dtype || a->ndim != b->ndim)
        return 0;
    size_t n = qem_dtype_size(a->dtype);
    for (unsigned i = 0; i < a->ndim; i++) {
        if (a->shape[i] != b->shape[i])
            return 0;
        n *= (size_t)a->shape[i];
    }
    return memcmp(a->data, b->data, n) == 0;
}

static uint64_t image_u(const qem_image *im, uint64_t i)
{
    if (im->dtype == QEM_DTYPE_UINT32)
        return ((const uint32_t *)im->data)[i];
    if (im->dtype == QEM_DTYPE_UINT64)
        return ((const uint64_t *)im->data)[i];
    return UINT64_MAX;
}

static int same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* A mask one admitted pixel away from `base` that equals none of the
 * planes the file records over admitted pixels (all ones, row index,
 * column index, a prepared mask), so its sums must be computed; -1 when
 * the detector is too small to have one. */
static int64_t one_pixel_away(const uint8_t *base, const uint8_t *excluded, uint64_t pixels,
                              uint64_t cols, uint8_t *const recorded[3], uint8_t *out)
{
    for (uint64_t flip = 0; flip < pixels; flip++) {
        if (excluded[flip])
            continue;
        memcpy(out, base, (size_t)pixels);
        out[flip] ^= 1;
        int ones = 1, row = 1, col = 1,
            rec[3] = {recorded[0] != NULL, recorded[1] != NULL, recorded[2] != NULL};
        for (uint64_t px = 0; px < pixels; px++) {
            if (excluded[px])
                continue;
            ones &= out[px] == 1;
            row &= out[px] == px / cols;
            col &= out[px] == px % cols;
            for (int k = 0; k < 3; k++)
                rec[k] &= rec[k] && out[px] == recorded[k][px];
        }
        if (!(ones | row | col | rec[0] | rec[1] | rec[2]))
            return (int64_t)flip;
    }
    return -1;
}

typedef struct copy_facts {
    qem_pack_info info;
    qem_detector_calibration cal;
    uint8_t *excluded; /* pixels flags */
    uint64_t admitted;
    uint32_t maxval;
} copy_facts;

/* The copy at `path`: its prepared members as the notes define them, the
 * fast path's products recorded and bit-identical to the reference path,
 * and every recorded value equal to a dense sum over the working values. */
static void check_prepared_copy(const char *path, int want_moments, int want_products)
{
    qem_error err;
    qem_pack *pk = NULL;
    copy_facts fx = {.info = {.struct_size = sizeof fx.info},
                     .cal = {.struct_size = sizeof fx.cal}};
    CHECK_OK(qem_pack_open(path, NULL, &pk, &err), &err);
    if (!pk)
        return;
    qem_pack_get_info(pk, &fx.info, NULL);
    CHECK_OK(qem_pack_get_detector_calibration(pk, &fx.cal, &err), &err);
    CHECK(fx.info.has_prepared_dpc_moments == want_moments);
    CHECK(fx.info.has_prepared_detector_products == want_products);
    const uint64_t P = fx.info.pixels, S = fx.info.scans;
    const uint64_t cols = fx.info.shape[3];
    fx.maxval = fx.info.working_dtype == QEM_DTYPE_UINT16 ? 65535u : 255u;
    fx.excluded = calloc((size_t)P, 1);
    uint32_t *ex = malloc((size_t)(fx.info.excluded_count + 1) * 4);
    CHECK_OK(qem_pack_get_excluded(pk, ex, (size_t)(fx.info.excluded_count + 1) * 4, &err), &err);
    for (uint64_t i = 0; i < fx.info.excluded_count; i++)
        fx.excluded[ex[i]] = 1;
    free(ex);
    fx.admitted = P - fx.info.excluded_count;

    packfile f;
    CHECK(pf_read(path, &f));
    const json_t *dpc = dpc_of(&f), *prod = products_of(&f);
    CHECK((dpc != NULL) == want_moments);
    CHECK((prod != NULL) == want_products);

    /* The moments member: bounds as the notes define them. */
    uint64_t row_sum = 0, col_sum = 0;
    for (uint64_t px = 0; px < P; px++)
        if (!fx.excluded[px]) {
            row_sum += px / cols;
            col_sum += px % cols;
        }
    char buf[32];
    if (dpc) {
        CHECK(strcmp(str_of(dpc, "schema"), fx.info.profile == QEM_PACK_UINT8_BITPACKED
                                                ? "quantem.gpu.prepared-dpc-moments/v1"
                                                : "quantem.gpu.prepared-dpc-moments/v2") == 0);
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)(fx.admitted * fx.maxval));
        CHECK(strcmp(str_of(dpc, "total_bound"), buf) == 0);
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)(row_sum * fx.maxval));
        CHECK(strcmp(str_of(dpc, "row_moment_bound"), buf) == 0);
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)(col_sum * fx.maxval));
        CHECK(strcmp(str_of(dpc, "column_moment_bound"), buf) == 0);
        CHECK(u64_of(dpc, "scan_count") == S && u64_of(dpc, "file_bytes") == 32 * S);
        CHECK(u64_of(dpc, "file_offset") % 4 == 0);
        CHECK(u64_of(dpc, "file_offset") + 32 * S <= f.n);
        CHECK(strcmp(str_of(dpc, "source_identity_sha256"), fx.info.source_identity_sha256) == 0);
    }
    /* The products member describes the recorded calibration. */
    uint8_t *masks[3] = {NULL, NULL, NULL};
    if (prod) {
        uint8_t cd[32];
        char chex[65];
        CHECK(qem_pack_calibration_digest(json_object_get(f.m, "detector_calibration"), cd));
        qem_sha256_hex(cd, chex);
        CHECK(strcmp(str_of(prod, "detector_calibration_sha256"), chex) == 0);
        /* Each profile's member under its own key, schema and identity. */
        const int u8 = fx.info.profile == QEM_PACK_UINT8_BITPACKED;
        CHECK(json_object_get(f.m, u8 ? PRODUCTS : PRODUCTS_U16) == prod);
        CHECK(json_object_get(f.m, u8 ? PRODUCTS_U16 : PRODUCTS) == NULL);
        CHECK(strcmp(str_of(prod, "schema"), u8 ? "quantem.gpu.prepared-detector-products/v1"
                                                : "qem.prepared-detector-products/v1") == 0);
        const char *working = u8 ? "prepared_uint8_sha256" : "working_logical_sha256";
        CHECK(strcmp(str_of(prod, u8 ? "working_uint8_sha256" : "working_logical_sha256"),
                     str_of(f.m, working)) == 0);
        for (unsigned k = 0; k < 3; k++) {
            const json_t *r = product_of(&f, k);
            double inner, outer;
            qem_pack_prepared_geometry(k, fx.cal.bright_field_radius, &inner, &outer);
            CHECK(inner == (k == 0   ? 0.0
                            : k == 1 ? fx.cal.bright_field_radius / 2
                                     : fx.cal.bright_field_radius));
            CHECK(outer == (k == 2 ? 2 * fx.cal.bright_field_radius : fx.cal.bright_field_radius));
            const json_t *c = json_object_get(r, "center_px");
            CHECK(json_number_value(json_array_get(c, 0)) == fx.cal.center_row);
            CHECK(json_number_value(json_array_get(c, 1)) == fx.cal.center_column);
            CHECK(json_number_value(json_object_get(r, "inner_radius_px")) == inner);
            CHECK(json_number_value(json_object_get(r, "outer_radius_px")) == outer);
            /* The inclusive rule, computed here and by the library. */
            masks[k] = malloc((size_t)P);
            uint8_t *lib = malloc((size_t)P);
            uint64_t n = 0;
            for (uint64_t px = 0; px < P; px++) {
                const double d = hypot((double)(px / cols) - fx.cal.center_row,
                                       (double)(px % cols) - fx.cal.center_column);
                masks[k][px] = (uint8_t)(!fx.excluded[px] && inner <= d && d <= outer);
                n += masks[k][px];
            }
            CHECK(qem_pack_prepared_mask(pk, fx.cal.center_row, fx.cal.center_column, inner, outer,
                                         lib) == n);
            CHECK(memcmp(lib, masks[k], (size_t)P) == 0);
            free(lib);
            CHECK(u64_of(r, "selected_detector_pixels") == n);
            const uint64_t mo = u64_of(r, "mask_file_offset");
            CHECK(u64_of(r, "mask_file_bytes") == P && mo + P <= f.n);
            if (mo + P <= f.n)
                CHECK(memcmp(f.bytes + mo, masks[k], (size_t)P) == 0);
        }
    }
    qem_pack_close(pk);

    /* Fast path against the reference path (which never uses prepared
     * values), over the loaded container. */
    qem_container *c = NULL;
    qem_products *fast = NULL, *ref = NULL;
    CHECK_OK(qem_container_open(path, NULL, &c, &err), &err);
    if (c) {
        CHECK_OK(qem_products_open(c, NULL, &fast, &err), &err);
        CHECK_OK(qem_products_open_path(c, NULL, QEM_PATH_REFERENCE, &ref, &err), &err);
    }
    if (!fast || !ref) {
        qem_products_close(fast);
        qem_products_close(ref);
        qem_container_close(c);
        pf_free(&f);
        free(fx.excluded);
        for (int k = 0; k < 3; k++)
            free(masks[k]);
        return;
    }
    const qem_origin recorded_if_moments = want_moments ? QEM_ORIGIN_RECORDED : QEM_ORIGIN_COMPUTED;
    qem_image a = {0}, b = {0}, com_abs = {0};
    for (int sub = 0; sub < 2; sub++) {
        CHECK_OK(qem_products_com(fast, NULL, sub, &a, &err), &err);
        CHECK(qem_products_last_origin(fast) == recorded_if_moments);
        CHECK_OK(qem_products_com(ref, NULL, sub, &b, &err), &err);
        CHECK(qem_products_last_origin(ref) == QEM_ORIGIN_COMPUTED);
        CHECK(same_image(&a, &b));
        qem_image_free(&b);
        if (sub == 0)
            com_abs = a;
        else
            qem_image_free(&a);
    }
    /* A part of the scans answers from the same records, slice for slice. */
    const uint64_t first = S / 3, count = S / 2;
    CHECK_OK(qem_products_com_part(fast, NULL, first, count, &a, &err), &err);
    CHECK(qem_products_last_origin(fast) == recorded_if_moments);
    CHECK_OK(qem_products_com_part(ref, NULL, first, count, &b, &err), &err);
    CHECK(same_image(&a, &b));
    CHECK(a.data && com_abs.data &&
          memcmp(a.data, (const float *)com_abs.data + 2 * first, (size_t)(8 * count)) == 0);
    qem_image_free(&a);
    qem_image_free(&b);
    /* DPC at a fixed rotation rests on the same moments. */
    if (fx.info.shape[0] >= 2 && fx.info.shape[1] >= 2) {
        qem_dpc_result da = {.struct_size = sizeof da}, db = {.struct_size = sizeof db};
        CHECK_OK(qem_products_dpc(fast, NULL, 0.0, &da, &err), &err);
        CHECK(qem_products_last_origin(fast) == recorded_if_moments);
        CHECK_OK(qem_products_dpc(ref, NULL, 0.0, &db, &err), &err);
        CHECK(same_image(&da.com, &db.com) && same_image(&da.aligned, &db.aligned) &&
              same_image(&da.phase, &db.phase));
        qem_dpc_result_free(&da);
        qem_dpc_result_free(&db);
    }
    /* The total over every admitted pixel is a recorded plane too. */
    uint8_t *ones = malloc((size_t)P), *away = malloc((size_t)P);
    memset(ones, 1, (size_t)P);
    CHECK_OK(qem_products_virtual(fast, ones, &a, &err), &err);
    CHECK(qem_products_last_origin(fast) == recorded_if_moments);
    CHECK_OK(qem_products_virtual(ref, ones, &b, &err), &err);
    CHECK(same_image(&a, &b));
    qem_image_free(&a);
    qem_image_free(&b);

    qem_image prod_img[3] = {{0}};
    for (unsigned k = 0; masks[0] && k < 3; k++) {
        CHECK_OK(qem_products_virtual(fast, masks[k], &prod_img[k], &err), &err);
        CHECK(qem_products_last_origin(fast) == QEM_ORIGIN_RECORDED);
        CHECK_OK(qem_products_virtual(ref, masks[k], &b, &err), &err);
        CHECK(qem_products_last_origin(ref) == QEM_ORIGIN_COMPUTED);
        CHECK(same_image(&prod_img[k], &b));
        qem_image_free(&b);
        CHECK_OK(qem_products_virtual_part(fast, masks[k], first, count, &a, &err), &err);
        CHECK(qem_products_last_origin(fast) == QEM_ORIGIN_RECORDED);
        CHECK_OK(qem_products_virtual_part(ref, masks[k], first, count, &b, &err), &err);
        CHECK(same_image(&a, &b));
        const size_t item = qem_dtype_size(prod_img[k].dtype);
        CHECK(a.data && prod_img[k].data && a.dtype == prod_img[k].dtype &&
              memcmp(a.data, (const uint8_t *)prod_img[k].data + item * first,
                     (size_t)(item * count)) == 0);
        qem_image_free(&a);
        qem_image_free(&b);
    }
    /* One admitted pixel off every recorded plane: computed, still equal. */
    int64_t flip = one_pixel_away(masks[0] ? masks[0] : ones, fx.excluded, P, cols, masks, away);
    if (flip >= 0) {
        CHECK_OK(qem_products_virtual(fast, away, &a, &err), &err);
        CHECK(qem_products_last_origin(fast) == QEM_ORIGIN_COMPUTED);
        CHECK_OK(qem_products_virtual(ref, away, &b, &err), &err);
        CHECK(same_image(&a, &b));
        qem_image_free(&a);
        qem_image_free(&b);
        /* Planes are answered all from records or all computed. */
        if (masks[0]) {
            int32_t *w = malloc((size_t)(3 * P) * sizeof *w);
            int64_t *sa = malloc((size_t)(2 * S) * sizeof *sa),
                    *sb = malloc((size_t)(2 * S) * sizeof *sb);
            for (uint64_t px = 0; px < P; px++) {
                w[px] = 1;
                w[P + px] = masks[0][px];
                w[2 * P + px] = away[px];
            }
            const int32_t *rec2[2] = {w, w + P}, *mixed[2] = {w, w + 2 * P};
            const size_t size = (size_t)(2 * S) * sizeof *sa;
            CHECK_OK(qem_products_weighted_sums(fast, 0, S, rec2, 2, sa, size, &err), &err);
            CHECK(qem_products_last_origin(fast) == QEM_ORIGIN_RECORDED);
            CHECK_OK(qem_products_weighted_sums(ref, 0, S, rec2, 2, sb, size, &err), &err);
            CHECK(memcmp(sa, sb, size) == 0);
            CHECK_OK(qem_products_weighted_sums(fast, 0, S, mixed, 2, sa, size, &err), &err);
            CHECK(qem_products_last_origin(fast) == QEM_ORIGIN_COMPUTED);
            CHECK_OK(qem_products_weighted_sums(ref, 0, S, mixed, 2, sb, size, &err), &err);
            CHECK(memcmp(sa, sb, size) == 0);
            free(w);
            free(sa);
            free(sb);
        }
        /* A CoM over it is computed as well. */
        CHECK_OK(qem_products_com(fast, away, 0, &a, &err), &err);
        CHECK(qem_products_last_origin(fast) == QEM_ORIGIN_COMPUTED);
        CHECK_OK(qem_products_com(ref, away, 0, &b, &err), &err);
        CHECK(same_image(&a, &b));
        qem_image_free(&a);
        qem_image_free(&b);
    } else {
        /* Only a detector of one or two admitted pixels has none. */
        CHECK(fx.admitted <= 2);
        printf("  %s: every mask one pixel away is a recorded plane; no computed case\n", path);
    }

    /* Dense recomputation from the working values. */
    qem_pack *lp = qem_container_pack(c);
    const uint64_t bytes = qem_pack_read_bound(lp, QEM_VALUES_WORKING, S);
    uint8_t *data = malloc((size_t)bytes);
    CHECK_OK(qem_pack_read_scans(lp, 0, S, QEM_VALUES_WORKING, data, (size_t)bytes, &err), &err);
    const int u16 = fx.info.working_dtype == QEM_DTYPE_UINT16;
    /* The working identity the moments are bound to is that of these
     * values (LE u16 for uint16 data, a copy gains it; u8 otherwise). */
    if (dpc) {
        uint8_t *le = malloc((size_t)bytes);
        for (uint64_t i = 0; u16 && i < bytes / 2; i++) {
            const uint16_t v = ((const uint16_t *)(const void *)data)[i];
            le[2 * i] = (uint8_t)v;
            le[2 * i + 1] = (uint8_t)(v >> 8);
        }
        char hex[65];
        hex_of(u16 ? le : data, (size_t)bytes, hex);
        const char *key = u16 ? "working_logical_sha256" : "prepared_uint8_sha256";
        CHECK(strcmp(str_of(f.m, key), hex) == 0);
        CHECK(strcmp(str_of(dpc, u16 ? "working_logical_sha256" : "working_uint8_sha256"), hex) ==
              0);
        CHECK(strcmp(str_of(dpc, "detector_mask_sha256"), str_of(f.m, "detector_mask_sha256")) ==
              0);
        free(le);
    }
    uint64_t wrong_moments = 0, wrong_com = 0, wrong_products = 0;
    for (uint64_t s = 0; s < S; s++) {
        uint64_t t = 0, r = 0, cm = 0, sums[3] = {0, 0, 0};
        for (uint64_t px = 0; px < P; px++) {
            const uint64_t v = u16 ? (uint64_t)((const uint16_t *)(const void *)data)[s * P + px]
                                   : data[s * P + px];
            if (fx.excluded[px]) {
                wrong_moments += v != 0; /* working values read 0 there */
                continue;
            }
            t += v;
            r += v * (px / cols);
            cm += v * (px % cols);
            for (int k = 0; k < 3; k++)
                if (masks[k] && masks[k][px])
                    sums[k] += v;
        }
        if (dpc) {
            const uint8_t *w = f.bytes + u64_of(dpc, "file_offset") + 32 * s;
            wrong_moments += get_le64(w) != t || get_le64(w + 8) != r || get_le64(w + 16) != cm ||
                             get_le64(w + 24) != 0;
        }
        const float *com = com_abs.data;
        const float want_r = t ? (float)((double)r / (double)t) : NAN;
        const float want_c = t ? (float)((double)cm / (double)t) : NAN;
        wrong_com += !com || !same_float(com[2 * s], want_r) || !same_float(com[2 * s + 1], want_c);
        for (unsigned k = 0; masks[0] && k < 3; k++) {
            const uint64_t vo = u64_of(product_of(&f, k), "values_file_offset");
            wrong_products +=
                image_u(&prod_img[k], s) != sums[k] || get_le32(f.bytes + vo + 4 * s) != sums[k];
        }
    }
    CHECK_EQ_U64(wrong_moments, 0);
    CHECK_EQ_U64(wrong_com, 0);
    CHECK_EQ_U64(wrong_products, 0);
    free(data);
    for (int k = 0; k < 3; k++) {
        qem_image_free(&prod_img[k]);
        free(masks[k]);
    }
    qem_image_free(&com_abs);
    free(ones);
    free(away);
    free(fx.excluded);
    qem_products_close(fast);
    qem_products_close(ref);
    qem_container_close(c);
    pf_free(&f);
}

/* h5py reads the moments dataset of a genuine HDF5 copy: shape (scans, 8),
 * the bytes the manifest's sha256 names, at the offset it names. */
static void check_h5py(const char *path)
{
    if (have_h5py < 0)
        have_h5py = system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") == 0;
    if (!have_h5py) {
        printf("  NOTE: h5py is missing; %s not checked with h5py\n", path);
        return;
    }
    packfile f;
    CHECK(pf_read(path, &f));
    const json_t *dpc = dpc_of(&f);
    CHECK(dpc != NULL);
    if (dpc) {
        char cmd[2048];
        snprintf(
            cmd, sizeof cmd,
            "/usr/bin/python3 -c 'import sys, hashlib, h5py; f = h5py.File(sys.argv[1], \"r\"); "
            "d = f[\"/quantem_gpu/prepared/dpc_moments_u32_v2\"]; a = d[()]; "
            "assert a.shape == (int(sys.argv[2]), 8), a.shape; "
            "assert a.dtype.kind == \"u\" and a.dtype.itemsize == 4, a.dtype; "
            "h = hashlib.sha256(a.astype(\"<u4\").tobytes()).hexdigest(); "
            "assert h == sys.argv[3], h; "
            "assert d.id.get_offset() == int(sys.argv[4]), d.id.get_offset()' "
            "'%s' %llu %s %llu >&2",
            path, (unsigned long long)u64_of(dpc, "scan_count"), str_of(dpc, "sha256"),
            (unsigned long long)u64_of(dpc, "file_offset"));
        CHECK(system(cmd) == 0);
    }
    pf_free(&f);
}

static int is_hdf5(const char *path)
{
    return hdf5_after_block(path, BLOCK);
}

/* Paths of each fixture's prepared copy, for the later parts. */
static char copies[FIXTURE_COUNT][768];

static void test_fixture_copies(void)
{
    for (size_t k = 0; k < FIXTURE_COUNT; k++) {
        char name[256], again[768];
        snprintf(name, sizeof name, "pack/%s.h5", fixtures[k]);
        const char *src = fixture_path(name);
        snprintf(name, sizeof name, "%s.prepared.h5", fixtures[k]);
        snprintf(copies[k], sizeof copies[k], "%s", test_path(name));
        snprintf(name, sizeof name, "%s.again.h5", fixtures[k]);
        snprintf(again, sizeof again, "%s", test_path(name));

        packfile orig;
        CHECK(pf_read(src, &orig));
        qem_pack *p = NULL;
        qem_error err;
        CHECK_OK(qem_pack_open(src, NULL, &p, &err), &err);
        if (!p || !orig.m) {
            pf_free(&orig);
            qem_pack_close(p);
            continue;
        }
        qem_pack_info info = {.struct_size = sizeof info};
        qem_pack_get_info(p, &info, NULL);
        qem_pack_close(p);
        const double rows = (double)info.shape[2], cols = (double)info.shape[3];
        const int v3 = info.profile == QEM_PACK_UINT8_BITPACKED;

        pack_calibration_in cal = {.center_row = rows * 0.4 + 0.1,
                                   .center_col = cols * 0.55,
                                   .radius = fmin(rows, cols) * 0.3 + 0.25,
                                   .method = PRODUCT_CALIBRATION_METHOD,
                                   .has_dpc = 1,
                                   .dpc_rotation_degrees = 176.98};
        /* Garbage first: the report must be set whatever the file. */
        pack_prepared_report rep;
        memset(&rep, 0x5a, sizeof rep);
        const qem_status st = qem_pack_write_calibrated_copy(src, copies[k], &cal, &rep, &err);
        CHECK_OK(st, &err);
        if (st != QEM_OK) {
            pf_free(&orig);
            continue;
        }
        printf("  %s: moments %s%s%s, products %s%s%s\n", fixtures[k],
               rep.moments_written ? "written" : "skipped", rep.moments_skipped[0] ? ": " : "",
               rep.moments_skipped, rep.products_written ? "written" : "skipped",
               rep.products_skipped[0] ? ": " : "", rep.products_skipped);
        /* Moments and products need the working identity (a uint16 pack
         * gains one) and the mask digest, as the source manifest says;
         * products the calibration too, which the copy records. */
        const int can_moments =
            (!v3 || json_is_string(json_object_get(orig.m, "prepared_uint8_sha256"))) &&
            json_is_string(json_object_get(orig.m, "detector_mask_sha256"));
        CHECK(rep.moments_written == can_moments);
        CHECK((rep.moments_skipped[0] == '\0') == can_moments);
        CHECK(rep.products_written == can_moments);
        CHECK((rep.products_skipped[0] == '\0') == can_moments);
        check_prepared_copy(copies[k], can_moments, can_moments);
        if (is_hdf5(src))
            check_h5py(copies[k]);

        /* A copy of the copy about another centre: the products member and
         * values follow the new calibration (one member, no duplicates). */
        pack_calibration_in cal2 = {.center_row = rows * 0.65,
                                    .center_col = cols * 0.3,
                                    .radius = fmin(rows, cols) * 0.45 + 0.1,
                                    .method = "manual"};
        CHECK_OK(qem_pack_write_calibrated_copy(copies[k], again, &cal2, NULL, &err), &err);
        check_prepared_copy(again, can_moments, can_moments);
        packfile first, second;
        CHECK(pf_read(copies[k], &first));
        CHECK(pf_read(again, &second));
        if (can_moments && first.m && second.m) {
            const json_t *c = json_object_get(product_of(&second, 0), "center_px");
            CHECK(json_number_value(json_array_get(c, 0)) == cal2.center_row);
            CHECK(json_number_value(json_array_get(c, 1)) == cal2.center_col);
            CHECK(json_number_value(json_object_get(product_of(&second, 2), "outer_radius_px")) ==
                  2 * cal2.radius);
            CHECK(strcmp(str_of(products_of(&first), "detector_calibration_sha256"),
                         str_of(products_of(&second), "detector_calibration_sha256")) != 0);
        }
        if (is_hdf5(src))
            check_h5py(again);
        pf_free(&first);
        pf_free(&second);
        pf_free(&orig);
    }
}

/* A source without the mask digest the moments are bound to: the copy
 * is written without them, the report says why, and products compute. */
static void test_skipped_moments(void)
{
    packfile f;
    CHECK(pf_read(fixture_path("pack/v1_u16_4x32_16x16.h5"), &f));
    if (!f.m)
        return;
    json_object_del(f.m, "detector_mask_sha256");
    char src[768], dest[768];
    snprintf(src, sizeof src, "%s", test_path("no-mask-digest.h5"));
    snprintf(dest, sizeof dest, "%s", test_path("no-mask-digest.prepared.h5"));
    CHECK(pf_write(&f, src));
    pf_free(&f);
    qem_pack *p = NULL;
    qem_error err;
    CHECK_OK(qem_pack_open(src, NULL, &p, &err), &err);
    qem_pack_close(p);
    pack_calibration_in cal = {
        .center_row = 7.5, .center_col = 8.25, .radius = 4.5, .method = PRODUCT_CALIBRATION_METHOD};
    pack_prepared_report rep;
    CHECK_OK(qem_pack_write_calibrated_copy(src, dest, &cal, &rep, &err), &err);
    CHECK(!rep.moments_written && !rep.products_written);
    CHECK(strstr(rep.moments_skipped, "detector_mask_sha256") != NULL);
    CHECK(strstr(rep.products_skipped, "detector_mask_sha256") != NULL);
    printf("  no mask digest: moments skipped: %s\n", rep.moments_skipped);
    check_prepared_copy(dest, 0, 0);
}

/* uint16 sums of a wide ring can pass the members' 32 bits: the copy is
 * written without products, says why, and keeps the moments. */
static void test_products_past_32_bits(void)
{
    const uint64_t shape[4] = {2, 2, 384, 384}, n = 2 * 2 * 384 * 384;
    uint16_t *data = malloc((size_t)n * 2);
    if (!data)
        return;
    for (uint64_t i = 0; i < n; i++)
        data[i] = 65535;
    char npy[768], pack[768], copy[768];
    snprintf(npy, sizeof npy, "%s", test_path("saturated.npy"));
    snprintf(pack, sizeof pack, "%s", test_path("saturated.h5"));
    snprintf(copy, sizeof copy, "%s", test_path("saturated.prepared.h5"));
    CHECK(write_npy4(npy, QEM_DTYPE_UINT16, shape, data));
    free(data);
    qem_error err;
    qem_pack_inspection *in = NULL;
    CHECK_OK(qem_pack_inspect(npy, NULL, &in, &err), &err);
    if (!in)
        return;
    qem_pack_plan_options po;
    qem_pack_plan_options_init(&po);
    po.profile = QEM_PACK_UINT16_LZ4;
    po.destination = pack;
    CHECK_OK(qem_pack_produce(in, &po, pack, NULL, &err), &err);
    qem_pack_inspection_free(in);
    /* ADF 90..180 px: about 76000 pixels of 65535 each. */
    pack_calibration_in cal = {.center_row = 192, .center_col = 192, .radius = 90,
                               .method = "manual"};
    pack_prepared_report rep;
    CHECK_OK(qem_pack_write_calibrated_copy(pack, copy, &cal, &rep, &err), &err);
    CHECK(rep.moments_written && !rep.products_written);
    CHECK(strstr(rep.products_skipped, "32 bits") != NULL);
    printf("  saturated 384 x 384 detector: products skipped: %s\n", rep.products_skipped);
    check_prepared_copy(copy, 1, 0);
}

/* --- 4. one refusal per reader rule -------------------------------------------------- */

enum { V3 = 1, V1 = 2, BOTH = 3 };

#define RULES(X)                                                                                   \
    X(D_NOT_OBJECT, BOTH, "moments: not an object", "must be an object")                           \
    X(D_SCHEMA, BOTH, "moments: schema", ".schema must be")                                        \
    X(D_SOURCE, BOTH, "moments: source_identity_sha256 other", "names another source")             \
    X(D_WORKING, BOTH, "moments: working identity other", "working_")                              \
    X(D_MASK_SHA, BOTH, "moments: detector_mask_sha256 other", "detector_mask_sha256 must equal")  \
    X(D_MAXVAL, V1, "moments: maximum_value not 65535", "maximum_value 65535")                     \
    X(D_WORKING_DTYPE, V1, "moments: working_dtype not uint16", "maximum_value 65535")             \
    X(D_SELECTION, BOTH, "moments: detector_selection", "detector_selection")                      \
    X(D_SCANS, BOTH, "moments: scan_count", "disagree with the file")                              \
    X(D_SELECTED, BOTH, "moments: selected_detector_pixels", "disagree with the file")             \
    X(D_COLUMNS, BOTH, "moments: detector_columns", "disagree with the file")                      \
    X(D_DTYPE, BOTH, "moments: dtype", "8 words per scan")                                         \
    X(D_WORD_ORDER, BOTH, "moments: word_order", "8 words per scan")                               \
    X(D_WORDS, BOTH, "moments: words_per_scan", "8 words per scan")                                \
    X(D_LAYOUT, BOTH, "moments: layout", ".layout must be")                                        \
    X(D_TOTAL_BOUND, BOTH, "moments: total_bound", "bounds must be")                               \
    X(D_ROW_BOUND, BOTH, "moments: row_moment_bound", "bounds must be")                            \
    X(D_COL_BOUND, BOTH, "moments: column_moment_bound", "bounds must be")                         \
    X(D_BOUND_NUMBER, BOTH, "moments: total_bound as a number", "bounds must be")                  \
    X(D_NARROW_INT, BOTH, "moments: narrow_integer flipped", "fit 32 bits")                        \
    X(D_NARROW_PROD, BOTH, "moments: narrow_products flipped", "fit 32 bits")                      \
    X(D_NARROW_NUMBER, BOTH, "moments: narrow_integer as the number 1", "fit 32 bits")             \
    X(D_OFFSET_ALIGN, BOTH, "moments: file_offset not a multiple of 4", "multiple of 4")           \
    X(D_OFFSET_STRING, BOTH, "moments: file_offset as a string", "non-negative integers")          \
    X(D_OFFSET_NEGATIVE, BOTH, "moments: file_offset negative", "non-negative integers")           \
    X(D_OVER_METADATA, BOTH, "moments: range over the prelude and manifest", "overlap")            \
    X(D_FILE_BYTES, BOTH, "moments: file_bytes wrong", "the shape needs")                          \
    X(D_PAST_END, BOTH, "moments: range past the file end", "outside the")                         \
    X(D_OVER_SHARD, BOTH, "moments: range overlapping a shard payload", "overlap")                 \
    X(D_SHA_MALFORMED, BOTH, "moments: sha256 malformed", "64 lowercase hex")                      \
    X(D_BYTE_FLIPPED, BOTH, "moments: a data byte flipped (SHA mismatch)",                         \
      "do not match their SHA-256")                                                                \
    X(D_PADDING, BOTH, "moments: nonzero padding word", "nonzero padding")                         \
    X(D_TOTAL_HIGH, BOTH, "moments: total above total_bound", "exact moment bounds")               \
    X(D_ROW_HIGH, BOTH, "moments: row moment above total*(rows-1)", "no detector position")        \
    X(D_COL_HIGH, BOTH, "moments: column moment above total*(cols-1)", "no detector position")     \
    X(D_ZERO_TOTAL, BOTH, "moments: nonzero moment with zero total", "no detector position")       \
    X(P_NOT_OBJECT, BOTH, "products: not an object", "must be an object")                            \
    X(P_ON_V1, V1, "products: the upstream member on a uint16 file", "profile only")           \
    X(P_ON_V3, V3, "products: qem's uint16 member on a uint8 file", "profile only")                                   \
    X(P_NO_CAL, BOTH, "products: without detector_calibration", "requires the manifest")             \
    X(P_SCHEMA, BOTH, "products: schema", ".schema must be")                                         \
    X(P_SOURCE, BOTH, "products: source_identity_sha256 other", "names another source")              \
    X(P_WORKING, BOTH, "products: working identity other", ".working_")    \
    X(P_MASK_SHA, BOTH, "products: detector_mask_sha256 other", "detector_mask_sha256 must equal")   \
    X(P_CAL_SHA, BOTH, "products: detector_calibration_sha256 other", "another calibration")         \
    X(P_CAL_CHANGED, BOTH, "products: calibration changed under them", "another calibration")        \
    X(P_ENCODING, BOTH, "products: digest encoding", "digest_encoding")                              \
    X(P_SCAN_SHAPE, BOTH, "products: scan_shape", "disagree with the file")                          \
    X(P_DET_SHAPE, BOTH, "products: detector_shape", "disagree with the file")                       \
    X(P_PRODUCT_DTYPE, BOTH, "products: product_dtype", "inclusive mask rule")                       \
    X(P_MASK_DTYPE, BOTH, "products: mask_dtype", "inclusive mask rule")                             \
    X(P_MASK_RULE, BOTH, "products: mask_rule", "inclusive mask rule")                               \
    X(P_ORDER, BOTH, "products: product_order reversed", "product_order")                            \
    X(P_TWO, BOTH, "products: two entries", "three products")                                        \
    X(P_NAME, BOTH, "products: a product name wrong", "must be the")                                 \
    X(P_CENTER, BOTH, "products: center_px changed", "geometry disagrees")                           \
    X(P_INNER, BOTH, "products: inner_radius_px changed", "geometry disagrees")                      \
    X(P_OUTER, BOTH, "products: outer_radius_px changed", "geometry disagrees")                      \
    X(P_SELECTED, BOTH, "products: selected_detector_pixels wrong", "selects")                       \
    X(P_MASK_BYTES, BOTH, "products: mask_file_bytes wrong", "the shape needs")                      \
    X(P_VALUES_BYTES, BOTH, "products: values_file_bytes wrong", "the shape needs")                  \
    X(P_MASK_PAST_END, BOTH, "products: mask range past the end", "outside the")                     \
    X(P_MASK_OVERLAP, BOTH, "products: bf mask overlapping the abf values", "overlap")               \
    X(P_OVER_MOMENTS, BOTH, "products: adf values overlapping the moments", "overlap")               \
    X(P_MASK_SHA_BAD, BOTH, "products: mask_sha256 malformed", "64 lowercase hex")                   \
    X(P_MASK_FLIP, BOTH, "products: mask byte flipped (SHA mismatch)", "do not match their SHA-256") \
    X(P_MASK_NOT_RULE, BOTH, "products: mask byte flipped, SHA updated", "not the inclusive rule")   \
    X(P_VALUE_HIGH, BOTH, "products: value above selected*maximum", "can sum to")                        \
    X(P_VALUES_FLIP, BOTH, "products: values byte flipped (SHA mismatch)",                           \
      "do not match their SHA-256")

#define AS_ENUM(id, bases, text, words) id,
#define AS_BASES(id, bases, text, words) bases,
#define AS_TEXT(id, bases, text, words) text,
#define AS_WORDS(id, bases, text, words) words,
enum { RULES(AS_ENUM) RULE_COUNT };
static const int rule_bases[] = {RULES(AS_BASES)};
static const char *const rule_names[] = {RULES(AS_TEXT)};
/* Words of the message the rule itself gives: no case passes by
 * tripping another rule first. */
static const char *const rule_words[] = {RULES(AS_WORDS)};

/* What a mutation needs to know of its base copy. */
typedef struct base {
    packfile f;
    uint64_t scans, pixels, rows, cols;
    uint64_t payload_offset, payload_bytes; /* shard 0, from the binary index */
    const uint8_t *excluded;
    int v3;
} base;

static void update_sha(packfile *f, json_t *o, const char *key, uint64_t offset, uint64_t bytes)
{
    char hex[65];
    hex_of(f->bytes + offset, (size_t)bytes, hex);
    set_str(o, key, hex);
}

static void rewrite_scan(packfile *f, json_t *dpc, uint64_t scans, uint64_t s, uint64_t t,
                         uint64_t r, uint64_t c)
{
    uint8_t *w = f->bytes + u64_of(dpc, "file_offset") + 32 * s;
    put_le64(w, t);
    put_le64(w + 8, r);
    put_le64(w + 16, c);
    update_sha(f, dpc, "sha256", u64_of(dpc, "file_offset"), 32 * scans);
}

/* Applies one rule's mutation to `f` (a clone of b->f); 0 when the rule
 * has nothing to break in this base. */
static int mutate(int rule, const base *b, const base *v3, const base *v1, packfile *f)
{
    json_t *d = dpc_of(f), *pr = products_of(f);
    json_t *p0 = product_of(f, 0), *p1 = product_of(f, 1), *p2 = product_of(f, 2);
    const uint64_t S = b->scans, P = b->pixels;
    char buf[64];
    switch (rule) {
    case D_NOT_OBJECT: json_object_set_new(f->m, DPC, json_array()); return 1;
    case D_SCHEMA:
        /* The other profile's schema. */
        set_str(d, "schema",
                b->v3 ? "quantem.gpu.prepared-dpc-moments/v2"
                      : "quantem.gpu.prepared-dpc-moments/v1");
        return 1;
    case D_SOURCE: set_str(d, "source_identity_sha256", other_hex); return 1;
    case D_WORKING:
        set_str(d, b->v3 ? "working_uint8_sha256" : "working_logical_sha256", other_hex);
        return 1;
    case D_MASK_SHA: set_str(d, "detector_mask_sha256", other_hex); return 1;
    case D_MAXVAL: set_int(d, "maximum_value", 65534); return 1;
    case D_WORKING_DTYPE: set_str(d, "working_dtype", "uint8"); return 1;
    case D_SELECTION: set_str(d, "detector_selection", "all-v1"); return 1;
    case D_SCANS: set_int(d, "scan_count", S + 1); return 1;
    case D_SELECTED:
        set_int(d, "selected_detector_pixels", u64_of(d, "selected_detector_pixels") + 1);
        return 1;
    case D_COLUMNS: set_int(d, "detector_columns", b->cols + 1); return 1;
    case D_DTYPE: set_str(d, "dtype", "little-endian-u64"); return 1;
    case D_WORD_ORDER: set_str(d, "word_order", "big-endian-u32-pairs"); return 1;
    case D_WORDS: set_int(d, "words_per_scan", 6); return 1;
    case D_LAYOUT: json_object_set_new(d, "layout", json_pack("[s]", "total_lo")); return 1;
    case D_TOTAL_BOUND:
        snprintf(buf, sizeof buf, "%s0", str_of(d, "total_bound"));
        set_str(d, "total_bound", buf);
        return 1;
    case D_ROW_BOUND:
        snprintf(buf, sizeof buf, "%llu", strtoull(str_of(d, "row_moment_bound"), NULL, 10) + 1);
        set_str(d, "row_moment_bound", buf);
        return 1;
    case D_COL_BOUND:
        snprintf(buf, sizeof buf, "%llu", strtoull(str_of(d, "column_moment_bound"), NULL, 10) - 1);
        set_str(d, "column_moment_bound", buf);
        return 1;
    case D_BOUND_NUMBER:
        set_int(d, "total_bound", strtoull(str_of(d, "total_bound"), NULL, 10));
        return 1;
    case D_NARROW_INT:
        json_object_set_new(d, "narrow_integer",
                            json_boolean(!json_is_true(json_object_get(d, "narrow_integer"))));
        return 1;
    case D_NARROW_PROD:
        json_object_set_new(d, "narrow_products",
                            json_boolean(!json_is_true(json_object_get(d, "narrow_products"))));
        return 1;
    case D_OFFSET_ALIGN:
        /* Still inside the file (the moments may end it). */
        set_int(d, "file_offset", u64_of(d, "file_offset") - 2);
        return 1;
    case D_OFFSET_STRING:
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)u64_of(d, "file_offset"));
        set_str(d, "file_offset", buf);
        return 1;
    case D_OFFSET_NEGATIVE: json_object_set_new(d, "file_offset", json_integer(-32)); return 1;
    case D_OVER_METADATA: set_int(d, "file_offset", 0); return 1;
    case D_NARROW_NUMBER: set_int(d, "narrow_integer", 1); return 1;
    case D_FILE_BYTES: set_int(d, "file_bytes", 32 * S - 32); return 1;
    case D_PAST_END: set_int(d, "file_offset", ((uint64_t)f->n - 16) & ~3ull); return 1;
    case D_OVER_SHARD: {
        /* 4-aligned, inside the payload and the file, so only the
         * overlap is wrong. */
        const uint64_t at = (b->payload_offset + 3) & ~3ull;
        if (at >= b->payload_offset + b->payload_bytes || at + 32 * S > f->n)
            return 0;
        set_int(d, "file_offset", at);
        return 1;
    }
    case D_SHA_MALFORMED: {
        snprintf(buf, sizeof buf, "%s", str_of(d, "sha256"));
        for (char *c = buf; *c; c++)
            if (*c >= 'a' && *c <= 'f')
                *c = (char)(*c - 'a' + 'A');
        set_str(d, "sha256", buf);
        return 1;
    }
    case D_BYTE_FLIPPED: f->bytes[u64_of(d, "file_offset") + 5] ^= 0x10; return 1;
    case D_PADDING: {
        uint8_t *w = f->bytes + u64_of(d, "file_offset") + 32 * (S - 1);
        put_le32(w + 28, 1);
        update_sha(f, d, "sha256", u64_of(d, "file_offset"), 32 * S);
        return 1;
    }
    case D_TOTAL_HIGH:
        rewrite_scan(f, d, S, 0, strtoull(str_of(d, "total_bound"), NULL, 10) + 1, 0, 0);
        return 1;
    case D_ROW_HIGH:
        /* Within every bound, but no detector row gives it. */
        if (b->rows < 2)
            return 0;
        rewrite_scan(f, d, S, 1, 1, b->rows, 0);
        return 1;
    case D_COL_HIGH:
        if (b->cols < 2)
            return 0;
        rewrite_scan(f, d, S, 1, 1, 0, b->cols);
        return 1;
    case D_ZERO_TOTAL:
        if (b->rows < 2)
            return 0;
        rewrite_scan(f, d, S, 2, 0, 1, 0);
        return 1;
    case P_NOT_OBJECT:
        json_object_set_new(f->m, b->v3 ? PRODUCTS : PRODUCTS_U16, json_string("bf"));
        return 1;
    case P_ON_V1: json_object_set(f->m, PRODUCTS, products_of(&v3->f)); return 1;
    case P_ON_V3: json_object_set(f->m, PRODUCTS_U16, products_of(&v1->f)); return 1;
    case P_NO_CAL: json_object_del(f->m, "detector_calibration"); return 1;
    case P_SCHEMA: set_str(pr, "schema", "quantem.gpu.prepared-detector-products/v2"); return 1;
    case P_SOURCE: set_str(pr, "source_identity_sha256", other_hex); return 1;
    case P_WORKING:
        set_str(pr, b->v3 ? "working_uint8_sha256" : "working_logical_sha256", other_hex);
        return 1;
    case P_MASK_SHA: set_str(pr, "detector_mask_sha256", other_hex); return 1;
    case P_CAL_SHA: set_str(pr, "detector_calibration_sha256", other_hex); return 1;
    case P_CAL_CHANGED:
        /* A valid calibration the products were not made for. */
        set_str(json_object_get(f->m, "detector_calibration"), "method", "edited");
        return 1;
    case P_ENCODING:
        set_str(pr, "detector_calibration_digest_encoding", "canonical-json/v1");
        return 1;
    case P_SCAN_SHAPE: {
        const json_t *ss = json_object_get(b->f.m, "source_shape");
        const json_int_t r = json_integer_value(json_array_get(ss, 0));
        const json_int_t c = json_integer_value(json_array_get(ss, 1));
        json_object_set_new(pr, "scan_shape", json_pack("[II]", c, r == c ? c + 1 : r));
        return 1;
    }
    case P_DET_SHAPE:
        json_object_set_new(pr, "detector_shape",
                            json_pack("[II]", (json_int_t)b->rows, (json_int_t)b->cols + 1));
        return 1;
    case P_PRODUCT_DTYPE: set_str(pr, "product_dtype", "big-endian-u32"); return 1;
    case P_MASK_DTYPE: set_str(pr, "mask_dtype", "uint8-binary-column-major"); return 1;
    case P_MASK_RULE: set_str(pr, "mask_rule", "quantem.gpu.detector-mask-exclusive/v1"); return 1;
    case P_ORDER:
        json_object_set_new(pr, "product_order", json_pack("[sss]", "adf", "abf", "bf"));
        return 1;
    case P_TWO: json_array_remove(json_object_get(pr, "products"), 2); return 1;
    case P_NAME: set_str(p1, "name", "bf"); return 1;
    case P_CENTER: {
        json_t *c = json_object_get(p0, "center_px");
        json_array_set_new(c, 0, json_real(json_number_value(json_array_get(c, 0)) + 0.25));
        return 1;
    }
    case P_INNER:
        json_object_set_new(
            p1, "inner_radius_px",
            json_real(json_number_value(json_object_get(p1, "inner_radius_px")) + 0.01));
        return 1;
    case P_OUTER:
        json_object_set_new(
            p2, "outer_radius_px",
            json_real(json_number_value(json_object_get(p2, "outer_radius_px")) * 1.5));
        return 1;
    case P_SELECTED: {
        const uint64_t n = u64_of(p0, "selected_detector_pixels");
        set_int(p0, "selected_detector_pixels", n < P ? n + 1 : n - 1);
        return 1;
    }
    case P_MASK_BYTES: set_int(p1, "mask_file_bytes", P + 1); return 1;
    case P_VALUES_BYTES: set_int(p1, "values_file_bytes", 4 * S - 4); return 1;
    case P_MASK_PAST_END: set_int(p2, "mask_file_offset", (uint64_t)f->n - P / 2); return 1;
    case P_MASK_OVERLAP:
        set_int(p0, "mask_file_offset", u64_of(p1, "values_file_offset"));
        return 1;
    case P_OVER_MOMENTS: set_int(p2, "values_file_offset", u64_of(d, "file_offset")); return 1;
    case P_MASK_SHA_BAD: {
        snprintf(buf, sizeof buf, "%.63s", str_of(p0, "mask_sha256"));
        set_str(p0, "mask_sha256", buf);
        return 1;
    }
    case P_MASK_FLIP: f->bytes[u64_of(p0, "mask_file_offset")] ^= 1; return 1;
    case P_MASK_NOT_RULE: {
        /* An admitted pixel toggled: an authentic mask but not the rule. */
        const uint64_t mo = u64_of(p1, "mask_file_offset");
        uint64_t px = 0;
        while (px < P && b->excluded[px])
            px++;
        f->bytes[mo + px] ^= 1;
        update_sha(f, p1, "mask_sha256", mo, P);
        return 1;
    }
    case P_VALUE_HIGH: {
        const uint64_t vo = u64_of(p0, "values_file_offset");
        const uint64_t high = u64_of(p0, "selected_detector_pixels") * (b->v3 ? 255 : 65535) + 1;
        if (high > UINT32_MAX)
            return 0;
        put_le32(f->bytes + vo + 4 * (S / 2), (uint32_t)high);
        update_sha(f, p0, "values_sha256", vo, 4 * S);
        return 1;
    }
    case P_VALUES_FLIP: f->bytes[u64_of(p2, "values_file_offset") + 4 * S - 1] ^= 0x80; return 1;
    }
    return 0;
}

static int make_base(const char *path, base *b)
{
    memset(b, 0, sizeof *b);
    if (!pf_read(path, &b->f))
        return 0;
    qem_pack *p = NULL;
    qem_error err;
    CHECK_OK(qem_pack_open(path, NULL, &p, &err), &err);
    if (!p)
        return 0;
    qem_pack_info info = {.struct_size = sizeof info};
    qem_pack_get_info(p, &info, NULL);
    b->scans = info.scans;
    b->pixels = info.pixels;
    b->rows = info.shape[2];
    b->cols = info.shape[3];
    b->v3 = info.profile == QEM_PACK_UINT8_BITPACKED;
    uint8_t *ex = calloc((size_t)b->pixels, 1);
    uint32_t *list = malloc((size_t)(info.excluded_count + 1) * 4);
    qem_pack_get_excluded(p, list, (size_t)(info.excluded_count + 1) * 4, NULL);
    for (uint64_t i = 0; i < info.excluded_count; i++)
        ex[list[i]] = 1;
    free(list);
    b->excluded = ex;
    qem_pack_close(p);
    /* Shard 0's payload range: after the profile's header, the excluded
     * list and the identity (pack notes 1.5). */
    const uint8_t *ix = b->f.bytes + b->f.index_at;
    const uint32_t header = ix[7] == 3 ? 44 : 36;
    const uint32_t excluded = get_le32(ix + header);
    const uint8_t *rec = ix + header + 4 + 4 * excluded + 32;
    b->payload_offset = get_le64(rec);
    b->payload_bytes = get_le64(rec + 8);
    return 1;
}

static void free_base(base *b)
{
    pf_free(&b->f);
    free((void *)b->excluded);
}

static void test_refusals(void)
{
    base bases[2];
    /* copies[2]: the notes v3 fixture; copies[1]: v1 with exclusions. */
    const int ok3 = make_base(copies[2], &bases[0]), ok1 = make_base(copies[1], &bases[1]);
    CHECK(ok3 && ok1);
    if (!ok3 || !ok1)
        return;
    qem_error err;
    for (int which = 0; which < 2; which++) {
        /* The unchanged manifest re-serialised opens: a refusal below is
         * the mutation's. */
        char path[768];
        snprintf(path, sizeof path, "%s", test_path(which ? "control-v1.h5" : "control-v3.h5"));
        packfile f = pf_clone(&bases[which].f);
        CHECK(pf_write(&f, path));
        pf_free(&f);
        qem_pack *p = NULL;
        CHECK_OK(qem_pack_open(path, NULL, &p, &err), &err);
        qem_pack_info info = {.struct_size = sizeof info};
        if (p)
            qem_pack_get_info(p, &info, NULL);
        CHECK(p && info.has_prepared_dpc_moments && info.has_prepared_detector_products);
        qem_pack_close(p);
    }
    int cases = 0;
    for (int rule = 0; rule < RULE_COUNT; rule++) {
        for (int which = 0; which < 2; which++) {
            if (!(rule_bases[rule] & (which ? V1 : V3)))
                continue;
            const base *b = &bases[which];
            packfile f = pf_clone(&b->f);
            const int applied = mutate(rule, b, &bases[0], &bases[1], &f);
            if (!applied)
                fprintf(stderr, "rule '%s' (%s): nothing to mutate\n", rule_names[rule],
                        which ? "v1" : "v3");
            CHECK(applied);
            char name[64], path[768];
            snprintf(name, sizeof name, "rule-%02d-%s.h5", rule, which ? "v1" : "v3");
            snprintf(path, sizeof path, "%s", test_path(name));
            CHECK(applied && pf_write(&f, path));
            pf_free(&f);
            if (!applied)
                continue;
            qem_pack *p = NULL;
            memset(&err, 0, sizeof err);
            const qem_status st = qem_pack_open(path, NULL, &p, &err);
            if (st != QEM_E_PACK_PREPARED || !err.message[0])
                fprintf(stderr, "rule '%s' (%s): status %d, message '%s'\n", rule_names[rule],
                        which ? "v1" : "v3", (int)st, err.message);
            CHECK_STATUS(st, QEM_E_PACK_PREPARED, &err);
            CHECK(err.message[0] != '\0');
            if (!strstr(err.message, rule_words[rule]))
                fprintf(stderr, "rule '%s' (%s): message '%s' lacks '%s'\n", rule_names[rule],
                        which ? "v1" : "v3", err.message, rule_words[rule]);
            CHECK(strstr(err.message, rule_words[rule]) != NULL);
            CHECK(p == NULL);
            qem_pack_close(p);
            cases++;
        }
    }
    printf("  %d refusal cases over %d rules\n", cases, RULE_COUNT);
    free_base(&bases[0]);
    free_base(&bases[1]);
}

/* --- 5. qem verify: recorded values must be those of the data --------------------------- */

static qem_status verify_path(const char *path, qem_error *err)
{
    qem_container_options o;
    qem_container_options_init(&o);
    o.load = QEM_LOAD_LATER;
    qem_container *c = NULL;
    qem_status st = qem_container_open(path, &o, &c, err);
    if (st != QEM_OK)
        return st;
    qem_verify_options vo;
    qem_verify_options_init(&vo);
    qem_verify_report rep = {.struct_size = sizeof rep};
    st = qem_container_verify(c, &vo, &rep, err);
    if (st == QEM_OK)
        CHECK(strstr(rep.summary, "prepared values") != NULL);
    qem_container_close(c);
    return st;
}

static void test_verify(void)
{
    qem_error err;
    for (size_t k = 0; k < FIXTURE_COUNT; k++)
        CHECK_OK(verify_path(copies[k], &err), &err);
    for (int which = 0; which < 2; which++) {
        base b;
        CHECK(make_base(copies[which ? 1 : 2], &b));
        if (!b.f.m)
            continue;
        /* One scan's total one lower, still inside every open rule. */
        packfile f = pf_clone(&b.f);
        json_t *d = dpc_of(&f);
        const uint8_t *w0 = f.bytes + u64_of(d, "file_offset");
        uint64_t s = 0;
        for (; s < b.scans; s++) {
            const uint64_t t = get_le64(w0 + 32 * s), r = get_le64(w0 + 32 * s + 8),
                           c = get_le64(w0 + 32 * s + 16);
            if (t > 0 && r <= (t - 1) * (b.rows - 1) && c <= (t - 1) * (b.cols - 1)) {
                rewrite_scan(&f, d, b.scans, s, t - 1, r, c);
                break;
            }
        }
        CHECK(s < b.scans);
        char path[768];
        snprintf(path, sizeof path, "%s", test_path(which ? "verify-v1.h5" : "verify-v3.h5"));
        CHECK(pf_write(&f, path));
        pf_free(&f);
        qem_pack *p = NULL;
        CHECK_OK(qem_pack_open(path, NULL, &p, &err), &err);
        qem_pack_close(p);
        CHECK_STATUS(verify_path(path, &err), QEM_E_PACK_PREPARED, &err);
        CHECK(strstr(err.message, "differs") != NULL);

        /* A product value one lower where it is positive. */
        {
            f = pf_clone(&b.f);
            json_t *p0 = product_of(&f, 0);
            const uint64_t vo = u64_of(p0, "values_file_offset");
            uint64_t i = 0;
            while (i < b.scans && get_le32(f.bytes + vo + 4 * i) == 0)
                i++;
            CHECK(i < b.scans);
            if (i < b.scans) {
                put_le32(f.bytes + vo + 4 * i, get_le32(f.bytes + vo + 4 * i) - 1);
                update_sha(&f, p0, "values_sha256", vo, 4 * b.scans);
                snprintf(path, sizeof path, "%s",
                         test_path(which ? "verify-products-v1.h5" : "verify-products-v3.h5"));
                CHECK(pf_write(&f, path));
                p = NULL;
                CHECK_OK(qem_pack_open(path, NULL, &p, &err), &err);
                qem_pack_close(p);
                CHECK_STATUS(verify_path(path, &err), QEM_E_PACK_PREPARED, &err);
                CHECK(strstr(err.message, "differs") != NULL);
            }
            pf_free(&f);
        }
        free_base(&b);
    }
}

int main(void)
{
    test_digest_vector();
    test_fixture_copies();
    test_skipped_moments();
    test_products_past_32_bits();
    test_refusals();
    test_verify();
    return test_finish("unit_pack_prepared");
}
