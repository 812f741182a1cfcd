/* The products engine: a session over any source, the bounded window loop,
 * and the exact primitives (weighted sums per scan, sums per pixel) that
 * partition scans and merge by addition. The fast path asks the
 * representation for the least it needs; the reference path decodes
 * windows and sums densely, and tests hold the two equal. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/options.h"
#include "common/sha256.h"
#include "common/threads.h"
#include "products/products.h"

/* Window memory: scans read at once stay within this many bytes. */
#define WINDOW_BYTES (32u << 20)
/* Fast-path pieces: at least this many scans per call, and at most
 * PIECES_MAX calls per product, so that progress and cancellation reach
 * the caller and partial results merge by addition, while a detector move
 * at 512 x 512 scans starts few parallel regions (each wakes the other
 * threads: a futex apiece, costly in a virtual machine). */
#define PIECE_SCANS 16384u
#define PIECES_MAX 4u

void qem_products_options_init(qem_products_options *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

void qem_image_free(qem_image *image)
{
    if (!image)
        return;
    free(image->data);
    memset(image, 0, sizeof *image);
}

qem_status qem_prod_image_new(qem_image *image, qem_dtype dtype, uint64_t rows, uint64_t cols,
                              uint64_t components, qem_error *error)
{
    memset(image, 0, sizeof *image);
    uint64_t n, bytes;
    if (qem_mul_overflow_u64(rows, cols, &n) || qem_mul_overflow_u64(n, components, &n) ||
        qem_mul_overflow_u64(n, qem_dtype_size(dtype), &bytes) || bytes > SIZE_MAX)
        return qem_fail(error, QEM_E_LIMIT, "product image too large");
    image->data = calloc((size_t)(bytes ? bytes : 1), 1);
    if (!image->data)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a %llu-byte image",
                        (unsigned long long)bytes);
    image->dtype = dtype;
    image->ndim = components > 1 ? 3 : 2;
    image->shape[0] = rows;
    image->shape[1] = cols;
    image->shape[2] = components > 1 ? components : 0;
    return QEM_OK;
}

/* options.device other than the CPU: its copy of the resident, made now
 * so that every product after it runs there. */
static qem_status open_device(qem_products *p, qem_error *error)
{
    const qem_device d = p->options.device;
    if (d == QEM_DEVICE_CPU)
        return QEM_OK;
    if (d != QEM_DEVICE_CUDA)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_products_options.device: unknown %d",
                        (int)d);
    if (p->path == QEM_PATH_REFERENCE)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the dense reference path runs on the CPU only; ask for device cpu");
    return qem_device_session_open(p->source, d, &p->device, error);
}

qem_status qem_prod_reduce_weighted(qem_products *p, uint64_t first, uint64_t count,
                                    const int32_t *const *weights, unsigned planes, int64_t *out,
                                    qem_error *error)
{
    if (p->device)
        return qem_device_session_weighted_sums(p->device, first, count, weights, planes, out,
                                                error);
    return p->ops->weighted_sums(p->impl, first, count, weights, planes, 1, out, p->threads,
                                 error);
}

qem_status qem_prod_reduce_pixels(qem_products *p, uint64_t first, uint64_t count, uint64_t *sums,
                                  uint32_t *max, qem_error *error)
{
    if (p->device)
        return qem_device_session_pixel_sums(p->device, first, count, sums, max, error);
    return p->ops->pixel_sums(p->impl, first, count, sums, max, p->threads, error);
}

qem_status qem_products_open(qem_container *source, const qem_products_options *options,
                             qem_products **out, qem_error *error)
{
    return qem_products_open_path(source, options, QEM_PATH_FAST, out, error);
}

