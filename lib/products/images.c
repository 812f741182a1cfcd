/* Products built on the engine's primitives: virtual images, the mean and
 * single patterns, scan-region reductions, centre of mass, DPC/iDPC and
 * the detector calibration estimate. Integer data are exact until one
 * final rounding; float data use compensated float32 sums. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/options.h"
#include "common/threads.h"
#include "common/calibration_estimate.h"
#include "products/dpc.h"
#include "products/products.h"

static qem_status check_open(const qem_products *p, const void *arg, const char *what,
                             qem_error *error)
{
    qem_error_clear(error);
    if (!p || !arg)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "%s: NULL argument", what);
    return QEM_OK;
}

/* --- virtual images --------------------------------------------------- */

/* The virtual image of scans [first, first + count) as a rows x cols
 * image (rows * cols == count). */
static qem_status virtual_scans(qem_products *p, const uint8_t *mask, uint64_t first,
                                uint64_t count, uint64_t rows, uint64_t cols, qem_image *image,
                                qem_error *error)
{
    memset(image, 0, sizeof *image);
    uint64_t n = 0;
    for (uint64_t px = 0; px < p->pixels; px++)
        n += mask[px] && p->valid[px];
    if (p->data == QEM_DATA_FLOAT) {
        QEM_TRY(qem_prod_image_new(image, QEM_DTYPE_FLOAT32, rows, cols, 1, error));
        qem_status st = qem_prod_float_masked_sums(p, first, count, mask, image->data, error);
        if (st != QEM_OK)
            qem_image_free(image);
        return st;
    }
    int32_t *w = malloc((size_t)p->pixels * sizeof *w);
    int64_t *sums = malloc((size_t)(count ? count : 1) * sizeof *sums);
    qem_status st = w && sums ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t px = 0; st == QEM_OK && px < p->pixels; px++)
        w[px] = mask[px] && p->valid[px];
    const int32_t *planes[1] = {w};
    if (st == QEM_OK)
        st = qem_prod_weighted_sums(p, first, count, planes, 1, sums, error);
    if (st == QEM_OK && p->data == QEM_DATA_CODES) {
        /* Calibrated once per scan from the exact code sum. */
        st = qem_prod_image_new(image, QEM_DTYPE_FLOAT32, rows, cols, 1, error);
        for (uint64_t s = 0; st == QEM_OK && s < count; s++) {
            double scale, offset;
            p->ops->code_affine(p->impl, first + s, &scale, &offset);
            ((float *)image->data)[s] = (float)(scale * (double)sums[s] + offset * (double)n);
        }
    } else if (st == QEM_OK) {
        /* uint32 when no scan can exceed it, else uint64: never wraps. */
        const int wide = (double)n * qem_prod_max_value(p) > 4294967295.0;
        st = qem_prod_image_new(image, wide ? QEM_DTYPE_UINT64 : QEM_DTYPE_UINT32, rows, cols, 1,
                                error);
        for (uint64_t s = 0; st == QEM_OK && s < count; s++) {
            if (wide)
                ((uint64_t *)image->data)[s] = (uint64_t)sums[s];
            else
                ((uint32_t *)image->data)[s] = (uint32_t)sums[s];
        }
    }
    free(w);
    free(sums);
    if (st != QEM_OK)
        qem_image_free(image);
    return st;
}

qem_status qem_products_virtual(qem_products *p, const uint8_t *mask, qem_image *image,
                                qem_error *error)
{
    QEM_TRY(check_open(p, mask, "qem_products_virtual", error));
    QEM_TRY(check_open(p, image, "qem_products_virtual", error));
    return virtual_scans(p, mask, 0, p->scans, p->scan_rows, p->scan_cols, image, error);
}

/* Scans [first, first + count) inside the scan; else a refusal. */
static qem_status check_part(const qem_products *p, uint64_t first, uint64_t count,
                             qem_error *error)
{
    if (count == 0 || first >= p->scans || count > p->scans - first)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "scans [%llu, +%llu) are empty or outside the %llu positions",
                        (unsigned long long)first, (unsigned long long)count,
                        (unsigned long long)p->scans);
    return QEM_OK;
}

