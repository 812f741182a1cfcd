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

/* Planes a one-plane move reads of every tile, wide or not (masked to
 * zero past its width): no branch on widths that vary tile to tile. */
#define PLANES_READ 4u

/* Tile codes (packed_copy.h): 0-12 planes, then these. */
enum { CODE_WIDE = 13, CODE_LOW = 14, CODE_HIGH = 15 };

static const uint8_t code_width[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 1, 1};
static const uint8_t code_halves[16] = {0,  2,  4,  6,  8,  10, 12, 14,
                                        16, 18, 20, 22, 24, 32, 1,  1};

/* What a one-plane move reads of a tile of each code: plane b is the u32
 * at half 2b, ANDed with mask[b], plane 0 then shifted left by `shift`
 * (a high half to its scans): every code takes the same loads, no branch. */
#define PLANES_OF(w)                                                                         \
    {{(w) > 0 ? ~0u : 0u, (w) > 1 ? ~0u : 0u, (w) > 2 ? ~0u : 0u, (w) > 3 ? ~0u : 0u}, 0}
static const struct code_read {
    uint32_t mask[PLANES_READ];
    uint32_t shift;
} code_read[16] = {PLANES_OF(0),  PLANES_OF(1),  PLANES_OF(2),  PLANES_OF(3),
                   PLANES_OF(4),  PLANES_OF(5),  PLANES_OF(6),  PLANES_OF(7),
                   PLANES_OF(8),  PLANES_OF(9),  PLANES_OF(10), PLANES_OF(11),
                   PLANES_OF(12), PLANES_OF(16), {{0xFFFFu, 0, 0, 0}, 0},
                   {{0xFFFFu, 0, 0, 0}, 16}};
#undef PLANES_OF

static inline unsigned tile_code(const uint8_t *w, unsigned t)
{
    return (w[t / 2] >> (4 * (t % 2))) & 15u;
}

/* Pixel px's eight code bytes in `part`. */
static inline const uint8_t *pixel_codes(const qem_packed_part *part, uint64_t px)
{
    return part->meta + px * part->meta_stride;
}

/* Halves of a pixel's tiles before tile t (t <= 16) of its eight code
 * bytes: twice the nibbles' sum, corrected for codes 13-15. */
static inline uint32_t halves_before(const uint8_t *w, unsigned t)
{
    uint64_t x;
    memcpy(&x, w, sizeof x);
    if (t < 16)
        x &= (1ull << (4 * t)) - 1u;
    const uint64_t lo = 0x0F0F0F0F0F0F0F0Full, ones = 0x1111111111111111ull;
    const uint64_t bytes = (x & lo) + ((x >> 4) & lo);
    const uint64_t high = (x >> 2) & (x >> 3) & ones; /* nibbles 12-15 */
    const uint64_t c13 = high & x & ~(x >> 1), c14 = high & ~x & (x >> 1), c15 = high & x & (x >> 1);
    return 2u * (uint32_t)((bytes * 0x0101010101010101ull) >> 56) +
           6u * (uint32_t)__builtin_popcountll(c13) - 27u * (uint32_t)__builtin_popcountll(c14) -
           29u * (uint32_t)__builtin_popcountll(c15);
}

/* Halves the `parts` code records at `codes` take together. */
static inline uint32_t halves_of_parts(const uint8_t *codes, unsigned parts)
{
    uint32_t halves = 0;
    for (unsigned k = 0; k < parts; k++)
        halves += halves_before(codes + (size_t)QEM_PACKED_CODES * k, QEM_PACKED_TILES);
    return halves;
}

/* Pixel px's description in the slab of `part`: its run's start, then
 * the codes of the slab's first part. */
static inline const uint8_t *pixel_record(const qem_packed_part *part, uint64_t px)
{
    return pixel_codes(part, px) - (size_t)QEM_PACKED_CODES * part->index - QEM_PACKED_RUN_START;
}

static inline uint32_t run_start(const uint8_t *record)
{
    uint32_t start;
    memcpy(&start, record, sizeof start);
    return start;
}

/* Where each of n pixels' tiles in `part` start (pixel pixels[j], or
 * first + j where pixels is NULL): its run's start plus the halves of the
 * slab's earlier parts. */
typedef void (*part_starts_fn)(const qem_packed_part *part, const uint64_t *pixels,
                               uint64_t first, uint64_t n, uint32_t *start);

static void part_starts(const qem_packed_part *part, const uint64_t *pixels, uint64_t first,
                        uint64_t n, uint32_t *start)
{
    for (uint64_t j = 0; j < n; j++) {
        const uint8_t *record = pixel_record(part, pixels ? pixels[j] : first + j);
        start[j] = run_start(record) + halves_of_parts(record + QEM_PACKED_RUN_START, part->index);
    }
}

