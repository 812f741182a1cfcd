/* Seeds of fuzz_tvips: HyperSpy's TVIPS files and series built here. */
#ifndef QEM_FUZZ_SEEDS_TVIPS_H
#define QEM_FUZZ_SEEDS_TVIPS_H

void seeds_tvips(const char *shared, const char *hyperspy_io, const char *out);

#endif