qem_status qem_products_virtual_part(qem_products *p, const uint8_t *mask, uint64_t first,
                                     uint64_t count, qem_image *image, qem_error *error)
{
    QEM_TRY(check_open(p, mask, "qem_products_virtual_part", error));
    QEM_TRY(check_open(p, image, "qem_products_virtual_part", error));
    memset(image, 0, sizeof *image);
    QEM_TRY(check_part(p, first, count, error));
    return virtual_scans(p, mask, first, count, 1, count, image, error);
}

/* --- patterns ---------------------------------------------------------------- */

typedef struct float_pixels {
    const qem_products *p;
    prod_neumaier64 *acc; /* sum per pixel, float64: patterns near FLT_MAX must not overflow */
    float *max;
    int want_max, started;
    double *code_sum;    /* codes: sum of scale * code + offset, float64 */
} float_pixels;

static qem_status float_pixels_window(void *user, uint64_t first, uint64_t count, const void *rows,
                                      qem_error *error)
{
    (void)error;
    float_pixels *f = user;
    const qem_products *p = f->p;
    for (uint64_t i = 0; i < count; i++) {
        if (p->data == QEM_DATA_CODES) {
            double scale, offset;
            p->ops->code_affine(p->impl, first + i, &scale, &offset);
            const uint16_t *c = (const uint16_t *)rows + i * p->pixels;
            for (uint64_t px = 0; px < p->pixels; px++) {
                const float v = (float)((double)c[px] * scale + offset);
                f->code_sum[px] += (double)c[px] * scale + offset;
                if (f->want_max && (!f->started || v > f->max[px]))
                    f->max[px] = v;
            }
        } else {
            const float *v = (const float *)rows + i * p->pixels;
            for (uint64_t px = 0; px < p->pixels; px++) {
                const float x = p->dark ? v[px] - p->dark[px] : v[px];
                qem_prod_neumaier64_add(&f->acc[px], (double)x);
                if (f->want_max && (!f->started || x > f->max[px] || isnan(x)))
                    f->max[px] = x;
            }
        }
        f->started = 1;
    }
    return QEM_OK;
}

typedef struct int_pixels {
    const qem_products *p;
    uint64_t *sum;
    uint32_t *max;
} int_pixels;

static qem_status int_pixels_window(void *user, uint64_t first, uint64_t count, const void *rows,
                                    qem_error *error)
{
    (void)first;
    (void)error;
    int_pixels *s = user;
    const qem_products *p = s->p;
    const uint64_t P = p->pixels;
    /* Threads take slices of pixels; each owns its sums. */
#pragma omp parallel for schedule(static) num_threads(qem_threads_resolve(p->threads > 0 ? p->threads : 1))
    for (uint64_t p0 = 0; p0 < P; p0 += 256) {
        const uint64_t p1 = p0 + 256 < P ? p0 + 256 : P;
        const int narrow = p->data == QEM_DATA_COUNTS && p->info.working_dtype == QEM_DTYPE_UINT8;
        for (uint64_t i = 0; i < count; i++) {
            if (!s->max && !narrow) { /* the common case, vectorised */
                const uint16_t *r = (const uint16_t *)rows + i * P;
                for (uint64_t px = p0; px < p1; px++)
                    s->sum[px] += r[px];
                continue;
            }
            for (uint64_t px = p0; px < p1; px++) {
                const uint32_t v = prod_int_at(p, rows, i * P + px);
                s->sum[px] += v;
                if (s->max && v > s->max[px])
                    s->max[px] = v;
            }
        }
    }
    return QEM_OK;
}

qem_status qem_prod_whole_sums(qem_products *p, uint64_t *sums, qem_error *error)
{
    const int fast = p->path == QEM_PATH_FAST;
    if (fast && p->ops->recorded_pixel_sums && p->ops->recorded_pixel_sums(p->impl, sums)) {
        atomic_store(&p->sums_origin, QEM_ORIGIN_RECORDED);
        return QEM_OK;
    }
    uint8_t id[32];
    const int keyed = fast && p->cache_dir && p->ops->content_identity &&
                      p->ops->content_identity(p->impl, id);
    if (keyed && qem_prod_sums_cache_load(p, id, sums)) {
        atomic_store(&p->sums_origin, QEM_ORIGIN_CACHED);
        return QEM_OK;
    }
    memset(sums, 0, (size_t)p->pixels * sizeof *sums);
    int_pixels s = {p, sums, NULL};
    QEM_TRY(fast && p->ops->pixel_sums
                ? qem_prod_reduce_pixels(p, 0, p->scans, sums, NULL, error)
                : qem_prod_for_windows(p, 0, p->scans, int_pixels_window, &s, error));
    for (uint64_t px = 0; px < p->pixels; px++)
        sums[px] = p->valid[px] ? sums[px] : 0;
    atomic_store(&p->sums_origin, QEM_ORIGIN_COMPUTED);
    if (keyed)
        qem_prod_sums_cache_store(p, id, sums);
    return QEM_OK;
}

