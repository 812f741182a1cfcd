/* The bit-packed copy of a .qem file's counts (packed_copy.h). */
#include "qem/packed_copy.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "common/bitpack.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/large_alloc.h"
#include "common/threads.h"
#include "qem/qem_internal.h"
#include "rans/rans.h"

#define PIXEL_GROUP 64u

/* A nibble's width: 15 stands for 16, so one nibble holds every width. */
static inline unsigned nibble_width(unsigned nibble)
{
    return nibble + (nibble == 15);
}

static inline unsigned tile_width(const uint8_t *w, unsigned t)
{
    return nibble_width((w[t / 2] >> (4 * (t % 2))) & 15u);
}

static inline const uint8_t *pixel_meta(const qem_packed_part *part, uint64_t px)
{
    return part->meta + px * QEM_PACKED_META;
}

/* Where the pixel described by `m` starts, and its width bytes. */
static inline uint32_t meta_word(const uint8_t *m)
{
    uint32_t w;
    memcpy(&w, m, sizeof w);
    return w;
}

static inline const uint8_t *meta_widths(const uint8_t *m)
{
    return m + 4;
}

/* Words of a pixel's tiles before tile t (t <= 15) of its eight width bytes. */
static inline uint32_t words_before(const uint8_t *w, unsigned t)
{
    uint64_t x;
    memcpy(&x, w, sizeof x);
    x &= t ? (1ull << (4 * t)) - 1u : 0;
    const uint64_t lo = 0x0F0F0F0F0F0F0F0Full;
    const uint64_t bytes = (x & lo) + ((x >> 4) & lo);
    const uint64_t fifteen = x & (x >> 1) & (x >> 2) & (x >> 3) & 0x1111111111111111ull;
    return (uint32_t)((bytes * 0x0101010101010101ull) >> 56) +
           (uint32_t)__builtin_popcountll(fifteen);
}

/* 32 values of width 1..16 into `width` words: four values at a time
 * gathered into 4W contiguous bits (what BMI2's pext does, in a few
 * shifts), then appended through a 64-bit accumulator. Stores whole
 * 64-bit words, so an odd width writes 4 zero bytes past the tile. */
static inline void pack_tile(const uint16_t *values, unsigned width, uint32_t *words)
{
    const unsigned n = 4 * width;
    uint8_t *out = (uint8_t *)words;
    uint64_t acc = 0;
    unsigned bits = 0;
    for (unsigned i = 0; i < QEM_PACKED_TILE; i += 4) {
        /* Each value is below 2^width: no masks. */
        const uint64_t c = (uint64_t)values[i] | ((uint64_t)values[i + 1] << width) |
                           ((uint64_t)values[i + 2] << (2 * width)) |
                           ((uint64_t)values[i + 3] << (3 * width));
        acc |= c << bits;
        bits += n;
        if (bits >= 64) {
            memcpy(out, &acc, sizeof acc);
            out += sizeof acc;
            bits -= 64;
            acc = bits ? c >> (n - bits) : 0;
        }
    }
    if (bits)
        memcpy(out, &acc, sizeof acc);
}

void qem_packed_copy_free(qem_packed_copy *c)
{
    if (!c)
        return;
    for (uint64_t k = 0; c->parts && k < c->part_count; k++) {
        free(c->parts[k].meta); /* the words too */
    }
    free(c->parts);
    free(c->chunk_part);
    free(c);
}

const qem_packed_copy *qem_packed_copy_of(const qem_file *f)
{
    return atomic_load_explicit(&((qem_file *)f)->packed, memory_order_acquire);
}

qem_status qem_packed_copy_check(const qem_file *f, qem_error *error)
{
    if (f->resident && !f->resident_map)
        return QEM_OK;
    return qem_file_stamp_check(f->fd, &f->stamp, f->path, "read", error);
}

/* One 512-scan block of a loaded chunk into `part`, packed through
 * `scratch` (room for every pixel at width 16). */
