/* Products on the upstream fixtures equal the expected products stored
 * beside them (../shared/fixtures/qem/ JSON "products", and the pack
 * fixtures' virtual images), through the fast and the reference path:
 * integers and float32 bits exactly, float64 references within 1e-6. */
#include <jansson.h>
#include <math.h>

#include "test_util.h"

/* Element k of a JSON array of rows (or a flat array). */
static const json_t *at2(const json_t *rows, uint64_t k, uint64_t cols)
{
    const json_t *first = json_array_get(rows, 0);
    if (json_is_array(first))
        return json_array_get(json_array_get(rows, k / cols), k % cols);
    return json_array_get(rows, k);
}

/* A JSON number, or "NaN" / "Infinity" / "-Infinity". */
static double number(const json_t *v)
{
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        return !strcmp(s, "NaN") ? NAN : !strcmp(s, "Infinity") ? INFINITY : -INFINITY;
    }
    return json_number_value(v);
}

static float bits_float(const json_t *v)
{
    uint32_t b = (uint32_t)strtoul(json_string_value(v), NULL, 16);
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static int same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0;
}

static int near(double got, double want)
{
    if (isnan(want) || isinf(want))
        return isnan(want) ? isnan(got) : got == want;
    return fabs(got - want) <= 1e-6 + 1e-6 * fabs(want);
}

static int64_t image_int(const qem_image *im, uint64_t k)
{
    return im->dtype == QEM_DTYPE_UINT32   ? ((uint32_t *)im->data)[k]
           : im->dtype == QEM_DTYPE_UINT64 ? (int64_t)((uint64_t *)im->data)[k]
           : im->dtype == QEM_DTYPE_UINT16 ? ((uint16_t *)im->data)[k]
                                           : ((uint8_t *)im->data)[k];
}

/* Opens a fixture as a source with a products session on `path_kind`. */
static qem_products *open_products(const char *rel, int path_kind, qem_container **src)
{
    qem_error e = {0};
    *src = NULL;
    CHECK_OK(qem_container_open(fixture_path(rel), NULL, src, &e), &e);
    qem_products_options o;
    qem_products_options_init(&o);
    qem_products *p = NULL;
    if (*src)
        CHECK_OK(qem_products_open_path(*src, &o, (qem_products_path)path_kind, &p, &e), &e);
    return p;
}