/* Reduction of the patterns of scans [first, first + count) for each
 * (row range) of a rectangle: integer sums/max exact, float compensated. */
static qem_status reduce_rect(qem_products *p, uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1,
                              qem_reduce reduce, qem_image *image, qem_error *error)
{
    const uint64_t P = p->pixels, n = (r1 - r0) * (c1 - c0);
    const int integer = p->data == QEM_DATA_COUNTS;
    qem_dtype dtype = QEM_DTYPE_FLOAT32;
    if (integer && reduce != QEM_REDUCE_MEAN)
        dtype = QEM_DTYPE_UINT64;
    QEM_TRY(qem_prod_image_new(image, dtype, p->det_rows, p->det_cols, 1, error));
    qem_status st = QEM_OK;
    if (integer) {
        int_pixels s = {p, calloc((size_t)P, sizeof(uint64_t)),
                        reduce == QEM_REDUCE_MAX ? calloc((size_t)P, sizeof(uint32_t)) : NULL};
        if (!s.sum || (reduce == QEM_REDUCE_MAX && !s.max))
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        const int fast = p->path == QEM_PATH_FAST && p->ops->pixel_sums;
        /* Full-width rectangles are one contiguous range of scans. */
        const int whole_rows = c0 == 0 && c1 == p->scan_cols;
        const int whole_file = whole_rows && r0 == 0 && r1 == p->scan_rows;
        if (st == QEM_OK && whole_file && reduce != QEM_REDUCE_MAX) {
            st = qem_prod_whole_sums(p, s.sum, error);
            r0 = r1; /* nothing left for the loop */
        }
        for (uint64_t r = r0; st == QEM_OK && r < r1; r += whole_rows ? r1 - r0 : 1) {
            const uint64_t at = r * p->scan_cols + c0;
            const uint64_t span = whole_rows ? (r1 - r0) * p->scan_cols : c1 - c0;
            st = fast ? qem_prod_reduce_pixels(p, at, span, s.sum, s.max, error)
                      : qem_prod_for_windows(p, at, span, int_pixels_window, &s, error);
            if (st == QEM_OK && fast && p->options.progress &&
                p->options.progress(p->options.progress_user, r + 1 - r0, r1 - r0))
                st = qem_fail(error, QEM_E_CANCELLED, "cancelled");
        }
        for (uint64_t px = 0; st == QEM_OK && px < P; px++) {
            const uint64_t v = !p->valid[px]             ? 0
                               : reduce == QEM_REDUCE_MAX ? s.max[px]
                                                          : s.sum[px];
            if (reduce == QEM_REDUCE_MEAN)
                ((float *)image->data)[px] = (float)((double)v / (double)n);
            else
                ((uint64_t *)image->data)[px] = v;
        }
        free(s.sum);
        free(s.max);
    } else {
        float_pixels f = {p, calloc((size_t)P, sizeof(prod_neumaier64)),
                          calloc((size_t)P, sizeof(float)), reduce == QEM_REDUCE_MAX, 0,
                          calloc((size_t)P, sizeof(double))};
        if (!f.acc || !f.max || !f.code_sum)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        for (uint64_t r = r0; st == QEM_OK && r < r1; r++)
            st = qem_prod_for_windows(p, r * p->scan_cols + c0, c1 - c0, float_pixels_window, &f,
                                      error);
        for (uint64_t px = 0; st == QEM_OK && px < P; px++) {
            const double total = p->data == QEM_DATA_CODES ? f.code_sum[px]
                                                           : f.acc[px].sum + f.acc[px].compensation;
            float v = reduce == QEM_REDUCE_MAX    ? f.max[px]
                      : reduce == QEM_REDUCE_MEAN ? (float)(total / (double)n)
                                                  : (float)total;
            ((float *)image->data)[px] = p->valid[px] ? v : 0.0f;
        }
        free(f.acc);
        free(f.max);
        free(f.code_sum);
    }
    if (st != QEM_OK)
        qem_image_free(image);
    return st;
}

