/* The dense baseline the benchmarks compare against: a virtual image by a
 * plain C loop over a cube of uint16 patterns in memory (or mapped). */
#ifndef QEM_BENCH_DENSE_H
#define QEM_BENCH_DENSE_H

#include <stdint.h>

/* Per scan, the sum of the counts at pixels idx[0 .. n), exact in uint64,
 * scans split over `threads`. */
void bench_dense_virtual(const uint16_t *cube, uint64_t scans, uint64_t pixels,
                         const uint32_t *idx, uint64_t n, uint64_t *out, int threads);

#endif
