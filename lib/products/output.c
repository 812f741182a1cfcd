/* Public entry points that hand products to files: images by extension,
 * and a new copy of a file carrying a detector calibration (a pack's
 * source-bound detector_calibration, or a .qem metadata extension). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "pack/calibrated_copy.h"
#include "products/image_out.h"

static qem_status qem_image_write_body(const qem_image *image, const char *path, qem_error *error)
{
    qem_error_clear(error);
    if (!image || !path)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_image_write: NULL argument");
    const product_array a = {image->dtype, image->ndim,
                             {image->shape[0], image->shape[1], image->shape[2]}, image->data};
    return product_write_image(path, &a, error);
}

qem_status qem_image_write(const qem_image *image, const char *path, qem_error *error)
{
    const qem_status st = qem_image_write_body(image, path, error);
    qem_error_name_destination(error, path);
    return st;
}

const char *qem_image_format(const char *path)
{
    return product_image_format(path);
}

/* .qem: re-saved with scientific_metadata.extensions[KEY] set. */
static qem_status qem_calibrated_copy(const char *src, const char *dest,
                                      const qem_detector_calibration *c, qem_error *error)
{
    qem_file *f = NULL;
    QEM_TRY(qem_open(src, NULL, &f, error));
    size_t n = 0;
    const char *text = qem_header_json(f, &n);
    json_t *header = json_loadb(text, n, 0, NULL);
    qem_close(f);
    json_t *sci = json_object_get(header, "scientific_metadata");
    if (!json_is_object(sci)) {
        json_decref(header);
        return qem_fail(error, QEM_E_METADATA,
                        "'%s' has no scientific_metadata to record a calibration in", src);
    }
    json_t *ext = json_object_get(sci, "extensions");
    if (!ext) {
        ext = json_object();
        json_object_set_new(sci, "extensions", ext);
    }
    if (!json_is_object(ext)) {
        json_decref(header);
        return qem_fail(error, QEM_E_METADATA, "scientific_metadata.extensions is not an object");
    }
    json_object_set_new(ext, QEM_DETECTOR_CALIBRATION_KEY,
                        json_pack("{s:s, s:[f,f], s:f, s:s}", "schema",
                                  "qem.detector-calibration/v1", "detector_center_px",
                                  c->center_row, c->center_column, "bright_field_radius_px",
                                  c->bright_field_radius, "method", c->method));
    char *sci_text = json_dumps(sci, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(header);
    if (!sci_text)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    qem_save_options so;
    qem_save_options_init(&so);
    so.scientific_metadata_json = sci_text;
    qem_status st = qem_save_file(src, dest, &so, error);
    free(sci_text);
    return st;
}

static qem_status qem_write_calibrated_copy_body(const char *src, const char *dest,
                                     const qem_detector_calibration *c, qem_error *error)
{
    qem_error_clear(error);
    if (!src || !dest || !c)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_write_calibrated_copy: NULL");
    qem_file_kind kind;
    QEM_TRY(qem_identify(src, &kind, error));
    if (kind == QEM_KIND_PACK) {
        const pack_calibration_in in = {c->center_row,   c->center_column,
                                        c->bright_field_radius, c->method,
                                        c->has_dpc,      c->dpc_rotation_degrees,
                                        c->dpc_component_order_exchanged};
        return pack_write_calibrated_copy(src, dest, &in, error);
    }
    if (kind == QEM_KIND_QEM)
        return qem_calibrated_copy(src, dest, c, error);
    return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                    "'%s' is neither a .qem file nor a pack; nothing to calibrate", src);
}

qem_status qem_write_calibrated_copy(const char *src, const char *dest,
                                     const qem_detector_calibration *c, qem_error *error)
{
    const qem_status st = qem_write_calibrated_copy_body(src, dest, c, error);
    qem_error_name_destination(error, dest);
    return st;
}
