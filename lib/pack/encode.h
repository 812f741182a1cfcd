/* Encoding shards and index of Lossless Pack Format v1 (both profiles).
 * Used by the producer, by tests that build files from the byte rules, and
 * by the benchmark. */
#ifndef QEM_PACK_ENCODE_H
#define QEM_PACK_ENCODE_H

#include <jansson.h>
#include <stdint.h>

#include "qem.h"

/* One encoded shard; arrays owned by the struct. */
typedef struct pack_encoded_shard {
    /* uint16/LZ4: u8 widths per (pixel, 128-scan tile), the decoded bit
     * stream, its 128-byte raw LZ4 blocks and their lengths minus one.
     * uint8/bitpacked: compact header words in `headers`, payload words. */
    uint8_t *widths;
    uint64_t width_count;
    uint32_t *decoded;
    uint64_t decoded_bytes;
    uint8_t *compressed;
    uint64_t compressed_bytes;
    uint8_t *lengths;
    uint64_t chunk_count;
    uint32_t *headers;
    uint64_t header_words;
    uint8_t decoded_sha256[32];
    unsigned maximum_width;
} pack_encoded_shard;

void qem_pack_encoded_shard_free(pack_encoded_shard *shard);

/* uint16/LZ4: `rows` holds sps scan rows of `pixels` values. Widths are the
 * bit length of each (pixel, tile) maximum; the final tile may be partial. */
qem_status qem_pack_encode_v1_shard(const uint16_t *rows, uint64_t sps, uint64_t pixels,
                                    pack_encoded_shard *out, qem_error *error);
/* The same on `threads` threads (0: all cores): the same bytes for any count. */
qem_status qem_pack_encode_v1_shard_threads(const uint16_t *rows, uint64_t sps, uint64_t pixels,
                                            int threads, pack_encoded_shard *out,
                                            qem_error *error);

/* uint8/bitpacked: non-excluded values must fit uint8 (else
 * QEM_E_VALUE_RANGE naming scan, pixel and value); excluded pixels get
 * zero widths. `first_scan` only labels errors. sps is a multiple of 32. */
qem_status qem_pack_encode_v3_shard(const uint16_t *rows, uint64_t sps, uint64_t pixels,
                                    const uint8_t *is_excluded, uint64_t first_scan,
                                    pack_encoded_shard *out, qem_error *error);
/* The same on `threads` threads (0: all cores): the same bytes and the same
 * first out-of-range sample for any count. */
qem_status qem_pack_encode_v3_shard_threads(const uint16_t *rows, uint64_t sps, uint64_t pixels,
                                            const uint8_t *is_excluded, uint64_t first_scan,
                                            int threads, pack_encoded_shard *out,
                                            qem_error *error);

/* Byte ranges of one shard inside the file (for the index and manifest). */
typedef struct pack_shard_record {
    uint64_t payload_offset, payload_bytes;
    uint64_t lengths_offset, lengths_bytes;
    uint64_t widths_offset, widths_bytes;
    uint64_t decoded_bytes;
    uint32_t descriptor_count, chunk_count;
    uint8_t decoded_sha256[32];
} pack_shard_record;

/* The binary index: magic, header, exclusions, identity, shard records. */
uint8_t *qem_pack_index_build(qem_pack_profile profile, const uint64_t shape[4], uint64_t sps,
                              const uint32_t *excluded, uint64_t excluded_count,
                              const uint8_t identity[32], const pack_shard_record *records,
                              uint64_t shard_count, uint64_t *size);

/* The 24-byte prelude followed by manifest and index, zero-filled to
 * `block_bytes`; fails when they do not fit. The index sits at the first
 * 8-byte boundary after the manifest. */
qem_status qem_pack_user_block(const char *manifest, uint64_t manifest_bytes, const uint8_t *index,
                               uint64_t index_bytes, uint64_t block_bytes, uint8_t **block,
                               qem_error *error);

/* What a manifest states; the builder checks nothing (callers do). */
typedef struct pack_manifest_facts {
    qem_pack_profile profile;
    uint64_t shape[4], sps, shard_count;
    const uint32_t *excluded; /* ascending */
    uint64_t excluded_count;
    /* uint16/LZ4: working dtype label and whether excluded samples are
     * retained in the payload (masked_detector_payload_policy). */
    qem_dtype working_dtype;
    int retained_policy;
    /* uint8/bitpacked: one raw constant per excluded pixel; NULL omits the
     * portability fields (a legacy, mask-applied-only file). */
    const uint16_t *raw_constants;
    uint8_t identity[32];
    uint8_t raw_logical_sha256[32];     /* every source sample, LE uint16 */
    uint8_t working_sha256[32];         /* uint8: prepared uint8 values; uint16: LE uint16 */
    uint8_t detector_mask_sha256[32];   /* the full LE u32 source mask */
    const pack_shard_record *records;
    const pack_encoded_shard *encoded;  /* uint16: stored-range digests, widths */
    const json_t *detector_calibration; /* optional, copied */
} pack_manifest_facts;

json_t *qem_pack_manifest_build(const pack_manifest_facts *facts);
/* A SHA-256 digest as the JSON string of its 64 lowercase hex digits. */
json_t *qem_pack_digest_json(const uint8_t digest[32]);

#endif
