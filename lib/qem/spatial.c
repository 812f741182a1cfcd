/* Spatial-sum fields: per scan, the sum of valid pixels in every 8x8 tile
 * and then every 32x32 tile (edge tiles truncated at the border). */
#include <stdlib.h>
#include <string.h>

#include "qem/qem_internal.h"

void qem_geometry_init(qem_geometry *g, uint64_t rows, uint64_t columns)
{
    g->rows = rows;
    g->columns = columns;
    g->pixels = rows * columns;
    g->tile8_columns = (uint32_t)((columns + 7) / 8);
    g->fields8 = (uint32_t)(((rows + 7) / 8) * g->tile8_columns);
    g->tile32_columns = (uint32_t)((columns + 31) / 32);
    g->fields32 = (uint32_t)(((rows + 31) / 32) * g->tile32_columns);
    g->fields = g->fields8 + g->fields32;
}

/* The 8x8 sums of one detector row of one scan, columns c0 .. C-1, one
 * value at a time. */
static void row_sums_scalar(const qem_geometry *g, const uint8_t *valid, const void *row,
                            qem_dtype dtype, uint64_t r, uint64_t c0, uint64_t *f)
{
    for (uint64_t c = c0; c < g->columns; c++) {
        const uint64_t p = r * g->columns + c;
        const uint64_t v = dtype == QEM_DTYPE_UINT8 ? ((const uint8_t *)row)[c]
                                                    : ((const uint16_t *)row)[c];
        f[qem_field8_of(g, r, c)] += valid[p] ? v : 0;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QEM_HAVE_SPATIAL_AVX512 1

/* Four 8x8 tiles' share of a row at a time: masked by validity, summed
 * by byte sums of differences against zero (low and high bytes apart for
 * uint16). Returns the first column left for the scalar loop. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static uint64_t
row_sums_avx512(const qem_geometry *g, const uint8_t *keep, const void *row, qem_dtype dtype,
                uint64_t r, uint64_t *f)
{
    const uint64_t C = g->columns;
    uint64_t *tiles = f + (r / 8) * g->tile8_columns;
    const __m512i zero = _mm512_setzero_si512();
    uint64_t c = 0;
    uint64_t t[8];
    for (; c + 32 <= C; c += 32) {
        if (dtype == QEM_DTYPE_UINT8) {
            const __m256i x = _mm256_and_si256(_mm256_loadu_si256((const void *)((const uint8_t *)row + c)),
                                               _mm256_loadu_si256((const void *)(keep + r * C + c)));
            _mm256_storeu_si256((void *)t, _mm256_sad_epu8(x, _mm256_setzero_si256()));
            for (unsigned k = 0; k < 4; k++)
                tiles[c / 8 + k] += t[k];
            continue;
        }
        const __m512i m = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const void *)(keep + r * C + c)));
        const __m512i x = _mm512_and_si512(_mm512_loadu_si512((const uint16_t *)row + c), m);
        const __m512i lo = _mm512_sad_epu8(_mm512_and_si512(x, _mm512_set1_epi16(255)), zero);
        const __m512i hi = _mm512_sad_epu8(_mm512_srli_epi16(x, 8), zero);
        _mm512_storeu_si512(t, _mm512_add_epi64(lo, _mm512_slli_epi64(hi, 8)));
        for (unsigned k = 0; k < 4; k++)
            tiles[c / 8 + k] += t[2 * k] + t[2 * k + 1];
    }
    return c;
}
#endif

void qem_spatial_sums_from_rows(const qem_geometry *g, const uint8_t *valid, const void *rows,
                                qem_dtype dtype, uint64_t n, uint64_t *sums)
{
    const uint64_t P = g->pixels;
    const size_t item = dtype == QEM_DTYPE_UINT8 ? 1 : 2;
    memset(sums, 0, (size_t)(n * g->fields) * sizeof *sums);
#ifdef QEM_HAVE_SPATIAL_AVX512
    /* 0xff where a pixel counts, as a byte mask for the vector loop. */
    uint8_t *keep = NULL;
    if (g->columns >= 32 && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && (keep = malloc((size_t)P)) != NULL)
        for (uint64_t p = 0; p < P; p++)
            keep[p] = valid[p] ? 0xff : 0;
#endif
    for (uint64_t s = 0; s < n; s++) {
        uint64_t *f = sums + s * g->fields;
        for (uint64_t r = 0; r < g->rows; r++) {
            const uint8_t *row = (const uint8_t *)rows + (s * P + r * g->columns) * item;
            uint64_t c0 = 0;
#ifdef QEM_HAVE_SPATIAL_AVX512
            if (keep)
                c0 = row_sums_avx512(g, keep, row, dtype, r, f);
#endif
            row_sums_scalar(g, valid, row, dtype, r, c0, f);
        }
        /* A 32x32 tile is exactly the 8x8 tiles inside it. */
        for (uint32_t t = 0; t < g->fields8; t++) {
            uint64_t tr = t / g->tile8_columns, tc = t % g->tile8_columns;
            f[g->fields8 + (tr / 4) * g->tile32_columns + tc / 4] += f[t];
        }
    }
#ifdef QEM_HAVE_SPATIAL_AVX512
    free(keep);
#endif
}
