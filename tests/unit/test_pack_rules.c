/* One rejecting test per pack rule: each mutation of a valid file is
 * refused at open or at load with its own status and message, and nothing
 * is ever published (the pack never reports itself loaded). */
#include "common/sha256.h"
#include "pack_build.h"

static pack_built v1, v3;
static char v1_path[512], v3_path[512];
static int case_no;

typedef enum { AT_OPEN, AT_LOAD } stage;

static void expect(const char *path, const char *what, stage where, qem_status status,
                   const char *words)
{
    qem_error e = {0};
    qem_pack *p = NULL;
    qem_pack_options lo;
    qem_pack_options_init(&lo);
    lo.check_stored_digests = 1; /* as qem verify loads */
    qem_status st = qem_pack_open(path, NULL, &p, &e);
    if (where == AT_LOAD && st == QEM_OK)
        st = qem_pack_load(p, &lo, &e);
    else if (where == AT_LOAD)
        fprintf(stderr, "rule '%s': open failed: %s\n", what, e.message);
    if (st != status || !strstr(e.message, words))
        fprintf(stderr, "rule '%s': status %d, message '%s' (wanted '%s')\n", what, st, e.message,
                words);
    CHECK_STATUS(st, status, &e);
    CHECK(strstr(e.message, words) != NULL);
    if (p) {
        qem_pack_info info = {.struct_size = sizeof info};
        qem_pack_get_info(p, &info, NULL);
        CHECK(!info.loaded);
    }
    qem_pack_close(p);
}

static const char *next_path(void)
{
    char name[32];
    snprintf(name, sizeof name, "rule%d.h5", case_no++);
    return test_path(name);
}

/* --- manifest mutations ----------------------------------------------- */

typedef void (*json_edit)(json_t *m);

static void manifest_case_at(pack_built *b, const char *what, json_edit edit, stage where,
                             qem_status status, const char *words)
{
    const char *path = next_path();
    json_t *m = json_deep_copy(b->manifest);
    edit(m);
    pack_rewrite(path, b, m, NULL, 0);
    json_decref(m);
    expect(path, what, where, status, words);
}

static void manifest_case(pack_built *b, const char *what, json_edit edit, qem_status status,
                          const char *words)
{
    manifest_case_at(b, what, edit, AT_OPEN, status, words);
}

