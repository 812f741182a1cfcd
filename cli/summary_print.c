/* The human-readable forms of `qem info` and `qem pack inspect|plan`,
 * printed from the library's JSON summaries. Every string reaching these
 * printers has been escaped for the terminal (term_safe_json). */
#include "summary_print.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The shortest decimal that reads back as the same double. */
static const char *shortest(double v, char *buf, size_t size)
{
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, size, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return buf;
}

static void print_quantities(const char *title, const json_t *object)
{
    if (!json_is_object(object) || json_object_size(object) == 0) {
        printf("%-18s none\n", title);
        return;
    }
    const char *key;
    json_t *q;
    int first = 1;
    json_object_foreach((json_t *)object, key, q) {
        json_t *unit = json_object_get(q, "unit"), *prov = json_object_get(q, "provenance");
        char number[32];
        printf("%-18s %s = %s %s (%s)\n", first ? title : "", key,
               shortest(json_number_value(json_object_get(q, "value")), number, sizeof number),
               json_is_string(unit) ? json_string_value(unit) : "",
               json_is_string(prov) ? json_string_value(prov) : "no provenance");
        first = 0;
    }
}

static void print_qem_summary(const json_t *s)
{
    const json_t *shape = json_object_get(s, "shape");
    const json_t *sm = json_object_get(s, "scientific_metadata");
    long long file = json_integer_value(json_object_get(s, "file_bytes"));
    printf("%-18s %s\n", "file", json_string_value(json_object_get(s, "path")));
    printf("%-18s quantem.qem, container version %lld\n", "container",
           json_integer_value(json_object_get(s, "container_version")));
    printf("%-18s %s (version %lld)\n", "codec", json_string_value(json_object_get(s, "codec")),
           json_integer_value(json_object_get(s, "codec_version")));
    printf("%-18s %lld x %lld scan positions, %lld x %lld detector pixels\n", "shape",
           json_integer_value(json_array_get(shape, 0)), json_integer_value(json_array_get(shape, 1)),
           json_integer_value(json_array_get(shape, 2)), json_integer_value(json_array_get(shape, 3)));
    printf("%-18s %s\n", "dtype", json_string_value(json_object_get(s, "dtype")));
    const json_t *chunks = json_object_get(s, "chunks");
    long long most = 0;
    size_t i;
    json_t *c;
    json_array_foreach(chunks, i, c) {
        long long n = json_integer_value(json_object_get(c, "scans"));
        most = n > most ? n : most;
    }
    printf("%-18s %zu (up to %lld scan positions each)\n", "chunks", json_array_size(chunks), most);
    printf("%-18s %lld of %lld detector pixels\n", "valid pixels",
           json_integer_value(json_object_get(json_object_get(s, "valid_pixels"), "valid")),
           json_integer_value(json_object_get(json_object_get(s, "valid_pixels"), "total")));
    printf("%-18s %lld bytes (header %lld, body %lld)\n", "file size", file,
           json_integer_value(json_object_get(s, "header_bytes")),
           json_integer_value(json_object_get(s, "body_bytes")));
    printf("%-18s %lld bytes\n", "uncompressed",
           json_integer_value(json_object_get(s, "logical_bytes")));
    printf("%-18s %.2fx\n", "compression ratio",
           json_number_value(json_object_get(s, "compression_ratio")));
    printf("%-18s %s, source %s, coverage %s\n", "metadata",
           json_string_value(json_object_get(sm, "schema")),
           json_is_string(json_object_get(sm, "source_format"))
               ? json_string_value(json_object_get(sm, "source_format"))
               : "unknown",
           json_string_value(json_object_get(sm, "source_metadata_coverage")));
    const json_t *source_file = json_object_get(json_object_get(sm, "source_metadata"), "source_file");
    if (json_is_object(source_file))
        printf("%-18s SHA-256 %s (%lld bytes, authenticated while saved)\n", "source file",
               json_string_value(json_object_get(source_file, "sha256")),
               json_integer_value(json_object_get(source_file, "bytes")));
    json_array_foreach(json_object_get(sm, "processing"), i, c) {
        printf("%-18s %s%s\n", i == 0 ? "processing" : "",
               json_string_value(json_object_get(c, "operation")),
               json_is_true(json_object_get(c, "changes_measurements")) ? " (changes measurements)"
                                                                         : "");
    }
    const json_t *dark = json_object_get(s, "dark");
    if (json_is_object(dark))
        printf("%-18s mean-dark plane recorded (%s, identity %.16s...); products subtract it "
               "once, raw reads never\n",
               "dark", json_string_value(json_object_get(dark, "schema")),
               json_string_value(json_object_get(dark, "identity")));
    else if (dark)
        printf("%-18s none recorded\n", "dark");
    json_array_foreach(json_object_get(s, "regions"), i, c) {
        char scale[32], offset[32];
        printf("%-18s frames [%lld, %lld): value = code x %s + %s\n",
               i == 0 ? "scaled regions" : "",
               json_integer_value(json_object_get(c, "first_frame")),
               json_integer_value(json_object_get(c, "stop_frame")),
               shortest(json_number_value(json_object_get(c, "scale")), scale, sizeof scale),
               shortest(json_number_value(json_object_get(c, "offset")), offset, sizeof offset));
    }
    print_quantities("calibrated axes", json_object_get(sm, "calibrated_axes"));
    print_quantities("microscope", json_object_get(sm, "electron_microscope"));
    print_quantities("overrides", json_object_get(sm, "calibration_overrides"));
}

