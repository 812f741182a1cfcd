#include "pack/encode.h"

#include <libdeflate.h>
#include <lz4.h>
#include <stdlib.h>
#include <string.h>

#include "common/bitpack.h"
#include "common/error.h"
#include "common/byteorder.h"
#include "common/sha256.h"
#include "common/threads.h"
#include "pack/pack_internal.h"

void qem_pack_encoded_shard_free(pack_encoded_shard *s)
{
    free(s->widths);
    free(s->decoded);
    free(s->compressed);
    free(s->lengths);
    free(s->headers);
    memset(s, 0, sizeof *s);
}

/* Packs `count` values LSB-first at word `word` (the words are zeroed). */
static void pack_tile(uint32_t *words, uint64_t word, unsigned width, const uint32_t *values,
                      unsigned count)
{
    for (unsigned k = 0, bit = 0; k < count; k++, bit += width) {
        const unsigned i = bit >> 5, shift = bit & 31;
        words[word + i] |= values[k] << shift;
        if (shift + width > 32)
            words[word + i + 1] |= values[k] >> (32 - shift);
    }
}

/* Rows are scan-major (one detector frame after another) while the
 * payload is pixel-major, so both passes walk the rows in order: maxima
 * per tile across a whole row, then packing in blocks of PIXEL_BLOCK
 * pixels transposed through a small buffer, never striding a frame apart
 * per sample. */
#define PIXEL_BLOCK 64u

/* max[p] = the largest of rows[first..first+count) at pixel p. */
static void tile_maxima(const uint16_t *rows, uint64_t pixels, uint64_t first, uint64_t count,
                        uint16_t *max)
{
    memset(max, 0, (size_t)pixels * sizeof *max);
    for (uint64_t s = first; s < first + count; s++) {
        const uint16_t *row = rows + s * pixels;
        for (uint64_t p = 0; p < pixels; p++)
            max[p] = row[p] > max[p] ? row[p] : max[p];
    }
}

/* Packs every (pixel, tile) of the shard: pixel p's tiles follow each other
 * from word base[p]; tile t of pixel p takes width[p * tiles + t] bits a
 * value and step(width) words. */
static void pack_all(const uint16_t *rows, uint64_t sps, uint64_t pixels, uint64_t tile_len,
                     const uint8_t *widths, const uint64_t *base, uint64_t words_per_bit,
                     int threads, uint32_t *out)
{
    const uint64_t tiles = (sps + tile_len - 1) / tile_len;
    const uint64_t blocks = (pixels + PIXEL_BLOCK - 1) / PIXEL_BLOCK;
    /* Each pixel's tiles own their words alone: blocks of pixels are packed
     * on any thread into the same bytes. */
#pragma omp parallel for schedule(dynamic, 4) num_threads(threads)
    for (uint64_t b = 0; b < blocks; b++) {
        uint32_t buf[PIXEL_BLOCK * PACK_V1_TILE];
        uint64_t cursor[PIXEL_BLOCK];
        const uint64_t p0 = b * PIXEL_BLOCK;
        const uint64_t nb = pixels - p0 < PIXEL_BLOCK ? pixels - p0 : PIXEL_BLOCK;
        for (uint64_t j = 0; j < nb; j++)
            cursor[j] = base[p0 + j];
        for (uint64_t t = 0; t < tiles; t++) {
            const uint64_t first = t * tile_len;
            const uint64_t n = sps - first < tile_len ? sps - first : tile_len;
            for (uint64_t k = 0; k < n; k++) {
                const uint16_t *row = rows + (first + k) * pixels + p0;
                for (uint64_t j = 0; j < nb; j++)
                    buf[j * tile_len + k] = row[j];
            }
            for (uint64_t j = 0; j < nb; j++) {
                const unsigned w = widths[(p0 + j) * tiles + t];
                if (w)
                    pack_tile(out, cursor[j], w, buf + j * tile_len, (unsigned)n);
                cursor[j] += words_per_bit * w;
            }
        }
    }
}