qem_status qem_products_region(qem_products *p, uint64_t r0, uint64_t r1, uint64_t c0,
                               uint64_t c1, qem_reduce reduce, qem_image *image, qem_error *error)
{
    QEM_TRY(check_open(p, image, "qem_products_region", error));
    memset(image, 0, sizeof *image);
    if (r0 >= r1 || c0 >= c1 || r1 > p->scan_rows || c1 > p->scan_cols)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "scan region rows [%llu, %llu) x columns [%llu, %llu) is empty or "
                        "outside the %llu x %llu scan",
                        (unsigned long long)r0, (unsigned long long)r1, (unsigned long long)c0,
                        (unsigned long long)c1, (unsigned long long)p->scan_rows,
                        (unsigned long long)p->scan_cols);
    if (reduce != QEM_REDUCE_SUM && reduce != QEM_REDUCE_MEAN && reduce != QEM_REDUCE_MAX)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "unknown reduction %d", (int)reduce);
    return reduce_rect(p, r0, r1, c0, c1, reduce, image, error);
}

qem_status qem_products_mean(qem_products *p, qem_image *image, qem_error *error)
{
    QEM_TRY(check_open(p, image, "qem_products_mean", error));
    memset(image, 0, sizeof *image);
    return reduce_rect(p, 0, p->scan_rows, 0, p->scan_cols, QEM_REDUCE_MEAN, image, error);
}

qem_status qem_products_frame(qem_products *p, uint64_t scan, qem_image *image, qem_error *error)
{
    QEM_TRY(check_open(p, image, "qem_products_frame", error));
    memset(image, 0, sizeof *image);
    if (scan >= p->scans)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "scan %llu is outside the %llu positions",
                        (unsigned long long)scan, (unsigned long long)p->scans);
    if (p->data == QEM_DATA_COUNTS) {
        const qem_dtype dtype = p->info.working_dtype;
        QEM_TRY(qem_prod_image_new(image, dtype, p->det_rows, p->det_cols, 1, error));
        qem_status st = p->ops->read(p->impl, scan, 1, QEM_VALUES_WORKING, image->data,
                                     (size_t)(p->pixels * qem_dtype_size(dtype)), p->threads,
                                     error);
        for (uint64_t px = 0; st == QEM_OK && px < p->pixels; px++)
            if (!p->valid[px])
                memset((uint8_t *)image->data + px * qem_dtype_size(dtype), 0,
                       qem_dtype_size(dtype));
        if (st != QEM_OK)
            qem_image_free(image);
        return st;
    }
    return reduce_rect(p, scan / p->scan_cols, scan / p->scan_cols + 1, scan % p->scan_cols,
                       scan % p->scan_cols + 1, QEM_REDUCE_SUM, image, error);
}