static inline uint32_t load32(const uint16_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Plane b of a tile of code `code` at `src`, as the 32 scans' bits. */
static inline uint32_t tile_plane(const uint16_t *src, unsigned code, unsigned b)
{
    if (code >= CODE_LOW)
        return b ? 0 : (uint32_t)src[0] << (code == CODE_HIGH ? 16 : 0);
    return b < code_width[code] ? load32(src + 2 * b) : 0;
}

/* A tile's 32 values (each below 2^width) as `width` bit planes: bit i
 * of word b is bit b of value i. A reduction then adds each plane under
 * its word as a lane mask, the value's bits never shifted apart. */
static void plane_tile(const uint16_t *values, unsigned width, uint32_t *words)
{
    for (unsigned b = 0; b < width; b++) {
        uint32_t word = 0;
        for (unsigned i = 0; i < QEM_PACKED_TILE; i++)
            word |= (uint32_t)((values[i] >> b) & 1u) << i;
        words[b] = word;
    }
}

/* Value i of a tile of code `code` at `src`. */
static inline uint32_t tile_value(const uint16_t *src, unsigned code, unsigned i)
{
    uint32_t v = 0;
    for (unsigned b = 0; b < code_width[code]; b++)
        v |= ((tile_plane(src, code, b) >> i) & 1u) << b;
    return v;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* plane_tile, each plane one test of the 32 values' bit b. */
__attribute__((target("avx512f,avx512bw"))) static void
plane_tile_avx512(const uint16_t *values, unsigned width, uint32_t *words)
{
    const __m512i v = _mm512_loadu_si512(values);
    for (unsigned b = 0; b < width; b++)
        words[b] = (uint32_t)_mm512_test_epi16_mask(v, _mm512_set1_epi16((short)(1u << b)));
}
#endif

typedef void (*plane_tile_fn)(const uint16_t *values, unsigned width, uint32_t *words);

/* Whether the AVX-512 kernels run: the path QEM_RANS_PATH (or the CPU)
 * selects for decoding selects them too, so the path tests cover both. */
static int packed_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return qem_rans_path_resolve(QEM_RANS_PATH_AUTO) == QEM_RANS_PATH_AVX512 &&
           __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi2");
#else
    return 0;
#endif
}

void qem_packed_copy_free(qem_packed_copy *c)
{
    if (!c)
        return;
    for (uint64_t k = 0; c->slabs && k < c->slab_count; k++)
        qem_large_release(c->slabs[k], (size_t)c->slab_bytes[k]);
    free(c->slabs);
    free(c->slab_bytes);
    free(c->slab_part);
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

/* What one thread builds a slab with. */
typedef struct slab_work {
    qem_chunk_view *views; /* the slab's chunks, loaded */
    uint16_t *columns;     /* PIXEL_GROUP pixels' samples of each part */
} slab_work;

/* The slab of chunks [c0, c1) (parts [k0, k0 + n)) into c->parts and its
 * allocation c->slabs[slab]: for each group of pixels, every part's
 * samples decoded, then each pixel's tiles of every part in turn. The
 * descriptions and halves are written where they stay, in address space
 * for the widest tiles trimmed to what they took: no staging buffer to
 * copy from (its copy was the build's peak memory above the finished
 * copy, doc/benchmarks.md). */
static qem_status build_slab(const qem_file *f, qem_packed_copy *c, uint64_t slab, uint64_t c0,
                             uint64_t c1, plane_tile_fn planes, slab_work *w, uint64_t *bytes,
                             qem_error *error)
{
    const uint64_t P = f->pixels, k0 = c->slab_part[slab], n = c->slab_part[slab + 1] - k0;
    const uint32_t stride = (uint32_t)(QEM_PACKED_RUN_START + n * QEM_PACKED_CODES);
    uint64_t widest = 0; /* halves if every tile took 16 planes */
    for (uint64_t k = 0; k < n; k++)
        widest += (c->parts[k0 + k].scans + QEM_PACKED_TILE - 1) / QEM_PACKED_TILE * 32u;
    widest *= P;
    if (widest > UINT32_MAX - 2 * PLANES_READ) /* starts are u32 */
        widest = UINT32_MAX - 2 * PLANES_READ;
    /* The descriptions, then the halves on a 64-byte line, 2 PLANES_READ
     * zero halves after them: a move reads that many planes of every tile. */
    const uint64_t meta_bytes = (P * stride + 63) / 64 * 64;
    const uint64_t reserved = meta_bytes + (widest + 2 * PLANES_READ) * 2;
    uint8_t *block = qem_large_reserve((size_t)reserved);
    if (!block)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for the packed copy");
    uint16_t *halves = (uint16_t *)(void *)(block + meta_bytes);
    for (uint64_t ci = c0; ci < c1; ci++) {
        const qem_status st = qem_chunk_load((qem_file *)f, ci, 0, &w->views[ci - c0], error);
        if (st != QEM_OK) {
            qem_large_release(block, (size_t)reserved);
            return st;
        }
    }
    uint64_t used = 0;
    qem_status st = QEM_OK;
    for (uint64_t p0 = 0; p0 < P && st == QEM_OK; p0 += PIXEL_GROUP) {
        const uint64_t m = P - p0 < PIXEL_GROUP ? P - p0 : PIXEL_GROUP;
        for (uint64_t ci = c0, k = 0; ci < c1 && st == QEM_OK; ci++) {
            for (uint64_t b = 0; b < f->chunks[ci].blocks; b++, k++) {
                uint64_t failed = 0;
                st = qem_chunk_decode_lanes(f, &w->views[ci - c0], b, p0, m,
                                            w->columns + k * PIXEL_GROUP * QEM_INTERVAL, &failed);
                if (st != QEM_OK) {
                    qem_fail(error, st,
                             "QEM count stream of detector pixel %llu (chunk %llu, block "
                             "%llu) does not decode; the file is damaged.",
                             (unsigned long long)failed, (unsigned long long)ci,
                             (unsigned long long)b);
                    break;
                }
            }
        }
        for (uint64_t j = 0; j < m && st == QEM_OK; j++) {
            for (uint64_t k = 0; k < n; k++) {
                const qem_packed_part *part = &c->parts[k0 + k];
                const uint32_t scans = part->scans;
                const unsigned tiles = (scans + QEM_PACKED_TILE - 1) / QEM_PACKED_TILE;
                const uint16_t *col = w->columns + k * PIXEL_GROUP * QEM_INTERVAL + j * scans;
                uint8_t *record = block + (p0 + j) * stride;
                uint8_t *wd = record + QEM_PACKED_RUN_START + k * QEM_PACKED_CODES;
                if (used + tiles * 32u > widest) {
                    st = qem_fail(error, QEM_E_LIMIT,
                                  "a slab of the packed copy passes 2^32 halves");
                    break;
                }
                if (k == 0) {
                    const uint32_t start = (uint32_t)used;
                    memcpy(record, &start, sizeof start);
                }
                for (unsigned t = 0; t < tiles; t++) {
                    const uint32_t at = t * QEM_PACKED_TILE;
                    const uint16_t *values = col + at;
                    uint16_t padded[QEM_PACKED_TILE];
                    if (scans - at < QEM_PACKED_TILE) {
                        /* A block's last tile, zero-padded to 32. */
                        memset(padded, 0, sizeof padded);
                        memcpy(padded, values, (scans - at) * sizeof *padded);
                        values = padded;
                    }
                    unsigned top = 0;
                    for (unsigned i = 0; i < QEM_PACKED_TILE; i++)
                        top |= values[i];
                    const unsigned length = qem_bit_length(top);
                    unsigned code = length <= 12 ? length : CODE_WIDE;
                    uint32_t plane[16];
                    planes(values, code_width[code], plane);
                    if (code == 1 && !(plane[0] >> 16))
                        code = CODE_LOW;
                    else if (code == 1 && !(plane[0] & 0xFFFFu))
                        code = CODE_HIGH;
                    wd[t / 2] |= (uint8_t)(code << (4 * (t % 2)));
                    if (code >= CODE_LOW)
                        halves[used] = (uint16_t)(plane[0] >> (code == CODE_HIGH ? 16 : 0));
                    else
                        for (unsigned b = 0; b < code_width[code]; b++)
                            memcpy(halves + used + 2 * b, &plane[b], sizeof *plane);
                    used += code_halves[code];
                }
            }
        }
    }
    if (st != QEM_OK) {
        qem_large_release(block, (size_t)reserved);
        return st;
    }
    /* Fresh pages read zero: the descriptions' codes were ORed into
     * zeros and the 2 PLANES_READ halves after the last are zero. */
    const uint64_t total = meta_bytes + (used + 2 * PLANES_READ) * 2;
    qem_large_trim(block, (size_t)reserved, (size_t)total);
    c->slabs[slab] = block;
    c->slab_bytes[slab] = total;
    for (uint64_t k = 0; k < n; k++) {
        qem_packed_part *part = &c->parts[k0 + k];
        part->meta_stride = stride;
        part->index = (uint32_t)k;
        part->meta = block + QEM_PACKED_RUN_START + k * QEM_PACKED_CODES;
        part->halves = halves;
    }
    *bytes = total;
    return QEM_OK;
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* The copy's parts (first scan, samples) and slabs: whole chunks while
 * they hold at most QEM_PACKED_SLAB_PARTS parts (a larger chunk alone);
 * slab_chunk gets each slab's first chunk, then chunk_count. */
static int plan_slabs(const qem_file *f, qem_packed_copy *c, uint64_t **slab_chunk)
{
    c->chunk_part = malloc((size_t)(f->chunk_count + 1) * sizeof *c->chunk_part);
    *slab_chunk = malloc((size_t)(f->chunk_count + 1) * sizeof **slab_chunk);
    c->slab_part = malloc((size_t)(f->chunk_count + 1) * sizeof *c->slab_part);
    if (!c->chunk_part || !*slab_chunk || !c->slab_part)
        return 0;
    for (uint64_t ci = 0; ci < f->chunk_count; ci++) {
        c->chunk_part[ci] = c->part_count;
        c->part_count += f->chunks[ci].blocks;
    }
    c->chunk_part[f->chunk_count] = c->part_count;
    c->parts = calloc((size_t)(c->part_count ? c->part_count : 1), sizeof *c->parts);
    if (!c->parts)
        return 0;
    for (uint64_t ci = 0; ci < f->chunk_count; ci++)
        for (uint64_t b = 0; b < f->chunks[ci].blocks; b++) {
            qem_packed_part *part = &c->parts[c->chunk_part[ci] + b];
            part->first = f->chunks[ci].first + b * QEM_INTERVAL;
            part->scans = qem_block_samples(&f->chunks[ci], b);
        }
    for (uint64_t ci = 0; ci < f->chunk_count;) {
        (*slab_chunk)[c->slab_count] = ci;
        c->slab_part[c->slab_count++] = c->chunk_part[ci];
        uint64_t end = ci + 1;
        while (end < f->chunk_count &&
               c->chunk_part[end + 1] - c->chunk_part[ci] <= QEM_PACKED_SLAB_PARTS)
            end++;
        ci = end;
    }
    (*slab_chunk)[c->slab_count] = f->chunk_count;
    c->slab_part[c->slab_count] = c->part_count;
    c->slabs = calloc((size_t)(c->slab_count ? c->slab_count : 1), sizeof *c->slabs);
    c->slab_bytes = calloc((size_t)(c->slab_count ? c->slab_count : 1), sizeof *c->slab_bytes);
    return c->slabs && c->slab_bytes;
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
    uint64_t *slab_chunk = NULL;
    if (!c || !plan_slabs(f, c, &slab_chunk)) {
        free(slab_chunk);
        qem_packed_copy_free(c);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for the packed copy");
    }
    c->pixels = f->pixels;
    c->scans = f->scans;
    uint64_t most_chunks = 0, most_parts = 0;
    for (uint64_t s = 0; s < c->slab_count; s++) {
        if (slab_chunk[s + 1] - slab_chunk[s] > most_chunks)
            most_chunks = slab_chunk[s + 1] - slab_chunk[s];
        if (c->slab_part[s + 1] - c->slab_part[s] > most_parts)
            most_parts = c->slab_part[s + 1] - c->slab_part[s];
    }
    atomic_ullong held = sizeof *c + c->part_count * sizeof *c->parts;
    atomic_ullong done = 0;
    atomic_int stop = 0;
    uint64_t failed_at = UINT64_MAX;
    qem_error first_error = {0};
    qem_status st = QEM_OK;
    plane_tile_fn planes = plane_tile;
#if defined(__x86_64__) && defined(__GNUC__)
    if (packed_avx512())
        planes = plane_tile_avx512;
#endif
    threads = qem_threads_resolve(threads > 0 ? threads : f->threads);
#pragma omp parallel num_threads(threads)
    {
        slab_work w = {0};
        w.views = calloc((size_t)(most_chunks ? most_chunks : 1), sizeof *w.views);
        w.columns = malloc((size_t)(most_parts * PIXEL_GROUP * QEM_INTERVAL) * sizeof *w.columns);
#pragma omp for schedule(dynamic, 1)
        for (uint64_t s = 0; s < c->slab_count; s++) {
            if (atomic_load(&stop))
                continue;
            qem_error e = {0};
            uint64_t bytes = 0;
            const uint64_t a = slab_chunk[s], b = slab_chunk[s + 1];
            qem_status cst = w.views && w.columns
                                 ? build_slab(f, c, s, a, b, planes, &w, &bytes, &e)
                                 : qem_fail(&e, QEM_E_NO_MEMORY, "out of memory for the packed copy");
            for (uint64_t ci = a; w.views && ci < b; ci++)
                qem_chunk_view_free(&w.views[ci - a]);
            const uint64_t now = atomic_fetch_add(&held, bytes) + bytes;
            if (cst == QEM_OK && limit && now > limit)
                cst = qem_fail(&e, QEM_E_LIMIT, "the packed copy would hold more than %llu bytes",
                               (unsigned long long)limit);
            /* What is packed needs its body pages no more: the copy takes
             * their place in memory rather than adding to them. */
            for (uint64_t ci = a; cst == QEM_OK && ci < b; ci++)
                qem_body_release(f, f->chunks[ci].arrays[0].offset,
                                 f->chunks[ci].arrays[2].offset + f->chunks[ci].arrays[2].count);
            if (cst == QEM_OK) {
                const uint64_t parts = c->slab_part[s + 1] - c->slab_part[s];
                const uint64_t d = atomic_fetch_add(&done, parts) + parts;
#pragma omp critical(qem_packed_progress)
                if (progress && !atomic_load(&stop) &&
                    progress(progress_user, d, c->part_count)) {
                    atomic_store(&stop, 1);
                    if (s < failed_at) {
                        failed_at = s;
                        st = qem_fail(&first_error, QEM_E_CANCELLED,
                                      "building the packed copy was cancelled");
                    }
                }
                continue;
            }
            atomic_store(&stop, 1);
#pragma omp critical(qem_packed_progress)
            if (s < failed_at) {
                failed_at = s;
                st = cst;
                first_error = e;
            }
        }
        free(w.views);
        free(w.columns);
    }
    free(slab_chunk);
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

static part_starts_fn part_starts_select(void);

void qem_packed_pattern(const qem_packed_copy *c, const qem_file *f, uint64_t scan, void *out,
                        unsigned item)
{
    const uint64_t ci = qem_chunk_index_of(f, scan);
    const qem_chunk *ch = &f->chunks[ci];
    const qem_packed_part *part =
        &c->parts[c->chunk_part[ci] + (scan - ch->first) / QEM_INTERVAL];
    const uint32_t i = (uint32_t)(scan - part->first);
    const unsigned t = i / QEM_PACKED_TILE, k = i % QEM_PACKED_TILE;
    const part_starts_fn starts_of = part_starts_select();
    /* Each pixel's record and halves lie in its own run of the slab: a
     * group's starts are found (reading its records), every one of its
     * tiles is asked for, then read. */
    enum { GROUP = 64 };
    uint32_t tile[GROUP];
    for (uint64_t p0 = 0; p0 < c->pixels; p0 += GROUP) {
        const unsigned n = (unsigned)(c->pixels - p0 < GROUP ? c->pixels - p0 : GROUP);
        starts_of(part, NULL, p0, n, tile);
        for (unsigned j = 0; j < n; j++) {
            tile[j] += halves_before(pixel_codes(part, p0 + j), t);
            __builtin_prefetch(part->halves + tile[j]);
        }
        for (unsigned j = 0; j < n; j++) {
            const uint32_t v =
                tile_value(part->halves + tile[j], tile_code(pixel_codes(part, p0 + j), t), k);
            if (item == 1)
                ((uint8_t *)out)[p0 + j] = (uint8_t)v;
            else
                ((uint16_t *)out)[p0 + j] = (uint16_t)v;
        }
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
 * narrow, else int64 sums into sum64 (planes x 512 each). start[j] is
 * where active pixel j's tiles in the part start; with `advance` it is
 * moved on to where they start in the slab's next part. */
typedef void (*part_sums_fn)(const qem_packed_part *part, const uint64_t *active,
                             uint64_t n_active, const int32_t *const *weights, unsigned planes,
                             uint32_t a, uint32_t b, int32_t *sum32, int64_t *sum64,
                             uint32_t *start, int advance, const qem_packed_part *next);

/* Tile t's samples [lo, hi) (scans of the part) at their weights. */
static inline void tile_sums(const uint16_t *src, unsigned code, uint32_t at, uint32_t lo,
                             uint32_t hi, const int32_t *wk, unsigned planes, int32_t *sum32,
                             int64_t *sum64)
{
    uint32_t v[QEM_PACKED_TILE];
    for (unsigned i = 0; i < QEM_PACKED_TILE; i++)
        v[i] = tile_value(src, code, i);
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
                           int32_t *sum32, int64_t *sum64, uint32_t *start, int advance,
                           const qem_packed_part *next)
{
    (void)next;
    const unsigned t0 = a / QEM_PACKED_TILE, t1 = (b + QEM_PACKED_TILE - 1) / QEM_PACKED_TILE;
    int32_t wk[PLANES_INLINE];
    for (uint64_t j = 0; j < n_active; j++) {
        const uint64_t px = active[j];
        const uint8_t *w = pixel_codes(part, px);
        for (unsigned k = 0; k < planes; k++)
            wk[k] = weights[k][px];
        uint32_t word = start[j] + halves_before(w, t0);
        if (advance)
            start[j] += halves_before(w, QEM_PACKED_TILES);
        for (unsigned t = t0; t < t1; t++) {
            const unsigned code = tile_code(w, t);
            const uint32_t at = t * QEM_PACKED_TILE;
            if (code)
                tile_sums(part->halves + word, code, at, at < a ? a : at,
                          at + QEM_PACKED_TILE > b ? b : at + QEM_PACKED_TILE, wk, planes, sum32,
                          sum64);
            word += code_halves[code];
        }
    }
}

/* The reduction's loads are scattered (a few hundred bytes of each pixel
 * in each part): where pixel j + 8 is described is asked for first, then
 * pixel j + 4's tiles, all of them, once its description is in. */
static inline void prefetch_ahead(const qem_packed_part *part, const uint64_t *active,
                                  const uint32_t *start, uint64_t n_active, uint64_t j)
{
    if (j + 8 < n_active)
        __builtin_prefetch(pixel_codes(part, active[j + 8]));
    if (j + 4 < n_active) {
        const uint16_t *tiles = part->halves + start[j + 4];
        const uint32_t halves = halves_before(pixel_codes(part, active[j + 4]), QEM_PACKED_TILES);
        for (uint32_t w = 0; w < halves; w += 32)
            __builtin_prefetch(tiles + w);
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define PACKED_AVX512 "avx512f,avx512bw,avx512vl,avx512vbmi2"

/* A tile's 32 values in two registers (scans 0-15, 16-31): each plane's
 * word, as a lane mask, sets bit b in the lanes it marks. */
__attribute__((target(PACKED_AVX512))) static inline void
tile_vectors(const uint16_t *src, unsigned code, __m512i *v0, __m512i *v1)
{
    __m512i lo = _mm512_setzero_si512(), hi = lo;
    for (unsigned b = 0; b < code_width[code]; b++) {
        const __m512i bit = _mm512_set1_epi32((int)(1u << b));
        const uint32_t plane = tile_plane(src, code, b);
        lo = _mm512_mask_or_epi32(lo, (__mmask16)plane, lo, bit);
        hi = _mm512_mask_or_epi32(hi, (__mmask16)(plane >> 16), hi, bit);
    }
    *v0 = lo;
    *v1 = hi;
}

/* Adds plane p's 16-bit counts (a tile's 32 lanes) at weight 2^b to the
 * tile's int32 sums. */
__attribute__((target(PACKED_AVX512))) static inline void
fold_plane(__m512i p, unsigned b, __m512i *d0, __m512i *d1)
{
    *d0 = _mm512_add_epi32(*d0, _mm512_slli_epi32(_mm512_cvtepi16_epi32(_mm512_castsi512_si256(p)), b));
    *d1 = _mm512_add_epi32(*d1,
                           _mm512_slli_epi32(_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(p, 1)), b));
}

/* One plane over a whole part (a detector move), tile after tile: each
 * tile's 32 sums stay in registers while every pixel of a group adds to
 * them, so they are loaded and stored once a group, not once a pixel.
 * With weights of +-1 (every move, every mask) a pixel adds each of its
 * tile's planes as a lane mask to one 16-bit count per plane and lane,
 * folded into the sums once a group (doc/benchmarks.md). A group's pixels
 * are sorted by the planes their tiles in the part need at most (an ADF
 * ring's pixels mostly one or two) and by sign. Those of at most four
 * planes have every tile's planes expanded to words first, one masked
 * expand-load a plane and part, so a tile's loop only loads each word as
 * a mask: no per-tile code, offset or width work. Wider pixels (rare)
 * are read tile by tile. */
enum { TILE_GROUP = 256 };

/* What a pixel's tiles in a part need: planes read of every tile, and
 * whether wider tiles may follow (codes 5-13). */
enum { KIND_ONE, KIND_TWO, KIND_FOUR, KIND_WIDE, KINDS };

/* The kind of a pixel from its 16 tile codes (a nibble each, bits
 * b0-b3): one plane holds codes 0, 1, 14, 15; two add code 2; four add
 * codes 3 and 4. */
static inline unsigned pixel_kind(uint64_t x)
{
    const uint64_t ones = 0x1111111111111111ull;
    const uint64_t b0 = x & ones, b1 = (x >> 1) & ones, b2 = (x >> 2) & ones, b3 = (x >> 3) & ones;
    if (!((b1 ^ b2) | (b2 ^ b3)))
        return KIND_ONE;
    if (!((b2 ^ b3) | (b2 & ~b1) | (~b2 & b1 & b0)))
        return KIND_TWO;
    if (!((b3 & ~(b2 & b1)) | (~b3 & b2 & (b1 | b0))))
        return KIND_FOUR;
    return KIND_WIDE;
}

/* +1 (or -1 when `negative`) into the 16-bit counts of c's lanes in k. */
__attribute__((target(PACKED_AVX512), always_inline)) static inline void
count_lanes(__m512i *c, __mmask32 k, int negative)
{
    const __m512i one = _mm512_set1_epi16(1);
    *c = negative ? _mm512_mask_sub_epi16(*c, k, *c, one) : _mm512_mask_add_epi16(*c, k, *c, one);
}

/* Tile t of pixels [from, to) of a group, of any width, each at weight
 * +1 (or -1 when `negative`): planes below PLANES_READ into the counts
 * c0-c3, wider ones straight into the sums. */
__attribute__((target(PACKED_AVX512), always_inline)) static inline void
count_wide_tile(const uint16_t *halves, unsigned t, const uint64_t *nibbles, uint32_t *at,
                unsigned from, unsigned to, int negative, __m512i *c0, __m512i *c1, __m512i *c2,
                __m512i *c3, __m512i *d0, __m512i *d1)
{
    for (unsigned s = from; s < to; s++) {
        const unsigned code = (unsigned)(nibbles[s] >> (4 * t)) & 15u;
        const struct code_read *r = &code_read[code];
        const uint16_t *src = halves + at[s];
        at[s] += code_halves[code];
        /* Planes past the width are masked to none. */
        count_lanes(c0, (load32(src) & r->mask[0]) << r->shift, negative);
        count_lanes(c1, load32(src + 2) & r->mask[1], negative);
        count_lanes(c2, load32(src + 4) & r->mask[2], negative);
        count_lanes(c3, load32(src + 6) & r->mask[3], negative);
        for (unsigned b = PLANES_READ; b < code_width[code]; b++) {
            const int32_t scale = (int32_t)(1u << b);
            const __m512i times = _mm512_set1_epi32(negative ? -scale : scale);
            const uint32_t plane = load32(src + 2 * b);
            *d0 = _mm512_mask_add_epi32(*d0, (__mmask16)plane, *d0, times);
            *d1 = _mm512_mask_add_epi32(*d1, (__mmask16)(plane >> 16), *d1, times);
        }
    }
}

/* The halves of a pixel's 16 tiles in a part (all of width <= `planes`,
 * 1, 2 or 4) as `planes` expand masks of 32 slots: tile t takes slots
 * 2 planes t onwards, plane b's two halves at 2b and 2b + 1 (code 14's
 * half at 0, code 15's at 1). */
__attribute__((target(PACKED_AVX512))) static inline void
slot_masks(uint64_t x, unsigned planes, uint32_t m[4])
{
    const __m128i table = _mm_setr_epi8(0, 0x3, 0xF, 0x3F, (char)0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0x1, 0x2);
    const __m128i low = _mm_set1_epi8(0x0F), zero = _mm_setzero_si128();
    const __m128i v = _mm_cvtsi64_si128((long long)x);
    const __m128i codes =
        _mm_unpacklo_epi8(_mm_and_si128(v, low), _mm_and_si128(_mm_srli_epi16(v, 4), low));
    __m128i slots = _mm_shuffle_epi8(table, codes); /* byte t: tile t's slots */
    /* Narrower planes: two tiles' slots a byte (and again for one). */
    if (planes == 1)
        slots = _mm_packus_epi16(_mm_maddubs_epi16(slots, _mm_set1_epi16(0x0401)), zero);
    if (planes <= 2)
        slots = _mm_packus_epi16(_mm_maddubs_epi16(slots, _mm_set1_epi16(0x1001)), zero);
    _mm_storeu_si128((__m128i *)m, slots);
}

/* Slots [from, to) of a group, each pixel's tiles in `halves` at at[s]
 * and of width <= `planes`, as words from `words` on: word t planes + b
 * of a pixel is tile t's plane b, the 32 scans' bits. */
__attribute__((target(PACKED_AVX512))) static inline void
expand_words(const uint16_t *halves, const uint64_t *nibbles, const uint32_t *at, unsigned from,
             unsigned to, unsigned planes, uint32_t *words)
{
    for (unsigned s = from; s < to; s++, words += 16 * planes) {
        uint32_t m[4];
        slot_masks(nibbles[s], planes, m);
        const uint16_t *src = halves + at[s];
        for (unsigned i = 0; i < planes; i++) {
            _mm512_storeu_si512(words + 16 * i, _mm512_maskz_expandloadu_epi16(m[i], src));
            src += __builtin_popcount(m[i]);
        }
    }
}

/* Tile t of the expanded pixels at `words` (`planes` x 16 words each),
 * n of them, at weight +1 (or -1 when `negative`) into the counts. */
__attribute__((target(PACKED_AVX512), always_inline)) static inline void
count_words(const uint32_t *words, unsigned n, unsigned t, unsigned planes, int negative,
            __m512i *c0, __m512i *c1, __m512i *c2, __m512i *c3)
{
    const uint32_t *w = words + (size_t)t * planes;
    for (unsigned s = 0; s < n; s++, w += 16 * planes) {
        count_lanes(c0, w[0], negative);
        if (planes > 1)
            count_lanes(c1, w[1], negative);
        if (planes > 2) {
            count_lanes(c2, w[2], negative);
            count_lanes(c3, w[3], negative);
        }
    }
}

__attribute__((target(PACKED_AVX512))) static void
part_sums_avx512_tiles(const qem_packed_part *part, const qem_packed_part *next,
                       const uint64_t *active, uint64_t n_active, const int32_t *weights,
                       unsigned tiles, int32_t *sum32, uint32_t *start, int advance)
{
    /* Slot s of a group holds pixel g0 + pixel_of[s]; the kinds' slots
     * follow one another, each positive then negative, from begin[]. */
    uint32_t at[TILE_GROUP];
    uint64_t nibbles[TILE_GROUP];
    int32_t w[TILE_GROUP];
    uint16_t pixel_of[TILE_GROUP];
    uint8_t key[TILE_GROUP];
    /* The first pass's reads, by group position, for the placement. */
    uint64_t codes_of[TILE_GROUP];
    uint32_t halves_of[TILE_GROUP];
    /* Where each pixel's tiles in `next` start, and their halves. */
    uint32_t ahead_at[TILE_GROUP];
    uint16_t ahead_halves[TILE_GROUP];
    const uint8_t *ahead_codes[TILE_GROUP];
    /* With weights of +-1, the pixels of kinds below KIND_WIDE as words,
     * each kind's from kind_words[kind] on (expand_words). */
    _Alignas(64) uint32_t words[TILE_GROUP * 16 * PLANES_READ];
    static const unsigned kind_planes[KINDS] = {1, 2, 4, 4};
    for (uint64_t g0 = 0; g0 < n_active; g0 += TILE_GROUP) {
        const unsigned n = (unsigned)(n_active - g0 < TILE_GROUP ? n_active - g0 : TILE_GROUP);
        unsigned begin[2 * KINDS + 1] = {0};
        int unit = 1;
        for (unsigned j = 0; j < n; j++) {
            if (j + 8 < n) {
                __builtin_prefetch(pixel_codes(part, active[g0 + j + 8]));
                if (next)
                    __builtin_prefetch(pixel_codes(next, active[g0 + j + 8]));
            }
            const uint8_t *m = pixel_codes(part, active[g0 + j]);
            memcpy(&codes_of[j], m, sizeof codes_of[j]);
            const int32_t wj = weights[active[g0 + j]];
            unit &= wj == 1 || wj == -1;
            key[j] = (uint8_t)(2 * pixel_kind(codes_of[j]) + (wj < 0));
            begin[key[j] + 1]++;
            halves_of[j] = halves_before(m, QEM_PACKED_TILES);
            /* A slab's later parts were fetched during the one before. */
            for (uint32_t k = 0; !part->index && k < halves_of[j]; k += 32)
                __builtin_prefetch(part->halves + start[g0 + j] + k);
        }
        for (unsigned k = 0; k < 2 * KINDS; k++)
            begin[k + 1] += begin[k];
        unsigned fill[2 * KINDS];
        memcpy(fill, begin, sizeof fill);
        uint32_t *kind_words[KINDS], *negative_words[KINDS];
        for (unsigned k = 0, word = 0; k < KINDS; k++) {
            kind_words[k] = words + word;
            negative_words[k] =
                kind_words[k] + (begin[2 * k + 1] - begin[2 * k]) * 16u * kind_planes[k];
            word += (begin[2 * k + 2] - begin[2 * k]) * 16u * kind_planes[k];
        }
        for (unsigned j = 0; j < n; j++) {
            const unsigned s = fill[key[j]]++;
            pixel_of[s] = (uint16_t)j;
            at[s] = start[g0 + j];
            nibbles[s] = codes_of[j];
            w[s] = weights[active[g0 + j]];
            ahead_at[s] = at[s] + halves_of[j];
            ahead_codes[s] = next ? pixel_codes(next, active[g0 + j]) : NULL;
            ahead_halves[s] = next ? (uint16_t)halves_before(ahead_codes[s], QEM_PACKED_TILES) : 0;
        }
        if (unit)
            for (unsigned k = 0; k < KIND_WIDE; k++) {
                expand_words(part->halves, nibbles, at, begin[2 * k], begin[2 * k + 2],
                             kind_planes[k], kind_words[k]);
                for (unsigned s = begin[2 * k]; s < begin[2 * k + 2]; s++)
                    at[s] = ahead_at[s];
            }
        for (unsigned t = 0; t < tiles; t++) {
            int32_t *dst = sum32 + t * QEM_PACKED_TILE;
            __m512i d0 = _mm512_loadu_si512(dst), d1 = _mm512_loadu_si512(dst + 16);
            /* The next part's tiles, a share of the pixels a tile: the
             * loads here wait on memory otherwise. */
            for (unsigned s = t * n / tiles; s < (t + 1) * n / tiles && next; s++) {
                for (uint32_t k = 0; k < ahead_halves[s]; k += 32)
                    __builtin_prefetch(part->halves + ahead_at[s] + k, 0, 2);
                /* The codes after next's: a record spans lines. */
                __builtin_prefetch(ahead_codes[s] + QEM_PACKED_CODES, 0, 2);
            }
            if (!unit) {
                for (unsigned s = 0; s < n; s++) {
                    const unsigned code = (unsigned)(nibbles[s] >> (4 * t)) & 15u;
                    __m512i v0, v1;
                    tile_vectors(part->halves + at[s], code, &v0, &v1);
                    at[s] += code_halves[code];
                    const __m512i times = _mm512_set1_epi32(w[s]);
                    d0 = _mm512_add_epi32(d0, _mm512_mullo_epi32(v0, times));
                    d1 = _mm512_add_epi32(d1, _mm512_mullo_epi32(v1, times));
                }
            } else {
                /* |count| <= TILE_GROUP: 16 bits hold it. */
                __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0;
                const uint16_t *h = part->halves;
#define KIND_WORDS(kind, planes)                                                                  \
    count_words(kind_words[kind], begin[2 * (kind) + 1] - begin[2 * (kind)], t, planes, 0, &c0,    \
                &c1, &c2, &c3);                                                                    \
    count_words(negative_words[kind], begin[2 * (kind) + 2] - begin[2 * (kind) + 1], t, planes, 1, \
                &c0, &c1, &c2, &c3)
                KIND_WORDS(KIND_ONE, 1);
                KIND_WORDS(KIND_TWO, 2);
                KIND_WORDS(KIND_FOUR, 4);
#undef KIND_WORDS
                const unsigned *wide = begin + 2 * KIND_WIDE;
                count_wide_tile(h, t, nibbles, at, wide[0], wide[1], 0, &c0, &c1, &c2, &c3, &d0,
                                &d1);
                count_wide_tile(h, t, nibbles, at, wide[1], wide[2], 1, &c0, &c1, &c2, &c3, &d0,
                                &d1);
                fold_plane(c0, 0, &d0, &d1);
                fold_plane(c1, 1, &d0, &d1);
                fold_plane(c2, 2, &d0, &d1);
                fold_plane(c3, 3, &d0, &d1);
            }
            _mm512_storeu_si512(dst, d0);
            _mm512_storeu_si512(dst + 16, d1);
        }
        /* Past every tile: the codes of tiles after `tiles` are zero. */
        if (advance)
            for (unsigned s = 0; s < n; s++)
                start[g0 + pixel_of[s]] = at[s];
    }
}

/* int32 sums, whole tiles by AVX-512 (tile_vectors), partial tiles by
 * tile_sums. */
__attribute__((target(PACKED_AVX512))) static void
part_sums_avx512(const qem_packed_part *part, const uint64_t *active, uint64_t n_active,
                 const int32_t *const *weights, unsigned planes, uint32_t a, uint32_t b,
                 int32_t *sum32, int64_t *sum64, uint32_t *start, int advance,
                 const qem_packed_part *next)
{
    if (!sum32) {
        part_sums_base(part, active, n_active, weights, planes, a, b, sum32, sum64, start,
                       advance, next);
        return;
    }
    const unsigned t0 = a / QEM_PACKED_TILE, t1 = (b + QEM_PACKED_TILE - 1) / QEM_PACKED_TILE;
    if (planes == 1 && a == 0 && b == part->scans) {
        part_sums_avx512_tiles(part, next, active, n_active, weights[0], t1, sum32, start,
                               advance);
        return;
    }
    int32_t wk[PLANES_INLINE];
    for (uint64_t j = 0; j < n_active; j++) {
        const uint64_t px = active[j];
        prefetch_ahead(part, active, start, n_active, j);
        const uint8_t *m = pixel_codes(part, px);
        uint64_t nibbles;
        memcpy(&nibbles, m, sizeof nibbles);
        for (unsigned k = 0; k < planes; k++)
            wk[k] = weights[k][px];
        uint32_t word = start[j] + halves_before(m, t0);
        if (advance)
            start[j] += halves_before(m, QEM_PACKED_TILES);
        for (unsigned t = t0; t < t1; t++) {
            const unsigned code = (unsigned)(nibbles >> (4 * t)) & 15u;
            const uint16_t *src = part->halves + word;
            word += code_halves[code];
            if (!code)
                continue;
            const uint32_t at = t * QEM_PACKED_TILE;
            if (at < a || at + QEM_PACKED_TILE > b) {
                tile_sums(src, code, at, at < a ? a : at,
                          at + QEM_PACKED_TILE > b ? b : at + QEM_PACKED_TILE, wk, planes, sum32,
                          NULL);
                continue;
            }
            __m512i v0, v1;
            tile_vectors(src, code, &v0, &v1);
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

/* part_starts, the earlier parts' code bytes 64 at a time (a slab of
 * 16 parts: two loads): each nibble's halves from a 16-entry shuffle,
 * summed by SAD. */
__attribute__((target(PACKED_AVX512))) static void
part_starts_avx512(const qem_packed_part *part, const uint64_t *pixels, uint64_t first, uint64_t n,
                   uint32_t *start)
{
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 32, 1, 1));
    const __m512i low = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    const uint64_t bytes = (uint64_t)QEM_PACKED_CODES * part->index;
    for (uint64_t j = 0; j < n; j++) {
        const uint8_t *record = pixel_record(part, pixels ? pixels[j] : first + j);
        const uint8_t *codes = record + QEM_PACKED_RUN_START;
        __m512i total = zero;
        for (uint64_t at = 0; at < bytes; at += 64) {
            const __mmask64 keep = bytes - at >= 64 ? ~0ull : (1ull << (bytes - at)) - 1u;
            const __m512i x = _mm512_maskz_loadu_epi8(keep, codes + at);
            const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(x, low));
            const __m512i hi =
                _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(x, 4), low));
            total = _mm512_add_epi64(total, _mm512_sad_epu8(_mm512_add_epi8(lo, hi), zero));
        }
        start[j] = run_start(record) + (uint32_t)_mm512_reduce_add_epi64(total);
    }
}
#endif

static part_starts_fn part_starts_select(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (packed_avx512())
        return part_starts_avx512;
#endif
    return part_starts;
}

static part_sums_fn part_sums_select(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (packed_avx512())
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
    const part_starts_fn starts_of = part_starts_select();
    int nomem = 0;
    threads = qem_threads_resolve(threads > 0 ? threads : 1);
    if (p1 - p0 < 2)
        threads = 1;
    /* A thread takes a slab's parts one after another (its pixels' halves
     * follow on), when there are slabs enough to share; else single parts. */
    uint64_t s0 = 0, s1;
    while (c->slab_part[s0 + 1] <= p0)
        s0++;
    for (s1 = s0; s1 < c->slab_count && c->slab_part[s1] < p1;)
        s1++;
    const int by_slab = s1 - s0 >= 2 * (uint64_t)threads;
    const uint64_t units = by_slab ? s1 - s0 : p1 - p0;
#pragma omp parallel num_threads(threads)
    {
        int32_t *sum32 = narrow ? malloc((size_t)planes * QEM_INTERVAL * sizeof *sum32) : NULL;
        int64_t *sum64 = narrow ? NULL : malloc((size_t)planes * QEM_INTERVAL * sizeof *sum64);
        uint32_t *start = malloc((size_t)(n_active ? n_active : 1) * sizeof *start);
        if ((!sum32 && !sum64) || !start) {
#pragma omp atomic write
            nomem = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (uint64_t u = 0; u < units; u++) {
            uint64_t from = p0 + u, to = from + 1;
            if (by_slab) {
                from = c->slab_part[s0 + u] > p0 ? c->slab_part[s0 + u] : p0;
                to = c->slab_part[s0 + u + 1] < p1 ? c->slab_part[s0 + u + 1] : p1;
            }
            for (uint64_t pi = from; pi < to; pi++) {
                if ((!sum32 && !sum64) || !start)
                    continue;
                const qem_packed_part *part = &c->parts[pi];
                /* Found once a unit; each part then moves them on (the
                 * unit's parts follow on in one slab). */
                if (pi == from)
                    starts_of(part, active, 0, n_active, start);
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
                              sum64 ? sum64 + (size_t)g * QEM_INTERVAL : NULL, start,
                              g + PLANES_INLINE >= planes, pi + 1 < to ? part + 1 : NULL);
                for (unsigned k = 0; k < planes; k++) {
                    int64_t *dst = out + (size_t)k * count + (part->first + a - first);
                    for (uint32_t i = a; i < b; i++)
                        dst[i - a] = sum32 ? sum32[(size_t)k * QEM_INTERVAL + i]
                                           : sum64[(size_t)k * QEM_INTERVAL + i];
                }
            }
        }
        free(sum32);
        free(sum64);
        free(start);
    }
    free(active);
    return nomem ? qem_fail(error, QEM_E_NO_MEMORY, "out of memory") : QEM_OK;
}
