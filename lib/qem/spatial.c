/* Spatial-sum fields: per scan, the sum of valid pixels in every 8x8 tile
 * and then every 32x32 tile (edge tiles truncated at the border). */
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

void qem_spatial_sums_from_rows(const qem_geometry *g, const uint8_t *valid, const void *rows,
                                qem_dtype dtype, uint64_t n, uint64_t *sums)
{
    const uint64_t P = g->pixels;
    memset(sums, 0, (size_t)(n * g->fields) * sizeof *sums);
    for (uint64_t s = 0; s < n; s++) {
        uint64_t *f = sums + s * g->fields;
        for (uint64_t r = 0; r < g->rows; r++) {
            for (uint64_t c = 0; c < g->columns; c++) {
                uint64_t p = r * g->columns + c;
                if (!valid[p])
                    continue;
                uint64_t v = dtype == QEM_DTYPE_UINT8 ? ((const uint8_t *)rows)[s * P + p]
                                                      : ((const uint16_t *)rows)[s * P + p];
                f[qem_field8_of(g, r, c)] += v;
            }
        }
        /* A 32x32 tile is exactly the 8x8 tiles inside it. */
        for (uint32_t t = 0; t < g->fields8; t++) {
            uint64_t tr = t / g->tile8_columns, tc = t % g->tile8_columns;
            f[g->fields8 + (tr / 4) * g->tile32_columns + tc / 4] += f[t];
        }
    }
}
