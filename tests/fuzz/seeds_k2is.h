/* Seeds of fuzz_k2is (seeds_k2is.c). */
#ifndef QEM_FUZZ_SEEDS_K2IS_H
#define QEM_FUZZ_SEEDS_K2IS_H

/* Writes OUT/k2is/: no public K2 IS file exists (nor under `shared` or
 * `hyperspy_io`), so the seeds are built with tests/common/k2frms_build.c. */
void seeds_k2is(const char *shared, const char *hyperspy_io, const char *out);

#endif
