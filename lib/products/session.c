/* Detector sessions: one mask over one or more sources (a tilt series).
 * Setting a new mask after the first updates each image by the signed sums
 * of only the pixels whose membership changed (integer data), which equals
 * a full recomputation exactly; float data are recomputed. New images
 * replace the old ones only when every source succeeded. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/options.h"
#include "products/products.h"

struct qem_detector_session {
    qem_products **sources;
    size_t count;
    uint8_t *mask;        /* current mask, pixels bytes; NULL before the first */
    int64_t **sums;       /* integer data: exact per-scan sums per source */
    qem_image *images;    /* current images per source */
    qem_session_stats stats;
};

void qem_detector_session_free(qem_detector_session *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->count; i++) {
        if (s->sums)
            free(s->sums[i]);
        if (s->images)
            qem_image_free(&s->images[i]);
    }
    free(s->sums);
    free(s->images);
    free(s->sources);
    free(s->mask);
    free(s);
}

qem_status qem_detector_session_create(qem_products *const *products, size_t count,
                                       qem_detector_session **out, qem_error *error)
{
    qem_error_clear(error);
    if (!products || !count || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "a session needs at least one source");
    *out = NULL;
    for (size_t i = 0; i < count; i++) {
        if (!products[i])
            return qem_fail(error, QEM_E_INVALID_ARGUMENT, "source %zu is NULL", i);
        if (products[i]->det_rows != products[0]->det_rows ||
            products[i]->det_cols != products[0]->det_cols)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "source %zu has a %llu x %llu detector, source 0 %llu x %llu: one "
                            "mask cannot serve both",
                            i, (unsigned long long)products[i]->det_rows,
                            (unsigned long long)products[i]->det_cols,
                            (unsigned long long)products[0]->det_rows,
                            (unsigned long long)products[0]->det_cols);
        uint64_t id[2];
        products[i]->ops->file_id(products[i]->impl, id);
        for (size_t j = 0; j < i; j++) {
            uint64_t other[2];
            products[j]->ops->file_id(products[j]->impl, other);
            if (products[j] == products[i] || (id[0] == other[0] && id[1] == other[1]))
                return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                                "sources %zu and %zu are the same file; a series lists each "
                                "acquisition once",
                                j, i);
        }
    }
    qem_detector_session *s = calloc(1, sizeof *s);
    if (s) {
        s->sources = malloc(count * sizeof *s->sources);
        s->sums = calloc(count, sizeof *s->sums);
        s->images = calloc(count, sizeof *s->images);
    }
    if (!s || !s->sources || !s->sums || !s->images) {
        qem_detector_session_free(s);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    memcpy(s->sources, products, count * sizeof *s->sources);
    s->count = count;
    s->stats.sources = count;
    for (size_t i = 0; i < count; i++)
        s->stats.resident_bytes += products[i]->ops->resident_bytes(products[i]->impl);
    *out = s;
    return QEM_OK;
}

/* The image of exact sums: uint32 when the bound allows, else uint64. */
static qem_status image_from_sums(qem_products *p, const int64_t *sums, uint64_t n_mask,
                                  qem_image *image, qem_error *error)
{
    if (p->data == QEM_DATA_CODES) {
        QEM_TRY(qem_prod_image_new(image, QEM_DTYPE_FLOAT32, p->scan_rows, p->scan_cols, 1, error));
        for (uint64_t s = 0; s < p->scans; s++) {
            double scale, offset;
            p->ops->code_affine(p->impl, s, &scale, &offset);
            ((float *)image->data)[s] = (float)(scale * (double)sums[s] + offset * (double)n_mask);
        }
        return QEM_OK;
    }
    const int wide = (double)n_mask * qem_prod_max_value(p) > 4294967295.0;
    QEM_TRY(qem_prod_image_new(image, wide ? QEM_DTYPE_UINT64 : QEM_DTYPE_UINT32, p->scan_rows,
                               p->scan_cols, 1, error));
    for (uint64_t s = 0; s < p->scans; s++) {
        if (wide)
            ((uint64_t *)image->data)[s] = (uint64_t)sums[s];
        else
            ((uint32_t *)image->data)[s] = (uint32_t)sums[s];
    }
    return QEM_OK;
}

