/* Product image writers: .npy keeps every dtype exactly, TIFF pages hold
 * the float32 conversion, PNG follows the percentile contrast rule, and
 * refusals and failures publish nothing and leave no temporary behind. */
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/resource.h>
#include <tiffio.h>

#include "products/image_out.h"
#include "test_util.h"

static qem_status write_image(const char *path, qem_dtype dtype, unsigned ndim, uint64_t rows,
                              uint64_t cols, uint64_t k, const void *data, qem_error *e)
{
    product_array a = {dtype, ndim, {rows, cols, k}, data};
    return qem_product_write_image(path, &a, e);
}

/* Entries of the test folder, including "." and "..". */
static int entries(void)
{
    return count_entries(test_dir(), "");
}

/* --- .npy: parse the header by hand (the reader takes u8/u16/f32 only) -- */

typedef struct npy_view {
    char descr[16];
    char shape[64];
    const uint8_t *data;
    size_t data_len;
} npy_view;

/* Fills `v` from a whole .npy in `buf`; returns 0 if it is malformed. */
static int npy_parse(const uint8_t *buf, size_t size, npy_view *v)
{
    if (size < 10 || memcmp(buf, "\x93NUMPY", 6) != 0 || buf[6] != 1)
        return 0;
    size_t hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
    if (10 + hlen > size || (10 + hlen) % 64 != 0)
        return 0;
    char dict[1024];
    if (hlen >= sizeof dict)
        return 0;
    memcpy(dict, buf + 10, hlen);
    dict[hlen] = '\0';
    if (!strstr(dict, "'fortran_order': False"))
        return 0;
    const char *d = strstr(dict, "'descr': '");
    const char *s = strstr(dict, "'shape': (");
    if (!d || !s)
        return 0;
    d += strlen("'descr': '");
    s += strlen("'shape': ");
    const char *d_end = strchr(d, '\'');
    const char *s_end = strchr(s, ')');
    if (!d_end || !s_end || (size_t)(d_end - d) >= sizeof v->descr ||
        (size_t)(s_end - s + 1) >= sizeof v->shape)
        return 0;
    memcpy(v->descr, d, (size_t)(d_end - d));
    v->descr[d_end - d] = '\0';
    memcpy(v->shape, s, (size_t)(s_end - s + 1));
    v->shape[s_end - s + 1] = '\0';
    v->data = buf + 10 + hlen;
    v->data_len = size - 10 - hlen;
    return 1;
}

static void check_npy(const char *name, qem_dtype dtype, const char *descr, const void *data,
                      size_t item)
{
    qem_error e = {0};
    /* 2-D (3, 4) and 3-D (3, 4, 2) of the same leading bytes. */
    for (unsigned ndim = 2; ndim <= 3; ndim++) {
        char file[64];
        snprintf(file, sizeof file, "%s_%uD.npy", name, ndim);
        const char *path = test_path(file);
        uint64_t k = ndim == 3 ? 2 : 1;
        CHECK_OK(write_image(path, dtype, ndim, 3, 4, k, data, &e), &e);
        size_t size = 0;
        uint8_t *buf = read_file(path, &size);
        CHECK(buf != NULL);
        npy_view v;
        memset(&v, 0, sizeof v);
        CHECK(buf && npy_parse(buf, size, &v));
        CHECK(strcmp(v.descr, descr) == 0);
        CHECK(strcmp(v.shape, ndim == 3 ? "(3, 4, 2)" : "(3, 4)") == 0);
        CHECK_EQ_U64(v.data_len, 12 * k * item);
        CHECK(v.data && v.data_len == 12 * k * item && memcmp(v.data, data, v.data_len) == 0);
        free(buf);
        /* The library's own reader agrees where it supports the dtype. */
        if (dtype == QEM_DTYPE_UINT8 || dtype == QEM_DTYPE_UINT16 || dtype == QEM_DTYPE_FLOAT32) {
            qem_npy *n = NULL;
            CHECK_OK(qem_npy_open(path, &n, &e), &e);
            if (n) {
                qem_npy_info info = {.struct_size = sizeof info};
                qem_npy_get_info(n, &info, NULL);
                CHECK_EQ_U64(info.dtype, dtype);
                CHECK_EQ_U64(info.ndim, ndim);
                uint8_t back[24 * 8];
                CHECK_OK(qem_npy_read(n, 0, 12 * k, back, npy_read_size(n, 12 * k), &e), &e);
                CHECK(memcmp(back, data, 12 * k * item) == 0);
                qem_npy_close(n);
            }
        }
    }
}

