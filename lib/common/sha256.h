/* SHA-256 through OpenSSL libcrypto (loaded on the first digest:
 * common/crypto_loader.h), plus the .qem body-block hasher. A context or
 * digest call fails (NULL, -1) when libcrypto cannot be loaded, and
 * qem_crypto_require() of common/crypto_loader.h says why. */
#ifndef QEM_COMMON_SHA256_H
#define QEM_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "qem.h"

#define QEM_SHA256_BYTES 32

typedef struct qem_sha256 qem_sha256;

qem_sha256 *qem_sha256_new(void);
void qem_sha256_free(qem_sha256 *ctx);
int qem_sha256_update(qem_sha256 *ctx, const void *data, size_t size);
/* Starts over (after a failed read left a partial message); 0 on success. */
int qem_sha256_reset(qem_sha256 *ctx);
/* Writes the digest and resets the context for reuse. */
int qem_sha256_final(qem_sha256 *ctx, uint8_t digest[QEM_SHA256_BYTES]);

/* One-shot digest; returns 0 on success. */
int qem_sha256_oneshot(const void *data, size_t size, uint8_t digest[QEM_SHA256_BYTES]);

/* Lowercase hex of a digest into `hex` (65 bytes with the NUL). */
void qem_sha256_hex(const uint8_t digest[QEM_SHA256_BYTES], char hex[65]);

/* Parses 64 hexadecimal digits (either case) into a digest; 0 if `hex` is
 * anything else. */
int qem_sha256_parse_hex(const char *hex, uint8_t digest[QEM_SHA256_BYTES]);

/* The whole-file identity check behind every --expect-sha256: SHA-256 of
 * bytes [0, size) of `fd` against `expect_hex`. QEM_E_INVALID_ARGUMENT for
 * malformed hex, QEM_E_FILE_DIGEST (naming `path`) on a mismatch.
 * `progress` (or NULL) hears the bytes hashed every 64 MiB; nonzero
 * cancels (QEM_E_CANCELLED). */
qem_status qem_file_digest_check(int fd, uint64_t size, const char *expect_hex, const char *path,
                                 qem_progress_fn progress, void *progress_user, qem_error *error);

/* Digests of consecutive fixed-size blocks of a byte stream: the .qem body
 * checksum table (64 MiB blocks, only the last one shorter). */
typedef struct qem_block_hasher {
    qem_sha256 *ctx;
    uint64_t block_size;
    uint64_t in_block;   /* bytes fed into the current block */
    uint8_t (*digests)[QEM_SHA256_BYTES];
    size_t count;
    size_t capacity;
} qem_block_hasher;

qem_status qem_block_hasher_init(qem_block_hasher *h, uint64_t block_size, qem_error *error);
qem_status qem_block_hasher_update(qem_block_hasher *h, const void *data, size_t size,
                                   qem_error *error);
/* Closes the last (partial) block if it holds any bytes. */
qem_status qem_block_hasher_finish(qem_block_hasher *h, qem_error *error);
void qem_block_hasher_free(qem_block_hasher *h);

#endif
