/* Seeds of fuzz_velox (seeds_velox.c). */
#ifndef QEM_FUZZ_SEEDS_VELOX_H
#define QEM_FUZZ_SEEDS_VELOX_H

/* OUT/velox/: the Version and Metadata JSON of HyperSpy's Velox files
 * (found in their bytes: Velox stores them uncompressed), and small
 * documents written here. `shared` is unused (no Velox fixture there). */
void seeds_velox(const char *shared, const char *hyperspy_io, const char *out);

#endif