static void test_npy(void)
{
    uint8_t u8[24];
    uint16_t u16[24];
    uint32_t u32[24];
    uint64_t u64[24];
    float f32[24];
    double f64[24];
    for (int i = 0; i < 24; i++) {
        u8[i] = (uint8_t)(i * 11);
        u16[i] = (uint16_t)(i * 2741);
        u32[i] = 4000000000u - (uint32_t)i * 123457u;
        u64[i] = ((uint64_t)1 << 53) + 1 + (uint64_t)i * 0x123456789ull; /* not float64-exact */
        f32[i] = (float)i * 0.1f - 1.0f;
        f64[i] = (double)i * 0.1 + 1e-300;
    }
    u64[23] = UINT64_MAX;
    f64[22] = 1e300;
    check_npy("u8", QEM_DTYPE_UINT8, "|u1", u8, 1);
    check_npy("u16", QEM_DTYPE_UINT16, "<u2", u16, 2);
    check_npy("u32", QEM_DTYPE_UINT32, "<u4", u32, 4);
    check_npy("u64", QEM_DTYPE_UINT64, "<u8", u64, 8);
    check_npy("f32", QEM_DTYPE_FLOAT32, "<f4", f32, 4);
    check_npy("f64", QEM_DTYPE_FLOAT64, "<f8", f64, 8);
}

/* --- TIFF ------------------------------------------------------------------ */

/* Reads every page of a float32 TIFF (page-major), checking each page's
 * tags; returns NULL on any mismatch. Caller frees. */
static float *read_tiff(const char *path, uint32_t *width, uint32_t *height, int *pages)
{
    TIFF *tif = TIFFOpen(path, "r");
    CHECK(tif != NULL);
    if (!tif)
        return NULL;
    int count = TIFFNumberOfDirectories(tif);
    uint32_t w = 0, h = 0;
    TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
    TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
    float *out = count > 0 && w && h ? malloc((size_t)count * w * h * sizeof *out) : NULL;
    int ok = out != NULL;
    for (int p = 0; ok && p < count; p++) {
        ok = TIFFSetDirectory(tif, (tdir_t)p);
        uint32_t pw = 0, ph = 0;
        uint16_t bits = 0, format = 0, spp = 0, photometric = 0, compression = 0, planar = 0;
        TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &pw);
        TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &ph);
        TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bits);
        TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &format);
        TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &spp);
        TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photometric);
        TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &compression);
        TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
        CHECK(pw == w && ph == h);
        CHECK_EQ_U64(bits, 32);
        CHECK_EQ_U64(format, SAMPLEFORMAT_IEEEFP);
        CHECK_EQ_U64(spp, 1);
        CHECK_EQ_U64(photometric, PHOTOMETRIC_MINISBLACK);
        CHECK_EQ_U64(planar, PLANARCONFIG_CONTIG);
        CHECK(compression == COMPRESSION_NONE || compression == COMPRESSION_ADOBE_DEFLATE ||
              compression == COMPRESSION_LZW);
        if (count > 1) {
            /* Multi-page files say which page is which. */
            uint32_t kind = 0;
            uint16_t page = 0, of = 0;
            TIFFGetField(tif, TIFFTAG_SUBFILETYPE, &kind);
            TIFFGetField(tif, TIFFTAG_PAGENUMBER, &page, &of);
            CHECK_EQ_U64(kind, FILETYPE_PAGE);
            CHECK(page == p && of == count);
        }
        ok = ok && pw == w && ph == h && bits == 32 && format == SAMPLEFORMAT_IEEEFP && spp == 1;
        for (uint32_t r = 0; ok && r < h; r++)
            ok = TIFFReadScanline(tif, out + ((size_t)p * h + r) * w, r, 0) == 1;
    }
    TIFFClose(tif);
    CHECK(ok);
    if (!ok) {
        free(out);
        return NULL;
    }
    *width = w;
    *height = h;
    *pages = count;
    return out;
}

