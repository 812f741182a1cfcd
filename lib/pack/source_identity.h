/* The source identity framing of notes-pack-format §2.6, exposed so that
 * it can be tested against the published vectors on its own. */
#ifndef QEM_PACK_SOURCE_IDENTITY_H
#define QEM_PACK_SOURCE_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include "qem.h"

/* The schema label that opens the framing (followed by one NUL byte). */
#define PACK_SOURCE_IDENTITY_SCHEMA "live4dstem.dataset/v0.1"

/* SHA-256 over: the schema label and one NUL byte; then, when
 * `master_sha256` is not NULL, the master's lowercase hex digest (64 ASCII
 * bytes); then for each of the `data_count` data members one 0x00 byte and
 * its lowercase hex digest. A single-file source passes its digest as the
 * master and no data members. */
qem_status pack_source_identity(const uint8_t *master_sha256, const uint8_t (*data_sha256)[32],
                                size_t data_count, uint8_t identity[32], qem_error *error);

#endif
