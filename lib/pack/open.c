/* Opening a pack: the cheap part of the lifecycle. Prelude, manifest
 * (CRC-32 checked before parsing), binary index, every byte range, the
 * manifest's agreement with the index, the raw access mode and the optional
 * detector calibration. Nothing is decoded here. */
#include <errno.h>
#include <fcntl.h>
#include <libdeflate.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/byteorder.h"
#include "common/options.h"
#include "common/fileio.h"
#include "common/json.h"
#include "common/sha256.h"
#include "common/threads.h"
#include "pack/pack_internal.h"

void qem_pack_now(struct timespec *t)
{
    clock_gettime(CLOCK_MONOTONIC, t);
}

double qem_pack_elapsed_ms(const struct timespec *start)
{
    struct timespec t;
    qem_pack_now(&t);
    return (double)(t.tv_sec - start->tv_sec) * 1e3 + (double)(t.tv_nsec - start->tv_nsec) * 1e-6;
}

void qem_pack_close(qem_pack *p)
{
    if (!p)
        return;
    if (p->fd >= 0)
        close(p->fd);
    for (uint64_t s = 0; p->shards && s < p->shard_count; s++) {
        free(p->shards[s].words);
        free(p->shards[s].tile_widths);
        free(p->shards[s].pixel_words);
        free(p->shards[s].headers);
    }
    free(p->shards);
    free(p->path);
    free(p->manifest_text);
    json_decref(p->manifest);
    free(p->excluded);
    free(p->is_excluded);
    free(p->raw_constants);
    free(p->max_width);
    qem_pack_prepared_free(&p->prepared);
    pthread_mutex_destroy(&p->ready_lock);
    pthread_cond_destroy(&p->ready_cond);
    free(p);
}

/* --- prelude and index ---------------------------------------------------- */

static qem_status read_prelude(qem_pack *p, uint64_t *index_offset, uint64_t *index_bytes,
                               qem_error *error)
{
    uint8_t pre[PACK_PRELUDE_BYTES];
    if (p->file_size < PACK_PRELUDE_BYTES)
        return qem_fail(error, QEM_E_PACK_PRELUDE, "'%s' is too short to hold a pack prelude",
                        p->path);
    QEM_TRY(qem_pread_full(p->fd, pre, sizeof pre, 0, QEM_E_PACK_PRELUDE, error));
    if (memcmp(pre, PACK_MAGIC, 8) != 0)
        return qem_fail(error, QEM_E_PACK_PRELUDE,
                        "'%s' does not begin with the pack signature QGPUH5\\0\\x01", p->path);
    const uint32_t json_bytes = qem_get_le32(pre + 8), crc = qem_get_le32(pre + 12);
    *index_offset = qem_get_le32(pre + 16);
    *index_bytes = qem_get_le32(pre + 20);
    if (json_bytes == 0 || *index_offset < PACK_PRELUDE_BYTES + (uint64_t)json_bytes)
        return qem_fail(error, QEM_E_PACK_PRELUDE,
                        "pack manifest length %u does not fit before the index at byte %llu",
                        json_bytes, (unsigned long long)*index_offset);
    if (*index_offset > p->file_size || *index_bytes > p->file_size - *index_offset)
        return qem_fail(error, QEM_E_PACK_PRELUDE,
                        "pack binary index [%llu, +%llu) lies outside the %llu-byte file",
                        (unsigned long long)*index_offset, (unsigned long long)*index_bytes,
                        (unsigned long long)p->file_size);
    p->manifest_bytes = json_bytes;
    p->manifest_text = malloc((size_t)json_bytes + 1);
    if (!p->manifest_text)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    QEM_TRY(qem_pread_full(p->fd, p->manifest_text, json_bytes, PACK_PRELUDE_BYTES,
                           QEM_E_PACK_PRELUDE, error));
    p->manifest_text[json_bytes] = '\0';
    /* The CRC is checked before a single manifest byte is interpreted. */
    if ((uint32_t)libdeflate_crc32(0, p->manifest_text, json_bytes) != crc)
        return qem_fail(error, QEM_E_PACK_CRC,
                        "pack manifest failed its CRC-32 check; recopy the file");
    return qem_json_parse_object(p->manifest_text, json_bytes, QEM_E_PACK_MANIFEST, &p->manifest,
                                 error);
}

