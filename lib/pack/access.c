/* Reading a loaded pack: unpack the bit-packed tiles of the pixels and
 * scans asked for, straight from the resident (LZ4 never runs again). The
 * mask-applied working array reads 0 at excluded pixels; the raw
 * reconstruction returns retained samples or exclusion constants. */
#include <omp.h>
#include <stdlib.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <string.h>

#include "common/bitpack.h"
#include "common/error.h"
#include "common/threads.h"
#include "common/transpose.h"
#include "pack/pack_internal.h"
#include "rans/rans.h"

void qem_pack_unpack_tile(const uint32_t *words, uint64_t word, unsigned width, unsigned count,
                          uint32_t *values)
{
    /* Pack widths are at most 16 (checked at load). */
    qem_bitunpack_inline(words + word, count, width, values, 16);
}

/* dst[i] += w * t[i] for i < n, the exact sums of a reduction: +1 and -1
 * (masks and session deltas) need no multiply. Written so the compiler
 * vectorises it (GCC at -O2 only when told; clang does unasked, and warns
 * when a request fails); the AVX2 build doubles the width where the CPU
 * has it. */
#if defined(__GNUC__) && !defined(__clang__)
#define PACK_SIMD _Pragma("omp simd")
#else
#define PACK_SIMD
#endif
#define PACK_ACCUMULATE_BODY(T)                                                                    \
    if (w == 1) {                                                                                  \
        PACK_SIMD for (uint64_t i = 0; i < n; i++) dst[i] += (T)t[i];                              \
    } else if (w == -1) {                                                                          \
        PACK_SIMD for (uint64_t i = 0; i < n; i++) dst[i] -= (T)t[i];                              \
    } else {                                                                                       \
        PACK_SIMD for (uint64_t i = 0; i < n; i++) dst[i] += w * (T)t[i];                          \
    }

static void accumulate_base(int64_t *restrict dst, const uint32_t *restrict t, uint64_t n,
                            int64_t w)
{
    PACK_ACCUMULATE_BODY(int64_t)
}

__attribute__((target("avx2"))) static void accumulate_avx2(int64_t *restrict dst,
                                                             const uint32_t *restrict t,
                                                             uint64_t n, int64_t w)
{
    PACK_ACCUMULATE_BODY(int64_t)
}

/* Unpacks a tile in an AVX2 build (the constant-width code vectorises
 * wider there); the values are those of qem_pack_unpack_tile. */
__attribute__((target("avx2"))) static void unpack_tile_avx2(const uint32_t *words, uint64_t word,
                                                              unsigned width, unsigned count,
                                                              uint32_t *values)
{
    qem_bitunpack_inline(words + word, count, width, values, 16);
}

/* The same sums in int32, where sums_fit_int32 says no sum can
 * overflow: half the bytes of int64 sums, twice the values a vector. */
static void accumulate32_base(int32_t *restrict dst, const uint32_t *restrict t, uint64_t n,
                              int32_t w)
{
    PACK_ACCUMULATE_BODY(int32_t)
}

__attribute__((target("avx2"))) static void accumulate32_avx2(int32_t *restrict dst,
                                                               const uint32_t *restrict t,
                                                               uint64_t n, int32_t w)
{
    PACK_ACCUMULATE_BODY(int32_t)
}

#if defined(__x86_64__) && defined(__GNUC__)
#define PACK_AVX512 "avx512f,avx512bw,avx512vl,avx512vbmi"

/* The values of qem_pack_unpack_tile, 16 a step: 16 values of W bits fill
 * exactly 2W bytes, so each step loads its own 2W bytes (a masked load
 * never reads past the tile), moves each value's (at most 3) bytes into
 * its 32-bit lane by one byte permutation, and shifts and masks. The
 * byte indices and shifts depend on W only. A tail of fewer than 32
 * values goes through the general code. */