static qem_status build_part(const qem_file *f, const qem_chunk_view *v, uint64_t ci,
                             uint64_t block, qem_packed_part *part, uint16_t *columns,
                             uint8_t *meta, uint32_t *scratch, uint64_t *bytes, qem_error *error)
{
    const qem_chunk *c = v->chunk;
    const uint64_t P = f->pixels;
    const uint32_t n = qem_block_samples(c, block);
    const unsigned tiles = (n + QEM_PACKED_TILE - 1) / QEM_PACKED_TILE;
    part->first = c->first + block * QEM_INTERVAL;
    part->scans = n;
    memset(meta, 0, (size_t)P * QEM_PACKED_META);
    uint64_t used = 0;
    for (uint64_t p0 = 0; p0 < P; p0 += PIXEL_GROUP) {
        const uint64_t m = P - p0 < PIXEL_GROUP ? P - p0 : PIXEL_GROUP;
        uint64_t failed = 0;
        const qem_status st = qem_chunk_decode_lanes(f, v, block, p0, m, columns, &failed);
        if (st != QEM_OK)
            return qem_fail(error, st,
                            "QEM count stream of detector pixel %llu (chunk %llu, block %llu) "
                            "does not decode; the file is damaged.",
                            (unsigned long long)failed, (unsigned long long)ci,
                            (unsigned long long)block);
        for (uint64_t j = 0; j < m; j++) {
            const uint16_t *col = columns + j * n;
            uint8_t *desc = meta + (p0 + j) * QEM_PACKED_META, *w = desc + 4;
            const uint32_t start = (uint32_t)used;
            memcpy(desc, &start, sizeof start);
            for (unsigned t = 0; t < tiles; t++) {
                const uint32_t at = t * QEM_PACKED_TILE;
                const uint16_t *values = col + at;
                uint16_t padded[QEM_PACKED_TILE];
                if (n - at < QEM_PACKED_TILE) {
                    /* A block's last tile, zero-padded to 32. */
                    memset(padded, 0, sizeof padded);
                    memcpy(padded, values, (n - at) * sizeof *padded);
                    values = padded;
                }
                unsigned top = 0;
                for (unsigned k = 0; k < QEM_PACKED_TILE; k++)
                    top |= values[k];
                const unsigned length = qem_bit_length(top);
                const unsigned nibble = length < 15 ? length : 15;
                w[t / 2] |= (uint8_t)(nibble << (4 * (t % 2)));
                const unsigned width = nibble_width(nibble);
                if (width) {
                    pack_tile(values, width, scratch + used);
                    used += width;
                }
            }
        }
    }
    if (used > UINT32_MAX - 2)
        return qem_fail(error, QEM_E_LIMIT, "a block of the packed copy passes 2^32 words");
    /* The description, then the words on a 64-byte line, two zero words
     * after them: the unpackers read a tile's last value as a 64-bit load. */
    const uint64_t meta_bytes = (P * QEM_PACKED_META + 63) / 64 * 64;
    part->meta = qem_large_alloc((size_t)(meta_bytes + (used + 2) * 4));
    if (!part->meta)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for the packed copy");
    memcpy(part->meta, meta, (size_t)P * QEM_PACKED_META);
    part->words = (uint32_t *)(void *)(part->meta + meta_bytes);
    memcpy(part->words, scratch, (size_t)used * sizeof *part->words);
    part->words[used] = part->words[used + 1] = 0;
    *bytes = meta_bytes + (used + 2) * 4 + sizeof *part;
    return QEM_OK;
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

qem_status qem_packed_copy_build(qem_file *f, uint64_t limit, int threads,
                                 qem_progress_fn progress, void *progress_user, qem_error *error)
{
    if (f->codec == QEM_CODEC_FLOAT32)
        return qem_fail(error, QEM_E_WRONG_CODEC,
                        "float32 files have no packed copy: their values are not counts");
    if (qem_packed_copy_of(f))
        return QEM_OK;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    qem_packed_copy *c = calloc(1, sizeof *c);
    if (!c)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for the packed copy");
    c->pixels = f->pixels;
    c->scans = f->scans;
    c->chunk_part = malloc((size_t)(f->chunk_count + 1) * sizeof *c->chunk_part);
    if (!c->chunk_part) {
        qem_packed_copy_free(c);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for the packed copy");
    }
    for (uint64_t ci = 0; ci < f->chunk_count; ci++) {
        c->chunk_part[ci] = c->part_count;
        c->part_count += f->chunks[ci].blocks;
    }
    c->chunk_part[f->chunk_count] = c->part_count;
    c->parts = calloc((size_t)(c->part_count ? c->part_count : 1), sizeof *c->parts);
    if (!c->parts) {
        qem_packed_copy_free(c);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for the packed copy");
    }
    atomic_ullong held = sizeof *c + c->part_count * sizeof *c->parts;
    atomic_ullong done = 0;
    atomic_int stop = 0;
    uint64_t failed_at = UINT64_MAX;
    qem_error first_error = {0};
    qem_status st = QEM_OK;
    threads = qem_threads_resolve(threads > 0 ? threads : f->threads);
#pragma omp parallel num_threads(threads)
    {
        uint16_t *columns = malloc((size_t)PIXEL_GROUP * QEM_INTERVAL * sizeof *columns);
        uint8_t *meta = malloc((size_t)f->pixels * QEM_PACKED_META);
        /* Room for every pixel at width 16, and the 4 bytes an odd width
         * writes past its last tile. */
        uint32_t *scratch =
            malloc(((size_t)f->pixels * QEM_PACKED_TILES * 16 + 2) * sizeof *scratch);
#pragma omp for schedule(dynamic, 1)
        for (uint64_t ci = 0; ci < f->chunk_count; ci++) {
            if (atomic_load(&stop))
                continue;
            qem_error e = {0};
            qem_status cst = columns && meta && scratch ? QEM_OK
                                                : qem_fail(&e, QEM_E_NO_MEMORY,
                                                           "out of memory for the packed copy");
            qem_chunk_view v;
            memset(&v, 0, sizeof v);
            if (cst == QEM_OK)
                cst = qem_chunk_load(f, ci, 0, &v, &e);
            for (uint64_t b = 0; cst == QEM_OK && b < f->chunks[ci].blocks; b++) {
                uint64_t bytes = 0;
                cst = build_part(f, &v, ci, b, &c->parts[c->chunk_part[ci] + b], columns, meta,
                                 scratch, &bytes, &e);
                const uint64_t now = atomic_fetch_add(&held, bytes) + bytes;
                if (cst == QEM_OK && limit && now > limit)
                    cst = qem_fail(&e, QEM_E_LIMIT,
                                   "the packed copy would hold more than %llu bytes",
                                   (unsigned long long)limit);
            }
            qem_chunk_view_free(&v);
            /* What is packed needs its body pages no more: the copy takes
             * their place in memory rather than adding to them. */
            if (cst == QEM_OK)
                qem_body_release(f, f->chunks[ci].arrays[0].offset,
                                 f->chunks[ci].arrays[2].offset + f->chunks[ci].arrays[2].count);
            if (cst == QEM_OK) {
                const uint64_t d = atomic_fetch_add(&done, f->chunks[ci].blocks) +
                                   f->chunks[ci].blocks;
#pragma omp critical(qem_packed_progress)
                if (progress && !atomic_load(&stop) &&
                    progress(progress_user, d, c->part_count)) {
                    atomic_store(&stop, 1);
                    if (ci < failed_at) {
                        failed_at = ci;
                        st = qem_fail(&first_error, QEM_E_CANCELLED,
                                      "building the packed copy was cancelled");
                    }
                }
                continue;
            }
            atomic_store(&stop, 1);
#pragma omp critical(qem_packed_progress)
            if (ci < failed_at) {
                failed_at = ci;
                st = cst;
                first_error = e;
            }
        }
        free(columns);
        free(meta);
        free(scratch);
    }
    /* Decoded from a mapped or per-use file: only as good as the file. */
    if (st == QEM_OK && (!f->resident || f->resident_map))
        st = qem_file_stamp_check(f->fd, &f->stamp, f->path, "read", &first_error);
    if (st != QEM_OK) {
        qem_packed_copy_free(c);
        if (error)
            *error = first_error;
        return st;
    }
    qem_body_release(f, 0, f->body_bytes);
    c->bytes = atomic_load(&held);
    c->build_ms = ms_since(&t0);
    qem_packed_copy *none = NULL;
    if (!atomic_compare_exchange_strong(&f->packed, &none, c))
        qem_packed_copy_free(c); /* another build published first */
    return QEM_OK;
}

/* --- reading ---------------------------------------------------------------- */

void qem_packed_pattern(const qem_packed_copy *c, const qem_file *f, uint64_t scan, void *out,
                        unsigned item)
{
    const uint64_t ci = qem_chunk_index_of(f, scan);
    const qem_chunk *ch = &f->chunks[ci];
    const qem_packed_part *part =
        &c->parts[c->chunk_part[ci] + (scan - ch->first) / QEM_INTERVAL];
    const uint32_t i = (uint32_t)(scan - part->first);
    const unsigned t = i / QEM_PACKED_TILE, k = i % QEM_PACKED_TILE;
    for (uint64_t px = 0; px < c->pixels; px++) {
        const uint8_t *m = pixel_meta(part, px), *w = meta_widths(m);
        const uint32_t v =
            qem_bitunpack_one(part->words + meta_word(m) + words_before(w, t), k, tile_width(w, t));
        if (item == 1)
            ((uint8_t *)out)[px] = (uint8_t)v;
        else
            ((uint16_t *)out)[px] = (uint16_t)v;
    }
}

/* Whether every plane's sums over the active pixels fit int32 whatever
 * the samples (at most `top`). */
static int sums_fit_int32(const int32_t *const *weights, unsigned planes, const uint64_t *active,
                          uint64_t n, uint32_t top)
{
    for (unsigned k = 0; k < planes; k++) {
        uint64_t total = 0;
        for (uint64_t j = 0; j < n; j++) {
            const int64_t w = weights[k][active[j]];
            total += (uint64_t)(w < 0 ? -w : w);
            if (total > INT32_MAX / top)
                return 0;
        }
    }
    return 1;
}

/* One part's reduction over local scans [a, b): int32 sums into sum32 when
 * narrow, else int64 sums into sum64 (planes x 512 each). */
typedef void (*part_sums_fn)(const qem_packed_part *part, const uint64_t *active,
                             uint64_t n_active, const int32_t *const *weights, unsigned planes,
                             uint32_t a, uint32_t b, int32_t *sum32, int64_t *sum64);

/* Tile t's samples [lo, hi) (scans of the part) at their weights. */
static inline void tile_sums(const uint32_t *src, unsigned width, uint32_t at, uint32_t lo,
                             uint32_t hi, const int32_t *wk, unsigned planes, int32_t *sum32,
                             int64_t *sum64)
{
    uint32_t v[QEM_PACKED_TILE];
    qem_bitunpack_inline(src, QEM_PACKED_TILE, width, v, 16);
    for (unsigned k = 0; k < planes; k++) {
        if (!wk[k])
            continue;
        for (uint32_t i = lo; i < hi; i++) {
            if (sum32)
                sum32[(size_t)k * QEM_INTERVAL + i] += wk[k] * (int32_t)v[i - at];
            else
                sum64[(size_t)k * QEM_INTERVAL + i] += (int64_t)wk[k] * v[i - at];
        }
    }
}

enum { PLANES_INLINE = 4 };

static void part_sums_base(const qem_packed_part *part, const uint64_t *active, uint64_t n_active,
                           const int32_t *const *weights, unsigned planes, uint32_t a, uint32_t b,
                           int32_t *sum32, int64_t *sum64)
{
    const unsigned t0 = a / QEM_PACKED_TILE, t1 = (b + QEM_PACKED_TILE - 1) / QEM_PACKED_TILE;
    int32_t wk[PLANES_INLINE];
    for (uint64_t j = 0; j < n_active; j++) {
        const uint64_t px = active[j];
        const uint8_t *m = pixel_meta(part, px), *w = meta_widths(m);
        for (unsigned k = 0; k < planes; k++)
            wk[k] = weights[k][px];
        uint32_t word = meta_word(m) + words_before(w, t0);
        for (unsigned t = t0; t < t1; t++) {
            const unsigned width = tile_width(w, t);
            const uint32_t at = t * QEM_PACKED_TILE;
            if (width)
                tile_sums(part->words + word, width, at, at < a ? a : at,
                          at + QEM_PACKED_TILE > b ? b : at + QEM_PACKED_TILE, wk, planes, sum32,
                          sum64);
            word += width;
        }
    }
}

/* The reduction's loads are scattered (a few hundred bytes of each pixel
 * in each part): where pixel j + 8 is described is asked for first, then
 * pixel j + 4's tiles, all of them, once its description is in. */
static inline void prefetch_ahead(const qem_packed_part *part, const uint64_t *active,
                                  uint64_t n_active, uint64_t j)
{
    if (j + 8 < n_active)
        __builtin_prefetch(pixel_meta(part, active[j + 8]));
    if (j + 4 < n_active) {
        const uint8_t *m = pixel_meta(part, active[j + 4]);
        const uint32_t *start = part->words + meta_word(m);
        const uint32_t words = words_before(meta_widths(m), 15) + tile_width(meta_widths(m), 15);
        for (uint32_t w = 0; w < words; w += 16)
            __builtin_prefetch(start + w);
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define PACKED_AVX512 "avx512f,avx512bw,avx512vl,avx512vbmi"

/* Half a tile, 16 values of W bits from its 2W bytes at `s8`: a masked
 * load, each value's bytes permuted into its lane, a shift and a mask
 * (the tables are per width, built by part_sums_avx512). */
__attribute__((target(PACKED_AVX512))) static inline __m512i
unpack_half(const uint8_t *s8, unsigned W, const __m512i *bytes, const __m512i *shift,
            const __m512i *mask)
{
    const __mmask64 load = (1ull << (2 * W)) - 1u;
    return _mm512_and_si512(
        _mm512_srlv_epi32(_mm512_permutexvar_epi8(bytes[W], _mm512_maskz_loadu_epi8(load, s8)),
                          shift[W]),
        mask[W]);
}

/* One plane over a whole part (a detector move), tile after tile: each
 * tile's 32 sums stay in two registers while every pixel of a group adds
 * to them, so they are loaded and stored once a group, not once a pixel
 * (1.4x faster moves on the 512 set; doc/benchmarks.md). */
enum { TILE_GROUP = 256 };

__attribute__((target(PACKED_AVX512))) static void
part_sums_avx512_tiles(const qem_packed_part *part, const uint64_t *active, uint64_t n_active,
                       const int32_t *weights, unsigned tiles, const __m512i *bytes,
                       const __m512i *shift, const __m512i *mask, int32_t *sum32)
{
    uint32_t at[TILE_GROUP];
    uint64_t nibbles[TILE_GROUP];
    int32_t w[TILE_GROUP];
    for (uint64_t g0 = 0; g0 < n_active; g0 += TILE_GROUP) {
        const unsigned n = (unsigned)(n_active - g0 < TILE_GROUP ? n_active - g0 : TILE_GROUP);
        for (unsigned j = 0; j < n; j++) {
            if (j + 8 < n)
                __builtin_prefetch(pixel_meta(part, active[g0 + j + 8]));
            const uint8_t *m = pixel_meta(part, active[g0 + j]);
            at[j] = meta_word(m);
            memcpy(&nibbles[j], meta_widths(m), sizeof nibbles[j]);
            w[j] = weights[active[g0 + j]];
            const uint32_t words = words_before(meta_widths(m), 15) + tile_width(meta_widths(m), 15);
            for (uint32_t k = 0; k < words; k += 16)
                __builtin_prefetch(part->words + at[j] + k);
        }
        for (unsigned t = 0; t < tiles; t++) {
            int32_t *dst = sum32 + t * QEM_PACKED_TILE;
            __m512i d0 = _mm512_loadu_si512(dst), d1 = _mm512_loadu_si512(dst + 16);
            for (unsigned j = 0; j < n; j++) {
                const unsigned nib = (unsigned)(nibbles[j] >> (4 * t)) & 15u, W = nib + (nib == 15);
                if (!W)
                    continue;
                const uint8_t *s8 = (const uint8_t *)(part->words + at[j]);
                at[j] += W;
                const __m512i v0 = unpack_half(s8, W, bytes, shift, mask);
                const __m512i v1 = unpack_half(s8 + 2 * W, W, bytes, shift, mask);
                if (w[j] == 1) {
                    d0 = _mm512_add_epi32(d0, v0);
                    d1 = _mm512_add_epi32(d1, v1);
                } else if (w[j] == -1) {
                    d0 = _mm512_sub_epi32(d0, v0);
                    d1 = _mm512_sub_epi32(d1, v1);
                } else {
                    const __m512i times = _mm512_set1_epi32(w[j]);
                    d0 = _mm512_add_epi32(d0, _mm512_mullo_epi32(v0, times));
                    d1 = _mm512_add_epi32(d1, _mm512_mullo_epi32(v1, times));
                }
            }
            _mm512_storeu_si512(dst, d0);
            _mm512_storeu_si512(dst + 16, d1);
        }
    }
}

/* int32 sums, whole tiles by AVX-512: 16 values of W bits fill 2W bytes,
 * so each half tile is a masked load of its 2W bytes, one byte
 * permutation putting each value's bytes in its lane, a shift and a mask
 * (the permutation and shifts depend on W only, kept per width). */
__attribute__((target(PACKED_AVX512))) static void
part_sums_avx512(const qem_packed_part *part, const uint64_t *active, uint64_t n_active,
                 const int32_t *const *weights, unsigned planes, uint32_t a, uint32_t b,
                 int32_t *sum32, int64_t *sum64)
{
    if (!sum32) {
        part_sums_base(part, active, n_active, weights, planes, a, b, sum32, sum64);
        return;
    }
    __m512i bytes[17], shift[17], mask[17];
    for (unsigned W = 1; W <= 16; W++) {
        const __m512i bit = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32((int)W));
        bytes[W] = _mm512_add_epi32(
            _mm512_mullo_epi32(_mm512_srli_epi32(bit, 3), _mm512_set1_epi32(0x01010101)),
            _mm512_set1_epi32(0x03020100));
        shift[W] = _mm512_and_si512(bit, _mm512_set1_epi32(7));
        mask[W] = _mm512_set1_epi32((int)((1u << W) - 1u));
    }
    const unsigned t0 = a / QEM_PACKED_TILE, t1 = (b + QEM_PACKED_TILE - 1) / QEM_PACKED_TILE;
    if (planes == 1 && a == 0 && b == part->scans) {
        part_sums_avx512_tiles(part, active, n_active, weights[0], t1, bytes, shift, mask, sum32);
        return;
    }
    int32_t wk[PLANES_INLINE];
    for (uint64_t j = 0; j < n_active; j++) {
        const uint64_t px = active[j];
        prefetch_ahead(part, active, n_active, j);
        const uint8_t *m = pixel_meta(part, px);
        uint64_t nibbles;
        memcpy(&nibbles, meta_widths(m), sizeof nibbles);
        for (unsigned k = 0; k < planes; k++)
            wk[k] = weights[k][px];
        uint32_t word = meta_word(m) + words_before(meta_widths(m), t0);
        for (unsigned t = t0; t < t1; t++) {
            const unsigned nib = (unsigned)(nibbles >> (4 * t)) & 15u, W = nib + (nib == 15);
            const uint32_t *src = part->words + word;
            word += W;
            if (!W)
                continue;
            const uint32_t at = t * QEM_PACKED_TILE;
            if (at < a || at + QEM_PACKED_TILE > b) {
                tile_sums(src, W, at, at < a ? a : at,
                          at + QEM_PACKED_TILE > b ? b : at + QEM_PACKED_TILE, wk, planes, sum32,
                          NULL);
                continue;
            }
            const uint8_t *s8 = (const uint8_t *)src;
            const __m512i v0 = unpack_half(s8, W, bytes, shift, mask);
            const __m512i v1 = unpack_half(s8 + 2 * W, W, bytes, shift, mask);
            for (unsigned k = 0; k < planes; k++) {
                const int32_t w = wk[k];
                int32_t *dst = sum32 + (size_t)k * QEM_INTERVAL + at;
                __m512i d0 = _mm512_loadu_si512(dst), d1 = _mm512_loadu_si512(dst + 16);
                if (w == 1) {
                    d0 = _mm512_add_epi32(d0, v0);
                    d1 = _mm512_add_epi32(d1, v1);
                } else if (w == -1) {
                    d0 = _mm512_sub_epi32(d0, v0);
                    d1 = _mm512_sub_epi32(d1, v1);
                } else if (w) {
                    const __m512i times = _mm512_set1_epi32(w);
                    d0 = _mm512_add_epi32(d0, _mm512_mullo_epi32(v0, times));
                    d1 = _mm512_add_epi32(d1, _mm512_mullo_epi32(v1, times));
                } else {
                    continue;
                }
                _mm512_storeu_si512(dst, d0);
                _mm512_storeu_si512(dst + 16, d1);
            }
        }
    }
}
#endif

/* The path QEM_RANS_PATH (or the CPU) selects for decoding selects the
 * reduction too, so the path tests cover both. */
static part_sums_fn part_sums_select(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (qem_rans_path_resolve(QEM_RANS_PATH_AUTO) == QEM_RANS_PATH_AVX512 &&
        __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi"))
        return part_sums_avx512;
#endif
    return part_sums_base;
}

qem_status qem_packed_weighted_sums(const qem_file *f, const qem_packed_copy *c, uint64_t first,
                                    uint64_t count, const int32_t *const *weights,
                                    unsigned planes, int64_t *out, int threads,
                                    qem_error *error)
{
    QEM_TRY(qem_packed_copy_check(f, error));
    memset(out, 0, (size_t)(count * planes) * sizeof *out);
    if (!count)
        return QEM_OK;
    uint64_t *active = malloc((size_t)c->pixels * sizeof *active), n_active = 0;
    if (!active)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t px = 0; px < c->pixels; px++) {
        int any = 0;
        for (unsigned k = 0; k < planes; k++)
            any |= weights[k][px] != 0;
        if (any && f->valid[px])
            active[n_active++] = px;
    }
    const uint64_t end = first + count;
    const uint64_t c0 = qem_chunk_index_of(f, first);
    const uint64_t p0 = c->chunk_part[c0] + (first - f->chunks[c0].first) / QEM_INTERVAL;
    uint64_t p1 = p0;
    while (p1 < c->part_count && c->parts[p1].first < end)
        p1++;
    const int narrow = sums_fit_int32(weights, planes, active, n_active,
                                      f->dtype == QEM_DTYPE_UINT8 ? 255 : 65535);
    const part_sums_fn part_sums = part_sums_select();
    int nomem = 0;
    threads = qem_threads_resolve(threads > 0 ? threads : 1);
    if (p1 - p0 < 2)
        threads = 1;
#pragma omp parallel num_threads(threads)
    {
        int32_t *sum32 = narrow ? malloc((size_t)planes * QEM_INTERVAL * sizeof *sum32) : NULL;
        int64_t *sum64 = narrow ? NULL : malloc((size_t)planes * QEM_INTERVAL * sizeof *sum64);
        if (!sum32 && !sum64) {
#pragma omp atomic write
            nomem = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (uint64_t pi = p0; pi < p1; pi++) {
            if (!sum32 && !sum64)
                continue;
            const qem_packed_part *part = &c->parts[pi];
            const uint32_t a = (uint32_t)(first > part->first ? first - part->first : 0);
            const uint32_t b =
                (uint32_t)(end - part->first < part->scans ? end - part->first : part->scans);
            if (sum32)
                memset(sum32, 0, (size_t)planes * QEM_INTERVAL * sizeof *sum32);
            else
                memset(sum64, 0, (size_t)planes * QEM_INTERVAL * sizeof *sum64);
            for (unsigned g = 0; g < planes; g += PLANES_INLINE)
                part_sums(part, active, n_active, weights + g,
                          planes - g < PLANES_INLINE ? planes - g : PLANES_INLINE, a, b,
                          sum32 ? sum32 + (size_t)g * QEM_INTERVAL : NULL,
                          sum64 ? sum64 + (size_t)g * QEM_INTERVAL : NULL);
            for (unsigned k = 0; k < planes; k++) {
                int64_t *dst = out + (size_t)k * count + (part->first + a - first);
                for (uint32_t i = a; i < b; i++)
                    dst[i - a] = sum32 ? sum32[(size_t)k * QEM_INTERVAL + i]
                                       : sum64[(size_t)k * QEM_INTERVAL + i];
            }
        }
        free(sum32);
        free(sum64);
    }
    free(active);
    return nomem ? qem_fail(error, QEM_E_NO_MEMORY, "out of memory") : QEM_OK;
}
