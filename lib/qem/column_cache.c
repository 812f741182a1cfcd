/* Decoded pixel columns kept for later detector reductions (column_cache.h). */
#include "qem/column_cache.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/threads.h"
#include "common/transpose.h"

void qem_column_cache_init(qem_column_cache *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
}

int qem_column_cache_start(qem_column_cache *c, uint64_t pixels, uint64_t scans, uint64_t limit)
{
    c->scans = scans;
    c->pixels = pixels;
    if (!limit || !scans || !pixels)
        return 1;
    c->by_pixel = calloc((size_t)pixels, sizeof *c->by_pixel);
    c->wide = calloc((size_t)pixels, sizeof *c->wide);
    if (!c->by_pixel || !c->wide) {
        free(c->by_pixel);
        free((void *)c->wide);
        c->by_pixel = NULL;
        c->wide = NULL;
        return 0;
    }
    c->limit = limit;
    return 1;
}

static void column_free(qem_column *k)
{
    free(k->samples);
    free(k);
}

/* Under the lock: a listed column off the recency list. */
static void lru_remove(qem_column_cache *c, qem_column *k)
{
    if (k->newer)
        k->newer->older = k->older;
    else
        c->newest = k->older;
    if (k->older)
        k->older->newer = k->newer;
    else
        c->oldest = k->newer;
    k->newer = k->older = NULL;
}

/* Under the lock: takes a listed column off the list and the table (its
 * bytes still count until it is freed or reused). */
static void unlist(qem_column_cache *c, qem_column *k)
{
    lru_remove(c, k);
    c->by_pixel[k->pixel] = NULL;
    c->listed--;
    k->listed = 0;
}

/* Under the lock: a column no longer listed nor pinned gives back its bytes. */
static void column_drop(qem_column_cache *c, qem_column *k)
{
    c->bytes -= k->bytes;
    column_free(k);
}

/* Under the lock: makes a column the newest listed one. */
static void list_newest(qem_column_cache *c, qem_column *k)
{
    k->older = c->newest;
    k->newer = NULL;
    if (c->newest)
        c->newest->newer = k;
    else
        c->oldest = k;
    c->newest = k;
}

void qem_column_cache_clear(qem_column_cache *c)
{
    if (!c->limit)
        return;
    pthread_mutex_lock(&c->lock);
    while (c->oldest) {
        qem_column *k = c->oldest;
        unlist(c, k);
        if (!k->pins)
            column_drop(c, k);
    }
    pthread_mutex_unlock(&c->lock);
}

void qem_column_cache_free(qem_column_cache *c)
{
    qem_column_cache_clear(c);
    free(c->by_pixel);
    free((void *)c->wide);
    pthread_mutex_destroy(&c->lock);
    memset(c, 0, sizeof *c);
}

void qem_column_cache_read_stats(qem_column_cache *c, uint64_t *hits, uint64_t *misses,
                                 uint64_t *columns, uint64_t *bytes, uint64_t *limit)
{
    pthread_mutex_lock(&c->lock);
    *columns = c->listed;
    *bytes = c->bytes;
    pthread_mutex_unlock(&c->lock);
    *hits = atomic_load(&c->hits);
    *misses = atomic_load(&c->misses);
    *limit = c->limit;
}

qem_column *qem_column_take(qem_column_cache *c, uint64_t pixel)
{
    if (!c->limit || pixel >= c->pixels)
        return NULL;
    pthread_mutex_lock(&c->lock);
    qem_column *k = c->by_pixel[pixel];
    if (k) {
        k->pins++;
        if (c->newest != k) {
            lru_remove(c, k);
            list_newest(c, k);
        }
    }
    pthread_mutex_unlock(&c->lock);
    atomic_fetch_add(k ? &c->hits : &c->misses, 1);
    return k;
}

qem_column *qem_column_new(qem_column_cache *c, uint64_t pixel)
{
    if (!c->limit || pixel >= c->pixels)
        return NULL;
    const int wide = atomic_load(&c->wide[pixel]) != 0;
    const uint64_t bytes = c->scans * (wide ? 2 : 1);
    if (bytes > c->limit)
        return NULL;
    /* Room is made by the least recently used columns, whose memory is
     * taken over when it fits: fresh pages cost the kernel's zeroing,
     * about as much as decoding the column. */
    qem_column *k = NULL;
    pthread_mutex_lock(&c->lock);
    while (c->bytes + bytes > c->limit && c->oldest) {
        qem_column *old = c->oldest;
        unlist(c, old);
        if (old->pins)
            continue; /* freed by its last release */
        if (!k && old->bytes == bytes) {
            k = old;
            c->bytes -= bytes;
        } else {
            column_drop(c, old);
        }
    }
    const int room = c->bytes + bytes <= c->limit;
    if (room)
        c->bytes += bytes; /* a column being filled counts */
    pthread_mutex_unlock(&c->lock);
    if (!room) {
        if (k)
            column_free(k);
        return NULL;
    }
    void *samples = k ? k->samples : NULL;
    if (!k)
        k = malloc(sizeof *k);
    if (k && !samples)
        samples = aligned_alloc(64, (size_t)((bytes + 63) / 64 * 64)); /* whole lines */
    if (!k || !samples) {
        free(k);
        pthread_mutex_lock(&c->lock);
        c->bytes -= bytes;
        pthread_mutex_unlock(&c->lock);
        return NULL;
    }
    memset(k, 0, sizeof *k);
    k->samples = samples;
    k->pixel = pixel;
    k->wide = wide;
    k->bytes = bytes;
    k->pins = 1;
    atomic_init(&k->overflow, 0);
    return k;
}

