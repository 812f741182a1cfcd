/* The recorded image of the default detector (detector_image.h). */
#include "qem/detector_image.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/byteorder.h"
#include "common/calibration_estimate.h"
#include "common/error.h"
#include "qem/metadata.h"
#include "qem/pixel_sums.h"
#include "qem/qem_internal.h"

static uint64_t max_count(const qem_file *f)
{
    return f->dtype == QEM_DTYPE_UINT8 ? 255u : 65535u;
}

static uint64_t record_bytes(uint64_t scans, uint64_t pixels, unsigned item)
{
    return 4 * ((scans * item + (pixels + 7) / 8 + 2) / 3) + 600;
}

void qem_detector_image_drop(json_t *scientific)
{
    json_t *ext = json_object_get(scientific, "extensions");
    if (json_is_object(ext))
        json_object_del(ext, QEM_DETECTOR_IMAGE_KEY);
}

/* The disk a plain BF request resolves to: the recorded detector
 * calibration, else the estimate from the recorded sums. 0 when none. */
static int default_disk(const qem_file *f, const json_t *scientific, double *row, double *col,
                        double *radius)
{
    qem_detector_calibration cal;
    if (qem_metadata_detector_calibration(scientific, &cal)) {
        *row = cal.center_row;
        *col = cal.center_column;
        *radius = cal.bright_field_radius;
        return 1;
    }
    float *mean = malloc((size_t)f->pixels * sizeof *mean);
    if (!mean)
        return 0;
    qem_mean_from_sums(f->recorded_sums, f->valid, f->pixels, f->scans, mean);
    product_calibration est;
    const qem_status st = qem_product_calibration_estimate(mean, f->valid, f->shape[2], f->shape[3],
                                                           &est, NULL);
    free(mean);
    if (st != QEM_OK)
        return 0;
    *row = est.center_row;
    *col = est.center_col;
    *radius = est.radius;
    return 1;
}

static qem_status mask_sums(qem_file *f, const uint8_t *mask, int64_t *sums, int threads,
                            qem_error *error)
{
    int32_t *w = malloc((size_t)f->pixels * sizeof *w);
    if (!w)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t p = 0; p < f->pixels; p++)
        w[p] = mask[p];
    const int32_t *planes[1] = {w};
    const qem_status st = qem_weighted_sums(f, 0, f->scans, planes, 1, 1, sums, threads, error);
    free(w);
    return st;
}

static json_t *base64_string(const uint8_t *bytes, size_t size)
{
    char *text = qem_base64_encode(bytes, size);
    json_t *s = text ? json_string(text) : NULL;
    free(text);
    return s;
}

qem_status qem_detector_image_record(json_t *scientific, qem_file *f, int threads,
                                     qem_error *error)
{
    qem_detector_image_drop(scientific);
    if (f->codec != QEM_CODEC_INTEGER || !f->recorded_sums ||
        f->scans > QEM_DETECTOR_IMAGE_MAX_SCANS ||
        record_bytes(f->scans, f->pixels, 2) > f->body_bytes / 64)
        return QEM_OK;
    double row, col, radius;
    if (!default_disk(f, scientific, &row, &col, &radius))
        return QEM_OK; /* no disk stands out: a plain BF request would fail too */
    const uint64_t P = f->pixels, N = f->scans;
    uint8_t *mask = malloc((size_t)P);
    int64_t *sums = malloc((size_t)N * sizeof *sums);
    uint8_t *bits = calloc((size_t)(P + 7) / 8, 1);
    uint8_t *le = malloc((size_t)N * 8);
    qem_status st = mask && sums && bits && le ? QEM_OK
                                               : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK) {
        qem_ring_mask(f->shape[2], f->shape[3], row, col, 0, radius * radius, f->valid, mask);
        st = mask_sums(f, mask, sums, threads, error);
    }
    uint64_t most = 0;
    for (uint64_t i = 0; st == QEM_OK && i < N; i++)
        most = (uint64_t)sums[i] > most ? (uint64_t)sums[i] : most;
    const unsigned item = most > UINT32_MAX ? 8 : most > UINT16_MAX ? 4 : 2;
    if (st == QEM_OK && record_bytes(N, P, item) <= f->body_bytes / 64) {
        for (uint64_t p = 0; p < P; p++)
            bits[p / 8] |= (uint8_t)(mask[p] << (p % 8));
        for (uint64_t i = 0; i < N; i++)
            for (unsigned k = 0; k < item; k++)
                le[i * item + k] = (uint8_t)((uint64_t)sums[i] >> (8 * k));
        char digest[65];
        st = qem_pixel_sums_body_digest((const uint8_t(*)[32])f->block_sha, f->block_count, digest,
                                        error);
        json_t *ext = NULL;
        if (st == QEM_OK)
            st = qem_record_extensions(scientific, &ext, error);
        json_t *record =
            st == QEM_OK && ext
                ? json_pack("{s:s, s:s, s:[f,f], s:f, s:I, s:I, s:o*, s:s, s:s, s:o*}", "schema",
                            QEM_DETECTOR_IMAGE_SCHEMA, "detector", "bf", "center_px", row, col,
                            "radius_px", radius, "scans", (json_int_t)N, "pixels", (json_int_t)P,
                            "mask", base64_string(bits, (size_t)(P + 7) / 8), "dtype",
                            item == 2 ? "<u2" : item == 4 ? "<u4" : "<u8", "body_digest", digest,
                            "data", base64_string(le, (size_t)(N * item)))
                : NULL;
        if (st == QEM_OK && ext &&
            (!record || !json_object_get(record, "mask") || !json_object_get(record, "data") ||
             json_object_set_new(ext, QEM_DETECTOR_IMAGE_KEY, record) != 0))
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory recording the detector image");
    }
    free(mask);
    free(sums);
    free(bits);
    free(le);
    return st;
}