/* Writes a (rows, cols) image of `dtype` to .tif and checks every pixel is
 * (float)value; `expect` holds those floats computed by the caller. */
static void check_tiff_2d(const char *name, qem_dtype dtype, uint64_t rows, uint64_t cols,
                          const void *data, const float *expect)
{
    qem_error e = {0};
    const char *path = test_path(name);
    CHECK_OK(write_image(path, dtype, 2, rows, cols, 1, data, &e), &e);
    uint32_t w = 0, h = 0;
    int pages = 0;
    float *back = read_tiff(path, &w, &h, &pages);
    CHECK_EQ_U64(w, cols);
    CHECK_EQ_U64(h, rows);
    CHECK_EQ_U64(pages, 1);
    if (back && w == cols && h == rows) {
        int same = 1;
        for (uint64_t i = 0; i < rows * cols; i++)
            same &= isnan(expect[i]) ? isnan(back[i]) : back[i] == expect[i];
        CHECK(same);
    }
    free(back);
}

static void test_tiff(void)
{
    /* Every dtype, 3 x 5, values that are exact in float32 unless noted. */
    uint8_t u8[15];
    uint16_t u16[15];
    uint32_t u32[15];
    uint64_t u64[15];
    float f32[15];
    double f64[15];
    float expect[6][15];
    for (int i = 0; i < 15; i++) {
        u8[i] = (uint8_t)(255 - i * 17);
        u16[i] = (uint16_t)(i * 4001);
        u32[i] = (uint32_t)i * 1000003u;
        u64[i] = (uint64_t)i * 77777;
        f32[i] = (float)i * 0.1f - 0.7f;
        f64[i] = (double)i * 0.1 - 0.7;
        expect[0][i] = (float)u8[i];
        expect[1][i] = (float)u16[i];
        expect[2][i] = (float)u32[i];
        expect[3][i] = (float)u64[i];
        expect[4][i] = f32[i];
        expect[5][i] = (float)f64[i];
    }
    /* Documented rounding: integer sums above 2^24 are not exact in float32. */
    u32[14] = 16777217u;
    u64[14] = ((uint64_t)1 << 24) + 1;
    u64[13] = ((uint64_t)1 << 40) + 3;
    expect[2][14] = 16777216.0f;
    expect[3][14] = 16777216.0f;
    expect[3][13] = (float)((uint64_t)1 << 40);
    f32[3] = NAN;
    f32[4] = -INFINITY;
    expect[4][3] = NAN;
    expect[4][4] = -INFINITY;
    f64[5] = 1e300; /* beyond float32: +inf */
    expect[5][5] = INFINITY;
    check_tiff_2d("u8.tif", QEM_DTYPE_UINT8, 3, 5, u8, expect[0]);
    check_tiff_2d("u16.tiff", QEM_DTYPE_UINT16, 3, 5, u16, expect[1]);
    check_tiff_2d("u32.TIF", QEM_DTYPE_UINT32, 3, 5, u32, expect[2]);
    check_tiff_2d("u64.Tiff", QEM_DTYPE_UINT64, 3, 5, u64, expect[3]);
    check_tiff_2d("f32.tif", QEM_DTYPE_FLOAT32, 3, 5, f32, expect[4]);
    check_tiff_2d("f64.tif", QEM_DTYPE_FLOAT64, 3, 5, f64, expect[5]);
    CHECK((double)expect[3][14] != (double)u64[14]); /* the rounding is real */

    /* Many strips: a 300 x 700 float32 image. */
    size_t big_n = 300 * 700;
    float *big = malloc(big_n * sizeof *big);
    uint64_t seed = 7;
    for (size_t i = 0; i < big_n; i++)
        big[i] = (float)(test_rand(&seed) % 100000) / 7.0f;
    check_tiff_2d("big.tif", QEM_DTYPE_FLOAT32, 300, 700, big, big);
    free(big);

    /* A (4, 3, 2) centre-of-mass map: two pages, page k = component k. */
    double com[4 * 3 * 2];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++) {
            com[(r * 3 + c) * 2 + 0] = r + 0.25 * c;       /* row component */
            com[(r * 3 + c) * 2 + 1] = -(c + 0.5 * r);     /* column component */
        }
    qem_error e = {0};
    const char *path = test_path("com.tif");
    CHECK_OK(write_image(path, QEM_DTYPE_FLOAT64, 3, 4, 3, 2, com, &e), &e);
    uint32_t w = 0, h = 0;
    int pages = 0;
    float *back = read_tiff(path, &w, &h, &pages);
    CHECK_EQ_U64(pages, 2);
    CHECK_EQ_U64(w, 3);
    CHECK_EQ_U64(h, 4);
    if (back && pages == 2 && w == 3 && h == 4) {
        int same = 1;
        for (int k = 0; k < 2; k++)
            for (int r = 0; r < 4; r++)
                for (int c = 0; c < 3; c++)
                    same &= back[(k * 4 + r) * 3 + c] == (float)com[(r * 3 + c) * 2 + k];
        CHECK(same);
        CHECK(back[1 * 12 + 1 * 3 + 2] == -2.5f); /* page 1, row 1, column 2 */
    }
    free(back);
}