static qem_status parse_index(qem_pack *p, const uint8_t *ix, uint64_t n, qem_error *error)
{
    uint64_t head;
    if (n >= 8 && memcmp(ix, PACK_INDEX_MAGIC_V1, 8) == 0) {
        p->profile = QEM_PACK_UINT16_LZ4;
        head = 36;
    } else if (n >= 8 && memcmp(ix, PACK_INDEX_MAGIC_V3, 8) == 0) {
        p->profile = QEM_PACK_UINT8_BITPACKED;
        head = 44;
    } else if (n >= 4 && memcmp(ix, "QGIX", 4) == 0) {
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "pack index revision %u is not supported by this qem; update qem",
                        n >= 8 ? ix[7] : 0);
    } else {
        return qem_fail(error, QEM_E_PACK_INDEX, "pack binary index lacks the QGIX signature");
    }
    if (n < head + 4)
        return qem_fail(error, QEM_E_PACK_INDEX, "pack binary index is truncated in its header");
    p->shard_count = qem_get_le32(ix + 8);
    for (int i = 0; i < 4; i++)
        p->shape[i] = qem_get_le32(ix + 16 + 4 * i);
    p->sps = qem_get_le32(ix + 32);
    if (p->shard_count == 0)
        return qem_fail(error, QEM_E_PACK_INDEX, "pack index declares no shards");
    if (!p->shape[0] || !p->shape[1] || !p->shape[2] || !p->shape[3] || !p->sps)
        return qem_fail(error, QEM_E_PACK_INDEX, "pack index shape and scans per shard must be "
                                                 "positive");
    p->scans = p->shape[0] * p->shape[1];
    p->pixels = p->shape[2] * p->shape[3];
    /* Every detector pixel owns at least one stored byte per shard (a
     * width byte, or a 4-byte compact header): a file cannot describe more
     * pixels than it has bytes. Checked before any per-pixel allocation. */
    if (p->pixels > p->file_size)
        return qem_fail(error, QEM_E_PACK_INDEX,
                        "pack index declares %llu detector pixels, more than a %llu-byte file "
                        "can hold",
                        (unsigned long long)p->pixels, (unsigned long long)p->file_size);
    if (p->scans != p->shard_count * p->sps)
        return qem_fail(error, QEM_E_PACK_INDEX,
                        "pack index: %llu scan positions differ from %llu shards x %llu scans",
                        (unsigned long long)p->scans, (unsigned long long)p->shard_count,
                        (unsigned long long)p->sps);
    if (p->profile == QEM_PACK_UINT16_LZ4) {
        if (qem_get_le32(ix + 12) != PACK_CHUNK_BYTES)
            return qem_fail(error, QEM_E_PACK_INDEX,
                            "pack index payload chunk size %u is not 128", qem_get_le32(ix + 12));
        p->tiles = (p->sps + PACK_V1_TILE - 1) / PACK_V1_TILE;
    } else {
        if (qem_get_le32(ix + 12) != 0)
            return qem_fail(error, QEM_E_PACK_INDEX, "pack index reserved word is not zero");
        if (qem_get_le32(ix + 36) != PACK_V3_TILE)
            return qem_fail(error, QEM_E_PACK_INDEX, "pack index scan tile %u is not 32",
                            qem_get_le32(ix + 36));
        if (qem_get_le32(ix + 40) != 1)
            return qem_fail(error, QEM_E_UNSUPPORTED,
                            "pack header encoding %u is not supported (only 1, uint8 widths); "
                            "update qem",
                            qem_get_le32(ix + 40));
        if (p->sps % PACK_V3_TILE != 0)
            return qem_fail(error, QEM_E_PACK_INDEX,
                            "pack shards of %llu scans are not whole 32-scan tiles",
                            (unsigned long long)p->sps);
        p->tiles = p->sps / PACK_V3_TILE;
        p->checkpoints = (p->tiles + 31) / 32;
        p->width_words = (p->tiles + 7) / 8;
    }
    const uint64_t excluded = qem_get_le32(ix + head);
    if (excluded > p->pixels)
        return qem_fail(error, QEM_E_PACK_INDEX,
                        "pack index excludes %llu of only %llu detector pixels",
                        (unsigned long long)excluded, (unsigned long long)p->pixels);
    const uint64_t expected = head + 4 + 4 * excluded + 32 + PACK_RECORD_BYTES * p->shard_count;
    if (n < expected)
        return qem_fail(error, QEM_E_PACK_INDEX, "pack binary index is truncated (%llu of %llu "
                                                 "bytes)",
                        (unsigned long long)n, (unsigned long long)expected);
    if (n > expected)
        return qem_fail(error, QEM_E_PACK_INDEX, "pack binary index has trailing bytes");
    p->excluded_count = excluded;
    p->excluded = malloc((size_t)(excluded ? excluded : 1) * sizeof *p->excluded);
    p->is_excluded = calloc((size_t)p->pixels, 1);
    p->shards = calloc((size_t)p->shard_count, sizeof *p->shards);
    if (!p->excluded || !p->is_excluded || !p->shards)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const uint8_t *cur = ix + head + 4;
    for (uint64_t i = 0; i < excluded; i++, cur += 4) {
        uint32_t px = qem_get_le32(cur);
        if (px >= p->pixels || p->is_excluded[px])
            return qem_fail(error, QEM_E_PACK_INDEX,
                            "pack excluded pixel %u is out of range or listed twice", px);
        p->excluded[i] = px;
        p->is_excluded[px] = 1;
    }
    memcpy(p->identity, cur, 32);
    cur += 32;
    for (uint64_t s = 0; s < p->shard_count; s++, cur += PACK_RECORD_BYTES) {
        pack_shard *r = &p->shards[s];
        r->payload_offset = qem_get_le64(cur);
        r->payload_bytes = qem_get_le64(cur + 8);
        r->lengths_offset = qem_get_le64(cur + 16);
        r->lengths_bytes = qem_get_le64(cur + 24);
        r->widths_offset = qem_get_le64(cur + 32);
        r->widths_bytes = qem_get_le64(cur + 40);
        r->decoded_bytes = qem_get_le64(cur + 48);
        r->descriptor_count = qem_get_le32(cur + 56);
        r->chunk_count = qem_get_le32(cur + 60);
        memcpy(r->decoded_sha256, cur + 64, 32);
    }
    return QEM_OK;
}

