/* Encoded chunks as self-contained byte strings (chunk_blob.h). */
#include <stdlib.h>
#include <string.h>

#include "common/byteorder.h"
#include "common/error.h"
#include "common/sha256.h"
#include "qem/chunk_blob.h"

#define BLOB_MAGIC "QEMCHNK1"
#define BLOB_VERSION 2u
#define BLOB_FIXED 144u

static uint64_t pad8(uint64_t n)
{
    return (n + 7) & ~7ull;
}

/* The arrays in blob order: sizes in bytes. */
typedef struct blob_arrays {
    uint64_t bytes[7];
} blob_arrays;

static int array_sizes(uint64_t payload, uint64_t streams, uint64_t words, uint64_t spatial,
                       uint64_t bits, int has_spatial, blob_arrays *a, uint64_t *total)
{
    /* Counts come from outside: every product and sum is checked. */
    const uint64_t limit = 1ull << 40;
    if (payload > limit || streams > limit || words > limit || spatial > limit || bits > limit)
        return 0;
    a->bytes[0] = payload;
    a->bytes[1] = 4 * (streams + 1);
    a->bytes[2] = streams;
    a->bytes[3] = 4 * words;
    a->bytes[4] = has_spatial ? 8 * (spatial + 1) : 0;
    a->bytes[5] = spatial;
    a->bytes[6] = bits;
    uint64_t t = BLOB_FIXED;
    for (int k = 0; k < 7; k++)
        t += pad8(a->bytes[k]);
    *total = t + QEM_SHA256_BYTES;
    return 1;
}

qem_status qem_chunk_blob_pack(const qem_chunk_blob_header *h, const qem_encoded_chunk *e,
                               const void *bits, uint64_t bits_bytes, void **out, size_t *size,
                               qem_error *error)
{
    *out = NULL;
    blob_arrays a;
    uint64_t total = 0;
    const int has_spatial = h->codec == QEM_CODEC_INTEGER;
    if (!array_sizes(e->payload_bytes, e->streams, e->spatial_word_count, e->spatial_streams,
                     bits_bytes, has_spatial, &a, &total) ||
        total > SIZE_MAX)
        return qem_fail(error, QEM_E_LIMIT, "an encoded chunk of this size cannot be sent");
    uint8_t *b = calloc(1, (size_t)total);
    if (!b)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for an encoded chunk");
    memcpy(b, BLOB_MAGIC, 8);
    qem_put_le32(b + 8, BLOB_VERSION);
    qem_put_le32(b + 12, (uint32_t)h->codec);
    qem_put_le32(b + 16, (uint32_t)h->dtype);
    for (int k = 0; k < 4; k++)
        qem_put_le64(b + 24 + 8 * k, h->shape[k]);
    qem_put_le64(b + 56, h->first_scan);
    qem_put_le64(b + 64, h->scans);
    memcpy(b + 72, h->valid_sha256, 32);
    qem_put_le64(b + 104, e->payload_bytes);
    qem_put_le64(b + 112, e->streams);
    qem_put_le64(b + 120, e->spatial_word_count);
    qem_put_le64(b + 128, e->spatial_streams);
    qem_put_le64(b + 136, bits_bytes);
    const void *src[7] = {e->payload,       e->offsets,        e->models, e->spatial_words,
                          e->spatial_offsets, e->spatial_widths, bits};
    uint64_t at = BLOB_FIXED;
    for (int k = 0; k < 7; k++) {
        if (a.bytes[k])
            memcpy(b + at, src[k], (size_t)a.bytes[k]);
        at += pad8(a.bytes[k]);
    }
    qem_sha256_oneshot(b, (size_t)at, b + at);
    *out = b;
    *size = (size_t)total;
    return QEM_OK;
}

#define BAD(...) qem_fail(error, QEM_E_LAYOUT, "encoded chunk: " __VA_ARGS__)

