#include "common/sha256.h"

#include <openssl/evp.h>
#include <stdlib.h>

#include "common/error.h"

struct qem_sha256 {
    EVP_MD_CTX *md;
};

qem_sha256 *qem_sha256_new(void)
{
    qem_sha256 *ctx = malloc(sizeof *ctx);
    if (!ctx)
        return NULL;
    ctx->md = EVP_MD_CTX_new();
    if (!ctx->md || EVP_DigestInit_ex(ctx->md, EVP_sha256(), NULL) != 1) {
        qem_sha256_free(ctx);
        return NULL;
    }
    return ctx;
}

void qem_sha256_free(qem_sha256 *ctx)
{
    if (!ctx)
        return;
    EVP_MD_CTX_free(ctx->md);
    free(ctx);
}

int qem_sha256_update(qem_sha256 *ctx, const void *data, size_t size)
{
    return EVP_DigestUpdate(ctx->md, data, size) == 1 ? 0 : -1;
}

int qem_sha256_reset(qem_sha256 *ctx)
{
    return EVP_DigestInit_ex(ctx->md, EVP_sha256(), NULL) == 1 ? 0 : -1;
}

int qem_sha256_final(qem_sha256 *ctx, uint8_t digest[QEM_SHA256_BYTES])
{
    unsigned len = 0;
    if (EVP_DigestFinal_ex(ctx->md, digest, &len) != 1 || len != QEM_SHA256_BYTES)
        return -1;
    return EVP_DigestInit_ex(ctx->md, EVP_sha256(), NULL) == 1 ? 0 : -1;
}

int qem_sha256_oneshot(const void *data, size_t size, uint8_t digest[QEM_SHA256_BYTES])
{
    unsigned len = 0;
    if (EVP_Digest(data, size, digest, &len, EVP_sha256(), NULL) != 1 || len != QEM_SHA256_BYTES)
        return -1;
    return 0;
}

void qem_sha256_hex(const uint8_t digest[QEM_SHA256_BYTES], char hex[65])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < QEM_SHA256_BYTES; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[64] = '\0';
}

qem_status qem_block_hasher_init(qem_block_hasher *h, uint64_t block_size, qem_error *error)
{
    *h = (qem_block_hasher){0};
    h->block_size = block_size;
    h->ctx = qem_sha256_new();
    if (!h->ctx)
        return qem_fail(error, QEM_E_NO_MEMORY, "cannot create a SHA-256 context");
    return QEM_OK;
}

static qem_status close_block(qem_block_hasher *h, qem_error *error)
{
    if (h->count == h->capacity) {
        size_t cap = h->capacity ? 2 * h->capacity : 16;
        void *grown = realloc(h->digests, cap * sizeof *h->digests);
        if (!grown)
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        h->digests = grown;
        h->capacity = cap;
    }
    if (qem_sha256_final(h->ctx, h->digests[h->count]) != 0)
        return qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
    h->count++;
    h->in_block = 0;
    return QEM_OK;
}

qem_status qem_block_hasher_update(qem_block_hasher *h, const void *data, size_t size,
                                   qem_error *error)
{
    const unsigned char *p = data;
    while (size > 0) {
        uint64_t room = h->block_size - h->in_block;
        size_t take = size < room ? size : (size_t)room;
        if (qem_sha256_update(h->ctx, p, take) != 0)
            return qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
        h->in_block += take;
        p += take;
        size -= take;
        if (h->in_block == h->block_size)
            QEM_TRY(close_block(h, error));
    }
    return QEM_OK;
}

qem_status qem_block_hasher_finish(qem_block_hasher *h, qem_error *error)
{
    if (h->in_block > 0)
        QEM_TRY(close_block(h, error));
    return QEM_OK;
}

void qem_block_hasher_free(qem_block_hasher *h)
{
    qem_sha256_free(h->ctx);
    free(h->digests);
    *h = (qem_block_hasher){0};
}