static void print_ms(const char *label, const json_t *v)
{
    if (json_is_number(v))
        printf("  %-26s %10.3f ms\n", label, json_number_value(v));
    else
        printf("  %-26s %10s\n", label, "not run");
}

static void print_pack_summary(const json_t *s)
{
    const json_t *shape = json_object_get(s, "shape");
    printf("%-18s %s\n", "file", json_string_value(json_object_get(s, "path")));
    printf("%-18s %s, profile %s (legacy binary revision %lld)\n", "format",
           json_string_value(json_object_get(s, "format")),
           json_string_value(json_object_get(s, "profile")),
           json_integer_value(json_object_get(s, "legacy_binary_revision")));
    printf("%-18s %s\n", "schema", json_string_value(json_object_get(s, "schema")));
    printf("%-18s %lld x %lld scan positions, %lld x %lld detector pixels\n", "shape",
           json_integer_value(json_array_get(shape, 0)), json_integer_value(json_array_get(shape, 1)),
           json_integer_value(json_array_get(shape, 2)), json_integer_value(json_array_get(shape, 3)));
    printf("%-18s %lld of %lld scan positions each\n", "shards",
           json_integer_value(json_object_get(s, "shard_count")),
           json_integer_value(json_object_get(s, "scans_per_shard")));
    printf("%-18s %s (excluded pixels read 0)\n", "working dtype",
           json_string_value(json_object_get(s, "working_dtype")));
    printf("%-18s %lld detector pixels\n", "excluded",
           json_integer_value(json_object_get(s, "excluded_count")));
    printf("%-18s %s\n", "raw access", json_string_value(json_object_get(s, "raw_access")));
    printf("%-18s %lld bytes (resident once loaded: %lld)\n", "file size",
           json_integer_value(json_object_get(s, "file_bytes")),
           json_integer_value(json_object_get(s, "resident_bytes")));
    printf("%-18s %.2fx of uint16\n", "compression ratio",
           json_number_value(json_object_get(s, "compression_ratio")));
    printf("%-18s %s\n", "source identity",
           json_string_value(json_object_get(s, "source_identity_sha256")));
    if (!json_is_true(json_object_get(s, "headers_hashed_by_index")))
        printf("%-18s compact headers are not hashed by the index; qualify the file with "
               "--expect-sha256\n",
               "integrity");
    const json_t *cal = json_object_get(s, "detector_calibration");
    if (json_is_object(cal)) {
        const json_t *c = json_object_get(cal, "detector_center_px");
        char r[32], col[32], rad[32];
        printf("%-18s centre (%s, %s) px, bright-field radius %s px, method %s\n",
               "detector calib.", shortest(json_number_value(json_array_get(c, 0)), r, sizeof r),
               shortest(json_number_value(json_array_get(c, 1)), col, sizeof col),
               shortest(json_number_value(json_object_get(cal, "bright_field_radius_px")), rad,
                        sizeof rad),
               json_string_value(json_object_get(cal, "method")));
        if (json_object_get(cal, "dpc_rotation_degrees"))
            printf("%-18s DPC rotation %s degrees, components %sexchanged\n", "",
                   shortest(json_number_value(json_object_get(cal, "dpc_rotation_degrees")), r,
                            sizeof r),
                   json_is_true(json_object_get(cal, "dpc_component_order_exchanged")) ? "" : "not ");
    } else {
        printf("%-18s none\n", "detector calib.");
    }
    const int moments = json_is_true(json_object_get(s, "prepared_dpc_moments"));
    const int products = json_is_true(json_object_get(s, "prepared_detector_products"));
    printf("%-18s %s%s%s\n", "prepared values",
           moments ? "DPC moments (CoM/DPC without decoding)" : "",
           moments && products ? "; " : "",
           products ? "BF/ABF/ADF about the calibration" : moments ? "" : "none");
    const json_t *t = json_object_get(s, "timings_ms");
    if (json_is_object(t)) {
        printf("timings (warm page cache; not a cold run; phases summed over loading "
               "threads):\n");
        print_ms("metadata", json_object_get(t, "metadata"));
        print_ms("whole-file integrity", json_object_get(t, "whole_file_integrity"));
        print_ms("source read", json_object_get(t, "source_read"));
        print_ms("header validation", json_object_get(t, "header_validation"));
        print_ms("payload integrity", json_object_get(t, "payload_integrity"));
        print_ms("descriptor preparation", json_object_get(t, "descriptor_preparation"));
        print_ms("LZ4 decode", json_object_get(t, "decode"));
        print_ms("resident copy", json_object_get(t, "resident_copy"));
        print_ms("resident ready", json_object_get(t, "resident_ready"));
        print_ms("first diffraction pattern", json_object_get(t, "first_diffraction"));
        print_ms("first detector image", json_object_get(t, "first_detector"));
        printf("  %-26s %10lld bytes\n", "peak transient staging",
               json_integer_value(json_object_get(s, "peak_transient_bytes")));
    }
}