static qem_status refuse(const qem_file *f, const char *why, qem_error *error)
{
    return qem_record_refuse(f, QEM_DETECTOR_IMAGE_KEY, why, error);
}

static int finite_number(const json_t *v)
{
    return json_is_number(v) && isfinite(json_number_value(v));
}

/* The base64 string `key` of `record` decoded to exactly `size` bytes. */
static uint8_t *decoded(const json_t *record, const char *key, uint64_t size)
{
    const json_t *s = json_object_get(record, key);
    if (!json_is_string(s))
        return NULL;
    size_t n = 0;
    uint8_t *bytes = qem_base64_decode(json_string_value(s), json_string_length(s), &n);
    if (bytes && n != size) {
        free(bytes);
        return NULL;
    }
    return bytes;
}

static qem_status load_checked(qem_file *f, const json_t *record, qem_error *error)
{
    QEM_TRY(qem_record_check_head(f, record, QEM_DETECTOR_IMAGE_KEY, QEM_DETECTOR_IMAGE_SCHEMA,
                                  error));
    const char *detector = json_string_value(json_object_get(record, "detector"));
    if (!detector || strcmp(detector, "bf") != 0)
        return refuse(f, "names a detector other than bf", error);
    const json_t *centre = json_object_get(record, "center_px");
    const json_t *radius = json_object_get(record, "radius_px");
    if (!json_is_array(centre) || json_array_size(centre) != 2 ||
        !finite_number(json_array_get(centre, 0)) || !finite_number(json_array_get(centre, 1)) ||
        !finite_number(radius) || !(json_number_value(radius) > 0))
        return refuse(f, "has no finite centre and positive radius", error);
    const char *dtype = json_string_value(json_object_get(record, "dtype"));
    const unsigned item = !dtype                   ? 0
                          : !strcmp(dtype, "<u2") ? 2
                          : !strcmp(dtype, "<u4") ? 4
                          : !strcmp(dtype, "<u8") ? 8
                                                  : 0;
    if (!item)
        return refuse(f, "has a dtype other than <u2, <u4 or <u8", error);
    const uint64_t P = f->pixels, N = f->scans;
    uint8_t *bits = decoded(record, "mask", (P + 7) / 8);
    if (!bits)
        return refuse(f, "mask is not base64 of one bit per detector pixel", error);
    uint8_t *mask = malloc((size_t)P);
    uint64_t selected = 0;
    qem_status st = mask ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t p = 0; st == QEM_OK && p < (P + 7) / 8 * 8; p++) {
        const uint8_t bit = (uint8_t)(bits[p / 8] >> (p % 8) & 1);
        if (p >= P && bit)
            st = refuse(f, "mask sets a bit past the last pixel", error);
        else if (p < P && bit && !f->valid[p])
            st = refuse(f, "mask selects an invalid pixel", error);
        else if (p < P)
            selected += (mask[p] = bit);
    }
    free(bits);
    uint8_t *le = st == QEM_OK ? decoded(record, "data", N * item) : NULL;
    if (st == QEM_OK && !le)
        st = refuse(f, "data is not base64 of one value of its dtype per scan", error);
    uint64_t *image = st == QEM_OK ? malloc((size_t)N * sizeof *image) : NULL;
    if (st == QEM_OK && !image)
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const uint64_t bound = selected * max_count(f);
    for (uint64_t i = 0; st == QEM_OK && i < N; i++) {
        uint64_t v = 0;
        for (unsigned k = item; k-- > 0;)
            v = v << 8 | le[i * item + k];
        image[i] = v;
        if (v > bound)
            st = refuse(f, "gives a scan a sum above the mask's pixels times the dtype's maximum",
                        error);
    }
    free(le);
    if (st != QEM_OK) {
        free(mask);
        free(image);
        return st;
    }
    f->recorded_image = image;
    f->recorded_image_mask = mask;
    return QEM_OK;
}

qem_status qem_detector_image_load(qem_file *f, qem_error *error)
{
    const json_t *record = qem_record_get(f, QEM_DETECTOR_IMAGE_KEY);
    return record ? load_checked(f, record, error) : QEM_OK;
}

int qem_detector_image_answer(const qem_file *f, uint64_t first, uint64_t count,
                              const int32_t *const *weights, unsigned planes, int64_t *out)
{
    if (!f->recorded_image || planes != 1 || first > f->scans || count > f->scans - first)
        return 0;
    const int32_t *w = weights[0];
    for (uint64_t p = 0; p < f->pixels; p++)
        if (f->valid[p] && w[p] != f->recorded_image_mask[p])
            return 0;
    for (uint64_t i = 0; i < count; i++)
        out[i] = (int64_t)f->recorded_image[first + i];
    return 1;
}

qem_status qem_detector_image_verify(qem_file *f, int threads, qem_error *error)
{
    if (!f->recorded_image)
        return QEM_OK;
    int64_t *sums = malloc((size_t)f->scans * sizeof *sums);
    if (!sums)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    qem_status st = mask_sums(f, f->recorded_image_mask, sums, threads, error);
    for (uint64_t i = 0; st == QEM_OK && i < f->scans; i++)
        if ((uint64_t)sums[i] != f->recorded_image[i])
            st = qem_fail(error, QEM_E_METADATA,
                          "'%s': the recorded detector image (%s) gives scan %llu the sum %llu, "
                          "but its counts sum to %lld",
                          f->path, QEM_DETECTOR_IMAGE_KEY, (unsigned long long)i,
                          (unsigned long long)f->recorded_image[i], (long long)sums[i]);
    free(sums);
    return st;
}
