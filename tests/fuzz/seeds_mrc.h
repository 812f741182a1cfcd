/* Seeds of fuzz_mrc (tests/fuzz/seeds_mrc.c). */
#ifndef QEM_FUZZ_SEEDS_MRC_H
#define QEM_FUZZ_SEEDS_MRC_H

/* Writes OUT/mrc/: small MRC files of every mode qem reads, both byte
 * orders and an extended header, built by tests/common/mrc_build.c, each
 * behind the two scan-shape bytes fuzz_mrc reads. */
void seeds_mrc(const char *shared, const char *hyperspy_io, const char *out);

#endif
