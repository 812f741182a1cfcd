/* Pack files written by the upstream builder and test writers load and
 * read exactly: mask-applied data equal the source with excluded pixels
 * zeroed, raw data equal the source where the file admits raw
 * reconstruction (and are refused where it does not); every corrupted copy
 * is refused at open or load with its own status. */
#include <jansson.h>

#include "pack/encode.h"
#include "pack/pack_internal.h"
#include "test_util.h"

/* Our encoders, given the fixture's source, reproduce the upstream shard
 * bytes: widths, decoded stream, LZ4 blocks and lengths (uint16/LZ4);
 * payload words and compact headers (uint8/bitpacked). */
static void check_reencode(const qem_pack *p, const char *h5, const uint16_t *source,
                           const uint8_t *excluded)
{
    size_t file_bytes = 0;
    uint8_t *file = read_file(h5, &file_bytes);
    qem_error e = {0};
    for (uint64_t s = 0; file && s < p->shard_count; s++) {
        const pack_shard *sh = &p->shards[s];
        const uint16_t *rows = source + s * p->sps * p->pixels;
        pack_encoded_shard enc;
        if (p->profile == QEM_PACK_UINT16_LZ4) {
            CHECK_OK(qem_pack_encode_v1_shard(rows, p->sps, p->pixels, &enc, &e), &e);
            CHECK_EQ_U64(enc.decoded_bytes, sh->decoded_bytes);
            CHECK(memcmp(enc.decoded_sha256, sh->decoded_sha256, 32) == 0);
            CHECK_EQ_U64(enc.width_count, sh->widths_bytes);
            CHECK(memcmp(enc.widths, file + sh->widths_offset, (size_t)sh->widths_bytes) == 0);
            CHECK_EQ_U64(enc.chunk_count, sh->lengths_bytes);
            CHECK(memcmp(enc.lengths, file + sh->lengths_offset, (size_t)sh->lengths_bytes) == 0);
            CHECK_EQ_U64(enc.compressed_bytes, sh->payload_bytes);
            CHECK(memcmp(enc.compressed, file + sh->payload_offset, (size_t)sh->payload_bytes) ==
                  0);
        } else {
            CHECK_OK(
                qem_pack_encode_v3_shard(rows, p->sps, p->pixels, excluded, s * p->sps, &enc, &e),
                &e);
            CHECK_EQ_U64(enc.decoded_bytes, sh->payload_bytes);
            CHECK(memcmp(enc.decoded, file + sh->payload_offset, (size_t)sh->payload_bytes) == 0);
            CHECK_EQ_U64(enc.header_words * 4, sh->widths_bytes);
            CHECK(memcmp(enc.headers, file + sh->widths_offset, (size_t)sh->widths_bytes) == 0);
        }
        qem_pack_encoded_shard_free(&enc);
    }
    CHECK(file != NULL);
    free(file);
}