qem_status qem_products_patterns_part(qem_products *p, uint64_t first, uint64_t count,
                                      qem_image *sum, qem_image *max, qem_error *error)
{
    QEM_TRY(check_open(p, sum, "qem_products_patterns_part", error));
    memset(sum, 0, sizeof *sum);
    if (max)
        memset(max, 0, sizeof *max);
    QEM_TRY(check_part(p, first, count, error));
    const uint64_t P = p->pixels;
    qem_status st = QEM_OK;
    if (p->data == QEM_DATA_COUNTS) {
        int_pixels s = {p, calloc((size_t)P, sizeof(uint64_t)),
                        max ? calloc((size_t)P, sizeof(uint32_t)) : NULL};
        if (!s.sum || (max && !s.max))
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        if (st == QEM_OK)
            st = p->path == QEM_PATH_FAST && p->ops->pixel_sums
                     ? qem_prod_reduce_pixels(p, first, count, s.sum, s.max, error)
                     : qem_prod_for_windows(p, first, count, int_pixels_window, &s, error);
        if (st == QEM_OK)
            st = qem_prod_image_new(sum, QEM_DTYPE_UINT64, p->det_rows, p->det_cols, 1, error);
        if (st == QEM_OK && max)
            st = qem_prod_image_new(max, QEM_DTYPE_UINT64, p->det_rows, p->det_cols, 1, error);
        for (uint64_t px = 0; st == QEM_OK && px < P; px++) {
            ((uint64_t *)sum->data)[px] = p->valid[px] ? s.sum[px] : 0;
            if (max)
                ((uint64_t *)max->data)[px] = p->valid[px] ? s.max[px] : 0;
        }
        free(s.sum);
        free(s.max);
    } else {
        float_pixels f = {p, calloc((size_t)P, sizeof(prod_neumaier64)),
                          calloc((size_t)P, sizeof(float)), max != NULL, 0,
                          calloc((size_t)P, sizeof(double))};
        if (!f.acc || !f.max || !f.code_sum)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        if (st == QEM_OK)
            st = qem_prod_for_windows(p, first, count, float_pixels_window, &f, error);
        /* (sum, compensation) in float64, so partitions merge without loss. */
        if (st == QEM_OK)
            st = qem_prod_image_new(sum, QEM_DTYPE_FLOAT64, p->det_rows, p->det_cols, 2, error);
        if (st == QEM_OK && max)
            st = qem_prod_image_new(max, QEM_DTYPE_FLOAT32, p->det_rows, p->det_cols, 1, error);
        for (uint64_t px = 0; st == QEM_OK && px < P; px++) {
            double *out = (double *)sum->data + 2 * px;
            const int codes = p->data == QEM_DATA_CODES;
            out[0] = !p->valid[px] ? 0 : codes ? f.code_sum[px] : f.acc[px].sum;
            out[1] = !p->valid[px] || codes ? 0 : f.acc[px].compensation;
            if (max)
                ((float *)max->data)[px] = p->valid[px] ? f.max[px] : 0.0f;
        }
        free(f.acc);
        free(f.max);
        free(f.code_sum);
    }
    if (st != QEM_OK) {
        qem_image_free(sum);
        if (max)
            qem_image_free(max);
    }
    return st;
}

/* --- centre of mass, DPC ------------------------------------------------- */

typedef struct float_moments {
    const qem_products *p;
    const uint8_t *mask;
    float *com; /* count x 2, from scan `base` */
    uint64_t base;
} float_moments;

static qem_status float_moments_window(void *user, uint64_t first, uint64_t count,
                                       const void *rows, qem_error *error)
{
    (void)error;
    float_moments *m = user;
    const qem_products *p = m->p;
    for (uint64_t i = 0; i < count; i++) {
        const float *v = (const float *)rows + i * p->pixels;
        double total = 0, mr = 0, mc = 0;
        for (uint64_t px = 0; px < p->pixels; px++) {
            if (!m->mask[px])
                continue;
            const double x = p->dark ? (double)(v[px] - p->dark[px]) : (double)v[px];
            total += x;
            mr += x * (double)(px / p->det_cols);
            mc += x * (double)(px % p->det_cols);
        }
        float *out = m->com + 2 * (first - m->base + i);
        const int ok = total != 0 && isfinite(total) && isfinite(mr) && isfinite(mc);
        out[0] = ok ? (float)(mr / total) : NAN;
        out[1] = ok ? (float)(mc / total) : NAN;
    }
    return QEM_OK;
}

/* The absolute centre of mass of scans [first, first + count) into `com`
 * (count x 2) over the pixels `m` selects (valid ones only). */