/* The inspection report for people; --json prints the full object. */
void print_container_summary(const json_t *s)
{
    /* Each format's summary names itself: a .qem file's its "container",
     * a pack's its "format". */
    if (json_object_get(s, "container"))
        print_qem_summary(s);
    else
        print_pack_summary(s);
}

void print_inspection(const json_t *j)
{
    const json_t *shape = json_object_get(j, "shape"), *bad = json_object_get(j, "bad_pixels");
    printf("%-24s %s, %s\n", "source", json_string_value(json_object_get(j, "kind")),
           json_string_value(json_object_get(j, "dtype")));
    printf("%-24s (%lld, %lld, %lld, %lld)\n", "shape",
           (long long)json_integer_value(json_array_get(shape, 0)),
           (long long)json_integer_value(json_array_get(shape, 1)),
           (long long)json_integer_value(json_array_get(shape, 2)),
           (long long)json_integer_value(json_array_get(shape, 3)));
    printf("%-24s %lld bytes\n", "logical size",
           (long long)json_integer_value(json_object_get(j, "logical_bytes")));
    size_t i;
    const json_t *m;
    json_array_foreach(json_object_get(j, "members"), i, m)
    {
        printf("%-24s %s, %lld bytes, SHA-256 %s\n",
               json_string_value(json_object_get(m, "role")),
               json_string_value(json_object_get(m, "path")),
               (long long)json_integer_value(json_object_get(m, "bytes")),
               json_string_value(json_object_get(m, "sha256")));
    }
    printf("%-24s %zu", "bad pixels", json_array_size(bad));
    for (i = 0; i < json_array_size(bad) && i < 8; i++)
        printf("%s%lld", i ? ", " : " (", (long long)json_integer_value(json_array_get(bad, i)));
    printf("%s\n", json_array_size(bad) > 8 ? ", ...)" : json_array_size(bad) ? ")" : "");
    printf("%-24s %s\n", "bad pixels SHA-256",
           json_string_value(json_object_get(j, "bad_pixels_sha256")));
    printf("%-24s %s (%s)\n", "detector mask SHA-256",
           json_string_value(json_object_get(j, "detector_mask_sha256")),
           json_string_value(json_object_get(j, "detector_mask_origin")));
    printf("%-24s %s\n", "source identity",
           json_string_value(json_object_get(j, "source_identity_sha256")));
}

