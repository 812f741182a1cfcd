/* The 56-byte prefix: "QEMDATA1", u64 header length L, u64 body start
 * (= 56 + L), raw SHA-256 of the L header bytes. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/byteorder.h"
#include "common/sha256.h"
#include "qem/qem_internal.h"

qem_status qem_envelope_read(int fd, uint64_t file_size, char **header_out, uint64_t *size_out,
                             qem_error *error)
{
    uint8_t prefix[QEM_PREFIX_BYTES];
    if (file_size < QEM_PREFIX_BYTES)
        return qem_fail(error, QEM_E_NOT_QEM,
                        "not a complete QEM file: %llu bytes is shorter than the 56-byte prefix",
                        (unsigned long long)file_size);
    QEM_TRY(qem_pread_full(fd, prefix, sizeof prefix, 0, QEM_E_NOT_QEM, error));
    if (memcmp(prefix, QEM_MAGIC, 8) != 0) {
        if (memcmp(prefix, "QGPUSTRM", 8) == 0 || memcmp(prefix, "QGANS", 5) == 0)
            return qem_fail(error, QEM_E_RETIRED_FORMAT,
                            "this is a retired %.8s snapshot, no longer supported; export the "
                            "original acquisition again as .qem (renaming does not migrate it)",
                            memcmp(prefix, "QGANS", 5) == 0 ? "QGANS" : "QGPUSTRM");
        return qem_fail(error, QEM_E_NOT_QEM,
                        "not a complete QEM file: the QEMDATA1 signature is missing");
    }
    uint64_t header_bytes = qem_get_le64(prefix + 8);
    uint64_t body_start = qem_get_le64(prefix + 16);
    if (header_bytes == 0 || header_bytes > QEM_MAX_HEADER_BYTES)
        return qem_fail(error, QEM_E_HEADER_LENGTH,
                        "QEM header length %llu is outside 1..16 MiB; the file is damaged",
                        (unsigned long long)header_bytes);
    if (body_start != QEM_PREFIX_BYTES + header_bytes)
        return qem_fail(error, QEM_E_HEADER_LENGTH,
                        "QEM body start %llu differs from 56 + header length %llu; the file is "
                        "damaged",
                        (unsigned long long)body_start, (unsigned long long)header_bytes);
    if (body_start > file_size)
        return qem_fail(error, QEM_E_HEADER_LENGTH,
                        "QEM header runs past the end of the file; recopy the file");
    char *header = malloc((size_t)header_bytes + 1);
    if (!header)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    qem_status st = qem_pread_full(fd, header, (size_t)header_bytes, QEM_PREFIX_BYTES,
                                   QEM_E_HEADER_LENGTH, error);
    if (st != QEM_OK) {
        free(header);
        return st;
    }
    header[header_bytes] = '\0';
    uint8_t digest[QEM_SHA256_BYTES];
    if (qem_sha256_oneshot(header, (size_t)header_bytes, digest) != 0) {
        free(header);
        return qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
    }
    if (memcmp(digest, prefix + 24, QEM_SHA256_BYTES) != 0) {
        free(header);
        return qem_fail(error, QEM_E_HEADER_CHECKSUM,
                        "QEM header checksum mismatch; recopy the file.");
    }
    *header_out = header;
    *size_out = header_bytes;
    return QEM_OK;
}

qem_status qem_envelope_prefix(const char *header, size_t size, uint8_t prefix[QEM_PREFIX_BYTES],
                               qem_error *error)
{
    if (size == 0 || size > QEM_MAX_HEADER_BYTES)
        return qem_fail(error, QEM_E_LIMIT,
                        "the QEM header would be %zu bytes, above the 16 MiB limit; save with "
                        "more scans per chunk (--chunk-scans) to shorten the chunk list",
                        size);
    memcpy(prefix, QEM_MAGIC, 8);
    qem_put_le64(prefix + 8, size);
    qem_put_le64(prefix + 16, QEM_PREFIX_BYTES + size);
    if (qem_sha256_oneshot(header, size, prefix + 24) != 0)
        return qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
    return QEM_OK;
}
