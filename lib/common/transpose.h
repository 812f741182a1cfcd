/* Column tiles (one pixel's n samples after another, as count streams and
 * pack tiles decode) into scan rows (one scan's pixels after another), by
 * 8x8 SSE2 blocks where the target has them; the scalar loop handles edges
 * and is the reference. */
#ifndef QEM_COMMON_TRANSPOSE_H
#define QEM_COMMON_TRANSPOSE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__SSE2__)
#include <emmintrin.h>

/* Eight rows of eight u16 (`src_stride` elements apart) become eight
 * columns; shared by the pack transpose and the count-stream decoders. */
static inline void qem_transpose8x8_u16(const uint16_t *src, size_t src_stride, __m128i out[8])
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

/* Samples [lo, hi) of `width` columns of stride n into rows of stride P
 * (elements) at `rows`, as u16 (bytes 2) or u8 (bytes 1, values <= 255):
 * row i - lo, column j gets column j's sample i. */
void qem_transpose_columns(const uint16_t *columns, uint32_t n, uint64_t width, uint32_t lo,
                           uint32_t hi, uint64_t P, uint8_t *rows, int bytes);

#endif
