/* The image module (libqem-images.so; image_codecs.h): .tif/.tiff
 * (float32 pages, libtiff) and .png (8-bit percentile-contrast view,
 * libpng), each published atomically through qem_publish so that a
 * failure leaves nothing behind. */
#include "products/image_codecs.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"

/* --- element access -------------------------------------------------------- */

/* Elements first, first + stride, ... (count of them) as float32, rounded to
 * nearest: integers above 2^24 and float64 values lose precision here. */
static void gather_f32(const product_array *a, uint64_t first, uint64_t stride, size_t count,
                       float *out)
{
#define GATHER(type)                                                                               \
    do {                                                                                           \
        const type *p_ = (const type *)a->data + first;                                            \
        for (size_t i_ = 0; i_ < count; i_++)                                                      \
            out[i_] = (float)p_[i_ * stride];                                                      \
    } while (0)
    switch (a->dtype) {
    case QEM_DTYPE_UINT8: GATHER(uint8_t); break;
    case QEM_DTYPE_UINT16: GATHER(uint16_t); break;
    case QEM_DTYPE_UINT32: GATHER(uint32_t); break;
    case QEM_DTYPE_UINT64: GATHER(uint64_t); break;
    case QEM_DTYPE_FLOAT32: GATHER(float); break;
    case QEM_DTYPE_FLOAT64: GATHER(double); break;
    case QEM_DTYPE_NONE: break; /* refused by check_array */
    }
#undef GATHER
}

/* Element i as double; only the PNG contrast uses it, where rounding of
 * uint64 values above 2^53 cannot change an 8-bit level meaningfully. */
static double element_f64(const product_array *a, uint64_t i)
{
    switch (a->dtype) {
    case QEM_DTYPE_UINT8: return ((const uint8_t *)a->data)[i];
    case QEM_DTYPE_UINT16: return ((const uint16_t *)a->data)[i];
    case QEM_DTYPE_UINT32: return ((const uint32_t *)a->data)[i];
    case QEM_DTYPE_UINT64: return (double)((const uint64_t *)a->data)[i];
    case QEM_DTYPE_FLOAT32: return ((const float *)a->data)[i];
    case QEM_DTYPE_FLOAT64: return ((const double *)a->data)[i];
    case QEM_DTYPE_NONE: break;
    }
    return NAN;
}

/* --- .tif/.tiff ------------------------------------------------------------ */

/* Classic TIFF offsets are 32-bit; leave room for the strip tables. */
#define BIGTIFF_ABOVE ((uint64_t)UINT32_MAX - ((uint64_t)64 << 20))

typedef struct tiff_ctx {
    int failed;
    int error_number; /* errno when libtiff reported it: the system's reason */
    char message[256];
} tiff_ctx;

/* libtiff >= 4.5 reports errors to per-handle callbacks; older versions
 * only have process-wide handlers, which we leave alone (no global state):
 * there, failures are still seen through return values. */
#if TIFFLIB_VERSION >= 20221213
static int tiff_on_error(TIFF *tif, void *user, const char *module, const char *format,
                         va_list args)
{
    (void)tif;
    (void)module;
    tiff_ctx *ctx = user;
    if (!ctx->failed) {
        ctx->error_number = errno;
        vsnprintf(ctx->message, sizeof ctx->message, format, args);
    }
    ctx->failed = 1;
    return 1; /* handled: keep libtiff from printing to stderr */
}

static int tiff_on_warning(TIFF *tif, void *user, const char *module, const char *format,
                           va_list args)
{
    (void)tif;
    (void)user;
    (void)module;
    (void)format;
    (void)args;
    return 1;
}
#endif

static TIFF *tiff_open(int fd, const char *name, const char *mode, tiff_ctx *ctx)
{
#if TIFFLIB_VERSION >= 20221213
    TIFFOpenOptions *options = TIFFOpenOptionsAlloc();
    if (!options)
        return NULL;
    TIFFOpenOptionsSetErrorHandlerExtR(options, tiff_on_error, ctx);
    TIFFOpenOptionsSetWarningHandlerExtR(options, tiff_on_warning, ctx);
    TIFF *tif = TIFFFdOpenExt(fd, name, mode, options);
    TIFFOpenOptionsFree(options);
    return tif;
#else
    (void)ctx;
    return TIFFFdOpen(fd, name, mode);
#endif
}