static void check_qem_fixture(const char *name, int path_kind)
{
    char rel[256];
    snprintf(rel, sizeof rel, "qem/%s.json", name);
    json_t *facts = test_load_json(fixture_path(rel));
    snprintf(rel, sizeof rel, "qem/%s.qem", name);
    qem_error e = {0};
    qem_container *src = NULL;
    qem_products *p = open_products(rel, path_kind, &src);
    if (!facts || !p)
        goto out;
    const json_t *prod = json_object_get(facts, "products"), *shape = json_object_get(facts, "shape");
    const uint64_t sc = (uint64_t)json_integer_value(json_array_get(shape, 1));
    const uint64_t dc = (uint64_t)json_integer_value(json_array_get(shape, 3));
    qem_container_info info = {.struct_size = sizeof info};
    qem_container_get_info(src, &info, NULL);
    const uint64_t P = info.pixels, S = info.scans;
    uint8_t *valid = malloc((size_t)P), *mask = malloc((size_t)P);
    qem_products_valid(p, valid, (size_t)P, NULL);
    const json_t *vm = json_object_get(prod, "virtual_mask");
    for (uint64_t px = 0; px < P; px++)
        mask[px] = (uint8_t)json_integer_value(at2(vm, px, dc));
    qem_image im;
    int bad = 0;
    const json_t *want;
    /* Virtual images over the mask (validity applied), and over every pixel. */
    if ((want = json_object_get(prod, "virtual_image_mask_and_valid"))) {
        CHECK_OK(qem_products_virtual(p, mask, &im, &e), &e);
        for (uint64_t s = 0; im.data && s < S; s++)
            bad += image_int(&im, s) != json_integer_value(at2(want, s, sc));
        qem_image_free(&im);
        uint8_t *all = malloc((size_t)P);
        memset(all, 1, (size_t)P);
        CHECK_OK(qem_products_virtual(p, all, &im, &e), &e);
        want = json_object_get(prod, "detector_sum_valid");
        for (uint64_t s = 0; im.data && s < S; s++)
            bad += image_int(&im, s) != json_integer_value(at2(want, s, sc));
        qem_image_free(&im);
        free(all);
    }
    if ((want = json_object_get(prod, "masked_sum_float32_bits"))) {
        /* Scaled codes: exact code sums, then float32 bits. */
        CHECK_OK(qem_products_virtual(p, mask, &im, &e), &e);
        for (uint64_t s = 0; im.data && s < S; s++)
            bad += !same_float(((float *)im.data)[s], bits_float(json_array_get(want, s)));
        qem_image_free(&im);
        int32_t *w = malloc((size_t)P * sizeof *w);
        int64_t *sums = malloc((size_t)S * sizeof *sums);
        for (uint64_t px = 0; px < P; px++)
            w[px] = mask[px];
        const int32_t *planes[1] = {w};
        CHECK_OK(qem_products_weighted_sums(p, 0, S, planes, 1, sums, (size_t)S * sizeof *sums, &e), &e);
        want = json_object_get(prod, "masked_code_sum_uint64");
        for (uint64_t s = 0; s < S; s++)
            bad += sums[s] != json_integer_value(at2(want, s, sc));
        free(w);
        free(sums);
    }
    if ((want = json_object_get(prod, "virtual_image_mask_kahan_float32"))) {
        CHECK_OK(qem_products_virtual(p, mask, &im, &e), &e);
        for (uint64_t s = 0; im.data && s < S; s++)
            bad += !near(((float *)im.data)[s], number(at2(want, s, sc)));
        qem_image_free(&im);
    }
    CHECK_EQ_U64(bad, 0);

    /* Mean pattern: float32 bits exactly for counts (invalid pixels 0). */
    CHECK_OK(qem_products_mean(p, &im, &e), &e);
    bad = 0;
    if ((want = json_object_get(prod, "mean_dp_float32_bits"))) {
        for (uint64_t px = 0; im.data && px < P; px++)
            bad += !same_float(((float *)im.data)[px],
                               valid[px] ? bits_float(json_array_get(want, px)) : 0.0f);
    } else if ((want = json_object_get(prod, "mean_dp_float32_of_float64"))) {
        for (uint64_t px = 0; im.data && px < P; px++)
            if (!near(((float *)im.data)[px], number(at2(want, px, dc)))) {
                fprintf(stderr, "%s mean pixel %llu: %.9g, want %.9g\n", name,
                        (unsigned long long)px, ((float *)im.data)[px], number(at2(want, px, dc)));
                bad++;
            }
    } else if ((want = json_object_get(prod, "mean_dp_float64_of_restored"))) {
        for (uint64_t px = 0; im.data && px < P; px++)
            bad += !near(((float *)im.data)[px], number(at2(want, px, dc)));
    }
    CHECK_EQ_U64(bad, 0);
    qem_image_free(&im);

    /* Exact per-pixel totals of valid pixels. */
    if ((want = json_object_get(prod, "detector_total_uint64"))) {
        uint64_t *sums = calloc((size_t)P, sizeof *sums);
        CHECK_OK(qem_products_pixel_sums(p, 0, S, sums, (size_t)P * sizeof *sums, &e), &e);
        bad = 0;
        for (uint64_t px = 0; px < P; px++)
            bad += valid[px] && (json_int_t)sums[px] != json_integer_value(at2(want, px, dc));
        CHECK_EQ_U64(bad, 0);
        free(sums);
    }

    /* Absolute centre of mass: float32 of the float64 reference. The
     * fixtures' reference counts every pixel; qem leaves invalid pixels
     * out (doc/products.md), so a fixture with invalid pixels is checked
     * against the same sums over its valid pixels, from its .npy. */
    uint64_t n_valid = 0;
    for (uint64_t px = 0; px < P; px++)
        n_valid += valid[px];
    if ((want = json_object_get(prod, "com_abs_row_float64"))) {
        const json_t *want_c = json_object_get(prod, "com_abs_col_float64");
        CHECK_OK(qem_products_com(p, NULL, 0, &im, &e), &e);
        bad = 0;
        const int is_float = info.working_dtype == QEM_DTYPE_FLOAT32 &&
                             !json_object_get(prod, "masked_sum_float32_bits");
        double *dense = NULL;
        if (n_valid < P) {
            snprintf(rel, sizeof rel, "qem/%s.npy", name);
            qem_npy *npy = NULL;
            CHECK_OK(qem_npy_open(fixture_path(rel), &npy, &e), &e);
            qem_npy_info ni = {.struct_size = sizeof ni};
            qem_npy_get_info(npy, &ni, NULL);
            uint16_t *v = malloc((size_t)(S * P) * 2);
            CHECK(ni.dtype == QEM_DTYPE_UINT16);
            CHECK_OK(qem_npy_read(npy, 0, S * P, v, npy_read_size(npy, S * P), &e), &e);
            qem_npy_close(npy);
            dense = malloc((size_t)(2 * S) * sizeof *dense);
            for (uint64_t s = 0; s < S; s++) {
                double t = 0, mr = 0, mc = 0;
                for (uint64_t px = 0; px < P; px++)
                    if (valid[px]) {
                        t += v[s * P + px];
                        mr += (double)v[s * P + px] * (double)(px / dc);
                        mc += (double)v[s * P + px] * (double)(px % dc);
                    }
                dense[2 * s] = t ? mr / t : NAN;
                dense[2 * s + 1] = t ? mc / t : NAN;
            }
            free(v);
        }
        for (uint64_t s = 0; im.data && s < S; s++) {
            const double wr = dense ? dense[2 * s] : number(at2(want, s, sc));
            const double wc = dense ? dense[2 * s + 1] : number(at2(want_c, s, sc));
            const float *got = (float *)im.data + 2 * s;
            if (is_float)
                bad += !near(got[0], wr) || !near(got[1], wc);
            else
                bad += !same_float(got[0], (float)wr) || !same_float(got[1], (float)wc);
        }
        CHECK_EQ_U64(bad, 0);
        free(dense);
        qem_image_free(&im);
    }

    /* The example pattern, invalid pixels 0. */
    const json_t *ex = json_object_get(prod, "point_dp_example");
    if ((want = json_object_get(ex, "values"))) {
        const json_t *at = json_object_get(ex, "scan");
        const uint64_t scan = (uint64_t)json_integer_value(json_array_get(at, 0)) * sc +
                              (uint64_t)json_integer_value(json_array_get(at, 1));
        CHECK_OK(qem_products_frame(p, scan, &im, &e), &e);
        bad = 0;
        for (uint64_t px = 0; im.data && px < P; px++)
            bad += image_int(&im, px) != (valid[px] ? json_integer_value(at2(want, px, dc)) : 0);
        CHECK_EQ_U64(bad, 0);
        qem_image_free(&im);
    }
    free(valid);
    free(mask);
out:
    qem_products_close(p);
    qem_container_close(src);
    json_decref(facts);
}

