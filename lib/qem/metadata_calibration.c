/* Calibration read out of scientific_metadata (doc/metadata.md, "How
 * calibration is resolved"), and the metadata of freshly saved
 * measurements. Only quantities in a unit qem knows, with a positive finite
 * value, are ever used; overrides replace recorded values in the result
 * and never in the file; nothing absent is guessed. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qem/metadata.h"
#include "qem/metadata_quantities.h"

/* Fills `out` from quantity `q` of `kind` when its value is a positive
 * finite number in a known unit; otherwise leaves `out` untouched. */
static void take(qem_quantity *out, const json_t *q, quantity_kind kind,
                 qem_calibration_source source)
{
    double v;
    const json_t *unit = json_object_get(q, "unit");
    if (!json_is_object(q) || !number_value(json_object_get(q, "value"), &v) || !isfinite(v) ||
        v <= 0 || !json_is_string(unit))
        return;
    const unit_conversion *c = qem_metadata_find_unit(kind, json_string_value(unit));
    if (!c || !isfinite(v * c->factor))
        return;
    out->value = v * c->factor;
    snprintf(out->unit, sizeof out->unit, "%s", c->target);
    out->source = source;
}

void qem_metadata_calibration(const json_t *sm, qem_calibration *cal)
{
    memset(cal, 0, sizeof *cal);
    if (!json_is_object(sm))
        return;
    const json_t *axes = json_object_get(sm, "axes");
    const json_t *em = json_object_get(sm, "electron_microscope");
    const json_t *ov = json_object_get(sm, "calibration_overrides");
    if (!json_is_object(em))
        em = NULL;
    if (!json_is_object(ov))
        ov = NULL;
    qem_quantity *steps[4] = {&cal->scan_step[0], &cal->scan_step[1], &cal->detector_step[0],
                              &cal->detector_step[1]};
    for (size_t i = 0; i < 4; i++) {
        quantity_kind kind = i < 2 ? KIND_SCAN : KIND_DETECTOR;
        const char *duplicate = qem_metadata_axis_duplicate(i);
        const json_t *axis = json_array_get(axes, i); /* NULL when axes is no list */
        take(steps[i], json_object_get(axis, "sampling"), kind, QEM_CALIBRATION_RECORDED);
        if (steps[i]->source == QEM_CALIBRATION_ABSENT)
            take(steps[i], json_object_get(em, duplicate), kind, QEM_CALIBRATION_RECORDED);
        take(steps[i], json_object_get(ov, duplicate), kind, QEM_CALIBRATION_OVERRIDE);
    }
    const struct {
        qem_quantity *out;
        const char *path;
        quantity_kind kind;
    } scalars[] = {
        {&cal->voltage, P_VOLTAGE, KIND_VOLTAGE},
        {&cal->semiangle, P_ANGLE, KIND_ANGLE},
        {&cal->dwell, P_DWELL, KIND_DWELL},
        {&cal->camera_length, P_CAMERA, KIND_CAMERA},
    };
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
        take(scalars[i].out, json_object_get(em, scalars[i].path), scalars[i].kind,
             QEM_CALIBRATION_RECORDED);
        take(scalars[i].out, json_object_get(ov, scalars[i].path), scalars[i].kind,
             QEM_CALIBRATION_OVERRIDE);
    }
}

json_t *qem_metadata_new(const uint64_t shape[4], const char *source_format,
                         const json_t *source_metadata)
{
    json_t *axes = json_array();
    for (size_t i = 0; axes && i < 4; i++)
        if (json_array_append_new(axes, json_pack("{s:s, s:I}", "name", qem_metadata_axis_name(i),
                                                  "size", (json_int_t)shape[i])) != 0) {
            json_decref(axes);
            return NULL;
        }
    if (!axes)
        return NULL;
    /* json_pack steals "o" references, also on failure. */
    return json_pack("{s:s, s:o, s:{}, s:{}, s:[{s:b, s:s}], s:[], s:s, s:o, s:s}", "schema",
                     SCHEMA_2, "axes", axes, "calibration_overrides", "electron_microscope",
                     "processing", "changes_measurements", 0, "operation", "lossless_storage",
                     "source_documents", "source_format", source_format ? source_format : "unknown",
                     "source_metadata",
                     source_metadata ? json_deep_copy(source_metadata) : json_object(),
                     "source_metadata_coverage", "reader-retained");
}

/* `qem calibrate` records the detector calibration as a namespaced
 * extension of the scientific metadata (doc/products.md). */
int qem_metadata_detector_calibration(const json_t *scientific, qem_detector_calibration *c)
{
    const json_t *ext =
        json_object_get(json_object_get(scientific, "extensions"), QEM_DETECTOR_CALIBRATION_KEY);
    const json_t *centre = json_object_get(ext, "detector_center_px");
    const json_t *radius = json_object_get(ext, "bright_field_radius_px");
    const json_t *method = json_object_get(ext, "method");
    if (!json_is_array(centre) || json_array_size(centre) != 2 ||
        !json_is_number(json_array_get(centre, 0)) || !json_is_number(json_array_get(centre, 1)) ||
        !json_is_number(radius))
        return 0;
    memset(c, 0, sizeof *c);
    c->center_row = json_number_value(json_array_get(centre, 0));
    c->center_column = json_number_value(json_array_get(centre, 1));
    c->bright_field_radius = json_number_value(radius);
    snprintf(c->method, sizeof c->method, "%s",
             json_is_string(method) ? json_string_value(method) : "");
    return isfinite(c->center_row) && isfinite(c->center_column) &&
           isfinite(c->bright_field_radius) && c->bright_field_radius > 0;
}