__attribute__((target(PACK_AVX512))) static void unpack_tile_avx512(const uint32_t *words,
                                                                     uint64_t word, unsigned width,
                                                                     unsigned count,
                                                                     uint32_t *values)
{
    const unsigned whole = width && width <= 16 ? count / 32 * 32 : 0;
    if (whole) {
        const __m512i bit = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32((int)width));
        /* Lane j takes bytes o, o+1, o+2, o+3 (o = first byte of value j). */
        const __m512i bytes = _mm512_add_epi32(
            _mm512_mullo_epi32(_mm512_srli_epi32(bit, 3), _mm512_set1_epi32(0x01010101)),
            _mm512_set1_epi32(0x03020100));
        const __m512i shift = _mm512_and_si512(bit, _mm512_set1_epi32(7));
        const __m512i mask = _mm512_set1_epi32((int)((1u << width) - 1u));
        const __mmask64 load = (1ull << (2 * width)) - 1u;
        const uint8_t *src = (const uint8_t *)(words + word);
        for (unsigned g = 0; g < whole / 16; g++) {
            const __m512i in = _mm512_maskz_loadu_epi8(load, src + (size_t)g * 2 * width);
            const __m512i v = _mm512_srlv_epi32(_mm512_permutexvar_epi8(bytes, in), shift);
            _mm512_storeu_si512(values + 16 * g, _mm512_and_si512(v, mask));
        }
    }
    if (whole < count)
        qem_bitunpack_inline(words + word + (uint64_t)whole / 32 * width, count - whole, width,
                             values + whole, 16);
}

__attribute__((target(PACK_AVX512))) static void accumulate32_avx512(int32_t *restrict dst,
                                                                      const uint32_t *restrict t,
                                                                      uint64_t n, int32_t w)
{
    PACK_ACCUMULATE_BODY(int32_t)
}

static int pack_avx512_supported(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi");
}
#endif

/* Start word and width of the tile holding local scan `scan` of `pixel`. */
static void locate(const qem_pack *p, const pack_shard *sh, uint64_t scan, uint64_t pixel,
                   uint64_t *word, unsigned *width, unsigned *index)
{
    if (p->profile == QEM_PACK_UINT16_LZ4) {
        const uint64_t t = scan / PACK_V1_TILE;
        const uint8_t *w = sh->tile_widths + pixel * p->tiles;
        *word = sh->pixel_words[pixel] + 4 * pack_width_sum(w, t, NULL);
        *width = w[t];
        *index = (unsigned)(scan % PACK_V1_TILE);
        return;
    }
    const uint64_t H = p->checkpoints + p->width_words, t = scan / PACK_V3_TILE;
    const uint32_t *h = sh->headers + pixel * H;
    uint64_t at = h[0] + (t >= 32 ? h[t / 32] : 0);
    for (uint64_t u = t / 32 * 32; u < t; u++)
        at += pack_v3_width(p, sh->headers, pixel, u);
    *word = at;
    *width = pack_v3_width(p, sh->headers, pixel, t);
    *index = (unsigned)(scan % PACK_V3_TILE);
}

/* From one tile of `pixel` (start `*word`, width `*width`) to the next,
 * `tile`, without summing widths again: loops over a pixel's tiles walk. */
static inline void next_tile(const qem_pack *p, const pack_shard *sh, uint64_t pixel,
                             uint64_t tile, uint64_t *word, unsigned *width)
{
    if (p->profile == QEM_PACK_UINT16_LZ4) {
        *word += 4u * *width; /* 128 samples a tile */
        *width = sh->tile_widths[pixel * p->tiles + tile];
    } else {
        *word += *width; /* 32 samples a tile */
        *width = pack_v3_width(p, sh->headers, pixel, tile);
    }
}

typedef void (*pack_accumulate_fn)(int64_t *restrict, const uint32_t *restrict, uint64_t,
                                   int64_t);
typedef void (*pack_accumulate32_fn)(int32_t *restrict, const uint32_t *restrict, uint64_t,
                                     int32_t);
typedef void (*pack_unpack_fn)(const uint32_t *, uint64_t, unsigned, unsigned, uint32_t *);

/* The kernels of one reduction: the path QEM_RANS_PATH (or the CPU)
 * selects for decoding selects them too, so the path tests cover each. */
typedef struct pack_kernels {
    pack_unpack_fn unpack;
    pack_accumulate_fn accumulate;
    pack_accumulate32_fn accumulate32;
    int shard_tiles; /* one-plane int32 sums of whole uint16 shards (AVX-512) */
} pack_kernels;

