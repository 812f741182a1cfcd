#include "pack_build.h"

#include "common/sha256.h"

void pack_built_free(pack_built *b)
{
    json_decref(b->manifest);
    free(b->block);
    free(b->index);
    free(b->ranges);
    free(b->records);
    memset(b, 0, sizeof *b);
}

static void append(pack_built *b, const void *data, uint64_t n, uint64_t *offset)
{
    *offset = n ? PACK_TEST_BLOCK + b->ranges_bytes : 0;
    b->ranges = realloc(b->ranges, (size_t)(b->ranges_bytes + n + 1));
    memcpy(b->ranges + b->ranges_bytes, data, (size_t)n);
    b->ranges_bytes += n;
}

int pack_build(const char *path, const pack_spec *spec, pack_built *out)
{
    pack_built b = {0};
    const uint64_t P = spec->shape[2] * spec->shape[3];
    const uint64_t scans = spec->shape[0] * spec->shape[1];
    const uint64_t shards = scans / spec->sps;
    uint8_t *is_excluded = calloc((size_t)P, 1);
    for (uint64_t i = 0; i < spec->excluded_count; i++)
        is_excluded[spec->excluded[i]] = 1;
    b.records = calloc((size_t)shards, sizeof *b.records);
    b.shard_count = shards;
    pack_encoded_shard *enc = calloc((size_t)shards, sizeof *enc);
    qem_error e = {0};
    int ok = 1;
    for (uint64_t s = 0; s < shards && ok; s++) {
        const uint16_t *rows = spec->data + s * spec->sps * P;
        pack_shard_record *r = &b.records[s];
        if (spec->profile == QEM_PACK_UINT16_LZ4) {
            ok = qem_pack_encode_v1_shard(rows, spec->sps, P, &enc[s], &e) == QEM_OK;
            if (!ok)
                break;
            append(&b, enc[s].compressed, enc[s].compressed_bytes, &r->payload_offset);
            r->payload_bytes = enc[s].compressed_bytes;
            append(&b, enc[s].lengths, enc[s].chunk_count, &r->lengths_offset);
            r->lengths_bytes = enc[s].chunk_count;
            append(&b, enc[s].widths, enc[s].width_count, &r->widths_offset);
            r->widths_bytes = enc[s].width_count;
            r->descriptor_count = (uint32_t)enc[s].width_count;
            r->chunk_count = (uint32_t)enc[s].chunk_count;
        } else {
            ok = qem_pack_encode_v3_shard(rows, spec->sps, P, is_excluded, s * spec->sps, &enc[s],
                                          &e) == QEM_OK;
            if (!ok)
                break;
            append(&b, enc[s].decoded, enc[s].decoded_bytes, &r->payload_offset);
            r->payload_bytes = enc[s].decoded_bytes;
            append(&b, enc[s].headers, 4 * enc[s].header_words, &r->widths_offset);
            r->widths_bytes = 4 * enc[s].header_words;
            r->descriptor_count = (uint32_t)enc[s].header_words;
        }
        r->decoded_bytes = enc[s].decoded_bytes;
        memcpy(r->decoded_sha256, enc[s].decoded_sha256, 32);
    }
    if (!ok) {
        fprintf(stderr, "pack_build: %s\n", e.message);
        goto done;
    }
    /* Digests over the whole source: raw, working (mask applied), mask. */
    pack_manifest_facts f = {0};
    f.profile = spec->profile;
    memcpy(f.shape, spec->shape, sizeof f.shape);
    f.sps = spec->sps;
    f.shard_count = shards;
    f.excluded = spec->excluded;
    f.excluded_count = spec->excluded_count;
    f.working_dtype = spec->working_dtype ? spec->working_dtype : QEM_DTYPE_UINT16;
    f.retained_policy = spec->retained_policy;
    uint16_t *constants = calloc((size_t)(spec->excluded_count + 1), 2);
    for (uint64_t i = 0; i < spec->excluded_count; i++)
        constants[i] = spec->data[spec->excluded[i]];
    f.raw_constants = spec->raw_constants ? constants : NULL;
    qem_sha256_oneshot(path, strlen(path), f.identity); /* any 32 bytes, bound to this test */
    qem_sha256_oneshot(spec->data, (size_t)(scans * P * 2), f.raw_logical_sha256);
    const int u8 = spec->profile == QEM_PACK_UINT8_BITPACKED;
    uint8_t *working = malloc((size_t)(scans * P * (u8 ? 1 : 2)));
    for (uint64_t k = 0; k < scans * P; k++) {
        uint16_t v = is_excluded[k % P] ? 0 : spec->data[k];
        if (u8)
            working[k] = (uint8_t)v;
        else
            memcpy(working + 2 * k, &v, 2);
    }
    qem_sha256_oneshot(working, (size_t)(scans * P * (u8 ? 1 : 2)), f.working_sha256);
    free(working);
    uint32_t *mask = calloc((size_t)P, 4);
    for (uint64_t i = 0; i < spec->excluded_count; i++)
        mask[spec->excluded[i]] = 1;
    qem_sha256_oneshot(mask, (size_t)P * 4, f.detector_mask_sha256);
    free(mask);
    f.records = b.records;
    f.encoded = spec->profile == QEM_PACK_UINT16_LZ4 ? enc : NULL;
    json_t *cal = NULL;
    if (spec->calibration) {
        char hex[65];
        qem_sha256_hex(f.identity, hex);
        cal = json_pack("{s:s, s:s, s:[f,f], s:f, s:f, s:b, s:s}", "schema",
                        "quantem.gpu.detector-calibration/v1", "source_identity_sha256", hex,
                        "detector_center_px", (double)spec->shape[2] / 2 - 0.5,
                        (double)spec->shape[3] / 2 - 0.5, "bright_field_radius_px", 2.5,
                        "dpc_rotation_degrees", 176.98, "dpc_component_order_exchanged", 0,
                        "method", "mean-diffraction-half-maximum");
    }
    f.detector_calibration = cal;
    b.manifest = qem_pack_manifest_build(&f);
    json_decref(cal);
    free(constants);
    b.index_offset = 0;
    uint8_t *index =
        qem_pack_index_build(spec->profile, spec->shape, spec->sps, spec->excluded,
                             spec->excluded_count, f.identity, b.records, shards, &b.index_bytes);
    b.index = index;
    ok = pack_rewrite(path, &b, b.manifest, NULL, 0);
    if (ok) {
        /* Keep the block as written, and where the index landed in it. */
        size_t n = 0;
        uint8_t *file = read_file(path, &n);
        b.block = malloc(PACK_TEST_BLOCK);
        memcpy(b.block, file, PACK_TEST_BLOCK);
        uint32_t at;
        memcpy(&at, file + 16, 4);
        b.index_offset = at;
        free(file);
    }
done:
    for (uint64_t s = 0; s < shards; s++)
        qem_pack_encoded_shard_free(&enc[s]);
    free(enc);
    free(is_excluded);
    if (out && ok)
        *out = b;
    else
        pack_built_free(&b);
    return ok;
}