static qem_status check_records(const qem_pack *p, qem_error *error)
{
    for (uint64_t s = 0; s < p->shard_count; s++) {
        const pack_shard *r = &p->shards[s];
        const unsigned long long k = (unsigned long long)s;
        if (r->payload_bytes == 0)
            return qem_fail(error, QEM_E_PACK_INDEX, "pack shard %llu has an empty payload", k);
        if (p->profile == QEM_PACK_UINT16_LZ4) {
            if (r->decoded_bytes == 0 || r->decoded_bytes % 4 != 0)
                return qem_fail(error, QEM_E_PACK_INDEX,
                                "pack shard %llu decoded size %llu is not a positive multiple "
                                "of 4",
                                k, (unsigned long long)r->decoded_bytes);
            if (r->decoded_bytes / 4 >= PACK_MAX_WORDS)
                return qem_fail(error, QEM_E_PACK_INDEX,
                                "pack shard %llu decodes to more words than 27-bit descriptor "
                                "offsets address",
                                k);
            if (r->descriptor_count != p->pixels * p->tiles || r->widths_bytes != r->descriptor_count)
                return qem_fail(error, QEM_E_PACK_INDEX,
                                "pack shard %llu has %u descriptors and %llu width bytes; the "
                                "geometry needs %llu",
                                k, r->descriptor_count, (unsigned long long)r->widths_bytes,
                                (unsigned long long)(p->pixels * p->tiles));
            uint64_t chunks = (r->decoded_bytes + PACK_CHUNK_BYTES - 1) / PACK_CHUNK_BYTES;
            if (r->chunk_count != chunks || r->lengths_bytes != chunks)
                return qem_fail(error, QEM_E_PACK_INDEX,
                                "pack shard %llu has %u chunks and %llu length bytes; %llu "
                                "decoded bytes make %llu",
                                k, r->chunk_count, (unsigned long long)r->lengths_bytes,
                                (unsigned long long)r->decoded_bytes, (unsigned long long)chunks);
        } else {
            if (r->lengths_offset || r->lengths_bytes || r->chunk_count)
                return qem_fail(error, QEM_E_PACK_INDEX,
                                "pack shard %llu: a direct-bitpacked shard has no LZ4 lengths "
                                "or chunks",
                                k);
            if (r->payload_bytes % 4 != 0 || r->decoded_bytes != r->payload_bytes)
                return qem_fail(error, QEM_E_PACK_INDEX,
                                "pack shard %llu payload must be whole words and equal its "
                                "decoded size",
                                k);
            if (r->payload_bytes / 4 >= PACK_MAX_WORDS)
                return qem_fail(error, QEM_E_PACK_INDEX, "pack shard %llu payload is too large",
                                k);
            uint64_t words = p->pixels * (p->checkpoints + p->width_words);
            if (r->descriptor_count != words || r->widths_bytes != 4 * words)
                return qem_fail(error, QEM_E_PACK_INDEX,
                                "pack shard %llu has %u header words; the geometry needs %llu",
                                k, r->descriptor_count, (unsigned long long)words);
        }
    }
    return QEM_OK;
}