static pack_kernels pack_kernels_select(void)
{
    const qem_rans_path path = qem_rans_path_resolve(QEM_RANS_PATH_AUTO);
    pack_kernels k = {qem_pack_unpack_tile, accumulate_base, accumulate32_base, 0};
    if (path == QEM_RANS_PATH_SCALAR)
        return k;
#ifdef PACK_AVX512
    if (path == QEM_RANS_PATH_AVX512 && pack_avx512_supported()) {
        k.unpack = unpack_tile_avx512;
        k.accumulate = accumulate_avx2;
        k.accumulate32 = accumulate32_avx512;
        k.shard_tiles = 1;
        return k;
    }
#endif
    if (__builtin_cpu_supports("avx2")) {
        k.unpack = unpack_tile_avx2;
        k.accumulate = accumulate_avx2;
        k.accumulate32 = accumulate32_avx2;
    }
    return k;
}

uint64_t qem_pack_read_bound(const qem_pack *p, qem_values values, uint64_t scans)
{
    const size_t item = values == QEM_VALUES_RAW ? 2 : qem_dtype_size(p->working_dtype);
    return qem_bytes_bound(scans, p->pixels, item);
}

/* Raw value of excluded pixel `pixel` where constants stand for it. */
static uint16_t raw_constant(const qem_pack *p, uint64_t pixel)
{
    uint64_t lo = 0, hi = p->excluded_count;
    while (hi - lo > 1) {
        uint64_t mid = (lo + hi) / 2;
        if (p->excluded[mid] <= pixel)
            lo = mid;
        else
            hi = mid;
    }
    return p->raw_constants[lo];
}

qem_status qem_pack_read_scans(qem_pack *p, uint64_t first, uint64_t count, qem_values values,
                               void *out, size_t out_size, qem_error *error)
{
    return qem_pack_read_scans_threads(p, first, count, values, out, out_size, 0, error);
}

qem_status qem_pack_read_scans_threads(qem_pack *p, uint64_t first, uint64_t count,
                                       qem_values values, void *out, size_t out_size,
                                       int threads, qem_error *error)
{
    qem_error_clear(error);
    if (!p || (!out && count))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_pack_read_scans: NULL argument");
    QEM_TRY(qem_pack_ready(p, error));
    if (values == QEM_VALUES_RAW && p->raw_access == QEM_RAW_MASK_APPLIED_ONLY)
        return qem_fail(error, QEM_E_NOT_RECORDED,
                        "raw reconstruction needs retained excluded payloads (uint16/LZ4 with "
                        "masked_detector_payload_policy retained_exactly_in_payload) or "
                        "authenticated exclusion constants (uint8/bitpacked with "
                        "masked_detector_pixels_sha256 and masked_detector_raw_values); this "
                        "file admits only mask-applied reads");
    if (first > p->scans || count > p->scans - first)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "scans [%llu, +%llu) lie outside the %llu scan positions",
                        (unsigned long long)first, (unsigned long long)count,
                        (unsigned long long)p->scans);
    if (out_size < qem_pack_read_bound(p, values, count))
        return qem_fail(error, QEM_E_BUFFER_TOO_SMALL,
                        "output buffer of %zu bytes is smaller than the %llu needed", out_size,
                        (unsigned long long)qem_pack_read_bound(p, values, count));
    const int raw = values == QEM_VALUES_RAW;
    const int u8 = !raw && p->working_dtype == QEM_DTYPE_UINT8;
    const uint64_t P = p->pixels, end = first + count;
    const uint64_t tile_scans = p->profile == QEM_PACK_UINT16_LZ4 ? PACK_V1_TILE : PACK_V3_TILE;
    /* Pixel groups unpack into columns, which a transpose turns into the
     * scan rows asked for, one window of scans at a time. */
    enum { GROUP = 64, WINDOW = 512 };
    const uint64_t groups = (P + GROUP - 1) / GROUP;
    const pack_kernels kernels = pack_kernels_select();
    int nomem = 0;
    threads = qem_threads_resolve(threads);