/* Every tile's width, tiles on any thread (each thread its own maxima):
 * widths[p * tiles + t] = bit length of the tile's maximum at p (0 for an
 * excluded pixel); over[t] (when given) marks a tile where an admitted
 * pixel passes 255. *widest: the largest width. Fails only for memory. */
static int tile_widths(const uint16_t *rows, uint64_t sps, uint64_t pixels, uint64_t tile_len,
                       const uint8_t *is_excluded, int threads, uint8_t *widths, uint8_t *over,
                       unsigned *widest_out)
{
    const uint64_t tiles = (sps + tile_len - 1) / tile_len;
    unsigned widest = 0;
    int failed = 0;
#pragma omp parallel num_threads(threads) reduction(max : widest) reduction(| : failed)
    {
        uint16_t *max = malloc((size_t)pixels * sizeof *max);
        failed |= !max;
#pragma omp for schedule(dynamic, 1)
        for (uint64_t t = 0; t < tiles; t++) {
            if (!max)
                continue;
            const uint64_t first = t * tile_len;
            tile_maxima(rows, pixels, first, sps - first < tile_len ? sps - first : tile_len, max);
            int passes = 0;
            for (uint64_t p = 0; p < pixels; p++) {
                const unsigned v = is_excluded && is_excluded[p] ? 0 : max[p];
                passes |= v > 255;
                const unsigned w = qem_bit_length(v);
                widths[p * tiles + t] = (uint8_t)w;
                widest = w > widest ? w : widest;
            }
            if (over)
                over[t] = (uint8_t)passes;
        }
        free(max);
    }
    *widest_out = widest;
    return !failed;
}

/* Independent 128-byte raw LZ4 blocks of `decoded`, one length byte each
 * (length - 1): compressed on any thread into fixed 144-byte slots, then
 * moved down into order (never past its slot's start: the moves run
 * forwards). The decoded stream's SHA-256 runs beside them. */
static qem_status compress_blocks(pack_encoded_shard *out, int threads, qem_error *error)
{
    const int bound = LZ4_compressBound(PACK_CHUNK_BYTES);
    int failed = 0;
#pragma omp parallel num_threads(threads) reduction(| : failed)
    {
#pragma omp single nowait
        qem_sha256_oneshot(out->decoded, (size_t)out->decoded_bytes, out->decoded_sha256);
#pragma omp for schedule(dynamic, 4096)
        for (uint64_t c = 0; c < out->chunk_count; c++) {
            const uint64_t start = c * PACK_CHUNK_BYTES, left = out->decoded_bytes - start;
            const int n = (int)(left < PACK_CHUNK_BYTES ? left : PACK_CHUNK_BYTES);
            const int got = LZ4_compress_default((const char *)out->decoded + start,
                                                 (char *)out->compressed + c * (uint64_t)bound, n,
                                                 bound);
            failed |= got <= 0 || got > 256;
            out->lengths[c] = (uint8_t)(got - 1);
        }
    }
    if (failed)
        return qem_fail(error, QEM_E_IO, "LZ4 compression of a 128-byte block failed");
    out->compressed_bytes = 0;
    for (uint64_t c = 0; c < out->chunk_count; c++) {
        const uint64_t got = (uint64_t)out->lengths[c] + 1;
        memmove(out->compressed + out->compressed_bytes, out->compressed + c * (uint64_t)bound,
                (size_t)got);
        out->compressed_bytes += got;
    }
    return QEM_OK;
}

qem_status qem_pack_encode_v1_shard(const uint16_t *rows, uint64_t sps, uint64_t pixels,
                                    pack_encoded_shard *out, qem_error *error)
{
    return qem_pack_encode_v1_shard_threads(rows, sps, pixels, 1, out, error);
}