static int range_cmp(const void *a, const void *b)
{
    const pack_range *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

qem_status qem_pack_check_ranges(const qem_pack *p, uint64_t metadata_end, const pack_range *extra,
                                 size_t extra_count, qem_error *error)
{
    pack_range *r = malloc((size_t)(3 * p->shard_count + 1 + extra_count) * sizeof *r);
    if (!r)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    size_t n = 0;
    r[n++] = (pack_range){0, metadata_end, "the prelude, manifest and index"};
    for (size_t i = 0; i < extra_count; i++)
        r[n++] = extra[i];
    static const char *const names[3] = {"payload", "chunk lengths",
                                         "descriptor widths"};
    for (uint64_t s = 0; s < p->shard_count; s++) {
        const pack_shard *sh = &p->shards[s];
        const uint64_t off[3] = {sh->payload_offset, sh->lengths_offset, sh->widths_offset};
        const uint64_t len[3] = {sh->payload_bytes, sh->lengths_bytes, sh->widths_bytes};
        for (int k = 0; k < 3; k++) {
            if (len[k] == 0)
                continue;
            if (off[k] > p->file_size || len[k] > p->file_size - off[k]) {
                qem_status st = qem_fail(
                    error, QEM_E_PACK_RANGE, "pack shard %llu %s range [%llu, +%llu) is outside "
                                             "the %llu-byte file; recopy the file",
                    (unsigned long long)s,
                    k == 2 && p->profile == QEM_PACK_UINT8_BITPACKED ? "compact header" : names[k],
                    (unsigned long long)off[k], (unsigned long long)len[k],
                    (unsigned long long)p->file_size);
                free(r);
                return st;
            }
            r[n].start = off[k];
            r[n].end = off[k] + len[k];
            snprintf(r[n].label, sizeof r[n].label, "shard %llu %s", (unsigned long long)s,
                     k == 2 && p->profile == QEM_PACK_UINT8_BITPACKED ? "compact headers"
                                                                      : names[k]);
            n++;
        }
    }
    qsort(r, n, sizeof *r, range_cmp);
    qem_status st = QEM_OK;
    for (size_t i = 1; i < n && st == QEM_OK; i++)
        if (r[i].start < r[i - 1].end)
            st = qem_fail(error, extra_count ? QEM_E_PACK_PREPARED : QEM_E_PACK_RANGE,
                          "pack ranges overlap between %s and %s", r[i - 1].label, r[i].label);
    free(r);
    return st;
}

/* --- manifest ------------------------------------------------------------- */

#define MANIFEST_FAIL(...) qem_fail(error, QEM_E_PACK_MANIFEST, "pack manifest: " __VA_ARGS__)

static void hex_of(const uint8_t digest[32], char hex[65])
{
    qem_sha256_hex(digest, hex);
}

static int hex_decode(const char *hex, uint8_t out[32])
{
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return 0;
        out[i] = (uint8_t)v;
    }
    return 1;
}

static qem_status check_common(const qem_pack *p, const json_t *m, qem_error *error)
{
    if (!qem_json_string_is(json_object_get(m, "status"), "complete"))
        return MANIFEST_FAIL("status must be \"complete\"");
    const json_t *shape = json_object_get(m, "source_shape");
    if (!json_is_array(shape) || json_array_size(shape) != 4)
        return MANIFEST_FAIL("source_shape must list four integers");
    for (size_t i = 0; i < 4; i++)
        if (!qem_json_u64_is(json_array_get(shape, i), p->shape[i]))
            return MANIFEST_FAIL("source_shape disagrees with the binary index");
    if (!qem_json_string_is(json_object_get(m, "source_dtype"), "uint16"))
        return MANIFEST_FAIL("source_dtype must be \"uint16\"");
    if (!qem_json_u64_is(json_object_get(m, "scan_bin"), 1) ||
        !qem_json_u64_is(json_object_get(m, "detector_bin"), 1))
        return MANIFEST_FAIL("scan_bin and detector_bin must be 1 (binning is not supported)");
    const json_t *crop = json_object_get(m, "crop");
    if (!crop || !json_is_null(crop))
        return MANIFEST_FAIL("crop must be null (cropping is not supported)");
    if (!qem_json_u64_is(json_object_get(m, "shard_count"), p->shard_count))
        return MANIFEST_FAIL("shard_count disagrees with the binary index");
    const json_t *sps = json_object_get(m, "scans_per_shard");
    if ((p->profile == QEM_PACK_UINT16_LZ4 || sps) && !qem_json_u64_is(sps, p->sps))
        return MANIFEST_FAIL("scans_per_shard disagrees with the binary index");
    char hex[65];
    hex_of(p->identity, hex);
    if (!qem_json_string_is(json_object_get(m, "source_identity_sha256"), hex))
        return MANIFEST_FAIL("source_identity_sha256 disagrees with the binary index identity");
    static const char *const digests[] = {"source_raw_logical_sha256", "detector_mask_sha256",
                                          "working_logical_sha256", "prepared_uint8_sha256"};
    for (size_t i = 0; i < sizeof digests / sizeof digests[0]; i++) {
        const json_t *d = json_object_get(m, digests[i]);
        if (d && !qem_json_is_lower_hex64(d))
            return MANIFEST_FAIL("%s must be 64 lowercase hex digits", digests[i]);
    }
    return QEM_OK;
}

/* masked_detector_pixels: v1 as [row, column] pairs, v3 as flat indices in
 * strictly increasing order; either way equal to the binary list. */
static qem_status check_excluded_list(const qem_pack *p, const json_t *m, qem_error *error)
{
    const json_t *list = json_object_get(m, "masked_detector_pixels");
    if (!json_is_array(list) || json_array_size(list) != p->excluded_count)
        return MANIFEST_FAIL("masked_detector_pixels must list the %llu excluded pixels of the "
                             "binary index",
                             (unsigned long long)p->excluded_count);
    for (size_t i = 0; i < p->excluded_count; i++) {
        const json_t *e = json_array_get(list, i);
        uint64_t flat;
        if (p->profile == QEM_PACK_UINT16_LZ4) {
            uint64_t r, c;
            if (!json_is_array(e) || json_array_size(e) != 2 ||
                !qem_json_as_u64(json_array_get(e, 0), &r) ||
                !qem_json_as_u64(json_array_get(e, 1), &c) || r >= p->shape[2] ||
                c >= p->shape[3])
                return MANIFEST_FAIL("masked_detector_pixels[%zu] must be an in-range [row, "
                                     "column] pair",
                                     i);
            flat = r * p->shape[3] + c;
        } else {
            if (!qem_json_as_u64(e, &flat))
                return MANIFEST_FAIL("masked_detector_pixels[%zu] must be an integer", i);
            if (i > 0 && flat <= p->excluded[i - 1])
                return MANIFEST_FAIL("masked_detector_pixels must be strictly increasing");
        }
        if (flat != p->excluded[i])
            return MANIFEST_FAIL("masked_detector_pixels[%zu] disagrees with the binary index", i);
    }
    return QEM_OK;
}

