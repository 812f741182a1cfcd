/* Seeds of fuzz_csr, built with tests/common/csr_build.c. */
#ifndef QEM_FUZZ_SEEDS_CSR_H
#define QEM_FUZZ_SEEDS_CSR_H

/* Writes OUT/csr/<name> seeds (no real raw_csr file is public here:
 * `shared` and `hyperspy_io` are not read). */
void seeds_csr(const char *shared, const char *hyperspy_io, const char *out);

#endif