qem_status qem_chunk_blob_parse(const void *blob, size_t size, qem_chunk_blob_header *h,
                                qem_encoded_chunk *view, const void **bits,
                                uint64_t *bits_bytes, qem_error *error)
{
    const uint8_t *b = blob;
    memset(view, 0, sizeof *view);
    if (!b || size < BLOB_FIXED + QEM_SHA256_BYTES || memcmp(b, BLOB_MAGIC, 8) != 0)
        return BAD("not an encoded chunk (QEMCHNK1)");
    if ((uintptr_t)b % 8)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "encoded chunk: not 8-byte aligned");
    if (qem_get_le32(b + 8) != BLOB_VERSION)
        return BAD("version %u; this qem writes and reads version %u", qem_get_le32(b + 8),
                   BLOB_VERSION);
    h->codec = (qem_codec)qem_get_le32(b + 12);
    h->dtype = (qem_dtype)qem_get_le32(b + 16);
    if (h->codec != QEM_CODEC_INTEGER && h->codec != QEM_CODEC_FLOAT32 &&
        h->codec != QEM_CODEC_SCALED)
        return BAD("unknown codec %u", (unsigned)h->codec);
    const int ok_dtype = h->codec == QEM_CODEC_FLOAT32 ? h->dtype == QEM_DTYPE_FLOAT32
                         : h->codec == QEM_CODEC_SCALED
                             ? h->dtype == QEM_DTYPE_UINT16
                             : h->dtype == QEM_DTYPE_UINT8 || h->dtype == QEM_DTYPE_UINT16;
    if (!ok_dtype || qem_get_le32(b + 20) != 0)
        return BAD("dtype %u does not belong to its codec", (unsigned)h->dtype);
    for (int k = 0; k < 4; k++) {
        h->shape[k] = qem_get_le64(b + 24 + 8 * k);
        if (h->shape[k] == 0 || h->shape[k] >= (1ull << 24))
            return BAD("axis %d is %llu", k, (unsigned long long)h->shape[k]);
    }
    h->first_scan = qem_get_le64(b + 56);
    h->scans = qem_get_le64(b + 64);
    const uint64_t scans = h->shape[0] * h->shape[1], pixels = h->shape[2] * h->shape[3];
    if (h->scans == 0 || h->first_scan >= scans || h->scans > scans - h->first_scan)
        return BAD("scans [%llu, +%llu) outside the %llu of the shape",
                   (unsigned long long)h->first_scan, (unsigned long long)h->scans,
                   (unsigned long long)scans);
    memcpy(h->valid_sha256, b + 72, 32);
    const uint64_t payload = qem_get_le64(b + 104), streams = qem_get_le64(b + 112), words = qem_get_le64(b + 120),
                   spatial = qem_get_le64(b + 128), nbits = qem_get_le64(b + 136);
    const int has_spatial = h->codec == QEM_CODEC_INTEGER;
    const uint64_t blocks = (h->scans + 511) / 512;
    const uint64_t lanes = h->codec == QEM_CODEC_FLOAT32 ? 2 * pixels : pixels;
    qem_geometry g;
    qem_geometry_init(&g, h->shape[2], h->shape[3]);
    if (streams != blocks * lanes)
        return BAD("%llu streams; %llu scans of %llu lanes have %llu",
                   (unsigned long long)streams, (unsigned long long)h->scans,
                   (unsigned long long)lanes, (unsigned long long)(blocks * lanes));
    if (spatial != (has_spatial ? blocks * g.fields : 0) || (!has_spatial && words))
        return BAD("%llu spatial streams where the codec has %llu", (unsigned long long)spatial,
                   (unsigned long long)(has_spatial ? blocks * g.fields : 0));
    const uint64_t want_bits = h->codec == QEM_CODEC_FLOAT32   ? h->scans * pixels * 4
                               : h->codec == QEM_CODEC_INTEGER ? pixels * 8
                                                               : 0;
    if (nbits != want_bits)
        return BAD("%llu bytes of source bits or pixel sums where %llu belong",
                   (unsigned long long)nbits, (unsigned long long)want_bits);
    blob_arrays a;
    uint64_t total = 0;
    if (!array_sizes(payload, streams, words, spatial, nbits, has_spatial, &a, &total) ||
        total != size)
        return BAD("%zu bytes; its counts say %llu", size, (unsigned long long)total);
    uint8_t digest[QEM_SHA256_BYTES];
    qem_sha256_oneshot(b, size - QEM_SHA256_BYTES, digest);
    if (memcmp(digest, b + size - QEM_SHA256_BYTES, QEM_SHA256_BYTES) != 0)
        return qem_fail(error, QEM_E_BODY_CHECKSUM,
                        "encoded chunk of scans [%llu, +%llu): SHA-256 mismatch (damaged on "
                        "the way)",
                        (unsigned long long)h->first_scan, (unsigned long long)h->scans);
    const uint8_t *p[7];
    uint64_t at = BLOB_FIXED;
    for (int k = 0; k < 7; k++) {
        p[k] = b + at;
        at += pad8(a.bytes[k]);
    }
    /* Offsets: from 0, never decreasing, ending at the array they index. */
    uint64_t prev = 0;
    for (uint64_t s = 0; s <= streams; s++) {
        const uint32_t o = qem_get_le32(p[1] + 4 * s);
        if ((s == 0 && o != 0) || o < prev || (s == streams && o != payload))
            return BAD("stream offset %llu is out of order", (unsigned long long)s);
        prev = o;
    }
    prev = 0;
    for (uint64_t s = 0; has_spatial && s <= spatial; s++) {
        const uint64_t o = qem_get_le64(p[4] + 8 * s);
        if ((s == 0 && o != 0) || o < prev || (s == spatial && o != words))
            return BAD("spatial offset %llu is out of order", (unsigned long long)s);
        prev = o;
    }
    for (uint64_t s = 0; s < spatial; s++)
        if (p[5][s] > 32)
            return BAD("spatial width %u exceeds 32 bits", p[5][s]);
    view->payload = (uint8_t *)p[0];
    view->payload_bytes = payload;
    view->offsets = (uint32_t *)(const void *)p[1];
    view->models = (uint8_t *)p[2];
    view->streams = streams;
    view->spatial_words = (uint32_t *)(const void *)p[3];
    view->spatial_word_count = words;
    view->spatial_offsets = has_spatial ? (uint64_t *)(const void *)p[4] : NULL;
    view->spatial_widths = (uint8_t *)p[5];
    view->spatial_streams = spatial;
    *bits = nbits ? p[6] : NULL;
    *bits_bytes = nbits;
    return QEM_OK;
}
