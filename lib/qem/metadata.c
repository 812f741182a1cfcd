/* scientific_metadata, schema "quantem.scientific-metadata/2": the
 * calibration authority of a .qem file. These are the structural rules;
 * quantity-level rules build on them. */
#include <string.h>

#include "common/error.h"
#include "common/json.h"
#include "qem/qem_internal.h"

#define SCHEMA_PREFIX "quantem.scientific-metadata/"

static const char *const axis_names[4] = {"scan_row", "scan_column", "detector_row",
                                          "detector_column"};

static qem_status check_axes(const json_t *axes, const uint64_t shape[4], qem_error *error)
{
    if (!json_is_array(axes) || json_array_size(axes) != 4)
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.axes must be a list of four axis objects");
    for (size_t i = 0; i < 4; i++) {
        const json_t *axis = json_array_get(axes, i);
        if (!json_is_object(axis))
            return qem_fail(error, QEM_E_METADATA, "scientific_metadata.axes[%zu] is not an object",
                            i);
        const json_t *name = json_object_get(axis, "name");
        if (!json_is_string(name) || strcmp(json_string_value(name), axis_names[i]) != 0)
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.axes[%zu] must be named '%s'", i, axis_names[i]);
        uint64_t size;
        if (!qem_json_as_u64(json_object_get(axis, "size"), &size) || size != shape[i])
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata axis '%s' size disagrees with the shape %llu",
                            axis_names[i], (unsigned long long)shape[i]);
        const json_t *sampling = json_object_get(axis, "sampling");
        if (sampling && !json_is_object(sampling))
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata axis '%s' sampling is not an object",
                            axis_names[i]);
    }
    return QEM_OK;
}

static qem_status check_processing(const json_t *processing, qem_error *error)
{
    if (!json_is_array(processing) || json_array_size(processing) == 0)
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.processing must be a non-empty list");
    size_t i;
    const json_t *entry;
    json_array_foreach(processing, i, entry) {
        const json_t *op = json_object_get(entry, "operation");
        if (!json_is_object(entry) || !json_is_string(op) || json_string_length(op) == 0)
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.processing[%zu] needs a non-empty 'operation'",
                            i);
        if (!json_is_boolean(json_object_get(entry, "changes_measurements")))
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.processing[%zu] ('%s') needs a boolean "
                            "'changes_measurements'",
                            i, json_string_value(op));
    }
    return QEM_OK;
}

qem_status qem_metadata_validate(const json_t *sm, const uint64_t shape[4], qem_error *error)
{
    if (!json_is_object(sm))
        return qem_fail(error, QEM_E_METADATA, "scientific_metadata is missing or not an object");
    const json_t *schema = json_object_get(sm, "schema");
    if (!json_is_string(schema))
        return qem_fail(error, QEM_E_METADATA, "scientific_metadata.schema is missing");
    const char *s = json_string_value(schema);
    if (strcmp(s, SCHEMA_PREFIX "2") != 0 && strcmp(s, SCHEMA_PREFIX "1") != 0) {
        if (strncmp(s, SCHEMA_PREFIX, strlen(SCHEMA_PREFIX)) == 0)
            return qem_fail(error, QEM_E_UNSUPPORTED,
                            "scientific metadata schema '%s' is newer than this qem understands; "
                            "update qem",
                            s);
        return qem_fail(error, QEM_E_METADATA, "unknown scientific metadata schema '%s'", s);
    }
    QEM_TRY(check_axes(json_object_get(sm, "axes"), shape, error));
    const char *objects[] = {"electron_microscope", "calibration_overrides"};
    for (size_t i = 0; i < 2; i++) {
        const json_t *v = json_object_get(sm, objects[i]);
        if (v && !json_is_object(v))
            return qem_fail(error, QEM_E_METADATA, "scientific_metadata.%s must be an object",
                            objects[i]);
    }
    if (!json_is_object(json_object_get(sm, "source_metadata")))
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.source_metadata is missing or not an object");
    const json_t *coverage = json_object_get(sm, "source_metadata_coverage");
    const char *cov = json_is_string(coverage) ? json_string_value(coverage) : "";
    if (strcmp(cov, "reader-retained") != 0 && strcmp(cov, "exhaustive") != 0 &&
        strcmp(cov, "unknown") != 0)
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.source_metadata_coverage must be reader-retained, "
                        "exhaustive or unknown");
    const json_t *docs = json_object_get(sm, "source_documents");
    if (docs && !json_is_array(docs))
        return qem_fail(error, QEM_E_METADATA, "scientific_metadata.source_documents is not a list");
    return check_processing(json_object_get(sm, "processing"), error);
}

json_t *qem_metadata_new(const uint64_t shape[4], const char *source_format)
{
    json_t *axes = json_array();
    for (int i = 0; i < 4; i++)
        json_array_append_new(axes, json_pack("{s:s, s:I}", "name", axis_names[i], "size",
                                              (json_int_t)shape[i]));
    return json_pack("{s:s, s:o, s:{}, s:{}, s:[{s:b, s:s}], s:[], s:s, s:{}, s:s}", "schema",
                     SCHEMA_PREFIX "2", "axes", axes, "calibration_overrides",
                     "electron_microscope", "processing", "changes_measurements", 0, "operation",
                     "lossless_storage", "source_documents", "source_format",
                     source_format ? source_format : "unknown", "source_metadata",
                     "source_metadata_coverage", "reader-retained");
}
