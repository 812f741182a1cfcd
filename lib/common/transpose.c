#include "common/transpose.h"

/* Counts from column tiles (one pixel's n samples after another) into scan
 * rows: a transpose. 8x8 blocks go through SSE2 registers (x86-64
 * baseline); edges and other targets take the scalar loop, which is also
 * the reference the tests compare against. */
#if defined(__SSE2__)
#include <emmintrin.h>

static inline void transpose8x8_u16(const uint16_t *src, size_t src_stride, __m128i out[8])
{
    __m128i r[8];
    for (int k = 0; k < 8; k++)
        r[k] = _mm_loadu_si128((const __m128i *)(src + (size_t)k * src_stride));
    const __m128i a0 = _mm_unpacklo_epi16(r[0], r[1]), a1 = _mm_unpackhi_epi16(r[0], r[1]);
    const __m128i a2 = _mm_unpacklo_epi16(r[2], r[3]), a3 = _mm_unpackhi_epi16(r[2], r[3]);
    const __m128i a4 = _mm_unpacklo_epi16(r[4], r[5]), a5 = _mm_unpackhi_epi16(r[4], r[5]);
    const __m128i a6 = _mm_unpacklo_epi16(r[6], r[7]), a7 = _mm_unpackhi_epi16(r[6], r[7]);
    const __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
    const __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
    const __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
    const __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
    out[0] = _mm_unpacklo_epi64(b0, b4);
    out[1] = _mm_unpackhi_epi64(b0, b4);
    out[2] = _mm_unpacklo_epi64(b1, b5);
    out[3] = _mm_unpackhi_epi64(b1, b5);
    out[4] = _mm_unpacklo_epi64(b2, b6);
    out[5] = _mm_unpackhi_epi64(b2, b6);
    out[6] = _mm_unpacklo_epi64(b3, b7);
    out[7] = _mm_unpackhi_epi64(b3, b7);
}
#endif

void qem_transpose_columns(const uint16_t *tile, uint32_t n, uint64_t width, uint32_t lo,
                           uint32_t hi, uint64_t P, uint8_t *rows, int bytes)
{
    uint32_t i0 = lo;
    uint64_t j_full = 0;
#if defined(__SSE2__)
    j_full = width / 8 * 8;
    for (; i0 + 8 <= hi; i0 += 8) {
        for (uint64_t j0 = 0; j0 < j_full; j0 += 8) {
            __m128i t[8];
            transpose8x8_u16(tile + j0 * n + i0, n, t);
            for (int k = 0; k < 8; k++) {
                const uint64_t at = (uint64_t)(i0 + (uint32_t)k - lo) * P + j0;
                if (bytes == 2)
                    _mm_storeu_si128((__m128i *)((uint16_t *)rows + at), t[k]);
                else
                    _mm_storel_epi64((__m128i *)(rows + at), _mm_packus_epi16(t[k], t[k]));
            }
        }
        /* Columns past the last full block. */
        for (uint32_t i = i0; i < i0 + 8; i++)
            for (uint64_t j = j_full; j < width; j++) {
                const uint64_t at = (uint64_t)(i - lo) * P + j;
                if (bytes == 2)
                    ((uint16_t *)rows)[at] = tile[j * n + i];
                else
                    rows[at] = (uint8_t)tile[j * n + i];
            }
    }
#endif
    for (uint32_t i = i0; i < hi; i++)
        for (uint64_t j = 0; j < width; j++) {
            const uint64_t at = (uint64_t)(i - lo) * P + j;
            if (bytes == 2)
                ((uint16_t *)rows)[at] = tile[j * n + i];
            else
                rows[at] = (uint8_t)tile[j * n + i];
        }
}