#pragma omp parallel num_threads(qem_threads_resolve(threads))
    {
        uint32_t *tile = malloc(PACK_V1_TILE * sizeof *tile);
        uint16_t *cols = malloc((size_t)GROUP * WINDOW * sizeof *cols);
        if (!tile || !cols) {
#pragma omp atomic write
            nomem = 1;
        }
#pragma omp for schedule(dynamic, 4)
        for (uint64_t g = 0; g < groups; g++) {
            if (!tile || !cols)
                continue;
            const uint64_t p0 = g * GROUP, width = P - p0 < GROUP ? P - p0 : GROUP;
            for (uint64_t w0 = first; w0 < end; w0 += WINDOW) {
                const uint64_t w1 = end - w0 < WINDOW ? end : w0 + WINDOW;
                for (uint64_t j = 0; j < width; j++) {
                    const uint64_t px = p0 + j;
                    uint16_t *col = cols + j * WINDOW;
                    const int excluded = p->is_excluded[px];
                    const int constant =
                        raw && excluded && p->raw_access == QEM_RAW_EXCLUSION_CONSTANTS;
                    if ((excluded && !raw) || constant) {
                        const uint16_t fixed = constant ? raw_constant(p, px) : 0;
                        for (uint64_t i = 0; i < w1 - w0; i++)
                            col[i] = fixed;
                        continue;
                    }
                    for (uint64_t scan = w0; scan < w1;) {
                        const uint64_t s = scan / p->sps, local = scan % p->sps;
                        const uint64_t tile_end = (local / tile_scans + 1) * tile_scans;
                        const uint64_t stop = tile_end < p->sps ? tile_end : p->sps;
                        const uint64_t n = w1 - scan < stop - local ? w1 - scan : stop - local;
                        uint64_t word;
                        unsigned w, index;
                        locate(p, &p->shards[s], local, px, &word, &w, &index);
                        if (n == 1) {
                            /* A pattern: one value, read where it lies. */
                            col[scan - w0] = (uint16_t)qem_bitunpack_one(p->shards[s].words + word, index, w);
                            scan++;
                            continue;
                        }
                        /* Whole tiles unpack on the fast path. */
                        const unsigned whole = (unsigned)(stop - (local - index) - 0);
                        const unsigned want = index + (unsigned)n;
                        kernels.unpack(
                            p->shards[s].words, word, w,
                            want % 32 && whole % 32 == 0 && whole >= want ? whole : want, tile);
                        for (uint64_t i = 0; i < n; i++)
                            col[scan - w0 + i] = (uint16_t)tile[index + i];
                        scan += n;
                    }
                }
                qem_transpose_columns(cols, WINDOW, width, 0, (uint32_t)(w1 - w0), P,
                                      (uint8_t *)out + ((w0 - first) * P + p0) * (u8 ? 1 : 2),
                                      u8 ? 1 : 2);
            }
        }
        free(tile);
        free(cols);
    }
    if (nomem)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    return QEM_OK;
}

enum { PREFETCH_PIXELS = 4 };

/* Asks for pixel px's words in shard `sh` (at most 4 KiB of them) and
 * its tile widths ahead of use: a move reads a few hundred bytes of each
 * selected pixel in each shard, scattered over the resident, and without
 * this the unpacker waits on each tile's load in turn. */
static inline void prefetch_pixel(const qem_pack *p, const pack_shard *sh, uint64_t px)
{
    uint64_t start, stop;
    if (p->profile == QEM_PACK_UINT16_LZ4) {
        start = sh->pixel_words[px];
        stop = px + 1 < p->pixels ? sh->pixel_words[px + 1] : sh->decoded_bytes / 4;
        __builtin_prefetch(sh->tile_widths + px * p->tiles);
    } else {
        const uint64_t H = p->checkpoints + p->width_words;
        start = sh->headers[px * H];
        stop = px + 1 < p->pixels ? sh->headers[(px + 1) * H] : start;
        __builtin_prefetch(sh->headers + px * H);
    }
    if (stop < start || stop - start > 1024)
        stop = start + 1024;
    for (uint64_t w = start; w < stop; w += 16)
        __builtin_prefetch(sh->words + w);
}

/* 1 if every plane's sums fit int32 whatever the values (at most 65535:
 * pack widths are at most 16): sum over the pixels of |weight| times
 * 65535 stays below 2^31. A detector move (+1/-1 over the changed pixels)
 * or a virtual detector of up to 32768 pixels does. */
static int sums_fit_int32(const int32_t *const *weights, unsigned planes, const uint64_t *active,
                          uint64_t n_active)
{
    for (unsigned k = 0; k < planes; k++) {
        uint64_t total = 0;
        for (uint64_t j = 0; j < n_active; j++) {
            const int64_t w = weights[k][active[j]];
            total += (uint64_t)(w < 0 ? -w : w);
            if (total > INT32_MAX / 65535)
                return 0;
        }
    }
    return 1;
}

