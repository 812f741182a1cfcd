/* Seeds of fuzz_frms6 (seeds_frms6.c). */
#ifndef QEM_FUZZ_SEEDS_FRMS6_H
#define QEM_FUZZ_SEEDS_FRMS6_H

/* Writes OUT/frms6/: no public FRMS6 file exists (nor under `shared` or
 * `hyperspy_io`), so the seeds are built with tests/common/k2frms_build.c. */
void seeds_frms6(const char *shared, const char *hyperspy_io, const char *out);

#endif