/* The pack fixtures' expected virtual images through the products API. */
static void check_pack_fixture(const char *name, int path_kind)
{
    char rel[256];
    snprintf(rel, sizeof rel, "pack/%s.json", name);
    json_t *facts = test_load_json(fixture_path(rel));
    snprintf(rel, sizeof rel, "pack/%s.h5", name);
    qem_error e = {0};
    qem_container *src = NULL;
    qem_products *p = open_products(rel, path_kind, &src);
    if (facts && p) {
        qem_container_info info = {.struct_size = sizeof info};
        qem_container_get_info(src, &info, NULL);
        size_t i;
        json_t *vi;
        int images = 0;
        json_array_foreach(json_object_get(facts, "virtual_images"), i, vi) {
            uint8_t *mask = malloc((size_t)info.pixels);
            for (uint64_t px = 0; px < info.pixels; px++)
                mask[px] = (uint8_t)json_integer_value(
                    at2(json_object_get(vi, "mask"), px, info.shape[3]));
            qem_image im;
            CHECK_OK(qem_products_virtual(p, mask, &im, &e), &e);
            const json_t *want = json_object_get(json_object_get(vi, "mask_applied"), "image");
            int bad = 0;
            for (uint64_t s = 0; im.data && s < info.scans; s++)
                bad += image_int(&im, s) != json_integer_value(at2(want, s, info.shape[1]));
            CHECK_EQ_U64(bad, 0);
            qem_image_free(&im);
            free(mask);
            images++;
        }
        CHECK(images > 0);
    }
    qem_products_close(p);
    qem_container_close(src);
    json_decref(facts);
}

int main(void)
{
    static const char *const qem[] = {"u8_sparse_lowdose", "u16_dense_highdose",
                                      "u16_nonsquare_masked", "f32_special_bits",
                                      "scaled_u16_regions"};
    static const char *const packs[] = {"v1_u16_4x32_16x16", "v1_u16_excluded_retained",
                                        "v3_upstream_test_writer_legacy_nonportable",
                                        "v3_upstream_test_writer_notes_v3"};
    for (int path_kind = 0; path_kind < 2; path_kind++) {
        for (size_t i = 0; i < sizeof qem / sizeof qem[0]; i++)
            check_qem_fixture(qem[i], path_kind);
        for (size_t i = 0; i < sizeof packs / sizeof packs[0]; i++)
            check_pack_fixture(packs[i], path_kind);
    }
    return test_finish("golden_products_fixtures");
}
