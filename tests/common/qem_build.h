/* Builds .qem files byte by byte for malformed-input tests: a valid file
 * taken apart into header JSON and body, mutated, and put back together
 * with fresh checksums so that only the intended rule is broken. */
#ifndef QEM_TEST_QEM_BUILD_H
#define QEM_TEST_QEM_BUILD_H

#include <jansson.h>

#include "test_util.h"

typedef struct qem_parts {
    json_t *header;
    uint8_t *body;
    size_t body_size;
} qem_parts;

/* Splits a .qem file into its parts (no validation). */
int qem_parts_load(const char *path, qem_parts *parts);
void qem_parts_free(qem_parts *parts);

/* Writes header + body to `path`. With `rehash_body`, the sha256 table is
 * recomputed over `body`; the header checksum is always recomputed. */
int qem_parts_write(const char *path, json_t *header, const uint8_t *body, size_t body_size,
                    int rehash_body);

/* Writes a file from raw header text: a valid prefix and header checksum
 * around whatever `header` holds, followed by `body`. */
int qem_raw_write(const char *path, const char *header, size_t header_size, const uint8_t *body,
                  size_t body_size);

/* Opens `path` and returns the status; `error` receives the message. */
qem_status open_status(const char *path, qem_error *error);

/* Writes `path` as `src` with `field` of the writer's record `record`
 * (scientific_metadata.extensions[record]) set to `value` (stolen; NULL
 * deletes the field; a NULL field sets the record itself), the header
 * rehashed so that only that rule can fail; returns the open's status. */
qem_status record_tampered(const char *src, const char *path, const char *record,
                           const char *field, json_t *value, qem_error *error);

/* Body-relative byte offset of array `a` of chunk `c` in an integer file. */
uint64_t array_offset(json_t *header, size_t c, size_t a);

#endif