/* The portable exclusion record: the ordered list's digest and one exact
 * uint16 raw value per excluded pixel. Returns 1 when both are present and
 * valid, 0 when either is absent; fails when present but wrong. */
static qem_status check_raw_constants(qem_pack *p, const json_t *m, int *valid, qem_error *error)
{
    const json_t *digest = json_object_get(m, "masked_detector_pixels_sha256");
    const json_t *values = json_object_get(m, "masked_detector_raw_values");
    *valid = 0;
    if (!digest && !values)
        return QEM_OK;
    if (p->profile == QEM_PACK_UINT16_LZ4 && (!digest || !values))
        return MANIFEST_FAIL("masked_detector_pixels_sha256 and masked_detector_raw_values come "
                             "together or not at all");
    if (!digest || !values)
        return QEM_OK; /* uint8 legacy: mask-applied only */
    uint8_t *le = malloc((size_t)(4 * p->excluded_count + 1));
    if (!le)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t i = 0; i < p->excluded_count; i++)
        for (int b = 0; b < 4; b++)
            le[4 * i + (uint64_t)b] = (uint8_t)(p->excluded[i] >> (8 * b));
    uint8_t d[32];
    char hex[65];
    qem_sha256_oneshot(le, (size_t)(4 * p->excluded_count), d);
    free(le);
    hex_of(d, hex);
    if (!qem_json_string_is(digest, hex))
        return MANIFEST_FAIL("masked_detector_pixels_sha256 does not match the ordered excluded "
                             "pixels");
    if (!json_is_array(values) || json_array_size(values) != p->excluded_count)
        return MANIFEST_FAIL("masked_detector_raw_values must hold one value per excluded pixel");
    p->raw_constants = malloc((size_t)(p->excluded_count ? p->excluded_count : 1) * 2);
    if (!p->raw_constants)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < p->excluded_count; i++) {
        uint64_t v;
        if (!qem_json_as_u64(json_array_get(values, i), &v) || v > 65535)
            return MANIFEST_FAIL("masked_detector_raw_values[%zu] must be an integer 0..65535", i);
        p->raw_constants[i] = (uint16_t)v;
    }
    *valid = 1;
    return QEM_OK;
}

static qem_status check_v1_shards(qem_pack *p, const json_t *m, qem_error *error)
{
    const json_t *list = json_object_get(m, "shards");
    if (!json_is_array(list) || json_array_size(list) != p->shard_count)
        return MANIFEST_FAIL("shards must hold one record per shard (%llu)",
                             (unsigned long long)p->shard_count);
    for (size_t s = 0; s < p->shard_count; s++) {
        pack_shard *r = &p->shards[s];
        const json_t *j = json_array_get(list, s);
        const struct {
            const char *key;
            uint64_t value;
        } fields[] = {{"ordinal", s},
                      {"payload_file_offset", r->payload_offset},
                      {"payload_file_bytes", r->payload_bytes},
                      {"lengths_file_offset", r->lengths_offset},
                      {"lengths_file_bytes", r->lengths_bytes},
                      {"descriptor_widths_file_offset", r->widths_offset},
                      {"descriptor_widths_file_bytes", r->widths_bytes},
                      {"payload_decoded_bytes", r->decoded_bytes},
                      {"descriptor_count", r->descriptor_count},
                      {"payload_chunk_count", r->chunk_count}};
        if (!json_is_object(j))
            return MANIFEST_FAIL("shards[%zu] must be an object", s);
        for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++)
            if (!qem_json_u64_is(json_object_get(j, fields[k].key), fields[k].value))
                return MANIFEST_FAIL("shards[%zu].%s disagrees with the binary index", s,
                                     fields[k].key);
        char hex[65];
        hex_of(r->decoded_sha256, hex);
        if (!qem_json_string_is(json_object_get(j, "payload_decoded_sha256"), hex))
            return MANIFEST_FAIL("shards[%zu].payload_decoded_sha256 disagrees with the binary "
                                 "index",
                                 s);
        /* Optional digests of the stored ranges: checked at load. */
        const json_t *c = json_object_get(j, "payload_compressed_sha256");
        const json_t *w = json_object_get(j, "descriptor_widths_sha256");
        if ((c && !qem_json_is_lower_hex64(c)) || (w && !qem_json_is_lower_hex64(w)))
            return MANIFEST_FAIL("shards[%zu] stored-range digests must be 64 lowercase hex "
                                 "digits",
                                 s);
        r->has_compressed_sha256 = c && hex_decode(json_string_value(c), r->compressed_sha256);
        r->has_widths_sha256 = w && hex_decode(json_string_value(w), r->widths_sha256);
    }
    return QEM_OK;
}