/* --- PNG ------------------------------------------------------------------- */

/* Reads an 8-bit grayscale PNG; returns NULL if it is anything else. */
static uint8_t *read_png(const char *path, uint32_t *width, uint32_t *height)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_read_struct(&png, &info, NULL);
        fclose(f);
        return NULL;
    }
    uint8_t *volatile pixels = NULL; /* set after setjmp */
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        fclose(f);
        free(pixels);
        return NULL;
    }
    png_init_io(png, f);
    png_read_info(png, info);
    png_uint_32 w = 0, h = 0;
    int depth = 0, color = 0, interlace = 0;
    png_get_IHDR(png, info, &w, &h, &depth, &color, &interlace, NULL, NULL);
    if (depth != 8 || color != PNG_COLOR_TYPE_GRAY || interlace != PNG_INTERLACE_NONE)
        png_error(png, "not a plain 8-bit grayscale PNG");
    pixels = malloc((size_t)w * h);
    if (!pixels)
        png_error(png, "out of memory");
    for (png_uint_32 r = 0; r < h; r++)
        png_read_row(png, pixels + (size_t)r * w, NULL);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    fclose(f);
    *width = w;
    *height = h;
    return pixels;
}

/* Nearest-rank percentile by its definition: the smallest finite value v
 * with at least permille/1000 of the finite values <= v. */
static double brute_percentile(const double *v, size_t n, unsigned permille)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += isfinite(v[i]) != 0;
    double best = INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i]) || v[i] >= best)
            continue;
        size_t at_most = 0;
        for (size_t j = 0; j < n; j++)
            at_most += isfinite(v[j]) && v[j] <= v[i];
        if (at_most * 1000 >= (size_t)permille * m)
            best = v[i];
    }
    return best;
}

static uint8_t expected_level(double x, double lo, double hi)
{
    if (!isfinite(x))
        return 0;
    if (lo == hi)
        return x < lo ? 0 : x > hi ? 255 : 128;
    double level = floor((x - lo) / (hi - lo) * 255.0 + 0.5);
    return level < 0 ? 0 : level > 255 ? 255 : (uint8_t)level;
}

/* Writes a 2-D image to PNG and compares every byte with `expect`. */
static void check_png(const char *name, qem_dtype dtype, uint32_t rows, uint32_t cols,
                      const void *data, const uint8_t *expect)
{
    qem_error e = {0};
    const char *path = test_path(name);
    CHECK_OK(write_image(path, dtype, 2, rows, cols, 1, data, &e), &e);
    uint32_t w = 0, h = 0;
    uint8_t *back = read_png(path, &w, &h);
    CHECK(back != NULL);
    CHECK_EQ_U64(w, cols);
    CHECK_EQ_U64(h, rows);
    if (back && w == cols && h == rows) {
        size_t bad = 0;
        for (size_t i = 0; i < (size_t)rows * cols; i++)
            bad += back[i] != expect[i];
        CHECK_EQ_U64(bad, 0);
    }
    free(back);
}

