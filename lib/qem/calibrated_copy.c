/* A calibrated copy of a .qem file: the same data re-saved with the
 * detector calibration recorded in scientific_metadata.extensions
 * (QEM_DETECTOR_CALIBRATION_KEY); the original is never written. */
#include <jansson.h>
#include <stdlib.h>

#include "common/error.h"
#include "qem/calibrated_copy.h"
#include "qem/qem_internal.h"

qem_status qem_file_write_calibrated_copy(const char *src, const char *dest,
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
    /* The core's own re-save: the reading core links without the input
     * layer (build_core_alone). */
    qem_status st = qem_resave_file(src, dest, &so, error);
    free(sci_text);
    qem_error_name_destination(error, dest);
    return st;
}

