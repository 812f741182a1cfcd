/* Seeds of fuzz_seq: Norpix sequences and a Celeritas pair built here. */
#ifndef QEM_FUZZ_SEEDS_SEQ_H
#define QEM_FUZZ_SEEDS_SEQ_H

void seeds_seq(const char *shared, const char *hyperspy_io, const char *out);

#endif