static void test_png(void)
{
    /* A uint16 ramp 0..999: m = 1000, so P0.5 is rank 5 (value 4) and
     * P99.5 rank 995 (value 994); the rest is linear. */
    uint16_t ramp[1000];
    uint8_t expect[2000];
    for (int i = 0; i < 1000; i++) {
        ramp[i] = (uint16_t)i;
        expect[i] = i <= 4 ? 0 : i >= 994 ? 255 : (uint8_t)floor((i - 4) / 990.0 * 255.0 + 0.5);
    }
    CHECK(expect[4] == 0 && expect[5] == 0 && expect[6] == 1 && expect[499] == 128 &&
          expect[993] == 255 && expect[994] == 255);
    check_png("ramp.png", QEM_DTYPE_UINT16, 10, 100, ramp, expect);

    /* A shuffled float32 ramp with outliers, NaN and infinities (40 x 50):
     * percentiles over the finite values only, by brute force. */
    float f[2000];
    double as_double[2000];
    for (int i = 0; i < 2000; i++)
        f[i] = (float)((i * 7919) % 2000) * 0.5f;
    f[0] = NAN;
    f[1] = INFINITY;
    f[2] = -INFINITY;
    f[3] = 1e6f;
    f[4] = -1e6f;
    for (int i = 0; i < 2000; i++)
        as_double[i] = f[i];
    double lo = brute_percentile(as_double, 2000, 5);
    double hi = brute_percentile(as_double, 2000, 995);
    CHECK(lo > -1e6 && hi < 1e6 && lo < hi);
    int zeros = 0, fulls = 0, mids = 0;
    for (int i = 0; i < 2000; i++) {
        expect[i] = expected_level(as_double[i], lo, hi);
        zeros += expect[i] == 0;
        fulls += expect[i] == 255;
        mids += expect[i] > 0 && expect[i] < 255;
    }
    CHECK(expect[0] == 0 && expect[1] == 0 && expect[2] == 0 && expect[3] == 255 &&
          expect[4] == 0);
    CHECK(zeros > 3 && fulls > 1 && mids > 1900);
    check_png("shuffled.PNG", QEM_DTYPE_FLOAT32, 40, 50, f, expect);

    /* Constant image: mid-grey. */
    double constant[12];
    for (int i = 0; i < 12; i++)
        constant[i] = 7.5;
    memset(expect, 128, 12);
    check_png("constant.png", QEM_DTYPE_FLOAT64, 3, 4, constant, expect);
    /* Constant but for a NaN pixel: the NaN is 0, the rest 128. */
    constant[5] = NAN;
    expect[5] = 0;
    check_png("constant_nan.png", QEM_DTYPE_FLOAT64, 3, 4, constant, expect);
    /* No finite value at all: black. */
    for (int i = 0; i < 12; i++)
        constant[i] = i % 2 ? NAN : -INFINITY;
    memset(expect, 0, 12);
    check_png("no_finite.png", QEM_DTYPE_FLOAT64, 4, 3, constant, expect);

    /* lo == hi though values differ: equal 128, below 0, above 255. */
    uint8_t step[1000];
    memset(step, 5, sizeof step);
    step[10] = 9;
    step[20] = 1;
    memset(expect, 128, 1000);
    expect[10] = 255;
    expect[20] = 0;
    check_png("step.png", QEM_DTYPE_UINT8, 20, 50, step, expect);

    /* uint64 counts and uint32 use the same rule. */
    uint64_t u64[6] = {0, 1, 2, 3, 4, ((uint64_t)1 << 40)};
    uint32_t u32[6] = {10, 20, 30, 40, 50, 60};
    /* m = 6: P0.5 rank 1, P99.5 rank 6: min and max. */
    for (int i = 0; i < 6; i++)
        expect[i] = expected_level((double)u64[i], 0, (double)((uint64_t)1 << 40));
    check_png("u64.png", QEM_DTYPE_UINT64, 2, 3, u64, expect);
    const uint8_t u32_expect[6] = {0, 51, 102, 153, 204, 255};
    check_png("u32.png", QEM_DTYPE_UINT32, 3, 2, u32, u32_expect);

    /* 3-D arrays are refused with a pointer to .npy or .tif. */
    qem_error e = {0};
    int before = entries();
    float com[2 * 2 * 2] = {0};
    CHECK_STATUS(write_image(test_path("com.png"), QEM_DTYPE_FLOAT32, 3, 2, 2, 2, com, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, ".npy") != NULL && strstr(e.message, ".tif") != NULL);
    CHECK(!file_exists(test_path("com.png")));
    CHECK_EQ_U64(entries(), before);
}

