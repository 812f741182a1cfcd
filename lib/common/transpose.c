#include "common/transpose.h"

/* Counts from column tiles (one pixel's n samples after another) into scan
 * rows: a transpose. 8x8 blocks go through SSE2 registers (x86-64
 * baseline); edges and other targets take the scalar loop, which is also
 * the reference the tests compare against. */

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
            qem_transpose8x8_u16(tile + j0 * n + i0, n, t);
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

