/* OpenSSL libcrypto, opened on first use rather than linked: mapping and
 * relocating it costs a command about as much as everything else it does
 * at start-up, so commands that hash nothing never load it (issue 28). */
#ifndef QEM_COMMON_CRYPTO_LOADER_H
#define QEM_COMMON_CRYPTO_LOADER_H

#include <openssl/evp.h>
#include <stddef.h>

#include "qem.h"

/* The soname qem was built against (find_package(OpenSSL 3)). */
#define QEM_LIBCRYPTO_SONAME "libcrypto.so.3"

/* The libcrypto calls qem makes, with the prototypes of <openssl/evp.h>
 * (the loader checks each field against its declaration at compile time). */
typedef EVP_MD_CTX *(*qem_crypto_md_ctx_new_fn)(void);
typedef void (*qem_crypto_md_ctx_free_fn)(EVP_MD_CTX *ctx);
typedef int (*qem_crypto_digest_init_ex_fn)(EVP_MD_CTX *ctx, const EVP_MD *type, ENGINE *impl);
typedef int (*qem_crypto_digest_update_fn)(EVP_MD_CTX *ctx, const void *d, size_t cnt);
typedef int (*qem_crypto_digest_final_ex_fn)(EVP_MD_CTX *ctx, unsigned char *md, unsigned int *s);
typedef int (*qem_crypto_digest_fn)(const void *data, size_t count, unsigned char *md,
                                    unsigned int *size, const EVP_MD *type, ENGINE *impl);
typedef const EVP_MD *(*qem_crypto_sha256_fn)(void);
typedef int (*qem_crypto_block_fn)(unsigned char *t, const unsigned char *f, int n);

typedef struct qem_crypto {
    qem_crypto_md_ctx_new_fn md_ctx_new;
    qem_crypto_md_ctx_free_fn md_ctx_free;
    qem_crypto_digest_init_ex_fn digest_init_ex;
    qem_crypto_digest_update_fn digest_update;
    qem_crypto_digest_final_ex_fn digest_final_ex;
    qem_crypto_digest_fn digest;
    qem_crypto_block_fn encode_block;
    qem_crypto_block_fn decode_block;
    qem_crypto_sha256_fn sha256_fn;
    const EVP_MD *sha256; /* sha256_fn(), asked once at load */
} qem_crypto;

/* The table, loading libcrypto on the first call of the process (once,
 * whichever thread gets there first); NULL if it cannot be loaded. */
const qem_crypto *qem_crypto_get(void);

/* QEM_OK once libcrypto is loaded; else QEM_E_IO with "cannot load OpenSSL
 * libcrypto (libcrypto.so.3): <why>". */
qem_status qem_crypto_require(qem_error *error);

/* Opens `soname` and fills `out` (the tests' way to see the failure path
 * without breaking the process's own table); 0, or -1 with `why` filled.
 * The handle is never closed: `out` points into it. */
int qem_crypto_bind(const char *soname, qem_crypto *out, char *why, size_t why_size);

#endif