static qem_status check_v1_manifest(qem_pack *p, const json_t *m, qem_error *error)
{
    QEM_TRY(check_common(p, m, error));
    if (!qem_json_u64_is(json_object_get(m, "payload_chunk_bytes"), PACK_CHUNK_BYTES))
        return MANIFEST_FAIL("payload_chunk_bytes must be 128");
    if (!qem_json_string_is(json_object_get(m, "payload_chunk_codec"), "independent raw LZ4 blocks"))
        return MANIFEST_FAIL("payload_chunk_codec must be \"independent raw LZ4 blocks\"");
    if (!qem_json_string_is(json_object_get(m, "payload_chunk_length_codec"),
                   "uint8 encoded_bytes_minus_one"))
        return MANIFEST_FAIL("payload_chunk_length_codec must be \"uint8 "
                             "encoded_bytes_minus_one\"");
    if (!qem_json_string_is(json_object_get(m, "descriptor_codec"), "uint8 five-bit widths"))
        return MANIFEST_FAIL("descriptor_codec must be \"uint8 five-bit widths\"");
    const json_t *working = json_object_get(m, "working_dtype");
    if (qem_json_string_is(working, "uint16"))
        p->working_dtype = QEM_DTYPE_UINT16;
    else if (qem_json_string_is(working, "uint8"))
        p->working_dtype = QEM_DTYPE_UINT8;
    else
        return MANIFEST_FAIL("working_dtype must be \"uint8\" or \"uint16\"");
    QEM_TRY(check_excluded_list(p, m, error));
    int constants = 0;
    QEM_TRY(check_raw_constants(p, m, &constants, error));
    const json_t *policy = json_object_get(m, "masked_detector_payload_policy");
    if (policy && !qem_json_string_is(policy, "retained_exactly_in_payload"))
        return MANIFEST_FAIL("masked_detector_payload_policy \"%s\" is not known; only "
                             "\"retained_exactly_in_payload\"",
                             json_is_string(policy) ? json_string_value(policy) : "?");
    if (p->excluded_count == 0)
        p->raw_access = QEM_RAW_EXACT_NO_EXCLUSIONS;
    else if (policy)
        p->raw_access = QEM_RAW_RETAINED_PAYLOAD;
    else
        p->raw_access = QEM_RAW_MASK_APPLIED_ONLY;
    return check_v1_shards(p, m, error);
}

static qem_status check_v3_manifest(qem_pack *p, const json_t *m, qem_error *error)
{
    if (json_object_get(m, "shards"))
        return MANIFEST_FAIL("a direct-bitpacked manifest must not carry shard records");
    if (!json_object_get(m, "source_dtype"))
        return MANIFEST_FAIL("source provenance is missing (source_dtype); a legacy minimal "
                             "direct-bitpacked file is not a portable source: rebuild it");
    QEM_TRY(check_common(p, m, error));
    if (!qem_json_string_is(json_object_get(m, "payload_codec"), "direct-bitpacked-u32"))
        return MANIFEST_FAIL("payload_codec must be \"direct-bitpacked-u32\"");
    if (!qem_json_string_is(json_object_get(m, "working_dtype"), "uint8"))
        return MANIFEST_FAIL("working_dtype must be \"uint8\" for header encoding 1");
    if (!qem_json_string_is(json_object_get(m, "working_value_definition"), PACK_V3_WORKING_DEFINITION))
        return MANIFEST_FAIL("working_value_definition must be exactly \"%s\"",
                             PACK_V3_WORKING_DEFINITION);
    if (!qem_json_u64_is(json_object_get(m, "scan_tile"), PACK_V3_TILE))
        return MANIFEST_FAIL("scan_tile must be 32");
    static const char *const required[] = {"source_raw_logical_sha256", "prepared_uint8_sha256",
                                           "detector_mask_sha256"};
    for (size_t i = 0; i < 3; i++)
        if (!qem_json_is_lower_hex64(json_object_get(m, required[i])))
            return MANIFEST_FAIL("%s is required (64 lowercase hex digits)", required[i]);
    p->working_dtype = QEM_DTYPE_UINT8;
    QEM_TRY(check_excluded_list(p, m, error));
    int constants = 0;
    QEM_TRY(check_raw_constants(p, m, &constants, error));
    p->raw_access = p->excluded_count == 0 ? QEM_RAW_EXACT_NO_EXCLUSIONS
                    : constants           ? QEM_RAW_EXCLUSION_CONSTANTS
                                          : QEM_RAW_MASK_APPLIED_ONLY;
    return QEM_OK;
}

#define CAL_FAIL(...) qem_fail(error, QEM_E_PACK_CALIBRATION, "detector_calibration: " __VA_ARGS__)

static int finite_number(const json_t *v, double *out)
{
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return 0;
    *out = json_number_value(v);
    return 1;
}

