/* The JSON manifest of a pack, as the upstream builder (uint16/LZ4) and
 * native producer (uint8/bitpacked) write it. */
#include <stdlib.h>
#include <string.h>

#include "common/sha256.h"
#include "pack/encode.h"
#include "pack/pack_internal.h"

json_t *qem_pack_digest_json(const uint8_t digest[32])
{
    char h[65];
    qem_sha256_hex(digest, h);
    return json_string(h);
}

json_t *qem_pack_manifest_build(const pack_manifest_facts *f)
{
    json_t *m = json_object();
    json_t *shape = json_pack("[I,I,I,I]", (json_int_t)f->shape[0], (json_int_t)f->shape[1],
                              (json_int_t)f->shape[2], (json_int_t)f->shape[3]);
    json_object_set_new(m, "status", json_string("complete"));
    json_object_set_new(m, "source_shape", shape);
    json_object_set_new(m, "source_dtype", json_string("uint16"));
    json_object_set_new(m, "scan_bin", json_integer(1));
    json_object_set_new(m, "detector_bin", json_integer(1));
    json_object_set_new(m, "crop", json_null());
    json_object_set_new(m, "shard_count", json_integer((json_int_t)f->shard_count));
    json_object_set_new(m, "scans_per_shard", json_integer((json_int_t)f->sps));
    json_object_set_new(m, "source_identity_sha256", qem_pack_digest_json(f->identity));
    json_object_set_new(m, "source_raw_logical_sha256",
                        qem_pack_digest_json(f->raw_logical_sha256));
    json_object_set_new(m, "detector_mask_sha256", qem_pack_digest_json(f->detector_mask_sha256));
    json_t *pixels = json_array();
    if (f->profile == QEM_PACK_UINT16_LZ4) {
        json_object_set_new(m, "schema", json_string(PACK_SCHEMA_V1));
        json_object_set_new(m, "payload_chunk_bytes", json_integer(PACK_CHUNK_BYTES));
        json_object_set_new(m, "payload_chunk_codec", json_string("independent raw LZ4 blocks"));
        json_object_set_new(m, "payload_chunk_length_codec",
                            json_string("uint8 encoded_bytes_minus_one"));
        json_object_set_new(m, "descriptor_codec", json_string("uint8 five-bit widths"));
        json_object_set_new(m, "working_dtype", json_string(qem_dtype_name(f->working_dtype)));
        json_object_set_new(m, "working_value_definition",
                            json_string("all source counts exactly; authenticated detector-mask "
                                        "pixels are excluded from scientific products"));
        if (f->working_dtype == QEM_DTYPE_UINT16)
            json_object_set_new(m, "working_logical_sha256",
                                qem_pack_digest_json(f->working_sha256));
        if (f->retained_policy)
            json_object_set_new(m, "masked_detector_payload_policy",
                                json_string("retained_exactly_in_payload"));
        for (uint64_t i = 0; i < f->excluded_count; i++)
            json_array_append_new(pixels,
                                  json_pack("[I,I]", (json_int_t)(f->excluded[i] / f->shape[3]),
                                            (json_int_t)(f->excluded[i] % f->shape[3])));
        json_t *shards = json_array();
        for (uint64_t s = 0; s < f->shard_count; s++) {
            const pack_shard_record *r = &f->records[s];
            json_t *j = json_pack(
                "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:I}", "ordinal",
                (json_int_t)s, "payload_file_offset", (json_int_t)r->payload_offset,
                "payload_file_bytes", (json_int_t)r->payload_bytes, "lengths_file_offset",
                (json_int_t)r->lengths_offset, "lengths_file_bytes", (json_int_t)r->lengths_bytes,
                "descriptor_widths_file_offset", (json_int_t)r->widths_offset,
                "descriptor_widths_file_bytes", (json_int_t)r->widths_bytes,
                "payload_decoded_bytes", (json_int_t)r->decoded_bytes, "descriptor_count",
                (json_int_t)r->descriptor_count, "payload_chunk_count", (json_int_t)r->chunk_count,
                "payload_decoded_sha256", qem_pack_digest_json(r->decoded_sha256), "scan_count",
                (json_int_t)f->sps);
            if (f->encoded) {
                uint8_t d[32];
                qem_sha256_oneshot(f->encoded[s].compressed, (size_t)f->encoded[s].compressed_bytes, d);
                json_object_set_new(j, "payload_compressed_sha256", qem_pack_digest_json(d));
                qem_sha256_oneshot(f->encoded[s].widths, (size_t)f->encoded[s].width_count, d);
                json_object_set_new(j, "descriptor_widths_sha256", qem_pack_digest_json(d));
                json_object_set_new(j, "maximum_width", json_integer(f->encoded[s].maximum_width));
            }
            json_array_append_new(shards, j);
        }
        json_object_set_new(m, "shards", shards);
    } else {
        json_object_set_new(m, "schema", json_string(PACK_SCHEMA_V3));
        json_object_set_new(m, "payload_codec", json_string("direct-bitpacked-u32"));
        json_object_set_new(m, "working_dtype", json_string("uint8"));
        json_object_set_new(m, "working_value_definition", json_string(PACK_V3_WORKING_DEFINITION));
        json_object_set_new(m, "scan_tile", json_integer(PACK_V3_TILE));
        json_object_set_new(m, "prepared_uint8_sha256", qem_pack_digest_json(f->working_sha256));
        json_object_set_new(m, "format_schema", json_string("quantem.gpu.lossless-pack-format/v1"));
        json_object_set_new(m, "encoding_profile", json_string("exact-uint8-bitpacked"));
        for (uint64_t i = 0; i < f->excluded_count; i++)
            json_array_append_new(pixels, json_integer(f->excluded[i]));
        if (f->raw_constants) {
            uint8_t *le = malloc((size_t)(4 * f->excluded_count + 1));
            for (uint64_t i = 0; le && i < f->excluded_count; i++)
                for (int b = 0; b < 4; b++)
                    le[4 * i + (uint64_t)b] = (uint8_t)(f->excluded[i] >> (8 * b));
            uint8_t d[32];
            qem_sha256_oneshot(le, (size_t)(4 * f->excluded_count), d);
            free(le);
            json_object_set_new(m, "masked_detector_pixels_sha256", qem_pack_digest_json(d));
            json_t *values = json_array();
            for (uint64_t i = 0; i < f->excluded_count; i++)
                json_array_append_new(values, json_integer(f->raw_constants[i]));
            json_object_set_new(m, "masked_detector_raw_values", values);
        }
    }
    json_object_set_new(m, "masked_detector_pixels", pixels);
    if (f->detector_calibration)
        json_object_set_new(m, "detector_calibration", json_deep_copy(f->detector_calibration));
    return m;
}