/* --- refusals -------------------------------------------------------------- */

static void test_formats(void)
{
    CHECK(qem_product_image_format("a.npy") &&
          strcmp(qem_product_image_format("a.npy"), "npy") == 0);
    CHECK(qem_product_image_format("d/A.NPY") &&
          strcmp(qem_product_image_format("d/A.NPY"), "npy") == 0);
    CHECK(qem_product_image_format("a.tif") &&
          strcmp(qem_product_image_format("a.tif"), "tiff") == 0);
    CHECK(qem_product_image_format("a.TiFf") &&
          strcmp(qem_product_image_format("a.TiFf"), "tiff") == 0);
    CHECK(qem_product_image_format("x.y.Png") &&
          strcmp(qem_product_image_format("x.y.Png"), "png") == 0);
    CHECK(qem_product_image_format("a.jpg") == NULL);
    CHECK(qem_product_image_format("png") == NULL);
    CHECK(qem_product_image_format("a.png.bak") == NULL);
    CHECK(qem_product_image_format("dir.png/image") == NULL);
    CHECK(qem_product_image_format("a.") == NULL);
    CHECK(qem_product_image_format(NULL) == NULL);
}

static void test_refusals(void)
{
    qem_error e = {0};
    uint16_t data[64] = {1, 2, 3};
    int before = entries();

    /* Unknown extensions name the accepted ones. */
    const char *unknown[] = {"x.jpg", "x", "x.npy.bak", "x.tifff"};
    for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) {
        CHECK_STATUS(write_image(test_path(unknown[i]), QEM_DTYPE_UINT16, 2, 2, 2, 1, data, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        CHECK(strstr(e.message, ".npy") && strstr(e.message, ".tif") &&
              strstr(e.message, ".tiff") && strstr(e.message, ".png"));
        CHECK(!file_exists(test_path(unknown[i])));
    }

    /* Malformed arrays, for every format. */
    const char *names[] = {"bad.npy", "bad.tif", "bad.png"};
    for (int f = 0; f < 3; f++) {
        const char *path = test_path(names[f]);
        CHECK_STATUS(qem_product_write_image(path, NULL, &e), QEM_E_INVALID_ARGUMENT, &e);
        CHECK_STATUS(write_image(path, QEM_DTYPE_UINT16, 2, 2, 2, 1, NULL, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        CHECK_STATUS(write_image(NULL, QEM_DTYPE_UINT16, 2, 2, 2, 1, data, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        CHECK_STATUS(write_image(path, QEM_DTYPE_UINT16, 1, 4, 1, 1, data, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        CHECK_STATUS(write_image(path, QEM_DTYPE_UINT16, 4, 2, 2, 2, data, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        CHECK_STATUS(write_image(path, QEM_DTYPE_UINT16, 2, 0, 2, 1, data, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        CHECK_STATUS(write_image(path, QEM_DTYPE_UINT16, 2, 2, 0, 1, data, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        CHECK_STATUS(write_image(path, QEM_DTYPE_UINT16, 3, 2, 2, 0, data, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        CHECK_STATUS(write_image(path, QEM_DTYPE_NONE, 2, 2, 2, 1, data, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        CHECK(strstr(e.message, "dtype") != NULL);
        CHECK_STATUS(write_image(path, (qem_dtype)99, 2, 2, 2, 1, data, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        /* rows * cols * K overflows 64 bits (the data is never touched). */
        CHECK_STATUS(write_image(path, QEM_DTYPE_UINT8, 3, (uint64_t)1 << 32, (uint64_t)1 << 32,
                                 2, data, &e),
                     QEM_E_LIMIT, &e);
        CHECK_STATUS(write_image(path, QEM_DTYPE_UINT64, 2, (uint64_t)1 << 31, (uint64_t)1 << 31,
                                 1, data, &e),
                     QEM_E_LIMIT, &e);
        CHECK(!file_exists(path));
    }

    /* A folder that does not exist: refused, nothing created. */
    const char *nodir[] = {"missing/a.npy", "missing/a.tif", "missing/a.png"};
    for (int f = 0; f < 3; f++) {
        qem_status st = write_image(test_path(nodir[f]), QEM_DTYPE_UINT16, 2, 2, 2, 1, data, &e);
        CHECK(st != QEM_OK);
        CHECK(e.status == st && e.message[0] != '\0');
    }
    CHECK(!file_exists(test_path("missing")));
    CHECK_EQ_U64(entries(), before);

    /* Existing destinations are refused and left untouched. */
    const char *taken[] = {"taken.npy", "taken.tif", "taken.png", "TAKEN.TIFF"};
    for (size_t i = 0; i < sizeof taken / sizeof *taken; i++) {
        const char *path = test_path(taken[i]);
        CHECK(write_file(path, "keep", 4));
        int with_it = entries();
        CHECK_STATUS(write_image(path, QEM_DTYPE_UINT16, 2, 2, 2, 1, data, &e), QEM_E_EXISTS,
                     &e);
        size_t size = 0;
        uint8_t *back = read_file(path, &size);
        CHECK(back && size == 4 && memcmp(back, "keep", 4) == 0);
        free(back);
        CHECK_EQ_U64(entries(), with_it);
    }
    CHECK_EQ_U64(count_entries(test_dir(), ".qem-"), 0);
}

/* Writes that fail part-way (the file size limit) publish nothing. */
static void test_write_failure(void)
{
    qem_error e = {0};
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    size_t n = 256 * 256;
    float *f = malloc(n * sizeof *f);
    uint8_t *noise = malloc(n);
    uint64_t seed = 11;
    for (size_t i = 0; i < n; i++) {
        f[i] = (float)i;
        noise[i] = (uint8_t)test_rand(&seed); /* incompressible */
    }
    int before = entries();
    signal(SIGXFSZ, SIG_IGN); /* a write past the limit then fails with EFBIG */
    struct rlimit small = old;
    small.rlim_cur = 16384;
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    CHECK_STATUS(write_image(test_path("cut.tif"), QEM_DTYPE_FLOAT32, 2, 256, 256, 1, f, &e),
                 QEM_E_IO, &e);
    CHECK(strstr(e.message, "cut.tif") != NULL);
    CHECK_STATUS(write_image(test_path("cut.png"), QEM_DTYPE_UINT8, 2, 256, 256, 1, noise, &e),
                 QEM_E_IO, &e);
    CHECK_STATUS(write_image(test_path("cut.npy"), QEM_DTYPE_FLOAT32, 2, 256, 256, 1, f, &e),
                 QEM_E_IO, &e);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, SIG_DFL);
    CHECK(!file_exists(test_path("cut.tif")));
    CHECK(!file_exists(test_path("cut.png")));
    CHECK(!file_exists(test_path("cut.npy")));
    CHECK_EQ_U64(entries(), before);
    /* The same images succeed without the limit. */
    CHECK_OK(write_image(test_path("cut.tif"), QEM_DTYPE_FLOAT32, 2, 256, 256, 1, f, &e), &e);
    CHECK_OK(write_image(test_path("cut.png"), QEM_DTYPE_UINT8, 2, 256, 256, 1, noise, &e), &e);
    CHECK_EQ_U64(entries(), before + 2);
    free(f);
    free(noise);
}

int main(void)
{
    test_formats();
    test_npy();
    test_tiff();
    test_png();
    test_refusals();
    test_write_failure();
    CHECK_EQ_U64(count_entries(test_dir(), ".qem-"), 0);
    return test_finish("unit_image_out");
}