void qem_column_publish(qem_column_cache *c, qem_column *k)
{
    const int overflow = atomic_load(&k->overflow);
    if (overflow)
        atomic_store(&c->wide[k->pixel], 1);
    pthread_mutex_lock(&c->lock);
    if (overflow || c->by_pixel[k->pixel]) {
        /* Needs 16 bits, or another reduction listed this pixel first. */
        column_drop(c, k);
        pthread_mutex_unlock(&c->lock);
        return;
    }
    k->pins--;
    k->listed = 1;
    c->by_pixel[k->pixel] = k;
    c->listed++;
    list_newest(c, k);
    pthread_mutex_unlock(&c->lock);
}

void qem_column_release(qem_column_cache *c, qem_column *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&c->lock);
    if (--k->pins == 0 && !k->listed)
        column_drop(c, k);
    pthread_mutex_unlock(&c->lock);
}

/* Tile rows [i, hi) of columns [j0, j1) into their columns, one by one. */
static void fill_scalar(qem_column *const *dst, const uint16_t *tile, uint64_t width, uint64_t j0,
                        uint64_t j1, uint32_t i, uint32_t hi, uint64_t scan0)
{
    for (uint64_t j = j0; j < j1; j++) {
        qem_column *k = dst[j];
        if (!k)
            continue;
        uint16_t seen = 0;
        for (uint32_t r = i; r < hi; r++) {
            const uint16_t v = tile[(size_t)r * width + j];
            if (k->wide) {
                ((uint16_t *)k->samples)[scan0 + r] = v;
            } else {
                seen |= v;
                ((uint8_t *)k->samples)[scan0 + r] = (uint8_t)v;
            }
        }
        if (seen > 255)
            atomic_store_explicit(&k->overflow, 1, memory_order_relaxed);
    }
}

#if defined(__SSE2__)
/* n bytes from an L1 stage to a column, past the caches where both ends
 * allow (the column is read back by a later move, not this one; ordinary
 * stores would first fetch every line they write). */
static void copy_out(uint8_t *dst, const uint8_t *src, size_t n)
{
    size_t at = 0;
    while (at < n && ((uintptr_t)(dst + at) & 15))
        at++;
    memcpy(dst, src, at);
    for (; at + 16 <= n; at += 16)
        _mm_stream_si128((__m128i *)(dst + at), _mm_loadu_si128((const __m128i *)(src + at)));
    memcpy(dst + at, src + at, n - at);
}
#endif

void qem_columns_fill(qem_column *const *dst, const uint16_t *tile, uint64_t width, uint32_t lo,
                      uint32_t hi, uint64_t scan0)
{
    for (uint64_t j0 = 0; j0 < width; j0 += 8) {
        const uint64_t j1 = j0 + 8 < width ? j0 + 8 : width;
        int any = 0;
        for (uint64_t j = j0; j < j1; j++)
            any |= dst[j] != NULL;
        if (!any)
            continue;
        uint32_t i = lo;
#if defined(__SSE2__)
        enum { STAGE = 1024 };
        if (j1 - j0 == 8) {
            /* Eight columns by eight scans through registers into a stage
             * of up to STAGE scans per column, then out whole. */
            _Alignas(64) uint16_t stage[8][STAGE];
            __m128i seen = _mm_setzero_si128();
            while (i + 8 <= hi) {
                const uint32_t from = i;
                for (; i + 8 <= hi && i - from + 8 <= STAGE; i += 8) {
                    __m128i c[8];
                    qem_transpose8x8_u16(tile + (size_t)i * width + j0, width, c);
                    for (unsigned l = 0; l < 8; l++) {
                        if (!dst[j0 + l])
                            continue;
                        if (dst[j0 + l]->wide) {
                            _mm_store_si128((__m128i *)(stage[l] + (i - from)), c[l]);
                            continue;
                        }
                        /* Any sample above 255 marks its column below. */
                        seen = _mm_or_si128(seen, _mm_srli_epi16(c[l], 8));
                        _mm_storel_epi64((__m128i *)((uint8_t *)stage[l] + (i - from)),
                                         _mm_packus_epi16(c[l], c[l]));
                    }
                }
                for (unsigned l = 0; l < 8; l++) {
                    qem_column *k = dst[j0 + l];
                    if (k && k->wide)
                        copy_out((uint8_t *)((uint16_t *)k->samples + scan0 + from),
                                 (const uint8_t *)stage[l], (size_t)(i - from) * 2);
                    else if (k)
                        copy_out((uint8_t *)k->samples + scan0 + from, (const uint8_t *)stage[l],
                                 i - from);
                }
            }
            if (_mm_movemask_epi8(_mm_cmpeq_epi8(seen, _mm_setzero_si128())) != 0xffff) {
                /* Some narrow column passed 255 here: find which, exactly. */
                fill_scalar(dst, tile, width, j0, j1, lo, i, scan0);
            }
        }
#endif
        fill_scalar(dst, tile, width, j0, j1, i, hi, scan0);
    }
#if defined(__SSE2__)
    _mm_sfence(); /* the streamed stores before the columns are published */
#endif
}