/* One page: its tags, then every row of component k as float32. */
static int tiff_page(TIFF *tif, const product_array *a, uint64_t k, uint64_t pages, float *row)
{
    uint32_t rows = (uint32_t)a->shape[0], cols = (uint32_t)a->shape[1];
    int ok = TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, cols) &&
             TIFFSetField(tif, TIFFTAG_IMAGELENGTH, rows) &&
             TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 32) &&
             TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1) &&
             TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_IEEEFP) &&
             TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK) &&
             TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG) &&
             TIFFSetField(tif, TIFFTAG_COMPRESSION, COMPRESSION_NONE) &&
             TIFFSetField(tif, TIFFTAG_SOFTWARE, "qem " QEM_VERSION_STRING);
    /* libtiff's default strip size (about 8 KiB) suits every reader. */
    ok = ok && TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, TIFFDefaultStripSize(tif, 0));
    if (ok && pages > 1)
        ok = TIFFSetField(tif, TIFFTAG_SUBFILETYPE, (uint32_t)FILETYPE_PAGE) &&
             TIFFSetField(tif, TIFFTAG_PAGENUMBER, (int)k, (int)pages);
    for (uint32_t r = 0; ok && r < rows; r++) {
        gather_f32(a, (uint64_t)r * cols * pages + k, pages, cols, row);
        ok = TIFFWriteScanline(tif, row, r, 0) == 1;
    }
    return ok && TIFFWriteDirectory(tif);
}

qem_status qem_prod_write_tiff(const char *path, const product_array *a, uint64_t n,
                             qem_error *error)
{
    uint64_t rows = a->shape[0], cols = a->shape[1];
    uint64_t pages = a->ndim == 3 ? a->shape[2] : 1;
    /* PAGENUMBER is 16-bit; widths and heights are 32-bit. */
    if (rows > UINT32_MAX || cols > UINT32_MAX || pages > UINT16_MAX)
        return qem_fail(error, QEM_E_LIMIT,
                        "'%s': TIFF holds at most 2^32-1 rows or columns and 65535 pages; write "
                        ".npy instead",
                        path);
    uint64_t bytes; /* n * 4 cannot overflow: check_array bounded n * item */
    qem_mul_overflow_u64(n, sizeof(float), &bytes);
    const char *mode = bytes > BIGTIFF_ABOVE ? "w8" : "w";

    float *row = malloc((size_t)cols * sizeof *row);
    if (!row)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a TIFF row of '%s'", path);
    qem_publish pub;
    qem_status st = qem_publish_begin(&pub, path, error);
    if (st != QEM_OK) {
        free(row);
        return st;
    }
    /* libtiff closes the descriptor it is given; pub.fd stays ours. */
    int fd = fcntl(pub.fd, F_DUPFD_CLOEXEC, 0);
    tiff_ctx ctx = {0};
    TIFF *tif = fd >= 0 ? tiff_open(fd, path, mode, &ctx) : NULL;
    if (!tif) {
        if (fd >= 0)
            close(fd);
        st = qem_fail(error, QEM_E_IO, "cannot start the TIFF '%s': %s", path,
                      ctx.message[0] ? ctx.message : "libtiff or the system refused");
    } else {
        int ok = 1;
        for (uint64_t k = 0; ok && k < pages; k++)
            ok = tiff_page(tif, a, k, pages, row);
        TIFFClose(tif); /* flushes; a failure there reaches ctx */
        const int e = ctx.error_number ? ctx.error_number : errno;
        if (!ok || ctx.failed)
            st = qem_fail(error, QEM_E_IO, "cannot write the TIFF '%s': %s (%s)%s", path,
                          ctx.message[0] ? ctx.message : "libtiff reported an error",
                          e ? strerror(e) : "no system error", qem_write_advice(e));
        else
            st = qem_publish_commit(&pub, error);
    }
    qem_publish_abort(&pub); /* no-op after commit; discards the file otherwise */
    free(row);
    return st;
}

/* --- .png ------------------------------------------------------------------ */

/* Contrast rule for the 8-bit view. Only finite values count. Percentiles
 * are nearest-rank: with the m finite values sorted ascending v[1..m], the
 * p-th percentile is v[ceil(p/100 * m)] (rank at least 1). lo = P0.5 and
 * hi = P99.5; a value x maps to floor(255 * (x - lo) / (hi - lo) + 0.5),
 * clamped to 0..255 (so x <= lo gives 0, x >= hi gives 255). NaN and +-inf
 * give 0. When lo == hi (all finite values equal, or nearly all), x == lo
 * gives mid-grey 128, smaller values 0 and larger 255. With no finite
 * value at all every pixel is 0. */

static int compare_double(const void *pa, const void *pb)
{
    double x = *(const double *)pa, y = *(const double *)pb;
    return (x > y) - (x < y);
}

/* ceil(permille * m / 1000) without overflow, writing m = 1000 q + r; at
 * least 1 for m >= 1 and permille >= 1, at most m for permille <= 1000. */
static uint64_t nearest_rank(uint64_t m, uint64_t permille)
{
    uint64_t q = m / 1000, r = m % 1000;
    return q * permille + (r * permille + 999) / 1000;
}