/* Adds pixel px's values at shard-local scans [a, b) of shard `sh`, at
 * its weights, into dst[k * stride + i - shift] for local scan i: int32
 * sums into dst32 when given, else int64 sums into dst. */
static inline void pixel_shard_sums(const qem_pack *p, const pack_shard *sh, uint64_t px,
                                    uint64_t a, uint64_t b, const int32_t *const *weights,
                                    unsigned planes, int64_t *dst, int32_t *dst32,
                                    uint64_t stride, uint64_t shift, uint32_t *tile,
                                    const pack_kernels *kernels)
{
    const uint64_t step = p->profile == QEM_PACK_UINT16_LZ4 ? PACK_V1_TILE : PACK_V3_TILE;
    uint64_t word;
    unsigned width, index;
    for (uint64_t at = a / step * step; at < b; at += step) {
        if (at == a / step * step)
            locate(p, sh, at, px, &word, &width, &index);
        else
            next_tile(p, sh, px, at / step, &word, &width);
        if (!width)
            continue;
        const unsigned n = (unsigned)(p->sps - at < step ? p->sps - at : step);
        kernels->unpack(sh->words, word, width, n, tile);
        const uint64_t lo = at < a ? a - at : 0, hi = at + n > b ? b - at : n;
        for (unsigned k = 0; k < planes; k++) {
            if (!weights[k][px])
                continue;
            const uint64_t to = k * stride + at + lo - shift;
            if (dst32)
                kernels->accumulate32(dst32 + to, tile + lo, hi - lo, weights[k][px]);
            else
                kernels->accumulate(dst + to, tile + lo, hi - lo, weights[k][px]);
        }
    }
}

#ifdef PACK_AVX512
/* One plane over whole tiles of a uint16 shard (a detector move over the
 * shard's every scan), tile after tile: each tile's 128 sums stay in
 * eight registers while every pixel of a group adds its values to them,
 * instead of each pixel's tile passing through a buffer and the shard's
 * sums (as the .qem copy's reduction, doc/benchmarks.md). Whole 128-scan
 * tiles only (the caller checks sps). */
enum { TILE_GROUP = 256 };