static qem_status check_calibration(qem_pack *p, const json_t *m, qem_error *error)
{
    const json_t *c = json_object_get(m, "detector_calibration");
    if (!c || json_is_null(c))
        return QEM_OK;
    if (!json_is_object(c))
        return CAL_FAIL("must be an object");
    if (!qem_json_string_is(json_object_get(c, "schema"), "quantem.gpu.detector-calibration/v1"))
        return CAL_FAIL("schema must be \"quantem.gpu.detector-calibration/v1\"");
    char hex[65];
    hex_of(p->identity, hex);
    if (!qem_json_string_is(json_object_get(c, "source_identity_sha256"), hex))
        return CAL_FAIL("source_identity_sha256 names another source; a calibration copied from "
                        "another file is not accepted");
    qem_detector_calibration *k = &p->calibration;
    const json_t *center = json_object_get(c, "detector_center_px");
    if (!json_is_array(center) || json_array_size(center) != 2 ||
        !finite_number(json_array_get(center, 0), &k->center_row) ||
        !finite_number(json_array_get(center, 1), &k->center_column))
        return CAL_FAIL("detector_center_px must be two finite numbers [row, column]");
    if (k->center_row < 0 || k->center_row >= (double)p->shape[2] || k->center_column < 0 ||
        k->center_column >= (double)p->shape[3])
        return CAL_FAIL("detector_center_px lies outside the %llux%llu detector",
                        (unsigned long long)p->shape[2], (unsigned long long)p->shape[3]);
    if (!finite_number(json_object_get(c, "bright_field_radius_px"), &k->bright_field_radius) ||
        k->bright_field_radius <= 0 ||
        k->bright_field_radius > hypot((double)p->shape[2], (double)p->shape[3]))
        return CAL_FAIL("bright_field_radius_px must be finite, positive and no larger than the "
                        "detector diagonal");
    const json_t *rot = json_object_get(c, "dpc_rotation_degrees");
    const json_t *exch = json_object_get(c, "dpc_component_order_exchanged");
    int has_rot = rot && !json_is_null(rot), has_exch = exch && !json_is_null(exch);
    if (has_rot != has_exch)
        return CAL_FAIL("dpc_rotation_degrees and dpc_component_order_exchanged must both be "
                        "present or both absent");
    if (has_rot) {
        if (!finite_number(rot, &k->dpc_rotation_degrees) || !json_is_boolean(exch))
            return CAL_FAIL("dpc_rotation_degrees must be a finite number and "
                            "dpc_component_order_exchanged a boolean");
        k->has_dpc = 1;
        k->dpc_component_order_exchanged = json_is_true(exch);
    }
    const json_t *method = json_object_get(c, "method");
    const char *ms = json_is_string(method) ? json_string_value(method) : "";
    size_t blank = strspn(ms, " \t\r\n");
    if (ms[blank] == '\0')
        return CAL_FAIL("method must be a non-blank string");
    snprintf(k->method, sizeof k->method, "%s", ms);
    p->has_calibration = 1;
    return QEM_OK;
}

static qem_status check_manifest(qem_pack *p, qem_error *error)
{
    const json_t *m = p->manifest;
    const json_t *schema = json_object_get(m, "schema");
    const char *want = p->profile == QEM_PACK_UINT16_LZ4 ? PACK_SCHEMA_V1 : PACK_SCHEMA_V3;
    if (!qem_json_string_is(schema, want))
        return MANIFEST_FAIL("schema \"%s\" does not match the index profile (%s)",
                             json_is_string(schema) ? json_string_value(schema) : "?", want);
    QEM_TRY(p->profile == QEM_PACK_UINT16_LZ4 ? check_v1_manifest(p, m, error)
                                              : check_v3_manifest(p, m, error));
    return check_calibration(p, m, error);
}

qem_status qem_pack_open(const char *path, const qem_pack_options *options, qem_pack **out,
                         qem_error *error)
{
    qem_error_clear(error);
    if (!path || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_pack_open: NULL argument");
    *out = NULL;
    qem_pack_options o;
    qem_pack_options_init(&o);
    if (options) {
        QEM_TRY(qem_options_overlay(&o, sizeof o, options, "qem_pack_options", error));
        QEM_TRY(qem_threads_check(o.threads, "qem_pack_options.threads", error));
        if (o.load != QEM_LOAD_ON_OPEN && o.load != QEM_LOAD_LATER)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "qem_pack_options.load must be QEM_LOAD_ON_OPEN or QEM_LOAD_LATER, "
                            "not %d", (int)o.load);
    }
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(path, &fd, &sb, error));
    qem_pack *p = NULL;
    QEM_TRY(qem_pack_open_descriptor(path, fd, &sb, &p, error));
    if (options && o.load == QEM_LOAD_ON_OPEN) {
        const qem_status st = qem_pack_load(p, &o, error);
        if (st != QEM_OK) {
            qem_pack_close(p);
            return st;
        }
    }
    *out = p;
    return QEM_OK;
}

