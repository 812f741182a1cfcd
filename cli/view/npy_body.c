/* .npy bodies for the API, built in memory with the very header bytes the
 * library's writer puts in front of a product (lib/common/npy.c): version
 * 1.0, the same dictionary text, spaces to a 64-byte boundary, '\n'.
 * tests/viewer compares these bodies with `qem ... -o X.npy` byte for byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "view/server.h"

unsigned char *view_npy_encode(qem_dtype dtype, unsigned ndim, const uint64_t *shape,
                               const void *data, size_t *length)
{
    const char *descr = dtype == QEM_DTYPE_UINT8     ? "|u1"
                        : dtype == QEM_DTYPE_UINT16  ? "<u2"
                        : dtype == QEM_DTYPE_FLOAT32 ? "<f4"
                        : dtype == QEM_DTYPE_UINT32  ? "<u4"
                        : dtype == QEM_DTYPE_UINT64  ? "<u8"
                        : dtype == QEM_DTYPE_FLOAT64 ? "<f8"
                                                     : NULL;
    if (!descr || ndim == 0 || ndim > 4)
        return NULL;
    char dict[256];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    uint64_t elements = 1;
    for (unsigned i = 0; i < ndim; i++) {
        if (shape[i] && elements > SIZE_MAX / shape[i])
            return NULL;
        elements *= shape[i];
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%llu%s", (unsigned long long)shape[i],
                      (ndim == 1 || i + 1 < ndim) ? ", " : "");
    }
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    const size_t item = qem_dtype_size(dtype);
    if (elements > (SIZE_MAX - 1024) / item)
        return NULL;
    const size_t padded = (10 + (size_t)n + 1 + 63) / 64 * 64;
    const size_t bytes = (size_t)elements * item;
    unsigned char *out = malloc(padded + bytes);
    if (!out)
        return NULL;
    const size_t header_len = padded - 10;
    memcpy(out, "\x93NUMPY", 6);
    out[6] = 1;
    out[7] = 0;
    out[8] = (unsigned char)(header_len & 255);
    out[9] = (unsigned char)(header_len >> 8);
    memcpy(out + 10, dict, (size_t)n);
    memset(out + 10 + n, ' ', header_len - (size_t)n - 1);
    out[padded - 1] = '\n';
    if (bytes)
        memcpy(out + padded, data, bytes);
    *length = padded + bytes;
    return out;
}
