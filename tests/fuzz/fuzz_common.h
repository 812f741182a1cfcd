/* Shared by the fuzz targets: a scratch folder on tmpfs where possible,
 * and writing the fuzzer's bytes (or a file assembled from them) there. */
#ifndef QEM_FUZZ_COMMON_H
#define QEM_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* A per-process path for the file under test. */
const char *fuzz_path(const char *name);
/* Writes `size` bytes to `path`, replacing it. Returns 0 on failure. */
int fuzz_write(const char *path, const uint8_t *data, size_t size);
/* Reads a little-endian u32 from data at *at, advancing; 0 past the end. */
uint32_t fuzz_u32(const uint8_t *data, size_t size, size_t *at);

/* Opens, loads (stored digests too) and reads a pack, both values. */
void fuzz_pack_exercise(const char *path);

/* Products of a decoded file beyond this are not read: the fuzzer looks
 * for wrong decisions, not for how long a large valid file takes. */
#define FUZZ_MAX_VALUES (1u << 22)

#endif
