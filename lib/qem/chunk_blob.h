/* One encoded chunk as a self-contained byte string, for saves whose
 * chunks are encoded elsewhere (Dask workers) and written by one writer:
 * qem_encode_scans makes it, qem_writer_append_encoded takes it. Layout
 * (little-endian; arrays in host order, as the body stores them, each
 * starting 8-byte aligned):
 *
 *   0  "QEMCHNK1"
 *   8  u32 version (2), u32 codec, u32 dtype, u32 zero
 *  24  u64 shape[4]; u64 first_scan; u64 scans
 *  72  SHA-256 of the validity mask the chunk was encoded with (pixels
 *      bytes, 0/1)
 * 104  u64 payload_bytes, streams, spatial_word_count, spatial_streams,
 *      bits_bytes
 * 144  payload, offsets (streams + 1 u32), models (streams), spatial words
 *      (u32), spatial offsets (spatial_streams + 1 u64, integer codec),
 *      spatial widths (spatial_streams), then the float codec's source
 *      bits (for logical_sha256) or the integer codec's sum of each valid
 *      pixel over the chunk (u64 per pixel, for the header's pixel-sum
 *      record; version 1 had none), each padded to 8 bytes
 * end  SHA-256 of every byte before it
 *
 * Parsing checks all of it before the writer trusts one count. */
#ifndef QEM_QEM_CHUNK_BLOB_H
#define QEM_QEM_CHUNK_BLOB_H

#include "qem/encode.h"

typedef struct qem_chunk_blob_header {
    qem_codec codec;
    qem_dtype dtype;
    uint64_t shape[4];
    uint64_t first_scan, scans;
    uint8_t valid_sha256[32];
} qem_chunk_blob_header;

/* The blob of `e` (and, for the float codec, the chunk's source bits). */
qem_status qem_chunk_blob_pack(const qem_chunk_blob_header *h, const qem_encoded_chunk *e,
                               const void *bits, uint64_t bits_bytes, void **out, size_t *size,
                               qem_error *error);

/* Checks a blob and gives views into it (nothing is copied; `blob` must be
 * 8-byte aligned and outlive the views). QEM_E_LAYOUT for anything that is
 * not a well-formed chunk, QEM_E_BODY_CHECKSUM for a digest mismatch. */
qem_status qem_chunk_blob_parse(const void *blob, size_t size, qem_chunk_blob_header *h,
                                qem_encoded_chunk *view, const void **bits,
                                uint64_t *bits_bytes, qem_error *error);

#endif