int pack_rewrite(const char *path, const pack_built *b, const json_t *manifest,
                 const uint8_t *index, uint64_t index_bytes)
{
    if (!index) {
        index = b->index;
        index_bytes = b->index_bytes;
    }
    char *text = json_dumps(manifest, JSON_COMPACT | JSON_SORT_KEYS);
    uint8_t *block = NULL;
    qem_error e = {0};
    int ok = qem_pack_user_block(text, strlen(text), index, index_bytes, PACK_TEST_BLOCK, &block,
                                 &e) == QEM_OK;
    if (ok) {
        FILE *fp = fopen(path, "wb");
        ok = fp && fwrite(block, 1, PACK_TEST_BLOCK, fp) == PACK_TEST_BLOCK &&
             fwrite(b->ranges, 1, (size_t)b->ranges_bytes, fp) == b->ranges_bytes;
        if (fp)
            ok &= fclose(fp) == 0;
    } else {
        fprintf(stderr, "pack_rewrite: %s\n", e.message);
    }
    free(block);
    free(text);
    return ok;
}

qem_status pack_open_load(const char *path, qem_error *error, int *loaded)
{
    qem_pack *p = NULL;
    *loaded = 0;
    qem_status st = qem_pack_open(path, NULL, &p, error);
    if (st == QEM_OK)
        st = qem_pack_load(p, NULL, error);
    if (p) {
        qem_pack_info info = {.struct_size = sizeof info};
        qem_pack_get_info(p, &info, NULL);
        *loaded = info.loaded;
    }
    qem_pack_close(p);
    return st;
}
