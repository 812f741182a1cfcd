#include "common/crypto_loader.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/lazy_library.h"

#define BIND(field, name) QEM_LAZY_BIND(handle, out, field, name, why, why_size)

int qem_crypto_bind(const char *soname, qem_crypto *out, char *why, size_t why_size)
{
    memset(out, 0, sizeof *out);
    void *handle = qem_lazy_open(soname, why, why_size);
    if (!handle)
        return -1;
    /* Never closed, even on failure: unloading a library whose
     * initialisers ran is not worth it for an install that is broken. */
    if (BIND(md_ctx_new, EVP_MD_CTX_new) || BIND(md_ctx_free, EVP_MD_CTX_free) ||
        BIND(digest_init_ex, EVP_DigestInit_ex) || BIND(digest_update, EVP_DigestUpdate) ||
        BIND(digest_final_ex, EVP_DigestFinal_ex) || BIND(digest, EVP_Digest) ||
        BIND(encode_block, EVP_EncodeBlock) || BIND(decode_block, EVP_DecodeBlock) ||
        BIND(sha256_fn, EVP_sha256)) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    if (!(out->sha256 = out->sha256_fn())) {
        snprintf(why, why_size, "EVP_sha256() returned no digest");
        memset(out, 0, sizeof *out);
        return -1;
    }
    return 0;
}

/* The process's one loader: written once under pthread_once, read-only
 * after. glibc's pthread_once is fork-safe (a child forked during the
 * call starts it over), and a loaded table stays valid in a child. */
static struct {
    pthread_once_t once;
    int ok;
    qem_crypto table;
    char why[400];
} loader = {.once = PTHREAD_ONCE_INIT};

static void load_once(void)
{
    loader.ok =
        qem_crypto_bind(QEM_LIBCRYPTO_SONAME, &loader.table, loader.why, sizeof loader.why) == 0;
}

const qem_crypto *qem_crypto_get(void)
{
    pthread_once(&loader.once, load_once);
    return loader.ok ? &loader.table : NULL;
}

qem_status qem_crypto_require(qem_error *error)
{
    if (qem_crypto_get())
        return QEM_OK;
    return qem_fail(error, QEM_E_IO, "cannot load OpenSSL libcrypto (%s): %s",
                    QEM_LIBCRYPTO_SONAME, loader.why);
}
