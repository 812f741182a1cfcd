/* Seeds of fuzz_tia (tests/fuzz/seeds_tia.c). */
#ifndef QEM_FUZZ_SEEDS_TIA_H
#define QEM_FUZZ_SEEDS_TIA_H

/* Writes OUT/tia/: HyperSpy's real TIA files (HYPERSPY_IO/FEI_*, cut to
 * their first elements where large) and files built by tia_build.c. */
void seeds_tia(const char *shared, const char *hyperspy_io, const char *out);

#endif