static void check_fixture(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "pack/%s.json", name);
    json_t *facts = test_load_json(fixture_path(rel));
    snprintf(rel, sizeof rel, "pack/%s.excluded.json", name);
    json_t *excl = test_load_json(fixture_path(rel));
    qem_error e = {0};
    snprintf(rel, sizeof rel, "pack/%s.npy", name);
    qem_npy *npy = NULL;
    CHECK_OK(qem_npy_open(fixture_path(rel), &npy, &e), &e);
    snprintf(rel, sizeof rel, "pack/%s.h5", name);
    qem_pack *p = NULL;
    CHECK_OK(qem_pack_open(fixture_path(rel), NULL, &p, &e), &e);
    if (!facts || !excl || !npy || !p)
        goto out;
    qem_pack_info info = {.struct_size = sizeof info};
    qem_pack_get_info(p, &info, NULL);
    json_t *shape = json_object_get(facts, "shape");
    for (size_t i = 0; i < 4; i++)
        CHECK_EQ_U64(info.shape[i], json_integer_value(json_array_get(shape, i)));
    CHECK_EQ_U64(info.shard_count, json_integer_value(json_object_get(facts, "shard_count")));
    CHECK_EQ_U64(info.scans_per_shard, json_integer_value(json_object_get(facts, "scans_per_shard")));
    CHECK(!strcmp(info.source_identity_sha256,
                  json_string_value(json_object_get(facts, "source_identity_sha256"))));
    const char *working = json_string_value(json_object_get(facts, "working_dtype"));
    CHECK(!strcmp(qem_dtype_name(info.working_dtype), working));
    json_t *flat = json_object_get(excl, "flat_row_major");
    CHECK_EQ_U64(info.excluded_count, json_array_size(flat));
    CHECK(!info.loaded);

    /* Reading before loading is refused; then the whole lifecycle. */
    uint16_t one[4];
    CHECK_STATUS(qem_pack_read_scans(p, 0, 1, QEM_VALUES_WORKING, one, sizeof one, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    CHECK_OK(qem_pack_load(p, NULL, &e), &e);
    qem_pack_get_info(p, &info, NULL);
    CHECK(info.loaded);
    qem_pack_timings t = {.struct_size = sizeof t};
    qem_pack_get_timings(p, &t, NULL);
    CHECK_EQ_U64(t.decoded_digests_checked, info.shard_count);
    CHECK(t.resident_ready >= t.metadata && t.metadata >= 0);

    qem_npy_info ninfo = {.struct_size = sizeof ninfo};
    qem_npy_get_info(npy, &ninfo, NULL);
    const uint64_t n = ninfo.elements, P = info.pixels;
    uint16_t *source = malloc((size_t)n * 2);
    CHECK_OK(qem_npy_read(npy, 0, n, source, npy_read_size(npy, n), &e), &e);
    uint8_t *excluded = calloc((size_t)P, 1);
    for (size_t i = 0; i < json_array_size(flat); i++)
        excluded[json_integer_value(json_array_get(flat, i))] = 1;

    check_reencode(p, fixture_path(rel), source, excluded);

    /* Mask-applied working array, in the working dtype. */
    size_t bytes = (size_t)qem_pack_read_bound(p, QEM_VALUES_WORKING, info.scans);
    uint8_t *got = malloc(bytes);
    CHECK_OK(qem_pack_read_scans(p, 0, info.scans, QEM_VALUES_WORKING, got, bytes, &e), &e);
    int wrong = 0;
    for (uint64_t k = 0; k < n; k++) {
        uint32_t want = excluded[k % P] ? 0 : source[k];
        uint32_t have = info.working_dtype == QEM_DTYPE_UINT8 ? got[k] : ((uint16_t *)got)[k];
        wrong += want != have;
    }
    CHECK_EQ_U64(wrong, 0);

    /* Raw reconstruction, where admitted. */
    const int raw_ok = json_is_true(json_object_get(facts, "raw_reconstruction_available"));
    uint16_t *raw = malloc((size_t)n * 2);
    qem_status st = qem_pack_read_scans(p, 0, info.scans, QEM_VALUES_RAW, raw, (size_t)n * 2, &e);
    if (raw_ok) {
        CHECK_OK(st, &e);
        CHECK(memcmp(raw, source, (size_t)n * 2) == 0);
    } else {
        CHECK_STATUS(st, QEM_E_NOT_RECORDED, &e);
        CHECK_EQ_U64(info.raw_access, QEM_RAW_MASK_APPLIED_ONLY);
    }

    /* The selected patterns the upstream reader reported, one scan at a time. */
    size_t i;
    json_t *sel;
    json_array_foreach(json_object_get(facts, "selected_diffraction"), i, sel) {
        uint64_t scan = (uint64_t)json_integer_value(json_object_get(sel, "flat_scan"));
        uint16_t *dp = malloc((size_t)P * 2);
        uint8_t *dp8 = malloc((size_t)P * 2);
        CHECK_OK(qem_pack_read_scans(p, scan, 1, QEM_VALUES_WORKING, dp8, (size_t)P * 2, &e), &e);
        json_t *rows = json_object_get(sel, "mask_applied");
        int bad = 0;
        for (uint64_t px = 0; px < P; px++) {
            json_int_t want = json_integer_value(
                json_array_get(json_array_get(rows, px / info.shape[3]), px % info.shape[3]));
            uint32_t have = info.working_dtype == QEM_DTYPE_UINT8 ? dp8[px] : ((uint16_t *)dp8)[px];
            bad += (json_int_t)have != want;
        }
        json_t *rrows = json_object_get(sel, "raw");
        if (json_is_array(rrows)) {
            CHECK_OK(qem_pack_read_scans(p, scan, 1, QEM_VALUES_RAW, dp, (size_t)P * 2, &e), &e);
            for (uint64_t px = 0; px < P; px++)
                bad += (json_int_t)dp[px] !=
                       json_integer_value(json_array_get(
                           json_array_get(rrows, px / info.shape[3]), px % info.shape[3]));
        }
        CHECK_EQ_U64(bad, 0);
        free(dp);
        free(dp8);
    }

    /* Virtual images from the resident tiles equal the upstream reader's
     * mask-applied images (exclusions cleared from the mask). */
    json_t *vi;
    json_array_foreach(json_object_get(facts, "virtual_images"), i, vi) {
        json_t *mask_rows = json_object_get(vi, "mask");
        uint8_t *mask = calloc((size_t)P, 1);
        for (uint64_t px = 0; px < P; px++)
            mask[px] = (uint8_t)json_integer_value(
                json_array_get(json_array_get(mask_rows, px / info.shape[3]), px % info.shape[3]));
        uint64_t *image = malloc((size_t)info.scans * sizeof *image);
        CHECK_OK(qem_pack_detector_sums(p, mask, image), NULL);
        json_t *want = json_object_get(json_object_get(vi, "mask_applied"), "image");
        int bad = 0;
        for (uint64_t sc = 0; sc < info.scans; sc++)
            bad += (json_int_t)image[sc] !=
                   json_integer_value(json_array_get(json_array_get(want, sc / info.shape[1]),
                                                     sc % info.shape[1]));
        CHECK_EQ_U64(bad, 0);
        free(mask);
        free(image);
    }

    /* The detector calibration, when the manifest carries one. */
    json_t *cal = json_object_get(json_object_get(facts, "manifest_values"), "detector_calibration");
    qem_detector_calibration dc = {.struct_size = sizeof dc};
    if (json_is_object(cal)) {
        CHECK(info.has_detector_calibration);
        CHECK_OK(qem_pack_get_detector_calibration(p, &dc, NULL), NULL);
        json_t *c = json_object_get(cal, "detector_center_px");
        CHECK(dc.center_row == json_number_value(json_array_get(c, 0)));
        CHECK(dc.center_column == json_number_value(json_array_get(c, 1)));
        CHECK(dc.bright_field_radius == json_number_value(json_object_get(cal, "bright_field_radius_px")));
        CHECK(dc.has_dpc && dc.dpc_rotation_degrees ==
                                json_number_value(json_object_get(cal, "dpc_rotation_degrees")));
    } else {
        CHECK_STATUS(qem_pack_get_detector_calibration(p, &dc, NULL), QEM_E_NOT_RECORDED, NULL);
    }
    free(source);
    free(excluded);
    free(got);
    free(raw);
out:
    qem_pack_close(p);
    qem_npy_close(npy);
    json_decref(facts);
    json_decref(excl);
}

static void check_corrupt(void)
{
    json_t *manifest = test_load_json(fixture_path("pack/corrupt/corrupt.json"));
    if (!manifest) {
        CHECK(0);
        return;
    }
    static const struct {
        const char *file;
        qem_status at_open, at_load;
        const char *words;
    } expected[] = {
        {"v1_json_byte_flipped.h5", QEM_E_PACK_CRC, QEM_OK, "CRC-32"},
        {"v1_payload_byte_flipped_compressed_rehashed.h5", QEM_OK, QEM_E_PACK_DIGEST,
         "shard 1 decoded payload"},
        {"v1_truncated_in_last_range.h5", QEM_E_PACK_RANGE, QEM_OK, "outside"},
        {"v1_index_trailing_byte.h5", QEM_E_PACK_INDEX, QEM_OK, "trailing bytes"},
        {"v1_overlapping_ranges.h5", QEM_E_PACK_RANGE, QEM_OK,
         "overlap between shard 0 payload and shard 1 chunk lengths"},
        {"v1_width_17.h5", QEM_OK, QEM_E_PACK_DESCRIPTOR, "17 bits per sample"},
        {"v3_payload_byte_flipped.h5", QEM_OK, QEM_E_PACK_DIGEST, "shard 1 direct payload"},
        {"v3_json_byte_flipped.h5", QEM_E_PACK_CRC, QEM_OK, "CRC-32"},
        {"v3_excluded_pixel_has_width.h5", QEM_OK, QEM_E_PACK_DESCRIPTOR,
         "excluded detector pixel"},
    };
    size_t handled = 0, i;
    json_t *c;
    json_array_foreach(json_object_get(manifest, "corruptions"), i, c) {
        const char *file = json_string_value(json_object_get(c, "file"));
        for (size_t k = 0; k < sizeof expected / sizeof expected[0]; k++) {
            if (strcmp(file, expected[k].file) != 0)
                continue;
            handled++;
            char rel[256];
            snprintf(rel, sizeof rel, "pack/corrupt/%s", file);
            qem_error e = {0};
            qem_pack *p = NULL;
            qem_status st = qem_pack_open(fixture_path(rel), NULL, &p, &e);
            if (st != expected[k].at_open)
                fprintf(stderr, "corrupt '%s' (open)\n", file);
            CHECK_STATUS(st, expected[k].at_open, &e);
            if (p) {
                st = qem_pack_load(p, NULL, &e);
                if (st != expected[k].at_load)
                    fprintf(stderr, "corrupt '%s' (load)\n", file);
                CHECK_STATUS(st, expected[k].at_load, &e);
                /* Nothing was published. */
                qem_pack_info info = {.struct_size = sizeof info};
                qem_pack_get_info(p, &info, NULL);
                CHECK(!info.loaded);
                uint8_t dp[8];
                CHECK_STATUS(qem_pack_read_scans(p, 0, 1, QEM_VALUES_WORKING, dp, 0, &e),
                             QEM_E_INVALID_ARGUMENT, &e);
                qem_pack_close(p);
                qem_pack_open(fixture_path(rel), NULL, &p, &e);
                qem_pack_load(p, NULL, &e);
                qem_pack_close(p);
            }
            if (!strstr(e.message, expected[k].words))
                fprintf(stderr, "corrupt '%s': '%s' lacks '%s'\n", file, e.message,
                        expected[k].words);
            CHECK(strstr(e.message, expected[k].words) != NULL);
        }
    }
    CHECK_EQ_U64(handled, sizeof expected / sizeof expected[0]);
    json_decref(manifest);
}

int main(void)
{
    static const char *const fixtures[] = {"v1_u16_4x32_16x16", "v1_u16_excluded_retained",
                                           "v3_upstream_test_writer_legacy_nonportable",
                                           "v3_upstream_test_writer_notes_v3"};
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
        check_fixture(fixtures[i]);
    check_corrupt();
    return test_finish("golden_pack_fixtures");
}
