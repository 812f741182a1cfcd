#include "dense.h"

void bench_dense_virtual(const uint16_t *cube, uint64_t scans, uint64_t pixels,
                         const uint32_t *idx, uint64_t n, uint64_t *out, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (uint64_t s = 0; s < scans; s++) {
        const uint16_t *f = cube + s * pixels;
        uint64_t acc = 0;
        for (uint64_t k = 0; k < n; k++)
            acc += f[idx[k]];
        out[s] = acc;
    }
}
