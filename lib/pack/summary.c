/* The machine-readable summary behind `qem info` for packs. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/sha256.h"
#include "pack/pack_internal.h"

static const char *raw_access_name(qem_raw_access a)
{
    switch (a) {
    case QEM_RAW_EXACT_NO_EXCLUSIONS: return "exact_no_exclusions";
    case QEM_RAW_RETAINED_PAYLOAD: return "exact_retained_payload";
    case QEM_RAW_EXCLUSION_CONSTANTS: return "exact_exclusion_constants";
    case QEM_RAW_MASK_APPLIED_ONLY: return "mask_applied_only_legacy";
    }
    return "unknown";
}

static json_t *ms(double v)
{
    return v < 0 ? json_null() : json_real(v);
}

char *qem_pack_summary_json(const qem_pack *p, qem_error *error)
{
    qem_error_clear(error);
    if (!p) {
        qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_pack_summary_json: NULL pack");
        return NULL;
    }
    qem_pack_info info;
    qem_pack_fill_info(p, &info);
    json_t *excluded = json_array();
    for (uint64_t i = 0; i < p->excluded_count; i++)
        json_array_append_new(excluded, json_integer(p->excluded[i]));
    const uint64_t logical = p->scans * p->pixels * 2;
    json_t *root = json_pack(
        "{s:s, s:s, s:s, s:i, s:s, s:[I,I,I,I], s:I, s:I, s:s, s:I, s:o, s:s, s:I, s:I, s:f, "
        "s:s, s:b, s:b}",
        "path", p->path, "format", "Lossless Pack Format v1", "profile",
        p->profile == QEM_PACK_UINT16_LZ4 ? "exact-uint16-lz4" : "exact-uint8-bitpacked",
        "legacy_binary_revision", p->profile == QEM_PACK_UINT16_LZ4 ? 1 : 3, "schema",
        p->profile == QEM_PACK_UINT16_LZ4 ? PACK_SCHEMA_V1 : PACK_SCHEMA_V3, "shape",
        (json_int_t)p->shape[0], (json_int_t)p->shape[1], (json_int_t)p->shape[2],
        (json_int_t)p->shape[3], "shard_count", (json_int_t)p->shard_count, "scans_per_shard",
        (json_int_t)p->sps, "working_dtype", qem_dtype_name(p->working_dtype), "excluded_count",
        (json_int_t)p->excluded_count, "excluded_pixels", excluded, "raw_access",
        raw_access_name(p->raw_access), "file_bytes", (json_int_t)p->file_size, "resident_bytes",
        (json_int_t)info.resident_bytes, "compression_ratio",
        (double)logical / (double)p->file_size, "source_identity_sha256",
        info.source_identity_sha256, "headers_hashed_by_index",
        p->profile == QEM_PACK_UINT16_LZ4, "loaded", p->loaded);
    if (!root) {
        qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        return NULL;
    }
    if (p->has_calibration) {
        const qem_detector_calibration *c = &p->calibration;
        json_t *cal = json_pack("{s:[f,f], s:f, s:s}", "detector_center_px", c->center_row,
                                c->center_column, "bright_field_radius_px",
                                c->bright_field_radius, "method", c->method);
        if (c->has_dpc) {
            json_object_set_new(cal, "dpc_rotation_degrees", json_real(c->dpc_rotation_degrees));
            json_object_set_new(cal, "dpc_component_order_exchanged",
                                json_boolean(c->dpc_component_order_exchanged));
        }
        json_object_set_new(root, "detector_calibration", cal);
    }
    json_object_set_new(root, "prepared_dpc_moments", json_boolean(p->prepared.has_moments));
    json_object_set_new(root, "prepared_detector_products",
                        json_boolean(p->prepared.has_products));
    if (p->loaded) {
        const qem_pack_timings *t = &p->timings;
        json_object_set_new(
            root, "timings_ms",
            json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "metadata",
                      ms(t->metadata), "whole_file_integrity", ms(t->whole_file_integrity),
                      "source_read", ms(t->source_read), "header_validation",
                      ms(t->header_validation), "payload_integrity", ms(t->payload_integrity),
                      "descriptor_preparation", ms(t->descriptor_preparation), "decode",
                      ms(t->decode), "resident_copy", ms(t->resident_copy), "resident_ready",
                      ms(t->resident_ready), "first_diffraction", ms(t->first_diffraction),
                      "first_detector", ms(t->first_detector)));
        json_object_set_new(root, "peak_transient_bytes",
                            json_integer((json_int_t)t->peak_transient_bytes));
        json_object_set_new(root, "decoded_digests_checked",
                            json_integer((json_int_t)t->decoded_digests_checked));
    }
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (!text)
        qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    return text;
}
