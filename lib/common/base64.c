#include "common/base64.h"

#include <stdlib.h>
#include <string.h>

#include "common/crypto_loader.h"

static int is_base64_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '+' || c == '/';
}

uint8_t *qem_base64_decode(const char *text, size_t length, size_t *size)
{
    if (length % 4 != 0 || length > (size_t)INT32_MAX)
        return NULL;
    size_t pad = 0;
    if (length >= 1 && text[length - 1] == '=')
        pad = (length >= 2 && text[length - 2] == '=') ? 2 : 1;
    for (size_t i = 0; i < length - pad; i++)
        if (!is_base64_char(text[i]))
            return NULL; /* OpenSSL would skip whitespace; the format has none */
    const qem_crypto *c = length ? qem_crypto_get() : NULL;
    if (length && !c)
        return NULL;
    uint8_t *out = malloc(length / 4 * 3 + 1);
    if (!out)
        return NULL;
    int n = length ? c->decode_block(out, (const unsigned char *)text, (int)length) : 0;
    if (n < 0 || (size_t)n < pad) {
        free(out);
        return NULL;
    }
    *size = (size_t)n - pad; /* EVP_DecodeBlock counts padding as zero bytes */
    return out;
}

char *qem_base64_encode(const void *data, size_t size)
{
    if (size > (size_t)INT32_MAX / 2)
        return NULL;
    const qem_crypto *c = qem_crypto_get();
    if (!c)
        return NULL;
    char *out = malloc((size + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    c->encode_block((unsigned char *)out, data, (int)size);
    return out;
}
