/* Seeds of fuzz_blo (tests/fuzz/seeds_blo.c). */
#ifndef QEM_FUZZ_SEEDS_BLO_H
#define QEM_FUZZ_SEEDS_BLO_H

/* Writes OUT/blo/: HyperSpy's two blockfiles (from HYPERSPY_IO, its
 * tests/io folder) and small ones built by tests/common/blo_build.c, each
 * behind the two scan-shape bytes fuzz_blo reads. */
void seeds_blo(const char *shared, const char *hyperspy_io, const char *out);

#endif