__attribute__((target(PACK_AVX512))) static void
shard_tiles_avx512(const qem_pack *p, const pack_shard *sh, const uint64_t *active,
                   uint64_t n_active, const int32_t *weights, int32_t *sums)
{
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
    /* Widths up to NARROW_W a +-1 move adds in 16-bit lanes, 32 scans a
     * vector (half the steps of 32-bit lanes): a group's 256 pixels of at
     * most 127 each cannot overflow them. Lane i takes the two bytes from
     * the one holding bit i * W, shifted down by (i * W) % 8. */
    enum { NARROW_W = 7 };
    __m512i bytes16[NARROW_W + 1], shift16[NARROW_W + 1], mask16[NARROW_W + 1];
    for (unsigned W = 2; W <= NARROW_W; W++) {
        uint8_t index[64];
        uint16_t by[32];
        for (unsigned i = 0; i < 32; i++) {
            index[2 * i] = (uint8_t)(i * W / 8);
            index[2 * i + 1] = (uint8_t)(i * W / 8 + 1);
            by[i] = (uint16_t)(i * W % 8);
        }
        bytes16[W] = _mm512_loadu_si512(index);
        shift16[W] = _mm512_loadu_si512(by);
        mask16[W] = _mm512_set1_epi16((short)((1u << W) - 1u));
    }
    const unsigned tiles = (unsigned)(p->sps / PACK_V1_TILE);
    uint64_t at[TILE_GROUP];
    const uint8_t *widths[TILE_GROUP];
    int32_t w[TILE_GROUP];
    for (uint64_t g0 = 0; g0 < n_active; g0 += TILE_GROUP) {
        const unsigned n = (unsigned)(n_active - g0 < TILE_GROUP ? n_active - g0 : TILE_GROUP);
        int unit = 1;
        for (unsigned j = 0; j < n; j++) {
            const uint64_t px = active[g0 + j];
            prefetch_pixel(p, sh, px);
            at[j] = sh->pixel_words[px];
            widths[j] = sh->tile_widths + px * p->tiles;
            w[j] = weights[px];
            unit &= w[j] == 1 || w[j] == -1;
        }
        for (unsigned t = 0; t < tiles; t++) {
            int32_t *dst = sums + (size_t)t * PACK_V1_TILE;
            __m512i d[8], e[4];
            for (unsigned k = 0; k < 8; k++)
                d[k] = _mm512_loadu_si512(dst + 16 * k);
            for (unsigned k = 0; k < 4; k++)
                e[k] = _mm512_setzero_si512();
            for (unsigned j = 0; j < n; j++) {
                const unsigned W = widths[j][t];
                if (!W)
                    continue;
                const uint8_t *src = (const uint8_t *)(sh->words + at[j]);
                at[j] += 4u * W;
                if (W == 1 && unit) {
                    /* A bit a scan (most of an ADF ring's tiles): each
                     * 16 scans' bits are a lane mask of the +-1. */
                    const __m512i one = _mm512_set1_epi32(w[j]);
                    for (unsigned k = 0; k < 8; k++) {
                        uint16_t bits;
                        memcpy(&bits, src + 2 * k, sizeof bits);
                        d[k] = _mm512_mask_add_epi32(d[k], bits, d[k], one);
                    }
                    continue;
                }
                if (W <= NARROW_W && unit) {
                    const __mmask64 load = (1ull << (4 * W)) - 1u;
                    const __m512i sign = _mm512_set1_epi16((short)-(w[j] < 0));
                    for (unsigned k = 0; k < 4; k++) {
                        const __m512i v = _mm512_and_si512(
                            _mm512_srlv_epi16(
                                _mm512_permutexvar_epi8(
                                    bytes16[W], _mm512_maskz_loadu_epi8(load, src + 4 * W * k)),
                                shift16[W]),
                            mask16[W]);
                        e[k] = _mm512_add_epi16(
                            e[k], _mm512_sub_epi16(_mm512_xor_si512(v, sign), sign));
                    }
                    continue;
                }
                const __mmask64 load = (1ull << (2 * W)) - 1u;
                const __m512i sign = _mm512_set1_epi32(-(int32_t)(w[j] < 0));
                const __m512i times = _mm512_set1_epi32(w[j]);
#pragma GCC unroll 8
                for (unsigned k = 0; k < 8; k++) {
                    __m512i v = _mm512_and_si512(
                        _mm512_srlv_epi32(_mm512_permutexvar_epi8(
                                              bytes[W], _mm512_maskz_loadu_epi8(load, src + 2 * W * k)),
                                          shift[W]),
                        mask[W]);
                    v = unit ? _mm512_sub_epi32(_mm512_xor_si512(v, sign), sign)
                             : _mm512_mullo_epi32(v, times);
                    d[k] = _mm512_add_epi32(d[k], v);
                }
            }
            for (unsigned k = 0; k < 4; k++) {
                d[2 * k] = _mm512_add_epi32(
                    d[2 * k], _mm512_cvtepi16_epi32(_mm512_castsi512_si256(e[k])));
                d[2 * k + 1] = _mm512_add_epi32(
                    d[2 * k + 1], _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(e[k], 1)));
            }
            for (unsigned k = 0; k < 8; k++)
                _mm512_storeu_si512(dst + 16 * k, d[k]);
        }
    }
}
#endif

