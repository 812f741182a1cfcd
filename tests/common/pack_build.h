/* Builds pack files from the byte rules, as the upstream test writers do:
 * a user block (prelude, manifest, index) followed by the shard ranges, no
 * HDF5 structures. Tests then mutate manifest, index or ranges. */
#ifndef QEM_TEST_PACK_BUILD_H
#define QEM_TEST_PACK_BUILD_H

#include <jansson.h>

#include "pack/encode.h"
#include "test_util.h"

typedef struct pack_spec {
    qem_pack_profile profile;
    uint64_t shape[4];
    uint64_t sps;
    const uint16_t *data;       /* source values, C order */
    const uint32_t *excluded;   /* ascending */
    uint64_t excluded_count;
    int retained_policy;        /* uint16/LZ4: declare retained_exactly_in_payload */
    qem_dtype working_dtype;    /* uint16/LZ4 label; uint8 for legacy files */
    int raw_constants;          /* uint8/bitpacked: write the portability fields */
    int calibration;            /* add a valid detector_calibration */
} pack_spec;

typedef struct pack_built {
    json_t *manifest;
    uint8_t *block;   /* the user block as first built */
    uint8_t *index;   /* the binary index as first built */
    uint8_t *ranges;  /* everything after it */
    uint64_t ranges_bytes;
    uint64_t index_offset, index_bytes;
    pack_shard_record *records;
    uint64_t shard_count;
} pack_built;

#define PACK_TEST_BLOCK 8192u

/* Builds and writes `path`; `out` (optional) keeps the parts for mutation. */
int pack_build(const char *path, const pack_spec *spec, pack_built *out);
void pack_built_free(pack_built *b);

/* Writes the parts again with a new manifest (CRC recomputed) and/or a
 * new index (NULL keeps the built one); the ranges stay where they were. */
int pack_rewrite(const char *path, const pack_built *b, const json_t *manifest,
                 const uint8_t *index, uint64_t index_bytes);

/* Opens and loads; returns the first failing status (QEM_OK if both pass)
 * and reports whether the pack ended up loaded. */
qem_status pack_open_load(const char *path, qem_error *error, int *loaded);

#endif