static inline uint32_t column_sample(const qem_column *k, uint64_t i)
{
    return k->wide ? ((const uint16_t *)k->samples)[i] : ((const uint8_t *)k->samples)[i];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QEM_COLUMNS_AVX2 1

/* acc[i] += w x sample s0 + i, i < n, in 32 bits (the caller keeps it
 * exact), eight samples a step. */
__attribute__((target("avx2"))) static void add_column_avx2(int32_t *acc, const qem_column *k,
                                                            uint64_t s0, uint64_t n, int32_t w)
{
    const __m256i vw = _mm256_set1_epi32(w);
    const uint8_t *narrow = (const uint8_t *)k->samples + s0;
    const uint16_t *wide = (const uint16_t *)k->samples + s0;
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i v =
            k->wide ? _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(wide + i)))
                    : _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(narrow + i)));
        __m256i *a = (__m256i *)(acc + i);
        _mm256_storeu_si256(a, _mm256_add_epi32(_mm256_loadu_si256(a), _mm256_mullo_epi32(v, vw)));
    }
    for (; i < n; i++)
        acc[i] += w * (int32_t)column_sample(k, s0 + i);
}
#endif

/* One column's samples [s0, s0 + n) times w into acc (32 bits). */
static void add_column(int32_t *acc, const qem_column *k, uint64_t s0, uint64_t n, int32_t w,
                       int avx2)
{
#ifdef QEM_COLUMNS_AVX2
    if (avx2) {
        add_column_avx2(acc, k, s0, n, w);
        return;
    }
#endif
    (void)avx2;
    for (uint64_t i = 0; i < n; i++)
        acc[i] += w * (int32_t)column_sample(k, s0 + i);
}

void qem_columns_accumulate(const qem_column *const *columns, const int32_t *weight, uint64_t n,
                            unsigned planes, uint64_t first, uint64_t count, int64_t *out,
                            int avx2, int threads)
{
    enum { SEGMENT = 4096 };
    if (!n || !count)
        return;
    const uint64_t segments = (count + SEGMENT - 1) / SEGMENT;
#pragma omp parallel num_threads(qem_threads_resolve(threads))
    {
        int32_t acc[SEGMENT];
#pragma omp for schedule(static)
        for (uint64_t g = 0; g < segments; g++) {
            const uint64_t s0 = first + g * SEGMENT;
            const uint64_t len = first + count - s0 < SEGMENT ? first + count - s0 : SEGMENT;
            for (unsigned k = 0; k < planes; k++) {
                int64_t *dst = out + (uint64_t)k * count + (s0 - first);
                /* 32-bit sums, added into `dst` before they could pass
                 * 2^31: a column adds at most |w| x its largest sample. */
                uint64_t room = INT32_MAX;
                memset(acc, 0, (size_t)len * sizeof *acc);
                for (uint64_t j = 0; j < n; j++) {
                    const int32_t w = weight[j * planes + k];
                    if (!w)
                        continue;
                    const uint64_t top =
                        (uint64_t)(w < 0 ? -(int64_t)w : w) * (columns[j]->wide ? 65535u : 255u);
                    if (top > INT32_MAX) {
                        /* Too large a weight for 32 bits: straight to 64. */
                        for (uint64_t i = 0; i < len; i++)
                            dst[i] += (int64_t)w * column_sample(columns[j], s0 + i);
                        continue;
                    }
                    if (top > room) {
                        for (uint64_t i = 0; i < len; i++)
                            dst[i] += acc[i];
                        memset(acc, 0, (size_t)len * sizeof *acc);
                        room = INT32_MAX;
                    }
                    room -= top;
                    add_column(acc, columns[j], s0, len, w, avx2);
                }
                for (uint64_t i = 0; i < len; i++)
                    dst[i] += acc[i];
            }
        }
    }
}
