/* The machine-readable summary behind `qem info`. */
#include <stdlib.h>

#include "common/error.h"
#include "common/json.h"
#include "qem/qem_internal.h"

void qem_free(void *pointer)
{
    free(pointer);
}

/* Copies the quantities of an object ({path: {value, unit, ...}}). */
static json_t *quantities(const json_t *object)
{
    json_t *out = json_object();
    const char *key;
    json_t *q;
    if (!json_is_object(object))
        return out;
    json_object_foreach((json_t *)object, key, q) {
        json_t *value = json_object_get(q, "value"), *unit = json_object_get(q, "unit");
        if (json_is_number(value))
            json_object_set_new(out, key,
                                json_pack("{s:O, s:O*, s:O*}", "value", value, "unit", unit,
                                          "provenance", json_object_get(q, "provenance")));
    }
    return out;
}

static json_t *metadata_summary(const json_t *sm)
{
    json_t *out = json_object();
    json_object_set(out, "schema", json_object_get(sm, "schema"));
    json_object_set(out, "source_format", json_object_get(sm, "source_format"));
    json_object_set(out, "source_metadata_coverage", json_object_get(sm, "source_metadata_coverage"));
    /* The source's own facts (its header, its digest), as recorded. */
    if (json_is_object(json_object_get(sm, "source_metadata")))
        json_object_set(out, "source_metadata", json_object_get(sm, "source_metadata"));
    json_t *ops = json_array();
    size_t i;
    json_t *entry;
    json_array_foreach(json_object_get(sm, "processing"), i, entry) {
        json_array_append_new(ops, json_pack("{s:O, s:O}", "operation",
                                             json_object_get(entry, "operation"),
                                             "changes_measurements",
                                             json_object_get(entry, "changes_measurements")));
    }
    json_object_set_new(out, "processing", ops);
    json_t *axes = json_object();
    json_array_foreach(json_object_get(sm, "axes"), i, entry) {
        json_t *sampling = json_object_get(entry, "sampling");
        if (json_is_object(sampling) && json_is_number(json_object_get(sampling, "value")))
            json_object_set_new(axes, json_string_value(json_object_get(entry, "name")),
                                json_pack("{s:O, s:O*, s:O*}", "value",
                                          json_object_get(sampling, "value"), "unit",
                                          json_object_get(sampling, "unit"), "provenance",
                                          json_object_get(sampling, "provenance")));
    }
    json_object_set_new(out, "calibrated_axes", axes);
    json_object_set_new(out, "electron_microscope",
                        quantities(json_object_get(sm, "electron_microscope")));
    json_object_set_new(out, "calibration_overrides",
                        quantities(json_object_get(sm, "calibration_overrides")));
    return out;
}

char *qem_summary_json(const qem_file *f, qem_error *error)
{
    qem_error_clear(error);
    qem_file_info info = {.struct_size = sizeof info};
    if (qem_get_info(f, &info, error) != QEM_OK)
        return NULL;
    json_t *chunks = json_array();
    for (uint64_t i = 0; i < f->chunk_count; i++)
        json_array_append_new(chunks, json_pack("{s:I, s:I}", "first",
                                                (json_int_t)f->chunks[i].first, "scans",
                                                (json_int_t)f->chunks[i].scans));
    json_t *root = json_pack(
        "{s:s, s:s, s:i, s:s, s:i, s:[I,I,I,I], s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:o, "
        "s:{s:I, s:I}, s:o}",
        "path", f->path, "container", "quantem.qem", "container_version", 1, "codec",
        qem_codec_name(f->codec), "codec_version", 1, "shape", (json_int_t)f->shape[0],
        (json_int_t)f->shape[1], (json_int_t)f->shape[2], (json_int_t)f->shape[3], "dtype",
        qem_dtype_name(f->dtype), "file_bytes", (json_int_t)info.file_bytes, "header_bytes",
        (json_int_t)info.header_bytes, "body_bytes", (json_int_t)info.body_bytes,
        "logical_bytes", (json_int_t)info.logical_bytes, "chunk_count",
        (json_int_t)info.chunk_count, "compression_ratio",
        info.file_bytes ? (double)info.logical_bytes / (double)info.file_bytes : 0.0, "chunks",
        chunks, "valid_pixels", "valid", (json_int_t)info.valid_pixels, "total",
        (json_int_t)info.pixels, "scientific_metadata",
        metadata_summary(json_object_get(f->header, "scientific_metadata")));
    if (!root) {
        qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        return NULL;
    }
    if (f->codec == QEM_CODEC_FLOAT32) {
        const json_t *bg = json_object_get(json_object_get(f->header, "empad"), "background");
        json_object_set_new(root, "dark",
                            f->dark ? json_pack("{s:s, s:O}", "schema", "empad-mean-dark/v1",
                                                "identity", json_object_get(bg, "identity"))
                                    : json_null());
    }
    if (f->codec == QEM_CODEC_SCALED) {
        json_t *regions = json_array();
        for (uint64_t i = 0; i < f->region_count; i++)
            json_array_append_new(regions,
                                  json_pack("{s:I, s:I, s:f, s:f}", "first_frame",
                                            (json_int_t)f->regions[i].first, "stop_frame",
                                            (json_int_t)f->regions[i].stop, "scale",
                                            f->regions[i].scale, "offset", f->regions[i].offset));
        json_object_set_new(root, "regions", regions);
    }
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (!text)
        qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    return text;
}