static qem_status com_scans(qem_products *p, const uint8_t *m, uint64_t first, uint64_t count,
                            float *com, qem_error *error)
{
    if (p->data == QEM_DATA_FLOAT) {
        float_moments fm = {p, m, com, first};
        return qem_prod_for_windows(p, first, count, float_moments_window, &fm, error);
    }
    /* Exact integer total and moments (absolute detector indices). */
    int32_t *w = malloc((size_t)(3 * p->pixels) * sizeof *w);
    int64_t *sums = malloc((size_t)(3 * count) * sizeof *sums);
    qem_status st = w && sums ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t px = 0; st == QEM_OK && px < p->pixels; px++) {
        w[px] = m[px];
        w[p->pixels + px] = m[px] ? (int32_t)(px / p->det_cols) : 0;
        w[2 * p->pixels + px] = m[px] ? (int32_t)(px % p->det_cols) : 0;
    }
    const int32_t *planes[3] = {w, w + p->pixels, w + 2 * p->pixels};
    if (st == QEM_OK)
        st = qem_prod_weighted_sums(p, first, count, planes, 3, sums, error);
    for (uint64_t s = 0; st == QEM_OK && s < count; s++) {
        double total = (double)sums[s];
        if (p->data == QEM_DATA_CODES) {
            /* Moments of calibrated values: scale * code + offset. */
            double scale, offset, n = 0, nr = 0, nc = 0;
            p->ops->code_affine(p->impl, first + s, &scale, &offset);
            for (uint64_t px = 0; px < p->pixels; px++)
                if (m[px]) {
                    n += 1;
                    nr += (double)(px / p->det_cols);
                    nc += (double)(px % p->det_cols);
                }
            total = scale * (double)sums[s] + offset * n;
            const double mr = scale * (double)sums[count + s] + offset * nr;
            const double mc = scale * (double)sums[2 * count + s] + offset * nc;
            com[2 * s] = total != 0 ? (float)(mr / total) : NAN;
            com[2 * s + 1] = total != 0 ? (float)(mc / total) : NAN;
            continue;
        }
        com[2 * s] = sums[s] ? (float)((double)sums[count + s] / total) : NAN;
        com[2 * s + 1] = sums[s] ? (float)((double)sums[2 * count + s] / total) : NAN;
    }
    free(w);
    free(sums);
    return st;
}

/* The selection a CoM uses: the mask (NULL: every pixel) and validity. */
static qem_status com_selection(const qem_products *p, const uint8_t *mask, uint8_t **out,
                                qem_error *error)
{
    uint8_t *m = *out = malloc((size_t)p->pixels);
    if (!m)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t px = 0; px < p->pixels; px++)
        m[px] = (uint8_t)((!mask || mask[px]) && p->valid[px]);
    return QEM_OK;
}

qem_status qem_products_com(qem_products *p, const uint8_t *mask, int subtract_mean,
                            qem_image *image, qem_error *error)
{
    QEM_TRY(check_open(p, image, "qem_products_com", error));
    memset(image, 0, sizeof *image);
    uint8_t *m = NULL;
    QEM_TRY(com_selection(p, mask, &m, error));
    qem_status st =
        qem_prod_image_new(image, QEM_DTYPE_FLOAT32, p->scan_rows, p->scan_cols, 2, error);
    float *com = image->data;
    if (st == QEM_OK)
        st = com_scans(p, m, 0, p->scans, com, error);
    if (st == QEM_OK && subtract_mean) {
        /* The scan mean over frames with a CoM, in float64. */
        for (int k = 0; k < 2; k++) {
            double acc = 0;
            uint64_t used = 0;
            for (uint64_t s = 0; s < p->scans; s++)
                if (!isnan(com[2 * s + k])) {
                    acc += com[2 * s + k];
                    used++;
                }
            const float mean = used ? (float)(acc / (double)used) : 0.0f;
            for (uint64_t s = 0; s < p->scans; s++)
                com[2 * s + k] -= mean;
        }
    }
    free(m);
    if (st != QEM_OK)
        qem_image_free(image);
    return st;
}

qem_status qem_products_com_part(qem_products *p, const uint8_t *mask, uint64_t first,
                                 uint64_t count, qem_image *image, qem_error *error)
{
    QEM_TRY(check_open(p, image, "qem_products_com_part", error));
    memset(image, 0, sizeof *image);
    QEM_TRY(check_part(p, first, count, error));
    uint8_t *m = NULL;
    QEM_TRY(com_selection(p, mask, &m, error));
    qem_status st = qem_prod_image_new(image, QEM_DTYPE_FLOAT32, 1, count, 2, error);
    if (st == QEM_OK)
        st = com_scans(p, m, first, count, image->data, error);
    free(m);
    if (st != QEM_OK)
        qem_image_free(image);
    return st;
}