static qem_status png_levels(const char *path, const product_array *a, uint64_t n, uint8_t *out,
                             qem_error *error)
{
    uint64_t copy_bytes;
    if (qem_mul_overflow_u64(n, sizeof(double), &copy_bytes) || copy_bytes > SIZE_MAX)
        return qem_fail(error, QEM_E_LIMIT, "'%s': the image is too large to rank", path);
    double *finite = malloc((size_t)copy_bytes);
    if (!finite)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory ranking the values of '%s'", path);
    uint64_t m = 0;
    for (uint64_t i = 0; i < n; i++) {
        double v = element_f64(a, i);
        if (isfinite(v))
            finite[m++] = v;
    }
    if (m == 0) {
        free(finite);
        memset(out, 0, (size_t)n);
        return QEM_OK;
    }
    qsort(finite, (size_t)m, sizeof *finite, compare_double);
    double lo = finite[nearest_rank(m, 5) - 1];
    double hi = finite[nearest_rank(m, 995) - 1];
    free(finite);
    /* Halving is exact for normal numbers and keeps hi - lo finite for
     * float64 extremes. */
    double span = hi - lo;
    int halve = !isfinite(span);
    if (halve)
        span = hi * 0.5 - lo * 0.5;
    for (uint64_t i = 0; i < n; i++) {
        double v = element_f64(a, i);
        uint8_t b;
        if (!isfinite(v))
            b = 0;
        else if (lo == hi)
            b = v < lo ? 0 : v > hi ? 255 : 128;
        else if (v <= lo)
            b = 0;
        else if (v >= hi)
            b = 255;
        else {
            double t = halve ? (v * 0.5 - lo * 0.5) / span : (v - lo) / span;
            double level = floor(t * 255.0 + 0.5);
            b = level >= 255.0 ? 255 : level <= 0.0 ? 0 : (uint8_t)level;
        }
        out[i] = b;
    }
    return QEM_OK;
}

typedef struct png_sink {
    int fd;
    const char *path;
    qem_error *error;
    qem_status status;
} png_sink;

static void png_on_error(png_structp png, png_const_charp message)
{
    png_sink *sink = png_get_error_ptr(png);
    if (sink->status == QEM_OK)
        sink->status = QEM_E_IO;
    /* Keeps the more specific message of a failed write, if any. */
    qem_fail(sink->error, sink->status, "cannot write the PNG '%s': %s", sink->path, message);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp message)
{
    (void)png;
    (void)message;
}

/* Writing to the descriptor directly avoids a FILE that owns a dup. */
static void png_write_fd(png_structp png, png_bytep data, size_t length)
{
    png_sink *sink = png_get_io_ptr(png);
    qem_status st = qem_write_full(sink->fd, data, length, sink->error);
    if (st != QEM_OK) {
        sink->status = st;
        png_error(png, "the write failed");
    }
}

static void png_flush_fd(png_structp png)
{
    (void)png; /* qem_publish_commit fsyncs */
}

static qem_status png_encode(png_sink *sink, const uint8_t *pixels, uint32_t width,
                             uint32_t height)
{
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, sink, png_on_error, png_on_warning);
    if (!png)
        return qem_fail(sink->error, QEM_E_NO_MEMORY, "out of memory starting the PNG '%s'",
                        sink->path);
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return qem_fail(sink->error, QEM_E_NO_MEMORY, "out of memory starting the PNG '%s'",
                        sink->path);
    }
    /* png and info are not modified after setjmp, so they survive longjmp. */
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return sink->status != QEM_OK ? sink->status : QEM_E_IO;
    }
    png_set_write_fn(png, sink, png_write_fd, png_flush_fd);
#ifdef PNG_SET_USER_LIMITS_SUPPORTED
    /* The default 10^6 limit is for untrusted input; ours is checked. */
    png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
#endif
    png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (uint32_t r = 0; r < height; r++)
        png_write_row(png, pixels + (size_t)r * width);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return QEM_OK;
}

qem_status qem_prod_write_png(const char *path, const product_array *a, uint64_t n,
                            qem_error *error)
{
    if (a->ndim != 2)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s': PNG holds one 2-D image, not %llu components; write .npy (exact) "
                        "or .tif (one float32 page per component) instead",
                        path, (unsigned long long)a->shape[2]);
    if (a->shape[0] > PNG_UINT_31_MAX || a->shape[1] > PNG_UINT_31_MAX)
        return qem_fail(error, QEM_E_LIMIT,
                        "'%s': PNG holds at most 2^31-1 rows or columns; write .npy instead",
                        path);
    uint8_t *pixels = malloc((size_t)n);
    if (!pixels)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for the PNG '%s'", path);
    qem_publish pub;
    /* Begin first: an existing destination is refused before any work. */
    qem_status st = qem_publish_begin(&pub, path, error);
    if (st == QEM_OK)
        st = png_levels(path, a, n, pixels, error);
    if (st == QEM_OK) {
        png_sink sink = {pub.fd, path, error, QEM_OK};
        st = png_encode(&sink, pixels, (uint32_t)a->shape[1], (uint32_t)a->shape[0]);
    }
    if (st == QEM_OK)
        st = qem_publish_commit(&pub, error);
    qem_publish_abort(&pub);
    free(pixels);
    return st;
}

/* --- the module's table and its one export ------------------------------------ */

static const qem_images_module table = {
    QEM_MODULE_HEADER(qem_images_module),
    qem_prod_write_tiff,
    qem_prod_write_png,
};

const void *qem_module_images_v1(void)
{
    return &table;
}