qem_status qem_products_open_path(qem_container *source, const qem_products_options *options,
                                  qem_products_path path, qem_products **out, qem_error *error)
{
    qem_error_clear(error);
    if (!source || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_products_open: NULL argument");
    if (path != QEM_PATH_FAST && path != QEM_PATH_REFERENCE)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "unknown products path %d", (int)path);
    *out = NULL;
    qem_products *p = calloc(1, sizeof *p);
    if (!p)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    qem_products_options_init(&p->options);
    qem_status st = qem_options_overlay(&p->options, sizeof p->options, options,
                                        "qem_products_options", error);
    if (st == QEM_OK)
        st = qem_threads_check(p->options.threads, "qem_products_options.threads", error);
    if (st != QEM_OK) {
        free(p);
        return st;
    }
    if (p->options.cache_dir && !(p->cache_dir = strdup(p->options.cache_dir))) {
        free(p);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    p->options.cache_dir = p->cache_dir;
    p->source = source;
    p->path = path;
    p->ops = source->ops;
    p->impl = source->impl;
    p->threads = qem_threads_resolve(p->options.threads > 0 ? p->options.threads : source->threads);
    p->ops->describe(p->impl, &p->info);
    p->scan_rows = p->info.shape[0];
    p->scan_cols = p->info.shape[1];
    p->det_rows = p->info.shape[2];
    p->det_cols = p->info.shape[3];
    p->scans = p->info.scans;
    p->pixels = p->info.pixels;
    p->data = p->ops->data(p->impl);
    p->valid = malloc((size_t)p->pixels);
    if (p->data == QEM_DATA_FLOAT)
        p->dark = malloc((size_t)p->pixels * sizeof *p->dark);
    if (!p->valid || (p->data == QEM_DATA_FLOAT && !p->dark)) {
        qem_products_close(p);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    p->ops->valid(p->impl, p->valid);
    for (uint64_t k = 0; k < p->pixels; k++)
        p->valid_count += p->valid[k] != 0;
    if (p->dark && !p->ops->dark(p->impl, p->dark)) {
        free(p->dark);
        p->dark = NULL;
    }
    if ((st = open_device(p, error)) != QEM_OK) {
        qem_products_close(p);
        return st;
    }
    *out = p;
    return QEM_OK;
}

void qem_products_close(qem_products *p)
{
    if (!p)
        return;
    qem_device_session_close(p->device);
    free(p->valid);
    free(p->dark);
    free(p->cache_dir);
    free(p);
}

qem_origin qem_products_sums_origin(const qem_products *p)
{
    return p ? (qem_origin)atomic_load(&p->sums_origin) : QEM_ORIGIN_NONE;
}

qem_origin qem_products_last_origin(const qem_products *p)
{
    return p ? (qem_origin)p->last_origin : QEM_ORIGIN_NONE;
}

const char *qem_origin_name(qem_origin origin)
{
    switch (origin) {
    case QEM_ORIGIN_COMPUTED: return "computed";
    case QEM_ORIGIN_RECORDED: return "recorded";
    case QEM_ORIGIN_CACHED: return "cached";
    case QEM_ORIGIN_NONE: break;
    }
    return "none";
}

qem_status qem_products_valid(const qem_products *p, uint8_t *mask, size_t mask_size,
                              qem_error *error)
{
    qem_error_clear(error);
    if (!p || !mask)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_products_valid: NULL argument");
    QEM_TRY(qem_prod_check_buffer(mask_size, p->pixels, 1, "the mask", error));
    memcpy(mask, p->valid, (size_t)p->pixels);
    return QEM_OK;
}

qem_status qem_prod_check_buffer(size_t size, uint64_t count, size_t item, const char *what,
                                 qem_error *error)
{
    if (size / item < count)
        return qem_fail(error, QEM_E_BUFFER_TOO_SMALL, "%s needs %llu bytes, %zu given", what,
                        (unsigned long long)(count * item), size);
    return QEM_OK;
}

qem_status qem_products_file_calibration(const qem_products *p, qem_detector_calibration *c,
                                         qem_error *error)
{
    qem_error_clear(error);
    if (!p)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_products_file_calibration: NULL");
    QEM_TRY(qem_result_check(c, "qem_detector_calibration", error));
    qem_detector_calibration recorded;
    memset(&recorded, 0, sizeof recorded);
    if (!p->ops->detector_calibration(p->impl, &recorded))
        return qem_fail(error, QEM_E_NOT_RECORDED, "the file records no detector calibration");
    return qem_result_deliver(c, &recorded, sizeof recorded, "qem_detector_calibration", error);
}

qem_status qem_products_semiangle(const qem_products *p, double *mrad, qem_error *error)
{
    qem_error_clear(error);
    if (!p || !mrad)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_products_semiangle: NULL");
    if (!p->ops->semiangle_mrad(p->impl, mrad))
        return qem_fail(error, QEM_E_NOT_RECORDED,
                        "the file states no convergence semi-angle");
    return QEM_OK;
}

uint32_t qem_prod_max_value(const qem_products *p)
{
    return p->data == QEM_DATA_COUNTS && p->info.working_dtype == QEM_DTYPE_UINT8 ? 255u
                                                                                  : 65535u;
}

/* Neumaier (Kahan-Babuska) compensated float32 sum: exact rounding steps,
 * no fused multiply-add (this file is built with -ffp-contract=off). A
 * non-finite term propagates and resets the compensation. */
typedef struct neumaier32 {
    float sum, compensation;
} neumaier32;

static float neumaier32_value(const neumaier32 *n)
{
    return n->sum + n->compensation;
}

static void neumaier32_add(neumaier32 *n, float v)
{
    const float t = n->sum + v;
    if (isfinite(v) && isfinite(n->sum) && isfinite(t)) {
        if (fabsf(n->sum) >= fabsf(v))
            n->compensation += (n->sum - t) + v;
        else
            n->compensation += (v - t) + n->sum;
    } else {
        n->compensation = 0.0f;
    }
    n->sum = t;
}

void qem_prod_neumaier64_add(prod_neumaier64 *n, double v)
{
    const double t = n->sum + v;
    if (isfinite(v) && isfinite(n->sum) && isfinite(t)) {
        if (fabs(n->sum) >= fabs(v))
            n->compensation += (n->sum - t) + v;
        else
            n->compensation += (v - t) + n->sum;
    } else {
        n->compensation = 0.0;
    }
    n->sum = t;
}

/* --- the window loop ------------------------------------------------------ */

static qem_values values_read(const qem_products *p)
{
    /* Codes are the scaled codec's raw values; counts and float data are
     * working values (a pack's are mask-applied). */
    return p->data == QEM_DATA_CODES ? QEM_VALUES_RAW : QEM_VALUES_WORKING;
}

static size_t item_size(const qem_products *p)
{
    return p->data == QEM_DATA_FLOAT     ? 4
           : p->data == QEM_DATA_CODES   ? 2
                                         : qem_dtype_size(p->info.working_dtype);
}

qem_status qem_prod_for_windows(qem_products *p, uint64_t first, uint64_t count,
                                prod_window_fn each, void *user, qem_error *error)
{
    const size_t item = item_size(p);
    uint64_t cap = WINDOW_BYTES / (p->pixels * item);
    cap = cap ? cap : 1;
    void *rows = malloc((size_t)((count < cap ? count : cap) * p->pixels * item));
    if (!rows && count)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a window of scans");
    qem_status st = QEM_OK;
    for (uint64_t at = first; st == QEM_OK && at < first + count;) {
        uint64_t n = p->ops->window(p->impl, at);
        n = n < cap ? n : cap;
        n = n < first + count - at ? n : first + count - at;
        st = p->ops->read(p->impl, at, n, values_read(p), rows, (size_t)(n * p->pixels * item),
                          p->threads, error);
        if (st == QEM_OK)
            st = each(user, at, n, rows, error);
        at += n;
        if (st == QEM_OK && p->options.progress &&
            p->options.progress(p->options.progress_user, at - first, count))
            st = qem_fail(error, QEM_E_CANCELLED, "cancelled");
    }
    free(rows);
    return st;
}

/* --- exact weighted sums ----------------------------------------------- */

typedef struct reference_sums {
    const int32_t *const *weights;
    unsigned planes;
    uint64_t first, count;
    int64_t *out;
    const qem_products *p;
} reference_sums;

static qem_status reference_window(void *user, uint64_t first, uint64_t count, const void *rows,
                                   qem_error *error)
{
    (void)error;
    reference_sums *r = user;
    const qem_products *p = r->p;
    for (uint64_t i = 0; i < count; i++)
        for (unsigned k = 0; k < r->planes; k++) {
            int64_t acc = 0;
            const int32_t *w = r->weights[k];
            for (uint64_t px = 0; px < p->pixels; px++)
                if (p->valid[px] && w[px])
                    acc += (int64_t)w[px] * prod_int_at(p, rows, i * p->pixels + px);
            r->out[k * r->count + first - r->first + i] = acc;
        }
    return QEM_OK;
}

/* Computes them: the representation's own reduction in pieces on the fast
 * path, else the dense reference over windows. */
static qem_status computed_sums(qem_products *p, uint64_t first, uint64_t count,
                                const int32_t *const *weights, unsigned planes, int64_t *out,
                                qem_error *error)
{
    if (p->path == QEM_PATH_REFERENCE || !p->ops->weighted_sums) {
        reference_sums r = {weights, planes, first, count, out, p};
        memset(out, 0, (size_t)(count * planes) * sizeof *out);
        return qem_prod_for_windows(p, first, count, reference_window, &r, error);
    }
    /* Pieces of scans merge by addition: each piece writes its own slice. */
    const uint64_t least = (count + PIECES_MAX - 1) / PIECES_MAX;
    const uint64_t size = least > PIECE_SCANS ? least : PIECE_SCANS;
    /* One plane's pieces are written in place; several planes' pieces
     * interleave differently from `out`, so they pass through a buffer. */
    int64_t *piece = planes > 1 ? malloc((size_t)(size * planes) * sizeof *piece) : NULL;
    if (planes > 1 && !piece)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    qem_status st = QEM_OK;
    for (uint64_t at = first; st == QEM_OK && at < first + count; at += size) {
        const uint64_t n = first + count - at < size ? first + count - at : size;
        st = qem_prod_reduce_weighted(p, at, n, weights, planes,
                                      piece ? piece : out + (at - first), error);
        for (unsigned k = 0; st == QEM_OK && piece && k < planes; k++)
            memcpy(out + k * count + (at - first), piece + k * n, (size_t)n * sizeof *out);
        if (st == QEM_OK && p->options.progress &&
            p->options.progress(p->options.progress_user, at + n - first, count))
            st = qem_fail(error, QEM_E_CANCELLED, "cancelled");
    }
    free(piece);
    return st;
}

/* The plane as a 0/1 mask over valid pixels (invalid ones cleared), its
 * SHA-256 and pixel count; 0 when a valid pixel's weight is not 0 or 1. */
static int plane_mask(const qem_products *p, const int32_t *w, uint8_t *mask, uint8_t digest[32],
                      uint64_t *selected)
{
    *selected = 0;
    for (uint64_t px = 0; px < p->pixels; px++) {
        const int32_t v = p->valid[px] ? w[px] : 0;
        if (v != 0 && v != 1)
            return 0;
        mask[px] = (uint8_t)v;
        *selected += (uint64_t)v;
    }
    return qem_sha256_oneshot(mask, (size_t)p->pixels, digest) == 0;
}

/* Whether `mask` is the default detector's (what a plain BF request
 * resolves), decided only where that costs no pass over the scans: the
 * file records its calibration or pixel sums, or an earlier open kept
 * the sums. */
static int is_default_mask(qem_products *p, const uint8_t id[32], const uint8_t *mask)
{
    qem_detector_calibration cal = {.struct_size = sizeof cal};
    int cheap = qem_products_file_calibration(p, &cal, NULL) == QEM_OK;
    uint64_t *sums = cheap ? NULL : malloc((size_t)p->pixels * sizeof *sums);
    cheap = cheap || (sums && p->ops->recorded_pixel_sums &&
                      p->ops->recorded_pixel_sums(p->impl, sums)) ||
            (sums && qem_prod_sums_cache_load(p, id, sums));
    free(sums);
    uint8_t *def = cheap ? malloc((size_t)p->pixels) : NULL;
    qem_detector_request rq;
    qem_detector_request_init(&rq);
    const int same = def &&
                     qem_products_resolve_detector(p, &rq, def, (size_t)p->pixels, NULL, NULL) ==
                         QEM_OK &&
                     memcmp(def, mask, (size_t)p->pixels) == 0;
    free(def);
    return same;
}

qem_status qem_prod_weighted_sums(qem_products *p, uint64_t first, uint64_t count,
                                  const int32_t *const *weights, unsigned planes, int64_t *out,
                                  qem_error *error)
{
    if (p->data == QEM_DATA_FLOAT)
        return qem_fail(error, QEM_E_WRONG_CODEC,
                        "float32 data have no exact sums; products use compensated sums");
    if (first > p->scans || count > p->scans - first || !weights || !planes || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "weighted sums: bad range or argument");
    /* Values the file records answer without decoding; the reference
     * path always computes, so tests can compare the two. */
    if (p->path != QEM_PATH_REFERENCE && p->ops->prepared_sums &&
        p->ops->prepared_sums(p->impl, first, count, weights, planes, out)) {
        p->last_origin = QEM_ORIGIN_RECORDED;
        return QEM_OK;
    }
    p->last_origin = QEM_ORIGIN_COMPUTED;
    /* A whole image over a 0/1 mask: the default detector's may be kept
     * from an earlier open of the same content (cache_dir). */
    uint8_t id[32], digest[32];
    uint64_t selected = 0;
    uint8_t *mask = p->path == QEM_PATH_FAST && p->cache_dir && planes == 1 && first == 0 &&
                            count == p->scans && p->ops->content_identity
                        ? malloc((size_t)p->pixels)
                        : NULL;
    const int keyed = mask && plane_mask(p, weights[0], mask, digest, &selected) &&
                      p->ops->content_identity(p->impl, id);
    if (keyed && qem_prod_image_cache_load(p, id, digest, selected, out)) {
        p->last_origin = QEM_ORIGIN_CACHED;
        free(mask);
        return QEM_OK;
    }
    const qem_status st = computed_sums(p, first, count, weights, planes, out, error);
    if (st == QEM_OK && keyed && is_default_mask(p, id, mask))
        qem_prod_image_cache_store(p, id, digest, selected, out);
    free(mask);
    return st;
}

qem_status qem_products_weighted_sums(qem_products *p, uint64_t first, uint64_t count,
                                      const int32_t *const *weights, unsigned planes,
                                      int64_t *out, size_t out_size, qem_error *error)
{
    qem_error_clear(error);
    if (!p)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_products_weighted_sums: NULL");
    uint64_t values;
    if (__builtin_mul_overflow(count, (uint64_t)planes, &values))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "weighted sums: too many values");
    QEM_TRY(qem_prod_check_buffer(out_size, values, sizeof *out, "the sums", error));
    return qem_prod_weighted_sums(p, first, count, weights, planes, out, error);
}

typedef struct pixel_sums {
    const qem_products *p;
    uint64_t *sums;
} pixel_sums;

static qem_status pixel_sums_window(void *user, uint64_t first, uint64_t count, const void *rows,
                                    qem_error *error)
{
    (void)first;
    (void)error;
    pixel_sums *s = user;
    const qem_products *p = s->p;
    for (uint64_t i = 0; i < count; i++)
        for (uint64_t px = 0; px < p->pixels; px++)
            s->sums[px] += prod_int_at(p, rows, i * p->pixels + px);
    return QEM_OK;
}

qem_status qem_products_pixel_sums(qem_products *p, uint64_t first, uint64_t count,
                                   uint64_t *sums, size_t sums_size, qem_error *error)
{
    qem_error_clear(error);
    if (!p || !sums)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_products_pixel_sums: NULL");
    QEM_TRY(qem_prod_check_buffer(sums_size, p->pixels, sizeof *sums, "the pixel sums", error));
    if (p->data == QEM_DATA_FLOAT)
        return qem_fail(error, QEM_E_WRONG_CODEC, "float32 data have no exact pixel sums");
    if (first > p->scans || count > p->scans - first)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "scans [%llu, +%llu) outside the %llu",
                        (unsigned long long)first, (unsigned long long)count,
                        (unsigned long long)p->scans);
    if (p->path == QEM_PATH_FAST && p->ops->pixel_sums)
        return qem_prod_reduce_pixels(p, first, count, sums, NULL, error);
    pixel_sums s = {p, sums};
    QEM_TRY(qem_prod_for_windows(p, first, count, pixel_sums_window, &s, error));
    for (uint64_t px = 0; px < p->pixels; px++)
        if (!p->valid[px])
            sums[px] = 0;
    return QEM_OK;
}