void qem_dpc_result_free(qem_dpc_result *r)
{
    if (!r)
        return;
    qem_image_free(&r->com);
    qem_image_free(&r->aligned);
    qem_image_free(&r->phase);
    memset(r, 0, sizeof *r);
}

static qem_status dpc_into(qem_products *p, const uint8_t *mask, double fixed_rotation_degrees,
                           qem_dpc_result *r, qem_error *error);

qem_status qem_products_dpc(qem_products *p, const uint8_t *mask, double fixed_rotation_degrees,
                            qem_dpc_result *out, qem_error *error)
{
    QEM_TRY(check_open(p, out, "qem_products_dpc", error));
    QEM_TRY(qem_result_check(out, "qem_dpc_result", error));
    qem_dpc_result r;
    memset(&r, 0, sizeof r);
    QEM_TRY(dpc_into(p, mask, fixed_rotation_degrees, &r, error));
    return qem_result_deliver(out, &r, sizeof r, "qem_dpc_result", error);
}

static qem_status dpc_into(qem_products *p, const uint8_t *mask, double fixed_rotation_degrees,
                           qem_dpc_result *r, qem_error *error)
{
    const uint64_t n = p->scans, rows = p->scan_rows, cols = p->scan_cols;
    QEM_TRY(qem_products_com(p, mask, 1, &r->com, error));
    float *split = malloc((size_t)(4 * n) * sizeof *split);
    qem_status st = split ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    float *mu_r = split, *mu_c = split + n, *g_r = split + 2 * n, *g_c = split + 3 * n;
    for (uint64_t s = 0; st == QEM_OK && s < n; s++) {
        mu_r[s] = ((const float *)r->com.data)[2 * s];
        mu_c[s] = ((const float *)r->com.data)[2 * s + 1];
    }
    if (st == QEM_OK && isfinite(fixed_rotation_degrees)) {
        r->rotation_degrees = fixed_rotation_degrees;
        r->components_exchanged = 0;
    } else if (st == QEM_OK) {
        st = qem_product_dpc_rotation(mu_r, mu_c, rows, cols, 180, &r->rotation_degrees,
                                      &r->components_exchanged, error);
    }
    if (st == QEM_OK)
        st = qem_prod_image_new(&r->aligned, QEM_DTYPE_FLOAT32, rows, cols, 2, error);
    if (st == QEM_OK) {
        float *al = r->aligned.data;
        qem_product_dpc_align(mu_r, mu_c, n, r->rotation_degrees, r->components_exchanged, g_r,
                              g_c);
        for (uint64_t s = 0; s < n; s++) {
            al[2 * s] = g_r[s];
            al[2 * s + 1] = g_c[s];
        }
        /* g_r, g_c now hold the aligned fields; gradients go into mu_*. */
        qem_product_dpc_gradients(g_r, g_c, n, r->components_exchanged, mu_r, mu_c);
        st = qem_prod_image_new(&r->phase, QEM_DTYPE_FLOAT32, rows, cols, 1, error);
    }
    if (st == QEM_OK)
        st = qem_product_idpc(mu_r, mu_c, rows, cols, r->phase.data, &r->ffts, error);
    free(split);
    if (st != QEM_OK)
        qem_dpc_result_free(r);
    return st;
}

/* --- calibration estimate ------------------------------------------------- */

qem_status qem_products_estimate_calibration(qem_products *p, qem_detector_calibration *c,
                                             qem_error *error)
{
    QEM_TRY(check_open(p, c, "qem_products_estimate_calibration", error));
    qem_image mean;
    QEM_TRY(qem_products_mean(p, &mean, error));
    product_calibration est;
    qem_status st = qem_product_calibration_estimate(mean.data, p->valid, p->det_rows, p->det_cols,
                                                     &est, error);
    qem_image_free(&mean);
    if (st != QEM_OK)
        return st;
    qem_detector_calibration made;
    memset(&made, 0, sizeof made);
    made.center_row = est.center_row;
    made.center_column = est.center_col;
    made.bright_field_radius = est.radius;
    snprintf(made.method, sizeof made.method, "%s", PRODUCT_CALIBRATION_METHOD);
    return qem_result_deliver(c, &made, sizeof made, "qem_detector_calibration", error);
}