qem_status qem_pack_open_descriptor(const char *path, int fd, const struct stat *sb,
                                    qem_pack **out, qem_error *error)
{
    *out = NULL;
    qem_pack *p = calloc(1, sizeof *p);
    if (!p) {
        close(fd);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    pthread_mutex_init(&p->ready_lock, NULL);
    pthread_cond_init(&p->ready_cond, NULL);
    qem_pack_now(&p->opened_at);
    p->timings = (qem_pack_timings){sizeof(qem_pack_timings), -1, -1, -1, -1, -1, -1, -1, -1,
                                    -1, -1, -1, 0, 0};
    uint8_t *index = NULL;
    p->fd = fd;
    qem_status st = QEM_OK;
    if (!(p->path = strdup(path))) {
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        goto done;
    }
    qem_file_stamp_from_stat(sb, &p->stamp);
    p->file_size = (uint64_t)sb->st_size;
    uint64_t index_offset = 0, index_bytes = 0;
    st = read_prelude(p, &index_offset, &index_bytes, error);
    if (st != QEM_OK)
        goto done;
    index = malloc((size_t)(index_bytes ? index_bytes : 1));
    if (!index) {
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        goto done;
    }
    st = qem_pread_full(p->fd, index, (size_t)index_bytes, index_offset, QEM_E_PACK_PRELUDE, error);
    if (st == QEM_OK)
        st = parse_index(p, index, index_bytes, error);
    if (st == QEM_OK)
        st = check_records(p, error);
    if (st == QEM_OK)
        st = qem_pack_check_ranges(p, index_offset + index_bytes, NULL, 0, error);
    if (st == QEM_OK)
        st = check_manifest(p, error);
    if (st == QEM_OK)
        st = qem_pack_prepared_check(p, index_offset + index_bytes, error);
done:
    free(index);
    if (st != QEM_OK) {
        qem_pack_close(p);
        return st;
    }
    p->timings.metadata = qem_pack_elapsed_ms(&p->opened_at);
    *out = p;
    return QEM_OK;
}

void qem_pack_fill_info(const qem_pack *p, qem_pack_info *info)
{
    memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
    info->profile = p->profile;
    memcpy(info->shape, p->shape, sizeof info->shape);
    info->scans = p->scans;
    info->pixels = p->pixels;
    info->shard_count = p->shard_count;
    info->scans_per_shard = p->sps;
    info->working_dtype = p->working_dtype;
    info->excluded_count = p->excluded_count;
    info->raw_access = p->raw_access;
    info->file_bytes = p->file_size;
    for (uint64_t s = 0; s < p->shard_count; s++)
        info->resident_bytes += p->shards[s].decoded_bytes + p->shards[s].widths_bytes +
                                (p->profile == QEM_PACK_UINT16_LZ4 ? 4ull * p->pixels : 0);
    info->loaded = p->loaded;
    info->has_detector_calibration = p->has_calibration;
    info->has_prepared_dpc_moments = p->prepared.has_moments;
    info->has_prepared_detector_products = p->prepared.has_products;
    qem_sha256_hex(p->identity, info->source_identity_sha256);
    info->digests_checked = p->timings.decoded_digests_checked;
}

qem_status qem_pack_get_info(const qem_pack *p, qem_pack_info *out, qem_error *error)
{
    qem_error_clear(error);
    if (!p)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_pack_get_info: NULL pack");
    qem_pack_info info;
    qem_pack_fill_info(p, &info);
    return qem_result_deliver(out, &info, sizeof info, "qem_pack_info", error);
}

qem_status qem_pack_get_timings(const qem_pack *p, qem_pack_timings *out, qem_error *error)
{
    qem_error_clear(error);
    if (!p)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_pack_get_timings: NULL pack");
    return qem_result_deliver(out, &p->timings, sizeof p->timings, "qem_pack_timings", error);
}

qem_status qem_pack_get_excluded(const qem_pack *p, uint32_t *pixels, size_t size,
                                 qem_error *error)
{
    qem_error_clear(error);
    if (!p || (!pixels && p->excluded_count))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_pack_get_excluded: NULL argument");
    if (size / sizeof *pixels < p->excluded_count)
        return qem_fail(error, QEM_E_BUFFER_TOO_SMALL,
                        "qem_pack_get_excluded: %llu pixels need %llu bytes, %zu given",
                        (unsigned long long)p->excluded_count,
                        (unsigned long long)(p->excluded_count * sizeof *pixels), size);
    if (p->excluded_count)
        memcpy(pixels, p->excluded, (size_t)p->excluded_count * sizeof *pixels);
    return QEM_OK;
}

qem_status qem_pack_get_detector_calibration(const qem_pack *p, qem_detector_calibration *c,
                                             qem_error *error)
{
    qem_error_clear(error);
    if (!p)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "NULL pack");
    if (!p->has_calibration)
        return qem_fail(error, QEM_E_NOT_RECORDED, "'%s' records no detector calibration",
                        p->path);
    return qem_result_deliver(c, &p->calibration, sizeof p->calibration,
                              "qem_detector_calibration", error);
}

const char *qem_pack_manifest_json(const qem_pack *p, size_t *length)
{
    if (length)
        *length = (size_t)p->manifest_bytes;
    return p->manifest_text;
}
