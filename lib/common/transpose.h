/* Column tiles (one pixel's n samples after another, as count streams and
 * pack tiles decode) into scan rows (one scan's pixels after another), by
 * 8x8 SSE2 blocks where the target has them; the scalar loop handles edges
 * and is the reference. */
#ifndef QEM_COMMON_TRANSPOSE_H
#define QEM_COMMON_TRANSPOSE_H

#include <stdint.h>

/* Samples [lo, hi) of `width` columns of stride n into rows of stride P
 * (elements) at `rows`, as u16 (bytes 2) or u8 (bytes 1, values <= 255):
 * row i - lo, column j gets column j's sample i. */
void qem_transpose_columns(const uint16_t *columns, uint32_t n, uint64_t width, uint32_t lo,
                           uint32_t hi, uint64_t P, uint8_t *rows, int bytes);

#endif