#define MEDIT(name, ...) static void name(json_t *m) { __VA_ARGS__; }
static json_t *shard0(json_t *m) { return json_array_get(json_object_get(m, "shards"), 0); }
MEDIT(m_schema, json_object_set_new(m, "schema", json_string("quantem.gpu.packed-detector-h5/v3")))
MEDIT(m_status, json_object_set_new(m, "status", json_string("partial")))
MEDIT(m_shape, json_array_set_new(json_object_get(m, "source_shape"), 1, json_integer(65)))
MEDIT(m_dtype, json_object_set_new(m, "source_dtype", json_string("uint32")))
MEDIT(m_scan_bin, json_object_set_new(m, "scan_bin", json_integer(2)))
MEDIT(m_detector_bin, json_object_set_new(m, "detector_bin", json_integer(2)))
MEDIT(m_crop, json_object_set_new(m, "crop", json_pack("[i,i]", 0, 4)))
MEDIT(m_crop_missing, json_object_del(m, "crop"))
MEDIT(m_shards, json_object_set_new(m, "shard_count", json_integer(3)))
MEDIT(m_sps, json_object_set_new(m, "scans_per_shard", json_integer(64)))
MEDIT(m_chunk_bytes, json_object_set_new(m, "payload_chunk_bytes", json_integer(64)))
MEDIT(m_chunk_codec, json_object_set_new(m, "payload_chunk_codec", json_string("lz4 frames")))
MEDIT(m_length_codec, json_object_set_new(m, "payload_chunk_length_codec", json_string("u16")))
MEDIT(m_descriptor_codec, json_object_set_new(m, "descriptor_codec", json_string("u32")))
MEDIT(m_identity, json_object_set_new(m, "source_identity_sha256", json_string("0000000000000000000000000000000000000000000000000000000000000000")))
MEDIT(m_excluded_value, json_array_set_new(json_object_get(m, "masked_detector_pixels"), 1, json_pack("[i,i]", 1, 3)))
MEDIT(m_excluded_order, {
    json_t *l = json_object_get(m, "masked_detector_pixels");
    json_t *a = json_deep_copy(json_array_get(l, 0));
    json_array_set(l, 0, json_array_get(l, 1));
    json_array_set_new(l, 1, a);
})
MEDIT(m_excluded_missing, json_array_remove(json_object_get(m, "masked_detector_pixels"), 0))
MEDIT(m_working, json_object_set_new(m, "working_dtype", json_string("float32")))
MEDIT(m_shard_records, json_array_remove(json_object_get(m, "shards"), 1))
MEDIT(m_shard_offset, json_object_set_new(shard0(m), "payload_file_offset", json_integer(9000)))
MEDIT(m_shard_ordinal, json_object_set_new(shard0(m), "ordinal", json_integer(1)))
MEDIT(m_shard_digest, json_object_set_new(shard0(m), "payload_decoded_sha256", json_string("1111111111111111111111111111111111111111111111111111111111111111")))
MEDIT(m_shard_widths_hex, json_object_set_new(shard0(m), "descriptor_widths_sha256", json_string("XYZ")))
MEDIT(m_policy, json_object_set_new(m, "masked_detector_payload_policy", json_string("zeroed")))
MEDIT(m_half_constants, json_object_set_new(m, "masked_detector_raw_values", json_pack("[i,i,i,i]", 1, 2, 3, 4)))
MEDIT(m_digest_case, json_object_set_new(m, "source_raw_logical_sha256", json_string("ABCDEF0000000000000000000000000000000000000000000000000000000000")))
MEDIT(m_not_object, (void)m)
MEDIT(m_legacy_uint8, json_object_set_new(m, "working_dtype", json_string("uint8")))
MEDIT(m_cal_schema, json_object_set_new(json_object_get(m, "detector_calibration"), "schema", json_string("x/v2")))
MEDIT(m_cal_identity, json_object_set_new(json_object_get(m, "detector_calibration"), "source_identity_sha256", json_string("2222222222222222222222222222222222222222222222222222222222222222")))
MEDIT(m_cal_center, json_object_set_new(json_object_get(m, "detector_calibration"), "detector_center_px", json_pack("[f,f]", 1.0, 5.0)))
MEDIT(m_cal_center_bool, json_object_set_new(json_object_get(m, "detector_calibration"), "detector_center_px", json_pack("[b,f]", 1, 1.0)))
MEDIT(m_cal_radius, json_object_set_new(json_object_get(m, "detector_calibration"), "bright_field_radius_px", json_real(0.0)))
MEDIT(m_cal_radius_big, json_object_set_new(json_object_get(m, "detector_calibration"), "bright_field_radius_px", json_real(7.0)))
MEDIT(m_cal_half_dpc, json_object_del(json_object_get(m, "detector_calibration"), "dpc_component_order_exchanged"))
MEDIT(m_cal_method, json_object_set_new(json_object_get(m, "detector_calibration"), "method", json_string("  ")))
/* uint8/bitpacked */
MEDIT(m3_shards_key, json_object_set_new(m, "shards", json_array()))
MEDIT(m3_no_source_dtype, json_object_del(m, "source_dtype"))
MEDIT(m3_codec, json_object_set_new(m, "payload_codec", json_string("lz4")))
MEDIT(m3_working, json_object_set_new(m, "working_dtype", json_string("uint16")))
MEDIT(m3_definition, json_object_set_new(m, "working_value_definition", json_string("counts")))
MEDIT(m3_tile, json_object_set_new(m, "scan_tile", json_integer(64)))
MEDIT(m3_raw_digest, json_object_del(m, "source_raw_logical_sha256"))
MEDIT(m3_prepared, json_object_del(m, "prepared_uint8_sha256"))
MEDIT(m3_mask, json_object_del(m, "detector_mask_sha256"))
MEDIT(m3_pixels_unsorted, {
    json_t *l = json_object_get(m, "masked_detector_pixels");
    json_array_insert_new(l, 0, json_integer(4));
})
MEDIT(m3_pixels_digest, json_object_set_new(m, "masked_detector_pixels_sha256", json_string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")))
MEDIT(m3_values_length, json_array_append_new(json_object_get(m, "masked_detector_raw_values"), json_integer(1)))
MEDIT(m3_values_range, json_array_set_new(json_object_get(m, "masked_detector_raw_values"), 0, json_integer(65536)))
MEDIT(m3_values_bool, json_array_set_new(json_object_get(m, "masked_detector_raw_values"), 0, json_true()))
MEDIT(m3_sps, json_object_set_new(m, "scans_per_shard", json_integer(32)))

/* --- index mutations -------------------------------------------------- */

typedef void (*index_edit)(uint8_t *ix, uint64_t *n, json_t *m);

static void index_case(pack_built *b, const char *what, index_edit edit, stage where,
                       qem_status status, const char *words)
{
    const char *path = next_path();
    uint8_t *ix = malloc((size_t)b->index_bytes + 64);
    memcpy(ix, b->index, (size_t)b->index_bytes);
    uint64_t n = b->index_bytes;
    json_t *m = json_deep_copy(b->manifest);
    edit(ix, &n, m);
    pack_rewrite(path, b, m, ix, n);
    json_decref(m);
    free(ix);
    expect(path, what, where, status, words);
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Record field offsets: v1 records start at 36 + 4 + 4E + 32, v3 at 44 + ... */
static uint8_t *record(uint8_t *ix, uint64_t head, uint64_t excluded, uint64_t s)
{
    return ix + head + 4 + 4 * excluded + 32 + 96 * s;
}

#define IEDIT(name, ...) static void name(uint8_t *ix, uint64_t *n, json_t *m) { (void)ix; (void)n; (void)m; __VA_ARGS__; }
IEDIT(i_revision, ix[7] = 2)
IEDIT(i_magic, ix[0] = 'X')
IEDIT(i_zero_shards, put32(ix + 8, 0))
IEDIT(i_chunk_bytes, put32(ix + 12, 64))
IEDIT(i_zero_rows, put32(ix + 16, 0))
IEDIT(i_shape_product, put32(ix + 20, 65))
IEDIT(i_excluded_range, put32(ix + 40, 20))
IEDIT(i_excluded_twice, put32(ix + 44, 0))
IEDIT(i_too_many_excluded, put32(ix + 36, 21))
IEDIT(i_trailing, ix[*n] = 0; (*n)++)
/* Fuzz regression (fuzz_pack_file, 2026-11-29): a small file declaring a
 * 65535 x 65535 detector made qem_pack_open calloc 4 GiB per-pixel arrays
 * before any range check. */
IEDIT(i_huge_detector, put32(ix + 24, 65535); put32(ix + 28, 65535))
IEDIT(i_truncated, (*n)--)
IEDIT(i_decoded_odd, {
    uint8_t *r = record(ix, 36, 4, 0);
    put64(r + 48, get64(r + 48) + 2);
    json_object_set_new(json_array_get(json_object_get(m, "shards"), 0), "payload_decoded_bytes",
                        json_integer((json_int_t)get64(r + 48)));
})
IEDIT(i_descriptors, put32(record(ix, 36, 4, 1) + 56, 19))
IEDIT(i_chunks, put32(record(ix, 36, 4, 1) + 60, 1))
IEDIT(i_outside, {
    uint8_t *r = record(ix, 36, 4, 1);
    put64(r, 1ull << 40);
    json_object_set_new(json_array_get(json_object_get(m, "shards"), 1), "payload_file_offset",
                        json_integer(1ll << 40));
})
IEDIT(i_overlap, {
    uint8_t *r0 = record(ix, 36, 4, 0), *r1 = record(ix, 36, 4, 1);
    put64(r1 + 16, get64(r0) + 1);
    json_object_set_new(json_array_get(json_object_get(m, "shards"), 1), "lengths_file_offset",
                        json_integer((json_int_t)(get64(r0) + 1)));
})
IEDIT(i_into_block, {
    uint8_t *r1 = record(ix, 36, 4, 1);
    put64(r1 + 16, 100);
    json_object_set_new(json_array_get(json_object_get(m, "shards"), 1), "lengths_file_offset",
                        json_integer(100));
})
IEDIT(i_descriptor_gap, {
    /* Decoded size four words short of what the widths account for, the
     * manifest kept consistent: the descriptor rule must catch it. */
    uint8_t *r = record(ix, 36, 4, 0);
    put64(r + 48, get64(r + 48) - 16);
    uint64_t chunks = (get64(r + 48) + 127) / 128;
    put32(r + 60, (uint32_t)chunks);
    put64(r + 24, chunks);
    json_t *j = json_array_get(json_object_get(m, "shards"), 0);
    json_object_set_new(j, "payload_decoded_bytes", json_integer((json_int_t)get64(r + 48)));
    json_object_set_new(j, "payload_chunk_count", json_integer((json_int_t)chunks));
    json_object_set_new(j, "lengths_file_bytes", json_integer((json_int_t)chunks));
})
IEDIT(i_binary_digest, {
    uint8_t *r = record(ix, 36, 4, 1);
    r[64] ^= 1;
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", r[64 + i]);
    json_object_set_new(json_array_get(json_object_get(m, "shards"), 1), "payload_decoded_sha256",
                        json_string(hex));
})
/* uint8/bitpacked index (head 44, one excluded pixel) */
IEDIT(i3_reserved, put32(ix + 12, 1))
IEDIT(i3_tile, put32(ix + 36, 16))
IEDIT(i3_encoding, put32(ix + 40, 2))
IEDIT(i3_incomplete, {
    put32(ix + 32, 1055);
    put32(ix + 20, 2110);
})
IEDIT(i3_lengths, put64(record(ix, 44, 1, 0) + 24, 4))
IEDIT(i3_decoded, put64(record(ix, 44, 1, 0) + 48, get64(record(ix, 44, 1, 0) + 48) - 4))
IEDIT(i3_headers, put32(record(ix, 44, 1, 0) + 56, 3))

/* --- range (payload/header) byte mutations ------------------------------ */

static void bytes_case(pack_built *b, const char *what, uint64_t file_offset, uint32_t value,
                       int width, stage where, qem_status status, const char *words)
{
    const char *path = next_path();
    uint64_t at = file_offset - PACK_TEST_BLOCK;
    uint8_t keep[4];
    memcpy(keep, b->ranges + at, (size_t)width);
    memcpy(b->ranges + at, &value, (size_t)width);
    pack_rewrite(path, b, b->manifest, NULL, 0);
    memcpy(b->ranges + at, keep, (size_t)width);
    expect(path, what, where, status, words);
}

static uint32_t range_u32(pack_built *b, uint64_t file_offset)
{
    uint32_t v;
    memcpy(&v, b->ranges + (file_offset - PACK_TEST_BLOCK), 4);
    return v;
}

static void build_bases(void)
{
    /* uint16/LZ4: 2 shards of 128 scans, 4x5 detector, 4 retained exclusions. */
    static const uint32_t ex1[] = {0, 7, 13, 19};
    static uint16_t d1[2 * 128 * 20];
    uint64_t seed = 3;
    for (size_t k = 0; k < sizeof d1 / 2; k++)
        d1[k] = (uint16_t)(k % 20 == 7 ? 60000 : test_rand(&seed) % 200);
    d1[5 * 20 + 3] = 300; /* width 9 at pixel 3, which is not excluded */
    pack_spec s1 = {QEM_PACK_UINT16_LZ4, {2, 128, 4, 5}, 128, d1, ex1, 4, 1, QEM_DTYPE_UINT16, 0, 1};
    snprintf(v1_path, sizeof v1_path, "%s", test_path("v1.h5"));
    CHECK(pack_build(v1_path, &s1, &v1));
    /* uint8/bitpacked: 2 shards of 1056 scans (33 tiles: two checkpoint
     * words), 2x3 detector, pixel 4 excluded with constant 65535. */
    static const uint32_t ex3[] = {4};
    static uint16_t d3[2 * 1056 * 6];
    for (size_t k = 0; k < sizeof d3 / 2; k++)
        d3[k] = (uint16_t)(k % 6 == 4 ? 65535 : test_rand(&seed) % 200);
    pack_spec s3 = {QEM_PACK_UINT8_BITPACKED, {1, 2112, 2, 3}, 1056, d3, ex3, 1, 0, QEM_DTYPE_UINT8, 1, 0};
    snprintf(v3_path, sizeof v3_path, "%s", test_path("v3.h5"));
    CHECK(pack_build(v3_path, &s3, &v3));
}

static void prelude_rules(void)
{
    size_t n = 0;
    uint8_t *good = read_file(v1_path, &n);
    uint8_t *bad = malloc(n + 8);
    const char *path = next_path();
    memcpy(bad, good, n);
    bad[3] = 'X';
    write_file(path, bad, n);
    expect(path, "signature", AT_OPEN, QEM_E_PACK_PRELUDE, "signature");
    memcpy(bad, good, n);
    memset(bad + 8, 0, 4);
    write_file(path, bad, n);
    expect(path, "empty manifest", AT_OPEN, QEM_E_PACK_PRELUDE, "manifest length");
    memcpy(bad, good, n);
    uint32_t at;
    memcpy(&at, good + 16, 4);
    uint32_t json = at; /* manifest longer than the room before the index */
    memcpy(bad + 8, &json, 4);
    write_file(path, bad, n);
    expect(path, "manifest over the index", AT_OPEN, QEM_E_PACK_PRELUDE, "manifest length");
    memcpy(bad, good, n);
    uint32_t big = (uint32_t)n;
    memcpy(bad + 20, &big, 4);
    write_file(path, bad, n);
    expect(path, "index outside", AT_OPEN, QEM_E_PACK_PRELUDE, "outside");
    memcpy(bad, good, n);
    bad[30] ^= 1; /* inside the manifest */
    write_file(path, bad, n);
    expect(path, "manifest CRC", AT_OPEN, QEM_E_PACK_CRC, "CRC-32");
    write_file(path, good, 20);
    expect(path, "short file", AT_OPEN, QEM_E_PACK_PRELUDE, "too short");
    free(good);
    free(bad);
    /* A manifest that is not one JSON object, or repeats a key. */
    const char *texts[] = {"[1, 2]", "{\"status\": \"complete\", \"status\": \"complete\"}"};
    for (int i = 0; i < 2; i++) {
        uint8_t *block = NULL;
        qem_error e = {0};
        CHECK_OK(qem_pack_user_block(texts[i], strlen(texts[i]), v1.index, v1.index_bytes,
                                     PACK_TEST_BLOCK, &block, &e),
                 &e);
        FILE *fp = fopen(path, "wb");
        fwrite(block, 1, PACK_TEST_BLOCK, fp);
        fwrite(v1.ranges, 1, (size_t)v1.ranges_bytes, fp);
        fclose(fp);
        free(block);
        expect(path, texts[i], AT_OPEN, QEM_E_PACK_MANIFEST, i ? "duplicate" : "not an object");
    }
}

static void load_rules(void)
{
    qem_error e = {0};
    /* Whole-file identity: the right one passes, any other is refused. */
    size_t n = 0;
    uint8_t *bytes = read_file(v3_path, &n), digest[32];
    char hex[65];
    qem_sha256_oneshot(bytes, n, digest);
    qem_sha256_hex(digest, hex);
    free(bytes);
    qem_pack *p = NULL;
    qem_pack_options lo;
    qem_pack_options_init(&lo);
    lo.expect_sha256 = hex;
    CHECK_OK(qem_pack_open(v3_path, NULL, &p, &e), &e);
    CHECK_OK(qem_pack_load(p, &lo, &e), &e);
    qem_pack_timings t = {.struct_size = sizeof t};
    qem_pack_get_timings(p, &t, NULL);
    CHECK(t.whole_file_integrity >= 0);
    qem_pack_close(p);
    hex[5] = hex[5] == '0' ? '1' : '0';
    CHECK_OK(qem_pack_open(v3_path, NULL, &p, &e), &e);
    CHECK_STATUS(qem_pack_load(p, &lo, &e), QEM_E_FILE_DIGEST, &e);
    qem_pack_info info = {.struct_size = sizeof info};
    qem_pack_get_info(p, &info, NULL);
    CHECK(!info.loaded);
    qem_pack_close(p);
}

static int cancel_second(void *user, uint64_t done, uint64_t total)
{
    (void)user;
    (void)total;
    return done >= 2;
}

int main(void)
{
    build_bases();
    if (!v1.manifest || !v3.manifest)
        return test_finish("unit_pack_rules");
    prelude_rules();

    const struct {
        const char *what;
        json_edit edit;
        qem_status status;
        const char *words;
    } v1_manifest[] = {
        {"schema of the other profile", m_schema, QEM_E_PACK_MANIFEST, "does not match the index"},
        {"status", m_status, QEM_E_PACK_MANIFEST, "status"},
        {"source_shape", m_shape, QEM_E_PACK_MANIFEST, "source_shape"},
        {"source_dtype", m_dtype, QEM_E_PACK_MANIFEST, "source_dtype"},
        {"scan_bin", m_scan_bin, QEM_E_PACK_MANIFEST, "scan_bin"},
        {"detector_bin", m_detector_bin, QEM_E_PACK_MANIFEST, "detector_bin"},
        {"crop", m_crop, QEM_E_PACK_MANIFEST, "crop"},
        {"crop missing", m_crop_missing, QEM_E_PACK_MANIFEST, "crop"},
        {"shard_count", m_shards, QEM_E_PACK_MANIFEST, "shard_count"},
        {"scans_per_shard", m_sps, QEM_E_PACK_MANIFEST, "scans_per_shard"},
        {"payload_chunk_bytes", m_chunk_bytes, QEM_E_PACK_MANIFEST, "payload_chunk_bytes"},
        {"payload_chunk_codec", m_chunk_codec, QEM_E_PACK_MANIFEST, "payload_chunk_codec"},
        {"length codec", m_length_codec, QEM_E_PACK_MANIFEST, "payload_chunk_length_codec"},
        {"descriptor_codec", m_descriptor_codec, QEM_E_PACK_MANIFEST, "descriptor_codec"},
        {"identity", m_identity, QEM_E_PACK_MANIFEST, "source_identity_sha256"},
        {"excluded value", m_excluded_value, QEM_E_PACK_MANIFEST, "masked_detector_pixels[1]"},
        {"excluded order", m_excluded_order, QEM_E_PACK_MANIFEST, "masked_detector_pixels[0]"},
        {"excluded missing", m_excluded_missing, QEM_E_PACK_MANIFEST, "masked_detector_pixels"},
        {"working_dtype", m_working, QEM_E_PACK_MANIFEST, "working_dtype"},
        {"shard records", m_shard_records, QEM_E_PACK_MANIFEST, "one record per shard"},
        {"shard offset", m_shard_offset, QEM_E_PACK_MANIFEST, "payload_file_offset"},
        {"shard ordinal", m_shard_ordinal, QEM_E_PACK_MANIFEST, "ordinal"},
        {"shard digest", m_shard_digest, QEM_E_PACK_MANIFEST, "payload_decoded_sha256"},
        {"widths digest form", m_shard_widths_hex, QEM_E_PACK_MANIFEST, "stored-range digests"},
        {"unknown policy", m_policy, QEM_E_PACK_MANIFEST, "masked_detector_payload_policy"},
        {"raw values without digest", m_half_constants, QEM_E_PACK_MANIFEST, "together"},
        {"digest not lowercase hex", m_digest_case, QEM_E_PACK_MANIFEST, "source_raw_logical_sha256"},
        {"calibration schema", m_cal_schema, QEM_E_PACK_CALIBRATION, "schema"},
        {"calibration identity", m_cal_identity, QEM_E_PACK_CALIBRATION, "another source"},
        {"calibration centre", m_cal_center, QEM_E_PACK_CALIBRATION, "outside"},
        {"calibration centre boolean", m_cal_center_bool, QEM_E_PACK_CALIBRATION, "finite numbers"},
        {"calibration radius zero", m_cal_radius, QEM_E_PACK_CALIBRATION, "bright_field_radius_px"},
        {"calibration radius too big", m_cal_radius_big, QEM_E_PACK_CALIBRATION, "diagonal"},
        {"calibration half DPC", m_cal_half_dpc, QEM_E_PACK_CALIBRATION, "both"},
        {"calibration method", m_cal_method, QEM_E_PACK_CALIBRATION, "method"},
    };
    for (size_t i = 0; i < sizeof v1_manifest / sizeof v1_manifest[0]; i++)
        manifest_case(&v1, v1_manifest[i].what, v1_manifest[i].edit, v1_manifest[i].status,
                      v1_manifest[i].words);
    (void)m_not_object;

    const struct {
        const char *what;
        json_edit edit;
        qem_status status;
        const char *words;
    } v3_manifest[] = {
        {"shards key", m3_shards_key, QEM_E_PACK_MANIFEST, "must not carry shard records"},
        {"legacy minimal", m3_no_source_dtype, QEM_E_PACK_MANIFEST, "source provenance"},
        {"payload_codec", m3_codec, QEM_E_PACK_MANIFEST, "payload_codec"},
        {"working_dtype", m3_working, QEM_E_PACK_MANIFEST, "working_dtype"},
        {"working_value_definition", m3_definition, QEM_E_PACK_MANIFEST, "working_value_definition"},
        {"scan_tile", m3_tile, QEM_E_PACK_MANIFEST, "scan_tile"},
        {"raw digest", m3_raw_digest, QEM_E_PACK_MANIFEST, "source_raw_logical_sha256"},
        {"prepared digest", m3_prepared, QEM_E_PACK_MANIFEST, "prepared_uint8_sha256"},
        {"mask digest", m3_mask, QEM_E_PACK_MANIFEST, "detector_mask_sha256"},
        {"pixels unsorted", m3_pixels_unsorted, QEM_E_PACK_MANIFEST, "masked_detector_pixels"},
        {"pixels digest", m3_pixels_digest, QEM_E_PACK_MANIFEST, "does not match the ordered"},
        {"raw values length", m3_values_length, QEM_E_PACK_MANIFEST, "one value per excluded"},
        {"raw value 65536", m3_values_range, QEM_E_PACK_MANIFEST, "0..65535"},
        {"raw value true", m3_values_bool, QEM_E_PACK_MANIFEST, "0..65535"},
        {"scans_per_shard", m3_sps, QEM_E_PACK_MANIFEST, "scans_per_shard"},
    };
    for (size_t i = 0; i < sizeof v3_manifest / sizeof v3_manifest[0]; i++)
        manifest_case(&v3, v3_manifest[i].what, v3_manifest[i].edit, v3_manifest[i].status,
                      v3_manifest[i].words);

    const struct {
        pack_built *base;
        const char *what;
        index_edit edit;
        stage where;
        qem_status status;
        const char *words;
    } index_rules[] = {
        {&v1, "unknown revision", i_revision, AT_OPEN, QEM_E_UNSUPPORTED, "update qem"},
        {&v1, "no QGIX", i_magic, AT_OPEN, QEM_E_PACK_INDEX, "QGIX"},
        {&v1, "no shards", i_zero_shards, AT_OPEN, QEM_E_PACK_INDEX, "no shards"},
        {&v1, "chunk bytes", i_chunk_bytes, AT_OPEN, QEM_E_PACK_INDEX, "chunk size"},
        {&v1, "zero scan rows", i_zero_rows, AT_OPEN, QEM_E_PACK_INDEX, "positive"},
        {&v1, "scans != shards x sps", i_shape_product, AT_OPEN, QEM_E_PACK_INDEX, "differ from"},
        {&v1, "excluded out of range", i_excluded_range, AT_OPEN, QEM_E_PACK_INDEX, "out of range or listed twice"},
        {&v1, "excluded twice", i_excluded_twice, AT_OPEN, QEM_E_PACK_INDEX, "out of range or listed twice"},
        {&v1, "more excluded than pixels", i_too_many_excluded, AT_OPEN, QEM_E_PACK_INDEX, "excludes"},
        {&v1, "trailing index byte", i_trailing, AT_OPEN, QEM_E_PACK_INDEX, "trailing bytes"},
        {&v1, "fuzz regression: detector larger than the file", i_huge_detector, AT_OPEN,
         QEM_E_PACK_INDEX, "more than a"},
        {&v1, "truncated index", i_truncated, AT_OPEN, QEM_E_PACK_INDEX, "truncated"},
        {&v1, "decoded size not whole words", i_decoded_odd, AT_OPEN, QEM_E_PACK_INDEX, "multiple of 4"},
        {&v1, "descriptor count", i_descriptors, AT_OPEN, QEM_E_PACK_INDEX, "descriptors"},
        {&v1, "chunk count", i_chunks, AT_OPEN, QEM_E_PACK_INDEX, "chunks"},
        {&v1, "range outside the file", i_outside, AT_OPEN, QEM_E_PACK_RANGE, "outside"},
        {&v1, "overlapping ranges", i_overlap, AT_OPEN, QEM_E_PACK_RANGE, "overlap between shard 0 payload and shard 1 chunk lengths"},
        {&v1, "range inside the user block", i_into_block, AT_OPEN, QEM_E_PACK_RANGE, "the prelude, manifest and index"},
        {&v1, "descriptor gap", i_descriptor_gap, AT_LOAD, QEM_E_PACK_DESCRIPTOR, "not at the decoded size"},
        {&v1, "bad decoded digest", i_binary_digest, AT_LOAD, QEM_E_PACK_DIGEST, "shard 1 decoded payload"},
        {&v3, "reserved word", i3_reserved, AT_OPEN, QEM_E_PACK_INDEX, "reserved"},
        {&v3, "scan tile", i3_tile, AT_OPEN, QEM_E_PACK_INDEX, "scan tile"},
        {&v3, "header encoding 2", i3_encoding, AT_OPEN, QEM_E_UNSUPPORTED, "header encoding 2"},
        {&v3, "incomplete tiles", i3_incomplete, AT_OPEN, QEM_E_PACK_INDEX, "whole 32-scan tiles"},
        {&v3, "LZ4 lengths in a direct shard", i3_lengths, AT_OPEN, QEM_E_PACK_INDEX, "no LZ4"},
        {&v3, "decoded != payload", i3_decoded, AT_OPEN, QEM_E_PACK_INDEX, "equal its decoded size"},
        {&v3, "header word count", i3_headers, AT_OPEN, QEM_E_PACK_INDEX, "header words"},
    };
    for (size_t i = 0; i < sizeof index_rules / sizeof index_rules[0]; i++)
        index_case(index_rules[i].base, index_rules[i].what, index_rules[i].edit,
                   index_rules[i].where, index_rules[i].status, index_rules[i].words);

    /* Stored bytes: widths, LZ4 blocks and lengths (uint16/LZ4). */
    const pack_shard_record *r0 = &v1.records[0];
    bytes_case(&v1, "width 17", r0->widths_offset, 17, 1, AT_LOAD, QEM_E_PACK_DESCRIPTOR,
               "17 bits per sample");
    /* Two widths moved by one in opposite directions: the descriptors
     * still tile the payload, only the widths digest sees it. */
    const uint8_t *w = v1.ranges + (r0->widths_offset - PACK_TEST_BLOCK);
    CHECK(w[1] > 0 && w[0] < 16);
    bytes_case(&v1, "widths digest", r0->widths_offset,
               (uint32_t)(w[0] + 1u) | ((uint32_t)(w[1] - 1u) << 8), 2, AT_LOAD, QEM_E_PACK_DIGEST,
               "descriptor widths");
    bytes_case(&v1, "compressed digest", r0->payload_offset + 3,
               v1.ranges[r0->payload_offset + 3 - PACK_TEST_BLOCK] ^ 0x10u, 1, AT_LOAD,
               QEM_E_PACK_DIGEST, "compressed payload");
    bytes_case(&v1, "lengths do not cover the payload", r0->lengths_offset,
               v1.ranges[r0->lengths_offset - PACK_TEST_BLOCK] + 1u, 1, AT_LOAD, QEM_E_PACK_LZ4,
               "chunk lengths cover");

    /* A legacy uint8 label where a pixel that is not excluded needs 9 bits. */
    manifest_case_at(&v1, "width 9 at an admitted pixel under uint8", m_legacy_uint8, AT_LOAD,
                     QEM_E_PACK_DESCRIPTOR, "not excluded, under working_dtype uint8");

    /* An LZ4 block that does not decode exactly (no stored-range digest
     * to catch it first). */
    {
        json_t *m = json_deep_copy(v1.manifest);
        json_t *sh = json_object_get(m, "shards");
        for (size_t k = 0; k < json_array_size(sh); k++)
            json_object_del(json_array_get(sh, k), "payload_compressed_sha256");
        const char *path = next_path();
        uint8_t *token = v1.ranges + (r0->payload_offset - PACK_TEST_BLOCK);
        const uint8_t keep = *token;
        *token = 0x00; /* a match before any output: the offset reaches outside */
        pack_rewrite(path, &v1, m, NULL, 0);
        *token = keep;
        json_decref(m);
        expect(path, "LZ4 block", AT_LOAD, QEM_E_PACK_LZ4, "LZ4 block 0");
    }

    /* Compact headers (uint8/bitpacked): base, checkpoint, width 9, tail
     * nibble, an excluded pixel with width; then the payload digest. Shard
     * 0 headers: 6 pixels x (2 checkpoint + 5 width words). */
    const pack_shard_record *h0 = &v3.records[0];
    const uint64_t hw = h0->widths_offset, H = 7;
    bytes_case(&v3, "pixel base", hw + 4 * H, range_u32(&v3, hw + 4 * H) + 1, 4, AT_LOAD,
               QEM_E_PACK_DESCRIPTOR, "base");
    bytes_case(&v3, "checkpoint", hw + 4 * 1, range_u32(&v3, hw + 4) + 1, 4, AT_LOAD,
               QEM_E_PACK_DESCRIPTOR, "checkpoint 1");
    bytes_case(&v3, "width 9", hw + 4 * 2, (range_u32(&v3, hw + 8) & ~15u) | 9u, 4, AT_LOAD,
               QEM_E_PACK_DESCRIPTOR, "width 9");
    bytes_case(&v3, "tail nibble", hw + 4 * 6, range_u32(&v3, hw + 24) | (1u << 28), 4, AT_LOAD,
               QEM_E_PACK_DESCRIPTOR, "unused width nibble");
    bytes_case(&v3, "excluded pixel with width", hw + 4 * (4 * H + 2), 1u, 4, AT_LOAD,
               QEM_E_PACK_DESCRIPTOR, "excluded detector pixel");
    bytes_case(&v3, "payload flipped", h0->payload_offset + 8,
               range_u32(&v3, h0->payload_offset + 8) ^ 0x100u, 4, AT_LOAD, QEM_E_PACK_DIGEST,
               "shard 0 direct payload");

    /* Raw access modes derived from the manifest. */
    json_t *m = json_deep_copy(v3.manifest);
    json_object_del(m, "masked_detector_raw_values");
    const char *legacy = next_path();
    pack_rewrite(legacy, &v3, m, NULL, 0);
    json_decref(m);
    qem_pack *p = NULL;
    qem_error e = {0};
    CHECK_OK(qem_pack_open(legacy, NULL, &p, &e), &e);
    qem_pack_info info = {.struct_size = sizeof info};
    if (p) {
        qem_pack_get_info(p, &info, NULL);
        CHECK_EQ_U64(info.raw_access, QEM_RAW_MASK_APPLIED_ONLY);
        CHECK_OK(qem_pack_load(p, NULL, &e), &e);
        uint16_t dp[6];
        CHECK_STATUS(qem_pack_read_scans(p, 0, 1, QEM_VALUES_RAW, dp, sizeof dp, &e),
                     QEM_E_NOT_RECORDED, &e);
        uint8_t dp8[6];
        CHECK_OK(qem_pack_read_scans(p, 0, 1, QEM_VALUES_WORKING, dp8, sizeof dp8, &e), &e);
        CHECK_EQ_U64(dp8[4], 0);
        qem_pack_close(p);
    }

    /* Cancelling after the first shard keeps nothing. */
    CHECK_OK(qem_pack_open(v1_path, NULL, &p, &e), &e);
    qem_pack_options lo;
    qem_pack_options_init(&lo);
    lo.progress = cancel_second;
    CHECK_STATUS(qem_pack_load(p, &lo, &e), QEM_E_CANCELLED, &e);
    qem_pack_get_info(p, &info, NULL);
    CHECK(!info.loaded);
    qem_pack_close(p);
    load_rules();
    pack_built_free(&v1);
    pack_built_free(&v3);
    return test_finish("unit_pack_rules");
}