/* New sums and image of one source, from scratch or by signed deltas. */
static qem_status update_one(qem_detector_session *s, size_t i, const uint8_t *mask,
                             int64_t **new_sums, qem_image *new_image, uint64_t *changed,
                             qem_error *error)
{
    qem_products *p = s->sources[i];
    *new_sums = NULL;
    memset(new_image, 0, sizeof *new_image);
    uint64_t n_mask = 0;
    for (uint64_t px = 0; px < p->pixels; px++)
        n_mask += mask[px] && p->valid[px];
    if (p->data == QEM_DATA_FLOAT)
        return qem_products_virtual(p, mask, new_image, error);
    int32_t *w = malloc((size_t)p->pixels * sizeof *w);
    int64_t *sums = malloc((size_t)p->scans * sizeof *sums);
    qem_status st = w && sums ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const int delta = s->mask != NULL;
    *changed = 0;
    for (uint64_t px = 0; st == QEM_OK && px < p->pixels; px++) {
        const int32_t now = mask[px] && p->valid[px];
        const int32_t before = delta ? (s->mask[px] && p->valid[px]) : 0;
        w[px] = now - before;
        *changed += w[px] != 0;
    }
    const int32_t *planes[1] = {w};
    if (st == QEM_OK)
        st = qem_prod_weighted_sums(p, 0, p->scans, planes, 1, sums, error);
    for (uint64_t k = 0; st == QEM_OK && delta && k < p->scans; k++)
        sums[k] += s->sums[i][k];
    if (st == QEM_OK)
        st = image_from_sums(p, sums, n_mask, new_image, error);
    free(w);
    if (st != QEM_OK) {
        free(sums);
        return st;
    }
    *new_sums = sums;
    return QEM_OK;
}

qem_status qem_detector_session_set_mask(qem_detector_session *s, const uint8_t *mask,
                                         qem_error *error)
{
    qem_error_clear(error);
    if (!s || !mask)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_detector_session_set_mask: NULL");
    const uint64_t P = s->sources[0]->pixels;
    int64_t **sums = calloc(s->count, sizeof *sums);
    qem_image *images = calloc(s->count, sizeof *images);
    uint8_t *kept = malloc((size_t)P);
    qem_status st = sums && images && kept ? QEM_OK
                                           : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    uint64_t changed = 0;
    for (size_t i = 0; st == QEM_OK && i < s->count; i++)
        st = update_one(s, i, mask, &sums[i], &images[i], &changed, error);
    if (st != QEM_OK) {
        /* Nothing changes: the old images stand. */
        for (size_t i = 0; sums && images && i < s->count; i++) {
            free(sums[i]);
            qem_image_free(&images[i]);
        }
        free(sums);
        free(images);
        free(kept);
        return st;
    }
    int any_float = 0;
    for (size_t i = 0; i < s->count; i++)
        any_float |= s->sources[i]->data == QEM_DATA_FLOAT;
    s->stats.full_recomputation = s->mask == NULL || any_float;
    s->stats.pixels_changed = changed;
    s->stats.ffts = 0;
    for (size_t i = 0; i < s->count; i++) {
        free(s->sums[i]);
        qem_image_free(&s->images[i]);
        s->sums[i] = sums[i];
        s->images[i] = images[i];
    }
    free(sums);
    free(images);
    memcpy(kept, mask, (size_t)P);
    free(s->mask);
    s->mask = kept;
    return QEM_OK;
}

qem_status qem_detector_session_image(const qem_detector_session *s, size_t index,
                                      qem_image *image, qem_error *error)
{
    qem_error_clear(error);
    if (!s || !image || index >= s->count)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "no source %zu in this session", index);
    if (!s->mask)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "set a mask before asking for an image");
    const qem_image *from = &s->images[index];
    const uint64_t n = from->shape[0] * from->shape[1] * (from->ndim == 3 ? from->shape[2] : 1);
    QEM_TRY(qem_prod_image_new(image, from->dtype, from->shape[0], from->shape[1],
                               from->ndim == 3 ? from->shape[2] : 1, error));
    memcpy(image->data, from->data, (size_t)(n * qem_dtype_size(from->dtype)));
    return QEM_OK;
}

qem_status qem_detector_session_stats(const qem_detector_session *s, qem_session_stats *stats,
                                      qem_error *error)
{
    qem_error_clear(error);
    if (!s)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_detector_session_stats: NULL");
    return qem_result_deliver(stats, &s->stats, sizeof s->stats, "qem_session_stats", error);
}