qem_status qem_pack_encode_v1_shard_threads(const uint16_t *rows, uint64_t sps, uint64_t pixels,
                                            int threads, pack_encoded_shard *out,
                                            qem_error *error)
{
    memset(out, 0, sizeof *out);
    threads = qem_threads_resolve(threads);
    const uint64_t tiles = (sps + PACK_V1_TILE - 1) / PACK_V1_TILE;
    out->width_count = pixels * tiles;
    out->widths = malloc((size_t)out->width_count);
    uint64_t *base = malloc((size_t)pixels * sizeof *base);
    if (!out->widths || !base ||
        !tile_widths(rows, sps, pixels, PACK_V1_TILE, NULL, threads, out->widths, NULL,
                     &out->maximum_width)) {
        free(base);
        qem_pack_encoded_shard_free(out);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    uint64_t words = 0;
    for (uint64_t k = 0; k < out->width_count; k++)
        words += 4ull * out->widths[k];
    if (words >= PACK_MAX_WORDS) {
        free(base);
        qem_pack_encoded_shard_free(out);
        return qem_fail(error, QEM_E_LIMIT,
                        "a shard would decode to more words than 27-bit descriptors address; "
                        "use fewer scans per shard");
    }
    if (words == 0) {
        /* An all-zero shard still needs a positive decoded size: store its
         * first tile at width 1 (readers accept non-minimal widths). */
        out->widths[0] = 1;
        out->maximum_width = 1;
        words = 4;
    }
    for (uint64_t p = 0, at = 0; p < pixels; p++) {
        base[p] = at;
        for (uint64_t t = 0; t < tiles; t++)
            at += 4ull * out->widths[p * tiles + t];
    }
    out->decoded_bytes = 4 * words;
    out->decoded = calloc((size_t)(out->decoded_bytes / 4), 4);
    if (!out->decoded) {
        free(base);
        qem_pack_encoded_shard_free(out);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    pack_all(rows, sps, pixels, PACK_V1_TILE, out->widths, base, 4, threads, out->decoded);
    free(base);
    out->chunk_count = (out->decoded_bytes + PACK_CHUNK_BYTES - 1) / PACK_CHUNK_BYTES;
    out->lengths = malloc((size_t)out->chunk_count);
    out->compressed =
        malloc((size_t)(out->chunk_count * (uint64_t)LZ4_compressBound(PACK_CHUNK_BYTES)));
    if (!out->lengths || !out->compressed) {
        qem_pack_encoded_shard_free(out);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    const qem_status st = compress_blocks(out, threads, error);
    if (st != QEM_OK)
        qem_pack_encoded_shard_free(out);
    return st;
}

/* The first admitted sample above 255 in scans [first, first + count), in
 * scan order then pixel order. */
static qem_status out_of_range(const uint16_t *rows, uint64_t pixels, const uint8_t *is_excluded,
                               uint64_t first, uint64_t count, uint64_t first_scan,
                               qem_error *error)
{
    for (uint64_t s = first; s < first + count; s++)
        for (uint64_t p = 0; p < pixels; p++)
            if (!is_excluded[p] && rows[s * pixels + p] > 255)
                return qem_fail(error, QEM_E_VALUE_RANGE,
                                "scan %llu, detector pixel %llu holds %u, which the uint8 "
                                "profile cannot store exactly; use the uint16/LZ4 profile",
                                (unsigned long long)(first_scan + s), (unsigned long long)p,
                                rows[s * pixels + p]);
    return QEM_OK;
}

qem_status qem_pack_encode_v3_shard(const uint16_t *rows, uint64_t sps, uint64_t pixels,
                                    const uint8_t *is_excluded, uint64_t first_scan,
                                    pack_encoded_shard *out, qem_error *error)
{
    return qem_pack_encode_v3_shard_threads(rows, sps, pixels, is_excluded, first_scan, 1, out,
                                            error);
}

qem_status qem_pack_encode_v3_shard_threads(const uint16_t *rows, uint64_t sps, uint64_t pixels,
                                            const uint8_t *is_excluded, uint64_t first_scan,
                                            int threads, pack_encoded_shard *out,
                                            qem_error *error)
{
    memset(out, 0, sizeof *out);
    threads = qem_threads_resolve(threads);
    if (sps % PACK_V3_TILE != 0)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "uint8/bitpacked shards hold whole 32-scan tiles");
    const uint64_t T = sps / PACK_V3_TILE, C = (T + 31) / 32, W = (T + 7) / 8, H = C + W;
    out->header_words = pixels * H;
    out->headers = calloc((size_t)out->header_words, 4);
    uint8_t *widths = malloc((size_t)(pixels * T)), *over = malloc((size_t)T);
    uint64_t *base = malloc((size_t)pixels * sizeof *base);
    qem_status st = out->headers && widths && over && base &&
                            tile_widths(rows, sps, pixels, PACK_V3_TILE, is_excluded, threads,
                                        widths, over, &out->maximum_width)
                        ? QEM_OK
                        : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    /* The first tile with a value past 255 names its first such sample in
     * scan order then pixel order, whatever thread found it. */
    for (uint64_t t = 0; st == QEM_OK && t < T; t++)
        if (over[t])
            st = out_of_range(rows, pixels, is_excluded, t * PACK_V3_TILE, PACK_V3_TILE,
                              first_scan, error);
    free(over);
    /* Compact headers: base word, a checkpoint every 32 tiles, nibble widths. */
    uint64_t words = 0;
    for (uint64_t p = 0; st == QEM_OK && p < pixels; p++) {
        uint32_t *h = out->headers + p * H;
        h[0] = (uint32_t)words;
        uint64_t total = 0;
        for (uint64_t t = 0; t < T; t++) {
            if (t > 0 && t % 32 == 0)
                h[t / 32] = (uint32_t)total;
            const unsigned w = widths[p * T + t];
            h[C + t / 8] |= (uint32_t)w << (4 * (t % 8));
            total += w;
        }
        words += total;
    }
    if (st == QEM_OK && words == 0) {
        /* An all-zero shard needs a nonempty payload: give the first
         * admitted pixel's first tile width 1 (non-minimal widths are
         * valid; excluded pixels must keep zero). */
        uint64_t p = 0;
        while (p < pixels && is_excluded[p])
            p++;
        if (p == pixels) {
            st = qem_fail(error, QEM_E_INVALID_ARGUMENT,
                          "every detector pixel is excluded; the uint8 profile cannot store "
                          "an empty payload");
        } else {
            widths[p * T] = 1;
            out->headers[p * H + C] |= 1u;
            for (uint64_t k = 1; k < C; k++)
                out->headers[p * H + k] += 1; /* checkpoints count that word too */
            out->maximum_width = 1;
            for (uint64_t q = p + 1; q < pixels; q++)
                out->headers[q * H] += 1; /* later bases move by one word */
            words = 1;
        }
    }
    if (st == QEM_OK && words >= PACK_MAX_WORDS)
        st = qem_fail(error, QEM_E_LIMIT,
                      "a shard payload is too large; use fewer scans per shard");
    if (st == QEM_OK) {
        out->decoded_bytes = 4 * words;
        out->decoded = calloc((size_t)words, 4);
        if (!out->decoded)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    if (st == QEM_OK) {
        for (uint64_t p = 0; p < pixels; p++)
            base[p] = out->headers[p * H];
        pack_all(rows, sps, pixels, PACK_V3_TILE, widths, base, 1, threads, out->decoded);
        qem_sha256_oneshot(out->decoded, (size_t)out->decoded_bytes, out->decoded_sha256);
    }
    free(widths);
    free(base);
    if (st != QEM_OK)
        qem_pack_encoded_shard_free(out);
    return st;
}

uint8_t *qem_pack_index_build(qem_pack_profile profile, const uint64_t shape[4], uint64_t sps,
                              const uint32_t *excluded, uint64_t excluded_count,
                              const uint8_t identity[32], const pack_shard_record *records,
                              uint64_t shard_count, uint64_t *size)
{
    const uint64_t head = profile == QEM_PACK_UINT16_LZ4 ? 36 : 44;
    const uint64_t n = head + 4 + 4 * excluded_count + 32 + PACK_RECORD_BYTES * shard_count;
    uint8_t *ix = calloc((size_t)n, 1);
    if (!ix)
        return NULL;
    memcpy(ix, profile == QEM_PACK_UINT16_LZ4 ? PACK_INDEX_MAGIC_V1 : PACK_INDEX_MAGIC_V3, 8);
    qem_put_le32(ix + 8, (uint32_t)shard_count);
    qem_put_le32(ix + 12, profile == QEM_PACK_UINT16_LZ4 ? PACK_CHUNK_BYTES : 0);
    for (int i = 0; i < 4; i++)
        qem_put_le32(ix + 16 + 4 * i, (uint32_t)shape[i]);
    qem_put_le32(ix + 32, (uint32_t)sps);
    if (profile == QEM_PACK_UINT8_BITPACKED) {
        qem_put_le32(ix + 36, PACK_V3_TILE);
        qem_put_le32(ix + 40, 1);
    }
    uint8_t *cur = ix + head;
    qem_put_le32(cur, (uint32_t)excluded_count);
    cur += 4;
    for (uint64_t i = 0; i < excluded_count; i++, cur += 4)
        qem_put_le32(cur, excluded[i]);
    memcpy(cur, identity, 32);
    cur += 32;
    for (uint64_t s = 0; s < shard_count; s++, cur += PACK_RECORD_BYTES) {
        const pack_shard_record *r = &records[s];
        qem_put_le64(cur, r->payload_offset);
        qem_put_le64(cur + 8, r->payload_bytes);
        qem_put_le64(cur + 16, r->lengths_offset);
        qem_put_le64(cur + 24, r->lengths_bytes);
        qem_put_le64(cur + 32, r->widths_offset);
        qem_put_le64(cur + 40, r->widths_bytes);
        qem_put_le64(cur + 48, r->decoded_bytes);
        qem_put_le32(cur + 56, r->descriptor_count);
        qem_put_le32(cur + 60, r->chunk_count);
        memcpy(cur + 64, r->decoded_sha256, 32);
    }
    *size = n;
    return ix;
}

qem_status qem_pack_user_block(const char *manifest, uint64_t manifest_bytes, const uint8_t *index,
                               uint64_t index_bytes, uint64_t block_bytes, uint8_t **block,
                               qem_error *error)
{
    const uint64_t index_at = (PACK_PRELUDE_BYTES + manifest_bytes + 7) & ~7ull;
    if (index_at + index_bytes > block_bytes || index_at > UINT32_MAX)
        return qem_fail(error, QEM_E_LIMIT,
                        "the manifest and index (%llu bytes) do not fit the %llu-byte user block",
                        (unsigned long long)(index_at + index_bytes),
                        (unsigned long long)block_bytes);
    uint8_t *b = calloc((size_t)block_bytes, 1);
    if (!b)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    memcpy(b, PACK_MAGIC, 8);
    qem_put_le32(b + 8, (uint32_t)manifest_bytes);
    qem_put_le32(b + 12, (uint32_t)libdeflate_crc32(0, manifest, (size_t)manifest_bytes));
    qem_put_le32(b + 16, (uint32_t)index_at);
    qem_put_le32(b + 20, (uint32_t)index_bytes);
    memcpy(b + PACK_PRELUDE_BYTES, manifest, (size_t)manifest_bytes);
    memcpy(b + index_at, index, (size_t)index_bytes);
    *block = b;
    return QEM_OK;
}
