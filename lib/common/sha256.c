#include "common/sha256.h"

#include <stdlib.h>
#include <string.h>

#include "common/crypto_loader.h"
#include "common/fileio.h"

#include "common/error.h"

/* libcrypto is reached only through the loader's table: the first digest
 * of the process loads it (common/crypto_loader.h). */
struct qem_sha256 {
    const qem_crypto *c;
    EVP_MD_CTX *md;
};

qem_sha256 *qem_sha256_new(void)
{
    const qem_crypto *c = qem_crypto_get();
    if (!c)
        return NULL;
    qem_sha256 *ctx = malloc(sizeof *ctx);
    if (!ctx)
        return NULL;
    ctx->c = c;
    ctx->md = c->md_ctx_new();
    if (!ctx->md || c->digest_init_ex(ctx->md, c->sha256, NULL) != 1) {
        qem_sha256_free(ctx);
        return NULL;
    }
    return ctx;
}

void qem_sha256_free(qem_sha256 *ctx)
{
    if (!ctx)
        return;
    ctx->c->md_ctx_free(ctx->md);
    free(ctx);
}

int qem_sha256_update(qem_sha256 *ctx, const void *data, size_t size)
{
    return ctx->c->digest_update(ctx->md, data, size) == 1 ? 0 : -1;
}

int qem_sha256_reset(qem_sha256 *ctx)
{
    return ctx->c->digest_init_ex(ctx->md, ctx->c->sha256, NULL) == 1 ? 0 : -1;
}

int qem_sha256_final(qem_sha256 *ctx, uint8_t digest[QEM_SHA256_BYTES])
{
    unsigned len = 0;
    if (ctx->c->digest_final_ex(ctx->md, digest, &len) != 1 || len != QEM_SHA256_BYTES)
        return -1;
    return ctx->c->digest_init_ex(ctx->md, ctx->c->sha256, NULL) == 1 ? 0 : -1;
}

int qem_sha256_oneshot(const void *data, size_t size, uint8_t digest[QEM_SHA256_BYTES])
{
    const qem_crypto *c = qem_crypto_get();
    unsigned len = 0;
    if (!c || c->digest(data, size, digest, &len, c->sha256, NULL) != 1 ||
        len != QEM_SHA256_BYTES)
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
    QEM_TRY(qem_crypto_require(error));
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

int qem_sha256_parse_hex(const char *hex, uint8_t digest[QEM_SHA256_BYTES])
{
    if (!hex || strlen(hex) != 2 * QEM_SHA256_BYTES)
        return 0;
    for (int i = 0; i < 2 * QEM_SHA256_BYTES; i++) {
        const char c = hex[i];
        const int v = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
        if (v < 0)
            return 0;
        if (i % 2 == 0)
            digest[i / 2] = (uint8_t)(v << 4);
        else
            digest[i / 2] |= (uint8_t)v;
    }
    return 1;
}

qem_status qem_file_digest_check(int fd, uint64_t size, const char *expect_hex, const char *path,
                                 qem_progress_fn progress, void *progress_user, qem_error *error)
{
    uint8_t want[QEM_SHA256_BYTES];
    if (!qem_sha256_parse_hex(expect_hex, want))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the expected SHA-256 must be 64 hexadecimal digits");
    QEM_TRY(qem_crypto_require(error));
    enum { PIECE = 4 << 20 };
    uint8_t *buf = malloc(PIECE);
    qem_sha256 *ctx = qem_sha256_new();
    qem_status st = buf && ctx ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t at = 0; st == QEM_OK && at < size; at += PIECE) {
        const size_t n = size - at < PIECE ? (size_t)(size - at) : PIECE;
        st = qem_pread_full(fd, buf, n, at, QEM_E_IO, error);
        if (st == QEM_OK && qem_sha256_update(ctx, buf, n) != 0)
            st = qem_fail(error, QEM_E_NO_MEMORY, "SHA-256 failed");
        /* Every 64 MiB and at the end: a caller can stop a long digest. */
        const uint64_t done = at + n;
        if (st == QEM_OK && progress && (done % (64u << 20) == 0 || done == size) &&
            progress(progress_user, done, size))
            st = qem_fail(error, QEM_E_CANCELLED, "cancelled while hashing '%s'", path);
    }
    uint8_t got[QEM_SHA256_BYTES];
    if (st == QEM_OK && qem_sha256_final(ctx, got) != 0)
        st = qem_fail(error, QEM_E_NO_MEMORY, "SHA-256 failed");
    if (st == QEM_OK && memcmp(got, want, sizeof want) != 0) {
        char hex[65];
        qem_sha256_hex(got, hex);
        st = qem_fail(error, QEM_E_FILE_DIGEST,
                      "the SHA-256 of '%s' is %s, not the expected identity; it is not the "
                      "qualified file",
                      path, hex);
    }
    free(buf);
    qem_sha256_free(ctx);
    return st;
}