qem_status qem_pack_weighted_sums(const qem_pack *p, uint64_t first, uint64_t count,
                                  const int32_t *const *weights, unsigned planes, int64_t *out,
                                  int threads, qem_error *error)
{
    QEM_TRY(qem_pack_ready(p, error));
    if (first > p->scans || count > p->scans - first || !planes || !weights || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_pack_weighted_sums: bad range or argument");
    memset(out, 0, (size_t)(count * planes) * sizeof *out);
    const uint64_t P = p->pixels, end = first + count;
    /* The pixels that count: a nonzero weight somewhere, not excluded. */
    uint64_t *active = malloc((size_t)P * sizeof *active), n_active = 0;
    if (!active)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory reducing a pack");
    for (uint64_t px = 0; px < P; px++) {
        int any = 0;
        for (unsigned k = 0; k < planes; k++)
            any |= weights[k][px] != 0;
        if (any && !p->is_excluded[px])
            active[n_active++] = px;
    }
    int nomem = 0;
    threads = threads > 0 ? threads : 1;
    const pack_kernels kernels = pack_kernels_select();
    const uint64_t s_first = first / p->sps, s_end = (end + p->sps - 1) / p->sps;
    if (s_end - s_first >= 2 * (uint64_t)threads) {
        /* Whole shards per thread: each writes its own scans of `out`, so
         * nothing is merged and no thread waits at each shard (a barrier
         * per shard was a futex wake apiece, 128 per 512 x 512 move).
         * Sums that fit int32 go through a shard's int32 buffer. */
        const int narrow = sums_fit_int32(weights, planes, active, n_active);
#pragma omp parallel num_threads(qem_threads_resolve(threads))
        {
            uint32_t tile[PACK_V1_TILE];
            int32_t *local = narrow ? malloc((size_t)(p->sps * planes) * sizeof *local) : NULL;
            if (narrow && !local) {
#pragma omp atomic write
                nomem = 1;
            }
#pragma omp for schedule(dynamic, 1)
            for (uint64_t s = s_first; s < s_end; s++) {
                const uint64_t s0 = s * p->sps;
                const uint64_t a = first > s0 ? first - s0 : 0;
                const uint64_t b = end - s0 < p->sps ? end - s0 : p->sps;
                int64_t *dst = out + (s0 > first ? s0 - first : 0);
                if (narrow && !local)
                    continue;
                if (local)
                    memset(local, 0, (size_t)(p->sps * planes) * sizeof *local);
                int tiled = 0;
#ifdef PACK_AVX512
                if (kernels.shard_tiles && local && planes == 1 && a == 0 && b == p->sps &&
                    p->profile == QEM_PACK_UINT16_LZ4 && p->sps % PACK_V1_TILE == 0) {
                    shard_tiles_avx512(p, &p->shards[s], active, n_active, weights[0], local);
                    tiled = 1;
                }
#endif
                if (!tiled) {
                    for (uint64_t j = 0; j < PREFETCH_PIXELS && j < n_active; j++)
                        prefetch_pixel(p, &p->shards[s], active[j]);
                    for (uint64_t j = 0; j < n_active; j++) {
                        if (j + PREFETCH_PIXELS < n_active)
                            prefetch_pixel(p, &p->shards[s], active[j + PREFETCH_PIXELS]);
                        pixel_shard_sums(p, &p->shards[s], active[j], a, b, weights, planes,
                                         local ? NULL : dst, local, local ? p->sps : count, a,
                                         tile, &kernels);
                    }
                }
                for (unsigned k = 0; local && k < planes; k++)
                    for (uint64_t i = 0; i < b - a; i++)
                        dst[k * count + i] = local[k * p->sps + i];
            }
            free(local);
        }
        free(active);
        return nomem ? qem_fail(error, QEM_E_NO_MEMORY, "out of memory reducing a pack") : QEM_OK;
    }
    /* Few shards: the threads share each shard's pixels. */
#pragma omp parallel num_threads(qem_threads_resolve(threads))
    {
        uint32_t tile[PACK_V1_TILE];
        int64_t *local = calloc((size_t)(p->sps * planes), sizeof *local);
        if (!local) {
#pragma omp atomic write
            nomem = 1;
        }
        for (uint64_t s = s_first; s < s_end; s++) {
            const pack_shard *sh = &p->shards[s];
            const uint64_t s0 = s * p->sps;
            /* Local scans [a, b) of this shard lie in the range. */
            const uint64_t a = first > s0 ? first - s0 : 0;
            const uint64_t b = end - s0 < p->sps ? end - s0 : p->sps;
#pragma omp for schedule(dynamic, 16)
            for (uint64_t j = 0; j < n_active; j++)
                if (local)
                    pixel_shard_sums(p, sh, active[j], a, b, weights, planes, local, NULL,
                                     p->sps, 0, tile, &kernels);
#pragma omp critical(qem_pack_sums)
            if (local)
                for (unsigned k = 0; k < planes; k++)
                    for (uint64_t i = a; i < b; i++) {
                        out[k * count + s0 + i - first] += local[k * p->sps + i];
                        local[k * p->sps + i] = 0;
                    }
#pragma omp barrier
        }
        free(local);
    }
    free(active);
    return nomem ? qem_fail(error, QEM_E_NO_MEMORY, "out of memory reducing a pack") : QEM_OK;
}

qem_status qem_pack_pixel_sums(const qem_pack *p, uint64_t first, uint64_t count, uint64_t *sums,
                               uint32_t *max, int threads, qem_error *error)
{
    QEM_TRY(qem_pack_ready(p, error));
    if (first > p->scans || count > p->scans - first || !sums)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_pack_pixel_sums: bad range or argument");
    const uint64_t end = first + count;
    const uint64_t step = p->profile == QEM_PACK_UINT16_LZ4 ? PACK_V1_TILE : PACK_V3_TILE;
    threads = qem_threads_resolve(threads);
    /* One pixel's tiles at a time, straight from the resident. */
#pragma omp parallel for schedule(dynamic, 64) num_threads(qem_threads_resolve(threads))
    for (uint64_t px = 0; px < p->pixels; px++) {
        if (p->is_excluded[px]) {
            sums[px] = 0;
            if (max)
                max[px] = 0;
            continue;
        }
        uint32_t tile[PACK_V1_TILE];
        uint64_t acc = 0;
        uint32_t top = max ? max[px] : 0;
        for (uint64_t s = first / p->sps; s < p->shard_count && s * p->sps < end; s++) {
            const uint64_t s0 = s * p->sps;
            const uint64_t a = first > s0 ? first - s0 : 0;
            const uint64_t b = end - s0 < p->sps ? end - s0 : p->sps;
            uint64_t word;
            unsigned width, index;
            for (uint64_t at = a / step * step; at < b; at += step) {
                if (at == a / step * step)
                    locate(p, &p->shards[s], at, px, &word, &width, &index);
                else
                    next_tile(p, &p->shards[s], px, at / step, &word, &width);
                if (!width)
                    continue;
                const unsigned n = (unsigned)(p->sps - at < step ? p->sps - at : step);
                qem_pack_unpack_tile(p->shards[s].words, word, width, n, tile);
                const uint64_t lo = at < a ? a - at : 0, hi = at + n > b ? b - at : n;
                for (uint64_t i = lo; i < hi; i++) {
                    acc += tile[i];
                    top = tile[i] > top ? tile[i] : top;
                }
            }
        }
        sums[px] += acc;
        if (max)
            max[px] = top;
    }
    return QEM_OK;
}

qem_status qem_pack_detector_sums(const qem_pack *p, const uint8_t *mask, uint64_t *image)
{
    int32_t *w = malloc((size_t)p->pixels * sizeof *w);
    int64_t *sums = malloc((size_t)p->scans * sizeof *sums);
    qem_status st = w && sums ? QEM_OK : QEM_E_NO_MEMORY;
    for (uint64_t px = 0; st == QEM_OK && px < p->pixels; px++)
        w[px] = mask[px] != 0;
    const int32_t *planes[1] = {w};
    if (st == QEM_OK)
        st = qem_pack_weighted_sums(p, 0, p->scans, planes, 1, sums, 0, NULL);
    for (uint64_t s = 0; st == QEM_OK && s < p->scans; s++)
        image[s] = (uint64_t)sums[s];
    free(w);
    free(sums);
    return st;
}

qem_status qem_pack_time_first_access(qem_pack *p, qem_error *error)
{
    qem_error_clear(error);
    if (!p || !p->loaded)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "the pack is not loaded");
    struct timespec t0;
    const size_t item = qem_dtype_size(p->working_dtype);
    uint8_t *dp = malloc((size_t)p->pixels * item);
    uint8_t *all = malloc((size_t)p->pixels);
    uint64_t *image = malloc((size_t)p->scans * sizeof *image);
    qem_status st =
        dp && all && image ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK) {
        qem_pack_now(&t0);
        st = qem_pack_read_scans(p, 0, 1, QEM_VALUES_WORKING, dp, (size_t)p->pixels * item,
                                 error);
        p->timings.first_diffraction = qem_pack_elapsed_ms(&t0);
    }
    if (st == QEM_OK) {
        /* The image a detector view shows first: every admitted pixel. */
        memset(all, 1, (size_t)p->pixels);
        qem_pack_now(&t0);
        if (qem_pack_detector_sums(p, all, image) != QEM_OK)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        p->timings.first_detector = qem_pack_elapsed_ms(&t0);
    }
    free(dp);
    free(all);
    free(image);
    return st;
}
