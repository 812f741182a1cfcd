/* Standard base64 (RFC 4648, with padding) through OpenSSL libcrypto,
 * loaded on first use (common/crypto_loader.h): NULL if it cannot be. */
#ifndef QEM_COMMON_BASE64_H
#define QEM_COMMON_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Decodes strict base64 (no whitespace, length a multiple of 4, padding
 * only at the end). Returns a malloc'd buffer and its size, or NULL. */
uint8_t *qem_base64_decode(const char *text, size_t length, size_t *size);

/* Encodes `size` bytes; returns a malloc'd NUL-terminated string or NULL. */
char *qem_base64_encode(const void *data, size_t size);

#endif
