/* The seeds of fuzz_dm: HyperSpy's DM3/DM4 test files and built ones. */
#ifndef QEM_FUZZ_SEEDS_DM_H
#define QEM_FUZZ_SEEDS_DM_H

void seeds_dm(const char *shared, const char *hyperspy_io, const char *out);

#endif