void print_plan(const qem_pack_plan *p)
{
    printf("%-24s %s\n", "profile",
           p->profile == QEM_PACK_UINT8_BITPACKED ? "u8-bitpacked (exact uint8, 32-scan tiles)"
                                                  : "u16-lz4 (exact uint16, 128-scan tiles, LZ4)");
    printf("%-24s %llu shards of %llu scan positions\n", "shards",
           (unsigned long long)p->shard_count, (unsigned long long)p->scans_per_shard);
    printf("%-24s %llu\n", "excluded pixels", (unsigned long long)p->excluded_count);
    printf("%-24s %llu bytes at most\n", "resident once loaded",
           (unsigned long long)p->resident_bytes);
    printf("%-24s %llu bytes (available %llu)\n", "peak transient memory",
           (unsigned long long)p->peak_transient_bytes, (unsigned long long)p->available_memory);
    printf("%-24s %llu bytes at most, in a %llu-byte user block\n", "manifest and index",
           (unsigned long long)p->metadata_max_bytes, (unsigned long long)p->user_block_bytes);
    printf("%-24s %llu bytes at most\n", "output", (unsigned long long)p->output_max_bytes);
    printf("%-24s %llu bytes at most\n", "receipt", (unsigned long long)p->receipt_max_bytes);
    printf("%-24s %llu bytes (available %llu)\n", "disk need",
           (unsigned long long)p->disk_need_bytes, (unsigned long long)p->available_disk);
}

void print_acquisition(const json_t *j, const char *path)
{
    (void)path;
    const json_t *shape = json_object_get(j, "shape"), *would = json_object_get(j, "would_store");
    printf("%-22s %s\n", "family", json_string_value(json_object_get(j, "family")));
    printf("%-22s (%lld, %lld, %lld, %lld)\n", "shape",
           (long long)json_integer_value(json_array_get(shape, 0)),
           (long long)json_integer_value(json_array_get(shape, 1)),
           (long long)json_integer_value(json_array_get(shape, 2)),
           (long long)json_integer_value(json_array_get(shape, 3)));
    printf("%-22s %s, stored as %s\n", "sample type",
           json_string_value(json_object_get(j, "sample_type")),
           json_string_value(json_object_get(j, "stored_as")));
    const json_t *flagged = json_object_get(j, "flagged_pixel_indices");
    printf("%-22s %lld", "flagged pixels",
           (long long)json_integer_value(json_object_get(j, "flagged_pixels")));
    for (size_t i = 0; i < json_array_size(flagged) && i < 8; i++)
        printf("%s%lld", i ? ", " : " (", (long long)json_integer_value(json_array_get(flagged, i)));
    printf("%s\n", json_array_size(flagged) > 8 ? ", ...)" : json_array_size(flagged) ? ")" : "");
    size_t i;
    const json_t *m;
    json_array_foreach(json_object_get(j, "members"), i, m)
        printf("%-22s %s, %lld bytes, SHA-256 %s\n", json_string_value(json_object_get(m, "role")),
               json_string_value(json_object_get(m, "file")),
               (long long)json_integer_value(json_object_get(m, "bytes")),
               json_is_string(json_object_get(m, "sha256"))
                   ? json_string_value(json_object_get(m, "sha256"))
                   : "(not hashed)");
    printf("%-22s %s\n", "source identity",
           json_is_string(json_object_get(j, "identity_sha256"))
               ? json_string_value(json_object_get(j, "identity_sha256"))
               : "(not computed)");
    printf("%-22s %lld bytes\n", "logical size",
           (long long)json_integer_value(json_object_get(j, "logical_bytes")));
    printf("%-22s %s (%s), at most %lld bytes\n", "a .qem would hold",
           json_string_value(json_object_get(would, "dtype")),
           json_string_value(json_object_get(would, "qem_codec")),
           (long long)json_integer_value(json_object_get(would, "qem_bytes_at_most")));
    printf("%-22s %s\n", "a pack", json_string_value(json_object_get(would, "pack")));
    const json_t *cal = json_object_get(json_object_get(j, "calibration"), "quantities");
    const char *key;
    const json_t *q;
    int first = 1;
    json_object_foreach((json_t *)cal, key, q)
    {
        printf("%-22s %s = %.17g %s\n", first ? "calibration" : "", key,
               json_number_value(json_object_get(q, "value")),
               json_string_value(json_object_get(q, "unit")));
        first = 0;
    }
    if (first)
        printf("%-22s none the file states with certainty\n", "calibration");
}