/* --- float data ------------------------------------------------------------ */

typedef struct float_sums {
    const qem_products *p;
    const uint64_t *selected;
    uint64_t n_selected, first;
    float *out;
} float_sums;

static qem_status float_window(void *user, uint64_t first, uint64_t count, const void *rows,
                               qem_error *error)
{
    (void)error;
    float_sums *f = user;
    const qem_products *p = f->p;
    const float *v = rows;
    for (uint64_t i = 0; i < count; i++) {
        neumaier32 n = {0.0f, 0.0f};
        for (uint64_t j = 0; j < f->n_selected; j++) {
            const uint64_t px = f->selected[j];
            const float x = v[i * p->pixels + px];
            neumaier32_add(&n, p->dark ? x - p->dark[px] : x);
        }
        f->out[first - f->first + i] = neumaier32_value(&n);
    }
    return QEM_OK;
}

qem_status qem_prod_float_masked_sums(qem_products *p, uint64_t first, uint64_t count,
                                      const uint8_t *mask, float *out, qem_error *error)
{
    uint64_t *selected = malloc((size_t)p->pixels * sizeof *selected), n = 0;
    if (!selected)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t px = 0; px < p->pixels; px++)
        if (mask[px] && p->valid[px])
            selected[n++] = px;
    float_sums f = {p, selected, n, first, out};
    qem_status st = qem_prod_for_windows(p, first, count, float_window, &f, error);
    free(selected);
    return st;
}
