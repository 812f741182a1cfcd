/* Identifying a file by its signature (qem_identify). */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/identify.h"

qem_status qem_identify_fd(int fd, uint64_t size, qem_file_kind *kind, qem_error *error)
{
    static const uint8_t hdf5_sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    unsigned char magic[8] = {0};
    qem_status st = size >= 8 ? qem_pread_full(fd, magic, 8, 0, QEM_E_IO, error) : QEM_OK;
    *kind = QEM_KIND_UNKNOWN;
    if (st == QEM_OK && size >= 8 && memcmp(magic, "QEMDATA1", 8) == 0)
        *kind = QEM_KIND_QEM;
    else if (st == QEM_OK && size >= 8 && memcmp(magic, "QGPUH5\0\x01", 8) == 0)
        *kind = QEM_KIND_PACK;
    else if (st == QEM_OK && size >= 6 && memcmp(magic, "\x93NUMPY", 6) == 0)
        *kind = QEM_KIND_NPY;
    /* The HDF5 superblock sits at 0 or after a user block of 512 * 2^k. */
    for (uint64_t off = 0; st == QEM_OK && *kind == QEM_KIND_UNKNOWN && off + 8 <= size;
         off = off ? 2 * off : 512) {
        uint8_t sig[8];
        st = qem_pread_full(fd, sig, 8, off, QEM_E_IO, error);
        if (st == QEM_OK && memcmp(sig, hdf5_sig, 8) == 0)
            *kind = QEM_KIND_HDF5;
    }
    return st;
}

qem_status qem_identify(const char *path, qem_file_kind *kind, qem_error *error)
{
    qem_error_clear(error);
    if (!path || !kind)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_identify: NULL argument");
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(path, &fd, &sb, error));
    const qem_status st = qem_identify_fd(fd, (uint64_t)sb.st_size, kind, error);
    close(fd);
    return st;
}
